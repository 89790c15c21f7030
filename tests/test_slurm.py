"""SLURM for real: munged + slurmctld + slurmd started by the test (tests/slurm_local.py),
ipyparallel engines submitted with its SLURM launcher (sbatch + srun), an all_reduce through
collnb.connect, and the example sbatch script of examples/slurm submitted as a learner would.
Skipped, with the reason, where SLURM cannot start here."""

import os
import subprocess
import sys
import time

import pytest
import torch

import collnb

ipp = pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (pip install 'collnb[cluster]')")
sys.path.insert(0, os.path.dirname(__file__))
from slurm_local import LocalSlurm, SlurmUnavailable  # noqa: E402
from test_script import assert_torchrun_kept_to  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "slurm")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    s = LocalSlurm(root)
    try:
        s.start()
    except SlurmUnavailable as exc:
        s.stop()
        print(f"SLURM cannot start here: {exc}")
        pytest.skip(f"SLURM cannot start here: {exc}")
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = s.env["SLURM_CONF"]  # ipyparallel's launcher calls sbatch with our env
    try:
        yield s
    finally:
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
        s.stop()


def _rank_and_job(rank, world_size):
    t = torch.tensor([10.0 * rank + 1])
    torch.distributed.all_reduce(t)
    return float(t), os.environ.get("SLURM_JOB_ID"), int(os.environ.get("SLURM_PROCID", -1))


def test_all_reduce_on_engines_started_by_ipyparallels_slurm_launcher(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ipyparallel writes its slurm_engine.sbatch into the working directory
    cluster = ipp.Cluster(n=2, engine_launcher_class="slurm", profile_dir=str(tmp_path / "profile"),
                          cluster_id="collnbtest", log_level=40)
    cluster.start_controller_sync()
    cluster.start_engines_sync()
    client = cluster.connect_client_sync()
    try:
        client.wait_for_engines(2, timeout=180)
        jobs = slurm.jobs()
        assert any("RUNNING ipengine-collnbtest" in j for j in jobs), jobs
        collnb.connect(client)
        out = collnb.launch(_rank_and_job, 2)
        assert [o[0] for o in out] == [12.0, 12.0]  # (0+1) + (10+1)
        job = out[0][1]
        assert job and all(o[1] == job for o in out)  # both ranks are tasks of one SLURM job
        assert sorted(o[2] for o in out) == [0, 1]     # one rank per srun task (engine ids follow registration)
        result = collnb.run("all_reduce", world_size=2)
        assert result.ok
        assert [a.tolist() for a in result.after] == [[10.0, 12.0], [10.0, 12.0]]
    finally:
        collnb.disconnect()
        client.close()
        cluster.stop_cluster_sync()
    deadline = time.monotonic() + 60
    while any("RUNNING" in j for j in slurm.jobs()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any("RUNNING" in j for j in slurm.jobs()), slurm.jobs()


def _wait_for_job(slurm, job, timeout=300):
    """JOB's state and exit code ('COMPLETED', '0:0') once it ended. Polled with scontrol four times a
    second: ``sbatch --wait`` sleeps 2 s, then 8, then 32 between its looks (slurm's sbatch.c), so a job
    of 11 s was seen ended at 42 s."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], env=slurm.env, capture_output=True, text=True)
        fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
        if fields.get("JobState") not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return fields["JobState"], fields.get("ExitCode")
        assert time.monotonic() < deadline, f"job {job} still {fields.get('JobState')} after {timeout} s: {out}"
        time.sleep(0.25)


def test_example_sbatch_runs_a_torchrun_script(slurm, tmp_path):
    """examples/slurm/torchrun.sbatch as a learner submits it (one node here: --nnodes 1). torchrun's
    temporary files (its agent's torchelastic_* log directory) go to the job's TMPDIR under tmp_path."""
    script = tmp_path / "all_reduce.py"
    from collnb.__main__ import main
    assert main(["script", "all_reduce", "-o", str(script)]) == 0
    out = tmp_path / "job.out"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(slurm.env, SCRIPT=str(script), PYTHON=sys.executable, OMP_NUM_THREADS="1", TMPDIR=str(tmpdir))
    sub = subprocess.run(["sbatch", "--parsable", "--nodes=1", f"--output={out}", "--chdir", str(tmp_path),
                          os.path.join(EXAMPLES, "torchrun.sbatch")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    state = _wait_for_job(slurm, sub.stdout.strip().split(";")[0])
    text = out.read_text() if out.exists() else ""
    assert state == ("COMPLETED", "0:0"), (state, text)
    assert "rank 0 after: [10.0, 12.0]" in text and "rank 1 after: [10.0, 12.0]" in text, text
    assert_torchrun_kept_to(str(tmpdir), unique_run_ids=False)  # its run id: the job id
