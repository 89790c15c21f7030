"""The explorer's choices for a learner: input presets that show a lesson (int8 wraps, float16
overflows, bfloat16 rounds, values naming their source rank, special floats), which presets fit
which primitive, the elements-per-chunk sizes, and the one-paragraph "about" text per kind of
primitive.
"""

from __future__ import annotations

import functools
import html
from typing import TYPE_CHECKING, Callable, TypeAlias

from .. import collectives
from ..i18n import N_, _
from ..vocabulary import check_choice

if TYPE_CHECKING:
    from ..collectives import PrimitiveSpec

__all__ = ["INPUT_PRESETS", "CHUNK_SIZES", "presets_for", "teaching_label", "preset_label", "about_text", "Preset"]

#: One input preset: (label, inputs ``f(rank, chunk) -> value`` or ``None`` for the teaching values,
#: ``(dtype, op, min_world_size)`` its effect needs or ``None``).
Preset: TypeAlias = tuple[str, Callable[[int, int], float] | None, tuple[str, str | None, int] | None]


def _special_float(r: int, c: int) -> float:
    return (float("nan"), float("inf"), float("-inf"), 1 / 3)[(r + c) % 4]


#: Input presets: key -> (label, inputs callable ``f(rank, chunk)`` or ``None`` for the teaching
#: values, ``(dtype, op, min_world_size)`` that the effect needs, or ``None``). ``dtype`` may be
#: ``"float"``: any floating dtype (float32 when the current one is not). Choosing a preset sets
#: that dtype and op (reducing primitives) and keeps the learner's world size unless it is below
#: ``min_world_size``; the panel says what it changed. Which presets a primitive offers:
#: :func:`presets_for`.
INPUT_PRESETS: dict[str, Preset] = {
    "teaching": (N_("10·rank + chunk (teaching values)"), None, None),
    "int8_wrap": (N_("100 on every rank: int8 SUM wraps past 127 (2 ranks: 200 → -56)"), lambda r, c: 100,
                  ("int8", "sum", 2)),
    "fp16_inf": (N_("60000 on every rank: float16 SUM overflows (2 ranks: 120000 → inf)"), lambda r, c: 60000,
                 ("float16", "sum", 2)),
    "bf16_round": (N_("256 on rank 0, 1 elsewhere: bfloat16 SUM rounds (256 + 1 → 256)"),
                   lambda r, c: 256 if r == 0 else 1, ("bfloat16", "sum", 2)),
    "rank_ids": (N_("every chunk holds its rank: the values say where the data came from"), lambda r, c: r, None),
    "special_floats": (N_("nan, inf, -inf, 1/3: copied bit for bit (no arithmetic, nothing rounds)"),
                       _special_float, ("float", None, 1)),
}

_REDUCING_PRESETS = ("teaching", "int8_wrap", "fp16_inf", "bf16_round", "rank_ids")
_MOVING_PRESETS = ("teaching", "rank_ids", "special_floats")


def presets_for(primitive: str) -> tuple[str, ...]:
    """The keys of :data:`INPUT_PRESETS` that show something real for ``primitive``: the dtype
    lessons (int8 wraps, float16 overflows, bfloat16 rounds) only where the primitive does
    arithmetic (reduces); values naming their source rank and special floats where it only moves
    data; just the teaching values for object collectives and barrier (no tensor inputs).

    Raises:
        TypeError: a primitive that is not a name. ValueError: unknown primitive (the valid ones
            listed; the words of :func:`collnb.vocabulary.check_choice`).
    """
    spec = collectives.SPECS[check_choice("primitive", primitive, collectives.PRIMITIVES)]
    if spec.kind != "tensor":
        return ("teaching",)
    return _REDUCING_PRESETS if spec.reduces else _MOVING_PRESETS


