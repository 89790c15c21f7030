"""Launch real ranks from a Python process or a Jupyter kernel.

``launch(fn, world_size)`` runs ``fn(rank, world_size, *args)`` on ``world_size`` worker
processes started through :mod:`torch.multiprocessing`, each inside an initialised default
process group, and returns the per-rank results in rank order.

How it works (and why):

* **Warm ranks.** Ranks are kept in a :class:`RankPool` between calls. A call at a world size the
  pool already has costs a pipe round trip plus ``fn``; a new world size re-initialises the
  default process group on the existing processes (one store client per rank is reused, which
  avoids the ~5 s stalls seen at world size 16 when each re-init opened a new client).
* **Rendezvous without a port.** Every pool gets a private temporary directory holding a
  :class:`torch.distributed.FileStore`. No fixed ``MASTER_PORT``, no TCPStore: FileStore opens no
  socket, and the parent hosts no server thread while it forks (forking while the parent hosts a
  TCPStore deadlocked 21/25 launches at world size 16 on our 2-core machine). Gloo's pairs are
  bound to the loopback interface (``GLOO_SOCKET_IFNAME=lo``), NCCL's bootstrap likewise
  (``NCCL_SOCKET_IFNAME=lo``), so nothing listens on another interface.
* **Functions by value.** ``fn`` is shipped with cloudpickle, so a function defined in a notebook
  cell works in a pool forked before the cell ran.
* **Clean failures.** A rank that raises, exits or dies makes the launcher stop every other rank
  at once and raise :class:`RankError` naming the root-cause rank, with that rank's traceback.
  Communication errors that follow a root cause ("Connection closed by peer") never hide it.
  A rank that never reaches a collective its peers wait in is caught by the process group's
  ``collective_timeout`` (seconds, default 5), not gloo's 30-minute default; the launcher then
  shows where each still-running rank was (its Python stack, via :mod:`faulthandler`).
* **torch.distributed, checked.** Inside a call, :mod:`collnb._dist_hooks` wraps the public
  torch.distributed functions: tensors whose layout gloo misreads get dense copies (results copied
  back), groups and device meshes the function makes get ``collective_timeout``, and with
  ``record_calls=True`` each rank's own calls come back as :class:`CallRecord` objects. When the
  DETAIL check finds mismatched collectives, a rank is blamed only if it differs from all the
  others; a timeout error names the timeout that fired; the backend's C++ log lines are attached
  to the error instead of printed.
* **No orphans.** Ranks watch their parent and exit, removing the pool's files, within 0.2 s of
  its death (a killed or restarted kernel); they ignore SIGINT (the kernel
  handles Kernel → Interrupt and stops them), and the pool's temporary directory is removed on
  shutdown, at interpreter exit, and swept on the next start if a kernel was killed.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import ctypes
import datetime
import faulthandler
import gc
import inspect
import io
import linecache
import math
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass, field
from multiprocessing.connection import wait as _mp_wait
from typing import Any, Callable, Sequence

import cloudpickle
import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from . import _dist_hooks
from ._dist_hooks import CallRecord

__all__ = [
    "launch",
    "shutdown",
    "LaunchResults",
    "CallRecord",
    "backend_info",
    "RankPool",
    "LaunchError",
    "RankError",
    "LaunchTimeout",
    "MAX_WORLD_SIZE",
    "BACKENDS",
]

#: Largest world size the launcher accepts. Each rank is a process on this machine; 16 is what a
#: 2-core teaching machine runs comfortably (gloo connects a full mesh: n(n-1)/2 TCP pairs).
MAX_WORLD_SIZE = 16
BACKENDS = ("gloo", "nccl")
_TMP_PREFIX = "collnb-"

# ----------------------------------------------------------------------------------------------
# Errors


class LaunchError(RuntimeError):
    """A launch failed: a rank failed, the launch timed out, or it was interrupted."""


class RankError(LaunchError):
    """A rank failed. The message starts with ``"rank R: ExcType: message"``.

    Attributes:
        rank: the root-cause rank (int); ``None`` when no single rank is to blame: ranks called
            mismatched collectives and no rank differs from all the others (the message then
            starts ``"ranks 0 and 1: ..."`` and ``mismatch`` says who called what).
        exc_type: the name of that rank's exception type (str), e.g. ``"ValueError"``,
            ``"SystemExit"``, ``"Killed"`` (died from a signal), ``"Exited"`` (``os._exit``).
        rank_traceback: that rank's own traceback as text (str; empty when it died without one).
        outcomes: ``{rank: str}`` what happened to every rank.
        mismatch: ``{collective fingerprint (str): [ranks]}`` when the debug check found ranks
            calling different collectives (op, shapes, dtypes), else ``None``.
        backend_log: the lines the backend's C++ code logged during the call (list of str,
            ``"[rank r] ..."``), kept out of the cell unless ``launch(..., show_backend_log=True)``.
    """

    def __init__(self, message, rank, exc_type, rank_traceback, outcomes):
        super().__init__(message)
        self.rank = rank
        self.exc_type = exc_type
        self.rank_traceback = rank_traceback
        self.outcomes = outcomes
        self.mismatch = None
        self.backend_log = []

    def _render_traceback_(self):
        # IPython shows this instead of the launcher's own frames: the learner sees their code.
        return str(self).splitlines()


class LaunchTimeout(LaunchError):
    """The launch ran past ``timeout`` seconds.

    Attributes:
        pending: ranks (list of int) that had not finished.
        outcomes: ``{rank: str}`` what happened to every rank.
        backend_log: the lines the backend's C++ code logged (see :class:`RankError`).
    """

    def __init__(self, message, pending, outcomes):
        super().__init__(message)
        self.pending = pending
        self.outcomes = outcomes
        self.backend_log = []

    def _render_traceback_(self):
        return str(self).splitlines()


class LaunchResults(list):
    """The per-rank results of ``launch(..., record_calls=True)``: a ``list`` (rank order, equal
    to the plain list ``launch`` returns otherwise) with the calls each rank made.

    Attributes:
        calls: one list per rank (rank order) of :class:`CallRecord`, the torch.distributed calls
            that rank's function made, in the order it made them. Calls torch makes internally
            (``broadcast_object_list`` calling ``broadcast``) and collnb's own set-up are not
            included.
    """

    def __init__(self, results=(), calls=None):
        super().__init__(results)
        self.calls = calls if calls is not None else [[] for _ in self]


# ----------------------------------------------------------------------------------------------
# Backend availability


def backend_info(backend: str) -> dict:
    """Tell whether ``backend`` can run here, without starting any rank.

    Returns:
        ``{"backend": str, "available": bool, "max_world_size": int, "reason": str}``; ``reason``
        says why it cannot run (empty when it can). For NCCL ``max_world_size`` is the visible GPU
        count (NCCL rejects two ranks on one GPU); for Gloo it is :data:`MAX_WORLD_SIZE`.

    Raises:
        ValueError: ``backend`` is not one of :data:`BACKENDS`.
    """
    if _remote is not None:  # collnb.connect(): the engines' answer
        return _remote.backend_info(backend)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "gloo":
        if not dist.is_gloo_available():
            return dict(backend=backend, available=False, max_world_size=0,
                        reason="this torch build has no Gloo backend")
        return dict(backend=backend, available=True, max_world_size=MAX_WORLD_SIZE, reason="")
    if not torch.cuda.is_available():
        return dict(backend=backend, available=False, max_world_size=0,
                    reason="NCCL needs CUDA GPUs and this torch sees none "
                           f"(torch {torch.__version__}, cuda={torch.version.cuda}); use backend='gloo'")
    if not dist.is_nccl_available():
        return dict(backend=backend, available=False, max_world_size=0,
                    reason="this torch build has no NCCL backend; use backend='gloo'")
    n = torch.cuda.device_count()
    return dict(backend=backend, available=True, max_world_size=min(n, MAX_WORLD_SIZE), reason="")


def _check_request(fn, world_size, backend, start_method):
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(rank, world_size, *args); got {type(fn).__name__} {fn!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int from 1 to {MAX_WORLD_SIZE}; got {world_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be between 1 and {MAX_WORLD_SIZE} (one process per rank on "
                         f"this machine); got {world_size}")
    info = backend_info(backend)
    if not info["available"]:
        raise RuntimeError(f"backend {backend!r} cannot run here: {info['reason']}")
    if world_size > info["max_world_size"]:
        raise ValueError(f"world_size {world_size} needs {world_size} GPUs with backend {backend!r} "
                         f"(NCCL puts one rank per GPU), but only {info['max_world_size']} are visible; "
                         f"use world_size <= {info['max_world_size']} or backend='gloo'")
    if start_method not in ("fork", "spawn"):
        raise ValueError(f"start_method must be 'fork' or 'spawn' (ranks must be children of this "
                         f"process, which forkserver's are not); got {start_method!r}")
    if start_method == "fork" and backend == "nccl" and torch.cuda.is_initialized():
        raise RuntimeError("CUDA is already initialised in this process, and forked ranks cannot use it. "
                           "Restart the kernel and launch before touching CUDA, or pass start_method='spawn'")


# ----------------------------------------------------------------------------------------------
# The rank side


def _to_cpu(obj):
    """Every tensor in a nested list/tuple/dict as a plain, detached CPU tensor; the containers
    keep their types (namedtuple, ``torch.Size``, ``OrderedDict``, ``defaultdict``...). The
    pickler then copies each tensor's bytes, so the launcher gets real snapshots."""
    if isinstance(obj, torch.Tensor):
        if (type(obj) is torch.Tensor and obj.device.type == "cpu" and not obj.requires_grad) \
                or obj.device.type == "meta":  # a meta tensor has no data to copy: it travels as it is
            return obj
        return obj.detach().to("cpu")
    if type(obj) is list:
        return [_to_cpu(x) for x in obj]
    if type(obj) is tuple:
        return tuple(_to_cpu(x) for x in obj)
    if type(obj) is dict:
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, dict)) and not isinstance(obj, torch.Size):
        try:  # a subclass: rebuild the same type
            if isinstance(obj, tuple):
                values = [_to_cpu(x) for x in obj]
                return type(obj)._make(values) if hasattr(type(obj), "_make") else type(obj)(values)
            new = copy.copy(obj)
            if isinstance(obj, list):
                new[:] = [_to_cpu(x) for x in obj]
            else:
                for k in list(new):
                    new[k] = _to_cpu(new[k])
            return new
        except Exception:  # noqa: BLE001 - a container we cannot rebuild travels as it is
            return obj
    return obj


