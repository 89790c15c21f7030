"""The one raster engine of the views: a white RGB canvas with rectangles, frames, hatching, text,
lines, arrows and PNG encoding, painted with Pillow.

Heatmaps (:mod:`collnb.views.heatmap`), replay frames (:mod:`collnb.views.frames`) and the static
pictures of saved widgets (:mod:`collnb.views.static`) all paint through :class:`Canvas`, so they
share fonts (matplotlib's DejaVu files, rendered by FreeType through Pillow), text placement and
colours. Everything goes through Pillow's public API (``Image.paste``, ``ImageDraw``, ``Image.save``).
Pillow paints in C on 8-bit pixels: a world-size-8 heatmap takes ~10 ms of CPU and ~15 ms
with its PNG (``benchmarks/slider_ab.py``), where the float numpy canvas with matplotlib's FreeType text it replaces took ~30-40 ms
with its PNG, and a few hundred matplotlib Text artists 250-300 ms (2-core machine,
``benchmarks/explorer.py``). Matplotlib stays for charts with axes (bar and line plots).

Chinese text (any string with a CJK character, :func:`has_cjk`) is drawn and measured, the whole
string, with a CJK font (:func:`cjk_font_file`: ``COLLNB_CJK_FONT``, Debian's ``fonts-noto-cjk``,
fontconfig, or pip's ``mplfonts``); every other string keeps DejaVu, so English pictures are the
pixels they were. Choosing per string rather than per language keeps the numbers, API names and
"rank 2" of a Chinese picture in the font of the English one, needs no font for an English picture
in a Chinese session, and never draws a tofu box: no CJK font raises :class:`CjkFontMissing`,
which says what to install. :func:`wrap_text` breaks Chinese lines between ideographs, and
:func:`matplotlib_fonts` gives matplotlib figures the same font as a fallback.

Coordinates are pixels, origin top-left, y down. Colours are ``"#RRGGBB"``, 0..255 int triples, or
0..1 float triples/arrays (the palette of :mod:`collnb.views.palette`).
"""

from __future__ import annotations

import importlib.util
import io
import math
import os
import re
import subprocess
import threading
from functools import lru_cache
from typing import Callable, Iterable, Sequence, TypeAlias

import numpy as np
from numpy.typing import NDArray
from PIL import Image, ImageDraw, ImageFont

__all__ = ["Canvas", "rgb8", "encode_png", "font", "cjk_font", "cjk_font_file", "has_cjk", "matplotlib_fonts",
           "wrap_text",
           "FONT_FILES", "CAP_HEIGHT", "CJK_FONT_ENV", "CjkFontMissing", "Pixels", "Color", "RGB8", "Box", "Label",
           "Point"]

#: A picture's pixels: ``uint8`` RGB, shape ``(height, width, 3)``, row 0 at the top.
Pixels: TypeAlias = np.ndarray[tuple[int, int, int], np.dtype[np.uint8]]
#: A colour as the painters take it: ``"#RRGGBB"``, a 0..255 int triple, or 0..1 floats (a triple or
#: an array such as :data:`collnb.views.palette.FloatRGB`).
Color: TypeAlias = str | Sequence[float] | NDArray[np.floating]
#: A colour as Pillow paints it: 0..255 ints (red, green, blue).
RGB8: TypeAlias = tuple[int, int, int]
#: A pixel box ``(x0, y0, x1, y1)``: left, top, right and bottom edges (right and bottom excluded).
Box: TypeAlias = tuple[int, int, int, int]
#: A painted text as :attr:`Canvas.labels` keeps it: ``(text, size in pixels per em, its ink's box)``.
Label: TypeAlias = tuple[str, float, Box]
#: A point ``(x, y)`` in pixels (floats: the painters round).
Point: TypeAlias = tuple[float, float]

#: DejaVu font file of each text style (shipped with matplotlib, so present wherever collnb runs).
FONT_FILES = {"regular": "DejaVuSans.ttf", "bold": "DejaVuSans-Bold.ttf",
              "italic": "DejaVuSans-Oblique.ttf", "mono": "DejaVuSansMono.ttf"}
#: DejaVu Sans' cap height as a share of the em (text is centred on its cap height).
CAP_HEIGHT = 0.73

_lock = threading.Lock()  # one FreeType face per style and size: render one text at a time
# (text, size, style) -> (L mask Image, x offset, y offset of the ink from the baseline)
_masks: dict[tuple[str, float, str], tuple[Image.Image, int, int]] = {}


