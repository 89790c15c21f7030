"""Replay a :class:`collnb.trace.Trace` round by round: heatmap, arrows, bytes, alpha-beta model.

One *frame* shows one round ``k`` (0 = the start, before any message):

* left, the rank (rows) x chunk (columns) heatmap after round ``k``. A cell's colour tells its
  provenance, in the colours of :mod:`collnb.heatmap`: one rank's colour = that rank's data; a
  white cell with a band of stripes = a combination (one stripe per contributing rank, and
  ``k/n`` = how many of the ``n`` ranks it holds); light grey = nothing there yet. Cells that
  received data in this round have a thick dark frame. Arrows are this round's transfers, from
  the sender's chunk to the receiver's: red = the receiver combines (reduce), blue = it
  overwrites (copy). In the last frame, chunks outside the primitive's result are faded;
* top right, the bytes each rank sent (filled) and received (outlined) in this round;
* bottom right, the running total: time predicted by the alpha-beta-gamma model
  (:mod:`collnb.costmodel`, Thakur et al. 2005 / Chan et al. 2007) round after round, beside the
  time the ranks measured, if the trace has it.

Entry points: :func:`replay` (an ipywidgets player: Play, round slider, speed),
:func:`explore_rounds` (pick primitive, algorithm and number of GPUs; runs on real ranks and
replays), :func:`compare` / :func:`compare_figure` (two algorithms side by side),
:func:`save_gif` and :func:`save_filmstrip` (headless files), :class:`FrameRenderer` (frames as
arrays/PNG and their data).

Drawing uses matplotlib's object API (``Figure`` + ``FigureCanvasAgg``; nothing touches pyplot's
global state) with blitting: the axes are drawn once, each frame redraws only what changes. The
heatmap itself (cells, values, arrows) is painted with Pillow into one image, because a few
hundred matplotlib text and arrow artists cost 100-300 ms per frame on a 2-core machine.
"""

from __future__ import annotations

import io
import math
import numbers
import os
import textwrap
from functools import lru_cache

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image, ImageDraw, ImageFont

from ..algorithms import DEFAULT_MODEL, CostModel, round_costs
from .heatmap import COMBINED_COLOR, EMPTY_COLOR, RANK_COLORS, format_value
from ..algorithms import Trace

__all__ = ["FrameRenderer", "paint_heatmap", "replay", "ReplayWidget", "explore_rounds", "RoundsExplorer",
           "compare", "CompareWidget", "compare_figure", "save_gif", "save_filmstrip"]

COPY_COLOR = (31, 78, 121)      # arrows: receiver overwrites
REDUCE_COLOR = (192, 57, 43)    # arrows: receiver combines
_INK = (17, 17, 17)
_GREY = (110, 110, 110)
_EMPTY = tuple(int(round(255 * v)) for v in EMPTY_COLOR)
_EMPTY_EDGE = (215, 215, 215)
_WHITE = tuple(int(round(255 * v)) for v in COMBINED_COLOR)
_RANK_RGB = [tuple(int(round(255 * v)) for v in c) for c in RANK_COLORS]


def _rank_rgb(r):
    return _RANK_RGB[r % len(_RANK_RGB)]


@lru_cache(maxsize=64)
def _font(size: int, bold: bool = False):
    from matplotlib import font_manager
    prop = font_manager.FontProperties(family="DejaVu Sans", weight="bold" if bold else "normal")
    return ImageFont.truetype(font_manager.findfont(prop), max(6, int(size)))


def _fmt(v) -> str:
    if isinstance(v, (np.bool_, bool)):
        return "T" if bool(v) else "F"
    if isinstance(v, (np.complexfloating, complex)):
        v = complex(v)
        return format_value(v) if abs(v.imag) > 0 else _fmt(v.real)
    if isinstance(v, (np.integer, int)):
        v = int(v)
        s = str(v)
        return s if len(s) <= 5 else f"{v:.1e}".replace("e+0", "e").replace("e+", "e")
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return format_value(v)
    if v.is_integer() and abs(v) < 1e5:
        return str(int(v))
    s = f"{v:.3g}"
    return s if len(s) <= 6 else f"{v:.1e}".replace("e+0", "e").replace("e-0", "e-")


def _units(x: float, kind: str):
    """(scale, unit) to show ``x`` bytes or seconds readably."""
    if kind == "bytes":
        for s, u in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if x >= s:
                return s, u
        return 1, "B"
    for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if x >= s:
            return s, u
    return 1e-9, "ns"


def _human(x: float, kind: str) -> str:
    s, u = _units(abs(x) if x else 0.0, kind)
    v = x / s
    return f"{v:.0f} {u}" if (kind == "bytes" and s == 1) else f"{v:.3g} {u}"


# ----------------------------------------------------------------------------------------------
# The heatmap of one round, painted with Pillow

def _bezier(p0, p1, bend):
    """Points of a quadratic Bezier from p0 to p1 bowing sideways by ``bend`` x length."""
    (x0, y0), (x1, y1) = p0, p1
    dx, dy = x1 - x0, y1 - y0
    cx, cy = (x0 + x1) / 2 - bend * dy, (y0 + y1) / 2 + bend * dx
    ts = np.linspace(0.0, 1.0, 24)
    xs = (1 - ts) ** 2 * x0 + 2 * (1 - ts) * ts * cx + ts ** 2 * x1
    ys = (1 - ts) ** 2 * y0 + 2 * (1 - ts) * ts * cy + ts ** 2 * y1
    return list(zip(xs.tolist(), ys.tolist()))


def _arrow(draw, p0, p1, color, width, head, bend):
    pts = _bezier(p0, p1, bend)
    # shorten the shaft so the head's tip lands on p1
    draw.line(pts[:-1], fill=color, width=width, joint="curve")
    (xa, ya), (xb, yb) = pts[-3], pts[-1]
    ang = math.atan2(yb - ya, xb - xa)
    left = (xb - head * math.cos(ang - 0.42), yb - head * math.sin(ang - 0.42))
    right = (xb - head * math.cos(ang + 0.42), yb - head * math.sin(ang + 0.42))
    draw.polygon([(xb, yb), left, right], fill=color)


def _in_margin(t) -> bool:
    """Whether transfer ``t`` is drawn in the margin right of the grid: several chunks, or one
    chunk between ranks that are not neighbours (a straight arrow would cross other ranks' cells,
    e.g. a ring's wrap-around from the last rank to rank 0)."""
    return len(t.chunks) > 1 or abs(t.src - t.dst) > 1


def _lanes(transfers) -> list:
    """Lane index of every transfer of one round drawn in the margin (:func:`_in_margin`; None
    for the others): transfers whose rank spans overlap get different lanes (greedy interval
    colouring)."""
    out = [None] * len(transfers)
    busy: list = []  # per lane: list of (lo, hi)
    order = sorted((i for i, t in enumerate(transfers) if _in_margin(t)),
                   key=lambda i: (min(transfers[i].src, transfers[i].dst), max(transfers[i].src, transfers[i].dst)))
    for i in order:
        t = transfers[i]
        lo, hi = min(t.src, t.dst), max(t.src, t.dst)
        for lane, spans in enumerate(busy):
            if all(hi < a or b < lo for a, b in spans):
                spans.append((lo, hi))
                out[i] = lane
                break
        else:
            busy.append([(lo, hi)])
            out[i] = len(busy) - 1
    return out


def _max_lanes(trace: Trace) -> int:
    m = 0
    for rnd in trace.rounds:
        lanes = [x for x in _lanes(rnd.transfers) if x is not None]
        if lanes:
            m = max(m, max(lanes) + 1)
    return m


_MIN_PX = 11  # smallest text painted in a replay frame (pixels per em; labels stay >= 10 px)


def _head_px(cell: int) -> int:
    return max(_MIN_PX, int(cell * 0.24))


