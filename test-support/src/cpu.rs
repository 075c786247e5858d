//! Timing in this thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: on a shared
//! machine a thread descheduled mid-sample would otherwise charge the wait to whatever ran.

use std::time::Duration;

/// This thread's CPU time so far.
///
/// ```
/// let before = tollgate_test_support::cpu::thread_cpu();
/// assert!(tollgate_test_support::cpu::thread_cpu() >= before);
/// ```
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `iters` calls of `f` (given `0..iters`), timed in this thread's CPU time.
///
/// ```
/// let mut sum = 0;
/// let _ = tollgate_test_support::cpu::on_cpu(4, |i| sum += i);
/// assert_eq!(sum, 6);
/// ```
pub fn on_cpu(iters: u64, mut f: impl FnMut(u64)) -> Duration {
    let start = thread_cpu();
    for i in 0..iters {
        f(i);
    }
    thread_cpu() - start
}
