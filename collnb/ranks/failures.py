"""Explain a failed call: find the rank that caused it and say what happened to every rank.

Each rank's end of a call is an :class:`Event` (it returned, raised, died, or never answered).
When a call fails, :func:`root_cause` picks the rank to blame: the first that raised an error of
its own code or died; communication errors ("Connection closed by peer", a collective timeout)
only follow a root cause and never hide it; when only those exist, the culprit is a rank that
never reached the collective its peers waited in. A collective mismatch found by
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` blames one rank only when it differs from all the others.
:func:`rank_error` writes the :class:`.RankError` a learner reads.

Which timeout ended a wait is decided from what collnb set and measured, not from gloo's words:
:func:`which_timeout` takes the timeouts that applied to the call (``collective_timeout``, a group's
own ``timeout=``, a call's) and how long the call had waited, and picks the one whose value fits
the wait; gloo's text ("... in 1500 ms", "Timed out waiting 1500ms") only breaks a tie or stands
in when nothing was measured. The wording says "in 1500 ms" even when the wait ended after 20 ms
because a peer closed its connections (measured with torch 2.13), so the text alone cannot tell.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from .errors import LaunchTimeout, RankError
from .flight_recorder import divergence
from .protocol import TimeoutReport
from .serialization import loads
from .tracebacks import format_frames, where

__all__ = ["Event", "call_error", "root_cause", "outcomes_of", "outcome_text", "rank_error", "death_text", "timeout_name",
           "rebuild_result", "which_timeout", "text_hint", "failed_event", "collective_timeout_name",
           "returned_diverged"]

_MISMATCH = "Detected mismatch between collectives"
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(((?:[^()]|\([^()]*\))*)\)")
_FINGERPRINT_NOISE = re.compile(r", TensorDeviceTypes=TensorOptions\((?:[^()]|\([^()]*\))*\)")
_DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(.*)", re.S)
# gloo's and torch's ways of saying how long a timeout was (torch 2.13; tests/data/gloo_timeouts.json):
# "Timed out waiting 1500ms for recv operation to complete", "Rank 1 failed to pass monitoredBarrier
# in 1500 ms", "Rank 0 timed out in monitoredBarrier after 1500 ms.", NCCL's "Timeout(ms)=1500".
_TIMEOUT_MS = re.compile(r"[Tt]imed out waiting (\d+) ?ms|monitoredBarrier (?:in|after) (\d+) ?ms|Timeout\(ms\)=(\d+)")
# ... and of saying the wait ended because a connection closed (no timeout ran out on this rank)
_PEER_CLOSED = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
_PAIR_CLOSED = "Application timeout caused pair closure"  # gloo: an earlier timeout closed the group's pairs


@dataclass
class Event:
    """How one rank's part of a call ended (``kind``: ``"ok"``, ``"error"``, ``"died"``; the root
    cause may also be ``"absent"`` or ``"mismatch"``), at monotonic time ``t``."""

    rank: int
    kind: str          # "ok", "error", "died"
    t: float
    exc_type: str = ""
    message: str = ""
    frames: list = field(default_factory=list)
    comm: bool = False
    value: Any = None
    seq: Any = None
    intact: bool = True
    calls: Any = None
    timeline: Any = None
    timeout_name: str = ""  # which timeout fired, in words (communication errors only)
    timeout: Any = None     # the rank's TimeoutReport (communication errors only)
    flight_recorder: Any = None  # the rank's Flight Recorder entries (launch(flight_recorder=N), comm errors)
    guess: Any = False      # root cause only: blamed from the messages alone (True, or the words why: str)


def timeout_name(text, collective_timeout):
    """Which timeout a communication error's message says ran out, in words, read from its wording
    alone (see :func:`which_timeout`); ``""`` when it names none or says a connection closed."""
    report = which_timeout([(collective_timeout, collective_timeout_name(collective_timeout), None)], text)
    return report.timeout if report.fired else ""


def collective_timeout_name(seconds):
    """``"collective_timeout (1.5 s)"``: the launch's timeout for every collective, in words."""
    return "collective_timeout" if seconds is None else f"collective_timeout ({seconds:g} s)"


