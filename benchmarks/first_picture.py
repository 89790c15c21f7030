"""First-picture benchmark: from a kernel with torch imported to the first picture, on a fresh install
(empty collnb cache) and once cached, against the floor a bare script pays, measured in the same run.

Every measurement is a fresh interpreter started by this script (as a kernel is), each with
``import torch`` and ``import IPython`` done before its clock starts (every PyTorch notebook pays the
first, a Jupyter kernel has the second loaded; the torch import is printed apart). In turn, per repeat:

* **floor**: a bare fork + gloo init + all_reduce: 4 processes forked with ``torch.multiprocessing``,
  each ``init_process_group("gloo")`` on a FileStore, one ``all_reduce`` of 4 floats, the group
  destroyed, every process joined. Nothing a picture of the same call can do without.
* **empty cache**: ``XDG_CACHE_HOME`` an empty folder (every Colab or Binder session starts so, and
  ``~/.cache/collnb`` after an install of torch or collnb): ``import collnb``,
  ``collnb.run("all_reduce", world_size=4)`` and its picture (``_repr_mimebundle_``, what the
  notebook displays: the heatmap PNG).
* **warm cache**: the same with a folder that holds the saved backend probe (``collnb.backend_support``
  run there first, untimed, as the explorer, a refused request or an earlier session leaves it).

Printed: the load average (before and after), each figure's median and min-max, the ratios to the
floor taken repeat by repeat (median), and the empty-cache median against issue 33's target
(<= 2 s after ``import torch`` on an idle 2-core machine; warm <= 3x the floor). The interpreters
write bytecode (``PYTHONDONTWRITEBYTECODE`` dropped; one warm-up run first), as an install's does.

``--explorer`` measures issue 20's instead: ``collnb.explore("all_reduce", world_size=8)`` to its first
picture in the widget, and its parts (views import, fork + group init, backend probe, first run, draw);
``--stale`` then gives it no saved probe. ``--tree DIR`` measures the ``collnb`` package of another
folder (before/after).

Usage: ``python benchmarks/first_picture.py [--repeats 5] [--explorer [--stale]] [--tree DIR] [--json FILE]``
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

TARGET_EMPTY_S = 2.0   # issue 33: empty cache, world size 4, after import torch
TARGET_RATIO = 3.0     # issue 33: warm cache, against the floor
TARGET_EXPLORER_S = 2.0  # issue 20: kernel start -> first explorer picture

_KERNEL = r"""
import json, time
t = time.perf_counter()
import torch
import_torch = time.perf_counter() - t
import IPython
"""

_FLOOR = _KERNEL + r"""
import os, tempfile
import torch.distributed as dist, torch.multiprocessing as mp

def rank(r, ws, path):
    dist.init_process_group("gloo", init_method="file://" + path, rank=r, world_size=ws)
    x = torch.ones(4) * r
    dist.all_reduce(x)
    dist.destroy_process_group()
    os._exit(0 if x.tolist() == [6.0] * 4 else 1)

