"""The exercises of notebook 18 (the hang lab): name the culprit rank and the sequence number of the
first collective at which it diverged, read from the Flight Recorder's per-rank table
(:func:`check_hang_culprit`); then fix a step whose ranks hang, checked on real ranks
(:func:`check_hang_fix`).

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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from ..hangs import DIVERGES_AT, Entry, EntryRow, FaultRun, fault_run, fr_trace_verdict
from ...i18n import N_, _
from ...ranks import RankError
from .framework import Case, Trial, check, fail, not_answered, passed

if TYPE_CHECKING:
    from ...views import MatrixPicture

__all__ = ["check_hang_culprit", "check_hang_fix", "hang_hint", "hang_mystery", "hide_ranks", "Mystery", "MYSTERY_FAULTS",
           "WORKED_EXAMPLES", "STEP_NUMEL"]

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


# ----------------------------------------------------------------------------------------------
# Fix a step that hangs

#: Values of each rank's activation in :func:`check_hang_fix` (float64).
STEP_NUMEL = 4
#: The calls :func:`check_hang_fix` allows: the ring's message and the loss's all_reduce
#: (``batch_isend_irecv``'s operations count as the ``isend``/``irecv`` they are).
STEP_CALLS = {"send", "recv", "isend", "irecv", "all_reduce"}
#: The gloo message of an operation that timed out, and the backend's source path before it.
_TIMED_OUT_IN = re.compile(r"Timed out waiting \d+ms for (send|recv) operation")


def hang_hint(err: RankError) -> str | None:
    """The hint for ranks that did not meet in :func:`check_hang_fix`, read from where each rank was when
    the launch failed (``err.outcomes``, str): every rank waiting in a send (each sent first), every rank
    waiting in a receive (each received first), or some ranks returned while another waited in a
    collective (a collective only some ranks call). ``None`` when it is none of these."""
    outcomes = err.outcomes
    finished = sorted(r for r, what in outcomes.items() if what.startswith("finished"))
    if err.exc_type == "DidNotJoin" or finished:
        waiting = sorted(r for r in outcomes if r not in finished)
        return _("Rank(s) {finished} had already returned while rank(s) {waiting} waited in a collective: a "
                 "collective inside an if on the rank is one the other ranks never call. Every rank must call it, "
                 "even the ones that do not use its result.").format(finished=finished, waiting=waiting)
    # what each rank timed out in; a rank whose connection a peer closed when it gave up says nothing more
    kinds = {m.group(1) if m else None for what in outcomes.values() if "Connection closed" not in what
             for m in [_TIMED_OUT_IN.search(what)]}
    if kinds == {"send"}:
        return _("Every rank was waiting in a send. A blocking send returns only once its peer has posted the "
                 "matching receive, and every peer was sending too, so nobody received. Post the send and the "
                 "receive together (isend and irecv, or dist.batch_isend_irecv, then wait on them), or let the "
                 "ranks take turns (one side receives first).")
    if kinds == {"recv"}:
        return _("Every rank was waiting in a receive: each waited for a message its peer would send only "
                 "after receiving one itself. Post the send and the receive together (isend and irecv, or "
                 "dist.batch_isend_irecv, then wait on them), or let the ranks take turns (one side sends first).")
    return None


#: What :func:`check_hang_fix`'s judge compares with: every rank's ``x``, every rank's right ``y``, the loss.
_StepWant = tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]


def _step_expected(xs: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every rank's ``y`` (its ``x`` plus the previous rank's) and the loss every rank returns (the mean
    over the ranks of ``sum(y**2)``)."""
    n = len(xs)
    ys = [xs[r] + xs[(r - 1) % n] for r in range(n)]
    return ys, torch.stack([(y ** 2).sum() for y in ys]).mean()


