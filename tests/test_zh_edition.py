"""The Chinese edition (issue 24): README.zh-CN.md and its launch links, the twins of the English
notebooks (tools/twins.py), ``make lab-zh``, and the Chinese book beside the English one.

The book tests read ``docs/_build/html/zh-CN`` and the book's jupyter-cache (``make docs`` builds
both editions; ``.ci/run`` runs it before the tests); without a built Chinese book they skip, naming
the command that builds it.
"""
from __future__ import annotations

import copy
import shutil
import json
import re
import sys
import tomllib
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import notebook_meta  # noqa: E402
import twins  # noqa: E402

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REPO_URL = PYPROJECT["project"]["urls"]["Repository"]
OWNER_REPO = REPO_URL.removeprefix("https://github.com/")
DOCS_URL = PYPROJECT["project"]["urls"]["Documentation"].rstrip("/")
ZH = ROOT / "notebooks" / "zh-CN"
TWINS = sorted(ZH.glob("*.ipynb"))
README_ZH = ROOT / "README.zh-CN.md"


def _table_rows(text: str) -> list[str]:
    block = text.split(notebook_meta.LINKS_START, 1)[1].split(notebook_meta.LINKS_END, 1)[0]
    return [ln for ln in block.splitlines() if ln.startswith("| [`")]


# ------------------------------------------------------------------------------------------------
# README.zh-CN.md


def test_the_two_readmes_link_each_other():
    readme = (ROOT / "README.md").read_text()
    zh = README_ZH.read_text()
    top = readme.split("\n## ", 1)[0]
    assert "中文版：[README.zh-CN.md](README.zh-CN.md)" in top, "README.md's top does not link the Chinese README"
    assert "(README.md)" in zh.split("\n## ", 1)[0], "README.zh-CN.md's top does not link back to README.md"
    assert len(re.findall(r"[\u4e00-\u9fff]", zh)) > 1000


def test_every_link_of_the_chinese_readme_table_opens_a_real_twin():
    rows = _table_rows(README_ZH.read_text())
    assert len(rows) == len(TWINS) and TWINS, (len(rows), len(TWINS))
    for row, twin in zip(rows, TWINS):
        rel = f"notebooks/zh-CN/{twin.name}"
        links = re.findall(r"\]\(([^)\s]+)\)", row)
        assert len(links) == 4, row
        local, binder, colab, book = links
        assert (ROOT / local).resolve() == twin.resolve(), row
        assert unquote(binder) == f"https://mybinder.org/v2/gh/{OWNER_REPO}/main?urlpath=lab/tree/{rel}", row
        assert colab == f"https://colab.research.google.com/github/{OWNER_REPO}/blob/main/{rel}", row
        assert book == f"{DOCS_URL}/zh-CN/notebooks/zh-CN/{twin.stem}.html", row
        # each names a file that exists: the twin, at the same path on the branch the links name
        for link in (binder, colab, book):
            path = unquote(link).split("lab/tree/")[-1].split("/blob/main/")[-1]
            if link == book:
                path = "notebooks/zh-CN/" + path.rsplit("/", 1)[1].removesuffix(".html") + ".ipynb"
            assert (ROOT / path).is_file(), (link, path)


def test_the_chinese_readme_table_is_written_from_pyproject():
    """The check compares for real: the table written for another repository differs, and writing
    it again from pyproject.toml gives the committed README.zh-CN.md back."""
    text = README_ZH.read_text()
    other = notebook_meta.fix_readme(text, notebook_meta.readme_links_zh(
        "https://github.com/someone/else", TWINS, "https://someone.github.io/else"))
    assert other != text and "someone/else" in other
    assert notebook_meta.fix_readme(other, notebook_meta.readme_links_zh(REPO_URL, TWINS, DOCS_URL)) == text


def test_a_readme_without_the_link_block_is_refused_by_name():
    with pytest.raises(ValueError, match=r"README\.zh-CN\.md has no <!-- launch-links:start -->"):
        notebook_meta.fix_readme("# 没有表格\n", "x", "README.zh-CN.md")


def test_the_chinese_readme_says_what_works_where_binder_colab_github_are_hard_to_reach():
    zh = README_ZH.read_text()
    assert "PIP_INDEX_URL=https://pypi.tuna.tsinghua.edu.cn/simple" in zh
    assert "make lab-zh" in zh and "download.pytorch.org/whl/cpu" in zh
    # no invented URL for collnb itself: the only repository named is pyproject's
    for other in re.findall(r"(?:github|gitee)\.com/([\w.-]+/[\w.-]+)", zh):
        assert other == OWNER_REPO, other


def test_binder_installs_a_cjk_font_and_jupyterlabs_chinese_language_pack():
    import yaml
    lines = [ln.split("#", 1)[0].strip() for ln in (ROOT / "apt.txt").read_text().splitlines()]
    assert "fonts-noto-cjk" in lines
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    extras = next(p for p in pip if p.replace(" ", "").startswith("-e."))
    assert "zh" in extras.split("[", 1)[1].rstrip("]").split(","), extras


# ------------------------------------------------------------------------------------------------
# The twins: the English notebooks' code, comments and markdown translated


