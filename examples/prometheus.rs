//! Exporting `Metered` counters in the Prometheus text exposition format.
//!
//! ```text
//! cargo run --example prometheus
//! ```
//!
//! A proxy with a global limit and a per-client map serves a burst of traffic, then prints
//! what a `/metrics` endpoint would answer. The format is plain text, so no client library
//! is needed: one `# HELP` and `# TYPE` line per metric family, then one line per series.

use std::fmt::Write;
use std::time::Duration;

use tollgate::{
    Algorithm, KeyedLimiter, Limiter, ManualClock, Metered, MetricsSnapshot, Quota, TokenBucket,
};

/// One labelled series per limiter and outcome, in the text format (version 0.0.4).
fn render(limiters: &[(&str, MetricsSnapshot)]) -> String {
    let mut out = String::new();
    out.push_str("# HELP tollgate_decisions_total Rate-limit decisions, by limiter and outcome.\n");
    out.push_str("# TYPE tollgate_decisions_total counter\n");
    for (name, s) in limiters {
        for (outcome, value) in [
            ("allowed", s.allowed),
            ("denied", s.denied),
            ("exceeded_capacity", s.exceeded_capacity),
        ] {
            writeln!(
                out,
                "tollgate_decisions_total{{limiter=\"{}\",outcome=\"{outcome}\"}} {value}",
                escape(name)
            )
            .unwrap();
        }
    }
    out.push_str("# HELP tollgate_evicted_keys_total Keys evicted from a keyed limiter.\n");
    out.push_str("# TYPE tollgate_evicted_keys_total counter\n");
    for (name, s) in limiters {
        writeln!(
            out,
            "tollgate_evicted_keys_total{{limiter=\"{}\"}} {}",
            escape(name),
            s.evicted_keys
        )
        .unwrap();
    }
    out
}

/// A label value escapes `\`, `"` and newlines.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn main() -> Result<(), tollgate::QuotaError> {
    let clock = ManualClock::new();
    let global = Metered::named(
        "global",
        TokenBucket::with_clock(Quota::per_second(20)?, clock.clone()),
    );
    let per_client = Metered::named(
        "per_client",
        KeyedLimiter::<u32, _>::try_with_clock(
            Algorithm::SlidingWindow,
            Quota::per_second(10)?,
            clock.clone(),
        )?,
    );

    // Three clients, 20 requests each, every 10 ms; client 7 also asks for a 100-unit batch.
    for _ in 0..20 {
        for client in [1, 2, 7] {
            if per_client.try_acquire(&client).is_allowed() {
                let _ = global.try_acquire();
            }
        }
        clock.advance(Duration::from_millis(10));
    }
    let _ = per_client.try_acquire_n(&7, 100);
    clock.advance(Duration::from_secs(2));
    per_client.evict_idle();

    let text = render(&[
        (global.name(), global.snapshot()),
        (per_client.name(), per_client.snapshot()),
    ]);
    print!("{text}");
    Ok(())
}
