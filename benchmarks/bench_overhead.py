"""Overhead of collnb.bench's timing, and of collnb's send/recv ring, against bare loops in one run.

Two targets (issue 11), printed as ratios of times measured *interleaved* -- one iteration of each
variant in turn, in one launch -- so that load on a shared machine hits every variant alike:

* ``bench / bare``: the busbw collnb.bench measures for the built-in all_reduce (float32, 64 MiB
  per rank; its rank-side code path :func:`collnb.labs.bench.measuring.rank_bench`: reset the buffers, barrier,
  time the call, check the result) divided by the busbw of a bare ``torch.distributed`` timing
  loop (barrier, ``perf_counter`` around ``dist.all_reduce``). Per iteration the slowest rank's
  time; medians over iterations. Target: >= 0.95 at world sizes 2 and 4.
* ``ring / built-in``: collnb's ring all_reduce on isend/irecv (``collnb.algorithms``), timed by
  the same bench code path, divided by the built-in's time. Target: <= 1.5.

Each ratio is the median over ``--rounds`` launches. Ranks run with ``TORCH_DISTRIBUTED_DEBUG``
off (``launch(debug=False)``).

Usage: ``python benchmarks/bench_overhead.py [--size 64M] [--world-sizes 2,4] [--iters 10] [--rounds 3]``
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import collnb
from collnb import bench as B
from collnb.labs.bench.measuring import rank_bench
from collnb.units import format_bytes
from collnb.algorithms.costmodel import busbw


def interleaved(rank, world_size, nelem, iters, warmup):
    """Per iteration: one bare timed all_reduce, then one iteration of collnb.bench's rank side
    (built-in and ring, reset + barrier + timed call + check). Returns per-iteration seconds."""
    t = torch.ones(nelem, dtype=torch.float32)
    job = dict(primitive="all_reduce", algorithms=["builtin", "ring"], dtype="float32", count=nelem, block=nelem,
               iters=1, warmup=0)
    out = {"bare": [], "builtin": [], "ring": [], "ok": True}
    for it in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = time.perf_counter() - t0
        res = rank_bench(rank, world_size, job)
        if it >= warmup:
            out["bare"].append(dt)
            for a in ("builtin", "ring"):
                out[a].append(res[a]["times"][0])
                out["ok"] = out["ok"] and res[a]["ok"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="64M", help="bytes per rank (default 64M)")
    ap.add_argument("--world-sizes", default="2,4", help="comma-separated (default 2,4)")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up iterations (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (bare loop, bench) per world size (default 3)")
    args = ap.parse_args(argv)
    nbytes = B.parse_size(args.size)
    wss = [int(w) for w in args.world_sizes.split(",")]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPU cores, gloo over loopback, float32 SUM all_reduce, "
          f"{format_bytes(nbytes)} per rank, {args.warmup} warm-up + {args.iters} timed iterations, "
          f"median over {args.rounds} rounds; load average now {os.getloadavg()[0]:.1f}\n")
    print(f"{'ws':>3} {'round':>5} | {'bare busbw':>10} {'bench busbw':>11} {'bench/bare':>10} | "
          f"{'built-in ms':>11} {'ring ms':>9} {'ring/built-in':>13}")
    summary = []
    t_start = time.perf_counter()
    for ws in wss:
        r1, r2 = [], []
        for k in range(args.rounds):
            res = collnb.launch(interleaved, ws, args=(nbytes // 4, args.iters, args.warmup), debug=False,
                                timeout=900, collective_timeout=120)
            if not all(res[r]["ok"] for r in range(ws)):
                print("✗ a measured result differs from the reference", file=sys.stderr)
                return 1
            med = {v: statistics.median(max(res[r][v][i] for r in range(ws)) for i in range(args.iters))
                   for v in ("bare", "builtin", "ring")}
            bare_bw = busbw("all_reduce", nbytes, med["bare"], ws)
            bench_bw = busbw("all_reduce", nbytes, med["builtin"], ws)
            r1.append(bench_bw / bare_bw)
            r2.append(med["ring"] / med["builtin"])
            print(f"{ws:>3} {k + 1:>5} | {bare_bw:>7.2f} GB/s {bench_bw:>6.2f} GB/s {r1[-1]:>10.2f} | "
                  f"{med['builtin'] * 1e3:>11.1f} {med['ring'] * 1e3:>9.1f} {r2[-1]:>13.2f}", flush=True)
        summary.append((ws, statistics.median(r1), statistics.median(r2)))
    print()
    for ws, a, b in summary:
        print(f"world size {ws}: bench busbw / bare loop = {a:.2f} ({'meets' if a >= 0.95 else 'MISSES'} >= 0.95); "
              f"ring / built-in = {b:.2f} ({'meets' if b <= 1.5 else 'MISSES'} <= 1.5)")
    print(f"\nwall time {time.perf_counter() - t_start:.0f} s, load average {os.getloadavg()[0]:.1f} "
          f"(a loaded machine widens the spread of both sides; the ratios are what to read)")
    collnb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
