"""The bytes that leave each node while a function runs on a cluster's ranks.

:func:`node_traffic` runs ``fn(rank, world_size, *args[rank])`` on a :func:`collnb.cluster`'s ranks
and returns each rank's result and the bytes that left each node meanwhile:

* **measured** on an emulated cluster: each node's ``eth0`` transmit counter
  (``/sys/class/net/eth0/statistics/tx_bytes`` in the node's namespace, read by its local rank 0
  before and after ``fn``, each reading between two barriers, so no rank can have started ``fn`` before
  the first or still be inside it at the second): every frame that crossed the node boundary, headers included
  (large TCP segments are counted once per 64 KiB segment, so the headers add well under 5 %);
* **estimated** in every mode (an emulated cluster's own ranks record calls too: beside the
  counters there; the only number on a modelled or real cluster), from every collective and send each
  rank issued (``collnb.launch(..., record_calls=True)``), each priced as gloo sends it. Measured on
  this cluster's links with torch 2.13.0 (each node's ``eth0`` counter, 1 MiB buffers on 2 nodes x 2
  ranks; ``tests/test_cluster.py`` checks every line against the counters), for a group of ``g``
  members in group-rank order and a buffer of ``B`` bytes (:attr:`collnb.CallRecord.nbytes`):

  - ``all_reduce``: a ring: each member sends ``2(g-1)/g · B`` to the next;
  - ``reduce_scatter`` (``_tensor``, ``_single``): **as an all_reduce** of the whole input (each member
    keeps its chunk of the sum): ``2(g-1)/g · B`` to the next, twice a direct exchange's bytes;
  - ``all_gather`` (``_into_tensor``, ``_single``): a ring: ``(g-1)/g · B`` (the whole output's) to the next;
  - ``all_to_all`` (``_single``): direct: ``B/g`` to every other member;
  - ``broadcast``: the root sends all of ``B`` to every other member;
  - ``reduce``: a ring reduce-scatter (``(g-1)/g · B`` to the next), then each other member sends its
    ``B/g`` chunk to the root;
  - ``send``/``isend``: ``B`` to the peer.

  A byte counts where the member it goes to is on another node. An object collective's operations
  (``broadcast_object_list``'s two broadcasts) are priced one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from ...i18n import _

if TYPE_CHECKING:
    from ...ranks import CallRecord
    from .clusters import AnyCluster
    from .virtual import VirtualCluster

#: A function that runs on ranks: ``fn(rank, world_size, *args)``, returning anything.
RankFn = Callable[..., object]
#: What :func:`counted` answers on a rank: ``fn``'s result and the bytes its node sent (``None``: not counted).
Counted = tuple[object, "int | None"]

__all__ = ["Traffic", "node_traffic", "estimate_crossing", "estimate_crossing_per_rank", "fn_calls"]


@dataclass(frozen=True)
class Traffic:
    """What :func:`node_traffic` saw.

    Attributes:
        results: each rank's return value (rank order).
        sent: bytes that left each node (node order): counted on its link when ``measured``, else
            estimated from the calls.
        measured: whether ``sent`` was counted on the nodes' links.
        how: one sentence saying which.
        estimated: bytes that left each node as estimated from every rank's recorded calls
            (:func:`estimate_crossing`), in every mode: beside a counted ``sent``, the calls' share.
        calls: each rank's recorded operations inside ``fn`` (:class:`collnb.CallRecord` lists, rank
            order; the count's own barriers left out: :func:`fn_calls`).
    """

    results: list[object]
    sent: list[float]
    measured: bool
    how: str
    estimated: list[float] = field(default_factory=list)
    calls: list[list[CallRecord]] = field(default_factory=list)


def counted(rank: int, world_size: int, fn: RankFn, count: bool, *args: object) -> Counted:
    """Runs on a rank: ``(fn(rank, world_size, *args), bytes)``. With ``count``, the bytes this
    rank's node sent on its ``eth0`` while every rank ran ``fn``, else ``None``.

    Each reading sits between two barriers (``barrier, read, barrier, fn, barrier, read``): a rank
    leaves a barrier only once every rank has entered it, so no rank can start ``fn`` before the first
    reading, and every rank has finished ``fn`` before the second. (With ``barrier, read`` alone, a
    loaded machine let the node's other rank start ``fn`` and send before the reading, and the count
    came out short.) The second barrier's few bytes are counted; :func:`fn_calls` leaves the three
    barriers out of the recorded calls."""
    if not count:
        return fn(rank, world_size, *args), None
    import torch.distributed as dist

    def read() -> int:
        with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
            return int(f.read())
    dist.barrier()
    before = read()
    dist.barrier()
    out = fn(rank, world_size, *args)
    dist.barrier()
    return out, read() - before


def fn_calls(calls: Sequence[CallRecord], count: bool) -> list[CallRecord]:
    """One rank's recorded calls under :func:`counted`, without the count's own barriers (with
    ``count``: two before ``fn``, one after)."""
    return list(calls)[2:-1] if count else list(calls)


def estimate_crossing_per_rank(calls: Sequence[Iterable[CallRecord]], ranks_per_node: int, world_size: int) -> list[float]:
    """Bytes each rank sent to other nodes, estimated from its recorded calls as gloo sends them
    (module doc): ``calls[r]`` is rank ``r``'s :class:`collnb.CallRecord` list; a list of floats,
    rank order."""
    L = ranks_per_node
    out = [0.0] * world_size
    all_reduce_ring = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single")
    all_gather_ring = ("all_gather", "all_gather_into_tensor", "all_gather_single")
    direct = ("all_to_all", "all_to_all_single")

    def across(rank: int, peer: int | None, nbytes: float) -> None:
        if peer is not None and peer // L != rank // L:
            out[rank] += nbytes

    for rank, records in enumerate(calls):
        for c in records:
            kind = c.op or c.name
            B = float(c.nbytes)
            if kind in ("send", "isend"):
                across(rank, c.peer, B)
                continue
            group = list(c.group_ranks or range(world_size))
            g = len(group)
            if rank not in group or g < 2:
                continue
            nxt = group[(group.index(rank) + 1) % g]
            if kind in all_reduce_ring:
                across(rank, nxt, 2 * (g - 1) / g * B)
            elif kind in all_gather_ring:
                across(rank, nxt, (g - 1) / g * B)
            elif kind in direct:
                for peer in group:
                    if peer != rank:
                        across(rank, peer, B / g)
            elif kind == "broadcast" and c.peer == rank:
                for peer in group:
                    if peer != rank:
                        across(rank, peer, B)
            elif kind == "reduce":
                across(rank, nxt, (g - 1) / g * B)
                if c.peer != rank:
                    across(rank, c.peer, B / g)
    return out


def estimate_crossing(calls: Sequence[Iterable[CallRecord]], ranks_per_node: int, world_size: int) -> list[float]:
    """Bytes leaving each node, estimated from each rank's recorded calls (module doc): the sum of
    :func:`estimate_crossing_per_rank` over the node's ranks."""
    per_rank = estimate_crossing_per_rank(calls, ranks_per_node, world_size)
    L = ranks_per_node
    return [sum(per_rank[n * L:(n + 1) * L]) for n in range(world_size // L)]


def recorded_timeout(cluster: AnyCluster) -> float:
    """The ``collective_timeout`` of a recorded launch on ``cluster`` that finds its warm ranks as
    they are (an emulated cluster's ranks restart for another one; elsewhere collnb.launch's 5 s)."""
    vc: VirtualCluster | None = getattr(cluster, "_vc", None)
    return float(vc.warm_collective_timeout) if getattr(cluster, "mode", None) == "emulated" and vc else 5.0


def node_traffic(cluster: AnyCluster, fn: RankFn, per_rank: Sequence[Iterable[object]], timeout: float = 300.0) -> Traffic:
    """Run ``fn(rank, world_size, *per_rank[rank])`` on ``cluster``'s ranks (module doc) with every
    call recorded (``collnb.launch(..., record_calls=True)``, on the cluster's own ranks when it is
    emulated): the bytes that left each node, counted on an emulated cluster's links and estimated
    from the calls everywhere (:attr:`Traffic.estimated`).

    Raises:
        ValueError: ``per_rank`` does not have one tuple per rank. What the launch raises.
    """
    from ..exercises import launch_recorded
    from .rankset import active

    p, L = cluster.world_size, cluster.ranks_per_node
    args = [tuple(a) for a in per_rank]
    if len(args) != p:
        raise ValueError(_("per_rank has {n} entries; need one per rank ({p})").format(n=len(args), p=p))
    emulated = getattr(cluster, "mode", "emulated") == "emulated"
    with active(cluster):
        out, calls = launch_recorded(counted, p, [(fn, emulated, *a) for a in args], timeout=timeout,
                                     collective_timeout=recorded_timeout(cluster))
    answers = cast(list[Counted], out)  # what counted returns on every rank
    results = [o[0] for o in answers]
    calls = [fn_calls(c, emulated) for c in calls]
    estimated = estimate_crossing(calls, L, p)
    if emulated:
        counts = cast(list[tuple[object, int]], answers)  # count=True: every rank read its node's counter
        return Traffic(results, [counts[n * L][1] for n in range(p // L)], True,
                       _("measured: frames that left each node's eth0"), estimated, calls)
    return Traffic(results, estimated, False,
                   _("estimated from the collectives each rank issued (a modelled cluster has no real links)"),
                   estimated, calls)
