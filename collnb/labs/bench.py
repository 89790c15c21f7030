"""Bandwidth lab: time collectives on real ranks as nccl-tests does, next to the machine's limits.

``bench("all_reduce", world_sizes=(2, 4), sizes="1K:64M")`` launches the ranks
(:func:`collnb.launcher.launch`, ``debug=False``), and for every world size, size and algorithm
runs the collective ``warmup`` times, then ``iters`` timed times, and returns one row per
measurement (a pandas ``DataFrame`` when pandas is installed, else a list of dicts):

==============  ==========================================================================
column          meaning
==============  ==========================================================================
primitive       ``all_reduce``, ``all_gather``, ... (or a physical reference, see below)
algorithm       ``builtin`` (the backend's own collective) or a :mod:`collnb.algorithms` name
backend         ``gloo`` / ``nccl`` (``cpu`` / ``tcp`` for the references)
world_size      number of ranks
dtype           element type, e.g. ``float32``
nbytes          bytes per rank as nccl-tests' "size" counts them: the all_reduce / broadcast /
                reduce buffer; the whole all_gather output; the whole reduce_scatter input; the
                root's whole scatter / gather buffer; one rank's whole all_to_all input
time_s          median over the timed iterations of the slowest rank's time (seconds)
time_min_s      fastest iteration (its slowest rank)
time_max_s      slowest iteration
algbw_GBps      ``nbytes / time_s / 1e9``
busbw_GBps      ``algbw_GBps * busbw_factor(primitive, world_size)``
ok              every timed iteration's result equalled the reference on every rank
==============  ==========================================================================

**Timing** (as nccl-tests, NVIDIA/nccl-tests ``src/common.cu``: warm-up iterations, then timed
ones): before every iteration each rank resets its buffers (outside the timed region) and waits
in ``dist.barrier()``; each rank times the call with ``time.perf_counter`` (gloo) or a pair of
CUDA events on its stream (NCCL); per iteration the slowest rank's time counts (a collective is
finished when its last rank is); the row reports the median (robust to a loaded machine) and
the min and max. Unlike nccl-tests (which times a loop and reports the mean) every iteration is
kept, so the spread shows. The algorithms of one (world size, size) run in one launch, taking
turns within every iteration, so that load on a shared machine hits them alike.

**Correctness**: the inputs are small integers (exact in every dtype up to 16 ranks), so the
reference is exact; after every timed iteration each rank compares the part of its output the
primitive defines with the reference (``torch.equal``, outside the timed region). ``ok`` is
False if any iteration on any rank differed: a fast wrong answer is not a result.

**Debug checks**: the ranks run with ``TORCH_DISTRIBUTED_DEBUG`` off (``launch(debug=False)``);
the DETAIL checks collnb turns on elsewhere add a consistency check per collective.
:func:`debug_cost` measures what they cost.

**Physical references** (``references=True``), measured in the same run for every size:
``memcpy`` (``dst.copy_(src)`` of ``nbytes`` on one core: bytes copied per second),
``tcp_loopback`` (one TCP stream over 127.0.0.1: ``nbytes`` sent by one thread, received by
another, whole payload checked) and ``local_reduce`` (``y.add_(x)`` of ``nbytes`` of the bench
dtype on one core: the per-byte reduction cost, γ of :mod:`collnb.costmodel`). Their
``busbw_GBps`` equals ``algbw_GBps``.

Sources:
    * NVIDIA nccl-tests, ``doc/PERFORMANCE.md`` (algbw, busbw and the factors: all_reduce
      ``2(n-1)/n``; reduce_scatter, all_gather, all_to_all ``(n-1)/n``; broadcast, reduce ``1``)
      and ``src/scatter.cu``, ``src/gather.cu`` (scatter, gather ``(n-1)/n``; "size" counts the
      root's whole buffer).
    * gloo ``gloo/allreduce.cc``: gloo's all_reduce is a ring over segments, overlapping the
      reduction of one segment with the transfer of the next (why the built-in is the ring's
      form in :data:`collnb.costmodel.BUILTIN_FORM`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import socket
import statistics
import threading
import time
import warnings
from typing import Sequence

import torch
import torch.distributed as dist

from ..algorithms import algbw as _algbw
from ..algorithms import busbw_factor

__all__ = ["PRIMITIVES", "COLUMNS", "REFERENCES", "EXAMPLE_FILE", "bench", "parse_size", "parse_sizes", "check_algorithms",
           "reference_rows", "debug_cost", "to_table", "as_rows", "save_json", "save_csv", "load", "note", "plot", "format_table"]

#: Primitives with a bus-bandwidth definition (nccl-tests), in teaching order.
PRIMITIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter", "gather",
              "all_to_all")
#: The row schema, in column order.
COLUMNS = ("primitive", "algorithm", "backend", "world_size", "dtype", "nbytes", "time_s", "time_min_s",
           "time_max_s", "algbw_GBps", "busbw_GBps", "ok")
#: Physical references measured beside the collectives (``primitive`` column of their rows).
REFERENCES = ("memcpy", "tcp_loopback", "local_reduce")

_REDUCING = ("all_reduce", "reduce_scatter", "reduce")
_BLOCKED = ("all_gather", "reduce_scatter", "scatter", "gather", "all_to_all")  # one block per rank
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
#: A small results file measured on CPU (gloo, a loaded 2-core machine), labelled as such in its note.
EXAMPLE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "bench_example_cpu.json")
MAX_BYTES = 1 << 30  # per rank; more does not fit 16 ranks x 4 buffers in a laptop's memory


# ----------------------------------------------------------------------------------------------
# Input checks

def parse_size(text) -> int:
    """Bytes from ``"64M"``, ``"1K"``, ``"512"``, ``"4MiB"`` (K/M/G are powers of 1024), or an int.

    Raises:
        ValueError: not a size (says what a size looks like).
    """
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        n = text
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).upper() not in _UNITS:
            raise ValueError(f"not a size: {text!r}; write bytes as a number with an optional K, M or G "
                             f"(powers of 1024), e.g. 1K, 64M")
        n = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if n < 1:
        raise ValueError(f"sizes must be at least 1 byte; got {text!r}")
    return n


def parse_sizes(spec) -> list:
    """Bytes per rank to measure: ``"MIN:MAX"`` gives every power of two from MIN to MAX
    (``"1K:64M"`` -> 1 KiB, 2 KiB, ..., 64 MiB); a single size, or a list of sizes, as given.

    Raises:
        ValueError: unparsable, MIN > MAX, MIN or MAX not a power of two, above 1 GiB.
    """
    if isinstance(spec, (list, tuple)):
        sizes = [parse_size(s) for s in spec]
        if not sizes:
            raise ValueError("no sizes given")
    else:
        text = str(spec)
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 2:
                raise ValueError(f"--sizes {text!r}: write MIN:MAX, e.g. 1K:64M")
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            if lo > hi:
                raise ValueError(f"--sizes {text!r}: MIN ({lo} B) is larger than MAX ({hi} B); write the "
                                 f"smaller size first, e.g. {parts[1]}:{parts[0]}")
            for name, v in (("MIN", lo), ("MAX", hi)):
                if v & (v - 1):
                    raise ValueError(f"--sizes {text!r}: {name} ({v} B) is not a power of two; the sweep "
                                     f"doubles from MIN to MAX (e.g. 1K:64M)")
            sizes = []
            n = lo
            while n <= hi:
                sizes.append(n)
                n *= 2
        else:
            sizes = [parse_size(text)]
    big = [s for s in sizes if s > MAX_BYTES]
    if big:
        raise ValueError(f"sizes above {MAX_BYTES >> 30} GiB per rank are not measured here; got {big[0]} B")
    return sorted(set(sizes))


def _check_count(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}; got {value!r}")


def check_algorithms(primitive: str, algorithms) -> tuple:
    """The algorithm names to bench for ``primitive``: ``"builtin"`` and/or names from
    :func:`collnb.algorithms.algorithms_for` (``"all"``: builtin plus every one).

    Raises:
        ValueError: unknown primitive, or an algorithm the primitive does not have (lists the valid ones).
    """
    from ..algorithms import algorithms_for
    if primitive not in PRIMITIVES:
        raise ValueError(f"no bandwidth definition for {primitive!r}; choose one of {', '.join(PRIMITIVES)}")
    if isinstance(algorithms, str):
        algorithms = (algorithms,)
    valid = ("builtin",) + algorithms_for(primitive)
    out = []
    for a in algorithms:
        if a == "all":
            out.extend(valid)
        elif a not in valid:
            raise ValueError(f"{primitive} has no algorithm {a!r}; valid for {primitive}: {', '.join(valid)} "
                             f"(builtin = the backend's own {primitive})")
        else:
            out.append(a)
    if not out:
        raise ValueError(f"no algorithm given; valid for {primitive}: {', '.join(valid)}")
    return tuple(dict.fromkeys(out))


def _counts(primitive, nbytes, world_size, esize):
    """(elements of the nccl-tests 'size' buffer, elements per block). Blocked primitives round
    down to a multiple of the world size, as nccl-tests does."""
    count = nbytes // esize
    if primitive in _BLOCKED:
        count = count // world_size * world_size
    return count, (count // world_size if primitive in _BLOCKED else count)


# ----------------------------------------------------------------------------------------------
# The rank side

def _values(rank, count, reducing, dtype, device, offset=0):
    """The exact input of ``rank``: small integers (``(rank % 3) + (i % 5)`` for reductions, sums
    <= 96 at 16 ranks; ``7 * rank + i % 7`` otherwise, <= 111), exact in every dtype."""
    i = torch.arange(offset, offset + count, dtype=torch.int64, device=device)
    v = (rank % 3) + i % 5 if reducing else 7 * rank + i % 7
    return v.to(dtype)


class _Case:
    """One rank's buffers, call, reset and check for one (primitive, algorithm, size)."""

    def __init__(self, primitive, algorithm, rank, ws, count, block, dtype, device, shared=None):
        """``shared``: a dict through which the cases of one launch share the tensors they never
        write (inputs, the reference) and their working buffers (each reset before every call)."""
        self.primitive, self.algorithm, self.rank, self.ws = primitive, algorithm, rank, ws
        red = primitive in _REDUCING
        shared = {} if shared is None else shared

        def m(key, make):
            if key not in shared:
                shared[key] = make()
            return shared[key]

        V = lambda r, n=count, off=0: m(("V", r, n, off), lambda: _values(r, n, red, dtype, device, off))  # noqa: E731
        root = 0
        self.defined = None  # (start, stop) of the output the primitive defines, or None = all
        if algorithm != "builtin":
            from ..algorithms import _cached_schedule, chunk_bounds
            self.sched = _cached_schedule(primitive, algorithm, ws, root)
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
            return sum(_values(r, count, True, torch.int64, device) for r in range(ws)).to(dtype)
        if primitive == "broadcast":
            return V(root)
        if primitive in ("all_gather", "gather"):
            return torch.cat([V(r, block) for r in range(ws)])
        if primitive == "reduce_scatter":
            return sum(_values(r, block, True, torch.int64, device, rank * block) for r in range(ws)).to(dtype)
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
            from ..algorithms import execute
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