def text_hint(text):
    """What a communication error's wording says about its wait: ``(seconds, cause)``. ``seconds``:
    the length of the timeout it names (``None`` when it names none, or when it says a connection
    closed: then the number is the timeout that was running, not one that ran out); ``cause``:
    ``"peer closed"``, ``"pair closed"`` or ``""``. The one place collnb reads gloo's text."""
    text = text or ""
    if any(m in text for m in _PEER_CLOSED):
        return None, "peer closed"
    if _PAIR_CLOSED in text:
        return None, "pair closed"
    m = _TIMEOUT_MS.search(text)
    return (int(next(g for g in m.groups() if g)) / 1000 if m else None), ""


# Matching a measured wait to a timeout of s seconds. It cannot fire before s has passed since the
# call began: gloo starts its clock when the operation starts, after the wrapper read the rank's
# clock (both CLOCK_MONOTONIC). Below s lie only clock reads and a peer that entered a few ms sooner,
# whose own timeout closed the connection first: 1% + 10 ms (measured: 0.993 s for 1 s). It fires
# late by the time a loaded machine takes to wake the waiting thread, raise and unwind, and by what
# ran before the operation in the same call (DETAIL's monitored barrier): over 160 timeouts on real
# ranks, two captures at once on the 2-core machine at load average 5 to 9, at most 0.155 s late,
# 1.17 times the timeout (tests/test_timeout_naming.py captures them). s/2 + 1 s leaves six times
# that; a wait beyond it is still named, by the text or by the longest timeout below it.
def _fits(seconds, waited):
    return _low(seconds) <= waited <= 1.5 * seconds + 1.0


def _low(seconds):
    return 0.99 * seconds - 0.01


def _same(a, b):
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)


def which_timeout(candidates, text="", at_most=None) -> TimeoutReport:
    """Decide which timeout ended a failed communication call.

    Args:
        candidates: the timeouts that applied to the call, ``[(seconds, name, waited)]``:
            ``seconds`` (float or ``None`` when unset), ``name`` in words (``"collective_timeout
            (1.5 s)"``), ``waited`` the seconds measured on that timeout's own clock (since the
            call, or since ``Work.wait``, began; ``None`` when not measured).
        text: the error's message: a hint (:func:`text_hint`) used only when the measurement
            cannot decide (two timeouts fit, or nothing was measured).
        at_most: an upper bound on the wait when no call was measured (seconds since the rank's
            function began): a timeout longer than that cannot have run out.

    Returns:
        a :class:`.TimeoutReport`. The one timeout whose value fits the measured wait
        (``source="measured"``); of several, the one the text names, else the longest (a shorter
        one would have fired first). A wait shorter than every timeout: ``fired=False``, the wait
        ended early (a peer closed). Nothing fits or nothing measured: the timeout the text names
        (``source="text"``); else ``fired=None``.
    """
    hint, cause = text_hint(text)
    cands = [(float(s), n, w) for s, n, w in candidates if s is not None]
    measured = [c for c in cands if c[2] is not None]

    def fired(c, source):
        return TimeoutReport(c[1], c[0], c[2], True, "", source)

    def unset(seconds):  # a timeout collnb did not set (e.g. a learner's ProcessGroup options)
        return TimeoutReport(f"a timeout of {seconds:g} s set in the function (not collective_timeout)",
                             seconds, max((c[2] for c in measured), default=None), True, "", "text")

    fits = [c for c in measured if _fits(c[0], c[2])]
    if len(fits) == 1:
        return fired(fits[0], "measured")
    if fits:
        named = [c for c in fits if hint is not None and _same(c[0], hint)]
        return fired(named[0], "text") if named else fired(max(fits, key=lambda c: c[0]), "measured")
    bounds = [(c, c[2] if c[2] is not None else at_most) for c in cands]
    if cands and all(b is not None and b < _low(c[0]) for c, b in bounds):
        # the wait ended before any timeout collnb set could run out
        longest = max(b for _, b in bounds)
        if hint is not None and not any(_same(c[0], hint) for c in cands) and longest >= _low(hint):
            return unset(hint)
        first = min(cands, key=lambda c: c[0])
        waited = max((c[2] for c in measured), default=None)
        return TimeoutReport(first[1], first[0], waited, False, cause, "measured")
    if cause:
        first = min(cands, key=lambda c: c[0]) if cands else (None, "", None)
        return TimeoutReport(first[1], first[0], max((c[2] for c in measured), default=None), False, cause,
                             "text")
    if hint is not None:
        named = [c for c in cands if _same(c[0], hint)]
        return fired(named[0], "text") if named else unset(hint)
    below = [c for c in measured if c[2] >= _low(c[0])]
    if below:
        return fired(max(below, key=lambda c: c[0]), "measured")
    return TimeoutReport(waited=max((c[2] for c in measured), default=None))


