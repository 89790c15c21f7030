"""Classroom: student versions without solutions (nbgrader), autograding, and the projector view.

* ``make student``'s generator (tools/student.py) on every notebook: the released student versions
  contain no solution code, keep every exercise cell as the learner sees it, and every check is a
  locked one-point test cell;
* autograding with nbgrader on real ranks: the exercise solved scores full marks, the unfinished
  notebook as handed out scores zero, an answer that does not communicate scores zero;
* ``python -m collnb present``: the Voilà app in headless Chromium at 1920x1080 and 1280x720: the
  explorer and the replay, no code, no overlapping controls, figures filling the width, every
  primitive selectable;
* issue 19: hand-outs and the book from the committed notebooks, the learner's copies in work/,
  the learner's lab without the classroom tools (reloaded), RISE slides at 1280x720, grading words.
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
import urllib.request
from pathlib import Path

import pytest

from collnb.labs.exercises import solution_code

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import student  # noqa: E402
from ports import free_port  # noqa: E402

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
    pytest.importorskip("voila", reason="the projector view needs Voila: pip install -e '.[present]'")
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
    # the page is served on the port asked for or not at all: Voila's own retries (50, onto another
    # port than the URL printed) are off, and a port in use is said before Voila starts
    assert "--Voila.port_retries=0" in cmd
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert present.listen_problem("127.0.0.1", port) is not None
        assert main(["present", "--port", str(port), "--no-browser"]) == 2  # nothing is started
        out, err = capsys.readouterr()
        said = re.search(rf"error: port {port} on 127\.0\.0\.1 is in use \(another projector view or server\?\); "
                         r"stop it, or choose another port: python -m collnb present --port (\d+)\n", err)
        assert said and int(said.group(1)) > port and present.listen_problem("127.0.0.1", int(said.group(1))) is None
        assert "projector view:" not in out   # no URL printed for a page nobody serves
        # every interface ("" as Voila takes it) includes the taken one; the hint keeps the address
        assert re.search(rf"port {port} on \* is in use .* --port \d+ --ip ''$", present.listen_problem("", port))
    assert present.listen_problem("127.0.0.1", port) is None   # closed: free again
    assert present.listen_problem("", port) is None   # every interface, as Voila binds it (was refused)
    assert main(["present", "--ip", "no.such.host.invalid", "--no-browser"]) == 2
    assert "error: cannot listen on no.such.host.invalid: " in capsys.readouterr().err
    assert [present.page_url(ip, 8866) for ip in ("127.0.0.1", "::1", "", "0.0.0.0", "::")] == [
        "http://127.0.0.1:8866/", "http://[::1]:8866/", "http://localhost:8866/", "http://localhost:8866/",
        "http://localhost:8866/"]



# What the projector test measures, in the page: every control's parts (labels, slider tracks,
# readouts, dropdowns, buttons) as boxes, visible ones only.
_CONTROL_BOXES = """() => {
  const sel = '.widget-label, .widget-readout, .slider-container, .widget-dropdown select, '
            + '.widget-toggle-button, button.jupyter-button, .widget-html-content';
  return [...document.querySelectorAll(sel)].filter(e => {
      const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
      return r.width > 0 && r.height > 0 && cs.visibility !== 'hidden' && e.offsetParent !== null
          && (e.textContent.trim() || !e.matches('.widget-label, .widget-html-content'))
          && !e.closest('.collnb-static') && !e.closest('.widget-html-content .widget-html-content');
  }).map(e => { const r = e.getBoundingClientRect();
      return {what: (e.className.split(' ')[0] || e.tagName) + ': ' + (e.textContent || '').trim().slice(0, 30),
              x0: r.left, y0: r.top, x1: r.right, y1: r.bottom, inControls: !!e.closest('.widget-hbox'),
              text: !e.matches('.widget-html-content') };
  });
}"""


def _overlaps(boxes, tol=1.0):
    """Pairs of control parts whose boxes overlap by more than ``tol`` px both ways (one part
    inside another, e.g. a readout inside its slider's row, does not count: only parts)."""
    bad = []
    parts = [b for b in boxes if b["inControls"]]
    for i, a in enumerate(parts):
        for b in parts[i + 1:]:
            w = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
            h = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if w > tol and h > tol:
                bad.append((a["what"], b["what"], round(w), round(h)))
    return bad


def _start_voila(tmp_path, port):
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), PYTHONPATH=str(ROOT))
    log = open(tmp_path / "voila.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "collnb", "present", "--port", str(port), "--no-browser"],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:   # Voila says it listens on the port (the page itself starts a kernel, so it is not fetched here)
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            said = (tmp_path / "voila.log").read_text(errors="replace").partition("is running at:")[2]
            if f"127.0.0.1:{port}/" in said:   # Voila's own line, not collnb's "projector view: URL"
                return proc
            raise ConnectionRefusedError("a listener, but Voila has not said it is running on the port yet")
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("voila did not start:\n" + (tmp_path / "voila.log").read_text()[-3000:])
            time.sleep(0.5)


def _stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _settled(read, what, timeout=60):
    """Wait until ``read()`` (a layout measured in the page) gives the same value three times in a
    row, 0.2 s apart, and return it; ``timeout`` (s) is an upper bound, ``what`` says what was waited for."""
    deadline = time.monotonic() + timeout
    last, same = None, 0
    while time.monotonic() < deadline:
        now = read()
        same = same + 1 if now == last and now is not None else 0
        if same >= 2:
            return now
        last = now
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} to settle; last {last!r}")


