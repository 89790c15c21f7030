"""Publishing: notebook metadata (Colab cell, slides, hidden solutions), the one public URL and every
link made from it, the torch range and its pin, the Binder (repo2docker) configuration, and the
built book opened in headless Chromium.

The book test needs ``make docs`` to have built ``docs/_build/html`` (``.ci/run`` does that before
``make test``); without a built book it builds one itself, saying so (tests/conftest.py's ``book``:
``make docs``, every notebook of both editions executed once, about 14 min on 2 idle cores; the notebook
tests then reuse those executions).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BOOK = ROOT / "docs" / "_build" / "html"
sys.path.insert(0, str(ROOT / "tools"))
import notebook_meta  # noqa: E402

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REPO_URL = PYPROJECT["project"]["urls"]["Repository"]
OWNER_REPO = REPO_URL.removeprefix("https://github.com/")


def _nb(path):
    return json.loads(path.read_text())


def _src(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _tagged(nb, tag):
    return [c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


# ------------------------------------------------------------------------------------------------
# Notebook metadata


def test_notebook_metadata_is_up_to_date():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "notebook_meta.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"notebook metadata out of date; run tools/notebook_meta.py\n{proc.stderr}"


def test_metadata_tool_is_idempotent(tmp_path):
    nb = _nb(NOTEBOOKS[1])
    once = json.loads(json.dumps(nb))
    notebook_meta.fix_notebook(once, REPO_URL)
    twice = json.loads(json.dumps(once))
    assert notebook_meta.fix_notebook(twice, REPO_URL) == []
    assert twice == once


def test_metadata_tool_fixes_a_bare_notebook():
    """A notebook with none of the metadata gets all of it, and a teacher's own slide type stays."""
    nb = {"cells": [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# Title\n\ntext"},
        {"cell_type": "markdown", "id": "b", "metadata": {"slideshow": {"slide_type": "fragment"}},
         "source": "## kept as the teacher set it"},
        {"cell_type": "markdown", "id": "c", "metadata": {}, "source": "### Exercise"},
        {"cell_type": "code", "id": "d", "metadata": {"tags": ["exercise"]}, "source": "x = None",
         "outputs": [], "execution_count": None},
        {"cell_type": "code", "id": "e", "metadata": {"tags": ["solution"]}, "source": "solution = 3",
         "outputs": [], "execution_count": None}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    notebook_meta.fix_notebook(nb, REPO_URL)
    cells = {c["id"]: c for c in nb["cells"]}
    assert nb["cells"][0]["id"] == notebook_meta.COLAB_CELL_ID
    assert [cells[i]["metadata"]["slideshow"]["slide_type"] for i in "abcde"] == \
        ["slide", "fragment", "subslide", "-", "skip"]
    sol = cells["e"]
    assert _src(sol).splitlines() == [notebook_meta.SOLUTION_TITLE, "solution = 3"]
    assert sol["metadata"]["cellView"] == "form" and sol["metadata"]["jupyter"]["source_hidden"] is True
    assert "hide-input" in sol["metadata"]["tags"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_has_colab_cell_slides_and_hidden_solutions(path):
    nb = _nb(path)
    first = nb["cells"][0]
    assert first["id"] == "colab-setup" and first["cell_type"] == "code", \
        f"{path.name}: the first cell is not the Colab set-up cell; run tools/notebook_meta.py"
    assert {"remove-cell", "colab-setup"} <= set(first["metadata"]["tags"])
    no_slide = [i for i, c in enumerate(nb["cells"]) if "slide_type" not in c["metadata"].get("slideshow", {})]
    assert not no_slide, f"{path.name}: cells {no_slide} have no slide metadata; run tools/notebook_meta.py"
    assert nb["cells"][1]["metadata"]["slideshow"]["slide_type"] == "slide"  # the title opens the deck
    assert sum(c["metadata"]["slideshow"]["slide_type"] == "slide" for c in nb["cells"]) >= 2
    for cell in _tagged(nb, "solution"):
        meta = cell["metadata"]
        assert meta["jupyter"]["source_hidden"] is True, f"{path.name}: solution visible in JupyterLab"
        assert meta["cellView"] == "form" and re.match(r"# @title ", _src(cell)), \
            f"{path.name}: solution visible on Colab (needs a # @title form)"
        assert "hide-input" in meta["tags"] and meta["slideshow"]["slide_type"] == "skip"


def _run_colab_cell(in_colab: bool):
    source = _src(_nb(NOTEBOOKS[0])["cells"][0])
    calls = []
    shell = types.SimpleNamespace(run_line_magic=lambda *a: calls.append(("magic", *a)))
    saved = {k: sys.modules.get(k) for k in ("google", "google.colab")}
    if in_colab:
        google = types.ModuleType("google")
        colab = types.ModuleType("google.colab")
        colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append(("widgets",)))
        google.colab = colab
        sys.modules.update({"google": google, "google.colab": colab})
    else:
        sys.modules.pop("google.colab", None)
    try:
        exec(compile(source, "colab-setup", "exec"), {"get_ipython": lambda: shell})
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return calls


def test_colab_cell_does_nothing_outside_colab():
    assert _run_colab_cell(in_colab=False) == []


def test_colab_cell_installs_collnb_from_the_repository_and_enables_widgets():
    calls = _run_colab_cell(in_colab=True)
    assert calls == [("magic", "pip", f"install -q 'collnb @ git+{REPO_URL}@main'"), ("widgets",)]


def test_colab_cell_is_the_same_in_every_notebook():
    first = {_src(_nb(p)["cells"][0]) for p in NOTEBOOKS}
    assert len(first) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_links_between_notebooks_work_on_colab(path):
    """Colab opens notebooks at .../github/OWNER/REPO/blob/BRANCH/notebooks/x.ipynb; a relative
    link there must resolve to the Colab URL of a notebook that exists (so do JupyterLab's and
    Binder's, which resolve against notebooks/ as well)."""
    nb = _nb(path)
    markdown = "\n".join(_src(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    here = notebook_meta.colab_url(REPO_URL, f"notebooks/{path.name}")
    for target, _anchor in notebook_meta.LINK_RE.findall(markdown):
        resolved = urljoin(here, target)
        prefix = f"https://colab.research.google.com/github/{OWNER_REPO}/blob/main/notebooks/"
        assert resolved.startswith(prefix), f"{path.name}: {target} resolves to {resolved} on Colab"
        assert (ROOT / "notebooks" / resolved.removeprefix(prefix)).is_file(), resolved


# ------------------------------------------------------------------------------------------------
# One public URL


def test_public_url_is_written_once_and_every_link_agrees():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL)
    readme = (ROOT / "README.md").read_text()
    docs = PYPROJECT["project"]["urls"]["Documentation"].rstrip("/")
    binder = re.findall(r"https://mybinder\.org/v2/gh/([^)\s?]+)", readme)
    colab = re.findall(r"https://colab\.research\.google\.com/github/([^)\s]+)", readme)
    github = re.findall(r"https://github\.com/([\w.-]+/[\w.-]+)", readme)
    assert binder and colab, "README has no Binder badge / Colab links"
    assert all(b == f"{OWNER_REPO}/main" for b in binder), binder
    assert all(c.startswith(f"{OWNER_REPO}/blob/main/notebooks/") for c in colab), colab
    assert all(g == OWNER_REPO for g in github), github
    assert "mybinder.org/badge_logo.svg" in readme
    # every notebook has its own row of links
    for path in NOTEBOOKS:
        rel = f"notebooks/{path.name}"
        assert notebook_meta.binder_url(REPO_URL, rel) in readme, f"no Binder link for {rel}"
        assert notebook_meta.colab_url(REPO_URL, rel) in readme, f"no Colab link for {rel}"
        assert f"{docs}/notebooks/{path.stem}.html" in readme, f"no book link for {rel}"
    # the book's launch buttons and the Colab cell use the same URL
    conf = {}
    exec(compile((ROOT / "docs" / "conf.py").read_text(), "conf.py", "exec"),
         {"__file__": str(ROOT / "docs" / "conf.py")} | conf)
    for path in NOTEBOOKS:
        assert f"git+{REPO_URL}@main" in _src(_nb(path)["cells"][0])
    # no other copy of a repository URL anywhere in what we publish
    twins = sorted((ROOT / "notebooks" / "zh-CN").glob("*.ipynb"))
    for f in [ROOT / "docs" / "conf.py", ROOT / "docs" / "index.md", *NOTEBOOKS,
              ROOT / "README.zh-CN.md", ROOT / "docs" / "zh-CN" / "index.md", ROOT / "docs" / "editions.py", *twins]:
        for other in re.findall(r"github\.com/([\w.-]+/[\w.-]+)", f.read_text()):
            assert other.removesuffix(".git") == OWNER_REPO, f"{f.name} names another repository: {other}"


def test_book_launch_buttons_come_from_pyproject():
    ns = {"__file__": str(ROOT / "docs" / "conf.py")}
    exec(compile((ROOT / "docs" / "conf.py").read_text(), "conf.py", "exec"), ns)
    opts = ns["html_theme_options"]
    assert opts["repository_url"] == REPO_URL and opts["repository_branch"] == "main"
    assert opts["path_to_docs"] == ""  # pages are notebooks/x -> notebooks/x.ipynb in the repo
    assert set(opts["launch_buttons"]) >= {"binderhub_url", "colab_url", "jupyterhub_url"}


def _conf(monkeypatch, edition):
    monkeypatch.setenv("COLLNB_BOOK_EDITION", edition)
    monkeypatch.delenv("COLLNB_BOOK_NOTEBOOKS", raising=False)
    ns = {"__file__": str(ROOT / "docs" / "conf.py")}
    exec(compile((ROOT / "docs" / "conf.py").read_text(), "conf.py", "exec"), ns)
    return ns


def test_the_chinese_book_is_the_same_conf_on_the_twins_in_chinese(monkeypatch):
    """COLLNB_BOOK_EDITION=zh: the same launch buttons (pages keep their repository paths, so a
    Chinese page's buttons open notebooks/zh-CN/x.ipynb), the twins and the Chinese landing page,
    the theme in Chinese, published under zh-CN/ of the English book."""
    en, zh = _conf(monkeypatch, "en"), _conf(monkeypatch, "zh")
    assert zh["html_theme_options"] == en["html_theme_options"]
    assert zh["language"] == "zh_CN" and zh["root_doc"] == "docs/zh-CN/index"
    assert "notebooks/zh-CN/*.ipynb" in zh["include_patterns"] and "docs/glossary.zh-CN.md" in zh["include_patterns"]
    assert not any("zh-CN" in p for p in en["include_patterns"])
    docs = PYPROJECT["project"]["urls"]["Documentation"].rstrip("/")
    assert en["html_baseurl"] == docs + "/" and zh["html_baseurl"] == docs + "/zh-CN/"
    assert zh["nb_execution_cache_path"] == en["nb_execution_cache_path"]
    makefile = (ROOT / "Makefile").read_text()
    docs_recipe = makefile.split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    assert "$(SPHINX_ZH)" in docs_recipe and "docs/_build/html/zh-CN" in docs_recipe


def test_link_table_disagreeing_with_pyproject_is_detected(tmp_path):
    """The check really compares: a README written for another repository fails it."""
    readme = (ROOT / "README.md").read_text()
    other = notebook_meta.fix_readme(readme, notebook_meta.readme_links(
        "https://github.com/someone/else", NOTEBOOKS, "https://someone.github.io/else"))
    assert other != readme
    assert notebook_meta.fix_readme(other, notebook_meta.readme_links(
        REPO_URL, NOTEBOOKS, PYPROJECT["project"]["urls"]["Documentation"].rstrip("/"))) == readme


# ------------------------------------------------------------------------------------------------
# Torch: a range for users, one tested release for make and CI


def _torch_req(reqs):
    return next(r for r in reqs if re.match(r"torch\b", r))


def test_torch_is_a_range_and_the_pin_lives_in_constraints():
    req = _torch_req(PYPROJECT["project"]["dependencies"]).replace(" ", "")
    assert "==" not in req and ">=" in req and "<" in req, req
    pins = [ln.strip() for ln in (ROOT / "constraints.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    assert "torch==2.13.0" in pins
    makefile = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt" in makefile
    installs = [ln for ln in makefile.splitlines() if "pip install" in ln and "-e" in ln]
    assert all("$(PIP_INSTALL)" in ln or "-c constraints.txt" in ln for ln in installs), installs


def test_slides_extension_comes_with_the_lab_extra():
    from importlib.metadata import version
    lab = PYPROJECT["project"]["optional-dependencies"]["lab"]
    assert any(r.startswith("jupyterlab-rise") for r in lab)
    assert version("jupyterlab_rise")  # installed by make lab / make test
    ext = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "jupyterlab-rise" / "package.json"
    assert json.loads(ext.read_text())["name"] == "jupyterlab-rise", "RISE is not a JupyterLab extension here"


def test_installed_torch_is_the_pinned_cpu_build():
    """`make test` runs on the release constraints.txt pins, its CPU build; a compatibility run
    (tools/compat.sh VERSION sets COLLNB_TORCH_COMPAT) on exactly the release it asked for."""
    import os

    import torch

    from collnb.torch_versions import TESTED, installed

    compat = os.environ.get("COLLNB_TORCH_COMPAT")
    if compat:
        assert installed() == compat, f"the compatibility run asked for torch {compat}, got {torch.__version__}"
        return
    assert installed() == TESTED.pinned, torch.__version__
    assert torch.version.cuda is None, f"a CUDA build of torch is installed ({torch.version.cuda})"


# ------------------------------------------------------------------------------------------------
# Binder: repo2docker's rules


def _is_local_pip_requirement(line: str) -> bool:
    """repo2docker's own rule (repo2docker.utils.is_local_pip_requirement, 2026.4): ``-r``/``-c``
    or a path (``.``, ``./x``) is local; then the repository is copied in before the environment
    is installed."""
    line = line.split("#", 1)[0].strip()
    if line.startswith(("-r", "-c", "--requirement", "--constraint")):
        return True
    if line.startswith("--") and "=" in line:
        line = line.split("=", 1)[1]
    if line.startswith("-e "):
        line = line[3:].strip()
    return line.startswith((".", "/", "file:"))


def test_binder_configuration_follows_repo2docker_rules():
    # repo2docker reads binder/ or .binder/ instead of the root when one exists
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists()
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert any(str(d).startswith("python=3.11") for d in env["dependencies"])
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    local = [ln for ln in pip if _is_local_pip_requirement(ln)]
    # `-e .` (and the constraints file) are local references: repo2docker then installs the
    # environment after the repository's files are in the image, so they resolve
    assert any(ln.replace(" ", "").startswith("-e.") for ln in local), pip
    assert "-c constraints.txt" in pip
    torch = _torch_req([p for p in pip if not p.startswith("-")]).replace(" ", "")
    assert torch == "torch==2.13.0"
    assert any("whl/cpu" in p for p in pip if p.startswith("--extra-index-url")), "Binder must get CPU torch"
    # what the notebooks and the projector view need on Binder
    extras = next(p for p in pip if p.replace(" ", "").startswith("-e."))
    assert "lab" in extras and "present" in extras


# ------------------------------------------------------------------------------------------------
# The built book, in headless Chromium


def executed_notebook(path: Path) -> dict:
    """The notebook as the book executed it (MyST-NB's jupyter-cache in docs/_build/.jupyter_cache).

    Raises:
        KeyError: the cache holds no execution of the notebook's current code.
    """
    import nbformat
    from jupyter_cache import get_cache

    nb = nbformat.read(path, as_version=4)
    try:
        _, merged = get_cache(str(BOOK.parent / ".jupyter_cache")).merge_match_into_notebook(nb)
    except KeyError:
        raise KeyError(f"the book's cache has no execution of the current {path.name}; run make docs") from None
    return merged


def _open_article(page, html: Path) -> bool:
    """Load ``html`` and wait for its ``<article>`` (the page's content); once more if it did not come.
    A loaded CI run once found no article 30 s after the load event (the static page cannot lack one;
    the tab was somewhere else), so the page is loaded again before it counts as a problem."""
    for _attempt in range(2):
        page.goto(html.as_uri(), wait_until="load")
        try:
            page.wait_for_selector("article", state="attached", timeout=60_000)
            return True
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: try the load once more
            continue
    return False


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(1800)
def test_book_pages_render_figures_and_links(book, tmp_path):
    import os
    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip(f"{chromium} is missing; install Debian's chromium package")
    from playwright.sync_api import sync_playwright
    from collnb.views.static import BOOK_LINE

    shots = Path(os.environ.get("COLLNB_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        # the book must work offline: refuse every request that leaves the file system
        page.route(re.compile(r"^https?://"), lambda route: route.abort())
        ids_cache: dict[Path, set] = {}

        def ids_of(f: Path):
            if f not in ids_cache:
                ids_cache[f] = set(re.findall(r'id="([^"]+)"', f.read_text(errors="replace")))
            return ids_cache[f]

        for nb_path in NOTEBOOKS:
            html = book / "notebooks" / f"{nb_path.stem}.html"
            if not html.is_file():
                problems.append(f"{nb_path.stem}: no page {html}")
                continue
            if not _open_article(page, html):
                problems.append(f"{nb_path.stem}: no <article> on {html.name} after two loads; the tab showed "
                                f"{page.url!r} titled {page.title()!r}")
                page.screenshot(path=str(shots / f"book-{nb_path.stem}-no-article.png"))
                continue
            imgs = page.eval_on_selector_all(
                "article img", "els => els.map(e => [e.getAttribute('src'), e.complete && e.naturalWidth, "
                               "e.naturalHeight])")
            # the figures the executed notebook holds (from the book's own execution cache)
            try:
                ex = executed_notebook(nb_path)
            except KeyError as exc:
                problems.append(f"{nb_path.stem}: {exc}")
                continue
            pngs = sum("image/png" in o.get("data", {}) for c in ex["cells"] if c["cell_type"] == "code"
                       for o in c.get("outputs", []) if "remove-cell" not in c["metadata"].get("tags", []))
            heatmaps = len(_tagged(ex, "heatmap"))
            if pngs < heatmaps:
                problems.append(f"{nb_path.stem}: {heatmaps} heatmap cells but {pngs} PNG outputs when executed")
            figures = [i for i in imgs if i[1] and i[1] >= 100 and i[2] >= 80]
            broken = [i[0] for i in imgs if not i[1]]
            if broken:
                problems.append(f"{nb_path.stem}: images that did not load: {broken}")
            if len(figures) < pngs:
                problems.append(f"{nb_path.stem}: {len(figures)} figures rendered, the executed notebook "
                                f"has {pngs} (heatmap cells: {heatmaps})")
            errors = page.eval_on_selector_all(".output.traceback, .output.stderr pre",
                                               "els => els.map(e => e.textContent.slice(0, 200))")
            if any("Traceback" in e for e in errors):
                problems.append(f"{nb_path.stem}: a traceback on the page: {errors[:1]}")
            links = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            for href in links:
                if re.match(r"^[a-z]+:", href) or href.startswith("//"):
                    continue
                parsed = urlparse(urljoin(html.as_uri(), href))
                target = Path(unquote(parsed.path))
                if not target.exists():
                    problems.append(f"{nb_path.stem}: broken link {href}")
                elif parsed.fragment and target.suffix == ".html" and parsed.fragment not in ids_of(target):
                    problems.append(f"{nb_path.stem}: link {href}: no #{parsed.fragment} in {target.name}")
            # explorers' and replays' pictures say what to do in the book's words, never "run this
            # cell" (a static page has no cell to run), and no dead panel's repr shows (issue 19 item 5)
            visible = page.inner_text("article")
            static_text = " ".join(page.locator(".collnb-static").all_inner_texts())  # what shows of them
            if "run this cell" in static_text.lower():
                problems.append(f"{nb_path.stem}: a static picture in the book says to run a cell")
            statics = page.locator(".collnb-static").count()
            head, tail = (re.escape(part) for part in BOOK_LINE.split("{what}"))
            worded = len(re.findall(head + r"[\w -]+?" + tail, static_text))  # whatever the widget is called
            if statics and worded < statics:
                problems.append(f"{nb_path.stem}: {statics} static pictures, {worded} worded for the book")
            if re.search(r"\b(Explorer|VBox|RoundsExplorer)\(", visible):
                problems.append(f"{nb_path.stem}: a widget's repr is on the page")
            # the Colab set-up cell is not in the book; solutions are collapsed behind a toggle
            if "google.colab" in page.inner_text("article"):
                problems.append(f"{nb_path.stem}: the Colab set-up cell is shown in the book")
            n_solutions = len(_tagged(_nb(nb_path), "solution"))
            collapsed = page.eval_on_selector_all(".tag_solution details:not([open])", "els => els.length")
            if collapsed != n_solutions:
                problems.append(f"{nb_path.stem}: {collapsed} of {n_solutions} solutions collapsed in the book")
            launch = page.eval_on_selector_all(
                "a[href*='mybinder.org'], a[href*='colab.research.google.com'], a[href*='git-pull']",
                "els => els.map(e => e.getAttribute('href'))")
            want_binder = f"mybinder.org/v2/gh/{OWNER_REPO}/main?urlpath=lab/tree/notebooks/{nb_path.name}"
            want_colab = f"colab.research.google.com/github/{OWNER_REPO}/blob/main/notebooks/{nb_path.name}"
            if not any(want_binder in unquote(u) for u in launch):
                problems.append(f"{nb_path.stem}: no Binder button to {want_binder}: {launch}")
            if not any(want_colab in u for u in launch):
                problems.append(f"{nb_path.stem}: no Colab button to {want_colab}")
            if not any("git-pull" in u and f"notebooks/{nb_path.name}" in unquote(u) for u in launch):
                problems.append(f"{nb_path.stem}: no JupyterHub button")
            page.screenshot(path=str(shots / f"book-{nb_path.stem}.png"), full_page=False)
        # the landing page (README) and the API reference
        page.goto((book / "index.html").as_uri())      # the site's top: a redirect to the landing page
        page.wait_for_url(re.compile(r".*/docs/index\.html$"))
        page.wait_for_load_state("load")
        landing = page.eval_on_selector_all("article img", "els => els.map(e => e.naturalWidth)")
        if len([w for w in landing if w and w > 100]) < 2:
            problems.append(f"index: the README figures did not render ({landing})")
        page.goto((book / "docs" / "api.html").as_uri(), wait_until="load")
        api = page.eval_on_selector_all("dl.py.function > dt", "els => els.map(e => e.id)")
        for name in ("collnb.ranks.launcher.launch", "collnb.collectives.primitives.run", "collnb.views.replay.replay"):
            if name not in api:
                problems.append(f"api: no entry for {name} (found {len(api)} functions)")
        browser.close()
    assert not problems, "\n".join(problems)


def _check_readme_figures(folder):
    """The heatmap and the replay GIF in ``folder``: small files, the heatmap a real picture, the
    GIF one frame per ring round + start."""
    from PIL import Image
    import readme_figures

    for name in (readme_figures.HEATMAP, readme_figures.REPLAY):
        size = (folder / name).stat().st_size
        assert 10_000 < size <= readme_figures.MAX_BYTES, (folder / name, size)
    png = Image.open(folder / readme_figures.HEATMAP)
    assert png.size[0] >= 500 and len(png.convert("RGB").getcolors(1 << 16) or []) >= 8
    gif = Image.open(folder / readme_figures.REPLAY)
    # ring all_reduce at world size 4: 3 reduce-scatter + 3 all-gather rounds, plus the start
    assert gif.n_frames == 2 * (4 - 1) + 1


def test_readme_figures_are_small_real_pictures():
    """docs/img: the pictures README.md shows (tools/readme_figures.py, ``make figures``)."""
    import readme_figures

    readme = (ROOT / "README.md").read_text()
    for name in (readme_figures.HEATMAP, readme_figures.REPLAY):
        assert f"(docs/img/{name})" in readme, f"README does not show {name}"
    _check_readme_figures(ROOT / "docs" / "img")


def test_the_book_build_makes_the_readme_figures_again_outside_the_tree(book):
    """``make docs`` makes both pictures again on real ranks into docs/_build/img, not docs/img: the
    replay shows measured times, so rewriting the committed GIF changed every clone's tree."""
    import readme_figures

    built = book.parent / "img"
    assert (built / readme_figures.REPLAY).exists(), \
        f"{built} has no README figures: this book was built before make docs made them there; run make docs"
    _check_readme_figures(built)
    recipe = subprocess.run(["make", "-n", "-o", ".venv/.test-installed", "docs"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    assert "tools/readme_figures.py docs/_build/img" in recipe and "tools/readme_figures.py\n" not in recipe


# ------------------------------------------------------------------------------------------------
# Issue 19 item 2: a notebook that fails during `make docs` is named at the end, with its cell and error

_TRACEBACK = """Traceback (most recent call last):
  File ".../jupyter_cache/executors/utils.py", line 58, in single_nb_execution
nbclient.exceptions.CellExecutionError: An error occurred while executing the following cell:
------------------
# the check
exercises.check_prediction(prediction, solution_prediction)
------------------

\x1b[0;31m---------------------------------------------------------------------------\x1b[0m
\x1b[0;31mCheckFailed\x1b[0m                               Traceback (most recent call last)
Cell \x1b[0;32mIn[12], line 2\x1b[0m
\x1b[0;31mCheckFailed\x1b[0m: ✗ not quite: you predicted 300
  rank 0 | 300 | 6
"""


def test_execution_report_names_the_notebook_the_cell_and_the_error():
    sys.path.insert(0, str(ROOT / "docs"))
    import exec_report
    cells = ["# title", "prediction = 300", "# the check\nexercises.check_prediction(prediction, solution_prediction)"]
    got = exec_report.parse_failure(_TRACEBACK, cells)
    assert got["cell"] == 3 and got["first_line"] == "exercises.check_prediction(prediction, solution_prediction)"
    assert got["error"].splitlines() == ["CheckFailed: ✗ not quite: you predicted 300", "  rank 0 | 300 | 6"]
    short, full = exec_report.report([("notebooks/07_all_reduce", {"traceback": _TRACEBACK, "error": "CellExecutionError"})],
                                     ROOT / "nowhere")
    assert "1 notebook failed to execute" in short
    assert "notebooks/07_all_reduce.ipynb, a cell (exercises.check_prediction(" in short
    assert "CheckFailed: ✗ not quite: you predicted 300" in short and "Traceback" not in short
    assert "\x1b[" not in full and "the whole traceback" in full


def test_the_execution_cache_is_made_before_the_parallel_readers_start(tmp_path):
    """CI, stop 29: with -j 2 two forked readers both found no cache database and both ran
    CREATE TABLE nbcache (sqlite3.OperationalError: table nbcache already exists; a Sphinx parallel
    build error, exit 2). exec_report makes the database at builder-inited, in the one main process;
    an existing cache keeps its records."""
    import sqlite3
    pytest.importorskip("jupyter_cache", reason="the book's execution cache needs the docs extra: pip install -e '.[docs]'")
    sys.path.insert(0, str(ROOT / "docs"))
    import exec_report
    from jupyter_cache.cache.db import DB_NAME

    cache = tmp_path / "build" / ".jupyter_cache"
    app = types.SimpleNamespace(
        config=types.SimpleNamespace(nb_execution_mode="cache", nb_execution_cache_path=""),
        env=types.SimpleNamespace(mystnb_config=types.SimpleNamespace(execution_cache_path=str(cache))),
        outdir=str(tmp_path / "build" / "html"))
    exec_report.make_cache(app)
    tables = {r[0] for r in sqlite3.connect(cache / DB_NAME).execute("select name from sqlite_master where type='table'")}
    assert "nbcache" in tables
    with sqlite3.connect(cache / DB_NAME) as db:
        db.execute("insert into nbcache (hashkey, uri, description, created, accessed) "
                   "values ('k', 'u', '', '2026-01-01', '2026-01-01')")
    exec_report.make_cache(app)
    assert sqlite3.connect(cache / DB_NAME).execute("select hashkey from nbcache").fetchall() == [("k",)]
    other = tmp_path / "off"
    exec_report.make_cache(types.SimpleNamespace(
        config=types.SimpleNamespace(nb_execution_mode="off", nb_execution_cache_path=str(other)),
        env=types.SimpleNamespace(), outdir=str(tmp_path)))
    assert not other.exists()

    registered = []
    exec_report.setup(types.SimpleNamespace(connect=lambda event, fn: registered.append((event, fn))))
    assert ("builder-inited", exec_report.make_cache) in registered


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failing_notebook_fails_the_book_with_its_cause_printed_last(tmp_path):
    """A small book built with docs/conf.py's execution settings and report: one notebook passes,
    one fails its check; the build exits 1 and its last lines name the notebook, the cell and the
    error (not only a temp log), and a second build executes only the failed notebook again."""
    src = tmp_path / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'docs')!r})\n"
        "from exec_report import setup  # noqa: F401\n"
        "extensions = ['myst_nb']\n"
        "nb_execution_mode = 'cache'\n"
        f"nb_execution_cache_path = {str(tmp_path / 'cache')!r}\n"
        "nb_execution_raise_on_error = False\n"
        "nb_execution_show_tb = False\n"
        "root_doc = 'index'\n")
    (src / "index.md").write_text("# book\n\n```{toctree}\n:glob:\nnotebooks/*\n```\n")

    def nb(*cells):
        return json.dumps({"cells": [
            {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": c}
            if not c.startswith("#") else {"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": c}
            for i, c in enumerate(cells)],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5})

    (src / "notebooks" / "good.ipynb").write_text(nb("# good", "print(1 + 1)"))
    (src / "notebooks" / "edited.ipynb").write_text(nb(
        "# edited", "prediction = 300",
        "class CheckFailed(Exception):\n    pass\n\nraise CheckFailed(f'✗ not quite: you predicted {prediction}')"))
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "2", str(src), str(tmp_path / "out" / "html")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    tail = lines[max(i for i, ln in enumerate(lines) if ln.startswith("The book: ")):]
    print("\n".join(tail))
    assert len(tail) == 5, tail  # the summary is the end of the output
    assert tail[0] == "The book: 1 notebook failed to execute, so its page shows no outputs and the build fails:"
    assert tail[1].startswith("  notebooks/edited.ipynb, cell 3 (class CheckFailed(Exception):")
    assert tail[2].strip() == "CheckFailed: ✗ not quite: you predicted 300"
    assert "failed-notebooks.txt" in tail[-1]
    report = (tmp_path / "out" / "failed-notebooks.txt").read_text()
    assert "CheckFailed: ✗ not quite: you predicted 300" in report and "the whole traceback" in report
    # the retry `make docs` does: only the failed notebook is executed again
    again = subprocess.run(cmd[:5] + cmd[6:], capture_output=True, text=True, timeout=500)
    assert again.returncode == 1
    assert "edited.ipynb: Executing notebook" in again.stdout + again.stderr
    assert "good.ipynb: Executing notebook" not in again.stdout + again.stderr
