"""The rank side: what each rank does for each primitive (:data:`RANK_CALLS`), and the two rank
entries :func:`rank_cases` (a run) and :func:`rank_probe` (the support probe).

Every rank function takes ``(rank, world_size, case, device, group)`` and returns ``(before,
after)``: the rank's input buffer copied before its one ``torch.distributed`` call (the call in
:data:`~.specs.SPECS`), and its output buffer after it. ``case`` is the dict
:func:`~.primitives.run_batch` prepared (``primitive``, ``dtype`` name, ``op`` name, ``root``,
``chunk_size``, ``inputs`` table; ``stagger_s`` for the probe's barrier); ``group=None`` is the
default process group. These functions run inside the ranks the launcher started.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, NotRequired, ParamSpec, TypedDict, TypeVar

import torch
import torch.distributed as dist

from ..ranks import same_on_every_rank
from .inputs import InputTable, make_tensor

__all__ = ["RANK_CALLS", "BARRIER_STAGGER_S", "Case", "Buffers", "RankCall", "rank_cases", "rank_probe"]


class Case(TypedDict):
    """One primitive call as every rank makes it (:func:`~.primitives.run_batch` and the support probe
    build them; every field is checked before a rank starts)."""

    primitive: str  #: a name of :data:`~.specs.PRIMITIVES`
    dtype: str  #: a name of :data:`collnb.vocabulary.DTYPE_NAMES` (``"float32"``)
    op: str  #: a name of :data:`collnb.vocabulary.REDUCE_OPS` (``"sum"``; unused where nothing reduces)
    root: int  #: the src/dst rank (unused where the primitive has none)
    chunk_size: int  #: elements per chunk
    inputs: InputTable  #: per rank, the chunk values (:func:`~.inputs.check_inputs`)
    stagger_s: NotRequired[float]  #: barrier only: seconds rank r waits, times r (default BARRIER_STAGGER_S)


#: A rank's ``(before, after)``: flat tensors on the rank's device for the tensor primitives and
#: ``barrier`` (float64 arrival/departure times, s), lists of Python objects for the object primitives.
Buffers = tuple[torch.Tensor, torch.Tensor] | tuple[list[object], list[object]]

#: A rank function: ``fn(rank, world_size, case, device, group) -> (before, after)``; ``group=None``
#: is the default process group.
RankCall = Callable[[int, int, Case, torch.device, dist.ProcessGroup | None], Buffers]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: Seconds rank ``r`` of ``barrier`` waits (times ``r``) before it arrives: well above the
#: scheduling jitter of 16 ranks on 2 cores.
BARRIER_STAGGER_S = 0.030


def _dtype(case: Case) -> torch.dtype:
    dtype: torch.dtype = getattr(torch, case["dtype"])
    return dtype


def _zeros(n: int, case: Case, device: torch.device) -> torch.Tensor:
    return torch.zeros(n * case["chunk_size"], dtype=_dtype(case), device=device)


def _input(rank: int, case: Case, device: torch.device) -> torch.Tensor:
    return make_tensor(case["inputs"][rank], case["chunk_size"], _dtype(case), device)


def _rop(case: Case) -> dist.ReduceOp.RedOpType:
    op: dist.ReduceOp.RedOpType = getattr(dist.ReduceOp, case["op"].upper())
    return op


def _r_broadcast(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    dist.broadcast(t, src=case["root"], group=g)
    return before, t


def _r_scatter(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    cs, root = case["chunk_size"], case["root"]
    out = _zeros(1, case, device)
    if rank == root:
        full = _input(rank, case, device)
        before = full.clone()
        dist.scatter(out, list(torch.split(full, cs)), src=root, group=g)
    else:
        before = _zeros(0, case, device)
        dist.scatter(out, None, src=root, group=g)
    return before, out


def _r_gather(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    root = case["root"]
    t = _input(rank, case, device)
    before = t.clone()
    if rank == root:
        lst = [_zeros(1, case, device) for _ in range(ws)]
        dist.gather(t, lst, dst=root, group=g)
        return before, torch.cat(lst)
    dist.gather(t, None, dst=root, group=g)
    return before, _zeros(0, case, device)


def _r_reduce(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    dist.reduce(t, dst=case["root"], op=_rop(case), group=g)
    return before, t


def _r_all_gather(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    lst = [_zeros(1, case, device) for _ in range(ws)]
    dist.all_gather(lst, t, group=g)
    return before, torch.cat(lst)


def _r_reduce_scatter(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(1, case, device)
    dist.reduce_scatter(out, list(torch.split(t, case["chunk_size"])), op=_rop(case), group=g)
    return before, out


def _r_all_reduce(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    dist.all_reduce(t, op=_rop(case), group=g)
    return before, t


def _r_all_to_all(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = [_zeros(1, case, device) for _ in range(ws)]
    dist.all_to_all(out, [x.clone() for x in torch.split(t, case["chunk_size"])], group=g)
    return before, torch.cat(out)


def _r_all_to_all_single(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = torch.zeros_like(t)
    dist.all_to_all_single(out, t, group=g)
    return before, out


def _quiet(call: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    # all_gather_into_tensor / reduce_scatter_tensor print a FutureWarning (deprecated in favour
    # of the *_single names) in every rank; the spec's summary says so once instead.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return call(*args, **kwargs)


def _r_all_gather_into_tensor(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(ws, case, device)
    _quiet(dist.all_gather_into_tensor, out, t, group=g)
    return before, out


def _r_all_gather_single(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(ws, case, device)
    dist.all_gather_single(out, t, group=g)
    return before, out


def _r_reduce_scatter_tensor(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(1, case, device)
    _quiet(dist.reduce_scatter_tensor, out, t, op=_rop(case), group=g)
    return before, out


def _r_reduce_scatter_single(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(1, case, device)
    dist.reduce_scatter_single(out, t, op=_rop(case), group=g)
    return before, out


def _r_broadcast_object_list(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    objs = list(case["inputs"][rank])
    before = list(objs)
    dist.broadcast_object_list(objs, src=case["root"], group=g, device=device)
    return before, objs


def _r_scatter_object_list(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    root = case["root"]
    out: list[object] = [None]
    before = list(case["inputs"][rank]) if rank == root else []
    dist.scatter_object_list(out, list(before) if rank == root else None, src=root, group=g)
    return before, out


def _r_gather_object(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    root = case["root"]
    obj = case["inputs"][rank][0]
    lst: list[object] | None = [None] * ws if rank == root else None
    dist.gather_object(obj, lst, dst=root, group=g)
    return [obj], (lst if lst is not None else [])


def _r_all_gather_object(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    obj = case["inputs"][rank][0]
    lst: list[object] = [None] * ws
    dist.all_gather_object(lst, obj, group=g)
    return [obj], lst


def _r_send_recv(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    t = _input(rank, case, device)
    before = t.clone()
    if ws == 1:  # a ring of one: torch refuses to send to yourself, and nothing has to move
        return before, t.clone()
    out = torch.zeros_like(t)
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % ws, group=g),
           dist.P2POp(dist.irecv, out, (rank - 1) % ws, group=g)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return before, out


def _r_barrier(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
    dist.barrier(group=g)  # line everyone up, then arrive staggered
    time.sleep(case.get("stagger_s", BARRIER_STAGGER_S) * rank)
    arrive = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on this machine
    dist.barrier(group=g)
    leave = time.monotonic()
    return (torch.tensor([arrive], dtype=torch.float64), torch.tensor([leave], dtype=torch.float64))


#: The rank function of every primitive in :data:`~.specs.SPECS`, by name: ``fn(rank, world_size,
#: case, device, group) -> (before, after)``.
RANK_CALLS: dict[str, RankCall] = {
    "broadcast": _r_broadcast,
    "scatter": _r_scatter,
    "gather": _r_gather,
    "reduce": _r_reduce,
    "all_gather": _r_all_gather,
    "reduce_scatter": _r_reduce_scatter,
    "all_reduce": _r_all_reduce,
    "all_to_all": _r_all_to_all,
    "all_to_all_single": _r_all_to_all_single,
    "all_gather_into_tensor": _r_all_gather_into_tensor,
    "all_gather_single": _r_all_gather_single,
    "reduce_scatter_tensor": _r_reduce_scatter_tensor,
    "reduce_scatter_single": _r_reduce_scatter_single,
    "broadcast_object_list": _r_broadcast_object_list,
    "scatter_object_list": _r_scatter_object_list,
    "gather_object": _r_gather_object,
    "all_gather_object": _r_all_gather_object,
    "send_recv": _r_send_recv,
    "barrier": _r_barrier,
}


def _device(backend: str) -> torch.device:
    # NCCL: the device the launcher made current (cuda:rank for local ranks, cuda:LOCAL_RANK on
    # ipyparallel engines, see collnb.ranks.remote)
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


@same_on_every_rank
def rank_cases(rank: int, world_size: int, cases: list[Case], backend: str) -> list[Buffers]:
    """Rank entry of :func:`~.primitives.run_batch`: run every case in order on the default
    process group and return ``[(before, after), ...]``, one pair per case (tensors on the rank's
    device; the launcher sends them back as raw bytes, so every dtype arrives). Every rank makes the
    same calls (:func:`collnb.ranks.same_on_every_rank`), so a warm pool runs them without
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s per-collective check, which has nothing to find here."""
    device = _device(backend)
    return [RANK_CALLS[c["primitive"]](rank, world_size, c, device, None) for c in cases]


@same_on_every_rank
def rank_probe(rank: int, world_size: int, cases: list[Case], backend: str) -> list[str | None]:
    """Rank entry of :func:`~.support.backend_support`: every case is a trial whose error is caught; returns
    ``None`` (it ran) or ``"ExcType: first line"`` per trial. Trials run on the default group, as
    :func:`run` does (:func:`collnb.ranks.same_on_every_rank`: without DETAIL's checks, as a run)."""
    device = _device(backend)
    out: list[str | None] = []
    for c in cases:
        try:
            RANK_CALLS[c["primitive"]](rank, world_size, c, device, None)
            out.append(None)
        except Exception as exc:  # noqa: BLE001 - any refusal is what we want to record
            first = (str(exc).strip().splitlines() or [""])[0]
            out.append(f"{type(exc).__name__}: {first[:300]}")
    return out
