"""collnb within Binder's limits: 2 GB of memory and a 64 MB /dev/shm.

The limits are made for real, around a child process tree:

* memory: a cgroup nested in the test's own (v1 ``memory`` controller, ``memory.limit_in_bytes`` and, where the kernel
  accounts swap, ``memory.memsw.limit_in_bytes`` = 2 GiB) that the child joins before it starts
  Python, so the Jupyter kernel and every rank it forks are inside it (a cgroup v2 ``memory.max``
  is used where that is the hierarchy);
* /dev/shm: ``unshare -m`` gives the child a private mount namespace in which a 64 MiB tmpfs is
  mounted over /dev/shm (the host's /dev/shm is untouched).

Inside, the child executes ``notebooks/07_all_reduce.ipynb`` top to bottom in a real kernel and
then launches 16 ranks that all_reduce a 1 MiB tensor. It reports what it saw; the test checks the
results, that /dev/shm really was 64 MiB and the memory limit really was 2 GiB, and that the
cgroup never hit its limit (``memory.failcnt`` = 0) — and prints the peak memory it recorded.

Needs root, ``unshare`` and a writable memory cgroup; otherwise it is skipped with the reason.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 2 << 30
SHM_BYTES = 64 << 20
NOTEBOOK = ROOT / "notebooks" / "07_all_reduce.ipynb"

CHILD = textwrap.dedent(r"""
    import json, os, sys, time
    import nbformat
    from nbclient import NotebookClient
    report = {}
    st = os.statvfs("/dev/shm")
    report["shm_bytes"] = st.f_blocks * st.f_frsize
    nb = nbformat.read(sys.argv[1], as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": os.path.dirname(sys.argv[1])}}).execute()
    report["notebook_s"] = round(time.perf_counter() - t0, 1)
    report["notebook_errors"] = [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code"
                                 for o in c.get("outputs", []) if o.output_type == "error"]
    report["notebook_unrun"] = sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip()
                                   and c.get("execution_count") is None)
    import torch, torch.distributed as dist, collnb

    def big_all_reduce(rank, world_size):
        t = torch.full((1 << 18,), float(rank))      # 1 MiB of float32 per rank
        dist.all_reduce(t)
        return float(t[0]), float(t[-1])

    t0 = time.perf_counter()
    out = collnb.launch(big_all_reduce, world_size=16, timeout=240)
    report["launch16_s"] = round(time.perf_counter() - t0, 1)
    report["launch16"] = out
    collnb.shutdown()
    print("REPORT " + json.dumps(report), flush=True)
""")


def _memory_cgroup(name: str) -> tuple[Path, str]:
    """Create a memory cgroup limited to 2 GiB; returns (its folder, the version: 'v1' or 'v2')."""
    # inside this process's own cgroup (limits nest), never beside it
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            own[c] = path.lstrip("/")
    v1 = Path("/sys/fs/cgroup/memory") / own.get("memory", "")
    v2 = Path("/sys/fs/cgroup") / own.get("", "")
    if (v1 / "memory.limit_in_bytes").exists():
        cg = v1 / name
        cg.mkdir()
        (cg / "memory.limit_in_bytes").write_text(str(LIMIT_BYTES))
        if (cg / "memory.memsw.limit_in_bytes").exists():
            (cg / "memory.memsw.limit_in_bytes").write_text(str(LIMIT_BYTES))
        return cg, "v1"
    if (v2 / "cgroup.controllers").exists() and "memory" in (v2 / "cgroup.controllers").read_text():
        cg = v2 / name
        cg.mkdir()
        (cg / "memory.max").write_text(str(LIMIT_BYTES))
        (cg / "memory.swap.max").write_text("0")
        return cg, "v2"
    raise PermissionError("no memory cgroup controller here")


@pytest.mark.timeout(1200)
def test_notebook_and_world_size_16_within_binder_limits(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a private mount namespace")
    name = f"collnb-binder-{os.getpid()}"
    try:
        cg, version = _memory_cgroup(name)
    except (OSError, PermissionError) as exc:
        pytest.skip(f"cannot create a memory cgroup here: {exc}")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = cg / "cgroup.procs"
    inner = (f"mount -t tmpfs -o size={SHM_BYTES},mode=1777 tmpfs /dev/shm && "
             f"exec {sys.executable} {script} {NOTEBOOK}")
    shell = (f"echo $$ > {procs} && exec unshare --mount --propagation private sh -c '{inner}'")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=1100, env=env,
                              cwd=tmp_path)
        wall = time.perf_counter() - t0
        if version == "v1":
            limit = int((cg / "memory.limit_in_bytes").read_text())
            peak = int((cg / "memory.max_usage_in_bytes").read_text())
            failcnt = int((cg / "memory.failcnt").read_text())
        else:
            limit = int((cg / "memory.max").read_text())
            peak_file = cg / "memory.peak"
            peak = int(peak_file.read_text()) if peak_file.exists() else -1
            events = dict(ln.split() for ln in (cg / "memory.events").read_text().splitlines())
            failcnt = int(events.get("max", 0)) + int(events.get("oom_kill", 0))
    finally:
        for _ in range(50):   # the children are gone once run() returned; the cgroup empties
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.2)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    report = json.loads(lines[-1][len("REPORT "):])
    print(f"\nbinder limits ({version} cgroup, limit {limit >> 20} MiB): peak memory {peak / 2**20:.0f} MiB, "
          f"/dev/shm {report['shm_bytes'] >> 20} MiB, notebook {report['notebook_s']} s, "
          f"world size 16 launch {report['launch16_s']} s, total {wall:.0f} s")
    assert limit == LIMIT_BYTES
    assert report["shm_bytes"] == SHM_BYTES, "the child did not see the 64 MiB /dev/shm"
    assert not report["notebook_errors"], report["notebook_errors"]
    assert report["notebook_unrun"] == 0
    total = float(sum(range(16)))
    assert report["launch16"] == [[total, total]] * 16
    assert failcnt == 0, f"the 2 GiB limit was hit {failcnt} times (peak {peak >> 20} MiB)"
    assert 0 < peak < LIMIT_BYTES or peak == -1, f"memory reached the 2 GiB limit (peak {peak >> 20} MiB)"