def _layout(page):
    """Every visible control part's box and the two pictures' widths (what the projector test measures)."""
    return json.dumps([page.evaluate(_CONTROL_BOXES),
                       page.evaluate("() => [...document.querySelectorAll('img.collnb-heatmap, .collnb-replay img')]"
                                     ".map(e => [e.complete, e.naturalWidth, e.getBoundingClientRect().width])")])


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(900)
def test_projector_view_is_laid_out_for_a_room(tmp_path, chromium):
    """``python -m collnb present`` in Chromium at 1920x1080 and 1280x720 (issue 19 item 4): no code,
    no two control parts overlap, no slider collapsed, the heatmap and the replay frame fill the
    width, type large enough for a room, every primitive selectable (and drawn when chosen), no
    "run this cell" in an app without cells."""
    pytest.importorskip("voila")
    from collnb.cli.present import FONT_PX
    import collnb

    port = free_port()
    proc = _start_voila(tmp_path, port)
    shots = Path(os.environ.get("COLLNB_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    measured = {}
    try:
        page = chromium.new_page(viewport={"width": 1920, "height": 1080})
        page.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())
        page.goto(f"http://127.0.0.1:{port}/", timeout=240_000)
        page.wait_for_function(
            "() => document.querySelector('img.collnb-heatmap') && document.querySelector('.collnb-replay img')"
            " && document.querySelectorAll('.widget-slider, .widget-dropdown').length >= 4"
            " && document.querySelector('.collnb-status-box')?.dataset.busy === '0'", timeout=240_000)
        _settled(lambda: _layout(page), "the projector view's layout at 1920x1080")
        code_cells = page.eval_on_selector_all(
            ".jp-CodeCell .jp-InputArea, .jp-CodeMirrorEditor, .cm-content",
            "els => els.filter(e => e.offsetHeight > 0 && e.textContent.trim()).length")
        assert code_cells == 0, "the projector view shows code cells"
        for width, height in ((1920, 1080), (1280, 720)):
            page.set_viewport_size({"width": width, "height": height})
            _settled(lambda: _layout(page), f"the projector view's layout at {width}x{height}")
            boxes = page.evaluate(_CONTROL_BOXES)
            bad = _overlaps(boxes)
            tracks = [b["x1"] - b["x0"] for b in boxes if b["what"].startswith("slider-container")]
            fig = page.eval_on_selector("img.collnb-heatmap", "e => e.getBoundingClientRect().width")
            frame = page.eval_on_selector(".collnb-replay img", "e => e.getBoundingClientRect().width")
            label_px = page.eval_on_selector_all(
                ".collnb-explorer .widget-label", "els => els.filter(e => e.offsetParent && e.textContent.trim())"
                ".map(e => parseFloat(getComputedStyle(e).fontSize) * (parseFloat(getComputedStyle("
                "document.documentElement).zoom) || 1))")
            text = page.inner_text("body")
            page.screenshot(path=str(shots / f"projector_{width}x{height}.png"))
            page.locator(".collnb-replay").first.evaluate("e => e.scrollIntoView({block: 'start'})")
            page.screenshot(path=str(shots / f"projector_{width}x{height}_replay.png"))
            page.locator(".collnb-explorer").first.evaluate("e => e.scrollIntoView({block: 'start'})")
            measured[f"{width}x{height}"] = dict(
                overlaps=bad, n_parts=len(boxes), min_track_px=round(min(tracks)) if tracks else None,
                figure_px=round(fig), frame_px=round(frame), min_label_px=min(label_px) if label_px else None)
            print(width, height, measured[f"{width}x{height}"])
            assert not bad, f"{width}x{height}: control parts overlap: {bad[:6]}"
            assert tracks and min(tracks) >= 80, f"{width}x{height}: a slider collapsed: {tracks}"
            assert fig >= 0.85 * width and frame >= 0.85 * width, (width, fig, frame)
            assert "run this cell" not in text.lower(), "the app says to run a cell, and it has none"
            assert "import collnb" not in text and "collnb.explore(" not in text
            if width == 1920:
                assert label_px and min(label_px) >= FONT_PX - 0.01, label_px
        # every primitive is offered and selectable: the explorer draws the one chosen
        select = page.locator(".collnb-explorer .collnb-primitive select")
        assert not select.is_disabled()
        offered = select.evaluate("s => [...s.options].map(o => o.value)")
        assert sorted(offered) == sorted(collnb.PRIMITIVES)
        for prim in ("all_to_all", "gather_object", "barrier"):
            select.evaluate("s => s.scrollIntoView({block: 'center'})")  # Voila scrolls an inner element
            select.select_option(prim, force=True)
            page.wait_for_function(
                f"() => document.querySelector('.collnb-figure-text span')?.dataset.primitive === '{prim}'"
                " && document.querySelector('.collnb-status-box')?.dataset.busy === '0'", timeout=120_000)
        page.locator(".collnb-explorer").first.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(shots / "projector_barrier_1280x720.png"))
        page.close()
    finally:
        _stop(proc)
    print("measured:", json.dumps(measured))


