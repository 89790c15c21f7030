"""One call of the learner's function on a rank: the steps every kind of rank takes.

A local rank (:mod:`..local.rank`) and an ipyparallel engine (:mod:`..remote.engines`) run a call
the same way, as a :class:`Call`:

1. **enter** (``Call(...)``): torch's group counter set to the call's (the same on every rank, so
   the groups the function makes get the same names everywhere), the call's cached group made the
   default group (``dist.get_world_size()`` is the call's), the kernel's language, torch.distributed's
   wrappers switched on (:mod:`..instrument._dist_hooks`: layouts gloo misreads, groups'
   timeouts, which timeout ended a wait);
2. **run** (:meth:`Call.run`): load the function, run it under the call's own store prefix with the
   instruments around it (:class:`..instrument.interface.Taking`), and pack its return value into a
   :class:`..protocol.Result` with what the instruments took;
3. **end** (:meth:`Call.end_groups`): the groups the call made end together on every rank
   (:func:`.groups.end_call_groups`);
4. or **fail** (:meth:`Call.failed`): the error as a :class:`..protocol.Failed`: the learner's frames,
   whether it is a peer's communication error, which timeout ended its wait, what the instruments
   took (the Flight Recorder's entries).

What differs stays with each kind of rank: a local rank answers on its pipe and puts itself back
as it started after answering (:class:`..fresh.rank_state.RankState`), an engine puts itself back
before ipyparallel sends its answer.
"""

from __future__ import annotations

import ctypes
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from ...i18n import set_language
from .. import _torch_internals as internals
from ..explain.tracebacks import frames_of, is_comm_error
from ..fresh.rank_state import collnb_only
from ..instrument import _dist_hooks
from ..instrument.interface import Recorded, Taking
from ..protocol import Failed, Result, Run
from ..serialization import Unsendable, dumps, loads, restore_files, to_cpu
from .groups import Group, end_call_groups, intact, kept_now

__all__ = ["Call", "failure", "current_rank", "serve", "flush_output", "restore_environment", "resolve_rank_names"]

#: The rank this process serves while it is a rank (a local rank, a process its function forked,
#: an engine during a call), else ``None``: :func:`collnb.launch` refuses to start ranks of ranks.
_current_rank: int | None = None


def current_rank() -> int | None:
    """The rank this process serves (int), or ``None`` outside a rank."""
    return _current_rank


def serve(rank: int | None) -> None:
    """This process serves rank ``rank`` from now on (``None``: no longer a rank)."""
    global _current_rank
    _current_rank = rank


class Call:
    """One call of the learner's function on this rank (see the module docstring).

    Args:
        rank: this rank's number in the call.
        run: the call (:class:`..protocol.Run`: world size, group counter, task, instruments, language).
        group: the cached group of the call's ranks, made the call's default group.
        backend: ``"gloo"`` or ``"nccl"`` (NCCL: the device is synchronised before the result is sent).
        collective_timeout: seconds; the timeout of the groups the function makes without one.
    """

    def __init__(self, rank: int, run: Run, group: Group | None, backend: str, collective_timeout: float) -> None:
        self.rank, self.order, self.backend = rank, run, backend
        self.collective_timeout = collective_timeout
        self.pid = os.getpid()
        self.fn: Callable[..., Any] | None = None  # named in an error even when the task does not load
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}
        self.recorded: Recorded | None = None
        self._before: set[dist.ProcessGroup] = set()
        self._kept_before: set[dist.ProcessGroup] = set()
        serve(rank)
        internals.set_group_count(run.group_count)
        if dist.group.WORLD is not group:
            internals.set_default_group(group)
        # The kernel's language now, not the one this rank was started with (warm ranks outlive a
        # collnb.set_language); this also sets COLLNB_LANG here, for what the function starts.
        set_language(run.language)
        _dist_hooks.install(check_layout=True, group_timeout=collective_timeout)
        self.taking = Taking(run.instruments)

    def run(self, cached: Iterable[Group | None], before: Callable[[], object] = lambda: None,
            after: Callable[[], object] = lambda: None) -> Result:
        """Load and run the function, then pack its result. ``cached``: this rank's cached groups (the
        result says whether they survived: :func:`.groups.intact`); ``before`` runs right before the
        function and ``after`` right after it (the rank's state: :class:`..fresh.rank_state.RankState`).

        Raises what the function raised, or :class:`TypeError` for a result that cannot be sent back.
        A process the function forked that comes back here ends (``os._exit``)."""
        order = self.order
        fn, args, kwargs, files = loads(order.task)
        self.fn, self.args, self.kwargs = fn, tuple(args), dict(kwargs)
        restore_files(fn, files)
        self._before, self._kept_before = internals.live_groups(), kept_now()
        try:
            # Groups the function creates keep their rendezvous keys under a prefix of this
            # call's own, so a re-run (same group names: hashed from ranks) starts clean.
            with internals.call_store(f"call{order.group_count}/"):
                before()
                self.taking.start()
                try:
                    result = fn(self.rank, order.world_size, *args, **kwargs)
                except BaseException:
                    self.recorded = self.taking.stop(ok=False)
                    raise
                self.recorded = self.taking.stop(ok=True)
        finally:
            _dist_hooks.pause()
            if os.getpid() == self.pid:
                after()
        if os.getpid() != self.pid:  # a process the function forked returned into our loop
            leave_forked_child(0)
        if self.backend == "nccl":
            torch.cuda.synchronize()
        return Result(_payload(self.rank, result), internals.sequence_number(), intact(cached),
                      recorded=self.recorded)

    def own(self) -> bool:
        """Whether the call is collnb's own code throughout (:func:`..fresh.rank_state.collnb_only`: it
        changes nothing to put back, and may keep its groups)."""
        return self.fn is not None and collnb_only(self.fn, self.args, self.kwargs)

    def end_groups(self, store: dist.Store, own: bool) -> None:
        """The groups the call made end together on every rank of it (``store``: the ranks' shared
        store); collnb's own code (``own``) keeps those it kept. Call after a :meth:`run` whose
        result says the rank's groups are intact."""
        end_call_groups(store, self.order.group_count, self.order.world_size, self.rank, self._before,
                        self._kept_before, own, self.collective_timeout)

    def failed(self, exc: BaseException) -> Failed:
        """The answer for ``exc``, raised by the function or by a step of the call. A process the
        function forked that raised or exited here ends with its own exit code."""
        if self.recorded is None:  # a step before the function failed: stop what had started
            self.recorded = self.taking.stop(ok=False)
        _dist_hooks.pause()
        if os.getpid() != self.pid:  # a process the function forked raised or exited
            if isinstance(exc, SystemExit):
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            else:
                code = 1
                traceback.print_exc()
            leave_forked_child(code)
        _explain(exc, self.fn, self.args, self.order.world_size)
        return failure(exc, self.rank, self.recorded)


