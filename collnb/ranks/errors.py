"""The errors a launch raises: :class:`LaunchError` and its two kinds, :class:`RankError` (a rank
failed) and :class:`LaunchTimeout` (the call ran out of time).

Each keeps its fields through ``pickle`` (``pickle.loads(pickle.dumps(err))`` has the same message
and the same attributes), like torch's own ``ProcessRaisedException``, so an error can cross a
process boundary (an ipyparallel engine, a ``multiprocessing`` worker, a saved result).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LaunchError", "RankError", "LaunchTimeout"]


class LaunchError(RuntimeError):
    """A launch failed: a rank failed, the launch timed out, or it was interrupted."""


class RankError(LaunchError):
    """A rank failed. The message starts with ``"rank R: ExcType: message"``.

    Attributes:
        rank: the root-cause rank (int); ``None`` when no single rank is to blame: ranks called
            mismatched collectives and no rank differs from all the others (the message then
            starts ``"ranks 0 and 1: ..."`` and ``mismatch`` says who called what).
        exc_type: the name of that rank's exception type (str), e.g. ``"ValueError"``,
            ``"SystemExit"``, ``"Killed"`` (died from a signal), ``"Exited"`` (``os._exit``).
        rank_traceback: that rank's own traceback as text (str; empty when it died without one).
        outcomes: ``{rank: str}`` what happened to every rank.
        mismatch: ``{collective fingerprint (str): [ranks]}`` when the debug check found ranks
            calling different collectives (op, shapes, dtypes), else ``None``.
        backend_log: the lines the backend's C++ code logged during the call (list of str,
            ``"[rank r] ..."``), kept out of the cell unless ``launch(..., show_backend_log=True)``.
        results: only when every rank returned but their Flight Recorders disagree: the ranks' results
            (list, rank order).
        divergence: then also the :class:`.flight_recorder.Divergence` found.
        summary: the message without the tracebacks and the per-rank outcomes (str): the first
            line and collnb's explanation, in the language collnb speaks. Read this (or ``rank``,
            ``exc_type``, ``guess``) rather than parsing ``str(err)``, whose words are translated.
        guess: collnb's note that its blame is a guess (str), or ``None`` when the blame is not one
            (a rank raised by itself, or the Flight Recorder named the rank).
    """

    results: list[Any]  # set only by failures.returned_diverged
    divergence: Any     # likewise: a flight_recorder.Divergence

    def __init__(self, message: str, rank: int | None, exc_type: str, rank_traceback: str,
                 outcomes: dict[int, str]) -> None:
        super().__init__(message)
        self.rank = rank
        self.exc_type = exc_type
        self.rank_traceback = rank_traceback
        self.outcomes = outcomes
        self.mismatch: dict[str, list[int]] | None = None
        self.backend_log: list[str] = []
        self.summary: str = message.splitlines()[0] if message else ""
        self.guess: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # BaseException's own __reduce__ would call RankError(message) and fail: rebuild from the
        # constructor's arguments, then restore every attribute (mismatch, backend_log, ...).
        return (type(self), (self.args[0], self.rank, self.exc_type, self.rank_traceback, self.outcomes),
                self.__dict__)

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of the launcher's own frames: the learner sees their code.
        return str(self).splitlines()


class LaunchTimeout(LaunchError):
    """The launch ran past ``timeout`` seconds.

    Attributes:
        pending: ranks (list of int) that had not finished.
        outcomes: ``{rank: str}`` what happened to every rank.
        backend_log: the lines the backend's C++ code logged (see :class:`RankError`).
    """

    def __init__(self, message: str, pending: list[int], outcomes: dict[int, str]) -> None:
        super().__init__(message)
        self.pending = pending
        self.outcomes = outcomes
        self.backend_log: list[str] = []

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.args[0], self.pending, self.outcomes), self.__dict__

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()
