"""Rank x chunk heatmaps of a :class:`collnb.primitives.RunResult`: before | after side by side.

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

The whole picture is painted into one RGB array (:func:`heatmap_image`: numpy rectangles and
text from matplotlib's FreeType wrapper, ~20-60 ms at world size 8 on 2 cores) and encoded with
Pillow (:func:`heatmap_png`), headless and thread-safe; :func:`heatmap_figure` wraps the same
pixels in a :class:`matplotlib.figure.Figure` with the Agg canvas (object API only, never pyplot's
global state). :func:`heatmap_grid` gives the content as plain data; :func:`cell_box` says where
a cell is in the pixels, so tests can read the colours back.
"""

from __future__ import annotations

import io
import math
import os
import threading
from dataclasses import dataclass, field

import numpy as np
import torch
from matplotlib import ft2font
from matplotlib.backends.backend_agg import FigureCanvasAgg, get_hinting_flag
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..collectives import register_renderer

__all__ = ["RANK_COLORS", "RANK_TEXT_COLORS", "MIN_LABEL_PX", "contrast_ratio", "rank_text_color", "UNDEFINED_COLOR", "COMBINED_COLOR", "EMPTY_COLOR", "MISMATCH_COLOR", "format_value", "heatmap_grid",
           "heatmap_image", "heatmap_figure", "heatmap_png", "cell_box", "rank_color", "Panel", "HeatmapGrid",
           "HeatmapImage", "MAX_WIDTH_PX"]

#: Rank hues: the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), built to stay
#: distinguishable with protanopia, deuteranopia and tritanopia, with its black replaced by Paul
#: Tol's olive (#999933) so that a cell can hold black text (Tol's indigo, tried first, merges
#: with the blue under simulated protanopia once lightened). Ranks 0-7 get these hues; ranks 8-15
#: repeat them as paler tints (lightness still tells them apart under colour-vision deficiency; the
#: row label and the value, 100*rank + chunk above 10 ranks, name the rank in any case).
_BASE_COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#999933"]
_PALE_TINT = 0.72        # share of white mixed into the hues of ranks 8-15
_FILL_CONTRAST = 7.0     # WCAG AAA: black (#111) text on any rank's fill
_TEXT_CONTRAST = 4.5     # WCAG AA: a rank-coloured label on white
MIN_LABEL_PX = 10.0      #: the smallest font (pixels per em) of any label a learner needs


def _hex_rgb(h):
    h = h.lstrip("#")
    return np.array([int(h[i:i + 2], 16) / 255.0 for i in (0, 2, 4)], dtype=np.float32)


def relative_luminance(rgb) -> float:
    """WCAG 2.x relative luminance of an sRGB colour (3 floats in 0..1)."""
    c = np.asarray(rgb, dtype=np.float64)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2])


def contrast_ratio(fg, bg=(1.0, 1.0, 1.0)) -> float:
    """WCAG 2.x contrast ratio (1..21) of two sRGB colours (3 floats in 0..1); 4.5 is the AA
    minimum for normal text (https://www.w3.org/TR/WCAG21/#dfn-contrast-ratio)."""
    a, b = sorted((relative_luminance(fg), relative_luminance(bg)))
    return (b + 0.05) / (a + 0.05)


def _tint_for_ink(hue, lo=0.35):
    """The least white (>= lo) mixed into ``hue`` so that #111 text on it has AAA contrast."""
    ink = _hex_rgb("#111111")
    for t in np.linspace(lo, 0.95, 61):
        fill = (1 - t) * hue + t
        if contrast_ratio(ink, fill) >= _FILL_CONTRAST:
            return fill
    return (1 - 0.95) * hue + 0.95


def _darken_for_text(hue):
    """``hue`` darkened (mixed with black) just enough for AA contrast as text on white."""
    for s in np.linspace(0.0, 0.9, 91):
        c = hue * (1 - s)
        if contrast_ratio(c) >= _TEXT_CONTRAST + 0.05:
            return c
    return hue * 0.1


_HUES = [_hex_rgb(h) for h in _BASE_COLORS]
#: RGB (0..1) fill colour of each rank's cells, index = rank (16 entries).
RANK_COLORS = np.array([_tint_for_ink(h) for h in _HUES] +
                       [(1 - _PALE_TINT) * h + _PALE_TINT for h in _HUES], dtype=np.float32)
