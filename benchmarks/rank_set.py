"""Rank-set benchmark: a warm ``collnb.launch`` at world size 8, this tree against another one.

Each side runs in a Python process of its own with ``PYTHONPATH`` set to its tree (so two versions
of collnb can be held side by side on one machine at one moment): it starts the warm pool with one
launch, then times ``--repeats`` warm launches of a small ``all_reduce`` (``debug=False``, as
benchmarks use) and prints the times. The two sides take turns (a/b, b/a, a/b ..., ``--rounds``
rounds), so a loaded machine slows both alike. Prints each side's median (ms) and the ratio this / other:
below 1 is faster.

Usage: ``python benchmarks/rank_set.py --other DIR [--repeats 30] [--rounds 4]``, where ``DIR``
holds another collnb package (e.g. ``git archive main collnb | tar -x -C DIR``).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, time
import torch, torch.distributed as dist
import collnb

def step(rank, world_size):
    t = torch.ones(1024)
    dist.all_reduce(t)
    return float(t[0])

collnb.launch(step, 8, debug=False)  # the warm pool
times = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    out = collnb.launch(step, 8, debug=False)
    times.append(time.perf_counter() - t0)
    assert out == [8.0] * 8, out
collnb.shutdown()
print(json.dumps(times))
"""


def _side(tree: str, repeats: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(repeats)], env=env, cwd="/", check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--other", required=True, help="a directory holding another collnb package")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--rounds", type=int, default=4)
    a = p.parse_args()
    if not os.path.isdir(os.path.join(a.other, "collnb")):
        raise SystemExit(f"--other {a.other!r} holds no collnb/ folder; make one with "
                         f"git archive main collnb | tar -x -C DIR")
    this, other = [], []
    for i in range(a.rounds):  # a/b then b/a: neither side always runs first on a machine whose load drifts
        for side in ((other, this) if i % 2 == 0 else (this, other)):
            side += _side(os.path.abspath(a.other) if side is other else _HERE, a.repeats)
    m_this, m_other = statistics.median(this), statistics.median(other)
    print(f"warm launch, world size 8, median of {len(this)} each ({a.rounds} rounds of {a.repeats}, a/b then b/a):")
    print(f"  other ({a.other}): {m_other * 1000:.1f} ms")
    print(f"  this tree       : {m_this * 1000:.1f} ms")
    print(f"  ratio this/other: {m_this / m_other:.3f}")


if __name__ == "__main__":
    main()
