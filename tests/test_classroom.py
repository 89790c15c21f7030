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

from collnb.labs.exercises import solution_code

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
    """The lines of a solution cell's code (the cell holds it as comments: collnb.exercises.solution_code),
    not comments, not blank."""
    return [ln.strip() for ln in solution_code(_src(cell)).splitlines()
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
    signature = re.search(rf"def {mine}\((.*?)\):", _src(exercise)).group(1)
    assert "tensor" in signature, f"01_broadcast's exercise changed its signature: {signature}"
    submissions = {
        # the stored solution (written under the exercise's own name), uncommented into the exercise cell
        "complete": _with_exercise(handed_out, solution_code(_src(solution))),
        # handed back as handed out
        "unfinished": handed_out,
        # returns a tensor on every rank but never communicates: src's data cannot reach the others
        "no-communication": _with_exercise(handed_out, f"def {mine}({signature}):\n    return tensor\n"),
    }
    for who, nb in submissions.items():
        folder = root / "submitted" / who / student.ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / path.name).write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    t0 = time.perf_counter()
    scores = student.grade(root)
    print(f"\nautograded 3 submissions in {time.perf_counter() - t0:.0f} s: {scores}")
    assert scores["complete"] == {path.stem: (1.0, 1.0)}
    assert scores["unfinished"] == {path.stem: (0.0, 1.0)}
    assert scores["no-communication"] == {path.stem: (0.0, 1.0)}


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
