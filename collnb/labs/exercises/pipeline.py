"""Exercise checks of notebook 16 (a pipeline stage's forward and backward with send/recv), on real
ranks with the calls recorded. Each passes only for the learner's own working answer: every rank's
stage weights are random and known only to it, the result is compared with the whole model in one
process, and each rank's sends and receives must pass one microbatch at a time."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar, cast

import torch

from ...i18n import _
from .framework import Case, Trial, check, world_sizes

if TYPE_CHECKING:
    from ...ranks import CallRecord

__all__ = ["check_pipeline_forward", "check_pipeline_backward"]

#: What a check's cases hold for its judge (:class:`.framework.Case`'s ``want``).
W = TypeVar("W")


# ----------------------------------------------------------------------------------------------
# 16 · one pipeline stage's forward, with send/recv


def _random_stage(gen: torch.Generator, h: int) -> torch.nn.Module:
    """``tanh(Linear(h, h))`` in float64, random weights from ``gen``, no gradients."""
    lin = torch.nn.Linear(h, h, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(h, h, generator=gen, dtype=torch.float64) / h ** 0.5)
        lin.bias.copy_(torch.randn(h, generator=gen, dtype=torch.float64))
    stage = torch.nn.Sequential(lin, torch.nn.Tanh())
    stage.requires_grad_(False)
    return stage


def _stage_messages(records: Iterable[CallRecord]) -> list[tuple[str, int | None, int]]:
    """``(direction, peer, nbytes)`` per send/recv of a rank's grouped calls (``isend``/``irecv`` and
    a ``batch_isend_irecv``'s parts count as ``send``/``recv``)."""
    out = []
    for c in records:
        what = c.op if c.name == "batch_isend_irecv" and c.op else c.name
        out.append((what.lstrip("i"), c.peer, c.nbytes))
    return out


