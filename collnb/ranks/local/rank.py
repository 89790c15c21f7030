"""The rank side of local ranks: the main loop of one rank process.

A rank starts (:func:`rank_main`) by cutting itself loose from the parent (its own process group,
a watchdog on the parent, inherited sockets closed, stdout/stderr to the parent's pipes, a child
subreaper so that processes its function starts cannot escape it), then serves commands
(:mod:`..protocol`) until the parent closes its command pipe: initialise the pool's default process
group, create a cached subgroup, or run the learner's function (:func:`_run`: the steps of
:class:`..call.steps.Call`, which engines take too). Each call finds the rank as a fresh script
would: :class:`..fresh.rank_state.RankState` puts back what a call changed (environment, streams,
torch's global modes, ...; its docstring lists them) after the rank answered, process groups the
call made are destroyed (once every rank of the call is done with them), and a change that cannot
be put back (a replaced torch function) is reported in a :class:`..protocol.Settled` so that the
launcher retires the rank. After a failure the rank reports it and idles until the parent stops it.
"""

from __future__ import annotations

import ctypes
import datetime
import faulthandler
import io
import logging
import os
import shutil
import signal
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import NoReturn, NotRequired, TypedDict

import torch
import torch.distributed as dist

from .. import _torch_internals as internals
from ..call.groups import Group, forget_kept_groups, unwrapped_group
from ..call.steps import Call, failure, flush_output, resolve_rank_names, restore_environment, serve
from ..fresh.rank_state import RankState, Watch
from ..protocol import InitGroup, NewGroup, Ready, Run, Settled, receive, send
from ..rankset import RankSetup
from .processes import exit_group, mark_up, on_sigterm, register_fork_hooks, watch_parent

__all__ = ["rank_main", "RankConfig"]

_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


class RankConfig(TypedDict):
    """What a rank of a local pool is told when it starts (:meth:`.pool.RankPool._fork_ranks` makes it;
    :func:`rank_main` adds ``rank_pid``, its own PID, for :func:`.processes.on_sigterm`).

    Attributes:
        dir: the pool's private directory (its FileStore, the ranks' stack files).
        setup: how the pool's groups are made (:class:`..rankset.RankSetup`: backend, debug,
            collective timeout, start method, Flight Recorder entries).
        ifname: the network interface Gloo and NCCL bind to (``"lo"``).
        parent_pid: the launcher's PID (the rank's watchdog watches it).
        watch: what the rank watches between calls, made in the launcher for forked ranks, else ``None``.
    """

    dir: str
    setup: RankSetup
    ifname: str
    parent_pid: int
    watch: Watch | None
    rank_pid: NotRequired[int]


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
    code = 0
    serve(rank)
    try:
        # Our own process group: a kernel manager that kills the kernel's group on shutdown
        # would otherwise kill us before we remove our files. The watchdog ends us instead.
        os.setpgid(0, 0)
        watch_parent(cfg["parent_pid"], cfg["dir"])
        cfg = {**cfg, "rank_pid": os.getpid()}
        signal.signal(signal.SIGTERM, lambda *_: on_sigterm(cfg))
        register_fork_hooks()  # processes the rank forks die of SIGTERM as usual
        _become_subreaper()
        if cfg["setup"].start_method == "fork":
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
        parent_streams = (sys.stdout, sys.stderr)
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", line_buffering=True, write_through=True)
        repoint_log_handlers(parent_streams, (sys.stdout, sys.stderr))
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
        mark_up(cfg["dir"], rank)  # started; under spawn, torch and collnb were imported before rank_main
        restore_environment(cfg["ifname"], cfg["setup"].debug, cfg["setup"].flight_recorder)
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
        flush_output()
        os._exit(code)


