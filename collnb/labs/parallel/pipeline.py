"""Pipeline parallelism: one stage per rank, GPipe and 1F1B by hand with send/recv, and the same
split with ``torch.distributed.pipelining``; each checked against one process.

The model is ``p`` stages (one per rank), each ``tanh(Linear(h, h))`` in float64. A batch of
``m * b`` rows is cut into ``m`` microbatches of ``b`` rows. Stage ``s`` runs the forward of a
microbatch (``F j``) on the activation it received from stage ``s - 1`` and sends its output to
stage ``s + 1``; the backward (``B j``) receives the gradient of that output from stage ``s + 1``,
runs autograd through the stage and sends the gradient of its input to stage ``s - 1``. The loss
of microbatch ``j`` is ``sum((out_j - y_j)^2) / (m b)``, so the summed gradients are the whole
batch's mean-squared-error gradients.

**Schedules** (:func:`schedule_order`). *GPipe* (Huang et al. 2019, *GPipe: Efficient Training of
Giant Neural Networks using Pipeline Parallelism*, NeurIPS, arXiv:1811.06965, §2.2-2.3): every
forward, then every backward. *1F1B* (Narayanan et al. 2019, *PipeDream*, SOSP; the
non-interleaved schedule of Narayanan et al. 2021, *Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM*, SC21, §2.2.1): stage ``s`` runs ``min(p - s - 1, m)`` warm-up
forwards, then alternates one forward and one backward, then drains the remaining backwards. Both
keep the pipeline idle for the same **bubble**: with equal work per microbatch the idle fraction of
every stage is ``(p - 1) / (m + p - 1)`` (:func:`bubble_formula`; GPipe §2.3 gives the overhead as
``O((K - 1) / (M + K - 1))``; the Ultra-Scale Playbook's pipeline chapter, Tazi et al. 2025,
huggingface.co/spaces/nanotron/ultrascale-playbook, writes the bubble against the ideal time as
``(p - 1) / m``, the same idle time). What differs is memory: a stage holds the activations of every
microbatch whose forward ran and whose backward did not: ``m`` under GPipe, at most ``p - s`` under
1F1B (:func:`pipeline_step` counts them on the ranks).

**Communication** (:func:`pipeline_step`). Gloo's ``send`` completes only when the peer posts the
matching ``recv`` (measured here: a ``dist.send`` waited 0.3 s for a receiver that slept 0.3 s), so
1F1B with plain blocking sends deadlocks (stage ``s`` sends its next activation while stage ``s +
1`` sends it a gradient). As Megatron-LM does (``megatron/core/pipeline_parallel/
p2p_communication.py``: ``send_forward_recv_backward``, ``send_backward_recv_forward``), a send
followed by a receive from the same peer is posted as one ``dist.batch_isend_irecv`` and waited on
together; other sends and receives are blocking. Every message is one ``(b, h)`` float64 tensor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ...i18n import _
from ...ranks import launch, region

__all__ = ["SCHEDULES", "schedule_order", "bubble_formula", "stage_module", "pipeline_model", "microbatch_data",
           "reference_grads", "pipeline_step", "run_stage", "torch_pipeline_step", "max_grad_difference", "bubble_measured",
           "schedule_text", "messages", "peak_formula"]

#: The schedules :func:`schedule_order` knows, by name.
SCHEDULES = ("gpipe", "1f1b")


def _check_schedule(schedule: str, stage: int, num_stages: int, m: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(_("unknown schedule {value}; choose one of {names}").format(
            value=repr(schedule), names=", ".join(SCHEDULES)))
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(_("num_stages must be an int >= 1; got {value}").format(value=repr(num_stages)))
    if not isinstance(stage, int) or not 0 <= stage < num_stages:
        raise ValueError(_("stage must be an int in 0..{last}; got {value}").format(
            last=num_stages - 1, value=repr(stage)))
    if not isinstance(m, int) or m < 1:
        raise ValueError(_("the number of microbatches m must be an int >= 1; got {value}").format(value=repr(m)))


def schedule_order(schedule: str, stage: int, num_stages: int, m: int) -> list:
    """The order in which stage ``stage`` of ``num_stages`` runs its ``m`` forwards and backwards.

    Args:
        schedule: ``"gpipe"`` (all forwards, then all backwards, each in microbatch order, as
            ``torch.distributed.pipelining.ScheduleGPipe``) or ``"1f1b"`` (``min(p - s - 1, m)``
            warm-up forwards, then one forward and one backward in turn, then the remaining
            backwards, as ``Schedule1F1B`` and Megatron-LM's non-interleaved schedule).
        stage: the stage (int, ``0 .. num_stages - 1``).
        num_stages: ``p`` (int >= 1). m: microbatches (int >= 1).

    Returns:
        list of ``("F", j)`` / ``("B", j)`` tuples, ``2 m`` of them.

    Raises:
        ValueError: an unknown schedule, or a stage, ``num_stages`` or ``m`` out of range.
    """
    _check_schedule(schedule, stage, num_stages, m)
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    warmup = min(num_stages - stage - 1, m)
    order = [("F", j) for j in range(warmup)]
    for i in range(m - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", j) for j in range(m - warmup, m)]


def bubble_formula(num_stages: int, m: int) -> float:
    """The idle fraction of a GPipe or 1F1B step with equal work per microbatch and stage:
    ``(p - 1) / (m + p - 1)`` (Huang et al. 2019, GPipe, §2.3; the Ultra-Scale Playbook, "Pipeline
    parallelism": bubble time ``(p - 1)(t_f + t_b)`` of a step of ``(m + p - 1)(t_f + t_b)``).

    Raises:
        ValueError: ``num_stages`` or ``m`` below 1.
    """
    if num_stages < 1 or m < 1:
        raise ValueError(_("num_stages and m must be >= 1; got {stages}, {m}").format(stages=num_stages, m=m))
    return (num_stages - 1) / (m + num_stages - 1)


def peak_formula(schedule: str, stage: int, num_stages: int, m: int) -> int:
    """The most microbatches whose activations stage ``stage`` holds at once under ``schedule``:
    ``m`` for GPipe, ``min(p - stage, m)`` for 1F1B (counted from :func:`schedule_order`)."""
    held = peak = 0
    for kind_, _micro in schedule_order(schedule, stage, num_stages, m):
        held += 1 if kind_ == "F" else -1
        peak = max(peak, held)
    return peak


def stage_module(stage: int, width: int, seed: int = 0) -> torch.nn.Module:
    """Stage ``stage`` of the teaching model: ``tanh(Linear(width, width))`` in float64, its weights
    drawn from ``seed`` and ``stage`` only (every process builds the same stage)."""
    gen = torch.Generator().manual_seed(seed * 1000 + stage)
    lin = torch.nn.Linear(width, width, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(width, width, generator=gen, dtype=torch.float64) / width ** 0.5)
        lin.bias.copy_(torch.randn(width, generator=gen, dtype=torch.float64) * 0.1)
    return torch.nn.Sequential(lin, torch.nn.Tanh())


def pipeline_model(num_stages: int, width: int, seed: int = 0) -> torch.nn.Sequential:
    """The whole model in one process: the ``num_stages`` stages of :func:`stage_module` in order."""
    return torch.nn.Sequential(*[stage_module(s, width, seed) for s in range(num_stages)])


def microbatch_data(m: int, b: int, width: int, seed: int = 0) -> tuple:
    """A batch of ``m * b`` rows: ``(x, y)``, each ``(m b, width)`` float64 (``x.chunk(m)`` are the
    microbatches, as torch.distributed.pipelining splits them)."""
    gen = torch.Generator().manual_seed(seed + 12345)
    return (torch.randn(m * b, width, generator=gen, dtype=torch.float64),
            torch.randn(m * b, width, generator=gen, dtype=torch.float64))


def _loss(out: torch.Tensor, target: torch.Tensor, rows: int) -> torch.Tensor:
    return ((out - target) ** 2).sum() / rows


def reference_grads(x: torch.Tensor, y: torch.Tensor, m: int, num_stages: int, width: int, seed: int = 0) -> list:
    """One process: the whole model, the ``m`` microbatches' losses backpropagated one after the
    other (the order the pipeline accumulates them). Returns one list per stage of its parameters'
    gradients (``[weight, bias]``, float64)."""
    model = pipeline_model(num_stages, width, seed)
    for xj, yj in zip(x.chunk(m), y.chunk(m)):
        _loss(model(xj), yj, x.shape[0]).backward()
    return [[p.grad.clone() for p in stage.parameters()] for stage in model]


def max_grad_difference(per_rank: list, reference: list) -> float:
    """The largest absolute difference between each rank's stage gradients (``per_rank[r]``: a list
    of tensors) and one process's (:func:`reference_grads`)."""
    return max(float((g - want).abs().max()) for grads, ref in zip(per_rank, reference) for g, want in zip(grads, ref))


def _sleep_ms(ms: float) -> None:
    if ms > 0:
        time.sleep(ms / 1e3)


def pipeline_step(rank: int, world_size: int, schedule: str, x: torch.Tensor, y: torch.Tensor, m: int, *,
                  width: int, seed: int = 0, forward_ms: float = 0.0, backward_ms: float = 0.0) -> dict:
    """Runs on a rank: one training step of stage ``rank`` (of ``world_size`` stages) under
    ``schedule``, by hand with send/recv (see the module docstring for the protocol).

    Each forward and backward is a :func:`collnb.region` named ``"F j"``/``"B j"`` inside one
    ``"step"`` region (drawn by ``launch(..., timeline=True)``); ``forward_ms``/``backward_ms`` add a
    sleep to each, so that the schedule, not the machine's load, sets the picture (2 shared cores:
    a sleeping rank leaves the cores to the others). Under ``timeline=True`` a fresh rank's first
    step also pays a one-off import (collnb's recorder imports ``torch.distributed.tensor`` at the
    first operation it inspects: about 2 s on 2 cores): import it in the kernel before the ranks
    start, or time a second step.

    Args:
        schedule: ``"gpipe"`` or ``"1f1b"``. x, y: the whole batch, ``(m b, width)`` float64 (only
            stage 0 reads ``x``, only the last stage ``y``). m: microbatches (``m b`` rows).
        width: the stages' width. seed: the model's weights (:func:`stage_module`).
        forward_ms, backward_ms: extra time per forward / backward (ms, float >= 0).

    Returns:
        dict: ``grads`` (the stage's ``[weight, bias]`` gradients), ``peak`` (the most microbatches
        whose activations the stage held at once: input and output kept for backward), ``order``
        (the ``("F", j)``/``("B", j)`` run), ``loss`` (last stage: the summed loss, float; else None).

    Raises:
        ValueError: as :func:`schedule_order`, or ``x`` rows not divisible by ``m``.
    """
    order = schedule_order(schedule, rank, world_size, m)
    if x.shape[0] % m:
        raise ValueError(_("{rows} rows do not split into m={m} equal microbatches").format(rows=x.shape[0], m=m))
    stage = stage_module(rank, width, seed)
    peak, loss_sum = run_stage(rank, world_size, stage, order, x.chunk(m), y.chunk(m), x.shape[0],
                               forward_ms=forward_ms, backward_ms=backward_ms)
    return dict(grads=[q.grad.clone() for q in stage.parameters()], peak=peak, order=order,
                loss=loss_sum if rank == world_size - 1 else None)


def run_stage(rank: int, world_size: int, stage: torch.nn.Module, order: list, xs: tuple, ys: tuple, rows: int, *,
              forward_ms: float = 0.0, backward_ms: float = 0.0) -> tuple[int, float]:
    """Runs on a rank: the loop every stage of :func:`pipeline_step` runs, one training step of
    ``stage`` (stage ``rank`` of ``world_size``) in the order ``order`` (:func:`schedule_order`), with
    send/recv: ``F j`` receives microbatch ``j``'s activation from stage ``rank - 1`` (stage 0 takes
    ``xs[j]``), runs the stage and sends its output to ``rank + 1``; ``B j`` receives the gradient of
    that output from ``rank + 1`` (the last stage computes the loss against ``ys[j]`` instead),
    backpropagates and sends the gradient of its input to ``rank - 1``. A send followed by a receive
    from the same peer is posted as one ``dist.batch_isend_irecv`` (1F1B deadlocks otherwise: see
    the module docstring).

    Args:
        stage: this rank's stage module (its gradients accumulate on its parameters).
        order: the ``("F", j)`` / ``("B", j)`` run. xs, ys: the ``m`` microbatches of inputs and targets,
            ``(b, width)`` float64 each. rows: the whole batch's rows (the loss divides by them).
        forward_ms, backward_ms: a sleep per forward / backward (ms).

    Returns:
        ``(peak, loss_sum)``: the most microbatches whose activations the stage held at once, and (last
        stage) the summed loss, float (``0.0`` on the other stages).
    """
    s, p = rank, world_size
    first, last = s == 0, s == p - 1
    b, width = xs[0].shape
    held, inbox, peak, loss_sum = {}, {}, 0, 0.0

    def source(op):
        """The rank op ``op`` receives from before it runs (None: it receives nothing)."""
        if op[0] == "F":
            return None if first else s - 1
        return None if last else s + 1

    def buffer():
        return torch.empty(b, width, dtype=torch.float64)

    dist.barrier()                                   # every stage starts the step together
    with region("step"):
        for i, op in enumerate(order):
            kind_, j = op
            peer = source(op)
            if peer is not None and op not in inbox:
                inbox[op] = buffer()
                dist.recv(inbox[op], src=peer)
            with region(f"{kind_}{j}"):
                if kind_ == "F":
                    inp = xs[j] if first else inbox.pop(op).requires_grad_(True)
                    out = stage(inp)
                    held[j] = (inp, out)
                    peak = max(peak, len(held))
                    _sleep_ms(forward_ms)
                    outgoing = None if last else (out.detach(), s + 1)
                else:
                    inp, out = held.pop(j)
                    if last:
                        loss = _loss(out, ys[j], rows)
                        loss_sum += loss.item()
                        loss.backward()
                    else:
                        out.backward(inbox.pop(op))
                    _sleep_ms(backward_ms)
                    outgoing = None if first else (inp.grad, s - 1)
            nxt = order[i + 1] if i + 1 < len(order) else None
            if outgoing is None:
                continue
            tensor, dst = outgoing
            if nxt is not None and source(nxt) == dst:   # a send and a receive with one peer: post both
                inbox[nxt] = buffer()
                works = dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, dst),
                                                dist.P2POp(dist.irecv, inbox[nxt], dst)])
                for w in works:
                    w.wait()
            else:
                dist.send(tensor, dst=dst)
    return peak, loss_sum


