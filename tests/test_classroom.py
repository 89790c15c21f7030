"""Classroom: student versions without solutions (nbgrader), autograding, and the projector view.

* ``make student``'s generator (tools/student.py) on every notebook: the released student versions
  contain no solution code, keep every exercise cell as the learner sees it, and every check is a
  locked one-point test cell;
* autograding with nbgrader on real ranks: the exercise solved scores full marks, the unfinished
  notebook as handed out scores zero, an answer that does not communicate scores zero;
* ``python -m collnb present``: the Voilà app in headless Chromium shows the explorer and the
  replay, no code, in large type.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import student  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXERCISE_NOTEBOOKS = [p for p in NOTEBOOKS
                      if any("solution" in c["metadata"].get("tags", []) for c in json.loads(p.read_text())["cells"])]


def _src(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _tagged(nb, tag):
    return [c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


def _solution_body_lines(cell) -> list[str]:
    """The lines of a solution cell that are code (not comments, not blank)."""
    return [ln.strip() for ln in _src(cell).splitlines()
            if ln.strip() and not ln.strip().startswith("#") and len(ln.strip()) > 12]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    released = student.generate(root)
    return root, released


@pytest.mark.slow
def test_student_versions_have_no_solutions(course):
    root, released = course
    assert [p.name for p in released] == [p.name for p in NOTEBOOKS]
    assert EXERCISE_NOTEBOOKS, "no notebook has a solution cell"
    for path in EXERCISE_NOTEBOOKS:
        original = json.loads(path.read_text())
        handed_out = json.loads((root / "release" / "collnb" / path.name).read_text())
        text = "\n".join(_src(c) for c in handed_out["cells"])
        for sol in _tagged(original, "solution"):
            leaked = [ln for ln in _solution_body_lines(sol) if ln in text
                      and not any(ln in _src(c) for c in original["cells"] if c is not sol
                                  and "solution" not in c["metadata"].get("tags", []))]
            assert not leaked, f"{path.name}: the student version still contains solution code: {leaked}"
            for name in student.defined_names(_src(sol)):
                assert f"{name} = None" in text, f"{path.name}: {name} is not stubbed in the student version"
        # exercises are handed out as written; checks are locked one-point test cells
        assert [_src(c) for c in _tagged(handed_out, "exercise")] == [_src(c) for c in _tagged(original, "exercise")]
        checks = _tagged(handed_out, "check")
        assert len(checks) == len(_tagged(original, "check")) >= 1
        for cell in checks:
            meta = cell["metadata"]["nbgrader"]
            assert meta["grade"] is True and meta["locked"] is True and meta["points"] == 1
            assert '"✓" in _check_output.getvalue()' in _src(cell)


def _trimmed(nb: dict) -> dict:
    """The notebook without its explorer and figure cells (the grading does not depend on them,
    and each autograde runs the whole notebook): set-up/import cells, exercises, solutions, checks."""
    keep = []
    for cell in nb["cells"]:
        tags = set(cell["metadata"].get("tags", []))
        src = _src(cell)
        if cell["cell_type"] == "markdown" or tags & {"exercise", "solution", "check", "colab-setup"} \
                or (cell["cell_type"] == "code" and re.match(r"(import |from )", src)
                    and all(ln.startswith(("import ", "from ", "#")) or not ln.strip() for ln in src.splitlines())):
            keep.append(cell)
    return dict(nb, cells=keep)


def _with_exercise(nb: dict, source: str) -> dict:
    nb = json.loads(json.dumps(nb))
    (cell,) = _tagged(nb, "exercise")
    cell["source"] = source
    return nb


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_autograding_full_marks_zero_unfinished_zero_without_communication(tmp_path):
    """01_broadcast graded by nbgrader on real ranks, three submissions."""
    path = ROOT / "notebooks" / "01_broadcast.ipynb"
    small = tmp_path / "nb" / path.name
    small.parent.mkdir()
    small.write_text(json.dumps(_trimmed(json.loads(path.read_text())), indent=1, ensure_ascii=False))
    root = tmp_path / "course"
    (released,) = student.generate(root, notebooks=[small])
    handed_out = json.loads(released.read_text())
    original = json.loads(path.read_text())
    (solution,) = _tagged(original, "solution")
    (exercise,) = _tagged(original, "exercise")
    (mine,) = student.defined_names(_src(exercise))
    (theirs,) = student.defined_names(_src(solution))
    signature = re.search(rf"def {mine}\((.*?)\):", _src(exercise)).group(1)
    assert "tensor" in signature, f"01_broadcast's exercise changed its signature: {signature}"
    submissions = {
        # the stored solution, written in the exercise cell under the exercise's name
        "complete": _with_exercise(handed_out, _src(solution).replace(theirs, mine)),
        # handed back as handed out
        "unfinished": handed_out,
        # returns a tensor on every rank but never communicates: src's data cannot reach the others
        "no-communication": _with_exercise(handed_out, f"def {mine}({signature}):\n    return tensor\n"),
    }
    for who, nb in submissions.items():
        folder = root / "submitted" / who / student.ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    # a student who handed nothing in: the folder is there, the notebook is not (issue 19 item 7)
    (root / "submitted" / "absent" / student.ASSIGNMENT).mkdir(parents=True)
    t0 = time.perf_counter()
    scores = student.grade(root)
    print(f"\nautograded 3 submissions in {time.perf_counter() - t0:.0f} s: {scores}")
    assert scores["complete"] == {path.stem: (1.0, 1.0)}
    assert scores["unfinished"] == {path.stem: (0.0, 1.0)}
    assert scores["no-communication"] == {path.stem: (0.0, 1.0)}
    assert scores["absent"] == {path.stem: (0.0, 1.0)}
    assert student.missing(root) == {"absent": [path.stem]}
    lines = student.report(scores, student.missing(root))
    assert f"absent: 0/1  {path.stem} missing (0/1)" in lines
    assert f"unfinished: 0/1  {path.stem} 0/1" in lines
    # the unfinished notebook's graded cell says, kindly, what it scored and why
    graded = root / "autograded" / "unfinished" / student.ASSIGNMENT / path.name
    text = graded.read_text()
    assert student.NO_CHECK_MARK["unanswered"] in text and "not your own work" not in text


# ------------------------------------------------------------------------------------------------
# The projector view


def test_present_command_line(capsys):
    from collnb.cli import main
    from collnb.cli import present
    cmd = present.voila_command(8123, open_browser=False)
    assert cmd[1:3] == ["-m", "voila"] and str(present.NOTEBOOK) in cmd
    assert "--strip_sources=True" in cmd and "--no-browser" in cmd and "--port=8123" in cmd
    with pytest.raises(ValueError, match=re.escape("port must be an int from 1 to 65535 (a TCP port); got 0")):
        present.voila_command(0)
    with pytest.raises(TypeError, match=re.escape("port must be an int from 1 to 65535 (a TCP port); got '80'")):
        present.voila_command("80")
    nb = json.loads(present.NOTEBOOK.read_text())
    code = "\n".join(_src(c) for c in nb["cells"] if c["cell_type"] == "code")
    assert "collnb.explore(" in code and "collnb.explore_rounds(" in code
    assert main(["present", "--port", "70000", "--no-browser"]) == 2  # in-process: nothing is started
    err = capsys.readouterr().err
    assert "error: port must be an int from 1 to 65535 (a TCP port); got 70000" in err


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(600)
def test_projector_view_in_chromium(tmp_path):
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip(f"{chromium} is missing; install Debian's chromium package")
    pytest.importorskip("voila")
    from playwright.sync_api import sync_playwright

    port = _free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), PYTHONPATH=str(ROOT))
    log = open(tmp_path / "voila.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "collnb", "present", "--port", str(port), "--no-browser"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    shots = Path(os.environ.get("COLLNB_SCREENSHOTS", tmp_path))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:   # Voila is listening (the page itself starts a kernel, so it is not fetched here)
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("voila did not start:\n" + (tmp_path / "voila.log").read_text()[-3000:])
                time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1600, "height": 2200})
            page.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())
            page.goto(f"http://127.0.0.1:{port}/", timeout=240_000)
            # the explorer's heatmap and the replay's first frame: two images drawn from real ranks
            # The static pictures arrive with the cell outputs, the live controls a little later:
            # wait for both.
            page.wait_for_function(
                "() => [...document.querySelectorAll('img')].filter(i => i.naturalWidth > 200).length >= 2"
                " && document.querySelectorAll('.widget-slider, .widget-dropdown').length >= 2",
                timeout=240_000)
            code_cells = page.eval_on_selector_all(
                ".jp-CodeCell .jp-InputArea, .jp-CodeMirrorEditor, .cm-content",
                "els => els.filter(e => e.offsetHeight > 0 && e.textContent.trim()).length")
            text = page.inner_text("body")
            sliders = page.eval_on_selector_all(".widget-slider, .widget-dropdown", "els => els.length")
            label_px = page.eval_on_selector_all(
                ".widget-label", "els => els.map(e => parseFloat(getComputedStyle(e).fontSize))")
            page.screenshot(path=str(shots / "projector.png"), full_page=True)
            browser.close()
        assert code_cells == 0, "the projector view shows code cells"
        assert not [s for s in ("import collnb", "collnb.explore(", "display(HTML") if s in text], \
            "the projector view shows code"
        assert sliders >= 2, "no explorer controls on the page"
        from collnb.cli.present import FONT_PX
        assert label_px and min(label_px) >= FONT_PX, f"labels are {label_px} px, want >= {FONT_PX} px"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------------------------------------
# Slides (RISE in JupyterLab)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(600)
def test_rise_presents_a_notebook_as_its_slide_metadata_says(tmp_path):
    """jupyterlab-rise (lab extra) serves a notebook as a reveal.js deck at /rise/<path>: one
    top-level slide per cell marked ``slide``, the skipped cells (Colab set-up, solutions) absent."""
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip(f"{chromium} is missing; install Debian's chromium package")
    from playwright.sync_api import sync_playwright

    src = ROOT / "notebooks" / "01_broadcast.ipynb"
    nb = json.loads(src.read_text())
    want_slides = sum(c["metadata"]["slideshow"]["slide_type"] == "slide" for c in nb["cells"])
    skipped = [_src(c).splitlines()[0] for c in nb["cells"] if c["metadata"]["slideshow"]["slide_type"] == "skip"]
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(src, root / src.name)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")):
        (tmp_path / sub).mkdir()
        env[var] = str(tmp_path / sub)
    port, token = _free_port(), "t" + os.urandom(8).hex()
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=None"] + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    shots = Path(os.environ.get("COLLNB_SCREENSHOTS", tmp_path))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("jupyter lab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())
            page.goto(f"http://127.0.0.1:{port}/rise/{src.name}?token={token}", timeout=180_000)
            page.wait_for_selector(".reveal .slides > section", timeout=180_000)
            page.wait_for_timeout(1000)
            n_slides = page.eval_on_selector_all(".reveal .slides > section", "els => els.length")
            deck = page.inner_text(".reveal .slides")
            page.screenshot(path=str(shots / "rise-01_broadcast.png"))
            browser.close()
        assert n_slides == want_slides, f"{n_slides} slides, the metadata marks {want_slides}"
        assert "01 · broadcast" in deck
        for first_line in skipped:
            assert first_line not in deck, f"a skipped cell is on the slides: {first_line!r}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------------------------------------
# Issue 19: hand-outs and the book from the committed notebooks; the learner's work in work/


def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True)


@pytest.fixture
def course_repo(tmp_path):
    """A git repository shaped like collnb's: notebooks/ with two committed notebooks."""
    import committed
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    for p in NOTEBOOKS[:2]:
        shutil.copy(p, repo / "notebooks" / p.name)
    _git(repo, "init", "-q")
    _git(repo, "add", "notebooks")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "course")
    return repo, committed


