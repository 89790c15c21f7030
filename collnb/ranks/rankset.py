"""One interface for a set of ranks: the local warm pool, ipyparallel engines, or another kind.

A launch is checked once, where it enters (:mod:`.request`): :func:`collnb.launch`, or an entry
point such as :func:`collnb.run` that plans its launch first (:func:`.launcher.plan_launch`: a
:class:`LaunchPlan`, everything but the function), then adds the function (a :class:`LaunchRequest`).
The request goes down whole to the rank set the plan was checked against, the **active rank set**
the launcher holds: :class:`.local.rankset.LocalRanks` (processes forked here, :mod:`.local.pool`)
unless :func:`collnb.connect` made the engines of an ipyparallel cluster active
(:class:`.remote.connection.Engines`); :func:`collnb.disconnect` makes the local one active again.
The choice is explicit, as ipyparallel's ``engine_launcher_class`` and torch elastic's ``PContext``
are: nothing is injected at run time; another kind of rank set becomes active with
:func:`.launcher.use_rank_set`.

While a call runs, each implementation turns what its ranks send into one stream of per-rank
events, :data:`RankEvent` (:class:`RankOutput`, :class:`RankResult`, :class:`RankFailure`,
:class:`RankExit`), and :func:`.explain.failures.ending_of` reads that one stream for every rank set
to decide how each rank's part of the call ended and whom to blame. What the call records (calls, a timeline, the
Flight Recorder, the backend's log) every rank set takes with the same instruments
(:mod:`.instrument.interface`, whose docstring says how a new rank set gets them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Literal, Protocol, Union

from ..vocabulary import Backend
from .instrument.interface import Instruments, Recorded
from .protocol import Failed

__all__ = ["EventKind", "RankSetup", "LaunchPlan", "LaunchRequest", "RankOutput", "RankResult", "RankFailure",
           "RankExit", "RankEvent", "RankSet", "BackendFacts", "StartMethod", "Where"]

#: :func:`.launcher.backend_info`'s dict: ``backend`` (str), ``available`` (bool), ``max_world_size``
#: (int), ``reason`` (str) and, from a rank set, ``limit`` (str: why ``max_world_size`` is below
#: :data:`collnb.vocabulary.MAX_WORLD_SIZE`, in the words a world-size error uses).
BackendFacts = dict[str, Any]

#: How local ranks are started: :mod:`multiprocessing`'s start methods whose processes are the
#: launcher's children (forkserver's are not).
StartMethod = Literal["fork", "spawn"]

#: Where a rank set's ranks run, in the words of an error (:attr:`RankSet.where`: English, marked
#: with :func:`collnb.i18n.N_` and translated where it is used): ``"here"``, ``"on the connected engines"``.
Where = str


class EventKind(enum.Enum):
    """What a :data:`RankEvent` says about one rank."""

    OUTPUT = "output"    #: lines it printed
    RESULT = "result"    #: its answer to the call: the function returned (or a set-up step is done)
    FAILURE = "failure"  #: its function (or a set-up step) raised
    EXIT = "exit"        #: its process ended, or stopped answering, before it answered


@dataclass(frozen=True)
class RankSetup:
    """How a rank set makes its ranks' process groups: ranks made with one setup serve every call
    that asks for it (the local warm pool's key; the engines' default process group).

    Attributes:
        backend: ``"gloo"`` or ``"nccl"``.
        debug: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` in the ranks (every collective checked against
            every peer's).
        collective_timeout: the process groups' timeout, seconds (float).
        start_method: ``"fork"`` or ``"spawn"`` (local ranks), ``None`` for a rank set that starts no
            process (engines: ipyparallel started them).
        flight_recorder: ``TORCH_FR_BUFFER_SIZE`` in the ranks when their groups are made (entries
            of torch's Flight Recorder per rank; 0 leaves it unset).
    """

    backend: Backend = "gloo"
    debug: bool = True
    collective_timeout: float = 5.0
    start_method: StartMethod | None = None
    flight_recorder: int = 0


@dataclass(frozen=True)
class LaunchPlan:
    """A checked launch without its function: where, at which world size, within which time, on
    ranks made how, recording what (:func:`.launcher.plan_launch` makes it; every field as
    :func:`collnb.launch` documents it).

    Attributes:
        world_size: the number of ranks (int, within ``facts["max_world_size"]``).
        timeout: seconds the whole call may take (float).
        setup: how the ranks' groups are made (:class:`RankSetup`).
        instruments: what the call records (:class:`.instrument.interface.Instruments`), as the rank
            set will run it (:meth:`RankSet.accept`).
        rank_set: the rank set the plan was checked against, which runs it.
        facts: :func:`.launcher.backend_info`'s answer for ``setup.backend`` on ``rank_set``, at the check.
    """

    world_size: int
    timeout: float
    setup: RankSetup
    instruments: Instruments
    rank_set: RankSet = field(compare=False, repr=False)
    facts: BackendFacts = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class LaunchRequest:
    """One checked launch: ``fn(rank, world_size, *args, **kwargs)`` as ``plan`` says
    (:func:`.launcher.launch_planned` makes it: a rank set gets nothing unchecked)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    plan: LaunchPlan


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
        recorded: what the call's instruments took on the rank (``None`` when none was asked for).
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
    recorded: Recorded | None = None
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
    """Where :func:`collnb.launch` runs its ranks: :class:`.local.rankset.LocalRanks`, the engines of
    :func:`collnb.connect` (:class:`.remote.connection.Engines`), or another kind made active with
    :func:`.launcher.use_rank_set`."""

    #: where the ranks run, in the words of an error: ``"here"``, ``"on the connected engines"``
    where: Where

    def backend_info(self, backend: Backend) -> BackendFacts:
        """:func:`.launcher.backend_info`'s dict plus ``limit`` for ``backend`` (checked) on these ranks."""
        ...

    def accept(self, plan: LaunchPlan) -> LaunchPlan:
        """``plan`` as these ranks run it (their own start method; the instruments they need beyond
        the request's: :attr:`.instrument.interface.Instruments.relay_fds`, ``align_clocks``), or
        raise (:class:`NotImplementedError` naming an option they cannot honour, :class:`RuntimeError`
        for a request this process cannot make) before anything runs."""
        ...

    def launch(self, request: LaunchRequest) -> list[Any]:
        """Run ``request`` and return the per-rank results (rank order), or raise as
        :func:`collnb.launch` documents."""
        ...
