#!/usr/bin/env python3
"""Student versions of the notebooks and autograding, with nbgrader (``make student``).

``python tools/student.py generate COURSE`` makes COURSE an nbgrader course folder:

* ``COURSE/source/collnb/*.ipynb``: the notebooks with nbgrader metadata, made from their cell
  tags (never from what the cells say, so a rewritten check cell is graded the same way):

  - a ``solution`` cell becomes an nbgrader solution region: the student version keeps only
    ``solution_x = None`` for each name it defined (so the check cell still runs and simply has no
    stored solution to demonstrate);
  - a ``check`` cell becomes a locked, autograded test cell worth one point, which passes only
    when the check printed ``✓`` (collnb's checks print ✓ only for the learner's own answer that
    passed on real ranks; an unfinished answer prints no ✓, a wrong one raises ``CheckFailed``);
  - ``exercise`` cells are what the student edits; everything else is unchanged;

* ``COURSE/release/collnb/*.ipynb``: the student versions (``nbgrader generate_assignment``), no
  solutions in them.

``python tools/student.py grade COURSE`` runs ``nbgrader autograde`` on every submission in
``COURSE/submitted/STUDENT/collnb/`` and prints each student's points per notebook (also returned
by :func:`grade` as ``{student: {notebook: (score, max_score)}}``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ASSIGNMENT = "collnb"
POINTS_PER_CHECK = 1
CELL_TIMEOUT_S = 300

CONFIG = f"""\
# nbgrader configuration written by tools/student.py (collnb); regenerate with `make student`.
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "collnb"
c.CourseDirectory.root = {{root!r}}
c.ClearSolutions.code_stub = {{{{"python": "# (the solution is not part of the student version)"}}}}
c.ClearSolutions.text_stub = "(the solution is not part of the student version)"
# checks launch real ranks: give every cell time, and the whole notebook the kernel it asks for
c.ExecutePreprocessor.timeout = {CELL_TIMEOUT_S}
c.Execute.timeout = {CELL_TIMEOUT_S}
c.Execute.kernel_name = "python3"
"""


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def defined_names(source: str) -> list[str]:
    """Top-level names a cell defines (``def f``, ``class C``, ``x = ...``), in order.

    Raises:
        SyntaxError: the cell is not valid Python (a solution cell must be).
    """
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    names: list[str] = []
    for node in ast.parse("\n".join(lines)).body:
        targets = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                targets += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
        names += [n for n in targets if n not in names]
    return names


def graded_check(source: str) -> str:
    """The check cell's code run so that the cell fails unless it printed ✓ (nbgrader scores a
    test cell by whether it raised)."""
    body = textwrap.indent(source.rstrip() or "pass", "        ")
    return (
        "# Graded: one point when this check prints ✓ for your own answer.\n"
        "import contextlib as _contextlib, io as _io\n"
        "_check_output = _io.StringIO()\n"
        "try:\n"
        "    with _contextlib.redirect_stdout(_check_output):\n"
        f"{body}\n"
        "finally:\n"
        "    print(_check_output.getvalue(), end=\"\")\n"
        "assert \"✓\" in _check_output.getvalue(), \\\n"
        "    \"no ✓: the answer above is unfinished or not your own work yet (0 points)\""
    )


def nbgrader_source(nb: dict, stem: str) -> dict:
    """The instructor (``source/``) version of one notebook: nbgrader metadata from the tags."""
    nb = json.loads(json.dumps(nb))
    n_sol = n_check = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        tags = _tags(cell)
        meta = cell.setdefault("metadata", {})
        if "solution" in tags:
            n_sol += 1
            src = _source(cell)
            stubs = "".join(f"{name} = None  # the stored solution is not part of the student version\n"
                            for name in defined_names(src))
            cell["source"] = f"{stubs}### BEGIN SOLUTION\n{src.rstrip()}\n### END SOLUTION"
            meta["nbgrader"] = {"grade": False, "solution": True, "locked": False, "task": False,
                                "grade_id": f"{stem}-solution-{n_sol}", "schema_version": 3}
        elif "check" in tags:
            n_check += 1
            cell["source"] = graded_check(_source(cell))
            meta["nbgrader"] = {"grade": True, "solution": False, "locked": True, "task": False,
                                "points": POINTS_PER_CHECK, "grade_id": f"{stem}-check-{n_check}",
                                "schema_version": 3}
        cell["outputs"], cell["execution_count"] = [], None
    return nb


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("nbgrader")
    cmd = [str(exe) if exe.exists() else "nbgrader", *args, f"--CourseDirectory.root={course}"]
    # nbgrader runs helpers (alembic) by name: this environment's bin/ first on PATH
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(cmd, cwd=course, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def generate(course: Path, notebooks: list[Path] | None = None) -> list[Path]:
    """Write the nbgrader course into ``course`` and generate the student versions.

    Returns:
        the student notebooks, ``course/release/collnb/*.ipynb``.

    Raises:
        RuntimeError: nbgrader failed (its output is in the message).
    """
    course = Path(course).resolve()
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb")) if notebooks is None else notebooks
    source = course / "source" / ASSIGNMENT
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(root=str(course)))
    for path in notebooks:
        nb = json.loads(path.read_text())
        (source / path.name).write_text(json.dumps(nbgrader_source(nb, path.stem), indent=1,
                                                   ensure_ascii=False) + "\n")
    _nbgrader(course, "db", "assignment", "add", ASSIGNMENT)
    _nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    return sorted((course / "release" / ASSIGNMENT).glob("*.ipynb"))


def grade(course: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Autograde every submission in ``course/submitted/*/collnb/``.

    Returns:
        ``{student: {notebook stem: (score, max_score)}}``.

    Raises:
        RuntimeError: nbgrader failed, or there is nothing to grade.
    """
    from nbgrader.api import Gradebook

    course = Path(course).resolve()
    students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{ASSIGNMENT}"))
    if not students:
        raise RuntimeError(f"no submissions in {course}/submitted/STUDENT/{ASSIGNMENT}/")
    for student in students:
        _nbgrader(course, "db", "student", "add", student)
    _nbgrader(course, "autograde", ASSIGNMENT, "--force")
    scores: dict[str, dict[str, tuple[float, float]]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in students:
            sub = gb.find_submission(ASSIGNMENT, student)
            scores[student] = {nb.name: (nb.score, nb.max_score) for nb in sub.notebooks}
    return scores


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="nbgrader course + student versions into COURSE")
    g.add_argument("course", type=Path)
    r = sub.add_parser("grade", help="autograde COURSE/submitted/*/collnb and print the points")
    r.add_argument("course", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.command == "generate":
            released = generate(args.course)
            print(f"student versions ({len(released)}): {args.course / 'release' / ASSIGNMENT}")
            print(f"hand them out; collect into {args.course}/submitted/STUDENT/{ASSIGNMENT}/, then: "
                  f"python tools/student.py grade {args.course}")
        else:
            for student, notebooks in grade(args.course).items():
                total = sum(s for s, _ in notebooks.values())
                most = sum(m for _, m in notebooks.values())
                print(f"{student}: {total:g}/{most:g}  " + "  ".join(
                    f"{name} {s:g}/{m:g}" for name, (s, m) in sorted(notebooks.items()) if m))
    except (RuntimeError, SyntaxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
