"""The rank side: the main loop of one rank process.

A rank starts (:func:`rank_main`) by cutting itself loose from the parent (its own process group,
a watchdog on the parent, inherited sockets closed, stdout/stderr to the parent's pipes, a child
subreaper so that processes its function starts cannot escape it), then serves commands
(:mod:`.protocol`) until the parent closes its command pipe: initialise the pool's default process
group, create a cached subgroup, or run the learner's function. Each call finds the rank as a
fresh script would: :class:`.rank_state.RankState` puts back what a call changed (environment,
streams, torch's global modes, ...; its docstring lists them), process groups the call made are
destroyed (once every rank of the call is done with them), and a change that cannot be put back
(a replaced torch function) is reported in the :class:`.Result` so that the launcher retires the
rank. After a failure the rank reports it and idles until the parent stops it.
"""

from __future__ import annotations

import datetime
import faulthandler
import io
import os
import shutil
import signal
import sys
import time
import traceback
import ctypes
import dataclasses
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, NoReturn, NotRequired, TypedDict, TypeVar, Union, cast

import torch
import torch.distributed as dist

from ...i18n import set_language
from ...vocabulary import Backend
from ..instrument import _dist_hooks, recording, timeline
from .. import _torch_internals as internals
from ..instrument.flight_recorder import entries_from_json
from .processes import exit_group, on_sigterm, register_fork_hooks, watch_parent
from ..protocol import Failed, InitGroup, NewGroup, Ready, Result, Run, Settled, receive, send
from ..fresh.rank_state import RankState, Watch, collnb_only
from ..serialization import Unsendable, dumps, loads, restore_files, to_cpu
from ..explain.tracebacks import frames_of, is_comm_error

if TYPE_CHECKING:  # types only: rank.py does not import the rank-set layer
    from ..rankset import StartMethod

__all__ = ["rank_main", "restore_environment", "current_rank", "resolve_rank_names", "keep_groups", "kept_groups",
           "same_on_every_rank", "runs_unchecked"]

#: This process's rank while it is a rank of a local pool (or a process a rank's function forked),
#: else ``None``: :func:`collnb.launch` refuses to start ranks of ranks.
_current_rank: int | None = None

_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


class RankConfig(TypedDict):
    """What a rank of a local pool is told when it starts (:meth:`.pool.RankPool._fork_ranks` makes it;
    :func:`rank_main` adds ``rank_pid``, its own PID, for :func:`.processes.on_sigterm`).

    Attributes:
        dir: the pool's private directory (its FileStore, the ranks' stack files).
        backend: ``"gloo"`` or ``"nccl"``.
        debug: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (else ``OFF``).
        ifname: the network interface Gloo and NCCL bind to (``"lo"``).
        start_method: ``"fork"`` or ``"spawn"``.
        flight_recorder: ``TORCH_FR_BUFFER_SIZE`` (entries; 0 leaves it unset).
        collective_timeout: the process groups' timeout, in seconds.
        parent_pid: the launcher's PID (the rank's watchdog watches it).
        watch: what the rank watches between calls, made in the launcher for forked ranks, else ``None``.
    """

    dir: str
    backend: Backend
    debug: bool
    ifname: str
    start_method: StartMethod
    flight_recorder: int
    collective_timeout: float
    parent_pid: int
    watch: Watch | None
    rank_pid: NotRequired[int]


#: Process groups that calls of collnb's own code made and later calls reuse (:func:`keep_groups`).
_kept: set[dist.ProcessGroup] = set()

_Fn = TypeVar("_Fn", bound=Callable[..., Any])
#: A cached group as ``new_group`` gives it: a ``ProcessGroup``, or ``GroupMember.NON_GROUP_MEMBER``
#: (the int -100) on a rank of the pool outside it.
_Group = Union[dist.ProcessGroup, int]


