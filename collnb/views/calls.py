"""The collectives a launch recorded, step by step: as text and as a picture, for any
``collnb.launch(fn, n, record_calls=True)`` result.

The records come from the recorder of ``collnb.launch(..., record_calls=True)`` (one
:class:`collnb.ranks.CallRecord` per operation each rank issued, where torch dispatched it). This module lines them up:

* a **step** is the ``i``-th operation of every rank (SPMD code issues its collectives in the same
  order on every rank: a DTensor redistribute, tensor parallelism, FSDP2). A :class:`Step` holds
  each rank's record, the operation (``kind``), the distinct process groups taking part (global
  ranks), the mesh dimension(s) each group spans when a mesh is given, shapes and bytes per rank,
  and ``count`` (identical consecutive steps merged, ``merge=True``: FSDP2's per-layer gathers);
* :func:`calls_text` writes them one step per block, one line per rank, plus the totals per rank;
* :func:`calls_image` / :func:`calls_png` paint them: one row per rank (labelled with its mesh
  coordinate), one column per step; in each column the ranks of one group are joined by a line in
  the group's colour (which ranks exchange), and each cell names the group, the mesh dimension,
  the bytes and the shapes; wide runs wrap into bands no wider than :data:`collnb.views.palette.MAX_WIDTH_PX`;
* :class:`CallsView` bundles the three for a notebook (``display(CallsView(res, mesh=(2, 2)))``
  shows the picture, ``print`` shows the text); :func:`call_counts` counts operations per rank
  as ``CommDebugMode.get_comm_counts`` does, by operation name.

``calls`` is a ``LaunchResults`` (its ``.calls``) or a sequence with one sequence of records per
rank. ``start``/``stop`` (an int, or one int per rank) keep a slice of each rank's records: the
records a function issued after its set-up. ``mesh`` is a mesh shape (``(2, 2)``: ranks laid out
row-major, as ``init_device_mesh`` lays them out) or the mesh's ranks as nested lists
(``DeviceMesh.mesh.tolist()``); ``dim_names`` names its dimensions (``("dp", "tp")``).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence, TypeAlias

import numpy as np
from numpy.typing import NDArray

from ..i18n import _
from ..units import format_bytes
from .palette import GREY_TEXT, INK, MAX_WIDTH_PX, MIN_LABEL_PX, FloatRGB, rank_color, rank_text_color
from .raster import Box, Canvas, Label, Pixels, RGB8, encode_png, wrap_text

if TYPE_CHECKING:
    from IPython.lib.pretty import PrettyPrinter
    from torch.distributed.device_mesh import DeviceMesh

    from ..ranks import CallRecord, LaunchResults

__all__ = ["Step", "CallsView", "CallsImage", "call_steps", "calls_text", "calls_image", "calls_png",
           "call_counts", "mesh_dims_of", "mesh_ranks"]

#: The records a function reads: ``launch(..., record_calls=True)``'s result (its ``.calls``), or one
#: sequence of :class:`~collnb.ranks.CallRecord` per rank.
Calls: TypeAlias = "LaunchResults | Iterable[Iterable[CallRecord]]"
#: A mesh (see :func:`mesh_ranks`): its shape, its ranks as nested lists or an int array, or a DeviceMesh.
MeshLike: TypeAlias = "int | tuple[int, ...] | Sequence[object] | NDArray[np.integer] | DeviceMesh | None"
#: ``start``/``stop``: one bound for every rank, or one per rank (``None``: the end).
Bound: TypeAlias = "int | None | Iterable[int | None]"
#: A group's ranks (global, group order).
_Group: TypeAlias = tuple[int, ...]

#: Widest picture, in pixels: JupyterLab's output area at a 1440 px window (see views.heatmap).
#: Line and text colours of the groups of one step (dark: >= 4.5:1 on the tinted cells, checked in the tests).
_GROUP_COLORS = ("#1F4E79", "#A50026", "#14602B", "#762A83", "#7A4508", "#01574F", "#4D4D4D", "#000000")


@dataclass(frozen=True)
class Step:
    """The ``index``-th operation of every rank (see the module docstring).

    Attributes:
        index: position in each rank's records (0-based, after ``start``).
        records: ``((rank, CallRecord), ...)`` for each rank with a record at this step, rank order.
        count: how many identical consecutive steps this one stands for (``merge=True``), else 1.
        mesh_dims: ``{group ranks (tuple): mesh dims (tuple of int) or None}``: which mesh
            dimension(s) each group spans (``(1,)``: a row of a 2-D mesh; ``(0, 1)``: the whole 2-D
            mesh); ``None`` where the group is not a sub-mesh, or no mesh was given.
    """

    index: int
    records: tuple[tuple[int, CallRecord], ...]
    count: int = 1
    mesh_dims: dict[_Group, tuple[int, ...] | None] = field(default_factory=dict)

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks with a record at this step."""
        return tuple(r for r, _ in self.records)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The distinct operations (``CallRecord.operation``) at this step, in rank order."""
        return tuple(dict.fromkeys(rec.operation for _, rec in self.records))

    @property
    def kind(self) -> str:
        """The operation every rank issued, or ``"mixed (a, b)"`` when they differ."""
        kinds = self.kinds
        return kinds[0] if len(kinds) == 1 else f"mixed ({', '.join(kinds)})"

    @property
    def groups(self) -> tuple[_Group, ...]:
        """The distinct process groups (global ranks, group order) at this step, by first rank."""
        return tuple(dict.fromkeys(rec.group_ranks for _, rec in self.records))

    @property
    def mesh_dim(self) -> tuple[int, ...] | None:
        """The mesh dimension(s) every group of the step spans (a tuple of int), or ``None``
        when they differ or are not known."""
        dims = set(self.mesh_dims.get(g) for g in self.groups)
        return dims.pop() if len(dims) == 1 else None

    def record(self, rank: int) -> CallRecord | None:
        """Rank ``rank``'s :class:`CallRecord` at this step, or ``None``."""
        return dict(self.records).get(rank)

    @property
    def nbytes(self) -> dict[int, int]:
        """``{rank: bytes}`` of one operation of this step (``CallRecord.nbytes``)."""
        return {r: rec.nbytes for r, rec in self.records}


