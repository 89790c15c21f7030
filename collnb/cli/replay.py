"""The ``replay`` subcommand: ``python -m collnb replay PRIMITIVE --algorithm NAME --world-size N --gif FILE``.

Runs one collective algorithm on real ranks (:func:`collnb.algorithms.run_algorithm`), prints
the trace's summary and round list, and writes the animation (``--gif``, one frame for the start
plus one per round), the trace (``--trace``, ``.json`` or ``.npz``) and a filmstrip of all rounds
(``--png``). ``--from-trace FILE`` replays a saved trace instead of running the ranks.

Exit status (as the other subcommands): 0 success; 1 the result differs from the built-in
collective; 2 bad input (unknown algorithm for the primitive, dtype/op the backend refuses,
bad world size or root); 3 the launch failed.
"""

from __future__ import annotations

import sys

from ..algorithms import ALGORITHM_NAMES, ALGORITHMS, PRIMITIVES, Trace, run_algorithm
from ..collectives import REDUCING_PRIMITIVES, ROOTED_PRIMITIVES
from ..views import FPS_RANGE, save_filmstrip, save_gif
from ..vocabulary import BACKENDS, DTYPE_NAMES, MAX_WORLD_SIZE, REDUCE_OPS, check_real
from .common import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, check_outputs, on_ranks, write_output


def _cmd_replay(args) -> int:
    status = check_outputs((args.gif, "--gif", (".gif",)), (args.png, "--png", (".png",)),
                           (args.trace, "--trace", (".json", ".npz")))
    if status is not None:
        return status
    try:
        check_real("--fps", args.fps, *FPS_RANGE, what="frames per second")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.from_trace:
        ignored = [flag for flag, value, default in (
            ("PRIMITIVE", args.primitive, None), ("--algorithm", args.algorithm, None),
            ("--world-size", args.world_size, 4), ("--dtype", args.dtype, "float32"), ("--op", args.op, None),
            ("--root", args.root, 0), ("--chunk-size", args.chunk_size, 1), ("--segments", args.segments, None),
            ("--backend", args.backend, "gloo")) if value != default]
        if ignored:
            print(f"note: --from-trace replays the saved run as it was; ignoring {', '.join(ignored)}",
                  file=sys.stderr)
        try:
            trace = Trace.load(args.from_trace)
        except (OSError, ValueError) as exc:
            print(f"error: {exc}" if isinstance(exc, ValueError) else
                  f"error: cannot read trace {args.from_trace}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    else:
        if args.primitive is None:
            print("error: give a PRIMITIVE (one of " + ", ".join(ALGORITHMS) + ") or --from-trace FILE",
                  file=sys.stderr)
            return EXIT_USAGE
        valid = ALGORITHMS[args.primitive]
        algorithm = args.algorithm or valid[0]
        if algorithm not in valid:
            print(f"error: {args.primitive} has no algorithm {algorithm!r}; valid algorithms for "
                  f"{args.primitive}: {', '.join(valid)}", file=sys.stderr)
            return EXIT_USAGE
        trace, status = on_ranks(lambda: run_algorithm(
            args.primitive, algorithm, args.world_size, dtype=args.dtype, op=args.op or "sum",
            root=args.root, chunk_size=args.chunk_size, segments=args.segments,
            backend=args.backend, timeout=args.timeout, snapshots=True))
        if status is not None:
            return status
    print(trace.summary())
    for rnd in trace.rounds:
        moved = max((t.nbytes for t in rnd.transfers), default=0)
        print(f"  round {rnd.index:2d} [{rnd.label}] {len(rnd.transfers)} message(s), largest {moved} B: {rnd.detail}")
    if args.trace:
        status = write_output("--trace", args.trace, lambda: trace.save(args.trace))
        if status is not None:
            return status
        print(f"trace written to {args.trace}")
    if args.gif or args.png:
        if args.gif:
            status = write_output("--gif", args.gif, lambda: save_gif(trace, args.gif, fps=args.fps))
            if status is not None:
                return status
            print(f"animation written to {args.gif} ({trace.n_rounds + 1} frames: start + {trace.n_rounds} rounds)")
        if args.png:
            status = write_output("--png", args.png, lambda: save_filmstrip(trace, args.png))
            if status is not None:
                return status
            print(f"filmstrip written to {args.png}")
    if trace.matches_builtin is False:
        return EXIT_MISMATCH
    return EXIT_OK


def add_parser(subparsers) -> None:
    """Add the ``replay`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    valid = "; ".join(f"{p}: {', '.join(a)}" for p, a in ALGORITHMS.items())
    reducing = [q for q in PRIMITIVES if q in REDUCING_PRIMITIVES]  # those with an algorithm here
    rooted = [q for q in PRIMITIVES if q in ROOTED_PRIMITIVES]
    p = subparsers.add_parser(
        "replay", help="run a collective algorithm on real ranks round by round and write a GIF/trace",
        description="Run one collective algorithm built from isend/irecv on real ranks, record every round "
                    "(transfers, every rank's buffer, provenance), compare with the built-in collective, and "
                    f"write an animated GIF, a filmstrip PNG and/or the trace. Algorithms per primitive: {valid}.")
    p.add_argument("primitive", nargs="?", choices=PRIMITIVES, metavar="PRIMITIVE",
                   help="one of: " + ", ".join(PRIMITIVES))
    p.add_argument("--algorithm", "-a", choices=ALGORITHM_NAMES, metavar="NAME",
                   help="algorithm (default: the primitive's first): " + ", ".join(ALGORITHM_NAMES))
    p.add_argument("--world-size", "-n", type=int, default=4,
                   help=f"number of ranks, 1-{MAX_WORLD_SIZE} (default 4)")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES, metavar="D", help="tensor dtype (default float32)")
    p.add_argument("--op", default=None, choices=REDUCE_OPS, metavar="OP",
                   help=f"reduce op of {', '.join(reducing)} (default sum): " + ", ".join(REDUCE_OPS))
    p.add_argument("--root", type=int, default=0,
                   help=f"src/dst rank of {', '.join(rooted)} (default 0)")
    p.add_argument("--chunk-size", type=int, default=1, help="elements per chunk (default 1)")
    p.add_argument("--segments", type=int, default=None, help="broadcast only: chunks/pipeline segments")
    p.add_argument("--backend", default="gloo", choices=BACKENDS, help="process group backend (default gloo)")
    p.add_argument("--gif", metavar="FILE", help="write the animation (start + one frame per round) to FILE")
    p.add_argument("--png", metavar="FILMSTRIP", help="write a static PNG of all rounds to FILMSTRIP")
    p.add_argument("--trace", metavar="FILE", help="save the trace to FILE (.json or .npz)")
    p.add_argument("--from-trace", metavar="FILE", help="replay a saved trace instead of running the ranks")
    p.add_argument("--fps", type=float, default=1.5, help="GIF frames per second (default 1.5)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before the launch is stopped (default 60)")
    p.set_defaults(func=_cmd_replay)
