"""``collnb.redistribute``: one DTensor placement change on real ranks, checked against the
hand-sliced reference, with the collectives each rank issued.

Every argument is checked before any rank starts (:func:`check_request`); then each rank runs
:func:`collnb.placements.rank_side.redistribute_on_rank` through :func:`collnb.ranks.launch` with
``record_calls=True`` (the recording source of the exercise checks), and the parent compares each
local tensor with :func:`collnb.placements.reference.expected_local`.
"""

from __future__ import annotations

import math
import time
from typing import Any, TypedDict, cast

from .. import ranks
from ..i18n import N_, _
from ..vocabulary import check_backend, check_int, op_hint
from .parsing import check_shape, parse_mesh, parse_placements
from .rank_side import RankAnswer, RankRequest, import_dtensor, redistribute_on_rank
from .parsing import Placement
from .reference import (Floats, check_values_fit, coordinates, expected_local, local_bounds, new_partial_dims, partial_sums,
                        refusal, teaching_values, zero_fill_is_exact)
from .result import LocalShard, RedistributeResult

__all__ = ["redistribute", "check_request", "Request"]


class Request(TypedDict):
    """A checked request: ``shape``, ``dtype`` (name), ``mesh`` (shape tuple), ``src``/``dst``
    (tuples of :class:`~collnb.placements.Placement`), ``backend``, ``repeats``; ``refusal`` (why
    torch must refuse it, or ``None``)."""

    shape: tuple[int, ...]
    dtype: str
    mesh: tuple[int, ...]
    src: tuple[Placement, ...]
    dst: tuple[Placement, ...]
    backend: str
    repeats: int
    refusal: str | None


def check_request(shape: object, mesh: object, src: object, dst: object, dtype: object = "float32",
                  backend: object = "gloo", repeats: object = 3) -> Request:
    """Check a redistribute request without starting any rank (what :func:`redistribute` does first).

    Raises:
        TypeError / ValueError: an unknown placement or reduce op, the wrong number of placements,
            a shard dim beyond the tensor's dims, a mesh of more ranks than collnb starts
            (:data:`collnb.MAX_WORLD_SIZE`) or than the backend can run here, a shape that is not
            1-D/2-D or too large, a dtype that cannot hold the teaching values exactly, a Partial
            source whose reduce op the dtype cannot do (``avg`` of integers), ``repeats`` out of 0..100.
        RuntimeError: the backend cannot run here (NCCL without CUDA), with the reason.
    """
    req = _checked_request(shape, mesh, src, dst, dtype, backend, repeats)
    ranks.check_ranks(math.prod(req["mesh"]), req["backend"])
    return req


def _checked_request(shape: object, mesh: object, src: object, dst: object, dtype: object, backend: object,
                     repeats: object) -> Request:
    """:func:`check_request` but whether the backend can run the mesh's ranks here (which
    :func:`redistribute` checks once, planning its launch)."""
    mesh_shape = parse_mesh(mesh)
    shape_, dtype_ = check_shape(shape, dtype)
    src_ = parse_placements(src, len(mesh_shape), len(shape_), name="src")
    dst_ = parse_placements(dst, len(mesh_shape), len(shape_), name="dst")
    for p in src_:
        if p.kind == "partial":
            hint = op_hint(p.partial_op, dtype_)
            if p.op == "avg" and hint:
                raise ValueError(_("src {placement} on {dtype}:{hint} Choose a floating-point dtype or another op").format(
                    placement=p.torch_repr, dtype=dtype_, hint=hint))
    check_values_fit(shape_, mesh_shape, src_, dtype_)
    backend_ = check_backend(backend)
    repeats_ = check_int("repeats", repeats, 0, 100,
                         what=N_("timed calls after the recorded one (0: time the recorded one)"))
    return Request(shape=shape_, dtype=dtype_, mesh=mesh_shape, src=src_, dst=dst_, backend=backend_,
                   repeats=repeats_, refusal=refusal(src_, dst_))


#: The largest world size whose ranks have DTensor imported (:func:`_import_dtensor`).
_imported = {"world_size": 0}


def _import_dtensor(world_size: int, backend: str, timeout: float, launch_kwargs: dict[str, Any]) -> None:
    """Import DTensor here, so that ranks forked from now on have it, and in the ranks of this
    call that may predate it (the first call, a larger world size than before): a launch without
    communication, so that no rank's import counts against a collective's timeout."""
    import torch.distributed.device_mesh  # noqa: F401, PLC0415 - heavy; only when redistributing
    import torch.distributed.tensor.debug  # noqa: F401, PLC0415
    if world_size > _imported["world_size"]:
        ranks.launch(import_dtensor, world_size, backend=backend, timeout=timeout, **launch_kwargs)
        _imported["world_size"] = world_size


