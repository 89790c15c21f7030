"""The book's execution report: a notebook that fails to execute during ``make docs`` is named at the
end of the build, with the failing cell and the error text, in plain words (not only in a temp log).

MyST-NB executes every notebook (``nb_execution_raise_on_error = False`` in ``conf.py``, so one
failing notebook does not hide the others) and keeps each result in the build environment
(``NbMetadataCollector`` exec data: ``succeeded``, ``error``, ``traceback``). At the end of the
build this module

* prints, per failed notebook, the cell (its number and first line) and the error's last lines
  (e.g. ``CheckFailed: ✗ not quite: you predicted 300``), and how to run the notebook yourself;
* writes the same, with the whole traceback, to ``<build>/../failed-notebooks.txt``;
* fails the build (exit status 1), and marks the failed notebooks outdated so that the next build
  (``make docs`` retries once) executes them again, and only them.

It also makes the execution cache's database before the (parallel, ``-j 2``) read starts: jupyter-cache
1.0 creates its sqlite tables on first use, in whichever process gets there first, and two forked
readers that both found no database raced to ``CREATE TABLE nbcache`` (``sqlite3.OperationalError:
table nbcache already exists``, a Sphinx parallel build error, exit status 2 instead of the report).

``conf.py`` calls :func:`setup`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["parse_failure", "failures", "report", "make_cache", "setup"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL = re.compile(r"An error occurred while executing the following cell:\n-+\n(.*?)\n-+\n", re.S)
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Failed|Interrupt|Exit|Timeout|Warning)|"
                       r"KeyboardInterrupt|StopIteration|AssertionError)\b:?")
MAX_ERROR_LINES = 12


def parse_failure(traceback: str, cells: list[str] | None = None) -> dict:
    """What failed, from MyST-NB's traceback text (nbclient's ``CellExecutionError``).

    Args:
        traceback: the text (ANSI colours are removed).
        cells: the sources of the notebook's cells, in order, to find the failing cell's number.

    Returns:
        ``{"cell": 1-based number or None, "first_line": the cell's first code line or "",
        "error": the error's last lines (at most :data:`MAX_ERROR_LINES`), "source": the cell}``.
    """
    text = _ANSI.sub("", traceback or "")
    m = _CELL.search(text)
    source = m.group(1).strip("\n") if m else ""
    number = None
    if source and cells:
        for i, cell in enumerate(cells):
            if cell.strip() == source.strip():
                number = i + 1
                break
    first = next((ln.strip() for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")),
                 source.strip().splitlines()[0] if source.strip() else "")
    lines = [ln.rstrip() for ln in text.splitlines()]
    start = None
    for i, ln in enumerate(lines):
        if _EXC_LINE.match(ln):
            start = i
    if start is None:
        tail = [ln for ln in lines if ln.strip()][-MAX_ERROR_LINES:]
    else:
        tail = [ln for ln in lines[start:] if ln.strip()][:MAX_ERROR_LINES]
    return {"cell": number, "first_line": first, "error": "\n".join(tail), "source": source}


def failures(env) -> list[tuple[str, dict]]:
    """``[(docname, exec data)]`` of the documents whose execution failed in this build environment."""
    from myst_nb.sphinx_ import NbMetadataCollector

    out = []
    for docname, data in sorted(NbMetadataCollector.get_doc_data(env).items()):
        ex = data.get("exec_data")
        if ex and not ex.get("succeeded", True):
            out.append((docname, ex))
    return out


def _cells(path: Path) -> list[str]:
    import json
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb.get("cells", [])]


def report(failed: list[tuple[str, dict]], srcdir: Path, jupyter: str = ".venv/bin/jupyter") -> tuple[str, str]:
    """``(short, full)``: the end-of-build summary of ``failed`` (see :func:`failures`) and the same
    with every traceback (for ``failed-notebooks.txt``)."""
    n = len(failed)
    head = (f"The book: {n} notebook{'s' if n != 1 else ''} failed to execute, so {'their pages show' if n != 1 else 'its page shows'} "
            f"no outputs and the build fails:")
    short, full = [head], [head]
    for docname, ex in failed:
        path = Path(srcdir) / f"{docname}.ipynb"
        info = parse_failure(ex.get("traceback") or "", _cells(path))
        rel = f"{docname}.ipynb"
        where = f"cell {info['cell']}" if info["cell"] else "a cell"
        if info["first_line"]:
            where += f" ({info['first_line'][:90]})"
        block = [f"  {rel}, {where}:"] + [f"    {ln}" for ln in (info["error"] or ex.get("error") or "?").splitlines()]
        short += block
        full += block + ["", "  the whole traceback:"] + [f"    {ln}" for ln in _ANSI.sub(
            "", ex.get("traceback") or "").splitlines()] + [""]
    tail = [f"To see it fail outside the book: {jupyter} nbconvert --to notebook --execute --stdout "
            f"{failed[0][0]}.ipynb > /dev/null"] if failed else []
    return "\n".join(short + tail), "\n".join(full + tail)


def _outdated(app, env, added, changed, removed):
    # a notebook that failed last time is executed again (the others come from the cache)
    return [d for d, _ in failures(env) if d not in removed]


def _finished(app, exception):
    if exception is not None or app.builder is None:
        return
    failed = failures(app.env)
    out = Path(app.outdir).parent / "failed-notebooks.txt"
    if not failed:
        if out.exists():
            out.unlink()
        return
    short, full = report(failed, Path(app.srcdir))
    out.write_text(full + "\n")
    print("\n" + short + f"\n(everything, with the tracebacks: {out})", file=sys.stderr, flush=True)
    app.statuscode = 1


def make_cache(app) -> None:
    """``builder-inited``: with ``nb_execution_mode = "cache"``, create the cache folder and its
    database (``jupyter_cache.cache.db.create_db``) in the main process, before Sphinx forks its
    parallel readers, so that no two readers create its tables at once. An existing database is
    left as it is (``create_db`` only adds tables to a new file)."""
    if app.config.nb_execution_mode != "cache":
        return
    from jupyter_cache.cache.db import create_db

    # MyST-NB's own builder-inited handler (registered first) has resolved the path by now
    nb_config = getattr(app.env, "mystnb_config", None)
    path = Path(getattr(nb_config, "execution_cache_path", None) or app.config.nb_execution_cache_path
                or Path(app.outdir).parent / ".jupyter_cache")
    path.mkdir(parents=True, exist_ok=True)
    create_db(path).dispose()


def setup(app):
    """Register the cache's creation (``builder-inited``) and the report (``env-get-outdated``,
    ``build-finished``)."""
    app.connect("builder-inited", make_cache)
    app.connect("env-get-outdated", _outdated)
    app.connect("build-finished", _finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
