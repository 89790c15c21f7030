"""Which timeout ended a failed communication call, decided from what collnb set and measured.

:func:`which_timeout` takes the timeouts that applied to the call (``collective_timeout``, a group's
own ``timeout=``, a call's) and how long the call had waited, and picks the one whose value fits
the wait; gloo's text ("... in 1500 ms", "Timed out waiting 1500ms") only breaks a tie or stands
in when nothing was measured (:func:`text_hint`: the one place collnb reads gloo's timeout
wording). The wording says "in 1500 ms" even when the wait ended after 20 ms because a peer closed
its connections (measured with torch 2.13), so the text alone cannot tell.

A rank's wrapper (:mod:`._dist_hooks`) calls :func:`which_timeout` with what it measured; the
launcher's blame (:mod:`..explain.failures`) reads the :class:`TimeoutReport` that made, or asks
:func:`which_timeout` from the text alone where nothing was measured (an engine, a set-up step).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence, Union

__all__ = ["TimeoutReport", "Candidate", "which_timeout", "text_hint", "timeout_name", "collective_timeout_name"]

# gloo's and torch's ways of saying how long a timeout was (torch 2.13; tests/data/gloo_timeouts.json):
# "Timed out waiting 1500ms for recv operation to complete", "Rank 1 failed to pass monitoredBarrier
# in 1500 ms", "Rank 0 timed out in monitoredBarrier after 1500 ms.", NCCL's "Timeout(ms)=1500".
_TIMEOUT_MS = re.compile(r"[Tt]imed out waiting (\d+) ?ms|monitoredBarrier (?:in|after) (\d+) ?ms|Timeout\(ms\)=(\d+)")
# ... and of saying the wait ended because a connection closed (no timeout ran out on this rank)
_PEER_CLOSED = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
_PAIR_CLOSED = "Application timeout caused pair closure"  # gloo: an earlier timeout closed the group's pairs



@dataclass(frozen=True)
class TimeoutReport:
    """What ended a rank's wait in a communication call: the timeout that ran out, chosen from the
    timeouts collnb knows and the wait the rank measured (:func:`.timeouts.which_timeout`).

    Attributes:
        timeout: the timeout, in words: ``"collective_timeout (1.5 s)"``, ``"the timeout=2 s passed
            to new_group"``; when ``fired`` is False, the one that was running; ``""`` when unknown.
        seconds: its value in seconds (``None`` when unknown).
        waited: seconds the call had been waiting when the error surfaced, on the rank's monotonic
            clock (``None``: not measured).
        fired: ``True``: that timeout ran out; ``False``: the wait ended before any timeout could
            (see ``cause``); ``None``: not known.
        cause: when ``fired`` is False, what ended the wait: ``"peer closed"`` (a peer's connection
            closed: its group was destroyed, its process ended, or its own timeout closed it),
            ``"pair closed"`` (an earlier timeout in the same group had closed its connections),
            or ``""``.
        source: what decided: ``"measured"`` (the wait), ``"text"`` (the message's wording, when
            the measurement could not decide), ``""``.
    """

    timeout: str = ""
    seconds: float | None = None
    waited: float | None = None
    fired: bool | None = None
    cause: str = ""
    source: str = ""


def timeout_name(text: str, collective_timeout: float | None) -> str:
    """Which timeout a communication error's message says ran out, in words, read from its wording
    alone (see :func:`which_timeout`); ``""`` when it names none or says a connection closed."""
    report = which_timeout([(collective_timeout, collective_timeout_name(collective_timeout), None)], text)
    return report.timeout if report.fired else ""


def collective_timeout_name(seconds: float | None) -> str:
    """``"collective_timeout (1.5 s)"``: the launch's timeout for every collective, in words."""
    return "collective_timeout" if seconds is None else f"collective_timeout ({seconds:g} s)"


def text_hint(text: str | None) -> tuple[float | None, str]:
    """What a communication error's wording says about its wait: ``(seconds, cause)``. ``seconds``:
    the length of the timeout it names (``None`` when it names none, or when it says a connection
    closed: then the number is the timeout that was running, not one that ran out); ``cause``:
    ``"peer closed"``, ``"pair closed"`` or ``""``. The one place collnb reads gloo's text."""
    text = text or ""
    if any(m in text for m in _PEER_CLOSED):
        return None, "peer closed"
    if _PAIR_CLOSED in text:
        return None, "pair closed"
    m = _TIMEOUT_MS.search(text)
    return (int(next(g for g in m.groups() if g)) / 1000 if m else None), ""


