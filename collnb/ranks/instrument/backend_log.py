"""The backend's C++ log lines: told apart from a rank's own output, kept for the error a learner
reads (``launch(..., show_backend_log=True)`` prints them as they come).

torch's, gloo's and NCCL's C++ code logs on the rank's stderr (fd 2): ``[rank0]:[E1130 21:54:26.310
ProcessGroupGloo.cpp:2901] ...``, gloo's ``[.../pair.cc:598] Connection closed by peer``, NCCL's
``host:1234:1240 [0] NCCL WARN ...``. Those lines repeat what the launcher reports as one clear
error, so by default a rank set keeps them out of the cell (:class:`BackendLog`) and attaches them to
the error (:func:`attach`: ``err.backend_log``, its message says how many), or prints them after a
call that succeeded.

A rank set reads them where it reads a rank's output: local ranks' fds 1 and 2 are pipes to the
launcher (:mod:`..local.output`); a rank whose fds the launcher does not read (an ipyparallel engine,
whose output reaches the kernel through its ``sys.stdout``/``sys.stderr``) copies fds 1 and 2 into
``sys.stdout``/``sys.stderr`` while a call runs (:class:`FdRelay`, asked for by
:attr:`.interface.Instruments.relay_fds`), so C and C++ output reaches the launcher there too.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import TextIO

from ...i18n import _
from ..errors import LaunchTimeout, RankError

#: The most bytes of an unfinished line :class:`FdRelay` holds before it passes them on.
_PIECE = 64 * 1024

__all__ = ["is_log_line", "continues_log", "BackendLog", "attach", "FdRelay"]

# c10's C++ log line: "[rank0]:[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] message"
# (glog style: severity I/W/E/F, month+day, time, optional thread id, file:line)
# gloo's own: "[/path/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4242";
# NCCL's: "host:1234:1240 [0] NCCL WARN ..." / "NCCL INFO ...".
_CPP_LOG = re.compile(rb"^(?:(?:\[rank\d+\]:)?\[[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?(?: +\d+)? [^\]\s]+:\d+\]"
                      rb"|\[[^\]\s]+\.(?:cc|cpp|cu|h):\d+\] "
                      rb"|\S+:\d+:\d+ \[\d+\] NCCL (?:WARN|INFO|ERROR|TRACE) )")
# the lines that follow one (a C++ exception's frames: "frame #3: ...", "Exception raised from ...")
_CPP_LOG_MORE = re.compile(rb"^(?:frame #\d+:|Exception raised from |\s)")


def is_log_line(line: bytes) -> bool:
    """Whether ``line`` (one stderr line, bytes, without its newline) starts a C++ log line."""
    return _CPP_LOG.match(line) is not None


def continues_log(line: bytes) -> bool:
    """Whether ``line``, right after a C++ log line, belongs to it (a frame of its C++ stack)."""
    return _CPP_LOG_MORE.match(line) is not None


class BackendLog:
    """The C++ log lines of one call's ranks, kept (or, with ``show``, let through).

    Attributes:
        show: ``launch(..., show_backend_log=...)``: let the lines through to the cell as they come.
        lines: the kept lines, each ``"[rank r] ..."`` (str), in the order they came.
    """

    def __init__(self, show: bool = False) -> None:
        self.show = bool(show)
        self.lines: list[str] = []
        self._in_log: set[int] = set()  # ranks whose last stderr line was a kept log line

    def keeps(self, rank: int, line: bytes) -> bool:
        """Whether rank ``rank``'s stderr line ``line`` (bytes, no newline) is kept here (not shown);
        kept lines are added to :attr:`lines`. A line of a rank's stdout is never a log line."""
        if self.show:
            return False
        kept = is_log_line(line) or (rank in self._in_log and continues_log(line))
        if kept:
            self._in_log.add(rank)
        else:
            self._in_log.discard(rank)
        return kept

    def keep(self, rank: int, text: str) -> None:
        """Add rank ``rank``'s line ``text`` to :attr:`lines` (:meth:`keeps` said it is one)."""
        self.lines.append(f"[rank {rank}] {text}")

    def take(self) -> list[str]:
        """The kept lines, forgotten here."""
        lines, self.lines = self.lines, []
        return lines

    def release(self, stream: TextIO | None = None) -> None:
        """Print the kept lines to ``stream`` (``sys.stderr``): a call that ended without an error
        to attach them to, or was interrupted; then forget them."""
        if self.lines:
            out = stream or sys.stderr
            out.write("".join(line + "\n" for line in self.lines))
            out.flush()
        self.lines = []


