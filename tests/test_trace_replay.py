"""Traces (collnb.trace), the replay (collnb.replay) and the ``replay`` CLI.

The checks read data: buffers after every round against the transfer lists and the provenance
sets, bytes per round, frames' pixels at known cells, GIF frame counts, the widgets' state after
moving their controls programmatically.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageSequence

import collnb.algorithms as A
from collnb.views.palette import EMPTY_COLOR, RANK_COLORS
from collnb.algorithms.trace import Trace

REPO = Path(__file__).resolve().parent.parent
ALL_PAIRS = [(p, a) for p, algs in A.ALGORITHMS.items() for a in algs]
ROOTED = ("broadcast", "reduce", "scatter", "gather")


def _rgb255(c):
    return np.round(np.asarray(c) * 255).astype(int)


@pytest.fixture(scope="module")
def bit_traces():
    """Every algorithm at world sizes 3, 6 and 16 on int64 SUM with rank r contributing 1 << r:
    a sum of distinct powers of two is the set of contributors, written as a number."""
    out = {}
    for ws in (3, 6, 16):
        cfgs = [dict(primitive=p, algorithm=a, dtype="int64", **({"root": ws - 1} if p in ROOTED else {}),
                     inputs=lambda r, c: 1 << r) for p, a in ALL_PAIRS]
        for cfg, tr in zip(cfgs, A.run_algorithms(cfgs, ws)):
            out[(cfg["primitive"], cfg["algorithm"], ws)] = tr
    return out


def test_every_rounds_buffers_equal_their_provenance(bit_traces):
    for (p, a, ws), tr in bit_traces.items():
        assert tr.has_snapshots and tr.buffers.shape == (tr.n_rounds + 1, ws, tr.count)
        assert tr.matches_builtin, (p, a, ws)
        for k in range(tr.n_rounds + 1):
            vals = tr.chunk_values(k)
            prov = tr.provenance[k]
            held = prov != 0
            assert np.array_equal(vals[held], prov[held]), (p, a, ws, k)
            assert not vals[~held].any(), f"{p}/{a} ws {ws} round {k}: an empty slot holds data"


def test_buffers_follow_the_transfer_lists(bit_traces):
    """Replaying each round's TransferRecords on the numbers of the round before gives the next
    recorded buffers: the transfer lists say exactly what moved."""
    for (p, a, ws), tr in bit_traces.items():
        cur = tr.chunk_values(0).astype(np.int64)
        inputs = tr.inputs[:, tr.chunk_bounds[:-1]]
        for k in range(1, tr.n_rounds + 1):
            new = cur.copy()
            for t in tr.transfers(k):
                src = inputs if p == "all_to_all" else cur
                for sc, dc in zip(t.chunks, t.dst_chunks):
                    new[t.dst, dc] = new[t.dst, dc] + src[t.src, sc] if t.reduce else src[t.src, sc]
                assert t.nbytes == len(t.chunks) * 8
            assert np.array_equal(new, tr.chunk_values(k)), (p, a, ws, k)
            cur = new


def test_provenance_grows_from_own_rank_to_all_ranks_in_reduce_scatter(bit_traces):
    tr = bit_traces[("reduce_scatter", "ring", 6)]
    n = 6
    for r in range(n):
        sizes = [len(tr.provenance_sets(k)[r][r]) for k in range(n)]
        assert sizes[0] == 1 and tr.provenance_sets(0)[r][r] == {r}
        assert sizes == sorted(sizes) and tr.provenance_sets(n - 1)[r][r] == frozenset(range(n))
    assert tr.contributors(n - 1).diagonal().tolist() == [n] * n


def test_rounds_of_real_traces(bit_traces):
    def rounds(p, a, ws):
        return bit_traces[(p, a, ws)].n_rounds
    assert rounds("all_reduce", "ring", 16) == 30
    assert rounds("all_reduce", "recursive_doubling", 16) == 4
    assert rounds("all_reduce", "recursive_doubling", 6) == 2 + 2       # lg 4 + fold + unfold
    assert rounds("all_reduce", "rabenseifner", 6) == 2 * 2 + 2
    assert rounds("all_gather", "bruck", 6) == 3
    assert rounds("broadcast", "chain", 6) == 6 + 6 - 2
    labels = [bit_traces[("all_reduce", "recursive_doubling", 6)].label(k) for k in range(5)]
    assert labels == ["start", "fold", "exchange", "exchange", "unfold"]


def test_ring_all_reduce_transfers_and_bytes():
    ws = 4
    tr = A.run_algorithm("all_reduce", "ring", ws, chunk_size=2)
    assert tr.n_rounds == 2 * (ws - 1) and tr.matches_builtin
    for k in range(1, ws):
        got = sorted((t.src, t.dst, t.chunks, t.reduce, t.nbytes) for t in tr.transfers(k))
        assert got == [(r, (r + 1) % ws, ((r - k) % ws,), True, 2 * 4) for r in range(ws)]
    for k in range(ws, 2 * ws - 1):
        assert all(not t.reduce for t in tr.transfers(k))
    assert tr.bytes_sent(1).tolist() == [8] * ws and tr.bytes_received(1).tolist() == [8] * ws
    assert tr.total_bytes_sent().tolist() == [2 * (ws - 1) * 8] * ws
    assert tr.bytes_matrix().shape == (2 * (ws - 1), ws)
    # the teaching values: chunk c of rank r is 10r + c; every rank ends with sum_r (10r + c)
    assert tr.chunk_values(0)[2].tolist() == [20, 21, 22, 23]
    assert tr.chunk_values(tr.n_rounds)[3].tolist() == [60 + 4 * c for c in range(ws)]


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_save_load_round_trip(tmp_path, suffix):
    traces = A.run_algorithms([dict(primitive="all_reduce", algorithm="rabenseifner", dtype="bfloat16", op="max"),
                               dict(primitive="all_to_all", algorithm="pairwise", dtype="bool"),
                               dict(primitive="reduce", algorithm="binomial_tree", dtype="float32", op="avg",
                                    root=2, snapshots=False)], 5)
    for i, tr in enumerate(traces):
        path = tmp_path / f"t{i}{suffix}"
        tr.save(path)
        back = Trace.load(path)
        assert back.equals(tr) and back.n_rounds == tr.n_rounds
        assert back.provenance_sets(back.n_rounds) == tr.provenance_sets(tr.n_rounds)
        assert [t.to_dict() for t in back.transfers(1)] == [t.to_dict() for t in tr.transfers(1)]
        assert back.matches_builtin is True
    assert traces[0].buffers.dtype == np.float32 and traces[0].dtype == "bfloat16"
    assert traces[2].buffers is None and not Trace.load(tmp_path / f"t2{suffix}").has_snapshots
    with pytest.raises(ValueError, match="snapshots=False"):
        traces[2].buffer(1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a collnb trace"):
        Trace.load(bad)
    with pytest.raises(ValueError, match=".json or .npz"):
        traces[0].save(tmp_path / "t.txt")


# ------------------------------------------------------------------------------------------------
# Frames, GIF, filmstrip

@pytest.fixture(scope="module")
def ag4():
    return A.run_algorithm("all_gather", "ring", 4)


def _pixel(img, box, fx=0.12, fy=0.5):
    x0, y0, x1, y1 = box
    return np.asarray(img)[int(y0 + fy * (y1 - y0)), int(x0 + fx * (x1 - x0))][:3].astype(int)


def test_frame_pixels_show_provenance(ag4):
    from collnb.views.frames import FrameRenderer
    ren = FrameRenderer(ag4)
    first, last = ren.rgb(0), ren.rgb(ag4.n_rounds)
    assert first.shape == last.shape and first.dtype == np.uint8
    for r in range(4):
        for c in range(4):
            box = ren.cell_box(r, c)
            want0 = _rgb255(RANK_COLORS[r]) if c == r else _rgb255(EMPTY_COLOR)
            assert np.abs(_pixel(first, box) - want0).max() <= 3, (r, c, _pixel(first, box), want0)
            assert np.abs(_pixel(last, box) - _rgb255(RANK_COLORS[c])).max() <= 3, (r, c)
    d = ren.data(1)
    assert d["round"] == 1 and d["label"] == "all-gather"
    assert d["values"] == ag4.chunk_values(1).tolist()
    assert [(t["src"], t["dst"], t["chunks"]) for t in d["transfers"]] == [(r, (r + 1) % 4, [r]) for r in range(4)]
    assert d["bytes_sent"] == [4] * 4 and d["model_seconds"] > 0


def test_gif_has_one_frame_per_round_plus_start(ag4, tmp_path):
    from collnb.views.frames import FrameRenderer
    from collnb.views.replay import save_gif
    path = save_gif(ag4, tmp_path / "ag.gif")
    img = Image.open(path)
    frames = [f.convert("RGB").copy() for f in ImageSequence.Iterator(img)]
    assert len(frames) == ag4.n_rounds + 1 == 4
    arrs = [np.asarray(f).astype(int) for f in frames]
    assert all((arrs[i] != arrs[i + 1]).any() for i in range(len(arrs) - 1))
    ren = FrameRenderer(ag4)
    box = ren.cell_box(0, 3)   # rank 0 receives chunk 3 (from rank 3) in the last round
    assert np.abs(_pixel(arrs[0], box) - _rgb255(EMPTY_COLOR)).max() <= 12
    assert np.abs(_pixel(arrs[-1], box) - _rgb255(RANK_COLORS[3])).max() <= 12
    with pytest.raises(ValueError, match="snapshots"):
        save_gif(A.run_algorithm("all_gather", "ring", 2, snapshots=False), tmp_path / "x.gif")


def test_filmstrip_png(tmp_path):
    from collnb.views.replay import save_filmstrip
    tr = A.run_algorithm("all_reduce", "recursive_doubling", 3)
    path = save_filmstrip(tr, tmp_path / "film.png")
    arr = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert arr.shape[0] > 150 and arr.shape[1] > 600
    # start + 3 rounds (fold, exchange, unfold) side by side: every rank's colour is there
    for r in range(3):
        hits = (np.abs(arr - _rgb255(RANK_COLORS[r])).max(axis=2) <= 2).sum()
        assert hits > 500, (r, hits)
    wide = save_filmstrip(tr, tmp_path / "film2.png", columns=2)
    assert np.asarray(Image.open(wide)).shape[0] > arr.shape[0]


# ------------------------------------------------------------------------------------------------
# Widgets

def test_replay_widget_slider_play_speed(ag4):
    from collnb.views.replay import replay
    w = replay(ag4)
    assert w.current_round == 0 and w.slider.max == ag4.n_rounds
    for k in (2, 1, 3):
        w.slider.value = k
        assert w.current_round == k
        assert w.current_data["values"] == ag4.chunk_values(k).tolist()
        assert w.current_data["provenance"] == [[sorted(s) for s in row] for row in ag4.provenance_sets(k)]
        shown = np.asarray(Image.open(io.BytesIO(w.image.value)).convert("RGB"))
        assert np.array_equal(shown, w.renderer.rgb(k))
        assert f"round {k}/{ag4.n_rounds}" in w.info.value
    w.play.value = 2
    assert w.slider.value == 2 and w.current_round == 2
    w.speed.value = 4.0
    assert w.play.interval == 250
    with pytest.raises(TypeError):
        replay("not a trace")
    with pytest.raises(ValueError, match="snapshots"):
        replay(A.run_algorithm("all_gather", "ring", 2, snapshots=False))


def test_explore_rounds_runs_on_real_ranks():
    from collnb.views.rounds_explorer import explore_rounds
    e = explore_rounds("all_reduce", world_size=3)  # returns with the first replay shown
    assert e.trace.algorithm == "ring" and e.trace.world_size == 3 and e.trace.n_rounds == 4
    assert "equals" in e.status.value
    assert e.world_size.description == "ranks (world size)"  # gloo: ranks are processes, not GPUs
    e.algorithm.value = "recursive_doubling"  # runs in the background, as the explorer's do
    e.wait()
    assert e.trace.n_rounds == 3 and "fold" in e.status.value
    e.world_size.value = 4
    e.wait()
    assert e.trace.world_size == 4 and e.trace.n_rounds == 2
    e.primitive.value = "all_to_all"
    e.wait()
    assert e.algorithm.options == ("pairwise", "linear") and e.trace.primitive == "all_to_all"
    e.player.slider.value = 1
    assert e.player.current_data["round"] == 1
    assert e.runs_started == e.runs_finished == 4


def test_rounds_explorer_callback_returns_at_once_and_the_latest_values_win(ag4, monkeypatch):
    """A control change returns before its run ends (the kernel stays responsive); values set
    while a run is in flight replace each other, only the latest runs (a stub stands for the ranks)."""
    import threading
    from collnb.views import rounds_explorer as rounds
    release, entered, calls = threading.Event(), threading.Event(), []

    def stub(primitive, algorithm, world_size, **kwargs):
        calls.append(world_size)
        if len(calls) > 1:
            entered.set()
            assert release.wait(30)
        return ag4

    monkeypatch.setattr(rounds, "run_algorithm", stub)
    e = rounds.RoundsExplorer("all_gather", "ring", world_size=4)
    assert calls == [4] and e.trace is ag4
    e.world_size.value = 5  # blocks in the stub until released: the callback must not
    assert entered.wait(30)
    for ws in (6, 7, 8):
        e.world_size.value = ws
    assert not release.is_set() and e.busy and e.runs_finished == 1
    release.set()
    e.wait()
    assert calls == [4, 5, 8]  # 6 and 7 were replaced while 5 ran
    assert e.runs_started == e.runs_finished == 3 and e.player.trace is ag4


@pytest.mark.slow
def test_compare_view(tmp_path):
    from collnb.views import compare, compare_figure
    for ws in (8, 6):
        w = compare("ring", "recursive_doubling", world_size=ws, primitive="all_reduce")
        a, b = w.left.trace, w.right.trace
        assert a.n_rounds == 2 * (ws - 1)
        assert b.n_rounds == (3 if ws == 8 else 4)
        w.slider.value = 5
        assert w.rounds_shown(5) == (5, min(5, b.n_rounds))
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(w.images[1].value)).convert("RGB")),
                              w.right.rgb(min(5, b.n_rounds)))
        fig = compare_figure(a, b)
        fig.savefig(tmp_path / f"cmp{ws}.png")
        assert Image.open(tmp_path / f"cmp{ws}.png").size[0] > 500
    with pytest.raises(ValueError, match="same primitive and world size"):
        compare_figure(a, A.run_algorithm("all_reduce", "ring", 3))


@pytest.mark.slow
def test_compare_passes_the_launch_options_to_the_launch_and_the_rest_to_each_run():
    """compare's extra keywords were all put into both runs' configs, which refuse backend, timeout and
    debug ("unknown keys"), although its docstring sent them to run_algorithm: the launch's go to the
    launch now, the rest to each run."""
    from collnb.views import compare
    w = compare("ring", "binomial_tree", world_size=2, primitive="all_reduce", backend="gloo", timeout=90,
                dtype="float64", chunk_size=2)
    for trace in (w.left.trace, w.right.trace):
        assert (trace.dtype, trace.count, trace.meta["backend"]) == ("float64", 4, "gloo")
        assert trace.matches_builtin


def test_step_buttons_keyboard_tooltips_and_caption(ag4):
    """Issue 10 item 3: |◀ ◀ ▶ ▶| step the replay (disabled where they cannot move), every
    control has a tooltip, and round 0's caption says what it is (no dangling "start —")."""
    from collnb.views.replay import replay
    w = replay(ag4)
    R = ag4.n_rounds
    assert "start" in w.info.value and "—" not in w.info.value.split("<br>")[0]
    assert "before any message" in w.info.value
    assert (w.first.disabled, w.back.disabled, w.forward.disabled, w.last.disabled) == (True, True, False, False)
    w.forward.click()
    assert w.current_round == w.slider.value == 1
    w.forward.click()
    w.back.click()
    assert w.current_round == 1
    w.last.click()
    assert w.current_round == R and w.forward.disabled and w.last.disabled and not w.back.disabled
    assert w.step(5) == R and w.step(-2) == R - 2  # stays within 0..n_rounds
    w.first.click()
    assert w.current_round == 0 and w.first.disabled
    for ctl in (w.play, w.slider, w.first, w.back, w.forward, w.last, w.speed):
        assert ctl.tooltip, ctl
    assert "←" in w.slider.tooltip  # focused slider: arrow keys step (ipywidgets' slider keyboard support)
    assert {b.description for b in (w.first, w.back, w.forward, w.last)} == {"|◀", "◀ step", "step ▶", "▶|"}
    # the static stand-in follows the round shown
    w.show_round(2)
    b = w.static_bundle()
    assert 'data-round="2"' in b["text/html"] and "run this cell" in b["text/plain"]
    assert "collnb-live" in w.widget._dom_classes