def keep_groups(groups: Iterable[dist.ProcessGroup]) -> None:
    """Keep the process groups ``groups`` (an iterable of ``ProcessGroup``) after this call ends.

    Process groups a call makes are destroyed after it, as a fresh script's end with it. A call
    of collnb's own code only (:func:`collnb.ranks.rank_state.collnb_only`) may keep the groups
    it made for its later calls to reuse: :func:`collnb.redistribute` keeps its ``DeviceMesh``'s
    (making a 2x2 mesh costs ~50 ms of a ~150 ms explorer move). Every rank of the call must keep
    the same groups, so that every rank's next call finds the same ones. Asked by a learner's
    function, this is ignored: its groups end with its call. Kept groups end when the pool's
    default group is made again (a pool that grows or is restarted)."""
    _kept.update(groups)


def same_on_every_rank(fn: _Fn) -> _Fn:
    """Mark ``fn``, a rank function of collnb's own code, as issuing the same collectives, with the
    same shapes and dtypes, in the same order on every rank, by construction (the primitive runs of
    :func:`collnb.run` and the explorer, the backend probe). Returns ``fn``.

    ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (``launch(debug=True)``, the default) wraps every process
    group in torch's ``ProcessGroupWrapper``, which checks each collective's fingerprint against
    every peer's before it runs: it turns a learner's mismatched collectives into a clear error, and
    it costs a second round of communication per collective (a 16-float gloo all_reduce at world
    size 8 on 2 cores: ~24 ms without it, ~55 ms with it, measured with torch 2.13). A marked
    function has nothing for the check to find, so a warm rank runs it on a group of the same ranks
    made without the wrapper (the same backend, a group of its own). The mark is honoured only when
    the call is collnb's own code throughout (:func:`.rank_state.collnb_only`): a learner's function
    is always checked, whatever it carries (:func:`runs_unchecked`)."""
    fn.collnb_same_on_every_rank = True  # type: ignore[attr-defined]  # a mark on the function object; Callable names no attributes
    return fn


def runs_unchecked(fn: Callable[..., Any], args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None) -> bool:
    """Whether a call of ``fn(rank, world_size, *args, **kwargs)`` may run without DETAIL's check:
    ``fn`` is marked :func:`same_on_every_rank` and the call is collnb's own code throughout
    (:func:`.rank_state.collnb_only`: no argument holds a learner's function or class)."""
    return getattr(fn, "collnb_same_on_every_rank", False) is True and collnb_only(fn, args, kwargs)


def _unchecked_group(world_size: int, timeout: datetime.timedelta) -> _Group:
    """A new group of ranks ``0..world_size-1`` made without DETAIL's ``ProcessGroupWrapper``
    (torch decides when a group is made: ``get_debug_level() == DebugLevel.DETAIL``); every rank of
    the pool's default group must call it, as ``new_group`` needs. The debug level is the
    environment's again afterwards. Made on the first call that needs it (:class:`.NewGroup`
    ``unchecked``), so a pool that runs only learners' functions makes none."""
    dist.set_debug_level(dist.DebugLevel.OFF)
    try:
        return cast("_Group", dist.new_group(list(range(world_size)), timeout=timeout))  # torch leaves it untyped
    finally:
        dist.set_debug_level_from_env()


def kept_groups() -> frozenset[dist.ProcessGroup]:
    """The process groups kept for later calls (:func:`keep_groups`) that still exist (ipyparallel
    engines destroy every group a call made: there, a kept group is gone by the next call)."""
    _kept.intersection_update(internals.live_groups())
    return frozenset(_kept)


def _end_together(store: dist.Store, msg: Run, rank: int, made: set[dist.ProcessGroup],
                  collective_timeout: float) -> None:
    """Destroy the process groups ``made`` that this call made, once every rank of the call is done
    with them. A call that made groups with ``new_group`` advanced torch's group counter on every
    rank of it, members of the groups or not (measured): each such rank says it is done in the
    pool's store (key ``ended<group_count>/<rank>``), and a rank with groups to destroy waits for
    every rank's key, for at most half the collective timeout. Destroyed at once, a rank whose
    function returned closed its side of a group that a slower peer was still connecting (gloo's
    ``connectFullMesh``: "Connection closed by peer", 6 launches in 300 of a function that only
    makes a 2x2 DeviceMesh, measured; 0 in 300 with the wait). A peer that never comes (it waits in
    a collective this rank skipped) stops waiting when the groups close, well before its collective
    timeout (issue 25's words name that). Groups made with ``use_local_synchronization=True`` (no
    counter advanced) are destroyed at once; calls that made no groups pay nothing."""
    together = internals.group_count() != msg.group_count
    prefix = f"ended{msg.group_count}/"
    if together:
        try:
            store.set(f"{prefix}{rank}", "1")
            if made:
                store.wait([f"{prefix}{r}" for r in range(msg.world_size)],
                           datetime.timedelta(seconds=collective_timeout / 2))
        except Exception:  # noqa: BLE001 - a peer that never came (or a store that is gone): end them now
            pass
    for g in made:
        dist.destroy_process_group(g)