def rgb8(color: Color) -> RGB8:
    """``color`` as a 0..255 int triple: ``"#D62728"``, ``(214, 39, 40)``, ``(0.84, 0.15, 0.16)``
    (floats, or a float numpy array, are 0..1 and rounded as ``int(v * 255 + 0.5)``, a float32
    array in float32 as numpy rounds a float32 image)."""
    key: tuple[str, bytes] | str | tuple[float, ...]
    if isinstance(color, np.ndarray):
        key = (color.dtype.str, color.tobytes())
    elif isinstance(color, str):
        key = color
    else:
        key = tuple(color)
    hit = _colors.get(key)
    if hit is None:
        hit = _colors[key] = _rgb8(color)
    return hit


# colour as given -> 0..255 triple (the views use a few dozen colours)
_colors: dict[tuple[str, bytes] | str | tuple[float, ...], RGB8] = {}


def _rgb8(color: Color) -> RGB8:
    if isinstance(color, str):
        h = color.lstrip("#")
        return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    if isinstance(color, np.ndarray):
        if color.dtype.kind == "f":
            r, g, b = (int(v) for v in (np.clip(color[:3], 0, 1) * color.dtype.type(255) + color.dtype.type(0.5)))
            return r, g, b
        r, g, b = (int(v) for v in color[:3])
        return r, g, b
    if any(isinstance(v, float) for v in color):
        r, g, b = (int(min(max(float(v), 0.0), 1.0) * 255 + 0.5) for v in color[:3])
        return r, g, b
    r, g, b = (int(v) for v in color[:3])
    return r, g, b


@lru_cache(maxsize=256)
def font(size_px: float, style: str = "regular") -> ImageFont.FreeTypeFont:
    """The DejaVu font of ``style`` (:data:`FONT_FILES`) at ``size_px`` pixels per em."""
    return ImageFont.truetype(os.path.join(_font_dir(), FONT_FILES[style]), max(1.0, float(size_px)))


@lru_cache(maxsize=1)
def _font_dir() -> str:
    """matplotlib's bundled DejaVu fonts (``mpl-data/fonts/ttf``), found without importing
    matplotlib (``matplotlib.get_data_path()`` is that folder; the import costs ~0.2 s)."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("collnb's pictures use the DejaVu fonts bundled with matplotlib: pip install matplotlib")
    return os.path.join(list(spec.submodule_search_locations)[0], "mpl-data", "fonts", "ttf")



#: The environment variable naming a CJK font file (``.ttf``/``.otf``/``.ttc``) to draw Chinese with.
CJK_FONT_ENV = "COLLNB_CJK_FONT"
#: Debian/Ubuntu's ``fonts-noto-cjk`` files of each text style (Noto Sans CJK has no italic).
_NOTO_CJK = {"regular": "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
             "bold": "/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc"}
#: The family names of a Simplified Chinese face, best first (``mono`` looks for its mono face first).
_SC_FAMILIES = ("Noto Sans CJK SC", "Source Han Sans SC", "Noto Sans SC", "Source Han Sans CN")
_SC_MONO_FAMILIES = ("Noto Sans Mono CJK SC",)
# CJK Unified Ideographs (+ extension A, compatibility), CJK punctuation, kana, Hangul, full-width forms
_CJK_RANGES = ("\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
               "\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef")
_CJK = re.compile(f"[{_CJK_RANGES}]")


class CjkFontMissing(RuntimeError):
    """No font with Chinese glyphs was found, and a picture must draw Chinese text."""


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a CJK character (ideographs, CJK punctuation such as ``，``/``：``,
    kana, Hangul, full-width forms), which DejaVu has no glyph for."""
    return _CJK.search(text) is not None


def _sc_index(path: str, style: str) -> int:
    """The index of the Simplified Chinese face in a font collection (``.ttc``), else 0.

    The face names are read from each face (FreeType through Pillow, a few ms once per file):
    Noto Sans CJK's ``.ttc`` holds JP, KR, SC, TC, HK (and their mono faces) in an order that is
    not part of any promise."""
    if not path.lower().endswith((".ttc", ".otc")):
        return 0
    names = []
    for index in range(64):
        try:
            face = ImageFont.truetype(path, 12, index=index)
        except OSError:
            break
        names.append(face.getname()[0] or "")
    order = (_SC_MONO_FAMILIES + _SC_FAMILIES) if style == "mono" else _SC_FAMILIES
    for family in order:
        if family in names:
            return names.index(family)
    return 0


