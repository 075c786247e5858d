#!/usr/bin/env python3
"""Writes benches/instructions.md, the instruction counts per request, from the committed
gate baseline (benches/gungraun-baseline/, recorded by `cargo bench --bench instructions
--bench instructions_keyed --bench instructions_sketch -- --save-baseline=main
--home=$PWD/benches/gungraun-baseline`).

Each benchmark runs 100 requests, so a request's count is callgrind's total over 100.

Usage: python3 benches/instructions_table.py [--check]
  --check: exit 1 if benches/instructions.md differs from what the baseline gives.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.path.join(HERE, "gungraun-baseline")
OUT = os.path.join(HERE, "instructions.md")
REQUESTS = 100
# Benchmarks with an allowed path only (a leased bucket's denial is its bucket's).
ALLOWED_ONLY = {"leased", "leased_second"}

TABLES = [
    (
        ["limiter", "allowed", "denied", "twin allowed", "twin denied"],
        [
            ("TokenBucket", "token_bucket", "mutex_token_bucket"),
            ("FixedWindow", "fixed_window", "mutex_fixed_window"),
            ("SlidingWindow", "sliding_window", "mutex_sliding_window"),
            ("SlidingLog", "sliding_log", "mutex_sliding_log"),
            ("LiveTokenBucket", "live_token_bucket", None),
            ("LiveFixedWindow", "live_fixed_window", None),
            ("Leased (a warm thread, leases of 64)", "leased", None),
            ("Leased, the second of two on one thread", "leased_second", None),
        ],
    ),
    (
        ["peer", "allowed", "denied"],
        [
            ("governor", "peer_governor", None),
            ("rate-net", "peer_rate_net", None),
            ("ratelimit", "peer_ratelimit", None),
            ("std-mutex-bucket", "std_mutex_bucket", None),
        ],
    ),
    (
        ["keyed map or table, one key already in it", "allowed", "denied"],
        [
            ("`KeyedLimiter`, `Algorithm::TokenBucket`", "keyed_token_bucket", None),
            ("`KeyedLimiter`, `Algorithm::FixedWindow`", "keyed_fixed_window", None),
            ("`KeyedLimiter`, `Algorithm::TokenBucket`, `live()`", "keyed_live_token_bucket", None),
            ("`KeyedLimiter`, `Algorithm::FixedWindow`, `live()`", "keyed_live_fixed_window", None),
            ("`KeyedTable`, `Algorithm::TokenBucket`", "keyed_table_token_bucket", None),
            ("`KeyedTable`, `Algorithm::FixedWindow`", "keyed_table_fixed_window", None),
        ],
    ),
    (
        ["fixed-memory keyed limiter, one key", "allowed", "denied"],
        [
            ("`SketchLimiter`, fixed window", "sketch_fixed_window", None),
            ("`SketchLimiter`, two windows (`try_sliding`)", "sketch_sliding", None),
            ("`HybridSketchLimiter` (denied: the key in its exact entry)", "hybrid_sketch", None),
        ],
    ),
]


def counts():
    """{benchmark name ("token_bucket.allowed"): instructions over the whole run}."""
    out = {}
    for dirpath, _, files in os.walk(BASELINE):
        for name in files:
            if not (name.startswith("callgrind.") and name.endswith(".out.base@main")):
                continue
            bench = os.path.basename(dirpath)
            with open(os.path.join(dirpath, name)) as f:
                for line in f:
                    if line.startswith("summary:"):
                        out[bench] = int(line.split()[1])
                        break
    return out


def per_request(total):
    return f"{total / REQUESTS:.2f}"


def render():
    c = counts()
    lines = [
        "<!-- Written by benches/instructions_table.py from benches/gungraun-baseline/; do not edit. -->",
        "",
        "# Instruction counts per request",
        "",
        "Callgrind's count over 100 requests on a frozen clock, divided by 100: the committed",
        "baseline the instruction-count gate compares every run with (`benches/README.md`,",
        '"Instruction counts", says what each row measures).',
    ]
    for header, rows in TABLES:
        lines += ["", "| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
        for label, bench, twin in rows:
            cells = [label]
            for b in [bench] + ([twin] if twin else []):
                for outcome in ("allowed", "denied"):
                    key = f"{b}.{outcome}"
                    if outcome == "denied" and b in ALLOWED_ONLY:
                        cells.append("")
                        continue
                    if key not in c:
                        sys.exit(f"no baseline for {key} in {BASELINE}")
                    cells.append(per_request(c[key]))
            cells += [""] * (len(header) - len(cells))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    text = render()
    if "--check" in sys.argv[1:]:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit(f"{OUT} is stale: run python3 benches/instructions_table.py")
        return
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
