"""Launch real ranks from a Python process or a Jupyter kernel: :func:`launch`, :func:`shutdown`,
:func:`backend_info`, and the checks of a launch request.

``launch(fn, world_size)`` runs ``fn(rank, world_size, *args)`` on ``world_size`` worker
processes started through :mod:`torch.multiprocessing`, each inside an initialised default
process group, and returns the per-rank results in rank order.

How it works (and why):

* **Warm ranks.** Ranks are kept in a :class:`RankPool` between calls. A call at a world size the
  pool already has costs a pipe round trip plus ``fn``; a new world size re-initialises the
  default process group on the existing processes (one store client per rank is reused, which
  avoids the ~5 s stalls seen at world size 16 when each re-init opened a new client).
* **Rendezvous without a port.** Every pool gets a private temporary directory holding a
  :class:`torch.distributed.FileStore`. No fixed ``MASTER_PORT``, no TCPStore: FileStore opens no
  socket, and the parent hosts no server thread while it forks (forking while the parent hosts a
  TCPStore deadlocked 21/25 launches at world size 16 on our 2-core machine). Gloo's pairs are
  bound to the loopback interface (``GLOO_SOCKET_IFNAME=lo``), NCCL's bootstrap likewise
  (``NCCL_SOCKET_IFNAME=lo``), so nothing listens on another interface.
* **Functions by value.** ``fn`` is shipped with cloudpickle, so a function defined in a notebook
  cell works in a pool forked before the cell ran.
* **Clean failures.** A rank that raises, exits or dies makes the launcher stop every other rank
  at once and raise :class:`RankError` naming the root-cause rank, with that rank's traceback.
  Communication errors that follow a root cause ("Connection closed by peer") never hide it.
  A rank that never reaches a collective its peers wait in is caught by the process group's
  ``collective_timeout`` (seconds, default 5), not gloo's 30-minute default; the launcher then
  shows where each still-running rank was (its Python stack, via :mod:`faulthandler`).
* **torch.distributed, checked.** Inside a call, :mod:`collnb.ranks._dist_hooks` wraps the public
  torch.distributed functions: tensors whose layout gloo misreads get dense copies (results copied
  back), groups and device meshes the function makes get ``collective_timeout``; with
  ``record_calls=True`` :mod:`collnb.ranks.recording` records every communication operation each
  rank issues (whichever API issued it) as :class:`CallRecord` objects. When the
  DETAIL check finds mismatched collectives, a rank is blamed only if it differs from all the
  others; a timeout error names the timeout that fired; the backend's C++ log lines are attached
  to the error instead of printed.
* **Where each part lives.** The warm pool in :mod:`.pool`, the rank's loop in :mod:`.rank`,
  the messages between them in :mod:`.protocol`, how functions and tensors travel in
  :mod:`.serialization`, output lines in :mod:`.output`, the error a learner reads in
  :mod:`.failures`, process life in :mod:`.processes`, torch's private internals in
  :mod:`._torch_internals`.
* **No orphans.** Ranks watch their parent and exit, removing the pool's files, within 0.2 s of
  its death (a killed or restarted kernel); they ignore SIGINT (the kernel
  handles Kernel → Interrupt and stops them), and the pool's temporary directory is removed on
  shutdown, at interpreter exit, and swept on the next start if a kernel was killed.
"""


from __future__ import annotations

import atexit
import inspect
import math
import os
import sys
import threading
from typing import Callable, Sequence

import torch

from ..vocabulary import BACKENDS, MAX_WORLD_SIZE, check_backend, check_world_size
from .backends import local_backend_info
from .pool import RankPool

__all__ = ["launch", "shutdown", "backend_info", "check_ranks", "warm_pool", "MAX_WORLD_SIZE", "BACKENDS"]


def backend_info(backend: str) -> dict:
    """Tell whether ``backend`` can run here, without starting any rank.

    Returns:
        ``{"backend": str, "available": bool, "max_world_size": int, "reason": str}``; ``reason``
        says why it cannot run (empty when it can). For NCCL ``max_world_size`` is the visible GPU
        count (NCCL rejects two ranks on one GPU); for Gloo it is :data:`MAX_WORLD_SIZE`.

    Raises:
        TypeError / ValueError: ``backend`` is not one of :data:`BACKENDS`
            (:func:`collnb.vocabulary.check_backend`).
    """
    return {k: v for k, v in _backend_facts(backend).items() if k != "limit"}


def _backend_facts(backend: str) -> dict:
    """:func:`backend_info`'s dict plus ``"limit"``: why ``max_world_size`` is below
    :data:`MAX_WORLD_SIZE`, in the words world-size errors use ("" when it is not)."""
    if _remote is not None:  # collnb.connect(): the engines' answer
        return _remote.backend_info(backend)
    return local_backend_info(backend)


