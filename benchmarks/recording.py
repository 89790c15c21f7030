"""What recording costs: ``launch(..., record_calls=True)`` (collnb.ranks.instrument.recording) against no
recording, inside one rank function, measured interleaved so that load on a shared machine hits
both alike.

Printed per world size, as medians over ``--rounds`` launches of per-call times:

* ``all_reduce``: one small ``dist.all_reduce`` (16 floats) with the recorder on and off: the
  recorder's cost per communication operation (group lookup, the stack walk that names the call,
  the record), and the ratio;
* ``aten op``: one ``torch.add`` of two 16-float tensors on and off: what the dispatch mode costs
  every tensor operation of the recorded function (it sees them all and passes them on);
* ``first call``: the first recorded operation in a fresh rank (``Recorder`` set-up included).

Usage: ``python benchmarks/recording.py [--world-sizes 2,4] [--iters 200] [--rounds 3]``
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import collnb


def interleaved(rank, world_size, iters, first):
    """Per iteration: one all_reduce and one torch.add recorded (a Recorder around them), then the
    same without it. Returns per-call seconds for each variant."""
    from collnb.ranks.instrument import recording

    t, a, b = torch.ones(16), torch.ones(16), torch.ones(16)
    out = {k: [] for k in ("ar_on", "ar_off", "add_on", "add_off")}
    if first:
        t0 = time.perf_counter()
        with recording.Recorder():
            dist.all_reduce(t)
        out["first"] = time.perf_counter() - t0
    recorder = recording.Recorder()
    for _ in range(iters):
        with recorder:
            t0 = time.perf_counter()
            dist.all_reduce(t)
            t1 = time.perf_counter()
            for _ in range(10):
                torch.add(a, b)
            t2 = time.perf_counter()
        out["ar_on"].append(t1 - t0)
        out["add_on"].append((t2 - t1) / 10)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        t1 = time.perf_counter()
        for _ in range(10):
            torch.add(a, b)
        t2 = time.perf_counter()
        out["ar_off"].append(t1 - t0)
        out["add_off"].append((t2 - t1) / 10)
    return {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in out.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-sizes", default="2,4")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{'ws':>3} {'all_reduce off':>15} {'on':>10} {'ratio':>6} {'+ per op':>10}   {'aten op off':>12} "
          f"{'on':>8} {'+ per op':>9}   {'first call':>10}")
    for ws in [int(w) for w in args.world_sizes.split(",")]:
        collnb.shutdown()  # fresh ranks: the first recorded call is measured once per world size
        runs = [collnb.launch(interleaved, ws, args=(args.iters, k == 0), debug=False) for k in range(args.rounds)]
        med = {k: statistics.median(max(r[k] for r in run) for run in runs) for k in ("ar_on", "ar_off", "add_on",
                                                                                      "add_off")}
        first = max(r["first"] for r in runs[0])
        print(f"{ws:>3} {med['ar_off'] * 1e6:>12.0f} µs {med['ar_on'] * 1e6:>7.0f} µs "
              f"{med['ar_on'] / med['ar_off']:>6.2f} {(med['ar_on'] - med['ar_off']) * 1e6:>7.0f} µs   "
              f"{med['add_off'] * 1e6:>9.1f} µs {med['add_on'] * 1e6:>5.1f} µs {(med['add_on'] - med['add_off']) * 1e6:>6.1f} µs"
              f"   {first * 1e3:>7.1f} ms")
    collnb.shutdown()


if __name__ == "__main__":
    main()
