"""The life of rank processes: nothing outlives the launcher.

Ranks watch their parent and leave, removing the pool's files, within 0.2 s of its death (a
killed or restarted kernel); a rank's end takes every process it started with it (its process
group, and descendants that left it with ``setsid``: a rank is their child subreaper, so even a
double-forked daemon stays its descendant); pool directories a killed kernel left behind are swept
on the next start; SIGINT is held back while ranks are forked.

A pool directory is alive while the process that made it holds an exclusive ``flock`` on its
``lock`` file (:func:`make_pool_dir`); the sweep removes a directory only when it can take that
lock itself. The PID in the directory's name is only a label: a collnb process in another PID
namespace sharing ``/tmp`` (a container, ``unshare -p``) has PIDs that mean nothing here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import FrameType
from typing import NoReturn

import psutil

__all__ = ["TMP_PREFIX", "LOCK_NAME", "descendants", "kill_all", "exit_group", "on_sigterm", "register_fork_hooks",
           "watch_parent", "make_pool_dir", "remove_pool_dir", "pool_dir_is_live", "sweep_stale_dirs",
           "sigint_deferred", "START_TIMEOUT_S", "mark_up", "wait_until_up"]

#: Prefix of a pool's temporary directory: ``collnb-<pid of the launcher>-<random>``.
TMP_PREFIX = "collnb-"
#: The file in a pool directory that its live pool holds an exclusive ``flock`` on.
LOCK_NAME = "lock"
#: A pool directory without a lock file (being made this instant, or left by a collnb before locks)
#: is left alone this many seconds after its last change.
_UNLOCKED_GRACE_S = 600.0

_held: dict[str, int] = {}  # pool directory -> fd of its lock file, held by this process


def _close_held_locks() -> None:
    """In a forked child (a rank): the parent's pool locks are the parent's; holding copies would
    keep a dead kernel's directories "alive"."""
    for fd in _held.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()


os.register_at_fork(after_in_child=_close_held_locks)


def make_pool_dir() -> str:
    """Create a pool's private temporary directory, ``<tmp>/collnb-<pid>-<random>``, and hold an
    exclusive ``flock`` on its lock file for as long as this process keeps the pool
    (:func:`remove_pool_dir`). Returns its path."""
    path = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")
    # The lock file appears under its name already locked: made and locked as a hidden file, then
    # renamed (a flock belongs to the open file, so it survives the rename). A sweeper (another
    # thread or process) sees either no lock file (young: live) or a held one, never a lock file
    # nobody holds yet, which it would take for a dead pool's and remove.
    hidden = os.path.join(path, f".{LOCK_NAME}-new")
    fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh file: nobody else can hold it
    os.rename(hidden, os.path.join(path, LOCK_NAME))
    _held[path] = fd
    return path


def remove_pool_dir(path: str) -> None:
    """Remove a pool directory made by :func:`make_pool_dir`, then let go of its lock."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)


def descendants(pids: Iterable[int]) -> list[psutil.Process]:
    """psutil.Process objects of every live descendant of the processes ``pids`` (also those
    that started a session of their own, which a process-group kill misses). One scan of /proc."""
    children: dict[int, list[psutil.Process]] = {}
    for p in psutil.process_iter(["ppid"]):
        children.setdefault(p.info["ppid"], []).append(p)
    found: list[psutil.Process] = []
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def kill_all(procs: Iterable[psutil.Process]) -> None:
    """SIGKILL each of ``procs``; one that is gone already (or not ours) is skipped."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def exit_group() -> NoReturn:
    """End this rank and every process it started (its process group, and descendants that
    left it with setsid / start_new_session)."""
    try:
        kill_all(descendants([os.getpid()]))
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def on_sigterm(cfg: Mapping[str, object]) -> None:
    """SIGTERM in a rank: when the parent is gone, clean up as the watchdog does; otherwise die
    of SIGTERM as usual (so the launcher reports "killed by SIGTERM")."""
    if os.getpid() == cfg["rank_pid"] and os.getppid() != cfg["parent_pid"]:
        shutil.rmtree(str(cfg["dir"]), ignore_errors=True)
        exit_group()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


_fork_mask = threading.local()


def _hold_sigterm() -> None:
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _fork_mask.was_blocked = signal.SIGTERM in old


def _release_sigterm() -> None:
    if not getattr(_fork_mask, "was_blocked", False):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _default_sigterm() -> None:
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:
        pass
    _release_sigterm()


