#!/usr/bin/env python3
"""Writes docs/loom-report.md, the loom models' execution counts and how soon each planted
mutant is caught, from the output of the loom stage (.ci/stages/20-loom.sh writes it to
target/loom-report.txt: one `loom model <name>: bound B, N executions, T s` line per model,
one `loom mutant <name>: caught after N executions in T s (bound B): ...` line per mutant).

Only the counts go into the table: loom explores a model's executions in a fixed order, so
they are the same on every run at one bound; the times are not, and stay in the stage's log.

Usage: python3 scripts/loom_report.py [--check] [report]
  report:  the loom output to read (default target/loom-report.txt)
  --check: exit 1 if docs/loom-report.md differs from what the report gives
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "loom-report.md")
DEFAULT_REPORT = os.path.join(ROOT, "target", "loom-report.txt")
REGENERATE = "bash .ci/stages/20-loom.sh && python3 scripts/loom_report.py"

MODEL = re.compile(r"loom model (.+?): bound (\S+), (\d+) executions, ")
MUTANT = re.compile(r"loom mutant (.+?): caught after (\d+) executions in \S+ s \(bound (\S+)\)")


def parse(text):
    """({model: (bound, executions)}, {mutant: (bound, executions)})."""
    models, mutants = {}, {}
    for line in text.splitlines():
        for pattern, into, fields in ((MODEL, models, (2, 3)), (MUTANT, mutants, (3, 2))):
            m = pattern.search(line)
            if not m:
                continue
            name = m.group(1)
            value = (m.group(fields[0]), int(m.group(fields[1])))
            if into.get(name, value) != value:
                sys.exit(f"loom_report: {name} reported twice, differently: {into[name]} vs {value}")
            into[name] = value
    return models, mutants


def table(header, rows):
    lines = [f"| {header} | bound | executions |", "|---|---:|---:|"]
    for name in sorted(rows):
        bound, n = rows[name]
        name = name.replace("|", "\\|")
        lines.append(f"| `{name}` | {bound} | {n:,} |")
    return lines


def render(models, mutants):
    lines = [
        "<!-- Written by scripts/loom_report.py from the loom stage's output; do not edit. -->",
        "",
        "# loom: executions per model, and how soon each mutant is caught",
        "",
        "Every model of `loom-tests/` (its name as `loom_tests::model` prints it) and the",
        "interleavings loom explored at the preemption bound; every planted mutant and the",
        "execution at which loom caught it. How the models and mutants are built, and what each",
        "checks: [verification.md](verification.md#model-checked-with-loom). Regenerate with",
        f"`{REGENERATE}`; the loom stage fails when this file no longer matches the models.",
        "",
        f"## Models ({len(models)})",
        "",
        *table("model", models),
        "",
        f"## Mutants ({len(mutants)}): caught after",
        "",
        *table("mutant", mutants),
        "",
    ]
    return "\n".join(lines)


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    path = args[0] if args else DEFAULT_REPORT
    with open(path) as f:
        models, mutants = parse(f.read())
    if not models:
        sys.exit(f"loom_report: no `loom model` lines in {path}")
    text = render(models, mutants)
    if check:
        old = open(OUT).read() if os.path.exists(OUT) else ""
        if old != text:
            sys.stderr.write(
                f"docs/loom-report.md does not match the loom run in {path}: a model or mutant "
                f"changed. Regenerate it with `{REGENERATE}` and commit it.\n"
            )
            return 1
        print(f"docs/loom-report.md matches {path}")
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {len(models)} models, {len(mutants)} mutants")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
