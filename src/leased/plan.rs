//! The pure grant: what one compare-exchange on `tat` gives back and takes.

use crate::quota::{GcraParams, HORIZON};

/// What one compare-exchange on `tat` does: give back, then take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The word to write, if anything changes.
    pub(crate) write: Option<u64>,
    /// `tat` after the give-back, before the take: what the decision is made on.
    pub(crate) base: u64,
    /// Tokens of the give-back the bucket was missing, hence credited.
    pub(crate) credited: u64,
    /// Tokens taken: 0 (denied), or `n ≤ taken ≤ want`.
    pub(crate) taken: u64,
}

/// Of `give` tokens handed back at `now` (ticks), how many the bucket can take without rising
/// above its burst: the whole tokens it is missing, `(tat − now) / interval`.
#[inline]
pub(crate) fn credit(p: &GcraParams, tat: u64, now: u64, give: u64) -> u64 {
    // A clock that stepped back can leave `tat − now` above the capacity: at most the burst
    // is missing, and `tokens` needs its argument below 2^62.
    give.min(p.tokens(tat.saturating_sub(now).min(p.capacity)))
}

/// What a grant asks of the word: give `give` back, then take at least `n` and at most
/// `want`, and no more than `max(n, available / share)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    pub(super) give: u64,
    pub(super) n: u64,
    pub(super) want: u64,
    pub(super) share: u64,
}

/// The pure grant: on word `tat` at `now_ns`, credit what the bucket misses of `give`, then
/// take `k` tokens, `n ≤ k ≤ want`, and no more than `max(n, available / share)`, so that the
/// last tokens go out one request at a time. Nothing is taken when fewer than `n` are there.
#[inline]
pub(crate) fn plan(p: &GcraParams, tat: u64, now_ns: u64, ask: Ask) -> Plan {
    let Ask {
        give,
        n,
        want,
        share,
    } = ask;
    let now = now_ns.min(HORIZON) * u64::from(p.scale);
    let credited = credit(p, tat, now, give);
    // credited × interval ≤ tat − now: no underflow, and the result stays ≥ now.
    let base = tat - credited * p.interval;
    let start = base.max(now);
    // start − now ≤ capacity unless the clock stepped back; then fewer (or no) tokens.
    let available = p.tokens((now + p.capacity).saturating_sub(start));
    if n == 0 || n > available {
        return Plan {
            write: (credited > 0).then_some(base),
            base,
            credited,
            taken: 0,
        };
    }
    let taken = want.min(available).min((available / share).max(n)).max(n);
    Plan {
        // taken ≤ available: start + taken × interval ≤ now + capacity (the invariant).
        write: Some(start + taken * p.interval),
        base,
        credited,
        taken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;

    fn params(limit: u64) -> GcraParams {
        Quota::per_second(limit).unwrap().gcra().unwrap()
    }

    fn ask(give: u64, n: u64, want: u64, share: u64) -> Ask {
        Ask {
            give,
            n,
            want,
            share,
        }
    }

    #[test]
    fn a_grant_takes_up_to_want_and_never_past_the_share() {
        let p = params(100); // interval 10 ms, burst 100
        let full = plan(&p, 0, 0, ask(0, 1, 64, 1));
        assert_eq!((full.taken, full.write), (64, Some(64 * p.interval)));
        // 100 available, a share of 4: at most 25.
        assert_eq!(plan(&p, 0, 0, ask(0, 1, 64, 4)).taken, 25);
        // 3 available, a share of 4: the request alone, exactly as the plain bucket.
        let tat = 97 * p.interval;
        assert_eq!(plan(&p, tat, 0, ask(0, 2, 64, 4)).taken, 2);
        let denied = plan(&p, tat, 0, ask(0, 4, 64, 4));
        assert_eq!((denied.taken, denied.write), (0, None));
    }

    #[test]
    fn a_give_back_is_credited_only_up_to_the_burst() {
        let p = params(100);
        // 10 tokens missing at t = 0: 4 of 4 credited, then 10 of 25.
        let tat = 10 * p.interval;
        assert_eq!(credit(&p, tat, 0, 4), 4);
        assert_eq!(credit(&p, tat, 0, 25), 10);
        let back = plan(&p, tat, 0, ask(25, 0, 0, 1));
        assert_eq!((back.credited, back.write), (10, Some(0)));
        // A full bucket takes nothing back and is not written.
        assert_eq!(plan(&p, 0, 5_000, ask(3, 0, 0, 1)).write, None);
        // A clock far behind the word: at most the burst is missing.
        assert_eq!(credit(&p, u64::MAX / 4, 0, u64::MAX), 100);
    }

    #[test]
    fn a_denied_grant_still_returns_the_old_lease() {
        let p = params(100);
        let tat = 100 * p.interval; // empty
        let step = plan(&p, tat, 0, ask(2, 3, 8, 1));
        assert_eq!((step.credited, step.taken), (2, 0));
        assert_eq!(step.write, Some(98 * p.interval));
    }
}
