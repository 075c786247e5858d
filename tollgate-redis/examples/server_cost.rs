//! Server time per call of each shipped script, against a one-call Lua fixed window (`INCR`,
//! `PEXPIRE` on the first, compare): starts its own `redis-server` on a free loopback port,
//! loads the scripts, drives each with `EVALSHA` in 16-deep pipelines with the arguments the
//! limiter sends (one binary argument: six little-endian doubles), and reads `usec_per_call`
//! from `INFO commandstats`: the server's own time per call, whatever the client's speed. Each script runs in several rounds, interleaved with the others; the
//! least time of its rounds is kept (other load on the machine only adds time).
//!
//! Every call is admitted (quotas far above the rate driven), over 1,000 keys: the path that
//! reads and writes state, the dearest one.
//!
//! ```text
//! cargo run --release -p tollgate-redis --example server_cost -- --write-readme
//! ```
//!
//! With `--write-readme` it also writes the README's server-time table from this run (between
//! its `server_cost:begin` and `server_cost:end` markers). The times move with the machine's
//! load; `scripts/server_instructions.py` counts the server's instructions instead, which
//! repeat.

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

    // (name, body, key suffix, arguments as the limiter sends them: n, now (-1 = TIME), the
    // quota's three, lease).
    let body = |alg: &str| format!("{PRELUDE}{alg}");
    let packed = |words: [f64; 6]| {
        words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect::<Vec<u8>>()
    };
    // A shipped script, `src/scripts/{name}.lua` after the prelude, with one packed argument.
    macro_rules! shipped {
        ($name:literal, $suffix:literal, $words:expr) => {
            (
                $name,
                body(include_str!(concat!("../src/scripts/", $name, ".lua"))),
                $suffix,
                vec![packed($words)],
            )
        };
    }
    let incr_args = ["60000", "1000000000"].map(|a| a.as_bytes().to_vec());
    let scripts: Vec<(&str, String, &str, Vec<Vec<u8>>)> = vec![
        ("INCR", INCR.to_owned(), "incr", incr_args.to_vec()),
        // 1,000,000 per second, burst 1,000,000: interval 1 µs, scale 1.
        shipped!("token_bucket", "tb", [1.0, -1.0, 1.0, 1e6, 1.0, 0.0]),
        // 1,000,000 per minute.
        shipped!("fixed_window", "fw", [1.0, -1.0, 6e7, 1e6, 0.0, 0.0]),
        // 1,000,000 per minute in 8 slots of 7.5 s.
        shipped!("sliding_window", "swc", [1.0, -1.0, 7.5e6, 1e6, 8.0, 0.0]),
        shipped!("sliding_log", "log", [1.0, -1.0, 6e7, 1e6, 0.0, 0.0]),
    ];
    let mut shas = Vec::new();
    for (_, body, _, _) in &scripts {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(body)
            .query(&mut conn)?;
        shas.push(sha);
    }
    let mut best = vec![f64::INFINITY; scripts.len()];
    for _ in 0..ROUNDS {
        for (i, (_, _, suffix, args)) in scripts.iter().enumerate() {
            redis::cmd("FLUSHALL").query::<()>(&mut conn)?;
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query::<()>(&mut conn)?;
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
    let ratio = |i: usize| best[i] / best[0];
    let mut table =
        String::from("| script | µs per call | × the `INCR` script |\n|---|---:|---:|\n");
    for (i, ((name, ..), usec)) in scripts.iter().zip(&best).enumerate() {
        println!("{name:>15}: {usec:.2} µs per call");
        table += &format!("| {name} | {usec:.2} | {:.1} |\n", ratio(i));
    }
    let line = format!(
        "server time vs the INCR script: token_bucket {:.1}x, fixed_window {:.1}x, sliding_window {:.1}x, sliding_log {:.1}x",
        ratio(1),
        ratio(2),
        ratio(3),
        ratio(4)
    );
    println!("{line}");
    if std::env::args().any(|a| a == "--write-readme") {
        let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let command =
            "cargo run --release -p tollgate-redis --example server_cost -- --write-readme";
        let section = format!("{table}\n`{line}`\n");
        tollgate_test_support::marked::replace(readme, "server_cost", command, &section)?;
        println!("wrote {readme}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
