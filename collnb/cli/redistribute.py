"""The ``redistribute`` subcommand: ``python -m collnb redistribute --mesh 2x2 --src "S(0),R" --dst "R,R"``.

Redistributes a DTensor of teaching values on real ranks (:func:`collnb.redistribute`) and prints
the steps (the collectives each rank issued, per mesh dimension), each rank's local shard before
and after with ✓/✗ against the hand-sliced reference, the measured time beside the α-β prediction
and torch's own notes; ``--png`` writes the picture, ``--json`` the result.

Exit status (as the other subcommands): 0 success (a refusal torch must make counts as success);
1 a local shard differs from the reference; 2 bad input (an unknown placement, a shard dim beyond
the tensor, a mesh of more ranks than collnb starts, a Partial op the dtype cannot do, an output
path that cannot be written), checked before any rank starts; 3 the ranks failed.
"""

from __future__ import annotations

import argparse
import json

from .. import placements
from ..i18n import _
from ..views import redistribute_text
from ..vocabulary import BACKENDS
from .common import EXIT_MISMATCH, EXIT_OK, Subparsers, check_outputs, on_ranks, write_output


def _cmd(args: argparse.Namespace) -> int:
    status = check_outputs((args.png, "--png", (".png",)), (args.json, "--json", (".json",)))
    if status is not None:
        return status
    out = on_ranks(lambda: placements.redistribute(
        args.shape, args.mesh, src=args.src, dst=args.dst, dtype=args.dtype, backend=args.backend,
        repeats=args.repeats, timeout=args.timeout))
    if out[1] is not None:
        return out[1]
    result = out[0]
    print(redistribute_text(result))
    for flag, path, write in (("--png", args.png, lambda: result.save(args.png)),
                              ("--json", args.json, lambda: _write_json(result, args.json))):
        if path:
            status = write_output(flag, path, write)
            if status is not None:
                return status
            print(_("{what} written to {path}").format(what=flag[2:], path=path))
    return EXIT_OK if result.ok else EXIT_MISMATCH


def _write_json(result: placements.RedistributeResult, path: str) -> None:
    """Write ``result.to_dict()`` to ``path`` as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result.to_dict(), f, indent=1)


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``redistribute`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    p = subparsers.add_parser(
        "redistribute", help=_("change a DTensor's placements on real ranks and print the collectives it issues"),
        description=_("Build a DTensor of teaching values (each element names its global index) on a device mesh "
                      "of real gloo ranks, redistribute it from --src to --dst placements, and print the "
                      "collectives every rank issued, its local shard before and after, checked against the global "
                      "tensor sliced by hand."))
    p.add_argument("--mesh", default="2x2", help=_("mesh shape, e.g. 4, 2x2, 2x4 (default 2x2; at most 16 ranks)"))
    p.add_argument("--src", required=True, help=_('placements per mesh dimension, e.g. "S(0),R" or '
                                                   '"Shard(0),Replicate()"; P = Partial(sum), P(max), ...'))
    p.add_argument("--dst", required=True, help=_('placements per mesh dimension, e.g. "R,R"'))
    p.add_argument("--shape", default="4x6", help=_("global tensor shape, 1-D or 2-D, e.g. 8 or 4x6 (default 4x6)"))
    p.add_argument("--dtype", default="float32", metavar="D",
                   help=_("dtype, one of: {names} (default float32)").format(names=", ".join(placements.DTYPES)))
    p.add_argument("--repeats", type=int, default=3, help=_("timed calls after the recorded one (default 3)"))
    p.add_argument("--backend", default="gloo", choices=BACKENDS, help=_("process group backend (default gloo)"))
    p.add_argument("--png", metavar="PATH", help=_("write the picture to PATH (PNG)"))
    p.add_argument("--json", metavar="PATH", help=_("write the result to PATH (JSON)"))
    p.add_argument("--timeout", type=float, default=60.0, help=_("seconds before the launch is stopped (default 60)"))
    p.set_defaults(func=_cmd)