def watch_parent(parent_pid: int, pool_dir: str, period: float = 0.2) -> None:
    """Rank-side watchdog thread: when the parent (the kernel) is gone, remove the pool's files
    and exit. A thread, not PR_SET_PDEATHSIG=SIGKILL, so the files go too; it runs even while
    the main thread is blocked in a collective (gloo releases the GIL)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(period)
        shutil.rmtree(pool_dir, ignore_errors=True)
        exit_group()
    threading.Thread(target=watch, name="collnb-parent-watch", daemon=True).start()


def pool_dir_is_live(path: str) -> tuple[bool, int | None]:
    """Whether the pool directory ``path`` belongs to a live pool: its lock file is locked (by the
    process that made it, in any PID namespace). Returns ``(live, fd)``: when not live, ``fd`` holds
    the lock (close it after removing the directory) or is ``None``.

    A directory without a lock file is live while it changed less than 10 minutes ago (being made
    this instant) or, left by a collnb without locks, while the PID in its name runs here."""
    try:
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            young = time.time() - os.stat(path).st_mtime < _UNLOCKED_GRACE_S
        except OSError:
            return True, None  # gone already, or not ours to look at
        return young or _pid_runs(os.path.basename(path)), None
    except OSError:
        return True, None  # another user's: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: a live pool
        os.close(fd)
        return True, None
    return False, fd


def _pid_runs(name: str) -> bool:
    try:
        pid = int(name[len(TMP_PREFIX):].split("-")[0])
    except ValueError:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def sweep_stale_dirs() -> None:
    """Remove pool directories whose pool is gone (a killed kernel): those whose lock no process
    holds (:func:`pool_dir_is_live`)."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        if not name.startswith(TMP_PREFIX) or path in _held:
            continue
        live, fd = pool_dir_is_live(path)
        if live:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back SIGINT (Kernel -> Interrupt, Ctrl-C) while ranks are forked, then deliver it.

    A KeyboardInterrupt raised inside ``os.fork``'s after-fork hooks is printed and dropped by
    Python ("Exception ignored in ..."), and one raised between a fork and the bookkeeping of the
    new rank would leave an untracked process. Only the main thread can set signal handlers;
    elsewhere (e.g. an explorer's worker thread) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, FrameType | None]] = []
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


def register_fork_hooks() -> None:
    """In a rank: processes it forks (a ``multiprocessing.Pool`` in the learner's function) die of
    SIGTERM as usual. Inheriting the rank's Python-level handler, a child loses a SIGTERM that lands
    before Python's after-fork clean-up (seen: ``Pool.terminate()`` hung on a worker that had not
    started yet, 1 launch in ~80 under load). SIGTERM stays blocked across the fork; the child
    restores the default action, then unblocks (a pending one then kills it)."""
    os.register_at_fork(before=_hold_sigterm, after_in_parent=_release_sigterm, after_in_child=_default_sigterm)


#: How long (s) ranks just started may take to start and import torch before a launch stops them.
#: ``import torch`` takes 3-5 s on an idle 2-core machine and several times that on a loaded one.
START_TIMEOUT_S = 300.0


def mark_up(directory: str, rank: int) -> None:
    """Say that ``rank`` has started and imported what it runs: create ``DIRECTORY/up-RANK``.

    The launcher (:func:`wait_until_up`) sends a fresh rank its first command only when every new
    rank has said so, so that a slow peer's start counts against neither the process group's
    timeout (``init_process_group`` waits for every rank) nor the call's ``timeout``.
    """
    with open(os.path.join(directory, f"up-{rank}"), "wb"):
        pass


def wait_until_up(directory: str, ranks: Iterable[int], exited: Callable[[], bool],
                  seconds: float = START_TIMEOUT_S) -> list[int]:
    """Wait until every rank of ``ranks`` has written ``DIRECTORY/up-RANK`` (:func:`mark_up`), or
    ``exited()`` is true (a rank's process ended: the caller reports how), for at most ``seconds``.

    Returns:
        The ranks (list of int) that were not up when ``seconds`` ran out; ``[]`` when all were up
        or ``exited()`` became true first.
    """
    ranks = list(ranks)
    end = time.monotonic() + seconds
    while True:
        down = [r for r in ranks if not os.path.exists(os.path.join(directory, f"up-{r}"))]
        if not down or exited():
            return []
        if time.monotonic() > end:
            return down
        time.sleep(0.02)
