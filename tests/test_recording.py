"""collnb.ranks.instrument.recording: every communication operation a rank issues is recorded where torch
dispatches it (issue 18), whichever API issued it: torch.distributed functions, ProcessGroup
methods, functional collectives, DTensor; with its name, group, shapes, dtypes and bytes."""
import dataclasses
import pickle
import warnings

import pytest
import torch
import torch.distributed as dist

import collnb
from collnb import CallRecord, LaunchResults
from collnb.ranks import CallRecords

warnings.filterwarnings("ignore", category=FutureWarning)


def R(name, peer=None, ranks=(0, 1), shapes=(), dtypes=(), op=None, nbytes=0, source="torch.distributed",
      call=0):
    return CallRecord(name, peer, len(ranks), shapes, dtypes, op, tuple(ranks), nbytes, source, call)


F3 = ((3,),), ("float32",)


def _many_calls(rank, world_size):
    t = torch.ones(3) * rank
    dist.broadcast(t, 1)
    dist.all_reduce(t)
    dist.all_reduce(t, async_op=True).wait()
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


def test_record_calls_lists_every_operation_in_order():
    results = collnb.launch(_many_calls, 2, record_calls=True)
    assert isinstance(results, LaunchResults) and isinstance(results, list)
    assert results == [0, 1] and repr(results) == "[0, 1]"
    assert len(results.calls) == 2
    for rank, calls in enumerate(results.calls):
        other = 1 - rank
        assert isinstance(calls, CallRecords) and calls.unrecorded == 0
        # the pickled [rank]: 5 bytes (protocol 4 of a small int), one int64 size first
        size = len(pickle.dumps(0))
        assert calls == [
            R("broadcast", 1, (0, 1), *F3, nbytes=12, call=0),
            R("all_reduce", None, (0, 1), *F3, nbytes=12, call=1),
            R("all_reduce", None, (0, 1), *F3, nbytes=12, call=2),
            R("all_gather_into_tensor", None, (0, 1), ((6,), (3,)), ("float32", "float32"), nbytes=24, call=3),
            # the two broadcasts torch makes inside broadcast_object_list: one call, two operations
            R("broadcast_object_list", 0, (0, 1), ((1,),), ("int64",), op="broadcast", nbytes=8, call=4),
            R("broadcast_object_list", 0, (0, 1), ((size,),), ("uint8",), op="broadcast", nbytes=size, call=4),
            R("send" if rank == 0 else "recv", other, (0, 1), *F3, nbytes=12, call=5),
            R("isend" if rank == 0 else "irecv", other, (0, 1), *F3, nbytes=12, call=6),
            R("batch_isend_irecv", other, (0, 1), *F3, op="isend", nbytes=12, call=7),
            R("batch_isend_irecv", other, (0, 1), *F3, op="irecv", nbytes=12, call=7),
            R("barrier", None, (0, 1), call=8),
        ], f"rank {rank}: {calls}"
        assert [c.operation for c in calls][4:6] == ["broadcast", "broadcast"]


def test_without_record_calls_launch_returns_a_plain_list_and_no_mode_is_active():
    def modes(rank, world_size):
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        return [type(m).__name__ for m in _get_current_dispatch_mode_stack()]

    out = collnb.launch(modes, 2)
    assert type(out) is list and out == [[], []]
    assert collnb.launch(modes, 2, record_calls=True) == [["Recorder"], ["Recorder"]]


def _functional(rank, world_size):
    import torch.distributed._functional_collectives as funcol
    g = dist.new_group([1, 2])
    if rank in (1, 2):
        x = torch.arange(4., dtype=torch.float64) + 10 * rank
        gathered = funcol.all_gather_tensor(x, 0, g)              # deprecated name, still used
        summed = funcol.all_reduce(x, "sum", g)
        scattered = funcol.reduce_scatter_tensor(x, "sum", 0, g)
        return torch.cat([funcol.wait_tensor(gathered), funcol.wait_tensor(summed),
                          funcol.wait_tensor(scattered)])
    return None


def test_a_functional_collective_is_recorded_with_its_group_shapes_and_bytes():
    out = collnb.launch(_functional, 3, record_calls=True)
    x1, x2 = torch.arange(4., dtype=torch.float64) + 10, torch.arange(4., dtype=torch.float64) + 20
    assert torch.equal(out[1], torch.cat([x1, x2, x1 + x2, (x1 + x2)[:2]]))
    F64 = ("float64", "float64")
    for rank in (1, 2):
        assert out.calls[rank] == [
            R("all_gather_into_tensor", None, (1, 2), ((4,), (8,)), F64, nbytes=64, source="functional", call=0),
            R("all_reduce", None, (1, 2), ((4,), (4,)), F64, nbytes=32, source="functional", call=1),
            R("reduce_scatter_tensor", None, (1, 2), ((4,), (2,)), F64, nbytes=32, source="functional", call=2),
        ], out.calls[rank]
        assert out.calls[rank].unrecorded == 0
    assert out.calls[0] == []


