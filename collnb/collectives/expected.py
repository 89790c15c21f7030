"""The reference: what every rank's output must be, computed in the caller without
``torch.distributed`` (:func:`reference`), and how a run's output is compared with it
(:func:`chunk_mismatch`, :func:`tolerance`).

Reductions fold the ranks' values in rank order in the run's dtype, with torch's arithmetic,
and also exactly in float64; a floating reduction may come back in another accumulation order,
so the comparison also accepts every ring rotation and a pairwise tree (:func:`alternatives_fn`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..vocabulary import check_int, check_rank, check_world_size, dtype_name, op_name
from .inputs import InputTable, make_tensor
from .specs import PrimitiveSpec, get_spec

__all__ = ["reference", "f64", "canon", "tolerance", "chunk_mismatch", "alternatives_fn", "Reference",
           "ChunkSources"]

#: Per output chunk of one rank, the ``(src_rank, src_chunk)`` input chunks it is made from.
ChunkSources = list[tuple[tuple[int, int], ...]]
#: :func:`reference`'s ``(expected, expected_f64, defined, sources)``, one entry per rank each.
Reference = tuple[list[torch.Tensor | list[object] | None], list[torch.Tensor | None], list[bool],
                  list[ChunkSources]]


def _fold(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if op in ("sum", "avg"):
        return a + b if a.dtype != torch.bool else a | b
    if op == "product":
        return a * b if a.dtype != torch.bool else a & b
    if op == "min":
        return torch.minimum(a, b)
    if op == "max":
        return torch.maximum(a, b)
    if op == "band":
        return a & b
    if op == "bor":
        return a | b
    if op == "bxor":
        return a ^ b
    raise ValueError(op)


def _reduce_seq(op: str, vals: Sequence[torch.Tensor], n: int) -> torch.Tensor:
    """Fold ``vals`` (same dtype) left to right in their own dtype, as one rank after another
    would; ``avg`` is the sum divided by ``n`` in the same dtype."""
    acc = vals[0].clone()
    for v in vals[1:]:
        acc = _fold(op, acc, v)
    if op == "avg":
        acc = (acc / n).to(acc.dtype)
    return acc


def f64(t: torch.Tensor) -> torch.Tensor:
    """``t`` as float64 (complex128 if complex; bool as 0.0/1.0), for exact comparisons."""
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype == torch.bool:
        return t.view(torch.uint8).ne(0).to(torch.float64)
    return t.to(torch.float64)


def _reduce_exact(op: str, vals: Sequence[torch.Tensor], n: int) -> torch.Tensor:
    """The mathematically exact (float64) op over ``vals``: sums, products, averages in float64;
    bitwise ops in int64 (bool as 0/1), returned as float64."""
    if op in ("band", "bor", "bxor"):
        ints = [v.view(torch.uint8).ne(0).to(torch.int64) if v.dtype == torch.bool else v.to(torch.int64)
                for v in vals]
        return _reduce_seq(op, ints, n).to(torch.float64)
    f = [f64(v) for v in vals]
    if op == "product" and vals[0].dtype == torch.bool:
        f = [x.ne(0).to(torch.float64) for x in f]
    return _reduce_seq(op, f, n)


def _input_tensors(inputs: InputTable, dt: torch.dtype | None, chunk_size: int) -> list[torch.Tensor]:
    """Each rank's input as ``(chunks, chunk_size)`` (``(0, chunk_size)`` for a rank without one)."""
    return [make_tensor(v, chunk_size, dt).view(-1, chunk_size) for v in inputs]


def _stack_sources(tensors: Sequence[torch.Tensor], sources_r: ChunkSources) -> torch.Tensor:
    """``(L, K, chunk_size)``: source ``l`` of output chunk ``k`` (every chunk has L sources)."""
    return torch.stack([torch.stack([tensors[s][j] for (s, j) in srcs]) for srcs in sources_r], dim=1)


