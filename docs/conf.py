"""Sphinx configuration of collnb's book (``make docs``): MyST-NB + sphinx-book-theme.

Sphinx runs on the repository root (``sphinx-build -c docs . docs/_build/html``) so that the pages
are named after the files (``notebooks/01_broadcast`` -> ``notebooks/01_broadcast.html``) and links
between notebooks resolve as they do in JupyterLab; only ``docs/*.md`` and ``notebooks/*.ipynb`` are
read. The notebooks are executed at build time with a cache (``docs/_build/.jupyter_cache``) that the
notebook tests read instead of executing them again (tools/notebook_run.py); the
landing page is README.md; the API reference is generated from the docstrings. Launch buttons
(Binder, Colab, JupyterHub) on every notebook page are made from the one repository URL in
pyproject.toml's ``[project.urls]``.

The same configuration builds the Chinese edition (``COLLNB_BOOK_EDITION=zh``, ``make docs`` runs both;
``docs/editions.py``): its landing page ``docs/zh-CN/index.md`` (README.zh-CN.md), the twins
``notebooks/zh-CN/*.ipynb`` and the glossary, with ``language = "zh_CN"``; every page of either
edition has a "中文 | English" switch to the same page of the other. ``COLLNB_BOOK_NOTEBOOKS=a,b``
builds only those notebooks (development).
"""
import os
import sys
import tomllib
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(DOCS))
import editions  # noqa: E402
import exec_report  # noqa: E402
import notebook_run  # noqa: E402
from notebook_meta import BRANCH, documentation_url, repository_url  # noqa: E402

_project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
project = "collnb"
author = "collnb contributors"
release = _project["version"]
copyright = "collnb contributors"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
collnb_edition = editions.edition()
_only = editions.selected_notebooks()
if collnb_edition == "zh":
    language = "zh_CN"
    root_doc = "docs/zh-CN/index"
    _notebooks = "notebooks/zh-CN/"
    include_patterns = ["docs/zh-CN/*.md", "docs/glossary.zh-CN.md"]
    html_extra_path = ["root-zh"]  # zh-CN/index.html: a redirect to the Chinese landing page
else:
    root_doc = "docs/index"
    _notebooks = "notebooks/"
    include_patterns = ["docs/*.md"]
    html_extra_path = ["root"]  # index.html at the top of the site: a redirect to docs/index.html
include_patterns += [f"{_notebooks}*.ipynb"] if _only is None else [f"{_notebooks}{s}.ipynb" for s in _only]
exclude_patterns = [".venv", ".git", "docs/_build", "build", "artifacts", "classroom", "**/.ipynb_checkpoints",
                    "notebooks/*_output", "notebooks/zh-CN/*_output", "jupyter_execute", "work"]

# ---- notebooks: executed at build time, cached. A cell error fails the build at its end, with the
# notebook, the cell and the error named in plain words (docs/exec_report.py): every notebook still
# runs, so one failure does not hide another.
nb_execution_mode = os.environ.get("COLLNB_DOCS_EXECUTE", "cache")
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
# Executed as tests/test_notebooks.py executes (tools/notebook_run.py): output that arrives for another cell
# than the running one is kept in the cached notebook's metadata, so the tests take the book's execution
# instead of running every notebook a second time, and check it as their own.
notebook_run.record_in_the_book()
nb_execution_timeout = 600
nb_execution_raise_on_error = False
nb_execution_show_tb = False
nb_kernel_rgx_aliases = {".*": "python3"}
# A saved widget's static picture wins over its live view, whose JavaScript would need a CDN (the
# book must work offline and the widgets need a kernel anyway); its text/html (MyST-NB's default
# order: html before png) carries the line worded for the book (collnb.views.static.BOOK_LINE), and
# the live panel's own text/html is empty, so a page shows the picture and nothing of a dead panel.
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
]
nb_ipywidgets_js = {}
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type"]

# ---- API reference
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_use_ivar = True  # "Attributes:" as fields, not a second description of each attribute

# ---- theme and launch buttons
html_theme = "sphinx_book_theme"
html_title = "collnb" if collnb_edition == "en" else "collnb 中文版"
repository = repository_url()
collnb_book_url = documentation_url()  # the English edition's root; the Chinese one lies in zh-CN/ under it
html_baseurl = collnb_book_url + ("/" if collnb_edition == "en" else f"/{editions.SUBDIR}/")
html_theme_options = {
    "repository_url": repository,
    "repository_branch": BRANCH,
    # pages are named after their path in the repository (notebooks/x), so launch links point at
    # notebooks/x.ipynb there, not at the docs/notebooks link
    "path_to_docs": "",
    "use_repository_button": True,
    "use_download_button": True,
    "launch_buttons": {
        "binderhub_url": "https://mybinder.org",
        "colab_url": "https://colab.research.google.com",
        # a teacher's own hub: COLLNB_JUPYTERHUB_URL=https://hub.example.edu make docs
        # (the default is a placeholder: a school sets its own hub when it builds the book)
        "jupyterhub_url": os.environ.get("COLLNB_JUPYTERHUB_URL", "https://jupyterhub.example.org"),
        "notebook_interface": "jupyterlab",
    },
    "home_page_in_toc": True,
}
html_static_path = []


def setup(app):
    """The execution report (docs/exec_report.py) and the language switch (docs/editions.py)."""
    exec_report.setup(app)
    editions.setup(app)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