def _dark_rows(arr, box, dark=80):
    x0, y0, x1, y1 = box
    region = arr[y0 + 3:y1 - 3, x0 + 3:x1 - 3]
    rows = np.flatnonzero((region.max(axis=2) < dark).any(axis=1))
    return 0 if rows.size == 0 else int(rows[-1] - rows[0] + 1)


@pytest.mark.slow
def test_replay_frames_readable_at_world_size_16():
    """Issue 10 items 1 and 7: at world size 16 every value is written at >= 10 px (its ink, read
    from the frame's pixels, as tall as the digits of a 10 px label), the frame fits 1000 px, and
    a ring's wrap-around (rank 15 -> rank 0) goes through the margin, not across other cells."""
    from collnb.views.frames import FrameRenderer
    from collnb.views.raster import Canvas
    from collnb.views.round_heatmap import _in_margin
    ref = Canvas(120, 40)
    ref.text("0123456789", 5, 20, 10, (17, 17, 17), ha="left")
    ref_h = _dark_rows(ref.pixels(), (0, 0, 120, 40))
    assert ref_h >= 6
    for alg in ("ring", "recursive_doubling"):
        tr = A.run_algorithm("all_reduce", alg, 16)
        ren = FrameRenderer(tr)
        k = tr.n_rounds
        arr = ren.rgb(k)
        assert arr.shape[1] <= 1000, (alg, arr.shape)
        for r in (0, 7, 15):
            for c in (0, 9, 15):
                assert _dark_rows(arr, ren.cell_box(r, c)) >= ref_h, (alg, r, c)
    ring = A.run_algorithm("all_reduce", "ring", 16)
    wraps = [t for k in range(1, ring.n_rounds + 1) for t in ring.transfers(k) if abs(t.src - t.dst) > 1]
    assert wraps and all(_in_margin(t) for t in wraps)
    ren = FrameRenderer(ring)
    arr = ren.rgb(1)
    # the cells between rank 15 and rank 0 in the wrapped chunk's column carry no arrow colour
    t = next(t for t in ring.transfers(1) if abs(t.src - t.dst) > 1)
    red = np.array([192, 57, 43])
    for r in range(1, 15):
        x0, y0, x1, y1 = ren.cell_box(r, t.chunks[0])
        cell = arr[y0 + 2:y1 - 2, x0 + 2:x1 - 2].astype(int)
        assert (np.abs(cell - red).max(axis=2) < 40).sum() == 0, r


