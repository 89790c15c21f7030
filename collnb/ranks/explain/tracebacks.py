"""Rank tracebacks: the learner's frames only, shown the way Python and IPython show them.

A rank sends its exception's frames as plain tuples ``(filename, lineno, name, line)``; the
launcher drops its own frames (everything up to its call of the learner's function, and collnb's
wrappers of torch.distributed), fills source lines from the parent's ``linecache`` (IPython
registers notebook cells there) and names cells as IPython does (``Cell In[7]``). A rank still
running when a call fails says where it is through :mod:`faulthandler` (:func:`parse_stack`).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import time
import traceback
from types import TracebackType
from typing import Sequence

import torch

from ...i18n import _
from ..protocol import Frame

__all__ = ["wait_for_stacks", "frames_of", "user_frames", "format_frames", "ipython_cells", "named_cells", "where", "waiting_in_collective",
           "parse_stack",
           "is_comm_error", "RANK_FILE"]

_RANKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The file whose call of the learner's function ends collnb's frames on a rank (local or engine).
RANK_FILE = os.path.join(_RANKS, "call", "steps.py")
_HOOKS_FILE = os.path.join(_RANKS, "instrument", "_dist_hooks.py")
_RECORDER_FILE = os.path.join(_RANKS, "instrument", "recording.py")
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_FAULT_LINE = re.compile(r'File "(.*)", line (\d+) in (\S+)')

_COMM_MARKERS = ("Connection closed by peer", "Connection reset", "Broken pipe", "Timed out",
                 "timed out", "Timeout", "ECONNRESET", "EPIPE", "failed to pass monitoredBarrier",
                 "Socket Timeout", "connection refused", "Connection refused",
                 "Application timeout caused pair closure")  # gloo: an earlier timeout closed the group


def is_comm_error(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.distributed reporting a lost or late peer (a consequence of some
    other rank's failure), as opposed to an error of the rank's own code. Only exceptions raised
    inside torch count: a learner's own ``TimeoutError("timed out ...")`` is a root cause."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_TORCH_DIR):
        return False
    if {c.__name__ for c in type(exc).__mro__} & {"DistNetworkError", "DistStoreError"}:
        return True
    return any(m in str(exc) for m in _COMM_MARKERS)


def _in_torch_distributed(frames: Sequence[Frame]) -> list[Frame]:
    return [f for f in frames if os.path.abspath(f[0]).startswith(_TORCH_DIR) and f[0].endswith("distributed_c10d.py")]


def waiting_in_collective(frames: Sequence[Frame] | None) -> bool:
    """Whether a stack waits inside a ``torch.distributed`` call (a collective or a send/recv)."""
    return bool(frames) and bool(_in_torch_distributed(frames or []))


def where(frames: Sequence[Frame] | None) -> str:
    """One line saying where a stack is, in the language spoken: the collective it waits in and the
    user's frame (:func:`waiting_in_collective` tells the two kinds apart)."""
    if not frames:
        return ""
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
    in_torch = _in_torch_distributed(frames)
    at = user[-1] if user else frames[-1]
    place = f'File "{at[0]}", line {at[1]}, in {at[2]}'
    if in_torch:
        return _("waiting in {call}, called from {place}").format(call=in_torch[-1][2], place=place)
    return _("at {place}").format(place=place)


def frames_of(tb: TracebackType | None, entry: str = RANK_FILE) -> list[Frame]:
    """The traceback's frames as plain tuples, without the launcher's own frames."""
    return user_frames([(f.filename, f.lineno or 0, f.name, f.line) for f in traceback.extract_tb(tb)], entry)


def user_frames(frames: Sequence[Frame], entry: str = RANK_FILE) -> list[Frame]:
    """Drop every frame up to the launcher's call of the user's function (outermost first), the
    frames of collnb's wrappers of torch.distributed (the learner called torch, not us), and the
    recorder's frame with the dispatch machinery below it (``launch(..., record_calls=True)``:
    the stack then ends where it would without recording, in torch's function).
    A forked rank's stack still holds the parent's frames that forked it."""
    mine = [i for i, f in enumerate(frames) if os.path.abspath(f[0]) == entry]
    frames = list(frames[mine[-1] + 1:] if mine else frames)
    recorder = [i for i, f in enumerate(frames) if os.path.abspath(f[0]) == _RECORDER_FILE]
    if recorder:
        end = recorder[0]
        while end > 0 and _dispatch_machinery(frames[end - 1][0]):  # torch's wrapper of dispatch modes
            end -= 1
        frames = frames[:end]
    return [f for f in frames if os.path.abspath(f[0]) != _HOOKS_FILE]


def _dispatch_machinery(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) and not path.startswith(os.path.join(_TORCH_DIR, "distributed"))


def format_frames(frames: Sequence[Frame]) -> str:
    """Format frames as Python does, filling source lines from this process's linecache
    (IPython registers notebook cells there, so a rank's traceback shows the cell's code)."""
    filled = [(filename, lineno, name, line or linecache.getline(filename, lineno).strip())
              for filename, lineno, name, line in frames]
    return "".join(traceback.StackSummary.from_list(named_cells(filled)).format())


def named_cells(frames: Sequence[Frame], cells: dict[str, int] | None = None) -> list[Frame]:
    """``frames`` (tuples whose first item is a filename) with each notebook cell's filename named
    the way IPython names it, ``"Cell In[7]"`` (``cells``: :func:`ipython_cells`, read when ``None``)."""
    cells = ipython_cells() if cells is None else cells
    if not cells:
        return list(frames)
    return [(f"Cell In[{cells[f[0]]}]", f[1], f[2], f[3]) if f[0] in cells else f for f in frames]


def ipython_cells() -> dict[str, int]:
    """``{filename: execution count}`` of the cells IPython compiled, or ``{}`` outside IPython."""
    try:
        ip = sys.modules["IPython"].get_ipython()
        return dict(ip.compile._filename_map)
    except Exception:  # noqa: BLE001 - not IPython, or an IPython without this map: no cells to name
        return {}


def wait_for_stacks(paths: Sequence[str], seconds: float = 2.0) -> None:
    """Wait until each file of ``paths`` holds a whole stack that a rank's :mod:`faulthandler` was
    just asked for (SIGUSR1): non-empty and no longer growing over 50 ms, or ``seconds`` have passed.
    (A fixed 0.2 s was too short on a loaded machine: every waiting rank "did not say where it was".)"""
    end = time.monotonic() + seconds
    sizes: dict[str, int] = {}
    while time.monotonic() < end:
        time.sleep(0.05)
        done = True
        for path in paths:
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            if not size or sizes.get(path) != size:
                done = False
            sizes[path] = size
        if done:
            return


def parse_stack(text: str, entry: str = RANK_FILE) -> list[Frame]:
    """The frames of a :mod:`faulthandler` dump (``File "x.py", line 3 in f`` lines, innermost
    first) as ``[(filename, lineno, name, None)]``, outermost first, without the launcher's."""
    frames: list[Frame] = [(m.group(1), int(m.group(2)), m.group(3), None) for m in _FAULT_LINE.finditer(text)]
    frames.reverse()
    return user_frames(frames, entry)
