"""The parts of the local pool's wait for one call's answers, each typed and tested on its own.

:meth:`.pool.RankPool._collect` waits on every rank's result pipe, its process sentinel and its two
output pipes at once. The parts: which objects to wait on (:func:`waitables`), a ``waitpid`` look for
ranks whose sentinel a child of theirs still holds (:func:`exited`), the per-rank event one ready
result pipe or sentinel gives (:func:`answer_event`), ranks that closed their result pipe and stayed
alive (:func:`lost`), how long to wait next (:func:`wait_limit`), and what the ranks' answers mean
for the pool's cached groups (:func:`group_verdict`). The events are :mod:`.rankset`'s, read by
:func:`.failures.event_of` for local ranks and engines alike.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Literal, Protocol, Sequence

from .protocol import Failed, Ready, Result, receive
from .rankset import RankEvent, RankExit, RankFailure, RankResult

__all__ = ["RankProcess", "Waitable", "LAST_WORDS", "LOST_GRACE", "waitables", "exited", "answer_event", "lost",
           "wait_limit", "group_verdict", "GroupVerdict"]

#: How many of a rank's last output lines a :class:`.RankError` about its death quotes.
LAST_WORDS = 12
#: Seconds a rank whose result pipe closed may stay alive before it counts as failed.
LOST_GRACE = 1.0
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
        in_log: its last stderr line was a C++ log line (their continuation lines follow).
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
    in_log: bool = False
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
        if what == "res" and r.proc.is_alive():
            r.lost_at = r.lost_at or t  # EOF from a live rank: it closed the pipe
            return None
        r.proc.join(timeout=1)
        return RankExit(r.rank, t, r.proc.exitcode)
    if isinstance(msg, Result):
        r.unsettled = True  # a Settled follows (RankPool.settle)
        return RankResult(r.rank, t, msg.payload, seq=msg.seq, intact=msg.intact, calls=msg.calls,
                          timeline=msg.timeline, flight_recorder=msg.flight_recorder)
    if isinstance(msg, Ready):
        return RankResult(r.rank, t, seconds=msg.seconds)
    if isinstance(msg, Failed):
        return RankFailure(r.rank, t, msg)
    return None  # a message out of turn says nothing of this call: wait on


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
