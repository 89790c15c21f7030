"""An explorer for a cluster: nodes, ranks per node, the inter-node rate, the algorithm and the size
in, the run's rounds out, each with its transfers coloured by tier and its time measured beside the
two-tier model's (:func:`explore_cluster`).

A change of nodes or ranks per node makes a new :func:`collnb.cluster` (the old one is closed); a
change of the inter-node rate re-shapes the running one (emulated) or the model's (modelled). Each
Run runs the algorithm once on the cluster's ranks (:func:`collnb.labs.cluster.run_algorithm`) and
draws its rounds (:func:`collnb.labs.cluster.round_figure`); the summary line gives the measured
total (the sum of the rounds' slowest ranks) beside the model's. ipywidgets.
"""

from __future__ import annotations

import io
from typing import Any

from ...i18n import _
from ...units import format_bytes

__all__ = ["explore_cluster", "ClusterExplorer"]

_SIZES = [16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]


class ClusterExplorer:
    """The widget :func:`explore_cluster` returns: ``widget`` (the VBox), ``cluster`` (the current
    :class:`Cluster`), ``trace`` and ``model`` of the last run, ``status`` (its summary line),
    ``run()`` (what the Run button does), ``close()`` (closes the clusters it made)."""

    def __init__(self, cluster: Any = None, primitive: str = "all_reduce"):
        import ipywidgets as w

        from .compare import algorithms_for_cluster
        self.primitive = primitive
        self.cluster = cluster
        self._own = cluster is None
        self.trace = self.model = None
        algs = [a for a in algorithms_for_cluster(primitive) if a != "builtin"]
        self.nodes = w.Dropdown(options=[1, 2, 3, 4], value=getattr(cluster, "nodes", 2), description=_("nodes"))
        self.rpn = w.Dropdown(options=[1, 2, 3, 4], value=getattr(cluster, "ranks_per_node", 2),
                              description=_("ranks per node"))
        inter = getattr(getattr(cluster, "inter", None), "gbps", None) or 0.4
        self.inter = w.SelectionSlider(options=[("50 Mbit/s", 0.05), ("100 Mbit/s", 0.1), ("200 Mbit/s", 0.2),
                                                ("400 Mbit/s", 0.4), ("1 Gbit/s", 1.0), ("2 Gbit/s", 2.0),
                                                ("4 Gbit/s", 4.0)],
                                       value=min((0.05, 0.1, 0.2, 0.4, 1.0, 2.0, 4.0), key=lambda v: abs(v - inter)),
                                       description=_("inter-node"))
        self.algorithm = w.Dropdown(options=algs, value="hierarchical" if "hierarchical" in algs else algs[0],
                                    description=_("algorithm"))
        self.size = w.Dropdown(options=[(format_bytes(s), s) for s in _SIZES], value=1 << 20, description=_("size"))
        self.button = w.Button(description=_("Run"), button_style="primary")
        self.round = w.IntSlider(value=1, min=1, max=1, description=_("round"))
        self.image = w.Image(format="png")
        self.label = w.HTML()
        self.status = ""
        self.button.on_click(lambda _b: self.run())
        self.round.observe(lambda _c: self._draw(), "value")
        self.widget = w.VBox([w.HBox([self.nodes, self.rpn, self.inter]), w.HBox([self.algorithm, self.size,
                                                                                   self.button]),
                              self.label, self.round, self.image])

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)

    def _ensure_cluster(self) -> None:
        from .clusters import cluster as make
        shape = (self.nodes.value, self.rpn.value)
        c = self.cluster
        if c is None or getattr(c, "mode", "closed") == "closed" or (c.nodes, c.ranks_per_node) != shape:
            if c is not None and self._own:
                c.close()
            self.cluster = make(shape[0], shape[1], inter=self.inter.value, intra=getattr(c, "intra", None),
                                quiet=True)
            self._own = True
        elif getattr(c.inter, "gbps", None) != self.inter.value and c.mode != "real":
            c.set_inter(self.inter.value)

    def run(self) -> None:
        """Make or reshape the cluster, run the algorithm once, draw its first round."""
        from .compare import run_algorithm
        self._ensure_cluster()
        c = self.cluster
        self.model = c.model()
        self.trace = run_algorithm(c, self.primitive, self.algorithm.value, self.size.value, snapshots=False,
                                   compare=True)
        n = self.trace.n_rounds
        self.round.max = max(1, n)
        self.round.value = 1
        predicted = self.model.predict(self.primitive, self.algorithm.value, self.trace.nbytes)
        if c.timings == "measured":
            measured = sum(r.seconds for r in self.trace.rounds)
            self.status = _("{alg} on {N} x {L}, {size}: {n} rounds, measured {m:.1f} ms (sum of the rounds' slowest "
                            "ranks), the two-tier model {p:.1f} ms").format(
                                alg=self.algorithm.value, N=c.nodes, L=c.ranks_per_node, size=format_bytes(self.trace.nbytes),
                                n=n, m=measured * 1e3, p=predicted * 1e3)
        else:
            self.status = _("{alg} on {N} x {L}, {size}: {n} rounds, the two-tier model predicts {p:.1f} ms "
                            "(modelled cluster: {why})").format(alg=self.algorithm.value, N=c.nodes, L=c.ranks_per_node,
                                                               size=format_bytes(self.trace.nbytes), n=n,
                                                               p=predicted * 1e3, why=c.why)
        self.label.value = "<b>" + self.status + "</b>"
        self._draw()

    def _draw(self) -> None:
        from .pictures import round_figure
        if self.trace is None or not self.trace.n_rounds:
            return
        buf = io.BytesIO()
        round_figure(self.trace, self.round.value, model=self.model, cluster=self.cluster).savefig(buf, format="png")
        self.image.value = buf.getvalue()

    def close(self) -> None:
        """Close the cluster this explorer made (not one it was given)."""
        if self._own and self.cluster is not None:
            self.cluster.close()


def explore_cluster(cluster: Any = None, primitive: str = "all_reduce") -> ClusterExplorer:
    """An explorer of ``primitive``'s algorithms on a cluster (module doc). ``cluster``: start from
    this :func:`collnb.cluster` (default: make one when Run is pressed). Returns a
    :class:`ClusterExplorer` (displays itself).

    Raises:
        ValueError: a primitive without tiered algorithms
            (:data:`collnb.labs.cluster.TIERED_PRIMITIVES`).
    """
    return ClusterExplorer(cluster, primitive)
