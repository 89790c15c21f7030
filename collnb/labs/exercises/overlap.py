"""The exercise of notebook 17 (overlap): average a gradient with an ``all_reduce`` that runs while the
rank computes, checked on real ranks from their timeline (HTA's computation-communication overlap,
:meth:`collnb.Timeline.overlap`) and from the values every rank returns."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from typing import cast

import torch

from ...i18n import _
from ...ranks import Timeline, region
from .framework import Case, Trial, check

__all__ = ["check_overlapped_all_reduce", "GRAD_NUMEL", "COMPUTE_REGION"]

#: Values of the gradient each rank averages (float32, 4 MiB: its all_reduce takes milliseconds, far longer than
#: starting the compute).
GRAD_NUMEL = 1 << 20
#: The region the check's ``compute()`` marks on the timeline (its computation intervals).
COMPUTE_REGION = "compute"


def _overlap_rank(rank: int, world_size: int, learner: Callable[..., object], seed: int,
                  numel: int) -> tuple[object, int]:
    """Runs on a rank: this rank's gradient (random integers from ``seed``, known only to this rank) and
    a ``compute()`` that marks its region and counts its calls; then the learner's function."""
    gen = torch.Generator().manual_seed(seed)
    grad = torch.randint(-50, 51, (numel,), generator=gen).to(torch.float32)
    a0 = torch.randn(256, 256, generator=gen) / 16
    calls: list[int] = []

    def compute() -> torch.Tensor:
        """Independent work (40 matmuls): the gradient's all_reduce can run beside it."""
        calls.append(1)
        with region(COMPUTE_REGION):
            a = a0
            for _ in range(40):
                a = torch.tanh(a @ a)
        return a

    out = learner(rank, world_size, grad, compute)
    return out, len(calls)


def _expected(seeds: Iterable[int], numel: int) -> torch.Tensor:
    """The ranks' gradients (:func:`_overlap_rank`'s, from ``seeds``) averaged: float32, ``numel`` values."""
    seeds = list(seeds)
    parts = [torch.randint(-50, 51, (numel,), generator=torch.Generator().manual_seed(s)).to(torch.float32)
             for s in seeds]
    return torch.stack(parts).sum(0) / len(seeds)


def _timeline(t: Trial[torch.Tensor]) -> Timeline:
    """The ranks' timeline of a trial (the check launches with ``timeline=True``)."""
    if t.timeline is None:
        raise RuntimeError("the overlap check launches its ranks with timeline=True")
    return t.timeline


def _answer(t: Trial[torch.Tensor], rank: int) -> tuple[object, int]:
    """``(what the answer returned, compute() calls)`` of ``rank`` (:func:`_overlap_rank`'s result)."""
    return cast("tuple[object, int]", t.results[rank])


