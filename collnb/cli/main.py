"""Command line: ``python -m collnb run PRIMITIVE ...``, ``seeds``, ``replay``, ``bench`` and
``script PRIMITIVE -o FILE`` (a standalone torchrun script).

Exit status: 0 success; 1 a result differs from the reference (✗); 2 bad input (unknown
primitive/dtype/op/backend, a combination the backend refuses, a root outside the world size,
a backend that cannot run here); 3 the launch failed (a rank raised or timed out).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .common import (EXIT_LAUNCH, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, check_outputs, on_ranks,  # noqa: F401
                   write_output)


def _cmd_run(args) -> int:
    from ..collectives import SPECS, run
    spec = SPECS[args.primitive]
    if args.op is not None and not spec.reduces:
        print(f"error: {args.primitive} does not combine values, so it takes no --op; ops apply to "
              f"reduce, all_reduce, reduce_scatter, reduce_scatter_tensor, reduce_scatter_single",
              file=sys.stderr)
        return EXIT_USAGE
    status = check_outputs((args.png, "--png", (".png",)))
    if status is not None:
        return status
    result, status = on_ranks(lambda: run(
        args.primitive, world_size=args.world_size, dtype=args.dtype, op=args.op or "sum",
        root=args.root, backend=args.backend, chunk_size=args.chunk_size, timeout=args.timeout))
    if status is not None:
        return status
    print(result.summary())
    if args.png:
        status = write_output("--png", args.png, lambda: result.save(args.png))
        if status is not None:
            return status
        print(f"heatmap written to {args.png}")
    return EXIT_OK if result.ok else EXIT_MISMATCH


def _cmd_seeds(args) -> int:
    from ..labs.examples import run_seeds
    ok, status = on_ranks(lambda: run_seeds(timeout=args.timeout))
    if status is not None:
        return status
    return EXIT_OK if ok else EXIT_MISMATCH


def build_parser() -> argparse.ArgumentParser:
    """The ``collnb`` argument parser (subcommands ``run``, ``seeds``, ``script``, and ``replay`` /
    ``bench`` when :mod:`collnb._cli_replay` / :mod:`collnb._cli_bench` are present). Each subparser
    sets ``func(args) -> exit status``."""
    from ..ranks import BACKENDS
    from ..collectives import DTYPE_NAMES, PRIMITIVES, REDUCE_OPS

    parser = argparse.ArgumentParser(
        prog="python -m collnb",
        description="Run PyTorch collectives on real ranks and show what each rank holds before and after.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = subparsers.add_parser(
        "run", help="run one primitive on real ranks and print every rank's before/after",
        description="Run one torch.distributed primitive on real ranks. Rank r, chunk c starts with "
                    "10*r + c (100*r + c above world size 10); each rank's before/after is printed with "
                    "a check mark against a reference computed without torch.distributed.")
    p.add_argument("primitive", choices=PRIMITIVES, metavar="PRIMITIVE",
                   help="one of: " + ", ".join(PRIMITIVES))
    p.add_argument("--world-size", "-n", type=int, default=4, help="number of ranks, 1-16 (default 4)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES, metavar="D",
                   help="tensor dtype (default float32); which ones the backend accepts is detected "
                        "when run. One of: " + ", ".join(DTYPE_NAMES))
    p.add_argument("--op", default=None, choices=REDUCE_OPS, metavar="OP",
                   help="reduce op for reducing primitives (default sum): " + ", ".join(REDUCE_OPS))
    p.add_argument("--root", type=int, default=0, help="src/dst rank of rooted primitives (default 0)")
    p.add_argument("--backend", default="gloo", choices=BACKENDS, help="process group backend (default gloo)")
    p.add_argument("--chunk-size", type=int, default=1, help="elements per chunk (default 1)")
    p.add_argument("--png", metavar="FILE", help="write the before|after heatmap to FILE (PNG)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before the launch is stopped (default 60)")
    p.set_defaults(func=_cmd_run)

    s = subparsers.add_parser(
        "seeds", help="run every scenario of the two seed documents with check marks",
        description="Run every scenario of both seed documents (their world sizes, inputs and ops) on "
                    "real Gloo ranks; print each rank's lines as the seeds' scripts do, with ✓/✗ "
                    "against a reference.")
    s.add_argument("--timeout", type=float, default=60.0, help="seconds per launch (default 60)")
    s.set_defaults(func=_cmd_seeds)

    from ..labs.script import add_parser as _add_script_parser
    _add_script_parser(subparsers)

    for name in ("collnb.cli.replay", "collnb.cli.bench"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # optional subcommands; their own errors are not hidden
            if exc.name != name:
                raise
        else:
            module.add_parser(subparsers)
    from . import present
    present.add_parser(subparsers)
    return parser


def main(argv=None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
