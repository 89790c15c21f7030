"""Running a schedule inside a launched rank: :func:`execute` (any :class:`Schedule` on this
rank's buffer, with ``torch.distributed.isend``/``irecv``), :func:`snapshots` (every round's
buffer from what it recorded) and :func:`all_reduce` (a drop-in ``dist.all_reduce`` with a choice
of algorithm).

Call these on every rank of a launch (inside the function you give :func:`collnb.launch`), with
the same schedule. Every round posts all its sends and receives before waiting on any, so a round
never deadlocks; large messages travel in segments so that reducing and forwarding overlap the
transfer, as in gloo's own ring (gloo ``gloo/allreduce.cc``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypeAlias, TypedDict

import torch
import torch.distributed as dist

from ..i18n import _
from ..vocabulary import op_name
from .schedules import Schedule, cached_schedule, chunk_bounds

__all__ = ["execute", "snapshots", "all_reduce", "SEGMENT_BYTES", "FORWARD", "ExecuteResult", "Recording", "Change"]

#: ``(start, stop)``: element offsets of a contiguous part of a buffer.
Range: TypeAlias = tuple[int, int]
#: ``(round, start, stop, tensor)``: elements ``start:stop`` of the working buffer after that round.
Change: TypeAlias = tuple[int, int, int, torch.Tensor]
#: One rank's sends of one round: ``(dst, ranges)``.
_Sends: TypeAlias = list[tuple[int, list[Range]]]
#: One rank's receives of one round: ``(src, ranges, reduce)``.
_Recvs: TypeAlias = list[tuple[int, list[Range], bool]]


class Recording(TypedDict):
    """What :func:`execute` kept with ``record=True`` (:func:`snapshots` rebuilds every round from it):
    ``initial`` the 1-D buffer before round 1, ``changes`` what every round wrote, ``n_rounds``."""

    initial: torch.Tensor
    changes: list[Change]
    n_rounds: int


class ExecuteResult(TypedDict):
    """:func:`execute`'s answer: ``seconds`` (per round, this rank's wall time) and, with ``record=True``,
    the :class:`Recording`'s keys."""

    seconds: list[float]
    initial: NotRequired[torch.Tensor]
    changes: NotRequired[list[Change]]
    n_rounds: NotRequired[int]


def _combine(dst: torch.Tensor, src: torch.Tensor, op: str) -> None:
    """dst <- dst (op) src, in place, in dst's dtype (bool: sum = or, product = and)."""
    if op in ("sum", "avg"):
        if dst.dtype == torch.bool:
            dst.logical_or_(src)
        else:
            dst.add_(src)
    elif op == "product":
        if dst.dtype == torch.bool:
            dst.logical_and_(src)
        else:
            dst.mul_(src)
    elif op == "min":
        torch.minimum(dst, src, out=dst)
    elif op == "max":
        torch.maximum(dst, src, out=dst)
    elif op == "band":
        dst.bitwise_and_(src)
    elif op == "bor":
        dst.bitwise_or_(src)
    else:  # "bxor": execute() checked the name with vocabulary.op_name
        dst.bitwise_xor_(src)


def _ranges(chunks: Iterable[int], bounds: Sequence[int]) -> list[Range]:
    """Merge chunk indices into contiguous element ranges [(start, stop), ...]."""
    out: list[Range] = []
    for c in chunks:
        a, b = bounds[c], bounds[c + 1]
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


@dataclass
class _Plan:
    """One rank's view of a schedule: per round (sends, recvs, finalize ranges), and per round
    whether it sends from the working buffer although the call has an input buffer (all_to_all's
    forwarding stage, :attr:`Round.from_work`)."""
    rounds: list[tuple[_Sends, _Recvs, list[Range]]]
    from_work: list[bool]


