"""Context parallelism inside a training step: ring attention and Ulysses as differentiable
attention cores for :class:`collnb.labs.parallel.transformer.Attention` (``attention.core``), on
the ranks of one mesh dimension.

Every rank of the context-parallel group holds a contiguous ``s / p`` slice of the sequence
(rank ``r`` of the group: tokens ``r s/p .. (r+1) s/p - 1``, :func:`.ring.plain_layout`) and its
queries, keys and values for every head it holds.

* **Ring attention** (:func:`ring_core`; Liu, Zaharia and Abbeel 2023, arXiv:2310.01889, §3): in
  round ``t`` the rank holds the keys and values of group rank ``r - t``, folds their scores into a
  running softmax (:func:`.ring.online_softmax_update`, batched over heads) and passes them on to
  ``r + 1`` with ``batch_isend_irecv``. The pass is an autograd function (:class:`RingShift`):
  in backward the gradient of the keys and values travels the other way, ``r -> r - 1``, so the
  gradients of a block reach the rank that owns it after ``t`` hops, summed on the way (the
  backward pass of ring attention sends ``dK, dV`` round the ring; the Ultra-Scale Playbook,
  "Context Parallelism"). A causal block that is wholly masked is still computed (its
  probabilities are 0): every rank then runs the same autograd graph, so all ranks issue their
  backward sends in the same order. Real kernels skip that work and still pass the buffers on.
* **Ulysses** (:func:`ulysses_core`; Jacobs et al. 2023, *DeepSpeed Ulysses*, arXiv:2309.14509,
  §3.1): one ``all_to_all`` turns "my tokens, every head" into "every token, my ``heads / p``
  heads" for ``q``, ``k`` and ``v`` (stacked), each rank computes ordinary attention for its heads,
  and a second ``all_to_all`` turns the output back. Backward: the same two all_to_alls, reversed
  (:data:`collnb.ranks._torch_internals.ALL_TO_ALL_AUTOGRAD`, a private function, as torchtitan's
  expert parallelism uses). It needs the head count to be a multiple of ``p``; the ring does not.

Per layer and rank, with ``n = b s/p`` tokens of ``H`` heads of ``d`` features in float64: the ring
sends ``p - 1`` K/V blocks of ``2 n H d`` values forward and as many ``dK, dV`` blocks backward;
Ulysses' all_to_alls move ``(p-1)/p`` of ``3 n H d`` and ``n H d`` values each way.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.autograd.function import FunctionCtx

from ...i18n import _
from .ring import online_softmax_update
from .transformer import AttentionCore, causal_attention

__all__ = ["RingShift", "ring_shift", "ring_core", "ulysses_core", "CORES", "make_core", "Group", "GroupCore"]

#: The context-parallel process group (a mesh dimension's).
Group = dist.ProcessGroup
#: ``core(q, k, v, causal, group)``: a context-parallel attention core over ``group`` (:data:`CORES`).
GroupCore = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool, Group], torch.Tensor]


def _exchange(x: torch.Tensor, group: Group, towards: int) -> torch.Tensor:
    """Send ``x`` to the group rank ``towards`` steps on and receive the same shape from as many
    steps back, in one ``batch_isend_irecv``."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    x = x.contiguous()
    out = torch.empty_like(x)
    to = dist.get_global_rank(group, (r + towards) % n)
    frm = dist.get_global_rank(group, (r - towards) % n)
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, to, group=group),
                                        dist.P2POp(dist.irecv, out, frm, group=group)]):
        work.wait()
    return out


class _ShiftCtx(FunctionCtx):
    """:class:`RingShift`'s context: the group it shifts over."""

    group: Group