def failed_event(rank, t, msg, collective_timeout):
    """The :class:`Event` of a rank's :class:`.Failed` answer at monotonic time ``t``: the rank's
    own :class:`.TimeoutReport`, or, when it measured nothing (an engine, a failed set-up), the one
    the message's wording gives (:func:`which_timeout` without a measurement)."""
    report = msg.timeout
    if report is None and msg.comm:
        report = which_timeout([(collective_timeout, collective_timeout_name(collective_timeout), None)],
                               msg.message)
    return Event(rank, "error", t, msg.exc_type, msg.message, msg.frames, msg.comm,
                 timeout_name=report.timeout if report is not None and report.fired else "", timeout=report,
                 flight_recorder=getattr(msg, "flight_recorder", None))


def _duration(seconds):
    """``"19 ms"``, ``"1.2 s"``: a measured wait in words."""
    return f"{max(seconds * 1000, 1):.0f} ms" if seconds < 1 else f"{seconds:.2g} s"


def _ended_early(first, culprit, report, returned):
    """Words for a wait that ended before any timeout ran out (``report.fired`` is False)."""
    after = f" after {_duration(report.waited)}" if report.waited is not None else ""
    before = f", before {report.timeout} could run out" if report.timeout else ", before any timeout ran out"
    if report.cause == "pair closed":
        return (f"; rank {first}'s wait ended{after}{before}: an earlier timeout in the same group had closed "
                f"its connections")
    if returned:
        return (f": its function had already returned, and the groups it made closed with it, which ended "
                f"rank {first}'s wait{after}{before}. Every rank must call the same collectives in the same order")
    return f"; rank {first}'s wait ended{after}{before}, when its connection to rank {culprit} closed"


