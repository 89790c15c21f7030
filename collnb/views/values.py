"""Cell values as text, one formatter for every view: heatmap cells and their notes, replay frames,
the explorer's reference table and status line. Also the two value helpers the heatmap and the
explorer share: the first element of every chunk, and whether a result differs from its float64
reference. Byte counts and durations are written by :mod:`collnb.units`, not here.
"""

from __future__ import annotations

import math
from typing import Iterable, overload

import numpy as np
import torch

__all__ = ["format_value", "chunk_firsts", "differs_exact"]


def _compact_exp(s: str) -> str:
    # "1.23e+13" -> "1.23e13", "1e-05" -> "1e-5"
    if "e" in s:
        mant, exp = s.split("e")
        sign = "-" if exp.startswith("-") else ""
        return f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    return s


def _fmt_real(v: float, short: bool) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v.is_integer() and abs(v) < (1e5 if short else 1e6):
        return str(int(v))
    if not short:
        return _compact_exp(f"{v:.4g}")
    return _compact_exp(f"{v:.3g}" if 1e-2 <= abs(v) < 1e5 else f"{v:.2g}")


def format_value(v: object, kind: str = "tensor", *, short: bool = False) -> str:
    """Text for one value in a cell.

    Args:
        v: a Python or numpy scalar (int, float, complex, bool), a str, or any object.
        kind: ``"tensor"``; ``"time"`` writes milliseconds (a number) to 0.1.
        short: at most ~6 characters, for small cells and notes under a value: ints past 5 digits
            and floats to 2-3 significant digits (``2.9e5``, ``0.33``), bools as ``T``/``F``.

    Returns:
        str: ints as is (``1.23e10`` past 6 digits), integral floats without ``.0``, other floats
        to 4 significant digits, ``inf``/``-inf``/``nan``, complex as ``a+bj`` (a real number when
        the imaginary part is 0 and ``short``), bools as ``True``/``False``, strings as is, other
        objects as their repr cut to 12 characters.
    """
    if isinstance(v, np.generic):
        v = v.item()
    if kind == "time" and isinstance(v, (int, float)):
        return f"{float(v):.1f}"
    if isinstance(v, bool):
        return ("T" if v else "F") if short else ("True" if v else "False")
    if isinstance(v, int):
        s = str(v)
        if len(s) <= (5 if short else 6):
            return s
        return _compact_exp(f"{v:.1e}" if short else f"{v:.2e}")
    if isinstance(v, float):
        return _fmt_real(v, short)
    if isinstance(v, complex):
        if short and v.imag == 0:
            return _fmt_real(v.real, True)
        im = v.imag
        return f"{_fmt_real(v.real, False)}{'-' if im < 0 else '+'}{_fmt_real(abs(im), False)}j"
    if isinstance(v, str):
        return v
    s = repr(v)
    return s if len(s) <= 12 else s[:11] + "…"


@overload
def chunk_firsts(t: torch.Tensor | Iterable[object], chunk_size: int) -> list[object]: ...
@overload
def chunk_firsts(t: None, chunk_size: int) -> None: ...
@overload
def chunk_firsts(t: torch.Tensor | Iterable[object] | None, chunk_size: int) -> list[object] | None: ...
def chunk_firsts(t: torch.Tensor | Iterable[object] | None, chunk_size: int) -> list[object] | None:
    """First element of every chunk of a flat tensor ``t`` (``chunk_size`` elements per chunk), as
    Python scalars (bools as bools, float8 through float32); ``None`` stays ``None``, a list (object
    collectives) is returned as a list."""
    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        return list(t)
    if t.numel() == 0:
        return []
    first = t.view(-1, chunk_size)[:, 0]
    if first.dtype == torch.bool:
        return first.view(torch.uint8).ne(0).tolist()
    if first.dtype.itemsize == 1 and first.dtype.is_floating_point:  # float8: no tolist()
        return first.to(torch.float32).tolist()
    try:
        return first.tolist()
    except (TypeError, RuntimeError):
        return first.to(torch.float64).tolist()


def differs_exact(v: object, x: object) -> bool:
    """Whether a result value ``v`` differs from the float64 reference ``x`` (nan equals nan;
    bools compare by truth value, numpy scalars as their Python value; values that are not numbers,
    a str that reads as one included, never differ)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(x, np.generic):
        x = x.item()
    if not isinstance(v, (int, float, complex)) or not isinstance(x, (int, float, complex)):
        return False
    if isinstance(x, complex) or isinstance(v, complex):
        return complex(v) != complex(x) and not (_isnan(v) and _isnan(x))
    fv, fx = float(v), float(x)
    if math.isnan(fv) and math.isnan(fx):
        return False
    return fv != fx


def _isnan(value: complex) -> bool:
    z = complex(value)
    return math.isnan(z.real) or math.isnan(z.imag)