#: RGB (0..1) of each rank's label text (its hue, dark enough for 4.5:1 on white), index = rank.
RANK_TEXT_COLORS = np.array([_darken_for_text(h) for h in _HUES] * 2, dtype=np.float32)
#: Fill of undefined cells, and their hatch lines.
UNDEFINED_COLOR = np.array([0.90, 0.90, 0.90], dtype=np.float32)
_HATCH_COLOR = np.array([0.74, 0.74, 0.74], dtype=np.float32)
#: Background of a combined (reduced) cell, under its band of contributor colours.
COMBINED_COLOR = np.array([1.0, 1.0, 1.0], dtype=np.float32)
#: Fill where a rank has no buffer at all.
EMPTY_COLOR = np.array([0.975, 0.975, 0.975], dtype=np.float32)
#: Outline colour of cells that differ from the reference.
MISMATCH_COLOR = "#D62728"
_EXACT_COLOR = "#A65400"


def rank_color(rank: int) -> np.ndarray:
    """RGB fill (3 floats in 0..1) of ``rank``'s data."""
    return RANK_COLORS[rank % len(RANK_COLORS)]


def rank_text_color(rank: int) -> np.ndarray:
    """RGB (3 floats in 0..1) for text naming ``rank`` on white (contrast >= 4.5:1)."""
    return RANK_TEXT_COLORS[rank % len(RANK_TEXT_COLORS)]


# ----------------------------------------------------------------------------------------------
# Values as text

def _compact_exp(s: str) -> str:
    # "1.23e+13" -> "1.23e13", "1e-05" -> "1e-5"
    if "e" in s:
        mant, exp = s.split("e")
        sign = "-" if exp.startswith("-") else ""
        return f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    return s


