#!/usr/bin/env python3
"""How many atomic read-modify-write instructions each instruction-count benchmark executed.

Shows that the deny path writes nothing: run the gungraun benches with callgrind's per-instruction
counts, then this script matches every executed instruction address against the benchmark binary's
disassembly and counts the `lock`-prefixed ones (and `xchg` with memory, locked implicitly).

    H=$(mktemp -d)
    cargo bench --bench instructions -- --home=$H --callgrind-args=--dump-instr=yes
    python3 benches/atomics.py $H

Counts are per benchmark, i.e. per 100 requests.
"""

import os
import re
import subprocess
import sys

ATOMIC = re.compile(r"\block\b|\bxchg\s+%\w+,\s*-?(0x[0-9a-f]+)?\(")


def executed(path):
    """{instruction address: times executed} from a callgrind out file with --dump-instr=yes."""
    counts, pos, line, binary = {}, 0, 0, None

    def step(tok, cur):
        if tok.startswith("0x"):
            return int(tok, 16)
        if tok[0] in "+-":
            return cur + int(tok)
        return cur if tok == "*" else int(tok)

    after_calls = False
    with open(path) as f:
        for text in f:
            if text.startswith("cmd:") and binary is None:
                binary = text.split()[1]
            if text.startswith("calls="):
                after_calls = True  # the next cost line is the callee's, inclusive
                continue
            if not text or text[0] not in "0123456789+-*":
                continue
            toks = text.split()
            if len(toks) < 3:
                continue
            pos, line = step(toks[0], pos), step(toks[1], line)
            if after_calls:
                after_calls = False
                continue
            counts[pos] = counts.get(pos, 0) + int(toks[2])
    return binary, counts


def atomic_addresses(binary, cache={}):
    if binary not in cache:
        dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary],
                              capture_output=True, text=True, check=True).stdout
        addrs = set()
        for text in dump.splitlines():
            m = re.match(r"^\s+([0-9a-f]+):\s+(.*)$", text)
            if m and ATOMIC.search(m.group(2)):
                addrs.add(int(m.group(1), 16))
        cache[binary] = addrs
    return cache[binary]


def main(home):
    rows = []
    for dirpath, _, files in os.walk(home):
        for name in files:
            if name.startswith("callgrind.") and name.endswith(".out"):
                binary, counts = executed(os.path.join(dirpath, name))
                atomics = atomic_addresses(binary)
                n = sum(c for a, c in counts.items() if a in atomics)
                rows.append((os.path.basename(dirpath), n, sum(counts.values())))
    print("| benchmark (100 requests) | atomic RMW instructions executed | instructions |")
    print("|---|---:|---:|")
    for bench, n, total in sorted(rows):
        print(f"| {bench} | {n} | {total} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/gungraun")
