"""What a heatmap of a :class:`collnb.collectives.RunResult` shows, as plain data: per panel
(before | after) and cell the value as text, the cell's state (value, undefined, empty), the ranks
whose data it holds, mismatches against the reference and dtype effects; per rank a verdict; the
status line and the legend. :mod:`collnb.views.heatmap` paints this; tests and the explorer's alt
text read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence, TypeAlias, TypedDict

from .. import collectives
from ..i18n import N_, _
from .values import chunk_firsts, differs_exact, format_value

if TYPE_CHECKING:
    from ..collectives import RunResult

__all__ = ["Panel", "HeatmapGrid", "heatmap_grid", "PANEL_NAMES", "VERDICT_WORDS", "CellState", "Verdict",
           "FirstValues"]

#: A cell's state (:attr:`Panel.state`).
CellState: TypeAlias = Literal["value", "undefined", "empty"]
#: A rank's verdict (:attr:`HeatmapGrid.verdicts`).
Verdict: TypeAlias = Literal["✓", "✗", "undefined"]

#: A panel's name (its key) -> the heading drawn over it (translated where drawn: ``_(PANEL_NAMES[n])``).
PANEL_NAMES = {"before": N_("before"), "after": N_("after")}
#: A verdict (its key) -> the word drawn for it (the marks ✓ and ✗ are not words).
VERDICT_WORDS = {"✓": "✓", "✗": "✗", "undefined": N_("undefined")}

@dataclass
class Panel:
    """One side of the heatmap. All per-cell lists are ``[rank][column]``.

    Attributes:
        name: ``"before"`` or ``"after"``.
        title: panel heading.
        n_rows, n_cols: ranks and chunk columns.
        text: the value written in each cell (``""`` where there is no value).
        state: ``"value"``, ``"undefined"`` (output the primitive leaves undefined) or
            ``"empty"`` (this rank has no such buffer / no chunk there).
        ranks: the ranks whose data the cell holds (tuple; one = copied, several = combined).
        mismatch: True where the cell differs from the reference (outlined red).
        expected: the reference value as text where mismatching, else ``""``.
        exact: the float64 result as text where the dtype changed it, else ``""``.
        row_note: per rank, a note drawn across an all-empty row (e.g. ``"no input (not src)"``).
        tag: the source rank written in a corner of a copied cell (``"r5"``) where the values do
            not name their rank (nan, inf, 1/3 ...), so that colour is not the only clue; else ``""``.
        asked: in the ``before`` panel, the input asked for where the dtype could not hold it
            (``"1300"`` where bfloat16 holds 1296); else ``""``.
    """

    name: str
    title: str
    n_rows: int
    n_cols: int
    text: list[list[str]]
    state: list[list[CellState]]
    ranks: list[list[tuple[int, ...]]]
    mismatch: list[list[bool]]
    expected: list[list[str]]
    exact: list[list[str]]
    row_note: list[str]
    tag: list[list[str]] = field(default_factory=list)
    asked: list[list[str]] = field(default_factory=list)


class FirstValues(TypedDict):
    """Each chunk's first element per rank, as Python scalars (:func:`~collnb.views.values.chunk_firsts`)."""

    before: list[list[object]]
    after: list[list[object]]
    expected_f64: list[list[object] | None]  # None: the rank has no float64 reference


@dataclass
class HeatmapGrid:
    """Everything a heatmap shows, as plain data (see :func:`heatmap_grid`)."""

    title: str
    call: str
    status: str
    ok: bool
    before: Panel
    after: Panel
    verdicts: list[Verdict]  # per rank
    #: ``[(label, kind)]``, kind one of ``"rank"``, ``"stripes"``, ``"undefined"``, ``"mismatch"``,
    #: ``"exact"``, ``"asked"``, ``"tag"``
    legend: list[tuple[str, str]] = field(default_factory=list)
    #: each chunk's first element per rank, read once: ``{"before", "after", "expected_f64"}`` (a rank
    #: without a float64 reference: ``None``)
    values: FirstValues = field(default_factory=lambda: FirstValues(before=[], after=[], expected_f64=[]))
    #: per rank, per chunk of its float64 reference: whether the output differs from it exactly
    #: (:func:`~collnb.views.values.differs_exact`; a chunk the output lacks does not: it is a
    #: mismatch, outlined, not a dtype effect); ``None`` where the rank has no reference
    differs: list[list[bool] | None] = field(default_factory=list)


