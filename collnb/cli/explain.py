"""The ``explain`` subcommand: ``python -m collnb explain FILE`` reads nccl-tests output and explains
it (:func:`collnb.explain_nccl_tests`): algbw and busbw per size and what each means, the α-β fit,
what is off. ``python -m collnb explain --nccl dgx-h100 --nodes 4`` explains NCCL's own choice of
algorithm and protocol instead (:mod:`collnb.labs.cluster.nccl`).

Exit status: 0 explained; 1 the output reports wrong results (``#wrong`` not 0); 2 bad input (a file
that cannot be read, a line that is not nccl-tests output, an output path that cannot be written).
"""

from __future__ import annotations

import argparse
import sys

from ..i18n import _
from ..units import format_bytes
from .common import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, Subparsers, check_outputs, write_output


def _cmd_explain(args: argparse.Namespace) -> int:
    from ..labs.cluster import NcclTestsFormatError, explain_nccl_tests
    status = check_outputs((args.png, "--png", (".png",)))
    if status is not None:
        return status
    if args.nccl:
        return _explain_nccl(args)
    if not args.file:
        print(_("error: give a file of nccl-tests output (or - for stdin), or --nccl PRESET"), file=sys.stderr)
        return EXIT_USAGE
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file, encoding="utf-8", errors="replace").read()
    except OSError as exc:
        print(_("error: cannot read {path}: {reason}").format(path=args.file, reason=exc.strerror or exc),
              file=sys.stderr)
        return EXIT_USAGE
    try:
        ex = explain_nccl_tests(text, args.collective, expected_busbw=args.expected_busbw, ranks=args.ranks)
    except NcclTestsFormatError as exc:
        print(_("error: {path}: {message}").format(path=args.file, message=exc), file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError) as exc:  # --ranks or --expected-busbw out of range: said with the option's name
        print(_("error: {message}").format(message=str(exc).replace("expected_busbw", "--expected-busbw")
                                           .replace("ranks must", "--ranks must")), file=sys.stderr)
        return EXIT_USAGE
    print(ex)
    if args.png:
        status = write_output("--png", args.png, lambda: ex.figure().savefig(args.png))
        if status is not None:
            return status
        print(_("{what} written to {path}").format(what="png", path=args.png))
    wrong = any((r.out_of_place.wrong or 0) > (1e-3 if ex.run.old_format else 0) for r in ex.run.rows)
    return EXIT_MISMATCH if wrong else EXIT_OK


def _explain_nccl(args: argparse.Namespace) -> int:
    from ..labs.cluster import nccl
    try:
        system = nccl.preset(args.nccl, args.nodes)
        tuning = nccl.tune(system, algo_env=args.algo, proto_env=args.proto)
    except ValueError as exc:
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return EXIT_USAGE
    print(_("NCCL's tuning model (NVIDIA/nccl {version}, src/graph/tuning.cc) on {desc}, {nodes} node(s) x {L} GPUs"
            ).format(version=nccl.NCCL_VERSION, desc=system.description, nodes=system.nodes, L=system.ranks_per_node))
    if args.algo or args.proto:
        print(_("NCCL_ALGO={algo} NCCL_PROTO={proto}").format(algo=args.algo or "-", proto=args.proto or "-"))
    for function in ("AllReduce", "AllGather", "ReduceScatter", "Broadcast"):
        try:
            steps = nccl.crossovers(tuning, function)
        except ValueError as exc:
            print(f"  {function}: {exc}")
            continue
        print(f"  {function}: " + "; ".join(_("from {size}: {algo}/{proto}").format(
            size=format_bytes(n), algo=a, proto=p) for n, a, p in steps))
    print(nccl.explain_busbw_over_nic(system)["text"])
    return EXIT_OK


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Add the ``explain`` subcommand to an ``argparse`` subparsers object (sets ``func``)."""
    p = subparsers.add_parser(
        "explain", help=_("explain nccl-tests output (algbw, busbw, the α-β fit, what is off) or NCCL's choice"),
        description=_("Read the output of nccl-tests (all_reduce_perf, all_gather_perf, ...): a table with algbw and "
                      "busbw per size and what each means (nccl-tests' doc/PERFORMANCE.md), the α-β model fitted, "
                      "and what is off (wrong results, a latency floor, a plateau below the link rate, a dip). With "
                      "--nccl, NCCL's own tuning model instead: which algorithm and protocol it picks at which size."))
    p.add_argument("file", nargs="?", help=_("a file of nccl-tests output, or - for stdin"))
    p.add_argument("--collective", "-c", help=_("the collective, when the output does not name it (all_reduce, "
                                                 "all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv)"))
    p.add_argument("--expected-busbw", type=float, metavar="GB/s",
                   help=_("the busbw the hardware should reach: a plateau below 80%% of it is flagged"))
    p.add_argument("--ranks", type=int, help=_("the number of ranks, when the output has no 'Rank' lines"))
    p.add_argument("--png", metavar="PATH", help=_("plot busbw and algbw per size with the α-β fit"))
    p.add_argument("--nccl", metavar="PRESET", help=_("explain NCCL's choice on a preset machine instead: "
                                                      "dgx-h100, pcie-a100, one-gpu-per-node"))
    p.add_argument("--nodes", type=int, default=2, help=_("nodes of the --nccl machine (default 2)"))
    p.add_argument("--algo", metavar="NCCL_ALGO", help=_("as the NCCL_ALGO variable, e.g. Ring or ^NVLS"))
    p.add_argument("--proto", metavar="NCCL_PROTO", help=_("as the NCCL_PROTO variable, e.g. Simple or ^LL128"))
    p.set_defaults(func=_cmd_explain)
