"""Paint the rank x chunk heatmap of a :class:`collnb.collectives.RunResult`: before | after side by side.

How to read one (the legend under each figure says the same):

* one row per rank, one column per chunk; every cell shows the chunk's value;
* a cell's colour says where its data came from: a filled cell in one rank's colour = that
  rank's data (the ``before`` panel is therefore one colour per row); a white cell with a band of
  colours along its top = the chunk was combined from several ranks (a reduction, one stripe per
  contributing rank; for ``barrier``: the ranks each departure waited for);
* grey hatched cells are outputs the primitive leaves undefined (e.g. every rank but ``dst``
  after ``reduce``); they show whatever the buffer happens to hold;
* a thick red outline marks a chunk that differs from the reference computed without
  ``torch.distributed``, with the expected value written under it ("exp 6");
* ``exact 280`` under a value marks a dtype effect: the float64 result of the same inputs
  differs (int8 SUM wrapped, float16 overflowed, bfloat16 rounded);
* the column right of ``after`` gives each rank's verdict (✓, ✗, undefined).

The whole picture is painted on one :class:`collnb.views.raster.Canvas` (:func:`heatmap_image`:
Pillow rectangles and FreeType text, ~10 ms at world size 8 on 2 cores) and encoded as PNG
(:func:`heatmap_png`), headless and thread-safe; :func:`heatmap_figure` wraps the same
pixels in a :class:`matplotlib.figure.Figure` with the Agg canvas (object API only, never pyplot's
global state). The content comes from :func:`collnb.views.grid.heatmap_grid` (plain data); :func:`cell_box` says
where a cell is in the pixels, so tests can read the colours back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypedDict

import numpy as np
from PIL import Image

from ..collectives import register_renderer
from ..i18n import _
from .grid import PANEL_NAMES, VERDICT_WORDS, HeatmapGrid, Panel, heatmap_grid
from .palette import (COMBINED_COLOR, EMPTY_COLOR, EXACT_COLOR, GREY_TEXT, HATCH_COLOR, INK, MAX_WIDTH_PX,
                      MIN_LABEL_PX, MISMATCH_COLOR, OK_GREEN, RANK_COLORS, RANK_TEXT_COLORS, UNDEFINED_COLOR,
                      contrast_ratio, rank_color, rank_text_color)
from .raster import Box, Canvas, Label, Pixels, encode_png, rgb8, wrap_text
from .values import format_value

if TYPE_CHECKING:  # matplotlib is imported by heatmap_figure only (~0.65 s of a first picture otherwise)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from ..collectives import RunResult

__all__ = ["heatmap_image", "heatmap_figure", "heatmap_png", "cell_box", "HeatmapImage",
           # what a heatmap is made of, named here for its readers and tests
           "heatmap_grid", "HeatmapGrid", "Panel", "format_value", "RANK_COLORS", "RANK_TEXT_COLORS",
           "MIN_LABEL_PX", "contrast_ratio", "rank_color", "rank_text_color", "UNDEFINED_COLOR", "COMBINED_COLOR",
           "EMPTY_COLOR", "MISMATCH_COLOR", "HeatmapParts"]

_BAND = 0.30  # share of a combined cell's height taken by its band of contributor colours
_PROBE = Canvas(1, 1)  # measures text (glyph masks are cached per text, size and style)


@dataclass
class HeatmapImage:
    """A painted heatmap: ``pixels`` (uint8, H x W x 3), ``dpi``, the ``grid`` it shows,
    ``geometry`` (``{panel: (x0, y0, cell)}``: pixel position of a panel's top-left cell and the
    cell side, y down), ``outlines`` (pixel boxes ``(x0, y0, x1, y1)`` of the red outlines),
    ``layout`` (``"side by side"`` or ``"stacked"``: after below before, when side by side would
    not fit :data:`collnb.views.palette.MAX_WIDTH_PX`) and ``labels`` (every painted text as ``(text, size_px, box)``,
    size in pixels per em; none is below :data:`MIN_LABEL_PX`)."""

    pixels: Pixels
    dpi: float
    grid: HeatmapGrid
    geometry: dict[str, tuple[int, int, int]]
    outlines: list[Box]
    layout: str = "side by side"
    labels: list[Label] = field(default_factory=list)


class HeatmapParts(TypedDict):
    """What :func:`heatmap_figure` keeps on its figure as ``fig.collnb``."""

    image: HeatmapImage
    grid: HeatmapGrid
    geometry: dict[str, tuple[int, int, int]]
    ax: Axes
    outlines: list[Rectangle]


#: Widest heatmap drawn at the default dpi, in pixels: JupyterLab 4's output area in a 1440 px
#: window with the file browser open is ~1080 CSS px wide (tests/test_browser.py measures it), and
#: an image wider than its output area is scaled down, labels with it.
_SAFE_PX = MIN_LABEL_PX + 1  # painted sizes keep a pixel in hand


def _fit_size(text: str, size_px: float, max_w: float, style: str, floor: float = MIN_LABEL_PX) -> float:
    """The largest size <= ``size_px`` (not below ``floor``) at which ``text`` is <= ``max_w`` px
    wide (measured with the real glyphs)."""
    w = _PROBE.measure(text, size_px, style)[0]
    if w <= max_w:
        return size_px
    return max(floor, size_px * max_w / w * 0.98)


def _fit_text(text: str, size_px: float, max_w: float, style: str) -> str:
    """``text`` cut with "…" until it fits ``max_w`` pixels at ``size_px``."""
    while len(text) > 1 and _PROBE.measure(text, size_px, style)[0] > max_w:
        text = text[:-2] + "…" if not text.endswith("…") else text[:-2] + "…"
    return text


def _band_text(n: int, ws: int) -> str:
    return _("all {n}").format(n=n) if n == ws else _("{n} ranks").format(n=n)


def heatmap_image(result: RunResult, *, dpi: float = 100, show_exact: bool = True,
                  grid: HeatmapGrid | None = None) -> HeatmapImage:
    """Paint the before | after heatmap of ``result`` (a :class:`~collnb.collectives.RunResult`).

    Args:
        result: the run to draw.
        dpi: pixels per inch of the decorations; cells are 0.36-0.62 inch but never so small that
            a value is written below :data:`MIN_LABEL_PX` pixels.
        show_exact: write the float64 result under values the dtype changed ("exact 280", or
            just "280" where the cell is too narrow for the word; the legend says which).
        grid: a precomputed :func:`heatmap_grid` (else computed here).

    Every label is at least :data:`MIN_LABEL_PX` pixels per em whatever the world size; the
    image stays within :data:`collnb.views.palette.MAX_WIDTH_PX` (at dpi <= 125) by putting ``after`` below
    ``before`` when side by side would be wider; a band of more contributors than its cell can
    show as stripes (< 5 px each) says "all 16" / "12 ranks" instead.

    Returns:
        :class:`HeatmapImage`. Takes ~8-10 ms of CPU at world size 8 (int8 all_reduce, dpi 80; the PNG
        another ~6 ms: `benchmarks/explorer.py` prints both together).
    """
    g = grid or heatmap_grid(result)
    b, a = g.before, g.after
    ws = result.world_size
    k = dpi / 100.0
    F: Callable[[float], float] = lambda base: max(_SAFE_PX, base * k)  # noqa: E731 - a font size in pixels, floored
    max_w = MAX_WIDTH_PX * max(1.0, k / 1.25)
    total_cols = b.n_cols + a.n_cols
    cell_in = float(np.clip(11.5 / (total_cols + 5), 0.36, 0.62))
    if ws > 10:
        cell_in = min(cell_in, 0.46)
    cell = int(round(cell_in * dpi))
    gap = max(1, int(round(2 * k)))
    probe = _PROBE
    time_kind = result.spec.kind == "time"

    # the narrowest cell that writes every value at >= 12 px and every note under it at >= 11 px
    val_floor = _SAFE_PX + 1
    texts = [t for p in (b, a) for row in p.text for t in row if t]
    subs_long, subs_short = [], []
    for r in range(ws):
        for c in range(a.n_cols):
            if a.expected[r][c]:
                subs_long.append(_("exp {value}").format(value=a.expected[r][c]))
                subs_short.append(a.expected[r][c])
            elif show_exact and a.exact[r][c]:
                subs_long.append(_("exact {value}").format(value=a.exact[r][c]))
                subs_short.append(a.exact[r][c])
        for c in range(b.n_cols):
            if b.asked and b.asked[r][c]:
                subs_long.append(_("asked {value}").format(value=b.asked[r][c]))
                subs_short.append(b.asked[r][c])
    widest = max([probe.measure(t, val_floor, "bold")[0] for t in texts] + [1])
    need = widest / 0.9
    if subs_short:
        need = max(need, max(probe.measure(t, _SAFE_PX, "bold")[0] for t in subs_short) / 0.94)
    need = int(math.ceil(need + 2 * gap + 2))
    need = max(need, 48 if subs_short else 38)
    cell = min(max(cell, need), max(need, int(round(0.62 * dpi))), 120)
    inner = cell - 2 * gap
    long_subs = bool(subs_long) and max(probe.measure(t, _SAFE_PX, "bold")[0] for t in subs_long) <= inner * 0.94

    # sizes (pixels)
    title_px, call_px, head_px, desc_px = F(20), F(13), F(17), F(12.5)
    row_px, leg_px, status_px = F(14), F(12), F(14.5)

    row_labels = []
    for r in range(ws):
        lab = _("rank {rank}").format(rank=r)
        if result.root is not None and r == result.root:
            lab = _("rank {rank} ({root})").format(rank=r, root=result.spec.root_name)
        row_labels.append(lab)
    sw_row = int(max(10, 12 * k))
    left = max(probe.measure(t, row_px, "bold")[0] for t in row_labels) + sw_row + int(18 * k) + 8
    verdict_px = {"✓": F(22), "✗": F(22), "undefined": F(12)}
    right = max(probe.measure(_(VERDICT_WORDS[v]), verdict_px[v], "italic" if v == "undefined" else "bold")[0]
                for v in set(g.verdicts) | {"✓"}) + int(24 * k)
    mid = int(76 * k)

    # side by side if it fits (cells no bigger than they need be), else after below before
    side_w = left + total_cols * cell + mid + right
    if side_w > max_w:
        fit = int((max_w - left - mid - right) // max(total_cols, 1))
        if fit >= need:
            cell, side_w = fit, left + total_cols * fit + mid + right
    stacked = side_w > max_w
    if stacked:
        most = max(b.n_cols, a.n_cols)
        if left + most * need + right > max_w and val_floor > _SAFE_PX:
            val_floor = _SAFE_PX  # values at 11 px rather than an image the browser scales down
            need = max(int(math.ceil(max(probe.measure(t, val_floor, "bold")[0] for t in texts) / 0.9
                                     + 2 * gap + 2)) if texts else 1, 48 if subs_short else 38)
        if left + most * need + right > max_w:  # smaller row labels (still >= 11 px) before wider
            row_px = _SAFE_PX
            left = max(probe.measure(t, row_px, "bold")[0] for t in row_labels) + sw_row + int(12 * k) + 8
        if left + most * cell + right > max_w:
            cell = max(need, int((max_w - left - right) // max(most, 1)))
    inner = cell - 2 * gap
    col_px = F(13)
    long_cols = probe.measure(_("chunk {chunk}").format(chunk="00"), col_px)[0] < cell * 0.96
    pw_b, pw_a = b.n_cols * cell, a.n_cols * cell

    def wrap(text: str, width: float) -> list[str]:
        return wrap_text(text, width, lambda t: probe.measure(t, desc_px)[0])

    def description(title: str) -> str:  # "before: each rank's input" -> "each rank's input" (or "之前：...")
        return title.split(": ", 1)[-1].split("：", 1)[-1]

    if stacked:
        pw = max(pw_b, pw_a)
        desc = {"before": wrap(description(b.title), max(pw, 170 * k)),
                "after": wrap(description(a.title), max(pw, 170 * k))}
        content_w = left + pw + right
    else:
        desc = {"before": wrap(description(b.title), max(pw_b, 170 * k)),
                "after": wrap(description(a.title), max(pw_a, 170 * k))}
        content_w = side_w
    n_desc = max(len(v) for v in desc.values())
    room = max(content_w, max_w) - 60 * k
    title_px = _fit_size(g.title, title_px, room, "bold", floor=_SAFE_PX)
    call_px = _fit_size(g.call, call_px, room, "mono", floor=_SAFE_PX)
    status_px = _fit_size(g.status, status_px, room, "bold", floor=_SAFE_PX)
    W = int(max(content_w, probe.measure(g.title, title_px, "bold")[0] + 60 * k,
                probe.measure(g.call, call_px, "mono")[0] + 60 * k,
                probe.measure(g.status, status_px, "bold")[0] + 60 * k, 760 * k))

    # legend (labels that say what this picture does)
    compact_bands = any(st == "value" and len(rk) > 1 and inner / len(rk) < 5
                        for p in (b, a) for srow, rrow in zip(p.state, p.ranks) for st, rk in zip(srow, rrow))
    legend = []
    for label, kind in g.legend:
        if kind == "exact" and not long_subs:
            label = _("orange number under a value: the float64 result, where the dtype changed it")
        if kind == "mismatch" and subs_short and not long_subs:
            label = _("red outline: differs from reference (red number: the expected value)")
        if kind == "asked" and not long_subs:
            label = label.replace(_("asked N:"), _("orange number under an input:"))
        if kind == "stripes" and compact_bands:
            label += _(" (a dark band with a count: too many ranks for stripes)")
        legend.append((label, kind))
    sw, sh = int(max(18, 24 * k)), int(max(11, 14 * k))
    entries = [(label, kind, sw + 7 * k + probe.measure(label, leg_px)[0] + 20 * k) for label, kind in legend]
    rows: list[tuple[list[tuple[str, str, float]], float]] = []
    row: list[tuple[str, str, float]] = []
    roww = 0.0
    for e in entries:
        if row and roww + e[2] > W - 40 * k:
            rows.append((row, roww))
            row, roww = [], 0.0
        row.append(e)
        roww += e[2]
    if row:
        rows.append((row, roww))
    leg_step = max(24 * k, leg_px + 8)

    y_head = int(80 * k)
    head_h = int(26 * k + max(17 * k, desc_px + 4) * n_desc + col_px + 14 * k)
    if stacked:
        x_b = x_a = int(left + max(0, (W - content_w) / 2))
        top_b = y_head + head_h
        y_head_a = top_b + ws * cell + int(56 * k)
        top_a = y_head_a + head_h
        heads = {"before": (x_b, y_head, top_b, pw_b), "after": (x_a, y_head_a, top_a, pw_a)}
        grid_bottom = top_a + ws * cell
    else:
        x_b = int(left + max(0, (W - content_w) / 2))
        x_a = x_b + pw_b + mid
        top_b = top_a = y_head + head_h
        heads = {"before": (x_b, y_head, top_b, pw_b), "after": (x_a, y_head, top_a, pw_a)}
        grid_bottom = top_b + ws * cell
    y_status = grid_bottom + int(30 * k)
    H = int(y_status + 22 * k + leg_step * len(rows) + 12 * k)

    cv = Canvas(W, H)
    cv.labels = []
    geometry = {"before": (x_b, top_b, cell), "after": (x_a, top_a, cell)}

    cv.text(g.title, W / 2, 14 * k, title_px, INK, "bold", va="top")
    cv.text(g.call, W / 2, 46 * k, call_px, "#333333", "mono", va="top")

    outlines: list[Box] = []
    cap = (21 if ws <= 8 else 17) * k
    val_px = max(val_floor, min(cap, 0.40 * cell))
    sub_px = max(_SAFE_PX, min(11 * k, 0.22 * cell))
    dstep = max(17 * k, desc_px + 4)
    cs = _CellStyle(cell, gap, inner, int(round(_BAND * inner)), k, ws, val_px, sub_px, show_exact, long_subs)
    for panel in (b, a):
        x0, yh, gtop, pw = heads[panel.name]
        cv.text(_(PANEL_NAMES[panel.name]), x0 + pw / 2, yh, head_px, INK, "bold", va="top")
        for i, line in enumerate(desc[panel.name]):
            cv.text(line, x0 + pw / 2, yh + 26 * k + dstep * i, desc_px, "#444444", va="top")
        for c in range(panel.n_cols):
            label = "ms" if time_kind else (_("chunk {chunk}").format(chunk=c) if long_cols else str(c))
            cv.text(label, x0 + (c + 0.5) * cell, gtop - 7 * k, col_px, "#333333", va="bottom")
        if not long_cols and not time_kind:
            cv.text(_("chunk"), x0 - 6 * k, gtop - 7 * k, col_px, "#333333", ha="right", va="bottom")
        for r in range(ws):
            for c in range(panel.n_cols):
                _paint_cell(cv, panel, r, c, (x0, gtop + r * cell), cs, outlines)
            if panel.row_note[r]:
                note = panel.row_note[r]
                size = _fit_size(note, F(13), max(pw - 8, 1), "italic")
                tw, th = cv.measure(note, size, "italic")
                yc = gtop + (r + 0.5) * cell
                cv.rect(x0 + pw / 2 - tw / 2 - 6 * k, yc - 0.5 * size - 3 * k, x0 + pw / 2 + tw / 2 + 6 * k,
                        yc + 0.5 * size + 3 * k, COMBINED_COLOR)
                cv.text(note, x0 + pw / 2, yc, size, "#555555", "italic")
        if panel is b or stacked:
            for r, lab in enumerate(row_labels):
                yc = gtop + (r + 0.5) * cell
                sx1 = x0 - int(8 * k) - 2
                cv.rect(sx1 - sw_row, yc - sw_row / 2, sx1, yc + sw_row / 2, rank_color(r))
                cv.frame(sx1 - sw_row, int(yc - sw_row / 2), sx1, int(yc + sw_row / 2), "#9A9A9A", 1)
                cv.text(lab, sx1 - sw_row - 6 * k - 2, yc, row_px, rank_text_color(r), "bold", ha="right")
    if stacked:
        cv.text("↓", x_b + max(pw_b, pw_a) / 2, top_b + ws * cell + 28 * k, F(34), "#444444")
    else:
        cv.text("→", x_b + pw_b + mid / 2, top_b + ws * cell / 2, F(44), "#444444")
    for r, v in enumerate(g.verdicts):
        yc = top_a + (r + 0.5) * cell
        if v == "undefined":
            cv.text(_(VERDICT_WORDS[v]), x_a + pw_a + 14 * k, yc, verdict_px[v], GREY_TEXT, "italic", ha="left")
        else:
            cv.text(v, x_a + pw_a + 14 * k, yc, verdict_px[v], OK_GREEN if v == "✓" else MISMATCH_COLOR, "bold", ha="left")
    cv.text(g.status, W / 2, y_status, status_px, OK_GREEN if g.ok else MISMATCH_COLOR, "bold")

    _paint_legend(cv, rows, y_status, ws, k, (sw, sh), leg_px, leg_step)

    return HeatmapImage(pixels=cv.pixels(), dpi=dpi, grid=g, geometry=geometry, outlines=outlines,
                        layout="stacked" if stacked else "side by side", labels=cv.labels)



@dataclass
class _CellStyle:
    """Sizes shared by every cell of one heatmap (pixels; ``k`` = dpi / 100)."""

    cell: int
    gap: int
    inner: int
    band: int
    k: float
    ws: int
    val_px: float
    sub_px: float
    show_exact: bool
    long_subs: bool
    strips: dict[tuple[int, ...], Image.Image] = field(default_factory=dict)  # contributors -> their band, painted once


def _paint_cell(cv: Canvas, panel: Panel, r: int, c: int, origin: tuple[int, int], cs: _CellStyle,
                outlines: list[Box]) -> None:
    """Cell (rank ``r``, column ``c``) of ``panel`` whose row starts at ``origin`` (x of the panel,
    y of the row): fill, contributor band, value, note under it, red outline (appended to
    ``outlines``)."""
    x0, y0 = origin
    cell, gap, inner, band, k, ws = cs.cell, cs.gap, cs.inner, cs.band, cs.k, cs.ws
    strips, val_px, sub_px, show_exact, long_subs = cs.strips, cs.val_px, cs.sub_px, cs.show_exact, cs.long_subs
    cx0 = x0 + c * cell + gap
    cy0 = y0 + gap
    st = panel.state[r][c]
    ranks = panel.ranks[r][c]
    combined = st == "value" and len(ranks) > 1
    cband = band
    if st == "undefined":
        cv.hatch(cx0, cy0, cx0 + inner, cy0 + inner, UNDEFINED_COLOR, HATCH_COLOR,
                 period=max(6, int(10 * k)), width=max(2, int(3 * k)))
    elif st == "empty":
        cv.rect(cx0, cy0, cx0 + inner, cy0 + inner, EMPTY_COLOR)
    elif not combined:
        cv.rect(cx0, cy0, cx0 + inner, cy0 + inner, rank_color(ranks[0] if ranks else r))
    else:
        cv.rect(cx0, cy0, cx0 + inner, cy0 + inner, COMBINED_COLOR)
        cv.frame(cx0, cy0, cx0 + inner, cy0 + inner, "#C8C8C8", 1)
        if inner / len(ranks) >= 5:
            strip = strips.get(ranks)
            if strip is None:  # one band per set of contributors, pasted where it recurs
                stripes: Pixels = np.empty((band, inner, 3), dtype=np.uint8)
                edges = np.linspace(0, inner, len(ranks) + 1).round().astype(int)
                for i, s_ in enumerate(ranks):
                    stripes[:, edges[i]:edges[i + 1]] = rgb8(rank_color(s_))
                strip = strips[ranks] = Image.fromarray(stripes, "RGB")
            cv.paste(strip, cx0, cy0)
        else:  # too many contributors for stripes: say how many
            bt = _band_text(len(ranks), ws)
            bpx = _fit_size(bt, _SAFE_PX, inner - 4, "bold")
            bt = _fit_text(bt, bpx, inner - 4, "bold")
            cband = max(band, int(0.73 * bpx + 7))
            cv.rect(cx0, cy0, cx0 + inner, cy0 + cband, "#5A5A5A")
            cv.text(bt, cx0 + inner / 2, cy0 + cband / 2, bpx, COMBINED_COLOR, "bold")
    if panel.row_note[r]:
        return
    txt = panel.text[r][c]
    asked = panel.asked[r][c] if panel.asked else ""
    tag = panel.tag[r][c] if panel.tag else ""
    if panel.expected[r][c]:
        sub = _("exp {value}").format(value=panel.expected[r][c]) if long_subs else panel.expected[r][c]
    elif show_exact and panel.exact[r][c]:
        sub = _("exact {value}").format(value=panel.exact[r][c]) if long_subs else panel.exact[r][c]
    elif asked:
        sub = _("asked {value}").format(value=asked) if long_subs else asked
    else:
        sub = ""
    xc = x0 + (c + 0.5) * cell
    body_top = cy0 + (cband if combined else 0)
    if tag:  # the source rank, top left: colour is not the only clue where values do not name it
        tpx = _fit_size(tag, _SAFE_PX, inner * 0.6, "bold")
        cv.text(tag, cx0 + 2, cy0 + 1, tpx, INK, "bold", ha="left", va="top")
        body_top = cy0 + int(0.8 * tpx) + 3
    body_bottom = cy0 + inner - (0.30 * inner if sub else 0)
    if txt:
        size = _fit_size(txt, val_px, inner * 0.92, "bold")
        txt = _fit_text(txt, size, inner - 2, "bold")
        cv.text(txt, xc, (body_top + body_bottom) / 2, size,
                GREY_TEXT if st == "undefined" else INK,
                "regular" if st == "undefined" else "bold")
    if sub:
        size = _fit_size(sub, sub_px, inner * 0.96, "bold")
        sub = _fit_text(sub, size, inner - 2, "bold")
        if st == "value" and not combined:  # a white backing: red/orange on a rank's fill is < 4.5:1
            sw_, sh_ = cv.measure(sub, size, "bold")
            ys = cy0 + inner - 0.16 * inner
            cv.rect(xc - sw_ / 2 - 2, ys - 0.5 * size - 1, xc + sw_ / 2 + 2, ys + 0.5 * size + 1,
                    COMBINED_COLOR)
        cv.text(sub, xc, cy0 + inner - 0.16 * inner, size,
                MISMATCH_COLOR if panel.expected[r][c] else EXACT_COLOR, "bold")
    if panel.mismatch[r][c]:
        box = (x0 + c * cell, y0, x0 + (c + 1) * cell, y0 + cell)
        cv.frame(*box, MISMATCH_COLOR, max(3, int(round(4 * k))))
        outlines.append(box)


def _paint_legend(cv: Canvas, rows: list[tuple[list[tuple[str, str, float]], float]], y: float, ws: int, k: float,
                  swatch: tuple[int, int], leg_px: float, leg_step: float) -> None:
    """The legend rows (``[(entries, width)]``, each entry ``(label, kind, width)``) centred below
    ``y``: a swatch of each kind (rank colour, band of stripes, hatching, red outline, orange N)
    and its label."""
    sw, sh = swatch
    W = cv.w
    for i, (row, roww) in enumerate(rows):
        yc = y + 30 * k + leg_step * i
        x = (W - roww) / 2
        for label, kind, ew in row:
            sx0, sy0 = int(x), int(yc - sh / 2)
            if kind == "rank":
                cv.rect(sx0, sy0, sx0 + sw, sy0 + sh, rank_color(int("".join(ch for ch in label if ch.isdigit()))))
            elif kind == "stripes":
                cv.rect(sx0, sy0, sx0 + sw, sy0 + sh, COMBINED_COLOR)
                cv.frame(sx0, sy0, sx0 + sw, sy0 + sh, "#AAAAAA", 1)
                n = min(ws, 6)
                edges = np.linspace(sx0, sx0 + sw, n + 1).round().astype(int)
                for j in range(n):
                    cv.rect(edges[j], sy0, edges[j + 1], sy0 + max(3, int(sh * 0.4)), rank_color(j))
            elif kind == "undefined":
                cv.hatch(sx0, sy0, sx0 + sw, sy0 + sh, UNDEFINED_COLOR, HATCH_COLOR, period=6, width=2)
            elif kind == "mismatch":
                cv.frame(sx0, sy0, sx0 + sw, sy0 + sh, MISMATCH_COLOR, 3)
            elif kind in ("exact", "asked"):
                cv.text("N", sx0 + sw / 2, yc, leg_px, EXACT_COLOR, "bold")
            elif kind == "tag":
                cv.rect(sx0, sy0, sx0 + sw, sy0 + sh, rank_color(min(3, ws - 1)))
                cv.text(f"r{min(3, ws - 1)}", sx0 + 2, yc, min(leg_px, sh), INK, "bold", ha="left")
            cv.text(label, x + sw + 7 * k, yc, leg_px, "#222222", ha="left")
            x += ew


def heatmap_figure(result: RunResult, *, dpi: float = 100, show_exact: bool = True,
                   grid: HeatmapGrid | None = None) -> Figure:
    """The heatmap of ``result`` as a :class:`matplotlib.figure.Figure` (Agg canvas attached,
    not registered with pyplot; safe to build from any thread).

    The painted image (:func:`heatmap_image`) is placed 1:1 with ``fig.figimage``; each red
    outline is also a :class:`~matplotlib.patches.Rectangle` artist (gid ``"mismatch"``) on an
    overlay Axes whose data coordinates are the image's pixels (y down). ``fig.collnb`` is a
    dict (:class:`HeatmapParts`): ``image`` (:class:`HeatmapImage`), ``grid``, ``geometry``, ``ax``,
    ``outlines`` (the Rectangles). Save it at ``dpi=fig.dpi`` to keep pixels 1:1.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - see TYPE_CHECKING above
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    him = heatmap_image(result, dpi=dpi, show_exact=show_exact, grid=grid)
    H, W = him.pixels.shape[:2]
    fig = Figure(figsize=(W / dpi, H / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    fig.figimage(him.pixels, 0, 0, origin="upper", zorder=0)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    ax.patch.set_visible(False)
    ax.set_xlim(0, W)
    ax.set_ylim(H, 0)
    rects = []
    lw = max(3, int(round(4 * dpi / 100)))
    for (x0, y0, x1, y1) in him.outlines:
        rect = Rectangle((x0 + lw / 2, y0 + lw / 2), x1 - x0 - lw, y1 - y0 - lw, fill=False,
                         edgecolor=MISMATCH_COLOR, linewidth=lw * 72 / dpi, gid="mismatch")
        ax.add_patch(rect)
        rects.append(rect)
    parts = HeatmapParts(image=him, grid=him.grid, geometry=him.geometry, ax=ax, outlines=rects)
    fig.collnb = parts  # type: ignore[attr-defined]  # our own attribute on the Figure (documented above)
    return fig


def heatmap_png(result: RunResult, *, dpi: float = 100, show_exact: bool = True,
                grid: HeatmapGrid | None = None) -> bytes:
    """The heatmap of ``result`` as PNG bytes (headless; the pixels of :func:`heatmap_image`,
    encoded with Pillow). Arguments as :func:`heatmap_image`."""
    return encode_png(heatmap_image(result, dpi=dpi, show_exact=show_exact, grid=grid).pixels, dpi)


def cell_box(fig_or_image: Figure | HeatmapImage, panel: str, rank: int, chunk: int) -> Box:
    """Pixel box ``(x0, y0, x1, y1)`` (origin top-left, y down, as in the PNG) of cell
    (``rank``, ``chunk``) of ``panel`` (``"before"``/``"after"``), for a figure from
    :func:`heatmap_figure` or a :class:`HeatmapImage`."""
    if isinstance(fig_or_image, HeatmapImage):
        geometry = fig_or_image.geometry
    else:
        parts: HeatmapParts = fig_or_image.collnb  # type: ignore[attr-defined]  # set by heatmap_figure
        geometry = parts["geometry"]
    x0, y0, cell = geometry[panel]
    return (x0 + chunk * cell, y0 + rank * cell, x0 + (chunk + 1) * cell, y0 + (rank + 1) * cell)


# ----------------------------------------------------------------------------------------------
# RunResult.figure()/png()/save() and its notebook display draw with this heatmap (collectives
# cannot import views, which stand above them, so the views register their drawing there).
register_renderer(heatmap_figure, heatmap_png)
