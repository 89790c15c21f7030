"""The explorer widget, headless: controls -> runs on warm ranks -> heatmap data and messages.

Expected values are computed here from the teaching-input rule (rank r, chunk c holds 10*r + c)
with plain Python / torch casts, never read back from collnb.
"""
import base64
import io
import os
import re
import signal
import threading
import time

import numpy as np
import pytest
import torch

import collnb
from collnb.ranks import launcher
import collnb.collectives as P
from collnb.views.controls import ExplorerParams
from collnb.views.explorer import explore
from collnb.views.presets import INPUT_PRESETS
from conftest import live_children, pool_dirs

def attr(ex, name):
    """What the latest picture drawn shows, read from the explorer's state (the run drawn)."""
    res = ex.last_result
    return str({"world-size": res.world_size, "root": res.root,
                "dtype": P.dtype_name(res.dtype) if res.dtype is not None else ""}[name])


def rows(ex, name="after"):
    """The values drawn, per rank a list of chunk texts (``Explorer.drawn``)."""
    return ex.drawn[name]


def idle(ex):
    """The status line says the explorer is done (not the busy indicator)."""
    return not ex.busy and not ex.message.startswith("⏳")


def esc_in(text, html_text):
    """``text`` appears in ``html_text`` (HTML-escaped there)."""
    import html
    return html.escape(text, quote=True) in html_text


def wrap_int8(v):
    return ((v + 128) % 256) - 128


def fmt(v):
    return str(int(v)) if float(v).is_integer() else str(v)


def sum_table(ws, cast=lambda v: v):
    """all_reduce SUM of the teaching inputs: every rank holds sum_r (10r + c) in chunk c."""
    return [[fmt(cast(sum(10 * r + c for r in range(ws)))) for c in range(ws)] for _ in range(ws)]


def explorer_threads():
    return [t for t in threading.enumerate() if t.name == "collnb-explorer"]


@pytest.fixture(scope="module", autouse=True)
def _clean_module():
    yield
    collnb.shutdown()
    deadline = time.monotonic() + 10
    while explorer_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not explorer_threads(), "explorer worker threads left running"
    assert not live_children(), f"processes left: {live_children()}"
    assert not pool_dirs(), f"pool directories left: {pool_dirs()}"


