"""collnb.placements without ranks: placements parsed as torch writes them, meshes, the teaching
values, the hand-sliced shards (torch.chunk's split), Partial contributions that reduce to the
teaching value exactly, torch's refusal rule, and every bad input refused before any rank starts."""
import math

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Partial, Replicate, Shard

import collnb
from collnb import placements as P
from collnb.placements import Placement


@pytest.mark.parametrize("text, want", [
    ("S(0)", Placement("shard", 0)), ("Shard(1)", Placement("shard", 1)), ("Shard(dim=0)", Placement("shard", 0)),
    ("s(1)", Placement("shard", 1)), ("R", Placement("replicate")), ("Replicate()", Placement("replicate")),
    ("P", Placement("partial", op="sum")), ("Partial()", Placement("partial", op="sum")),
    ("P(max)", Placement("partial", op="max")), ("Partial('avg')", Placement("partial", op="avg")),
    ('Partial(reduce_op="min")', Placement("partial", op="min")), ("Partial(sum)", Placement("partial", op="sum")),
    (Shard(1), Placement("shard", 1)), (Replicate(), Placement("replicate")),
    (Partial("max"), Placement("partial", op="max"))])
def test_every_form_of_a_placement(text, want):
    assert P.parse_placement(text, 2) == want


def test_short_and_torch_forms_and_the_torch_object_round_trip():
    for p in (Placement("shard", 1), Placement("replicate"), Placement("partial", op="sum"),
              Placement("partial", op="max")):
        assert P.parse_placement(p.short) == p and P.parse_placement(p.torch_repr) == p
        assert P.parse_placement(p.to_torch()) == p
    assert Placement("partial", op="sum").short == "P" and Placement("partial", op="max").torch_repr == "Partial('max')"
    assert P.parse_placement("S(-1)", 2) == Placement("shard", 1)  # torch normalises negative dims


def test_a_placement_made_without_its_dim_or_op_says_so():
    assert Placement("shard", 1).shard_dim == 1 and Placement("partial", op="max").partial_op == "max"
    with pytest.raises(ValueError, match=r"^Placement\(kind='shard', dim=None, op=None\) is not a Shard of a tensor dim$"):
        Placement("shard").to_torch()
    with pytest.raises(ValueError, match="is not a Shard of a tensor dim"):
        Placement("replicate").shard_dim  # noqa: B018 - the property raises
    with pytest.raises(ValueError, match="is not a Partial with a reduce op"):
        Placement("partial").to_torch()
    with pytest.raises(ValueError, match="is not a Shard of a tensor dim"):
        P.parse_placement(Placement("shard"), 2)


def test_placements_per_mesh_dimension_as_a_list_or_one_string():
    want = (Placement("shard", 0), Placement("replicate"))
    for value in ("S(0),R", "S(0), R", "(Shard(0), Replicate())", "[S(0), R]", ["S(0)", "R"], (Shard(0), Replicate())):
        assert P.parse_placements(value, 2, 2) == want, value
    assert P.parse_placements("Partial('max'), S(1)", 2, 2) == (Placement("partial", op="max"), Placement("shard", 1))
    assert P.parse_placements("S(0)", 1, 1) == (Placement("shard", 0),)
    assert P.placements_text(want) == "(S(0), R)" and P.placements_text(want[:1]) == "S(0)"


@pytest.mark.parametrize("value, mesh_ndim, ndim, words", [
    ("Q", 1, 2, "unknown placement 'Q'; write one of: Shard(0) / S(0)"),
    ("P(mean)", 1, 2, "unknown reduce op of a Partial placement 'mean'; choose one of: sum, avg, min, max, product"),
    ("S(2)", 1, 2, "Shard(2) shards tensor dim 2, but the tensor has 2 dim(s)"),
    ("S(1)", 1, 1, "Shard(1) shards tensor dim 1, but the tensor has 1 dim(s)"),
    ("S(0)", 2, 2, "needs one placement per mesh dimension (2); got 1"),
    ("P, P(max)", 2, 2, "mixes Partial reduce ops (max, sum)"),
])
def test_a_wrong_placement_says_what_is_wrong(value, mesh_ndim, ndim, words):
    with pytest.raises(ValueError) as err:
        P.parse_placements(value, mesh_ndim, ndim, name="src")
    assert words in str(err.value)


