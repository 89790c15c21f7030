"""The exercise-check framework, with which every check is written (:func:`check`): run a learner's
function on real ranks with every operation each rank issued recorded, group the records into the
calls the learner made, and report the result as a learner reads it (``✓``, or a
:class:`CheckFailed` with a per-rank table and a hint, or "not answered yet" with a hint that points
a direction).

The public API (what a module of checks imports; nothing with an underscore):

=========================  ====================================================================
:func:`check`              the frame of a check that runs the answer: check its signature, launch
                           each :class:`Case` with every call recorded, say "not answered yet" for
                           an unfinished answer, hand each :class:`Trial` to the judge, print ✓
:class:`Case`              one launch: the world size, each rank's arguments, what is right
:class:`Trial`             one launch as the judge sees it: results, calls, a per-rank table,
                           :meth:`Trial.fail`, :meth:`Trial.only`
:func:`check_prediction`   the frame of a check of a predicted value
:func:`fail`               a ✗ to raise (:class:`CheckFailed`); :func:`passed` the ✓;
                           :func:`not_answered` the "not answered yet" of a check without a launch
:func:`table`              a per-rank table; :func:`summary` a rank's calls in one line;
                           :func:`short` a value in one cell
:func:`world_sizes`        random world sizes; :func:`integer`, :func:`number_rows` a prediction's form
=========================  ====================================================================

A check of code is a case builder, a judge and one call of :func:`check`::

    def check_my_all_reduce(my_all_reduce):
        direction = _("Every rank contributes its own tensor to one collective ...")

        def cases(rng):
            for ws in world_sizes(rng, 2, 6):
                mine = [torch.tensor([float(rng.randint(-99, 99))]) for _ in range(ws)]
                yield Case(ws, [(m,) for m in mine], want=sum(mine),
                           what=_("world size {world_size}").format(world_size=ws))

        def judge(trial):
            trial.show([(r, trial.results[r], trial.summary(r)) for r in trial.ranks],
                       (_("rank"), _("returned"), _("calls")))
            trial.only({"all_reduce"})
            wrong = [r for r in trial.ranks if not torch.equal(trial.results[r], trial.want)]
            if wrong:
                raise trial.fail(_("{what}: rank(s) {wrong} ...").format(what=trial.what, wrong=wrong))

        check(my_all_reduce, "my_all_reduce(rank, world_size, mine)", direction=direction, cases=cases,
              judge=judge, passed=_("... at world sizes {first_size} and {second_size}"))

Messages go through ``_()`` (collnb.i18n) with their Chinese translations, as every learner-visible
string does.
"""

from __future__ import annotations

import inspect
import numbers
import random
import unicodedata
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Literal, TypeVar, cast, overload

import torch

from ...i18n import N_, _
from ...ranks import CallRecord, LaunchResults, LaunchTimeout, RankError, Timeline, launch

__all__ = ["check", "Case", "Trial", "check_prediction", "CheckFailed", "NOT_ANSWERED", "WHERE_SOLUTION", "fail",
           "passed", "not_answered", "table", "summary", "short", "world_sizes", "integer", "number_rows",
           "launch_recorded", "solution_code", "CHECK_TIMEOUT_S"]

#: Printed (never with ✓) when the answer cell is still unfinished. In English as here; the Chinese
#: line keeps these words beside its own ("尚未作答（not answered yet）"), so that a graded check
#: (tools/student.py) finds them whatever the language.
NOT_ANSWERED = "not answered yet"

#: Where a solution is, said once the learner has tried (never shown by the check itself).
WHERE_SOLUTION = N_("A solution is in the collapsed cell below the exercise: open it (click its \"…\" or "
                    "\"Show code\") once you have tried.")

#: How a call's source reads in a message (:attr:`collnb.CallRecord.source`).
_SOURCE_WORDS = {"ProcessGroup": N_("a ProcessGroup method"), "functional": N_("a functional collective"),
                 "DTensor": "DTensor", "DeviceMesh": N_("a DeviceMesh")}


# ----------------------------------------------------------------------------------------------
# Feedback