# ----------------------------------------------------------------------------------------------
# Lining the records up


def _per_rank(calls: Calls) -> list[list[CallRecord]]:
    per = getattr(calls, "calls", calls)
    if per is None or isinstance(per, (str, bytes)):
        raise TypeError("calls must be a launch(..., record_calls=True) result or one list of CallRecords "
                        f"per rank; got {type(calls).__name__}")
    per = list(per)
    for r, recs in enumerate(per):
        if isinstance(recs, (str, bytes)) or not hasattr(recs, "__iter__"):
            raise TypeError(f"rank {r}'s calls must be a list of CallRecords; got {type(recs).__name__}. "
                            "Pass launch(..., record_calls=True)'s result (or its .calls)")
    return [list(recs) for recs in per]


def _bound(value: Bound, n: int, name: str) -> list[int | None]:
    if value is None or isinstance(value, int):
        return [value] * n
    values = list(value)
    if len(values) != n or not all(v is None or isinstance(v, int) for v in values):
        raise ValueError(f"{name} must be an int or one int per rank ({n} ranks); got {values!r}")
    return values


def mesh_ranks(mesh: MeshLike) -> NDArray[np.int64] | None:
    """The mesh's global ranks as an int array: ``mesh`` a shape (``(2, 2)``: ranks 0..3 row-major,
    as ``init_device_mesh`` lays them out), nested lists of ranks (``DeviceMesh.mesh.tolist()``),
    an array, or ``None`` (returns ``None``).

    Raises:
        ValueError: a shape with a size below 1, or ranks that repeat.
    """
    if mesh is None:
        return None
    if hasattr(mesh, "mesh") and hasattr(mesh, "ndim"):  # a DeviceMesh
        mesh = mesh.mesh.tolist()
    if isinstance(mesh, int):
        mesh = (mesh,)
    if isinstance(mesh, tuple) and all(isinstance(s, int) for s in mesh):
        if not mesh or any(s < 1 for s in mesh):
            raise ValueError(f"a mesh shape needs sizes >= 1; got {mesh!r}")
        return np.arange(int(np.prod(mesh))).reshape(mesh)
    arr = np.asarray(mesh.tolist() if hasattr(mesh, "tolist") else mesh)
    if arr.dtype.kind not in "iu" or arr.size == 0 or len(np.unique(arr)) != arr.size:
        raise ValueError(f"a mesh is a shape such as (2, 2) or its ranks as nested lists, each rank once; got {mesh!r}")
    return arr.astype(np.int64)