def current_rank() -> int | None:
    """The rank this process serves (int), or ``None`` outside a local rank."""
    return _current_rank


def _become_subreaper() -> None:
    """Make this rank the reaper of its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``): a
    process its function starts that double-forks and ``setsid()``s (a daemon) is re-parented to the
    rank instead of init, so the pool still finds it, and ends it, at shutdown. Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def rank_main(rank: int, cfg: RankConfig, cmd_r: Connection, res_w: Connection, out_w: Connection,
              err_w: Connection, close_fds: list[int]) -> NoReturn:
    """Entry point of a rank process. Never returns: ends with ``os._exit``."""
    global _current_rank
    code = 0
    _current_rank = rank
    try:
        # Our own process group: a kernel manager that kills the kernel's group on shutdown
        # would otherwise kill us before we remove our files. The watchdog ends us instead.
        os.setpgid(0, 0)
        watch_parent(cfg["parent_pid"], cfg["dir"])
        cfg = {**cfg, "rank_pid": os.getpid()}
        signal.signal(signal.SIGTERM, lambda *_: on_sigterm(cfg))
        register_fork_hooks()  # processes the rank forks die of SIGTERM as usual
        _become_subreaper()
        if cfg["start_method"] == "fork":
            # A forked rank inherits every descriptor of its parent. Close the parent's ends of
            # other ranks' pipes (they would hide EOFs) and every inherited socket (in a kernel,
            # Jupyter's own). Other pipes stay: multiprocessing's liveness sentinel is one.
            keep = {cmd_r.fileno(), res_w.fileno(), out_w.fileno(), err_w.fileno()}
            inherited = set(close_fds)
            fd: str | int  # a name in /proc/self/fd, then a descriptor to close
            try:
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                            inherited.add(int(fd))
                    except OSError:
                        pass
            except OSError:
                pass
            for fd in inherited - keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel stops us on Kernel -> Interrupt
        os.dup2(out_w.fileno(), 1)
        os.dup2(err_w.fileno(), 2)
        out_w.close()
        err_w.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", line_buffering=True, write_through=True)
        stack_file = open(os.path.join(cfg["dir"], f"stack-{rank}.txt"), "w")
        err_stream = sys.stderr

        def arm_faulthandler() -> None:
            """SIGUSR1 writes the rank's stack for the launcher; a crashing rank shows its stack."""
            faulthandler.unregister(signal.SIGUSR1)
            faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
            faulthandler.disable()
            faulthandler.enable(file=err_stream, all_threads=False)

        arm_faulthandler()
        torch.set_num_threads(1)
        restore_environment(cfg["ifname"], cfg["debug"], cfg["flight_recorder"])
        store = dist.FileStore(os.path.join(cfg["dir"], "store"), -1)
        resolve_rank_names()
        state = RankState(own_process=True, rearm=arm_faulthandler, watch=cfg.get("watch"))  # every call starts so
        _rank_loop(rank, cfg, store, cmd_r, res_w, state)
    except BaseException:  # noqa: BLE001 - report anything that kills the loop itself
        code = 1
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - stderr gone too: the exit code still says it
            pass
    finally:
        _fflush_c()
        os._exit(code)