class CheckFailed(AssertionError):
    """A wrong answer. ``str(err)`` starts with ``"✗ "`` and ends with a hint.

    In Jupyter (IPython) the exception is shown as its message only, without a traceback
    (``_render_traceback_``), so the learner sees a formatted ✗, the per-rank table and the hint.
    It is an ``AssertionError``, so tests and scripts detect the failure as usual.
    """

    def _render_traceback_(self) -> list[str]:
        lines = str(self).splitlines() or ["✗"]
        # Red ✗ line, then the rest as plain text.
        return ["\x1b[1;31m" + lines[0] + "\x1b[0m", *lines[1:]]


#: Said between a ✗ verdict and a table whose every row is ✓ (issue 34: a table of ✓ under a ✗ read as
#: a contradiction; the values are right, something else, said in the verdict, is not).
VALUES_RIGHT = N_("Every row below is right (✓); what failed is the line above:")


def fail(what: str, hint: str, table: str = "") -> CheckFailed:
    """A wrong answer, to raise: ``"✗ " + what``, the per-rank ``table`` (:func:`table`) if any, then
    ``"Hint: " + hint``. ``what`` and ``hint`` are shown as given (translate them with ``_()``). A table whose
    every row is ✓ is introduced by :data:`VALUES_RIGHT` (the verdict is about something else)."""
    if table and "✓" in table and "✗" not in table:
        table = _(VALUES_RIGHT) + "\n" + table
    return CheckFailed("✗ " + what + ("\n" + table if table else "") + "\n" + _("Hint: ") + hint)


def _width(text: str) -> int:
    """Columns ``text`` takes in a monospaced output: a wide (CJK) character takes two
    (Unicode's East Asian Width, UAX #11)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def table(rows: Sequence[tuple[object, ...]], header: Sequence[str]) -> str:
    """``rows`` under ``header`` as an aligned text table (each cell :func:`short`; a wide CJK
    character counts two columns), indented by two spaces."""
    cells = [[str(x) for x in header]] + [[short(x) for x in row] for row in rows]
    widths = [max(_width(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  " + "  ".join(c + " " * (w - _width(c)) for c, w in zip(row, widths)).rstrip()
                      for row in cells)


def short(x: object) -> str:
    """``x`` in one table cell: a tensor as its list, floats with 4 significant digits, at most 70
    characters."""
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list) and x and all(isinstance(v, float) for v in x):
        return "[" + ", ".join(f"{v:.4g}" for v in x) + "]"
    text = str(x)
    return text if len(text) <= 70 else text[:67] + "..."


#: What an unanswered exercise asks for (``what`` of :func:`not_answered`).
WRITE_ANSWER = N_("Write your answer in the exercise cell above")


def not_answered(name: str, direction: str, what: str = WRITE_ANSWER) -> None:
    """An unanswered exercise: say so, point a direction, say where a solution is. No solution
    value, no code, no check mark. ``direction`` and ``what`` are shown translated (pass them
    marked, ``N_("...")``, or already translated: English text translates to itself)."""
    print(_("{name}: not answered yet. {what} and run this cell again.").format(name=name, what=_(what)))
    print(_("Hint: ") + _(direction))
    print(_(WHERE_SOLUTION))


def passed(text: str, table: str = "") -> None:
    """Print the learner's success: the per-rank ``table`` if any, then ``"✓ " + text``."""
    if table:
        print(table)
    print("✓ " + text)


_say_passed = passed  # for the frames whose ``passed`` argument is the text


# ----------------------------------------------------------------------------------------------
# Running a learner's function on real ranks, with every operation each rank issued


#: A function that runs on ranks: ``fn(rank, world_size, *args)``, returning anything (a learner's).
RankFn = Callable[..., object]
#: Per rank, its records (:class:`collnb.ranks.CallRecords`) or the calls grouped from them.
Calls = Sequence[list[CallRecord]]
#: One tuple of arguments per rank (``None``: none); ``(results, calls, timeline)`` of a launch.
PerRankArgs = Iterable[Iterable[object]] | None
Recorded = tuple[list[object], Calls, Timeline | None]


def _run_recorded(rank: int, world_size: int, fn: RankFn, per_rank_args: Sequence[tuple[object, ...]]) -> object:
    """Runs on a rank: ``fn(rank, world_size, *per_rank_args[rank])`` (only this rank's own
    arguments reach ``fn``)."""
    return fn(rank, world_size, *per_rank_args[rank])


