"""Data parallelism three ways on one small model, each step's collectives recorded: DDP (one
bucketed all_reduce of the gradients), flat ZeRO-1/2 (one reduce_scatter of the gradients and one
all_gather of the updated parameters) and FSDP2 (``fully_shard``: per block an all_gather before
its forward, again before its backward, and a reduce_scatter of its gradient).

**Why FSDP moves ~1.5x DDP's bytes.** With Ψ the parameters' bytes and ``p`` ranks, a ring
all_reduce sends ``2(p-1)/p Ψ`` per rank; ZeRO-1/2's reduce_scatter + all_gather the same; FSDP's
two all_gathers and one reduce_scatter ``3(p-1)/p Ψ``: 1.5x (Rajbhandari et al. 2020, *ZeRO:
Memory Optimizations Toward Training Trillion Parameter Models*, SC20, §7.2; Zhao et al. 2023,
*PyTorch FSDP*, VLDB). With ``reshard_after_forward=False`` the backward all_gathers go and
FSDP moves DDP's bytes, holding every block's whole parameters from its forward to its backward.
:mod:`.accounting` measures the bytes from the recorded calls.

**The model** (:func:`layered_model`): blocks ``Linear(w_i, w_{i+1}) -> Tanh`` of different widths,
float64, so the size of every all_gather / reduce_scatter names its block (:func:`block_of`).
FSDP2 pads each parameter's dim 0 to a multiple of the world size (torch's
``_fsdp_param.py``); :func:`fsdp_block_bytes` does the same arithmetic.

Every trainer returns the whole parameters after its steps, to compare with
:func:`sgd_reference` (one process, plain SGD on the whole batch; the ranks' losses are means over
their own equal shards, so the averaged gradient is the whole batch's).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from ...i18n import _
from ...units import format_bytes, pad
from .accounting import interleave, kind, phase_label

__all__ = ["layered_model", "sgd_reference", "ddp_train", "zero_train", "fsdp_train", "fsdp_block_bytes",
           "block_of", "label", "order_text", "max_difference"]

_F = torch.nn.functional


def layered_model(widths=(8, 12, 16, 4), seed: int = 0) -> torch.nn.Sequential:
    """``Sequential`` of blocks ``Sequential(Linear(widths[i], widths[i + 1]), Tanh())``, float64,
    initialised from ``torch.manual_seed(seed)`` (the global generator is restored).

    Raises:
        ValueError: fewer than two widths.
    """
    if len(widths) < 2:
        raise ValueError(_("a layered model needs at least two widths; got {value}").format(value=repr(widths)))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(a, b, dtype=torch.float64), torch.nn.Tanh())
                                     for a, b in zip(widths, widths[1:])])
    finally:
        torch.random.set_rng_state(state)


def _shard(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    n = t.shape[0] // world_size
    return t[rank * n:(rank + 1) * n]


def _loss(model, x, y):
    return _F.mse_loss(model(x), y)


def _sgd(model, xs, ys, steps: int, lr: float, phases, mark_optimizer: bool = False) -> None:
    """``steps`` plain SGD steps of ``model`` on ``(xs, ys)``; marks ``"step k"`` (and ``"optimizer"``)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for k in range(1, steps + 1):
        if phases is not None:
            phases.begin(f"step {k}")
        opt.zero_grad()
        _loss(model, xs, ys).backward()
        if phases is not None and mark_optimizer:
            phases.begin("optimizer")
        opt.step()


