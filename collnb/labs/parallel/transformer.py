"""A small transformer for the composed parallelisms (:mod:`.composed`): the one model every
composition trains and one process trains beside it.

The layout follows torchtitan's Llama (``torchtitan/models/llama3/model/model.py``), shrunk so
that every composition runs on real gloo ranks in seconds: blocks of pre-norm attention and MLP
with residuals, the blocks in a ``ModuleDict`` keyed ``"0"``, ``"1"``, ... (so a pipeline stage
deletes the blocks it does not own and every parameter keeps its name), a final norm and an
output projection. No embedding: the inputs are ``(b, s, h)`` float64 activations and the loss is
the mean squared error against ``(b, s, h)`` targets, so every rank's loss is a mean over its own
tokens and the data-parallel average of equal shards is the whole batch's mean.

* attention: ``wq``, ``wk``, ``wv``, ``wo`` (``Linear(h, h)``, no bias), ``heads`` heads of
  ``h / heads`` features; the head count is read from the projection's output (``view(b, s, -1,
  d)``), so a tensor-parallel rank holding ``heads / t`` heads runs the same code. The core
  (softmax attention, causal) is a function held by the module (:attr:`Attention.core`): context
  parallelism replaces it with ring attention or Ulysses (:mod:`.context`).
* MLP: ``w1`` (``h -> f``), GeLU, ``w2`` (``f -> h``), no bias.
* MoE (``experts > 0``): the MLP of every block becomes a top-1 mixture of experts: a router
  ``Linear(h, E)``, experts stacked as ``w1 (E, h, f)`` and ``w2 (E, f, h)`` (torchtitan's
  ``GroupedExperts``), each token's output scaled by its router probability. Every expert takes at
  most ``C = ceil(capacity_factor * n / E)`` tokens of each group of ``n`` tokens (a group is one
  data-parallel rank's tokens; Switch Transformers §2.2, :func:`.experts.expert_capacity`); the
  rest are dropped (the residual carries them). :class:`MoE` computes every group in one process;
  :mod:`.composed` sends the same buffers through ``all_to_all`` (expert parallelism).

Everything is float64 and seeded, so a composition's gradients equal one process's to ~1e-15.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ...i18n import _
from .experts import capacity_slots, expert_capacity

__all__ = ["TransformerConfig", "Attention", "MLP", "MoE", "Block", "TinyTransformer", "causal_attention",
           "make_batch", "loss_fn", "reference_train", "moe_dispatch", "expert_forward"]

_F = torch.nn.functional


@dataclass(frozen=True)
class TransformerConfig:
    """The model's sizes.

    Attributes:
        hidden: ``h``, the activations' width. heads: attention heads (``h`` a multiple of it).
        ffn: ``f``, the MLP's inner width. blocks: transformer blocks.
        experts: ``0`` for a dense MLP; ``E > 0`` for a top-1 mixture of ``E`` experts in every block.
        capacity_factor: the experts' capacity factor (tokens per expert per group, relative to an
            even split).
        causal: mask later keys. seed: the initial weights (``torch.manual_seed``; the global
            generator is restored).

    Raises:
        ValueError: ``hidden`` not a multiple of ``heads``, or a size < 1.
    """

    hidden: int = 16
    heads: int = 4
    ffn: int = 32
    blocks: int = 2
    experts: int = 0
    capacity_factor: float = 1.5
    causal: bool = True
    seed: int = 0

    def __post_init__(self):
        if min(self.hidden, self.heads, self.ffn, self.blocks) < 1 or self.experts < 0:
            raise ValueError(_("the model's sizes must be >= 1 (experts >= 0); got {config}").format(config=self))
        if self.hidden % self.heads:
            raise ValueError(_("hidden ({hidden}) must be a multiple of heads ({heads})").format(
                hidden=self.hidden, heads=self.heads))

    @property
    def head_dim(self) -> int:
        """``hidden / heads``."""
        return self.hidden // self.heads


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Softmax attention of every head: ``softmax(q k^T / sqrt(d) + mask) v``.

    Args:
        q, k, v: ``(b, s, heads, d)`` tensors (any number of heads).
        causal: mask key ``j > i`` for query ``i``.

    Returns:
        ``(b, s, heads, d)``, the dtype of ``q``.
    """
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))               # (b, heads, s, d)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        i = torch.arange(q.shape[-2])
        scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)