def _process_group_methods(rank, world_size):
    pg = dist.group.WORLD
    out = [[torch.zeros(2, dtype=torch.int32) for _ in range(world_size)]]
    pg.allgather(out, [torch.full((2,), rank, dtype=torch.int32)]).wait()
    t = torch.ones(5, dtype=torch.float16)
    pg.allreduce([t]).wait()
    return torch.cat(out[0]), t


def test_process_group_methods_are_recorded():
    out = collnb.launch(_process_group_methods, 3, record_calls=True)
    assert out[2][0].tolist() == [0, 0, 1, 1, 2, 2] and out[2][1].tolist() == [3.0] * 5
    for calls in out.calls:
        assert calls == [
            R("all_gather", None, (0, 1, 2), ((2,),) * 4, ("int32",) * 4, nbytes=24, source="ProcessGroup",
              call=0),
            R("all_reduce", None, (0, 1, 2), ((5,),), ("float16",), nbytes=10, source="ProcessGroup", call=1),
        ]


def _dtensor(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2,))
    d = distribute_tensor(torch.arange(8.).reshape(4, 2), mesh, [Shard(0)])   # a scatter from rank 0
    full = d.redistribute(mesh, [Replicate()]).to_local()                    # S(0) -> R: all_gather
    p = torch.distributed.tensor.DTensor.from_local(torch.ones(3) * (rank + 1), mesh, [Partial()])
    summed = p.redistribute(mesh, [Replicate()]).to_local()                  # P -> R: all_reduce
    return full, summed


def test_a_dtensor_redistribute_is_recorded_as_the_collectives_it_runs():
    out = collnb.launch(_dtensor, 2, record_calls=True)
    assert out[1][0].tolist() == torch.arange(8.).reshape(4, 2).tolist() and out[1][1].tolist() == [3.0] * 3
    for calls in out.calls:
        assert [c.source for c in calls] == ["DTensor"] * 3
        scatter, gather, reduce = calls
        assert (scatter.name, scatter.peer, scatter.group_ranks) == ("scatter", 0, (0, 1))
        assert gather == R("all_gather_into_tensor", None, (0, 1), ((2, 2), (4, 2)), ("float32", "float32"),
                           nbytes=32, source="DTensor", call=1)
        assert (reduce.name, reduce.shapes, reduce.nbytes, reduce.group_ranks) == ("all_reduce", ((3,), (3,)), 12,
                                                                                  (0, 1))
        assert calls.unrecorded == 0


def _mesh_2x2(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    d = distribute_tensor(torch.arange(16.).reshape(4, 4), mesh, [Replicate(), Shard(1)])
    return d.redistribute(mesh, [Replicate(), Replicate()]).to_local()


def _shard_dim_alltoall(rank, world_size):
    import torch.distributed.tensor  # noqa: F401 - DTensor's operators
    from torch.distributed._functional_collectives import _group_or_group_name
    x = torch.arange(8.).reshape(4, 2) + 100 * rank
    return torch.ops._dtensor.shard_dim_alltoall(x, 0, 1, _group_or_group_name(dist.group.WORLD))


def test_dtensors_own_all_to_all_operator_is_recorded():
    """What DTensor issues for Shard(i) -> Shard(j) off the CPU (NCCL): _dtensor.shard_dim_alltoall,
    C++ on the backend's alltoall_base; it runs on gloo too, so it is tested here."""
    out = collnb.launch(_shard_dim_alltoall, 2, record_calls=True, timeline=True)
    # gathered on dim 0 (8 rows), rank r keeps column r
    assert torch.equal(out[0], torch.tensor([[0.], [2.], [4.], [6.], [100.], [102.], [104.], [106.]]))
    for rank in range(2):
        assert out.calls[rank] == [R("all_to_all_single", shapes=((4, 2), (8, 1)), dtypes=("float32",) * 2,
                                     nbytes=32, source="ProcessGroup")]
    spans = [s for row in out.timeline.spans for s in row if s.kind == "collective"]
    assert [(s.rank, s.name, s.nbytes, s.completed) for s in spans] == [(0, "all_to_all_single", 32, True),
                                                                         (1, "all_to_all_single", 32, True)]


def test_group_ranks_say_which_mesh_dimension_an_operation_ran_over():
    out = collnb.launch(_mesh_2x2, 4, record_calls=True)
    assert all(t.tolist() == torch.arange(16.).reshape(4, 4).tolist() for t in out)
    for rank, calls in enumerate(out.calls):
        gathers = [c for c in calls if c.name == "all_gather_into_tensor"]
        assert len(gathers) == 1, calls
        assert gathers[0].group_ranks == ((0, 1) if rank < 2 else (2, 3)), gathers  # the "tp" dimension


def _with_comm_debug_mode(rank, world_size):
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode
    mesh = init_device_mesh("cpu", (2,))
    with CommDebugMode() as cdm:
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(2), async_op=True).wait()
        funcol.wait_tensor(funcol.all_reduce(torch.ones(2), "sum", dist.group.WORLD))
        d = distribute_tensor(torch.arange(4.), mesh, [Shard(0)])
        d.redistribute(mesh, [Replicate()]).to_local()
    return cdm.get_total_counts()


