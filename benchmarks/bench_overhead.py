"""Overhead of collnb.bench, and of collnb's send/recv ring, measured against bare loops in one run.

Two targets (issue 11), printed as ratios measured in the same run so that load on a shared
machine hits both sides alike:

* ``bench / bare``: collnb.bench's busbw for the built-in all_reduce (float32, 64 MiB per rank)
  divided by the busbw of a bare ``torch.distributed`` timing loop (``barrier``, then
  ``perf_counter`` around ``dist.all_reduce``, slowest rank per iteration, median) at the same
  size and world size. Target: >= 0.95 at world sizes 2 and 4.
* ``ring / built-in``: collnb's ring all_reduce on isend/irecv (``collnb.algorithms``), timed by
  collnb.bench, divided by the built-in's time in the same bench call. Target: <= 1.5.

Each ratio is the median over ``--rounds`` rounds; every round runs the bare loop and the bench
back to back (the bench interleaves ring and built-in per size). Ranks run with
``TORCH_DISTRIBUTED_DEBUG`` off (``launch(debug=False)``).

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
from collnb.costmodel import busbw


def bare_loop(rank, world_size, nelem, iters, warmup):
    t = torch.ones(nelem, dtype=torch.float32)
    times = []
    for it in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = time.perf_counter() - t0
        if it >= warmup:
            times.append(dt)
    return times


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
          f"{B._fmt_bytes(nbytes)} per rank, {args.warmup} warm-up + {args.iters} timed iterations, "
          f"median over {args.rounds} rounds; load average now {os.getloadavg()[0]:.1f}\n")
    print(f"{'ws':>3} {'round':>5} | {'bare busbw':>10} {'bench busbw':>11} {'bench/bare':>10} | "
          f"{'built-in ms':>11} {'ring ms':>9} {'ring/built-in':>13}")
    summary = []
    t_start = time.perf_counter()
    for ws in wss:
        r1, r2 = [], []
        for k in range(args.rounds):
            res = collnb.launch(bare_loop, ws, args=(nbytes // 4, args.iters, args.warmup), debug=False, timeout=600,
                                collective_timeout=120)
            bare_t = statistics.median(max(res[r][i] for r in range(ws)) for i in range(args.iters))
            bare_bw = busbw("all_reduce", nbytes, bare_t, ws)
            rows = B.bench("all_reduce", ws, nbytes, iters=args.iters, warmup=args.warmup,
                           algorithms=["builtin", "ring"], references=False, progress=False, as_frame=False)
            b = next(r for r in rows if r["algorithm"] == "builtin")
            g = next(r for r in rows if r["algorithm"] == "ring")
            if not (b["ok"] and g["ok"]):
                print("✗ a measured result differs from the reference", file=sys.stderr)
                return 1
            r1.append(b["busbw_GBps"] / bare_bw)
            r2.append(g["time_s"] / b["time_s"])
            print(f"{ws:>3} {k + 1:>5} | {bare_bw:>7.2f} GB/s {b['busbw_GBps']:>6.2f} GB/s {r1[-1]:>10.2f} | "
                  f"{b['time_s'] * 1e3:>11.1f} {g['time_s'] * 1e3:>9.1f} {r2[-1]:>13.2f}")
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