def test_meshes():
    assert P.parse_mesh("2x2") == (2, 2) and P.parse_mesh(4) == (4,) and P.parse_mesh("2×4") == (2, 4)
    assert P.parse_mesh((2, 2, 2)) == (2, 2, 2) and P.mesh_text((2, 4)) == "2×4"
    with pytest.raises(ValueError, match="needs 32 ranks; collnb starts at most 16"):
        P.parse_mesh("4x8")
    with pytest.raises(ValueError, match="each mesh size must be an int from 2 to 16"):
        P.parse_mesh("1x4")
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        P.parse_mesh("2x2x2x2")
    with pytest.raises(TypeError):
        P.parse_mesh(2.5)


def test_teaching_values_name_their_global_index_and_must_be_exact_in_the_dtype():
    v = P.teaching_values((4, 6))
    assert v[2, 5] == 25 and v[3, 0] == 30 and P.teaching_values((3, 12))[2, 11] == 211
    assert P.teaching_values(5).tolist() == [0, 1, 2, 3, 4]
    assert P.check_shape("4x6", torch.float16) == ((4, 6), "float16")
    with pytest.raises(ValueError, match=r"go up to 1616, which bfloat16 cannot hold exactly \(its largest exact "
                                         r"integer is 256\)"):
        P.check_shape((17, 17), "bfloat16")
    with pytest.raises(ValueError, match="1 or 2 sizes"):
        P.check_shape((2, 2, 2))
    with pytest.raises(ValueError, match="unknown dtype of the teaching tensor 'bool'"):
        P.check_shape((4,), "bool")


