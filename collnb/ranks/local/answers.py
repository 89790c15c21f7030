"""The local pool's wait for one call's answers, and its parts, each typed and tested on its own.

:func:`gather` waits on every rank's result pipe, its process sentinel and its two output pipes at
once, copying the ranks' output (:class:`.output.OutputRelay`) while it waits, and returns each
rank's answer: what :meth:`.pool.RankPool._collect` hands to :func:`..explain.failures.conclude`. The parts:
which objects to wait on (:func:`waitables`), a ``waitpid`` look for ranks whose sentinel a child of
theirs still holds (:func:`exited`), the per-rank event one ready result pipe or sentinel gives
(:func:`answer_event`), ranks that closed their result pipe and stayed alive (:func:`lost`), how long
to wait next (:func:`wait_limit`), the output written after a failure (:meth:`.output.OutputRelay.settle`), and
what the ranks' answers mean for the pool's cached groups (:func:`group_verdict`). The events are
:mod:`..rankset`'s, read by :func:`..explain.failures.ending_of` for local ranks and engines alike.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait as _mp_wait
from typing import Literal, Protocol, Sequence, cast

from .output import OutputRelay
from ..protocol import Failed, Ready, Result, receive
from ..rankset import RankEvent, RankExit, RankFailure, RankResult

__all__ = ["RankProcess", "Waitable", "LAST_WORDS", "LOST_GRACE", "GRACE", "DYING_S", "Answers", "gather", "waitables", "exited",
           "answer_event", "lost", "wait_limit", "group_verdict", "GroupVerdict"]

#: How many of a rank's last output lines a :class:`.RankError` about its death quotes.
LAST_WORDS = 12
#: Seconds a rank whose result pipe closed may stay alive before it counts as failed.
LOST_GRACE = 1.0
#: Seconds :func:`gather` still waits for the other ranks' answers after the first failure.
GRACE = 0.5
#: What :func:`multiprocessing.connection.wait` waits on: a pipe's end, or a process sentinel (fd).
Waitable = Connection | int


class _Process(Protocol):
    """The part of :class:`multiprocessing.Process` the wait uses."""

    @property
    def pid(self) -> int | None: ...
    @property
    def sentinel(self) -> int: ...
    @property
    def exitcode(self) -> int | None: ...
    def is_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> None: ...


@dataclass
class RankProcess:
    """One rank process of the pool: its process, its four pipes, and what the launcher knows of it.

    Attributes:
        rank: its rank in the pool's default group.
        proc: its :class:`multiprocessing.Process`.
        cmd_w, res_r, out_r, err_r: the launcher's ends of its command, result, stdout and stderr pipes.
        partial: its unfinished output line per stream (1: stdout, 2: stderr), bytes.
        last: its last output lines (for the error about its death).
        lost_at: monotonic time (s) its result pipe closed while it was still alive, else ``None``.
        closed: the streams (1, 2) whose pipe reached its end.
        report: the first lines of a crash report (faulthandler's).
        unsettled: it answered a Run, and its Settled has not been read yet.
    """

    rank: int
    proc: _Process
    cmd_w: Connection
    res_r: Connection
    out_r: Connection
    err_r: Connection
    partial: dict[int, bytearray] = field(default_factory=lambda: {1: bytearray(), 2: bytearray()})
    last: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=LAST_WORDS))
    lost_at: float | None = None
    closed: set[int] = field(default_factory=set)
    report: list[str] = field(default_factory=list)
    unsettled: bool = False


def waitables(ranks: Sequence[RankProcess], pending: Sequence[RankProcess]) -> list[Waitable]:
    """What to wait on: the result pipe (unless it closed) and the sentinel of every ``pending`` rank,
    and every open output pipe of ``ranks`` (a rank that answered may still print)."""
    out: list[Waitable] = [r.res_r for r in pending if r.lost_at is None]
    out += [r.proc.sentinel for r in pending]
    out += [c for r in ranks for k, c in ((1, r.out_r), (2, r.err_r)) if k not in r.closed]
    return out


def exited(pending: Sequence[RankProcess], ready: Sequence[Waitable]) -> list[int]:
    """The sentinels of ``pending`` ranks that ``waitpid`` says ended although their sentinel is not
    in ``ready``: a process the rank forked may hold a copy of the sentinel, which then never reads
    EOF when the rank dies."""
    return [r.proc.sentinel for r in pending if r.proc.sentinel not in ready and r.proc.exitcode is not None]


def answer_event(r: RankProcess, what: Literal["res", "dead"], t: float) -> RankEvent | None:
    """The event rank ``r`` gives when its result pipe (``"res"``) or its sentinel (``"dead"``) is
    ready, at monotonic time ``t`` (s): :class:`.RankResult` for a :class:`.Result` (then ``r`` owes a
    :class:`.Settled`: ``r.unsettled``) or a :class:`.Ready`, :class:`.RankFailure` for a
    :class:`.Failed`, :class:`.RankExit` when the pipe holds nothing and the process ended (it is
    joined for up to 1 s, so ``exitcode`` is known). ``None`` when the pipe reached its end while the
    rank lives: it closed the pipe (``r.lost_at`` is set; :func:`lost` decides later), or the
    message was none of those (out of turn: it says nothing of this call)."""
    msg: object = None
    try:
        if r.res_r.poll():
            msg = receive(r.res_r)
    except (EOFError, OSError):
        msg = None
    if msg is None:
        if what == "res" and _still_alive(r.proc):
            r.lost_at = r.lost_at or t  # EOF from a live rank: it closed the pipe
            return None
        r.proc.join(timeout=1)
        return RankExit(r.rank, t, r.proc.exitcode)
    if isinstance(msg, Result):
        r.unsettled = True  # a Settled follows (RankPool.settle)
        return RankResult(r.rank, t, msg.payload, seq=msg.seq, intact=msg.intact, recorded=msg.recorded)
    if isinstance(msg, Ready):
        return RankResult(r.rank, t, seconds=msg.seconds)
    if isinstance(msg, Failed):
        return RankFailure(r.rank, t, msg)
    return None  # a message out of turn says nothing of this call: wait on


#: Seconds :func:`answer_event` looks again whether a rank whose result pipe just ended is dying.
DYING_S = 0.1


def _still_alive(proc: _Process) -> bool:
    """Whether ``proc`` still runs ``DYING_S`` seconds after its result pipe ended, looked at with
    ``waitpid(WNOHANG)`` every 5 ms. A dying process closes its descriptors a moment before the kernel
    makes it a zombie that ``waitpid`` reports, so a crashed rank (``os.abort()``) can read as a live
    one that closed its pipe (measured under load: a SIGABRT blamed on closed descriptors). Never a
    blocking wait: a rank that closed every descriptor closed its sentinel's too, and may live on."""
    end = time.monotonic() + DYING_S
    while proc.is_alive():
        if time.monotonic() >= end:
            return True
        time.sleep(0.005)
    return False


def lost(pending: Sequence[RankProcess], now: float) -> list[RankExit]:
    """The ranks of ``pending`` whose result pipe closed more than :data:`LOST_GRACE` seconds before
    ``now`` while they stayed alive: they count as ended (:class:`.RankExit`)."""
    return [RankExit(r.rank, now, r.proc.exitcode) for r in pending
            if r.lost_at is not None and now - r.lost_at > LOST_GRACE]


def wait_limit(now: float, deadline: float, failure_at: float | None, grace: float, poll: float = 0.25) -> float:
    """Seconds to wait for the next ready object: until ``deadline``, or ``grace`` seconds after the
    first failure (``failure_at``), at most ``poll`` (so ``waitpid`` is asked 4 times a second), never
    below 0."""
    end = min(deadline, failure_at + grace) if failure_at is not None else deadline
    return max(0.0, min(end - now, poll))


#: What a call's answers mean for the pool's cached groups: keep them; ``"retire"`` the group of this
#: world size (its ranks issued different numbers of operations: uneven send/recv, so its next
#: collective would fail the DETAIL check); ``"reinit"`` every group (the function destroyed them).
GroupVerdict = Literal["keep", "retire", "reinit"]


def group_verdict(answers: Sequence[RankResult]) -> GroupVerdict:
    """:data:`GroupVerdict` of every rank's :class:`.RankResult` of one call."""
    if not all(a.intact for a in answers):
        return "reinit"
    if len({a.seq for a in answers}) > 1:
        return "retire"
    return "keep"


@dataclass(frozen=True)
class Answers:
    """What :func:`gather` got from the ranks of one command.

    Attributes:
        events: ``{rank: RankEvent}`` in the order they came: each answer (a :class:`.RankResult`,
            :class:`.RankFailure` or :class:`.RankExit`); a rank that never answered is absent.
        verdict: :func:`group_verdict` of the answers when every rank answered with a
            :class:`.RankResult`, else ``None`` (the call failed: the pool is closed).
    """

    events: dict[int, RankEvent]
    verdict: GroupVerdict | None


def gather(ranks: Sequence[RankProcess], deadline: float, relay: OutputRelay, grace: float = GRACE) -> Answers:
    """Wait for every rank of ``ranks`` to answer the command just sent, copying their output to
    this process's stdout/stderr through ``relay`` meanwhile, until every rank answered, the clock
    (monotonic, s) passed ``deadline``, or ``grace`` seconds after the first failure. After a failure
    the output still coming is copied for up to ``grace`` more seconds (:meth:`.output.OutputRelay.settle`); then
    every pipe is drained to its last line. Never raises for a rank's failure: that is an answer."""
    events = dict((e.rank, e) for e in _answers(ranks, deadline, relay, grace))
    failed_at = [e.t for e in events.values() if not isinstance(e, RankResult)]
    if failed_at:
        relay.settle(ranks, min(failed_at) + grace)
    relay.drain(ranks, final=True)
    results = [e for e in events.values() if isinstance(e, RankResult)]
    verdict = group_verdict(results) if len(results) == len(ranks) else None
    return Answers(events, verdict)


def _answers(ranks: Sequence[RankProcess], deadline: float, relay: OutputRelay, grace: float) -> Iterator[RankEvent]:
    """Each rank's answer as it comes (see :func:`gather`)."""
    by_conn: dict[int, tuple[Literal["res", "out", "err", "dead"], RankProcess]] = {}
    for r in ranks:
        by_conn[id(r.res_r)] = ("res", r)
        by_conn[id(r.out_r)] = ("out", r)
        by_conn[id(r.err_r)] = ("err", r)
        by_conn[r.proc.sentinel] = ("dead", r)
    answered: set[int] = set()
    failure_at: float | None = None
    event: RankEvent | None
    polled = time.monotonic()
    while True:
        pending = [r for r in ranks if r.rank not in answered]
        now = time.monotonic()
        if not pending or now > deadline or (failure_at is not None and now - failure_at > grace):
            return
        for event in lost(pending, now):  # a rank that closed its result pipe and did not die of it
            answered.add(event.rank)
            failure_at = failure_at or now
            yield event
        pending = [r for r in pending if r.rank not in answered]
        ready = cast(list[Waitable], _mp_wait(waitables(ranks, pending),  # some of the waitables
                                              timeout=wait_limit(now, deadline, failure_at, grace)))
        if not ready or time.monotonic() - polled > 0.25:
            polled = time.monotonic()  # waitpid at most 4 times a second (off the fast path)
            ready += exited(pending, ready)
        for obj in ready:
            what, r = by_conn[obj if isinstance(obj, int) else id(obj)]
            if what in ("res", "dead"):
                if r.rank in answered:
                    continue
                event = answer_event(r, what, time.monotonic())
                if event is None:
                    continue
                answered.add(r.rank)
                if not isinstance(event, RankResult):
                    failure_at = failure_at or event.t
                yield event
            else:
                relay.pump(r, cast(Connection, obj))  # an output pipe