def test_compare_is_stacked_and_readable(ag4):
    from collnb.views.comparison import compare_figure
    from collnb.views.frames import FrameRenderer
    from collnb.views.players import CompareWidget
    import ipywidgets
    b = A.run_algorithm("all_gather", "recursive_doubling", 4)
    w = CompareWidget(ag4, b)
    # each replay at the size of a single replay, one above the other (no 49 % side by side)
    assert w.left.cell == FrameRenderer(ag4).cell
    boxes = [c for c in w.widget.children if isinstance(c, ipywidgets.Image)]
    assert boxes[1:] == list(w.images)
    assert [im.layout.width for im in w.images] == [f"{w.left.size[0]}px", f"{w.right.size[0]}px"]
    w.forward.click()
    assert w.slider.value == 1 and "round 1 of" in w.captions[0].value
    fig = compare_figure(ag4, b)
    assert fig.get_figwidth() * fig.dpi <= 1000
    sizes = [t.get_fontsize() * fig.dpi / 72 for ax in fig.axes for t in
             ax.get_xticklabels() + ax.get_yticklabels() + [ax.xaxis.label, ax.yaxis.label, ax.title]]
    assert min(sizes) >= 10, min(sizes)


# ------------------------------------------------------------------------------------------------
# CLI

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "collnb", "replay", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=240)


