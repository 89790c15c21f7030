"""The book's two editions, English and Chinese, and the language switch on every page.

``make docs`` builds the book twice with the same ``conf.py``: the English edition
(``COLLNB_BOOK_EDITION`` unset or ``en``: README.md, ``notebooks/*.ipynb``, the API reference) into
``docs/_build/html``, and the Chinese edition (``COLLNB_BOOK_EDITION=zh``: ``docs/zh-CN/index.md``,
which includes README.zh-CN.md, the twins ``notebooks/zh-CN/*.ipynb`` and the glossary, with
Sphinx's ``language = "zh_CN"`` so the theme's own words are Chinese) into ``docs/_build/html/zh-CN``.
Both keep the repository's paths as page names (``notebooks/zh-CN/01_broadcast``), so a Chinese page's
Binder, Colab and JupyterHub buttons open the Chinese notebook.

Every page of each edition starts with a switch, "中文 | English", whose other half links to the
same page of the other edition (:func:`counterpart`; a page the other edition lacks links to that
edition's landing page). ``COLLNB_BOOK_NOTEBOOKS=00_launching_ranks,01_broadcast`` builds only those
notebooks (for development: a whole edition takes minutes of both cores).
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

__all__ = ["EDITIONS", "SUBDIR", "edition", "selected_notebooks", "counterpart", "switch_href", "switch_html",
           "readme_for_the_book", "setup"]

#: The editions: code -> (landing page, notebooks' page prefix).
EDITIONS = {"en": ("docs/index", "notebooks/"), "zh": ("docs/zh-CN/index", "notebooks/zh-CN/")}
#: Where the Chinese edition lies under the English one's output folder.
SUBDIR = "zh-CN"
#: Pages that are the same source in both editions.
SHARED = ("docs/glossary.zh-CN",)
ROOT = Path(__file__).resolve().parents[1]


def edition() -> str:
    """The edition this build makes, from ``COLLNB_BOOK_EDITION`` (``en``, the default, or ``zh``).

    Raises:
        ValueError: any other value (the message names the two).
    """
    value = os.environ.get("COLLNB_BOOK_EDITION", "en").strip().lower() or "en"
    if value not in EDITIONS:
        raise ValueError(f"COLLNB_BOOK_EDITION={value!r}: the book has the editions 'en' and 'zh'")
    return value


def selected_notebooks() -> list[str] | None:
    """The notebook stems ``COLLNB_BOOK_NOTEBOOKS`` names (comma-separated), or None for all.

    Raises:
        ValueError: a name that is no notebook of notebooks/ (the message lists the unknown ones).
    """
    value = os.environ.get("COLLNB_BOOK_NOTEBOOKS", "").strip()
    if not value:
        return None
    stems = [s.strip().removesuffix(".ipynb") for s in value.split(",") if s.strip()]
    unknown = [s for s in stems if not (ROOT / "notebooks" / f"{s}.ipynb").is_file()]
    if unknown:
        raise ValueError(f"COLLNB_BOOK_NOTEBOOKS names no notebook of notebooks/: {', '.join(unknown)}")
    return stems


def counterpart(pagename: str, this: str, root: Path = ROOT) -> str:
    """The page of the other edition that is ``pagename`` of edition ``this`` (``en`` or ``zh``).

    ``notebooks/x`` <-> ``notebooks/zh-CN/x`` (when that notebook exists in the other edition),
    the landing pages with each other, the glossary with itself; any other page (the API
    reference, the index, search) maps to the other edition's landing page.
    """
    other = "zh" if this == "en" else "en"
    landing, prefix = EDITIONS[this]
    other_landing, other_prefix = EDITIONS[other]
    if pagename == landing:
        return other_landing
    if pagename in SHARED:
        return pagename
    if pagename.startswith(prefix) and "/" not in pagename[len(prefix):]:
        page = other_prefix + pagename[len(prefix):]
        if (root / f"{page}.ipynb").is_file():
            return page
    return other_landing


def switch_href(pagename: str, this: str, root: Path = ROOT) -> str:
    """The relative URL, from ``pagename``'s HTML file, of its counterpart in the other edition."""
    up = "../" * pagename.count("/")
    target = counterpart(pagename, this, root) + ".html"
    return up + (f"{SUBDIR}/" if this == "en" else "../") + target


def switch_html(pagename: str, this: str, root: Path = ROOT) -> str:
    """The switch shown at the top of a page: "中文 | English", the current edition in bold."""
    href = html.escape(switch_href(pagename, this, root), quote=True)
    zh = "<strong>中文</strong>" if this == "zh" else f'<a href="{href}" hreflang="zh-CN" lang="zh-CN">中文</a>'
    en = "<strong>English</strong>" if this == "en" else f'<a href="{href}" hreflang="en" lang="en">English</a>'
    return f'<p class="collnb-language-switch">{zh} | {en}</p>\n'


README_LINK = re.compile(r"\]\((README(?:\.zh-CN)?\.md)\)")
DOCS_MD_LINK = re.compile(r"\]\(docs/([^)\s]+\.md)\)")


def readme_for_the_book(text: str, base_url: str) -> str:
    """A README's Markdown as a book's landing page includes it: its links to the two READMEs
    (right on GitHub) become links to the two landing pages on the published book (``base_url``,
    ``[project.urls] Documentation``), and its links to ``docs/*.md`` are made absolute in the
    source tree (``/docs/x.md``), as MyST resolves them from ``docs/zh-CN/index.md`` too."""
    base = base_url.rstrip("/")
    pages = {"README.md": f"{base}/{EDITIONS['en'][0]}.html",
             "README.zh-CN.md": f"{base}/{SUBDIR}/{EDITIONS['zh'][0]}.html"}
    text = README_LINK.sub(lambda m: f"]({pages[m.group(1)]})", text)
    return DOCS_MD_LINK.sub(lambda m: f"](/docs/{m.group(1)})", text)


def _include_read(app, relative_path, parent_docname, content) -> None:
    if Path(relative_path).name in ("README.md", "README.zh-CN.md"):
        content[0] = readme_for_the_book(content[0], app.config.collnb_book_url)


def _add_switch(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = switch_html(pagename, app.config.collnb_edition) + context["body"]


def setup(app) -> dict:
    """Sphinx extension: the language switch at the top of every page's body, and the READMEs'
    links as the landing pages need them (:func:`readme_for_the_book`)."""
    app.add_config_value("collnb_edition", "en", "html")
    app.add_config_value("collnb_book_url", "", "env")
    app.connect("html-page-context", _add_switch)
    app.connect("include-read", _include_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
