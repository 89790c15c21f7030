"""The rank side of the bandwidth lab: each rank's buffers, exact inputs and reference for one
(primitive, algorithm, size), and the timed loop every rank runs: collnb's (barrier, one call,
slowest rank, every iteration) or nccl-tests' (one barrier, ``iters`` calls back to back)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ...algorithms import cached_schedule, chunk_bounds, execute
from .choices import REDUCING


def values(rank, count, reducing, dtype, device, offset=0):
    """The exact input of ``rank``: small integers (``(rank % 3) + (i % 5)`` for reductions, sums
    <= 96 at 16 ranks; ``7 * rank + i % 7`` otherwise, <= 111), exact in every dtype."""
    i = torch.arange(offset, offset + count, dtype=torch.int64, device=device)
    v = (rank % 3) + i % 5 if reducing else 7 * rank + i % 7
    return v.to(dtype)


class Case:
    """One rank's buffers, call, reset and check for one (primitive, algorithm, size)."""

    def __init__(self, primitive, algorithm, rank, ws, count, block, dtype, device, shared=None):
        """``shared``: a dict through which the cases of one launch share the tensors they never
        write (inputs, the reference) and their working buffers (each reset before every call)."""
        self.primitive, self.algorithm, self.rank, self.ws = primitive, algorithm, rank, ws
        red = primitive in REDUCING
        shared = {} if shared is None else shared

        def m(key, make):
            if key not in shared:
                shared[key] = make()
            return shared[key]

        V = lambda r, n=count, off=0: m(("V", r, n, off), lambda: values(r, n, red, dtype, device, off))  # noqa: E731
        root = 0
        self.defined = None  # (start, stop) of the output the primitive defines, or None = all
        if algorithm != "builtin":
            self.sched = cached_schedule(primitive, algorithm, ws, root)
            self.bounds = chunk_bounds(count, self.sched.n_chunks)
            self.send_from = None
            if primitive in ("all_reduce", "reduce", "reduce_scatter", "broadcast"):
                self.start = V(rank)
            elif primitive in ("all_gather", "gather"):
                def own_slot():
                    t = torch.zeros(count, dtype=dtype, device=device)
                    t[rank * block:(rank + 1) * block] = V(rank, block)
                    return t
                self.start = m(("own-slot", count), own_slot)
            elif primitive == "scatter":
                self.start = V(root) if rank == root else m(("zeros", count), lambda: torch.zeros(
                    count, dtype=dtype, device=device))
            else:  # all_to_all
                self.send_from = V(rank)

                def own_block():
                    t = torch.zeros(count, dtype=dtype, device=device)
                    t[rank * block:(rank + 1) * block] = self.send_from[rank * block:(rank + 1) * block]
                    return t
                self.start = m(("own-block", count), own_block)
            self.work = m(("work", count), self.start.clone)
            self.out = self.work
        else:
            self.sched = None
            if primitive in ("all_reduce", "reduce", "broadcast"):
                self.start = V(rank)
                self.work = m(("work", count), self.start.clone)
                self.out = self.work
            elif primitive in ("all_gather", "gather"):
                self.start = V(rank, block)
                self.work = m(("work-block", block), self.start.clone)
                self.out = m(("out", count), lambda: torch.zeros(count, dtype=dtype, device=device))
                self.out_list = list(self.out.split(block))
            else:  # reduce_scatter, scatter, all_to_all: a whole-buffer input, a block (or whole) output
                self.start = V(root) if primitive == "scatter" else V(rank)
                self.work = m(("work", count), self.start.clone)
                self.in_list = list(self.work.split(block))
                n_out = block if primitive != "all_to_all" else count
                self.out = m(("out", n_out), lambda: torch.zeros(n_out, dtype=dtype, device=device))
        self.expected = m(("expected",), lambda: self._reference(primitive, rank, ws, count, block, dtype, device, V))
        if algorithm != "builtin" and primitive in ("reduce_scatter", "scatter"):
            self.defined = (rank * block, (rank + 1) * block)
        self.checked = not (primitive in ("reduce", "gather") and rank != root)

    @staticmethod
    def _reference(primitive, rank, ws, count, block, dtype, device, V):
        """The exact result, laid out like the output (the same for the built-in and the algorithms)."""
        root = 0
        if primitive in ("all_reduce", "reduce"):
            return sum(values(r, count, True, torch.int64, device) for r in range(ws)).to(dtype)
        if primitive == "broadcast":
            return V(root)
        if primitive in ("all_gather", "gather"):
            return torch.cat([V(r, block) for r in range(ws)])
        if primitive == "reduce_scatter":
            return sum(values(r, block, True, torch.int64, device, rank * block) for r in range(ws)).to(dtype)
        if primitive == "scatter":
            return V(root, block, rank * block)
        # all_to_all: block j of my output = rank j's block for me
        return torch.cat([V(r, block, rank * block) for r in range(ws)])

    def reset(self):
        self.work.copy_(self.start)
        if self.out is not self.work:
            self.out.zero_()

    def run(self):
        p = self.primitive
        if self.sched is not None:
            execute(self.sched, self.work, op="sum", bounds=self.bounds, send_from=self.send_from)
            return
        if p == "all_reduce":
            dist.all_reduce(self.work)
        elif p == "reduce":
            dist.reduce(self.work, dst=0)
        elif p == "broadcast":
            dist.broadcast(self.work, src=0)
        elif p == "all_gather":
            if hasattr(dist, "all_gather_single"):
                dist.all_gather_single(self.out, self.work)
            else:  # pragma: no cover - older torch
                dist.all_gather_into_tensor(self.out, self.work)
        elif p == "reduce_scatter":
            if hasattr(dist, "reduce_scatter_single"):
                dist.reduce_scatter_single(self.out, self.work)
            else:  # pragma: no cover - older torch
                dist.reduce_scatter_tensor(self.out, self.work)
        elif p == "scatter":
            dist.scatter(self.out, self.in_list if self.rank == 0 else None, src=0)
        elif p == "gather":
            dist.gather(self.work, self.out_list if self.rank == 0 else None, dst=0)
        elif p == "all_to_all":
            dist.all_to_all_single(self.out, self.work)

    def check(self) -> bool:
        if not self.checked:
            return True
        out = self.out
        if self.defined is not None:
            a, b = self.defined
            out = out[a:b]
        return bool(torch.equal(out, self.expected))


def rank_bench(rank, world_size, job):
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
    shared = {}
    cases = {a: Case(job["primitive"], a, rank, world_size, job["count"], job["block"], dtype, device, shared)
             for a in job["algorithms"]}
    if job.get("timing", "collnb") == "nccl-tests":
        return {a: _back_to_back(case, rank, job, nccl) for a, case in cases.items()}
    out = {a: {"times": [], "ok": True, "bad": None} for a in cases}
    if nccl:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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


def _back_to_back(case, rank, job, nccl):
    """nccl-tests' timing of one case on this rank: ``{times: [seconds per call], ok, bad}``."""
    sync = torch.cuda.synchronize if nccl else (lambda: None)
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
