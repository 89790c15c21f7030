"""Physical references beside the collectives, measured in the calling process: ``memcpy`` (one
core), ``tcp_loopback`` (one TCP stream over 127.0.0.1) and ``local_reduce`` (``y.add_(x)``, the
per-byte reduction cost γ of :mod:`collnb.costmodel`).

A reference is a limit of the machine: load from other programs can only slow a copy down, never
speed it up. So the references are measured robustly (a busy machine once measured memcpy at
0.185 GB/s, below one TCP stream and below the all_reduce it should bound):

* **interleaved with the collective**: :class:`ReferenceSampler` takes a few repetitions of every
  reference right after each collective launch at that size (:func:`collnb.bench.bench` calls
  it), so the samples of one size are spread over the whole sweep and a burst of load hits only
  some of them;
* **more repetitions**: at least :data:`MIN_REPETITIONS` per size (they cost microseconds to
  milliseconds each);
* **the median of the best**: a row's ``time_s`` is the median of the fastest half of its
  repetitions (``time_min_s``/``time_max_s`` still the fastest and the slowest), which ignores the
  slowed ones and one lucky outlier alike.
"""

from __future__ import annotations

import math
import socket
import statistics
import threading
import time
from collections.abc import Iterable, Sequence

import torch

from ...vocabulary import check_choice, check_int
from .measuring import values
from .rows import reference_row
from .choices import REFERENCES, Row, bench_dtype, parse_sizes

__all__ = ["reference_rows", "ReferenceSampler", "best_half_median", "MIN_REPETITIONS"]

#: The fewest repetitions of each reference per size (all samples of one size together).
MIN_REPETITIONS = 30


def best_half_median(times: Iterable[float]) -> float:
    """The median of the fastest half (rounded up) of ``times`` (seconds).

    Raises:
        ValueError: ``times`` is empty.
    """
    ts = sorted(times)
    if not ts:
        raise ValueError("no times to summarise")
    return statistics.median(ts[:max(1, math.ceil(len(ts) / 2))])