_COMM_MARKERS = ("Connection closed by peer", "Connection reset", "Broken pipe", "Timed out",
                 "timed out", "Timeout", "ECONNRESET", "EPIPE", "failed to pass monitoredBarrier",
                 "Socket Timeout", "connection refused", "Connection refused")


def _is_comm_error(exc: BaseException) -> bool:
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


_WORKER_FILE = os.path.abspath(__file__).rstrip("c")
_HOOKS_FILE = os.path.abspath(_dist_hooks.__file__).rstrip("c")
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_FAULT_LINE = re.compile(r'File "(.*)", line (\d+) in (\S+)')
_FINGERPRINT_NOISE = re.compile(r", TensorDeviceTypes=TensorOptions\((?:[^()]|\([^()]*\))*\)")


def _where(frames) -> str:
    """One line saying where a stack is: the collective it waits in and the user's frame."""
    if not frames:
        return ""
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
    in_torch = [f for f in frames if os.path.abspath(f[0]).startswith(_TORCH_DIR)
                and f[0].endswith("distributed_c10d.py")]
    at = user[-1] if user else frames[-1]
    where = f'File "{at[0]}", line {at[1]}, in {at[2]}'
    if in_torch:
        return f"waiting in {in_torch[-1][2]}, called from {where}"
    return f"at {where}"


def _frames(tb) -> list:
    """The traceback's frames as plain tuples, without the launcher's own frames."""
    return _user_frames([(f.filename, f.lineno, f.name, f.line) for f in traceback.extract_tb(tb)])


def _user_frames(frames):
    """Drop every frame up to the launcher's call of the user's function (outermost first), and
    the frames of collnb's wrappers of torch.distributed (the learner called torch, not us).
    A forked rank's stack still holds the parent's frames that forked it."""
    mine = [i for i, f in enumerate(frames) if os.path.abspath(f[0]) == _WORKER_FILE]
    frames = frames[mine[-1] + 1:] if mine else frames
    return [f for f in frames if os.path.abspath(f[0]) != _HOOKS_FILE]


def _iter_functions(fn, limit=200):
    """``fn`` plus the functions it can reach through its globals and closure that cloudpickle
    ships by value (those defined in the same module as ``fn``, e.g. a notebook's ``__main__``)."""
    seen, todo, out = set(), [fn], []
    while todo and len(out) < limit:
        f = todo.pop()
        f = getattr(f, "__func__", f)
        if not isinstance(f, types.FunctionType) or id(f) in seen:
            continue
        seen.add(id(f))
        out.append(f)
        mod = f.__module__
        names = set(f.__code__.co_names)
        for name in names:
            g = f.__globals__.get(name)
            if isinstance(g, types.FunctionType) and g.__module__ == mod:
                todo.append(g)
        for cell in f.__closure__ or ():
            try:
                if isinstance(cell.cell_contents, types.FunctionType):
                    todo.append(cell.cell_contents)
            except ValueError:
                pass
    return out


def _iter_codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _iter_codes(const)


def _code_files(fn) -> dict:
    """``{(co_name, co_firstlineno): co_filename}`` for code cloudpickle will ship (it erases
    filenames to ``<dynamic-code>``; we put them back so tracebacks show the learner's cell)."""
    return {(c.co_name, c.co_firstlineno): c.co_filename
            for f in _iter_functions(fn) for c in _iter_codes(f.__code__)}


def _with_files(code, files):
    consts = tuple(_with_files(c, files) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    name = files.get((code.co_name, code.co_firstlineno), code.co_filename)
    return code.replace(co_filename=name, co_consts=consts)


def _restore_files(fn, files):
    for f in _iter_functions(fn):
        try:
            f.__code__ = _with_files(f.__code__, files)
        except (ValueError, TypeError):
            pass


def _descendants(pids):
    """psutil.Process objects of every live descendant of the processes ``pids`` (also those
    that started a session of their own, which a process-group kill misses). One scan of /proc."""
    children = {}
    for p in psutil.process_iter(["ppid"]):
        children.setdefault(p.info["ppid"], []).append(p)
    found, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def _kill_all(procs):
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def _exit_group():
    """End this rank and every process it started (its process group, and descendants that
    left it with setsid / start_new_session)."""
    try:
        _kill_all(_descendants([os.getpid()]))
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _on_sigterm(cfg):
    """SIGTERM in a rank: when the parent is gone, clean up as the watchdog does; otherwise die
    of SIGTERM as usual (so the launcher reports "killed by SIGTERM")."""
    if os.getpid() == cfg["rank_pid"] and os.getppid() != cfg["parent_pid"]:
        shutil.rmtree(cfg["dir"], ignore_errors=True)
        _exit_group()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


_fork_mask = threading.local()


def _hold_sigterm():
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _fork_mask.was_blocked = signal.SIGTERM in old


def _release_sigterm():
    if not getattr(_fork_mask, "was_blocked", False):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _default_sigterm():
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:
        pass
    _release_sigterm()


def _watch_parent(parent_pid, pool_dir, period=0.2):
    """Rank-side watchdog thread: when the parent (the kernel) is gone, remove the pool's files
    and exit. A thread, not PR_SET_PDEATHSIG=SIGKILL, so the files go too; it runs even while
    the main thread is blocked in a collective (gloo releases the GIL)."""
    def watch():
        while os.getppid() == parent_pid:
            time.sleep(period)
        shutil.rmtree(pool_dir, ignore_errors=True)
        _exit_group()
    threading.Thread(target=watch, name="collnb-parent-watch", daemon=True).start()


def _rank_main(rank, cfg, cmd_r, res_w, out_w, err_w, close_fds):
    """Entry point of a rank process. Never returns: ends with ``os._exit``."""
    code = 0
    try:
        # Our own process group: a kernel manager that kills the kernel's group on shutdown
        # would otherwise kill us before we remove our files. The watchdog ends us instead.
        os.setpgid(0, 0)
        _watch_parent(cfg["parent_pid"], cfg["dir"])
        cfg = dict(cfg, rank_pid=os.getpid())
        signal.signal(signal.SIGTERM, lambda *_: _on_sigterm(cfg))
        # Processes the rank forks (a multiprocessing.Pool in the learner's function) must die of
        # SIGTERM as usual. Inheriting our Python-level handler, a child loses a SIGTERM that lands
        # before Python's after-fork clean-up (seen: Pool.terminate() hung on a worker that had
        # not started yet, 1 launch in ~80 under load). SIGTERM stays blocked across the fork;
        # the child restores the default action, then unblocks (a pending one then kills it).
        os.register_at_fork(before=_hold_sigterm, after_in_parent=_release_sigterm,
                            after_in_child=_default_sigterm)
        global _pool
        _pool = None  # the parent's warm pool is not ours to use
        if cfg["start_method"] == "fork":
            # A forked rank inherits every descriptor of its parent. Close the parent's ends of
            # other ranks' pipes (they would hide EOFs) and every inherited socket (in a kernel,
            # Jupyter's own). Other pipes stay: multiprocessing's liveness sentinel is one.
            keep = {cmd_r.fileno(), res_w.fileno(), out_w.fileno(), err_w.fileno()}
            inherited = set(close_fds)
            try:
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                            inherited.add(int(fd))
                    except OSError:
                        pass
            except OSError:
                pass
            for fd in inherited - keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel stops us on Kernel -> Interrupt
        os.dup2(out_w.fileno(), 1)
        os.dup2(err_w.fileno(), 2)
        out_w.close()
        err_w.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False),
                                      encoding="utf-8", line_buffering=True, write_through=True)
        stack_file = open(os.path.join(cfg["dir"], f"stack-{rank}.txt"), "w")
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
        faulthandler.enable(file=sys.stderr, all_threads=False)  # a crashing rank shows its stack
        torch.set_num_threads(1)
        _restore_environment(cfg)
        store = dist.FileStore(os.path.join(cfg["dir"], "store"), -1)
        _rank_loop(rank, cfg, store, cmd_r, res_w)
    except BaseException:  # noqa: BLE001 - report anything that kills the loop itself
        code = 1
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except Exception:
            pass
    finally:
        _fflush_c()
        os._exit(code)


