"""Where each mesh dimension lands on a cluster: tensor parallelism inside a node and FSDP across
nodes, against the opposite placement, on a :class:`collnb.labs.cluster.VirtualCluster` (nodes as
network namespaces, the link between nodes shaped by tbf) and in bytes.

Ranks are placed node by node (rank ``r`` on node ``r // L`` for ``L`` ranks per node, torchrun's
and Slurm's block placement) and ``init_device_mesh`` numbers a mesh row-major, so the
**innermost** mesh dimension's groups are consecutive ranks: with ``L`` equal to its size they share
a node. ``Plan.parse("dp_shard=2, tp=2")`` on 2 nodes of 2 ranks keeps TP's groups ``{0, 1}``,
``{2, 3}`` inside the nodes and sends FSDP's all_gathers and reduce_scatters across; ``"tp=2,
dp_shard=2"`` does the opposite. torchtitan orders its mesh ``pp, dp_replicate, dp_shard, cp, tp``
(tp innermost) for this reason: TP's all_reduces come four or more per block, forward and backward,
each on the critical path and as large as the activations, while FSDP's collectives are one per
block and can overlap with compute. Narayanan et al. 2021 (*Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM*, SC21, arXiv:2104.04473, Takeaway #1) use tensor
parallelism up to the GPUs of one server and pipeline parallelism across servers.

:func:`placement_bytes` counts, from the recorded calls of each placement, the bytes whose groups
cross nodes; :func:`placement_step` times training steps on a cluster's ranks and reads the bytes
that left each node per step on its link; :func:`compare_placements` does both, on the cluster's own
ranks where one can be made (the calls recorded there, as on collnb's local ranks:
:mod:`collnb.labs.cluster.rankset`), so the count and the link's counter describe the same program on
the same ranks.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

import torch

from ...i18n import N_, _
from ...units import format_bytes
from .composed import Plan, build, run_composition
from .mesh_traffic import inter_node_bytes, traffic
from .transformer import TransformerConfig, loss_fn, make_batch

__all__ = ["PLACEMENTS", "placement_bytes", "placement_step", "PlacementResult", "compare_placements",
           "format_placements", "MEASURE_CONFIG", "PlacementBytes", "StepTimes"]


class PlacementBytes(TypedDict):
    """:func:`placement_bytes`'s answer: wire bytes of the last step summed over every rank, by dimension."""

    inter: dict[str, float]  # the dimensions whose groups cross nodes
    total: dict[str, float]  # every dimension


class StepTimes(TypedDict):
    """:func:`placement_step`'s answer on one rank."""

    seconds: list[float]  # each timed step
    loss: float | None  # the last step's loss (None when no step ran)
    link_bytes: float | None  # with count_link: bytes the node sent on its link per timed step

#: The two placements on 2 nodes of 2 ranks: TP inside the nodes (the innermost dimension) or across them.
PLACEMENTS = {N_("tp inside nodes"): Plan.parse("dp_shard=2, tp=2"), N_("tp across nodes"): Plan.parse("tp=2, dp_shard=2")}
#: A model whose activations outweigh its parameters (long sequences, narrow layers): TP's bytes per
#: step are then several times FSDP's, as in long-context training.
MEASURE_CONFIG = TransformerConfig(hidden=64, heads=4, ffn=128, blocks=2)


def placement_bytes(plan: Plan, config: TransformerConfig, batch: int, seq_len: int,
                    ranks_per_node: int) -> PlacementBytes:
    """Run one placement on collnb's ranks with the calls recorded and return, for the last of 2
    steps, ``{"inter": {dimension: bytes}, "total": {dimension: bytes}}``: the wire bytes summed over
    every rank, of the dimensions whose groups cross nodes and of all dimensions."""
    from .mesh_traffic import dimension_bytes

    results, _ref, _plan = run_composition(plan, config, batch=batch, seq_len=seq_len)
    rows = traffic(results, plan)
    return PlacementBytes(inter=inter_node_bytes(rows, plan, ranks_per_node, step=2), total=dimension_bytes(rows, step=2))


