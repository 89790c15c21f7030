"""Notebook 20's exercises: parallelisms composed on one DeviceMesh. Only a right composition
passes: the step on real ranks must equal one process's *and* each mesh dimension must carry the
collectives its parallelism issues (an FSDP2 over the whole mesh trains correctly too, but its
all_gathers run over four ranks instead of two, and TP's all_reduces are missing)."""

from __future__ import annotations

import random
from typing import Callable

from ...i18n import N_, _
from ...units import format_bytes
from ..parallel.composed import TOLERANCE, Plan, deviation, train
from ..parallel.mesh_traffic import inter_node_bytes, traffic
from ..parallel.transformer import TransformerConfig, make_batch, reference_train
from .framework import Case, check, fail, launch_recorded, not_answered, passed, table

__all__ = ["check_compose", "check_tp_placement"]

#: The plan the compose exercise's mesh has: FSDP2 over ``dp_shard``, TP over ``tp``.
COMPOSE_PLAN = Plan.parse("dp_shard=2, tp=2")


class _Results(list):
    """Per-rank results with their recorded calls (what :func:`.mesh_traffic.traffic` reads)."""

    def __init__(self, results, calls):
        super().__init__(results)
        self.calls = calls


def _compose_rank(rank, world_size, plan, config, x, y, compose):
    return train(rank, world_size, plan, config, x, y, steps=2, apply=compose)


def _counts(rows, rank: int = 0, step: int = 2) -> dict:
    out: dict = {}
    for r in rows:
        if r.rank == rank and r.step == step:
            out.setdefault(r.dimension, {})
            out[r.dimension][r.kind] = out[r.dimension].get(r.kind, 0) + r.count
    return out


