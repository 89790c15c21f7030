"""The hang lab (issue 23, notebook 18): faults injected on real ranks, torch's Flight Recorder dumped from
every rank (``launch(..., flight_recorder=N)`` starts ranks with ``TORCH_FR_BUFFER_SIZE``), collnb's blame read
from the entries, torch's ``fr_trace`` on the re-keyed gloo dumps, and the culprit exercise."""
import concurrent.futures
import os
import re
from pathlib import Path

import nbformat
import pytest

import collnb
from collnb import exercises
from collnb.labs import hangs
from collnb.labs.exercises import hangs as ex_hangs

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def _fr_env(rank, world_size):
    return os.environ.get("TORCH_FR_BUFFER_SIZE")


def test_flight_recorder_option_starts_ranks_with_the_variable_and_plain_launch_without():
    assert collnb.launch(_fr_env, 2, flight_recorder=50) == ["50", "50"]
    assert collnb.launch(_fr_env, 2) == [None, None]  # fresh ranks again, without it


def test_no_fault_every_rank_records_the_same_four_collectives(tmp_path):
    run = hangs.fault_run("none", world_size=4, culprit=0, dump_dir=str(tmp_path))
    assert run.error is None and run.missing == []
    # rank r receives chunk r of every rank s: [100 s + 2 r, 100 s + 2 r + 1]
    for r, out in enumerate(run.results):
        assert out == [float(100 * s + 2 * r + k) for s in range(4) for k in (0, 1)]
    for r in range(4):
        assert [(seq, op, ins) for rr, seq, op, ins, _, _ in run.rows() if rr == r] == [
            (1, "all_reduce", [[4]]), (2, "all_reduce", [[4]]), (3, "all_reduce", [[4]]), (4, "all_to_all", [[8]])]
    assert run.blame().ranks == ()
    verdict = hangs.fr_trace_verdict(run.dump_dir)
    assert "has errors" not in verdict and "mismatch" not in verdict.lower() and "Missing" not in verdict
    pic = run.image()
    assert pic.png[:4] == b"\x89PNG"


def test_fr_trace_without_tabulate_prints_nothing_on_stderr(tmp_path):
    """Issue 34: without the optional ``tabulate`` (a ``make lab`` install before it was in the lab extra),
    importing torch's analyser logged "tabulate is not installed. Proceeding without it." on stderr under
    18's cells. A fresh interpreter, ``tabulate`` blocked: the verdict on real dumps, and nothing on stderr."""
    import subprocess
    import sys
    hangs.fault_run("none", world_size=4, culprit=0, dump_dir=str(tmp_path))
    code = ("import sys; sys.modules['tabulate'] = None\n"
            "from collnb.labs import hangs\n"
            f"print(hangs.fr_trace_verdict({str(tmp_path)!r}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "has errors" not in done.stdout and "Missing" not in done.stdout, done.stdout
    assert "tabulate" not in done.stderr and done.stderr.strip() == "", done.stderr
    # the check can fail: torch's analyser imported plainly does print it
    plain = subprocess.run([sys.executable, "-c", "import sys; sys.modules['tabulate'] = None\n"
                            "from torch.distributed.flight_recorder.fr_trace import main"],
                           capture_output=True, text=True, timeout=120)
    assert "tabulate is not installed" in plain.stderr, plain.stderr


FR_TRACE_SAYS = {
    "skipped_collective": ["Collective sequence number: 3 has errors", "COLLECTIVE_TYPE_MISMATCH"],
    "mismatched_shape": ["Collective sequence number: 2 has errors", "SIZE_OR_SYNTAX_MISMATCH"],
    "wrong_splits": ["Input/output mismatch in the collective sequence number: 4", "total input numel: 31",
                     "total output numel: 32"],
    "sleeping_rank": ["Missing dump files from ranks {CULPRIT}"],
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FR_TRACE_SAYS))
def test_every_injected_fault_is_named_by_the_table_and_by_fr_trace(fault, tmp_path):
    culprit = 2
    run = hangs.fault_run(fault, world_size=4, culprit=culprit, dump_dir=str(tmp_path))
    blame = run.blame()
    assert blame.ranks == (culprit,), blame
    assert blame.seq == hangs.DIVERGES_AT[fault], blame
    verdict = hangs.fr_trace_verdict(run.dump_dir)
    for want in FR_TRACE_SAYS[fault]:
        assert want.replace("CULPRIT", str(culprit)) in verdict, verdict
    assert isinstance(run.error, collnb.RankError)
    if fault == "wrong_splits":  # torch is silent: rank 0 keeps its fill where rank 2's float is missing
        assert run.results[0][4:6] == [201.0, -1.0]
        assert "Every rank returned" in str(run.error)
    if fault == "sleeping_rank":
        assert run.missing == [culprit]
        assert f"rank {culprit}: DidNotJoin" in str(run.error)
    first = str(run.error).splitlines()[0]  # RankError's first line names the culprit (entries, or its stack)
    assert first.startswith(f"rank {culprit}: "), first
    assert run.error.rank == culprit
    if fault != "sleeping_rank":
        assert first.startswith(f"rank {culprit}: CollectiveMismatch: its collective_seq_id "
                                f"{hangs.DIVERGES_AT[fault]} in the default group differs"), first