def test_shards_split_as_torch_chunk_does():
    mesh, s0 = (4,), (Placement("shard", 0),)
    # 6 over 4 ranks: chunks of ceil(6 / 4) = 2, so 2, 2, 2, 0 (torch.chunk), not 2, 2, 1, 1
    assert [P.local_bounds((6,), mesh, s0, (r,)) for r in range(4)] == [((0, 2),), ((2, 4),), ((4, 6),), ((6, 6),)]
    assert [P.local_bounds((5, 3), mesh, s0, (r,))[0] for r in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    # two mesh dims sharding one tensor dim: mesh dim 0 first, then dim 1 splits what is left
    ss = (Placement("shard", 0), Placement("shard", 0))
    assert [P.local_bounds((8, 2), (2, 2), ss, P.coordinates(r, (2, 2)))[0] for r in range(4)] == \
        [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert P.coordinates(5, (2, 4)) == (1, 1)
    # the same as torch's own arithmetic for the uneven case
    for length in range(1, 12):
        for k in (2, 3, 4):
            ours = [P.local_bounds((length,), (k,), s0, (c,))[0] for c in range(k)]
            theirs = [Shard.local_shard_size_and_offset(length, k, c) for c in range(k)]
            assert [hi - lo for lo, hi in ours] == [int(size) for size, _ in theirs], (length, k)


@pytest.mark.parametrize("op", P.PARTIAL_OPS)
@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_partial_contributions_reduce_to_the_teaching_value_exactly(op, k):
    v = P.teaching_values((5, 7))
    c = P.contributions(v, k, op)
    assert c.shape == (k, 5, 7)
    reduced = {"sum": c.sum(0), "avg": c.mean(0), "max": c.max(0), "min": c.min(0), "product": c.prod(0)}[op]
    assert np.array_equal(reduced, v)
    assert np.array_equal(c, np.round(c))  # integers: exact in every dtype that holds the values
    if op in ("sum", "max", "product"):
        assert (c <= np.maximum(v, 1)).all()


def test_expected_local_reduces_the_partial_dims_dst_drops_and_slices_the_rest():
    v = P.teaching_values((4, 6))
    pp = (Placement("partial", op="sum"), Placement("partial", op="sum"))
    keep1 = (Placement("replicate"), Placement("partial", op="sum"))
    c = P.contributions(v, 4, "sum").reshape(2, 2, 4, 6)
    # (P, P) -> (R, P): mesh dim 0 reduced, rank (i, j) keeps the contribution of column j
    for r in range(4):
        i, j = P.coordinates(r, (2, 2))
        assert np.array_equal(P.expected_local(v, (2, 2), pp, keep1, (i, j)), c[:, j].sum(0))
        assert np.array_equal(P.expected_local(v, (2, 2), pp, pp, (i, j)), c[i, j])
    rs = (Placement("replicate"), Placement("shard", 1))
    assert P.expected_local(v, (2, 2), pp, rs, (1, 1)).tolist() == v[:, 3:].tolist()


def test_torch_refuses_a_partial_that_the_source_does_not_hold_on_that_mesh_dim():
    R, S0, Ps, Pm = Placement("replicate"), Placement("shard", 0), Placement("partial", op="sum"), \
        Placement("partial", op="max")
    # torch 2.13's rule (and every release before 2.14): no change into a Partial
    assert "redistributing to Partial is for internal use only!" in P.refusal((R,), (Ps,), "2.13.0")
    assert P.refusal((S0,), (Ps,), "2.13.0").startswith("mesh dim 0: Shard(0) -> Partial()")
    assert P.refusal((Ps, R), (R, Ps), "2.12.1").startswith("mesh dim 1")
    # torch 2.14's and later: Shard -> Partial(sum) is a local zero-fill; every other change into a
    # Partial is refused with torch's new words (DTensor.redistribute in 2.15's _api.py)
    assert P.refusal((S0,), (Ps,), "2.14.1") is None and P.refusal((S0, S0), (Ps, Ps), "2.15.0") is None
    assert P.refusal((R,), (Ps,), "2.15.0") == (
        "mesh dim 0: Can not redistribute from R to P(sum), only Shard to Partial(sum) redistribution is supported!")
    assert P.refusal((S0,), (Pm,), "2.15.0").startswith("mesh dim 0: Can not redistribute from S(0) to P(max)")
    assert P.refusal((Ps, R), (R, Ps), "2.15.0").startswith("mesh dim 1: Can not redistribute from R to P(sum)")
    for v in ("2.13.0", "2.15.0"):
        assert P.refusal((Ps,), (Ps,), v) is None and P.refusal((Ps, Ps), (R, Ps), v) is None
        assert P.refusal((Pm,), (Ps,), v) is not None


def test_shard_to_partial_sum_zero_fills_around_each_rank_s_shard():
    """torch 2.14+'s Shard -> Partial("sum") (Shard._to_partial_tensor): each rank keeps its shard's
    values and holds 0 elsewhere in a tensor of the logical shape; the sum over the ranks is the
    tensor. Where data moves on another mesh dimension first, the layout is torch's plan's, and only
    the sums are the reference's (zero_fill_is_exact)."""
    S0, S1, R, Ps = Placement("shard", 0), Placement("shard", 1), Placement("replicate"), Placement("partial", op="sum")
    v = P.teaching_values((4, 6))
    got = [P.expected_local(v, (2,), (S0,), (Ps,), (r,)) for r in range(2)]
    assert got[0].tolist() == [v[0].tolist(), v[1].tolist(), [0.0] * 6, [0.0] * 6]
    assert got[1].tolist() == [[0.0] * 6, [0.0] * 6, v[2].tolist(), v[3].tolist()]
    assert np.array_equal(got[0] + got[1], v)
    # 2-D: (S(0), R) -> (P, S(1)): rank (i, j) holds columns 3j..3j+3 of rows 2i..2i+2, zeros in the other rows
    loc = P.expected_local(v, (2, 2), (S0, R), (Ps, S1), (1, 0))
    assert loc.tolist() == [[0.0] * 3, [0.0] * 3, v[2, :3].tolist(), v[3, :3].tolist()]
    assert P.zero_fill_is_exact((4, 6), (2,), (S0,), (Ps,))
    assert P.zero_fill_is_exact((4, 6), (2, 2), (S0, R), (Ps, S1))
    assert P.zero_fill_is_exact((4, 6), (2, 2), (S0, S1), (Ps, S1))
    assert not P.zero_fill_is_exact((4, 6), (2, 2), (S0, S0), (Ps, S0))   # data moves on mesh dim 1 first
    assert not P.zero_fill_is_exact((4, 6), (2, 2), (S0, S1), (R, Ps))
    locs = [P.expected_local(v, (2, 2), (S0, R), (Ps, S1), P.coordinates(r, (2, 2))) for r in range(4)]
    assert np.array_equal(P.partial_sums(locs, (2, 2), (0,), (0, 1)), v[:, 3:])


def test_owners_of_every_element():
    own = P.owners((4, 6), (2, 2), (Placement("shard", 0), Placement("replicate")))
    assert own.shape == (4, 4, 6)
    assert own[:, 0, 0].tolist() == [True, True, False, False]  # rows 0-1 on mesh row 0, replicated
    assert own[:, 3, 5].tolist() == [False, False, True, True]


@pytest.fixture
def no_ranks(monkeypatch):
    """Fail the test if anything starts ranks."""
    import collnb.ranks

    def refuse(*a, **k):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(collnb.ranks, "launch", refuse)
    monkeypatch.setattr(collnb.ranks, "launch_planned", refuse)  # a launch planned where it entered


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(src="Q,R", dst="R,R"), ValueError, "src, mesh dim 0: unknown placement 'Q'"),
    (dict(src="S(2),R", dst="R,R"), ValueError, "Shard(2) shards tensor dim 2, but the tensor has 2 dim(s)"),
    (dict(src="S(0),R", dst="R,R", mesh="4x8"), ValueError, "needs 32 ranks"),
    (dict(src="P(avg)", dst="R", mesh=4, dtype="int32"), ValueError, "AVG divides by the world size"),
    (dict(src="P", dst="R", mesh=8, shape=(16, 16), dtype="bfloat16"), ValueError, "cannot hold exactly"),
    (dict(src="S(0),R", dst="R,R", repeats=0.5), TypeError, "repeats must be an int"),
    (dict(src="S(0),R", dst="R,R", backend="nccl"), RuntimeError, "backend 'nccl' cannot run here"),
    (dict(src="S(0)", dst="R"), ValueError, "src needs one placement per mesh dimension (2)"),
])
def test_bad_input_is_refused_before_any_rank_starts(no_ranks, kwargs, exc, words):
    kwargs = {"shape": (4, 6), "mesh": (2, 2), **kwargs}
    if kwargs.get("backend") == "nccl" and torch.cuda.is_available():
        pytest.skip("NCCL can run here")
    with pytest.raises(exc) as err:
        collnb.redistribute(**kwargs)
    assert words in str(err.value)


def test_check_request_says_when_torch_must_refuse():
    from collnb.torch_versions import applies
    req = P.check_request((4, 6), (2, 2), "P,R", "R,P")
    words = ("mesh dim 1: Can not redistribute from R to P(sum)" if applies("dtensor_shard_to_partial")
             else "mesh dim 1: Replicate() -> Partial()")
    assert req["refusal"].startswith(words) and math.prod(req["mesh"]) == 4
    assert P.check_request(8, 4, "S(0)", "R")["refusal"] is None
