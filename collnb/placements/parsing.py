"""Placements and meshes as learners write them, parsed and checked before any rank starts.

A DTensor's placement on one mesh dimension is one of torch's three
(``torch.distributed.tensor.placement_types``):

* ``Shard(d)`` (short ``S(d)``): the tensor is split along tensor dim ``d`` over the ranks of that
  mesh dimension, as ``torch.chunk`` splits it (chunks of ``ceil(n / k)``, the last ones smaller or
  empty);
* ``Replicate()`` (``R``): every rank of that mesh dimension holds the whole (remaining) tensor;
* ``Partial(op)`` (``P``, ``P(max)``): every rank holds a contribution; the value is the ``op``
  (``sum``, ``avg``, ``min``, ``max``, ``product``: ``Partial.ALL_REDUCE_OPS``) of them, pending.

:func:`parse_placements` accepts torch's objects, their reprs (``Shard(dim=0)``, ``Partial(sum)``),
torch's constructor calls (``Shard(0)``, ``Replicate()``, ``Partial()``, ``Partial('max')``) and the
short forms torch prints (``S(0)``, ``R``, ``P``, ``P(max)``), one per mesh dimension, as a list or
one string (``"S(0),R"``). This module imports no torch at import time (the explorer's choices and
the command line check with it); :meth:`Placement.to_torch` makes the torch object inside a rank.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from ..i18n import N_, _
from ..vocabulary import MAX_WORLD_SIZE, check_choice, check_int, dtype_name

if TYPE_CHECKING:
    from torch.distributed.tensor import Partial, Shard
    from torch.distributed.tensor.placement_types import Placement as TorchPlacement

__all__ = ["Placement", "PARTIAL_OPS", "DTYPES", "parse_placement", "parse_placements", "parse_mesh",
           "check_shape", "placements_text", "mesh_text", "exact_limit", "largest_value", "row_base"]

#: Reduce ops a ``Partial`` placement can hold (torch 2.13 ``Partial.ALL_REDUCE_OPS``).
PARTIAL_OPS = ("sum", "avg", "min", "max", "product")
#: Dtypes of the teaching tensors: every element names its global index exactly in these.
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8")
#: Largest tensor (elements) :func:`collnb.redistribute` accepts: 4 MiB of float32 (a few MB per rank).
MAX_NUMEL = 1 << 20
_EXACT = {"float32": 2 ** 24, "float64": 2 ** 53, "float16": 2 ** 11, "bfloat16": 2 ** 8,
          "int64": 2 ** 63 - 1, "int32": 2 ** 31 - 1, "int16": 2 ** 15 - 1, "int8": 2 ** 7 - 1}

_FORMS = "Shard(0) / S(0), Replicate() / R, Partial() / P, Partial('max') / P(max)"


@dataclass(frozen=True)
class Placement:
    """One mesh dimension's placement, without torch.

    Attributes:
        kind: ``"shard"``, ``"replicate"`` or ``"partial"``.
        dim: the tensor dim of a shard (int >= 0), else ``None``.
        op: the reduce op of a partial (one of :data:`PARTIAL_OPS`), else ``None``.
    """

    kind: Literal["shard", "replicate", "partial"]
    dim: int | None = None
    op: str | None = None

    @property
    def short(self) -> str:
        """As torch prints it: ``S(0)``, ``R``, ``P`` (sum), ``P(max)``."""
        if self.kind == "shard":
            return f"S({self.dim})"
        if self.kind == "replicate":
            return "R"
        return "P" if self.op == "sum" else f"P({self.op})"

    @property
    def torch_repr(self) -> str:
        """As torch's constructor is called: ``Shard(0)``, ``Replicate()``, ``Partial()``, ``Partial('max')``."""
        if self.kind == "shard":
            return f"Shard({self.dim})"
        if self.kind == "replicate":
            return "Replicate()"
        return "Partial()" if self.op == "sum" else f"Partial({self.op!r})"

    def to_torch(self) -> TorchPlacement:
        """The ``torch.distributed.tensor`` placement object (imports torch)."""
        from torch.distributed.tensor import Partial, Replicate, Shard  # noqa: PLC0415 - rank side
        if self.kind == "shard":
            return Shard(self.shard_dim)
        if self.kind == "replicate":
            return Replicate()
        return Partial(self.partial_op)

    @property
    def shard_dim(self) -> int:
        """The tensor dim of a shard (``dim``, as an int).

        Raises:
            ValueError: not a shard, or a shard made without a dim.
        """
        if self.kind != "shard" or self.dim is None:
            raise ValueError(_("{placement} is not a Shard of a tensor dim").format(placement=repr(self)))
        return self.dim

    @property
    def partial_op(self) -> str:
        """The reduce op of a partial (``op``, one of :data:`PARTIAL_OPS`).

        Raises:
            ValueError: not a partial, or a partial made without an op.
        """
        if self.kind != "partial" or self.op is None:
            raise ValueError(_("{placement} is not a Partial with a reduce op").format(placement=repr(self)))
        return self.op

    def __str__(self) -> str:
        return self.short


