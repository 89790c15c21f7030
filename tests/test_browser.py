"""The explorer in a real browser: JupyterLab 4 and Jupyter Notebook 7 from .venv on loopback,
headless Chromium (Debian's ``chromium`` package) driven by Playwright's Python package, a real
drag of the world-size slider and a real dtype change, and the values read back from the page
(the heatmap ``<img>``'s ``data-*`` attributes and ``alt`` text).

Screenshots go to a temporary directory; set ``COLLNB_SCREENSHOTS=DIR`` to keep copies.
"""
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
REPO = Path(__file__).resolve().parents[1]
JUPYTER = REPO / ".venv" / "bin" / "jupyter"

NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# explorer in the browser"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["import collnb\n",
                    "ex = collnb.explore(\"all_reduce\", world_size=4)\n",
                    "ex"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["print('second cell ran', ex.runs_finished)"]},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wrap_int8(v):
    return ((v + 128) % 256) - 128


def _sum_rows(ws, cast=lambda v: v):
    return ";".join(",".join(str(cast(sum(10 * r + c for r in range(ws)))) for c in range(ws))
                    for _ in range(ws))


def _api(base, token, path, method="GET"):
    req = urllib.request.Request(f"{base}{path}", method=method,
                                 headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


# front end -> (jupyter subcommand, its own options, the notebook's URL path)
FRONT_ENDS = {
    "jupyterlab": ("lab", ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                           "--LabApp.extension_manager=readonly"], "/lab/tree/explore.ipynb"),
    "notebook7": ("notebook", [], "/notebooks/explore.ipynb"),
}


