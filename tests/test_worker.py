"""The views' shared worker (collnb.views.worker.LatestWorker): latest request wins, submit returns
before the work ends, errors go to the handler and the worker carries on. Stub tasks, no ranks."""

import threading

import pytest

from collnb.views.worker import LatestWorker


def test_submit_returns_before_the_work_ends_and_an_older_request_is_dropped():
    release = threading.Event()
    entered = threading.Event()
    ran = []

    def task(request):
        ran.append(request)
        entered.set()
        if request == "first":
            assert release.wait(30)

    w = LatestWorker(task, "test-worker")
    w.submit("first")
    assert entered.wait(30)
    # the first task is blocked: the callbacks below must still return at once
    assert w.in_flight == 1 and not release.is_set()
    for request in ("older", "old", "latest"):
        w.submit(request)  # returns while "first" still runs
    assert w.pending and w.busy and w.in_flight == 1 and ran == ["first"]
    assert w.stale()  # the running task can tell that newer values wait
    release.set()
    w.wait(30)
    assert ran == ["first", "latest"]  # "older" and "old" were replaced, never run
    assert (w.requests, w.started, w.finished) == (4, 2, 2)
    assert not w.busy and not w.stale()


def test_one_thread_that_ends_when_idle_and_restarts():
    names = []
    w = LatestWorker(lambda r: names.append(threading.current_thread().name), "test-worker-2")
    w.submit(1)
    w.wait(30)
    for t in threading.enumerate():
        if t.name == "test-worker-2":
            t.join(5)
    assert not [t for t in threading.enumerate() if t.name == "test-worker-2"]
    w.submit(2)
    w.wait(30)
    assert names == ["test-worker-2", "test-worker-2"]


def test_errors_go_to_the_handler_and_the_worker_carries_on():
    seen = []

    def task(request):
        if request == "bad":
            raise ValueError("no such thing")
        seen.append(request)

    w = LatestWorker(task, "test-worker-3", on_error=lambda exc, req: seen.append((type(exc), str(exc), req)))
    w.submit("bad")
    w.wait(30)
    w.submit("good")
    w.wait(30)
    assert seen == [(ValueError, "no such thing", "bad"), "good"]


def test_close_drops_the_waiting_request_and_ignores_later_ones():
    release = threading.Event()
    entered = threading.Event()
    ran = []

    def task(request):
        ran.append(request)
        entered.set()
        assert release.wait(30)

    w = LatestWorker(task, "test-worker-4")
    w.submit("running")
    assert entered.wait(30)
    w.submit("waiting")
    closer = threading.Thread(target=w.close)
    closer.start()
    release.set()
    closer.join(30)
    w.submit("after close")
    w.wait(30)
    assert ran == ["running"] and w.closed and w.stale()


def test_wait_times_out_while_busy():
    release = threading.Event()
    w = LatestWorker(lambda r: release.wait(30), "test-worker-5")
    w.submit(1)
    with pytest.raises(TimeoutError):
        w.wait(0.05)
    release.set()
    w.wait(30)