def _check_problems() -> list[str]:
    import subprocess
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "twins.py"), "--check"],
                          capture_output=True, text=True)
    assert (proc.returncode == 0) == (not proc.stderr.strip()), proc.stderr
    return proc.stderr.splitlines()


UNTRANSLATED = re.compile(r"markdown cell \S+ (is still to translate|has no Chinese in it)$")


def test_every_twin_exists_and_has_the_english_code():
    """tools/twins.py --check: every English notebook has its twin, with the same cells in the same
    order, the code cells, tags and metadata identical, links naming twins (translation aside:
    the next test)."""
    problems = [p for p in _check_problems() if not UNTRANSLATED.search(p)]
    assert not problems, "\n".join(problems)


def test_every_twin_is_translated():
    """tools/twins.py --check passes as a whole: no markdown cell left in English."""
    problems = _check_problems()
    assert not problems, f"{len(problems)} problems, e.g.:\n" + "\n".join(problems[:20])


def _pair(stem="01_broadcast"):
    en = twins._load(ROOT / "notebooks" / f"{stem}.ipynb")
    zh = twins.synced(en, twins._load(ZH / f"{stem}.ipynb"))
    # a translated copy (throwaway, never saved): every markdown cell in Chinese
    for cell in zh["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = ["# 测试用的中文\n", "这一格已经翻译。"]
            tags = cell.get("metadata", {}).get("tags", [])
            if twins.NEEDS in tags:
                tags.remove(twins.NEEDS)
                if not tags:
                    del cell["metadata"]["tags"]
    return en, zh


def test_a_translated_twin_with_the_english_code_has_no_problem():
    en, zh = _pair()
    assert twins.problems(en, zh, "01_broadcast.ipynb") == []


def test_a_changed_code_cell_in_a_twin_is_named():
    en, zh = _pair()
    doctored = copy.deepcopy(zh)
    cell = next(c for c in doctored["cells"] if c["cell_type"] == "code" and c["id"] != twins.LANGUAGE_CELL_ID
                and c["id"] != "colab-setup")
    cell["source"] = twins._source(cell) + "\nprint('changed in the twin only')"
    assert twins.problems(en, doctored, "01_broadcast.ipynb") == [
        f"zh-CN/01_broadcast.ipynb: code cell {cell['id']} differs from the English one "
        f"(a twin changes only comments: run tools/twins.py)"]
    # a string is code: a message translated in a twin's cell is a change (collnb.i18n translates)
    quoted = copy.deepcopy(zh)
    def quoting_line(source):  # a line with a string in its code (not only in a comment)
        return next((ln for ln in source.splitlines() if '"' in ln.split("#", 1)[0]), None)

    cell = next(c for c in quoted["cells"] if c["cell_type"] == "code" and quoting_line(twins._source(c))
                and c["id"] not in (twins.LANGUAGE_CELL_ID, "colab-setup"))
    line = quoting_line(twins._source(cell))
    cell["source"] = twins._source(cell).replace(line, line.replace('"', '"中文 ', 1), 1)
    assert any(f"code cell {cell['id']} differs" in p for p in twins.problems(en, quoted, "01_broadcast.ipynb"))
    # a tag changed is a change too (the exercise checks are found by their tags)
    tagged = copy.deepcopy(zh)
    cell = next(c for c in tagged["cells"] if c["cell_type"] == "code" and c.get("metadata", {}).get("tags")
                and c["id"] not in (twins.LANGUAGE_CELL_ID, "colab-setup"))
    cell["metadata"]["tags"] = cell["metadata"]["tags"][1:]
    assert any(f"code cell {cell['id']} differs" in p for p in twins.problems(en, tagged, "01_broadcast.ipynb"))


def _code_cell(nb, with_comment=True):
    return next(c for c in nb["cells"] if c["cell_type"] == "code" and (not with_comment or "#" in twins._source(c))
                and c["id"] not in (twins.LANGUAGE_CELL_ID, "colab-setup"))


def test_a_twin_may_change_only_the_comments_of_a_code_cell():
    en, zh = _pair()
    cell = _code_cell(zh)
    english = twins._source(cell)
    # every comment in Chinese, a comment line added, and the spaces before a trailing comment changed
    cell["source"] = "# 新加的一行注释\n" + re.sub(r"\s*#.*", "  # 中文注释", english)
    assert twins.code_tokens(twins._source(cell)) == twins.code_tokens(english)
    assert twins.problems(en, zh, "01_broadcast.ipynb") == []
    # a comment removed where it made the line: code changed (the token after it differs) is named
    cell["source"] = twins._source(cell).replace("  # 中文注释", "  # 中文注释\nx = 1", 1)
    assert any(f"code cell {cell['id']} differs" in p for p in twins.problems(en, zh, "01_broadcast.ipynb"))


def test_sync_keeps_translated_comments_and_tags_a_cell_whose_english_code_changed():
    en, zh = _pair()
    cell = _code_cell(zh)
    translated = re.sub(r"#.*", "# 中文注释", twins._source(cell))
    cell["source"] = translated
    # the English comments changed, the code not: the translation stays, nothing to do
    en2 = copy.deepcopy(en)
    english = next(c for c in en2["cells"] if c["id"] == cell["id"])
    english["source"] = re.sub(r"#.*", "# reworded in English", twins._source(english))
    kept = next(c for c in twins.synced(en2, zh)["cells"] if c["id"] == cell["id"])
    assert twins._source(kept) == translated and twins.NEEDS not in kept["metadata"].get("tags", [])
    # the English code changed: the twin gets the English cell, tagged, and the check names it
    english["source"] = twins._source(english) + "\nprint('new')  # a new line"
    new = twins.synced(en2, zh)
    got = next(c for c in new["cells"] if c["id"] == cell["id"])
    assert twins._source(got) == twins._source(english) and twins.NEEDS in got["metadata"]["tags"]
    assert twins.problems(en2, new, "01_broadcast.ipynb") == [
        f"zh-CN/01_broadcast.ipynb: code cell {cell['id']}'s comments are still to translate (the English code changed)"]
    # translated again (the tag removed by hand): no problem; and a sync keeps it
    got["source"] = twins._source(got).replace("# a new line", "# 新的一行")
    got["metadata"] = twins._drop_tag(got["metadata"], twins.NEEDS)
    assert twins.problems(en2, new, "01_broadcast.ipynb") == []
    assert twins.synced(en2, new)["cells"] == new["cells"]
    # a changed cell without English comments left needs no translation
    english["source"] = "x = 1\n"
    got = next(c for c in twins.synced(en2, zh)["cells"] if c["id"] == cell["id"])
    assert twins._source(got) == "x = 1\n" and twins.NEEDS not in got["metadata"].get("tags", [])


def test_a_cell_copied_afresh_gets_the_set_up_comments_in_chinese():
    """The Colab cell (tools/notebook_meta.py writes it), a solution's title and header, "Your turn" and
    the check's import: sync writes them in Chinese, the code unchanged, no English comment left."""
    colab = notebook_meta.colab_cell(REPO_URL)
    zh = twins.translate_boilerplate(twins._source(colab))
    assert twins.same_code(zh, twins._source(colab)) and zh != twins._source(colab)
    assert twins.english_comments(twins._source(colab)) and not twins.english_comments(zh)
    seen = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            tags = cell.get("metadata", {}).get("tags", [])
            if cell["cell_type"] != "code" or not {"solution", "exercise", "check"} & set(tags):
                continue
            english, chinese = twins._source(cell), twins.translate_boilerplate(twins._source(cell))
            assert twins.same_code(english, chinese), (path.name, cell["id"])
            lines = chinese.splitlines()
            if "solution" in tags:  # the title and the two lines of the header
                assert lines[0].startswith("# @title 参考答案"), (path.name, cell["id"])
                assert twins.CJK.search(lines[1]) and twins.CJK.search(lines[2]), (path.name, cell["id"])
            if "check" in tags and "import exercises   # the checks: real ranks" in english:
                line = next(ln for ln in lines if "import exercises" in ln)
                assert not twins.english_comments(line), (path.name, cell["id"])
            if english.startswith("# ✏️ Your turn: replace the `...` with your code.\n"):
                assert lines[0] == "# ✏️ 轮到你了：把 `...` 换成你的代码。", (path.name, cell["id"])
            seen |= set(tags) & {"solution", "check", "exercise"}
    assert seen == {"solution", "check", "exercise"}


def test_the_english_comment_and_prose_detectors_tell_english_from_chinese():
    english = ["x = 1  # the sum over every rank", "# ✏️ Your turn: replace the `...` with your code.",
               "# @title Solution (hidden)", "#     dist.all_reduce(t)   # on every rank: the count",
               "# ── Explorer ──────"]
    chinese = ["x = 1  # 所有 rank 之和", "# `dist.all_reduce` 之后", "#     dist.all_reduce(t)   # 每个 rank 上",
               "# def count_ready(rank, world_size, ready):", "#     return int(t.item())", "#", "x = 1  # noqa: E501",
               "t = torch.ones(2)   # float32", "# rank0 (0, 1)"]
    for line in english:
        assert twins.english_comments(line + "\n"), line
    for line in chinese:
        assert not twins.english_comments(line + "\n"), line
    assert twins.english_prose("Run the cell below and see what each rank prints.")
    assert twins.english_prose("运行下面一格。Then look at what every rank prints out here.")
    for text in ["运行下面这一格，看看每个 rank 打印了什么（world size 为 4）。",
                 "torch 的报错是 “Tensors must be CUDA and dense on every rank”：意思是……",
                 "见 *Efficient Large-Scale Language Model Training on GPU Clusters* 第 3 节。",
                 "```python\nprint('every rank prints this line here')\n```\n上面的代码。"]:
        assert not twins.english_prose(text), text


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.stem)
def test_no_code_cell_of_a_twin_has_an_english_comment(twin):
    """A learner of the Chinese edition reads every comment in Chinese (identifiers, `code` and
    commented-out code aside): twins.english_comments finds none in any code cell."""
    left = [f"{c['id']}: {line}" for c in json.loads(twin.read_text())["cells"] if c["cell_type"] == "code"
            for line in twins.english_comments(twins._source(c))]
    assert not left, f"{len(left)} English comments, e.g.:\n" + "\n".join(left[:20])


