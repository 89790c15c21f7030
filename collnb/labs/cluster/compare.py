"""Algorithms side by side on a :class:`~collnb.labs.cluster.Cluster`: measured beside the two-tier
model's prediction, values checked against the backend's own collective, and the sizes where one
algorithm overtakes another.

:func:`compare_algorithms` runs every algorithm (the flat ones of :data:`collnb.ALGORITHMS`, the
tiered ones of :data:`collnb.algorithms.TIERED_ALGORITHMS`, and ``"builtin"``: gloo's own
collective) at every size on the cluster's real ranks in one launch: each call after a barrier,
the slowest rank's time, the median over ``repeats`` after a warm-up, and each result compared
with the built-in collective's on the same input. A modelled cluster (:attr:`Cluster.mode`) still
runs them, on this machine's loopback, for the values; its times are the model's, labelled
predicted.

**Crossovers.** The model's time of an algorithm is a sum of rounds that are straight lines in the
size, so two algorithms cross where their difference changes sign: :func:`predicted_crossovers`
finds each such size on a fine grid (64 points per doubling) and refines it by bisection; the
measured crossovers are where the measured order flips between two measured sizes, interpolated
on log size.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, TYPE_CHECKING, TypedDict

from ...algorithms import ALGORITHMS, TIERED_ALGORITHMS, busbw
from ...i18n import _
from ...units import format_bytes
from ...vocabulary import check_choice, check_int
from .hierarchical import LaunchingCluster, TierModel, measure_link

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ...algorithms import RankResult, Trace

__all__ = ["AlgorithmTiming", "Comparison", "compare_algorithms", "predicted_crossovers", "measured_crossovers",
           "algorithms_for_cluster", "PRIMITIVES"]

#: The primitives with tiered algorithms, compared here.
PRIMITIVES = tuple(TIERED_ALGORITHMS)


def algorithms_for_cluster(primitive: str) -> tuple[str, ...]:
    """``"builtin"``, the flat algorithms and the tiered ones of ``primitive``."""
    check_choice("primitive", primitive, PRIMITIVES)
    return ("builtin",) + ALGORITHMS[primitive] + TIERED_ALGORITHMS[primitive]


class RunsAlgorithms(LaunchingCluster, Protocol):
    """What the comparisons and runs here need of a cluster (a :class:`~.clusters.Cluster` or a
    :class:`~.virtual.VirtualCluster`; a protocol: :mod:`.clusters` is above this module)."""

    @property
    def world_size(self) -> int: ...


#: The most bytes per rank a comparison or a run moves (as :data:`collnb.labs.bench.MAX_BYTES`): every rank
#: allocates its buffers at once on this one machine.
MAX_NBYTES = 1 << 30
#: One case of :func:`compare_algorithms`: ``(primitive, algorithm, nbytes per rank)``.
TimedCase = tuple[str, str, int]
#: A crossover: ``(faster below, faster above, nbytes)``.
Crossover = tuple[str, str, float]


class _RankTimes(TypedDict):
    """What every rank of :func:`_rank_time` answers: per case the slowest rank's seconds of each
    timed call, the ranks whose result differed from the built-in's, and the bytes per rank it ran."""

    times: list[list[float]]
    wrong: list[float]
    sizes: list[int]


