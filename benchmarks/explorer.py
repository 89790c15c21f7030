"""Explorer benchmark: a warm slider move against re-spawning ranks, the helper's own overhead, memory.

Measures in one run on this machine, world size 8:

* **re-spawn** (the seeds' pattern): ``torch.multiprocessing.spawn`` of a module-level worker
  that calls ``init_process_group("gloo", init_method="tcp://127.0.0.1:PORT")`` (a free port)
  and ``all_reduce``; seconds from the call to the all_reduce result on every rank (each rank
  records ``time.time()`` right after its all_reduce returns) and to ``spawn`` returning.
* **warm slider move**: :func:`collnb.explore` at world size 8; a control is set (as a slider
  drag or dropdown change does) and the clock stops when the new heatmap is in the widget
  (``Explorer.wait()``): (a) dtype changes float32 <-> int8 at world size 8; (b) world size
  changes 7 <-> 8; median of each, and the split into run on the ranks / drawing.
* **the helper's own overhead per request**: ``collnb.launch`` of a function that lines the
  ranks up (``dist.barrier``), then times one ``dist.all_reduce`` of N float32 elements on each
  rank. overhead = wall time of the request - the longest rank-side time of the function body;
  compared with gloo's collective time (the longest rank-side all_reduce time), for several N.
  ``collnb.run`` (primitives: validation, reference, result) is timed too, without drawing.
* **memory**: total PSS (proportional set size, shared pages split among sharers:
  ``psutil.Process.memory_full_info().pss``) of the 8 warm ranks.

* **the heatmap alone**: :func:`collnb.views.heatmap_png` of the world-size-8 int8 all_reduce
  (painting and PNG encoding, no ranks, no HTML), wall and CPU time.
* **a clean rank per call**: what each rank does after a learner's call so that the next finds it
  as a fresh script would (:mod:`collnb.ranks.fresh.rank_state`: put back what changed, look for what
  cannot be), timed inside the ranks (median per call and rank), and a warm launch of a function
  that returns at once with that work and without it, in turn on the same ranks. Slider moves run
  collnb's own code, which the ranks do not clean up after.

Targets (issue 4): warm move median <= 150 ms and <= 0.03x re-spawn; overhead <= 10% of the
collective time; 8 warm ranks <= 300 MB total PSS. Issue 8: a world-size-8 heatmap <= 20 ms.

Usage: ``python benchmarks/explorer.py [--moves 20] [--spawn-repeats 2] [--json FILE]``
The machine's load (other processes) shows up in every figure; the script prints the load average.
"""
import argparse
import json
import os
import socket
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD_SIZE = 8


# ------------------------------------------------------------------------------------------------
# the seeds' pattern (module level, importable by spawn; only torch is imported at the top)

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed_worker(rank, world_size, port, out_dir):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{port}")
    tensor = torch.full((4,), float(rank + 1))
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    done = time.time()
    with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
        f.write(repr(done))
    dist.destroy_process_group()


def respawn(world_size):
    """(seconds to every rank's all_reduce result, seconds until spawn returned)."""
    with tempfile.TemporaryDirectory(prefix="collnb-bench-") as out:
        t0 = time.time()
        mp.spawn(seed_worker, args=(world_size, _free_port(), out), nprocs=world_size, join=True)
        t_end = time.time()
        done = max(float(open(os.path.join(out, f"rank{r}")).read()) for r in range(world_size))
    return done - t0, t_end - t0


# ------------------------------------------------------------------------------------------------
# collnb side

def _timed_all_reduce(rank, world_size, n):
    t_in = time.perf_counter()
    x = torch.ones(n, dtype=torch.float32)
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    t1 = time.perf_counter()
    return (t1 - t0, time.perf_counter() - t_in)


def overhead(n, repeats):
    import collnb
    collnb.launch(_timed_all_reduce, WORLD_SIZE, args=(n,))
    walls, colls, bodies = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = collnb.launch(_timed_all_reduce, WORLD_SIZE, args=(n,))
        walls.append(time.perf_counter() - t0)
        colls.append(max(o[0] for o in out))
        bodies.append(max(o[1] for o in out))
    over = [w - b for w, b in zip(walls, bodies)]
    return dict(n=n, bytes=4 * n, wall=statistics.median(walls), collective=statistics.median(colls),
                overhead=statistics.median(over))