def check_compose(compose: Callable) -> None:
    """Check ``compose(model, mesh)`` (notebook 20): given the small transformer (one process's
    weights on every rank) and a 2×2 CPU DeviceMesh named ``("dp_shard", "tp")``, apply tensor
    parallelism over ``mesh["tp"]`` (``wq``, ``wk``, ``wv``, ``w1`` column-wise; ``wo``, ``w2``
    row-wise, in every block) and FSDP2 over ``mesh["dp_shard"]`` (every block, then the whole
    model), and return the model.

    Trains two AdamW steps on real ranks with a random batch (every ``dp_shard`` rank its half,
    every ``tp`` rank the same), every operation recorded. Passes when the losses, the last step's
    gradients and the parameters after it equal one process's (within 1e-12, float64) and, in the
    last step, dimension ``tp`` carried only all_reduces (2 per block in forward, 4 in backward)
    and ``dp_shard`` only FSDP2's all_gathers and reduce_scatters.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = _("tensor parallelism first, on the ranks that see the same data, then FSDP2 on the ranks that "
                  "see different data (torchtitan's order). A mesh dimension is mesh[name]; torch's functions are "
                  "parallelize_module (torch.distributed.tensor.parallel) and fully_shard (torch.distributed.fsdp).")
    plan = COMPOSE_PLAN

    def cases(rng):
        config = TransformerConfig(seed=rng.randrange(1000))
        x, y = make_batch(config, 4, 8, seed=rng.randrange(1 << 30))
        yield Case(plan.world_size, [(plan, config, x, y, compose)] * plan.world_size, want=(config, x, y),
                   what=_("the 2×2 mesh"), fn=_compose_rank)

    worst: list = []

    def judge(trial):
        config, x, y = trial.want
        rows = traffic(_Results(trial.results, trial.calls), plan)
        counts = _counts(rows)
        trial.show([(dim, ", ".join(f"{k} ×{n}" for k, n in kinds.items())) for dim, kinds in sorted(counts.items())],
                   (_("dimension"), _("collectives of rank 0 in step 2")))
        try:
            dev = deviation(trial.results, reference_train(config, x, y, steps=2), plan)
        except KeyError as err:
            raise trial.fail(_("the model's parameters are not the transformer's ({name}).").format(name=err)) from None
        if max(dev["loss"], dev["grads"], dev["params"]) > TOLERANCE:
            raise trial.fail(
                _("the training differs from one process's: loss by {loss:.2e}, gradients by {grads:.2e}, "
                  "parameters by {params:.2e}.").format(**dev),
                _("TP's ranks must see the same data and FSDP's ranks different halves of the batch: tensor "
                  "parallelism goes over mesh['tp'], FSDP2 over mesh['dp_shard'] (it also averages the gradients "
                  "over those ranks)."))
        tp_rows = [r for r in rows if r.rank == 0 and r.step == 2 and r.dimension == "tp"]
        if not tp_rows:
            raise trial.fail(_("no collective ran over the tp dimension: the model is not tensor parallel."))
        wrong_dims = sorted(set(counts) - {"tp", "dp_shard"})
        if wrong_dims:
            raise trial.fail(_("collectives ran over {dims}, which this composition does not use (FSDP2 over the "
                               "whole mesh shards over all four ranks).").format(dims=", ".join(wrong_dims)))
        for phase, per_block in (("forward", 2), ("backward", 4)):
            got = sum(r.count for r in tp_rows if r.phase == phase and r.kind == "all_reduce")
            if got != per_block * config.blocks or any(r.kind != "all_reduce" for r in tp_rows):
                raise trial.fail(_("dimension tp carried {got} all_reduces in {phase}; TP's plan issues {want}.").format(
                    got=got, phase=phase, want=per_block * config.blocks),
                    _("column-wise wq, wk, wv and w1, row-wise wo and w2, in every block."))
        dp = counts.get("dp_shard", {})
        if set(dp) != {"all_gather", "reduce_scatter"}:
            raise trial.fail(_("dimension dp_shard carried {kinds}; FSDP2 all-gathers and reduce-scatters there.").format(
                kinds=", ".join(sorted(dp)) or _("nothing")))
        worst.append(max(dev["loss"], dev["grads"], dev["params"]))

    check(compose, "compose(model, mesh)", direction=direction, cases=cases, judge=judge,
          passed=lambda trials: _("two steps on a 2×2 mesh equal one process's (largest difference {worst:.1e}); tp "
                                  "carried TP's all_reduces, dp_shard FSDP2's all_gathers and reduce_scatters").format(
                                      worst=worst[-1]),
          unanswered="stub", grouped=False, collective_timeout=60.0)


def _placement_rank(rank, world_size, plan, config, x, y):
    return train(rank, world_size, plan, config, x, y, steps=2)


def check_tp_placement(plan, ranks_per_node: int = 4) -> None:
    """Check ``plan`` (notebook 20): on 2 nodes of 4 ranks (ranks 0-3 on node 0, 4-7 on node 1),
    FSDP2 over 2 ranks and tensor parallelism over 4 (``dp_shard=2`` and ``tp=4``, in an order the
    learner chooses), so that the fewest bytes cross between the nodes.

    Runs the learner's plan and the other order on 8 real ranks (two training steps of the small
    transformer, calls recorded) and counts the bytes of the groups that span both nodes. Passes
    when the learner's plan sends fewer such bytes than the other and both train like one process.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = _("the innermost (last) mesh dimension's groups are consecutive ranks, so they share a node. "
                  "Which dimension's collectives are bigger and more frequent?")
    if plan is None:
        return not_answered("plan", direction, what=N_("Set `plan` in the exercise cell above"))
    if isinstance(plan, str):
        try:
            plan = Plan.parse(plan)
        except ValueError as err:
            raise fail(str(err), direction) from None
    if not isinstance(plan, Plan) or sorted(plan.dims) != [("dp_shard", 2), ("tp", 4)]:
        raise fail(_("the plan must have dp_shard=2 and tp=4 (in the order you choose); got {plan}.").format(
            plan=plan.text() if isinstance(plan, Plan) else repr(plan)), direction)
    other = Plan(tuple(reversed(plan.dims)))
    config = TransformerConfig()
    x, y = make_batch(config, 4, 8, seed=random.SystemRandom().randrange(1 << 30))
    reference = reference_train(config, x, y, steps=2)
    crossing = {}
    for p in (plan, other):
        results, calls = launch_recorded(_placement_rank, 8, [(p, config, x, y)] * 8, collective_timeout=60.0)
        dev = deviation(results, reference, p)
        if max(dev["loss"], dev["grads"], dev["params"]) > TOLERANCE:
            raise fail(_("{plan} did not train like one process.").format(plan=p.text()), direction)
        crossing[p] = inter_node_bytes(traffic(_Results(results, calls), p), p, ranks_per_node, step=2)
    shown = table([(p.text(), ", ".join(sorted(crossing[p])) or "-", format_bytes(sum(crossing[p].values())))
                   for p in (plan, other)],
                  (_("plan"), _("dimensions crossing nodes"), _("bytes crossing per step (all ranks)")))
    mine, theirs = sum(crossing[plan].values()), sum(crossing[other].values())
    if mine >= theirs:
        raise fail(_("{plan} sends more bytes between the nodes than the other order.").format(plan=plan.text()),
                   _("put the dimension with the most traffic innermost, so its groups stay inside a node."), shown)
    passed(_("{plan} keeps {dims} inside the nodes: {mine} cross between them per step instead of {theirs}").format(
        plan=plan.text(), dims=plan.names[-1], mine=format_bytes(mine), theirs=format_bytes(theirs)), shown)
