"""The views' colours and smallest label: one hue per rank (Okabe-Ito), cell fills, text colours, the WCAG contrast
arithmetic that chose them. Heatmaps, replay frames and charts all take their colours from here.

Colours are float32 RGB arrays in 0..1 (:data:`FloatRGB`; :func:`collnb.views.raster.rgb8` turns any
of them into 0..255 pixels).
"""

from __future__ import annotations

from typing import Sequence, TypeAlias, cast

import numpy as np
from numpy.typing import NDArray

__all__ = ["RANK_COLORS", "RANK_TEXT_COLORS", "MIN_LABEL_PX", "UNDEFINED_COLOR", "HATCH_COLOR", "COMBINED_COLOR",
           "EMPTY_COLOR", "MISMATCH_COLOR", "EXACT_COLOR", "INK", "GREY_TEXT", "OK_GREEN", "COPY_COLOR",
           "REDUCE_COLOR", "relative_luminance", "contrast_ratio", "rank_color", "rank_text_color", "hex_rgb", "cielab",
           "delta_e2000", "FloatRGB", "RGBLike"]

#: A colour as the palette holds it: 3 float32 in 0..1 (red, green, blue), shape ``(3,)``.
FloatRGB: TypeAlias = np.ndarray[tuple[int], np.dtype[np.float32]]
#: What the colour arithmetic below reads: 3 floats in 0..1, as a sequence or an array.
RGBLike: TypeAlias = Sequence[float] | NDArray[np.floating]

#: distinguishable with protanopia, deuteranopia and tritanopia, with its black replaced by Paul
#: Tol's olive (#999933) so that a cell can hold black text (Tol's indigo, tried first, merges
#: with the blue under simulated protanopia once lightened). Ranks 0-7 get these hues.
_BASE_COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#56B4E9", "#CC79A7", "#F0E442", "#999933"]
#: Ranks 8-15: eight more fills chosen to be as far as possible (CIEDE2000) from ranks 0-7 and from
#: each other, among the colours that keep black text at 7:1 (AAA), chroma C* <= 55, ΔE00 >= 15 from
#: white, the empty-cell grey and the hatching of undefined cells, and ΔE00 >= 30 from the reds that
#: carry meaning (the replay's reduce arrows, the outline of a wrong value): a greedy max-min search
#: over a 35-step sRGB grid, then refined one colour at a time. Every pair of the 16 fills is >= 11
#: ΔE00 apart (ranks 0 and 4, the Okabe-Ito blue and sky blue); every pair involving ranks 8-15
#: >= 14. (Before, paler tints of ranks 0-7 made 4, 8 and 12 and the pale yellows look alike.)
#: Sixteen colours cannot all stay apart under colour-vision deficiency: the row labels, the values
#: (100*rank + chunk above 10 ranks) and, where values do not name their rank, a source-rank tag in
#: the cell say which rank it is.
_EXTRA_FILLS = ["#DAFFE9", "#9E9EFF", "#FFD2C3", "#00FFF0", "#E9DAFF", "#9EE98F", "#A59EBB", "#00C3D2"]
_FILL_CONTRAST = 7.0     # WCAG AAA: black (#111) text on any rank's fill
_TEXT_CONTRAST = 4.5     # WCAG AA: a rank-coloured label on white
MIN_LABEL_PX = 10.0      #: the smallest font (pixels per em) of any label a learner needs
#: The widest picture any view paints, in pixels (a notebook's output area at 100 % zoom; wider
#: content wraps or goes below).
MAX_WIDTH_PX = 1000


def hex_rgb(h: str) -> FloatRGB:
    """``"#RRGGBB"`` -> float32 RGB array in 0..1."""
    h = h.lstrip("#")
    return np.array([int(h[i:i + 2], 16) / 255.0 for i in (0, 2, 4)], dtype=np.float32)


def relative_luminance(rgb: RGBLike) -> float:
    """WCAG 2.x relative luminance of an sRGB colour (3 floats in 0..1)."""
    c = np.asarray(rgb, dtype=np.float64)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2])


def contrast_ratio(fg: RGBLike, bg: RGBLike = (1.0, 1.0, 1.0)) -> float:
    """WCAG 2.x contrast ratio (1..21) of two sRGB colours (3 floats in 0..1); 4.5 is the AA
    minimum for normal text (https://www.w3.org/TR/WCAG21/#dfn-contrast-ratio)."""
    a, b = sorted((relative_luminance(fg), relative_luminance(bg)))
    return (b + 0.05) / (a + 0.05)