def mesh_dims_of(group_ranks: Iterable[int], mesh: MeshLike) -> tuple[int, ...] | None:
    """The mesh dimensions a process group spans: the smallest set of dimensions ``D`` such that
    the group's ranks are the sub-mesh through its first rank along ``D`` (``(1,)``: a row of a
    2-D mesh, ``(0, 1)``: the whole mesh); ``None`` when the group is no such sub-mesh (or
    ``mesh`` is ``None``). ``mesh`` as for :func:`mesh_ranks`."""
    arr = mesh_ranks(mesh)
    group = tuple(int(r) for r in group_ranks)
    if arr is None or not group:
        return None
    where = np.argwhere(arr == group[0])
    if not len(where):
        return None
    coord = tuple(int(c) for c in where[0])
    want = set(group)
    for k in range(1, arr.ndim + 1):
        for dims in itertools.combinations(range(arr.ndim), k):
            index = tuple(slice(None) if d in dims else coord[d] for d in range(arr.ndim))
            if set(arr[index].ravel().tolist()) == want:
                return dims
    return None


def _same(a: Step, b: Step) -> bool:
    def key(s: Step) -> tuple[tuple[object, ...], ...]:
        return tuple((r, rec.operation, rec.group_ranks, rec.shapes, rec.dtypes, rec.nbytes) for r, rec in s.records)
    return key(a) == key(b)


def call_steps(calls: Calls, *, mesh: MeshLike = None, start: Bound = 0, stop: Bound = None,
               merge: bool = False) -> list[Step]:
    """The records lined up as :class:`Step` objects (see the module docstring).

    Args:
        calls: ``launch(..., record_calls=True)``'s result, or one list of records per rank.
        mesh: a mesh shape or its ranks (see :func:`mesh_ranks`), to name each group's mesh dimension.
        start, stop: keep records ``[start:stop]`` of each rank (an int, or one per rank).
        merge: merge identical consecutive steps into one with ``count`` > 1.

    Returns:
        list of :class:`Step`, in issue order.

    Raises:
        TypeError / ValueError: ``calls``, ``start``/``stop`` or ``mesh`` of the wrong kind.
    """
    per = _per_rank(calls)
    n = len(per)
    starts, stops = _bound(start, n, "start"), _bound(stop, n, "stop")
    per = [recs[(s or 0):e] for recs, s, e in zip(per, starts, stops)]
    mesh_arr = mesh_ranks(mesh)
    steps: list[Step] = []
    dims_cache: dict[_Group, tuple[int, ...] | None] = {}
    for i in range(max((len(r) for r in per), default=0)):
        records = tuple((r, recs[i]) for r, recs in enumerate(per) if i < len(recs))
        dims: dict[_Group, tuple[int, ...] | None] = {}
        for _r, rec in records:
            g = rec.group_ranks
            if g not in dims_cache:
                dims_cache[g] = mesh_dims_of(g, mesh_arr) if mesh_arr is not None else None
            dims[g] = dims_cache[g]
        step = Step(i, records, 1, dims)
        if merge and steps and _same(steps[-1], step):
            last = steps[-1]
            steps[-1] = Step(last.index, last.records, last.count + 1, last.mesh_dims)
        else:
            steps.append(step)
    return steps


