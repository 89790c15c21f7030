"""Per-rank timelines (issue 23): ``launch(fn, n, timeline=True)`` times every operation's issue, its
last rank's arrival and its completion on every rank, and the learner's regions, on one clock;
the Gantt chart and the Chrome/Perfetto trace show them.

Tolerances are ratios of the known schedule (a rank sleeps r * D before a collective), never
absolute wall-clock limits: a loaded 2-core machine delays a rank by scheduling, not by a fixed
amount, so each bound keeps a margin of at least 0.4 D."""
import json
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

import collnb
from collnb.ranks import Timeline
from collnb.ranks import warm_pool
from collnb.views.palette import rank_color
from collnb.views.raster import rgb8

D = 0.25  # s: the step of the ring of sleeps


def _ring_of_sleeps(rank, world_size, d):
    dist.barrier()  # every rank leaves it within a few ms of the others
    with collnb.region("sleep"):
        time.sleep(rank * d)
    x = torch.ones(16)
    with torch.profiler.record_function("reduce"):
        dist.all_reduce(x)
    return x[0].item()


def test_ring_of_sleeps_waiting_follows_the_schedule():
    n = 4
    out = collnb.launch(_ring_of_sleeps, n, (D,), timeline=True)
    assert list(out) == [float(n)] * n
    tl = out.timeline
    assert isinstance(tl, Timeline) and tl.world_size == n
    reduces = [[s for s in tl.operations(r) if s.name == "all_reduce"] for r in range(n)]
    assert all(len(ops) == 1 for ops in reduces)
    reduces = [ops[0] for ops in reduces]
    # one last arrival for the collective, the same on every rank: the last rank's issue
    assert len({s.ready for s in reduces}) == 1
    assert reduces[0].ready == max(s.start for s in reduces) == reduces[n - 1].start
    for r, s in enumerate(reduces):
        expected = (n - 1 - r) * D * 1e9
        if r < n - 1:
            assert 0.6 <= s.waiting / expected <= 1.6, (r, s.waiting, expected)
        else:  # the last rank waits for nobody
            assert s.waiting == 0
        assert s.completed and s.end >= s.ready  # nobody completes before the last rank arrived
        assert s.index == 1  # the barrier was collective 0 on the group
    # the waiting parts fall in rank order, each about D shorter than the one before
    waits = [s.waiting for s in reduces]
    assert waits == sorted(waits, reverse=True)
    for a, b in zip(waits, waits[1:]):
        assert 0.6 <= (a - b) / (D * 1e9) <= 1.6
    # regions: collnb.region and torch.profiler.record_function, one of each per rank
    for r in range(n):
        names = [s.name for s in tl.regions(r)]
        assert names.count("sleep") == 1 and names.count("reduce") == 1, names
        sleep = next(s for s in tl.regions(r) if s.name == "sleep")
        if r:
            assert 1.0 <= sleep.duration / (r * D * 1e9) <= 1.6  # time.sleep never returns early
        reduce = next(s for s in tl.regions(r) if s.name == "reduce")
        assert reduce.start <= reduces[r].start and reduce.end >= reduces[r].end  # the collective is inside


def _late_sender(rank, world_size, d):
    x = torch.zeros(8)
    dist.barrier()
    if rank == 0:
        time.sleep(d)
        dist.send(torch.ones(8), 1)
    elif rank == 1:
        dist.recv(x, 0)
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    return x.sum().item()


def test_send_recv_pair_and_async_op():
    out = collnb.launch(_late_sender, 2, (D,), timeline=True)
    assert list(out) == [8.0, 8.0]
    tl = out.timeline
    recv = next(s for s in tl.operations(1) if s.name == "recv")
    send = next(s for s in tl.operations(0) if s.name == "send")
    assert recv.kind == send.kind == "p2p" and recv.peer == 0 and send.peer == 1
    assert recv.ready == send.ready == send.start  # the sender arrived last
    assert 0.6 <= recv.waiting / (D * 1e9) <= 1.6
    assert send.waiting == 0
    for r in range(2):
        ar = next(s for s in tl.operations(r) if s.name == "all_reduce")
        assert ar.completed and ar.end >= ar.ready >= ar.start


