"""The overlap lab's DDP part (notebook 17): ``DistributedDataParallel`` with ``bucket_cap_mb`` chosen by
the learner, a communication hook that records which gradient bucket fired when, and HTA's
computation-communication overlap measured twice: honestly, and with the pitfall HTA PR #162 fixed.

**The step** (:func:`ddp_step`, on every rank): an MLP of ``layers`` ``nn.Linear(width, width)``
(each weight ``width**2`` float32: 1 MiB at width 512) wrapped in DDP with ``bucket_cap_mb``; one
warm-up step (DDP rebuilds its buckets after the first backward, in the order the gradients became
ready), then one timed step inside ``collnb.region("step")``: ``forward``, then ``backward`` (the
region a learner would mark around ``loss.backward()``). DDP's reducer calls the registered hook
once per bucket as soon as every gradient of the bucket is ready; the hook
(:func:`recording_hook`) wraps torch's ``allreduce_hook``
(``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``), marks its call as a region
``bucket <index>`` and records the bucket's index, size and parameters. Each layer's own gradient
computation is marked ``grad <layer>`` (module backward hooks), so the timeline shows what backward
computed apart from where it waited.

**The pitfall.** ``loss.backward()`` returns only after DDP waited for every bucket's all_reduce
(the reducer's ``finalize_backward`` waits on the hooks' futures). Counting the ``backward`` region
as computation counts that wait as compute, and the overlap looks higher than it was: what HTA PR
#162 fixed ("Device Sync, Stream Sync and Event Sync ... were mistakenly treated as computation
kernels, which lead to falsely higher Comm/Comp overlap ratio",
https://github.com/facebookresearch/HolisticTraceAnalysis/pull/162; HTA's ``is_compute_kernel`` has
since excluded names matching ``.*Sync``, ``hta/utils/utils.py``). :func:`overlap_both_ways` gives the
naive overlap (``forward`` + ``backward`` as compute) and the honest one (``forward`` + the layers'
``grad`` regions), both with :meth:`collnb.Timeline.overlap` (HTA's definition: the time
communication and computation both run, over the time communication runs;
``hta/analyzers/communication_analysis.py``, ``get_comm_comp_overlap``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypedDict, cast, get_type_hints

import torch
import torch.distributed as dist
from torch import nn

from ..ranks import LaunchResults, Timeline, launch, region
from ..i18n import _, ngettext
from ..views import Binder, timeline_image

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from ..views import MatrixPicture

__all__ = ["ddp_step", "recording_hook", "bucket_run", "overlap_both_ways", "BucketRun", "HONEST", "NAIVE",
           "explore_buckets", "bucket_image", "BUCKET_CAPS"]

#: The ``bucket_cap_mb`` settings the explorer offers (MiB); at 8 layers of 1 MiB: 8, 4, 2, 1 and 1 buckets.
BUCKET_CAPS = (1.0, 2.0, 4.0, 8.0, 25.0)

#: The regions counted as computation, honestly: the forward pass and each layer's gradient computation.
HONEST = ("forward", "grad")
#: ... and as a learner who marks ``loss.backward()`` would count them: the wait at its end included.
NAIVE = ("forward", "backward")

#: One bucket's firing: ``(index, numel, n_params, fired_ns)`` (``fired_ns``: ``time.perf_counter_ns()``).
Fired = tuple[int, int, int, int]


class StepResult(TypedDict):
    """What :func:`ddp_step` returns on a rank (its docstring)."""

    buckets: list[Fired]
    grad0: float


def recording_hook(state: list[Fired], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook (``ddp.register_comm_hook(state, recording_hook)``): torch's
    ``allreduce_hook`` on the default group, its call marked as the region ``bucket <index>`` and
    ``(index, numel, n_params, fired_ns)`` appended to ``state`` (``fired_ns``: ``time.perf_counter_ns()``,
    the timeline's clock). Returns the hook's future (the averaged bucket)."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook  # noqa: PLC0415

    state.append((bucket.index(), bucket.buffer().numel(), len(bucket.parameters()), time.perf_counter_ns()))
    with region(f"bucket {bucket.index()}"):
        return allreduce_hook(None, bucket)  # type: ignore[arg-type]  # torch's annotation omits None: the default group


# DDP's register_comm_hook compares the hook's annotations with dist.GradBucket and
# torch.futures.Future[torch.Tensor] themselves (DistributedDataParallel._check_comm_hook): the
# strings `from __future__ import annotations` leaves there are refused, so they are evaluated.
recording_hook.__annotations__ = get_type_hints(recording_hook)


def _mark_grads(model: nn.Module) -> list[RemovableHandle]:
    """Each Linear's gradient computation as a region ``grad`` (backward pre-hook opens it, the
    backward hook closes it); returns the hook handles."""
    handles: list[RemovableHandle] = []
    open_regions: list[contextlib.AbstractContextManager[None]] = []

    def pre(module: nn.Module, grad_output: tuple[torch.Tensor, ...]) -> None:
        r = region("grad")
        r.__enter__()
        open_regions.append(r)

    def post(module: nn.Module, grad_input: tuple[torch.Tensor, ...], grad_output: tuple[torch.Tensor, ...]) -> None:
        if open_regions:
            open_regions.pop().__exit__(None, None, None)

    for m in model.modules():
        if isinstance(m, nn.Linear):
            handles += [m.register_full_backward_pre_hook(pre), m.register_full_backward_hook(post)]
    return handles


def ddp_step(rank: int, world_size: int, bucket_cap_mb: float, layers: int = 8, width: int = 512,
             batch: int = 256) -> StepResult:
    """Runs on every rank: the DDP step of the module docstring. Returns ``{"buckets": [(index, numel,
    n_params, fired_ns), ...]}`` of the timed step (in firing order) and ``"grad0"``, the first weight's
    averaged gradient's first value (the same on every rank)."""
    torch.manual_seed(0)
    linears = [nn.Linear(width, width) for _ in range(layers)]
    model = nn.Sequential(*linears)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    fired: list[Fired] = []
    ddp.register_comm_hook(fired, recording_hook)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(rank + 1))
    ddp(x).square().mean().backward()  # warm-up: DDP rebuilds its buckets in gradient-ready order
    ddp.zero_grad()
    fired.clear()
    handles = _mark_grads(model)
    dist.barrier()
    with region("step"):
        with region("forward"):
            loss = ddp(x).square().mean()
        with region("backward"), warnings.catch_warnings():
            # the first Linear's input needs no gradient: its full backward hook fires on its output's
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss.backward()
    for h in handles:
        h.remove()
    grad = linears[0].weight.grad
    if grad is None:
        raise RuntimeError("DDP's backward left the first weight without a gradient")
    return {"buckets": list(fired), "grad0": float(grad[0, 0])}


