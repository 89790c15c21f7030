"""collnb's own primitive runs skip TORCH_DISTRIBUTED_DEBUG=DETAIL's per-collective check on a warm
pool (collnb.ranks.same_on_every_rank), while a learner's function on the same ranks keeps it.

The check is torch's ProcessGroupWrapper: with DETAIL every group is made wrapped, and each
collective first compares its fingerprint with every peer's (a 16-float gloo all_reduce at world
size 8 on 2 cores: ~24 ms bare, ~55 ms wrapped; benchmarks/slider_ab.py prints the explorer's move).
"""
import pytest
import torch
import torch.distributed as dist

import collnb
from collnb.collectives import rank_calls
from collnb.ranks import same_on_every_rank


def _backend_of_default_group(rank, world_size, *rest):
    """The class of the default group's CPU backend, and the world size it reports."""
    return type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__, dist.get_world_size()


def _debug_level(rank, world_size):
    return dist.get_debug_level().name


@same_on_every_rank
def _a_learners_marked_function(rank, world_size):
    return _backend_of_default_group(rank, world_size)


@pytest.fixture
def probe_in_rank_calls(monkeypatch, fresh_pool):
    """rank_cases (collnb's own rank entry of collnb.run) with one more "primitive" that reports the
    default group's backend: the ranks are forked after it is added (a fresh pool), so they have it too."""
    monkeypatch.setitem(rank_calls.RANK_CALLS, "backend_of_default_group", _backend_of_default_group)
    return [{"primitive": "backend_of_default_group"}]


@pytest.mark.parametrize("world_sizes", [(3, 8, 5)])
def test_collnbs_own_runs_use_the_same_ranks_without_the_detail_wrapper(probe_in_rank_calls, world_sizes):
    cases = probe_in_rank_calls
    for ws in world_sizes:  # 3: the pool's first group (4 ranks), 8: the pool grows, 5: a cached subgroup
        own = collnb.launch(rank_calls.rank_cases, ws, args=(cases, "gloo"))
        assert own == [[("ProcessGroupGloo", ws)]] * ws
        # a learner's function on the very same warm ranks is checked, as debug=True promises
        assert collnb.launch(_backend_of_default_group, ws) == [("_ProcessGroupWrapper", ws)] * ws
        assert collnb.launch(_debug_level, ws) == ["DETAIL"] * ws
    pool = collnb.ranks.warm_pool()
    assert pool is not None and pool.setup.debug and len(pool.ranks) == 8  # one pool served every call
    # made when first needed; growing to 8 ranks made the default group again, and dropped 3's
    assert pool.unwrapped == {8, 5} and pool.groups == {8, 5}


def test_a_pool_that_runs_learners_functions_only_makes_no_unwrapped_group(probe_in_rank_calls):
    for ws in (2, 3):
        assert collnb.launch(_backend_of_default_group, ws) == [("_ProcessGroupWrapper", ws)] * ws
    pool = collnb.ranks.warm_pool()
    assert pool.unwrapped == set() and pool.groups == {4, 2, 3}


def test_a_learners_function_is_checked_whatever_it_is_marked(probe_in_rank_calls):
    assert collnb.launch(_a_learners_marked_function, 4) == [("_ProcessGroupWrapper", 4)] * 4
    # and a learner's function handed to collnb's own rank entry makes the call the learner's
    assert collnb.launch(rank_calls.rank_cases, 4, args=([{**probe_in_rank_calls[0], "learners": _debug_level}],
                                                                    "gloo")) \
        == [[("_ProcessGroupWrapper", 4)]] * 4


def test_with_debug_off_the_one_group_serves_both(probe_in_rank_calls):
    assert collnb.launch(rank_calls.rank_cases, 4, args=(probe_in_rank_calls, "gloo"), debug=False) \
        == [[("ProcessGroupGloo", 4)]] * 4
    assert collnb.launch(_backend_of_default_group, 4, debug=False) == [("ProcessGroupGloo", 4)] * 4


def test_a_mismatch_after_a_run_is_still_caught_on_the_same_ranks():
    assert collnb.run("all_reduce", 4).ok

    def fn(rank, world_size):
        t = torch.ones(3, dtype=torch.float32 if rank == 0 else torch.int64)
        dist.broadcast(t, 0)

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 4)
    assert "Detected mismatch between collectives" in str(info.value)
    assert collnb.run("all_reduce", 4).ok  # fresh ranks after the failure, and still right
