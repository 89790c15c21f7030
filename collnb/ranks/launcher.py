"""Launch real ranks from a Python process or a Jupyter kernel: :func:`launch`, :func:`shutdown`,
:func:`backend_info`, and the active rank set that runs them.

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
* **torch.distributed, checked.** Inside a call, :mod:`collnb.ranks.instrument._dist_hooks` wraps the public
  torch.distributed functions: tensors whose layout gloo misreads get dense copies (results copied
  back), groups and device meshes the function makes get ``collective_timeout``; with
  ``record_calls=True`` :mod:`collnb.ranks.instrument.recording` records every communication operation each
  rank issues (whichever API issued it) as :class:`CallRecord` objects. When the
  DETAIL check finds mismatched collectives, a rank is blamed only if it differs from all the
  others; a timeout error names the timeout that fired; the backend's C++ log lines are attached
  to the error instead of printed.
* **Where each part lives.** The one check of a request in :mod:`.request`; the interface of a set
  of ranks (local, engines, or another kind) in :mod:`.rankset`; local ranks in :mod:`.local` (the
  warm pool, its wait for answers, the ranks' output, process life, the rank's loop), engines in
  :mod:`.remote`; the steps of one call that every kind of rank takes in :mod:`.call`; what a call
  records in :mod:`.instrument`; a fresh script every call in :mod:`.fresh`; the error a learner
  reads in :mod:`.explain`; the messages between launcher and ranks in :mod:`.protocol`, how
  functions and tensors travel in :mod:`.serialization`, torch's private internals in
  :mod:`._torch_internals`.
* **A fresh script every call.** After each call every rank puts back what the call changed
  (environment, streams, signal handlers, torch's global modes, random seeds, ...) and reports what
  it cannot put back (a replaced torch function); those ranks are then retired and the next call
  runs on fresh ones (:mod:`.fresh.rank_state` lists both; :func:`launch` says which).
* **No orphans.** Ranks watch their parent and exit, removing the pool's files, within 0.2 s of
  its death (a killed or restarted kernel); they ignore SIGINT (the kernel
  handles Kernel → Interrupt and stops them); each is the child subreaper of what it starts, so a
  double-forked daemon ends with it. The pool's temporary directory is removed on shutdown, at
  interpreter exit, and swept on the next start if a kernel was killed: a directory counts as
  alive while its pool holds an ``flock`` on it, whatever PID namespace that pool runs in.
"""


from __future__ import annotations

import atexit
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..vocabulary import BACKENDS, MAX_WORLD_SIZE, check_backend
from .local.rankset import LOCAL, shutdown_pool
from .rankset import BackendFacts, LaunchPlan, RankSet
from .request import check_call, check_launch_options, check_plan
from .request import check_ranks as _check_ranks

__all__ = ["launch", "plan_launch", "launch_planned", "shutdown", "on_shutdown", "backend_info", "check_ranks",
           "use_rank_set", "active_rank_set", "MAX_WORLD_SIZE", "BACKENDS"]

#: The active rank set: :data:`.local.rankset.LOCAL`, or another while :func:`use_rank_set` put it in
#: force (the engines, while :func:`collnb.connect` is).
_rank_set: RankSet = LOCAL


def use_rank_set(rank_set: RankSet | None) -> None:
    """Make ``rank_set`` (a :class:`.rankset.RankSet`) the one :func:`launch`, :func:`backend_info`
    and :func:`check_ranks` use; ``None`` makes the local ranks active again (:func:`collnb.connect` /
    :func:`collnb.disconnect` call it; so does any other kind of rank set)."""
    global _rank_set
    _rank_set = LOCAL if rank_set is None else rank_set


def active_rank_set() -> RankSet:
    """The active rank set (:data:`.local.rankset.LOCAL` unless :func:`use_rank_set` made another active)."""
    return _rank_set


def backend_info(backend: str) -> BackendFacts:
    """Tell whether ``backend`` can run here (on the active rank set), without starting any rank.

    Returns:
        ``{"backend": str, "available": bool, "max_world_size": int, "reason": str}``; ``reason``
        says why it cannot run (empty when it can). For NCCL ``max_world_size`` is the visible GPU
        count (NCCL rejects two ranks on one GPU); for Gloo it is :data:`MAX_WORLD_SIZE`.

    Raises:
        TypeError / ValueError: ``backend`` is not one of :data:`BACKENDS`
            (:func:`collnb.vocabulary.check_backend`).
    """
    return {k: v for k, v in _rank_set.backend_info(check_backend(backend)).items() if k != "limit"}


def check_ranks(world_size: object, backend: str = "gloo") -> BackendFacts:
    """Check that ``world_size`` ranks of ``backend`` can run here (on this machine, or on the engines
    while :func:`collnb.connect` is in force) and return :func:`backend_info`'s dict. Every entry point
    that starts ranks checks with this one check (:func:`.request.check_ranks`; :func:`plan_launch`
    makes it too), so the same request gets the same answer everywhere.

    Raises:
        as :func:`.request.check_ranks`.
    """
    return _check_ranks(_rank_set, world_size, backend)