def _entry(seq, op="gloo:all_reduce", sizes=((4,),), out=None):
    return dict(collective_seq_id=seq, profiling_name=op, input_sizes=[list(s) for s in sizes],
                output_sizes=[list(s) for s in (out or sizes)], state="scheduled", process_group=["0", "default_pg"])


def test_blame_from_entries_exact():
    run = hangs.FaultRun("mismatched_shape", 1, 3, "/nonexistent")
    run.entries = {0: [_entry(1), _entry(2)], 1: [_entry(1), _entry(2, sizes=((6,),))], 2: [_entry(1), _entry(2)]}
    assert hangs.Blame((1,), 2, run.blame().reason) == run.blame()
    run.entries = {0: [_entry(1), _entry(2)], 1: [_entry(1)], 2: [_entry(1), _entry(2)]}
    assert run.blame().ranks == (1,) and run.blame().seq == 2  # never issued collective 2
    run.entries = {0: [_entry(1)], 2: [_entry(1)]}
    assert run.missing == [1] and run.blame().ranks == (1,)
    a2a = "gloo:all_to_all"
    run.entries = {r: [_entry(1, a2a, ((3,),), ((3,),))] for r in range(3)}
    assert run.blame().ranks == ()  # uneven all_to_all sizes are fine while totals match
    run.entries[0] = [_entry(1, a2a, ((2,),), ((3,),))]
    assert run.blame().ranks == (0,) and run.blame().seq == 1


def _read_table(rows, world_size):
    """What a learner does with the Flight Recorder table: the first column where one rank's cell
    (operation, input sizes) differs from all the others' in it, and that rank."""
    cells = {}
    for r, seq, op, ins, _outs, _state in rows:
        cells.setdefault(seq, {})[r] = (op, str(ins))
    for seq in sorted(cells):
        col = cells[seq]
        for r in range(world_size):
            others = {c for rr, c in col.items() if rr != r}
            if r in col and len(others) == 1 and col[r] not in others:
                return r, seq
    return None, None


def _synthetic_mystery(fault, culprit, world_size=4):
    """A Mystery with hand-written entries of ``fault`` on ``culprit`` (what fault_run records), its truth
    given to the check as hang_mystery does."""
    from collnb.labs.exercises import hangs as ex_hangs
    entries = {}
    for r in range(world_size):
        ops = [_entry(1), _entry(2), _entry(3), _entry(4, "gloo:all_to_all", ((8,),))]
        if r == culprit and fault == "skipped_collective":
            ops = [_entry(1), _entry(2), _entry(3, "gloo:all_to_all", ((8,),))]
        if r == culprit and fault == "mismatched_shape":
            ops = [_entry(1), _entry(2, sizes=((6,),))]
        entries[r] = ops
    mystery = ex_hangs.Mystery(world_size, "/nonexistent", entries, True)
    ex_hangs._remember(mystery, fault, culprit)
    return mystery