def sgd_reference(x: torch.Tensor, y: torch.Tensor, steps: int = 1, lr: float = 0.1, widths=(8, 12, 16, 4)) -> list:
    """One process: plain SGD on the mean squared error of the whole batch, ``steps`` steps.
    Returns the parameters (detached copies, ``model.parameters()`` order)."""
    model = layered_model(widths)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _step in range(steps):
        opt.zero_grad()
        _loss(model, x, y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _mark_blocks(model, phases) -> None:
    """Marks ``"forward i"`` when block ``i``'s compute starts (after FSDP's pre-forward hook) and
    ``"backward i"`` when its gradient reaches it (after FSDP's pre-backward hook)."""
    for i, block in enumerate(model):
        def pre(module, args, i=i):
            phases.begin(f"forward {i}")

        def post(module, args, out, i=i):
            if out.requires_grad:
                out.register_hook(lambda grad, i=i: phases.begin(f"backward {i}"))

        block[0].register_forward_pre_hook(pre)
        block[0].register_forward_hook(post)


def ddp_train(rank: int, world_size: int, x: torch.Tensor, y: torch.Tensor, *, steps: int = 1, lr: float = 0.1,
              widths=(8, 12, 16, 4), phases=None) -> list:
    """On a rank: ``DistributedDataParallel`` on this rank's equal shard of ``(x, y)``, plain SGD.
    Marks ``"step k"`` (k = 1, 2, ...) before each step (``"setup"`` is DDP's construction). Launch with
    ``debug=False``: with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` torch 2.13's DDP constructor crashes on
    gloo (notebook 11). Returns the whole parameters."""
    model = torch.nn.parallel.DistributedDataParallel(layered_model(widths))
    _sgd(model, _shard(x, rank, world_size), _shard(y, rank, world_size), steps, lr, phases)
    return [p.detach().clone() for p in model.parameters()]


def zero_train(rank: int, world_size: int, x: torch.Tensor, y: torch.Tensor, *, steps: int = 1, lr: float = 0.1,
               widths=(8, 12, 16, 4), phases=None) -> list:
    """On a rank: flat ZeRO-1/2 (notebook 11's): all parameters in one flat buffer cut into
    ``world_size`` shards; per step one ``reduce_scatter`` of the flat gradient (each rank gets its
    shard's sum, divided by the world size), an SGD update of its shard only, one ``all_gather`` of
    the updated shards. Marks ``"step k"`` before step k (1, 2, ...). Returns the whole parameters."""
    model = layered_model(widths)
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    shard = -(-n // world_size)
    flat = torch.zeros(shard * world_size, dtype=torch.float64)
    flat[:n] = torch.cat([p.detach().flatten() for p in params])
    mine = slice(rank * shard, (rank + 1) * shard)
    xs, ys = _shard(x, rank, world_size), _shard(y, rank, world_size)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    for k in range(1, steps + 1):
        if phases is not None:
            phases.begin(f"step {k}")
        model.zero_grad()
        _loss(model, xs, ys).backward()
        grad = torch.zeros_like(flat)
        grad[:n] = torch.cat([p.grad.flatten() for p in params])
        grad_shard = torch.empty(shard, dtype=torch.float64)
        scatter(grad_shard, grad)
        flat[mine] -= lr * grad_shard / world_size
        gather(flat, flat[mine].clone())
        with torch.no_grad():
            offset = 0
            for p in params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
    return [p.detach().clone() for p in params]


def fsdp_train(rank: int, world_size: int, x: torch.Tensor, y: torch.Tensor, *, steps: int = 1, lr: float = 0.1,
               widths=(8, 12, 16, 4), reshard_after_forward: bool = True,
               prefetch: Callable[[list], None] | None = None, phases=None) -> dict:
    """On a rank: FSDP2 (``torch.distributed.fsdp.fully_shard``) on every block and on the whole
    model, plain SGD (``torch.optim.SGD`` on the DTensor shards) on this rank's equal shard of
    ``(x, y)``.

    Args:
        reshard_after_forward: ``fully_shard``'s: free each block's gathered parameters after its
            forward (and gather them again for its backward).
        prefetch: ``prefetch(blocks)`` is called with the list of ``fully_shard`` blocks before the
            first step (e.g. to call their ``set_modules_to_forward_prefetch`` /
            ``set_modules_to_backward_prefetch``).
        phases: a :class:`collnb.labs.parallel.Phases` or ``None``: ``"step k"`` before step k
            (1, 2, ...), ``"forward i"`` / ``"backward i"`` when block ``i``'s own compute starts
            (after FSDP's hooks issued its all_gather), ``"optimizer"`` before each ``opt.step()``.

    Returns:
        dict: ``params`` (whole parameters, gathered after the recorded steps by ``full_tensor()``,
        outside every phase but its own ``"gather"``), ``shard_bytes`` (bytes of the parameter
        shards this rank holds) and ``full_bytes`` (the whole model's).
    """
    from torch.distributed.fsdp import fully_shard

    model = layered_model(widths)
    full_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for block in model:
        fully_shard(block, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    if prefetch is not None:
        prefetch(list(model))
    if phases is not None:
        _mark_blocks(model, phases)
    _sgd(model, _shard(x, rank, world_size), _shard(y, rank, world_size), steps, lr, phases, mark_optimizer=True)
    shard_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    if phases is not None:
        phases.begin("gather")
    params = [p.full_tensor().detach().clone() for p in model.parameters()]
    return {"params": params, "shard_bytes": shard_bytes, "full_bytes": full_bytes}


def fsdp_block_bytes(widths, world_size: int, itemsize: int = 8) -> list:
    """The bytes of each block's all_gather output (= its reduce_scatter input) under FSDP2:
    every parameter's dim 0 padded up to a multiple of ``world_size`` (weight ``(out, in)``,
    bias ``(out,)``), summed per block, times ``itemsize``. A list of int, one per block."""
    out = []
    for a, b in zip(widths, widths[1:]):
        rows = -(-b // world_size) * world_size
        out.append((rows * a + rows) * itemsize)
    return out


def block_of(record, widths, world_size: int) -> int | None:
    """The block whose parameters an FSDP2 all_gather or reduce_scatter ``record`` moved (found by
    its size, :func:`fsdp_block_bytes`), or ``None`` for another operation or size."""
    if kind(record) not in ("all_gather", "reduce_scatter"):
        return None
    sizes = fsdp_block_bytes(widths, world_size)
    return sizes.index(record.nbytes) if sizes.count(record.nbytes) == 1 else None


def label(entry, widths, world_size: int) -> str:
    """A short name for an entry of :func:`collnb.labs.parallel.interleave`: a mark stays as it is,
    an FSDP2 collective becomes ``"all_gather 2"`` / ``"reduce_scatter 2"`` (its block), any other
    record its kind."""
    if isinstance(entry, str):
        return entry
    block = block_of(entry, widths, world_size)
    return kind(entry) if block is None else f"{kind(entry)} {block}"


def max_difference(params: list, reference: list) -> float:
    """The largest absolute difference between two lists of tensors (same shapes), a float.

    Raises:
        ValueError: the lists differ in length or a pair in shape.
    """
    if len(params) != len(reference) or any(a.shape != b.shape for a, b in zip(params, reference)):
        raise ValueError(_("the two parameter lists differ in length or shapes"))
    return max(float((a - b).abs().max()) for a, b in zip(params, reference))


def order_text(records, marks, widths, world_size: int) -> str:
    """One rank's FSDP2 step as text, one line per entry in issue order: ``"▸ forward 1"`` where a
    block's compute starts (a mark), ``"  all_gather      block 1   1.72 KiB"`` for a collective
    (its block found by size, :func:`block_of`). Stops at the ``"gather"`` mark (the whole
    parameters gathered after training)."""
    lines = []
    for entry in interleave(records, marks):
        if isinstance(entry, str):
            if entry == "gather":
                break
            lines.append("▸ " + phase_label(entry))
            continue
        block = block_of(entry, widths, world_size)
        where = _("block {block}").format(block=block) if block is not None else ""
        lines.append(f"    {kind(entry):<16}{pad(where, 9)}{format_bytes(entry.nbytes):>10}")
    return "\n".join(lines)
