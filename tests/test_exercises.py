"""Exercise checks (collnb.exercises) cannot be fooled or spoiled, and say what is wrong.

For every exercise of the notebooks: the notebook's own stored solution passes (✓); an unfinished
answer yields no ✓ (the check says "not answered yet" and points a direction, without the
solution's value or code); the answers that used to pass without doing the asked communication
(issue 9, issue 18: a token collective beside a world size from elsewhere, functional collectives,
ProcessGroup methods, the whole buffer sent in a ring step, `prediction = solution`,
`builtin.predict` for the formula) fail with a hint; wrong answers fail with a hint about that
mistake, and a prediction's ✗ never states the right value. The solutions are taken from the
notebooks' ``solution`` cells, so a notebook and its check cannot drift apart. A wrong answer in a
real kernel renders as ✗ + hint, without a traceback (issue 10 item 5).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch
import torch.distributed as dist

import collnb
from collnb import exercises
from collnb.labs.exercises import NOT_ANSWERED, CheckFailed
from collnb.torch_versions import applies
from collnb.labs.exercises.framework import WHERE_SOLUTION, fail

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def _cell(stem: str, tag: str, k: int = 0) -> str:
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    return cells[k].source


def _solution(stem: str, name: str, k: int = 0):
    """The object ``name`` the notebook's ``k``-th solution cell holds (as comments: uncommented here)."""
    ns = {"__name__": "__main__", "torch": torch, "dist": dist}
    exec(compile(exercises.solution_code(_cell(stem, "solution", k)), f"{stem}-solution", "exec"), ns)  # noqa: S102
    return ns[name]


def _check_name(stem: str, k: int = 0) -> str:
    """The exercises.check_* function a notebook's check cell calls (so tests follow the notebook)."""
    return re.search(r"exercises\.(check_\w+)\(", _cell(stem, "check", k)).group(1)


def _passes(capsys, check, *args, **kwargs) -> str:
    check(*args, **kwargs)
    out = capsys.readouterr().out
    assert re.search(r"^✓ ", out, re.M), out
    return out


def _fails(capsys, check, *args, hint: str | None = None, what: str | None = None, **kwargs) -> str:
    with pytest.raises(CheckFailed) as info:
        check(*args, **kwargs)
    out = capsys.readouterr().out
    assert not re.search(r"^✓ ", out, re.M), f"a failing check printed ✓:\n{out}"
    msg = str(info.value)
    assert msg.startswith("✗ ") and "\nHint: " in msg, msg
    if hint is not None:
        assert hint in msg.split("\nHint: ", 1)[1], msg
    if what is not None:
        assert what in msg, msg
    return msg


def _unfinished(capsys, check, *args, **kwargs) -> str:
    check(*args, **kwargs)
    out = capsys.readouterr().out
    assert NOT_ANSWERED in out and "✓" not in out and "✗" not in out, out
    assert "Hint: " in out and WHERE_SOLUTION in out, out
    return out


def _code_lines(source: str) -> list[str]:
    """The lines of solution code worth looking for in an output (not trivial ones)."""
    return [ln.strip() for ln in source.splitlines() if len(ln.strip()) > 12 and not ln.strip().startswith("#")]


# ------------------------------------------------------------------------------------------------
# Code exercises: (notebook, the exercise's function name)

CODE = {
    "00_launching_ranks": "count_ready",
    "01_broadcast": "my_broadcast",
    "03_gather": "my_gather",
    "05_all_gather": "my_all_gather",
    "09_object_collectives": "my_census",
    "10_send_recv": "token_ring",
    "11_training": "average_gradients",
    # a notebook with several exercises: one name per exercise cell, in order; None for one whose answer is
    # not a function (12's prediction and placements: their own tests)
    "12_device_mesh_dtensor": (None, None, "dp_tp_matmul"),
    "13_tensor_parallel": "tp_mlp_backward",
    "14_fsdp": "configure",
    "15_context_parallel": ("update", "step"),
    "16_pipeline_parallel": ("stage_forward", "stage_backward"),
    "17_overlap": "overlapped_step",
    "18_hangs": (None, "fixed_step"),   # the culprit (check_hang_culprit, NOT_CODE), then the step that hangs
    "20_composed_parallelism": ("compose", None),
}
#: (notebook, exercise index, the exercise's function name): every code exercise of CODE.
CODE_EXERCISES = [(stem, k, name) for stem, names in sorted(CODE.items())
                  for k, name in enumerate((names,) if isinstance(names, str) else names) if name]
#: The checks of exercises whose answer is not a function, with their own tests (predictions, placements, a hang).
NOT_CODE = {"check_collective_prediction", "check_dp_tp_placements", "check_hang_culprit", "check_tp_placement"}


