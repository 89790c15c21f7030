"""Tensor and sequence parallelism by hand: a Megatron MLP block cut over the ranks of a group.

The block (:class:`MLPBlock`, float64, one process) is a transformer layer's MLP half:
``y = x + fc2(gelu(fc1(norm(x))))`` on activations ``x`` of shape ``(s, h)`` (sequence x hidden;
a batch is folded into the sequence). Megatron-LM (Shoeybi et al. 2019, *Megatron-LM: Training
Multi-Billion Parameter Language Models Using Model Parallelism*, arXiv:1909.08053, §3 and Fig. 3)
splits ``fc1`` by its output features (**column parallel**: rank ``r`` holds rows
``r*f/t:(r+1)*f/t`` of ``fc1.weight``, shape ``(f/t, h)``) and ``fc2`` by its input features (**row
parallel**: columns of ``fc2.weight``, shape ``(h, f/t)``), so the GeLU between them needs no
communication, and joins them with two conjugate operators:

* ``f`` (:func:`copy_to_tensor_parallel`): identity in forward, ``all_reduce`` of the gradient in
  backward (every rank's partial gradient of the replicated input);
* ``g`` (:func:`reduce_from_tensor_parallel`): ``all_reduce`` of the partial outputs in forward,
  identity in backward.

**Sequence parallelism** (Korthikanti et al. 2022, *Reducing Activation Recomputation in Large
Transformer Models*, arXiv:2205.05198, §4.2.2 and Fig. 5) keeps the activations *outside* the two
linears (the LayerNorm, the residual; dropout in a real layer) sharded along the sequence:
rank ``r`` holds tokens ``r*s/t:(r+1)*s/t``. ``g`` becomes an ``all_gather`` along the sequence in
forward (:func:`gather_from_sequence_parallel`, a ``reduce_scatter`` in backward) and ``g``-bar a
``reduce_scatter`` (:func:`scatter_to_sequence_parallel`, an ``all_gather`` in backward): a ring
all_reduce *is* a reduce_scatter followed by an all_gather, so the bytes are the same.
Megatron-LM does not keep the gathered input of ``fc1`` for its weight gradient: it keeps the
rank's sequence shard and all-gathers it again in backward (``regather=True`` here; Megatron-LM's
``LinearWithGradAccumulationAndAsyncCommunication``), one more all_gather for less activation
memory. The replicated parameters that see only a shard of the sequence (the LayerNorm's weight
and bias, ``fc2``'s bias) get partial gradients, summed over the group with one ``all_reduce``
(:meth:`TensorParallelMLP.reduce_replicated_grads`; Megatron-LM's ``allreduce_layernorm_grads``).

:func:`saved_activation_bytes` measures what a rank keeps for backward (autograd's saved-tensor
hooks), so the memory each layout saves is measured, not taken from a formula.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from ...i18n import _

__all__ = ["MLPBlock", "TensorParallelMLP", "mlp_step", "reference_step", "deviation", "CopyToTensorParallel", "ReduceFromTensorParallel",
           "GatherFromSequenceParallel", "ScatterToSequenceParallel", "ColumnParallelLinearRegather", "copy_to_tensor_parallel", "reduce_from_tensor_parallel",
           "gather_from_sequence_parallel", "scatter_to_sequence_parallel", "saved_activation_bytes",
           "sequence_shard", "shard_rows", "shard_columns"]

# torch 2.13 names the flat forms all_gather_single / reduce_scatter_single (formerly
# all_gather_into_tensor / reduce_scatter_tensor); older releases in collnb's range lack them.
_all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class MLPBlock(torch.nn.Module):
    """The single-process block: ``x + fc2(gelu(fc1(norm(x))))``, float64.

    Args:
        hidden: ``h``, the width of the activations.
        ffn: ``f``, the width between the two linears (``4h`` in GPT models).
        seed: ``torch.manual_seed`` for the initial weights (the global generator is restored), so
            every rank and the kernel build the same block.

    Input and output: ``(s, h)`` float64 tensors.
    """

    def __init__(self, hidden: int = 8, ffn: int = 32, seed: int = 0):
        super().__init__()
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)
            self.norm = torch.nn.LayerNorm(hidden, dtype=torch.float64)
            self.fc1 = torch.nn.Linear(hidden, ffn, dtype=torch.float64)
            self.fc2 = torch.nn.Linear(ffn, hidden, dtype=torch.float64)
            with torch.no_grad():  # LayerNorm starts at (1, 0): make its gradients non-trivial
                self.norm.weight.uniform_(0.5, 1.5)
                self.norm.bias.uniform_(-0.5, 0.5)
        finally:
            torch.random.set_rng_state(state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


# ----------------------------------------------------------------------------------------------
# The conjugate operators (autograd functions around one collective each)


def _world(group) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


class CopyToTensorParallel(torch.autograd.Function):
    """``f``: identity in forward; ``all_reduce`` (SUM) of the gradient in backward. ``apply(x, group)``."""

    @staticmethod
    def forward(ctx, x, group):
        """``x`` unchanged (every rank has it whole)."""
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        """Each rank has a partial gradient: their sum over ``group``."""
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """``g``: ``all_reduce`` (SUM) of the partial outputs in forward; identity in backward. ``apply(x, group)``."""

    @staticmethod
    def forward(ctx, x, group):
        """The partial outputs summed over ``group``."""
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        """The gradient unchanged (every rank needs it whole)."""
        return grad, None


def _gather_seq(x, group):
    _, t = _world(group)
    out = torch.empty((t * x.shape[0], *x.shape[1:]), dtype=x.dtype)
    _all_gather_flat(out, x.contiguous(), group=group)
    return out


def _scatter_seq(x, group):
    _, t = _world(group)
    if x.shape[0] % t:
        raise ValueError(_("the sequence ({n} tokens) does not split evenly over {world_size} ranks").format(
            n=x.shape[0], world_size=t))
    out = torch.empty((x.shape[0] // t, *x.shape[1:]), dtype=x.dtype)
    _reduce_scatter_flat(out, x.contiguous(), group=group)
    return out


class GatherFromSequenceParallel(torch.autograd.Function):
    """``all_gather`` of the sequence shards (dim 0) in forward; ``reduce_scatter`` of the gradient in
    backward. ``apply(x_shard, group)``: ``(s/t, ...)`` -> ``(s, ...)``."""

    @staticmethod
    def forward(ctx, x, group):
        """The sequence shards joined along dim 0, rank order."""
        ctx.group = group
        return _gather_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        """This rank's shard of the summed gradient."""
        return _scatter_seq(grad, ctx.group), None


