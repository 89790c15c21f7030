#!/usr/bin/env python3
"""Hand-outs and the book are built from the notebooks as committed in git, never from edits lying
in ``notebooks/`` (``make student``, ``make docs``).

A learner's work lives in the work folder ``make lab`` opens (``work/``, ignored by git:
``tools/lab.py``), so ``notebooks/`` only changes when someone edits the course itself. When it
differs from the last commit anyway (an answer typed into a course notebook, a notebook saved with
outputs, a new ``Untitled.ipynb``), the builds refuse and name each notebook with the command that
restores it, instead of shipping it to students or into the book.

``python tools/committed.py WHAT`` exits 0 when ``notebooks/*.ipynb`` equal the last commit (or
this is not a git checkout: then it says so and the files are used as they are), else prints what
differs and exits 1. ``WHAT`` names the build in the message ("the hand-outs", "the book").
Standard library only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["differing_notebooks", "refusal", "main"]


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def differing_notebooks(root: Path = ROOT) -> list[tuple[str, str]] | None:
    """The course notebooks (``notebooks/*.ipynb``, repository-relative paths) that differ from
    the last commit, each with how: ``"changed"`` (modified, staged or not), ``"not in git"``
    (untracked and not ignored), ``"deleted"``. ``None`` when ``root`` is not a git checkout
    (or git is missing), so nothing can be compared."""
    try:
        inside = _git(root, "rev-parse", "--is-inside-work-tree")
    except FileNotFoundError:
        return None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    proc = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "notebooks")
    if proc.returncode != 0:
        raise RuntimeError(f"git status failed: {proc.stderr.strip()}")
    out = []
    entries = proc.stdout.split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        if "R" in xy or "C" in xy:  # a rename: the next entry is the old name
            i += 1
        p = Path(path)
        if p.parent.as_posix() != "notebooks" or p.suffix != ".ipynb":
            continue
        how = "not in git" if xy == "??" else "deleted" if "D" in xy else "changed"
        out.append((path, how))
    return sorted(out)


def refusal(differing: list[tuple[str, str]], what: str) -> str:
    """The message that refuses to build ``what`` while ``differing`` (see
    :func:`differing_notebooks`) is not empty: each notebook, and how to restore or keep it."""
    lines = [f"{what} are built from the notebooks as committed in git, and these differ from the "
             f"last commit:"]
    lines += [f"  {path}  ({how})" for path, how in differing]
    changed = [p for p, how in differing if how != "not in git"]
    new = [p for p, how in differing if how == "not in git"]
    if changed:
        lines += ["To restore the committed version (the changes in that file are lost: copy it elsewhere "
                  "first to keep them):"]
        lines += [f"  git checkout -- {p}" for p in changed]
        lines += ["To build from your changes instead, commit them first:",
                  f"  git commit {' '.join(changed)}"]
    if new:
        lines += ["A notebook that is not in git: move it out of notebooks/ (a learner's own notebooks "
                  "belong in the work folder of `make lab`, work/), or `git add` it to make it part of "
                  "the course:"]
        lines += [f"  mv {p} work/" for p in new]
    lines += ["(`make lab` works on copies in work/, which git ignores: a learner's answers never land "
              "in notebooks/.)"]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    what = " ".join(args) or "the hand-outs and the book"
    differing = differing_notebooks(ROOT)
    if differing is None:
        print(f"note: {ROOT} is not a git checkout; {what} use notebooks/ as they are")
        return 0
    if differing:
        print("error: " + refusal(differing, what[:1].upper() + what[1:]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
