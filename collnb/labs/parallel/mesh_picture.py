"""A picture of a device mesh with each dimension's traffic: the ranks laid out by their mesh
coordinates, every process group of a dimension drawn as a coloured link between its ranks, and
beside it, per dimension, the collectives of one step and the bytes each rank sends.

Layout: the innermost dimension runs left to right, the next one top to bottom, a third (the
outermost of three) repeats the grid side by side. A flattened dimension (``dp_shard_cp``:
FSDP2's group over two dimensions at once) is drawn as a coloured frame around each of its ranks.
With ``ranks_per_node`` each rank box names its node and the links whose groups cross nodes are
drawn dashed: those bytes go over the slower network.

The numbers are :func:`.mesh_traffic.dimension_bytes` of the recorded calls, divided by the world
size (the mean over ranks), so they equal the recorded calls by construction; tests compare them.
"""

from __future__ import annotations

from ...i18n import _
from ...units import format_bytes
from ...views.matrix import MatrixPicture
from ...views.palette import GREY_TEXT, INK, MIN_LABEL_PX, hex_rgb
from ...views.raster import Canvas, encode_png
from .mesh_traffic import PHASES, dimension_groups, nodes_of

__all__ = ["mesh_image", "DIMENSION_COLORS", "legend_lines"]

#: One colour per dimension in the order the plan lists them, then the flattened ones
#: (Okabe-Ito's blue, orange, green, vermillion, reddish purple, sky blue; readable under the
#: common colour-vision deficiencies).
DIMENSION_COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#999933", "#666666"]
_BOX_W, _BOX_H, _GAP, _VGAP = 96, 56, 44, 64
_NODE_TINTS = [hex_rgb("#F2F2F2"), hex_rgb("#E3E8EF")]