def _layout(trace: Trace, cell: int, lanes: int | None = None):
    ws, C = trace.world_size, trace.n_chunks
    label_w = _font(_head_px(cell)).getlength(f"rank {ws - 1}")
    left = int(max(cell * 1.15 + 8, label_w + max(6, int(cell * 0.22)) + 16))
    top = int(max(cell * 0.55, _head_px(cell) + 6)) + 6
    lanes = _max_lanes(trace) if lanes is None else lanes
    lane_w = _lane_width(cell)
    right = left + C * cell + (10 + lanes * lane_w if lanes else 6)
    return left, top, right, top + ws * cell + 6


def _lane_width(cell: int) -> int:
    return max(7, int(cell * 0.26))


def paint_heatmap(trace: Trace, k: int, cell: int = 48, arrows: bool = True, values: bool | None = None,
                  scale: int = 2, lanes: int | None = None) -> np.ndarray:
    """The rank x chunk heatmap after round ``k`` with this round's arrows, as an RGB array.

    Args:
        trace: the trace. k: round, 0..n_rounds.
        cell: cell size in pixels (of the returned image).
        arrows: draw this round's transfers.
        values: write each chunk's first value in its cell (default: when ``cell >= 22`` and
            the trace has snapshots for round ``k``).
        scale: supersampling factor (2 = smooth arrows and text).
        lanes: width of the arrow margin in lanes (default: the most any round of the trace
            needs, so every frame of a trace has the same size).

    A transfer of one chunk is an arrow from the sender's cell to the receiver's cell. A transfer
    of several chunks (a whole buffer, a half, a subtree's chunks) is an arrow in the margin right
    of the grid, from the sender's row to the receiver's row; the receiver's framed cells show
    which chunks arrived.

    Returns:
        ``uint8`` array ``(H, W, 3)``. Cell (rank ``r``, chunk ``c``) spans pixels
        ``[top + r*cell, top + (r+1)*cell) x [left + c*cell, left + (c+1)*cell)`` where
        ``left, top`` = :func:`heatmap_origin` ``(trace, cell)``.
    """
    k = trace._check_round(k)
    ws, C = trace.world_size, trace.n_chunks
    S = max(1, int(scale))
    cs = cell * S
    lanes = _max_lanes(trace) if lanes is None else lanes
    left, top, W, H = _layout(trace, cell, lanes)
    img = Image.new("RGB", (W * S, H * S), (255, 255, 255))
    d = ImageDraw.Draw(img)
    prov = trace.provenance[k]
    try:
        vals = trace.chunk_values(k)
    except ValueError:
        vals = None
    if values is None:
        values = cell >= 22
    if not values:
        vals = None
    last = k == trace.n_rounds and k > 0
    received = set()
    for t in trace.transfers(k):
        for c in t.dst_chunks:
            received.add((t.dst, c))
    fsize = max(int(11.5 * S), int(cs * (0.30 if C <= 10 else 0.27)))
    small = max(int(10.5 * S), int(cs * 0.19))
    band = int(round(cs * 0.28))
    x0, y0 = left * S, top * S
    # column and row headers
    hf = _font(_head_px(cell) * S)
    for c in range(C):
        d.text((x0 + c * cs + cs / 2, y0 - 3 * S), f"c{c}", fill=_GREY, font=hf, anchor="md")
    for r in range(ws):
        cy = y0 + r * cs + cs / 2
        sw = int(cs * 0.22)
        d.rectangle([x0 - sw - 5 * S, cy - sw / 2, x0 - 5 * S, cy + sw / 2], fill=_rank_rgb(r))
        d.text((x0 - sw - 8 * S, cy), f"rank {r}", fill=_INK, font=hf, anchor="rm")
    for r in range(ws):
        for c in range(C):
            a, b = x0 + c * cs, y0 + r * cs
            m = int(prov[r, c])
            members = [s for s in range(ws) if m >> s & 1]
            if not members:
                d.rectangle([a, b, a + cs - 1, b + cs - 1], fill=_EMPTY, outline=_EMPTY_EDGE, width=S)
                continue
            if len(members) == 1:
                body = _rank_rgb(members[0])
                d.rectangle([a, b, a + cs - 1, b + cs - 1], fill=body)
            else:
                d.rectangle([a, b, a + cs - 1, b + cs - 1], fill=_WHITE)
                n = len(members)
                if cs / n >= 5 * S:
                    for i, s in enumerate(members):
                        xa = a + int(round(i * cs / n))
                        xb = a + int(round((i + 1) * cs / n)) - 1
                        d.rectangle([xa, b, max(xa, xb), b + band - 1], fill=_rank_rgb(s))
                    if cs >= 56 * S:
                        d.text((a + cs - 3 * S, b + cs - 2 * S), f"{n}/{ws}", fill=_GREY, font=_font(small),
                               anchor="rd")
                else:  # too many contributors for stripes (< 5 px each): how many of the ranks
                    bh = max(band, int(14 * S))
                    d.rectangle([a, b, a + cs - 1, b + bh - 1], fill=(90, 90, 90))
                    d.text((a + cs / 2, b + bh / 2), f"{n}/{ws}", fill=(255, 255, 255),
                           font=_font(small, bold=True), anchor="mm")
            d.rectangle([a, b, a + cs - 1, b + cs - 1], outline=(255, 255, 255), width=S)
            if vals is not None:
                ty = b + cs / 2 + (band / 2 if len(members) > 1 else 0) - (2 * S if len(members) > 1 else 0)
                txt = _fmt(vals[r, c])
                size = fsize if len(txt) <= 4 else max(_MIN_PX * S, int(fsize * 0.8))
                while size > _MIN_PX * S and _font(size).getlength(txt) > cs * 0.92:
                    size -= S
                f = _font(size)
                d.text((a + cs / 2, ty), txt, fill=_INK, font=f, anchor="mm")
    # fade chunks outside the result (final frame)
    arr = np.asarray(img, dtype=np.float32)
    if last:
        for r in range(ws):
            for c in range(C):
                if not trace.defined[r, c] and int(prov[r, c]):
                    a, b = x0 + c * cs, y0 + r * cs
                    arr[b:b + cs, a:a + cs] = 255 - (255 - arr[b:b + cs, a:a + cs]) * 0.30
        img = Image.fromarray(arr.astype(np.uint8))
        d = ImageDraw.Draw(img)
    for (r, c) in received:
        a, b = x0 + c * cs, y0 + r * cs
        d.rectangle([a + S, b + S, a + cs - 1 - S, b + cs - 1 - S], outline=_INK, width=max(2, int(cs * 0.06)))
    if arrows and k > 0:
        ts = trace.transfers(k)
        lane_of = _lanes(ts)
        head = cs * 0.22
        grid_r = x0 + C * cs
        lw_ = _lane_width(cell) * S
        for t, lane in zip(ts, lane_of):
            color = REDUCE_COLOR if t.reduce else COPY_COLOR
            if lane is None:
                width = max(S, int(cs * 0.045))
                sc, dc = t.chunks[0], t.dst_chunks[0]
                p0 = (x0 + sc * cs + cs / 2, y0 + t.src * cs + cs / 2)
                p1 = (x0 + dc * cs + cs / 2, y0 + t.dst * cs + cs / 2)
                dist_ = math.hypot(p1[0] - p0[0], p1[1] - p0[1])
                if dist_ < 1:
                    continue
                shrink = cs * 0.28
                ux, uy = (p1[0] - p0[0]) / dist_, (p1[1] - p0[1]) / dist_
                q0 = (p0[0] + ux * shrink, p0[1] + uy * shrink)
                q1 = (p1[0] - ux * shrink, p1[1] - uy * shrink)
                bend = 0.22 if abs(t.dst - t.src) <= 1 else 0.16
                _arrow(d, q0, q1, color, width, head, bend)
            else:
                width = max(S, int(min(cs * 0.05, lw_ * 0.35)))
                off = cs * 0.14
                lx = grid_r + 8 * S + lane * lw_ + lw_ / 2
                ys = y0 + t.src * cs + cs / 2 - off
                yd = y0 + t.dst * cs + cs / 2 + off
                d.line([(grid_r + 2 * S, ys), (lx, ys), (lx, yd), (grid_r + head * 0.9, yd)], fill=color,
                       width=width, joint="curve")
                tip = (grid_r + 2 * S, yd)
                hh = min(head, lw_ * 1.2)
                d.polygon([tip, (tip[0] + hh, yd - hh * 0.45), (tip[0] + hh, yd + hh * 0.45)], fill=color)
    if S > 1:
        img = img.resize((W, H), Image.Resampling.BOX)
    return np.asarray(img, dtype=np.uint8)


