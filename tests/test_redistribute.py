"""collnb.redistribute on real gloo ranks: every pair of {S(0), S(1), R, P} on 1-D meshes of 2 and 4
ranks and a set of 2-D pairs, each checked against the hand-sliced reference and against the
collective each step must issue; uneven shards; torch's refusal; the picture, the text, the JSON
and the command line."""
import itertools
import json

import numpy as np
import pytest
import torch.distributed as dist

import collnb
from collnb.cli.main import main
from collnb.torch_versions import applies
from collnb.views import predict_steps, redistribute_image, redistribute_text
from collnb.views.palette import MIN_LABEL_PX

PLACEMENTS = ("S(0)", "S(1)", "R", "P")
AG, AR, RS = "all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor"
FALLBACK = "CPU process group does not support alltoall yet, falling back with allgather + chunk!"
# torch's words for a change into a Partial it refuses, per release (collnb.torch_versions)
REFUSAL = ("only Shard to Partial(sum) redistribution is supported!" if applies("dtensor_shard_to_partial")
           else "redistributing to Partial is for internal use only!")


def expected_1d(src, dst):
    """The collectives a 1-D redistribute issues on gloo, from what each placement means: a shard
    gathered (S -> R) is an all_gather, a partial resolved is an all_reduce (-> R) or a
    reduce_scatter (-> S), R -> S cuts a local chunk, no change issues nothing, and a Partial that
    the source does not hold is refused. S(i) -> S(j) is an all_to_all in principle; torch 2.13 on
    CPU issues an all_gather and keeps a chunk (logged; torch/distributed/tensor/_collective_utils.py).
    From torch 2.14, S -> P(sum) is accepted: a local zero-fill, no communication."""
    if dst == "P" and src != "P":
        # torch 2.14+: Shard -> Partial(sum) is a local zero-fill (collnb.torch_versions)
        return [] if src.startswith("S") and applies("dtensor_shard_to_partial") else "refused"
    if src == dst or src == "R":
        return []
    if src == "P":
        return [AR] if dst == "R" else [RS]
    return [AG]


def _check_common(res, world_size):
    assert res.ok, res.text()
    for s in res.shards:
        assert s.before_ok and s.after_ok
    # torch's own counter of the same call agrees with the recorder (operator names without namespace)
    for r in range(world_size):
        theirs = {k.split(".")[-1]: v for k, v in res.comm_counts[r].items() if v}
        ours = {}
        for rec in res.calls[r]:
            ours[rec.operation] = ours.get(rec.operation, 0) + 1
        assert theirs == ours, (theirs, ours)
        assert all(rec.source == "DTensor" for rec in res.calls[r])
    assert res.unrecorded == 0


def _run_pairs(world_size):
    for src, dst in itertools.product(PLACEMENTS, PLACEMENTS):
        res = collnb.redistribute((4, 6), world_size, src=src, dst=dst, repeats=1)
        want = expected_1d(src, dst)
        _check_common(res, world_size)
        if want == "refused":
            assert res.refused and REFUSAL in res.refused
            assert res.calls == [[]] * world_size and res.times == []
            assert res.verdict == "✓ torch refused, as the reference says it must"
            continue
        assert res.refused is None
        for r in range(world_size):
            assert [c.operation for c in res.calls[r]] == want, (src, dst, r)
            for c in res.calls[r]:
                assert c.group_ranks == tuple(range(world_size))
                if (src, dst) in (("S(0)", "R"), ("P", "R"), ("P", "S(0)")):
                    assert c.nbytes == 4 * 6 * 4  # the whole (4, 6) float32 tensor (nccl-tests' count)
        fallback = src.startswith("S") and dst.startswith("S") and src != dst
        assert (FALLBACK in res.log) == fallback, (src, dst, res.log)
        assert len(res.times) == 1 and res.times[0] > 0


def test_every_pair_on_a_1d_mesh_of_2():
    _run_pairs(2)


@pytest.mark.slow
def test_every_pair_on_a_1d_mesh_of_4():
    _run_pairs(4)


