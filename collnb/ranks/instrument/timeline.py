"""Per-rank timelines: when each communication operation was issued and completed on every rank,
and the learner's marked regions, on one clock across ranks (``launch(fn, n, timeline=True)``).

**Inside a rank** its :class:`.tracks.Track` takes its part of the timeline (when each operation was
issued and completed there, and its regions); this module, the launcher's side, puts every rank's
track on one clock.

**One clock.** Every time is ``time.perf_counter_ns()``, which on Linux is
``clock_gettime(CLOCK_MONOTONIC)`` (``time.get_clock_info("perf_counter")``); CLOCK_MONOTONIC is
one system-wide clock, the same in every process of a machine (clock_gettime(2): "a nonsettable
system-wide clock that represents monotonic time since some unspecified point in the past").
collnb's ranks are processes forked on the launcher's machine, so their times need no alignment:
the offset between ranks is 0, and a time is off only by the read's own latency (tens of ns) plus
the delay between the event and the read (the rank may be descheduled: on a loaded 2-core machine,
up to a scheduler time slice, a few ms). Ranks on several machines (ipyparallel engines on several
hosts) do not share CLOCK_MONOTONIC: there every rank leaves one barrier of the call's group before
its function starts and reads its clock (``aligned_ns``), and :class:`Timeline` shifts each rank's
times so that those reads coincide (:data:`ALIGNED`). The ranks leave a barrier within about one
message latency of each other (gloo's barrier is an all_reduce: the last rank's arrival releases
every rank), so across hosts a time is off by up to that latency (tens of µs on a LAN, more on a
loaded network) plus each host's read delay.

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

import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Literal

__all__ = ["Timeline", "Span", "SpanKind", "CLOCK", "ALIGNED"]

#: What a :class:`Span` is: a collective, a send/recv (``"p2p"``) or a learner's region.
SpanKind = Literal["collective", "p2p", "region"]

#: The clock every time is read from (Linux: CLOCK_MONOTONIC, shared by all local ranks).
CLOCK = "time.perf_counter_ns (CLOCK_MONOTONIC on Linux: one system-wide clock for every local rank)"
#: How ranks on several hosts are put on one clock (see the module docstring).
ALIGNED = ("time.perf_counter_ns of each rank's host, shifted so that every rank leaves the call's first barrier "
           "at the same time (ranks on several hosts)")

_P2P = ("send", "recv", "isend", "irecv")


def _shifted(track: dict[str, Any], offset: int) -> dict[str, Any]:
    """``track`` (a rank's :meth:`.tracks.Track.result`) with every time moved ``offset`` ns earlier."""
    if not offset:
        return track
    ops = [dict(op, issued_ns=op["issued_ns"] - offset, returned_ns=op["returned_ns"] - offset,
                completed_ns=None if op["completed_ns"] is None else op["completed_ns"] - offset)
           for op in track["ops"]]
    regions = [(name, s - offset, e - offset, depth) for name, s, e, depth in track["regions"]]
    return dict(track, ops=ops, regions=regions, start_ns=track["start_ns"] - offset,
                end_ns=track["end_ns"] - offset, aligned_ns=track["aligned_ns"] - offset)


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
        per_rank: one dict per rank (rank order), its track as :meth:`.tracks.Track.result` returns it.

    Attributes:
        world_size: the number of ranks (int).
        spans: one list of :class:`Span` per rank: its operations in issue order, then its regions.
        origin_ns: the clock value (ns, :data:`CLOCK`) taken as 0: the earliest function start.
        clock: :data:`CLOCK`, how times are aligned across ranks (see the module docstring).
    """

    def __init__(self, per_rank: list[dict[str, Any]]) -> None:
        aligned = [d.get("aligned_ns") for d in per_rank]
        #: how times are aligned across ranks: :data:`CLOCK` (one machine's clock) or :data:`ALIGNED`
        self.clock = ALIGNED if per_rank and all(a is not None for a in aligned) else CLOCK
        self.raw = [_shifted(d, d["aligned_ns"] - aligned[0]) for d in per_rank] if self.clock == ALIGNED \
            else list(per_rank)
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