def _rank_loop(rank: int, cfg: RankConfig, store: dist.Store, cmd_r: Connection, res_w: Connection,
               state: RankState) -> NoReturn:
    backend = cfg["backend"]
    timeout = datetime.timedelta(seconds=cfg["collective_timeout"])
    base: dist.ProcessGroup | None = None  # the pool's default process group (all ranks of the pool)
    groups: dict[int, _Group | None] = {}  # world size k -> cached group of ranks 0..k-1
    unchecked: dict[int, _Group] = {}  # world size k -> the same ranks without DETAIL's wrapper (see same_on_every_rank)
    while True:
        try:
            msg = receive(cmd_r)
        except EOFError:  # the parent is gone (or closed the pool): leave nothing behind
            shutil.rmtree(cfg["dir"], ignore_errors=True)
            exit_group()
        if isinstance(msg, InitGroup):
            t0 = time.perf_counter()
            internals.destroy_all_groups(base)
            _kept.clear()
            base, groups, unchecked = None, {}, {}
            # a function may have changed GLOO_SOCKET_IFNAME & co.
            restore_environment(cfg["ifname"], cfg["debug"], cfg["flight_recorder"])
            if rank < msg.world_size:
                try:
                    if backend == "nccl":
                        torch.cuda.set_device(rank)
                    dist.init_process_group(backend, store=dist.PrefixStore(f"gen{msg.generation}", store),
                                            rank=rank, world_size=msg.world_size, timeout=timeout)
                except Exception as exc:  # noqa: BLE001 - reported like a failure of the function
                    _report_error(res_w, exc, rank)
                    _idle_forever()
                base = dist.group.WORLD
                groups = {msg.world_size: base}
            send(res_w, Ready(time.perf_counter() - t0))
        elif isinstance(msg, NewGroup):
            # A cached group of ranks 0..k-1; every rank of the pool takes part, as new_group needs.
            t0 = time.perf_counter()
            internals.set_default_group(base)
            internals.set_group_count(msg.group_count)
            if msg.unchecked:
                unchecked[msg.world_size] = _unchecked_group(msg.world_size, timeout)
            else:
                groups[msg.world_size] = dist.new_group(list(range(msg.world_size)), timeout=timeout)
            send(res_w, Ready(time.perf_counter() - t0))
        elif isinstance(msg, Run):
            _run(rank, cfg, msg, base, groups, unchecked, state, res_w, store)