def slider_moves(moves):
    from collnb.views.explorer import explore
    ex = explore("all_reduce", world_size=WORLD_SIZE)
    c = ex.controls
    out = {}
    try:
        for name, control, values in (("dtype", "dtype", ["int8", "float32"]),
                                      ("world size", "world_size", [WORLD_SIZE - 1, WORLD_SIZE])):
            if name == "world size":
                c["dtype"].value = "float32"
            c["world_size"].value = WORLD_SIZE
            ex.wait()
            for v in values:  # warm-up: every value once
                c[control].value = v
                ex.wait()
            totals, runs, draws = [], [], []
            for i in range(moves):
                v = values[i % 2]
                t0 = time.perf_counter()
                c[control].value = v
                ex.wait()
                totals.append(time.perf_counter() - t0)
                assert ex.error is None, ex.message
                assert ex.last_params[control] == v
                runs.append(ex.last_timing["run_s"])
                draws.append(ex.last_timing["draw_s"])
            out[name] = dict(total=statistics.median(totals), run=statistics.median(runs),
                             draw=statistics.median(draws), n=moves)
        # world sizes this pool has not run yet (each needs a new process group once)
        firsts = []
        for v in (3, 5, 6, 7, 2):
            t0 = time.perf_counter()
            c["world_size"].value = v
            ex.wait()
            firsts.append(time.perf_counter() - t0)
            assert ex.error is None, ex.message
        out["first visit"] = dict(total=statistics.median(firsts), run=ex.last_timing["run_s"],
                                  draw=ex.last_timing["draw_s"], n=len(firsts))
        # collnb.run alone (no drawing), same world size and dtype
        from collnb.collectives import primitives
        primitives.run("all_reduce", WORLD_SIZE)
        ts = []
        for _ in range(moves):
            t0 = time.perf_counter()
            primitives.run("all_reduce", WORLD_SIZE)
            ts.append(time.perf_counter() - t0)
        out["collnb.run"] = statistics.median(ts)
        # the heatmap alone (no ranks, no HTML): painting + PNG, as RunResult.png and the explorer do
        from collnb.views import heatmap_png
        c["dtype"].value = "int8"  # the busiest picture: combined bands and orange float64 notes
        c["world_size"].value = WORLD_SIZE
        ex.wait()
        res = ex.last_result
        walls, cpus = [], []
        for _ in range(max(moves, 10)):
            t0, c0 = time.perf_counter(), time.process_time()
            heatmap_png(res, dpi=ex.dpi)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        out["heatmap"] = dict(wall=statistics.median(walls), cpu=statistics.median(cpus), n=len(walls))
    finally:
        ex.close()
    return out


def _clean_state_cost(rank, world_size, repeats):
    """Inside a rank: seconds per call of what the rank does after every call to stay as clean as a
    fresh script (collnb.ranks.fresh.rank_state: put back, then look for what cannot be put back)."""
    from collnb.ranks.fresh.rank_state import RankState
    state = RankState(own_process=False)  # the same checks, without taking over this rank's streams
    state.own = True
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state.restore()
        state.retire_reason()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def clean_state_cost(repeats=200):
    """Median seconds per call and rank of the clean-state work (max over the ranks)."""
    import collnb
    return max(collnb.launch(_clean_state_cost, WORLD_SIZE, args=(repeats,)))


def _switch_clean_state(rank, world_size, on):
    """In each rank: do the clean-state work after every call (``on``), or skip it (for the paired
    measurement below only: a rank that skips it is not clean)."""
    from collnb.ranks.fresh.rank_state import RankState
    if "_bench_work" not in vars(RankState):
        RankState._bench_work = (RankState.restore, RankState.retire_reason)
    RankState.restore, RankState.retire_reason = RankState._bench_work if on else (
        lambda self: None, lambda self: "")
    return rank


def _learners_function(rank, world_size):
    return rank


def learner_call_ratio(blocks=8, calls=20):
    """A warm ``collnb.launch`` of a learner's function (one that returns at once, defined outside
    collnb, so each rank puts itself back after it) with the clean-state work over one without it,
    in blocks, on and off in turn. Returns (median with, median without, ratio)."""
    import collnb
    collnb.launch(_learners_function, WORLD_SIZE)
    times = {True: [], False: []}
    try:
        for b in range(2 * blocks):
            on = b % 2 == 0
            collnb.launch(_switch_clean_state, WORLD_SIZE, args=(on,))
            for _ in range(calls):
                t0 = time.perf_counter()
                collnb.launch(_learners_function, WORLD_SIZE)
                times[on].append(time.perf_counter() - t0)
    finally:
        collnb.launch(_switch_clean_state, WORLD_SIZE, args=(True,))
    with_, without = statistics.median(times[True]), statistics.median(times[False])
    return with_, without, with_ / without


