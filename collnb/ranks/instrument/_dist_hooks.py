"""Rank-side wrappers of the public :mod:`torch.distributed` functions: layouts and timeouts.

Inside a rank, :func:`install` replaces each public communication function of
``torch.distributed`` (collectives, their ``*_single`` / ``*_into_tensor`` / ``*_coalesced``
variants, point-to-point ``send``/``recv``/``isend``/``irecv``/``batch_isend_irecv``, the object
collectives, ``barrier``/``monitored_barrier``) and the group constructors with a thin wrapper
that, while active:

* **fixes memory layouts gloo misreads** (``check_layout=True``). Gloo reads a tensor's storage
  as if it were dense: on a strided view ``base[:, 0]`` ``all_reduce`` sums the wrong elements
  and leaves the ranks with different, wrong tensors; a conjugate or negative view (``z.conj()``,
  ``z.conj().imag``) is reduced or sent without its pending sign change; an expanded input
  (stride 0) is scattered as garbage (all measured with torch 2.13's gloo). The wrapper hands
  torch a dense, resolved copy of every such tensor and, for tensors the call writes, copies the
  result back into the learner's view (after ``wait()`` for ``async_op=True``), so values are
  right. An output that cannot hold a result (an expanded view: its elements share memory) is
  refused with a message saying what to pass instead.
* **gives groups the launch's timeout** (``group_timeout`` seconds): a group or device mesh
  the learner's code creates without ``timeout=`` waits ``group_timeout`` for a missing peer
  instead of torch's default of 30 minutes. A communication error raised by a wrapped call (or
  by ``wait()`` on the Work of an ``async_op=True`` call) carries ``collnb_timeout``: a
  :class:`.TimeoutReport` saying which timeout ended the wait (the launch's
  ``collective_timeout``, a ``timeout=`` given to ``new_group`` & co., ``barrier``,
  ``monitored_barrier`` or ``Work.wait``), chosen by :func:`.timeouts.which_timeout` from the wait
  measured on the monotonic clock since the outermost call began.

Recording is not done here: :mod:`.recording` records every operation where torch dispatches it,
whichever API issued it (a wrapper of the module functions would miss ``ProcessGroup`` methods,
functional collectives and DTensor). A wrapper's ``__wrapped__`` is torch's own function, which
the recorder sees like any other.

The functions here are usable on any process that has torch.distributed initialised (e.g. a
remote engine): ``install(...)``, run the learner's code, ``pause()`` or ``uninstall()``.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Final, Literal, ParamSpec, Protocol, TypeAlias, TypedDict, TypeVar, cast

import torch
import torch.distributed as dist

from .._torch_internals import DefaultTimeout, distributed_c10d, has_internal_overlap, patch_default_timeout
from .timeouts import Candidate, collective_timeout_name, which_timeout

__all__ = ["install", "pause", "uninstall", "installed", "LAYOUT_HINT", "completion_observers"]

#: What to do about a tensor whose layout cannot receive a result (also used in error messages).
LAYOUT_HINT = "non-contiguous; call .contiguous() and copy back"


# ----------------------------------------------------------------------------------------------
# What each function takes: argument names whose tensors the call reads (in), writes (out), or
# both (inout); and the group constructors.

_Role = Literal["in", "out", "inout"]
_IN: Final = "in"
_OUT: Final = "out"
_INOUT: Final = "inout"

# ``_all_gather_base`` and ``_reduce_scatter_base`` are torch's deprecated (private) names of
# ``all_gather_into_tensor`` / ``reduce_scatter_tensor``, still called by older code a learner may
# copy; they are wrapped by name like the public functions (nothing else of them is used).
_TENSOR_ARGS: dict[str, dict[str, _Role]] = {
    "broadcast": {"tensor": _INOUT},
    "all_reduce": {"tensor": _INOUT},
    "all_reduce_coalesced": {"tensors": _INOUT},
    "reduce": {"tensor": _INOUT},
    "all_gather": {"tensor_list": _OUT, "tensor": _IN},
    "all_gather_single": {"output_tensor": _OUT, "input_tensor": _IN},
    "all_gather_into_tensor": {"output_tensor": _OUT, "input_tensor": _IN},
    "_all_gather_base": {"output_tensor": _OUT, "input_tensor": _IN},
    "all_gather_coalesced": {"output_tensor_lists": _OUT, "input_tensor_list": _IN},
    "gather": {"tensor": _IN, "gather_list": _OUT},
    "scatter": {"tensor": _OUT, "scatter_list": _IN},
    "reduce_scatter": {"output": _OUT, "input_list": _IN},
    "reduce_scatter_single": {"output": _OUT, "input": _IN},
    "reduce_scatter_tensor": {"output": _OUT, "input": _IN},
    "_reduce_scatter_base": {"output": _OUT, "input": _IN},
    "all_to_all_single": {"output": _OUT, "input": _IN},
    "all_to_all": {"output_tensor_list": _OUT, "input_tensor_list": _IN},
    "send": {"tensor": _IN},
    "isend": {"tensor": _IN},
    "recv": {"tensor": _OUT},
    "irecv": {"tensor": _OUT},
    "barrier": {},
    "monitored_barrier": {},
    "all_gather_object": {},
    "gather_object": {},
    "broadcast_object_list": {},
    "scatter_object_list": {},
    "send_object_list": {},
    "recv_object_list": {},
    "batch_isend_irecv": {},
}
_CONSTRUCTORS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

#: A wrapped call, kept to name the timeout that ends it: (function name, its signature, the
#: positional and keyword arguments as the learner passed them, ``time.monotonic()`` at its start).
_Timing: TypeAlias = tuple[str, inspect.Signature, tuple[Any, ...], dict[str, Any], float]
#: ``(learner's tensor, dense stand-in)`` pairs whose results are copied back.
_Copies: TypeAlias = list[tuple[torch.Tensor, torch.Tensor]]


class _State(TypedDict):
    active: bool
    check_layout: bool
    group_timeout: float | None  # seconds
    since: float | None  # time.monotonic() at install()


class _CompletionObserver(Protocol):
    """What :data:`completion_observers` holds (a rank's :class:`.tracks.Track`)."""

    def completed_between(self, began_ns: int, returned_ns: int, now_ns: int) -> None: ...


_tls = threading.local()      # .depth: >0 while inside a wrapped call on this thread
_lock = threading.Lock()
_state: _State = dict(active=False, check_layout=False, group_timeout=None, since=None)
_originals: dict[str, Callable[..., Any]] = {}  # name -> torch's own function
_wrappers: dict[str, Callable[..., Any]] = {}   # name -> our wrapper
_patched: list[tuple[ModuleType, str, object]] = []  # (module, name, previous value) to undo
_signatures: dict[str, inspect.Signature] = {}
_group_timeouts: dict[dist.ProcessGroup, tuple[float, str]] = {}  # group -> (seconds, phrase naming the timeout the learner gave it)


def installed() -> bool:
    """Whether the wrappers are in place and active."""
    return bool(_patched) and _state["active"]


def install(check_layout: bool = True, group_timeout: float | None = None) -> None:
    """Put the wrappers in place (once per process) and activate them with these options.

    Args:
        check_layout: give gloo dense copies of tensors whose layout it misreads and copy the
            results back (see the module docstring).
        group_timeout: seconds; the timeout of groups created without ``timeout=`` (and of
            ``monitored_barrier`` without one). ``None`` leaves torch's default (30 minutes).
    """
    with _lock:
        if not _patched:
            _patch()
        _state.update(active=True, check_layout=bool(check_layout), group_timeout=group_timeout,  # type: ignore[call-arg]  # mypy's TypedDict.update takes no keywords
                      since=time.monotonic())
        _group_timeouts.clear()


def pause() -> None:
    """Deactivate the wrappers (they stay in place and pass every call straight to torch)."""
    _state["active"] = False


def uninstall() -> None:
    """Deactivate and restore torch's own functions."""
    with _lock:
        _state["active"] = False
        for module, name, previous in reversed(_patched):
            setattr(module, name, previous)
        _patched.clear()
        _group_timeouts.clear()


def _patch() -> None:
    c10d = distributed_c10d
    for name in list(_TENSOR_ARGS) + list(_CONSTRUCTORS):
        orig = getattr(c10d, name, None)
        if orig is None:
            continue
        _originals[name] = orig
        try:
            _signatures[name] = inspect.signature(orig)
        except (TypeError, ValueError):
            continue
        wrapper = _make_constructor(name, orig) if name in _CONSTRUCTORS else _make_wrapper(name, orig)
        _wrappers[name] = wrapper
        for module in (c10d, dist):
            if getattr(module, name, None) is orig:
                _patched.append((module, name, orig))
                setattr(module, name, wrapper)
    # Groups made without timeout= (also inside DeviceMesh / init_device_mesh, new_subgroups,
    # split_group) and monitored_barrier without one take their timeout from here.
    _patched.append(patch_default_timeout(_default_timeout))


def _default_timeout(backend: dist.Backend, previous: DefaultTimeout) -> datetime.timedelta:
    seconds = _state["group_timeout"]
    if _state["active"] and seconds is not None:
        return datetime.timedelta(seconds=seconds)
    return previous(backend)


# ----------------------------------------------------------------------------------------------
# Wrappers


def _enter() -> int:
    depth: int = getattr(_tls, "depth", 0)
    _tls.depth = depth + 1
    if depth == 0:  # the outermost call's start: what a timeout that ends it is measured against
        _tls.since = time.monotonic()
    return depth


def _leave(depth: int) -> None:
    _tls.depth = depth


def _make_wrapper(name: str, orig: Callable[_P, _R]) -> Callable[_P, _R]:
    sig = _signatures[name]
    roles = _TENSOR_ARGS[name]

    @functools.wraps(orig)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not _state["active"] or getattr(_tls, "depth", 0):  # type: ignore[arg-type]  # mypy takes getattr's bool overload from `or`; 0 is the depth's default
            return orig(*args, **kwargs)
        depth = _enter()
        timing: _Timing = (name, sig, args, kwargs, _tls.since)
        began = time.perf_counter_ns() if completion_observers else 0
        try:
            if name == "batch_isend_irecv":  # orig is torch's batch_isend_irecv: it returns list[Work]
                return cast(_R, _spanned([_timed(w, timing) for w in _batch(
                    cast("Callable[..., list[dist.Work]]", orig), args, kwargs)], began))
            if _state["check_layout"] and roles and _any_odd(args, kwargs):
                result = _call_with_dense(orig, name, sig.bind(*args, **kwargs), roles)
            else:
                result = orig(*args, **kwargs)
            return _spanned(_timed(result, timing), began)
        except Exception as exc:
            _name_timeout(exc, *timing)
            raise
        finally:
            _leave(depth)

    return wrapper


def _make_constructor(name: str, orig: Callable[_P, _R]) -> Callable[_P, _R]:
    sig = _signatures[name]

    @functools.wraps(orig)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not _state["active"]:
            return orig(*args, **kwargs)
        depth = _enter()
        try:
            result = orig(*args, **kwargs)
            if depth == 0:
                try:
                    timeout = sig.bind(*args, **kwargs).arguments.get("timeout")
                except TypeError:
                    timeout = None
                if timeout is not None:
                    phrase = (_seconds(timeout), f"the timeout={_seconds(timeout):g} s passed to {name}")
                    groups = result if isinstance(result, tuple) else (result,)
                    for g in groups:  # new_subgroups returns (this rank's group, all groups)
                        for pg in (g if isinstance(g, list) else [g]):
                            if isinstance(pg, dist.ProcessGroup):
                                _group_timeouts[pg] = phrase
            return result
        finally:
            _leave(depth)

    return wrapper


def _seconds(timeout: datetime.timedelta | float) -> float:
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


def _name_timeout(exc: BaseException, name: str, sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any],
                  since: float, wait: tuple[float, datetime.timedelta] | None = None) -> None:
    """Attach ``collnb_timeout`` to an error of a wrapped call: a :class:`.TimeoutReport` of which
    timeout ended the wait. The timeouts that applied: the call's own ``timeout=`` (``barrier``,
    ``monitored_barrier``; ``wait=(start, timeout)`` for ``Work.wait(timeout=)``), its group's
    (given to ``new_group`` & co.) or the launch's ``collective_timeout``; each is matched to the
    wait measured since the call (or the ``wait()``) began."""
    try:
        if hasattr(exc, "collnb_timeout"):
            return
        now = time.monotonic()
        arguments = sig.bind(*args, **kwargs).arguments
        candidates: list[Candidate] = []
        if wait is not None and wait[1]:
            seconds: float | None = _seconds(wait[1])
            candidates.append((seconds, f"the timeout={seconds:g} s passed to Work.wait", now - wait[0]))
        if name in ("monitored_barrier", "barrier") and arguments.get("timeout") is not None:
            seconds = _seconds(arguments["timeout"])
            candidates.append((seconds, f"the timeout={seconds:g} s passed to {name}", now - since))
        group: Any = arguments.get("group")  # whatever the learner passed as group=
        if group is None and name == "batch_isend_irecv":
            ops = arguments.get("p2p_op_list") or []
            group = getattr(ops[0], "group", None) if ops else None
        group = group if group is not None else dist.group.WORLD
        seconds, phrase = _group_timeouts.get(group) or (_state["group_timeout"],
                                                         collective_timeout_name(_state["group_timeout"]))
        candidates.append((seconds, phrase, now - since))
        exc.collnb_timeout = which_timeout(candidates, str(exc))  # type: ignore[attr-defined]  # collnb's mark on the error; protocol.py reads it with getattr
    except Exception:  # noqa: BLE001 - naming is a courtesy; never hide the real error
        pass