@pytest.mark.slow
def test_cli_replay_writes_gif_trace_and_filmstrip(tmp_path):
    gif, trace, png = tmp_path / "b.gif", tmp_path / "b.npz", tmp_path / "b.png"
    p = _cli("all_gather", "--algorithm", "bruck", "--world-size", "5", "--gif", str(gif), "--trace", str(trace),
             "--png", str(png))
    assert p.returncode == 0, p.stderr
    assert "equals the built-in" in p.stdout and "round  3 [all-gather]" in p.stdout
    tr = Trace.load(trace)
    assert (tr.primitive, tr.algorithm, tr.world_size, tr.n_rounds) == ("all_gather", "bruck", 5, 3)
    assert Image.open(gif).n_frames == 4
    assert np.asarray(Image.open(png)).ndim == 3
    bad = _cli("all_reduce", "--algorithm", "bruck", "--world-size", "4")
    assert bad.returncode == 2
    assert "valid algorithms for all_reduce: ring, recursive_doubling, rabenseifner, binomial_tree" in bad.stderr


@pytest.mark.parametrize("args, kwargs, exc, text", [
    (("all_reduce", "bruck"), {}, ValueError, "unknown algorithm for all_reduce 'bruck'; choose one of: ring, "
                                              "recursive_doubling, rabenseifner, binomial_tree"),
    (("all_reduce",), dict(world_size=17), ValueError, "world_size must be an int from 1 to 16; got 17"),
    (("all_reduce",), dict(world_size="4"), TypeError, "world_size must be an int from 1 to 16; got '4'"),
    ((["all_reduce"],), {}, TypeError, "primitive must be a name (str), one of: "),
    (("all_reduce",), dict(dtype="bogus"), ValueError, "unknown dtype 'bogus'"),
    (("all_reduce",), dict(dtype="int16"), ValueError, "gloo cannot run all_reduce on int16"),
    (("all_reduce",), dict(backend="bogus"), ValueError, "unknown backend 'bogus'; choose one of: gloo, nccl"),
    (("all_reduce",), dict(timeout=-1), ValueError, "timeout must be a positive"),
])
def test_explore_rounds_refuses_bad_input(args, kwargs, exc, text):
    from collnb.views.rounds_explorer import explore_rounds
    with pytest.raises(exc, match=re.escape(text)):
        explore_rounds(*args, **kwargs)