@pytest.mark.parametrize("fault", ["skipped_collective", "mismatched_shape"])
def test_culprit_exercise_passes_only_a_reading_of_the_table(fault, capsys):
    mystery = _synthetic_mystery(fault, 3)
    exercises.check_hang_culprit(mystery, None, None)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "✓" not in out
    # the lazy answers: the truth is not on the object the learner holds
    for lazy in (lambda: mystery.culprit, lambda: hangs.DIVERGES_AT[mystery.fault], lambda: mystery.blame(),
                 lambda: mystery.error):
        with pytest.raises(AttributeError):
            lazy()
    assert not {"culprit", "fault", "error"} & set(vars(mystery))
    with pytest.raises(exercises.CheckFailed, match="rank 1 is not"):
        exercises.check_hang_culprit(mystery, 1, hangs.DIVERGES_AT[fault])
    with pytest.raises(exercises.CheckFailed, match="collective 1 is not"):
        exercises.check_hang_culprit(mystery, 3, 1)
    culprit, seq = _read_table(mystery.rows(), mystery.world_size)
    assert (culprit, seq) == (3, hangs.DIVERGES_AT[fault])
    exercises.check_hang_culprit(mystery, culprit, seq)
    assert f"✓ rank 3 diverged at collective_seq_id {seq}" in capsys.readouterr().out


def test_culprit_exercise_refuses_a_fault_run_whose_truth_is_on_it():
    run = hangs.FaultRun("skipped_collective", 3, 4, "/nonexistent")  # a FaultRun carries .culprit
    with pytest.raises(exercises.CheckFailed, match="not a mystery this check knows"):
        exercises.check_hang_culprit(run, run.culprit, hangs.DIVERGES_AT[run.fault])
    copy = exercises.Mystery(4, "/nonexistent", {}, True)  # a Mystery the check did not make
    with pytest.raises(exercises.CheckFailed, match="not a mystery this check knows"):
        exercises.check_hang_culprit(copy, 0, 1)


@pytest.mark.slow
def test_hang_mystery_on_real_ranks_read_from_its_table(tmp_path, capsys):
    mystery = exercises.hang_mystery(dump_dir=str(tmp_path / "mystery"))
    assert mystery.failed and sorted(mystery.entries) == [0, 1, 2, 3]
    assert mystery.image().png[:4] == b"\x89PNG"
    culprit, seq = _read_table(mystery.rows(), 4)
    assert culprit is not None, mystery.table()
    verdict = mystery.fr_trace()   # issue 34: fr_trace's "Culprit rank N" was the answer, printed
    assert "Culprit rank ?" in verdict and not re.search(r"Culprit rank \d|missing ranks: \{", verdict), verdict
    exercises.check_hang_culprit(mystery, culprit, seq)
    assert "✓" in capsys.readouterr().out


def test_a_mystery_is_never_a_worked_example_of_the_notebook(monkeypatch):
    """Issue 34: a mystery that was the worked example itself (skipped collective or mismatched shape on
    rank 1) passed with the example's answer copied. The pairs the notebook runs before its exercise are
    WORKED_EXAMPLES, and hang_mystery never draws one."""
    nb = nbformat.read(NOTEBOOK_DIR / "18_hangs.ipynb", as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "mystery" in c.metadata.get("tags", []))
    shown = {(f, int(r)) for c in nb.cells[:at] if c.cell_type == "code"
             for f, r in re.findall(r'fault_run\("(\w+)", world_size=4, culprit=(\d+)', c.source)}
    assert {f for f, _ in shown} >= set(ex_hangs.MYSTERY_FAULTS), shown
    assert {p for p in shown if p[0] in ex_hangs.MYSTERY_FAULTS} <= ex_hangs.WORKED_EXAMPLES, shown

    drawn = []

    def fake_run(fault, world_size, culprit, dump_dir):
        drawn.append((fault, culprit))
        return hangs.FaultRun(fault, culprit, world_size, dump_dir)

    monkeypatch.setattr(ex_hangs, "fault_run", fake_run)
    for _ in range(300):
        ex_hangs.hang_mystery(dump_dir="/nonexistent")
    assert not set(drawn) & ex_hangs.WORKED_EXAMPLES
    assert {f for f, _ in drawn} == set(ex_hangs.MYSTERY_FAULTS) and {r for _, r in drawn} == {0, 2, 3}


