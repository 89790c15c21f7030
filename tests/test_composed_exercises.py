"""Notebook 20's exercises (collnb.labs.exercises.composed): the notebook's solutions pass, and only a
right composition does: FSDP2 over the whole mesh (right values, wrong traffic), TP and FSDP2 on
swapped dimensions (wrong values), a function that returns nothing, TP on the outer dimension of
2 nodes x 4 ranks (more bytes between the nodes), a plan with other roles. Real ranks: slow."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from collnb import exercises
from collnb.labs.parallel import composed

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "20_composed_parallelism.ipynb"


def _solution(k: int, name: str):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cell = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])][k]
    ns = {"__name__": "__main__", "composed": composed}
    exec(compile(exercises.solution_code(cell.source), "solution", "exec"), ns)  # noqa: S102
    return ns[name]


def _tp_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(), "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel()}


def fsdp_over_the_whole_mesh(model, mesh):
    from torch.distributed.fsdp import fully_shard

    from collnb.ranks import flatten_mesh

    flat = flatten_mesh(mesh["dp_shard", "tp"], "dp_shard_tp")
    for block in model.layers.values():
        fully_shard(block, mesh=flat)
    fully_shard(model, mesh=flat)
    return model


def swapped(model, mesh):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    for block in model.layers.values():
        parallelize_module(block, mesh["dp_shard"], _tp_plan())
        fully_shard(block, mesh=mesh["tp"])
    fully_shard(model, mesh=mesh["tp"])
    return model


def returns_nothing(model, mesh):
    swapped(model, mesh)


def _outcome(capsys, check, answer) -> str:
    try:
        check(answer)
    except AssertionError as err:
        assert str(err).startswith("✗ "), err
        return "✗ " + str(err)
    return capsys.readouterr().out


@pytest.mark.slow
def test_compose_solution_passes_and_wrong_compositions_fail(capsys):
    out = _outcome(capsys, exercises.check_compose, _solution(0, "compose"))
    assert out.splitlines()[-1].startswith("✓ ") and "tp " in out and "dp_shard " in out
    wrong = _outcome(capsys, exercises.check_compose, fsdp_over_the_whole_mesh)
    assert wrong.startswith("✗ ") and "not tensor parallel" in wrong and "dp_shard_tp" in wrong
    wrong = _outcome(capsys, exercises.check_compose, swapped)
    assert wrong.startswith("✗ ") and "differs from one process" in wrong
    wrong = _outcome(capsys, exercises.check_compose, returns_nothing)
    assert wrong.startswith("✗ ") and "must return the model" in wrong


@pytest.mark.slow
def test_tp_placement_solution_passes_and_tp_across_the_nodes_fails(capsys):
    plan = _solution(1, "plan")
    out = _outcome(capsys, exercises.check_tp_placement, plan)
    assert out.splitlines()[-1].startswith("✓ ") and "keeps tp inside the nodes" in out
    wrong = _outcome(capsys, exercises.check_tp_placement, composed.Plan.parse("tp=4, dp_shard=2"))
    assert wrong.startswith("✗ ") and "more bytes between the nodes" in wrong
    assert "dp_shard=2 × tp=4" in wrong           # the table names both orders, and their bytes


def test_tp_placement_unanswered_and_malformed(capsys):
    exercises.check_tp_placement(None)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "✓" not in out and "dp_shard=2, tp=4" not in out
    with pytest.raises(AssertionError, match="must have dp_shard=2 and tp=4"):
        exercises.check_tp_placement("dp_shard=4, tp=2")
    with pytest.raises(AssertionError, match="role=size"):
        exercises.check_tp_placement("tp")


def test_compose_unanswered_gets_a_direction(capsys):
    def compose(model, mesh):
        ...

    exercises.check_compose(compose)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "Hint: " in out and "✓" not in out
    with pytest.raises(AssertionError, match="compose"):
        exercises.check_compose(lambda model: model)