def _position(plan, rank: int) -> tuple:
    coords = plan.coordinates(rank)
    sizes = plan.sizes
    values = [coords[r] for r in plan.names]
    col = values[-1]
    row = values[-2] if len(values) >= 2 else 0
    block = values[-3] if len(values) >= 3 else 0
    cols = sizes[-1]
    return block * (cols + 1) + col, row


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
               note: str = "") -> MatrixPicture:
    """Paint ``plan``'s mesh with the traffic of ``rows`` (:func:`.mesh_traffic.traffic`).

    Args:
        step: which step's traffic (default: the last).
        title: a line above (default: the plan). note: a line below.
        ranks_per_node: place ranks node by node (``r // ranks_per_node``) and mark the links
            and legend lines of the dimensions whose groups cross nodes.

    Every mesh dimension gets a legend entry (one without collectives of its own says so, e.g.
    ``dp_shard`` when FSDP2 runs over ``dp_shard_cp``); the legend sits right of the grid, or
    under it when the grid is wide. At most 1000 pixels wide.

    Returns:
        :class:`collnb.views.MatrixPicture` (``.png``; shown as a PNG in a notebook; ``.labels``
        every text and its box).
    """
    steps = [r.step for r in rows if r.step is not None]
    step = step if step is not None else (max(steps) if steps else None)
    legend = legend_lines(rows, plan, step, ranks_per_node)
    with_traffic = {d for d, *_rest in legend}
    crossing_all = set()
    if ranks_per_node:
        nodes_ = nodes_of(plan, ranks_per_node)
        for ranks, name in dimension_groups(plan).items():
            if len({nodes_[x] for x in ranks}) > 1:
                crossing_all.add(name)
    entries = [e for e in legend if e[0] in plan.names]
    entries += [(d, "", 0.0, 0.0, d in crossing_all) for d in plan.names if d not in with_traffic]
    entries.sort(key=lambda e: plan.names.index(e[0]))
    entries += [e for e in legend if e[0] not in plan.names]
    colors = {}
    for i, d in enumerate(list(plan.names) + [e[0] for e in entries if e[0] not in plan.names]):
        colors[d] = hex_rgb(DIMENSION_COLORS[i % len(DIMENSION_COLORS)])
    positions = {r: _position(plan, r) for r in range(plan.world_size)}
    n_cols = max(x for x, _y in positions.values()) + 1
    n_rows = max(y for _x, y in positions.values()) + 1
    probe = Canvas(1, 1)
    three = len(plan.names) >= 3
    pad_left, head = 24, 60 + (34 if three else 0)      # room for the third dimension's arcs
    grid_w = n_cols * (_BOX_W + _GAP)
    grid_h = n_rows * (_BOX_H + _VGAP) + 10 + (34 if three else 0)
    text_px = MIN_LABEL_PX + 3
    line_h = 19
    beside = pad_left + grid_w + 16 + 400 <= 1000
    legend_x = pad_left + grid_w + 16 if beside else 24
    width = min(1000, max(legend_x + 400, pad_left + grid_w + 12, 640))
    text_w = width - legend_x - 44
    legend_h = 12
    for _d, kinds, _w, _b, _c in entries:
        legend_h += 2 * line_h + (line_h - 3) * len(_fit(probe, kinds, text_w, text_px - 2) if kinds else []) + 8
    legend_top = head + 18 if beside else head + grid_h + 24
    body = max(grid_h, legend_h) if beside else grid_h + 24 + legend_h
    height = head + body + (28 if note else 8)
    cv = Canvas(width, height)
    cv.labels = []
    cv.text(title or plan.text(), 12, 18, 16, INK, "bold", ha="left")
    cv.text(_("bytes each rank sends per step, mean over ranks (step {step}; the 'check' gathers left out)").format(
        step=step), 12, 40, text_px - 1, GREY_TEXT, ha="left")
    nodes = nodes_of(plan, ranks_per_node) if ranks_per_node else None

    def centre(rank):
        x, y = positions[rank]
        return pad_left + x * (_BOX_W + _GAP) + _BOX_W / 2, head + 14 + y * (_BOX_H + _VGAP) + _BOX_H / 2

    groups = dimension_groups(plan)
    outer = plan.names[-3] if three else None
    # Links of the real dimensions, a small offset per dimension so they never overlap; the third
    # dimension (grids side by side) as arcs over the top row and under the bottom row.
    for i, name in enumerate(plan.names):
        offset = (i - (len(plan.names) - 1) / 2) * 7
        for ranks, dim in groups.items():
            if dim != name:
                continue
            members = sorted(ranks, key=lambda r: plan.coordinates(r)[name])
            for a, b in zip(members, members[1:]):
                (x0, y0), (x1, y1) = centre(a), centre(b)
                if name == outer:
                    top = positions[a][1] == 0
                    lift = (_BOX_H / 2 + 8 + 7 * (positions[a][0] % 3)) * (-1 if top else 1)
                    pts = [(x0, y0 + lift * 0.6), (x0, y0 + lift), (x1, y1 + lift), (x1, y1 + lift * 0.6)]
                    if name in crossing_all:
                        for p, q in zip(pts, pts[1:]):
                            _dashed(cv, p, q, colors[name], 3)
                    else:
                        cv.line(pts, colors[name], 3)
                    continue
                vertical = abs(x1 - x0) < 1
                p0 = (x0 + (offset if vertical else 0), y0 + (0 if vertical else offset))
                p1 = (x1 + (offset if vertical else 0), y1 + (0 if vertical else offset))
                if name in crossing_all:
                    _dashed(cv, p0, p1, colors[name], 4)
                else:
                    cv.line([p0, p1], colors[name], 4)
    # Rank boxes, then the flattened dimensions' frames around them.
    flat = [e[0] for e in entries if e[0] not in plan.names]
    for r in range(plan.world_size):
        cx, cy = centre(r)
        x0, y0 = cx - _BOX_W / 2, cy - _BOX_H / 2
        fill = _NODE_TINTS[nodes[r] % 2] if nodes else hex_rgb("#F5F5F5")
        cv.rect(x0, y0, x0 + _BOX_W, y0 + _BOX_H, hex_rgb("#9E9E9E"))
        cv.rect(x0 + 1, y0 + 1, x0 + _BOX_W - 1, y0 + _BOX_H - 1, fill)
        for j, d in enumerate(flat):
            inset = 2 + 4 * j
            cv.frame(x0 + inset, y0 + inset, x0 + _BOX_W - inset, y0 + _BOX_H - inset, colors[d], 3)
        coords = ",".join(str(v) for v in plan.coordinates(r).values())
        cv.text(_("rank {rank}").format(rank=r), cx, cy - 9, text_px, INK, "bold")
        cv.text(f"({coords})" + (" · " + _("node {node}").format(node=nodes[r]) if nodes else ""), cx, cy + 11,
                text_px - 2, INK)
    # Axis names.
    names = plan.names
    axes = [_("across: {name}").format(name=names[-1])]
    if len(names) >= 2:
        axes.append(_("down: {name}").format(name=names[-2]))
    if three:
        axes.append(_("{name}: the grids side by side (arcs)").format(name=names[-3]))
    cv.text(" · ".join(axes), pad_left, head + grid_h - 4, text_px - 1, GREY_TEXT, ha="left")
    # Legend.
    y = legend_top
    for d, kinds, wire, nbytes, crosses in entries:
        cv.rect(legend_x, y - 6, legend_x + 26, y + 6, colors[d])
        what = d if d in plan.names else _("{name} (flattened)").format(name=d)
        cv.text(what + (" — " + _("crosses nodes") if crosses else ""), legend_x + 34, y, text_px, INK, "bold",
                ha="left")
        y += line_h
        if not kinds:
            cv.text(_("no collectives of its own"), legend_x + 34, y, text_px - 1, GREY_TEXT, ha="left")
            y += line_h + 8
            continue
        cv.text(_("{wire} on the wire, {nbytes} buffers per rank").format(
            wire=format_bytes(wire), nbytes=format_bytes(nbytes)), legend_x + 34, y, text_px - 1, INK, ha="left")
        y += line_h
        for line in _fit(probe, kinds, text_w, text_px - 2):
            cv.text(line, legend_x + 34, y, text_px - 2, GREY_TEXT, ha="left")
            y += line_h - 3
        y += 8
    if note:
        cv.text(note, 12, height - 14, text_px - 1, GREY_TEXT, ha="left")
    return MatrixPicture(encode_png(cv.image), cv.pixels(), cv.labels)


def _fit(cv: Canvas, text: str, width: float, size: float) -> list:
    from ...views.raster import wrap_text

    return wrap_text(text, width, lambda t: cv.measure(t, size)[0])


def _dashed(cv: Canvas, p0, p1, color, width: int, dash: float = 6.0) -> None:
    (x0, y0), (x1, y1) = p0, p1
    length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
    n = max(1, int(length // dash))
    for i in range(0, n, 2):
        a, b = i / n, min(1.0, (i + 1) / n)
        cv.line([(x0 + a * (x1 - x0), y0 + a * (y1 - y0)), (x0 + b * (x1 - x0), y0 + b * (y1 - y0))], color, width)
