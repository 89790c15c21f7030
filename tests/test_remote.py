"""collnb.connect(): ranks on the engines of a real local ipyparallel cluster (Cluster(n=4)).

The engines are processes on this machine started by ipyparallel's local launcher; every call
goes through ipyparallel (signed messages, output capture, send_signal). The cluster is started
once for the module and every test leaves it as it found it, except the killed-engine test, which
comes last in this file and spends it (the killed engine does not come back); the put-back test
changes an engine for good, so it runs on a cluster of its own, which connect() starts.
"""

import dataclasses
import os
import signal
import threading
import time

import pytest
import torch
import torch.distributed as dist

import collnb
from collnb.ranks import launcher
from collnb.ranks.local.rankset import LOCAL
from collnb.ranks.instrument.timeline import ALIGNED, CLOCK
from collnb.ranks.remote import connection as remote

ipp = pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (pip install 'collnb[cluster]')")

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]


def _start(n):
    cluster = ipp.Cluster(n=n, log_level=40)
    client = cluster.start_and_connect_sync()
    client.wait_for_engines(n, timeout=180)
    return cluster, client


@pytest.fixture(scope="module")
def cluster():
    cluster, client = _start(4)
    try:
        yield cluster, client
    finally:
        collnb.disconnect()
        client.close()
        cluster.stop_cluster_sync()


@pytest.fixture
def connected(cluster):
    cl, client = cluster
    info = collnb.connect(client)
    try:
        yield client, info
    finally:
        collnb.disconnect()


def _where_am_i(rank, world_size):
    return (os.getpid(), dist.get_rank(), dist.get_world_size(), dist.get_backend())


def test_connect_describes_engines_and_ranks_run_there(connected, fresh_pool):
    client, info = connected  # no local ranks (fresh_pool): any that appear were started by this test
    assert [d["rank"] for d in info] == [0, 1, 2, 3]
    assert [d["engine"] for d in info] == sorted(client.ids)
    assert {d["interface"] for d in info} == {"lo"}  # all engines local: loopback only
    assert [d["local_rank"] for d in info] == [0, 1, 2, 3]  # one host: local rank = rank
    out = collnb.launch(_where_am_i, 4)
    engine_pids = [d["pid"] for d in info]
    assert [o[0] for o in out] == engine_pids  # each rank ran in its engine's process
    assert [o[1:] for o in out] == [(r, 4, "gloo") for r in range(4)]
    assert os.getpid() not in engine_pids
    assert collnb.ranks.warm_pool() is None  # no local rank started
    # a smaller world size runs on ranks 0..2 only, inside a cached subgroup
    out3 = collnb.launch(_where_am_i, 3)
    assert [o[1:] for o in out3] == [(r, 3, "gloo") for r in range(3)]
    assert collnb.backend_info("gloo")["max_world_size"] == 4
    with pytest.raises(ValueError, match=r"world_size must be an int from 1 to 4 \(one rank per engine, and 4 "
                                         r"engine\(s\) are connected\); got 5"):
        collnb.launch(_where_am_i, 5)
    with pytest.raises(TypeError, match=r"world_size must be an int from 1 to 4 .*; got 2.0"):
        collnb.launch(_where_am_i, 2.0)


def test_rendezvous_store_listens_on_loopback_only(connected):
    """The TCPStore rank 0 hosts is bound to 127.0.0.1 on a port the OS chose (never 0.0.0.0)."""
    import psutil
    client, info = connected
    collnb.launch(_where_am_i, 4)
    port = remote._connection.port
    assert port and port != 29500
    listening = [c for c in psutil.Process(info[0]["pid"]).net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN]
    assert listening, "rank 0 hosts no listening socket"
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}, listening
    assert port in {c.laddr.port for c in listening}


def _cell_defined(rank, world_size, scale):
    t = torch.full((3,), float(rank + 1)) * scale
    print(f"contributing {t.tolist()}")
    dist.all_reduce(t)
    return {"sum": t, "rank": rank}