@overload
def launch_recorded(fn: RankFn, world_size: int, per_rank_args: PerRankArgs = None, timeout: float = 60.0,
                    collective_timeout: float = 5.0, *, timeline: Literal[False] = False) -> tuple[list[object], Calls]: ...
@overload
def launch_recorded(fn: RankFn, world_size: int, per_rank_args: PerRankArgs = None, timeout: float = 60.0,
                    collective_timeout: float = 5.0, *, timeline: Literal[True]) -> Recorded: ...


def launch_recorded(fn: RankFn, world_size: int, per_rank_args: PerRankArgs = None, timeout: float = 60.0,
                    collective_timeout: float = 5.0, *, timeline: bool = False) -> tuple[list[object], Calls] | Recorded:
    """Run ``fn(rank, world_size, *per_rank_args[rank])`` on real ranks; record each rank's operations.

    Args:
        fn: the learner's function.
        world_size: number of real ranks.
        per_rank_args: one tuple per rank; rank ``r``'s function sees only ``per_rank_args[r]``
            (how a check gives data to the source rank only). Default: no extra arguments.
        timeout, collective_timeout: as for :func:`collnb.launch` (seconds).
        timeline: also record the ranks' timeline (``collnb.launch(..., timeline=True)``: when each
            operation was issued and completed, and the regions marked with :func:`collnb.region`).

    Returns:
        ``(results, calls)``: ``results[r]`` is what rank ``r`` returned (tensors as CPU copies);
        ``calls[r]`` is rank ``r``'s :class:`collnb.ranks.CallRecords`: every communication
        operation its function issued, in order, whichever API issued it (recorded by
        ``collnb.launch(..., record_calls=True)``), with ``.unrecorded`` counting operations the
        backend saw that the recorder could not. With ``timeline=True``: ``(results, calls,
        timeline)``, ``timeline`` a :class:`collnb.ranks.Timeline`.

    Raises:
        ValueError: ``per_rank_args`` does not have one entry per rank.
        collnb.RankError / collnb.LaunchTimeout: as :func:`collnb.launch`.
    """
    args = [tuple(a) for a in (per_rank_args or [()] * world_size)]
    if len(args) != world_size:
        raise ValueError(f"per_rank_args has {len(args)} entries; need one per rank ({world_size})")
    out = cast(LaunchResults,  # what launch returns with record_calls=True
               launch(_run_recorded, world_size, args=(fn, args), timeout=timeout,
                      collective_timeout=collective_timeout, record_calls=True, timeline=timeline))
    return (list(out), out.calls, out.timeline) if timeline else (list(out), out.calls)


#: Seconds a check gives the learner's function before it says it did not finish.
CHECK_TIMEOUT_S = 60.0


