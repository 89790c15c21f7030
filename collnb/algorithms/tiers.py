"""Collective algorithms for a cluster of nodes: schedules that know which ranks share a node.

A *two-tier* cluster has ``nodes`` nodes of ``ranks_per_node`` ranks each, numbered node by node
(rank ``r`` is local rank ``r % L`` of node ``r // L``, ``L = ranks_per_node``: torchrun's and
Slurm's block placement). A transfer between two ranks of one node crosses the fast *intra-node*
tier; one between nodes crosses the slow *inter-node* tier (:func:`tier_of`). The algorithms here
are built from that map, round by round, as :class:`~collnb.algorithms.rounds.Round` lists that
:func:`collnb.algorithms.schedule` checks by simulation like every other algorithm (pass it
``ranks_per_node=``).

=================  ===================  =========================================================
primitive          algorithm            rounds (``N`` nodes, ``L`` ranks per node)
=================  ===================  =========================================================
all_reduce         hierarchical         intra-node reduce-scatter (ring, L-1), inter-node
                                        all_reduce of each shard (L rings at once, 2(N-1)),
                                        intra-node all-gather (ring, L-1)
all_reduce         ring_2d              the buffer's two halves go round the node x local grid
                                        in opposite orders at once: half A intra then inter,
                                        half B inter then intra (2(L-1) + 2(N-1))
all_reduce         double_binary_tree   NCCL's tree: two binary trees over the nodes (the second
                                        mirrored or shifted), a chain inside each node, each tree
                                        reducing then broadcasting half of the buffer
reduce_scatter     hierarchical         intra-node reduce-scatter (aggregate in the node), then
                                        inter-node reduce-scatter (L rings at once)
all_gather         hierarchical         inter-node all-gather (L rings at once), then intra-node
                                        all-gather of what crossed
all_to_all         hierarchical         intra-node exchange that gathers, on local rank l, every
                                        block bound for local rank l of any node; then one
                                        message of L blocks per pair of nodes (pairwise swaps)
=================  ===================  =========================================================

Sources:
    * hierarchical all_reduce: Horovod's ``HOROVOD_HIERARCHICAL_ALLREDUCE``
      (``NCCLHierarchicalAllreduce``, horovod/common/ops/nccl_operations.cc: "NCCL ReduceScatter -
      Parallelized MPI Allreduce - NCCL Allgather"); H. Mikami et al., "Massively Distributed SGD:
      ImageNet/ResNet-50 Training in a Flash", arXiv:1811.05233 (2D-Torus all-reduce:
      reduce-scatter, all-reduce across, all-gather).
    * 2-D ring: C. Ying et al., "Image Classification at Supercomputer Scale", arXiv:1811.06992
      (2-D torus all-reduce, one dimension after the other). Running the two halves in opposite
      orders at once is collnb's: on a torus both dimensions are equally fast, so both halves keep
      every link busy; on a two-tier cluster the half that crosses first sends ``L`` times more
      over the slow tier, and the model and the measurement both show it losing.
    * double binary tree: NCCL src/graph/trees.cc (``ncclGetBtree``, ``ncclGetDtree``, v2.30.7-1:
      the in-order binary tree, the second tree mirrored for an even and shifted by one for an odd
      number of nodes) and src/graph/connect.cc (``connectTrees``: the trees join nodes; inside a
      node the ranks form a chain). NCCL's default (balanced) pattern spreads a node's three tree
      links over its first two ranks; collnb puts all three on local rank 0 (the pattern NCCL
      calls ``TREE``). NCCL pipelines the tree in small chunks; collnb's rounds are whole phases.
    * hierarchical all_to_all: the two-stage (intra-node then inter-node) all-to-all of
      hierarchical MoE dispatch, e.g. DeepSpeed-MoE (S. Rajbhandari et al., arXiv:2201.05596,
      "hierarchical all-to-all") and Tutel (C. Hwang et al., arXiv:2206.03382, "2DH all-to-all").

Pure Python: no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

from ..i18n import later
from .builders import _T
from .rounds import Round, Transfer

__all__ = ["TIERED_ALGORITHMS", "TIERED_BUILDERS", "TIERED_N_CHUNKS", "TieredBuilder", "node_of", "tier_of", "btree",
           "dtree", "start_chunks"]

#: ``builder(nodes, ranks_per_node, n_chunks)`` -> the rounds of one tiered algorithm, in order.
TieredBuilder: TypeAlias = Callable[[int, int, int], list[Round]]
#: The transfers of one step: they run at the same time.
_Step: TypeAlias = list[Transfer]
#: ``(parent, child0, child1)`` of a rank in a binary tree (-1 = none).
_Links: TypeAlias = tuple[int, int, int]

#: Primitive -> the algorithms of this module (they need ``ranks_per_node``).
TIERED_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("hierarchical", "ring_2d", "double_binary_tree"),
    "reduce_scatter": ("hierarchical",),
    "all_gather": ("hierarchical",),
    "all_to_all": ("hierarchical",),
}


def node_of(rank: int, ranks_per_node: int) -> int:
    """The node rank ``rank`` runs on: ``rank // ranks_per_node`` (block placement)."""
    return rank // ranks_per_node