def call_counts(calls: Calls, *, start: Bound = 0, stop: Bound = None) -> list[dict[str, int]]:
    """Per rank, ``{operation: count}`` of its records (``CallRecord.operation``), as
    :class:`torch.distributed.tensor.debug.CommDebugMode`'s ``get_comm_counts`` counts by operator
    (one dict per rank, rank order; ``start``/``stop`` as for :func:`call_steps`)."""
    per = _per_rank(calls)
    starts, stops = _bound(start, len(per), "start"), _bound(stop, len(per), "stop")
    out = []
    for recs, s, e in zip(per, starts, stops):
        counts: dict[str, int] = {}
        for rec in recs[(s or 0):e]:
            counts[rec.operation] = counts.get(rec.operation, 0) + 1
        out.append(counts)
    return out


# ----------------------------------------------------------------------------------------------
# Words


def _coord(rank: int, mesh_arr: NDArray[np.int64] | None) -> tuple[int, ...] | None:
    if mesh_arr is None:
        return None
    where = np.argwhere(mesh_arr == rank)
    return tuple(int(c) for c in where[0]) if len(where) else None


def _dims_text(dims: tuple[int, ...] | None, dim_names: Sequence[str] | None = None) -> str:
    if dims is None:
        return ""
    names = [f"{d} ({dim_names[d]!r})" if dim_names and d < len(dim_names) else str(d) for d in dims]
    return (_("mesh dim {dims}") if len(dims) == 1 else _("mesh dims {dims}")).format(dims=", ".join(names))


#: Operations of ``torch.distributed`` (and ``ProcessGroup``) whose two tensors are recorded output
#: first, then input (the order of their arguments): shown input → output, as a functional one's.
OUTPUT_FIRST = frozenset({"all_gather_into_tensor", "all_gather_single", "_all_gather_base", "reduce_scatter_tensor",
                          "reduce_scatter_single", "_reduce_scatter_base", "all_to_all_single"})


def _shapes_text(rec: CallRecord) -> str:
    """A record's shapes (and dtype) as text: ``(4, 8) → (16, 8) float64`` for an operation that reads
    one tensor and writes another (input first, whatever the order of its arguments), the shapes side by
    side otherwise (a list form's tensors, in argument order)."""
    if not rec.shapes:
        return _("no tensor")
    dt = set(rec.dtypes)
    shapes = ["(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")" for s in rec.shapes]
    if len(shapes) == 2 and rec.source in ("functional", "DTensor"):
        text = " → ".join(shapes)  # a functional collective's (DTensor's): its input, then what it returned
    elif len(shapes) == 2 and rec.operation in OUTPUT_FIRST:
        text = " → ".join(reversed(shapes))
    else:
        text = " ".join(shapes)
    return text + (f" {dt.pop()}" if len(dt) == 1 else "")


