"""One frame of a replay: the picture of round ``k`` of a :class:`collnb.algorithms.Trace` with its
numbers.

* left, the round's heatmap and arrows (:func:`collnb.views.round_heatmap.paint_heatmap`);
* top right, the bytes each rank sent (filled) and received (outlined) in this round;
* bottom right, the running total: time predicted by the alpha-beta-gamma model
  (:mod:`collnb.algorithms.costmodel`, Thakur et al. 2005 / Chan et al. 2007) round after round,
  beside the time the ranks measured, if the trace has it.

The plots use matplotlib's object API (``Figure`` + ``FigureCanvasAgg``; nothing touches pyplot's
global state) with blitting: the axes are drawn once, each frame redraws only the bars and the round
marker. The heatmap and the title are painted on :class:`collnb.views.raster.Canvas` straight into
the Agg buffer, because a few hundred matplotlib text and arrow artists cost 100-300 ms a frame.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, TypedDict, cast

import numpy as np
from numpy.typing import NDArray

from ..algorithms import DEFAULT_MODEL, CostModel, Trace, round_costs
from ..i18n import _, again, get_language
from ..units import format_bytes, format_rate, format_seconds
from .palette import INK, rank_color
from .raster import Box, Canvas, Pixels, encode_png, matplotlib_fonts, wrap_text
from .round_heatmap import arrow_lanes, fit_cell, heatmap_origin, paint_heatmap

if TYPE_CHECKING:  # matplotlib is imported when the first frame is built
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.container import BarContainer
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

__all__ = ["FrameRenderer", "axis_unit", "FrameData", "TransferData"]


class TransferData(TypedDict):
    """One message of a round as plain data (:meth:`collnb.algorithms.Transfer.to_dict`'s layout)."""

    src: int
    dst: int
    chunks: list[int]
    dst_chunks: list[int]
    reduce: bool
    nbytes: int  # a trace's transfers have their size (a Schedule's, None, are not frames)


class FrameData(TypedDict):
    """What frame ``k`` shows, as plain data (:meth:`FrameRenderer.data`)."""

    round: int
    n_rounds: int
    label: str
    detail: str
    values: list[list[object]] | None  # world_size x n_chunks: each chunk's first value; None without snapshots
    provenance: list[list[list[int]]]  # per rank and chunk: the sorted ranks whose data it holds
    contributors: list[list[int]]  # per rank and chunk: how many ranks
    transfers: list[TransferData]
    bytes_sent: list[int]  # per rank, this round
    bytes_received: list[int]
    critical_bytes: int  # the busiest rank's
    model_seconds: float  # running totals after round k
    measured_seconds: float | None

_SCALES = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def axis_unit(top: float, kind: str) -> tuple[float, str]:
    """``(scale, unit)`` for an axis whose largest value is ``top`` bytes (``kind="bytes"``) or
    seconds (``"seconds"``): the unit :func:`collnb.units.format_bytes` / ``format_seconds`` write
    ``top`` in, and its size (1024 ** n bytes, or 1e-3 ** n seconds)."""
    text = format_bytes(top) if kind == "bytes" else format_seconds(top)
    unit = text.split()[-1]
    return _SCALES[unit], unit


class FrameRenderer:
    """Draws the frames of one trace (a Figure with an Agg canvas, reused across frames).

    Args:
        trace: :class:`collnb.Trace`.
        model: :class:`collnb.algorithms.costmodel.CostModel` for the predicted running total (default
            :data:`collnb.algorithms.costmodel.DEFAULT_MODEL`).
        cell: heatmap cell size in pixels (default: fits ~440 px).
        dpi: figure dpi (pixel sizes do not depend on it).

    Use :meth:`rgb` / :meth:`png` for the pixels of round ``k`` and :meth:`data` for what the
    frame shows as plain data.
    """

    def __init__(self, trace: Trace, model: CostModel | None = None, cell: int | None = None, dpi: int = 80) -> None:
        if not isinstance(trace, Trace):
            raise TypeError(f"expected a collnb.Trace; got {type(trace).__name__} (make one with "
                            f"collnb.algorithms.run_algorithm or Trace.load)")
        self.trace = trace
        self.model = model or DEFAULT_MODEL
        if cell:
            self.cell = int(cell)
        else:  # no wider than MAX_WIDTH while the values still fit
            self.cell = fit_cell(trace, self.MAX_WIDTH - 2 * self._PAD)
        self.dpi = dpi
        R = trace.n_rounds
        #: seconds the model predicts for each round, and their running total from round 0 (0.0)
        self.model_rounds: NDArray[np.float64] = round_costs(trace, self.model) if R else np.zeros(0)
        self.model_cum: NDArray[np.float64] = np.concatenate([[0.0], np.cumsum(self.model_rounds)])
        meas = trace.round_seconds()
        self.measured_cum: NDArray[np.float64] | None = (None if meas is None or not R else
                                                         np.concatenate([[0.0], np.cumsum(meas)]))
        self._sent: list[NDArray[np.int64]] = [trace.bytes_sent(k) for k in range(R + 1)]  # bytes per rank
        self._recv: list[NDArray[np.int64]] = [trace.bytes_received(k) for k in range(R + 1)]
        self._critical = np.array([max(int(s.max()), int(r.max())) if len(s) else 0
                                   for s, r in zip(self._sent, self._recv)], dtype=np.int64)
        self._build()
        self._cache: dict[int, bytes] = {}  # round -> its PNG

    def _in_current_language(self) -> None:
        """Build the figure again when the language changed since it was built (its axes, legend,
        note and fonts are drawn once): a replay made before ``set_language("zh")`` draws its next
        frame wholly in Chinese, round details included, not half and half."""
        if get_language() != self._language:
            self._build()
            self._cache.clear()

    # -------------------------------------------------------------- figure
    _TITLE_H = 92
    _PAD = 12
    _SIDE_W = 390
    #: widest frame drawn side by side (pixels); wider, the bytes and time plots go below the heatmap
    MAX_WIDTH = 1000

    def _build(self) -> None:
        self._language = get_language()
        t = self.trace
        self.lanes = arrow_lanes(t)
        heat = paint_heatmap(t, 0, self.cell, lanes=self.lanes)
        hh, hw = heat.shape[:2]
        pad, title_h, side_w = self._PAD, self._TITLE_H, self._SIDE_W
        pt = 72.0 / self.dpi  # points per pixel: sizes below are pixels (>= 11), whatever the dpi
        self.stacked = hw + side_w + 3 * pad > self.MAX_WIDTH
        plots_h = 300 if self.stacked else 0
        W = max(hw + 2 * pad, 2 * side_w + 3 * pad) if self.stacked else hw + side_w + 3 * pad
        from matplotlib import rc_context  # noqa: PLC0415 - on first use only: importing views stays free of matplotlib

        with rc_context({"font.family": matplotlib_fonts()}):  # a Text keeps the family it is made with
            # the note under the plots, wrapped to the frame's width (a README-sized frame is ~650 px wide)
            self._note_lines = self._wrapped(self.gap_note(), W - 2 * pad, 11.0)
            self._note_h = self._NOTE_LINE_H * len(self._note_lines)
            foot_h = 40 + self._note_h
            if self.stacked:  # heatmap on top, the two plots side by side below it
                H = title_h + hh + plots_h + foot_h + pad
            else:
                H = max(hh + title_h + pad + foot_h, 490 + foot_h - 40)
            self.size = (W, H)  # pixels
            self.heat_box: Box = (pad, title_h, pad + hw, title_h + hh)  # x0, y0, x1, y1 in pixels, y down
            self.title_box: Box = (pad, 26, W - pad, title_h - 2)
            self._build_figure(W, H, hh, hw, pad, title_h, side_w, pt, plots_h)

    #: pixels a line of the note under the plots takes (11 px text, 1.25 line spacing, a little air)
    _NOTE_LINE_H = 22

    def _wrapped(self, text: str, width: float, px: float) -> list[str]:
        """``text``'s lines (its own line breaks kept) broken to ``width`` pixels as matplotlib's Agg
        renderer draws them at ``px`` pixels in the current ``font.family`` (English at spaces, Chinese
        between ideographs: :func:`collnb.views.raster.wrap_text`)."""
        if not text:
            return []
        from matplotlib.backends.backend_agg import RendererAgg  # noqa: PLC0415 - see _build
        from matplotlib.font_manager import FontProperties  # noqa: PLC0415

        renderer = RendererAgg(1, 1, self.dpi)
        prop = FontProperties(size=px * 72.0 / self.dpi)  # points; the family is rc's font.family

        def measure(line: str) -> float:
            return float(renderer.get_text_width_height_descent(line, prop, ismath=False)[0])

        return [line for para in text.split("\n") for line in (wrap_text(para, width, measure) or [""])]

    def _build_figure(self, W: int, H: int, hh: int, hw: int, pad: int, title_h: int, side_w: int, pt: float,
                      plots_h: int) -> None:
        """The figure, its axes drawn once (sizes in pixels; ``pt``: points per pixel)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - see _build
        from matplotlib.figure import Figure  # noqa: PLC0415

        t = self.trace
        fig = Figure(figsize=(W / self.dpi, H / self.dpi), dpi=self.dpi)
        self.canvas: FigureCanvasAgg = FigureCanvasAgg(fig)  # fig.canvas, as the Agg canvas it is
        self.fig: Figure = fig
        op = f" ({t.op})" if t.op else ""
        root = _(", root {root}").format(root=t.root) if t.primitive in ("broadcast", "reduce", "scatter",
                                                                           "gather") else ""
        fig.text(pad / W, 1 - 8 / H, _("{primitive}{op} · {algorithm} · world size {world_size}{root} · "
                                       "{dtype}, {n_chunks} chunks x {elements} element(s)").format(
                     primitive=t.primitive, op=op, algorithm=t.algorithm, world_size=t.world_size, root=root,
                     dtype=t.dtype, n_chunks=t.n_chunks, elements=t.count // max(1, t.n_chunks)),
                 fontsize=15 * pt, fontweight="bold", va="top", ha="left")
        # bytes per rank, this round
        if self.stacked:
            top_px = title_h + hh + 34
            ax_h = plots_h - 34 - 52
            half = (W - 3 * pad) / 2
            rect_b = ((pad + 58) / W, 1 - (top_px + ax_h) / H, (half - 70) / W, ax_h / H)
            rect_t = ((2 * pad + half + 58) / W, 1 - (top_px + ax_h) / H, (half - 70) / W, ax_h / H)
        else:
            x0 = (hw + 2 * pad + 58) / W
            wfrac = (side_w - 70) / W
            b_top = 1 - (title_h + 26) / H
            extra = self._note_h  # the note's lines under the plots, and the x label above them
            if extra:  # the plots' pixel sizes of a 490 px frame, raised above the note
                rect_b = (x0, (274 + extra) / H, wfrac, b_top - (274 + extra) / H)
                rect_t = (x0, (64 + extra) / H, wfrac, 142 / H)
            else:
                rect_b = (x0, 0.56, wfrac, b_top - 0.56)
                rect_t = (x0, 0.13, wfrac, 0.29)
        ax_b = fig.add_axes(rect_b)
        ymax = max(1, int(max(max(s.max() for s in self._sent), max(r.max() for r in self._recv))))
        self._bscale, bunit = axis_unit(ymax, "bytes")
        ranks = np.arange(t.world_size)
        colors = [rank_color(r) for r in range(t.world_size)]
        self.bars_sent: BarContainer = ax_b.bar(ranks - 0.2, np.zeros(t.world_size), width=0.4, color=colors,
                                                animated=True)
        self.bars_recv: BarContainer = ax_b.bar(ranks + 0.2, np.zeros(t.world_size), width=0.4, color="white",
                                                edgecolor=colors, linewidth=1.2, animated=True)
        ax_b.set_ylim(0, ymax / self._bscale * 1.15)
        ax_b.set_xlim(-0.7, t.world_size - 0.3)
        ax_b.set_xticks(ranks if t.world_size <= 8 else ranks[::2])
        fs = 12 * pt  # 12 px
        ax_b.set_xlabel("rank", fontsize=fs)
        ax_b.set_ylabel(bunit, fontsize=fs)
        ax_b.set_title(_("bytes this round: sent (filled), received (outlined)"), fontsize=fs)
        ax_b.tick_params(labelsize=11.5 * pt)
        # running total against the model
        from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - as rc_context above: on first use only

        ax_t = fig.add_axes(rect_t)
        R = t.n_rounds
        top_t = max(self.model_cum[-1], self.measured_cum[-1] if self.measured_cum is not None else 0.0, 1e-9)
        self._tscale, tunit = axis_unit(top_t, "seconds")
        xs = np.arange(R + 1)
        # Measured times on a shared CPU can be 100x the model's (tuned for a network):
        # a log axis keeps both lines readable then, starting at round 1 (round 0 is zero).
        positive = [v for v in (self.model_cum[-1], None if self.measured_cum is None else self.measured_cum[-1])
                    if v is not None and v > 0]
        log = R >= 1 and len(positive) == 2 and max(positive) > 10 * min(positive)
        first = 1 if log else 0
        ax_t.plot(xs[first:], self.model_cum[first:] / self._tscale, "-o", ms=3, color="#555555",
                  label=_("α-β-γ model"))
        if self.measured_cum is not None:
            cpus = t.meta.get("cpu_count")
            where = _(" ({world_size} ranks on {cpus} CPU cores)").format(world_size=t.world_size,
                                                                          cpus=cpus) if cpus else ""
            ax_t.plot(xs[first:], self.measured_cum[first:] / self._tscale, "-s", ms=3, color="#2E7D32",
                      label=_("measured") + where)
        ax_t.set_xlim(-0.3, max(R, 1) + 0.3)
        ax_t.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole: no 0.5 ticks at R = 3
        if log:
            lows = [c[1] for c in (self.model_cum, self.measured_cum) if c is not None and c[1] > 0]
            ax_t.set_yscale("log")
            ax_t.set_ylim(min(lows) / self._tscale / 2, top_t / self._tscale * 3)
        else:
            ax_t.set_ylim(0, top_t / self._tscale * 1.25)
        ax_t.set_xlabel(_("round"), fontsize=fs)
        ax_t.set_ylabel(tunit + (_(" (log scale)") if log else ""), fontsize=fs)
        ax_t.set_title(_("running total time"), fontsize=fs)
        ax_t.tick_params(labelsize=11.5 * pt)
        ax_t.legend(fontsize=11 * pt, loc="center right" if log else "upper left", frameon=False)
        self.vline: Line2D = ax_t.axvline(0, color="#C0392B", lw=1.2, animated=True)
        self.total_text: Text = ax_t.text(0.98, 0.04, "", transform=ax_t.transAxes, ha="right", va="bottom",
                                    fontsize=11 * pt, animated=True)
        self.ax_bytes, self.ax_time = ax_b, ax_t
        self.gap_text: Text | None = None
        if self._note_lines:  # why the two running totals are so far apart: above the arrows' legend
            self.gap_text = fig.text(pad / W, 38 / H, "\n".join(self._note_lines), fontsize=11 * pt, color="#2E7D32", ha="left",
                                     va="bottom", linespacing=1.25)
        fig.text(pad / W, 20 / H, _("arrows: red = receiver combines, blue = receiver overwrites; "
                                    "framed = received this round"), fontsize=11 * pt, color="#444444", ha="left",
                 va="bottom")
        fig.text(pad / W, 4 / H, _("arrows in the right margin: several chunks, or ranks that are not neighbours"),
                 fontsize=11 * pt, color="#444444", ha="left", va="bottom")
        self.canvas.draw()
        self._bg = self.canvas.copy_from_bbox(fig.bbox)

    def gap_note(self) -> str:
        """What the running-total panel's two lines mean when the measured one is far (over 3x) from the
        model's: the model's α and β are a network's, the measured time is gloo's per-round software cost
        on this machine's CPU cores (issue 34: "measured" near 15 ms beside a model near 0.3 ms, with
        nothing to explain it); ``""`` without measured times or when the two agree within 3x."""
        if self.measured_cum is None or not self.trace.n_rounds or self.model_cum[-1] <= 0:
            return ""
        ratio = float(self.measured_cum[-1] / self.model_cum[-1])
        if 1 / 3 <= ratio <= 3:
            return ""
        cpus = self.trace.meta.get("cpu_count")
        return _("measured = {ratio} × the model. The model: α = {alpha} per message, 1/β = {bandwidth}, a network's;\n"
                 "the measured time also holds gloo's software cost per round{on} (bandwidth.ipynb fits α, β here)."
                 ).format(
            ratio=f"{ratio:.0f}" if ratio >= 3 else f"{ratio:.2f}", alpha=format_seconds(self.model.alpha),
            bandwidth=format_rate(1 / self.model.beta) if self.model.beta > 0 else "∞",
            on=_(" on {cpus} shared CPU cores").format(cpus=cpus) if cpus else "")

    def cell_box(self, rank: int, chunk: int) -> Box:
        """Pixel box ``(x0, y0, x1, y1)`` (origin top-left, y down, as in :meth:`rgb` and the PNG)
        of heatmap cell (``rank``, ``chunk``) in every frame."""
        left, top = heatmap_origin(self.trace, self.cell)
        x, y = self.heat_box[0] + left + chunk * self.cell, self.heat_box[1] + top + rank * self.cell
        return (x, y, x + self.cell, y + self.cell)

    def heading(self, k: int) -> str:
        """The first line over frame ``k``, in the language spoken now: ``"round 2 of 6 —
        reduce-scatter: 4 message(s), busiest rank moves 4 B"`` (``"start (round 0 of 6): ..."``
        for ``k = 0``)."""
        t = self.trace
        k = t.check_round(k)
        if k == 0:
            return _("start (round 0 of {n_rounds}): every rank's buffer before any message").format(
                n_rounds=t.n_rounds)
        rnd = t.rounds[k - 1]
        return _("round {round} of {n_rounds} — {label}: {n} message(s), busiest rank moves {nbytes}").format(
            round=k, n_rounds=t.n_rounds, label=rnd.label, n=len(rnd.transfers), nbytes=format_bytes(self._critical[k]))

    def _title_strip(self, k: int) -> Pixels:
        t = self.trace
        x0, y0, x1, y1 = self.title_box
        cv = Canvas(x1 - x0, y1 - y0)
        head = self.heading(k)
        lines: list[str] = []
        if k:
            rnd = t.rounds[k - 1]
            for para in textwrap.wrap(again(rnd.detail), 400):  # in the language spoken now
                lines += wrap_text(para, cv.w, lambda s: cv.measure(s, 12)[0]) or [""]
            lines = lines[:2]
        cv.text(head, 0, 5, 15, INK, ha="left", va="top")
        for i, line in enumerate(lines):
            cv.text(line, 0, 28.5 + 16 * i, 12, (68, 68, 68), ha="left", va="top")
        return cv.pixels()

    # -------------------------------------------------------------- data
    def data(self, k: int) -> FrameData:
        """What frame ``k`` shows, as plain data.

        Returns:
            :class:`FrameData`: ``round`` (int), ``n_rounds``, ``label``, ``detail``, ``values``
            (``world_size`` x ``n_chunks`` list of the chunks' first values, or ``None``
            without snapshots), ``provenance`` (list of lists of sorted rank lists),
            ``contributors`` (counts), ``transfers`` (list of dicts: src, dst, chunks,
            dst_chunks, reduce, nbytes), ``bytes_sent`` / ``bytes_received`` (per rank, this
            round), ``critical_bytes`` (max over ranks), ``model_seconds`` /
            ``measured_seconds`` (running totals after round ``k``; measured may be None).
        """
        t = self.trace
        k = t.check_round(k)
        try:
            vals = t.chunk_values(k).tolist()
        except ValueError:
            vals = None
        prov = [[sorted(s) for s in row] for row in t.provenance_sets(k)]
        return FrameData(round=k, n_rounds=t.n_rounds, label=t.label(k),
                    detail="" if k == 0 else again(t.rounds[k - 1].detail), values=vals, provenance=prov,
                    contributors=t.contributors(k).tolist(),
                    transfers=[cast(TransferData, tr.to_dict()) for tr in t.transfers(k)],
                    bytes_sent=self._sent[k].tolist(), bytes_received=self._recv[k].tolist(),
                    critical_bytes=int(self._critical[k]), model_seconds=float(self.model_cum[k]),
                    measured_seconds=None if self.measured_cum is None else float(self.measured_cum[k]))

    # -------------------------------------------------------------- drawing
    def draw(self, k: int) -> None:
        """Update the figure's pixels to round ``k``: restore the static background (axes drawn
        once), redraw the bars and the round marker, and paint the heatmap and the round's title
        straight into the Agg buffer."""
        t = self.trace
        k = t.check_round(k)
        self._in_current_language()
        canvas = self.canvas
        canvas.restore_region(self._bg)
        for bar, v in zip(self.bars_sent, self._sent[k]):
            bar.set_height(v / self._bscale)
        for bar, v in zip(self.bars_recv, self._recv[k]):
            bar.set_height(v / self._bscale)
        self.vline.set_xdata([k, k])
        meas = "" if self.measured_cum is None else _(", measured {seconds}").format(
            seconds=format_seconds(self.measured_cum[k]))
        self.total_text.set_text(_("after round {round}: model {seconds}{measured}").format(
            round=k, seconds=format_seconds(self.model_cum[k]), measured=meas))
        for bar in list(self.bars_sent) + list(self.bars_recv):
            self.ax_bytes.draw_artist(bar)
        self.ax_time.draw_artist(self.vline)
        self.ax_time.draw_artist(self.total_text)
        buf = np.asarray(canvas.buffer_rgba())
        x0, y0, x1, y1 = self.heat_box
        buf[y0:y1, x0:x1, :3] = paint_heatmap(t, k, self.cell, lanes=self.lanes)
        buf[y0:y1, x0:x1, 3] = 255
        x0, y0, x1, y1 = self.title_box
        buf[y0:y1, x0:x1, :3] = self._title_strip(k)

    def rgb(self, k: int) -> Pixels:
        """Frame ``k`` as a ``uint8`` ``(H, W, 3)`` array."""
        self.draw(k)
        rgba: np.ndarray[tuple[int, int, int], np.dtype[np.uint8]] = np.asarray(self.canvas.buffer_rgba())
        return rgba[..., :3].copy()

    def png(self, k: int) -> bytes:
        """Frame ``k`` as PNG bytes (cached per round, in the language spoken now)."""
        self._in_current_language()
        if k not in self._cache:
            self._cache[k] = encode_png(self.rgb(k))
        return self._cache[k]

