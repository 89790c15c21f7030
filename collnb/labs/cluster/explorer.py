"""An explorer for a cluster, on the views' one explorer engine (:class:`collnb.views.Binder`):
nodes, ranks per node, the inter-node rate, the algorithm, the size and the round in; the round's
transfers coloured by tier out, with every round's time measured beside the two-tier model's
(:func:`explore_cluster`).

Its ``run`` makes or re-shapes the cluster and runs the algorithm once on the cluster's ranks
(:func:`collnb.labs.cluster.run_algorithm`): a change of nodes or ranks per node makes a new
:func:`collnb.cluster` (the old one, if the explorer made it, is closed), a change of the
inter-node rate re-shapes the running one (emulated) or the model's (modelled), a change of the
round alone redraws the last run. Its ``draw`` is :func:`collnb.labs.cluster.round_figure`, with a
caption giving the run's total, measured (the sum of the rounds' slowest ranks) beside the model's.
"""

from __future__ import annotations

import dataclasses
import io
from typing import TYPE_CHECKING, Any

from ...algorithms import schedule
from ...i18n import N_, _
from ...units import format_bytes
from ...views import Binder, Picture
from .compare import algorithms_for_cluster

if TYPE_CHECKING:
    from ...algorithms import Trace
    from .clusters import Cluster
    from .hierarchical import TierModel

#: What the explorer's ``run`` gives its ``draw``: the trace, the model and the cluster it ran on.
ClusterRun = tuple["Trace", "TierModel", "Cluster"]

__all__ = ["explore_cluster", "ClusterParams", "INTER_RATES", "SIZES"]

#: The inter-node rates offered (Gbit/s, label).
INTER_RATES = [("50 Mbit/s", 0.05), ("100 Mbit/s", 0.1), ("200 Mbit/s", 0.2), ("400 Mbit/s", 0.4),
               ("1 Gbit/s", 1.0), ("2 Gbit/s", 2.0), ("4 Gbit/s", 4.0)]
#: The sizes offered (bytes per rank).
SIZES = [16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]


@dataclasses.dataclass(frozen=True)
class ClusterParams:
    """What a learner sets: the shape, the inter-node rate (Gbit/s), the algorithm, the size (bytes
    per rank) and the round shown."""

    nodes: int = 2
    ranks_per_node: int = 2
    inter: float = 0.4
    algorithm: str = "hierarchical"
    size: int = 1 << 20
    round: int = 1


