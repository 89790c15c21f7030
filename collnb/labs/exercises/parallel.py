"""Exercise checks of notebooks 13-15 (tensor parallelism, FSDP2 prefetching, ring attention; notebook 16's pipeline
stage: :mod:`.pipeline`), on real ranks with the calls recorded. Each passes only for the learner's own working answer: the
data each rank needs from the others is known to that rank only (random per run), the result is
compared with one process computing the same thing, and the recorded calls must be the ones the
exercise asks for."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, cast

import torch

from ..parallel import (LAYOUTS, Phases, attention, block_of, fsdp_train, kind, max_difference, ring_attention,
                        sgd_reference, split)
from ...i18n import _
from .framework import Case, Trial, check, summary, world_sizes

if TYPE_CHECKING:
    from ...ranks import CallRecord

#: The Megatron MLP's gradients ``(dx, dw1, db1, dw2)``.
Grads = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]

# ----------------------------------------------------------------------------------------------
# 13 · column-parallel then row-parallel, one all_reduce


def _tp_reference(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One process's Megatron MLP: ``gelu(x @ w1.T + b1) @ w2.T``."""
    return torch.nn.functional.gelu(x @ w1.t() + b1) @ w2.t()


def check_tensor_parallel_mlp(tp_mlp: object) -> None:
    """Check ``tp_mlp(rank, world_size, x, w1, b1, w2)`` (notebook 13): the Megatron MLP's forward
    on this rank's shards, ``gelu(x @ W1.T + b1) @ W2.T`` for the whole ``W1 (f, h)``, ``b1 (f,)``,
    ``W2 (h, f)``, returned on every rank.

    ``x`` ``(s, h)`` is the same on every rank (random per run); ``w1`` ``(f/t, h)`` and ``b1``
    ``(f/t,)`` are this rank's rows of ``W1`` and ``b1``, ``w2`` ``(h, f/t)`` its columns of ``W2``,
    random and known only to this rank, so no rank can compute the output alone. Every rank must
    make exactly one ``dist.all_reduce``, of the ``(s, h)`` output (nothing else: a functional
    collective, a ``ProcessGroup`` method or DTensor doing the work is refused), and return the
    output (float64, within 1e-12 of one process). Two launches at random world sizes (2-4).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Each rank holds some columns of the first linear and the matching rows of the second: it can '
                   'compute its own slice of the hidden activations, GeLU included, and its own partial product of the '
                   'second linear. Which one collective turns the partial products into the output on every rank?'))

    def cases(rng: random.Random) -> Iterator[Case[torch.Tensor]]:
        for ws in world_sizes(rng, 2, 4):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            s, h, f = rng.randint(3, 6), 3, 4 * ws        # h != f/t: the output and the hidden differ in size
            x = torch.randn(s, h, generator=gen, dtype=torch.float64)
            w1, b1 = torch.randn(f, h, generator=gen, dtype=torch.float64), torch.randn(f, generator=gen, dtype=torch.float64)
            w2 = torch.randn(h, f, generator=gen, dtype=torch.float64)
            args = [(x.clone(), w1.chunk(ws, 0)[r].clone(), b1.chunk(ws)[r].clone(), w2.chunk(ws, 1)[r].clone())
                    for r in range(ws)]
            yield Case(ws, args, want=_tp_reference(x, w1, b1, w2), what=_('world size {world_size}').format(world_size=ws))

    def judge(t: Trial[torch.Tensor]) -> None:
        want, ws, calls = t.want, t.world_size, t.calls
        devs = [float((r - want).abs().max()) if isinstance(r, torch.Tensor) and r.shape == want.shape else None
                for r in t.results]
        t.show([(r, "-" if devs[r] is None else f"{devs[r]:.2e}", t.summary(r), sum(c.nbytes for c in calls[r]) // 8)
                for r in t.ranks], (_('rank'), _('max |yours - one process|'), _('calls'), _('float64 values moved')))
        t.only({"all_reduce"}, hint=_('join the partial products with dist.all_reduce. ') + direction)
        if any(t.names(r).count("all_reduce") != 1 for r in t.ranks):
            raise t.fail(_('world size {world_size}: every rank must make exactly one dist.all_reduce (the g operator).').format(world_size=ws))
        values = want.numel()
        bad = [r for r in t.ranks if calls[r][0].nbytes != values * 8]
        if bad:
            r = bad[0]
            raise t.fail(_("world size {world_size}: rank {r}'s all_reduce carried {n_values} values; the output is s x "
                           'h = {values}.').format(world_size=ws, r=r, n_values=calls[r][0].nbytes // 8, values=values),
                         _('all_reduce the partial output of the second linear (s x h), not the hidden activations: GeLU '
                           'is not linear, so a sum of GeLUs is not the GeLU of a sum.'))
        wrong = [r for r, d in enumerate(devs) if d is None or d > 1e-12]
        if wrong:
            raise t.fail(_("world size {world_size}: rank(s) {wrong} returned something other than the MLP's output (one "
                           'process, the whole weights).').format(world_size=ws, wrong=wrong),
                         _('on each rank: x @ w1.T + b1, then GeLU, then @ w2.T gives a partial (s, h) output; their SUM '
                           'over the ranks is the output. Return the all-reduced tensor.'))

    check(tp_mlp, "tp_mlp(rank, world_size, x, w1, b1, w2)", direction=direction, cases=cases, judge=judge,
          unanswered="stub",
          passed=_('one all_reduce joined the column- and row-parallel halves into the one-process output at world sizes '
                   '{first_size} and {second_size} (random weights, each shard known only to its rank)'))


def _tp_grads(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
              grad_out: torch.Tensor) -> list[torch.Tensor]:
    """One process's gradients of ``gelu(x @ w1.T + b1) @ w2.T`` against ``grad_out``: dx, dw1, db1, dw2."""
    leaves = [t.clone().requires_grad_(True) for t in (x, w1, b1, w2)]
    _tp_reference(*leaves).backward(grad_out)  # type: ignore[no-untyped-call]  # torch's backward has no annotations
    return [cast(torch.Tensor, t.grad) for t in leaves]  # the backward filled every leaf's gradient