def test_the_mystery_fr_trace_hides_the_ranks_it_names(monkeypatch):
    """fr_trace names the culprit ("Culprit rank 2", "missing ranks: {2}"); the mystery's copy says "?" and
    keeps the rest of torch's report (the sequence number, the operations and sizes it compared)."""
    report = ("Collective sequence number: 2 has errors\nerror msg: Culprit rank 2; Error type: SIZE_OR_SYNTAX_MISMATCH, "
              "Expected input sizes: '[[4]]' does not match found input sizes: '[[6]]', Culprit rank 13; x\n"
              "Not all ranks joining collective, sequence number: 3\nmissing ranks: {2, 3}")
    monkeypatch.setattr(ex_hangs, "fr_trace_verdict", lambda dump_dir: report)
    verdict = _synthetic_mystery("mismatched_shape", 2).fr_trace()
    assert not re.search(r"Culprit rank \d|missing ranks: \{|\{2", verdict), verdict
    assert verdict.count("Culprit rank ?") == 2 and "missing ranks: ?" in verdict
    assert "SIZE_OR_SYNTAX_MISMATCH" in verdict and "sequence number: 2" in verdict
    assert ex_hangs.hide_ranks("(no errors reported)") == "(no errors reported)"


def test_bad_requests_refused():
    with pytest.raises(ValueError, match="fault must be one of"):
        hangs.fault_run("typo")
    with pytest.raises(ValueError, match="culprit"):
        hangs.fault_run("none", world_size=4, culprit=4)
    with pytest.raises(ValueError, match="world_size must be 4 or 8"):
        hangs.fault_run("none", world_size=3)


def _timed_out(rank, t, entries):
    from collnb.ranks.explain.failures import Ending
    return Ending(rank, "error", t, "RuntimeError", "Timed out waiting 2000ms for recv operation to complete",
                 [], True, flight_recorder=entries)


def test_rank_error_names_the_diverged_rank_from_flight_recorder_entries():
    from collnb.ranks.explain.failures import call_error
    a2a = "gloo:all_to_all"
    good = [_entry(1), _entry(2), _entry(3)]
    odd = [_entry(1), _entry(2), _entry(3, a2a, ((8,),))]  # rank 2 skipped an all_reduce
    events = {r: _timed_out(r, 10.0 + r, odd if r == 2 else good) for r in range(4)}
    err = call_error(list(range(4)), events, list(events.values()), [], {}, "run")
    first = str(err).splitlines()[0]
    assert first.startswith("rank 2: CollectiveMismatch: its collective_seq_id 3 in the default group differs"), first
    assert "all_to_all on rank(s) [2] but all_reduce on the other ranks" in first
    assert err.rank == 2 and "(follows the root cause)" in err.outcomes[0] and "follows" not in err.outcomes[2]
    # without the Flight Recorder: today's blame (the first to raise), said to be a guess
    events = {r: _timed_out(r, 10.0 + r, None) for r in range(4)}
    err = call_error(list(range(4)), events, list(events.values()), [], {}, "run")
    assert str(err).startswith("rank 0: RuntimeError: Timed out")
    assert "collnb's guess, from the messages alone" in str(err) and "flight_recorder=200" in str(err)
    # with it, but two ranks that disagree: no strict minority, no culprit named from the entries
    events = {0: _timed_out(0, 10.0, good), 1: _timed_out(1, 11.0, odd)}
    err = call_error([0, 1], events, list(events.values()), [], {}, "run")
    assert "CollectiveMismatch" not in str(err).splitlines()[0]
    assert "disagree at collective_seq_id 3" in str(err) and "no rank differs from all the others" in str(err)


