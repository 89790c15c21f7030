"""Collective algorithms on isend/irecv (collnb.algorithms) and the alpha-beta model (collnb.costmodel).

* Schedules, without ranks: every algorithm at every world size 1-16 (and several roots) ends
  with the right result when its transfers are applied to numbers by a simulator written here
  (independent of the module's own provenance bookkeeping); round counts follow the literature
  (ring all_reduce 2(n-1), recursive doubling lg p + 2 fold rounds at a non-power of two, ...).
* Real ranks: every algorithm x world sizes 1-9 and 16 x several dtypes/ops, each run next to
  the built-in torch.distributed collective on the same inputs in the same launch, and the final
  buffers compared (exactly for integers, bools, min/max).
* Cost model: the per-round model summed over the schedule equals the closed forms of Thakur et
  al. 2005 wherever they are exact; busbw factors as nccl-tests.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import collnb.algorithms as A
from collnb.algorithms import execution as E
from collnb import costmodel as cm
from collnb.vocabulary import DTYPE_NAMES, op_hint

ROOTED = ("broadcast", "reduce", "scatter", "gather")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
ALL_PAIRS = [(p, a) for p, algs in A.ALGORITHMS.items() for a in algs]


# ------------------------------------------------------------------------------------------------
# An independent simulator: apply a schedule's transfers to numbers.

def _start(primitive, inputs, root):
    """Starting buffers (ws, C) float64 + which slots hold data, in the module's layout."""
    ws, C = inputs.shape
    buf = np.zeros((ws, C))
    if primitive in ("all_reduce", "reduce", "reduce_scatter", "broadcast"):
        buf[:] = inputs
    elif primitive in ("all_gather", "gather"):
        for r in range(ws):
            buf[r, r] = inputs[r, r]
    elif primitive == "scatter":
        buf[root] = inputs[root]
    elif primitive == "all_to_all":
        for r in range(ws):
            buf[r, r] = inputs[r, r]
    return buf


def simulate(sched, inputs):
    """Apply every round (all sends read the state before the round) with op SUM."""
    buf = _start(sched.primitive, inputs, sched.root)
    for rnd in sched.rounds:
        new = buf.copy()
        for t in rnd.transfers:
            src = inputs if sched.primitive == "all_to_all" else buf
            for sc, dc in zip(t.chunks, t.dst_chunks):
                if t.reduce:
                    new[t.dst, dc] += src[t.src, sc]
                else:
                    new[t.dst, dc] = src[t.src, sc]
        buf = new
    return buf


def expected(primitive, inputs, root):
    """(expected final buffers, defined mask) from the collective's definition."""
    ws, C = inputs.shape
    out = np.zeros((ws, C))
    defined = np.zeros((ws, C), dtype=bool)
    total = inputs.sum(axis=0)
    for r in range(ws):
        for c in range(C):
            if primitive == "all_reduce":
                out[r, c], defined[r, c] = total[c], True
            elif primitive == "reduce":
                out[r, c], defined[r, c] = total[c], r == root
            elif primitive == "reduce_scatter":
                out[r, c], defined[r, c] = total[c], c == r
            elif primitive == "broadcast":
                out[r, c], defined[r, c] = inputs[root, c], True
            elif primitive == "scatter":
                out[r, c], defined[r, c] = inputs[root, c], c == r
            elif primitive == "gather":
                out[r, c], defined[r, c] = inputs[c, c], r == root
            elif primitive == "all_gather":
                out[r, c], defined[r, c] = inputs[c, c], True
            elif primitive == "all_to_all":
                out[r, c], defined[r, c] = inputs[c, r], True
    return out, defined