def check_tensor_parallel_backward(tp_mlp_backward: object) -> None:
    """Check ``tp_mlp_backward(rank, world_size, x, w1, b1, w2, grad_out)`` (notebook 13): the Megatron
    MLP's backward on this rank's shards. The forward is ``y = gelu(x @ W1.T + b1) @ W2.T`` for the
    whole ``W1 (f, h)``, ``b1 (f,)``, ``W2 (h, f)``; ``grad_out`` ``(s, h)`` is the loss's gradient
    w.r.t. ``y``, the same on every rank. Return ``(dx, dw1, db1, dw2)``: ``dx`` ``(s, h)`` the
    gradient w.r.t. the whole input ``x``, on every rank, and this rank's shards of the weight
    gradients (``dw1`` ``(f/t, h)`` and ``db1`` ``(f/t,)``: its rows of ``dW1`` and ``db1``; ``dw2``
    ``(h, f/t)``: its columns of ``dW2``).

    ``x`` and ``grad_out`` are random per run; ``w1``, ``b1``, ``w2`` are this rank's shards, random and
    known only to this rank, so no rank can compute ``dx`` alone. Every rank must make exactly one
    ``dist.all_reduce``, of ``s × h`` values (Megatron's ``f`` in backward), and nothing else (a
    functional collective, a ``ProcessGroup`` method or DTensor doing the work is refused); every
    value must be within 1e-12 of one process (float64). Two launches at random world sizes (2-4).

    Raises:
        CheckFailed: a wrong answer, with a per-rank table and a hint.
    """
    direction = _('Every rank can run its own share of the forward (its slice of the hidden activations, then its '
                  'partial output) and backpropagate grad_out through it, with autograd or by hand. Which of the '
                  "gradients it gets are already this rank's final answer, and which one is only this rank's share "
                  'of a sum over the ranks?')
    names = ("dx", "dw1", "db1", "dw2")

    def cases(rng: random.Random) -> Iterator[Case[list[Grads]]]:
        for ws in world_sizes(rng, 2, 4):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            # s != f/t = 4: the input's gradient (s, h) differs in size from every weight shard's (f/t, h), (h, f/t), (f/t,)
            s, h, f = rng.choice((3, 5, 6)), 3, 4 * ws
            x, grad_out = (torch.randn(s, h, generator=gen, dtype=torch.float64) for _ in range(2))
            w1, b1 = torch.randn(f, h, generator=gen, dtype=torch.float64), torch.randn(f, generator=gen, dtype=torch.float64)
            w2 = torch.randn(h, f, generator=gen, dtype=torch.float64)
            dx, dw1, db1, dw2 = _tp_grads(x, w1, b1, w2, grad_out)
            want = [(dx, dw1.chunk(ws, 0)[r], db1.chunk(ws)[r], dw2.chunk(ws, 1)[r]) for r in range(ws)]
            args = [(x.clone(), w1.chunk(ws, 0)[r].clone(), b1.chunk(ws)[r].clone(), w2.chunk(ws, 1)[r].clone(),
                     grad_out.clone()) for r in range(ws)]
            yield Case(ws, args, want=want, what=_('world size {world_size}').format(world_size=ws))

    def deviations(got: object, want: Grads) -> list[float | None] | None:
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            return None
        return [float((g - w).abs().max()) if isinstance(g, torch.Tensor) and g.shape == w.shape else None
                for g, w in zip(got, want)]

    def judge(t: Trial[list[Grads]]) -> None:
        want, ws, calls = t.want, t.world_size, t.calls
        devs = [deviations(t.results[r], want[r]) for r in t.ranks]
        t.show([(r, *(["-"] * 4 if dv is None else ["-" if d is None else f"{d:.1e}" for d in dv]),
                 t.summary(r)) for r, dv in enumerate(devs)], (_('rank'), *(f"|{n} - 1 proc|" for n in names), _('calls')))
        t.only({"all_reduce"}, hint=_('sum the shares with dist.all_reduce. ') + direction)
        if any(t.names(r).count("all_reduce") != 1 for r in t.ranks):
            raise t.fail(_('world size {world_size}: every rank must make exactly one dist.all_reduce (the f operator '
                           'in backward).').format(world_size=ws),
                         _("a weight gradient computed from this rank's own shard is already this rank's shard of the "
                           'whole gradient: it needs no communication. ') + direction)
        values = want[0][0].numel()
        bad = [r for r in t.ranks if calls[r][0].nbytes != values * 8]
        if bad:
            r = bad[0]
            raise t.fail(_("world size {world_size}: rank {r}'s all_reduce carried {n_values} values; the input's "
                           'gradient is s x h = {values}.').format(world_size=ws, r=r, n_values=calls[r][0].nbytes // 8,
                                                                    values=values))
        complete = [d for d in devs if d is not None]
        if len(complete) != len(devs):
            raise t.fail(_('world size {world_size}: return a tuple (dx, dw1, db1, dw2) of tensors shaped like x, w1, b1 '
                           'and w2.').format(world_size=ws))
        for k, n in enumerate(names):
            wrong = [r for r in t.ranks if (d := complete[r][k]) is None or d > 1e-12]
            if wrong:
                hint = (_("each rank's dx is its share of a sum: x feeds every rank's slice of the hidden layer. All-reduce "
                          'it (and only it).') if n == "dx" else
                        _("the weights' gradients come from this rank's own slice of the forward: keep them local, "
                          'computed from the whole grad_out, not summed over the ranks.'))
                raise t.fail(_("world size {world_size}: rank(s) {wrong} returned a {name} other than one process's "
                               "(its shard of it).").format(world_size=ws, wrong=wrong, name=n), hint)

    check(tp_mlp_backward, "tp_mlp_backward(rank, world_size, x, w1, b1, w2, grad_out)", direction=direction,
          cases=cases, judge=judge, unanswered="stub",
          passed=_("one all_reduce of the input's gradient, weight gradients kept local: every rank's dx and "
                   "weight-gradient shards equal one process's at world sizes {first_size} and {second_size} (random "
                   'weights, each shard known only to its rank)'))