def test_every_exercise_from_notebook_12_on_is_in_the_table():
    """Issue 34: every notebook from 12 on ends with an exercise that only real communication passes; each of
    their check cells is either a code exercise of CODE (tested below) or one of NOT_CODE."""
    for path in sorted(NOTEBOOK_DIR.glob("1[2-8]_*.ipynb")) + sorted(NOTEBOOK_DIR.glob("2[0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        checks = [c.source for c in nb.cells if "check" in c.metadata.get("tags", [])]
        assert checks, f"{path.stem}: no exercise"
        last = [c for c in nb.cells if c.cell_type == "code"][-1]
        assert "check" in last.metadata.get("tags", []), f"{path.stem}: its last code cell is not an exercise's check"
        names = CODE.get(path.stem, ())
        names = (names,) if isinstance(names, str) else names
        for k in range(len(checks)):
            check = _check_name(path.stem, k)
            assert check in NOT_CODE or (k < len(names) and names[k]), \
                f"{path.stem}: exercise {k} ({check}) is not in CODE"


@pytest.mark.parametrize("stem, k, name", CODE_EXERCISES, ids=[f"{s}-{n}" for s, _, n in CODE_EXERCISES])
def test_notebook_solution_passes_and_unfinished_answer_gets_a_direction_not_the_solution(stem, k, name, capsys):
    check = getattr(exercises, _check_name(stem, k))
    solution = _solution(stem, name, k)
    out = _passes(capsys, check, solution)
    assert "rank" in out  # the per-rank table
    ns = {"__name__": "__main__", "torch": torch, "dist": dist}
    # The exercise cell as stored: a function whose body is `...`, under the name the solution uses.
    exec(compile(_cell(stem, "exercise", k), f"{stem}-exercise", "exec"), ns)  # noqa: S102
    assert callable(ns[name])
    demo = _unfinished(capsys, check, ns[name])
    assert name in demo
    code = exercises.solution_code(_cell(stem, "solution", k))
    shown = [ln for ln in _code_lines(code) if ln in demo]
    assert not shown, f"{stem}: the unanswered check shows solution code: {shown}"


def test_ring_step_solution_passes_and_unfinished_gets_no_check_mark(capsys):
    solution = _solution("algorithms", "my_ring_step", 1)
    assert _check_name("algorithms", 1) == "check_ring_step"
    _passes(capsys, exercises.check_ring_step, solution)
    ns = {"__name__": "__main__"}
    exec(compile(_cell("algorithms", "exercise", 1), "ex", "exec"), ns)  # noqa: S102
    _unfinished(capsys, exercises.check_ring_step, ns["my_ring_step"])


@pytest.mark.parametrize("stem", sorted(CODE) + ["algorithms", "02_scatter", "04_reduce", "06_reduce_scatter",
                                                 "07_all_reduce", "08_all_to_all", "bandwidth"])
def test_running_a_solution_cell_defines_nothing(stem):
    """Issue 18: `prediction = solution` passed because Run All ran the collapsed solution cell,
    which defined a plain variable. A solution cell now holds the solution as comments: running it
    defines no name, so no answer can be taken from it; opening the cell is the learner's step."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    for cell in (c for c in nb.cells if "solution" in c.metadata.get("tags", [])):
        ns = {"__name__": "__main__"}
        exec(compile(cell.source, f"{stem}-solution", "exec"), ns)  # noqa: S102
        assert set(ns) <= {"__name__", "__builtins__"}, f"{stem}: the solution cell defines {set(ns)}"
        assert exercises.solution_code(cell.source).strip(), f"{stem}: the solution cell holds no solution"


# --- Answers that used to pass without the asked communication: each gets ✗ and a hint ----------


def test_count_ready_by_world_size_or_a_token_collective_fails(capsys):
    def count_ready(rank, world_size, ready):
        return world_size

    _fails(capsys, exercises.check_count_ready, count_ready, what="exactly one dist.all_reduce")

    def count_ready(rank, world_size, ready):  # noqa: F811 - issue 18: a token collective + a size from elsewhere
        dist.all_reduce(torch.zeros(1))
        return dist.group.WORLD.size()

    _fails(capsys, exercises.check_count_ready, count_ready, what="returned the world size",
           hint="which reduce op")

    def count_ready(rank, world_size, ready):  # noqa: F811
        dist.all_reduce(torch.zeros(1))
        return dist.get_world_size()

    _fails(capsys, exercises.check_count_ready, count_ready, what="returned the world size")

    def count_ready(rank, world_size, ready):  # noqa: F811 - its own flag only
        dist.all_reduce(torch.zeros(1))
        return int(ready)

    _fails(capsys, exercises.check_count_ready, count_ready, what="did not return the number of ready ranks")


def test_count_ready_through_an_unwrapped_function_is_still_seen(capsys):
    """Issue 18: `dist.get_world_size.__wrapped__()` passed because the recording wrapper exposed the
    unwrapped function. The recorder sits below every Python function: a token all_reduce plus the
    real one through torch's unwrapped function are two all_reduce calls."""
    def count_ready(rank, world_size, ready):
        import inspect
        dist.all_reduce(torch.zeros(1))
        t = torch.tensor([int(ready)])
        inspect.unwrap(dist.all_reduce)(t)
        return int(t.item())

    _fails(capsys, exercises.check_count_ready, count_ready, what="exactly one dist.all_reduce")


def test_count_ready_through_a_process_group_method_or_a_functional_collective_fails(capsys):
    def count_ready(rank, world_size, ready):
        t = torch.tensor([int(ready)])
        dist.group.WORLD.allreduce([t]).wait()
        return int(t.item())

    _fails(capsys, exercises.check_count_ready, count_ready, what="all_reduce (a ProcessGroup method)")

    def count_ready(rank, world_size, ready):  # noqa: F811
        import torch.distributed._functional_collectives as funcol
        t = funcol.all_reduce(torch.tensor([int(ready)]), "sum", dist.group.WORLD)
        return int(funcol.wait_tensor(t).item())

    _fails(capsys, exercises.check_count_ready, count_ready, what="all_reduce (a functional collective)")


def test_communication_the_recorder_cannot_see_fails(capsys):
    """The real work done in another thread (a dispatch mode is per thread) beside the asked call."""
    def count_ready(rank, world_size, ready):
        import threading
        t = torch.tensor([int(ready)])
        worker = threading.Thread(target=lambda: dist.all_reduce(t))
        worker.start(), worker.join()
        dist.all_reduce(torch.zeros(1))
        return int(t.item())

    _fails(capsys, exercises.check_count_ready, count_ready, what="communicated where the check cannot see",
           hint="from your function itself")


def test_broadcast_by_local_values_fails(capsys):
    def my_broadcast(rank, world_size, src, tensor):
        return torch.arange(float(tensor.numel())) + 100 * src   # the old exercise's formula

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="exactly one dist.broadcast")

    def my_broadcast(rank, world_size, src, tensor):  # noqa: F811 - communicates, but not src's data
        dist.broadcast(torch.zeros_like(tensor), src=src)
        return tensor

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="did not return src's data",
           hint="return the tensor you broadcast into")


