"""The text the primitive explorer shows beside its heatmap: the picture's description (its alt
text, for screen readers), the values drawn as text (:func:`drawn_values`, what tests and programs
read), the float64 reference table, and the line saying what the dtype did.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, NotRequired, TypedDict

from ..i18n import _
from ..units import format_bytes
from ..vocabulary import dtype_name
from .static import esc
from .values import format_value

if TYPE_CHECKING:
    from ..collectives import PrimitiveSpec, RunResult
    from ..ranks import BackendFacts
    from .controls import ExplorerParams
    from .grid import HeatmapGrid
    from .heatmap import HeatmapImage

__all__ = ["figure_alt", "drawn_values", "reference_html", "dtype_effect_text", "status_text", "length_html",
           "backend_note_html", "DrawnValues"]


class DrawnValues(TypedDict):
    """What the heatmap shows, as text (:func:`drawn_values`): per rank a list of str, one per chunk."""

    before: list[list[str]]
    after: list[list[str]]
    exact: list[list[str]]
    after_text: list[list[str]]
    cells: NotRequired[dict[str, tuple[int, int, int]]]  # with the painted picture: HeatmapImage.geometry
    layout: NotRequired[str]
    min_font_px: NotRequired[float]


def figure_alt(grid: HeatmapGrid) -> str:
    """The description of the heatmap of ``grid`` (a :class:`~collnb.views.heatmap.HeatmapGrid`):
    its title, every rank's output chunks as drawn and the verdict, e.g. "all_reduce (SUM) ...
    After: rank 0: [60, 64, 68, 72]; rank 1: [...]. ✓ ..."."""
    alt_rows = "; ".join(_("rank {rank}: [{chunks}]").format(rank=r, chunks=", ".join(t for t in row if t))
                         for r, row in enumerate(grid.after.text))
    return _("{title}. After: {rows}. {status}").format(title=grid.title, rows=alt_rows, status=grid.status)


def drawn_values(result: RunResult, grid: HeatmapGrid, him: HeatmapImage | None = None) -> DrawnValues:
    """What the heatmap of ``result`` shows, as text (per rank a list of str, one per chunk):

    * ``"before"``, ``"after"``: each chunk's first element, exactly (``-56``, ``280``, ``inf``,
      ``nan``, ``0.1``; integral floats without ``.0``);
    * ``"exact"``: the float64 reference where the dtype gave another value, else ``""``;
    * ``"after_text"``: the cell labels as painted (:attr:`grid.after.text`);
    * given the painted :class:`~collnb.views.heatmap.HeatmapImage` ``him``: ``"cells"`` (its
      ``geometry``: ``{key: (x, y, cell px)}``), ``"layout"`` and ``"min_font_px"`` (the smallest
      label, px)."""
    after, exact = grid.values["after"], grid.values["expected_f64"]
    marks = [[_num(x) if d else "" for x, d in zip(e[:len(a)], ds)] if e and ds is not None else ["" for _ in a]
             for a, e, ds in zip(after, exact, grid.differs)]
    out = DrawnValues(before=[[_num(v) for v in row] for row in grid.values["before"]],
                      after=[[_num(v) for v in row] for row in after], exact=marks,
                      after_text=[list(row) for row in grid.after.text])
    if him is not None:
        out["cells"], out["layout"] = dict(him.geometry), him.layout
        out["min_font_px"] = min(s_ for _l, s_, _c in him.labels)
    return out


def reference_html(result: RunResult, grid: HeatmapGrid) -> str:
    """Float64 result of the same inputs, per rank and chunk; cells where the run's dtype gave
    another value are highlighted and show what the dtype gave."""
    if result.spec.kind != "tensor":
        return ""
    dname = dtype_name(result.dtype)
    after, exact = grid.values["after"], grid.values["expected_f64"]
    rows = []
    n_diff = 0
    for r in range(result.world_size):
        vals, differs = exact[r], grid.differs[r]  # None together: the rank has no float64 reference
        if vals is None or differs is None:
            cells = ["<td class='undef'>" + esc(_("undefined")) + "</td>"]
        else:
            cells = []
            for c, x in enumerate(vals):
                txt = esc(format_value(x))
                got = after[r][c] if c < len(after[r]) else None
                if differs[c]:
                    n_diff += 1
                    g = esc(format_value(got))
                    tip = esc(_("{dtype} gives {value}").format(dtype=dname, value=format_value(got)))
                    cells.append(f"<td class='differs' title='{tip}'>{txt}"
                                 f"<span>{esc(dname)}: {g}</span></td>")
                else:
                    cells.append(f"<td>{txt}</td>")
        rows.append("<tr><th>" + esc(_("rank {rank}").format(rank=r)) + "</th>" + "".join(cells) + "</tr>")
    # sizes: >= 10 px at ipywidgets' 13 px base (90% = 11.7 px, the dtype's value 88% of that)
    style = ("<style>.collnb-reference{border-collapse:collapse;font-size:90%;text-align:center;line-height:1.3}"
             ".collnb-reference th{text-align:right;padding:1px 4px 1px 0;font-weight:normal}"
             ".collnb-reference td{padding:1px 4px;border:1px solid #ddd}"
             ".collnb-reference td.differs{background:#FFD8A8;font-weight:bold;border:2px solid #A65400}"
             ".collnb-reference td.differs span{display:block;font-weight:normal;font-size:88%;color:#7A3E00}"
             ".collnb-reference td.undef{color:#888;font-style:italic}</style>")
    if n_diff:
        what = _("<span style='background:#FFD8A8'>highlighted</span>: {n} chunk(s) where {dtype} gave another "
                 "value").format(n=n_diff, dtype=esc(dname))
    else:
        what = _("{dtype} gave the exact result everywhere").format(dtype=esc(dname))
    # line-height: ipywidgets' HTML widget sets a 28 px line height meant for one-line labels
    head = ("<div style='font-weight:bold;line-height:1.6'>" + esc(_("float64 reference")) + "</div>"
            "<div style='font-size:85%;color:#555;line-height:1.4;margin-bottom:4px'>" +
            _("the exact result of the same inputs; {what}").format(what=what) + "</div>")
    table = f"<table class='collnb-reference' data-differs='{n_diff}'>{''.join(rows)}</table>"
    return style + head + table



