"""The bandwidth lab's rows shown: a nccl-tests-like text table (:func:`format_table`), the figure
of measured time and busbw against the fitted α-β(-γ) model (:func:`plot`), and, beside it, the
measurements that contradict each other in plain words (:func:`measurement_flags`).

The flags, each with how to measure more cleanly (:data:`CLEANER`):

* **memcpy below one TCP stream** at some size: a copy through the kernel's sockets cannot beat a
  plain copy in memory, so the machine was busy while memcpy was timed;
* **busbw above memcpy**: every byte a rank sends over loopback is copied at least once by a core,
  so a rank's bus bandwidth cannot exceed one core's memcpy measured beside it;
* **a poor fit**: the α-β(-γ) model misses the points by more than :data:`POOR_FIT` (relative RMS):
  its α and β, and what they predict, are then rough.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from ...algorithms import BUILTIN_FORM, DEFAULT_MODEL, algbw, busbw_factor, crossovers, fit_each, predict
from ...i18n import N_, _
from ...units import display_width, format_bytes, format_rate, format_seconds, pad
from .rows import as_rows
from .choices import PRIMITIVES, Row

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ...algorithms import CostModel, costmodel

    #: ``{(primitive, algorithm): fit}``, as :func:`collnb.costmodel.fit_each` makes them.
    Fits = Mapping[tuple[str, str], costmodel.Fit]

#: One flag of :func:`measurement_flags`: ``(kind, text)``.
Flag = tuple[Literal["memcpy<tcp", "busbw>memcpy", "poor fit"], str]

_COLORS = ("#4E79A7", "#E15759", "#59A14F", "#F28E2B", "#B07AA1", "#76B7B2", "#EDC948", "#FF9DA7")

#: The smallest text in the figure, pixels (legends, notes, crossover labels).
MIN_TEXT_PX = 10.0
#: A fit whose relative RMS error exceeds this is flagged.
POOR_FIT = 0.25
#: How to get a cleaner measurement (said under every flag).
CLEANER = N_("For a cleaner measurement: let the machine go quiet (close other programs, wait for other "
             "jobs), use no more ranks than cores, and time more iterations, e.g. "
             "python -m collnb bench all_reduce -n 2 --sizes 4K:16M --iters 50.")


def _refs_at(rows: Iterable[Row], name: str) -> dict[int, Row]:
    """The rows of reference ``name`` by size (bytes)."""
    return {r["nbytes"]: r for r in rows if r["primitive"] == name}


def measurement_flags(rows: object, fits: Fits | None = None, *, primitive: str | None = None) -> list[Flag]:
    """The measurements in ``rows`` that break physics or fit poorly, in plain words (see the module
    doc): a list of ``(kind, text)``, kind ``"memcpy<tcp"``, ``"busbw>memcpy"`` or ``"poor fit"``;
    empty when everything is consistent. ``fits`` as for :func:`plot` (default: fitted here);
    ``primitive``: which collective (default: every one in the rows). Sizes are compared where
    both were measured."""
    rows = as_rows(rows)
    mem, tcp = _refs_at(rows, "memcpy"), _refs_at(rows, "tcp_loopback")
    flags: list[Flag] = []
    slow = [(n, mem[n]["busbw_GBps"], tcp[n]["busbw_GBps"]) for n in sorted(set(mem) & set(tcp))
            if mem[n]["busbw_GBps"] < tcp[n]["busbw_GBps"]]
    if slow:
        n, m, t = min(slow, key=lambda x: x[1] / x[2])
        more = _(" (and at {n} more size(s))").format(n=len(slow) - 1) if len(slow) > 1 else ""
        flags.append(("memcpy<tcp", _("memcpy measured {memcpy} at {size}, below one TCP stream ({tcp}){more}: "
                                      "a copy through the kernel's sockets cannot beat a plain copy in memory, so "
                                      "the machine was busy while memcpy was timed.").format(
                                          memcpy=format_rate(m * 1e9), size=format_bytes(n), tcp=format_rate(t * 1e9),
                                          more=more)))
    coll = [r for r in rows if r["primitive"] in PRIMITIVES and (primitive is None or r["primitive"] == primitive)]
    over = [r for r in coll if r["nbytes"] in mem and r["busbw_GBps"] > mem[r["nbytes"]]["busbw_GBps"]]
    if over:
        r = max(over, key=lambda r: r["busbw_GBps"] / mem[r["nbytes"]]["busbw_GBps"])
        more = _(" ({n} more point(s) too)").format(n=len(over) - 1) if len(over) > 1 else ""
        flags.append(("busbw>memcpy", _("{primitive}/{algorithm} at world size {world_size}, {size}: busbw {busbw} "
                                        "is above memcpy ({memcpy}) measured beside it{more}: every byte a rank "
                                        "sends is copied at least once by a core, so one of the two was timed while "
                                        "the machine was busy.").format(
                                            primitive=r["primitive"], algorithm=r["algorithm"],
                                            world_size=r["world_size"], size=format_bytes(r["nbytes"]),
                                            busbw=format_rate(r["busbw_GBps"] * 1e9),
                                            memcpy=format_rate(mem[r["nbytes"]]["busbw_GBps"] * 1e9), more=more)))
    if fits is None:
        fits = fit_each(rows)
    for (p, a), f in sorted(fits.items()):
        if (primitive is None or p == primitive) and f.rel_rms > POOR_FIT:
            flags.append(("poor fit", _("the α-β fit of {primitive}/{algorithm} misses its {n} points by {percent} % "
                                        "(relative RMS): the times scatter more than two numbers explain, so its α, "
                                        "β and predictions are rough.").format(
                                            primitive=p, algorithm=a, n=f.n, percent=f"{f.rel_rms * 100:.0f}")))
    return flags


#: Chinese punctuation that may not begin a line (it closes what came before it).
_NO_LINE_START = frozenset("，。；：）、！？”’》」")


def _wrap(text: str, width: int, subsequent_indent: str = "") -> list[str]:
    """``textwrap.wrap`` by display columns: English text exactly as ``textwrap.wrap`` wraps it;
    text with wide (CJK) characters broken between any two of them, and between words, so that no
    line takes more than ``width`` columns (a CJK character is about twice a Latin one's width), but
    for a closing punctuation mark (:data:`_NO_LINE_START`), which stays at the end of its line."""
    if display_width(text) == len(text):
        return textwrap.wrap(text, width, subsequent_indent=subsequent_indent)
    lines: list[str] = []
    line = ""
    for token in re.findall(r"[^\s\u2E80-\uFFEF]+|\s+|.", text):
        # a line never starts with closing punctuation (，。；：）、): it stays at the end of the line before
        if display_width(line) + display_width(token) > width and line.strip() and token not in _NO_LINE_START:
            lines.append(line.rstrip())
            line = subsequent_indent
            token = token.lstrip()
        line += token
    if line.strip():
        lines.append(line.rstrip())
    return lines


def _tick(v: float, _pos: int | None = None) -> str:
    """A byte axis tick: ``64K``, ``1M`` (:func:`collnb.units.format_bytes`, compact)."""
    return format_bytes(v, compact=True) if v > 0 else ""


def format_table(rows: object) -> str:
    """The rows as nccl-tests-like text: size, algorithm, time (us), algbw, busbw, ✓/✗."""
    rows = as_rows(rows)
    # the words translated (right-aligned by display width: a CJK character takes two columns); nccl-tests'
    # own column names (size, time, algbw, busbw) stay as nccl-tests prints them
    words = pad(_("primitive"), 14, ">") + " " + pad(_("algorithm"), 18, ">")
    lines = [f"{words} {'ws':>3} {'dtype':>8} {'size':>10} "
             f"{'time us':>11} {'min us':>10} {'max us':>10} {'algbw GB/s':>10} {'busbw GB/s':>10}  ok"]
    for r in rows:
        lines.append(f"{r['primitive']:>14} {r['algorithm']:>18} {r['world_size']:>3} {r['dtype']:>8} "
                     f"{format_bytes(r['nbytes']):>10} {r['time_s'] * 1e6:>11.1f} {r['time_min_s'] * 1e6:>10.1f} "
                     f"{r['time_max_s'] * 1e6:>10.1f} {r['algbw_GBps']:>10.3f} {r['busbw_GBps']:>10.3f}  "
                     f"{'✓' if r['ok'] else '✗'}")
    return "\n".join(lines)


def plot(rows: object, fits: Fits | None = None, *, primitive: str | None = None,
         world_sizes: Iterable[int] | None = None, naive: CostModel | None = None, dpi: int = 80) -> Figure:
    """Measured time and busbw against the fitted α-β(-γ) model, per algorithm; crossovers of
    the fitted models marked; memcpy / TCP references as lines.

    Args:
        rows: what :func:`bench` / :func:`load` returned (or a path).
        fits: ``{(primitive, algorithm): collnb.costmodel.Fit}`` (default:
            :func:`collnb.costmodel.fit_each` of the rows).
        primitive: which primitive to draw (default: the first collective in the rows).
        world_sizes: which world sizes (default: all in the rows), one row of panels each.
        naive: a :class:`collnb.costmodel.CostModel` drawn as the naive model (default
            :data:`collnb.costmodel.DEFAULT_MODEL`), for the built-in's form.

    Returns:
        ``matplotlib.figure.Figure`` (Agg canvas; ``fig.savefig(path)``).

    Raises:
        ValueError: no collective rows.
        collnb.views.raster.CjkFontMissing: the language is Chinese and no CJK font is installed.

    In Chinese the figure's texts fall back to the CJK font of the pictures
    (:func:`collnb.views.matplotlib_fonts`) for glyphs DejaVu Sans lacks.
    """
    from matplotlib import rc_context

    from ...views import matplotlib_fonts
    with rc_context({"font.family": matplotlib_fonts()}):  # a Text keeps the family it is made with
        return _plot(rows, fits, primitive=primitive, world_sizes=world_sizes, naive=naive, dpi=dpi)


def _plot(rows: object, fits: Fits | None, *, primitive: str | None, world_sizes: Iterable[int] | None,
          naive: CostModel | None, dpi: int) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter
    rows = as_rows(rows)
    coll = [r for r in rows if r["primitive"] in PRIMITIVES]
    if not coll:
        raise ValueError(_("no collective rows to plot (only references?); measure with bench() first"))
    primitive = primitive or coll[0]["primitive"]
    coll = [r for r in coll if r["primitive"] == primitive]
    if not coll:
        raise ValueError(_("no rows for {primitive}").format(primitive=repr(primitive)))
    refs = [r for r in rows if r["primitive"] in ("memcpy", "tcp_loopback")]
    if fits is None:
        fits = fit_each(rows)
    naive = naive or DEFAULT_MODEL
    wss = sorted({r["world_size"] for r in coll}) if world_sizes is None else list(world_sizes)
    algs = list(dict.fromkeys(r["algorithm"] for r in coll))
    pt = max(9.0, MIN_TEXT_PX * 72 / dpi)  # the smallest text, points: >= 10 px at this dpi
    flags = measurement_flags(rows, fits, primitive=primitive)
    notes, warned = _notes_text(coll, flags)
    n_lines = notes.count("\n") + 1 + (warned.count("\n") + 2 if warned else 0)
    fig = Figure(figsize=(12, 5.6 * len(wss) + 0.25 * n_lines + 0.4), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    gs = fig.add_gridspec(len(wss) + 1, 2, height_ratios=[5.6] * len(wss) + [0.25 * n_lines + 0.2])
    axes = [[fig.add_subplot(gs[i, 0]), fig.add_subplot(gs[i, 1])] for i in range(len(wss))]
    cpus = os.cpu_count()
    for row_i, ws in enumerate(wss):
        ax_t, ax_b = axes[row_i]
        sel = [r for r in coll if r["world_size"] == ws]
        if not sel:
            continue
        xs_all = sorted({r["nbytes"] for r in sel})
        grid = [2 ** k for k in range(int(math.log2(max(1, xs_all[0]))), int(math.log2(xs_all[-1])) + 2)]
        for i, alg in enumerate(algs):
            c = _COLORS[i % len(_COLORS)]
            pts = sorted((r for r in sel if r["algorithm"] == alg), key=lambda r: r["nbytes"])
            if not pts:
                continue
            x = [r["nbytes"] for r in pts]
            t = [r["time_s"] for r in pts]
            err = [[r["time_s"] - r["time_min_s"] for r in pts], [r["time_max_s"] - r["time_s"] for r in pts]]
            bad = [r for r in pts if not r["ok"]]
            measured = _("{algorithm} measured").format(algorithm=alg)
            ax_t.errorbar(x, t, yerr=err, fmt="o", ms=4, color=c, capsize=2, label=measured)
            ax_b.plot(x, [r["busbw_GBps"] for r in pts], "o-", ms=4, color=c, label=measured)
            for r in bad:
                ax_t.plot([r["nbytes"]], [r["time_s"]], "x", color="black", ms=10)
            f = fits.get((primitive, alg))
            if f is not None:
                ft = [f.predict(world_size=ws, nbytes=n) for n in grid]
                inv_beta = format_rate(1 / f.model.beta) if f.model.beta > 0 else _("∞ (β fitted as 0)")
                ax_t.plot(grid, ft, "--", color=c, lw=1.3,
                          label=_("{algorithm} fit: α={alpha}, 1/β={inv_beta}").format(
                              algorithm=alg, alpha=format_seconds(f.model.alpha), inv_beta=inv_beta))
                ax_b.plot(grid, [algbw(n, s) * busbw_factor(primitive, ws) for n, s in zip(grid, ft)], "--",
                          color=c, lw=1.1)
        # the naive model for the built-in's form
        form = BUILTIN_FORM.get(primitive)
        if form:
            nt = [predict(primitive, form, ws, n, naive).seconds for n in grid]
            ax_t.plot(grid, nt, ":", color="#777777", lw=1.5,
                      label=_("naive model ({form} form, α={alpha}, 1/β={inv_beta})").format(
                          form=form, alpha=format_seconds(naive.alpha), inv_beta=format_rate(1 / naive.beta)))
        # crossovers of the fitted models inside the measured range, labels stacked up from the bottom
        fitted = [(a, fits[(primitive, a)]) for a in algs if (primitive, a) in fits]
        k = 0
        for (a1, f1), (a2, f2) in ((p, q) for j, p in enumerate(fitted) for q in fitted[j + 1:]):
            for xc in crossovers(f1, f2, ws, xs_all[0], xs_all[-1]):
                ax_t.axvline(xc, color="#999999", lw=0.8, ls="-.")
                ax_t.text(xc, 0.03 + 0.08 * k, " " + _("{first} = {second} at {size}").format(
                    first=a1, second=a2, size=format_bytes(xc)), fontsize=pt, color="#555555",
                          va="bottom", transform=ax_t.get_xaxis_transform())
                k += 1
        for name, style in (("memcpy", "-"), ("tcp_loopback", "--")):
            rr = sorted((r for r in refs if r["primitive"] == name), key=lambda r: r["nbytes"])
            if rr:
                label = {"memcpy": N_("memcpy (one core)"), "tcp_loopback": N_("one TCP stream (loopback)")}[name]
                ax_b.plot([r["nbytes"] for r in rr], [r["busbw_GBps"] for r in rr], style, color="#333333", lw=1,
                          label=_(label))
        for ax in (ax_t, ax_b):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(_tick))
        over = (_("{ranks} ranks on {cpus} cores").format(ranks=ws, cpus=cpus)
                + (_(" (oversubscribed)") if cpus and ws > cpus else ""))
        ax_t.set_title(_("{primitive}, world size {world_size}: time ({over})").format(
            primitive=primitive, world_size=ws, over=over), fontsize=max(10, pt))
        ax_b.set_title(_("{primitive}, world size {world_size}: busbw (nccl-tests)").format(
            primitive=primitive, world_size=ws), fontsize=max(10, pt))
        ax_t.set_xlabel(_("bytes per rank"))
        ax_b.set_xlabel(_("bytes per rank"))
        ax_t.set_ylabel(_("seconds (median of slowest rank; bars min-max)"))
        ax_b.set_ylabel(_("GB/s (log scale)"))
        # below the axes, never over a data point; >= 10 px
        for ax in (ax_t, ax_b):
            ax.legend(fontsize=pt, loc="upper left", bbox_to_anchor=(0.0, -0.13), borderaxespad=0.0,
                      frameon=False, ncol=1)
        ax_t.grid(True, which="major", alpha=0.3)
        ax_b.grid(True, which="major", alpha=0.3)
    note_ax = fig.add_subplot(gs[len(wss), :])
    note_ax.set_axis_off()
    note_ax.text(0.0, 1.0, notes, fontsize=pt, color="#444444", va="top", ha="left", transform=note_ax.transAxes,
                 linespacing=1.35)
    if warned:  # the flags in their own box, in the colour of a caution, under the notes
        y = 1.0 - (notes.count("\n") + 1.8) / n_lines
        note_ax.text(0.005, y, warned, fontsize=pt, color="#7A3E00", va="top", ha="left", linespacing=1.35,
                     transform=note_ax.transAxes,
                     bbox=dict(boxstyle="round,pad=0.5", facecolor="#FFF4D6", edgecolor="#A65400"))
    fig.collnb_flags = flags  # type: ignore[attr-defined]  # a mark on the figure: the flags it shows
    return fig


def _notes_text(coll: list[Row], flags: list[Flag]) -> tuple[str, str]:
    """``(notes, flagged)``: the text under the panels (what the lines are, why measured sits above
    the naive model) and the flags of :func:`measurement_flags` with how to measure more cleanly
    (``""`` when there are none)."""
    cpus = os.cpu_count()
    backend = coll[0]["backend"]
    lines = _wrap(
        _("{backend}, {dtype}; dashed: α-β-γ model fitted to these points; dotted: the naive model. "
          "Measured sits above the naive model on a shared CPU: ranks outnumber cores ({cpus} here), every rank's "
          "Python adds per-round overhead, loopback TCP copies through the kernel (the debug checks are off "
          "while timing). memcpy and TCP: the median of the fastest half of their repetitions.").format(
              backend=backend, dtype=coll[0]["dtype"], cpus=cpus), 170)
    warned = []
    for _kind, text in flags:
        warned += _wrap("⚠ " + text, 168, subsequent_indent="   ")
    if flags:
        warned += _wrap(_(CLEANER), 168)
    return "\n".join(lines), "\n".join(warned)