def _rank_plan(sched: Schedule, rank: int, bounds: Sequence[int]) -> _Plan:
    """``rank``'s sends, receives and finalized ranges in every round of ``sched``."""
    out = []
    for rnd in sched.rounds:
        sends = [(t.dst, _ranges(t.chunks, bounds)) for t in rnd.transfers if t.src == rank]
        recvs = [(t.src, _ranges(t.dst_chunks, bounds), t.reduce) for t in rnd.transfers if t.dst == rank]
        fin = _ranges(sorted(c for (r, c) in rnd.finalize if r == rank), bounds)
        out.append((sends, recvs, fin))
    return _Plan(out, [rnd.from_work for rnd in sched.rounds])


def _gather_ranges(buf: torch.Tensor, ranges: Sequence[Range]) -> torch.Tensor:
    """The elements of ``ranges`` of ``buf``, one after the other (a view when there is one range)."""
    if len(ranges) == 1:
        a, b = ranges[0]
        return buf[a:b]
    return torch.cat([buf[a:b] for a, b in ranges])


def _padding_pairs(counts: Sequence[int]) -> list[tuple[int, int]]:
    """Dummy messages ``[(src, dst), ...]`` that give every rank the same number of point-to-point
    calls: rank ``r`` made ``counts[r]`` (sends + receives); each dummy message adds one call to
    two different ranks. Deterministic, so every rank computes the same list."""
    n = len(counts)
    if n < 2:
        return []
    if sum(counts) % 2:
        raise ValueError("counts of sends + receives always add up to an even number (each message is "
                         f"counted at both ends); got {counts}")
    target = max(counts)
    for _attempt in range(2 * n + 4):  # raising the target by 1 adds n-1 to the others' sum, 1 to the max
        d = [target - c for c in counts]
        if sum(d) % 2 == 0 and 2 * max(d) <= sum(d):
            break
        target += 1
    else:  # pragma: no cover - unreachable for even sums
        raise AssertionError(f"no padding found for {counts}")
    pairs = []
    while any(d):
        order = sorted(range(n), key=lambda r: (-d[r], r))
        a, b = order[0], order[1]
        pairs.append((a, b))
        d[a] -= 1
        d[b] -= 1
    return pairs


def _detail_mode() -> bool:
    try:
        return dist.get_debug_level() == dist.DebugLevel.DETAIL
    except Exception:  # noqa: BLE001 - older/odd builds: assume not
        return False


_SCRATCH: dict[tuple[torch.dtype, str], torch.Tensor] = {}

#: Messages larger than twice this many bytes travel as segments of this size, each its own
#: isend/irecv; a receiver that combines starts reducing the first segment while the next ones
#: are still arriving (the overlap gloo's own ring uses, gloo/allreduce.cc). Set it to ``None`` to
#: send every message whole.
SEGMENT_BYTES: int | None = 1 << 20
#: Forward ranges that arrive complete and go out unchanged next round as they arrive (gloo only;
#: see :func:`execute`). ``False`` runs the rounds strictly one after the other.
FORWARD: bool = True
_TAG_STRIDE = 1 << 12  # tags: round * stride + segment


