"""Expert parallelism with a capacity limit: every expert takes at most ``C`` tokens from each rank;
the overflow is dropped (the token skips the layer, its residual carries it on).

Expert ``e`` lives on rank ``e`` (one expert per rank). A router gives every token one expert
(top-1). With a **capacity** ``C = ceil(capacity_factor * tokens_per_rank / n_experts)`` (Fedus,
Zoph and Shazeer 2022, *Switch Transformers*, JMLR 23, §2.2, "expert capacity"; Lepikhin et al.
2021, *GShard*, ICLR, §2.2) every rank packs the first ``C`` tokens it routes to each expert, in
token order, into a fixed ``(n_experts, C, d)`` buffer (empty slots zero) and one
``all_to_all_single`` with **even** splits carries it: every rank sends ``C x d`` values to every
rank whatever the router did, so the buffers' shapes are known in advance (what XLA/TPU and CUDA
graphs want). A second all_to_all brings the expert outputs back. A token past its expert's
``C`` is **dropped**: its output from this layer is zero. The dropless alternative
(notebook 11's first layer; MegaBlocks, Gale et al. 2023) sends the counts first and then uneven
splits, never drops, and has shapes that change every step.

:func:`moe_capacity_layer` runs one such layer on a rank; :func:`moe_reference` computes the same
in one process; :func:`skewed_routes` makes a router's imbalanced choices for the lesson.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

import torch
import torch.distributed as dist

from ...i18n import _

if TYPE_CHECKING:
    from .accounting import Phases

__all__ = ["expert_capacity", "skewed_routes", "expert", "capacity_slots", "moe_capacity_layer", "moe_reference",
           "MoeLayerResult"]


class MoeLayerResult(TypedDict):
    """:func:`moe_capacity_layer`'s answer on one rank."""

    out: torch.Tensor  # (n, d): the expert's output for a kept token, zeros for a dropped one
    routed: list[int]  # tokens this rank routed to each expert
    kept: list[int]  # of those, how many fitted


def expert_capacity(tokens_per_rank: int, n_experts: int, capacity_factor: float) -> int:
    """``ceil(capacity_factor * tokens_per_rank / n_experts)``: how many tokens each expert takes
    from each rank (Switch Transformers §2.2). An int >= 0.

    Raises:
        ValueError: a negative token count or factor, or fewer than one expert.
    """
    if tokens_per_rank < 0 or capacity_factor < 0 or n_experts < 1:
        raise ValueError(_("need tokens_per_rank >= 0, capacity_factor >= 0, n_experts >= 1; got {tokens}, {factor}, "
                           "{experts}").format(tokens=tokens_per_rank, factor=capacity_factor, experts=n_experts))
    return math.ceil(capacity_factor * tokens_per_rank / n_experts - 1e-12)


def skewed_routes(n_tokens: int, n_experts: int, skew: float, generator: torch.Generator) -> torch.Tensor:
    """A router's top-1 choices with a preference: token ``i`` goes to expert ``e`` with probability
    proportional to ``exp(-skew * e)`` (``skew = 0``: uniform; ``skew = 1``: expert 0 is e ≈ 2.7x as
    likely as expert 1). An int64 tensor ``(n_tokens,)`` of experts, drawn from ``generator``."""
    weights = torch.exp(-skew * torch.arange(n_experts, dtype=torch.float64))
    return torch.multinomial(weights, n_tokens, replacement=True, generator=generator)