def _fmt_real(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    return _compact_exp(f"{v:.4g}")


def format_value(v, kind: str = "tensor") -> str:
    """Short text for one cell: ints as is (``1.2e13`` past 6 digits), integral floats without
    ``.0``, other floats to 4 significant digits, ``inf``/``nan``, complex as ``a+bj``, bools as
    ``True``/``False``, strings as is; ``kind="time"`` gives milliseconds to 0.1."""
    if kind == "time":
        return f"{float(v):.1f}"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        s = str(v)
        return s if len(s) <= 6 else _compact_exp(f"{v:.2e}")
    if isinstance(v, float):
        return _fmt_real(v)
    if isinstance(v, complex):
        im = v.imag
        return f"{_fmt_real(v.real)}{'-' if im < 0 else '+'}{_fmt_real(abs(im))}j"
    if isinstance(v, str):
        return v
    s = repr(v)
    return s if len(s) <= 12 else s[:11] + "…"


def _short(v) -> str:
    """At most ~6 characters: ``280``, ``2.9e5``, ``inf``, ``0.33``, complex ``1+2j``."""
    if isinstance(v, complex):
        return format_value(v)
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return _fmt_real(v)
    if v.is_integer() and abs(v) < 1e5:
        return str(int(v))
    if 1e-2 <= abs(v) < 1e5:
        return _compact_exp(f"{v:.3g}")
    return _compact_exp(f"{v:.2g}")


def chunk_firsts(t, chunk_size):
    """First element of every chunk of a flat tensor, as Python scalars."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        return list(t)
    if t.numel() == 0:
        return []
    first = t.view(-1, chunk_size)[:, 0]
    if first.dtype == torch.bool:
        return first.view(torch.uint8).ne(0).tolist()
    if first.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) \
            or first.dtype.itemsize == 1 and first.dtype.is_floating_point:
        return first.to(torch.float32).tolist()
    try:
        return first.tolist()
    except (TypeError, RuntimeError):
        return first.to(torch.float64).tolist()


# ----------------------------------------------------------------------------------------------
# The grid as data

@dataclass
class Panel:
    """One side of the heatmap. All per-cell lists are ``[rank][column]``.

    Attributes:
        name: ``"before"`` or ``"after"``.
        title: panel heading.
        n_rows, n_cols: ranks and chunk columns.
        text: the value written in each cell (``""`` where there is no value).
        state: ``"value"``, ``"undefined"`` (output the primitive leaves undefined) or
            ``"empty"`` (this rank has no such buffer / no chunk there).
        ranks: the ranks whose data the cell holds (tuple; one = copied, several = combined).
        mismatch: True where the cell differs from the reference (outlined red).
        expected: the reference value as text where mismatching, else ``""``.
        exact: the float64 result as text where the dtype changed it, else ``""``.
        row_note: per rank, a note drawn across an all-empty row (e.g. ``"no input (not src)"``).
    """

    name: str
    title: str
    n_rows: int
    n_cols: int
    text: list
    state: list
    ranks: list
    mismatch: list
    expected: list
    exact: list
    row_note: list


@dataclass
class HeatmapGrid:
    """Everything a heatmap shows, as plain data (see :func:`heatmap_grid`)."""

    title: str
    call: str
    status: str
    ok: bool
    before: Panel
    after: Panel
    verdicts: list  # per rank: "✓", "✗" or "undefined"
    legend: list = field(default_factory=list)  # [(label, kind)]


def _call_text(result) -> str:
    spec = result.spec
    call = spec.call
    if result.op:
        call = call.replace("op=OP", f"op=ReduceOp.{result.op.upper()}")
    if result.root is not None:
        call = call.replace("=root", f"={result.root}").replace("== src", f"== {result.root}") \
            .replace("== dst", f"== {result.root}")
    return call


def heatmap_grid(result) -> HeatmapGrid:
    """What the heatmap of ``result`` (a :class:`~collnb.primitives.RunResult`) shows, as data:
    values as text, cell states, contributing ranks, mismatches, per-rank verdicts."""
    spec = result.spec
    ws, cs, kind = result.world_size, result.chunk_size, spec.kind
    before_vals = [chunk_firsts(t, cs) for t in result.before]
    after_vals = [chunk_firsts(t, cs) for t in result.after]
    exp_vals = [chunk_firsts(t, cs) for t in result.expected]
    ex64_vals = [chunk_firsts(t, cs) if t is not None else None for t in result.expected_f64]
    nb = max([len(v) for v in before_vals] + [1])
    na = max([len(v) for v in after_vals] + [spec.n_out(ws, r, result.root or 0) for r in range(ws)] + [1])

    def blank(n):
        return [["" for _ in range(n)] for _ in range(ws)]

    # before: rank r's own data
    b = Panel("before", "before: each rank's input", ws, nb, blank(nb),
              [["empty"] * nb for _ in range(ws)], [[()] * nb for _ in range(ws)],
              [[False] * nb for _ in range(ws)], blank(nb), blank(nb), [""] * ws)
    if kind == "time":
        b.title = "before: arrival at dist.barrier() (ms)"
    for r in range(ws):
        vals = before_vals[r]
        for c, v in enumerate(vals):
            b.text[r][c] = format_value(v, kind)
            b.state[r][c] = "value"
            b.ranks[r][c] = (r,)
        if not vals:
            b.row_note[r] = (f"no input (not {spec.root_name})" if spec.rooted else "no input")

    a = Panel("after", "after: each rank's output", ws, na, blank(na),
              [["empty"] * na for _ in range(ws)], [[()] * na for _ in range(ws)],
              [[False] * na for _ in range(ws)], blank(na), blank(na), [""] * ws)
    if kind == "time":
        a.title = "after: departure from dist.barrier() (ms)"
    verdicts = []
    for r in range(ws):
        vals = after_vals[r]
        defined = result.defined[r]
        for c, v in enumerate(vals):
            a.text[r][c] = format_value(v, kind)
            a.state[r][c] = "value" if defined else "undefined"
            if defined:
                a.ranks[r][c] = tuple(dict.fromkeys(s for s, _ in result.sources[r][c]))
        if not defined:
            n = spec.n_out(ws, r, result.root or 0)
            for c in range(len(vals), na):
                a.state[r][c] = "undefined"
            if not vals:
                a.row_note[r] = f"no output (not {spec.root_name})" if spec.rooted else "no output"
            verdicts.append("undefined")
            continue
        mism = result.mismatch[r] or []
        for c, bad in enumerate(mism):
            if c >= na:
                continue
            if bad:
                a.mismatch[r][c] = True
                e = exp_vals[r]
                if e is not None and c < len(e):
                    a.expected[r][c] = ("≥ " if kind == "time" else "") + format_value(e[c], kind)
                if c >= len(vals):
                    a.state[r][c] = "empty"
        if ex64_vals[r] is not None and kind == "tensor":
            for c, (v, x) in enumerate(zip(vals, ex64_vals[r])):
                if not a.mismatch[r][c] and differs_exact(v, x):
                    a.exact[r][c] = _short(x)
        verdicts.append("✗" if any(mism) else "✓")

    n_bad = sum(v == "✗" for v in verdicts)
    n_chunks_bad = result.n_mismatches()
    dtype_effect = any(x for row in a.exact for x in row)
    if result.ok and dtype_effect:
        dname = str(result.dtype).replace("torch.", "")
        status = (f"✓ matches the same {dname} arithmetic done without torch.distributed; "
                  f"orange: float64's result, which {dname} changed")
    elif result.ok:
        status = "✓ every defined output matches the reference (computed without torch.distributed)"
        if kind == "time":
            status = "✓ no rank left dist.barrier() before the last rank had arrived"
    else:
        status = (f"✗ {n_chunks_bad} chunk(s) on {n_bad} rank(s) differ from the reference "
                  f"(outlined in red, expected value below)")
    legend = [(f"rank {r}", "rank") for r in range(ws)]
    if spec.reduces or kind == "time":
        if result.op:
            legend.append((f"coloured band: combined with {result.op.upper()} from these ranks", "stripes"))
        else:
            legend.append(("coloured band: leaves only after all these ranks arrived", "stripes"))
    if any(s == "undefined" for row in a.state for s in row):
        legend.append(("hatched: undefined output", "undefined"))
    if any(any(row) for row in a.mismatch):
        legend.append(("red outline: differs from reference", "mismatch"))
    if any(x for row in a.exact for x in row):
        legend.append(("exact N: the float64 result, where the dtype changed it", "exact"))
    return HeatmapGrid(title=result.title(), call=_call_text(result), status=status, ok=result.ok,
                       before=b, after=a, verdicts=verdicts, legend=legend)


def differs_exact(v, x) -> bool:
    """Whether a result value ``v`` differs from the float64 reference ``x`` (nan equals nan;
    bools compare by truth value; values that are not numbers never differ)."""
    if isinstance(v, bool):
        v = float(v)
    try:
        if isinstance(x, complex) or isinstance(v, complex):
            return complex(v) != complex(x) and not (_isnan(v) and _isnan(x))
        v, x = float(v), float(x)
    except (TypeError, ValueError):
        return False
    if math.isnan(v) and math.isnan(x):
        return False
    return v != x


def _isnan(z):
    z = complex(z)
    return math.isnan(z.real) or math.isnan(z.imag)


# ----------------------------------------------------------------------------------------------
# Drawing: the whole heatmap is painted into one RGB array (cells, values, labels, legend), with
# text from matplotlib's FreeType wrapper. A figure of a few hundred separate matplotlib Text
# artists took 250-300 ms at world size 8 on our 2-core machine; painting the same content takes
# a few tens of ms, which the explorer's slider needs.

_BAND = 0.30  # share of a combined cell's height taken by its band of contributor colours
_FONT_FILES = {"regular": "DejaVuSans.ttf", "bold": "DejaVuSans-Bold.ttf",
               "italic": "DejaVuSans-Oblique.ttf", "mono": "DejaVuSansMono.ttf"}
_font_lock = threading.Lock()  # FT2Font objects are not thread-safe: one user at a time
_fonts: dict = {}
_masks: dict = {}  # (text, size, style) -> (alpha mask float32, baseline offset); bounded


def _font(style):
    f = _fonts.get(style)
    if f is None:
        import matplotlib
        path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", _FONT_FILES[style])
        f = _fonts[style] = ft2font.FT2Font(path)
    return f


def _mask(text: str, size_px: float, style: str):
    """Alpha mask (float32 0..1, h x w) of ``text`` at ``size_px`` pixels per em, and the
    distance in pixels from the mask's top to the text baseline."""
    key = (text, round(size_px * 4) / 4, style)
    hit = _masks.get(key)
    if hit is not None:
        return hit
    with _font_lock:
        f = _font(style)
        f.clear()
        f.set_size(key[1], 72)  # points at 72 dpi = pixels
        f.set_text(text, 0.0, flags=get_hinting_flag())
        f.draw_glyphs_to_bitmap(antialiased=True)
        img = np.asarray(f.get_image()).astype(np.float32) / 255.0
        descent = f.get_descent() / 64.0
    cols = np.flatnonzero(img.max(axis=0) > 0)
    if cols.size:
        img = img[:, cols[0]:cols[-1] + 1]
    hit = (img, img.shape[0] - descent)
    if len(_masks) > 20000:
        _masks.clear()
    _masks[key] = hit
    return hit


class _Canvas:
    """A white RGB float image with rectangle, hatch, frame and text painting (y down)."""

    def __init__(self, w: int, h: int):
        self.w, self.h = w, h
        self.img = np.ones((h, w, 3), dtype=np.float32)
        self.labels = None  # a list: every painted text as (text, size_px, box)

    def _clip(self, x0, y0, x1, y1):
        return max(0, int(x0)), max(0, int(y0)), min(self.w, int(x1)), min(self.h, int(y1))

    def rect(self, x0, y0, x1, y1, color):
        x0, y0, x1, y1 = self._clip(x0, y0, x1, y1)
        if x1 > x0 and y1 > y0:
            self.img[y0:y1, x0:x1] = color

    def hatch(self, x0, y0, x1, y1, bg, fg, period=10, width=3):
        x0, y0, x1, y1 = self._clip(x0, y0, x1, y1)
        if x1 <= x0 or y1 <= y0:
            return
        region = self.img[y0:y1, x0:x1]
        region[:] = bg
        yy, xx = np.mgrid[y0:y1, x0:x1]
        region[((xx + yy) % period) < width] = fg

    def frame(self, x0, y0, x1, y1, color, width):
        self.rect(x0, y0, x1, y0 + width, color)
        self.rect(x0, y1 - width, x1, y1, color)
        self.rect(x0, y0, x0 + width, y1, color)
        self.rect(x1 - width, y0, x1, y1, color)

    def measure(self, text, size_px, style="regular"):
        m, _ = _mask(text, size_px, style)
        return m.shape[1], m.shape[0]

    def text(self, text, x, y, size_px, color=(0, 0, 0), style="regular", ha="center", va="center"):
        """Paint ``text``; ``va="center"`` centres the cap height on ``y``, ``"top"``/``"bottom"``
        put the cap top/baseline there. Returns the painted width in pixels."""
        if not text:
            return 0
        m, baseline = _mask(text, size_px, style)
        h, w = m.shape
        cap = 0.73 * size_px
        if va == "center":
            base_y = y + cap / 2
        elif va == "top":
            base_y = y + cap
        else:
            base_y = y
        top = int(round(base_y - baseline))
        left = int(round(x - (w / 2 if ha == "center" else (w if ha == "right" else 0))))
        if self.labels is not None:
            self.labels.append((text, float(size_px), (left, top, left + w, top + h)))
        x0, y0, x1, y1 = self._clip(left, top, left + w, top + h)
        if x1 <= x0 or y1 <= y0:
            return w
        a = m[y0 - top:y1 - top, x0 - left:x1 - left, None]
        region = self.img[y0:y1, x0:x1]
        region *= 1 - a
        region += a * np.asarray(color, dtype=np.float32)
        return w


def _rgb(h):
    return _hex_rgb(h).astype(np.float32)


_INK = _rgb("#111111")
_GREY_TEXT = _rgb("#6E6E6E")
_OK_GREEN = _rgb("#2E7D32")
_RED = _rgb(MISMATCH_COLOR)
_EXACT = _rgb(_EXACT_COLOR)


@dataclass
class HeatmapImage:
    """A painted heatmap: ``pixels`` (uint8, H x W x 3), ``dpi``, the ``grid`` it shows,
    ``geometry`` (``{panel: (x0, y0, cell)}``: pixel position of a panel's top-left cell and the
    cell side, y down), ``outlines`` (pixel boxes ``(x0, y0, x1, y1)`` of the red outlines),
    ``layout`` (``"side by side"`` or ``"stacked"``: after below before, when side by side would
    not fit :data:`MAX_WIDTH_PX`) and ``labels`` (every painted text as ``(text, size_px, box)``,
    size in pixels per em; none is below :data:`MIN_LABEL_PX`)."""

    pixels: np.ndarray
    dpi: float
    grid: HeatmapGrid
    geometry: dict
    outlines: list
    layout: str = "side by side"
    labels: list = field(default_factory=list)


#: Widest heatmap drawn at the default dpi (pixels): JupyterLab 4's output area in a 1440 px
#: window with the file browser open is ~1080 CSS px wide (tests/test_browser.py measures it), and
#: an image wider than its output area is scaled down, labels with it.
MAX_WIDTH_PX = 1000
_SAFE_PX = MIN_LABEL_PX + 1  # painted sizes keep a pixel in hand


def _fit_size(text, size_px, max_w, style, floor=MIN_LABEL_PX):
    """The largest size <= ``size_px`` (not below ``floor``) at which ``text`` is <= ``max_w`` px
    wide (measured with the real glyphs)."""
    w = _mask(text, size_px, style)[0].shape[1]
    if w <= max_w:
        return size_px
    return max(floor, size_px * max_w / w * 0.98)


def _fit_text(text, size_px, max_w, style):
    """``text`` cut with "…" until it fits ``max_w`` pixels at ``size_px``."""
    while len(text) > 1 and _mask(text, size_px, style)[0].shape[1] > max_w:
        text = text[:-2] + "…" if not text.endswith("…") else text[:-2] + "…"
    return text


def _band_text(n, ws):
    return f"all {n}" if n == ws else f"{n} ranks"


def heatmap_image(result, *, dpi: float = 100, show_exact: bool = True,
                  grid: HeatmapGrid | None = None) -> HeatmapImage:
    """Paint the before | after heatmap of ``result`` (a :class:`~collnb.primitives.RunResult`).

    Args:
        result: the run to draw.
        dpi: pixels per inch of the decorations; cells are 0.36-0.62 inch but never so small that
            a value is written below :data:`MIN_LABEL_PX` pixels.
        show_exact: write the float64 result under values the dtype changed ("exact 280", or
            just "280" where the cell is too narrow for the word; the legend says which).
        grid: a precomputed :func:`heatmap_grid` (else computed here).

    Every label is at least :data:`MIN_LABEL_PX` pixels per em whatever the world size; the
    image stays within :data:`MAX_WIDTH_PX` (at dpi <= 125) by putting ``after`` below
    ``before`` when side by side would be wider; a band of more contributors than its cell can
    show as stripes (< 5 px each) says "all 16" / "12 ranks" instead.

    Returns:
        :class:`HeatmapImage`. Takes ~20-40 ms at world size 8.
    """
    g = grid or heatmap_grid(result)
    b, a = g.before, g.after
    ws = result.world_size
    k = dpi / 100.0
    F = lambda base: max(_SAFE_PX, base * k)  # noqa: E731 - a font size in pixels, floored
    max_w = MAX_WIDTH_PX * max(1.0, k / 1.25)
    total_cols = b.n_cols + a.n_cols
    cell_in = float(np.clip(11.5 / (total_cols + 5), 0.36, 0.62))
    if ws > 10:
        cell_in = min(cell_in, 0.46)
    cell = int(round(cell_in * dpi))
    gap = max(1, int(round(2 * k)))
    probe = _Canvas(1, 1)
    time_kind = result.spec.kind == "time"

    # the narrowest cell that writes every value at >= 12 px and every note under it at >= 11 px
    val_floor = _SAFE_PX + 1
    texts = [t for p in (b, a) for row in p.text for t in row if t]
    subs_long, subs_short = [], []
    for r in range(ws):
        for c in range(a.n_cols):
            if a.expected[r][c]:
                subs_long.append(f"exp {a.expected[r][c]}")
                subs_short.append(a.expected[r][c])
            elif show_exact and a.exact[r][c]:
                subs_long.append(f"exact {a.exact[r][c]}")
                subs_short.append(a.exact[r][c])
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
        lab = f"rank {r}"
        if result.root is not None and r == result.root:
            lab += f" ({result.spec.root_name})"
        row_labels.append(lab)
    sw_row = int(max(10, 12 * k))
    left = max(probe.measure(t, row_px, "bold")[0] for t in row_labels) + sw_row + int(18 * k) + 8
    verdict_px = {"✓": F(22), "✗": F(22), "undefined": F(12)}
    right = max(probe.measure(v, verdict_px[v], "italic" if v == "undefined" else "bold")[0]
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
    long_cols = probe.measure("chunk 00", col_px)[0] < cell * 0.96
    pw_b, pw_a = b.n_cols * cell, a.n_cols * cell

    def wrap(text, width):
        words, lines, cur = text.split(), [], ""
        for wd in words:
            t = (cur + " " + wd).strip()
            if cur and probe.measure(t, desc_px)[0] > width:
                lines.append(cur)
                cur = wd
            else:
                cur = t
        return lines + ([cur] if cur else [])

    if stacked:
        pw = max(pw_b, pw_a)
        desc = {"before": wrap(b.title.split(": ", 1)[-1], max(pw, 170 * k)),
                "after": wrap(a.title.split(": ", 1)[-1], max(pw, 170 * k))}
        content_w = left + pw + right
    else:
        desc = {"before": wrap(b.title.split(": ", 1)[-1], max(pw_b, 170 * k)),
                "after": wrap(a.title.split(": ", 1)[-1], max(pw_a, 170 * k))}
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
            label = "orange number under a value: the float64 result, where the dtype changed it"
        if kind == "mismatch" and subs_short and not long_subs:
            label = "red outline: differs from reference (red number: the expected value)"
        if kind == "stripes" and compact_bands:
            label += f" (a dark band with a count: too many ranks for stripes)"
        legend.append((label, kind))
    sw, sh = int(max(18, 24 * k)), int(max(11, 14 * k))
    entries = [(label, kind, sw + 7 * k + probe.measure(label, leg_px)[0] + 20 * k) for label, kind in legend]
    rows, row, roww = [], [], 0.0
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

    cv = _Canvas(W, H)
    cv.labels = []
    geometry = {"before": (x_b, top_b, cell), "after": (x_a, top_a, cell)}

    cv.text(g.title, W / 2, 14 * k, title_px, _INK, "bold", va="top")
    cv.text(g.call, W / 2, 46 * k, call_px, _rgb("#333333"), "mono", va="top")

    outlines = []
    strips: dict = {}
    cap = (21 if ws <= 8 else 17) * k
    val_px = max(val_floor, min(cap, 0.40 * cell))
    sub_px = max(_SAFE_PX, min(11 * k, 0.22 * cell))
    dstep = max(17 * k, desc_px + 4)
    for panel in (b, a):
        x0, yh, gtop, pw = heads[panel.name]
        cv.text(panel.name, x0 + pw / 2, yh, head_px, _INK, "bold", va="top")
        for i, line in enumerate(desc[panel.name]):
            cv.text(line, x0 + pw / 2, yh + 26 * k + dstep * i, desc_px, _rgb("#444444"), va="top")
        for c in range(panel.n_cols):
            label = "ms" if time_kind else (f"chunk {c}" if long_cols else str(c))
            cv.text(label, x0 + (c + 0.5) * cell, gtop - 7 * k, col_px, _rgb("#333333"), va="bottom")
        if not long_cols and not time_kind:
            cv.text("chunk", x0 - 6 * k, gtop - 7 * k, col_px, _rgb("#333333"), ha="right", va="bottom")
        band = int(round(_BAND * inner))
        for r in range(ws):
            y0 = gtop + r * cell
            for c in range(panel.n_cols):
                cx0 = x0 + c * cell + gap
                cy0 = y0 + gap
                st = panel.state[r][c]
                ranks = panel.ranks[r][c]
                combined = st == "value" and len(ranks) > 1
                cband = band
                if st == "undefined":
                    cv.hatch(cx0, cy0, cx0 + inner, cy0 + inner, UNDEFINED_COLOR, _HATCH_COLOR,
                             period=max(6, int(10 * k)), width=max(2, int(3 * k)))
                elif st == "empty":
                    cv.rect(cx0, cy0, cx0 + inner, cy0 + inner, EMPTY_COLOR)
                elif not combined:
                    cv.rect(cx0, cy0, cx0 + inner, cy0 + inner, rank_color(ranks[0] if ranks else r))
                else:
                    cv.rect(cx0, cy0, cx0 + inner, cy0 + inner, COMBINED_COLOR)
                    cv.frame(cx0, cy0, cx0 + inner, cy0 + inner, _rgb("#C8C8C8"), 1)
                    if inner / len(ranks) >= 5:
                        strip = strips.get(ranks)
                        if strip is None:  # one band per set of contributors, pasted where it recurs
                            strip = strips[ranks] = np.empty((band, inner, 3), dtype=np.float32)
                            edges = np.linspace(0, inner, len(ranks) + 1).round().astype(int)
                            for i, s_ in enumerate(ranks):
                                strip[:, edges[i]:edges[i + 1]] = rank_color(s_)
                        cv.img[cy0:cy0 + band, cx0:cx0 + inner] = strip
                    else:  # too many contributors for stripes: say how many
                        bt = _band_text(len(ranks), ws)
                        bpx = _fit_size(bt, _SAFE_PX, inner - 4, "bold")
                        bt = _fit_text(bt, bpx, inner - 4, "bold")
                        cband = max(band, int(0.73 * bpx + 7))
                        cv.rect(cx0, cy0, cx0 + inner, cy0 + cband, _rgb("#5A5A5A"))
                        cv.text(bt, cx0 + inner / 2, cy0 + cband / 2, bpx, (1, 1, 1), "bold")
                if panel.row_note[r]:
                    continue
                txt = panel.text[r][c]
                if panel.expected[r][c]:
                    sub = f"exp {panel.expected[r][c]}" if long_subs else panel.expected[r][c]
                elif show_exact and panel.exact[r][c]:
                    sub = f"exact {panel.exact[r][c]}" if long_subs else panel.exact[r][c]
                else:
                    sub = ""
                xc = x0 + (c + 0.5) * cell
                body_top = cy0 + (cband if combined else 0)
                body_bottom = cy0 + inner - (0.30 * inner if sub else 0)
                if txt:
                    size = _fit_size(txt, val_px, inner * 0.92, "bold")
                    txt = _fit_text(txt, size, inner - 2, "bold")
                    cv.text(txt, xc, (body_top + body_bottom) / 2, size,
                            _GREY_TEXT if st == "undefined" else _INK,
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
                            _RED if panel.expected[r][c] else _EXACT, "bold")
                if panel.mismatch[r][c]:
                    box = (x0 + c * cell, y0, x0 + (c + 1) * cell, y0 + cell)
                    cv.frame(*box, _RED, max(3, int(round(4 * k))))
                    outlines.append(box)
            if panel.row_note[r]:
                note = panel.row_note[r]
                size = _fit_size(note, F(13), max(pw - 8, 1), "italic")
                tw, th = cv.measure(note, size, "italic")
                yc = y0 + cell / 2
                cv.rect(x0 + pw / 2 - tw / 2 - 6 * k, yc - 0.5 * size - 3 * k, x0 + pw / 2 + tw / 2 + 6 * k,
                        yc + 0.5 * size + 3 * k, (1, 1, 1))
                cv.text(note, x0 + pw / 2, yc, size, _rgb("#555555"), "italic")
        if panel is b or stacked:
            for r, lab in enumerate(row_labels):
                yc = gtop + (r + 0.5) * cell
                sx1 = x0 - int(8 * k) - 2
                cv.rect(sx1 - sw_row, yc - sw_row / 2, sx1, yc + sw_row / 2, rank_color(r))
                cv.frame(sx1 - sw_row, int(yc - sw_row / 2), sx1, int(yc + sw_row / 2), _rgb("#9A9A9A"), 1)
                cv.text(lab, sx1 - sw_row - 6 * k - 2, yc, row_px, rank_text_color(r), "bold", ha="right")
    if stacked:
        cv.text("↓", x_b + max(pw_b, pw_a) / 2, top_b + ws * cell + 28 * k, F(34), _rgb("#444444"))
    else:
        cv.text("→", x_b + pw_b + mid / 2, top_b + ws * cell / 2, F(44), _rgb("#444444"))
    for r, v in enumerate(g.verdicts):
        yc = top_a + (r + 0.5) * cell
        if v == "undefined":
            cv.text(v, x_a + pw_a + 14 * k, yc, verdict_px[v], _GREY_TEXT, "italic", ha="left")
        else:
            cv.text(v, x_a + pw_a + 14 * k, yc, verdict_px[v], _OK_GREEN if v == "✓" else _RED, "bold", ha="left")
    cv.text(g.status, W / 2, y_status, status_px, _OK_GREEN if g.ok else _RED, "bold")

    for i, (row, roww) in enumerate(rows):
        yc = y_status + 30 * k + leg_step * i
        x = (W - roww) / 2
        for label, kind, ew in row:
            sx0, sy0 = int(x), int(yc - sh / 2)
            if kind == "rank":
                cv.rect(sx0, sy0, sx0 + sw, sy0 + sh, rank_color(int(label.split()[1])))
            elif kind == "stripes":
                cv.rect(sx0, sy0, sx0 + sw, sy0 + sh, COMBINED_COLOR)
                cv.frame(sx0, sy0, sx0 + sw, sy0 + sh, _rgb("#AAAAAA"), 1)
                n = min(ws, 6)
                edges = np.linspace(sx0, sx0 + sw, n + 1).round().astype(int)
                for j in range(n):
                    cv.rect(edges[j], sy0, edges[j + 1], sy0 + max(3, int(sh * 0.4)), rank_color(j))
            elif kind == "undefined":
                cv.hatch(sx0, sy0, sx0 + sw, sy0 + sh, UNDEFINED_COLOR, _HATCH_COLOR, period=6, width=2)
            elif kind == "mismatch":
                cv.frame(sx0, sy0, sx0 + sw, sy0 + sh, _RED, 3)
            elif kind == "exact":
                cv.text("N", sx0 + sw / 2, yc, leg_px, _EXACT, "bold")
            cv.text(label, x + sw + 7 * k, yc, leg_px, _rgb("#222222"), ha="left")
            x += ew

    pixels = (np.clip(cv.img, 0, 1) * 255 + 0.5).astype(np.uint8)
    return HeatmapImage(pixels=pixels, dpi=dpi, grid=g, geometry=geometry, outlines=outlines,
                        layout="stacked" if stacked else "side by side", labels=cv.labels)


def heatmap_figure(result, *, dpi: float = 100, show_exact: bool = True,
                   grid: HeatmapGrid | None = None) -> Figure:
    """The heatmap of ``result`` as a :class:`matplotlib.figure.Figure` (Agg canvas attached,
    not registered with pyplot; safe to build from any thread).

    The painted image (:func:`heatmap_image`) is placed 1:1 with ``fig.figimage``; each red
    outline is also a :class:`~matplotlib.patches.Rectangle` artist (gid ``"mismatch"``) on an
    overlay Axes whose data coordinates are the image's pixels (y down). ``fig.collnb`` is a
    dict: ``image`` (:class:`HeatmapImage`), ``grid``, ``geometry``, ``ax``, ``outlines``
    (the Rectangles). Save it at ``dpi=fig.dpi`` to keep pixels 1:1.
    """
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
    fig.collnb = {"image": him, "grid": him.grid, "geometry": him.geometry, "ax": ax, "outlines": rects}
    return fig


def heatmap_png(result, *, dpi: float = 100, **kwargs) -> bytes:
    """The heatmap of ``result`` as PNG bytes (headless; the pixels of :func:`heatmap_image`,
    encoded with Pillow). ``kwargs`` as :func:`heatmap_image`."""
    from PIL import Image
    him = heatmap_image(result, dpi=dpi, **kwargs)
    buf = io.BytesIO()
    Image.fromarray(him.pixels, "RGB").save(buf, format="PNG", compress_level=1, dpi=(dpi, dpi))
    return buf.getvalue()


def cell_box(fig_or_image, panel: str, rank: int, chunk: int) -> tuple:
    """Pixel box ``(x0, y0, x1, y1)`` (origin top-left, y down, as in the PNG) of cell
    (``rank``, ``chunk``) of ``panel`` (``"before"``/``"after"``), for a figure from
    :func:`heatmap_figure` or a :class:`HeatmapImage`."""
    geometry = fig_or_image.collnb["geometry"] if hasattr(fig_or_image, "collnb") else fig_or_image.geometry
    x0, y0, cell = geometry[panel]
    return (x0 + chunk * cell, y0 + rank * cell, x0 + (chunk + 1) * cell, y0 + (rank + 1) * cell)


# RunResult.figure()/png()/save() and its notebook display draw with this heatmap.
register_renderer(heatmap_figure, heatmap_png)
