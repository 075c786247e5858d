//! What the instruction-count benchmarks share (`benches/instructions.rs`,
//! `benches/instructions_keyed.rs`): the request loop, the frozen clock, the two quotas, the
//! gate's limit and the declaration of a benchmark ([`gate_bench!`]).

use std::hint::black_box;
use std::time::Duration;

use gungraun::prelude::*;
use gungraun::{Callgrind, EventKind};
use tollgate::{ManualClock, Quota};

use crate::peers::Check;

/// Requests per benchmark: the counts are per `CALLS` requests (divide to get one request).
pub const CALLS: u64 = 100;

/// The largest growth, in percent of the baseline's instruction count, that passes the gate.
pub const MAX_GROWTH_PERCENT: f64 = 5.0;

/// callgrind, failing the run when any count grows by more than [`MAX_GROWTH_PERCENT`].
pub fn config() -> LibraryBenchmarkConfig {
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(Callgrind::default().soft_limits([(EventKind::Ir, MAX_GROWTH_PERCENT)]));
    config
}

/// One request, as a function of its own: what the compiler inlines into it depends on the
/// limiter's code alone, not on how it would fold a loop of requests around it.
#[inline(never)]
pub fn request<L: Check>(limiter: &L) -> bool {
    limiter.check()
}

/// Makes `CALLS` requests; returns the limiter so that dropping it is not counted.
#[inline(always)]
pub fn run<L: Check>(limiter: L) -> L {
    for _ in 0..CALLS {
        black_box(request(black_box(&limiter)));
    }
    limiter
}

/// A limiter made on a manual clock at zero, the clock then frozen at one second: a limiter
/// counts from its first reading, so this measures it a second into its life (a sliding
/// window's ring full of past slots), not at its first instant.
pub fn started<L>(make: impl FnOnce(ManualClock) -> L) -> L {
    let clock = ManualClock::new();
    let limiter = make(clock.clone());
    clock.set(Duration::from_secs(1));
    limiter
}

/// Far more than `CALLS` per second: every request allowed at a frozen instant.
pub fn open() -> Quota {
    Quota::per_second(1_000_000).unwrap()
}

/// One per hour: after the first, every request denied.
pub fn closed() -> Quota {
    Quota::per_hour(1).unwrap()
}

/// Declares the benchmark function `$name`, which measures [`run`] on a limiter of type
/// `$limiter`: one gungraun bench per case (`allowed`, `denied`), each on the limiter its
/// expression makes, outside the measurement.
///
/// ```text
/// gate_bench!(peer_governor(Gov), allowed = governor_open(), denied = governor_closed());
/// ```
macro_rules! gate_bench {
    ($name:ident($limiter:ty) $(, $case:ident = $make:expr)+ $(,)?) => {
        #[library_benchmark]
        $(#[bench::$case($make)])+
        fn $name(limiter: $limiter) -> $limiter {
            $crate::gate::run(limiter)
        }
    };
}
pub(crate) use gate_bench;
