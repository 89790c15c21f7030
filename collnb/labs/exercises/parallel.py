"""Exercise checks of notebooks 13-16 (tensor parallelism, FSDP2 prefetching, ring attention, a pipeline stage), on
real ranks with the calls recorded. Each passes only for the learner's own working answer: the
data each rank needs from the others is known to that rank only (random per run), the result is
compared with one process computing the same thing, and the recorded calls must be the ones the
exercise asks for."""

from __future__ import annotations

import copy
import math
from typing import Callable

import torch

from ..parallel import (LAYOUTS, Phases, attention, block_of, fsdp_train, kind, max_difference, ring_attention,
                        sgd_reference, split)
from ...i18n import _
from .framework import Case, Trial, check, summary, world_sizes

# ----------------------------------------------------------------------------------------------
# 13 · column-parallel then row-parallel, one all_reduce


def _tp_reference(x, w1, b1, w2):
    return torch.nn.functional.gelu(x @ w1.t() + b1) @ w2.t()


def check_tensor_parallel_mlp(tp_mlp: Callable) -> None:
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

    def cases(rng):
        for ws in world_sizes(rng, 2, 4):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            s, h, f = rng.randint(3, 6), 3, 4 * ws        # h != f/t: the output and the hidden differ in size
            x = torch.randn(s, h, generator=gen, dtype=torch.float64)
            w1, b1 = torch.randn(f, h, generator=gen, dtype=torch.float64), torch.randn(f, generator=gen, dtype=torch.float64)
            w2 = torch.randn(h, f, generator=gen, dtype=torch.float64)
            args = [(x.clone(), w1.chunk(ws, 0)[r].clone(), b1.chunk(ws)[r].clone(), w2.chunk(ws, 1)[r].clone())
                    for r in range(ws)]
            yield Case(ws, args, want=_tp_reference(x, w1, b1, w2), what=_('world size {world_size}').format(world_size=ws))

    def judge(t: Trial) -> None:
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
        wrong = [r for r in t.ranks if devs[r] is None or devs[r] > 1e-12]
        if wrong:
            raise t.fail(_("world size {world_size}: rank(s) {wrong} returned something other than the MLP's output (one "
                           'process, the whole weights).').format(world_size=ws, wrong=wrong),
                         _('on each rank: x @ w1.T + b1, then GeLU, then @ w2.T gives a partial (s, h) output; their SUM '
                           'over the ranks is the output. Return the all-reduced tensor.'))

    check(tp_mlp, "tp_mlp(rank, world_size, x, w1, b1, w2)", direction=direction, cases=cases, judge=judge,
          unanswered="stub",
          passed=_('one all_reduce joined the column- and row-parallel halves into the one-process output at world sizes '
                   '{first_size} and {second_size} (random weights, each shard known only to its rank)'))


def _tp_grads(x, w1, b1, w2, grad_out):
    """One process's gradients of ``gelu(x @ w1.T + b1) @ w2.T`` against ``grad_out``: dx, dw1, db1, dw2."""
    leaves = [t.clone().requires_grad_(True) for t in (x, w1, b1, w2)]
    _tp_reference(*leaves).backward(grad_out)
    return [t.grad for t in leaves]


def check_tensor_parallel_backward(tp_mlp_backward: Callable) -> None:
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

    def cases(rng):
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

    def deviations(got, want):
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            return None
        return [float((g - w).abs().max()) if isinstance(g, torch.Tensor) and g.shape == w.shape else None
                for g, w in zip(got, want)]

    def judge(t: Trial) -> None:
        want, ws, calls = t.want, t.world_size, t.calls
        devs = [deviations(t.results[r], want[r]) for r in t.ranks]
        t.show([(r, *(["-"] * 4 if devs[r] is None else ["-" if d is None else f"{d:.1e}" for d in devs[r]]),
                 t.summary(r)) for r in t.ranks], (_('rank'), *(f"|{n} - 1 proc|" for n in names), _('calls')))
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
        if any(d is None for d in devs):
            raise t.fail(_('world size {world_size}: return a tuple (dx, dw1, db1, dw2) of tensors shaped like x, w1, b1 '
                           'and w2.').format(world_size=ws))
        for k, n in enumerate(names):
            wrong = [r for r in t.ranks if devs[r][k] is None or devs[r][k] > 1e-12]
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


def _fsdp_rank(rank, world_size, configure, x, y, widths):
    phases = Phases()
    out = fsdp_train(rank, world_size, x, y, steps=1, widths=widths, prefetch=configure, phases=phases)
    return out["params"], phases.close()


def _gathered(records, widths, ws) -> list:
    """Each record's ``(block, "forward" | "backward")`` for an FSDP2 all_gather (a block's first
    all_gather of the step is its forward's, the second its backward's), else ``None``."""
    seen, out = {}, []
    for rec in records:
        block = block_of(rec, widths, ws) if kind(rec) == "all_gather" else None
        if block is None:
            out.append(None)
            continue
        seen[block] = seen.get(block, 0) + 1
        out.append((block, "forward" if seen[block] == 1 else "backward"))
    return out


def _issued_before(gathered, marks, label: str, phase: str) -> list:
    """The blocks whose ``phase`` all_gather had been issued when ``label`` was marked, in order."""
    position = dict(marks)[label]
    return [g[0] for g in gathered[:position] if g is not None and g[1] == phase]


