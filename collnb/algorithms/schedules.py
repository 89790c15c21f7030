"""Collective algorithms as schedules: the rounds of point-to-point sends that make a collective,
built as plain data for one world size and checked by simulation (pure Python, no torch).

A *collective algorithm* is a schedule of *rounds*; in every round some ranks send chunks of
their buffer to other ranks (on real ranks: ``torch.distributed.isend``/``irecv``, all posted
before any is waited on, so a round never deadlocks), and each receiver either overwrites its
chunks with what arrived (a copy) or combines them with the reduce op (a reduction).
:func:`schedule` builds the rounds of an algorithm for one world size as a :class:`Schedule` of
:class:`Transfer`, and simulates which ranks' contributions every chunk holds after every round
(*provenance*), checking on the way that no reduction counts a rank twice and that every output
ends up complete. Running a schedule on real ranks is :mod:`collnb.algorithms.execution`
(inside a launched function) and :mod:`collnb.algorithms.run` (from the caller, recorded as a
Trace).

Buffers are rows of ``n_chunks`` chunks. For all_gather, gather, scatter, reduce_scatter and
all_to_all chunk ``j`` is the slot of rank ``j`` (``world_size`` chunks); all_reduce and reduce
use ``world_size`` chunks too, except Rabenseifner's all_reduce, which uses ``p'`` chunks (below);
broadcast uses ``segments`` chunks (the pipeline's segments for ``chain``). all_to_all sends from a separate input buffer (chunk ``j`` = the data for rank ``j``)
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
``unfold``). After the fold Rabenseifner's reduce-scatter splits the buffer among the ``p``
remaining ranks, so its buffer has ``p`` chunks (one per remaining rank, equal): every halving
step sends exactly half of what a rank still holds.

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

import functools
from collections.abc import Collection, Sequence

from ..collectives import REDUCING_PRIMITIVES, ROOTED_PRIMITIVES
from ..i18n import _, get_language
from ..vocabulary import check_choice, check_int, check_rank, check_world_size
from .builders import BUILDERS, N_CHUNKS, pof2_fold
from .rounds import Round, Schedule, Transfer
from .tiers import TIERED_ALGORITHMS, TIERED_BUILDERS, TIERED_N_CHUNKS
from .tiers import start_chunks as tiers_start_chunks

__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "PRIMITIVES", "Transfer", "Round", "Schedule", "schedule",
           "cached_schedule", "algorithms_for", "default_algorithm", "chunk_bounds", "simulate", "is_tiered",
           "TIERED_ALGORITHMS"]

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
assert set(BUILDERS) == {(p, a) for p, algs in ALGORITHMS.items() for a in algs}
assert {a for algs in ALGORITHMS.values() for a in algs} == set(ALGORITHM_NAMES)


def is_tiered(primitive: str, algorithm: str) -> bool:
    """Whether ``algorithm`` of ``primitive`` is one of :data:`TIERED_ALGORITHMS` (built for a node
    map: it needs ``ranks_per_node``)."""
    return algorithm in TIERED_ALGORITHMS.get(primitive, ())


def algorithms_for(primitive: str) -> tuple[str, ...]:
    """The algorithm names implemented for ``primitive`` (tuple of str, the default first).

    Raises:
        TypeError: ``primitive`` is not a str. ValueError: a primitive without round-by-round
            algorithms here (:func:`collnb.vocabulary.check_choice`'s words, listing
            :data:`PRIMITIVES`).
    """
    return ALGORITHMS[check_choice("primitive", primitive, PRIMITIVES)]


def default_algorithm(primitive: str) -> str:
    """The first (default) algorithm of ``primitive``; raises as :func:`algorithms_for`."""
    return algorithms_for(primitive)[0]


def check_algorithm(primitive: str, algorithm: str) -> str:
    """Check that ``algorithm`` is implemented for ``primitive`` and return it.

    Raises:
        TypeError / ValueError: as :func:`collnb.vocabulary.check_choice` with the kind
            ``"algorithm for <primitive>"``: ``"unknown algorithm for all_reduce 'bruck'; choose
            one of: ring, recursive_doubling, rabenseifner, binomial_tree"``.
    """
    return check_choice(_("algorithm for {primitive}").format(primitive=primitive), algorithm, algorithms_for(primitive))


# ----------------------------------------------------------------------------------------------
# Simulation: which ranks' contributions every chunk holds

def _initial_provenance(primitive: str, n: int, root: int, C: int) -> list[list[int]]:
    """``n`` x ``C`` bitmasks of what every chunk holds before the first round (see :class:`Schedule`)."""
    def bit(r: int) -> int:
        return 1 << r
    if primitive in ("all_reduce", "reduce", "reduce_scatter", "broadcast"):
        return [[bit(r)] * C for r in range(n)]
    if primitive in ("all_gather", "gather", "all_to_all"):
        return [[bit(r) if c == r else 0 for c in range(C)] for r in range(n)]
    if primitive == "scatter":
        return [[bit(root) if r == root else 0 for c in range(C)] for r in range(n)]
    raise ValueError(primitive)


def _expected_final(primitive: str, n: int, root: int, C: int) -> tuple[list[list[int]], list[list[bool]]]:
    """(expected provenance of defined chunks, defined mask)."""
    full = (1 << n) - 1
    exp: list[list[int]] = []
    defined: list[list[bool]] = []
    for r in range(n):
        e: list[int] = []
        d: list[bool] = []
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
             segments: int | None = None, ranks_per_node: int | None = None) -> Schedule:
    """Build the rounds of ``algorithm`` for ``primitive`` at ``world_size`` (pure Python, no ranks).

    Args:
        primitive: one of :data:`PRIMITIVES`.
        algorithm: one of ``algorithms_for(primitive)`` (default: the first), or, with
            ``ranks_per_node``, one of :data:`collnb.algorithms.tiers.TIERED_ALGORITHMS` (built
            for the nodes: ``"hierarchical"``, ``"ring_2d"``, ``"double_binary_tree"``).
        world_size: 1..16.
        root: src/dst rank of broadcast, reduce, scatter, gather (ignored otherwise).
        segments: broadcast only: chunks (pipeline segments) per buffer, 1..64 (default
            ``world_size``). Every other primitive has ``world_size`` chunks (a tiered algorithm may
            use more: ``ring_2d`` two per rank).
        ranks_per_node: the node map: rank ``r`` runs on node ``r // ranks_per_node`` (it must
            divide ``world_size``); ``None`` (default): no nodes. Every algorithm keeps it (the
            replay colours a transfer by the tier it crosses); the tiered ones need it.

    Returns:
        :class:`Schedule` with its rounds and simulated provenance.

    Raises:
        TypeError: a name that is not a str, a world size, root, ``segments`` or ``ranks_per_node``
            that is not an int.
        ValueError: unknown primitive/algorithm (valid ones listed), world size outside 1..16,
            root outside 0..world_size-1, ``segments`` outside 1..64 or given for another
            primitive, ``ranks_per_node`` that does not divide the world size, a tiered algorithm
            without ``ranks_per_node``. The words are :mod:`collnb.vocabulary`'s.
        AssertionError: (a bug) the simulated schedule double-counts a rank, sends a chunk that
            holds nothing, or leaves an output incomplete.
    """
    n = check_world_size(world_size)  # also bounds the int bitmasks of the provenance
    if ranks_per_node is not None:
        check_int("ranks_per_node", ranks_per_node, 1, n)
        if n % ranks_per_node:
            raise ValueError(_("ranks_per_node={L} does not divide world size {n}: every node has the same number "
                               "of ranks").format(L=ranks_per_node, n=n))
    start: list[tuple[int, ...]] | None = None
    if primitive in TIERED_ALGORITHMS and algorithm in TIERED_ALGORITHMS[primitive]:
        if ranks_per_node is None:
            raise ValueError(_("{algorithm} {primitive} is built for nodes: give ranks_per_node (rank r runs on "
                               "node r // ranks_per_node)").format(algorithm=algorithm, primitive=primitive))
        builder = TIERED_BUILDERS[(primitive, algorithm)]
        N, L = n // ranks_per_node, ranks_per_node
        C = TIERED_N_CHUNKS[(primitive, algorithm)](N, L) if (primitive, algorithm) in TIERED_N_CHUNKS else N * L
        if segments is not None:
            raise ValueError(_("segments applies to broadcast only; {primitive} has one chunk per rank").format(
                primitive=primitive))
        rounds = builder(N, L, C)
        root = 0
        if primitive == "all_to_all":
            start = tiers_start_chunks(N, L)
    else:
        algorithm = check_algorithm(primitive, algorithm or default_algorithm(primitive))
        root = check_rank(root, n, "root") if primitive in ROOTED_PRIMITIVES else 0
        C = N_CHUNKS[(primitive, algorithm)](n) if (primitive, algorithm) in N_CHUNKS else n  # Rabenseifner: p'
        if primitive == "broadcast":
            if segments is not None:
                C = check_int("segments", segments, 1, 64, what="chunks of the broadcast buffer")
        elif segments is not None:
            raise ValueError(_("segments applies to broadcast only; {primitive} has one chunk per rank").format(
                primitive=primitive))
        rounds = BUILDERS[(primitive, algorithm)](n, root, C)
    history, defined = simulate(primitive, algorithm, n, root, C, rounds, start)
    fold = (0, 0)
    if algorithm in ("recursive_doubling", "recursive_halving", "rabenseifner"):
        p, q, _a, _b = pof2_fold(n)
        fold = (p, q)
    return Schedule(primitive, algorithm, n, root, C, rounds, history, defined, fold, ranks_per_node, start)


def simulate(primitive: str, algorithm: str, n: int, root: int, C: int, rounds: list[Round],
             start: Sequence[Collection[int]] | None = None) -> tuple[list[list[list[int]]], list[list[bool]]]:
    """Run ``rounds`` on provenance bitmasks: ``(history, defined)`` as :class:`Schedule` keeps
    them. Fills each round's ``finalize``. ``start``: all_to_all's chunks each rank copies from its
    input before round 1 (``None``: its own slot).

    Raises:
        AssertionError: a round sends a chunk that holds nothing or counts a rank twice, or an
            output ends incomplete (a bug in the builder).
    """
    prov = [row[:] for row in _initial_provenance(primitive, n, root, C)]
    if primitive == "all_to_all" and start is not None:
        prov = [[1 << r if c in start[r] else 0 for c in range(C)] for r in range(n)]
    history = [[row[:] for row in prov]]
    full = (1 << n) - 1
    for k, rnd in enumerate(rounds, 1):
        new = [row[:] for row in prov]
        for t in rnd.transfers:
            for sc, dc in zip(t.chunks, t.dst_chunks):
                if primitive == "all_to_all" and not rnd.from_work:
                    src_mask = 1 << t.src  # from the sender's input buffer
                else:
                    src_mask = prov[t.src][sc]
                assert src_mask, f"{algorithm} round {k}: rank {t.src} sends chunk {sc} that holds nothing"
                if t.reduce:
                    assert not (new[t.dst][dc] & src_mask), (
                        f"{algorithm} round {k}: rank {t.dst} would count {_members(new[t.dst][dc] & src_mask)} "
                        f"twice in chunk {dc}")
                    new[t.dst][dc] |= src_mask
                    if new[t.dst][dc] == full and primitive in REDUCING_PRIMITIVES:
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
    return history, defined


def chunk_bounds(count: int, n_chunks: int) -> list[int]:
    """Element offsets ``[0, ..., count]`` (``n_chunks + 1`` ints) splitting ``count`` elements into
    ``n_chunks`` contiguous chunks whose sizes differ by at most one (like ``torch.tensor_split``).

    Raises:
        TypeError / ValueError: ``count`` not an int >= 0, ``n_chunks`` not an int >= 1.
    """
    check_int("count", count, 0, what="elements")
    check_int("n_chunks", n_chunks, 1)
    q, r = divmod(count, n_chunks)
    out = [0]
    for c in range(n_chunks):
        out.append(out[-1] + q + (1 if c < r else 0))
    return out


def cached_schedule(primitive: str, algorithm: str, world_size: int, root: int = 0,
                    segments: int | None = None, ranks_per_node: int | None = None) -> Schedule:
    """:func:`schedule` with its arguments given in full, remembered per process (the explorer
    and the bandwidth lab rebuild the same few schedules on every call) and per language (each
    round's description is written in the language spoken when it is built, ``collnb.set_language``).
    The returned :class:`Schedule` is shared: do not change it. Raises as :func:`schedule`."""
    return _cached_schedule(primitive, algorithm, world_size, root, segments, ranks_per_node, get_language())


@functools.lru_cache(maxsize=512)
def _cached_schedule(primitive: str, algorithm: str, world_size: int, root: int, segments: int | None,
                     ranks_per_node: int | None, language: str) -> Schedule:
    return schedule(primitive, algorithm, world_size, root, segments, ranks_per_node)
