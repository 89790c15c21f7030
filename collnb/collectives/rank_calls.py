"""The rank side: what each rank does for each primitive (:data:`RANK_CALLS`, made from the spec
table by :func:`rank_call`), and the two rank entries :func:`rank_cases` (a run) and
:func:`rank_probe` (the support probe).

Every rank function takes ``(rank, world_size, case, device, group)`` and returns ``(before,
after)``: the rank's input buffer copied before its one ``torch.distributed`` call (the
:class:`~.specs.Buffer` rows and :class:`~.specs.TorchCall` of its :data:`~.specs.SPECS` row), and
its output buffer after it. ``case`` is the dict
:func:`~.primitives.run_batch` prepared (``primitive``, ``dtype`` name, ``op`` name, ``root``,
``chunk_size``, ``inputs`` table; ``stagger_s`` for the probe's barrier); ``group=None`` is the
default process group. These functions run inside the ranks the launcher started.
"""

from __future__ import annotations

import time
import warnings
from typing import Callable, NotRequired, TypedDict, cast

import torch
import torch.distributed as dist

from ..ranks import same_on_every_rank
from .inputs import InputTable, make_tensor
from .specs import SPECS, Buffer, PrimitiveSpec

__all__ = ["RANK_CALLS", "BARRIER_STAGGER_S", "Case", "Buffers", "RankCall", "rank_call", "rank_cases", "rank_probe"]


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


def _read(b: Buffer, n: int, rank: int, case: Case, device: torch.device) -> tuple[object, torch.Tensor | list[object]]:
    """The buffer ``b`` the call reads, as ``(argument, before)``: from this rank's input row
    (:func:`~.inputs.make_tensor` for tensors, the objects themselves); ``argument`` is ``None`` on a
    rank that does not hold it (``n == 0``), whose ``before`` is then empty."""
    if b.form in ("objects", "object"):
        objs = list(case["inputs"][rank])
        if b.form == "object":
            return objs[0], objs
        return (objs if n else None), list(objs)
    if not n:
        return None, _zeros(0, case, device)
    t = _input(rank, case, device)
    before = t.clone()
    if b.form == "tensors":  # one tensor per chunk, each its own storage
        return [x.clone() for x in torch.split(t, case["chunk_size"])], before
    return t, before


def _written(b: Buffer, n: int, case: Case, device: torch.device) -> object:
    """A fresh buffer ``b`` for the call to write (zeros, or ``None`` placeholders for objects);
    ``None`` on a rank that does not hold it (``n == 0``)."""
    if not n:
        return None
    if b.form == "objects":
        return [None] * n
    if b.form == "tensors":
        return [_zeros(1, case, device) for _ in range(n)]
    return _zeros(n, case, device)


def _after(b: Buffer, value: object, case: Case, device: torch.device) -> torch.Tensor | list[object]:
    """What the call left in buffer ``b``, flat: a list of tensors joined, an empty buffer where the
    rank holds none."""
    if value is None:
        return [] if b.form in ("objects", "object") else _zeros(0, case, device)
    if b.form == "tensors":
        return torch.cat(cast(list[torch.Tensor], value))
    return cast(torch.Tensor | list[object], value)


def rank_call(spec: PrimitiveSpec) -> RankCall:
    """The rank function of ``spec`` (a row with a :attr:`~.specs.PrimitiveSpec.torch_call`): it
    builds the buffers the row describes from the case, copies the input (``before``), makes the
    one ``torch.distributed`` call and returns ``(before, after)``. The deprecated flat forms
    (``all_gather_into_tensor``, ``reduce_scatter_tensor``) print a FutureWarning in every rank;
    the spec's summary says so once instead, so the call runs with FutureWarning ignored.

    Raises:
        ValueError: a row without a call (``send_recv``, ``barrier``: written out in this module).
    """
    call = spec.torch_call
    if call is None:
        raise ValueError(f"{spec.name} has no torch_call: its rank code is written out in {__name__}")
    read, written = spec.input_buffer(), spec.output_buffer()

    def run(rank: int, ws: int, case: Case, device: torch.device, g: dist.ProcessGroup | None) -> Buffers:
        root = case["root"]
        values: dict[str, object] = {}
        values[read.name], before = _read(read, read.count(ws, rank, root), rank, case, device)
        if written is not read:
            values[written.name] = _written(written, written.count(ws, rank, root), case, device)
        given = {"root": root, "device": device, "op": _rop(case) if spec.reduces else None}
        kwargs = {key: given[what] for key, what in call.keywords}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            getattr(dist, call.function)(*(values[a] for a in call.args), **kwargs, group=g)
        return cast(Buffers, (before, _after(written, values[written.name], case, device)))

    run.__name__ = run.__qualname__ = f"rank_{spec.name}"
    return run


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


#: The rows of :data:`~.specs.SPECS` whose work is not one ``torch.distributed`` call, written out.
_WRITTEN_OUT: dict[str, RankCall] = {"send_recv": _r_send_recv, "barrier": _r_barrier}

#: The rank function of every primitive in :data:`~.specs.SPECS`, by name: ``fn(rank, world_size,
#: case, device, group) -> (before, after)`` (:func:`rank_call` of its row).
RANK_CALLS: dict[str, RankCall] = {name: _WRITTEN_OUT.get(name) or rank_call(spec) for name, spec in SPECS.items()}


def _device(backend: str) -> torch.device:
    # NCCL: the device the launcher made current (cuda:rank for local ranks, cuda:LOCAL_RANK on
    # ipyparallel engines, see collnb.ranks.connect)
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
