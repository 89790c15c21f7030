"""The exercise of notebook 18 (the hang lab): name the culprit rank and the sequence number of the
first collective at which it diverged, read from the Flight Recorder's per-rank table.

The learner gets a :class:`Mystery` from :func:`hang_mystery`: the evidence only (every rank's Flight
Recorder entries, the per-rank table and picture without collnb's blame, ``fr_trace``'s verdict). What
was injected where is kept by this module, keyed by that object, never on it, so an answer read off the
object (``mystery.culprit``, ``DIVERGES_AT[mystery.fault]``, collnb's blame or ``RankError``, which now
names the culprit from the same entries) cannot pass: the object has none of them.
"""

from __future__ import annotations

import random
import re
import tempfile
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..hangs import DIVERGES_AT, Entry, EntryRow, FaultRun, fault_run, fr_trace_verdict
from ...i18n import N_, _
from .framework import fail, not_answered, passed

if TYPE_CHECKING:
    from ...views import MatrixPicture

__all__ = ["check_hang_culprit", "hang_mystery", "hide_ranks", "Mystery", "MYSTERY_FAULTS", "WORKED_EXAMPLES"]

#: How a fault is named in a message (translated where shown).
FAULT_WORDS = {"skipped_collective": N_("skipped collective"), "mismatched_shape": N_("mismatched shape"),
               "wrong_splits": N_("wrong splits"), "sleeping_rank": N_("sleeping rank")}
#: The faults a mystery draws from: the two that hang every rank until the timeout.
MYSTERY_FAULTS = ("skipped_collective", "mismatched_shape")
#: The ``(fault, culprit)`` pairs notebook 18 runs as worked examples before the exercise (its
#: ``skipped`` and ``shape`` cells): a mystery is never one of them, so copying an example's answer
#: cannot pass.
WORKED_EXAMPLES = frozenset({("skipped_collective", 1), ("mismatched_shape", 1)})

#: What ``fr_trace`` says that names a rank: "Culprit rank 2" in its error message, "missing ranks:
#: {2}" (a rank absent from a collective), "Missing dump files from ranks {2}". :meth:`Mystery.fr_trace` hides the rank numbers.
_NAMES_A_RANK = (re.compile(r"(Culprit rank )\d+"), re.compile(r"(missing ranks: )\{[\d, ]*\}"),
                 re.compile(r"(Missing dump files from ranks )\{[\d, ]*\}"))

# {Mystery: (fault, culprit)}: the truth, held here and not on the learner's object
_TRUTH: weakref.WeakKeyDictionary[Mystery, tuple[str, int]] = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class Mystery:
    """The evidence of a run with a fault injected on a rank the learner is not told.

    Attributes:
        world_size: ranks (int).
        dump_dir: the folder of the ranks' dumps (``rank<r>`` pickles for ``fr_trace``, ``rank<r>.json``).
        entries: ``{rank: [entry dict, ...]}``, each rank's Flight Recorder entries of the default group
            (``collective_seq_id``, ``profiling_name``, ``input_sizes``, ``output_sizes``, ``state``).
        failed: whether the run ended in an error (every rank waited until the timeout).
    """

    world_size: int
    dump_dir: str
    entries: dict[int, list[Entry]] = field(default_factory=dict)
    failed: bool = False

    def _view(self) -> FaultRun:
        run = FaultRun("mystery", -1, self.world_size, self.dump_dir)
        run.entries = self.entries
        return run

    def rows(self) -> list[EntryRow]:
        """``(rank, seq, op, input_sizes, output_sizes, state)`` per entry (:meth:`FaultRun.rows`)."""
        return self._view().rows()

    def table(self) -> str:
        """The per-rank table of recent collectives as text (:meth:`FaultRun.table`)."""
        return self._view().table()

    def image(self, last: int = 6) -> MatrixPicture:
        """The table as a rank × sequence-number picture, nothing framed (:meth:`FaultRun.image`)."""
        return self._view().image(last, show_blame=False, title="Flight Recorder: the mystery run")

    def fr_trace(self) -> str:
        """torch's analyser on the dumps (:func:`collnb.labs.hangs.fr_trace_verdict`), with every rank
        number it names as a culprit or as missing replaced by ``?`` (``"Culprit rank ?"``,
        ``"missing ranks: ?"``): the rest of its report (the sequence number, the operations and
        sizes it compared) is as torch wrote it. The ranks are the exercise's answer; the learner
        reads them from the entries (:meth:`table`)."""
        return hide_ranks(fr_trace_verdict(self.dump_dir))