_SHORT = re.compile(r"^(?:S|Shard)\s*\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\)$", re.I)
_REPLICATE = re.compile(r"^(?:R|Replicate(?:\s*\(\s*\))?)$", re.I)
_PARTIAL = re.compile(r"^(?:P|Partial)(?:\s*\(\s*(?:reduce_op\s*=\s*)?['\"]?(\w*)['\"]?\s*\))?$", re.I)


def parse_placement(value: object, ndim: int | None = None) -> Placement:
    """One placement from any of the forms in the module docstring (or a torch placement object).

    Args:
        value: ``"S(0)"``, ``"Shard(0)"``, ``"R"``, ``"Replicate()"``, ``"P"``, ``"P(max)"``,
            ``"Partial('avg')"``, a :class:`Placement`, or a torch ``Shard``/``Replicate``/``Partial``.
        ndim: the tensor's number of dims: a shard dim must be below it (a negative one counts from
            the end, as torch normalises it); ``None`` skips that check.

    Raises:
        TypeError: not a str or placement.
        ValueError: an unknown placement or reduce op, or a shard dim outside the tensor, saying
            which forms are accepted.
    """
    if isinstance(value, Placement):
        p = value
    elif isinstance(value, str):
        p = _parse_text(value.strip())
    elif type(value).__module__.startswith("torch.distributed"):
        p = _parse_torch(value)
    else:
        raise TypeError(_("a placement is a str ({forms}) or a torch placement; got {value}").format(
            forms=_FORMS, value=repr(value)))
    if p.kind == "shard" and ndim is not None:
        if not -ndim <= p.shard_dim < ndim:
            raise ValueError(_("{placement} shards tensor dim {dim}, but the tensor has {ndim} dim(s) "
                               "(dims 0..{last}); choose a dim below {ndim}").format(
                                   placement=p.torch_repr, dim=p.dim, ndim=ndim, last=ndim - 1))
        if p.shard_dim < 0:
            p = Placement("shard", p.shard_dim + ndim)
    return p


def _parse_text(text: str) -> Placement:
    m = _SHORT.match(text)
    if m:
        return Placement("shard", int(m.group(1)))
    if _REPLICATE.match(text):
        return Placement("replicate")
    m = _PARTIAL.match(text)
    if m:
        op = (m.group(1) or "sum").lower()
        check_choice(N_("reduce op of a Partial placement"), op, PARTIAL_OPS)
        return Placement("partial", op=op)
    raise ValueError(_("unknown placement {value}; write one of: {forms}").format(value=repr(text), forms=_FORMS))


