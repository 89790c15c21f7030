"""The ``run`` subcommand: ``python -m collnb run PRIMITIVE --world-size N [--png FILE]``.

Runs one ``torch.distributed`` primitive on real ranks (:func:`collnb.run`) and prints every
rank's buffer before and after, with ✓/✗ against the reference computed without
``torch.distributed``; ``--png`` writes the before|after heatmap.
"""

from __future__ import annotations

import argparse

from ..i18n import _
from ..collectives import PRIMITIVES, REDUCING_PRIMITIVES, run
from ..vocabulary import BACKENDS, DTYPE_NAMES, MAX_WORLD_SIZE, REDUCE_OPS
from .common import EXIT_MISMATCH, EXIT_OK, Subparsers, check_outputs, on_ranks, write_output


def _cmd_run(args: argparse.Namespace) -> int:
    # an option the primitive does not use is refused by collnb.run's check (check_arguments), before a rank starts
    status = check_outputs((args.png, "--png", (".png",)))
    if status is not None:
        return status
    out = on_ranks(lambda: run(
        args.primitive, world_size=args.world_size, dtype=args.dtype, op=args.op,
        root=args.root, backend=args.backend, chunk_size=args.chunk_size, timeout=args.timeout))
    if out[1] is not None:
        return out[1]
    result = out[0]
    print(result.summary())
    if args.png:
        status = write_output("--png", args.png, lambda: result.save(args.png))
        if status is not None:
            return status
        print(_("heatmap written to {path}").format(path=args.png))
    return EXIT_OK if result.ok else EXIT_MISMATCH


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``run`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    p = subparsers.add_parser(
        "run", help=_("run one primitive on real ranks and print every rank's before/after"),
        description=_("Run one torch.distributed primitive on real ranks. Rank r, chunk c starts with "
                      "10*r + c (100*r + c above world size 10); each rank's before/after is printed with "
                      "a check mark against a reference computed without torch.distributed."))
    p.add_argument("primitive", choices=PRIMITIVES, metavar="PRIMITIVE",
                   help=_("one of: {names}").format(names=", ".join(PRIMITIVES)))
    p.add_argument("--world-size", "-n", type=int, default=4,
                   help=_("number of ranks, 1-{most} (default 4)").format(most=MAX_WORLD_SIZE))
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES, metavar="D",
                   help=_("tensor dtype (default float32); which ones the backend accepts is detected "
                          "when run. One of: {names}").format(names=", ".join(DTYPE_NAMES)))
    p.add_argument("--op", default=None, choices=REDUCE_OPS, metavar="OP",
                   help=_("reduce op of {reducing} (default sum): {names}").format(
                       reducing=", ".join(REDUCING_PRIMITIVES), names=", ".join(REDUCE_OPS)))
    p.add_argument("--root", type=int, default=None, help=_("src/dst rank of rooted primitives (default 0)"))
    p.add_argument("--backend", default="gloo", choices=BACKENDS, help=_("process group backend (default gloo)"))
    p.add_argument("--chunk-size", type=int, default=None, help=_("elements per chunk (default 1)"))
    p.add_argument("--png", metavar="FILE", help=_("write the before|after heatmap to FILE (PNG)"))
    p.add_argument("--timeout", type=float, default=60.0, help=_("seconds before the launch is stopped (default 60)"))
    p.set_defaults(func=_cmd_run)
