"""Rank-side interception of torch.distributed: call records, layouts gloo misreads, group timeouts."""
import dataclasses
import pickle
import warnings

import pytest
import torch
import torch.distributed as dist

import collnb
from collnb import CallRecord, LaunchResults

warnings.filterwarnings("ignore", category=FutureWarning)


def R(name, peer=None, size=2, shapes=(), dtypes=(), op=None):
    return CallRecord(name, peer, size, shapes, dtypes, op)


F3 = ((3,),), ("float32",)


def _many_calls(rank, world_size):
    t = torch.ones(3) * rank
    dist.broadcast(t, 1)
    dist.all_reduce(t)
    out = torch.zeros(world_size * 3)
    dist.all_gather_into_tensor(out, t)
    objs = [rank]
    dist.broadcast_object_list(objs, src=0)
    if rank == 0:
        dist.send(t, 1)
        dist.isend(t, 1).wait()
    else:
        dist.recv(t, 0)
        dist.irecv(t, 0).wait()
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % world_size),
           dist.P2POp(dist.irecv, torch.zeros(3, dtype=torch.float32), (rank - 1) % world_size)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    dist.barrier()
    return rank


def test_record_calls_lists_each_ranks_own_calls_in_order():
    results = collnb.launch(_many_calls, 2, record_calls=True)
    assert isinstance(results, LaunchResults) and isinstance(results, list)
    assert results == [0, 1] and repr(results) == "[0, 1]"
    assert len(results.calls) == 2
    for rank, calls in enumerate(results.calls):
        other = 1 - rank
        assert calls == [
            R("broadcast", 1, 2, *F3),
            R("all_reduce", None, 2, *F3),
            R("all_gather_into_tensor", None, 2, ((6,), (3,)), ("float32", "float32")),
            # its internal broadcasts (object sizes, then bytes) are torch's, not the learner's
            R("broadcast_object_list", 0, 2),
            R("send" if rank == 0 else "recv", other, 2, *F3),
            R("isend" if rank == 0 else "irecv", other, 2, *F3),
            R("batch_isend_irecv", other, 2, *F3, op="isend"),
            R("batch_isend_irecv", other, 2, *F3, op="irecv"),
            R("barrier", None, 2),
        ], f"rank {rank}: {calls}"


def test_without_record_calls_launch_returns_a_plain_list():
    out = collnb.launch(_many_calls, 2)
    assert type(out) is list and out == [0, 1]


def _rooted_and_object_calls(rank, world_size):
    g = dist.new_group([1, 2])
    if rank in (1, 2):
        t = torch.zeros(2, dtype=torch.int64)
        dist.broadcast(t, group=g, group_src=1)          # global rank 2
        dist.reduce(t, dst=1, group=g)
    dist.gather_object(rank, [None] * world_size if rank == 0 else None, dst=0)
    got = [None]
    dist.scatter_object_list(got, list(range(world_size)) if rank == 2 else None, src=2)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, rank)
    x = torch.arange(6.)
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, x)
    dist.all_to_all_single(torch.empty(6), x)
    dist.monitored_barrier()
    return got[0]


def test_rooted_calls_record_the_global_peer_and_the_group_size():
    results = collnb.launch(_rooted_and_object_calls, 3, record_calls=True)
    assert results == [0, 1, 2]  # scatter_object_list from rank 2 sends rank r element r
    common = [R("gather_object", 0, 3), R("scatter_object_list", 2, 3), R("all_gather_object", None, 3),
              R("reduce_scatter_tensor", None, 3, ((2,), (6,)), ("float32", "float32")),
              R("all_to_all_single", None, 3, ((6,), (6,)), ("float32", "float32")),
              R("monitored_barrier", None, 3)]
    in_group = [R("broadcast", 2, 2, ((2,),), ("int64",)), R("reduce", 1, 2, ((2,),), ("int64",))]
    assert results.calls[0] == common
    assert results.calls[1] == in_group + common
    assert results.calls[2] == in_group + common


def test_collnbs_own_set_up_is_not_recorded():
    def nothing(rank, world_size):
        return None

    # a new world size makes a cached group (new_group) and may re-initialise the pool
    for ws in (5, 3, 5):
        out = collnb.launch(nothing, ws, record_calls=True)
        assert out.calls == [[] for _ in range(ws)]


def test_call_records_are_frozen_and_picklable():
    rec = R("broadcast", 0, 4, ((2, 3),), ("float32",))
    assert pickle.loads(pickle.dumps(rec)) == rec
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.name = "all_reduce"
    results = LaunchResults([1, 2], [[rec], []])
    back = pickle.loads(pickle.dumps(results))
    assert back == [1, 2] and back.calls == [[rec], []]


def test_hooks_are_off_outside_the_learners_function():
    from collnb import _dist_hooks

    def state(rank, world_size):
        return _dist_hooks.installed(), dist.all_reduce.__module__

    assert collnb.launch(state, 2) == [(True, "torch.distributed.distributed_c10d")] * 2
    assert not _dist_hooks.installed()  # nothing is installed in the launching process
