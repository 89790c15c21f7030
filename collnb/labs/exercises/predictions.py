"""Checks of predictions: the learner writes the values a primitive or an algorithm will leave on
each rank (or the terms of a time from the fitted cost model), and the check runs it on real ranks.
The right values are computed only once there is an answer, and never shown before it is right."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ...algorithms import predict
from ...collectives import run
from ...i18n import _
from .framework import check_prediction, fail, integer, not_answered, number_rows, passed, table

if TYPE_CHECKING:
    from ...algorithms import CostModel, Trace


# ----------------------------------------------------------------------------------------------
# Predictions: the learner writes values; the check runs the primitive on real ranks


def _values(t: torch.Tensor | list[object]) -> list[float]:
    """One rank's output of a tensor primitive (:attr:`collnb.RunResult.after`) as floats.

    Raises:
        TypeError: not a tensor (an object primitive's list).
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"a tensor primitive's output is a tensor; got {type(t).__name__}")
    return [float(v) for v in t.tolist()]


def check_scatter_prediction(prediction: object) -> None:
    """Check the scatter prediction of notebook 02 (world size 4, ``src=1``, teaching inputs)
    against ``collnb.run("scatter", world_size=4, root=1)`` on real ranks (run only once there is
    an answer; a wrong one is told so without the right values).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    check_prediction("prediction", prediction,
                     lambda: [_values(t) for t in run("scatter", world_size=4, root=1).after],
                     normalise=number_rows,
                     direction=_('Only src (rank 1) has a scatter_list; which of its chunks does rank j receive, and what do '
                                 "the teaching inputs put in rank 1's chunk c?"),
                     hint=_("rank 1 is src: rank j receives chunk j of rank 1's scatter_list (teaching inputs: rank r, chunk "
                            'c holds 10*r + c). One list per rank.'),
                     passed=_("right: rank j received chunk j of rank 1's scatter_list"))


def check_reduce_prediction(prediction: object, *, world_size: int = 5, dst: int = 2) -> None:
    """Check the MAX-reduce prediction of notebook 04 (teaching inputs, ``world_size`` ranks, ``dst``;
    by default 5 and 2, a case the notebook does not draw before asking): ``None`` for every rank
    whose output is undefined, the values on ``dst``.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    if isinstance(prediction, list) and len(prediction) == world_size \
            and [p is None for p in prediction] != [r != dst for r in range(world_size)]:
        raise fail(_('check which ranks are undefined: you predicted {prediction!r}.').format(prediction=prediction),
                   _("after reduce only dst's tensor is defined; write None for every other rank."))

    def real() -> list[list[float] | None]:
        result = run("reduce", world_size=world_size, op="max", root=dst)
        return [_values(t) if d else None for t, d in zip(result.after, result.defined)]

    check_prediction("prediction", prediction, real, normalise=number_rows,
                     direction=_("After reduce, which rank's output is defined? And which rank's value is the largest in "
                                 'every chunk (teaching inputs: rank r, chunk c holds 10*r + c)? Give {world_size} values '
                                 'for that rank.').format(world_size=world_size),
                     hint=_("MAX over the ranks of 10*r + c: which rank's value wins in every chunk?"),
                     passed=_("right: dst={dst} holds the element-wise MAX (rank {world_size_1}'s values); every other rank "
                              'is undefined').format(dst=dst, world_size_1=world_size - 1))


def check_reduce_scatter_prediction(prediction: object, *, world_size: int = 5) -> None:
    """Check the SUM reduce_scatter prediction of notebook 06 (teaching inputs, ``world_size``
    ranks; 5 by default, a size the notebook does not draw before asking).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    check_prediction("prediction", prediction,
                     lambda: [_values(t) for t in run("reduce_scatter", world_size=world_size, op="sum").after],
                     normalise=number_rows,
                     direction=_('Rank j ends with one chunk: chunk j, reduced over every rank. Add up column j of the '
                                 'inputs (rank r, chunk c holds 10*r + c).'),
                     hint=_('rank j gets the sum over all ranks r of their chunk j (10*r + j): one column of the inputs.'),
                     passed=_("right: rank j holds the sum of everyone's chunk j"))


def check_int8_prediction(prediction: object, *, world_size: int = 6, value: int = 50) -> None:
    """Check the int8 SUM prediction of notebook 07: ``world_size`` ranks all_reduce int8 tensors
    holding ``value`` everywhere; the prediction is the single int every element ends with.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    def real() -> int | list[int]:
        result = run("all_reduce", world_size=world_size, dtype=torch.int8, inputs=lambda rank, chunk: value)
        values = sorted({int(v) for t in result.after for v in _values(t)})
        return values[0] if len(values) == 1 else values

    check_prediction("prediction", prediction, real, normalise=integer, what=_(": a single integer, e.g. 12"),
                     direction=_('The sum happens in int8, which holds -128..127: what does wrapping modulo 256 make of the '
                                 'true sum?'),
                     hint=_('the true sum of {world_size} × {value} does not fit in int8 (-128..127); int8 wraps modulo 256 '
                            'into that range.').format(world_size=world_size, value=value),
                     passed=_('right: the int8 SUM wrapped around (not {world_size_value})').format(world_size_value=world_size * value))


