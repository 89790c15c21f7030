"""What the recorded collectives of a parallel step add up to: which phase issued them, their kind,
count and bytes per rank, and where they fall between the layers' compute.

The records come from ``collnb.launch(..., record_calls=True)`` (``.calls[r]``, rank ``r``'s
:class:`collnb.CallRecord` list in issue order, recorded where torch dispatches them; inside a rank
:func:`collnb.ranks.active_recorder` is the recorder). Inside a rank, :class:`Phases` marks where
the code is ("forward", "backward", "forward layer 0", ...) by counting the operations the recorder
has seen so far (an observer of the active recorder); in the kernel :func:`split` and
:func:`interleave` put the records between those marks.

Bytes, two ways:

* ``nbytes`` (:attr:`collnb.CallRecord.nbytes`): the buffer as nccl-tests counts it (an
  all_reduce's tensor, an all_gather's whole output, a reduce_scatter's whole input);
* :func:`wire_bytes`: what one rank sends with a bandwidth-optimal algorithm (a ring):
  ``nbytes x busbw_factor`` (all_reduce ``2(n-1)/n``, all_gather / reduce_scatter / all_to_all
  ``(n-1)/n``; nccl-tests doc/PERFORMANCE.md, :func:`collnb.algorithms.busbw_factor`), a send's
  tensor, nothing for a recv. This is the number that makes "an all_reduce is a reduce_scatter plus
  an all_gather" and "FSDP moves about 1.5x DDP's bytes" exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypedDict, TypeVar

from ...algorithms import busbw_factor
from ...ranks import CallRecord, active_recorder
from ...i18n import N_, _
from ...units import format_bytes, pad

__all__ = ["Phases", "split", "by_step", "phase_range", "interleave", "kind", "wire_bytes", "CallSummary", "summarize", "summary_table",
           "PHASE_NAMES", "NUMBERED", "phase_label", "Mark", "PhaseRange", "Recorded"]

_Result_co = TypeVar("_Result_co", covariant=True)

#: ``(label, operations issued before it)``: one mark of :class:`Phases`.
Mark: TypeAlias = tuple[str, int]


class Recorded(Protocol[_Result_co]):
    """A launch made with ``record_calls=True`` (a :class:`collnb.LaunchResults`): every rank's result,
    rank order, and ``calls[r]``, rank ``r``'s recorded operations in issue order."""

    @property
    def calls(self) -> Sequence[Sequence[CallRecord]]: ...

    def __getitem__(self, rank: int, /) -> _Result_co: ...

    def __iter__(self) -> Iterator[_Result_co]: ...

    def __len__(self) -> int: ...


class PhaseRange(TypedDict):
    """:func:`phase_range`'s answer: each rank's first record of the phase and the one after its last
    (``None``: to the end), as :class:`collnb.views.CallsView`'s ``start``/``stop``."""

    start: list[int]
    stop: list[int | None]

#: The primitive of each recorded operation name (:attr:`collnb.CallRecord.operation`).
_KINDS = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather", "all_gather_single": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather", "all_gather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "scatter": "scatter", "gather": "gather",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "barrier": "barrier",
}


#: The phases the labs mark (:meth:`Phases.begin`; ``"setup"``: before the first mark), as shown to a
#: learner: :func:`phase_label` translates them (the marks themselves stay these names); ``NUMBERED``:
#: the ones marked with a block's or a step's number (``"forward 2"``, ``"step 1"``).
PHASE_NAMES = {"setup": N_("setup"), "forward": N_("forward"), "backward": N_("backward"), "grads": N_("grads"),
               "optimizer": N_("optimizer"), "dispatch": N_("dispatch"), "combine": N_("combine"),
               "gather": N_("gather")}
NUMBERED = {"forward": N_("forward {number}"), "backward": N_("backward {number}"), "step": N_("step {number}")}