#: 2-D pairs on a 2x2 mesh: (src, dst, [(collective, mesh dim)] in issue order, a torch log line).
#: Mesh dim 0 groups are [0, 2], [1, 3]; mesh dim 1 groups [0, 1], [2, 3]. The kinds follow from the
#: placements; the order of two steps is torch's choice, as measured with torch 2.13.
PAIRS_2D = [
    ("S(0),S(0)", "R,S(0)", [(AG, 1), (AG, 0)], "2 sequential all_gather operations will be performed"),
    ("S(0),S(0)", "S(0),R", [(AG, 1)], None),            # pytorch#157585: one gather, not two
    ("S(0),S(1)", "R,R", [(AG, 1), (AG, 0)], None),
    ("S(0),S(1)", "S(1),S(0)", [(AG, 1), (AG, 0)], FALLBACK),
    ("P,P", "R,R", [(AR, 0), (AR, 1)], "2 sequential all_reduce operations"),
    ("P,S(0)", "R,S(0)", [(AR, 0)], None),
    ("P,P", "P,R", [(AR, 1)], None),
    ("R,P", "S(0),S(1)", [(RS, 1)], None),
    ("R,R", "S(0),S(1)", [], None),
    ("S(0),R", "R,R", [(AG, 0)], None),
    ("P,R", "R,P", "refused", None),
]


@pytest.mark.slow
@pytest.mark.parametrize("src, dst, steps, log", PAIRS_2D, ids=[f"{a}->{b}" for a, b, _, _ in PAIRS_2D])
def test_2d_pairs(src, dst, steps, log):
    res = collnb.redistribute((4, 6), (2, 2), src=src, dst=dst, repeats=1)
    _check_common(res, 4)
    if steps == "refused":
        assert REFUSAL in res.refused
        return
    rows, cols = {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}, {0: (0, 1), 1: (0, 1), 2: (2, 3), 3: (2, 3)}
    for r in range(4):
        got = [(c.operation, 0 if c.group_ranks == rows[r] else 1 if c.group_ranks == cols[r] else None)
               for c in res.calls[r]]
        assert got == steps, (r, got)
    if log:
        assert any(log in line for line in res.log), res.log


def test_a_2d_mesh_in_the_fast_suite():
    test_2d_pairs("S(0),S(0)", "R,S(0)", [(AG, 1), (AG, 0)], "2 sequential all_gather operations")


def test_uneven_shards_have_the_sizes_torch_chunk_gives_and_collectives_move_padded_shards():
    res = collnb.redistribute((5, 6), 4, src="S(0)", dst="R", repeats=1)
    _check_common(res, 4)
    assert [tuple(s.before.shape) for s in res.shards] == [(2, 6), (2, 6), (1, 6), (0, 6)]
    assert all(tuple(s.after.shape) == (5, 6) for s in res.shards)
    # every rank's shard padded to the largest (2 rows) before the all_gather: (2, 6) -> (8, 6)
    assert [c.shapes for c in (recs[0] for recs in res.calls)] == [((2, 6), (8, 6))] * 4
    assert "local shapes 2×6, 2×6, 1×6, 0×6" in redistribute_text(res)
    one_d = collnb.redistribute(6, 4, src="S(0)", dst="R", repeats=1)
    assert [tuple(s.before.shape) for s in one_d.shards] == [(2,), (2,), (2,), (0,)] and one_d.ok


def test_partial_ops_and_dtypes():
    for src, dtype in (("P(max)", "int32"), ("P(min)", "bfloat16"), ("P(avg)", "float16"), ("P(product)", "float64")):
        res = collnb.redistribute((4, 6), 4, src=src, dst="S(0)", dtype=dtype, repeats=1)
        _check_common(res, 4)
        assert [c.operation for c in res.calls[0]] == [RS] and res.shards[0].after.dtype == getattr(__import__("torch"),
                                                                                                   dtype)
        assert res.shards[1].after.double().tolist() == [[10, 11, 12, 13, 14, 15]]


