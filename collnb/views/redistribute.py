"""The picture and the text of a :class:`collnb.placements.RedistributeResult`, with the α-β
prediction of each step beside the measured time.

The picture, top to bottom:

* the title and the verdict (✓ every local shard equals the hand-sliced reference);
* the global tensor twice, **coloured by owner** under ``src`` and under ``dst``: a cell in one
  rank's colour is held by that rank alone; a white cell with a band of colours on top is held by
  every rank of the band (``Replicate``); hatching marks a pending reduction (``Partial``: each
  rank of the band holds a contribution);
* **before**: each rank's local tensor, laid out as the mesh (rank, mesh coordinate, shape), in
  its own colour;
* the **steps** between them: the collectives each rank issued, per mesh dimension, which ranks
  exchange (:func:`collnb.views.calls.calls_image`), or "no communication";
* **after**: each rank's local tensor, every cell coloured by where its value came from (the rank
  that held it before, or a band for several), a red outline and the expected value where it
  differs from the reference, ✓/✗ per rank;
* the measured time (median of the timed calls, slowest rank) beside the α-β prediction (the sum
  of :func:`collnb.algorithms.costmodel.predict` over the steps, for the collective each issues, its
  group size and bytes), torch's log lines, and where NCCL would differ.

Big tensors are drawn at most 48 cells a side (every k-th element; the caption says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence, TypeAlias, TypedDict

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import placements
from ..algorithms import BUILTIN_FORM, DEFAULT_MODEL, CostModel, predict
from ..i18n import _
from ..ranks import SHARD_DIM_ALLTOALL
from ..units import format_bytes, format_rate, format_seconds
from .calls import calls_image, calls_text
from .grid import PANEL_NAMES
from .palette import GREY_TEXT, HATCH_COLOR, INK, MISMATCH_COLOR, OK_GREEN, FloatRGB, rank_color, rank_text_color
from .raster import Box, Canvas, Label, Pixels, encode_png, rgb8, wrap_text

if TYPE_CHECKING:
    import torch

    from ..placements import LocalShard, RedistributeResult

__all__ = ["redistribute_image", "redistribute_png", "redistribute_text", "predict_steps", "nccl_note", "uneven_note",
           "RedistributeImage", "COLLECTIVE_OF", "StepPrediction"]

#: The primitive of :mod:`collnb.algorithms.costmodel` each recorded operation is.
COLLECTIVE_OF = {"all_gather_into_tensor": "all_gather", "all_gather": "all_gather",
                 "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter": "reduce_scatter",
                 "all_reduce": "all_reduce", "all_to_all_single": "all_to_all", "all_to_all": "all_to_all",
                 "broadcast": "broadcast", "reduce": "reduce", "scatter": "scatter", "gather": "gather"}
_FALLBACK = "does not support alltoall"
_MAX_CELLS = 48
_W = 1000
#: ``("global", "src" | "dst")`` or ``("before" | "after", rank)``: what a box of :attr:`RedistributeImage.boxes` holds
_BoxKey: TypeAlias = tuple[str, str | int]
#: Which ranks hold a cell (one: that rank's colour; several: a band of theirs), per row and column
_Holders: TypeAlias = list[list[tuple[int, ...]]]


class StepPrediction(TypedDict):
    """The α-β prediction of one recorded step (:func:`predict_steps`)."""

    step: int  # 1-based, in the rank's records
    operation: str  # as recorded (CallRecord.operation)
    primitive: str  # of the cost model
    algorithm: str
    group_size: int
    nbytes: int  # the busiest rank's
    seconds: float


def predict_steps(result: RedistributeResult, model: CostModel | None = None) -> list[StepPrediction]:
    """The α-β prediction of each step: ``[{"step", "operation", "primitive", "algorithm",
    "group_size", "nbytes", "seconds"}]`` (the busiest rank's bytes; ``CallRecord.nbytes`` counts
    as nccl-tests does, which is what :func:`~collnb.algorithms.costmodel.predict` takes), with the
    algorithm gloo's built-in is modelled by (:data:`collnb.algorithms.BUILTIN_FORM`). ``model``: a
    :class:`~collnb.CostModel` (default :data:`~collnb.algorithms.DEFAULT_MODEL`; fit yours with
    ``collnb.costmodel.calibrate``). Operations with no model (``barrier``) are left out."""
    out = []
    for i in range(max((len(c) for c in result.calls), default=0)):
        recs = [c[i] for c in result.calls if i < len(c)]
        prim = COLLECTIVE_OF.get(recs[0].operation)
        if prim is None:
            continue
        size = recs[0].group_size
        nbytes = max(r.nbytes for r in recs)
        algo = BUILTIN_FORM[prim]
        secs = predict(prim, algo, size, nbytes, model or DEFAULT_MODEL).seconds if size > 1 else 0.0
        out.append(StepPrediction(step=i + 1, operation=recs[0].operation, primitive=prim, algorithm=algo,
                                  group_size=size, nbytes=nbytes, seconds=secs))
    return out


def nccl_note(result: RedistributeResult, model: CostModel | None = None) -> str:
    """Where NCCL would differ: for a Shard(i) -> Shard(j) step torch's CPU fallback (an
    all_gather and a local chunk, logged by torch) against what NCCL issues, one all_to_all of
    the rank's shard (``shard_dim_alltoall`` in ``torch/distributed/tensor/_collective_utils.py``,
    C++ ``_dtensor::shard_dim_alltoall`` calling NCCL's all-to-all: pytorch#178175), with both
    α-β predictions; ``""`` when the run logged no fallback."""
    if not any(_FALLBACK in line for line in result.log):
        return ""
    parts = []
    for p in predict_steps(result, model):
        if p["primitive"] != "all_gather":
            continue
        shard = p["nbytes"] // p["group_size"]
        a2a = predict("all_to_all", BUILTIN_FORM["all_to_all"], p["group_size"], shard, model or DEFAULT_MODEL)
        parts.append(_("step {step}: gloo all_gather of {nbytes} (α-β {seconds}); NCCL all_to_all of {shard} "
                       "(α-β {a2a_seconds})").format(step=p["step"], nbytes=format_bytes(p["nbytes"]),
                                                    seconds=format_seconds(p["seconds"]), shard=format_bytes(shard),
                                                    a2a_seconds=format_seconds(a2a.seconds)))
    return (_("On a CPU mesh DTensor uses no all_to_all for a shard-dim change (its fallback is keyed on the mesh's "
              "device type; gloo itself runs all_to_all): it gathers the whole dimension and keeps its chunk "
              "({source}). With NCCL (CUDA tensors) it issues one all_to_all instead: ").format(
                  source=SHARD_DIM_ALLTOALL) + "; ".join(parts))


def uneven_note(result: RedistributeResult) -> str:
    """Which placement shards unevenly (its local shapes differ, as ``torch.chunk`` splits) and what
    torch does about it before a collective (pads every shard to the largest, cuts the padding
    after: ``Shard._split_tensor(with_padding=True)``), or ``""``."""
    out = []
    for which, pl, bounds in (("src", result.src, [s.bounds_before for s in result.shards]),
                              ("dst", result.dst, [s.bounds_after for s in result.shards])):
        shapes = ["×".join(str(hi - lo) for lo, hi in b) for b in bounds]
        if len(set(shapes)) > 1:
            out.append(_("{which} {placements}: local shapes {shapes}").format(
                which=which, placements=placements.placements_text(pl), shapes=", ".join(shapes)))
    if not out:
        return ""
    return (_("Uneven shards (torch.chunk: chunks of ceil(n / k), the last ones short or empty): ") + "; ".join(out) +
            _(". Before a collective torch pads every shard to the largest and cuts the padding after, so the "
              "recorded shapes are the padded ones."))


def _timing_line(result: RedistributeResult, model: CostModel | None = None) -> str:
    steps = predict_steps(result, model)
    pred = sum(p["seconds"] for p in steps)
    m = model or DEFAULT_MODEL
    measured = result.seconds_measured
    if measured is None:
        return _("nothing timed (torch refused)")
    return _("measured {measured} (median of {n_calls} call(s), slowest rank) · α-β prediction {predicted} for "
             "{n_collectives} collective(s) (α {alpha}, 1/β {rate}): the model prices messages and bytes; the rest is "
             "per-call software cost (gloo's, DTensor's Python)").format(
        measured=format_seconds(measured), n_calls=len(result.times), predicted=format_seconds(pred),
        n_collectives=len(steps), alpha=format_seconds(m.alpha), rate=format_rate(1 / m.beta))


def redistribute_text(result: RedistributeResult, model: CostModel | None = None) -> str:
    """The result as text: the title, the steps (:func:`collnb.views.calls.calls_text`), each rank's
    local shard before → after with ✓/✗, the timing line, torch's notes."""
    lines = [result.title]
    if result.refused:
        lines.append(_("torch refused: {message}").format(message=result.refused))
    lines.append(calls_text(result.calls, mesh=result.mesh_ranks or result.mesh))
    if result.unrecorded:
        lines.append(_("{n} operation(s) the backend counted were not recorded").format(n=result.unrecorded))
    for s in result.shards:
        def rng(b: Sequence[tuple[int, int]]) -> str:
            return ", ".join(f"{lo}:{hi}" for lo, hi in b)
        after = _("refused") if s.after is None else f"{tuple(s.after.shape)} [{rng(s.bounds_after)}]"
        mark = "✓" if s.before_ok and s.after_ok else "✗"
        lines.append(_("rank {rank} {coord}: before {shape} [{bounds}] → after {after} {mark}").format(
            rank=s.rank, coord=s.coord, shape=tuple(s.before.shape), bounds=rng(s.bounds_before), after=after,
            mark=mark))
        if not s.after_ok and s.after is not None and s.expected_sum is not None:
            lines.append("    " + _("summed over mesh dim {dims}: got {got}; expected {expected}").format(
                dims=", ".join(map(str, result.summed_over)),
                got=None if s.group_sum is None else s.group_sum.tolist(), expected=s.expected_sum.tolist()))
        elif not s.after_ok and s.after is not None:
            lines.append("    " + _("got {got}; expected {expected}").format(
                got=s.after.double().tolist(), expected=np.asarray(s.expected_after).tolist()))
    lines.append(_timing_line(result, model))
    for line in result.log:
        lines.append(f"torch: {line}")
    for note in (uneven_note(result), nccl_note(result, model)):
        if note:
            lines.append(note)
    lines.append(result.verdict)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# The picture