def pss_of_pool():
    import psutil
    from collnb.ranks import warm_pool
    pool = warm_pool()
    pids = pool.pids()[:WORLD_SIZE]
    return sum(psutil.Process(p).memory_full_info().pss for p in pids) / 2 ** 20, len(pids)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=int, default=20, help="slider moves per kind (median shown)")
    ap.add_argument("--spawn-repeats", type=int, default=2, help="re-spawn measurements (median shown)")
    ap.add_argument("--overhead-repeats", type=int, default=15)
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    import collnb
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPU(s), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    spawn = [respawn(WORLD_SIZE) for _ in range(args.spawn_repeats)]
    spawn_first = statistics.median(s[0] for s in spawn)
    spawn_total = statistics.median(s[1] for s in spawn)

    collnb.shutdown()
    moves = slider_moves(args.moves)
    pss, n_ranks = pss_of_pool()
    sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 22]
    over = [overhead(n, args.overhead_repeats) for n in sizes]
    clean = clean_state_cost()
    learner_with, learner_without, learner_ratio = learner_call_ratio()
    collnb.shutdown()

    print(f"\nre-spawn (seeds' mp.spawn pattern), world size {WORLD_SIZE}, median of {args.spawn_repeats}: "
          f"all_reduce result after {spawn_first:.3f} s, spawn returned after {spawn_total:.3f} s")
    print(f"\nwarm slider move at world size {WORLD_SIZE} (set control -> run on real ranks -> heatmap "
          f"in the widget), median of {args.moves}:")
    print(f"{'move':>12} {'total (ms)':>11} {'run (ms)':>9} {'draw (ms)':>10} {'x re-spawn':>11}  target")
    for name in ("dtype", "world size"):
        m = moves[name]
        print(f"{name:>12} {m['total'] * 1e3:>11.1f} {m['run'] * 1e3:>9.1f} {m['draw'] * 1e3:>10.1f} "
              f"{m['total'] / spawn_first:>11.4f}  <= 150 ms, <= 0.03x")
    m = moves["first visit"]
    print(f"  a world size the pool had not run before (new process group; 3, 5, 6, 7, 2 after 7 and 8): "
          f"median {m['total'] * 1e3:.1f} ms ({m['total'] / spawn_first:.4f}x re-spawn)")
    print(f"  collnb.run('all_reduce', {WORLD_SIZE}) without drawing: {moves['collnb.run'] * 1e3:.1f} ms")
    h = moves["heatmap"]
    print(f"  the world-size-{WORLD_SIZE} heatmap alone (int8 all_reduce, paint + PNG, median of {h['n']}): "
          f"{h['wall'] * 1e3:.1f} ms wall, {h['cpu'] * 1e3:.1f} ms CPU (target <= 20 ms)")

    print(f"\nthe helper's own overhead per request (collnb.launch, world size {WORLD_SIZE}, "
          f"median of {args.overhead_repeats}; target <= 10% of the collective):")
    print(f"{'all_reduce':>12} {'request (ms)':>13} {'collective (ms)':>16} {'overhead (ms)':>14} "
          f"{'overhead/collective':>20}")
    for o in over:
        print(f"{_size(o['bytes']):>12} {o['wall'] * 1e3:>13.2f} {o['collective'] * 1e3:>16.2f} "
              f"{o['overhead'] * 1e3:>14.2f} {o['overhead'] / o['collective']:>19.1%}")

    print(f"\nkeeping warm ranks as clean as a fresh script (issue 17: put back what a call changed, look for "
          f"what cannot be), after a learner's call: {clean * 1e6:.0f} us per call and rank in a loop (median, "
          f"the slowest of {WORLD_SIZE} ranks), done after the rank has answered")
    print("  a slider move runs collnb's own code only, after which the ranks skip this work (issue 17: a warm "
          "move within 5% of before; compare the table above with this script run on the previous release)")
    print(f"  a warm launch of a learner's function that returns at once, with it / without it: "
          f"{learner_with * 1e3:.2f} ms / {learner_without * 1e3:.2f} ms = {learner_ratio:.3f}")
    print(f"\ntotal PSS of {n_ranks} warm ranks: {pss:.0f} MB (target <= 300 MB)")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(load=load, spawn_first_s=spawn_first, spawn_total_s=spawn_total,
                           moves=moves, overhead=over, pss_mb=pss, clean_state_s=clean,
                           learner_call_ratio=learner_ratio), f, indent=1)
        print(f"wrote {args.json}")


def _size(b):
    for unit in ("B", "KiB", "MiB"):
        if b < 1024:
            return f"{b:.0f} {unit}"
        b /= 1024
    return f"{b:.0f} GiB"


if __name__ == "__main__":
    main()
