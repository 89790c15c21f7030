"""A labelled matrix heatmap: one or more panels of numbers (rows x columns) on one colour scale,
each cell written out, some cells framed. For quantities per rank that are not a rank's buffer:
the work each rank does per round of ring attention, the tokens each rank routes to each expert.

Painted with the views' one raster engine (:mod:`collnb.views.raster`): a white-to-blue ramp
(lightness alone carries the value, so it reads under every colour-vision deficiency), text in
dark ink on light cells and white on dark ones (each >= 4.5:1, :func:`collnb.views.palette.contrast_ratio`),
labels >= :data:`collnb.views.palette.MIN_LABEL_PX`, at most :data:`collnb.views.palette.MAX_WIDTH_PX` wide.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from numpy.typing import NDArray

from .palette import INK, MAX_WIDTH_PX, MIN_LABEL_PX, MISMATCH_COLOR, FloatRGB, contrast_ratio, hex_rgb
from .raster import Canvas, Label, Pixels, encode_png, wrap_text

__all__ = ["MatrixPanel", "MatrixPicture", "matrix_image", "ramp_color"]

#: ColorBrewer's sequential "Blues" (9 classes), light to dark: float32, shape ``(9, 3)``.
_BLUES: np.ndarray[tuple[int, int], np.dtype[np.float32]] = np.array([hex_rgb(h) for h in ("#F7FBFF", "#DEEBF7", "#C6DBEF", "#9ECAE1", "#6BAED6", "#4292C6",
                                        "#2171B5", "#08519C", "#08306B")])
_BORDER = hex_rgb("#BDBDBD")
_WHITE = np.array([1.0, 1.0, 1.0], dtype=np.float32)


def ramp_color(share: float) -> FloatRGB:
    """The fill (RGB, 0..1) of a cell holding ``share`` of the scale's maximum: ColorBrewer's
    "Blues" from near white (0) to dark blue (1), interpolated; clipped to 0..1."""
    x = float(np.clip(share, 0.0, 1.0)) * (len(_BLUES) - 1)
    i = min(int(x), len(_BLUES) - 2)
    lo: FloatRGB = _BLUES[i]
    hi: FloatRGB = _BLUES[i + 1]
    return ((1 - (x - i)) * lo + (x - i) * hi).astype(np.float32)


def _text_color(fill: FloatRGB) -> FloatRGB:
    return INK if contrast_ratio(INK, fill) >= contrast_ratio(_WHITE, fill) else _WHITE


@dataclass
class MatrixPanel:
    """One panel.

    Attributes:
        title: written above the panel.
        values: rows x columns numbers (a list of lists or a 2-D array); they set the colour.
        texts: what each cell says (same shape; default: the value).
        framed: ``(row, column)`` cells outlined in red (e.g. over capacity).
        footer: a line under the panel (e.g. each row's total), wrapped at spaces to the panel's width.
    """

    title: str
    values: Sequence[Sequence[float]] | NDArray[np.number]
    texts: Sequence[Sequence[object]] | NDArray[np.generic] | None = None
    framed: set[tuple[int, int]] = field(default_factory=set)
    footer: str = ""


@dataclass
class MatrixPicture:
    """A painted matrix heatmap. ``png``: PNG bytes; ``pixels``: ``(h, w, 3)`` uint8; shown as a
    PNG in a notebook (``_repr_png_``); :meth:`save` writes the PNG. ``labels``: where the painter
    records them (:func:`collnb.timeline_image`), every painted text as ``(text, size_px, (x0, y0,
    x1, y1))``, its ink's box in pixels (tests check that no two overlap); else empty."""

    png: bytes
    pixels: Pixels
    labels: list[Label] = field(default_factory=list)

    def _repr_png_(self) -> bytes:
        return self.png

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the PNG to ``path``."""
        with open(path, "wb") as f:
            f.write(self.png)


def _wrap(cv: Canvas, text: str, width: float, size: float) -> list[str]:
    """``text`` cut at spaces (Chinese: between ideographs) into lines no wider than ``width`` pixels
    (a word wider stays whole; :func:`collnb.views.raster.wrap_text`)."""
    return wrap_text(text, width, lambda t: cv.measure(t, size)[0])


def _cell_text(v: object) -> str:
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.3g}"
    return str(int(v)) if isinstance(v, (int, float, np.integer, np.floating)) else str(v)


def matrix_image(panels: Sequence[MatrixPanel], *, row_label: str = "rank", column_label: str = "",
                 row_names: Sequence[object] | None = None, column_names: Sequence[object] | None = None,
                 title: str = "", note: str = "", framed_note: str = "", vmax: float | None = None) -> MatrixPicture:
    """Paint one or more :class:`MatrixPanel` side by side (below each other when wider than :data:`collnb.views.palette.MAX_WIDTH_PX`)
    on one colour scale.

    Args:
        panels: a list of :class:`MatrixPanel` (all the same shape).
        row_label, column_label: what the rows and columns are (``"rank"``, ``"round"``).
        row_names, column_names: each row's and column's label (default ``0 .. n-1``).
        title: a line above everything; note: a line below everything.
        framed_note: the legend of a framed cell (shown when any cell is framed).
        vmax: the value painted darkest (default: the largest value of all panels).

    Returns:
        :class:`MatrixPicture`.

    Raises:
        ValueError: no panels, an empty matrix, or panels of different shapes.
    """
    if not panels:
        raise ValueError("matrix_image needs at least one panel")
    mats = [np.asarray(p.values, dtype=np.float64) for p in panels]
    if mats[0].ndim != 2 or mats[0].size == 0 or any(m.shape != mats[0].shape for m in mats):
        raise ValueError(f"every panel must be the same non-empty 2-D shape; got {[m.shape for m in mats]}")
    n_rows, n_cols = mats[0].shape
    top = float(vmax) if vmax is not None else max(float(m.max()) for m in mats)
    top = top if top > 0 else 1.0
    rows = [str(x) for x in (row_names if row_names is not None else range(n_rows))]
    cols = [str(x) for x in (column_names if column_names is not None else range(n_cols))]

    label_px, value_px, title_px = 13.0, 13.0, 15.0
    probe = Canvas(1, 1)
    cell = int(max(34, min(64, 880 / max(1, n_cols * len(panels)))))
    longest = max([probe.measure(_cell_text(v) if p.texts is None else str(t), value_px)[0]
                   for p, m in zip(panels, mats)
                   for v, t in zip(m.flatten(), (np.asarray(p.texts, dtype=object).flatten()
                                                 if p.texts is not None else m.flatten()))] + [0])
    cell = max(cell, int(longest) + 10)
    gutter = int(max(probe.measure(r, label_px)[0] for r in rows) + probe.measure(row_label, label_px)[0] + 24)
    panel_w = n_cols * cell
    per_line = max(1, min(len(panels), (MAX_WIDTH_PX - gutter) // (panel_w + 24)))
    lines = -(-len(panels) // per_line)
    head = 26 if title else 6
    foot_lines = max(len(_wrap(probe, p.footer, panel_w + 16, MIN_LABEL_PX + 1)) for p in panels)
    panel_h = 52 + n_rows * cell + 8 + 16 * foot_lines + 14
    framed_any = any(p.framed for p in panels)
    foot = (20 if note else 0) + (20 if framed_any and framed_note else 0) + 8
    width = min(MAX_WIDTH_PX, gutter + per_line * (panel_w + 24))
    height = head + lines * panel_h + foot
    cv = Canvas(width, height)
    if title:
        cv.text(title, 8, 14, title_px, INK, "bold", ha="left")
    for i, (panel, m) in enumerate(zip(panels, mats)):
        x0 = gutter + (i % per_line) * (panel_w + 24)
        y0 = head + (i // per_line) * panel_h
        cv.text(panel.title, x0 + panel_w / 2, y0 + 10, label_px, INK, "bold")
        if column_label:
            cv.text(column_label, x0 + panel_w / 2, y0 + 28, MIN_LABEL_PX + 1, INK)
        gy = y0 + 52
        for c, name in enumerate(cols):
            cv.text(name, x0 + c * cell + cell / 2, gy - 6, MIN_LABEL_PX + 1, INK, va="bottom")
        texts = np.asarray(panel.texts, dtype=object) if panel.texts is not None else None
        for r in range(n_rows):
            if i % per_line == 0:
                cv.text(rows[r], x0 - 8, gy + r * cell + cell / 2, label_px, INK, ha="right")
            for c in range(n_cols):
                fill = ramp_color(m[r, c] / top)
                cx0, cy0 = x0 + c * cell, gy + r * cell
                cv.rect(cx0, cy0, cx0 + cell + 1, cy0 + cell + 1, _BORDER)
                cv.rect(cx0 + 1, cy0 + 1, cx0 + cell, cy0 + cell, fill)
                if (r, c) in panel.framed:
                    cv.frame(cx0 + 1, cy0 + 1, cx0 + cell - 1, cy0 + cell - 1, MISMATCH_COLOR, 3)
                text = _cell_text(m[r, c]) if texts is None else str(texts[r, c])
                cv.text(text, cx0 + cell / 2, cy0 + cell / 2, value_px, _text_color(fill))
        if i % per_line == 0:
            cv.text(row_label, 8, gy + n_rows * cell / 2, label_px, INK, ha="left")
        for j, line in enumerate(_wrap(cv, panel.footer, panel_w + 16, MIN_LABEL_PX + 1)):
            cv.text(line, x0 + panel_w / 2, gy + n_rows * cell + 16 + 16 * j, MIN_LABEL_PX + 1, INK)
    y = head + lines * panel_h + 4
    if framed_any and framed_note:
        cv.frame(8, y, 22, y + 14, MISMATCH_COLOR, 3)
        cv.text(framed_note, 30, y + 7, MIN_LABEL_PX + 1, INK, ha="left")
        y += 20
    if note:
        cv.text(note, 8, y + 7, MIN_LABEL_PX + 1, INK, ha="left")
    return MatrixPicture(encode_png(cv.image), np.asarray(cv.image, dtype=np.uint8).copy())
