"""The exercise of notebook 18 (the hang lab): name the culprit rank and the sequence number of the
first collective at which it diverged, read from the Flight Recorder's per-rank table."""

from __future__ import annotations

from ..hangs import DIVERGES_AT, FaultRun
from .framework import _fail, _passed, _unfinished

__all__ = ["check_hang_culprit"]


def check_hang_culprit(run: FaultRun, culprit, seq) -> None:
    """Check the learner's reading of ``run`` (a :func:`collnb.labs.hangs.fault_run` with a fault
    injected on a rank the notebook did not show).

    Args:
        run: the :class:`collnb.labs.hangs.FaultRun` the learner looked at.
        culprit: the rank (int) the learner blames, or ``None`` while unanswered.
        seq: the ``collective_seq_id`` (int) of the first collective at which that rank's entry
            differs from the others' (or is missing), or ``None`` while unanswered.

    Prints "not answered yet" while either is ``None``, ✓ when both are right; raises
    :class:`collnb.exercises.CheckFailed` (a ✗ with a hint, never the answer) otherwise. The truth
    is what was injected (``run.culprit``) and where it shows (:data:`collnb.labs.hangs.DIVERGES_AT`),
    not collnb's blame.
    """
    name = "Find the culprit"
    if culprit is None or seq is None:
        return _unfinished(name, "put the Flight Recorder table's rows side by side: in which column "
                           "(collective_seq_id) does one rank's cell differ from the others', or stop?",
                           what="Set `culprit` and `seq` in the exercise cell above")
    if not isinstance(culprit, int) or isinstance(culprit, bool) or not isinstance(seq, int) or isinstance(seq, bool):
        raise _fail(f"culprit and seq must be ints; got {culprit!r} and {seq!r}.",
                    "a rank number and a collective_seq_id, e.g. culprit = 0, seq = 1")
    if culprit != run.culprit:
        raise _fail(f"rank {culprit} is not the rank whose code was changed.",
                    "the rank collnb's RankError names first may be one that timed out waiting; look for the "
                    "one cell that differs from its column (operation or sizes), or the rank with no dump")
    if seq != DIVERGES_AT[run.fault]:
        raise _fail(f"rank {culprit} is right, but collective {seq} is not where it first diverged.",
                    "read that rank's row from the left: the first sequence number whose cell differs from "
                    "the other ranks' cells in the same column")
    _passed(f"rank {culprit} diverged at collective_seq_id {seq} "
            f"({run.fault.replace('_', ' ')}); fr_trace and collnb's blame read the same entries")