class RingShift(torch.autograd.Function):
    """Forward: send to the next rank of ``group``, receive from the previous one. Backward: the
    gradient goes back, from the next rank to the previous. ``apply(x, group)``; shape kept."""

    @staticmethod
    def forward(ctx: _ShiftCtx, x: torch.Tensor, group: Group) -> torch.Tensor:
        """The previous rank's ``x``."""
        ctx.group = group
        return _exchange(x, group, +1)

    @staticmethod
    def backward(ctx: _ShiftCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The next rank's gradient (its block came from here)."""
        return _exchange(grad, ctx.group, -1), None


def ring_shift(x: torch.Tensor, group: Group) -> torch.Tensor:
    """:class:`RingShift` applied: the previous rank's ``x`` (differentiable)."""
    out: torch.Tensor = RingShift.apply(x, group)  # type: ignore[no-untyped-call]  # torch's Function.apply has none
    return out


def ring_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, group: Group) -> torch.Tensor:
    """Ring attention of this rank's queries over the whole sequence (module doc).

    Args:
        q, k, v: ``(b, s/p, heads, d)``, this rank's slice of the sequence (plain order).
        causal: mask keys after each query, by position in the whole sequence.
        group: the context-parallel process group (``p`` ranks).

    Returns:
        ``(b, s/p, heads, d)``: exact attention for this rank's queries.
    """
    n, r = dist.get_world_size(group), dist.get_rank(group)
    qh = q.transpose(1, 2)                                       # (b, heads, s/p, d)
    s = qh.shape[-2]
    kv = torch.stack([k, v])                                     # one message per round
    o = torch.zeros_like(qh)
    m = torch.full(qh.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(qh.shape[:-1], dtype=q.dtype)
    mine = torch.arange(s) + r * s
    for t in range(n):
        if t:
            kv = ring_shift(kv, group)
        src = (r - t) % n
        kt, vt = kv[0].transpose(1, 2), kv[1].transpose(1, 2)
        scores = qh @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            theirs = torch.arange(s) + src * s
            scores = scores.masked_fill(theirs[None, :] > mine[:, None], float("-inf"))
        o, m, l = online_softmax_update(o, m, l, scores, vt)
    return (o / l[..., None]).transpose(1, 2)


def _all_to_all(x: torch.Tensor, group: Group) -> torch.Tensor:
    """A differentiable ``all_to_all_single`` with even splits of dim 0 over ``group``
    (:func:`collnb.ranks.all_to_all_single_autograd`; an
    AsyncCollectiveTensor: the first operation that reads it waits for the collective)."""
    from ...ranks import all_to_all_single_autograd

    return all_to_all_single_autograd(x, group)


def ulysses_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, group: Group) -> torch.Tensor:
    """Ulysses attention (module doc): all_to_all to ``heads / p`` heads of the whole sequence,
    ordinary attention, all_to_all back.

    Args:
        q, k, v: ``(b, s/p, heads, d)``, this rank's slice of the sequence (plain order).
        causal: mask later keys. group: the context-parallel process group.

    Returns:
        ``(b, s/p, heads, d)``.

    Raises:
        ValueError: ``heads`` is not a multiple of the group's size.
    """
    n = dist.get_world_size(group)
    b, s, heads, d = q.shape
    if heads % n:
        raise ValueError(_("Ulysses needs the heads on a rank ({heads}) to be a multiple of the context-parallel "
                           "size ({n}); use ring attention or fewer ranks").format(heads=heads, n=n))
    qkv = torch.stack([q, k, v]).reshape(3, b, s, n, heads // n, d)
    send = qkv.permute(3, 0, 1, 2, 4, 5)                         # (to rank j: its heads, my tokens)
    got = _all_to_all(send, group)                               # (from rank i: my heads, its tokens)
    full = got.permute(1, 2, 0, 3, 4, 5).reshape(3, b, n * s, heads // n, d)
    out = causal_attention(full[0], full[1], full[2], causal)    # (b, whole sequence, my heads, d)
    back = _all_to_all(out.reshape(b, n, s, heads // n, d).permute(1, 0, 2, 3, 4), group)
    return back.permute(1, 2, 0, 3, 4).reshape(b, s, heads, d)


#: The context-parallel attention cores by name.
CORES: dict[str, GroupCore] = {"ring": ring_core, "ulysses": ulysses_core}


def make_core(kind: str, group: Group) -> AttentionCore:
    """``core(q, k, v, causal)`` for :attr:`.transformer.Attention.core`: ``kind`` (``"ring"`` or
    ``"ulysses"``) over ``group``.

    Raises:
        ValueError: an unknown kind.
    """
    if kind not in CORES:
        raise ValueError(_("unknown context-parallel attention {value}; choose one of {names}").format(
            value=repr(kind), names=sorted(CORES)))
    fn = CORES[kind]

    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
        return fn(q, k, v, causal, group)

    return core
