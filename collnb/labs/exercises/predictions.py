"""Checks of predictions: the learner writes the values a primitive or an algorithm will leave on
each rank (or a time from the fitted cost model), and the check runs it on real ranks."""

from __future__ import annotations

from typing import Callable

import torch

from ...collectives import run
from .framework import NOT_ANSWERED, _fail, _passed, _prediction, _rows, _table


# ----------------------------------------------------------------------------------------------
# Predictions: the learner writes values; the check runs the primitive on real ranks


def check_scatter_prediction(prediction, solution=None) -> None:
    """Check the scatter prediction of notebook 02 (world size 4, ``src=1``, teaching inputs)
    against ``collnb.run("scatter", world_size=4, root=1)`` on real ranks.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    real = [[float(v) for v in t.tolist()] for t in run("scatter", world_size=4, root=1).after]
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="rank 1 is src; its scatter_list holds 10*1 + c in chunk c, and rank j receives chunk j.",
                passed="right: rank j received chunk j of rank 1's scatter_list")


def check_reduce_prediction(prediction, solution=None, *, world_size: int = 5, dst: int = 2) -> None:
    """Check the MAX-reduce prediction of notebook 04 (teaching inputs, ``world_size`` ranks, ``dst``;
    by default 5 and 2, a case the notebook does not draw before asking): ``None`` for every rank
    whose output is undefined, the values on ``dst``.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    result = run("reduce", world_size=world_size, op="max", root=dst)
    real = [[float(v) for v in t.tolist()] if d else None for t, d in zip(result.after, result.defined)]
    if prediction is not None and isinstance(prediction, list) and len(prediction) == world_size \
            and [p is None for p in prediction] != [r is None for r in real]:
        raise _fail(f"check which ranks are undefined: you predicted {prediction!r}.",
                    "after reduce only dst's tensor is defined; write None for every other rank.")
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="MAX over the ranks of 10*r + c is the largest rank's value in every chunk.",
                passed=f"right: dst={dst} holds the element-wise MAX (rank {world_size - 1}'s values); "
                       "every other rank is undefined")


def check_reduce_scatter_prediction(prediction, solution=None, *, world_size: int = 5) -> None:
    """Check the SUM reduce_scatter prediction of notebook 06 (teaching inputs, ``world_size``
    ranks; 5 by default, a size the notebook does not draw before asking).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    real = [[float(v) for v in t.tolist()] for t in run("reduce_scatter", world_size=world_size, op="sum").after]
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="rank j gets the sum over all ranks r of their chunk j (10*r + j): one column of the inputs.",
                passed="right: rank j holds the sum of everyone's chunk j")


def check_int8_prediction(prediction, solution=None, *, world_size: int = 6, value: int = 50) -> None:
    """Check the int8 SUM prediction of notebook 07: ``world_size`` ranks all_reduce int8 tensors
    holding ``value`` everywhere; the prediction is the single int every element ends with.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    result = run("all_reduce", world_size=world_size, dtype=torch.int8, inputs=lambda rank, chunk: value)
    values = sorted({int(v) for t in result.after for v in t.tolist()})
    real = values[0] if len(values) == 1 else values
    _prediction("prediction", prediction, solution, real, normalise=int,
                hint=f"{world_size} * {value} = {world_size * value} does not fit in int8 (-128..127); "
                     "subtract 256 until it does.",
                passed=f"right: every rank holds {real}, not {world_size * value}: int8 SUM wrapped around")