def _run(rank: int, cfg: RankConfig, msg: Run, base: dist.ProcessGroup | None,
         groups: dict[int, _Group | None], unchecked: dict[int, _Group], state: RankState,
         res_w: Connection, store: dist.Store) -> None:
    """Run the learner's function for one :class:`.Run` and answer :class:`.Result`; on a failure
    answer :class:`.Failed` and idle until the parent stops the rank. ``groups``/``unchecked``: the
    pool's cached groups by world size, with and without DETAIL's checks (:func:`same_on_every_rank`)."""
    global _call_started_ns
    _call_started_ns = time.time_ns()
    my_pid = os.getpid()
    # Groups the user's function creates are named from this counter: start every rank of this
    # call at the same value, whatever groups earlier calls made on some ranks.
    internals.set_group_count(msg.group_count)
    # Ranks 0..k-1 see the cached group as their default process group, so
    # dist.get_world_size() == k and collectives without group= use it; collnb's own primitive
    # runs use the same ranks without DETAIL's per-collective check (same_on_every_rank).
    default = (unchecked if msg.unchecked else groups)[msg.world_size]
    if dist.group.WORLD is not default:
        internals.set_default_group(default)
    # The kernel's language now, not the one this rank was forked with (warm ranks outlive a
    # collnb.set_language); this also sets COLLNB_LANG here, for what the function starts.
    set_language(msg.language)
    fn, args = None, ()  # named in an error even when the task does not load
    try:
        # torch.distributed's functions, wrapped for this call only: layouts gloo misreads are
        # given dense copies and groups the function makes get collective_timeout (see
        # collnb.ranks._dist_hooks); when asked, every operation the function issues is recorded
        # where torch dispatches it (collnb.ranks.recording).
        _dist_hooks.install(check_layout=True, group_timeout=cfg["collective_timeout"])
        fn, args, kwargs, files = loads(msg.task)
        restore_files(fn, files)
        before = internals.live_groups()
        kept = set(_kept)
        calls = events = collector = None
        try:
            # Groups the function creates keep their rendezvous keys under a prefix of this
            # call's own, so a re-run (same group names: hashed from ranks) starts clean.
            with internals.call_store(f"call{msg.group_count}/"):
                state.begin_call()
                if msg.record_calls or msg.timeline:
                    recorder = recording.start()
                    if msg.timeline:
                        collector = timeline.start(recorder)
                result = fn(rank, msg.world_size, *args, **kwargs)
        finally:
            if collector is not None:
                events = timeline.stop(collector)
            if msg.record_calls or msg.timeline:
                calls = recording.stop()
                if not msg.record_calls:
                    calls = None
            _dist_hooks.pause()
            if os.getpid() == my_pid:
                state.restore_essentials()  # what answering needs: the streams, fds 1 and 2, the stack
        if os.getpid() != my_pid:  # a process the function forked returned into our loop
            _leave_forked_child(0)
        if cfg["backend"] == "nccl":
            torch.cuda.synchronize()
        try:
            payload = dumps(to_cpu(result))
        except Unsendable as exc:
            raise TypeError(f"rank {rank}'s function returned {exc}") from None
        except Exception as exc:
            raise TypeError(
                f"rank {rank}'s function returned a {type(result).__name__} that cannot be sent back "
                f"to the launcher ({type(exc).__name__}: {exc}). Return tensors, numbers, strings, "
                f"or lists/tuples/dicts of them; wait on Work handles (work.wait()) inside the "
                f"function instead of returning them") from exc
        seq = internals.sequence_number()
        live = internals.live_groups()
        intact = dist.is_initialized() and all(g in live for g in (*groups.values(), *unchecked.values())
                                               if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER)
        own = collnb_only(fn, args, kwargs)
        if not own:  # only collnb's own code keeps groups (keep_groups)
            _kept.intersection_update(kept)
        _kept.intersection_update(live)
        if intact:  # groups the function made end with the call, as in a fresh script
            _end_together(store, msg, rank, live - before - _kept, cfg["collective_timeout"])
        sys.stdout.flush(), sys.stderr.flush(), _fflush_c()  # type: ignore[func-returns-value]  # flushed for their effect
        send(res_w, _with_flight_recorder(Result(payload, seq, intact, calls, timeline=events)))
        # The rest of a fresh start, after the answer (the launcher draws it meanwhile), and what
        # the call changed that cannot be put back: the launcher reads it before the next command.
        # A call of collnb's own code only (collnb.run, explore, bench) changes nothing to put back.
        if not own:
            state.restore()
            send(res_w, Settled(state.retire_reason()))
        else:
            send(res_w, Settled(""))
    except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are rank failures too
        timeline.stop_quietly()
        recording.stop()
        _dist_hooks.pause()
        if os.getpid() != my_pid:  # a process the function forked raised or exited
            if isinstance(exc, SystemExit):
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            else:
                code = 1
                traceback.print_exc()
            _leave_forked_child(code)
        _explain(exc, fn, args, msg.world_size)
        _report_error(res_w, exc, rank)
        _idle_forever()


_INIT_TWICE = "trying to initialize the default process group twice"


def _explain(exc: BaseException, fn: object, args: Iterable[Any], world_size: int) -> None:
    """Add what to do to an error a learner gets for code written for a plain script: the PyTorch
    tutorial's ``init_process(rank, size, fn)`` calls ``init_process_group``, which collnb has
    already called when the function starts."""
    if isinstance(exc, (RuntimeError, ValueError)) and _INIT_TWICE in str(exc):
        work = next((a for a in args if callable(a)), None)
        name = getattr(work, "__name__", None) or "your_function"
        exc.args = (f"{exc} collnb has already initialised the default process group (backend, rank "
                    f"and world size set) before it calls {getattr(fn, '__name__', 'the function')}, "
                    f"so a function for collnb.launch must not call dist.init_process_group (nor set "
                    f"MASTER_ADDR/MASTER_PORT). Launch the function that does the work: "
                    f"collnb.launch({name}, {world_size})",) + exc.args[1:]


