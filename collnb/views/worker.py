"""One background worker for every widget that runs ranks: the latest request wins, the kernel stays
responsive.

A widget callback (a slider moved, a dropdown changed) calls :meth:`LatestWorker.submit` and returns
at once; the work runs on one background thread per widget. While a request runs, newer ones only
overwrite a one-slot mailbox, so a fast drag runs at most one stale request and then the latest
values (no queue). The task can ask :meth:`LatestWorker.stale` before drawing to skip a result that
newer values already replace. The thread ends when the mailbox is empty and starts again with the
next request. ipywidgets sends a widget's new value from any thread, so the task updates the widgets.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

from ..i18n import _

__all__ = ["LatestWorker", "WorkerState"]

#: What a request is (an explorer's: its parameters and when they were asked for).
T = TypeVar("T")


class LatestWorker(Generic[T]):
    """Runs ``task(request)`` for the newest request, one at a time, on a background thread.

    Args:
        task: called with each request that is still the latest when the thread takes it.
        name: the thread's name (tests count threads by it).
        on_error: called as ``on_error(exc, request)`` when ``task`` raises (the worker carries on);
            default: the exception is dropped.

    Attributes:
        requests: how many requests were submitted (int).
        started, finished: how many tasks began / ended (int).
    """

    def __init__(self, task: Callable[[T], None], name: str,
                 on_error: Callable[[BaseException, T], None] | None = None) -> None:
        self._task, self._name, self._on_error = task, name, on_error
        self._cv = threading.Condition()
        self._mailbox: list[T] = []  # the one request waiting, if any
        self._thread: threading.Thread | None = None
        self._in_flight = 0
        self._closed = False
        self.requests = 0
        self.started = 0
        self.finished = 0

    # -- state ---------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Tasks running now: 0 or 1."""
        return self._in_flight

    @property
    def pending(self) -> bool:
        """Whether a newer request waits for the running task to finish."""
        return bool(self._mailbox)

    @property
    def busy(self) -> bool:
        """A task is running or a request is waiting."""
        return self._in_flight > 0 or bool(self._mailbox)

    @property
    def closed(self) -> bool:
        return self._closed

    def stale(self) -> bool:
        """Whether the running task's result is already replaced (a newer request waits) or unwanted
        (the worker is closed): the task should not draw it."""
        return bool(self._mailbox) or self._closed

    # -- use -----------------------------------------------------------------------------------
    def submit(self, request: T) -> None:
        """Make ``request`` the one to run next, replacing any waiting request; returns at once.
        Does nothing once the worker is closed."""
        with self._cv:
            if self._closed:
                return
            self._mailbox = [request]
            self.requests += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def wait(self, timeout: float = 120.0) -> None:
        """Block until no task runs and none waits.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._in_flight or self._mailbox:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(_("still running after {timeout} s").format(timeout=timeout))
                self._cv.wait(min(left, 0.5))

    def close(self, timeout: float = 30.0) -> None:
        """Drop the waiting request and wait (up to ``timeout`` s) for the running task to end."""
        with self._cv:
            self._closed = True
            self._mailbox = []
            thread = self._thread
            self._cv.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                if not self._mailbox or self._closed:
                    self._thread = None
                    self._cv.notify_all()
                    return
                request = self._mailbox.pop()
                self._in_flight += 1
                self.started += 1
            try:
                self._task(request)
            except BaseException as exc:  # noqa: BLE001 - never let the worker die silently
                if self._on_error is not None:
                    try:
                        self._on_error(exc, request)
                    except Exception:  # noqa: BLE001
                        pass
            finally:
                with self._cv:
                    self._in_flight -= 1
                    self.finished += 1
                    self._cv.notify_all()


class WorkerState(Generic[T]):
    """What a widget that runs ranks through ``self._worker`` (a :class:`LatestWorker` of requests
    ``T``) tells about its runs; the explorers inherit it so that they answer alike."""

    _worker: LatestWorker[T]

    @property
    def in_flight(self) -> int:
        """Runs executing now: 0 or 1."""
        return self._worker.in_flight

    @property
    def pending(self) -> bool:
        """Whether newer values wait for the run in flight to finish."""
        return self._worker.pending

    @property
    def busy(self) -> bool:
        """A run is in flight or waiting."""
        return self._worker.busy

    @property
    def requests(self) -> int:
        """How many changes asked for a run."""
        return self._worker.requests

    @property
    def runs_started(self) -> int:
        """Runs that began (a superseded request never begins)."""
        return self._worker.started

    @property
    def runs_finished(self) -> int:
        """Runs that ended, with a result or an error."""
        return self._worker.finished
