"""The rank side of the bandwidth lab: each rank's buffers, exact inputs and reference for one
(primitive, algorithm, size), and the timed loop every rank runs: collnb's (barrier, one call,
slowest rank, every iteration) or nccl-tests' (one barrier, ``iters`` calls back to back)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Literal, NotRequired, TypedDict

import torch
import torch.distributed as dist

from ...algorithms import Schedule, cached_schedule, chunk_bounds, execute
from ...collectives import SPECS, PrimitiveSpec
from .choices import blocked, timed_spec

#: The cases of one launch share what they never write and their working buffers, by key.
Shared = dict[tuple[object, ...], torch.Tensor]


class Job(TypedDict):
    """What :func:`rank_bench` measures: ``primitive`` (a name of :data:`collnb.bench.PRIMITIVES`),
    ``algorithms`` (``"builtin"`` and/or :mod:`collnb.algorithms` names, taking turns), ``dtype``
    (name), ``count`` (elements of the nccl-tests "size" buffer), ``block`` (elements per block),
    ``iters`` (timed iterations), ``warmup`` (untimed ones before), ``timing`` (one of
    :data:`collnb.bench.TIMINGS`; absent: ``"collnb"``)."""

    primitive: str
    algorithms: list[str]
    dtype: str
    count: int
    block: int
    iters: int
    warmup: int
    timing: NotRequired[Literal["collnb", "nccl-tests"]]


class RankTimes(TypedDict):
    """One rank's measurement of one algorithm: ``times`` (seconds: one per timed iteration, or
    with nccl-tests timing one mean per call), ``ok`` (every checked result equalled the
    reference), ``bad`` (where the first wrong result was, or ``None``)."""

    times: list[float]
    ok: bool
    bad: str | None


def values(rank: int, count: int, reducing: bool, dtype: torch.dtype, device: torch.device | str,
           offset: int = 0) -> torch.Tensor:
    """The exact input of ``rank``: small integers (``(rank % 3) + (i % 5)`` for reductions, sums
    <= 96 at 16 ranks; ``7 * rank + i % 7`` otherwise, <= 111), exact in every dtype; ``count``
    elements of ``dtype`` on ``device``, element ``i`` counted from ``offset``."""
    i = torch.arange(offset, offset + count, dtype=torch.int64, device=device)
    v = (rank % 3) + i % 5 if reducing else 7 * rank + i % 7
    return v.to(dtype)


class Case:
    """One rank's buffers, call, reset and check for one (primitive, algorithm, size), built from the
    spec table: the buffers and call of the row the bench times (:func:`.choices.timed_spec`), the
    reference from the row's sources. A buffer of ``world_size`` chunks holds ``count`` elements,
    one of one chunk ``block`` (the same number where the primitive is not blocked)."""

    sched: Schedule | None
    #: an algorithm's chunk offsets in ``work`` (:func:`collnb.algorithms.chunk_bounds`)
    bounds: list[int]
    #: all_to_all's input, which an algorithm's blocks leave from; else ``None``
    send_from: torch.Tensor | None
    #: the built-in's call, its buffers bound
    call: Callable[[], object]

    def __init__(self, primitive: str, algorithm: str, rank: int, ws: int, count: int, block: int,
                 dtype: torch.dtype, device: torch.device, shared: Shared | None = None) -> None:
        """``shared``: a dict through which the cases of one launch share the tensors they never
        write (inputs, the reference) and their working buffers (each reset before every call)."""
        self.primitive, self.algorithm, self.rank, self.ws = primitive, algorithm, rank, ws
        spec, timed = SPECS[primitive], timed_spec(primitive)
        red = spec.reduces
        store: Shared = {} if shared is None else shared

        def m(key: tuple[object, ...], make: Callable[[], torch.Tensor]) -> torch.Tensor:
            if key not in store:
                store[key] = make()
            return store[key]

        def zeros(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=dtype, device=device)

        def V(r: int, n: int = count, off: int = 0) -> torch.Tensor:  # noqa: N802 - the reference's V(rank)
            return m(("V", r, n, off), lambda: values(r, n, red, dtype, device, off))

        root = 0
        read, written = timed.input_buffer(), timed.output_buffer()
        n_read, n_written = read.count(ws, rank, root), written.count(ws, rank, root)
        size = {0: 0, 1: block, ws: count}  # elements of a buffer of that many chunks
        self.defined: tuple[int, int] | None = None  # (start, stop) of the output the primitive defines, or None = all
        if algorithm != "builtin":
            # the schedule works in place on one buffer of world_size blocks
            self.sched = cached_schedule(primitive, algorithm, ws, root)
            self.bounds = chunk_bounds(count, self.sched.n_chunks)
            self.send_from = None
            if n_read == 0:  # scatter's other ranks: nothing yet
                self.start = m(("zeros", count), lambda: zeros(count))
            elif read.chunks == "one":  # gather, all_gather: the rank's block in its own slot
                def own_slot() -> torch.Tensor:
                    t = zeros(count)
                    t[rank * block:(rank + 1) * block] = V(rank, block)
                    return t
                self.start = m(("own-slot", count), own_slot)
            elif written is not read and written.chunks == "world":  # all_to_all: blocks leave from the input
                send_from = self.send_from = V(rank)

                def own_block() -> torch.Tensor:
                    t = zeros(count)
                    t[rank * block:(rank + 1) * block] = send_from[rank * block:(rank + 1) * block]
                    return t
                self.start = m(("own-block", count), own_block)
            else:
                self.start = V(rank)
            self.work = m(("work", count), self.start.clone)
            self.out = self.work
            if written.chunks == "one":  # reduce_scatter, scatter: only the rank's own block is its result
                self.defined = (rank * block, (rank + 1) * block)
        else:
            self.sched = None
            self.start = V(rank, size[n_read])
            self.work = m(("in", size[n_read]), self.start.clone)
            self.out = self.work if written is read else m(("out", size[n_written]), lambda: zeros(size[n_written]))
            held = {read.name: (read, n_read, self.work), written.name: (written, n_written, self.out)}

            def argument(name: str) -> list[torch.Tensor] | torch.Tensor | None:
                b, n, t = held[name]
                if n == 0:  # a buffer only the root holds: None on the others
                    return None
                return list(torch.split(t, block)) if b.form == "tensors" else t
            torch_call = timed.torch_call
            if torch_call is None:  # every primitive with a bus bandwidth is one call (collectives.specs)
                raise ValueError(f"{timed.name} has no torch.distributed call to time")
            args = [argument(a) for a in torch_call.args]
            words = {"root": root, "op": dist.ReduceOp.SUM, "device": device}
            self.call = functools.partial(getattr(dist, torch_call.function), *args,
                                          **{key: words[what] for key, what in torch_call.keywords})
        self.expected = m(("expected",), lambda: self._reference(spec, rank, ws, count, block, dtype, device, V))
        self.checked = bool(spec.defined(ws, rank, root))

    @staticmethod
    def _reference(spec: PrimitiveSpec, rank: int, ws: int, count: int, block: int, dtype: torch.dtype,
                   device: torch.device, V: Callable[[int, int, int], torch.Tensor]) -> torch.Tensor:  # noqa: N803
        """The exact result, laid out like the output (the same for the built-in and the algorithms):
        each output block from the input blocks the spec table's ``sources`` name, combined in int64
        where the primitive reduces (exact: :func:`values` keeps the sums small). A primitive that is
        not blocked is one block of ``count`` elements. ``V(rank, n, offset)``: that rank's input."""
        root = 0
        n_out = spec.n_out(ws, rank, root)
        if blocked(spec.name):
            chunk = block
        else:
            chunk, n_out = count, min(n_out, 1)
        parts = []
        for k in range(n_out):
            sources = spec.sources(ws, rank, root, k)
            if spec.reduces:
                total = torch.zeros(chunk, dtype=torch.int64, device=device)
                for s, j in sources:
                    total += values(s, chunk, True, torch.int64, device, j * chunk)
                parts.append(total.to(dtype))
            else:
                (s, j), = sources
                parts.append(V(s, chunk, j * chunk))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=dtype, device=device)

    def reset(self) -> None:
        """Put the buffers back as they were before the first call."""
        self.work.copy_(self.start)
        if self.out is not self.work:
            self.out.zero_()

    def run(self) -> None:
        """One call: the algorithm's schedule, or the built-in collective."""
        if self.sched is not None:
            execute(self.sched, self.work, op="sum", bounds=self.bounds, send_from=self.send_from)
            return
        self.call()

    def check(self) -> bool:
        """Whether the output (the part the primitive defines) equals the reference."""
        if not self.checked:
            return True
        out = self.out
        if self.defined is not None:
            a, b = self.defined
            out = out[a:b]
        return bool(torch.equal(out, self.expected))