def root_cause(failed, events, pending, stacks):
    """The :class:`Event` to blame among ``failed`` (see the module's docstring); ``stacks`` says
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
    returned = [e.rank for e in events.values() if e.kind == "ok"]
    elsewhere = [r for r in pending if not where(stacks.get(r)).startswith("waiting in ")]
    absent = sorted(elsewhere + returned) or list(pending)
    if absent:
        names = ", ".join(map(str, absent))
        culprit = absent[0]
        frames = (stacks.get(culprit) or []) if culprit in pending else []
        state = (f"; rank {culprit} was {where(frames)}" if frames else
                 f"; rank {culprit} {stacks.get(('state', culprit), 'did not say where it was')}"
                 if culprit in pending else "")
        reports = [e.timeout or TimeoutReport(e.timeout_name, fired=True if e.timeout_name else None)
                   for e in sorted(failed, key=lambda e: e.t)]
        ran_out = next((r for r in reports if r.fired), None)
        early = next((r for r in reports if r.fired is False), None)
        head = f"rank {names} never reached the collective that rank {first.rank} was waiting in"
        if ran_out is not None:
            head += f" until {ran_out.timeout} ran out"
        if ran_out is None and early is not None:
            text = head + _ended_early(first.rank, culprit, early, culprit in returned) + state
        elif culprit in returned:
            text = (f"{head}: its function had already returned. Every rank must call the same "
                    f"collectives in the same order")
        else:
            text = head + state
        return Event(culprit, "absent", first.t, "DidNotJoin", text, frames, True)
    note = True  # collnb's guess from the messages alone (rank_error words it)
    entries = {e.rank: e.flight_recorder for e in failed if e.flight_recorder is not None}
    if entries:
        d = divergence(entries) if len(entries) > 1 else None
        if d is None:
            return first  # the Flight Recorder was on and every rank's collectives agree: no guess to flag
        note = (f"collnb's guess: rank {first.rank} raised first. The ranks' Flight Recorders disagree at "
                f"collective_seq_id {d.seq} ({d.reason}), but no rank differs from all the others, so none "
                f"of them is named the culprit: compare the sides")
    return Event(first.rank, first.kind, first.t, first.exc_type, first.message, first.frames, first.comm,
                 timeout_name=first.timeout_name, timeout=first.timeout, guess=note)


def _decided(entries):
    """``(divergence, culprit rank, the group in words)`` of ranks' Flight Recorder entries
    (``{rank: entries}``), or ``None`` with fewer than two ranks' entries, entries that agree, or no
    rank in a strict minority (:func:`.flight_recorder.divergence`)."""
    if len(entries) < 2:
        return None
    d = divergence(entries)
    if d is None or not d.decided:
        return None
    group = "the default group" if d.group[1] == "default_pg" else f"group {d.group[0]} ({d.group[1]})"
    return d, d.ranks[0], group


def _diverged(failed):
    """Root cause read from the failed ranks' Flight Recorder entries (``launch(flight_recorder=N)``):
    an :class:`Event` of kind ``"diverged"`` for the rank whose collective differs from every other
    rank's at the first sequence number where they disagree (:func:`.flight_recorder.divergence`), or
    ``None`` when the recorder was off, the entries agree, or no rank is a strict minority."""
    found = _decided({e.rank: e.flight_recorder for e in failed if e.flight_recorder is not None})
    if found is None:
        return None
    d, culprit, group = found
    event = next(e for e in failed if e.rank == culprit)
    text = (f"its collective_seq_id {d.seq} in {group} differs from the other ranks' (read from every rank's "
            f"Flight Recorder): {d.reason}. The other ranks then waited in a collective that "
            f"{_ranks_text(d.ranks)} never called the same way, until a timeout ran out. Every rank must call "
            f"the same collectives, in the same order, with the same shapes")
    return Event(culprit, "diverged", event.t, "CollectiveMismatch", text, event.frames, True, value=d)


def call_error(ranks, events, failed, pending, stacks, phase):
    """The error of a call that did not end with every rank's answer: :class:`.LaunchTimeout`
    naming the ``pending`` ranks when none ``failed``, else the :class:`.RankError` of the root
    cause. ``ranks``: the call's rank numbers; ``events``: ``{rank: Event}``; ``stacks``: where
    still-running ranks were (see :func:`root_cause`); ``phase``: ``"init"`` or ``"run"``."""
    if not failed:
        outcomes = outcomes_of(ranks, events, stacks, None)
        waiting = [r for r in pending if where(stacks.get(r)).startswith("waiting in ")]
        finished = [r for r in ranks if r in events]
        if waiting and finished:
            # a group with a timeout= longer than the launch's: more time would not help
            advice = (f"rank(s) {', '.join(map(str, waiting))} were waiting in a collective that rank(s) "
                      f"{', '.join(map(str, finished))} never called (their functions had returned); every "
                      f"rank of a group must call the same collectives in the same order. A longer timeout "
                      f"will not help: the group's own timeout= was longer than the launch's")
        else:
            advice = "raise the limit with launch(..., timeout=SECONDS)"
        return LaunchTimeout(
            f"timed out during {phase}: rank(s) {', '.join(map(str, pending))} had not finished "
            f"({advice})\n" + outcome_text(outcomes),
            pending, outcomes)
    root = root_cause(failed, events, pending, stacks)
    outcomes = outcomes_of(ranks, events, stacks, root)
    return rank_error(root, outcomes, phase)


def returned_diverged(ranks, events, results):
    """The :class:`.RankError` of a call whose every rank returned although their Flight Recorder
    entries (``launch(..., flight_recorder=N)``; ``events[r].flight_recorder``) disagree, e.g. an
    ``all_to_all`` whose ranks send 31 elements in all but receive 32 (gloo does not check: a rank
    receives a short message and keeps stale values). ``None`` when the recorder was off, the entries
    agree or no rank is a strict minority. ``results``: the ranks' results, kept on the error as
    ``.results`` (rank order) for a learner to look at."""
    found = _decided({r: events[r].flight_recorder for r in ranks if events[r].flight_recorder is not None})
    if found is None:
        return None
    d, culprit, group = found
    text = (f"rank {culprit}: CollectiveMismatch: its collective_seq_id {d.seq} in {group} differs from the other "
            f"ranks' (read from every rank's Flight Recorder): {d.reason}. Every rank returned, but the "
            f"collective did not do what its callers asked: their results are likely wrong (kept in this error's "
            f".results). Every rank must call the same collectives, in the same order, with matching sizes")
    outcomes = {r: "finished" + (" (its collective differed)" if r in d.ranks else "") for r in ranks}
    text += "\n\nWhat happened to every rank:\n" + outcome_text(outcomes)
    err = RankError(text, culprit, "CollectiveMismatch", "", outcomes)
    err.results = list(results)
    err.divergence = d
    return err


def outcomes_of(ranks, events, stacks, root):
    """``{rank: what happened to it}`` (str) for every rank number in ``ranks``."""
    out = {}
    for rank in ranks:
        e = events.get(rank)
        if e is None:
            at = where(stacks.get(rank)) or stacks.get(("state", rank), "")
            out[rank] = "still running, stopped by collnb" + (f" ({at})" if at else "")
        elif e.kind == "ok":
            out[rank] = "finished"
        elif e.kind == "died":
            out[rank] = death_text(e.value)
        else:
            first = _FINGERPRINT_NOISE.sub("", e.message.splitlines()[0] if e.message else "")
            if len(first) > 240:
                first = first[:240] + " ..."
            tag = " (follows the root cause)" if root is not None and e.rank != root.rank and e.comm else ""
            out[rank] = f"{e.exc_type}: {first}{tag}"
    return out


def outcome_text(outcomes):
    """``outcomes`` as indented lines ``"  rank r: ..."``, in rank order."""
    return "\n".join(f"  rank {k}: {v}" for k, v in sorted(outcomes.items()))


def rank_error(root, outcomes, phase):
    """The :class:`.RankError` for root cause ``root`` (an :class:`Event`) of a call in ``phase``
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
    if isinstance(root.guess, str):
        text += "\n\n" + root.guess
    elif root.guess:
        text += (f"\n\ncollnb's guess, from the messages alone: every rank failed waiting in a collective and rank "
                 f"{root.rank} raised first, so the rank that went wrong may be another one. With "
                 f"collnb.launch(..., flight_recorder=200) collnb reads every rank's recent collectives (torch's "
                 f"Flight Recorder) and names the rank whose collective differed")
    if tb:
        text += f"\n\nTraceback of rank {root.rank} (most recent call last):\n{tb.rstrip()}"
    if phase == "init":
        text += "\n\n(while initialising the process group)"
    text += "\n\nWhat happened to every rank:\n" + outcome_text(outcomes)
    return RankError(text, root.rank, exc_type, tb, outcomes)


