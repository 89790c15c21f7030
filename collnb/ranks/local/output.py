"""Rank output in the launching cell: each line a rank prints appears as it is printed, prefixed
``[rank r]``; the backend's C++ log lines are held back for the error.

A rank's fds 1 and 2 are pipes to the launcher (so output of C/C++ code and of processes the
rank starts arrives too). :class:`OutputRelay` reads them without blocking, writes whole lines to
this process's ``sys.stdout`` / ``sys.stderr`` (a notebook cell), and keeps the lines torch's,
gloo's and NCCL's C++ code logs on stderr (``[E1130 ... ProcessGroupGloo.cpp:2901] ...``: they
repeat what the launcher reports as one clear error) in its :class:`..instrument.backend_log.BackendLog`,
unless asked to show them.

A line that grows without a newline (a progress bar, ``print(..., end="")`` in a loop) is passed
on in pieces of at most :data:`PIECE_BYTES` (cut between UTF-8 characters) as they arrive, never held
whole: the launcher's memory stays bounded however much a rank writes. The pieces of one line are
written one after another behind one ``[rank r]`` prefix; another rank's output in between ends
the line there, and its rest follows behind a new prefix.

What reaches the cell is bounded too: of each rank's stdout and of its stderr, one call shows at
most :data:`SHOWN_BYTES`; the rest is counted, not written, and when the call's output is drained one
line says how much was cut (a rank that prints 512 MiB would otherwise grow the kernel and the
notebook by as much). The rank's last lines (quoted when it dies) are kept whatever was cut.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from multiprocessing.connection import Connection, wait as _mp_wait
from typing import Protocol, cast

from ...i18n import _
from ..instrument.backend_log import BackendLog

__all__ = ["OutputRelay", "PIECE_BYTES", "READ_BYTES", "LAST_LINE_CHARS", "SHOWN_BYTES"]

#: The most bytes of an unfinished line held before they are passed on as a piece.
PIECE_BYTES = 64 * 1024
#: The most bytes one read of a rank's pipe takes (a piece is at most PIECE_BYTES plus one read).
READ_BYTES = 64 * 1024
#: The most bytes (UTF-8) of one rank's stdout, and of its stderr, written to the cell in one call.
SHOWN_BYTES = 4 * 1024 * 1024
#: The most characters of one line kept among a rank's last words (:attr:`OutputRelay` ``r.last``).
LAST_LINE_CHARS = 500

class _Readable(Protocol):
    """A pipe end the relay reads: ``multiprocessing.connection.Connection`` or a file."""

    def fileno(self) -> int: ...


class _RelayedRank(Protocol):
    """What :class:`OutputRelay` needs of a rank (see its docstring); ``last``, ``report`` and
    ``closed`` are optional and read with ``getattr``."""

    rank: int

    @property
    def out_r(self) -> _Readable: ...  # read-only: a rank's pipe may be any _Readable (a Connection)
    @property
    def err_r(self) -> _Readable: ...
    partial: dict[int, bytearray]


class _Ending(Protocol):
    @property
    def exitcode(self) -> int | None: ...


class _SettlingRank(_RelayedRank, Protocol):
    """A rank :meth:`OutputRelay.settle` waits on: a :class:`_RelayedRank` with its process and the
    streams whose pipe reached its end."""

    @property
    def proc(self) -> _Ending: ...
    closed: set[int]


class OutputRelay:
    """Copies the ranks' output lines into this process's streams.

    Attributes:
        backend_log: the current call's :class:`..instrument.backend_log.BackendLog`: the C++ log
            lines held (or let through: ``launch(..., show_backend_log=True)``).

    A rank here is any object with ``rank``, ``out_r``, ``err_r`` (non-blocking pipe ends),
    ``partial`` (``{1: bytearray, 2: bytearray}``, the unfinished line of each, at most
    :data:`PIECE_BYTES` plus one read); optionally ``last`` (a ``collections.deque``: the rank's
    last lines, each cut to :data:`LAST_LINE_CHARS`, quoted when it dies), ``report`` (a list: the
    first lines of a crash report, ``Fatal Python error: ...``, that faulthandler wrote) and
    ``closed`` (a set: the fds, 1 or 2, whose pipe reached its end).
    """

    def __init__(self) -> None:
        self.backend_log = BackendLog()
        # the rank whose unfinished line each stream ends with
        self._open: dict[int, _RelayedRank | None] = {1: None, 2: None}
        # (id(rank), fd) -> the open line is held (True) or shown (False)
        self._pieces: dict[tuple[int, int], bool] = {}
        # (rank number, fd) -> bytes shown in this call, and bytes cut once SHOWN_BYTES was reached
        self._shown: dict[tuple[int, int], int] = {}
        self._cut: dict[tuple[int, int], int] = {}

    def start_call(self, show_backend_log: bool) -> None:
        """Begin a call: forget held lines; show or hold the C++ log lines of this call."""
        self.backend_log = BackendLog(show_backend_log)
        self._open, self._pieces = {1: None, 2: None}, {}  # the last call ended every line (drain)
        self._shown, self._cut = {}, {}

    def pump(self, r: _RelayedRank, conn: _Readable, final: bool = False) -> None:
        """Copy what is waiting on ``conn`` (``r.out_r`` or ``r.err_r``): whole lines, and an
        unfinished line in pieces once it holds :data:`PIECE_BYTES`; with ``final`` also the rest
        of an unfinished line, ended there."""
        fd_kind = 1 if conn is r.out_r else 2
        while True:
            try:
                data = os.read(conn.fileno(), READ_BYTES)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            closed: set[int] | None = getattr(r, "closed", None)
            if data == b"" and closed is not None:
                closed.add(fd_kind)
            if not data:
                break
            pending = r.partial[fd_kind]
            end = data.rfind(b"\n")
            if end < 0:  # no line ends yet: collect, and pass long ones on in pieces
                pending += data
                if len(pending) >= PIECE_BYTES:
                    cut = _utf8_boundary(pending)
                    self._emit(r, fd_kind, [bytes(pending[:cut])], ended=False)
                    del pending[:cut]
                continue
            pending += data[:end]
            self._emit(r, fd_kind, bytes(pending).split(b"\n"))
            r.partial[fd_kind] = bytearray(data[end + 1:])
        if final and (r.partial[fd_kind] or (id(r), fd_kind) in self._pieces):
            self._emit(r, fd_kind, [bytes(r.partial[fd_kind])])
            r.partial[fd_kind] = bytearray()

    def _emit(self, r: _RelayedRank, fd_kind: int, lines: list[bytes], ended: bool = True) -> None:
        """Write ``lines`` (bytes, without their newline) of rank ``r``; the last one is a piece of
        an unfinished line unless ``ended``."""
        if not lines:
            return
        stream = sys.stdout if fd_kind == 1 else sys.stderr
        out: list[str] = []
        last: deque[str] | None = getattr(r, "last", None)
        for i, line in enumerate(lines):
            finished = ended or i < len(lines) - 1
            key = (id(r), fd_kind)
            held = self._pieces.pop(key, None)  # a piece of this line went out already: same decision
            first = held is None
            text = line.decode("utf-8", "replace")
            if held is None:
                held = False
                if fd_kind == 2:
                    # torch's / gloo's C++ log lines ("[rank0]:[E1130 ... ProcessGroupGloo.cpp:2901] ...")
                    # repeat what the launcher reports as one clear error: keep them for the error
                    held = self.backend_log.keeps(r.rank, line)
            if held:
                if first:
                    self.backend_log.keep(r.rank, text[:PIECE_BYTES])
            else:
                budget = (r.rank, fd_kind)
                size = len(line) + finished
                shown = self._shown.get(budget, 0)
                if shown + size > SHOWN_BYTES:  # this call showed enough of this stream: count, do not write
                    self._cut[budget] = self._cut.get(budget, 0) + size
                else:
                    self._shown[budget] = shown + size
                    owner = self._open[fd_kind]
                    if owner is not None and owner is not r:  # another rank's unfinished line: end it here
                        out.append("\n")
                        owner = None
                    out.append(("" if owner is r else f"[rank {r.rank}] ") + text + ("\n" if finished else ""))
                    self._open[fd_kind] = None if finished else r
            if last is not None and first:
                last.append(text[:LAST_LINE_CHARS])
                report: list[str] | None = getattr(r, "report", None)  # a crash report (faulthandler's): its first lines
                if report is not None:
                    if text.startswith("Fatal Python error"):
                        report[:] = [text[:LAST_LINE_CHARS]]
                    elif report and (last.maxlen is None or len(report) < last.maxlen):
                        report.append(text[:LAST_LINE_CHARS])
            if not finished:
                self._pieces[key] = held
        if out:
            stream.write("".join(out))
            stream.flush()

    def release(self) -> None:
        """Write the held C++ log lines to stderr (a call that ended without an error to attach
        them to, or was interrupted) and forget them."""
        self.backend_log.release()

    def settle(self, ranks: Sequence[_SettlingRank], until: float, quiet: float = 0.1) -> None:
        """After a failure, keep copying the ranks' output until none has come for ``quiet`` seconds
        or the clock (monotonic, s) passes ``until``: a backend logs its error (gloo's ``[E...
        ProcessGroupGloo.cpp]`` line) from its own thread, which can write after the rank's
        :class:`.Failed` has arrived, and the ranks are stopped right after."""
        conns = [c for r in ranks for k, c in ((1, r.out_r), (2, r.err_r)) if k not in r.closed]
        owner = {id(r.out_r): r for r in ranks} | {id(r.err_r): r for r in ranks}
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return
            # wait() takes any object with fileno() and returns some of those it was given
            ready = cast(list[_Readable], _mp_wait(cast("list[Connection]", conns), timeout=min(quiet, left)))
            if not ready:
                return
            for conn in ready:
                r = owner[id(conn)]
                self.pump(r, conn)
                if r.proc.exitcode is not None or (1 if conn is r.out_r else 2) in r.closed:
                    conns.remove(conn)  # a dead rank's pipe stays readable (EOF): done with it

    def drain(self, ranks: Iterable[_RelayedRank], final: bool = True) -> None:
        """Copy what every rank of ``ranks`` has written so far (see :meth:`pump`); with ``final``,
        then say, per rank and stream, how much output was cut (:data:`SHOWN_BYTES`)."""
        for r in ranks:
            self.pump(r, r.out_r, final)
            self.pump(r, r.err_r, final)
        if final:
            self.report_cut()

    def report_cut(self) -> None:
        """Write one line per rank and stream whose output this call cut, and forget the counts."""
        for (rank, fd_kind), cut in sorted(self._cut.items()):
            stream = sys.stdout if fd_kind == 1 else sys.stderr
            if self._open[fd_kind] is not None:
                stream.write("\n")
                self._open[fd_kind] = None
            stream.write("[rank {rank}] ".format(rank=rank) + _(
                "… {mib:.1f} MiB more of {stream} cut: collnb shows at most {limit} MiB of each rank's {stream} "
                "per call; write large output to a file").format(
                    mib=cut / 2 ** 20, stream="stdout" if fd_kind == 1 else "stderr", limit=SHOWN_BYTES >> 20) + "\n")
            stream.flush()
        self._cut = {}


def _utf8_boundary(data: bytes | bytearray) -> int:
    """The length of the longest prefix of ``data`` (bytes) that ends between UTF-8 characters."""
    n = len(data)
    i = n - 1
    while i >= 0 and n - i < 4 and data[i] & 0xC0 == 0x80:  # continuation bytes of the last character
        i -= 1
    if i < 0:
        return n
    lead = data[i]
    size = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
    return i if i + size > n else n
