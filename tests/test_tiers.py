"""Algorithms built for a node map (collnb.algorithms.tiers): every schedule checked by simulation
at every shape, their values on real ranks equal the built-in collective's, their traffic across
the node boundary is what the literature says, NCCL's double binary tree is NCCL's, and the
two-tier model prices them round by round (equal to the closed forms where there are some)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from collnb.algorithms import (DEFAULT_MODEL, TIERED_ALGORITHMS, CostModel, Trace, TwoTier, inter_node_bytes,
                               predict_tiers, round_costs, run_algorithms, schedule, tier_of, tier_round_costs)
from collnb.algorithms.tiers import btree, dtree

SHAPES = [(n, l) for n in range(1, 5) for l in range(1, 5) if n * l <= 16]
TIERED = [(p, a) for p, algs in TIERED_ALGORITHMS.items() for a in algs]


@pytest.mark.parametrize("nodes,L", SHAPES)
@pytest.mark.parametrize("primitive,algorithm", TIERED)
def test_every_tiered_schedule_simulates_to_the_primitives_result(primitive, algorithm, nodes, L):
    s = schedule(primitive, algorithm, nodes * L, ranks_per_node=L)  # asserts the provenance
    assert s.ranks_per_node == L and s.world_size == nodes * L
    if nodes * L > 1:
        assert s.n_rounds >= 1


def test_tiered_algorithms_need_a_node_map_that_divides_the_world_size():
    with pytest.raises(ValueError, match="give ranks_per_node"):
        schedule("all_reduce", "hierarchical", 4)
    with pytest.raises(ValueError, match="does not divide world size 6"):
        schedule("all_reduce", "ring", 6, ranks_per_node=4)
    with pytest.raises(TypeError, match="ranks_per_node must be an int"):
        schedule("all_reduce", "ring", 4, ranks_per_node=2.0)


def test_hierarchical_all_reduce_crosses_nodes_as_the_literature_says():
    # N nodes of L ranks, m bytes per rank: each node's link carries 2(N-1)/N m (the flat ring:
    # 2(p-1)/p m) in 2(N-1) inter-node rounds (the flat ring: every one of its 2(p-1) rounds)
    m = float(1 << 20)
    for N, L in [(2, 2), (2, 4), (4, 2), (3, 3)]:
        p = N * L
        h = schedule("all_reduce", "hierarchical", p, ranks_per_node=L)
        f = schedule("all_reduce", "ring", p, ranks_per_node=L)
        assert inter_node_bytes(h, L, m) == pytest.approx(2 * (N - 1) / N * m)
        assert inter_node_bytes(f, L, m) == pytest.approx(2 * (p - 1) / p * m)
        inter = [r for r in h.rounds if any(tier_of(t.src, t.dst, L) == "inter" for t in r.transfers)]
        assert len(inter) == 2 * (N - 1) and h.n_rounds == 2 * (L - 1) + 2 * (N - 1)
        assert all(any(tier_of(t.src, t.dst, L) == "inter" for t in r.transfers) for r in f.rounds)


def test_hierarchical_reduce_scatter_all_gather_and_all_to_all_cross_with_fewer_bytes_or_messages():
    m = float(1 << 20)
    N, L = 2, 4
    p = N * L
    for prim in ("reduce_scatter", "all_gather"):
        h = schedule(prim, "hierarchical", p, ranks_per_node=L)
        f = schedule(prim, "ring", p, ranks_per_node=L)
        assert inter_node_bytes(h, L, m) == pytest.approx((N - 1) / N * m)  # one block per rank crosses
        assert inter_node_bytes(f, L, m) == pytest.approx((p - 1) / p * m)
    h = schedule("all_to_all", "hierarchical", p, ranks_per_node=L)
    flat = schedule("all_to_all", "pairwise", p, ranks_per_node=L)
    def inter_msgs(s):
        return sum(1 for r in s.rounds for t in r.transfers if tier_of(t.src, t.dst, L) == "inter")
    assert inter_msgs(h) == p * (N - 1)          # one message of L blocks per rank and other node
    assert inter_msgs(flat) == p * (p - L)       # one block per pair of ranks on different nodes
    assert inter_node_bytes(h, L, m) == pytest.approx(inter_node_bytes(flat, L, m))  # same bytes
    assert all(r.from_work for r in h.rounds if r.label == "inter all-to-all")


def test_nccl_double_binary_tree_is_the_one_in_ncclGetDtree():
    # NCCL src/graph/trees.cc (v2.30.7-1) draws both trees for 12 (mirror) and 13 (shift) ranks
    def parent(n, t):
        return {r: dtree(n, r)[t][0] for r in range(n)}
    t0 = parent(12, 0)
    assert t0[0] == -1 and t0[8] == 0 and t0[4] == 8 and t0[10] == 8 and t0[2] == 4 and t0[6] == 4
    assert all(t0[r] in (r - 1, r + 1) for r in (1, 3, 5, 7, 9, 11))  # the leaves
    t1 = parent(12, 1)
    assert t1[11] == -1 and t1[3] == 11 and t1[7] == 3 and t1[1] == 3 and t1[5] == 7 and t1[9] == 7
    s1 = parent(13, 1)
    assert s1[1] == -1 and s1[9] == 1 and s1[5] == 9 and s1[0] == 9 and s1[3] == 5 and s1[7] == 5
    assert btree(13, 13 - 1)[0] == 8  # rank 12 hangs off 8, the xx00 case of ncclGetBtree
    # every rank but the roots has a parent, and no rank is a leaf of both trees (n even)
    for n in (2, 4, 8, 12):
        kids = [[sum(1 for r in range(n) if dtree(n, r)[t][0] == x) for x in range(n)] for t in (0, 1)]
        assert not any(kids[0][x] == 0 and kids[1][x] == 0 for x in range(n) if n > 2)


def test_double_binary_tree_over_nodes_has_a_chain_inside_each_node():
    s = schedule("all_reduce", "double_binary_tree", 6, ranks_per_node=3)
    first = s.rounds[0]
    assert first.label == "reduce"
    # the chain's tail (local rank 2) sends first, to local rank 1 of the same node
    assert {(t.src, t.dst) for t in first.transfers} >= {(2, 1), (5, 4)}
    assert all(tier_of(t.src, t.dst, 3) == "intra" for t in first.transfers)


def _two_tier(intra_gbps=16.0, inter_gbps=0.8, L=2, shared=False):
    return TwoTier(L, CostModel(1e-4, 8 / (intra_gbps * 1e9), 1e-10), CostModel(1e-4 + 1e-3, 8 / (inter_gbps * 1e9), 1e-10),
                   shared)


def test_the_two_tier_model_reduces_to_the_one_tier_model_at_its_ends():
    m = float(1 << 22)
    for alg in ("ring", "recursive_doubling", "rabenseifner", "binomial_tree"):
        s = schedule("all_reduce", alg, 4, ranks_per_node=4)  # one node: every transfer intra
        one_node = TwoTier(4, DEFAULT_MODEL, CostModel(1.0, 1.0, DEFAULT_MODEL.gamma))
        assert tier_round_costs(s, one_node, m) == pytest.approx(round_costs(s, DEFAULT_MODEL, m))
        s1 = schedule("all_reduce", alg, 4, ranks_per_node=1)  # one rank per node: every transfer inter
        per_rank = TwoTier(1, CostModel(1.0, 1.0, DEFAULT_MODEL.gamma), DEFAULT_MODEL)
        assert tier_round_costs(s1, per_rank, m) == pytest.approx(round_costs(s1, DEFAULT_MODEL, m))


def test_the_two_tier_model_prices_the_hierarchy_with_the_closed_forms():
    t = _two_tier()
    m = float(1 << 24)
    a_i, b_i, a_o, b_o, g = 1e-4, 8 / 16e9, 1.1e-3, 8 / 0.8e9, 1e-10
    flat = predict_tiers("all_reduce", "ring", 2, m, t)
    assert flat.seconds == pytest.approx(6 * a_o + 1.5 * m * b_o + 0.75 * m * g)
    hier = predict_tiers("all_reduce", "hierarchical", 2, m, t)
    assert hier.seconds == pytest.approx((a_i + m / 2 * (b_i + g)) + (2 * a_o + m * b_o + m / 4 * g) + (a_i + m / 2 * b_i))
    assert (hier.rounds, hier.inter_rounds, flat.inter_rounds) == (4, 2, 6)
    # a shared intra tier (a shaped loopback): both of a node's ranks' intra bytes pass one bucket
    shared = predict_tiers("all_reduce", "hierarchical", 2, m, _two_tier(shared=True))
    assert shared.seconds == pytest.approx(hier.seconds + 2 * (m / 2) * b_i)


@pytest.mark.slow
def test_tiered_algorithms_give_the_builtin_collectives_values_on_real_ranks_every_shape():
    for N, L in [(2, 2), (3, 2), (2, 3), (4, 2), (2, 4), (4, 4)]:
        _check_on_ranks(N, L)


def _check_on_ranks(N, L):
    cfgs = [dict(primitive=p, algorithm=a, ranks_per_node=L, chunk_size=3, snapshots=False) for p, a in TIERED]
    for trace in run_algorithms(cfgs, N * L, timeout=120):
        assert trace.ranks_per_node == L
        for r in range(trace.world_size):
            for c in range(trace.n_chunks):
                if trace.defined[r, c]:
                    a, b = trace.chunk_bounds[c], trace.chunk_bounds[c + 1]
                    assert np.array_equal(trace.final[r, a:b], trace.builtin[r, a:b]), (trace.algorithm, r, c)


def test_tiered_algorithms_give_the_builtin_collectives_values_on_real_ranks():
    # 3 nodes x 2 ranks: the 2-D ring sends two messages between one pair in a round (their shared
    # tag must keep their order), and the all_to_all's node pairs are not powers of two
    _check_on_ranks(3, 2)


def test_a_trace_keeps_its_node_map_through_save_and_load(tmp_path):
    trace = run_algorithms([dict(primitive="all_reduce", algorithm="hierarchical", ranks_per_node=2)], 4)[0]
    assert trace.tier(trace.rounds[1].transfers[0]) == "inter" and trace.tier(trace.rounds[0].transfers[0]) == "intra"
    path = tmp_path / "t.json"
    trace.save(path)
    back = Trace.load(path)
    assert back.ranks_per_node == 2 and back.algorithm == "hierarchical"
    d = json.loads(path.read_text())
    d["meta"]["ranks_per_node"] = 3
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="ranks_per_node=3 must be a whole number >= 1 that divides the world size 4"):
        Trace.load(path)