@functools.lru_cache(maxsize=None)
def _teaching_change(world_size: int, dtype: str) -> str:
    """What ``dtype`` does to the teaching values at ``world_size``: ``""`` (holds them all),
    ``"bool"``, ``"rounds"`` (a floating dtype) or ``"wraps"`` (an integer dtype); worked out with
    torch casts once per pair (a slider move asks again)."""
    import torch  # noqa: PLC0415
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype) or dt.is_complex:
        return ""
    # the values a rank's chunks hold (at most world_size chunks per rank)
    vals = torch.tensor(sorted({collectives.teaching_value(r, c, world_size) for r in range(world_size)
                                for c in range(world_size)}), dtype=torch.int64)
    got = vals.to(dt).to(torch.float64)
    if torch.equal(got, vals.to(torch.float64)):
        return ""
    return "bool" if dt == torch.bool else ("rounds" if dt.is_floating_point else "wraps")


def teaching_label(world_size: int, dtype: str | None = None) -> str:
    """The teaching values' label at ``world_size``: ``10·rank + chunk`` (``100·rank + chunk``
    above 10 ranks), and, when ``dtype`` (a name) cannot hold every one of them, what it does to
    them: "bfloat16 rounds some (marked)" / "int8 wraps some (marked)"."""
    base = _("{k}·rank + chunk (teaching values)").format(k=10 if world_size <= 10 else 100)
    change = _teaching_change(world_size, dtype) if dtype is not None else ""
    if not change:
        return base
    what = (_("bool keeps only True/False") if change == "bool" else
            (_("{dtype} rounds some of them") if change == "rounds" else _("{dtype} wraps some of them")).format(
                dtype=dtype))
    return _("{k}·rank + chunk (teaching values; {what}: marked in the before panel)").format(
        k=10 if world_size <= 10 else 100, what=what)


def preset_label(key: str, world_size: int, dtype: str | None = None) -> str:
    """The label of inputs preset ``key`` in the dropdown, worded for the world size shown
    (``world_size``; a preset's effect needs at least 2 ranks, so below that it is worded for 2):
    "int8 SUM wraps past 127 (16 ranks: 1600 → 64)". ``dtype`` words the teaching values'
    label (:func:`teaching_label`).

    Raises:
        KeyError: ``key`` is not in :data:`INPUT_PRESETS`.
    """
    if key == "teaching":
        return teaching_label(world_size, dtype)
    label = INPUT_PRESETS[key][0]
    n = max(world_size, 2)
    if key == "int8_wrap":
        return _("100 on every rank: int8 SUM wraps past 127 ({n} ranks: {total} → {wrapped})").format(
            n=n, total=100 * n, wrapped=(100 * n + 128) % 256 - 128)
    if key == "fp16_inf":
        return _("60000 on every rank: float16 SUM overflows ({n} ranks: {total} → inf)").format(n=n, total=60000 * n)
    return _(label)


_ABOUT_REDUCING = N_("<b>{p}</b> combines the ranks' values ({op}), so the dtype can change the answer: "
                   "the inputs presets show int8 wrapping, float16 overflowing and bfloat16 rounding, "
                   "and the float64 reference table shows the exact result.")
_ABOUT_MOVING = N_("<b>{p}</b> only moves data, it does no arithmetic: every output is some rank's input, "
                 "bit for bit, whatever the dtype. Presets: values that name their source rank; nan, inf "
                 "and 1/3 arriving unchanged.")
_ABOUT_OBJECT = N_("<b>{p}</b> moves pickled Python objects (strings here), not tensors: no dtype, no arithmetic.")
_ABOUT_TIME = N_("<b>{p}</b> moves no data: each rank leaves only after every rank has arrived (times in ms).")

#: Choices of the "elements per chunk" slider (powers of two).
CHUNK_SIZES = tuple(2 ** i for i in range(0, 17))


def about_text(spec: PrimitiveSpec, op: str) -> str:
    """One paragraph (HTML) on what ``spec``'s primitive does with the data; ``op`` is the reduce
    op shown for reducing primitives."""
    if spec.kind == "time":
        text = _ABOUT_TIME
    elif spec.kind == "object":
        text = _ABOUT_OBJECT
    elif spec.reduces:
        text = _ABOUT_REDUCING
    else:
        text = _ABOUT_MOVING
    return _(text).format(p=html.escape(spec.name), op=html.escape(str(op).upper()))