def torch_pipeline_step(rank: int, world_size: int, schedule: str, x: torch.Tensor, y: torch.Tensor, m: int, *,
                        width: int, seed: int = 0) -> dict:
    """Runs on a rank: the same step with ``torch.distributed.pipelining``: stage ``rank``'s module
    (:func:`stage_module`) in a ``PipelineStage`` on CPU, ``ScheduleGPipe`` or ``Schedule1F1B`` with
    ``n_microbatches=m``, the same loss (``scale_grads=False``: the loss already divides by the whole
    batch, as in :func:`pipeline_step`). Stage 0 passes ``x``, the last stage ``target=y``.

    Returns:
        dict: ``grads`` (the stage's ``[weight, bias]`` gradients), ``loss`` (last stage: the summed
        microbatch losses, float; else None).
    """
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    _check_schedule(schedule, rank, world_size, m)
    module = stage_module(rank, width, seed)
    stage = PipelineStage(module, rank, world_size, torch.device("cpu"))
    rows = x.shape[0]
    cls = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
    sched = cls(stage, n_microbatches=m, loss_fn=lambda out, target: _loss(out, target, rows), scale_grads=False)
    losses = []
    if rank == 0:
        sched.step(x)
    elif rank == world_size - 1:
        sched.step(target=y, losses=losses)
    else:
        sched.step()
    return dict(grads=[q.grad.clone() for q in module.parameters()],
                loss=float(sum(v.item() for v in losses)) if rank == world_size - 1 else None)


