"""The hang lab (issue 23, notebook 18): faults injected on real ranks, torch's Flight Recorder dumped from
every rank (``launch(..., flight_recorder=N)`` starts ranks with ``TORCH_FR_BUFFER_SIZE``), collnb's blame read
from the entries, torch's ``fr_trace`` on the re-keyed gloo dumps, and the culprit exercise."""
import os

import pytest

import collnb
from collnb import exercises
from collnb.labs import hangs


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
    if fault == "wrong_splits":  # silent: no error, rank 0 keeps its fill where rank 2's float is missing
        assert run.error is None
        assert run.results[0][4:6] == [201.0, -1.0]
    else:
        assert isinstance(run.error, collnb.RankError)
    if fault == "sleeping_rank":
        assert run.missing == [culprit]
        assert f"rank {culprit}: DidNotJoin" in str(run.error)


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


def test_culprit_exercise(capsys):
    run = hangs.FaultRun("skipped_collective", 3, 4, "/nonexistent")
    exercises.check_hang_culprit(run, None, None)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "✓" not in out
    with pytest.raises(exercises.CheckFailed, match="rank 1 is not"):
        exercises.check_hang_culprit(run, 1, 3)
    with pytest.raises(exercises.CheckFailed, match="collective 2 is not"):
        exercises.check_hang_culprit(run, 3, 2)
    exercises.check_hang_culprit(run, 3, 3)
    assert "✓ rank 3 diverged at collective_seq_id 3" in capsys.readouterr().out


def test_bad_requests_refused():
    with pytest.raises(ValueError, match="fault must be one of"):
        hangs.fault_run("typo")
    with pytest.raises(ValueError, match="culprit"):
        hangs.fault_run("none", world_size=4, culprit=4)
    with pytest.raises(ValueError, match="world_size must be 4 or 8"):
        hangs.fault_run("none", world_size=3)