def _rank_time(rank: int, world_size: int, ranks_per_node: int, cases: list[TimedCase], repeats: int) -> _RankTimes:
    """Rank side of :func:`compare_algorithms`: every ``(primitive, algorithm, nbytes)`` case timed
    ``repeats`` times after a warm-up, each between barriers; the slowest rank per call (MAX
    all_reduce of the times); whether every result equalled the built-in collective's."""
    import torch
    import torch.distributed as dist

    from ...algorithms import builtin_result, cached_schedule, execute, start_buffer
    from ...collectives import teaching_value

    times = torch.zeros(len(cases), repeats, dtype=torch.float64)
    wrong = torch.zeros(len(cases))
    sizes: list[int] = []
    for i, (primitive, algorithm, nbytes) in enumerate(cases):
        sched = None if algorithm == "builtin" else cached_schedule(primitive, algorithm, world_size,
                                                                     ranks_per_node=ranks_per_node)
        C = world_size if sched is None else sched.n_chunks
        per = max(1, nbytes // (4 * C))
        sizes.append(per * C * 4)
        vals = [teaching_value(rank, c, world_size) % 97 if (primitive != "all_gather" or c == rank) else 0
                for c in range(C)]
        inp = torch.tensor(vals, dtype=torch.float32).repeat_interleave(per)
        ref = builtin_result(primitive, rank, world_size, inp, "sum", 0, C)
        bounds = [c * per for c in range(C + 1)]
        for k in range(repeats + 1):  # k == 0: warm-up, not kept
            work = None if sched is None else start_buffer(sched, rank, inp, bounds)
            dist.barrier()
            t0 = time.perf_counter()
            if sched is None or work is None:  # work is None exactly when sched is
                out = builtin_result(primitive, rank, world_size, inp, "sum", 0, C)
            else:
                execute(sched, work, send_from=inp if primitive == "all_to_all" else None, bounds=bounds)
                out = work
            dt = time.perf_counter() - t0
            if k:
                times[i, k - 1] = dt
        if sched is not None:
            for c in range(C):
                if sched.defined[rank][c] and not torch.equal(out[bounds[c]:bounds[c + 1]], ref[bounds[c]:bounds[c + 1]]):
                    wrong[i] += 1
                    break
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(wrong)
    return _RankTimes(times=times.tolist(), wrong=wrong.tolist(), sizes=sizes)


@dataclass(frozen=True)
class AlgorithmTiming:
    """One algorithm at one size: ``seconds`` (median of the slowest rank; ``None`` on a modelled
    cluster), ``predicted_s`` (the two-tier model's), ``correct`` (every rank's result equalled
    the built-in collective's; the built-in is the reference), ``nbytes`` per rank."""

    primitive: str
    algorithm: str
    nbytes: int
    seconds: float | None
    predicted_s: float
    correct: bool
    world_size: int

    @property
    def shown_s(self) -> float:
        """The time to show: measured when there is one, else predicted."""
        return self.seconds if self.seconds is not None else self.predicted_s

    @property
    def busbw(self) -> float:
        """Bus bandwidth of :attr:`shown_s` in GB/s (nccl-tests' PERFORMANCE.md)."""
        return busbw(self.primitive, self.nbytes, self.shown_s, self.world_size)

    @property
    def ratio(self) -> float | None:
        """Predicted over measured (``None`` when nothing was measured)."""
        return None if self.seconds is None else self.predicted_s / self.seconds


@dataclass
class Comparison:
    """:func:`compare_algorithms`'s answer: ``rows`` (:class:`AlgorithmTiming`), the ``model``,
    ``timings`` (``"measured"`` or ``"predicted"``), the cluster's description, and the crossover
    sizes (lists of ``(faster below, faster above, nbytes)``)."""

    primitive: str
    rows: list[AlgorithmTiming]
    model: TierModel
    timings: str
    cluster: str
    predicted_crossovers: list[Crossover] = field(default_factory=list)
    measured_crossovers: list[Crossover] = field(default_factory=list)

    @property
    def algorithms(self) -> list[str]:
        return list(dict.fromkeys(r.algorithm for r in self.rows))

    @property
    def sizes(self) -> list[int]:
        return sorted({r.nbytes for r in self.rows})

    def row(self, algorithm: str, nbytes: int) -> AlgorithmTiming:
        """The row of ``algorithm`` at the size nearest ``nbytes``."""
        rows = [r for r in self.rows if r.algorithm == algorithm]
        if not rows:
            raise KeyError(algorithm)
        return min(rows, key=lambda r: abs(math.log(r.nbytes) - math.log(max(1, nbytes))))

    def table(self) -> str:
        """A text table: per size and algorithm the measured and predicted time, busbw, their
        ratio and the values' check; then the crossovers."""
        t = self.timings
        head = _("{primitive} on {cluster}").format(primitive=self.primitive, cluster=self.cluster)
        cols = (_("size"), _("algorithm"), _("measured") if t == "measured" else "", _("predicted"),
                _("busbw GB/s"), _("model/measured") if t == "measured" else "", _("values"))
        lines = [head, "  ".join(f"{c:>18}" if i > 1 else f"{c:<20}" for i, c in enumerate(cols) if c or i < 2)]
        for r in sorted(self.rows, key=lambda r: (r.nbytes, r.shown_s)):
            cells = [f"{format_bytes(r.nbytes):<20}", f"{r.algorithm:<20}"]
            if t == "measured":
                cells.append(f"{_fmt_s(r.seconds):>18}")
            cells += [f"{_fmt_s(r.predicted_s):>18}", f"{r.busbw:>18.3f}"]
            if t == "measured":
                cells.append(f"{r.ratio:>18.2f}" if r.ratio is not None else f"{'-':>18}")
            cells.append(f"{_('exact') if r.correct else _('WRONG'):>18}")
            lines.append("  ".join(cells))
        for name, crosses in ((_("predicted"), self.predicted_crossovers), (_("measured"), self.measured_crossovers)):
            if crosses:
                lines.append(_("crossovers ({which}):").format(which=name) + " " + "; ".join(
                    _("{b} overtakes {a} at {size}").format(a=a, b=b, size=format_bytes(n)) for a, b, n in crosses))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def figure(self) -> Figure:
        """A matplotlib figure: time per size for every algorithm, measured (points and solid
        lines; on a modelled cluster none) and predicted (dashed), log-log, crossovers marked."""
        from .pictures import comparison_figure
        return comparison_figure(self)


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def predicted_crossovers(model: TierModel, primitive: str, algorithms: Iterable[str], lo: float,
                         hi: float) -> list[Crossover]:
    """``[(a, b, nbytes), ...]``: sizes in ``[lo, hi]`` bytes where ``b`` becomes faster than ``a``
    under ``model`` (module doc), for every pair of ``algorithms``, sorted by size."""
    names = list(algorithms)
    if hi <= lo:
        return []
    n = max(2, int(64 * math.log2(hi / lo)))
    grid = [lo * (hi / lo) ** (i / n) for i in range(n + 1)]
    times = {a: [model.predict(primitive, a, m) for m in grid] for a in names}
    out: list[Crossover] = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if b == "builtin" or a == "builtin":
                continue  # the built-in is priced as the ring: no crossing of its own
            d = [ta - tb for ta, tb in zip(times[a], times[b])]
            for k in range(n):
                if d[k] == 0 or (d[k] > 0) == (d[k + 1] > 0):
                    continue
                x0, x1 = grid[k], grid[k + 1]
                for _step in range(40):
                    mid = math.sqrt(x0 * x1)
                    dm = model.predict(primitive, a, mid) - model.predict(primitive, b, mid)
                    if (dm > 0) == (d[k] > 0):
                        x0 = mid
                    else:
                        x1 = mid
                slower_first = a if d[k] < 0 else b  # faster below the crossing
                out.append((slower_first, b if slower_first == a else a, math.sqrt(x0 * x1)))
    return sorted(out, key=lambda c: c[2])


def measured_crossovers(rows: Iterable[AlgorithmTiming]) -> list[Crossover]:
    """``[(a, b, nbytes), ...]`` where the measured order of two algorithms flips between two
    measured sizes (interpolated on log size): ``a`` is faster below, ``b`` above. A pair whose
    order flips more than once over the sizes is left out: that is noise, not a crossover."""
    by: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.seconds is not None:
            by.setdefault(r.algorithm, {})[r.nbytes] = r.seconds
    algs = list(by)
    out: list[Crossover] = []
    for i, a in enumerate(algs):
        for b in algs[i + 1:]:
            sizes = sorted(set(by[a]) & set(by[b]))
            signs = [by[a][x] < by[b][x] for x in sizes]
            if sum(1 for u, v in zip(signs, signs[1:]) if u != v) != 1:
                continue
            for s0, s1 in zip(sizes, sizes[1:]):
                d0 = math.log(by[a][s0] / by[b][s0])
                d1 = math.log(by[a][s1] / by[b][s1])
                if d0 == 0 or (d0 > 0) == (d1 > 0):
                    continue
                f = d0 / (d0 - d1)
                size = math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0)))
                first = a if d0 < 0 else b
                out.append((first, b if first == a else a, size))
    return sorted(out, key=lambda c: c[2])


