"""The teaching inputs, and a run's own inputs checked and made into tensors.

**Teaching input**: rank ``r``, chunk ``c`` holds ``10*r + c`` (``100*r + c`` when
``world_size > 10``, so chunk indices up to 15 stay readable): the value tells where it came
from. Every element of a chunk holds the chunk's value (as the original examples'
``torch.full((chunk_size,), ...)``). Values are made as int64 and cast to the run's dtype with
``Tensor.to`` (:func:`make_tensor`): integers wrap (``int8``: 150 -> -106), ``bool`` becomes
``value != 0``, floats round. The dtype effects are part of the lesson. The object collectives
send the Python strings ``"r{rank}c{chunk}"``; ``barrier`` measures time instead.
"""

from __future__ import annotations

import numbers
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from ..i18n import _
from ..vocabulary import check_rank, check_world_size
from .specs import PrimitiveSpec, get_spec

__all__ = ["teaching_value", "teaching_inputs", "make_tensor", "check_inputs", "check_input_values", "InputTable"]

#: A run's inputs as the ranks build from them: per rank, one value per chunk of its input buffer
#: (numbers for tensor primitives, any picklable objects for object primitives).
InputTable = list[list[object]]


def teaching_value(rank: int, chunk: int, world_size: int) -> int:
    """The teaching value of ``rank``'s chunk ``chunk``: ``10*rank + chunk`` (``100*rank + chunk``
    when ``world_size > 10``), so the value tells its origin. Returns a Python int."""
    return (10 if world_size <= 10 else 100) * rank + chunk


def teaching_inputs(primitive: str, world_size: int, root: int = 0) -> InputTable:
    """The per-rank teaching input of ``primitive``: a list (one entry per rank) of lists of chunk
    values (Python ints; strings ``"r{rank}c{chunk}"`` for object primitives). A rank without an
    input buffer (a non-src rank of ``scatter``) has an empty list. ``barrier`` has none: its
    before/after are measured times.

    Raises:
        TypeError, ValueError: an unknown primitive, a world size outside ``1..16`` or a root that
            is not a rank (:mod:`collnb.vocabulary`).
    """
    spec = get_spec(primitive)
    check_world_size(world_size)
    check_rank(root, world_size, "root")
    return _teaching_table(spec, world_size, root)


def _teaching_table(spec: PrimitiveSpec, world_size: int, root: int) -> InputTable:
    """:func:`teaching_inputs` of a checked ``spec``, ``world_size`` and ``root``."""
    out: InputTable = []
    for r in range(world_size):
        n = spec.n_in(world_size, r, root)
        if spec.kind == "object":
            out.append([f"r{r}c{c}" for c in range(n)])
        elif spec.kind == "time":
            out.append([])
        else:
            out.append([teaching_value(r, c, world_size) for c in range(n)])
    return out


def make_tensor(values: Sequence[object], chunk_size: int, dtype: torch.dtype | None,
                device: torch.device | str | None = None) -> torch.Tensor:
    """Chunk values -> flat tensor of ``len(values) * chunk_size`` elements of ``dtype`` (a
    ``torch.dtype``) on ``device`` (default CPU): every element of chunk ``c`` holds ``values[c]``.

    The values are made as int64 (ints), bool, float64 (any float) or complex128 (any complex)
    and cast with ``Tensor.to``, so integers wrap (``int8``: 150 -> -106), ``bool`` becomes
    ``value != 0`` and floats round: the one cast rule of the ranks, the reference and the
    algorithm runs. ``values`` must be numbers (see :func:`check_inputs`)."""
    if len(values) == 0:
        return torch.zeros(0, dtype=dtype, device=device)
    if any(isinstance(v, complex) for v in values):
        base = torch.tensor(values, dtype=torch.complex128)
    elif any(isinstance(v, float) for v in values):
        base = torch.tensor(values, dtype=torch.float64)
    else:  # ints (int64) or bools
        base = torch.tensor(values)
    return base.repeat_interleave(chunk_size).to(device=device, dtype=dtype)


