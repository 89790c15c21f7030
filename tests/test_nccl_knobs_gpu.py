"""NCCL's knobs measured with NCCL (marked ``gpu``; skipped with the reason where torch sees fewer
than 2 CUDA GPUs: NCCL prints no tuning table for one rank). Each run is a fresh process of 2+
ranks (``torch.multiprocessing.spawn``) with ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,GRAPH``
and NCCL's log in a file (``NCCL_DEBUG_FILE``); collnb reads the lines back
(:mod:`collnb.labs.cluster.nccl`): the algorithm and protocol NCCL chose per call must be the ones
``NCCL_ALGO``/``NCCL_PROTO`` forced, and, with NCCL's own graph lines as input, collnb's model must
give NCCL's printed latency/bandwidth table where the installed NCCL is the release the model
copies (v2.30.7-1), and otherwise name the release that differs. Times are printed, never asserted."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from collnb.labs.cluster import nccl as N

NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
WHY = (f"needs 2 CUDA GPUs (NCCL prints its tuning table only with 2+ ranks); torch {torch.__version__} sees {NGPU} "
       f"(cuda={torch.version.cuda})")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NGPU < 2, reason=WHY)]

_SCRIPT = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp
    def main(rank, n, sizes):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=n)
        for s in sizes:
            t = torch.ones(s // 4, device="cuda")
            for _ in range(3):
                dist.all_reduce(t)
            torch.cuda.synchronize(); t0 = time.perf_counter()
            for _ in range(10):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            if rank == 0:
                print(f"TIME {s} {(time.perf_counter() - t0) / 10 * 1e6:.1f}", flush=True)
        dist.destroy_process_group()
    if __name__ == "__main__":
        n, sizes = int(sys.argv[1]), [int(x) for x in sys.argv[2:]]
        mp.spawn(main, args=(n, sizes), nprocs=n)
""")
SIZES = [1 << 10, 1 << 20, 1 << 26]


def _run(tmp_path, env_extra: dict, port: int) -> tuple[str, dict]:
    script = tmp_path / "knob.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING,GRAPH,ENV",
           "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log"), "PORT": str(port), **env_extra}
    done = subprocess.run([sys.executable, str(script), str(min(NGPU, 8))] + [str(s) for s in SIZES],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    times = {int(a): float(b) for _t, a, b in (line.split() for line in done.stdout.splitlines() if line.startswith("TIME"))}
    log = "\n".join(open(p).read() for p in glob.glob(str(tmp_path / "nccl.*.log")))
    for p in glob.glob(str(tmp_path / "nccl.*.log")):
        os.unlink(p)
    return log, times


@pytest.mark.parametrize("algo,proto", [("Ring", "Simple"), ("Ring", "LL"), ("Tree", "Simple"), ("Tree", "LL128")])
def test_nccl_algo_and_proto_force_the_choice_nccl_logs(tmp_path, algo, proto):
    log, times = _run(tmp_path, {"NCCL_ALGO": algo, "NCCL_PROTO": proto}, 29600 + hash((algo, proto)) % 200)
    chosen = [c for c in N.parse_chosen(log) if c[0] == "AllReduce"]
    assert chosen, "NCCL printed no 'AllReduce: N Bytes -> Algo ...' line: " + log[-2000:]
    assert {(a, p) for _f, _n, a, p in chosen} == {(algo, proto)}
    print(f"NCCL_ALGO={algo} NCCL_PROTO={proto}: " + ", ".join(f"{s} B {t:.1f} us" for s, t in sorted(times.items())))


def test_collnbs_model_gives_ncclS_own_table_for_ncclS_own_graph(tmp_path):
    log, times = _run(tmp_path, {}, 29900)
    printed = N.parse_tuning_table(log)
    assert printed, "no TUNING table in NCCL's log: " + log[-2000:]
    version = ".".join(map(str, torch.cuda.nccl.version()))
    gpu = {9: "hopper", 8: "ampere", 7: "volta", 10: "blackwell"}.get(torch.cuda.get_device_capability(0)[0], "hopper")
    system = N.system_from_log(log, 1, min(NGPU, 8), gpu)
    model = N.tune(system)
    chosen = N.parse_chosen(log)
    print(f"NCCL {version}; graphs {N.parse_graph_lines(log)[:2]}; NCCL chose {chosen}; times {times}")
    if not version.startswith("2.30."):
        pytest.skip(f"the installed NCCL is {version}; collnb's model copies v{N.NCCL_VERSION}'s constants, so its "
                    f"table is compared only with that release's")
    for (f, a, p), (lat, bw) in printed.items():
        if a in ("Ring", "Tree"):
            assert model.latency[f][a][p] == pytest.approx(lat, abs=0.11), (f, a, p)
            assert model.bandwidth[f][a][p] == pytest.approx(bw, abs=0.11), (f, a, p)
