"""Launch benchmark: time to the first all_reduce result, and memory of 8 ranks.

Compares, in one run on this machine:

* the seeds' pattern: ``torch.multiprocessing.spawn`` of a module-level worker that calls
  ``init_process_group("gloo", init_method="tcp://127.0.0.1:PORT")`` then ``all_reduce``;
* ``collnb.launch`` from a process that has already imported torch (like a Jupyter kernel):
  cold (a new pool: fork + rendezvous) and warm (the pool reused).

Prints a table (seconds, ratios, total PSS in MB) and writes ``--png`` (a bar chart).
PSS (proportional set size) splits shared pages among the processes that share them, so the
sum over ranks is the memory the ranks really cost; read from ``/proc/PID/smaps_rollup``.

Usage: ``python benchmarks/launch.py [--repeats 3] [--png artifacts/launch.png]``
"""
import argparse
import os
import socket
import statistics
import time

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import collnb


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pss_mb(pid):
    return psutil.Process(pid).memory_full_info().pss / 2**20


def seed_worker(rank, world_size, port, queue):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{port}")
    t = torch.arange(2) + 2 * rank
    dist.all_reduce(t)
    queue.put((rank, os.getpid(), _pss_mb(os.getpid())))
    dist.barrier()  # every rank has measured its PSS before any exits
    dist.destroy_process_group()


def seed_pattern(world_size):
    """Seconds to the all_reduce result with mp.spawn, and total PSS of the ranks (MB)."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    t0 = time.perf_counter()
    mp.spawn(seed_worker, args=(world_size, _free_port(), queue), nprocs=world_size, join=True)
    elapsed = time.perf_counter() - t0
    pss = sum(queue.get()[2] for _ in range(world_size))
    return elapsed, pss


def _all_reduce(rank, world_size):
    t = torch.arange(2) + 2 * rank
    dist.all_reduce(t)
    return t


def collnb_cold(world_size):
    collnb.shutdown()
    t0 = time.perf_counter()
    collnb.launch(_all_reduce, world_size)
    return time.perf_counter() - t0


def collnb_warm(world_size, n=20):
    collnb.launch(_all_reduce, world_size)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        collnb.launch(_all_reduce, world_size)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is shown")
    ap.add_argument("--png", default="artifacts/launch.png", help="where to write the bar chart")
    args = ap.parse_args(argv)

    rows = []
    for ws in (2, 4, 8):
        spawn = statistics.median(seed_pattern(ws)[0] for _ in range(args.repeats))
        cold = statistics.median(collnb_cold(ws) for _ in range(args.repeats))
        warm = collnb_warm(ws)
        rows.append((ws, spawn, cold, warm))

    collnb.shutdown()
    collnb.launch(_all_reduce, 8)
    collnb_pss = sum(_pss_mb(pid) for pid in collnb.ranks.warm_pool().pids())
    spawn_pss = seed_pattern(8)[1]
    collnb.shutdown()

    print(f"time to the first all_reduce result (median of {args.repeats}; warm: median of 20)")
    print(f"{'world size':>10} {'mp.spawn (s)':>13} {'collnb cold (s)':>16} {'cold/spawn':>11} "
          f"{'collnb warm (ms)':>17} {'warm/spawn':>11}")
    for ws, spawn, cold, warm in rows:
        print(f"{ws:>10} {spawn:>13.3f} {cold:>16.3f} {cold / spawn:>11.3f} {warm * 1e3:>17.1f} "
              f"{warm / spawn:>11.4f}")
    print(f"total PSS of 8 ranks: mp.spawn {spawn_pss:.0f} MB, collnb {collnb_pss:.0f} MB "
          f"({collnb_pss / spawn_pss:.2f}x)")

    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
        fig = Figure(figsize=(8, 3.6), layout="constrained")
        ax, bx = fig.subplots(1, 2, width_ratios=[2.2, 1])
        x = range(len(rows))
        w = 0.27
        ax.bar([i - w for i in x], [r[1] for r in rows], w, label="mp.spawn (seeds)", color="#999999")
        ax.bar(list(x), [r[2] for r in rows], w, label="collnb cold", color="#1f77b4")
        ax.bar([i + w for i in x], [r[3] for r in rows], w, label="collnb warm", color="#2ca02c")
        ax.set_xticks(list(x), [f"world size {r[0]}" for r in rows])
        ax.set_yscale("log")
        ax.set_ylabel("seconds to first all_reduce result (log)")
        ax.legend(loc="lower left", bbox_to_anchor=(0, 1.01), ncols=3, frameon=False, fontsize=8)
        bars = bx.bar(["mp.spawn", "collnb"], [spawn_pss, collnb_pss], color=["#999999", "#1f77b4"])
        bx.bar_label(bars, fmt="%.0f MB")
        bx.set_ylabel("total PSS of 8 ranks (MB)")
        os.makedirs(os.path.dirname(os.path.abspath(args.png)), exist_ok=True)
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
