"""The bytes that leave each node while a function runs on a cluster's ranks.

:func:`node_traffic` runs ``fn(rank, world_size, *args[rank])`` on a :func:`collnb.cluster`'s ranks
and returns each rank's result and the bytes that left each node meanwhile:

* **measured** on an emulated cluster: each node's ``eth0`` transmit counter
  (``/sys/class/net/eth0/statistics/tx_bytes`` in the node's namespace, read by its local rank 0
  before and after, between barriers): every frame that crossed the node boundary, headers included
  (large TCP segments are counted once per 64 KiB segment, so the headers add well under 5 %);
* **estimated** on a modelled or real cluster, from every collective and send each rank issued
  (``collnb.launch(..., record_calls=True)``): a collective priced as gloo runs it (measured with the
  counters above): all_reduce as a ring over its group in group-rank order (each member sends
  ``2(g-1)/g`` of the buffer to the next: counted where the next member is on another node);
  all_gather, reduce_scatter and all_to_all block by block, each straight to the rank it is for
  (``1/g`` of the buffer to every other member: counted for the members on other nodes); broadcast
  and reduce as the whole buffer to the next member; a send where the peer is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...i18n import _

__all__ = ["Traffic", "node_traffic", "estimate_crossing"]


@dataclass(frozen=True)
class Traffic:
    """``results`` (rank order), ``sent`` (bytes that left each node), ``measured`` (counted on
    the node's link, or estimated) and ``how`` (one sentence saying which)."""

    results: list
    sent: list
    measured: bool
    how: str


def _counted(rank: int, world_size: int, fn: Callable, per_rank: Sequence[tuple]):
    import torch.distributed as dist

    def read() -> int:
        with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
            return int(f.read())
    dist.barrier()
    before = read()
    out = fn(rank, world_size, *per_rank[rank])
    dist.barrier()
    return out, read() - before


def _plain(rank: int, world_size: int, fn: Callable, *args: Any):
    return fn(rank, world_size, *args)


def estimate_crossing(calls: list, ranks_per_node: int, world_size: int) -> list[float]:
    """Bytes leaving each node, estimated from each rank's recorded calls (module doc)."""
    L = ranks_per_node
    out = [0.0] * (world_size // L)
    ring = {"all_reduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}
    direct = ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_gather",
              "all_gather_into_tensor", "all_gather_single", "all_to_all", "all_to_all_single")
    for rank, records in enumerate(calls):
        for c in records:
            group = list(c.group_ranks or range(world_size))
            n = len(group)
            if c.name in ("send", "isend") and c.peer is not None and c.peer // L != rank // L:
                out[rank // L] += c.nbytes
            if rank not in group or n < 2 or c.op is not None:
                continue
            nxt = group[(group.index(rank) + 1) % n]
            if c.name in ring and nxt // L != rank // L:
                out[rank // L] += ring[c.name](n) * c.nbytes
            if c.name in direct:
                out[rank // L] += sum(c.nbytes / n for peer in group if peer // L != rank // L)
    return out


def node_traffic(cluster: Any, fn: Callable, per_rank: Sequence[tuple], timeout: float = 300.0) -> Traffic:
    """Run ``fn(rank, world_size, *per_rank[rank])`` on ``cluster``'s ranks (module doc).

    Raises:
        ValueError: ``per_rank`` does not have one tuple per rank. What the launch raises.
    """
    p, L = cluster.world_size, cluster.ranks_per_node
    per_rank = [tuple(a) for a in per_rank]
    if len(per_rank) != p:
        raise ValueError(_("per_rank has {n} entries; need one per rank ({p})").format(n=len(per_rank), p=p))
    if getattr(cluster, "mode", "emulated") == "emulated":
        out = cluster.launch(_counted, (fn, per_rank), timeout=timeout)
        return Traffic([o[0] for o in out], [out[n * L][1] for n in range(p // L)], True,
                       _("measured: frames that left each node's eth0"))
    from ..exercises import launch_recorded
    results, calls = launch_recorded(_plain, p, [(fn, *a) for a in per_rank], timeout=timeout)
    return Traffic(list(results), estimate_crossing(calls, L, p), False,
                   _("estimated from the collectives each rank issued (a modelled cluster has no real links)"))