def test_chrome_trace_has_one_process_per_rank(tmp_path):
    out = collnb.launch(_ring_of_sleeps, 3, (0.02,), timeline=True)
    tl = out.timeline
    path = tl.save_chrome_trace(tmp_path / "trace.json")
    trace = json.loads(open(path).read())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    xs = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {0, 1, 2}
    assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in xs)
    comm = [e for e in xs if e["cat"] in ("collective", "p2p")]
    assert len(comm) == len(tl.operations())
    # µs: each event's duration is its span's, in µs
    for e in comm:
        s = next(s for s in tl.operations(e["pid"]) if s.name == e["name"] and s.index == e["args"]["k"])
        assert e["dur"] == pytest.approx(s.duration / 1e3)
        assert e["args"]["waiting_us"] == pytest.approx(s.waiting / 1e3)
    # the waiting part is nested inside its operation (Perfetto stacks it under it)
    for e in xs:
        if e["cat"] == "waiting":
            parent = next(p for p in comm if p["pid"] == e["pid"] and p["ts"] == e["ts"])
            assert e["dur"] <= parent["dur"] + 1e-6


def _regions_only(rank, world_size):
    with collnb.region("outer"):
        with collnb.region("inner"):
            pass
    return rank


def test_default_path_and_warm_ranks_kept():
    assert collnb.launch(_regions_only, 2) == [0, 1]
    assert type(collnb.launch(_regions_only, 2)) is list  # no timeline object without timeline=True
    pool = warm_pool()
    out = collnb.launch(_regions_only, 2, timeline=True)
    tl = out.timeline
    assert [(s.name, s.depth) for s in tl.regions(0)] == [("outer", 0), ("inner", 1)]
    assert tl.operations() == []
    collnb.launch(_regions_only, 2)
    assert warm_pool() is pool  # collnb.region in a rank is no change that retires it


def test_region_outside_ranks_and_bad_arguments():
    with collnb.region("here"):  # outside a timeline call: nothing happens
        pass
    with pytest.raises(TypeError, match="region name must be a str"):
        with collnb.region(3):
            pass
    with pytest.raises(TypeError, match="timeline"):
        collnb.launch(_regions_only, 2, timeline="yes")
    with pytest.raises(ValueError, match="flight_recorder"):
        collnb.launch(_regions_only, 2, flight_recorder=-1)


def _synthetic():
    """Two ranks on one all_reduce: rank 0 issues at 0, rank 1 at 50 ms; both complete at 60 ms."""
    ms = 1_000_000
    base = 10 * ms
    op = dict(name="all_reduce", op="all_reduce", peer=None, group_ranks=(0, 1), shapes=((4,),),
              dtypes=("float32",), nbytes=16, call=0)
    r0 = dict(ops=[dict(op, issued_ns=base, returned_ns=base + ms, completed_ns=base + 60 * ms)],
              regions=[("forward", base - 5 * ms + 5 * ms, base, 0)], start_ns=base, end_ns=base + 70 * ms)
    r1 = dict(ops=[dict(op, issued_ns=base + 50 * ms, returned_ns=base + 51 * ms, completed_ns=base + 60 * ms)],
              regions=[("forward", base, base + 50 * ms, 0)], start_ns=base, end_ns=base + 70 * ms)
    return Timeline([r0, r1])


def test_timeline_split_exact_on_known_times():
    tl = _synthetic()
    a, b = tl.operations(0)[0], tl.operations(1)[0]
    assert (a.start, a.ready, a.end) == (0, 50_000_000, 60_000_000)
    assert (a.waiting, a.transfer) == (50_000_000, 10_000_000)
    assert (b.waiting, b.transfer) == (0, 10_000_000)
    assert tl.end == 70_000_000
    assert "all_reduce" in tl.table() and "50.00" in tl.table()


def test_ranks_on_other_hosts_are_put_on_one_clock_at_their_barrier():
    """Engines on several hosts: rank 1's clock reads 7 s more than rank 0's; each read its clock
    when it left the aligning barrier (aligned_ns), and the timeline shifts rank 1 by the difference:
    the same spans as on one clock."""
    from collnb.ranks.instrument.timeline import ALIGNED, CLOCK
    one_clock = _synthetic()
    skew = 7_000_000_000
    tracks = [dict(track, aligned_ns=5_000_000) for track in one_clock.raw]
    op1 = tracks[1]["ops"][0]
    tracks[1] = dict(tracks[1], ops=[dict(op1, issued_ns=op1["issued_ns"] + skew, returned_ns=op1["returned_ns"] + skew,
                                          completed_ns=op1["completed_ns"] + skew)],
                     regions=[(n, s + skew, e + skew, d) for n, s, e, d in tracks[1]["regions"]],
                     start_ns=tracks[1]["start_ns"] + skew, end_ns=tracks[1]["end_ns"] + skew,
                     aligned_ns=5_000_000 + skew)
    aligned = Timeline(tracks)
    assert aligned.clock == ALIGNED and one_clock.clock == CLOCK
    assert aligned.spans == one_clock.spans and aligned.end == one_clock.end
    assert Timeline(tracks[:1] + [dict(tracks[1], aligned_ns=None)]).clock == CLOCK  # one rank not aligned: as read


