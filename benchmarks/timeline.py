"""What ``launch(..., timeline=True)`` costs, and that the default path costs what it did: warm
launches of a small function (two ``dist.all_reduce`` of 16 floats and a ``collnb.region``) at
world size ``-n``, the three variants interleaved launch by launch so that load on a shared machine
hits them alike.

Printed: the median seconds per warm launch of

* ``default``: ``collnb.launch(fn, n)`` (no timeline: nothing is installed in the ranks; the only
  additions on this path are one flag check and one list test per wrapped ``torch.distributed``
  call);
* ``bare pool``: the same call straight through the warm ``RankPool.run`` (no argument checks):
  the floor the default path is compared with;
* ``timeline``: ``collnb.launch(fn, n, timeline=True)`` (the recorder's dispatch mode, the
  timeline observer, the result's extra payload and the kernel-side :class:`Timeline`);

and the ratios ``default / bare pool`` (target: 1.0 within noise) and ``timeline / default``.

Usage: ``python benchmarks/timeline.py [-n 4] [--rounds 40]``
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import collnb
from collnb.ranks import warm_pool
from collnb.ranks.request import check_call


def step(rank, world_size):
    x = torch.ones(16)
    with collnb.region("step"):
        dist.all_reduce(x)
        dist.all_reduce(x)
    return x[0].item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--world-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=40)
    a = p.parse_args()
    n = a.world_size
    for _ in range(3):  # warm: pool, group, recorder tables
        collnb.launch(step, n, debug=False)
        collnb.launch(step, n, debug=False, timeline=True)
    pool = warm_pool()
    request = check_call(collnb.ranks.plan_launch(n, "gloo", {"debug": False}), step)  # checked once, outside the timing
    times = {"default": [], "bare pool": [], "timeline": []}
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        collnb.launch(step, n, debug=False)
        t1 = time.perf_counter()
        pool.run(request)
        t2 = time.perf_counter()
        out = collnb.launch(step, n, debug=False, timeline=True)
        t3 = time.perf_counter()
        assert out.timeline is not None and len(out.timeline.operations()) == 2 * n
        times["default"].append(t1 - t0)
        times["bare pool"].append(t2 - t1)
        times["timeline"].append(t3 - t2)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"world size {n}, {a.rounds} interleaved rounds, median seconds per warm launch:")
    for k, v in med.items():
        print(f"  {k:<10} {v * 1e3:8.2f} ms")
    print(f"  default / bare pool = {med['default'] / med['bare pool']:.3f}   (target 1.0 within noise)")
    print(f"  timeline / default  = {med['timeline'] / med['default']:.3f}")
    collnb.shutdown()


if __name__ == "__main__":
    main()
