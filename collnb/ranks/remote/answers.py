"""The engines' answers to one call, read from ipyparallel: each engine's per-rank event
(:func:`answer_event`: a :data:`..rankset.RankEvent`, as local ranks give), the lines it printed
(:func:`output_events`), the last of them waited for (:func:`wait_for_output`), and the backend's C++
log lines kept out of the cell (:func:`kept`). :meth:`.connection.Engines._collect` reads them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator, Literal, Sequence

from ..instrument.backend_log import BackendLog
from ..protocol import Result
from ..rankset import RankEvent, RankExit, RankFailure, RankOutput, RankResult

if TYPE_CHECKING:
    from ipyparallel import AsyncResult

__all__ = ["answer_event", "output_events", "wait_for_output", "kept"]

#: Seconds :func:`wait_for_output` waits, at most, for the output of engines that answered.
_OUTPUT_WAIT_S = 2.0


def wait_for_output(ars: Sequence[AsyncResult]) -> None:
    """Wait (up to :data:`_OUTPUT_WAIT_S` in all) for the output of the engines that answered:
    ipyparallel delivers a call's result and its output on two channels, so the last lines (a
    failing rank's C++ log line) can arrive after the result."""
    end = time.monotonic() + _OUTPUT_WAIT_S
    for ar in ars:
        if ar.ready():
            try:
                ar.wait_for_output(max(0.0, end - time.monotonic()))
            except Exception:  # noqa: BLE001 - a lost engine's output is not coming
                pass


def kept(log: BackendLog, rank: int, line: str) -> bool:
    """Whether engine ``rank``'s stderr line ``line`` is a C++ log line ``log`` keeps (then kept)."""
    if log.keeps(rank, line.encode("utf-8", "replace")):
        log.keep(rank, line)
        return True
    return False


def answer_event(rank: int, ar: AsyncResult) -> RankEvent:
    """The event of engine ``rank``'s finished call ``ar`` (an :class:`ipyparallel.AsyncResult` that
    is ready): :class:`.RankResult` for a :class:`.Result`, :class:`.RankFailure` for a :class:`.Failed`,
    :class:`.RankExit` when ipyparallel lost the engine."""
    t = time.monotonic()
    try:
        msg = ar.get(timeout=0)
    except Exception as exc:  # noqa: BLE001 - the engine died or ipyparallel lost it
        return RankExit(rank, t, None, f"{type(exc).__name__}: {exc}")
    if isinstance(msg, Result):
        return RankResult(rank, t, msg.payload, seq=msg.seq, intact=msg.intact, recorded=msg.recorded, retire=msg.retire)
    return RankFailure(rank, t, msg)


def output_events(ars: Sequence[AsyncResult], shown: list[list[int]], partial: list[list[str]],
                   final: bool = False) -> Iterator[RankOutput]:
    """The lines each engine printed since the last look (:class:`.RankOutput`, stdout and stderr),
    read from ipyparallel's output capture; ``shown[r][k]`` counts the characters read of stream
    ``k`` of rank ``r``, ``partial[r][k]`` holds its unfinished line (ended when ``final``)."""
    for r, ar in enumerate(ars):
        for k, attr in enumerate(_STREAMS):
            try:
                text = getattr(ar, attr) or ""
            except Exception:  # noqa: BLE001 - ipyparallel lost the engine's output: nothing to show
                text = ""
            if isinstance(text, list):
                text = text[0] if text else ""
            new = text[shown[r][k]:]
            shown[r][k] = len(text)
            lines = (partial[r][k] + new).split("\n")
            partial[r][k] = lines.pop()
            if final and partial[r][k]:
                lines.append(partial[r][k])
                partial[r][k] = ""
            if lines:
                yield RankOutput(r, time.monotonic(), attr, tuple(lines))


_STREAMS: tuple[Literal["stdout", "stderr"], ...] = ("stdout", "stderr")