# -- traces that do not fit together, files that are not traces, writers' arguments ----------

def _saved(tmp_path, name="t.json"):
    tr = A.run_algorithm("all_reduce", "ring", 3)
    path = tmp_path / name
    tr.save(path)
    return tr, path


@pytest.mark.parametrize("damage, text", [
    (lambda d: d.pop("algorithm"), "'algorithm' is missing"),
    (lambda d: d.update(primitive="bogus"), "unknown primitive 'bogus'"),
    (lambda d: d.update(world_size=2), "trace array 'inputs' has shape (3, 3)"),
    (lambda d: d["rounds"][0].pop("label"), "'label' is missing"),
    (lambda d: d.update(meta=[1]), "meta must be an object; got [1]"),
    (lambda d: d.update(arrays={}), "the array 'inputs' is missing"),
    (lambda d: d["rounds"][1]["transfers"][0].update(dst=7), "outside world size 3"),
    # hostile scalars: each once rendered by save_gif
    (lambda d: d.update(op=None), "reduce op of all_reduce must be a name (str)"),
    (lambda d: d.update(op="-1"), "unknown reduce op of all_reduce '-1'"),
    (lambda d: d.update(op=-1), "op must be a reduce op's name (str) or None; got -1"),
    (lambda d: d.update(dtype=None), "dtype must be a name (str); got None"),
    (lambda d: d.update(dtype="1e30"), "unknown dtype '1e30'"),
    (lambda d: d.update(dtype=1e30), "dtype must be a name (str); got 1e+30"),
    (lambda d: d.update(itemsize=-1), "itemsize must be an int from 4 to 4 (bytes per float32 element); got -1"),
    (lambda d: d.update(itemsize=8), "itemsize must be an int from 4 to 4"),
    (lambda d: d.update(world_size=1e30), "world_size must be an int"),
    (lambda d: d.update(world_size=None), "world_size must be an int"),
    (lambda d: d.update(root=True), "root must be an int"),
    (lambda d: d["rounds"][1]["transfers"][0].update(nbytes=10 ** 12), "hold 4 bytes of float32"),
    (lambda d: d["rounds"][0].update(seconds=-1.0), "took -1.0 seconds"),
    (lambda d: d["arrays"]["inputs"].update(dtype="<U3"), "a trace holds numbers"),
    (lambda d: d["arrays"]["provenance"]["data"][0][0].__setitem__(0, 99), "bitmasks outside 0..7"),
    (lambda d: d.update(chunk_bounds="abc"), "chunk_bounds must be a list of ints"),
    (lambda d: d["meta"].update(cpu_count="many"), "meta.cpu_count must be an int or None; got 'many'"),
    (lambda d: d["meta"].update(cluster=[2]), "meta.cluster must be an object; got [2]"),
])
def test_a_damaged_trace_file_is_a_value_error_that_says_what(tmp_path, damage, text):
    import json
    _, path = _saved(tmp_path)
    d = json.loads(path.read_text())
    damage(d)
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="cannot read .* as a collnb trace") as info:
        Trace.load(path)
    assert text in str(info.value)


def test_deeply_nested_json_is_a_value_error_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"primitive": "all_reduce", "rounds": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(ValueError, match="nested too deeply"):
        Trace.load(path)


def test_a_small_npz_that_would_inflate_is_refused_before_it_is_inflated(tmp_path):
    """A 200 KiB file whose 'buffers' member unpacks to 200 MiB, with metadata for a 3-rank trace of 3
    elements: refused from the sizes the zip file states, without unpacking it (peak memory stays low)."""
    import resource
    import zipfile
    _, path = _saved(tmp_path, "t.npz")
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename != "buffers.npy":
                dst.writestr(info.filename, src.read(info.filename))
        header = np.lib.format.header_data_from_array_1_0(np.zeros((200 << 20,), np.uint8))
        with dst.open("buffers.npy", "w") as fh:  # streamed: the test never holds 200 MiB either
            np.lib.format.write_array_header_1_0(fh, header)
            zeros = bytes(1 << 20)
            for _ in range(200):
                fh.write(zeros)
    assert bomb.stat().st_size < 2 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ValueError, match=r"its array 'buffers' would unpack to 20971\d+ bytes, more than"):
        Trace.load(bomb)
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew_kib < 50 << 10, f"peak RSS grew {grew_kib} KiB while refusing"


def test_every_hostile_trace_is_refused_before_save_gif_draws_it(tmp_path):
    import json
    from collnb.views import save_gif
    _, path = _saved(tmp_path)
    d = json.loads(path.read_text())
    for damage in (dict(op=None), dict(dtype=None), dict(op=-1), dict(dtype=1e30), dict(itemsize=-1)):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**d, **damage}))
        with pytest.raises(ValueError, match="cannot read .* as a collnb trace"):
            save_gif(Trace.load(bad), tmp_path / "x.gif")
        assert not (tmp_path / "x.gif").exists()


def test_a_truncated_npz_or_foreign_file_is_a_value_error(tmp_path):
    _, path = _saved(tmp_path, "t.npz")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="damaged .npz"):
        Trace.load(path)
    (tmp_path / "bin.json").write_bytes(bytes(range(256)))
    with pytest.raises(ValueError, match="neither an .npz file nor UTF-8 JSON"):
        Trace.load(tmp_path / "bin.json")


