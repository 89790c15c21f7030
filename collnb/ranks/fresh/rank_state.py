"""A warm rank as clean as a fresh script for every call: what a call changed is put back after
it, and what cannot be put back retires the rank.

A :class:`RankState` is made once per rank process, right after collnb's own set-up (the rank's
streams, signal handlers, thread count and socket environment are in place). When the learner's
function returns, the rank puts back at once what answering needs (:meth:`RankState.restore_essentials`:
streams, fds 1 and 2, working directory, timers, the recursion limit), sends its result, and then,
while the launcher shows the result, puts back the rest (:meth:`RankState.restore`: a few dozen
comparisons, most of them one read, :mod:`.state_probes`; only what changed is set back) and asks
:meth:`RankState.retire_reason`, which drops the modules of the learner's own files that the call
imported and says what the call changed that cannot be put back (a :class:`.Settled` message). The
launcher reads that before it sends the rank anything else and, for a change that cannot be put
back, runs the next call on fresh ranks (:mod:`..local.pool`), so neither the learner's next call nor
collnb's own ``run``/``explore``/``bench``/checks ever runs on a changed torch. A call of collnb's
own code only (``run``, ``explore``, ``bench``, the algorithms, the examples; :func:`collnb_only`)
changes none of this, and the rank skips the work after it: a warm slider move costs nothing more.

**Put back after every call** (to what the rank had when it started):

* process: ``os.environ`` (and ``time.tzset()`` when ``TZ`` changed), working directory,
  ``sys.stdin``/``sys.stdout``/``sys.stderr`` and fds 1 and 2, umask, every signal handler and the
  signal mask, ``signal.alarm``/interval timers (cancelled), soft resource limits
  (``resource.setrlimit``), scheduling priority (``os.nice``), CPU affinity;
* Python: ``sys.path``, ``sys.meta_path``, ``sys.path_hooks``, ``sys.argv``, the recursion limit,
  the switch interval, the int-to-str digit limit, ``sys.excepthook``/``displayhook``/
  ``unraisablehook``/``breakpointhook``, ``threading.excepthook``, trace and profile functions,
  ``warnings`` filters and ``warnings.showwarning``, the root logger's level, handlers and
  filters and ``logging.disable``, the garbage collector (enabled, thresholds), the default socket
  timeout;
* torch: default dtype, grad mode, anomaly detection, deterministic algorithms (and
  ``torch.utils.deterministic.fill_uninitialized_memory``), default device, torch-function and
  dispatch modes left entered, float32 matmul precision and every ``torch.backends.*.fp32_precision``,
  ``torch.backends.cudnn`` flags, ``torch.backends.mkldnn.enabled``, autocast (enabled, dtype,
  cache), ``torch.set_warn_always``, print options, intra-op thread count,
  ``torch.distributed``'s debug level;
* random numbers: torch's default generator (and CUDA's, once initialised), Python's ``random``
  and numpy's global generator are seeded afresh from the OS before every call, as a new
  script's are (torch 2.13 seeds its default generator from the OS too): each call and each rank
  draws different numbers, and a seed a call sets does not carry over; seed inside the function
  for repeatable ones. (Python's and numpy's are seeded again only when the call drew from them
  or seeded them: one untouched is still as freshly seeded.)

**Modules.** The ranks are forked from the kernel, so what the kernel had imported before the
pool started is there in every call, as it was then. A module of the learner's own files (a
``.py`` outside the standard library, site-packages and collnb) that a call imported is dropped
after the call, so the next call imports the file as it is then; library modules a call imported
stay (importing them again gives the same code) and are watched from then on.

**Retire the rank** (the launcher says which change, e.g. ``[collnb] the last call replaced
torch.distributed.all_reduce on rank 2; starting fresh ranks``): a function, class or module
replaced, deleted or added in ``torch``, ``torch.nn``, ``torch.nn.functional``, ``torch.nn.init``,
``torch.autograd``, ``torch.optim``, ``torch.distributed`` (and its ``distributed_c10d``,
``device_mesh``, ``tensor``, ``_functional_collectives``, ``fsdp``, ``pipelining`` once imported),
``torch.Tensor``, ``torch.nn.Module``, ``numpy``, ``builtins``, ``os``, ``sys``, ``time``,
``signal``, ``threading``, ``io``, ``pickle``, ``cloudpickle``, ``multiprocessing.connection``,
``socket``, ``math``, ``random``, ``functools``, any ``collnb`` module, or a top-level library
module an earlier call imported (torch's and collnb's own wrappers of a function do not count:
TorchDynamo (``torch.compile``'s tracer) wraps ``torch.manual_seed`` as it loads, :mod:`..instrument._dist_hooks` wraps
torch.distributed's functions; nor does a name torch or collnb fills in with a function or class of its
own, as collnb's facades do when a lazy name is first asked for); inference mode left on; the inter-op thread count changed; a hard
resource limit lowered; a setting above that could not be put back; a thread the call started
still running.

On an ipyparallel engine (``own_process=False``) the same is put back, except what belongs to
ipyparallel's process (streams, signal handlers, threads), and only torch's and collnb's
namespaces are watched; an engine cannot be swapped for a fresh one, so a changed engine refuses
later calls (:mod:`..remote.engines`).

Not seen (C-level state without a getter): ``torch.set_flush_denormal``, custom operators
registered with ``torch.library``, ``locale.setlocale``; a module's data values changed in place.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import resource
import signal
import _signal
import socket
import sys
import sysconfig
import threading
import time
import types
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import torch

from ...i18n import _
from .. import _torch_internals as internals
from .state_probes import VERSION_VIEW, Namespace, file_id, numpy_state, rng_mark
from .torch_settings import UNREADABLE, read_setting, torch_settings

if TYPE_CHECKING:
    import ctypes

__all__ = ["RankState", "Watch", "WATCHED_MODULES", "collnb_only"]

#: Modules whose functions, classes and submodules a call must leave as it found them (those not
#: imported yet are watched from the call that imports them on).
WATCHED_MODULES = ("torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.autograd", "torch.optim",
                   "torch.distributed", "torch.distributed.distributed_c10d", "torch.distributed.device_mesh",
                   "torch.distributed.tensor", internals.FUNCTIONAL_COLLECTIVES_MODULE,
                   "torch.distributed.fsdp", "torch.distributed.pipelining", "numpy", "builtins", "os", "sys",
                   "time", "signal", "threading", "io", "pickle", "cloudpickle", "multiprocessing.connection",
                   "socket", "math", "random", "functools")
_WATCHED_CLASSES = (("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module))

_COLLNB_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_LIBRARY_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for p in (
    sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p}))
_RLIMITS: list[int] = [getattr(resource, n) for n in ("RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_CPU",
                                                      "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NPROC", "RLIMIT_MEMLOCK")
                       if hasattr(resource, n)]
_PYTHON_HOOKS = ((sys, "excepthook"), (sys, "displayhook"), (sys, "unraisablehook"), (sys, "breakpointhook"),
                 (threading, "excepthook"), (warnings, "showwarning"))


def collnb_only(fn: Callable[..., object], args: Iterable[object] = (), kwargs: Mapping[str, object] | None = None) -> bool:
    """Whether a call runs collnb's own code only: ``fn`` is a function of collnb's files (``run``,
    ``explore``, ``bench``, the algorithms, the examples) and no argument holds a function or class
    of anyone else's (an exercise check passes the learner's function). Such a call leaves the rank
    as it found it, so the rank skips putting itself back after it: a warm slider move costs
    nothing more."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is None or not code.co_filename.startswith(_COLLNB_DIR):
        return False
    todo: list[object]
    todo, seen = [args, tuple((kwargs or {}).values())], 0
    while todo:
        value = todo.pop()
        seen += 1
        if seen > 10_000:  # too much to look through: treat it as the learner's
            return False
        if isinstance(value, (list, tuple, set, frozenset)):
            todo.extend(value)
        elif isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif callable(value) or issubclass(type(value), types.ModuleType):
            inner = getattr(getattr(value, "__func__", value), "__code__", None)
            if inner is None or not inner.co_filename.startswith(_COLLNB_DIR):
                return False
    return True