class ScatterToSequenceParallel(torch.autograd.Function):
    """``reduce_scatter`` of the partial outputs along the sequence (dim 0) in forward; ``all_gather`` of
    the gradient in backward. ``apply(x, group)``: ``(s, ...)`` -> ``(s/t, ...)``."""

    @staticmethod
    def forward(ctx, x, group):
        """This rank's sequence shard of the summed partial outputs."""
        ctx.group = group
        return _scatter_seq(x, group)

    @staticmethod
    def backward(ctx, grad):
        """The gradient's shards joined along the sequence."""
        return _gather_seq(grad, ctx.group), None


class ColumnParallelLinearRegather(torch.autograd.Function):
    """All-gather the sequence shard, then the column-parallel linear; keeps only the shard and
    all-gathers it again in backward (Megatron-LM's sequence-parallel linear).
    ``apply(x_shard (s/t, h), weight (f/t, h), bias (f/t,), group)`` -> ``(s, f/t)``."""

    @staticmethod
    def forward(ctx, x_shard, weight, bias, group):
        """Gather the sequence, apply this rank's columns; keep only the shard."""
        ctx.group = group
        ctx.save_for_backward(x_shard, weight)
        return torch.nn.functional.linear(_gather_seq(x_shard, group), weight, bias)

    @staticmethod
    def backward(ctx, grad):
        """Gather the shard again; weight and bias gradients; reduce-scatter the input's."""
        x_shard, weight = ctx.saved_tensors
        x = _gather_seq(x_shard, ctx.group)                   # the second all_gather
        grad_x = _scatter_seq(grad @ weight, ctx.group)        # reduce_scatter of the input's gradient
        return grad_x, grad.t() @ x, grad.sum(0), None


def copy_to_tensor_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """Megatron's ``f``: ``x`` unchanged in forward; in backward the gradient is all-reduced (SUM)
    over ``group``. Shapes and dtype of ``x`` are kept. Source: Shoeybi et al. 2019, Fig. 3."""
    return CopyToTensorParallel.apply(x, group)