def placement_step(rank: int, world_size: int, plan: Plan, config: TransformerConfig, x: torch.Tensor,
                   y: torch.Tensor, steps: int = 3, count_link: bool = False) -> StepTimes:
    """On a rank (of a :class:`collnb.labs.cluster.VirtualCluster` or :func:`collnb.launch`): build
    the model under ``plan``, run one untimed step, then ``steps`` timed AdamW steps, a barrier
    before each. Returns ``{"seconds": [per step], "loss": last loss, "link_bytes": ...}``:
    with ``count_link`` (a rank in a virtual cluster's node), the bytes its node sent on its link
    (``eth0``'s transmit counter, frames' headers included) per timed step, its barriers included,
    else ``None``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", plan.sizes, mesh_dim_names=plan.names)
    coords = plan.coordinates(rank)
    xb, yb = x.chunk(plan.batch_shards)[plan.batch_index(rank)], y.chunk(plan.batch_shards)[plan.batch_index(rank)]
    if plan.has("cp"):
        xb, yb = xb.chunk(plan.size("cp"), 1)[coords["cp"]], yb.chunk(plan.size("cp"), 1)[coords["cp"]]
    model, by_hand = build(plan, config, mesh, rank)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seconds: list[float] = []
    loss: float | None = None
    sent = 0
    for k in range(steps + 1):
        if k == 1 and count_link:
            # read between step 0's closing barrier and this step's opening one: no rank can have started
            # step 1 yet (read after the opening barrier, a loaded machine let the node's other rank send
            # its first all_gather before the reading, and the count came out 5 % short)
            sent = -_tx_bytes()
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        out = loss_fn(model(xb), yb)
        out.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
        if by_hand is not None:
            by_hand()
        opt.step()
        dist.barrier()
        if k:
            seconds.append(time.perf_counter() - t0)
        loss = out.item()
    link = (sent + _tx_bytes()) / steps if count_link and steps else None
    return StepTimes(seconds=seconds, loss=loss, link_bytes=link)


def _tx_bytes() -> int:
    """The bytes this rank's node has sent on its link (``eth0`` in the node's network namespace)."""
    with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
        return int(f.read())


@dataclass(frozen=True)
class PlacementResult:
    """One placement: ``name``, its ``plan``, ``inter_bytes`` (wire bytes per step summed over ranks
    whose groups cross nodes, by dimension, from the recorded calls), ``total_bytes`` (all
    dimensions), ``seconds`` (median step time of the slowest rank on the cluster; ``None`` when not
    measured), ``mode`` (``"emulated"`` or ``"modelled"``), ``link_bytes`` (the bytes that left the
    nodes per step, summed over nodes, read on their links' counters: frames' headers and the
    step's barriers included; ``None`` when not measured)."""

    name: str
    plan: Plan
    inter_bytes: dict[str, float]
    total_bytes: dict[str, float]
    seconds: float | None
    mode: str
    link_bytes: float | None = None


def compare_placements(config: TransformerConfig = MEASURE_CONFIG, *, batch: int = 8, seq_len: int = 128,
                       inter_gbps: float = 0.2, steps: int = 3, measure: bool = True,
                       timeout: float = 300.0) -> list[PlacementResult]:
    """Both :data:`PLACEMENTS` on 2 nodes of 2 ranks: the bytes crossing nodes, counted from the
    recorded calls, and, where a virtual cluster can be made and ``measure``, the step time on one
    whose inter-node link runs at ``inter_gbps`` Gbit/s with the bytes its links carried per step;
    the calls are then recorded on the cluster's own ranks (elsewhere on collnb's local ranks).

    Returns:
        a list of :class:`PlacementResult`, in :data:`PLACEMENTS` order.
    """
    from ..cluster import VirtualCluster, available
    from ..cluster.rankset import active

    x, y = make_batch(config, batch, seq_len)
    out = []
    can, _why = available()
    cluster = None
    try:
        if measure and can:
            cluster = VirtualCluster(nodes=2, ranks_per_node=2, inter_gbps=inter_gbps).__enter__()
        for name, plan in PLACEMENTS.items():
            with active(cluster):  # a virtual cluster's own ranks record the calls, where there is one
                counted = placement_bytes(plan, config, batch, seq_len, 2)
            seconds = link = None
            if cluster is not None:
                per_rank: list[StepTimes] = cluster.launch(placement_step, (plan, config, x, y, steps, True),
                                                           timeout=timeout)
                seconds = max(statistics.median(r["seconds"]) for r in per_rank)
                links = [per_rank[n * cluster.ranks_per_node]["link_bytes"] for n in range(cluster.nodes)]
                link = sum(b for b in links if b is not None) if all(b is not None for b in links) else None
            out.append(PlacementResult(name, plan, counted["inter"], counted["total"], seconds,
                                       "emulated" if cluster is not None else "modelled", link))
    finally:
        if cluster is not None:
            cluster.__exit__(None, None, None)
    return out


def format_placements(rows: Iterable[PlacementResult], inter_gbps: float | None = None) -> str:
    """A text table of :func:`compare_placements`: per placement the bytes crossing nodes per step
    (summed over ranks; which dimensions), the total, (with ``inter_gbps``) the time those bytes
    take on one link (``bytes / 2 nodes / rate``), the bytes the links carried per step and the
    measured step time (where a cluster measured them)."""
    lines = []
    for r in rows:
        inter = sum(r.inter_bytes.values())
        dims = ", ".join(sorted(r.inter_bytes)) or "-"
        line = _("{name:<17} {plan:<20} across nodes {inter:>10} ({dims}), all {total:>10}").format(
            name=_(r.name), plan=r.plan.text(), inter=format_bytes(inter), dims=dims,
            total=format_bytes(sum(r.total_bytes.values())))
        if inter_gbps:
            line += _(", on a {rate:g} Gbit/s link ≥ {t:.0f} ms").format(rate=inter_gbps,
                                                                         t=inter / 2 / (inter_gbps * 1e9 / 8) * 1e3)
        if r.link_bytes is not None:
            line += _(", {link} on the links").format(link=format_bytes(r.link_bytes))
        if r.seconds is not None:
            line += _(", measured {t:.0f} ms per step").format(t=r.seconds * 1e3)
        lines.append(line)
    return "\n".join(lines)