def _fc_match(style: str) -> tuple[str, int] | None:
    """fontconfig's Simplified Chinese sans face (``fc-match``), if fontconfig has one."""
    for family in _SC_FAMILIES:
        pattern = family + (":bold" if style == "bold" else "")
        try:
            out = subprocess.run(["fc-match", "-f", "%{family}|%{file}|%{index}", pattern],
                                 capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        fam, _, rest = out.partition("|")
        path, _, index = rest.partition("|")
        # fc-match always answers something: take it only when it is the family asked for
        if path and os.path.isfile(path) and family in fam.split(","):
            return path, int(index or 0)
    return None


@lru_cache(maxsize=4)
def cjk_font_file(style: str = "regular") -> tuple[str, int]:
    """``(path, face index)`` of the font that draws CJK text of ``style`` (``"regular"``,
    ``"bold"``, ``"italic"``, ``"mono"``; CJK faces have no italic, so italic is regular).

    Looked for in this order: the file :data:`CJK_FONT_ENV` (``COLLNB_CJK_FONT``) names; Debian's
    and Ubuntu's ``fonts-noto-cjk`` (``/usr/share/fonts/opentype/noto/NotoSansCJK-*.ttc``, its SC
    face); fontconfig's Noto Sans CJK SC / Source Han Sans SC (``fc-match``); the
    ``NotoSansCJKsc-Regular.otf`` of a pip-installed ``mplfonts`` (found, never imported).

    Raises:
        CjkFontMissing: none of them exists (the message says what to install), or
            ``COLLNB_CJK_FONT`` names a file that is not there.
    """
    chosen = os.environ.get(CJK_FONT_ENV, "").strip()
    if chosen:
        if not os.path.isfile(chosen):
            raise CjkFontMissing(f"{CJK_FONT_ENV}={chosen!r} is not a font file: point it at a .ttf, .otf or "
                                 f".ttc with Chinese glyphs (e.g. NotoSansCJK-Regular.ttc), or unset it")
        return chosen, _sc_index(chosen, style)
    noto = _NOTO_CJK["bold" if style == "bold" else "regular"]
    if not os.path.isfile(noto) and style == "bold":
        noto = _NOTO_CJK["regular"]
    if os.path.isfile(noto):
        return noto, _sc_index(noto, style)
    found = _fc_match(style)
    if found is not None:
        return found
    spec = importlib.util.find_spec("mplfonts")
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "fonts", "NotoSansCJKsc-Regular.otf")
        if os.path.isfile(path):
            return path, 0
    raise CjkFontMissing(
        "collnb's pictures need a font with Chinese glyphs to draw Chinese text, and none was found. "
        "Install one: Debian/Ubuntu: `apt-get install fonts-noto-cjk`; Binder: add fonts-noto-cjk to "
        "apt.txt; Colab or no root: `pip install mplfonts`; or set COLLNB_CJK_FONT to a .ttf/.otf/.ttc "
        "with Chinese glyphs")


@lru_cache(maxsize=256)
def cjk_font(size_px: float, style: str = "regular") -> ImageFont.FreeTypeFont:
    """The CJK font (:func:`cjk_font_file`) of ``style`` at ``size_px`` pixels per em; cached, so
    the ~20 MB collection is opened once per size, not once per text.

    Raises:
        CjkFontMissing: no CJK font is installed (see :func:`cjk_font_file`).
    """
    path, index = cjk_font_file("bold" if style == "bold" else ("mono" if style == "mono" else "regular"))
    return ImageFont.truetype(path, max(1.0, float(size_px)), index=index)


def text_font(text: str, size_px: float, style: str = "regular") -> ImageFont.FreeTypeFont:
    """The font ``text`` is drawn and measured with: DejaVu (:func:`font`), or the CJK font
    (:func:`cjk_font`) when ``text`` holds a CJK character, for the whole string, so its Latin
    letters and digits share one baseline with its ideographs (English text never changes font)."""
    return cjk_font(size_px, style) if has_cjk(text) else font(size_px, style)


