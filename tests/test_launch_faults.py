"""Issue 7: groups the function makes get collective_timeout, tensor flavours round-trip, blame
for mismatches and the timeout that fired, backend log lines kept out of the cell."""
import datetime
import pickle
import re
import time
import warnings

import pytest
import torch
import torch.distributed as dist

import collnb

warnings.filterwarnings("ignore", category=FutureWarning)


# ----------------------------------------------------------------------------------------------
# Item 1: every group or mesh the function makes waits collective_timeout, not 30 minutes


def _make_group(kind):
    if kind == "new_group":
        return dist.new_group([0, 1])
    if kind == "new_group_all":
        return dist.new_group()
    if kind == "new_subgroups":
        return dist.new_subgroups(2)[0]
    if kind == "new_subgroups_by_enumeration":
        return dist.new_subgroups_by_enumeration([[0, 1]])[0]
    if kind == "init_device_mesh":
        from torch.distributed.device_mesh import init_device_mesh
        return init_device_mesh("cpu", (2,)).get_group()
    if kind == "device_mesh_2d":
        from torch.distributed.device_mesh import init_device_mesh
        return init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp")).get_group("tp")
    if kind == "DeviceMesh":
        from torch.distributed.device_mesh import DeviceMesh
        return DeviceMesh("cpu", [0, 1]).get_group()
    raise ValueError(kind)


def _rank_1_skips_a_collective_on(rank, world_size, kind, then="stays"):
    g = _make_group(kind)
    if rank == 0:
        dist.all_reduce(torch.ones(2), group=g)
    elif then == "stays":  # in its function, the group open: rank 0 waits until a timeout runs out
        time.sleep(60)
    return rank  # "returns": the groups the function made close with it


@pytest.mark.parametrize("kind", ["new_group"] + [pytest.param(k, marks=pytest.mark.slow) for k in (
    "new_group_all", "new_subgroups", "new_subgroups_by_enumeration", "init_device_mesh", "device_mesh_2d",
    "DeviceMesh")])
def test_a_group_the_function_makes_gets_collective_timeout(kind):
    # issue 7 item 1: today a LaunchTimeout after the whole 60 s, blaming rank 0
    t0 = time.monotonic()
    with pytest.raises(collnb.RankError) as info:  # not LaunchTimeout: the group timed out first
        collnb.launch(_rank_1_skips_a_collective_on, 2, args=(kind,), collective_timeout=2, timeout=90)
    err = info.value
    assert err.rank == 1 and err.exc_type == "DidNotJoin"
    assert str(err).startswith("rank 1: DidNotJoin: rank 1 never reached the collective that rank 0 was "
                               "waiting in until collective_timeout (2 s) ran out; rank 1 was at File ")
    assert "time.sleep(60)" in err.rank_traceback
    assert err.outcomes[1].startswith("still running, stopped by collnb")
    assert time.monotonic() - t0 < 60  # far below torch's 30-minute group default
    assert collnb.launch(lambda r, w: r, 2) == [0, 1]


def _rank_1_returns_from_a_group_of_all(rank, world_size):
    g = dist.new_group(list(range(world_size)))
    if rank != 1:
        dist.all_reduce(torch.ones(2), group=g)
    return rank  # rank 1: the group closes with the function


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("debug", [True, False], ids=["debug=True", "debug=False"])
def test_a_rank_whose_function_returned_ends_the_wait_before_any_timeout(debug, world_size):
    # issue 25: rank 1's return closes the group it made, so its peers stop waiting at once; gloo's
    # words for that still say "failed to pass monitoredBarrier in 4000 ms" (debug) or "Connection
    # closed". At world size 3 a peer may still be waiting in all_reduce when collnb stops it: it is
    # not the rank that never joined.
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_rank_1_returns_from_a_group_of_all, world_size, collective_timeout=4, debug=debug, timeout=60)
    err = info.value
    head = str(err).splitlines()[0]
    m = re.fullmatch(r"rank 1: DidNotJoin: rank 1 never reached the collective that rank (\d) was waiting in: its "
                     r"function had already returned, and the groups it made closed with it, which ended rank \1's "
                     r"wait after ([\d.]+) (ms|s), before collective_timeout \(4 s\) could run out\. Every rank must call "
                     r"the same collectives in the same order", head)
    assert m, head
    assert m.group(1) in ("0", "2")
    waited = float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    assert waited < 0.9 * 4  # well before the timeout (a ratio of it, not a wall-clock limit)
    assert err.rank == 1 and err.outcomes[1] == "finished" and "(follows the root cause)" in err.outcomes[0]