def _learners_own(module: types.ModuleType | None) -> bool:
    """A module of the learner's own files: Python source outside the standard library,
    site-packages and collnb."""
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith((".py", ".pyc")):
        return False
    path = os.path.realpath(path)
    return not path.startswith(_COLLNB_DIR) and not path.startswith(_LIBRARY_DIRS)


class RankState:
    """The state of one rank process when it started, to put back after every call.

    Args:
        own_process: the rank owns its process (a local rank). ``False`` on an ipyparallel engine,
            whose process is ipyparallel's between calls: its streams, signal handlers, threads and
            non-torch modules are left to it (only torch's namespaces are watched there).
        rearm: called when a signal whose handler was installed from C (:mod:`faulthandler`'s)
            got a Python handler in the call: it installs collnb's C handlers again.
    """

    def __init__(self, own_process: bool = True, rearm: Callable[[], object] | None = None,
                 watch: Watch | None = None) -> None:
        self.streams = self.own = own_process
        self.rearm = rearm
        watch = watch if watch is not None else Watch(own_process)
        if self.streams:
            self.stdio = (sys.stdin, sys.stdout, sys.stderr)
            self.fds = {fd: os.dup(fd) for fd in (1, 2)}
            self.fd_ids = {fd: file_id(copy) for fd, copy in self.fds.items()}
        self.cwd = os.getcwd()
        self.env = dict(os.environ)
        data = getattr(os.environ, "_data", None)
        self.env_data = dict(data) if isinstance(data, dict) else None
        self.env_tag = VERSION_VIEW(data) if VERSION_VIEW is not None and isinstance(data, dict) else None
        self.env_version = self.env_tag.value if self.env_tag is not None else None
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        # _signal.getsignal: signal.getsignal's own wrapper (handlers as enums) costs ~20x more
        self.signals = {int(s): _signal.getsignal(s) for s in signal.valid_signals()
                        if s not in (signal.SIGKILL, signal.SIGSTOP)}
        self.signal_numbers, self.handlers = list(self.signals), list(self.signals.values())
        self.sigmask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        self.rlimits = {r: resource.getrlimit(r) for r in _RLIMITS}
        self.rlimit_values = list(self.rlimits.values())
        self.priority = os.getpriority(os.PRIO_PROCESS, 0)
        self.affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        self.lists: list[tuple[list[Any], list[Any]]] = [  # each: one of sys's lists, and its items
            (lst, list(lst)) for lst in (sys.path, sys.meta_path, sys.path_hooks, sys.argv)]
        self.list_objects = dict(path=sys.path, meta_path=sys.meta_path, path_hooks=sys.path_hooks, argv=sys.argv)
        self.python = (sys.getrecursionlimit(), sys.getswitchinterval(), sys.get_int_max_str_digits(),
                       sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile(),
                       gc.isenabled(), gc.get_threshold(), socket.getdefaulttimeout())
        self.hooks = [(obj, name, getattr(obj, name)) for obj, name in _PYTHON_HOOKS]
        self.filters = list(warnings.filters)
        root = logging.getLogger()
        self.logging = (root.level, list(root.handlers), list(root.filters), logging.root.manager.disable)
        self.python_then = self._python_now()
        self.settings = watch.settings
        self.setting_values = [read_setting(read) for _, read, _ in self.settings]
        self.device_context = internals.default_device_context()
        self.modes = internals.mode_stack_depths()
        self.interop = torch.get_num_interop_threads()
        self.threads = set(threading.enumerate())
        self.module_names = watch.module_names
        self.namespaces, self.tags, self.versions = watch.namespaces, watch.tags, watch.versions
        self.untagged, self.c10d = watch.untagged, watch.c10d
        self.unrestored: list[str] = []  # what restore() could not put back, for retire_reason()
        self.random_mark: tuple[int, int, int] | None
        self.numpy_mark: tuple[int, int, int] | None
        self.random_mark = self.numpy_mark = None
        self.reseed()

    # -- what the call changed, put back -------------------------------------------------------
    def begin_call(self) -> None:
        """Call right before the learner's function, after collnb's own set-up for it, which moves data
        in ``torch.distributed.distributed_c10d`` (torch's group counter, the default group) that is
        no change of the call's: that namespace's version is taken again (one read). Only collnb's
        own code has run since the last :meth:`retire_reason`."""
        if self.c10d is not None:
            ns = self.namespaces[self.c10d]
            ns.version = self.versions[self.c10d] = ns.tag.value  # type: ignore[union-attr]  # c10d is set for a tagged one only

    def restore_essentials(self) -> None:
        """Put back at once what the rank needs to answer the launcher: its streams and fds 1 and 2,
        the working directory, the timers, the recursion limit (the rest: :meth:`restore`). Never
        raises."""
        if sys.getrecursionlimit() < self.python[0]:
            sys.setrecursionlimit(self.python[0])
        try:
            self._restore_streams()
        except Exception as exc:  # noqa: BLE001
            self.unrestored.append(_("left a change collnb could not put back ({what}: {error})").format(what="streams", error=f"{type(exc).__name__}: {exc}"))

    def restore(self) -> None:
        """Put back what the call changed (see the module docstring). Never raises: what could not be
        put back is remembered for :meth:`retire_reason`."""
        if sys.getrecursionlimit() < self.python[0]:  # first: everything below needs its stack
            sys.setrecursionlimit(self.python[0])
        for part in (self._restore_streams, self._restore_process, self._restore_python, self._restore_torch,
                     self.reseed):
            try:
                part()
            except Exception as exc:  # noqa: BLE001 - the rank must still answer; retire it instead
                self.unrestored.append(_("left a change collnb could not put back ({what}: {error})").format(
                    what=part.__name__.strip("_"), error=f"{type(exc).__name__}: {exc}"))

    def _restore_streams(self) -> None:
        if self.streams:
            sys.stdin, sys.stdout, sys.stderr = self.stdio
            for fd, copy in self.fds.items():
                try:
                    if file_id(fd) != self.fd_ids[fd]:
                        os.dup2(copy, fd)
                except OSError:  # closed
                    os.dup2(copy, fd)
        signal.setitimer(signal.ITIMER_REAL, 0)  # also cancels signal.alarm()
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        try:
            if os.getcwd() != self.cwd:
                os.chdir(self.cwd)
        except OSError:  # the function removed the directory it moved to
            os.chdir(self.cwd)

    def reseed(self) -> None:
        """Seed torch's default generator (and CUDA's once initialised) afresh from the OS, as a new
        process is; Python's ``random`` and numpy's global generator too, unless the call left them
        as they were seeded (:func:`_rng_mark` reads where they stand: a call that did not draw from
        them cannot have seen or changed anything)."""
        torch.default_generator.seed()
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch's is_initialized has no annotations
            torch.cuda.seed_all()
        mark = rng_mark(random._inst)
        if mark is None or mark != self.random_mark:
            random.seed(int.from_bytes(os.urandom(16), "little"))
            self.random_mark = rng_mark(random._inst)
        np = sys.modules.get("numpy")
        if np is not None and "numpy.random" in sys.modules:  # not imported: unused (and seeded afresh on import)
            state = numpy_state(np)
            mark = rng_mark(state)
            if mark is None or mark != self.numpy_mark:
                np.random.seed(int.from_bytes(os.urandom(4), "little"))  # an int seed: 5x cheaper than an array
                self.numpy_mark = rng_mark(state)

    def _restore_process(self) -> None:
        if (self.env_tag is None or self.env_tag.value != self.env_version) and (
                self.env_data is None or os.environ._data != self.env_data):  # type: ignore[attr-defined]  # os.environ's private dict
            now = dict(os.environ)
            for key in now.keys() - self.env.keys():
                del os.environ[key]
            for key, value in self.env.items():
                if now.get(key) != value:
                    os.environ[key] = value
            if now.get("TZ") != self.env.get("TZ"):
                time.tzset()
        if self.env_tag is not None:
            self.env_version = self.env_tag.value
        os.umask(self.umask)  # one system call: reading the umask sets it
        same = not self.own or list(map(_signal.getsignal, self.signal_numbers)) == self.handlers
        for s, handler in self.signals.items() if not same else ():
            now = _signal.getsignal(s)
            if now is handler or now == handler:
                continue
            if handler is None:  # installed from C (faulthandler): only collnb's own set-up can redo it
                if self.rearm is not None:
                    self.rearm()
                continue
            try:
                signal.signal(s, handler)
            except (OSError, ValueError) as exc:
                self.unrestored.append(_("changed the handler of {signal} ({error})").format(signal=signal.Signals(s).name, error=exc))
        if self.own and signal.pthread_sigmask(signal.SIG_BLOCK, []) != self.sigmask:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.sigmask)
        same = list(map(resource.getrlimit, self.rlimits)) == self.rlimit_values
        for r, limits in self.rlimits.items() if not same else ():
            now = resource.getrlimit(r)
            if now != limits:
                try:
                    resource.setrlimit(r, limits)
                except (OSError, ValueError):
                    self.unrestored.append(_("lowered the hard limit of {limit} (resource.setrlimit) from {old} to {new}")
                                           .format(limit=_rlimit_name(r), old=limits[1], new=now[1]))
        try:
            if os.getpriority(os.PRIO_PROCESS, 0) != self.priority:
                os.setpriority(os.PRIO_PROCESS, 0, self.priority)
        except OSError:
            self.unrestored.append(_("lowered the rank's scheduling priority (os.nice)"))
        if self.affinity is not None and os.sched_getaffinity(0) != self.affinity:
            try:
                os.sched_setaffinity(0, self.affinity)
            except OSError:
                self.unrestored.append(_("changed the rank's CPU affinity (os.sched_setaffinity)"))

    @staticmethod
    def _python_now() -> tuple[object, ...]:
        """Everything :meth:`_restore_python` puts back, in one tuple (compared element by element,
        by identity first: one check when nothing changed)."""
        root = logging.root
        return (sys.path, tuple(sys.path), sys.meta_path, tuple(sys.meta_path), sys.path_hooks,
                tuple(sys.path_hooks), sys.argv, tuple(sys.argv), sys.getrecursionlimit(), sys.getswitchinterval(),
                sys.get_int_max_str_digits(), sys.gettrace(), sys.getprofile(), threading.gettrace(),
                threading.getprofile(), gc.isenabled(), gc.get_threshold(), socket.getdefaulttimeout(),
                sys.excepthook, sys.displayhook, sys.unraisablehook, sys.breakpointhook, threading.excepthook,
                warnings.showwarning, tuple(warnings.filters), root.level, tuple(root.handlers), tuple(root.filters),
                root.manager.disable)

    def _restore_python(self) -> None:
        if self._python_now() == self.python_then:
            return
        for name, obj in self.list_objects.items():
            if getattr(sys, name) is not obj:
                setattr(sys, name, obj)
        for lst, saved in self.lists:
            if lst != saved:
                lst[:] = saved
        (limit, interval, digits, trace, profile, thread_trace, thread_profile, gc_on, gc_threshold,
         sock_timeout) = self.python
        if sys.getrecursionlimit() != limit:
            sys.setrecursionlimit(limit)
        if sys.getswitchinterval() != interval:
            sys.setswitchinterval(interval)
        if sys.get_int_max_str_digits() != digits:
            sys.set_int_max_str_digits(digits)
        if sys.gettrace() is not trace:
            sys.settrace(trace)
        if sys.getprofile() is not profile:
            sys.setprofile(profile)
        if threading.gettrace() is not thread_trace:
            threading.settrace(thread_trace)
        if threading.getprofile() is not thread_profile:
            threading.setprofile(thread_profile)
        if gc.isenabled() != gc_on:
            (gc.enable if gc_on else gc.disable)()
        if gc.get_threshold() != gc_threshold:
            gc.set_threshold(*gc_threshold)
        if socket.getdefaulttimeout() != sock_timeout:
            socket.setdefaulttimeout(sock_timeout)
        for obj, name, value in self.hooks:
            if getattr(obj, name) is not value:
                setattr(obj, name, value)
        if warnings.filters != self.filters:
            warnings.filters[:] = self.filters  # type: ignore[index]  # a list at run time; typeshed declares a Sequence
            getattr(warnings, "_filters_mutated", lambda: None)()
        root = logging.getLogger()
        level, handlers, filters, disable = self.logging
        if root.level != level:
            root.setLevel(level)
        if root.handlers != handlers:
            root.handlers[:] = handlers
        if root.filters != filters:
            root.filters[:] = filters
        if logging.root.manager.disable != disable:
            logging.disable(disable)

    def _restore_torch(self) -> None:
        values = [read_setting(read) for _name, read, _write in self.settings]
        if values == self.setting_values:
            return
        for _attempt in range(2):  # twice: the legacy matmul precision, written back, resets the fp32 precisions
            for (_name, read, write), old in zip(self.settings, self.setting_values):
                now = read_setting(read)  # read again: writing one setting can change another
                if now != old or now is UNREADABLE:
                    try:
                        write(old)
                    except Exception:  # noqa: BLE001 - checked below
                        pass
            if [read_setting(read) for _name, read, _write in self.settings] == self.setting_values:
                break
        for (name, read, _write), old in zip(self.settings, self.setting_values):
            if read_setting(read) != old:
                self.unrestored.append(_("changed {name} and it could not be put back").format(name=name))
        if torch.is_autocast_cache_enabled():
            torch.clear_autocast_cache()

    # -- what cannot be put back ---------------------------------------------------------------
    def retire_reason(self) -> str:
        """Call after :meth:`restore`, once the call is over: its result pickled (modules of the
        learner's own files are dropped here) and every mode collnb entered around it exited (modes
        the call left entered are left here). Returns what the call changed that cannot be put
        back, in words (``"replaced torch.distributed.all_reduce"``), or ``""`` when the rank is as
        it started."""
        reasons, self.unrestored = self.unrestored, []
        # Modes the call left entered (a TorchDispatchMode, torch.device(...) as a context, the context of
        # set_default_device) are left here, not in restore(): collnb's own modes around a call are exited
        # by now.
        if internals.mode_stack_depths() != self.modes:
            internals.pop_modes(*self.modes)
        if internals.default_device_context() is not self.device_context:
            internals.set_default_device_context(self.device_context)
        if len(sys.modules) != len(self.module_names):  # a call that imports nothing costs one len()
            self._new_modules()
        tags = [t.value for t in self.tags]  # one read per namespace: only those that moved are looked at
        if tags != self.versions:
            for i, (now, then) in enumerate(zip(tags, self.versions)):
                if now != then:
                    reasons += self.namespaces[i].changes()
                    self.versions[i] = self.namespaces[i].version
        for ns in self.untagged:
            reasons += ns.changes()
        if torch.is_inference_mode_enabled():
            reasons.append(_("left inference mode on (torch.inference_mode().__enter__() without __exit__)"))
        if internals.mode_stack_depths() != self.modes:
            reasons.append(_("left a torch function or dispatch mode that was active when the rank started"))
        if torch.get_num_interop_threads() != self.interop:
            reasons.append(_("changed torch.set_num_interop_threads"))
        if self.own and threading.active_count() > len(self.threads):
            left = [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]
            if left:
                reasons.append((_("left thread {name!r} running").format(name=left[0].name) if len(left) == 1 else
                                _("left thread {name!r} running (and {n} more)").format(name=left[0].name, n=len(left) - 1)))
        if not reasons:
            return ""
        if len(reasons) > 3:
            return _("{changes} (and {n} more changes)").format(changes="; ".join(reasons[:3]), n=len(reasons) - 3)
        return "; ".join(reasons)

    def _new_modules(self) -> None:
        added = [name for name in sys.modules.keys() - self.module_names]
        dropped = False
        for name in added:
            module = sys.modules.get(name)
            if _learners_own(module):
                del sys.modules[name]
                dropped = True
        if dropped:
            import importlib  # noqa: PLC0415
            importlib.invalidate_caches()
        _add_namespaces(self, [name for name in added if name in sys.modules and (name.startswith("collnb.") or (
            ("." not in name or name in WATCHED_MODULES) and (self.own or name.startswith("torch"))))])
        self.module_names = set(sys.modules)


