"""Explain my busbw: read real nccl-tests output, say what each number means, fit the α-β model,
and flag what is off.

:func:`parse_nccl_tests` reads the text ``all_reduce_perf`` and its siblings print (any of their
collectives; the out-of-place and in-place columns; ``#wrong``, or the ``error`` column of older
releases; ``N/A`` when checking was off; the per-iteration columns of ``-I 1``; timestamps of
``-S 1``; the rank/device lines, for the number of ranks and nodes). Lines it cannot read raise
:class:`NcclTestsFormatError` naming the line and why. :func:`explain_nccl_tests` turns the table
into an :class:`Explanation`: per size the time, algbw and busbw and what each means, the α-β fit
(latency and bandwidth), and the flags (wrong results, a latency floor, a plateau below the link
rate you give, a dip where NCCL switches algorithm, in-place far from out-of-place, the footer's
"Avg bus bandwidth" read as a peak).

**The formulas** are nccl-tests' own (doc/PERFORMANCE.md; src/*.cu ``*GetBw``): ``algbw = S / t``
with ``S`` the size column (for all_gather and reduce_scatter the whole array, ``count * n``
elements), ``busbw = algbw * factor``: all_reduce ``2(n-1)/n``, reduce_scatter, all_gather,
alltoall ``(n-1)/n``, broadcast and reduce ``1``, sendrecv ``1``. The printed format is the one of
nccl-tests' src/util.cu (``writeResultHeader``, ``writeBenchmarkLineBody``; commit a0b82b2 of
NVIDIA/nccl-tests) and of its older releases (``error`` instead of ``#wrong``, no ``root`` column),
as seen in NVIDIA/nccl-tests issues #107 and #119 and NVIDIA/nccl #318.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...i18n import _
from ...units import format_bytes
from ...vocabulary import check_int, check_real

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["NcclTestsFormatError", "NcclTestsRow", "NcclTestsRun", "parse_nccl_tests", "Explanation",
           "explain_nccl_tests", "COLLECTIVES", "busbw_factor"]

#: nccl-tests' programs -> the collective's name here.
COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
               "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "all_to_all": "all_to_all",
               "sendrecv": "sendrecv", "hypercube": "hypercube", "scatter": "scatter", "gather": "gather"}


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``collective`` at ``n`` ranks (module doc)."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "scatter", "gather", "hypercube"):
        return (n - 1) / n
    return 1.0


class NcclTestsFormatError(ValueError):
    """A line of the text is not nccl-tests output as expected: ``line`` (1-based) and ``text``."""

    def __init__(self, message: str, line: int | None = None, text: str = ""):
        super().__init__(message)
        self.line = line
        self.text = text


@dataclass(frozen=True)
class Measured:
    """One side (out-of-place or in-place) of a row: ``time_us``, ``algbw``/``busbw`` (GB/s as
    printed), ``wrong`` (elements wrong; ``None`` for ``N/A``; for old releases the max error)."""

    time_us: float
    algbw: float
    busbw: float
    wrong: float | None


@dataclass(frozen=True)
class NcclTestsRow:
    """One size: ``size`` (bytes, as printed), ``count`` (elements), ``dtype``, ``redop``, ``root``,
    ``out_of_place`` and ``in_place`` (:class:`Measured`; ``in_place`` ``None`` when not printed),
    ``line`` (1-based line number in the text)."""

    size: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place: Measured
    in_place: Measured | None
    line: int


@dataclass
class NcclTestsRun:
    """A parsed nccl-tests run: ``collective`` (``None`` when the text does not say), ``ranks``
    (from the ``Rank`` device lines, ``None`` without them), ``hosts`` (distinct hosts of those
    lines), ``devices`` (their device names), ``rows``, ``avg_busbw`` and ``out_of_bounds`` (the
    footer's), ``old_format`` (an ``error`` column instead of ``#wrong``), ``version`` (the
    ``# nccl-tests version`` line's, if any)."""

    collective: str | None
    ranks: int | None
    hosts: list[str]
    devices: list[str]
    rows: list[NcclTestsRow]
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    old_format: bool = False
    version: str | None = None


_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_PROGRAM = re.compile(r"(all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|all_to_all|sendrecv|hypercube|"
                      r"scatter|gather)_perf")
_FOOT_BW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(" + _NUM + ")")
_FOOT_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_TIMESTAMP = re.compile(r"\s+\d{4}-\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}\s*$")


def _strip_prefix(line: str) -> str:
    """Drop what launchers put before a line (``[1,0]<stdout>:``, ``host: ``, ``0: ``)."""
    return re.sub(r"^(\[\d+,\d+\]<stdout>:|\S+:\s(?=\s*[#\d])|\d+:\s)", "", line)


def parse_nccl_tests(text: str, collective: str | None = None) -> NcclTestsRun:
    """Parse nccl-tests output (module doc).

    Args:
        text: the output as printed (other lines around it, e.g. NCCL's INFO lines or the shell
            prompt, are skipped).
        collective: the collective (``"all_reduce"``, ``"all_gather"``, ... or a program name such
            as ``"all_gather_perf"``) when the text does not name it.

    Raises:
        NcclTestsFormatError: a line that looks like a result (starts with a number) but cannot
            be read, saying which line and why; no result line at all; an unknown ``collective``.
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(_("explain_nccl_tests takes the output as text (str); got {type}").format(
            type=type(text).__name__))
    if collective is not None:
        key = collective.replace("_perf", "").lower()
        if key not in COLLECTIVES:
            raise NcclTestsFormatError(_("unknown collective {name!r}; nccl-tests has: {names}").format(
                name=collective, names=", ".join(sorted(set(COLLECTIVES)))))
        collective = COLLECTIVES[key]
    ranks: dict[str, tuple[str, str]] = {}
    devices: list[str] = []
    rows: list[NcclTestsRow] = []
    columns: list[str] | None = None
    avg: float | None = None
    oob: int | None = None
    version: str | None = None
    found_program: str | None = None
    for i, raw in enumerate(text.splitlines(), 1):
        line = _strip_prefix(raw.rstrip())
        if not line.strip():
            continue
        m = _PROGRAM.search(line)
        if m and found_program is None:
            found_program = COLLECTIVES[m.group(1)]
        if line.lstrip().startswith("#"):
            body = line.lstrip()
            if (r := _RANK_LINE.match(body)):
                ranks.setdefault(body, (r.group(2), r.group(3).strip()))
            elif (f := _FOOT_BW.match(body)):
                avg = float(f.group(1))
            elif (f := _FOOT_OOB.match(body)):
                oob = int(f.group(1))
            elif (v := _VERSION.match(body)):
                version = v.group(1)
            elif re.search(r"\bsize\b.*\bcount\b.*\btype\b", body):
                columns = body.lstrip("#").split()
            continue
        if not re.match(r"^\s*\d", line):
            continue  # NCCL INFO lines, prompts, warnings
        if columns is None:
            raise NcclTestsFormatError(_("line {n} holds numbers but no column header ('#  size  count  type ...') came "
                                         "before it: {line!r}").format(n=i, line=raw.strip()), i, raw)
        rows.append(_row(line, columns, i, raw))
    if not rows:
        raise NcclTestsFormatError(_("no nccl-tests result line found: expected lines such as '1048576  262144  float  "
                                     "sum  -1  28.1  37.3  65.3  0  ...' under a '#  size  count  type ...' header"))
    hosts = list(dict.fromkeys(h for h, _d in ranks.values()))
    devices = [d for _h, d in ranks.values()]
    return NcclTestsRun(collective or found_program, len(ranks) or None, hosts, devices, rows, avg, oob,
                        "error" in (columns or []), version)


def _row(line: str, columns: list[str], i: int, raw: str) -> NcclTestsRow:
    body = _TIMESTAMP.sub("", line)
    tokens = body.split()
    lead = [c for c in ("size", "count", "type", "redop", "root") if c in columns]
    per_side = 4 + (4 if "i_min" in columns else 0)
    want = len(lead) + 2 * per_side
    if len(tokens) not in (want, len(lead) + per_side):
        raise NcclTestsFormatError(_("line {n} could not be read: {got} fields where the header ({cols}) gives {want}: "
                                     "{line!r}").format(n=i, got=len(tokens), cols=" ".join(columns), want=want,
                                                        line=raw.strip()), i, raw)
    head = dict(zip(lead, tokens))

    def num(tok: str, what: str) -> float:
        if not re.fullmatch(_NUM, tok):
            raise NcclTestsFormatError(_("line {n} could not be read: {what} {tok!r} is not a number: {line!r}").format(
                n=i, what=what, tok=tok, line=raw.strip()), i, raw)
        return float(tok)

    def side(off: int) -> Measured:
        t, a, b, w = tokens[off:off + 4]
        wrong = None if w.upper() == "N/A" else num(w, "#wrong")
        return Measured(num(t, "time"), num(a, "algbw"), num(b, "busbw"), wrong)

    size = num(head.get("size", "0"), "size")
    count = num(head.get("count", "0"), "count")
    if size < 0 or count < 0 or size != int(size) or count != int(count):
        raise NcclTestsFormatError(_("line {n} could not be read: size and count must be whole numbers >= 0: "
                                     "{line!r}").format(n=i, line=raw.strip()), i, raw)
    root = head.get("root", "-1")
    oop = side(len(lead))
    ip = side(len(lead) + per_side) if len(tokens) == want else None
    return NcclTestsRow(int(size), int(count), head.get("type", "?"), head.get("redop", "none"),
                        int(num(root, "root")), oop, ip, i)


@dataclass
class Explanation:
    """What :func:`explain_nccl_tests` found: the ``run``, the collective and ranks it assumed,
    ``alpha_us`` and ``beta_us_per_byte`` (the α-β fit of out-of-place time: ``t = α + β·S``),
    ``peak_algbw``/``peak_busbw`` (GB/s: ``1/β`` and ``factor/β``: what the fit says large sizes
    tend to), ``half_size`` (bytes at which half of it is reached, ``α/β``), the measured
    ``best_busbw``, ``flags`` (one sentence each, in the language spoken) and ``expected_busbw``."""

    run: NcclTestsRun
    collective: str
    ranks: int | None
    factor: float | None
    alpha_us: float | None
    beta_us_per_byte: float | None
    best_busbw: float
    expected_busbw: float | None
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def peak_algbw(self) -> float | None:
        return None if not self.beta_us_per_byte else 1 / (self.beta_us_per_byte * 1e3)

    @property
    def peak_busbw(self) -> float | None:
        p = self.peak_algbw
        return None if p is None or self.factor is None else p * self.factor

    @property
    def half_size(self) -> float | None:
        if not self.beta_us_per_byte or self.alpha_us is None:
            return None
        return self.alpha_us / self.beta_us_per_byte

    def table(self) -> str:
        """Per size: bytes, time, algbw, busbw (out-of-place; in-place beside), #wrong, and which
        regime it is in (latency-bound below the half-bandwidth size, bandwidth-bound above)."""
        head = [_("size"), _("time (us)"), _("algbw GB/s"), _("busbw GB/s"), _("in-place busbw"), _("#wrong"),
                _("regime")]
        lines = ["  ".join(f"{h:>14}" for h in head)]
        half = self.half_size
        for r in self.run.rows:
            o, p = r.out_of_place, r.in_place
            regime = "-" if half is None or r.size == 0 else (
                _("latency-bound") if r.size < half else _("bandwidth-bound"))
            wrong = "N/A" if o.wrong is None else f"{o.wrong:g}"
            lines.append("  ".join([f"{format_bytes(r.size):>14}", f"{o.time_us:>14.2f}", f"{o.algbw:>14.2f}",
                                    f"{o.busbw:>14.2f}", f"{(p.busbw if p else float('nan')):>14.2f}", f"{wrong:>14}",
                                    f"{regime:>14}"]))
        return "\n".join(lines)

    def meaning(self) -> str:
        """What algbw and busbw mean here, with this run's numbers (nccl-tests' PERFORMANCE.md)."""
        n = self.ranks
        f = "?" if self.factor is None else f"{self.factor:.3f}"
        text = _("algbw = size / time: how fast the {coll} moved its buffer. busbw = algbw x {f} ({formula}, n = {n} "
                 "ranks): the rate each rank's busiest link ran at, comparable across rank counts and with the "
                 "hardware's peak (nccl-tests, doc/PERFORMANCE.md).").format(
                     coll=self.collective, f=f, formula=_FORMULA.get(self.collective, "1"), n=n if n else "?")
        return text

    def fit_text(self) -> str:
        if self.alpha_us is None:
            return _("too few sizes to fit the α-β model")
        return _("α-β fit of the out-of-place time: t = {alpha:.1f} us + size / {bw:.2f} GB/s; busbw tends to "
                 "{bus:.2f} GB/s for large sizes; half of it is reached at {half}").format(
                     alpha=self.alpha_us, bw=self.peak_algbw or 0, bus=self.peak_busbw or 0,
                     half=format_bytes(self.half_size or 0))

    def __str__(self) -> str:
        parts = [self.meaning(), self.table(), self.fit_text()]
        if self.flags:
            parts.append(_("what is off:") + "\n" + "\n".join("  ! " + f for f in self.flags))
        else:
            parts.append(_("nothing is off"))
        if self.notes:
            parts.append("\n".join("  - " + n for n in self.notes))
        return "\n\n".join(parts)

    def figure(self, dpi: int = 90) -> Figure:
        """busbw and algbw per size (measured, out-of-place and in-place), the α-β fit's busbw, the
        expected busbw if given, the flagged sizes marked. A matplotlib Figure (Agg)."""
        from matplotlib import rc_context
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from ...views import matplotlib_fonts
        from .pictures import _bytes_formatter
        with rc_context({"font.family": matplotlib_fonts()}):
            fig = Figure(figsize=(8.0, 4.4), dpi=dpi)
            FigureCanvasAgg(fig)
            ax = fig.add_subplot(1, 1, 1)
            rows = [r for r in self.run.rows if r.size > 0]
            xs = [r.size for r in rows]
            ax.plot(xs, [r.out_of_place.busbw for r in rows], "o-", color="#0072B2", label=_("busbw, out-of-place"))
            if all(r.in_place for r in rows):
                ax.plot(xs, [r.in_place.busbw for r in rows if r.in_place], "s--", color="#56B4E9", ms=3,
                        label=_("busbw, in-place"))
            ax.plot(xs, [r.out_of_place.algbw for r in rows], ".-", color="#E69F00", label=_("algbw, out-of-place"))
            if self.alpha_us is not None and self.beta_us_per_byte and self.factor is not None:  # no fit: times that fall with size
                grid = np.geomspace(max(1, min(xs)), max(xs), 64)
                fit = [s / (self.alpha_us + self.beta_us_per_byte * s) / 1e3 * self.factor for s in grid]
                ax.plot(grid, fit, ":", color="#000000", label=_("α-β fit (busbw)"))
            if self.expected_busbw:
                ax.axhline(self.expected_busbw, color="#D55E00", lw=1, label=_("expected busbw"))
            bad = [r for r in rows if (r.out_of_place.wrong or 0) > 0 and not self.run.old_format]
            if bad:
                ax.plot([r.size for r in bad], [r.out_of_place.busbw for r in bad], "x", color="#D62728", ms=10,
                        label=_("wrong results"))
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(_bytes_formatter())
            ax.set_xlabel(_("size (bytes)"))
            ax.set_ylabel("GB/s")
            ax.set_title(_("{coll} on {n} ranks: what nccl-tests measured").format(
                coll=self.collective, n=self.ranks or "?"), fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8, frameon=False)
            fig.tight_layout()
            return fig


_FORMULA = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n", "all_to_all": "(n-1)/n",
            "broadcast": "1", "reduce": "1", "sendrecv": "1"}


def _infer_ranks(run: NcclTestsRun, collective: str) -> int | None:
    """The rank count from the busbw/algbw ratio, when the rank lines are missing."""
    ratios = [r.out_of_place.busbw / r.out_of_place.algbw for r in run.rows if r.out_of_place.algbw > 0.05]
    if not ratios:
        return None
    f = float(np.median(ratios))
    if collective == "all_reduce" and f < 1.999:
        return max(1, round(2 / (2 - f)))
    if collective in ("all_gather", "reduce_scatter", "all_to_all") and f < 0.999:
        return max(1, round(1 / (1 - f)))
    return None


def explain_nccl_tests(text: str, collective: str | None = None, *, expected_busbw: float | None = None,
                       ranks: int | None = None) -> Explanation:
    """Explain nccl-tests output (module doc).

    Args:
        text: the output (:func:`parse_nccl_tests`).
        collective: when the text does not name it (e.g. ``"all_reduce"``).
        expected_busbw: the busbw (GB/s) the hardware should reach (e.g. NVLink's, or the NICs'):
            a plateau below 80 % of it is flagged.
        ranks: the number of ranks, when the text has no ``Rank`` lines.

    Returns:
        :class:`Explanation` (``str()`` gives the whole explanation; ``.figure()`` the plot).

    Raises:
        NcclTestsFormatError: as :func:`parse_nccl_tests`; also when neither the text nor
            ``collective`` says which collective ran.
        ValueError / TypeError: ``ranks`` not an int from 1, ``expected_busbw`` not a positive finite number.
    """
    if ranks is not None:  # -3 gave "n = -3 ranks", 0 fell back to the text's count silently
        check_int("ranks", ranks, 1, 1 << 20, what=_("ranks of the run"))
    if expected_busbw is not None:
        check_real("expected_busbw", expected_busbw, 1e-6, 1e6, what="GB/s")
    run = parse_nccl_tests(text, collective)
    coll = run.collective
    if coll is None:
        raise NcclTestsFormatError(_("the text does not say which collective ran (no '..._perf' line): pass "
                                     "collective='all_reduce' (or all_gather, reduce_scatter, broadcast, reduce, "
                                     "alltoall, sendrecv)"))
    n = ranks or run.ranks or _infer_ranks(run, coll)
    factor = busbw_factor(coll, n) if n else None
    rows = [r for r in run.rows if r.size > 0]
    alpha = beta = None
    if len(rows) >= 2:
        s = np.array([r.size for r in rows], dtype=float)
        t = np.array([r.out_of_place.time_us for r in rows], dtype=float)
        w = 1 / np.maximum(t, 1e-9)  # relative errors: small and large sizes weigh alike
        A = np.stack([np.ones_like(s), s], axis=1) * w[:, None]
        coef, *_rest = np.linalg.lstsq(A, t * w, rcond=None)
        alpha, beta = float(max(coef[0], 0.0)), float(coef[1]) if coef[1] > 0 else None
    best = max((r.out_of_place.busbw for r in rows), default=0.0)
    ex = Explanation(run, coll, n, factor, alpha, beta, best, expected_busbw)
    _flag(ex)
    return ex


def _flag(ex: Explanation) -> None:
    run, rows = ex.run, [r for r in ex.run.rows if r.size > 0]
    # wrong results
    if run.old_format:
        bad = [r for r in run.rows if (r.out_of_place.wrong or 0) > 1e-3 or (r.in_place and (r.in_place.wrong or 0) > 1e-3)]
        if bad:
            ex.flags.append(_("the error column exceeds 1e-3 at {sizes}: results differ from the expected ones by more "
                              "than float rounding").format(sizes=", ".join(format_bytes(r.size) for r in bad[:6])))
    else:
        bad = [r for r in run.rows if (r.out_of_place.wrong or 0) > 0 or (r.in_place and (r.in_place.wrong or 0) > 0)]
        if bad:
            ex.flags.append(_("WRONG RESULTS: #wrong is not 0 at {sizes} (line {lines}): the collective returned "
                              "wrong data, so its speed means nothing; check the GPUs, the driver, NCCL_P2P/NCCL_IB "
                              "settings").format(sizes=", ".join(format_bytes(r.size) for r in bad[:6]),
                                                 lines=", ".join(str(r.line) for r in bad[:6])))
    if run.out_of_bounds:
        ex.flags.append(_("the footer reports {n} out-of-bounds values (FAILED)").format(n=run.out_of_bounds))
    if all(r.out_of_place.wrong is None for r in run.rows):
        ex.notes.append(_("#wrong is N/A: the run did not check its results (-c 0)"))
    # latency floor
    small = [r for r in rows if r.size <= 8192]
    if small and ex.alpha_us is not None:
        floor = min(r.out_of_place.time_us for r in small)
        ex.notes.append(_("latency floor: the smallest sizes take {t:.1f} us whatever their size: that is α, the cost of "
                          "a call (launch, synchronisation, one network round trip between nodes)").format(t=floor))
        many = len(run.hosts) > 1
        limit = 100.0 if many else 50.0
        if floor > limit:
            ex.flags.append(_("a high latency floor: {t:.0f} us at the smallest sizes (NCCL's own model prices a small "
                              "call at about 5-40 us; tuning.cc): look for a slow path (no GPUDirect, TCP instead of "
                              "IB, CPU-bound proxy threads)").format(t=floor))
    # plateau
    if len(rows) >= 3:
        tail = [r.out_of_place.busbw for r in rows[-3:]]
        plateau = max(tail)
        if plateau > 0 and (max(tail) - min(tail)) / plateau < 0.08:
            ex.notes.append(_("busbw reaches a plateau of {bw:.2f} GB/s at the largest sizes: the bottleneck link's "
                              "rate").format(bw=plateau))
        if ex.expected_busbw and plateau < 0.8 * ex.expected_busbw:
            ex.flags.append(_("a plateau below the link rate: busbw levels off at {bw:.2f} GB/s, {pct:.0f}% of the "
                              "{exp:.2f} GB/s expected").format(bw=plateau, pct=100 * plateau / ex.expected_busbw,
                                                                exp=ex.expected_busbw))
    # dips below the α-β line (an algorithm or protocol switch, or noise)
    if ex.alpha_us is not None and ex.beta_us_per_byte:
        for r in rows:
            fit = r.size / (ex.alpha_us + ex.beta_us_per_byte * r.size) / 1e3
            if r.out_of_place.algbw >= 0.05 and r.out_of_place.algbw < 0.6 * fit:
                ex.flags.append(_("a dip at {size}: algbw {bw:.2f} GB/s where the α-β line gives {fit:.2f}: often NCCL "
                                  "switching algorithm or protocol there (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING prints "
                                  "its choice per call), or another job on the same links").format(
                                      size=format_bytes(r.size), bw=r.out_of_place.algbw, fit=fit))
    # in-place far from out-of-place
    big = [r for r in rows if r.in_place is not None and r.size >= (1 << 20)]
    far = [r for r in big if r.in_place is not None and r.in_place.busbw > 0 and abs(r.in_place.busbw - r.out_of_place.busbw)
           / max(r.in_place.busbw, r.out_of_place.busbw) > 0.2]
    if far:
        ex.flags.append(_("in-place and out-of-place differ by more than 20% at {sizes}: the same collective on the "
                          "same sizes should not; suspect noise (other jobs) or memory placement").format(
                              sizes=", ".join(format_bytes(r.size) for r in far[:4])))
    # the footer's average
    if run.avg_busbw is not None and ex.best_busbw > 0 and run.avg_busbw < 0.7 * ex.best_busbw:
        ex.notes.append(_("'Avg bus bandwidth' ({avg:.2f}) is the mean over every size, small ones included, not a "
                          "peak: the best busbw measured is {best:.2f} GB/s").format(avg=run.avg_busbw,
                                                                                 best=ex.best_busbw))
    # consistency of the printed busbw with the formula
    if ex.factor is not None:
        off = [r for r in rows if r.out_of_place.algbw >= 0.1 and
               abs(r.out_of_place.busbw - r.out_of_place.algbw * ex.factor) > 0.02 * r.out_of_place.busbw + 0.011]
        if off:
            ex.notes.append(_("busbw is not algbw x {f:.3f} at {n} size(s): the rank count ({ranks}) or the "
                              "collective may not be what this run used").format(f=ex.factor, n=len(off),
                                                                                 ranks=ex.ranks))
    if ex.ranks and len(run.hosts) > 1 and ex.peak_busbw:
        ex.notes.append(_("{n} ranks on {h} hosts: busbw counts every link of the algorithm, most of them inside a node, "
                          "so it can exceed one NIC's rate (collnb.labs.cluster.nccl.explain_busbw_over_nic)").format(
                              n=ex.ranks, h=len(run.hosts)))
    if math.isfinite(ex.best_busbw) and ex.best_busbw == 0:
        ex.flags.append(_("busbw is 0 everywhere: the sizes are too small for 2 decimals, or the run failed"))