def test_builds_refuse_notebooks_that_differ_from_the_commit_and_name_them(course_repo):
    repo, committed = course_repo
    first, second = NOTEBOOKS[0].name, NOTEBOOKS[1].name
    assert committed.differing_notebooks(repo) == []
    # a teacher tries an answer in a course notebook (JupyterLab autosaves it), and a new notebook appears
    nb = json.loads((repo / "notebooks" / first).read_text())
    nb["cells"][-1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["prediction = 300\n"]}]
    (repo / "notebooks" / first).write_text(json.dumps(nb))
    (repo / "notebooks" / "Untitled.ipynb").write_text("{}")
    (repo / "notebooks" / "bandwidth_output").mkdir()
    (repo / "notebooks" / "bandwidth_output" / "x.ipynb").write_text("{}")  # not a course notebook
    got = committed.differing_notebooks(repo)
    assert got == [(f"notebooks/{first}", "changed"), ("notebooks/Untitled.ipynb", "not in git")]
    msg = committed.refusal(got, "The hand-outs")
    assert f"notebooks/{first}  (changed)" in msg and "notebooks/Untitled.ipynb  (not in git)" in msg
    assert f"git checkout -- notebooks/{first}" in msg and "mv notebooks/Untitled.ipynb work/" in msg
    assert "work/" in msg and second not in msg
    # restored as the message says: nothing differs any more
    _git(repo, "checkout", "--", f"notebooks/{first}")
    (repo / "notebooks" / "Untitled.ipynb").unlink()
    assert committed.differing_notebooks(repo) == []
    # a deleted course notebook is named too; outside git nothing can be compared
    (repo / "notebooks" / second).unlink()
    assert committed.differing_notebooks(repo) == [(f"notebooks/{second}", "deleted")]
    assert committed.differing_notebooks(repo.parent) is None