def _pattern(nbytes: int, period: int) -> torch.Tensor:
    """``nbytes`` uint8 values ``i % period`` (made without an int64 tensor of that length)."""
    base = torch.arange(period, dtype=torch.uint8)
    return base.repeat(nbytes // period + 1)[:nbytes].clone()


class _Memcpy:
    """``dst.copy_(src)`` of ``nbytes`` bytes."""

    def __init__(self, nbytes: int) -> None:
        self.src = _pattern(nbytes, 251)
        self.dst = torch.empty_like(self.src)

    def once(self) -> tuple[float, bool]:
        """One timed copy: ``(seconds, whether dst equals src)``."""
        self.dst.zero_()
        t0 = time.perf_counter()
        self.dst.copy_(self.src)
        dt = time.perf_counter() - t0
        return dt, bool(torch.equal(self.dst, self.src))


class _LocalReduce:
    """``y.add_(x)`` (``logical_or_`` for bool) of ``nbytes`` bytes of ``dtype``, whole elements."""

    def __init__(self, nbytes: int, dtype: torch.dtype) -> None:
        esize = torch.empty(0, dtype=dtype).element_size()
        self.n = n = max(1, nbytes // esize)
        self.nbytes = n * esize
        self.dtype = dtype
        self.x = values(1, n, True, dtype, "cpu")
        self.y0 = values(2, n, True, dtype, "cpu")
        self.want = (values(1, n, True, torch.int64, "cpu") + values(2, n, True, torch.int64, "cpu")).to(dtype)
        self.y = self.y0.clone()

    def once(self) -> tuple[float, bool]:
        """One timed reduction: ``(seconds, whether y is the exact sum)``."""
        self.y.copy_(self.y0)
        t0 = time.perf_counter()
        if self.dtype == torch.bool:
            self.y.logical_or_(self.x)
        else:
            self.y.add_(self.x)
        dt = time.perf_counter() - t0
        return dt, bool(torch.equal(self.y, self.want))


def _tcp_times(nbytes: int, reps: int, warmup: int, timeout: float = 60.0) -> tuple[list[float], bool]:
    """``(times, ok)`` of ``reps`` sends of ``nbytes`` over one loopback TCP stream (a receiver
    thread reads the whole payload; it is checked)."""
    payload = _pattern(nbytes, 253).numpy()
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
    errors: list[Exception] = []

    def receiver() -> None:
        try:
            for _ in range(warmup + reps):
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
    times: list[float] = []
    ok = True
    data = payload.data  # a memoryview of the array
    try:
        for it in range(warmup + reps):
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
    return times, ok


class ReferenceSampler:
    """Samples of the physical references, taken a few repetitions at a time between the
    collective's launches (see the module doc), turned into rows at the end.

    Args:
        which: subset of :data:`REFERENCES`.
        dtype: ``torch.dtype`` of ``local_reduce``.
        reps: repetitions of each reference per :meth:`sample` (>= 1); warmup: untimed ones
            before them (>= 0).
    """

    def __init__(self, which: Iterable[str] = REFERENCES, dtype: torch.dtype = torch.float32, reps: int = 10,
                 warmup: int = 1) -> None:
        for w in which:
            check_choice("reference", w, REFERENCES)
        check_int("reps", reps, 1, what="repetitions per sample")
        check_int("warmup", warmup, 0, what="untimed repetitions before them")
        self.which, self.dtype, self.reps, self.warmup = tuple(which), dtype, reps, warmup
        self.times: dict[tuple[str, int], list[float]] = {}   # (name, nbytes) -> [seconds]
        self.ok: dict[tuple[str, int], bool] = {}      # (name, nbytes) -> every repetition checked out
        self._nbytes: dict[tuple[str, int], int] = {}  # (name, nbytes asked) -> nbytes measured (local_reduce: whole elements)

    def _add(self, name: str, nbytes: int, times: Sequence[float], ok: bool) -> None:
        key = (name, nbytes)
        self.times.setdefault(key, []).extend(times)
        self.ok[key] = self.ok.get(key, True) and ok

    def sample(self, nbytes: int) -> None:
        """Measure every reference at ``nbytes`` (bytes; ``reps`` repetitions each, memcpy and
        local_reduce taking turns with each other, on one core: torch's intra-op threads are set
        to 1 meanwhile, so that "one core" is true and a busy machine cannot stall a thread team)."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            self._sample(nbytes)
        finally:
            torch.set_num_threads(threads)

    def _sample(self, nbytes: int) -> None:
        cases: dict[str, _Memcpy | _LocalReduce] = {}
        if "memcpy" in self.which:
            cases["memcpy"] = _Memcpy(nbytes)
        if "local_reduce" in self.which:
            cases["local_reduce"] = lr = _LocalReduce(nbytes, self.dtype)
            self._nbytes[("local_reduce", nbytes)] = lr.nbytes
        got: dict[str, tuple[list[float], bool]] = {k: ([], True) for k in cases}
        for it in range(self.warmup + self.reps):
            for name, case in cases.items():
                dt, ok = case.once()
                if it >= self.warmup:
                    times, was = got[name]
                    times.append(dt)
                    got[name] = (times, was and ok)
        for name, (times, ok) in got.items():
            self._add(name, nbytes, times, ok)
        if "tcp_loopback" in self.which:
            times, ok = _tcp_times(nbytes, self.reps, self.warmup)
            self._add("tcp_loopback", nbytes, times, ok)

    def rows(self, sizes: Iterable[int] | None = None) -> list[Row]:
        """Rows (the bench schema) of everything sampled, per size in the order of ``which``:
        ``time_s`` the median of the fastest half of the repetitions (:func:`best_half_median`),
        ``time_min_s`` / ``time_max_s`` the fastest / slowest. ``sizes``: which sizes, in that
        order (default: all sampled, ascending)."""
        if sizes is None:
            sizes = sorted({n for _, n in self.times})
        out = []
        columns = {"memcpy": ("cpu", "uint8", 1), "tcp_loopback": ("tcp", "uint8", 2),  # backend, dtype, world_size
                   "local_reduce": ("cpu", str(self.dtype).replace("torch.", ""), 1)}
        for n in sizes:
            for name in self.which:
                times = self.times.get((name, n))
                if not times:
                    continue
                backend, dtype, world_size = columns[name]
                nbytes = self._nbytes.get((name, n), n)
                best = sorted(times)[:max(1, math.ceil(len(times) / 2))]
                row = reference_row(name, backend, nbytes, best, self.ok[(name, n)], dtype, world_size)
                row["time_max_s"] = max(times)
                out.append(row)
        return out


def reference_rows(sizes: object, *, iters: int = 10, warmup: int = 2, dtype: object = "float32",
                   which: Iterable[str] = REFERENCES) -> list[Row]:
    """Rows (the bench schema) of the physical references at each size: ``memcpy``,
    ``tcp_loopback`` (one stream over 127.0.0.1) and ``local_reduce`` (``add_`` of ``dtype``),
    measured in this process, robustly (the module doc): at least :data:`MIN_REPETITIONS`
    repetitions per size in three rounds, ``time_s`` the median of the fastest half.

    Args:
        sizes: bytes, as :func:`parse_sizes` takes them.
        iters, warmup: timed repetitions per round (>= 1; at least a third of
            :data:`MIN_REPETITIONS` is taken) and untimed ones before each round (>= 0).
        dtype: dtype of ``local_reduce``.
        which: subset of :data:`REFERENCES`.

    Returns:
        list of row dicts (:data:`COLUMNS`), per size in the order of ``which``.

    Raises:
        TypeError / ValueError: bad sizes, counts or names (the words of :mod:`collnb.vocabulary`).
    """
    sizes_ = parse_sizes(sizes)
    check_int("iters", iters, 1, what="timed iterations per size")
    check_int("warmup", warmup, 0, what="untimed iterations before them")
    sampler = ReferenceSampler(which, bench_dtype(dtype), reps=max(iters, math.ceil(MIN_REPETITIONS / 3)),
                               warmup=warmup)
    for _ in range(3):  # three rounds over the sizes: a burst of load hits one round, not all
        for n in sizes_:
            sampler.sample(n)
    return sampler.rows(sizes_)
