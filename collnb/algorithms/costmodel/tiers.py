"""The α-β-γ model with one (α, β) per tier: what a round costs on a cluster of nodes.

A cluster has two tiers (:mod:`collnb.algorithms.tiers`): the links inside a node (intra) and each
node's link to the others (inter, one per node, like one NIC). A round of a schedule costs, with
each transfer priced on the tier it crosses::

    intra(r)  = a_intra * max(msgs sent, msgs received by rank r inside its node)
              + b_intra * max(bytes sent, bytes received by rank r inside its node)
    inter(n)  = a_inter * max over node n's ranks of their messages to/from other nodes
              + b_inter * max(bytes leaving node n, bytes entering node n)     # the ranks share the link
    T(round)  = max over ranks r of max(intra(r), inter(node of r)) + g * max bytes reduced by a rank

The two tiers work at the same time (a rank's intra-node send does not wait for its node's
inter-node one), the node's ranks share its one inter-node link (their bytes add up), and, as in
:mod:`.model`, links are full duplex and rounds do not overlap. With ``intra_shared=True`` a node's
intra-node tier is one shared medium (the loopback of a virtual cluster node shaped with tbf: every
intra-node byte of the node passes the same token bucket once), so ``intra(r)`` becomes the node's
total: ``b_intra * sum of the node's intra-node bytes``.

With one node (``ranks_per_node = world_size``) every transfer is intra-node and the round costs
what :func:`collnb.algorithms.round_costs` says with the intra model; with one rank per node, what
it says with the inter model. Sources: the α-β model of Hockney and of Thakur, Rabenseifner &
Gropp (2005), as :mod:`.model`; the per-tier split follows the two-level models of hierarchical
collectives, e.g. Sack & Gropp, "Collective Algorithms for Multiported Torus Networks", ACM TOPC
1(2), 2015, and NCCL's own tuning model, which prices intra- and inter-node steps with their own
latencies (src/graph/tuning.cc, :mod:`collnb.labs.cluster.nccl`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ...i18n import _
from ...vocabulary import check_int
from ..rounds import Schedule
from ..schedules import schedule
from ..trace import Trace
from .model import CostModel, Message, messages_of

__all__ = ["TwoTier", "TierTerms", "tier_round_terms", "tier_round_costs", "predict_tiers", "inter_node_bytes"]


@dataclass(frozen=True)
class TwoTier:
    """A cluster's two tiers as :class:`CostModel` objects.

    Attributes:
        ranks_per_node: rank ``r`` runs on node ``r // ranks_per_node``.
        intra, inter: the models of the two tiers (γ is read from ``intra``).
        intra_shared: the node's intra tier is one shared medium (module doc).
    """

    ranks_per_node: int
    intra: CostModel
    inter: CostModel
    intra_shared: bool = False


@dataclass(frozen=True)
class TierTerms:
    """What one round puts on each tier (the coefficients of the module doc's formula, at the
    busiest rank or node): ``intra_msgs``, ``intra_bytes`` (per rank, or per node when shared),
    ``inter_msgs`` (per rank), ``inter_bytes`` (per node), ``reduced_bytes`` (per rank)."""

    intra_msgs: int
    intra_bytes: float
    inter_msgs: int
    inter_bytes: float
    reduced_bytes: float


#: One rank's terms of one round: ``(intra_msgs, intra_bytes, inter_msgs, inter_bytes, reduced)``.
_Terms = tuple[int, float, int, float, float]


def tier_round_terms(transfers: Iterable[Message], world_size: int, ranks_per_node: int,
                     intra_shared: bool = False) -> list[_Terms]:
    """Per rank and per node terms of one round: a list, one ``(intra_msgs, intra_bytes, inter_msgs,
    inter_bytes, reduced)`` per rank (its node's inter bytes; with ``intra_shared`` its node's intra
    bytes), from ``transfers`` as ``(src, dst, bytes, reduce)`` tuples."""
    L = ranks_per_node
    nodes = world_size // L
    im_s = np.zeros(world_size, np.int64)
    im_r = np.zeros(world_size, np.int64)
    ib_s = np.zeros(world_size)
    ib_r = np.zeros(world_size)
    om_s = np.zeros(world_size, np.int64)
    om_r = np.zeros(world_size, np.int64)
    out_b = np.zeros(nodes)
    in_b = np.zeros(nodes)
    node_intra = np.zeros(nodes)
    red = np.zeros(world_size)
    for src, dst, nb, reduce in transfers:
        if src // L == dst // L:
            im_s[src] += 1
            im_r[dst] += 1
            ib_s[src] += nb
            ib_r[dst] += nb
            node_intra[src // L] += nb
        else:
            om_s[src] += 1
            om_r[dst] += 1
            out_b[src // L] += nb
            in_b[dst // L] += nb
        if reduce:
            red[dst] += nb
    rows = []
    for r in range(world_size):
        n = r // L
        intra_b = node_intra[n] if intra_shared else max(ib_s[r], ib_r[r])
        rows.append((int(max(im_s[r], im_r[r])), float(intra_b), int(max(om_s[r], om_r[r])),
                     float(max(out_b[n], in_b[n])), float(red[r])))
    return rows


def _round_cost(rows: Sequence[_Terms], model: TwoTier) -> tuple[float, TierTerms]:
    a_i, b_i, a_o, b_o, g = (model.intra.alpha, model.intra.beta, model.inter.alpha, model.inter.beta,
                             model.intra.gamma)
    worst = 0.0
    for im, ib, om, ob, _red in rows:
        intra = (a_i * im + b_i * ib) if (im or ib) else 0.0
        inter = (a_o * om + b_o * ob) if (om or ob) else 0.0
        worst = max(worst, intra, inter)
    red = max((row[4] for row in rows), default=0.0)
    terms = TierTerms(max((r[0] for r in rows), default=0), max((r[1] for r in rows), default=0.0),
                      max((r[2] for r in rows), default=0), max((r[3] for r in rows), default=0.0), red)
    return worst + g * red, terms


def tier_round_costs(trace_or_schedule: Trace | Schedule, model: TwoTier,
                     nbytes: float | None = None) -> NDArray[np.float64]:
    """Predicted seconds of every round (float64 array) on ``model``'s two tiers (module doc).

    Args:
        trace_or_schedule: a :class:`collnb.Trace` or a :class:`collnb.algorithms.Schedule` with
            ``nbytes`` (bytes of one rank's buffer, split evenly over its chunks).
        model: :class:`TwoTier`; its ``ranks_per_node`` must divide the world size.

    Raises:
        ValueError: ``ranks_per_node`` does not divide the world size; a schedule without ``nbytes``.
    """
    ws, rounds = messages_of(trace_or_schedule, nbytes)
    L = check_int("ranks_per_node", model.ranks_per_node, 1, ws)
    if ws % L:
        raise ValueError(_("ranks_per_node={L} does not divide world size {n}").format(L=L, n=ws))
    return np.array([_round_cost(tier_round_terms(ts, ws, L, model.intra_shared), model)[0] for ts in rounds],
                    dtype=np.float64)


def inter_node_bytes(trace_or_schedule: Trace | Schedule, ranks_per_node: int, nbytes: float | None = None) -> float:
    """Bytes that leave the busiest node over the whole run (the inter-node tier's load, summed
    over the rounds; one direction)."""
    ws, rounds = messages_of(trace_or_schedule, nbytes)
    total = np.zeros(ws // ranks_per_node)
    for ts in rounds:
        for src, dst, nb, _red in ts:
            if src // ranks_per_node != dst // ranks_per_node:
                total[src // ranks_per_node] += nb
    return float(total.max()) if len(total) else 0.0


@dataclass(frozen=True)
class TierPrediction:
    """:func:`predict_tiers`'s answer: ``seconds`` (the sum of ``round_seconds``), ``rounds``,
    ``inter_rounds`` (rounds with an inter-node transfer), ``inter_bytes`` (bytes leaving the
    busiest node), for ``primitive``/``algorithm`` at ``nodes`` x ``ranks_per_node`` on
    ``nbytes`` bytes per rank."""

    primitive: str
    algorithm: str
    nodes: int
    ranks_per_node: int
    nbytes: float
    seconds: float
    round_seconds: NDArray[np.float64]
    rounds: int
    inter_rounds: int
    inter_bytes: float


def predict_tiers(primitive: str, algorithm: str, nodes: int, nbytes: float, model: TwoTier) -> TierPrediction:
    """Predict ``algorithm`` of ``primitive`` on ``nodes`` nodes of ``model.ranks_per_node`` ranks
    for ``nbytes`` bytes per rank (``m`` as :mod:`.model` counts it), summing
    :func:`tier_round_costs` over its schedule (flat algorithms too: their transfers are priced by
    the tier they cross).

    Raises:
        ValueError: an unknown primitive/algorithm, sizes out of range (as :func:`schedule`).
    """
    if nbytes < 0:
        raise ValueError(_("nbytes must be >= 0; got {value}").format(value=nbytes))
    L = model.ranks_per_node
    sched = schedule(primitive, algorithm, check_int("nodes", nodes, 1) * L, ranks_per_node=L)
    per = tier_round_costs(sched, model, nbytes)
    inter_rounds = sum(1 for r in sched.rounds if any(t.src // L != t.dst // L for t in r.transfers))
    return TierPrediction(primitive, algorithm, nodes, L, float(nbytes), float(per.sum()), per, sched.n_rounds,
                          inter_rounds, inter_node_bytes(sched, L, nbytes))
