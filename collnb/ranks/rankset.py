"""One interface for a set of ranks: the local warm pool or ipyparallel engines.

:func:`collnb.launch` checks a request once (:func:`.launcher.check_request` makes a
:class:`LaunchRequest`) and hands it to the **active rank set**, which the launcher holds:
:class:`.launcher.LocalRanks` (processes forked here, :mod:`.pool`) unless :func:`collnb.connect` made
the engines of an ipyparallel cluster active (:mod:`.remote`); :func:`collnb.disconnect` makes the
local one active again. The choice is explicit, as ipyparallel's ``engine_launcher_class`` and
torch elastic's ``PContext`` are: nothing is injected at run time.

While a call runs, each implementation turns what its ranks send into one stream of per-rank
events, :data:`RankEvent` (:class:`RankOutput`, :class:`RankResult`, :class:`RankFailure`,
:class:`RankExit`), and :func:`.failures.event_of` reads that one stream for both to decide how each
rank's part of the call ended and whom to blame.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Protocol, Union

from ..vocabulary import Backend
from .protocol import Failed
from .instrument.recording import CallRecords

__all__ = ["EventKind", "LaunchRequest", "RankOutput", "RankResult", "RankFailure", "RankExit", "RankEvent",
           "RankSet", "BackendFacts", "StartMethod", "Where"]

#: :func:`.launcher.backend_info`'s dict: ``backend`` (str), ``available`` (bool), ``max_world_size``
#: (int), ``reason`` (str) and, from a rank set, ``limit`` (str: why ``max_world_size`` is below
#: :data:`collnb.vocabulary.MAX_WORLD_SIZE`, in the words a world-size error uses).
BackendFacts = dict[str, Any]

#: How local ranks are started: :mod:`multiprocessing`'s start methods whose processes are the
#: launcher's children (forkserver's are not).
StartMethod = Literal["fork", "spawn"]

#: Where a rank set's ranks run, in the words of an error (:attr:`RankSet.where`).
Where = Literal["here", "on the connected engines"]


class EventKind(enum.Enum):
    """What a :data:`RankEvent` says about one rank."""

    OUTPUT = "output"    #: lines it printed
    RESULT = "result"    #: its answer to the call: the function returned (or a set-up step is done)
    FAILURE = "failure"  #: its function (or a set-up step) raised
    EXIT = "exit"        #: its process ended, or stopped answering, before it answered


@dataclass(frozen=True)
class LaunchRequest:
    """One checked :func:`collnb.launch` request (every field as :func:`collnb.launch` documents it;
    :func:`.launcher.check_request` makes it, so a rank set gets nothing unchecked).

    ``timeout`` and ``collective_timeout`` are seconds (float); ``start_method`` is ``"fork"``,
    ``"spawn"`` or ``None`` (the rank set's own way); ``flight_recorder`` is a number of entries (0: off)."""

    fn: Callable[..., Any]
    world_size: int
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    backend: Backend = "gloo"
    timeout: float = 60.0
    collective_timeout: float = 5.0
    debug: bool = True
    start_method: StartMethod | None = None
    record_calls: bool = False
    show_backend_log: bool = False
    timeline: bool = False
    flight_recorder: int = 0


@dataclass(frozen=True)
class RankOutput:
    """Lines rank ``rank`` printed on ``stream`` (without their newline), at monotonic time ``t`` (s)."""

    kind: ClassVar[Literal[EventKind.OUTPUT]] = EventKind.OUTPUT
    rank: int
    t: float
    stream: Literal["stdout", "stderr"]
    lines: tuple[str, ...]


@dataclass(frozen=True)
class RankResult:
    """Rank ``rank`` answered at monotonic time ``t`` (s).

    Attributes:
        payload: the function's return value as :func:`.serialization.dumps` made it (bytes), or
            ``None`` for a set-up step (``seconds`` says how long it took).
        seq: torch's operation counter of the call's group after the call (``None`` where the rank
            set does not report it); ranks that disagree issued different numbers of operations.
        intact: ``False`` when the function destroyed the pool's process groups.
        calls, timeline, flight_recorder: what ``record_calls``, ``timeline`` and ``flight_recorder``
            recorded (``None`` when off).
        retire: what the call changed for good in the rank (engines say it with their result; local
            ranks in their :class:`.protocol.Settled`), ``""`` when nothing.
    """

    kind: ClassVar[Literal[EventKind.RESULT]] = EventKind.RESULT
    rank: int
    t: float
    payload: bytes | None = None
    seconds: float | None = None
    seq: int | None = None
    intact: bool = True
    calls: CallRecords | None = None
    timeline: dict[str, Any] | None = None
    flight_recorder: list[dict[str, Any]] | None = None
    retire: str = ""


@dataclass(frozen=True)
class RankFailure:
    """Rank ``rank`` raised at monotonic time ``t`` (s): its :class:`.protocol.Failed` answer."""

    kind: ClassVar[Literal[EventKind.FAILURE]] = EventKind.FAILURE
    rank: int
    t: float
    failed: Failed


@dataclass(frozen=True)
class RankExit:
    """Rank ``rank``'s process ended (or its engine was lost) at monotonic time ``t`` (s) before it
    answered: ``exitcode`` as :attr:`multiprocessing.Process.exitcode` gives it (negative: the
    signal; ``None``: unknown, e.g. an engine), ``message`` what the rank set knows beyond it."""

    kind: ClassVar[Literal[EventKind.EXIT]] = EventKind.EXIT
    rank: int
    t: float
    exitcode: int | None = None
    message: str = ""


#: One per-rank event of a running call.
RankEvent = Union[RankOutput, RankResult, RankFailure, RankExit]


class RankSet(Protocol):
    """Where :func:`collnb.launch` runs its ranks: :class:`.launcher.LocalRanks` or the engines of
    :func:`collnb.connect` (:class:`.remote._Connection`)."""

    #: where the ranks run, in the words of an error: ``"here"``, ``"on the connected engines"``
    where: Where

    def backend_info(self, backend: str) -> BackendFacts:
        """:func:`.launcher.backend_info`'s dict plus ``limit`` for ``backend`` on these ranks."""
        ...

    def refuse(self, request: LaunchRequest) -> None:
        """Raise :class:`NotImplementedError` naming an option of ``request`` these ranks cannot
        honour (before anything runs); return otherwise."""
        ...

    def launch(self, request: LaunchRequest) -> list[Any]:
        """Run ``request`` and return the per-rank results (rank order), or raise as
        :func:`collnb.launch` documents."""
        ...
