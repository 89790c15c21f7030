#!/usr/bin/env python3
"""Apply every piece of notebook metadata collnb's publishing and classroom set-up needs.

One idempotent script, run by ``make docs`` / ``make meta`` (and re-run after notebooks are merged
or edited: running it twice changes nothing). Standard library only. For each notebook in
``notebooks/`` it

* puts a **Colab set-up cell** first (id ``colab-setup``): on Google Colab it installs collnb from
  the repository named in ``pyproject.toml``'s ``[project.urls]`` (Colab keeps its own torch:
  collnb's requirement is a range) and turns on Colab's custom-widget manager; anywhere else it does
  nothing. The book hides it (tag ``remove-cell``), slides skip it;
* gives every cell **RISE slide metadata** (``slideshow.slide_type``) where it has none: ``#``/``##``
  headings start a slide, ``###`` a sub-slide, solution and set-up cells are skipped, the rest
  continues the current slide; a teacher's own choices are kept; the deck is 1280 x 720 (``rise`` metadata);
* hides every **solution** cell (tag ``solution``) in each place notebooks are opened: JupyterLab /
  Notebook 7 (``jupyter.source_hidden``), Colab (a ``# @title`` form with ``cellView: form``: Colab
  ignores ``source_hidden``), the book (tag ``hide-input``: a "show" toggle), and slides (skipped);
* checks that links between notebooks name notebooks that exist. Relative links
  (``[text](algorithms.ipynb)``) work in JupyterLab, Binder, the book (MyST turns them into page
  links) and Colab (a notebook opened from ``colab.research.google.com/github/OWNER/REPO/blob/BRANCH/
  notebooks/x.ipynb`` resolves ``y.ipynb`` to the same path on the same branch), so they are kept;

it syncs every Chinese twin (``notebooks/zh-CN/``, ``tools/twins.py``) with its English notebook;
and it writes the README's launch-link table (between ``<!-- launch-links:start -->`` and
``<!-- launch-links:end -->``): Binder, Colab and book links for every notebook, all from ``[project.urls]``;
README.zh-CN.md's table the same way for every Chinese twin (its Binder, Colab and Chinese book page).

``python tools/notebook_meta.py --check`` changes nothing and exits 1 listing what is out of date.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"
#: The Chinese twin of README.md; its launch-link table names the Chinese notebooks (notebooks/zh-CN/).
README_ZH = ROOT / "README.zh-CN.md"
#: Where the Chinese book lies under the book's root (``make docs`` builds it into docs/_build/html/zh-CN/).
BOOK_ZH = "zh-CN"
BRANCH = "main"

COLAB_CELL_ID = "colab-setup"
#: A solution cell's Colab form title. Its Chinese, and the Colab cell's comments' (the twins' own):
#: tools/twins.py's BOILERPLATE (tests/test_zh_edition.py fails when this text and that one part).
SOLUTION_TITLE = "# @title Solution (hidden: click “Show code” to see it)"
LINKS_START, LINKS_END = "<!-- launch-links:start -->", "<!-- launch-links:end -->"
LINK_RE = re.compile(r"\]\(([^)#\s]+\.ipynb)(#[^)\s]*)?\)")


# ----------------------------------------------------------------------------------------------
# The one repository URL, and every link made from it


def repository_url(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``[project.urls] Repository`` from pyproject.toml, without a trailing slash or ``.git``.

    Raises:
        ValueError: it is missing or not a ``https://github.com/OWNER/REPO`` URL (Binder's and
            Colab's GitHub launchers need that form).
    """
    urls = tomllib.loads(pyproject.read_text())["project"].get("urls", {})
    url = urls.get("Repository", "").rstrip("/").removesuffix(".git")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"pyproject.toml [project.urls] Repository must be https://github.com/OWNER/REPO, "
                         f"got {url!r}")
    return url


def owner_repo(url: str) -> str:
    return url.removeprefix("https://github.com/")


def binder_url(url: str, notebook: str | None = None) -> str:
    """mybinder.org link; with ``notebook`` (a repo-relative path) JupyterLab opens at it."""
    base = f"https://mybinder.org/v2/gh/{owner_repo(url)}/{BRANCH}"
    return base if notebook is None else f"{base}?urlpath={quote('lab/tree/' + notebook, safe='')}"


def colab_url(url: str, notebook: str) -> str:
    return f"https://colab.research.google.com/github/{owner_repo(url)}/blob/{BRANCH}/{notebook}"