def attach(exc: RankError | LaunchTimeout, lines: list[str], backend: str) -> None:
    """Attach the kept C++ log ``lines`` to ``exc`` (a :class:`..errors.RankError` or :class:`..errors.LaunchTimeout`)
    as ``exc.backend_log`` and say in its message how many there are and how to see them."""
    exc.backend_log = lines
    if not lines:
        return
    n = len(lines)
    # two messages, not ngettext: tools/catalogues.py's compiled_matches cannot compare plural entries
    note = "\n\n" + (_(
        "({n} line logged by {backend}'s C++ code kept out of the output: print(*err.backend_log, "
        "sep='\\n') shows them; launch(..., show_backend_log=True) prints them as they come)") if n == 1 else _(
        "({n} lines logged by {backend}'s C++ code kept out of the output: print(*err.backend_log, "
        "sep='\\n') shows them; launch(..., show_backend_log=True) prints them as they come)")).format(
        n=n, backend=backend)
    exc.args = (exc.args[0] + note,) + exc.args[1:]


class FdRelay:
    """Copy what this process writes to fds 1 and 2 (C and C++ code, processes it starts) into
    ``sys.stdout`` / ``sys.stderr`` while a call runs, line by line, as it comes: on a rank whose
    fds the launcher does not read (an ipyparallel engine, whose ``sys.stdout``/``sys.stderr`` reach
    the kernel), so that the backend's C++ log lines reach the launcher there too.

    :meth:`start` points fds 1 and 2 at pipes read by a thread each; :meth:`stop` points them back
    and ends the threads once the pipes are drained (a process the call started that still holds
    them keeps its thread, which ends when that process closes them)."""

    def __init__(self) -> None:
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Point fds 1 and 2 at pipes whose lines go to ``sys.stdout`` / ``sys.stderr``."""
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            for s in (sys.stdout, sys.stderr):
                try:
                    s.flush()
                except Exception:  # noqa: BLE001 - a stream that cannot flush has nothing buffered to lose
                    pass
            r, w = os.pipe()
            self._saved[fd] = os.dup(fd)
            os.dup2(w, fd)
            os.close(w)
            thread = threading.Thread(target=_copy_lines, args=(r, stream), name=f"collnb-fd{fd}-relay", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, wait: float = 1.0) -> None:
        """Point fds 1 and 2 back where they were; wait up to ``wait`` seconds for the threads to
        copy what is left."""
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # the pipe's last writer here is gone: its thread reads to the end
            os.close(saved)
        self._saved = {}
        for thread in self._threads:
            thread.join(wait)
        self._threads = []


def _copy_lines(r: int, stream: TextIO) -> None:
    """Copy the pipe ``r`` to ``stream``, whole lines at a time (the rest at the end), until EOF."""
    pending = b""
    try:
        while True:
            data = os.read(r, 65536)
            if not data:
                break
            pending += data
            end = pending.rfind(b"\n")
            if end < 0 and len(pending) >= _PIECE:  # a line without its end so far: pass it on in a piece
                end = len(pending) - 1
            if end >= 0:
                stream.write(pending[:end + 1].decode("utf-8", "replace"))
                stream.flush()
                pending = pending[end + 1:]
        if pending:
            stream.write(pending.decode("utf-8", "replace") + "\n")
            stream.flush()
    except Exception:  # noqa: BLE001 - the stream is gone (the engine shut down): nothing to copy to
        pass
    finally:
        os.close(r)
