"""Launch-path hops: what one warm ``collnb.run`` calls in the kernel's process, counted; and how
many times each entry point that starts ranks checks its launch request.

A profile function (:func:`sys.setprofile`, and :func:`threading.setprofile` for an explorer's
worker thread) sees every Python call made while one ``collnb.run("all_reduce", 4)`` runs on warm
ranks (the pool and the backend probe made by a first run, not counted). It prints:

* ``collnb calls``: calls of functions defined in collnb's own files (the kernel side; the ranks
  are other processes and not counted), and how many of them were in :mod:`collnb.ranks`; the output
  relay's reads depend on when the ranks' lines arrive, so these vary by a few between runs;
* ``distinct``: how many different collnb functions those were;
* ``depth``: the longest chain of collnb frames from ``collnb.run`` down (``run`` -> ... -> the
  pool's wait);
* the calls of the request's checks by name (``check_backend``, ``check_world_size``,
  ``check_launch_options``, ``local_backend_info``, ``check_ranks``...): a request checked once where
  it enters shows 1 for each.

``--entry-points`` counts the same checks for one warm call of every entry point that starts ranks
(``collnb.run``, ``run_batch``, an explorer's slider move, the bench, ``collnb.redistribute``,
``collnb.run_algorithm``, the parallel labs, a virtual cluster's launches where this machine can make
network namespaces), one row each: ``plan`` is :func:`collnb.ranks.request.check_plan` (the one check
of where and how a launch runs), ``options`` the launch options' names, ``backend``/``world_size`` the
vocabulary's checks, ``facts`` a rank set's ``backend_info`` (what the backend can do there), ``call``
:func:`collnb.ranks.request.check_call` (the function and its arguments, once per launch) and
``launches`` the launches made. Each entry point runs once untimed first (warm ranks, cached probe).
A request checked once where it enters shows ``plan`` 1 per distinct launch (the bench: one per world
size, debug_cost: DETAIL off and on) and ``call`` 1 per launch. A virtual cluster's own ``launch``
checks its arguments itself (``plan`` 0).

Usage: ``python benchmarks/launch_hops.py [--primitive all_reduce] [--world-size 4] [--top 0]``
(``--top N`` also lists the N most called collnb functions), or ``--entry-points [NAME ...]``.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

#: The request checks whose repeats the count names.
CHECKS = ("check_backend", "check_world_size", "check_launch_options", "local_backend_info", "check_ranks",
          "_checked_ranks", "backend_info", "check_request", "_check_request", "check_plan", "check_call",
          "check_flag", "check_call_arguments", "get_spec")

#: The columns of ``--entry-points``: (heading, the function names counted in it).
COLUMNS = (("plan", ("check_plan",)), ("options", ("check_launch_options",)), ("backend", ("check_backend",)),
           ("world_size", ("check_world_size",)), ("facts", ("LocalRanks.backend_info", "ClusterRanks.backend_info",
                                                               "Engines.backend_info")),
           ("call", ("check_call",)), ("launches", ("LocalRanks.launch", "Engines.launch", "VirtualCluster._call")))


class Counter:
    """Counts calls of collnb's functions (``"module:qualname"``) while :attr:`on`, in every thread
    started after it was made and in this one."""

    def __init__(self) -> None:
        import collnb

        self.root = os.path.dirname(os.path.abspath(collnb.__file__)) + os.sep
        self.calls: collections.Counter[str] = collections.Counter()
        self.depth = {"now": 0, "max": 0}
        self.on = False
        self._ours: set[FrameType] = set()
        self._lock = threading.Lock()
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)

    def _profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.on or event not in ("call", "return"):
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(self.root):
            return
        with self._lock:
            if event == "call":
                module = filename[len(self.root):].removesuffix(".py").replace(os.sep, ".")
                self.calls[f"{module}:{frame.f_code.co_qualname}"] += 1
                self._ours.add(frame)
                if threading.current_thread() is threading.main_thread():
                    self.depth["now"] += 1
                    self.depth["max"] = max(self.depth["max"], self.depth["now"])
            elif frame in self._ours:
                self._ours.discard(frame)
                if threading.current_thread() is threading.main_thread():
                    self.depth["now"] -= 1

    def count(self, fn: Callable[[], object]) -> collections.Counter[str]:
        """The calls made while ``fn()`` runs."""
        self.calls = collections.Counter()
        self.on = True
        try:
            fn()
        finally:
            self.on = False
        return self.calls

    def close(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]  # None removes it


def by_name(calls: collections.Counter[str]) -> collections.Counter[str]:
    """The counts by function name (the last part of the qualified name) and by ``Class.method``."""
    out: collections.Counter[str] = collections.Counter()
    for key, n in calls.items():
        qual = key.rpartition(":")[2]
        out[qual.rpartition(".")[2]] += n
        if "." in qual:
            out[".".join(qual.split(".")[-2:])] += n
    return out


def count(primitive: str, world_size: int) -> tuple[collections.Counter[str], int]:
    """``(calls per collnb function "module:name", deepest collnb chain)`` of one warm run."""
    import collnb

    collnb.run(primitive, world_size)  # warm: pool started, backend probe done or loaded
    counter = Counter()
    try:
        calls = counter.count(lambda: collnb.run(primitive, world_size))
    finally:
        counter.close()
    collnb.shutdown()
    return calls, counter.depth["max"]


def _rank_of(rank: int, world_size: int) -> int:
    return rank


#: What :func:`count_entry_points` closes at its end (a virtual cluster's namespaces).
_closing: list[Callable[[], object]] = []


def entry_points() -> dict[str, tuple[Callable[[], Any], Callable[[Any], object]]]:
    """``{name: (make, call)}``: ``make()`` runs once untimed and returns what ``call(it)`` uses;
    ``call`` is the entry point's warm call that is counted."""
    import collnb
    from collnb.labs import bench as bench_lab
    from collnb.labs import parallel
    from collnb.labs.parallel.composed import Plan
    from collnb.labs.parallel.resharding import reshard

    def explorer() -> Any:
        ex = collnb.explore("all_reduce", world_size=4)
        ex.set(world_size=2)
        ex.wait()
        return ex

    def move(ex: Any) -> None:
        ex.set(world_size=3 if ex.state.world_size != 3 else 2)
        ex.wait()

    def schedules() -> Any:
        w = parallel.explore_schedules(world_size=2, m=2, forward_ms=0, backward_ms=0)
        w.wait()
        return w

    def schedules_move(w: Any) -> None:
        w.set(m=3 if w.state.m != 3 else 2)
        w.wait()

    plain: dict[str, Callable[[], object]] = {
        "collnb.launch": lambda: collnb.launch(_rank_of, 4),
        "collnb.run": lambda: collnb.run("all_reduce", 4),
        "collnb.run_batch": lambda: collnb.run_batch([{"primitive": "all_reduce"}, {"primitive": "broadcast"}], 4),
        "collnb.backend_support": lambda: collnb.backend_support("gloo"),
        "bench (2 world sizes x 2 sizes)": lambda: bench_lab.bench("all_reduce", (2, 4), [1024, 2048], iters=1,
                                                                    warmup=0, references=False, progress=False,
                                                                    as_frame=False),
        "bench.debug_cost": lambda: bench_lab.debug_cost("all_reduce", 2, 1024, iters=1, warmup=0),
        "collnb.redistribute": lambda: collnb.redistribute((4, 4), (2, 2), src="S(0),R", dst="R,R", repeats=0),
        "collnb.run_algorithm": lambda: collnb.run_algorithm("all_reduce", "ring", 4),
        "collnb.run_algorithms (2 cases)": lambda: collnb.run_algorithms(
            [{"primitive": "all_reduce"}, {"primitive": "broadcast"}], 4),
        "parallel.reshard": lambda: reshard(Plan.parse("dp_shard=2"), Plan.parse("dp_replicate=2")),
    }
    out: dict[str, tuple[Callable[[], Any], Callable[[Any], object]]] = {
        name: (f, lambda _it, f=f: f()) for name, f in plain.items()}  # type: ignore[misc]
    out["explorer (a slider move)"] = (explorer, move)
    out["parallel.explore_schedules (a move)"] = (schedules, schedules_move)
    from collnb.labs.cluster import VirtualCluster, available
    if available()[0]:
        state: dict[str, Any] = {}

        def vc() -> Any:
            if "vc" not in state:
                state["vc"] = VirtualCluster(nodes=2, ranks_per_node=1, inter_gbps=None).__enter__()
                _closing.append(lambda: state["vc"].__exit__(None, None, None))
            state["vc"].launch(_rank_of)
            return state["vc"]

        def activated() -> Any:
            c = collnb.cluster(2, 1, activate=True, quiet=True)
            state["cluster"] = c
            collnb.run("all_reduce", 2)
            return c

        out["VirtualCluster.launch"] = (vc, lambda v: v.launch(_rank_of))
        out["collnb.cluster(...).launch"] = (lambda: collnb.cluster(2, 1, quiet=True),
                                             lambda c: (c.launch(_rank_of), c.close()))
        out["collnb.run on an active cluster"] = (activated, lambda c: (collnb.run("all_reduce", 2), c.close()))
    return out


