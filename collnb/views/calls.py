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
from dataclasses import dataclass, field

import numpy as np

from ..i18n import _
from ..units import format_bytes
from .palette import GREY_TEXT, INK, MAX_WIDTH_PX, MIN_LABEL_PX, rank_color, rank_text_color
from .raster import Canvas, encode_png, wrap_text

__all__ = ["Step", "CallsView", "CallsImage", "call_steps", "calls_text", "calls_image", "calls_png",
           "call_counts", "mesh_dims_of", "mesh_ranks"]

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
    records: tuple
    count: int = 1
    mesh_dims: dict = field(default_factory=dict)

    @property
    def ranks(self) -> tuple:
        """The ranks with a record at this step."""
        return tuple(r for r, _ in self.records)

    @property
    def kinds(self) -> tuple:
        """The distinct operations (``CallRecord.operation``) at this step, in rank order."""
        return tuple(dict.fromkeys(rec.operation for _, rec in self.records))

    @property
    def kind(self) -> str:
        """The operation every rank issued, or ``"mixed (a, b)"`` when they differ."""
        kinds = self.kinds
        return kinds[0] if len(kinds) == 1 else f"mixed ({', '.join(kinds)})"

    @property
    def groups(self) -> tuple:
        """The distinct process groups (global ranks, group order) at this step, by first rank."""
        return tuple(dict.fromkeys(rec.group_ranks for _, rec in self.records))

    @property
    def mesh_dim(self):
        """The mesh dimension(s) every group of the step spans (a tuple of int), or ``None``
        when they differ or are not known."""
        dims = set(self.mesh_dims.get(g) for g in self.groups)
        return dims.pop() if len(dims) == 1 else None

    def record(self, rank: int):
        """Rank ``rank``'s :class:`CallRecord` at this step, or ``None``."""
        return dict(self.records).get(rank)

    @property
    def nbytes(self) -> dict:
        """``{rank: bytes}`` of one operation of this step (``CallRecord.nbytes``)."""
        return {r: rec.nbytes for r, rec in self.records}


# ----------------------------------------------------------------------------------------------
# Lining the records up


def _per_rank(calls) -> list:
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


def _bound(value, n: int, name: str) -> list:
    if value is None or isinstance(value, int):
        return [value] * n
    value = list(value)
    if len(value) != n or not all(v is None or isinstance(v, int) for v in value):
        raise ValueError(f"{name} must be an int or one int per rank ({n} ranks); got {value!r}")
    return value


def mesh_ranks(mesh) -> np.ndarray | None:
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


def mesh_dims_of(group_ranks, mesh) -> tuple | None:
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
    def key(s):
        return tuple((r, rec.operation, rec.group_ranks, rec.shapes, rec.dtypes, rec.nbytes) for r, rec in s.records)
    return key(a) == key(b)


def call_steps(calls, *, mesh=None, start=0, stop=None, merge: bool = False) -> list:
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
    steps, dims_cache = [], {}
    for i in range(max((len(r) for r in per), default=0)):
        records = tuple((r, recs[i]) for r, recs in enumerate(per) if i < len(recs))
        dims = {}
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


def call_counts(calls, *, start=0, stop=None) -> list:
    """Per rank, ``{operation: count}`` of its records (``CallRecord.operation``), as
    :class:`torch.distributed.tensor.debug.CommDebugMode`'s ``get_comm_counts`` counts by operator
    (one dict per rank, rank order; ``start``/``stop`` as for :func:`call_steps`)."""
    per = _per_rank(calls)
    starts, stops = _bound(start, len(per), "start"), _bound(stop, len(per), "stop")
    out = []
    for recs, s, e in zip(per, starts, stops):
        counts: dict = {}
        for rec in recs[(s or 0):e]:
            counts[rec.operation] = counts.get(rec.operation, 0) + 1
        out.append(counts)
    return out


# ----------------------------------------------------------------------------------------------
# Words


def _coord(rank, mesh_arr):
    if mesh_arr is None:
        return None
    where = np.argwhere(mesh_arr == rank)
    return tuple(int(c) for c in where[0]) if len(where) else None


def _dims_text(dims, dim_names=None) -> str:
    if dims is None:
        return ""
    names = [f"{d} ({dim_names[d]!r})" if dim_names and d < len(dim_names) else str(d) for d in dims]
    return (_("mesh dim {dims}") if len(dims) == 1 else _("mesh dims {dims}")).format(dims=", ".join(names))