def redistribute(shape: object = (4, 6), mesh: object = (2, 2), *, src: object, dst: object, dtype: object = "float32",
                 backend: str = "gloo", repeats: int = 3, timeout: float = 60.0,
                 **launch_kwargs: Any) -> RedistributeResult:
    """Redistribute a DTensor of teaching values from ``src`` to ``dst`` placements on real ranks.

    Each element of the global tensor names its global index (``v[i, j] = 10*i + j`` up to 10
    columns; :func:`collnb.placements.teaching_values`). Every rank builds the source DTensor on an
    ``init_device_mesh`` of shape ``mesh``, calls ``DTensor.redistribute(mesh, dst)`` once with
    every operation it issues recorded (and counted by torch's ``CommDebugMode``), then
    ``repeats`` more times, timed.

    Args:
        shape: the global tensor's shape, 1-D or 2-D (``(4, 6)``, ``8``, ``"4x6"``).
        mesh: the mesh shape (``(2, 2)``, ``4``, ``"2x4"``; at most 16 ranks).
        src, dst: one placement per mesh dimension, as torch writes them (``Shard(0)``,
            ``Replicate()``, ``Partial()``, ``Partial('max')``) or short (``"S(0)"``, ``"R"``,
            ``"P"``, ``"P(max)"``); a list, or one string ``"S(0),R"``; torch placement objects work too.
        dtype: ``torch.float32`` or its name; one of :data:`collnb.placements.DTYPES` that holds the
            teaching values exactly.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors, one GPU per rank).
        repeats: timed calls after the recorded one (0..100); the time is their median, slowest rank
            (0: the recorded call is timed, under ``CommDebugMode``: one call, what the explorer does).
        timeout: seconds for the whole launch. launch_kwargs: passed to :func:`collnb.launch`.

    Returns:
        :class:`RedistributeResult`: per rank the local shard before and after with its mesh
        coordinate, the recorded collectives (``.calls``), torch's counts and log lines, the
        times, and ``ok`` (every local tensor equals the hand-sliced reference; a refusal torch
        must make, e.g. to a Partial, is part of the check). Displayed, it draws the global tensor
        coloured by owner, the shards before and after, and the steps between them.

    Raises:
        TypeError / ValueError / RuntimeError: bad input, before any rank starts (see :func:`check_request`).
        collnb.RankError / collnb.LaunchTimeout: the ranks failed.
    """
    req = _checked_request(shape, mesh, src, dst, dtype, backend, repeats)
    shape_, mesh_, src_, dst_ = req["shape"], req["mesh"], req["src"], req["dst"]
    values = teaching_values(shape_)
    n = math.prod(mesh_)
    # the launch checked once, here (the mesh's ranks on the backend, the options), and run as planned
    plan = ranks.plan_launch(n, req["backend"], {"timeout": timeout, **launch_kwargs}, where="collnb.redistribute",
                             record_calls=True)
    coords = [coordinates(r, mesh_) for r in range(n)]
    partial_src = any(p.kind == "partial" for p in src_)
    before = [expected_local(values, mesh_, src_, src_, c) for c in coords]
    request: RankRequest = {"shape": shape_, "dtype": req["dtype"], "mesh": mesh_, "src": src_, "dst": dst_,
                            "before": before if partial_src else None, "values": values, "repeats": req["repeats"],
                            "device": "cuda" if backend == "nccl" else "cpu"}
    _import_dtensor(n, backend, timeout, launch_kwargs)
    t0 = time.perf_counter()
    launched = cast(ranks.LaunchResults,  # what launch returns with record_calls=True
                    ranks.launch_planned(plan, redistribute_on_rank, (request,)))
    seconds = time.perf_counter() - t0
    res: list[RankAnswer] = launched  # each rank's redistribute_on_rank answer
    calls: list[list[ranks.CallRecord]] = []
    unrecorded = 0
    for r in range(n):
        recs = list(launched.calls[r])
        marks = [i for i, rec in enumerate(recs) if rec.operation == "barrier"] + [len(recs)]
        calls.append(recs[marks[0] + 1:marks[1]])
        unrecorded = max(unrecorded, getattr(launched.calls[r], "unrecorded", 0))
    # From torch 2.14 a Shard -> Partial("sum") is a local zero-fill; where data moves on another mesh
    # dimension first, which rank holds which part depends on torch's plan: the sums are checked there.
    summed_over = (() if req["refusal"] or zero_fill_is_exact(shape_, mesh_, src_, dst_)
                   else new_partial_dims(src_, dst_))
    replicated = tuple(Placement("replicate") if d in summed_over else p for d, p in enumerate(dst_))
    afters = [a.double().numpy() for r in range(n) if (a := res[r]["after"]) is not None]  # rank order
    shards = []
    for r in range(n):
        c = tuple(res[r]["coord"])
        expected_after = None if req["refusal"] or summed_over else expected_local(values, mesh_, src_, dst_, c)
        expected_sum: Floats | None = None
        group_sum: Floats | None = None
        if summed_over:
            expected_sum = expected_local(values, mesh_, src_, replicated, c)
            if len(afters) == n and all(a.shape == expected_sum.shape for a in afters):
                group_sum = partial_sums(afters, mesh_, summed_over, c)
        shards.append(LocalShard(r, c, res[r]["before"], res[r]["after"], before[r], expected_after,
                                 local_bounds(shape_, mesh_, src_, c), local_bounds(shape_, mesh_, dst_, c),
                                 expected_sum, group_sum))
    times = [max(res[r]["times"][i] for r in range(n)) for i in range(len(res[0]["times"]))]
    refused = next((res[r]["refused"] for r in range(n) if res[r]["refused"]), None)
    log = list(dict.fromkeys(line for r in range(n) for line in res[r]["log"]))
    return RedistributeResult(shape=shape_, dtype=req["dtype"], mesh=mesh_, backend=backend, src=src_, dst=dst_,
                              shards=shards, calls=calls, unrecorded=unrecorded,
                              comm_counts=[res[r]["comm_counts"] for r in range(n)], times=times, log=log,
                              refused=refused, expected_refusal=req["refusal"], mesh_ranks=res[0]["mesh_ranks"],
                              summed_over=summed_over, seconds=seconds)
