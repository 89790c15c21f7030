#!/usr/bin/env python3
"""The learner's JupyterLab (``make lab``): a work folder of their own, and no classroom tools in it.

``python tools/lab.py prepare WORK`` (``make lab`` runs it, ``WORK`` defaults to ``work/``, which git
ignores):

* copies every course notebook (``notebooks/*.ipynb``) and ``notebooks/rise.css`` into ``WORK``
  **only when ``WORK`` has no file of that name yet**: a learner's own copy, with their answers and
  outputs, is never overwritten. JupyterLab then opens ``WORK``, so its autosave and the outputs
  never touch ``notebooks/`` (the hand-outs and the book are built from the committed notebooks:
  ``tools/committed.py``);
* remembers, per copy, which version of the course notebook it was made from
  (``WORK/.collnb-copies.json``), and says so when the course notebook changed since (after a
  ``git pull``): the copy is kept, and the message says how to get the new version;
* prints the JupyterLab config folder the lab starts with (:data:`LAB_CONFIG`): it turns off the
  extensions of the test and classroom extras (nbgrader's menus and server, ipyparallel's
  cluster panel, Voilà's preview, Notebook 7's buttons), which ``make test`` / ``make student``
  install into the same ``.venv``. The config is read from ``JUPYTER_CONFIG_PATH``, ahead of the
  environment's own, so it also holds for extensions installed while the lab runs (a page reload
  reads it again); a learner's own ``~/.jupyter`` settings still win.

The Chinese edition (``make lab-zh``, the same as ``make lab EDITION=zh``): ``prepare WORK --edition zh``
copies the Chinese twins (``notebooks/zh-CN/*.ipynb``) and ``rise.css`` into ``WORK/zh-CN/`` by the
same rules (never overwriting, a manifest of its own there), so the English copies in ``WORK`` and the
Chinese ones sit side by side in one JupyterLab. The Makefile then starts JupyterLab with its own menus
in Chinese for that run only (the language pack's locale as an override default in a settings folder
of that run, :data:`ZH_OVERRIDES`), on the first Chinese notebook, with ``COLLNB_LANG=zh`` in the
server's environment, so every kernel's collnb speaks Chinese too.

Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: The JupyterLab config folder of the learner's lab (``JUPYTER_CONFIG_PATH`` in ``make lab``).
LAB_CONFIG = ROOT / "etc" / "lab"
MANIFEST = ".collnb-copies.json"
#: Files of notebooks/ that are copied besides the notebooks (RISE reads rise.css beside a notebook).
EXTRA_FILES = ("rise.css",)
#: The editions: where each one's notebooks are, and the sub-folder of WORK its copies go to.
EDITIONS = {"en": (NOTEBOOKS, ""), "zh": (NOTEBOOKS / "zh-CN", "zh-CN")}
#: The override defaults the Chinese edition's JupyterLab adds to etc/jupyterlab-overrides.json: the
#: language pack's locale (jupyterlab-language-pack-zh-CN, the ``zh`` extra).
ZH_OVERRIDES = {"@jupyterlab/translation-extension:plugin": {"locale": "zh_CN"}}

__all__ = ["prepare", "course_files", "edition_folders", "LAB_CONFIG", "MANIFEST", "EDITIONS", "ZH_OVERRIDES"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def course_files(notebooks: Path = NOTEBOOKS, extras: Path | None = None) -> list[Path]:
    """The files ``make lab`` copies into the work folder: ``notebooks/*.ipynb`` and the
    :data:`EXTRA_FILES` that exist in ``extras`` (default: ``notebooks`` itself)."""
    extras = notebooks if extras is None else extras
    return sorted(notebooks.glob("*.ipynb")) + [extras / n for n in EXTRA_FILES if (extras / n).is_file()]


def edition_folders(edition: str, work: Path) -> tuple[Path, Path]:
    """``(notebooks folder, copies folder)`` of one edition (:data:`EDITIONS`) for the work folder ``work``.

    Raises:
        ValueError: ``edition`` is not one of :data:`EDITIONS` (the message lists them).
    """
    if edition not in EDITIONS:
        raise ValueError(f"no edition {edition!r}: choose one of {', '.join(EDITIONS)} "
                         f"(make lab for English, make lab-zh or make lab EDITION=zh for Chinese)")
    notebooks, sub = EDITIONS[edition]
    return notebooks, (Path(work) / sub if sub else Path(work))


def prepare(work: Path, notebooks: Path = NOTEBOOKS, extras: Path | None = None) -> dict:
    """Copy the course files into ``work`` without overwriting anything (see the module doc).

    ``extras`` is the folder :data:`EXTRA_FILES` come from (default ``notebooks``; the Chinese
    edition takes ``rise.css`` from ``notebooks/``).

    Returns:
        ``{"copied": [names], "kept": [names already there], "newer": [names whose course version
        changed since the copy was made]}``.

    Raises:
        FileNotFoundError: ``notebooks`` holds no notebook. NotADirectoryError: ``work`` is a file.
    """
    work = Path(work)
    files = course_files(notebooks, extras)
    if not any(f.suffix == ".ipynb" for f in files):
        raise FileNotFoundError(f"no notebooks in {notebooks}")
    if work.exists() and not work.is_dir():
        raise NotADirectoryError(f"{work} is a file; make lab needs a folder for your copies (WORK=...)")
    work.mkdir(parents=True, exist_ok=True)
    manifest_path = work / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    out = {"copied": [], "kept": [], "newer": []}
    for src in files:
        dst = work / src.name
        digest = _digest(src)
        if dst.exists():
            out["kept"].append(src.name)
            if src.name in manifest and manifest[src.name] != digest:
                out["newer"].append(src.name)
            continue
        shutil.copyfile(src, dst)
        manifest[src.name] = digest
        out["copied"].append(src.name)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="copy the course notebooks into WORK (never overwriting)")
    p.add_argument("work", type=Path)
    p.add_argument("--edition", default="en", help="en (notebooks/) or zh (notebooks/zh-CN/ into WORK/zh-CN/)")
    o = sub.add_parser("overrides", help="write the JSON override defaults of an edition's JupyterLab to OUT")
    o.add_argument("out", type=Path)
    o.add_argument("--edition", default="en")
    args = ap.parse_args(argv)
    if args.command == "overrides":
        return _write_overrides(args.out, args.edition)
    try:
        notebooks, work = edition_folders(args.edition, args.work)
        got = prepare(work, notebooks, extras=NOTEBOOKS)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    zh = args.edition == "zh"  # the Chinese edition's learner reads these lines in Chinese (make lab-zh)
    if got["copied"]:
        print((f"已复制到 {work}/：" if zh else f"copied into {work}/: ") + ", ".join(got["copied"]))
    if zh:
        print(f"你的笔记本在 {work}/（你的答案和输出都保存在那里；git 忽略它；notebooks/ 保持提交时的样子）")
    else:
        print(f"your notebooks: {work}/ (your answers and outputs are saved there; git ignores it; "
              f"notebooks/ stays as committed)")
    course = notebooks.relative_to(ROOT) if notebooks.is_relative_to(ROOT) else notebooks
    for name in got["newer"]:
        if zh:
            print(f"注意：{course}/{name} 在你复制 {work}/{name} 之后改过了；你的副本保持不变。要拿到新版本，"
                  f"把你的副本改名（例如改成 {Path(name).stem}-mine.ipynb），再运行一次 make lab-zh。")
        else:
            print(f"note: {course}/{name} changed since your copy {work}/{name} was made; your copy is kept. "
                  f"To get the new version, rename your copy (e.g. to {Path(name).stem}-mine.ipynb) and run "
                  f"make lab again.")
    return 0


def _write_overrides(out: Path, edition: str) -> int:
    """Write etc/jupyterlab-overrides.json, plus :data:`ZH_OVERRIDES` for ``zh``, as one JSON file."""
    if edition not in EDITIONS:
        print(f"error: no edition {edition!r}: choose one of {', '.join(EDITIONS)}", file=sys.stderr)
        return 2
    settings = json.loads((ROOT / "etc" / "jupyterlab-overrides.json").read_text())
    if edition == "zh":
        settings.update(ZH_OVERRIDES)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