def reduce_from_tensor_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """Megatron's ``g``: the partial outputs all-reduced (SUM) over ``group`` in forward; the
    gradient passes unchanged in backward. Shapes and dtype of ``x`` are kept."""
    return ReduceFromTensorParallel.apply(x, group)


def gather_from_sequence_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """Sequence parallelism's ``g``: ``(s/t, ...)`` shards -> the ``(s, ...)`` sequence, rank
    order, by one ``all_gather`` in forward; the gradient is reduce-scattered back to the shards.
    Source: Korthikanti et al. 2022, §4.2.2."""
    return GatherFromSequenceParallel.apply(x, group)


def scatter_to_sequence_parallel(x: torch.Tensor, group=None) -> torch.Tensor:
    """Sequence parallelism's ``g``-bar: partial ``(s, ...)`` outputs -> this rank's ``(s/t, ...)``
    shard of their sum, by one ``reduce_scatter`` in forward; the gradient is all-gathered in
    backward.

    Raises:
        ValueError: ``s`` is not a multiple of the group's size.
    """
    return ScatterToSequenceParallel.apply(x, group)


# ----------------------------------------------------------------------------------------------
# Shards


def sequence_shard(x: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous slice of ``x`` along dim 0 (the sequence), a view.

    Raises:
        ValueError: ``x.shape[0]`` is not a multiple of ``world_size``.
    """
    if x.shape[0] % world_size:
        raise ValueError(_("the sequence ({n} tokens) does not split evenly over {world_size} ranks").format(
            n=x.shape[0], world_size=world_size))
    n = x.shape[0] // world_size
    return x[rank * n:(rank + 1) * n]


def shard_rows(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s rows of ``t`` (dim 0; a column-parallel linear's weight or bias), a copy.

    Raises:
        ValueError: dim 0 is not a multiple of ``world_size``.
    """
    if t.shape[0] % world_size:
        raise ValueError(_("dim {dim} ({n}) does not split evenly over {world_size} ranks").format(
            dim=0, n=t.shape[0], world_size=world_size))
    return t.detach().chunk(world_size, 0)[rank].clone()


def shard_columns(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s columns of ``t`` (dim 1; a row-parallel linear's weight), a copy.

    Raises:
        ValueError: dim 1 is not a multiple of ``world_size``.
    """
    if t.shape[1] % world_size:
        raise ValueError(_("dim {dim} ({n}) does not split evenly over {world_size} ranks").format(
            dim=1, n=t.shape[1], world_size=world_size))
    return t.detach().chunk(world_size, 1)[rank].clone()


class TensorParallelMLP(torch.nn.Module):
    """Rank ``rank``'s part of an :class:`MLPBlock`, by hand with ``torch.distributed``.

    Args:
        block: the single-process block whose weights are cut (every rank builds the same one).
        rank, world_size: this rank in the tensor-parallel group and the group's size ``t``
            (``f`` must be a multiple of ``t``).
        sequence_parallel: ``False``: tensor parallelism (input and output ``(s, h)``, the same on
            every rank; one all_reduce in forward, one in backward). ``True``: the input and output
            are this rank's ``(s/t, h)`` sequence shard (:func:`sequence_shard`); all_gather and
            reduce_scatter in forward, and in backward the reverse.
        regather: with ``sequence_parallel``, keep only the sequence shard for ``fc1``'s weight
            gradient and all-gather it again in backward (Megatron-LM's choice) instead of keeping
            the gathered ``(s, h)`` input.
        group: the tensor-parallel process group (default: the world).

    Parameters: ``norm`` (replicated), ``fc1`` (``weight (f/t, h)``, ``bias (f/t,)``: rows of the
    block's), ``fc2`` (``weight (h, f/t)``: columns; ``bias (h,)`` replicated), float64.

    Raises:
        ValueError: ``f`` is not a multiple of ``world_size``.
    """

    def __init__(self, block: MLPBlock, rank: int, world_size: int, *, sequence_parallel: bool = False,
                 regather: bool = False, group=None):
        super().__init__()
        self.sequence_parallel, self.regather, self.group = sequence_parallel, regather, group
        self.norm = torch.nn.LayerNorm(block.norm.normalized_shape, dtype=torch.float64)
        self.norm.load_state_dict(block.norm.state_dict())
        self.fc1_weight = torch.nn.Parameter(shard_rows(block.fc1.weight, rank, world_size))
        self.fc1_bias = torch.nn.Parameter(shard_rows(block.fc1.bias, rank, world_size))
        self.fc2_weight = torch.nn.Parameter(shard_columns(block.fc2.weight, rank, world_size))
        self.fc2_bias = torch.nn.Parameter(block.fc2.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(s, h)`` -> ``(s, h)`` (tensor parallel) or ``(s/t, h)`` -> ``(s/t, h)`` (sequence
        parallel), float64: ``x + fc2(gelu(fc1(norm(x))))``, the MLP by :meth:`tensor_parallel_mlp` or
        :meth:`sequence_parallel_mlp`."""
        h = self.norm(x)
        mlp = self.sequence_parallel_mlp if self.sequence_parallel else self.tensor_parallel_mlp
        return x + mlp(h) + self.fc2_bias

    def tensor_parallel_mlp(self, h: torch.Tensor) -> torch.Tensor:
        """Tensor parallelism: ``fc2(gelu(fc1(h)))`` without ``fc2``'s bias, ``(s, h)`` -> ``(s, h)``, the
        same on every rank: ``f`` before the column-parallel ``fc1``, ``g`` after the row-parallel ``fc2``."""
        F = torch.nn.functional
        a = F.linear(copy_to_tensor_parallel(h, self.group), self.fc1_weight, self.fc1_bias)   # f, then my columns
        partial = F.linear(F.gelu(a), self.fc2_weight)            # this rank's share of fc2
        return reduce_from_tensor_parallel(partial, self.group)   # g: the sum of every rank's share

    def sequence_parallel_mlp(self, h: torch.Tensor) -> torch.Tensor:
        """Sequence parallelism: ``fc2(gelu(fc1(h)))`` without ``fc2``'s bias, this rank's ``(s/t, h)``
        sequence shard in and out: all_gather into ``fc1`` (with ``regather``, again in backward),
        reduce_scatter out of ``fc2``."""
        F = torch.nn.functional
        if self.regather:
            a = ColumnParallelLinearRegather.apply(h, self.fc1_weight, self.fc1_bias, self.group)
        else:
            a = F.linear(gather_from_sequence_parallel(h, self.group), self.fc1_weight, self.fc1_bias)
        partial = F.linear(F.gelu(a), self.fc2_weight)
        return scatter_to_sequence_parallel(partial, self.group)

    def replicated(self) -> list:
        """The parameters every rank holds whole: the LayerNorm's weight and bias, ``fc2``'s bias."""
        return [self.norm.weight, self.norm.bias, self.fc2_bias]

    def reduce_replicated_grads(self) -> None:
        """With sequence parallelism, sum the replicated parameters' gradients over the group
        (each rank saw only its shard of the sequence): one ``all_reduce`` of the ``2h + h``
        values, flattened. Without it, does nothing (their gradients are already whole)."""
        if not self.sequence_parallel:
            return
        grads = [p.grad for p in self.replicated()]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, group=self.group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def saved_activation_bytes(fn: Callable[[], torch.Tensor], exclude=()) -> tuple[torch.Tensor, int]:
    """Run ``fn()`` and measure the bytes autograd keeps for its backward.

    Every tensor saved for backward during ``fn()`` passes through
    ``torch.autograd.graph.saved_tensors_hooks``; this adds up the storages they live in, each
    counted once, leaving out the tensors in ``exclude`` (parameters: they are held anyway).

    Args:
        fn: a function that runs the forward pass and returns its output.
        exclude: tensors whose storages are not activations (e.g. ``model.parameters()``).

    Returns:
        ``(output, nbytes)``: ``fn``'s result and the bytes (int) of the distinct storages saved.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


# ----------------------------------------------------------------------------------------------
# One training step's forward and backward, on a rank and in one process


def _grads(named) -> dict:
    return {name: p.grad.detach().clone() for name, p in named}


def mlp_step(rank: int, world_size: int, x: torch.Tensor, grad_out: torch.Tensor, *, sequence_parallel: bool = False,
             regather: bool = False, block: tuple = (8, 32, 0), phases=None) -> dict:
    """On a rank: one forward and backward of :class:`TensorParallelMLP` (a rank function for
    :func:`collnb.launch`).

    Args:
        x, grad_out: the whole ``(s, h)`` float64 input and the gradient of the loss with respect to
            the block's output (every rank gets both; with ``sequence_parallel`` it uses its shard).
        sequence_parallel, regather: as :class:`TensorParallelMLP`.
        block: ``(hidden, ffn, seed)`` of the :class:`MLPBlock` every rank builds.
        phases: a :class:`collnb.labs.parallel.Phases`, or ``None``; ``"forward"`` and
            ``"backward"`` are marked (``"grads"`` before the replicated gradients' all_reduce).

    Returns:
        dict: ``out`` and ``x_grad`` (this rank's ``(s, h)`` or ``(s/t, h)``), ``grads`` (name ->
        gradient of this rank's parameters, see :class:`TensorParallelMLP`), ``saved_bytes`` (what
        autograd kept for backward, :func:`saved_activation_bytes`) and ``held_bytes`` (the block's
        input and output on this rank).
    """
    model = TensorParallelMLP(MLPBlock(*block), rank, world_size, sequence_parallel=sequence_parallel,
                              regather=regather)
    mine = (lambda t: sequence_shard(t, rank, world_size)) if sequence_parallel else (lambda t: t)
    x_in = mine(x).detach().clone().requires_grad_()
    if phases is not None:
        phases.begin("forward")
    out, saved = saved_activation_bytes(lambda: model(x_in), exclude=list(model.parameters()))
    if phases is not None:
        phases.begin("backward")
    out.backward(mine(grad_out))
    if phases is not None and sequence_parallel:
        phases.begin("grads")
    model.reduce_replicated_grads()
    held = (x_in.numel() + out.numel()) * x_in.element_size()
    return {"out": out.detach(), "x_grad": x_in.grad, "grads": _grads(model.named_parameters()),
            "saved_bytes": saved, "held_bytes": held}


def reference_step(x: torch.Tensor, grad_out: torch.Tensor, block: tuple = (8, 32, 0)) -> dict:
    """The same step in one process on the whole :class:`MLPBlock`: ``out``, ``x_grad``,
    ``grads`` (``"norm.weight"``, ``"norm.bias"``, ``"fc1.weight"``, ``"fc1.bias"``, ``"fc2.weight"``,
    ``"fc2.bias"``), ``saved_bytes`` and ``held_bytes`` as :func:`mlp_step`."""
    model = MLPBlock(*block)
    x_in = x.detach().clone().requires_grad_()
    out, saved = saved_activation_bytes(lambda: model(x_in), exclude=list(model.parameters()))
    out.backward(grad_out)
    held = (x_in.numel() + out.numel()) * x_in.element_size()
    return {"out": out.detach(), "x_grad": x_in.grad, "grads": _grads(model.named_parameters()),
            "saved_bytes": saved, "held_bytes": held}


#: Which of the reference's gradients each rank parameter is, and how it was cut.
_PIECES = {"norm.weight": ("norm.weight", None), "norm.bias": ("norm.bias", None),
           "fc1_weight": ("fc1.weight", shard_rows), "fc1_bias": ("fc1.bias", shard_rows),
           "fc2_weight": ("fc2.weight", shard_columns), "fc2_bias": ("fc2.bias", None)}


def deviation(result: dict, reference: dict, rank: int, world_size: int, sequence_parallel: bool = False) -> float:
    """The largest absolute difference between rank ``rank``'s :func:`mlp_step` result and the
    matching part of :func:`reference_step`'s: its output and input gradient (its sequence shard
    with ``sequence_parallel``) and every parameter gradient (its rows / columns of the sharded
    ones). A float; 0 means equal bit for bit (float64 rounding makes it ~1e-16)."""
    mine = (lambda t: sequence_shard(t, rank, world_size)) if sequence_parallel else (lambda t: t)
    worst = max(float((result["out"] - mine(reference["out"])).abs().max()),
                float((result["x_grad"] - mine(reference["x_grad"])).abs().max()))
    for name, grad in result["grads"].items():
        ref_name, cut = _PIECES[name]
        want = reference["grads"][ref_name]
        want = cut(want, rank, world_size) if cut else want
        worst = max(worst, float((grad - want).abs().max()))
    return worst