def test_cell_functions_prints_and_results(connected, capsys):
    out = collnb.launch(_cell_defined, 4, args=(2.0,))
    assert [o["rank"] for o in out] == [0, 1, 2, 3]
    for o in out:
        assert torch.equal(o["sum"], torch.full((3,), 20.0))  # 2 * (1+2+3+4)
    text = capsys.readouterr().out
    for r in range(4):
        assert f"[rank {r}] contributing {[2.0 * (r + 1)] * 3}" in text


def test_closure_defined_here_works(connected):
    offset = 7

    def f(rank, world_size):
        t = torch.tensor([rank + offset])
        dist.all_reduce(t)
        return int(t)

    assert collnb.launch(f, 3) == [3 * 7 + 3] * 3


def _records_and_marks(rank, world_size):
    t = torch.ones(4)
    with collnb.region("step"):
        dist.all_reduce(t)
        if rank == 0:
            dist.send(t, 1)
        elif rank == 1:
            dist.recv(t, 0)
    return float(t[0])


def test_engines_record_calls_and_timelines_as_local_ranks_do(connected):
    """The engines run a call through the same steps and instruments as local ranks
    (collnb.ranks.instrument.interface): the records and the timeline come back the same way."""
    got = collnb.launch(_records_and_marks, 2, record_calls=True, timeline=True)
    assert list(got) == [2.0, 2.0]
    assert [[(c.name, c.peer, c.group_ranks) for c in calls] for calls in got.calls] == [
        [("all_reduce", None, (0, 1)), ("send", 1, (0, 1))], [("all_reduce", None, (0, 1)), ("recv", 0, (0, 1))]]
    assert [calls.unrecorded for calls in got.calls] == [0, 0]
    tl = got.timeline
    assert tl.clock == CLOCK and tl.world_size == 2  # one host: one clock
    assert [(s.rank, s.name) for s in tl.operations()] == [(0, "all_reduce"), (0, "send"), (1, "all_reduce"),
                                                          (1, "recv")]
    # the send/recv completion is told by torch.distributed's wrappers, installed on engines too
    assert all(s.completed and s.start <= s.end and s.ready >= s.start for s in tl.operations())
    assert [(s.rank, s.name) for s in tl.regions()] == [(0, "step"), (1, "step")]
    plain = collnb.launch(_records_and_marks, 2)
    assert plain == [2.0, 2.0] and not hasattr(plain, "timeline")  # off by default


def test_engines_on_several_hosts_align_their_clocks_at_a_barrier(connected, monkeypatch):
    """What Engines.accept asks when the engines run on several hosts (all are local here, so the
    test asks it itself): every rank leaves one barrier before the function and the timeline puts
    the ranks' clocks together there; the barrier is collnb's, not among the learner's records."""
    accept = remote.Engines.accept

    def on_two_hosts(self, plan):
        plan = accept(self, plan)
        return dataclasses.replace(plan, instruments=dataclasses.replace(plan.instruments, align_clocks=True))

    monkeypatch.setattr(remote.Engines, "accept", on_two_hosts)
    got = collnb.launch(_records_and_marks, 2, record_calls=True, timeline=True)
    assert [[c.name for c in calls] for calls in got.calls] == [["all_reduce", "send"], ["all_reduce", "recv"]]
    tl = got.timeline
    assert tl.clock == ALIGNED and tl.raw[0]["aligned_ns"] == tl.raw[1]["aligned_ns"]
    assert all(s.completed and s.start <= s.end and s.ready >= s.start for s in tl.operations())


def _uneven_a2a(rank, world_size, short):
    out = torch.full((2 * world_size,), -1.0)
    splits = [1] + [2] * (world_size - 1) if (short and rank == 1) else [2] * world_size
    dist.all_to_all_single(out, torch.ones(sum(splits)), [2] * world_size, splits)
    return out.tolist()


