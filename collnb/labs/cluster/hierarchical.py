"""Hierarchical all_reduce on a :class:`~collnb.labs.cluster.VirtualCluster`'s real gloo ranks,
against the flat ring, with the shaped link measured and a two-tier α-β model predicting both.

**The scheme** (``N`` nodes of ``L`` ranks, ``m`` bytes per rank):

1. intra-node ``reduce_scatter`` among the ``L`` ranks of a node: each holds ``m/L`` bytes of its
   node's sum;
2. inter-node ``all_reduce`` of that shard among the ``N`` ranks with the same local rank (one per
   node): the ``L`` such all_reduces run at once and share each node's link;
3. intra-node ``all_gather`` of the shards: every rank holds the global sum.

Each node's link carries ``2(N-1)/N m`` bytes each way, as the flat ring's busiest link does, but
in ``2(N-1)`` rounds instead of ``2(NL-1)``, and ``L`` streams share it. Sources: Horovod's
``HOROVOD_HIERARCHICAL_ALLREDUCE`` (``NCCLHierarchicalAllreduce::Execute`` in
horovod/common/ops/nccl_operations.cc: "NCCL ReduceScatter - Parallelized MPI Allreduce - NCCL
Allgather"; A. Sergeev, M. Del Balso, "Horovod: fast and easy distributed deep learning in
TensorFlow", arXiv:1802.05799, 2018, for its ring all_reduce); H. Mikami et al., "Massively
Distributed SGD: ImageNet/ResNet-50 Training in a Flash", arXiv:1811.05233, 2018 (2D-Torus
all_reduce: reduce_scatter, all_reduce across, all_gather); X. Jia et al., "Highly Scalable Deep
Learning Training System with Mixed-Precision: Training ImageNet in Four Minutes",
arXiv:1807.11205, 2018 (hierarchical all_reduce with a reduce / broadcast in the node instead).

**The model** (:class:`TierModel`): one :class:`collnb.CostModel` per tier, intra-node and
inter-node; any schedule is priced round by round by :func:`collnb.algorithms.tier_round_costs`
(a transfer on the tier it crosses, a node's ranks sharing its link), which for these two gives
Thakur et al. 2005's ring formulas (:func:`collnb.algorithms.closed_form`):

* flat ring over ``p = NL`` ranks numbered node by node: every round has an inter-node hop, and
  the round waits for it, so ``T_flat = ring all_reduce(p, m)`` with the inter tier's α and β (each
  node's link carries one stream per direction);
* hierarchical: ``reduce_scatter ring(L, m)`` + ``all_gather ring(L, m)`` on the intra tier, plus
  ``all_reduce ring(N, m/L)`` on the inter tier with ``β`` times ``L`` (the ``L`` concurrent
  streams share the node's link fairly).

γ (reduction per byte) is one number for both tiers (:data:`collnb.DEFAULT_MODEL`'s unless given).
Latency cannot be emulated here (no netem, :mod:`.network`): ``inter_latency_ms`` enters α only,
and every prediction that uses it is labelled modelled.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from ...algorithms import DEFAULT_MODEL, CostModel, TierPrediction, TwoTier, default_algorithm, predict_tiers
from ...i18n import _
from ...vocabulary import check_int

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist


__all__ = ["node_groups", "hierarchical_all_reduce", "LinkMeasurement", "measure_link", "TierModel",
           "Comparison", "compare_all_reduce", "format_comparison"]

MiB = 1 << 20

#: :func:`node_groups`' pair: this rank's node group and its cross-node group.
NodeGroups = tuple["dist.ProcessGroup | None", "dist.ProcessGroup | None"]


# -- the rank side ----------------------------------------------------------------------------

def node_groups(nodes: int, ranks_per_node: int) -> NodeGroups:
    """``(intra, inter)``: this rank's node group (ranks ``n L .. n L + L - 1``) and its cross-node
    group (the ranks with its local rank, one per node), made with ``dist.new_group``. Every rank
    must call it (new_group is collective: every group is made on every rank, in one order)."""
    import torch.distributed as dist
    rank = dist.get_rank()
    intra: dist.ProcessGroup | None = None
    inter: dist.ProcessGroup | None = None
    for n in range(nodes):
        g = dist.new_group(list(range(n * ranks_per_node, (n + 1) * ranks_per_node)))
        if rank // ranks_per_node == n:
            intra = g
    for local in range(ranks_per_node):
        g = dist.new_group(list(range(local, nodes * ranks_per_node, ranks_per_node)))
        if rank % ranks_per_node == local:
            inter = g
    return intra, inter


def hierarchical_all_reduce(tensor: torch.Tensor, groups: NodeGroups) -> None:
    """SUM all_reduce of ``tensor`` (1-D, contiguous, ``numel`` divisible by the node size) in place,
    hierarchically: ``reduce_scatter_single`` in the node, ``all_reduce`` of the shard across nodes,
    ``all_gather_single`` in the node (module doc). ``groups``: :func:`node_groups`'s pair."""
    import torch
    import torch.distributed as dist
    intra, inter = groups
    local = dist.get_world_size(intra)
    if tensor.dim() != 1 or tensor.numel() % local:
        raise ValueError(_("hierarchical_all_reduce needs a 1-D tensor whose numel divides by the {n} ranks of a "
                           "node; got shape {shape}").format(n=local, shape=tuple(tensor.shape)))
    shard = torch.empty(tensor.numel() // local, dtype=tensor.dtype)
    dist.reduce_scatter_single(shard, tensor, group=intra)
    dist.all_reduce(shard, group=inter)
    dist.all_gather_single(tensor, shard, group=intra)


def _link_rank(rank: int, world_size: int, ranks_per_node: int, nbytes: int, repeats: int) -> dict[str, list[float]]:
    """Rank side of :func:`measure_link`: rank 0 sends ``nbytes`` to rank ``L`` (other node) and to
    rank 1 (same node), one at a time, and times send + a 1-float acknowledgement; then 20
    round trips of one float each way (the latency: half a round trip). Rank 0's answer: seconds per
    message of each pair (``"inter"``, ``"intra"``) and per round trip (``"inter_rtt"``, ``"intra_rtt"``);
    the other ranks' lists are empty."""
    import torch
    import torch.distributed as dist
    buf, ack = torch.ones(nbytes // 4), torch.zeros(1)
    pairs = ([("inter", ranks_per_node)] if world_size > ranks_per_node else []) + (
        [("intra", 1)] if ranks_per_node > 1 else [])
    out: dict[str, list[float]] = {}
    for name, peer in pairs:
        times: list[float] = []
        for i in range(repeats + 1):  # the first, 1 MiB at most, opens the TCP window
            n = min(buf.numel(), MiB // 4) if i == 0 else buf.numel()
            dist.barrier()
            if rank == 0:
                t0 = time.perf_counter()
                dist.send(buf[:n], peer)
                dist.recv(ack, peer)
                times.append(time.perf_counter() - t0)
            elif rank == peer:
                dist.recv(buf[:n], 0)
                dist.send(ack, 0)
        out[name] = times[1:]
        trips: list[float] = []
        dist.barrier()
        for _i in range(21):  # the first is not kept
            if rank == 0:
                t0 = time.perf_counter()
                dist.send(ack, peer)
                dist.recv(ack, peer)
                trips.append(time.perf_counter() - t0)
            elif rank == peer:
                dist.recv(ack, 0)
                dist.send(ack, 0)
        out[name + "_rtt"] = trips[1:]
    return out


class _CompareTimes(TypedDict):
    """What every rank of :func:`_compare_rank` answers: ``times[size][repeat]`` the slowest rank's
    seconds of ``(flat, hierarchical)``, ``wrong[size]`` how many calls of each, over every rank, missed the sum."""

    times: list[list[list[float]]]
    wrong: list[list[float]]


def _compare_rank(rank: int, world_size: int, nodes: int, ranks_per_node: int, sizes: list[int],
                  repeats: int) -> _CompareTimes:
    """Rank side of :func:`compare_all_reduce`: flat ``dist.all_reduce`` and
    :func:`hierarchical_all_reduce` interleaved, each timed between barriers; every result checked
    against the exact sum; the slowest rank's time of each call (MAX all_reduce)."""
    import torch
    import torch.distributed as dist
    groups = node_groups(nodes, ranks_per_node)
    times = torch.zeros(len(sizes), repeats + 1, 2, dtype=torch.float64)
    wrong = torch.zeros(len(sizes), 2)
    runs: tuple[Callable[[torch.Tensor], object], ...] = (
        lambda t: dist.all_reduce(t), lambda t: hierarchical_all_reduce(t, groups))
    for s, nbytes in enumerate(sizes):
        n = nbytes // 4
        base = (torch.arange(n) % 13).float()
        x = base + rank
        expected = base * world_size + world_size * (world_size - 1) / 2  # small integers: exact in float32
        buf = torch.empty(n)
        for i in range(repeats + 1):  # i == 0: warm-up, not kept
            for k, run in enumerate(runs):
                buf.copy_(x)
                dist.barrier()
                t0 = time.perf_counter()
                run(buf)
                times[s, i, k] = time.perf_counter() - t0
                wrong[s, k] += float(not torch.equal(buf, expected))
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(wrong)
    return _CompareTimes(times=times[:, 1:].tolist(), wrong=wrong.tolist())


# -- the link ---------------------------------------------------------------------------------


class LaunchingCluster(Protocol):
    """What the measurements here need of a cluster: a :class:`~.clusters.Cluster` or a
    :class:`~.virtual.VirtualCluster` (a protocol, so that this module imports neither: they import it)."""

    @property
    def nodes(self) -> int: ...
    @property
    def ranks_per_node(self) -> int: ...
    @property
    def inter_gbps(self) -> float | None: ...
    @property
    def inter_latency_ms(self) -> float: ...
    def launch(self, fn: Callable[..., Any], args: Sequence[Any] = (), timeout: float = 120.0) -> list[Any]: ...

@dataclass(frozen=True)
class LinkMeasurement:
    """One TCP stream of gloo ``send``s, rank 0 to a rank of another node (``inter_gbps``) and to a
    rank of its own node (``intra_gbps``), median over ``repeats``; rates in Gbit/s of payload
    (``nbytes * 8 / seconds / 1e9``). ``asked_gbps``: the cluster's inter-node rate (``None``:
    unshaped). ``None`` for a rate the cluster's shape has no pair for (one node, or one rank per
    node). ``inter_alpha_s``/``intra_alpha_s``: half the median round trip of a one-float message
    (gloo ``send`` + ``recv`` from Python): each tier's α, in seconds."""

    asked_gbps: float | None
    inter_gbps: float | None
    intra_gbps: float | None
    nbytes: int
    repeats: int
    inter_alpha_s: float | None = None
    intra_alpha_s: float | None = None

    @property
    def ratio(self) -> float | None:
        """Measured inter rate over the asked rate: about 0.956, tbf counting the headers (up to ~0.97 over one
        16 MiB message, its bucket's 256 KiB burst leaving at once)."""
        if self.asked_gbps is None or self.inter_gbps is None:
            return None
        return self.inter_gbps / self.asked_gbps

    def __str__(self) -> str:
        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"
        text = _("inter-node link: {measured} Gbit/s measured, {asked} Gbit/s asked").format(
            measured=fmt(self.inter_gbps), asked=fmt(self.asked_gbps) if self.asked_gbps else _("unshaped"))
        if self.ratio is not None:
            text += _(" ({percent:.1f}% of the rate; tbf counts frame headers, so about 95.6%, a little more while its bucket's "
                      "burst lasts)").format(
                percent=100 * self.ratio)
        text += _("; intra-node (local route): {intra} Gbit/s; one stream, {size:g} MiB messages").format(
            intra=fmt(self.intra_gbps), size=self.nbytes / MiB)
        if self.inter_alpha_s is not None or self.intra_alpha_s is not None:
            text += _("; latency (half a round trip of one float): inter {inter} µs, intra {intra} µs").format(
                inter="-" if self.inter_alpha_s is None else f"{self.inter_alpha_s * 1e6:.0f}",
                intra="-" if self.intra_alpha_s is None else f"{self.intra_alpha_s * 1e6:.0f}")
        return text


def measure_link(cluster: LaunchingCluster, nbytes: int = 16 * MiB, repeats: int = 3, verbose: bool = True,
                 timeout: float = 120.0) -> LinkMeasurement:
    """Measure the shaped inter-node link and the intra-node route of an emulated ``cluster`` with
    one stream of big messages (:class:`LinkMeasurement`); prints it when ``verbose``.

    Args:
        nbytes: bytes per message, a multiple of 4, >= 1 MiB. repeats: timed messages per pair (>= 1).

    Raises:
        ClusterUnavailable: the cluster is modelled. ValueError / TypeError: bad sizes.
    """
    check_int("repeats", repeats, 1)
    nbytes = check_int("nbytes", nbytes, MiB)
    if nbytes % 4:
        raise ValueError(_("nbytes must be a multiple of 4 (float32); got {value}").format(value=nbytes))
    per: dict[str, list[float]] = cluster.launch(_link_rank, (cluster.ranks_per_node, nbytes, repeats), timeout=timeout)[0]

    def rate(name: str) -> float | None:
        return nbytes * 8 / statistics.median(per[name]) / 1e9 if name in per else None

    def alpha(name: str) -> float | None:
        return statistics.median(per[name + "_rtt"]) / 2 if name + "_rtt" in per else None
    link = LinkMeasurement(cluster.inter_gbps, rate("inter"), rate("intra"), nbytes, repeats, alpha("inter"),
                           alpha("intra"))
    if verbose:
        print(link)
    return link


# -- the model --------------------------------------------------------------------------------

class TierOptions(TypedDict, total=False):
    """:meth:`TierModel.from_rates`' keyword arguments that :meth:`TierModel.from_link` passes on."""

    alpha: float
    gamma: float
    intra_shared: bool
    intra_latency_ms: float
    intra_alpha: float | None
    inter_alpha: float | None


@dataclass(frozen=True)
class TierModel:
    """Two-tier α-β-γ model of a cluster (module doc): ``intra`` and ``inter`` are
    :class:`collnb.CostModel` objects (α s/message, β s/byte, γ s/byte reduced); ``intra_shared``: the
    node's intra-node tier is one shared medium (a virtual cluster whose loopback is shaped,
    :mod:`.network`). Any schedule is priced round by round by
    :func:`collnb.algorithms.tier_round_costs` (:meth:`predict`)."""

    nodes: int
    ranks_per_node: int
    intra: CostModel
    inter: CostModel
    intra_shared: bool = False

    @classmethod
    def from_rates(cls, nodes: int, ranks_per_node: int, intra_gbps: float, inter_gbps: float,
                   inter_latency_ms: float = 0.0, alpha: float = DEFAULT_MODEL.alpha,
                   gamma: float = DEFAULT_MODEL.gamma, intra_shared: bool = False,
                   intra_latency_ms: float = 0.0, intra_alpha: float | None = None,
                   inter_alpha: float | None = None) -> TierModel:
        """β of each tier from its rate in Gbit/s of payload (``beta = 8 / (gbps * 1e9)``); α
        ``alpha`` seconds (default :data:`collnb.DEFAULT_MODEL`'s 50 µs, gloo over loopback), or
        a tier's own (``intra_alpha``, ``inter_alpha``: e.g. :func:`measure_link`'s), plus each
        tier's latency (``intra_latency_ms``, ``inter_latency_ms``: modelled, the kernel here
        cannot delay packets); γ ``gamma``."""
        if not (intra_gbps > 0 and inter_gbps > 0):
            raise ValueError(_("the tiers' rates must be > 0 Gbit/s; got intra {intra}, inter {inter}").format(
                intra=intra_gbps, inter=inter_gbps))
        src = _("two-tier model: intra {intra:.3g} Gbit/s, inter {inter:.3g} Gbit/s, {latency:g} ms inter latency "
                "(modelled)").format(intra=intra_gbps, inter=inter_gbps, latency=inter_latency_ms)
        return cls(check_int("nodes", nodes, 1), check_int("ranks_per_node", ranks_per_node, 1),
                   CostModel((alpha if intra_alpha is None else intra_alpha) + intra_latency_ms / 1000,
                             8 / (intra_gbps * 1e9), gamma, src),
                   CostModel((alpha if inter_alpha is None else inter_alpha) + inter_latency_ms / 1000,
                             8 / (inter_gbps * 1e9), gamma, src), bool(intra_shared))

    @classmethod
    def from_link(cls, cluster: LaunchingCluster, link: LinkMeasurement, **kwargs: Unpack[TierOptions]) -> TierModel:
        """The model of ``cluster`` with the rates ``link`` measured (:func:`measure_link`) and the
        cluster's modelled ``inter_latency_ms``; the intra tier is shared when the cluster shapes
        its nodes' loopback."""
        kwargs.setdefault("intra_shared", getattr(cluster, "intra_gbps", None) is not None)
        kwargs.setdefault("intra_alpha", link.intra_alpha_s)
        kwargs.setdefault("inter_alpha", link.inter_alpha_s)
        intra, inter = link.intra_gbps, link.inter_gbps
        if intra is None or inter is None:  # a tier the measurement had no pair for (one node, or one rank a node)
            raise ValueError(_("the tiers' rates must be > 0 Gbit/s; got intra {intra}, inter {inter}").format(
                intra=intra, inter=inter))
        return cls.from_rates(cluster.nodes, cluster.ranks_per_node, intra, inter, cluster.inter_latency_ms, **kwargs)

    @property
    def two_tier(self) -> TwoTier:
        """The same tiers as :class:`collnb.algorithms.TwoTier` (what the round pricing takes)."""
        return TwoTier(self.ranks_per_node, self.intra, self.inter, self.intra_shared)

    def prediction(self, primitive: str, algorithm: str, nbytes: float) -> TierPrediction:
        """:func:`collnb.algorithms.predict_tiers` on this cluster: seconds, rounds, inter-node bytes."""
        return predict_tiers(primitive, algorithm, self.nodes, nbytes, self.two_tier)

    def predict(self, primitive: str, algorithm: str, nbytes: float) -> float:
        """Predicted seconds of ``algorithm`` of ``primitive`` (any of :data:`collnb.ALGORITHMS` or
        :data:`collnb.algorithms.TIERED_ALGORITHMS`; ``"builtin"`` is priced as the ring for
        all_reduce, all_gather and reduce_scatter, gloo's own algorithm for them, else as collnb's
        default algorithm of the primitive) on ``nbytes`` bytes per rank."""
        if algorithm == "builtin":
            algorithm = "ring" if primitive in ("all_reduce", "all_gather", "reduce_scatter") else \
                default_algorithm(primitive)
        return self.prediction(primitive, algorithm, nbytes).seconds

    def flat(self, nbytes: float) -> float:
        """Seconds of a flat ring all_reduce of ``nbytes`` bytes per rank over every rank: without a
        shared intra tier, ``ring all_reduce(p, m)`` with the inter tier's α and β (module doc)."""
        return self.predict("all_reduce", "ring", nbytes)

    def hierarchical(self, nbytes: float) -> float:
        """Seconds of the hierarchical all_reduce of ``nbytes`` bytes per rank (module doc)."""
        return self.predict("all_reduce", "hierarchical", nbytes)


# -- flat against hierarchical ----------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """One size of :func:`compare_all_reduce`: median seconds of the slowest rank (``flat_s``,
    ``hierarchical_s``), the model's (``predicted_*``, ``None`` without a model), and whether every
    result equalled the exact sum (``correct``)."""

    nbytes: int
    flat_s: float
    hierarchical_s: float
    predicted_flat_s: float | None
    predicted_hierarchical_s: float | None
    correct: bool

    @property
    def speedup(self) -> float:
        """Measured flat time over hierarchical time (> 1: hierarchical is faster)."""
        return self.flat_s / self.hierarchical_s

    @property
    def predicted_speedup(self) -> float | None:
        if self.predicted_flat_s is None or self.predicted_hierarchical_s is None:
            return None
        return self.predicted_flat_s / self.predicted_hierarchical_s


def compare_all_reduce(cluster: LaunchingCluster, sizes: Iterable[int] = (1 * MiB, 4 * MiB, 16 * MiB), repeats: int = 3, model: TierModel | None = None,
                       timeout: float = 300.0) -> list[Comparison]:
    """Time flat ``dist.all_reduce`` against :func:`hierarchical_all_reduce` (float32 SUM) on the
    ranks of an emulated ``cluster`` at each size in ``sizes`` (bytes per rank, multiples of
    ``4 * ranks_per_node``), ``repeats`` timed calls each after a warm-up; values checked against the
    exact sum on every rank. ``model``: a :class:`TierModel` whose predictions go beside.

    Raises:
        ClusterUnavailable: the cluster is modelled. ValueError: a size that does not split.
    """
    check_int("repeats", repeats, 1)
    checked = [check_int("nbytes", s, 4) for s in sizes]
    for s in checked:
        if s % (4 * cluster.ranks_per_node):
            raise ValueError(_("each size must be a multiple of 4 * ranks_per_node = {n} bytes; got {value}").format(
                n=4 * cluster.ranks_per_node, value=s))
    out: _CompareTimes = cluster.launch(_compare_rank, (cluster.nodes, cluster.ranks_per_node, checked, repeats),
                                        timeout=timeout)[0]
    rows = []
    for s, nbytes in enumerate(checked):
        flat = statistics.median(t[0] for t in out["times"][s])
        hier = statistics.median(t[1] for t in out["times"][s])
        rows.append(Comparison(nbytes, flat, hier, model.flat(nbytes) if model else None,
                               model.hierarchical(nbytes) if model else None, not any(out["wrong"][s])))
    return rows


def format_comparison(rows: list[Comparison]) -> str:
    """A text table of :func:`compare_all_reduce`'s rows: ms measured and predicted, the speedups and
    the predicted/measured ratio."""
    head = _("   size   flat ms   hier ms  measured flat/hier  model flat ms  model hier ms  model flat/hier  "
             "model/measured  values")
    lines = [head]
    for r in rows:
        pf = "-" if r.predicted_flat_s is None else f"{r.predicted_flat_s * 1e3:.1f}"
        ph = "-" if r.predicted_hierarchical_s is None else f"{r.predicted_hierarchical_s * 1e3:.1f}"
        ps = "-" if r.predicted_speedup is None else f"{r.predicted_speedup:.2f}"
        ratio = "-" if r.predicted_speedup is None else f"{r.predicted_speedup / r.speedup:.2f}"
        ok = _("exact") if r.correct else _("WRONG")
        lines.append(f"{r.nbytes / MiB:5g} MiB {r.flat_s * 1e3:9.1f} {r.hierarchical_s * 1e3:9.1f} "
                     f"{r.speedup:19.2f} {pf:>14} {ph:>14} {ps:>16} {ratio:>15}  {ok}")
    return "\n".join(lines)