def test_controls_values_and_dtype_lesson():
    ex = explore("all_reduce", world_size=4)
    try:
        ex.wait()  # the backend probe behind the first picture, if nothing was saved (see the next tests)
        c = ex.controls
        sup = P.backend_support("gloo")
        # dropdowns offer what detection found, and ops valid for the dtype only
        assert list(c["dtype"].options) == list(sup.dtypes("all_reduce"))
        assert list(c["op"].options) == list(sup.ops("all_reduce", "float32"))
        assert c["root"].layout.display == "none" and c["op"].layout.display is None
        # backends: only those that can run are offered; the others' reason is shown
        usable = [b for b in launcher.BACKENDS if launcher.backend_info(b)["available"]]
        assert list(c["backend"].options) == usable
        for b in launcher.BACKENDS:
            if b not in usable:
                assert launcher.backend_info(b)["reason"][:40] in ex.backend_note.value.replace("&#x27;", "'")

        assert ex.state == ExplorerParams("all_reduce", 4)
        assert attr(ex, "world-size") == "4" and attr(ex, "dtype") == "float32"
        assert rows(ex) == sum_table(4)
        assert rows(ex, "before") == [[str(10 * r + c) for c in range(4)] for r in range(4)]
        assert "✓" in ex.message and ex.error is None and ex.in_flight == 0
        # the picture is an ipywidgets.Image of the same PNG a RunResult draws for notebook display
        import ipywidgets
        assert isinstance(ex.figure, ipywidgets.Image) and "collnb-heatmap" in ex.figure._dom_classes
        assert ex.figure.value == ex.last_png == ex.last_result.png(dpi=ex.dpi)
        # its description reaches screen readers: the text beside it, visually hidden, not display:none
        assert "After: rank 0: [60, 64, 68, 72]" in ex.alt and ex.alt.startswith(ex.last_result.title())
        assert esc_in(ex.alt, ex.figure_text.value)
        assert "clip:rect(0,0,0,0)" in ex.figure_text.value and "display:none" not in ex.figure_text.value

        # world size 8, int8: SUM wraps; the float64 reference shows the exact sums, highlighted
        c["world_size"].value = 8
        ex.wait()
        assert rows(ex) == sum_table(8)
        c["dtype"].value = "int8"
        ex.wait()
        assert "avg" not in c["op"].options and "avg" in sup.ops("all_reduce", "float32")
        assert attr(ex, "world-size") == "8" and attr(ex, "dtype") == "int8"
        assert rows(ex) == sum_table(8, wrap_int8)
        assert rows(ex, "exact") == sum_table(8)  # every chunk differs from float64 here
        ref = ex.reference.value
        assert ref.count("class='differs'") == 64
        assert "dtype effect: int8 gives 24 where float64 gives 280" in ex.message

        # presets: the three dtype lessons; a preset keeps the learner's world size (8 here)
        ex.controls["inputs"].value = "int8_wrap"
        ex.wait()
        assert ex.params()["world_size"] == 8 and ex.params()["dtype"] == "int8"
        assert rows(ex) == [[fmt(wrap_int8(800))] * 8] * 8 == [["32"] * 8] * 8
        assert "world size 8 kept" in ex.note.value
        ex.controls["world_size"].value = 2
        ex.wait()
        assert ex.params()["inputs"] == "int8_wrap" and ex.params()["dtype"] == "int8"
        assert rows(ex) == [[fmt(wrap_int8(200))] * 2] * 2 == [["-56"] * 2] * 2
        assert rows(ex, "exact") == [["200"] * 2] * 2
        ex.controls["inputs"].value = "fp16_inf"
        ex.wait()
        assert ex.params()["dtype"] == "float16"
        want = torch.tensor([60000.0], dtype=torch.float16) * 2
        assert rows(ex) == [[str(want.item())] * 2] * 2 == [["inf"] * 2] * 2
        assert rows(ex, "exact") == [["120000"] * 2] * 2
        ex.controls["inputs"].value = "bf16_round"
        ex.wait()
        got = (torch.tensor([256.0], dtype=torch.bfloat16) + torch.tensor([1.0], dtype=torch.bfloat16)).item()
        assert rows(ex) == [[fmt(got)] * 2] * 2 == [["256"] * 2] * 2
        assert "bfloat16 gives 256 where float64 gives 257" in ex.message
        # float64 has no effect to show
        ex.controls["dtype"].value = "float64"
        ex.wait()
        assert rows(ex) == [["257"] * 2] * 2
        assert "dtype effect" not in ex.message and "class='differs'" not in ex.reference.value
        assert rows(ex, "exact") == [["", ""]] * 2 and "float64 gave the exact result everywhere" in ex.reference.value
    finally:
        ex.close()


def test_rooted_and_object_primitives():
    ex = explore("reduce", world_size=3, root=2)
    try:
        c = ex.controls
        assert c["root"].layout.display is None and c["root"].description == "dst"
        assert c["root"].max == 2
        assert attr(ex, "root") == "2"
        assert rows(ex)[2] == [str(sum(10 * r + k for r in range(3))) for k in range(3)]
        c["world_size"].value = 2  # root 2 no longer exists: clamped to the last rank
        ex.wait()
        assert c["root"].max == 1 and c["root"].value == 1 and attr(ex, "root") == "1"
        assert rows(ex)[1] == ["10", "12"]
        assert ex.last_result.defined == [False, True]
    finally:
        ex.close()
    ex = explore("broadcast", world_size=2, root=5)  # not a rank: the vocabulary's words, then a fix
    try:
        import html
        assert ex.controls["root"].value == 1 and attr(ex, "root") == "1"
        assert ("⚠ src must be a rank, an int from 0 to 1 (world size 2); got 5; showing src=1"
                in html.unescape(ex.note.value))
    finally:
        ex.close()
    ex = explore(["all_gather_object", "scatter_object_list"], world_size=3)
    try:
        assert ex.controls["dtype"].layout.display == "none"
        assert ex.controls["primitive"].options == ("all_gather_object", "scatter_object_list")
        assert rows(ex) == [[f"r{r}c0" for r in range(3)]] * 3
        assert ex.reference.value == ""
        ex.controls["primitive"].value = "scatter_object_list"
        ex.wait()
        assert ex.controls["root"].layout.display is None
        assert rows(ex) == [["r0c0"], ["r0c1"], ["r0c2"]]
    finally:
        ex.close()
    # closing leaves no widget models behind in the kernel
    from ipywidgets.widgets.widget import _instances
    before = set(_instances)
    explore("broadcast", world_size=2).close()
    assert set(_instances) <= before