def test_all_gather_by_local_formula_or_forbidden_calls_fails(capsys):
    def my_all_gather(rank, world_size, mine):
        return torch.cat([torch.tensor([10.0 * r, 10.0 * r + 1]) for r in range(world_size)])

    _fails(capsys, exercises.check_all_gather, my_all_gather, what="one dist.broadcast per source rank")

    def my_all_gather(rank, world_size, mine):  # noqa: F811 - right result, forbidden call
        out = [torch.zeros_like(mine) for _ in range(world_size)]
        dist.all_gather(out, mine)
        return torch.cat(out)

    _fails(capsys, exercises.check_all_gather, my_all_gather, what="dist.all_gather, which this exercise does not")


def test_all_gather_by_token_broadcasts_and_a_functional_collective_fails(capsys):
    """Issue 18: token broadcasts, then the real work by a functional collective."""
    def my_all_gather(rank, world_size, mine):
        import torch.distributed._functional_collectives as funcol
        for src in range(world_size):
            dist.broadcast(torch.zeros_like(mine), src=src)
        return funcol.all_gather_tensor(mine, 0, dist.group.WORLD).wait()

    _fails(capsys, exercises.check_all_gather, my_all_gather,
           what="all_gather_into_tensor (a functional collective), which this exercise does not allow")


def test_all_gather_by_token_broadcasts_and_a_process_group_method_fails(capsys):
    """Issue 18: token broadcasts, then `dist.group.WORLD.allgather(...)`."""
    def my_all_gather(rank, world_size, mine):
        for src in range(world_size):
            dist.broadcast(torch.zeros_like(mine), src=src)
        out = [[torch.zeros_like(mine) for _ in range(world_size)]]
        dist.group.WORLD.allgather(out, [mine]).wait()
        return torch.cat(out[0])

    _fails(capsys, exercises.check_all_gather, my_all_gather,
           what="all_gather (a ProcessGroup method), which this exercise does not allow")


def test_all_gather_by_a_dtensor_redistribute_fails(capsys):
    def my_all_gather(rank, world_size, mine):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
        for src in range(world_size):
            dist.broadcast(torch.zeros_like(mine), src=src)
        mesh = init_device_mesh("cpu", (world_size,))
        return DTensor.from_local(mine, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()

    _fails(capsys, exercises.check_all_gather, my_all_gather, what="(DTensor), which this exercise does not allow")


def test_token_ring_by_arithmetic_fails(capsys):
    def token_ring(rank, world_size, value):
        return world_size * (world_size - 1) // 2 if rank == 0 else rank * (rank - 1) // 2

    _fails(capsys, exercises.check_token_ring, token_ring, what="it should make")


def test_gather_and_census_and_ring_step_by_local_values_fail(capsys):
    def my_gather(rank, world_size, dst, mine):
        return torch.tensor([r * r for r in range(world_size)]) if rank == dst else None

    _fails(capsys, exercises.check_gather, my_gather, what="exactly one dist.gather")

    def my_census(rank, world_size, info):
        return [{"rank": r, "square": r * r} for r in range(world_size)]

    _fails(capsys, exercises.check_census, my_census, what="exactly one dist.all_gather_object")

    def my_ring_step(rank, world_size, buf, k):
        buf[(rank - k - 1) % world_size] *= 2   # a guess from its own data only
        return buf

    _fails(capsys, exercises.check_ring_step, my_ring_step, what="should post one isend")


def test_ring_step_sending_the_whole_buffer_fails_on_the_message_size(capsys):
    """Issue 18: sending the whole buffer every step (the right chunk taken from it) passed: message
    shapes were recorded but never checked. A ring step moves one chunk."""
    def my_ring_step(rank, world_size, buf, k):
        recv_chunk = (rank - k - 1) % world_size  # sends the whole buffer, not chunk (rank - k)
        incoming = torch.empty_like(buf)
        reqs = [dist.isend(buf.clone(), (rank + 1) % world_size), dist.irecv(incoming, (rank - 1) % world_size)]
        for req in reqs:
            req.wait()
        buf[recv_chunk] += incoming[recv_chunk]
        return buf

    _fails(capsys, exercises.check_ring_step, my_ring_step, what="bytes", hint="one-chunk slice")


def test_average_gradients_without_communication_or_division_fails(capsys):
    def average_gradients(model):
        for p in model.parameters():
            p.grad /= 2                       # a local guess: no rank hears of the others' data

    _fails(capsys, exercises.check_average_gradients, average_gradients, what="no rank communicated")

    def average_gradients(model):  # noqa: F811 - sums but forgets the division
        for p in model.parameters():
            dist.all_reduce(p.grad)

    _fails(capsys, exercises.check_average_gradients, average_gradients, what="differ from the single-process",
           hint="divided by the world size")


def test_average_gradients_by_a_token_all_reduce_and_functional_collectives_fails(capsys):
    """Issue 18: one token dist.all_reduce, then functional all_reduce for the real work."""
    def average_gradients(model):
        import torch.distributed._functional_collectives as funcol
        dist.all_reduce(torch.zeros(1))
        for p in model.parameters():
            p.grad.copy_(funcol.wait_tensor(funcol.all_reduce(p.grad, "avg", dist.group.WORLD)))

    _fails(capsys, exercises.check_average_gradients, average_gradients,
           what="all_reduce (a functional collective), which this exercise does not allow")

    def average_gradients(model):  # noqa: F811 - a token all_reduce beside the real ones
        dist.all_reduce(torch.zeros(1, dtype=torch.float64))
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()

    _fails(capsys, exercises.check_average_gradients, average_gradients, what="carried",
           hint="all_reduce the gradients themselves")


def test_average_gradients_with_one_flattened_bucket_passes(capsys):
    """Fewer, bigger all_reduce calls (one bucket, as DDP does) carry the same gradients: right."""
    def average_gradients(model):
        grads = [p.grad for p in model.parameters()]
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.AVG)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    _passes(capsys, exercises.check_average_gradients, average_gradients)