def _rebuild_tensor(data, dtype_name, shape, requires_grad=False, parameter=False):
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    t = flat.view(getattr(torch, dtype_name)).reshape(shape)
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_storage(data):
    return torch.UntypedStorage.from_buffer(bytearray(data), dtype=torch.uint8) if data \
        else torch.UntypedStorage(0)


class _Unsendable(TypeError):
    """A tensor flavour that cannot leave its process; the message says which and what instead."""


def _unsendable_tensor(obj):
    """Why ``obj`` (a tensor) cannot be serialised and what to send instead, or ``""``."""
    if obj.layout == torch._mkldnn:
        return ("an MKL-DNN tensor (layout torch._mkldnn: opaque memory that neither pickle nor torch.save "
                "can copy); send t.to_dense() instead")
    if type(obj).__name__ == "DTensor":
        return ("a DTensor (a tensor sharded over a DeviceMesh, tied to this rank's process groups); "
                "send t.to_local() (this rank's shard) or t.full_tensor() (the whole tensor) instead")
    if type(obj).__name__ in ("FakeTensor", "FunctionalTensor"):
        return f"a {type(obj).__name__} (it has no data); send a real tensor instead"
    return ""


class _Pickler(cloudpickle.Pickler):
    """cloudpickle (functions and classes defined in a cell travel by value) that sends dense
    tensors as raw bytes plus dtype and shape: a real copy, fast, and for every dtype (plain
    pickle cannot rebuild uint16/32/64 or float8 tensors in torch 2.13). Conjugate and negative
    views are resolved first (their bytes are not their values); ``nn.Parameter`` and a leaf's
    ``requires_grad`` are kept, as pickle keeps them (a non-leaf that requires grad, which pickle
    refuses, arrives detached: no autograd graph crosses processes). Other flavours (sparse,
    quantized, nested, meta, tensor subclasses) travel the way pickle sends them; untyped
    storages as their bytes. MKL-DNN tensors and DTensors raise :class:`_Unsendable` saying what
    to send instead."""

    def reducer_override(self, obj):
        if isinstance(obj, torch.Tensor):
            kind = type(obj)
            if (kind is torch.Tensor or kind is torch.nn.Parameter) and obj.layout == torch.strided \
                    and not obj.is_quantized and not obj.is_nested and obj.device.type != "meta":
                t = obj.detach().to("cpu").resolve_conj().resolve_neg()
                flat = t.reshape(-1)
                if flat.numel() and flat.stride(0) != 1:  # e.g. one element at stride 2 (z.imag)
                    flat = flat.clone(memory_format=torch.contiguous_format)
                data = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
                return _rebuild_tensor, (data, str(t.dtype).removeprefix("torch."), tuple(t.shape),
                                         bool(obj.requires_grad and obj.is_leaf), kind is torch.nn.Parameter)
            why = _unsendable_tensor(obj)
            if why:
                raise _Unsendable(why)
        elif type(obj) is torch.UntypedStorage and obj.device.type == "cpu":
            # plain pickle fails on an untyped storage in torch 2.13 (AttributeError: ... 'dtype')
            return _rebuild_storage, (bytes(obj),)
        return super().reducer_override(obj)


def _dumps(obj) -> bytes:
    """Serialise a task or a result (see :class:`_Pickler`)."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _loads(data: bytes):
    return pickle.loads(data)


_libc = None


def _fflush_c():
    """Flush C stdio buffers (output printed by C/C++ code in the rank)."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None)
        _libc.fflush(None)
    except Exception:
        pass


def _sequence_number():
    """How many collectives and point-to-point operations this rank has issued on its default
    group. Ranks that sent/received unevenly disagree, and with TORCH_DISTRIBUTED_DEBUG=DETAIL
    the next collective on that group would fail its fingerprint check."""
    try:
        return dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
    except Exception:
        return None


def _send(conn, msg):
    conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def _rank_loop(rank, cfg, store, cmd_r, res_w):
    backend = cfg["backend"]
    c10d = dist.distributed_c10d
    base = None      # the pool's default process group (all ranks of the pool)
    groups = {}      # world size k -> cached group of ranks 0..k-1
    world_size = 0
    my_pid = os.getpid()
    saved = _save_rank_state()
    while True:
        try:
            msg = pickle.loads(cmd_r.recv_bytes())
        except EOFError:  # the parent is gone (or closed the pool): leave nothing behind
            shutil.rmtree(cfg["dir"], ignore_errors=True)
            _exit_group()
        kind = msg[0]
        if kind == "exit":
            _destroy_all_groups(base)
            return
        if kind == "init":
            _, gen, world_size = msg
            t0 = time.perf_counter()
            _destroy_all_groups(base)
            base, groups = None, {}
            _restore_environment(cfg)  # a function may have changed GLOO_SOCKET_IFNAME & co.
            if rank < world_size:
                try:
                    if backend == "nccl":
                        torch.cuda.set_device(rank)
                    dist.init_process_group(
                        backend, store=dist.PrefixStore(f"gen{gen}", store), rank=rank,
                        world_size=world_size, timeout=datetime.timedelta(seconds=cfg["collective_timeout"]))
                except Exception as exc:  # noqa: BLE001 - reported like a failure of the function
                    _report_error(res_w, exc, rank)
                    _idle_forever()
                base = c10d._get_default_group()
                groups = {world_size: base}
            _send(res_w, ("ready", gen, time.perf_counter() - t0))
            continue
        if kind == "group":
            # A cached group of ranks 0..k-1; every rank of the pool takes part, as new_group needs.
            _, k, count = msg
            t0 = time.perf_counter()
            c10d._update_default_pg(base)
            c10d._world.group_count = count
            groups[k] = dist.new_group(list(range(k)),
                                       timeout=datetime.timedelta(seconds=cfg["collective_timeout"]))
            _send(res_w, ("ready", k, time.perf_counter() - t0))
            continue
        if kind == "run":
            _, world_size, count, task, options = msg
            # Groups the user's function creates are named from this counter: start every rank
            # of this call at the same value, whatever groups earlier calls made on some ranks.
            c10d._world.group_count = count
            if groups.get(world_size) is not base:
                # Ranks 0..k-1 see the cached group as their default process group, so
                # dist.get_world_size() == k and collectives without group= use it.
                c10d._update_default_pg(groups[world_size])
            elif c10d._get_default_group() is not base:
                c10d._update_default_pg(base)
            try:
                # torch.distributed's functions, wrapped for this call only: layouts gloo misreads
                # are given dense copies, groups the function makes get collective_timeout, and
                # the function's own calls are recorded when asked (see collnb._dist_hooks).
                _dist_hooks.install(record=options.get("record_calls", False), check_layout=True,
                                    group_timeout=cfg["collective_timeout"])
                fn, args, kwargs, files = _loads(task)
                _restore_files(fn, files)
                before = set(c10d._world.pg_map)
                # Groups the function creates keep their rendezvous keys under a prefix of this
                # call's own, so a re-run (same group names: hashed from ranks) starts clean.
                default = c10d._get_default_group()
                default_entry = c10d._world.pg_map[default]
                c10d._world.pg_map[default] = (default_entry[0],
                                               dist.PrefixStore(f"call{count}/", default_entry[1]))
                try:
                    result = fn(rank, world_size, *args, **kwargs)
                finally:
                    _dist_hooks.pause()
                    if default in c10d._world.pg_map:
                        c10d._world.pg_map[default] = default_entry
                    if os.getpid() == my_pid:
                        _restore_rank_state(saved)
                if os.getpid() != my_pid:  # a process the function forked returned into our loop
                    _leave_forked_child(0)
                if backend == "nccl":
                    torch.cuda.synchronize()
                try:
                    payload = _dumps(_to_cpu(result))
                except _Unsendable as exc:
                    raise TypeError(f"rank {rank}'s function returned {exc}") from None
                except Exception as exc:
                    raise TypeError(
                        f"rank {rank}'s function returned a {type(result).__name__} that cannot be sent back "
                        f"to the launcher ({type(exc).__name__}: {exc}). Return tensors, numbers, strings, "
                        f"or lists/tuples/dicts of them; wait on Work handles (work.wait()) inside the "
                        f"function instead of returning them") from exc
                calls = _dist_hooks.take_records() if options.get("record_calls") else None
                seq = _sequence_number()
                intact = dist.is_initialized() and all(g in c10d._world.pg_map for g in groups.values()
                                                       if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER)
                if intact:  # groups the function made end with the call, as in a fresh script
                    for g in set(c10d._world.pg_map) - before:
                        dist.destroy_process_group(g)
                sys.stdout.flush(), sys.stderr.flush(), _fflush_c()
                res_w.send_bytes(pickle.dumps(("ok", payload, seq, intact, calls),
                                              protocol=pickle.HIGHEST_PROTOCOL))
            except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are rank failures too
                _dist_hooks.pause()
                if os.getpid() != my_pid:  # a process the function forked raised or exited
                    if isinstance(exc, SystemExit):
                        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                    else:
                        code = 1
                        traceback.print_exc()
                    _leave_forked_child(code)
                _report_error(res_w, exc, rank)
                _idle_forever()


