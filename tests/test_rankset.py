"""The rank-set interface (collnb.ranks.rankset): the launcher's explicit choice of local ranks,
engines or another kind, the request checked once and handed down whole, the per-rank event stream
every rank set yields, and the parts of the local pool's wait (collnb.ranks.local.answers), each on
its own."""

import dataclasses
import multiprocessing as mp
import os
import time

import pytest

import collnb
from collnb.ranks import Instruments, RankSetup, launcher
from collnb.ranks.explain.failures import ending_of
from collnb.ranks.explain.tracebacks import named_cells
from collnb.ranks.instrument.timeouts import TimeoutReport
from collnb.ranks.local import answers
from collnb.ranks.local.output import OutputRelay
from collnb.ranks.local.rankset import LOCAL
from collnb.ranks.protocol import Failed, Ready, Result, send
from collnb.ranks.rankset import EventKind, LaunchPlan, LaunchRequest, RankExit, RankFailure, RankOutput, RankResult
from collnb.ranks.remote import connection as remote


def _fn(rank, world_size, *args):
    return rank


class _Recorder:
    """A rank set that records the requests it is given (a third kind beside local ranks and engines)."""

    where = "on the recorder"

    def __init__(self, refuse=None):
        self.requests, self.refused = [], refuse

    def backend_info(self, backend):
        return dict(backend=backend, available=True, max_world_size=3, reason="", limit="the recorder has 3 ranks")

    def accept(self, plan):
        if self.refused and getattr(plan.instruments, self.refused):
            raise NotImplementedError(f"{self.refused} refused by the recorder")
        return dataclasses.replace(plan, instruments=dataclasses.replace(plan.instruments, relay_fds=True))

    def launch(self, request):
        self.requests.append(request)
        return [request.plan.world_size] * request.plan.world_size


@pytest.fixture
def recorder():
    rs = _Recorder(refuse="timeline")
    launcher.use_rank_set(rs)
    try:
        yield rs
    finally:
        launcher.use_rank_set(None)


def test_launch_hands_the_checked_request_to_the_active_rank_set(recorder):
    assert collnb.launch(_fn, 2, args=[1], timeout=3, show_backend_log=True, flight_recorder=7) == [2, 2]
    (req,) = recorder.requests
    assert req == LaunchRequest(_fn, (1,), {}, LaunchPlan(2, 3.0, RankSetup("gloo", True, 5.0, None, 7), Instruments(
        flight_recorder=True, show_backend_log=True, relay_fds=True), recorder))  # as the rank set accepted it
    assert req.plan.rank_set is recorder and req.plan.facts["max_world_size"] == 3
    assert collnb.backend_info("gloo")["max_world_size"] == 3
    with pytest.raises(ValueError, match="the recorder has 3 ranks"):  # the world size checked by the rank set's facts
        collnb.launch(_fn, 4)
    with pytest.raises(NotImplementedError, match="timeline refused by the recorder"):
        collnb.launch(_fn, 2, timeline=True)
    with pytest.raises(TypeError, match="show_backend_log must be True or False"):
        collnb.launch(_fn, 2, show_backend_log="yes")
    assert len(recorder.requests) == 1


def test_an_entry_point_plans_once_and_the_plan_goes_down_whole(recorder):
    """collnb.run's way: the options and the world size are checked by plan_launch, the function by
    launch_planned, and the rank set gets the very plan that was checked."""
    plan = collnb.ranks.plan_launch(2, "gloo", {"timeout": 4, "debug": False}, where="collnb.run")
    assert (plan.world_size, plan.timeout, plan.setup.debug, plan.rank_set) == (2, 4.0, False, recorder)
    assert collnb.ranks.launch_planned(plan, _fn, (1,)) == [2, 2]
    assert recorder.requests[0].plan is plan
    with pytest.raises(TypeError, match=r"collnb.run\(\) got unknown launch options 'timeuot'"):
        collnb.ranks.plan_launch(2, "gloo", {"timeuot": 4}, where="collnb.run")
    with pytest.raises(TypeError, match="fn must be a function"):
        collnb.ranks.launch_planned(plan, "not a function")


def test_disconnecting_restores_the_local_rank_set(recorder):
    assert launcher.active_rank_set() is recorder
    launcher.use_rank_set(None)
    assert launcher.active_rank_set() is LOCAL
    assert LOCAL.where == "here"


def _engines(hosts):
    engines = object.__new__(remote.Engines)  # accept() reads what connect() learnt of the engines only
    engines.infos = [dict(host=h) for h in hosts]
    return engines