def test_train_steps_leaves_a_parameter_without_a_gradient_alone_as_sgd_does():
    """A parameter the loss does not use has no .grad after backward: train_steps skips it, as
    torch.optim.SGD does (it raised TypeError: float * None)."""
    from collnb.labs.exercises.training import tiny_model, train_steps

    torch.manual_seed(0)
    x, y = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)
    model = tiny_model()
    model.register_parameter("unused", torch.nn.Parameter(torch.ones(2, dtype=torch.float64)))  # first in parameters()
    reference = tiny_model()
    optimiser = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        optimiser.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        optimiser.step()
    after = train_steps(model, x, y, steps=2, lr=0.1)
    assert torch.equal(after[0], torch.ones(2, dtype=torch.float64))
    # SGD adds -lr * grad in one fused step: the same up to rounding
    assert len(after) == 5 and all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(after[1:], reference.parameters()))


def test_a_function_with_the_wrong_parameters_is_refused_before_any_rank_starts(capsys):
    def my_broadcast(rank, world_size, src):          # the signature of an older version
        ...

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="but the check calls it as "
           "my_broadcast(rank, world_size, src, tensor)", hint="def my_broadcast(rank, world_size, src, tensor)")
    _fails(capsys, exercises.check_count_ready, None, what="not a function")

    def count_ranks(rank, world_size):                 # the exercise before issue 18
        ...

    _fails(capsys, exercises.check_count_ready, count_ranks, hint="def count_ready(rank, world_size, ready)")


# --- Wrong answers that do communicate get a hint about that mistake ------------------------------


def test_gather_returning_the_list_gets_a_hint(capsys):
    def my_gather(rank, world_size, dst, mine):
        gather_list = [torch.zeros_like(mine) for _ in range(world_size)] if rank == dst else None
        dist.gather(mine, gather_list=gather_list, dst=dst)
        return gather_list if rank == dst else mine      # forgets torch.cat, and returns mine elsewhere

    _fails(capsys, exercises.check_gather, my_gather, what="the gather list itself", hint="torch.cat(gather_list)")


def test_token_ring_summing_the_wrong_way_gets_a_hint(capsys):
    def token_ring(rank, world_size, value):
        token = torch.zeros(1, dtype=torch.int64)
        if rank == 0:
            dist.send(torch.tensor([value]), dst=1)
            dist.recv(token, src=world_size - 1)
            return int(token.item())
        dist.recv(token, src=rank - 1)
        token += value
        dist.send(token, dst=(rank + 1) % world_size)
        return int(token.item())          # returns what it sent, not what it received

    _fails(capsys, exercises.check_token_ring, token_ring, what="expected",
           hint="the value it received")


@pytest.mark.slow
def test_broadcast_only_on_src_deadlocks_into_a_hint(capsys):
    def my_broadcast(rank, world_size, src, tensor):
        if rank == src:
            dist.broadcast(tensor, src=src)
        return tensor

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="did not meet in the same calls",
           hint="every rank must make the same collective calls")


def test_an_answer_that_hangs_says_what_to_do_in_a_check(capsys, monkeypatch):
    from collnb.labs.exercises import framework
    monkeypatch.setattr(framework, "CHECK_TIMEOUT_S", 4.0)  # the check's own limit (60 s), shortened for the test

    def my_broadcast(rank, world_size, src, tensor):
        import time
        while True:  # never returns, outside any collective
            time.sleep(0.05)

    msg = _fails(capsys, exercises.check_broadcast, my_broadcast, what="your function did not finish within 4 s")
    assert "timeout=" not in msg  # a learner cannot pass launch(..., timeout=) to a check
    assert "fix the function, run its cell, then run this check again" in msg
    assert "still running, stopped by collnb" in msg  # where each rank was


def test_ring_step_with_the_wrong_chunk_shows_a_per_rank_table(capsys):
    def my_ring_step(rank, world_size, buf, k):
        send_chunk = (rank - k) % world_size
        incoming = torch.empty(1, dtype=buf.dtype)
        reqs = [dist.isend(buf[send_chunk:send_chunk + 1].clone(), (rank + 1) % world_size),
                dist.irecv(incoming, (rank - 1) % world_size)]
        for req in reqs:
            req.wait()
        buf[send_chunk] += incoming[0]                   # adds into the chunk it sent
        return buf

    msg = _fails(capsys, exercises.check_ring_step, my_ring_step, what="hold the wrong buffer")
    assert "expected" in msg and "✗" in msg.split("\n", 1)[1]


# --- Predictions -----------------------------------------------------------------------------------

PREDICTIONS = ["02_scatter", "04_reduce", "06_reduce_scatter", "07_all_reduce", "08_all_to_all"]


def _prediction_check(stem):
    """The check call of a prediction notebook, as a function of the prediction."""
    source = _cell(stem, "check")
    call = source.split("exercises.", 1)[1]

    def run(prediction):
        return eval("exercises." + call, {"exercises": exercises, "prediction": prediction})  # noqa: S307
    return run


def _spellings(value) -> list[str]:
    """How a solution value could appear in an output: as written, and as floats."""
    out = [repr(value)]
    if isinstance(value, list):
        out.append(repr([None if row is None else [float(v) for v in row] for row in value]))
    return out


@pytest.mark.parametrize("stem", PREDICTIONS)
def test_prediction_checks(stem, capsys):
    check = _prediction_check(stem)
    solution = _solution(stem, "prediction")
    out = _passes(capsys, check, solution)
    out = _unfinished(capsys, check, None)
    for spelled in _spellings(solution):
        assert spelled not in out, f"{stem}: the unanswered check shows the solution {spelled}:\n{out}"
    wrong = solution + 1 if isinstance(solution, int) else [None if row is None else [v + 1 for v in row]
                                                             for row in solution]
    msg = _fails(capsys, check, wrong)
    for spelled in _spellings(solution):
        assert spelled not in msg, f"{stem}: the ✗ states the right value {spelled}:\n{msg}"
    if isinstance(solution, int):
        assert not re.search(rf"\b{solution}\b", msg), msg
    _fails(capsys, check, "no idea")


