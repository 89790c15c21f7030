"""A device mesh with each dimension's traffic, as a picture: the ranks laid out by their mesh
coordinates, every process group of a dimension drawn as a coloured link between its ranks, and
beside it, per dimension, what the caller says that dimension carried (its collectives and bytes).

Layout: the innermost dimension runs left to right, the next one top to bottom, a third (the
outermost of three) repeats the grid side by side, its links drawn as arcs. A flattened dimension
(``"dp_shard_cp"``: a group over two dimensions at once, named as ``DeviceMesh._flatten`` names
it) is drawn as a coloured frame around each rank. With ``ranks_per_node`` each rank box names its
node and the links of dimensions whose groups cross nodes are dashed. Painted with the views' one
raster engine (:mod:`.raster`) at most :data:`.palette.MAX_WIDTH_PX` wide, labels at least
:data:`.palette.MIN_LABEL_PX`. Plain data in (names, sizes, legend entries): the numbers are the
caller's (:mod:`collnb.labs.parallel.mesh_picture` passes the recorded calls' sums).
"""

from __future__ import annotations

import itertools
import math

from ..i18n import _
from ..units import format_bytes
from .matrix import MatrixPicture
from .palette import GREY_TEXT, INK, MAX_WIDTH_PX, MIN_LABEL_PX, hex_rgb
from .raster import Canvas, encode_png, wrap_text

__all__ = ["mesh_traffic_image", "DIMENSION_COLORS", "mesh_coordinates", "mesh_groups"]

#: One colour per dimension in the order the mesh lists them, then the flattened ones
#: (Okabe-Ito's blue, orange, green, vermillion, reddish purple, sky blue; readable under the
#: common colour-vision deficiencies).
DIMENSION_COLORS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#999933", "#666666"]
_BOX_W, _BOX_H, _GAP, _VGAP = 96, 56, 44, 64
_NODE_TINTS = [hex_rgb("#F2F2F2"), hex_rgb("#E3E8EF")]


def mesh_coordinates(names, sizes, rank: int) -> dict:
    """``{name: index}`` of ``rank`` on a mesh of ``sizes`` (row-major, as ``init_device_mesh``)."""
    out, rest = {}, rank
    for name, size in zip(reversed(names), reversed(sizes)):
        out[name] = rest % size
        rest //= size
    return {name: out[name] for name in names}


def mesh_groups(names, sizes) -> dict:
    """``{frozenset(ranks): name}`` for every group of every dimension and every combination of
    dimensions (flattened, the names joined with ``"_"`` in mesh order)."""
    world = math.prod(sizes)
    out: dict = {}
    for k in range(1, len(names) + 1):
        for subset in itertools.combinations(names, k):
            seen: dict = {}
            for rank in range(world):
                coords = mesh_coordinates(names, sizes, rank)
                seen.setdefault(tuple(v for n, v in coords.items() if n not in subset), set()).add(rank)
            for ranks in seen.values():
                out.setdefault(frozenset(ranks), "_".join(subset))
    return out


def _position(names, sizes, rank: int) -> tuple:
    values = list(mesh_coordinates(names, sizes, rank).values())
    col = values[-1]
    row = values[-2] if len(values) >= 2 else 0
    block = values[-3] if len(values) >= 3 else 0
    return block * (sizes[-1] + 1) + col, row