def test_the_text_the_picture_the_prediction_and_the_json():
    res = collnb.redistribute((4, 6), (2, 2), src="S(0),R", dst="R,R", repeats=2)
    text = redistribute_text(res)
    assert "step 1: all_gather_into_tensor over mesh dim 0; groups [0, 2] [1, 3]" in text
    assert "rank 3 (1, 1): before (2, 6) [2:4, 0:6] → after (4, 6) [0:4, 0:6] ✓" in text
    assert "α-β prediction" in text and text.endswith("✓ every local shard equals the hand-sliced reference")
    pred = predict_steps(res)
    # the step is an all_gather of a 96 B output over 2 ranks, priced as a ring all_gather
    assert [(p["primitive"], p["algorithm"], p["group_size"], p["nbytes"]) for p in pred] == \
        [("all_gather", "ring", 2, 96)]
    assert pred[0]["seconds"] == pytest.approx(collnb.predict("all_gather", "ring", 2, 96).seconds)
    assert len(res.times) == 2 and res.seconds_measured > 0
    img = redistribute_image(res)
    assert img.pixels.shape[1] <= 1000 and not [t for t, s, _ in img.labels if s < MIN_LABEL_PX]
    texts = [t for t, _, _ in img.labels]
    assert "✓ every local shard equals the hand-sliced reference" in texts and "[0,2] dim 0" in texts
    # rank 0's local tensor after: rows 0-1 came from rank 0 itself (its colour), rows 2-3 from rank 2
    x0, y0, x1, y1 = img.boxes[("after", 0)]
    c = img.cell
    from collnb.views.palette import rank_color
    want = [tuple(int(v * 255 + 0.5) for v in rank_color(r)) for r in (0, 2)]
    assert tuple(img.pixels[y0 + 3, x0 + 3]) == want[0]          # a cell's corner: no text there
    assert tuple(img.pixels[y0 + 2 * c + 3, x0 + 3]) == want[1]
    assert res._repr_png_()[:4] == b"\x89PNG"
    data = json.loads(json.dumps(res.to_dict()))
    assert data["ok"] and data["src"] == ["S(0)", "R"] and data["ranks"][2]["after"] == \
        np.arange(4)[:, None].repeat(6, 1).__mul__(10).__add__(np.arange(6)).tolist()
    assert data["calls"][0][0]["name"] == AG and data["calls"][0][0]["group_ranks"] == [0, 2]


def test_a_wrong_shard_is_caught(monkeypatch):
    from collnb.placements import run as run_mod
    real = run_mod.expected_local
    monkeypatch.setattr(run_mod, "expected_local", lambda v, m, s, d, c: real(v, m, s, d, c) + (d != s))
    res = collnb.redistribute((4, 6), 2, src="S(0)", dst="R", repeats=1)
    assert not res.ok and all(not s.after_ok for s in res.shards) and all(s.before_ok for s in res.shards)
    assert "✗" in redistribute_text(res) and res.verdict == "✗ a local shard differs from the hand-sliced reference"
    img = redistribute_image(res)
    assert "red: differs from the reference" in [t for t, _, _ in img.labels]


def test_command_line_exits_1_when_a_shard_differs(monkeypatch, capsys):
    from collnb.placements import run as run_mod
    real = run_mod.expected_local
    monkeypatch.setattr(run_mod, "expected_local", lambda v, m, s, d, c: real(v, m, s, d, c) + (d != s))
    assert main(["redistribute", "--mesh", "2", "--src", "S(0)", "--dst", "R", "--repeats", "0"]) == 1
    assert "✗ a local shard differs from the hand-sliced reference" in capsys.readouterr().out