def check_ranks(world_size, backend: str = "gloo") -> dict:
    """Check that ``world_size`` ranks of ``backend`` can run here (on this machine, or on the engines
    while :func:`collnb.connect` is in force) and return :func:`backend_info`'s dict. Every entry point
    that starts ranks (:func:`launch`, :func:`collnb.run`, :func:`collnb.bench.bench`, ...) checks
    with this one function, so the same request gets the same answer everywhere.

    Raises:
        TypeError / ValueError: an unknown backend (:func:`collnb.vocabulary.check_backend`), a world
            size that is not an int from 1 to :data:`MAX_WORLD_SIZE`, or above what the backend can run
            here, saying why (NCCL: one rank per visible GPU; engines: one rank per engine).
        RuntimeError: the backend cannot run here at all (e.g. NCCL without CUDA), with the reason.
    """
    check_backend(backend)
    info = _backend_facts(backend)
    if info["available"]:
        check_world_size(world_size, info["max_world_size"], why=info.pop("limit"))
        return info
    check_world_size(world_size)  # a wrong world size is named before the backend that cannot run
    where = "on the connected engines" if _remote is not None else "here"
    raise RuntimeError(f"backend {backend!r} cannot run {where}: {info['reason']}")


def _check_request(fn, world_size, backend, start_method):
    """Check a launch request before any rank starts (raises as :func:`launch` says)."""
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(rank, world_size, *args); got {type(fn).__name__} {fn!r}")
    check_ranks(world_size, backend)
    if start_method not in ("fork", "spawn"):
        raise ValueError(f"start_method must be 'fork' or 'spawn' (ranks must be children of this "
                         f"process, which forkserver's are not); got {start_method!r}")
    if start_method == "fork" and backend == "nccl" and torch.cuda.is_initialized():
        raise RuntimeError("CUDA is already initialised in this process, and forked ranks cannot use it. "
                           "Restart the kernel and launch before touching CUDA, or pass start_method='spawn'")


# ----------------------------------------------------------------------------------------------
# The module-level warm pool

_pool: RankPool | None = None
_pool_guard = threading.Lock()
#: :mod:`collnb.ranks.remote` while ``collnb.connect()`` is in force (launch and backend_info go there).
_remote = None