def test_an_untranslated_or_missing_cell_is_named():
    en, zh = _pair()
    english = copy.deepcopy(zh)
    md = next(c for c in english["cells"] if c["cell_type"] == "markdown")
    md["source"] = next(c for c in en["cells"] if c["id"] == md["id"])["source"]
    assert twins.problems(en, english, "01_broadcast.ipynb") == [
        f"zh-CN/01_broadcast.ipynb: markdown cell {md['id']} has no Chinese in it"]
    short = copy.deepcopy(zh)
    del short["cells"][-1]
    assert twins.problems(en, short, "01_broadcast.ipynb") == [
        "zh-CN/01_broadcast.ipynb: its cells are not the English notebook's, in order (run tools/twins.py to sync)"]


def _run_language_cell(in_colab: bool):
    import types
    cell = twins.language_cell()
    calls = []
    shell = types.SimpleNamespace(system=lambda cmd: calls.append(("system", cmd)))
    fake_collnb = types.SimpleNamespace(set_language=lambda lang: calls.append(("set_language", lang)))
    saved = {k: sys.modules.get(k) for k in ("google.colab", "collnb")}
    sys.modules["collnb"] = fake_collnb  # type: ignore[assignment]
    if in_colab:
        sys.modules["google.colab"] = types.ModuleType("google.colab")
    else:
        sys.modules.pop("google.colab", None)
    try:
        exec(compile(twins._source(cell), "set-language", "exec"), {"get_ipython": lambda: shell})
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return calls