def _launch_or_fail(fn: RankFn, world_size: int, per_rank_args: PerRankArgs = None, *, hint: str, what: str,
                    collective_timeout: float = 5.0, grouped: bool = True, timeline: bool = False,
                    on_hang: Callable[[RankError], str | None] | None = None) -> Recorded:
    """:func:`launch_recorded`, with each rank's records grouped into its calls (:func:`_calls`;
    ``grouped=False``: the records as recorded, one per operation); a failure of the learner's code
    becomes a ✗, and so does a rank that communicated where the recorder could not see (its data
    need not have come through the recorded calls). ``collective_timeout``: as :func:`collnb.launch`
    (more for code whose first backward imports modules lazily, e.g. FSDP2). Returns ``(results,
    calls, timeline)``, ``timeline`` ``None`` unless ``timeline=True`` (:func:`launch_recorded`). ``on_hang``: :func:`check`'s."""
    ranks_timeline: Timeline | None = None
    try:
        if timeline:
            results, calls, ranks_timeline = launch_recorded(fn, world_size, per_rank_args, timeout=CHECK_TIMEOUT_S,
                                                             collective_timeout=collective_timeout, timeline=True)
        else:
            results, calls = launch_recorded(fn, world_size, per_rank_args, timeout=CHECK_TIMEOUT_S,
                                             collective_timeout=collective_timeout)
    except RankError as err:
        head = str(err).split("Traceback")[0].strip()
        waited = "timed out" in head.lower() or (  # or its connection closed by a peer that had timed out
            "connection closed" in head.lower() and any("timed out" in v.lower() for v in err.outcomes.values()))
        if err.exc_type in ("DidNotJoin",) or waited or "Timeout" in err.exc_type:
            raise fail(_("{what}: the ranks did not meet in the same calls.").format(what=what) + f"\n{head}",
                        _("every rank must make the same collective calls in the same order "
                          "(a send needs a matching recv). ") + ((on_hang(err) if on_hang else None) or hint)) from None
        raise fail(_("{what}: your function raised on a rank.").format(what=what)
                    + f"\n{head}\n{err.rank_traceback.strip()}", hint) from None
    except LaunchTimeout as err:  # a check has no timeout to raise: say what to look for instead
        ranks = ", ".join(map(str, err.pending))
        where = "\n".join(f"  rank {r}: {v}" for r, v in sorted(err.outcomes.items()))
        raise fail(_("{what}: your function did not finish within {seconds} s (rank(s) {ranks} still "
                      "running). A check gives it plenty of time, so waiting longer will not help: look for a rank "
                      "waiting in a call its peers never make (a recv without its send, a collective inside an if "
                      "on the rank), or a loop that never ends; fix the function, run its cell, then run this check "
                      "again.").format(what=what, seconds=f"{CHECK_TIMEOUT_S:g}", ranks=ranks) + f"\n{where}",
                    hint) from None
    hidden = [(r, n) for r, c in enumerate(calls) if (n := getattr(c, "unrecorded", 0))]
    if hidden:
        r, n = hidden[0]
        raise fail(_("{what}: rank {rank} communicated where the check cannot see: the backend counted "
                      "{n} operation(s) that were not recorded (issued from another thread, or "
                      "with torch's dispatch modes switched off).").format(what=what, rank=r, n=n),
                    _("make every torch.distributed call from your function itself, in its own thread."))
    grouped_calls = [_calls(c) if grouped else list(c) for c in calls]
    return results, grouped_calls, ranks_timeline


# ----------------------------------------------------------------------------------------------
# The frame of a check that runs the learner's function: check(), Case, Trial


#: What a check's :class:`Case` holds for its judge (``want``): its own expected values.
W = TypeVar("W")


@dataclass
class Case(Generic[W]):
    """One launch a check makes.

    Attributes:
        world_size: ranks to start.
        args: one tuple per rank: the arguments after ``(rank, world_size)``; rank ``r`` sees only
            ``args[r]`` (how a check gives data to its source rank only).
        want: whatever the judge compares with (the check's own expected values).
        what: how messages name this launch (``"world size 4, src=1"``, translated).
        fn: what runs on the ranks, ``fn(rank, world_size, *args[rank])``; ``None``: the answer itself
            (a wrapper, e.g. one that trains with the answer, gets the answer in ``args``).
    """

    world_size: int
    args: Sequence[tuple[object, ...]]
    want: W
    what: str = ""
    fn: RankFn | None = None


@dataclass
class Trial(Generic[W]):
    """One launch of a :class:`Case`, as :func:`check`'s judge sees it.

    Attributes:
        case: the case launched (``want``, ``what``, ``world_size`` are also attributes here).
        results: what each rank returned (tensors as CPU copies): the learner's, so anything.
        calls: per rank, its calls (:class:`collnb.CallRecord`; grouped into the calls the learner
            made unless the check asked for every operation, ``grouped=False``).
        timeline: the ranks' :class:`collnb.ranks.Timeline` (``timeline=True``), else ``None``.
        direction: the check's direction, the default hint of :meth:`fail`.
        table: the per-rank table shown with a ✗ and with the ✓ (:meth:`show`).
    """

    case: Case[W]
    results: list[object]
    calls: Calls
    timeline: Timeline | None = None
    direction: str = ""
    table: str = ""

    @property
    def world_size(self) -> int:
        return self.case.world_size

    @property
    def ranks(self) -> range:
        """``range(world_size)``."""
        return range(self.case.world_size)

    @property
    def want(self) -> W:
        return self.case.want

    @property
    def what(self) -> str:
        return self.case.what

    @property
    def silent(self) -> bool:
        """Every rank returned ``None`` and made no call: what an unfinished answer does."""
        return all(r is None for r in self.results) and not any(self.calls)

    def show(self, rows: Sequence[tuple[object, ...]], header: Sequence[str]) -> None:
        """Set the per-rank table (:func:`table`) every later ✗ and the ✓ show."""
        self.table = table(rows, header)

    def fail(self, problem: str, hint: str | None = None) -> CheckFailed:
        """A ✗ to raise: ``problem``, this trial's table, and ``hint`` (default: the direction)."""
        return fail(problem, self.direction if hint is None else hint, self.table)

    def only(self, allowed: Collection[str], hint: str = "") -> None:
        """Refuse (raise a ✗) a call that is not one of the ``allowed`` ``torch.distributed``
        functions: a ``ProcessGroup`` method, a functional collective or DTensor doing the work is
        refused too."""
        _check_only(self.calls, allowed, hint)

    def names(self, rank: int) -> list[str]:
        """The names of ``rank``'s calls, in order."""
        return [c.name for c in self.calls[rank]]

    def summary(self, rank: int) -> str:
        """``rank``'s calls in one line (:func:`summary`)."""
        return summary(self.calls[rank])