def _num(v: object) -> str:
    """A value as exact text for ``data-*`` attributes: ``-56``, ``280`` (integral floats without
    ``.0``), ``0.1``, ``inf``, ``nan``, ``(1+2j)``, ``True``, or the object's ``str``."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer() and abs(v) < 2 ** 53:
            return str(int(v))
        return repr(v)
    return str(v)


def dtype_effect_text(result: RunResult, grid: HeatmapGrid) -> str:
    """One line saying what the dtype did, e.g. "dtype effect: int8 gives -56 where float64 gives
    200 (...)", preceded by what it did to the inputs where it could not hold them ("bfloat16
    cannot hold every input asked for: rank 13, chunk 0 holds 1296 for 1300 ..."), or ``""``."""
    if result.spec.kind != "tensor":
        return ""
    dname = dtype_name(result.dtype)
    asked = [(r, c) for r, row in enumerate(getattr(grid.before, "asked", None) or []) for c, x in enumerate(row) if x]
    head = ""
    if asked:
        r, c = asked[0]
        head = _("{dtype} cannot hold every input asked for: rank {rank}, chunk {chunk} holds {held} for {asked} "
                 "({n} input chunk(s), marked in the before panel)").format(
            dtype=dname, rank=r, chunk=c, held=grid.before.text[r][c], asked=grid.before.asked[r][c], n=len(asked))
    after, exact = grid.values["after"], grid.values["expected_f64"]
    diffs: list[tuple[int, int, object]] = []  # (rank, chunk, the float64 value)
    for r in range(result.world_size):
        x64, differs = exact[r], grid.differs[r]
        if x64 is not None and differs is not None:
            diffs += [(r, c, x) for c, x in enumerate(x64) if c < len(after[r]) and differs[c]]
    if not diffs:
        return head
    r, c, x = diffs[0]
    if not result.spec.reduces:
        body = _("{dtype} cannot hold every input value: the inputs changed when the tensors were made "
                 "(rank {rank}, chunk {chunk}: {got} for {exact}); {primitive} itself copied them unchanged").format(
            dtype=dname, rank=r, chunk=c, got=format_value(after[r][c]), exact=format_value(x),
            primitive=result.primitive)
    else:
        body = _("dtype effect: {dtype} gives {got} where float64 gives {exact} (rank {rank}, chunk {chunk}; "
                 "{n} chunk(s) differ from the float64 result, highlighted)").format(
            dtype=dname, got=format_value(after[r][c]), exact=format_value(x), rank=r, chunk=c,
            n=len(diffs))
    return f"{head}; {body}" if head else body


def status_text(result: RunResult, effect: str, run_s: float, draw_s: float) -> str:
    """The status line after a run drawn: the verdict against the reference (✓/✗; with a dtype
    effect, that the dtype and not the communication changed the value), the run's title and how
    long it ran and was drawn (``run_s``, ``draw_s`` in seconds, shown in ms)."""
    dname = dtype_name(result.dtype) if result.dtype is not None else ""
    if not result.ok:
        verdict = _("✗ {n} chunk(s) differ from the reference").format(n=result.n_mismatches())
    elif effect and result.spec.reduces:
        verdict = _("✓ {backend} matches the reference: the same {dtype} arithmetic done without "
                    "torch.distributed (the dtype, not the communication, changed the value)").format(
            backend=result.backend, dtype=dname)
    else:
        verdict = _("✓ matches the reference (computed without torch.distributed)")
    return _("{verdict} · {title} · ran in {run_ms:.0f} ms, drawn in {draw_ms:.0f} ms").format(
        verdict=verdict, title=result.title(), run_ms=1000 * run_s, draw_ms=1000 * draw_s)


def length_html(spec: PrimitiveSpec, p: ExplorerParams) -> str:
    """The tensor length per rank of parameters ``p`` (an ``ExplorerParams`` of a tensor primitive
    ``spec``): "4 chunk(s) × 1 = 4 elements (16 B)", the longest rank's."""
    import torch  # noqa: PLC0415
    n = max(spec.n_in(p.world_size, r, p.root if spec.rooted else 0) for r in range(p.world_size))
    itemsize = getattr(torch, p.dtype).itemsize
    text = _("{chunks} chunk(s) × {size} = <b>{n}</b> elements ({bytes})").format(
        chunks=n, size=p.chunk_size, n=n * p.chunk_size, bytes=format_bytes(n * p.chunk_size * itemsize))
    tip = _("tensor length per rank")
    return f"<span title='{esc(tip)}'>{text}</span>"


def backend_note_html(infos: Mapping[str, BackendFacts]) -> str:
    """Why each backend that cannot run here cannot (``infos``: backend -> ``backend_info``), or ``""``."""
    down = [_("<b>{backend}</b> unavailable: {reason}").format(backend=b, reason=esc(i["reason"]))
            for b, i in infos.items() if not i["available"]]
    return "<span style='color:#666;font-size:90%'>" + "<br>".join(down) + "</span>" if down else ""