def check_all_to_all_prediction(prediction, solution=None, *, world_size: int = 3) -> None:
    """Check the all_to_all prediction of notebook 08 (teaching inputs, ``world_size`` ranks; 3 by
    default, a size the notebook does not draw before asking).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    real = [[float(v) for v in t.tolist()] for t in run("all_to_all", world_size=world_size).after]
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="rank i's output chunk j is rank j's input chunk i (10*j + i).",
                passed="right: after all_to_all, rank i holds chunk i of every rank: the transpose")


def check_ring_prediction(prediction, solution, trace) -> None:
    """Check the round-2 prediction of the algorithms notebook against ``trace`` (a 3-rank ring
    all_reduce :class:`collnb.Trace`): the buffers after round 2, one row per rank.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    real = [[float(v) for v in row] for row in trace.chunk_values(2).tolist()]
    if prediction is not None:
        try:
            answer = _rows(prediction)
        except Exception:  # noqa: BLE001
            answer = None
        if answer is not None and len(answer) == len(real):
            rows = [(r, answer[r], real[r], "✓" if answer[r] == real[r] else "✗") for r in range(len(real))]
            if answer != real:
                raise _fail("not quite.", "replay(ring3) and step to round 2: which chunk did each rank "
                            "receive, and from whom?", _table(rows, ("rank", "yours", "recorded", "")))
            print(_table(rows, ("rank", "yours", "recorded", "")))
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="give one list of three numbers per rank, e.g. [[a, b, c], [d, e, f], [g, h, i]].",
                passed="right: after round 2 rank r holds chunk r summed over all three ranks")


def check_time_prediction(prediction, solution, *, model_prediction: float, measure: Callable[[], float],
                          tolerance: float = 2.0, tries: int = 3) -> None:
    """Check the bandwidth notebook's exercise: a time, in seconds, predicted from the fitted α-β(-γ)
    model for a message size the sweep never measured.

    The prediction must equal the fitted model's own prediction within 1 % (so it came from the
    model, not from a stopwatch), and a fresh measurement on real ranks must lie within a factor of
    ``tolerance`` of it. A load spike can hit one measurement, so up to ``tries`` are taken before
    judging.

    Args:
        prediction: the learner's answer in seconds (``None`` while unanswered).
        solution: the stored solution in seconds (shown, labelled, while unanswered; never a ✓).
        model_prediction: seconds the fitted model predicts for that size (``FitResult.predict``).
        measure: a function that measures that size once on real ranks and returns seconds
            (median of its iterations); it is called only for an answer that matches the model.
        tolerance: the accepted factor between prediction and measurement (default 2).
        tries: measurements taken at most before a prediction is judged too far off.

    Raises:
        CheckFailed: a prediction that is not a positive number of seconds, that differs from the
            model, or that lies outside the tolerance of every measurement, with a hint.
    """
    if prediction is None:
        print(f"my_prediction: {NOT_ANSWERED}. Set it in the exercise cell above and run this cell again.")
        print(f"The stored SOLUTION (not your answer, so it earns no check mark): {solution * 1e3:.3f} ms; "
              f"the fitted model says {model_prediction * 1e3:.3f} ms.")
        return
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)) or not prediction > 0:
        raise _fail(f"your prediction {prediction!r} is not a positive number of seconds.",
                    "give the time in seconds as a float, e.g. 0.0012 for 1.2 ms.")
    if abs(prediction / model_prediction - 1) > 0.01:
        unit_hint = (" Your number looks like milliseconds: the answer is in seconds."
                     if abs(prediction / 1e3 / model_prediction - 1) < 0.01 else "")
        raise _fail(f"you predicted {prediction * 1e3:.4g} ms; the fitted model says "
                    f"{model_prediction * 1e3:.4g} ms.",
                    "all_reduce on p ranks as a ring: 2(p-1)·α + 2(p-1)/p·m·β + (p-1)/p·m·γ, with m in bytes "
                    "and α, β, γ from the fit." + unit_hint)
    rows = []
    for attempt in range(1, tries + 1):
        got = float(measure())
        ratio = got / prediction
        rows.append((attempt, f"{got * 1e3:.3f} ms", f"{prediction * 1e3:.3f} ms", f"{ratio:.2f}"))
        if 1 / tolerance <= ratio <= tolerance:
            _passed(f"the fitted model predicted a size it never saw, within a factor of {tolerance:g} "
                    "of the measurement", _table(rows, ("measurement", "measured", "predicted", "ratio")))
            return
    raise _fail(f"every measurement was more than a factor of {tolerance:g} away from the prediction.",
                "your formula matches the model, so the machine is probably busy: run this cell again.",
                _table(rows, ("measurement", "measured", "predicted", "ratio")))
