"""A rank's track of the call's timeline: when each communication operation was issued and
completed on this rank, and the learner's marked regions (``launch(fn, n, timeline=True)``; the
launcher puts every rank's track on one clock as a :class:`.timeline.Timeline`).

A :class:`Track` is an observer of the rank's :class:`.recording.Recorder`
(see that module: ``obs.issued(Issue)`` right after the backend accepted an operation, with
``issued_ns``/``returned_ns`` and the :class:`torch.distributed.Work`). The completion of a
``c10d`` operation is the moment its ``Work``'s future completes (``work.get_future()``'s done
callback, run on the backend's thread: gloo runs a collective on its own thread even when the
Python call blocks, so ``returned_ns`` is only when it was enqueued). Gloo's send/recv Work has no
future and says it is completed only once waited on: its completion is when the blocking
``dist.send``/``dist.recv`` returned, or when ``wait()`` returned on the Work of ``isend``/``irecv``
(``batch_isend_irecv``: the first of its Works waited on completes all of them), as
:data:`._dist_hooks.completion_observers` tells it. The completion of a functional collective is
its ``wait_tensor`` (``obs.waited``). The learner's regions are
:func:`region` (``with collnb.region("forward"):``) and ``torch.profiler.record_function``
(seen as the ``profiler._record_function_enter_new`` operator by the rank's dispatch mode).
Without ``timeline=True`` none of this is installed: :func:`region` is a no-op costing one global
read. Every time is ``time.perf_counter_ns()`` (:data:`.timeline.CLOCK`).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Iterator

from . import _dist_hooks

if TYPE_CHECKING:
    from .._torch_internals import OpOverload

    from .recording import Issue, Recorder

__all__ = ["region", "Track", "start", "stop", "stop_quietly"]

_active: Track | None = None  # the rank's Track during a timeline=True call, else None


def _now() -> int:
    return time.perf_counter_ns()


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """Mark a region of the learner's code on the rank's timeline: ``with collnb.region("forward"):``.

    Args:
        name: what the region is (str), shown on its bar in the Gantt chart and in the trace.

    Outside a ``launch(..., timeline=True)`` call (and outside ranks) it does nothing. Regions may
    nest; each is drawn at its depth. Raises TypeError when ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"region name must be a str, e.g. collnb.region('forward'); got {type(name).__name__}")
    track = _active
    if track is None:
        yield
        return
    depth = track.depth
    track.depth += 1
    start_ns = _now()
    try:
        yield
    finally:
        track.depth -= 1
        track.regions.append((name, start_ns, _now(), depth))


class _Op:
    """One operation on a rank's timeline: its record's fields, when it was issued and returned and
    (``None`` until then) when it completed (ns, :data:`.timeline.CLOCK`)."""

    __slots__ = ("fields", "issued_ns", "returned_ns", "completed_ns")

    def __init__(self, fields: dict[str, Any], issued_ns: int, returned_ns: int) -> None:
        self.fields = fields
        self.issued_ns = issued_ns
        self.returned_ns = returned_ns
        self.completed_ns: int | None = None

    def complete(self, _future: object = None) -> None:
        """It completed now (also a ``Future``'s done callback)."""
        self.completed_ns = _now()