def matplotlib_fonts() -> list[str]:
    """The ``font.family`` list for a matplotlib figure in the language spoken now: DejaVu Sans,
    then (when the language is Chinese) the CJK font of :func:`cjk_font_file`, registered with
    ``matplotlib.font_manager.fontManager.addfont``, as the fallback for glyphs DejaVu lacks
    (matplotlib >= 3.6 falls back glyph by glyph through the list).

    Use it where the figure's texts are made: ``with matplotlib.rc_context({"font.family":
    matplotlib_fonts()}): ...`` (a Text keeps the family it was made with).

    Raises:
        CjkFontMissing: the language is Chinese and no CJK font is installed.
    """
    from .. import i18n  # noqa: PLC0415 - layer 0, no cycle; kept here with the matplotlib import

    if i18n.get_language() != "zh":
        return ["DejaVu Sans"]
    return ["DejaVu Sans", _matplotlib_cjk_family()]


@lru_cache(maxsize=1)
def _matplotlib_cjk_family() -> str:
    from matplotlib import font_manager  # noqa: PLC0415 - only for matplotlib figures in Chinese

    path, _index = cjk_font_file("regular")
    # matplotlib >= 3.10 registers every face of a collection (.ttc) with its index: the family
    # name of our face (Noto Sans CJK SC, not the collection's first face, JP) picks it
    font_manager.fontManager.addfont(path)
    bold, _index = cjk_font_file("bold")
    if bold != path:  # a bold title in Chinese: without the bold file matplotlib logs "findfont: Failed to
        font_manager.fontManager.addfont(bold)  # find font weight bold" on stderr, under the cell (issue 34)
    return str(cjk_font(12).getname()[0])


def _mask(text: str, size_px: float, style: str) -> tuple[Image.Image, int, int]:
    """``(mask, dx, dy)``: the text's anti-aliased ink as an ``"L"`` image (cropped to the ink) and
    the offset of its top-left corner from the pen position (left end of the baseline)."""
    key = (text, round(size_px * 4) / 4, style)
    hit = _masks.get(key)
    if hit is not None:
        return hit
    with _lock:
        f = text_font(text, key[1], style)
        x0, y0, x1, y1 = (int(v) for v in f.getbbox(text, anchor="ls"))  # ints already (a FreeType font)
        w, h = max(1, x1 - x0), max(1, y1 - y0)
        m = Image.new("L", (w, h), 0)
        ImageDraw.Draw(m).text((-x0, -y0), text, fill=255, font=f, anchor="ls")
    hit = (m, x0, y0)
    if len(_masks) > 20000:
        _masks.clear()
    _masks[key] = hit
    return hit


# a CJK character may start a line anywhere, but not the punctuation that closes a phrase, and an
# opening bracket stays with what follows it
_CLOSING = "，。、：；！？）」』》〉%"
_OPENING = "（「『《〈“‘"
_UNITS = re.compile(f"[{_OPENING}]*(?:[{_CJK_RANGES}]|[^\\s{_CJK_RANGES}]+)[{_CLOSING}]*")


def wrap_text(text: str, width: float, measure: Callable[[str], float]) -> list[str]:
    """``text`` broken into lines no wider than ``width`` (a line holds at least one unit):
    English breaks at spaces only; Chinese, which has no spaces, may break before any ideograph
    (but not before the punctuation that closes a phrase, ``，`` ``。`` ``）`` ..., nor after an
    opening bracket ``（``).

    Args:
        text: the text; runs of spaces collapse to one.
        width: the widest line, in the units ``measure`` returns (pixels).
        measure: ``measure(line) -> width`` of a candidate line (the font it will be drawn with).

    Returns:
        The lines (``[]`` for blank text). Text without CJK breaks exactly as ``text.split()`` words
        joined greedily by spaces.
    """
    lines: list[str] = []
    cur = ""
    end = 0
    for m in _UNITS.finditer(text):
        unit = m.group(0)
        spaced = m.start() > end  # what lies between two units is white space
        end = m.end()
        t = cur + (" " if spaced and cur else "") + unit
        if cur and measure(t) > width:
            lines.append(cur)
            cur = unit
        else:
            cur = t
    return lines + ([cur] if cur else [])


#: The zlib level of every PNG the views write: 1, zlib's fastest (a flat-coloured picture loses
#: little: 84 KB for a 935 x 595 heatmap where level 6 gives 76 KB, in about half the time).
PNG_COMPRESS_LEVEL = 1


