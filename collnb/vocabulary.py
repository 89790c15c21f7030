"""The words collnb uses and the one check for each: world size, rank (root, src/dst), backend,
dtype, reduce op and any name picked from a list (primitive, algorithm).

Every public entry point checks its arguments with these functions, so the same mistake raises
the same exception with the same words wherever it is made: :class:`TypeError` for a value of the
wrong type, :class:`ValueError` for a value of the right type that is out of range or unknown.
Each message names the argument, what it must be, and what was given.

This module imports no torch at import time (the pure schedules and :class:`collnb.Trace` loading
use it without torch); it looks torch up only to name a ``torch.dtype`` or a
``torch.distributed.ReduceOp`` that the caller already holds.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal, Sequence

from .i18n import N_, _

__all__ = ["MAX_WORLD_SIZE", "Backend", "BACKENDS", "REDUCE_OPS", "BITWISE_OPS", "DTYPE_NAMES", "check_world_size",
           "check_rank", "check_backend", "check_choice", "check_int", "check_real", "dtype_name", "op_name", "op_hint"]

#: The most ranks collnb starts on one machine: one process per rank, and 16 is what a 2-core
#: laptop still runs in seconds (gloo all_reduce at world size 16 takes ~40 ms there).
MAX_WORLD_SIZE = 16

#: Process-group backends collnb launches: ``"gloo"`` (CPU tensors, any machine) and ``"nccl"``
#: (CUDA tensors, one rank per GPU).
#: A backend name: :func:`check_backend` returns one.
Backend = Literal["gloo", "nccl"]
BACKENDS: tuple[Backend, ...] = ("gloo", "nccl")
_BACKEND_NAMED: dict[str, Backend] = {b: b for b in BACKENDS}

#: Reduce ops, named like ``torch.distributed.ReduceOp`` members (lower case here).
REDUCE_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")

#: The bitwise reduce ops (integer and bool dtypes only).
BITWISE_OPS = ("band", "bor", "bxor")

#: Dtype names collnb tries on a backend (every one exists in torch >= 2.4). Whether a backend
#: accepts each one is detected at run time (:func:`collnb.backend_support`), never assumed here.
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool",
               "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")

_DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16",
                  "double": "float64", "fp64": "float64", "bf16": "bfloat16", "long": "int64",
                  "int": "int32", "short": "int16", "byte": "uint8", "char": "int8",
                  "cfloat": "complex64", "cdouble": "complex128"}


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, lo: int, hi: int | None = None, *, what: str = "") -> int:
    """Check that ``value`` is an int in ``lo..hi`` (``hi=None``: no upper bound) and return it.

    Args:
        name: the argument's name, as the caller spells it (``"chunk_size"``).
        what: optional words on what the number counts (``"elements per chunk"``).

    Raises:
        TypeError: not an int (a bool is not an int here): ``"chunk_size must be an int from 1 to 64
            (elements per chunk); got 'x'"``.
        ValueError: an int outside the range, with the same words.
    """
    span = (_("from {lo} to {hi}").format(lo=lo, hi=hi) if hi is not None
            else _(">= {lo}").format(lo=lo))
    note = _(" ({what})").format(what=_(what)) if what else ""
    text = _("{name} must be an int {span}{note}; got {value}").format(name=_(name), span=span, note=note,
                                                                        value=repr(value))
    if not _is_int(value):
        raise TypeError(text)
    if value < lo or (hi is not None and value > hi):
        raise ValueError(text)
    return int(value)


def check_real(name: str, value: Any, lo: float, hi: float, *, what: str = "") -> float:
    """Check that ``value`` is a finite real number in ``lo..hi`` and return it as a float.

    Args:
        name: the argument's name, as the caller spells it (``"fps"``, ``"--fps"``).
        what: optional words on the unit (``"frames per second"``).

    Raises:
        TypeError: not a real number (a bool or a str is not): ``"fps must be a number from 0.01 to 50.0
            (frames per second); got '2'"``.
        ValueError: NaN, infinite, or outside the range, with the same words.
    """
    note = _(" ({what})").format(what=_(what)) if what else ""
    text = _("{name} must be a number from {lo} to {hi}{note}; got {value}").format(
        name=name, lo=lo, hi=hi, note=note, value=repr(value))
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(text)
    number = float(value)
    if not (math.isfinite(number) and lo <= number <= hi):
        raise ValueError(text)
    return number


def check_world_size(world_size: Any, maximum: int = MAX_WORLD_SIZE, *, why: str = "") -> int:
    """Check a world size (number of ranks) and return it as an int.

    Args:
        world_size: the number of ranks asked for.
        maximum: the most this caller can run (:data:`MAX_WORLD_SIZE` on one machine; the number of
            GPUs with NCCL; the number of engines when connected).
        why: optional words on where ``maximum`` comes from (``"4 engines are connected"``).

    Raises:
        TypeError: not an int: ``"world_size must be an int from 1 to 16; got 2.5"``.
        ValueError: outside ``1..maximum``, with the same words (and ``why``).
    """
    return check_int("world_size", world_size, 1, maximum, what=why)


def check_rank(rank: Any, world_size: int, name: str = "root") -> int:
    """Check a rank argument (``root``, ``src``, ``dst``) against the world size and return it.

    Raises:
        TypeError: not an int: ``"root must be a rank, an int from 0 to 3 (world size 4); got '1'"``.
        ValueError: an int outside ``0..world_size-1``, with the same words.
    """
    text = _("{name} must be a rank, an int from 0 to {last} (world size {world_size}); got {rank}").format(
        name=name, last=world_size - 1, world_size=world_size, rank=repr(rank))
    if not _is_int(rank):
        raise TypeError(text)
    if not 0 <= rank < world_size:
        raise ValueError(text)
    return int(rank)


def check_choice(kind: str, value: Any, choices: Sequence[str]) -> str:
    """Check that ``value`` is one of the names in ``choices`` (a primitive, an algorithm, a preset).

    Args:
        kind: what is being chosen, as a learner would say it (``"primitive"``, ``"algorithm for
            all_reduce"``).

    Raises:
        TypeError: not a str: ``"primitive must be a name (str), one of: broadcast, ...; got 3"``.
        ValueError: an unknown name: ``"unknown primitive 'allreduce'; choose one of: ..."``.
    """
    listed = ", ".join(choices)
    if not isinstance(value, str):
        raise TypeError(_("{kind} must be a name (str), one of: {listed}; got {value}").format(
            kind=_(kind), listed=listed, value=repr(value)))
    if value not in choices:
        raise ValueError(_("unknown {kind} {value}; choose one of: {listed}").format(
            kind=_(kind), value=repr(value), listed=listed))
    return value


def check_backend(backend: Any) -> Backend:
    """Check a backend name (``"gloo"`` or ``"nccl"``) and return it.

    Whether the backend can run on this machine is a separate question (:func:`collnb.backend_info`).

    Raises:
        TypeError / ValueError: as :func:`check_choice`.
    """
    return _BACKEND_NAMED[check_choice(N_("backend"), backend, BACKENDS)]


def dtype_name(dtype: Any) -> str:
    """``torch.float32``, ``"float32"`` or an alias (``"fp16"``, ``"torch.half"``) -> ``"float16"``-style
    name from :data:`DTYPE_NAMES`.

    Raises:
        TypeError: neither a ``torch.dtype`` nor a str.
        ValueError: an unknown dtype, listing the valid names.
    """
    if type(dtype).__name__ == "dtype" and type(dtype).__module__ == "torch":
        name = str(dtype).replace("torch.", "")
    elif isinstance(dtype, str):
        name = dtype.strip().lower().replace("torch.", "")
        name = _DTYPE_ALIASES.get(name, name)
    else:
        raise TypeError(_("dtype must be a torch.dtype or its name (str), one of: {listed}; got {value}").format(
            listed=", ".join(DTYPE_NAMES), value=repr(dtype)))
    if name not in DTYPE_NAMES:
        raise ValueError(_("unknown dtype {value}; choose one of: {listed}").format(
            value=repr(dtype), listed=", ".join(DTYPE_NAMES)))
    return name


def op_name(op: Any) -> str:
    """``"SUM"``, ``"sum"``, ``"prod"`` or ``torch.distributed.ReduceOp.SUM`` -> ``"sum"``-style name from
    :data:`REDUCE_OPS`; ``None`` -> ``"sum"``.

    Raises:
        TypeError: a number (``ReduceOp`` members compare equal to ints, so ``3`` would pass for MIN)
            or another type.
        ValueError: an unknown name or ``ReduceOp`` member (``PREMUL_SUM``), listing the valid names.
    """
    listed = ", ".join(REDUCE_OPS)
    if op is None:
        return "sum"
    if isinstance(op, str):
        name = op.strip().lower()
        name = "product" if name == "prod" else name
        if name not in REDUCE_OPS:
            raise ValueError(_("unknown reduce op {value}; choose one of: {listed}").format(
                value=repr(op), listed=listed))
        return name
    if isinstance(op, numbers.Number):
        raise TypeError(_("op must be a name (str) or a torch.distributed.ReduceOp, not the number {value}; "
                          "choose one of: {listed}").format(value=repr(op), listed=listed))
    if type(op).__module__.startswith("torch"):
        import torch.distributed as dist  # noqa: PLC0415 - the caller already holds a torch object
        for n in REDUCE_OPS:
            if op == getattr(dist.ReduceOp, n.upper()):
                return n
        raise ValueError(_("unsupported reduce op {value}; choose one of: {listed}").format(
            value=repr(op), listed=listed))
    raise TypeError(_("op must be a name (str) or a torch.distributed.ReduceOp; got {value}; choose one of: "
                      "{listed}").format(value=repr(op), listed=listed))


def op_hint(op: str, dtype: str) -> str:
    """Why a reduce op may not fit a dtype, as a sentence with a leading space (``""`` when there is
    no general reason): AVG needs a floating-point (or complex) dtype, the bitwise ops an integer or
    bool one. ``op`` and ``dtype`` are names (:func:`op_name`, :func:`dtype_name`)."""
    floating = dtype_name(dtype).startswith(("float", "bfloat", "complex"))
    if op == "avg" and not floating:
        return _(" AVG divides by the world size, so it needs a floating-point dtype.")
    if op in BITWISE_OPS:
        return _(" Bitwise ops need an integer or bool dtype.")
    return ""