def tier_of(src: int, dst: int, ranks_per_node: int | None) -> str:
    """``"intra"`` when ``src`` and ``dst`` share a node, else ``"inter"``; ``ranks_per_node=None``
    (no node map: every rank on one machine) is ``"intra"``."""
    if ranks_per_node is None or src // ranks_per_node == dst // ranks_per_node:
        return "intra"
    return "inter"


# -- rings over a subset of ranks, several at once ------------------------------------------------

def _ring_steps(members: Sequence[int], groups: Sequence[Sequence[int]], reduce: bool, gather: bool) -> list[_Step]:
    """Transfers of each step of one ring over ``members`` (ranks, in ring order). ``groups[i]``
    is the chunk tuple member ``i`` owns at the end of a reduce-scatter (``gather=False``: step
    ``k`` member ``i`` sends ``groups[(i-k-1) % n]`` to member ``i+1``, which combines) or at the
    start of an all-gather (``gather=True``: it sends ``groups[(i-k) % n]``, which overwrites)."""
    n = len(members)
    steps: list[_Step] = []
    for k in range(n - 1):
        ts: _Step = []
        for i in range(n):
            g = groups[(i - k) % n] if gather else groups[(i - k - 1) % n]
            ts.append(_T(members[i], members[(i + 1) % n], g, reduce and not gather))
        steps.append(ts)
    return steps


def _concurrent(*step_lists: list[_Step]) -> list[_Step]:
    """Merge lists of steps that run at the same time: step ``k`` of the result holds step ``k``
    of each (the shorter ones end early)."""
    out: list[_Step] = []
    for steps in step_lists:
        for k, ts in enumerate(steps):
            if k == len(out):
                out.append([])
            out[k].extend(ts)
    return out


def _rounds(steps: list[_Step], label: str, detail: Callable[[int, int], str]) -> list[Round]:
    """Rounds from steps; ``detail(k, n)`` is the sentence of step ``k`` (1-based) of ``n``."""
    return [Round(label, detail(k, len(steps)), ts) for k, ts in enumerate(steps, 1) if ts]


def _ranks(N: int, L: int) -> tuple[Callable[[int], list[int]], Callable[[int], list[int]]]:
    """``node(n)``: node ``n``'s ranks in local order; ``column(l)``: local rank ``l`` of every node."""
    return (lambda n: [n * L + j for j in range(L)]), (lambda l: [n * L + l for n in range(N)])


# -- all_reduce ---------------------------------------------------------------------------------

def _ar_hierarchical(N: int, L: int, C: int) -> list[Round]:
    node, column = _ranks(N, L)
    # chunk l*N + i: local rank l's shard is chunks l*N .. l*N+N-1, split over the N nodes
    shard = [tuple(range(l * N, (l + 1) * N)) for l in range(L)]
    rs = _concurrent(*[_ring_steps(node(n), shard, True, False) for n in range(N)])
    cross_rs = _concurrent(*[_ring_steps(column(l), [(l * N + i,) for i in range(N)], True, False) for l in range(L)])
    cross_ag = _concurrent(*[_ring_steps(column(l), [(l * N + i,) for i in range(N)], True, True) for l in range(L)])
    ag = _concurrent(*[_ring_steps(node(n), shard, True, True) for n in range(N)])
    return (_rounds(rs, "intra reduce-scatter", lambda k, n: later(
                "step {k}/{n} inside every node: local rank j sends shard (j-{k}) mod {L} to local rank j+1, which "
                "combines it; afterwards local rank l holds its node's sum of shard l", k=k, n=n, L=L))
            + _rounds(cross_rs, "inter reduce-scatter", lambda k, n: later(
                "across nodes, step {k}/{n}: the ranks with the same local rank form one ring per local rank "
                "({L} rings at once, sharing each node's link) and reduce-scatter their shard", k=k, n=n, L=L))
            + _rounds(cross_ag, "inter all-gather", lambda k, n: later(
                "across nodes, step {k}/{n}: the same rings pass the finished pieces on; afterwards every rank "
                "holds the global sum of its shard", k=k, n=n))
            + _rounds(ag, "intra all-gather", lambda k, n: later(
                "step {k}/{n} inside every node: local rank j passes finished shard (j-{k1}) mod {L} to local "
                "rank j+1", k=k, n=n, k1=k - 1, L=L)))



