"""Numbers with units, written one way everywhere: bytes (binary prefixes, as nccl-tests and
``torch.cuda.memory_summary`` print them), seconds and bandwidth.

Heatmap captions, replay frames, the explorer's status line, the bandwidth lab's tables and plot
ticks all format through these functions, so 1 MiB never reads "1.0 MiB" in one place and
"1048576 B" in another. Text tables are padded by display columns (:func:`pad`), so a column of
Chinese words (two columns per character) lines up as an English one does. No torch, no numpy.
"""

from __future__ import annotations

import math
import unicodedata

__all__ = ["BYTE_UNITS", "format_bytes", "format_seconds", "format_rate", "display_width", "pad"]

#: Binary byte units, largest first: (bytes in one unit, full name, one-letter tick name).
BYTE_UNITS = ((1 << 30, "GiB", "G"), (1 << 20, "MiB", "M"), (1 << 10, "KiB", "K"))


def _sig(value: float, digits: int) -> str:
    """``value`` with at most ``digits`` significant digits, no trailing zeros, no exponent below 1e6."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    text = f"{value:.{digits}g}"
    if "e" in text:  # 1.23e+03 -> 1230: within our units values stay below 1024
        text = f"{value:.{max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))}f}"
    return text


def format_bytes(n: float, digits: int = 3, *, compact: bool = False) -> str:
    """A byte count in the largest binary unit that is at most ``n``: ``format_bytes(65536) == "64 KiB"``,
    ``format_bytes(1536) == "1.5 KiB"``, ``format_bytes(12) == "12 B"``.

    Args:
        n: bytes (int or float, >= 0; a negative count is written with its sign).
        digits: significant digits kept for a value that is not a whole number of units.
        compact: tick-label style without a space or a "B": ``"64K"``, ``"1M"``, ``"512"``.

    Returns:
        str. Units are powers of 1024 (KiB, MiB, GiB), as nccl-tests' size column uses.
    """
    sign = "-" if n < 0 else ""
    x = abs(float(n))
    for size, unit, tick in BYTE_UNITS:
        if x >= size:
            return f"{sign}{_sig(x / size, digits)}{tick if compact else ' ' + unit}"
    return f"{sign}{_sig(x, digits)}" + ("" if compact else " B")


def format_seconds(s: float, digits: int = 3) -> str:
    """A duration in s, ms, µs or ns, whichever keeps the number at least 1:
    ``format_seconds(0.0123) == "12.3 ms"``, ``format_seconds(2.5e-6) == "2.5 µs"``.

    Args:
        s: seconds (float); ``0`` is ``"0 s"``, ``nan``/``inf`` are written as Python writes them.
        digits: significant digits.
    """
    if s == 0 or not math.isfinite(s):
        return f"{s:g} s"
    x = abs(s)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if x >= scale:
            return f"{_sig(s / scale, digits)} {unit}"
    return f"{_sig(s / 1e-9, digits)} ns"


def format_rate(bytes_per_second: float, digits: int = 3) -> str:
    """A bandwidth in GB/s, decimal as nccl-tests' algbw/busbw columns are (1 GB/s = 1e9 bytes/s):
    ``format_rate(1.5e9) == "1.5 GB/s"``."""
    return f"{_sig(bytes_per_second / 1e9, digits)} GB/s"


def display_width(text: str) -> int:
    """How many terminal columns ``text`` takes: two for each wide or full-width character (CJK,
    Unicode's East Asian Width ``W``/``F``), one for any other (ASCII, ✓, α)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in str(text))


def pad(text: str, width: int, align: str = "<") -> str:
    """``text`` padded with spaces to ``width`` display columns (:func:`display_width`), left- (``"<"``)
    or right-aligned (``">"``): for ASCII the same as ``f"{text:<{width}}"`` / ``f"{text:>{width}}"``;
    text already wider is returned as is.

    Raises:
        ValueError: ``align`` other than ``"<"`` and ``">"``.
    """
    if align not in ("<", ">"):
        raise ValueError(f"align must be '<' (left) or '>' (right); got {align!r}")
    fill = " " * max(0, width - display_width(text))
    return str(text) + fill if align == "<" else fill + str(text)
