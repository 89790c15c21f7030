"""Ring all_reduce built from isend/irecv (collnb.algorithms) vs gloo's built-in all_reduce.

Measures, in one run on this machine, float32 SUM all_reduce at 1 KiB .. 64 MiB per rank and
world sizes 2 and 4:

* ``built-in``  -- ``dist.all_reduce(t)`` (gloo's own algorithm);
* ``ring``      -- ``collnb.algorithms.all_reduce(t, algorithm="ring")`` with per-round
  snapshots off (what a library would ship);
* ``ring+snap`` -- the same, recording every rank's buffer after every round (what a replay
  needs: one buffer copy per round, kept in memory).

Each time is the median over repeats of the slowest rank's time (a barrier before each call; the
three variants interleaved, one of each per repeat, so that other load on the machine hits all
three alike).
Ranks are launched with ``collnb.launch(..., debug=False)`` (no TORCH_DISTRIBUTED_DEBUG checks).
Prints a table (ms, busbw in GB/s per nccl-tests' definition, ratios) and writes ``--png``.

Target (issue 3): at 64 MiB the ring with snapshots off within 1.5x of the built-in.

Usage: ``python benchmarks/ring_allreduce.py [--png artifacts/ring_allreduce.png] [--quick]``
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import collnb
from collnb.algorithms import all_reduce as ring_all_reduce
from collnb.algorithms.costmodel import busbw

SIZES = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
WORLD_SIZES = (2, 4)


def _repeats(nbytes):
    if nbytes <= 64 << 10:
        return 30
    if nbytes <= 1 << 20:
        return 12
    if nbytes <= 16 << 20:
        return 5
    return 3


def _one(fn, t):
    t.fill_(1.0)
    dist.barrier()
    t0 = time.perf_counter()
    fn(t)
    return time.perf_counter() - t0


def rank_bench(rank, world_size, sizes):
    """Per size: per-repeat seconds of built-in, ring, ring+snapshots on this rank. The three
    run interleaved (one of each per repeat) so that load changes on the machine hit all alike."""
    variants = (lambda x: dist.all_reduce(x),
                lambda x: ring_all_reduce(x, algorithm="ring"),
                lambda x: ring_all_reduce(x, algorithm="ring", record=True))
    res = {}
    for nbytes in sizes:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        times = ([], [], [])
        for i in range(_repeats(nbytes) + 1):  # the first repeat warms up
            for v, fn in enumerate(variants):
                dt = _one(fn, t)
                if i:
                    times[v].append(dt)
        # the ring's result equals the built-in's (float32 sums of ones are exact)
        t.fill_(1.0)
        ring_all_reduce(t, algorithm="ring")
        ok = bool((t == world_size).all())
        res[nbytes] = (*times, ok)
    return res


def _fmt_size(n):
    for s, u in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= s:
            return f"{n // s} {u}"
    return f"{n} B"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--png", default="artifacts/ring_allreduce.png", help="figure to write")
    ap.add_argument("--quick", action="store_true", help="sizes up to 1 MiB only (a smoke run)")
    args = ap.parse_args(argv)
    sizes = [s for s in SIZES if not args.quick or s <= 1 << 20]
    rows = []
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPU cores, gloo over loopback; float32 SUM; "
          f"median of the slowest rank's time\n")
    print(f"{'ws':>3} {'size':>8} | {'built-in ms':>11} {'ring ms':>9} {'ring+snap ms':>12} | "
          f"{'ring/built-in':>13} {'snap/ring':>9} | {'busbw built-in':>14} {'busbw ring':>10}  ok")
    for ws in WORLD_SIZES:
        res = collnb.launch(rank_bench, ws, args=(sizes,), debug=False, timeout=600)
        for nbytes in sizes:
            med = []
            for i in range(3):
                per_rep = [max(res[r][nbytes][i][k] for r in range(ws)) for k in range(len(res[0][nbytes][i]))]
                med.append(statistics.median(per_rep))
            ok = all(res[r][nbytes][3] for r in range(ws))
            b, r, s = med
            rows.append((ws, nbytes, b, r, s, ok))
            print(f"{ws:>3} {_fmt_size(nbytes):>8} | {b * 1e3:>11.3f} {r * 1e3:>9.3f} {s * 1e3:>12.3f} | "
                  f"{r / b:>13.2f} {s / r:>9.2f} | {busbw('all_reduce', nbytes, b, ws):>11.2f} GB/s "
                  f"{busbw('all_reduce', nbytes, r, ws):>6.2f} GB/s  {'✓' if ok else '✗'}")
    big = max(sizes)
    print()
    for ws in WORLD_SIZES:
        row = [x for x in rows if x[0] == ws and x[1] == big][0]
        verdict = "meets" if row[3] / row[2] <= 1.5 else "MISSES"
        print(f"world size {ws}, {_fmt_size(big)}: ring (snapshots off) = {row[3] / row[2]:.2f}x the built-in "
              f"({verdict} the 1.5x target); snapshots add {100 * (row[4] / row[3] - 1):.0f}% "
              f"({(row[4] - row[3]) * 1e3:.1f} ms)")
    print(f"\nbenchmark wall time: {time.perf_counter() - t_start:.1f} s")
    collnb.shutdown()
    if args.png:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        fig = Figure(figsize=(11, 4.2), dpi=90)
        FigureCanvasAgg(fig)
        ax1, ax2 = fig.subplots(1, 2)
        for ws, color in zip(WORLD_SIZES, ("#4E79A7", "#E15759")):
            sel = [x for x in rows if x[0] == ws]
            xs = [x[1] for x in sel]
            ax1.loglog(xs, [x[2] * 1e3 for x in sel], "-o", color=color, ms=3, label=f"built-in, ws {ws}")
            ax1.loglog(xs, [x[3] * 1e3 for x in sel], "--s", color=color, ms=3, label=f"collnb ring, ws {ws}")
            ax1.loglog(xs, [x[4] * 1e3 for x in sel], ":^", color=color, ms=3, label=f"ring + snapshots, ws {ws}")
            ax2.semilogx(xs, [x[3] / x[2] for x in sel], "--s", color=color, ms=3, label=f"ring / built-in, ws {ws}")
            ax2.semilogx(xs, [x[4] / x[2] for x in sel], ":^", color=color, ms=3,
                         label=f"ring+snapshots / built-in, ws {ws}")
        ax2.axhline(1.5, color="#888888", lw=1)
        ax2.text(xs[0], 1.52, "1.5x target", fontsize=8, color="#666666", va="bottom")
        ax1.set_xlabel("bytes per rank")
        ax1.set_ylabel("ms (median, slowest rank)")
        ax1.set_title("float32 SUM all_reduce on gloo")
        ax1.legend(fontsize=7)
        ax2.set_xlabel("bytes per rank")
        ax2.set_ylabel("time / built-in")
        ax2.set_title("ratio to gloo's built-in all_reduce")
        ax2.legend(fontsize=7)
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
        fig.savefig(args.png)
        print(f"figure written to {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