@dataclass
class RedistributeImage:
    """A painted result: ``pixels`` (uint8 H x W x 3), ``labels`` (every text as ``(text, size_px,
    box)``), ``boxes`` (``{("before"|"after", rank): (x0, y0, x1, y1)}`` of each local tensor,
    ``("global", "src"|"dst")`` of the global ones), ``cell`` (pixels per element) and ``stride``
    (every ``stride``-th element drawn)."""

    pixels: Pixels
    labels: list[Label]
    boxes: dict[_BoxKey, Box]
    cell: int
    stride: int

    def png(self) -> bytes:
        """The picture as PNG bytes."""
        return encode_png(self.pixels)


def _as2d(a: ArrayLike) -> NDArray[np.float64]:
    """``a`` as a float64 matrix: a 1-D array as one row."""
    m = np.asarray(a, dtype=np.float64)
    return m.reshape(1, -1) if m.ndim == 1 else m


def _bounds2d(b: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    return ((0, 1),) + tuple(b) if len(b) == 1 else tuple(b)


def _mesh_grid(mesh: Sequence[int]) -> tuple[int, int]:
    """How the ranks of ``mesh`` are laid out on the picture: (rows, columns)."""
    if len(mesh) == 1:
        cols = min(mesh[0], 4)
        return math.ceil(mesh[0] / cols), cols
    if len(mesh) == 2:
        return mesh[0], mesh[1]
    return mesh[0] * mesh[1], mesh[2]


def _fill(c: FloatRGB) -> NDArray[np.uint8]:
    return np.asarray(np.asarray(c, dtype=np.float32) * 255 + 0.5, dtype=np.uint8)


def _tile(hs: tuple[int, ...], hatch: bool, cell: int) -> Pixels:
    """One cell: ``hs`` one rank (its colour) or several (white, a band of their colours on top),
    diagonal hatching for a pending reduction, a white 1-pixel gap right and below."""
    tile: Pixels = np.full((cell, cell, 3), 255, dtype=np.uint8)
    band = max(2, int(cell * 0.3))
    if len(hs) == 1:
        tile[:] = _fill(rank_color(hs[0]))
    elif hs:
        for t, r in enumerate(hs):
            tile[:band, int(t * cell / len(hs)):int((t + 1) * cell / len(hs))] = _fill(rank_color(r))
    if hatch and hs:
        yy, xx = np.mgrid[0:cell, 0:cell]
        lines = (((xx + yy) % 7) < 2) & (yy >= (band if len(hs) > 1 else 0))
        base = tile[lines].astype(np.float32) if len(hs) == 1 else np.array(rgb8(HATCH_COLOR), np.float32) / 0.8
        tile[lines] = np.asarray(base * 0.72, dtype=np.uint8)  # darker than the fill: visible on every colour
    if cell >= 6:
        tile[-1, :] = 255
        tile[:, -1] = 255
    return tile


def _paint_cells(cv: Canvas, x: int, y: int, holders: _Holders, cell: int, hatch: Sequence[Sequence[bool]]) -> None:
    """Fill a matrix of cells: ``holders[i][j]`` = tuple of ranks (one: that rank's colour; several:
    white with a band of their colours); ``hatch[i][j]``: diagonal hatching (a pending reduction).
    One tile per distinct (holders, hatch), placed with numpy (no per-cell drawing)."""
    rows, cols = len(holders), len(holders[0]) if holders else 0
    if not rows or not cols:
        return
    img = np.full((rows, cols, cell, cell, 3), 255, dtype=np.uint8)
    keys: dict[tuple[tuple[int, ...], bool], int] = {}
    index = np.empty((rows, cols), dtype=np.int64)
    for i in range(rows):
        for j in range(cols):
            index[i, j] = keys.setdefault((holders[i][j], bool(hatch[i][j])), len(keys))
    for (hs, h), k in keys.items():
        img[index == k] = _tile(hs, h, cell)
    cv.paste(img.transpose(0, 2, 1, 3, 4).reshape(rows * cell, cols * cell, 3), x, y)


def _values_text(cv: Canvas, x: int, y: int, vals: NDArray[np.float64], cell: int, font: float) -> None:
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            v = vals[i, j]
            cv.text(str(int(v)) if float(v).is_integer() else f"{v:.3g}", x + j * cell + cell / 2,
                    y + i * cell + cell * 0.58, font, INK, "bold")


def redistribute_image(result: RedistributeResult, model: CostModel | None = None,
                       max_width: int = _W) -> RedistributeImage:
    """Paint ``result`` (a :class:`collnb.placements.RedistributeResult`; see the module docstring).
    ``model``: the :class:`~collnb.CostModel` of the prediction. No label is below
    :data:`collnb.views.palette.MIN_LABEL_PX`; the picture is at most ``max_width`` pixels wide."""
    shape, mesh = result.shape, result.mesh
    R, C = _as2d(np.zeros(shape)).shape
    stride: int = max(1, math.ceil(max(R, C) / _MAX_CELLS))
    gr, gc = _mesh_grid(mesh)
    local_cols = max([max(_as2d(s.expected_before).shape[1], 1) for s in result.shards] +
                     [max(_as2d(s.expected_after).shape[1], 1) for s in result.shards if s.expected_after is not None])
    widest = max(math.ceil(local_cols / stride) * gc + 2 * gc, 2 * math.ceil(C / stride) + 4)
    cell = int(max(3, min(28, (max_width - 40 - 30 * gc) // max(widest, 1))))
    show_values = cell >= 20 and stride == 1
    font = 11 if cell < 26 else 12
    owners_src = placements.owners(shape, mesh, result.src)
    owners_dst = placements.owners(shape, mesh, result.dst)
    p_src = bool(placements.partial_dims(result.src))
    p_dst = bool(placements.partial_dims(result.dst))

    steps_img = calls_image(result.calls, mesh=result.mesh_ranks or mesh, merge=False, max_width=max_width - 20) \
        if any(result.calls) else None
    # heights
    g_h = math.ceil(R / stride) * cell

    def box_h(rows: int) -> int:
        return 30 + math.ceil(rows / stride) * cell + 8
    before_h = gr * max(box_h(_as2d(s.expected_before).shape[0]) + 8 for s in result.shards)
    after_rows = [(_as2d(np.zeros(tuple(s.after.shape))).shape[0] if s.after is not None else 0) for s in result.shards]
    after_h = gr * (box_h(max(after_rows + [1])) + 8)
    steps_h = (steps_img.pixels.shape[0] + 30) if steps_img is not None else 44
    gw = math.ceil(C / stride) * cell
    col_w = max(math.ceil(local_cols / stride) * cell, 190) + 24
    legend = [_("one colour: one rank holds it · band: each rank of the band holds a copy (Replicate)"),
              _("hatched: a pending reduction, each rank of the band holds a contribution (Partial)")]
    probe = Canvas(1, 1)
    width = max(12 + gc * col_w, 12 + 2 * (max(gw, 260) + 40), 24 + probe.measure(result.title, 15, "bold")[0],
                24 + max(probe.measure(t, 11)[0] for t in legend), 560)
    if steps_img is not None:
        width = max(width, 14 + steps_img.pixels.shape[1])
    max_width = min(max_width, width)
    chunks = _notes(result, model)
    notes = [line for chunk in chunks for line in _wrap_px(probe, chunk, 11, max_width - 24)]
    # the measured time (the timing chunk's first line) is drawn in ink, the other notes in grey
    timed = result.seconds_measured is not None and bool(notes)
    height = 44 + 24 + g_h + 100 + 28 + before_h + steps_h + 28 + after_h + 20 * len(notes) + 30 + 40 * gr
    cv = Canvas(max_width, height)
    cv.labels = []
    boxes: dict[_BoxKey, Box] = {}
    y = 12
    cv.text(_cut(cv, result.title, 15, max_width - 24), 12, y + 8, 15, INK, "bold", ha="left")
    cv.text(result.verdict, 12, y + 30, 13, OK_GREEN if result.ok else rgb8(MISMATCH_COLOR), "bold", ha="left")
    y += 50

    # the global tensor, coloured by owner, under src and under dst
    sides: tuple[tuple[str, NDArray[np.bool_], bool, Sequence[placements.Placement]], ...] = (
        ("src", owners_src, p_src, result.src), ("dst", owners_dst, p_dst, result.dst))
    for k, (which, own, partial, pl) in enumerate(sides):
        x = 12 + k * (max(gw, 300) + 40)
        cv.text(_("{which} {placements}: held by").format(which=which, placements=placements.placements_text(pl)),
                x, y + 6, 12, INK, "bold", ha="left")
        holders = [[tuple(np.nonzero(_as2d_owner(own, i, j))[0].tolist()) for j in range(0, C, stride)]
                   for i in range(0, R, stride)]
        hatch = [[partial] * len(row) for row in holders]
        _paint_cells(cv, x, y + 18, holders, cell, hatch)
        boxes[("global", which)] = (x, y + 18, x + gw, y + 18 + g_h)
        if show_values:
            _values_text(cv, x, y + 18, _as2d(placements.teaching_values(shape)), cell, font)
    y += 18 + g_h + 10
    for line in legend + ([_("every {stride}th element drawn in each direction").format(stride=stride)]
                          if stride > 1 else []):
        cv.text(_cut(cv, line, 11, max_width - 24), 12, y + 6, 11, GREY_TEXT, ha="left")
        y += 17
    y += 8

    # before: rows of the mesh layout
    y = _panel_rows(cv, "before", result, y, gr, gc, cell, stride, show_values, font, owners_src, p_src, p_dst,
                    boxes, col_w)
    cv.text(_("steps"), 12, y + 8, 14, INK, "bold", ha="left")
    if steps_img is not None:
        cv.paste(steps_img.pixels, 10, y + 18)
        cv.labels += [(t, size, (b[0] + 10, b[1] + y + 18, b[2] + 10, b[3] + y + 18)) for t, size, b in steps_img.labels]
        y += 18 + steps_img.pixels.shape[0] + 8
    else:
        msg = (_("torch refused: {message}").format(message=result.refused) if result.refused else
               _("no communication: each rank keeps or cuts its own chunk locally"))
        for line in _wrap_px(cv, msg, 12, max_width - 90):
            cv.text(line, 70, y + 8, 12, INK if not result.refused else rgb8(MISMATCH_COLOR), ha="left")
            y += 18
        y += 16
    y = _panel_rows(cv, "after", result, y, gr, gc, cell, stride, show_values, font, owners_src, p_src, p_dst,
                    boxes, col_w)
    for i, line in enumerate(notes):
        cv.text(_cut(cv, line, 11, max_width - 24), 12, y + 8, 11, INK if timed and i == 0 else GREY_TEXT, ha="left")
        y += 20
    img = cv.image.crop((0, 0, max_width, min(height, y + 12)))
    return RedistributeImage(np.asarray(img, dtype=np.uint8), cv.labels, boxes, cell, stride)


def _as2d_owner(own: NDArray[np.bool_], i: int, j: int) -> NDArray[np.bool_]:
    """Which ranks (rank order) own element (``i``, ``j``) (a 1-D tensor's ``j``)."""
    return own[:, i, j] if own.ndim == 3 else own[:, j]


def _notes(result: RedistributeResult, model: CostModel | None) -> list[str]:
    out = [_timing_line(result, model)]
    out += [f"torch: {line}" for line in result.log]
    out += [note for note in (uneven_note(result), nccl_note(result, model)) if note]
    if result.unrecorded:
        out.append(_("{n} operation(s) the backend counted were not recorded").format(n=result.unrecorded))
    return out


def _wrap_px(cv: Canvas, text: str, size: float, room: float) -> list[str]:
    """``text`` in lines no wider than ``room`` pixels at ``size``."""
    return wrap_text(text, room, lambda t: cv.measure(t, size)[0])


def _cut(cv: Canvas, text: str, size: float, room: float) -> str:
    if cv.measure(text, size)[0] <= room:
        return text
    while len(text) > 1 and cv.measure(text + "…", size)[0] > room:
        text = text[:-1]
    return text + "…"


def _panel_rows(cv: Canvas, kind: Literal["before", "after"], result: RedistributeResult, y: int, gr: int, gc: int,
                cell: int, stride: int, show_values: bool, font: float, owners_src: NDArray[np.bool_], p_src: bool,
                p_dst: bool, boxes: dict[_BoxKey, Box], col_w: int) -> int:
    """Every rank's local tensor ``kind``, in rows as the mesh lays them out, from ``y``; returns the y below."""
    cv.text(_(PANEL_NAMES[kind]), 12, y + 8, 14, INK, "bold", ha="left")
    y += 22
    mesh = result.mesh
    for gi in range(gr):
        row_h = 0
        for s in result.shards:
            i, j = (s.coord if len(mesh) == 2 else divmod(s.rank, gc))
            if i != gi:
                continue
            local = s.before if kind == "before" else s.after
            expected = s.expected_before if kind == "before" else s.expected_after
            h = _paint_local(cv, kind, s, local, expected, 12 + j * col_w, y, col_w - 10, cell, stride, show_values,
                             font, owners_src, p_src, p_dst, boxes)
            row_h = max(row_h, h)
        y += row_h + 8
    return y


def _paint_local(cv: Canvas, kind: Literal["before", "after"], s: LocalShard, local: torch.Tensor | None,
                 expected: NDArray[np.float64] | None, x: int, y: int, room: int, cell: int, stride: int,
                 show_values: bool, font: float, owners_src: NDArray[np.bool_], p_src: bool, p_dst: bool,
                 boxes: dict[_BoxKey, Box]) -> int:
    """One rank's local tensor: a header (rank, coordinate, shape, ✓/✗) and its cells. Returns its height."""
    ok = s.before_ok if kind == "before" else s.after_ok
    head = f"rank {s.rank} {s.coord}"
    if local is None:
        cv.text(head, x, y + 8, 12, rank_text_color(s.rank), "bold", ha="left")
        cv.text(_("refused"), x, y + 26, 11, rgb8(MISMATCH_COLOR), "bold", ha="left")
        return 40
    vals = _as2d(local.double().numpy())
    shape_txt = "×".join(map(str, tuple(local.shape))) or _("scalar")
    w = cv.text(head, x, y + 8, 12, rank_text_color(s.rank), "bold", ha="left")
    cv.text(f"{shape_txt}" + ("" if vals.size else _(" (empty)")), x + w + 6, y + 8, 11, GREY_TEXT, ha="left")
    cv.text("✓" if ok else "✗", x + room - 6, y + 8, 13, OK_GREEN if ok else rgb8(MISMATCH_COLOR), "bold",
            ha="right")
    top = y + 20
    b = _bounds2d(s.bounds_before if kind == "before" else s.bounds_after)
    rows = range(0, vals.shape[0], stride)
    cols = range(0, vals.shape[1], stride)
    holders: _Holders = []
    hatch: list[list[bool]] = []
    for i in rows:
        hrow: list[tuple[int, ...]] = []
        trow: list[bool] = []
        for j in cols:
            gi, gj = b[0][0] + i, b[1][0] + j
            if kind == "before":
                hrow.append((s.rank,))
                trow.append(p_src)
            else:
                src = tuple(np.nonzero(owners_src[:, gi, gj] if owners_src.ndim == 3 else owners_src[:, gj])[0].tolist())
                hrow.append((s.rank,) if (s.rank in src and not p_src) else src)
                trow.append(p_dst)
        holders.append(hrow)
        hatch.append(trow)
    if holders and holders[0]:
        _paint_cells(cv, x, top, holders, cell, hatch)
        if show_values:
            _values_text(cv, x, top, vals, cell, font)
    h = len(holders) * cell
    boxes[(kind, s.rank)] = (x, top, x + len(cols) * cell, top + h)
    if not ok and expected is not None:
        exp = _as2d(expected)
        if exp.shape != vals.shape:
            cv.frame(x - 2, top - 2, x + len(cols) * cell + 2, top + h + 2, MISMATCH_COLOR, 2)
            cv.text(_("expected {shape}").format(shape="×".join(map(str, np.asarray(expected).shape))), x, top + h + 10, 11,
                    rgb8(MISMATCH_COLOR), "bold", ha="left")
            h += 16
        else:
            for i in range(0, vals.shape[0], stride):
                for j in range(0, vals.shape[1], stride):
                    if vals[i, j] != exp[i, j]:
                        cx, cy = x + (j // stride) * cell, top + (i // stride) * cell
                        cv.frame(cx, cy, cx + cell, cy + cell, MISMATCH_COLOR, 2)
            cv.text(_("red: differs from the reference"), x, top + h + 10, 11, rgb8(MISMATCH_COLOR), ha="left")
            h += 16
    return h + 24


def redistribute_png(result: RedistributeResult, model: CostModel | None = None, max_width: int = _W) -> bytes:
    """PNG bytes of :func:`redistribute_image`."""
    return redistribute_image(result, model, max_width).png()


placements.register_display(redistribute_png, redistribute_text)
