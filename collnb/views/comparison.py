"""The comparison chart of two algorithms of one primitive: bytes each rank sends per round, in
total, the predicted running time, and the alpha-beta-gamma model across buffer sizes (where latency
or bandwidth wins). Matplotlib's object API (Agg canvas, no pyplot state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..algorithms import DEFAULT_MODEL, CostModel, Trace, predict, round_costs
from ..i18n import _
from ..units import format_bytes
from .frames import axis_unit
from .raster import matplotlib_fonts

if TYPE_CHECKING:  # imported by compare_figure only: importing views stays free of matplotlib
    from matplotlib.figure import Figure

__all__ = ["compare_figure"]

_A, _B = "#0072B2", "#D55E00"  # Okabe-Ito blue and vermilion: the first and the second algorithm


def compare_figure(a: Trace, b: Trace, model: CostModel | None = None, dpi: int = 80) -> Figure:
    """Two algorithms of the same primitive and world size side by side: bytes each rank sends
    per round (a rank x round grid per algorithm), total bytes per rank, and rounds and running
    predicted time.

    Returns:
        :class:`matplotlib.figure.Figure` (Agg canvas attached).

    Raises:
        ValueError: different primitive or world size.
    """
    if a.primitive != b.primitive or a.world_size != b.world_size:
        raise ValueError(f"compare two algorithms of the same primitive and world size; got "
                         f"{a.primitive}@{a.world_size} and {b.primitive}@{b.world_size}")
    model = model or DEFAULT_MODEL
    n = a.world_size
    from matplotlib import rc_context  # noqa: PLC0415

    with rc_context({"font.family": matplotlib_fonts()}):  # a Text keeps the family it is made with
        return _compare_figure(a, b, model, dpi, n)


def _compare_figure(a: Trace, b: Trace, model: CostModel, dpi: int, n: int) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(980 / dpi, 600 / dpi), dpi=dpi)
    pt = 72.0 / dpi  # sizes below in pixels (>= 11), whatever the dpi
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(2, 3, width_ratios=[1, 1, 1.1], hspace=0.5, wspace=0.6)
    vmax = max(int(a.bytes_matrix().max()) if a.n_rounds else 0, int(b.bytes_matrix().max()) if b.n_rounds else 0, 1)
    scale, unit = axis_unit(vmax, "bytes")
    for i, t in enumerate((a, b)):
        ax = fig.add_subplot(gs[0, i])
        M = t.bytes_matrix().T / scale if t.n_rounds else np.zeros((n, 1))
        im = ax.imshow(M, aspect="auto", cmap="Blues", vmin=0, vmax=vmax / scale, interpolation="nearest",
                       extent=(0.5, max(t.n_rounds, 1) + 0.5, n - 0.5, -0.5))
        folds = 0
        for k, rnd in enumerate(t.rounds, 1):
            if rnd.label in ("fold", "unfold"):
                folds += 1
                ax.text(k, -0.6, rnd.label, ha="center", va="bottom", fontsize=11 * pt, color="#B85C00")
        extra = _(" ({n} fold/unfold)").format(n=folds) if folds else ""
        ax.set_title(_("{algorithm}: {n_rounds} rounds{extra}").format(algorithm=t.algorithm, n_rounds=t.n_rounds,
                                                                        extra=extra),
                     fontsize=14 * pt, fontweight="bold", pad=12)
        ax.set_xlabel(_("round"), fontsize=12 * pt)
        ax.set_ylabel("rank", fontsize=12 * pt)
        ax.tick_params(labelsize=11.5 * pt)
        cb = fig.colorbar(im, ax=ax, fraction=0.05)
        cb.set_label(_("{unit} sent").format(unit=unit), fontsize=12 * pt)
        cb.ax.tick_params(labelsize=11.5 * pt)
    ax = fig.add_subplot(gs[1, 0:2])
    ranks = np.arange(n)
    sa, sb = a.total_bytes_sent() / scale, b.total_bytes_sent() / scale
    ax.bar(ranks - 0.2, sa, width=0.4, label=f"{a.algorithm}", color=_A)
    ax.bar(ranks + 0.2, sb, width=0.4, label=f"{b.algorithm}", color=_B)
    ax.set_xticks(ranks)
    ax.set_xlabel("rank", fontsize=12 * pt)
    ax.set_ylabel(_("{unit} sent in total").format(unit=unit), fontsize=12 * pt)
    ax.legend(fontsize=11 * pt)
    ax.set_title(_("bytes each rank sends over the whole run"), fontsize=13 * pt)
    ax.tick_params(labelsize=11.5 * pt)
    ax2 = fig.add_subplot(gs[0, 2])
    cum_a = np.concatenate([[0], np.cumsum(round_costs(a, model))])  # seconds after each round
    cum_b = np.concatenate([[0], np.cumsum(round_costs(b, model))])
    ts, tu = axis_unit(max(cum_a[-1], cum_b[-1], 1e-9), "seconds")
    ax2.plot(np.arange(len(cum_a)), cum_a / ts, "-o", ms=3, label=f"{a.algorithm}", color=_A)
    ax2.plot(np.arange(len(cum_b)), cum_b / ts, "-o", ms=3, label=f"{b.algorithm}", color=_B)
    ax2.set_xlabel(_("round"), fontsize=12 * pt)
    ax2.set_ylabel(tu, fontsize=12 * pt)
    ax2.set_title(_("predicted running total, {nbytes} per rank").format(nbytes=format_bytes(a.nbytes)),
                  fontsize=13 * pt)
    ax2.legend(fontsize=11 * pt, loc="upper left")
    ax2.tick_params(labelsize=11.5 * pt)
    # the same two algorithms at other buffer sizes: where latency or bandwidth wins
    ax3 = fig.add_subplot(gs[1, 2])
    lo = max(1.0, min(float(a.nbytes or 1), 1024.0) / 2)
    sizes = np.logspace(np.log10(lo), 28 * np.log10(2), 30)
    for t, color in ((a, _A), (b, _B)):
        seg = t.n_chunks if t.primitive == "broadcast" else None
        ys = [predict(t.primitive, t.algorithm, n, m, model, segments=seg, root=t.root).seconds for m in sizes]
        ax3.loglog(sizes, ys, color=color, label=t.algorithm)
        mine = predict(t.primitive, t.algorithm, n, t.nbytes or 1, model, segments=seg, root=t.root).seconds
        ax3.plot([max(t.nbytes, 1)], [mine], "o", color=color, ms=5)
    ax3.set_xlabel(_("bytes per rank (dot = this trace)"), fontsize=12 * pt)
    ax3.set_ylabel(_("predicted time (s)"), fontsize=12 * pt)
    ax3.set_title(_("α-β-γ model, {low} to 256 MiB").format(low=format_bytes(lo)), fontsize=13 * pt)
    ax3.legend(fontsize=11 * pt, loc="upper left")
    ax3.tick_params(labelsize=11.5 * pt)
    fig.suptitle(_("{primitive} at world size {world_size}: {left} vs {right}").format(
        primitive=a.primitive, world_size=n, left=a.algorithm, right=b.algorithm), fontsize=16 * pt, fontweight="bold")
    return fig
