"""A launch's per-rank timeline as a Gantt chart: one row per rank, each communication operation
split into its waiting part (until the last rank of the operation arrived, hatched grey, the same on
every rank) and its transfer (solid, in that rank's own colour: the legend's swatch shows every rank's
colour), the learner's regions as bars above, on one time axis in ms.

Input is the :class:`collnb.ranks.Timeline` of ``launch(fn, n, timeline=True)`` (its
spans are in ns from the earliest function start, one clock for every rank: see that module).
Painted with the views' raster engine (:mod:`.raster`) in the views' palette; readable up to world
size 8 (16 fits, with smaller rows).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Literal

from ..i18n import _, ngettext
from ..units import format_seconds
from .matrix import MatrixPicture
from .palette import GREY_TEXT, HATCH_COLOR, INK, rank_color
from .raster import Canvas, wrap_text

if TYPE_CHECKING:
    from ..ranks import Span, Timeline

__all__ = ["timeline_image", "timeline_png"]

_WAIT_BG = "#F2F2F2"
_REGION_COLOR = "#B9C7D8"
_REGION_EDGE = "#5A6F8A"


def _nice_step(span_ms: float, ticks: int = 8) -> float:
    """The 1-2-5 x 10^k step (ms) giving at most ``ticks`` intervals over ``span_ms``."""
    raw = max(span_ms, 1e-6) / ticks
    p: float = 10 ** math.floor(math.log10(raw))  # an int from 1 up
    for m in (1, 2, 5, 10):
        if m * p >= raw:
            return m * p
    return 10 * p


def _longest_wait(timeline: Timeline, start_ms: float, end_ms: float) -> Span | None:
    """The operation that waited longest among those drawn in the window (ms), or ``None``."""
    shown = [s for s in timeline.operations() if s.end / 1e6 > start_ms and s.start / 1e6 < end_ms]
    return max(shown, key=lambda s: s.waiting, default=None)


def timeline_image(timeline: Timeline, *, title: str = "", width: int = 1100, start_ms: float | None = None,
                   end_ms: float | None = None, labels: bool = True) -> MatrixPicture:
    """Paint ``timeline`` as a Gantt chart.

    Args:
        timeline: a :class:`collnb.ranks.Timeline` (``launch(..., timeline=True).timeline``).
        title: a line above the chart (default: world size and the clock).
        width: picture width in pixels (int, >= 500).
        start_ms, end_ms: the window shown, in ms from the timeline's origin (default: all of it).
        labels: write each operation's name on its bar where it fits.

    Returns:
        :class:`collnb.views.matrix.MatrixPicture` (``.png`` bytes, ``.pixels`` ``(h, w, 3)`` uint8;
        ``.labels``: every text painted, ``(text, size_px, (x0, y0, x1, y1))``; shown as a PNG in a
        notebook; ``.save(path)``). The title and the note under the axis (the longest wait) wrap to
        the width, the legend flows onto more rows, and a bar's name is left out where it would
        cover another's: no two texts overlap.

    Raises:
        ValueError: ``width`` < 500, a timeline with no ranks, or ``end_ms <= start_ms``.
    """
    if width < 500:
        raise ValueError(_("width must be >= 500 pixels; got {width}").format(width=width))
    n = timeline.world_size
    if n < 1:
        raise ValueError(_("the timeline has no ranks"))
    t0 = 0.0 if start_ms is None else float(start_ms)
    t1 = timeline.end / 1e6 if end_ms is None else float(end_ms)
    if t1 <= t0:
        raise ValueError(_("end_ms ({end}) must be after start_ms ({start})").format(end=t1, start=t0))
    max_depth = max((s.depth for s in timeline.regions()), default=-1) + 1
    region_h = 12 if n <= 8 else 8
    comm_h = 26 if n <= 8 else 16
    row_h = comm_h + region_h * max_depth + 14
    left, right = 78, 18
    plot_w = width - left - right
    probe = Canvas(1, 1)
    # the title, wrapped to the picture's width
    title = title or ngettext("timeline of {n} rank (one clock: CLOCK_MONOTONIC)",
                              "timeline of {n} ranks (one clock: CLOCK_MONOTONIC)", n).format(n=n)
    heading = wrap_text(title, width - left - right, lambda t: probe.measure(t, 15, "bold")[0]) or [""]
    # the legend: its items side by side, flowing onto a new row where the next would not fit
    items: list[tuple[Literal["wait", "transfer", "region"], str]] = [("wait", _("waiting for the last rank")),
             ("transfer", _("transfer, solid in each rank's colour (until completed on that rank)"))]
    if max_depth:
        items.append(("region", _("region (collnb.region / record_function)")))
    shown = min(n, 8)
    stripe = max(4, 26 // shown)
    # (kind, its text's lines, x, row, swatch width)
    legend: list[tuple[Literal["wait", "transfer", "region"], list[str], float, int, int]] = []
    lx: float = left
    row = 0
    for kind, text in items:
        swatch = shown * stripe if kind == "transfer" else 26
        lines = [text]
        need = swatch + 6 + probe.measure(text, 12)[0]
        if lx > left and lx + need > width - right:
            lx, row = left, row + 1
        if lx + need > width - right:  # alone on its row and still too wide: its text wraps
            lines = wrap_text(text, width - right - lx - swatch - 6, lambda t: probe.measure(t, 12)[0])
            need = swatch + 6 + max(probe.measure(t, 12)[0] for t in lines)
        legend.append((kind, lines, lx, row, swatch))
        row += len(lines) - 1
        lx = lx + need + 20 if len(lines) == 1 else width
    legend_y = 20 * len(heading) + 14  # the first legend row's top
    top = legend_y + 20 * (row + 1) + 8
    # the note under the axis, wrapped: on its own lines below the axis label, never over it
    longest = _longest_wait(timeline, t0, t1)
    note: list[str] = []
    if longest is not None and longest.waiting:
        note = wrap_text(_("longest wait: rank {rank}, {name} #{index}, {seconds} before its last rank arrived").format(
            rank=longest.rank, name=longest.name, index=longest.index,
            seconds=format_seconds(longest.waiting / 1e9)), width - left - right, lambda t: probe.measure(t, 12)[0])
    axis_y = top + n * row_h + 4
    h = axis_y + 44 + 18 * len(note) + (6 if note else 0)
    cv = Canvas(width, h)
    cv.labels = []
    scale = plot_w / (t1 - t0)

    def x_of(ns: float) -> float:
        return left + (ns / 1e6 - t0) * scale

    for i, line in enumerate(heading):
        cv.text(line, left, 16 + 20 * i, 15, INK, "bold", ha="left")
    for kind, lines, x, row, swatch in legend:
        y0 = legend_y + 20 * row
        if kind == "wait":
            cv.hatch(x, y0, x + swatch, y0 + 14, _WAIT_BG, HATCH_COLOR, period=8, width=2)
            cv.frame(x, y0, x + swatch, y0 + 14, GREY_TEXT, 1)
        elif kind == "transfer":  # solid in each rank's own colour: the swatch shows every rank's colour side by side
            for r in range(shown):
                cv.rect(x + r * stripe, y0, x + (r + 1) * stripe, y0 + 14, rank_color(r))
            cv.frame(x, y0, x + swatch, y0 + 14, GREY_TEXT, 1)
        else:
            cv.rect(x, y0 + 2, x + swatch, y0 + 12, _REGION_COLOR)
            cv.frame(x, y0 + 2, x + swatch, y0 + 12, _REGION_EDGE, 1)
        for i, text in enumerate(lines):
            cv.text(text, x + swatch + 6, y0 + 7 + 20 * i, 12, INK, ha="left")
    # grid and axis: ticks far enough apart for their labels, none past the picture's edge
    step = _nice_step(t1 - t0)
    widest = max(probe.measure(f"{t:g}", 12)[0] for t in (t0, t1, step, t1 - step))
    while step * scale < widest + 12:
        step = _nice_step(t1 - t0, max(1, int((t1 - t0) / step) - 1))
    tick = math.ceil(t0 / step) * step
    while tick <= t1 + 1e-9:
        x = left + (tick - t0) * scale
        cv.rect(x, top - 4, x + 1, axis_y, "#E4E4E4")
        label = f"{tick:g}"
        half = probe.measure(label, 12)[0] / 2 + 1
        cv.text(label, min(max(x, half), width - half), axis_y + 12, 12, GREY_TEXT)
        tick += step
    cv.rect(left, axis_y, left + plot_w, axis_y + 1, GREY_TEXT)
    cv.text(_("time since the first rank started (ms)"), left + plot_w / 2, axis_y + 32, 12, GREY_TEXT)
    for i, line in enumerate(note):
        cv.text(line, left, axis_y + 52 + 18 * i, 12, GREY_TEXT, ha="left")

    # (rank, row) -> the x intervals of the bar labels written there: no label over another
    placed: dict[tuple[int, int | str], list[tuple[float, float]]] = {}

    def free(key: tuple[int, int | str], x0: float, x1: float) -> bool:
        spans = placed.setdefault(key, [])
        if any(x0 < b + 3 and a < x1 + 3 for a, b in spans):
            return False
        spans.append((x0, x1))
        return True

    for rank in range(n):
        y = top + rank * row_h
        cv.text(f"rank {rank}", left - 10, y + region_h * max_depth + comm_h / 2, 13, INK, "bold", ha="right")
        cv.rect(left, y + row_h - 3, left + plot_w, y + row_h - 2, "#EEEEEE")
        for s in timeline.regions(rank):
            ry = y + s.depth * region_h
            x0, x1 = max(left, x_of(s.start)), min(left + plot_w, x_of(s.end))
            if x1 <= left or x0 >= left + plot_w:
                continue
            x1 = max(x1, x0 + 1)
            cv.rect(x0, ry, x1, ry + region_h - 2, _REGION_COLOR)
            cv.frame(x0, ry, x1, ry + region_h - 2, _REGION_EDGE, 1)
            tw = cv.measure(s.name, 10)[0]
            if labels and x1 - x0 > tw + 6 and free((rank, s.depth), x0 + 3, x0 + 3 + tw):
                cv.text(s.name, x0 + 3, ry + (region_h - 2) / 2, 10, INK, ha="left")
        cy = y + region_h * max_depth
        color = rank_color(rank)
        names: list[tuple[float, float, str]] = []  # (x0, x1, name) of each bar drawn
        for s in timeline.operations(rank):
            xs, xr, xe = x_of(s.start), x_of(max(s.ready, s.start)), x_of(s.end)
            if xe < left or xs > left + plot_w:
                continue
            xs, xr, xe = (min(max(v, left), left + plot_w) for v in (xs, xr, xe))
            xe = max(xe, xs + 1)
            if xr > xs:
                cv.hatch(xs, cy, min(xr, xe), cy + comm_h, _WAIT_BG, HATCH_COLOR, period=8, width=2)
            if xe > xr:
                cv.rect(xr, cy, xe, cy + comm_h, color)
            cv.frame(xs, cy, xe, cy + comm_h, GREY_TEXT if s.completed else "#D62728", 1)
            name = s.name if s.kind == "collective" else f"{s.name}{'→' if s.name in ('send', 'isend') else '←'}{s.peer}"
            # operations in flight together over (most of) one bar (batch_isend_irecv's isend and irecv)
            # share one label, "isend→1 + irecv←1"
            for k, (a, b, other) in enumerate(names):
                if min(b, xe) - max(a, xs) > 0.5 * min(b - a, xe - xs):
                    names[k] = (min(a, xs), max(b, xe), f"{other} + {name}")
                    break
            else:
                names.append((xs, xe, name))
        for xs, xe, name in names:
            tw = cv.measure(name, 11)[0]
            mid = (xs + xe) / 2
            if labels and xe - xs > tw + 6 and free((rank, "ops"), mid - tw / 2, mid + tw / 2):
                cv.text(name, mid, cy + comm_h / 2, 11, INK)
    return MatrixPicture(cv.png(), cv.pixels(), cv.labels)


def timeline_png(timeline: Timeline, path: str | os.PathLike[str], *, title: str = "", width: int = 1100,
                 start_ms: float | None = None, end_ms: float | None = None, labels: bool = True) -> str:
    """Paint ``timeline`` (:func:`timeline_image`, same keywords) and write the PNG to ``path``;
    returns the path as str."""
    timeline_image(timeline, title=title, width=width, start_ms=start_ms, end_ms=end_ms, labels=labels).save(path)
    return str(path)