class ClusterExplorer(Binder[ClusterParams, ClusterRun]):
    """The explorer :func:`explore_cluster` returns (a :class:`collnb.views.Binder`): ``cluster`` is
    the cluster of the last run; ``close()`` also closes the cluster it made (not one it was given)."""

    name, what = "cluster-explorer", "cluster explorer"
    labels = {"nodes": N_("nodes"), "ranks_per_node": N_("ranks per node"), "inter": N_("inter-node"),
              "algorithm": N_("algorithm"), "size": N_("size"), "round": N_("round")}
    sliders = ("inter", "round")

    def __init__(self, params: ClusterParams, cluster: Cluster | None = None, primitive: str = "all_reduce",
                 wait: bool = True):
        self.primitive = primitive
        self.cluster = cluster
        self._own = cluster is None
        self._last: tuple[int, int, float, str, int] | None = None
        self._trace: Trace | None = None
        self._model: TierModel | None = None
        super().__init__(params, wait=wait)

    def choices(self, p: ClusterParams) -> dict[str, list[Any]]:
        algs = [a for a in algorithms_for_cluster(self.primitive) if a != "builtin"]
        rounds = schedule(self.primitive, p.algorithm, p.nodes * p.ranks_per_node,
                          ranks_per_node=p.ranks_per_node).n_rounds if p.algorithm in algs else 1
        return {"nodes": [1, 2, 3, 4], "ranks_per_node": [r for r in (1, 2, 3, 4) if p.nodes * r <= 16],
                "inter": INTER_RATES, "algorithm": algs, "size": [(format_bytes(s), s) for s in SIZES],
                "round": list(range(1, max(1, rounds) + 1))}

    def _cluster_for(self, p: ClusterParams) -> Cluster:
        from .clusters import cluster as make
        c = self.cluster
        if c is None or getattr(c, "mode", "closed") == "closed" or (c.nodes, c.ranks_per_node) != (
                p.nodes, p.ranks_per_node):
            if c is not None and self._own:
                c.close()
            c = self.cluster = make(p.nodes, p.ranks_per_node, inter=p.inter, intra=getattr(c, "intra", None), quiet=True)
            self._own = True
        elif getattr(c.inter, "gbps", None) != p.inter and c.mode != "real":
            c.set_inter(p.inter)
        return c

    def run(self, p: ClusterParams) -> ClusterRun:
        from .compare import run_algorithm
        key = (p.nodes, p.ranks_per_node, p.inter, p.algorithm, p.size)
        if key != self._last or self._trace is None:
            c = self._cluster_for(p)
            self._model = c.model()
            self._trace = run_algorithm(c, self.primitive, p.algorithm, p.size, snapshots=False, compare=True)
            self._last = key
        model, cluster = self._model, self.cluster
        assert model is not None and cluster is not None  # made with the trace
        return self._trace, model, cluster

    def draw(self, result: ClusterRun, p: ClusterParams) -> Picture:
        from .pictures import round_figure
        trace, model, c = result
        k = min(p.round, trace.n_rounds) if trace.n_rounds else 0
        if not k:
            return Picture(caption=_("one rank: no rounds to draw"))
        buf = io.BytesIO()
        round_figure(trace, k, model=model, cluster=c).savefig(buf, format="png")
        predicted = model.predict(self.primitive, p.algorithm, trace.nbytes)
        if c.timings == "measured":
            text = _("{alg} on {N} x {L}, {size}: {n} rounds, measured {m:.1f} ms (sum of the rounds' slowest ranks), "
                     "the two-tier model {p:.1f} ms").format(
                         alg=p.algorithm, N=c.nodes, L=c.ranks_per_node, size=format_bytes(trace.nbytes),
                         n=trace.n_rounds, m=sum(r.seconds for r in trace.rounds if r.seconds is not None) * 1e3, p=predicted * 1e3)
        else:
            text = _("{alg} on {N} x {L}, {size}: {n} rounds, the two-tier model predicts {p:.1f} ms "
                     "(modelled cluster: {why})").format(alg=p.algorithm, N=c.nodes, L=c.ranks_per_node,
                                                        size=format_bytes(trace.nbytes), n=trace.n_rounds,
                                                        p=predicted * 1e3, why=c.why)
        return Picture(png=buf.getvalue(), caption=text, attrs={"round": k, "rounds": trace.n_rounds})

    def close(self, timeout: float = 30.0) -> None:
        """Close the explorer (its worker and widgets: :meth:`collnb.views.Binder.close`) and the
        cluster it made (not one it was given)."""
        super().close(timeout)
        if self._own and self.cluster is not None:
            self.cluster.close()


def explore_cluster(cluster: Cluster | None = None, primitive: str = "all_reduce", *, algorithm: str = "hierarchical",
                    size: int = 1 << 20, wait: bool = True) -> ClusterExplorer:
    """An explorer of ``primitive``'s algorithms on a cluster (module doc). ``cluster``: start from
    this :func:`collnb.cluster` (its shape and inter-node rate; default: a 2 x 2 cluster at 400 Mbit/s,
    made by the explorer). Returns the :class:`ClusterExplorer` (displays itself; ``.set(...)``
    changes values as a learner would; ``.last_result``: ``(trace, model, cluster)``).

    Raises:
        ValueError: a primitive without tiered algorithms
            (:data:`collnb.labs.cluster.TIERED_PRIMITIVES`).
    """
    algorithms_for_cluster(primitive)
    inter = getattr(getattr(cluster, "inter", None), "gbps", None) or 0.4
    inter = min((v for _label, v in INTER_RATES), key=lambda v: abs(v - inter))
    params = ClusterParams(getattr(cluster, "nodes", 2), getattr(cluster, "ranks_per_node", 2), inter, algorithm, size)
    return ClusterExplorer(params, cluster, primitive, wait=wait)