def count_entry_points(names: list[str]) -> list[tuple[str, collections.Counter[str]]]:
    """One row per entry point: its checks' counts (by name) over one warm call."""
    import collnb

    counter = Counter()
    rows = []
    try:
        for name, (make, call) in entry_points().items():
            if names and not any(n.lower() in name.lower() for n in names):
                continue
            it = make()
            rows.append((name, by_name(counter.count(lambda call=call, it=it: call(it)))))  # type: ignore[misc]
            if hasattr(it, "close") and not hasattr(it, "launch"):
                it.close()
    finally:
        counter.close()
        for close in _closing:
            close()
        collnb.shutdown()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--primitive", default="all_reduce")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--entry-points", nargs="*", default=None, metavar="NAME",
                   help="count every entry point's checks (or those whose name contains NAME)")
    a = p.parse_args()
    if a.entry_points is not None:
        rows = count_entry_points(a.entry_points)
        width = max(len(name) for name, _ in rows)
        print(f"{'entry point (one warm call)':{width}}  " + "  ".join(f"{h:>10}" for h, _ in COLUMNS))
        for name, got in rows:
            print(f"{name:{width}}  " + "  ".join(f"{sum(got[f] for f in fs):>10}" for _, fs in COLUMNS))
        return
    calls, deepest = count(a.primitive, a.world_size)
    in_ranks = sum(n for key, n in calls.items() if key.startswith("ranks."))
    print(f"collnb.run({a.primitive!r}, {a.world_size}), warm: collnb calls {sum(calls.values())} "
          f"(collnb.ranks {in_ranks}), distinct {len(calls)}, depth {deepest}")
    names = by_name(calls)
    print("checks: " + ", ".join(f"{name} x{names[name]}" for name in CHECKS))
    for key, n in calls.most_common(a.top):
        print(f"{n:6d}  {key}")


if __name__ == "__main__":
    main()