def check_hang_fix(fixed_step: Callable[..., object]) -> None:
    """Check ``fixed_step(rank, world_size, x)`` (notebook 18): notebook 18's ``broken_step`` without its
    two hangs. Each rank passes its ``x`` (``(4,)`` float64, known only to that rank) to rank ``rank + 1``
    (the last to rank 0) and receives rank ``rank - 1``'s; it returns ``(y, loss)``: ``y = x +`` the
    received ``x``, and ``loss`` the mean over the ranks of ``sum(y ** 2)`` (one ``all_reduce``, the same
    value on every rank).

    Runs at two random world sizes from 2 to 5 with random integer-valued ``x`` and every operation
    recorded. Passes when no rank hangs (the ranks meet within the check's collective timeout, 5 s),
    every rank returns the right ``y`` and ``loss``, and each rank's calls are one message to the next
    rank, one from the previous rank (``send``/``recv``, ``isend``/``irecv`` or ``batch_isend_irecv``) and
    one ``all_reduce``. The typical wrong answers fail with a hint: every rank sending (or receiving)
    first hangs, and so does an ``all_reduce`` only some ranks call (:func:`hang_hint` says which, from
    where the ranks waited: gloo's blocking ``send`` returns only once the receiver has posted its
    ``recv``, and ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s check passes ``send``/``recv`` through unchecked,
    ``ProcessGroupWrapper::send`` in ``torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp``); a
    message from the wrong neighbour, a loss left unaveraged or averaged locally fail on the values.

    Raises:
        CheckFailed: a wrong answer, with a per-rank table and a hint.
    """
    direction = _("Each rank sends x to the next rank and receives the previous rank's into a buffer of its own. A "
                  "blocking send waits until its receiver has posted the matching receive: if every rank sends "
                  "first, nobody receives. And every rank must call the loss's all_reduce, not only the rank that "
                  "logs it.")

    def cases(rng: random.Random) -> Iterator[Case[_StepWant]]:
        for ws in rng.sample(range(2, 6), 2):
            xs = [torch.tensor([float(rng.randint(-9, 9)) for _ in range(STEP_NUMEL)], dtype=torch.float64)
                  for _ in range(ws)]
            ys, mean = _step_expected(xs)
            yield Case(ws, [(x,) for x in xs], want=(xs, ys, mean),
                       what=_("world size {world_size}").format(world_size=ws))

    def unpack(got: object) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(y, loss)`` as tensors, or ``None`` for anything else."""
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return None
        y, loss = got
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != (STEP_NUMEL,):
            return None
        if not isinstance(loss, (int, float, torch.Tensor)):
            return None
        value = torch.as_tensor(loss, dtype=torch.float64)
        return None if value.numel() != 1 else (y.to(torch.float64), value.reshape(()))

    def judge(t: Trial[_StepWant]) -> None:
        xs, ys, mean = t.want
        n = t.world_size
        returned = [unpack(r) for r in t.results]
        ok_y = [g is not None and torch.allclose(g[0], ys[r]) for r, g in enumerate(returned)]
        ok_loss = [g is not None and torch.allclose(g[1], mean) for g in returned]
        t.show([(r, xs[r], None if g is None else g[0], None if g is None else f"{float(g[1]):.4g}", t.summary(r),
                 "✓" if ok_y[r] and ok_loss[r] else "✗") for r, g in enumerate(returned)],
               (_("rank"), "x", _("returned y"), _("returned loss"), _("calls"), ""))
        got = [g for g in returned if g is not None]
        if len(got) < n:
            raise t.fail(_("{what}: every rank must return (y, loss): y the {n} float64 values x + the previous "
                           "rank's x, loss one number.").format(what=t.what, n=STEP_NUMEL))
        t.only(STEP_CALLS, hint=_("the ring needs one send and one receive per rank (send/recv, isend/irecv or "
                                  "dist.batch_isend_irecv) and the loss one all_reduce.") + " " + direction)
        bad_y = [r for r in t.ranks if not ok_y[r]]
        if bad_y:
            r = bad_y[0]
            if torch.allclose(got[r][0], xs[r] + xs[(r + 1) % n]) and n > 2:
                hint = _("rank {r} added the next rank's x: x goes to rank + 1, so what arrives comes from rank - 1.").format(r=r)
            elif not any(c.name in ("recv", "irecv") for c in t.calls[r]):
                hint = _("rank {r} received nothing: y needs the previous rank's x, received into a buffer of its own "
                         "(torch.empty_like(x)).").format(r=r)
            else:
                hint = _("wait for the receive (work.wait()) before you read the buffer, and send x itself, not y.")
            raise t.fail(_("{what}: rank(s) {bad} returned a wrong y.").format(what=t.what, bad=bad_y), hint)
        counts = [t.names(r).count("all_reduce") for r in t.ranks]
        if any(c != 1 for c in counts):
            raise t.fail(_("{what}: every rank must make exactly one all_reduce, of its loss; the ranks made {counts}.").format(
                what=t.what, counts=counts))
        bad_loss = [r for r in t.ranks if not ok_loss[r]]
        if bad_loss:
            r = bad_loss[0]
            total = mean * n
            if torch.allclose(got[r][1], total):
                hint = _("the all_reduce sums the ranks' losses: divide by world_size, on every rank.")
            elif torch.allclose(got[r][1], (ys[r] ** 2).sum()):
                hint = _("rank {r} returned its own loss: all_reduce it first, then divide by world_size.").format(r=r)
            else:
                hint = _("all_reduce each rank's sum(y ** 2), wait for it if it is asynchronous, then divide by "
                         "world_size.")
            raise t.fail(_("{what}: rank(s) {bad} returned a wrong loss (every rank should return {want:.4g}).").format(
                what=t.what, bad=bad_loss, want=float(mean)), hint)

    check(fixed_step, "fixed_step(rank, world_size, x)", direction=direction, cases=cases, judge=judge,
          on_hang=hang_hint,
          passed=_("no rank hung, and every rank's y and loss are right at world sizes {first_size} and {second_size} "
                   "(random x, known only to its rank): one message round the ring, posted so that nobody waits "
                   "for a peer that waits too, and one all_reduce on every rank"))
