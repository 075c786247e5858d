#!/usr/bin/env python3
"""Writes docs/fuzz-report.md: what the fuzz targets do in a long run, and how soon each finds
a defect planted in the library. Nothing in that file is typed by hand.

Two parts, each optional:
  runs:   every target (`cargo fuzz list`) fuzzed for --seconds from a copy of its seeds, the
          regression inputs read too; executions, executions per second, edges covered, the
          corpus it ends with, and whether anything failed.
  plants: each defect in PLANTS written into a copy of the working tree (the checkout is never
          touched), its target built there and fuzzed from an empty corpus for at most
          --plant-seconds: found or not, in how long and after how many executions, and the
          first line of what failed.

Usage: python3 scripts/fuzz_report.py [--seconds N] [--plant-seconds M] [--no-runs]
                                      [--no-plants] [--targets T,U] [--stdout]
  --seconds N        per target in the runs (default 600: the long form)
  --plant-seconds M  the most a planted defect may take to be found (default 120)
  --targets T,U      only these targets' runs and plants; the other rows are kept from the
                     report as it stands, which must have been written with the same seconds
  --stdout           print the report instead of writing docs/fuzz-report.md

Needs cargo-fuzz and a nightly toolchain (or RUSTC_BOOTSTRAP=1, as .ci/stages/40-fuzz.sh
does). A run of every part at the defaults takes about two hours; the targets run one at a
time, under `nice`.
"""

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "fuzz-report.md")

# (what is planted, the target expected to find it, the text in src/ it replaces, the new text).
# Each text must stand exactly once in src/; the file is found by searching for it, so a file
# moved or split keeps its plant.
PLANTS = [
    (
        "fixed window: windows begin 1 ns early",
        "fixed_window",
        "if now_ns >= stored_end {\n        let current = now_ns / p.len;",
        "if now_ns + 1 >= stored_end {\n        let current = (now_ns + 1) / p.len;",
    ),
    (
        "token bucket: an admission may fill one token past the capacity",
        "token_bucket",
        "(new_tat - now <= p.capacity).then_some(new_tat)",
        "(new_tat - now <= p.capacity + p.interval).then_some(new_tat)",
    ),
    (
        "sliding window: the head slot's fast path admits one unit above the limit",
        "sliding_window",
        "n != 0 && n <= p.limit.saturating_sub(head.total) {",
        "n != 0 && n <= (p.limit + 1).saturating_sub(head.total) {",
    ),
    (
        "sliding log: an admission stops counting 1 ns early",
        "sliding_log",
        "if now.saturating_sub(time(mid)) < p.period {",
        "if now.saturating_sub(time(mid)) + 1 < p.period {",
    ),
    (
        "keyed map: an idle key counts as fresh 1 ns early",
        "keyed",
        "R::decide(p, word, now_ns, 0).0.reset_after() == Duration::ZERO",
        "R::decide(p, word, now_ns, 0).0.reset_after() <= Duration::from_nanos(1)",
    ),
    (
        "keyed table: an idle key's slot counts as free 1 ns early",
        "keyed_table",
        "word != 0 && word != EVICTED && is_fresh::<R>(p, word, judge) {",
        "word != 0 && word != EVICTED && is_fresh::<R>(p, word, judge + 1) {",
    ),
    (
        "live bucket: a quota change rounds the carried debt down",
        "live",
        ".div_ceil(u128::from(old.interval))",
        "/ u128::from(old.interval)",
    ),
    (
        "sketch: a column's window begins 1 ns early",
        "sketch",
        "if t.wrapping_sub(stored * p.len) < p.len {\n        stored\n    } else {\n        t / p.len\n",
        "if (t + 1).wrapping_sub(stored * p.len) < p.len {\n        stored\n    } else {\n        (t + 1) / p.len\n",
    ),
]

STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
COV = re.compile(r"^#\d+\s+\w+\s+cov: (\d+) ft: \d+ corp: (\d+)/(\d+)(\w+)", re.M)


@functools.cache
def fuzz_cmd():
    """`cargo fuzz` on nightly where there is one, else on stable under RUSTC_BOOTSTRAP=1."""
    ok = subprocess.run(["rustup", "run", "nightly", "rustc", "--version"], capture_output=True)
    if ok.returncode == 0:
        return ["cargo", "+nightly", "fuzz"], {}
    return ["cargo", "fuzz"], {"RUSTC_BOOTSTRAP": "1"}


