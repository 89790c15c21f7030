"""The bandwidth lab stays true on a busy machine (issue 19 item 8): references measured robustly
(interleaved, more repetitions, the median of the fastest half), measurements that break physics
and poor fits flagged in plain words beside the plot with how to measure more cleanly, legends
>= 10 px and never over a data point.

The flags are tested on synthetic measurements (no timing assertion); the sampler on a fake clock.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from collnb import bench as B
from collnb import costmodel as cm
from collnb.labs.bench import figure, references

TRUE = cm.CostModel(alpha=40e-6, beta=1 / 2e9, gamma=1 / 8e9)
SIZES = [1 << k for k in range(12, 25, 2)]  # 4 KiB .. 16 MiB
MEMCPY, TCP = 11.0, 4.0  # GB/s, as measured on this kind of machine (GUIDE.md)


def _rows(ws=(2, 4), noise=0.0, seed=0, memcpy=MEMCPY, tcp=TCP, algorithms=("builtin", "ring")):
    rng = np.random.default_rng(seed)
    rows = []
    for w in ws:
        for n in SIZES:
            for a in algorithms:
                A, Bb, G = cm.coefficients("all_reduce", "ring" if a == "builtin" else a, w, n)
                t = (TRUE.alpha * A + TRUE.beta * Bb + TRUE.gamma * G) * (1 + noise * abs(rng.standard_normal()))
                rows.append(dict(primitive="all_reduce", algorithm=a, backend="gloo", world_size=w, dtype="float32",
                                 nbytes=n, time_s=t, time_min_s=t * 0.9, time_max_s=t * 1.3, algbw_GBps=n / t / 1e9,
                                 busbw_GBps=cm.busbw("all_reduce", n, t, w), ok=True))
    for n in SIZES:
        for name, bw, backend in (("memcpy", memcpy(n) if callable(memcpy) else memcpy, "cpu"),
                                  ("tcp_loopback", tcp, "tcp")):
            t = n / bw / 1e9
            rows.append(dict(primitive=name, algorithm="reference", backend=backend, world_size=1, dtype="uint8",
                             nbytes=n, time_s=t, time_min_s=t, time_max_s=t, algbw_GBps=bw, busbw_GBps=bw, ok=True))
    return rows


def test_consistent_measurements_raise_no_flag():
    rows = _rows()
    assert B.measurement_flags(rows) == []
    fig = B.plot(rows)
    assert fig.collnb_flags == []
    assert "⚠" not in " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_memcpy_below_tcp_is_flagged_with_how_to_measure_cleanly():
    # the busy machine of the issue: memcpy 0.185 GB/s at one size, below TCP (4.47) and the collective
    rows = _rows(memcpy=lambda n: 0.185 if n == 1 << 20 else MEMCPY, tcp=4.47)
    flags = B.measurement_flags(rows)
    kinds = [k for k, _ in flags]
    assert "memcpy<tcp" in kinds
    text = dict(flags)["memcpy<tcp"]
    assert "memcpy measured 0.185 GB/s at 1 MiB, below one TCP stream (4.47 GB/s)" in text
    assert "the machine was busy" in text
    # busbw of the all_reduce at 1 MiB is above that memcpy: flagged as well
    assert "busbw>memcpy" in kinds and "is above memcpy (0.185 GB/s)" in dict(flags)["busbw>memcpy"]
    fig = B.plot(rows)
    notes = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "⚠ memcpy measured 0.185 GB/s" in notes and "For a cleaner measurement" in notes
    assert "--iters 50" in notes


def test_busbw_above_memcpy_is_flagged():
    rows = _rows(memcpy=0.05, tcp=0.01)
    flags = dict(B.measurement_flags(rows))
    assert set(flags) == {"busbw>memcpy"}
    assert "every byte a rank sends is copied at least once by a core" in flags["busbw>memcpy"]


def test_poor_fit_is_flagged_and_a_good_one_is_not():
    noisy = _rows(noise=2.0, seed=3)
    fits = cm.fit_each(noisy)
    poor = [f for f in fits.values() if f.rel_rms > figure.POOR_FIT]
    assert poor, {k: f.rel_rms for k, f in fits.items()}
    flags = B.measurement_flags(noisy, fits)
    worded = [t for k, t in flags if k == "poor fit"]
    assert len(worded) == len(poor)
    f = poor[0]
    assert any(f"all_reduce/{f.algorithm} misses its {f.n} points by {f.rel_rms * 100:.0f} %" in t for t in worded)
    assert not [k for k, _ in B.measurement_flags(_rows(noise=0.02, seed=3)) if k == "poor fit"]


def _point_boxes(fig, renderer):
    """Display-pixel positions of every plotted data point (markers and line vertices in data
    coordinates, inside their axes: what is drawn)."""
    pts = []
    for ax in fig.axes:
        area = ax.get_window_extent(renderer)
        for line in ax.get_lines():
            xy = line.get_xydata()
            if not len(xy) or line.get_transform() != ax.transData:  # axvlines: not data points
                continue
            d = ax.transData.transform(xy)
            keep = (d[:, 0] >= area.x0) & (d[:, 0] <= area.x1) & (d[:, 1] >= area.y0) & (d[:, 1] <= area.y1)
            pts.append(d[keep])
    return np.concatenate(pts)


@pytest.mark.parametrize("dpi", [80, 100])
def test_legends_are_readable_and_never_over_a_data_point(dpi):
    rows = _rows(ws=(2, 4, 8), algorithms=("builtin", "ring", "recursive_doubling", "rabenseifner"))
    fig = B.plot(rows, dpi=dpi)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pts = _point_boxes(fig, renderer)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 2 * 3
    for leg in legends:
        for t in leg.get_texts():
            assert t.get_fontsize() * dpi / 72 >= 10 - 1e-9, t.get_text()
        box = leg.get_window_extent(renderer)
        inside = (pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)
        assert not inside.any(), f"a legend covers {int(inside.sum())} data point(s)"
        # nor over another axes' plotting area
        for ax in fig.axes:
            if ax.get_visible() and ax.axison:
                assert not box.overlaps(ax.get_window_extent(renderer)) or box.y1 <= ax.get_window_extent(renderer).y0
    for ax in fig.axes:  # every other text too: titles, crossover labels, the notes
        for t in ax.texts:
            assert t.get_fontsize() * dpi / 72 >= 10 - 1e-9, t.get_text()[:40]


def test_figure_of_the_issue_saved_for_a_look(tmp_path):
    rows = _rows(memcpy=lambda n: 0.185 if n == 1 << 20 else MEMCPY, tcp=4.47, noise=1.5, seed=5)
    out = os.environ.get("COLLNB_SCREENSHOTS", str(tmp_path))
    os.makedirs(out, exist_ok=True)
    fig = B.plot(rows)
    fig.savefig(os.path.join(out, "bench_flags.png"))
    assert {k for k, _ in fig.collnb_flags} >= {"memcpy<tcp", "busbw>memcpy"}


# ------------------------------------------------------------------------------------------------
# the references: more repetitions, the median of the fastest half, sampled between launches


def test_best_half_median_ignores_slowed_repetitions_and_one_lucky_outlier():
    fast = [1.0, 1.1, 0.9, 1.05, 0.95]
    slowed = [50.0, 80.0, 30.0, 45.0]       # a busy machine: some repetitions 30-80x slower
    assert references.best_half_median(fast + slowed) == pytest.approx(1.0)
    assert references.best_half_median([0.01] + fast * 2) == pytest.approx(0.925)  # not the lucky 0.01
    with pytest.raises(ValueError):
        references.best_half_median([])


def test_sampler_accumulates_interleaved_samples_into_robust_rows(monkeypatch):
    """Samples taken at different moments of a sweep are pooled; time_s is the median of the
    fastest half; min/max stay the extremes (a fake clock: no timing assertion)."""
    s = references.ReferenceSampler(which=("memcpy",), reps=4, warmup=0)
    steps = [x for d in [1e-3, 5e-2] * 50 for x in (1.0, d)]  # a pause, then a 1 ms or a 50 ms "copy"
    clock = iter(np.cumsum(steps))
    monkeypatch.setattr(references.time, "perf_counter", lambda: next(clock))
    s.sample(4096)
    s.sample(4096)
    (row,) = s.rows()
    assert len(s.times[("memcpy", 4096)]) == 8 and row["ok"]
    assert row["time_s"] == pytest.approx(1e-3) and row["time_min_s"] == pytest.approx(1e-3)
    assert row["time_max_s"] == pytest.approx(5e-2)
    assert row["busbw_GBps"] == pytest.approx(4096 / 1e-3 / 1e9)


def test_reference_rows_take_at_least_the_minimum_repetitions(monkeypatch):
    seen = {}
    rows_of = references.ReferenceSampler.rows

    def rows(self, sizes=None):
        seen.update({k: len(v) for k, v in self.times.items()})
        return rows_of(self, sizes)

    monkeypatch.setattr(references.ReferenceSampler, "rows", rows)
    out = B.reference_rows([4096, 8192], iters=1, warmup=0)
    assert [r["primitive"] for r in out] == ["memcpy", "tcp_loopback", "local_reduce"] * 2
    assert all(r["ok"] for r in out)
    assert references.MIN_REPETITIONS >= 30
    assert seen and min(seen.values()) >= references.MIN_REPETITIONS, seen


def test_bench_samples_the_references_after_every_launch(monkeypatch):
    """bench() samples each size's references right after the collective at that size, once per
    world size, and once more at the end (interleaved with the collective)."""
    calls = []
    sample = references.ReferenceSampler.sample
    monkeypatch.setattr(references.ReferenceSampler, "sample",
                        lambda self, n: (calls.append(n), sample(self, n))[1])
    rows = B.bench("all_reduce", (2, 3), "4K:8K", iters=1, warmup=0, progress=False, as_frame=False)
    assert calls == [4096, 8192, 4096, 8192, 4096, 8192]
    refs = [r for r in rows if r["algorithm"] == "reference"]
    assert [(r["primitive"], r["nbytes"]) for r in refs] == [
        (p, n) for n in (4096, 8192) for p in ("memcpy", "tcp_loopback", "local_reduce")]