def test_a_timeout_the_learner_gives_new_group_is_kept_and_named():
    def fn(rank, world_size):
        g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=1.5))
        if rank == 0:
            dist.all_reduce(torch.ones(2), group=g)

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 2, collective_timeout=30, timeout=25)  # only the group's own 1.5 s can fire
    assert str(info.value).startswith("rank 1: DidNotJoin: rank 1 never reached the collective that rank 0 "
                                      "was waiting in until the timeout=1.5 s passed to new_group ran out")


def test_groups_made_inside_the_function_still_work():
    def fn(rank, world_size):
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mesh.get_group("tp"))
        pairs = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])[0]
        u = torch.tensor([float(rank)])
        dist.all_reduce(u, group=pairs)
        return t.item(), u.item()

    assert collnb.launch(fn, 4) == [(1., 2.), (1., 4.), (5., 2.), (5., 4.)]


# ----------------------------------------------------------------------------------------------
# Item 4b: the timeout that fired is named


@pytest.mark.slow
def test_the_learners_monitored_barrier_timeout_is_named():
    def fn(rank, world_size):
        if rank == 1:
            time.sleep(30)
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=2))

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 3, collective_timeout=20, timeout=25)
    text = str(info.value)
    assert re.match(r"rank 1: DidNotJoin: rank 1 never reached the collective that rank [02] was waiting "
                    r"in until the timeout=2 s passed to monitored_barrier ran out", text)
    assert "collective_timeout" not in text.split("\n")[0]
    assert "time.sleep(30)" in info.value.rank_traceback


@pytest.mark.slow
def test_monitored_barrier_without_timeout_waits_collective_timeout():
    def fn(rank, world_size):
        if rank == 0:
            dist.monitored_barrier()

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 2, collective_timeout=1.5, timeout=40)
    assert "until collective_timeout (1.5 s) ran out" in str(info.value)


# ----------------------------------------------------------------------------------------------
# Item 4a: a mismatch blames one rank only when it differs from all the others


def _broadcast_dtypes(rank, world_size, dtypes):
    t = torch.ones(3, dtype=getattr(torch, dtypes[rank]))
    dist.broadcast(t, 0)


def test_two_ranks_that_disagree_are_both_named_and_neither_blamed():
    # issue 7 item 4a: rank 0 is "the odd one" of two; the old message blamed one side
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_broadcast_dtypes, 2, args=(("float32", "int64"),))
    err = info.value
    text = str(err)
    assert err.rank is None
    assert text.startswith("ranks 0 and 1: RuntimeError: Detected mismatch between collectives on ranks: "
                           "no rank differs from all the others")
    assert "  rank 0: OpType=BROADCAST, TensorShape=[3], TensorDtypes=Float\n" in text
    assert "  rank 1: OpType=BROADCAST, TensorShape=[3], TensorDtypes=Long\n" in text
    assert "Collectives differ in: Tensor dtypes: Float vs Long" in text
    assert err.mismatch == {"OpType=BROADCAST, TensorShape=[3], TensorDtypes=Float": [0],
                            "OpType=BROADCAST, TensorShape=[3], TensorDtypes=Long": [1]}
    assert "Traceback of ranks 0 and 1" in text  # they failed on the same line


def _sleep_on(rank, world_size, sleeper):
    if rank == sleeper:
        time.sleep(30)
    return rank


