//! The four Lua scripts: each algorithm's body (the shared prelude first) and the suffix of
//! its key.

use tollgate::Algorithm;

/// The four scripts, each loaded once per server and called by its SHA1.
pub(crate) struct Script {
    pub(crate) body: &'static str,
    pub(crate) sha: String,
}

impl Script {
    pub(crate) fn new(body: &'static str) -> Self {
        Script {
            body,
            sha: redis::Script::new(body).get_hash().to_owned(),
        }
    }
}

pub(crate) fn script_for(algorithm: Algorithm) -> (&'static str, &'static [&'static str]) {
    match algorithm {
        Algorithm::TokenBucket => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/token_bucket.lua")
            ),
            &[":tb"],
        ),
        Algorithm::FixedWindow => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/fixed_window.lua")
            ),
            &[":fw"],
        ),
        Algorithm::SlidingWindow => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/sliding_window.lua")
            ),
            &[":swc"],
        ),
        Algorithm::SlidingLog => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/sliding_log.lua")
            ),
            &[":log"],
        ),
    }
}
