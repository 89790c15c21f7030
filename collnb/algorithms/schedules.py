"""Collective algorithms built from point-to-point sends, run on real ranks, recorded round by round.

A *collective algorithm* is a schedule of *rounds*; in every round some ranks send chunks of
their buffer to other ranks (``torch.distributed.isend``/``irecv``, all posted before any is
waited on, so a round never deadlocks), and each receiver either overwrites its chunks with what
arrived (a copy) or combines them with the reduce op (a reduction). This module has two halves:

* **Schedules (pure Python, no ranks):** :func:`schedule` builds the rounds of an algorithm for
  one world size as plain data (:class:`Schedule` of :class:`Transfer`), and simulates which
  ranks' contributions every chunk holds after every round (*provenance*), checking on the way
  that no reduction counts a rank twice and that every output ends up complete.
* **Execution on real ranks:** :func:`run_algorithm` launches the ranks with
  :func:`collnb.launcher.launch`, runs the schedule there with ``isend``/``irecv``, runs the
  built-in ``torch.distributed`` collective on the same inputs in the same launch, and returns a
  :class:`collnb.trace.Trace` (every round's transfers and every rank's buffer after it).
  Inside your own launched function, :func:`execute` runs any schedule on a tensor, and
  :func:`all_reduce` is a drop-in ``dist.all_reduce`` with a choice of algorithm.

Buffers are rows of ``n_chunks`` chunks. For all_gather, gather, scatter, reduce_scatter and
all_to_all chunk ``j`` is the slot of rank ``j`` (``world_size`` chunks); all_reduce and reduce
use ``world_size`` chunks too, broadcast uses ``segments`` chunks (the pipeline's segments for
``chain``). all_to_all sends from a separate input buffer (chunk ``j`` = the data for rank ``j``)
into the output buffer (chunk ``i`` = the data from rank ``i``); the output starts with the rank's
own block already copied.

Non-powers of two. Recursive doubling, recursive halving and Rabenseifner pair rank ``i`` with
rank ``i XOR 2^k``, which needs a power-of-two number of ranks. With ``n = p + q`` ranks
(``p`` the largest power of two <= n) the first ``2q`` ranks *fold* first: every even rank
``2i < 2q`` sends its data to rank ``2i+1`` (which combines it) and sits out; the remaining
``p`` ranks run the power-of-two algorithm under new numbers (rank ``2i+1 -> i``, rank
``r >= 2q -> r - q``); a final *unfold* round sends the result back to the ranks that sat out.
This is the procedure of Rabenseifner's algorithm for non-power-of-two process counts in Thakur,
Rabenseifner & Gropp (2005), and the trace shows both extra rounds (labelled ``fold`` and
``unfold``).

Sources:
    * R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication Operations
      in MPICH", Int. J. High Performance Computing Applications 19(1):49-66, 2005 -- ring,
      recursive doubling, recursive halving, Rabenseifner's all_reduce, binomial trees,
      pairwise-exchange all_to_all, the non-power-of-two fold, and the costs in
      :mod:`collnb.costmodel`.
    * J. Bruck, C.-T. Ho, S. Kipnis, E. Upfal, D. Weathersby, "Efficient Algorithms for All-to-All
      Communications in Multiport Message-Passing Systems", IEEE TPDS 8(11):1143-1156, 1997 --
      the Bruck all_gather (concatenation).
    * E. Chan, M. Heimlich, A. Purkayastha, R. van de Geijn, "Collective communication: theory,
      practice, and experience", Concurrency and Computation 19(13):1749-1783, 2007 -- the
      alpha-beta-gamma cost model, the pipelined chain broadcast.
    * P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
      workstations", JPDC 69(2):117-124, 2009 -- the ring all_reduce.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.distributed as dist

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_NAMES",
    "PRIMITIVES",
    "Transfer",
    "Round",
    "Schedule",
    "schedule",
    "algorithms_for",
    "default_algorithm",
    "run_algorithm",
    "run_algorithms",
    "execute",
    "snapshots",
    "all_reduce",
    "chunk_bounds",
]

#: Primitive -> the algorithms this module implements for it (first = default).
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "recursive_doubling", "rabenseifner", "binomial_tree"),
    "all_gather": ("ring", "recursive_doubling", "bruck"),
    "reduce_scatter": ("ring", "recursive_halving"),
    "broadcast": ("binomial_tree", "linear", "chain"),
    "reduce": ("binomial_tree",),
    "scatter": ("binomial_tree", "linear"),
    "gather": ("binomial_tree", "linear"),
    "all_to_all": ("pairwise", "linear"),
}
#: Primitives with round-by-round algorithms, in teaching order.
PRIMITIVES: tuple[str, ...] = tuple(ALGORITHMS)
#: Every algorithm name, in a stable order.
ALGORITHM_NAMES: tuple[str, ...] = ("ring", "recursive_doubling", "recursive_halving", "rabenseifner",
                                    "binomial_tree", "linear", "chain", "pairwise", "bruck")

_REDUCING = ("all_reduce", "reduce_scatter", "reduce")
_ROOTED = ("broadcast", "reduce", "scatter", "gather")
_MAX_WORLD_SIZE = 16  # the launcher's limit; provenance is kept as int bitmasks


def algorithms_for(primitive: str) -> tuple[str, ...]:
    """The algorithm names implemented for ``primitive`` (tuple of str).

    Raises:
        ValueError: unknown primitive, listing the valid ones.
    """
    if primitive not in ALGORITHMS:
        raise ValueError(f"no round-by-round algorithms for primitive {primitive!r}; choose one of "
                         f"{', '.join(PRIMITIVES)}")
    return ALGORITHMS[primitive]


def default_algorithm(primitive: str) -> str:
    """The first (default) algorithm of ``primitive``."""
    return algorithms_for(primitive)[0]


def _check_algorithm(primitive: str, algorithm: str) -> None:
    valid = algorithms_for(primitive)
    if algorithm not in valid:
        known = "" if algorithm in ALGORITHM_NAMES else f" (known algorithm names: {', '.join(ALGORITHM_NAMES)})"
        raise ValueError(f"{primitive} has no algorithm {algorithm!r}; valid algorithms for {primitive}: "
                         f"{', '.join(valid)}{known}")


# ----------------------------------------------------------------------------------------------
# Schedules as data


@dataclass(frozen=True)
class Transfer:
    """One message of one round.

    Attributes:
        src, dst: sending and receiving rank (int).
        chunks: chunk indices read at ``src`` (tuple of int, increasing). For all_to_all these
            index the sender's *input* buffer; otherwise its working buffer.
        dst_chunks: chunk indices written at ``dst`` (same length and order as ``chunks``;
            equal to ``chunks`` except for all_to_all).
        reduce: True if ``dst`` combines the data with the reduce op, False if it overwrites.
    """

    src: int
    dst: int
    chunks: tuple
    dst_chunks: tuple
    reduce: bool = False

    def to_dict(self) -> dict:
        return dict(src=self.src, dst=self.dst, chunks=list(self.chunks), dst_chunks=list(self.dst_chunks),
                    reduce=self.reduce)


@dataclass
class Round:
    """One round: transfers that run concurrently (every rank posts its sends and receives, then
    waits for all of them).

    Attributes:
        label: the phase, e.g. ``"reduce-scatter"``, ``"all-gather"``, ``"fold"``, ``"unfold"``,
            ``"exchange"``, ``"reduce"``, ``"broadcast"``, ``"scatter"``, ``"gather"``,
            ``"pipeline"``, ``"send"``, ``"all-to-all"``.
        detail: one sentence saying what happens in this round.
        transfers: list of :class:`Transfer`.
        finalize: ``(rank, chunk)`` pairs whose reduction completes in this round (AVG divides
            them by the world size here).
    """

    label: str
    detail: str
    transfers: list
    finalize: list = field(default_factory=list)


@dataclass
class Schedule:
    """The rounds of one algorithm at one world size, plus the provenance they produce.

    Attributes:
        primitive, algorithm: names (see :data:`ALGORITHMS`).
        world_size: number of ranks (1..16).
        root: the src/dst rank of rooted primitives (broadcast/reduce/scatter/gather), else 0.
        n_chunks: chunks per buffer.
        rounds: list of :class:`Round`.
        provenance: ``(len(rounds) + 1)`` x ``world_size`` x ``n_chunks`` nested lists of int
            bitmasks: bit ``s`` set = the chunk holds rank ``s``'s contribution; 0 = the chunk
            holds nothing yet. Index 0 is the start, index ``k`` after round ``k``.
        defined: ``world_size`` x ``n_chunks`` bools: the chunks that hold the primitive's result
            at the end (e.g. only the root's for reduce and gather, chunk ``r`` of rank ``r`` for
            reduce_scatter and scatter).
        fold: ``(p, q)``: the power of two the algorithm ran on and the number of folded ranks
            (``q = 0`` when no fold was needed or the algorithm does not fold).
    """

    primitive: str
    algorithm: str
    world_size: int
    root: int
    n_chunks: int
    rounds: list
    provenance: list
    defined: list
    fold: tuple = (0, 0)

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    def transfers_of(self, rank: int, round_index: int) -> tuple[list, list]:
        """``(sends, receives)`` of ``rank`` in round ``round_index`` (1-based), lists of Transfer."""
        rnd = self.rounds[round_index - 1]
        return ([t for t in rnd.transfers if t.src == rank], [t for t in rnd.transfers if t.dst == rank])


def _pof2_fold(n: int):
    """(p, q, old_of_new, members): p = largest power of two <= n, q = n - p folded ranks.
    New rank i is old rank ``old_of_new[i]`` and represents the old ranks ``members[i]``."""
    p = 1 << (n.bit_length() - 1)
    q = n - p
    old_of_new, members = [], []
    for i in range(p):
        if i < q:
            old_of_new.append(2 * i + 1)
            members.append((2 * i, 2 * i + 1))
        else:
            old_of_new.append(i + q)
            members.append((i + q,))
    return p, q, old_of_new, members


def _rng(start, stop):
    return tuple(range(start, stop))


def _groups(n_chunks: int, p: int) -> list:
    """Split chunks 0..n_chunks-1 into p contiguous, balanced groups (sizes differ by at most 1)."""
    return [_rng(i * n_chunks // p, (i + 1) * n_chunks // p) for i in range(p)]


def _T(src, dst, chunks, reduce=False, dst_chunks=None):
    chunks = tuple(chunks)
    return Transfer(src, dst, chunks, tuple(dst_chunks) if dst_chunks is not None else chunks, reduce)


def _fold_rounds(n, C, reduce, what="their whole buffer"):
    p, q, old, members = _pof2_fold(n)
    if q == 0:
        return []
    ts = [_T(2 * i, 2 * i + 1, range(C), reduce) for i in range(q)]
    verb = "combines it with its own" if reduce else "keeps it"
    return [Round("fold", f"{n} is not a power of two: ranks 0..{2 * q - 2} (even) send {what} to "
                  f"rank+1, which {verb}; they sit out until the unfold round, leaving {p} active ranks", ts)]


def _unfold_round(n, C_of_even, what="the result"):
    p, q, old, members = _pof2_fold(n)
    if q == 0:
        return []
    ts = [_T(2 * i + 1, 2 * i, C_of_even(2 * i)) for i in range(q)]
    return [Round("unfold", f"ranks 1..{2 * q - 1} (odd) send {what} back to the ranks that sat out", ts)]


# -- all_reduce ---------------------------------------------------------------------------------

def _ar_ring(n, root, C):
    rounds = []
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k - 1) % n], True) for r in range(n)]
        rounds.append(Round("reduce-scatter", f"step {k + 1}/{n - 1}: rank r sends chunk (r-{k + 1}) mod {n} to "
                            f"rank r+1, which combines it into its own copy", ts))
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k) % n]) for r in range(n)]
        rounds.append(Round("all-gather", f"step {k + 1}/{n - 1}: rank r passes the finished chunk (r-{k}) "
                            f"mod {n} to rank r+1, which overwrites its copy", ts))
    return rounds


def _ar_recursive_doubling(n, root, C):
    p, q, old, members = _pof2_fold(n)
    rounds = _fold_rounds(n, C, True)
    m = 1
    while m < p:
        ts = [_T(old[i], old[i ^ m], range(C), True) for i in range(p)]
        rounds.append(Round("exchange", f"distance {m}: every active rank swaps its whole buffer with the rank "
                            f"whose new number differs in bit {m.bit_length() - 1}, and both combine", ts))
        m <<= 1
    return rounds + _unfold_round(n, lambda r: range(C))


def _rs_halving(p, old, groups_of, reduce_label="reduce-scatter"):
    """Recursive halving over p (power of two) new ranks: distance p/2, p/4, ..., 1. Returns rounds;
    afterwards new rank i holds the complete reduction of groups_of[i]."""
    rounds = []
    resp = [set(range(p)) for _ in range(p)]  # groups each new rank is still responsible for
    m = p // 2
    step = 1
    total = p.bit_length() - 1
    while m >= 1:
        ts = []
        for i in range(p):
            j = i ^ m
            give = sorted(g for g in resp[i] if (g & m) == (j & m))
            chunks = sorted(c for g in give for c in groups_of[g])
            if chunks:
                ts.append(_T(old[i], old[j], chunks, True))
        for i in range(p):
            resp[i] = {g for g in resp[i] if (g & m) == (i & m)}
        rounds.append(Round(reduce_label, f"recursive halving step {step}/{total}, distance {m}: each rank sends "
                            f"the half it is no longer responsible for to its partner, which combines it", ts))
        m //= 2
        step += 1
    return rounds


def _ag_doubling(p, old, groups_of, label="all-gather"):
    """Recursive doubling all-gather over p new ranks, distance 1, 2, ..., p/2: new rank i starts
    with groups_of[i] and ends with all of them."""
    rounds = []
    held = [{i} for i in range(p)]
    m = 1
    step = 1
    total = p.bit_length() - 1
    while m < p:
        ts = []
        for i in range(p):
            j = i ^ m
            chunks = sorted(c for g in held[i] for c in groups_of[g])
            if chunks:
                ts.append(_T(old[i], old[j], chunks))
        held = [held[i] | held[i ^ m] for i in range(p)]
        rounds.append(Round(label, f"recursive doubling step {step}/{total}, distance {m}: each rank sends "
                            f"everything it has gathered to its partner; the data held doubles", ts))
        m <<= 1
        step += 1
    return rounds


def _ar_rabenseifner(n, root, C):
    p, q, old, members = _pof2_fold(n)
    groups = _groups(C, p)
    rounds = _fold_rounds(n, C, True)
    rounds += _rs_halving(p, old, groups)
    rounds += _ag_doubling(p, old, groups)
    return rounds + _unfold_round(n, lambda r: range(C))


def _reduce_binomial(n, root, C, label="reduce"):
    rounds = []
    m = 1
    step = 1
    total = max(1, math.ceil(math.log2(n))) if n > 1 else 0
    while m < n:
        ts = []
        for v in range(n):
            if (v & (2 * m - 1)) == m:
                ts.append(_T((v + root) % n, (v - m + root) % n, range(C), True))
        rounds.append(Round(label, f"binomial tree step {step}/{total}: ranks at relative position "
                            f"{m} mod {2 * m} send their partial result {m} ranks down the tree", ts))
        m <<= 1
        step += 1
    return rounds


def _bcast_binomial(n, root, C, label="broadcast", chunks_for=None):
    """Binomial-tree broadcast (or scatter when chunks_for gives the chunks a subtree needs)."""
    rounds = []
    L = math.ceil(math.log2(n)) if n > 1 else 0
    for k in range(L):
        m = 1 << (L - 1 - k)
        ts = []
        for v in range(0, n, 2 * m):
            if v + m < n:
                ch = range(C) if chunks_for is None else chunks_for(v + m, min(v + 2 * m, n))
                ts.append(_T((v + root) % n, (v + m + root) % n, ch))
        what = "the whole buffer" if chunks_for is None else "the chunks of the receiver's subtree"
        rounds.append(Round(label, f"binomial tree step {k + 1}/{L}: every rank that has the data sends {what} "
                            f"{m} ranks further (relative to the root); the ranks holding it double", ts))
    return rounds


def _ar_binomial(n, root, C):
    return _reduce_binomial(n, 0, C) + _bcast_binomial(n, 0, C)


# -- all_gather ---------------------------------------------------------------------------------

def _ag_ring(n, root, C):
    rounds = []
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k) % n]) for r in range(n)]
        rounds.append(Round("all-gather", f"step {k + 1}/{n - 1}: rank r passes block (r-{k}) mod {n} to rank r+1",
                            ts))
    return rounds


def _ag_recursive_doubling(n, root, C):
    p, q, old, members = _pof2_fold(n)
    rounds = []
    if q:
        ts = [_T(2 * i, 2 * i + 1, [2 * i]) for i in range(q)]
        rounds.append(Round("fold", f"{n} is not a power of two: ranks 0..{2 * q - 2} (even) give their block "
                            f"to rank+1 and sit out until the unfold round, leaving {p} ranks", ts))
    rounds += _ag_doubling(p, old, [list(mm) for mm in members])
    return rounds + _unfold_round(n, lambda r: [c for c in range(C) if c != r], "every block")


def _ag_bruck(n, root, C):
    rounds = []
    d = 1
    step = 1
    total = math.ceil(math.log2(n)) if n > 1 else 0
    while d < n:
        cnt = min(d, n - d)
        ts = [_T(r, (r - d) % n, sorted((r + j) % n for j in range(cnt))) for r in range(n)]
        rounds.append(Round("all-gather", f"Bruck step {step}/{total}: rank r holds blocks r, r+1, ... (mod {n}); it "
                            f"sends the first {cnt} of them to rank r-{d}", ts))
        d <<= 1
        step += 1
    return rounds


# -- reduce_scatter -----------------------------------------------------------------------------

def _rs_ring(n, root, C):
    rounds = []
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k - 1) % n], True) for r in range(n)]
        rounds.append(Round("reduce-scatter", f"step {k + 1}/{n - 1}: rank r sends chunk (r-{k + 1}) mod {n} to "
                            f"rank r+1, which combines it; after the last step rank r holds chunk r complete", ts))
    return rounds


def _rs_recursive_halving(n, root, C):
    p, q, old, members = _pof2_fold(n)
    rounds = _fold_rounds(n, C, True)
    rounds += _rs_halving(p, old, [list(mm) for mm in members])
    return rounds + _unfold_round(n, lambda r: [r], "the even rank's finished chunk")


# -- broadcast ----------------------------------------------------------------------------------

def _bc_linear(n, root, C):
    return [Round("send", f"send {k}/{n - 1}: the root sends the whole buffer to rank {(root + k) % n}",
                  [_T(root, (root + k) % n, range(C))]) for k in range(1, n)]


def _bc_chain(n, root, C):
    rounds = []
    if n == 1:
        return rounds
    for t in range(C + n - 2):
        ts = []
        for i in range(n - 1):
            s = t - i
            if 0 <= s < C:
                ts.append(_T((root + i) % n, (root + i + 1) % n, [s]))
        rounds.append(Round("pipeline", f"time step {t + 1}/{C + n - 2}: the i-th rank of the chain (from the "
                            f"root) forwards segment {t}-i to the next rank, all at once", ts))
    return rounds


def _bc_binomial(n, root, C):
    return _bcast_binomial(n, root, C)


# -- reduce, scatter, gather ----------------------------------------------------------------------

def _rd_binomial(n, root, C):
    return _reduce_binomial(n, root, C)


def _sc_linear(n, root, C):
    return [Round("send", f"send {k}/{n - 1}: the root sends chunk {(root + k) % n} to rank {(root + k) % n}",
                  [_T(root, (root + k) % n, [(root + k) % n])]) for k in range(1, n)]


def _sc_binomial(n, root, C):
    return _bcast_binomial(n, root, C, "scatter",
                           chunks_for=lambda lo, hi: sorted((v + root) % n for v in range(lo, hi)))


def _ga_linear(n, root, C):
    return [Round("send", f"send {k}/{n - 1}: rank {(root + k) % n} sends its chunk to the root",
                  [_T((root + k) % n, root, [(root + k) % n])]) for k in range(1, n)]


def _ga_binomial(n, root, C):
    rounds = []
    m = 1
    step = 1
    total = math.ceil(math.log2(n)) if n > 1 else 0
    while m < n:
        ts = []
        for v in range(n):
            if (v & (2 * m - 1)) == m:
                ts.append(_T((v + root) % n, (v - m + root) % n,
                             sorted((u + root) % n for u in range(v, min(v + m, n)))))
        rounds.append(Round("gather", f"binomial tree step {step}/{total}: ranks at relative position {m} mod "
                            f"{2 * m} send every chunk gathered so far {m} ranks down the tree", ts))
        m <<= 1
        step += 1
    return rounds


# -- all_to_all ---------------------------------------------------------------------------------

def _a2a_pairwise(n, root, C):
    rounds = []
    pof2 = n & (n - 1) == 0
    for k in range(1, n):
        if pof2:
            ts = [_T(r, r ^ k, [r ^ k], dst_chunks=[r]) for r in range(n)]
            how = f"rank r exchanges with rank r XOR {k}"
        else:
            ts = [_T(r, (r + k) % n, [(r + k) % n], dst_chunks=[r]) for r in range(n)]
            how = f"rank r sends to rank r+{k} and receives from rank r-{k}"
        rounds.append(Round("all-to-all", f"pairwise step {k}/{n - 1}: {how} (one block each way)", ts))
    return rounds


def _a2a_linear(n, root, C):
    if n == 1:
        return []
    ts = [_T(r, j, [j], dst_chunks=[r]) for r in range(n) for j in range(n) if j != r]
    return [Round("all-to-all", f"every rank posts all {n - 1} sends and {n - 1} receives at once", ts)]


_BUILDERS = {
    ("all_reduce", "ring"): _ar_ring,
    ("all_reduce", "recursive_doubling"): _ar_recursive_doubling,
    ("all_reduce", "rabenseifner"): _ar_rabenseifner,
    ("all_reduce", "binomial_tree"): _ar_binomial,
    ("all_gather", "ring"): _ag_ring,
    ("all_gather", "recursive_doubling"): _ag_recursive_doubling,
    ("all_gather", "bruck"): _ag_bruck,
    ("reduce_scatter", "ring"): _rs_ring,
    ("reduce_scatter", "recursive_halving"): _rs_recursive_halving,
    ("broadcast", "linear"): _bc_linear,
    ("broadcast", "binomial_tree"): _bc_binomial,
    ("broadcast", "chain"): _bc_chain,
    ("reduce", "binomial_tree"): _rd_binomial,
    ("scatter", "linear"): _sc_linear,
    ("scatter", "binomial_tree"): _sc_binomial,
    ("gather", "linear"): _ga_linear,
    ("gather", "binomial_tree"): _ga_binomial,
    ("all_to_all", "pairwise"): _a2a_pairwise,
    ("all_to_all", "linear"): _a2a_linear,
}
assert set(_BUILDERS) == {(p, a) for p, algs in ALGORITHMS.items() for a in algs}


def _initial_provenance(primitive, n, root, C):
    bit = lambda r: 1 << r  # noqa: E731
    if primitive in ("all_reduce", "reduce", "reduce_scatter", "broadcast"):
        return [[bit(r)] * C for r in range(n)]
    if primitive in ("all_gather", "gather", "all_to_all"):
        return [[bit(r) if c == r else 0 for c in range(C)] for r in range(n)]
    if primitive == "scatter":
        return [[bit(root) if r == root else 0 for c in range(C)] for r in range(n)]
    raise ValueError(primitive)


def _expected_final(primitive, n, root, C):
    """(expected provenance of defined chunks, defined mask)."""
    full = (1 << n) - 1
    exp, defined = [], []
    for r in range(n):
        e, d = [], []
        for c in range(C):
            if primitive == "all_reduce":
                e.append(full); d.append(True)
            elif primitive == "reduce":
                e.append(full); d.append(r == root)
            elif primitive == "reduce_scatter":
                e.append(full); d.append(c == r)
            elif primitive == "broadcast":
                e.append(1 << root); d.append(True)
            elif primitive == "scatter":
                e.append(1 << root); d.append(c == r)
            elif primitive == "gather":
                e.append(1 << c); d.append(r == root)
            elif primitive in ("all_gather", "all_to_all"):
                e.append(1 << c); d.append(True)
        exp.append(e)
        defined.append(d)
    return exp, defined


def _members(mask: int) -> str:
    return "{" + ", ".join(str(b) for b in range(mask.bit_length()) if mask >> b & 1) + "}"


def schedule(primitive: str, algorithm: str | None = None, world_size: int = 4, root: int = 0,
             segments: int | None = None) -> Schedule:
    """Build the rounds of ``algorithm`` for ``primitive`` at ``world_size`` (pure Python, no ranks).

    Args:
        primitive: one of :data:`PRIMITIVES`.
        algorithm: one of ``algorithms_for(primitive)`` (default: the first).
        world_size: 1..16.
        root: src/dst rank of broadcast, reduce, scatter, gather (ignored otherwise).
        segments: broadcast only: chunks (pipeline segments) per buffer, 1..64 (default
            ``world_size``). Every other primitive has ``world_size`` chunks.

    Returns:
        :class:`Schedule` with its rounds and simulated provenance.

    Raises:
        ValueError: unknown primitive/algorithm (valid ones listed), world size outside 1..16,
            root outside 0..world_size-1, bad ``segments``.
        AssertionError: (a bug) the simulated schedule double-counts a rank, sends a chunk that
            holds nothing, or leaves an output incomplete.
    """
    algorithm = algorithm or default_algorithm(primitive)
    _check_algorithm(primitive, algorithm)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= _MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be an int from 1 to {_MAX_WORLD_SIZE}; got {world_size!r}")
    if primitive in _ROOTED:
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < world_size:
            raise ValueError(f"root {root!r} is not a rank at world size {world_size}; choose 0..{world_size - 1}")
    else:
        root = 0
    n = world_size
    C = n
    if primitive == "broadcast":
        C = n if segments is None else segments
        if isinstance(C, bool) or not isinstance(C, int) or not 1 <= C <= 64:
            raise ValueError(f"segments must be an int from 1 to 64 (chunks of the broadcast buffer); got {segments!r}")
    elif segments is not None:
        raise ValueError(f"segments applies to broadcast only; {primitive} has one chunk per rank")
    rounds = _BUILDERS[(primitive, algorithm)](n, root, C)
    prov = [row[:] for row in _initial_provenance(primitive, n, root, C)]
    history = [[row[:] for row in prov]]
    full = (1 << n) - 1
    for k, rnd in enumerate(rounds, 1):
        new = [row[:] for row in prov]
        for t in rnd.transfers:
            for sc, dc in zip(t.chunks, t.dst_chunks):
                if primitive == "all_to_all":
                    src_mask = 1 << t.src  # from the sender's input buffer
                else:
                    src_mask = prov[t.src][sc]
                assert src_mask, f"{algorithm} round {k}: rank {t.src} sends chunk {sc} that holds nothing"
                if t.reduce:
                    assert not (new[t.dst][dc] & src_mask), (
                        f"{algorithm} round {k}: rank {t.dst} would count {_members(new[t.dst][dc] & src_mask)} "
                        f"twice in chunk {dc}")
                    new[t.dst][dc] |= src_mask
                    if new[t.dst][dc] == full and primitive in _REDUCING:
                        rnd.finalize.append((t.dst, dc))
                else:
                    new[t.dst][dc] = src_mask
        prov = new
        history.append([row[:] for row in prov])
    exp, defined = _expected_final(primitive, n, root, C)
    for r in range(n):
        for c in range(C):
            if defined[r][c]:
                assert prov[r][c] == exp[r][c], (
                    f"{primitive}/{algorithm} at world size {n}: rank {r} chunk {c} ends with "
                    f"{_members(prov[r][c])}, expected {_members(exp[r][c])}")
    fold = (0, 0)
    if algorithm in ("recursive_doubling", "recursive_halving", "rabenseifner"):
        p, q, _, _ = _pof2_fold(n)
        fold = (p, q)
    return Schedule(primitive, algorithm, n, root, C, rounds, history, defined, fold)


def chunk_bounds(count: int, n_chunks: int) -> list:
    """Element offsets ``[0, ..., count]`` (``n_chunks + 1`` ints) splitting ``count`` elements into
    ``n_chunks`` contiguous chunks whose sizes differ by at most one (like ``torch.tensor_split``).
    """
    if n_chunks < 1:
        raise ValueError("n_chunks must be >= 1")
    q, r = divmod(count, n_chunks)
    out = [0]
    for c in range(n_chunks):
        out.append(out[-1] + q + (1 if c < r else 0))
    return out


# ----------------------------------------------------------------------------------------------
# Execution inside a rank

_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")


def _combine(dst: torch.Tensor, src: torch.Tensor, op: str) -> None:
    """dst <- dst (op) src, in place, in dst's dtype (bool: sum = or, product = and)."""
    if op in ("sum", "avg"):
        if dst.dtype == torch.bool:
            dst.logical_or_(src)
        else:
            dst.add_(src)
    elif op == "product":
        if dst.dtype == torch.bool:
            dst.logical_and_(src)
        else:
            dst.mul_(src)
    elif op == "min":
        torch.minimum(dst, src, out=dst)
    elif op == "max":
        torch.maximum(dst, src, out=dst)
    elif op == "band":
        dst.bitwise_and_(src)
    elif op == "bor":
        dst.bitwise_or_(src)
    elif op == "bxor":
        dst.bitwise_xor_(src)
    else:
        raise ValueError(f"unknown reduce op {op!r}; choose one of {', '.join(_OPS)}")