def test_make_student_and_make_docs_check_the_committed_notebooks_first():
    """`make student` and `make docs` run the check before anything is built (make -n: the recipe)."""
    for target in ("student", "docs"):
        recipe = subprocess.run(["make", "-n", "-o", ".venv/.test-installed", target], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.splitlines()
        steps = [ln for ln in recipe if "tools/" in ln]
        assert steps and ("committed.py" in steps[0] or ("student.py generate" in steps[0] and target == "student")), steps
    # tools/student.py generate itself refuses (so does anyone calling it without make)
    src = (ROOT / "tools" / "student.py").read_text()
    assert "committed.differing_notebooks(ROOT)" in src.split("def main", 1)[1]


def test_student_refuses_in_a_checkout_with_a_changed_notebook(course_repo, tmp_path, monkeypatch, capsys):
    repo, committed = course_repo
    monkeypatch.setattr(student, "ROOT", repo)
    monkeypatch.setattr(student, "NOTEBOOKS", repo / "notebooks")
    path = repo / "notebooks" / NOTEBOOKS[0].name
    path.write_text(path.read_text().replace('"cells": [', '"cells": [ ', 1))
    assert student.main(["generate", str(tmp_path / "course")]) == 1
    err = capsys.readouterr().err
    assert f"notebooks/{NOTEBOOKS[0].name}  (changed)" in err and "The hand-outs are built from" in err
    assert not (tmp_path / "course").exists(), "nothing is written when the check refuses"


def test_make_lab_copies_the_notebooks_into_work_and_never_overwrites(tmp_path, capsys):
    import lab
    course = tmp_path / "notebooks"
    course.mkdir()
    for p in NOTEBOOKS[:3]:
        shutil.copy(p, course / p.name)
    (course / "rise.css").write_text(".x{}")
    work = tmp_path / "work"
    got = lab.prepare(work, course)
    assert sorted(got["copied"]) == sorted([p.name for p in NOTEBOOKS[:3]] + ["rise.css"]) and not got["kept"]
    # the learner works: their copy changes; the course notebook is untouched
    mine = work / NOTEBOOKS[0].name
    mine.write_text(mine.read_text().replace('"outputs": []', '"outputs": [{"output_type": "stream", '
                                             '"name": "stdout", "text": ["my answer"]}]', 1))
    answer = mine.read_text()
    assert (course / NOTEBOOKS[0].name).read_text() == NOTEBOOKS[0].read_text()
    # make lab again: nothing overwritten; a notebook new in the course is copied
    shutil.copy(NOTEBOOKS[3], course / NOTEBOOKS[3].name)
    got = lab.prepare(work, course)
    assert got["copied"] == [NOTEBOOKS[3].name] and mine.read_text() == answer and not got["newer"]
    # the course changes a notebook the learner already has (git pull): kept, and said so
    (course / NOTEBOOKS[0].name).write_text(NOTEBOOKS[0].read_text() + " ")
    got = lab.prepare(work, course)
    assert got["newer"] == [NOTEBOOKS[0].name] and mine.read_text() == answer
    # the folder is git-ignored and make lab opens JupyterLab in it
    assert "work/" in (ROOT / ".gitignore").read_text().split()
    recipe = subprocess.run(["make", "-n", "-o", ".venv/.lab-installed", "lab", f"WORK={work}"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    assert f"tools/lab.py prepare {work}" in recipe and f"--notebook-dir={work}" in recipe
    assert f"JUPYTER_CONFIG_PATH=\"{ROOT}/etc/lab" in recipe


def test_grading_labels_missing_work_and_words_a_blank_answer_kindly():
    scores = {"ada": {"01_broadcast": (1.0, 1.0), "07_all_reduce": (0.0, 1.0)},
              "bob": {"01_broadcast": (0.0, 1.0), "07_all_reduce": (0.0, 1.0)}}
    lines = student.report(scores, {"bob": ["07_all_reduce"]})
    assert lines[0] == "ada: 1/2  01_broadcast 1/1  07_all_reduce 0/1"
    assert lines[1] == "bob: 0/2  01_broadcast 0/1  07_all_reduce missing (0/1)"
    code = student.graded_check("check()")
    assert "not your own work" not in code and "unfinished" not in code
    assert student.NO_CHECK_MARK["unanswered"] in code and "not answered yet" in student.NO_CHECK_MARK["unanswered"]
    # run the graded cell with a check that says "not answered yet": it fails with the kind words
    ns = {}
    exec_src = code.replace("check()", "print('answer: not answered yet. Write your answer ...')")
    with pytest.raises(AssertionError, match="not answered yet: write your answer"):
        exec(compile(exec_src, "graded", "exec"), ns)