def encode_png(pixels_or_image: Pixels | NDArray[np.uint8] | Image.Image, dpi: float | None = None) -> bytes:
    """PNG bytes (8-bit RGB) of an RGB ``uint8`` array ``(H, W, 3)`` or a Pillow image, written by
    Pillow's PNG encoder (``Image.save(format="PNG", compress_level=PNG_COMPRESS_LEVEL)``); ``dpi``
    goes into the pHYs chunk (Pillow's ``dpi`` option), none without it."""
    img = pixels_or_image if isinstance(pixels_or_image, Image.Image) else Image.fromarray(
        np.ascontiguousarray(pixels_or_image, dtype=np.uint8), "RGB")
    if img.mode != "RGB":
        img = img.convert("RGB")
    buf = io.BytesIO()
    options: dict[str, tuple[float, float]] = {"dpi": (dpi, dpi)} if dpi else {}
    img.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL, **options)
    return buf.getvalue()


class Canvas:
    """A white ``w`` x ``h`` RGB picture (:attr:`image`, a Pillow image) to paint on.

    Attributes:
        image: the Pillow ``RGB`` image. draw: its ``ImageDraw``.
        labels: ``None``, or a list to which every painted text is appended as
            ``(text, size_px, (x0, y0, x1, y1))`` (tests check that no label is too small).
    """

    def __init__(self, w: float, h: float, background: Color = (255, 255, 255)) -> None:
        self.w, self.h = int(w), int(h)
        self.image = Image.new("RGB", (max(1, self.w), max(1, self.h)), rgb8(background))
        self.draw = ImageDraw.Draw(self.image)
        self.labels: list[Label] | None = None

    # -- areas ------------------------------------------------------------------------------
    def _clip(self, x0: float, y0: float, x1: float, y1: float) -> Box:
        return max(0, int(x0)), max(0, int(y0)), min(self.w, int(x1)), min(self.h, int(y1))

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
        """Fill pixels ``[x0, x1) x [y0, y1)`` (coordinates truncated to ints)."""
        x0, y0, x1, y1 = max(0, int(x0)), max(0, int(y0)), min(self.w, int(x1)), min(self.h, int(y1))  # _clip
        if x1 > x0 and y1 > y0:
            self.image.paste(rgb8(color), (x0, y0, x1, y1))

    def frame(self, x0: float, y0: float, x1: float, y1: float, color: Color, width: float) -> None:
        """A ``width``-pixel border inside the box ``[x0, x1) x [y0, y1)``: its four sides filled as
        :meth:`rect` fills (each side's coordinates truncated on their own)."""
        ink = rgb8(color)
        for a, b, c, d in ((x0, y0, x1, y0 + width), (x0, y1 - width, x1, y1), (x0, y0, x0 + width, y1),
                           (x1 - width, y0, x1, y1)):
            a, b, c, d = max(0, int(a)), max(0, int(b)), min(self.w, int(c)), min(self.h, int(d))
            if c > a and d > b:
                self.image.paste(ink, (a, b, c, d))

    def hatch(self, x0: float, y0: float, x1: float, y1: float, bg: Color, fg: Color, period: int = 10,
              width: int = 3) -> None:
        """Fill the box with ``bg`` crossed by diagonal ``fg`` stripes (``width`` of every
        ``period`` pixels along x + y), aligned to the canvas so neighbouring boxes continue."""
        x0, y0, x1, y1 = self._clip(x0, y0, x1, y1)
        if x1 <= x0 or y1 <= y0:
            return
        self.image.paste(_hatch_tile(x1 - x0, y1 - y0, (x0 + y0) % period, period, width, rgb8(bg), rgb8(fg)),
                         (x0, y0))

    def paste(self, pixels: Pixels | NDArray[np.uint8] | Image.Image, x: float, y: float) -> None:
        """Copy an RGB ``uint8`` array or a Pillow image with its top-left corner at ``(x, y)``."""
        img = pixels if isinstance(pixels, Image.Image) else Image.fromarray(
            np.ascontiguousarray(pixels, dtype=np.uint8), "RGB")
        self.image.paste(img, (int(x), int(y)))

    def fade(self, x0: float, y0: float, x1: float, y1: float, keep: float) -> None:
        """Blend the box towards white, keeping ``keep`` of its ink (``255 - (255 - v) * keep``)."""
        x0, y0, x1, y1 = self._clip(x0, y0, x1, y1)
        if x1 <= x0 or y1 <= y0:
            return
        box = (x0, y0, x1, y1)
        part = self.image.crop(box)
        self.image.paste(Image.blend(part, Image.new("RGB", part.size, (255, 255, 255)), 1.0 - keep), box)

    # -- text -------------------------------------------------------------------------------
    def measure(self, text: str, size_px: float, style: str = "regular") -> tuple[int, int]:
        """``(width, height)`` in pixels of the ink of ``text`` at ``size_px``."""
        m = _mask(text, size_px, style)[0]
        return m.size

    def text(self, text: str, x: float, y: float, size_px: float, color: Color = (0, 0, 0), style: str = "regular",
             ha: str = "center", va: str = "center") -> int:
        """Paint ``text`` at ``size_px`` pixels per em. ``ha``: ``"left"``/``"center"``/``"right"``
        end of the ink at ``x``; ``va="center"`` centres the cap height on ``y``, ``"top"`` puts the
        cap top there, ``"bottom"`` the baseline. Returns the painted width in pixels."""
        if not text:
            return 0
        m, dx, dy = _mask(text, size_px, style)
        w, h = m.size
        cap = CAP_HEIGHT * size_px
        base_y = y + cap / 2 if va == "center" else (y + cap if va == "top" else y)
        top = int(round(base_y + dy))
        left = int(round(x - (w / 2 if ha == "center" else (w if ha == "right" else 0))))
        if self.labels is not None:
            self.labels.append((text, float(size_px), (left, top, left + w, top + h)))
        self.image.paste(rgb8(color), (left, top, left + w, top + h), m)
        return w

    # -- lines ------------------------------------------------------------------------------
    def line(self, points: Iterable[Sequence[float]], color: Color, width: float) -> None:
        """A polyline through ``points`` (rounded joints)."""
        self.draw.line([tuple(p) for p in points], fill=rgb8(color), width=max(1, int(width)), joint="curve")

    def polygon(self, points: Iterable[Sequence[float]], color: Color) -> None:
        """A filled polygon through ``points``."""
        self.draw.polygon([tuple(p) for p in points], fill=rgb8(color))

    def arrow(self, p0: Point, p1: Point, color: Color, width: float, head: float, bend: float = 0.0) -> None:
        """An arrow from ``p0`` to ``p1`` along a quadratic Bezier bowing sideways by ``bend`` x its
        length, its head (``head`` pixels long) with the tip on ``p1``."""
        pts = bezier(p0, p1, bend)
        self.line(pts[:-1], color, width)
        (xa, ya), (xb, yb) = pts[-3], pts[-1]
        ang = math.atan2(yb - ya, xb - xa)
        self.polygon([(xb, yb), (xb - head * math.cos(ang - 0.42), yb - head * math.sin(ang - 0.42)),
                      (xb - head * math.cos(ang + 0.42), yb - head * math.sin(ang + 0.42))], color)

    # -- out --------------------------------------------------------------------------------
    def shrink(self, factor: int) -> "Canvas":
        """This canvas reduced ``factor`` times by box filtering (paint at 2x, shrink: smooth
        arrows and text); a new canvas."""
        out = Canvas(1, 1)
        out.image = self.image.resize((self.w // factor, self.h // factor), Image.Resampling.BOX)
        out.w, out.h = out.image.size
        out.draw = ImageDraw.Draw(out.image)
        return out

    def pixels(self) -> Pixels:
        """The picture as a ``uint8`` array ``(h, w, 3)`` (a copy)."""
        return np.asarray(self.image, dtype=np.uint8).copy()

    def png(self, dpi: float | None = None) -> bytes:
        """The picture as PNG bytes (:func:`encode_png`)."""
        return encode_png(self.image, dpi)


def bezier(p0: Point, p1: Point, bend: float, n: int = 24) -> list[Point]:
    """``n`` points of a quadratic Bezier from ``p0`` to ``p1`` bowing sideways by ``bend`` x length."""
    (x0, y0), (x1, y1) = p0, p1
    dx, dy = x1 - x0, y1 - y0
    cx, cy = (x0 + x1) / 2 - bend * dy, (y0 + y1) / 2 + bend * dx
    ts = np.linspace(0.0, 1.0, n)
    xs = (1 - ts) ** 2 * x0 + 2 * (1 - ts) * ts * cx + ts ** 2 * x1
    ys = (1 - ts) ** 2 * y0 + 2 * (1 - ts) * ts * cy + ts ** 2 * y1
    return list(zip(xs.tolist(), ys.tolist()))


@lru_cache(maxsize=64)
def _hatch_tile(w: int, h: int, phase: int, period: int, width: int, bg: RGB8, fg: RGB8) -> Image.Image:
    yy, xx = np.mgrid[0:h, 0:w]
    on = ((xx + yy + phase) % period) < width
    arr = np.empty((h, w, 3), dtype=np.uint8)
    arr[:] = bg
    arr[on] = fg
    return Image.fromarray(arr, "RGB")