def _ar_ring_2d(N: int, L: int, C: int) -> list[Round]:
    node, column = _ranks(N, L)
    p = N * L
    # half A: chunks 0..p-1, first inside the node (local rank l owns chunks l*N..l*N+N-1), then across
    a_shard = [tuple(range(l * N, (l + 1) * N)) for l in range(L)]
    a_piece = [[(l * N + i,) for i in range(N)] for l in range(L)]
    # half B: chunks p..2p-1, first across (node n owns chunks p+n*L..p+n*L+L-1), then inside
    b_block = [tuple(range(p + n * L, p + (n + 1) * L)) for n in range(N)]
    b_piece = [[(p + n * L + j,) for j in range(L)] for n in range(N)]
    a_rs1 = _concurrent(*[_ring_steps(node(n), a_shard, True, False) for n in range(N)])
    a_rs2 = _concurrent(*[_ring_steps(column(l), a_piece[l], True, False) for l in range(L)])
    a_ag2 = _concurrent(*[_ring_steps(column(l), a_piece[l], True, True) for l in range(L)])
    a_ag1 = _concurrent(*[_ring_steps(node(n), a_shard, True, True) for n in range(N)])
    b_rs1 = _concurrent(*[_ring_steps(column(l), b_block, True, False) for l in range(L)])
    b_rs2 = _concurrent(*[_ring_steps(node(n), b_piece[n], True, False) for n in range(N)])
    b_ag2 = _concurrent(*[_ring_steps(node(n), b_piece[n], True, True) for n in range(N)])
    b_ag1 = _concurrent(*[_ring_steps(column(l), b_block, True, True) for l in range(L)])
    a = a_rs1 + a_rs2 + a_ag2 + a_ag1
    b = b_rs1 + b_rs2 + b_ag2 + b_ag1
    steps = _concurrent(a, b)
    n_rs = (L - 1) + (N - 1)
    return [Round("reduce-scatter" if k <= n_rs else "all-gather", later(
        "2-D ring step {k}/{n}: half A of the buffer goes round inside the nodes first, then across; half B "
        "across first, then inside; both at once", k=k, n=len(steps)), ts) for k, ts in enumerate(steps, 1)]



def btree(n: int, rank: int) -> _Links:
    """``(parent, child0, child1)`` of ``rank`` in NCCL's in-order binary tree over ``n`` ranks
    rooted at 0 (-1 = none). Source: NCCL src/graph/trees.cc, ``ncclGetBtree`` (v2.30.7-1): the
    lowest set bit ``b`` of ``rank`` gives its level; its parent is ``(rank ^ b) | (b << 1)``, or
    ``rank ^ b`` when that is out of range; its children are ``rank -/+ b/2`` (the upper one halved
    until it is in range)."""
    bit = 1
    while bit < n:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if n > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= n:
        up = rank ^ bit
    low = bit >> 1
    d0 = -1 if low == 0 else rank - low
    d1 = -1 if low == 0 else rank + low
    while d1 >= n:
        d1 = -1 if low == 0 else rank + low
        low >>= 1
    return up, d0, d1


def dtree(n: int, rank: int) -> tuple[_Links, _Links]:
    """``((parent, child0, child1) in tree 0, (...) in tree 1)``: NCCL's double binary tree
    (``ncclGetDtree``, src/graph/trees.cc v2.30.7-1): tree 0 is :func:`btree`; tree 1 is its mirror
    (rank ``n-1-r``) for an even ``n``, shifted by one rank for an odd ``n``, so that a rank that is
    a leaf in one tree is (mostly) an inner node in the other."""
    t0 = btree(n, rank)
    if n % 2 == 1:
        u, d0, d1 = btree(n, (rank - 1 + n) % n)
        back: Callable[[int], int] = lambda x: -1 if x == -1 else (x + 1) % n  # noqa: E731 - shifted by one
    else:
        u, d0, d1 = btree(n, n - 1 - rank)
        back = lambda x: -1 if x == -1 else n - 1 - x  # noqa: E731 - mirrored
    return t0, (back(u), back(d0), back(d1))