def resolve_rank_names() -> None:
    """Load the public names of ``collnb`` that a learner's function calls inside a rank
    (``collnb.region``) before the rank's state is watched: ``collnb``'s module ``__getattr__``
    caches a name in the package's namespace the first time it is used, which a call must not be
    the first to do (it would count as a change of a collnb module, and retire the ranks)."""
    package = sys.modules.get("collnb")
    if package is not None:
        for name in ("region",):
            getattr(package, name, None)


def restore_environment(ifname: str, debug: bool, flight_recorder: int = 0) -> None:
    """Bind Gloo and NCCL to the interface ``ifname``, set the debug level (``debug``:
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, else ``OFF``) and the Flight Recorder's buffer
    (``flight_recorder`` entries, when not 0). A local rank passes its :class:`RankConfig`'s values,
    an engine its ``EngineConfig``'s (:mod:`.engines`; an engine has no Flight Recorder setting)."""
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    os.environ["NCCL_SOCKET_IFNAME"] = ifname
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL" if debug else "OFF"
    if flight_recorder:  # read by torch when a process group is made (launch(flight_recorder=N))
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(flight_recorder)
    dist.set_debug_level_from_env()


def _leave_forked_child(code: int) -> NoReturn:
    """End a process the learner's function forked that came back into the rank's loop: it must
    not answer the launcher for the rank."""
    try:
        sys.stdout.flush(), sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


def _report_error(res_w: Connection, exc: BaseException, rank: int) -> None:
    """Send a rank's exception to the launcher: type, message, frames, whether it is a
    communication error (a consequence of another rank's failure)."""
    sys.stdout.flush(), sys.stderr.flush(), _fflush_c()  # type: ignore[func-returns-value]  # flushed for their effect
    _dist_hooks.name_unmeasured(exc)  # which timeout ended a wait no wrapper measured
    msg = Failed.from_exception(exc, rank, frames_of(exc.__traceback__), is_comm_error(exc))
    send(res_w, _with_flight_recorder(msg))


_Answer = TypeVar("_Answer", Result, Failed)
_call_started_ns = 0  # time.time_ns() when the current call began (the Flight Recorder's clock)


def _with_flight_recorder(msg: _Answer) -> _Answer:
    """``msg`` (:class:`Result` or :class:`Failed`) with this call's Flight Recorder entries, when the
    launch has ``flight_recorder=N``: the launcher names the rank whose collectives diverged. Entries
    of earlier calls are left out (``time_created_ns`` is wall-clock ns, torch's ``c10::getTime``). The
    call's default group (at a world size below the pool's, a cached group of ranks 0..k-1 that is
    ``dist.group.WORLD`` inside the call, described ``"undefined"`` by torch) is described ``"default_pg"``."""
    if os.environ.get("TORCH_FR_BUFFER_SIZE", "0") in ("", "0"):
        return msg
    try:
        entries = entries_from_json(internals.flight_recorder_json())
        world = dist.group.WORLD.group_name if dist.is_initialized() and dist.group.WORLD is not None else None
    except Exception:  # noqa: BLE001 - no dump: the launcher falls back to what the messages say
        return msg
    kept = []
    for e in entries:
        if (e.get("time_created_ns") or 0) >= _call_started_ns:
            if world is not None and e["process_group"][0] == world:
                e["process_group"] = (world, "default_pg")
            kept.append(e)
    return dataclasses.replace(msg, flight_recorder=kept)


def _idle_forever() -> NoReturn:
    """Stay alive and idle after a failure: the launcher stops every rank, so peers blocked in a
    collective do not pile "connection closed" errors on top of the root cause."""
    while True:
        time.sleep(3600)


_libc: ctypes.CDLL | None = None


def _fflush_c() -> None:
    """Flush C stdio buffers (output printed by C/C++ code in the rank)."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except Exception:  # noqa: BLE001 - no C library to flush: nothing was buffered there
        pass
