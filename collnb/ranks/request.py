"""A launch request checked once, where it enters: every argument of :func:`collnb.launch` (or of
an entry point's launch options) against the rank set that will run it, before any rank starts.

:func:`check_plan` checks where and how (world size, backend, seconds, flags, start method; a
:class:`.rankset.LaunchPlan`), :func:`check_call` the function and its arguments (a
:class:`.rankset.LaunchRequest`); what they return goes down whole, so nothing below checks again.
:func:`check_launch_options` checks the names an entry point passes through as ``**launch_kwargs``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, cast

from ..i18n import _
from ..vocabulary import Backend, check_backend, check_world_size
from .call.steps import current_rank
from .instrument.interface import Instruments
from .rankset import BackendFacts, LaunchPlan, LaunchRequest, RankSet, RankSetup

__all__ = ["LaunchOptions", "check_launch_options", "check_plan", "check_call", "check_ranks", "check_flag",
           "check_call_arguments"]


class LaunchOptions(TypedDict, total=False):
    """The :func:`collnb.launch` options that collnb's entry points pass through as ``**launch_kwargs``
    (:func:`collnb.run`, :func:`collnb.backend_support`, the explorer...): seconds, the DETAIL
    check and the start method, as :func:`collnb.launch` documents them."""

    timeout: float
    collective_timeout: float
    debug: bool
    start_method: str | None


def check_launch_options(options: Mapping[str, object], where: str) -> LaunchOptions:
    """``options`` as :class:`LaunchOptions`, checked by name before anything is launched.

    ``where`` is the entry point that was given them (``"collnb.run"``) and is named in the error.
    The values are checked with the rest of the request (:func:`check_plan`). This check stops a
    mistyped option from being dropped (an entry point that has a cached answer never launches) or
    from surfacing later as Python's ``launch() got an unexpected keyword argument``.

    Raises:
        TypeError: a name that is not a field of :class:`LaunchOptions`. The message names it and
            lists the options that are passed on.
    """
    unknown = sorted(set(options) - set(LaunchOptions.__annotations__))
    if unknown:
        raise TypeError(_("{where}() got unknown launch options {names}; the options it passes on to "
                          "collnb.launch are {valid}").format(
                              where=where, names=", ".join(map(repr, unknown)),
                              valid=", ".join(LaunchOptions.__annotations__)))
    return cast(LaunchOptions, dict(options))


def check_ranks(rank_set: RankSet, world_size: object, backend: object = "gloo") -> BackendFacts:
    """Check that ``world_size`` ranks of ``backend`` can run on ``rank_set`` and return its
    :func:`.launcher.backend_info` dict (``limit`` left out).

    Raises:
        TypeError / ValueError: an unknown backend (:func:`collnb.vocabulary.check_backend`), a world
            size that is not an int from 1 to :data:`collnb.vocabulary.MAX_WORLD_SIZE`, or above what
            the backend can run there, saying why (NCCL: one rank per visible GPU; engines: one rank
            per engine).
        RuntimeError: the backend cannot run there at all (e.g. NCCL without CUDA), with the reason.
    """
    return _checked_ranks(rank_set, world_size, backend)[2]


def _checked_ranks(rank_set: RankSet, world_size: object, backend: object) -> tuple[int, Backend, BackendFacts]:
    """:func:`check_ranks`, returning ``(world_size, backend, facts)`` checked."""
    name = check_backend(backend)
    info = dict(rank_set.backend_info(name))
    limit = info.pop("limit", "")
    if info["available"]:
        return check_world_size(world_size, info["max_world_size"], why=limit), name, info
    check_world_size(world_size)  # a wrong world size is named before the backend that cannot run
    raise RuntimeError(_("backend {backend} cannot run {where}: {reason}").format(
        backend=repr(name), where=_(rank_set.where), reason=info["reason"]))


def check_plan(rank_set: RankSet, world_size: object, backend: object = "gloo", timeout: object = 60.0,
               collective_timeout: object = 5.0, debug: object = True, start_method: object = None, *,
               record_calls: object = False, show_backend_log: object = False, timeline: object = False,
               flight_recorder: object = 0) -> LaunchPlan:
    """Check where and how a launch runs (every argument as :func:`collnb.launch` documents it) on
    ``rank_set``, before any rank starts; returns the :class:`.rankset.LaunchPlan` as the rank set
    runs it (:meth:`.rankset.RankSet.accept`: its own start method when ``start_method`` is ``None``).

    Raises:
        RuntimeError: called inside a rank (ranks cannot start ranks); the backend cannot run on
            ``rank_set``; or ``rank_set`` cannot make this request (local ranks: forked NCCL ranks
            after CUDA was initialised here).
        TypeError / ValueError: a bad world size or backend (:func:`check_ranks`), a flag that is not
            a bool, seconds that are not positive and finite, a ``start_method`` other than
            ``"fork"``/``"spawn"``, a ``flight_recorder`` that is not an int >= 0.
        NotImplementedError: an option ``rank_set`` cannot honour (engines: ``start_method``).
    """
    if current_rank() is not None:
        raise RuntimeError(_(
            "collnb.launch was called inside rank {rank} of a launch: ranks cannot start ranks of "
            "their own (each would leave a pool behind). The function already runs in a process group: use "
            "it (dist.new_group(ranks) for a subgroup), or call collnb.launch from the notebook").format(
                rank=current_rank()))
    size, name, facts = _checked_ranks(rank_set, world_size, backend)
    for flag_name, flag in (("debug", debug), ("record_calls", record_calls),
                            ("show_backend_log", show_backend_log), ("timeline", timeline)):
        check_flag(flag_name, flag)
    if isinstance(flight_recorder, bool) or not isinstance(flight_recorder, int) or flight_recorder < 0:
        raise ValueError(_("flight_recorder must be a number of entries >= 0 (e.g. 200; 0: torch's own default, "
                           "entries not read); got {value}").format(value=repr(flight_recorder)))
    seconds = _check_seconds(timeout=timeout, collective_timeout=collective_timeout)
    if start_method is not None and start_method not in ("fork", "spawn"):
        raise ValueError(_("start_method must be 'fork' or 'spawn' (ranks must be children of this "
                           "process, which forkserver's are not); got {value}").format(value=repr(start_method)))
    setup = RankSetup(name, bool(debug), seconds["collective_timeout"], start_method, int(flight_recorder))
    instruments = Instruments(record_calls=bool(record_calls), timeline=bool(timeline),
                              flight_recorder=setup.flight_recorder > 0, show_backend_log=bool(show_backend_log))
    plan = LaunchPlan(size, seconds["timeout"], setup, instruments, rank_set, facts)
    return rank_set.accept(plan)


def check_call(plan: LaunchPlan, fn: object, args: object = (), kwargs: object = None) -> LaunchRequest:
    """The :class:`.rankset.LaunchRequest` of ``fn(rank, world_size, *args, **kwargs)`` run as
    ``plan`` says.

    Raises:
        TypeError: ``fn`` is not callable or cannot be called so (:func:`_check_signature`), or bad
            ``args``/``kwargs`` (:func:`check_call_arguments`).
    """
    if not callable(fn):
        raise TypeError(_("fn must be a function fn(rank, world_size, *args); got {type} {value}").format(
            type=type(fn).__name__, value=repr(fn)))
    check_call_arguments(args, kwargs)
    arguments = tuple(cast(Sequence[Any], args))
    keywords = dict(cast("dict[str, Any] | None", kwargs) or {})
    _check_signature(fn, arguments, keywords)
    return LaunchRequest(fn, arguments, keywords, plan)


def _check_seconds(**values: object) -> dict[str, float]:
    """Each keyword's value as float seconds, checked positive and finite (ValueError otherwise)."""
    out = {}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise ValueError(_("{name} must be a positive, finite number of seconds; got {value}").format(
                name=name, value=repr(value)))
        out[name] = float(value)
    return out