def test_gantt_draws_waiting_apart_from_transfer(tmp_path):
    tl = _synthetic()
    width = 1100
    pic = collnb.timeline_image(tl, width=width)
    assert pic.png[:8] == b"\x89PNG\r\n\x1a\n" and pic.pixels.shape[1] == width
    px = pic.pixels
    color0 = np.array(rgb8(rank_color(0)))
    # columns inside the plot where rank 0 waits (0-50 ms) and where it transfers (50-60 ms)
    left, plot_w = 78, width - 78 - 18

    def column(ms):
        return px[:, int(left + ms / 70 * plot_w)]

    def has(col, rgb):
        return bool((np.abs(col.astype(int) - rgb).sum(axis=1) == 0).any())

    assert not has(column(25), color0)  # the waiting part is hatched, not the rank's colour
    assert has(column(55), color0)      # the transfer is the rank's colour
    assert not has(column(65), color0)  # nothing after completion
    legend = px[30:52].reshape(-1, 3)  # the legend's row: the transfer swatch holds every rank's colour
    for r in range(tl.world_size):
        assert has(legend, np.array(rgb8(rank_color(r)))), r
    collnb.timeline_png(tl, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes() == pic.png
    with pytest.raises(ValueError, match="width"):
        collnb.timeline_image(tl, width=100)


def test_overlap_as_hta_defines_it_exact():
    ms = 1_000_000
    op = dict(name="all_reduce", op="all_reduce", peer=None, group_ranks=(0,), shapes=((4,),),
              dtypes=("float32",), nbytes=16, call=0)
    # communication 0-40 ms and 60-80 ms (60 ms); compute 20-70 ms: overlapped 20-40 and 60-70 = 30 ms
    data = dict(ops=[dict(op, issued_ns=0, returned_ns=ms, completed_ns=40 * ms),
                     dict(op, issued_ns=60 * ms, returned_ns=61 * ms, completed_ns=80 * ms)],
                regions=[("compute", 20 * ms, 70 * ms, 0), ("other", 0, 80 * ms, 0)], start_ns=0, end_ns=90 * ms)
    o = Timeline([data]).overlap(0)
    assert o == dict(communication=60 * ms, overlapped=30 * ms, exposed=30 * ms, overlap_pct=50.0)
    assert Timeline([data]).overlap(0, compute="other")["overlap_pct"] == 100.0
    assert Timeline([dict(data, ops=[])]).overlap(0)["overlap_pct"] == 0.0
    # within a "step" region of 30-80 ms: communication 30-40 and 60-80 (30 ms), overlapped 30-40 and 60-70
    stepped = dict(data, regions=data["regions"] + [("step", 30 * ms, 80 * ms, 0)])
    assert Timeline([stepped]).overlap(0, within="step") == dict(
        communication=30 * ms, overlapped=20 * ms, exposed=10 * ms, overlap_pct=pytest.approx(200 / 3))


@pytest.mark.slow
def test_the_recording_hook_has_the_annotations_ddp_compares():
    """DistributedDataParallel.register_comm_hook refuses a hook whose bucket or return annotation is not
    dist.GradBucket / torch.futures.Future[torch.Tensor] themselves (a postponed annotation's string is refused)."""
    import inspect

    from collnb.labs import overlap
    sig = inspect.signature(overlap.recording_hook)
    assert sig.parameters["bucket"].annotation is dist.GradBucket
    assert sig.return_annotation == torch.futures.Future[torch.Tensor]


def test_ddp_buckets_per_cap_and_the_wait_counted_as_compute_only_raises_overlap():
    from collnb.labs import overlap
    # 8 Linear(512, 512): each layer's weight + bias is 262656 float32 (1.0 MiB); DDP fills a bucket
    # until it reaches bucket_cap_mb, so 1 -> one layer per bucket, 2 -> two, 4 -> four, 25 -> all eight
    for cap, n in ((1, 8), (2, 4), (4, 2), (25, 1)):
        run = overlap.bucket_run(cap)
        assert run.n_buckets == n, (cap, run.buckets[0])
        for rank in range(2):
            got = run.buckets[rank]
            assert sorted(b[0] for b in got) == list(range(n))                 # each bucket's hook fired once
            assert sum(b[1] for b in got) == 8 * 262656 and sum(b[2] for b in got) == 16
            assert [b[3] for b in got] == sorted(b[3] for b in got)            # recorded in firing order
            step = [s for s in run.timeline.operations(rank) if s.name == "all_reduce"][-n:]
            assert len(step) == n                                               # one all_reduce per bucket
            window = next(s for s in run.timeline.regions(rank) if s.name == "step")
            names = [s.name for s in run.timeline.regions(rank) if window.start <= s.start <= window.end]
            assert sum(name.startswith("bucket ") for name in names) == n and "grad" in names  # the timed step's
        assert run.grad0[0] == run.grad0[1]                                     # the averaged gradient agrees
        for _rank, honest, naive in overlap.overlap_both_ways(run):
            assert honest["communication"] == naive["communication"] > 0
            # the grad regions lie inside backward: counting backward adds only its waits as "compute"
            assert naive["overlapped"] >= honest["overlapped"] and naive["exposed"] <= honest["exposed"]
    with pytest.raises(ValueError, match="bucket_cap_mb must be"):
        overlap.bucket_run(0)


def test_the_longest_wait_named_under_a_window_is_one_drawn_in_it():
    from collnb.views.timeline import _longest_wait
    tl = _synthetic()  # rank 0 waits 0-50 ms in its all_reduce, which ends at 60 ms
    assert _longest_wait(tl, 0, 70).rank == 0
    assert _longest_wait(tl, 61, 70) is None
    assert collnb.timeline_image(tl, start_ms=61, end_ms=70).png[:4] == b"\x89PNG"


def _overlapping_texts(pic):
    """Pairs of texts painted on ``pic`` whose ink boxes intersect, and texts outside the picture."""
    h, w = pic.pixels.shape[:2]
    boxes = pic.labels
    bad = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
           if a[2][0] < b[2][2] and b[2][0] < a[2][2] and a[2][1] < b[2][3] and b[2][1] < a[2][3]]
    outside = [t for t, _, (x0, y0, x1, y1) in boxes if x0 < 0 or y0 < 0 or x1 > w or y1 > h]
    return bad, outside