def mesh_traffic_image(names, sizes, legend, *, title: str = "", subtitle: str = "",
                       ranks_per_node: int | None = None, note: str = "") -> MatrixPicture:
    """Paint a mesh of dimensions ``names`` (outermost first) and ``sizes`` with a legend per dimension.

    Args:
        names, sizes: the mesh (a sequence of str, a sequence of int >= 1; at most 3 dimensions are
            laid out, more are refused).
        legend: ``[(dimension, kinds, wire, nbytes, crosses), ...]``: a dimension name (one of
            ``names`` or several joined by ``"_"``, flattened), a line saying what it carried, the
            bytes on the wire and the buffer bytes per rank (floats), whether it crosses nodes.
            Every dimension of ``names`` missing from it is listed as carrying nothing.
        title, subtitle: lines above. note: a line below.
        ranks_per_node: ranks placed node by node (``r // ranks_per_node``): boxes name their
            node, links crossing nodes are dashed.

    Returns:
        :class:`MatrixPicture` (``.png``; ``.labels``: every text and its box).

    Raises:
        ValueError: more than 3 dimensions, or ranks that do not fill the nodes.
    """
    names, sizes = tuple(names), tuple(int(s) for s in sizes)
    if not 1 <= len(names) <= 3 or len(sizes) != len(names):
        raise ValueError(_("a mesh picture lays out 1 to 3 dimensions; got {names} {sizes}").format(
            names=names, sizes=sizes))
    world = math.prod(sizes)
    if ranks_per_node is not None and (ranks_per_node < 1 or world % ranks_per_node):
        raise ValueError(_("{n} ranks do not fill nodes of {per} ranks").format(n=world, per=ranks_per_node))

    with_traffic = {d for d, *_rest in legend}
    nodes_ = [r // ranks_per_node for r in range(world)] if ranks_per_node else None
    crossing_all = set()
    if nodes_:
        for ranks, name in mesh_groups(names, sizes).items():
            if len({nodes_[x] for x in ranks}) > 1:
                crossing_all.add(name)
    entries = [e for e in legend if e[0] in names]
    entries += [(d, "", 0.0, 0.0, d in crossing_all) for d in names if d not in with_traffic]
    entries.sort(key=lambda e: names.index(e[0]))
    entries += [e for e in legend if e[0] not in names]
    colors = {}
    for i, d in enumerate(list(names) + [e[0] for e in entries if e[0] not in names]):
        colors[d] = hex_rgb(DIMENSION_COLORS[i % len(DIMENSION_COLORS)])
    positions = {r: _position(names, sizes, r) for r in range(world)}
    n_cols = max(x for x, _y in positions.values()) + 1
    n_rows = max(y for _x, y in positions.values()) + 1
    probe = Canvas(1, 1)
    three = len(names) >= 3
    pad_left, head = 24, 60 + (34 if three else 0)      # room for the third dimension's arcs
    grid_w = n_cols * (_BOX_W + _GAP)
    grid_h = n_rows * (_BOX_H + _VGAP) + 10 + (34 if three else 0)
    text_px = MIN_LABEL_PX + 3
    line_h = 19
    beside = pad_left + grid_w + 16 + 400 <= MAX_WIDTH_PX
    legend_x = pad_left + grid_w + 16 if beside else 24
    width = min(MAX_WIDTH_PX, max(legend_x + 400, pad_left + grid_w + 12, 640))
    text_w = width - legend_x - 44
    legend_h = 12
    for _d, kinds, _w, _b, _c in entries:
        legend_h += 2 * line_h + (line_h - 3) * len(_fit(probe, kinds, text_w, text_px - 2) if kinds else []) + 8
    legend_top = head + 18 if beside else head + grid_h + 24
    body = max(grid_h, legend_h) if beside else grid_h + 24 + legend_h
    height = head + body + (28 if note else 8)
    cv = Canvas(width, height)
    cv.labels = []
    cv.text(title or " × ".join(f"{n}={s}" for n, s in zip(names, sizes)), 12, 18, 16, INK, "bold", ha="left")
    if subtitle:
        cv.text(subtitle, 12, 40, text_px - 1, GREY_TEXT, ha="left")
    nodes = nodes_

    def centre(rank):
        x, y = positions[rank]
        return pad_left + x * (_BOX_W + _GAP) + _BOX_W / 2, head + 14 + y * (_BOX_H + _VGAP) + _BOX_H / 2

    groups = mesh_groups(names, sizes)
    outer = names[-3] if three else None
    # Links of the real dimensions, a small offset per dimension so they never overlap; the third
    # dimension (grids side by side) as arcs over the top row and under the bottom row.
    for i, name in enumerate(names):
        offset = (i - (len(names) - 1) / 2) * 7
        for ranks, dim in groups.items():
            if dim != name:
                continue
            members = sorted(ranks, key=lambda r: mesh_coordinates(names, sizes, r)[name])
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
    flat = [e[0] for e in entries if e[0] not in names]
    for r in range(world):
        cx, cy = centre(r)
        x0, y0 = cx - _BOX_W / 2, cy - _BOX_H / 2
        fill = _NODE_TINTS[nodes[r] % 2] if nodes else hex_rgb("#F5F5F5")
        cv.rect(x0, y0, x0 + _BOX_W, y0 + _BOX_H, hex_rgb("#9E9E9E"))
        cv.rect(x0 + 1, y0 + 1, x0 + _BOX_W - 1, y0 + _BOX_H - 1, fill)
        for j, d in enumerate(flat):
            inset = 2 + 4 * j
            cv.frame(x0 + inset, y0 + inset, x0 + _BOX_W - inset, y0 + _BOX_H - inset, colors[d], 3)
        coords = ",".join(str(v) for v in mesh_coordinates(names, sizes, r).values())
        cv.text(_("rank {rank}").format(rank=r), cx, cy - 9, text_px, INK, "bold")
        cv.text(f"({coords})" + (" · " + _("node {node}").format(node=nodes[r]) if nodes else ""), cx, cy + 11,
                text_px - 2, INK)
    # Axis names.
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
        what = d if d in names else _("{name} (flattened)").format(name=d)
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
    return wrap_text(text, width, lambda t: cv.measure(t, size)[0])


def _dashed(cv: Canvas, p0, p1, color, width: int, dash: float = 6.0) -> None:
    (x0, y0), (x1, y1) = p0, p1
    length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
    n = max(1, int(length // dash))
    for i in range(0, n, 2):
        a, b = i / n, min(1.0, (i + 1) / n)
        cv.line([(x0 + a * (x1 - x0), y0 + a * (y1 - y0)), (x0 + b * (x1 - x0), y0 + b * (y1 - y0))], color, width)
