import glob
import os
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest


_SUMMARY = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def run_summary(request) -> list:
    """Lines printed at the end of the run, after the test summary, also under ``-q``: where a costly
    input came from (tests/test_notebooks.py: each notebook's execution, the book's or its own, and why)."""
    return request.config.stash.setdefault(_SUMMARY, [])


#: The built book (``make docs``; .ci/run builds it before ``make test``).
BOOK = Path(__file__).resolve().parents[1] / "docs" / "_build" / "html"
#: Seconds the ``book`` fixture gives ``make docs`` (and a worker waiting for another's build): about
#: 330 s on 2 idle cores, 835 s on 2 cores at load 15 (four busy loops beside a two-worker run).
BOOK_BUILD_S = 2400


def pytest_collection_modifyitems(config, items):
    """A test that uses the ``book`` fixture is timed by pytest-timeout in its function only
    (``func_only=True``, with the timeout it had): the fixture may wait for ``make docs`` on the other
    worker, which on a loaded machine took longer than the 300 s a test may take (every test of
    test_zh_edition.py failed so), and the fixture bounds that wait itself (:data:`BOOK_BUILD_S`)."""
    for item in items:
        if "book" in getattr(item, "fixturenames", ()):
            marker = item.get_closest_marker("timeout")
            seconds = None if marker is None else marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
            item.add_marker(pytest.mark.timeout(seconds, func_only=True), append=False)


@pytest.fixture(scope="session")
def book(request, run_summary) -> Path:
    """The built book (``make docs``, which CI runs before ``make test``), ``docs/_build/html``.

    Without one, when this run selected test_docs.py's book test, it is built here, saying so first:
    ``make docs`` executes every notebook of both editions once (about 14 min on 2 idle cores), into the
    execution cache tests/test_notebooks.py and tests/test_zh_edition.py then read, so the notebooks
    still run once in the whole run. On pytest-xdist's workers one builds it under a file lock and the
    others wait for it. Without test_docs.py's book test selected nothing is built (the notebook tests
    execute the notebooks themselves; the Chinese book's tests skip, naming ``make docs``)."""
    import filelock

    wanted = any(item.path.name == "test_docs.py" and item.name.startswith("test_book_pages")
                 for item in request.session.items)
    if wanted and not (BOOK / "docs" / "index.html").is_file():
        BOOK.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(BOOK.parent / ".book-build.lock"), timeout=BOOK_BUILD_S):
            if not (BOOK / "docs" / "index.html").is_file():  # another worker may have built it meanwhile
                note = ("tests/conftest.py: no built book (docs/_build/html), so it is built now with make docs: "
                        "every notebook executed once, en + zh; the notebook tests then read those executions")
                reporter = request.config.pluginmanager.get_plugin("terminalreporter")
                if reporter is not None:
                    reporter.write_line("\n" + note)
                t0 = time.monotonic()
                subprocess.run(["make", "docs"], cwd=BOOK.parents[2], check=True, timeout=BOOK_BUILD_S)
                run_summary.append(f"{note} (built in {time.monotonic() - t0:.0f} s)")
    return BOOK


def pytest_sessionfinish(session):
    """On a pytest-xdist worker: hand the lines for the end of the run to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["collnb_summary"] = list(session.config.stash.get(_SUMMARY, []))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller (``make test``: ``-n 2 --dist loadfile``, each test file on one worker, so a
    module's fixtures are made once): a worker finished; keep its lines for :func:`pytest_terminal_summary`."""
    lines = getattr(node, "workeroutput", {}).get("collnb_summary", [])
    node.config.stash.setdefault(_SUMMARY, []).extend(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("where the notebooks' executions came from")
        for line in lines:
            terminalreporter.write_line(line)


#: Debian's Chromium, which Playwright drives in the browser and classroom tests (.ci/run installs it).
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def chromium(request):
    """One headless Chromium for a module's browser tests: each test opens its own pages (each page its
    own browser context: no cookies, storage or cache shared between tests) and closes them. Launched with
    the module's ``CHROMIUM_ARGS`` (else ``--no-sandbox --disable-gpu``); skipped, saying why, where
    Chromium or Playwright is missing."""
    if not os.path.exists(CHROMIUM):
        print(f"SKIP reason: {CHROMIUM} is missing (Debian package 'chromium'; .ci/run installs it)")
        pytest.skip(f"{CHROMIUM} is missing; install Debian's chromium package")
    sync_api = pytest.importorskip("playwright.sync_api")
    pw = sync_api.sync_playwright().start()
    try:
        args = getattr(request.module, "CHROMIUM_ARGS", ["--no-sandbox", "--disable-gpu"])
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


def live_children():
    """Child processes of this test process that are still running (zombies count: not reaped)."""
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def pool_dirs():
    return glob.glob(os.path.join(tempfile.gettempdir(), f"collnb-{os.getpid()}-*"))


@pytest.fixture
def fresh_pool():
    """No warm pool when the test starts, and none left when it ends: for a test that counts, kills
    or inspects the warm ranks, or must see ranks start. Yields the function that returns the warm
    pool the test made (``collnb.ranks.warm_pool``)."""
    import collnb
    from collnb.ranks import warm_pool
    collnb.shutdown()
    yield warm_pool
    collnb.shutdown()


#: The ranks a plain ``collnb.launch(fn, n)`` runs on.
def _default_setup():
    from collnb.ranks import RankSetup
    from collnb.ranks.local.rankset import default_start_method
    return RankSetup(start_method=default_start_method())


@pytest.fixture(autouse=True)
def _warm_pool_left_as_a_plain_launch_finds_it():
    """After every test, the one warm pool of this process is left as a plain ``collnb.launch`` would
    find it, or not at all: a pool made another way (another collective_timeout, debug=False, the
    Flight Recorder, spawn), closed after a failure, retired by its last call (a replaced torch
    function) or with a dead rank is shut down. So no test's pass depends on what an earlier test
    did to the pool (its ranks' state, the "starting fresh ranks" line a retired pool prints)."""
    yield
    from collnb.ranks import warm_pool
    pool = warm_pool()
    if pool is None:
        return
    if pool.lock.acquire(blocking=False):  # a pool still in use by a test's thread is that test's to end
        try:
            unfit = pool.broken or pool.setup != _default_setup() or bool(pool.settle()) or bool(pool.dead_ranks())
        finally:
            pool.lock.release()
    else:
        unfit = True
    if unfit:
        import collnb
        collnb.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _no_leftovers_at_end():
    yield
    import collnb
    collnb.shutdown()
    left = live_children()
    assert not left, f"processes left behind: {[(p.pid, p.name(), p.status()) for p in left]}"
    assert not pool_dirs(), f"pool directories left behind: {pool_dirs()}"
    # the virtual clusters (collnb.labs.cluster): collnb.shutdown() removed every network namespace this
    # process made, whatever its tests did (a test that failed inside a `with cluster(...)` included)
    import shutil
    import subprocess
    if shutil.which("ip"):
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        ours = [line.split()[0] for line in listing.splitlines() if line.startswith(f"collnb-{os.getpid()}-")]
        assert not ours, f"network namespaces left behind: {ours}"