def calls_text(calls: Calls, *, mesh: MeshLike = None, dim_names: Sequence[str] | None = None, start: Bound = 0,
               stop: Bound = None, merge: bool = False) -> str:
    """The steps as text: for each step its operation, mesh dimension and groups, then one line
    per rank (mesh coordinate, group, shapes and dtype as recorded, bytes), and at the end each
    rank's totals. Arguments as for :func:`call_steps`; ``dim_names`` names the mesh dimensions."""
    steps = call_steps(calls, mesh=mesh, start=start, stop=stop, merge=merge)
    mesh_arr = mesh_ranks(mesh)
    if not steps:
        return _("no communication recorded")
    lines = []
    for s in steps:
        where = _dims_text(s.mesh_dim, dim_names)
        groups = " ".join("[" + ", ".join(map(str, g)) + "]" for g in s.groups)
        count = f" ×{s.count}" if s.count > 1 else ""
        lines.append(_("step {step}{count}: {kind}").format(step=s.index + 1, count=count, kind=s.kind)
                     + (_(" over {where}").format(where=where) if where else "")
                     + _("; groups {groups}").format(groups=groups))
        for r, rec in s.records:
            c = _coord(r, mesh_arr)
            who = f"rank {r}" + (f" {c}" if c is not None else "")
            peer = _(" peer {peer}").format(peer=rec.peer) if rec.peer is not None else ""
            group = _("group [{ranks}]").format(ranks=", ".join(map(str, rec.group_ranks)))
            lines.append(f"  {who:<14} {rec.operation:<24} {group}{peer}  {_shapes_text(rec)}  {format_bytes(rec.nbytes)}")
    per = _per_rank(calls)
    starts, stops = _bound(start, len(per), "start"), _bound(stop, len(per), "stop")
    lines.append(_("per rank:"))
    for r, (recs, a, b) in enumerate(zip(per, starts, stops)):
        recs = recs[(a or 0):b]
        counts = call_counts([recs])[0]
        lines.append("  " + _("rank {rank}: {n} operation(s), {nbytes}").format(
            rank=r, n=len(recs), nbytes=format_bytes(sum(x.nbytes for x in recs)))
                     + ("; " + ", ".join(f"{k} ×{v}" for k, v in counts.items()) if counts else ""))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# The picture


@dataclass
class CallsImage:
    """A painted steps picture: ``pixels`` (uint8 H x W x 3), ``steps`` drawn, ``cells``
    (``{(step index, rank): (x0, y0, x1, y1)}`` pixel boxes), ``labels`` (every text as
    ``(text, size_px, box)``; none below :data:`collnb.views.palette.MIN_LABEL_PX`)."""

    pixels: Pixels
    steps: list[Step]
    cells: dict[tuple[int, int], Box]
    labels: list[Label]

    def png(self) -> bytes:
        """The picture as PNG bytes."""
        return encode_png(self.pixels)


_LABEL_W, _COL_W, _ROW_H, _HEAD_H, _PAD = 120, 178, 54, 40, 10


