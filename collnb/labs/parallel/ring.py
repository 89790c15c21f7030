"""Context parallelism: ring attention with an online softmax, in plain and zig-zag sequence order.

Every rank holds the queries, keys and values of its part of the sequence. In round ``t`` (``t =
0 .. p-1``) rank ``r`` holds the keys and values of rank ``(r - t) mod p``: it posts the sends of
that block to rank ``r + 1`` and the receives of the next one from rank ``r - 1``
(``dist.batch_isend_irecv``, so the transfer runs while it computes), computes its queries' scores
against the block, and folds them into a running softmax. After ``p`` rounds every rank has exact
attention for its queries, having held at most two K/V blocks at a time. Sources: Liu, Zaharia
and Abbeel 2023, *Ring Attention with Blockwise Transformers for Near-Infinite Context*
(arXiv:2310.01889), §3; the running softmax: Milakov and Gimelshein 2018, *Online normalizer
calculation for softmax* (arXiv:1805.02867), Algorithm 3, as FlashAttention uses it.

**The online softmax** (:func:`online_softmax_update`) keeps per query row the largest score seen
so far ``m``, the sum of ``exp(score - m)`` ``l`` and the unnormalised output
``o = sum exp(score - m) v``; a new block with row maxima ``m_b`` rescales the old terms by
``exp(m - m_new)``, ``m_new = max(m, m_b)``. The output is ``o / l``.

**Causal masks and balance.** With a causal mask query ``i`` sees keys ``j <= i``. In plain order
(rank ``r`` holds tokens ``r s/p .. (r+1) s/p - 1``, :func:`plain_layout`) rank 0's queries see only
its own block while rank ``p-1``'s see every block: the last rank does ~``p`` times rank 0's work.
Zig-zag order (:func:`zigzag_layout`) cuts the sequence into ``2p`` chunks and gives rank ``r``
chunks ``r`` and ``2p-1-r``, so every rank holds one early and one late chunk and every rank's
work is the same (the Ultra-Scale Playbook, "Context parallelism", zig-zag ring attention; Brandon
et al. 2023, *Striped Attention*, arXiv:2311.09431, for the related striped order).
:func:`work_matrix` counts, per rank and round, the query-key pairs each rank computes.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.distributed as dist

from ...i18n import _

__all__ = ["attention", "plain_layout", "zigzag_layout", "LAYOUTS", "online_softmax_update", "ring_attention", "ring_step",
           "work_matrix", "gather_sequence"]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Full softmax attention in one process: ``softmax(q k^T / sqrt(d) + mask) v``.

    Args:
        q, k, v: ``(s, d)`` tensors (one head), float64 for exact comparisons.
        causal: mask key ``j > i`` for query ``i``.

    Returns:
        ``(s, d)`` tensor, the dtype of ``q``.
    """
    scores = q @ k.t() / math.sqrt(q.shape[-1])
    if causal:
        i = torch.arange(q.shape[0])
        scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def plain_layout(seq_len: int, world_size: int) -> list:
    """Rank ``r`` holds tokens ``r*n .. (r+1)*n - 1`` (``n = seq_len / world_size``): a list of
    ``world_size`` int64 position tensors.

    Raises:
        ValueError: ``seq_len`` is not a multiple of ``world_size``.
    """
    if seq_len % world_size:
        raise ValueError(_("the sequence ({n} tokens) does not split evenly over {world_size} ranks").format(
            n=seq_len, world_size=world_size))
    return list(torch.arange(seq_len).chunk(world_size))


def zigzag_layout(seq_len: int, world_size: int) -> list:
    """The sequence in ``2 * world_size`` equal chunks; rank ``r`` holds chunks ``r`` and
    ``2*world_size - 1 - r`` (one early, one late): a list of int64 position tensors.

    Raises:
        ValueError: ``seq_len`` is not a multiple of ``2 * world_size``.
    """
    if seq_len % (2 * world_size):
        raise ValueError(_("zig-zag order needs the sequence ({n} tokens) to be a multiple of "
                           "2 x world size ({twice})").format(n=seq_len, twice=2 * world_size))
    chunks = torch.arange(seq_len).chunk(2 * world_size)
    return [torch.cat([chunks[r], chunks[2 * world_size - 1 - r]]) for r in range(world_size)]


#: The sequence orders by name.
LAYOUTS = {"plain": plain_layout, "zigzag": zigzag_layout}


def online_softmax_update(o: torch.Tensor, m: torch.Tensor, l: torch.Tensor, scores: torch.Tensor,
                          v: torch.Tensor) -> tuple:
    """Fold one block of scores into a running softmax (Milakov and Gimelshein 2018, Alg. 3).

    Args:
        o: ``(q, d)`` the unnormalised output so far (``sum exp(score - m) v``).
        m: ``(q,)`` each query row's largest score so far (``-inf`` before any).
        l: ``(q,)`` each row's ``sum exp(score - m)``.
        scores: ``(q, k)`` this block's scores, masked entries ``-inf``.
        v: ``(k, d)`` this block's values.

    Returns:
        ``(o, m, l)`` after the block (new tensors). A row whose scores so far are all ``-inf``
        keeps ``o = 0``, ``l = 0``. Leading batch dimensions (``(..., q, d)``, ``(..., q)``) are
        kept: :mod:`.context` folds a batch of heads at once.
    """
    m_new = torch.maximum(m, scores.max(dim=-1).values)
    safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)   # rows with nothing yet
    scale = torch.exp(m - safe)
    p = torch.exp(scores - safe[..., None])
    return o * scale[..., None] + p @ v, m_new, l * scale + p.sum(-1)