if __name__ == "__main__":
    folder = tempfile.mkdtemp()
    t0 = time.perf_counter()
    procs = [mp.get_context("fork").Process(target=rank, args=(r, 4, os.path.join(folder, "store"))) for r in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    seconds = time.perf_counter() - t0
    import shutil
    shutil.rmtree(folder, ignore_errors=True)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    print(json.dumps({"seconds": seconds, "import_torch": import_torch}))
"""

_PICTURE = _KERNEL + r"""
t0 = time.perf_counter()
import collnb
r = collnb.run("all_reduce", world_size=4)
shown = r._repr_mimebundle_()
seconds = time.perf_counter() - t0
assert r.ok and shown["image/png"].startswith(b"\x89PNG")
print(json.dumps({"seconds": seconds, "import_torch": import_torch}))
collnb.shutdown()
"""

_PROBE = r"""
import json, collnb
print(json.dumps({"saved": collnb.backend_support("gloo").source}))
collnb.shutdown()
"""

_EXPLORER = r"""
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


def _fresh(code: str, tree: str, **env: str) -> dict:
    """Run ``code`` in a new interpreter in ``tree`` (bytecode written, as an install's), return its JSON line."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environ.update(env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tree,
                          env=environ)
    if proc.returncode != 0:
        raise SystemExit(f"the fresh interpreter failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.3f} s (min {min(values):.3f}, max {max(values):.3f})"


def first_picture(tree: str, repeats: int) -> dict:
    """Issue 33's measurement: floor, empty cache, warm cache, ``repeats`` times in turn."""
    rows: dict[str, list[float]] = {"floor": [], "empty": [], "warm": []}
    torch_import: list[float] = []
    with tempfile.TemporaryDirectory(prefix="collnb-bench-cache-") as cache:  # warm-up: bytecode, page cache
        _fresh(_PICTURE, tree, XDG_CACHE_HOME=cache)
    for _ in range(repeats):
        cache = tempfile.mkdtemp(prefix="collnb-bench-cache-")
        try:
            floor = _fresh(_FLOOR, tree)
            empty = _fresh(_PICTURE, tree, XDG_CACHE_HOME=cache)
            _fresh(_PROBE, tree, XDG_CACHE_HOME=cache)
            warm = _fresh(_PICTURE, tree, XDG_CACHE_HOME=cache)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        rows["floor"].append(floor["seconds"])
        rows["empty"].append(empty["seconds"])
        rows["warm"].append(warm["seconds"])
        torch_import += [floor["import_torch"], empty["import_torch"], warm["import_torch"]]
    return {"seconds": rows, "import_torch": torch_import}


def explorer(tree: str, repeats: int, stale: bool) -> dict:
    """Issue 20's measurement: ``collnb.explore`` at world size 8 and its parts."""
    ends, parts = [], []
    for _ in range(repeats):
        ends.append(_fresh(_EXPLORER, tree, **({"COLLNB_SUPPORT_CACHE": "0"} if stale else {})))
        parts.append(_fresh(_PARTS, tree))
    return {"end_to_end": ends, "parts": parts}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--explorer", action="store_true", help="issue 20's explorer at world size 8 and its parts")
    ap.add_argument("--stale", action="store_true",
                    help="with --explorer: no saved probe (COLLNB_SUPPORT_CACHE=0)")
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the folder whose collnb package is measured (default: this checkout)")
    args = ap.parse_args(argv)
    print(_load())
    print(args.tree)
    if args.explorer:
        out = explorer(args.tree, args.repeats, args.stale)
        first = statistics.median(e["first_picture_s"] for e in out["end_to_end"])
        complete = statistics.median(e["controls_complete_s"] for e in out["end_to_end"])
        print(f"import collnb -> first explorer picture at world size 8{' (no saved probe)' if args.stale else ''} "
              f"(median of {args.repeats}): {first:.2f} s (every control complete: {complete:.2f} s)")
        print(f"  target {TARGET_EXPLORER_S:.1f} s: median / target = {first / TARGET_EXPLORER_S:.2f}")
        print("  the parts, each on its own (medians):")
        notes = {"import_torch": "  (not counted: every PyTorch notebook pays it)",
                 "backend_probe_fresh": "  (not counted above: the probe on real ranks, once per install)"}
        for name in ("import_torch", "import_collnb_views", "fork_and_group_init", "backend_probe",
                     "backend_probe_fresh", "first_run", "draw"):
            value = statistics.median(p[name] for p in out["parts"])
            print(f"    {name:<22} {value:6.2f} s{notes.get(name, '')}")
    else:
        out = first_picture(args.tree, args.repeats)
        s = out["seconds"]
        print(f"after import torch (+IPython), world size 4, gloo; {args.repeats} repeats, each in fresh interpreters:")
        print(f"  floor: fork + gloo init + all_reduce     {_spread(s['floor'])}")
        print(f"  collnb.run + picture, empty cache      {_spread(s['empty'])}")
        print(f"  collnb.run + picture, warm cache       {_spread(s['warm'])}")
        print(f"  (import torch itself: median {statistics.median(out['import_torch']):.2f} s, not counted)")
        for name, target in (("empty", None), ("warm", TARGET_RATIO)):
            ratios = [x / f for x, f in zip(s[name], s["floor"])]
            goal = f" (target <= {target:.0f}x)" if target else ""
            print(f"  {name} cache / floor: median {statistics.median(ratios):.2f}x "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f}){goal}")
        print(f"  empty cache / {TARGET_EMPTY_S:.0f} s target: {statistics.median(s['empty']) / TARGET_EMPTY_S:.2f}")
    print(_load() + " (at the end)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
