"""Shared pieces of the command line: exit statuses and how launch errors are reported."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from ..i18n import _
from ..ranks import LaunchError

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_LAUNCH = 0, 1, 2, 3

#: What ``parser.add_subparsers()`` returns, to which each subcommand module adds itself
#: (``add_parser(subparsers)``); argparse gives its class no public name.
Subparsers = argparse._SubParsersAction

T = TypeVar("T")


def on_ranks(call: Callable[[], T]) -> tuple[T, None] | tuple[None, int]:
    """Run ``call()`` (which launches ranks) and map its errors to exit statuses.

    Returns ``(value, None)`` on success, or ``(None, status)`` after printing ``error: ...`` to
    stderr: bad input (ValueError/TypeError, or RuntimeError such as a backend that cannot run
    here) gives :data:`EXIT_USAGE`; a failed launch (:class:`collnb.LaunchError`) gives
    :data:`EXIT_LAUNCH`. A caller tests ``out[1] is not None`` (not the unpacked pair) so that
    ``out[0]`` is known to hold the value after it.
    """
    try:
        return call(), None
    except (ValueError, TypeError) as exc:
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return None, EXIT_USAGE
    except LaunchError as exc:
        print(_("error: the ranks failed:\n{message}").format(message=exc), file=sys.stderr)
        return None, EXIT_LAUNCH
    except RuntimeError as exc:  # e.g. the backend cannot run on this machine
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return None, EXIT_USAGE


def output_problem(path: str | None, what: str, suffixes: Sequence[str] = ()) -> str | None:
    """Why ``path`` cannot be written as ``what`` (e.g. "--png"), or ``None`` when it can.

    Checked before any rank starts, so a typo in an output path (or a folder such as ``/proc`` that
    refuses new files) costs no run: the file is opened for writing once (and removed again if it
    was not there)."""
    if path is None:
        return None
    if os.path.isdir(path):
        return _("{what} {path} is a directory; give a file name, e.g. {example}").format(
            what=what, path=repr(path), example=os.path.join(path, "out" + (suffixes[0] if suffixes else "")))
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return _("{what} {path}: the folder {folder} does not exist; create it first").format(
            what=what, path=repr(path), folder=repr(parent))
    if not os.access(parent, os.W_OK):
        return _("{what} {path}: the folder {folder} is not writable").format(
            what=what, path=repr(path), folder=repr(parent))
    if suffixes and not str(path).lower().endswith(tuple(suffixes)):
        return _("{what} {path} must end with {suffixes}").format(
            what=what, path=repr(path), suffixes=_(" or ").join(suffixes))
    return _open_problem(path, what)


def _open_problem(path: str, what: str) -> str | None:
    """Why ``path`` cannot be opened for writing, found by opening it (a folder can look writable
    and refuse files: ``/proc``, ``/sys``, a read-only mount, a full disk's quota), or ``None``. A
    file that did not exist is removed again; one that did is neither truncated nor written."""
    existed = os.path.lexists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        return _("{what} {path} cannot be written: {reason}").format(
            what=what, path=repr(path), reason=exc.strerror or exc)
    try:
        if not existed:
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)
    return None


def write_output(what: str, path: str, write: Callable[[], object]) -> int | None:
    """Call ``write()`` (which writes ``path``); on failure print ``error: ...`` and return
    :data:`EXIT_USAGE`, else ``None``. The pre-checks of :func:`output_problem` cannot foresee
    everything (a dangling symlink, a name over 255 bytes, a full disk, a trace without the
    snapshots a GIF needs)."""
    try:
        write()
    except (OSError, ValueError) as exc:
        print(_("error: cannot write {what} {path}: {reason}").format(what=what, path=path, reason=exc),
              file=sys.stderr)
        return EXIT_USAGE
    return None


def check_outputs(*checks: tuple[str | None, str, Sequence[str]]) -> int | None:
    """Print the first problem of ``(path, what, suffixes)`` checks; return EXIT_USAGE or None."""
    for path, what, suffixes in checks:
        problem = output_problem(path, what, suffixes)
        if problem:
            print(_("error: {message}").format(message=problem), file=sys.stderr)
            return EXIT_USAGE
    return None