def test_reduce_prediction_with_values_on_undefined_ranks_gets_that_hint(capsys):
    check = _prediction_check("04_reduce")
    _fails(capsys, check, [[40, 41, 42, 43, 44]] * 5, hint="only dst's tensor is defined")


def test_prediction_exercises_are_not_the_cases_run_before_them():
    """Issue 9: no prediction exercise is answered on screen before it is asked: the case it checks
    (primitive, world size, root) is not the one a heatmap or predict cell above it runs."""
    cases = {"02_scatter": ('"scatter"', 4, 1), "04_reduce": ('"reduce"', 5, 2),
             "06_reduce_scatter": ('"reduce_scatter"', 5, None), "08_all_to_all": ('"all_to_all"', 3, None)}
    for stem, (prim, ws, root) in cases.items():
        nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
        check_at = next(i for i, c in enumerate(nb.cells) if "check" in c.metadata.get("tags", []))
        assert f"world_size={ws}" in nb.cells[check_at].source or stem == "02_scatter"
        for c in nb.cells[:check_at]:
            if c.cell_type != "code" or not c.metadata.get("tags"):
                continue
            for m in re.finditer(r"collnb\.run\((\"\w+\")[^)]*world_size=(\d+)(?:[^)]*root=(\d+))?", c.source):
                same = m.group(1) == prim and int(m.group(2)) == ws and (root is None or m.group(3) == str(root))
                assert not same, f"{stem}: the exercise's case is drawn before it: {c.source!r}"
            launched = re.search(r"collnb\.launch\(predict_\w+, world_size=(\d+)", c.source)
            if launched and stem in ("06_reduce_scatter", "08_all_to_all"):
                assert int(launched.group(1)) != ws, f"{stem}: the predict cell runs the exercise's world size"


def test_int8_exercise_is_not_the_case_drawn_before_it():
    """Issue 9: 07's exercise used to be the exact int8 case (4 ranks × 100) its dtype section draws."""
    nb = nbformat.read(NOTEBOOK_DIR / "07_all_reduce.ipynb", as_version=4)
    check_at = next(i for i, c in enumerate(nb.cells) if "check" in c.metadata.get("tags", []))
    call = nb.cells[check_at].source
    ws, value = map(int, re.search(r"world_size=(\d+), value=(\d+)", call).groups())
    before = "\n".join(c.source for c in nb.cells[:check_at] if c.cell_type == "code"
                       and "exercise" not in c.metadata.get("tags", []) and "solution" not in c.metadata.get("tags", []))
    assert f"world_size={ws}, dtype=torch.int8, inputs=lambda rank, chunk: {value}" not in before


def test_ring_prediction(capsys):
    from collnb.algorithms import run_algorithm

    ring3 = run_algorithm("all_reduce", "ring", world_size=3)
    solution = _solution("algorithms", "prediction")
    _passes(capsys, exercises.check_ring_prediction, solution, ring3)
    out = _unfinished(capsys, exercises.check_ring_prediction, None, ring3)
    assert repr(solution) not in out
    msg = _fails(capsys, exercises.check_ring_prediction, [[0, 0, 0]] * 3, ring3)
    # which ranks are wrong, not what they should hold
    for row in solution:
        assert str(row) not in msg and ", ".join(f"{v:.4g}" for v in row) not in msg, msg


# --- Recording and rendering ------------------------------------------------------------------------


def _check_my_all_reduce(my_all_reduce):
    """A new check written with the framework's public API only, as its docstring shows (no
    translations: a test's texts)."""
    from collnb.labs.exercises.framework import Case, check, world_sizes
    direction = "Every rank contributes its own tensor to one collective that sums them on every rank."

    def cases(rng):
        for ws in world_sizes(rng, 2, 4):
            mine = [torch.tensor([float(rng.randint(-99, 99))]) for _ in range(ws)]
            yield Case(ws, [(m,) for m in mine], want=sum(mine), what=f"world size {ws}")

    def judge(trial):
        trial.show([(r, trial.results[r], trial.summary(r)) for r in trial.ranks], ("rank", "returned", "calls"))
        trial.only({"all_reduce"})
        wrong = [r for r in trial.ranks if not (isinstance(trial.results[r], torch.Tensor)
                                                and torch.equal(trial.results[r], trial.want))]
        if wrong:
            raise trial.fail(f"{trial.what}: rank(s) {wrong} did not return the sum.")

    check(my_all_reduce, "my_all_reduce(rank, world_size, mine)", direction=direction, cases=cases, judge=judge,
          passed="every rank returned the sum (world sizes {first_size} and {second_size})")


def test_a_new_check_is_a_case_builder_a_judge_and_one_call(capsys):
    """The framework's frame does what every check of the notebooks does: the signature checked before
    any rank starts, "not answered yet" for a silent answer, each launch judged with its table, ✓."""
    def right(rank, world_size, mine):
        dist.all_reduce(mine)
        return mine

    out = _passes(capsys, _check_my_all_reduce, right)
    assert re.search(r"^✓ every rank returned the sum \(world sizes [234] and [234]\)$", out, re.M), out
    assert out.splitlines()[0].split() == ["rank", "returned", "calls"]

    def unfinished(rank, world_size, mine):
        ...

    _check_my_all_reduce(unfinished)
    out = capsys.readouterr().out
    assert out.startswith("my_all_reduce: not answered yet.") and "✓" not in out, out

    def local(rank, world_size, mine):  # no communication: rank r knows only its own value
        return mine

    msg = _fails(capsys, _check_my_all_reduce, local, what="did not return the sum",
                 hint="Every rank contributes its own tensor")
    assert "  rank  returned  calls" in msg  # the trial's table with the ✗

    def two_args(rank, world_size):
        return None

    _fails(capsys, _check_my_all_reduce, two_args, what="takes (rank, world_size), but the check calls it as "
           "my_all_reduce(rank, world_size, mine)")