def test_a_learners_comm_debug_mode_and_the_recorder_count_the_same():
    out = collnb.launch(_with_comm_debug_mode, 2, record_calls=True)
    for total, calls in zip(out, out.calls):
        assert total == len(calls) == 5, (total, calls)
        assert [c.source for c in calls] == ["torch.distributed"] * 2 + ["functional"] + ["DTensor"] * 2


def _rooted_and_object_calls(rank, world_size):
    g = dist.new_group([1, 2])
    if rank in (1, 2):
        t = torch.zeros(2, dtype=torch.int64)
        dist.broadcast(t, group=g, group_src=1)          # global rank 2
        dist.reduce(t, dst=1, group=g)
    dist.gather_object(rank, [None] * world_size if rank == 0 else None, dst=0)
    x = torch.arange(6.)
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, x)
    dist.all_to_all_single(torch.empty(6), x)
    dist.monitored_barrier()
    return rank


def test_rooted_calls_record_the_global_peer_and_the_group():
    results = collnb.launch(_rooted_and_object_calls, 3, record_calls=True)
    everyone = (0, 1, 2)
    for rank, calls in enumerate(results.calls):
        first = 2 if rank else 0
        if rank:
            assert calls[:2] == [R("broadcast", 2, (1, 2), ((2,),), ("int64",), nbytes=16, call=0),
                                 R("reduce", 1, (1, 2), ((2,),), ("int64",), nbytes=16, call=1)]
        gather_object = calls[first:first + 2]
        assert [(c.name, c.op, c.peer, c.call) for c in gather_object] == [
            ("gather_object", "all_gather", None, first), ("gather_object", "gather", 0, first)]
        assert calls[first + 2:] == [
            R("reduce_scatter_tensor", None, everyone, ((2,), (6,)), ("float32", "float32"), nbytes=24,
              call=first + 1),
            R("all_to_all_single", None, everyone, ((6,), (6,)), ("float32", "float32"), nbytes=24, call=first + 2),
            R("monitored_barrier", None, everyone, call=first + 3)]
        assert calls.unrecorded == 0  # monitored_barrier counts two on gloo's sequence number


def test_a_recv_from_any_source_records_the_rank_it_came_from():
    def fn(rank, world_size):
        t = torch.zeros(1)
        if rank == 2:
            dist.send(t + 1, 0)
        elif rank == 0:
            return dist.recv(t)  # src=None: any source
        return None

    out = collnb.launch(fn, 3, record_calls=True)
    assert out[0] == 2
    assert out.calls[0] == [R("recv", 2, (0, 1, 2), ((1,),), ("float32",), nbytes=4)]
    assert out.calls[2] == [R("send", 0, (0, 1, 2), ((1,),), ("float32",), nbytes=4)]
    assert out.calls[1] == []


def test_no_wrapped_function_escapes_the_recorder():
    """Issue 18: `dist.get_world_size.__wrapped__()` passed count_ranks because a wrapper exposed
    the unwrapped function. The recorder sits below every Python function: torch's own functions
    behind collnb's wrappers are recorded like the wrappers."""
    def fn(rank, world_size):
        import inspect
        t = torch.ones(1)
        dist.all_reduce.__wrapped__(t)
        inspect.unwrap(dist.all_reduce)(t)        # torch's own function, under its logging decorator
        return t

    out = collnb.launch(fn, 2, record_calls=True)
    assert out[0].tolist() == [4.0]
    assert [(c.name, c.source) for c in out.calls[0]] == [("all_reduce", "torch.distributed")] * 2


def test_collnbs_own_set_up_is_not_recorded():
    def nothing(rank, world_size):
        return None

    # a new world size makes a cached group (new_group) and may re-initialise the pool
    for ws in (5, 3, 5):
        out = collnb.launch(nothing, ws, record_calls=True)
        assert out.calls == [[] for _ in range(ws)]
        assert all(c.unrecorded == 0 for c in out.calls)