def test_rapid_changes_coalesce_to_latest():
    ex = explore("all_reduce", world_size=4)
    try:
        c = ex.controls
        started, reqs = ex.runs_started, ex.requests
        max_in_flight, max_threads = 0, 0
        dtypes = ["float32", "int8", "int32", "float64"]
        changes = 0
        for i in range(200):
            changes += c["world_size"].value != 2 + i % 7
            c["world_size"].value = 2 + i % 7
            if i % 10 == 0:
                changes += c["dtype"].value != dtypes[(i // 10) % len(dtypes)]
                c["dtype"].value = dtypes[(i // 10) % len(dtypes)]
            busy_shown = ex.message  # the busy indicator is set with each change, before its run
            max_in_flight = max(max_in_flight, ex.in_flight)
            max_threads = max(max_threads, len(explorer_threads()))
        final_ws, final_dtype = c["world_size"].value, c["dtype"].value
        assert busy_shown.startswith("⏳ running all_reduce")
        # right after the burst: one run on the ranks, at most the latest values waiting
        assert ex.in_flight == 1 or ex.pending
        assert ex.in_flight <= 1 and max_in_flight <= 1 and max_threads == 1
        assert ex.requests - reqs == changes >= 200
        ex.wait()
        n_runs = ex.runs_started - started
        assert 1 <= n_runs <= 20, n_runs  # coalesced: nowhere near one run per change
        assert attr(ex, "world-size") == str(final_ws) and attr(ex, "dtype") == final_dtype
        assert ex.state.world_size == final_ws and ex.state.dtype == final_dtype
        cast = {"int8": wrap_int8}.get(final_dtype, lambda v: v)
        assert rows(ex) == sum_table(final_ws, cast)
        assert ex.last_params["world_size"] == final_ws
        assert ex.in_flight == 0 and not ex.pending and idle(ex)
        deadline = time.monotonic() + 5
        while explorer_threads() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not explorer_threads()  # the worker ends when idle
    finally:
        ex.close()


def test_errors_shown_and_explorer_stays_usable():
    # an invalid initial choice: noted in the panel with the valid ones, a valid one shown
    ex = explore("all_reduce", world_size=2, dtype="int16", op="avg")
    try:
        note = ex.note.value
        valid = P.backend_support("gloo").dtypes("all_reduce")
        assert "int16" not in valid
        assert "cannot run all_reduce on int16" in note and ", ".join(valid) in note
        assert ex.params()["dtype"] == "float32" and ex.params()["op"] == "avg"
        ex.wait()
        assert rows(ex) == [["5", "6"]] * 2  # (0 + 10) / 2, (1 + 11) / 2
        # moving to an integer dtype drops AVG from the ops offered, and says why
        ex.controls["dtype"].value = "int32"
        ex.wait()
        assert "avg" not in ex.controls["op"].options and ex.params()["op"] == "sum"
        assert "op AVG is not valid for int32" in ex.note.value and "floating-point dtype" in ex.note.value
        assert rows(ex) == [["10", "12"]] * 2
        with pytest.raises(ValueError, match="op='avg' is not offered here; choose one of sum"):
            ex.set(dtype="int8", op="avg")
        ex.set(dtype="int8", op="max")
        ex.wait()
        assert rows(ex) == [["10", "11"]] * 2

        # a rank dies while idle (OOM killer, a stray kill): the explorer recovers by the next
        # change at the latest -- either the launcher replaces the rank at once, or the run shows
        # the failure and the change after it starts fresh ranks
        victim = collnb.ranks.warm_pool().pids()[1]
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.2)
        ex.controls["world_size"].value = 3
        ex.wait()
        if ex.error is not None:
            assert ex.message.startswith("✗") and idle(ex)
            assert rows(ex) == [["10", "11"]] * 2  # the last good figure stays
            assert collnb.ranks.warm_pool() is None or collnb.ranks.warm_pool().broken  # never reused
            ex.controls["world_size"].value = 4
            ex.wait()
        ws = ex.params()["world_size"]
        assert ex.error is None and "✓" in ex.message
        assert rows(ex) == [[str(max(10 * r + c for r in range(ws))) for c in range(ws)]] * ws
        assert victim not in collnb.ranks.warm_pool().pids()
    finally:
        ex.close()


def test_failing_rank_shown_then_fresh_ranks():
    # rank 1 stops (SIGSTOP) and never reaches the collective: its peers time out after the
    # collective_timeout, the launcher stops every rank and closes the pool; the panel says
    # which rank failed; the next change runs on fresh ranks.
    ex = explore("all_reduce", world_size=3, collective_timeout=1.0)
    try:
        pool = collnb.ranks.warm_pool()
        old = pool.pids()
        os.kill(old[1], signal.SIGSTOP)
        ex.controls["dtype"].value = "int32"
        ex.wait(timeout=30)
        assert isinstance(ex.error, collnb.RankError)
        assert ex.error.rank == 1
        assert ex.message.startswith("✗ a rank failed") and "rank 1" in ex.message
        assert pool.broken and not any(psutil_alive(p) for p in old)
        ex.controls["dtype"].value = "int64"
        ex.wait(timeout=30)
        assert ex.error is None and attr(ex, "dtype") == "int64"
        assert rows(ex) == sum_table(3)
        assert not set(collnb.ranks.warm_pool().pids()) & set(old)
    finally:
        ex.close()


def psutil_alive(pid):
    import psutil
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_run_result_display_protocol_and_bad_arguments():
    from IPython.core.formatters import DisplayFormatter
    res = collnb.collectives.run("broadcast", 2, root=1)
    data, _ = DisplayFormatter().format(res)
    assert data["image/png"] == res.png()
    from PIL import Image
    img = Image.open(io.BytesIO(data["image/png"]))
    assert img.format == "PNG" and img.width > 300
    ex = explore("broadcast", world_size=2, wait=False)
    try:
        bundle = ex._repr_mimebundle_()
        assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.widget.model_id
        ex.wait()
    finally:
        ex.close()
    for kwargs, exc, msg in [
            (dict(primitive="allreduce"), ValueError, "unknown primitive 'allreduce'; choose one of: broadcast"),
            (dict(primitive=3), TypeError, "primitive must be a name (str), one of: broadcast"),
            (dict(world_size=17), ValueError, "world_size must be an int from 1 to 16; got 17"),
            (dict(world_size=2.5), TypeError, "world_size must be an int from 1 to 16; got 2.5"),
            (dict(inputs="huge"), ValueError, "unknown inputs preset 'huge'; choose one of: teaching"),
            (dict(chunk_size=3), ValueError, "chunk_size must be one of 1, 2, 4"),
            (dict(backend="mpi"), ValueError, "unknown backend 'mpi'; choose one of: gloo, nccl")]:
        with pytest.raises(exc, match=re.escape(msg)):
            explore(**kwargs)
    assert set(INPUT_PRESETS) == {"teaching", "int8_wrap", "fp16_inf", "bf16_round", "rank_ids", "special_floats"}
    with pytest.raises(ValueError, match=re.escape("inputs preset 'int8_wrap' shows nothing for broadcast; "
                                                   "choose one of: teaching, rank_ids, special_floats")):
        explore("broadcast", inputs="int8_wrap")



def test_set_values_win_over_the_presets_choices_and_take_aliases():
    ex = explore("all_reduce", world_size=4)
    try:
        ex.set(world_size=8, inputs="int8_wrap")
        ex.wait()
        p = ex.params()
        assert (p["world_size"], p["dtype"], p["inputs"]) == (8, "int8", "int8_wrap")
        assert rows(ex)[0][0] == fmt(wrap_int8(100 * 8))  # 800 wraps to 32
        ex.set(dtype="fp16")
        ex.wait()
        assert ex.params()["dtype"] == "float16"
        ex.set(op="MAX")
        ex.wait()
        assert ex.params()["op"] == "max"
    finally:
        ex.close()


def test_presets_fit_the_primitive_and_keep_the_world_size():
    """Issue 9 §2 / issue 10 item 2: no dtype-overflow presets where the primitive does no
    arithmetic; a preset changes the world size only when it must, and says so; the teaching
    label follows the rule the values follow (100·rank above 10 ranks)."""
    from collnb.views.presets import presets_for
    moving = ["broadcast", "scatter", "gather", "all_gather", "all_to_all", "send_recv"]
    for p in moving:
        assert presets_for(p) == ("teaching", "rank_ids", "special_floats"), p
    for p in ["all_reduce", "reduce", "reduce_scatter"]:
        assert {"int8_wrap", "fp16_inf", "bf16_round"} <= set(presets_for(p)), p
    assert presets_for("barrier") == ("teaching",) and presets_for("gather_object") == ("teaching",)
    ex = explore(["broadcast", "all_reduce"], world_size=4)
    try:
        c = ex.controls
        assert [k for _, k in c["inputs"].options] == ["teaching", "rank_ids", "special_floats"]
        assert "only moves data" in ex.about.value and "int8" not in ex.about.value
        assert ex.reference.value == ""  # no float64 table where nothing is computed
        c["dtype"].value = "int8"
        ex.wait()
        c["inputs"].value = "special_floats"  # needs a floating dtype: int8 -> float32, said so
        ex.wait()
        assert ex.params()["dtype"] == "float32" and ex.params()["world_size"] == 4
        assert "dtype int8 → float32" in ex.note.value and "world size 4 kept" in ex.note.value
        assert rows(ex)[3] == ["nan", "inf", "-inf", repr(float(torch.tensor(1 / 3)))]
        c["inputs"].value = "rank_ids"
        ex.wait()
        assert rows(ex) == [["0"] * 4] * 4  # broadcast from src 0: everyone holds rank 0's data
        c["primitive"].value = "all_reduce"
        ex.wait()
        assert "combines" in ex.about.value and "int8" in ex.about.value
        assert [k for _, k in c["inputs"].options] == ["teaching", "int8_wrap", "fp16_inf", "bf16_round", "rank_ids"]
        assert rows(ex) == [[str(0 + 1 + 2 + 3)] * 4] * 4
        c["world_size"].value = 1
        ex.wait()
        c["inputs"].value = "bf16_round"  # needs two ranks: 1 -> 2, and the panel says why
        ex.wait()
        assert ex.params()["world_size"] == 2 and ex.params()["dtype"] == "bfloat16"
        assert "world size 1 → 2 (the effect needs at least 2 ranks)" in ex.note.value
        assert c["inputs"].options[0][0].startswith("10·rank + chunk")
        ex.set(inputs="teaching", world_size=12, dtype="float32")  # (bfloat16 would round 1103 to 1104)
        ex.wait()
        assert c["inputs"].options[0][0].startswith("100·rank + chunk")
        assert rows(ex, "before")[11][3] == "1103"
    finally:
        ex.close()


def test_static_picture_follows_the_last_state():
    """Issue 10 item 6: the static stand-in (html + png + one line) shows the current state."""
    ex = explore("all_reduce", world_size=2)
    try:
        b = ex.static_bundle()
        assert set(b) == {"text/html", "image/png", "text/plain"}
        assert b["text/plain"] == "Static picture of the explorer's last state: run this cell to bring back its controls."
        assert "collnb-static" in b["text/html"] and esc_in(ex.alt, b["text/html"]) and "rank 1: [" in ex.alt
        assert ".jp-OutputArea:has(.collnb-live)" in b["text/html"] and "collnb-live-hint" in b["text/html"]
        png = base64.b64decode(b["image/png"])
        from PIL import Image
        im = Image.open(io.BytesIO(png))
        heat = Image.open(io.BytesIO(ex.last_png))
        # the line painted above, wrapped to the picture's width (issue 19: it was cut off at "its cont")
        strip = im.size[1] - heat.size[1]
        assert im.size[0] == heat.size[0] and strip >= 30 and (strip - 30) % 20 == 0
        ink = np.asarray(im.convert("RGB"))[:strip - 2].astype(int)
        cols = np.flatnonzero((np.abs(ink - [0xFF, 0xF4, 0xD6]).max(axis=2) > 60).any(axis=0))
        assert cols.size and cols[-1] < im.size[0] - 4, "the painted line runs off the picture"
        ex.controls["world_size"].value = 3
        ex.wait()
        b = ex.static_bundle()
        assert "rank 2: [" in ex.alt and esc_in(ex.alt, b["text/html"])
        assert base64.b64decode(b["image/png"]) == ex.static_png  # the picture of world size 3, with its line
        assert "collnb-live" in ex.widget._dom_classes
    finally:
        ex.close()


def test_a_chinese_explorer_speaks_chinese_and_english_stays_as_it_was():
    """Issue 24: under collnb.set_language("zh") a new explorer's labels, notes and status line are
    the Chinese of collnb-explorer.po (API names, rank, dtype names stay English); back in English
    the same words as before, byte for byte."""
    from collnb import i18n
    i18n.set_language("zh")
    try:
        ex = explore("reduce", world_size=2, dtype="int16", root=1)
        try:
            c = ex.controls
            assert (c["world_size"].description, c["dtype"].description, c["op"].description) == \
                ("world size", "dtype", "规约运算")
            assert c["primitive"].description == "通信原语" and c["chunk_size"].description == "每块元素数"
            assert c["inputs"].options[0][0] == "10·rank + 块号（教学值）"
            assert c["inputs"].options[1][0] == "每个 rank 都是 100：int8 求和超过 127 后回绕（2 个 rank：200 → -56）"
            assert "无法对 int16 张量运行 reduce" in ex.note.value and "改为显示 float32" in ex.note.value
            assert ex.message.startswith("✓ 与参考值一致（参考值不用 torch.distributed 计算） · ")
            assert "运行 " in ex.message and " ms，绘制 " in ex.message
            assert "之后：rank 0：[" in ex.alt and "float64 参考值" in ex.reference.value
            assert "会合并各 rank 的值（SUM）" in ex.about.value
            ex.controls["world_size"].value = 3
            ex.wait()
            assert ex.message.startswith("✓ 与参考值一致")
        finally:
            ex.close()
    finally:
        i18n.set_language("en")
    ex = explore("reduce", world_size=2, dtype="int16", root=1)
    try:
        assert ex.controls["op"].description == "op" and ex.controls["inputs"].options[0][0] == \
            "10·rank + chunk (teaching values)"
        assert "cannot run reduce on int16 tensors" in ex.note.value
        assert ex.message.startswith("✓ matches the reference (computed without torch.distributed) · ")
        assert "After: rank 0: [" in ex.alt
    finally:
        ex.close()


def test_first_picture_comes_before_the_backend_probe(monkeypatch):
    """Issue 20: with nothing known about the backend (no saved probe: the first explorer after an
    install), the first picture is drawn before the probe, the controls offer only float32 SUM (which
    that picture ran) until it answers, then everything the probe found; set() waits for it."""
    from collnb.collectives import support
    monkeypatch.setenv("COLLNB_SUPPORT_CACHE", "0")  # the saved probe is not used
    monkeypatch.setattr(support, "_support_cache", {})
    assert P.known_support("gloo") is None
    ex = explore("all_reduce", world_size=3)
    try:
        assert ex.first_before_probe and ex.first_picture_s > 0
        assert rows(ex) == sum_table(3) and ex.last_params["dtype"] == "float32"
        ex.wait()  # the probe behind the first picture
        sup = P.known_support("gloo")
        assert sup is not None and sup.source == "probe"
        assert list(ex.controls["dtype"].options) == list(sup.dtypes("all_reduce")) != ["float32"]
        assert list(ex.controls["op"].options) == list(sup.ops("all_reduce", "float32"))
        assert "fill in once gloo has been tried" not in ex.note.value
        assert ex.runs_started == 1  # float32 SUM stays valid: not drawn again
        ex.set(dtype="int8")
        ex.wait()
        assert rows(ex) == sum_table(3, wrap_int8)
    finally:
        ex.close()
    # a second explorer finds the answer kept in memory: no provisional first picture
    ex = explore("broadcast", world_size=2)
    try:
        assert not ex.first_before_probe
    finally:
        ex.close()