def calls_image(calls: Calls, *, mesh: MeshLike = None, dim_names: Sequence[str] | None = None, start: Bound = 0,
                stop: Bound = None, merge: bool = True,
                title: str | None = None, max_width: int = MAX_WIDTH_PX) -> CallsImage:
    """Paint the steps (see the module docstring): rows = ranks, columns = steps, bands of at most
    ``max_width`` pixels. Arguments as for :func:`call_steps`; ``title`` goes above the picture.
    A run with no communication paints one line saying so."""
    steps = call_steps(calls, mesh=mesh, start=start, stop=stop, merge=merge)
    mesh_arr = mesh_ranks(mesh)
    n = len(_per_rank(calls))
    per_band = max(1, (max_width - _LABEL_W - 2 * _PAD) // _COL_W)
    bands = [steps[i:i + per_band] for i in range(0, len(steps), per_band)] or [[]]
    band_h = _HEAD_H + n * _ROW_H + _PAD
    width = _LABEL_W + 2 * _PAD + _COL_W * (min(per_band, len(steps)) if steps else 3)
    heading = _wrap(Canvas(1, 1), title, 14, max_width - 2 * _PAD, "bold") if title else []
    if heading:  # as wide as the title needs, up to max_width; longer titles wrap
        width = max(width, min(max_width, 2 * _PAD + max(Canvas(1, 1).measure(t, 14, "bold")[0] for t in heading) + 2))
    top = _PAD + (20 * len(heading) + 6 if heading else 0)
    height = top + band_h * len(bands) + _PAD
    cv = Canvas(width, height)
    cv.labels = []
    cells: dict[tuple[int, int], Box] = {}
    for i, line in enumerate(heading):
        cv.text(line, _PAD, _PAD + 8 + 20 * i, 14, INK, "bold", ha="left")
    if not steps:
        cv.text(_("no communication recorded"), _PAD, top + 20, 13, GREY_TEXT, ha="left")
    for b, band in enumerate(bands):
        y0 = top + b * band_h
        for r in range(n):
            y = y0 + _HEAD_H + r * _ROW_H
            c = _coord(r, mesh_arr)
            cv.text(f"rank {r}", _PAD, y + _ROW_H / 2 - (8 if c is not None else 0), 13, rank_text_color(r),
                    "bold", ha="left")
            if c is not None:
                cv.text(_("mesh {coordinate}").format(coordinate=c), _PAD, y + _ROW_H / 2 + 9, 11, GREY_TEXT, ha="left")
        for j, s in enumerate(band):
            x0 = _PAD + _LABEL_W + j * _COL_W
            count = f" ×{s.count}" if s.count > 1 else ""
            cv.text(_fit(cv, _("step {step}{count}").format(step=s.index + 1, count=count), 12, _COL_W - 12),
                    x0 + 6, y0 + 10, 12, INK, "bold", ha="left")
            cv.text(_fit(cv, s.kind, 12, _COL_W - 12), x0 + 6, y0 + 27, 12, INK, ha="left")
            cv.rect(x0, y0 + _HEAD_H - 4, x0 + _COL_W - 6, y0 + _HEAD_H - 3, (200, 200, 200))
            lanes = {g: k for k, g in enumerate(s.groups)}
            gutter = 8 + 8 * min(len(lanes), 6)
            cx0 = x0 + gutter
            for r, rec in s.records:
                y = y0 + _HEAD_H + r * _ROW_H
                cells[(s.index, r)] = (cx0, y + 3, x0 + _COL_W - 8, y + _ROW_H - 3)
                cv.rect(cx0, y + 3, x0 + _COL_W - 8, y + _ROW_H - 3, _tint(rank_color(r)))
                color = _GROUP_COLORS[lanes[rec.group_ranks] % len(_GROUP_COLORS)]
                cv.rect(cx0, y + 3, cx0 + 4, y + _ROW_H - 3, color)
                dims = s.mesh_dims.get(rec.group_ranks)
                where = _("dim {dims}").format(dims=",".join(map(str, dims))) if dims is not None else ""
                if dims is not None and dim_names and len(dims) == 1 and dims[0] < len(dim_names):
                    where = _("dim {dims}").format(dims=f"{dims[0]} {dim_names[dims[0]]}")
                grp = "[" + ",".join(map(str, rec.group_ranks)) + "]"
                tx, room = cx0 + 9, x0 + _COL_W - 12 - (cx0 + 9)
                cv.text(_fit(cv, f"{grp} {where}".strip(), 11, room), tx, y + 13, 11, color, "bold", ha="left")
                cv.text(_fit(cv, format_bytes(rec.nbytes) + _peer_text(rec), 11, room), tx, y + 28, 11, INK,
                        ha="left")
                cv.text(_fit(cv, _shapes_text(rec), 10, room), tx, y + 42, 10, INK, ha="left")
            for g, k in lanes.items():  # which ranks exchange: one line per group through its rows
                rows = sorted(r for r, rec in s.records if rec.group_ranks == g)
                color = _GROUP_COLORS[k % len(_GROUP_COLORS)]
                lx = x0 + 4 + 8 * min(k, 5)
                ys = [int(y0 + _HEAD_H + r * _ROW_H + _ROW_H / 2) for r in rows]
                if len(ys) > 1:
                    cv.rect(lx, ys[0], lx + 3, ys[-1] + 1, color)
                for yy in ys:
                    cv.rect(lx, yy - 1, cx0, yy + 2, color)
                    cv.rect(lx - 2, yy - 3, lx + 5, yy + 4, color)
    return CallsImage(cv.pixels(), steps, cells, cv.labels)


def _peer_text(rec: CallRecord) -> str:
    """Where a point-to-point operation goes (``"  to 1"``, ``"  from 0"``) or a rooted one's root."""
    if rec.peer is None:
        return ""
    op = rec.operation
    if op in ("send", "isend", "send_object_list"):
        return "  " + _("to {peer}").format(peer=rec.peer)
    if op in ("recv", "irecv", "recv_object_list"):
        return "  " + _("from {peer}").format(peer=rec.peer)
    return "  " + _("root {peer}").format(peer=rec.peer)


def _wrap(cv: Canvas, text: str, size: float, room: float, weight: str = "regular") -> list[str]:
    """``text`` in lines no wider than ``room`` pixels at ``size`` (words kept whole unless one
    alone is wider: then it is cut with an ellipsis)."""
    lines = wrap_text(text, room, lambda t: cv.measure(t, size, weight)[0])
    return [_fit(cv, t, size, room) if cv.measure(t, size, weight)[0] > room else t for t in lines]


def _tint(color: FloatRGB) -> RGB8:
    c = np.asarray(color, dtype=np.float32)
    r, g, b = (int(v) for v in (255 * (0.35 * c + 0.65)))
    return r, g, b


def _fit(cv: Canvas, text: str, size: float, room: float) -> str:
    """``text``, cut with an ellipsis so that it fits ``room`` pixels at ``size``."""
    size = max(size, MIN_LABEL_PX)
    if cv.measure(text, size)[0] <= room:
        return text
    while len(text) > 1 and cv.measure(text + "…", size)[0] > room:
        text = text[:-1]
    return text + "…"


def calls_png(calls: Calls, *, mesh: MeshLike = None, dim_names: Sequence[str] | None = None, start: Bound = 0,
              stop: Bound = None, merge: bool = True, title: str | None = None, max_width: int = MAX_WIDTH_PX) -> bytes:
    """PNG bytes of :func:`calls_image` (same arguments)."""
    return calls_image(calls, mesh=mesh, dim_names=dim_names, start=start, stop=stop, merge=merge, title=title,
                       max_width=max_width).png()


class CallsView:
    """The recorded collectives of a launch, for a notebook: shows as the picture
    (:func:`calls_image`), prints as the text (:func:`calls_text`).

    Args:
        calls: ``launch(..., record_calls=True)``'s result, or one list of records per rank.
        mesh, dim_names, start, stop: as for :func:`calls_text`. title: above the picture.

    Attributes:
        steps: the :class:`Step` list (unmerged). counts: :func:`call_counts`.
    """

    def __init__(self, calls: Calls, *, mesh: MeshLike = None, dim_names: Sequence[str] | None = None,
                 start: Bound = 0, stop: Bound = None, title: str | None = None) -> None:
        self._calls, self._mesh, self._dim_names, self._start, self._stop = calls, mesh, dim_names, start, stop
        self.title = title
        self.steps = call_steps(calls, mesh=mesh, start=start, stop=stop)
        self.counts = call_counts(calls, start=start, stop=stop)

    def text(self, merge: bool = False) -> str:
        """:func:`calls_text` of the records."""
        return calls_text(self._calls, mesh=self._mesh, dim_names=self._dim_names, start=self._start, stop=self._stop,
                          merge=merge)

    def image(self) -> CallsImage:
        """:func:`calls_image` of the records."""
        return calls_image(self._calls, mesh=self._mesh, dim_names=self._dim_names, start=self._start,
                           stop=self._stop, title=self.title)

    def png(self) -> bytes:
        """The picture as PNG bytes."""
        return self.image().png()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the picture to ``path`` (PNG)."""
        with open(path, "wb") as f:
            f.write(self.png())

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"CallsView({len(self.steps)} step(s), {len(self.counts)} rank(s))"

    def _repr_png_(self) -> bytes:
        return self.png()

    def _repr_pretty_(self, p: PrettyPrinter, cycle: bool) -> None:
        p.text(self.text())