def phase_label(label: str) -> str:
    """A phase's name as shown, in the language spoken now: ``"forward"``, ``"backward 2"``, ``"step 1"``
    (:data:`PHASE_NAMES`, :data:`NUMBERED`) translated; any other label as is."""
    word, _sep, number = label.partition(" ")
    if not number and word in PHASE_NAMES:
        return _(PHASE_NAMES[word])
    if number.isdigit() and word in NUMBERED:
        return _(NUMBERED[word]).format(number=number)
    return label


class Phases:
    """Marks in a rank's stream of recorded operations (use inside a rank of a launch with
    ``record_calls=True``).

    ``phases.begin("forward")`` notes how many operations this rank had issued so far; the
    :attr:`marks` list, returned to the kernel, lets :func:`split` / :func:`interleave` place the
    rank's ``.calls[r]`` between them. It counts through an observer of the active recorder
    (``Recorder.add_observer``), so it sees exactly the operations that are recorded.

    Raises:
        RuntimeError: no recorder is active (the launch was not made with ``record_calls=True``).
    """

    def __init__(self) -> None:
        recorder = active_recorder()
        if recorder is None:
            raise RuntimeError(_("Phases needs the call recorder: launch with collnb.launch(fn, n, "
                                 "record_calls=True)"))
        self.count = 0
        #: ``[(label, operations issued before it), ...]`` in order.
        self.marks: list[Mark] = []
        recorder.add_observer(self)
        self._recorder = recorder

    def issued(self, issue: object) -> None:  # the recorder's observer interface
        self.count += 1

    def begin(self, label: str) -> None:
        """Everything issued from now on, until the next mark, belongs to ``label``."""
        self.marks.append((label, self.count))

    def close(self) -> list[Mark]:
        """Stop counting; returns :attr:`marks`."""
        try:
            self._recorder.remove_observer(self)
        except ValueError:
            pass
        return self.marks


def split(records: Sequence[CallRecord], marks: Iterable[Mark]) -> dict[str, list[CallRecord]]:
    """``{label: [CallRecord, ...]}``: the records of each phase (``"setup"`` before the first mark;
    a label used twice collects both stretches), in issue order."""
    out: dict[str, list[CallRecord]] = {}
    bounds: list[tuple[str | None, int]] = [("setup", 0), *marks, (None, len(records))]
    for (label, start), (_next, end) in zip(bounds, bounds[1:]):
        if label is not None and (label != "setup" or end > start):
            out.setdefault(label, []).extend(records[start:end])
    return out


def by_step(records: Sequence[CallRecord], marks: Iterable[Mark], prefix: str = "step ") -> list[list[CallRecord]]:
    """The records of each step: one list per mark whose label starts with ``prefix`` (``"step 1"``,
    ``"step 2"``, ...), holding everything from that mark to the next such mark (the marks between,
    ``"forward 0"``, ``"optimizer"``..., belong to the step), except what follows a ``"gather"`` mark
    (the whole parameters gathered after training)."""
    out: list[list[CallRecord]] = []
    current: list[CallRecord] | None = None
    bounds: list[tuple[str | None, int]] = [*marks, (None, len(records))]
    for (label, start), (_next, end) in zip(bounds, bounds[1:]):
        if label is not None and label.startswith(prefix):
            current = []
            out.append(current)
        elif label == "gather":
            current = None
        if current is not None:
            current.extend(records[start:end])
    return out


def phase_range(marks_per_rank: Iterable[Sequence[Mark]], label: str, until: str | None = None) -> PhaseRange:
    """``{"start": [...], "stop": [...]}``: each rank's records of phase ``label`` (from its mark to the
    next mark, or to mark ``until`` when given; ``None`` = to the end), as the ``start``/``stop``
    arguments of :class:`collnb.views.CallsView` and :func:`collnb.views.call_steps` take them.

    Args:
        marks_per_rank: one :attr:`Phases.marks` list per rank.

    Raises:
        KeyError: a rank has no mark ``label`` (or ``until``).
    """
    starts: list[int] = []
    stops: list[int | None] = []
    for marks in marks_per_rank:
        labels = [lab for lab, _ in marks]
        if label not in labels or (until is not None and until not in labels):
            raise KeyError(_("no mark {mark} among {labels}").format(
                mark=repr(label if label not in labels else until), labels=labels))
        i = labels.index(label)
        starts.append(marks[i][1])
        if until is not None:
            stops.append(marks[labels.index(until)][1])
        else:
            stops.append(marks[i + 1][1] if i + 1 < len(marks) else None)
    return PhaseRange(start=starts, stop=stops)