def _rank_loop(rank: int, cfg: RankConfig, store: dist.Store, cmd_r: Connection, res_w: Connection,
               state: RankState) -> NoReturn:
    setup = cfg["setup"]
    timeout = datetime.timedelta(seconds=setup.collective_timeout)
    base: dist.ProcessGroup | None = None  # the pool's default process group (all ranks of the pool)
    groups: dict[int, Group | None] = {}  # world size k -> cached group of ranks 0..k-1
    unwrapped: dict[int, Group] = {}  # world size k -> the same ranks without DETAIL's wrapper (call.groups)
    while True:
        try:
            msg = receive(cmd_r)
        except EOFError:  # the parent is gone (or closed the pool): leave nothing behind
            shutil.rmtree(cfg["dir"], ignore_errors=True)
            exit_group()
        if isinstance(msg, InitGroup):
            t0 = time.perf_counter()
            internals.destroy_all_groups(base)
            forget_kept_groups()
            base, groups, unwrapped = None, {}, {}
            # a function may have changed GLOO_SOCKET_IFNAME & co.
            restore_environment(cfg["ifname"], setup.debug, setup.flight_recorder)
            if rank < msg.world_size:
                try:
                    if setup.backend == "nccl":
                        torch.cuda.set_device(rank)
                    dist.init_process_group(setup.backend, store=dist.PrefixStore(f"gen{msg.generation}", store),
                                            rank=rank, world_size=msg.world_size, timeout=timeout)
                except Exception as exc:  # noqa: BLE001 - reported like a failure of the function
                    send(res_w, failure(exc, rank))
                    _idle_forever()
                base = dist.group.WORLD
                groups = {msg.world_size: base}
            send(res_w, Ready(time.perf_counter() - t0))
        elif isinstance(msg, NewGroup):
            # A cached group of ranks 0..k-1; every rank of the pool takes part, as new_group needs.
            t0 = time.perf_counter()
            internals.set_default_group(base)
            internals.set_group_count(msg.group_count)
            if msg.unwrapped:
                unwrapped[msg.world_size] = unwrapped_group(msg.world_size, timeout)
            else:
                groups[msg.world_size] = dist.new_group(list(range(msg.world_size)), timeout=timeout)
            send(res_w, Ready(time.perf_counter() - t0))
        elif isinstance(msg, Run):
            group = (unwrapped if msg.unwrapped else groups)[msg.world_size]
            _run(Call(rank, msg, group, setup.backend, setup.collective_timeout),
                 [*groups.values(), *unwrapped.values()], state, res_w, store)


def _run(call: Call, cached: list[Group | None], state: RankState, res_w: Connection, store: dist.Store) -> None:
    """One :class:`..protocol.Run`: run the call, end its groups, answer its :class:`..protocol.Result`,
    then put the rank back as it started and say so (:class:`..protocol.Settled`: what could not be
    put back); on a failure answer :class:`..protocol.Failed` and idle until the parent stops the rank.
    A call of collnb's own code only (collnb.run, explore, bench) changes nothing to put back."""
    try:
        result = call.run(cached, before=state.begin_call, after=state.restore_essentials)
        own = call.own()
        if result.intact:  # groups the function made end with the call, as in a fresh script
            call.end_groups(store, own)
        flush_output()
        send(res_w, result)
        # The rest of a fresh start, after the answer (the launcher draws it meanwhile).
        if not own:
            state.restore()
        send(res_w, Settled("" if own else state.retire_reason()))
    except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are rank failures too
        send(res_w, call.failed(exc))
        _idle_forever()


def _idle_forever() -> NoReturn:
    """Stay alive and idle after a failure: the launcher stops every rank, so peers blocked in a
    collective do not pile "connection closed" errors on top of the root cause."""
    while True:
        time.sleep(3600)


def repoint_log_handlers(inherited: tuple[object, object], streams: tuple[object, object]) -> None:
    """Point every logging handler that writes to the parent's ``sys.stdout``/``sys.stderr``
    (``inherited``) at this rank's own (``streams``, the pipes the launcher relays to the calling cell).

    Handlers made before the fork keep the parent's stream objects: torch gives its loggers a
    ``StreamHandler`` on ``sys.stderr`` when it is imported (torch's logging setup, ``TORCH_LOGS``), in a notebook an
    ipykernel ``OutStream``, which sends a forked child's writes to the cell that was running when the
    rank was started. A DTensor warning logged by a learner's call in a later cell showed under the
    first cell that launched ranks, without its ``[rank r]`` (issue 34, notebook 12)."""
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    for lg in loggers:
        for handler in lg.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                for old, new in zip(inherited, streams):
                    if handler.stream is old:
                        handler.setStream(new)
