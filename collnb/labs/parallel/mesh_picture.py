"""The mesh picture of a composed step's traffic: each dimension's collectives and bytes from the
recorded calls (:func:`legend_lines`), painted by :func:`collnb.views.mesh_traffic_image`.

The numbers are :func:`.mesh_traffic.dimension_bytes` of the recorded calls, divided by the world
size (the mean over ranks), so they equal the recorded calls by construction; tests compare them.
"""

from __future__ import annotations

from ...i18n import _
from ...views import mesh_traffic_image
from .mesh_traffic import PHASES, dimension_groups, nodes_of

__all__ = ["mesh_image", "legend_lines"]

def _short_kinds(rows) -> str:
    """``"all_gather ×3 fwd, ×3 bwd · reduce_scatter ×3 bwd"`` for one dimension's rows of one rank."""
    by_kind: dict = {}
    for r in rows:
        by_kind.setdefault(r.kind, {})
        by_kind[r.kind][r.phase] = by_kind[r.kind].get(r.phase, 0) + r.count
    short = {"forward": _("fwd"), "backward": _("bwd"), "optimizer": _("opt"), "setup": _("setup")}
    parts = []
    for k, phases in by_kind.items():
        parts.append(k + " " + ", ".join(f"×{n} {short.get(p, p)}" for p, n in
                                         sorted(phases.items(), key=lambda kv: (PHASES + ("setup",)).index(kv[0])
                                                if kv[0] in PHASES + ("setup",) else 9)))
    return " · ".join(parts)


def legend_lines(rows, plan, step: int, ranks_per_node: int | None = None) -> list:
    """``[(dimension, kinds text, mean wire bytes per rank, mean buffer bytes per rank, crosses
    nodes), ...]`` for every dimension with traffic in ``step`` (kinds as rank 0 of that
    dimension's first group issued them), in the plan's order, flattened dimensions last."""
    chosen = [r for r in rows if r.step == step]
    dims = []
    for r in chosen:
        if r.dimension not in dims:
            dims.append(r.dimension)
    order = list(plan.names)
    dims.sort(key=lambda d: (order.index(d) if d in order else len(order), d))
    crossing = set()
    if ranks_per_node:
        nodes = nodes_of(plan, ranks_per_node)
        for ranks, name in dimension_groups(plan).items():
            if len({nodes[x] for x in ranks}) > 1:
                crossing.add(name)
    out = []
    for d in dims:
        mine = [r for r in chosen if r.dimension == d]
        first = min(r.rank for r in mine)
        wire = sum(r.wire for r in mine) / plan.world_size
        nbytes = sum(r.nbytes for r in mine) / plan.world_size
        out.append((d, _short_kinds([r for r in mine if r.rank == first]), wire, nbytes, d in crossing))
    return out


def mesh_image(rows, plan, *, step: int | None = None, title: str = "", ranks_per_node: int | None = None,
               note: str = ""):
    """Paint ``plan``'s mesh with the traffic of ``rows`` (:func:`.mesh_traffic.traffic`) of ``step``
    (default: the last): :func:`collnb.views.mesh_traffic_image` with :func:`legend_lines`.

    Args:
        title: a line above (default: the plan). note: a line below.
        ranks_per_node: place ranks node by node (``r // ranks_per_node``) and mark the links
            and legend lines of the dimensions whose groups cross nodes.

    Returns:
        :class:`collnb.views.MatrixPicture` (``.png``; shown as a PNG in a notebook).
    """
    steps = [r.step for r in rows if r.step is not None]
    step = step if step is not None else (max(steps) if steps else None)
    return mesh_traffic_image(
        plan.names, plan.sizes, legend_lines(rows, plan, step, ranks_per_node), title=title or plan.text(),
        subtitle=_("bytes each rank sends per step, mean over ranks (step {step}; the 'check' gathers left out)").format(
            step=step), ranks_per_node=ranks_per_node, note=note)
