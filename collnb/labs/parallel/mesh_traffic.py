"""Every collective of a composed step, by mesh dimension and by phase, from the calls each rank
recorded (``collnb.launch(..., record_calls=True)``).

**Which dimension.** A recorded operation names the global ranks of its process group
(:attr:`collnb.CallRecord.group_ranks`). On a mesh with dimensions ``D``, the groups of dimension
``d`` are the sets of ranks that differ only in coordinate ``d``; a group over several dimensions
at once (FSDP2's ``dp_shard_cp``, the dense gradients' ``dp_replicate_ep``) is a *flattened*
dimension: the ranks that differ only in those coordinates, named as ``DeviceMesh._flatten``
names them (``"dp_shard_cp"``). :func:`dimension_of` finds the one that matches; a send or recv
over the default group is placed by the coordinate in which the two ranks differ.

**Which phase.** :func:`.composed.train` marks ``"step k/forward"``, ``"step k/backward"``,
``"step k/optimizer"`` and ``"check"`` (the whole tensors gathered for the comparison: left out
here). A pipeline's send/recv are placed by direction: an activation travels to the next stage
(forward), a gradient to the previous one (backward), whatever mark the schedule's order put
them under.

**Bytes.** ``nbytes`` as nccl-tests counts a buffer and ``wire`` bytes, what one rank sends with a
bandwidth-optimal algorithm (:func:`.accounting.wire_bytes`: ``nbytes × 2(n-1)/n`` for an
all_reduce, ``× (n-1)/n`` for all_gather / reduce_scatter / all_to_all, a send's tensor).
:func:`traffic` sums them per rank, step, phase, dimension and kind; :func:`dimension_bytes`
per dimension; :func:`inter_node_bytes` the part whose group spans nodes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...i18n import _
from ...units import format_bytes, pad
from .accounting import interleave, kind, wire_bytes

__all__ = ["TrafficRow", "dimension_groups", "dimension_of", "phase_of_marks", "traffic", "traffic_table",
           "dimension_bytes", "inter_node_bytes", "PHASES", "nodes_of"]

#: The phases of a step, in order.
PHASES = ("forward", "backward", "optimizer")
_P2P = ("send", "recv")


def dimension_groups(plan) -> dict:
    """``{frozenset(ranks): name}`` for every group of every dimension and of every combination of
    dimensions (flattened, named by joining the roles in mesh order with ``"_"``)."""
    out: dict = {}
    names = plan.names
    for k in range(1, len(names) + 1):
        for subset in itertools.combinations(names, k):
            name = "_".join(subset)
            seen: dict = {}
            for rank in range(plan.world_size):
                coords = plan.coordinates(rank)
                key = tuple(v for role, v in coords.items() if role not in subset)
                seen.setdefault(key, set()).add(rank)
            for ranks in seen.values():
                out.setdefault(frozenset(ranks), name)
    return out


def dimension_of(record, plan, rank: int, groups: dict | None = None) -> str:
    """The mesh dimension (or flattened dimensions) ``record`` ran over on ``rank``; ``"other"``
    when its group is none of the mesh's (e.g. a group made by hand).

    Args:
        groups: :func:`dimension_groups` of ``plan`` (computed when ``None``).
    """
    groups = dimension_groups(plan) if groups is None else groups
    if kind(record) in _P2P and record.peer is not None and 0 <= record.peer < plan.world_size:
        # a send/recv: the coordinates in which the two ranks differ (over the default group, or one
        # step of a ring inside a larger group)
        mine, theirs = plan.coordinates(rank), plan.coordinates(record.peer)
        differ = [role for role in plan.names if mine[role] != theirs[role]]
        return "_".join(differ) if differ else "other"
    return groups.get(frozenset(record.group_ranks), "other")


def phase_of_marks(label: str) -> tuple:
    """``(step, phase)`` of a mark label: ``"step 2/backward"`` -> ``(2, "backward")``;
    ``"check"`` -> ``(None, "check")``; anything else ``(None, label)``."""
    if label.startswith("step ") and "/" in label:
        step, phase = label[5:].split("/", 1)
        if step.isdigit():
            return int(step), phase
    return None, label


def _pipeline_phase(record, plan, rank: int, phase: str) -> str:
    if "pp" not in plan.names or kind(record) not in _P2P or record.peer is None:
        return phase
    mine, theirs = plan.coordinates(rank)["pp"], plan.coordinates(record.peer)["pp"]
    if mine == theirs:
        return phase
    onward = (theirs > mine) == (kind(record) == "send")     # an activation to the next stage, or from the previous
    return "forward" if onward else "backward"


@dataclass(frozen=True)
class TrafficRow:
    """One rank's operations of one kind in one phase of one step on one dimension.

    Attributes:
        rank, step, phase, dimension, kind: where (``phase`` one of :data:`PHASES` or ``"setup"``).
        count: operations. nbytes: their bytes as nccl-tests counts them. wire: their bytes on the
            wire (:func:`.accounting.wire_bytes`), float.
    """

    rank: int
    step: int | None
    phase: str
    dimension: str
    kind: str
    count: int
    nbytes: int
    wire: float


def traffic(results, plan) -> list:
    """Every recorded operation of a :func:`.composed.train` launch, summed per rank, step, phase,
    dimension and kind (``"check"`` left out). A list of :class:`TrafficRow` in issue order of
    first appearance.

    Args:
        results: the :class:`collnb.LaunchResults` (``.calls[r]`` and each rank's ``"marks"``).

    Raises:
        ValueError: the launch was made without ``record_calls=True``.
    """
    calls = getattr(results, "calls", None)
    if calls is None or any(r.get("marks") is None for r in results):
        raise ValueError(_("traffic needs the recorded calls: launch with record_calls=True (run_composition does)"))
    groups = dimension_groups(plan)
    rows: dict = {}
    for rank, (records, result) in enumerate(zip(calls, results)):
        label = "setup"
        for entry in interleave(records, result["marks"]):
            if isinstance(entry, str):
                label = entry
                continue
            step, phase = phase_of_marks(label)
            if phase == "check":
                continue
            phase = _pipeline_phase(entry, plan, rank, phase)
            key = (rank, step, phase, dimension_of(entry, plan, rank, groups), kind(entry))
            c, b, w = rows.get(key, (0, 0, 0.0))
            rows[key] = (c + 1, b + entry.nbytes, w + wire_bytes(entry))
    return [TrafficRow(*key, *value) for key, value in rows.items()]


def _select(rows, rank=None, step=None) -> list:
    return [r for r in rows if (rank is None or r.rank == rank) and (step is None or r.step == step)]


def dimension_bytes(rows, *, rank: int | None = None, step: int | None = None, wire: bool = True) -> dict:
    """``{dimension: bytes}`` summed over ``rows`` (of ``rank`` / ``step`` when given): the wire
    bytes (``wire=True``) or nccl-tests' ``nbytes``. Divide by the ranks for a per-rank mean."""
    out: dict = {}
    for r in _select(rows, rank, step):
        out[r.dimension] = out.get(r.dimension, 0) + (r.wire if wire else r.nbytes)
    return out


def nodes_of(plan, ranks_per_node: int) -> list:
    """Each rank's node when ranks are placed node by node (rank ``r`` on node ``r //
    ranks_per_node``, torchrun's and Slurm's block placement)."""
    if ranks_per_node < 1 or plan.world_size % ranks_per_node:
        raise ValueError(_("{n} ranks do not fill nodes of {per} ranks").format(n=plan.world_size, per=ranks_per_node))
    return [r // ranks_per_node for r in range(plan.world_size)]


def inter_node_bytes(rows, plan, ranks_per_node: int, *, step: int | None = None) -> dict:
    """``{dimension: wire bytes}`` of the dimensions whose groups span more than one node (their
    every byte is counted as crossing: with one rank per node in a group it does), summed over
    ranks and ``rows`` (of ``step``). Dimensions inside a node are left out."""
    nodes = nodes_of(plan, ranks_per_node)
    crossing = set()
    for ranks, name in dimension_groups(plan).items():
        if len({nodes[r] for r in ranks}) > 1:
            crossing.add(name)
    out: dict = {}
    for r in _select(rows, None, step):
        if r.dimension in crossing:
            out[r.dimension] = out.get(r.dimension, 0) + r.wire
    return out


def traffic_table(rows, *, rank: int = 0, step: int | None = None) -> str:
    """A text table of one rank's traffic (of ``step``, default: the last step): one line per
    dimension, phase and kind with the count, bytes (nccl-tests) and bytes on the wire, and a
    total line per dimension."""
    if step is None:
        steps = [r.step for r in rows if r.step is not None]
        step = max(steps) if steps else None
    chosen = _select(rows, rank, step)
    order = {p: i for i, p in enumerate(("setup",) + PHASES)}
    chosen.sort(key=lambda r: (r.dimension, order.get(r.phase, 9)))
    lines = [pad(_("dimension"), 16) + pad(_("phase"), 11) + pad(_("kind"), 16) + pad(_("count"), 6, ">")
             + pad(_("bytes"), 12, ">") + pad(_("on the wire"), 14, ">")]
    for _dim, group in itertools.groupby(chosen, key=lambda r: r.dimension):
        group = list(group)
        for r in group:
            lines.append(pad(r.dimension, 16) + pad(r.phase, 11) + pad(r.kind, 16) + f"{r.count:>6}"
                         + f"{format_bytes(r.nbytes):>12}{format_bytes(r.wire):>14}")
        lines.append(pad("", 16) + pad(_("total"), 27) + f"{sum(r.count for r in group):>6}"
                     + f"{format_bytes(sum(r.nbytes for r in group)):>12}{format_bytes(sum(r.wire for r in group)):>14}")
    return "\n".join(lines)
