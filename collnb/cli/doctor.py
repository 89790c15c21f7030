"""The ``doctor`` subcommand: ``python -m collnb doctor`` looks at this install and says what to do about
each problem (:mod:`collnb.health`; :mod:`collnb.__main__` reaches it before torch is imported)."""

from __future__ import annotations

from ..health import add_arguments, run_cli
from ..i18n import _


def add_parser(subparsers) -> None:
    """Add the ``doctor`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    s = subparsers.add_parser(
        "doctor", help=_("look at this install and say what to do about each problem (for a bug report)"),
        description=_("Look at this install (Python, torch and the tested range, Gloo/NCCL, the saved backend "
                      "probe, /dev/shm, temporary space) and say what to do about each problem; paste the output "
                      "into a bug report."))
    add_arguments(s)
    s.set_defaults(func=run_cli)