def _destroy_all_groups(base):
    """Destroy every process group of this rank: the pool's (``base``, made the default again
    so torch's bookkeeping agrees) and any the function made, even a default group of its own."""
    c10d = dist.distributed_c10d
    if not dist.is_initialized():
        return
    if base is not None and base in c10d._world.pg_map and hasattr(c10d, "_update_default_pg"):
        c10d._update_default_pg(base)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - torch's records disagree: destroy what is there, one by one
        for g in list(c10d._world.pg_map):
            try:
                dist.destroy_process_group(g)
            except Exception:  # noqa: BLE001
                pass
        if hasattr(c10d, "_update_default_pg"):
            c10d._update_default_pg(None)


def _restore_environment(cfg):
    os.environ["GLOO_SOCKET_IFNAME"] = cfg["ifname"]
    os.environ["NCCL_SOCKET_IFNAME"] = cfg["ifname"]
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL" if cfg["debug"] else "OFF"
    dist.set_debug_level_from_env()


def _save_rank_state():
    """What a call may change and the next call must find as it was (a warm rank is a fresh
    script to each call): the output streams and their descriptors, the working directory."""
    return dict(stdout=sys.stdout, stderr=sys.stderr, fd1=os.dup(1), fd2=os.dup(2), cwd=os.getcwd())


def _restore_rank_state(saved):
    """Undo a call's changes to the rank's process state (see :func:`_save_rank_state`): a
    replaced or closed ``sys.stdout``, closed or redirected fds 1 and 2, a pending
    ``signal.alarm``, another working directory or thread count."""
    sys.stdout, sys.stderr = saved["stdout"], saved["stderr"]
    for fd, copy_of in ((1, saved["fd1"]), (2, saved["fd2"])):
        try:
            if not os.path.samestat(os.fstat(fd), os.fstat(copy_of)):
                os.dup2(copy_of, fd)
        except OSError:  # closed
            os.dup2(copy_of, fd)
    signal.setitimer(signal.ITIMER_REAL, 0)  # also cancels signal.alarm()
    try:
        if os.getcwd() != saved["cwd"]:
            os.chdir(saved["cwd"])
    except OSError:  # the function removed the directory it moved to
        os.chdir(saved["cwd"])
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _leave_forked_child(code):
    """End a process the learner's function forked that came back into the rank's loop: it must
    not answer the launcher for the rank."""
    try:
        sys.stdout.flush(), sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


def _report_error(res_w, exc, rank):
    """Send a rank's exception to the launcher: type, message, frames, whether it is a
    communication error (a consequence of another rank's failure)."""
    sys.stdout.flush(), sys.stderr.flush(), _fflush_c()
    if isinstance(exc, SystemExit):
        text = f"sys.exit({exc.code!r}) called in rank {rank}"
    else:
        try:
            text = str(exc)
        except Exception as inner:  # noqa: BLE001 - an exception whose __str__ raises
            text = f"<the exception's message could not be shown: {type(inner).__name__}: {inner}>"
    _send(res_w, ("error", type(exc).__name__, text, _frames(exc.__traceback__), _is_comm_error(exc),
                  getattr(exc, "collnb_timeout", "")))


def _idle_forever():
    """Stay alive and idle after a failure: the launcher stops every rank, so peers blocked in a
    collective do not pile "connection closed" errors on top of the root cause."""
    while True:
        time.sleep(3600)


# ----------------------------------------------------------------------------------------------
# The parent side


@dataclass
class _Rank:
    rank: int
    proc: Any
    cmd_w: Any
    res_r: Any
    out_r: Any
    err_r: Any
    partial: dict = field(default_factory=lambda: {1: bytearray(), 2: bytearray()})
    in_log: bool = False  # the last stderr line was a C++ log line (its continuation lines follow)


@dataclass
class _Event:
    rank: int
    kind: str          # "ok", "error", "died"
    t: float
    exc_type: str = ""
    message: str = ""
    frames: list = field(default_factory=list)
    comm: bool = False
    value: Any = None
    seq: Any = None
    intact: bool = True
    calls: Any = None
    timeout_name: str = ""  # which timeout fired, in words (communication errors only)