def test_launch_recorded_lists_every_operation_and_checks_group_them_into_calls():
    from collnb.labs.exercises.framework import _calls

    def fn(rank, world_size, payload):
        objs = [None] * world_size
        dist.all_gather_object(objs, payload)           # two all_gathers inside: one call
        t = torch.zeros(3, dtype=torch.int32)
        dist.broadcast(t, src=1)
        if rank == 0:
            dist.send(t, dst=1)
        elif rank == 1:
            dist.recv(t, src=0)
        return objs

    results, calls = exercises.launch_recorded(fn, 3, [("a",), ("b",), ("c",)])
    assert results == [["a", "b", "c"]] * 3
    # torch's operator inside all_gather_object: a list all_gather before 2.15, all_gather_single (dispatched as
    # all_gather_into_tensor) from 2.15 (collnb.torch_versions)
    inner = "all_gather_into_tensor" if applies("all_gather_object_single") else "all_gather"
    assert [(c.name, c.op) for c in calls[2]] == [("all_gather_object", inner)] * 2 + [("broadcast", None)]
    assert calls[2].unrecorded == 0
    grouped = [_calls(c) for c in calls]
    assert [c.name for c in grouped[2]] == ["all_gather_object", "broadcast"]
    assert grouped[0][1] == collnb.CallRecord("broadcast", 1, 3, ((3,),), ("int32",), None, (0, 1, 2), 12,
                                              "torch.distributed", 1)
    assert (grouped[0][2].name, grouped[0][2].peer) == ("send", 1)
    assert (grouped[1][2].name, grouped[1][2].peer) == ("recv", 0)