def _fr_buffer(rank, world_size):
    return os.environ.get("TORCH_FR_BUFFER_SIZE")


def test_engines_flight_recorder_names_the_rank_whose_collective_differed(connected):
    """flight_recorder=N on engines: their groups are made with TORCH_FR_BUFFER_SIZE=N and each
    engine sends its entries of the call with its answer; a call whose ranks all returned although
    their collectives differed (gloo does not check an all_to_all's sizes) names the culprit."""
    assert collnb.launch(_fr_buffer, 3, flight_recorder=50, debug=False) == ["50"] * 3
    with pytest.raises(collnb.RankError, match=r"^rank 1: CollectiveMismatch: its collective_seq_id \d+ in the "
                       r"default group differs") as info:
        collnb.launch(_uneven_a2a, 3, (True,), flight_recorder=50, debug=False)
    assert info.value.rank == 1 and info.value.results[0][2] == 1.0
    # the next call is judged on its own entries
    assert collnb.launch(_uneven_a2a, 3, (False,), flight_recorder=50, debug=False)[0] == [1.0] * 6


def _rank_1_returns_early(rank, world_size):
    if rank == 0:
        dist.all_reduce(torch.ones(2))


def test_engines_keep_the_backends_log_for_the_error_or_show_it(connected, capfd):
    """The engines copy their fds 1 and 2 into ipyparallel's output while a call runs, so gloo's C++
    log lines reach the kernel: kept out of the cell and attached to the error, or printed with
    show_backend_log=True, as for local ranks."""
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_rank_1_returns_early, 2, collective_timeout=1)
    out, err = capfd.readouterr()
    assert "ProcessGroupGloo.cpp" not in out + err
    log = info.value.backend_log
    assert log and all(line.startswith("[rank 0] ") for line in log)
    assert any("ProcessGroupGloo.cpp" in line for line in log)
    assert f"({len(log)} line" in str(info.value) and "err.backend_log" in str(info.value)
    with pytest.raises(collnb.RankError) as shown:
        collnb.launch(_rank_1_returns_early, 2, collective_timeout=1, show_backend_log=True)
    assert "ProcessGroupGloo.cpp" in capfd.readouterr().err and shown.value.backend_log == []


@pytest.mark.parametrize("ws", [4, 3])
def test_every_primitive_matches_the_reference_and_local_ranks(connected, ws):
    cfgs = [dict(primitive=p) for p in collnb.PRIMITIVES]
    cfgs += [dict(primitive="all_reduce", op="max", dtype="int32"), dict(primitive="reduce", root=ws - 1),
             dict(primitive="broadcast", root=1, dtype="float64")]
    on_engines = collnb.run_batch(cfgs, world_size=ws)
    collnb.disconnect()
    local = collnb.run_batch(cfgs, world_size=ws)
    for cfg, e, loc in zip(cfgs, on_engines, local):
        assert e.ok, (cfg, e.summary())
        if cfg["primitive"] == "barrier":
            continue  # measured times
        for r in range(ws):
            a, b = e.after[r], loc.after[r]
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b), (cfg, r, a, b)
            else:
                assert a == b, (cfg, r, a, b)


def test_explorer_algorithms_and_calibrate_run_on_engines(connected, fresh_pool):
    client, info = connected  # no local ranks (fresh_pool): any that appear were started by this test
    engine_pids = {d["pid"] for d in info}
    ex = collnb.explore("all_reduce", world_size=3)
    try:
        ex.wait()
        assert ex.error is None and "✓" in ex.message, ex.message
        ex.controls["world_size"].value = 4
        ex.wait()
        assert ex.error is None and "✓" in ex.message, ex.message
        assert ex.last_result.world_size == 4
    finally:
        ex.close()
    trace = collnb.run_algorithm("all_reduce", "ring", world_size=4)
    assert trace.matches_builtin
    assert trace.final.tolist() == [[60.0, 64.0, 68.0, 72.0]] * 4  # sum over ranks of 10*r + c
    model = collnb.costmodel.calibrate(sizes=(8, 1 << 16), repeats=2)
    assert model.alpha > 0 and model.beta > 0
    # all of it ran on the engines: no local rank was started
    assert collnb.ranks.warm_pool() is None
    assert len(engine_pids) == 4


