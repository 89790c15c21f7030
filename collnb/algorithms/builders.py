"""The schedule of every collective algorithm, built round by round as plain data.

One function per algorithm (``_ar_ring``, ``_bc_chain``, ...), registered in :data:`BUILDERS`
under ``(primitive, algorithm)``: ``builder(world_size, root, n_chunks)`` returns the list of
:class:`~collnb.algorithms.rounds.Round` in order. A builder whose buffer is not one chunk per rank
says so in :data:`N_CHUNKS` with ``n_chunks(world_size)`` (Rabenseifner: ``p'`` chunks).
:func:`collnb.algorithms.schedule` calls them and checks the result by simulation. Pure Python: no torch.

Buffers are rows of ``n_chunks`` chunks; chunk ``j`` is the slot of rank ``j`` except for
broadcast, whose chunks are the pipeline's segments, and Rabenseifner's all_reduce, whose ``p'``
chunks are the parts its reduce-scatter splits the buffer into. The non-power-of-two *fold* and *unfold*
rounds of recursive doubling/halving and Rabenseifner follow Thakur, Rabenseifner & Gropp (2005);
see :mod:`collnb.algorithms.schedules` for the layout and the sources.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

from ..i18n import N_, later
from .rounds import Round, Transfer

__all__ = ["BUILDERS", "N_CHUNKS", "Builder", "pof2_fold", "rabenseifner_chunks"]

#: ``builder(world_size, root, n_chunks)`` -> the rounds of one algorithm, in order.
Builder: TypeAlias = Callable[[int, int, int], list[Round]]


def pof2_fold(n: int) -> tuple[int, int, list[int], list[tuple[int, ...]]]:
    """The non-power-of-two fold of ``n`` ranks: ``(p, q, old_of_new, members)`` with ``p`` the
    largest power of two <= ``n`` and ``q = n - p`` folded ranks; new rank ``i`` is old rank
    ``old_of_new[i]`` and stands for the old ranks ``members[i]`` (Thakur et al. 2005)."""
    p = 1 << (n.bit_length() - 1)
    q = n - p
    old_of_new: list[int] = []
    members: list[tuple[int, ...]] = []
    for i in range(p):
        if i < q:
            old_of_new.append(2 * i + 1)
            members.append((2 * i, 2 * i + 1))
        else:
            old_of_new.append(i + q)
            members.append((i + q,))
    return p, q, old_of_new, members


def _rng(start: int, stop: int) -> tuple[int, ...]:
    return tuple(range(start, stop))


def _groups(n_chunks: int, p: int) -> list[tuple[int, ...]]:
    """Split chunks 0..n_chunks-1 into p contiguous, balanced groups (sizes differ by at most 1)."""
    return [_rng(i * n_chunks // p, (i + 1) * n_chunks // p) for i in range(p)]


def _T(src: int, dst: int, chunks: Iterable[int], reduce: bool = False,
       dst_chunks: Iterable[int] | None = None) -> Transfer:
    """A :class:`Transfer` of ``chunks`` (written to the same chunks at ``dst`` unless ``dst_chunks``)."""
    read = tuple(chunks)
    return Transfer(src, dst, read, tuple(dst_chunks) if dst_chunks is not None else read, reduce)


#: Default words of the fold/unfold rounds (translated where a round is built).
_THEIR_BUFFER = N_("their whole buffer")
_THE_RESULT = N_("the result")


def _fold_rounds(n: int, C: int, reduce: bool, what: str = _THEIR_BUFFER) -> list[Round]:
    """The fold round of ``n`` ranks (none at a power of two): even ranks below ``2q`` send ``what``
    (untranslated words) to rank+1."""
    p, q, old, members = pof2_fold(n)
    if q == 0:
        return []
    ts = [_T(2 * i, 2 * i + 1, range(C), reduce) for i in range(q)]
    verb = later("combines it with its own") if reduce else later("keeps it")
    return [Round("fold", later("{n} is not a power of two: ranks 0..{last} (even) send {what} to rank+1, which {verb}; "
                                "they sit out until the unfold round, leaving {p} active ranks",
                                n=n, last=2 * q - 2, what=later(what), verb=verb, p=p), ts)]


def _unfold_round(n: int, C_of_even: Callable[[int], Iterable[int]], what: str = _THE_RESULT) -> list[Round]:
    """The unfold round of ``n`` ranks (none at a power of two): rank ``2i+1`` sends chunks
    ``C_of_even(2i)`` back to rank ``2i``."""
    p, q, old, members = pof2_fold(n)
    if q == 0:
        return []
    ts = [_T(2 * i + 1, 2 * i, C_of_even(2 * i)) for i in range(q)]
    return [Round("unfold", later("ranks 1..{last} (odd) send {what} back to the ranks that sat out",
        last=2 * q - 1, what=later(what)), ts)]


# -- all_reduce ---------------------------------------------------------------------------------

def _ar_ring(n: int, root: int, C: int) -> list[Round]:
    rounds = []
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k - 1) % n], True) for r in range(n)]
        rounds.append(Round("reduce-scatter", later("step {step}/{steps}: rank r sends chunk (r-{step}) mod {n} to "
                                                    "rank r+1, which combines it into its own copy",
                                                    step=k + 1, steps=n - 1, n=n), ts))
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k) % n]) for r in range(n)]
        rounds.append(Round("all-gather", later("step {step}/{steps}: rank r passes the finished chunk (r-{k}) "
                                                "mod {n} to rank r+1, which overwrites its copy",
                                                step=k + 1, steps=n - 1, k=k, n=n), ts))
    return rounds


def _ar_recursive_doubling(n: int, root: int, C: int) -> list[Round]:
    p, q, old, members = pof2_fold(n)
    rounds = _fold_rounds(n, C, True)
    m = 1
    while m < p:
        ts = [_T(old[i], old[i ^ m], range(C), True) for i in range(p)]
        rounds.append(Round("exchange", later("distance {m}: every active rank swaps its whole buffer with the rank "
                                              "whose new number differs in bit {bit}, and both combine",
                                              m=m, bit=m.bit_length() - 1), ts))
        m <<= 1
    return rounds + _unfold_round(n, lambda r: range(C))


def _rs_halving(p: int, old: Sequence[int], groups_of: Sequence[Sequence[int]],
                reduce_label: str = "reduce-scatter") -> list[Round]:
    """Recursive halving over p (power of two) new ranks: distance p/2, p/4, ..., 1. Returns rounds;
    afterwards new rank i holds the complete reduction of groups_of[i]."""
    rounds = []
    resp = [set(range(p)) for _rank in range(p)]  # groups each new rank is still responsible for
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
        rounds.append(Round(reduce_label, later("recursive halving step {step}/{total}, distance {m}: each rank sends "
                                                "the half it is no longer responsible for to its partner, which "
                                                "combines it", step=step, total=total, m=m), ts))
        m //= 2
        step += 1
    return rounds


def _ag_doubling(p: int, old: Sequence[int], groups_of: Sequence[Sequence[int]],
                 label: str = "all-gather") -> list[Round]:
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
        rounds.append(Round(label, later("recursive doubling step {step}/{total}, distance {m}: each rank sends "
                                         "everything it has gathered to its partner; the data held doubles",
                                         step=step, total=total, m=m), ts))
        m <<= 1
        step += 1
    return rounds


def _ar_rabenseifner(n: int, root: int, C: int) -> list[Round]:
    """Rabenseifner's all_reduce (Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005, section 4):
    at a non-power of two the fold leaves ``p'`` ranks, and the buffer is cut into ``p'`` equal parts
    (``C = p'`` chunks, :func:`rabenseifner_chunks`), so every halving step moves exactly half of
    what a rank still holds and the cost is the closed form of :mod:`collnb.costmodel`."""
    p, q, old, members = pof2_fold(n)
    groups = _groups(C, p)
    rounds = _fold_rounds(n, C, True)
    rounds += _rs_halving(p, old, groups)
    rounds += _ag_doubling(p, old, groups)
    return rounds + _unfold_round(n, lambda r: range(C))


def rabenseifner_chunks(n: int) -> int:
    """Chunks of Rabenseifner's all_reduce buffer at world size ``n``: ``p'``, the largest power of
    two <= ``n`` (the ranks left after the fold; MPICH's ``MPIR_Allreduce`` reduce-scatter/allgather
    splits the count over ``pof2`` the same way)."""
    return pof2_fold(n)[0]



def _reduce_binomial(n: int, root: int, C: int, label: str = "reduce") -> list[Round]:
    rounds = []
    m = 1
    step = 1
    total = max(1, math.ceil(math.log2(n))) if n > 1 else 0
    while m < n:
        ts = []
        for v in range(n):
            if (v & (2 * m - 1)) == m:
                ts.append(_T((v + root) % n, (v - m + root) % n, range(C), True))
        rounds.append(Round(label, later("binomial tree step {step}/{total}: ranks at relative position "
                                         "{m} mod {twice} send their partial result {m} ranks down the tree",
                                         step=step, total=total, m=m, twice=2 * m), ts))
        m <<= 1
        step += 1
    return rounds


def _bcast_binomial(n: int, root: int, C: int, label: str = "broadcast",
                    chunks_for: Callable[[int, int], Iterable[int]] | None = None) -> list[Round]:
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
        what = later("the whole buffer") if chunks_for is None else later("the chunks of the receiver's subtree")
        rounds.append(Round(label, later("binomial tree step {step}/{steps}: every rank that has the data sends {what} "
                                         "{m} ranks further (relative to the root); the ranks holding it double",
                                         step=k + 1, steps=L, what=what, m=m), ts))
    return rounds


def _ar_binomial(n: int, root: int, C: int) -> list[Round]:
    return _reduce_binomial(n, 0, C) + _bcast_binomial(n, 0, C)


# -- all_gather ---------------------------------------------------------------------------------

def _ag_ring(n: int, root: int, C: int) -> list[Round]:
    rounds = []
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k) % n]) for r in range(n)]
        rounds.append(Round("all-gather", later("step {step}/{steps}: rank r passes block (r-{k}) mod {n} to rank r+1",
            step=k + 1, steps=n - 1, k=k, n=n), ts))
    return rounds


def _ag_recursive_doubling(n: int, root: int, C: int) -> list[Round]:
    p, q, old, members = pof2_fold(n)
    rounds = []
    if q:
        ts = [_T(2 * i, 2 * i + 1, [2 * i]) for i in range(q)]
        rounds.append(Round("fold", later("{n} is not a power of two: ranks 0..{last} (even) give their block "
                                          "to rank+1 and sit out until the unfold round, leaving {p} ranks",
                                          n=n, last=2 * q - 2, p=p), ts))
    rounds += _ag_doubling(p, old, [list(mm) for mm in members])
    return rounds + _unfold_round(n, lambda r: [c for c in range(C) if c != r], N_("every block"))


def _ag_bruck(n: int, root: int, C: int) -> list[Round]:
    rounds = []
    d = 1
    step = 1
    total = math.ceil(math.log2(n)) if n > 1 else 0
    while d < n:
        cnt = min(d, n - d)
        ts = [_T(r, (r - d) % n, sorted((r + j) % n for j in range(cnt))) for r in range(n)]
        rounds.append(Round("all-gather", later("Bruck step {step}/{total}: rank r holds blocks r, r+1, ... (mod {n}); it "
                                                "sends the first {count} of them to rank r-{d}",
                                                step=step, total=total, n=n, count=cnt, d=d), ts))
        d <<= 1
        step += 1
    return rounds


# -- reduce_scatter -----------------------------------------------------------------------------

def _rs_ring(n: int, root: int, C: int) -> list[Round]:
    rounds = []
    for k in range(n - 1):
        ts = [_T(r, (r + 1) % n, [(r - k - 1) % n], True) for r in range(n)]
        rounds.append(Round("reduce-scatter", later("step {step}/{steps}: rank r sends chunk (r-{step}) mod {n} to "
                                                    "rank r+1, which combines it; after the last step rank r holds chunk r "
                                                    "complete", step=k + 1, steps=n - 1, n=n), ts))
    return rounds


def _rs_recursive_halving(n: int, root: int, C: int) -> list[Round]:
    p, q, old, members = pof2_fold(n)
    rounds = _fold_rounds(n, C, True)
    rounds += _rs_halving(p, old, [list(mm) for mm in members])
    return rounds + _unfold_round(n, lambda r: [r], N_("the even rank's finished chunk"))


# -- broadcast ----------------------------------------------------------------------------------

def _bc_linear(n: int, root: int, C: int) -> list[Round]:
    return [Round("send", later("send {k}/{last}: the root sends the whole buffer to rank {dst}",
        k=k, last=n - 1, dst=(root + k) % n),
                  [_T(root, (root + k) % n, range(C))]) for k in range(1, n)]


def _bc_chain(n: int, root: int, C: int) -> list[Round]:
    rounds: list[Round] = []
    if n == 1:
        return rounds
    for t in range(C + n - 2):
        ts = []
        for i in range(n - 1):
            s = t - i
            if 0 <= s < C:
                ts.append(_T((root + i) % n, (root + i + 1) % n, [s]))
        rounds.append(Round("pipeline", later("time step {step}/{steps}: the i-th rank of the chain (from the "
                                              "root) forwards segment {t}-i to the next rank, all at once",
                                              step=t + 1, steps=C + n - 2, t=t), ts))
    return rounds


def _bc_binomial(n: int, root: int, C: int) -> list[Round]:
    return _bcast_binomial(n, root, C)


# -- reduce, scatter, gather ----------------------------------------------------------------------

def _rd_binomial(n: int, root: int, C: int) -> list[Round]:
    return _reduce_binomial(n, root, C)


def _sc_linear(n: int, root: int, C: int) -> list[Round]:
    return [Round("send", later("send {k}/{last}: the root sends chunk {dst} to rank {dst}",
        k=k, last=n - 1, dst=(root + k) % n),
                  [_T(root, (root + k) % n, [(root + k) % n])]) for k in range(1, n)]


def _sc_binomial(n: int, root: int, C: int) -> list[Round]:
    return _bcast_binomial(n, root, C, "scatter",
                           chunks_for=lambda lo, hi: sorted((v + root) % n for v in range(lo, hi)))


def _ga_linear(n: int, root: int, C: int) -> list[Round]:
    return [Round("send", later("send {k}/{last}: rank {src} sends its chunk to the root",
        k=k, last=n - 1, src=(root + k) % n),
                  [_T((root + k) % n, root, [(root + k) % n])]) for k in range(1, n)]


def _ga_binomial(n: int, root: int, C: int) -> list[Round]:
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
        rounds.append(Round("gather", later("binomial tree step {step}/{total}: ranks at relative position {m} mod "
                                            "{twice} send every chunk gathered so far {m} ranks down the tree",
                                            step=step, total=total, m=m, twice=2 * m), ts))
        m <<= 1
        step += 1
    return rounds


# -- all_to_all ---------------------------------------------------------------------------------

def _a2a_pairwise(n: int, root: int, C: int) -> list[Round]:
    rounds = []
    pof2 = n & (n - 1) == 0
    for k in range(1, n):
        if pof2:
            ts = [_T(r, r ^ k, [r ^ k], dst_chunks=[r]) for r in range(n)]
            how = later("rank r exchanges with rank r XOR {k}", k=k)
        else:
            ts = [_T(r, (r + k) % n, [(r + k) % n], dst_chunks=[r]) for r in range(n)]
            how = later("rank r sends to rank r+{k} and receives from rank r-{k}", k=k)
        rounds.append(Round("all-to-all", later("pairwise step {k}/{last}: {how} (one block each way)",
            k=k, last=n - 1, how=how), ts))
    return rounds


def _a2a_linear(n: int, root: int, C: int) -> list[Round]:
    if n == 1:
        return []
    ts = [_T(r, j, [j], dst_chunks=[r]) for r in range(n) for j in range(n) if j != r]
    return [Round("all-to-all", later("every rank posts all {count} sends and {count} receives at once",
        count=n - 1), ts)]


#: ``(primitive, algorithm)`` -> ``builder(world_size, root, n_chunks)`` returning the list of rounds.
BUILDERS: dict[tuple[str, str], Builder] = {
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

#: The builders whose buffer is not one chunk per rank: ``(primitive, algorithm)`` ->
#: ``n_chunks(world_size)`` (Rabenseifner: ``p'``); every other algorithm has ``world_size`` chunks.
N_CHUNKS: dict[tuple[str, str], Callable[[int], int]] = {("all_reduce", "rabenseifner"): rabenseifner_chunks}