def name_unmeasured(exc: BaseException) -> None:
    """Attach ``collnb_timeout`` to an error no wrapper measured (a collective torch issued below
    the wrapped functions, e.g. DTensor's): the timeouts of the pool's and the function's groups,
    bounded by the time since :func:`install`; the message's wording decides the rest."""
    try:
        if hasattr(exc, "collnb_timeout") or _state["since"] is None:
            return
        seconds = _state["group_timeout"]
        candidates = [(seconds, collective_timeout_name(seconds), None)] + [
            (s, phrase, None) for s, phrase in set(_group_timeouts.values())]
        exc.collnb_timeout = which_timeout(candidates, str(exc), at_most=time.monotonic() - _state["since"])  # type: ignore[attr-defined]  # as above
    except Exception:  # noqa: BLE001 - as above
        pass


#: Objects with ``completed_between(began_ns, returned_ns, now_ns)``, told when the operations a
#: wrapped call issued between those times (``time.perf_counter_ns``) are known to be complete: a
#: blocking call returned, or ``wait()`` returned on the Work of an ``async_op=True`` call. Gloo's
#: send/recv Work has no future (``Work::getFuture not implemented``) and reports itself completed
#: only once waited on, so this is the only moment a rank's track of a timeline (:mod:`.tracks`) can see. Empty
#: unless ``launch(..., timeline=True)``: then the wrappers read the clock.
completion_observers: list[_CompletionObserver] = []


