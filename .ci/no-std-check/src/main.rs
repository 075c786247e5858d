//! tollgate without std, linked and run on a 32-bit target that has no 64-bit atomics.
//!
//! Built for `thumbv7em-none-eabi` (64-bit atomics from portable-atomic's lock-based fallback)
//! and `riscv32imc-unknown-none-elf` (no compare-and-swap at all: every atomic operation runs in
//! a critical section). The binary is freestanding: no libc, no runtime; `_start` runs the
//! checks and leaves through the Linux `exit` system call, so qemu-user (`qemu-arm`,
//! `qemu-riscv32`) can run it and report the exit status: 0 when every check held, otherwise
//! the number of the first check that failed.
//!
//! The checks drive all four limiters from a `static` [`ManualClock`], shared by reference, as a
//! no_std user would.
#![no_std]
#![no_main]

extern crate alloc;

use core::time::Duration;
use tollgate::{
    Clock, Decision, FixedWindow, Limiter, ManualClock, Quota, QuotaError, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// The one clock of the program, in a `static`: `ManualClock::new` is `const` without std.
static CLOCK: ManualClock = ManualClock::new();

/// Check number `code` failed unless `ok`.
fn expect(ok: bool, code: u8) -> Result<(), u8> {
    if ok {
        Ok(())
    } else {
        Err(code)
    }
}

fn admitted(limiter: &dyn Limiter, requests: u32) -> u32 {
    (0..requests)
        .filter(|_| limiter.try_acquire().is_allowed())
        .count() as u32
}

fn checks() -> Result<(), u8> {
    let ms = Duration::from_millis;
    let five = Quota::per_second(5).map_err(|_| 1)?;
    expect(Quota::per_second(0) == Err(QuotaError::ZeroLimit), 2)?;

    // Token bucket: the burst of 5, then one token per 200 ms, exactly.
    CLOCK.set(Duration::ZERO);
    let bucket = TokenBucket::with_clock(five, &CLOCK);
    expect(admitted(&bucket, 10) == 5, 10)?;
    let denied: Decision = bucket.try_acquire();
    expect(denied.retry_after() == Some(ms(200)), 11)?;
    CLOCK.advance(ms(199));
    expect(!bucket.try_acquire().is_allowed(), 12)?;
    CLOCK.advance(ms(1));
    expect(bucket.try_acquire().is_allowed(), 13)?;
    // A clock that steps back hands out nothing extra.
    CLOCK.set(Duration::ZERO);
    expect(admitted(&bucket, 10) == 0, 14)?;

    // Fixed window: 5 per [k s, (k+1) s).
    CLOCK.set(ms(300));
    let window = FixedWindow::with_clock(five, &CLOCK);
    expect(admitted(&window, 10) == 5, 20)?;
    expect(window.try_acquire().retry_after() == Some(ms(700)), 21)?;
    CLOCK.advance(ms(700));
    expect(admitted(&window, 10) == 5, 22)?;

    // Sliding-window counter (its ring is a boxed slice, from alloc): 8 slots of 125 ms; an
    // admission in slot 0 counts until slot 9 begins, at 1125 ms.
    CLOCK.set(Duration::ZERO);
    let sliding = SlidingWindow::with_clock(five, &CLOCK);
    expect(admitted(&sliding, 10) == 5, 30)?;
    CLOCK.set(ms(1_124));
    expect(admitted(&sliding, 10) == 0, 31)?;
    CLOCK.set(ms(1_125));
    expect(admitted(&sliding, 10) == 5, 32)?;

    // Sliding log: exact, an admission counts while now - s < period.
    CLOCK.set(Duration::ZERO);
    let log = SlidingLog::try_with_clock(five, &CLOCK).map_err(|_| 40)?;
    expect(log.try_acquire_n(3).is_allowed(), 41)?;
    CLOCK.advance(ms(500));
    expect(admitted(&log, 10) == 2, 42)?;
    CLOCK.advance(ms(500));
    expect(admitted(&log, 10) == 3, 43)?;
    expect(log.try_acquire().retry_after() == Some(ms(500)), 44)?;

    expect(CLOCK.now() == Duration::from_secs(1), 50)?;
    expect(CLOCK.now_nanos() == 1_000_000_000, 51)?;
    Ok(())
}

/// The entry point: qemu-user starts here with a stack and nothing else.
#[unsafe(no_mangle)]
pub extern "C" fn _start() -> ! {
    exit(match checks() {
        Ok(()) => 0,
        Err(code) => i32::from(code),
    })
}

/// Leaves through Linux's `exit` system call (qemu-user implements it).
#[cfg(target_arch = "riscv32")]
fn exit(code: i32) -> ! {
    // SAFETY: `exit` (93 on riscv) takes one argument in a0 and does not return.
    unsafe { core::arch::asm!("ecall", in("a7") 93, in("a0") code, options(noreturn)) }
}

/// Leaves through Linux's `exit` system call (qemu-user implements it).
#[cfg(target_arch = "arm")]
fn exit(code: i32) -> ! {
    // SAFETY: `exit` (1 in the ARM EABI) takes one argument in r0 and does not return; r7 (the
    // Thumb frame pointer, which asm! may not name) is overwritten only on the way out.
    unsafe { core::arch::asm!("movs r7, #1", "svc 0", in("r0") code, options(noreturn)) }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    exit(101)
}

/// riscv32imc has no compare-and-swap, so portable-atomic runs every atomic operation of
/// tollgate inside this critical section. Under qemu-user the program is one thread with no
/// signal handler: nothing can interleave, so entering the section needs to do nothing. (On a
/// microcontroller the HAL's implementation disables interrupts instead.)
#[cfg(target_arch = "riscv32")]
mod single_thread {
    struct SingleThread;
    critical_section::set_impl!(SingleThread);

    // SAFETY: one thread and no signal handler: no other code runs between acquire and
    // release, which is all a critical section must guarantee.
    unsafe impl critical_section::Impl for SingleThread {
        unsafe fn acquire() -> critical_section::RawRestoreState {}
        unsafe fn release(_: critical_section::RawRestoreState) {}
    }
}

/// A bump allocator over a static arena: the sliding window's ring and the sliding log's
/// entries are its only allocations. It never frees; the program is short.
mod bump {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::ptr;
    use core::sync::atomic::{AtomicUsize, Ordering};

    const ARENA_BYTES: usize = 16 * 1024;

    #[repr(C, align(16))]
    struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);

    // SAFETY: each byte of the arena is handed out at most once (`NEXT` only grows), so no two
    // users ever share a byte.
    unsafe impl Sync for Arena {}

    static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));
    /// Offset of the first free byte. Load and store only (riscv32imc has no CAS): sound because
    /// the program is single-threaded.
    static NEXT: AtomicUsize = AtomicUsize::new(0);

    struct Bump;

    #[global_allocator]
    static GLOBAL: Bump = Bump;

    // SAFETY: returns null or a block of `layout.size()` bytes aligned to `layout.align()`
    // inside the arena, never handed out before.
    unsafe impl GlobalAlloc for Bump {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // Relaxed: one thread; the counter publishes nothing.
            let next = NEXT.load(Ordering::Relaxed);
            let base = ARENA.0.get().cast::<u8>();
            let start = (base as usize + next).next_multiple_of(layout.align()) - base as usize;
            match start.checked_add(layout.size()) {
                Some(end) if end <= ARENA_BYTES => {
                    // Relaxed: as above.
                    NEXT.store(end, Ordering::Relaxed);
                    // SAFETY: start + size ≤ ARENA_BYTES: inside the arena.
                    unsafe { base.add(start) }
                }
                _ => ptr::null_mut(),
            }
        }

        unsafe fn dealloc(&self, _: *mut u8, _: Layout) {}
    }
}