def _roots(primitive, n):
    return sorted({0, n - 1, n // 2}) if primitive in ROOTED else [0]


@pytest.mark.parametrize("primitive,algorithm", ALL_PAIRS)
def test_schedule_computes_the_collective_at_every_world_size(primitive, algorithm):
    rng = np.random.default_rng(7)
    for n in range(1, 17):
        for root in _roots(primitive, n):
            sched = A.schedule(primitive, algorithm, n, root)
            C = sched.n_chunks
            inputs = rng.integers(1, 1000, size=(n, C)).astype(np.float64)
            got = simulate(sched, inputs)
            want, defined = expected(primitive, inputs, root)
            assert np.array_equal(np.array(sched.defined), defined)
            bad = np.argwhere(defined & (got != want))
            assert not len(bad), (f"{primitive}/{algorithm} n={n} root={root}: wrong at (rank, chunk) "
                                  f"{bad[:4].tolist()}: got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}")
            # the module's own provenance ends with every contributor (reductions: all ranks)
            final = sched.provenance[-1]
            for r in range(n):
                for c in range(C):
                    if defined[r, c]:
                        want_mask = ((1 << n) - 1 if primitive in REDUCING else
                                     1 << root if primitive in ("broadcast", "scatter") else 1 << c)
                        assert final[r][c] == want_mask, (primitive, algorithm, n, r, c)


def _lg(n):
    return math.ceil(math.log2(n)) if n > 1 else 0


def _expected_rounds(primitive, algorithm, n):
    p = 1 << (n.bit_length() - 1)
    fold = 0 if n == p else 2
    lp = p.bit_length() - 1
    table = {
        ("all_reduce", "ring"): 2 * (n - 1),
        ("all_reduce", "recursive_doubling"): lp + fold,
        ("all_reduce", "rabenseifner"): 2 * lp + fold,
        ("all_reduce", "binomial_tree"): 2 * _lg(n),
        ("all_gather", "ring"): n - 1,
        ("all_gather", "recursive_doubling"): lp + fold,
        ("all_gather", "bruck"): _lg(n),
        ("reduce_scatter", "ring"): n - 1,
        ("reduce_scatter", "recursive_halving"): lp + fold,
        ("broadcast", "linear"): n - 1,
        ("broadcast", "binomial_tree"): _lg(n),
        ("broadcast", "chain"): (n + n - 2) if n > 1 else 0,  # S = n segments: S + n - 2
        ("reduce", "binomial_tree"): _lg(n),
        ("scatter", "linear"): n - 1,
        ("scatter", "binomial_tree"): _lg(n),
        ("gather", "linear"): n - 1,
        ("gather", "binomial_tree"): _lg(n),
        ("all_to_all", "pairwise"): n - 1,
        ("all_to_all", "linear"): 1 if n > 1 else 0,
    }
    return table[(primitive, algorithm)]


@pytest.mark.parametrize("primitive,algorithm", ALL_PAIRS)
def test_round_counts(primitive, algorithm):
    got = [A.schedule(primitive, algorithm, n).n_rounds for n in range(1, 17)]
    want = [_expected_rounds(primitive, algorithm, n) for n in range(1, 17)]
    assert got == want


def test_fold_rounds_are_shown_exactly_at_non_powers_of_two():
    for algorithm, primitive in (("recursive_doubling", "all_reduce"), ("rabenseifner", "all_reduce"),
                                 ("recursive_doubling", "all_gather"), ("recursive_halving", "reduce_scatter")):
        for n in range(2, 17):
            s = A.schedule(primitive, algorithm, n)
            labels = [r.label for r in s.rounds]
            q = n - (1 << (n.bit_length() - 1))
            if q:
                assert labels[0] == "fold" and labels[-1] == "unfold", (algorithm, n, labels)
                assert labels.count("fold") == 1 and labels.count("unfold") == 1
                # the fold pairs (2i, 2i+1) for i < q, and the unfold sends back
                assert sorted((t.src, t.dst) for t in s.rounds[0].transfers) == [(2 * i, 2 * i + 1) for i in range(q)]
                assert sorted((t.src, t.dst) for t in s.rounds[-1].transfers) == [(2 * i + 1, 2 * i) for i in range(q)]
                assert s.fold == (n - q, q)
            else:
                assert "fold" not in labels and "unfold" not in labels


def test_ring_reduce_scatter_chunk_owner_and_transfers():
    n = 5
    s = A.schedule("all_reduce", "ring", n)
    # round 1: rank r sends chunk (r-1) mod n to r+1, which reduces
    t1 = sorted((t.src, t.dst, t.chunks, t.reduce) for t in s.rounds[0].transfers)
    assert t1 == [(r, (r + 1) % n, ((r - 1) % n,), True) for r in range(n)]
    # after the reduce-scatter half (n-1 rounds) rank r holds chunk r from every rank
    mid = s.provenance[n - 1]
    for r in range(n):
        assert mid[r][r] == (1 << n) - 1
        assert all(mid[r][c] != (1 << n) - 1 for c in range(n) if c != r)
    # the all-gather half only copies
    assert all(not t.reduce for rnd in s.rounds[n - 1:] for t in rnd.transfers)


def _raises(exc, text, call, *args, **kwargs):
    """``call(*args, **kwargs)`` raises exactly ``exc`` whose message is exactly ``text``."""
    with pytest.raises(exc) as info:
        call(*args, **kwargs)
    assert type(info.value) is exc and str(info.value) == text


def test_bad_requests_are_refused_with_the_vocabulary_words():
    """Names, world sizes, roots and sizes are checked by collnb.vocabulary: TypeError for a
    wrong type, ValueError for a wrong value, the same words as every other entry point."""
    _raises(ValueError, "unknown algorithm for all_reduce 'bruck'; choose one of: ring, recursive_doubling, "
            "rabenseifner, binomial_tree", A.schedule, "all_reduce", "bruck", 4)
    _raises(ValueError, "unknown primitive 'alltoall'; choose one of: all_reduce, all_gather, reduce_scatter, "
            "broadcast, reduce, scatter, gather, all_to_all", A.schedule, "alltoall", "ring", 4)
    _raises(TypeError, "primitive must be a name (str), one of: all_reduce, all_gather, reduce_scatter, "
            "broadcast, reduce, scatter, gather, all_to_all; got 3", A.algorithms_for, 3)
    _raises(ValueError, "world_size must be an int from 1 to 16; got 17", A.schedule, "all_reduce", "ring", 17)
    _raises(TypeError, "world_size must be an int from 1 to 16; got 4.0", A.schedule, "all_reduce", "ring", 4.0)
    _raises(ValueError, "root must be a rank, an int from 0 to 3 (world size 4); got 4",
            A.schedule, "broadcast", "chain", 4, root=4)
    _raises(TypeError, "root must be a rank, an int from 0 to 3 (world size 4); got '1'",
            A.schedule, "broadcast", "chain", 4, root="1")
    _raises(ValueError, "segments must be an int from 1 to 64 (chunks of the broadcast buffer); got 65",
            A.schedule, "broadcast", "chain", 4, segments=65)
    _raises(ValueError, "segments applies to broadcast only; all_reduce has one chunk per rank",
            A.schedule, "all_reduce", "ring", 4, segments=3)
    _raises(ValueError, "unknown algorithm for all_reduce 'bruck'; choose one of: ring, recursive_doubling, "
            "rabenseifner, binomial_tree", A.run_algorithm, "all_reduce", "bruck", 2)
    _raises(TypeError, "chunk_size must be an int from 1 to 4194304 (elements per chunk); got 1.5",
            A.run_algorithm, "all_reduce", "ring", 2, chunk_size=1.5)
    _raises(ValueError, "unknown backend 'mpi'; choose one of: gloo, nccl",
            A.run_algorithm, "all_reduce", "ring", 2, backend="mpi")
    _raises(ValueError, "unknown reduce op 'mean'; choose one of: sum, product, min, max, avg, band, bor, bxor",
            A.run_algorithm, "all_reduce", "ring", 2, op="mean")
    _raises(ValueError, "unknown dtype 'float33'; choose one of: " + ", ".join(DTYPE_NAMES),
            A.run_algorithm, "all_reduce", "ring", 2, dtype="float33")
    with pytest.raises(ValueError, match="no reduce op"):
        A.run_algorithm("broadcast", "linear", 2, op="max")
    with pytest.raises(ValueError) as info:
        A.run_algorithm("all_reduce", "ring", 2, dtype=torch.int32, op="avg")
    # the hint is vocabulary.op_hint's sentence, the valid ops were detected on real ranks
    assert op_hint("avg", "int32") in str(info.value) and "Valid ops for int32" in str(info.value)
    with pytest.raises(ValueError, match="inputs must have shape"):
        A.run_algorithm("all_reduce", "ring", 2, inputs=torch.zeros(3, 3))


def test_padding_pairs_equalise_point_to_point_counts():
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(2, 16)
        counts = [0] * n
        for _ in range(rng.randint(0, 40)):  # random messages: each counts at its sender and receiver
            a, b = rng.sample(range(n), 2)
            counts[a] += 1
            counts[b] += 1
        pairs = E._padding_pairs(counts)
        after = counts[:]
        for a, b in pairs:
            assert a != b
            after[a] += 1
            after[b] += 1
        assert len(set(after)) == 1, (counts, after)
    with pytest.raises(ValueError, match="even"):
        E._padding_pairs([1, 0, 0])


def test_chunk_bounds():
    assert A.chunk_bounds(10, 4) == [0, 3, 6, 8, 10]
    assert A.chunk_bounds(8, 4) == [0, 2, 4, 6, 8]


# ------------------------------------------------------------------------------------------------
# Real ranks against the built-in collectives

WORLD_SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16]
OTHER_OPS = [("int64", "bxor"), ("int32", "max"), ("float64", "avg"), ("int8", "product"), ("uint8", "band"),
             ("bfloat16", "min"), ("bool", "sum"), ("float16", "sum")]
OTHER_DTYPES = ["int64", "float16", "bool"]


def _cases(ws):
    """Every algorithm at float32 and a few other dtypes/ops; each case gives only the arguments its
    primitive uses (run_algorithm refuses an op where nothing reduces, a root where there is none)."""
    def case(p, a, root, **kw):
        return dict(primitive=p, algorithm=a, **kw, **({"root": root} if p in ROOTED else {}))

    cases = []
    for p, a in ALL_PAIRS:
        cases.append(case(p, a, ws - 1, dtype="float32", **({"op": "sum"} if p in REDUCING else {})))
        if p in REDUCING:
            cases += [case(p, a, ws // 2, dtype=d, op=o) for d, o in OTHER_OPS]
        else:
            cases += [case(p, a, ws // 2, dtype=d) for d in OTHER_DTYPES]
    cases.append(dict(primitive="broadcast", algorithm="chain", segments=3, root=0, chunk_size=3))
    cases.append(dict(primitive="all_reduce", algorithm="ring", chunk_size=5, dtype="int32", op="sum"))
    return cases


@pytest.mark.timeout(600)
@pytest.mark.parametrize("ws", [pytest.param(ws, marks=() if ws in (3, 4) else pytest.mark.slow) for ws in WORLD_SIZES])
def test_every_algorithm_equals_the_builtin_collective(ws):
    cases = _cases(ws)
    traces = A.run_algorithms([dict(c, snapshots=False) for c in cases], ws)
    assert len(traces) == len(cases)
    bad = []
    for case, tr in zip(cases, traces):
        assert tr.primitive == case["primitive"] and tr.algorithm == case["algorithm"]
        assert tr.builtin is not None and tr.final.shape == tr.builtin.shape == (ws, tr.count)
        if not tr.matches_builtin:
            bad.append((case, tr.mismatches()[:3]))
            continue
        # exact wherever no floating rounding can differ with the order of a reduction
        exact = tr.dtype not in ("float16", "bfloat16", "float32", "float64") or tr.op in ("min", "max", None)
        if exact:
            for r in range(ws):
                for c in range(tr.n_chunks):
                    if tr.defined[r, c]:
                        lo, hi = tr.chunk_bounds[c], tr.chunk_bounds[c + 1]
                        assert np.array_equal(tr.final[r, lo:hi], tr.builtin[r, lo:hi]), (case, r, c)
    assert not bad, f"world size {ws}: {len(bad)} case(s) differ from the built-in: {bad[:5]}"


def test_a_wrong_result_is_caught():
    """The comparison can fail: a corrupted final buffer is reported at the right chunk."""
    tr = A.run_algorithm("reduce_scatter", "ring", 3, dtype="int64", snapshots=False)
    assert tr.matches_builtin
    tr.final[1, 1] += 1          # rank 1's own chunk: defined
    tr.final[1, 0] += 1          # rank 1's chunk 0: not part of reduce_scatter's result
    assert tr.mismatches() == [(1, 1)]
    assert tr.matches_builtin is False


def test_in_rank_all_reduce_api():
    """collnb.algorithms.all_reduce inside a launched function is a drop-in dist.all_reduce."""
    from collnb import launch

    def fn(rank, ws):
        import torch.distributed as dist
        out = {}
        for alg in A.ALGORITHMS["all_reduce"]:
            t = torch.arange(11, dtype=torch.int64) * (rank + 1)   # 11 elements: uneven chunks
            ref = t.clone()
            A.all_reduce(t, algorithm=alg)
            dist.all_reduce(ref)
            out[alg] = bool(torch.equal(t, ref))
        return out

    res = launch(fn, 3)
    assert all(all(r.values()) for r in res), res


# ------------------------------------------------------------------------------------------------
# Cost model

@pytest.mark.parametrize("primitive,algorithm", ALL_PAIRS)
def test_model_sum_of_rounds_equals_closed_forms(primitive, algorithm):
    model = cm.CostModel(alpha=1e-5, beta=1e-9, gamma=3e-10)
    checked = 0
    for n in range(1, 17):
        m = 720720 * n * 8  # divisible into every chunk count used
        pr = cm.predict(primitive, algorithm, n, m, model)
        assert pr.rounds == _expected_rounds(primitive, algorithm, n)
        if pr.closed_form_seconds is None:
            assert n & (n - 1)  # only non-powers of two lack a closed form
            continue
        assert pr.seconds == pytest.approx(pr.closed_form_seconds, rel=1e-9), (n, pr.formula)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("p", [3, 5, 6, 7])
def test_rabenseifner_at_a_non_power_of_two_costs_its_closed_form(p):
    """Issue 18: after the fold Rabenseifner's reduce-scatter splits the buffer among the p' ranks
    left (Thakur, Rabenseifner & Gropp 2005; MPICH's pof2 split), so every halving step moves half
    of what a rank holds and the sum of the rounds is the closed form (it was 13 % above at p = 5,
    with the buffer cut into p chunks)."""
    model = cm.CostModel(alpha=1e-5, beta=1e-9, gamma=3e-10)
    pp = 1 << (p.bit_length() - 1)
    sched = A.schedule("all_reduce", "rabenseifner", p)
    assert sched.n_chunks == pp
    for m in (1 << 20, 3 * 5 * 7 * 64):
        pr = cm.predict("all_reduce", "rabenseifner", p, m, model)
        assert pr.seconds == pytest.approx(pr.closed_form_seconds, rel=1e-12), (p, m)
    # every halving step moves exactly half of what the sender still holds
    halving = [r for r in sched.rounds if r.label == "reduce-scatter"]
    for k, rnd in enumerate(halving, 1):
        assert {len(t.chunks) for t in rnd.transfers} == {pp >> k}, (p, k, rnd.transfers)


def test_model_coefficients_ring_vs_recursive_doubling():
    m = 8 * 2 ** 20
    ring = cm.predict("all_reduce", "ring", 8, m)
    rd = cm.predict("all_reduce", "recursive_doubling", 8, m)
    assert (ring.alpha_count, rd.alpha_count) == (14, 3)
    assert ring.beta_bytes == pytest.approx(2 * 7 / 8 * m)
    assert rd.beta_bytes == pytest.approx(3 * m)
    # small messages: latency wins (recursive doubling); large: bandwidth wins (ring)
    assert cm.predict("all_reduce", "recursive_doubling", 8, 64).seconds < cm.predict("all_reduce", "ring", 8, 64).seconds
    assert ring.seconds < rd.seconds


def test_busbw_factors_and_algbw():
    assert cm.busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert cm.busbw_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert cm.busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert cm.busbw_factor("broadcast", 16) == 1.0
    assert cm.busbw_factor("reduce", 3) == 1.0
    assert cm.algbw(2e9, 0.5) == pytest.approx(4.0)
    assert cm.busbw("all_reduce", 2e9, 0.5, 4) == pytest.approx(4.0 * 1.5)
    _raises(ValueError, "unknown primitive for busbw 'alltoall'; choose one of: broadcast, scatter, gather, "
            "reduce, all_gather, reduce_scatter, all_reduce, all_to_all", cm.busbw_factor, "alltoall", 4)
    _raises(ValueError, "unknown algorithm for all_reduce 'bruck'; choose one of: ring, recursive_doubling, "
            "rabenseifner, binomial_tree", cm.closed_form, "all_reduce", "bruck", 4, 1024)
    with pytest.raises(ValueError):
        cm.algbw(1, 0)
