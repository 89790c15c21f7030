"""The ``python -m collnb`` parser: one subcommand per module of this package (``run``,
``examples``, ``script``, ``replay``, ``bench``, ``redistribute``, ``present``, ``doctor``), each adding itself with its
``add_parser(subparsers)`` and running as ``args.func(args) -> exit status``.

Exit status: 0 success; 1 a result differs from the reference (✗); 2 bad input (unknown
primitive/dtype/op/backend, a combination the backend refuses, a root outside the world size,
a backend that cannot run here); 3 the launch failed (a rank raised or timed out).
"""

from __future__ import annotations

import argparse
import sys

from ..i18n import _
from . import bench, doctor, examples, present, redistribute, replay, run, script

#: The subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = (run, examples, script, replay, bench, redistribute, present, doctor)


def build_parser() -> argparse.ArgumentParser:
    """The ``collnb`` argument parser: every module of :data:`SUBCOMMANDS` adds its subcommand,
    each subparser setting ``func(args) -> exit status``."""
    parser = argparse.ArgumentParser(
        prog="python -m collnb",
        description=_("Run PyTorch collectives on real ranks and show what each rank holds before and after."))
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv=None) -> int:
    """Parse ``argv`` (a list of str; default ``sys.argv[1:]``), run the subcommand and return its exit
    status (int, see the module doc). argparse itself exits with status 2 on a malformed command line."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