def _order_candidates(V: torch.Tensor, op: str, n: int) -> list[torch.Tensor]:
    """The op over the L sources of ``V`` (``(L, K, cs)``) in every order a backend plausibly
    uses: each rotation of the rank ring in both directions (ring algorithms start the
    accumulation at different ranks per chunk) and a pairwise tree (recursive halving). Returns
    flat tensors."""
    L = V.shape[0]
    seqs = [list(range(k, L)) + list(range(k)) for k in range(L)]
    seqs += [list(reversed(o)) for o in seqs]
    out = [_reduce_seq(op, [V[i] for i in o], n).reshape(-1) for o in seqs]
    vals = [V[i] for i in range(L)]
    while len(vals) > 1:
        vals = [_fold(op, vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i]
                for i in range(0, len(vals), 2)]
    tree = vals[0]
    if op == "avg":
        tree = (tree / n).to(tree.dtype)
    out.append(tree.reshape(-1))
    return out


def reference(primitive: str, world_size: int, inputs: InputTable, dtype: object = torch.float32, op: object = "sum",
              root: int = 0, chunk_size: int = 1) -> Reference:
    """The expected output of every rank, computed here without ``torch.distributed``.

    Args:
        primitive, world_size, dtype, op, root, chunk_size: as for :func:`~.primitives.run`.
        inputs: per-rank lists of chunk values (see :func:`~.inputs.teaching_inputs`).

    Returns:
        ``(expected, expected_f64, defined, sources)``, each a list with one entry per rank:

        * ``expected[r]``: flat tensor of ``dtype`` (``n_out * chunk_size`` elements; a list of
          objects for object primitives), or ``None`` where the output is undefined. Reductions
          fold the ranks' values in rank order *in the run's dtype* with torch's arithmetic
          (int8 SUM wraps: 100+100 -> -56; float16 overflows to inf; bfloat16 rounds; ``avg`` is
          the sum divided by world size in the dtype; bool ``sum`` is logical or, ``product`` and
          ``min`` logical and). A backend may combine floats in another order, so :func:`~.primitives.run`
          also accepts the result of any ring rotation or pairwise tree order, within a relative
          tolerance (see :class:`~.result.RunResult`).
        * ``expected_f64[r]``: the mathematically exact result from the same inputs, as float64
          (complex128 for complex dtypes; ``None`` for objects or undefined outputs). Where it
          differs from ``expected`` the dtype changed the answer.
        * ``defined[r]``: bool.
        * ``sources[r]``: per output chunk, the tuple of ``(src_rank, src_chunk)`` it is made from.

    ``barrier`` has no data reference: :func:`~.primitives.run` fills it from measured times.

    Raises:
        TypeError, ValueError: an unknown primitive, dtype or op, a world size outside
            ``1..16``, a root that is not a rank or a chunk size below 1 (:mod:`collnb.vocabulary`).
    """
    spec = get_spec(primitive)
    check_world_size(world_size)
    check_rank(root, world_size, "root")
    check_int("chunk_size", chunk_size, 1, what="elements per chunk")
    op_n = op_name(op) if spec.reduces else ""  # "" (no op) is never folded: only reducing specs fold
    dt: torch.dtype | None = getattr(torch, dtype_name(dtype)) if spec.kind == "tensor" else None
    return reference_of(spec, world_size, inputs, dt, op_n, root, chunk_size)


def reference_of(spec: PrimitiveSpec, world_size: int, inputs: InputTable, dt: torch.dtype | None, op_n: str,
                 root: int, chunk_size: int) -> Reference:
    """:func:`reference` of a request checked already (:func:`~.primitives.run` checked it where it
    entered): ``spec`` the primitive's, ``dt`` the dtype (``None`` unless a tensor primitive), ``op_n``
    the op's name (``""`` unless the primitive reduces)."""
    expected: list[torch.Tensor | list[object] | None] = []
    exact: list[torch.Tensor | None] = []
    defined: list[bool] = []
    sources: list[ChunkSources] = []
    tensors = _input_tensors(inputs, dt, chunk_size) if spec.kind == "tensor" else []
    cache: dict[tuple[tuple[tuple[int, int], ...], ...], tuple[torch.Tensor, torch.Tensor]] = {}
    for r in range(world_size):
        d = bool(spec.defined(world_size, r, root))
        defined.append(d)
        n = spec.n_out(world_size, r, root)
        src = [spec.sources(world_size, r, root, k) for k in range(n)]
        sources.append(src)
        if not d or spec.kind == "time":
            expected.append(None)
            exact.append(None)
            continue
        if spec.kind == "object":
            expected.append([inputs[s][j] for ((s, j),) in src])
            exact.append(None)
            continue
        if not src:
            expected.append(torch.zeros(0, dtype=dt))
            exact.append(torch.zeros(0, dtype=torch.float64))
            continue
        key = tuple(src)
        if key not in cache:
            V = _stack_sources(tensors, src)
            if spec.reduces:
                vals = list(V)
                cache[key] = (_reduce_seq(op_n, vals, world_size).reshape(-1),
                              _reduce_exact(op_n, vals, world_size).reshape(-1))
            else:
                cache[key] = (V[0].reshape(-1).clone(), f64(V[0]).reshape(-1))
        e, x = cache[key]
        expected.append(e.clone())
        exact.append(x.clone())
    return expected, exact, defined, sources