def _mismatch_error(root, outcomes, phase):
    """The TORCH_DISTRIBUTED_DEBUG=DETAIL check found ranks calling different collectives
    (op, shapes or dtypes). Blame one rank only when it differs from all the others."""
    sides = root.value  # [(fingerprint, [ranks])], largest side first
    lines = [f"  {_ranks_text(ranks)}: {fp}" for fp, ranks in sides]
    if root.rank is not None:
        others = sorted(r for fp, ranks in sides for r in ranks if r != root.rank)
        head = (f"rank {root.rank}: {root.exc_type}: {_MISMATCH} on ranks: rank {root.rank} called a "
                f"different collective from every other rank ({_ranks_text(others)} agree)")
        tbs = [([root.rank], root.frames)]
    else:
        every = sorted(r for _, ranks in sides for r in ranks)
        head = (f"{_ranks_text(every)}: {root.exc_type}: {_MISMATCH} on ranks: no rank differs from all "
                f"the others, so none of them is called the root cause; each side is shown")
        tbs = []  # one traceback per place in the code (the sides often share one line)
        for (_fp, ranks), frames in zip(sides, root.frames):
            same = [i for i, (_, f) in enumerate(tbs) if [x[:3] for x in f] == [x[:3] for x in frames]]
            if same:
                tbs[same[0]] = (tbs[same[0]][0] + ranks, tbs[same[0]][1])
            else:
                tbs.append((list(ranks), frames))
    text = head + ":\n" + "\n".join(lines)
    if root.message:
        text += f"\n{root.message}"
    text += ("\nEvery rank of a group must call the same collectives, in the same order, with the same "
             "shapes and dtypes.")
    tb = ""
    for ranks, frames in tbs:
        part = format_frames(frames).rstrip()
        if part:
            tb += f"\n\nTraceback of {_ranks_text(ranks)} (most recent call last):\n{part}"
    text += tb
    if phase == "init":
        text += "\n\n(while initialising the process group)"
    text += "\n\nWhat happened to every rank:\n" + outcome_text(outcomes)
    err = RankError(text, root.rank, root.exc_type, tb.strip(), outcomes)
    err.mismatch = {fp: ranks for fp, ranks in sides}
    return err