def _spanned(result: _T, began: int) -> _T:
    """Tell :data:`completion_observers` that a blocking call's operations completed, or keep the
    call's span on its Work(s) for their ``wait()``; returns ``result``."""
    if not completion_observers:
        return result
    returned = time.perf_counter_ns()
    works = [w for w in (result if isinstance(result, list) else [result]) if isinstance(w, _CopyBackWork)]
    if works:
        for w in works:
            w._span = (began, returned)
    elif result is None or not isinstance(result, (list, dist.Work)):
        for obs in list(completion_observers):
            obs.completed_between(began, returned, returned)
    return result


def _timed(result: _T, timing: _Timing) -> _T:
    """The Work(s) of an ``async_op=True`` call, whose ``wait()`` names the timeout it raises for."""
    if isinstance(result, _CopyBackWork):
        result._timing = timing
        return result
    return cast(_T, _CopyBackWork(result, [], timing)) if isinstance(result, dist.Work) else result  # a Work stays a Work


# ----------------------------------------------------------------------------------------------
# batch_isend_irecv


def _tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _batch(orig: Callable[..., list[dist.Work]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dist.Work]:
    ops: list[dist.P2POp] = list(args[0] if args else kwargs.get("p2p_op_list", []))
    for op in ops:  # an op built with torch's own isend/irecv (captured before install)
        for which in ("isend", "irecv"):
            if getattr(op, "op", None) is _originals.get(which):
                op.op = _wrappers[which]
    if not (_state["check_layout"] and any(_odd(op.tensor) for op in ops if isinstance(op.tensor, torch.Tensor))):
        return orig(*args, **kwargs)
    # Dense stand-ins for odd tensors; results copied back when each Work is waited on.
    swapped: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}  # index of the op -> (its tensor, the dense stand-in or None for a send)
    for i, op in enumerate(ops):
        t = op.tensor
        if isinstance(t, torch.Tensor) and _odd(t):
            receives = op.op is _wrappers.get("irecv")
            if receives:
                _check_writable(t, "batch_isend_irecv")
            dense = _dense(t)
            swapped[i] = (t, dense if receives else None)
            op.tensor = dense
    try:
        works = orig(ops)
    finally:
        for i, (t, _) in swapped.items():
            ops[i].tensor = t
    copies = {i: (t, dense) for i, (t, dense) in swapped.items() if dense is not None}
    if not copies:
        return works
    if len(works) == len(ops):  # one Work per operation (gloo): each copies back its own receive
        return [_CopyBackWork(w, [copies[i]]) if i in copies else w for i, w in enumerate(works)]
    return [_CopyBackWork(w, list(copies.values())) for w in works]  # one Work for the batch (NCCL)