def _sweep_stale_dirs():
    """Remove pool directories left by processes that no longer exist (a killed kernel)."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(_TMP_PREFIX):
            continue
        try:
            pid = int(name[len(_TMP_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except PermissionError:
            pass


def _format_frames(frames) -> str:
    """Format frames as Python does, filling source lines from this process's linecache
    (IPython registers notebook cells there, so a rank's traceback shows the cell's code)."""
    cells = _ipython_cells()
    filled = []
    for filename, lineno, name, line in frames:
        if not line:
            line = linecache.getline(filename, lineno).strip()
        if filename in cells:  # IPython's own way of naming a cell: "Cell In[7]"
            filename = f"Cell In[{cells[filename]}]"
        filled.append((filename, lineno, name, line))
    return "".join(traceback.StackSummary.from_list(filled).format())


def _ipython_cells() -> dict:
    """``{filename: execution count}`` of the cells IPython compiled, or ``{}`` outside IPython."""
    try:
        ip = sys.modules["IPython"].get_ipython()
        return dict(ip.compile._filename_map)
    except Exception:
        return {}


class RankPool:
    """A set of warm rank processes sharing one private FileStore.

    Args:
        backend: ``"gloo"`` or ``"nccl"``.
        debug: run ranks with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (checks that every rank calls the
            same collective with the same shapes/dtypes; turn off for benchmarks).
        collective_timeout: process-group timeout in seconds: how long a rank waits in a
            collective for a peer before it fails.
        start_method: ``"fork"`` (fast: ~0.1 s per rank, ~5 MB each) or
            ``"spawn"`` (each rank imports torch: ~1.5 CPU-s and ~150 MB per rank).

    The pool's ranks form one default process group of ``base_size`` ranks, grown in steps of
    4, 8, 16 to the largest world size asked of it (fork + rendezvous). A call at a smaller world
    size ``k`` runs on ranks ``0..k-1`` inside a cached ``new_group`` of those ranks, which they
    see as their default group: ``dist.get_world_size() == k``, and collectives without
    ``group=`` use it. Creating a cached group costs a few ms once; re-initialising the default
    group instead costs 35–110 ms per change at world size <= 8 (measured on 2 cores).
    """

    def __init__(self, backend="gloo", debug=True, collective_timeout=5.0, start_method="fork"):
        self.backend = backend
        self.debug = bool(debug)
        self.collective_timeout = float(collective_timeout)
        self.start_method = start_method
        self.ranks: list[_Rank] = []
        self.base_size = 0   # size of the pool's default process group
        self.groups = set()  # world sizes with a cached group of ranks 0..k-1
        self._group_count = 0
        # Cached groups are made the ranks' default group through torch's _update_default_pg;
        # without it, each new world size re-initialises the default group (35-110 ms).
        self.swap = hasattr(dist.distributed_c10d, "_update_default_pg")
        self.max_size = backend_info(backend)["max_world_size"] or MAX_WORLD_SIZE
        self.generation = 0
        self.broken = False
        self.show_backend_log = False
        self.backend_log = []  # C++ log lines of the current call (see _emit)
        self.lock = threading.Lock()
        self._ctx = tmp.get_context(start_method)
        _sweep_stale_dirs()
        self.dir = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-")

    # -- life cycle --------------------------------------------------------------------------
    @property
    def key(self):
        return (self.backend, self.debug, self.collective_timeout, self.start_method)

    def pids(self) -> list:
        """PIDs (list of int) of the live rank processes, in rank order."""
        return [r.proc.pid for r in self.ranks if r.proc.is_alive()]

    def dead_ranks(self) -> dict:
        """``{rank: what happened}`` for rank processes that are no longer alive (e.g. killed by
        the OOM killer while the pool was idle); empty when every rank is alive."""
        return {r.rank: _death_text(r.proc.exitcode) for r in self.ranks if not r.proc.is_alive()}

    def _grow(self, n):
        with _sigint_deferred():
            self._fork_ranks(n)

    def _fork_ranks(self, n):
        cfg = dict(dir=self.dir, backend=self.backend, debug=self.debug, ifname="lo",
                   start_method=self.start_method,
                   collective_timeout=self.collective_timeout, parent_pid=os.getpid())
        for rank in range(len(self.ranks), n):
            cmd_r, cmd_w = self._ctx.Pipe(duplex=False)
            res_r, res_w = self._ctx.Pipe(duplex=False)
            out_r, out_w = self._ctx.Pipe(duplex=False)
            err_r, err_w = self._ctx.Pipe(duplex=False)
            close_fds = [c.fileno() for r in self.ranks for c in (r.cmd_w, r.res_r, r.out_r, r.err_r)]
            close_fds += [cmd_w.fileno(), res_r.fileno(), out_r.fileno(), err_r.fileno()]
            if self.start_method != "fork":
                close_fds = []
            proc = self._ctx.Process(target=_rank_main, name=f"collnb-rank{rank}",
                                     args=(rank, cfg, cmd_r, res_w, out_w, err_w, close_fds),
                                     # not daemonic, so a rank may start processes of its own
                                     # (DataLoader workers); shutdown() stops ranks at exit
                                     daemon=False)
            # Objects the rank inherits are never garbage-collected there: a cycle that was
            # garbage here (a socket, a pipe's Connection, a zmq context of the kernel) would
            # otherwise close its fd *number* at a random time in the rank, by then gloo's epoll
            # or socket fd (seen: gloo abort "loop.cc:212 nfds != -1"). gc.freeze() is O(1).
            thaw = gc.get_freeze_count() == 0  # leave objects the kernel's own code froze frozen
            gc.freeze()
            try:
                proc.start()
            finally:
                if thaw:
                    gc.unfreeze()
            for c in (cmd_r, res_w, out_w, err_w):
                c.close()
            for c in (out_r, err_r):
                os.set_blocking(c.fileno(), False)
            self.ranks.append(_Rank(rank, proc, cmd_w, res_r, out_r, err_r))

    def _all_conns(self, ranks):
        return [r.res_r for r in ranks] + [r.out_r for r in ranks] + [r.err_r for r in ranks] + \
               [r.proc.sentinel for r in ranks]

    def close(self):
        """Stop every rank and every process it started (SIGKILL), reap them, and remove the
        pool's files."""
        pids = [r.proc.pid for r in self.ranks if r.proc.pid is not None and r.proc.exitcode is None]
        strays = _descendants(pids) if pids else []  # found before the ranks die and they re-parent
        for r in self.ranks:
            pid = r.proc.pid
            if pid is None:
                continue
            try:  # the rank's own process group: it and whatever it started
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass
        _kill_all(strays)
        deadline = time.monotonic() + 5
        for r in self.ranks:
            # Reap through waitpid (exitcode), not join(): a process the rank forked may hold a
            # copy of the rank's sentinel pipe, and join() would wait for that process too.
            while r.proc.pid is not None and r.proc.exitcode is None and time.monotonic() < deadline:
                time.sleep(0.005)
            for c in (r.cmd_w, r.res_r, r.out_r, r.err_r):
                try:
                    c.close()
                except Exception:
                    pass
        self.ranks = []
        self.base_size, self.groups = 0, set()
        self.broken = True
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- output ------------------------------------------------------------------------------
    def _pump_output(self, r: _Rank, conn, final=False):
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
            self._emit(r.rank, fd_kind, bytes(pending).split(b"\n"))
            r.partial[fd_kind] = bytearray(data[end + 1:])
        if final and r.partial[fd_kind]:
            self._emit(r.rank, fd_kind, [bytes(r.partial[fd_kind])])
            r.partial[fd_kind] = bytearray()

    def _emit(self, rank, fd_kind, lines):
        if not lines:
            return
        stream = sys.stdout if fd_kind == 1 else sys.stderr
        shown = [f"[rank {rank}] {ln.decode('utf-8', 'replace')}\n" for ln in lines]
        if fd_kind == 2 and not self.show_backend_log:
            # torch's / gloo's C++ log lines ("[rank0]:[E1130 ... ProcessGroupGloo.cpp:2901] ...")
            # repeat what the launcher reports as one clear error: keep them for the error
            r = self.ranks[rank] if rank < len(self.ranks) else None
            keep = []
            for line, text in zip(lines, shown):
                held = _CPP_LOG.match(line) is not None or (
                    r is not None and r.in_log and _CPP_LOG_MORE.match(line) is not None)
                if r is not None:
                    r.in_log = held
                (self.backend_log if held else keep).append(text.rstrip("\n"))
            shown = [t + "\n" for t in keep]
        if shown:
            stream.write("".join(shown))
            stream.flush()

    def _release_backend_log(self):
        """Write the held C++ log lines to stderr (a call that ended without an error to attach
        them to, or was interrupted) and forget them."""
        if self.backend_log:
            sys.stderr.write("".join(line + "\n" for line in self.backend_log))
            sys.stderr.flush()
        self.backend_log = []

    def _drain(self, ranks, final=True):
        for r in ranks:
            self._pump_output(r, r.out_r, final)
            self._pump_output(r, r.err_r, final)

    # -- running -----------------------------------------------------------------------------
    def run(self, fn, world_size, args=(), kwargs=None, timeout=60.0, record_calls=False,
            show_backend_log=False):
        """Run ``fn(rank, world_size, *args, **kwargs)`` on ranks ``0..world_size-1``.

        Returns the per-rank results (list, rank order; a :class:`LaunchResults` with ``.calls``
        when ``record_calls``). C++ log lines of the backend are printed as they come when
        ``show_backend_log``, else attached to the error (or printed at the end when there is
        none). Raises :class:`RankError`,
        :class:`LaunchTimeout` or re-raises ``KeyboardInterrupt`` after stopping every rank; in
        each case the pool is closed and must not be reused.
        """
        if self.broken:
            raise LaunchError("this pool was closed after a failure; start a new one")
        self.show_backend_log, self.backend_log = bool(show_backend_log), []
        deadline = time.monotonic() + timeout
        try:
            task = _dumps((fn, tuple(args), dict(kwargs or {}), _code_files(fn)))
        except _Unsendable as exc:
            raise TypeError(f"cannot send {exc.args[0].replace('; send', ' to the ranks; pass', 1)}") from None
        except Exception as exc:
            raise TypeError(f"cannot send {fn!r} and its arguments to the ranks: {exc}") from exc
        try:
            self._prepare(world_size, deadline)
            self._drain(self.ranks, final=False)
            options = {"record_calls": bool(record_calls)}
            message = pickle.dumps(("run", world_size, self._next_count(), task, options),
                                   protocol=pickle.HIGHEST_PROTOCOL)
            for r in self.ranks[:world_size]:
                try:
                    r.cmd_w.send_bytes(message)
                except OSError:  # the rank just died: _collect reports how (RankError "rank R: Killed")
                    pass
            results = self._collect(self.ranks[:world_size], deadline, phase="run")
            self._release_backend_log()
            return results
        except (RankError, LaunchTimeout) as exc:
            self.close()
            self._attach_backend_log(exc)
            raise
        except BaseException:
            self.close()
            self._release_backend_log()
            raise

    def _attach_backend_log(self, exc):
        exc.backend_log, self.backend_log = self.backend_log, []
        if exc.backend_log:
            n = len(exc.backend_log)
            note = (f"\n\n({n} line{'s' if n > 1 else ''} logged by {self.backend}'s C++ code kept out of "
                    f"the output: print(*err.backend_log, sep='\\n') shows them; "
                    f"launch(..., show_backend_log=True) prints them as they come)")
            exc.args = (exc.args[0] + note,) + exc.args[1:]

    def _retire_group(self, world_size):
        """Stop using the group of ranks 0..world_size-1: its ranks issued different numbers of
        operations (uneven send/recv), so its next collective would fail the DETAIL check.
        The next call at this world size makes a fresh group (or re-initialises the pool)."""
        self.groups.discard(world_size)
        if world_size == self.base_size:
            self.base_size = 0

    def _next_count(self):
        """A fresh value for torch's group counter, the same on every rank of one call: group
        names stay unique and agree even after calls that created groups on some ranks only."""
        self._group_count += 1000
        return self._group_count

    def _prepare(self, world_size, deadline):
        """Make ranks 0..world_size-1 a process group: reuse a cached one, create one with
        ``new_group`` over the pool (a few ms), or grow the pool and initialise a new default
        group (fork + rendezvous) when it has fewer ranks than asked for."""
        if world_size > self.base_size or (not self.swap and world_size != self.base_size):
            size = world_size
            if self.swap:  # grow in steps (4, 8, 16) so that a slider sweep re-initialises rarely
                size = min(max(world_size, 4, 1 << (world_size - 1).bit_length(), len(self.ranks)),
                           self.max_size)
            if size > len(self.ranks):
                self._grow(size)
            self.generation += 1
            for r in self.ranks:
                _send(r.cmd_w, ("init", self.generation, size))
            self._collect(self.ranks, deadline, phase="init")
            self.base_size, self.groups = size, {size}
        if world_size not in self.groups:
            count = self._next_count()
            for r in self.ranks[:self.base_size]:
                _send(r.cmd_w, ("group", world_size, count))
            self._collect(self.ranks[:self.base_size], deadline, phase="init")
            self.groups.add(world_size)

    def _collect(self, ranks, deadline, phase):
        events: dict[int, _Event] = {}
        by_conn = {}
        for r in ranks:
            by_conn[id(r.res_r)] = ("res", r)
            by_conn[id(r.out_r)] = ("out", r)
            by_conn[id(r.err_r)] = ("err", r)
            by_conn[r.proc.sentinel] = ("dead", r)
        failure_at = None
        grace = 0.5
        polled = time.monotonic()
        while True:
            pending = [r for r in ranks if r.rank not in events]
            now = time.monotonic()
            if not pending:
                break
            if failure_at is not None and now - failure_at > grace:
                break
            if now > deadline:
                break
            waitables = [r.res_r for r in pending] + [r.proc.sentinel for r in pending]
            waitables += [c for r in ranks for c in (r.out_r, r.err_r)]
            limit = min(deadline, failure_at + grace if failure_at else deadline) - now
            ready = _mp_wait(waitables, timeout=max(0.0, min(limit, 0.25)))
            if not ready or time.monotonic() - polled > 0.25:
                # A process the rank forked may hold a copy of its sentinel (no EOF when the
                # rank dies): ask waitpid too, at most 4 times a second (off the fast path).
                polled = time.monotonic()
                for r in pending:
                    if r.proc.sentinel not in ready and r.proc.exitcode is not None:
                        ready.append(r.proc.sentinel)
            for obj in ready:
                key = obj if isinstance(obj, int) else id(obj)
                what, r = by_conn[key]
                if what in ("out", "err"):
                    self._pump_output(r, obj)
                elif what in ("res", "dead"):
                    if r.rank in events:
                        continue
                    msg = None
                    try:
                        if r.res_r.poll():
                            msg = pickle.loads(r.res_r.recv_bytes())
                    except (EOFError, OSError):
                        msg = None
                    t = time.monotonic()
                    if msg is None:
                        if what == "res" and r.proc.is_alive():
                            continue
                        r.proc.join(timeout=1)
                        events[r.rank] = _Event(r.rank, "died", t, value=r.proc.exitcode)
                        failure_at = failure_at or t
                    elif msg[0] == "ok":
                        events[r.rank] = _Event(r.rank, "ok", t, value=msg[1], seq=msg[2], intact=msg[3],
                                                calls=msg[4])
                    elif msg[0] == "ready":
                        events[r.rank] = _Event(r.rank, "ok", t, value=msg[2])
                    else:
                        _, et, text, frames, comm, timeout_name = msg
                        events[r.rank] = _Event(r.rank, "error", t, et, text, frames, comm,
                                                timeout_name=timeout_name or self._timeout_name(text))
                        failure_at = failure_at or t
        self._drain(ranks, final=True)
        failed = [e for e in events.values() if e.kind != "ok"]
        pending = [r.rank for r in ranks if r.rank not in events]
        if not failed and not pending:
            if phase == "init":
                return None
            if not all(events[r.rank].intact for r in ranks):
                # the function destroyed process groups (dist.destroy_process_group()):
                # the next call re-initialises the pool's groups
                self.base_size, self.groups = 0, set()
            elif len({events[r.rank].seq for r in ranks}) > 1:
                self._retire_group(len(ranks))
            results = [self._result(r.rank, events[r.rank].value) for r in ranks]
            if any(events[r.rank].calls is not None for r in ranks):
                return LaunchResults(results, [list(events[r.rank].calls or []) for r in ranks])
            return results
        stacks = self._stacks([r for r in ranks if r.rank in pending])
        cells = _ipython_cells()
        stacks = {k: ([(f"Cell In[{cells[f[0]]}]" if f[0] in cells else f[0],) + tuple(f[1:]) for f in v]
                      if isinstance(k, int) else v) for k, v in stacks.items()}
        if not failed:
            outcomes = self._outcomes(ranks, events, stacks, None)
            waiting = [r for r in pending if _where(stacks.get(r)).startswith("waiting in ")]
            finished = [r.rank for r in ranks if r.rank in events]
            if waiting and finished:
                # a group with a timeout= longer than the launch's: more time would not help
                advice = (f"rank(s) {', '.join(map(str, waiting))} were waiting in a collective that rank(s) "
                          f"{', '.join(map(str, finished))} never called (their functions had returned); every "
                          f"rank of a group must call the same collectives in the same order. A longer timeout "
                          f"will not help: the group's own timeout= was longer than the launch's")
            else:
                advice = "raise the limit with launch(..., timeout=SECONDS)"
            raise LaunchTimeout(
                f"timed out during {phase}: rank(s) {', '.join(map(str, pending))} had not finished "
                f"({advice})\n" + self._outcome_text(outcomes),
                pending, outcomes)
        root = self._root_cause(failed, events, pending, stacks)
        outcomes = self._outcomes(ranks, events, stacks, root)
        raise self._rank_error(root, outcomes, phase)

    @staticmethod
    def _result(rank, payload):
        try:
            return _loads(payload)
        except Exception as exc:  # noqa: BLE001 - e.g. a class whose __setstate__ fails here
            raise RankError(
                f"rank {rank}: {type(exc).__name__}: rank {rank}'s return value was sent but could not be "
                f"rebuilt in the launcher ({exc}). Return tensors, numbers, strings, or lists/tuples/dicts "
                f"of them", rank, type(exc).__name__, "", {rank: "finished; its result could not be rebuilt"}) \
                from exc

    def _stacks(self, ranks):
        """Ask still-running ranks where they are (:mod:`faulthandler` on SIGUSR1).

        Returns ``{rank: [(filename, lineno, name, None), ...]}``, outermost call first, without
        the launcher's own frames.
        """
        stacks = {}
        if not ranks:
            return stacks
        for r in ranks:
            try:
                os.truncate(os.path.join(self.dir, f"stack-{r.rank}.txt"), 0)
                os.kill(r.proc.pid, signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(0.15)
        for r in ranks:
            try:
                status = psutil.Process(r.proc.pid).status()
            except psutil.Error:
                status = ""
            if status == psutil.STATUS_STOPPED:
                stacks[("state", r.rank)] = "was stopped (SIGSTOP), so it could not say where it was"
            elif status:
                stacks[("state", r.rank)] = (f"did not say where it was (process state: {status}; "
                                             "stuck outside Python?)")
            try:
                with open(os.path.join(self.dir, f"stack-{r.rank}.txt")) as fh:
                    text = fh.read()
            except OSError:
                text = ""
            frames = []
            for m in _FAULT_LINE.finditer(text):
                frames.append((m.group(1), int(m.group(2)), m.group(3), None))
            frames.reverse()
            stacks[r.rank] = _user_frames(frames)
        return stacks

    def _timeout_name(self, text):
        """Which timeout a communication error reports, in words, from its message ("... in 2000
        ms", "Timed out waiting 5000ms"); ``""`` when it names none."""
        m = _TIMEOUT_MS.search(text or "")
        if not m:
            return ""
        seconds = int(m.group(1) or m.group(2)) / 1000
        if math.isclose(seconds, self.collective_timeout, rel_tol=1e-3):
            return f"collective_timeout ({self.collective_timeout:g} s)"
        return f"a timeout of {seconds:g} s set in the function (not collective_timeout)"

    @staticmethod
    def _root_cause(failed, events, pending, stacks):
        primary = [e for e in failed if e.kind == "died" or not e.comm]
        mismatch = _mismatch(failed) if primary and all(_MISMATCH in e.message for e in primary) else None
        if mismatch is not None:
            return mismatch
        if primary:
            return min(primary, key=lambda e: e.t)
        # Only communication errors: the culprit is a rank that never joined the collective.
        first = min(failed, key=lambda e: e.t)
        absent = pending or [e.rank for e in events.values() if e.kind == "ok"]
        if absent:
            names = ", ".join(map(str, absent))
            culprit = absent[0]
            frames = stacks.get(culprit) or []
            which = next((e.timeout_name for e in sorted(failed, key=lambda e: e.t) if e.timeout_name),
                         "its collective_timeout")
            head = (f"rank {names} never reached the collective that rank {first.rank} was waiting in "
                    f"until {which} ran out")
            if frames:
                text = f"{head}; rank {culprit} was {_where(frames)}"
            elif pending:
                text = f"{head}; rank {culprit} {stacks.get(('state', culprit), 'did not say where it was')}"
            else:
                text = (f"{head}: its function had already returned. Every rank must call the same "
                        f"collectives in the same order")
            return _Event(culprit, "absent", first.t, "DidNotJoin", text, frames, True)
        return first

    def _outcomes(self, ranks, events, stacks, root):
        out = {}
        for r in ranks:
            e = events.get(r.rank)
            if e is None:
                where = _where(stacks.get(r.rank)) or stacks.get(("state", r.rank), "")
                out[r.rank] = "still running, stopped by collnb" + (f" ({where})" if where else "")
            elif e.kind == "ok":
                out[r.rank] = "finished"
            elif e.kind == "died":
                out[r.rank] = _death_text(e.value)
            else:
                first = _FINGERPRINT_NOISE.sub("", e.message.splitlines()[0] if e.message else "")
                if len(first) > 240:
                    first = first[:240] + " ..."
                tag = " (follows the root cause)" if root is not None and e is not root and e.comm else ""
                out[r.rank] = f"{e.exc_type}: {first}{tag}"
        return out

    @staticmethod
    def _outcome_text(outcomes):
        return "\n".join(f"  rank {k}: {v}" for k, v in sorted(outcomes.items()))

    def _rank_error(self, root, outcomes, phase):
        if root.kind == "mismatch":
            return self._mismatch_error(root, outcomes, phase)
        if root.kind == "died":
            exc_type = "Killed" if (root.value or 0) < 0 else "Exited"
            head = f"rank {root.rank}: {exc_type}: {_death_text(root.value)}"
            tb = ""
        else:
            exc_type = root.exc_type
            head = f"rank {root.rank}: {root.exc_type}: {_FINGERPRINT_NOISE.sub('', root.message)}"
            tb = _format_frames(root.frames)
        text = head
        if tb:
            text += f"\n\nTraceback of rank {root.rank} (most recent call last):\n{tb.rstrip()}"
        if phase == "init":
            text += "\n\n(while initialising the process group)"
        text += "\n\nWhat happened to every rank:\n" + self._outcome_text(outcomes)
        return RankError(text, root.rank, exc_type, tb, outcomes)

    def _mismatch_error(self, root, outcomes, phase):
        """The TORCH_DISTRIBUTED_DEBUG=DETAIL check found ranks calling different collectives
        (op, shapes or dtypes). Blame one rank only when it differs from all the others."""
        sides = root.value  # [(fingerprint, [ranks])], largest side first
        lines = [f"  {_ranks_text(ranks)}: {fp}" for fp, ranks in sides]
        if root.rank is not None:
            others = sorted(r for fp, ranks in sides for r in ranks if r != root.rank)
            head = (f"rank {root.rank}: {root.exc_type}: {_MISMATCH} on ranks: rank {root.rank} called a "
                    f"different collective from every other rank ({_ranks_text(others)} agree)")
            tbs = [([root.rank], root.frames)]
        else:
            every = sorted(r for _, ranks in sides for r in ranks)
            head = (f"{_ranks_text(every)}: {root.exc_type}: {_MISMATCH} on ranks: no rank differs from all "
                    f"the others, so none of them is called the root cause; each side is shown")
            tbs = []  # one traceback per place in the code (the sides often share one line)
            for (fp, ranks), frames in zip(sides, root.frames):
                same = [i for i, (_, f) in enumerate(tbs) if [x[:3] for x in f] == [x[:3] for x in frames]]
                if same:
                    tbs[same[0]] = (tbs[same[0]][0] + ranks, tbs[same[0]][1])
                else:
                    tbs.append((list(ranks), frames))
        text = head + ":\n" + "\n".join(lines)
        if root.message:
            text += f"\n{root.message}"
        text += ("\nEvery rank of a group must call the same collectives, in the same order, with the same "
                 "shapes and dtypes.")
        tb = ""
        for ranks, frames in tbs:
            part = _format_frames(frames).rstrip()
            if part:
                tb += f"\n\nTraceback of {_ranks_text(ranks)} (most recent call last):\n{part}"
        text += tb
        if phase == "init":
            text += "\n\n(while initialising the process group)"
        text += "\n\nWhat happened to every rank:\n" + self._outcome_text(outcomes)
        err = RankError(text, root.rank, root.exc_type, tb.strip(), outcomes)
        err.mismatch = {fp: ranks for fp, ranks in sides}
        return err


@contextlib.contextmanager
def _sigint_deferred():
    """Hold back SIGINT (Kernel -> Interrupt, Ctrl-C) while ranks are forked, then deliver it.

    A KeyboardInterrupt raised inside ``os.fork``'s after-fork hooks is printed and dropped by
    Python ("Exception ignored in ..."), and one raised between a fork and the bookkeeping of the
    new rank would leave an untracked process. Only the main thread can set signal handlers;
    elsewhere (e.g. an explorer's worker thread) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(*caught[0])
            elif previous == signal.SIG_DFL:
                raise KeyboardInterrupt


_MISMATCH = "Detected mismatch between collectives"
# c10's C++ log line: "[rank0]:[E1130 21:54:26.310024083 ProcessGroupGloo.cpp:2901] message"
# (glog style: severity I/W/E/F, month+day, time, optional thread id, file:line)
# gloo's own: "[/path/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4242";
# NCCL's: "host:1234:1240 [0] NCCL WARN ..." / "NCCL INFO ...".
_CPP_LOG = re.compile(rb"^(?:(?:\[rank\d+\]:)?\[[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?(?: +\d+)? [^\]\s]+:\d+\]"
                      rb"|\[[^\]\s]+\.(?:cc|cpp|cu|h):\d+\] "
                      rb"|\S+:\d+:\d+ \[\d+\] NCCL (?:WARN|INFO|ERROR|TRACE) )")
_CPP_LOG_MORE = re.compile(rb"^(?:frame #\d+:|Exception raised from |\s)")
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(((?:[^()]|\([^()]*\))*)\)")
_DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(.*)", re.S)
_TIMEOUT_MS = re.compile(r"in (\d+) ?ms|[Tt]imed out waiting (\d+) ?ms")


def _ranks_text(ranks):
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + (", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}")


def _mismatch(failed):
    """Root cause of a DETAIL-check mismatch: an ``_Event`` of kind ``"mismatch"`` whose ``rank``
    is the one rank that differs from all the others (``None`` when no rank does, e.g. two ranks,
    or three sides), ``value`` the sides ``[(fingerprint, [ranks])]`` and ``message`` what
    differs. ``None`` when the messages cannot be read."""
    fps, frames = {}, {}
    for e in sorted(failed, key=lambda e: e.t):
        for rank, fp in _FINGERPRINT.findall(_FINGERPRINT_NOISE.sub("", e.message)):
            fps.setdefault(int(rank), fp.strip())
        frames.setdefault(e.rank, e.frames)
    if len(set(fps.values())) < 2:
        return None
    seqs = {m.group(1) for fp in fps.values() for m in [re.search(r"SequenceNumber=(\d+)", fp)] if m}
    if len(seqs) == 1:  # the same operation number everywhere: leave it out
        fps = {r: re.sub(r"SequenceNumber=\d+,\s*", "", fp) for r, fp in fps.items()}
    by_fp = {}
    for rank, fp in sorted(fps.items()):
        by_fp.setdefault(fp, []).append(rank)
    sides = sorted(by_fp.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    odd = None
    if len(sides) == 2 and len(sides[1][1]) == 1 and len(sides[0][1]) >= 2:
        odd = sides[1][1][0]
    first = min(failed, key=lambda e: e.t)
    differ = ""
    for e in sorted(failed, key=lambda e: (e.rank != odd, e.rank)):  # the odd rank's, or the lowest's
        m = _DIFFER.search(e.message)
        if m:  # torch's text: "Tensor Tensor dtypes: Floatvs Long"
            aspects = re.sub(r"\s+", " ", m.group(1)).strip().replace("Tensor Tensor ", "Tensor ")
            differ = "Collectives differ in: " + re.sub(r"(\S)vs ", r"\1 vs ", aspects)
            break
    if odd is not None:
        return _Event(odd, "mismatch", first.t, first.exc_type, differ, frames.get(odd, []), value=sides)
    return _Event(None, "mismatch", first.t, first.exc_type, differ,
                  [frames.get(ranks[0], []) for _, ranks in sides], value=sides)


def _death_text(exitcode):
    if exitcode is None:
        return "died"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exited with code {exitcode} without returning (os._exit or a crash)"


# ----------------------------------------------------------------------------------------------
# The module-level warm pool

_pool: RankPool | None = None
_pool_guard = threading.Lock()
#: :mod:`collnb.remote` while ``collnb.connect()`` is in force (launch and backend_info go there).
_remote = None


def _default_start_method():
    return "fork" if sys.platform.startswith("linux") else "spawn"


def _check_signature(fn, args, kwargs):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: let the rank report it
        return
    try:
        sig.bind(0, 1, *args, **(kwargs or {}))
    except TypeError as exc:
        raise TypeError(f"fn cannot be called as fn(rank, world_size, *args, **kwargs) with "
                        f"{len(args)} extra argument(s) and keywords {sorted(kwargs or {})}: {exc}. "
                        f"Define it as def {getattr(fn, '__name__', 'fn')}(rank, world_size, ...)") from None


def launch(fn: Callable, world_size: int, args: Sequence = (), kwargs: dict | None = None,
           backend: str = "gloo", timeout: float = 60.0, collective_timeout: float = 5.0,
           debug: bool = True, start_method: str | None = None, *, record_calls: bool = False,
           show_backend_log: bool = False):
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` real ranks.

    Each rank is a process started through :mod:`torch.multiprocessing`, already inside an
    initialised default process group of ``backend`` (``dist.get_rank()`` and
    ``dist.get_world_size()`` work). With NCCL, rank ``r`` uses ``cuda:r``. Ranks stay warm
    between calls (see :class:`RankPool`); their stdout/stderr lines appear here as they are
    printed, prefixed ``[rank r]``.

    Args:
        fn: a function ``fn(rank: int, world_size: int, *args, **kwargs)``; may be defined in a
            notebook cell or be a closure (it is shipped with cloudpickle).
        world_size: number of ranks, 1..:data:`MAX_WORLD_SIZE` (for NCCL at most the GPU count).
        args, kwargs: extra arguments, pickled to every rank.
        backend: ``"gloo"`` or ``"nccl"``.
        timeout: seconds the whole call may take (pool start included) before
            :class:`LaunchTimeout`.
        collective_timeout: seconds a rank waits in a collective for a missing peer before it
            fails (the process group's timeout; gloo's own default is 30 minutes).
        debug: ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` in the ranks, so a rank that calls a different
            collective, shape or dtype than its peers fails with a clear message. Costs extra
            checks per collective: pass ``False`` for benchmarks.
        start_method: ``"fork"`` (default on Linux) or ``"spawn"`` (each rank imports torch
            afresh; needed when CUDA is already initialised here).
        record_calls: also return the torch.distributed calls each rank's function made
            (keyword only; see Returns).
        show_backend_log: print the lines the backend's C++ code logs (``[E... ProcessGroupGloo.cpp:...]``)
            in the cell as they come (keyword only). By default they are kept out of the cell and
            attached to the error as ``err.backend_log`` (its message says how many); after a call
            that succeeds they are printed at its end.

    Returns:
        list of length ``world_size``: ``fn``'s return value on each rank, in rank order. Tensors
        (also inside lists, tuples and dicts, whose types are kept) come back as detached CPU
        copies. With ``record_calls=True`` a :class:`LaunchResults` (a ``list`` equal to the
        plain one) whose ``.calls[r]`` lists rank ``r``'s calls as :class:`CallRecord` objects
        (function name, global src/dst, group size, tensor shapes and dtypes), in call order.

    Inside the ranks, torch.distributed's functions are wrapped for the call (see
    :mod:`collnb._dist_hooks`): tensors whose layout gloo misreads (non-contiguous or expanded,
    conjugate or negative views) are handed to torch as dense copies and results copied back;
    groups and device meshes the function creates without ``timeout=`` get ``collective_timeout``.
    Arguments travel as pickle sends them (``nn.Parameter`` and a leaf's ``requires_grad`` kept);
    results come back detached.

    Each call finds its ranks as a fresh script would: what a call changed in a rank's
    ``sys.stdout``/``sys.stderr``, fds 1 and 2, working directory, pending ``signal.alarm``,
    torch thread count, socket environment variables and process groups is undone before the
    next call. Processes a function starts end with the pool (:func:`shutdown`, or when the
    kernel exits), also those in a session of their own.

    Raises:
        TypeError / ValueError: bad ``fn``, ``world_size``, ``backend`` or ``start_method``
            (checked before any rank starts).
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA), with the reason.
        RankError: a rank raised, exited, died or never reached a collective; every rank has
            been stopped.
        LaunchTimeout: the call ran past ``timeout``; every rank has been stopped.
        KeyboardInterrupt: re-raised after every rank has been stopped.
    """
    global _pool
    if _remote is not None:  # collnb.connect(cluster): the ranks are ipyparallel engines
        return _remote.launch(**locals())  # every parameter of this call, as given
    start_method = start_method or _default_start_method()
    _check_request(fn, world_size, backend, start_method)
    _check_signature(fn, tuple(args), kwargs)
    for name, value in (("timeout", timeout), ("collective_timeout", collective_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise ValueError(f"{name} must be a positive, finite number of seconds; got {value!r}")
    key = (backend, bool(debug), float(collective_timeout), start_method)
    with _pool_guard:
        pool = _pool
        if pool is not None and not pool.broken and pool.key == key and pool.lock.acquire(blocking=False):
            # A warm rank that died while the pool was idle (OOM killer, a stray kill) is replaced:
            # the pool starts over instead of failing the next call with a BrokenPipeError.
            dead = pool.dead_ranks()
            pool.lock.release()
            if dead:
                sys.stderr.write("[collnb] warm rank(s) had died while idle (" +
                                 "; ".join(f"rank {r}: {why}" for r, why in sorted(dead.items())) +
                                 "); starting fresh ranks\n")
                pool.close()
        if pool is None or pool.broken or pool.key != key:
            if pool is not None:
                pool.close()
            pool = _pool = RankPool(backend, debug, collective_timeout, start_method)
        private = not pool.lock.acquire(blocking=False)
    if private:
        # Another thread is using the warm pool: run on a private pool of our own.
        own = RankPool(backend, debug, collective_timeout, start_method)
        try:
            return own.run(fn, world_size, args, kwargs, timeout, record_calls=record_calls,
                           show_backend_log=show_backend_log)
        finally:
            own.close()
    try:
        return pool.run(fn, world_size, args, kwargs, timeout, record_calls=record_calls,
                        show_backend_log=show_backend_log)
    finally:
        pool.lock.release()


def shutdown():
    """Stop the warm ranks and remove their files. The next :func:`launch` starts new ones."""
    global _pool
    with _pool_guard:
        if _pool is not None:
            _pool.close()
            _pool = None


def warm_pool() -> RankPool | None:
    """The current warm :class:`RankPool`, or ``None`` (for inspection and tests)."""
    return _pool


atexit.register(shutdown)
