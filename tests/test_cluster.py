"""The virtual cluster (collnb.labs.cluster): network namespaces as nodes, the inter-node link shaped
by tbf, real gloo ranks on them; values of the hierarchical all_reduce, the link rates measured
(ratios, no wall-clock limits), namespaces, processes and files gone after every kind of exit, and
the sweep of a dead process's leftovers. The tests that make namespaces skip, with the reason,
where this process may not (not root / no CAP_NET_ADMIN)."""

from __future__ import annotations

import glob
import os
import subprocess
import tempfile

import numpy as np
import psutil
import pytest

import collnb
from collnb.labs import cluster as cl
from collnb.labs.cluster import network, virtual
from collnb.labs.cluster.exercise import FRAMES

OK, WHY = cl.available()
needs_namespaces = pytest.mark.skipif(not OK, reason=WHY or "network namespaces are available")
ASKED_GBPS = 0.4  # 400 Mbit/s


def _host_links() -> str:
    """The host namespace's links (names and state), read only: the cluster must not change them."""
    out = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    return "\n".join(sorted(line.split()[0] + " " + line.split()[1] for line in out.splitlines() if line.strip()))


def _children() -> set:
    """This process's descendants (pids). Other tests' warm rank pools may be alive in the same
    pytest process, so a launch is checked to leave none *of its own*: the set after equals the set
    before."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _scratch_dirs() -> set:
    """This process's clusters' rank folders (``collnb-cluster-<pid>-*``): other sessions' clusters
    share the temporary folder, and their folders come and go while a test runs."""
    return set(glob.glob(os.path.join(tempfile.gettempdir(), f"collnb-cluster-{os.getpid()}-*")))


@pytest.fixture(scope="module")
def cluster():
    with cl.VirtualCluster(nodes=2, ranks_per_node=2, inter_gbps=ASKED_GBPS) as c:
        yield c


def _where(rank, world_size):
    return rank, int(os.environ["NODE_RANK"]), os.readlink("/proc/self/ns/net"), os.environ["GLOO_SOCKET_IFNAME"]


def _raise_on_2(rank, world_size):
    import torch
    import torch.distributed as dist
    if rank == 2:
        raise ValueError("rank 2 says no")
    dist.all_reduce(torch.ones(1))  # the others wait in a collective the culprit never joins


def _sleep(rank, world_size):
    import time
    time.sleep(600)


# -- the model (no namespaces needed) ---------------------------------------------------------

def test_the_tier_model_prices_the_flat_ring_on_the_inter_tier_and_the_hierarchy_per_tier():
    m = cl.TierModel.from_rates(2, 2, intra_gbps=16.0, inter_gbps=0.8, inter_latency_ms=1.0, alpha=1e-4, gamma=1e-10)
    nbytes = 1 << 24
    b_in, b_out, a_in, a_out, g = 8 / 16e9, 8 / 0.8e9, 1e-4, 1e-4 + 1e-3, 1e-10
    p = 4
    assert m.flat(nbytes) == pytest.approx(2 * (p - 1) * a_out + 2 * (p - 1) / p * nbytes * b_out
                                           + (p - 1) / p * nbytes * g)
    # reduce_scatter(L=2) + all_reduce(N=2, m/2, beta * 2: two streams share a link) + all_gather(L=2)
    rs = a_in + nbytes / 2 * (b_in + g)
    ar = 2 * a_out + 2 * 0.5 * (nbytes / 2) * (2 * b_out) + 0.5 * (nbytes / 2) * g
    ag = a_in + nbytes / 2 * b_in
    assert m.hierarchical(nbytes) == pytest.approx(rs + ar + ag)
    assert m.flat(nbytes) / m.hierarchical(nbytes) > 1.3  # 1.5 m b_out against ~1 m b_out + intra


def test_with_one_rank_per_node_the_hierarchy_is_the_flat_ring():
    m = cl.TierModel.from_rates(4, 1, intra_gbps=10.0, inter_gbps=1.0)
    assert m.hierarchical(1 << 20) == pytest.approx(m.flat(1 << 20))
    with pytest.raises(ValueError, match="> 0 Gbit/s"):
        cl.TierModel.from_rates(2, 2, intra_gbps=0, inter_gbps=1.0)


def test_bad_arguments_are_refused_before_any_namespace_is_made():
    with pytest.raises(ValueError, match="inter_gbps must be > 0"):
        cl.VirtualCluster(2, 2, inter_gbps=-1)
    with pytest.raises(ValueError, match="inter_latency_ms"):
        cl.VirtualCluster(2, 2, inter_gbps=1, inter_latency_ms=-3)
    with pytest.raises(ValueError, match="nodes"):
        cl.VirtualCluster(300, 1, inter_gbps=1)
    with pytest.raises(cl.ClusterUnavailable, match="not entered"):
        cl.VirtualCluster(2, 2, inter_gbps=1).launch(_where)


def test_where_namespaces_cannot_be_made_it_says_why_in_one_line_or_is_modelled(monkeypatch, capsys):
    monkeypatch.setattr(virtual, "available", lambda: (False, "this process may not create network namespaces"))
    with pytest.raises(cl.ClusterUnavailable, match="may not create network namespaces"):
        with cl.VirtualCluster(2, 2, inter_gbps=1):
            pass
    with cl.VirtualCluster(2, 2, inter_gbps=1, require=False) as c:
        assert c.mode == "modelled" and "may not create" in c.why and c.namespaces == []
        with pytest.raises(cl.ClusterUnavailable, match="may not create"):
            c.launch(_where)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "modelled only" in err


def test_the_culprit_is_a_ranks_own_error_even_when_a_peers_connection_error_came_first(tmp_path):
    """A peer's "Connection closed by peer" can land before the error that caused it (a loaded
    machine): the rank whose own code raised is blamed, then a rank that died without an answer;
    with only communication errors, the earliest. The cluster reads its ranks' answers into the one
    blame every rank set shares (collnb.ranks.conclude)."""
    import pickle

    from collnb.ranks import Failed, RankError, RankExit, conclude

    class Done:  # a finished process (exit status 1)
        def poll(self):
            return 1

    def write(rank, when, comm, text):
        exc_type, _sep, message = text.partition(": ")
        (tmp_path / f"result-7-{rank}.pkl").write_bytes(pickle.dumps((when, Failed(exc_type, message, [], comm))))

    def blamed():
        answers = {}
        c._answers(str(tmp_path), 7, [Done()] * 4, answers)
        with pytest.raises(RankError) as raised:
            conclude(range(4), answers, 5.0, "run", {})
        return answers, raised.value

    c = cl.VirtualCluster(nodes=2, ranks_per_node=2, inter_gbps=None)
    write(0, 10.0, True, "RuntimeError: Connection closed by peer")
    write(1, 10.5, True, "RuntimeError: Connection closed by peer")
    write(2, 11.0, False, "ValueError: rank 2 says no")
    write(3, 9.0, True, "RuntimeError: Connection closed by peer")
    _answers, err = blamed()
    assert (err.rank, err.exc_type) == (2, "ValueError") and str(err).startswith("rank 2: ValueError: rank 2 says no")
    (tmp_path / "result-7-2.pkl").unlink()  # rank 2 ended without an answer: it died
    answers, err = blamed()
    assert isinstance(answers[2], RankExit) and answers[2].exitcode == 1 and err.rank == 2
    write(2, 12.0, True, "RuntimeError: Connection reset by peer")
    assert blamed()[1].rank == 3


# -- real namespaces and ranks ----------------------------------------------------------------

@needs_namespaces
def test_ranks_run_in_their_nodes_namespace_bound_to_its_veth(cluster):
    assert cluster.mode == "emulated" and cluster.latency == "modelled"
    got = cluster.launch(_where)
    assert [g[0] for g in got] == [0, 1, 2, 3] and [g[1] for g in got] == [0, 0, 1, 1]
    assert got[0][2] == got[1][2] != got[2][2] == got[3][2]  # one network namespace per node
    assert got[0][2] != os.readlink("/proc/self/ns/net")
    assert {g[3] for g in got} == {network.INTERFACE}


@needs_namespaces
def test_the_shaped_link_keeps_to_its_rate_and_the_node_local_route_is_much_faster(cluster):
    link = cl.measure_link(cluster, nbytes=4 << 20, repeats=2, verbose=False)
    assert link.asked_gbps == ASKED_GBPS
    assert link.inter_gbps <= 1.2 * ASKED_GBPS, link
    assert link.intra_gbps > 5 * link.inter_gbps, link  # same node: lo, not the shaped veth
    assert "Gbit/s asked" in str(link)


@needs_namespaces
def test_hierarchical_and_flat_all_reduce_give_the_exact_sum_on_real_ranks(cluster):
    model = cl.TierModel.from_rates(2, 2, intra_gbps=10.0, inter_gbps=ASKED_GBPS)
    rows = cl.compare_all_reduce(cluster, sizes=(1 << 16, 1 << 20), repeats=1, model=model)
    assert [r.nbytes for r in rows] == [1 << 16, 1 << 20]
    assert all(r.correct for r in rows)
    assert all(r.flat_s > 0 and r.hierarchical_s > 0 and r.predicted_speedup > 0 for r in rows)
    assert "exact" in cl.format_comparison(rows)
    with pytest.raises(ValueError, match="multiple of 4 \\* ranks_per_node"):
        cl.compare_all_reduce(cluster, sizes=(6,))


@needs_namespaces
def test_a_rank_that_raises_is_named_and_nothing_is_left_behind(cluster):
    before, children = _scratch_dirs(), _children()
    with pytest.raises(cl.ClusterRankError, match="rank 2 \\(node 1\\)") as raised:
        cluster.launch(_raise_on_2, timeout=60)
    err = raised.value
    assert isinstance(err, collnb.RankError) and (err.rank, err.exc_type) == (2, "ValueError")
    assert 'raise ValueError("rank 2 says no")' in err.traceback and "in _raise_on_2" in err.traceback
    # the peers were waiting in the all_reduce rank 2 never joined: said as for local ranks
    assert all("waiting in all_reduce" in err.outcomes[r] for r in (0, 1, 3)), err.outcomes
    assert _children() <= children
    assert _scratch_dirs() <= before


def _debug_and_group(rank, world_size):
    import torch
    import torch.distributed as dist
    return dist.get_debug_level().name, type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__


def _summed(rank, world_size):
    import torch
    import torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    return float(t)


@pytest.mark.slow
@needs_namespaces
def test_a_rank_slow_to_start_costs_neither_the_group_timeout_nor_the_calls(tmp_path, monkeypatch):
    """A loaded run failed twice here: fresh ranks made their default group as soon as each had imported
    torch, so the first rank waited for a slower peer's import under the 5 s group timeout ("Wait timeout"
    in init_process_group), and the call's timeout counted the ranks' start as well. Now the ranks make the
    group when every one is up (DIR/up-RANK) and the call's time starts then. Rank 1 starts 30 s late here
    (a sitecustomize that sleeps, on the ranks' PYTHONPATH): a 15 s group timeout and a 25 s call timeout
    still give the sum (each well above what the call itself takes on a loaded machine, both below the
    delay)."""
    (tmp_path / "sitecustomize.py").write_text(  # once: the first Python started as rank 1 (the rank itself)
        "import os, time\n"
        "if os.environ.get('RANK') == '1' and os.environ.get('COLLNB_TEST_SLOW_START'):\n"
        "    try:\n"
        "        os.close(os.open(os.environ['COLLNB_TEST_SLOW_START'], os.O_CREAT | os.O_EXCL))\n"
        "    except FileExistsError:\n"
        "        pass\n"
        "    else:\n"
        "        time.sleep(30)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COLLNB_TEST_SLOW_START", str(tmp_path / "slept"))
    with collnb.cluster(2, 1, activate=True, quiet=True) as c:
        assert c.mode == "emulated"
        assert collnb.launch(_summed, c, timeout=25, collective_timeout=15) == [2.0, 2.0]
    assert (tmp_path / "slept").exists()  # rank 1 did start late
    # ranks that do not start within START_TIMEOUT_S are stopped, with the reason said
    from collnb.labs.cluster import virtual
    monkeypatch.setattr(virtual, "START_TIMEOUT_S", 2.0)
    (tmp_path / "slept").unlink()
    with collnb.cluster(2, 1, activate=True, quiet=True) as c:
        # (rank 1 sleeps 30 s, so it cannot be up; rank 0 may not be either on a loaded machine)
        with pytest.raises(virtual.ClusterTimeout, match=r"ranks? (0, )?1 had not started \(imported torch\) after "
                                                         r"2 s; every rank was stopped") as info:
            collnb.launch(_summed, c)
        assert info.value.pending in ([1], [0, 1]) and info.value.outcomes[1] == "not started"
        assert info.value.outcomes[0] == ("not started" if 0 in info.value.pending else "started")
        assert c._vc._procs == [] and c._vc._work is None  # stopped, their folder gone


def _mismatched_dtypes(rank, world_size):
    import torch
    import torch.distributed as dist
    dist.broadcast(torch.ones(3, dtype=torch.float32 if rank == 0 else torch.int64), 0)


@needs_namespaces
def test_debug_is_torchs_detail_check_on_the_clusters_ranks(cluster):
    """launch(debug=True), collnb.launch's default, is TORCH_DISTRIBUTED_DEBUG=DETAIL on a cluster's
    ranks as on local ones: a learner's mismatched collectives fail with torch's message; ranks of
    the other setting restart (torch reads it when a group is made)."""
    assert cluster.launch(_debug_and_group, debug=True) == [("DETAIL", "_ProcessGroupWrapper")] * 4
    with pytest.raises(cl.ClusterRankError, match="Detected mismatch between collectives"):
        cluster.launch(_mismatched_dtypes, debug=True, timeout=60)
    assert cluster.launch(_debug_and_group, debug=False) == [("OFF", "ProcessGroupGloo")] * 4
    assert cluster.launch(_debug_and_group) == [("OFF", "ProcessGroupGloo")] * 4  # None: as the warm ranks are
    with pytest.raises(TypeError, match="debug must be True or False; got 'yes'"):
        cluster.launch(_debug_and_group, debug="yes")


@needs_namespaces
def test_an_active_clusters_launches_take_debug_and_collnbs_own_runs_skip_its_wrapper():
    with collnb.cluster(2, 1, activate=True, quiet=True) as c:
        assert collnb.launch(_debug_and_group, c) == [("DETAIL", "_ProcessGroupWrapper")] * 2  # the default
        assert collnb.launch(_debug_and_group, c, debug=False) == [("OFF", "ProcessGroupGloo")] * 2
        # collnb.run (its rank entry marked same_on_every_rank) runs right under DETAIL, on the same
        # warm ranks as a learner's function that is still checked
        assert collnb.run("all_reduce", world_size=c, op="max").ok
        assert collnb.run("barrier", world_size=c).ok
        assert collnb.launch(_debug_and_group, c) == [("DETAIL", "_ProcessGroupWrapper")] * 2
        with pytest.raises(collnb.RankError, match="Detected mismatch between collectives"):
            collnb.launch(_mismatched_dtypes, c, timeout=60)
        assert collnb.run("all_reduce", world_size=c).ok


@needs_namespaces
def test_a_timeout_kills_every_rank_and_names_the_ones_running(cluster):
    children = _children()
    with pytest.raises(cl.ClusterTimeout, match="ranks 0, 1, 2, 3 were still running"):
        cluster.launch(_sleep, timeout=2)
    assert _children() <= children


@needs_namespaces
def test_namespaces_are_removed_on_exit_and_on_an_exception_and_the_host_is_untouched():
    host = _host_links()
    with cl.VirtualCluster(2, 1, inter_gbps=1.0) as c:
        names = c.namespaces
        assert set(names) <= set(network.namespaces())
    assert not set(names) & set(network.namespaces())
    with pytest.raises(KeyError):
        with cl.VirtualCluster(1, 1, inter_gbps=None) as c:
            names = c.namespaces + [c._network.switch]
            raise KeyError("boom")
    assert not set(names) & set(network.namespaces())
    assert _host_links() == host


@needs_namespaces
def test_the_next_start_sweeps_a_dead_processs_namespaces_and_spares_a_live_ones():
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = f"collnb-{dead.pid}-1-n0"
    alive = f"collnb-{os.getpid()}-999-n0"  # this process runs: never swept
    for name in (left, alive):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        with cl.VirtualCluster(1, 1, inter_gbps=None):
            names = network.namespaces()
            assert left not in names and alive in names
    finally:
        for name in (left, alive):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


# -- collnb.cluster ------------------------------------------------------------------------------

def test_links_are_read_the_way_a_learner_writes_them():
    assert cl.parse_link(None) == cl.Link(None)
    assert cl.parse_link(0.4).gbps == pytest.approx(0.4)
    assert cl.parse_link("400 Mbit/s").gbps == pytest.approx(0.4)
    assert cl.parse_link("10Gbit/s").gbps == pytest.approx(10.0)
    assert cl.parse_link("25 GB/s").gbps == pytest.approx(200.0)  # bytes: x 8
    assert cl.parse_link("1 Gbit/s, 50 us") == cl.Link(1.0, 50.0)
    assert cl.parse_link(("1 Gbit/s", "2 ms")) == cl.Link(1.0, 2000.0)
    assert str(cl.Link(0.4, 20.0)) == "400 Mbit/s, 20 µs"
    with pytest.raises(ValueError, match="inter='fast' is not a link speed: give Gbit/s as a number"):
        cl.parse_link("fast")
    with pytest.raises(ValueError, match="faster than 0 Gbit/s"):
        cl.parse_link("0 Gbit/s")
    with pytest.raises(TypeError, match="intra=True is not a link speed"):
        cl.parse_link(True, "intra")
    # every unit scales by its own factor: plain bit/s was multiplied by 1e9 instead of divided
    for text, gbps in (("1 bit/s", 1e-9), ("1000 bps", 1e-6), ("1 kbit/s", 1e-6), ("400mbit", 0.4), ("1 Gbit", 1.0),
                       ("2 Tbit/s", 2000.0), ("1 kB/s", 8e-6)):
        assert cl.parse_link(text).gbps == pytest.approx(gbps), text
    for bare in ("0.5", "400"):  # a string without a unit: Mbit/s or Gbit/s? (it was read as 1e9 Gbit/s)
        with pytest.raises(ValueError, match=f"inter='{bare}' has no unit: write '{bare} Mbit/s' or '{bare} Gbit/s'"):
            cl.parse_link(bare)
    for endless in (float("inf"), float("nan"), (1.0, float("inf"))):  # emulated: OverflowError in tc's numbers
        with pytest.raises(ValueError, match="is not a finite link speed"):
            cl.parse_link(endless)


def test_a_modelled_cluster_says_why_in_one_line_and_its_values_still_come_from_real_ranks(capsys):
    from collnb.labs.cluster.compare import compare_algorithms
    c = cl.cluster(2, 2, inter="400 Mbit/s", mode="modelled")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "modelled, timings predicted" in err
    assert c.mode == "modelled" and c.timings == "predicted" and int(c) == 4 and c.namespaces == []
    assert "modelled" in c.describe() and "predicted" in c.describe()
    cmp = compare_algorithms(c, "all_reduce", ["builtin", "ring", "hierarchical"], sizes=(4096,), repeats=1)
    assert cmp.timings == "predicted" and all(r.seconds is None and r.predicted_s > 0 and r.correct for r in cmp.rows)
    assert cmp.row("hierarchical", 4096).predicted_s < cmp.row("ring", 4096).predicted_s
    with pytest.raises(ValueError, match="mode must be one of emulated, modelled, real"):
        cl.cluster(2, 2, mode="virtual")
    with pytest.raises(ValueError, match="at most 16 fit"):
        cl.cluster(5, 4, mode="modelled")


def test_on_engines_the_node_map_comes_from_their_hosts(monkeypatch):
    from collnb.labs.cluster import clusters as cluster_module
    monkeypatch.setattr(cluster_module, "_engine_hosts", lambda: ["a", "a", "b", "b"])
    c = cl.cluster(None, None, inter="10 Gbit/s")
    assert (c.mode, c.nodes, c.ranks_per_node, c.timings) == ("real", 2, 2, "measured")
    with pytest.raises(ValueError, match="make 2 nodes x 2 ranks"):
        cl.cluster(4, 1)
    monkeypatch.setattr(cluster_module, "_engine_hosts", lambda: ["a", "b", "a", "b"])
    with pytest.raises(ValueError, match="not 2 equal runs of consecutive ranks"):
        cl.cluster(None, None)
    monkeypatch.setattr(cluster_module, "_engine_hosts", lambda: None)
    with pytest.raises(ValueError, match="collnb.connect"):
        cl.cluster(2, 2, mode="real")


def test_a_cluster_counts_as_its_world_size():
    import operator

    from collnb.vocabulary import check_world_size
    c = cl.cluster(2, 3, mode="modelled", quiet=True)
    assert operator.index(c) == 6 and int(c) == 6 and check_world_size(c) == 6 and c == 6 and c * 2 == 12
    assert c < 7 and c >= 6 and list(range(c)) == [0, 1, 2, 3, 4, 5]
    import pickle
    assert type(pickle.loads(pickle.dumps(c))) is int  # into a rank it travels as the number


def _pid(rank, world_size):
    import os
    return os.getpid()


@pytest.mark.slow
@needs_namespaces
def test_an_emulated_clusters_ranks_stay_warm_and_restart_after_a_failure():
    with cl.cluster(2, 2, inter="1 Gbit/s", intra="4 Gbit/s") as c:
        assert c.mode == "emulated" and c.timings == "measured" and len(c.namespaces) == 2
        for ns in c.namespaces:  # the node's loopback is shaped (the intra tier)
            qdisc = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", "lo"], capture_output=True, text=True).stdout
            assert "tbf" in qdisc and "rate 4Gbit" in qdisc
        first = c.launch(_pid)
        assert c.launch(_pid) == first  # the same processes: warm
        with pytest.raises(cl.ClusterRankError):
            c.launch(_raise_on_2, timeout=60)
        again = c.launch(_pid)
        assert set(again).isdisjoint(first)  # fresh ranks after the failure
        assert c.launch(_pid) == again
        # a call that changes a rank for good (a replaced torch function): the next call starts fresh ranks
        assert c.launch(_replaces_all_reduce) == again
        assert set(c.launch(_pid)).isdisjoint(again)
        names = c.namespaces
    assert not set(names) & set(network.namespaces())
    with pytest.raises(cl.ClusterUnavailable, match="closed"):
        c.launch(_pid)


@pytest.mark.slow
@needs_namespaces
def test_algorithms_on_a_cluster_are_exact_and_measured_beside_the_model(cluster):
    from collnb.labs.cluster.compare import compare_algorithms, run_algorithm
    cmp = compare_algorithms(cluster, "all_reduce", ["builtin", "ring", "hierarchical", "double_binary_tree", "ring_2d"],
                             sizes=(1 << 12, 1 << 16), repeats=1)
    assert {r.algorithm for r in cmp.rows} == {"builtin", "ring", "hierarchical", "double_binary_tree", "ring_2d"}
    assert all(r.correct and r.seconds > 0 and r.predicted_s > 0 for r in cmp.rows)
    assert "exact" in cmp.table() and "WRONG" not in cmp.table()
    for prim in ("all_gather", "reduce_scatter", "all_to_all"):
        rows = compare_algorithms(cluster, prim, ["builtin", "hierarchical"], sizes=(1 << 12,), repeats=1).rows
        assert all(r.correct for r in rows)
    trace = run_algorithm(cluster, "all_to_all", "hierarchical")
    assert trace.ranks_per_node == 2 and np.array_equal(trace.final, trace.builtin)
    assert all(r.seconds is not None for r in trace.rounds)


@needs_namespaces
def test_a_killed_process_leaves_no_namespace_behind():
    import signal
    import sys
    import time
    script = ("from collnb.labs.cluster import cluster\n"
              "c = cluster(2, 1, inter='1 Gbit/s', mode='emulated')\n"
              "print(' '.join(c.namespaces), flush=True)\n"
              "import time; time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        names = p.stdout.readline().split()
        assert len(names) == 2 and set(names) <= set(network.namespaces())
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    deadline = time.monotonic() + 30
    while set(names) & set(network.namespaces()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(names) & set(network.namespaces())


# -- the cluster as collnb's ranks, its pictures, its explorer and its exercise --------------------

def _where_and_sum(rank, world_size):
    import torch
    import torch.distributed as dist
    t = torch.ones(2) * rank
    dist.all_reduce(t)
    return os.readlink("/proc/self/ns/net"), os.environ.get("NODE_RANK"), t.tolist()


def _mesh(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    m = init_device_mesh("cpu", (2, 2), mesh_dim_names=("node", "local"))
    return m.get_group("local").size(), m.get_group("node").size(), m.get_local_rank("node")


@pytest.mark.slow
@needs_namespaces
def test_an_active_cluster_is_where_collnb_launches_and_run_and_device_mesh_go():
    host_ns = os.readlink("/proc/self/ns/net")
    with collnb.cluster(2, 2, inter="1 Gbit/s", activate=True) as c:
        got = collnb.launch(_where_and_sum, c)
        assert [g[1] for g in got] == ["0", "0", "1", "1"] and {tuple(g[2]) for g in got} == {(6.0, 6.0)}
        assert got[0][0] == got[1][0] != got[2][0] and host_ns not in {g[0] for g in got}
        assert collnb.run("all_reduce", world_size=c).ok
        trace = collnb.run_algorithm("all_reduce", "hierarchical", world_size=c, ranks_per_node=2)
        assert np.array_equal(trace.final, trace.builtin)
        assert collnb.launch(_mesh, 4) == [(2, 2, r // 2) for r in range(4)]
        assert [g[2] for g in collnb.launch(_where_and_sum, 2)] == [[1.0, 1.0]] * 2  # the first 2 ranks
        with pytest.raises(NotImplementedError, match="start_method= is not supported on a virtual cluster"):
            collnb.launch(_where_and_sum, 4, start_method="spawn")
        with pytest.raises(RuntimeError, match="gloo only"):
            collnb.launch(_where_and_sum, 4, backend="nccl")
        with pytest.raises(collnb.RankError) as raised:
            collnb.launch(_raise_on_2, 4, timeout=60)
        assert raised.value.rank == 2 and raised.value.exc_type == "ValueError"
    assert collnb.launch(_where_and_sum, 2)[0][0] == host_ns  # closed: back to this machine's ranks


def _records_and_marks(rank, world_size):
    import torch
    import torch.distributed as dist
    t = torch.ones(4)
    with collnb.region("step"):
        dist.all_reduce(t)
        if rank == 0:
            dist.send(t, 2)  # to the other node
        elif rank == 2:
            dist.recv(t, 0)
    return float(t[0])


def _uneven_a2a(rank, world_size, short):
    import torch
    import torch.distributed as dist
    out = torch.full((2 * world_size,), -1.0)
    splits = [1] + [2] * (world_size - 1) if (short and rank == 1) else [2] * world_size
    dist.all_to_all_single(out, torch.ones(sum(splits)), [2] * world_size, splits)
    return out.tolist()


def _fr_buffer(rank, world_size):
    return os.environ.get("TORCH_FR_BUFFER_SIZE")


def _backend_line(rank, world_size):
    # a line in c10's log format, written on fd 2 as torch's C++ code writes its log
    os.write(2, b"[rank%d]:[E1205 23:49:01.562631079 ProcessGroupGloo.cpp:2901] [Rank %d]: logged\n" % (rank, rank))
    if rank == 1:
        raise ValueError("rank 1 fails after the backend logged")


@pytest.mark.slow
@needs_namespaces
def test_a_clusters_ranks_take_every_instrument_as_local_ranks_and_engines_do(capfd):
    """The cluster's ranks run each call with the steps every collnb rank takes
    (collnb.ranks.instrument.interface): recorded calls, a timeline on one clock (the namespaces share
    this machine's monotonic clock), the Flight Recorder naming a rank whose collective differed, and
    the backend's C++ log kept for the error or shown."""
    from collnb.ranks.instrument.timeline import CLOCK
    with collnb.cluster(2, 2, inter="1 Gbit/s", activate=True):
        got = collnb.launch(_records_and_marks, 4, record_calls=True, timeline=True)
        assert list(got) == [4.0] * 4
        assert [[(c.name, c.peer, c.group_ranks) for c in calls] for calls in got.calls] == [
            [("all_reduce", None, (0, 1, 2, 3)), ("send", 2, (0, 1, 2, 3))], [("all_reduce", None, (0, 1, 2, 3))],
            [("all_reduce", None, (0, 1, 2, 3)), ("recv", 0, (0, 1, 2, 3))], [("all_reduce", None, (0, 1, 2, 3))]]
        assert [calls.unrecorded for calls in got.calls] == [0] * 4
        tl = got.timeline
        assert tl.clock == CLOCK and tl.world_size == 4
        assert sorted((s.rank, s.name) for s in tl.operations()) == [
            (0, "all_reduce"), (0, "send"), (1, "all_reduce"), (2, "all_reduce"), (2, "recv"), (3, "all_reduce")]
        # the send/recv completion is told by torch.distributed's wrappers, installed in these ranks too
        assert all(s.completed and s.start <= s.end and s.ready >= s.start for s in tl.operations())
        assert [(s.rank, s.name) for s in tl.regions()] == [(r, "step") for r in range(4)]
        plain = collnb.launch(_records_and_marks, 4)
        assert plain == [4.0] * 4 and not hasattr(plain, "calls")  # off by default
        # flight_recorder=N: fresh ranks whose groups are made with TORCH_FR_BUFFER_SIZE=N
        # (debug=False, as on local ranks and engines: DETAIL's wrapper is what the recorder would name)
        assert collnb.launch(_fr_buffer, 3, flight_recorder=50, debug=False) == ["50"] * 3
        with pytest.raises(collnb.RankError, match=r"^rank 1 \(node 0\): CollectiveMismatch: its collective_seq_id "
                           r"\d+ in the default group differs") as info:
            collnb.launch(_uneven_a2a, 3, (True,), flight_recorder=50, debug=False)
        assert info.value.rank == 1 and info.value.results[0][2] == 1.0
        assert collnb.launch(_uneven_a2a, 3, (False,), flight_recorder=50, debug=False)[0] == [1.0] * 6
        capfd.readouterr()
        with pytest.raises(collnb.RankError, match="rank 1 fails") as kept:
            collnb.launch(_backend_line, 4)
        out, err = capfd.readouterr()
        assert "ProcessGroupGloo.cpp" not in out + err
        assert sorted(kept.value.backend_log) == [
            f"[rank {r}] [rank{r}]:[E1205 23:49:01.562631079 ProcessGroupGloo.cpp:2901] [Rank {r}]: logged"
            for r in range(4)]
        assert "(4 lines logged by gloo's C++ code" in str(kept.value)
        with pytest.raises(collnb.RankError) as shown:
            collnb.launch(_backend_line, 4, show_backend_log=True)
        assert capfd.readouterr().err.count("ProcessGroupGloo.cpp:2901") == 4 and shown.value.backend_log == []


def _one_collective(rank, world_size, kind):
    import torch
    import torch.distributed as dist
    n = 1 << 18  # 1 MiB of float32
    pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # one rank of each node
    if kind == "all_reduce":
        dist.all_reduce(torch.ones(n))
    elif kind == "reduce_scatter":
        dist.reduce_scatter_tensor(torch.empty(n // 4), torch.ones(n))
    elif kind == "reduce_scatter pairs":
        dist.reduce_scatter_single(torch.empty(n // 2), torch.ones(n), group=pairs[rank % 2])
    elif kind == "all_gather":
        dist.all_gather_single(torch.empty(n), torch.ones(n // 4))
    elif kind == "all_to_all":
        dist.all_to_all_single(torch.empty(n), torch.ones(n))
    elif kind == "broadcast":
        dist.broadcast(torch.ones(n), 0)
    elif kind == "reduce":
        dist.reduce(torch.ones(n), 0)
    elif kind == "send" and rank in (0, 2):  # 0 -> 3 and 2 -> 1: each node sends one buffer across
        dist.send(torch.ones(n), 3 - rank)
    elif kind == "send":
        dist.recv(torch.empty(n), 3 - rank)


@pytest.mark.slow
@needs_namespaces
def test_the_estimate_prices_each_collective_as_gloo_sends_it_on_the_links():
    """node_traffic's estimate from the recorded calls (collnb.labs.cluster.traffic) against the
    nodes' eth0 counters, collective by collective, 1 MiB on 2 nodes x 2 ranks: equal within the
    frames' headers and the count's barriers. (gloo runs reduce_scatter as an all_reduce and
    all_gather as a ring: a direct exchange's estimate was off by 2x and 0.75x.)

    The counters count frames, so the bound is what the frames can cost at worst, not a share measured on
    an idle machine: every segment a full 1448-byte payload in a 1514-byte frame (FRAMES; an idle machine
    sends 64 KiB segments, a loaded one smaller), one 66-byte ACK frame for each segment the node received
    (the other node's bytes: two nodes), and 32 KiB for the count's barriers. A loaded run sent 3.6 % over
    the estimate where the old bound allowed 2 % + 32 KiB. The 2x and 0.75x errors stay far outside."""
    mib = 1 << 20
    want = {"all_reduce": [1.5, 1.5], "reduce_scatter": [1.5, 1.5], "reduce_scatter pairs": [2.0, 2.0],
            "all_gather": [0.75, 0.75], "all_to_all": [1.0, 1.0], "broadcast": [2.0, 0.0], "reduce": [0.75, 1.25],
            "send": [1.0, 1.0]}
    with cl.cluster(2, 2, inter="2 Gbit/s", mode="emulated") as c:
        for kind, per_node in want.items():
            t = cl.node_traffic(c, _one_collective, [(kind,)] * 4)
            assert t.estimated == [b * mib for b in per_node], kind
            received = t.estimated[::-1]  # two nodes: what one sends the other receives
            most = [e * FRAMES + r / 1448 * 66 + (32 << 10) for e, r in zip(t.estimated, received)]
            assert all(e <= s <= m for s, e, m in zip(t.sent, t.estimated, most)), (kind, t.sent, most)


def _replaces_all_reduce(rank, world_size):
    import torch.distributed as dist
    dist.all_reduce = lambda *args, **kwargs: None
    return os.getpid()


def test_a_real_clusters_nodes_are_the_connected_engines_hosts(monkeypatch):
    """collnb.cluster asks the ranks layer for the engines' hosts (collnb.ranks.connected_hosts)."""
    from collnb.labs.cluster import clusters as cluster_module
    from collnb.ranks.remote import connection

    class Engines:
        infos = [{"host": "a"}, {"host": "a"}, {"host": "b"}, {"host": "b"}]

    assert cluster_module._engine_hosts() is None
    monkeypatch.setattr(connection, "_connection", Engines())
    assert cluster_module._engine_hosts() == ["a", "a", "b", "b"]


def _png_colours(fig) -> int:
    import io

    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return len(Image.open(io.BytesIO(buf.getvalue())).convert("RGB").getcolors(1 << 16) or [])


def test_the_pictures_are_drawn_with_both_tiers_colours(tmp_path):
    from collnb.algorithms import run_algorithms
    from collnb.labs.cluster.pictures import INTER_COLOR, INTRA_COLOR
    c = cl.cluster(2, 2, inter="400 Mbit/s", mode="modelled", quiet=True)
    assert _png_colours(cl.cluster_figure(c)) > 20 and c._repr_png_()[:4] == b"\x89PNG"
    trace = run_algorithms([dict(primitive="all_reduce", algorithm="hierarchical", ranks_per_node=2)], 4)[0]
    fig = cl.round_figure(trace, 2, model=c.model(), cluster=c)
    from PIL import Image
    path = tmp_path / "r.png"
    fig.savefig(path)
    colours = Image.open(path).convert("RGB").getcolors(1 << 20)
    hexes = {"#%02X%02X%02X" % rgb for _n, rgb in colours}
    assert INTER_COLOR in hexes  # round 2 crosses nodes
    assert INTRA_COLOR in hexes  # the legend names the intra tier's colour
    strip = cl.tier_filmstrip(trace, tmp_path / "strip.png", model=c.model(), cluster=c)
    assert Image.open(strip).size[1] > Image.open(path).size[1]
    with pytest.raises(ValueError, match="no node map"):
        cl.round_figure(run_algorithms([dict(primitive="all_reduce")], 2)[0], 1)
    with pytest.raises(ValueError, match="end the file name with .png"):
        cl.tier_filmstrip(trace, tmp_path / "strip.gif")


def test_the_tier_replay_moves_round_by_round_and_shows_a_static_picture_for_the_book():
    """replay_tiers returned a bare VBox: the book showed its repr ("VBox(children=(HBox(...") where the
    round should be. Its player shows the round's figure, follows the slider and Play, and displays a
    static picture of the round shown above the live panel, whose own HTML is empty."""
    import base64

    from collnb.algorithms import run_algorithms
    c = cl.cluster(2, 2, inter="400 Mbit/s", mode="modelled", quiet=True)
    trace = run_algorithms([dict(primitive="all_reduce", algorithm="hierarchical", ranks_per_node=2)], 4)[0]
    player = cl.replay_tiers(trace, c.model(), c)
    assert isinstance(player, cl.TierReplay) and player.slider.max == trace.n_rounds >= 3
    assert player.current_round == 1 and player.image.value == player.png(1)[:] and player.png(1)[:4] == b"\x89PNG"
    player.play.value = 3  # Play moves the slider (jslink's work where no browser runs)
    assert player.current_round == 3 and player.image.value == player.png(3) != player.png(1)
    bundle = player.static_bundle()
    assert "collnb-static" in bundle["text/html"] and base64.b64decode(bundle["image/png"])[:4] == b"\x89PNG"
    assert f"round 3 of {trace.n_rounds}" in bundle["text/html"]  # the picture's alt text
    with pytest.raises(ValueError, match="no node map"):
        cl.replay_tiers(run_algorithms([dict(primitive="all_reduce")], 2)[0])
    with pytest.raises(ValueError, match="this trace ran on 4 ranks, 2 per node; the cluster given has 3 nodes of 1"):
        cl.replay_tiers(trace, cluster=cl.cluster(3, 1, mode="modelled", quiet=True))  # was KeyError: 3
    for wrong in (None, collnb.run("all_reduce", 2)):  # was AttributeError: ... 'ranks_per_node'
        with pytest.raises(TypeError, match="this takes a collnb.Trace"):
            cl.replay_tiers(wrong)


def test_the_explorer_runs_on_a_modelled_cluster_and_says_its_times_are_predicted():
    c = cl.cluster(2, 2, inter="400 Mbit/s", mode="modelled", quiet=True)
    ex = cl.explore_cluster(c, algorithm="ring", size=16 << 10)
    try:
        trace, model, used = ex.last_result
        assert used is c and trace.n_rounds == 6 and ex.last_png[:4] == b"\x89PNG"
        assert "predicts" in ex.last_picture.caption and "modelled" in ex.last_picture.caption
        assert ex.choices(ex.state)["round"] == [1, 2, 3, 4, 5, 6]
        ex.set(round=3).wait()  # a new round only: the same run, redrawn
        assert ex.last_result[0] is trace and ex.last_picture.attrs["round"] == 3
        ex.set(algorithm="hierarchical").wait()
        assert ex.last_result[0] is not trace and ex.last_result[0].n_rounds == 4 and ex.state.round <= 4
    finally:
        ex.close()
    assert c.mode == "modelled"  # a cluster it was given stays open


def _flat_answer(rank, world_size, x, ranks_per_node):
    import torch.distributed as dist
    dist.all_reduce(x)
    return x


def _hier_answer(rank, world_size, x, L):
    import torch
    import torch.distributed as dist
    intra = inter = None
    for n in range(world_size // L):
        g = dist.new_group(list(range(n * L, (n + 1) * L)))
        intra = g if rank // L == n else intra
    for l in range(L):
        g = dist.new_group(list(range(l, world_size, L)))
        inter = g if rank % L == l else inter
    shard = torch.empty(x.numel() // L)
    dist.reduce_scatter_single(shard, x, group=intra)
    dist.all_reduce(shard, group=inter)
    dist.all_gather_single(x, shard, group=intra)
    return x


def _wrong_answer(rank, world_size, x, ranks_per_node):
    return x


def _check_the_exercise(c, capsys):
    from collnb.labs.exercises import CheckFailed
    cl.check_tier_aware_all_reduce(lambda rank, world_size, x, ranks_per_node: None, c)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "collapsed cell" in out and "✓" not in out
    cl.check_tier_aware_all_reduce(_hier_answer, c)
    out = capsys.readouterr().out
    assert "✓ the exact sum on every rank" in out
    # the table: each rank's recorded calls and the bytes they sent across nodes (2 MiB: half of 4 MiB)
    assert out.count("reduce_scatter_single, all_reduce, all_gather_single  2 MiB") == 4
    with pytest.raises(CheckFailed, match="too many bytes crossed the node boundary") as flat:
        cl.check_tier_aware_all_reduce(_flat_answer, c)
    # in the flat ring 0 -> 1 -> 2 -> 3 -> 0 only ranks 1 and 3 send to another node: 2 (p-1)/p of 4 MiB each
    assert [line.split()[-2:] for line in str(flat.value).splitlines() if line.startswith("  ") and "all_reduce" in line] \
        == [["0", "B"], ["6", "MiB"], ["0", "B"], ["6", "MiB"]]
    with pytest.raises(CheckFailed, match="did not return the sum"):
        cl.check_tier_aware_all_reduce(_wrong_answer, c)
    with pytest.raises(CheckFailed, match="define it as"):
        cl.check_tier_aware_all_reduce(lambda rank: None, c)


def test_the_exercise_passes_only_a_schedule_that_sends_shards_across_nodes_modelled(capsys):
    _check_the_exercise(cl.cluster(2, 2, mode="modelled", quiet=True), capsys)


@pytest.mark.slow
@needs_namespaces
def test_the_exercise_passes_only_a_schedule_that_sends_shards_across_nodes_measured(capsys):
    with cl.cluster(2, 2, inter="2 Gbit/s", mode="emulated") as c:
        _check_the_exercise(c, capsys)
        traffic = cl.node_traffic(c, _flat_answer, [(__import__("torch").ones(1 << 16), 2)] * 4)
        assert traffic.measured and all(1.4 * (1 << 18) < b < 1.7 * (1 << 18) for b in traffic.sent)  # 1.5 m
        # the calls were recorded on the cluster's ranks (the count's barriers left out), and priced as
        # gloo runs them they make the same 1.5 m per node
        assert [[c.name for c in calls] for calls in traffic.calls] == [["all_reduce"]] * 4
        assert traffic.estimated == [1.5 * (1 << 18)] * 2


def test_a_comparison_or_run_refuses_sizes_it_cannot_run_before_any_rank_starts(monkeypatch):
    """compare_algorithms(c, sizes=[]) started the ranks, then raised Python's "min() arg is an empty
    sequence"; sizes=[1 << 46] reached the ranks' allocator; run_algorithm's nbytes=1 << 46 blamed
    chunk_size, which the learner never gave. Each is refused first, naming what was given."""
    from collnb.labs.cluster.compare import MAX_NBYTES, compare_algorithms
    c = cl.cluster(2, 2, inter="400 Mbit/s", mode="modelled", quiet=True)
    try:
        def no_launch(*a, **k):
            raise AssertionError("a rank started")
        monkeypatch.setattr(c, "launch", no_launch)
        with pytest.raises(ValueError, match=r"sizes is empty: give at least one size"):
            compare_algorithms(c, sizes=[])
        with pytest.raises(ValueError, match=r"algorithms is empty: give at least one of builtin, ring, .*hierarchical.*or None for all"):
            compare_algorithms(c, algorithms=[])
        with pytest.raises(ValueError, match=rf"nbytes must be an int from 32 to {MAX_NBYTES} \(bytes per rank\)"):
            compare_algorithms(c, sizes=[1 << 46])
        with pytest.raises(ValueError, match=rf"nbytes must be an int from 4 to {MAX_NBYTES} \(bytes per rank\)"):
            cl.run_algorithm(c, "all_reduce", "ring", nbytes=1 << 46)
    finally:
        c.close()


def test_a_closed_modelled_cluster_refuses_as_a_closed_emulated_one_does():
    """A modelled cluster kept launching after close() (its repr still said [modelled]); set_inter and
    activate were accepted too. Closed, it refuses each and says so in its repr."""
    c = cl.cluster(2, 2, inter="400 Mbit/s", mode="modelled", quiet=True)
    assert c.launch(lambda r, w: r) == [0, 1, 2, 3]
    c.close()
    c.close()  # twice is fine
    assert repr(c).endswith("[closed]")
    for use in (lambda: c.launch(lambda r, w: r), lambda: c.set_inter("1 Gbit/s"), c.activate, c.measure):
        with pytest.raises(cl.ClusterUnavailable, match="this cluster was closed: make a new one"):
            use()
    assert str(c.inter) == "400 Mbit/s"
