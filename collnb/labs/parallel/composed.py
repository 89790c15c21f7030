"""Parallelisms composed on one DeviceMesh, as torchtitan trains: one small transformer
(:mod:`.transformer`) trained on real ranks under a :class:`Plan` (which parallelism on which mesh
dimension), each run checked against one process doing the same work.

**The plan.** A mesh is a list of ``(role, size)`` dimensions, outermost first (rank ``r``'s
coordinates are ``r`` written in those sizes, row-major, as ``init_device_mesh`` lays them out:
the innermost dimension's ranks are consecutive, so on a real cluster they share a node). Roles,
with torchtitan's dimension names (``torchtitan/distributed/parallel_dims.py``):

==================  ============================================================================
``dp_replicate``    data parallel, gradients all-reduced (DDP; with ``dp_shard`` or ``cp``: HSDP's
                    replicate dimension)
``dp_shard``        data parallel with FSDP2 (``fully_shard``): parameters, gradients and
                    optimizer state sharded
``cp``              context parallel: the sequence cut over the ranks, attention by ring or
                    Ulysses (:mod:`.context`); FSDP2 shards over ``dp_shard`` and ``cp`` flattened
                    into one dimension (``dp_shard_cp``), as torchtitan does
``tp``              tensor parallel (``parallelize_module``): ``wq``/``wk``/``wv``/``w1`` column-wise,
                    ``wo``/``w2`` row-wise (Megatron's plan; torchtitan's ``apply_tp`` without the
                    sequence-parallel norms)
``pp``              pipeline parallel (``torch.distributed.pipelining``): the blocks cut into equal
                    stages, ``ScheduleGPipe`` or ``Schedule1F1B``, the batch in microbatches
``ep``              expert parallel: the experts of every MoE block cut over the ranks, tokens sent
                    to their expert and back with ``all_to_all`` (the capacity buffers of
                    :mod:`.experts`); the ranks hold different data, so dense gradients are
                    all-reduced over ``dp_replicate`` and ``ep`` flattened, the experts' over
                    ``dp_replicate``
==================  ============================================================================

The batch is cut along dim 0 into one shard per data coordinate (``dp_replicate``, ``dp_shard``,
``ep``, in mesh order), the sequence along dim 1 over ``cp``; every rank's loss is the mean over
its own tokens, and since every shard has as many tokens, the data-parallel average is the whole
batch's mean: one process on the whole batch computes the same loss and gradients
(:func:`.transformer.reference_train`).

**What a rank returns** (:func:`train`): its mesh coordinates, its loss per step, the whole
gradients of the last step and the whole parameters after it (gathered in a ``"check"`` phase that
the traffic leaves out), the bytes it held (:mod:`.memory`) and its phase marks, so that
``collnb.launch(train, ..., record_calls=True)`` gives every collective of every phase
(:mod:`.mesh_traffic`). :func:`deviation` compares a run with one process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict, cast

import torch
import torch.distributed as dist

from ...i18n import N_, _
from ...vocabulary import check_int, check_real
from ...ranks import active_recorder
from .accounting import Mark, Phases, Recorded
from .memory import SavedTensorBytes, is_dtensor, local_bytes
from .plan import DATA_ROLES, MAX_WORLD_SIZE, ROLES, Plan
from .transformer import (MoE, TinyTransformer, Trained, TransformerConfig, expert_forward, grad_of, loss_fn,
                          moe_combine, moe_dispatch)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ParallelStyle

__all__ = ["ROLES", "DATA_ROLES", "Plan", "COMPOSITIONS", "Composition", "composition", "build", "keep_stage",
           "apply_model_parallel", "apply_data_parallel", "tp_plan", "train", "deviation", "global_losses",
           "run_composition", "TOLERANCE", "ExpertParallelMoE", "MAX_WORLD_SIZE", "TrainResult", "Deviation", "Apply",
           "ReduceGrads"]

#: ``apply(model, mesh) -> model``: a learner's composition, instead of :func:`build`.
Apply: TypeAlias = Callable[[TinyTransformer, "DeviceMesh"], torch.nn.Module]
#: ``reduce_grads()``: the gradients all-reduced and averaged by hand (:func:`build`).
ReduceGrads: TypeAlias = Callable[[], None]
#: ``mark(label)``: a phase mark (:meth:`.accounting.Phases.begin`, or nothing without a recorder).
_MarkFn: TypeAlias = Callable[[str], None]
#: ``step(k, x, y) -> loss``: one pipeline step (the loss on the last stage, else ``None``).
_PipelineStep: TypeAlias = Callable[[int, torch.Tensor, torch.Tensor], "float | None"]


class TrainResult(TypedDict):
    """One rank's :func:`train` (the Returns of its docstring say what each holds)."""

    coords: dict[str, int]
    losses: list[float | None]
    grads: dict[str, torch.Tensor]
    params: dict[str, torch.Tensor]
    memory: dict[str, int]
    marks: list[Mark] | None
    log: list[str]