def test_command_line(tmp_path, capsys):
    png, js = tmp_path / "r.png", tmp_path / "r.json"
    assert main(["redistribute", "--mesh", "2x2", "--src", "S(0),R", "--dst", "R,R", "--png", str(png),
                 "--json", str(js), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "step 1: all_gather_into_tensor over mesh dim 0" in out and "✓ every local shard" in out
    assert png.read_bytes()[:4] == b"\x89PNG" and json.loads(js.read_text())["ok"] is True
    assert main(["redistribute", "--mesh", "2", "--src", "R", "--dst", "P", "--repeats", "1"]) == 0  # refusal shown
    assert "torch refused: RuntimeError: Can not redistribute from R to P(sum)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--mesh", "4x8", "--src", "S(0),R", "--dst", "R,R"], "needs 32 ranks"),
    (["--mesh", "2", "--src", "X", "--dst", "R"], "unknown placement 'X'"),
    (["--mesh", "2", "--src", "S(2)", "--dst", "R"], "Shard(2) shards tensor dim 2"),
    (["--mesh", "2", "--src", "P(avg)", "--dst", "R", "--dtype", "int64"], "AVG divides"),
    (["--mesh", "2", "--src", "S(0)", "--dst", "R", "--png", "/no/such/dir/x.png"], "does not exist"),
])
def test_command_line_bad_input_exits_2(argv, words, capsys, monkeypatch):
    import collnb.ranks

    def started(*a, **k):
        raise AssertionError("started")
    monkeypatch.setattr(collnb.ranks, "launch", started)
    monkeypatch.setattr(collnb.ranks, "launch_planned", started)  # a launch planned where it entered
    assert main(["redistribute", *argv]) == 2
    assert words in capsys.readouterr().err


def _group_names(rank, world_size):
    return sorted(dist.distributed_c10d._world.pg_names.values())


def _keep_my_group(rank, world_size):
    import collnb.ranks
    g = dist.new_group(list(range(world_size)))
    collnb.ranks.keep_groups([g])
    return dist.distributed_c10d._world.pg_names[g]


def test_a_mesh_is_made_once_on_warm_ranks_and_a_learners_groups_still_end(fresh_pool):
    """collnb.redistribute keeps its DeviceMesh's groups for its next call of the same mesh shape
    (collnb.ranks.keep_groups); a learner's function cannot keep its own."""
    first = collnb.redistribute((4, 4), (2, 2), src="S(0),S(1)", dst="R,R", repeats=0)
    names = collnb.launch(_group_names, 4)[0]
    second = collnb.redistribute((4, 4), (2, 2), src="S(1),R", dst="R,S(0)", repeats=0)
    assert first.ok and second.ok
    assert collnb.launch(_group_names, 4)[0] == names   # no group made by the second call
    assert len(names) == 3                               # the default group and the mesh's two
    made = collnb.launch(_keep_my_group, 4)[0]
    assert made not in collnb.launch(_group_names, 4)[0]  # ended with the learner's call
    collnb.shutdown()
    assert collnb.redistribute((4, 4), (2, 2), src="S(0),R", dst="R,R", repeats=0).ok


def test_shard_to_partial_sum_is_the_installed_torch_s_rule():
    """torch 2.14+ accepts S(0) -> P(sum) (a zero-fill, no communication; every local checked) and,
    after data moved on another mesh dimension, a layout of its own plan (the sums checked); before
    2.14 both are refused with 2.13's words."""
    one = collnb.redistribute((4, 6), 2, src="S(0)", dst="P", repeats=0)
    two = collnb.redistribute((4, 6), (2, 2), src="S(0),S(0)", dst="P,S(0)", repeats=0)
    assert one.ok and two.ok, (one.text(), two.text())
    if not applies("dtensor_shard_to_partial"):
        assert REFUSAL in one.refused and REFUSAL in two.refused
        return
    assert one.refused is None and one.calls == [[], []] and one.summed_over == ()
    assert one.shards[1].after.tolist()[:2] == [[0.0] * 6] * 2
    assert two.refused is None and two.summed_over == (0,)
    assert two.verdict.startswith("✓ every local shard's sum over mesh dim 0 equals the hand-sliced reference")
    assert all(s.expected_after is None and s.group_sum is not None for s in two.shards)
