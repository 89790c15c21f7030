"""What ``launch(..., flight_recorder=N)`` costs a warm launch: is the Flight Recorder cheap enough to
be on by default (collnb's RankError would then always read the ranks' entries)?

Two warm pools of ``-n`` ranks (gloo, ``debug=False``), one with ``TORCH_FR_BUFFER_SIZE`` unset and one
with ``--buffer`` entries, each running the same small function (``--ops`` ``dist.all_reduce`` of 16
floats), interleaved launch by launch so that load on a shared machine hits them alike. With the
recorder on, every rank also dumps its entries at the end of the call (``_dump_fr_trace_json``, read
by the launcher to check that the ranks' collectives agree). Measured on the loaded 2-core machine
(world size 4, 16 all_reduces, 30 rounds): 1.26 with the pickle dumped too, 1.14 with the JSON only
(what ranks do now): too much for the default path, so the recorder stays off unless asked for.

Printed: the median milliseconds per warm launch of each and the ratio ``flight recorder / off``.

Usage: ``python benchmarks/flight_recorder.py [-n 4] [--ops 16] [--rounds 30] [--buffer 200]``
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import collnb
from collnb.ranks import RankPool, RankSetup


def step(rank, world_size, ops):
    x = torch.ones(16)
    for _ in range(ops):
        dist.all_reduce(x)
    return x[0].item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--world-size", type=int, default=4)
    p.add_argument("--ops", type=int, default=16)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--buffer", type=int, default=200)
    a = p.parse_args()
    n = a.world_size
    setups = {"off": RankSetup("gloo", False, 5.0, "fork", 0),
              "flight recorder": RankSetup("gloo", False, 5.0, "fork", a.buffer)}
    pools = {k: RankPool(setup) for k, setup in setups.items()}
    requests = {k: collnb.ranks.plan_launch(n, "gloo", {"debug": False}) for k in setups}
    try:
        from collnb.ranks.request import check_call
        calls = {k: check_call(plan, step, (a.ops,)) for k, plan in requests.items()}
        for _ in range(3):  # warm: fresh ranks, groups
            for k, pool in pools.items():
                pool.run(calls[k])
        times = {k: [] for k in pools}
        for _ in range(a.rounds):
            for k, pool in pools.items():
                t0 = time.perf_counter()
                pool.run(calls[k])
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"world size {n}, {a.ops} all_reduces per launch, {a.rounds} interleaved rounds, "
              f"TORCH_FR_BUFFER_SIZE={a.buffer}; median per warm launch:")
        for k, v in med.items():
            print(f"  {k:<16} {v * 1e3:8.2f} ms")
        print(f"  flight recorder / off = {med['flight recorder'] / med['off']:.3f}")
    finally:
        for pool in pools.values():
            pool.close()


if __name__ == "__main__":
    main()
