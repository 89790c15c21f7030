"""The teaching tensor and every rank's local shard, computed by hand: slicing the global tensor
with numpy as torch's placements define it, without DTensor or torch.distributed.

* **Teaching values** (:func:`teaching_values`): each element names its global index: ``v[i] = i``
  in 1-D, ``v[i, j] = B*i + j`` in 2-D with ``B`` the power of ten above the column count
  (``v[2, 5] = 25`` for up to 10 columns, ``205`` for up to 100).
* **Shards** (:func:`local_bounds`): along a tensor dim sharded by mesh dimensions ``d1 < d2 <
  ...`` (torch's default shard order: left to right), each one splits the range the previous left
  as ``torch.chunk`` does: chunks of ``ceil(L / k)``, so the last chunks are smaller or empty
  (6 rows over 4 ranks: 2, 2, 2, 0). Source: ``Shard._split_tensor`` and
  ``Shard.local_shard_size_and_offset`` in ``torch/distributed/tensor/placement_types.py``.
* **Partial contributions** (:func:`contributions`): over the ``K`` ranks of the Partial mesh
  dimensions (rank ``q`` in row-major order of those dimensions) the values are split so that
  their reduction gives the teaching value exactly: ``sum`` splits ``v`` into ``K`` integer parts
  (``v // K``, one more on the first ``v % K``), ``avg`` holds ``v + 2q - (K - 1)`` (the offsets
  cancel), ``max``/``min`` put ``v`` on rank ``index % K`` and ``v // 2`` / ``v + 1 + q`` elsewhere,
  ``product`` ``v`` on rank ``index % K`` and 1 elsewhere.
* **Expected locals** (:func:`expected_local`): a rank's local tensor for a placement: the
  contributions reduced over the Partial mesh dimensions the placement no longer has, then sliced
  by its shards. A Partial that the source does not hold on the same mesh dimension is refused
  (:func:`refusal`: torch's rule in ``DTensor.redistribute``), except, from torch 2.14, a
  ``Shard(d) -> Partial("sum")``: each rank zero-fills around its shard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence

import numpy as np
import numpy.typing as npt

from ..i18n import _
from .parsing import Placement, exact_limit, row_base

__all__ = ["teaching_values", "coordinates", "local_bounds", "contributions",
           "expected_local", "refusal", "owners", "partial_dims", "new_partial_dims", "zero_fill_is_exact",
           "partial_sums"]

#: A float64 numpy array: teaching values, contributions, local tensors of the reference.
Floats = npt.NDArray[np.float64]


def teaching_values(shape: int | Sequence[int]) -> Floats:
    """The global teaching tensor (float64 numpy array of ``shape``, an int or 1-2 sizes; see the
    module docstring)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if len(dims) == 1:
        return np.arange(dims[0], dtype=np.float64)
    rows, cols = dims
    return (np.arange(rows, dtype=np.float64)[:, None] * row_base(cols) + np.arange(cols, dtype=np.float64)[None, :])


def coordinates(rank: int, mesh: Sequence[int]) -> tuple[int, ...]:
    """Rank ``rank``'s coordinate in a row-major mesh of shape ``mesh`` (as ``init_device_mesh``)."""
    return tuple(int(c) for c in np.unravel_index(rank, mesh))


