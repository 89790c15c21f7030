"""A warm slider move of the primitive explorer at world size 8, this checkout against another one,
measured interleaved (a/b/a/b) so that a loaded machine weighs on both alike.

Each round starts one fresh interpreter per side (``PYTHONPATH`` set to the side's folder, so the
``collnb`` package of that folder is imported), opens ``collnb.explore("all_reduce",
world_size=8)``, waits for the first picture, then moves the world-size control 8 -> 7 -> 8 ...
``--moves`` times as a learner's slider would (``controls["world_size"].value = n``) and times each
move from the change to the new picture in the widget (``Explorer.wait()``), and each move's
``last_timing`` split (``run_s``: the primitive on the ranks through ``collnb.collectives.run``,
gloo's all_reduce included; ``draw_s``: the heatmap painted and encoded). The median of every
round is printed per side, then the medians over all rounds and the ratio b/a.

Target (issue 20): median <= 40 ms on an idle 2-core machine (48 ms measured before). The load
average is printed before and after: on a machine shared with others, read the ratio, not the
absolute numbers. Measured 2026-12-02 against 7594fa7, 30 moves a round: nearly idle (load 0.2 -> 1.6,
3 rounds) 34.8 ms (run 18.9, draw 13.8) vs 58.7 ms (run 41.2, draw 16.5), ratio 0.59; at load ~3
(4 rounds) 42.3 vs 75.5 ms, ratio 0.56. collnb's own runs no longer pay for
``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s per-collective check (:func:`collnb.ranks.same_on_every_rank`).
Measured 2026-12-05, a hand-made PNG writer (no row filter, zlib level 2, deflated in two halves on two
threads) against Pillow's PNG encoder (``Image.save(format="PNG", compress_level=1)``), 3 rounds of 30
moves at load 7-9 on 2 cores: 22.0 ms (run 11.9, draw 9.3) vs 30.8 ms (run 13.5, draw 15.4), ratio
1.40: Pillow's encoder costs ~6 ms more a move and still meets the 40 ms target, so the views write every
PNG through Pillow's public API.

Usage: ``python benchmarks/slider_ab.py [--other DIR] [--rounds 2] [--moves 30] [--json FILE]``
(``DIR``: a folder holding another ``collnb`` package, e.g. ``git archive main collnb | tar -x
-C DIR``; without it only this checkout is measured).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_MOVES = r"""
import json, statistics, sys, time
import collnb
moves = int(sys.argv[1])
ex = collnb.explore("all_reduce", world_size=8)
ex.wait()
c = ex.controls
for n in (7, 8, 7, 8):  # warm: both world sizes' groups made, the drawing paths compiled
    c["world_size"].value = n
    ex.wait()
wall, run, draw = [], [], []
for i in range(moves):
    n = 7 if i % 2 == 0 else 8
    t = time.perf_counter()
    c["world_size"].value = n
    ex.wait()
    wall.append(time.perf_counter() - t)
    assert ex.error is None and ex.last_result.world_size == n, ex.message
    run.append(ex.last_timing["run_s"])
    draw.append(ex.last_timing["draw_s"])
print(json.dumps({"file": collnb.__file__, "move_ms": 1000 * statistics.median(wall),
                  "run_ms": 1000 * statistics.median(run), "draw_ms": 1000 * statistics.median(draw)}))
ex.close()
collnb.shutdown()
"""


def measure(folder: Path, moves: int) -> dict:
    """One fresh interpreter importing ``collnb`` from ``folder``: the medians of ``moves`` moves (ms)."""
    env = dict(os.environ, PYTHONPATH=str(folder))
    out = subprocess.run([sys.executable, "-c", _MOVES, str(moves)], env=env, cwd=folder, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"the run from {folder} failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if not got["file"].startswith(str(folder)):
        raise SystemExit(f"{folder}: imported collnb from {got['file']} instead (is it installed non-editable?)")
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", type=Path, help="a folder holding another collnb package (side a)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--moves", type=int, default=30)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sides = ([("a", args.other.resolve())] if args.other else []) + [("b", HERE)]
    print(f"load average before: {os.getloadavg()}")
    rounds: dict = {name: [] for name, _ in sides}
    for r in range(args.rounds):
        for name, folder in sides:
            got = measure(folder, args.moves)
            rounds[name].append(got)
            print(f"round {r + 1} {name} ({folder}): move {got['move_ms']:.1f} ms (run {got['run_ms']:.1f}, "
                  f"draw {got['draw_ms']:.1f})", flush=True)
    print(f"load average after: {os.getloadavg()}")
    summary = {name: {k: statistics.median(g[k] for g in rounds[name]) for k in ("move_ms", "run_ms", "draw_ms")}
               for name in rounds}
    for name, s in summary.items():
        print(f"{name}: median move {s['move_ms']:.1f} ms, run {s['run_ms']:.1f} ms, draw {s['draw_ms']:.1f} ms "
              f"(target 40 ms on an idle machine: {s['move_ms'] / 40:.2f}x)")
    if "a" in summary:
        print(f"ratio b/a (this checkout / the other): {summary['b']['move_ms'] / summary['a']['move_ms']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