def messages(records, nbytes: int | None = None) -> list:
    """The point-to-point messages among one rank's recorded operations (``launch(...,
    record_calls=True).calls[r]``), in issue order: ``(direction, peer, nbytes)`` with direction
    ``"send"`` or ``"recv"`` for a ``send``/``isend`` or ``recv``/``irecv``, also inside a
    ``batch_isend_irecv`` (``send_object_list``/``recv_object_list`` and collectives left out).

    Args:
        records: a rank's :class:`collnb.CallRecord` list.
        nbytes: keep only messages of this many bytes (e.g. one activation); ``None``: all.
    """
    out = []
    for r in records:
        what = r.op if r.name == "batch_isend_irecv" else r.name
        if what in ("send", "recv", "isend", "irecv") and (nbytes is None or r.nbytes == nbytes):
            out.append((what.lstrip("i"), r.peer, r.nbytes))
    return out


def bubble_measured(timeline, step: str = "step", work=None) -> dict:
    """The bubble measured on a ``launch(..., timeline=True)`` run of :func:`pipeline_step`.

    The step's span is from the earliest start of a ``step`` region on any rank to its latest end
    (the pipeline's makespan); a rank is busy inside its ``F j``/``B j`` regions and idle for the rest
    of the span (waiting in a receive, or done early).

    Args:
        timeline: a :class:`collnb.Timeline`. step: the name of the step region.
        work: a predicate on a region's name telling work regions (default: ``F``/``B`` + a number).

    Returns:
        dict: ``makespan_ms`` (float), ``busy_ms`` and ``idle_fraction`` per rank (lists), and
        ``bubble`` (float, 0..1: the idle time of every rank over ``p`` × the makespan).

    Raises:
        ValueError: a rank without a ``step`` region.
    """
    work = work or (lambda name: name[:1] in ("F", "B") and name[1:].isdigit())
    steps = []
    for r in range(timeline.world_size):
        found = [sp for sp in timeline.regions(r) if sp.name == step]
        if not found:
            raise ValueError(_("rank {rank} has no {step} region: time pipeline_step with launch(..., timeline=True)").format(
                rank=r, step=repr(step)))
        steps.append(found[0])
    t0, t1 = min(sp.start for sp in steps), max(sp.end for sp in steps)
    span = t1 - t0
    busy = [sum(sp.duration for sp in timeline.regions(r) if work(sp.name)) for r in range(timeline.world_size)]
    idle = [1.0 - b / span for b in busy]
    return dict(makespan_ms=span / 1e6, busy_ms=[b / 1e6 for b in busy], idle_fraction=idle,
                bubble=sum(idle) / len(idle))


