"""Exercise checks (collnb.exercises) cannot be fooled, and say what is wrong.

For every exercise of the notebooks: the notebook's own stored solution passes (✓); an unfinished
answer yields no ✓ (the check says "not answered yet" and demonstrates the solution, labelled); the
answers that used to pass without communicating (issue 9: count by ``world_size``, broadcast by a
local formula, all_gather by a local formula, the token ring by arithmetic) and the same trick on
every other exercise fail with a hint; wrong answers fail with a hint about that mistake. The
solutions are taken from the notebooks' ``solution`` cells, so a notebook and its check cannot drift
apart. A wrong answer in a real kernel renders as ✗ + hint, without a traceback (issue 10 item 5).
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
from collnb.labs.exercises import CheckFailed, NOT_ANSWERED
from collnb.labs.exercises.framework import _fail

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def _cell(stem: str, tag: str, k: int = 0) -> str:
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    return cells[k].source


def _solution(stem: str, name: str, k: int = 0):
    """The object ``name`` defined by the notebook's ``k``-th solution cell."""
    ns = {"__name__": "__main__", "torch": torch, "dist": dist}
    exec(compile(_cell(stem, "solution", k), f"{stem}-solution", "exec"), ns)  # noqa: S102
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
    assert NOT_ANSWERED in out and "✓" not in out, out
    assert "SOLUTION" in out, out
    return out


# ------------------------------------------------------------------------------------------------
# Code exercises: (notebook, solution name, function signature of an unfinished answer)

CODE = {
    "00_launching_ranks": "solution_count_ranks",
    "01_broadcast": "solution_broadcast",
    "03_gather": "solution_gather",
    "05_all_gather": "solution_all_gather",
    "09_object_collectives": "solution_census",
    "10_send_recv": "solution_token_ring",
    "11_training": "solution_average_gradients",
}


@pytest.mark.parametrize("stem", sorted(CODE))
def test_notebook_solution_passes_and_unfinished_answer_gets_no_check_mark(stem, capsys):
    check = getattr(exercises, _check_name(stem))
    solution = _solution(stem, CODE[stem])
    out = _passes(capsys, check, solution, solution=solution)
    assert "rank" in out  # the per-rank table
    ns = {"__name__": "__main__"}
    # The exercise cell as stored: a function whose body is `...`.
    exec(compile(_cell(stem, "exercise"), f"{stem}-exercise", "exec"), ns)  # noqa: S102
    (name,) = [k for k, v in ns.items() if callable(v) and not k.startswith("__")]
    demo = _unfinished(capsys, check, ns[name], solution=solution)
    assert name in demo


def test_ring_step_solution_passes_and_unfinished_gets_no_check_mark(capsys):
    solution = _solution("algorithms", "solution_ring_step", 1)
    assert _check_name("algorithms", 1) == "check_ring_step"
    _passes(capsys, exercises.check_ring_step, solution, solution=solution)
    ns = {"__name__": "__main__"}
    exec(compile(_cell("algorithms", "exercise", 1), "ex", "exec"), ns)  # noqa: S102
    _unfinished(capsys, exercises.check_ring_step, ns["my_ring_step"], solution=solution)


# --- The four cheats named in issue 9, and the same trick on every other exercise ---------------


def test_count_ranks_by_world_size_fails(capsys):
    def count_ranks(rank, world_size):
        return world_size

    _fails(capsys, exercises.check_count_ranks, count_ranks, what="wrong number on purpose",
           hint="torch.ones(1)")

    def count_ranks(rank, world_size):  # noqa: F811 - the other way round the rule
        return dist.get_world_size()

    _fails(capsys, exercises.check_count_ranks, count_ranks, what="dist.get_world_size()")


def test_broadcast_by_local_values_fails(capsys):
    def my_broadcast(rank, world_size, src, tensor):
        return torch.arange(float(tensor.numel())) + 100 * src   # the old exercise's formula

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="exactly one dist.broadcast")

    def my_broadcast(rank, world_size, src, tensor):  # noqa: F811 - communicates, but not src's data
        dist.broadcast(torch.zeros_like(tensor), src=src)
        return tensor

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="did not return src's data",
           hint="return the tensor you broadcast into")


def test_all_gather_by_local_formula_fails(capsys):
    def my_all_gather(rank, world_size, mine):
        return torch.cat([torch.tensor([10.0 * r, 10.0 * r + 1]) for r in range(world_size)])

    _fails(capsys, exercises.check_all_gather, my_all_gather, what="one dist.broadcast per source rank")

    def my_all_gather(rank, world_size, mine):  # noqa: F811 - right result, forbidden call
        out = [torch.zeros_like(mine) for _ in range(world_size)]
        dist.all_gather(out, mine)
        return torch.cat(out)

    _fails(capsys, exercises.check_all_gather, my_all_gather, what="dist.all_gather, which this exercise does not")


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


def test_average_gradients_without_communication_or_division_fails(capsys):
    def average_gradients(model):
        for p in model.parameters():
            p.grad /= 2                       # a local guess: no rank hears of the others' data

    _fails(capsys, exercises.check_average_gradients, average_gradients, what="no rank communicated")

    def average_gradients(model):  # noqa: F811 - sums but forgets the division
        for p in model.parameters():
            dist.all_reduce(p.grad)

    _fails(capsys, exercises.check_average_gradients, average_gradients, what="differ from the single-process",
           hint="divide by the world size")