def _shapes_text(rec) -> str:
    if not rec.shapes:
        return _("no tensor")
    dt = set(rec.dtypes)
    # a functional collective's (DTensor's) shapes are its input(s), then what it returned
    sep = " → " if rec.source in ("functional", "DTensor") and len(rec.shapes) == 2 else " "
    shapes = sep.join("(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")" for s in rec.shapes)
    return shapes + (f" {dt.pop()}" if len(dt) == 1 else "")


def calls_text(calls, *, mesh=None, dim_names=None, start=0, stop=None, merge: bool = False) -> str:
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

    pixels: np.ndarray
    steps: list
    cells: dict
    labels: list

    def png(self) -> bytes:
        return encode_png(self.pixels)


_LABEL_W, _COL_W, _ROW_H, _HEAD_H, _PAD = 120, 178, 54, 40, 10


def calls_image(calls, *, mesh=None, dim_names=None, start=0, stop=None, merge: bool = True,
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
    cells = {}
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


def _peer_text(rec) -> str:
    """Where a point-to-point operation goes (``"  to 1"``, ``"  from 0"``) or a rooted one's root."""
    if rec.peer is None:
        return ""
    op = rec.operation
    if op in ("send", "isend", "send_object_list"):
        return "  " + _("to {peer}").format(peer=rec.peer)
    if op in ("recv", "irecv", "recv_object_list"):
        return "  " + _("from {peer}").format(peer=rec.peer)
    return "  " + _("root {peer}").format(peer=rec.peer)


def _wrap(cv: Canvas, text: str, size: float, room: float, weight: str = "regular") -> list:
    """``text`` in lines no wider than ``room`` pixels at ``size`` (words kept whole unless one
    alone is wider: then it is cut with an ellipsis)."""
    lines = wrap_text(text, room, lambda t: cv.measure(t, size, weight)[0])
    return [_fit(cv, t, size, room) if cv.measure(t, size, weight)[0] > room else t for t in lines]


def _tint(color):
    c = np.asarray(color, dtype=np.float32)
    return tuple(int(v) for v in (255 * (0.35 * c + 0.65)))


def _fit(cv: Canvas, text: str, size: float, room: float) -> str:
    """``text``, cut with an ellipsis so that it fits ``room`` pixels at ``size``."""
    size = max(size, MIN_LABEL_PX)
    if cv.measure(text, size)[0] <= room:
        return text
    while len(text) > 1 and cv.measure(text + "…", size)[0] > room:
        text = text[:-1]
    return text + "…"


def calls_png(calls, **kwargs) -> bytes:
    """PNG bytes of :func:`calls_image` (same arguments)."""
    return calls_image(calls, **kwargs).png()


class CallsView:
    """The recorded collectives of a launch, for a notebook: shows as the picture
    (:func:`calls_image`), prints as the text (:func:`calls_text`).

    Args:
        calls: ``launch(..., record_calls=True)``'s result, or one list of records per rank.
        mesh, dim_names, start, stop: as for :func:`calls_text`. title: above the picture.

    Attributes:
        steps: the :class:`Step` list (unmerged). counts: :func:`call_counts`.
    """

    def __init__(self, calls, *, mesh=None, dim_names=None, start=0, stop=None, title=None):
        self._calls, self._kw = calls, dict(mesh=mesh, dim_names=dim_names, start=start, stop=stop)
        self.title = title
        self.steps = call_steps(calls, mesh=mesh, start=start, stop=stop)
        self.counts = call_counts(calls, start=start, stop=stop)

    def text(self, merge: bool = False) -> str:
        return calls_text(self._calls, merge=merge, **self._kw)

    def image(self) -> CallsImage:
        return calls_image(self._calls, title=self.title, **self._kw)

    def png(self) -> bytes:
        return self.image().png()

    def save(self, path) -> None:
        """Write the picture to ``path`` (PNG)."""
        with open(path, "wb") as f:
            f.write(self.png())

    def __str__(self):
        return self.text()

    def __repr__(self):
        return f"CallsView({len(self.steps)} step(s), {len(self.counts)} rank(s))"

    def _repr_png_(self):
        return self.png()

    def _repr_pretty_(self, p, cycle):
        p.text(self.text())