class Track:
    """A rank's track of the call's timeline while its function runs: an observer of the rank's recorder.

    Attributes:
        ops: one :class:`_Op` per operation (record fields dict, ``issued_ns``, ``returned_ns``,
            ``completed_ns``: ``None`` until the operation completes).
        regions: ``(name, start_ns, end_ns, depth)`` per region, in the order they ended.
        start_ns, end_ns: when the function started and returned (ns, :data:`.timeline.CLOCK`).
    """

    def __init__(self) -> None:
        self.ops: list[_Op] = []
        self.regions: list[tuple[str, int, int, int]] = []
        self.depth = 0
        self.start_ns = _now()
        self.end_ns: int | None = None
        #: when this rank left the barrier that aligns the ranks' clocks (ranks on several hosts;
        #: see :mod:`.timeline`), else ``None``: the ranks share one clock
        self.aligned_ns: int | None = None
        self._by_issue: dict[int, _Op] = {}
        self._unfinished: list[_Op] = []  # entries of Works without a future (gloo send/recv), not yet complete
        self._open_functions: list[tuple[str, int, int]] = []  # (name, start_ns, depth) of open record_functions

    # -- observer of .recording's Recorder --------------------------------------------------------
    def issued(self, issue: Issue) -> None:
        """Observe one operation the rank's backend accepted (see :mod:`.recording`)."""
        r = issue.record
        entry = _Op(dict(name=r.name, op=r.operation, peer=r.peer, group_ranks=tuple(r.group_ranks),
                         shapes=tuple(r.shapes), dtypes=tuple(r.dtypes), nbytes=r.nbytes, call=r.call),
                    issue.issued_ns, issue.returned_ns)
        self.ops.append(entry)
        work = issue.work
        if work is not None:
            try:
                future = work.get_future()
            except Exception:  # noqa: BLE001 - gloo's send/recv: "Work::getFuture not implemented"
                self._unfinished.append(entry)  # completed when its call returns or is waited on
                return
            future.add_done_callback(entry.complete)
        else:
            self._by_issue[id(issue)] = entry

    def completed_between(self, began_ns: int, returned_ns: int, now_ns: int) -> None:
        """The operations without a future issued between ``began_ns`` and ``returned_ns`` (one
        call of a ``torch.distributed`` function) completed by ``now_ns`` (see
        :data:`._dist_hooks.completion_observers`)."""
        keep = []
        for entry in self._unfinished:
            if began_ns <= entry.issued_ns <= returned_ns:
                entry.completed_ns = now_ns
            else:
                keep.append(entry)
        self._unfinished = keep

    def waited(self, issue: Issue, ns: int) -> None:
        """A functional collective's ``wait_tensor`` returned at ``ns``: ``issue`` completed then."""
        entry = self._by_issue.pop(id(issue), None)
        if entry is not None and entry.completed_ns is None:
            entry.completed_ns = ns

    # -- torch.profiler.record_function, seen by the dispatch mode -------------------------------
    def profiler_op(self, func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        """Run one of ``record_function``'s operators (``profiler._record_function_enter_new``:
        a region starts, named by its first argument; ``profiler._record_function_exit``: the
        region of that handle ends) and time it as a region."""
        if func.overloadpacket.__name__.endswith("_exit"):
            # the handle comes back as another Python object: regions close innermost first
            opened = self._open_functions.pop() if self._open_functions else None
            out = func(*args, **kwargs)
            if opened is not None:
                name, start_ns, depth = opened
                self.depth = depth
                self.regions.append((name, start_ns, _now(), depth))
            return out
        start_ns, depth = _now(), self.depth
        handle = func(*args, **kwargs)
        self._open_functions.append((str(args[0]) if args else "record_function", start_ns, depth))
        self.depth += 1
        return handle

    def result(self) -> dict[str, Any]:
        """What travels back to the launcher (plain values): ``ops``, ``regions``, ``start_ns``,
        ``end_ns`` and ``aligned_ns`` (see :attr:`aligned_ns`), the dict :class:`.timeline.Timeline`
        reads for this rank."""
        end = self.end_ns or _now()
        ops = [dict(op.fields, issued_ns=op.issued_ns, returned_ns=op.returned_ns,
                    completed_ns=op.completed_ns if op.completed_ns is not None else None)
               for op in self.ops]
        return dict(ops=ops, regions=list(self.regions), start_ns=self.start_ns, end_ns=end,
                    aligned_ns=self.aligned_ns)


def start(recorder: Recorder) -> Track:
    """Start a rank's timeline on ``recorder`` (a started :class:`.recording.Recorder`)."""
    global _active
    track = Track()
    recorder.add_observer(track)
    _dist_hooks.completion_observers.append(track)
    recorder.track = track
    _active = track
    return track


def stop_quietly() -> None:
    """Drop the rank's timeline (the function failed): :func:`region` is a no-op again."""
    global _active
    if _active is not None:
        _forget(_active)
    _active = None


def _forget(track: Track) -> None:
    if track in _dist_hooks.completion_observers:
        _dist_hooks.completion_observers.remove(track)


def stop(track: Track) -> dict[str, Any]:
    """Stop the rank's timeline; returns :meth:`Track.result`. Operations with a future still
    running are given up to 1 s to complete (their callbacks); one that does not, and a send/recv
    never waited on, keeps ``completed_ns=None`` (drawn to the rank's end, framed red)."""
    global _active
    _active = None
    track.end_ns = _now()
    _forget(track)
    deadline = time.monotonic() + 1.0
    waiting = [e for e in track.ops if e.completed_ns is None and not any(e is u for u in track._unfinished)]
    while any(e.completed_ns is None for e in waiting) and time.monotonic() < deadline:
        time.sleep(0.001)
    return track.result()