def test_the_language_cell_shows_no_output_in_the_notebook():
    """Every twin's language cell ended with ``collnb.set_language("zh")``, so JupyterLab showed a stray
    ``Out[2]: 'zh'``: IPython displays the last expression's value unless the line ends with ``;``
    (its own test of that, below)."""
    from IPython.core.displayhook import DisplayHook
    last = twins._source(twins.language_cell()).rstrip().splitlines()[-1]
    assert last.startswith("collnb.set_language(")
    assert DisplayHook.semicolon_at_end_of_expression(last), last
    assert not DisplayHook.semicolon_at_end_of_expression('collnb.set_language("zh")  # 中文')


def test_the_language_cell_installs_a_cjk_font_on_colab_only_then_speaks_chinese():
    assert _run_language_cell(in_colab=False) == [("set_language", "zh")]
    calls = _run_language_cell(in_colab=True)
    assert calls[-1] == ("set_language", "zh") and len(calls) == 2
    assert calls[0][0] == "system" and "apt-get -qq install" in calls[0][1] and "fonts-noto-cjk" in calls[0][1]


@pytest.mark.parametrize("twin", TWINS, ids=lambda p: p.stem)
def test_every_twin_opens_with_the_colab_cell_then_the_language_cell(twin):
    nb = json.loads(twin.read_text())
    assert [c["id"] for c in nb["cells"][:2]] == ["colab-setup", twins.LANGUAGE_CELL_ID]
    assert twins._source(nb["cells"][1]) == twins._source(twins.language_cell())


# ------------------------------------------------------------------------------------------------
# make lab-zh


def test_make_lab_zh_copies_the_twins_into_work_zh_cn_and_never_overwrites(tmp_path):
    import lab
    notebooks, work = lab.edition_folders("zh", tmp_path / "work")
    assert notebooks == ZH and work == tmp_path / "work" / "zh-CN"
    course = tmp_path / "zh-CN"
    course.mkdir()
    for p in TWINS[:2]:
        shutil.copy(p, course / p.name)
    got = lab.prepare(work, course, extras=ROOT / "notebooks")
    assert sorted(got["copied"]) == sorted([p.name for p in TWINS[:2]] + ["rise.css"])
    mine = work / TWINS[0].name
    mine.write_text(mine.read_text() + " ")  # the learner's answer
    answer = mine.read_text()
    got = lab.prepare(work, course, extras=ROOT / "notebooks")
    assert not got["copied"] and mine.read_text() == answer
    with pytest.raises(ValueError, match=r"no edition 'fr': choose one of en, zh"):
        lab.edition_folders("fr", tmp_path)


