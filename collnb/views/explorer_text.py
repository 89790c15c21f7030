"""The HTML and text the primitive explorer shows beside its heatmap: the ``<img>`` with alt text and
``data-*`` attributes describing what is drawn, the float64 reference table, and the line saying
what the dtype did.
"""

from __future__ import annotations

import base64
import math

from ..vocabulary import dtype_name
from .static import IMG_STYLE, esc
from .values import chunk_firsts, differs_exact, format_value

__all__ = ["figure_html", "reference_html", "dtype_effect_text"]


def _rows_attr(rows) -> str:
    """Per-rank lists of cell texts -> ``"a,b,c;d,e,f"`` (ranks separated by ``;``)."""
    return ";".join(",".join(str(x) for x in row) for row in rows)


def figure_html(result, grid, png: bytes, him=None) -> str:
    """The heatmap PNG of ``result`` as ``<img class="collnb-heatmap">``: alt text from ``grid``, and
    ``data-*`` attributes with the values drawn (ranks separated by ``;``) and, given the painted
    :class:`~collnb.views.heatmap.HeatmapImage` ``him``, where the cells are and the smallest label."""
    b64 = base64.b64encode(png).decode("ascii")
    after = _values(result, "after")
    exact = _values(result, "expected_f64")
    marks = [[_num(x) if differs_exact(v, x) else "" for v, x in zip(a, e)] if e else ["" for _ in a]
             for a, e in zip(after, exact)]
    alt_rows = "; ".join(f"rank {r}: [{', '.join(t for t in row if t)}]"
                         for r, row in enumerate(grid.after.text))
    alt = f"{grid.title}. After: {alt_rows}. {grid.status}"
    attrs = dict(primitive=result.primitive, world_size=result.world_size,
                 dtype=dtype_name(result.dtype) if result.dtype is not None else "",
                 op=result.op or "", root="" if result.root is None else result.root,
                 backend=result.backend, chunk_size=result.chunk_size, ok=int(result.ok),
                 before=_rows_attr([[_num(v) for v in row] for row in _values(result, "before")]),
                 after=_rows_attr([[_num(v) for v in row] for row in after]),
                 exact=_rows_attr(marks), after_text=_rows_attr(grid.after.text))
    if him is not None:  # where the cells are, for tests that measure the drawn labels
        attrs.update(cells=";".join(f"{k}:{x},{y},{c}" for k, (x, y, c) in him.geometry.items()),
                     layout=him.layout, min_font_px=f"{min(s_ for _, s_, _ in him.labels):.1f}")
    data = " ".join(f"data-{k.replace('_', '-')}=\"{esc(v)}\"" for k, v in attrs.items())
    return (f"<img class=\"collnb-heatmap\" src=\"data:image/png;base64,{b64}\" alt=\"{esc(alt)}\" "
            f"title=\"{esc(grid.title)}\" {data} style=\"{IMG_STYLE}\">")


def reference_html(result, grid) -> str:
    """Float64 result of the same inputs, per rank and chunk; cells where the run's dtype gave
    another value are highlighted and show what the dtype gave."""
    if result.spec.kind != "tensor":
        return ""
    dname = dtype_name(result.dtype)
    after = _values(result, "after")
    exact = _values(result, "expected_f64")
    rows, exact_rows = [], []
    n_diff = 0
    for r in range(result.world_size):
        vals = exact[r]
        exact_rows.append([_num(x) for x in vals] if vals is not None else [])
        if vals is None:
            cells = ["<td class='undef'>undefined</td>"]
        else:
            cells = []
            for c, x in enumerate(vals):
                txt = esc(format_value(x))
                got = after[r][c] if c < len(after[r]) else None
                if differs_exact(got, x):
                    n_diff += 1
                    g = esc(format_value(got))
                    cells.append(f"<td class='differs' title='{esc(dname)} gives {g}'>{txt}"
                                 f"<span>{esc(dname)}: {g}</span></td>")
                else:
                    cells.append(f"<td>{txt}</td>")
        rows.append(f"<tr><th>rank {r}</th>{''.join(cells)}</tr>")
    # sizes: >= 10 px at ipywidgets' 13 px base (90% = 11.7 px, the dtype's value 88% of that)
    style = ("<style>.collnb-reference{border-collapse:collapse;font-size:90%;text-align:center;line-height:1.3}"
             ".collnb-reference th{text-align:right;padding:1px 4px 1px 0;font-weight:normal}"
             ".collnb-reference td{padding:1px 4px;border:1px solid #ddd}"
             ".collnb-reference td.differs{background:#FFD8A8;font-weight:bold;border:2px solid #A65400}"
             ".collnb-reference td.differs span{display:block;font-weight:normal;font-size:88%;color:#7A3E00}"
             ".collnb-reference td.undef{color:#888;font-style:italic}</style>")
    if n_diff:
        what = (f"<span style='background:#FFD8A8'>highlighted</span>: {n_diff} chunk(s) where "
                f"{dname} gave another value")
    else:
        what = f"{dname} gave the exact result everywhere"
    # line-height: ipywidgets' HTML widget sets a 28 px line height meant for one-line labels
    head = (f"<div style='font-weight:bold;line-height:1.6'>float64 reference</div>"
            f"<div style='font-size:85%;color:#555;line-height:1.4;margin-bottom:4px'>the exact "
            f"result of the same inputs; {what}</div>")
    table = (f"<table class='collnb-reference' data-differs='{n_diff}' "
             f"data-exact='{esc(_rows_attr(exact_rows))}'>{''.join(rows)}</table>")
    return style + head + table



def _values(result, which):
    return [chunk_firsts(t, result.chunk_size) for t in getattr(result, which)]


def _num(v) -> str:
    """A value as exact text for ``data-*`` attributes: ``-56``, ``280`` (integral floats without
    ``.0``), ``0.1``, ``inf``, ``nan``, ``(1+2j)``, ``True``, or the object's ``str``."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer() and abs(v) < 2 ** 53:
            return str(int(v))
        return repr(v)
    return str(v)


def dtype_effect_text(result, grid) -> str:
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
        head = (f"{dname} cannot hold every input asked for: rank {r}, chunk {c} holds {grid.before.text[r][c]} "
                f"for {grid.before.asked[r][c]} ({len(asked)} input chunk(s), marked in the before panel)")
    after = _values(result, "after")
    exact = _values(result, "expected_f64")
    diffs = [(r, c) for r in range(result.world_size) if exact[r] is not None
             for c, x in enumerate(exact[r]) if c < len(after[r]) and differs_exact(after[r][c], x)]
    if not diffs:
        return head
    r, c = diffs[0]
    if not result.spec.reduces:
        body = (f"{dname} cannot hold every input value: the inputs changed when the tensors were made "
                f"(rank {r}, chunk {c}: {format_value(after[r][c])} for {format_value(exact[r][c])}); "
                f"{result.primitive} itself copied them unchanged")
    else:
        body = (f"dtype effect: {dname} gives {format_value(after[r][c])} where float64 gives "
                f"{format_value(exact[r][c])} (rank {r}, chunk {c}; {len(diffs)} chunk(s) differ from the "
                f"float64 result, highlighted)")
    return f"{head}; {body}" if head else body