def canon(t: torch.Tensor) -> torch.Tensor:
    """``t`` with bool read as its truth value (a uint8 view != 0); other dtypes as they are."""
    # Gloo's bool SUM leaves byte 2 in a bool tensor (True + True); compare truth values.
    return t.view(torch.uint8).ne(0) if t.dtype == torch.bool else t


def tolerance(spec: PrimitiveSpec, dtype: torch.dtype | None, op: str | None, world_size: int) -> float:
    """The relative tolerance a run is checked with: ``world_size * finfo(dtype).eps`` for a floating
    (or complex) sum, avg or product, the rounding bound of combining ``world_size`` terms in any
    order; else 0.0 (exact)."""
    if spec.reduces and dtype is not None and (dtype.is_floating_point or dtype.is_complex) \
            and op in ("sum", "avg", "product"):
        real = torch.empty(0, dtype=dtype).real.dtype if dtype.is_complex else dtype
        return world_size * torch.finfo(real).eps
    return 0.0


def chunk_mismatch(after: torch.Tensor | list[object], expected: torch.Tensor | list[object], chunk_size: int,
                   rtol: float, kind: str, alternatives: Callable[[], list[torch.Tensor]] | None = None) -> list[bool]:
    """Per output chunk: True where ``after`` differs from ``expected`` (and, if given, from every
    tensor ``alternatives()`` returns: other accumulation orders of a floating reduction). ``after``
    and ``expected`` are lists of objects for ``kind == "object"``, else flat tensors."""
    if kind == "object" or not isinstance(after, torch.Tensor) or not isinstance(expected, torch.Tensor):
        n = max(len(after), len(expected))
        return [k >= len(after) or k >= len(expected) or after[k] != expected[k] for k in range(n)]
    if after.numel() != expected.numel():
        n = max(after.numel(), expected.numel()) // chunk_size
        return [True] * n
    if kind == "time":
        bad = after < expected
    else:
        a, e = canon(after), canon(expected)
        if a.dtype.is_floating_point or a.dtype.is_complex:
            a64 = f64(a)
            bad = ~torch.isclose(a64, f64(e), rtol=rtol, atol=0.0, equal_nan=True)
            if alternatives is not None and bool(bad.any()):
                for alt in alternatives():
                    bad &= ~torch.isclose(a64, f64(alt), rtol=rtol, atol=0.0, equal_nan=True)
        else:
            bad = a != e
    mismatch: list[bool] = bad.view(-1, chunk_size).any(dim=1).tolist()
    return mismatch


def alternatives_fn(spec: PrimitiveSpec, inputs: InputTable, sources_r: ChunkSources, dt: torch.dtype | None,
                    op: str | None, world_size: int, chunk_size: int) -> Callable[[], list[torch.Tensor]] | None:
    """For a floating reduction, a function returning the other-order candidates of one rank."""
    if not (spec.reduces and dt is not None and (dt.is_floating_point or dt.is_complex)
            and op in ("sum", "product", "avg") and sources_r):
        return None

    def alternatives() -> list[torch.Tensor]:
        V = _stack_sources(_input_tensors(inputs, dt, chunk_size), sources_r)
        return _order_candidates(V, op, world_size)
    return alternatives