def test_make_lab_zh_opens_a_chinese_jupyterlab_for_that_run_only(tmp_path):
    import subprocess
    import lab
    done = ["-o", ".venv/.lab-installed", "-o", ".venv/.zh-installed"]
    zh = subprocess.run(["make", "-n", *done, "lab-zh", f"WORK={tmp_path}"], cwd=ROOT, capture_output=True,
                        text=True, check=True).stdout
    en = subprocess.run(["make", "-n", *done, "lab", f"WORK={tmp_path}"], cwd=ROOT, capture_output=True,
                        text=True, check=True).stdout
    assert f"tools/lab.py prepare {tmp_path} --edition zh" in zh
    assert "COLLNB_LANG=zh" in zh and "--LabApp.default_url=/lab/tree/zh-CN/00_launching_ranks.ipynb" in zh
    assert "--LabApp.app_settings_dir=" in zh and "settings-zh" in zh
    assert "COLLNB_LANG" not in en and "app_settings_dir" not in en and "--edition en" in en
    # each edition reopens its own tabs (make lab-zh reopened the English session's and started their kernels)
    assert "/share/jupyter/lab/workspaces-zh" in zh and "workspaces-en" not in zh
    assert "/share/jupyter/lab/workspaces-en" in en and "workspaces-zh" not in en
    out = tmp_path / "overrides.json"
    assert lab.main(["overrides", str(out), "--edition", "zh"]) == 0
    settings = json.loads(out.read_text())
    assert settings["@jupyterlab/translation-extension:plugin"] == {"locale": "zh_CN"}
    assert settings["@jupyterlab/apputils-extension:notification"]["checkForUpdates"] is False
    assert lab.main(["overrides", str(out), "--edition", "en"]) == 0
    assert "@jupyterlab/translation-extension:plugin" not in json.loads(out.read_text())
    bad = subprocess.run(["make", "-n", "lab", "EDITION=fr"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "EDITION must be en or zh" in bad.stderr


def test_the_zh_extra_is_jupyterlabs_chinese_language_pack_pinned():
    extra = PYPROJECT["project"]["optional-dependencies"]["zh"]
    assert extra == ["jupyterlab-language-pack-zh-CN>=4.0"]
    pins = (ROOT / "constraints.txt").read_text().split()
    assert "jupyterlab-language-pack-zh-CN==4.5.post3" in pins


# ------------------------------------------------------------------------------------------------
# The Chinese book, beside the English one


BOOK = ROOT / "docs" / "_build" / "html"
BOOK_ZH = BOOK / "zh-CN"
sys.path.insert(0, str(ROOT / "docs"))
import editions  # noqa: E402


def test_the_switch_maps_each_page_to_the_same_page_of_the_other_edition():
    assert editions.counterpart("notebooks/01_broadcast", "en") == "notebooks/zh-CN/01_broadcast"
    assert editions.counterpart("notebooks/zh-CN/01_broadcast", "zh") == "notebooks/01_broadcast"
    assert editions.counterpart("docs/index", "en") == "docs/zh-CN/index"
    assert editions.counterpart("docs/zh-CN/index", "zh") == "docs/index"
    assert editions.counterpart("docs/api", "en") == "docs/zh-CN/index"  # no Chinese API reference
    assert editions.counterpart("docs/glossary.zh-CN", "zh") == "docs/glossary.zh-CN"
    # relative to the page's own file: en lies at the root, zh in zh-CN/ under it
    assert editions.switch_href("notebooks/01_broadcast", "en") == "../zh-CN/notebooks/zh-CN/01_broadcast.html"
    assert editions.switch_href("notebooks/zh-CN/01_broadcast", "zh") == "../../../notebooks/01_broadcast.html"
    html = editions.switch_html("notebooks/zh-CN/01_broadcast", "zh")
    assert "<strong>中文</strong> | <a " in html and ">English</a>" in html


def test_a_bad_edition_or_notebook_selection_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("COLLNB_BOOK_EDITION", "fr")
    with pytest.raises(ValueError, match="the book has the editions 'en' and 'zh'"):
        editions.edition()
    monkeypatch.setenv("COLLNB_BOOK_NOTEBOOKS", "01_broadcast,99_nothing")
    with pytest.raises(ValueError, match="names no notebook of notebooks/: 99_nothing"):
        editions.selected_notebooks()
    monkeypatch.setenv("COLLNB_BOOK_NOTEBOOKS", "01_broadcast, 00_launching_ranks.ipynb")
    assert editions.selected_notebooks() == ["01_broadcast", "00_launching_ranks"]


def _switch_target(page: Path) -> Path | None:
    text = page.read_text(errors="replace")
    m = re.search(r'<p class="collnb-language-switch">(.*?)</p>', text, re.S)
    if not m:
        return None
    href = re.search(r'href="([^"]+)"', m.group(1))
    return (page.parent / unquote(href.group(1))).resolve() if href else None


@pytest.fixture(autouse=True, scope="module")
def _book_when_this_run_builds_it(book):
    """Where this run builds the book (tests/conftest.py's ``book``), these tests read it once it is built."""


def _built_twins() -> list[Path]:
    if not (BOOK_ZH / "docs" / "zh-CN" / "index.html").is_file():
        pytest.skip("no Chinese book built: run make docs (or COLLNB_BOOK_NOTEBOOKS=00_launching_ranks make docs)")
    return [t for t in TWINS if (BOOK_ZH / "notebooks" / "zh-CN" / f"{t.stem}.html").is_file()]


def test_every_chinese_page_switches_to_its_english_page_and_back():
    built = _built_twins()
    assert built, "the Chinese book has no notebook page"
    if not editions.selected_notebooks():
        missing = sorted(set(TWINS) - set(built))
        assert not missing, f"the Chinese book has no page for {[p.stem for p in missing]}"
    for twin in built:
        zh_page = BOOK_ZH / "notebooks" / "zh-CN" / f"{twin.stem}.html"
        en_page = (BOOK / "notebooks" / f"{twin.stem}.html").resolve()
        assert _switch_target(zh_page) == en_page, f"{zh_page}: its switch does not open {en_page}"
        if en_page.is_file():
            assert _switch_target(en_page) == zh_page.resolve(), f"{en_page}: its switch does not open {zh_page}"
        text = zh_page.read_text()
        assert "apt-get -qq install" not in text and "google.colab" not in text, \
            f"{zh_page}: the Colab or language set-up cell is shown in the book"
        assert '<html lang="zh-CN"' in text or "lang=\"zh_CN\"" in text, f"{zh_page}: not marked Chinese"
        # its launch buttons open the Chinese notebook
        assert f"notebooks%2Fzh-CN%2F{twin.name}" in text or f"notebooks/zh-CN/{twin.name}" in unquote(text)
        assert f"colab.research.google.com/github/{OWNER_REPO}/blob/main/notebooks/zh-CN/{twin.name}" in text
    landing = BOOK_ZH / "docs" / "zh-CN" / "index.html"
    assert _switch_target(landing) == (BOOK / "docs" / "index.html").resolve()
    # the Chinese book's top (zh-CN/, README.zh-CN.md's link) redirects to its landing page
    top = (BOOK_ZH / "index.html").read_text()
    redirect = re.search(r'http-equiv="refresh" content="0; url=([^"]+)"', top)
    assert redirect and (BOOK_ZH / redirect.group(1)).resolve() == landing.resolve(), top
    if (BOOK / "docs" / "index.html").is_file():
        assert _switch_target(BOOK / "docs" / "index.html") == landing.resolve()


def test_every_chinese_notebook_executed_without_an_error():
    """The book's own execution (its jupyter-cache) of each twin it built: no cell raised, nothing
    printed a traceback, and the language cell ran first with the Chinese it sets."""
    import nbformat
    pytest.importorskip("jupyter_cache", reason="the book's execution cache needs the docs extra: pip install -e '.[docs]'")
    from jupyter_cache import get_cache

    import datetime

    built = _built_twins()
    cache = get_cache(str(BOOK.parent / ".jupyter_cache"))
    # an execution older than collnb's code (as tests/test_notebooks.py judges) says nothing of it
    code = [f for name in ("collnb", "tools") for f in (ROOT / name).rglob("*.py")]
    newest = max(f.stat().st_mtime for f in code + [ROOT / "pyproject.toml", ROOT / "constraints.txt"])
    problems = []
    for twin in built:
        nb = nbformat.read(twin, as_version=4)
        try:
            record = cache.match_cache_notebook(nb)
            _, ex = cache.merge_match_into_notebook(nb)
        except KeyError:
            problems.append(f"{twin.stem}: the book's cache holds no execution of the current twin; run make docs")
            continue
        created = record.created.replace(tzinfo=datetime.timezone.utc).timestamp()  # jupyter-cache stores UTC
        if created <= newest:
            problems.append(f"{twin.stem}: the book executed it before collnb's code last changed; run make docs")
            continue
        for cell in ex.cells:
            for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                if out.get("output_type") == "error":
                    problems.append(f"{twin.stem}: cell {cell.get('id')} raised {out.get('ename')}: "
                                    f"{out.get('evalue', '')[:200]}")
                elif out.get("name") == "stderr" and "Traceback" in out.get("text", ""):
                    problems.append(f"{twin.stem}: cell {cell.get('id')} printed a traceback")
        lang = next(c for c in ex.cells if c.get("id") == twins.LANGUAGE_CELL_ID)
        if lang.get("execution_count") is None:
            problems.append(f"{twin.stem}: the language cell did not run")
    assert not problems, "\n".join(problems)


def test_the_chinese_readme_never_breaks_a_line_between_two_chinese_characters():
    """A soft line break inside Chinese text renders as a stray space in the book and on GitHub."""
    text = re.sub(r"```.*?```", "", README_ZH.read_text(), flags=re.S)
    cjk = r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"
    breaks = re.findall(rf"{cjk}\n{cjk}", text)
    assert not breaks, f"{len(breaks)} line breaks between two Chinese characters: {breaks[:5]}"


def test_no_emphasis_marker_is_left_as_a_literal_asterisk():
    """CommonMark closes ``*…*`` only where the closing marker is right-flanking: after full-width
    punctuation and before a Chinese character it is not ("*折叠（fold）*进来" shows its stars), so
    the Chinese text keeps the punctuation outside the markers ("*折叠*（fold）进来")."""
    pytest.importorskip("markdown_it", reason="CommonMark's parser comes with the docs extra: pip install -e '.[docs]'")
    from markdown_it import MarkdownIt
    md = MarkdownIt("commonmark").enable("table")
    literal = []
    for path in sorted(ZH.glob("*.ipynb")) + sorted(ZH.parent.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for tok in md.parse("".join(cell["source"])):
                for child in tok.children or []:
                    if child.type == "text" and "*" in child.content:
                        literal.append(f"{path.name} {cell['id']}: {child.content[:60]!r}")
    assert literal == []


# ------------------------------------------------------------------------------------------------
# What a notebook's own code prints: through collnb.i18n's _(), so the Chinese twin (the same code) prints
# Chinese (tools/catalogues.py reads the messages from the English notebooks' code cells)

#: A string's words a learner reads as English: two words of three or more letters in a row that are not
#: names from code (``all_reduce``, ``x.grad``, ``bucket_cap_mb``).
_PROSE = re.compile(r"(?<![\w.])[A-Za-z]{3,}(?![\w.(])[ ,;]+(?<![\w.])[A-Za-z]{2,}(?![\w.(])")
#: Keyword arguments that put text into a picture.
_TEXT_KEYWORDS = {"title", "note", "footer", "column_label", "row_label", "caption", "label"}


def _prose_outside_translation(source: str) -> list[str]:
    """The English strings a cell prints (``print`` arguments, a picture's ``title=``/``note=``/...) that do
    not go through ``_()``: literal text with two English words in a row (names from code aside)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []

    def strings(node):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("_", "ngettext"):
            return  # translated (its .format(...) arguments are values)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
                and isinstance(node.func.value, ast.Call) and getattr(node.func.value.func, "id", None) == "_":
            for arg in [*node.args, *[k.value for k in node.keywords]]:
                yield from strings(arg)
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
            return
        if isinstance(node, ast.JoinedStr):
            for part in node.values:
                if isinstance(part, ast.Constant):
                    yield part.value
                else:
                    yield from strings(part.value)
            return
        for child in ast.iter_child_nodes(node):
            yield from strings(child)

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        shown = []
        if getattr(node.func, "id", None) == "print":
            shown = list(node.args)
        shown += [k.value for k in node.keywords if k.arg in _TEXT_KEYWORDS]
        for arg in shown:
            found += [s for s in strings(arg) if _PROSE.search(re.sub(r"`[^`]*`", "", s))]
    return found


def _binds_underscore(source: str) -> list[str]:
    """Where a cell's code binds ``_`` so that a ``_("...")`` call reads the wrong name: a module-level
    binding (``for _ in``, ``_, x = ...``: it hides collnb.i18n's ``_`` for the rest of the notebook), or a
    function or comprehension that binds ``_`` and calls ``_()`` inside (``", ".join(_("{i}").format(i=i)
    for i, _ in pairs)``: the loop's ``_`` is called)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
              ast.DictComp, ast.GeneratorExp)

    def own_nodes(scope):  # the nodes of a scope, not those of the scopes nested in it
        for child in ast.iter_child_nodes(scope):
            yield child
            if not isinstance(child, scopes):
                yield from own_nodes(child)

    def binds(scope) -> bool:
        return any(isinstance(n, ast.Name) and n.id == "_" and isinstance(n.ctx, ast.Store) for n in own_nodes(scope))

    def calls(scope) -> bool:
        return any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_" for n in ast.walk(scope))

    out = ["module level: " + ast.unparse(n) for n in own_nodes(tree)
           if isinstance(n, ast.Name) and n.id == "_" and isinstance(n.ctx, ast.Store)]
    out += [ast.unparse(n)[:80] for n in ast.walk(tree) if isinstance(n, scopes) and binds(n) and calls(n)]
    return out


EN_NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", EN_NOTEBOOKS, ids=lambda p: p.stem)
def test_what_a_notebook_prints_goes_through_the_translation(path):
    """Issue 34: the Chinese edition printed the notebooks' own lines in English ("each rank issued",
    "no communication"). Every line a notebook's code prints, and every text it puts into a picture, is
    ``_("...")`` (with ``.format``), never a literal English sentence; and no module-level statement
    rebinds ``_`` after ``from collnb.i18n import _``."""
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"
             and not {"solution", "exercise"} & set(c.get("metadata", {}).get("tags", []))]
    english = [(c["id"], s) for c in cells for s in _prose_outside_translation(twins._source(c))]
    assert not english, f"{path.name}: printed without _(): {english[:10]}"
    rebound = [(c["id"], b) for c in cells for b in _binds_underscore(twins._source(c))]
    assert not rebound, f"{path.name}: code binds _ where it hides the translation: {rebound}"
    uses = [i for i, c in enumerate(cells) if re.search(r"(?<![\w.])_\(", twins._source(c))]
    if uses:
        first = uses[0]
        assert any("from collnb.i18n import _" in twins._source(c) for c in cells[:first + 1]), \
            f"{path.name}: _() used before `from collnb.i18n import _`"


def test_the_untranslated_print_detector_finds_what_it_is_for():
    assert _prose_outside_translation('print("each rank issued:", x)')
    assert _prose_outside_translation('print(f"rank {r}: waited {ms} ms for the last rank")')
    assert _prose_outside_translation('collnb.timeline_image(tl, title="serial: compute, then all_reduce")')
    assert _prose_outside_translation('print(_("ok:"), "the reference agrees")')
    for fine in ['print(_("each rank issued:"), x)', 'print(_("rank {r}: waited").format(r=f"{x} too"))',
                 'print("torch:", line)', 'print(f"{src:>4} → {dst:<4}  {what}")', 'print("S(0) → P:", y)',
                 'print(inspect.getsource(parallel.run_stage))', 'print("fr_trace:", v)',
                 'print(f"full_tensor() == x @ w: {ok}")']:
        assert not _prose_outside_translation(fine), fine
    assert _binds_underscore("for _ in range(3):\n    pass") == ["module level: _"]
    assert _binds_underscore("a, _ = 1, 2") == ["module level: _"]
    assert _binds_underscore("def f():\n    for _ in range(3):\n        pass\nx = [1 for _ in y]") == []
    assert _binds_underscore('print(", ".join(_("{i}").format(i=i) for i, _ in pairs))')
    assert _binds_underscore('def f(pairs):\n    for i, _ in pairs:\n        print([_("x") for k in i])')
    assert not _binds_underscore('print(", ".join(_("{i}").format(i=i) for i, n in pairs), [n for n, _ in ps])')


# ------------------------------------------------------------------------------------------------
# What a Chinese notebook shows after Run All: Chinese, but for code, names and torch's own words

#: Output lines a Chinese twin shows in English on purpose: torch's and gloo's own messages (quoted, and
#: explained in the Chinese text around them), torch's log lines, fr_trace's report, and the marker the
#: classroom's autograder reads ("not answered yet", inside the Chinese sentence).
_TORCH_WORDS = re.compile(
    r"\b\w*(Error|Warning|Exception|DidNotJoin|CollectiveMismatch)\b:"   # an exception, quoted with its message
    r"|^\s*torch:|\[rank\d+\]:[IWEF]\d{4}|Timed out waiting|Connection closed by peer|monitoredBarrier"
    r"|^\s*(Collective sequence number|internal record id|group info|collective( state| stack trace)?:|input sizes"
    r"|output sizes|world size:|expected ranks|missing ranks|error msg|total (input|output) numel"
    r"|Not all ranks joining|Input/output mismatch|fr_trace)"
    r"|not answered yet|Detected mismatch|Collectives differ|CollectiveFingerPrint|^\s*File \"|fr_trace[:：]")


#: Four English words in a row (letters only: ``all_reduce``, ``x.grad`` or ``4`` end a run).
_FOUR_WORDS = re.compile(r"(?<![\w.])[A-Za-z][A-Za-z'’-]*(?:[ ,]+[A-Za-z][A-Za-z'’-]*){3,}(?![\w.(])")


def english_output_lines(text: str) -> list[str]:
    """The lines of ``text`` (a cell's output) a Chinese reader reads as English prose: four English words in
    a row outside quotes, torch's own words (:data:`_TORCH_WORDS`) and lines of code (a library piece's code,
    collnb.labs.code) aside."""
    out = []
    for ln in text.splitlines():
        bare = re.sub(r"“.*?”|\"[^\"]*\"|'[^']*'|`[^`]*`", " ", ln)
        code = twins._code_like(ln) or (ln.rstrip().endswith((")", ":", ",")) and re.search(r"\w\(|==| = ", ln))
        if ln.strip() and not _TORCH_WORDS.search(ln) and _FOUR_WORDS.search(bare) and not code:
            out.append(ln)
    return out


def test_the_english_output_detector_finds_what_it_is_for():
    assert english_output_lines("tensor parallel by hand on 4 ranks equals one process: True")
    assert english_output_lines("rank 0: still running, stopped by collnb (waiting in all_reduce, called from x)")
    assert english_output_lines("findfont: Failed to find font weight bold for Noto Sans CJK SC, now using 400.")
    for fine in ["4 个 rank 上手写的张量并行与单进程相同：True（最大差 4.4e-16）",
                 "  rank 0: RuntimeError: Timed out waiting 2000ms for recv operation to complete（由根本原因引起）",
                 "torch: While redistributing from (Shard(dim=0), Shard(dim=0)) to (Replicate(), Shard(dim=0)), 2 ops",
                 "error msg: Culprit rank 0; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[6]]' does",
                 "configure：尚未作答（not answered yet）。请在上方的练习单元格中写出你的答案，然后再次运行这个单元格。",
                 "    sched = cls(stage, n_microbatches=m, loss_fn=lambda out, target: _loss(out, target, rows))",
                 "                loss=float(sum(v.item() for v in losses)) if rank == world_size - 1 else None)",
                 "切分大小错误   collnb 抛出：rank 1 | fr_trace：Input/output mismatch in the collective sequence number: 4",
                 "step 1: all_gather_into_tensor over mesh dim 1; groups"[:0] or "第 1 步：all_gather_into_tensor；进程组 [0, 1]"]:
        assert not english_output_lines(fine), fine


def test_every_chinese_notebook_shows_its_lines_in_chinese():
    """Issue 34: after Run All a Chinese notebook's outputs (what the notebook prints, collnb's tables, checks,
    errors and captions) are Chinese, but for code, names, numbers and torch's own messages; read from the
    book's execution of each twin (make docs builds it; without it the test skips, naming the command)."""
    import nbformat
    pytest.importorskip("jupyter_cache", reason="the book's execution cache needs the docs extra: pip install -e '.[docs]'")
    from jupyter_cache import get_cache

    built = _built_twins()
    cache = get_cache(str(BOOK.parent / ".jupyter_cache"))
    english = []
    for twin in built:
        nb = nbformat.read(twin, as_version=4)
        try:
            _, ex = cache.merge_match_into_notebook(nb)
        except KeyError:
            continue  # not executed by the current book: test_every_chinese_notebook_executed_without_an_error says so
        for cell in ex.cells:
            for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
                text = out.get("text", "") if out.get("output_type") == "stream" else (
                    out.get("data", {}).get("text/plain", "") if "image/png" not in out.get("data", {})
                    and "application/vnd.jupyter.widget-view+json" not in out.get("data", {}) else "")
                english += [f"{twin.stem} {cell.get('id')}: {ln[:160]}" for ln in english_output_lines(text)]
    assert not english, f"{len(english)} English lines, e.g.:\n" + "\n".join(english[:30])