def rank_bench(rank: int, world_size: int, job: Job) -> dict[str, RankTimes]:
    """Rank side: warm-up, then the timed iterations of every algorithm of the job, each result
    checked. ``job["timing"]`` says how (see :data:`collnb.bench.TIMINGS`):

    * ``"collnb"``: every iteration on its own: buffers reset, ``dist.barrier()``, the call timed
      alone (``perf_counter``, or CUDA events on NCCL), its result checked; the algorithms take
      turns within every iteration (so that load on the machine hits them alike). One time per
      iteration.
    * ``"nccl-tests"``: as nccl-tests' ``BenchTime`` (``src/common.cu``): one barrier, then the
      ``iters`` calls back to back with no barrier, no reset and no check between them, one
      synchronisation at the end (``torch.cuda.synchronize()`` on NCCL), the elapsed time divided
      by ``iters``; the result is checked in one separate, untimed call. One time per rank.

    Returns ``{algorithm: {times, ok, bad}}``."""
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    dtype = getattr(torch, job["dtype"])
    shared: Shared = {}
    cases = {a: Case(job["primitive"], a, rank, world_size, job["count"], job["block"], dtype, device, shared)
             for a in job["algorithms"]}
    if job.get("timing", "collnb") == "nccl-tests":
        return {a: _back_to_back(case, rank, job, nccl) for a, case in cases.items()}
    out: dict[str, RankTimes] = {a: {"times": [], "ok": True, "bad": None} for a in cases}
    if nccl:
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch's __new__: no annotations
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # the same
    for it in range(job["warmup"] + job["iters"]):
        for a, case in cases.items():
            case.reset()
            if nccl:
                torch.cuda.synchronize()
            dist.barrier()
            if nccl:
                start.record()
                case.run()
                end.record()
                end.synchronize()
                dt = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                case.run()
                dt = time.perf_counter() - t0
            if it >= job["warmup"]:
                out[a]["times"].append(dt)
                if not case.check():
                    out[a]["ok"] = False
                    out[a]["bad"] = out[a]["bad"] or f"rank {rank}, timed iteration {it - job['warmup'] + 1}"
    return out


def _back_to_back(case: Case, rank: int, job: Job, nccl: bool) -> RankTimes:
    """nccl-tests' timing of one case on this rank: ``{times: [seconds per call], ok, bad}``."""
    def sync() -> None:
        if nccl:
            torch.cuda.synchronize()
    case.reset()
    for _ in range(job["warmup"]):
        case.run()
    sync()
    case.reset()                 # the check: one untimed call from fresh inputs
    dist.barrier()
    case.run()
    sync()
    ok = case.check()
    case.reset()
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(job["iters"]):
        case.run()               # back to back: no barrier, no reset, no check in between
    sync()
    dt = (time.perf_counter() - t0) / job["iters"]
    return {"times": [dt], "ok": ok, "bad": None if ok else f"rank {rank}, the checked call"}
