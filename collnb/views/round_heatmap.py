"""The picture of one round of a :class:`collnb.algorithms.Trace`: the rank (rows) x chunk (columns)
grid after round ``k``, coloured by provenance, with this round's transfers as arrows.

A cell's colour tells its provenance, in the colours of :mod:`collnb.views.palette`: one rank's
colour = that rank's data; a white cell with a band of stripes = a combination (one stripe per
contributing rank, and ``k/n`` = how many of the ``n`` ranks it holds); light grey = nothing there
yet. Cells that received data in this round have a thick dark frame. Arrows: red = the receiver
combines (reduce), blue = it overwrites (copy). In the last frame, chunks outside the primitive's
result are faded. Painted on a :class:`collnb.views.raster.Canvas` at 2x and shrunk (smooth arrows).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..algorithms import Trace, Transfer
from .palette import COMBINED_COLOR, COPY_COLOR, EMPTY_COLOR, INK, REDUCE_COLOR, rank_color
from .raster import Canvas, Pixels
from .values import format_value

__all__ = ["paint_heatmap", "heatmap_origin", "arrow_lanes", "fit_cell", "COPY_COLOR", "REDUCE_COLOR"]

_GREY = (110, 110, 110)
_EMPTY_EDGE = (215, 215, 215)
_WHITE = (255, 255, 255)
_DESCENT = 0.24  # DejaVu's descent (em): text "standing on" a line has its baseline this far above
_PROBE = Canvas(1, 1)


def _in_margin(t: Transfer) -> bool:
    """Whether transfer ``t`` is drawn in the margin right of the grid: several chunks, or one
    chunk between ranks that are not neighbours (a straight arrow would cross other ranks' cells,
    e.g. a ring's wrap-around from the last rank to rank 0)."""
    return len(t.chunks) > 1 or abs(t.src - t.dst) > 1


def _lanes(transfers: Sequence[Transfer]) -> list[int | None]:
    """Lane index of every transfer of one round drawn in the margin (:func:`_in_margin`; None
    for the others): transfers whose rank spans overlap get different lanes (greedy interval
    colouring)."""
    out: list[int | None] = [None] * len(transfers)
    busy: list[list[tuple[int, int]]] = []  # per lane: the (lo, hi) rank spans it holds
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


def arrow_lanes(trace: Trace) -> int:
    """How many lanes the arrow margin right of the grid needs for the busiest round of ``trace``
    (0 when every transfer is drawn cell to cell): the width every frame of the trace shares."""
    m = 0
    for rnd in trace.rounds:
        lanes = [x for x in _lanes(rnd.transfers) if x is not None]
        if lanes:
            m = max(m, max(lanes) + 1)
    return m


_MIN_PX = 11  # smallest text painted in a replay frame (pixels per em; labels stay >= 10 px)


def _head_px(cell: int) -> int:
    return max(_MIN_PX, int(cell * 0.24))


def _layout(trace: Trace, cell: int, lanes: int | None = None) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` in pixels: cell (0, 0)'s offset, and the picture's right and
    bottom edges (its width and height)."""
    ws, C = trace.world_size, trace.n_chunks
    label_w = _PROBE.measure(f"rank {ws - 1}", _head_px(cell))[0]
    left = int(max(cell * 1.15 + 8, label_w + max(6, int(cell * 0.22)) + 16))
    top = int(max(cell * 0.55, _head_px(cell) + 6)) + 6
    lanes = arrow_lanes(trace) if lanes is None else lanes
    lane_w = _lane_width(cell)
    right = left + C * cell + (10 + lanes * lane_w if lanes else 6)
    return left, top, right, top + ws * cell + 6


def _lane_width(cell: int) -> int:
    return max(7, int(cell * 0.26))



def paint_heatmap(trace: Trace, k: int, cell: int = 48, arrows: bool = True, values: bool | None = None,
                  scale: int = 2, lanes: int | None = None) -> Pixels:
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
    k = trace.check_round(k)
    ws, C = trace.world_size, trace.n_chunks
    S = max(1, int(scale))
    cs = cell * S
    lanes = arrow_lanes(trace) if lanes is None else lanes
    left, top, W, H = _layout(trace, cell, lanes)
    cv = Canvas(W * S, H * S)
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
    received = {(t.dst, c) for t in trace.transfers(k) for c in t.dst_chunks}
    fsize = max(int(11.5 * S), int(cs * (0.30 if C <= 10 else 0.27)))
    small = max(int(10.5 * S), int(cs * 0.19))
    band = int(round(cs * 0.28))
    x0, y0 = left * S, top * S
    # column and row headers
    hpx = _head_px(cell) * S
    for c in range(C):
        cv.text(f"c{c}", x0 + c * cs + cs / 2, y0 - 3 * S - _DESCENT * hpx, hpx, _GREY, va="bottom")
    for r in range(ws):
        cy = y0 + r * cs + cs / 2
        sw = int(cs * 0.22)
        cv.rect(x0 - sw - 5 * S, cy - sw / 2, x0 - 5 * S, cy + sw / 2, rank_color(r))
        cv.text(f"rank {r}", x0 - sw - 8 * S, cy, hpx, INK, ha="right")
    for r in range(ws):
        for c in range(C):
            a, b = x0 + c * cs, y0 + r * cs
            m = int(prov[r, c])
            members = [s for s in range(ws) if m >> s & 1]
            if not members:
                cv.rect(a, b, a + cs, b + cs, EMPTY_COLOR)
                cv.frame(a, b, a + cs, b + cs, _EMPTY_EDGE, S)
                continue
            if len(members) == 1:
                cv.rect(a, b, a + cs, b + cs, rank_color(members[0]))
            else:
                cv.rect(a, b, a + cs, b + cs, COMBINED_COLOR)
                n = len(members)
                if cs / n >= 5 * S:
                    for i, s in enumerate(members):
                        xa = a + int(round(i * cs / n))
                        xb = a + int(round((i + 1) * cs / n))
                        cv.rect(xa, b, max(xa + 1, xb), b + band, rank_color(s))
                    if cs >= 56 * S:
                        cv.text(f"{n}/{ws}", a + cs - 3 * S, b + cs - 2 * S - _DESCENT * small, small, _GREY,
                                ha="right", va="bottom")
                else:  # too many contributors for stripes (< 5 px each): how many of the ranks
                    bh = max(band, int(14 * S))
                    cv.rect(a, b, a + cs, b + bh, (90, 90, 90))
                    cv.text(f"{n}/{ws}", a + cs / 2, b + bh / 2, small, _WHITE, "bold")
            cv.frame(a, b, a + cs, b + cs, _WHITE, S)
            if vals is not None:
                ty = b + cs / 2 + (band / 2 if len(members) > 1 else 0) - (2 * S if len(members) > 1 else 0)
                txt = format_value(vals[r, c], short=True)
                size = fsize if len(txt) <= 4 else max(_MIN_PX * S, int(fsize * 0.8))
                while size > _MIN_PX * S and cv.measure(txt, size)[0] > cs * 0.92:
                    size -= S
                cv.text(txt, a + cs / 2, ty, size, INK)
    if last:  # fade chunks outside the result
        for r in range(ws):
            for c in range(C):
                if not trace.defined[r, c] and int(prov[r, c]):
                    cv.fade(x0 + c * cs, y0 + r * cs, x0 + (c + 1) * cs, y0 + (r + 1) * cs, 0.30)
    for (r, c) in received:
        a, b = x0 + c * cs, y0 + r * cs
        cv.frame(a + S, b + S, a + cs - S, b + cs - S, INK, max(2, int(cs * 0.06)))
    if arrows and k > 0:
        _paint_arrows(cv, trace.transfers(k), x0, y0, cs, C, _lane_width(cell) * S, S)
    if S > 1:
        cv = cv.shrink(S)
    return cv.pixels()


def _paint_arrows(cv: Canvas, ts: Sequence[Transfer], x0: int, y0: int, cs: int, C: int, lw_: int, S: int) -> None:
    """This round's transfers ``ts``: one chunk between neighbouring ranks as a curved arrow from
    cell to cell, the others as arrows in the margin right of the grid (one lane per overlap)."""
    head = cs * 0.22
    grid_r = x0 + C * cs
    for t, lane in zip(ts, _lanes(ts)):
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
            cv.arrow(q0, q1, color, width, head, 0.22 if abs(t.dst - t.src) <= 1 else 0.16)
        else:
            width = max(S, int(min(cs * 0.05, lw_ * 0.35)))
            off = cs * 0.14
            lx = grid_r + 8 * S + lane * lw_ + lw_ / 2
            ys = y0 + t.src * cs + cs / 2 - off
            yd = y0 + t.dst * cs + cs / 2 + off
            cv.line([(grid_r + 2 * S, ys), (lx, ys), (lx, yd), (grid_r + head * 0.9, yd)], color, width)
            tip = (grid_r + 2 * S, yd)
            hh = min(head, lw_ * 1.2)
            cv.polygon([tip, (tip[0] + hh, yd - hh * 0.45), (tip[0] + hh, yd + hh * 0.45)], color)


def heatmap_origin(trace: Trace, cell: int) -> tuple[int, int]:
    """``(left, top)`` pixel offset of cell (0, 0) in :func:`paint_heatmap`'s image."""
    left, top, _, _ = _layout(trace, cell, 0)
    return left, top


def fit_cell(trace: Trace, max_width: int) -> int:
    """The cell side (pixels) of a replay frame's heatmap: ~440 px across the grid (:func:`_auto_cell`),
    narrowed while the picture, its margin of :func:`arrow_lanes` included, is wider than ``max_width``,
    but never below what writes the trace's widest value (nor below 22 px)."""
    cell, lanes = _auto_cell(trace), arrow_lanes(trace)
    floor = max(22, _value_cell(trace))
    while cell > floor and _layout(trace, cell, lanes)[2] > max_width:
        cell -= 1
    return cell


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
            longest = max([longest] + [len(format_value(v, short=True)) for v in np.asarray(vals).ravel()])
        need = int(math.ceil(_PROBE.measure("8" * longest, 12)[0] / 0.93)) + 2
        cell = max(cell, min(need, 96), 34)
    return cell