def heatmap_origin(trace: Trace, cell: int) -> tuple:
    """``(left, top)`` pixel offset of cell (0, 0) in :func:`paint_heatmap`'s image."""
    left, top, _, _ = _layout(trace, cell, 0)
    return left, top


def _auto_cell(trace: Trace, target: int = 440) -> int:
    """Cell side (pixels): ~``target`` / cells across, but wide enough to write the trace's widest
    value at >= 11.5 px (values are shown at every world size)."""
    cell = int(max(22, min(64, target // max(trace.world_size, trace.n_chunks))))
    return max(cell, _value_cell(trace))


def _value_cell(trace: Trace) -> int:
    """The narrowest cell that writes the trace's widest value at >= 11.5 px (0 without values)."""
    cell = 0
    if trace.has_snapshots:
        longest = 1
        for k in {0, trace.n_rounds}:
            try:
                vals = trace.chunk_values(k)
            except ValueError:
                continue
            longest = max([longest] + [len(_fmt(v)) for v in np.asarray(vals).ravel()])
        need = int(math.ceil(_font(12).getlength("8" * longest) / 0.93)) + 2
        cell = max(cell, min(need, 96), 34)
    return cell


# ----------------------------------------------------------------------------------------------
# One frame: heatmap + bytes + running total

class FrameRenderer:
    """Draws the frames of one trace (a Figure with an Agg canvas, reused across frames).

    Args:
        trace: :class:`collnb.trace.Trace`.
        model: :class:`collnb.costmodel.CostModel` for the predicted running total (default
            :data:`collnb.costmodel.DEFAULT_MODEL`).
        cell: heatmap cell size in pixels (default: fits ~440 px).
        dpi: figure dpi (pixel sizes do not depend on it).

    Use :meth:`rgb` / :meth:`png` for the pixels of round ``k`` and :meth:`data` for what the
    frame shows as plain data.
    """

    def __init__(self, trace: Trace, model: CostModel | None = None, cell: int | None = None, dpi: int = 80):
        if not isinstance(trace, Trace):
            raise TypeError(f"expected a collnb.trace.Trace; got {type(trace).__name__} (make one with "
                            f"collnb.algorithms.run_algorithm or Trace.load)")
        self.trace = trace
        self.model = model or DEFAULT_MODEL
        if cell:
            self.cell = int(cell)
        else:  # no wider than MAX_WIDTH while the values still fit
            self.cell = _auto_cell(trace)
            lanes = _max_lanes(trace)
            floor = max(22, _value_cell(trace))
            while self.cell > floor and _layout(trace, self.cell, lanes)[2] + 2 * self._PAD > self.MAX_WIDTH:
                self.cell -= 1
        self.dpi = dpi
        R = trace.n_rounds
        self.model_rounds = round_costs(trace, self.model) if R else np.zeros(0)
        self.model_cum = np.concatenate([[0.0], np.cumsum(self.model_rounds)])
        meas = trace.round_seconds()
        self.measured_cum = None if meas is None or not R else np.concatenate([[0.0], np.cumsum(meas)])
        self._sent = [trace.bytes_sent(k) for k in range(R + 1)]
        self._recv = [trace.bytes_received(k) for k in range(R + 1)]
        self._critical = np.array([max(int(s.max()), int(r.max())) if len(s) else 0
                                   for s, r in zip(self._sent, self._recv)], dtype=np.int64)
        self._build()
        self._cache: dict = {}

    # -------------------------------------------------------------- figure
    _TITLE_H = 92
    _PAD = 12
    _SIDE_W = 390
    #: widest frame drawn side by side (pixels); wider, the bytes and time plots go below the heatmap
    MAX_WIDTH = 1000

    def _build(self):
        t = self.trace
        self.lanes = _max_lanes(t)
        heat = paint_heatmap(t, 0, self.cell, lanes=self.lanes)
        hh, hw = heat.shape[:2]
        pad, title_h, side_w = self._PAD, self._TITLE_H, self._SIDE_W
        pt = 72.0 / self.dpi  # points per pixel: sizes below are pixels (>= 11), whatever the dpi
        self.stacked = hw + side_w + 3 * pad > self.MAX_WIDTH
        foot_h = 40
        if self.stacked:  # heatmap on top, the two plots side by side below it
            plots_h = 300
            W = max(hw + 2 * pad, 2 * side_w + 3 * pad)
            H = title_h + hh + plots_h + foot_h + pad
        else:
            W = hw + side_w + 3 * pad
            H = max(hh + title_h + pad + foot_h, 490)
        self.size = (W, H)
        self.heat_box = (pad, title_h, pad + hw, title_h + hh)  # x0, y0, x1, y1 in pixels, y down
        self.title_box = (pad, 26, W - pad, title_h - 2)
        fig = Figure(figsize=(W / self.dpi, H / self.dpi), dpi=self.dpi)
        FigureCanvasAgg(fig)
        self.fig = fig
        op = f" ({t.op})" if t.op else ""
        root = f", root {t.root}" if t.primitive in ("broadcast", "reduce", "scatter", "gather") else ""
        fig.text(pad / W, 1 - 8 / H, f"{t.primitive}{op} · {t.algorithm} · world size {t.world_size}{root} · "
                 f"{t.dtype}, {t.n_chunks} chunks x {t.count // max(1, t.n_chunks)} element(s)",
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
            rect_b = (x0, 0.56, wfrac, b_top - 0.56)
            rect_t = (x0, 0.13, wfrac, 0.29)
        ax_b = fig.add_axes(rect_b)
        ymax = max(1, int(max(max(s.max() for s in self._sent), max(r.max() for r in self._recv))))
        self._bscale, bunit = _units(ymax, "bytes")
        ranks = np.arange(t.world_size)
        colors = [np.array(_rank_rgb(r)) / 255 for r in ranks]
        self.bars_sent = ax_b.bar(ranks - 0.2, np.zeros(t.world_size), width=0.4, color=colors, animated=True)
        self.bars_recv = ax_b.bar(ranks + 0.2, np.zeros(t.world_size), width=0.4, color="white", edgecolor=colors,
                                  linewidth=1.2, animated=True)
        ax_b.set_ylim(0, ymax / self._bscale * 1.15)
        ax_b.set_xlim(-0.7, t.world_size - 0.3)
        ax_b.set_xticks(ranks if t.world_size <= 8 else ranks[::2])
        fs = 12 * pt  # 12 px
        ax_b.set_xlabel("rank", fontsize=fs)
        ax_b.set_ylabel(bunit, fontsize=fs)
        ax_b.set_title("bytes this round: sent (filled), received (outlined)", fontsize=fs)
        ax_b.tick_params(labelsize=11.5 * pt)
        # running total against the model
        ax_t = fig.add_axes(rect_t)
        R = t.n_rounds
        top_t = max(self.model_cum[-1], self.measured_cum[-1] if self.measured_cum is not None else 0.0, 1e-9)
        self._tscale, tunit = _units(top_t, "seconds")
        xs = np.arange(R + 1)
        # Measured times on a shared CPU can be 100x the model's (tuned for a network):
        # a log axis keeps both lines readable then, starting at round 1 (round 0 is zero).
        positive = [v for v in (self.model_cum[-1], None if self.measured_cum is None else self.measured_cum[-1])
                    if v is not None and v > 0]
        log = R >= 1 and len(positive) == 2 and max(positive) > 10 * min(positive)
        first = 1 if log else 0
        ax_t.plot(xs[first:], self.model_cum[first:] / self._tscale, "-o", ms=3, color="#555555",
                  label="α-β-γ model")
        if self.measured_cum is not None:
            cpus = t.meta.get("cpu_count")
            where = f" ({t.world_size} ranks on {cpus} CPU cores)" if cpus else ""
            ax_t.plot(xs[first:], self.measured_cum[first:] / self._tscale, "-s", ms=3, color="#2E7D32",
                      label="measured" + where)
        ax_t.set_xlim(-0.3, max(R, 1) + 0.3)
        if log:
            lows = [c[1] for c in (self.model_cum, self.measured_cum) if c is not None and c[1] > 0]
            ax_t.set_yscale("log")
            ax_t.set_ylim(min(lows) / self._tscale / 2, top_t / self._tscale * 3)
        else:
            ax_t.set_ylim(0, top_t / self._tscale * 1.25)
        ax_t.set_xlabel("round", fontsize=fs)
        ax_t.set_ylabel(tunit + (" (log scale)" if log else ""), fontsize=fs)
        ax_t.set_title("running total time", fontsize=fs)
        ax_t.tick_params(labelsize=11.5 * pt)
        ax_t.legend(fontsize=11 * pt, loc="center right" if log else "upper left", frameon=False)
        self.vline = ax_t.axvline(0, color="#C0392B", lw=1.2, animated=True)
        self.total_text = ax_t.text(0.98, 0.04, "", transform=ax_t.transAxes, ha="right", va="bottom",
                                    fontsize=11 * pt, animated=True)
        self.ax_bytes, self.ax_time = ax_b, ax_t
        fig.text(pad / W, 20 / H, "arrows: red = receiver combines, blue = receiver overwrites; "
                 "framed = received this round", fontsize=11 * pt, color="#444444", ha="left", va="bottom")
        fig.text(pad / W, 4 / H, "arrows in the right margin: several chunks, or ranks that are not neighbours",
                 fontsize=11 * pt, color="#444444", ha="left", va="bottom")
        fig.canvas.draw()
        self._bg = fig.canvas.copy_from_bbox(fig.bbox)

    def cell_box(self, rank: int, chunk: int) -> tuple:
        """Pixel box ``(x0, y0, x1, y1)`` (origin top-left, y down, as in :meth:`rgb` and the PNG)
        of heatmap cell (``rank``, ``chunk``) in every frame."""
        left, top = heatmap_origin(self.trace, self.cell)
        x, y = self.heat_box[0] + left + chunk * self.cell, self.heat_box[1] + top + rank * self.cell
        return (x, y, x + self.cell, y + self.cell)

    def _title_strip(self, k: int) -> np.ndarray:
        t = self.trace
        x0, y0, x1, y1 = self.title_box
        img = Image.new("RGB", (x1 - x0, y1 - y0), (255, 255, 255))
        d = ImageDraw.Draw(img)
        if k == 0:
            head = f"start (round 0 of {t.n_rounds}): every rank's buffer before any message"
            lines = []
        else:
            rnd = t.rounds[k - 1]
            head = (f"round {k} of {t.n_rounds} — {rnd.label}: {len(rnd.transfers)} message(s), "
                    f"busiest rank moves {_human(self._critical[k], 'bytes')}")
            f = _font(12)
            width = x1 - x0
            lines = []
            for para in textwrap.wrap(rnd.detail, 400):
                words, cur = para.split(), ""
                for w_ in words:
                    trial = (cur + " " + w_).strip()
                    if f.getlength(trial) > width and cur:
                        lines.append(cur)
                        cur = w_
                    else:
                        cur = trial
                lines.append(cur)
            lines = lines[:2]
        d.text((0, 2), head, fill=_INK, font=_font(15))
        for i, line in enumerate(lines):
            d.text((0, 26 + 16 * i), line, fill=(68, 68, 68), font=_font(12))
        return np.asarray(img)

    # -------------------------------------------------------------- data
    def data(self, k: int) -> dict:
        """What frame ``k`` shows, as plain data.

        Returns:
            dict with ``round`` (int), ``n_rounds``, ``label``, ``detail``, ``values``
            (``world_size`` x ``n_chunks`` list of the chunks' first values, or ``None``
            without snapshots), ``provenance`` (list of lists of sorted rank lists),
            ``contributors`` (counts), ``transfers`` (list of dicts: src, dst, chunks,
            dst_chunks, reduce, nbytes), ``bytes_sent`` / ``bytes_received`` (per rank, this
            round), ``critical_bytes`` (max over ranks), ``model_seconds`` /
            ``measured_seconds`` (running totals after round ``k``; measured may be None).
        """
        t = self.trace
        k = t._check_round(k)
        try:
            vals = t.chunk_values(k).tolist()
        except ValueError:
            vals = None
        prov = [[sorted(s) for s in row] for row in t.provenance_sets(k)]
        return dict(round=k, n_rounds=t.n_rounds, label=t.label(k),
                    detail="" if k == 0 else t.rounds[k - 1].detail, values=vals, provenance=prov,
                    contributors=t.contributors(k).tolist(),
                    transfers=[tr.to_dict() for tr in t.transfers(k)],
                    bytes_sent=self._sent[k].tolist(), bytes_received=self._recv[k].tolist(),
                    critical_bytes=int(self._critical[k]), model_seconds=float(self.model_cum[k]),
                    measured_seconds=None if self.measured_cum is None else float(self.measured_cum[k]))

    # -------------------------------------------------------------- drawing
    def draw(self, k: int) -> None:
        """Update the figure's pixels to round ``k``: restore the static background (axes drawn
        once), redraw the bars and the round marker, and paint the heatmap and the round's title
        straight into the Agg buffer."""
        t = self.trace
        k = t._check_round(k)
        fig = self.fig
        fig.canvas.restore_region(self._bg)
        for bar, v in zip(self.bars_sent, self._sent[k]):
            bar.set_height(v / self._bscale)
        for bar, v in zip(self.bars_recv, self._recv[k]):
            bar.set_height(v / self._bscale)
        self.vline.set_xdata([k, k])
        meas = "" if self.measured_cum is None else f", measured {_human(self.measured_cum[k], 'seconds')}"
        self.total_text.set_text(f"after round {k}: model {_human(self.model_cum[k], 'seconds')}{meas}")
        for bar in list(self.bars_sent) + list(self.bars_recv):
            self.ax_bytes.draw_artist(bar)
        self.ax_time.draw_artist(self.vline)
        self.ax_time.draw_artist(self.total_text)
        buf = np.asarray(fig.canvas.buffer_rgba())
        x0, y0, x1, y1 = self.heat_box
        buf[y0:y1, x0:x1, :3] = paint_heatmap(t, k, self.cell, lanes=self.lanes)
        buf[y0:y1, x0:x1, 3] = 255
        x0, y0, x1, y1 = self.title_box
        buf[y0:y1, x0:x1, :3] = self._title_strip(k)

    def rgb(self, k: int) -> np.ndarray:
        """Frame ``k`` as a ``uint8`` ``(H, W, 3)`` array."""
        self.draw(k)
        return np.asarray(self.fig.canvas.buffer_rgba())[..., :3].copy()

    def png(self, k: int) -> bytes:
        """Frame ``k`` as PNG bytes (cached per round)."""
        if k not in self._cache:
            buf = io.BytesIO()
            Image.fromarray(self.rgb(k)).save(buf, format="PNG", compress_level=1)
            self._cache[k] = buf.getvalue()
        return self._cache[k]


# ----------------------------------------------------------------------------------------------
# Files: GIF and filmstrip

FPS_RANGE = (0.01, 50.0)  # GIF frame delays are centiseconds in 16 bits; below 20 ms browsers slow them
SPEED_RANGE = (0.25, 8.0)  # the replay's rounds-per-second slider


def _check_file_args(trace, path, suffix, fn, cell=None, columns=None):
    """Raise TypeError/ValueError, naming the argument, for what the writers below cannot use."""
    if not isinstance(trace, Trace):
        raise TypeError(f"{fn}() takes a collnb.trace.Trace; got {type(trace).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{fn}() path must be a file name (str or os.PathLike); got {type(path).__name__}")
    if not os.fspath(path).lower().endswith(suffix):
        raise ValueError(f"{fn}() writes {suffix[1:].upper()}: end the file name with {suffix}; got {os.fspath(path)!r}")
    for name, value, lo, hi in (("cell", cell, 4, 200), ("columns", columns, 1, 64)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                  or not lo <= value <= hi):
            raise ValueError(f"{fn}() {name} must be an int from {lo} to {hi} (or None); got {value!r}")


def _check_rate(name, value, bounds, unit):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} must be {bounds[0]} to {bounds[1]} {unit}; got {value!r}")

def save_gif(trace: Trace, path, *, fps: float = 1.5, model: CostModel | None = None, cell: int | None = None,
             hold_last: float = 2.0) -> str:
    """Write the replay as an animated GIF: one frame for the start plus one per round.

    Frames are drawn headless by :class:`FrameRenderer` (matplotlib Agg) and written with
    Pillow's GIF writer (the writer behind matplotlib's ``PillowWriter``).

    Args:
        trace: a trace with snapshots (values are drawn from them).
        path: output file (``.gif``).
        fps: frames per second. hold_last: seconds the last frame stays.
        model, cell: as :class:`FrameRenderer`.

    Returns:
        ``path`` as str.

    Raises:
        TypeError: not a Trace, or a path that is not a file name.
        ValueError: the trace has no snapshots (``snapshots=False``); ``path`` does not end with
            ``.gif``; ``fps`` outside :data:`FPS_RANGE`; ``cell`` outside 4..200.
    """
    _check_file_args(trace, path, ".gif", "save_gif", cell=cell)
    _check_rate("fps", fps, FPS_RANGE, "frames per second")
    if not trace.has_snapshots:
        raise ValueError("this trace has no per-round snapshots (recorded with snapshots=False); "
                         "run it with snapshots=True to animate it")
    path = os.fspath(path)
    ren = FrameRenderer(trace, model=model, cell=cell)
    frames = [Image.fromarray(ren.rgb(k)) for k in range(trace.n_rounds + 1)]
    pal = [f.quantize(colors=255, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE) for f in frames]
    dur = int(round(1000 / fps))
    durations = [dur] * len(pal)
    durations[-1] = int(max(dur, 1000 * hold_last))
    pal[0].save(path, format="GIF", save_all=True, append_images=pal[1:], duration=durations, loop=0,
                optimize=False, disposal=1)
    return path


def save_filmstrip(trace: Trace, path, *, columns: int | None = None, cell: int | None = None, dpi: int = 80) -> str:
    """Write a static PNG of every round's heatmap (start + one panel per round), row by row.

    Args:
        trace: a trace with snapshots (without them, panels show provenance colours only).
        path: output ``.png``.
        columns: panels per row (default up to 6).
        cell: heatmap cell size in pixels (default: small enough for the grid).

    Returns:
        ``path`` as str.

    Raises:
        TypeError: not a Trace, or a path that is not a file name.
        ValueError: ``path`` does not end with ``.png``; ``columns`` outside 1..64 or ``cell``
            outside 4..200.
    """
    _check_file_args(trace, path, ".png", "save_filmstrip", cell=cell, columns=columns)
    path = os.fspath(path)
    R = trace.n_rounds
    n = R + 1
    cols = int(columns or min(6, n))
    rows = math.ceil(n / cols)
    cell = int(cell or max(12, min(40, 260 // max(trace.world_size, trace.n_chunks))))
    panels = [paint_heatmap(trace, k, cell, values=cell >= 22 and trace.has_snapshots) for k in range(n)]
    ph, pw = panels[0].shape[:2]
    title_h, head = 34, 54
    W = max(cols * (pw + 10) + 10, 720)  # room for the heading
    H = head + rows * (ph + title_h + 10)
    fig = Figure(figsize=(W / dpi, H / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    op = f" ({trace.op})" if trace.op else ""
    sent = trace.total_bytes_sent()
    fig.text(10 / W, 1 - 8 / H, f"{trace.primitive}{op} · {trace.algorithm} · world size {trace.world_size}: "
             f"{R} rounds, {_human(int(sent.max()) if len(sent) else 0, 'bytes')} sent by the busiest rank",
             fontsize=13, fontweight="bold", va="top")
    fig.text(10 / W, 1 - 30 / H, "colour = whose data (stripes: combined from several ranks); frame = received "
             "this round; red arrow = combine, blue = overwrite", fontsize=9, color="#444444", va="top")
    for k, img in enumerate(panels):
        r, c = divmod(k, cols)
        x = 10 + c * (pw + 10)
        ytop = head + r * (ph + title_h + 10)
        fig.figimage(img, xo=x, yo=H - ytop - title_h - ph, origin="upper")
        label = "start" if k == 0 else f"round {k}: {trace.rounds[k - 1].label}"
        fig.text((x + 4) / W, 1 - (ytop + 8) / H, label, fontsize=10, va="top", fontweight="bold" if k else "normal")
    fig.savefig(path, dpi=dpi, format="png")
    return path


# ----------------------------------------------------------------------------------------------
# Widgets

def _transfers_html(data: dict, limit: int = 24) -> str:
    import html as _h
    ts = data["transfers"]
    if not ts:
        return "<i>no messages: this is the state before the first round</i>"
    lines = []
    for t in ts[:limit]:
        ch = ",".join(str(c) for c in t["chunks"])
        dch = ",".join(str(c) for c in t["dst_chunks"])
        where = f"chunk {ch}" if ch == dch else f"chunk {ch} → chunk {dch}"
        verb = "combines" if t["reduce"] else "overwrites"
        lines.append(f"rank {t['src']} → rank {t['dst']}: {where} ({_human(t['nbytes'], 'bytes')}; "
                     f"rank {t['dst']} {verb})")
    more = f"<br>… and {len(ts) - limit} more" if len(ts) > limit else ""
    return "<code style='font-size:12px'>" + "<br>".join(_h.escape(x) for x in lines) + "</code>" + more


def _step_buttons(w, slider, first_tip: str, last_tip: str) -> tuple:
    """The ``|◀``, ``◀ step``, ``step ▶``, ``▶|`` buttons of a player: each moves ``slider``
    (0..``slider.max``) to round 0, one round back, one round on, or the last round. Each has a
    tooltip and the CSS classes ``collnb-step`` and ``collnb-step-NAME`` (first/back/forward/last).
    """
    bl, sl = w.Layout(width="44px"), w.Layout(width="68px")
    buttons = (w.Button(description="|◀", tooltip=first_tip, layout=bl),
               w.Button(description="◀ step", tooltip="step back one round", layout=sl),
               w.Button(description="step ▶", tooltip="step forward one round", layout=sl),
               w.Button(description="▶|", tooltip=last_tip, layout=bl))
    moves = (lambda k: 0, lambda k: k - 1, lambda k: k + 1, lambda k: slider.max)
    for b, name, move in zip(buttons, ("first", "back", "forward", "last"), moves):
        b.add_class("collnb-step")
        b.add_class(f"collnb-step-{name}")
        b.on_click(lambda _, move=move: setattr(slider, "value", min(max(move(slider.value), 0), slider.max)))
    return buttons


def _enable_steps(buttons: tuple, k: int, last: int) -> None:
    """Disable the step buttons that cannot move from round ``k`` (of 0..``last``)."""
    first, back, forward, end = buttons
    first.disabled = back.disabled = k <= 0
    forward.disabled = end.disabled = k >= last


class ReplayWidget:
    """The replay player for one trace (see :func:`replay`).

    Attributes:
        trace: the trace. renderer: its :class:`FrameRenderer`.
        play: ``ipywidgets.Play`` (``interval`` in ms per round).
        slider: ``ipywidgets.IntSlider`` (the round shown; jslink'd to ``play``; focused, the
            ← / → keys step it round by round, Home / End jump to the ends).
        first, back, forward, last: ``ipywidgets.Button`` ``"|◀"``, ``"◀ step"``, ``"step ▶"``, ``"▶|"`` (round 0, one round back,
            one round on, the last round), each with a tooltip; disabled where they cannot move.
        speed: ``ipywidgets.FloatSlider`` (rounds per second while playing; sets ``play.interval``).
        image: ``ipywidgets.Image`` (PNG of the current frame).
        info: ``ipywidgets.HTML`` (this round's caption and transfers).
        widget: the ``ipywidgets.VBox`` to display.
        current_round: the round shown now (int); ``current_data`` its :meth:`FrameRenderer.data`.

    Displayed in a notebook, it also shows a static picture of the current frame (kept current,
    hidden while the player is live) so that a saved notebook shows the replay without a kernel
    (see :func:`collnb.explorer.static_bundle`).
    """

    def __init__(self, trace: Trace, model: CostModel | None = None, cell: int | None = None, speed: float = 1.5):
        import ipywidgets as w
        if not trace.has_snapshots:
            raise ValueError("this trace has no per-round snapshots (recorded with snapshots=False); run it "
                             "with snapshots=True to replay it")
        self.trace = trace
        self.renderer = FrameRenderer(trace, model=model, cell=cell)
        self._display_ids: list = []
        R = trace.n_rounds
        self.play = w.Play(value=0, min=0, max=max(R, 0), step=1, interval=int(1000 / speed),
                           description="play", show_repeat=True,
                           tooltip="play / pause the rounds at the speed set on the right")
        self.slider = w.IntSlider(value=0, min=0, max=max(R, 0), step=1, description="round",
                                  continuous_update=True, layout=w.Layout(width="300px"),
                                  tooltip="drag, or click it and press ← / → to step round by round")
        self.first, self.back, self.forward, self.last = _step_buttons(
            w, self.slider, "first: round 0, before any message", f"last: round {R}, the result")
        self.speed = w.FloatSlider(value=speed, min=SPEED_RANGE[0], max=SPEED_RANGE[1], step=0.25,
                                   description="speed", readout_format=".2f",
                                   tooltip="rounds per second while playing",
                                   layout=w.Layout(width="230px"))
        self.speed_unit = w.Label("rounds/s")
        self.link = w.jslink((self.play, "value"), (self.slider, "value"))
        W, H = self.renderer.size
        # shown 1:1 (the browser would otherwise stretch it to the output's width, blurring it)
        self.image = w.Image(format="png", value=self.renderer.png(0),
                             layout=w.Layout(width=f"{W}px", max_width="100%", height="auto"))
        self.info = w.HTML()
        self.info.add_class("collnb-replay-info")
        self.current_round = 0
        self.current_data = self.renderer.data(0)
        self.slider.observe(self._on_round, names="value")
        self.play.observe(self._on_play, names="value")
        self.speed.observe(self._on_speed, names="value")
        self._show(0)
        controls = w.HBox([self.first, self.back, self.play, self.forward, self.last, self.slider,
                           self.speed, self.speed_unit],
                          layout=w.Layout(flex_flow="row wrap", align_items="center"))
        self.widget = w.VBox([controls, self.image, self.info])
        self.widget.add_class("collnb-replay")
        self.widget.add_class("collnb-live")  # hides the static picture while the player is live

    def _on_play(self, change):
        # jslink keeps them in step in the browser; without a front end (tests, voila export)
        # mirror it here so the Python side agrees.
        if self.slider.value != change["new"]:
            self.slider.value = change["new"]

    def _on_speed(self, change):
        self.play.interval = int(1000 / max(0.01, float(change["new"])))

    def _on_round(self, change):
        self._show(int(change["new"]))

    def _show(self, k: int):
        self.current_round = k
        self.current_data = self.renderer.data(k)
        self.image.value = self.renderer.png(k)
        d = self.current_data
        R = d["n_rounds"]
        if k == 0:
            head = f"<b>start</b> (round 0 of {R}): every rank's buffer before any message"
        else:
            head = f"<b>round {k}/{R}: {d['label']}</b>" + (f" — {d['detail']}" if d["detail"] else "")
        self.info.value = f"<div style='line-height:1.45'>{head}<br>{_transfers_html(d)}</div>"
        if hasattr(self, "first"):
            _enable_steps((self.first, self.back, self.forward, self.last), k, R)
        self._update_static()

    def step(self, n: int = 1) -> int:
        """Move ``n`` rounds on (negative: back), staying within 0..n_rounds; returns the round."""
        self.show_round(min(max(self.current_round + int(n), 0), self.trace.n_rounds))
        return self.current_round

    def show_round(self, k: int) -> None:
        """Move the player to round ``k`` (as dragging the slider does)."""
        self.slider.value = int(k)

    # -- saved notebooks -----------------------------------------------------------------------
    def static_bundle(self) -> dict:
        """The current frame as a static display bundle (see :func:`collnb.explorer.static_bundle`)."""
        from .explorer import RERUN_LINE, _captioned_png, static_bundle
        k = self.current_round
        png = self.renderer.png(k)
        t = self.trace
        return static_bundle(png, "replay", alt=f"{t.primitive} / {t.algorithm} at world size {t.world_size}, "
                             f"round {k} of {t.n_rounds}",
                             png_with_line=_captioned_png(png, RERUN_LINE.format(what="replay")),
                             attrs=dict(round=k, n_rounds=t.n_rounds, world_size=t.world_size))

    def _update_static(self):
        if not getattr(self, "_display_ids", None):
            return
        try:
            from IPython.display import update_display
            bundle = self.static_bundle()
            for did in list(self._display_ids):
                update_display(bundle, raw=True, display_id=did)
        except Exception:  # noqa: BLE001 - outside IPython
            pass

    def _ipython_display_(self):
        from IPython.display import display
        did = f"collnb-replay-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        display(self.widget)


def replay(trace: Trace, model: CostModel | None = None, cell: int | None = None, speed: float = 1.5) -> ReplayWidget:
    """An ipywidgets player for ``trace``: Play/pause, a round slider (jslink'd to Play), a speed
    slider (rounds per second) and the frame of the current round (see the module doc).

    Args:
        trace: :class:`collnb.trace.Trace` recorded with snapshots.
        model: cost model for the running total (default :data:`collnb.costmodel.DEFAULT_MODEL`;
            :func:`collnb.costmodel.calibrate` measures one).
        cell: heatmap cell size in pixels. speed: initial rounds per second.

    Returns:
        :class:`ReplayWidget` (displays itself in a notebook; ``.widget`` is the VBox).

    Raises:
        TypeError: not a Trace. ValueError: the trace has no snapshots; ``speed`` outside
        :data:`SPEED_RANGE` rounds per second.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"replay() takes a collnb.trace.Trace; got {type(trace).__name__}")
    _check_rate("speed", speed, SPEED_RANGE, "rounds per second")
    return ReplayWidget(trace, model=model, cell=cell, speed=speed)


class RoundsExplorer:
    """The "choose a primitive and the number of GPUs, then play" page (see :func:`explore_rounds`).

    Attributes:
        primitive, algorithm: ``ipywidgets.Dropdown``; ``world_size``: ``ipywidgets.IntSlider``
        ("ranks (world size)" on gloo, "GPUs (world size)" on NCCL; each one a real rank); ``status``: ``ipywidgets.HTML``;
        ``player``: the current :class:`ReplayWidget` (None until a run succeeded);
        ``trace``: its trace; ``widget``: the VBox to display.
    """

    def __init__(self, primitive="all_reduce", algorithm=None, world_size=4, dtype="float32", backend="gloo",
                 timeout=60.0):
        import ipywidgets as w
        from ..algorithms import ALGORITHMS, PRIMITIVES, algorithms_for
        from ..ranks import MAX_WORLD_SIZE
        algorithms_for(primitive)
        self._dtype, self._backend, self._timeout = dtype, backend, timeout
        self.primitive = w.Dropdown(options=list(PRIMITIVES), value=primitive, description="primitive")
        algs = list(ALGORITHMS[primitive])
        self.algorithm = w.Dropdown(options=algs, value=algorithm or algs[0], description="algorithm")
        # On gloo a rank is a process, not a GPU: the slider says so.
        ranks = "GPUs (world size)" if backend == "nccl" else "ranks (world size)"
        self.world_size = w.IntSlider(value=world_size, min=1, max=MAX_WORLD_SIZE, description=ranks,
                                      continuous_update=False, style={"description_width": "initial"})
        self.status = w.HTML()
        self.area = w.VBox()
        self.player = None
        self.trace = None
        self._busy = False
        self._display_ids: list = []
        self.primitive.observe(self._on_primitive, names="value")
        self.algorithm.observe(self._rerun, names="value")
        self.world_size.observe(self._rerun, names="value")
        self.widget = w.VBox([w.HBox([self.primitive, self.algorithm, self.world_size]), self.status, self.area])
        self.widget.add_class("collnb-live")
        self.run()

    def _on_primitive(self, change):
        from ..algorithms import ALGORITHMS
        algs = list(ALGORITHMS[change["new"]])
        self._busy = True
        try:
            self.algorithm.options = algs
            self.algorithm.value = algs[0]
        finally:
            self._busy = False
        self.run()

    def _rerun(self, change):
        if not self._busy:
            self.run()

    def run(self) -> None:
        """Run the chosen algorithm on real ranks and show its replay (errors go to ``status``)."""
        from ..algorithms import run_algorithm
        p, a, n = self.primitive.value, self.algorithm.value, int(self.world_size.value)
        self.status.value = f"running {p} / {a} on {n} real rank(s)…"
        try:
            tr = run_algorithm(p, a, n, dtype=self._dtype, backend=self._backend, timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001 - shown in the widget, which stays usable
            import html as _h
            self.status.value = (f"<span style='color:#C0392B'><b>{type(exc).__name__}</b>: "
                                 f"{_h.escape(str(exc).splitlines()[0] if str(exc) else '')}</span>")
            return
        self.trace = tr
        self.player = ReplayWidget(tr)
        self.player._display_ids = self._display_ids  # the static picture follows the current player
        self.player._update_static()
        self.area.children = (self.player.widget,)
        verdict = "equals" if tr.matches_builtin else "DIFFERS from"
        p_, q_ = tr.meta.get("fold", [0, 0])
        fold = f"; {q_} rank(s) fold onto {p_} (see the fold/unfold rounds)" if q_ else ""
        self.status.value = (f"{p} / {a} on {n} real rank(s): {tr.n_rounds} rounds{fold}; the result {verdict} "
                             f"torch.distributed's built-in {p}")

    def _ipython_display_(self):
        from IPython.display import display
        from .explorer import static_bundle
        did = f"collnb-rounds-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        bundle = self.player.static_bundle() if self.player is not None else \
            static_bundle(None, "replay", caption=self.status.value)
        display(bundle, raw=True, display_id=did)
        display(self.widget)


def explore_rounds(primitive: str = "all_reduce", algorithm: str | None = None, world_size: int = 4,
                   dtype="float32", backend: str = "gloo", timeout: float = 60.0) -> RoundsExplorer:
    """Pick a primitive, an algorithm and the number of GPUs (ranks); the algorithm runs on real
    ranks (:func:`collnb.algorithms.run_algorithm`) and its replay appears below.

    Returns:
        :class:`RoundsExplorer` (displays itself in a notebook).

    Raises:
        ValueError: unknown primitive, algorithm, dtype or backend, a dtype the backend refuses
            for the primitive, a world size outside 1..16, a timeout that is not a positive
            number of seconds (valid choices listed).
        TypeError: a primitive that is not a name, a world size that is not an int.
        RuntimeError: the backend cannot run here (e.g. NCCL without GPUs).
    """
    from ..algorithms import ALGORITHMS, _prepare_case
    from ..ranks import MAX_WORLD_SIZE
    if not isinstance(primitive, str):
        raise TypeError(f"primitive must be a name (str); choose one of {', '.join(ALGORITHMS)}; got {primitive!r}")
    if primitive not in ALGORITHMS:
        raise ValueError(f"no round-by-round algorithms for {primitive!r}; choose one of {', '.join(ALGORITHMS)}")
    if algorithm is not None and algorithm not in ALGORITHMS[primitive]:
        raise ValueError(f"{primitive} has no algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS[primitive])}")
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int from 1 to {MAX_WORLD_SIZE}; got {world_size!r}")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be between 1 and {MAX_WORLD_SIZE}; got {world_size}")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise ValueError(f"timeout must be a positive, finite number of seconds; got {timeout!r}")
    # dtype and backend as run_algorithm checks them (on real ranks, cached), before any widget
    _prepare_case(primitive, algorithm, world_size, dtype, "sum", 0, 1, None, None, False, False, backend)
    return RoundsExplorer(primitive, algorithm, world_size, dtype, backend, timeout)


# ----------------------------------------------------------------------------------------------
# Comparison

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
    fig = Figure(figsize=(980 / dpi, 600 / dpi), dpi=dpi)
    pt = 72.0 / dpi  # sizes below in pixels (>= 11), whatever the dpi
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(2, 3, width_ratios=[1, 1, 1.1], hspace=0.5, wspace=0.6)
    vmax = max(int(a.bytes_matrix().max()) if a.n_rounds else 0, int(b.bytes_matrix().max()) if b.n_rounds else 0, 1)
    scale, unit = _units(vmax, "bytes")
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
        extra = f" ({folds} fold/unfold)" if folds else ""
        ax.set_title(f"{t.algorithm}: {t.n_rounds} rounds{extra}", fontsize=14 * pt, fontweight="bold", pad=12)
        ax.set_xlabel("round", fontsize=12 * pt)
        ax.set_ylabel("rank", fontsize=12 * pt)
        ax.tick_params(labelsize=11.5 * pt)
        cb = fig.colorbar(im, ax=ax, fraction=0.05)
        cb.set_label(f"{unit} sent", fontsize=12 * pt)
        cb.ax.tick_params(labelsize=11.5 * pt)
    ax = fig.add_subplot(gs[1, 0:2])
    ranks = np.arange(n)
    sa, sb = a.total_bytes_sent() / scale, b.total_bytes_sent() / scale
    ax.bar(ranks - 0.2, sa, width=0.4, label=f"{a.algorithm}", color="#0072B2")
    ax.bar(ranks + 0.2, sb, width=0.4, label=f"{b.algorithm}", color="#D55E00")
    ax.set_xticks(ranks)
    ax.set_xlabel("rank", fontsize=12 * pt)
    ax.set_ylabel(f"{unit} sent in total", fontsize=12 * pt)
    ax.legend(fontsize=11 * pt)
    ax.set_title("bytes each rank sends over the whole run", fontsize=13 * pt)
    ax.tick_params(labelsize=11.5 * pt)
    ax2 = fig.add_subplot(gs[0, 2])
    ca = np.concatenate([[0], np.cumsum(round_costs(a, model))])
    cb = np.concatenate([[0], np.cumsum(round_costs(b, model))])
    ts, tu = _units(max(ca[-1], cb[-1], 1e-9), "seconds")
    ax2.plot(np.arange(len(ca)), ca / ts, "-o", ms=3, label=f"{a.algorithm}", color="#0072B2")
    ax2.plot(np.arange(len(cb)), cb / ts, "-o", ms=3, label=f"{b.algorithm}", color="#D55E00")
    ax2.set_xlabel("round", fontsize=12 * pt)
    ax2.set_ylabel(tu, fontsize=12 * pt)
    ax2.set_title(f"predicted running total, {_human(a.nbytes, 'bytes')} per rank", fontsize=13 * pt)
    ax2.legend(fontsize=11 * pt, loc="upper left")
    ax2.tick_params(labelsize=11.5 * pt)
    # the same two algorithms at other buffer sizes: where latency or bandwidth wins
    from ..algorithms import predict
    ax3 = fig.add_subplot(gs[1, 2])
    lo = max(1.0, min(float(a.nbytes or 1), 1024.0) / 2)
    sizes = np.logspace(np.log10(lo), 28 * np.log10(2), 30)
    for t, color in ((a, "#0072B2"), (b, "#D55E00")):
        seg = t.n_chunks if t.primitive == "broadcast" else None
        ys = [predict(t.primitive, t.algorithm, n, m, model, segments=seg, root=t.root).seconds for m in sizes]
        ax3.loglog(sizes, ys, color=color, label=t.algorithm)
        mine = predict(t.primitive, t.algorithm, n, t.nbytes or 1, model, segments=seg, root=t.root).seconds
        ax3.plot([max(t.nbytes, 1)], [mine], "o", color=color, ms=5)
    ax3.set_xlabel("bytes per rank (dot = this trace)", fontsize=12 * pt)
    ax3.set_ylabel("predicted time (s)", fontsize=12 * pt)
    ax3.set_title(f"α-β-γ model, {_human(lo, 'bytes')} to 256 MiB", fontsize=13 * pt)
    ax3.legend(fontsize=11 * pt, loc="upper left")
    ax3.tick_params(labelsize=11.5 * pt)
    fig.suptitle(f"{a.primitive} at world size {n}: {a.algorithm} vs {b.algorithm}", fontsize=16 * pt, fontweight="bold")
    return fig


class CompareWidget:
    """Two replays under one round slider (see :func:`compare`), stacked: each as large and
    readable as a single :func:`replay`, the summary figure above them.

    Attributes:
        left, right: :class:`FrameRenderer` of the two traces (``left`` drawn first, on top).
        slider: ``ipywidgets.IntSlider`` (0..max rounds; a trace with fewer rounds stays on its
            last).
        play: ``ipywidgets.Play``.
        first, back, forward, last: step buttons as in :class:`ReplayWidget`.
        images: the two ``ipywidgets.Image``.
        summary: ``ipywidgets.Image`` of :func:`compare_figure`.
        widget: the VBox.
    """

    def __init__(self, a: Trace, b: Trace, model: CostModel | None = None):
        import ipywidgets as w
        for t in (a, b):
            if not t.has_snapshots:
                raise ValueError("both traces need snapshots (run with snapshots=True)")
        fig = compare_figure(a, b, model)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        self.left = FrameRenderer(a, model)
        self.right = FrameRenderer(b, model)
        R = max(a.n_rounds, b.n_rounds)
        self._display_ids: list = []
        self.play = w.Play(value=0, min=0, max=R, interval=700, description="play",
                           tooltip="play / pause both replays")
        self.slider = w.IntSlider(value=0, min=0, max=R, description="round",
                                  tooltip="drag, or click it and press ← / → to step round by round")
        self.first, self.back, self.forward, self.last = _step_buttons(
            w, self.slider, "first: round 0", f"last: round {R}")
        self.link = w.jslink((self.play, "value"), (self.slider, "value"))
        self.images = tuple(w.Image(format="png", value=ren.png(0), layout=w.Layout(
            width=f"{ren.size[0]}px", max_width="100%", height="auto")) for ren in (self.left, self.right))
        self.captions = (w.HTML(), w.HTML())
        self.summary = w.Image(format="png", value=buf.getvalue())
        self.slider.observe(self._on_round, names="value")
        self.play.observe(lambda c: setattr(self.slider, "value", c["new"]), names="value")
        self._caption(0)
        controls = w.HBox([self.first, self.back, self.play, self.forward, self.last, self.slider],
                          layout=w.Layout(flex_flow="row wrap", align_items="center"))
        self.widget = w.VBox([self.summary, controls, self.captions[0], self.images[0],
                              self.captions[1], self.images[1]])
        self.widget.add_class("collnb-compare")
        self.widget.add_class("collnb-live")

    def rounds_shown(self, k: int) -> tuple:
        """The round each side shows when the slider is at ``k``."""
        return min(k, self.left.trace.n_rounds), min(k, self.right.trace.n_rounds)

    def _caption(self, k):
        for cap, ren, kk in zip(self.captions, (self.left, self.right), self.rounds_shown(k)):
            t = ren.trace
            stay = " (finished: stays on its last round)" if k > t.n_rounds else ""
            cap.value = (f"<b style='font-size:115%'>{t.algorithm}</b>: round {kk} of {t.n_rounds}{stay}")

    def _on_round(self, change):
        k = int(change["new"])
        ka, kb = self.rounds_shown(k)
        self.images[0].value = self.left.png(ka)
        self.images[1].value = self.right.png(kb)
        self._caption(k)
        _enable_steps((self.first, self.back, self.forward, self.last), k, self.slider.max)
        if self._display_ids:
            try:
                from IPython.display import update_display
                for did in self._display_ids:
                    update_display(self.static_bundle(), raw=True, display_id=did)
            except Exception:  # noqa: BLE001
                pass

    def static_bundle(self) -> dict:
        """The summary and both current frames as one static picture (see
        :func:`collnb.explorer.static_bundle`)."""
        from .explorer import RERUN_LINE, _captioned_png, static_bundle
        imgs = [np.asarray(Image.open(io.BytesIO(v)).convert("RGB")) for v in
                (self.summary.value, self.images[0].value, self.images[1].value)]
        W = max(i.shape[1] for i in imgs)
        canvas = np.full((sum(i.shape[0] for i in imgs) + 20, W, 3), 255, np.uint8)
        y = 0
        for im in imgs:
            canvas[y:y + im.shape[0], :im.shape[1]] = im
            y += im.shape[0] + 10
        out = io.BytesIO()
        Image.fromarray(canvas).save(out, format="PNG", compress_level=1)
        png = out.getvalue()
        return static_bundle(png, "comparison", alt=f"{self.left.trace.algorithm} vs {self.right.trace.algorithm}",
                             png_with_line=_captioned_png(png, RERUN_LINE.format(what="comparison")),
                             attrs=dict(round=self.slider.value))

    def _ipython_display_(self):
        from IPython.display import display
        did = f"collnb-compare-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        display(self.widget)


def compare(a, b=None, world_size: int | None = None, *, primitive: str | None = None, model=None,
            **run_kwargs) -> CompareWidget:
    """Compare two algorithms side by side.

    Either ``compare(trace_a, trace_b)``, or ``compare("ring", "recursive_doubling",
    world_size=8, primitive="all_reduce")``, which runs both on real ranks first (extra keyword
    arguments go to :func:`collnb.algorithms.run_algorithm`).

    Returns:
        :class:`CompareWidget`.
    """
    if isinstance(a, Trace) and isinstance(b, Trace):
        return CompareWidget(a, b, model)
    if isinstance(a, str) and isinstance(b, str):
        from ..algorithms import run_algorithms
        if primitive is None or world_size is None:
            raise ValueError("to run two algorithms, give primitive= and world_size=")
        ta, tb = run_algorithms([dict(primitive=primitive, algorithm=a, **run_kwargs),
                                 dict(primitive=primitive, algorithm=b, **run_kwargs)], world_size)
        return CompareWidget(ta, tb, model)
    raise TypeError("compare(trace_a, trace_b) or compare('algo_a', 'algo_b', world_size=N, primitive='...')")
