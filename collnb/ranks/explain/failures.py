"""Explain a failed call: find the rank that caused it and say what happened to every rank.

Each rank's end of a call is an :class:`Ending` (it returned, raised, died, or never answered).
When a call fails, :func:`root_cause` picks the rank to blame: the first that raised an error of
its own code or died; communication errors ("Connection closed by peer", a collective timeout)
only follow a root cause and never hide it; when only those exist, the culprit is a rank that
never reached the collective its peers waited in. A collective mismatch found by
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` blames one rank only when it differs from all the others.
:func:`rank_error` writes the :class:`.RankError` a learner reads.

Which timeout ended a wait is decided by :mod:`..instrument.timeouts` from what collnb set and
measured (a rank's own :class:`..instrument.timeouts.TimeoutReport`), not from gloo's words.
"""

from __future__ import annotations

import collections
import re
import signal
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Protocol, Sequence, Union

from ...i18n import N_, _
from ..errors import LaunchTimeout, RankError
from ..instrument.flight_recorder import Divergence, divergence
from ..instrument.interface import Recorded
from ..instrument.timeouts import TimeoutReport, collective_timeout_name, which_timeout
from ..protocol import Failed, Frame
from ..rankset import RankEvent, RankExit, RankFailure, RankResult
from ..serialization import loads
from .tracebacks import format_frames, waiting_in_collective, where

__all__ = ["Ending", "Witness", "conclude", "ending_of", "call_error", "root_cause", "outcomes_of", "outcome_text",
           "rank_error", "death_text", "rebuild_result", "failed_ending", "returned_diverged", "add_last_words"]