def check_flag(name: str, value: object) -> bool:
    """Check a yes/no argument (``debug``, ``record_calls``...) and return it.

    Raises:
        TypeError: not a bool: ``"debug must be True or False; got 'no'"`` (a string such as
            ``"no"`` would otherwise count as true).
    """
    if not isinstance(value, bool):
        raise TypeError(_("{name} must be True or False; got {value}").format(name=name, value=repr(value)))
    return value


def check_call_arguments(args: object, kwargs: object) -> None:
    """Check ``launch``'s ``args`` (a tuple or list of the extra arguments) and ``kwargs`` (a dict
    with str keys, or ``None``).

    Raises:
        TypeError: ``args`` is not a tuple or list (``args="abc"`` would become three arguments:
            pass ``args=("abc",)``), or ``kwargs`` is not a dict of str keys.
    """
    if not isinstance(args, (tuple, list)):
        raise TypeError(_("args must be a tuple (or list) of the extra arguments, e.g. args=({value},) for one; "
                          "got the {type} {value}").format(value=repr(args), type=type(args).__name__))
    if kwargs is not None and (not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs)):
        raise TypeError(_("kwargs must be a dict of keyword arguments (str keys) or None; got {value}").format(
            value=repr(kwargs)))


def _check_signature(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Check that ``fn(rank, world_size, *args, **kwargs)`` binds (TypeError saying how to
    define ``fn`` if not); functions without a signature (some builtins) pass."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: let the rank report it
        return
    try:
        sig.bind(0, 1, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(_("fn cannot be called as fn(rank, world_size, *args, **kwargs) with {n} extra "
                          "argument(s) and keywords {keywords}: {error}. Define it as def {name}(rank, "
                          "world_size, ...)").format(n=len(args), keywords=sorted(kwargs), error=exc,
                                                     name=getattr(fn, "__name__", "fn"))) from None
