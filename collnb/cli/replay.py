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

import argparse
import sys

from ..i18n import N_, _
from ..algorithms import ALGORITHM_NAMES, ALGORITHMS, PRIMITIVES, Trace, run_algorithm
from ..collectives import REDUCING_PRIMITIVES, ROOTED_PRIMITIVES
from ..views import FPS_RANGE, save_filmstrip, save_gif
from ..vocabulary import BACKENDS, DTYPE_NAMES, MAX_WORLD_SIZE, REDUCE_OPS, check_real
from .common import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, Subparsers, check_outputs, on_ranks, write_output


def _cmd_replay(args: argparse.Namespace) -> int:
    status = check_outputs((args.gif, "--gif", (".gif",)), (args.png, "--png", (".png",)),
                           (args.trace, "--trace", (".json", ".npz")))
    if status is not None:
        return status
    try:
        check_real("--fps", args.fps, *FPS_RANGE, what=N_("frames per second"))
    except ValueError as exc:
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return EXIT_USAGE
    if args.from_trace:
        ignored = [flag for flag, value, default in (
            ("PRIMITIVE", args.primitive, None), ("--algorithm", args.algorithm, None),
            ("--world-size", args.world_size, 4), ("--dtype", args.dtype, "float32"), ("--op", args.op, None),
            ("--root", args.root, None), ("--chunk-size", args.chunk_size, 1), ("--segments", args.segments, None),
            ("--backend", args.backend, "gloo")) if value != default]
        if ignored:
            print(_("note: --from-trace replays the saved run as it was; ignoring {flags}").format(
                flags=", ".join(ignored)), file=sys.stderr)
        try:
            trace = Trace.load(args.from_trace)
        except (OSError, ValueError) as exc:
            print(_("error: {message}").format(message=exc) if isinstance(exc, ValueError) else
                  _("error: cannot read trace {path}: {reason}").format(path=args.from_trace, reason=exc),
                  file=sys.stderr)
            return EXIT_USAGE
    else:
        if args.primitive is None:
            print(_("error: give a PRIMITIVE (one of {names}) or --from-trace FILE").format(
                names=", ".join(ALGORITHMS)), file=sys.stderr)
            return EXIT_USAGE
        valid = ALGORITHMS[args.primitive]
        algorithm = args.algorithm or valid[0]
        if algorithm not in valid:
            print(_("error: {primitive} has no algorithm {algorithm}; valid algorithms for {primitive}: "
                    "{valid}").format(primitive=args.primitive, algorithm=repr(algorithm), valid=", ".join(valid)),
                  file=sys.stderr)
            return EXIT_USAGE
        out = on_ranks(lambda: run_algorithm(
            args.primitive, algorithm, args.world_size, dtype=args.dtype, op=args.op,
            root=args.root, chunk_size=args.chunk_size, segments=args.segments,
            backend=args.backend, timeout=args.timeout, snapshots=True))
        if out[1] is not None:
            return out[1]
        trace = out[0]
    print(trace.summary())
    for rnd in trace.rounds:
        moved = max((t.size for t in rnd.transfers), default=0)
        print("  " + _("round {index} [{label}] {n} message(s), largest {largest} B: {detail}").format(
            index=f"{rnd.index:2d}", label=rnd.label, n=len(rnd.transfers), largest=moved, detail=rnd.detail))
    if args.trace:
        status = write_output("--trace", args.trace, lambda: trace.save(args.trace))
        if status is not None:
            return status
        print(_("trace written to {path}").format(path=args.trace))
    if args.gif or args.png:
        if args.gif:
            status = write_output("--gif", args.gif, lambda: save_gif(trace, args.gif, fps=args.fps))
            if status is not None:
                return status
            print(_("animation written to {path} ({frames} frames: start + {rounds} rounds)").format(
                path=args.gif, frames=trace.n_rounds + 1, rounds=trace.n_rounds))
        if args.png:
            status = write_output("--png", args.png, lambda: save_filmstrip(trace, args.png))
            if status is not None:
                return status
            print(_("filmstrip written to {path}").format(path=args.png))
    if trace.matches_builtin is False:
        return EXIT_MISMATCH
    return EXIT_OK


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``replay`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    valid = "; ".join(f"{p}: {', '.join(a)}" for p, a in ALGORITHMS.items())
    reducing = [q for q in PRIMITIVES if q in REDUCING_PRIMITIVES]  # those with an algorithm here
    rooted = [q for q in PRIMITIVES if q in ROOTED_PRIMITIVES]
    p = subparsers.add_parser(
        "replay", help=_("run a collective algorithm on real ranks round by round and write a GIF/trace"),
        description=_("Run one collective algorithm built from isend/irecv on real ranks, record every round "
                      "(transfers, every rank's buffer, provenance), compare with the built-in collective, and "
                      "write an animated GIF, a filmstrip PNG and/or the trace. Algorithms per primitive: "
                      "{valid}.").format(valid=valid))
    p.add_argument("primitive", nargs="?", choices=PRIMITIVES, metavar="PRIMITIVE",
                   help=_("one of: {names}").format(names=", ".join(PRIMITIVES)))
    p.add_argument("--algorithm", "-a", choices=ALGORITHM_NAMES, metavar="NAME",
                   help=_("algorithm (default: the primitive's first): {names}").format(
                       names=", ".join(ALGORITHM_NAMES)))
    p.add_argument("--world-size", "-n", type=int, default=4,
                   help=_("number of ranks, 1-{most} (default 4)").format(most=MAX_WORLD_SIZE))
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES, metavar="D", help=_("tensor dtype (default float32)"))
    p.add_argument("--op", default=None, choices=REDUCE_OPS, metavar="OP",
                   help=_("reduce op of {reducing} (default sum): {names}").format(
                       reducing=", ".join(reducing), names=", ".join(REDUCE_OPS)))
    p.add_argument("--root", type=int, default=None,
                   help=_("src/dst rank of {rooted} (default 0)").format(rooted=", ".join(rooted)))
    p.add_argument("--chunk-size", type=int, default=1, help=_("elements per chunk (default 1)"))
    p.add_argument("--segments", type=int, default=None, help=_("broadcast only: chunks/pipeline segments"))
    p.add_argument("--backend", default="gloo", choices=BACKENDS, help=_("process group backend (default gloo)"))
    p.add_argument("--gif", metavar="FILE", help=_("write the animation (start + one frame per round) to FILE"))
    p.add_argument("--png", metavar="FILMSTRIP", help=_("write a static PNG of all rounds to FILMSTRIP"))
    p.add_argument("--trace", metavar="FILE", help=_("save the trace to FILE (.json or .npz)"))
    p.add_argument("--from-trace", metavar="FILE", help=_("replay a saved trace instead of running the ranks"))
    p.add_argument("--fps", type=float, default=1.5, help=_("GIF frames per second (default 1.5)"))
    p.add_argument("--timeout", type=float, default=60.0, help=_("seconds before the launch is stopped (default 60)"))
    p.set_defaults(func=_cmd_replay)
