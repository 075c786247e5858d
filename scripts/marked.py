"""The generated sections of the docs, as `tollgate_test_support::marked::replace` writes them
from Rust: the text a script writes between `<!-- NAME:begin (written by `COMMAND`) -->` and
`<!-- NAME:end -->`, so that the figures in a document are one run's and say which command
wrote them."""

import sys


def replace(path, name, command, body):
    """Replaces what lies between the `name` markers of the file at `path` with `body` (its
    trailing white space trimmed, one newline after it). Exits with a message when the file
    lacks either marker (the begin marker must name `command` exactly)."""
    begin = f"<!-- {name}:begin (written by `{command}`) -->\n"
    end = f"<!-- {name}:end -->"
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text[text.find(begin):]:
        sys.exit(f"{path}: no {name}:begin / {name}:end markers")
    start = text.index(begin) + len(begin)
    stop = text.index(end, start)
    with open(path, "w") as f:
        f.write(text[:start] + body.rstrip() + "\n" + text[stop:])