def _fails_on_rank_2(rank, world_size):
    t = torch.ones(2)
    if rank == 2:
        raise ValueError(f"rank {rank} refuses")
    dist.all_reduce(t)
    return t


def test_a_failing_engine_is_one_rank_error_and_the_next_call_works(connected):
    with pytest.raises(collnb.RankError) as info:
        collnb.launch(_fails_on_rank_2, 4, collective_timeout=3)
    err = info.value
    assert err.rank == 2 and err.exc_type == "ValueError"
    assert str(err).startswith("rank 2: ValueError: rank 2 refuses")
    assert "_fails_on_rank_2" in err.rank_traceback and 'raise ValueError(f"rank {rank} refuses")' in err.rank_traceback
    assert err.outcomes[2].startswith("ValueError")
    # the others were stopped (by collnb, or their wait ended by rank 2's failure), none waited for a timeout
    assert all("stopped by collnb" in err.outcomes[r] or "follows the root cause" in err.outcomes[r]
               for r in (0, 1, 3)), err.outcomes
    # the process group is rebuilt: the next call works on the same engines
    assert collnb.launch(_sum_ranks, 4) == [torch.tensor([6.0])] * 4


def _sum_ranks(rank, world_size):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t


def _sleepy(rank, world_size):
    print("sleeping", flush=True)
    time.sleep(3600)  # longer than the module's pytest timeout: only a stop ends it within the test
    return rank


def test_interrupt_stops_the_call_on_every_engine(connected):
    client, info = connected
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):  # the launch's own timeout (3600 s) is not what ended it
            collnb.launch(_sleepy, 4, timeout=3600)
    finally:
        timer.cancel()
    # every engine is free again (an engine still in the hour's sleep would answer only after it; the
    # module's pytest timeout is the hang guard)
    assert client[:].apply_sync(os.getpid) == [d["pid"] for d in info]
    assert [float(x) for x in collnb.launch(_sum_ranks, 4)] == [6.0] * 4


def test_timeout_names_the_ranks_and_where_they_were(connected):
    def late(rank, world_size):
        if rank == 1:
            time.sleep(120)
        return rank

    with pytest.raises(collnb.LaunchTimeout) as info:
        collnb.launch(late, 3, timeout=4)
    assert info.value.pending == [1]
    assert "time.sleep(120)" in str(info.value) or "in late" in str(info.value)
    assert collnb.launch(_sum_ranks, 3) == [torch.tensor([3.0])] * 3


def test_disconnect_leaves_engines_usable_and_reconnect_works(cluster):
    cl, client = cluster
    collnb.connect(client)
    assert collnb.launch(_sum_ranks, 4) == [torch.tensor([6.0])] * 4
    import psutil
    port, host_pid = remote._connection.port, remote._connection.infos[0]["pid"]
    listening = lambda: {c.laddr.port for c in psutil.Process(host_pid).net_connections(kind="tcp")  # noqa: E731
                         if c.status == psutil.CONN_LISTEN}
    assert port in listening()  # the store listens between calls, as long as collnb is connected (README)
    collnb.disconnect()
    deadline = time.monotonic() + 60  # a hang guard: the loop ends as soon as the port is closed
    while port in listening() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert port not in listening()  # ... and no longer once disconnected
    assert not remote.connected() and launcher.active_rank_set() is LOCAL
    # the engines hold no process group any more and answer other work
    assert client[:].apply_sync(dist.is_initialized) == [False] * 4
    assert client[:].apply_sync(os.getenv, "GLOO_SOCKET_IFNAME") == [None] * 4
    # local ranks again
    assert collnb.launch(_where_am_i, 2)[0][0] not in client[:].apply_sync(os.getpid)
    # reconnect, through the Cluster object this time
    collnb.connect(cl)
    assert collnb.launch(_sum_ranks, 4) == [torch.tensor([6.0])] * 4
    collnb.disconnect()


