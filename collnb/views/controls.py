"""The primitive explorer's control logic, as a parameter model: :class:`ExplorerParams` (every value a learner can set,
one frozen dataclass), :class:`Facts` (what the choices depend on besides it: the primitives shown,
which backends can run here, what each backend accepted on real ranks), and two pure functions of
them: :func:`choices` (the values each control offers) and :func:`update` (a change applied in a
fixed order, every value that stopped being valid replaced, an inputs preset's dtype/op/world size
set, and the notes saying what was changed and why). No widget and no rank is touched here: the
explorer (:mod:`collnb.views.explorer`) binds these to its widgets, and tests call them directly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeAlias, TypedDict

from .. import collectives
from ..i18n import _
from ..vocabulary import MAX_WORLD_SIZE, check_rank, dtype_name, op_hint, op_name
from .presets import CHUNK_SIZES, INPUT_PRESETS, preset_label, presets_for

if TYPE_CHECKING:
    from ..collectives import BackendSupport
    from ..ranks import BackendFacts

__all__ = ["ExplorerParams", "RunValues", "Facts", "choices", "update", "fix", "normalised", "ORDER", "Updated"]

#: :func:`update`'s and :func:`fix`'s answer: the parameters, the notes (warnings) and the information lines.
Updated: TypeAlias = tuple["ExplorerParams", list[str], list[str]]


class RunValues(TypedDict):
    """The values a run uses (:meth:`ExplorerParams.as_dict`): ``None`` where the primitive takes none."""

    primitive: str
    world_size: int
    dtype: str | None
    op: str | None
    root: int | None
    backend: str
    chunk_size: int
    inputs: str

#: The order in which :func:`update` applies several changes (so that a value given explicitly
#: wins over the one an inputs preset would choose).
ORDER = ("backend", "primitive", "inputs", "world_size", "dtype", "op", "root", "chunk_size")


@dataclass(frozen=True)
class ExplorerParams:
    """The whole state of a primitive explorer: one field per control (the field's name is the
    control's name). ``dtype`` and ``op`` are names (``"float32"``, ``"sum"``); ``root`` is the
    src/dst rank (an int); ``inputs`` a key of :data:`collnb.views.presets.INPUT_PRESETS`.
    Fields a primitive does not take (``op`` of broadcast, ``root`` of all_reduce) keep their
    value, unused, so that moving back to a primitive that takes them restores them."""

    primitive: str = "all_reduce"
    world_size: int = 4
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    backend: str = "gloo"
    chunk_size: int = 1
    inputs: str = "teaching"

    def __getitem__(self, name: str) -> object:
        """``p["dtype"]`` is ``p.as_dict()["dtype"]`` (``None`` where the primitive takes no dtype)."""
        values: Mapping[str, object] = self.as_dict()
        return values[name]

    def as_dict(self) -> RunValues:
        """The values a run uses: ``{"primitive", "world_size", "dtype", "op", "root", "backend",
        "chunk_size", "inputs"}``, with ``dtype``/``op``/``root`` ``None`` where the primitive takes
        none (and ``inputs`` ``"teaching"`` where it takes no tensor)."""
        spec = collectives.SPECS[self.primitive]
        tensor = spec.kind == "tensor"
        return RunValues(primitive=self.primitive, world_size=self.world_size,
                         dtype=self.dtype if tensor else None, op=self.op if spec.reduces else None,
                         root=self.root if spec.rooted else None, backend=self.backend,
                         chunk_size=self.chunk_size, inputs=self.inputs if tensor else "teaching")


@dataclass
class Facts:
    """What :func:`choices` and :func:`update` read besides the parameters.

    Args:
        primitives: the primitives the explorer offers (names, in order).
        infos: ``{backend: collnb.ranks.backend_info(backend)}`` for every backend.
        support: called as ``support(backend)`` for a usable backend's
            :class:`collnb.collectives.BackendSupport`; asked at most once per backend (the answer
            is kept in :attr:`known`), and only when a tensor primitive's dtypes are needed.
    """

    primitives: tuple[str, ...]
    infos: Mapping[str, BackendFacts]
    support: Callable[[str], BackendSupport]
    known: dict[str, BackendSupport] = field(default_factory=dict)  # support(backend), once asked
    #: the dtypes and ops worked out from it: ``("dtypes", backend, primitive)`` / ``("ops", backend,
    #: primitive, dtype)`` -> names
    _lists: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict, repr=False)
    #: Before the backend's first probe: ``{"dtype": name, "op": name}``, the only dtype and op offered
    #: (those of the first picture, which the backend itself ran); ``None`` once support is known.
    provisional: dict[str, str] | None = None

    @property
    def usable(self) -> list[str]:
        """The backends that can run here, in :data:`collnb.vocabulary.BACKENDS` order."""
        return [b for b, i in self.infos.items() if i["available"]]

    def max_world_size(self, backend: str) -> int:
        """The largest world size ``backend`` can run here (1..16)."""
        return max(1, min(MAX_WORLD_SIZE, int(self.infos[backend]["max_world_size"])))

    def backend_support(self, backend: str) -> BackendSupport:
        """``support(backend)``, asked once per backend."""
        if backend not in self.known:
            self.known[backend] = self.support(backend)
        return self.known[backend]

    def dtypes(self, backend: str, primitive: str) -> tuple[str, ...]:
        """The dtype names ``backend`` accepts for ``primitive`` (``BackendSupport.dtypes``, which
        scans every probe result: worked out once per pair, not at each slider move)."""
        if self.provisional is not None:
            return (self.provisional["dtype"],)
        key = ("dtypes", backend, primitive)
        if key not in self._lists:
            self._lists[key] = tuple(self.backend_support(backend).dtypes(primitive))
        return self._lists[key]

    def ops(self, backend: str, primitive: str, dtype: str) -> tuple[str, ...]:
        """The reduce op names ``backend`` accepts for ``primitive`` on ``dtype`` (once per triple)."""
        if self.provisional is not None:
            return (self.provisional["op"],) if dtype == self.provisional["dtype"] else ()
        key = ("ops", backend, primitive, dtype)
        if key not in self._lists:
            self._lists[key] = tuple(self.backend_support(backend).ops(primitive, dtype))
        return self._lists[key]


def choices(p: ExplorerParams, facts: Facts) -> dict[str, list[object]]:
    """The values each control offers for ``p`` (pure but for the one support look-up per backend).

    Returns:
        ``{field: [value, ...]}``; ``"inputs"`` as ``[(label, key), ...]``; an empty list where the
        primitive takes no such value (the control is hidden).

    Raises:
        RuntimeError: the backend ran this tensor primitive with no dtype at all.
    """
    spec = collectives.SPECS[p.primitive]
    tensor = spec.kind == "tensor"
    out: dict[str, list[object]] = {"primitive": list(facts.primitives), "backend": list(facts.usable),
                 "world_size": list(range(1, facts.max_world_size(p.backend) + 1)),
                 "dtype": [], "op": [], "root": [], "chunk_size": [], "inputs": []}
    if tensor:
        dtypes = facts.dtypes(p.backend, spec.name)
        if not dtypes:
            raise RuntimeError(_("{backend} ran {primitive} with no dtype here (detected on real ranks)").format(
                backend=p.backend, primitive=spec.name))
        out["dtype"] = list(dtypes)
        if spec.reduces:
            out["op"] = list(facts.ops(p.backend, spec.name, p.dtype)) if p.dtype in dtypes else []
        out["chunk_size"] = list(CHUNK_SIZES)
        out["inputs"] = [(preset_label(k, p.world_size, p.dtype), k) for k in presets_for(spec.name)]
    if spec.rooted:
        out["root"] = list(range(p.world_size))
    return out


def normalised(name: str, value: object, notes: list[str]) -> object:
    """``value`` as the name a control offers (a dtype alias or ``torch.dtype`` -> its name, a
    ``ReduceOp`` or any case -> the op's name); a value that does not normalise adds the error
    to ``notes`` and comes back as ``None``."""
    try:
        if name == "dtype":
            return dtype_name(value)
        if name == "op":
            return op_name(value)
    except (ValueError, TypeError) as exc:
        notes.append(str(exc))
        return None
    return value


def _fix(p: ExplorerParams, facts: Facts, explicit: frozenset[str], notes: list[str],
         info: list[str]) -> ExplorerParams:
    """``p`` with every value that is not offered replaced, in :data:`ORDER`; a note for each
    replacement of a value the learner asked for (``explicit`` names those fields) and for an op
    that stopped being valid."""
    spec = collectives.SPECS[p.primitive]
    if p.backend not in facts.usable:
        b = facts.usable[0]
        notes.append(_("backend {backend!r} cannot run here ({reason}); showing {other!r}").format(
            backend=p.backend, reason=facts.infos[p.backend]["reason"], other=b))
        p = dataclasses.replace(p, backend=b)
    ws_max = facts.max_world_size(p.backend)
    if p.world_size > ws_max:
        p = dataclasses.replace(p, world_size=ws_max)
    if spec.kind == "tensor":
        dtypes = list(facts.dtypes(p.backend, spec.name))
        if p.dtype not in dtypes:
            cur = "float32" if "float32" in dtypes else dtypes[0]
            if "dtype" in explicit and p.dtype is not None:
                sup = facts.backend_support(p.backend)
                notes.append(_("{backend} cannot run {primitive} on {dtype} tensors (detected on real ranks of "
                               "torch {version}); dtypes it accepts: {valid}. Showing {shown}.").format(
                    backend=p.backend, primitive=spec.name, dtype=p.dtype, version=sup.torch_version,
                    valid=", ".join(dtypes), shown=cur))
            p = dataclasses.replace(p, dtype=cur)
        if spec.reduces:
            ops = list(facts.ops(p.backend, spec.name, p.dtype))
            if p.op not in ops:
                want = "sum" if "sum" in ops else ops[0]
                if p.op is not None:
                    notes.append(_("op {op} is not valid for {dtype} with {backend} in {primitive} (detected on "
                                   "real ranks; valid: {valid}).{hint} Showing {shown}.").format(
                        op=p.op.upper(), dtype=p.dtype, backend=p.backend, primitive=spec.name,
                        valid=", ".join(o.upper() for o in ops), hint=op_hint(p.op, p.dtype),
                        shown=want.upper()))
                p = dataclasses.replace(p, op=want)
        if p.inputs not in presets_for(spec.name):
            info.append(_("the inputs preset “{preset}” shows nothing for {primitive}; showing the teaching "
                          "values").format(preset=preset_label(p.inputs, p.world_size), primitive=spec.name))
            p = dataclasses.replace(p, inputs="teaching")
        if p.chunk_size not in CHUNK_SIZES:
            p = dataclasses.replace(p, chunk_size=1)
    if spec.rooted:
        r = p.root
        try:
            r = check_rank(r, p.world_size, spec.root_name or "root")
        except (TypeError, ValueError) as exc:
            fixed = min(max(r, 0), p.world_size - 1) if isinstance(exc, ValueError) else 0
            if "root" in explicit:
                notes.append(_("{error}; showing {name}={rank}").format(error=exc, name=spec.root_name, rank=fixed))
            r = fixed
        if r != p.root:
            p = dataclasses.replace(p, root=r)
    return p


def _preset(p: ExplorerParams, facts: Facts, explicit: frozenset[str], notes: list[str],
            info: list[str]) -> ExplorerParams:
    """The inputs preset of ``p`` just chosen: set the dtype/op/world size its lesson needs (keeping
    what the learner set in the same change), and say what it changed."""
    spec = collectives.SPECS[p.primitive]
    effect = INPUT_PRESETS[p.inputs][2]
    if not effect or spec.kind != "tensor":
        return _fix(p, facts, explicit, notes, info)
    dt, op, min_ws = effect
    before = p  # the learner's values in this change: what the preset's note compares with
    ws = p.world_size
    if ws < min_ws <= facts.max_world_size(p.backend) and "world_size" not in explicit:
        p = dataclasses.replace(p, world_size=min_ws)
    if dt == "float":
        import torch  # noqa: PLC0415 - the model imports torch only where a dtype is asked about
        dt = before.dtype if getattr(torch, before.dtype).is_floating_point else "float32"
    if "dtype" not in explicit and dt in facts.dtypes(p.backend, spec.name):
        p = dataclasses.replace(p, dtype=dt)
        if "op" not in explicit and spec.reduces and op and op in facts.ops(p.backend, spec.name, dt):
            p = dataclasses.replace(p, op=op)
    p = _fix(p, facts, explicit, notes, info)
    a, b = before.as_dict(), p.as_dict()
    names = {"dtype": _("dtype"), "op": _("op"), "world_size": _("world size")}
    changed = [_("{what} {old} → {new}").format(what=names[k], old=a[k], new=b[k])
               for k in ("dtype", "op", "world_size") if a[k] != b[k]]
    if a["world_size"] != b["world_size"]:
        changed[-1] += _(" (the effect needs at least {n} ranks)").format(n=min_ws)
    label = preset_label(p.inputs, p.world_size)
    kept = "" if a["world_size"] != b["world_size"] else _("world size {n} kept").format(n=ws)
    if changed:
        info.append(_("preset “{preset}” set {changes}").format(preset=label, changes=", ".join(changed)) +
                    ("; " + kept if kept else ""))
    else:
        info.append(_("preset “{preset}”: dtype {dtype} as set; {kept}").format(preset=label, dtype=b["dtype"],
                                                                                kept=kept))
    return p


def update(p: ExplorerParams, changes: Mapping[str, object], facts: Facts) -> Updated:
    """Apply ``changes`` (``{field: value}``, as a learner would, in :data:`ORDER`) to ``p``.

    Each value is normalised (a dtype alias or ``torch.dtype`` -> its name, a ``ReduceOp`` or any
    case -> the op's name); then every value that stopped being valid is replaced (the world size
    clamped to what the backend runs, the dtype to float32, the op to SUM, the src/dst to the last
    rank) and, when ``inputs`` changed to a preset with a lesson, the dtype/op/world size it needs
    are set (a value given in the same change wins). Pure but for the support look-up of
    :class:`Facts`.

    Returns:
        ``(params, notes, info)``: the new :class:`ExplorerParams`; warnings (str) about values the
        learner asked for that were replaced; information (str) about what a preset changed.

    Raises:
        ValueError: a name that is not a field (the message lists the fields).
    """
    unknown = set(changes) - set(ORDER)
    if unknown:
        raise ValueError(_("unknown control(s) {names}; choose from {valid}").format(
            names=sorted(unknown), valid=", ".join(ORDER)))
    notes: list[str] = []
    info: list[str] = []
    values = {k: normalised(k, v, notes) for k, v in changes.items()}
    explicit = frozenset(k for k, v in values.items() if v is not None)
    # the learner's values as given (a wrong type included): _fix below checks each against what is offered
    given: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    q = dataclasses.replace(p, **given)
    if "inputs" in explicit:
        q = _preset(q, facts, explicit - {"inputs"}, notes, info)
    else:
        q = _fix(q, facts, explicit, notes, info)
    return q, notes, info


def fix(p: ExplorerParams, facts: Facts, explicit: Iterable[str] = ORDER) -> Updated:
    """``(params, notes, info)`` as :func:`update` gives them, for parameters made whole (an
    explorer's first values): every value not offered replaced, with a note for each field named in
    ``explicit`` (default: all); an inputs preset's lesson is not applied (the values given win).
    Idempotent: ``fix(fix(p)[0])[0] == fix(p)[0]``."""
    notes: list[str] = []
    info: list[str] = []
    q = _fix(p, facts, frozenset(explicit), notes, info)
    return q, notes, info