class Deviation(TypedDict):
    """:func:`deviation`'s answer: the largest absolute differences from one process."""

    loss: float
    grads: float
    params: float
    covered: bool  # every parameter of the model was held by some rank

#: Largest absolute difference allowed between a composition and one process (float64): losses,
#: gradients and parameters after AdamW steps. Measured differences are ~1e-16 (reduction order).
TOLERANCE = 1e-12

@dataclass(frozen=True)
class Composition:
    """A named composition of the lesson: its plan, model and data sizes."""

    name: str
    plan: Plan
    config: TransformerConfig = field(default_factory=TransformerConfig)
    batch: int = 4
    seq_len: int = 8


#: The compositions issue 37 asks for, by name (world size 4 each); a name is shown as ``_(comp.name)``.
COMPOSITIONS = {
    "fsdp_tp": Composition("FSDP2 × TP", Plan((("dp_shard", 2), ("tp", 2)))),
    "hsdp": Composition("HSDP", Plan((("dp_replicate", 2), ("dp_shard", 2)))),
    "pp_fsdp": Composition("PP × FSDP", Plan((("pp", 2), ("dp_shard", 2)))),
    "ep_dp": Composition(N_("EP beside DP"), Plan((("dp_replicate", 2), ("ep", 2))), TransformerConfig(experts=4)),
    "cp_ring": Composition("CP (ring) × FSDP", Plan((("dp_shard", 2), ("cp", 2)), attention="ring")),
    "cp_ulysses": Composition("CP (Ulysses) × FSDP", Plan((("dp_shard", 2), ("cp", 2)), attention="ulysses")),
}


def composition(name: str) -> Composition:
    """The :data:`COMPOSITIONS` entry ``name``.

    Raises:
        KeyError: an unknown name, listing the known ones.
    """
    try:
        return COMPOSITIONS[name]
    except KeyError:
        raise KeyError(_("no composition {name}; known: {names}").format(
            name=repr(name), names=", ".join(COMPOSITIONS))) from None


# ----------------------------------------------------------------------------------------------
# On a rank


