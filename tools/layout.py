#!/usr/bin/env python3
"""Write README.md's module table from the modules' own docstrings, so it names every module by
its full path and says what each one does in the words of its docstring (its first sentence).

The table sits between ``<!-- modules:start -->`` and ``<!-- modules:end -->`` in README.md's
"Layout" section, below the hand-written table of layers. ``python tools/layout.py`` rewrites it
(``make meta`` runs it); ``--check`` changes nothing and exits 1 when it is out of date
(``tests/test_layers.py`` checks it the same way). Standard library only; nothing is imported
(docstrings are read with :mod:`ast`), so torch is never loaded.

A module's description is the first sentence of its docstring's first paragraph: up to the first
``. `` or the paragraph's end, reST roles (``:func:`x```) written as code. Fix a wrong row by
fixing the docstring.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "collnb"
README = ROOT / "README.md"
START, END = "<!-- modules:start -->", "<!-- modules:end -->"


def summary(path: Path) -> str:
    """The first sentence of ``path``'s module docstring, on one line (``""`` without a docstring)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.search(r"\.\s", para + " ")
    first = para[:m.start() + 1] if m else para
    first = re.sub(r":(?:func|class|mod|data|meth|attr|exc):`~?([^`]+)`", r"``\1``", first)
    first = re.sub(r"``([^`]+)``", r"`\1`", first)
    return first.replace("|", "\\|")


def table() -> str:
    """The Markdown table: one row per module of the package, in path order."""
    rows = ["| module | what it does (its docstring's first sentence) |", "| --- | --- |"]
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rows.append(f"| `{path.relative_to(ROOT).as_posix()}` | {summary(path)} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    """``readme`` with the module table replaced. Raises ValueError when the markers are missing."""
    if START not in readme or END not in readme:
        raise ValueError(f"README.md has no {START} ... {END} block for the module table")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when the table is out of date")
    args = ap.parse_args(argv)
    old = README.read_text(encoding="utf-8")
    new = render(old)
    if new == old:
        return 0
    if args.check:
        print("README.md: the module table is out of date: run `python tools/layout.py` (or `make meta`)")
        return 1
    README.write_text(new, encoding="utf-8")
    print("wrote README.md's module table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
