"""The exercise of notebook 17 (overlap): average a gradient with an ``all_reduce`` that runs while the
rank computes, checked on real ranks from their timeline (HTA's computation-communication overlap,
:meth:`collnb.Timeline.overlap`) and from the values every rank returns."""

from __future__ import annotations

from typing import Callable

import torch

from ...i18n import _
from ...ranks import region
from .framework import (_check_only, _check_params, _fail, _launch_or_fail, _names, _passed, _rng, _summary,
                        _table, _unfinished)

__all__ = ["check_overlapped_all_reduce", "GRAD_NUMEL", "COMPUTE_REGION"]

#: Values of the gradient each rank averages (float32, 4 MiB: its all_reduce takes milliseconds, far longer than
#: starting the compute).
GRAD_NUMEL = 1 << 20
#: The region the check's ``compute()`` marks on the timeline (its computation intervals).
COMPUTE_REGION = "compute"


def _overlap_rank(rank: int, world_size: int, learner: Callable, seed: int, numel: int):
    """Runs on a rank: this rank's gradient (random integers from ``seed``, known only to this rank) and
    a ``compute()`` that marks its region and counts its calls; then the learner's function."""
    gen = torch.Generator().manual_seed(seed)
    grad = torch.randint(-50, 51, (numel,), generator=gen).to(torch.float32)
    a0 = torch.randn(256, 256, generator=gen) / 16
    calls = []

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


def _expected(seeds, numel: int) -> torch.Tensor:
    parts = [torch.randint(-50, 51, (numel,), generator=torch.Generator().manual_seed(s)).to(torch.float32)
             for s in seeds]
    return torch.stack(parts).sum(0) / len(seeds)


def check_overlapped_all_reduce(overlapped_step: Callable) -> None:
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
    _check_params(overlapped_step, "overlapped_step(rank, world_size, grad, compute)")
    direction = _('Start the all_reduce without waiting for it (async_op=True returns a Work at once), call compute() '
                  'while it runs, then wait() on the Work before you use grad; divide by world_size once the sum is '
                  'there.')
    rng = _rng()
    table = ""
    for ws in (2, 3):
        what = _('world size {world_size}').format(world_size=ws)
        for attempt in range(2):
            seeds = [rng.randrange(1 << 31) for _ in range(ws)]
            results, calls, tl = _launch_or_fail(_overlap_rank, ws, [(overlapped_step, s, GRAD_NUMEL) for s in seeds],
                                                 hint=direction, what=what, timeline=True)
            overlaps = [tl.overlap(r, compute=COMPUTE_REGION) for r in range(ws)]
            starts = [[s.start for s in tl.regions(r) if s.name == COMPUTE_REGION] for r in range(ws)]
            issued = [[s.start for s in tl.operations(r)] for r in range(ws)]
            unlucky = [r for r in range(ws) if overlaps[r]["overlap_pct"] == 0 and starts[r] and issued[r]
                       and issued[r][0] < starts[r][0]]
            if not unlucky or attempt == 1:
                break
        if ws == 2 and all(r[0] is None for r in results) and not any(calls):   # the stub: returns None, says nothing
            return _unfinished("overlapped_step", direction)
        want = _expected(seeds, GRAD_NUMEL)
        ok = []
        for r in range(ws):
            got = results[r][0]
            ok.append(isinstance(got, torch.Tensor) and got.shape == want.shape
                      and bool(torch.allclose(got.to(torch.float32), want, rtol=1e-6, atol=1e-6)))
        rows = [(r, _summary(calls[r]), f"{overlaps[r]['communication'] / 1e6:.1f}",
                 f"{overlaps[r]['overlapped'] / 1e6:.1f}", f"{overlaps[r]['overlap_pct']:.0f} %", results[r][1],
                 "✓" if ok[r] else "✗") for r in range(ws)]
        table = _table(rows, (_('rank'), _('calls'), _('communication ms'), _('beside compute ms'), _('overlap'),
                              _('compute() calls'), _('average')))
        _check_only(calls, {"all_reduce"}, hint=_('sum the gradients with dist.all_reduce(..., async_op=True). ')
                    + direction)
        if any(_names(c).count("all_reduce") != 1 for c in calls):
            raise _fail(_('{what}: every rank must make exactly one dist.all_reduce, of the whole gradient.').format(
                what=what), direction, table)
        small = [r for r in range(ws) if calls[r][0].nbytes != GRAD_NUMEL * 4]
        if small:
            raise _fail(_("{what}: rank {r}'s all_reduce carried {n} bytes; the gradient is {numel} float32 values "
                          '({nbytes} bytes).').format(what=what, r=small[0], n=calls[small[0]][0].nbytes,
                                                      numel=GRAD_NUMEL, nbytes=GRAD_NUMEL * 4), direction, table)
        counted = [sum(1 for s in tl.regions(r) if s.name == COMPUTE_REGION) for r in range(ws)]
        if any(results[r][1] != 1 or counted[r] != 1 for r in range(ws)):
            raise _fail(_('{what}: every rank must call compute() exactly once (and mark no region of its own named '
                          '"{name}").').format(what=what, name=COMPUTE_REGION), direction, table)
        flat = [r for r in range(ws) if overlaps[r]["overlap_pct"] <= 0]
        if flat:
            raise _fail(_('{what}: on rank(s) {ranks} the all_reduce never ran beside compute() (overlap 0 %): it '
                          'started after the compute or was waited on before it.').format(what=what, ranks=flat),
                        direction, table)
        bad = [r for r in range(ws) if not ok[r]]
        if bad:
            raise _fail(_("{what}: rank(s) {bad} did not return the average of the ranks' gradients.").format(
                what=what, bad=bad),
                        _('the all_reduce sums; divide by world_size, and only after wait() returned (before it, the '
                          'sum is not there yet).'), table)
    _passed(_('every rank averaged its gradient with one all_reduce that ran beside compute() (overlap above 0 % on '
              'every rank, measured on the timeline; world sizes 2 and 3, random gradients)'), table)