def test_launch_errors_survive_pickle_with_every_field():
    """RankError, LaunchTimeout and LaunchError come back from pickle with the same message and
    the same fields, as torch's own ProcessRaisedException does (a real error of each kind)."""
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_broadcast_dtypes, 3, args=(("float32", "int64", "int64"),))
    rank_error = info.value
    with pytest.raises(collnb.LaunchTimeout) as info:
        collnb.launch(_sleep_on, 2, args=(1,), timeout=2)
    timeout = info.value
    # the fields hold real values, so the round trip below compares something
    assert rank_error.rank == 0 and rank_error.exc_type == "RuntimeError"
    assert "in _broadcast_dtypes" in rank_error.rank_traceback
    assert rank_error.mismatch == {"OpType=BROADCAST, TensorShape=[3], TensorDtypes=Long": [1, 2],
                                   "OpType=BROADCAST, TensorShape=[3], TensorDtypes=Float": [0]}
    assert set(rank_error.outcomes) == {0, 1, 2} and isinstance(rank_error.backend_log, list)
    assert timeout.pending == [1] and timeout.outcomes[0] == "finished"
    for err in (rank_error, timeout, collnb.LaunchError("this pool was closed after a failure")):
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is type(err)
        assert str(copy) == str(err) and copy.args == err.args
        assert vars(copy) == vars(err)
    copy = pickle.loads(pickle.dumps(rank_error))
    assert (copy.rank, copy.exc_type, copy.rank_traceback, copy.outcomes, copy.mismatch, copy.backend_log) == \
        (rank_error.rank, rank_error.exc_type, rank_error.rank_traceback, rank_error.outcomes,
         rank_error.mismatch, rank_error.backend_log)
    copy = pickle.loads(pickle.dumps(timeout))
    assert (copy.pending, copy.outcomes, copy.backend_log) == (timeout.pending, timeout.outcomes, timeout.backend_log)


@pytest.mark.parametrize("world_size, odd", [(3, 0), (3, 2), (4, 1)])
def test_the_one_rank_that_differs_from_all_others_is_the_root_cause(world_size, odd):
    dtypes = tuple("float32" if r == odd else "int64" for r in range(world_size))
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_broadcast_dtypes, world_size, args=(dtypes,))
    err = info.value
    others = [r for r in range(world_size) if r != odd]
    assert err.rank == odd
    assert str(err).startswith(f"rank {odd}: RuntimeError: Detected mismatch between collectives on ranks: "
                               f"rank {odd} called a different collective from every other rank")
    assert err.mismatch == {"OpType=BROADCAST, TensorShape=[3], TensorDtypes=Long": others,
                            "OpType=BROADCAST, TensorShape=[3], TensorDtypes=Float": [odd]}


@pytest.mark.parametrize("dtypes", [("float32", "float32", "int64", "int64"),
                                    ("float32", "int64", "float64")])
def test_no_rank_is_blamed_when_sides_are_even_or_many(dtypes):
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_broadcast_dtypes, len(dtypes), args=(dtypes,))
    err = info.value
    assert err.rank is None
    assert str(err).startswith("ranks 0, 1, 2 and 3: " if len(dtypes) == 4 else "ranks 0, 1 and 2: ")
    assert sorted(r for ranks in err.mismatch.values() for r in ranks) == list(range(len(dtypes)))


def test_a_rank_calling_another_collective_is_the_root_cause():
    def fn(rank, world_size):
        t = torch.ones(2)
        if rank == 2:
            dist.broadcast(t, 0)
        else:
            dist.all_reduce(t)

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 3)
    assert info.value.rank == 2
    assert "OpType=BROADCAST" in str(info.value) and "OpType=ALLREDUCE" in str(info.value)


# ----------------------------------------------------------------------------------------------
# Item 5: gloo's C++ log lines are kept out of the cell and attached to the error


def _rank_1_returns_early(rank, world_size):
    if rank == 0:
        dist.all_reduce(torch.ones(2))


