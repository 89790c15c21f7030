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

from .. import ranks
from ..i18n import N_, _
from ..vocabulary import check_backend, check_int, op_hint
from .parsing import check_shape, parse_mesh, parse_placements
from .rank_side import import_dtensor, redistribute_on_rank
from .parsing import Placement
from .reference import (check_values_fit, coordinates, expected_local, local_bounds, new_partial_dims, partial_sums,
                        refusal, teaching_values, zero_fill_is_exact)
from .result import LocalShard, RedistributeResult

__all__ = ["redistribute", "check_request", "Request"]


class Request(dict):
    """A checked request: ``shape``, ``dtype`` (name), ``mesh`` (shape tuple), ``src``/``dst``
    (tuples of :class:`~collnb.placements.Placement`), ``backend``, ``repeats``; ``refusal`` (why
    torch must refuse it, or ``None``)."""


def check_request(shape, mesh, src, dst, dtype="float32", backend="gloo", repeats=3) -> Request:
    """Check a redistribute request without starting any rank (what :func:`redistribute` does first).

    Raises:
        TypeError / ValueError: an unknown placement or reduce op, the wrong number of placements,
            a shard dim beyond the tensor's dims, a mesh of more ranks than collnb starts
            (:data:`collnb.MAX_WORLD_SIZE`) or than the backend can run here, a shape that is not
            1-D/2-D or too large, a dtype that cannot hold the teaching values exactly, a Partial
            source whose reduce op the dtype cannot do (``avg`` of integers), ``repeats`` out of 0..100.
        RuntimeError: the backend cannot run here (NCCL without CUDA), with the reason.
    """
    mesh = parse_mesh(mesh)
    shape, dtype = check_shape(shape, dtype)
    src = parse_placements(src, len(mesh), len(shape), name="src")
    dst = parse_placements(dst, len(mesh), len(shape), name="dst")
    for p in src:
        if p.kind == "partial":
            hint = op_hint(p.op, dtype)
            if p.op == "avg" and hint:
                raise ValueError(_("src {placement} on {dtype}:{hint} Choose a floating-point dtype or another op").format(
                    placement=p.torch_repr, dtype=dtype, hint=hint))
    check_values_fit(shape, mesh, src, dtype)
    check_backend(backend)
    check_int("repeats", repeats, 0, 100, what=N_("timed calls after the recorded one (0: time the recorded one)"))
    ranks.check_ranks(math.prod(mesh), backend)
    return Request(shape=shape, dtype=dtype, mesh=mesh, src=src, dst=dst, backend=backend, repeats=int(repeats),
                   refusal=refusal(src, dst))


#: The largest world size whose ranks have DTensor imported (:func:`_import_dtensor`).
_imported = {"world_size": 0}


def _import_dtensor(world_size, backend, timeout, launch_kwargs):
    """Import DTensor here, so that ranks forked from now on have it, and in the ranks of this
    call that may predate it (the first call, a larger world size than before): a launch without
    communication, so that no rank's import counts against a collective's timeout."""
    import torch.distributed.device_mesh  # noqa: F401, PLC0415 - heavy; only when redistributing
    import torch.distributed.tensor.debug  # noqa: F401, PLC0415
    if world_size > _imported["world_size"]:
        ranks.launch(import_dtensor, world_size, backend=backend, timeout=timeout, **launch_kwargs)
        _imported["world_size"] = world_size


def redistribute(shape=(4, 6), mesh=(2, 2), *, src, dst, dtype="float32", backend: str = "gloo",
                 repeats: int = 3, timeout: float = 60.0, **launch_kwargs) -> RedistributeResult:
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
    req = check_request(shape, mesh, src, dst, dtype, backend, repeats)
    shape, mesh, src, dst = req["shape"], req["mesh"], req["src"], req["dst"]
    values = teaching_values(shape)
    n = math.prod(mesh)
    coords = [coordinates(r, mesh) for r in range(n)]
    partial_src = any(p.kind == "partial" for p in src)
    before = [expected_local(values, mesh, src, src, c) for c in coords]
    request = {"shape": shape, "dtype": req["dtype"], "mesh": mesh, "src": src, "dst": dst,
               "before": before if partial_src else None, "values": values, "repeats": req["repeats"],
               "device": "cuda" if backend == "nccl" else "cpu"}
    _import_dtensor(n, backend, timeout, launch_kwargs)
    t0 = time.perf_counter()
    res = ranks.launch(redistribute_on_rank, n, args=(request,), backend=backend, timeout=timeout,
                       record_calls=True, **launch_kwargs)
    seconds = time.perf_counter() - t0
    calls, unrecorded = [], 0
    for r in range(n):
        recs = list(res.calls[r])
        marks = [i for i, rec in enumerate(recs) if rec.operation == "barrier"] + [len(recs)]
        calls.append(recs[marks[0] + 1:marks[1]])
        unrecorded = max(unrecorded, getattr(res.calls[r], "unrecorded", 0))
    # From torch 2.14 a Shard -> Partial("sum") is a local zero-fill; where data moves on another mesh
    # dimension first, which rank holds which part depends on torch's plan: the sums are checked there.
    summed_over = () if req["refusal"] or zero_fill_is_exact(shape, mesh, src, dst) else new_partial_dims(src, dst)
    replicated = tuple(Placement("replicate") if d in summed_over else p for d, p in enumerate(dst))
    afters = [None if res[r]["after"] is None else res[r]["after"].double().numpy() for r in range(n)]
    shards = []
    for r in range(n):
        c = tuple(res[r]["coord"])
        expected_after = None if req["refusal"] or summed_over else expected_local(values, mesh, src, dst, c)
        expected_sum = group_sum = None
        if summed_over:
            expected_sum = expected_local(values, mesh, src, replicated, c)
            if all(a is not None and a.shape == expected_sum.shape for a in afters):
                group_sum = partial_sums(afters, mesh, summed_over, c)
        shards.append(LocalShard(r, c, res[r]["before"], res[r]["after"], before[r], expected_after,
                                 local_bounds(shape, mesh, src, c), local_bounds(shape, mesh, dst, c),
                                 expected_sum, group_sum))
    times = [max(res[r]["times"][i] for r in range(n)) for i in range(len(res[0]["times"]))]
    refused = next((res[r]["refused"] for r in range(n) if res[r]["refused"]), None)
    log = list(dict.fromkeys(line for r in range(n) for line in res[r]["log"]))
    return RedistributeResult(shape=shape, dtype=req["dtype"], mesh=mesh, backend=backend, src=src, dst=dst,
                              shards=shards, calls=calls, unrecorded=unrecorded,
                              comm_counts=[res[r]["comm_counts"] for r in range(n)], times=times, log=log,
                              refused=refused, expected_refusal=req["refusal"], mesh_ranks=res[0]["mesh_ranks"],
                              summed_over=summed_over, seconds=seconds)