def plan_launch(world_size: object, backend: object = "gloo", options: Mapping[str, object] | None = None, *,
                where: str = "collnb.launch", record_calls: bool = False) -> LaunchPlan:
    """Check a launch an entry point will make (``where``, e.g. ``"collnb.run"``, named in errors)
    once, before it does anything else: ``world_size`` ranks of ``backend`` on the active rank set,
    with the :class:`.request.LaunchOptions` ``options`` its caller passed through (names, then
    values). Returns the :class:`.rankset.LaunchPlan` that :func:`launch_planned` runs.
    ``record_calls``: the entry point's own choice, as :func:`launch`'s (not a learner's option).

    Raises:
        as :func:`.request.check_launch_options` and :func:`.request.check_plan`.
    """
    opts = check_launch_options(options or {}, where)
    return check_plan(_rank_set, world_size, backend, **opts, record_calls=record_calls)


def launch_planned(plan: LaunchPlan, fn: Callable[..., Any], args: Sequence[Any] = (),
                   kwargs: dict[str, Any] | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args, **kwargs)`` as ``plan`` (from :func:`plan_launch` or
    :func:`launch`'s own check) says, on the rank set it was checked against; returns and raises
    as :func:`launch` (the function and its arguments are checked here: :func:`.request.check_call`)."""
    return plan.rank_set.launch(check_call(plan, fn, args, kwargs))


def launch(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
           backend: str = "gloo", timeout: float = 60.0, collective_timeout: float = 5.0,
           debug: bool = True, start_method: str | None = None, *, record_calls: bool = False,
           show_backend_log: bool = False, timeline: bool = False, flight_recorder: int = 0) -> list[Any]:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` real ranks.

    Each rank is a process started through :mod:`torch.multiprocessing`, already inside an
    initialised default process group of ``backend`` (``dist.get_rank()`` and
    ``dist.get_world_size()`` work). With NCCL, rank ``r`` uses ``cuda:r``. Ranks stay warm
    between calls (see :class:`.local.pool.RankPool`); their stdout/stderr lines appear here as they are
    printed, prefixed ``[rank r]``.

    Args:
        fn: a function ``fn(rank: int, world_size: int, *args, **kwargs)``; may be defined in a
            notebook cell or be a closure (it is shipped with cloudpickle).
        world_size: number of ranks, 1..:data:`MAX_WORLD_SIZE` (for NCCL at most the GPU count).
        args, kwargs: extra arguments, pickled to every rank.
        backend: ``"gloo"`` or ``"nccl"``.
        timeout: seconds the whole call may take before :class:`LaunchTimeout`: forking new ranks
            and making their process group included; ranks started with ``start_method="spawn"``
            (each imports torch) and a virtual cluster's ranks are waited for first, up to
            :data:`collnb.ranks.local.processes.START_TIMEOUT_S` (300 s), and the call's time starts
            once every one is up.
        collective_timeout: seconds a rank waits in a collective for a missing peer before it
            fails (the process group's timeout; gloo's own default is 30 minutes).
        debug: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` in the ranks, so a rank that calls a different
            collective, shape or dtype than its peers fails with a clear message. Costs extra
            checks per collective: pass ``False`` for benchmarks. collnb's own primitive runs
            (:func:`collnb.run`, the explorer, the backend probe) make the same calls on every
            rank and skip the check on the same warm ranks (:func:`.call.groups.same_on_every_rank`).
        start_method: ``"fork"`` (default on Linux) or ``"spawn"`` (each rank imports torch
            afresh; needed when CUDA is already initialised here).
        record_calls: also return every communication operation each rank's function issued
            (keyword only; see Returns and :mod:`collnb.ranks.instrument.recording`).
        timeline: also return when each communication operation was issued, waited for its last
            rank and completed on every rank, and the regions marked with :func:`collnb.region`
            or ``torch.profiler.record_function``, on one clock (keyword only): the result is a
            :class:`LaunchResults` whose ``.timeline`` is a :class:`.instrument.timeline.Timeline` (draw it with
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
    :mod:`collnb.ranks.instrument._dist_hooks`): tensors whose layout gloo misreads (non-contiguous or expanded,
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
    starting fresh ranks``. The full list is in :mod:`collnb.ranks.fresh.rank_state`. Processes a
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
    plan = check_plan(_rank_set, world_size, backend, timeout, collective_timeout, debug, start_method,
                      record_calls=record_calls, show_backend_log=show_backend_log, timeline=timeline,
                      flight_recorder=flight_recorder)
    return launch_planned(plan, fn, args, kwargs)


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
    """Stop the warm ranks and remove their files, then whatever :func:`on_shutdown` registered (a
    virtual cluster's ranks and network namespaces). The next :func:`launch` starts new ones."""
    shutdown_pool()
    for fn in list(_shutdown_hooks):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one failing hook must not keep the others from running
            sys.stderr.write(f"[collnb] shutdown: {getattr(fn, '__qualname__', fn)} failed: {exc}\n")


atexit.register(shutdown)