def test_engines_run_every_instrument_and_refuse_only_a_start_method():
    plan = LaunchPlan(2, 60.0, RankSetup(), Instruments(record_calls=True, timeline=True, flight_recorder=True,
                                                        show_backend_log=True), None)
    accepted = _engines(["a", "a"]).accept(plan)
    assert accepted.instruments == dataclasses.replace(plan.instruments, relay_fds=True)  # one host: one clock
    assert _engines(["a", "b"]).accept(plan).instruments.align_clocks  # two hosts: aligned at a barrier
    with pytest.raises(NotImplementedError, match="start_method='spawn' is not supported on ipyparallel engines "
                                                  r"\(ipyparallel started the engines.*\); collnb.disconnect\(\)"):
        _engines(["a"]).accept(dataclasses.replace(plan, setup=RankSetup(start_method="spawn")))


def test_ending_of_reads_each_answer():
    ok = ending_of(RankResult(1, 2.0, b"x", seq=4, intact=False), 1.5)
    assert (ok.rank, ok.kind, ok.t, ok.value, ok.seq, ok.intact) == (1, "ok", 2.0, b"x", 4, False)
    assert ending_of(RankResult(0, 1.0, seconds=0.25), 1.5).value == 0.25
    died = ending_of(RankExit(2, 3.0, -9, "lost"), 1.5)
    assert (died.kind, died.value, died.message) == ("died", -9, "lost")
    report = TimeoutReport("collective_timeout (1.5 s)", 1.5, 1.52, True, "", "measured")
    err = ending_of(RankFailure(3, 4.0, Failed("DistBackendError", "boom", [], comm=True, timeout=report)), 1.5)
    assert (err.kind, err.exc_type, err.comm, err.timeout_name) == ("error", "DistBackendError", True,
                                                                    "collective_timeout (1.5 s)")
    with pytest.raises(TypeError, match="RankResult, RankFailure, RankExit"):
        ending_of(RankOutput(0, 1.0, "stdout", ("hi",)), 1.5)
    assert [e.kind for e in (RankOutput(0, 0, "stdout", ()), RankResult(0, 0), RankFailure(0, 0, None),
                             RankExit(0, 0))] == [EventKind.OUTPUT, EventKind.RESULT, EventKind.FAILURE, EventKind.EXIT]


class _Proc:
    def __init__(self, sentinel, exitcode=None, alive=True):
        self.pid, self.sentinel, self.exitcode, self.alive = 100 + sentinel, sentinel, exitcode, alive

    def is_alive(self):
        return self.alive

    def join(self, timeout=None):
        pass


def _rank(rank, proc=None):
    cmd_r, cmd_w = mp.Pipe(duplex=False)
    res_r, res_w = mp.Pipe(duplex=False)
    out_r, _ = mp.Pipe(duplex=False)
    err_r, _ = mp.Pipe(duplex=False)
    return answers.RankProcess(rank, proc or _Proc(1000 + rank), cmd_w, res_r, out_r, err_r), res_w


def test_waitables_wait_on_pending_answers_and_every_open_output_pipe():
    (a, _), (b, _) = _rank(0), _rank(1)
    b.lost_at, a.closed = 1.0, {2}
    got = answers.waitables([a, b], [b])
    assert got == [b.proc.sentinel, a.out_r, b.out_r, b.err_r]  # b's closed result pipe is not waited on


def test_exited_names_ranks_waitpid_saw_end():
    (a, _), (b, _), (c, _) = _rank(0, _Proc(7, exitcode=-9)), _rank(1, _Proc(8)), _rank(2, _Proc(9, exitcode=0))
    assert answers.exited([a, b, c], [9]) == [7]  # c's sentinel is ready already, b still runs


def test_answer_event_reads_each_message_kind():
    r, w = _rank(0)
    send(w, Result(b"payload", seq=3, intact=True))
    e = answers.answer_event(r, "res", 5.0)
    assert e == RankResult(0, 5.0, b"payload", seq=3, intact=True) and r.unsettled
    send(w, Ready(0.5))
    assert answers.answer_event(r, "res", 6.0) == RankResult(0, 6.0, seconds=0.5)
    fail = Failed("ValueError", "boom", [("f.py", 1, "f", "")])
    send(w, fail)
    assert answers.answer_event(r, "res", 7.0) == RankFailure(0, 7.0, fail)
    w.close()  # the pipe's end from a live rank: not an answer yet, the rank counts as lost
    assert answers.answer_event(r, "res", 8.0) is None and r.lost_at == 8.0
    r.proc.alive, r.proc.exitcode = False, -11
    assert answers.answer_event(r, "dead", 9.0) == RankExit(0, 9.0, -11)