def failure(exc: BaseException, rank: int | None, recorded: Recorded | None = None) -> Failed:
    """The :class:`..protocol.Failed` a rank answers for ``exc``: its type, message, the learner's
    frames, whether it is a peer's communication error, which timeout ended the wait (when no wrapper
    measured it, read from what the wrappers know), and ``recorded``. Output is flushed first."""
    flush_output()
    _dist_hooks.name_unmeasured(exc)  # which timeout ended a wait no wrapper measured
    return Failed.from_exception(exc, rank, frames_of(exc.__traceback__), is_comm_error(exc), recorded)


def _payload(rank: int, result: object) -> bytes:
    """``result`` as the bytes that travel back (tensors as detached CPU copies).

    Raises:
        TypeError: it cannot be sent (a ``Work`` handle, an open file...), saying what to return."""
    try:
        return dumps(to_cpu(result))
    except Unsendable as exc:
        raise TypeError(f"rank {rank}'s function returned {exc}") from None
    except Exception as exc:
        raise TypeError(
            f"rank {rank}'s function returned a {type(result).__name__} that cannot be sent back "
            f"to the launcher ({type(exc).__name__}: {exc}). Return tensors, numbers, strings, "
            f"or lists/tuples/dicts of them; wait on Work handles (work.wait()) inside the "
            f"function instead of returning them") from exc


_INIT_TWICE = "trying to initialize the default process group twice"


def _explain(exc: BaseException, fn: object, args: Iterable[Any], world_size: int) -> None:
    """Add what to do to an error a learner gets for code written for a plain script: the PyTorch
    tutorial's ``init_process(rank, size, fn)`` calls ``init_process_group``, which collnb has
    already called when the function starts."""
    if isinstance(exc, (RuntimeError, ValueError)) and _INIT_TWICE in str(exc):
        work = next((a for a in args if callable(a)), None)
        name = getattr(work, "__name__", None) or "your_function"
        exc.args = (f"{exc} collnb has already initialised the default process group (backend, rank "
                    f"and world size set) before it calls {getattr(fn, '__name__', 'the function')}, "
                    f"so a function for collnb.launch must not call dist.init_process_group (nor set "
                    f"MASTER_ADDR/MASTER_PORT). Launch the function that does the work: "
                    f"collnb.launch({name}, {world_size})",) + exc.args[1:]


def resolve_rank_names() -> None:
    """Load the public names of ``collnb`` that a learner's function calls inside a rank
    (``collnb.region``) before the rank's state is watched: ``collnb``'s module ``__getattr__``
    caches a name in the package's namespace the first time it is used, which a call must not be
    the first to do (it would count as a change of a collnb module, and retire the ranks)."""
    package = sys.modules.get("collnb")
    if package is not None:
        for name in ("region",):
            getattr(package, name, None)


def restore_environment(ifname: str, debug: bool, flight_recorder: int = 0) -> None:
    """Bind Gloo and NCCL to the interface ``ifname``, set the debug level (``debug``:
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, else ``OFF``) and the Flight Recorder's buffer
    (``flight_recorder`` entries, when not 0; torch reads it when a process group is made). Every
    kind of rank calls it before it makes its default group."""
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    os.environ["NCCL_SOCKET_IFNAME"] = ifname
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL" if debug else "OFF"
    if flight_recorder:
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(flight_recorder)
    dist.set_debug_level_from_env()


def leave_forked_child(code: int) -> NoReturn:
    """End a process the learner's function forked that came back into collnb's code: it must not
    answer the launcher for the rank."""
    try:
        sys.stdout.flush(), sys.stderr.flush()
    except Exception:  # noqa: BLE001 - the streams are gone: the exit code still says it
        pass
    os._exit(code)


_libc: ctypes.CDLL | None = None


def flush_output() -> None:
    """Flush Python's ``sys.stdout``/``sys.stderr`` and C's stdio buffers (output printed by C/C++
    code in the rank), so that what the rank printed arrives before its answer."""
    global _libc
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a stream that cannot flush has nothing buffered to lose
            pass
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except Exception:  # noqa: BLE001 - no C library to flush: nothing was buffered there
        pass