class Watch:
    """The costly part of a :class:`RankState`, the same in a process and in a child it forks: the
    namespaces watched (:class:`.state_probes.Namespace`), the modules imported, the torch settings
    read. A pool makes it in the launcher right before it forks ranks and each rank takes it over:
    made in the rank, it would touch (and copy on write) some 14 MiB of the kernel's pages per rank.

    Args:
        own_process: as for :class:`RankState` (``False``: torch's and collnb's namespaces only).
    """

    namespaces: list[Namespace]  # with a version tag
    tags: list[ctypes.c_uint64]  # their tags, same order
    versions: list[int | None]  # the tags' values when last looked at
    untagged: list[Namespace]  # without a version tag (compared in full)
    c10d: int | None  # index of torch.distributed.distributed_c10d in namespaces

    def __init__(self, own_process: bool = True) -> None:
        self.own = own_process
        self.settings = torch_settings()
        self.module_names = set(sys.modules)
        self.namespaces, self.tags, self.versions, self.untagged, self.c10d = [], [], [], [], None
        _add_namespaces(self, [n for n in WATCHED_MODULES if own_process or n.startswith("torch")]
                        + [n for n in sys.modules if n == "collnb" or n.startswith("collnb.")])


def _add_namespaces(self: Watch | RankState, names: Iterable[str]) -> None:
    """Watch the namespaces of ``names`` (modules) and the watched classes that ``self`` (a :class:`Watch`
    or :class:`RankState`) does not watch yet."""
    have = {ns.name for ns in self.namespaces + self.untagged}
    new = []
    for name in names:
        module = sys.modules.get(name)
        if module is not None and name not in have and isinstance(getattr(module, "__dict__", None), dict):
            new.append(Namespace(name, module.__dict__))
    for name, cls in _WATCHED_CLASSES:
        if name not in have:
            new.append(Namespace(name, cls.__dict__, cls))
    for ns in new:  # with a version tag (CPython 3.11, 3.12): read first; without: compared in full
        if ns.tag is not None:
            if ns.name == "torch.distributed.distributed_c10d":
                self.c10d = len(self.namespaces)
            self.namespaces.append(ns)
            self.tags.append(ns.tag)
            self.versions.append(ns.version)
        else:
            self.untagged.append(ns)


def _rlimit_name(r: int) -> str:
    return next((n for n in dir(resource) if n.startswith("RLIMIT_") and getattr(resource, n) == r), str(r))