def check_fsdp_prefetch(configure: Callable) -> None:
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

    def cases(rng):
        ws = rng.randint(2, 4)
        gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
        x = torch.randn(4 * ws, _WIDTHS[0], generator=gen, dtype=torch.float64)
        y = torch.randn(4 * ws, _WIDTHS[-1], generator=gen, dtype=torch.float64)
        yield Case(ws, [(configure, x, y, _WIDTHS)] * ws, want=sgd_reference(x, y, steps=1, widths=_WIDTHS),
                   what=_('world size {world_size}').format(world_size=ws), fn=_fsdp_rank)

    def judge(t: Trial) -> None:
        ws, want = t.world_size, t.want
        params, marks = t.results[0]
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
        worst = max(max_difference(p, want) for p, _ in t.results)
        if worst > 1e-12:
            raise t.fail(_("world size {world_size}: the parameters after the step differ from one process's by {worst:.2e}.").format(world_size=ws, worst=worst),
                         _('prefetching changes when FSDP gathers, never what it computes: leave the training alone.'))

    check(configure, "configure(blocks)", direction=direction, cases=cases, judge=judge, unanswered="stub",
          grouped=False, collective_timeout=60.0,
          passed=_("at world size {world_size} every block's all_gather was issued one block ahead in forward and two ahead "
                   "in backward, and on every rank the step equals one process's"))


# ----------------------------------------------------------------------------------------------
# 15 · the online softmax inside ring attention


def _ring_rank(rank, world_size, update, q, k, v, causal, layout):
    return ring_attention(rank, world_size, q, k, v, causal=causal, layout=layout, update=update)[0]


def check_online_softmax(update: Callable) -> None:
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

    def cases(rng):
        for ws, (causal, layout) in zip(world_sizes(rng, 2, 4), ((True, "zigzag"), (False, "plain"))):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            s, d = 4 * ws, 3
            q, k, v = (torch.randn(s, d, generator=gen, dtype=torch.float64) * 2 for _ in range(3))
            where = LAYOUTS[layout](s, ws)
            args = [(update, q[where[r]], k[where[r]], v[where[r]], causal, layout) for r in range(ws)]
            what = (_('world size {world_size}, causal, {layout} order') if causal else _('world size {world_size}, {layout} order')).format(world_size=ws, layout=layout)
            yield Case(ws, args, want=(attention(q, k, v, causal), where, s, d), what=what, fn=_ring_rank)

    def judge(t: Trial) -> None:
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


# ----------------------------------------------------------------------------------------------
# 16 · one pipeline stage's forward, with send/recv


def _random_stage(gen, h: int) -> torch.nn.Module:
    lin = torch.nn.Linear(h, h, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(h, h, generator=gen, dtype=torch.float64) / h ** 0.5)
        lin.bias.copy_(torch.randn(h, generator=gen, dtype=torch.float64))
    stage = torch.nn.Sequential(lin, torch.nn.Tanh())
    stage.requires_grad_(False)
    return stage


def _stage_messages(records) -> list:
    """``(direction, peer, nbytes)`` per send/recv of a rank's grouped calls (``isend``/``irecv`` and
    a ``batch_isend_irecv``'s parts count as ``send``/``recv``)."""
    out = []
    for c in records:
        what = c.op if c.name == "batch_isend_irecv" and c.op else c.name
        out.append((what.lstrip("i"), c.peer, c.nbytes))
    return out


def _check_stage_messages(t: Trial, step: Callable[[int], list], m: int, one: int, *, size_hint: str,
                          order_hint: str) -> None:
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


def check_pipeline_forward(stage_forward: Callable) -> None:
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

    def cases(rng):
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

    def judge(t: Trial) -> None:
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


def check_pipeline_backward(stage_backward: Callable) -> None:
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

    def cases(rng):
        for ws in world_sizes(rng, 2, 4):
            gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
            m, b, h = rng.randint(2, 5), rng.randint(2, 4), rng.randint(3, 6)
            layers = [_random_stage(gen, h).requires_grad_(True) for _ in range(ws)]
            xs = [torch.randn(b, h, generator=gen, dtype=torch.float64) for _ in range(m)]
            gs = [torch.randn(b, h, generator=gen, dtype=torch.float64) for _ in range(m)]
            stage_inputs = [[] for _ in range(ws)]
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
            want = [[p.grad for p in layer.parameters()] for layer in layers]
            yield Case(ws, args, want=(want, m, b * h * 8),
                       what=_('world size {world_size}, m={m} microbatches').format(world_size=ws, m=m))

    def judge(t: Trial) -> None:
        (want, m, one), ws, what = t.want, t.world_size, t.what
        devs = []
        for r in t.ranks:
            got = t.results[r]
            ok = isinstance(got, (list, tuple)) and len(got) == len(want[r]) and all(
                isinstance(a, torch.Tensor) and a.shape == w.shape for a, w in zip(got, want[r]))
            devs.append(max(float((a - w).abs().max()) for a, w in zip(got, want[r])) if ok else None)
        t.show([(r, t.summary(r), _("not the parameters' gradients") if devs[r] is None else f"{devs[r]:.2e}")
                for r in t.ranks], (_('rank'), _('calls'), _("max |stage's gradients - one process|")))
        t.only({"send", "recv", "isend", "irecv"},
               hint=_('pass gradients with dist.send / dist.recv (or isend / irecv). ') + direction)
        _check_stage_messages(
            t, lambda r: ([("recv", r + 1, one)] if r < ws - 1 else []) + ([("send", r - 1, one)] if r > 0 else []),
            m, one, size_hint=_("send and receive one microbatch's gradient per message."),
            order_hint=_('in backward a stage passes each gradient on as soon as it has it: receive the gradient of '
                         'microbatch j, backpropagate, send the input gradient, then the next. ') + direction)
        wrong = [r for r in t.ranks if devs[r] is None or devs[r] > 1e-12]
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


__all__ = ["check_tensor_parallel_mlp", "check_tensor_parallel_backward", "check_fsdp_prefetch", "check_online_softmax", "check_pipeline_forward", "check_pipeline_backward"]