def check(answer: object, signature: str, *, direction: str, cases: Callable[[random.Random], Iterable[Case[W]]],
          judge: Callable[[Trial[W]], None], passed: str | Callable[[list[Trial[W]]], str],
          unanswered: Literal["silent", "stub"] | Callable[[Trial[W]], bool] = "silent",
          retry: Callable[[Trial[W]], bool] | None = None, grouped: bool = True, timeline: bool = False,
          collective_timeout: float = 5.0, on_hang: Callable[[RankError], str | None] | None = None) -> None:
    """Check ``answer``, a function the learner wrote, on real ranks: the frame every such check shares.

    1. ``answer`` must be callable as ``signature`` says (``"my_broadcast(rank, world_size, src,
       tensor)"``), else a ✗ before any rank starts.
    2. ``cases(rng)`` yields the :class:`Case` objects to launch (``rng`` a ``random.SystemRandom``: the data
       is new in every run, and a learner's ``random.seed`` does not fix it); each is launched with every
       operation recorded (:func:`launch_recorded`), and a failure of the learner's code (it raised, it did not
       finish, it communicated where the recorder cannot see, the ranks did not meet: then with the hint
       ``on_hang(err)`` reads from its :class:`collnb.RankError`, if given and not ``None``) is a ✗ naming ``case.what``.
    3. An unfinished answer is "not answered yet" with ``direction`` (a hint that points a direction, never a
       solution): ``unanswered="silent"`` (default): after the first launch, every rank returned ``None`` and
       made no call (:attr:`Trial.silent`); ``"stub"``: before any launch, a body of only ``...``, ``pass`` or a
       docstring (for an answer whose ``None`` and silence are a real, wrong answer, or whose ranks return
       something else); or a function of the first :class:`Trial`.
    4. ``judge(trial)`` looks at each trial and raises :meth:`Trial.fail` (a :class:`CheckFailed`) on the first
       thing wrong; ``retry(trial)`` true launches that case once more first (a measurement a loaded machine spoiled).
    5. All judged: ✓ with ``passed`` and the last trial's table. ``passed`` is a text (formatted with
       ``first_size`` and ``second_size``, the first and last trial's world sizes, ``world_size``, the
       first's, and ``n_runs``) or a function of the trials.

    ``grouped``, ``timeline``, ``collective_timeout``: as :func:`launch_recorded` (``grouped=False``:
    each rank's records as recorded, one per operation, not grouped into the learner's calls).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    fn = _check_params(answer, signature)
    name = signature.split("(")[0]
    if unanswered == "stub" and _is_stub(fn):
        return not_answered(name, direction)
    trials: list[Trial[W]] = []
    for case in cases(random.SystemRandom()):
        trial = _try(fn, case, direction, grouped=grouped, timeline=timeline, collective_timeout=collective_timeout,
                     on_hang=on_hang)
        if retry is not None and retry(trial):
            trial = _try(fn, case, direction, grouped=grouped, timeline=timeline, collective_timeout=collective_timeout,
                         on_hang=on_hang)
        if not trials and (trial.silent if unanswered == "silent" else callable(unanswered) and unanswered(trial)):
            return not_answered(name, direction)
        judge(trial)
        trials.append(trial)
    if callable(passed):
        text = passed(trials)
    else:
        sizes = [t.world_size for t in trials]
        text = passed.format(first_size=sizes[0], second_size=sizes[-1], world_size=sizes[0], n_runs=len(trials))
    _say_passed(text, trials[-1].table)


def _try(answer: RankFn, case: Case[W], direction: str, *, grouped: bool, timeline: bool,
         collective_timeout: float, on_hang: Callable[[RankError], str | None] | None = None) -> Trial[W]:
    """One launch of ``case`` (:func:`_launch_or_fail`) as a :class:`Trial`."""
    results, calls, ranks_timeline = _launch_or_fail(case.fn or answer, case.world_size, case.args, hint=direction,
                                                     what=case.what, grouped=grouped, timeline=timeline,
                                                     collective_timeout=collective_timeout, on_hang=on_hang)
    return Trial(case, results, calls, ranks_timeline, direction)


def _calls(records: Iterable[CallRecord]) -> list[CallRecord]:
    """The calls a rank's code made, from its records: the operations of one call (the two
    broadcasts of ``broadcast_object_list``) become one entry named by the call; each operation
    of a ``batch_isend_irecv`` list counts as the ``isend``/``irecv`` it is. Each entry is a
    :class:`collnb.CallRecord` (for a call of several operations: the first, with ``op=None``, the
    first peer any of them had, every shape, and the bytes summed)."""
    out: list[CallRecord] = []
    group: list[CallRecord] = []

    def flush() -> None:
        if not group:
            return
        if len(group) == 1:
            out.append(group[0])
        else:
            peer = next((g.peer for g in group if g.peer is not None), None)
            out.append(replace(group[0], op=None, peer=peer, shapes=tuple(s for g in group for s in g.shapes),
                               dtypes=tuple(d for g in group for d in g.dtypes), nbytes=sum(g.nbytes for g in group)))
        group.clear()

    for rec in records:
        if rec.name == "batch_isend_irecv" and rec.op:
            flush()
            out.append(replace(rec, name=rec.op, op=None))
        elif group and rec.call == group[0].call:
            group.append(rec)
        else:
            flush()
            group.append(rec)
    flush()
    return out


def _label(call: CallRecord) -> str:
    """``"broadcast"``, or ``"all_gather (a ProcessGroup method)"`` for a call not made through a
    ``torch.distributed`` function."""
    where = _SOURCE_WORDS.get(call.source)
    return f"{call.name} ({_(where)})" if where else call.name


def summary(calls: Iterable[CallRecord]) -> str:
    """``"all_reduce ×6, broadcast"``: a rank's calls in order, repeats counted (``"(none)"``)."""
    out: list[tuple[str, int]] = []
    for label in (_label(c) for c in calls):
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1] + 1)
        else:
            out.append((label, 1))
    return ", ".join(n if k == 1 else f"{n} ×{k}" for n, k in out) or _("(none)")