_MISMATCH = "Detected mismatch between collectives"
_CRASH_SIGNALS = {int(getattr(signal, n)) for n in ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")}
_CLOSED_FDS = N_("it closed its pipes to the launcher while it ran: the function closed file descriptors it had "
                 "not opened (os.closerange, os.close on a number it did not get from open): collnb, torch and "
                 "gloo use them. Close only the files your function opened")
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(((?:[^()]|\([^()]*\))*)\)")
_FINGERPRINT_NOISE = re.compile(r", TensorDeviceTypes=TensorOptions\((?:[^()]|\([^()]*\))*\)")
_DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(.*)", re.S)


#: How a rank's part of a call ended (``"ok"``, ``"error"``, ``"died"``), or, for a root cause only,
#: what it was blamed for (``"absent"``: never joined; ``"mismatch"``: the DETAIL check; ``"diverged"``:
#: the Flight Recorder).
EndingKind = Literal["ok", "error", "died", "absent", "mismatch", "diverged"]
#: Where still-running ranks were: ``{rank: frames}`` and ``{("state", rank): what their process said}``.
Stacks = dict[Union[int, tuple[str, int]], Union[list[Frame], str]]


@dataclass
class Ending:
    """How one rank's part of a call ended (:data:`EndingKind`), at monotonic time ``t``.

    ``value``: an ``"ok"`` rank's result payload (bytes; a set-up step's seconds), a ``"died"`` rank's
    exit code, a ``"mismatch"``'s sides ``[(fingerprint, [ranks])]``, a ``"diverged"``'s
    :class:`.Divergence`. ``rank`` is ``None`` only for a mismatch that blames no rank; its frames
    are then in ``side_frames`` (one list per side)."""

    rank: int | None
    kind: EndingKind
    t: float
    exc_type: str = ""
    message: str = ""
    frames: list[Frame] = field(default_factory=list)
    comm: bool = False
    value: Any = None
    seq: int | None = None
    intact: bool = True
    timeout_name: str = ""  # which timeout fired, in words (communication errors only)
    timeout: TimeoutReport | None = None  # the rank's report (communication errors only)
    flight_recorder: list[dict[str, Any]] | None = None  # its Flight Recorder entries (flight_recorder=N)
    guess: bool | str = False  # root cause only: blamed from the messages alone (True, or the words why)
    side_frames: list[list[Frame]] = field(default_factory=list)  # a mismatch without a culprit: per side


def failed_ending(rank: int, t: float, msg: Failed, collective_timeout: float | None) -> Ending:
    """The :class:`Ending` of a rank's :class:`.Failed` answer at monotonic time ``t``: the rank's
    own :class:`.TimeoutReport`, or, when it measured nothing (an engine, a failed set-up), the one
    the message's wording gives (:func:`which_timeout` without a measurement)."""
    report = msg.timeout
    if report is None and msg.comm:
        report = which_timeout([(collective_timeout, collective_timeout_name(collective_timeout), None)],
                               msg.message)
    return Ending(rank, "error", t, msg.exc_type, msg.message, msg.frames, msg.comm,
                  timeout_name=report.timeout if report is not None and report.fired else "", timeout=report,
                  flight_recorder=_entries(msg.recorded))


def _entries(recorded: Recorded | None) -> list[dict[str, Any]] | None:
    """The Flight Recorder entries a rank's instruments took (``None`` when none were asked for)."""
    return recorded.flight_recorder if recorded is not None else None


def ending_of(event: RankEvent, collective_timeout: float | None) -> Ending:
    """How rank ``event.rank``'s part of the call ended, read from one answer of the per-rank event
    stream that every rank set (local ranks, engines) yields: a :class:`..rankset.RankResult` is
    ``"ok"`` (its ``value`` the payload, or a set-up step's seconds), a :class:`..rankset.RankFailure`
    ``"error"`` (:func:`failed_ending`), a :class:`..rankset.RankExit` ``"died"`` (its ``value`` the
    exit code).

    Raises:
        TypeError: ``event`` is a :class:`..rankset.RankOutput` (output says nothing of how a rank
            ended) or not an event at all.
    """
    if isinstance(event, RankResult):
        return Ending(event.rank, "ok", event.t, value=event.payload if event.payload is not None else event.seconds,
                      seq=event.seq, intact=event.intact, flight_recorder=_entries(event.recorded))
    if isinstance(event, RankFailure):
        return failed_ending(event.rank, event.t, event.failed, collective_timeout)
    if isinstance(event, RankExit):
        return Ending(event.rank, "died", event.t, value=event.exitcode, message=event.message)
    raise TypeError(f"ending_of reads a rank's answer (RankResult, RankFailure, RankExit); got {event!r}")


def _duration(seconds: float) -> str:
    """``"19 ms"``, ``"1.2 s"``: a measured wait in words."""
    return f"{max(seconds * 1000, 1):.0f} ms" if seconds < 1 else f"{seconds:.2g} s"


def _ended_early(first: int | None, culprit: int, report: TimeoutReport, returned: bool) -> str:
    """Words for a wait that ended before any timeout ran out (``report.fired`` is False)."""
    after = _(" after {duration}").format(duration=_duration(report.waited)) if report.waited is not None else ""
    before = (_(", before {timeout} could run out").format(timeout=report.timeout) if report.timeout
              else _(", before any timeout ran out"))
    if report.cause == "pair closed":
        return _("; rank {rank}'s wait ended{after}{before}: an earlier timeout in the same group had closed "
                 "its connections").format(rank=first, after=after, before=before)
    if returned:
        return _(": its function had already returned, and the groups it made closed with it, which ended "
                 "rank {rank}'s wait{after}{before}. Every rank must call the same collectives in the same "
                 "order").format(rank=first, after=after, before=before)
    return _("; rank {rank}'s wait ended{after}{before}, when its connection to rank {culprit} closed").format(
        rank=first, after=after, before=before, culprit=culprit)


def root_cause(failed: Sequence[Ending], endings: dict[int, Ending], pending: Sequence[int], stacks: Stacks) -> Ending:
    """The :class:`Ending` to blame among ``failed`` (see the module's docstring); ``stacks`` says
    where still-running ranks were (``{rank: frames}``, ``{("state", rank): text}``)."""
    primary = [e for e in failed if e.kind == "died" or not e.comm]
    detail = bool(primary) and all(_MISMATCH in e.message for e in primary)
    diverged = _diverged(failed) if detail or not primary else None  # structured entries before any text
    if diverged is not None:
        return diverged
    mismatch = _mismatch(failed) if detail else None
    if mismatch is not None:
        return mismatch
    if primary:
        return min(primary, key=lambda e: e.t)
    # Only communication errors: the culprit is a rank that never joined the collective: one whose
    # function returned or one still running elsewhere. A rank still waiting in a collective joined
    # one (when a returned rank's groups close, some peers fail at once and others are still waiting).
    first = min(failed, key=lambda e: e.t)
    returned = [r for r, e in endings.items() if e.kind == "ok"]
    elsewhere = [r for r in pending if not waiting_in_collective(_frames(stacks, r))]
    absent = sorted(elsewhere + returned) or list(pending)
    if absent:
        names = ", ".join(map(str, absent))
        culprit = absent[0]
        frames = _frames(stacks, culprit) if culprit in pending else []
        state = (_("; rank {rank} was {where}").format(rank=culprit, where=where(frames)) if frames else
                 "; " + _("rank {rank} {state}").format(
                     rank=culprit, state=_state(stacks, culprit) or _("did not say where it was"))
                 if culprit in pending else "")
        reports = [e.timeout or TimeoutReport(e.timeout_name, fired=True if e.timeout_name else None)
                   for e in sorted(failed, key=lambda e: e.t)]
        ran_out = next((r for r in reports if r.fired), None)
        early = next((r for r in reports if r.fired is False), None)
        head = _("rank {ranks} never reached the collective that rank {rank} was waiting in").format(
            ranks=names, rank=first.rank)
        if ran_out is not None:
            head += _(" until {timeout} ran out").format(timeout=ran_out.timeout)
        if ran_out is None and early is not None:
            text = head + _ended_early(first.rank, culprit, early, culprit in returned) + state
        elif culprit in returned:
            text = head + _(": its function had already returned. Every rank must call the same "
                            "collectives in the same order")
        else:
            text = head + state
        return Ending(culprit, "absent", first.t, "DidNotJoin", text, frames, True)
    note: bool | str = True  # collnb's guess from the messages alone (rank_error words it)
    entries = {e.rank: e.flight_recorder for e in failed if e.flight_recorder is not None and e.rank is not None}
    if entries:
        d = divergence(entries) if len(entries) > 1 else None
        if d is None:
            return first  # the Flight Recorder was on and every rank's collectives agree: no guess to flag
        note = _("collnb's guess: rank {rank} raised first. The ranks' Flight Recorders disagree at "
                 "collective_seq_id {seq} ({reason}), but no rank differs from all the others, so none "
                 "of them is named the culprit: compare the sides").format(rank=first.rank, seq=d.seq, reason=d.reason)
    return Ending(first.rank, first.kind, first.t, first.exc_type, first.message, first.frames, first.comm,
                 timeout_name=first.timeout_name, timeout=first.timeout, guess=note)


def _frames(stacks: Stacks, rank: int) -> list[Frame]:
    """Where still-running rank ``rank`` was (its frames; ``[]`` when it did not say)."""
    frames = stacks.get(rank)
    return frames if isinstance(frames, list) else []


def _state(stacks: Stacks, rank: int) -> str:
    """What rank ``rank``'s process said when it did not say where it was (``""`` when nothing)."""
    state = stacks.get(("state", rank))
    return state if isinstance(state, str) else ""


def _decided(entries: dict[int, list[dict[str, Any]]]) -> tuple[Divergence, int, str] | None:
    """``(divergence, culprit rank, the group in words)`` of ranks' Flight Recorder entries
    (``{rank: entries}``), or ``None`` with fewer than two ranks' entries, entries that agree, or no
    rank in a strict minority (:func:`.flight_recorder.divergence`)."""
    if len(entries) < 2:
        return None
    d = divergence(entries)
    if d is None or not d.decided:
        return None
    group = (_("the default group") if d.group[1] == "default_pg"
             else _("its process group") if not any(d.group)  # recorded without a name (seen under DETAIL)
             else _("group {number} ({name})").format(number=d.group[0], name=d.group[1]))
    return d, d.ranks[0], group


def _diverged(failed: Sequence[Ending]) -> Ending | None:
    """Root cause read from the failed ranks' Flight Recorder entries (``launch(flight_recorder=N)``):
    an :class:`Ending` of kind ``"diverged"`` for the rank whose collective differs from every other
    rank's at the first sequence number where they disagree (:func:`.flight_recorder.divergence`), or
    ``None`` when the recorder was off, the entries agree, or no rank is a strict minority."""
    found = _decided({e.rank: e.flight_recorder for e in failed if e.flight_recorder is not None and e.rank is not None})
    if found is None:
        return None
    d, culprit, group = found
    ending = next(e for e in failed if e.rank == culprit)
    text = _("its collective_seq_id {seq} in {group} differs from the other ranks' (read from every rank's "
             "Flight Recorder): {reason}. The other ranks then waited in a collective that "
             "{ranks} never called the same way, until a timeout ran out. Every rank must call "
             "the same collectives, in the same order, with the same shapes").format(
                 seq=d.seq, group=group, reason=d.reason, ranks=_ranks_text(d.ranks))
    return Ending(culprit, "diverged", ending.t, "CollectiveMismatch", text, ending.frames, True, value=d)


def call_error(ranks: Sequence[int], endings: dict[int, Ending], failed: Sequence[Ending], pending: Sequence[int],
               stacks: Stacks, phase: str) -> RankError | LaunchTimeout:
    """The error of a call that did not end with every rank's answer: :class:`.LaunchTimeout`
    naming the ``pending`` ranks when none ``failed``, else the :class:`.RankError` of the root
    cause. ``ranks``: the call's rank numbers; ``endings``: ``{rank: Ending}``; ``stacks``: where
    still-running ranks were (see :func:`root_cause`); ``phase``: ``"init"`` or ``"run"``."""
    if not failed:
        outcomes = outcomes_of(ranks, endings, stacks, None)
        waiting = [r for r in pending if waiting_in_collective(_frames(stacks, r))]
        finished = [r for r in ranks if r in endings]
        if waiting and finished:
            # a group with a timeout= longer than the launch's: more time would not help
            advice = _("rank(s) {waiting} were waiting in a collective that rank(s) {finished} never called "
                       "(their functions had returned); every rank of a group must call the same collectives in "
                       "the same order. A longer timeout will not help: the group's own timeout= was longer than "
                       "the launch's").format(waiting=", ".join(map(str, waiting)),
                                               finished=", ".join(map(str, finished)))
        else:
            advice = _("raise the limit with launch(..., timeout=SECONDS)")
        return LaunchTimeout(
            _("timed out during {phase}: rank(s) {ranks} had not finished ({advice})").format(
                phase=phase, ranks=", ".join(map(str, pending)), advice=advice) + "\n" + outcome_text(outcomes),
            list(pending), outcomes)
    root = root_cause(failed, endings, pending, stacks)
    outcomes = outcomes_of(ranks, endings, stacks, root)
    return rank_error(root, outcomes, phase)


def returned_diverged(ranks: Sequence[int], endings: dict[int, Ending], results: Sequence[Any]) -> RankError | None:
    """The :class:`.RankError` of a call whose every rank returned although their Flight Recorder
    entries (``launch(..., flight_recorder=N)``; ``endings[r].flight_recorder``) disagree, e.g. an
    ``all_to_all`` whose ranks send 31 elements in all but receive 32 (gloo does not check: a rank
    receives a short message and keeps stale values). ``None`` when the recorder was off, the entries
    agree or no rank is a strict minority. ``results``: the ranks' results, kept on the error as
    ``.results`` (rank order) for a learner to look at."""
    found = _decided({r: fr for r in ranks if (fr := endings[r].flight_recorder) is not None})
    if found is None:
        return None
    d, culprit, group = found
    text = f"rank {culprit}: CollectiveMismatch: " + _(
        "its collective_seq_id {seq} in {group} differs from the other ranks' (read from every rank's Flight "
        "Recorder): {reason}. Every rank returned, but the collective did not do what its callers asked: their "
        "results are likely wrong (kept in this error's .results). Every rank must call the same collectives, "
        "in the same order, with matching sizes").format(seq=d.seq, group=group, reason=d.reason)
    outcomes = {r: _("finished") + (_(" (its collective differed)") if r in d.ranks else "") for r in ranks}
    summary = text
    text += "\n\n" + _("What happened to every rank:") + "\n" + outcome_text(outcomes)
    err = RankError(text, culprit, "CollectiveMismatch", "", outcomes)
    err.summary = summary
    err.results = list(results)
    err.divergence = d
    return err


class Witness(Protocol):
    """What a local rank set saw of one rank besides its answer (:class:`..local.answers.RankProcess`): its
    last output lines, the first lines of its crash report, and when its result pipe closed while it
    lived (monotonic s, or ``None``)."""

    rank: int
    last: collections.deque[str]
    report: list[str]
    lost_at: float | None


def conclude(ranks: Sequence[int], answers: Mapping[int, RankEvent], collective_timeout: float | None,
             phase: Literal["init", "run"], stacks: Stacks, witnesses: Mapping[int, Witness] | None = None) -> list[Any]:
    """What the answers of one call come to, read from the per-rank event stream every rank set yields.

    Args:
        ranks: the call's rank numbers.
        answers: ``{rank: RankEvent}`` in the order they came (:func:`..local.answers.gather`); a rank that
            never answered is absent.
        collective_timeout: the launch's timeout of every collective (s), to name a timeout.
        phase: ``"init"`` (a set-up step: nothing to rebuild) or ``"run"``.
        stacks: where the ranks that never answered were (see :func:`root_cause`).
        witnesses: what the rank set saw of each rank (local ranks), for the last words of one that
            died (:func:`add_last_words`); ``None`` when it saw nothing more.

    Returns:
        every rank's rebuilt return value, rank order (``[]`` for ``"init"``).

    Raises:
        LaunchTimeout: no rank failed, but some never answered.
        RankError: the root cause of a failure (:func:`call_error`), a return value that cannot be
            rebuilt here (:func:`rebuild_result`), or ranks whose Flight Recorders disagree although
            every rank returned (:func:`returned_diverged`).
    """
    endings = {r: ending_of(a, collective_timeout) for r, a in answers.items()}
    failed = [e for e in endings.values() if e.kind != "ok"]
    pending = [r for r in ranks if r not in endings]
    if failed or pending:
        err = call_error(ranks, endings, failed, pending, stacks, phase)
        if witnesses is not None:
            add_last_words(err, endings, witnesses)
        raise err
    if phase == "init":
        return []
    results = [rebuild_result(r, endings[r].value) for r in ranks]
    diverged = returned_diverged(ranks, endings, results)
    if diverged is not None:  # launch(flight_recorder=N): the ranks' collectives disagreed
        raise diverged
    return results


def add_last_words(err: RankError | LaunchTimeout, endings: Mapping[int, Ending], witnesses: Mapping[int, Witness]) -> None:
    """Name a rank that died (at its start: a full disk, a removed pool directory; or later) with its
    own last words, in ``err``'s first paragraph: the lines it printed last (its traceback, "No space
    left on device"; its crash report when faulthandler wrote one), and why its pipes closed if the
    function closed them. Nothing changes unless ``err`` blames a rank whose ending is ``"died"``."""
    if not isinstance(err, RankError) or err.rank is None or endings.get(err.rank) is None \
            or endings[err.rank].kind != "died" or err.rank not in witnesses:
        return
    r = witnesses[err.rank]
    head, _sep, rest = err.args[0].partition("\n")
    code = endings[err.rank].value
    # faulthandler writes every crash's report to the rank's stderr: a crash without one had it closed
    silent_crash = isinstance(code, int) and -code in _CRASH_SIGNALS and not r.report
    if r.lost_at is not None or silent_crash:
        head += "; " + _(_CLOSED_FDS)
    words = r.report or list(r.last)
    if words:
        what = (_("Its crash report (rank {rank}):") if r.report else _("Last output (rank {rank}):")).format(
            rank=r.rank)
        head += f"\n\n{what}\n" + "\n".join("  " + line for line in words)
    err.args = (head + ("\n" + rest if rest else ""),) + err.args[1:]
    if not err.rank_traceback and words:
        err.rank_traceback = "\n".join(words)


def outcomes_of(ranks: Iterable[int], endings: dict[int, Ending], stacks: Stacks, root: Ending | None) -> dict[int, str]:
    """``{rank: what happened to it}`` (str) for every rank number in ``ranks``."""
    out = {}
    for rank in ranks:
        e = endings.get(rank)
        if e is None:
            at = where(_frames(stacks, rank)) or _state(stacks, rank)
            out[rank] = _("still running, stopped by collnb") + (f" ({at})" if at else "")
        elif e.kind == "ok":
            out[rank] = _("finished")
        elif e.kind == "died":
            out[rank] = death_text(e.value)
        else:
            first = _FINGERPRINT_NOISE.sub("", e.message.splitlines()[0] if e.message else "")
            if len(first) > 240:
                first = first[:240] + " ..."
            tag = _(" (follows the root cause)") if root is not None and e.rank != root.rank and e.comm else ""
            out[rank] = f"{e.exc_type}: {first}{tag}"
    return out


def outcome_text(outcomes: dict[int, str]) -> str:
    """``outcomes`` as indented lines ``"  rank r: ..."``, in rank order."""
    return "\n".join(f"  rank {k}: {v}" for k, v in sorted(outcomes.items()))


def rank_error(root: Ending, outcomes: dict[int, str], phase: str) -> RankError:
    """The :class:`.RankError` for root cause ``root`` (an :class:`Ending`) of a call in ``phase``
    (``"init"`` or ``"run"``)."""
    if root.kind == "mismatch":
        return _mismatch_error(root, outcomes, phase)
    if root.kind == "died":
        exc_type = "Killed" if (root.value or 0) < 0 else "Exited"
        head = f"rank {root.rank}: {exc_type}: {death_text(root.value)}"
        tb = ""
    else:
        exc_type = root.exc_type
        head = f"rank {root.rank}: {root.exc_type}: {_FINGERPRINT_NOISE.sub('', root.message)}"
        tb = format_frames(root.frames)
    text = head
    guess: str | None = None
    if isinstance(root.guess, str):
        guess = root.guess
    elif root.guess:
        guess = _(
            "collnb's guess, from the messages alone: every rank failed waiting in a collective and rank "
            "{rank} raised first, so the rank that went wrong may be another one. With "
            "collnb.launch(..., flight_recorder=200) collnb reads every rank's recent collectives (torch's "
            "Flight Recorder) and names the rank whose collective differed").format(rank=root.rank)
    if guess:
        text += "\n\n" + guess
    summary = text
    if tb:
        text += "\n\n" + _traceback_of(_ranks_text([root.rank] if root.rank is not None else [])) + "\n" + tb.rstrip()
    if phase == "init":
        text += "\n\n" + _("(while initialising the process group)")
    text += "\n\n" + _("What happened to every rank:") + "\n" + outcome_text(outcomes)
    err = RankError(text, root.rank, exc_type, tb, outcomes)
    err.summary, err.guess = summary, guess
    return err


def _mismatch_error(root: Ending, outcomes: dict[int, str], phase: str) -> RankError:
    """The TORCH_DISTRIBUTED_DEBUG=DETAIL check found ranks calling different collectives
    (op, shapes or dtypes). Blame one rank only when it differs from all the others."""
    sides: list[tuple[str, list[int]]] = root.value  # [(fingerprint, [ranks])], largest side first
    lines = [f"  {_ranks_text(ranks)}: {fp}" for fp, ranks in sides]
    if root.rank is not None:
        others = sorted(r for fp, ranks in sides for r in ranks if r != root.rank)
        head = f"rank {root.rank}: {root.exc_type}: {_MISMATCH} on ranks: " + _(
            "rank {rank} called a different collective from every other rank ({others} agree)").format(
                rank=root.rank, others=_ranks_text(others))
        tbs: list[tuple[list[int], list[Frame]]] = [([root.rank], root.frames)]
    else:
        every = sorted(r for _, ranks in sides for r in ranks)
        head = f"{_ranks_text(every)}: {root.exc_type}: {_MISMATCH} on ranks: " + _(
            "no rank differs from all the others, so none of them is called the root cause; each side is shown")
        tbs = []  # one traceback per place in the code (the sides often share one line)
        for (_fp, ranks), frames in zip(sides, root.side_frames):
            same = [i for i, (_, f) in enumerate(tbs) if [x[:3] for x in f] == [x[:3] for x in frames]]
            if same:
                tbs[same[0]] = (tbs[same[0]][0] + ranks, tbs[same[0]][1])
            else:
                tbs.append((list(ranks), frames))
    text = head + ":\n" + "\n".join(lines)
    if root.message:
        text += f"\n{root.message}"
    text += "\n" + _("Every rank of a group must call the same collectives, in the same order, with the same "
                     "shapes and dtypes.")
    summary = text
    tb = ""
    for ranks, frames in tbs:
        part = format_frames(frames).rstrip()
        if part:
            tb += "\n\n" + _traceback_of(_ranks_text(ranks)) + "\n" + part
    text += tb
    if phase == "init":
        text += "\n\n" + _("(while initialising the process group)")
    text += "\n\n" + _("What happened to every rank:") + "\n" + outcome_text(outcomes)
    err = RankError(text, root.rank, root.exc_type, tb.strip(), outcomes)
    err.mismatch = {fp: ranks for fp, ranks in sides}
    err.summary = summary
    return err


def _ranks_text(ranks: Iterable[int]) -> str:
    """``"rank 2"``, ``"ranks 0, 1 and 3"``."""
    ordered = sorted(ranks)
    if len(ordered) == 1:
        return _("rank {rank}").format(rank=ordered[0])
    return _("ranks {ranks} and {last}").format(ranks=", ".join(map(str, ordered[:-1])), last=ordered[-1])


def _traceback_of(who: str) -> str:
    """``"Traceback of rank 1 (most recent call last):"`` (``who``: :func:`_ranks_text`'s words)."""
    return _("Traceback of {who} (most recent call last):").format(who=who)


def _mismatch(failed: Sequence[Ending]) -> Ending | None:
    """Root cause of a DETAIL-check mismatch: an :class:`Ending` of kind ``"mismatch"`` whose ``rank``
    is the one rank that differs from all the others (``None`` when no rank does, e.g. two ranks,
    or three sides), ``value`` the sides ``[(fingerprint, [ranks])]`` and ``message`` what
    differs. ``None`` when the messages cannot be read."""
    fps: dict[int, str] = {}
    frames: dict[int, list[Frame]] = {}
    found = [(e, int(rank), fp.strip()) for e in sorted(failed, key=lambda e: e.t)
             for rank, fp in _FINGERPRINT.findall(_FINGERPRINT_NOISE.sub("", e.message))]
    # A rank's own account of its call first: when the two calls differ in kind their fingerprints differ in
    # length and torch (2.13, 2.15) misreads the other side's (rank 1's all_to_all read as "OpType=REDUCE" by the
    # others, theirs as "OpType=GATHER" by rank 1), while each reads its own right.
    for e, rank, fp in found:
        if rank == e.rank:
            fps.setdefault(rank, fp)
    for _event, rank, fp in found:
        fps.setdefault(rank, fp)
    for e in sorted(failed, key=lambda e: e.t):
        if e.rank is not None:
            frames.setdefault(e.rank, e.frames)
    if len(set(fps.values())) < 2:
        return None
    seqs = {m.group(1) for fp in fps.values() for m in [re.search(r"SequenceNumber=(\d+)", fp)] if m}
    if len(seqs) == 1:  # the same operation number everywhere: leave it out
        fps = {r: re.sub(r"SequenceNumber=\d+,?\s*", "", fp) for r, fp in fps.items()}
    by_fp: dict[str, list[int]] = {}
    for rank, fp in sorted(fps.items()):
        by_fp.setdefault(fp, []).append(rank)
    sides = sorted(by_fp.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    odd = None
    if len(sides) == 2 and len(sides[1][1]) == 1 and len(sides[0][1]) >= 2:
        odd = sides[1][1][0]
    first = min(failed, key=lambda e: e.t)
    differ = ""
    for e in sorted(failed, key=lambda e: (e.rank != odd, e.rank)):  # the odd rank's, or the lowest's
        m = _DIFFER.search(e.message)
        if m:  # torch's text: "Tensor Tensor dtypes: Floatvs Long"
            aspects = re.sub(r"\s+", " ", m.group(1)).strip().replace("Tensor Tensor ", "Tensor ")
            differ = "Collectives differ in: " + re.sub(r"(\S)vs ", r"\1 vs ", aspects)
            break
    ops = {r: m.group(1) for r, fp in fps.items() for m in [re.search(r"OpType=(\w+)", fp)] if m}
    told = re.search(r"Op type: (\w+) vs (\w+)", differ)
    if told and not {told.group(1), told.group(2)} <= set(ops.values()) and len(set(ops.values())) == 2:
        # torch's line compares a misread fingerprint (see above): say what the ranks themselves ran
        lead = (ops.get(odd) if odd is not None else None) or sorted(set(ops.values()))[0]
        differ = "Collectives differ in: Op type: " + " vs ".join([lead] + sorted(set(ops.values()) - {lead}))
    if odd is not None:
        return Ending(odd, "mismatch", first.t, first.exc_type, differ, frames.get(odd, []), value=sides)
    return Ending(None, "mismatch", first.t, first.exc_type, differ, value=sides,
                 side_frames=[frames.get(ranks[0], []) for _, ranks in sides])


def death_text(exitcode: int | None) -> str:
    """How a rank process ended, in words: ``"killed by SIGKILL"``, ``"exited with code 3 ..."``,
    ``"died"`` (``exitcode`` unknown)."""
    if exitcode is None:
        return _("died")
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = _("signal {number}").format(number=-exitcode)
        return _("killed by {signal}").format(signal=name)
    return _("exited with code {code} without returning (os._exit or a crash)").format(code=exitcode)


def rebuild_result(rank: int, payload: bytes) -> Any:
    """Rank ``rank``'s return value from its :class:`.Result` payload, or :class:`.RankError` when it
    cannot be rebuilt here."""
    try:
        return loads(payload)
    except Exception as exc:  # noqa: BLE001 - e.g. a class whose __setstate__ fails here
        raise RankError(
            f"rank {rank}: {type(exc).__name__}: " + _(
                "rank {rank}'s return value was sent but could not be rebuilt in the launcher ({error}). Return "
                "tensors, numbers, strings, or lists/tuples/dicts of them").format(rank=rank, error=exc),
            rank, type(exc).__name__, "", {rank: _("finished; its result could not be rebuilt")}) from exc
