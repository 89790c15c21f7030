"""NCCL on CUDA GPUs: every NCCL path collnb has, at every world size the GPUs allow.

Marked ``gpu``: skipped with the reason where torch sees no CUDA (``make test PYTEST_ARGS="-m gpu"``
on a GPU machine runs them). The refusals at the end need no GPU: they run everywhere.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import collnb
from collnb.ranks.local import rankset as local_rankset
from collnb.ranks.remote import connection as remote
import collnb.collectives as P

NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
WHY = (f"no CUDA GPU visible to torch {torch.__version__} (cuda={torch.version.cuda}); "
       "NCCL tests need at least one")
gpu = [pytest.mark.gpu, pytest.mark.skipif(NGPU == 0, reason=WHY)]
SIZES = [n for n in (1, 2, 3, 4, 8) if n <= NGPU] or [1]


def _on_gpu(rank, world_size):
    t = torch.full((4,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    return torch.cuda.current_device(), t.device.type, dist.get_backend(), t


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.gpu
@pytest.mark.skipif(NGPU == 0, reason=WHY)
def test_launch_puts_rank_r_on_cuda_r(ws):
    out = collnb.launch(_on_gpu, ws, backend="nccl", start_method="spawn")
    for r, (dev, kind, backend, t) in enumerate(out):
        assert (dev, kind, backend) == (r, "cuda", "nccl")
        assert t.device.type == "cpu" and torch.equal(t, torch.full((4,), ws * (ws + 1) / 2))


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.gpu
@pytest.mark.skipif(NGPU == 0, reason=WHY)
def test_every_primitive_nccl_supports_matches_the_reference(ws):
    sup = collnb.backend_support("nccl", start_method="spawn")
    cfgs = []
    for prim in sup.primitives():
        spec = P.SPECS[prim]
        if spec.kind != "tensor":
            cfgs.append(dict(primitive=prim))  # object collectives and barrier
            continue
        for dt in sup.dtypes(prim):
            cfgs.append(dict(primitive=prim, dtype=dt))
    results = collnb.run_batch(cfgs, world_size=ws, backend="nccl", start_method="spawn")
    bad = [(c, r.summary()) for c, r in zip(cfgs, results) if not r.ok]
    assert not bad, bad
    # the object collectives ran with the rank's own GPU as their device
    assert any(c["primitive"] == "broadcast_object_list" for c in cfgs)


@pytest.mark.parametrize("ws", [n for n in SIZES if n >= 2] or [2])
@pytest.mark.gpu
@pytest.mark.skipif(NGPU < 2, reason=WHY if NGPU == 0 else f"only {NGPU} GPU: send/recv needs 2")
def test_algorithms_on_send_recv_over_nccl(ws):
    cases = [dict(primitive=p, algorithm=a, snapshots=False) for p, algos in collnb.ALGORITHMS.items()
             for a in algos]
    traces = collnb.run_algorithms(cases, ws, backend="nccl")
    bad = [(c["primitive"], c["algorithm"], t.mismatches()[:3]) for c, t in zip(cases, traces)
           if not t.matches_builtin]
    assert not bad, bad


@pytest.mark.gpu
@pytest.mark.skipif(NGPU < 2, reason=WHY if NGPU == 0 else f"only {NGPU} GPU: a ping-pong needs 2")
def test_calibrate_times_gpu_transfers():
    model = collnb.costmodel.calibrate(backend="nccl")
    assert model.alpha > 0 and model.beta > 0


@pytest.mark.gpu
@pytest.mark.cluster
@pytest.mark.skipif(NGPU < 2, reason=WHY if NGPU == 0 else f"only {NGPU} GPU")
def test_nccl_script_under_torchrun(tmp_path):
    from collnb.labs.script import script_text
    path = tmp_path / "ar.py"
    path.write_text(script_text("all_reduce", backend="nccl"))
    # torchrun's own temp folder (torchelastic_*, never removed) goes under tmp_path, not the machine's /tmp
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 after: [10.0, 12.0]" in proc.stdout and "rank 1 after: [10.0, 12.0]" in proc.stdout


@pytest.mark.gpu
@pytest.mark.cluster
@pytest.mark.skipif(NGPU < 2, reason=WHY if NGPU == 0 else f"only {NGPU} GPU")
def test_nccl_on_ipyparallel_engines_uses_local_rank_devices():
    ipp = pytest.importorskip("ipyparallel")
    cluster = ipp.Cluster(n=2, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(2, timeout=180)
        info = collnb.connect(client)
        assert [d["local_rank"] for d in info] == [0, 1]
        out = collnb.launch(_on_gpu, 2, backend="nccl")
        assert [o[0] for o in out] == [0, 1] and all(o[2] == "nccl" for o in out)
        assert collnb.run("all_reduce", world_size=2, backend="nccl").ok
        with pytest.raises(ValueError, match="world_size must be an int from 1 to 2"):
            collnb.launch(_on_gpu, 3, backend="nccl")
    finally:
        collnb.disconnect()
        client.close()
        cluster.stop_cluster_sync()


# ----------------------------------------------------------------------------------------------
# Refusals: no GPU needed


def test_nccl_without_cuda_is_refused_not_run_on_gloo(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    info = collnb.backend_info("nccl")
    assert not info["available"] and "NCCL needs CUDA GPUs" in info["reason"]
    with pytest.raises(RuntimeError, match="NCCL needs CUDA GPUs"):
        collnb.launch(_on_gpu, 2, backend="nccl")


def test_more_ranks_than_gpus_is_refused_before_any_rank_starts(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(local_rankset, "RankPool", None)  # any attempt to start ranks would fail loudly
    words = (r"world_size must be an int from 1 to 2 \(NCCL puts one rank per GPU and 2 are visible; "
             r"use backend='gloo' for more ranks\); got 3")
    # the same request gets the same answer from every entry point that starts ranks
    for start in (lambda: collnb.launch(_on_gpu, 3, backend="nccl"),
                  lambda: collnb.run("all_reduce", world_size=3, backend="nccl"),
                  lambda: collnb.run_batch([dict(primitive="all_reduce")], world_size=3, backend="nccl"),
                  lambda: collnb.bench.bench("all_reduce", world_sizes=(2, 3), sizes="1K", backend="nccl")):
        with pytest.raises(ValueError, match=words):
            start()


def _infos(hosts, gpus, addrs=None):
    return [dict(host=h, pid=100 + i, cuda=g, torch=torch.__version__, nccl=True, gloo=True,
                 addrs=(addrs[i] if addrs else [("lo", "127.0.0.1", "255.0.0.0")]))
            for i, (h, g) in enumerate(zip(hosts, gpus))]


def _conn(infos):
    conn = object.__new__(remote.Engines)
    conn.infos, conn.ids = infos, list(range(len(infos)))
    hosts = [i["host"] for i in infos]
    conn.local_ranks = [hosts[:r].count(h) for r, h in enumerate(hosts)]
    return conn


def test_engines_get_local_ranks_by_host_and_nccl_is_limited_by_each_hosts_gpus():
    conn = _conn(_infos(["a", "a", "b", "b"], [2, 2, 2, 2]))
    assert conn.local_ranks == [0, 1, 0, 1]
    assert conn.backend_info("nccl")["max_world_size"] == 4
    # three engines on a host with two GPUs: ranks 0..1 fit, rank 2 would share a GPU
    crowded = _conn(_infos(["a", "a", "a", "b"], [2, 2, 2, 2]))
    info = crowded.backend_info("nccl")
    assert info["max_world_size"] == 2 and "host a has 2 GPU(s) but runs more engines" in info["reason"]
    none = _conn(_infos(["a", "b"], [1, 0]))
    assert not none.backend_info("nccl")["available"]
    assert "engine of rank 1 (host b) sees none" in none.backend_info("nccl")["reason"]


def test_rendezvous_interface_is_the_network_the_engines_share():
    lo = ("lo", "127.0.0.1", "255.0.0.0")
    infos = _infos(["n1", "n2", "n2"], [0, 0, 0], addrs=[
        [lo, ("eth0", "192.0.2.10", "255.255.255.0"), ("ib0", "198.51.100.1", "255.255.255.0")],
        [lo, ("ib0", "198.51.100.2", "255.255.255.0")],
        [lo, ("ib0", "198.51.100.2", "255.255.255.0")]])
    assert remote._choose_interface(infos) == ("198.51.100.1", ["ib0", "ib0", "ib0"])
    same_host = _infos(["n1", "n1"], [0, 0], addrs=[[lo, ("eth0", "192.0.2.10", "255.255.255.0")]] * 2)
    assert remote._choose_interface(same_host) == ("127.0.0.1", ["lo", "lo"])
    apart = _infos(["n1", "n2"], [0, 0], addrs=[[lo, ("eth0", "192.0.2.10", "255.255.255.0")],
                                                [lo, ("eth0", "203.0.113.5", "255.255.255.0")]])
    with pytest.raises(RuntimeError, match="share no IPv4 network"):
        remote._choose_interface(apart)
