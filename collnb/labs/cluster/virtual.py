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
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...i18n import _
from ...vocabulary import check_int
from .network import INTERFACE, MAX_NODES, ClusterUnavailable, Network, available, sweep_leftovers

__all__ = ["VirtualCluster", "ClusterRankError", "ClusterTimeout", "MODES"]

#: ``"emulated"``: real namespaces and shaped links; ``"modelled"``: none could be made (the reason
#: is :attr:`VirtualCluster.why`), only the cost model answers.
MODES = ("emulated", "modelled")

#: What each rank process runs (``python -c``, inside ``ip netns exec NODE``): argv = dir, rank,
#: world size, collective timeout (s). It joins the group once, then runs one call per line
#: (the call's number) read from stdin, until stdin closes or a call fails.
_RANK_MAIN = r"""
import os, sys, threading, time
d, rank, world_size, group_timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
parent = os.getppid()
def _watch():  # the launcher is gone (killed): leave no orphan rank behind
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(70)
threading.Thread(target=_watch, daemon=True).start()
import datetime, traceback
import cloudpickle
import torch.distributed as dist
from collnb.ranks import is_comm_error
def failure(e):  # (kind, type, traceback, when it failed, a consequence of another rank's failure?)
    return ("error", type(e).__name__, traceback.format_exc(), time.time(), is_comm_error(e))
joined = None
try:
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(d, "store"), world_size), rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=group_timeout))
except BaseException as e:
    joined = failure(e)
for line in sys.stdin:
    seq = int(line)
    if joined is not None:
        out = joined
    else:
        try:
            with open(os.path.join(d, "call-%d.pkl" % seq), "rb") as f:
                fn, args = cloudpickle.load(f)
            out = ("ok", fn(rank, world_size, *args))
        except BaseException as e:
            out = failure(e)
    try:
        data = cloudpickle.dumps(out)
    except Exception as e:
        out = ("error", type(e).__name__, "rank %d's result could not be pickled: %r" % (rank, e), time.time(), False)
        data = cloudpickle.dumps(out)
    # written before anything else happens: a peer's "Connection closed by peer" must not be on disk
    # before the error that caused it
    with open(os.path.join(d, "result-%d-%d.tmp" % (seq, rank)), "wb") as f:
        f.write(data)
    os.replace(os.path.join(d, "result-%d-%d.tmp" % (seq, rank)), os.path.join(d, "result-%d-%d.pkl" % (seq, rank)))
    sys.stdout.flush()
    sys.stderr.flush()
    if out[0] != "ok":
        break
if joined is None and dist.is_initialized():
    dist.destroy_process_group()
os._exit(0)
"""


class ClusterRankError(RuntimeError):
    """A rank of :meth:`VirtualCluster.launch` raised (or died); ``rank`` is the first that failed,
    ``traceback`` its traceback text; every other rank was stopped."""

    def __init__(self, message: str, rank: int, traceback: str):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback


class ClusterTimeout(TimeoutError):
    """:meth:`VirtualCluster.launch` ran past its ``timeout``; every rank was killed."""


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
        self._procs: list[subprocess.Popen] = []
        self._work: str | None = None
        self._seq = 0
        self._ws = self.world_size
        self._shown: list[int] = []
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

    def node_of(self, rank: int) -> int:
        """The node rank ``rank`` runs on (``rank // ranks_per_node``)."""
        return rank // self.ranks_per_node

    def set_inter_gbps(self, gbps: float | None) -> None:
        """Change the inter-node rate (Gbit/s, or ``None``: unshaped) of a running cluster."""
        self._need_emulated()
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
               world_size: int | None = None) -> list[Any]:
        with self._lock:  # one call at a time on the warm ranks (an explorer's worker thread, a cell)
            return self._launch(fn, args, timeout, world_size)

    def _launch(self, fn: Callable[..., Any], args: Sequence[Any] = (), timeout: float = 120.0,
                world_size: int | None = None) -> list[Any]:
        """Run ``fn(rank, world_size, *args)`` on the cluster's ``world_size`` gloo ranks; their
        results in rank order.

        The ranks are Python processes started with ``ip netns exec <their node's namespace>`` at
        the first call, with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
        ``NODE_RANK`` and ``GLOO_SOCKET_IFNAME=eth0`` set; each joins the default group
        (``init_process_group("gloo", store=FileStore(...))``, the store a file in a temporary
        directory) once and stays warm for the next calls, like :func:`collnb.launch`'s ranks (but
        not collnb's warm pool: a forked rank cannot move into another network namespace). A call
        after a failure or a timeout starts fresh ranks (a few seconds: a new interpreter and
        ``import torch`` each). ``fn`` and ``args`` travel by cloudpickle (a function of
        ``__main__`` or a notebook by value); results must pickle. Each rank's printed lines are
        shown after the call, prefixed ``[rank r]``. Groups ``fn`` makes with ``dist.new_group``
        stay in the ranks until they restart.

        Args:
            fn: ``fn(rank, world_size, *args)``, run on every rank.
            args: extra positional arguments, the same on every rank.
            timeout: seconds for the call (and, at the ranks' start, their start and the group's
                collective timeout), > 0.
            world_size: run on the first ``world_size`` ranks only (rank ``r`` still on node
                ``r // ranks_per_node``), 1..the cluster's world size; default all of them. The warm
                ranks are of one world size: a call of another one restarts them at that size.

        Raises:
            ClusterUnavailable: the cluster is modelled, not entered or closed.
            ClusterRankError: a rank raised or died; the first one is named with its traceback,
                every rank was stopped.
            ClusterTimeout: past ``timeout``; every rank was killed, the ones still running are named.
        """
        import cloudpickle

        self._need_emulated()
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(_("timeout must be > 0 seconds; got {value}").format(value=timeout))
        ws = self.world_size if world_size is None else check_int("world_size", world_size, 1, self.world_size)
        deadline = time.monotonic() + timeout
        if not self._procs or self._ws != ws or any(p.poll() is not None for p in self._procs):
            self._stop_ranks()
            self._start_ranks(timeout, ws)
        assert self._work is not None
        self._seq += 1
        seq, work = self._seq, self._work
        try:
            with open(os.path.join(work, f"call-{seq}.pkl"), "wb") as f:
                cloudpickle.dump((fn, tuple(args)), f)
            for p in self._procs:
                assert p.stdin is not None
                p.stdin.write(f"{seq}\n".encode())
                p.stdin.flush()
            self._wait(seq, deadline, timeout)
            results = [self._result(work, seq, r)[1] for r in range(ws)]
        except BaseException:
            self._print_output()
            self._stop_ranks()
            raise
        self._print_output()
        for r in range(ws):
            try:
                os.unlink(os.path.join(work, f"result-{seq}-{r}.pkl"))
            except OSError:
                pass
        return results

    def _start_ranks(self, timeout: float, ws: int) -> None:
        """Start ``ws`` ranks, one process each inside its node's namespace (:meth:`launch`)."""
        self._work = tempfile.mkdtemp(prefix="collnb-cluster-")
        self._seq = 0
        self._ws = ws
        self._shown = [0] * ws
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
                    ["ip", "netns", "exec", self._network.nodes[node], sys.executable, "-c", _RANK_MAIN, self._work,
                     str(rank), str(ws), repr(float(max(timeout, self.collective_timeout)))],
                    env=env, stdout=out, stderr=err, stdin=subprocess.PIPE, start_new_session=True))

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

    def _print_output(self) -> None:
        """Print what each rank wrote to stdout since the last call, prefixed ``[rank r]``."""
        if self._work is None:
            return
        for r in range(self._ws):
            path = os.path.join(self._work, f"out-{r}")
            try:
                with open(path, "rb") as f:
                    f.seek(self._shown[r])
                    data = f.read(1 << 20)
                    self._shown[r] = f.tell()
            except OSError:
                continue
            for line in data.decode("utf-8", "replace").splitlines():
                print(f"[rank {r}] {line}")

    def _result(self, work: str, seq: int, rank: int) -> tuple:
        import cloudpickle
        with open(os.path.join(work, f"result-{seq}-{rank}.pkl"), "rb") as f:
            return cloudpickle.load(f)

    def _wait(self, seq: int, deadline: float, timeout: float) -> None:
        assert self._work is not None
        work, procs = self._work, self._procs
        while True:
            done = [os.path.exists(os.path.join(work, f"result-{seq}-{r}.pkl")) for r in range(len(procs))]
            failed = [r for r, p in enumerate(procs) if p.poll() is not None and not done[r]]
            errors = [r for r in range(len(procs)) if done[r] and self._result(work, seq, r)[0] == "error"]
            if failed or errors:
                # Let the other ranks' failures land (a peer of a failed rank fails within moments;
                # on a loaded machine the culprit's own result may come after its peers'), then blame.
                settle = time.monotonic() + 3.0
                while time.monotonic() < settle and not all(
                        p.poll() is not None or os.path.exists(os.path.join(work, f"result-{seq}-{r}.pkl"))
                        for r, p in enumerate(procs)):
                    time.sleep(0.05)
                rank, trace = self._first_failure(procs, work, seq)
                raise ClusterRankError(_("rank {rank} (node {node}) of the virtual cluster failed; every other rank "
                                         "was stopped. Its traceback:\n{traceback}").format(
                                             rank=rank, node=self.node_of(rank), traceback=trace), rank, trace)
            if all(done):
                return
            if time.monotonic() > deadline:
                running = [r for r in range(len(procs)) if not done[r]]
                raise ClusterTimeout(_("the virtual cluster's ranks ran past timeout={timeout:g} s: ranks {ranks} "
                                       "were still running and every rank was killed").format(
                                           timeout=timeout, ranks=", ".join(map(str, running))))
            time.sleep(0.01)

    def _first_failure(self, procs: list[subprocess.Popen], work: str, seq: int) -> tuple[int, str]:
        """(rank, traceback) of the rank to blame: the earliest error of a rank's own code (not a
        communication error such as gloo's "Connection closed by peer", which only follows another
        rank's failure; :func:`collnb.ranks.explain.tracebacks.is_comm_error` decides), else the first rank
        that died without a result (its stderr's end), else the earliest communication error."""
        own, comm = [], []
        for r in range(len(procs)):
            path = os.path.join(work, f"result-{seq}-{r}.pkl")
            if os.path.exists(path):
                result = self._result(work, seq, r)
                if result[0] == "error":
                    (comm if result[4] else own).append((result[3], r, result[2]))
        if own:
            _when, rank, trace = min(own)
            return rank, trace
        died = [r for r, p in enumerate(procs) if p.poll() is not None
                and not os.path.exists(os.path.join(work, f"result-{seq}-{r}.pkl"))]
        if comm and not died:
            _when, rank, trace = min(comm)
            return rank, trace
        rank = died[0] if died else min(comm)[1]
        return rank, _("exited with status {code} without a result; its stderr ends:\n{stderr}").format(
            code=procs[rank].poll(), stderr=_tail(os.path.join(work, f"err-{rank}"), 4000))


def _tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill(procs: list[subprocess.Popen]) -> None:
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
