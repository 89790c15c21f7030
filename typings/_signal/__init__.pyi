# Types for the one function of CPython's _signal (the C module under the standard signal module)
# that collnb uses (collnb/ranks/rank_state.py); typeshed has no stub for it. signal.getsignal wraps
# it and turns its ints into signal.Handlers: _signal's own gives SIG_DFL and SIG_IGN as the ints 0
# and 1, a Python handler as it was installed, and None where the handler was not installed from
# Python (signal.getsignal's documentation).
from types import FrameType
from typing import Any, Callable

def getsignal(signalnum: int, /) -> Callable[[int, FrameType | None], Any] | int | None: ...