def test_backend_log_lines_are_attached_not_printed(capfd):
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_rank_1_returns_early, 2, collective_timeout=1)
    out, err = capfd.readouterr()
    assert "ProcessGroupGloo.cpp" not in out + err
    log = info.value.backend_log
    assert log and all(line.startswith("[rank 0] ") for line in log)
    assert any("ProcessGroupGloo.cpp" in line and "failed to pass monitoredBarrier" in line for line in log)
    assert str(info.value).rstrip().endswith(
        f"({len(log)} lines logged by gloo's C++ code kept out of the output: print(*err.backend_log, sep='\\n') "
        f"shows them; launch(..., show_backend_log=True) prints them as they come)")


@pytest.mark.slow
def test_backend_log_lines_are_shown_when_asked(capfd):
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_rank_1_returns_early, 2, collective_timeout=1, show_backend_log=True)
    out, err = capfd.readouterr()
    assert "ProcessGroupGloo.cpp" in err and "[rank 0] " in err
    assert info.value.backend_log == [] and "backend_log" not in str(info.value)


def test_the_learners_own_stderr_is_still_shown(capfd):
    def fn(rank, world_size):
        import sys
        print("[W1130 12:00:00] looks like a log line but has no file:line", file=sys.stderr)
        print("  indented warning text", file=sys.stderr)
        return rank

    assert collnb.launch(fn, 2) == [0, 1]
    err = capfd.readouterr().err
    assert "[rank 1] [W1130 12:00:00] looks like a log line" in err
    assert "[rank 0]   indented warning text" in err


# ----------------------------------------------------------------------------------------------
# Item 2: every tensor flavour pickle round-trips travels through args and results


class _MyTensor(torch.Tensor):
    pass


def _flavours():
    z = torch.tensor([1 + 2j, 3 - 4j])
    dense = torch.tensor([[0., 1.], [2., 0.]])
    return {
        "conj": z.conj(),
        "neg": torch.tensor([1 + 2j]).conj().imag,                       # contiguous, negative bit
        "conj_transposed": torch.tensor([[1 + 2j, 3 + 4j], [5 + 6j, 7 + 8j]]).conj().t(),
        "strided": torch.arange(8.).reshape(4, 2)[:, 0],
        "expanded": torch.tensor([1., 2.]).expand(3, 2),
        "offset": torch.arange(10.)[3:6],
        "channels_last": torch.arange(16.).reshape(1, 4, 2, 2).contiguous(memory_format=torch.channels_last),
        "sparse_coo": dense.to_sparse(),
        "sparse_csr": dense.to_sparse_csr(),
        "sparse_csc": dense.to_sparse_csc(),
        "sparse_bsr": torch.arange(16.).reshape(4, 4).to_sparse_bsr((2, 2)),
        "quantized": torch.quantize_per_tensor(torch.tensor([1., 2.]), 0.1, 0, torch.qint8),
        "quantized_per_channel": torch.quantize_per_channel(
            torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), 0, torch.quint8),
        "nested": torch.nested.nested_tensor([torch.ones(2), torch.arange(3.)]),
        "nested_jagged": torch.nested.nested_tensor([torch.ones(2), torch.arange(3.)], layout=torch.jagged),
        "meta": torch.empty(3, 2, device="meta"),
        "subclass": torch.arange(2.).as_subclass(_MyTensor),
        "uint16": torch.tensor([1, 2, 60000], dtype=torch.uint16),
        "float8": torch.tensor([1., -2.], dtype=torch.float8_e4m3fn),
        "zero_dim": torch.tensor(3.),
        "empty": torch.empty(0, 3),
    }


