//! A real `redis-server` for the tests: started on a free loopback port, persistence off,
//! stopped when dropped. The tests fail, never skip, when it is not installed.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` process.
pub struct RedisServer {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl RedisServer {
    /// A standalone server on a free loopback port, answering `PING` before this returns.
    pub fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let dir = std::env::temp_dir().join(format!(
            "tollgate-tower-redis-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory for redis-server");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): these tests need redis-server on PATH \
                     (Debian: `apt-get install redis-server`)"
                )
            });
        let server = RedisServer { port, child, dir };
        server.wait_for_ping();
        server
    }

    fn wait_for_ping(&self) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let start = Instant::now();
        loop {
            if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut reply = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not answer PING on {addr} within 10 s"
            );
            std::thread::yield_now();
        }
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid} failed");
    }

    /// Freezes the server (SIGSTOP): its connections stay open and nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A frozen server is continued first, so that it stops cleanly.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