def _segments(n: int, esize: int) -> list[Range]:
    """``[(start, stop), ...]`` element ranges of one message of ``n`` elements (sender and
    receiver compute the same split from the same length)."""
    seg = SEGMENT_BYTES
    if not seg or n * esize <= 2 * seg:
        return [(0, n)]
    per = max(1, seg // esize, -(-n // (_TAG_STRIDE - 1)))
    return [(a, min(a + per, n)) for a in range(0, n, per)]


def _scratch(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A receive buffer of ``n`` elements, reused across calls (one per dtype and device, grown
    to the largest size asked): a fresh large allocation costs page faults on every call."""
    key = (dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < n:
        buf = _SCRATCH[key] = torch.empty(n, dtype=dtype, device=device)
    return buf[:n]


def execute(sched: Schedule, work: torch.Tensor, *, op: str | dist.ReduceOp = "sum",
            send_from: torch.Tensor | None = None, record: bool = False, bounds: Sequence[int] | None = None,
            group: dist.ProcessGroup | None = None) -> ExecuteResult:
    """Run ``sched`` on this rank's 1-D ``work`` tensor in place, with ``isend``/``irecv``.

    Call it on every rank of the launch (inside the function you give
    :func:`collnb.launcher.launch`), with the same schedule.

    Messages above ``2 * SEGMENT_BYTES`` travel as segments of :data:`SEGMENT_BYTES`; a
    receiver that combines reduces each segment as it arrives, and on gloo a range that arrives
    complete and is sent on unchanged in the next round (the ring) is forwarded segment by
    segment as it arrives, so consecutive rounds overlap as in gloo's own ring
    (gloo ``gloo/allreduce.cc``). The rounds' results are the same; only their timing overlaps.

    Args:
        sched: from :func:`schedule`; its world size must equal the process group's.
        work: this rank's contiguous 1-D buffer (any dtype the backend sends), updated in place.
            Split into ``sched.n_chunks`` chunks by ``bounds``.
        op: reduce op name (``"sum"``, ``"product"``, ``"min"``, ``"max"``, ``"avg"``, ``"band"``,
            ``"bor"``, ``"bxor"``); used by reducing rounds. ``"avg"`` sums and divides each
            chunk by the world size in the round its sum completes (the data stays in ``work``'s
            dtype, as gloo's AVG does).
        send_from: all_to_all only: the input buffer the rank sends from (same layout as ``work``).
        record: keep what every round changed: a copy of ``work`` before the first round, and
            after each round a copy of the element ranges this rank received into (costs as many
            bytes of copies as the rank receives; :func:`snapshots` rebuilds the buffer after
            every round from them).
        bounds: ``n_chunks + 1`` element offsets (default :func:`chunk_bounds` of ``work``).
        group: process group to send on (default: the default group).

    Returns:
        :class:`ExecuteResult`: ``seconds`` (list of per-round wall seconds on this rank); with ``record=True`` also
        ``initial`` (copy of ``work`` before round 1) and ``changes`` (list of
        ``(round, start, stop, tensor)``: the elements ``start:stop`` of ``work`` after that
        round). Pass it to :func:`snapshots` for a ``(rounds + 1, work.numel())`` tensor.

    Raises:
        ValueError: world size mismatch, non-contiguous ``work``, unknown op (the words of
            :func:`collnb.vocabulary.op_name`, which also takes ``"SUM"`` or a ``ReduceOp``).
        TypeError: ``op`` of another type.
    """
    rank = dist.get_rank(group)
    ws = dist.get_world_size(group)
    if ws != sched.world_size:
        raise ValueError(_("schedule is for world size {world_size} but the process group has {n} ranks").format(
            world_size=sched.world_size, n=ws))
    if work.dim() != 1 or not work.is_contiguous():
        raise ValueError(_("work must be a contiguous 1-D tensor; pass tensor.view(-1) of a contiguous tensor"))
    opn = op_name(op)
    if bounds is None:
        bounds = chunk_bounds(work.numel(), sched.n_chunks)
    plan = _rank_plan(sched, rank, list(bounds))
    # the buffer each round sends from: the input for all_to_all, except in a forwarding round
    sources = [work if send_from is None or fw else send_from for fw in plan.from_work]
    # one scratch buffer, as large as the largest round's receives that need one
    need = 0
    for (sends, recvs, _post), src_buf in zip(plan.rounds, sources):
        tot = 0
        send_spans = [rg for _, rgs in sends for rg in rgs] if src_buf is work else []
        for _src, rgs, red in recvs:
            n = sum(b - a for a, b in rgs)
            if red or len(rgs) > 1 or any(a < d and c < b for a, b in rgs for c, d in send_spans):
                tot += n
        need = max(need, tot)
    scratch = _scratch(need, work.dtype, work.device) if need else None
    initial = work.clone() if record else None
    changes: list[Change] = []
    seconds: list[float] = []
    esize = work.element_size()
    # Forwarding: a range that arrives complete in round k and is sent on unchanged in round k+1
    # (the ring passes each chunk on) goes out segment by segment as it arrives, so the next
    # round's transfer overlaps this one's, as in gloo's ring. gloo only (NCCL orders p2p per
    # stream), not for AVG (its division ends the round) nor all_to_all (sends from its input).
    forward_ok = FORWARD and send_from is None and opn != "avg" and dist.get_backend(group) == "gloo"
    early_reqs: dict[int, list[dist.Work]] = {}
    early_posted: dict[int, set[tuple[int, tuple[Range, ...]]]] = {}
    for k, (sends, recvs, fin) in enumerate(plan.rounds, 1):
        t0 = time.perf_counter()
        src_buf = sources[k - 1]
        reqs = early_reqs.pop(k, [])
        posted = early_posted.pop(k, set())
        for dst, rgs in sends:
            if (dst, tuple(rgs)) in posted:
                continue
            msg = _gather_ranges(src_buf, rgs)
            for s, (a, b) in enumerate(_segments(msg.numel(), esize)):
                reqs.append(_work(dist.isend(msg[a:b], dst, group=group, tag=k * _TAG_STRIDE + s)))
        send_spans = [rg for _, rgs in sends for rg in rgs] if src_buf is work else []
        next_sends: _Sends = plan.rounds[k][0] if forward_ok and k < len(plan.rounds) else []
        recv_spans = [rg for _, rgs, _ in recvs for rg in rgs]
        pending: list[tuple[torch.Tensor, list[Range], bool]] = []
        # single-range receives handled segment by segment as they arrive
        streamed: list[tuple[list[dist.Work], list[Range], torch.Tensor, Range, bool, list[int]]] = []
        off = 0
        for src, rgs, red in recvs:
            n = sum(b - a for a, b in rgs)
            overlap = any(a < d and c < b for a, b in rgs for c, d in send_spans)
            if red or len(rgs) > 1 or overlap:
                assert scratch is not None  # sized above for every such receive
                buf = scratch[off:off + n]
                off += n
            else:
                a, b = rgs[0]
                buf = work[a:b]
            segs = _segments(n, esize)
            seg_reqs = [_work(dist.irecv(buf[a:b], src, group=group, tag=k * _TAG_STRIDE + s))
                        for s, (a, b) in enumerate(segs)]
            forward: list[int] = []
            if len(rgs) == 1 and not overlap:
                ra, rb = rgs[0]
                alone = sum(1 for c, d in recv_spans if c < rb and ra < d) == 1
                # only a destination that gets one message next round: two messages to one rank share
                # a tag, so they must leave in the order the receiver posts them
                forward = [dst for dst, nrgs in next_sends if alone and len(nrgs) == 1 and nrgs[0] == (ra, rb)
                           and sum(1 for d, _r in next_sends if d == dst) == 1]
            if (red or forward) and len(rgs) == 1 and not overlap:
                streamed.append((seg_reqs, segs, buf, rgs[0], red, forward))
            else:
                reqs.extend(seg_reqs)
                if red or len(rgs) > 1 or overlap:
                    pending.append((buf, rgs, red))
        for seg_reqs, segs, buf, (ra, rb), red, forward in streamed:
            for s, (req, (a, b)) in enumerate(zip(seg_reqs, segs)):
                req.wait()
                if red:
                    _combine(work[ra + a:ra + b], buf[a:b], opn)
                for dst in forward:  # this segment is final: send it on for round k+1 now
                    early_reqs.setdefault(k + 1, []).append(
                        _work(dist.isend(work[ra + a:ra + b], dst, group=group, tag=(k + 1) * _TAG_STRIDE + s)))
            for dst in forward:
                early_posted.setdefault(k + 1, set()).add((dst, ((ra, rb),)))
        for req in reqs:
            req.wait()
        for buf, rgs, red in pending:
            o = 0
            for a, b in rgs:
                piece = buf[o:o + (b - a)]
                if red:
                    _combine(work[a:b], piece, opn)
                else:
                    work[a:b].copy_(piece)
                o += b - a
        if opn == "avg":
            for a, b in fin:
                work[a:b].div_(ws)
        seconds.append(time.perf_counter() - t0)
        if record:
            for _src, rgs, _red in recvs:
                for a, b in rgs:
                    changes.append((k, a, b, work[a:b].clone()))
    if _detail_mode():
        # Under TORCH_DISTRIBUTED_DEBUG=DETAIL every isend/irecv advances the group's sequence
        # number, and the next built-in collective fails its consistency check if the ranks made
        # different numbers of point-to-point calls (a tree, a chain, a fold). Pad with one-element
        # messages so every rank ends with the same count; they are not part of the algorithm
        # and are not in the trace.
        counts = [0] * ws
        for rnd in sched.rounds:
            for t in rnd.transfers:
                counts[t.src] += 1
                counts[t.dst] += 1
        pad = _padding_pairs(counts)
        if pad:
            one = torch.zeros(1, dtype=torch.uint8, device=work.device)
            sink = [torch.empty(1, dtype=torch.uint8, device=work.device) for _ in pad]
            reqs = []
            tag = (len(sched.rounds) + 1) * _TAG_STRIDE
            for i, (a, b) in enumerate(pad):
                if a == rank:
                    reqs.append(_work(dist.isend(one, b, group=group, tag=tag)))
                elif b == rank:
                    reqs.append(_work(dist.irecv(sink[i], a, group=group, tag=tag)))
            for req in reqs:
                req.wait()
    out = ExecuteResult(seconds=seconds)
    if initial is not None:  # record=True
        out["initial"], out["changes"], out["n_rounds"] = initial, changes, len(plan.rounds)
    return out


def _work(work: dist.Work | None) -> dist.Work:
    """The request of an ``isend``/``irecv`` (``None`` only for a rank outside the group, which
    :func:`execute`'s world-size check refused before any message)."""
    assert work is not None, "isend/irecv outside the process group"
    return work


def snapshots(recording: Recording | ExecuteResult) -> torch.Tensor:
    """Every round's buffer from what :func:`execute` recorded (``record=True``).

    Returns:
        tensor ``(rounds + 1, numel)``: row 0 the buffer before round 1, row ``k`` after round ``k``.

    Raises:
        ValueError: the result was not recorded.
    """
    if recording.get("initial") is None:
        raise ValueError(_("nothing recorded: call execute(..., record=True)"))
    cur = recording["initial"].clone()
    rows = [cur.clone()]
    changes = sorted(recording["changes"], key=lambda c: c[0])
    i = 0
    for k in range(1, recording["n_rounds"] + 1):
        while i < len(changes) and changes[i][0] == k:
            _kind, a, b, t = changes[i]
            cur[a:b] = t
            i += 1
        rows.append(cur.clone())
    return torch.stack(rows)


def all_reduce(tensor: torch.Tensor, op: str | dist.ReduceOp = "sum", algorithm: str = "ring", *,
               record: bool = False, group: dist.ProcessGroup | None = None) -> ExecuteResult:
    """``dist.all_reduce(tensor, op)`` built from ``isend``/``irecv`` with the chosen algorithm.

    Call on every rank inside a launched function. ``tensor`` (contiguous, any shape) is reduced
    in place; its elements are split into ``world_size`` chunks of (nearly) equal size.

    Args:
        tensor: contiguous CPU tensor (on NCCL: this rank's GPU).
        op: ``"sum"``, ``"product"``, ``"min"``, ``"max"``, ``"avg"`` (floating dtypes),
            ``"band"``/``"bor"``/``"bxor"`` (integer/bool dtypes).
        algorithm: ``"ring"``, ``"recursive_doubling"``, ``"rabenseifner"`` or ``"binomial_tree"``.
        record: also record what every round changed (see :func:`execute`, :func:`snapshots`).

    Returns:
        :func:`execute`'s dict (per-round seconds; with ``record`` the recording).

    Raises:
        ValueError: unknown algorithm/op, non-contiguous tensor.
        TypeError: an algorithm or op of the wrong type.
    """
    if not tensor.is_contiguous():
        raise ValueError(_("tensor must be contiguous (call .contiguous() first, then copy the result back)"))
    sched = cached_schedule("all_reduce", algorithm, dist.get_world_size(group))
    return execute(sched, tensor.view(-1), op=op, record=record, group=group)