class BucketRun:
    """One :func:`bucket_run`: the timeline and each rank's buckets.

    Attributes:
        bucket_cap_mb: the setting (float, MiB: DDP's ``bucket_cap_mb``).
        timeline: the launch's :class:`collnb.Timeline`.
        buckets: per rank, ``[(index, numel, n_params, fired_ns), ...]`` in firing order.
        grad0: per rank, the first weight's averaged gradient's first value (equal on every rank).
    """

    def __init__(self, bucket_cap_mb: float, timeline: Timeline, results: Sequence[StepResult]) -> None:
        self.bucket_cap_mb = bucket_cap_mb
        self.timeline = timeline
        self.buckets = [r["buckets"] for r in results]
        self.grad0 = [r["grad0"] for r in results]

    @property
    def n_buckets(self) -> int:
        """Buckets of the timed step (rank 0; every rank has the same)."""
        return len({b[0] for b in self.buckets[0]})

    def overlap(self, rank: int, compute: str | Iterable[str] = HONEST) -> dict[str, float]:
        """:meth:`collnb.Timeline.overlap` within the ``step`` region, ``compute`` the regions counted as
        computation (:data:`HONEST` or :data:`NAIVE`)."""
        return self.timeline.overlap(rank, compute=compute, within="step")


def bucket_run(bucket_cap_mb: float, world_size: int = 2, **kwargs: int) -> BucketRun:
    """:func:`ddp_step` on ``world_size`` ranks with ``launch(..., timeline=True)`` (``kwargs``:
    its ``layers``, ``width``, ``batch``).

    Raises:
        ValueError: ``bucket_cap_mb`` not a number > 0.
    """
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or not bucket_cap_mb > 0:
        raise ValueError(_("bucket_cap_mb must be a number of MiB > 0 (DDP's default is 25); got {value}").format(
            value=repr(bucket_cap_mb)))
    out = cast(LaunchResults,  # what launch returns with timeline=True
               launch(ddp_step, world_size, (float(bucket_cap_mb),), kwargs, timeline=True, debug=False))
    if out.timeline is None:
        raise RuntimeError("launch(..., timeline=True) returned no timeline")
    return BucketRun(float(bucket_cap_mb), out.timeline, list(out))


