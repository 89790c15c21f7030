"""Physical references beside the collectives, measured in the calling process: ``memcpy`` (one
core), ``tcp_loopback`` (one TCP stream over 127.0.0.1) and ``local_reduce`` (``y.add_(x)``, the
per-byte reduction cost γ of :mod:`collnb.costmodel`)."""

from __future__ import annotations

import socket
import threading
import time

import torch

from ...vocabulary import check_choice, check_int
from .measuring import values
from .rows import reference_row
from .inputs import REFERENCES, bench_dtype, parse_sizes


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
    return reference_row("memcpy", "cpu", nbytes, times, ok)


def _local_reduce_row(nbytes, iters, warmup, dtype):
    esize = torch.empty(0, dtype=dtype).element_size()
    n = max(1, nbytes // esize)
    x = values(1, n, True, dtype, "cpu")
    y0 = values(2, n, True, dtype, "cpu")
    want = (values(1, n, True, torch.int64, "cpu") + values(2, n, True, torch.int64, "cpu")).to(dtype)
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
    return reference_row("local_reduce", "cpu", n * esize, times, ok, dtype=str(dtype).replace("torch.", ""))


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
    return reference_row("tcp_loopback", "tcp", nbytes, times, ok, world_size=2)


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

    Returns:
        list of row dicts (:data:`COLUMNS`), per size in the order of ``which``.

    Raises:
        TypeError / ValueError: bad sizes, counts or names (the words of :mod:`collnb.vocabulary`).
    """
    sizes = parse_sizes(sizes)
    check_int("iters", iters, 1, what="timed iterations per size")
    check_int("warmup", warmup, 0, what="untimed iterations before them")
    dt = bench_dtype(dtype)
    for w in which:
        check_choice("reference", w, REFERENCES)
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