def _same(a, b):
    if a.device.type == "meta":
        return b.device.type == "meta" and a.shape == b.shape and a.dtype == b.dtype
    if a.is_nested:
        return b.is_nested and a.layout == b.layout and all(torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind()))
    if a.is_quantized:
        return b.is_quantized and a.qscheme() == b.qscheme() and torch.equal(a.int_repr(), b.int_repr()) \
            and torch.equal(a.dequantize(), b.dequantize())
    if a.layout != torch.strided:
        return a.layout == b.layout and torch.equal(a.to_dense(), b.to_dense())
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype in (torch.uint16, torch.float8_e4m3fn):
        return torch.equal(a.float(), b.float())
    return torch.equal(a.resolve_conj().resolve_neg(), b.resolve_conj().resolve_neg())


@pytest.mark.parametrize("name", list(_flavours()))
def test_a_tensor_flavour_comes_back_with_its_values(name):
    want = _flavours()[name]
    back = collnb.launch(lambda rank, world_size, n: _flavours()[n], 1, args=(name,))[0]
    assert _same(want, back), (name, want, back)
    assert type(back) is type(want) or name == "subclass" and type(back).__name__ == "_MyTensor"


@pytest.mark.parametrize("name", list(_flavours()))
def test_a_tensor_flavour_arrives_as_an_argument(name):
    def fn(rank, world_size, x, name):
        return _same(_flavours()[name], x), type(x).__name__, x.layout, x.is_quantized, x.is_nested

    same, kind, layout, quantized, nested = collnb.launch(fn, 2, args=(_flavours()[name], name))[1]
    want = _flavours()[name]
    assert same and kind == type(want).__name__ and layout == want.layout
    assert quantized == want.is_quantized and nested == want.is_nested


def test_a_conjugate_result_is_its_values():
    # issue 7 item 2: RankError "returned a Tensor that cannot be sent back ... Return tensors"
    out = collnb.launch(lambda r, w: torch.tensor([1 + 2j]).conj(), world_size=1)
    assert len(out) == 1 and torch.equal(out[0], torch.tensor([1 - 2j])) and not out[0].is_conj()
    z = torch.tensor([1 + 2j, -3 + 0.5j])
    got = collnb.launch(lambda r, w, a, b: (a.resolve_conj(), b.clone()), 1, args=(z.conj(), z.conj().imag))[0]
    assert torch.equal(got[0], torch.tensor([1 - 2j, -3 - 0.5j]))
    assert torch.equal(got[1], torch.tensor([-2., -0.5]))


def test_parameters_and_requires_grad_arrive_as_pickle_sends_them():
    p = torch.nn.Parameter(torch.tensor([1., 2.]))
    w = torch.tensor([3.], requires_grad=True)

    def fn(rank, world_size, p, w):
        (p.sum() * w).sum().backward()  # autograd works on the arguments in the rank
        return type(p).__name__, p.requires_grad, w.requires_grad, p.grad, w.grad

    assert collnb.launch(fn, 1, args=(p, w))[0][:3] == ("Parameter", True, True)
    _, _, _, pg, wg = collnb.launch(fn, 1, args=(p, w))[0]
    assert pg.tolist() == [3., 3.] and wg.tolist() == [3.]
    frozen = torch.nn.Parameter(torch.ones(1), requires_grad=False)
    assert collnb.launch(lambda r, ws, x: (type(x).__name__, x.requires_grad), 1, args=(frozen,))[0] == \
        ("Parameter", False)


def test_an_untyped_storage_round_trips():
    # plain pickle fails on it in torch 2.13 (AttributeError ... 'dtype')
    s = torch.tensor([1, 2, 3], dtype=torch.uint8).untyped_storage()
    back = collnb.launch(lambda r, w, s: s, 1, args=(s,))[0]
    assert type(back) is torch.UntypedStorage and back.tolist() == [1, 2, 3]


