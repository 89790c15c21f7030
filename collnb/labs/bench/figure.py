"""The bandwidth lab's rows shown: a nccl-tests-like text table (:func:`format_table`) and the figure
of measured time and busbw against the fitted α-β(-γ) model (:func:`plot`)."""

from __future__ import annotations

import math
import os

from ...algorithms import BUILTIN_FORM, DEFAULT_MODEL, algbw, busbw_factor, crossovers, fit_each, predict
from ...units import format_bytes, format_rate, format_seconds
from .rows import as_rows
from .inputs import PRIMITIVES

_COLORS = ("#4E79A7", "#E15759", "#59A14F", "#F28E2B", "#B07AA1", "#76B7B2", "#EDC948", "#FF9DA7")


def _tick(v, _pos=None) -> str:
    """A byte axis tick: ``64K``, ``1M`` (:func:`collnb.units.format_bytes`, compact)."""
    return format_bytes(v, compact=True) if v > 0 else ""


def format_table(rows) -> str:
    """The rows as nccl-tests-like text: size, algorithm, time (us), algbw, busbw, ✓/✗."""
    rows = as_rows(rows)
    lines = [f"{'primitive':>14} {'algorithm':>18} {'ws':>3} {'dtype':>8} {'size':>10} {'time us':>11} "
             f"{'min us':>10} {'max us':>10} {'algbw GB/s':>10} {'busbw GB/s':>10}  ok"]
    for r in rows:
        lines.append(f"{r['primitive']:>14} {r['algorithm']:>18} {r['world_size']:>3} {r['dtype']:>8} "
                     f"{format_bytes(r['nbytes']):>10} {r['time_s'] * 1e6:>11.1f} {r['time_min_s'] * 1e6:>10.1f} "
                     f"{r['time_max_s'] * 1e6:>10.1f} {r['algbw_GBps']:>10.3f} {r['busbw_GBps']:>10.3f}  "
                     f"{'✓' if r['ok'] else '✗'}")
    return "\n".join(lines)


def plot(rows, fits=None, *, primitive: str | None = None, world_sizes=None, naive=None, dpi: int = 80):
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
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter
    rows = as_rows(rows)
    coll = [r for r in rows if r["primitive"] in PRIMITIVES]
    if not coll:
        raise ValueError("no collective rows to plot (only references?); measure with bench() first")
    primitive = primitive or coll[0]["primitive"]
    coll = [r for r in coll if r["primitive"] == primitive]
    if not coll:
        raise ValueError(f"no rows for {primitive!r}")
    refs = [r for r in rows if r["primitive"] in ("memcpy", "tcp_loopback")]
    if fits is None:
        fits = fit_each(rows)
    naive = naive or DEFAULT_MODEL
    wss = sorted({r["world_size"] for r in coll}) if world_sizes is None else list(world_sizes)
    algs = list(dict.fromkeys(r["algorithm"] for r in coll))
    fig = Figure(figsize=(12, 4.2 * len(wss) + 0.8), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(wss), 2, squeeze=False)
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
            ax_t.errorbar(x, t, yerr=err, fmt="o", ms=4, color=c, capsize=2, label=f"{alg} measured")
            ax_b.plot(x, [r["busbw_GBps"] for r in pts], "o-", ms=4, color=c, label=f"{alg} measured")
            for r in bad:
                ax_t.plot([r["nbytes"]], [r["time_s"]], "x", color="black", ms=10)
            f = fits.get((primitive, alg))
            if f is not None:
                ft = [f.predict(world_size=ws, nbytes=n) for n in grid]
                inv_beta = format_rate(1 / f.model.beta) if f.model.beta > 0 else "∞ (β fitted as 0)"
                ax_t.plot(grid, ft, "--", color=c, lw=1.3,
                          label=f"{alg} fit: α={format_seconds(f.model.alpha)}, 1/β={inv_beta}")
                ax_b.plot(grid, [algbw(n, s) * busbw_factor(primitive, ws) for n, s in zip(grid, ft)], "--",
                          color=c, lw=1.1)
        # the naive model for the built-in's form
        form = BUILTIN_FORM.get(primitive)
        if form:
            nt = [predict(primitive, form, ws, n, naive).seconds for n in grid]
            ax_t.plot(grid, nt, ":", color="#777777", lw=1.5,
                      label=f"naive model ({form} form, α={format_seconds(naive.alpha)}, "
                            f"1/β={format_rate(1 / naive.beta)})")
        # crossovers of the fitted models inside the measured range, labels stacked up from the bottom
        fitted = [(a, fits[(primitive, a)]) for a in algs if (primitive, a) in fits]
        k = 0
        for (a1, f1), (a2, f2) in ((p, q) for j, p in enumerate(fitted) for q in fitted[j + 1:]):
            for xc in crossovers(f1, f2, ws, xs_all[0], xs_all[-1]):
                ax_t.axvline(xc, color="#999999", lw=0.8, ls="-.")
                ax_t.text(xc, 0.03 + 0.07 * k, f" {a1} = {a2} at {format_bytes(xc)}", fontsize=7, color="#555555",
                          va="bottom", transform=ax_t.get_xaxis_transform())
                k += 1
        for name, style in (("memcpy", "-"), ("tcp_loopback", "--")):
            rr = sorted((r for r in refs if r["primitive"] == name), key=lambda r: r["nbytes"])
            if rr:
                ax_b.plot([r["nbytes"] for r in rr], [r["busbw_GBps"] for r in rr], style, color="#333333", lw=1,
                          label={"memcpy": "memcpy (one core)", "tcp_loopback": "one TCP stream (loopback)"}[name])
        for ax in (ax_t, ax_b):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(_tick))
        over = f"{ws} ranks on {cpus} cores" + (" (oversubscribed)" if cpus and ws > cpus else "")
        ax_t.set_title(f"{primitive}, world size {ws}: time ({over})", fontsize=10)
        ax_b.set_title(f"{primitive}, world size {ws}: busbw (nccl-tests)", fontsize=10)
        ax_t.set_xlabel("bytes per rank")
        ax_b.set_xlabel("bytes per rank")
        ax_t.set_ylabel("seconds (median of slowest rank; bars min-max)")
        ax_b.set_ylabel("GB/s (log scale)")
        ax_t.legend(fontsize=6.5, loc="upper left")
        ax_b.legend(fontsize=6.5, loc="upper left")
        ax_t.grid(True, which="major", alpha=0.3)
        ax_b.grid(True, which="major", alpha=0.3)
    backend = coll[0]["backend"]
    fig.text(0.01, 0.005, f"{backend}, {coll[0]['dtype']}; dashed: α-β-γ model fitted to these points; dotted: the "
             f"naive model. Measured sits above the naive model on a shared CPU: ranks outnumber cores "
             f"({cpus} here), every rank's Python adds per-round overhead, loopback TCP copies through the kernel "
             f"(the debug checks are off while timing).", fontsize=7, color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