def test_batch_isend_irecv_operations_count_as_isend_and_irecv(capsys):
    """A ring step posted with batch_isend_irecv passes like one posted with isend/irecv."""
    def my_ring_step(rank, world_size, buf, k):
        send_chunk, recv_chunk = (rank - k) % world_size, (rank - k - 1) % world_size
        incoming = torch.empty(1, dtype=buf.dtype)
        ops = [dist.P2POp(dist.isend, buf[send_chunk:send_chunk + 1].clone(), (rank + 1) % world_size),
               dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        buf[recv_chunk] += incoming[0]
        return buf

    _passes(capsys, exercises.check_ring_step, my_ring_step)


def test_solution_code_uncomments_the_solution_after_its_header():
    cell = "# @title Solution\n# A solution, as comments.\n#\n# def f(x):\n#     return x + 1\n#\n# y = f(1)"
    assert exercises.solution_code(cell) == "def f(x):\n    return x + 1\n\ny = f(1)\n"
    with pytest.raises(ValueError, match="a line that is just '#'"):
        exercises.solution_code("x = 1")


def test_check_failed_renders_without_traceback():
    err = fail("world size 3: wrong.", "do the right thing.", "  rank  x\n  0     1")
    lines = err._render_traceback_()
    assert "✗ world size 3: wrong." in lines[0]
    assert lines[-1] == "Hint: do the right thing."
    assert not any("Traceback" in line or 'File "' in line for line in lines)
    assert isinstance(err, AssertionError)


@pytest.mark.slow
def test_wrong_answer_in_a_kernel_shows_the_hint_and_no_traceback():
    """Issue 10 item 5: executed in a real Jupyter kernel, a wrong answer's error output is the ✗
    message and the hint, not a traceback of checker code; nbclient still sees an error."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import torch, torch.distributed as dist\n"
        "from collnb import exercises\n"
        "def count_ready(rank, world_size, ready):\n"
        "    return world_size\n"
        "exercises.check_count_ready(count_ready)")]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    (err,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert err.ename == "CheckFailed"
    shown = "\n".join(err.traceback)
    assert "✗" in shown and "Hint: " in shown
    assert "Traceback" not in shown and "exercises.py" not in shown and 'File "' not in shown, shown


# ------------------------------------------------------------------------------------------------
# bandwidth: the two terms of a time from the fitted model, for a size the sweep never measured


def test_time_prediction_check(capsys):
    model = collnb.costmodel.CostModel(alpha=300e-6, beta=1e-9, gamma=2e-10)
    p, m = 2, 768 * 1024
    latency, bandwidth = 2 * (p - 1) * model.alpha, 2 * (p - 1) / p * m * model.beta + (p - 1) / p * m * model.gamma
    kw = dict(model=model, world_size=p, nbytes=m)
    calls = []

    def measure(values=iter([5e-2, 1.5e-3])):  # a load spike first, then a fair measurement
        calls.append(1)
        return next(values)

    out = _passes(capsys, exercises.check_time_prediction, latency, bandwidth, measure=measure, **kw)
    assert len(calls) == 2 and "bound" in out
    _unfinished(capsys, exercises.check_time_prediction, None, None, **kw,
                measure=lambda: pytest.fail("an unanswered check measures nothing"))
    never = dict(kw, measure=lambda: pytest.fail("a wrong answer is not measured"))
    # Issue 18: the fit's own prediction (FitResult.predict) is one number: it answers neither term,
    # and the ✗ does not state the terms (the learner's own numbers may be echoed).
    total = latency + bandwidth
    for answer in ((total, 0.0), (total / 2, total / 2), (0.0, total)):
        msg = _fails(capsys, exercises.check_time_prediction, *answer, **never)
        targets = [f"{v * 1e3:.4g}" for v in (latency, bandwidth, total) if v not in answer]
        assert not any(t in msg for t in targets), f"the ✗ states a target: {msg}"
    _fails(capsys, exercises.check_time_prediction, bandwidth, latency, **never, what="wrong places")
    _fails(capsys, exercises.check_time_prediction, latency * 1e3, bandwidth, **never, hint="milliseconds")
    _fails(capsys, exercises.check_time_prediction, "1 ms", bandwidth, **never, what="not a number of seconds")
    # Right terms, but every measurement is far off: judged after `tries` measurements.
    far = []
    _fails(capsys, exercises.check_time_prediction, latency, bandwidth, **kw, measure=lambda: far.append(1) or 1.0,
           hint="busy")
    assert len(far) == 3


# ------------------------------------------------------------------------------------------------
# The Chinese edition: the same checks, in Chinese (the English words above stay byte for byte)


@pytest.fixture
def chinese():
    collnb.set_language("zh")
    yield
    collnb.set_language("en")


def test_a_wrong_answer_in_chinese(capsys, chinese):
    def my_gather(rank, world_size, dst, mine):
        gather_list = [torch.zeros_like(mine) for _ in range(world_size)] if rank == dst else None
        dist.gather(mine, gather_list=gather_list, dst=dst)
        return gather_list if rank == dst else mine      # forgets torch.cat

    with pytest.raises(CheckFailed) as info:
        exercises.check_gather(my_gather)
    msg = str(info.value)
    head, hint = msg.split("\n提示：", 1)
    assert re.match(r"✗ world size \d，dst=\d：dst 返回的是 gather 列表本身（\d 个张量）。$", head.splitlines()[0]), msg
    assert hint.splitlines()[-1] == "请返回一个张量：torch.cat(gather_list)。", msg
    assert "Hint" not in msg and "returned" not in msg, msg
    # the per-rank table: Chinese headings, columns aligned by display width (a CJK character is two)
    table = head.splitlines()[1:]
    assert table[0].split() == ["rank", "返回值", "调用"], table
    from collnb.labs.exercises.framework import _width
    starts = {_width(line[:line.index(word)]) for line, word in zip(table, ["调用"] + ["gather"] * (len(table) - 1))}
    assert len(starts) == 1, table


def test_an_unanswered_exercise_in_chinese_keeps_the_graded_marker(capsys, chinese):
    def count_ready(rank, world_size, ready):
        ...

    exercises.check_count_ready(count_ready)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == ("count_ready：尚未作答（not answered yet）。请在上方的练习单元格中写出你的答案，"
                        "然后再次运行这个单元格。"), out
    assert lines[1].startswith("提示：每个 rank 只知道自己的标志。"), out
    assert lines[2].startswith("参考答案在练习下方折叠的单元格里"), out
    # tools/student.py grades by the English words, whatever the language
    assert NOT_ANSWERED in out and "✓" not in out and "✗" not in out


def test_a_right_prediction_in_chinese(capsys, chinese):
    exercises.check_all_to_all_prediction([[0, 10, 20], [1, 11, 21], [2, 12, 22]])
    out = capsys.readouterr().out
    assert out.startswith("✓ 正确：all_to_all 之后，rank i 持有每个 rank 的第 i 块：转置\n  在真实的 rank 上实测："), out


@pytest.mark.parametrize("answer", ["44", 44.9, True, [44]])
def test_an_int8_prediction_must_be_an_integer_not_its_text_or_a_float(answer):
    """notebook 07's int8 exercise: "44" (a str) and 44.9 passed through int(); now a prediction is
    refused unless it is an integer, before any rank runs."""
    from collnb.labs.exercises import predictions
    from collnb.labs.exercises.framework import CheckFailed
    with pytest.raises(CheckFailed, match="expected form: a single integer"):
        predictions.check_int8_prediction(answer)


# --- Issue 34: the exercises of notebooks 12, 13, 16 and 17 that only real communication passes ---------

def _dtensor_matmul(w_placements, y_placements, finish="redistribute"):
    """A dp_tp_matmul answer with the given placements (names of torch.distributed.tensor's classes)."""
    def dp_tp_matmul(rank, world_size, dp, tp, x, w):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
        kinds = {"R": Replicate(), "S0": Shard(0), "S1": Shard(1)}
        mesh = init_device_mesh("cpu", (dp, tp))
        X = DTensor.from_local(x, mesh, [Shard(0), Shard(1)])
        W = DTensor.from_local(w, mesh, [kinds[p] for p in w_placements])
        Y = X @ W
        if finish == "full_tensor":
            return Y.full_tensor().chunk(dp)[rank // tp]
        return Y.redistribute(mesh, [kinds[p] for p in y_placements]).to_local()
    return dp_tp_matmul


def test_dp_tp_matmul_gathering_more_than_the_goal_fails(capsys):
    # full_tensor() resolves the Partial and then gathers the dp rows every rank already had
    _fails(capsys, exercises.check_dp_tp_matmul, _dtensor_matmul(("R", "S0"), None, "full_tensor"),
           what="needs one collective, over mesh dim 1", hint="every rank keeps its own dp rows")
    _fails(capsys, exercises.check_dp_tp_matmul, _dtensor_matmul(("R", "S0"), ("R", "R")),
           what="needs one collective, over mesh dim 1")


def test_dp_tp_matmul_with_w_placed_as_it_is_not_or_by_hand_fails(capsys):
    # w is the same on every dp replica: calling it Shard(0) over dp makes a different, wrong W
    msg = _fails(capsys, exercises.check_dp_tp_matmul, _dtensor_matmul(("S0", "S0"), ("S0", "R")))
    assert "mesh" in msg

    def by_hand(rank, world_size, dp, tp, x, w):   # the right sum, but not through DTensor
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (dp, tp))
        y = x @ w
        dist.all_reduce(y, group=mesh.get_group(1))
        return y

    _fails(capsys, exercises.check_dp_tp_matmul, by_hand, what="asks for DTensor to do the communication")


def _tp_backward(reduce=("x",)):
    def tp_mlp_backward(rank, world_size, x, w1, b1, w2, grad_out):
        x, w1, b1, w2 = (t.requires_grad_() for t in (x, w1, b1, w2))
        (torch.nn.functional.gelu(x @ w1.t() + b1) @ w2.t()).backward(grad_out)
        grads = {"x": x.grad, "w1": w1.grad, "b1": b1.grad, "w2": w2.grad}
        for name in reduce:
            dist.all_reduce(grads[name])
        return grads["x"], grads["w1"], grads["b1"], grads["w2"]
    return tp_mlp_backward


def test_tp_mlp_backward_reducing_the_wrong_gradients_fails(capsys):
    _fails(capsys, exercises.check_tensor_parallel_backward, _tp_backward(()), what="exactly one dist.all_reduce")
    # every gradient all-reduced, as data parallelism would: the weight shards' gradients need none
    _fails(capsys, exercises.check_tensor_parallel_backward, _tp_backward(("x", "w1", "b1", "w2")),
           what="exactly one dist.all_reduce", hint="needs no communication")
    # one all_reduce, of the wrong tensor: a weight shard's gradient instead of the input's
    _fails(capsys, exercises.check_tensor_parallel_backward, _tp_backward(("w2",)), what="s x h")


def test_tp_mlp_backward_without_the_backward_fails_on_the_values(capsys):
    def forward_only(rank, world_size, x, w1, b1, w2, grad_out):   # the forward's all_reduce, no gradients
        y = torch.nn.functional.gelu(x @ w1.t() + b1) @ w2.t()
        dist.all_reduce(y)
        return y, torch.zeros_like(w1), torch.zeros_like(b1), torch.zeros_like(w2)

    _fails(capsys, exercises.check_tensor_parallel_backward, forward_only, what="returned a dx other than")


def test_stage_backward_sending_the_received_gradient_or_not_pipelining_fails(capsys):
    def passes_on(rank, world_size, layer, inputs, grads):   # forwards the output's gradient, not the input's
        for x, g in zip(inputs, grads):
            if rank < world_size - 1:
                dist.recv(g, src=rank + 1)
            layer(x).backward(g)
            if rank > 0:
                dist.send(g, dst=rank - 1)
        return [p.grad for p in layer.parameters()]

    _fails(capsys, exercises.check_pipeline_backward, passes_on, what="gradients other than one process's",
           hint="INPUT")

    def serial(rank, world_size, layer, inputs, grads):      # every receive first, then every send
        if rank < world_size - 1:
            for g in grads:
                dist.recv(g, src=rank + 1)
        sent = []
        for x, g in zip(inputs, grads):
            x = x.requires_grad_()
            layer(x).backward(g)
            sent.append(x.grad)
        if rank > 0:
            for g in sent:
                dist.send(g, dst=rank - 1)
        return [p.grad for p in layer.parameters()]

    _fails(capsys, exercises.check_pipeline_backward, serial, what="one microbatch after the other")


def test_stage_backward_without_communication_fails(capsys):
    def local(rank, world_size, layer, inputs, grads):        # backward from the zeros it was given
        for x, g in zip(inputs, grads):
            layer(x).backward(g)
        return [p.grad for p in layer.parameters()]

    _fails(capsys, exercises.check_pipeline_backward, local, what="each of the")


def _overlap_answer(order: str, divide: bool = True):
    def overlapped_step(rank, world_size, grad, compute):
        if order == "serial":                   # compute, then a blocking all_reduce
            compute()
            dist.all_reduce(grad)
        elif order == "wait-first":             # started asynchronously, but waited on before the compute
            dist.all_reduce(grad, async_op=True).wait()
            compute()
        elif order == "twice":
            work = dist.all_reduce(grad, async_op=True)
            compute()
            compute()
            work.wait()
        else:
            work = dist.all_reduce(grad, async_op=True)
            compute()
            work.wait()
        return grad / world_size if divide else grad
    return overlapped_step


def test_overlapped_all_reduce_without_overlap_fails_on_the_timeline(capsys):
    for order in ("serial", "wait-first"):
        _fails(capsys, exercises.check_overlapped_all_reduce, _overlap_answer(order), what="overlap 0 %",
               hint="async_op=True")


def test_overlapped_all_reduce_without_the_average_or_computing_twice_fails(capsys):
    _fails(capsys, exercises.check_overlapped_all_reduce, _overlap_answer("overlapped", divide=False),
           what="average", hint="divide by world_size")
    _fails(capsys, exercises.check_overlapped_all_reduce, _overlap_answer("twice"), what="exactly once")

    def no_communication(rank, world_size, grad, compute):
        compute()
        return grad

    _fails(capsys, exercises.check_overlapped_all_reduce, no_communication, what="exactly one dist.all_reduce")


def test_a_verdict_over_a_table_of_checkmarks_says_the_rows_are_right():
    """Issue 34: a ✗ verdict sat over a table whose every row was ✓ (the values right, the collectives
    wrong): every check fails through framework.fail, which now says the rows are right and the verdict
    is about something else; a table with a ✗ row, or none, is shown as before."""
    from collnb.labs.exercises import framework
    rows = framework.table([(0, [1.0], "✓"), (1, [2.0], "✓")], ["rank", "got", ""])
    msg = str(framework.fail("world size 2: rank 0 made two all_gathers, expected one.", "one all_reduce", rows))
    lines = msg.splitlines()
    assert lines[0].startswith("✗ world size 2") and lines[1] == framework.VALUES_RIGHT, msg
    assert lines[3].endswith("✓") and lines[4].endswith("✓"), msg
    wrong = framework.table([(0, [1.0], "✓"), (1, [3.0], "✗")], ["rank", "got", ""])
    assert framework.VALUES_RIGHT not in str(framework.fail("rank 1 is wrong.", "h", wrong))
    assert framework.VALUES_RIGHT not in str(framework.fail("no table.", "h"))