def _rank_bench(rank, world_size, job):
    """Rank side: warm-up, then timed iterations, every algorithm of the job interleaved within
    each iteration (so that load on the machine hits them alike), each result checked.
    Returns ``{algorithm: {times, ok, bad}}``."""
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    dtype = getattr(torch, job["dtype"])
    shared = {}
    cases = {a: _Case(job["primitive"], a, rank, world_size, job["count"], job["block"], dtype, device, shared)
             for a in job["algorithms"]}
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


# ----------------------------------------------------------------------------------------------
# Physical references (measured here, in the caller)

def _stats(times):
    return statistics.median(times), min(times), max(times)


def _ref_row(name, backend, nbytes, times, ok, dtype="uint8", world_size=1):
    med, lo, hi = _stats(times)
    bw = _algbw(nbytes, med)
    return dict(primitive=name, algorithm="reference", backend=backend, world_size=world_size, dtype=dtype,
                nbytes=int(nbytes), time_s=med, time_min_s=lo, time_max_s=hi, algbw_GBps=bw, busbw_GBps=bw,
                ok=bool(ok))


def _memcpy_row(nbytes, iters, warmup):
    src = (torch.arange(nbytes, dtype=torch.int64) % 251).to(torch.uint8)
    dst = torch.empty_like(src)
    times, ok = [], True
    for it in range(warmup + iters):
        dst.zero_()
        t0 = time.perf_counter()
        dst.copy_(src)
        dt = time.perf_counter() - t0
        if it >= warmup:
            times.append(dt)
            ok = ok and bool(torch.equal(dst, src))
    return _ref_row("memcpy", "cpu", nbytes, times, ok)


