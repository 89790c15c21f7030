#!/usr/bin/env python3
"""Keep every Chinese notebook (``notebooks/zh-CN/``) the twin of its English one.

A twin holds the English notebook's cells in the same order, with the same ids: every **code cell
is copied from the English notebook** (source, tags, slide and hiding metadata), so the two
editions run the same code and the same exercise checks, and only **markdown cells are written in
Chinese**. One cell is the twin's own: ``set-language`` (right after the Colab set-up cell), which
calls ``collnb.set_language("zh")`` so every widget, picture, check and error message of collnb
speaks Chinese. Standard library only; ``tools/notebook_meta.py`` runs ``sync`` after it has fixed
the English notebooks (``make meta``, ``make docs``), and ``--check`` in CI.

    python tools/twins.py                 # sync every twin that exists (never creates one)
    python tools/twins.py --check         # change nothing; exit 1 listing what is out of date
    python tools/twins.py init NAME       # a new twin of notebooks/NAME.ipynb, its markdown to translate
    python tools/twins.py export NAME     # notebooks/zh-CN/NAME.md: every markdown cell, to edit
    python tools/twins.py import NAME     # read that file back into the twin (then delete it)

What a check refuses (``problems``): an English notebook without a twin, a twin without an English
notebook, a cell missing, added or moved, a code cell that differs from the English one, and a
markdown cell still to translate (tagged ``needs-translation``, or with no Chinese character in it
while its English cell has words).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EN = ROOT / "notebooks"
ZH = EN / "zh-CN"
LANGUAGE_CELL_ID = "set-language"
NEEDS = "needs-translation"
CJK = re.compile(r"[\u4e00-\u9fff]")
WORD = re.compile(r"[A-Za-z]{3,}")
LINK = re.compile(r"\]\(([^)#\s]+\.ipynb)(#[^)\s]*)?\)")
SECTION = re.compile(r"^<!-- cell (\S+) -->\n", re.M)


def language_cell() -> dict:
    """The twin's own ``set-language`` cell: on Colab only, a CJK font first (Debian's
    ``fonts-noto-cjk``, so pictures draw Chinese, not boxes); then collnb speaks Chinese. The book
    hides it (tag ``remove-cell``, as the Colab cell), slides skip it."""
    source = ("# Colab 上先装中文字体（图片里的中文才不会变成方框）；在其他地方这一步什么都不做\n"
              "import sys\n"
              "if \"google.colab\" in sys.modules:\n"
              "    get_ipython().system(\"apt-get -qq install -y fonts-noto-cjk > /dev/null\")\n"
              "import collnb\n"
              "collnb.set_language(\"zh\")  # collnb 的控件、图片、练习检查和错误说明都用中文（English: \"en\"）")
    return {"cell_type": "code", "execution_count": None, "id": LANGUAGE_CELL_ID, "outputs": [],
            "metadata": {"tags": [LANGUAGE_CELL_ID, "remove-cell"], "slideshow": {"slide_type": "skip"}},
            "source": source.splitlines(keepends=True)}


from nbjson import dumps as _dumps, source as _source  # noqa: E402  (one way of reading and writing notebooks)


def twin_path(english: Path) -> Path:
    return ZH / english.name


def _clean(cell: dict) -> dict:
    cell = copy.deepcopy(cell)
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    return cell


def synced(en: dict, zh: dict | None) -> dict:
    """The twin of notebook ``en`` (parsed JSON), keeping the translations ``zh`` already holds.

    Code cells and every cell's metadata come from ``en``; a markdown cell keeps ``zh``'s source
    when ``zh`` has a markdown cell of that id, and otherwise gets the English text tagged
    ``needs-translation``. ``zh``'s notebook metadata is kept, with ``collnb.language`` set.
    """
    old = {c.get("id"): c for c in (zh or {}).get("cells", [])}
    cells = []
    for cell in en["cells"]:
        new = _clean(cell)
        if cell["cell_type"] == "markdown":
            mine = old.get(cell.get("id"))
            tags = new.setdefault("metadata", {}).setdefault("tags", [])
            if mine is not None and mine["cell_type"] == "markdown":
                new["source"] = mine["source"]
                if NEEDS in mine.get("metadata", {}).get("tags", []):
                    tags.append(NEEDS)
            else:
                tags.append(NEEDS)
            if not tags:
                del new["metadata"]["tags"]
        cells.append(new)
        if cell.get("id") == "colab-setup":
            cells.append(language_cell())
    if not any(c.get("id") == LANGUAGE_CELL_ID for c in cells):
        cells.insert(0, language_cell())
    out = copy.deepcopy(en)
    out["cells"] = cells
    out["metadata"] = copy.deepcopy(en["metadata"])
    out["metadata"]["collnb"] = {"language": "zh-CN", "english": f"../{Path(en.get('_name', '')).name}"}
    return out


def problems(en: dict, zh: dict, name: str) -> list[str]:
    """What keeps ``zh`` from being ``en``'s twin, one line each (empty when it is one)."""
    out = []
    want = synced(en, zh)
    ids = [c.get("id") for c in zh["cells"]]
    if ids != [c.get("id") for c in want["cells"]]:
        out.append(f"zh-CN/{name}: its cells are not the English notebook's, in order "
                   f"(run tools/twins.py to sync)")
        return out
    for have, cell in zip(zh["cells"], want["cells"]):
        if cell["cell_type"] == "code" and (_source(have) != _source(cell)
                                            or have.get("metadata") != cell.get("metadata")):
            out.append(f"zh-CN/{name}: code cell {cell['id']} differs from the English one "
                       f"(code is never edited in a twin: run tools/twins.py)")
        elif cell["cell_type"] == "markdown":
            english = next(c for c in en["cells"] if c.get("id") == cell["id"])
            if NEEDS in cell.get("metadata", {}).get("tags", []):
                out.append(f"zh-CN/{name}: markdown cell {cell['id']} is still to translate")
            elif WORD.search(_strip_code(_source(english))) and not CJK.search(_source(have)):
                out.append(f"zh-CN/{name}: markdown cell {cell['id']} has no Chinese in it")
    for cell in zh["cells"]:
        if cell["cell_type"] == "markdown":
            for target, _anchor in LINK.findall(_source(cell)):
                if "://" not in target and not (ZH / target).is_file():
                    out.append(f"zh-CN/{name}: cell {cell['id']} links to {target}, which is not in notebooks/zh-CN/")
    if zh.get("metadata") != want["metadata"]:
        out.append(f"zh-CN/{name}: notebook metadata differs from the English one's")
    return out


