"""NCCL's tuning model as collnb re-implements it (collnb.labs.cluster.nccl, NVIDIA/nccl v2.30.7-1
src/graph/tuning.cc): latencies and bandwidths worked out by hand from tuning.cc's constants, the
choice and its crossovers, NCCL_ALGO/NCCL_PROTO as parseList reads them, busbw above one NIC as a
number, and NCCL's own printed lines read back."""

from __future__ import annotations

import pytest

from collnb.labs.cluster import nccl as N

RING = N.Graph(16, 24.0, 24.0, "NVL", "PIX", 4)


def _node(nodes=1, gpu="hopper", **kw):
    return N.System(nodes, 8, gpu, graphs={"Ring": RING, "Tree": N.Graph(16, 24.0, 24.0, "NVL", "PIX", 1)},
                    nvswitch=False, **kw)


def test_latency_and_bandwidth_are_tuning_ccs_by_hand():
    t = N.tune(_node())
    # Ring/Simple all_reduce, 1 node of 8: busBw = 16 ch x 24 GB/s, algorithm bw = busBw * 8/14;
    # latency = base 8.4 + 14 steps x NVLink's 3.4 us
    assert t.bandwidth["AllReduce"]["Ring"]["Simple"] == pytest.approx(16 * 24 * 8 / 14)
    assert t.latency["AllReduce"]["Ring"]["Simple"] == pytest.approx(8.4 + 14 * 3.4)
    # Ring/LL: half the bus, capped at llMaxBws[Hopper][1 node] = 141; latency 6.6 + 14 x 0.6
    assert t.bandwidth["AllReduce"]["Ring"]["LL"] == pytest.approx(141.0 * 8 / 14)
    assert t.latency["AllReduce"]["Ring"]["LL"] == pytest.approx(6.6 + 14 * 0.6)
    # Ring/LL128: 0.92 of the bus (under 16 x 36.7); latency 14 + 14 x 1.9
    assert t.bandwidth["AllReduce"]["Ring"]["LL128"] == pytest.approx(384 * 0.92 * 8 / 14)
    assert t.latency["AllReduce"]["Ring"]["LL128"] == pytest.approx(14.0 + 14 * 1.9)
    # Tree/LL all_reduce: min(0.92 bus, 16 x 38.7) / 3.8, halved; latency 6.8 + 2 x 7 x 0.6
    assert t.bandwidth["AllReduce"]["Tree"]["LL"] == pytest.approx(384 * 0.92 / 3.8 * 0.5)
    assert t.latency["AllReduce"]["Tree"]["LL"] == pytest.approx(6.8 + 2 * 7 * 0.6)
    # all_gather has no tree; its ring has n-1 steps
    assert t.bandwidth["AllGather"]["Tree"]["Simple"] == 0
    assert t.bandwidth["AllGather"]["Ring"]["Simple"] == pytest.approx(384 * 8 / 7)
    # one call: latency + bytes / (1000 x GB/s) microseconds
    assert N.algo_time(t, "AllReduce", "Ring", "Simple", 1 << 20) == pytest.approx(
        8.4 + 14 * 3.4 + (1 << 20) / (1000 * 384 * 8 / 14))


def test_across_nodes_the_ring_pays_network_steps_and_the_tree_its_correction():
    t = N.tune(_node(nodes=4))  # 32 ranks, intel x86: net overhead 1 us (x3 for Simple)
    nsteps, inter = 2 * 31, 2 * 3
    lat = 8.4 + (nsteps - inter) * max(3.4, 3.0) + inter * 14.0
    assert t.latency["AllReduce"]["Ring"]["Simple"] == pytest.approx(lat)
    # more than 2 nodes: bwInter, and the ring's plateau factor 1.4 for large Simple all_reduces
    big = 1 << 30
    bw = 16 * 24.0 * 32 / nsteps
    assert N.algo_time(t, "AllReduce", "Ring", "Simple", big) == pytest.approx(lat * 1.4 + big / (1000 * bw))
    # Tree/Simple at 1 MiB: bw times treeCorrectionFactor[Simple][log2(1 MiB / 64) = 14] = 0.5
    tb = t.bandwidth["AllReduce"]["Tree"]["Simple"]
    assert N.algo_time(t, "AllReduce", "Tree", "Simple", 1 << 20) == pytest.approx(
        t.latency["AllReduce"]["Tree"]["Simple"] + (1 << 20) / (1000 * tb * 0.5))


def test_the_choice_is_the_smallest_time_and_its_crossovers_are_where_it_changes():
    t = N.tune(_node(nodes=2))
    c = N.choose(t, "AllReduce", 8)
    assert c.time_us == min(c.candidates.values()) and c.candidates[(c.algorithm, c.protocol)] == c.time_us
    steps = N.crossovers(t, "AllReduce", 8, 1 << 32)
    assert steps[0][0] == 8 and len(steps) >= 2
    for (n0, a0, p0), (n1, a1, p1) in zip(steps, steps[1:]):
        assert n1 > n0 and (a0, p0) != (a1, p1)
        assert (N.choose(t, "AllReduce", n1 - 1).algorithm, N.choose(t, "AllReduce", n1 - 1).protocol) == (a0, p0)
        assert (N.choose(t, "AllReduce", n1).algorithm, N.choose(t, "AllReduce", n1).protocol) == (a1, p1)
    assert steps[-1][2] == "Simple"  # the largest sizes use the Simple protocol


