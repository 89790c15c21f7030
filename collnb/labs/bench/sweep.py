"""The caller side of the bandwidth lab: :func:`bench` checks everything, launches the ranks once per
(world size, size) and turns their times into rows, timed collnb's way or nccl-tests' way
(:data:`TIMINGS`); :func:`debug_cost` measures what ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` costs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Never, TypedDict, overload

from ...i18n import _
from ...ranks import launch_planned, plan_launch
from ...units import format_bytes
from ...vocabulary import check_choice, check_int
from .measuring import Job, RankTimes, rank_bench
from .references import MIN_REPETITIONS, ReferenceSampler
from .rows import measured_row, to_table
from .choices import Row, bench_dtype, blocked, check_algorithms, check_dtype, counts, parse_sizes, plan_world_sizes

if TYPE_CHECKING:
    import pandas as pd
    from tqdm.auto import tqdm


#: How :func:`bench` times (``timing=``), the first the default:
#:
#: * ``"collnb"``: every iteration timed on its own, between a barrier before it and its own end on
#:   every rank; the slowest rank's time per iteration; the median (min, max) over iterations; every
#:   iteration's result checked. Why: on a shared, loaded machine one preempted rank or iteration
#:   shows as a spread (min, max) instead of moving the reported time, and a wrong answer in any
#:   iteration is caught.
#: * ``"nccl-tests"``: as NVIDIA nccl-tests' ``BenchTime`` (``src/common.cu``): one barrier, then the
#:   ``iters`` calls back to back (no barrier, reset or check between them) and one
#:   synchronisation; each rank's elapsed time / ``iters``; the mean over the ranks (nccl-tests'
#:   default ``-a 1``); the result checked in a separate untimed call. Why: consecutive calls may
#:   overlap (a rank starts the next call while a slower one finishes), so it measures throughput
#:   of a stream of collectives, the number GPU papers and nccl-tests' tables quote.
TIMINGS = ("collnb", "nccl-tests")


class DebugRow(Row):
    """A :func:`debug_cost` row: a bench row and whether ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` was on."""

    debug: bool


class DebugCost(TypedDict):
    """:func:`debug_cost`'s answer (its docstring)."""

    off: DebugRow
    on: DebugRow
    ratio: float
    extra_s: float


def _progress(total: int, enabled: bool, desc: str) -> tqdm[Never] | None:
    """A progress bar of ``total`` runs (updated by hand: it iterates over nothing, hence ``Never``),
    or ``None`` when not ``enabled``."""
    if not enabled:
        return None
    from tqdm.auto import tqdm  # the notebook widget in Jupyter, a plain bar in a terminal
    return tqdm(total=total, desc=desc, unit="run", leave=True)


@overload
def bench(primitive: str = ..., world_sizes: int | Sequence[int] = ..., sizes: object = ..., dtype: object = ..., *,
          iters: int = ..., warmup: int = ..., algorithms: str | Sequence[str] = ..., backend: str = ...,
          references: bool = ..., progress: bool = ..., timeout: float = ..., as_frame: Literal[False],
          timing: str = ...) -> list[Row]: ...
@overload
def bench(primitive: str = ..., world_sizes: int | Sequence[int] = ..., sizes: object = ..., dtype: object = ..., *,
          iters: int = ..., warmup: int = ..., algorithms: str | Sequence[str] = ..., backend: str = ...,
          references: bool = ..., progress: bool = ..., timeout: float = ..., as_frame: bool | None = ...,
          timing: str = ...) -> list[Row] | pd.DataFrame: ...


def bench(primitive: str = "all_reduce", world_sizes: int | Sequence[int] = (2, 4), sizes: object = "1K:64M",
          dtype: object = "float32", *, iters: int = 20, warmup: int = 5, algorithms: str | Sequence[str] = ("builtin",),
          backend: str = "gloo", references: bool = True, progress: bool = True, timeout: float = 600.0,
          as_frame: bool | None = None, timing: str = "collnb") -> list[Row] | pd.DataFrame:
    """Measure ``primitive`` on real ranks at every world size, size and algorithm (module doc).

    Args:
        primitive: one of :data:`PRIMITIVES`.
        world_sizes: an int or a sequence of ints (1..16; NCCL: at most the GPU count).
        sizes: bytes per rank (nccl-tests' "size", module doc): ``"1K:64M"`` (every power of two
            between), one size, or a list. Blocked primitives (all_gather, reduce_scatter,
            scatter, gather, all_to_all) round down to a multiple of ``world_size`` elements.
        dtype: ``torch.dtype`` or name; one the backend accepts (detected on real ranks).
        iters: timed iterations per measurement (>= 1); warmup: untimed ones before (>= 0).
        algorithms: ``"builtin"`` (the backend's collective), names from
            :func:`collnb.algorithms.algorithms_for`, or ``"all"``. They take turns within
            every iteration.
        backend: ``"gloo"`` or ``"nccl"`` (CUDA-event timing; refused with the reason where
            there is no GPU -- never a silent fallback to gloo).
        references: also measure ``memcpy``, ``tcp_loopback`` and ``local_reduce`` at each size.
        progress: a tqdm progress bar (the notebook widget in Jupyter, plain text in a terminal).
        timeout: seconds each launch may take.
        as_frame: ``None``: a DataFrame if pandas is installed, else a list of dicts.
        timing: ``"collnb"`` (default) or ``"nccl-tests"``: how the iterations are timed and
            summed up (:data:`TIMINGS`; ``time_s``, ``time_min_s`` and ``time_max_s`` mean what
            that method says; the CLI writes the method into a JSON file's note).

    Returns:
        The rows (:data:`COLUMNS`), collectives first, in (world size, size, algorithm) order,
        then the references.

    Raises:
        TypeError: an argument of the wrong type (the words of :mod:`collnb.vocabulary`).
        ValueError: unknown primitive/algorithm/dtype, bad sizes, counts or world sizes, a
            size smaller than one element per rank.
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA).
        collnb.LaunchError: the ranks failed.
    """
    algs = check_algorithms(primitive, algorithms)
    sizes_ = parse_sizes(sizes)
    timing_ = _timing(timing)
    check_int("iters", iters, 1, what="timed iterations per measurement")
    check_int("warmup", warmup, 0, what="untimed iterations before them")
    # each world size's launch checked once, here: every launch at it runs as planned
    world_sizes_, plans = plan_world_sizes(world_sizes, backend, _options(timeout, debug=False), where="collnb.bench")
    dt = bench_dtype(dtype)
    dname = str(dt).replace("torch.", "")
    check_dtype(primitive, algs, dt, backend, plans[world_sizes_[0]])
    esize = dt.itemsize
    for ws in world_sizes_:
        # one element per rank at least: a block per rank, or a chunk per rank for the send/recv algorithms
        need = esize * ws if (blocked(primitive) or any(a != "builtin" for a in algs)) else esize
        if sizes_[0] < need:
            raise ValueError(_("{n} B is too small for {primitive} on {dtype} at world size {world_size}: it needs "
                               "at least {need} B ({elements} elements, one per rank); start the sweep there").format(
                                   n=sizes_[0], primitive=primitive, dtype=dname, world_size=ws, need=need,
                                   elements=need // esize))
    jobs = [(ws, n) for ws in world_sizes_ for n in sizes_]
    bar = _progress(len(jobs) * len(algs) + (len(sizes_) if references else 0), progress, f"bench {primitive}")
    rows: list[Row] = []
    # the references are sampled right after each launch at their size, and once more at the end
    # (references.py: interleaved with the collective, the median of the fastest half)
    refs = ReferenceSampler(dtype=dt, reps=max(3, MIN_REPETITIONS // (len(world_sizes_) + 1)),
                            warmup=min(warmup, 1)) if references else None
    try:
        for ws, nbytes in jobs:
            count, block = counts(primitive, nbytes, ws, esize)
            job = Job(primitive=primitive, algorithms=list(algs), dtype=dname, count=count, block=block, iters=iters,
                      warmup=warmup, timing=timing_)
            if bar is not None:
                bar.set_postfix_str(f"ws {ws}, {format_bytes(nbytes)}, {'/'.join(algs)}")
            res: list[dict[str, RankTimes]] = launch_planned(plans[ws], rank_bench, (job,))
            actual = count * esize
            for alg in algs:
                rows.append(measured_row(primitive, alg, backend, ws, dname, actual, [res[r][alg] for r in range(ws)], iters,
                                         timing_))
                if not rows[-1]["ok"]:
                    first = next(res[r][alg]["bad"] for r in range(ws) if not res[r][alg]["ok"])
                    warnings.warn(f"{primitive}/{alg} at world size {ws}, {format_bytes(actual)}: the result differs "
                                  f"from the reference ({first}); the row has ok=False", RuntimeWarning, stacklevel=2)
            if refs is not None:
                refs.sample(nbytes)
            if bar is not None:
                bar.update(len(algs))
        if refs is not None:
            for nbytes in sizes_:
                if bar is not None:
                    bar.set_postfix_str(f"references, {format_bytes(nbytes)}")
                refs.sample(nbytes)
                if bar is not None:
                    bar.update(1)
            rows.extend(refs.rows(sizes_))
    finally:
        if bar is not None:
            bar.close()
    return to_table(rows, as_frame)


def _options(timeout: float, debug: bool) -> dict[str, object]:
    """The launch options of a measurement: ``timeout`` s for the launch, a quarter of it (at least
    60 s) for one collective, and ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` as ``debug`` says (off to measure)."""
    number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    # a timeout that is no number is refused by the plan's check, in its words
    return {"timeout": timeout, "debug": debug, "collective_timeout": max(60.0, timeout / 4) if number else 60.0}


def _timing(timing: object) -> Literal["collnb", "nccl-tests"]:
    """``timing`` checked: one of :data:`TIMINGS` (TypeError / ValueError with the words of
    :func:`collnb.vocabulary.check_choice`)."""
    return "nccl-tests" if check_choice("timing method", timing, TIMINGS) == "nccl-tests" else "collnb"


def debug_cost(primitive: str = "all_reduce", world_size: int = 2, nbytes: object = 1 << 10, dtype: object = "float32",
               *, algorithm: str = "builtin", iters: int = 20, warmup: int = 5, backend: str = "gloo",
               timeout: float = 600.0) -> DebugCost:
    """What ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (collnb's default for teaching, ``launch(debug=True)``)
    costs: the same measurement with the checks off and on.

    Returns:
        dict ``off`` and ``on`` (rows as :func:`bench` makes them, ``debug`` column added),
        ``ratio`` (``on.time_s / off.time_s``) and ``extra_s`` (``on.time_s - off.time_s``).

    Raises:
        as :func:`bench`.
    """
    algs = check_algorithms(primitive, algorithm)
    size = parse_sizes([nbytes])[0]
    check_int("iters", iters, 1, what="timed iterations per measurement")
    check_int("warmup", warmup, 0, what="untimed iterations before them")
    # the two launches (DETAIL off, on) checked once each, here
    (ws,), plans = plan_world_sizes(world_size, backend, _options(timeout, debug=False), where="collnb.debug_cost")
    planned = {False: plans[ws], True: plan_launch(ws, backend, _options(timeout, debug=True), where="collnb.debug_cost")}
    dt = bench_dtype(dtype)
    check_dtype(primitive, algs, dt, backend, planned[False])
    count, block = counts(primitive, size, ws, dt.itemsize)
    if count < ws:
        raise ValueError(_("{n} B is too small for {primitive} at world size {world_size}").format(
            n=size, primitive=primitive, world_size=ws))
    dname = str(dt).replace("torch.", "")
    job = Job(primitive=primitive, algorithms=[algs[0]], dtype=dname, count=count, block=block, iters=iters,
              warmup=warmup)
    rows = {}
    for debug in (False, True):
        res: list[dict[str, RankTimes]] = launch_planned(planned[debug], rank_bench, (job,))
        row = measured_row(primitive, algs[0], backend, ws, dname, count * dt.itemsize,
                           [res[r][algs[0]] for r in range(ws)], iters)
        rows[debug] = DebugRow(**row, debug=debug)
    off, on = rows[False], rows[True]
    return DebugCost(off=off, on=on, ratio=on["time_s"] / off["time_s"], extra_s=on["time_s"] - off["time_s"])
