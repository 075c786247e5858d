//! Server time per call of each shipped script, against a one-call Lua fixed window (`INCR`,
//! `PEXPIRE` on the first, compare): starts its own `redis-server` on a free loopback port,
//! loads the scripts, drives each with `EVALSHA` pipelined (`redis-benchmark -P 16 -c 8` when
//! installed, else 16-deep pipelines from this process), and reads `usec_per_call` from
//! `INFO commandstats`. Each script runs in several rounds, interleaved with the others; the
//! least time of its rounds is kept (other load on the machine only adds time).
//!
//! Every call is admitted (quotas far above the rate driven), over 1,000 keys: the path that
//! reads and writes state, the dearest one.
//!
//! ```text
//! cargo run --release -p tollgate-redis --example server_cost
//! ```

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PRELUDE: &str = include_str!("../src/scripts/prelude.lua");
const INCR: &str = "local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
if c > tonumber(ARGV[2]) then return 0 end
return 1";

const ROUNDS: usize = 5;
const CALLS: usize = 100_000;
const KEYS: usize = 1_000;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("tollgate-server-cost-{port}"));
    std::fs::create_dir_all(&dir)?;
    let _server = Server(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server is needed on PATH: {e}"))?,
    );
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let start = Instant::now();
    let mut conn = loop {
        match client.get_connection() {
            Ok(c) => break c,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e.into()),
        }
    };

    // (name, body, key suffix, arguments as the limiter sends them: n, now ('' = TIME), then
    // the quota's).
    let body = |alg: &str| format!("{PRELUDE}{alg}");
    let scripts: Vec<(&str, String, &str, Vec<&str>)> = vec![
        ("INCR", INCR.to_owned(), "incr", vec!["60000", "1000000000"]),
        // 1,000,000 per second, burst 1,000,000: interval 1 µs, scale 1.
        (
            "token_bucket",
            body(include_str!("../src/scripts/token_bucket.lua")),
            "tb",
            vec!["1", "", "1", "1000000", "1"],
        ),
        // 1,000,000 per minute.
        (
            "fixed_window",
            body(include_str!("../src/scripts/fixed_window.lua")),
            "fw",
            vec!["1", "", "60000000", "1000000"],
        ),
        // 1,000,000 per minute in 8 slots of 7.5 s.
        (
            "sliding_window",
            body(include_str!("../src/scripts/sliding_window.lua")),
            "swc",
            vec!["1", "", "7500000", "1000000", "8"],
        ),
        (
            "sliding_log",
            body(include_str!("../src/scripts/sliding_log.lua")),
            "log",
            vec!["1", "", "60000000", "1000000"],
        ),
    ];
    let mut shas = Vec::new();
    for (_, body, _, _) in &scripts {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(body)
            .query(&mut conn)?;
        shas.push(sha);
    }
    let benchmark = Command::new("redis-benchmark")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();

    let mut best = vec![f64::INFINITY; scripts.len()];
    for _ in 0..ROUNDS {
        for (i, (_, _, suffix, args)) in scripts.iter().enumerate() {
            redis::cmd("FLUSHALL").query::<()>(&mut conn)?;
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query::<()>(&mut conn)?;
            if benchmark {
                let key = format!("{{bench:__rand_int__}}:{suffix}");
                let status = Command::new("redis-benchmark")
                    .args(["-p", &port.to_string(), "-P", "16", "-c", "8", "-q"])
                    .args(["-n", &CALLS.to_string(), "-r", &KEYS.to_string()])
                    .args(["EVALSHA", &shas[i], "1", &key])
                    .args(args)
                    .stdout(Stdio::null())
                    .status()?;
                if !status.success() {
                    return Err("redis-benchmark failed".into());
                }
            } else {
                for batch in 0..CALLS / 16 {
                    let mut pipe = redis::pipe();
                    for j in 0..16 {
                        pipe.cmd("EVALSHA")
                            .arg(&shas[i])
                            .arg(1)
                            .arg(format!("{{bench:{}}}:{suffix}", (batch * 16 + j) % KEYS))
                            .arg(args)
                            .ignore();
                    }
                    pipe.query::<()>(&mut conn)?;
                }
            }
            let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn)?;
            let usec = info
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
                .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or("no cmdstat_evalsha in INFO commandstats")?;
            if info.contains("failed_calls=") && !info.contains("failed_calls=0") {
                return Err(format!("{}: some calls failed:\n{info}", scripts[i].0).into());
            }
            best[i] = best[i].min(usec);
        }
    }
    for ((name, ..), usec) in scripts.iter().zip(&best) {
        println!("{name:>15}: {usec:.2} µs per call");
    }
    let ratio = |i: usize| best[i] / best[0];
    println!(
        "server time vs the INCR script: token_bucket {:.1}x, fixed_window {:.1}x, sliding_window {:.1}x, sliding_log {:.1}x",
        ratio(1),
        ratio(2),
        ratio(3),
        ratio(4)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
