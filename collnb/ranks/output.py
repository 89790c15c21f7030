"""Rank output in the launching cell: each line a rank prints appears as it is printed, prefixed
``[rank r]``; the backend's C++ log lines are held back for the error.

A rank's fds 1 and 2 are pipes to the launcher (so output of C/C++ code and of processes the
rank starts arrives too). :class:`OutputRelay` reads them without blocking, writes whole lines to
this process's ``sys.stdout`` / ``sys.stderr`` (a notebook cell), and keeps the lines torch's,
gloo's and NCCL's C++ code logs on stderr (``[E1130 ... ProcessGroupGloo.cpp:2901] ...``: they
repeat what the launcher reports as one clear error) in :attr:`OutputRelay.backend_log`, unless
asked to show them.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["OutputRelay"]

# c10's C++ log line: "[rank0]:[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] message"
# (glog style: severity I/W/E/F, month+day, time, optional thread id, file:line)
# gloo's own: "[/path/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4242";
# NCCL's: "host:1234:1240 [0] NCCL WARN ..." / "NCCL INFO ...".
_CPP_LOG = re.compile(rb"^(?:(?:\[rank\d+\]:)?\[[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?(?: +\d+)? [^\]\s]+:\d+\]"
                      rb"|\[[^\]\s]+\.(?:cc|cpp|cu|h):\d+\] "
                      rb"|\S+:\d+:\d+ \[\d+\] NCCL (?:WARN|INFO|ERROR|TRACE) )")
_CPP_LOG_MORE = re.compile(rb"^(?:frame #\d+:|Exception raised from |\s)")


class OutputRelay:
    """Copies the ranks' output lines into this process's streams.

    Attributes:
        show_backend_log: print the backend's C++ log lines as they come (else hold them).
        backend_log: the C++ log lines held during the current call (list of str, ``"[rank r] ..."``).

    A rank here is any object with ``rank``, ``out_r``, ``err_r`` (non-blocking pipe ends),
    ``partial`` (``{1: bytearray, 2: bytearray}``, the unfinished line of each) and ``in_log``
    (bool: its last stderr line was a C++ log line, whose continuation lines follow).
    """

    def __init__(self):
        self.show_backend_log = False
        self.backend_log = []

    def start_call(self, show_backend_log: bool):
        """Begin a call: forget held lines; show or hold the C++ log lines of this call."""
        self.show_backend_log, self.backend_log = bool(show_backend_log), []

    def take_backend_log(self) -> list:
        """The held C++ log lines (list of str), forgotten here."""
        lines, self.backend_log = self.backend_log, []
        return lines

    def pump(self, r, conn, final=False):
        """Copy the whole lines waiting on ``conn`` (``r.out_r`` or ``r.err_r``); with ``final``
        also an unfinished last line."""
        fd_kind = 1 if conn is r.out_r else 2
        while True:
            try:
                data = os.read(conn.fileno(), 65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if not data:
                break
            pending = r.partial[fd_kind]
            end = data.rfind(b"\n")
            if end < 0:  # no line ends yet: keep collecting (linear, however long the line)
                pending += data
                continue
            pending += data[:end]
            self._emit(r, fd_kind, bytes(pending).split(b"\n"))
            r.partial[fd_kind] = bytearray(data[end + 1:])
        if final and r.partial[fd_kind]:
            self._emit(r, fd_kind, [bytes(r.partial[fd_kind])])
            r.partial[fd_kind] = bytearray()

    def _emit(self, r, fd_kind, lines):
        if not lines:
            return
        stream = sys.stdout if fd_kind == 1 else sys.stderr
        shown = [f"[rank {r.rank}] {ln.decode('utf-8', 'replace')}\n" for ln in lines]
        if fd_kind == 2 and not self.show_backend_log:
            # torch's / gloo's C++ log lines ("[rank0]:[E1130 ... ProcessGroupGloo.cpp:2901] ...")
            # repeat what the launcher reports as one clear error: keep them for the error
            keep = []
            for line, text in zip(lines, shown):
                held = _CPP_LOG.match(line) is not None or (
                    r.in_log and _CPP_LOG_MORE.match(line) is not None)
                r.in_log = held
                (self.backend_log if held else keep).append(text.rstrip("\n"))
            shown = [t + "\n" for t in keep]
        if shown:
            stream.write("".join(shown))
            stream.flush()

    def release(self):
        """Write the held C++ log lines to stderr (a call that ended without an error to attach
        them to, or was interrupted) and forget them."""
        if self.backend_log:
            sys.stderr.write("".join(line + "\n" for line in self.backend_log))
            sys.stderr.flush()
        self.backend_log = []

    def drain(self, ranks, final=True):
        """Copy what every rank of ``ranks`` has written so far (see :meth:`pump`)."""
        for r in ranks:
            self.pump(r, r.out_r, final)
            self.pump(r, r.err_r, final)