def cielab(rgb: RGBLike) -> NDArray[np.float64]:
    """CIE L*a*b* (D65) of an sRGB colour (3 floats in 0..1), as float64 ``[L, a, b]``."""
    c = np.asarray(rgb, dtype=np.float64)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = m @ lin / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e2000(lab1: RGBLike, lab2: RGBLike) -> float:
    """CIEDE2000 colour difference of two CIE L*a*b* colours (about 1 is just noticeable, 10 plainly
    different at a glance). Formula and test data: G. Sharma, W. Wu, E. N. Dalal, "The CIEDE2000
    color-difference formula", Color Research & Application 30(1), 2005."""
    (l1, a1, b1), (l2, a2, b2) = np.asarray(lab1, float), np.asarray(lab2, float)
    cb = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(cb ** 7 / (cb ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p, h2p = np.degrees(np.arctan2(b1, a1p)) % 360, np.degrees(np.arctan2(b2, a2p)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2p - h1p + 180) % 360 - 180
    dhp = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    lbp, cbp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hbp = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hbp = (h1p + h2p) / 2
    else:
        hbp = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * np.cos(np.radians(hbp - 30)) + 0.24 * np.cos(np.radians(2 * hbp))
         + 0.32 * np.cos(np.radians(3 * hbp + 6)) - 0.20 * np.cos(np.radians(4 * hbp - 63)))
    rc = 2 * np.sqrt(cbp ** 7 / (cbp ** 7 + 25 ** 7))
    sl = 1 + 0.015 * (lbp - 50) ** 2 / np.sqrt(20 + (lbp - 50) ** 2)
    sc, sh = 1 + 0.045 * cbp, 1 + 0.015 * cbp * t
    rt = -np.sin(np.radians(60 * np.exp(-((hbp - 275) / 25) ** 2))) * rc
    dl, dc = (l2 - l1) / sl, (c2p - c1p) / sc
    dhh = dhp / sh
    return float(np.sqrt(dl ** 2 + dc ** 2 + dhh ** 2 + rt * dc * dhh))


def _tint_for_ink(hue: FloatRGB, lo: float = 0.35) -> NDArray[np.floating]:
    """The least white (>= lo) mixed into ``hue`` so that #111 text on it has AAA contrast (float64
    where found: the mix is taken in float64)."""
    ink = hex_rgb("#111111")
    for t in np.linspace(lo, 0.95, 61):
        fill: NDArray[np.float64] = (1 - t) * hue + t
        if contrast_ratio(ink, fill) >= _FILL_CONTRAST:
            return fill
    return (1 - 0.95) * hue + 0.95


def _darken_for_text(hue: FloatRGB) -> NDArray[np.floating]:
    """``hue`` darkened (mixed with black) just enough for AA contrast as text on white (float64 where
    found)."""
    for s in np.linspace(0.0, 0.9, 91):
        c: NDArray[np.float64] = hue * (1 - s)
        if contrast_ratio(c) >= _TEXT_CONTRAST + 0.05:
            return c
    return hue * 0.1


_HUES = [hex_rgb(h) for h in _BASE_COLORS]
_EXTRA = [hex_rgb(h) for h in _EXTRA_FILLS]
#: RGB (0..1) fill colour of each rank's cells, index = rank (16 entries): float32, shape ``(16, 3)``.
RANK_COLORS: np.ndarray[tuple[int, int], np.dtype[np.float32]] = np.array([_tint_for_ink(h) for h in _HUES] + _EXTRA, dtype=np.float32)
#: RGB (0..1) of each rank's label text (its hue, dark enough for 4.5:1 on white), index = rank:
#: float32, shape ``(16, 3)``.
RANK_TEXT_COLORS: np.ndarray[tuple[int, int], np.dtype[np.float32]] = np.array([_darken_for_text(h) for h in _HUES + _EXTRA], dtype=np.float32)
#: Fill of undefined cells, and their hatch lines.
UNDEFINED_COLOR = np.array([0.90, 0.90, 0.90], dtype=np.float32)
HATCH_COLOR = np.array([0.74, 0.74, 0.74], dtype=np.float32)
#: Background of a combined (reduced) cell, under its band of contributor colours.
COMBINED_COLOR = np.array([1.0, 1.0, 1.0], dtype=np.float32)
#: Fill where a rank has no buffer at all.
EMPTY_COLOR = np.array([0.975, 0.975, 0.975], dtype=np.float32)
#: Outline colour of cells that differ from the reference.
MISMATCH_COLOR = "#D62728"
EXACT_COLOR = "#A65400"


def rank_color(rank: int) -> FloatRGB:
    """RGB fill (3 floats in 0..1) of ``rank``'s data."""
    return cast(FloatRGB, RANK_COLORS[rank % len(RANK_COLORS)])  # a row: numpy's stubs type it Any


def rank_text_color(rank: int) -> FloatRGB:
    """RGB (3 floats in 0..1) for text naming ``rank`` on white (contrast >= 4.5:1)."""
    return cast(FloatRGB, RANK_TEXT_COLORS[rank % len(RANK_TEXT_COLORS)])
#: Dark text, grey text (undefined values) and the green of a passing verdict.
INK = hex_rgb("#111111")
GREY_TEXT = hex_rgb("#6E6E6E")
OK_GREEN = hex_rgb("#2E7D32")
#: Replay arrows: the receiver overwrites (copy) / combines (reduce). 0..255.
COPY_COLOR = (31, 78, 121)
REDUCE_COLOR = (192, 57, 43)