def test_divergence_reads_each_group_and_ignores_entries_lost_to_the_ring_buffer():
    from collnb.ranks import divergence
    sub = ["1", "undefined"]
    entries = {0: [_entry(5), _entry(6)], 1: [_entry(4), _entry(5), _entry(6)], 2: [_entry(5), _entry(6)]}
    assert divergence(entries) is None  # rank 1 kept entry 4, the others lost it: not "never issued"
    for r in (0, 1):
        entries[r].append(dict(_entry(1, sizes=((2,),) if r == 1 else ((3,),)), process_group=sub))
    d = divergence(entries)
    assert d.group == tuple(sub) and d.seq == 1 and d.kind == "sizes" and not d.decided  # 1 against 1


def _uneven_a2a_then_fine(rank, world_size, short):
    import torch
    import torch.distributed as dist
    out = torch.full((2 * world_size,), -1.0)
    splits = [1] + [2] * (world_size - 1) if (short and rank == 1) else [2] * world_size
    dist.all_to_all_single(out, torch.ones(sum(splits)), [2] * world_size, splits)
    return out.tolist()


@pytest.mark.slow
def test_a_call_that_returned_with_diverged_entries_raises_and_the_next_call_is_judged_alone():
    with pytest.raises(collnb.RankError, match=r"^rank 1: CollectiveMismatch: its collective_seq_id \d+ in the "
                       r"default group differs") as info:
        collnb.launch(_uneven_a2a_then_fine, 3, (True,), flight_recorder=50, debug=False)
    assert info.value.rank == 1 and info.value.results[0][2] == 1.0 and info.value.results[0][3] == -1.0
    # the same warm ranks, a correct call: the earlier call's entries are not held against it
    assert collnb.launch(_uneven_a2a_then_fine, 3, (False,), flight_recorder=50, debug=False)[0] == [1.0] * 6


# ------------------------------------------------------------------------------------------------
# The second exercise: fix a step whose ranks hang (exercises.check_hang_fix)

def _ring_step(order: str = "batched", all_reduce_on: str = "every", divide: str = "every", direction: int = 1):
    """A learner's fixed_step: the ring message sent ``order`` ("batched": batch_isend_irecv; "send-first",
    "recv-first": blocking, every rank alike; "alternate": even ranks send first), received from
    ``rank - direction``; the loss all-reduced on ``all_reduce_on`` ranks ("every", "rank0", "none") and
    divided on ``divide`` ranks ("every", "rank0", "none")."""
    import torch
    import torch.distributed as dist

    def fixed_step(rank, world_size, x):
        dst, src = (rank + direction) % world_size, (rank - direction) % world_size
        received = torch.empty_like(x)
        if order == "batched":
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, dst), dist.P2POp(dist.irecv, received, src)]):
                work.wait()
        elif order == "send-first" or (order == "alternate" and rank % 2 == 0):
            dist.send(x, dst=dst)
            dist.recv(received, src=src)
        else:
            dist.recv(received, src=src)
            dist.send(x, dst=dst)
        y = x + received
        loss = (y ** 2).sum()
        if all_reduce_on == "every" or (all_reduce_on == "rank0" and rank == 0):
            dist.all_reduce(loss)
        if divide == "every" or (divide == "rank0" and rank == 0):
            loss = loss / world_size
        return y, loss

    return fixed_step


def _fails(capsys, answer, what: str, hint: str) -> str:
    with pytest.raises(exercises.CheckFailed) as info:
        exercises.check_hang_fix(answer)
    out = capsys.readouterr().out
    assert not re.search(r"^✓ ", out, re.M), out
    return _failed_with(info.value, what, hint)


def _failed_with(failure: exercises.CheckFailed, what: str, hint: str) -> str:
    msg = str(failure)
    assert msg.startswith("✗ ") and what in msg, msg
    assert hint in msg.split("\nHint: ", 1)[1], msg
    return msg


def test_hang_fix_passes_a_paired_ring_and_one_all_reduce_on_every_rank(capsys):
    for order in ("batched", "alternate"):  # both fixes of the ring: posted together, or taken in turns
        exercises.check_hang_fix(_ring_step(order))
        out = capsys.readouterr().out
        assert re.search(r"^✓ no rank hung", out, re.M), out
        assert "isend, irecv, all_reduce" in out or "send, recv, all_reduce" in out


