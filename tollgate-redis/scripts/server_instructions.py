#!/usr/bin/env python3
"""Instructions the Redis server executes per call of each shipped script, against a one-call
Lua fixed window (INCR, PEXPIRE on the first, compare): the repeatable form of
`cargo run --release -p tollgate-redis --example server_cost`, whose times move with the
machine's load.

Starts redis-server under valgrind's callgrind on a free loopback port, collecting only inside
`evalShaCommand` (the whole script call: argument tables, Lua, the commands it calls, the
reply), drives CALLS calls of each script over KEYS keys with the arguments the limiter sends
(one binary argument: six little-endian doubles; -1 = Redis TIME), every call admitted, and
prints instructions per call and the ratio to the INCR script. Needs valgrind, redis-server
and redis-cli.

With --pieces it measures instead what each piece of a script costs, one small script per
piece with the fixed window's argument: the Lua call alone, unpacking the argument, reading
the server's clock, a GET, a SET (KEEPTTL, PX), a reply string, and a script that reads the
clock and the state and writes the state back with nothing else; --write-readme then writes
that table into tollgate-redis/README.md (between its server_pieces markers).

    python3 tollgate-redis/scripts/server_instructions.py
    python3 tollgate-redis/scripts/server_instructions.py --pieces --write-readme
"""
import glob
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import marked  # noqa: E402

CALLS, KEYS = 2000, 100
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "src", "scripts")
INCR = ("local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('PEXPIRE', KEYS[1], "
        "ARGV[1]) end if c > tonumber(ARGV[2]) then return 0 end return 1")


def packed(*words):
    return [struct.pack("<6d", *words)]


# The quotas of the example: admitted calls, 1,000,000 per second (bucket) or per minute.
ARGS = {
    "token_bucket": packed(1, -1, 1, 1e6, 1, 0),
    "fixed_window": packed(1, -1, 6e7, 1e6, 0, 0),
    "sliding_window": packed(1, -1, 7.5e6, 1e6, 8, 0),
    "sliding_log": packed(1, -1, 6e7, 1e6, 0, 0),
}


def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(body, args, out_dir):
    port = str(free_port())
    out = os.path.join(out_dir, "callgrind.out")
    for f in glob.glob(out + "*"):
        os.remove(f)
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
         f"--callgrind-out-file={out}", "redis-server", "--port", port, "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", out_dir],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def cli(*a):
        return subprocess.run(["redis-cli", "-p", port, *a], capture_output=True,
                              text=True).stdout.strip()

    try:
        for _ in range(600):
            if cli("PING") == "PONG":
                break
            time.sleep(0.1)
        sha = cli("SCRIPT", "LOAD", body)
        if len(sha) != 40:
            sys.exit(f"SCRIPT LOAD failed: {sha}")
        calls = b"".join(command("EVALSHA", sha, "1", "{bench:%d}:k" % (i % KEYS), *args)
                         for i in range(CALLS))
        subprocess.run(["redis-cli", "-p", port, "--pipe"], input=calls, capture_output=True,
                       check=True)
        stats = cli("INFO", "commandstats")
        line = next(l for l in stats.splitlines() if l.startswith("cmdstat_evalsha:"))
        if "failed_calls=0" not in line:
            sys.exit(f"some calls failed: {line}")
        n = int(re.search(r"calls=(\d+)", line).group(1))
    finally:
        cli("SHUTDOWN", "NOSAVE")
        server.wait()
    report = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True).stdout
    total = re.search(r"^([\d,]+)(?: \(100\.0%\))?\s+PROGRAM TOTALS", report, re.M).group(1)
    return int(total.replace(",", "")) / n


# Each piece as a script of its own, the cost over the empty script being the piece's.
PIECES = [
    ("the Lua call, nothing done", "return 1"),
    ("unpacking the binary argument (six doubles)",
     "local n, now, a, b, c, l = struct.unpack('<dddddd', ARGV[1]) return 1"),
    ("TIME, converted to one number",
     "local t = redis.call('TIME') local now = t[1] * 1000000 + t[2] return 1"),
    ("a GET (of an absent key)", "local s = redis.call('GET', KEYS[1]) return 1"),
    ("a SET with KEEPTTL", "redis.call('SET', KEYS[1], 'x', 'KEEPTTL') return 1"),
    ("a SET with a relative expiry (PX)", "redis.call('SET', KEYS[1], 'x', 'PX', '60000') return 1"),
    ("a two-number reply string", "return string.format('%d %d', 12345, 678901)"),
    ("a five-number reply string",
     "return string.format('%d %d %d %d %d', 0, 12345, 678901, 678901, 0)"),
    ("an integer reply", "return 12345"),
    ("TIME + GET + SET KEEPTTL, no decision",
     "local t = redis.call('TIME') local now = t[1] * 1000000 + t[2] "
     "local s = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], 'x', 'KEEPTTL') return 1"),
]
README = os.path.join(HERE, "..", "README.md")
COMMAND = "python3 tollgate-redis/scripts/server_instructions.py --pieces --write-readme"


def pieces(write):
    with tempfile.TemporaryDirectory() as tmp:
        base = measure(INCR, ["60000", "1000000000"], tmp)
        rows = [("the INCR script", base)]
        for name, body in PIECES:
            rows.append((name, measure(body, ARGS["fixed_window"], tmp)))
    empty = rows[1][1]
    lines = ["| script | instructions per call | over the empty script | × the `INCR` script |",
             "|---|---:|---:|---:|"]
    for i, (name, per) in enumerate(rows):
        over = "" if i < 2 else f"{per - empty:+,.0f}"
        lines.append(f"| {name} | {per:,.0f} | {over} | {per / base:.2f} |")
    table = "\n".join(lines)
    print(table)
    if write:
        marked.replace(README, "server_pieces", COMMAND, table)
        print(f"wrote {os.path.normpath(README)}")


def main():
    if "--pieces" in sys.argv[1:]:
        pieces("--write-readme" in sys.argv[1:])
        return
    prelude = open(os.path.join(SCRIPTS, "prelude.lua")).read()
    with tempfile.TemporaryDirectory() as tmp:
        base = measure(INCR, ["60000", "1000000000"], tmp)
        print(f"{'INCR':>15}: {base:8.0f} instructions per call")
        ratios = []
        for name, args in ARGS.items():
            body = prelude + open(os.path.join(SCRIPTS, name + ".lua")).read()
            per = measure(body, args, tmp)
            print(f"{name:>15}: {per:8.0f} instructions per call")
            ratios.append(f"{name} {per / base:.2f}x")
    print("server instructions vs the INCR script: " + ", ".join(ratios))


if __name__ == "__main__":
    main()
