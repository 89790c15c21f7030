"""The ``bench`` subcommand: ``python -m collnb bench PRIMITIVE --world-size 2 4 --sizes 1K:64M``.

Times a collective on real ranks (:func:`collnb.bench.bench`): by default collnb's way (warm-up,
every iteration timed alone after a barrier, the slowest rank per iteration, median/min/max,
every result checked), or with ``--timing nccl-tests`` nccl-tests' way (one barrier, the
iterations back to back, each rank's mean, the mean over ranks; the result checked in a separate
call); prints the table (time, algbw, busbw, ✓/✗) with the physical references (memcpy, one
loopback TCP stream, a local reduction) measured in the same run, then the α-β(-γ) model fitted
per algorithm.

Exit status (as the other subcommands): 0 success; 1 a measured result differed from the
reference; 2 bad input (sizes, counts, an algorithm the primitive does not have, a dtype the
backend refuses, NCCL without a GPU, an output path that cannot be written); 3 the ranks failed.
"""

from __future__ import annotations

import argparse
import functools
import sys

from ..algorithms import ALGORITHMS, fit_each
from ..i18n import N_, _
from ..labs import bench as B
from ..units import format_bytes, format_seconds
from ..vocabulary import BACKENDS, DTYPE_NAMES, check_int
from .common import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, Subparsers, check_outputs, on_ranks, write_output

#: How each timing method is described in the header line of the output.
_TIMING_WORDS = {"collnb": N_("time = median over iterations of the slowest rank, each iteration after a barrier"),
                 "nccl-tests": N_("time = as nccl-tests: iterations back to back after one barrier, each rank's "
                                  "mean per call, averaged over the ranks")}


def _world_sizes(text: str) -> list[int]:
    """``"4"`` or ``"2,4,8"`` -> list of ints (argparse type)."""
    out = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                _("world size {value} is not a whole number (e.g. -n 4 or -n 2,4)").format(value=repr(part))) \
                from None
    if not out:
        raise argparse.ArgumentTypeError(_("give a world size, e.g. -n 4 or -n 2,4"))
    return out


