"""The engine side of :mod:`.remote`: the functions ipyparallel applies on each engine.

ipyparallel ships these by reference (the engines import them from collnb), one call per step:
:func:`engine_info` (what the kernel needs to know: host, addresses, GPUs, torch),
:func:`engine_setup` (make the engine rank ``r`` of one connection), :func:`engine_listen`
(rank 0 hosts the rendezvous :class:`torch.distributed.TCPStore` on port 0),
:func:`engine_init` (join the default process group), :func:`engine_group` (a cached group of
ranks ``0..k-1``), :func:`engine_run` (the learner's function, run with the steps a local rank takes,
:class:`..call.steps.Call`, instruments included; answers a :class:`..protocol.Result` or
:class:`..protocol.Failed` as a local rank does, never raises) and :func:`engine_teardown` (leave the
engine as it was). The engine's state lives in the module-level dict ``_ENGINE``.

After every call the engine is put back as a local rank is (:class:`..fresh.rank_state.RankState`),
before it answers. A call that changes it for good (a replaced torch function) cannot be answered
with fresh ranks as locally: the engine then refuses every later call with a clear error until it
is restarted.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import time
from typing import TypedDict

import psutil
import torch
import torch.distributed as dist

from .. import _torch_internals as internals
from ..call.groups import forget_kept_groups
from ..call.steps import Call, failure, flush_output, resolve_rank_names, restore_environment, serve
from ..fresh.rank_state import RankState
from ..instrument import _dist_hooks
from ..protocol import Failed, Result, Run

__all__ = ["EngineInfo", "engine_info", "engine_setup", "engine_teardown", "engine_listen", "engine_init", "engine_group",
           "engine_run"]


class EngineConfig(TypedDict):
    """What :func:`engine_setup` is told (by :meth:`.connection.Engines._setup`): the address rank 0's
    store listens on, the backend, ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` or not, the groups' timeout (s),
    ``TORCH_FR_BUFFER_SIZE`` (Flight Recorder entries; 0 leaves it as it was), each rank's index among
    the engines of its host, and the interface Gloo/NCCL bind to here."""

    address: str
    backend: str
    debug: bool
    collective_timeout: float
    flight_recorder: int
    local_ranks: list[int]
    ifname: str


class _EngineState(TypedDict, total=False):
    """This engine's state while a connection has set it up (empty before :func:`engine_setup`)."""

    token: str
    rank: int
    cfg: EngineConfig
    store: dist.Store | None
    listen: socket.socket | None
    port: int
    base: dist.ProcessGroup | None
    groups: dict[int, dist.ProcessGroup | None]  # torch types group.WORLD and new_group's group as optional
    gen: int | None
    saved_env: dict[str, str | None]


class _ProcessState(TypedDict):
    """The engine process across connections (see :data:`_PROCESS`)."""

    state: RankState | None
    changed: str


_ENGINE: _EngineState = {}   # this engine's state: token, rank, store, groups...
#: The engine process as it was before the first call (:class:`..fresh.rank_state.RankState`, made then),
#: and what a call changed in it for good (``""`` while nothing): an engine cannot be replaced by fresh
#: ranks, so once changed it refuses every later call, whichever connection asks, until it is restarted.
_PROCESS: _ProcessState = {"state": None, "changed": ""}


class EngineInfo(TypedDict):
    """What :func:`engine_info` says about an engine: its host name, pid, IPv4 addresses
    ``(interface, address, netmask)``, visible CUDA GPUs, torch version and backends."""

    host: str
    pid: int
    addrs: list[tuple[str, str, str]]
    cuda: int
    torch: str
    nccl: bool
    gloo: bool


def engine_info() -> EngineInfo:
    """What the kernel needs to know about this engine (runs on the engine)."""
    addrs: list[tuple[str, str, str]] = []
    for ifname, entries in psutil.net_if_addrs().items():
        for a in entries:
            if a.family == socket.AF_INET:
                addrs.append((ifname, a.address, a.netmask or "255.255.255.255"))
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return EngineInfo(host=socket.gethostname(), pid=os.getpid(), addrs=addrs, cuda=cuda,
                      torch=torch.__version__, nccl=dist.is_nccl_available(), gloo=dist.is_gloo_available())


def engine_setup(token: str, rank: int, cfg: EngineConfig) -> int:
    """Make this engine rank ``rank`` of the connection ``token`` (no process group yet)."""
    engine_teardown()
    saved = {k: os.environ.get(k) for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TORCH_DISTRIBUTED_DEBUG",
                                            "TORCH_FR_BUFFER_SIZE")}
    _ENGINE.update(_EngineState(token=token, rank=rank, cfg=cfg, store=None, listen=None, base=None, groups={},
                                gen=None, saved_env=saved))
    return os.getpid()


def engine_teardown() -> bool:
    """Leave the engine as before :func:`engine_setup`: no process group, no store, the environment
    variables collnb set as they were. (torch.distributed's wrappers stay in place, inactive: they
    pass every call straight to torch, as between calls; undone, they would count as a change of
    torch.distributed for the engine's :class:`..fresh.rank_state.RankState` at the next connection.)"""
    if not _ENGINE:
        return False
    _destroy_groups()
    _dist_hooks.pause()
    serve(None)
    listen = _ENGINE.get("listen")
    if listen is not None:
        try:
            listen.close()
        except OSError:
            pass
    for k, v in (_ENGINE.get("saved_env") or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _ENGINE.clear()  # type: ignore[attr-defined]  # mypy gives TypedDicts no clear(); every key here is optional
    return True


def _destroy_groups() -> None:
    base = _ENGINE.get("base")
    if dist.is_initialized():
        internals.destroy_all_groups(base)
    _ENGINE.update(_EngineState(base=None, groups={}, gen=None))
    forget_kept_groups()


def _check_token(token: str) -> None:
    if _ENGINE.get("token") != token:
        raise RuntimeError("this engine was taken over by another collnb.connect() (another notebook?); "
                           "call collnb.connect() again")


def engine_listen(token: str, timeout: float) -> int:
    """Rank 0: host the rendezvous store on a socket bound to the chosen address, port 0 (the OS
    picks a free one). Returns the port (int)."""
    _check_token(token)
    if _ENGINE.get("store") is not None:
        return _ENGINE["port"]
    cfg = _ENGINE["cfg"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((cfg["address"], 0))
    sock.listen(256)
    port: int = sock.getsockname()[1]
    store = dist.TCPStore(cfg["address"], port, None, True, datetime.timedelta(seconds=timeout),
                          wait_for_workers=False, master_listen_fd=sock.fileno())
    _ENGINE.update(_EngineState(listen=sock, store=store, port=port))
    return port


def engine_init(token: str, port: int, gen: int, world_size: int, timeout: float) -> float:
    """Join (or re-join) the default process group of generation ``gen`` over all engines."""
    _check_token(token)
    cfg, rank = _ENGINE["cfg"], _ENGINE["rank"]
    _destroy_groups()
    restore_environment(cfg["ifname"], cfg["debug"], cfg["flight_recorder"])
    store = _ENGINE.get("store")
    if store is None:
        store = _ENGINE["store"] = dist.TCPStore(cfg["address"], port, None, False, datetime.timedelta(seconds=timeout))
    t0 = time.perf_counter()
    device = None  # gloo: init_process_group's default
    if cfg["backend"] == "nccl":
        device = torch.device("cuda", cfg["local_ranks"][rank])
        torch.cuda.set_device(device)
    dist.init_process_group(cfg["backend"], store=dist.PrefixStore(f"gen{gen}", store), rank=rank,
                            world_size=world_size,
                            timeout=datetime.timedelta(seconds=cfg["collective_timeout"]), device_id=device)
    base = dist.group.WORLD
    _ENGINE.update(_EngineState(base=base, groups={world_size: base}, gen=gen))
    return time.perf_counter() - t0


def engine_group(token: str, k: int, count: int) -> int:
    """Every engine of the default group: make the cached group of ranks 0..k-1."""
    _check_token(token)
    internals.set_default_group(_ENGINE["base"])
    internals.set_group_count(count)
    timeout = datetime.timedelta(seconds=_ENGINE["cfg"]["collective_timeout"])
    _ENGINE["groups"][k] = dist.new_group(list(range(k)), timeout=timeout)
    return k


def engine_run(token: str, run: Run) -> Result | Failed:
    """Run ``run`` (:class:`..protocol.Run`, as a local rank gets it) as rank ``_ENGINE['rank']``, with
    the steps a local rank takes (:class:`..call.steps.Call`); returns a :class:`..protocol.Result`
    (``retire``: what the call changed for good) or a :class:`..protocol.Failed`; never raises (so
    ipyparallel's own error wrapping never hides the rank's traceback). The engine is put back as it
    was before it answers (:class:`..fresh.rank_state.RankState`)."""
    try:
        _check_token(token)
        if _PROCESS["changed"]:
            return Failed("EngineChanged", f"an earlier call {_PROCESS['changed']} in this engine (pid {os.getpid()}), "
                          f"which cannot be put back, so collnb runs nothing more on it: restart the engines "
                          f"(cluster.restart_engines_sync()) and call collnb.connect() again", [])
        cfg, groups = _ENGINE["cfg"], _ENGINE["groups"]
        state = _PROCESS["state"]
        if state is None:  # before any learner's call: what the engine is like
            resolve_rank_names()
            state = _PROCESS["state"] = RankState(own_process=False)
        call = Call(_ENGINE["rank"], run, groups[run.world_size], cfg["backend"], cfg["collective_timeout"])
    except BaseException as exc:  # noqa: BLE001 - a set-up step's failure is the rank's answer too
        return failure(exc, _ENGINE.get("rank"))
    try:
        result = call.run(groups.values(), after=state.restore)  # environment, cwd, torch's global modes...
        store = _ENGINE.get("store")  # rank 0's store, shared by every engine: a call's groups end together in it
        if result.intact and store is not None:  # groups the function made end with the call
            call.end_groups(store, call.own())
            internals.set_default_group(_ENGINE["base"])
        _PROCESS["changed"] = state.retire_reason()
        flush_output()
        return dataclasses.replace(result, retire=_PROCESS["changed"])
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt and SystemExit are rank outcomes too
        return call.failed(exc)
