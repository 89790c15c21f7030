"""The messages between the launcher (the parent: a kernel or a script) and its ranks.

The parent sends a rank one command at a time on the rank's command pipe; the rank answers each
on its result pipe (stdout and stderr travel on pipes of their own, see :mod:`.local.output`):

======================================  ===================================
parent -> rank                          rank -> parent
======================================  ===================================
:class:`InitGroup` (fork + rendezvous)  :class:`Ready`, or :class:`Failed`
:class:`NewGroup` (a cached subgroup)   :class:`Ready`
:class:`Run` (the learner's function)   :class:`Result`, or :class:`Failed`;
                                        after a Result, :class:`Settled`
======================================  ===================================

After its :class:`Result` a rank finishes putting itself back as it started (off the launcher's
path: the launcher draws the result meanwhile) and says in :class:`Settled` whether the call changed
it for good; the launcher reads that before it sends the rank anything else.

A rank that fails stays idle until the parent stops it (its peers' "connection closed" errors
must not pile up on the root cause). Closing the command pipe tells a rank to leave. Ranks on
ipyparallel engines (:mod:`.remote.engines`) get the same :class:`Run` and answer it with the same
:class:`Result` / :class:`Failed`.
Messages are small frozen dataclasses, pickled; the function, its arguments and its result travel
inside them as bytes made by :func:`.serialization.dumps`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Union, cast

from .instrument.interface import Instruments, Recorded
from .instrument.timeouts import TimeoutReport

__all__ = ["InitGroup", "NewGroup", "Run", "Ready", "Result", "Settled", "Failed", "Message",
           "Frame", "encode", "send", "receive"]

#: One frame of a traceback as it travels: ``(filename, lineno, function name, source line or None)``.
Frame = tuple[str, int, str, Union[str, None]]


@dataclass(frozen=True)
class InitGroup:
    """Initialise the pool's default process group: ranks ``0..world_size-1`` of rendezvous
    ``generation`` (int, one per initialisation) join; the pool's other ranks only leave theirs."""

    generation: int
    world_size: int


@dataclass(frozen=True)
class NewGroup:
    """Every rank of the default group: create the cached group of ranks ``0..world_size-1``
    with ``new_group``, torch's group counter set to ``group_count`` (the same on every rank);
    ``unwrapped``: the group for collnb's own primitive runs, made without
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s wrapper (:func:`.call.groups.unwrapped_group`)."""

    world_size: int
    group_count: int
    unwrapped: bool = False


@dataclass(frozen=True)
class Run:
    """Run the learner's function as a rank of ``world_size``.

    Attributes:
        world_size: the call's world size (the rank runs in the cached group of that size).
        group_count: torch's group counter at the start of the call, the same on every rank.
        task: ``dumps((fn, args, kwargs, code files))`` (bytes).
        instruments: what the call records on the rank (:class:`.instrument.interface.Instruments`).
        language: the language the kernel speaks at this call (:func:`collnb.get_language`,
            ``"en"`` or ``"zh"``): a warm rank forked before a ``set_language`` speaks it too.
        unwrapped: run in the ``unwrapped`` group of that size (:class:`NewGroup`): collnb's own
            code that makes the same calls on every rank (:func:`collnb.ranks.same_on_every_rank`).

    Local ranks get it on their command pipe; ipyparallel engines as an argument of
    :func:`.remote.engines.engine_run`.
    """

    world_size: int
    group_count: int
    task: bytes
    instruments: Instruments = Instruments()
    language: str = "en"
    unwrapped: bool = False


@dataclass(frozen=True)
class Ready:
    """A set-up command (:class:`InitGroup`, :class:`NewGroup`) is done, in ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class Result:
    """The function returned.

    Attributes:
        payload: ``dumps(result)`` (bytes; tensors as detached CPU copies).
        seq: the default group's operation count after the call (int or ``None``): ranks that
            disagree issued different numbers of operations (uneven send/recv).
        intact: whether the rank's cached groups survived the call (the function may destroy them).
        recorded: what the call's instruments took on the rank (:class:`.instrument.interface.Recorded`),
            ``None`` when none was asked for.
        retire: on an ipyparallel engine (:mod:`.remote.engines`), what the call changed in it that
            cannot be put back, in words (``"replaced torch.distributed.all_reduce"``; see
            :mod:`.fresh.rank_state`), else ``""``. A local rank says it in :class:`Settled`.
    """

    payload: bytes
    seq: int | None = None
    intact: bool = True
    recorded: Recorded | None = None
    retire: str = ""


@dataclass(frozen=True)
class Settled:
    """After its :class:`Result`, the rank is back as it started (:mod:`.fresh.rank_state`), except for
    ``retire``: what the call changed that cannot be put back, in words
    (``"replaced torch.distributed.all_reduce"``), else ``""``; then the launcher retires the rank."""

    retire: str = ""


@dataclass(frozen=True)
class Failed:
    """The function (or the rank's set-up) raised, or called ``sys.exit``.

    Attributes:
        exc_type: the exception's type name (str).
        message: its message (str).
        frames: the traceback's frames ``[(filename, lineno, name, line)]``, outermost first,
            without the launcher's own.
        comm: whether it is torch.distributed reporting a lost or late peer (a consequence of
            another rank's failure, not a root cause).
        timeout: the :class:`.instrument.timeouts.TimeoutReport` the rank made for a communication
            error (``None`` when the rank measured nothing: the launcher then reads the message's wording).
        recorded: what the call's instruments took before it failed (the Flight Recorder's entries,
            for the launcher's blame: :class:`.instrument.interface.Recorded`), else ``None``.
    """

    exc_type: str
    message: str
    frames: list[Frame]
    comm: bool = False
    timeout: TimeoutReport | None = None
    recorded: Recorded | None = None

    @property
    def timeout_name(self) -> str:
        """The timeout that ran out, in words (``""`` when none did or it is not known)."""
        return self.timeout.timeout if self.timeout is not None and self.timeout.fired else ""

    @classmethod
    def from_exception(cls, exc: BaseException, rank: int | None, frames: list[Frame], comm: bool,
                       recorded: Recorded | None = None) -> "Failed":
        """The message a rank sends for ``exc`` (``SystemExit`` is named as the call it was); ``rank``
        is ``None`` on an engine that no connection has set up."""
        if isinstance(exc, SystemExit):
            text = f"sys.exit({exc.code!r}) called in rank {rank}"
        else:
            try:
                text = str(exc)
            except Exception as inner:  # noqa: BLE001 - an exception whose __str__ raises
                text = f"<the exception's message could not be shown: {type(inner).__name__}: {inner}>"
        report = getattr(exc, "collnb_timeout", None)
        return cls(type(exc).__name__, text, frames, comm, report if isinstance(report, TimeoutReport) else None,
                   recorded)


#: Every message the launcher and a rank exchange.
Message = Union[InitGroup, NewGroup, Run, Ready, Result, Settled, Failed]


def encode(msg: Message) -> bytes:
    """One message as bytes (encode a :class:`Run` once and send the bytes to every rank)."""
    return pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)


def send(conn: Connection, msg: Message | bytes) -> None:
    """Send one message (or the bytes :func:`encode` made of it) on a ``multiprocessing``
    connection."""
    conn.send_bytes(msg if isinstance(msg, bytes) else encode(msg))


def receive(conn: Connection) -> Message:
    """Receive one message (blocks; raises ``EOFError`` when the other end is closed)."""
    return cast(Message, pickle.loads(conn.recv_bytes()))
