"""Values read from a file or a table (a saved trace, measured rows) as ints, floats, tuples of ints or
mappings, by Python's own rules (``int()``, ``float()``). What is read is typed ``object`` until one of
these says it is what the reader needs. Pure Python: no numpy, no torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import SupportsFloat, SupportsIndex, SupportsInt

__all__ = ["as_int", "as_float", "as_ints", "as_mapping"]


def as_int(value: object) -> int:
    """``int(value)``: a number or its text.

    Raises:
        TypeError: anything else (int()'s words). ValueError: text that is not a number.
    """
    if isinstance(value, (str, bytes, SupportsInt, SupportsIndex)):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(value).__name__}'")


def as_float(value: object) -> float:
    """``float(value)``: a number or its text.

    Raises:
        TypeError: anything else (float()'s words). ValueError: text that is not a number.
    """
    if isinstance(value, (str, bytes, SupportsFloat, SupportsIndex)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


def as_ints(value: object) -> tuple[int, ...]:
    """A tuple of :func:`as_int` of every item of ``value`` (TypeError when it is not iterable)."""
    if not isinstance(value, Iterable):
        raise TypeError(f"'{type(value).__name__}' object is not iterable")
    return tuple(as_int(v) for v in value)


def as_mapping(value: object, what: str) -> Mapping[str, object]:
    """``value`` if it is a mapping (a JSON object read from a file); TypeError naming ``what`` otherwise."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be an object; got {value!r}")
    return value