def check_overlapped_all_reduce(overlapped_step: object) -> None:
    """Check ``overlapped_step(rank, world_size, grad, compute)`` (notebook 17): return ``grad``
    (a float32 tensor of :data:`GRAD_NUMEL` random values, this rank's own) **averaged over the
    ranks**, with one ``dist.all_reduce`` that runs **while** ``compute()`` (independent work the
    check provides, marked as the region ``"compute"``) runs: call ``compute()`` once, between
    starting the all_reduce (``async_op=True``) and waiting for it.

    Runs at world sizes 2 and 3 with a timeline (``collnb.launch(..., timeline=True)``). Passes when
    every rank returned the average (within 1e-6), made exactly one ``dist.all_reduce`` of the
    whole gradient and nothing else, called ``compute()`` once, and its overlap as HTA measures it
    (:meth:`collnb.Timeline.overlap`: the time the all_reduce ran beside the compute region, over
    the time it ran) is above 0 on every rank. A launch in which a rank started its all_reduce
    before the compute and still measured no overlap (descheduled on a loaded machine between the
    two) is repeated once.

    Raises:
        CheckFailed: a wrong answer, with a per-rank table and a hint.
    """
    direction = _('Start the all_reduce without waiting for it (async_op=True returns a Work at once), call compute() '
                  'while it runs, then wait() on the Work before you use grad; divide by world_size once the sum is '
                  'there.')

    def cases(rng: random.Random) -> Iterator[Case[torch.Tensor]]:
        for ws in (2, 3):
            seeds = [rng.randrange(1 << 31) for _ in range(ws)]
            yield Case(ws, [(overlapped_step, s, GRAD_NUMEL) for s in seeds], want=_expected(seeds, GRAD_NUMEL),
                       what=_('world size {world_size}').format(world_size=ws), fn=_overlap_rank)

    def overlaps(t: Trial[torch.Tensor]) -> list[dict[str, float]]:
        return [_timeline(t).overlap(r, compute=COMPUTE_REGION) for r in t.ranks]

    def unlucky(t: Trial[torch.Tensor]) -> bool:
        """A rank started its all_reduce before the compute and still measured no overlap: descheduled
        on a loaded machine between the two, not the answer's doing."""
        tl, shares = _timeline(t), overlaps(t)
        starts = [[s.start for s in tl.regions(r) if s.name == COMPUTE_REGION] for r in t.ranks]
        issued = [[s.start for s in tl.operations(r)] for r in t.ranks]
        return any(shares[r]["overlap_pct"] == 0 and bool(starts[r]) and bool(issued[r]) and issued[r][0] < starts[r][0]
                   for r in t.ranks)

    def judge(t: Trial[torch.Tensor]) -> None:
        want, what, calls, tl = t.want, t.what, t.calls, _timeline(t)
        results = [_answer(t, r) for r in t.ranks]
        shares = overlaps(t)
        ok = []
        for r in t.ranks:
            got = results[r][0]
            ok.append(isinstance(got, torch.Tensor) and got.shape == want.shape
                      and bool(torch.allclose(got.to(torch.float32), want, rtol=1e-6, atol=1e-6)))
        t.show([(r, t.summary(r), f"{shares[r]['communication'] / 1e6:.1f}", f"{shares[r]['overlapped'] / 1e6:.1f}",
                 f"{shares[r]['overlap_pct']:.0f} %", results[r][1], "✓" if ok[r] else "✗") for r in t.ranks],
               (_('rank'), _('calls'), _('communication ms'), _('beside compute ms'), _('overlap'), _('compute() calls'),
                _('average')))
        t.only({"all_reduce"}, hint=_('sum the gradients with dist.all_reduce(..., async_op=True). ') + direction)
        if any(t.names(r).count("all_reduce") != 1 for r in t.ranks):
            raise t.fail(_('{what}: every rank must make exactly one dist.all_reduce, of the whole gradient.').format(
                what=what))
        small = [r for r in t.ranks if calls[r][0].nbytes != GRAD_NUMEL * 4]
        if small:
            raise t.fail(_("{what}: rank {r}'s all_reduce carried {n} bytes; the gradient is {numel} float32 values "
                           '({nbytes} bytes).').format(what=what, r=small[0], n=calls[small[0]][0].nbytes,
                                                       numel=GRAD_NUMEL, nbytes=GRAD_NUMEL * 4))
        counted = [sum(1 for s in tl.regions(r) if s.name == COMPUTE_REGION) for r in t.ranks]
        if any(results[r][1] != 1 or counted[r] != 1 for r in t.ranks):
            raise t.fail(_('{what}: every rank must call compute() exactly once (and mark no region of its own named '
                           '"{name}").').format(what=what, name=COMPUTE_REGION))
        flat = [r for r in t.ranks if shares[r]["overlap_pct"] <= 0]
        if flat:
            raise t.fail(_('{what}: on rank(s) {ranks} the all_reduce never ran beside compute() (overlap 0 %): it '
                           'started after the compute or was waited on before it.').format(what=what, ranks=flat))
        bad = [r for r in t.ranks if not ok[r]]
        if bad:
            raise t.fail(_("{what}: rank(s) {bad} did not return the average of the ranks' gradients.").format(
                what=what, bad=bad),
                         _('the all_reduce sums; divide by world_size, and only after wait() returned (before it, the '
                           'sum is not there yet).'))

    # the ranks return (the answer's value, compute() calls): unfinished is a None value and no call
    check(overlapped_step, "overlapped_step(rank, world_size, grad, compute)", direction=direction, cases=cases,
          judge=judge, timeline=True, retry=unlucky,
          unanswered=lambda t: all(_answer(t, r)[0] is None for r in t.ranks) and not any(t.calls),
          passed=_('every rank averaged its gradient with one all_reduce that ran beside compute() (overlap above 0 % on '
                   'every rank, measured on the timeline; world sizes 2 and 3, random gradients)'))