def ring_step(send: list, recv: list, rank: int, world_size: int) -> list:
    """One round of ring attention's communication: post the sends of the tensors of ``send`` (this
    rank's K and V blocks) to the next rank and the receives into ``recv`` from the previous one, in one
    ``dist.batch_isend_irecv``, without waiting; returns its requests (:func:`ring_attention` waits on
    them after computing the block it holds)."""
    nxt, prev = (rank + 1) % world_size, (rank - 1) % world_size
    ops = [dist.P2POp(dist.isend, t, nxt) for t in send] + [dist.P2POp(dist.irecv, t, prev) for t in recv]
    return dist.batch_isend_irecv(ops)


def ring_attention(rank: int, world_size: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                   causal: bool = False, layout: str = "plain",
                   update: Callable = online_softmax_update, step: Callable = ring_step) -> tuple:
    """On a rank: ring attention for this rank's queries (a rank function for :func:`collnb.launch`).

    Args:
        q, k, v: this rank's ``(n, d)`` blocks, the rows at the positions ``LAYOUTS[layout]`` gives
            it (``n = s / world_size``), float64.
        causal: mask keys after each query (by the tokens' positions in the whole sequence).
        layout: ``"plain"`` or ``"zigzag"`` (:data:`LAYOUTS`): which positions every rank holds.
        update: the running-softmax step, ``update(o, m, l, scores, v) -> (o, m, l)``
            (:func:`online_softmax_update`).
        step: one round's communication, ``step(send, recv, rank, world_size) -> requests``
            (:func:`ring_step`).

    Returns:
        ``(out, work)``: ``out`` the ``(n, d)`` attention output of this rank's queries; ``work`` a
        list of ``world_size`` ints, the query-key pairs this rank computed in each round (a block
        whose pairs are all masked is skipped and counts 0).

    Raises:
        ValueError: an unknown layout, or blocks that do not fit it.
    """
    if layout not in LAYOUTS:
        raise ValueError(_("unknown layout {value}; choose one of {names}").format(
            value=repr(layout), names=sorted(LAYOUTS)))
    n, d = q.shape
    positions = LAYOUTS[layout](n * world_size, world_size)
    mine = positions[rank]
    o = torch.zeros_like(q)
    m = torch.full((n,), float("-inf"), dtype=q.dtype)
    l = torch.zeros(n, dtype=q.dtype)
    kv = [k.contiguous(), v.contiguous()]
    work = []
    for t in range(world_size):
        src = (rank - t) % world_size
        if t < world_size - 1:
            incoming = [torch.empty_like(kv[0]), torch.empty_like(kv[1])]
            requests = step(kv, incoming, rank, world_size)   # in flight while we compute
        scores = q @ kv[0].t() / math.sqrt(d)
        visible = positions[src][None, :] <= mine[:, None] if causal else torch.ones(n, n, dtype=torch.bool)
        pairs = int(visible.sum())
        if pairs:
            o, m, l = update(o, m, l, scores.masked_fill(~visible, float("-inf")), kv[1])
        work.append(pairs)
        if t < world_size - 1:
            for request in requests:
                request.wait()
            kv = incoming
    return o / l[:, None], work


def gather_sequence(pieces: list, layout: str) -> torch.Tensor:
    """The whole ``(s, ...)`` sequence from every rank's rows (rank order), put back at the
    positions ``layout`` gave them.

    Raises:
        ValueError: an unknown layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(_("unknown layout {value}; choose one of {names}").format(
            value=repr(layout), names=sorted(LAYOUTS)))
    s = sum(p.shape[0] for p in pieces)
    out = torch.empty((s, *pieces[0].shape[1:]), dtype=pieces[0].dtype)
    for rows, where in zip(pieces, LAYOUTS[layout](s, len(pieces))):
        out[where] = rows
    return out


def work_matrix(seq_len: int, world_size: int, layout: str = "plain", causal: bool = True) -> list:
    """What :func:`ring_attention` computes, without running it: ``rows[r][t]`` is the number of
    query-key pairs rank ``r`` computes in round ``t`` (a list of lists of int). The notebook
    compares it with the counts the ranks return.

    Raises:
        ValueError: an unknown layout, or a sequence that does not fit it.
    """
    if layout not in LAYOUTS:
        raise ValueError(_("unknown layout {value}; choose one of {names}").format(
            value=repr(layout), names=sorted(LAYOUTS)))
    positions = LAYOUTS[layout](seq_len, world_size)
    rows = []
    for r in range(world_size):
        row = []
        for t in range(world_size):
            src = positions[(r - t) % world_size]
            n = len(positions[r]) * len(src)
            row.append(int((src[None, :] <= positions[r][:, None]).sum()) if causal else n)
        rows.append(row)
    return rows