def _ranges(chunks, bounds):
    """Merge chunk indices into contiguous element ranges [(start, stop), ...]."""
    out = []
    for c in chunks:
        a, b = bounds[c], bounds[c + 1]
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


@dataclass
class _Plan:
    """One rank's view of a schedule: per round (sends, recvs, finalize ranges)."""
    rounds: list


def _rank_plan(sched: Schedule, rank: int, bounds: list) -> _Plan:
    out = []
    for rnd in sched.rounds:
        sends = [(t.dst, _ranges(t.chunks, bounds)) for t in rnd.transfers if t.src == rank]
        recvs = [(t.src, _ranges(t.dst_chunks, bounds), t.reduce) for t in rnd.transfers if t.dst == rank]
        fin = _ranges(sorted(c for (r, c) in rnd.finalize if r == rank), bounds)
        out.append((sends, recvs, fin))
    return _Plan(out)


def _gather_ranges(buf: torch.Tensor, ranges) -> torch.Tensor:
    if len(ranges) == 1:
        a, b = ranges[0]
        return buf[a:b]
    return torch.cat([buf[a:b] for a, b in ranges])


def _padding_pairs(counts: list) -> list:
    """Dummy messages ``[(src, dst), ...]`` that give every rank the same number of point-to-point
    calls: rank ``r`` made ``counts[r]`` (sends + receives); each dummy message adds one call to
    two different ranks. Deterministic, so every rank computes the same list."""
    n = len(counts)
    if n < 2:
        return []
    if sum(counts) % 2:
        raise ValueError("counts of sends + receives always add up to an even number (each message is "
                         f"counted at both ends); got {counts}")
    target = max(counts)
    for _ in range(2 * n + 4):  # raising the target by 1 adds n-1 to the others' sum, 1 to the max
        d = [target - c for c in counts]
        if sum(d) % 2 == 0 and 2 * max(d) <= sum(d):
            break
        target += 1
    else:  # pragma: no cover - unreachable for even sums
        raise AssertionError(f"no padding found for {counts}")
    pairs = []
    while any(d):
        order = sorted(range(n), key=lambda r: (-d[r], r))
        a, b = order[0], order[1]
        pairs.append((a, b))
        d[a] -= 1
        d[b] -= 1
    return pairs