def _parse_torch(obj: object) -> Placement:
    """A torch placement object as a :class:`Placement` (by class name: torch is not imported here)."""
    name = type(obj).__name__
    if name == "Shard":
        return Placement("shard", int(cast("Shard", obj).dim))
    if name == "Replicate":
        return Placement("replicate")
    if name == "Partial":
        op = str(cast("Partial", obj).reduce_op)
        check_choice(N_("reduce op of a Partial placement"), op, PARTIAL_OPS)
        return Placement("partial", op=op)
    raise ValueError(_("collnb shows Shard, Replicate and Partial placements; got {value}").format(value=repr(obj)))


def _split(text: str) -> list[str]:
    """``"S(0), Partial('max')"`` -> ``["S(0)", "Partial('max')"]`` (commas inside brackets kept)."""
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_placements(value: object, mesh_ndim: int, ndim: int | None = None, *,
                     name: str = "placements") -> tuple[Placement, ...]:
    """One placement per mesh dimension: a list/tuple of placements (any form of
    :func:`parse_placement`), one placement for a 1-D mesh, or one string with the placements
    separated by commas (``"S(0),R"``, ``"(Shard(0), Replicate())"``).

    Args:
        value: the placements in any of those forms.
        mesh_ndim: the mesh's number of dimensions (that many placements are needed).
        ndim: the tensor's number of dims (shard dims are checked against it).
        name: the argument's name in error messages (``"src"``, ``"dst"``).

    Returns:
        tuple of :class:`Placement`, one per mesh dimension.

    Raises:
        TypeError / ValueError: as :func:`parse_placement`, or the wrong number of placements; a
            Partial of two different reduce ops (torch refuses mixed Partial types).
    """
    items: Sequence[object]
    if isinstance(value, str):
        text = value.strip()
        if _single(text):
            items = [text]
        else:
            if text[:1] in "([" and text[-1:] in ")]":
                text = text[1:-1]
            items = _split(text)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if len(items) != mesh_ndim:
        raise ValueError(_("{name} needs one placement per mesh dimension ({ndim}); got {n}: {value}. Example for "
                           "a {ndim}-D mesh: {example}").format(
                               name=name, ndim=mesh_ndim, n=len(items), value=repr(value),
                               example=", ".join(["S(0)"] + ["R"] * (mesh_ndim - 1))))
    out = []
    for i, item in enumerate(items):
        try:
            out.append(parse_placement(item, ndim))
        except (TypeError, ValueError) as exc:
            raise type(exc)(_("{name}, mesh dim {i}: {error}").format(name=name, i=i, error=exc)) from None
    ops = {p.partial_op for p in out if p.kind == "partial"}
    if len(ops) > 1:
        raise ValueError(_("{name} mixes Partial reduce ops ({ops}); torch refuses mixed Partial "
                           "types in one DTensor (assert_no_mixed_partial_types): use one op").format(
                               name=name, ops=", ".join(sorted(ops))))
    return tuple(out)


def _single(text: str) -> bool:
    """Whether ``text`` is one placement (``Shard(0)``), not a bracketed list of them."""
    try:
        _parse_text(text)
        return True
    except ValueError:
        return False


def parse_mesh(value: object) -> tuple[int, ...]:
    """A mesh shape: an int (``4``), a tuple/list of ints (``(2, 2)``) or text (``"2x2"``, ``"2,4"``,
    ``"8"``). Ranks are laid out row-major, as ``init_device_mesh`` does (rank ``r`` of a 2x4 mesh at
    ``(r // 4, r % 4)``).

    Raises:
        TypeError / ValueError: not a shape, a size below 2 (a mesh dimension of one rank does no
            communication: leave it out), more than 3 dimensions, or more ranks than
            :data:`collnb.vocabulary.MAX_WORLD_SIZE`.
    """
    if isinstance(value, str):
        parts = [p for p in re.split(r"[x×,*\s]+", value.strip().strip("()[]").lower()) if p]
        try:
            shape = tuple(int(p) for p in parts)
        except ValueError:
            raise ValueError(_("a mesh is written as sizes joined by x, e.g. 2x2 or 8; got {value}").format(
                value=repr(value))) from None
    elif isinstance(value, int) and not isinstance(value, bool):
        shape = (value,)
    elif isinstance(value, (tuple, list)):
        shape = tuple(value)
    else:
        raise TypeError(_("mesh must be a shape such as (2, 2), 4 or '2x2'; got {value}").format(value=repr(value)))
    if not 1 <= len(shape) <= 3:
        raise ValueError(_("mesh must have 1 to 3 dimensions; got {value}").format(value=repr(value)))
    for s in shape:
        check_int(N_("each mesh size"), s, 2, MAX_WORLD_SIZE)
    n = math.prod(shape)
    if n > MAX_WORLD_SIZE:
        raise ValueError(_("mesh {mesh} needs {n} ranks; collnb starts at most {most} on one machine: choose a "
                           "smaller mesh").format(mesh=mesh_text(shape), n=n, most=MAX_WORLD_SIZE))
    return tuple(int(s) for s in shape)


