#!/usr/bin/env python3
"""Student versions of the notebooks and autograding, with nbgrader (``make student``).

``python tools/student.py generate COURSE`` makes COURSE an nbgrader course folder:

* ``COURSE/source/collnb/*.ipynb``: the notebooks with nbgrader metadata, made from their cell
  tags (never from what the cells say, so a rewritten check cell is graded the same way):

  - a ``solution`` cell (the solution written as comments, so that Run All defines and prints
    nothing of it) becomes an nbgrader solution region: the student version holds nbgrader's stub
    line instead; a name such a cell does define at top level is kept as ``name = None``, so a
    check cell that refers to it still runs;
  - a ``check`` cell becomes a locked, autograded test cell worth one point, which passes only
    when the check printed ``✓`` (collnb's checks print ✓ only for the learner's own answer that
    passed on real ranks; an unfinished answer prints no ✓, a wrong one raises ``CheckFailed``);
  - ``exercise`` cells are what the student edits; everything else is unchanged;

* ``COURSE/release/collnb/*.ipynb``: the student versions (``nbgrader generate_assignment``), no
  solutions in them.

The notebooks are the ones committed in git: ``generate`` refuses while ``notebooks/`` differs from
the last commit, naming each notebook and how to restore it (``tools/committed.py``), so an answer
a teacher tried in a course notebook never reaches the students.

``python tools/student.py grade COURSE`` runs ``nbgrader autograde`` on every submission in
``COURSE/submitted/STUDENT/collnb/`` and prints each student's points per notebook (also returned
by :func:`grade` as ``{student: {notebook: (score, max_score)}}``); a notebook a student did not
hand in reads ``missing`` (:func:`missing`).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import committed  # noqa: E402  (tools/committed.py: hand-outs come from the committed notebooks)

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


#: What the graded check says when it printed no ✓: the learner's own words of the check above it
#: (not answered yet, or the check's ✗ and hint) stay in the output; this line says what it scored.
NO_CHECK_MARK = {
    "unanswered": "not answered yet: write your answer in the exercise cell above and run this check (0 points)",
    "other": "no ✓ yet: the check above did not pass; its message says what to change (0 points)",
}


def graded_check(source: str) -> str:
    """The check cell's code run so that the cell fails unless it printed ✓ (nbgrader scores a
    test cell by whether it raised); without a ✓ it says why, in the words of :data:`NO_CHECK_MARK`."""
    body = textwrap.indent(source.rstrip() or "pass", "        ")
    return (
        "# Graded: one point when this check prints ✓ for your own answer.\n"
        "import contextlib as _contextlib, io as _io\n"
        "from collnb import exercises as _exercises\n"
        "_check_output = _io.StringIO()\n"
        "try:\n"
        "    with _contextlib.redirect_stdout(_check_output):\n"
        f"{body}\n"
        "finally:\n"
        "    print(_check_output.getvalue(), end=\"\")\n"
        "assert \"✓\" in _check_output.getvalue(), (\n"
        f"    {NO_CHECK_MARK['unanswered']!r} if _exercises.NOT_ANSWERED in _check_output.getvalue() else\n"
        f"    {NO_CHECK_MARK['other']!r})"
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
        ``{student: {notebook stem: (score, max_score)}}``, every notebook of the assignment for
        every student: a notebook the student did not hand in scores 0 (:func:`missing` names them).

    Raises:
        RuntimeError: nbgrader failed, or there is nothing to grade.
    """
    from nbgrader.api import Gradebook

    course = Path(course).resolve()
    students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{ASSIGNMENT}"))
    if not students:
        raise RuntimeError(f"no submissions in {course}/submitted/STUDENT/{ASSIGNMENT}/")
    # every student in one call (nbgrader's start-up, a few seconds, once, not once a student)
    roster = course / "students.csv"
    with roster.open("w", newline="") as f:
        csv.writer(f).writerows([["id"], *([student] for student in students)])
    _nbgrader(course, "db", "student", "import", str(roster))
    _nbgrader(course, "autograde", ASSIGNMENT, "--force")
    handed_out = {p.stem: p for p in (course / "release" / ASSIGNMENT).glob("*.ipynb")}
    scores: dict[str, dict[str, tuple[float, float]]] = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        maxima = {nb.name: nb.max_score for nb in gb.find_assignment(ASSIGNMENT).notebooks}
        for student in students:
            got = {}
            try:
                sub = gb.find_submission(ASSIGNMENT, student)
                got = {nb.name: (nb.score, nb.max_score) for nb in sub.notebooks}
            except Exception:  # noqa: BLE001 - nbgrader keeps no submission for an empty folder
                pass
            scores[student] = {name: got.get(name, (0.0, maxima.get(name, 0.0)))
                               for name in sorted(set(maxima) | set(got) | set(handed_out))}
    return scores


def missing(course: Path) -> dict[str, list[str]]:
    """``{student: [notebook stems]}``: the notebooks of the assignment (``release/collnb/``) that a
    student's folder ``submitted/STUDENT/collnb/`` does not hold (students with none missing are left out)."""
    course = Path(course).resolve()
    wanted = sorted(p.stem for p in (course / "release" / ASSIGNMENT).glob("*.ipynb"))
    out = {}
    for folder in sorted((course / "submitted").glob(f"*/{ASSIGNMENT}")):
        gone = [n for n in wanted if not (folder / f"{n}.ipynb").is_file()]
        if gone:
            out[folder.parent.name] = gone
    return out


def report(scores: dict, absent: dict) -> list[str]:
    """One line per student: total points, then each notebook's points; a notebook the student did
    not hand in reads ``missing`` (it scores 0)."""
    lines = []
    for student, notebooks in scores.items():
        total = sum(s for s, _ in notebooks.values())
        most = sum(m for _, m in notebooks.values())
        parts = []
        for name, (s, m) in sorted(notebooks.items()):
            if name in absent.get(student, ()):
                parts.append(f"{name} missing (0/{m:g})")
            elif m:
                parts.append(f"{name} {s:g}/{m:g}")
        lines.append(f"{student}: {total:g}/{most:g}  " + "  ".join(parts))
    return lines


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
            differing = committed.differing_notebooks(ROOT)
            if differing:
                print("error: " + committed.refusal(differing, "The hand-outs"), file=sys.stderr)
                return 1
            if differing is None:
                print(f"note: {ROOT} is not a git checkout; the hand-outs use notebooks/ as they are")
            released = generate(args.course)
            print(f"student versions ({len(released)}): {args.course / 'release' / ASSIGNMENT}")
            print(f"hand them out; collect into {args.course}/submitted/STUDENT/{ASSIGNMENT}/, then: "
                  f"python tools/student.py grade {args.course}")
        else:
            for line in report(grade(args.course), missing(args.course)):
                print(line)
    except (RuntimeError, SyntaxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
