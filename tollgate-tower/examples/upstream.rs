//! A trivial upstream for load tests: answers every request with `200 hello`.
//!
//! ```text
//! cargo run --release -p tollgate-tower --example upstream -- --listen 127.0.0.1:9000 [--workers N]
//! ```

mod common;

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut workers) = (None, 1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| common::bad_flag(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--listen" => {
                listen = Some(
                    value()
                        .parse()
                        .unwrap_or_else(|e| common::bad_flag(format!("--listen: {e}"))),
                )
            }
            "--workers" => {
                workers = value()
                    .parse()
                    .unwrap_or_else(|e| common::bad_flag(format!("--workers: {e}")))
            }
            other => common::bad_flag(format!(
                "unknown flag {other:?} (upstream takes --listen ADDR [--workers N])"
            )),
        }
    }
    let listen = listen.unwrap_or_else(|| common::bad_flag("--listen is required"));
    common::serve(listen, workers.max(1), |_peer| {
        tower::service_fn(|_req: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
        })
    });
}