def _ranks_text(ranks):
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + (", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}")


def _mismatch(failed):
    """Root cause of a DETAIL-check mismatch: an :class:`Event` of kind ``"mismatch"`` whose ``rank``
    is the one rank that differs from all the others (``None`` when no rank does, e.g. two ranks,
    or three sides), ``value`` the sides ``[(fingerprint, [ranks])]`` and ``message`` what
    differs. ``None`` when the messages cannot be read."""
    fps, frames = {}, {}
    for e in sorted(failed, key=lambda e: e.t):
        for rank, fp in _FINGERPRINT.findall(_FINGERPRINT_NOISE.sub("", e.message)):
            fps.setdefault(int(rank), fp.strip())
        frames.setdefault(e.rank, e.frames)
    if len(set(fps.values())) < 2:
        return None
    seqs = {m.group(1) for fp in fps.values() for m in [re.search(r"SequenceNumber=(\d+)", fp)] if m}
    if len(seqs) == 1:  # the same operation number everywhere: leave it out
        fps = {r: re.sub(r"SequenceNumber=\d+,\s*", "", fp) for r, fp in fps.items()}
    by_fp = {}
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
    if odd is not None:
        return Event(odd, "mismatch", first.t, first.exc_type, differ, frames.get(odd, []), value=sides)
    return Event(None, "mismatch", first.t, first.exc_type, differ,
                  [frames.get(ranks[0], []) for _, ranks in sides], value=sides)


def death_text(exitcode):
    if exitcode is None:
        return "died"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exited with code {exitcode} without returning (os._exit or a crash)"


def rebuild_result(rank, payload):
    """Rank ``rank``'s return value from its :class:`.Result` payload, or :class:`.RankError` when it
    cannot be rebuilt here."""
    try:
        return loads(payload)
    except Exception as exc:  # noqa: BLE001 - e.g. a class whose __setstate__ fails here
        raise RankError(
            f"rank {rank}: {type(exc).__name__}: rank {rank}'s return value was sent but could not be "
            f"rebuilt in the launcher ({exc}). Return tensors, numbers, strings, or lists/tuples/dicts "
            f"of them", rank, type(exc).__name__, "", {rank: "finished; its result could not be rebuilt"}) \
            from exc
