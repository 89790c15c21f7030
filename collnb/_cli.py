"""Shared pieces of the command line: exit statuses and how launch errors are reported."""

from __future__ import annotations

import sys

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_LAUNCH = 0, 1, 2, 3


def on_ranks(call):
    """Run ``call()`` (which launches ranks) and map its errors to exit statuses.

    Returns ``(value, None)`` on success, or ``(None, status)`` after printing ``error: ...`` to
    stderr: bad input (ValueError/TypeError, or RuntimeError such as a backend that cannot run
    here) gives :data:`EXIT_USAGE`; a failed launch (:class:`collnb.LaunchError`) gives
    :data:`EXIT_LAUNCH`.
    """
    from .launcher import LaunchError
    try:
        return call(), None
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None, EXIT_USAGE
    except LaunchError as exc:
        print(f"error: the ranks failed:\n{exc}", file=sys.stderr)
        return None, EXIT_LAUNCH
    except RuntimeError as exc:  # e.g. the backend cannot run on this machine
        print(f"error: {exc}", file=sys.stderr)
        return None, EXIT_USAGE