class ExpertParallelMoE(torch.nn.Module):
    """This rank's part of a :class:`.transformer.MoE`: the router (replicated) and experts
    ``E_local = E / ep`` (``w1``, ``w2`` sliced along dim 0: expert ``e`` lives on the ep rank
    ``e // E_local``). Forward: route and pack this rank's tokens into the ``(E, C, h)`` capacity
    buffer, ``all_to_all`` it over ``group`` (each ep rank receives the slots of its experts from
    every ep rank), run its experts, ``all_to_all`` the outputs back, combine. Both all_to_alls are
    differentiable (in backward they run again, reversed)."""

    def __init__(self, moe: MoE, group: dist.ProcessGroup) -> None:
        super().__init__()
        from .context import _all_to_all

        self._all_to_all = _all_to_all
        n, r = dist.get_world_size(group), dist.get_rank(group)
        self.group, self.ep, self.experts, self.local = group, n, moe.experts, moe.experts // n
        self.capacity_factor = moe.capacity_factor
        self.router = moe.router
        mine = slice(r * self.local, (r + 1) * self.local)
        self.w1 = torch.nn.Parameter(moe.w1.detach()[mine].clone())
        self.w2 = torch.nn.Parameter(moe.w2.detach()[mine].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from .experts import expert_capacity

        tokens = x.reshape(-1, x.shape[-1])
        cap = expert_capacity(tokens.shape[0], self.experts, self.capacity_factor)
        buffer, route, slots, gate = moe_dispatch(tokens, self.router, self.experts, cap)   # (E, C, h)
        got = self._all_to_all(buffer, self.group)                   # (ep sources x E_local, C, h)
        h = x.shape[-1]
        rows = got.view(self.ep, self.local, cap, h).transpose(0, 1).reshape(self.local, self.ep * cap, h)
        out = expert_forward(self.w1, self.w2, rows)
        out = out.view(self.local, self.ep, cap, h).transpose(0, 1).reshape(self.experts, cap, h)
        back = self._all_to_all(out, self.group)                      # (E, C, h): my tokens' outputs
        return moe_combine(back, route, slots, gate).view_as(x)


def tp_plan() -> dict[str, ParallelStyle]:
    """Megatron's plan of a block (module doc): which Linear is column-wise and which row-wise."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(), "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel()}


def _full(t: torch.Tensor) -> torch.Tensor:
    """A copy of the whole tensor (a DTensor's ``full_tensor()``), detached."""
    return (t.full_tensor() if is_dtensor(t) else t).detach().clone()


def _bucket_all_reduce(tensors: Sequence[torch.Tensor], group: dist.ProcessGroup | None, divide: int) -> None:
    """One ``all_reduce`` of every tensor's local values, flattened into one bucket (DDP's
    bucket), then each divided by ``divide``."""
    if not tensors:
        return
    locals_ = [t.to_local() if is_dtensor(t) else t for t in tensors]   # views of the gradients
    flat = torch.cat([t.reshape(-1) for t in locals_])
    if group is not None:
        dist.all_reduce(flat, group=group)
    flat /= divide
    offset = 0
    for t in locals_:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def _flat(mesh: DeviceMesh, roles: Sequence[str]) -> DeviceMesh:
    """The mesh of ``roles`` (mesh order) as one dimension: the dimension itself, or the
    dimensions flattened into ``"a_b"`` (``DeviceMesh._flatten``, as torchtitan does)."""
    from ...ranks import flatten_mesh

    if len(roles) == 1:
        return mesh[roles[0]]
    flat: DeviceMesh = flatten_mesh(mesh[tuple(roles)], "_".join(roles))
    return flat


def build(plan: Plan, config: TransformerConfig, mesh: DeviceMesh,
          rank: int) -> tuple[TinyTransformer, ReduceGrads | None]:
    """On a rank: :class:`.transformer.TinyTransformer` (``config``) with ``plan`` applied on
    ``mesh`` (a DeviceMesh of ``plan``'s shape and names), in torchtitan's order: this stage's
    blocks (:func:`keep_stage`), the parallelisms inside every block (:func:`apply_model_parallel`:
    ``tp``, ``cp``, ``ep``), data parallelism last (:func:`apply_data_parallel`: FSDP2 / HSDP).

    Returns:
        ``(model, reduce_grads)``: ``reduce_grads()`` all-reduces and averages the gradients by
        hand (DDP's bucket) where the plan has data parallelism without FSDP2, else ``None``.
    """
    model = TinyTransformer(config)
    keep_stage(model, plan, rank)                   # pp: this stage's blocks
    apply_model_parallel(model, plan, mesh)         # tp, cp, ep: inside every block
    return model, apply_data_parallel(model, plan, mesh)   # FSDP2 / HSDP over the data dimensions


def keep_stage(model: TinyTransformer, plan: Plan, rank: int) -> None:
    """Under ``pp``: delete from ``model`` the blocks that are not this rank's stage's (stage ``s`` of
    ``S`` keeps blocks ``s * blocks / S`` to ``(s + 1) * blocks / S - 1``, every parameter keeping its
    name), and the final norm and output everywhere but on the last stage. Without ``pp``: nothing."""
    if not plan.has("pp"):
        return
    stage, stages = plan.coordinates(rank)["pp"], plan.size("pp")
    per = len(model.layers) // stages
    for i in range(len(model.layers)):
        if i // per != stage:
            del model.layers[str(i)]
    if stage != stages - 1:
        model.norm = model.output = None


def apply_model_parallel(model: TinyTransformer, plan: Plan, mesh: DeviceMesh) -> None:
    """The parallelisms that change what a block computes, applied to every block of ``model`` in
    place: tensor parallelism over ``mesh["tp"]`` (``parallelize_module`` with :func:`tp_plan`),
    the context-parallel attention core over ``mesh["cp"]`` (:func:`.context.make_core`: ring or
    Ulysses), this rank's experts over ``mesh["ep"]`` (:class:`ExpertParallelMoE`). A role the plan
    does not have is skipped."""
    if plan.has("tp"):
        from torch.distributed.tensor.parallel import parallelize_module
        for block in model.blocks():
            parallelize_module(block, mesh["tp"], tp_plan())
    if plan.has("cp"):
        from .context import make_core
        core = make_core(plan.attention, mesh["cp"].get_group())
        for block in model.blocks():
            block.attention.core = core
    if plan.has("ep"):
        ep_group = mesh["ep"].get_group()
        for block in model.blocks():
            block.feed_forward = ExpertParallelMoE(block.moe(), ep_group)


def apply_data_parallel(model: TinyTransformer, plan: Plan, mesh: DeviceMesh) -> ReduceGrads | None:
    """Data parallelism, applied last: FSDP2 (``fully_shard``, every block then the whole model) over
    ``dp_shard`` (and ``cp``, flattened into ``dp_shard_cp``), as HSDP on the 2-D mesh
    ``(dp_replicate, dp_shard...)`` when the plan has ``dp_replicate``; ``reshard_after_forward=False``
    under ``pp`` (torchtitan's default policy). Without FSDP2 (``dp_replicate`` and/or ``ep`` only)
    the gradients are all-reduced by hand, DDP's way, one bucket each for the dense parameters (over
    the data dimensions flattened) and the experts' (over ``dp_replicate``).

    Returns:
        ``reduce_grads`` (call it after ``backward``) for the by-hand case, else ``None``.
    """
    sharded = [role for role in plan.names if role in ("dp_shard", "cp")]
    if sharded:
        from torch.distributed.fsdp import fully_shard
        shard_mesh = _flat(mesh, sharded)
        dp_mesh = mesh[("dp_replicate", "_".join(sharded))] if plan.has("dp_replicate") else shard_mesh
        reshard = not plan.has("pp")                     # torchtitan: no re-gather per microbatch under PP
        for block in model.blocks():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard)
        return None
    if not (plan.has("dp_replicate") or plan.has("ep")):
        return None
    data = [role for role in plan.names if role in ("dp_replicate", "ep")]
    dense_group = _flat(mesh, data).get_group()
    expert_group = mesh["dp_replicate"].get_group() if plan.has("dp_replicate") else None
    experts = [p for n, p in model.named_parameters() if plan.has("ep") and ".feed_forward.w" in n]
    dense = [p for p in model.parameters() if all(p is not e for e in experts)]

    def reduce_grads() -> None:
        _bucket_all_reduce([grad_of(p) for p in dense], dense_group, plan.batch_shards)
        _bucket_all_reduce([grad_of(p) for p in experts], expert_group, plan.batch_shards)

    return reduce_grads


def train(rank: int, world_size: int, plan: Plan, config: TransformerConfig, x: torch.Tensor, y: torch.Tensor, *,
          steps: int = 2, lr: float = 1e-2, apply: Apply | None = None) -> TrainResult:
    """On a rank: build :class:`.transformer.TinyTransformer`, apply ``plan`` on a CPU DeviceMesh
    and train ``steps`` AdamW steps (``lr``, no weight decay) on this rank's part of ``(x, y)``.
    A rank function for ``collnb.launch(train, plan.world_size, (plan, config, x, y),
    record_calls=True, collective_timeout=60)``.

    Args:
        plan: the :class:`Plan` (its ``world_size`` must be the launch's).
        config: the model. x, y: the whole ``(b, s, h)`` float64 batch and targets (every rank
            takes its part: :meth:`Plan.batch_index`, and its ``cp`` slice of the sequence).
        apply: ``apply(model, mesh) -> model`` instead of :func:`build` (an exercise's answer: the
            plan then only says how the data is cut and names the mesh's dimensions).

    Phases (with ``record_calls=True``): ``"step k/forward"``, ``"step k/backward"``,
    ``"step k/optimizer"`` for k = 1..steps, ``"check"`` where the whole gradients and parameters
    are gathered for the comparison (not part of training). Under ``pp`` the forward and backward
    marks come from hooks on the stage (torch's schedule runs the microbatches); the send/recv of
    activations and gradients are told apart by direction (:mod:`.mesh_traffic`).

    Returns:
        :class:`TrainResult`: ``coords`` ({role: index}), ``losses`` (this rank's loss per step, the mean over its
        tokens; ``None`` on a pipeline stage without the loss), ``grads`` and ``params`` ({name:
        whole tensor} for the parameters this rank holds: the last step's gradients before its
        optimizer step, the parameters after it), ``memory`` (:func:`.memory` counts of the last
        step: ``params``, ``grads``, ``optimizer``, ``activations`` (peak saved for backward) in
        bytes), ``marks`` (the phase marks, ``None`` without a recorder), ``log`` (the lines DTensor
        logged, each once, e.g. its "sequential all_gather" warning; not printed).

    Raises:
        ValueError: the plan does not fit the world size, model or batch (:meth:`Plan.check`).
    """
    from .flattening import captured_dtensor_log

    with captured_dtensor_log() as log:      # DTensor's warnings, kept out of the cell (returned)
        out = _train(rank, world_size, plan, config, x, y, steps=steps, lr=lr, apply=apply)
    out["log"] = list(dict.fromkeys(log))
    return out


def _train(rank: int, world_size: int, plan: Plan, config: TransformerConfig, x: torch.Tensor, y: torch.Tensor, *,
           steps: int, lr: float, apply: Apply | None) -> TrainResult:
    from torch.distributed.device_mesh import init_device_mesh

    if world_size != plan.world_size:
        raise ValueError(_("the plan {plan} needs {n} ranks; launched on {ws}").format(
            plan=plan.text(), n=plan.world_size, ws=world_size))
    plan.check(config, x.shape[0], x.shape[1])
    phases = Phases() if active_recorder() is not None else None
    mark: _MarkFn = phases.begin if phases is not None else (lambda label: None)

    mesh = init_device_mesh("cpu", plan.sizes, mesh_dim_names=plan.names)
    coords = plan.coordinates(rank)
    xb, yb = x.chunk(plan.batch_shards)[plan.batch_index(rank)], y.chunk(plan.batch_shards)[plan.batch_index(rank)]
    if plan.has("cp"):
        xb, yb = xb.chunk(plan.size("cp"), 1)[coords["cp"]], yb.chunk(plan.size("cp"), 1)[coords["cp"]]

    model: torch.nn.Module
    by_hand: ReduceGrads | None = None
    if apply is not None:
        model = apply(TinyTransformer(config), mesh)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(_("{name} must return the model (a torch.nn.Module); it returned {value}").format(
                name=getattr(apply, "__name__", "apply"), value=repr(model)[:60]))
    else:
        model, by_hand = build(plan, config, mesh, rank)
    stage, stages = coords.get("pp", 0), plan.size("pp")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    saved = SavedTensorBytes(model)
    losses: list[float | None] = []
    grads: dict[str, torch.Tensor] = {}
    memory: dict[str, int] = {}
    if plan.has("pp"):
        step_of = _pipeline(model, mesh, plan, stage, stages, mark)
    for k in range(1, steps + 1):
        last = k == steps
        opt.zero_grad()
        with saved.tracking(last):
            loss: float | None
            if plan.has("pp"):
                loss = step_of(k, xb, yb)
            else:
                mark(f"step {k}/forward")
                out = loss_fn(model(xb), yb)
                mark(f"step {k}/backward")
                out.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
                loss = out.item()
                if by_hand is not None:
                    by_hand()
        losses.append(loss)
        if last:
            memory["grads"] = sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
            mark("check")
            grads = _gather(model, plan, mesh, "grad")
        mark(f"step {k}/optimizer")
        opt.step()
    memory["params"] = sum(local_bytes(p) for p in model.parameters())
    memory["optimizer"] = sum(local_bytes(v) for state in opt.state.values() for key, v in state.items()
                              if key != "step" and isinstance(v, torch.Tensor))
    memory["activations"] = saved.peak
    mark("check")
    params = _gather(model, plan, mesh, "param")
    return TrainResult(coords=coords, losses=losses, grads=grads, params=params, memory=memory,
                       marks=phases.close() if phases is not None else None, log=[])


def _gather(model: torch.nn.Module, plan: Plan, mesh: DeviceMesh,
            what: Literal["param", "grad"]) -> dict[str, torch.Tensor]:
    """``{name: whole tensor}`` of this rank's parameters (``what="param"``) or gradients
    (``"grad"``): DTensors by ``full_tensor()``, expert slices by an all_gather over ``ep``."""
    out = {}
    for name, p in model.named_parameters():
        t: torch.Tensor | None = p if what == "param" else p.grad
        if t is None:
            continue
        if plan.has("ep") and ".feed_forward.w" in name:
            group = mesh["ep"].get_group()
            pieces = [torch.empty_like(t) for _r in range(dist.get_world_size(group))]
            dist.all_gather(pieces, t.detach().contiguous(), group=group)
            out[name] = torch.cat(pieces)
        else:
            out[name] = _full(t)
    return out


def _pipeline(model: torch.nn.Module, mesh: DeviceMesh, plan: Plan, stage: int, stages: int,
              mark: _MarkFn) -> _PipelineStep:
    """The stage's ``PipelineStage`` and schedule; returns ``step(k, x, y) -> loss or None``."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    step_no = [0]

    def pre(module: torch.nn.Module, args: tuple[object, ...]) -> None:
        mark(f"step {step_no[0]}/forward")

    def post(module: torch.nn.Module, args: tuple[object, ...], out: object) -> None:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(  # type: ignore[no-untyped-call]  # torch's Tensor.register_hook has no annotations
                lambda grad: mark(f"step {step_no[0]}/backward"))

    model.register_forward_pre_hook(pre, prepend=True)
    model.register_forward_hook(post, prepend=True)
    pipe = PipelineStage(model, stage, stages, torch.device("cpu"), group=mesh["pp"].get_group())
    cls = ScheduleGPipe if plan.schedule == "gpipe" else Schedule1F1B
    schedule = cls(pipe, n_microbatches=plan.microbatches, loss_fn=loss_fn, scale_grads=True)

    def step(k: int, x: torch.Tensor, y: torch.Tensor) -> float | None:
        step_no[0] = k
        mark(f"step {k}/forward")
        if stage == 0:
            schedule.step(x)
            return None
        if stage == stages - 1:
            losses: list[torch.Tensor] = []
            schedule.step(target=y, losses=losses)
            return float(sum(v.item() for v in losses) / len(losses))
        schedule.step()
        return None

    return step


# ----------------------------------------------------------------------------------------------
# In the kernel


def global_losses(results: Iterable[TrainResult], plan: Plan) -> list[float]:
    """The whole batch's loss per step from every rank's :func:`train` result: the mean over the
    ranks that hold a loss, one per data and ``cp`` coordinate (a ``tp`` replica counts once).
    A list of float."""
    held = [[v for v in r["losses"] if v is not None] for r in results  # a stage has every loss or none
            if r["coords"].get("tp", 0) == 0 and r["losses"][0] is not None]
    return [sum(step) / len(step) for step in zip(*held)]


def deviation(results: Iterable[TrainResult], reference: Trained, plan: Plan) -> Deviation:
    """The largest absolute differences between a composition's ranks and one process
    (:func:`.transformer.reference_train`).

    Returns:
        :class:`Deviation`: ``loss`` (every step's whole-batch loss), ``grads`` (every rank's whole
        gradient of every parameter it holds), ``params`` (likewise, after the last optimizer
        step), and ``covered`` (bool: every parameter of the model was held by some rank).

    Raises:
        KeyError: a rank returned a parameter the reference does not have.
    """
    ranks = list(results)
    losses = global_losses(ranks, plan)
    worst = {"grads": 0.0, "params": 0.0}
    seen = set()
    for r in ranks:
        for what, mine, theirs in (("grads", r["grads"], reference["grads"]), ("params", r["params"], reference["params"])):
            for name, t in mine.items():
                worst[what] = max(worst[what], float((t - theirs[name]).abs().max()))
                seen.add(name)
    return Deviation(loss=max(abs(a - b) for a, b in zip(losses, reference["losses"])), grads=worst["grads"],
                     params=worst["params"], covered=seen == set(reference["params"]))


def run_composition(name_or_plan: str | Plan, config: TransformerConfig | None = None, *, batch: int | None = None,
                    seq_len: int | None = None, steps: int = 2, lr: float = 1e-2, seed: int = 1,
                    collective_timeout: float = 60.0) -> tuple[Recorded[TrainResult], Trained, Plan]:
    """Launch :func:`train` on real gloo ranks (``record_calls=True``) and one process beside it.

    Args:
        name_or_plan: a :data:`COMPOSITIONS` name or a :class:`Plan`.
        config, batch, seq_len: the model and data (defaults: the composition's, else
            ``TransformerConfig()``, 4, 8).
        steps, lr: AdamW steps and learning rate. seed: the data (:func:`.transformer.make_batch`).

    Raises:
        ValueError / TypeError: before any rank starts, for steps outside 1..1000, a learning rate not in
            0..10 (or not finite), an unknown composition, or a plan the model or batch does not fit.

    Returns:
        ``(results, reference, plan)``: the :class:`collnb.LaunchResults` of :func:`train` (each
        rank's dict; ``.calls[r]`` its recorded operations), :func:`.transformer.reference_train`'s
        dict, the plan.
    """
    from ...ranks import launch
    from .transformer import make_batch, reference_train

    check_int("steps", steps, 1, 1000, what=_("AdamW steps"))  # steps=0 ran, then every comparison of it raised
    check_real("lr", lr, 0.0, 10.0, what=_("AdamW's learning rate"))  # nan reached the ranks' AdamW
    if isinstance(name_or_plan, Plan):
        comp = Composition(name_or_plan.text(), name_or_plan)
    else:
        comp = composition(name_or_plan)
    config = config or comp.config
    batch, seq_len = batch or comp.batch, seq_len or comp.seq_len
    plan = comp.plan
    plan.check(config, batch, seq_len)
    x, y = make_batch(config, batch, seq_len, seed)
    results = cast("Recorded[TrainResult]",  # what launch returns with record_calls=True (a LaunchResults)
                   launch(train, plan.world_size, (plan, config, x, y), dict(steps=steps, lr=lr), record_calls=True,
                          collective_timeout=collective_timeout, debug=False))
    groups = plan.batch_shards if config.experts else 1
    reference = reference_train(config, x, y, steps=steps, lr=lr, groups=groups)
    return results, reference, plan
