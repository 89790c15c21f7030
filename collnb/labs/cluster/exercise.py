"""The exercise of notebook 19 (a virtual cluster): an all_reduce that sends as little as possible
across the node boundary, checked by the bytes that really left each node.

The learner writes ``tier_aware_all_reduce(rank, world_size, x, ranks_per_node)``: return the sum of
every rank's ``x`` (float32, :data:`NUMEL` random integers known only to that rank). The check runs
it on the cluster's ranks and passes when

* every rank returned the exact sum, and
* the bytes that left each node are at most :data:`SLACK` times what the hierarchical schedule sends
  (``2(N-1)/N`` of the buffer, the least an all_reduce of whole buffers can move across N nodes):
  **measured** on an emulated cluster, from each node's ``eth0`` counter
  (``/sys/class/net/eth0/statistics/tx_bytes`` in its namespace: every frame that left the node,
  headers included, so the bound allows tbf's 1514/1448); **estimated** on a modelled cluster, from
  every collective and send each rank issued (``collnb.launch(..., record_calls=True)``), each priced
  as gloo runs it (a ring over the group in group-rank order) and counted when it crosses nodes.

A flat ring (``dist.all_reduce`` on all ranks) sends ``2(p-1)/p`` of the buffer per node, 1.5 times as
much at 2 x 2: it fails. Sending everything to one rank and back fails too. Gathering everything
everywhere fails. What passes is an all_reduce whose inter-node part moves only shards: reduce inside
the node first, cross with a part of the buffer, then spread inside the node again.
"""

from __future__ import annotations

import inspect
import random
from typing import Any, Callable

from ...i18n import N_, _
from ...units import format_bytes
from ..exercises import CheckFailed
from .traffic import node_traffic

__all__ = ["check_tier_aware_all_reduce", "NUMEL", "SLACK"]

#: Values of each rank's buffer (float32: 4 MiB).
NUMEL = 1 << 20
#: How far above the hierarchical schedule's inter-node bytes an answer may go.
SLACK = 1.2
#: Frame bytes per byte of TCP payload on a veth with a 1500-byte MTU (1514 / 1448).
FRAMES = 1514 / 1448
#: The same words as every other exercise's check (collnb.labs.exercises).
_WHERE_SOLUTION = N_("A solution is in the collapsed cell below the exercise: open it (click its \"…\" or "
                     "\"Show code\") once you have tried.")
_DIRECTION = N_("Make a group of the ranks of your node and a group of the ranks with your local rank (one per node) "
                "with dist.new_group (every rank makes every group, in the same order); reduce-scatter inside the node, "
                "all_reduce your shard across nodes, all-gather inside the node.")


def check_tier_aware_all_reduce(tier_aware_all_reduce: Callable, cluster: Any) -> None:
    """Check ``tier_aware_all_reduce(rank, world_size, x, ranks_per_node)`` on ``cluster`` (a
    :func:`collnb.cluster` of at least 2 nodes and 2 ranks per node; module doc).

    Prints ``✓`` with the bytes each node sent, or "not answered yet" while the function returns
    ``None``. Raises :class:`collnb.exercises.CheckFailed` (a ✗ with the per-node bytes and a hint)
    for a wrong sum or too many bytes across nodes, and ValueError for a cluster of one node or one
    rank per node.
    """
    name = "tier_aware_all_reduce"
    if not callable(tier_aware_all_reduce):
        raise CheckFailed("✗ " + _("{name} is {value}, not a function.").format(name=name,
                                                                               value=repr(tier_aware_all_reduce)))
    try:
        inspect.signature(tier_aware_all_reduce).bind("rank", "world_size", "x", "ranks_per_node")
    except TypeError:
        raise CheckFailed("✗ " + _("define it as: def {call}: ...").format(
            call=name + "(rank, world_size, x, ranks_per_node)")) from None
    N, L, p = cluster.nodes, cluster.ranks_per_node, cluster.world_size
    if N < 2 or L < 2:
        raise ValueError(_("the check needs at least 2 nodes of 2 ranks; got {N} x {L}").format(N=N, L=L))
    rng = random.Random()
    seeds = [rng.randrange(1 << 31) for _r in range(p)]
    emulated = getattr(cluster, "mode", "emulated") == "emulated"
    traffic = node_traffic(cluster, _learner_rank, [(tier_aware_all_reduce, s, L) for s in seeds])
    results, sent, how = traffic.results, traffic.sent, traffic.how
    if all(r is None for r in results):
        print(_("{name}: not answered yet. {what} and run this cell again.").format(
            name=name, what=_("Write your answer in the exercise cell above")))
        print(_("Hint: ") + _(_DIRECTION))
        print(_(_WHERE_SOLUTION))
        return
    import torch
    want = sum(torch.randint(-20, 21, (NUMEL,), generator=torch.Generator().manual_seed(s)).to(torch.float32)
               for s in seeds)
    m = NUMEL * 4
    ideal = 2 * (N - 1) / N * m
    bound = SLACK * ideal * (FRAMES if emulated else 1.0) + (256 << 10)
    rows = "\n".join("  " + _("node {n}: {sent} left the node (the hierarchical schedule: {ideal}, the flat ring: "
                              "{flat})").format(n=n, sent=format_bytes(s), ideal=format_bytes(ideal),
                                                flat=format_bytes(2 * (p - 1) / p * m)) for n, s in enumerate(sent))
    bad = [r for r, got in enumerate(results) if not (isinstance(got, torch.Tensor) and got.shape == want.shape
                                                       and torch.equal(got.to(torch.float32), want))]
    if bad:
        raise CheckFailed("✗ " + _("ranks {ranks} did not return the sum of every rank's x.").format(
            ranks=", ".join(map(str, bad))) + "\n" + _("Hint: ") + _(_DIRECTION))
    if max(sent) > bound:
        raise CheckFailed("✗ " + _("the sum is right, but too many bytes crossed the node boundary ({how}):").format(
            how=how) + "\n" + rows + "\n" + _("Hint: ") + _(_DIRECTION))
    print(rows)
    print("✓ " + _("the exact sum on every rank, with {sent} at most leaving a node: the inter-node link carried "
                   "only shards ({how})").format(sent=format_bytes(max(sent)), how=how))


def _learner_rank(rank: int, world_size: int, learner: Callable, seed: int, ranks_per_node: int):
    import torch
    x = torch.randint(-20, 21, (NUMEL,), generator=torch.Generator().manual_seed(seed)).to(torch.float32)
    return learner(rank, world_size, x, ranks_per_node)
