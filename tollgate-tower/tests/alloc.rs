//! Allocations on the deny path, counted by a global allocator: rendering the headers of a
//! denial allocates nothing, and a whole denial allocates only what its response's own
//! `HeaderMap` needs for three headers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use http::{HeaderMap, HeaderValue, Request, Response};
use tollgate::{Algorithm, Limiter, ManualClock, Quota, TokenBucket};
use tollgate_tower::{
    GlobalKey, LocalBackend, PolicyHeaders, RateLimitLayer, RATELIMIT, RATELIMIT_POLICY,
};
use tower::{Layer, Service};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCS.with(Cell::get);
    let out = f();
    (ALLOCS.with(Cell::get) - before, out)
}

fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the in-process layer never waits"),
    }
}

#[test]
fn rendering_a_denial_allocates_nothing() {
    let quota = Quota::per_hour(3).unwrap();
    let headers = PolicyHeaders::try_new("default", &quota).unwrap();
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    for _ in 0..3 {
        assert!(bucket.try_acquire().is_allowed());
    }
    let denied = bucket.try_acquire();
    let _ = headers.render(&denied); // the process-wide Retry-After table, once
    let (n, h) = allocations(|| headers.render(&denied));
    assert_eq!(n, 0);
    assert_eq!(h.ratelimit, "\"default\";r=0;t=1200");
    assert_eq!(h.retry_after.unwrap(), "1200");
    // An admission renders into one fresh value.
    let allowed = TokenBucket::with_clock(quota, ManualClock::new()).try_acquire();
    let (n, _) = allocations(|| headers.render(&allowed));
    assert_eq!(n, 1);
}

#[test]
fn a_denial_allocates_only_its_header_map() {
    let clock = ManualClock::new();
    let backend = LocalBackend::<(), _>::try_with_clock(
        Algorithm::TokenBucket,
        Quota::per_second(1).unwrap(),
        clock,
    )
    .unwrap();
    let hello = tower::service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    });
    // One key for all: its headers are sent only when asked.
    let mut svc = RateLimitLayer::new(GlobalKey, backend)
        .expose_shared_state(true)
        .layer(hello);
    let mut call = || ready(svc.call(Request::new(()))).unwrap();
    assert_eq!(call().status(), 200); // the key's limiter is made here
    assert_eq!(call().status(), 429); // and the Retry-After table
    let (deny, res) = allocations(&mut call);
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers().len(), 3);

    // What a response's header map costs for three values that need no allocation.
    let (map, _) = allocations(|| {
        let mut m = HeaderMap::new();
        m.insert(RATELIMIT_POLICY, HeaderValue::from_static("a"));
        m.insert(RATELIMIT, HeaderValue::from_static("b"));
        m.insert(http::header::RETRY_AFTER, HeaderValue::from_static("c"));
        m
    });
    assert_eq!(deny, map, "the deny path allocates beyond its header map");
}