def _local_reduce_row(nbytes, iters, warmup, dtype):
    esize = torch.empty(0, dtype=dtype).element_size()
    n = max(1, nbytes // esize)
    x = _values(1, n, True, dtype, "cpu")
    y0 = _values(2, n, True, dtype, "cpu")
    want = (_values(1, n, True, torch.int64, "cpu") + _values(2, n, True, torch.int64, "cpu")).to(dtype)
    y = y0.clone()
    times, ok = [], True
    for it in range(warmup + iters):
        y.copy_(y0)
        t0 = time.perf_counter()
        if dtype == torch.bool:
            y.logical_or_(x)
        else:
            y.add_(x)
        dt = time.perf_counter() - t0
        if it >= warmup:
            times.append(dt)
            ok = ok and bool(torch.equal(y, want))
    return _ref_row("local_reduce", "cpu", n * esize, times, ok, dtype=str(dtype).replace("torch.", ""))


def _tcp_row(nbytes, iters, warmup, timeout=60.0):
    payload = (torch.arange(nbytes, dtype=torch.int64) % 253).to(torch.uint8).numpy()
    inbox = bytearray(nbytes)
    view = memoryview(inbox)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(timeout)
    tx = socket.create_connection(srv.getsockname(), timeout=timeout)
    rx, _ = srv.accept()
    srv.close()
    for s in (tx, rx):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(timeout)
    go, done = threading.Semaphore(0), threading.Semaphore(0)
    errors = []

    def receiver():
        try:
            for _ in range(warmup + iters):
                go.acquire()
                got = 0
                while got < nbytes:
                    k = rx.recv_into(view[got:], nbytes - got)
                    if k == 0:
                        raise ConnectionError("the sender closed the loopback connection early")
                    got += k
                done.release()
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            done.release()

    th = threading.Thread(target=receiver, daemon=True, name="collnb-tcp-reference")
    th.start()
    times, ok = [], True
    data = memoryview(payload)
    try:
        for it in range(warmup + iters):
            view[:1] = b"\xff"  # a stale buffer would fail the check
            go.release()
            t0 = time.perf_counter()
            tx.sendall(data)
            done.acquire()
            dt = time.perf_counter() - t0
            if errors:
                raise errors[0]
            if it >= warmup:
                times.append(dt)
                ok = ok and inbox == payload.tobytes() if nbytes <= 1 << 16 else ok and bool(
                    (torch.frombuffer(inbox, dtype=torch.uint8) == torch.from_numpy(payload)).all())
    finally:
        tx.close()
        th.join(timeout)
        rx.close()
    return _ref_row("tcp_loopback", "tcp", nbytes, times, ok, world_size=2)


def reference_rows(sizes, *, iters: int = 10, warmup: int = 2, dtype="float32", which=REFERENCES) -> list:
    """Rows (the bench schema) of the physical references at each size: ``memcpy``,
    ``tcp_loopback`` (one stream over 127.0.0.1) and ``local_reduce`` (``add_`` of ``dtype``),
    measured in this process. See the module doc.

    Args:
        sizes: bytes, as :func:`parse_sizes` takes them.
        iters, warmup: timed and untimed repetitions per size (>= 1 and >= 0); memcpy and
            local_reduce take at least 10 (they are cheap).
        dtype: dtype of ``local_reduce``.
        which: subset of :data:`REFERENCES`.

    Raises:
        ValueError: bad sizes, counts or names.
    """
    sizes = parse_sizes(sizes)
    _check_count("iters", iters, 1)
    _check_count("warmup", warmup, 0)
    dt = _dtype(dtype)
    unknown = [w for w in which if w not in REFERENCES]
    if unknown:
        raise ValueError(f"unknown reference {unknown[0]!r}; choose from {', '.join(REFERENCES)}")
    rows = []
    local = max(iters, 10)  # one core, microseconds each: more iterations cost nothing and steady the median
    for n in sizes:
        if "memcpy" in which:
            rows.append(_memcpy_row(n, local, warmup))
        if "tcp_loopback" in which:
            rows.append(_tcp_row(n, iters, warmup))
        if "local_reduce" in which:
            rows.append(_local_reduce_row(n, local, warmup, dt))
    return rows


# ----------------------------------------------------------------------------------------------
# The caller side

def _dtype(dtype) -> torch.dtype:
    from ..collectives import dtype_name
    return getattr(torch, dtype_name(dtype if dtype is not None else torch.float32))


def _check_dtype(primitive, algorithms, dt, backend):
    from ..collectives import backend_support
    sup = backend_support(backend)
    name = str(dt).replace("torch.", "")
    builtin = {"all_reduce": "all_reduce", "reduce": "reduce", "broadcast": "broadcast",
               "all_gather": "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor",
               "reduce_scatter": ("reduce_scatter_single" if hasattr(dist, "reduce_scatter_single")
                                  else "reduce_scatter_tensor"),
               "scatter": "scatter", "gather": "gather", "all_to_all": "all_to_all_single"}[primitive]
    checks = []
    if "builtin" in algorithms:
        checks.append(builtin)
    if any(a != "builtin" for a in algorithms):
        checks.append("send_recv")
    for prim in checks:
        op = "sum" if prim in _REDUCING or prim.startswith("reduce_scatter") else None
        if not sup.supports(prim, name, op):
            raise ValueError(f"{backend} cannot run {prim} on {name} tensors (detected on real ranks: "
                             f"{sup.error(prim, name, op)}); dtypes it accepts: {', '.join(sup.dtypes(prim))}")


def _progress(total, enabled, desc):
    if not enabled:
        return None
    from tqdm.auto import tqdm  # the notebook widget in Jupyter, a plain bar in a terminal
    return tqdm(total=total, desc=desc, unit="run", leave=True)


def _have_pandas() -> bool:
    try:
        import pandas  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def to_table(rows, as_frame: bool | None = None):
    """Rows as a pandas ``DataFrame`` (columns :data:`COLUMNS` first) when pandas is installed
    (``as_frame=None``) or asked for (``True``), else the list of dicts."""
    rows = list(rows.to_dict("records")) if hasattr(rows, "to_dict") else list(rows)
    if as_frame is None:
        as_frame = _have_pandas()
    if not as_frame:
        return rows
    import pandas as pd  # noqa: PLC0415
    cols = list(COLUMNS) + sorted({k for r in rows for k in r} - set(COLUMNS))
    return pd.DataFrame(rows, columns=cols)


def as_rows(table) -> list:
    """A DataFrame, a list of dicts, or a path (JSON/CSV) -> list of dicts (the bench rows)."""
    if isinstance(table, (str, os.PathLike)):
        return load(table, as_frame=False)
    if hasattr(table, "to_dict"):
        return list(table.to_dict("records"))
    return [dict(r) for r in table]


def _row(primitive, alg, backend, ws, dname, nbytes, per_rank, iters) -> dict:
    """One row from every rank's ``{times, ok}``: per iteration the slowest rank's time."""
    slowest = [max(pr["times"][k] for pr in per_rank) for k in range(iters)]
    med, lo, hi = _stats(slowest)
    ab = _algbw(nbytes, med)
    return dict(primitive=primitive, algorithm=alg, backend=backend, world_size=ws, dtype=dname, nbytes=int(nbytes),
                time_s=med, time_min_s=lo, time_max_s=hi, algbw_GBps=ab, busbw_GBps=ab * busbw_factor(primitive, ws),
                ok=all(pr["ok"] for pr in per_rank))


def bench(primitive: str = "all_reduce", world_sizes: int | Sequence[int] = (2, 4), sizes="1K:64M",
          dtype="float32", *, iters: int = 20, warmup: int = 5, algorithms: str | Sequence[str] = ("builtin",),
          backend: str = "gloo", references: bool = True, progress: bool = True, timeout: float = 600.0,
          as_frame: bool | None = None):
    """Measure ``primitive`` on real ranks at every world size, size and algorithm (module doc).

    Args:
        primitive: one of :data:`PRIMITIVES`.
        world_sizes: an int or a sequence of ints (1..16; NCCL: at most the GPU count).
        sizes: bytes per rank (nccl-tests' "size", module doc): ``"1K:64M"`` (every power of two
            between), one size, or a list. Blocked primitives (all_gather, reduce_scatter,
            scatter, gather, all_to_all) round down to a multiple of ``world_size`` elements.
        dtype: ``torch.dtype`` or name; one the backend accepts (detected on real ranks).
        iters: timed iterations per measurement (>= 1); warmup: untimed ones before (>= 0).
        algorithms: ``"builtin"`` (the backend's collective), names from
            :func:`collnb.algorithms.algorithms_for`, or ``"all"``. They take turns within
            every iteration.
        backend: ``"gloo"`` or ``"nccl"`` (CUDA-event timing; refused with the reason where
            there is no GPU -- never a silent fallback to gloo).
        references: also measure ``memcpy``, ``tcp_loopback`` and ``local_reduce`` at each size.
        progress: a tqdm progress bar (the notebook widget in Jupyter, plain text in a terminal).
        timeout: seconds each launch may take.
        as_frame: ``None``: a DataFrame if pandas is installed, else a list of dicts.

    Returns:
        The rows (:data:`COLUMNS`), collectives first, in (world size, size, algorithm) order,
        then the references.

    Raises:
        ValueError: unknown primitive/algorithm/dtype, bad sizes, counts or world sizes, a
            size smaller than one element per rank.
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA).
        collnb.launcher.LaunchError: the ranks failed.
    """
    from ..ranks import _check_request, _default_start_method, launch
    algs = check_algorithms(primitive, algorithms)
    sizes = parse_sizes(sizes)
    _check_count("iters", iters, 1)
    _check_count("warmup", warmup, 0)
    if isinstance(world_sizes, int) and not isinstance(world_sizes, bool):
        world_sizes = (world_sizes,)
    world_sizes = tuple(world_sizes)
    if not world_sizes:
        raise ValueError("no world size given")
    for ws in world_sizes:
        _check_request(_rank_bench, ws, backend, _default_start_method())
    dt = _dtype(dtype)
    dname = str(dt).replace("torch.", "")
    _check_dtype(primitive, algs, dt, backend)
    esize = dt.itemsize
    for ws in world_sizes:
        # one element per rank at least: a block per rank, or a chunk per rank for the send/recv algorithms
        need = esize * ws if (primitive in _BLOCKED or any(a != "builtin" for a in algs)) else esize
        if sizes[0] < need:
            raise ValueError(f"{sizes[0]} B is too small for {primitive} on {dname} at world size {ws}: it needs "
                             f"at least {need} B ({need // esize} elements, one per rank); start the sweep there")
    jobs = [(ws, n) for ws in world_sizes for n in sizes]
    bar = _progress(len(jobs) * len(algs) + (len(sizes) if references else 0), progress, f"bench {primitive}")
    rows = []
    try:
        for ws, nbytes in jobs:
            count, block = _counts(primitive, nbytes, ws, esize)
            job = dict(primitive=primitive, algorithms=list(algs), dtype=dname, count=count, block=block, iters=iters,
                       warmup=warmup)
            if bar is not None:
                bar.set_postfix_str(f"ws {ws}, {_fmt_bytes(nbytes)}, {'/'.join(algs)}")
            res = launch(_rank_bench, ws, args=(job,), backend=backend, timeout=timeout, debug=False,
                         collective_timeout=max(60.0, timeout / 4))
            actual = count * esize
            for alg in algs:
                rows.append(_row(primitive, alg, backend, ws, dname, actual, [res[r][alg] for r in range(ws)], iters))
                if not rows[-1]["ok"]:
                    first = next(res[r][alg]["bad"] for r in range(ws) if not res[r][alg]["ok"])
                    warnings.warn(f"{primitive}/{alg} at world size {ws}, {_fmt_bytes(actual)}: the result differs "
                                  f"from the reference ({first}); the row has ok=False", RuntimeWarning, stacklevel=2)
            if bar is not None:
                bar.update(len(algs))
        if references:
            for nbytes in sizes:
                if bar is not None:
                    bar.set_postfix_str(f"references, {_fmt_bytes(nbytes)}")
                rows.extend(reference_rows([nbytes], iters=iters, warmup=min(warmup, 2), dtype=dt))
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return to_table(rows, as_frame)


def debug_cost(primitive: str = "all_reduce", world_size: int = 2, nbytes=1 << 10, dtype="float32", *,
               algorithm: str = "builtin", iters: int = 20, warmup: int = 5, backend: str = "gloo",
               timeout: float = 600.0) -> dict:
    """What ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (collnb's default for teaching, ``launch(debug=True)``)
    costs: the same measurement with the checks off and on.

    Returns:
        dict ``off`` and ``on`` (rows as :func:`bench` makes them, ``debug`` column added),
        ``ratio`` (``on.time_s / off.time_s``) and ``extra_s`` (``on.time_s - off.time_s``).

    Raises:
        as :func:`bench`.
    """
    from ..ranks import launch
    algs = check_algorithms(primitive, algorithm)
    nbytes = parse_sizes([nbytes])[0]
    _check_count("iters", iters, 1)
    _check_count("warmup", warmup, 0)
    dt = _dtype(dtype)
    _check_dtype(primitive, algs, dt, backend)
    count, block = _counts(primitive, nbytes, world_size, dt.itemsize)
    if count < world_size:
        raise ValueError(f"{nbytes} B is too small for {primitive} at world size {world_size}")
    dname = str(dt).replace("torch.", "")
    job = dict(primitive=primitive, algorithms=[algs[0]], dtype=dname, count=count, block=block, iters=iters,
               warmup=warmup)
    out = {}
    for debug in (False, True):
        res = launch(_rank_bench, world_size, args=(job,), backend=backend, timeout=timeout, debug=debug,
                     collective_timeout=max(60.0, timeout / 4))
        row = _row(primitive, algs[0], backend, world_size, dname, count * dt.itemsize,
                   [res[r][algs[0]] for r in range(world_size)], iters)
        out["on" if debug else "off"] = dict(row, debug=debug)
    out["ratio"] = out["on"]["time_s"] / out["off"]["time_s"]
    out["extra_s"] = out["on"]["time_s"] - out["off"]["time_s"]
    return out


# ----------------------------------------------------------------------------------------------
# Files

def _clean(row) -> dict:
    out = {}
    for k in COLUMNS:
        if k not in row:
            raise ValueError(f"row has no {k!r} column: {row}")
        v = row[k]
        if hasattr(v, "item"):
            v = v.item()
        out[k] = v
    return out


def save_json(rows, path, *, note: str = "") -> str:
    """Write the rows to ``path`` as JSON: ``{"columns", "machine", "note", "rows"}`` (the machine:
    torch version, CPU count, CUDA devices). Returns the path."""
    rows = [_clean(r) for r in as_rows(rows)]
    machine = dict(torch=torch.__version__, cpu_count=os.cpu_count(),
                   cuda_devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                   if torch.cuda.is_available() else [])
    with open(path, "w") as f:
        json.dump(dict(columns=list(COLUMNS), machine=machine, note=note, rows=rows), f, indent=1)
        f.write("\n")
    return str(path)


def save_csv(rows, path) -> str:
    """Write the rows to ``path`` as CSV with the :data:`COLUMNS` header. Returns the path."""
    rows = [_clean(r) for r in as_rows(rows)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    return str(path)


_INT_COLS = ("world_size", "nbytes")
_FLOAT_COLS = ("time_s", "time_min_s", "time_max_s", "algbw_GBps", "busbw_GBps")


def note(path) -> str:
    """The ``note`` a JSON results file carries (where and how it was measured), or ``""``."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    return str(data.get("note", "")) if isinstance(data, dict) else ""


def load(path, as_frame: bool | None = None):
    """Rows from a file :func:`save_json` / :func:`save_csv` wrote (also a bare JSON list of rows),
    e.g. one measured on a GPU machine. Returns what :func:`bench` returns.

    Raises:
        ValueError: the file is not a bench results file (says which column is missing).
        OSError: it cannot be read.
    """
    path = str(path)
    with open(path) as f:
        text = f.read()
    if path.lower().endswith(".csv"):
        rows = list(csv.DictReader(text.splitlines()))
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not JSON: {exc}") from None
        rows = data["rows"] if isinstance(data, dict) and "rows" in data else data
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a list of rows or {{'rows': [...]}}")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"{path}: row {i} is not an object")
        missing = [c for c in COLUMNS if c not in r]
        if missing:
            raise ValueError(f"{path}: row {i} has no {missing[0]!r} column; a bench results file has the "
                             f"columns {', '.join(COLUMNS)}")
        r = dict(r)
        for c in _INT_COLS:
            r[c] = int(r[c])
        for c in _FLOAT_COLS:
            r[c] = float(r[c])
        r["ok"] = r["ok"] if isinstance(r["ok"], bool) else str(r["ok"]).strip().lower() in ("true", "1")
        out.append(r)
    return to_table(out, as_frame)


# ----------------------------------------------------------------------------------------------
# Text and figures

def _fmt_bytes(n) -> str:
    n = int(n)
    for s, u in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= s and n % s == 0:
            return f"{n // s} {u}"
    return f"{n} B"


def format_table(rows) -> str:
    """The rows as nccl-tests-like text: size, algorithm, time (us), algbw, busbw, ✓/✗."""
    rows = as_rows(rows)
    lines = [f"{'primitive':>14} {'algorithm':>18} {'ws':>3} {'dtype':>8} {'size':>10} {'time us':>11} "
             f"{'min us':>10} {'max us':>10} {'algbw GB/s':>10} {'busbw GB/s':>10}  ok"]
    for r in rows:
        lines.append(f"{r['primitive']:>14} {r['algorithm']:>18} {r['world_size']:>3} {r['dtype']:>8} "
                     f"{_fmt_bytes(r['nbytes']):>10} {r['time_s'] * 1e6:>11.1f} {r['time_min_s'] * 1e6:>10.1f} "
                     f"{r['time_max_s'] * 1e6:>10.1f} {r['algbw_GBps']:>10.3f} {r['busbw_GBps']:>10.3f}  "
                     f"{'✓' if r['ok'] else '✗'}")
    return "\n".join(lines)


def _tick_bytes(v) -> str:
    if v <= 0:
        return ""
    for s, u in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if v >= s:
            return f"{v / s:g}{u}"
    return f"{v:g}"


def _human_bytes(x) -> str:
    for s, u in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if x >= s:
            return f"{x / s:.3g} {u}"
    return f"{x:.3g} B"


_COLORS = ("#4E79A7", "#E15759", "#59A14F", "#F28E2B", "#B07AA1", "#76B7B2", "#EDC948", "#FF9DA7")


def plot(rows, fits=None, *, primitive: str | None = None, world_sizes=None, naive=None, dpi: int = 80):
    """Measured time and busbw against the fitted α-β(-γ) model, per algorithm; crossovers of
    the fitted models marked; memcpy / TCP references as lines.

    Args:
        rows: what :func:`bench` / :func:`load` returned (or a path).
        fits: ``{(primitive, algorithm): collnb.costmodel.Fit}`` (default:
            :func:`collnb.costmodel.fit_each` of the rows).
        primitive: which primitive to draw (default: the first collective in the rows).
        world_sizes: which world sizes (default: all in the rows), one row of panels each.
        naive: a :class:`collnb.costmodel.CostModel` drawn as the naive model (default
            :data:`collnb.costmodel.DEFAULT_MODEL`), for the built-in's form.

    Returns:
        ``matplotlib.figure.Figure`` (Agg canvas; ``fig.savefig(path)``).

    Raises:
        ValueError: no collective rows.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from ..algorithms import BUILTIN_FORM, DEFAULT_MODEL, crossovers, fit_each, predict
    rows = as_rows(rows)
    coll = [r for r in rows if r["primitive"] in PRIMITIVES]
    if not coll:
        raise ValueError("no collective rows to plot (only references?); measure with bench() first")
    primitive = primitive or coll[0]["primitive"]
    coll = [r for r in coll if r["primitive"] == primitive]
    if not coll:
        raise ValueError(f"no rows for {primitive!r}")
    refs = [r for r in rows if r["primitive"] in ("memcpy", "tcp_loopback")]
    if fits is None:
        fits = fit_each(rows)
    naive = naive or DEFAULT_MODEL
    wss = sorted({r["world_size"] for r in coll}) if world_sizes is None else list(world_sizes)
    algs = list(dict.fromkeys(r["algorithm"] for r in coll))
    fig = Figure(figsize=(12, 4.2 * len(wss) + 0.8), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(wss), 2, squeeze=False)
    cpus = os.cpu_count()
    for row_i, ws in enumerate(wss):
        ax_t, ax_b = axes[row_i]
        sel = [r for r in coll if r["world_size"] == ws]
        if not sel:
            continue
        xs_all = sorted({r["nbytes"] for r in sel})
        grid = [2 ** k for k in range(int(math.log2(max(1, xs_all[0]))), int(math.log2(xs_all[-1])) + 2)]
        for i, alg in enumerate(algs):
            c = _COLORS[i % len(_COLORS)]
            pts = sorted((r for r in sel if r["algorithm"] == alg), key=lambda r: r["nbytes"])
            if not pts:
                continue
            x = [r["nbytes"] for r in pts]
            t = [r["time_s"] for r in pts]
            err = [[r["time_s"] - r["time_min_s"] for r in pts], [r["time_max_s"] - r["time_s"] for r in pts]]
            bad = [r for r in pts if not r["ok"]]
            ax_t.errorbar(x, t, yerr=err, fmt="o", ms=4, color=c, capsize=2, label=f"{alg} measured")
            ax_b.plot(x, [r["busbw_GBps"] for r in pts], "o-", ms=4, color=c, label=f"{alg} measured")
            for r in bad:
                ax_t.plot([r["nbytes"]], [r["time_s"]], "x", color="black", ms=10)
            f = fits.get((primitive, alg))
            if f is not None:
                ft = [f.predict(world_size=ws, nbytes=n) for n in grid]
                inv_beta = f"{1 / f.model.beta / 1e9:.2f} GB/s" if f.model.beta > 0 else "∞ (β fitted as 0)"
                ax_t.plot(grid, ft, "--", color=c, lw=1.3,
                          label=f"{alg} fit: α={f.model.alpha * 1e6:.0f} µs, 1/β={inv_beta}")
                ax_b.plot(grid, [_algbw(n, s) * busbw_factor(primitive, ws) for n, s in zip(grid, ft)], "--",
                          color=c, lw=1.1)
        # the naive model for the built-in's form
        form = BUILTIN_FORM.get(primitive)
        if form:
            nt = [predict(primitive, form, ws, n, naive).seconds for n in grid]
            ax_t.plot(grid, nt, ":", color="#777777", lw=1.5, label=f"naive model ({form} form, α={naive.alpha * 1e6:.0f} "
                      f"µs, 1/β={1 / naive.beta / 1e9:.0f} GB/s)")
        # crossovers of the fitted models inside the measured range, labels stacked up from the bottom
        fitted = [(a, fits[(primitive, a)]) for a in algs if (primitive, a) in fits]
        k = 0
        for (a1, f1), (a2, f2) in ((p, q) for j, p in enumerate(fitted) for q in fitted[j + 1:]):
            for xc in crossovers(f1, f2, ws, xs_all[0], xs_all[-1]):
                ax_t.axvline(xc, color="#999999", lw=0.8, ls="-.")
                ax_t.text(xc, 0.03 + 0.07 * k, f" {a1} = {a2} at {_human_bytes(xc)}", fontsize=7, color="#555555",
                          va="bottom", transform=ax_t.get_xaxis_transform())
                k += 1
        for name, style in (("memcpy", "-"), ("tcp_loopback", "--")):
            rr = sorted((r for r in refs if r["primitive"] == name), key=lambda r: r["nbytes"])
            if rr:
                ax_b.plot([r["nbytes"] for r in rr], [r["busbw_GBps"] for r in rr], style, color="#333333", lw=1,
                          label={"memcpy": "memcpy (one core)", "tcp_loopback": "one TCP stream (loopback)"}[name])
        for ax in (ax_t, ax_b):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _tick_bytes(v)))
        over = f"{ws} ranks on {cpus} cores" + (" (oversubscribed)" if cpus and ws > cpus else "")
        ax_t.set_title(f"{primitive}, world size {ws}: time ({over})", fontsize=10)
        ax_b.set_title(f"{primitive}, world size {ws}: busbw (nccl-tests)", fontsize=10)
        ax_t.set_xlabel("bytes per rank")
        ax_b.set_xlabel("bytes per rank")
        ax_t.set_ylabel("seconds (median of slowest rank; bars min-max)")
        ax_b.set_ylabel("GB/s (log scale)")
        ax_t.legend(fontsize=6.5, loc="upper left")
        ax_b.legend(fontsize=6.5, loc="upper left")
        ax_t.grid(True, which="major", alpha=0.3)
        ax_b.grid(True, which="major", alpha=0.3)
    backend = coll[0]["backend"]
    fig.text(0.01, 0.005, f"{backend}, {coll[0]['dtype']}; dashed: α-β-γ model fitted to these points; dotted: the "
             f"naive model. Measured sits above the naive model on a shared CPU: ranks outnumber cores "
             f"({cpus} here), every rank's Python adds per-round overhead, loopback TCP copies through the kernel "
             f"(the debug checks are off while timing).", fontsize=7, color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