# ----------------------------------------------------------------------------------------------
# 14 · FSDP2 prefetching

#: Four blocks whose FSDP2 all_gathers differ in size at world sizes 2-4 (so each names its block).
_WIDTHS = (6, 10, 14, 8, 4)


def _fsdp_rank(rank: int, world_size: int, configure: Callable[[list[torch.nn.Module]], None], x: torch.Tensor,
               y: torch.Tensor,
               widths: Sequence[int]) -> tuple[list[torch.Tensor], list[tuple[str, int]]]:
    """Runs on a rank: one FSDP2 step with the learner's ``configure`` and each block's compute
    marked; ``(parameters after the step, the marks: (label, records before it))``."""
    phases = Phases()  # type: ignore[no-untyped-call]  # collnb.labs.parallel is not typed yet
    out = fsdp_train(rank, world_size, x, y, steps=1, widths=widths, prefetch=configure, phases=phases)
    return out["params"], phases.close()


def _gathered(records: Iterable[CallRecord], widths: Sequence[int], ws: int) -> list[tuple[int, str] | None]:
    """Each record's ``(block, "forward" | "backward")`` for an FSDP2 all_gather (a block's first
    all_gather of the step is its forward's, the second its backward's), else ``None``."""
    seen: dict[int, int] = {}
    out: list[tuple[int, str] | None] = []
    for rec in records:
        block = block_of(rec, widths, ws) if kind(rec) == "all_gather" else None
        if block is None:
            out.append(None)
            continue
        seen[block] = seen.get(block, 0) + 1
        out.append((block, "forward" if seen[block] == 1 else "backward"))
    return out