# Matching a measured wait to a timeout of s seconds. It cannot fire before s has passed since the
# call began: gloo starts its clock when the operation starts, after the wrapper read the rank's
# clock (both CLOCK_MONOTONIC). Below s lie only clock reads and a peer that entered a few ms sooner,
# whose own timeout closed the connection first: 1% + 10 ms (measured: 0.993 s for 1 s). It fires
# late by the time a loaded machine takes to wake the waiting thread, raise and unwind, and by what
# ran before the operation in the same call (DETAIL's monitored barrier): over 160 timeouts on real
# ranks, two captures at once on the 2-core machine at load average 5 to 9, at most 0.155 s late,
# 1.17 times the timeout (tests/test_timeout_naming.py captures them). s/2 + 1 s leaves six times
# that; a wait beyond it is still named, by the text or by the longest timeout below it.
def _fits(seconds: float, waited: float) -> bool:
    return _low(seconds) <= waited <= 1.5 * seconds + 1.0


def _low(seconds: float) -> float:
    return 0.99 * seconds - 0.01


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)


#: One timeout that applied to a call: ``(seconds or None, name in words, seconds waited or None)``.
Candidate = tuple[Union[float, None], str, Union[float, None]]


def which_timeout(candidates: Sequence[Candidate], text: str = "", at_most: float | None = None) -> TimeoutReport:
    """Decide which timeout ended a failed communication call.

    Args:
        candidates: the timeouts that applied to the call, ``[(seconds, name, waited)]``:
            ``seconds`` (float or ``None`` when unset), ``name`` in words (``"collective_timeout
            (1.5 s)"``), ``waited`` the seconds measured on that timeout's own clock (since the
            call, or since ``Work.wait``, began; ``None`` when not measured).
        text: the error's message: a hint (:func:`text_hint`) used only when the measurement
            cannot decide (two timeouts fit, or nothing was measured).
        at_most: an upper bound on the wait when no call was measured (seconds since the rank's
            function began): a timeout longer than that cannot have run out.

    Returns:
        a :class:`.TimeoutReport`. The one timeout whose value fits the measured wait
        (``source="measured"``); of several, the one the text names, else the longest (a shorter
        one would have fired first). A wait shorter than every timeout: ``fired=False``, the wait
        ended early (a peer closed). Nothing fits or nothing measured: the timeout the text names
        (``source="text"``); else ``fired=None``.
    """
    hint, cause = text_hint(text)
    cands = [(float(s), n, w) for s, n, w in candidates if s is not None]
    measured = [(s, n, w) for s, n, w in cands if w is not None]
    most = max((c[2] for c in measured), default=None)

    def fired(c: tuple[float, str, float | None], source: str) -> TimeoutReport:
        return TimeoutReport(c[1], c[0], c[2], True, "", source)

    def unset(seconds: float) -> TimeoutReport:  # a timeout collnb did not set (e.g. a learner's ProcessGroup options)
        return TimeoutReport(f"a timeout of {seconds:g} s set in the function (not collective_timeout)",
                             seconds, most, True, "", "text")

    fits = [c for c in measured if _fits(c[0], c[2])]
    if len(fits) == 1:
        return fired(fits[0], "measured")
    if fits:
        named = [c for c in fits if hint is not None and _same(c[0], hint)]
        return fired(named[0], "text") if named else fired(max(fits, key=lambda c: c[0]), "measured")
    bounds = [(c, c[2] if c[2] is not None else at_most) for c in cands]
    known = [(c, b) for c, b in bounds if b is not None]
    if cands and len(known) == len(bounds) and all(b < _low(c[0]) for c, b in known):
        # the wait ended before any timeout collnb set could run out
        longest = max(b for _, b in known)
        if hint is not None and not any(_same(c[0], hint) for c in cands) and longest >= _low(hint):
            return unset(hint)
        first = min(cands, key=lambda c: c[0])
        return TimeoutReport(first[1], first[0], most, False, cause, "measured")
    if cause:
        if cands:
            low = min(cands, key=lambda c: c[0])
            return TimeoutReport(low[1], low[0], most, False, cause, "text")
        return TimeoutReport("", None, most, False, cause, "text")
    if hint is not None:
        said = [c for c in cands if _same(c[0], hint)]
        return fired(said[0], "text") if said else unset(hint)
    below = [c for c in measured if c[2] >= _low(c[0])]
    if below:
        return fired(max(below, key=lambda c: c[0]), "measured")
    return TimeoutReport(waited=most)
