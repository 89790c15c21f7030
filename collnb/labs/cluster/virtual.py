"""A virtual cluster on one machine: :class:`VirtualCluster` (nodes as network namespaces, the
inter-node link shaped by tbf; :mod:`.network`) and :meth:`VirtualCluster.launch`, which starts
``nodes * ranks_per_node`` fresh gloo ranks, each inside its node's namespace.

Ranks are numbered node by node: rank ``r`` runs on node ``r // ranks_per_node`` as its local rank
``r % ranks_per_node`` (torchrun's and Slurm's block placement), so a group of consecutive ranks
shares one node's fast local route and ranks ``l, l + L, l + 2L, ...`` (one per node) cross the
shaped links.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from ...i18n import _, get_language, ngettext
from ...ranks import (BackendLog, Failed, Instruments, LaunchRequest, LaunchTimeout, RankError, RankEvent, RankExit,
                      RankFailure, RankResult, Run, attach_backend_log, code_files, conclude, dumps, launch_results,
                      named_cells, parse_stack, runs_unwrapped, wait_for_stacks, wait_until_up)
from ...vocabulary import check_int
from .network import INTERFACE, MAX_NODES, ClusterUnavailable, Network, available, sweep_leftovers

__all__ = ["VirtualCluster", "ClusterRankError", "ClusterTimeout", "MODES"]

#: ``"emulated"``: real namespaces and shaped links; ``"modelled"``: none could be made (the reason
#: is :attr:`VirtualCluster.why`), only the cost model answers.
MODES = ("emulated", "modelled")

#: What each rank process runs, inside its node's namespace (:mod:`.rank_main`).
RANK_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_main.py")
#: Seconds the launcher waits, after a rank failed, for the others' answers before it blames one
#: (a peer of a failed rank fails within moments; on a loaded machine the culprit's own answer may
#: come after its peers').
SETTLE_S = 3.0
#: Seconds fresh ranks may take to start (``import torch`` and collnb inside their node's namespace)
#: before a call's ``timeout`` starts; past it they are stopped (``import torch`` takes 3-5 s idle).
START_TIMEOUT_S = 300.0


class ClusterRankError(RankError):
    """A rank of :meth:`VirtualCluster.launch` raised or died: a :class:`collnb.RankError` (the
    root-cause rank, as collnb's other rank sets name it, its exception type and traceback, what
    happened to every rank) whose first line names the rank's node. Every rank was stopped."""

    @property
    def traceback(self) -> str:
        """The root-cause rank's traceback (:attr:`rank_traceback`)."""
        return self.rank_traceback


class ClusterTimeout(LaunchTimeout):
    """:meth:`VirtualCluster.launch` ran past its ``timeout``: a :class:`collnb.LaunchTimeout`
    (``pending``: the ranks still running, ``outcomes``: where each was). Every rank was killed."""


