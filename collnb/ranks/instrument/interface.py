"""The one instruments interface: what a call records on its ranks, and what the launcher makes of
it, the same for every rank set (local ranks, ipyparallel engines, and any other).

A launch request carries its :class:`Instruments` (``launch(..., record_calls=, timeline=,
flight_recorder=, show_backend_log=)``). On each rank a :class:`Taking` runs them around the learner's
function and gives back a :class:`Recorded` (plain values: it travels with the rank's answer, a
:class:`..protocol.Result` or :class:`..protocol.Failed`); the launcher turns the ranks' records into
what :func:`collnb.launch` returns (:func:`launch_results`: a :class:`LaunchResults` with ``.calls``
and ``.timeline``), reads their Flight Recorder entries when it explains a failure
(:mod:`..explain.failures`), and keeps the backend's C++ log lines out of the cell
(:class:`.backend_log.BackendLog`, attached to the error with :func:`.backend_log.attach`).

**How a rank set gets every instrument** (what local ranks, :mod:`..local`, and engines,
:mod:`..remote`, do; a new kind of rank set, such as ranks started in network namespaces, does the
same):

1. Launcher side, before the call: take ``request.instruments`` and say what your ranks need beyond
   it: ``relay_fds=True`` when the launcher does not read the ranks' fds 1 and 2 itself (then the
   backend's C++ lines reach it with the rank's ``sys.stdout``/``sys.stderr``), ``align_clocks=True``
   when the ranks run on more than one host (their monotonic clocks differ: a barrier aligns
   them); ``dataclasses.replace(request.instruments, ...)``. Make the ranks' process groups after
   setting ``TORCH_FR_BUFFER_SIZE`` to ``request.setup.flight_recorder`` when it is not 0 (torch
   reads it when a group is made).
2. Rank side, with the call's default process group in place: run the learner's function through
   :class:`..call.steps.Call` (which does the rest: torch.distributed's wrappers, the instruments,
   the result, the error), or, for a rank loop of your own::

       taking = Taking(instruments)
       taking.start()
       try:
           value = fn(rank, world_size, *args, **kwargs)
       except BaseException:
           recorded = taking.stop(ok=False)   # the Flight Recorder's entries, for the blame
           ...                                # answer Failed(..., recorded=recorded)
       else:
           recorded = taking.stop(ok=True)    # answer Result(payload, ..., recorded=recorded)

   :func:`..instrument._dist_hooks.install` (done by ``Call``) also tells a timeline when a
   send/recv completes; without it those stay "not completed".
3. Launcher side, after the call: hand every rank's :class:`Recorded` (rank order) and the values to
   :func:`launch_results`; give :func:`..explain.failures.conclude` the ranks' answers as
   :data:`..rankset.RankEvent` values (their ``recorded`` included); pass every line the ranks wrote
   on stderr through one :class:`.backend_log.BackendLog` (``show=instruments.show_backend_log``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch.distributed as dist

from .. import _torch_internals as internals
from . import recording, tracks
from .backend_log import FdRelay
from .flight_recorder import entries_from_json
from .records import CallRecord, CallRecords
from .timeline import Timeline

__all__ = ["Instruments", "Recorded", "Taking", "LaunchResults", "launch_results"]


@dataclass(frozen=True)
class Instruments:
    """What a call records on each rank (:class:`Taking`), and how the launcher shows it.

    Attributes:
        record_calls: every communication operation each rank's function issues
            (:class:`.records.CallRecord`; ``launch(..., record_calls=True)``).
        timeline: each rank's track of the call's :class:`.timeline.Timeline` (``timeline=True``).
        flight_recorder: the Flight Recorder entries the call made on each rank, read after it
            (``flight_recorder=N``: the rank set made the ranks' groups with that many entries).
        show_backend_log: print the backend's C++ log lines as they come instead of keeping them
            for the error (the launcher's part: :class:`.backend_log.BackendLog`).
        relay_fds: copy fds 1 and 2 into ``sys.stdout``/``sys.stderr`` while the function runs
            (:class:`.backend_log.FdRelay`): set by a rank set whose launcher does not read the ranks'
            fds itself (engines).
        align_clocks: the ranks run on several hosts: each leaves one barrier of the call's default
            group before the function starts, and the timeline puts the ranks on one clock there
            (:data:`.timeline.ALIGNED`); set by the rank set.
    """

    record_calls: bool = False
    timeline: bool = False
    flight_recorder: bool = False
    show_backend_log: bool = False
    relay_fds: bool = False
    align_clocks: bool = False

    @property
    def records(self) -> bool:
        """Whether the rank's recorder runs (for ``record_calls`` or for a timeline, built on it)."""
        return self.record_calls or self.timeline


@dataclass(frozen=True)
class Recorded:
    """What one rank's instruments took during one call (plain values, no torch objects).

    Attributes:
        calls: the operations its function issued (``record_calls``), else ``None``.
        track: its part of the timeline (:meth:`.tracks.Track.result`'s dict; ``timeline``), else ``None``.
        flight_recorder: the Flight Recorder's collective entries of this call
            (:func:`.flight_recorder.entries_from_json`'s dicts, the call's default group described
            ``"default_pg"``; ``flight_recorder``), else ``None``.
    """

    calls: CallRecords | None = None
    track: dict[str, Any] | None = None
    flight_recorder: list[dict[str, Any]] | None = None


class Taking:
    """The instruments of one call on one rank (see the module docstring): :meth:`start` right
    before the learner's function, :meth:`stop` right after it, in the rank's main thread."""

    def __init__(self, instruments: Instruments) -> None:
        self.instruments = instruments
        self._since_ns: int | None = None  # set by start()
        self._relay: FdRelay | None = None
        self._track: tracks.Track | None = None

    def start(self) -> None:
        """Start every instrument asked for. With ``align_clocks`` and ``timeline`` this is a
        collective: every rank of the call's default group must call it."""
        i = self.instruments
        self._since_ns = time.time_ns()  # the Flight Recorder's clock (time_created_ns, c10::getTime)
        if i.relay_fds:
            self._relay = FdRelay()
            self._relay.start()
        aligned_ns = None
        if i.timeline and i.align_clocks:
            dist.barrier()
            aligned_ns = time.perf_counter_ns()
        if i.records:
            recorder = recording.start()
            if i.timeline:
                self._track = tracks.start(recorder)
                self._track.aligned_ns = aligned_ns

    def stop(self, ok: bool) -> Recorded:
        """Stop every instrument and return what they took. ``ok``: the function returned (else it
        raised: only the Flight Recorder's entries are kept, for the launcher's blame). Before
        :meth:`start` (a step before the function failed) there is nothing to stop: ``Recorded()``."""
        i = self.instruments
        if self._since_ns is None:
            return Recorded()
        track = None
        if self._track is not None:
            if ok:
                track = tracks.stop(self._track)
            else:
                tracks.stop_quietly()
            self._track = None
        calls = None
        if i.records:
            records = recording.stop()
            calls = records if ok and i.record_calls else None
        entries = _flight_recorder_entries(self._since_ns) if i.flight_recorder else None
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        self._since_ns = None
        return Recorded(calls, track, entries)


def _flight_recorder_entries(since_ns: int) -> list[dict[str, Any]] | None:
    """This rank's Flight Recorder entries created since ``since_ns`` (wall-clock ns), the call's
    default group (at a world size below the pool's, a cached group of ranks 0..k-1 that is
    ``dist.group.WORLD`` inside the call, described ``"undefined"`` by torch) described
    ``"default_pg"``; ``None`` when no dump could be made (the launcher then reads the messages)."""
    try:
        entries = entries_from_json(internals.flight_recorder_json())
        world = dist.group.WORLD.group_name if dist.is_initialized() and dist.group.WORLD is not None else None
    except Exception:  # noqa: BLE001 - no dump: the launcher falls back to what the messages say
        return None
    kept = []
    for e in entries:
        if (e.get("time_created_ns") or 0) >= since_ns:
            if world is not None and e["process_group"][0] == world:
                e["process_group"] = (world, "default_pg")
            kept.append(e)
    return kept


# ----------------------------------------------------------------------------------------------
# The launcher's side


class LaunchResults(list[Any]):
    """The per-rank results of ``launch(..., record_calls=True)`` or ``timeline=True``: a ``list``
    (rank order, equal to the plain list ``launch`` returns otherwise) with what was recorded.

    Attributes:
        calls: one :class:`.records.CallRecords` list per rank (rank order) of
            :class:`.records.CallRecord`: every communication operation that rank's function issued,
            in issue order, whichever API issued it (see :mod:`.recording`); collnb's own set-up is
            not included. Empty lists without ``record_calls``.
        timeline: with ``launch(..., timeline=True)``, the call's :class:`.timeline.Timeline` (every
            rank's operations and regions on one clock), else ``None``.
    """

    def __init__(self, results: Iterable[Any] = (), calls: Sequence[list[CallRecord]] | None = None,
                 timeline: Timeline | None = None) -> None:
        super().__init__(results)
        self.calls: Sequence[list[CallRecord]] = calls if calls is not None else [[] for _ in self]
        self.timeline = timeline


def launch_results(values: list[Any], recorded: Sequence[Recorded | None]) -> list[Any]:
    """What :func:`collnb.launch` returns: the ranks' return ``values`` (rank order) as they are, or,
    when the ranks recorded calls or a timeline (``recorded``, one :class:`Recorded` or ``None`` per
    rank, rank order), a :class:`LaunchResults` holding them."""
    calls = [r.calls if r is not None and r.calls is not None else CallRecords() for r in recorded]
    tracks_ = [r.track for r in recorded if r is not None and r.track is not None]
    if tracks_ and len(tracks_) == len(recorded):  # every rank took one: the same call asked each of them
        return LaunchResults(values, calls, Timeline(tracks_))
    if any(r is not None and r.calls is not None for r in recorded):
        return LaunchResults(values, calls)
    return values