def test_an_mkldnn_tensor_says_what_to_send_instead():
    x = torch.ones(2, 2).to_mkldnn()
    with pytest.raises(TypeError) as info:  # pickle and torch.save cannot copy it either
        collnb.launch(lambda r, w, x: 0, 1, args=(x,))
    assert str(info.value) == ("cannot send an MKL-DNN tensor (layout torch._mkldnn: opaque memory that neither "
                               "pickle nor torch.save can copy) to the ranks; pass t.to_dense() instead")
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(lambda r, w: torch.ones(2).to_mkldnn(), 1)
    first = str(info.value).splitlines()[0]
    assert first == ("rank 0: TypeError: rank 0's function returned an MKL-DNN tensor (layout torch._mkldnn: "
                     "opaque memory that neither pickle nor torch.save can copy); send t.to_dense() instead")
    assert "Return tensors" not in str(info.value)


def test_a_dtensor_says_what_to_return_instead():
    def fn(rank, world_size):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (world_size,))
        return distribute_tensor(torch.arange(4.), mesh, [Shard(0)])

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 2)
    assert "function returned a DTensor (a tensor sharded over a DeviceMesh" in str(info.value)
    assert "t.to_local()" in str(info.value) and "t.full_tensor()" in str(info.value)


def test_values_of_views_that_share_a_base_are_kept():
    def fn(rank, world_size):
        base = torch.arange(6.)
        return base[:4], base[2:], base.view(2, 3).t()

    a, b, c = collnb.launch(fn, 1)[0]
    assert a.tolist() == [0., 1., 2., 3.] and b.tolist() == [2., 3., 4., 5.]
    assert c.tolist() == [[0., 3.], [1., 4.], [2., 5.]]
    assert pickle.loads(pickle.dumps(a)).tolist() == a.tolist()


@pytest.mark.slow
def test_a_launch_timeout_with_a_rank_left_waiting_does_not_advise_more_time():
    def fn(rank, world_size):
        g = dist.new_group([0, 1], timeout=datetime.timedelta(minutes=10))  # longer than the launch
        if rank == 0:
            dist.all_reduce(torch.ones(2), group=g)

    with pytest.raises(collnb.LaunchTimeout) as info:
        collnb.launch(fn, 2, timeout=4)
    text = str(info.value)
    assert "rank(s) 0 were waiting in a collective that rank(s) 1 never called" in text
    assert "raise the limit" not in text
    assert info.value.outcomes[1] == "finished"


@pytest.mark.parametrize("line, held", [
    (b"[rank0]:[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] [Rank 0]: Rank 1 failed", True),
    (b"[W1130 21:54:26.310024083 4242 socket.cpp:767] [c10d] The client socket has failed", True),
    (b"[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer", True),
    (b"gpu-node:4242:4250 [0] NCCL WARN Cuda failure 'out of memory'", True),
    (b"[W1130 12:00:00] a learner's own line that looks like a log line", False),
    (b"[1, 2, 3]", False),
    (b"Traceback (most recent call last):", False),
])
def test_which_lines_count_as_the_backends_log(line, held):
    from collnb.ranks.instrument.backend_log import is_log_line
    assert is_log_line(line) == held


def test_a_recv_timeout_names_the_groups_own_timeout():
    def fn(rank, world_size):
        g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=1.5))
        if rank == 0:
            dist.recv(torch.zeros(2), src=1, group=g)

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 2, collective_timeout=30, timeout=25)
    assert "until the timeout=1.5 s passed to new_group ran out" in str(info.value).splitlines()[0]


@pytest.mark.slow
def test_the_timeout_named_is_the_one_that_fired_not_the_one_passed():
    # barrier(timeout=1.5 s): with debug=True torch's DETAIL check first waits in a monitored
    # barrier with the group's timeout (collective_timeout, 3 s here), and that is what fires
    def fn(rank, world_size):
        if rank == 0:
            dist.barrier(timeout=datetime.timedelta(seconds=1.5))

    with pytest.raises(collnb.RankError) as info:
        collnb.launch(fn, 2, collective_timeout=3, timeout=30)
    first = str(info.value).splitlines()[0]
    assert "until collective_timeout (3 s) ran out" in first
    assert "monitoredBarrier in 3000 ms" in info.value.outcomes[0]