def test_bad_arguments_are_refused(cluster):
    with pytest.raises(TypeError, match="ipyparallel.Cluster or ipyparallel.Client"):
        collnb.connect("localhost")
    cl, client = cluster
    collnb.connect(client)
    try:
        with pytest.raises(RuntimeError, match="NCCL needs CUDA GPUs and the engine of rank 0"):
            collnb.launch(_sum_ranks, 2, backend="nccl")
        with pytest.raises(NotImplementedError, match="start_method='fork' is not supported on ipyparallel engines"):
            collnb.launch(_sum_ranks, 2, start_method="fork")
    finally:
        collnb.disconnect()


def _clean_state_probe(rank, world_size):
    return torch.get_default_dtype(), torch.is_grad_enabled(), os.environ.get("COLLNB_PROBE")


def _changes_state(rank, world_size):
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    os.environ["COLLNB_PROBE"] = "left over"
    return rank


def _patches_all_reduce(rank, world_size):
    if rank == 1:
        dist.all_reduce = lambda t, *a, **k: t.mul_(0)
    return rank


@pytest.mark.slow
def test_engines_are_put_back_after_each_call_and_a_changed_one_refuses_calls(capfd):
    """On a cluster of its own: the engine that gets a replaced torch function stays changed."""
    own = ipp.Cluster(n=2, log_level=40)
    client = None
    try:
        engines = collnb.connect(own)  # a Cluster not started yet: connect starts it (controller + 2 engines, waited for)
        client = remote._connection.client
        assert len(engines) == 2 and sorted(client.ids) == [d["engine"] for d in engines]
        fresh = collnb.launch(_clean_state_probe, 2)
        assert fresh == [(torch.float32, True, None)] * 2
        collnb.launch(_changes_state, 2)
        assert collnb.launch(_clean_state_probe, 2) == fresh  # put back, as on local ranks
        capfd.readouterr()
        assert collnb.launch(_patches_all_reduce, 2) == [0, 1]
        err = capfd.readouterr().err
        assert "[collnb] the last call replaced torch.distributed.all_reduce on rank(s) 1" in err, err
        with pytest.raises(collnb.RankError) as info:
            collnb.run("all_reduce", world_size=2)  # collnb's own tools never run on the changed engine
        assert str(info.value).startswith("rank 1: EngineChanged: an earlier call replaced "
                                          "torch.distributed.all_reduce in this engine"), str(info.value)
        assert "cluster.restart_engines_sync()" in str(info.value)
    finally:
        collnb.disconnect()
        if client is not None:
            client.close()
        own.stop_cluster_sync()


def _killed_mid_call(rank, world_size):
    t = torch.ones(4)
    if rank == 2:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(t)
    return t


@pytest.mark.slow
def test_a_killed_engine_is_named(connected):
    """Runs last in this file, on the module's cluster, which it spends: the killed engine does not come
    back (the module's teardown stops the cluster). Rank 2 dies mid-call: a RankError naming it, not the
    launch's LaunchTimeout at 120 s, says the death was seen while the others waited (the module's pytest
    timeout is the hang guard)."""
    client, info = connected
    with pytest.raises(collnb.RankError) as exc:
        collnb.launch(_killed_mid_call, 4, collective_timeout=5, timeout=120)
    print(f"killed engine named:\n{exc.value}")
    err = exc.value
    assert err.rank == 2 and err.exc_type == "Killed", str(err)
    assert f"pid {info[2]['pid']}" in str(err)
    with pytest.raises(collnb.LaunchError, match="no longer part of the cluster"):
        collnb.launch(_sum_ranks, 2)