def expert(e: int, x: torch.Tensor) -> torch.Tensor:
    """Expert ``e``'s network: ``tanh(x @ W_e) + e`` with ``W_e`` a ``(d, d)`` float64 matrix drawn
    from ``torch.manual_seed(100 + e)`` (the global generator is restored). ``x``: ``(n, d)``."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(100 + e)
        w = torch.randn(x.shape[-1], x.shape[-1], dtype=x.dtype)
    finally:
        torch.random.set_rng_state(state)
    return torch.tanh(x @ w) + e


def capacity_slots(route: torch.Tensor, n_experts: int, capacity: int) -> torch.Tensor:
    """Each token's slot in its expert's buffer: the token's rank among this rank's tokens routed
    to the same expert, in token order, or ``-1`` when that is ``>= capacity`` (dropped).
    ``route``: int64 ``(n,)``; returns int64 ``(n,)``."""
    slots = torch.full_like(route, -1)
    for e in range(n_experts):
        where = (route == e).nonzero().flatten()
        keep = where[:capacity]
        slots[keep] = torch.arange(len(keep))
    return slots


def moe_capacity_layer(rank: int, world_size: int, tokens: torch.Tensor, route: torch.Tensor,
                       capacity: int, phases: Phases | None = None) -> MoeLayerResult:
    """On a rank: one expert-parallel layer with a capacity limit (a rank function for
    :func:`collnb.launch`; expert ``e`` is rank ``e``).

    Args:
        tokens: this rank's ``(n, d)`` float64 tokens.
        route: ``(n,)`` int64, each token's expert (``0 .. world_size-1``).
        capacity: the most tokens each expert takes from this rank (:func:`expert_capacity`).
        phases: a :class:`collnb.labs.parallel.Phases` or ``None``: marks ``"dispatch"`` and
            ``"combine"``.

    Returns:
        :class:`MoeLayerResult`: ``out`` ``(n, d)`` (the expert's output for a kept token, zeros for a dropped one),
        ``routed`` (tokens this rank routed to each expert, a list of int) and ``kept`` (of those,
        how many fitted). The expert also computes the empty slots (zeros): every rank sends and
        receives ``world_size x capacity x d`` values per all_to_all, and each source keeps only the
        slots it filled.

    Raises:
        ValueError: a route outside ``0 .. world_size-1`` or a negative capacity.
    """
    if route.numel() and (int(route.min()) < 0 or int(route.max()) >= world_size):
        raise ValueError(_("routes must name experts 0..{last}").format(last=world_size - 1))
    if capacity < 0:
        raise ValueError(_("capacity must be >= 0; got {value}").format(value=capacity))
    n, d = tokens.shape
    slots = capacity_slots(route, world_size, capacity)
    kept = slots >= 0
    send = torch.zeros(world_size, capacity, d, dtype=tokens.dtype)   # empty slots stay zero
    send[route[kept], slots[kept]] = tokens[kept]
    if phases is not None:
        phases.begin("dispatch")
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)                   # (source rank, slot, d): even splits
    processed = expert(rank, recv.reshape(-1, d)).reshape(recv.shape)   # empty slots too: wasted work
    if phases is not None:
        phases.begin("combine")
    back = torch.empty_like(processed)
    dist.all_to_all_single(back, processed)              # the outputs come home, in the same slots
    out = torch.zeros_like(tokens)
    out[kept] = back[route[kept], slots[kept]]           # a source knows which of its slots were real
    return MoeLayerResult(out=out, routed=torch.bincount(route, minlength=world_size).tolist(),
                          kept=torch.bincount(route[kept], minlength=world_size).tolist())


def moe_reference(tokens: Sequence[torch.Tensor], routes: Sequence[torch.Tensor], capacity: int) -> list[torch.Tensor]:
    """One process: every rank's layer output as :func:`moe_capacity_layer` defines it (each
    rank's first ``capacity`` tokens per expert, in token order, through :func:`expert`; the rest
    zero). ``tokens[r]``, ``routes[r]``: rank ``r``'s; returns one ``(n_r, d)`` tensor per rank."""
    out = []
    for x, route in zip(tokens, routes):
        slots = capacity_slots(route, len(tokens), capacity)
        y = torch.zeros_like(x)
        for i in (slots >= 0).nonzero().flatten().tolist():
            y[i] = expert(int(route[i]), x[i:i + 1])[0]
        out.append(y)
    return out