def check_inputs(inputs: Iterable[Iterable[object]] | Callable[[int, int], object] | None, spec: PrimitiveSpec,
                 world_size: int, root: int) -> InputTable:
    """A run's ``inputs`` argument as the table the ranks build from: per rank a list of chunk
    values (``spec.n_in`` of them; numpy scalars become Python numbers). ``None`` gives the
    :func:`teaching_inputs`; a callable ``f(rank, chunk)`` is called once per chunk.

    Raises:
        TypeError: ``inputs`` is neither a list of lists nor a callable.
        ValueError: a row count or chunk count that does not fit ``spec`` at ``world_size``, a value
            that is not a number (tensor primitives), or any inputs for ``barrier``.
    """
    if inputs is None:
        return _teaching_table(spec, world_size, root)
    if spec.kind == "time":
        raise ValueError(_("barrier takes no inputs: it measures when each rank arrives and leaves"))
    want = [spec.n_in(world_size, r, root) for r in range(world_size)]
    shape_msg = _("{primitive} at world size {world_size} needs one list per rank with {want} chunk values "
                  "(rank r's list has want[r] values), or a callable f(rank, chunk)").format(
                      primitive=spec.name, world_size=world_size, want=want)
    table: InputTable
    if callable(inputs):
        table = [[inputs(r, c) for c in range(want[r])] for r in range(world_size)]
    else:
        try:
            table = [list(row) for row in inputs]
        except TypeError:
            raise TypeError(_("inputs must be a list of lists or a callable; got {type}. {shape}").format(
                type=type(inputs).__name__, shape=shape_msg)) from None
    if len(table) != world_size:
        raise ValueError(_("inputs has {n} rows; {shape}").format(n=len(table), shape=shape_msg))
    for r, row in enumerate(table):
        if want[r] == 0:
            table[r] = []
            continue
        if len(row) != want[r]:
            raise ValueError(_("inputs[{r}] has {n} values; {shape}").format(r=r, n=len(row), shape=shape_msg))
        if spec.kind == "tensor":
            for c, v in enumerate(row):
                row[c] = v = _plain_number(v)
                if not isinstance(v, (bool, int, float, complex)):
                    raise ValueError(_("inputs[{r}] holds {value}; tensor primitives take numbers "
                                       "(Python or numpy ints, floats, complex numbers, bools)").format(
                                           r=r, value=repr(v)))
            table[r] = row
    return table


def _plain_number(v: object) -> object:
    """A numpy scalar as the Python number it holds (np.int64 -> int ...); anything else as is."""
    if isinstance(v, (bool, int, float, complex)):
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, numbers.Complex):
        return complex(v)
    return v


def check_input_values(table: InputTable, dname: str) -> None:
    """Refuse, before launch, inputs the ranks could not build as documented in
    :func:`make_tensor`: complex numbers for a real dtype (the imaginary part would be dropped),
    floats for an integer dtype, integers outside int64 (integer inputs are made as int64, then
    cast: they wrap into the dtype, as overflow while the ranks combine them does).

    Args:
        table: the rows :func:`check_inputs` returned.
        dname: the run's dtype name (:func:`collnb.vocabulary.dtype_name`).

    Raises:
        ValueError: the first value the ranks could not build, saying what to give instead.
    """
    dt: torch.dtype = getattr(torch, dname)
    lo, hi = -(1 << 63), (1 << 63) - 1
    for r, row in enumerate(table):
        for v in row:
            if isinstance(v, complex) and not dt.is_complex:
                raise ValueError(_("inputs[{r}] holds the complex number {value} but dtype {dtype} is not complex; "
                                   "use complex64/complex128 or give real numbers").format(
                                       r=r, value=repr(v), dtype=dname))
            if isinstance(v, float) and not (dt.is_floating_point or dt.is_complex):
                raise ValueError(_("inputs hold floats but dtype {dtype} is not floating point; give integers").format(
                    dtype=dname))
            if isinstance(v, int) and not isinstance(v, bool) and not lo <= v <= hi:
                raise ValueError(_("inputs[{r}] holds {value}, outside int64 ({lo}..{hi}): integer inputs are made "
                                   "as int64 and then cast to {dtype}; give a smaller integer").format(
                                       r=r, value=v, lo=lo, hi=hi, dtype=dname)
                                 + (_(", or a float such as {value}").format(value=f"{float(v):.3g}")
                                    if dt.is_floating_point else ""))
