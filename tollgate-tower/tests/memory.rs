//! Memory under a flood of new client keys: a million distinct clients through the layer in
//! process, on the default backend (bounded, sweeping its own idle keys), stay under a fixed
//! ceiling of live heap bytes, counted by this binary's global allocator; a client that keeps
//! its bucket drained meanwhile is never handed a fresh limit by the sweeps. The same flood on
//! an unbounded map passes the ceiling (the check can fail).
//!
//! Time comes from a `ManualClock`: 1,000 new clients per 10 ms step, 10 s in all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};
use tollgate_tower::{LocalBackend, PeerAddr, PeerIp, RateLimitLayer};
use tower::{Layer, Service};

struct Counting;

/// Live heap bytes of the whole process, and the most seen at once.
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    // Relaxed: a statistic read by the test thread after the work it measures.
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    // Relaxed: as above.
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        grew(-(layout.size() as isize));
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The ceiling for the bounded flood: at most 100,000 keys of IPv4 token buckets plus the
/// map's tables (8.2 MiB at the peak when measured), with room to spare. The unbounded map
/// passes it after about 250,000 clients (64 MiB for the million).
const CEILING: isize = 16 << 20;

const CLIENTS: u32 = 1_000_000;
const PER_STEP: u32 = 1_000;

fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-process layer never waits"),
    }
}

fn request(ip: Ipv4Addr) -> Request<()> {
    let mut req = Request::new(());
    req.extensions_mut()
        .insert(PeerAddr(SocketAddr::new(IpAddr::V4(ip), 40_000)));
    req
}

struct Flood {
    /// Live bytes above the start, at the end and at the peak.
    end: isize,
    peak: isize,
    /// First requests of new clients that were denied (the map full of busy keys).
    new_denied: u32,
    /// Admissions of the busy client.
    hot_allowed: u32,
    steps: u32,
}

/// `clients` new clients, 1,000 per 10 ms, and one busy client asking once per step, through
/// the layer over `backend` (10 per second, burst 10, per client).
fn flood(backend: LocalBackend<IpAddr, ManualClock>, clock: &ManualClock, clients: u32) -> Flood {
    let hello =
        tower::service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let mut svc = RateLimitLayer::new(PeerIp::default(), backend).layer(hello);
    let hot = Ipv4Addr::new(192, 0, 2, 1);
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let (mut new_denied, mut hot_allowed, mut steps) = (0, 0, 0);
    for i in 0..clients {
        // 10.0.0.0 + i: a million distinct addresses, none of them the busy one.
        let res = ready(svc.call(request(Ipv4Addr::from(0x0a00_0000 + i)))).unwrap();
        if res.status() == StatusCode::TOO_MANY_REQUESTS {
            new_denied += 1;
        }
        if i % PER_STEP == PER_STEP - 1 {
            let res = ready(svc.call(request(hot))).unwrap();
            hot_allowed += u32::from(res.status() == StatusCode::OK);
            clock.advance(Duration::from_millis(10));
            steps += 1;
        }
    }
    let end = LIVE.load(Ordering::Relaxed) - start;
    let peak = PEAK.load(Ordering::Relaxed) - start;
    drop(svc);
    Flood {
        end,
        peak,
        new_denied,
        hot_allowed,
        steps,
    }
}

fn quota() -> Quota {
    Quota::per_second(10).unwrap()
}

/// One test, so that no other test's allocations run at the same time in this process.
#[test]
fn a_million_new_clients_stay_under_the_ceiling_and_a_busy_one_keeps_its_count() {
    bounded();
    unbounded();
}

fn bounded() {
    let clock = ManualClock::new();
    let backend =
        LocalBackend::try_with_clock(Algorithm::TokenBucket, quota(), clock.clone()).unwrap();
    let f = flood(backend, &clock, CLIENTS);
    let mib = |b: isize| b as f64 / f64::from(1 << 20);
    eprintln!(
        "bounded: {CLIENTS} clients, peak {:.1} MiB, end {:.1} MiB, {} first requests denied \
         while the map was full",
        mib(f.peak),
        mib(f.end),
        f.new_denied
    );
    assert!(
        f.peak < CEILING,
        "peak {:.1} MiB above the {:.0} MiB ceiling",
        mib(f.peak),
        mib(CEILING)
    );
    // The busy client asks every 10 ms for 1,000 steps (9.99 s): its burst of 10, then one
    // per 100 ms, 109 in all; a sweep that removed its drained bucket would have handed it
    // another burst of 10.
    assert_eq!(f.steps, 1_000);
    assert_eq!(f.hot_allowed, 109, "busy client admissions");
    // The sweeps keep new clients coming in: most first requests pass.
    assert!(
        f.new_denied < CLIENTS / 4,
        "{} first requests denied",
        f.new_denied
    );
}

/// The check can fail: 400,000 of the clients on an unbounded map pass the ceiling.
fn unbounded() {
    let clock = ManualClock::new();
    let unbounded =
        KeyedLimiter::try_with_clock(Algorithm::TokenBucket, quota(), clock.clone()).unwrap();
    let f = flood(LocalBackend::new(unbounded), &clock, 400_000);
    eprintln!(
        "unbounded: peak {:.1} MiB",
        f.peak as f64 / f64::from(1 << 20)
    );
    assert!(
        f.peak > CEILING,
        "an unbounded map stayed under the ceiling"
    );
    assert_eq!(f.new_denied, 0);
}
