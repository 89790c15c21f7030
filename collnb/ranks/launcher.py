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
* **Where each part lives.** The interface of a set of ranks (local, or engines) in :mod:`.rankset`,
  the warm pool in :mod:`.pool` and the parts of its wait for answers in :mod:`.answers`, the rank's loop in :mod:`.rank`,
  the messages between them in :mod:`.protocol`, how functions and tensors travel in
  :mod:`.serialization`, output lines in :mod:`.output`, the error a learner reads in
  :mod:`.failures`, process life in :mod:`.processes`, torch's private internals in
  :mod:`._torch_internals`.
* **A fresh script every call.** After each call every rank puts back what the call changed
  (environment, streams, signal handlers, torch's global modes, random seeds, ...) and reports what
  it cannot put back (a replaced torch function); those ranks are then retired and the next call
  runs on fresh ones (:mod:`.rank_state` lists both; :func:`launch` says which).
* **No orphans.** Ranks watch their parent and exit, removing the pool's files, within 0.2 s of
  its death (a killed or restarted kernel); they ignore SIGINT (the kernel
  handles Kernel → Interrupt and stops them); each is the child subreaper of what it starts, so a
  double-forked daemon ends with it. The pool's temporary directory is removed on shutdown, at
  interpreter exit, and swept on the next start if a kernel was killed: a directory counts as
  alive while its pool holds an ``flock`` on it, whatever PID namespace that pool runs in.
"""


from __future__ import annotations

import atexit
import inspect
import math
import os
import sys
import threading
from typing import Any, Callable, Mapping, Sequence, TypedDict, TypeGuard, cast

import torch

from ..i18n import _
from ..vocabulary import BACKENDS, MAX_WORLD_SIZE, check_backend, check_world_size
from .backends import local_backend_info
from .pool import RankPool
from .rank import current_rank
from .rankset import BackendFacts, LaunchRequest, RankSet, StartMethod, Where

__all__ = ["launch", "shutdown", "backend_info", "check_ranks", "check_flag", "check_call_arguments", "warm_pool",
           "check_request", "check_launch_options", "LocalRanks", "use_rank_set", "active_rank_set", "MAX_WORLD_SIZE", "BACKENDS",
           "LaunchOptions"]


class LaunchOptions(TypedDict, total=False):
    """The :func:`launch` options that collnb's entry points pass through as ``**launch_kwargs``
    (:func:`collnb.run`, :func:`collnb.backend_support`, the explorer...): seconds, the DETAIL
    check and the start method, as :func:`launch` documents them."""

    timeout: float
    collective_timeout: float
    debug: bool
    start_method: str | None


def check_launch_options(options: Mapping[str, object], where: str) -> LaunchOptions:
    """``options`` as :class:`LaunchOptions`, checked by name before anything is launched.

    ``where`` is the entry point that was given them (``"collnb.run"``) and is named in the error.
    The values are checked by :func:`launch` when it runs. This check stops a mistyped option from
    being dropped (an entry point that has a cached answer never launches) or from surfacing later
    as Python's ``launch() got an unexpected keyword argument``.

    Raises:
        TypeError: a name that is not a field of :class:`LaunchOptions`. The message names it and
            lists the options that are passed on.
    """
    unknown = sorted(set(options) - set(LaunchOptions.__annotations__))
    if unknown:
        raise TypeError(_("{where}() got unknown launch options {names}; the options it passes on to "
                          "collnb.launch are {valid}").format(
                              where=where, names=", ".join(map(repr, unknown)),
                              valid=", ".join(LaunchOptions.__annotations__)))
    return cast(LaunchOptions, dict(options))


def backend_info(backend: str) -> BackendFacts:
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


def _backend_facts(backend: str) -> BackendFacts:
    """:func:`backend_info`'s dict plus ``"limit"``: why ``max_world_size`` is below
    :data:`MAX_WORLD_SIZE`, in the words world-size errors use ("" when it is not), from the active
    rank set (the engines' answer while :func:`collnb.connect` is in force)."""
    check_backend(backend)
    return _rank_set.backend_info(backend)


def check_ranks(world_size: object, backend: str = "gloo") -> BackendFacts:
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
    where = _("here") if _rank_set.where == "here" else _("on the connected engines")
    raise RuntimeError(_("backend {backend} cannot run {where}: {reason}").format(
        backend=repr(backend), where=where, reason=info["reason"]))


def _check_request(fn: object, world_size: int, backend: str, start_method: str | None) -> StartMethod | None:
    """Check where and how a launch request would start ranks (raises as :func:`launch` says) and return
    ``start_method``, checked."""
    if current_rank() is not None:
        raise RuntimeError(_(
            "collnb.launch was called inside rank {rank} of a launch: ranks cannot start ranks of "
            "their own (each would leave a pool behind). The function already runs in a process group: use "
            "it (dist.new_group(ranks) for a subgroup), or call collnb.launch from the notebook").format(
                rank=current_rank()))
    if not callable(fn):
        raise TypeError(_("fn must be a function fn(rank, world_size, *args); got {type} {value}").format(
            type=type(fn).__name__, value=repr(fn)))
    check_ranks(world_size, backend)
    if start_method is None:
        if _rank_set is not LOCAL:
            return None  # the engines' own way of starting ranks
        method: str = _default_start_method()
    else:
        method = start_method
    if not _is_start_method(method):
        raise ValueError(_("start_method must be 'fork' or 'spawn' (ranks must be children of this "
                           "process, which forkserver's are not); got {value}").format(value=repr(method)))
    if method == "fork" and backend == "nccl" and _rank_set is LOCAL \
            and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch's is_initialized has no annotations
        raise RuntimeError(_("CUDA is already initialised in this process, and forked ranks cannot use it. "
                             "Restart the kernel and launch before touching CUDA, or pass start_method='spawn'"))
    return None if start_method is None else method


def _is_start_method(value: object) -> TypeGuard[StartMethod]:
    """Whether ``value`` is one of :data:`.rankset.StartMethod`'s choices."""
    return value in ("fork", "spawn")


# ----------------------------------------------------------------------------------------------
# The module-level warm pool

_pool: RankPool | None = None
_pool_guard = threading.Lock()


def _forget_pool() -> None:
    """In a forked child (a rank, or a process the kernel's code forks): the parent's warm pool
    is not the child's to use or to shut down."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def _default_start_method() -> StartMethod:
    """``"fork"`` on Linux (fast, and a cell's function needs no import), else ``"spawn"``."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


def _check_seconds(**values: object) -> None:
    """Check that each keyword's value is a positive, finite number of seconds."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise ValueError(_("{name} must be a positive, finite number of seconds; got {value}").format(
                name=name, value=repr(value)))


def check_flag(name: str, value: object) -> bool:
    """Check a yes/no argument (``debug``, ``record_calls``...) and return it.

    Raises:
        TypeError: not a bool: ``"debug must be True or False; got 'no'"`` (a string such as
            ``"no"`` would otherwise count as true).
    """
    if not isinstance(value, bool):
        raise TypeError(_("{name} must be True or False; got {value}").format(name=name, value=repr(value)))
    return value


def check_call_arguments(args: object, kwargs: object) -> None:
    """Check ``launch``'s ``args`` (a tuple or list of the extra arguments) and ``kwargs`` (a dict
    with str keys, or ``None``).

    Raises:
        TypeError: ``args`` is not a tuple or list (``args="abc"`` would become three arguments:
            pass ``args=("abc",)``), or ``kwargs`` is not a dict of str keys.
    """
    if not isinstance(args, (tuple, list)):
        raise TypeError(_("args must be a tuple (or list) of the extra arguments, e.g. args=({value},) for one; "
                          "got the {type} {value}").format(value=repr(args), type=type(args).__name__))
    if kwargs is not None and (not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs)):
        raise TypeError(_("kwargs must be a dict of keyword arguments (str keys) or None; got {value}").format(
            value=repr(kwargs)))


def _check_signature(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
    """Check that ``fn(rank, world_size, *args, **kwargs)`` binds (TypeError saying how to
    define ``fn`` if not); functions without a signature (some builtins) pass."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: let the rank report it
        return
    try:
        sig.bind(0, 1, *args, **(kwargs or {}))
    except TypeError as exc:
        raise TypeError(_("fn cannot be called as fn(rank, world_size, *args, **kwargs) with {n} extra "
                          "argument(s) and keywords {keywords}: {error}. Define it as def {name}(rank, "
                          "world_size, ...)").format(n=len(args), keywords=sorted(kwargs or {}), error=exc,
                                                     name=getattr(fn, "__name__", "fn"))) from None


def launch(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
           backend: str = "gloo", timeout: float = 60.0, collective_timeout: float = 5.0,
           debug: bool = True, start_method: str | None = None, *, record_calls: bool = False,
           show_backend_log: bool = False, timeline: bool = False, flight_recorder: int = 0) -> list[Any]:
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
            checks per collective: pass ``False`` for benchmarks. collnb's own primitive runs
            (:func:`collnb.run`, the explorer, the backend probe) make the same calls on every
            rank and skip the check on the same warm ranks (:func:`.rank.same_on_every_rank`).
        start_method: ``"fork"`` (default on Linux) or ``"spawn"`` (each rank imports torch
            afresh; needed when CUDA is already initialised here).
        record_calls: also return every communication operation each rank's function issued
            (keyword only; see Returns and :mod:`collnb.ranks.recording`).
        timeline: also return when each communication operation was issued, waited for its last
            rank and completed on every rank, and the regions marked with :func:`collnb.region`
            or ``torch.profiler.record_function``, on one clock (keyword only): the result is a
            :class:`LaunchResults` whose ``.timeline`` is a :class:`.timeline.Timeline` (draw it with
            :func:`collnb.views.timeline_image`, export it with ``.save_chrome_trace(path)``).
            Off by default and then free: nothing is installed in the ranks.
        flight_recorder: entries of torch's Flight Recorder per rank, which collnb then reads
            (keyword only). 0, the default, leaves ``TORCH_FR_BUFFER_SIZE`` unset: torch's own
            default then applies (the recorder on, 2000 entries, since pytorch#142260) and collnb
            reads no entries. Torch reads ``TORCH_FR_BUFFER_SIZE`` once per process, when its first
            process group is made, and warm ranks made theirs already, so a value other than the warm
            pool's starts fresh ranks with ``TORCH_FR_BUFFER_SIZE`` set (see :mod:`collnb.labs.hangs`).
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

    Each call finds its ranks as a fresh script would. After every call, in every rank, collnb puts
    back what the call changed:

    * the process: ``os.environ``, the working directory, ``sys.stdin``/``stdout``/``stderr`` and
      fds 1 and 2, the umask, every signal handler and the signal mask, pending ``signal.alarm``
      and interval timers (cancelled), soft resource limits, priority (``os.nice``), CPU affinity;
    * Python: ``sys.path``, ``sys.meta_path``, ``sys.path_hooks``, ``sys.argv``, the recursion
      limit, the switch interval, the int-to-str digit limit, ``sys``'s and ``threading``'s hooks
      (``excepthook`` & co.) and trace/profile functions, ``warnings`` filters and
      ``showwarning``, the root logger (level, handlers, filters, ``logging.disable``), the
      garbage collector (enabled, thresholds), the default socket timeout;
    * torch: default dtype, grad mode, anomaly detection, deterministic algorithms, default
      device, torch-function and dispatch modes left entered, float32 matmul precision and the
      ``torch.backends.*.fp32_precision`` settings, ``torch.backends.cudnn`` and ``mkldnn`` flags,
      autocast (enabled, dtype, cache), ``set_warn_always``, print options, thread count,
      torch.distributed's debug level; process groups the call made are destroyed (once every rank of
      the call is done with them);
    * random numbers: torch's, Python's ``random`` and numpy's global generators are seeded afresh
      from the OS before every call, as a new script's are (so ranks and calls draw different
      numbers; seed inside the function for repeatable ones);
    * modules: a module of the learner's own ``.py`` files that the call imported is dropped, so
      the next call imports the file as it is then (library modules stay; what the kernel had
      imported before the ranks started is there in every call).

    What cannot be put back **retires the ranks**: a function, class or module replaced, deleted or
    added in ``torch``, ``torch.nn``, ``torch.nn.functional``, ``torch.nn.init``, ``torch.autograd``,
    ``torch.optim``, ``torch.distributed`` (and its submodules collnb uses), ``torch.Tensor``,
    ``torch.nn.Module``, ``numpy``, ``builtins``, ``os``, ``sys`` and the other standard modules
    collnb's ranks rely on, a ``collnb`` module, or a library module an earlier call imported;
    inference mode left on; ``torch.set_num_interop_threads``; a hard resource limit lowered; a
    thread the call started still running. The call's results are returned as usual, and the next
    call (collnb's own ``run``, ``explore``, ``bench`` and checks too) runs on fresh ranks, printing
    one line such as ``[collnb] the last call replaced torch.distributed.all_reduce on rank 2;
    starting fresh ranks``. The full list is in :mod:`collnb.ranks.rank_state`. Processes a
    function starts end with the pool (:func:`shutdown`, or when the kernel exits), also those in
    a session of their own and double-forked daemons (each rank is their child subreaper).

    Raises:
        TypeError / ValueError: bad ``fn``, ``world_size``, ``backend``, ``start_method``, ``args``
            (not a tuple or list), ``kwargs`` (not a dict), ``debug``/``record_calls``/
            ``show_backend_log`` (not a bool) or seconds (checked before any rank starts).
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA), with the reason; or
            ``launch`` was called inside a rank (ranks cannot start ranks).
        RankError: a rank raised, exited, died or never reached a collective; every rank has
            been stopped.
        LaunchTimeout: the call ran past ``timeout``; every rank has been stopped.
        KeyboardInterrupt: re-raised after every rank has been stopped.
    """
    request = check_request(fn, world_size, args, kwargs, backend, timeout, collective_timeout, debug,
                            start_method, record_calls=record_calls, show_backend_log=show_backend_log,
                            timeline=timeline, flight_recorder=flight_recorder)
    return _rank_set.launch(request)


def check_request(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (),
                  kwargs: dict[str, Any] | None = None, backend: str = "gloo", timeout: float = 60.0,
                  collective_timeout: float = 5.0, debug: bool = True, start_method: str | None = None, *,
                  record_calls: bool = False, show_backend_log: bool = False, timeline: bool = False,
                  flight_recorder: int = 0) -> LaunchRequest:
    """Check every argument of a :func:`launch` request against the active rank set, before any rank
    starts, and return it as a :class:`.rankset.LaunchRequest` (seconds as float; ``start_method``
    ``None`` leaves the choice to the rank set: ``"fork"`` here on Linux). The one check of a request, for local ranks and engines alike.

    Raises:
        TypeError / ValueError / RuntimeError: as :func:`launch` says.
        NotImplementedError: an option the active rank set cannot honour (:meth:`.RankSet.refuse`:
            engines refuse ``record_calls``, ``timeline``, ``flight_recorder``, ``show_backend_log``).
    """
    checked_start = _check_request(fn, world_size, backend, start_method)
    check_call_arguments(args, kwargs)
    for name, flag in (("debug", debug), ("record_calls", record_calls), ("show_backend_log", show_backend_log),
                       ("timeline", timeline)):
        check_flag(name, flag)
    if isinstance(flight_recorder, bool) or not isinstance(flight_recorder, int) or flight_recorder < 0:
        raise ValueError(_("flight_recorder must be a number of entries >= 0 (e.g. 200; 0: torch's own default, "
                           "entries not read); got {value}").format(value=repr(flight_recorder)))
    _check_signature(fn, tuple(args), kwargs)
    _check_seconds(timeout=timeout, collective_timeout=collective_timeout)
    request = LaunchRequest(fn, world_size, tuple(args), dict(kwargs or {}), check_backend(backend), float(timeout),
                            float(collective_timeout), debug, checked_start, record_calls, show_backend_log,
                            timeline, int(flight_recorder))
    _rank_set.refuse(request)
    return request


class LocalRanks:
    """The local rank set: :func:`launch` on rank processes forked (or spawned) here, kept warm in
    one module-level :class:`RankPool` between calls (:func:`warm_pool`); a call made while another
    thread uses the warm pool runs on a private pool of its own."""

    where: Where = "here"

    def backend_info(self, backend: str) -> BackendFacts:
        """:func:`.backends.local_backend_info`: this machine's answer."""
        return local_backend_info(backend)

    def refuse(self, request: LaunchRequest) -> None:
        """Local ranks honour every option of a request: refuses nothing."""

    def launch(self, request: LaunchRequest) -> list[Any]:
        """Run ``request`` on the warm pool (see :func:`launch`)."""
        global _pool
        r = request
        key = (r.backend, r.debug, r.collective_timeout, r.start_method or _default_start_method(),
               r.flight_recorder)
        with _pool_guard:
            pool = _pool
            if pool is not None and not pool.broken and pool.lock.acquire(blocking=False):
                try:
                    retired = pool.settle()  # each rank's word on the last call: back as it started?
                    dead = pool.dead_ranks()
                finally:
                    pool.lock.release()
                if retired:
                    # The last call changed these ranks for good (a replaced torch function): never reuse them.
                    sys.stderr.write("[collnb] " + _("{why}; starting fresh ranks").format(why=retired) + "\n")
                    pool.close()
                elif dead and pool.key == key:
                    # A warm rank that died while the pool was idle (OOM killer, a stray kill) is replaced:
                    # the pool starts over instead of failing the next call with a BrokenPipeError.
                    sys.stderr.write("[collnb] " + _("warm rank(s) had died while idle ({ranks}); starting fresh "
                                                     "ranks").format(ranks="; ".join(
                                                         f"rank {k}: {why}" for k, why in sorted(dead.items())))
                                     + "\n")
                    pool.close()
            if pool is None or pool.broken or pool.key != key:
                if pool is not None:
                    pool.close()
                pool = _pool = RankPool(*key)
            private = not pool.lock.acquire(blocking=False)
        if private:
            # Another thread is using the warm pool: run on a private pool of our own.
            own = RankPool(*key)
            try:
                results: list[Any] = own.run(r.fn, r.world_size, r.args, r.kwargs, r.timeout,
                                             record_calls=r.record_calls, show_backend_log=r.show_backend_log,
                                             timeline=r.timeline)
                return results
            finally:
                own.close()
        try:
            results = pool.run(r.fn, r.world_size, r.args, r.kwargs, r.timeout, record_calls=r.record_calls,
                               show_backend_log=r.show_backend_log, timeline=r.timeline)
            return results
        finally:
            pool.lock.release()


#: The local rank set (one per process).
LOCAL = LocalRanks()
#: The active rank set: :data:`LOCAL`, or the engines while :func:`collnb.connect` is in force.
_rank_set: RankSet = LOCAL


def use_rank_set(rank_set: RankSet | None) -> None:
    """Make ``rank_set`` the one :func:`launch`, :func:`backend_info` and :func:`check_ranks` use;
    ``None`` makes the local ranks active again (:func:`collnb.connect` / :func:`collnb.disconnect`)."""
    global _rank_set
    _rank_set = LOCAL if rank_set is None else rank_set


def active_rank_set() -> RankSet:
    """The active rank set (:data:`LOCAL` unless :func:`collnb.connect` is in force)."""
    return _rank_set


#: What :func:`shutdown` also stops, after the warm ranks: other layers' resources that live as long as
#: ranks do (a virtual cluster's ranks and network namespaces: :func:`collnb.labs.cluster.close_all`).
_shutdown_hooks: list[Callable[[], None]] = []


def on_shutdown(fn: Callable[[], None]) -> None:
    """Have :func:`shutdown` call ``fn()`` (once per registration of the same function) after it
    stopped the warm ranks; an exception ``fn`` raises is reported on stderr and does not stop the
    others."""
    if fn not in _shutdown_hooks:
        _shutdown_hooks.append(fn)


def shutdown() -> None:
    """Stop the warm ranks and remove their files (and whatever :func:`on_shutdown` registered: a
    virtual cluster's ranks and namespaces). The next :func:`launch` starts new ones."""
    global _pool
    with _pool_guard:
        if _pool is not None:
            _pool.close()
            _pool = None
    for fn in list(_shutdown_hooks):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one failing hook must not keep the others from running
            sys.stderr.write(f"[collnb] shutdown: {getattr(fn, '__qualname__', fn)} failed: {exc}\n")


def warm_pool() -> RankPool | None:
    """The current warm :class:`RankPool`, or ``None`` (for inspection and tests)."""
    return _pool


atexit.register(shutdown)