def _check_stage_messages(t: Trial[W], step: Callable[[int], list[tuple[str, int, int]]], m: int, one: int, *,
                          size_hint: str, order_hint: str) -> None:
    """Refuse a rank whose sends and receives are not ``step(r)`` (``(direction, peer, nbytes)`` for one
    microbatch) ``m`` times over, microbatch after microbatch: a ✗ naming a message of the wrong size
    (``size_hint``) where only sizes differ, else the calls it should have made (``order_hint``)."""
    for r in t.ranks:
        made = _stage_messages(t.calls[r])
        if made != step(r) * m:
            sizes_off = [n for _, _, n in made if n != one]
            if sizes_off and [(d, p) for d, p, _ in made] == [(d, p) for d, p, _ in step(r) * m]:
                raise t.fail(_('{what}: rank {r} moved a message of {sizes_off_0} bytes; one microbatch is b x h = '
                               '{b_h} float64 values ({one} bytes).').format(what=t.what, r=r, sizes_off_0=sizes_off[0], b_h=one // 8, one=one),
                             size_hint)
            want_calls = ", ".join(f"{d}({'src' if d == 'recv' else 'dst'}={p})" for d, p, _ in step(r))
            raise t.fail(_('{what}: rank {r} made {calls_r}; each of the {m} microbatches should be {want_calls}, '
                           'one microbatch after the other.').format(what=t.what, r=r, calls_r=t.summary(r), m=m, want_calls=want_calls),
                         order_hint)


def check_pipeline_forward(stage_forward: object) -> None:
    """Check ``stage_forward(rank, world_size, layer, inputs)`` (notebook 16): the forward half of
    GPipe on one stage, with send/recv.

    Every rank is one stage; ``layer`` is its stage (``tanh(Linear(h, h))``, random weights known only
    to this rank). ``inputs`` is a list of ``m`` microbatches, each ``(b, h)`` float64: on rank 0 the
    real ones (random, known only to rank 0), on every other rank zeros of the same shape to receive
    into. For each microbatch in order a rank takes its input (rank 0: ``inputs[j]``; others: a
    ``recv`` from ``rank - 1``), applies ``layer`` and sends the result to ``rank + 1`` (not the last
    rank). The last rank returns its ``m`` outputs stacked, ``(m, b, h)``; the others return ``None``.

    Passes when the last rank's outputs equal the whole model on one process (within 1e-12) and each
    rank's calls are, in this order, ``m`` times ``recv`` from ``rank - 1`` (not rank 0) then ``send``
    to ``rank + 1`` (not the last rank) — ``isend``/``irecv`` and ``batch_isend_irecv`` count as their
    blocking forms —, every message one microbatch (``b h`` float64 values), and nothing else. Two
    launches at random world sizes (2-4), random ``m`` (2-5), ``b`` and ``h``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Each rank handles the microbatches one at a time, in order: rank 0 starts from its own input, every '
                   'other rank first receives its input from the rank before it (into the buffer it was given). Then '
                   'the stage runs, and every rank but the last passes its output on to the next rank. What does the '
                   'last rank return?'))

    def cases(rng: random.Random) -> Iterator[Case[tuple[torch.Tensor, int, int]]]:
        for ws in world_sizes(rng, 2, 4):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            m, b, h = rng.randint(2, 5), rng.randint(2, 4), rng.randint(3, 6)
            layers = [_random_stage(gen, h) for _ in range(ws)]
            xs = [torch.randn(b, h, generator=gen, dtype=torch.float64) for _ in range(m)]
            with torch.no_grad():
                want = torch.stack([torch.nn.Sequential(*layers)(x) for x in xs])
            args = [(layers[r], [x.clone() for x in xs] if r == 0 else [torch.zeros(b, h, dtype=torch.float64)
                                                                         for _ in range(m)]) for r in range(ws)]
            yield Case(ws, args, want=(want, m, b * h * 8),
                       what=_('world size {world_size}, m={m} microbatches').format(world_size=ws, m=m))

    def judge(t: Trial[tuple[torch.Tensor, int, int]]) -> None:
        (want, m, one), ws, what = t.want, t.world_size, t.what
        last = t.results[ws - 1]
        dev = (float((last - want).abs().max()) if isinstance(last, torch.Tensor) and last.shape == want.shape
               else None)
        t.show([(r, t.summary(r), "-" if r < ws - 1 else (_("wrong shape") if dev is None else f"{dev:.2e}"))
                for r in t.ranks], (_('rank'), _('calls'), _("max |last rank's output - one process|")))
        t.only({"send", "recv", "isend", "irecv"},
               hint=_('pass activations with dist.send / dist.recv (or isend / irecv). ') + direction)
        _check_stage_messages(
            t, lambda r: ([("recv", r - 1, one)] if r > 0 else []) + ([("send", r + 1, one)] if r < ws - 1 else []),
            m, one, size_hint=_("send and receive one microbatch's activation per message."),
            order_hint=_('a stage passes each microbatch on as soon as it is done (that is what makes it a '
                         'pipeline): receive microbatch j, run the stage, send it, then the next. ') + direction)
        if dev is None or dev > 1e-12:
            got = 'something other than an (m, b, h) tensor' if dev is None else 'outputs other than the whole model'
            raise t.fail(_('{what}: the last rank returned {got} (one process).').format(what=what, got=got),
                         _('on every rank apply layer to the input you took (rank 0: inputs[j]; others: what you '
                           'received), and on the last rank return torch.stack of the m outputs.'))
        if any(t.results[r] is not None for r in range(ws - 1)):
            raise t.fail(_('{what}: a rank before the last returned something.').format(what=what), _("only the last rank has the model's output: return None on the others."))

    # every rank but the last returns None: an unfinished answer is a stub
    check(stage_forward, "stage_forward(rank, world_size, layer, inputs)", direction=direction, cases=cases,
          judge=judge, unanswered="stub",
          passed=_("each stage passed its activations on microbatch by microbatch with send/recv; the last rank's outputs "
                   'equal the whole model on one process (world sizes {first_size} and {second_size}, random weights on '
                   'each rank and random inputs on rank 0 only)'))


# ----------------------------------------------------------------------------------------------
# 16 · one pipeline stage's backward, with send/recv


def check_pipeline_backward(stage_backward: object) -> None:
    """Check ``stage_backward(rank, world_size, layer, inputs, grads)`` (notebook 16): the backward half
    of GPipe on one stage, with send/recv.

    Every rank is one stage; ``layer`` is its stage (``tanh(Linear(h, h))``, random weights known only
    to this rank, ``requires_grad`` on, no ``.grad`` yet). ``inputs`` is the list of the ``m``
    microbatch activations this stage received in its forward (``(b, h)`` float64 each, the real ones
    of the whole model's forward, known only to this rank). ``grads`` is a list of ``m`` ``(b, h)``
    float64 tensors: on the last rank the loss's gradient w.r.t. each of its outputs (random, known
    only to the last rank), on every other rank zeros to receive into. For each microbatch a rank
    takes the gradient of its stage's output (the last rank: ``grads[j]``; the others: a ``recv`` from
    ``rank + 1``), backpropagates it through ``layer`` applied to ``inputs[j]`` (the parameters'
    gradients accumulate over the microbatches) and sends the gradient of the stage's input to
    ``rank - 1`` (not rank 0). Every rank returns its stage's parameter gradients,
    ``[p.grad for p in layer.parameters()]``.

    Passes when every rank's gradients equal one process's backward of the whole model on the same
    microbatches (within 1e-12) and each rank's calls are, microbatch by microbatch, ``recv`` from
    ``rank + 1`` (not the last rank) then ``send`` to ``rank - 1`` (not rank 0) —
    ``isend``/``irecv`` and ``batch_isend_irecv`` count as their blocking forms —, every message one
    microbatch (``b h`` float64 values), and nothing else. Two launches at random world sizes (2-4),
    random ``m`` (2-5), ``b`` and ``h``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = _('The gradients travel the other way: the last rank starts from grads[j], every other rank first '
                  'receives the gradient of its output from the rank after it. Backpropagate it through layer applied '
                  'to inputs[j] (the input needs requires_grad to get a gradient of its own), and pass the gradient of '
                  'the input on to the rank before, microbatch by microbatch.')

    def cases(rng: random.Random) -> Iterator[Case[tuple[list[list[torch.Tensor]], int, int]]]:
        for ws in world_sizes(rng, 2, 4):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            m, b, h = rng.randint(2, 5), rng.randint(2, 4), rng.randint(3, 6)
            layers = [_random_stage(gen, h).requires_grad_(True) for _ in range(ws)]
            xs = [torch.randn(b, h, generator=gen, dtype=torch.float64) for _ in range(m)]
            gs = [torch.randn(b, h, generator=gen, dtype=torch.float64) for _ in range(m)]
            stage_inputs: list[list[torch.Tensor]] = [[] for _ in range(ws)]
            with torch.no_grad():
                for x in xs:
                    for r, layer in enumerate(layers):
                        stage_inputs[r].append(x.clone())
                        x = layer(x)
            args = [(copy.deepcopy(layers[r]), stage_inputs[r],
                     [g.clone() for g in gs] if r == ws - 1 else [torch.zeros(b, h, dtype=torch.float64) for _ in range(m)])
                    for r in range(ws)]
            model = torch.nn.Sequential(*layers)
            for x, g in zip(xs, gs):
                model(x).backward(g)
            want = [[cast(torch.Tensor, p.grad) for p in layer.parameters()]  # the backward above filled them
                    for layer in layers]
            yield Case(ws, args, want=(want, m, b * h * 8),
                       what=_('world size {world_size}, m={m} microbatches').format(world_size=ws, m=m))

    def judge(t: Trial[tuple[list[list[torch.Tensor]], int, int]]) -> None:
        (want, m, one), ws, what = t.want, t.world_size, t.what
        devs: list[float | None] = []
        for r in t.ranks:
            got = t.results[r]
            ok = isinstance(got, (list, tuple)) and len(got) == len(want[r]) and all(
                isinstance(a, torch.Tensor) and a.shape == w.shape for a, w in zip(got, want[r]))
            devs.append(max(float((a - w).abs().max()) for a, w in zip(got, want[r]))
                        if ok and isinstance(got, (list, tuple)) else None)
        t.show([(r, t.summary(r), _("not the parameters' gradients") if devs[r] is None else f"{devs[r]:.2e}")
                for r in t.ranks], (_('rank'), _('calls'), _("max |stage's gradients - one process|")))
        t.only({"send", "recv", "isend", "irecv"},
               hint=_('pass gradients with dist.send / dist.recv (or isend / irecv). ') + direction)
        _check_stage_messages(
            t, lambda r: ([("recv", r + 1, one)] if r < ws - 1 else []) + ([("send", r - 1, one)] if r > 0 else []),
            m, one, size_hint=_("send and receive one microbatch's gradient per message."),
            order_hint=_('in backward a stage passes each gradient on as soon as it has it: receive the gradient of '
                         'microbatch j, backpropagate, send the input gradient, then the next. ') + direction)
        wrong = [r for r, d in enumerate(devs) if d is None or d > 1e-12]
        if wrong:
            raise t.fail(_("{what}: rank(s) {wrong} returned gradients other than one process's (the whole model's "
                           'backward on the same microbatches).').format(what=what, wrong=wrong),
                         _("send the gradient of the stage's INPUT (x.grad after backward through layer(x)), not the one "
                           "it received; accumulate the parameters' gradients over all m microbatches and return "
                           '[p.grad for p in layer.parameters()].'))

    check(stage_backward, "stage_backward(rank, world_size, layer, inputs, grads)", direction=direction, cases=cases,
          judge=judge, unanswered="stub",
          passed=_("each stage passed the gradients back microbatch by microbatch with send/recv; every stage's parameter "
                   "gradients equal one process's backward of the whole model (world sizes {first_size} and "
                   '{second_size}, random weights on each rank, the output gradients on the last rank only)'))