def _batched(rank, world_size):
    """Every rank: a barrier, then its neighbours' isend and irecv in flight together (one bar each,
    as 1F1B's batch_isend_irecv), with rank-dependent sleeps so that some wait."""
    dist.barrier()
    with collnb.region("step"):
        for k in range(3):
            with collnb.region(f"F{k}"):
                time.sleep(0.01 * (rank + 1))
            out, inp = torch.ones(8), torch.zeros(8)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, (rank + 1) % world_size),
                                           dist.P2POp(dist.irecv, inp, (rank - 1) % world_size)])
            for q in reqs:
                q.wait()
    return 0


def test_no_two_texts_of_a_timeline_overlap():
    """Issue 34: the axis label and the "longest wait" note were painted on the same line (16 and 18);
    every text of the picture (title, legend, ticks, axis label, the note, rank and bar labels) is
    recorded with its ink box: for a synthetic timeline, a ring of sleeps, a batch of isend/irecv
    pairs (labels of bars drawn over each other) and 8 ranks, at 1100 px and at the narrowest
    500 px, with a long title, no two boxes intersect and none leaves the picture."""
    ring = collnb.launch(_ring_of_sleeps, 4, (0.05,), timeline=True).timeline
    batched = collnb.launch(_batched, 4, timeline=True).timeline
    eight = collnb.launch(_ring_of_sleeps, 8, (0.02,), timeline=True).timeline
    long_title = "1F1B, p=4 stages, m=8: idle 30% measured, (p-1)/(m+p-1) = 27%, and a few more words"
    seen_note = 0
    for name, tl in (("synthetic", _synthetic()), ("ring", ring), ("batched", batched), ("eight", eight)):
        for width in (1100, 500):
            for title in ("", long_title):
                pic = collnb.timeline_image(tl, width=width, title=title)
                texts = [t for t, _, _ in pic.labels]
                assert "time since the first rank started (ms)" in texts, (name, width)
                seen_note += any(t.startswith("longest wait") for t in texts)
                bad, outside = _overlapping_texts(pic)
                assert not bad, (name, width, title, bad)
                assert not outside, (name, width, title, outside)
    assert seen_note >= 8  # the note was there to collide with (every timeline but one has a wait)
    # the batch's isend and irecv share one bar, and one label naming both
    texts = [t for t, _, _ in collnb.timeline_image(batched).labels]
    assert any(" + " in t and "isend→" in t and "irecv←" in t for t in texts), texts
