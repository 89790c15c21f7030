"""Notebook 11, data-parallel training: the tiny model every rank builds, plain SGD steps, and the
check of a learner's gradient averaging against one model trained on the whole batch."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import cast

import torch

from ...i18n import _
from .framework import Case, Trial, check


# ----------------------------------------------------------------------------------------------
# 11 · data-parallel gradient averaging


def tiny_model(seed: int = 0) -> torch.nn.Module:
    """The small float64 model of notebook 11: ``Linear(3, 4) → Tanh → Linear(4, 1)``, initialised
    from ``torch.manual_seed(seed)`` so every rank and the kernel build the same weights."""
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    finally:
        torch.random.set_rng_state(gen_state)
    return model


def train_steps(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
                after_backward: Callable[[torch.nn.Module], object] | None = None) -> list[torch.Tensor]:
    """Train ``model`` with plain SGD on the mean squared error for ``steps`` steps on (x, y).

    ``after_backward(model)``, if given, runs between ``loss.backward()`` and the update: a
    data-parallel rank averages its gradients there. A parameter without a gradient (``.grad`` is
    ``None``: not used by the loss) is not updated, as ``torch.optim.SGD`` skips it. Returns the
    final parameters (detached copies, in ``model.parameters()`` order).
    """
    for _step in range(steps):
        model.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward has no annotations
        if after_backward is not None:
            after_backward(model)
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.sub_(lr * p.grad)  # what p -= lr * p.grad does, in place
    return [p.detach().clone() for p in model.parameters()]


def _ddp_rank(rank: int, world_size: int, average_gradients: Callable[[torch.nn.Module], object], x: torch.Tensor,
              y: torch.Tensor, steps: int, lr: float) -> list[torch.Tensor]:
    """Runs on a rank: :func:`tiny_model` trained on this rank's shard ``(x, y)`` with the learner's
    ``average_gradients`` after each backward; its final parameters."""
    return train_steps(tiny_model(), x, y, steps, lr, after_backward=average_gradients)


def check_average_gradients(average_gradients: object) -> None:
    """Check ``average_gradients(model)`` (notebook 11): after ``loss.backward()`` on each rank's own
    shard of the batch, replace every parameter's ``.grad`` by its mean over the ranks, with
    ``dist.all_reduce``.

    Trains :func:`tiny_model` for 3 SGD steps on real ranks (random world size 2-4; every rank
    gets its own random shard of 4 samples, known only to it) and compares each rank's final
    parameters with the same model trained in this kernel on the **concatenated** batch. Only
    ``dist.all_reduce`` calls are accepted (a functional collective or ``ProcessGroup`` method
    doing the work is refused), and together they must carry the gradients: per step as many
    float64 elements as the model has parameters (one call per parameter, or fewer on flattened
    buckets), so a token all_reduce beside the real work is refused too.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    steps, lr = 3, 0.1
    n_params = sum(p.numel() for p in tiny_model().parameters())
    direction = (_('Each rank holds the gradient of its own shard. Every rank must end with the same, averaged '
                   'gradient: which collective combines a tensor across the ranks in place, and what must follow it to '
                   'turn a sum into a mean?'))

    def cases(rng: random.Random) -> Iterator[Case[list[torch.Tensor]]]:
        ws = rng.randint(2, 4)
        gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
        x = torch.randn(4 * ws, 3, generator=gen, dtype=torch.float64)
        y = torch.randn(4 * ws, 1, generator=gen, dtype=torch.float64)
        want = train_steps(tiny_model(), x, y, steps, lr)
        args = [(average_gradients, x[4 * r: 4 * r + 4], y[4 * r: 4 * r + 4], steps, lr) for r in range(ws)]
        yield Case(ws, args, want=want, what=_('world size {world_size}').format(world_size=ws), fn=_ddp_rank)

    def judge(t: Trial[list[torch.Tensor]]) -> None:
        want, ws, calls = t.want, t.world_size, t.calls
        devs = []
        rows = []
        for r in t.ranks:
            params = cast("list[torch.Tensor]", t.results[r])  # what _ddp_rank returns
            devs.append(max(float((a - b).abs().max()) for a, b in zip(params, want)))
            carried = sum(c.nbytes for c in calls[r] if c.name == "all_reduce") // 8
            rows.append((r, f"{devs[r]:.2e}", f"{carried}", t.summary(r)))
        t.show(rows, (_('rank'), _('max |param - single-process|'), _('float64 values all_reduced'), _('calls')))
        t.only({"all_reduce"}, hint=_('average the gradients with dist.all_reduce. ') + direction)
        if not any(t.names(r) for r in t.ranks):
            raise t.fail(_('world size {world_size}: no rank communicated, so each rank trained on its own shard only.').format(world_size=ws))
        for r in t.ranks:
            odd = [c for c in calls[r] if c.dtypes != ("float64",) * len(c.dtypes)]
            carried = sum(c.nbytes for c in calls[r]) // 8
            if odd or carried != steps * n_params:
                raise t.fail(_("world size {world_size}: rank {r}'s all_reduce calls carried {carried} values {odd}over "
                               '{steps} steps; the gradients are {n_params} float64 values per step ({steps_n_params} in '
                               'all).').format(world_size=ws, r=r, carried=carried, odd=_('(some not float64) ') if odd else '', steps=steps, n_params=n_params, steps_n_params=steps * n_params),
                             _('all_reduce the gradients themselves (each p.grad), nothing else. ') + direction)
        bad = [r for r in t.ranks if float(rows[r][1]) > 1e-9]
        if bad:
            raise t.fail(_('world size {world_size}: rank(s) {bad} ended with parameters that differ from the single-process '
                           'model trained on the concatenated batch.').format(world_size=ws, bad=bad),
                         _("the gradient of the mean loss over the whole batch is the MEAN of the ranks' gradients: a SUM "
                           'over the ranks, then divided by the world size.'))

    # the ranks return their parameters, never None: an unfinished answer is a stub
    check(average_gradients, "average_gradients(model)", direction=direction, cases=cases, judge=judge,
          unanswered="stub",
          passed=_("at world size {world_size}, every rank's model equals the single-process model trained on the "
                   'concatenated batch, and the all_reduce calls carried exactly the gradients'))