def test_nccl_algo_and_nccl_proto_restrict_the_choice_as_parseList_reads_them():
    # the examples of tuning.cc's own comment
    a = N.parse_list("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring", N.ALGORITHMS)
    assert [k for k, v in a["AllGather"].items() if v] == ["Ring", "CollNetDirect"]
    assert [k for k, v in a["AllReduce"].items() if v] == ["Tree", "CollNetDirect"]
    assert [k for k, v in a["Broadcast"].items() if v] == ["Ring"]
    p = N.parse_list("LL,Simple;allreduce:^LL", N.PROTOCOLS)
    assert [k for k, v in p["Reduce"].items() if v] == ["LL", "Simple"]
    assert [k for k, v in p["AllReduce"].items() if v] == ["LL128", "Simple"]
    p = N.parse_list("^LL128;allreduce:LL128", N.PROTOCOLS)
    assert [k for k, v in p["Broadcast"].items() if v] == ["LL", "Simple"]
    assert [k for k, v in p["AllReduce"].items() if v] == ["LL128"]
    with pytest.raises(ValueError, match="all entries except the first must have a prefix"):
        N.parse_list("tree;ring", N.ALGORITHMS)
    with pytest.raises(ValueError, match="unknown element 'rings'"):
        N.parse_list("rings", N.ALGORITHMS)
    with pytest.raises(ValueError, match="unknown function 'allreducee'"):
        N.parse_list("allreducee:ring", N.ALGORITHMS)
    ring_only = N.tune(_node(nodes=2), algo_env="Ring")
    assert {N.choose(ring_only, "AllReduce", n).algorithm for n in (8, 1 << 20, 1 << 30)} == {"Ring"}
    simple = N.tune(_node(nodes=2), proto_env="Simple")
    assert {N.choose(simple, "AllReduce", n).protocol for n in (8, 1 << 20, 1 << 30)} == {"Simple"}
    with pytest.raises(ValueError, match="no algorithm/protocol available"):
        N.choose(N.tune(_node(), algo_env="PAT"), "AllReduce", 8)


def test_presets_pick_nvls_on_one_node_and_pat_only_with_one_gpu_per_node():
    one = N.tune(N.preset("dgx-h100", 1))
    assert N.choose(one, "AllReduce", 1 << 30).algorithm == "NVLS"
    multi = N.tune(N.preset("dgx-h100", 4))
    assert N.choose(multi, "AllReduce", 1 << 30).algorithm == "NVLSTree"  # NVLS needs CollNet across nodes
    assert multi.bandwidth["AllReduce"]["NVLS"]["Simple"] == 0
    pat = N.tune(N.preset("one-gpu-per-node", 8))
    assert any(a == "PAT" for _n, a, _p in N.crossovers(pat, "AllGather"))
    assert N.tune(N.preset("dgx-h100", 2)).bandwidth["AllGather"]["PAT"]["Simple"] == 0  # 8 GPUs a node: no PAT
    with pytest.raises(ValueError, match="unknown preset"):
        N.preset("dgx-h200")


def test_busbw_above_one_nic_is_a_number_from_the_model():
    system = N.preset("dgx-h100", 4)
    out = N.explain_busbw_over_nic(system)
    c = out["choice"]
    assert out["busbw"] == pytest.approx(c.algbw * 2 * 31 / 32)
    assert out["nic_GBps"] == pytest.approx(50.0) and out["node_nics_GBps"] == pytest.approx(400.0)
    assert out["ratio"] == pytest.approx(out["busbw"] / 50.0) and out["ratio"] > 4
    assert out["busbw"] < out["node_nics_GBps"]
    assert "NIC" in out["text"] and f"{out['ratio']:.1f}" in out["text"]


def test_ncclS_own_lines_are_read_back():
    t = N.tune(_node(nodes=2))
    table = N.parse_tuning_table("\n".join("host:1:2 [0] NCCL INFO " + line for line in N.table_text(t).splitlines()))
    for (f, a, p), (lat, bw) in table.items():
        assert lat == pytest.approx(t.latency[f][a][p], abs=0.05) and bw == pytest.approx(t.bandwidth[f][a][p], abs=0.05)
    assert ("AllReduce", "Ring", "Simple") in table and ("Broadcast", "PAT", "LL") in table
    log = ("n1:7:9 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 16, bw 24.000000/24.000000, type NVL/PIX, sameChannels 1\n"
           "n1:7:9 [0] NCCL INFO Pattern 1, crossNic 0, nChannels 16, bw 24.000000/12.000000, type NVL/PIX, sameChannels 1\n"
           "n1:7:9 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}\n"
           "n1:7:9 [0] NCCL INFO AllGather: 8 Bytes -> Algo COLLNET_DIRECT proto LL channel{Lo..Hi}={0..0}\n")
    graphs = N.parse_graph_lines(log)
    assert [g["pattern"] for g in graphs] == [4, 1] and graphs[1]["bw_inter"] == 12.0 and graphs[0]["type_intra"] == "NVL"
    assert N.parse_chosen(log) == [("AllReduce", 1048576, "Ring", "Simple"), ("AllGather", 8, "CollNetDirect", "LL")]
    s = N.system_from_log(log, 2, 8, "hopper")
    assert s.graphs["Tree"].bw_inter == 12.0 and s.graphs["Ring"].n_channels == 16
    with pytest.raises(ValueError, match="NCCL_DEBUG_SUBSYS=GRAPH"):
        N.system_from_log("nothing", 2, 8, "hopper")