def check_shape(shape: object, dtype: object = "float32") -> tuple[tuple[int, ...], str]:
    """Check a global tensor shape (1 or 2 dims, sizes >= 1, at most :data:`MAX_NUMEL` elements) and
    that its teaching values (:func:`collnb.placements.teaching_values`) are exact in ``dtype``;
    returns ``(shape tuple, dtype name)``.

    Raises:
        TypeError / ValueError: a shape that is not 1 or 2 positive ints, too many elements, a dtype
            not in :data:`DTYPES`, or a dtype that cannot hold every teaching value exactly (the
            message gives the largest value and the dtype's largest exact integer).
    """
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, str):
        shape = tuple(int(p) for p in re.split(r"[x×,\s]+", shape.strip().strip("()")) if p)
    if not isinstance(shape, (tuple, list)) or not 1 <= len(shape) <= 2:
        raise ValueError(_("shape must be 1 or 2 sizes, e.g. (4, 6); got {value}").format(value=repr(shape)))
    for s in shape:
        check_int(N_("each size of shape"), s, 1, MAX_NUMEL)
    shape = tuple(int(s) for s in shape)
    if math.prod(shape) > MAX_NUMEL:
        raise ValueError(_("shape {shape} has {n} elements; at most {most} (a few MB per rank)").format(
            shape=shape, n=math.prod(shape), most=MAX_NUMEL))
    name = dtype_name(dtype)
    check_choice(N_("dtype of the teaching tensor"), name, DTYPES)
    top, limit = largest_value(shape), exact_limit(name)
    if top > limit:
        raise ValueError(_("the teaching values of shape {shape} go up to {top}, which {dtype} cannot hold exactly "
                           "(its largest exact integer is {limit}); choose a smaller shape or a wider dtype").format(
                               shape=shape, top=top, dtype=name, limit=limit))
    return shape, name


def exact_limit(dtype: str) -> int:
    """The largest integer ``dtype`` (a name of :data:`DTYPES`) holds exactly, with every integer
    below it (floats: ``2**(mantissa bits + 1)``; ints: their maximum)."""
    return _EXACT[dtype]


def row_base(cols: int) -> int:
    """The row step ``B`` of a 2-D teaching tensor with ``cols`` columns (``v[i, j] = B*i + j``): the
    power of ten above the column count, at least 10."""
    return 10 ** max(1, math.ceil(math.log10(cols))) if cols > 1 else 10


def largest_value(shape: int | Sequence[int]) -> int:
    """The largest teaching value (:func:`collnb.placements.teaching_values`) of ``shape`` (an int or
    1-2 sizes)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    return dims[0] - 1 if len(dims) == 1 else (dims[0] - 1) * row_base(dims[1]) + dims[1] - 1


def placements_text(placements: Iterable[object]) -> str:
    """``(S(0), R)`` as torch prints a tuple of placements (short forms); one placement alone as is."""
    ps = [str(p) for p in placements]
    return ps[0] if len(ps) == 1 else "(" + ", ".join(ps) + ")"


def mesh_text(shape: Iterable[int]) -> str:
    """``(2, 2)`` -> ``"2×2"``."""
    return "×".join(str(s) for s in shape)