def interleave(records: Sequence[CallRecord], marks: Iterable[Mark]) -> list[str | CallRecord]:
    """The records with the marks between them: a list of ``str`` (a mark's label) and
    :class:`collnb.CallRecord`, in the order the rank issued them."""
    out: list[str | CallRecord] = []
    at = 0
    for label, position in marks:
        out.extend(records[at:position])
        out.append(label)
        at = position
    out.extend(records[at:])
    return out


def kind(record: CallRecord) -> str:
    """The primitive of a record: ``"all_gather"`` for ``all_gather_single`` /
    ``all_gather_into_tensor`` (also from DTensor or FSDP2), ``"send"`` for ``isend`` or an isend of a
    ``batch_isend_irecv``; otherwise the recorded operation's name."""
    name = record.operation
    return _KINDS.get(name, name)


def wire_bytes(record: CallRecord) -> float:
    """Bytes this rank sends for ``record`` with a bandwidth-optimal algorithm:
    ``nbytes * busbw_factor(kind, group_size)`` for a collective (nccl-tests
    doc/PERFORMANCE.md), ``nbytes`` for a send, ``0`` for a recv or a barrier."""
    k = kind(record)
    if k == "send":
        return float(record.nbytes)
    if k in ("recv", "barrier"):
        return 0.0
    try:
        return record.nbytes * busbw_factor(k, record.group_size)
    except (ValueError, TypeError):
        return float(record.nbytes)


@dataclass(frozen=True)
class CallSummary:
    """One kind of operation in a stretch of records.

    Attributes:
        kind: the primitive (:func:`kind`).
        count: how many operations of that kind (per step when summarised with ``steps``).
        nbytes: their bytes as nccl-tests counts them, summed (per step).
        wire_bytes: their :func:`wire_bytes`, summed (per step).
    """

    kind: str
    count: float
    nbytes: float
    wire_bytes: float


def summarize(records: Iterable[CallRecord], steps: int = 1) -> list[CallSummary]:
    """One :class:`CallSummary` per kind of operation in ``records``, in order of first appearance,
    divided by ``steps`` (per step).

    Raises:
        ValueError: ``steps`` < 1.
    """
    if steps < 1:
        raise ValueError(_("steps must be >= 1; got {steps}").format(steps=steps))
    rows: dict[str, tuple[int, int, float]] = {}
    for rec in records:
        k = kind(rec)
        c, b, w = rows.get(k, (0, 0, 0.0))
        rows[k] = (c + 1, b + rec.nbytes, w + wire_bytes(rec))
    return [CallSummary(k, c / steps, b / steps, w / steps) for k, (c, b, w) in rows.items()]


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.3g}"


def summary_table(phases: Mapping[str, Iterable[CallRecord]], steps: int = 1) -> str:
    """A text table, one line per phase and kind: count, bytes (nccl-tests) and bytes on the wire
    per rank, for ``{phase: records}`` (e.g. :func:`split` of one rank's calls), per step."""
    lines = [pad(_("phase"), 12) + pad(_("kind"), 16) + pad(_("count"), 6, ">") + pad(_("bytes"), 12, ">")
             + pad(_("on the wire"), 14, ">")]
    for phase, records in phases.items():
        for row in summarize(records, steps) or [CallSummary(_("(none)"), 0, 0, 0)]:
            lines.append(f"{pad(phase_label(phase), 12)}{pad(row.kind, 16)}{_number(row.count):>6}{format_bytes(row.nbytes):>12}"
                         f"{format_bytes(row.wire_bytes):>14}")
    return "\n".join(lines)