def local_bounds(shape: Sequence[int], mesh: Sequence[int], placements: Sequence[Placement],
                 coord: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """``((lo, hi), ...)`` per tensor dim: the global index range a rank at mesh coordinate ``coord``
    holds under ``placements`` (torch.chunk's split, mesh dimensions left to right)."""
    bounds = [(0, s) for s in shape]
    for d, p in enumerate(placements):
        if p.kind != "shard":
            continue
        lo, hi = bounds[p.shard_dim]
        length, k = hi - lo, mesh[d]
        size = -(-length // k)  # ceil, as torch.chunk
        start = min(coord[d] * size, length)
        bounds[p.shard_dim] = (lo + start, lo + min(start + size, length))
    return tuple(bounds)


def partial_dims(placements: Sequence[Placement]) -> tuple[int, ...]:
    """The mesh dimensions whose placement is a Partial."""
    return tuple(d for d, p in enumerate(placements) if p.kind == "partial")


def contributions(values: npt.ArrayLike, k: int, op: str) -> Floats:
    """``(k, *values.shape)`` float64: what each of ``k`` Partial ranks holds so that ``op`` over
    them gives ``values`` exactly (module docstring)."""
    v = np.asarray(values, dtype=np.float64)
    q = np.arange(k, dtype=np.float64).reshape((k,) + (1,) * v.ndim)
    if k == 1:
        return v[None].copy()
    if op == "sum":
        base, rem = np.floor(v / k), np.mod(v, k)
        return base[None] + (q < rem[None])
    if op == "avg":
        return v[None] + 2 * q - (k - 1)
    owner = np.mod(np.arange(v.size).reshape(v.shape), k)[None] == q
    if op == "max":
        return np.where(owner, v[None], np.floor(v[None] / 2))
    if op == "min":
        return np.where(owner, v[None], v[None] + 1 + q)
    if op == "product":
        return np.where(owner, v[None], 1.0)
    raise ValueError(f"no contributions for reduce op {op!r}")


def _reduce(a: Floats, axes: tuple[int, ...], op: str) -> Floats:
    """``op`` (a name of :data:`collnb.placements.PARTIAL_OPS`) of ``a`` over ``axes``."""
    if not axes:
        return a
    reducers: dict[str, Callable[..., Floats]] = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min,
                                                  "product": np.prod}
    return reducers[op](a, axis=axes)


def new_partial_dims(src: Sequence[Placement], dst: Sequence[Placement]) -> tuple[int, ...]:
    """The mesh dimensions where ``dst`` asks for a Partial that ``src`` does not hold there."""
    return tuple(d for d, (a, b) in enumerate(zip(src, dst)) if b.kind == "partial" and a != b)


def expected_local(values: Floats, mesh: Sequence[int], src: Sequence[Placement], placements: Sequence[Placement],
                   coord: Sequence[int]) -> Floats:
    """The local tensor (float64) a rank at ``coord`` holds under ``placements`` for a DTensor whose
    source placements ``src`` made each Partial rank hold its :func:`contributions`: reduced over
    ``src``'s Partial mesh dimensions that ``placements`` does not keep, then sliced by its shards.

    A Partial that ``placements`` asks for where ``src`` holds a Shard (``Shard(d) -> Partial("sum")``,
    which torch accepts from 2.14, see :func:`refusal`) is torch's local zero-fill: the rank keeps the
    values of its source shard and holds 0 everywhere else in its local tensor
    (``Shard._to_partial_tensor`` in torch 2.14+'s ``placement_types.py``), so that the sum over that
    mesh dimension is the tensor. Any other Partial ``placements`` asks for is refused by torch."""
    pdims = partial_dims(src)
    if pdims:
        op = src[pdims[0]].partial_op
        sizes = tuple(mesh[d] for d in pdims)
        c = contributions(values, math.prod(sizes), op).reshape(sizes + values.shape)
        keep = [i for i, d in enumerate(pdims) if placements[d].kind == "partial"]
        c = _reduce(c, tuple(i for i in range(len(pdims)) if i not in keep), op)
        full = c[tuple(coord[pdims[i]] for i in keep)] if keep else c
    else:
        full = values
    if new_partial_dims(src, placements):
        mask = np.zeros(values.shape, dtype=bool)
        mask[tuple(slice(lo, hi) for lo, hi in local_bounds(values.shape, mesh, src, coord))] = True
        full = np.where(mask, full, 0.0)
    bounds = local_bounds(values.shape, mesh, placements, coord)
    return np.ascontiguousarray(full[tuple(slice(lo, hi) for lo, hi in bounds)])


def zero_fill_is_exact(shape: Sequence[int], mesh: Sequence[int], src: Sequence[Placement],
                       dst: Sequence[Placement]) -> bool:
    """Whether :func:`expected_local`'s zero-fill for ``src -> dst`` is a layout torch can reach without
    moving data: summed over the new Partial mesh dimensions, the ranks' locals give every rank's
    local under ``dst`` with those dimensions replicated. It is not where a changed Shard on another
    mesh dimension moves the data first (``(S(0), S(0)) -> (P, S(0))``): the values summed are then
    still right, but which rank holds which part depends on the steps torch plans, so
    :func:`collnb.redistribute` checks the sums there (:func:`partial_sums`)."""
    new = new_partial_dims(src, dst)
    if not new:
        return True
    values = teaching_values(shape)
    replicated = tuple(Placement("replicate") if d in new else p for d, p in enumerate(dst))
    for coord in np.ndindex(*mesh):
        summed = partial_sums([expected_local(values, mesh, src, dst, c) for c in np.ndindex(*mesh)],
                              mesh, new, coord)
        if not np.array_equal(summed, expected_local(values, mesh, src, replicated, coord)):
            return False
    return True


def partial_sums(locals_: Sequence[npt.ArrayLike], mesh: Sequence[int], dims: Container[int],
                 coord: Sequence[int]) -> Floats:
    """The sum of the ranks' local tensors (``locals_`` in rank order, float64) over mesh dimensions
    ``dims``, for the group of the rank at ``coord``: what a Partial(sum) on ``dims`` stands for."""
    group = [r for r in range(math.prod(mesh))
             if all(coordinates(r, mesh)[e] == coord[e] for e in range(len(mesh)) if e not in dims)]
    summed: Floats = np.sum([np.asarray(locals_[r], dtype=np.float64) for r in group], axis=0)
    return summed


def refusal(src: Sequence[Placement], dst: Sequence[Placement], version: str | None = None) -> str | None:
    """Why torch refuses ``src -> dst`` (``None`` when it does not), by the rule of the installed torch
    (or release ``version``), ``DTensor.redistribute`` in ``torch/distributed/tensor/_api.py``:

    * before 2.14: a Partial in ``dst`` on a mesh dimension where ``src`` holds anything else:
      "redistributing to Partial is for internal use only!";
    * 2.14 and later: the same, except ``Shard(d) -> Partial("sum")`` (a local zero-fill): "Can not
      redistribute from S(0) to P(max), only Shard to Partial(sum) redistribution is supported!".

    The words are torch's, so a lesson can show the refusal it will see (:mod:`collnb.torch_versions`).
    """
    from ..torch_versions import applies  # noqa: PLC0415

    shard_to_sum = applies("dtensor_shard_to_partial", version)
    for d, (a, b) in enumerate(zip(src, dst)):
        if b.kind != "partial" or a == b:
            continue
        if shard_to_sum:
            if a.kind == "shard" and b.op == "sum":
                continue
            return (f"mesh dim {d}: Can not redistribute from {_torch_str(a)} to {_torch_str(b)}, only Shard to "
                    "Partial(sum) redistribution is supported!")
        return (f"mesh dim {d}: {a.torch_repr} -> {b.torch_repr}: redistributing to Partial is for internal "
                "use only! (a Partial comes from an op, e.g. a matmul of Shard(1) x Shard(0))")
    return None


def _torch_str(p: Placement) -> str:
    """A placement as torch's ``str()`` writes it: ``S(0)``, ``R``, ``P(sum)``."""
    return f"P({p.op})" if p.kind == "partial" else p.short


def owners(shape: Sequence[int], mesh: Sequence[int], placements: Sequence[Placement]) -> npt.NDArray[np.bool_]:
    """``(world size, *shape)`` bool: which ranks hold (a contribution to) each global element."""
    n = math.prod(mesh)
    out = np.zeros((n,) + tuple(shape), dtype=bool)
    for r in range(n):
        b = local_bounds(shape, mesh, placements, coordinates(r, mesh))
        out[(r,) + tuple(slice(lo, hi) for lo, hi in b)] = True
    return out


def check_values_fit(shape: Sequence[int], mesh: Sequence[int], src: Sequence[Placement], dtype: str) -> None:
    """Check that every value a rank holds or computes (contributions, their sums for ``avg``) is
    exact in ``dtype``.

    Raises:
        ValueError: a value beyond :func:`exact_limit`, or a negative one in an unsigned dtype, naming
            the op and a dtype that works.
    """
    pdims = partial_dims(src)
    if not pdims:
        return
    op = src[pdims[0]].partial_op
    k = math.prod(mesh[d] for d in pdims)
    c = contributions(teaching_values(shape), k, op)
    top = float(np.abs(c).max()) * (k if op in ("avg", "sum") else 1)
    if top > exact_limit(dtype):
        raise ValueError(_("Partial({op}) over {k} ranks of shape {shape} needs values up to {top}, which {dtype} "
                           "cannot hold exactly (largest exact integer {limit}); use float32 or a smaller shape").format(
                               op=repr(op), k=k, shape=tuple(shape), top=int(top), dtype=dtype,
                               limit=exact_limit(dtype)))