class _DyingProc(_Proc):
    """A process whose descriptors are closed while waitpid still says it runs, for its first ``looks``."""

    def __init__(self, looks):
        super().__init__(1, exitcode=None)
        self.looks = looks

    def is_alive(self):
        self.looks -= 1
        if self.looks < 0:
            self.alive, self.exitcode = False, -6
        return self.alive


def test_a_rank_dying_as_its_pipe_ends_is_an_exit_not_a_closed_pipe():
    r, w = _rank(0, _DyingProc(looks=3))
    w.close()
    assert answers.answer_event(r, "res", 8.0) == RankExit(0, 8.0, -6) and r.lost_at is None
    r, w = _rank(1, _DyingProc(looks=10 ** 6))  # lives on: it closed its pipe
    w.close()
    t0 = time.monotonic()
    assert answers.answer_event(r, "res", 8.0) is None and r.lost_at == 8.0
    assert time.monotonic() - t0 >= answers.DYING_S


def test_lost_ranks_end_after_the_grace():
    (a, _), (b, _) = _rank(0), _rank(1)
    a.lost_at = 10.0
    assert answers.lost([a, b], 10.0 + answers.LOST_GRACE / 2) == []
    assert answers.lost([a, b], 10.0 + answers.LOST_GRACE + 0.01) == [RankExit(0, 10.0 + answers.LOST_GRACE + 0.01)]


def test_wait_limit():
    assert answers.wait_limit(0.0, 10.0, None, 0.5) == 0.25
    assert answers.wait_limit(0.0, 0.1, None, 0.5) == pytest.approx(0.1)
    assert answers.wait_limit(1.0, 10.0, 0.6, 0.5) == pytest.approx(0.1)  # the grace window's end
    assert answers.wait_limit(2.0, 1.0, None, 0.5) == 0.0


def test_group_verdict():
    ok = [RankResult(0, 0, b"", seq=5), RankResult(1, 0, b"", seq=5)]
    assert answers.group_verdict(ok) == "keep"
    assert answers.group_verdict([ok[0], RankResult(1, 0, b"", seq=6)]) == "retire"
    assert answers.group_verdict([ok[0], RankResult(1, 0, b"", seq=6, intact=False)]) == "reinit"


class _LiveProc(_Proc):
    """A rank process that runs until told: its sentinel is a real pipe's end that reads EOF when it ends."""

    def __init__(self):
        self._r, self._w = os.pipe()
        super().__init__(self._r)

    def end(self, exitcode):
        self.alive, self.exitcode = False, exitcode
        os.close(self._w)


def test_gather_returns_every_answer_in_arrival_order_and_copies_output(capfd):
    (a, wa), (b, wb) = _rank(0, _LiveProc()), _rank(1, _LiveProc())
    out_r, out_w = mp.Pipe(duplex=False)
    os.set_blocking(out_r.fileno(), False)  # as the pool's output pipes are
    b.out_r = out_r
    os.write(out_w.fileno(), b"hello from 1\nand an unfinished line")
    send(wb, Result(b"p1", seq=4, intact=True))
    send(wa, Result(b"p0", seq=4, intact=True))
    got = answers.gather([a, b], time.monotonic() + 10, OutputRelay())
    assert set(got.events) == {0, 1} and got.verdict == "keep"
    assert got.events[0] == RankResult(0, got.events[0].t, b"p0", seq=4, intact=True)
    assert capfd.readouterr().out == "[rank 1] hello from 1\n[rank 1] and an unfinished line\n"  # drained to the end
    send(wa, Result(b"p0", seq=4, intact=True))
    send(wb, Result(b"p1", seq=5, intact=True))  # rank 1 issued one operation more
    assert answers.gather([a, b], time.monotonic() + 10, OutputRelay()).verdict == "retire"


def test_gather_after_a_failure_waits_the_grace_then_stops_with_no_verdict():
    (a, wa), (b, _) = _rank(0, _LiveProc()), _rank(1, _LiveProc())
    fail = Failed("ValueError", "boom", [("f.py", 1, "f", "")])
    send(wa, fail)
    t0 = time.monotonic()
    got = answers.gather([a, b], t0 + 30, OutputRelay(), grace=0.3)
    assert got.events == {0: RankFailure(0, got.events[0].t, fail)} and got.verdict is None  # rank 1 never answered
    assert 0.3 <= time.monotonic() - t0 < 10  # the grace, not the deadline
    b.proc.end(-9)
    got = answers.gather([b], time.monotonic() + 30, OutputRelay())
    assert got.events == {1: RankExit(1, got.events[1].t, -9)} and got.verdict is None