def _call_text(result: RunResult) -> str:
    spec = result.spec
    call = spec.call
    if result.op:
        call = call.replace("op=OP", f"op=ReduceOp.{result.op.upper()}")
    if result.root is not None:
        call = call.replace("=root", f"={result.root}").replace("== src", f"== {result.root}") \
            .replace("== dst", f"== {result.root}")
    return call


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def names_its_rank(result: RunResult, asked: Sequence[Sequence[str]], src: int, chunk: int) -> bool:
    """Whether the input of rank ``src``'s chunk ``chunk`` tells the rank it came from: a teaching
    value (``10*rank + chunk``, ``100*rank + chunk`` above 10 ranks) or the rank itself, held
    exactly by the dtype (``asked``: the before panel's :attr:`Panel.asked`)."""
    inputs = result.inputs or []
    if src >= len(inputs) or chunk >= len(inputs[src]):
        return False
    x = inputs[src][chunk]
    if not _is_number(x) or x not in (collectives.teaching_value(src, chunk, result.world_size), src):
        return False
    return not (src < len(asked) and chunk < len(asked[src]) and asked[src][chunk])


def heatmap_grid(result: RunResult) -> HeatmapGrid:
    """What the heatmap of ``result`` (a :class:`~collnb.collectives.RunResult`) shows, as data:
    values as text, cell states, contributing ranks, mismatches, per-rank verdicts."""
    spec = result.spec
    ws, cs, kind = result.world_size, result.chunk_size, spec.kind
    before_vals = [chunk_firsts(t, cs) for t in result.before]
    after_vals = [chunk_firsts(t, cs) for t in result.after]
    exp_vals = [chunk_firsts(t, cs) for t in result.expected]
    ex64_vals = [chunk_firsts(t, cs) for t in result.expected_f64]
    differs = [None if x is None else [differs_exact(a[c] if c < len(a) else None, v) for c, v in enumerate(x)]
               for a, x in zip(after_vals, ex64_vals)]
    nb = max([len(v) for v in before_vals] + [1])
    na = max([len(v) for v in after_vals] + [spec.n_out(ws, r, result.root or 0) for r in range(ws)] + [1])

    def blank(n: int) -> list[list[str]]:
        return [["" for _ in range(n)] for _ in range(ws)]

    # before: rank r's own data
    b = Panel("before", _("before: each rank's input"), ws, nb, blank(nb),
              [["empty"] * nb for _ in range(ws)], [[()] * nb for _ in range(ws)],
              [[False] * nb for _ in range(ws)], blank(nb), blank(nb), [""] * ws)
    if kind == "time":
        b.title = _("before: arrival at dist.barrier() (ms)")
    b.tag, b.asked = blank(nb), blank(nb)
    inputs = result.inputs or []
    for r in range(ws):
        vals = before_vals[r]
        for c, v in enumerate(vals):
            b.text[r][c] = format_value(v, kind)
            b.state[r][c] = "value"
            b.ranks[r][c] = (r,)
            x = inputs[r][c] if kind == "tensor" and r < len(inputs) and c < len(inputs[r]) else None
            # marked where what the learner reads differs (1296 for 1300), not where only the last
            # bits do (float32's 1/3 reads 0.3333 like the 1/3 asked for)
            if _is_number(x) and differs_exact(v, x) and format_value(x, kind) != b.text[r][c]:
                b.asked[r][c] = format_value(x, short=True)
        if not vals:
            b.row_note[r] = (_("no input (not {root})").format(root=spec.root_name) if spec.rooted
                             else _("no input"))

    a = Panel("after", _("after: each rank's output"), ws, na, blank(na),
              [["empty"] * na for _ in range(ws)], [[()] * na for _ in range(ws)],
              [[False] * na for _ in range(ws)], blank(na), blank(na), [""] * ws)
    a.tag, a.asked = blank(na), blank(na)
    if kind == "time":
        a.title = _("after: departure from dist.barrier() (ms)")
    verdicts: list[Verdict] = []
    for r in range(ws):
        vals = after_vals[r]
        defined = result.defined[r]
        for c, v in enumerate(vals):
            a.text[r][c] = format_value(v, kind)
            a.state[r][c] = "value" if defined else "undefined"
            if defined:
                a.ranks[r][c] = tuple(dict.fromkeys(s for s, _ in result.sources[r][c]))
                src = result.sources[r][c]
                if kind == "tensor" and len(src) == 1 and not names_its_rank(result, b.asked, *src[0]):
                    a.tag[r][c] = f"r{src[0][0]}"
        if not defined:
            for c in range(len(vals), na):
                a.state[r][c] = "undefined"
            if not vals:
                a.row_note[r] = (_("no output (not {root})").format(root=spec.root_name) if spec.rooted
                                 else _("no output"))
            verdicts.append("undefined")
            continue
        mism = result.mismatch[r] or []
        for c, bad in enumerate(mism):
            if c >= na:
                continue
            if bad:
                a.mismatch[r][c] = True
                e = exp_vals[r]
                if e is not None and c < len(e):
                    a.expected[r][c] = ("≥ " if kind == "time" else "") + format_value(e[c], kind)
                if c >= len(vals):
                    a.state[r][c] = "empty"
        x64, diff = ex64_vals[r], differs[r]  # both None where the rank has no float64 reference
        if x64 is not None and diff is not None and kind == "tensor":
            for c, x in enumerate(x64[:len(vals)]):
                if not a.mismatch[r][c] and diff[c]:
                    a.exact[r][c] = format_value(x, short=True)
        verdicts.append("✗" if any(mism) else "✓")

    n_bad = sum(v == "✗" for v in verdicts)
    n_chunks_bad = result.n_mismatches()
    dtype_effect = any(x for row in a.exact for x in row)
    if result.ok and dtype_effect:
        dname = str(result.dtype).replace("torch.", "")
        status = _("✓ matches the same {dtype} arithmetic done without torch.distributed; "
                   "orange: float64's result, which {dtype} changed").format(dtype=dname)
    elif result.ok:
        status = _("✓ every defined output matches the reference (computed without torch.distributed)")
        if kind == "time":
            status = _("✓ no rank left dist.barrier() before the last rank had arrived")
    else:
        status = _("✗ {chunks} chunk(s) on {ranks} rank(s) differ from the reference "
                   "(outlined in red, expected value below)").format(chunks=n_chunks_bad, ranks=n_bad)
    legend = [(_("rank {rank}").format(rank=r), "rank") for r in range(ws)]
    if spec.reduces or kind == "time":
        if result.op:
            legend.append((_("coloured band: combined with {op} from these ranks").format(op=result.op.upper()),
                           "stripes"))
        else:
            legend.append((_("coloured band: leaves only after all these ranks arrived"), "stripes"))
    if any(s == "undefined" for row in a.state for s in row):
        legend.append((_("hatched: undefined output"), "undefined"))
    if any(any(row) for row in a.mismatch):
        legend.append((_("red outline: differs from reference"), "mismatch"))
    if any(x for row in a.exact for x in row):
        legend.append((_("exact N: the float64 result, where the dtype changed it"), "exact"))
    if any(x for row in b.asked for x in row):
        dname = str(result.dtype).replace("torch.", "")
        legend.append((_("asked N: the input asked for, which {dtype} cannot hold").format(dtype=dname), "asked"))
    if any(x for row in a.tag for x in row):
        legend.append((_("rN in a corner: the rank this chunk came from (its value does not say)"), "tag"))
    return HeatmapGrid(title=result.title(), call=_call_text(result), status=status, ok=result.ok,
                       before=b, after=a, verdicts=verdicts, legend=legend,
                       values={"before": before_vals, "after": after_vals, "expected_f64": ex64_vals}, differs=differs)
