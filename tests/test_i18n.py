"""The Chinese edition's catalogues and the one language switch (collnb.i18n).

Every message wrapped in ``_()`` / ``N_()`` / ``ngettext()`` in collnb has its Chinese, with the
same ``{placeholders}``, and the compiled ``.mo`` files are the ``.po`` files as committed
(tools/catalogues.py --check); the switch follows set_language, then COLLNB_LANG, then the locale.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import collnb
from collnb import i18n

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import catalogues  # noqa: E402


@pytest.fixture(autouse=True)
def _english_after():
    yield
    i18n.set_language(None)


def test_every_message_has_its_chinese_and_every_catalogue_is_compiled():
    assert catalogues.problems(write=False) == []


def test_the_compiled_catalogues_are_the_committed_po_files():
    mos = sorted((ROOT / "collnb" / "locale").rglob("*.mo"))
    assert mos, "no compiled catalogue: run make i18n"
    for mo in mos:
        assert catalogues.compiled_matches(mo), f"{mo.name} is not compiled from {mo.with_suffix('.po').name}"


def test_a_translation_with_other_placeholders_is_a_problem():
    assert catalogues._names("rank {rank} of {world_size:d}") == {"rank", "world_size"}
    assert catalogues._names("{rank} 号 rank") != catalogues._names("rank {rank} of {world_size}")


def test_set_language_accepts_the_ways_people_write_chinese_and_refuses_others():
    for spelling in ("zh", "zh-CN", "zh_CN.UTF-8", "ZH-cn", "zh-Hans", "中文"):
        assert collnb.set_language(spelling) == "zh"
        assert collnb.get_language() == "zh"
        assert os.environ["COLLNB_LANG"] == "zh"
    assert collnb.set_language("en") == "en"
    with pytest.raises(ValueError, match=r"not 'fr'.*set_language\(\"zh\"\)"):
        collnb.set_language("fr")


def test_the_refusal_is_in_chinese_when_chinese_is_spoken():
    collnb.set_language("zh")
    with pytest.raises(ValueError) as raised:
        collnb.set_language("klingon")
    assert "collnb 只会说" in str(raised.value) and "'klingon'" in str(raised.value)


@pytest.mark.parametrize("env, expected", [
    ({"COLLNB_LANG": "zh"}, "zh"),
    ({"COLLNB_LANG": "en", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"LANG": "zh_CN.UTF-8"}, "zh"),
    ({"LANGUAGE": "zh_CN:en", "LANG": "en_US.UTF-8"}, "zh"),
    ({"LC_ALL": "C.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"LANG": "de_DE.UTF-8"}, "en"),
    ({}, "en"),
])
def test_the_default_comes_from_collnb_lang_then_the_locale(env, expected):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("COLLNB_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")}
    out = subprocess.run([sys.executable, "-c", "import collnb; print(collnb.get_language())"],
                         env={**clean, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


def test_a_variable_changed_after_a_first_read_is_read_again(monkeypatch):
    """get_language reads the environment again only when one of its five variables changed (a cache,
    for the ~400 translated lines of a slider move): each change is seen at the next call."""
    collnb.set_language(None)
    for name in ("COLLNB_LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert collnb.get_language() == "en" and collnb.get_language() == "en"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert collnb.get_language() == "zh"
    monkeypatch.setenv("LC_MESSAGES", "en_GB.UTF-8")
    assert collnb.get_language() == "en"
    monkeypatch.setenv("COLLNB_LANG", "zh")
    assert collnb.get_language() == "zh"
    monkeypatch.delenv("COLLNB_LANG")
    assert collnb.get_language() == "en"


def test_set_language_none_goes_back_to_the_default(monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.delenv("LANGUAGE", raising=False)
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    collnb.set_language("en")
    assert collnb.set_language(None) == "zh"


def test_a_rounds_description_is_written_in_the_language_spoken_when_its_schedule_is_built():
    from collnb.algorithms import cached_schedule
    english = cached_schedule("all_reduce", "ring", 4).rounds[0].detail
    assert english == ("step 1/3: rank r sends chunk (r-1) mod 4 to rank r+1, which combines it into its own copy")
    collnb.set_language("zh")
    chinese = cached_schedule("all_reduce", "ring", 4).rounds[0]
    assert chinese.detail == "第 1/3 步：rank r 把第 (r-1) mod 4 块发给 rank r+1，后者把它合并进自己的副本"
    assert chinese.label == "reduce-scatter"  # the phase keeps its API-like name
    collnb.set_language("en")
    assert cached_schedule("all_reduce", "ring", 4).rounds[0].detail == english  # not the cached Chinese


def test_a_trace_recorded_in_english_is_replayed_in_the_language_spoken_then():
    """A trace keeps its round details as sentences that remember their message (collnb.i18n.later):
    recorded in English, drawn after set_language("zh"), the frame's detail is Chinese, placeholders
    that are sentences themselves included (the fold round's "what" and "verb")."""
    import copy
    import pickle
    from collnb.algorithms import run_algorithm
    from collnb.i18n import Later, again, later, N_
    from collnb.views.frames import FrameRenderer

    collnb.set_language("en")
    trace = run_algorithm("all_reduce", "ring", 4)
    folded = run_algorithm("all_reduce", "recursive_doubling", 3)  # 3 is not a power of two: a fold round
    ren, fold = FrameRenderer(trace), FrameRenderer(folded)
    english = ren.data(1)["detail"]
    assert english == "step 1/3: rank r sends chunk (r-1) mod 4 to rank r+1, which combines it into its own copy"
    assert fold.data(1)["detail"].startswith("3 is not a power of two: ranks 0..0 (even) send their whole buffer "
                                             "to rank+1, which combines it with its own")
    try:
        collnb.set_language("zh")
        assert ren.data(1)["detail"] == "第 1/3 步：rank r 把第 (r-1) mod 4 块发给 rank r+1，后者把它合并进自己的副本"
        zh_fold = fold.data(1)["detail"]
        assert "3 不是 2 的幂" in zh_fold and "their whole buffer" not in zh_fold and "combines" not in zh_fold, zh_fold
        assert zh_fold == later("{n} is not a power of two: ranks 0..{last} (even) send {what} to rank+1, which "
                                "{verb}; they sit out until the unfold round, leaving {p} active ranks",
                                n=3, last=0, what=later(N_("their whole buffer")), verb=later("combines it with its own"),
                                p=2)
        assert trace.to_dict()["rounds"][0]["detail"] == english  # a saved trace keeps the words it was made in
        assert type(trace.to_dict()["rounds"][0]["detail"]) is str
        # the whole frame follows, not only the detail: the figure (axes, legend, note, fonts) is built again
        ren.png(1)
        assert ren.ax_time.get_xlabel() == "轮" and ren.ax_time.get_title() == "累计时间"
        # copied or pickled while Chinese is spoken, a detail keeps its words, and a trace its equality
        detail = trace.rounds[0].detail
        for twin in (copy.copy(detail), copy.deepcopy(detail), pickle.loads(pickle.dumps(detail))):
            assert isinstance(twin, Later) and twin == detail == english and hash(twin) == hash(detail)
            assert (twin.msgid, twin.fields) == (detail.msgid, detail.fields) and again(twin) == again(detail)
        assert copy.deepcopy(trace).equals(trace) and pickle.loads(pickle.dumps(trace)).equals(trace)
        assert copy.deepcopy(trace).to_dict()["rounds"][0]["detail"] == english
    finally:
        collnb.set_language("en")
    assert again("plain words") == "plain words"


def _raises_on_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 cannot continue")
    return rank


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_rank_errors_summary_and_guess_are_read_without_parsing_its_words(language, tmp_path):
    """Notebook code reads err.summary / err.guess / r.change: the same code runs in both editions
    (the Chinese twins' code cells are the English ones), so it must not parse translated text."""
    collnb.set_language(language)
    with pytest.raises(collnb.RankError) as raised:
        collnb.launch(_raises_on_rank_1, 2)
    err = raised.value
    assert err.summary == "rank 1: ValueError: rank 1 cannot continue"
    assert str(err).startswith(err.summary) and err.guess is None
    assert "rank 1 cannot continue" not in str(err)[len(err.summary):].split("\n\n", 1)[0]
    with pytest.raises(collnb.RankError) as raised:
        from collnb.labs import hangs  # 18_hangs's plain run: every rank times out, the blame is a guess
        collnb.launch(hangs.faulty_step, 4, ("skipped_collective", 1, str(tmp_path), 3.5), collective_timeout=2,
                      debug=False)
    err = raised.value
    assert err.guess is not None and err.guess in err.summary and err.guess in str(err)
    assert err.guess.startswith("collnb's guess" if language == "en" else "collnb 仅凭错误信息的推测")
    assert err.rank_traceback and err.rank_traceback not in err.summary


def test_a_redistribute_results_change_is_written_the_same_in_every_language():
    collnb.set_language("zh")
    r = collnb.redistribute((4, 6), mesh=(2,), src="S(0)", dst="R")
    assert r.change == "S(0) → R"
    assert "S(0) → R" in r.title and r.title != collnb.set_language("en") and r.change == "S(0) → R"


def test_set_language_none_puts_back_the_collnb_lang_this_process_started_with():
    code = ("import os, collnb; collnb.set_language('en'); print(collnb.set_language(None), os.environ.get('COLLNB_LANG'))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "COLLNB_LANG": "zh"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["zh", "zh"]


def test_an_unknown_collnb_lang_warns_and_speaks_english():
    out = subprocess.run([sys.executable, "-W", "always", "-c", "import collnb; print(collnb.get_language())"],
                         env={**os.environ, "COLLNB_LANG": "klingon"}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "en" and "COLLNB_LANG='klingon' is not a language collnb speaks" in out.stderr


def test_one_english_message_has_one_chinese_translation_in_every_catalogue():
    """Catalogues are chained: a msgid translated two ways would read differently depending on load order."""
    from babel.messages.pofile import read_po
    seen: dict = {}
    clash = []
    for po in sorted((ROOT / "collnb" / "locale").rglob("*.po")):
        with open(po, "rb") as f:
            for m in read_po(f):
                if m.id and m.id in seen and seen[m.id][1] != m.string:
                    clash.append(f"{m.id!r}: {seen[m.id][0]} {seen[m.id][1]!r} vs {po.name} {m.string!r}")
                seen.setdefault(m.id, (po.name, m.string))
    assert clash == []


def _spoken_on_the_rank(rank, world_size):
    from collnb.i18n import _, get_language
    return get_language(), _("elements per chunk"), os.environ.get("COLLNB_LANG")


def test_warm_ranks_speak_the_language_the_kernel_speaks_now():
    """Ranks forked while collnb spoke English, kept warm, then collnb.set_language("zh"): text made
    on a rank is Chinese from the next call on (it stayed English), and English again after."""
    i18n.set_language("en")
    assert collnb.launch(_spoken_on_the_rank, 2) == [("en", "elements per chunk", "en")] * 2
    pids = collnb.ranks.warm_pool().pids()[:2]
    i18n.set_language("zh")
    zh = i18n._("elements per chunk")
    assert zh != "elements per chunk"
    assert collnb.launch(_spoken_on_the_rank, 2) == [("zh", zh, "zh")] * 2
    i18n.set_language("en")
    assert collnb.launch(_spoken_on_the_rank, 2) == [("en", "elements per chunk", "en")] * 2
    assert collnb.ranks.warm_pool().pids()[:2] == pids  # the same warm ranks all along