def schedule_text(schedule: str, num_stages: int, m: int) -> str:
    """Each stage's order of forwards and backwards as one line of text (``stage 0: F0 F1 B0 ...``),
    with the peak number of activations it holds."""
    lines = [f"{schedule}, p={num_stages}, m={m}:"]
    for s in range(num_stages):
        ops = " ".join(f"{k}{j}" for k, j in schedule_order(schedule, s, num_stages, m))
        lines.append("  " + _("stage {stage}: {ops}   (holds at most {peak})").format(
            stage=s, ops=ops, peak=peak_formula(schedule, s, num_stages, m)))
    return "\n".join(lines)


@dataclass(frozen=True)
class ScheduleParams:
    """What :func:`explore_schedules` lets a learner set: the schedule and the microbatch count."""

    schedule: str = "1f1b"
    m: int = 8


def explore_schedules(world_size: int = 4, *, m: int = 8, schedule: str = "1f1b", max_m: int = 12,
                      forward_ms: float = 10.0, backward_ms: float = 20.0, width: int = 16, b: int = 4,
                      seed: int = 0, wait: bool = True):
    """A widget: the microbatch count ``m`` as a slider and the schedule as a dropdown; each change
    runs one :func:`pipeline_step` on ``world_size`` real ranks with ``launch(..., timeline=True)``
    and draws its per-rank timeline (:func:`collnb.timeline_image`) with the measured bubble beside
    :func:`bubble_formula` and the activations each stage held.

    Args:
        world_size: stages (int, 2..8). m, schedule: the first values shown. max_m: the slider's end.
        forward_ms, backward_ms: the time each forward / backward takes (ms; see :func:`pipeline_step`).
        width, b, seed: the model's width, rows per microbatch, weights.
        wait: block until the first picture is drawn (so a notebook run without a browser shows it).

    Returns:
        :class:`collnb.views.Binder` (display it; ``.set(m=4)`` changes it from code; ``.last_result``
        is the latest ``LaunchResults``, ``.caption.value`` its line).

    Raises:
        ValueError: ``world_size`` outside 2..8, ``m`` outside 1..max_m, or an unknown schedule.
    """
    from ...views import Binder, timeline_image

    if not 2 <= world_size <= 8:
        raise ValueError(_("world_size must be 2..8 stages; got {value}").format(value=world_size))
    if not 1 <= m <= max_m:
        raise ValueError(_("m must be in 1..{most}; got {value}").format(most=max_m, value=m))
    _check_schedule(schedule, 0, world_size, m)
    names = {"gpipe": "GPipe", "1f1b": "1F1B"}

    def choices(_p):
        return {"schedule": [(names[k], k) for k in SCHEDULES], "m": list(range(1, max_m + 1))}

    def fix(p):
        return p, []

    warmed = []

    def run(p):
        if not warmed:  # a fresh rank's first recorded step imports torch.distributed.tensor (seconds): not timed
            launch(pipeline_step, world_size, ("gpipe", *microbatch_data(1, b, width, seed), 1), dict(width=width),
                   timeline=True, debug=False)
            warmed.append(True)
        x, y = microbatch_data(p.m, b, width, seed)
        return launch(pipeline_step, world_size, (p.schedule, x, y, p.m),
                      dict(width=width, seed=seed, forward_ms=forward_ms, backward_ms=backward_ms),
                      timeline=True, debug=False)

    def draw(out, p):
        got, formula = bubble_measured(out.timeline)["bubble"], bubble_formula(world_size, p.m)
        peaks = [r["peak"] for r in out]
        title = _("{schedule}, p={p} stages, m={m}: idle {measured} measured, (p-1)/(m+p-1) = {formula}").format(
            schedule=names[p.schedule], p=world_size, m=p.m, measured=f"{got:.0%}", formula=f"{formula:.0%}")
        png = timeline_image(out.timeline, title=title).png
        caption = _("{schedule}, m={m}: bubble measured {measured}, formula {formula}; activations "
                    "held at most, per stage: {peaks}").format(schedule=names[p.schedule], m=p.m,
                                                               measured=f"{got:.2f}", formula=f"{formula:.2f}",
                                                               peaks=peaks)
        return png, caption

    return Binder(ScheduleParams(schedule, m), choices, fix, run, draw,
                  labels={"schedule": _("schedule"), "m": _("microbatches m")}, name="pipeline", what="pipeline explorer",
                  wait=wait, sliders=("m",))
