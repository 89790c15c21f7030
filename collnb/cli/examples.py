"""The ``examples`` subcommand: ``python -m collnb examples`` runs every scenario of the original
examples (the two documents collnb reproduces, :mod:`collnb.examples`) on real Gloo ranks, each
result line with ✓/✗ against the reference."""

from __future__ import annotations

import argparse
from ..i18n import _
from ..labs.examples import run_examples
from .common import EXIT_MISMATCH, EXIT_OK, Subparsers, on_ranks


def _cmd_examples(args: argparse.Namespace) -> int:
    out = on_ranks(lambda: run_examples(timeout=args.timeout))
    if out[1] is not None:
        return out[1]
    return EXIT_OK if out[0] else EXIT_MISMATCH


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``examples`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    s = subparsers.add_parser(
        "examples", help=_("run every scenario of the two original examples, with check marks"),
        description=_("Run every scenario of the two original examples collnb reproduces (a Gloo tutorial "
                      "script and an interactive teaching page; their world sizes, inputs and ops) on real "
                      "Gloo ranks; print each rank's lines as their scripts do, with ✓/✗ against a reference."))
    s.add_argument("--timeout", type=float, default=60.0, help=_("seconds per launch (default 60)"))
    s.set_defaults(func=_cmd_examples)
