"""Ranks on ipyparallel engines: the same notebooks on ranks spread over machines.

``collnb.connect(cluster)`` takes an :class:`ipyparallel.Cluster` or :class:`ipyparallel.Client`;
afterwards every collnb entry point that starts ranks (``launch``, ``run``, ``run_batch``,
``explore``, ``run_algorithm``, ``explore_rounds``, the bandwidth tools) runs on the cluster's
engines, one rank per engine (engine order = rank order): :func:`connect` makes the engines
(:class:`Engines`) the launcher's active rank set (:mod:`..rankset`), :func:`disconnect` makes the
local ranks active again. The functions that run on the engines are in :mod:`.engines`; each call
runs there with the steps a local rank takes (:class:`..call.steps.Call`), so what a call records
works the same (:mod:`..instrument.interface`). ``collnb.disconnect()`` returns to local forked ranks
and leaves the engines as they were before, usable for other work.

How (and why):

* **ipyparallel does the remote part**: engines are started by its launchers (local, MPI, SSH,
  SLURM...), messages are signed with the cluster's key (HMAC), each call is an ordinary
  ``apply_async`` of a function of :mod:`.engines`, engine output arrives through ipyparallel's
  output capture, and Kernel -> Interrupt reaches the engines through ipyparallel's
  ``Client.send_signal`` (the engine's nanny delivers SIGINT). collnb adds no server of its own.
* **One default process group over the engines**, kept warm between calls; smaller world sizes
  run in cached ``new_group``\\ s of ranks ``0..k-1``, as the local pool does. Rank 0's engine
  hosts the rendezvous :class:`torch.distributed.TCPStore` on a socket collnb binds to the
  address the engines share (``127.0.0.1`` when every engine runs on one host; otherwise
  rank 0's address on the IPv4 network every engine has an interface in), with
  port 0 (the OS picks a free port, never a fixed one); the port travels to the other engines
  through ipyparallel. Gloo (``GLOO_SOCKET_IFNAME``) and NCCL's bootstrap
  (``NCCL_SOCKET_IFNAME``) are bound to that interface on every engine.
* **Security**: torch.distributed's store and Gloo/NCCL sockets are **not authenticated**: any
  process that can reach that interface and port while collnb is connected can talk to them (the
  store listens, and the process group's sockets stay open, from :func:`connect` to
  :func:`disconnect`, between calls too, so that a call needs no new rendezvous). collnb
  binds them to the interface the engines use to reach each other (loopback when all are local),
  never to all interfaces; use it on networks you trust (a cluster's private network).
* **GPUs**: with ``backend="nccl"`` each rank uses ``cuda:LOCAL_RANK``, its index among the
  engines on its own host (counted by host name); more ranks on a host than it has GPUs is
  refused before anything runs (NCCL forbids two ranks on one GPU).
* **Failures** are reported as for local ranks: one :class:`collnb.RankError` naming the root-cause
  rank with its traceback; the other ranks are interrupted; an engine that dies mid-call is
  named (its peers fail within ``collective_timeout``); after a failure the process group is
  built afresh on the next call.

* **What a call records** is taken as on local ranks: ``launch(..., record_calls=True)``,
  ``timeline=True`` (with engines on several hosts, their clocks are aligned at a barrier before the
  function starts: :data:`..instrument.timeline.ALIGNED`), ``flight_recorder=N`` (the engines'
  groups are made with ``TORCH_FR_BUFFER_SIZE=N``) and the backend's C++ log lines (each engine
  copies its fds 1 and 2 into the output ipyparallel captures while a call runs,
  :class:`..instrument.backend_log.FdRelay`; the kernel keeps the C++ lines for the error unless
  ``show_backend_log=True``).

Limits: world sizes up to the number of engines and at most :data:`collnb.vocabulary.MAX_WORLD_SIZE`;
an engine stuck outside Python (in C code that ignores SIGINT) stays busy after a timeout, so
restart it (``cluster.restart_engines_sync()``) and connect again; ``barrier``'s arrival and
leave times in :func:`collnb.run` come from each host's own monotonic clock, so across hosts they are
not comparable; ``start_method=`` is refused (ipyparallel started the engines).

Requires ``pip install collnb[cluster]`` (ipyparallel) here, and collnb with the same torch on
every engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import signal
import sys
import threading
import time
import uuid
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, Sequence

import torch

from ...i18n import N_, _, get_language
from ...vocabulary import MAX_WORLD_SIZE, Backend
from .. import launcher as _launcher
from ..errors import LaunchError, LaunchTimeout, RankError
from ..explain.failures import (Ending, Stacks, ending_of, outcome_text, outcomes_of, rank_error, rebuild_result,
                               returned_diverged, root_cause)
from ..instrument.backend_log import BackendLog, attach
from ..instrument.interface import Recorded, launch_results
from ..protocol import Run
from ..rankset import (BackendFacts, LaunchPlan, LaunchRequest, RankResult,
                       RankSetup, Where)
from ..serialization import code_files, dumps
from .answers import answer_event, kept, output_events, wait_for_output
from .engines import (EngineInfo, engine_group, engine_info, engine_init, engine_listen, engine_run, engine_setup,
                      engine_teardown)

if TYPE_CHECKING:
    from ipyparallel import AsyncResult, Client, Cluster

__all__ = ["connect", "disconnect", "connected", "connected_hosts"]


class Engines:
    """The kernel's side of ``collnb.connect()``: the engines (rank ``r`` = the ``r``-th engine id),
    their one default process group kept warm between calls, and one call run on them: the
    :class:`..rankset.RankSet` that :func:`connect` makes active."""

    where: Where = N_("on the connected engines")

    def __init__(self, client: Client, cluster: Cluster | None, timeout: float) -> None:
        self.client = client
        self.cluster = cluster
        self.token = uuid.uuid4().hex
        self.ids = list(client.ids)
        self.lock = threading.Lock()
        self.generation = 0
        self.port: int | None = None
        self.setup: RankSetup | None = None  # how the engines' groups were made
        self.groups: set[int] = set()
        self.base_size = 0
        self._count = 0
        self.broken = False
        views = client[self.ids]
        try:
            self.infos: list[EngineInfo] = views.apply_sync(engine_info)
        except Exception as exc:
            raise RuntimeError(f"the engines could not run collnb ({type(exc).__name__}: {exc}). Every engine needs "
                               f"collnb and torch installed (pip install collnb) in the Python it runs") from exc
        versions = {i["torch"] for i in self.infos}
        if versions != {torch.__version__}:
            raise RuntimeError(f"the engines run torch {', '.join(sorted(versions))} and this kernel torch "
                               f"{torch.__version__}; install the same torch everywhere (collnb pins torch 2.13.0)")
        self.address, self.ifnames = _choose_interface(self.infos)
        hosts = [i["host"] for i in self.infos]
        self.local_ranks = [hosts[:r].count(h) for r, h in enumerate(hosts)]

    # -- describing --------------------------------------------------------------------------
    def describe(self) -> list[dict[str, Any]]:
        """:func:`connect`'s answer: one dict per rank (see there)."""
        return [dict(rank=r, engine=e, host=i["host"], pid=i["pid"], local_rank=self.local_ranks[r],
                     interface=self.ifnames[r], gpus=i["cuda"])
                for r, (e, i) in enumerate(zip(self.ids, self.infos))]

    def backend_info(self, backend: Backend) -> BackendFacts:
        """:func:`collnb.ranks.launcher.backend_info` for these engines (one rank per engine)."""
        n = len(self.ids)
        limit = min(n, MAX_WORLD_SIZE)
        if backend == "gloo":
            if not all(i["gloo"] for i in self.infos):
                return dict(backend=backend, available=False, max_world_size=0,
                            reason=_("the engines' torch has no Gloo backend"))
            return dict(backend=backend, available=True, max_world_size=limit, reason="",
                        limit=_("one rank per engine, and {n} engine(s) are connected").format(n=n))
        no_gpu = [r for r, i in enumerate(self.infos) if i["cuda"] == 0]
        if no_gpu:
            return dict(backend=backend, available=False, max_world_size=0,
                        reason=_("NCCL needs CUDA GPUs and the engine of rank {rank} (host {host}) sees none; "
                                 "use backend='gloo'").format(rank=no_gpu[0], host=self.infos[no_gpu[0]]['host']))
        if not all(i["nccl"] for i in self.infos):
            return dict(backend=backend, available=False, max_world_size=0,
                        reason=_("the engines' torch has no NCCL backend; use backend='gloo'"))
        ok = 0
        for r, i in enumerate(self.infos):
            if self.local_ranks[r] >= i["cuda"]:
                break
            ok += 1
        short = "" if ok == n else _("host {host} has {n} GPU(s) but runs more engines").format(
            host=self.infos[ok]['host'], n=self.infos[ok]['cuda'])
        return dict(backend=backend, available=True, max_world_size=min(ok, limit), reason=short,
                    limit=_("NCCL puts one rank per GPU: {why}").format(why=short or _("one engine per GPU")))

    # -- process groups ----------------------------------------------------------------------
    def _setup(self, setup: RankSetup) -> None:
        cfg = dict(address=self.address, backend=setup.backend, debug=setup.debug,
                   collective_timeout=setup.collective_timeout, flight_recorder=setup.flight_recorder,
                   local_ranks=self.local_ranks)
        ars = [self.client[e].apply_async(engine_setup, self.token, r, dict(cfg, ifname=self.ifnames[r]))
               for r, e in enumerate(self.ids)]
        for ar in ars:
            ar.get(timeout=60)
        self.setup, self.groups, self.base_size, self.port = setup, set(), 0, None

    def _prepare(self, world_size: int, deadline: float, timeout_each: float) -> None:
        n = len(self.ids)
        if self.base_size != n:
            self.generation += 1
            if self.port is None:
                self.port = self._wait([self.client[self.ids[0]].apply_async(engine_listen, self.token, timeout_each)],
                                       deadline, "init")[0]
            ars = [self.client[e].apply_async(engine_init, self.token, self.port, self.generation, n, timeout_each)
                   for e in self.ids]
            self._wait(ars, deadline, "init")
            self.base_size, self.groups = n, {n}
        if world_size not in self.groups:
            self._count += 1000
            ars = [self.client[e].apply_async(engine_group, self.token, world_size, self._count) for e in self.ids]
            self._wait(ars, deadline, "init")
            self.groups.add(world_size)

    def _wait(self, ars: Sequence[AsyncResult], deadline: float, phase: str) -> list[Any]:
        """Results of set-up calls (which raise on the engine on failure)."""
        out = []
        for r, ar in enumerate(ars):
            left = max(0.1, deadline - time.monotonic())
            try:
                out.append(ar.get(timeout=left))
            except Exception as exc:  # noqa: BLE001
                self.base_size, self.groups = 0, set()
                text = str(exc)
                if type(exc).__name__ == "TimeoutError":
                    raise LaunchTimeout(
                        f"timed out during {phase}: the engine of rank {r} had not finished setting up the "
                        f"process group (raise the limit with timeout=SECONDS)", [r], {r: "setting up"}) from None
                raise RankError(
                    f"rank {r}: {type(exc).__name__}: {text}\n\n(while initialising the process group on engine "
                    f"{self.ids[r]}, host {self.infos[r]['host']})", r, type(exc).__name__, "",
                    {r: f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"}) from None
        return out

    # -- running -----------------------------------------------------------------------------
    def accept(self, plan: LaunchPlan) -> LaunchPlan:
        """``plan`` as the engines run it: their fds 1 and 2 copied into ipyparallel's output while a
        call runs (the backend's C++ log lines reach the kernel), their clocks aligned for a timeline
        when they run on more than one host (:class:`..instrument.interface.Instruments`).

        Raises:
            NotImplementedError: ``start_method`` (ipyparallel started the engines; collnb starts no
                process there)."""
        if plan.setup.start_method is not None:
            raise NotImplementedError(
                f"start_method={plan.setup.start_method!r} is not supported on ipyparallel engines (ipyparallel "
                f"started the engines; collnb starts no process there); collnb.disconnect() and use local ranks")
        hosts = {i["host"] for i in self.infos}
        instruments = dataclasses.replace(plan.instruments, relay_fds=True, align_clocks=len(hosts) > 1)
        return dataclasses.replace(plan, instruments=instruments)

    def launch(self, request: LaunchRequest) -> list[Any]:
        """Run a checked request on the engines (see :func:`collnb.launch`)."""
        with self.lock:
            return self._launch(request)

    def _launch(self, request: LaunchRequest) -> list[Any]:
        plan, fn = request.plan, request.fn
        if self.broken:
            raise LaunchError("the connection to the engines was closed; call collnb.connect() again")
        gone = [e for e in self.ids if e not in self.client.ids]
        if gone:
            raise LaunchError(
                f"engine(s) {', '.join(map(str, gone))} (rank(s) "
                f"{', '.join(str(self.ids.index(e)) for e in gone)}) are no longer part of the cluster; "
                f"start new engines and call collnb.connect() again")
        deadline = time.monotonic() + plan.timeout
        try:
            with _by_value(fn):
                task = dumps((fn, request.args, request.kwargs, code_files(fn)))
        except Exception as exc:
            raise TypeError(f"cannot send {fn!r} and its arguments to the engines: {exc}") from exc
        if plan.setup != self.setup:
            self._setup(plan.setup)
        self._prepare(plan.world_size, deadline, plan.timeout)
        self._count += 1000
        run = Run(plan.world_size, self._count, task, plan.instruments, get_language())
        ars = [self.client[e].apply_async(engine_run, self.token, run) for e in self.ids[:plan.world_size]]
        log = BackendLog(plan.instruments.show_backend_log)
        try:
            return self._collect(ars, plan.world_size, deadline, plan.setup.collective_timeout, log)
        except (RankError, LaunchTimeout) as exc:
            self.base_size, self.groups = 0, set()  # peers may have timed out in a collective: build it afresh
            attach(exc, log.take(), plan.setup.backend)
            raise
        except BaseException:
            self.base_size, self.groups = 0, set()
            log.release()
            raise

    def _interrupt(self, ars: Sequence[AsyncResult]) -> None:
        """SIGINT, through ipyparallel, to the engines whose call is still running."""
        targets = [self.ids[r] for r, ar in enumerate(ars) if not ar.ready()]
        if not targets:
            return
        try:
            self.client.send_signal(signal.SIGINT, targets=targets, block=True)
        except Exception as exc:  # noqa: BLE001 - engines without a nanny cannot be signalled
            sys.stderr.write(f"[collnb] could not interrupt engine(s) {targets}: {exc}\n")

    def _collect(self, ars: Sequence[AsyncResult], world_size: int, deadline: float,
                 collective_timeout: float, log: BackendLog) -> list[Any]:
        """Wait for every engine's answer, copying their output (the backend's C++ lines kept in
        ``log``), interrupting them on a failure or at ``deadline``; returns the results (as
        :func:`..instrument.interface.launch_results` makes them) or raises as local ranks do."""
        endings: dict[int, Ending] = {}
        recorded: dict[int, Recorded | None] = {}
        shown = [[0, 0] for _a in ars]
        partial = [["", ""] for _a in ars]
        failure_at: float | None = None
        interrupted_at: float | None = None
        grace = 0.5
        after_signal = collective_timeout + 10.0

        def pump(final: bool = False) -> None:
            for event in output_events(ars, shown, partial, final):
                stream = sys.stdout if event.stream == "stdout" else sys.stderr
                lines = event.lines
                if event.stream == "stderr":
                    lines = tuple(ln for ln in lines if not kept(log, event.rank, ln))
                if lines:
                    stream.write("".join(f"[rank {event.rank}] {ln}\n" for ln in lines))
                    stream.flush()

        def poll() -> None:
            nonlocal failure_at
            for r, ar in enumerate(ars):
                if r in endings or not ar.ready():
                    continue
                answer = answer_event(r, ar)
                ending = ending_of(answer, collective_timeout)
                endings[r] = ending
                recorded[r] = answer.recorded if isinstance(answer, RankResult) else None
                if ending.kind != "ok":
                    failure_at = failure_at or ending.t
                elif isinstance(answer, RankResult) and answer.retire:
                    changed.setdefault(answer.retire, []).append(r)

        changed: dict[str, list[int]] = {}  # what a call changed for good in an engine -> its ranks
        user_interrupt = False
        try:
            while len(endings) < len(ars):
                poll()
                pump()
                now = time.monotonic()
                if len(endings) == len(ars):
                    break
                if interrupted_at is None and (now > deadline or (failure_at and now - failure_at > grace)):
                    self._interrupt(ars)
                    interrupted_at = now
                if interrupted_at is not None and now - interrupted_at > after_signal:
                    break
                time.sleep(0.01)
        except KeyboardInterrupt:
            user_interrupt = True
            self._interrupt(ars)
            end = time.monotonic() + after_signal
            while len(endings) < len(ars) and time.monotonic() < end:
                try:
                    poll()
                except KeyboardInterrupt:
                    break
                time.sleep(0.02)
        wait_for_output(ars)
        pump(final=True)
        if user_interrupt:
            raise KeyboardInterrupt
        timed_out = interrupted_at is not None and failure_at is None or (
            failure_at is not None and interrupted_at is not None and failure_at > interrupted_at)
        failed = [e for e in endings.values() if e.kind != "ok"]
        if not failed and len(endings) == len(ars):
            if not all(e.intact for e in endings.values()):
                self.base_size, self.groups = 0, set()
            elif len({e.seq for e in endings.values()}) > 1:
                self.groups.discard(world_size)
                if world_size == self.base_size:
                    self.base_size = 0
            for why, rs in changed.items():  # engines cannot be swapped for fresh ranks: say so now
                sys.stderr.write(f"[collnb] the last call {why} on rank(s) {', '.join(map(str, rs))} (engine(s) "
                                 f"{', '.join(str(self.ids[r]) for r in rs)}), which cannot be put back: collnb runs "
                                 f"nothing more on those engines; restart them (cluster.restart_engines_sync()) and "
                                 f"call collnb.connect() again\n")
            ranks = list(range(len(ars)))
            results = [rebuild_result(r, endings[r].value) for r in ranks]
            diverged = returned_diverged(ranks, endings, results)
            if diverged is not None:  # flight_recorder=N: the ranks' collectives disagreed
                raise diverged
            log.release()
            return launch_results(results, [recorded[r] for r in ranks])
        return self._raise(endings, ars, timed_out)

    def _raise(self, events: dict[int, Ending], ars: Sequence[AsyncResult], timed_out: bool) -> NoReturn:
        """Turn the outcome of a failed call into RankError / LaunchTimeout, as the local pool does."""
        ranks = list(range(len(ars)))
        pending = [r for r in range(len(ars)) if r not in events]
        # Ranks we interrupted answer with KeyboardInterrupt: their frames say where they were.
        stacks: Stacks = {}
        for r, e in list(events.items()):
            if e.kind == "error" and e.exc_type == "KeyboardInterrupt":
                stacks[r] = e.frames
                del events[r]
                pending.append(r)
        for r in pending:
            if r not in stacks:
                stacks[("state", r)] = (f"did not answer (engine {self.ids[r]} on {self.infos[r]['host']}, "
                                        f"pid {self.infos[r]['pid']}: busy outside Python, or gone)")
        pending.sort()
        failed = [e for e in events.values() if e.kind != "ok"]
        if timed_out or not failed:
            outcomes = outcomes_of(ranks, events, stacks, None)
            raise LaunchTimeout(
                f"timed out during run: rank(s) {', '.join(map(str, pending))} had not finished "
                f"(raise the limit with launch(..., timeout=SECONDS))\n"
                + outcome_text(outcomes), pending, outcomes)
        root = root_cause(failed, events, pending, stacks)
        outcomes = outcomes_of(ranks, events, stacks, root)
        for r, e in events.items():
            if e.kind == "died":
                outcomes[r] = f"engine {self.ids[r]} (host {self.infos[r]['host']}, pid {self.infos[r]['pid']}) died"
        if root.kind == "died" and root.rank is not None:  # a died event always names its rank
            r = root.rank
            head = (f"rank {r}: Killed: engine {self.ids[r]} (host {self.infos[r]['host']}, pid "
                    f"{self.infos[r]['pid']}) died during the call ({root.message})")
            text = head + "\n\nWhat happened to every rank:\n" + outcome_text(outcomes)
            raise RankError(text, r, "Killed", "", outcomes)
        raise rank_error(root, outcomes, "run")  # the local pool's own wording


@contextlib.contextmanager
def _by_value(fn: Callable[..., Any]) -> Iterator[None]:
    """Ship ``fn``'s module by value when the engines may not have it: a learner's own ``.py``
    next to the notebook (or a test module) is not installed on a remote machine. Modules of
    installed packages (site-packages) and collnb itself travel by reference, as usual."""
    import cloudpickle
    name: str = getattr(fn, "__module__", None) or ""
    module = sys.modules.get(name) if name else None
    path = os.path.abspath(getattr(module, "__file__", None) or "")
    own: ModuleType | None = module if (
        module is not None and name != "__main__" and path and "-packages" + os.sep not in path
        and not name.startswith(("collnb", "torch")) and name not in sys.stdlib_module_names) else None
    if own is not None:
        cloudpickle.register_pickle_by_value(own)
    try:
        yield
    finally:
        if own is not None:
            cloudpickle.unregister_pickle_by_value(own)


def _choose_interface(infos: Sequence[EngineInfo]) -> tuple[str, list[str]]:
    """``(address, [ifname per rank])``: where rank 0 hosts the store and which interface each
    engine binds Gloo/NCCL to. Loopback when every engine runs on one host; otherwise rank 0's
    address on an IPv4 network in which every engine has an address.

    Raises:
        RuntimeError: the engines share no IPv4 network (the message lists their addresses).
    """
    hosts = {i["host"] for i in infos}
    if len(hosts) == 1:
        lo = [name for name, ip, _ in infos[0]["addrs"] if ip.startswith("127.")]
        return "127.0.0.1", [lo[0] if lo else "lo"] * len(infos)
    for _name, ip, mask in infos[0]["addrs"]:
        if ip.startswith("127."):
            continue
        net = ipaddress.ip_network(f"{ip}/{mask}", strict=False)
        names = []
        for info in infos:
            match = [n for n, a, _ in info["addrs"] if ipaddress.ip_address(a) in net]
            if not match:
                break
            names.append(match[0])
        else:
            return ip, names
    table = "; ".join(f"rank {r} on {i['host']}: " + ", ".join(f"{n} {a}/{m}" for n, a, m in i["addrs"])
                      for r, i in enumerate(infos))
    raise RuntimeError(f"the engines share no IPv4 network through which rank 0 could host the rendezvous "
                       f"({table})")


_connection: Engines | None = None


def connect(cluster_or_client: object, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Run collnb's ranks on the engines of an ipyparallel cluster from now on.

    Args:
        cluster_or_client: an :class:`ipyparallel.Cluster` (started, or started here with
            ``start_and_connect_sync``) or an :class:`ipyparallel.Client`. Rank ``r`` is the
            ``r``-th engine id in ascending order; world sizes up to the number of engines.
        timeout: seconds to wait for the engines to answer.

    Returns:
        a list with one dict per rank: ``rank``, ``engine`` (id), ``host``, ``pid``,
        ``local_rank`` (its index among the engines of its host: its GPU with NCCL),
        ``interface`` (the one Gloo/NCCL is bound to there) and ``gpus``.

    Raises:
        ImportError: ipyparallel is not installed (``pip install collnb[cluster]``).
        TypeError: neither a Cluster nor a Client.
        RuntimeError: the cluster has no engines, an engine lacks collnb/torch or runs another
            torch, or the engines share no network.
    """
    global _connection
    try:
        import ipyparallel as ipp
    except ImportError as exc:
        raise ImportError("collnb.connect needs ipyparallel: pip install 'collnb[cluster]'") from exc
    cluster = None
    if isinstance(cluster_or_client, ipp.Cluster):
        cluster = cluster_or_client
        if getattr(cluster, "controller", None) is None:  # not started yet: start it (and its engines)
            client = cluster.start_and_connect_sync()
        else:
            client = cluster.connect_client_sync()
    elif isinstance(cluster_or_client, ipp.Client):
        client = cluster_or_client
    else:
        raise TypeError(f"connect() takes an ipyparallel.Cluster or ipyparallel.Client; got "
                        f"{type(cluster_or_client).__name__}")
    if cluster is not None and getattr(cluster, "n", None):
        try:
            client.wait_for_engines(cluster.n, timeout=timeout)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"the cluster's {cluster.n} engines did not all register within {timeout:g} s "
                               f"({exc})") from exc
    if not client.ids:
        raise RuntimeError("the cluster has no engines yet; start them (cluster.start_engines_sync(n)) "
                           "or wait for them (client.wait_for_engines(n))")
    disconnect()
    conn = Engines(client, cluster, timeout)
    _connection = conn
    _launcher.use_rank_set(conn)
    return conn.describe()


def disconnect() -> None:
    """Return to local forked ranks. The engines' process groups and the rendezvous store are
    closed and their environment is restored; the engines stay up and usable (their ipyparallel
    client is not closed). Does nothing when not connected."""
    global _connection
    conn, _connection = _connection, None
    _launcher.use_rank_set(None)
    if conn is None:
        return
    conn.broken = True
    try:
        ids = [e for e in conn.ids if e in conn.client.ids]
        if ids:
            conn.client[ids].apply_async(engine_teardown).get(timeout=30)
    except Exception as exc:  # noqa: BLE001 - a dead engine must not make disconnect fail
        sys.stderr.write(f"[collnb] some engines could not be cleaned up: {type(exc).__name__}: {exc}\n")


def connected() -> bool:
    """Whether collnb's ranks currently run on ipyparallel engines."""
    return _connection is not None


def connected_hosts() -> list[str] | None:
    """The host name of every connected engine, in rank order (``None`` when not connected): the
    nodes of a real :func:`collnb.cluster`."""
    conn = _connection
    return None if conn is None else [i["host"] for i in conn.infos]