@pytest.fixture(params=sorted(FRONT_ENDS))
def lab(tmp_path, request):
    command, options, url = FRONT_ENDS[request.param]
    if not os.path.exists(CHROMIUM):
        print(f"SKIP reason: {CHROMIUM} is missing (Debian package 'chromium'; .ci/run installs it)")
        pytest.skip(f"{CHROMIUM} is missing; install Debian's chromium package")
    pytest.importorskip("playwright.sync_api")
    root = tmp_path / "root"
    root.mkdir()
    (root / "explore.ipynb").write_text(json.dumps(NOTEBOOK))
    env = dict(os.environ)
    for var, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"),
                     ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
                     ("IPYTHONDIR", "ipython")):
        (tmp_path / sub).mkdir()
        env[var] = str(tmp_path / sub)
    # no news / update checks (no network here, and no toast over the screenshots)
    notif = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    notif.mkdir(parents=True)
    (notif / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [str(JUPYTER), command, "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--ServerApp.terminals_enabled=False"] + options
        + (["--allow-root"] if os.geteuid() == 0 else []),
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    seen = {}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _api(base, token, "/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter {command} did not start:\n" +
                                       (tmp_path / "lab.log").read_text(errors="replace")[-3000:])
                time.sleep(0.3)
        yield dict(base=base, token=token, root=root, tmp=tmp_path, proc=proc, seen=seen,
                   url=url, name=request.param)
    finally:
        for p in _descendants(proc.pid):
            seen[p.pid] = p
        try:
            _api(base, token, "/api/shutdown", method="POST")
        except OSError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)
        log.close()
        # every process JupyterLab started (kernel, its ranks) is gone within a few seconds
        deadline = time.monotonic() + 10
        alive = [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in alive:
            p.kill()
        assert not alive, f"left running after JupyterLab shut down: {[(p.pid, p.cmdline()) for p in alive]}"
        assert proc.returncode is not None


def _kernel_connected(lab):
    """The server's view: the notebook's kernel is idle and the page holds a connection to it."""
    for sess in _api(lab["base"], lab["token"], "/api/sessions") or []:
        k = sess.get("kernel") or {}
        if sess.get("path", "").endswith("explore.ipynb") and k.get("execution_state") == "idle" \
                and k.get("connections", 0) >= 1:
            return True
    return False


def _accept_dialog(page):
    btn = page.locator(".jp-Dialog .jp-mod-accept")
    if btn.count() and btn.first.is_visible():
        btn.first.click()
        return True
    return False


def _until(page, ok, timeout, what):
    """Poll ``ok()`` (accepting any JupyterLab dialog meanwhile) until it holds for 1 s."""
    deadline = time.monotonic() + timeout
    since = None
    while time.monotonic() < deadline:
        if _accept_dialog(page):
            since = None
        elif ok():
            since = since or time.monotonic()
            if time.monotonic() - since >= 1.0:
                return
        else:
            since = None
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _run_all_cells(page, timeout=120):
    """Run -> Run All Cells through the menu, until the heatmap is on the page. JupyterLab can
    swallow the first request while it is still connecting the kernel session (a "Select
    Kernel" dialog, or nothing): if no cell has started after 10 s, ask again."""
    def click():
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        return time.monotonic()

    clicked = click()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _accept_dialog(page)
        if page.locator("img.collnb-heatmap").count() > 0:
            return
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        running = any("*" in p for p in prompts)
        first_ran = bool(prompts) and re.search(r"\[(\*|\d+)\]", prompts[0])
        if not running and not first_ran and time.monotonic() - clicked > 10:
            clicked = click()
        time.sleep(0.2)
    raise AssertionError(f"no heatmap on the page after {timeout} s")


def _img(page):
    return page.locator("img.collnb-heatmap").first


def _wait_attr(page, name, value, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = _img(page).get_attribute(f"data-{name}")
        if last == value:
            return
        time.sleep(0.1)
    raise AssertionError(f"data-{name} stayed {last!r}, wanted {value!r}")


def test_explorer_in_the_browser(lab):
    from playwright.sync_api import sync_playwright
    # kept after the run (git-ignored) so that people can look at what the learner saw
    shots = pathlib.Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {shots}")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(f"{lab['base']}{lab['url']}?token={lab['token']}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            # wait for an idle kernel (accepting the "Select Kernel" dialog JupyterLab may show
            # for a notebook it has not run before), then Run -> Run All Cells through the menu
            _until(page, lambda: page.locator(
                ".jp-Notebook-ExecutionIndicator[data-status='idle']").count() > 0
                and _kernel_connected(lab), 60, "an idle, connected kernel")
            _run_all_cells(page)
            page.locator(".jp-OutputArea-output pre", has_text="second cell ran").wait_for(timeout=60_000)
            img = _img(page)
            img.scroll_into_view_if_needed()
            assert img.get_attribute("data-world-size") == "4"
            assert img.get_attribute("data-after") == _sum_rows(4)
            assert "After: rank 0: [60, 64, 68, 72]" in img.get_attribute("alt")
            page.screenshot(path=str(shots / f"{lab['name']}_1_initial.png"), full_page=True)

            # drag the world-size slider's handle with the mouse to 8 (1..16 along the track)
            slider = page.locator(".collnb-world-size")
            track = slider.locator(".noUi-target").first
            handle = slider.locator(".noUi-handle").first
            tb, hb = track.bounding_box(), handle.bounding_box()
            page.mouse.move(hb["x"] + hb["width"] / 2, hb["y"] + hb["height"] / 2)
            page.mouse.down()
            target_x = tb["x"] + tb["width"] * (8 - 1) / (16 - 1)
            page.mouse.move(target_x, hb["y"] + hb["height"] / 2, steps=12)
            page.mouse.up()
            readout = slider.locator(".widget-readout").first
            got = int(readout.inner_text().strip())
            # fine-tune with the keyboard on the handle if the pixel maths landed next door
            for _ in range(16):
                if got == 8:
                    break
                handle.press("ArrowRight" if got < 8 else "ArrowLeft")
                time.sleep(0.05)
                got = int(readout.inner_text().strip())
            assert got == 8
            _wait_attr(page, "world-size", "8")
            assert img.get_attribute("data-after") == _sum_rows(8)
            assert img.get_attribute("data-dtype") == "float32"
            page.screenshot(path=str(shots / f"{lab['name']}_2_world_size_8.png"), full_page=True)

            # change the dtype through the dropdown: int8 SUM wraps, the float64 reference shows why
            page.locator(".collnb-dtype select").select_option("int8")
            _wait_attr(page, "dtype", "int8")
            assert img.get_attribute("data-world-size") == "8"
            assert img.get_attribute("data-after") == _sum_rows(8, _wrap_int8)
            assert img.get_attribute("data-exact") == _sum_rows(8)
            ref = page.locator("table.collnb-reference")
            assert ref.get_attribute("data-differs") == "64"
            assert page.locator("table.collnb-reference td.differs").count() == 64
            status = page.locator(".collnb-status").inner_text()
            assert "dtype effect: int8 gives 24 where float64 gives 280" in status
            # the image really is a PNG the browser decoded
            size = img.evaluate("el => [el.naturalWidth, el.naturalHeight, el.complete]")
            assert size[0] > 300 and size[1] > 200 and size[2]
            page.screenshot(path=str(shots / f"{lab['name']}_3_int8.png"), full_page=True)
            img.screenshot(path=str(shots / f"{lab['name']}_4_heatmap_int8.png"))
        except BaseException:
            try:
                page.screenshot(path=str(shots / f"{lab['name']}_failure.png"), full_page=True)
                print(f"screenshot of the failure: {shots / (lab['name'] + '_failure.png')}")
            except Exception:
                pass
            raise
        finally:
            browser.close()
            keep = os.environ.get("COLLNB_SCREENSHOTS")
            if keep:
                os.makedirs(keep, exist_ok=True)
                for f in shots.iterdir():
                    shutil.copy(f, keep)