class VirtualCluster:
    """``nodes`` machines of ``ranks_per_node`` ranks each, on this machine, as a context manager.

    Args:
        nodes: number of nodes, 1..254 (one network namespace each).
        ranks_per_node: ranks started on each node by :meth:`launch`, >= 1.
        inter_gbps: rate of each node's link in Gbit/s (1e9 bits per second, frame headers
            included: a TCP stream's payload gets about 0.956 of it, :mod:`.network`), both
            directions; ``None``: unshaped (the veth's own speed, ~18 Gbit/s for one TCP stream
            between two namespaces, measured here).
        inter_latency_ms: one-way latency added per inter-node message, in ms. **Modelled only**
            (:attr:`latency` is ``"modelled"``): the kernel's netem qdisc, which could delay packets,
            is not in this kernel. :class:`collnb.labs.cluster.TierModel` adds it to the inter α.
        require: ``True`` (default): raise :class:`ClusterUnavailable` when the namespaces cannot be
            made; ``False``: warn with one line and enter in ``mode == "modelled"`` (:meth:`launch`
            then refuses; only the model answers).
        intra_gbps: rate of each node's loopback in Gbit/s, shared by the node's intra-node
            traffic (:mod:`.network`); ``None`` (default): unshaped.

    Attributes:
        mode: ``"emulated"`` or ``"modelled"`` (:data:`MODES`); ``why``: one line saying why it is
            modelled (``""`` when emulated). ``latency``: ``"modelled"``.
        world_size: ``nodes * ranks_per_node``. ``namespaces``: the node namespaces' names
            (``collnb-<pid>-<k>-n<i>``); ``addresses``: node ``i``'s ``10.200.0.<i+1>``.

    On entry it first sweeps namespaces left by dead processes (:func:`sweep_leftovers`); on exit,
    on an exception inside the ``with`` block and at interpreter exit it removes its own.

    Example (as root)::

        with VirtualCluster(nodes=2, ranks_per_node=2, inter_gbps=0.4) as cluster:
            print(cluster.launch(lambda rank, world_size: rank))   # [0, 1, 2, 3]

    Raises:
        ValueError / TypeError: bad sizes or rates. ClusterUnavailable: see ``require``.
    """

    def __init__(self, nodes: int, ranks_per_node: int, inter_gbps: float | None, inter_latency_ms: float = 0.0,
                 *, require: bool = True, intra_gbps: float | None = None):
        self.nodes = check_int("nodes", nodes, 1, MAX_NODES)
        self.ranks_per_node = check_int("ranks_per_node", ranks_per_node, 1)
        if inter_gbps is not None and not (isinstance(inter_gbps, (int, float)) and inter_gbps > 0):
            raise ValueError(_("inter_gbps must be > 0 Gbit/s (or None: unshaped); got {value}").format(
                value=inter_gbps))
        if intra_gbps is not None and not (isinstance(intra_gbps, (int, float)) and intra_gbps > 0):
            raise ValueError(_("intra_gbps must be > 0 Gbit/s (or None: unshaped); got {value}").format(
                value=intra_gbps))
        if not (isinstance(inter_latency_ms, (int, float)) and inter_latency_ms >= 0):
            raise ValueError(_("inter_latency_ms must be >= 0 ms; got {value}").format(value=inter_latency_ms))
        self.inter_gbps = None if inter_gbps is None else float(inter_gbps)
        self.intra_gbps = None if intra_gbps is None else float(intra_gbps)
        self.inter_latency_ms = float(inter_latency_ms)
        self.world_size = self.nodes * self.ranks_per_node
        self.require = require
        self.mode = "modelled"
        self.why = ""
        self.latency = "modelled"
        self.collective_timeout = 120.0
        self._network: Network | None = None
        self._procs: list[subprocess.Popen[bytes]] = []
        self._work: str | None = None
        self._seq = 0
        self._ws = self.world_size
        self._fr = 0  # the warm ranks' Flight Recorder entries (TORCH_FR_BUFFER_SIZE; 0: off)
        self._group_timeout = self.collective_timeout  # their default group's timeout, seconds
        self._debug = False  # whether the warm ranks run with TORCH_DISTRIBUTED_DEBUG=DETAIL
        self._shown: dict[tuple[int, str], int] = {}  # (rank, stream) -> bytes of its file shown
        self._partial: dict[tuple[int, str], bytes] = {}  # (rank, stream) -> an unfinished line
        self._lock = threading.Lock()

    # -- the namespaces ------------------------------------------------------------------------
    def __enter__(self) -> VirtualCluster:
        ok, why = available()
        if ok:
            sweep_leftovers()
            network = Network(self.nodes, self.inter_gbps, self.intra_gbps)
            try:
                network.create()
            except ClusterUnavailable as e:
                ok, why = False, str(e)
            else:
                self._network, self.mode = network, "emulated"
        if not ok:
            if self.require:
                raise ClusterUnavailable(why)
            self.why = why
            print(_("VirtualCluster: modelled only, no ranks: {why}").format(why=why), file=sys.stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the ranks and remove the namespaces (safe to call twice)."""
        self._stop_ranks()
        if self._network is not None:
            self._network.remove()
            self._network = None

    @property
    def namespaces(self) -> list[str]:
        return list(self._network.nodes) if self._network else []

    @property
    def addresses(self) -> list[str]:
        return list(self._network.addresses) if self._network else []

    @property
    def warm_collective_timeout(self) -> float:
        """Seconds the warm ranks' collectives wait (a :meth:`run` that asks for another
        ``collective_timeout`` restarts them); without warm ranks, what a :meth:`launch` gives new
        ones (:attr:`collective_timeout`)."""
        return self._group_timeout if self._procs else self.collective_timeout

    def node_of(self, rank: int) -> int:
        """The node rank ``rank`` runs on (``rank // ranks_per_node``)."""
        return rank // self.ranks_per_node

    def set_inter_gbps(self, gbps: float | None) -> None:
        """Change the inter-node rate (Gbit/s, or ``None``: unshaped) of a running cluster."""
        self._need_emulated()
        assert self._network is not None
        self._network.shape(gbps)
        self.inter_gbps = None if gbps is None else float(gbps)

    def set_intra_gbps(self, gbps: float | None) -> None:
        """Change the rate of every node's loopback (Gbit/s, or ``None``: unshaped) of a running
        cluster."""
        self._need_emulated()
        assert self._network is not None
        self._network.shape_intra(gbps)
        self.intra_gbps = None if gbps is None else float(gbps)

    def _need_emulated(self) -> None:
        if self._network is None:
            raise ClusterUnavailable(_("this VirtualCluster has no namespaces ({state}): use it as "
                                       "'with VirtualCluster(...) as cluster:'").format(
                                           state=self.why or _("not entered, or closed")))

    def __repr__(self) -> str:
        rate = "unshaped" if self.inter_gbps is None else f"{self.inter_gbps:g} Gbit/s"
        intra = "unshaped" if self.intra_gbps is None else f"{self.intra_gbps:g} Gbit/s"
        return (f"VirtualCluster(nodes={self.nodes}, ranks_per_node={self.ranks_per_node}, inter={rate}, intra={intra}, "
                f"latency={self.inter_latency_ms:g} ms ({self.latency}), mode={self.mode!r})")

    # -- the ranks -----------------------------------------------------------------------------
    def launch(self, fn: Callable[..., Any], args: Sequence[Any] = (), timeout: float = 120.0,
               world_size: int | None = None, debug: bool | None = None) -> list[Any]:
        """Run ``fn(rank, world_size, *args)`` on the cluster's ``world_size`` gloo ranks; their
        results in rank order.

        The ranks are Python processes (:mod:`.rank_main`) started with ``ip netns exec <their
        node's namespace>`` at the first call, with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
        ``LOCAL_WORLD_SIZE``, ``NODE_RANK`` and ``GLOO_SOCKET_IFNAME=eth0`` set; each joins the
        default group (``init_process_group("gloo", store=FileStore(...))``, the store a file in a
        temporary directory) once and stays warm for the next calls, like :func:`collnb.launch`'s
        ranks (but not collnb's warm pool: a forked rank cannot move into another network
        namespace). Each call runs with the steps of every collnb rank (:class:`collnb.ranks.Call`:
        torch.distributed's wrappers, the instruments) and finds its rank as a fresh script would
        (:class:`collnb.ranks.RankState`). A call after a failure, a timeout, or a call that changed
        a rank for good starts fresh ranks (a few seconds: a new interpreter and ``import torch``
        each). ``fn`` and ``args`` travel as :func:`collnb.launch` sends them (a function of
        ``__main__`` or a notebook by value); results must pickle. Each rank's printed lines are
        shown as they come, prefixed ``[rank r]``; the backend's C++ log lines are kept for the
        error (``err.backend_log``), or printed at the end of a call that succeeded.

        Args:
            fn: ``fn(rank, world_size, *args)``, run on every rank.
            args: extra positional arguments, the same on every rank.
            timeout: seconds for the call, > 0, counted once its ranks are up (new ranks first have
                :data:`START_TIMEOUT_S` to start and import torch). Warm ranks keep their
                groups' timeout; new ones get the larger of ``timeout`` and :attr:`collective_timeout`.
            world_size: run on the first ``world_size`` ranks only (rank ``r`` still on node
                ``r // ranks_per_node``), 1..the cluster's world size; default all of them. The warm
                ranks are of one world size: a call of another one restarts them at that size.
            debug: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` in the ranks, as :func:`collnb.launch`'s
                ``debug`` (a rank calling another collective, shape or dtype than its peers fails
                with torch's clear message); ``None``: as the warm ranks have it (off for new ones).
                Ranks with the other setting restart (torch reads it when a group is made).

        Raises:
            ClusterUnavailable: the cluster is modelled, not entered or closed.
            ClusterRankError: a rank raised or died; the root cause is named with its traceback
                (collnb's blame: a rank's own error before a peer's lost connection), every rank
                was stopped.
            ClusterTimeout: past ``timeout``; every rank was killed, the ones still running are
                named with where they were. New ranks not up after :data:`START_TIMEOUT_S`: every
                rank was stopped, the ones not started named.
        """
        with self._lock:  # one call at a time on the warm ranks (an explorer's worker thread, a cell)
            return self._call(fn, tuple(args), {}, timeout, world_size, None, Instruments(), None, debug)

    def run(self, request: LaunchRequest) -> list[Any]:
        """Run a checked :func:`collnb.launch` request (:class:`.rankset.ClusterRanks`) on these
        ranks: its world size, timeout, the timeout of every collective (``collective_timeout``: the
        default group's and those its function makes), its Flight Recorder's size (warm ranks made
        with another timeout or size restart, as local ranks do) and its instruments (:class:`collnb.ranks.Instruments`). Returns what
        :func:`collnb.launch` returns (a :class:`collnb.ranks.LaunchResults` with ``.calls`` and
        ``.timeline`` when they were recorded); raises as :meth:`launch`."""
        plan = request.plan
        with self._lock:
            return self._call(request.fn, request.args, request.kwargs, plan.timeout, plan.world_size,
                              plan.setup.collective_timeout, plan.instruments, plan.setup.flight_recorder,
                              plan.setup.debug)

    def _call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], timeout: float,
              world_size: int | None, collective_timeout: float | None, instruments: Instruments,
              flight_recorder: int | None, debug: bool | None = None) -> list[Any]:
        """One call (:meth:`launch`, :meth:`run`). ``collective_timeout``: seconds for the ranks'
        collectives, ``None``: whatever the warm ranks have (for new ones the larger of ``timeout``
        and :attr:`collective_timeout`); ``flight_recorder``: ``TORCH_FR_BUFFER_SIZE`` of the ranks,
        ``None``: whatever the warm ranks have (0 for new ones); ``debug``: ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
        or not, ``None``: whatever the warm ranks have (off for new ones). With DETAIL, collnb's own
        functions that make the same calls on every rank run on a group of the same ranks made
        without its wrapper, as on local ranks (:func:`collnb.ranks.same_on_every_rank`)."""
        self._need_emulated()
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(_("timeout must be > 0 seconds; got {value}").format(value=timeout))
        ws = self.world_size if world_size is None else check_int("world_size", world_size, 1, self.world_size)
        fr = (self._fr if self._procs else 0) if flight_recorder is None else flight_recorder
        if debug is not None and not isinstance(debug, bool):
            raise TypeError(_("debug must be True or False; got {value}").format(value=repr(debug)))
        detail = (self._debug if self._procs else False) if debug is None else debug
        try:
            task = dumps((fn, args, kwargs, code_files(fn)))
        except Exception as exc:
            raise TypeError(_("cannot send {fn} and its arguments to the virtual cluster's ranks: {error}").format(
                fn=repr(fn), error=exc)) from exc
        if collective_timeout is not None:
            group_s = float(collective_timeout)
        else:  # the warm ranks' own, or, for new ones, enough for the call
            group_s = self._group_timeout if self._procs else float(max(timeout, self.collective_timeout))
        if not self._procs or (self._ws, self._fr, self._group_timeout, self._debug) != (ws, fr, group_s, detail) \
                or any(p.poll() is not None for p in self._procs):
            self._stop_ranks()
            self._start_ranks(ws, fr, group_s, detail)
            self._wait_started()
        # the call's time starts once its ranks are up (as on local ranks, whose pool is forked ready)
        deadline = time.monotonic() + timeout
        assert self._work is not None
        self._seq += 1
        seq, work = self._seq, self._work
        run = Run(ws, 1000 * seq, task, instruments, get_language(),
                  unwrapped=detail and runs_unwrapped(fn, args, kwargs))
        log = BackendLog(instruments.show_backend_log)
        try:
            with open(os.path.join(work, f"call-{seq}.pkl"), "wb") as f:
                pickle.dump((run, group_s), f, protocol=pickle.HIGHEST_PROTOCOL)
            for p in self._procs:
                assert p.stdin is not None
                p.stdin.write(f"{seq}\n".encode())
                p.stdin.flush()
            answers, timed_out = self._wait(seq, deadline, log)
            pending = [r for r in range(ws) if r not in answers]
            stacks = self._stacks(pending)
            self._pump(log, final=True)
            results = conclude(list(range(ws)), answers, group_s, "run", stacks)
        except RankError as err:
            self._stop_ranks()
            raised = self._on_node(err)
            attach_backend_log(raised, log.take(), "gloo")
            raise raised from None
        except LaunchTimeout as err:
            self._stop_ranks()
            running = ", ".join(map(str, err.pending))
            head = _("the virtual cluster's ranks ran past timeout={timeout:g} s: ranks {ranks} were still running "
                     "and every rank was killed").format(timeout=timeout, ranks=running)
            detail = err.args[0].partition("\n")[2]
            late = ClusterTimeout(head + ("\n" + detail if detail else ""), err.pending, err.outcomes)
            attach_backend_log(late, log.take(), "gloo")
            raise late from None
        except BaseException:
            self._pump(log, final=True)
            log.release()
            self._stop_ranks()
            raise
        log.release()
        for r in range(ws):
            for name in (f"result-{seq}-{r}.pkl", f"call-{seq}.pkl"):
                try:
                    os.unlink(os.path.join(work, name))
                except OSError:
                    pass
        done = [cast(RankResult, answers[r]) for r in range(ws)]
        retired = {a.retire for a in done if a.retire}
        for why in retired:
            sys.stderr.write("[collnb] " + _("the last call {why} on rank(s) {ranks} of the virtual cluster; its next "
                                             "call starts fresh ranks").format(
                why=why, ranks=", ".join(str(a.rank) for a in done if a.retire == why)) + "\n")
        if retired or not all(a.intact for a in done) or len({a.seq for a in done}) > 1:
            self._stop_ranks()  # changed for good, its group destroyed, or operations left unmatched
        return launch_results(results, [a.recorded for a in done])

    def _on_node(self, err: RankError) -> ClusterRankError:
        """``err`` as a :class:`ClusterRankError` whose first line names the rank's node."""
        text, summary = err.args[0], err.summary
        if err.rank is not None:
            head = f"rank {err.rank}"
            where = f"{head} ({_('node {node}').format(node=self.node_of(err.rank))})"
            text = where + text[len(head):] if text.startswith(head) else text
            summary = where + summary[len(head):] if summary.startswith(head) else summary
        raised = ClusterRankError(text, err.rank, err.exc_type, err.rank_traceback, err.outcomes)
        raised.__dict__.update(err.__dict__)
        raised.summary = summary
        return raised

    def _start_ranks(self, ws: int, flight_recorder: int, group_timeout: float, debug: bool = False) -> None:
        """Start ``ws`` ranks, one process each inside its node's namespace (:meth:`launch`), with
        ``flight_recorder`` Flight Recorder entries (0: off), ``group_timeout`` seconds for their
        default group's collectives and ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` where ``debug``."""
        self._work = tempfile.mkdtemp(prefix=f"collnb-cluster-{os.getpid()}-")  # this process's, by name
        self._seq = 0
        self._ws = ws
        self._fr = flight_recorder
        self._group_timeout = group_timeout
        self._debug = debug
        self._shown = {}
        self._partial = {}
        path = os.pathsep.join(p for p in (x or os.getcwd() for x in sys.path) if os.path.isdir(p))
        assert self._network is not None
        for rank in range(ws):
            node = self.node_of(rank)
            env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(ws),
                   "LOCAL_RANK": str(rank % self.ranks_per_node), "LOCAL_WORLD_SIZE": str(self.ranks_per_node),
                   "NODE_RANK": str(node), "GLOO_SOCKET_IFNAME": INTERFACE, "PYTHONPATH": path,
                   "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
            with open(os.path.join(self._work, f"out-{rank}"), "wb") as out, \
                    open(os.path.join(self._work, f"err-{rank}"), "wb") as err:
                self._procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", self._network.nodes[node], sys.executable, RANK_FILE, self._work,
                     str(rank), str(ws), repr(self._group_timeout), str(flight_recorder), INTERFACE,
                     "1" if debug else "0"],
                    env=env, stdout=out, stderr=err, stdin=subprocess.PIPE, start_new_session=True))

    def _wait_started(self) -> None:
        """Wait until every rank just started has imported torch and collnb and said so
        (``DIR/up-RANK``, :mod:`.rank_main`), or one of them has exited (the call then reports it).
        ``import torch`` takes 3-5 s on an idle machine and several times that on a loaded one.

        Raises:
            ClusterTimeout: not every rank was up after :data:`START_TIMEOUT_S` seconds (they are
                stopped).
        """
        assert self._work is not None
        work, procs = self._work, self._procs
        down = wait_until_up(work, range(len(procs)), lambda: any(p.poll() is not None for p in procs), START_TIMEOUT_S)
        if down:
            self._stop_ranks()
            raise ClusterTimeout(ngettext("the virtual cluster's rank {ranks} had not started (imported torch) after "
                                          "{seconds:g} s; every rank was stopped. Is the machine overloaded? Run the "
                                          "call again when it is quieter.",
                                          "the virtual cluster's ranks {ranks} had not started (imported torch) after "
                                          "{seconds:g} s; every rank was stopped. Is the machine overloaded? Run the "
                                          "call again when it is quieter.", len(down)).format(
                                       ranks=", ".join(map(str, down)), seconds=START_TIMEOUT_S), down,
                                 {r: _("not started") if r in down else _("started") for r in range(len(procs))})

    def _stop_ranks(self) -> None:
        """Stop every rank (SIGKILL to each one's process group) and remove their directory."""
        _kill(self._procs)
        for p in self._procs:
            if p.stdin is not None:
                try:
                    p.stdin.close()
                except OSError:
                    pass
        self._procs = []
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def _pump(self, log: BackendLog, final: bool = False) -> None:
        """Show what each rank printed since the last look, line by line, prefixed ``[rank r]``:
        stdout here, stderr on ``sys.stderr`` except the backend's C++ log lines, which ``log``
        keeps (``show_backend_log``: lets through). ``final``: an unfinished last line too."""
        if self._work is None:
            return
        for r in range(self._ws):
            for stream, name in (("stdout", "out"), ("stderr", "err")):
                key = (r, stream)
                try:
                    with open(os.path.join(self._work, f"{name}-{r}"), "rb") as f:
                        f.seek(self._shown.get(key, 0))
                        data = f.read(1 << 20)
                        self._shown[key] = f.tell()
                except OSError:
                    continue
                data = self._partial.pop(key, b"") + data
                lines = data.split(b"\n")
                if lines[-1] and not final:
                    self._partial[key] = lines[-1]
                lines = lines[:-1] if lines[-1] == b"" or not final else lines
                out = sys.stdout if stream == "stdout" else sys.stderr
                for raw in lines:
                    text = raw.decode("utf-8", "replace")
                    if stream == "stderr" and log.keeps(r, raw):
                        log.keep(r, text)
                    else:
                        out.write(f"[rank {r}] {text}\n")
                out.flush()

    def _answers(self, work: str, seq: int, procs: Sequence[Any], answers: dict[int, RankEvent]) -> None:
        """Add to ``answers`` what every rank that had not answered call ``seq`` says now: its answer
        file (:class:`collnb.ranks.RankResult` or :class:`collnb.ranks.RankFailure`, at the rank's own
        monotonic time), or, for a process that ended without one, a :class:`collnb.ranks.RankExit`
        with its stderr's end."""
        for r, p in enumerate(procs):
            if r in answers:
                continue
            path = os.path.join(work, f"result-{seq}-{r}.pkl")
            ended = p.poll() is not None
            if os.path.exists(path):
                with open(path, "rb") as f:
                    t, answer = pickle.load(f)
                answers[r] = (RankFailure(r, t, answer) if isinstance(answer, Failed) else
                              RankResult(r, t, answer.payload, seq=answer.seq, intact=answer.intact,
                                         recorded=answer.recorded, retire=answer.retire))
            elif ended:
                answers[r] = RankExit(r, time.monotonic(), p.poll(), _tail(os.path.join(work, f"err-{r}"), 4000))

    def _wait(self, seq: int, deadline: float, log: BackendLog) -> tuple[dict[int, RankEvent], bool]:
        """Every rank's answer to call ``seq`` (rank -> event), showing their output meanwhile; after a
        failure, those that came within :data:`SETTLE_S`; at ``deadline``, those that came
        (``True``: it ran out)."""
        assert self._work is not None
        work, procs = self._work, self._procs
        answers: dict[int, RankEvent] = {}
        failed_at: float | None = None
        last_pump = 0.0
        while True:
            self._answers(work, seq, procs, answers)
            now = time.monotonic()
            if now - last_pump > 0.05:
                self._pump(log)
                last_pump = now
            if failed_at is None and any(not isinstance(a, RankResult) for a in answers.values()):
                failed_at = now
            if len(answers) == len(procs) or (failed_at is not None and now - failed_at > SETTLE_S):
                return answers, False
            if now > deadline:
                return answers, True
            time.sleep(0.01)

    def _stacks(self, ranks: Sequence[int]) -> dict[Any, Any]:
        """Where each of ``ranks`` (still running) is: its Python stack, asked with SIGUSR1
        (:mod:`faulthandler`), as ``{rank: frames}``, or ``{("state", rank): words}`` when it did not
        say (the launcher's blame reads them: :func:`collnb.ranks.conclude`)."""
        stacks: dict[Any, Any] = {}
        if not ranks or self._work is None:
            return stacks
        for r in ranks:
            try:
                os.truncate(os.path.join(self._work, f"stack-{r}.txt"), 0)
                os.kill(self._procs[r].pid, signal.SIGUSR1)
            except OSError:
                pass
        wait_for_stacks([os.path.join(self._work, f"stack-{r}.txt") for r in ranks])
        for r in ranks:
            try:
                with open(os.path.join(self._work, f"stack-{r}.txt")) as f:
                    frames = named_cells(parse_stack(f.read()))
            except OSError:
                frames = []
            if frames:
                stacks[r] = frames
            else:
                stacks[("state", r)] = _("did not say where it was (node {node}, pid {pid})").format(
                    node=self.node_of(r), pid=self._procs[r].pid)
        return stacks


def _tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every rank's process group (the ranks this call started, each in its own session),
    then reap them."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
