"""The ``script`` subcommand: ``python -m collnb script PRIMITIVE [--backend gloo|nccl] -o FILE``
writes a standalone torchrun script for one primitive (:func:`collnb.labs.script.write_script`)."""

from __future__ import annotations

import argparse
import sys

from ..i18n import _
from ..collectives import REDUCING_PRIMITIVES, ROOTED_PRIMITIVES
from ..labs.script import SCRIPT_PRIMITIVES, script_text, write_script
from ..vocabulary import BACKENDS, REDUCE_OPS
from .common import EXIT_OK, EXIT_USAGE, Subparsers, check_outputs, write_output


def _cmd_script(args: argparse.Namespace) -> int:
    status = check_outputs((args.output, "-o", (".py",)))
    if status is not None:
        return status
    kwargs = dict(backend=args.backend, op=args.op, root=args.root)  # None: not given (script_text's check)
    try:
        script_text(args.primitive, **kwargs)  # every argument checked before the file is touched
    except (TypeError, ValueError) as exc:
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return EXIT_USAGE
    status = write_output("-o", args.output, lambda: write_script(args.primitive, args.output, **kwargs))
    if status is not None:
        return status
    print(_("wrote {path}; run it with: torchrun --nproc-per-node 2 {path}").format(path=args.output))
    return EXIT_OK


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``script`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    p = subparsers.add_parser(
        "script", help=_("write a standalone torchrun script for one primitive"),
        description=_("Write a standalone script (no collnb needed) that runs one primitive under torchrun: "
                      "init_process_group from torchrun's environment, LOCAL_RANK's GPU with NCCL, the "
                      "collective on the teaching input, every rank's before/after printed, "
                      "destroy_process_group. Run it with: torchrun --nproc-per-node 2 FILE"))
    p.add_argument("primitive", choices=SCRIPT_PRIMITIVES, metavar="PRIMITIVE",
                   help=_("one of: {names}").format(names=", ".join(SCRIPT_PRIMITIVES)))
    p.add_argument("--backend", default="gloo", choices=BACKENDS,
                   help=_("gloo (CPU, default) or nccl (one GPU per rank, cuda:LOCAL_RANK)"))
    p.add_argument("--op", default=None, choices=REDUCE_OPS, metavar="OP",
                   help=_("reduce op of {reducing} (default sum): {names}").format(
                       reducing=", ".join(REDUCING_PRIMITIVES), names=", ".join(REDUCE_OPS)))
    p.add_argument("--root", type=int, default=None,
                   help=_("src/dst rank of {rooted} (default 0)").format(rooted=", ".join(ROOTED_PRIMITIVES)))
    p.add_argument("-o", "--output", required=True, metavar="FILE", help=_("the script to write (.py)"))
    p.set_defaults(func=_cmd_script)