def run(cmd, cwd, env_extra, log):
    env = dict(os.environ, **env_extra)
    with open(log, "w") as f:
        return subprocess.run(["nice", "-n", "10"] + cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode


def targets(cwd):
    fuzz, env = fuzz_cmd()
    out = subprocess.run(fuzz + ["list"], cwd=cwd, env=dict(os.environ, **env), capture_output=True, text=True, check=True)
    return out.stdout.split()


def size(n, unit):
    scale = {"b": 1, "Kb": 1024, "Mb": 1024 * 1024}.get(unit, 1)
    b = n * scale
    return f"{b / 1024:.0f} KiB" if b >= 1024 else f"{b} B"


def fuzz_once(cwd, target, corpus_dirs, seconds, artifacts, log):
    """(seconds taken, exit code, the log's text, the artifacts written)."""
    fuzz, env = fuzz_cmd()
    os.makedirs(artifacts, exist_ok=True)
    cmd = fuzz + ["run", target] + corpus_dirs + [
        "--",
        f"-max_total_time={seconds}",
        "-timeout=10",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
    ]
    start = time.monotonic()
    code = run(cmd, cwd, env, log)
    taken = time.monotonic() - start
    with open(log, errors="replace") as f:
        text = f.read()
    return taken, code, text, os.listdir(artifacts)


def failure_line(text):
    """The first line that says what failed: a panic's message, or the sanitizer's verdict."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "panicked at" in line:
            msg = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return msg[:140]
    for line in lines:
        if "ERROR: " in line:
            return line.split("ERROR: ", 1)[1][:140]
    return "?"


def long_runs(seconds, work, only):
    rows, failed = [], []
    for t in targets(ROOT):
        if only and t not in only:
            continue
        corpus = os.path.join(work, "runs", t)
        shutil.copytree(os.path.join(ROOT, "fuzz", "seeds", t), corpus)
        dirs = [corpus]
        reg = os.path.join(ROOT, "fuzz", "regressions", t)
        if os.path.isdir(reg):
            dirs.append(reg)
        # Build first, so the clock below counts fuzzing only.
        fuzz, env = fuzz_cmd()
        run(fuzz + ["build", t], ROOT, env, os.path.join(work, f"{t}.build.log"))
        print(f"fuzz_report: {t}, {seconds} s", file=sys.stderr)
        _, code, text, arts = fuzz_once(ROOT, t, dirs, seconds, os.path.join(work, "art", t), os.path.join(work, f"{t}.log"))
        stats = dict((k, int(v)) for k, v in STAT.findall(text))
        cov = COV.findall(text)
        edges, inputs, corp_n, corp_unit = cov[-1] if cov else ("?", "?", 0, "b")
        found = "nothing" if code == 0 and not arts else f"failed: {failure_line(text)}"
        if found != "nothing":
            failed.append(t)
        files = os.listdir(corpus)
        rows.append(
            f"| `{t}` | {stats.get('number_of_executed_units', 0):,} | "
            f"{stats.get('average_exec_per_sec', 0):,} | {edges} | "
            f"{len(files)} inputs, {size(int(corp_n), corp_unit)} | {found} |"
        )
    head = [
        f"Each target fuzzed for {seconds} s from a copy of `fuzz/seeds/<target>/` (its",
        "`fuzz/regressions/<target>/` read too), one at a time, with cargo fuzz's defaults",
        "(AddressSanitizer, debug assertions, overflow checks).",
        "",
        "| target | executions | per second | edges covered | corpus at the end | found |",
        "|---|---:|---:|---:|---|---|",
    ]
    return head + rows, failed


def plants(seconds, work, only):
    copy = os.path.join(work, "tree")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = os.path.join(ROOT, f.decode())
        if os.path.isfile(src):
            dst = os.path.join(copy, f.decode())
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
    rows, missed = [], []
    for what, target, old, new in PLANTS:
        if only and target not in only:
            continue
        hits = []
        for dirpath, _, names in os.walk(os.path.join(copy, "src")):
            for name in names:
                path = os.path.join(dirpath, name)
                if name.endswith(".rs") and "planted" not in path:
                    with open(path) as f:
                        n = f.read().count(old)
                    hits += [path] * n
        if len(hits) != 1:
            sys.exit(f"fuzz_report: the plant '{what}' matches {len(hits)} places in src/, not 1: update PLANTS")
        path = hits[0]
        with open(path) as f:
            original = f.read()
        with open(path, "w") as f:
            f.write(original.replace(old, new))
        try:
            fuzz, env = fuzz_cmd()
            if run(fuzz + ["build", target], copy, env, os.path.join(work, f"plant-{target}.build.log")) != 0:
                sys.exit(f"fuzz_report: the plant '{what}' does not build: see {work}")
            print(f"fuzz_report: planted '{what}', fuzzing {target}", file=sys.stderr)
            corpus = os.path.join(work, "plant-corpus", target)
            os.makedirs(corpus)
            taken, code, text, arts = fuzz_once(copy, target, [corpus], seconds, os.path.join(work, "plant-art", target), os.path.join(work, f"plant-{target}.log"))
        finally:
            with open(path, "w") as f:
                f.write(original)
        stats = dict((k, int(v)) for k, v in STAT.findall(text))
        if code != 0 or arts:
            rows.append(f"| {what} | `{target}` | {taken:.1f} s | {stats.get('number_of_executed_units', 0):,} | {failure_line(text)} |")
        else:
            missed.append(what)
            rows.append(f"| {what} | `{target}` | not in {seconds} s | {stats.get('number_of_executed_units', 0):,} | — |")
    head = [
        "Each defect written into a copy of the tree (scripts/fuzz_report.py's `PLANTS`), its",
        f"target fuzzed from an empty corpus for at most {seconds} s; the time includes the",
        "target's start, not its build.",
        "",
        "| planted | found by | in | executions | what failed first |",
        "|---|---|---:|---:|---|",
    ]
    return head + rows, missed


def kept(section):
    """The section of that title in the report as it stands, for a part not run this time."""
    try:
        with open(OUT) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    m = re.search(r"^## " + re.escape(section) + r"\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1).strip("\n").splitlines() + [""] if m else []


def merged(title, args, rows):
    """`rows` (a part's text and table, run for some targets) with the rows of the other targets
    kept from the report as it stands: a new row replaces the kept row of its subject (its cells
    up to its target's), in the kept order; a subject not kept yet comes last."""
    kept_lines = kept(title)
    if not kept_lines or kept_lines[0] != f"`python3 scripts/fuzz_report.py {args}`:":
        sys.exit(f"fuzz_report: --targets needs a '{title}' part written with `{args}` to keep")
    is_row = lambda line: line.startswith("| ") and "` |" in line
    key = lambda row: row.split("` |")[0]
    new = {key(r): r for r in rows if is_row(r)}
    body = [new.pop(key(r), r) for r in kept_lines if is_row(r)] + list(new.values())
    return [r for r in rows if not is_row(r)] + body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--plant-seconds", type=int, default=120)
    ap.add_argument("--no-runs", action="store_true")
    ap.add_argument("--no-plants", action="store_true")
    ap.add_argument("--targets", default="")
    ap.add_argument("--stdout", action="store_true")
    a = ap.parse_args()
    only = set(filter(None, a.targets.split(",")))
    work = tempfile.mkdtemp(prefix="fuzz-report-")
    out = [
        "# Fuzzing report",
        "",
        "Written by `scripts/fuzz_report.py` (each part names the command that wrote it); what the",
        "targets check and how to run them is in [verification.md](verification.md). Execution",
        "counts and rates depend on the machine and its load; what is found does not.",
        "",
    ]
    bad = []
    for title, skip, part, flag, seconds in (
        ("Long runs", a.no_runs, long_runs, "--no-plants --seconds", a.seconds),
        ("Planted defects", a.no_plants, plants, "--no-runs --plant-seconds", a.plant_seconds),
    ):
        out += [f"## {title}", ""]
        if skip:
            out += kept(title)
            continue
        rows, failures = part(seconds, work, only)
        if only:
            rows = merged(title, f"{flag} {seconds}", rows)
        out += [f"`python3 scripts/fuzz_report.py {flag} {seconds}`:", ""] + rows + [""]
        bad += [f"{title.lower()}: {f}" for f in failures]
    text = "\n".join(out)
    if a.stdout:
        print(text)
    else:
        with open(OUT, "w") as f:
            f.write(text)
        print(f"fuzz_report: wrote {os.path.relpath(OUT, ROOT)} (work files in {work})", file=sys.stderr)
    if bad:
        sys.exit("fuzz_report: " + "; ".join(bad))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