# ----------------------------------------------------------------------------------------------
# Layouts


def _odd(t: torch.Tensor) -> bool:
    """Whether gloo would misread this tensor: strided but not dense, or a pending conj/neg."""
    try:
        return (t.layout == torch.strided and not t.is_nested and not t.is_contiguous()) \
            or t.is_conj() or t.is_neg()
    except Exception:  # noqa: BLE001 - a tensor kind without these queries: leave it to torch
        return False


def _any_odd(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if _odd(value):
                return True
        elif isinstance(value, (list, tuple)):
            for t in _tensors(value):
                if _odd(t):
                    return True
    return False


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t.resolve_conj().resolve_neg().contiguous().clone(memory_format=torch.contiguous_format)


def _check_writable(t: torch.Tensor, name: str) -> None:
    if t.layout == torch.strided and has_internal_overlap(t):
        raise ValueError(
            f"{name}: an output tensor of shape {tuple(t.shape)} with strides {t.stride()} is an expanded "
            f"view (several elements share one memory location), so it cannot receive a result. Pass a "
            f"tensor of its own: out = t.clone() (or {LAYOUT_HINT})")


def _swap(value: object, role: _Role, name: str, copies: _Copies) -> object:
    """``value`` with every odd tensor replaced by a dense copy; ``copies`` collects
    ``(original, dense)`` pairs whose results must be copied back."""
    if isinstance(value, torch.Tensor):
        if not _odd(value):
            return value
        if role != _IN:
            _check_writable(value, name)
        dense = _dense(value)
        if role != _IN:
            copies.append((value, dense))
        return dense
    if isinstance(value, list):
        return [_swap(v, role, name, copies) for v in value]
    if isinstance(value, tuple):
        return tuple(_swap(v, role, name, copies) for v in value)
    return value


def _copy_back(copies: _Copies) -> None:
    for original, dense in copies:
        original.copy_(dense)


def _call_with_dense(orig: Callable[..., _R], name: str, bound: inspect.BoundArguments, roles: dict[str, _Role]) -> _R:
    copies: _Copies = []
    arguments = bound.arguments
    for arg, role in roles.items():
        if arg in arguments:
            arguments[arg] = _swap(arguments[arg], role, name, copies)
    result = orig(*bound.args, **bound.kwargs)
    if not copies:
        return result
    if arguments.get("async_op") or name in ("isend", "irecv"):  # results land when waited on
        # torch's Work here (None on a rank outside the group), and a Work stays a Work
        return cast(_R, _CopyBackWork(cast(dist.Work, result), copies)) if result is not None else result
    _copy_back(copies)
    return result


class _CopyBackWork(dist.Work):
    """A :class:`torch.distributed.Work` that, once the operation is done, copies its results
    from the dense stand-ins back into the learner's tensors (non-contiguous or conj/neg views)."""

    def __init__(self, work: dist.Work, copies: _Copies, timing: _Timing | None = None) -> None:
        super().__init__()
        self._work = work
        self._copies = copies
        self._copied = False
        self._timing = timing  # the call's (name, sig, args, kwargs, start): to name a timeout wait() raises
        self._span: tuple[int, int] | None = None  # (began_ns, returned_ns) of the call, for completion_observers

    def _finish(self) -> None:
        if not self._copied:
            self._copied = True
            _copy_back(self._copies)

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        start = time.monotonic()
        try:
            done = self._work.wait(timeout) if timeout else self._work.wait()
        except Exception as exc:
            if self._timing is not None:
                _name_timeout(exc, *self._timing, wait=(start, timeout))
            raise
        self._finish()
        if self._span is not None and completion_observers:
            now = time.perf_counter_ns()
            for obs in list(completion_observers):
                obs.completed_between(*self._span, now)
        return done

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self) -> Any:  # torch's own stub leaves it Any
        return self._work.exception()

    def source_rank(self) -> int:
        return self._work.source_rank()

    def result(self) -> list[torch.Tensor]:
        return self._work.result()

    def synchronize(self) -> None:
        self._work.synchronize()
        self._finish()

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        def done(fut: torch.futures.Future[list[torch.Tensor]]) -> list[torch.Tensor]:
            self._finish()
            return fut.value()
        return self._work.get_future().then(done)

    def __getattr__(self, item: str) -> Any:  # the wrapped Work's, whatever it is
        return getattr(self._work, item)