def overlap_both_ways(run: BucketRun) -> list[tuple[int, dict[str, float], dict[str, float]]]:
    """Per rank, ``(rank, honest, naive)``: :meth:`BucketRun.overlap` with :data:`HONEST` and with
    :data:`NAIVE` (the backward's wait for its buckets counted as compute) as compute."""
    return [(r, run.overlap(r, HONEST), run.overlap(r, NAIVE)) for r in range(run.timeline.world_size)]


def bucket_image(run: BucketRun, width: int = 1000) -> MatrixPicture:
    """The timed step of ``run`` on the timeline (:func:`collnb.timeline_image`, the ``step`` window
    only), titled with the setting, the buckets and each rank's exposed communication."""
    steps = [s for r in range(run.timeline.world_size) for s in run.timeline.regions(r) if s.name == "step"]
    start, end = min(s.start for s in steps) / 1e6, max(s.end for s in steps) / 1e6
    exposed = ", ".join(f"rank {r} {run.overlap(r)['exposed'] / 1e6:.0f} ms" for r in range(run.timeline.world_size))
    title = ngettext("DDP, bucket_cap_mb={cap}: {n} bucket; exposed communication {exposed}",
                     "DDP, bucket_cap_mb={cap}: {n} buckets; exposed communication {exposed}", run.n_buckets)
    return timeline_image(run.timeline, start_ms=start - 2, end_ms=end + 2, width=width,
                          title=title.format(cap=f"{run.bucket_cap_mb:g}", n=run.n_buckets, exposed=exposed))


@dataclasses.dataclass(frozen=True)
class BucketParams:
    """The explorer's one control: DDP's ``bucket_cap_mb`` (MiB)."""

    bucket_cap_mb: float = 2.0


def explore_buckets(bucket_cap_mb: float = 2.0, wait: bool = True) -> Binder:
    """A slider over :data:`BUCKET_CAPS`; each setting runs :func:`bucket_run` on 2 real ranks and draws
    :func:`bucket_image`, with the buckets that fired and HTA's overlap (honest and naive) per rank in
    the caption. Returns the :class:`collnb.views.Binder` (``.last_result``: the :class:`BucketRun`)."""

    def fix(p: BucketParams) -> tuple[BucketParams, list[str]]:
        if p.bucket_cap_mb in BUCKET_CAPS:
            return p, []
        near = min(BUCKET_CAPS, key=lambda c: abs(c - p.bucket_cap_mb))
        return BucketParams(near), [_("bucket_cap_mb={asked} is not offered; {near} is the nearest").format(
            asked=f"{p.bucket_cap_mb:g}", near=f"{near:g}")]

    def draw(run: BucketRun, p: BucketParams) -> tuple[bytes, str]:
        rows = "; ".join(_("rank {rank}: overlap {honest} % (naive {naive} %)").format(
            rank=r, honest=f"{h['overlap_pct']:.0f}", naive=f"{n['overlap_pct']:.0f}")
                         for r, h, n in overlap_both_ways(run))
        fired = ", ".join(f"#{i} {numel * 4 / 2**20:.1f} MiB" for i, numel, _n_params, _fired_ns in run.buckets[0])
        return bucket_image(run).png, _("buckets in firing order: {fired}. HTA's overlap: {rows}").format(
            fired=fired, rows=rows)

    return Binder(BucketParams(float(bucket_cap_mb)), lambda p: {"bucket_cap_mb": list(BUCKET_CAPS)}, fix,
                  lambda p: bucket_run(p.bucket_cap_mb), draw, labels={"bucket_cap_mb": "bucket_cap_mb (MiB)"},
                  name="bucket-explorer", what="bucket explorer", wait=wait, sliders=("bucket_cap_mb",))