def _detail_mode() -> bool:
    try:
        return dist.get_debug_level() == dist.DebugLevel.DETAIL
    except Exception:  # noqa: BLE001 - older/odd builds: assume not
        return False


_SCRATCH: dict = {}

#: Messages larger than twice this many bytes travel as segments of this size, each its own
#: isend/irecv; a receiver that combines starts reducing the first segment while the next ones
#: are still arriving (the overlap gloo's own ring uses, gloo/allreduce.cc). Set it to ``None`` to
#: send every message whole.
SEGMENT_BYTES: int | None = 1 << 20
#: Forward ranges that arrive complete and go out unchanged next round as they arrive (gloo only;
#: see :func:`execute`). ``False`` runs the rounds strictly one after the other.
FORWARD: bool = True
_TAG_STRIDE = 1 << 12  # tags: round * stride + segment


def _segments(n: int, esize: int) -> list:
    """``[(start, stop), ...]`` element ranges of one message of ``n`` elements (sender and
    receiver compute the same split from the same length)."""
    seg = SEGMENT_BYTES
    if not seg or n * esize <= 2 * seg:
        return [(0, n)]
    per = max(1, seg // esize, -(-n // (_TAG_STRIDE - 1)))
    return [(a, min(a + per, n)) for a in range(0, n, per)]


def _scratch(n: int, dtype, device) -> torch.Tensor:
    """A receive buffer of ``n`` elements, reused across calls (one per dtype and device, grown
    to the largest size asked): a fresh large allocation costs page faults on every call."""
    key = (dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < n:
        buf = _SCRATCH[key] = torch.empty(n, dtype=dtype, device=device)
    return buf[:n]


def execute(sched: Schedule, work: torch.Tensor, *, op: str = "sum", send_from: torch.Tensor | None = None,
            record: bool = False, bounds: Sequence[int] | None = None, group=None) -> dict:
    """Run ``sched`` on this rank's 1-D ``work`` tensor in place, with ``isend``/``irecv``.

    Call it on every rank of the launch (inside the function you give
    :func:`collnb.launcher.launch`), with the same schedule.

    Messages above ``2 * SEGMENT_BYTES`` travel as segments of :data:`SEGMENT_BYTES`; a
    receiver that combines reduces each segment as it arrives, and on gloo a range that arrives
    complete and is sent on unchanged in the next round (the ring) is forwarded segment by
    segment as it arrives, so consecutive rounds overlap as in gloo's own ring
    (gloo ``gloo/allreduce.cc``). The rounds' results are the same; only their timing overlaps.

    Args:
        sched: from :func:`schedule`; its world size must equal the process group's.
        work: this rank's contiguous 1-D buffer (any dtype the backend sends), updated in place.
            Split into ``sched.n_chunks`` chunks by ``bounds``.
        op: reduce op name (``"sum"``, ``"product"``, ``"min"``, ``"max"``, ``"avg"``, ``"band"``,
            ``"bor"``, ``"bxor"``); used by reducing rounds. ``"avg"`` sums and divides each
            chunk by the world size in the round its sum completes (the data stays in ``work``'s
            dtype, as gloo's AVG does).
        send_from: all_to_all only: the input buffer the rank sends from (same layout as ``work``).
        record: keep what every round changed: a copy of ``work`` before the first round, and
            after each round a copy of the element ranges this rank received into (costs as many
            bytes of copies as the rank receives; :func:`snapshots` rebuilds the buffer after
            every round from them).
        bounds: ``n_chunks + 1`` element offsets (default :func:`chunk_bounds` of ``work``).
        group: process group to send on (default: the default group).

    Returns:
        dict: ``seconds`` (list of per-round wall seconds on this rank); with ``record=True`` also
        ``initial`` (copy of ``work`` before round 1) and ``changes`` (list of
        ``(round, start, stop, tensor)``: the elements ``start:stop`` of ``work`` after that
        round). Pass it to :func:`snapshots` for a ``(rounds + 1, work.numel())`` tensor.

    Raises:
        ValueError: world size mismatch, non-contiguous ``work``, unknown op.
    """
    rank = dist.get_rank(group)
    ws = dist.get_world_size(group)
    if ws != sched.world_size:
        raise ValueError(f"schedule is for world size {sched.world_size} but the process group has {ws} ranks")
    if work.dim() != 1 or not work.is_contiguous():
        raise ValueError("work must be a contiguous 1-D tensor; pass tensor.view(-1) of a contiguous tensor")
    if op not in _OPS:
        raise ValueError(f"unknown reduce op {op!r}; choose one of {', '.join(_OPS)}")
    if bounds is None:
        bounds = chunk_bounds(work.numel(), sched.n_chunks)
    plan = _rank_plan(sched, rank, list(bounds))
    src_buf = work if send_from is None else send_from
    # one scratch buffer, as large as the largest round's receives that need one
    need = 0
    for sends, recvs, _ in plan.rounds:
        tot = 0
        send_spans = [rg for _, rgs in sends for rg in rgs] if send_from is None else []
        for _, rgs, red in recvs:
            n = sum(b - a for a, b in rgs)
            if red or len(rgs) > 1 or any(a < d and c < b for a, b in rgs for c, d in send_spans):
                tot += n
        need = max(need, tot)
    scratch = _scratch(need, work.dtype, work.device) if need else None
    initial = work.clone() if record else None
    changes = []
    seconds = []
    esize = work.element_size()
    # Forwarding: a range that arrives complete in round k and is sent on unchanged in round k+1
    # (the ring passes each chunk on) goes out segment by segment as it arrives, so the next
    # round's transfer overlaps this one's, as in gloo's ring. gloo only (NCCL orders p2p per
    # stream), not for AVG (its division ends the round) nor all_to_all (sends from its input).
    forward_ok = FORWARD and send_from is None and op != "avg" and dist.get_backend(group) == "gloo"
    early_reqs: dict = {}
    early_posted: dict = {}
    for k, (sends, recvs, fin) in enumerate(plan.rounds, 1):
        t0 = time.perf_counter()
        reqs = early_reqs.pop(k, [])
        posted = early_posted.pop(k, set())
        for dst, rgs in sends:
            if (dst, tuple(rgs)) in posted:
                continue
            msg = _gather_ranges(src_buf, rgs)
            for s, (a, b) in enumerate(_segments(msg.numel(), esize)):
                reqs.append(dist.isend(msg[a:b], dst, group=group, tag=k * _TAG_STRIDE + s))
        send_spans = [rg for _, rgs in sends for rg in rgs] if send_from is None else []
        next_sends = plan.rounds[k][0] if forward_ok and k < len(plan.rounds) else []
        recv_spans = [rg for _, rgs, _ in recvs for rg in rgs]
        pending = []
        streamed = []  # single-range receives handled segment by segment as they arrive
        off = 0
        for src, rgs, red in recvs:
            n = sum(b - a for a, b in rgs)
            overlap = any(a < d and c < b for a, b in rgs for c, d in send_spans)
            if red or len(rgs) > 1 or overlap:
                buf = scratch[off:off + n]
                off += n
            else:
                a, b = rgs[0]
                buf = work[a:b]
            segs = _segments(n, esize)
            seg_reqs = [dist.irecv(buf[a:b], src, group=group, tag=k * _TAG_STRIDE + s)
                        for s, (a, b) in enumerate(segs)]
            forward = []
            if len(rgs) == 1 and not overlap:
                ra, rb = rgs[0]
                alone = sum(1 for c, d in recv_spans if c < rb and ra < d) == 1
                forward = [dst for dst, nrgs in next_sends if alone and len(nrgs) == 1 and nrgs[0] == (ra, rb)]
            if (red or forward) and len(rgs) == 1 and not overlap:
                streamed.append((seg_reqs, segs, buf, rgs[0], red, forward))
            else:
                reqs.extend(seg_reqs)
                if red or len(rgs) > 1 or overlap:
                    pending.append((buf, rgs, red))
        for seg_reqs, segs, buf, (ra, rb), red, forward in streamed:
            for s, (req, (a, b)) in enumerate(zip(seg_reqs, segs)):
                req.wait()
                if red:
                    _combine(work[ra + a:ra + b], buf[a:b], op)
                for dst in forward:  # this segment is final: send it on for round k+1 now
                    early_reqs.setdefault(k + 1, []).append(
                        dist.isend(work[ra + a:ra + b], dst, group=group, tag=(k + 1) * _TAG_STRIDE + s))
            for dst in forward:
                early_posted.setdefault(k + 1, set()).add((dst, ((ra, rb),)))
        for req in reqs:
            req.wait()
        for buf, rgs, red in pending:
            o = 0
            for a, b in rgs:
                piece = buf[o:o + (b - a)]
                if red:
                    _combine(work[a:b], piece, op)
                else:
                    work[a:b].copy_(piece)
                o += b - a
        if op == "avg":
            for a, b in fin:
                work[a:b].div_(ws)
        seconds.append(time.perf_counter() - t0)
        if record:
            for _, rgs, _ in recvs:
                for a, b in rgs:
                    changes.append((k, a, b, work[a:b].clone()))
    if _detail_mode():
        # Under TORCH_DISTRIBUTED_DEBUG=DETAIL every isend/irecv advances the group's sequence
        # number, and the next built-in collective fails its consistency check if the ranks made
        # different numbers of point-to-point calls (a tree, a chain, a fold). Pad with one-element
        # messages so every rank ends with the same count; they are not part of the algorithm
        # and are not in the trace.
        counts = [0] * ws
        for rnd in sched.rounds:
            for t in rnd.transfers:
                counts[t.src] += 1
                counts[t.dst] += 1
        pad = _padding_pairs(counts)
        if pad:
            one = torch.zeros(1, dtype=torch.uint8, device=work.device)
            sink = [torch.empty(1, dtype=torch.uint8, device=work.device) for _ in pad]
            reqs = []
            tag = (len(sched.rounds) + 1) * _TAG_STRIDE
            for i, (a, b) in enumerate(pad):
                if a == rank:
                    reqs.append(dist.isend(one, b, group=group, tag=tag))
                elif b == rank:
                    reqs.append(dist.irecv(sink[i], a, group=group, tag=tag))
            for req in reqs:
                req.wait()
    out = {"seconds": seconds}
    if record:
        out.update(initial=initial, changes=changes, n_rounds=len(plan.rounds))
    return out


def snapshots(recording: dict) -> torch.Tensor:
    """Every round's buffer from what :func:`execute` recorded (``record=True``).

    Returns:
        tensor ``(rounds + 1, numel)``: row 0 the buffer before round 1, row ``k`` after round ``k``.

    Raises:
        ValueError: the result was not recorded.
    """
    if recording.get("initial") is None:
        raise ValueError("nothing recorded: call execute(..., record=True)")
    cur = recording["initial"].clone()
    rows = [cur.clone()]
    changes = sorted(recording["changes"], key=lambda c: c[0])
    i = 0
    for k in range(1, recording["n_rounds"] + 1):
        while i < len(changes) and changes[i][0] == k:
            _, a, b, t = changes[i]
            cur[a:b] = t
            i += 1
        rows.append(cur.clone())
    return torch.stack(rows)


_SCHED_CACHE: dict = {}


def _cached_schedule(primitive, algorithm, world_size, root=0, segments=None) -> Schedule:
    key = (primitive, algorithm, world_size, root, segments)
    if key not in _SCHED_CACHE:
        _SCHED_CACHE[key] = schedule(primitive, algorithm, world_size, root, segments)
    return _SCHED_CACHE[key]


def all_reduce(tensor: torch.Tensor, op: str = "sum", algorithm: str = "ring", *, record: bool = False,
               group=None) -> dict:
    """``dist.all_reduce(tensor, op)`` built from ``isend``/``irecv`` with the chosen algorithm.

    Call on every rank inside a launched function. ``tensor`` (contiguous, any shape) is reduced
    in place; its elements are split into ``world_size`` chunks of (nearly) equal size.

    Args:
        tensor: contiguous CPU tensor (on NCCL: this rank's GPU).
        op: ``"sum"``, ``"product"``, ``"min"``, ``"max"``, ``"avg"`` (floating dtypes),
            ``"band"``/``"bor"``/``"bxor"`` (integer/bool dtypes).
        algorithm: ``"ring"``, ``"recursive_doubling"``, ``"rabenseifner"`` or ``"binomial_tree"``.
        record: also record what every round changed (see :func:`execute`, :func:`snapshots`).

    Returns:
        :func:`execute`'s dict (per-round seconds; with ``record`` the recording).

    Raises:
        ValueError: unknown algorithm/op, non-contiguous tensor.
    """
    if not tensor.is_contiguous():
        raise ValueError("tensor must be contiguous (call .contiguous() first, then copy the result back)")
    sched = _cached_schedule("all_reduce", algorithm, dist.get_world_size(group))
    return execute(sched, tensor.view(-1), op=op, record=record, group=group)


# ----------------------------------------------------------------------------------------------
# Built-in collectives on the same layout (for comparison)

def _builtin(primitive: str, rank: int, ws: int, inp: torch.Tensor, op: str, root: int, C: int) -> torch.Tensor:
    """The built-in torch.distributed collective on ``inp`` (this rank's input in our layout),
    its result laid out like our working buffer (chunk j = slot j)."""
    rop = getattr(dist.ReduceOp, op.upper())
    if primitive == "all_reduce":
        t = inp.clone()
        dist.all_reduce(t, op=rop)
        return t
    if primitive == "reduce":
        t = inp.clone()
        dist.reduce(t, dst=root, op=rop)
        return t
    if primitive == "broadcast":
        t = inp.clone()
        dist.broadcast(t, src=root)
        return t
    blocks = list(inp.chunk(ws)) if ws > 1 else [inp]
    e = inp.numel() // ws
    if primitive == "all_gather":
        out = [torch.zeros_like(blocks[0]) for _ in range(ws)]
        dist.all_gather(out, blocks[rank].contiguous())
        return torch.cat(out)
    if primitive == "reduce_scatter":
        out = torch.zeros(e, dtype=inp.dtype, device=inp.device)
        dist.reduce_scatter(out, [b.contiguous() for b in blocks], op=rop)
        res = torch.zeros_like(inp)
        res[rank * e:(rank + 1) * e] = out
        return res
    if primitive == "scatter":
        out = torch.zeros(e, dtype=inp.dtype, device=inp.device)
        dist.scatter(out, [b.contiguous() for b in blocks] if rank == root else None, src=root)
        res = torch.zeros_like(inp)
        res[rank * e:(rank + 1) * e] = out
        return res
    if primitive == "gather":
        out = [torch.zeros_like(blocks[0]) for _ in range(ws)] if rank == root else None
        dist.gather(blocks[rank].contiguous(), out, dst=root)
        return torch.cat(out) if rank == root else torch.zeros_like(inp)
    if primitive == "all_to_all":
        out = torch.zeros_like(inp)
        dist.all_to_all_single(out, inp)
        return out
    raise ValueError(primitive)


def _start_buffer(primitive, rank, ws, inp, C, bounds):
    if primitive == "all_to_all":
        work = torch.zeros_like(inp)
        a, b = bounds[rank], bounds[rank + 1]
        work[a:b] = inp[a:b]
        return work
    return inp.clone()


def _rank_run_cases(rank: int, world_size: int, cases: list) -> list:
    """Rank side of :func:`run_algorithms`: run every case (schedule + input) and, if asked, the
    built-in collective on the same input. Returns one dict per case."""
    out = []
    # NCCL: rank r works on its GPU (the launcher set it); results come back to the caller on CPU.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    for case in cases:
        sched: Schedule = case["schedule"]
        inp = case["inputs"][rank].to(device=device, copy=True) if device is not None else case["inputs"][rank].clone()
        bounds = case["bounds"]
        work = _start_buffer(sched.primitive, rank, world_size, inp, sched.n_chunks, bounds)
        res = execute(sched, work, op=case["op"], record=case["record"], bounds=bounds,
                      send_from=inp if sched.primitive == "all_to_all" else None)
        item = {"final": work, "seconds": res["seconds"], "builtin": None,
                "recording": {k: res[k] for k in ("initial", "changes", "n_rounds")} if case["record"] else None}
        if case["compare"]:
            item["builtin"] = _builtin(sched.primitive, rank, world_size, inp, case["op"], sched.root,
                                       sched.n_chunks)
        out.append(item)
    return out


# ----------------------------------------------------------------------------------------------
# Inputs, validation and the caller side

def _dtype(dtype) -> torch.dtype:
    from ..collectives import dtype_name
    return getattr(torch, dtype_name(dtype if dtype is not None else torch.float32))


def _op(op, primitive) -> str:
    from ..collectives import op_name
    name = op_name(op)
    if primitive not in _REDUCING and name != "sum":
        raise ValueError(f"{primitive} does not combine values, so it takes no reduce op (got op={op!r}); "
                         f"ops apply to {', '.join(_REDUCING)}")
    return name


def teaching_buffers(primitive: str, world_size: int, n_chunks: int, chunk_size: int = 1, root: int = 0,
                     dtype=torch.float32) -> torch.Tensor:
    """The teaching inputs in this module's layout: a ``(world_size, n_chunks * chunk_size)`` tensor.

    Values are :func:`collnb.primitives.teaching_value` (``10*rank + chunk``; ``100*rank + chunk``
    above world size 10), made as int64 and cast to ``dtype`` (integers wrap, as in
    :mod:`collnb.primitives`):

    * all_reduce, reduce, reduce_scatter, all_to_all, broadcast: rank ``r`` chunk ``c`` holds
      ``teaching_value(r, c)`` (broadcast's non-root ranks hold theirs until overwritten);
    * all_gather, gather: rank ``r`` holds ``teaching_value(r, 0)`` in its own slot ``r``, zeros
      elsewhere (the empty output slots);
    * scatter: the root holds ``teaching_value(root, c)`` in chunk ``c``; other ranks zeros.
    """
    from ..collectives import teaching_value
    vals = torch.zeros(world_size, n_chunks, dtype=torch.int64)
    for r in range(world_size):
        for c in range(n_chunks):
            if primitive in ("all_gather", "gather"):
                v = teaching_value(r, 0, world_size) if c == r else 0
            elif primitive == "scatter":
                v = teaching_value(root, c, world_size) if r == root else 0
            else:
                v = teaching_value(r, c, world_size)
            vals[r, c] = v
    return vals.repeat_interleave(chunk_size, dim=1).to(_dtype(dtype))


_BUILTIN_NAME = {"all_to_all": "all_to_all_single"}


def _holds_input(primitive, rank, chunk, root) -> bool:
    """Whether chunk ``chunk`` of ``rank``'s starting buffer is an input (else an empty output slot)."""
    if primitive in ("all_gather", "gather"):
        return chunk == rank
    if primitive == "scatter":
        return rank == root
    return True


def _validate_backend(primitive, dt, op, backend):
    from ..collectives import backend_support
    sup = backend_support(backend)
    name = _BUILTIN_NAME.get(primitive, primitive)
    dname = str(dt).replace("torch.", "")
    o = op if primitive in _REDUCING else None
    if sup.supports(name, dname, o):
        return
    valid_d = sup.dtypes(name)
    if dname not in valid_d:
        raise ValueError(f"{backend} cannot run {name} on {dname} tensors (detected on real ranks); "
                         f"dtypes it accepts: {', '.join(valid_d)}")
    valid_o = sup.ops(name, dname)
    why = ""
    if op == "avg" and not (dt.is_floating_point or dt.is_complex):
        why = " AVG divides by the world size, so it needs a floating-point dtype."
    elif op in ("band", "bor", "bxor"):
        why = " Bitwise ops need an integer or bool dtype."
    raise ValueError(f"{backend} cannot reduce {dname} with op {op.upper()} (detected on real ranks: "
                     f"{sup.error(name, dname, o)}).{why} Valid ops for {dname}: "
                     f"{', '.join(x.upper() for x in valid_o)}")


def _prepare_case(primitive, algorithm, world_size, dtype, op, root, chunk_size, segments, inputs,
                  snapshots, compare, backend, validate=True):
    algorithm = algorithm or default_algorithm(primitive)
    sched = schedule(primitive, algorithm, world_size, root, segments)
    dt = _dtype(dtype)
    opn = _op(op, primitive)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 1 <= chunk_size <= 1 << 22:
        raise ValueError(f"chunk_size must be an int from 1 to {1 << 22} (elements per chunk); got {chunk_size!r}")
    if validate:
        _validate_backend(primitive, dt, opn, backend)
    C = sched.n_chunks
    count = C * chunk_size
    if inputs is None:
        inp = teaching_buffers(primitive, world_size, C, chunk_size, sched.root, dt)
    else:
        if callable(inputs):
            from ..collectives import _make_tensor  # noqa: PLC0415 - one cast rule for the project
            rows = [_make_tensor([inputs(r, c) if _holds_input(primitive, r, c, sched.root) else 0
                                  for c in range(C)], chunk_size, dt) for r in range(world_size)]
            inp = torch.stack(rows)
        else:
            inp = torch.as_tensor(inputs)
            if inp.dtype != dt:
                inp = inp.to(dt)
        if tuple(inp.shape) != (world_size, count):
            raise ValueError(f"inputs must have shape (world_size, n_chunks * chunk_size) = ({world_size}, {count}) "
                             f"for {primitive} at world size {world_size}; got {tuple(inp.shape)}. Or pass a "
                             f"callable f(rank, chunk) -> value")
    return dict(schedule=sched, inputs=inp.contiguous(), bounds=chunk_bounds(count, C), op=opn,
                record=bool(snapshots), compare=bool(compare), dtype=dt, chunk_size=chunk_size)


def _make_trace(case, results, backend, wall):
    from .trace import Trace
    sched = case["schedule"]
    n = sched.world_size
    snaps = None
    if case["record"]:
        snaps = torch.stack([snapshots(results[r]["recording"]) for r in range(n)], dim=1)  # (R+1, ws, count)
    final = torch.stack([results[r]["final"] for r in range(n)])
    builtin = torch.stack([results[r]["builtin"] for r in range(n)]) if case["compare"] else None
    secs = [max(results[r]["seconds"][k] for r in range(n)) for k in range(sched.n_rounds)]
    return Trace.from_schedule(sched, inputs=case["inputs"], bounds=case["bounds"], op=case["op"],
                               dtype=case["dtype"], buffers=snaps, final=final, builtin=builtin,
                               round_seconds=secs, backend=backend, wall_seconds=wall)


def run_algorithm(primitive: str, algorithm: str | None = None, world_size: int = 4, dtype=torch.float32,
                  op="sum", root: int = 0, *, chunk_size: int = 1, segments: int | None = None, inputs=None,
                  snapshots: bool = True, compare: bool = True, backend: str = "gloo", timeout: float = 60.0,
                  debug: bool = True):
    """Run one collective algorithm on real ranks and return its :class:`collnb.trace.Trace`.

    The ranks are launched with :func:`collnb.launcher.launch`; each runs the algorithm's
    schedule with ``isend``/``irecv`` on its own copy of the input and (``compare=True``) the
    built-in ``torch.distributed`` collective on the same input, in the same launch.

    Args:
        primitive: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"broadcast"``,
            ``"reduce"``, ``"scatter"``, ``"gather"`` or ``"all_to_all"``.
        algorithm: one of :func:`algorithms_for` ``(primitive)`` (default: the first).
        world_size: number of ranks, 1..16.
        dtype: ``torch.dtype`` or its name; must be one the backend accepts for the primitive
            (detected on real ranks by :func:`collnb.primitives.backend_support`).
        op: reduce op for all_reduce, reduce_scatter, reduce: sum, product, min, max, avg (floating
            dtypes), band/bor/bxor (integer and bool dtypes). Other primitives take no op.
        root: src/dst rank for broadcast, reduce, scatter, gather.
        chunk_size: elements per chunk (the buffer has ``n_chunks * chunk_size`` elements).
        segments: broadcast only: number of chunks (pipeline segments), default ``world_size``.
        inputs: ``None`` for the teaching inputs (:func:`teaching_buffers`), a
            ``(world_size, n_chunks * chunk_size)`` tensor/array, or a callable
            ``f(rank, chunk) -> number`` (every element of the chunk gets the value; it is called
            only for chunks that are inputs -- slot ``rank`` for all_gather/gather, the root's
            chunks for scatter -- and the other slots start at 0).
        snapshots: record every rank's buffer after every round (``Trace.buffers``); with
            ``False`` only the final buffers and the per-round times are kept.
        compare: also run the built-in collective and keep its result (``Trace.builtin``).
        backend, timeout, debug: passed to :func:`collnb.launcher.launch`.

    Returns:
        :class:`collnb.trace.Trace`.

    Raises:
        ValueError / TypeError: unknown primitive, algorithm, dtype or op, a dtype/op the
            backend refuses, root or world size out of range, inputs of the wrong shape.
        collnb.launcher.RankError / LaunchTimeout: a rank failed or the launch timed out.
    """
    return run_algorithms([dict(primitive=primitive, algorithm=algorithm, dtype=dtype, op=op, root=root,
                                chunk_size=chunk_size, segments=segments, inputs=inputs, snapshots=snapshots,
                                compare=compare)], world_size, backend=backend, timeout=timeout, debug=debug)[0]


def run_algorithms(configs: Sequence[dict], world_size: int, *, backend: str = "gloo", timeout: float = 120.0,
                   debug: bool = True, validate: bool = True) -> list:
    """Run many algorithm cases at one world size in a single launch (what the tests use).

    Args:
        configs: dicts with the keyword arguments of :func:`run_algorithm` (``primitive`` required;
            ``algorithm``, ``dtype``, ``op``, ``root``, ``chunk_size``, ``segments``, ``inputs``,
            ``snapshots``, ``compare`` optional).
        world_size, backend, timeout, debug: as for :func:`run_algorithm`.
        validate: check each dtype/op against what the backend accepts before launching.

    Returns:
        list of :class:`collnb.trace.Trace`, one per config, in order.
    """
    from ..ranks import launch
    allowed = {"primitive", "algorithm", "dtype", "op", "root", "chunk_size", "segments", "inputs", "snapshots",
               "compare"}
    cases = []
    for cfg in configs:
        extra = set(cfg) - allowed
        if extra:
            raise TypeError(f"unknown keys {sorted(extra)} in config; allowed: {sorted(allowed)}")
        if "primitive" not in cfg:
            raise TypeError("each config needs a 'primitive'")
        cases.append(_prepare_case(cfg["primitive"], cfg.get("algorithm"), world_size, cfg.get("dtype", torch.float32),
                                   cfg.get("op", "sum"), cfg.get("root", 0), cfg.get("chunk_size", 1),
                                   cfg.get("segments"), cfg.get("inputs"), cfg.get("snapshots", True),
                                   cfg.get("compare", True), backend, validate))
    ship = [{k: v for k, v in c.items() if k not in ("dtype", "chunk_size")} for c in cases]
    t0 = time.perf_counter()
    results = launch(_rank_run_cases, world_size, args=(ship,), backend=backend, timeout=timeout, debug=debug)
    wall = time.perf_counter() - t0
    return [_make_trace(c, [results[r][i] for r in range(world_size)], backend, wall / len(cases))
            for i, c in enumerate(cases)]
