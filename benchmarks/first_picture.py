"""First-picture benchmark: from a fresh interpreter (a kernel that just started) to the first
explorer picture at world size 8, and what that time is made of.

Two fresh interpreters per repeat, each started by this script:

* **end to end**: ``import torch``, ``import IPython, ipywidgets`` (a Jupyter kernel has them
  loaded already), then ``collnb.explore("all_reduce", world_size=8)`` and ``Explorer.wait()``:
  the clock runs from ``import collnb`` to the picture in the widget (``first_picture_s``).
* **the parts**, in the same order the explorer meets them, each timed on its own:
  ``import_collnb_views`` (``collnb.explore`` looked up: the views layer imported),
  ``fork_and_group_init`` (``collnb.launch`` of a function that does nothing at world size 8 on
  a new pool: 8 forks and the gloo rendezvous), ``backend_probe`` (``collnb.backend_support``:
  read from its cache file when torch and collnb are unchanged, else probed on real ranks),
  ``backend_probe_fresh`` (the probe itself, ``refresh=True``: what the first explorer after an
  install of torch or collnb waits for; the end-to-end run reads the cache), ``first_run``
  (``collnb.run("all_reduce", 8)`` on the warm ranks), ``draw`` (``heatmap_png`` of it).

The torch import is printed apart: it is the same for every PyTorch notebook. Targets (issue 20):
kernel start -> first explorer picture <= 2 s; the script prints the median and its ratio to the
target. Wall times on a loaded machine inflate every part; the script prints the load average.

With ``--stale`` the end-to-end interpreters use no saved probe (``COLLNB_SUPPORT_CACHE=0``), as the
first explorer after an install does: the explorer shows its first picture before the probe and
runs the probe right after it; ``controls_complete_s`` is when every control offers all its
choices. ``--tree DIR`` measures the ``collnb`` package of another folder (before/after).

Usage: ``python benchmarks/first_picture.py [--repeats 3] [--stale] [--tree DIR] [--json FILE]``
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

TARGET_S = 2.0

_END_TO_END = r"""
import json, time
import torch, IPython, ipywidgets
t0 = time.perf_counter()
import collnb
ex = collnb.explore("all_reduce", world_size=8)  # returns with the first picture in the widget
t1 = time.perf_counter()
ex.wait()  # and the backend probe behind it, if there was one: every control offers all its choices
t2 = time.perf_counter()
print(json.dumps({"first_picture_s": t1 - t0, "controls_complete_s": t2 - t0, "explorer_timing": ex.last_timing,
                  "before_probe": getattr(ex, "first_before_probe", None)}))
collnb.shutdown()
"""

_PARTS = r"""
import json, time
t = time.perf_counter()
import torch
out = {"import_torch": time.perf_counter() - t}
import IPython, ipywidgets
def part(name, fn):
    t = time.perf_counter(); value = fn(); out[name] = time.perf_counter() - t; return value
import collnb
part("import_collnb_views", lambda: collnb.explore)
part("fork_and_group_init", lambda: collnb.launch(lambda rank, world_size: None, 8))
part("backend_probe", lambda: collnb.backend_support("gloo"))
part("backend_probe_fresh", lambda: collnb.backend_support("gloo", refresh=True))
res = part("first_run", lambda: collnb.run("all_reduce", 8))
from collnb.views import heatmap_png
part("draw", lambda: heatmap_png(res))
print(json.dumps(out))
collnb.shutdown()
"""


def _fresh(code: str, tree: str, stale: bool = False) -> dict:
    env = dict(os.environ, COLLNB_SUPPORT_CACHE="0") if stale else None
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tree,
                          env=env)
    if proc.returncode != 0:
        raise SystemExit(f"the fresh interpreter failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--stale", action="store_true",
                    help="no saved probe (COLLNB_SUPPORT_CACHE=0): the first explorer after an install of torch or collnb")
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the folder whose collnb package is measured (default: this checkout)")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    ends, parts = [], []
    for _ in range(args.repeats):
        ends.append(_fresh(_END_TO_END, args.tree, args.stale))
        parts.append(_fresh(_PARTS, args.tree))
    first = statistics.median(e["first_picture_s"] for e in ends)
    complete = statistics.median(e["controls_complete_s"] for e in ends)
    print(f"{args.tree}{' (no saved probe)' if args.stale else ''}")
    print(f"import collnb -> first explorer picture at world size 8 (median of {args.repeats}): {first:.2f} s"
          f" (every control complete: {complete:.2f} s)")
    print(f"  target {TARGET_S:.1f} s: median / target = {first / TARGET_S:.2f}")
    print("  the parts, each on its own (medians):")
    notes = {"import_torch": "  (not counted: every PyTorch notebook pays it)",
             "backend_probe_fresh": "  (not counted above: the probe on real ranks, once per install of torch or collnb)"}
    for name in ("import_torch", "import_collnb_views", "fork_and_group_init", "backend_probe", "backend_probe_fresh",
                 "first_run", "draw"):
        value = statistics.median(p[name] for p in parts)
        note = notes.get(name, "")
        print(f"    {name:<22} {value:6.2f} s{note}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"end_to_end": ends, "parts": parts, "target_s": TARGET_S}, f, indent=1)


if __name__ == "__main__":
    main()