def documentation_url(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """``[project.urls] Documentation``: where the built book (``make docs``) is published."""
    url = tomllib.loads(pyproject.read_text())["project"].get("urls", {}).get("Documentation", "")
    if not url.startswith("https://"):
        raise ValueError(f"pyproject.toml [project.urls] Documentation must be an https URL, got {url!r}")
    return url.rstrip("/")


def book_url(docs: str, notebook: str) -> str:
    """The book page of ``notebooks/x.ipynb`` (the book's source tree mirrors notebooks/)."""
    return f"{docs}/{notebook.removesuffix('.ipynb')}.html"


def book_url_zh(docs: str, notebook: str) -> str:
    """The Chinese book's page of a twin ``notebooks/zh-CN/x.ipynb``: the Chinese book is built with
    the same source tree into :data:`BOOK_ZH` under the book's root (docs/conf.py, ``make docs``)."""
    return f"{docs}/{BOOK_ZH}/{notebook.removesuffix('.ipynb')}.html"


def pip_spec(url: str) -> str:
    return f"collnb @ git+{url}@{BRANCH}"


# ----------------------------------------------------------------------------------------------
# Reading and writing notebooks exactly as nbformat does (sorted keys, indent 1, lines as lists)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


from nbjson import dumps as _dumps, source as _source  # noqa: E402  (shared with twins.py)


def colab_cell(url: str) -> dict:
    """The Colab set-up cell (id ``colab-setup``); a twin's has the same code, its comments in Chinese
    (``tools/twins.py``, :data:`SOLUTION_TITLE`)."""
    source = (
        "# Google Colab only: install collnb (Colab keeps its own torch) and turn on Colab's widget support.\n"
        "# Anywhere else (JupyterLab, Binder, a JupyterHub, the book) this cell does nothing.\n"
        "import sys\n"
        "if \"google.colab\" in sys.modules:\n"
        f"    get_ipython().run_line_magic(\"pip\", \"install -q '{pip_spec(url)}'\")\n"
        "    from google.colab import output\n"
        "    output.enable_custom_widget_manager()\n"
    )
    return {"cell_type": "code", "execution_count": None, "id": COLAB_CELL_ID, "outputs": [],
            "metadata": {"tags": ["colab-setup", "remove-cell"], "slideshow": {"slide_type": "skip"}},
            "source": _lines(source.rstrip("\n"))}


def _tags(cell) -> list:
    return cell.setdefault("metadata", {}).setdefault("tags", [])


def _slide_type(cell) -> str:
    tags = cell.get("metadata", {}).get("tags", [])
    if "solution" in tags or "colab-setup" in tags:
        return "skip"
    if cell["cell_type"] == "markdown":
        first = _source(cell).lstrip().split("\n", 1)[0]
        if re.match(r"#{1,2} ", first):
            return "slide"
        if first.startswith("### "):
            return "subslide"
    return "-"


def fix_notebook(nb: dict, url: str) -> list[str]:
    """Bring one notebook (parsed JSON) up to date in place; returns what was changed."""
    changes = []
    cells = nb["cells"]
    # 1. the Colab cell, first and current
    want = colab_cell(url)
    existing = [i for i, c in enumerate(cells) if c.get("id") == COLAB_CELL_ID]
    for i in reversed(existing[1:]):
        del cells[i]
    if not existing:
        cells.insert(0, want)
        changes.append("added the Colab set-up cell")
    else:
        i = existing[0]
        cell = cells.pop(i)
        if _source(cell) != _source(want) or cell.get("metadata") != want["metadata"] or i != 0:
            changes.append("updated the Colab set-up cell")
            cell = want
        cells.insert(0, cell)
    # 2. solutions hidden everywhere
    for cell in cells:
        if cell["cell_type"] != "code" or "solution" not in cell.get("metadata", {}).get("tags", []):
            continue
        meta = cell["metadata"]
        src = _source(cell)
        if not re.match(r"#\s*@title", src):
            cell["source"] = _lines(SOLUTION_TITLE + "\n" + src)
            changes.append("solution: Colab form title")
        if meta.get("cellView") != "form":
            meta["cellView"] = "form"
            changes.append("solution: Colab cellView form")
        if meta.get("jupyter", {}).get("source_hidden") is not True:
            meta.setdefault("jupyter", {})["source_hidden"] = True
            changes.append("solution: source_hidden")
        if "hide-input" not in meta["tags"]:
            meta["tags"].append("hide-input")
            changes.append("solution: book hide-input tag")
    # 3. slides
    for cell in cells:
        meta = cell.setdefault("metadata", {})
        if "slide_type" not in meta.get("slideshow", {}):
            meta.setdefault("slideshow", {})["slide_type"] = _slide_type(cell)
            changes.append("slide metadata") if "slide metadata" not in changes else None
    # 4. RISE: a readable default for every notebook's slideshow, laid out for a 1280 x 720 projector
    # (notebooks/rise.css, beside the notebooks, fits the pictures to it)
    rise = nb["metadata"].setdefault("rise", {})
    for key, value in (("scroll", True), ("enable_chalkboard", False), ("transition", "none"), ("width", 1280),
                       ("height", 720)):
        if key not in rise:
            rise[key] = value
            changes.append("RISE settings") if "RISE settings" not in changes else None
    return changes


def broken_links(nb: dict, folder: Path) -> list[str]:
    markdown = "\n".join(_source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    return sorted({t for t, _ in LINK_RE.findall(markdown) if "://" not in t and not (folder / t).is_file()})


def readme_links(url: str, notebooks: list[Path], docs: str) -> str:
    rows = [LINKS_START,
            "<!-- written by tools/notebook_meta.py from [project.urls] in pyproject.toml; do not edit -->",
            "",
            f"[![Binder](https://mybinder.org/badge_logo.svg)]({binder_url(url)}) "
            f"(JupyterLab with every notebook, nothing to install)",
            "",
            f"The book (every notebook executed, with its figures): {docs}/",
            "",
            "| notebook | Binder | Colab | rendered, in the book |",
            "| --- | --- | --- | --- |"]
    for path in notebooks:
        rel = f"notebooks/{path.name}"
        rows.append(f"| [`{path.stem}`]({rel}) | [launch]({binder_url(url, rel)}) | "
                    f"[open]({colab_url(url, rel)}) | [read]({book_url(docs, rel)}) |")
    rows.append(LINKS_END)
    return "\n".join(rows)


def readme_links_zh(url: str, twins: list[Path], docs: str) -> str:
    """README.zh-CN.md's launch-link block: Binder, Colab and the Chinese book for every twin in
    ``twins`` (paths of ``notebooks/zh-CN/*.ipynb``), all from ``[project.urls]`` as README.md's."""
    rows = [LINKS_START,
            "<!-- 由 tools/notebook_meta.py 根据 pyproject.toml 的 [project.urls] 生成；请勿手工编辑 -->",
            "",
            f"[![Binder](https://mybinder.org/badge_logo.svg)]"
            f"({binder_url(url, 'notebooks/zh-CN/' + twins[0].name) if twins else binder_url(url)}) "
            f"（在 Binder 上打开 JupyterLab，什么都不用装）",
            "",
            f"中文版的书（每个笔记本都已执行，图都在）：{docs}/{BOOK_ZH}/",
            "",
            "| 笔记本 | Binder | Colab | 在书中阅读 |",
            "| --- | --- | --- | --- |"]
    for path in twins:
        rel = f"notebooks/zh-CN/{path.name}"
        rows.append(f"| [`{path.stem}`]({rel}) | [启动]({binder_url(url, rel)}) | "
                    f"[打开]({colab_url(url, rel)}) | [阅读]({book_url_zh(docs, rel)}) |")
    rows.append(LINKS_END)
    return "\n".join(rows)


def fix_readme(text: str, block: str, name: str = "README.md") -> str:
    """``text`` with its launch-link block replaced by ``block``.

    Raises:
        ValueError: ``text`` has no ``<!-- launch-links:start -->`` ... ``<!-- launch-links:end -->`` block.
    """
    if LINKS_START not in text or LINKS_END not in text:
        raise ValueError(f"{name} has no {LINKS_START} ... {LINKS_END} block for the launch links")
    head, rest = text.split(LINKS_START, 1)
    _, tail = rest.split(LINKS_END, 1)
    return head + block + tail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is out of date")
    args = ap.parse_args(argv)
    url = repository_url()
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    problems, wrote = [], []
    for path in notebooks:
        before = path.read_text()
        nb = json.loads(before)
        changes = fix_notebook(nb, url)
        for target in broken_links(nb, path.parent):
            problems.append(f"{path.name}: links to {target}, which is not in notebooks/")
        after = _dumps(nb)
        if after != before:
            if args.check:
                problems.append(f"{path.name}: out of date ({', '.join(changes) or 'formatting'})")
            else:
                path.write_text(after)
                wrote.append(path.name)
    readme = README.read_text()
    new_readme = fix_readme(readme, readme_links(url, notebooks, documentation_url()))
    if new_readme != readme:
        if args.check:
            problems.append("README.md: the launch-link table is out of date")
        else:
            README.write_text(new_readme)
            wrote.append("README.md")
    twins_found = sorted((NOTEBOOKS / "zh-CN").glob("*.ipynb"))
    if README_ZH.is_file():
        readme_zh = README_ZH.read_text()
        new_zh = fix_readme(readme_zh, readme_links_zh(url, twins_found, documentation_url()), README_ZH.name)
        if new_zh != readme_zh:
            if args.check:
                problems.append(f"{README_ZH.name}: the launch-link table is out of date")
            else:
                README_ZH.write_text(new_zh)
                wrote.append(README_ZH.name)
    elif twins_found:
        problems.append(f"{README_ZH.name} is missing: the Chinese notebooks need their README")
    # the Chinese twins (notebooks/zh-CN/): their code cells and metadata follow the English ones
    import twins
    problems += twins.sync_all(check=args.check)
    for line in problems:
        print(line, file=sys.stderr)
    if problems and args.check:
        print("run: python tools/notebook_meta.py", file=sys.stderr)
    if wrote:
        print("updated: " + ", ".join(wrote))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
