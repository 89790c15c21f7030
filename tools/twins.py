#!/usr/bin/env python3
"""Keep every Chinese notebook (``notebooks/zh-CN/``) the twin of its English one.

A twin holds the English notebook's cells in the same order, with the same ids. A **code cell is
the English cell with its comments in Chinese**: with its comments removed (Python's
:mod:`tokenize`), its tokens are the English cell's, strings and names included, and its tags and
metadata are the English cell's; so the two editions run the same code and the same exercise
checks. **Markdown cells are written in Chinese.** One cell is the twin's own: ``set-language``
(right after the Colab set-up cell), which calls ``collnb.set_language("zh")`` so every widget,
picture, check and error message of collnb speaks Chinese. Standard library only;
``tools/notebook_meta.py`` runs ``sync`` after it has fixed the English notebooks (``make meta``,
``make docs``), and ``--check`` in CI.

    python tools/twins.py                 # sync every twin that exists (never creates one)
    python tools/twins.py --check         # change nothing; exit 1 listing what is out of date
    python tools/twins.py init NAME       # a new twin of notebooks/NAME.ipynb, its markdown to translate
    python tools/twins.py export NAME     # notebooks/zh-CN/NAME.md: every markdown cell, to edit
    python tools/twins.py import NAME     # read that file back into the twin (then delete it)

What ``sync`` does to a code cell: while the English cell's code (its comments aside) is the
twin's, the twin keeps its own (translated) comments; when the English code changed, or the cell
is new, the twin gets the English cell, its set-up comments (the Colab cell's, a solution's
title and header, "Your turn", the check's import: :data:`BOILERPLATE`) in Chinese, and, if any
English comment is left, the tag ``needs-translation``, so a stale comment is never kept silently.

What a check refuses (``problems``): an English notebook without a twin, a twin without an English
notebook, a cell missing, added or moved, a code cell whose code (comments aside), tags or
metadata differ from the English one's, a code cell tagged ``needs-translation``, and a markdown
cell still to translate (tagged ``needs-translation``, with no Chinese character in it while its
English cell has words, or with a sentence of English prose outside code, quotes and emphasis).
:func:`english_comments` and :func:`english_prose` say which comment or sentence is still English
(``tests/test_zh_edition.py`` runs the first on every twin).
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import json
import keyword
import re
import sys
import tokenize
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
#: The set-up comments tools write into the English notebooks (tools/notebook_meta.py: the Colab cell
#: and a solution's Colab title; the solution header, "Your turn" and the check's import, as every
#: notebook writes them), and their Chinese: ``sync`` puts these in a twin's cell it copies afresh.
BOILERPLATE = [
    ("# Google Colab only: install collnb (Colab keeps its own torch) and turn on Colab's widget support.\n"
     "# Anywhere else (JupyterLab, Binder, a JupyterHub, the book) this cell does nothing.\n",
     "# 只在 Google Colab 上起作用：安装 collnb（沿用 Colab 自带的 torch），并打开 Colab 的控件支持。\n"
     "# 在其他地方（JupyterLab、Binder、JupyterHub、书中）这一格什么都不做。\n"),
    ("# @title Solution (hidden: click “Show code” to see it)\n",
     "# @title 参考答案（已隐藏：点击“显示代码”查看）\n"),
    ("# A solution, written as comments: running this cell defines nothing, so nothing in it can answer\n"
     "# the exercise for you. To try it, copy the lines below into the exercise cell and uncomment them.\n",
     "# 参考答案写成了注释：运行这一格什么也不定义，所以它不会替你完成练习。\n"
     "# 想试一试，就把下面几行复制到练习格里，再去掉行首的注释符号。\n"),
    ("# ✏️ Your turn: replace the `...` with your code.\n", "# ✏️ 轮到你了：把 `...` 换成你的代码。\n"),
    ("# ✏️ Your prediction: one list per rank (rank 0 first).\n",
     "# ✏️ 你的预测：每个 rank 一个列表（从 rank 0 开始）。\n"),
    ("   # the checks: real ranks, random data, every operation each rank issued\n",
     "   # 检查：真实的 rank、随机数据，并核对每个 rank 发出的每个操作\n"),
    ("   # the checks: real ranks, every operation each rank issued\n",
     "   # 检查：真实的 rank，并核对每个 rank 发出的每个操作\n"),
    ("  # the first line and collnb's explanation, without the tracebacks\n",
     "  # 只打印第一行和 collnb 的解释，不打印 traceback\n"),
    ("# ── Explorer ──", "# ── 探索器 ──"),
]
#: Comments for tools, never read as prose: noqa, type: ignore, fmt: off and the like.
PRAGMA = re.compile(r"#\s*(noqa\b|type:|fmt:|pragma\b|pylint:|isort:|ruff:|mypy:|%%)")
_QUOTED = re.compile(r"“.*?”|‘.*?’|\"[^\"]*\"|\*[^*]+\*|《.*?》", re.S)
#: Six or more English words in a row: a sentence (a field term or a name is one or two words).
_ENGLISH_RUN = re.compile(r"[A-Za-z][\w'’-]*(?:[ ,;:]+[A-Za-z][\w'’-]*){5,}")


def language_cell() -> dict:
    """The twin's own ``set-language`` cell: on Colab only, a CJK font first (Debian's
    ``fonts-noto-cjk``, so pictures draw Chinese, not boxes); then collnb speaks Chinese. The book
    hides it (tag ``remove-cell``, as the Colab cell), slides skip it."""
    source = ("# Colab 上先装中文字体（图片里的中文才不会变成方框）；在其他地方这一步什么都不做\n"
              "import sys\n"
              "if \"google.colab\" in sys.modules:\n"
              "    get_ipython().system(\"apt-get -qq install -y fonts-noto-cjk > /dev/null\")\n"
              "import collnb\n"
              "collnb.set_language(\"zh\");  # collnb 的控件、图片、练习检查和错误说明都用中文（English: \"en\"）")
    return {"cell_type": "code", "execution_count": None, "id": LANGUAGE_CELL_ID, "outputs": [],
            "metadata": {"tags": [LANGUAGE_CELL_ID, "remove-cell"], "slideshow": {"slide_type": "skip"}},
            "source": source.splitlines(keepends=True)}


from nbjson import dumps as _dumps, source as _source  # noqa: E402  (one way of reading and writing notebooks)


def code_tokens(source: str) -> list[tuple[int, str]] | None:
    """``source``'s Python tokens without its comments and line layout (``tokenize``: every comment,
    blank line and line break inside brackets dropped; a statement's end kept), or ``None`` when
    ``tokenize`` cannot read it (an IPython magic, a syntax error)."""
    skip = (tokenize.COMMENT, tokenize.NL)
    try:
        return [(t.type, "" if t.type == tokenize.NEWLINE else t.string)
                for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skip]
    except (tokenize.TokenError, SyntaxError):
        return None


def same_code(a: str, b: str) -> bool:
    """Whether two cells' sources are the same code, comments aside (the same tokens, strings and
    indentation included); sources ``tokenize`` cannot read must be identical."""
    ta, tb = code_tokens(a), code_tokens(b)
    return a == b if ta is None or tb is None else ta == tb


def _comments(source: str) -> list[str]:
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return [ln[ln.index("#"):] for ln in source.splitlines() if ln.lstrip().startswith("#")]


def _code_like(text: str) -> bool:
    """Whether a comment's text is commented-out Python (``t = torch.ones(2)``, ``def f(rank):``),
    not a sentence: it parses, and it has an operator, a bracket or a keyword a sentence lacks."""
    line = text.strip()
    if not line or not (re.search(r"[()\[\]=.]", line) or line.split()[0] in keyword.kwlist):
        return False
    opened = []  # a line of a call or list that goes on (``reqs = [f(a),``): closed for the parser
    for ch in re.sub(r"(['\"]).*?\1", "", line):
        if ch in "([{":
            opened.append(")]}"["([{".index(ch)])
        elif ch in ")]}" and opened and opened[-1] == ch:
            opened.pop()
    closed = line.rstrip(",") + "".join(reversed(opened))
    for attempt in (line, line + "\n    pass", closed):
        try:
            ast.parse(attempt)
            return True
        except SyntaxError:
            continue
    return False


def _english_words(text: str) -> list[str]:
    """The words of a comment's prose that are English: three or more Latin letters, outside
    backticks, and not code-like (a name with ``_``, ``.`` or a digit, a call, ``x[0]``)."""
    text = re.sub(r"`[^`]*`", " ", text)
    return [w for w in text.split() if WORD.search(w) and not re.search(r"[_.\d()\[\]=<>/\\]", w.strip(",;:!?."))]


def english_comments(source: str) -> list[str]:
    """The comments of a code cell's ``source`` a Chinese reader would read as English: no CJK
    character, and an English word in them (:func:`_english_words`). Commented-out code (a
    solution) is code, but a comment inside it is read again; tool pragmas (``# noqa``) are skipped.
    """
    out = []
    for comment in _comments(source):
        if PRAGMA.match(comment) or CJK.search(comment):
            continue
        text = comment.lstrip("#").strip()
        if _code_like(text):
            inner = _comments(text + "\n")
            out += [comment for c in inner if c != comment and english_comments(c + "\n")][:1]
            continue
        if _english_words(text.removeprefix("@title")):
            out.append(comment)
    return out


def english_prose(markdown: str) -> list[str]:
    """The sentences of a markdown cell left in English: six or more English words in a row outside
    code, math, links, quotes (“…”, "…", 《…》: torch's messages and titles, quoted as written) and
    emphasis (``*…*``: paper titles)."""
    text = re.sub(r"^\s*[*+-]\s+", "", _strip_code(markdown).replace("**", ""), flags=re.M)  # list bullets
    return _ENGLISH_RUN.findall(_QUOTED.sub(" ", text))


def translate_boilerplate(source: str) -> str:
    """``source`` with the set-up comments of :data:`BOILERPLATE` in Chinese (the code unchanged)."""
    for english, chinese in BOILERPLATE:
        source = source.replace(english, chinese)
    return source


def twin_path(english: Path) -> Path:
    return ZH / english.name


def _clean(cell: dict) -> dict:
    cell = copy.deepcopy(cell)
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    return cell


def _drop_tag(meta: dict, tag: str) -> dict:
    """``meta`` (a cell's metadata) without ``tag``, and without ``tags`` if none is left."""
    meta = copy.deepcopy(meta or {})
    tags = [t for t in meta.get("tags", []) if t != tag]
    if tags:
        meta["tags"] = tags
    else:
        meta.pop("tags", None)
    return meta


def _tag(cell: dict, tag: str) -> None:
    tags = cell.setdefault("metadata", {}).setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def synced(en: dict, zh: dict | None) -> dict:
    """The twin of notebook ``en`` (parsed JSON), keeping the translations ``zh`` already holds.

    Every cell's metadata comes from ``en``. A code cell keeps ``zh``'s source (its translated
    comments) while it is the same code as ``en``'s (:func:`same_code`); otherwise it gets ``en``'s
    source with :func:`translate_boilerplate`, tagged ``needs-translation`` if an English comment is
    left (:func:`english_comments`). A markdown cell keeps ``zh``'s source when ``zh`` has a markdown
    cell of that id, and otherwise gets the English text tagged ``needs-translation``. A kept cell
    keeps its ``needs-translation`` tag. ``zh``'s notebook metadata is kept, with ``collnb.language`` set.
    """
    old = {c.get("id"): c for c in (zh or {}).get("cells", [])}
    cells = []
    for cell in en["cells"]:
        new = _clean(cell)
        mine = old.get(cell.get("id"))
        pending = mine is not None and NEEDS in mine.get("metadata", {}).get("tags", [])
        if mine is not None and mine["cell_type"] != cell["cell_type"]:
            mine, pending = None, False
        if cell["cell_type"] == "code":
            if mine is not None and same_code(_source(mine), _source(cell)):
                new["source"] = copy.deepcopy(mine["source"])
            else:
                new["source"] = translate_boilerplate(_source(cell)).splitlines(keepends=True)
                pending = bool(english_comments(_source(new)))
        elif cell["cell_type"] == "markdown":
            if mine is not None:
                new["source"] = mine["source"]
            else:
                pending = True
        if pending:
            _tag(new, NEEDS)
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
    english = {c.get("id"): c for c in en["cells"]}
    for have, cell in zip(zh["cells"], want["cells"]):
        pending = NEEDS in have.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "code":
            origin = english.get(cell["id"], cell)  # the language cell is its own origin
            if (have["cell_type"] != "code" or not same_code(_source(have), _source(origin))
                    or _drop_tag(have.get("metadata"), NEEDS) != _drop_tag(cell.get("metadata"), NEEDS)):
                out.append(f"zh-CN/{name}: code cell {cell['id']} differs from the English one "
                           f"(a twin changes only comments: run tools/twins.py)")
            elif pending:
                out.append(f"zh-CN/{name}: code cell {cell['id']}'s comments are still to translate "
                           f"(the English code changed)")
        elif cell["cell_type"] == "markdown":
            source = _source(have)
            if pending:
                out.append(f"zh-CN/{name}: markdown cell {cell['id']} is still to translate")
            elif WORD.search(_strip_code(_source(english[cell["id"]]))) and not CJK.search(source):
                out.append(f"zh-CN/{name}: markdown cell {cell['id']} has no Chinese in it")
            elif english_prose(source):
                out.append(f"zh-CN/{name}: markdown cell {cell['id']} has English prose in it: "
                           f"{english_prose(source)[0][:60]!r}")
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
