#!/usr/bin/env python3
"""Turns one criterion run of `cargo bench --bench compare` into the markdown tables of
benches/README.md: ns per request and Mops/s (criterion's median), ratios to governor and to
the mutex twin, and the TokenBucket-against-governor summary.

Usage: python3 benches/table.py [--write-readme] [target/criterion]

With --write-readme the tables replace what stands between the `criterion` markers of
benches/README.md instead of going to stdout.
"""

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import marked  # noqa: E402

ARGS = [a for a in sys.argv[1:] if a != "--write-readme"]
WRITE = "--write-readme" in sys.argv[1:]
ROOT = ARGS[0] if ARGS else "target/criterion"
README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")
COMMAND = "cargo bench --bench compare && python3 benches/table.py --write-readme"
ALGOS = ["TokenBucket", "FixedWindow", "SlidingWindow", "SlidingLog"]
PEERS = ["governor", "rate-net", "ratelimit", "std-mutex-bucket"]


def load():
    """{(group, function, value): median ns per request}."""
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        if os.path.basename(dirpath) != "new" or "benchmark.json" not in files:
            continue
        with open(os.path.join(dirpath, "benchmark.json")) as f:
            meta = json.load(f)
        with open(os.path.join(dirpath, "estimates.json")) as f:
            est = json.load(f)
        key = (meta["group_id"], meta["function_id"], meta.get("value_str"))
        out[key] = est["median"]["point_estimate"]
    return out


R = load()


def ns(group, name, value=None):
    return R.get((group, name, value))


def fmt_ns(x):
    return "—" if x is None else f"{x:.1f}"


def fmt_mops(x):
    return "—" if x is None else f"{1e3 / x:.1f}"


def ratio(slow, fast):
    """How many times faster `fast` is than `slow` (>1: faster)."""
    if slow is None or fast is None:
        return "—"
    return f"{slow / fast:.2f}×"


def single(group, title):
    gov = ns(group, "governor")
    print(f"\n**{title}** (`{group}`; ratio > 1: tollgate faster)\n")
    print("| limiter | ns/req | Mops/s | twin ns/req | × twin | × governor |")
    print("|---|---:|---:|---:|---:|---:|")
    for a in ALGOS:
        x, t = ns(group, a), ns(group, "Mutex" + a)
        print(f"| {a} | {fmt_ns(x)} | {fmt_mops(x)} | {fmt_ns(t)} | {ratio(t, x)} | {ratio(gov, x)} |")
    for p in PEERS:
        x = ns(group, p)
        print(f"| {p} | {fmt_ns(x)} | {fmt_mops(x)} | | | {ratio(gov, x)} |")


def floor():
    print("\n**The floor** (`3-floor`)\n")
    print("| what | ns | Mops/s |")
    print("|---|---:|---:|")
    for name in ["quanta-raw", "quanta-now", "std-instant-now", "MonotonicClock", "CoarseClock",
                 "MonotonicClock+CAS", "CoarseClock+CAS"]:
        x = ns("3-floor", name)
        print(f"| {name} | {fmt_ns(x)} | {fmt_mops(x)} |")


def threads():
    print("\n**Threads on one shared limiter** (`4-threads`; aggregate; "
          "4 threads oversubscribe the 2 cores)\n")
    print("| limiter | 1 thr ns/req | 2 thr ns/req | 4 thr ns/req | 1 thr Mops/s | 2 thr Mops/s "
          "| 4 thr Mops/s | × twin (2 thr) | × governor (2 thr) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    gov2 = ns("4-threads", "governor", "2")
    for name in ALGOS + ["Mutex" + a for a in ALGOS] + PEERS:
        xs = [ns("4-threads", name, str(t)) for t in (1, 2, 4)]
        twin = ns("4-threads", "Mutex" + name, "2") if name in ALGOS else None
        vs_twin = ratio(twin, xs[1]) if name in ALGOS else ""
        vs_gov = ratio(gov2, xs[1]) if name in ALGOS else ""
        print(f"| {name} | " + " | ".join(fmt_ns(x) for x in xs) + " | "
              + " | ".join(fmt_mops(x) for x in xs) + f" | {vs_twin} | {vs_gov} |")


def clock():
    print("\n**Coarse vs precise clock** (`5-clock`, one thread, all allowed)\n")
    print("| limiter | precise ns/req | coarse ns/req | coarse × precise | × governor (precise) |")
    print("|---|---:|---:|---:|---:|")
    gov = ns("5-clock", "governor/precise")
    for name in ["TokenBucket", "FixedWindow", "governor", "rate-net"]:
        p, c = ns("5-clock", f"{name}/precise"), ns("5-clock", f"{name}/coarse")
        print(f"| {name} | {fmt_ns(p)} | {fmt_ns(c)} | {ratio(p, c)} | {ratio(gov, c)} |")


def headline():
    """TokenBucket against governor (and its twin), each pair from one group of this run."""
    pairs = [
        ("one limiter, precise clock, allowed", "1-allowed", "TokenBucket", "governor", None),
        ("one limiter, precise clock, denied", "2-denied", "TokenBucket", "governor", None),
        ("coarse clock, allowed (governor on `QuantaUpkeepClock`)", "5-clock",
         "TokenBucket/coarse", "governor/coarse", None),
        ("2 threads on one limiter", "4-threads", "TokenBucket", "governor", "2"),
        ("2 threads on one limiter, against the mutex twin", "4-threads", "TokenBucket",
         "MutexTokenBucket", "2"),
    ]
    print("\n**TokenBucket against governor, from this one run** (ratio: their time over "
          "tollgate's; > 1: tollgate faster)\n")
    print("| path | TokenBucket ns/req | other ns/req | ratio |")
    print("|---|---:|---:|---:|")
    for what, group, ours, theirs, value in pairs:
        a, b = ns(group, ours, value), ns(group, theirs, value)
        print(f"| {what} | {fmt_ns(a)} | {fmt_ns(b)} | {ratio(b, a)} |")


if __name__ == "__main__":
    if not R:
        sys.exit(f"no criterion results under {ROOT}: run `cargo bench --bench compare` first")
    tables = io.StringIO()
    with contextlib.redirect_stdout(tables):
        headline()
        single("1-allowed", "One thread, every request allowed")
        single("2-denied", "One thread, every request denied")
        floor()
        threads()
        clock()
    if not WRITE:
        print(tables.getvalue(), end="")
        sys.exit(0)
    marked.replace(README, "criterion", COMMAND, tables.getvalue().strip())
    print(f"wrote {README}")