def test_call_records_are_frozen_and_picklable():
    rec = R("broadcast", 0, (0, 1, 2, 3), ((2, 3),), ("float32",), nbytes=24)
    assert pickle.loads(pickle.dumps(rec)) == rec
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.name = "all_reduce"
    results = LaunchResults([1, 2], [CallRecords([rec], unrecorded=3), CallRecords()])
    back = pickle.loads(pickle.dumps(results))
    assert back == [1, 2] and back.calls == [[rec], []] and back.calls[0].unrecorded == 3


def test_operations_the_recorder_cannot_see_are_counted_as_unrecorded():
    """A dispatch mode is per thread, and code can switch modes off: the backend's own count
    (its sequence number) says how many operations went unseen."""
    def fn(rank, world_size):
        import threading
        from torch.utils._python_dispatch import _disable_current_modes
        dist.all_reduce(torch.ones(1))                                    # seen
        worker = threading.Thread(target=lambda: dist.all_reduce(torch.ones(1)))
        worker.start(), worker.join()                                     # another thread
        with _disable_current_modes():
            dist.broadcast(torch.ones(1), 0)                              # modes off
        g = dist.new_group([0, 1])                                        # a group made meanwhile,
        worker = threading.Thread(target=lambda: dist.all_reduce(torch.ones(1), group=g))
        worker.start(), worker.join()                                     # used from another thread only
        return None

    out = collnb.launch(fn, 2, record_calls=True)
    assert [[c.name for c in calls] for calls in out.calls] == [["all_reduce"]] * 2
    assert [calls.unrecorded for calls in out.calls] == [3, 3]


def _observed(rank, world_size):
    import torch.distributed._functional_collectives as funcol
    from collnb.ranks.instrument import recording

    class Timeline:
        def __init__(self):
            self.events = []

        def issued(self, issue):
            self.events.append(("issued", issue.record.name, type(issue.work).__name__,
                                [tuple(t.shape) for t in issue.outputs], issue.issued_ns <= issue.returned_ns))
            if issue.work is not None:
                issue.work.get_future().then(lambda fut: self.events.append(("completed", issue.record.name)))

        def waited(self, issue, ns):
            self.events.append(("waited", issue.record.name, ns >= issue.returned_ns))

    timeline = Timeline()
    recording.active().add_observer(timeline)
    work = dist.all_reduce(torch.ones(4), async_op=True)
    work.wait()
    funcol.wait_tensor(funcol.all_gather_tensor(torch.ones(2), 0, dist.group.WORLD))
    recording.active().remove_observer(timeline)
    dist.barrier()                                                        # not observed
    return timeline.events


def test_observers_receive_each_operation_at_issue_time_with_its_work():
    out = collnb.launch(_observed, 2, record_calls=True)
    for events in out:
        assert events == [("issued", "all_reduce", "Work", [(4,)], True), ("completed", "all_reduce"),
                          ("issued", "all_gather_into_tensor", "NoneType", [(4,)], True),
                          ("waited", "all_gather_into_tensor", True)], events
    assert [c.name for c in out.calls[0]] == ["all_reduce", "all_gather_into_tensor", "barrier"]


def test_a_failing_collective_shows_the_learners_frames_not_the_recorders():
    def fn(rank, world_size):
        dist.all_reduce(torch.ones(3 if rank == 0 else 4))

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 2, record_calls=True)
    assert "Detected mismatch" in str(info.value)
    shown = info.value.rank_traceback
    assert "collnb/ranks/" not in shown and "in fn" in shown
    # it ends in torch's all_reduce, as without recording (not in the dispatch machinery)
    assert shown.rstrip().endswith("work = group.allreduce([tensor], opts)"), shown


def _one_step(rank, world_size, kind):
    from collnb.ranks.instrument import recording
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 64, bias=False))
    if kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world_size,))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    before = len(recording.active().records())
    model(torch.randn(4, 64)).sum().backward()
    return before


@pytest.mark.slow
def test_fsdp2_and_ddp_steps_are_recorded_collective_by_collective():
    """What later notebooks count per layer: FSDP2 (fully_shard, two 64x64 layers) all-gathers each
    layer in forward and again in backward and reduce-scatters each gradient; DDP's C++ reducer
    all-reduces one bucket (issued from C++: source "ProcessGroup")."""
    out = collnb.launch(_one_step, 2, args=("fsdp",), record_calls=True)
    for before, calls in zip(out, out.calls):
        step = calls[before:]
        assert [c.name for c in step] == ["all_gather_single"] * 4 + ["reduce_scatter_single"] * 2, step
        assert {c.nbytes for c in step} == {64 * 64 * 4} and calls.unrecorded == 0
    out = collnb.launch(_one_step, 2, args=("ddp",), record_calls=True, debug=False)
    for before, calls in zip(out, out.calls):
        step = calls[before:]
        assert [(c.name, c.source, c.nbytes) for c in step] == [("all_reduce", "ProcessGroup", 2 * 64 * 64 * 4)]
