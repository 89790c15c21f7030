#!/usr/bin/env python3
"""collnb's translation catalogues, with Babel: extract, update, compile, check (``make i18n``).

Every string wrapped in ``_()``, ``N_()``, ``ngettext()`` or ``later()`` in ``collnb/`` is a message. The
messages are kept in one catalogue per **area** of the package (``AREAS``: a few folders or files
each), ``collnb/locale/zh_CN/LC_MESSAGES/collnb-AREA.po``, so that work on two areas never edits
the same file; ``collnb.i18n`` loads every compiled ``collnb-*.mo`` of a language. The English
notebooks' code cells are one more area, ``notebooks``: what a notebook prints for a learner is
written ``print(_("...").format(...))`` (``from collnb.i18n import _``), so its Chinese twin, whose
code is the same (``tools/twins.py``), prints Chinese.

    python tools/catalogues.py           # extract; add new messages to each .po, drop gone ones; compile .mo
    python tools/catalogues.py --check   # change nothing; exit 1 listing what is missing or stale

A message missing its Chinese (empty or fuzzy ``msgstr``), a translation whose ``{placeholders}``
differ from the English, or a ``.mo`` older than its ``.po`` is a problem (``tests/test_i18n.py``
runs ``problems()``). Needs Babel (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import datetime
import io
import re
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_file
from babel.messages.mofile import read_mo, write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "collnb"
LOCALES = {"zh_CN": PACKAGE / "locale" / "zh_CN" / "LC_MESSAGES"}
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2), "later": None}

#: Area -> the paths (relative to collnb/) whose messages its catalogue holds. A file belongs to
#: the first area that names it or a folder above it; "core" takes every file no area names.
AREAS = {
    "explorer": ["views/explorer.py", "views/explorer_text.py", "views/controls.py", "views/binder.py", "views/panel.py",
                 "views/presets.py", "views/redistribute_explorer.py"],
    "views": ["views"],
    "exercises": ["labs/exercises"],
    "cluster": ["labs/cluster", "algorithms/tiers.py", "algorithms/costmodel/tiers.py", "cli/explain.py"],
    "labs": ["labs"],
    "ranks": ["ranks"],
    "cli": ["cli"],
    "core": [""],
}
#: The area of the messages in the English notebooks' code cells (``notebooks/*.ipynb``).
NOTEBOOK_AREA = "notebooks"
NOTEBOOKS = ROOT / "notebooks"
#: Fixed header dates: the catalogues change only when their messages do.
DATE = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
PLACEHOLDER = re.compile(r"\{([^{}:!]*)[^{}]*\}")


def area_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE).as_posix()
    for area, prefixes in AREAS.items():
        for prefix in prefixes:
            if prefix == "" or rel == prefix or rel.startswith(prefix.rstrip("/") + "/"):
                return area
    raise AssertionError(rel)


def extracted() -> dict[str, Catalog]:
    """Area -> a template catalogue of every message its files hold (with where each is)."""
    out = {area: Catalog(project="collnb", domain=f"collnb-{area}", creation_date=DATE, revision_date=DATE,
                          version="0.1.0", msgid_bugs_address="https://github.com/collnb/collnb/issues",
                       copyright_holder="collnb contributors")
           for area in AREAS}
    for path in sorted(PACKAGE.rglob("*.py")):
        area = area_of(path)
        for lineno, message, comments, _context in extract_from_file("python", str(path), keywords=KEYWORDS,
                                                                     comment_tags=("TRANSLATORS:",)):
            out[area].add(message, locations=[(path.relative_to(ROOT).as_posix(), lineno)],
                          auto_comments=comments, flags=("python-brace-format",) if _braces(message) else ())
    out[NOTEBOOK_AREA] = Catalog(project="collnb", domain=f"collnb-{NOTEBOOK_AREA}", creation_date=DATE,
                                 revision_date=DATE, version="0.1.0",
                                 msgid_bugs_address="https://github.com/collnb/collnb/issues",
                                 copyright_holder="collnb contributors")
    for path, cell_id, lineno, message in notebook_messages():
        out[NOTEBOOK_AREA].add(message, locations=[(f"{path.relative_to(ROOT).as_posix()}#{cell_id}", lineno)],
                               flags=("python-brace-format",) if _braces(message) else ())
    return out


def notebook_messages(folder: Path = NOTEBOOKS):
    """``(path, cell id, line, message)`` for every ``_()``/``ngettext()`` message in the code cells of the
    English notebooks of ``folder`` (their Chinese twins hold the same code)."""
    import json
    from babel.messages.extract import extract

    for path in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            code = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for lineno, message, _comments, _context in extract("python", io.BytesIO(code.encode()),
                                                                 keywords=KEYWORDS):
                yield path, cell.get("id", "?"), lineno, message


def _braces(message) -> bool:
    texts = message if isinstance(message, tuple) else (message,)
    return any(PLACEHOLDER.search(t) for t in texts)


def po_path(locale: str, area: str) -> Path:
    return LOCALES[locale] / f"collnb-{area}.po"


def _read(path: Path, locale: str) -> Catalog:
    if not path.is_file():
        return Catalog(locale=locale, project="collnb", domain=path.stem, creation_date=DATE, revision_date=DATE,
                       version="0.1.0", msgid_bugs_address="https://github.com/collnb/collnb/issues",
                       copyright_holder="collnb contributors")
    with open(path, "rb") as f:
        return read_po(f, locale=locale)


def _po_bytes(catalog: Catalog) -> bytes:
    buf = io.BytesIO()
    write_po(buf, catalog, width=100, omit_header=False, sort_output=False, include_previous=False, no_location=True)
    return buf.getvalue()


def _mo_bytes(catalog: Catalog) -> bytes:
    buf = io.BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    return buf.getvalue()


def _names(text: str) -> set[str]:
    return {m.group(1) for m in PLACEHOLDER.finditer(text)}


def problems(write: bool = False) -> list[str]:
    """What keeps the catalogues from being complete and compiled; with ``write``, update them first."""
    out = []
    templates = extracted()
    for locale, folder in LOCALES.items():
        for area, template in templates.items():
            path = po_path(locale, area)
            catalog = _read(path, locale)
            catalog.update(template, no_fuzzy_matching=True)
            catalog.obsolete.clear()
            catalog.fuzzy = False  # the header: its charset must reach the .mo
            catalog.last_translator = "collnb contributors"
            catalog.language_team = "collnb contributors"
            new_po = _po_bytes(catalog)
            old_po = path.read_bytes() if path.is_file() else b""
            if len(template) == 0 and not path.is_file():
                continue
            if new_po != old_po:
                if write:
                    folder.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(new_po)
                else:
                    out.append(f"{path.relative_to(ROOT)}: out of date with the code (run: python tools/catalogues.py)")
            for message in catalog:
                if not message.id:
                    continue
                ids = message.id if isinstance(message.id, tuple) else (message.id,)
                strs = message.string if isinstance(message.string, tuple) else (message.string,)
                where = f"{path.relative_to(ROOT)}: {ids[0]!r}"
                if message.fuzzy or not all(strs):
                    out.append(f"{where} has no {locale} translation")
                    continue
                for s in strs:
                    if _names(s) != _names(ids[0]):
                        out.append(f"{where}: the translation's placeholders {sorted(_names(s))} are not "
                                   f"the English one's {sorted(_names(ids[0]))}")
            mo = path.with_suffix(".mo")
            want = _mo_bytes(catalog)
            if not mo.is_file() or mo.read_bytes() != want:
                if write:
                    mo.write_bytes(want)
                else:
                    out.append(f"{mo.relative_to(ROOT)}: not compiled from its .po (run: python tools/catalogues.py)")
    return out


def compiled_matches(mo: Path) -> bool:
    """Whether ``mo`` holds exactly the messages of the ``.po`` beside it."""
    with open(mo, "rb") as f:
        have = read_mo(f)
    po = _read(mo.with_suffix(".po"), have.locale or "zh_CN")
    def key(x):  # a plural message's id and strings: a list from read_mo, a tuple from read_po
        return tuple(x) if isinstance(x, (list, tuple)) else x

    return ({key(m.id): key(m.string) for m in have if m.id}
            == {key(m.id): key(m.string) for m in po if m.id and not m.fuzzy})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 listing what is missing or stale")
    args = ap.parse_args(argv)
    left = problems(write=not args.check)
    for line in left:
        print(line, file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