def test_a_function_with_the_wrong_parameters_is_refused_before_any_rank_starts(capsys):
    def my_broadcast(rank, world_size, src):          # the signature of an older version
        ...

    _fails(capsys, exercises.check_broadcast, my_broadcast, what="but the check calls it as "
           "my_broadcast(rank, world_size, src, tensor)", hint="def my_broadcast(rank, world_size, src, tensor)")
    _fails(capsys, exercises.check_count_ranks, None, what="not a function")


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
    """The check call of a prediction notebook, as a function of (prediction, solution)."""
    source = _cell(stem, "check")
    call = source.split("exercises.", 1)[1]

    def run(prediction, solution):
        return eval("exercises." + call, {"exercises": exercises,  # noqa: S307 - the notebook's own call
                                          "prediction": prediction, "solution": solution})
    return run


@pytest.mark.parametrize("stem", PREDICTIONS)
def test_prediction_checks(stem, capsys):
    check = _prediction_check(stem)
    solution = _solution(stem, "solution")
    _passes(capsys, check, solution, solution)
    out = _unfinished(capsys, check, None, solution)
    assert str(solution) in out
    wrong = solution + 1 if isinstance(solution, int) else [None if row is None else [v + 1 for v in row]
                                                             for row in solution]
    _fails(capsys, check, wrong, solution)
    _fails(capsys, check, "no idea", solution)


def test_reduce_prediction_with_values_on_undefined_ranks_gets_that_hint(capsys):
    check = _prediction_check("04_reduce")
    _fails(capsys, check, [[40, 41, 42, 43, 44]] * 5, None, hint="only dst's tensor is defined")


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
    solution = _solution("algorithms", "solution")
    _passes(capsys, exercises.check_ring_prediction, solution, solution, ring3)
    _unfinished(capsys, exercises.check_ring_prediction, None, solution, ring3)
    msg = _fails(capsys, exercises.check_ring_prediction, [[0, 0, 0]] * 3, solution, ring3)
    assert "recorded" in msg


# --- Recording and rendering ------------------------------------------------------------------------


def test_launch_recorded_lists_each_ranks_own_calls_only():
    def fn(rank, world_size, payload):
        objs = [None] * world_size
        dist.all_gather_object(objs, payload)           # torch calls all_gather inside: not listed
        t = torch.zeros(3, dtype=torch.int32)
        dist.broadcast(t, src=1)
        assert dist.get_world_size() == world_size             # a query, counted separately
        if rank == 0:
            dist.send(t, dst=1)
        elif rank == 1:
            dist.recv(t, src=0)
        return objs

    results, calls = exercises.launch_recorded(fn, 3, [("a",), ("b",), ("c",)])
    assert results == [["a", "b", "c"]] * 3
    assert [c.name for c in calls[2]] == ["all_gather_object", "broadcast", "get_world_size"]
    assert calls[0][1] == collnb.CallRecord("broadcast", 1, 3, ((3,),), ("int32",))
    assert (calls[0][2].name, calls[0][2].peer) == ("send", 1)
    assert (calls[1][2].name, calls[1][2].peer) == ("recv", 0)


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


def test_check_failed_renders_without_traceback():
    err = _fail("world size 3: wrong.", "do the right thing.", "  rank  x\n  0     1")
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
        "def count_ranks(rank, world_size):\n"
        "    return world_size\n"
        "exercises.check_count_ranks(count_ranks)")]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    (err,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert err.ename == "CheckFailed"
    shown = "\n".join(err.traceback)
    assert "✗" in shown and "Hint: " in shown
    assert "Traceback" not in shown and "exercises.py" not in shown and 'File "' not in shown, shown


# ------------------------------------------------------------------------------------------------
# bandwidth: a time predicted from the fitted model for a size the sweep never measured


def test_time_prediction_check(capsys):
    model_says = 1.2e-3
    calls = []

    def measure(values=iter([5e-3, 1.5e-3])):  # a load spike first, then a fair measurement
        calls.append(1)
        return next(values)

    out = _passes(capsys, exercises.check_time_prediction, 1.2e-3, 1.2e-3, model_prediction=model_says,
                  measure=measure)
    assert len(calls) == 2 and "1.25" in out  # 1.5 ms / 1.2 ms, measured again after the spike
    _unfinished(capsys, exercises.check_time_prediction, None, 1.2e-3, model_prediction=model_says,
                measure=lambda: pytest.fail("an unanswered check measures nothing"))
    # Not from the model (e.g. a stopwatch guess), or in the wrong unit: refused before measuring.
    _fails(capsys, exercises.check_time_prediction, 2e-3, 1.2e-3, model_prediction=model_says,
           measure=lambda: 2e-3, hint="2(p-1)·α")
    _fails(capsys, exercises.check_time_prediction, 1.2, 1.2e-3, model_prediction=model_says,
           measure=lambda: 1.2e-3, hint="milliseconds")
    _fails(capsys, exercises.check_time_prediction, "1 ms", 1.2e-3, model_prediction=model_says,
           measure=lambda: 1.2e-3, what="not a positive number of seconds")
    # Right formula, but every measurement is far off: judged after `tries` measurements.
    far = []
    _fails(capsys, exercises.check_time_prediction, 1.2e-3, 1.2e-3, model_prediction=model_says,
           measure=lambda: far.append(1) or 9e-3, hint="busy")
    assert len(far) == 3