# ------------------------------------------------------------------------------------------------
# Slides (RISE in JupyterLab)


def _wait_kernel_idle(port, token, path, timeout=120):
    """Wait until the server's session for ``path`` has an idle kernel with a connection (the
    page's); ``timeout`` (s) is an upper bound."""
    deadline = time.monotonic() + timeout
    sessions = None
    while time.monotonic() < deadline:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/sessions",
                                     headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            sessions = json.loads(r.read())
        if any(s.get("path") == path and (s.get("kernel") or {}).get("execution_state") == "idle"
               and (s.get("kernel") or {}).get("connections", 0) >= 1 for s in sessions):
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {path}'s kernel to be idle: {sessions}")


def _deck(cells):
    nb = {"cells": [], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                    "rise": {"width": 1280, "height": 720, "scroll": True, "transition": "none"}},
          "nbformat": 4, "nbformat_minor": 5}
    for i, (kind, src, slide) in enumerate(cells):
        cell = {"cell_type": kind, "id": f"c{i}", "metadata": {"slideshow": {"slide_type": slide}}, "source": src}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        nb["cells"].append(cell)
    return nb


#: A deck with an explorer and a replay, each on its own slide under a title.
DECK = _deck([
    ("markdown", "# Collectives, live\n\nA title slide.", "slide"),
    ("markdown", "## all_reduce, explored", "slide"),
    ("code", "import collnb\ncollnb.explore('all_reduce', world_size=4)", "-"),
    ("markdown", "## The ring, round by round", "slide"),
    ("code", "import collnb\ncollnb.replay(collnb.run_algorithm('all_reduce', 'ring', 4))", "-"),
])


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(900)
def test_rise_slides_at_1280x720(tmp_path, chromium):
    """jupyterlab-rise (lab extra) serves a notebook as a reveal.js deck at /rise/<path>, in the
    learner's lab (etc/lab config, rise.css beside the notebooks as make lab copies it):

    * 01_broadcast: one top-level slide per cell marked ``slide``, the skipped cells (Colab set-up,
      solutions) absent;
    * a deck with an explorer and a replay, driven in Chromium at 1280x720 (issue 19 item 3): on each
      slide the cell is run on the slide (Ctrl+Enter); the explorer's and the replay's picture shows
      within the slide, scaled to it, with the slides' wording (jupyterlab-rise 0.43 cannot load the
      ipywidgets 8 manager, jupyterlab-contrib/rise#119: if a later release can, the live controls
      must then be on the slide instead); no "Click to add a cell." box anywhere on a slide."""
    from collnb.views.static import SLIDES_LINE

    src = ROOT / "notebooks" / "01_broadcast.ipynb"
    nb = json.loads(src.read_text())
    want_slides = sum(c["metadata"]["slideshow"]["slide_type"] == "slide" for c in nb["cells"])
    skipped = [_src(c).splitlines()[0] for c in nb["cells"] if c["metadata"]["slideshow"]["slide_type"] == "skip"]
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(src, root / src.name)
    shutil.copy(ROOT / "notebooks" / "rise.css", root / "rise.css")
    (root / "deck.ipynb").write_text(json.dumps(DECK))
    env = dict(os.environ, PYTHONPATH=str(ROOT), JUPYTER_CONFIG_PATH=str(ROOT / "etc" / "lab"))
    for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")):
        (tmp_path / sub).mkdir()
        env[var] = str(tmp_path / sub)
    port, token = free_port(), "t" + os.urandom(8).hex()
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("jupyter")), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=None"] + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    shots = Path(os.environ.get("COLLNB_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    measured = {}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/status",   # this server, by its token
                                             headers={"Authorization": f"token {token}"})
                urllib.request.urlopen(req, timeout=10).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("jupyter lab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
                time.sleep(0.5)
        page = chromium.new_page(viewport={"width": 1280, "height": 720})
        page.route(re.compile(r"^https?://(?!127\.0\.0\.1)"), lambda route: route.abort())
        page.goto(f"http://127.0.0.1:{port}/rise/{src.name}?token={token}", timeout=180_000)
        # reveal.js marks its wrapper "ready" once the deck is laid out
        page.wait_for_selector(".reveal.ready .slides > section", timeout=180_000)
        n_slides = page.eval_on_selector_all(".reveal .slides > section", "els => els.length")
        deck = page.inner_text(".reveal .slides")
        page.screenshot(path=str(shots / "rise-01_broadcast.png"))

        page.goto(f"http://127.0.0.1:{port}/rise/deck.ipynb?token={token}", timeout=180_000)
        page.wait_for_selector(".reveal.ready .slides > section", timeout=180_000)
        _wait_kernel_idle(port, token, "deck.ipynb")
        for what, name, heading in (("explorer", "rise-explorer.png", "all_reduce, explored"),
                                    ("replay", "rise-replay.png", "The ring, round by round")):
            page.keyboard.press("ArrowRight")
            page.locator(".reveal .slides section.present h2", has_text=heading).wait_for(timeout=60_000)
            slide = page.locator(".reveal .slides section.present:not(.stack)").last
            slide.locator(".jp-CodeCell").first.click()
            page.keyboard.press("Escape")
            page.keyboard.press("Control+Enter")   # run the cell on the slide, stay on it
            shown = slide.locator(".collnb-live, .collnb-static img")
            shown.first.wait_for(state="attached", timeout=120_000)

            def laid_out(slide=slide):
                live = slide.locator(".collnb-live").count()
                img = slide.locator(".collnb-static img").first
                if not live and not img.evaluate("e => e.complete && e.naturalWidth > 0"):
                    return None
                return json.dumps([live, (slide.locator(".collnb-live").first if live else img).bounding_box(),
                                   slide.locator("h2").first.bounding_box()])

            _settled(laid_out, f"the {what}'s picture on its slide")
            live = slide.locator(".collnb-live").count()
            img = slide.locator(".collnb-static img").first
            box = (slide.locator(".collnb-live").first if live else img).bounding_box()
            title = slide.locator("h2").first.bounding_box()
            footers = page.eval_on_selector_all(
                ".jp-Notebook-footer", "els => els.filter(e => e.offsetParent !== null && "
                "e.getBoundingClientRect().height > 0).map(e => e.textContent.trim())")
            line = "" if live else slide.locator(".collnb-static-line").first.inner_text()
            page.screenshot(path=str(shots / name))
            measured[what] = dict(live=bool(live), box=box, title=title, footers=footers, line=line)
            print(what, measured[what])
            assert box and box["width"] > 300, f"the {what} is not on its slide: {box}"
            assert box["x"] >= 0 and box["x"] + box["width"] <= 1280 + 1, f"the {what} runs off the slide: {box}"
            assert box["y"] + box["height"] <= 720 + 1, f"the {what} runs below the slide: {box}"
            assert title and title["y"] + title["height"] <= box["y"] + 1, "the picture covers the slide title"
            assert not footers, f"JupyterLab's footer is on the slides: {footers}"
            if not live:
                assert line == SLIDES_LINE.format(what=what), line
        page.close()
        assert n_slides == want_slides, f"{n_slides} slides, the metadata marks {want_slides}"
        assert "01 · broadcast" in deck
        for first_line in skipped:
            assert first_line not in deck, f"a skipped cell is on the slides: {first_line!r}"
    finally:
        _stop(proc)
    print("measured:", json.dumps(measured))


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
