"""Pipeline parallelism (collnb.labs.parallel.pipeline, notebook 16): the GPipe and 1F1B orders,
the gradients of the by-hand pipeline on real gloo ranks equal to one process's, the activations
each stage holds counted on the ranks (GPipe m, 1F1B p - stage), torch.distributed.pipelining's
step equal to the same, the same data messages, the measured bubble near (p-1)/(m+p-1), and the
exercise check refusing answers that skip the asked send/recv."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.distributed as dist

import collnb
from collnb import exercises
from collnb.labs import parallel
from collnb.labs.exercises import CheckFailed

W, B, SEED = 8, 2, 3


# --- orders and formulas (no ranks) -------------------------------------------------------------

def test_gpipe_order_is_all_forwards_then_all_backwards():
    assert parallel.schedule_order("gpipe", 1, 3, 3) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]


def test_1f1b_order_warms_up_then_alternates_then_drains():
    # stage 0 of 4, m = 6: 3 warm-up forwards (p - s - 1), then F/B pairs, then 3 backwards
    assert parallel.schedule_order("1f1b", 0, 4, 6) == [
        ("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4), ("B", 1), ("F", 5), ("B", 2),
        ("B", 3), ("B", 4), ("B", 5)]
    # the last stage alternates from the start
    assert parallel.schedule_order("1f1b", 3, 4, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    # fewer microbatches than stages: 1F1B is GPipe
    assert parallel.schedule_order("1f1b", 0, 4, 2) == parallel.schedule_order("gpipe", 0, 4, 2)


@pytest.mark.parametrize("p, m", [(2, 1), (3, 5), (4, 8), (4, 2)])
def test_every_order_runs_each_microbatch_forward_before_backward_once(p, m):
    for schedule in parallel.SCHEDULES:
        for s in range(p):
            order = parallel.schedule_order(schedule, s, p, m)
            assert sorted(order) == sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
            assert all(order.index(("F", j)) < order.index(("B", j)) for j in range(m))


def test_peak_activations_and_bubble_formula():
    assert [parallel.peak_formula("gpipe", s, 4, 8) for s in range(4)] == [8, 8, 8, 8]
    assert [parallel.peak_formula("1f1b", s, 4, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [parallel.peak_formula("1f1b", s, 4, 2) for s in range(4)] == [2, 2, 2, 1]
    assert parallel.bubble_formula(4, 8) == pytest.approx(3 / 11)
    assert parallel.bubble_formula(1, 5) == 0.0


def test_bad_schedule_arguments_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="gpipe, 1f1b"):
        parallel.schedule_order("interleaved", 0, 2, 2)
    with pytest.raises(ValueError, match="stage must be"):
        parallel.schedule_order("gpipe", 2, 2, 2)
    with pytest.raises(ValueError, match="microbatches m"):
        parallel.schedule_order("1f1b", 0, 2, 0)


def test_schedule_text_names_the_held_activations():
    text = parallel.schedule_text("1f1b", 2, 3)
    assert "stage 0: F0 F1 B0 F2 B1 B2   (holds at most 2)" in text
    assert "stage 1: F0 B0 F1 B1 F2 B2   (holds at most 1)" in text


def test_schedule_text_and_its_errors_speak_chinese_when_chinese_is_spoken():
    collnb.set_language("zh")
    try:
        text = parallel.schedule_text("1f1b", 2, 3)
        assert "阶段 0：F0 F1 B0 F2 B1 B2   （最多保留 2 份激活）" in text
        with pytest.raises(ValueError, match="^未知的调度 'zb'；请从以下选择：gpipe, 1f1b$"):
            parallel.schedule_order("zb", 0, 2, 2)
    finally:
        collnb.set_language("en")
    assert "stage 1: F0 B0 F1 B1 F2 B2   (holds at most 1)" in parallel.schedule_text("1f1b", 2, 3)


# --- real ranks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("p, m", [(2, 3), (4, 5)])
def test_by_hand_pipeline_equals_one_process_and_holds_the_expected_activations(p, m):
    x, y = parallel.microbatch_data(m, B, W, SEED)
    want = parallel.reference_grads(x, y, m, p, W, SEED)
    for schedule in parallel.SCHEDULES:
        out = collnb.launch(parallel.pipeline_step, p, (schedule, x, y, m), dict(width=W, seed=SEED),
                            record_calls=True, debug=False)
        assert parallel.max_grad_difference([o["grads"] for o in out], want) <= 1e-12
        assert [o["peak"] for o in out] == ([m] * p if schedule == "gpipe" else [min(p - s, m) for s in range(p)])
        one = B * W * 8
        for r in range(p):
            got = Counter(parallel.messages(out.calls[r]))
            expected = Counter()
            if r > 0:
                expected += Counter({("recv", r - 1, one): m, ("send", r - 1, one): m})
            if r < p - 1:
                expected += Counter({("send", r + 1, one): m, ("recv", r + 1, one): m})
            assert got == expected, (schedule, r, got)
        # the loss the last stage saw is the one process's
        model = parallel.pipeline_model(p, W, SEED)
        with torch.no_grad():
            assert out[p - 1]["loss"] == pytest.approx(float(((model(x) - y) ** 2).sum() / x.shape[0]), rel=1e-12)


@pytest.mark.slow  # each fresh rank imports torch.distributed.pipelining (~15 s on 2 cores)
def test_torch_pipelining_equals_one_process_with_the_same_data_messages():
    pytest.importorskip("torch.distributed.pipelining")
    p, m = 3, 4
    x, y = parallel.microbatch_data(m, B, W, SEED)
    want = parallel.reference_grads(x, y, m, p, W, SEED)
    for schedule in parallel.SCHEDULES:
        theirs = collnb.launch(parallel.torch_pipeline_step, p, (schedule, x, y, m), dict(width=W, seed=SEED),
                               record_calls=True, debug=False, collective_timeout=60)
        ours = collnb.launch(parallel.pipeline_step, p, (schedule, x, y, m), dict(width=W, seed=SEED),
                             record_calls=True, debug=False)
        assert parallel.max_grad_difference([o["grads"] for o in theirs], want) <= 1e-12
        for r in range(p):
            one = B * W * 8
            assert parallel.messages(theirs.calls[r], one) == parallel.messages(ours.calls[r], one)


def test_bubble_is_measured_from_the_regions():
    class Region:
        def __init__(self, name, start, end):
            self.name, self.start, self.end, self.duration = name, start, end, end - start

    class FakeTimeline:
        world_size = 2

        def regions(self, r):
            # rank 0 busy 0-10 and 20-30 of a 0-40 step; rank 1 busy 10-40
            return ([Region("step", 0, 40), Region("F0", 0, 10), Region("B0", 20, 30)] if r == 0 else
                    [Region("step", 0, 40), Region("F0", 10, 20), Region("B0", 20, 40)])

    got = parallel.bubble_measured(FakeTimeline())
    assert got["idle_fraction"] == [0.5, 0.25] and got["bubble"] == 0.375 and got["makespan_ms"] == 40 / 1e6


@pytest.mark.slow
def test_measured_bubble_follows_the_formula():
    """With 10/20 ms per forward/backward the idle fraction is near (p-1)/(m+p-1) for both schedules
    (gloo's latency and a loaded machine only add idle time: the ratio margin is wide on purpose)."""
    p = 4
    collnb.launch(parallel.pipeline_step, p, ("gpipe", *parallel.microbatch_data(1, B, W, SEED), 1),
                  dict(width=W, seed=SEED), timeline=True, debug=False)    # the first timed step warms the ranks
    for m in (1, 6):
        x, y = parallel.microbatch_data(m, B, W, SEED)
        for schedule in parallel.SCHEDULES:
            out = collnb.launch(parallel.pipeline_step, p, (schedule, x, y, m),
                                dict(width=W, seed=SEED, forward_ms=10, backward_ms=20), timeline=True, debug=False)
            measured = parallel.bubble_measured(out.timeline)["bubble"]
            assert 0.8 <= measured / parallel.bubble_formula(p, m) <= 2.5, (schedule, m, measured)


def test_schedule_explorer_runs_real_ranks_and_follows_the_slider():
    import ipywidgets

    w = parallel.explore_schedules(2, m=2, schedule="gpipe", forward_ms=1, backward_ms=2)
    try:
        assert isinstance(w.controls["m"], ipywidgets.SelectionSlider)
        assert w.caption.value.startswith("GPipe, m=2:") and "per stage: [2, 2]" in w.caption.value
        assert w.last_png[:4] == b"\x89PNG" and w.last_result.timeline.world_size == 2
        w.set(m=3, schedule="1f1b")
        w.wait()
        assert w.caption.value.startswith("1F1B, m=3:") and "per stage: [2, 1]" in w.caption.value
    finally:
        w.close()
    with pytest.raises(ValueError, match="1..12"):
        parallel.explore_schedules(2, m=13)


# --- the exercise ---------------------------------------------------------------------------------

def _solution(rank, world_size, layer, inputs):
    outputs = []
    for x in inputs:
        if rank > 0:
            dist.recv(x, src=rank - 1)
        out = layer(x)
        if rank < world_size - 1:
            dist.send(out.contiguous(), dst=rank + 1)
        outputs.append(out)
    return torch.stack(outputs) if rank == world_size - 1 else None


def _fails(capsys, answer, what: str) -> str:
    with pytest.raises(CheckFailed) as info:
        exercises.check_pipeline_forward(answer)
    out = capsys.readouterr().out
    assert "✓" not in out, out
    msg = str(info.value)
    assert msg.startswith("✗ ") and "\nHint: " in msg and what in msg, msg
    return msg


def test_pipeline_forward_solution_passes_and_a_stub_is_not_answered(capsys):
    exercises.check_pipeline_forward(_solution)
    assert "✓ each stage passed its activations" in capsys.readouterr().out

    def stage_forward(rank, world_size, layer, inputs):
        ...

    exercises.check_pipeline_forward(stage_forward)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "✓" not in out


def test_pipeline_forward_computed_locally_fails(capsys):
    def local(rank, world_size, layer, inputs):   # the last rank applies its own stage to its zeros
        return torch.stack([layer(x) for x in inputs]) if rank == world_size - 1 else None

    _fails(capsys, local, "one microbatch after the other")


def test_pipeline_forward_in_one_message_or_without_pipelining_fails(capsys):
    def bulk(rank, world_size, layer, inputs):     # the whole batch in one message
        x = torch.stack(inputs)
        if rank > 0:
            dist.recv(x, src=rank - 1)
        out = layer(x)
        if rank < world_size - 1:
            dist.send(out.contiguous(), dst=rank + 1)
        return out if rank == world_size - 1 else None

    _fails(capsys, bulk, "should be")

    def serial(rank, world_size, layer, inputs):   # receive everything, then send everything: no pipeline
        if rank > 0:
            for x in inputs:
                dist.recv(x, src=rank - 1)
        outs = [layer(x) for x in inputs]
        if rank < world_size - 1:
            for out in outs:
                dist.send(out.contiguous(), dst=rank + 1)
        return torch.stack(outs) if rank == world_size - 1 else None

    _fails(capsys, serial, "one microbatch after the other")


def test_pipeline_forward_through_a_collective_fails(capsys):
    def broadcast(rank, world_size, layer, inputs):
        outs = []
        for x in inputs:
            for src in range(world_size):
                dist.broadcast(x, src=src)
                if src == rank:
                    x = layer(x)
            outs.append(x)
        return torch.stack(outs) if rank == world_size - 1 else None

    _fails(capsys, broadcast, "does not allow")