@pytest.mark.slow
def test_hang_fix_says_where_the_ranks_waited_for_each_hang(capsys):
    """The typical wrong answers of notebook 18's second exercise: each hangs (the ranks do not meet within the
    check's 5 s) and the hint names the kind, read from where each rank was. The three answers are checked
    at once (three concurrent checks, each on ranks of its own): their ranks spend the check waiting for the
    5 s to run out, and a loaded machine only lengthens a wait."""
    answers = [(_ring_step("send-first"), "did not meet", "Every rank was waiting in a send"),
               (_ring_step("recv-first"), "did not meet", "Every rank was waiting in a receive"),
               (_ring_step("batched", all_reduce_on="rank0", divide="rank0"), "did not meet",
                "a collective inside an if on the rank")]

    def check(answer):
        with pytest.raises(exercises.CheckFailed) as info:
            exercises.check_hang_fix(answer)
        return info.value

    with concurrent.futures.ThreadPoolExecutor(len(answers)) as checks:
        failures = list(checks.map(check, [answer for answer, _, _ in answers]))
    out = capsys.readouterr().out  # what the three checks printed
    assert not re.search(r"^✓ ", out, re.M), out
    for failure, (_, what, hint) in zip(failures, answers):
        _failed_with(failure, what, hint)


def test_hang_fix_with_a_wrong_value_gets_a_hint_for_it(capsys):
    _fails(capsys, _ring_step(divide="none"), "returned a wrong loss", "divide by world_size, on every rank")
    _fails(capsys, _ring_step(divide="rank0"), "returned a wrong loss", "divide by world_size, on every rank")
    _fails(capsys, _ring_step(all_reduce_on="none"), "exactly one all_reduce", "all_reduce")

    def no_ring(rank, world_size, x):
        import torch.distributed as dist
        loss = (2 * x) ** 2
        loss = loss.sum()
        dist.all_reduce(loss)
        return 2 * x, loss / world_size

    _fails(capsys, no_ring, "returned a wrong y", "received nothing")


def test_hang_fix_receiving_from_the_wrong_neighbour_or_gathering_fails(capsys):
    msg = _fails(capsys, _ring_step(direction=-1), "", "")
    assert "returned a wrong y" in msg or "did not meet" not in msg  # at world size 2 both neighbours are one

    def gathered(rank, world_size, x):
        import torch
        import torch.distributed as dist
        every = [torch.empty_like(x) for _ in range(world_size)]
        dist.all_gather(every, x)
        y = x + every[(rank - 1) % world_size]
        loss = (y ** 2).sum()
        dist.all_reduce(loss)
        return y, loss / world_size

    _fails(capsys, gathered, "does not allow", "one send and one receive per rank")


def test_hang_hint_reads_where_the_ranks_waited():
    def err(exc_type, outcomes):
        return collnb.RankError("x", 0, exc_type, "", outcomes)

    sent = "RuntimeError: [/x/unbound_buffer.cc:129] Timed out waiting 5000ms for send operation to complete"
    assert ex_hangs.hang_hint(err("RuntimeError", {0: sent, 1: sent + " (follows the root cause)"})).startswith(
        "Every rank was waiting in a send")
    got = "RuntimeError: [/x/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to complete"
    assert ex_hangs.hang_hint(err("RuntimeError", {0: got, 1: got})).startswith("Every rank was waiting in a receive")
    hint = ex_hangs.hang_hint(err("DidNotJoin", {0: "RuntimeError: Ranks 1 failed to pass monitoredBarrier", 1: "finished"}))
    assert hint.startswith("Rank(s) [1] had already returned while rank(s) [0] waited")
    closed = "RuntimeError: [/x/pair.cc:553] Connection closed by peer [127.0.0.1]:27567."
    assert ex_hangs.hang_hint(err("RuntimeError", {0: closed, 1: sent, 2: sent})).startswith(
        "Every rank was waiting in a send")  # a rank whose peer gave up first says nothing of its own
    assert ex_hangs.hang_hint(err("RuntimeError", {0: sent, 1: got})) is None   # mixed: the check's own direction