def _issued_before(gathered: Sequence[tuple[int, str] | None], marks: Iterable[tuple[str, int]], label: str,
                   phase: str) -> list[int]:
    """The blocks whose ``phase`` all_gather had been issued when ``label`` was marked, in order."""
    position = dict(marks)[label]
    return [g[0] for g in gathered[:position] if g is not None and g[1] == phase]


def check_fsdp_prefetch(configure: object) -> None:
    """Check ``configure(blocks)`` (notebook 14): given the list of ``fully_shard`` blocks of a
    4-block model, set FSDP2's explicit prefetching so that in forward every block prefetches the
    **next** block's all_gather (``set_modules_to_forward_prefetch``) and in backward the **two**
    blocks before it (``set_modules_to_backward_prefetch``).

    Runs one SGD step of FSDP2 on real ranks (random world size 2-4, random batch; every rank its
    own shard) with ``configure`` applied, the collectives recorded and each block's compute marked.
    Passes when, for every block ``i``, exactly the all_gathers of blocks ``0 .. i+1`` had been
    issued when its forward started and those of blocks ``3 .. i-2`` (backward's) when its backward
    started, when ``configure`` itself made no collective call and FSDP made only its all_gathers and
    reduce_scatters, and when the parameters after the step equal one process's (within 1e-12).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Each fully_shard block has set_modules_to_forward_prefetch(list) and '
                   'set_modules_to_backward_prefetch(list). Which blocks should block i name in each direction? (Mind '
                   'the first and last blocks.)'))
    n_blocks = len(_WIDTHS) - 1

    def cases(rng: random.Random) -> Iterator[Case[list[torch.Tensor]]]:
        ws = rng.randint(2, 4)
        gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
        x = torch.randn(4 * ws, _WIDTHS[0], generator=gen, dtype=torch.float64)
        y = torch.randn(4 * ws, _WIDTHS[-1], generator=gen, dtype=torch.float64)
        yield Case(ws, [(configure, x, y, _WIDTHS)] * ws, want=sgd_reference(x, y, steps=1, widths=_WIDTHS),
                   what=_('world size {world_size}').format(world_size=ws), fn=_fsdp_rank)

    def judge(t: Trial[list[torch.Tensor]]) -> None:
        ws, want = t.world_size, t.want
        answers = [cast("tuple[list[torch.Tensor], list[tuple[str, int]]]", a) for a in t.results]  # _fsdp_rank's
        params, marks = answers[0]
        records = t.calls[0]
        phases = split(records, marks)
        if phases.get("setup"):
            raise t.fail(_("configure made {phases_setup}: it should only set FSDP's prefetching.").format(phases_setup=summary(phases['setup'])))
        training = [r for lab, recs in phases.items() if lab != "gather" for r in recs]
        foreign = [r for r in training if block_of(r, _WIDTHS, ws) is None]
        if foreign:
            raise t.fail(_("world size {world_size}: the step made {foreign} beside FSDP's all_gathers and reduce_scatters.").format(world_size=ws, foreign=summary(foreign)))
        rows, problems = [], []
        gathered = _gathered(records, _WIDTHS, ws)
        for i in range(n_blocks):
            fwd = _issued_before(gathered, marks, f"forward {i}", "forward")
            bwd = _issued_before(gathered, marks, f"backward {i}", "backward")
            want_fwd = list(range(min(i + 1, n_blocks - 1) + 1))
            want_bwd = list(range(n_blocks - 1, max(i - 2, 0) - 1, -1))
            rows.append((i, fwd, want_fwd, bwd, want_bwd))
            if sorted(fwd) != want_fwd:
                problems.append(_("block {i}'s forward").format(i=i))
            if sorted(bwd, reverse=True) != want_bwd:
                problems.append(_("block {i}'s backward").format(i=i))
        t.show(rows, (_('block'), _('gathered when its forward began'), _('want'), _('gathered (backward) when its backward began'), _('want')))
        if problems:
            raise t.fail(_('world size {world_size}: the all_gathers were not issued where asked ({problems}{more}).').format(world_size=ws, problems=', '.join(problems[:3]), more='...' if len(problems) > 3 else ''),
                         _('in forward a block should name the block after it; in backward the two blocks before it '
                           '(backward runs from the last block to the first). The first and last blocks name only blocks '
                           'that exist.'))
        worst = max(max_difference(p, want) for p, _ in answers)
        if worst > 1e-12:
            raise t.fail(_("world size {world_size}: the parameters after the step differ from one process's by {worst:.2e}.").format(world_size=ws, worst=worst),
                         _('prefetching changes when FSDP gathers, never what it computes: leave the training alone.'))

    check(configure, "configure(blocks)", direction=direction, cases=cases, judge=judge, unanswered="stub",
          grouped=False, collective_timeout=60.0,
          passed=_("at world size {world_size} every block's all_gather was issued one block ahead in forward and two ahead "
                   "in backward, and on every rank the step equals one process's"))


# ----------------------------------------------------------------------------------------------
# 15 · the online softmax inside ring attention


def _ring_rank(rank: int, world_size: int, update: Callable[..., object], q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor, causal: bool, layout: str) -> torch.Tensor:
    """Runs on a rank: ring attention with the learner's ``update``; this rank's output rows."""
    out: torch.Tensor = ring_attention(rank, world_size, q, k, v, causal=causal, layout=layout, update=update)[0]
    return out


def check_online_softmax(update: object) -> None:
    """Check ``update(o, m, l, scores, v) -> (o, m, l)`` (notebook 15): one step of the online
    softmax (Milakov and Gimelshein 2018), used inside ring attention on real ranks.

    ``o`` ``(n, d)`` is the unnormalised output so far, ``m`` ``(n,)`` each query's largest score so
    far (``-inf`` at first), ``l`` ``(n,)`` the sum of ``exp(score - m)``; ``scores`` ``(n, k)`` is
    one block (masked entries ``-inf``), ``v`` ``(k, d)`` its values. Ring attention
    (:func:`collnb.labs.parallel.ring_attention`, the library's sends and receives) runs with it on
    real ranks, twice: causal in zig-zag order and without a mask in plain order, random world sizes
    (2-4) and random ``q, k, v`` (each rank knows only its own rows). Passes when every rank's output
    equals full attention in one process (within 1e-10) and ``update`` made no collective call.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_("A new block can raise a row's largest score from m to a larger m_new. Everything accumulated so far "
                   "was computed relative to m: what factor brings it to m_new? Then add the new block's terms, "
                   'relative to m_new.'))

    def cases(rng: random.Random) -> Iterator[Case[tuple[torch.Tensor, list[int], int, int]]]:
        for ws, (causal, layout) in zip(world_sizes(rng, 2, 4), ((True, "zigzag"), (False, "plain"))):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            s, d = 4 * ws, 3
            q, k, v = (torch.randn(s, d, generator=gen, dtype=torch.float64) * 2 for _ in range(3))
            where = LAYOUTS[layout](s, ws)
            args = [(update, q[where[r]], k[where[r]], v[where[r]], causal, layout) for r in range(ws)]
            what = (_('world size {world_size}, causal, {layout} order') if causal else _('world size {world_size}, {layout} order')).format(world_size=ws, layout=layout)
            yield Case(ws, args, want=(attention(q, k, v, causal), where, s, d), what=what, fn=_ring_rank)

    def judge(t: Trial[tuple[torch.Tensor, list[int], int, int]]) -> None:
        (full, where, s, d), ws, what = t.want, t.world_size, t.what
        devs = [float((r - full[where[i]]).abs().max()) if isinstance(r, torch.Tensor)
                and r.shape == (s // ws, d) and not torch.isnan(r).any() else math.inf for i, r in enumerate(t.results)]
        t.show([(r, f"{devs[r]:.2e}", t.summary(r)) for r in t.ranks],
               (_('rank'), _('max |ring - full attention|'), _('calls')))
        ring = 2 * (ws - 1)
        extra = [r for r in t.ranks if sorted(t.names(r)) != ["irecv"] * ring + ["isend"] * ring]
        if extra:
            raise t.fail(_("{what}: rank {extra_0} made {calls_extra_0}; the ring's own sends and receives are {ring} "
                           'isend and {ring} irecv, and update must not communicate.').format(what=what, extra_0=extra[0], calls_extra_0=t.summary(extra[0]), ring=ring),
                         _("update only computes: it sees one block of one rank's scores at a time."))
        bad = [r for r in t.ranks if devs[r] > 1e-10]
        if bad:
            raise t.fail(_("{what}: rank(s) {bad} ended with an output other than full attention's (one process).").format(what=what, bad=bad),
                         _('the terms accumulated so far were computed with exp(score - m); after the block they must be '
                           "relative to m_new, so BOTH the old o and the old l need rescaling before the new block's "
                           'terms are added (and return the new m).'))

    check(update, "update(o, m, l, scores, v)", direction=direction, cases=cases, judge=judge, unanswered="stub",
          passed=_('your update made ring attention exact: causal in zig-zag order at world size {first_size}, unmasked in '
                   'plain order at world size {second_size}'))


def _kv_ring_rank(rank: int, world_size: int, step: Callable[..., object], q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, causal: bool, layout: str) -> torch.Tensor:
    """Runs on a rank: ring attention with the learner's ``step``; this rank's output rows."""
    out: torch.Tensor = ring_attention(rank, world_size, q, k, v, causal=causal, layout=layout, step=step)[0]
    return out


def check_kv_ring_pass(step: object) -> None:
    """Check ``step(send, recv, rank, world_size) -> requests`` (notebook 15): one round of ring attention's
    communication, :func:`collnb.labs.parallel.ring_step`'s job: post the sends of ``send`` (this rank's K and
    V blocks) to rank ``rank + 1`` and the receives into ``recv`` from rank ``rank - 1``, without waiting; ring
    attention runs with it on real ranks as :func:`check_online_softmax` runs. Passes when every output equals
    full attention (within 1e-10) and each rank made ``2 (p - 1)`` isends to the next rank and as many irecvs
    from the previous one.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_("Each round this rank's K and V blocks go to the next rank while the previous rank's arrive in "
                   "the two buffers of recv. A blocking send waits for its receiver, who is sending too: post the "
                   "four operations at once (dist.P2POp, dist.batch_isend_irecv) and return the requests it returns."))

    def cases(rng: random.Random) -> Iterator[Case[tuple[torch.Tensor, list[int], int, int]]]:
        for ws, (causal, layout) in zip(world_sizes(rng, 2, 4), ((True, "zigzag"), (False, "plain"))):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            s, d = 4 * ws, 3
            q, k, v = (torch.randn(s, d, generator=gen, dtype=torch.float64) * 2 for _ in range(3))
            where = LAYOUTS[layout](s, ws)
            args = [(step, q[where[r]], k[where[r]], v[where[r]], causal, layout) for r in range(ws)]
            what = (_('world size {world_size}, causal, {layout} order') if causal else
                    _('world size {world_size}, {layout} order')).format(world_size=ws, layout=layout)
            yield Case(ws, args, want=(attention(q, k, v, causal), where, s, d), what=what, fn=_kv_ring_rank)

    def judge(t: Trial[tuple[torch.Tensor, list[int], int, int]]) -> None:
        (full, where, s, d), ws, what = t.want, t.world_size, t.what
        devs = [float((r - full[where[i]]).abs().max()) if isinstance(r, torch.Tensor)
                and r.shape == (s // ws, d) and not torch.isnan(r).any() else math.inf for i, r in enumerate(t.results)]
        t.show([(r, f"{devs[r]:.2e}", t.summary(r)) for r in t.ranks],
               (_('rank'), _('max |ring - full attention|'), _('calls')))
        ring = 2 * (ws - 1)
        for r in t.ranks:
            sends = [c.peer for c in t.calls[r] if c.name in ("isend", "send")]
            recvs = [c.peer for c in t.calls[r] if c.name in ("irecv", "recv")]
            if sorted(t.names(r)) != ["irecv"] * ring + ["isend"] * ring \
                    or set(sends) != {(r + 1) % ws} or set(recvs) != {(r - 1) % ws}:
                raise t.fail(_("{what}: rank {rank} made {calls}; a ring of {world_size} needs {ring} isend to rank "
                               "{next} and {ring} irecv from rank {prev} (K and V, each round but the last).").format(
                                   what=what, rank=r, calls=t.summary(r), world_size=ws, ring=ring,
                                   next=(r + 1) % ws, prev=(r - 1) % ws))
        bad = [r for r in t.ranks if devs[r] > 1e-10]
        if bad:
            raise t.fail(_("{what}: rank(s) {bad} ended with an output other than full attention's (one process).").format(
                             what=what, bad=bad),
                         _("send the blocks you hold now (send), and receive into the buffers given (recv): ring "
                           "attention computes on the blocks in recv in the next round."))

    check(step, "step(send, recv, rank, world_size)", direction=direction, cases=cases, judge=judge, unanswered="stub",
          passed=_("your step passed K and V round the ring: causal in zig-zag order at world size {first_size}, "
                   "unmasked in plain order at world size {second_size}"))


__all__ = ["check_tensor_parallel_mlp", "check_tensor_parallel_backward", "check_fsdp_prefetch", "check_online_softmax",
           "check_kv_ring_pass"]