def check_all_to_all_prediction(prediction: object, *, world_size: int = 3) -> None:
    """Check the all_to_all prediction of notebook 08 (teaching inputs, ``world_size`` ranks; 3 by
    default, a size the notebook does not draw before asking).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    check_prediction("prediction", prediction,
                     lambda: [_values(t) for t in run("all_to_all", world_size=world_size).after],
                     normalise=number_rows,
                     direction=_("Rank i's output chunk j comes from rank j: which of rank j's chunks goes to rank i?"),
                     hint=_("rank i's output chunk j is rank j's input chunk i (10*j + i)."),
                     passed=_('right: after all_to_all, rank i holds chunk i of every rank: the transpose'))


def check_ring_prediction(prediction: object, trace: Trace) -> None:
    """Check the round-2 prediction of the algorithms notebook against ``trace`` (a 3-rank ring
    all_reduce :class:`collnb.Trace`): the buffers after round 2, one row per rank. A wrong
    prediction is told which ranks' rows are wrong, not what they should hold.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    real = [[float(v) for v in row] for row in trace.chunk_values(2).tolist()]
    direction = (_('Step replay(ring3) to round 1; in round 2 each rank receives one chunk from its left neighbour and '
                   'adds it into its own copy of that chunk.'))
    if prediction is not None:
        try:
            answer = number_rows(prediction)
        except Exception:  # noqa: BLE001
            answer = None
        if answer is not None and len(answer) == len(real):
            rows = [(r, answer[r], "✓" if answer[r] == real[r] else "✗") for r in range(len(real))]
            if answer != real:
                raise fail(_('not quite.'), _('replay(ring3) and step to round 2: which chunk did each rank receive, '
                                              'and from whom?'), table(rows, (_('rank'), _('yours'), "")))
    check_prediction("prediction", prediction, lambda: real, normalise=number_rows, direction=direction,
                     hint=_('give one list of three numbers per rank, e.g. [[a, b, c], [d, e, f], [g, h, i]].'),
                     passed=_('right: after round 2 rank r holds chunk r summed over all three ranks'))


def _ring_parts(model: CostModel, world_size: int, nbytes: float) -> tuple[float, float]:
    """The ring all_reduce's two terms for ``model``: ``(2(p-1)·α, 2(p-1)/p·m·β + (p-1)/p·m·γ)``
    seconds (Thakur, Rabenseifner & Gropp 2005; the form collnb fits the built-in with)."""
    pr = predict("all_reduce", "ring", world_size, nbytes, model=model)
    return pr.alpha_count * model.alpha, pr.beta_bytes * model.beta + pr.gamma_bytes * model.gamma