def _check_only(calls: Calls, allowed: Collection[str], hint: str = "") -> None:
    """Refuse any call that is not one of the ``allowed`` ``torch.distributed`` functions (a
    ``ProcessGroup`` method, a functional collective or DTensor doing the work is refused too).
    ``calls``: per rank, the :func:`_calls` list."""
    for r, rank_calls in enumerate(calls):
        extra = [c for c in rank_calls if c.name not in allowed or c.source != "torch.distributed"]
        if extra:
            names = sorted({"dist." + c.name if c.source == "torch.distributed" else _label(c) for c in extra})
            raise fail(_("rank {rank} called {names}, which this exercise does not allow (only {allowed}).").format(
                rank=r, names=", ".join(names), allowed=", ".join("dist." + a for a in sorted(allowed))),
                        hint or _("build the result from the allowed calls only."))


def world_sizes(rng: random.Random, low: int, high: int, k: int = 2) -> list[int]:
    """``k`` different world sizes drawn from ``low..high`` with ``rng``."""
    return rng.sample(range(low, high + 1), k)


def check_prediction(name: str, prediction: object, real: Callable[[], object], *,
                     normalise: Callable[[object], object] = lambda x: x, direction: str, hint: str, passed: str,
                     what: str = "") -> None:
    """Check a predicted value against ``real()`` (run on real ranks only once there is an answer).
    An unanswered prediction (``None``) gets "not answered yet" and ``direction``; one that
    ``normalise`` (e.g. :func:`integer`, :func:`number_rows`) refuses, a ✗ saying it lacks the
    expected form (``what`` describes it); a wrong one a ✗ with ``hint``, never the right value; a
    right one ✓, ``passed`` and what the ranks did.

    Raises:
        CheckFailed: a malformed or wrong prediction.
    """
    if prediction is None:
        return not_answered(name, direction, what=N_("Set `prediction` in the exercise cell above"))
    try:
        answer = normalise(prediction)
    except Exception:  # noqa: BLE001 - any malformed prediction gets the same message
        raise fail(_("your prediction {prediction} does not have the expected form{what}.").format(
            prediction=repr(prediction), what=what), hint) from None
    value = real()
    if answer != value:
        raise fail(_("not quite: you predicted {prediction}.").format(prediction=repr(prediction)), hint)
    _say_passed(passed + "\n  " + _("the real ranks: {value}").format(value=value))