def _strip_code(markdown: str) -> str:
    """Markdown without code spans, fenced blocks, math, links' targets and HTML tags."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", "", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)|<[^>]+>", "", text)
    return text


def _load(path: Path) -> dict:
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: cannot read it as a notebook ({exc}); restore it with git checkout") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SystemExit(f"{path}: not a notebook (no list of cells); restore it with git checkout")
    nb["_name"] = path.name
    return nb


def _save(path: Path, nb: dict) -> bool:
    nb = {k: v for k, v in nb.items() if k != "_name"}
    text = _dumps(nb)
    if path.is_file() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def sync_all(check: bool = False) -> list[str]:
    """Sync (or, with ``check``, only check) every twin; returns the problems left."""
    out = []
    english = {p.name: p for p in sorted(EN.glob("*.ipynb"))}
    twins = {p.name: p for p in sorted(ZH.glob("*.ipynb"))} if ZH.is_dir() else {}
    for name in sorted(set(twins) - set(english)):
        out.append(f"zh-CN/{name}: no English notebook notebooks/{name}")
    for name, path in english.items():
        if name not in twins:
            out.append(f"zh-CN/{name}: missing (python tools/twins.py init {path.stem})")
            continue
        en, zh = _load(path), _load(twins[name])
        keep = {c.get("id") for c in en["cells"] if c["cell_type"] == "markdown"}
        lost = [c.get("id") for c in zh["cells"] if c["cell_type"] == "markdown" and CJK.search(_source(c))
                and c.get("id") not in keep]
        if lost and not check:
            # a sync would drop these translations (cell ids lost or changed): never throw work away
            out.append(f"zh-CN/{name}: not synced: {len(lost)} translated cell(s) have no cell of the same id in "
                       f"the English notebook ({', '.join(map(str, lost[:3]))}{' ...' if len(lost) > 3 else ''}); "
                       f"restore their ids (git diff, git checkout) or move the text by hand, then sync")
            continue
        if check:
            out += problems(en, zh, name)
        else:
            new = synced(en, zh)
            new["_name"] = name
            if _save(twins[name], new):
                print(f"synced zh-CN/{name}")
            out += problems(en, new, name)
    return out


def export(stem: str) -> Path:
    """Write ``notebooks/zh-CN/STEM.md``: each markdown cell of the twin under ``<!-- cell ID -->``."""
    zh = _load(ZH / f"{stem}.ipynb")
    en = {c.get("id"): c for c in _load(EN / f"{stem}.ipynb")["cells"]}
    parts = []
    for cell in zh["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        parts.append(f"<!-- cell {cell['id']} -->\n")
        parts.append(_source(cell).rstrip("\n") + "\n\n")
        if _source(cell) == _source(en[cell["id"]]):
            pass  # still English: the translator replaces it
    out = ZH / f"{stem}.md"
    out.write_text("".join(parts))
    return out


def import_(stem: str) -> list[str]:
    """Read ``notebooks/zh-CN/STEM.md`` back into the twin; a section replaces its cell's source."""
    path = ZH / f"{stem}.md"
    text = path.read_text()
    pieces = SECTION.split(text)
    sections = {pieces[i]: pieces[i + 1].strip("\n") for i in range(1, len(pieces), 2)}
    zh = _load(ZH / f"{stem}.ipynb")
    unknown = set(sections) - {c.get("id") for c in zh["cells"] if c["cell_type"] == "markdown"}
    if unknown:
        raise SystemExit(f"{path}: no markdown cell with id {sorted(unknown)} in the twin")
    en = {c.get("id"): c for c in _load(EN / f"{stem}.ipynb")["cells"]}
    for cell in zh["cells"]:
        if cell.get("id") in sections:
            cell["source"] = sections[cell["id"]].splitlines(keepends=True)
            tags = cell.get("metadata", {}).get("tags", [])
            if NEEDS in tags and _source(cell) != _source(en[cell["id"]]):
                tags.remove(NEEDS)
                if not tags:
                    del cell["metadata"]["tags"]
    _save(ZH / f"{stem}.ipynb", zh)
    return problems(_load(EN / f"{stem}.ipynb"), _load(ZH / f"{stem}.ipynb"), f"{stem}.ipynb")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", nargs="?", default="sync", choices=["sync", "init", "export", "import"])
    ap.add_argument("name", nargs="?", help="a notebook's stem, e.g. 01_broadcast")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is out of date")
    args = ap.parse_args(argv)
    if args.action != "sync" and not args.name:
        ap.error(f"{args.action} needs a notebook's stem (e.g. 01_broadcast)")
    if args.action == "init":
        ZH.mkdir(exist_ok=True)
        target = ZH / f"{args.name}.ipynb"
        if target.exists():
            raise SystemExit(f"{target} exists already")
        en = _load(EN / f"{args.name}.ipynb")
        nb = synced(en, None)
        _save(target, nb)
        print(f"wrote {target.relative_to(ROOT)}: translate its markdown (tools/twins.py export {args.name})")
        return 0
    if args.action == "export":
        print(export(args.name).relative_to(ROOT))
        return 0
    if args.action == "import":
        left = import_(args.name)
        for line in left:
            print(line, file=sys.stderr)
        return 1 if left else 0
    left = sync_all(check=args.check)
    for line in left:
        print(line, file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