def _payload(value):
    from collnb.ranks.serialization import dumps
    return dumps(value)


def test_conclude_reads_the_answers_into_results_or_the_error():
    from collnb.ranks.errors import LaunchTimeout, RankError
    from collnb.ranks.explain.failures import conclude
    ok = {1: RankResult(1, 2.0, _payload([2, 3])), 0: RankResult(0, 1.0, _payload("zero"))}
    assert conclude([0, 1], ok, 5.0, "run", {}) == ["zero", [2, 3]]  # rank order, whatever the arrival order
    ready = {0: RankResult(0, 1.0, seconds=0.1), 1: RankResult(1, 1.0, seconds=0.2)}
    assert conclude([0, 1], ready, 5.0, "init", {}) == []
    with pytest.raises(LaunchTimeout) as timeout:
        conclude([0, 1], {0: ok[0]}, 5.0, "run", {("state", 1): "did not say where it was"})
    assert timeout.value.pending == [1] and "timed out during run: rank(s) 1 had not finished" in str(timeout.value)
    (r1, _) = _rank(1)
    r1.last.extend(["Traceback (most recent call last):", "OSError: [Errno 28] No space left on device"])
    died = {0: ok[0], 1: RankExit(1, 3.0, 1)}
    with pytest.raises(RankError) as err:
        conclude([0, 1], died, 5.0, "run", {}, {1: r1})
    head = str(err.value).split("\n\n")
    assert err.value.rank == 1 and head[1] == ("Last output (rank 1):\n  Traceback (most recent call last):\n"
                                               "  OSError: [Errno 28] No space left on device")
    assert err.value.rank_traceback.endswith("No space left on device")
    with pytest.raises(RankError) as bare:
        conclude([0, 1], died, 5.0, "run", {})  # engines: no witnesses, no last words
    assert "Last output" not in str(bare.value) and bare.value.rank == 1


def test_named_cells_names_cells_as_ipython_does():
    frames = [("/tmp/ipykernel_1/123.py", 3, "f", "x"), ("lib.py", 9, "g", "")]
    assert named_cells(frames, {"/tmp/ipykernel_1/123.py": 7}) == [("Cell In[7]", 3, "f", "x"), ("lib.py", 9, "g", "")]
    assert named_cells(frames, {}) == frames


def test_a_warm_call_goes_through_the_event_stream():
    """The real pool: every rank's answer is one RankResult of the stream, in the time the call took,
    and the groups are kept (the ranks issued the same operations)."""
    pool = collnb.ranks.RankPool(RankSetup(debug=False))
    try:
        t0 = time.monotonic()
        pool._prepare(2, t0 + 60)
        pool._send_all(pool.ranks[:2], _run_message(pool))
        got = answers.gather(pool.ranks[:2], t0 + 60, pool.output)
        assert sorted(got.events) == [0, 1] and all(isinstance(e, RankResult) for e in got.events.values())
        assert all(got.events[r].rank == r and t0 <= got.events[r].t <= time.monotonic() for r in (0, 1))
        assert got.verdict == "keep"
    finally:
        pool.close()


def _run_message(pool):
    from collnb.ranks.protocol import Run, encode
    from collnb.ranks.serialization import code_files, dumps
    return encode(Run(2, pool._next_count(), dumps((_fn, (), {}, code_files(_fn)))))


def test_fd_relay_copies_what_c_code_writes_into_the_python_streams(capsys):
    """What an engine does while a call runs: fds 1 and 2 (C and C++ code, gloo's log) copied into
    sys.stdout/sys.stderr, whole lines, an unfinished last line ended; the fds are as before after."""
    from collnb.ranks.instrument.backend_log import FdRelay
    before = (os.fstat(1).st_ino, os.fstat(2).st_ino)
    relay = FdRelay()
    relay.start()
    os.write(2, b"[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] failed\nframe #0: c10::Error\n")
    os.write(1, b"from C\nno newline")
    relay.stop()
    assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before
    out, err = capsys.readouterr()
    assert out == "from C\nno newline\n"
    assert err == "[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] failed\nframe #0: c10::Error\n"


def test_backend_log_keeps_log_lines_and_their_frames_per_rank():
    from collnb.ranks.instrument.backend_log import BackendLog
    log = BackendLog()
    lines = [(0, b"[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] failed"), (1, b"frame #0: not after a log line"),
             (0, b"frame #0: c10::Error"), (0, b"Traceback (most recent call last):")]
    kept = [log.keeps(r, line) for r, line in lines]
    assert kept == [True, False, True, False]
    assert not BackendLog(show=True).keeps(0, lines[0][1])