def _forget_pool():
    """In a forked child (a rank, or a process the kernel's code forks): the parent's warm pool
    is not the child's to use or to shut down."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def _default_start_method():
    """``"fork"`` on Linux (fast, and a cell's function needs no import), else ``"spawn"``."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


def _check_seconds(**values):
    """Check that each keyword's value is a positive, finite number of seconds."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise ValueError(f"{name} must be a positive, finite number of seconds; got {value!r}")


def _check_signature(fn, args, kwargs):
    """Check that ``fn(rank, world_size, *args, **kwargs)`` binds (TypeError saying how to
    define ``fn`` if not); functions without a signature (some builtins) pass."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: let the rank report it
        return
    try:
        sig.bind(0, 1, *args, **(kwargs or {}))
    except TypeError as exc:
        raise TypeError(f"fn cannot be called as fn(rank, world_size, *args, **kwargs) with "
                        f"{len(args)} extra argument(s) and keywords {sorted(kwargs or {})}: {exc}. "
                        f"Define it as def {getattr(fn, '__name__', 'fn')}(rank, world_size, ...)") from None


def launch(fn: Callable, world_size: int, args: Sequence = (), kwargs: dict | None = None,
           backend: str = "gloo", timeout: float = 60.0, collective_timeout: float = 5.0,
           debug: bool = True, start_method: str | None = None, *, record_calls: bool = False,
           show_backend_log: bool = False):
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` real ranks.

    Each rank is a process started through :mod:`torch.multiprocessing`, already inside an
    initialised default process group of ``backend`` (``dist.get_rank()`` and
    ``dist.get_world_size()`` work). With NCCL, rank ``r`` uses ``cuda:r``. Ranks stay warm
    between calls (see :class:`RankPool`); their stdout/stderr lines appear here as they are
    printed, prefixed ``[rank r]``.

    Args:
        fn: a function ``fn(rank: int, world_size: int, *args, **kwargs)``; may be defined in a
            notebook cell or be a closure (it is shipped with cloudpickle).
        world_size: number of ranks, 1..:data:`MAX_WORLD_SIZE` (for NCCL at most the GPU count).
        args, kwargs: extra arguments, pickled to every rank.
        backend: ``"gloo"`` or ``"nccl"``.
        timeout: seconds the whole call may take (pool start included) before
            :class:`LaunchTimeout`.
        collective_timeout: seconds a rank waits in a collective for a missing peer before it
            fails (the process group's timeout; gloo's own default is 30 minutes).
        debug: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` in the ranks, so a rank that calls a different
            collective, shape or dtype than its peers fails with a clear message. Costs extra
            checks per collective: pass ``False`` for benchmarks.
        start_method: ``"fork"`` (default on Linux) or ``"spawn"`` (each rank imports torch
            afresh; needed when CUDA is already initialised here).
        record_calls: also return every communication operation each rank's function issued
            (keyword only; see Returns and :mod:`collnb.ranks.recording`).
        show_backend_log: print the lines the backend's C++ code logs (``[E... ProcessGroupGloo.cpp:...]``)
            in the cell as they come (keyword only). By default they are kept out of the cell and
            attached to the error as ``err.backend_log`` (its message says how many); after a call
            that succeeds they are printed at its end.

    Returns:
        list of length ``world_size``: ``fn``'s return value on each rank, in rank order. Tensors
        (also inside lists, tuples and dicts, whose types are kept) come back as detached CPU
        copies. With ``record_calls=True`` a :class:`LaunchResults` (a ``list`` equal to the
        plain one) whose ``.calls[r]`` lists rank ``r``'s operations as :class:`CallRecord` objects
        (the call's name, global src/dst, the group's size and ranks, tensor shapes and dtypes,
        bytes, where it was issued from), in issue order; ``.calls[r].unrecorded`` counts
        operations the backend saw that the recorder could not (another thread).

    Inside the ranks, torch.distributed's functions are wrapped for the call (see
    :mod:`collnb.ranks._dist_hooks`): tensors whose layout gloo misreads (non-contiguous or expanded,
    conjugate or negative views) are handed to torch as dense copies and results copied back;
    groups and device meshes the function creates without ``timeout=`` get ``collective_timeout``.
    Arguments travel as pickle sends them (``nn.Parameter`` and a leaf's ``requires_grad`` kept);
    results come back detached.

    Each call finds its ranks as a fresh script would: what a call changed in a rank's
    ``sys.stdout``/``sys.stderr``, fds 1 and 2, working directory, pending ``signal.alarm``,
    torch thread count, socket environment variables and process groups is undone before the
    next call. Processes a function starts end with the pool (:func:`shutdown`, or when the
    kernel exits), also those in a session of their own.

    Raises:
        TypeError / ValueError: bad ``fn``, ``world_size``, ``backend`` or ``start_method``
            (checked before any rank starts).
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA), with the reason.
        RankError: a rank raised, exited, died or never reached a collective; every rank has
            been stopped.
        LaunchTimeout: the call ran past ``timeout``; every rank has been stopped.
        KeyboardInterrupt: re-raised after every rank has been stopped.
    """
    global _pool
    if _remote is not None:  # collnb.connect(cluster): the ranks are ipyparallel engines
        return _remote.launch(**locals())  # every parameter of this call, as given
    start_method = start_method or _default_start_method()
    _check_request(fn, world_size, backend, start_method)
    _check_signature(fn, tuple(args), kwargs)
    _check_seconds(timeout=timeout, collective_timeout=collective_timeout)
    key = (backend, bool(debug), float(collective_timeout), start_method)
    with _pool_guard:
        pool = _pool
        if pool is not None and not pool.broken and pool.key == key and pool.lock.acquire(blocking=False):
            # A warm rank that died while the pool was idle (OOM killer, a stray kill) is replaced:
            # the pool starts over instead of failing the next call with a BrokenPipeError.
            dead = pool.dead_ranks()
            pool.lock.release()
            if dead:
                sys.stderr.write("[collnb] warm rank(s) had died while idle (" +
                                 "; ".join(f"rank {r}: {why}" for r, why in sorted(dead.items())) +
                                 "); starting fresh ranks\n")
                pool.close()
        if pool is None or pool.broken or pool.key != key:
            if pool is not None:
                pool.close()
            pool = _pool = RankPool(backend, debug, collective_timeout, start_method)
        private = not pool.lock.acquire(blocking=False)
    if private:
        # Another thread is using the warm pool: run on a private pool of our own.
        own = RankPool(backend, debug, collective_timeout, start_method)
        try:
            return own.run(fn, world_size, args, kwargs, timeout, record_calls=record_calls,
                           show_backend_log=show_backend_log)
        finally:
            own.close()
    try:
        return pool.run(fn, world_size, args, kwargs, timeout, record_calls=record_calls,
                        show_backend_log=show_backend_log)
    finally:
        pool.lock.release()


def shutdown():
    """Stop the warm ranks and remove their files. The next :func:`launch` starts new ones."""
    global _pool
    with _pool_guard:
        if _pool is not None:
            _pool.close()
            _pool = None


def warm_pool() -> RankPool | None:
    """The current warm :class:`RankPool`, or ``None`` (for inspection and tests)."""
    return _pool


atexit.register(shutdown)