class Attention(torch.nn.Module):
    """Multi-head self-attention without biases. Input and output ``(b, s, h)``.

    Attributes:
        core: ``core(q, k, v, causal) -> out`` on ``(b, s, heads, d)`` tensors
            (:func:`causal_attention`; context parallelism puts ring attention or Ulysses here).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        h = config.hidden
        self.head_dim, self.causal = config.head_dim, config.causal
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(h, h, bias=False, dtype=torch.float64) for _i in range(4))
        self.core: Callable = causal_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _h = x.shape
        q, k, v = (w(x).view(b, s, -1, self.head_dim) for w in (self.wq, self.wk, self.wv))
        return self.wo(self.core(q, k, v, self.causal).reshape(b, s, -1))


class MLP(torch.nn.Module):
    """``w2(gelu(w1(x)))`` without biases. Input and output ``(b, s, h)``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.w1 = torch.nn.Linear(config.hidden, config.ffn, bias=False, dtype=torch.float64)
        self.w2 = torch.nn.Linear(config.ffn, config.hidden, bias=False, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(_F.gelu(self.w1(x)))


def expert_forward(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Every expert on its own rows: ``gelu(x[e] @ w1[e]) @ w2[e]``.

    Args:
        w1: ``(E, h, f)``; w2: ``(E, f, h)``; x: ``(E, rows, h)``.

    Returns:
        ``(E, rows, h)``. An empty slot (a zero row) gives a zero row: no biases.
    """
    return torch.bmm(_F.gelu(torch.bmm(x, w1)), w2)


def moe_dispatch(tokens: torch.Tensor, router: torch.nn.Linear, experts: int, capacity: int) -> tuple:
    """Route one group's tokens (top-1) and pack them into fixed per-expert buffers.

    Args:
        tokens: ``(n, h)``. router: ``Linear(h, E)``. experts: ``E``. capacity: ``C`` per expert.

    Returns:
        ``(buffer, route, slots, gate)``: ``buffer (E, C, h)`` (row ``slot`` of expert ``e`` holds
        the token routed there, empty slots zero; differentiable in ``tokens``), ``route (n,)`` each
        token's expert, ``slots (n,)`` its slot or ``-1`` (dropped), ``gate (n,)`` its router
        probability (differentiable in the router).
    """
    probs = torch.softmax(router(tokens), dim=-1)
    gate, route = probs.max(dim=-1)
    slots = capacity_slots(route, experts, capacity)
    kept = (slots >= 0).nonzero().flatten()
    index = route[kept] * capacity + slots[kept]
    buffer = tokens.new_zeros(experts * capacity, tokens.shape[-1]).index_add(0, index, tokens[kept])
    return buffer.view(experts, capacity, -1), route, slots, gate


def moe_combine(out: torch.Tensor, route: torch.Tensor, slots: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Each token's expert output from the ``(E, C, h)`` buffer, times its gate; ``0`` for a
    dropped token. Returns ``(n, h)``."""
    capacity = out.shape[1]
    flat = out.reshape(-1, out.shape[-1])
    kept = slots >= 0
    index = torch.where(kept, route * capacity + slots, torch.zeros_like(slots))
    return flat[index] * (gate * kept)[:, None]


class MoE(torch.nn.Module):
    """A top-1 mixture of experts with a capacity per group (module doc). Input and output ``(b, s, h)``.

    Attributes:
        groups: how many equal groups the tokens (``b * s``, batch-major) form, each with its own
            capacity: one per data-parallel rank, so that one process drops the tokens the ranks drop.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        gen = torch.Generator().manual_seed(config.seed + 7)
        e, h, f = config.experts, config.hidden, config.ffn
        self.experts, self.capacity_factor = e, config.capacity_factor
        self.router = torch.nn.Linear(h, e, bias=False, dtype=torch.float64)
        self.w1 = torch.nn.Parameter(torch.randn(e, h, f, generator=gen, dtype=torch.float64) / math.sqrt(h))
        self.w2 = torch.nn.Parameter(torch.randn(e, f, h, generator=gen, dtype=torch.float64) / math.sqrt(f))
        self.groups = 1

    def capacity(self, tokens_per_group: int) -> int:
        """``ceil(capacity_factor * tokens_per_group / E)`` (:func:`.experts.expert_capacity`)."""
        return expert_capacity(tokens_per_group, self.experts, self.capacity_factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        if tokens.shape[0] % self.groups:
            raise ValueError(_("{n} tokens do not form {groups} equal groups").format(n=tokens.shape[0], groups=self.groups))
        outs = []
        for group in tokens.chunk(self.groups):
            cap = self.capacity(group.shape[0])
            buffer, route, slots, gate = moe_dispatch(group, self.router, self.experts, cap)
            outs.append(moe_combine(expert_forward(self.w1, self.w2, buffer), route, slots, gate))
        return torch.cat(outs).view_as(x)


class Block(torch.nn.Module):
    """``x + attn(norm1(x))``, then ``+ mlp(norm2(x))`` (an :class:`MoE` when ``experts > 0``)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        h = config.hidden
        self.attention_norm = torch.nn.LayerNorm(h, dtype=torch.float64)
        self.attention = Attention(config)
        self.ffn_norm = torch.nn.LayerNorm(h, dtype=torch.float64)
        self.feed_forward = MoE(config) if config.experts else MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyTransformer(torch.nn.Module):
    """``config.blocks`` :class:`Block` s (``self.layers``, a ``ModuleDict`` keyed ``"0"``, ``"1"``,
    ...), a final ``norm`` and an ``output`` projection ``Linear(h, h)``; float64, initialised from
    ``torch.manual_seed(config.seed)`` (the global generator is restored), so every rank and the
    kernel build the same weights. A pipeline stage sets ``norm``/``output`` to ``None`` and deletes
    blocks from ``layers``; :meth:`forward` skips what is gone. Input and output ``(b, s, h)``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(config.seed)
            self.layers = torch.nn.ModuleDict({str(i): Block(config) for i in range(config.blocks)})
            self.norm: torch.nn.Module | None = torch.nn.LayerNorm(config.hidden, dtype=torch.float64)
            self.output: torch.nn.Module | None = torch.nn.Linear(config.hidden, config.hidden, bias=False,
                                                                  dtype=torch.float64)
            with torch.no_grad():   # LayerNorms start at (1, 0): make their gradients non-trivial
                for module in self.modules():
                    if isinstance(module, torch.nn.LayerNorm):
                        module.weight.uniform_(0.5, 1.5)
                        module.bias.uniform_(-0.2, 0.2)
        finally:
            torch.random.set_rng_state(state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers.values():
            x = block(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.output is not None:
            x = self.output(x)
        return x


def make_batch(config: TransformerConfig, batch: int, seq_len: int, seed: int = 1) -> tuple:
    """``(x, y)``: inputs and targets, each ``(batch, seq_len, hidden)`` float64, from
    ``torch.Generator().manual_seed(seed)``."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, seq_len, config.hidden)
    return (torch.randn(*shape, generator=gen, dtype=torch.float64),
            torch.randn(*shape, generator=gen, dtype=torch.float64))


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean squared error over every element (a scalar)."""
    return _F.mse_loss(out, target)


def reference_train(config: TransformerConfig, x: torch.Tensor, y: torch.Tensor, *, steps: int = 2, lr: float = 1e-2,
                    groups: int = 1) -> dict:
    """One process: :class:`TinyTransformer` trained ``steps`` steps with ``torch.optim.AdamW``
    (``lr``, ``weight_decay=0``) on the whole batch.

    Args:
        groups: the MoE's capacity groups (:attr:`MoE.groups`): the data-parallel ranks' count.

    Returns:
        dict: ``losses`` (one float per step), ``grads`` (name -> the last step's gradient, before
        its optimizer step), ``params`` (name -> the parameters after the last step).
    """
    model = TinyTransformer(config)
    for module in model.modules():
        if isinstance(module, MoE):
            module.groups = groups
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses, grads = [], {}
    for _step in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    return {"losses": losses, "grads": grads, "params": {n: p.detach().clone() for n, p in model.named_parameters()}}