def _tree_parents(N: int, L: int, tree: int) -> list[int]:
    """Parent rank of every rank (-1 for the root) in tree ``tree`` (0 or 1): node heads (local rank
    0) joined by NCCL's double binary tree over the nodes, a chain 0 <- 1 <- ... <- L-1 inside each
    node."""
    parent = []
    for r in range(N * L):
        n, l = divmod(r, L)
        if l > 0:
            parent.append(r - 1)
        else:
            up = dtree(N, n)[tree][0]
            parent.append(-1 if up == -1 else up * L)
    return parent


def _tree_steps(parent: Sequence[int], chunks: tuple[int, ...]) -> tuple[list[_Step], list[_Step]]:
    """(reduce steps, broadcast steps) of one tree over ``chunks``: a rank sends its partial sum to
    its parent one step after its last child did (its height), and the result comes back down one
    level per step."""
    n = len(parent)
    children: list[list[int]] = [[] for _r in range(n)]
    for r, p in enumerate(parent):
        if p >= 0:
            children[p].append(r)
    height = [0] * n

    def h(r: int) -> int:
        if not height[r]:
            height[r] = 1 + max((h(c) for c in children[r]), default=0)
        return height[r]
    depth = [0] * n
    for r in range(n):
        d, x = 0, r
        while parent[x] >= 0:
            x, d = parent[x], d + 1
        depth[r] = d
    up_steps = max((h(r) for r in range(n) if parent[r] >= 0), default=0)
    down_steps = max(depth, default=0)
    up: list[_Step] = [[] for _k in range(up_steps)]
    down: list[_Step] = [[] for _k in range(down_steps)]
    for r in range(n):
        if parent[r] >= 0:
            up[h(r) - 1].append(_T(r, parent[r], chunks, True))
            down[depth[r] - 1].append(_T(parent[r], r, chunks))
    return up, down


def _ar_double_binary_tree(N: int, L: int, C: int) -> list[Round]:
    half = C // 2
    up0, down0 = _tree_steps(_tree_parents(N, L, 0), tuple(range(half)))
    up1, down1 = _tree_steps(_tree_parents(N, L, 1), tuple(range(half, C)))
    up, down = _concurrent(up0, up1), _concurrent(down0, down1)
    return (_rounds(up, "reduce", lambda k, n: later(
                "tree reduce step {k}/{n}: a rank whose children have all sent passes its partial sum up (chain "
                "inside a node, binary tree across nodes); tree 0 carries the first half of the buffer, tree 1 the "
                "second", k=k, n=n))
            + _rounds(down, "broadcast", lambda k, n: later(
                "tree broadcast step {k}/{n}: the finished half goes back down each tree, one level per "
                "step", k=k, n=n)))



# -- reduce_scatter, all_gather -------------------------------------------------------------------

def _rs_hierarchical(N: int, L: int, C: int) -> list[Round]:
    node, column = _ranks(N, L)
    # local rank l collects, for every node n', chunk n'*L + l (the chunks bound for local rank l)
    bound_for = [tuple(m * L + l for m in range(N)) for l in range(L)]
    rs1 = _concurrent(*[_ring_steps(node(n), bound_for, True, False) for n in range(N)])
    rs2 = _concurrent(*[_ring_steps(column(l), [(m * L + l,) for m in range(N)], True, False) for l in range(L)])
    return (_rounds(rs1, "intra reduce-scatter", lambda k, n: later(
                "step {k}/{n} inside every node: the chunks bound for local rank l of every node are summed on "
                "local rank l, so only node sums cross the slow link", k=k, n=n))
            + _rounds(rs2, "inter reduce-scatter", lambda k, n: later(
                "across nodes, step {k}/{n}: one ring per local rank ({L} at once) reduce-scatters the node "
                "sums; afterwards rank r holds chunk r complete", k=k, n=n, L=L)))