def compare_algorithms(cluster: RunsAlgorithms, primitive: str = "all_reduce", algorithms: Iterable[str] | None = None,
                       sizes: Iterable[int] = (64 << 10, 1 << 20, 16 << 20), repeats: int = 3, model: TierModel | None = None,
                       timeout: float = 600.0) -> Comparison:
    """Run ``algorithms`` of ``primitive`` at each of ``sizes`` (bytes per rank, float32, as
    nccl-tests counts them) on ``cluster``'s ranks (module doc).

    Args:
        cluster: a :class:`~collnb.labs.cluster.Cluster` (or a :class:`VirtualCluster`, emulated).
        primitive: one of :data:`PRIMITIVES`.
        algorithms: names from :func:`algorithms_for_cluster` (default: all of them).
        sizes: bytes per rank, each >= 4 * the buffer's chunks (rounded down to whole float32 chunks).
        repeats: timed calls per case (>= 1), after one warm-up.
        model: the :class:`TierModel` to predict with (default: ``cluster.model()``).
        timeout: seconds for the whole launch.

    Returns:
        :class:`Comparison`.

    Raises:
        ValueError / TypeError: an unknown primitive or algorithm, bad sizes or repeats. What
            ``cluster.launch`` raises for a failing rank or a timeout.
    """
    valid = algorithms_for_cluster(primitive)
    algorithms = list(dict.fromkeys(valid if algorithms is None else algorithms))  # each once, in order
    if not algorithms:
        raise ValueError(_("algorithms is empty: give at least one of {choices}, or None for all").format(
            choices=", ".join(valid)))
    for a in algorithms:
        check_choice(_("algorithm for {primitive}").format(primitive=primitive), a, valid)
    check_int("repeats", repeats, 1)
    sizes = sorted({check_int("nbytes", s, 4 * 2 * cluster.world_size, MAX_NBYTES, what=_("bytes per rank"))
                    for s in sizes})
    if not sizes:
        raise ValueError(_("sizes is empty: give at least one size in bytes per rank, e.g. sizes=(64 << 10, 16 << 20)"))
    if model is None:
        model = cluster.model() if hasattr(cluster, "model") else \
            TierModel.from_link(cluster, measure_link(cluster, verbose=False))
    cases = [(primitive, a, s) for s in sizes for a in algorithms]
    out: _RankTimes = cluster.launch(_rank_time, (cluster.ranks_per_node, cases, repeats), timeout=timeout)[0]
    predicted_only = getattr(cluster, "mode", "emulated") == "modelled"
    rows: list[AlgorithmTiming] = []
    for i, (_p, a, _s) in enumerate(cases):
        nbytes = out["sizes"][i]
        rows.append(AlgorithmTiming(primitive, a, nbytes, None if predicted_only else statistics.median(out["times"][i]),
                                    model.predict(primitive, a, nbytes), not out["wrong"][i], cluster.world_size))
    mode = getattr(cluster, "mode", "emulated")
    describe = _("{nodes}x{L}, inter {inter} ({mode})").format(
        nodes=cluster.nodes, L=cluster.ranks_per_node, inter=getattr(cluster, "inter", ""),
        mode={"emulated": _("emulated"), "modelled": _("modelled"), "real": _("real")}.get(mode, mode))
    lo, hi = min(sizes), max(sizes)
    return Comparison(primitive, rows, model, "predicted" if predicted_only else "measured", describe,
                      predicted_crossovers(model, primitive, algorithms, lo, hi), measured_crossovers(rows))


