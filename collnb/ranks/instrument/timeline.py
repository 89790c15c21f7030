"""Per-rank timelines: when each communication operation was issued and completed on every rank,
and the learner's marked regions, on one clock across ranks (``launch(fn, n, timeline=True)``).

**Inside a rank** a :class:`Collector` is an observer of the rank's :class:`.recording.Recorder`
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
read.

**One clock.** Every time is ``time.perf_counter_ns()``, which on Linux is
``clock_gettime(CLOCK_MONOTONIC)`` (``time.get_clock_info("perf_counter")``); CLOCK_MONOTONIC is
one system-wide clock, the same in every process of a machine (clock_gettime(2): "a nonsettable
system-wide clock that represents monotonic time since some unspecified point in the past").
collnb's ranks are processes forked on the launcher's machine, so their times need no alignment:
the offset between ranks is 0, and a time is off only by the read's own latency (tens of ns) plus
the delay between the event and the read (the rank may be descheduled: on a loaded 2-core machine,
up to a scheduler time slice, a few ms). Ranks on other machines (ipyparallel engines) would need
an offset measured with a barrier; ``timeline=True`` is refused there.

**Waiting versus transfer.** A collective cannot progress before its last rank arrived. For the
k-th collective on a group (the same k on every rank of it: ranks issue a group's collectives in
one order), :class:`Timeline` takes the last arrival as the latest ``issued_ns`` over the group's
ranks; on each rank the part from its own issue to the last arrival is *waiting*, the rest until
its completion is the *transfer* (the algorithm running). A send/recv pair is matched the same
way (the n-th send from a to b with the n-th recv on b from a). This is the split HTA's and Nsight's
"communication wait" makes (HTA: ``hta.analyzers`` "collective wait" / straggler analysis).

The kernel side, :class:`Timeline`, works on plain values (no torch objects): it builds spans, draws nothing (the picture
is :func:`collnb.views.timeline_image`) and exports a Chrome/Perfetto trace
(:meth:`Timeline.chrome_trace`: the Trace Event Format, one process per rank, complete ``"X"``
events in µs).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal

from . import _dist_hooks

if TYPE_CHECKING:
    from .._torch_internals import OpOverload

    from .recording import Issue, Recorder

__all__ = ["region", "Collector", "start", "stop", "stop_quietly", "Timeline", "Span", "SpanKind", "CLOCK"]

#: What a :class:`Span` is: a collective, a send/recv (``"p2p"``) or a learner's region.
SpanKind = Literal["collective", "p2p", "region"]

#: The clock every time is read from (Linux: CLOCK_MONOTONIC, shared by all local ranks).
CLOCK = "time.perf_counter_ns (CLOCK_MONOTONIC on Linux: one system-wide clock for every local rank)"

_active: Collector | None = None  # the rank's Collector during a timeline=True call, else None

_P2P = ("send", "recv", "isend", "irecv")


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
    collector = _active
    if collector is None:
        yield
        return
    depth = collector.depth
    collector.depth += 1
    start_ns = _now()
    try:
        yield
    finally:
        collector.depth -= 1
        collector.regions.append((name, start_ns, _now(), depth))


class _Op:
    """One operation on a rank's timeline: its record's fields, when it was issued and returned and
    (``None`` until then) when it completed (ns, :data:`CLOCK`)."""

    __slots__ = ("fields", "issued_ns", "returned_ns", "completed_ns")

    def __init__(self, fields: dict[str, Any], issued_ns: int, returned_ns: int) -> None:
        self.fields = fields
        self.issued_ns = issued_ns
        self.returned_ns = returned_ns
        self.completed_ns: int | None = None

    def complete(self, _future: object = None) -> None:
        """It completed now (also a ``Future``'s done callback)."""
        self.completed_ns = _now()


class Collector:
    """A rank's timeline while its function runs: an observer of the rank's recorder.

    Attributes:
        ops: one :class:`_Op` per operation (record fields dict, ``issued_ns``, ``returned_ns``,
            ``completed_ns``: ``None`` until the operation completes).
        regions: ``(name, start_ns, end_ns, depth)`` per region, in the order they ended.
        start_ns, end_ns: when the function started and returned (ns, :data:`CLOCK`).
    """

    def __init__(self) -> None:
        self.ops: list[_Op] = []
        self.regions: list[tuple[str, int, int, int]] = []
        self.depth = 0
        self.start_ns = _now()
        self.end_ns: int | None = None
        self._by_issue: dict[int, _Op] = {}
        self._unfinished: list[_Op] = []  # entries of Works without a future (gloo send/recv), not yet complete
        self._open_functions: list[tuple[str, int, int]] = []  # (name, start_ns, depth) of open record_functions

    # -- observer of collnb.ranks.recording ------------------------------------------------------
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
        """What travels back to the launcher (plain values): ops, regions, start_ns, end_ns."""
        end = self.end_ns or _now()
        ops = [dict(op.fields, issued_ns=op.issued_ns, returned_ns=op.returned_ns,
                    completed_ns=op.completed_ns if op.completed_ns is not None else None)
               for op in self.ops]
        return dict(ops=ops, regions=list(self.regions), start_ns=self.start_ns, end_ns=end)


def start(recorder: Recorder) -> Collector:
    """Start a rank's timeline on ``recorder`` (a started :class:`.recording.Recorder`)."""
    global _active
    collector = Collector()
    recorder.add_observer(collector)
    _dist_hooks.completion_observers.append(collector)
    recorder.timeline = collector
    _active = collector
    return collector


def stop_quietly() -> None:
    """Drop the rank's timeline (the function failed): :func:`region` is a no-op again."""
    global _active
    if _active is not None:
        _forget(_active)
    _active = None


def _forget(collector: Collector) -> None:
    if collector in _dist_hooks.completion_observers:
        _dist_hooks.completion_observers.remove(collector)


def stop(collector: Collector) -> dict[str, Any]:
    """Stop the rank's timeline; returns :meth:`Collector.result`. Operations with a future still
    running are given up to 1 s to complete (their callbacks); one that does not, and a send/recv
    never waited on, keeps ``completed_ns=None`` (drawn to the rank's end, framed red)."""
    global _active
    _active = None
    collector.end_ns = _now()
    _forget(collector)
    deadline = time.monotonic() + 1.0
    waiting = [e for e in collector.ops if e.completed_ns is None and not any(e is u for u in collector._unfinished)]
    while any(e.completed_ns is None for e in waiting) and time.monotonic() < deadline:
        time.sleep(0.001)
    return collector.result()


# ------------------------------------------------------------------------------------------------
# The kernel side: no torch.


@dataclass(frozen=True)
class Span:
    """One bar of a rank's timeline (times in ns from the timeline's origin, the earliest start).

    Attributes:
        rank: the global rank.
        kind: ``"collective"``, ``"p2p"`` (send/recv) or ``"region"`` (:data:`SpanKind`).
        name: the operation (``"all_reduce"``) or the region's name.
        start: when it was issued (region: entered), ns.
        end: when it completed (region: left), ns; for an operation that never completed, the
            rank's end.
        ready: when the last rank of the operation arrived (its waiting part is ``start..ready``,
            its transfer ``ready..end``); ``start`` for regions and unmatched operations.
        depth: nesting depth of a region (0 outermost); 0 for operations.
        nbytes: bytes of the operation on this rank (nccl-tests' count), 0 for regions.
        index: the k-th collective on its group (or n-th message of a pair), counted from 0.
        group_ranks: the global ranks of the operation's group (``()`` for regions).
        peer: src/dst of a rooted or point-to-point operation, else ``None``.
        completed: False when the operation had not completed when the function returned.
    """

    rank: int
    kind: SpanKind
    name: str
    start: int
    end: int
    ready: int
    depth: int = 0
    nbytes: int = 0
    index: int = 0
    group_ranks: tuple[int, ...] = ()
    peer: int | None = None
    completed: bool = True

    @property
    def waiting(self) -> int:
        """ns spent waiting for the last rank to arrive (0 for regions)."""
        return max(0, min(self.ready, self.end) - self.start)

    @property
    def transfer(self) -> int:
        """ns from the last rank's arrival to completion on this rank."""
        return max(0, self.end - max(self.ready, self.start))

    @property
    def duration(self) -> int:
        """ns from issue (region: entered) to completion (region: left)."""
        return self.end - self.start


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged ``(start, end)`` intervals (what HTA's ``merge_kernel_intervals`` does)."""
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


class Timeline:
    """The timelines of one ``launch(..., timeline=True)`` call, one per rank, on one clock.

    Args:
        per_rank: one dict per rank (rank order) as :meth:`Collector.result` returns it.

    Attributes:
        world_size: the number of ranks (int).
        spans: one list of :class:`Span` per rank: its operations in issue order, then its regions.
        origin_ns: the clock value (ns, :data:`CLOCK`) taken as 0: the earliest function start.
        clock: :data:`CLOCK`, how times are aligned across ranks (see the module docstring).
    """

    clock = CLOCK

    def __init__(self, per_rank: list[dict[str, Any]]) -> None:
        self.raw = list(per_rank)
        self.world_size = len(self.raw)
        self.origin_ns = min(d["start_ns"] for d in self.raw) if self.raw else 0
        self.spans = self._build()

    # -- building --------------------------------------------------------------------------------
    def _build(self) -> list[list[Span]]:
        o = self.origin_ns
        keyed: dict[tuple[Any, ...], list[dict[str, Any]]] = {}  # matching key -> the op dicts of every rank
        counters: dict[tuple[int, tuple[Any, ...]], int] = {}
        for rank, data in enumerate(self.raw):
            for op in data["ops"]:
                if op["op"] in _P2P:
                    src, dst = (rank, op["peer"]) if op["op"] in ("send", "isend") else (op["peer"], rank)
                    base: tuple[Any, ...] = ("p2p", src, dst)
                else:
                    base = ("coll", op["group_ranks"])
                n = counters.get((rank, base), 0)
                counters[(rank, base)] = n + 1
                op["_key"], op["_index"] = base + (n,), n
                keyed.setdefault(op["_key"], []).append(op)
        spans: list[list[Span]] = []
        for rank, data in enumerate(self.raw):
            end_ns = data["end_ns"]
            row: list[Span] = []
            for op in data["ops"]:
                peers = keyed[op["_key"]]
                p2p = op["_key"][0] == "p2p"
                expected = 2 if p2p else max(1, len(op["group_ranks"]))
                ready = max(p["issued_ns"] for p in peers) if len(peers) >= expected else op["issued_ns"]
                done = op["completed_ns"]
                row.append(Span(rank, "p2p" if p2p else "collective", op["op"], op["issued_ns"] - o,
                                (done if done is not None else end_ns) - o, ready - o, 0, op["nbytes"],
                                op["_index"], tuple(op["group_ranks"]), op["peer"], done is not None))
            for name, s, e, depth in sorted(data["regions"], key=lambda x: (x[1], x[3])):
                row.append(Span(rank, "region", name, s - o, e - o, s - o, depth))
            spans.append(row)
        return spans

    # -- reading ---------------------------------------------------------------------------------
    def operations(self, rank: int | None = None) -> list[Span]:
        """The :class:`Span` of every operation (all ranks, or ``rank``'s), in issue order."""
        rows = self.spans if rank is None else [self.spans[rank]]
        return [s for row in rows for s in row if s.kind != "region"]

    def regions(self, rank: int | None = None) -> list[Span]:
        """The :class:`Span` of every region (all ranks, or ``rank``'s)."""
        rows = self.spans if rank is None else [self.spans[rank]]
        return [s for row in rows for s in row if s.kind == "region"]

    @property
    def end(self) -> int:
        """ns from the origin to the last rank's end."""
        last: int = max((d["end_ns"] for d in self.raw), default=self.origin_ns)
        return last - self.origin_ns

    def overlap(self, rank: int, compute: str | Iterable[str] = ("compute",),
                within: str | None = None) -> dict[str, float]:
        """How much of rank ``rank``'s communication ran while it computed, as HTA defines its
        computation-communication overlap: the time both ran (the union of the communication spans
        intersected with the union of the compute regions) over the time communication ran (the
        union of the spans, issue to completion, waiting included, as a communication kernel runs
        while it waits for its peers). Source: HolisticTraceAnalysis, ``hta/analyzers/
        communication_analysis.py`` (``get_comm_comp_overlap``: merged kernel intervals, overlap
        time / communication time; https://hta.readthedocs.io).

        Args:
            rank: the rank (int).
            compute: the names of the regions that are computation (str or tuple of str).
            within: count only what falls inside the regions of this name (e.g. ``"step"``: leave
                out a set-up barrier); ``None``: the whole call.

        Returns:
            dict of ns (int) ``communication``, ``overlapped``, ``exposed`` (communication with no
            compute beside it: what the step waits for) and ``overlap_pct`` (float, 0..100;
            0.0 when the rank did not communicate).
        """
        names = (compute,) if isinstance(compute, str) else tuple(compute)
        comm = _union([(s.start, s.end) for s in self.operations(rank)])
        comp = _union([(s.start, s.end) for s in self.regions(rank) if s.name in names])
        if within is not None:
            windows = _union([(s.start, s.end) for s in self.regions(rank) if s.name == within])
            comm, comp = (_union([(max(s, ws), min(e, we)) for s, e in spans for ws, we in windows
                                  if min(e, we) > max(s, ws)]) for spans in (comm, comp))
        total = sum(e - s for s, e in comm)
        both = sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in comm for s2, e2 in comp)
        return dict(communication=total, overlapped=both, exposed=total - both,
                    overlap_pct=100.0 * both / total if total else 0.0)

    def table(self) -> str:
        """One line per operation: rank, operation, k, issued, waiting, transfer (ms)."""
        lines = [f"{'rank':>4}  {'operation':<22} {'k':>3} {'issued ms':>10} {'waiting ms':>11} {'transfer ms':>12}"]
        for s in sorted(self.operations(), key=lambda s: (s.rank, s.start)):
            lines.append(f"{s.rank:>4}  {s.name:<22} {s.index:>3} {s.start / 1e6:>10.2f} {s.waiting / 1e6:>11.2f} "
                         f"{s.transfer / 1e6:>12.2f}" + ("" if s.completed else "  (not completed)"))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Timeline(world_size={self.world_size}, operations={len(self.operations())}, "
                f"regions={len(self.regions())}, end={self.end / 1e6:.1f} ms)")

    # -- Chrome / Perfetto trace -----------------------------------------------------------------
    def chrome_trace(self) -> dict[str, Any]:
        """The timeline in the Trace Event Format that chrome://tracing and https://ui.perfetto.dev
        open: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``, one process (``pid``) per rank
        named ``"rank r"``, thread 0 ``communication`` (each operation an ``"X"`` event with its
        waiting part as a nested ``"X"`` event named ``"waiting"``), thread 1 ``regions``. ``ts`` and
        ``dur`` are µs from the origin (float). Source: Trace Event Format,
        https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU ("X":
        complete events; "M": metadata ``process_name``/``thread_name``)."""
        events: list[dict[str, Any]] = []
        for rank in range(self.world_size):
            events.append(dict(ph="M", pid=rank, tid=0, name="process_name", args=dict(name=f"rank {rank}")))
            events.append(dict(ph="M", pid=rank, tid=0, name="process_sort_index", args=dict(sort_index=rank)))
            events.append(dict(ph="M", pid=rank, tid=0, name="thread_name", args=dict(name="communication")))
            events.append(dict(ph="M", pid=rank, tid=1, name="thread_name", args=dict(name="regions")))
            for s in self.spans[rank]:
                if s.kind == "region":
                    events.append(dict(ph="X", pid=rank, tid=1, name=s.name, cat="region",
                                       ts=s.start / 1e3, dur=s.duration / 1e3, args=dict(depth=s.depth)))
                    continue
                args: dict[str, Any] = dict(bytes=s.nbytes, k=s.index, group_ranks=list(s.group_ranks),
                            waiting_us=s.waiting / 1e3, transfer_us=s.transfer / 1e3, completed=s.completed)
                if s.peer is not None:
                    args["peer"] = s.peer
                events.append(dict(ph="X", pid=rank, tid=0, name=s.name, cat=s.kind,
                                   ts=s.start / 1e3, dur=s.duration / 1e3, args=args))
                if s.waiting:
                    events.append(dict(ph="X", pid=rank, tid=0, name="waiting", cat="waiting",
                                       ts=s.start / 1e3, dur=s.waiting / 1e3, args=dict(operation=s.name, k=s.index)))
        return dict(traceEvents=events, displayTimeUnit="ms",
                    otherData=dict(clock=self.clock, origin_ns=self.origin_ns))

    def save_chrome_trace(self, path: str | os.PathLike[str]) -> str:
        """Write :meth:`chrome_trace` as JSON to ``path`` (open it in https://ui.perfetto.dev or
        chrome://tracing); returns the path as str."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)
        return str(path)

