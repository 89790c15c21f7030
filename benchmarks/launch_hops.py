"""Launch-path hops: what one warm ``collnb.run`` calls in the kernel's process, counted.

A profile function (:func:`sys.setprofile`) sees every Python call made while one
``collnb.run("all_reduce", 4)`` runs on warm ranks (the pool and the backend probe made by a first
run, not counted). It prints:

* ``collnb calls``: calls of functions defined in collnb's own files (the kernel side; the ranks
  are other processes and not counted), and how many of them were in :mod:`collnb.ranks`; the output
  relay's reads depend on when the ranks' lines arrive, so these vary by a few between runs;
* ``distinct``: how many different collnb functions those were;
* ``depth``: the longest chain of collnb frames from ``collnb.run`` down (``run`` -> ... -> the
  pool's wait);
* the calls of the request's checks by name (``check_backend``, ``check_world_size``,
  ``check_launch_options``, ``local_backend_info``, ``check_ranks``...): a request checked once where
  it enters shows 1 for each.

Usage: ``python benchmarks/launch_hops.py [--primitive all_reduce] [--world-size 4] [--top 0]``
(``--top N`` also lists the N most called collnb functions).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
from types import FrameType
from typing import Any

#: The request checks whose repeats the count names.
CHECKS = ("check_backend", "check_world_size", "check_launch_options", "local_backend_info", "check_ranks",
          "_checked_ranks", "backend_info", "check_request", "_check_request", "check_plan", "check_call",
          "check_flag", "check_call_arguments", "get_spec")


def count(primitive: str, world_size: int) -> tuple[collections.Counter[str], int]:
    """``(calls per collnb function "module:name", deepest collnb chain)`` of one warm run."""
    import collnb

    root = os.path.dirname(os.path.abspath(collnb.__file__)) + os.sep
    collnb.run(primitive, world_size)  # warm: pool started, backend probe done or loaded
    calls: collections.Counter[str] = collections.Counter()
    depth = {"now": 0, "max": 0}
    ours: set[FrameType] = set()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event not in ("call", "return"):
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(root):
            return
        if event == "call":
            module = filename[len(root):].removesuffix(".py").replace(os.sep, ".")
            calls[f"{module}:{frame.f_code.co_qualname}"] += 1
            ours.add(frame)
            depth["now"] += 1
            depth["max"] = max(depth["max"], depth["now"])
        elif frame in ours:
            ours.discard(frame)
            depth["now"] -= 1

    sys.setprofile(profile)
    try:
        collnb.run(primitive, world_size)
    finally:
        sys.setprofile(None)
    collnb.shutdown()
    return calls, depth["max"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--primitive", default="all_reduce")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--top", type=int, default=0)
    a = p.parse_args()
    calls, deepest = count(a.primitive, a.world_size)
    in_ranks = sum(n for key, n in calls.items() if key.startswith("ranks."))
    print(f"collnb.run({a.primitive!r}, {a.world_size}), warm: collnb calls {sum(calls.values())} "
          f"(collnb.ranks {in_ranks}), distinct {len(calls)}, depth {deepest}")
    by_name: collections.Counter[str] = collections.Counter()
    for key, n in calls.items():
        by_name[key.rpartition(":")[2].rpartition(".")[2]] += n
    print("checks: " + ", ".join(f"{name} x{by_name[name]}" for name in CHECKS))
    for key, n in calls.most_common(a.top):
        print(f"{n:6d}  {key}")


if __name__ == "__main__":
    main()
