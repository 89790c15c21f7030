"""The life of rank processes: nothing outlives the launcher.

Ranks watch their parent and leave, removing the pool's files, within 0.2 s of its death (a
killed or restarted kernel); a rank's end takes every process it started with it (its process
group, and descendants that left it with ``setsid``); pool directories a killed kernel left
behind are swept on the next start; SIGINT is held back while ranks are forked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time

import psutil

__all__ = ["TMP_PREFIX", "descendants", "kill_all", "exit_group", "on_sigterm", "register_fork_hooks",
           "watch_parent", "sweep_stale_dirs", "sigint_deferred"]

#: Prefix of a pool's temporary directory: ``collnb-<pid of the launcher>-<random>``.
TMP_PREFIX = "collnb-"


def descendants(pids):
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


def kill_all(procs):
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def exit_group():
    """End this rank and every process it started (its process group, and descendants that
    left it with setsid / start_new_session)."""
    try:
        kill_all(descendants([os.getpid()]))
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def on_sigterm(cfg):
    """SIGTERM in a rank: when the parent is gone, clean up as the watchdog does; otherwise die
    of SIGTERM as usual (so the launcher reports "killed by SIGTERM")."""
    if os.getpid() == cfg["rank_pid"] and os.getppid() != cfg["parent_pid"]:
        shutil.rmtree(cfg["dir"], ignore_errors=True)
        exit_group()
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


def watch_parent(parent_pid, pool_dir, period=0.2):
    """Rank-side watchdog thread: when the parent (the kernel) is gone, remove the pool's files
    and exit. A thread, not PR_SET_PDEATHSIG=SIGKILL, so the files go too; it runs even while
    the main thread is blocked in a collective (gloo releases the GIL)."""
    def watch():
        while os.getppid() == parent_pid:
            time.sleep(period)
        shutil.rmtree(pool_dir, ignore_errors=True)
        exit_group()
    threading.Thread(target=watch, name="collnb-parent-watch", daemon=True).start()


def sweep_stale_dirs():
    """Remove pool directories left by processes that no longer exist (a killed kernel)."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(TMP_PREFIX):
            continue
        try:
            pid = int(name[len(TMP_PREFIX):].split("-")[0])
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


@contextlib.contextmanager
def sigint_deferred():
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


def register_fork_hooks():
    """In a rank: processes it forks (a ``multiprocessing.Pool`` in the learner's function) die of
    SIGTERM as usual. Inheriting the rank's Python-level handler, a child loses a SIGTERM that lands
    before Python's after-fork clean-up (seen: ``Pool.terminate()`` hung on a worker that had not
    started yet, 1 launch in ~80 under load). SIGTERM stays blocked across the fork; the child
    restores the default action, then unblocks (a pending one then kills it)."""
    os.register_at_fork(before=_hold_sigterm, after_in_parent=_release_sigterm, after_in_child=_default_sigterm)
