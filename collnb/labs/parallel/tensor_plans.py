"""The same Megatron MLP block with torch's own tensor parallelism: ``parallelize_module`` with
``ColwiseParallel`` / ``RowwiseParallel`` (and ``SequenceParallel`` for the LayerNorm) on a 1-D
``DeviceMesh``, the parameters DTensors (torch docs: *Tensor Parallelism - torch.distributed.tensor.parallel*,
https://pytorch.org/docs/stable/distributed.tensor.parallel.html).

Measured with torch 2.13 on gloo (``collnb.launch(..., record_calls=True)``): ``parallelize_module``
itself scatters the sharded weights from the mesh's first rank and broadcasts the replicated
bias; a tensor-parallel step is then one all_reduce in forward and one in backward (as by hand);
a sequence-parallel step one all_gather and one reduce_scatter in forward and the same in backward
(DTensor keeps the gathered input, like ``regather=False`` by hand). The LayerNorm's gradients come
back **Partial** (each rank holds its shard's share; their sum is the gradient): DTensor leaves the
reduction to whoever needs the whole value (``full_tensor()``, a gradient-norm clip).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypedDict

import torch

from ...i18n import _
from .memory import is_dtensor
from .tensor import MLPBlock, StepResult, sequence_shard
from .transformer import grad_of

if TYPE_CHECKING:
    from torch.distributed.tensor.parallel import ParallelStyle

    from .accounting import Phases

__all__ = ["tensor_parallel_plan", "dtensor_mlp_step", "assemble", "dtensor_deviation", "DTensorStepResult"]


class DTensorStepResult(TypedDict):
    """:func:`dtensor_mlp_step`'s answer on one rank (its docstring says what each holds)."""

    out: torch.Tensor
    x_grad: torch.Tensor
    grads: dict[str, torch.Tensor]
    placements: dict[str, str]


def tensor_parallel_plan(sequence_parallel: bool = False) -> dict[str, ParallelStyle]:
    """The ``parallelize_module`` plan of :class:`MLPBlock` (inputs ``(s, h)``, the sequence on dim 0).

    Tensor parallel: ``{"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}``. Sequence parallel:
    the LayerNorm ``SequenceParallel(sequence_dim=0)``, ``fc1`` ``ColwiseParallel(input_layouts=Shard(0))``
    (its input all-gathered), ``fc2`` ``RowwiseParallel(output_layouts=Shard(0))`` (its output
    reduce-scattered)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if not sequence_parallel:
        return {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    return {"norm": SequenceParallel(sequence_dim=0), "fc1": ColwiseParallel(input_layouts=Shard(0)),
            "fc2": RowwiseParallel(output_layouts=Shard(0))}


def _placement(p: torch.Tensor) -> str:
    """A DTensor's (1-D mesh) placement as DTensor writes it; ``"whole"`` for a plain tensor."""
    return str(p.placements[0]) if is_dtensor(p) else "whole"


def dtensor_mlp_step(rank: int, world_size: int, x: torch.Tensor, grad_out: torch.Tensor, *,
                     sequence_parallel: bool = False, block: tuple[int, int, int] = (8, 32, 0),
                     phases: Phases | None = None) -> DTensorStepResult:
    """On a rank: build :class:`MLPBlock`, ``parallelize_module`` it on a 1-D CPU mesh of the world
    with :func:`tensor_parallel_plan`, and run one forward and backward.

    Args:
        x, grad_out: the whole ``(s, h)`` float64 input and output gradient (with
            ``sequence_parallel`` this rank uses its sequence shard of each).
        block: ``(hidden, ffn, seed)`` of the block.
        phases: a :class:`collnb.labs.parallel.Phases` or ``None``: ``"setup"`` is what
            ``parallelize_module`` issued, then ``"forward"`` and ``"backward"`` are marked.

    Returns:
        :class:`DTensorStepResult`: ``out``, ``x_grad`` (plain tensors, this rank's), ``grads`` (name -> this rank's local
        gradient: ``to_local()`` of a DTensor) and ``placements`` (name -> the gradient's placement as
        DTensor writes it, ``"S(0)"``, ``"R"``, ``"P(sum)"``, or ``"whole"`` for a plain tensor).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (world_size,))
    model = parallelize_module(MLPBlock(*block), mesh, tensor_parallel_plan(sequence_parallel))
    mine: Callable[[torch.Tensor], torch.Tensor] = (
        (lambda t: sequence_shard(t, rank, world_size)) if sequence_parallel else (lambda t: t))
    x_in = mine(x).detach().clone().requires_grad_()
    if phases is not None:
        phases.begin("forward")
    out = model(x_in)
    if phases is not None:
        phases.begin("backward")
    out.backward(mine(grad_out))
    grads, placements = {}, {}
    for name, p in model.named_parameters():
        grad = grad_of(p)
        placements[name] = _placement(grad)
        grads[name] = grad.to_local() if is_dtensor(grad) else grad
    return DTensorStepResult(out=out.detach(), x_grad=grad_of(x_in), grads=grads, placements=placements)


def assemble(pieces: Sequence[torch.Tensor], placement: str) -> torch.Tensor:
    """The whole tensor from every rank's local piece, as a DTensor placement says (DTensor's short
    names, ``str(placement)``, or its long ones): ``"S(d)"`` concatenates along ``d`` in rank order,
    ``"P(sum)"`` adds, ``"R"`` and ``"whole"`` (a plain tensor) take rank 0's after checking that
    every rank holds the same.

    Raises:
        ValueError: a replicated tensor differs between ranks, or an unknown placement.
    """
    import re

    shard = re.fullmatch(r"(?:S\(|Shard\(dim=)(\d+)\)", placement)
    if shard:
        return torch.cat(list(pieces), int(shard.group(1)))
    if placement in ("P(sum)", "Partial(sum)"):
        return torch.stack(list(pieces)).sum(0)
    if placement in ("R", "Replicate()", "whole"):
        if any(not torch.equal(p, pieces[0]) for p in pieces):
            raise ValueError(_("a {placement} tensor differs between ranks").format(placement=placement))
        return pieces[0]
    raise ValueError(_("unknown placement {value}").format(value=repr(placement)))


def dtensor_deviation(results: Sequence[DTensorStepResult], reference: StepResult,
                      sequence_parallel: bool = False) -> float:
    """The largest absolute difference between the whole output, input gradient and parameter
    gradients assembled from every rank's :func:`dtensor_mlp_step` result (:func:`assemble`) and
    :func:`collnb.labs.parallel.reference_step`'s. A float (~1e-16 in float64 when equal)."""
    join: Callable[[list[torch.Tensor]], torch.Tensor] = (
        (lambda ts: torch.cat(ts)) if sequence_parallel else (lambda ts: assemble(ts, "whole")))
    worst = max(float((join([r["out"] for r in results]) - reference["out"]).abs().max()),
                float((join([r["x_grad"] for r in results]) - reference["x_grad"]).abs().max()))
    for name, placement in results[0]["placements"].items():
        whole = assemble([r["grads"][name] for r in results], placement)
        worst = max(worst, float((whole - reference["grads"][name]).abs().max()))
    return worst
