//! `rediss://` targets. With the `tls` feature: a real `redis-server` speaking TLS only
//! (`--port 0 --tls-port`), with a certificate authority and a server certificate made for the
//! test by the `openssl` command; without it, a `rediss://` target is refused by `build` with
//! an error that names TLS. `bash scripts/test.sh` installs what is needed and runs both.

mod common;

use tollgate::{Algorithm, Quota};
use tollgate_redis::{Error, RedisLimiter};

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn without_the_feature_rediss_is_refused_at_build() {
    let err = RedisLimiter::builder(
        "rediss://127.0.0.1:6380/",
        Algorithm::TokenBucket,
        Quota::per_second(5).unwrap(),
    )
    .build()
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err}");
    assert!(err.to_string().contains("TLS"), "{err}");
}

#[cfg(feature = "tls")]
mod with_tls {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::Duration;

    use tollgate_redis::{Source, Target};

    use super::*;
    use crate::common::{admitted_in_batch, RedisCluster, RedisServer};

    /// The error of `build` for a token bucket of `quota` on `target`, which must refuse it,
    /// waiting at most `wait` to connect.
    async fn refused(target: impl Into<Target>, quota: Quota, wait: Duration) -> Error {
        RedisLimiter::builder(target, Algorithm::TokenBucket, quota)
            .connect_timeout(wait)
            .build()
            .await
            .unwrap_err()
    }

    /// The message when the machine lacks what the TLS test needs: it fails, never skips.
    const NEEDED: &str = "the TLS test needs `openssl` and a redis-server built with TLS \
                          (BUILD_TLS=yes, as Debian's and Ubuntu's packages are): \
                          run `bash scripts/test.sh`, which installs them";

    fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run openssl ({e}). {NEEDED}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A certificate authority and a server certificate it signed for 127.0.0.1, in a fresh
    /// directory of its own per `name` (tests run in parallel): (dir, ca.crt, server.crt,
    /// server.key).
    fn certificates(name: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("tollgate-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec![
            "req",
            "-x509",
            "-days",
            "1",
            "-subj",
            "/CN=tollgate test CA",
        ];
        ca.extend(ec);
        ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
        openssl(&dir, &ca);
        let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
        csr.extend(ec);
        csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
        openssl(&dir, &csr);
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "san.ext",
                "-out",
                "server.crt",
            ],
        );
        let (ca, crt, key) = (
            dir.join("ca.crt"),
            dir.join("server.crt"),
            dir.join("server.key"),
        );
        (dir, ca, crt, key)
    }

    /// Whether this redis-server knows `tls-port` at all: a build without TLS refuses the
    /// directive ("Bad directive"), a build with it complains about the missing files.
    fn assert_server_has_tls() {
        let out = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--tls-port",
                "1",
                "--tls-cert-file",
                "/nonexistent",
            ])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-server ({e}). {NEEDED}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            !text.contains("Bad directive") && text.contains("TLS"),
            "this redis-server has no TLS: {text}\n{NEEDED}"
        );
    }

    /// Decisions over TLS, verified against the test's own authority; a client that does not
    /// trust that authority is refused by `build` (the certificate is checked, not ignored).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rediss_reaches_a_tls_only_server() {
        assert_server_has_tls();
        let (dir, ca, crt, key) = certificates("server");
        let server = RedisServer::start_tls(&crt, &key, &ca);
        assert_eq!(server.cli(&["PING"]).trim(), "PONG");
        let url = format!("rediss://127.0.0.1:{}/", server.port);
        let client = redis::Client::build_with_tls(
            url.as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(&ca).unwrap()),
            },
        )
        .unwrap();
        let quota = Quota::per_hour(3).unwrap();
        for algorithm in Algorithm::ALL {
            let l = RedisLimiter::builder(client.clone(), algorithm, quota)
                .timeout(Duration::from_secs(2))
                .key_prefix("tls")
                .build()
                .await
                .unwrap_or_else(|e| panic!("{algorithm:?} over TLS: {e}"));
            let admitted = admitted_in_batch(&l, (0..5).map(|_| ("k", 1))).await;
            assert_eq!(admitted, [true, true, true, false, false], "{algorithm:?}");
            let c = l.check("other", 1).await;
            assert!(
                c.decision.is_allowed() && c.source == Source::Redis,
                "{c:?}"
            );
        }
        // The platform's roots only: the test's authority is unknown. The refused certificate
        // is the error, at once: not retried, with backoff, for longer than the deadline (the
        // manager's six retries wait 2.5 s in all), which would end in `Error::Timeout`.
        let untrusted = refused(url.as_str(), quota, Duration::from_secs(2)).await;
        assert!(matches!(untrusted, Error::Connection(_)), "{untrusted}");
        assert!(untrusted.to_string().contains("certificate"), "{untrusted}");
        // Plain text on the TLS port: no answer a limiter could take.
        let plain = format!("redis://127.0.0.1:{}/", server.port);
        let no_answer = refused(plain.as_str(), quota, Duration::from_millis(500)).await;
        assert!(no_answer.is_unavailable(), "{no_answer}");
        drop(server);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A cluster of three primaries that speak TLS only (to clients and on their bus): every
    /// algorithm's keys spread over all three over `rediss://`, each key at exactly its quota;
    /// a client that does not trust the authority is refused at `build`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rediss_reaches_a_tls_only_cluster() {
        assert_server_has_tls();
        let (dir, ca, crt, key) = certificates("cluster");
        let cluster = RedisCluster::start_tls(&crt, &key, &ca);
        let urls = cluster.urls();
        assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
        let client = redis::cluster::ClusterClient::builder(urls.clone())
            .certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(&ca).unwrap()),
            })
            .build()
            .unwrap();
        let quota = Quota::per_hour(3).unwrap();
        for algorithm in Algorithm::ALL {
            let l = RedisLimiter::builder(client.clone(), algorithm, quota)
                .timeout(Duration::from_secs(5))
                .key_prefix(format!("tls{algorithm:?}"))
                .build()
                .await
                .unwrap_or_else(|e| panic!("{algorithm:?} on a TLS cluster: {e}"));
            let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
            let calls = keys
                .iter()
                .flat_map(|k| (0..4).map(move |_| (k.as_str(), 1)));
            let admitted = admitted_in_batch(&l, calls).await;
            // Calls of one batch may reach a node in any order (a node that first answers
            // `NOSCRIPT` runs that call after the script is loaded): counted per key.
            for (k, four) in keys.iter().zip(admitted.chunks(4)) {
                let n = four.iter().filter(|&&a| a).count();
                assert_eq!(n, 3, "{algorithm:?} {k}: {four:?}");
            }
        }
        let spread = cluster.keys_per_node();
        assert!(
            spread.iter().all(|&n| n > 0),
            "keys per primary: {spread:?}"
        );
        // The platform's roots only: every node's certificate is refused.
        let untrusted = refused(Target::cluster(&urls), quota, Duration::from_secs(2)).await;
        assert!(untrusted.is_unavailable(), "{untrusted}");
        drop(cluster);
        let _ = std::fs::remove_dir_all(dir);
    }
}