def solution_code(source: str) -> str:
    """The code of a notebook ``solution`` cell: the cell holds the solution as comments (so running
    it defines nothing an answer could use), after a header ending in a line that is just ``#``;
    this returns those lines uncommented (``"# x = 1"`` -> ``"x = 1"``).

    Raises:
        ValueError: the cell has no ``#`` line ending its header.
    """
    lines = source.splitlines()
    try:
        start = lines.index("#") + 1
    except ValueError:
        raise ValueError("a solution cell starts with comment lines and a line that is just '#', then the "
                         "solution, every line commented") from None
    return "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines[start:]) + "\n"


def _real(v: object) -> float:
    """``v`` as a float when it is a number a learner wrote (int, float, a numpy number); a str such as
    ``"44"``, a bool or anything else raises ``TypeError`` (a prediction is a number, not its text)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{v!r} is not a number")
    return float(v)


def integer(v: object) -> int:
    """``v`` when it is an integer (int, a numpy integer): ``44.9``, ``"44"`` and ``True`` raise ``TypeError``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{v!r} is not an integer")
    return int(v)


def number_rows(x: object, cast: Callable[[object], float] = _real) -> list[list[float] | None]:
    """A prediction of one row of numbers per rank (``None`` for an undefined rank) as lists of
    floats (``cast`` of each value); anything else raises (a str such as ``"44"`` is not a number;
    what is not a list of rows, TypeError)."""
    return [None if row is None else [cast(v) for v in _iterable(row)] for row in _iterable(x)]


def _iterable(x: object) -> Iterable[object]:
    """``x`` when it can be iterated, else the TypeError iterating it raises."""
    if not isinstance(x, Iterable):
        raise TypeError(f"{type(x).__name__!r} object is not iterable")
    return x


def _is_stub(fn: RankFn) -> bool:
    """True for a function whose body is only ``...``, ``pass`` or a docstring (an unfinished answer):
    its code refers to no name and holds no constant but ``None``, ``...`` and its docstring."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    return not code.co_names and all(c is None or c is Ellipsis or isinstance(c, str) for c in code.co_consts)


def _check_params(fn: object, call: str) -> RankFn:
    """Refuse, before any rank starts, a function that cannot be called as ``call`` says
    (e.g. ``"my_broadcast(rank, world_size, src, tensor)"``); return it."""
    if not callable(fn):
        raise fail(_("{name} is {value}, not a function.").format(name=call.split("(")[0], value=repr(fn)),
                    _("define it as: def {call}: ...").format(call=call))
    params = call.split("(", 1)[1].rstrip(")").split(", ")
    try:
        inspect.signature(fn).bind(*params)
    except TypeError:
        raise fail(_("{name} takes {signature}, but the check calls it as {call}.").format(
            name=call.split("(")[0], signature=inspect.signature(fn), call=call),
                    _("define it as: def {call}: ...").format(call=call)) from None
    except ValueError:  # no signature (a builtin): let the call itself fail
        pass
    return fn