def _ag_hierarchical(N: int, L: int, C: int) -> list[Round]:
    node, column = _ranks(N, L)
    gathered = [tuple(m * L + l for m in range(N)) for l in range(L)]
    ag1 = _concurrent(*[_ring_steps(column(l), [(m * L + l,) for m in range(N)], False, True) for l in range(L)])
    ag2 = _concurrent(*[_ring_steps(node(n), gathered, False, True) for n in range(N)])
    return (_rounds(ag1, "inter all-gather", lambda k, n: later(
                "across nodes, step {k}/{n}: one ring per local rank ({L} at once): local rank l gathers the "
                "block of local rank l of every node; each block crosses the slow link once per ring",
                    k=k, n=n, L=L))
            + _rounds(ag2, "intra all-gather", lambda k, n: later(
                "step {k}/{n} inside every node: local ranks pass on what they gathered across nodes",
                    k=k, n=n)))


# -- all_to_all ---------------------------------------------------------------------------------

def start_chunks(N: int, L: int) -> list[tuple[int, ...]]:
    """What each rank of the hierarchical all_to_all copies from its input into its working buffer
    before the first round: the blocks for local rank ``l`` of every node (``l`` its own local rank:
    chunks ``n'*L + l``), which it forwards itself."""
    return [tuple(m * L + r % L for m in range(N)) for r in range(N * L)]


def _a2a_hierarchical(N: int, L: int, C: int) -> list[Round]:
    rounds = []
    # intra: local rank l sends to local rank l' (same node) its blocks for local rank l' of every
    # node (input chunks m*L + l'), which land in slots m*L + l: "from local rank l, bound for node m"
    for k in range(1, L):
        ts = []
        for r in range(N * L):
            n, l = divmod(r, L)
            lp = (l + k) % L
            ts.append(_T(r, n * L + lp, [m * L + lp for m in range(N)], dst_chunks=[m * L + l for m in range(N)]))
        rounds.append(Round("intra all-to-all", later(
            "step {k}/{n} inside every node: local rank l gives local rank l+{k} the blocks bound for local rank "
            "l+{k} of every node, so that each rank collects what its counterparts on other nodes need",
                k=k, n=L - 1), ts))
    # inter: node pairs swap, one message of L blocks per pair of ranks with the same local rank
    pairs: list[list[tuple[int, int]]]
    if N & (N - 1) == 0:
        pairs = [[(n, n ^ k) for n in range(N)] for k in range(1, N)]
    else:
        pairs = [[(n, (k - n) % N) for n in range(N) if (k - n) % N != n] for k in range(N)]
    for k, pairing in enumerate(pairs, 1):
        ts = []
        for n, m in pairing:
            for l in range(L):
                ts.append(_T(n * L + l, m * L + l, [m * L + j for j in range(L)],
                             dst_chunks=[n * L + j for j in range(L)]))
        rounds.append(Round("inter all-to-all", later(
            "across nodes, step {k}/{n}: pairs of nodes swap; each rank sends its counterpart one message of {L} "
            "blocks (everything its node has for it) instead of {L} small ones", k=k, n=len(pairs), L=L),
            ts, from_work=True))
    return rounds


#: ``(primitive, algorithm)`` -> ``builder(nodes, ranks_per_node, n_chunks)`` returning the rounds.
TIERED_BUILDERS: dict[tuple[str, str], TieredBuilder] = {
    ("all_reduce", "hierarchical"): _ar_hierarchical,
    ("all_reduce", "ring_2d"): _ar_ring_2d,
    ("all_reduce", "double_binary_tree"): _ar_double_binary_tree,
    ("reduce_scatter", "hierarchical"): _rs_hierarchical,
    ("all_gather", "hierarchical"): _ag_hierarchical,
    ("all_to_all", "hierarchical"): _a2a_hierarchical,
}
assert set(TIERED_BUILDERS) == {(p, a) for p, algs in TIERED_ALGORITHMS.items() for a in algs}
#: The tiered builders whose buffer is not one chunk per rank: ``(primitive, algorithm)`` ->
#: ``n_chunks(nodes, ranks_per_node)``; every other one has ``nodes * ranks_per_node`` chunks.
TIERED_N_CHUNKS: dict[tuple[str, str], Callable[[int, int], int]] = {
    ("all_reduce", "ring_2d"): lambda N, L: 2 * N * L,  # two halves of one chunk per rank
    ("all_reduce", "double_binary_tree"): lambda N, L: max(2, N * L),  # two trees' halves, even for one rank
}