def check_time_prediction(latency_part: object, bandwidth_part: object, *, model: CostModel, world_size: int, nbytes: int,
                          measure: Callable[[], float], tolerance: float = 2.0, tries: int = 3) -> None:
    """Check the bandwidth notebook's exercise: the time of a ring-form all_reduce of ``nbytes``
    bytes per rank on ``world_size`` ranks, from the fitted α, β, γ, **in two parts**: the latency
    term (``2(p-1)·α``, seconds spent on messages) and the bandwidth term
    (``2(p-1)/p·m·β + (p-1)/p·m·γ``, seconds spent on bytes).

    Each part must equal the formula applied to ``model`` within 1 % (``FitResult.predict`` gives
    only their sum, so the formula has to be applied), and a fresh measurement on real ranks must
    lie within a factor of ``tolerance`` of their sum. A load spike can hit one measurement, so up
    to ``tries`` are taken before judging. No message states the expected values.

    Args:
        latency_part, bandwidth_part: the learner's answers in seconds (``None`` while unanswered).
        model: the fitted :class:`collnb.costmodel.CostModel` (``FitResult.model``).
        world_size, nbytes: the case predicted (``nbytes``: bytes per rank).
        measure: measures that case once on real ranks and returns seconds (median of its
            iterations); called only once both parts are right.
        tolerance: the accepted factor between the prediction and a measurement (default 2).
        tries: measurements taken at most before a prediction is judged too far off.

    Raises:
        CheckFailed: a part that is not a number of seconds, that differs from its term, or a sum
            outside the tolerance of every measurement, with a hint.
    """
    p = world_size
    direction = (_("Split the ring's formula T = 2(p−1)·α + 2(p−1)/p·m·β + (p−1)/p·m·γ into its two terms: the one that "
                   'counts messages and the one that counts bytes, with p = {p}, m in bytes and α, β, γ as printed '
                   'above.').format(p=p))
    if latency_part is None and bandwidth_part is None:
        return not_answered("latency_part, bandwidth_part", direction,
                            what=_('Set both in the exercise cell above'))
    parts: dict[str, float] = {}
    for name, value in (("latency_part", latency_part), ("bandwidth_part", bandwidth_part)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise fail(_('{name} = {value!r} is not a number of seconds (>= 0).').format(name=name, value=value),
                       _('give each part in seconds as a float, e.g. 0.0012 for 1.2 ms. ') + direction)
        parts[name] = value
    latency, bandwidth = parts["latency_part"], parts["bandwidth_part"]
    want = dict(zip(parts, _ring_parts(model, p, nbytes)))
    if abs(latency - want["bandwidth_part"]) <= 0.01 * want["bandwidth_part"] and \
            abs(bandwidth - want["latency_part"]) <= 0.01 * want["latency_part"]:
        raise fail(_('your two parts are the right numbers in the wrong places.'),
                   _('latency_part counts messages (α), bandwidth_part counts bytes (β and γ).'))
    formulas = {"latency_part": "2(p−1)·α", "bandwidth_part": "2(p−1)/p·m·β + (p−1)/p·m·γ"}
    terms = {"latency_part": _("{formula}: the messages").format(formula=formulas["latency_part"]),
             "bandwidth_part": _("{formula}: the bytes").format(formula=formulas["bandwidth_part"])}
    for name, value in parts.items():
        if abs(value - want[name]) > 0.01 * want[name]:
            unit_hint = (_(' Your number looks like milliseconds: the answer is in seconds.')
                         if want[name] > 0 and abs(value / 1e3 - want[name]) <= 0.01 * want[name] else "")
            raise fail(_("{name} = {ms:.4g} ms is not the ring's {formula} for these fitted values.").format(name=name, ms=value * 1e3, formula=formulas[name]),
                       _('{name} is {term}, with p = {p} and m = {nbytes} bytes.').format(name=name, term=terms[name], p=p, nbytes=nbytes) + unit_hint)
    prediction = latency + bandwidth
    rows = []
    for attempt in range(1, tries + 1):
        got = float(measure())
        ratio = got / prediction
        rows.append((attempt, f"{got * 1e3:.3f} ms", f"{prediction * 1e3:.3f} ms", f"{ratio:.2f}"))
        if 1 / tolerance <= ratio <= tolerance:
            share = latency / prediction
            passed((_('both terms right; their sum predicted a size the sweep never measured, within a factor of '
                      '{tolerance:g} of the measurement. At {kib} KiB the messages are {share:.0%} of the time: '
                      'latency-bound.') if share > 0.5 else _('both terms right; their sum predicted a size the sweep never measured, within a factor of {tolerance:g} of the measurement. At {kib} KiB the messages are {share:.0%} of the time: bandwidth-bound.')).format(tolerance=tolerance, kib=nbytes // 1024, share=share),
                   table(rows, (_('measurement'), _('measured'), _('predicted'), _('ratio'))))
            return
    raise fail(_('every measurement was more than a factor of {tolerance:g} away from your prediction.').format(tolerance=tolerance),
               _('both terms match the model, so the machine is probably busy: run this cell again.'),
               table(rows, (_('measurement'), _('measured'), _('predicted'), _('ratio'))))
