"""A throw-away SLURM cluster on this machine for tests: munged, slurmctld and one slurmd
(Debian's munge and slurm-wlm), each on its own socket/ports under a temporary directory, so
nothing of the machine's own configuration is used or changed.

    with LocalSlurm(tmp_path) as slurm:      # raises SlurmUnavailable with the reason
        env = slurm.env                      # SLURM_CONF for sbatch/squeue/scancel
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

from ports import free_port


class SlurmUnavailable(RuntimeError):
    """SLURM cannot start here; the message says why."""



def _tail(path, n=15):
    try:
        with open(path) as fh:
            return "".join(fh.readlines()[-n:])
    except OSError:
        return "(no log)"


class LocalSlurm:
    def __init__(self, root, cpus=None):
        self.root = os.fspath(root)
        self.cpus = cpus or os.cpu_count() or 2
        self.procs = []
        self.env = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "squeue") if not shutil.which(b)
                   and not os.path.exists(f"/usr/sbin/{b}")]
        if missing:
            raise SlurmUnavailable(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)")
        if os.geteuid() != 0:
            raise SlurmUnavailable("slurmd must run as root to start jobs")
        r = self.root
        for d in ("state", "spool", "munge", "log"):
            os.makedirs(os.path.join(r, d), exist_ok=True)
        os.chmod(os.path.join(r, "munge"), 0o700)
        key = os.path.join(r, "munge", "munge.key")
        with open(key, "wb") as fh:
            fh.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(r, "munge", "munge.socket")
        self._run_daemon(["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                          f"--pid-file={r}/munge/munged.pid", f"--log-file={r}/log/munged.log",
                          f"--seed-file={r}/munge/munged.seed"], wait_for=sock, log=f"{r}/log/munged.log")
        host = socket.gethostname()
        conf = os.path.join(r, "slurm.conf")
        ctld_port, d_port = free_port(), free_port()
        with open(conf, "w") as fh:
            fh.write(f"""ClusterName=collnbtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName={host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
""")
        with open(os.path.join(r, "cgroup.conf"), "w") as fh:
            fh.write("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
        self.env = dict(os.environ, SLURM_CONF=conf)
        self._run_daemon(["slurmctld", "-D", "-i", "-f", conf], log=f"{r}/log/slurmctld.log")
        self._run_daemon(["slurmd", "-D", "-f", conf], log=f"{r}/log/slurmd.log")
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise SlurmUnavailable(f"{p.args[0]} exited with {p.returncode}:\n{_tail(p.log)}")
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            state = (out.stdout or out.stderr).strip()
            if out.returncode == 0 and state.startswith(("idle", "mix", "alloc")):
                return
            time.sleep(0.5)
        raise SlurmUnavailable(f"the SLURM node did not become idle within 60 s (sinfo: {state!r}); "
                               f"slurmd log:\n{_tail(f'{r}/log/slurmd.log')}\nslurmctld log:\n"
                               f"{_tail(f'{r}/log/slurmctld.log')}")

    def _run_daemon(self, cmd, log, wait_for=None):
        out = open(os.path.join(self.root, "log", os.path.basename(cmd[0]) + ".out"), "w")
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        p.log = log
        p.out = out
        self.procs.append(p)
        if wait_for:
            deadline = time.monotonic() + 20
            while not os.path.exists(wait_for):
                if p.poll() is not None and not os.path.exists(wait_for):
                    # munged forks into the background: its parent exits 0 once the socket is up
                    if p.returncode != 0:
                        raise SlurmUnavailable(f"{cmd[0]} exited with {p.returncode}: {_tail(out.name)} {_tail(log)}")
                if time.monotonic() > deadline:
                    raise SlurmUnavailable(f"{cmd[0]} did not create {wait_for}: {_tail(log)}")
                time.sleep(0.1)

    def jobs(self):
        out = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], env=self.env, capture_output=True, text=True)
        return out.stdout.strip().splitlines()

    def stop(self):
        if self.env is not None:
            subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            p.out.close()
        pidfile = os.path.join(self.root, "munge", "munged.pid")
        try:  # munged daemonised itself: end it by its pid file
            with open(pidfile) as fh:
                os.kill(int(fh.read().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        self.procs = []