def run_algorithm(cluster: RunsAlgorithms, primitive: str, algorithm: str, nbytes: int | None = None, *, chunk_size: int = 1,
                  snapshots: bool = True, compare: bool = True, timeout: float = 300.0) -> Trace:
    """Run one algorithm on ``cluster``'s ranks and return its :class:`collnb.Trace` (every round's
    transfers, each rank's buffer after it with ``snapshots``, the built-in collective's result with
    ``compare``, and each round's measured seconds: the slowest rank's), with the node map in
    ``trace.meta["ranks_per_node"]`` so that the replay colours every transfer by its tier.

    Args:
        cluster: a :class:`~collnb.labs.cluster.Cluster` (any mode: a modelled cluster's rounds ran
            on loopback, so their seconds are not the tiers'; :func:`collnb.labs.cluster.replay_tiers`
            shows the model's then).
        primitive, algorithm: as :func:`collnb.run_algorithm`, tiered algorithms included.
        nbytes: bytes per rank (float32): sets ``chunk_size`` to fill it; ``None`` keeps ``chunk_size``.
        chunk_size: elements per chunk (the teaching values, one per chunk, by default).

    Raises:
        As :func:`collnb.run_algorithm` and ``cluster.launch``.

    Note:
        The ranks run the algorithm once untimed, then once timed (as nccl-tests runs warm-up
        iterations before it times: ``-w``). Without it the first rounds over the shaped links
        measured far above the model: 75-260 ms a round where 5 ms is the link's time (1 MiB
        all_reduce, ring, 2 nodes x 2 ranks at 400 Mbit/s; the next run 5-13 ms), as TCP's
        congestion window first grows on a connection. ``trace.wall_seconds`` includes both passes.
    """
    from ...algorithms import make_trace, prepare_case, rank_run_cases, schedule

    L = cluster.ranks_per_node
    if nbytes is not None:
        C = schedule(primitive, algorithm, cluster.world_size, ranks_per_node=L).n_chunks
        chunk_size = max(1, check_int("nbytes", nbytes, 4, MAX_NBYTES, what=_("bytes per rank")) // (4 * C))
    case = prepare_case(primitive, algorithm, cluster.world_size, "float32", None, None, chunk_size, None, None,
                        snapshots, compare, "gloo", validate=False, ranks_per_node=L)
    ship = {k: v for k, v in case.items() if k not in ("dtype", "chunk_size")}
    warm_up = {**ship, "record": False, "compare": False}  # an untimed pass first (see Note)
    t0 = time.perf_counter()
    results: list[list[RankResult]] = cluster.launch(rank_run_cases, ([warm_up, ship],), timeout=timeout)
    wall = time.perf_counter() - t0
    trace = make_trace(case, [results[r][1] for r in range(cluster.world_size)], "gloo", wall)
    trace.meta["cluster"] = {"nodes": cluster.nodes, "ranks_per_node": L, "mode": getattr(cluster, "mode", "emulated"),
                             "inter": str(getattr(cluster, "inter", "")), "intra": str(getattr(cluster, "intra", ""))}
    return trace