@pytest.mark.slow
def test_cli_from_a_damaged_trace_or_without_snapshots_exits_2(tmp_path):
    import json
    _, path = _saved(tmp_path)
    d = json.loads(path.read_text())
    d.pop("algorithm")
    path.write_text(json.dumps(d))
    done = _cli("--from-trace", str(path), "--world-size", "8")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "'algorithm' is missing" in done.stderr and "ignoring --world-size" in done.stderr
    A.run_algorithm("all_reduce", "ring", 3, snapshots=False).save(tmp_path / "plain.json")
    done = _cli("--from-trace", str(tmp_path / "plain.json"), "--gif", str(tmp_path / "x.gif"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "no per-round snapshots" in done.stderr


@pytest.mark.slow
def test_cli_an_output_that_cannot_be_written_exits_2_before_any_rank_runs(tmp_path):
    # A dangling symlink looks like a free name; opening it for writing fails, and the CLI finds
    # that out before starting ranks (collnb.cli.common), not after the whole run.
    (tmp_path / "dangling.gif").symlink_to(tmp_path / "no" / "such" / "dir.gif")
    done = _cli("all_reduce", "-n", "2", "--gif", str(tmp_path / "dangling.gif"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == (f"error: --gif '{tmp_path / 'dangling.gif'}' cannot be written: "
                           "No such file or directory\n"), done.stderr
    assert "[rank" not in done.stdout and not (tmp_path / "no").exists()


def test_writers_and_player_refuse_bad_arguments(ag4, tmp_path):
    from collnb.views.replay import replay, save_filmstrip, save_gif
    for call, exc, text in [
        (lambda: save_gif(ag4, tmp_path / "a.gif", fps=float("nan")), ValueError, "fps must be a number from 0.01 to 50.0 (frames per second); got nan"),
        (lambda: save_gif(ag4, tmp_path / "a.gif", fps="2"), TypeError, "fps must be a number from 0.01 to 50.0 (frames per second); got '2'"),
        (lambda: save_gif(ag4, tmp_path / "a.gif", fps=1e-6), ValueError, "fps must be a number from 0.01 to 50.0"),
        (lambda: save_gif(None, tmp_path / "a.gif"), TypeError, "takes a collnb.Trace"),
        (lambda: save_gif(ag4, tmp_path / "a.png"), ValueError, "end the file name with .gif"),
        (lambda: save_gif(ag4, tmp_path / "a.gif", cell=-5), ValueError, "cell must be an int from 4 to 200"),
        (lambda: save_filmstrip(ag4, tmp_path / "a.gif"), ValueError, "end the file name with .png"),
        (lambda: save_filmstrip(ag4, tmp_path / "a.png", columns=-1), ValueError, "columns must be an int"),
        (lambda: save_filmstrip("x", tmp_path / "a.png"), TypeError, "takes a collnb.Trace"),
        (lambda: replay(ag4, speed=0), ValueError, "speed must be a number from 0.25 to 8.0 (rounds per second); got 0"),
        (lambda: replay(ag4, speed=float("nan")), ValueError, "speed must be a number from 0.25 to 8.0"),
    ]:
        with pytest.raises(exc, match=re.escape(text)):
            call()
    assert list(tmp_path.iterdir()) == []


def test_overflow_that_depends_on_the_order_is_not_a_mismatch():
    # float16 PRODUCT of 0, 10, 20, 30, 40: the tree multiplies by 0 early (0); gloo reaches
    # 10*20*30*40 = inf first, then inf*0 = NaN. Both are right for their order.
    tr = A.run_algorithm("all_reduce", "binomial_tree", 5, dtype="float16", op="product")
    assert tr.final[0, 0] == 0 and np.isnan(tr.builtin[0, 0])
    assert tr.matches_builtin is True
    wrong = Trace.from_dict(tr.to_dict())
    wrong.final[2, 1] = 1.0  # a finite, wrong value is still a mismatch
    assert wrong.mismatches() == [(2, 1)]


# -- loading a trace and the cost model need numpy alone ---------------------------------------

SAVED_V1 = REPO / "tests" / "data" / "trace_v1_all_reduce_rabenseifner_ws3.json"

_NO_TORCH = r"""
import json, sys
sys.modules["torch"] = None  # any "import torch" from here on raises ImportError
import collnb
from collnb import Trace, predict
from collnb import costmodel as cm
from collnb.algorithms.trace import Trace as T2
assert T2 is Trace
tr = Trace.load(sys.argv[1])
tr.save(sys.argv[2])
back = Trace.load(sys.argv[2])
p = predict("all_reduce", "rabenseifner", 3, tr.nbytes, cm.CostModel(1e-5, 1e-9, 1e-10))
print(json.dumps(dict(
    summary=tr.summary(), equal=back.equals(tr), matches=tr.matches_builtin,
    transfers=[t.to_dict() for t in tr.transfers(1)], sent=tr.total_bytes_sent().tolist(),
    final=tr.final.tolist(), rounds=p.rounds, seconds=p.seconds, closed=p.closed_form_seconds,
    round_costs=cm.round_costs(tr, cm.CostModel(1e-5, 1e-9, 1e-10)).tolist(),
    busbw=cm.busbw("all_reduce", 1e9, 1.0, 4), closed_ring=cm.closed_form("all_reduce", "ring", 4, 1e6)[0],
    torch=sorted(m for m, v in sys.modules.items() if m.split(".")[0] == "torch" and v is not None))))
"""


def test_a_saved_trace_loads_and_is_priced_without_torch(tmp_path):
    """A trace saved by collnb before Trace reused the schedule's Transfer (format version 1)
    loads, saves as .npz, loads again, and the cost model prices it, in a Python where every
    ``import torch`` fails."""
    import json
    done = subprocess.run([sys.executable, "-c", _NO_TORCH, str(SAVED_V1), str(tmp_path / "t.npz")],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["torch"] == [] and got["equal"] is True and got["matches"] is True
    assert got["summary"].startswith("all_reduce / rabenseifner: world size 3, int64, op=sum, 3 chunks x 2 element(s)")
    assert "4 rounds; 1 rank(s) folded onto a power of two (2); bytes sent per rank: [48, 96, 48]" in got["summary"]
    assert got["transfers"] == [dict(src=0, dst=1, chunks=[0, 1, 2], dst_chunks=[0, 1, 2], reduce=True, nbytes=48)]
    assert got["sent"] == [48, 96, 48]
    # teaching values 10r + c summed over 3 ranks: chunk c holds 30 + 3c on every rank
    assert got["final"] == [[30, 30, 33, 33, 36, 36]] * 3
    # the same numbers as here, with torch: the model needs only the schedule
    model = A.CostModel(1e-5, 1e-9, 1e-10)
    p = A.predict("all_reduce", "rabenseifner", 3, 48, model)
    assert (got["rounds"], got["seconds"], got["closed"]) == (4, p.seconds, p.closed_form_seconds)
    assert got["round_costs"] == A.round_costs(Trace.load(SAVED_V1), model).tolist()
    # fold: the whole 48 B buffer, reduced; 3 chunks of 16 B in 2 groups (chunk 0 | chunks 1, 2), so the
    # busiest rank of the halving and of the doubling round moves 32 B; unfold: 48 B back
    assert got["round_costs"] == pytest.approx([1e-5 + 48e-9 + 48e-10, 1e-5 + 32e-9 + 32e-10, 1e-5 + 32e-9,
                                                1e-5 + 48e-9], rel=1e-12)
    # ring all_reduce, 4 ranks, 1 MB, the default model (50 us, 4 GB/s, 10 GB/s): 2(p-1) a + 2(p-1)/p m b + (p-1)/p m g
    assert got["busbw"] == 1.5 and got["closed_ring"] == pytest.approx(6 * 50e-6 + 1.5e6 / 4e9 + 0.75e6 / 10e9,
                                                                       rel=1e-12)


def test_a_saved_trace_holds_the_schedules_transfers():
    """Trace reuses the schedule's Transfer: the loaded rounds are the schedule's transfers with
    their sizes in bytes."""
    tr = Trace.load(SAVED_V1)
    sched = A.schedule("all_reduce", "rabenseifner", 3)
    for k, rnd in enumerate(sched.rounds, 1):
        assert all(type(t) is A.Transfer for t in tr.transfers(k))
        # the same sends as today's schedule; the chunks differ: the trace was saved when Rabenseifner
        # cut the buffer into one chunk per rank (3), today into p' = 2 (issue 18)
        assert [(t.src, t.dst, t.reduce) for t in tr.transfers(k)] == [(t.src, t.dst, t.reduce) for t in rnd.transfers]
        assert [t.nbytes for t in tr.transfers(k)] == [16 * len(t.chunks) for t in tr.transfers(k)]
        assert all(t.nbytes is None for t in rnd.transfers)
    assert not hasattr(tr, "replay")  # collnb.replay(trace) draws it; the trace knows nothing of views


def test_import_collnb_is_cheap_and_lazy():
    """``import collnb`` imports no torch; every public name still loads, and dir() lists them."""
    code = ("import sys, collnb; before = sorted(m for m in sys.modules if m.split('.')[0] == 'torch'); "
            "names = {n: getattr(collnb, n) for n in collnb.__all__ + ['bench', 'exercises', 'examples', "
            "'costmodel']}; from collnb import run_algorithm, Trace, replay; "
            "import collnb.algorithms as A; A.all_reduce, A.run_algorithm, A.ALGORITHMS, A.prepare_case, "
            "A.cached_schedule; "
            "print(before, set(names) <= set(dir(collnb)), collnb.examples.__name__ == 'collnb.labs.examples', "
            "collnb.costmodel.__name__, collnb.bench.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True", "True", "collnb.algorithms.costmodel", "collnb.labs.bench"]
    import collnb
    with pytest.raises(AttributeError, match="module 'collnb' has no attribute 'nothing'"):
        collnb.nothing  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'seeds'"):
        collnb.seeds  # noqa: B018 - the old name of collnb.examples is gone


def test_rooted_and_reducing_names_agree_with_the_spec_table():
    from collnb.collectives import REDUCING_PRIMITIVES, ROOTED_PRIMITIVES, SPECS
    assert ROOTED_PRIMITIVES == tuple(n for n, s in SPECS.items() if s.rooted)
    assert REDUCING_PRIMITIVES == tuple(n for n, s in SPECS.items() if s.reduces)


def test_trace_checks_speak_the_vocabulary(tmp_path):
    """Round indices and a loaded trace's world size and root are checked with collnb.vocabulary's
    words: TypeError for a wrong type, ValueError for a wrong value."""
    import json
    tr = Trace.load(SAVED_V1)
    with pytest.raises(ValueError) as info:
        tr.buffer(5)
    assert str(info.value) == "round must be an int from 0 to 4 (0 is the start); got 5"
    with pytest.raises(TypeError) as info:
        tr.transfers(1.0)
    assert str(info.value) == "round must be an int from 0 to 4 (0 is the start); got 1.0"
    for change, words in [(dict(world_size=17), "in the trace, world_size must be an int from 1 to 16; got 17"),
                          (dict(root=3), "in the trace, root must be a rank, an int from 0 to 2 (world size 3); "
                                         "got 3"),
                          (dict(algorithm="bruck"), "in the trace, unknown algorithm for all_reduce 'bruck'; "
                                                    "choose one of: ring, recursive_doubling, rabenseifner, "
                                                    "binomial_tree, hierarchical, ring_2d, double_binary_tree")]:
        d = json.loads(SAVED_V1.read_text())
        d.update(change)
        path = tmp_path / "t.json"
        path.write_text(json.dumps(d))
        with pytest.raises(ValueError) as info:
            Trace.load(path)
        assert f"as a collnb trace: {words}. Traces are written by" in str(info.value)


def test_replay_frame_speaks_chinese(ag4):
    """A replay frame in Chinese: the heading over the heatmap, the axes' titles and labels, drawn
    with the CJK font as matplotlib's fallback."""
    import collnb
    from collnb.views import raster
    from collnb.views.frames import FrameRenderer
    collnb.set_language("zh")
    try:
        ren = FrameRenderer(ag4)
        rnd = ag4.rounds[0]
        assert ren.heading(1) == (f"第 1 轮，共 {ag4.n_rounds} 轮 — {rnd.label}：{len(rnd.transfers)} 条消息，"
                                  f"最忙的 rank 传输 {ren.data(1)['critical_bytes']} B")
        assert ren.heading(0) == f"开始（第 0 轮，共 {ag4.n_rounds} 轮）：任何消息之前每个 rank 的缓冲区"
        assert ren.ax_bytes.get_title() == "本轮字节数：发送（实心），接收（空心）"
        assert ren.ax_time.get_xlabel() == "轮"
        family = ren.ax_bytes.title.get_fontfamily()
        assert family == raster.matplotlib_fonts() and len(family) == 2, family
        zh = ren.rgb(1)
    finally:
        collnb.set_language("en")
    en_ren = FrameRenderer(ag4)
    assert en_ren.heading(1).startswith("round 1 of ") and en_ren.ax_bytes.get_title().startswith("bytes this round")
    en = en_ren.rgb(1)
    assert zh.shape == en.shape and not np.array_equal(zh, en)
    # the heatmap itself has no words to translate: the same pixels in both languages
    x0, y0, x1, y1 = ren.heat_box
    assert np.array_equal(zh[y0:y1, x0:x1], en[y0:y1, x0:x1])


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("cell", [None, 36])
def test_the_gap_note_is_wrapped_inside_the_frame(ag4, cell, language):
    """The note under the plots was two fixed lines: in README's replay GIF (cell=36, a 647 px frame) its
    second line ran off the right edge ("...bandwidth.ipynb fits α, β h"). It is wrapped to the frame's
    width as drawn, in either language, the frame grows by the extra lines, and the note stays clear of
    the plots. (A model with a tiny α makes the gap, whatever this machine measures.)"""
    import dataclasses

    import collnb
    from collnb.views.frames import FrameRenderer

    base = FrameRenderer(ag4, cell=cell)
    model = dataclasses.replace(base.model, alpha=float(base.measured_cum[-1]) / 1000 / ag4.n_rounds)
    collnb.set_language(language)
    try:
        ren = FrameRenderer(ag4, model=model, cell=cell)
        note = ren.gap_note()
        assert note and ren.gap_text is not None
        lines = ren.gap_text.get_text().split("\n")
        assert len(lines) >= 2
        sep = " " if language == "en" else ""
        assert sep.join(lines).replace(" ", "") == note.replace("\n", "").replace(" ", "")  # nothing lost
        ren.png(ag4.n_rounds)
        r = ren.fig.canvas.get_renderer()
        box = ren.gap_text.get_window_extent(r)
        assert box.x0 >= 0 and box.x1 <= ren.fig.bbox.width - ren._PAD / 2, (box, ren.fig.bbox.width, lines)
        assert box.y0 >= 0
        for ax in (ren.ax_time, ren.ax_bytes):
            assert not box.overlaps(ax.get_tightbbox(r)), (box, ax.get_tightbbox(r))
        assert ren.rgb(ag4.n_rounds).shape[:2] == (ren.size[1], ren.size[0])
    finally:
        collnb.set_language("en")


def test_the_running_total_says_why_measured_and_model_are_far_apart(ag4):
    """Issue 34: the replay's timing panel put "measured" near 150 ms beside the model near 0.3 ms with
    nothing explaining the gap. When they differ by more than 3x a note under the plots says by how much and
    why (the model's α and β are a network's; gloo's per-round software cost on shared cores), and it sits
    clear of the plots; measured times close to the model (a fitted model) or none get no note."""
    import dataclasses

    from collnb.views.frames import FrameRenderer

    assert ag4.round_seconds() is not None
    ren = FrameRenderer(ag4)
    ratio = float(ren.measured_cum[-1] / ren.model_cum[-1])
    if not 1 / 3 <= ratio <= 3:
        note = ren.gap_note()
        assert note.startswith("measured = ") and "× the model" in note and "α = 50 µs" in note, note
        ren.png(ag4.n_rounds)
        fig = ren.fig
        r = fig.canvas.get_renderer()
        text_box = ren.gap_text.get_window_extent(r)
        for ax in (ren.ax_time, ren.ax_bytes):
            assert not text_box.overlaps(ax.get_tightbbox(r)), (text_box, ax.get_tightbbox(r))
        assert text_box.x1 <= fig.bbox.width + 1, "the note runs off the frame"
    # measured within 3x of the model: nothing to explain
    model = dataclasses.replace(ren.model, alpha=float(ren.measured_cum[-1]) / max(1, ag4.n_rounds))
    assert FrameRenderer(ag4, model=model).gap_note() == ""
    # no measured times: no note
    plain = A.run_algorithm("all_gather", "ring", world_size=4)
    for rnd in plain.rounds:
        rnd.seconds = None
    assert plain.round_seconds() is None and FrameRenderer(plain).gap_note() == ""


def test_the_time_plots_round_axis_has_whole_rounds_only():
    """A 3-round trace drew ticks at 0.5, 1.5, ... under "round" (matplotlib's default locator)."""
    from collnb.views.frames import FrameRenderer
    ren = FrameRenderer(A.run_algorithm("all_reduce", "recursive_doubling", 3))
    ren.rgb(1)
    ticks = [float(x) for x in ren.ax_time.get_xticks()]
    assert ticks and all(x == int(x) for x in ticks), ticks