def hide_ranks(verdict: str) -> str:
    """``fr_trace``'s report ``verdict`` (str) with the rank numbers it names as culprits or as missing
    replaced by ``?``, and one line saying so after it when it named any (str)."""
    hidden = verdict
    for pattern in _NAMES_A_RANK:
        hidden = pattern.sub(r"\1?", hidden)
    if hidden != verdict:
        hidden += "\n" + _("(collnb replaced the ranks fr_trace names with ?: find them in the table)")
    return hidden


def hang_mystery(dump_dir: str | None = None, world_size: int = 4) -> Mystery:
    """Run :func:`collnb.labs.hangs.fault_run` with one of :data:`MYSTERY_FAULTS` on a rank drawn at
    random (``random.SystemRandom``: a learner's ``random.seed`` does not fix it), never a pair of
    :data:`WORKED_EXAMPLES`, and return the evidence only (:class:`Mystery`); the truth stays with
    :func:`check_hang_culprit`.

    Args:
        dump_dir: where the dumps go (default: a new temporary folder whose name says nothing).
        world_size: 4 or 8.
    """
    draw = random.SystemRandom()
    fault, culprit = draw.choice([(f, r) for f in MYSTERY_FAULTS for r in range(world_size)
                                  if (f, r) not in WORKED_EXAMPLES])
    run = fault_run(fault, world_size=world_size, culprit=culprit,
                    dump_dir=dump_dir or tempfile.mkdtemp(prefix="collnb-fr-mystery-"))
    mystery = Mystery(world_size, run.dump_dir, run.entries, run.error is not None)
    _TRUTH[mystery] = (fault, culprit)
    return mystery


def _remember(mystery: Mystery, fault: str, culprit: int) -> None:
    """Record the truth of a :class:`Mystery` built by hand (tests)."""
    _TRUTH[mystery] = (fault, culprit)


def check_hang_culprit(mystery: object, culprit: object, seq: object) -> None:
    """Check the learner's reading of ``mystery`` (from :func:`hang_mystery`).

    Args:
        mystery: the :class:`Mystery` the learner looked at.
        culprit: the rank (int) the learner blames, or ``None`` while unanswered.
        seq: the ``collective_seq_id`` (int) of the first collective at which that rank's entry
            differs from the others' (or is missing), or ``None`` while unanswered.

    Prints "not answered yet" while either is ``None``, ✓ when both are right; raises
    :class:`collnb.exercises.CheckFailed` (a ✗ with a hint, never the answer) otherwise, also for an
    object that is not a mystery :func:`hang_mystery` made. The truth is what was injected and where it
    shows (:data:`collnb.labs.hangs.DIVERGES_AT`), held by this module, not collnb's blame.
    """
    name = _('Find the culprit')
    truth = _TRUTH.get(mystery) if isinstance(mystery, Mystery) else None
    if truth is None:
        raise fail(_('{kind} is not a mystery this check knows.').format(kind=type(mystery).__name__),
                   _('pass the object exercises.hang_mystery() returned (run the mystery cell again)'))
    fault, true_culprit = truth
    if culprit is None or seq is None:
        return not_answered(name, _("put the Flight Recorder table's rows side by side: in which column "
                                    "(collective_seq_id) does one rank's cell differ from the others', or stop?"),
                            what=_('Set `culprit` and `seq` in the exercise cell above'))
    if not isinstance(culprit, int) or isinstance(culprit, bool) or not isinstance(seq, int) or isinstance(seq, bool):
        raise fail(_('culprit and seq must be ints; got {culprit!r} and {seq!r}.').format(culprit=culprit, seq=seq),
                   _('a rank number and a collective_seq_id, e.g. culprit = 0, seq = 1'))
    if culprit != true_culprit:
        raise fail(_('rank {culprit} is not the rank whose code was changed.').format(culprit=culprit),
                   _('the rank that raised first may be one that timed out waiting; look for the one cell that differs '
                     'from its column (operation or sizes)'))
    if seq != DIVERGES_AT[fault]:
        raise fail(_('rank {culprit} is right, but collective {seq} is not where it first diverged.').format(culprit=culprit, seq=seq),
                   _("read that rank's row from the left: the first sequence number whose cell differs from the other "
                     "ranks' cells in the same column"))
    passed(_("rank {culprit} diverged at collective_seq_id {seq} ({fault}); fr_trace and collnb's blame read the same "
             'entries').format(culprit=culprit, seq=seq, fault=_(FAULT_WORDS.get(fault, fault.replace('_', ' ')))))