def _cmd_bench_cluster(args: argparse.Namespace) -> int:
    """``--nodes N --ranks-per-node K``: measure each tier of a :func:`collnb.cluster` (one stream,
    16 MiB messages), then every algorithm of the primitive beside the two-tier model."""
    from ..labs import cluster as C
    cluster, compare_algorithms, TIERED = C.cluster, C.compare_algorithms, C.TIERED_PRIMITIVES
    if args.primitive not in TIERED:
        print(_("error: --nodes measures {names}; got {primitive}").format(names=", ".join(TIERED),
                                                                          primitive=args.primitive), file=sys.stderr)
        return EXIT_USAGE
    try:
        sizes = B.parse_sizes(args.sizes)
        c = cluster(args.nodes, args.ranks_per_node, inter=args.inter, intra=args.intra)
    except (TypeError, ValueError, RuntimeError) as exc:
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return EXIT_USAGE
    with c:
        print(c.describe(), flush=True)
        measured = on_ranks(lambda: c.measure(verbose=True))
        if measured[1] is not None:
            return measured[1]
        algorithms = None if not args.algorithm or "all" in args.algorithm else args.algorithm
        compared = on_ranks(lambda: compare_algorithms(c, args.primitive, algorithms, sizes=sizes,
                                                       repeats=max(1, args.iters), timeout=args.timeout))
        if compared[1] is not None:
            return compared[1]
        cmp = compared[0]
        print(cmp.table())
        if args.png:
            status = write_output("--png", args.png, lambda: cmp.figure().savefig(args.png))
            if status is not None:
                return status
            print(_("{what} written to {path}").format(what="png", path=args.png))
    if any(not r.correct for r in cmp.rows):
        print(_("✗ a result differs from the reference"), file=sys.stderr)
        return EXIT_MISMATCH
    return EXIT_OK


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.nodes is not None or args.ranks_per_node is not None:
        if args.nodes is None or args.ranks_per_node is None:
            print(_("error: give both --nodes and --ranks-per-node"), file=sys.stderr)
            return EXIT_USAGE
        status = check_outputs((args.png, "--png", (".png",)))
        return status if status is not None else _cmd_bench_cluster(args)
    status = check_outputs((args.json, "--json", (".json",)), (args.csv, "--csv", (".csv",)),
                           (args.png, "--png", (".png",)))
    if status is not None:
        return status
    given = list(dict.fromkeys(w for group in (args.world_size or [[2, 4]]) for w in group))
    try:  # everything that needs no rank, before any rank starts
        algorithms = B.check_algorithms(args.primitive, args.algorithm or ["builtin"])
        sizes = B.parse_sizes(args.sizes)
        check_int("iters", args.iters, 1, what=N_("timed iterations per measurement"))
        check_int("warmup", args.warmup, 0, what=N_("untimed iterations before them"))
        world_sizes = B.check_world_sizes(given, args.backend)
    except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: the backend cannot run here
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return EXIT_USAGE
    print(_("{primitive} on {backend}, world size {world_sizes}, {dtype}, {smallest}..{largest} per rank; "
            "{warmup} warm-up + {iters} timed iterations; {timing}; debug checks (TORCH_DISTRIBUTED_DEBUG) off "
            "while timing").format(primitive=args.primitive, backend=args.backend,
                                   world_sizes=", ".join(map(str, world_sizes)), dtype=args.dtype,
                                   smallest=format_bytes(sizes[0]), largest=format_bytes(sizes[-1]),
                                   warmup=args.warmup, iters=args.iters, timing=_(_TIMING_WORDS[args.timing])),
          flush=True)
    out = on_ranks(lambda: B.bench(
        args.primitive, world_sizes, sizes, args.dtype, iters=args.iters, warmup=args.warmup, algorithms=algorithms,
        backend=args.backend, references=not args.no_references, progress=not args.quiet, timeout=args.timeout,
        as_frame=False, timing=args.timing))
    if out[1] is not None:
        return out[1]
    rows = out[0]
    print(B.format_table(rows))
    fits = fit_each(rows)
    if fits:
        print("\n" + _("α-β(-γ) model fitted per algorithm (collnb.costmodel.fit):"))
        for f in fits.values():
            print("  " + f.summary())
    if args.debug_cost:
        extremes = sorted({sizes[0], sizes[-1]})
        print("\n" + _("what TORCH_DISTRIBUTED_DEBUG=DETAIL costs ({algorithm}, world size {world_size}):").format(
            algorithm=algorithms[0], world_size=world_sizes[0]))
        for n in extremes:
            measured = on_ranks(functools.partial(B.debug_cost, args.primitive, world_sizes[0], n, args.dtype,
                                                  algorithm=algorithms[0], iters=args.iters, warmup=args.warmup,
                                                  backend=args.backend, timeout=args.timeout))
            if measured[1] is not None:
                return measured[1]
            cost = measured[0]
            extra = ("+" if cost["extra_s"] >= 0 else "") + format_seconds(cost["extra_s"])
            print(f"  {format_bytes(n):>8}: " + _("off {off}, on {on} ({ratio}x, {extra} per call)").format(
                off=format_seconds(cost["off"]["time_s"]), on=format_seconds(cost["on"]["time_s"]),
                ratio=f"{cost['ratio']:.2f}", extra=extra))
    note = f"measured with python -m collnb bench --timing {args.timing} ({_TIMING_WORDS[args.timing]})"
    for flag, path, write in (("--json", args.json, lambda: B.save_json(rows, args.json, note=note)),
                              ("--csv", args.csv, lambda: B.save_csv(rows, args.csv)),
                              ("--png", args.png, lambda: B.plot(rows, fits).savefig(args.png))):
        if path:
            status = write_output(flag, path, write)
            if status is not None:
                return status
            print(_("{what} written to {path}").format(what=flag[2:], path=path))
    bad = [r for r in rows if not r["ok"]]
    if bad:
        print(_("✗ {n} measurement(s) returned a result that differs from the reference").format(n=len(bad)),
              file=sys.stderr)
        return EXIT_MISMATCH
    return EXIT_OK


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``bench`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    valid = "; ".join(f"{p}: {', '.join(('builtin',) + ALGORITHMS.get(p, ()))}" for p in B.PRIMITIVES)
    p = subparsers.add_parser(
        "bench", help=_("measure time, algbw and busbw of a collective and fit the α-β model"),
        description=_("Time a collective on real ranks: warm-up, then timed iterations, by default each one alone "
                      "after a barrier, the slowest rank per iteration, median (min, max), every result checked "
                      "(--timing collnb), or as nccl-tests does: iterations back to back, the mean over ranks, the "
                      "result checked in a separate call (--timing nccl-tests); busbw per nccl-tests' "
                      "PERFORMANCE.md; memcpy, one loopback TCP stream and a local reduction measured in the same "
                      "run; the α-β(-γ) model fitted per algorithm. Algorithms: {valid}").format(valid=valid))
    p.add_argument("primitive", choices=B.PRIMITIVES, metavar="PRIMITIVE",
                   help=_("one of: {names}").format(names=", ".join(B.PRIMITIVES)))
    p.add_argument("--world-size", "-n", type=_world_sizes, action="append", metavar="N",
                   help=_("world size(s): repeat (-n 2 -n 4) or a list (-n 2,4); default 2 and 4"))
    p.add_argument("--sizes", default="1K:64M", metavar="MIN:MAX",
                   help=_("bytes per rank, every power of two from MIN to MAX (K, M, G = 1024^k), or one size "
                          "(default 1K:64M)"))
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES, metavar="D",
                   help=_("element type (default float32): {names}").format(names=", ".join(DTYPE_NAMES)))
    p.add_argument("--iters", type=int, default=20, help=_("timed iterations per measurement (default 20)"))
    p.add_argument("--warmup", type=int, default=5, help=_("untimed iterations before them (default 5)"))
    p.add_argument("--algorithm", "-a", action="append", metavar="NAME",
                   help=_("builtin (the backend's collective), a collnb send/recv algorithm for the primitive, or "
                          "all; repeatable (default builtin)"))
    p.add_argument("--backend", default="gloo", choices=BACKENDS, help=_("process group backend (default gloo)"))
    p.add_argument("--timing", default="collnb", choices=B.TIMINGS,
                   help=_("collnb (default): every iteration alone after a barrier, median of the slowest rank, "
                          "every result checked; nccl-tests: as nccl-tests' BenchTime, iterations back to back "
                          "after one barrier, each rank's mean, averaged over ranks"))
    p.add_argument("--json", metavar="PATH", help=_("write the rows as JSON"))
    p.add_argument("--csv", metavar="PATH", help=_("write the rows as CSV"))
    p.add_argument("--png", metavar="PATH", help=_("plot measured vs fitted time and busbw per algorithm"))
    p.add_argument("--quiet", "-q", action="store_true", help=_("no progress bar"))
    p.add_argument("--no-references", action="store_true", help=_("skip memcpy / TCP / local-reduction references"))
    p.add_argument("--debug-cost", action="store_true",
                   help=_("also measure the smallest and largest size with TORCH_DISTRIBUTED_DEBUG=DETAIL on"))
    p.add_argument("--timeout", type=float, default=600.0, help=_("seconds each launch may take (default 600)"))
    p.add_argument("--nodes", type=int, help=_("measure per tier on a cluster of this many nodes (collnb.cluster: "
                                               "namespaces where this machine allows, else the model)"))
    p.add_argument("--ranks-per-node", type=int, help=_("ranks on each node (with --nodes)"))
    p.add_argument("--inter", default="1 Gbit/s", help=_("the inter-node link with --nodes (default '1 Gbit/s')"))
    p.add_argument("--intra", default=None, help=_("the intra-node link with --nodes (default: the node's loopback)"))
    p.set_defaults(func=_cmd_bench)
