"""The virtual cluster's network: one Linux network namespace per node, a switch namespace with a
bridge, one veth pair per node, and the inter-node rate set by the ``tbf`` qdisc on both ends.

Layout of ``VirtualCluster(nodes=N, ...)`` made by process ``P`` (its ``k``-th cluster)::

    collnb-P-k-n0  [lo, eth0 10.200.0.1/24] --veth-- p0 ┐
    collnb-P-k-n1  [lo, eth0 10.200.0.2/24] --veth-- p1 ├ br0 in collnb-P-k-sw
    ...                                                  ┘

Every link and address is made inside these namespaces (``ip -n NS link add ... peer name eth0
netns NODE``): nothing is added to, changed on or removed from the host's own interfaces. A rank
binds its node's ``eth0`` address (``GLOO_SOCKET_IFNAME=eth0``); two ranks of one node reach each
other's address through that namespace's local route (the ``lo`` device: fast, unshaped), two ranks
of different nodes through the veth pairs and the bridge (shaped).

**Shaping.** ``tbf`` (token bucket filter) on the egress of each node's ``eth0`` (node to switch)
and of the bridge port ``pI`` (switch to node): each node has one link of ``inter_gbps`` Gbit/s in
each direction, like one NIC. tbf counts whole frames (Ethernet, IP and TCP headers included), so a
TCP stream's payload reaches about 1448/1514 = 0.956 of the rate with a 1500-byte MTU (measured
here: 0.384 Gbit/s of payload at ``rate 400mbit``; 1.91 of 2, 3.81 of 4). Bucket: ``burst``
``max(256 KiB, rate/250 Hz)`` (tc-tbf: the burst must be at least rate/HZ), queue ``latency 50ms``.
Source: tc-tbf(8), iproute2 (https://man7.org/linux/man-pages/man8/tc-tbf.8.html).

**The intra-node tier** is the node namespace's own loopback (``lo``): unshaped by default (as
fast as this machine's memory and CPUs move a TCP stream, ~25 Gbit/s for one stream here), or
shaped with a tbf on ``lo`` (``intra_gbps``): then every intra-node byte of the node passes that one
token bucket, so the node's ranks share the rate, like a node's one PCIe switch (not like NVLink,
where each GPU has its own links); the tier model prices it so (``intra_shared``). Measured here:
``rate 4000mbit`` on ``lo`` gives one stream 4.00 Gbit/s (``lo``'s 64 KiB frames make the headers
negligible).

**Latency** is not emulated: the kernel's delay qdisc, ``netem`` (tc-netem(8)), is absent from this
machine's kernel (``tc qdisc add ... netem`` answers "Specified qdisc kind is unknown"). A cluster's
``inter_latency_ms`` goes into the cost model only (:attr:`VirtualCluster.latency` is
``"modelled"``).

**Cleanup.** The namespaces are removed on ``__exit__`` (exception or not), at interpreter exit
(:mod:`atexit`), and, when a process dies without either (SIGKILL, a killed Jupyter kernel), by a
*reaper*: a small process each cluster-making process starts once, in a session of its own, that
waits on the maker's pid (``pidfd_open``) and then deletes every ``collnb-<pid>-*`` namespace and
lock of it. Should the reaper be killed too, the next cluster's start sweeps them
(:func:`sweep_leftovers`: every ``collnb-<pid>-*`` namespace whose process is gone and whose lock,
``/run/collnb/collnb-<pid>-<k>.lock``, held while the cluster lives, nobody holds).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import shutil
import subprocess
import sys
import threading

from ...i18n import _

__all__ = ["ClusterUnavailable", "available", "sweep_leftovers", "Network", "SUBNET", "INTERFACE"]

#: The node interface every rank binds (``GLOO_SOCKET_IFNAME``), in every node namespace.
INTERFACE = "eth0"
#: Node ``i``'s address is ``10.200.0.<i+1>/24``, inside the cluster's own namespaces only.
SUBNET = "10.200.0"
#: Most nodes a /24 holds (addresses .1 to .254).
MAX_NODES = 254
LOCK_DIR = "/run/collnb"
_NAME = re.compile(r"^collnb-(\d+)-(\d+)-(sw|n\d+)$")
_CLONE_NEWNET = 0x40000000
_PROBE = ("import ctypes, os, sys\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          f"if libc.unshare({_CLONE_NEWNET}) != 0:\n"
          "    sys.stdout.write(os.strerror(ctypes.get_errno())); sys.exit(1)\n")
_counter = 0
_counter_lock = threading.Lock()
_live: set[Network] = set()
#: the pids that started their reaper (one per process that makes clusters)
_reapers: set[int] = set()

#: The reaper (``python -c``): argv = the maker's pid, the lock directory. Waits until that pid
#: ends, then deletes its namespaces and locks (module doc).
_REAPER = r"""
import os, select, subprocess, sys, time
owner, lockdir = int(sys.argv[1]), sys.argv[2]
try:
    fd = os.pidfd_open(owner)
    select.select([fd], [], [])
except (AttributeError, OSError):  # no pidfd (old kernel or Python): poll
    while True:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(0.5)
prefix = "collnb-%d-" % owner
listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
for line in listing.splitlines():
    name = line.split()[0] if line.strip() else ""
    if name.startswith(prefix):
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
try:
    for f in os.listdir(lockdir):
        if f.startswith(prefix) and f.endswith(".lock"):
            os.unlink(os.path.join(lockdir, f))
except OSError:
    pass
"""


def _start_reaper() -> None:
    """Start this process's reaper once (module doc). It outlives this process by design, so it is
    not this process's child: a shell starts it in the background and exits at once, and the
    reaper is handed to init (nothing of this process waits for it or counts it as its own)."""
    pid = os.getpid()
    if pid in _reapers:
        return
    subprocess.run(["/bin/sh", "-c", 'exec "$0" -c "$1" "$2" "$3" </dev/null >/dev/null 2>&1 &', sys.executable,
                    _REAPER, str(pid), LOCK_DIR], check=True, timeout=30, start_new_session=True)
    _reapers.add(pid)


class ClusterUnavailable(RuntimeError):
    """This process may not make the virtual cluster's namespaces (not root, no CAP_NET_ADMIN and
    CAP_SYS_ADMIN, no ``ip``/``tc``, or the kernel refused); the message is one line saying why."""


def available() -> tuple[bool, str]:
    """Whether this process may build a :class:`VirtualCluster`: ``(True, "")``, or ``(False, why)``
    with ``why`` one line. Checks that ``ip`` and ``tc`` (iproute2) are installed and, by trying it
    in a child process (so this process's own namespace is untouched), that
    ``unshare(CLONE_NEWNET)`` is permitted (it needs CAP_SYS_ADMIN; the links need CAP_NET_ADMIN)."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, _("the virtual cluster needs iproute2's '{tool}' command, which is not installed "
                            "(apt-get install iproute2)").format(tool=tool)
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, _("the virtual cluster could not test for network namespaces: {error}").format(error=e)
    if probe.returncode != 0:
        return False, _("this process may not create network namespaces (unshare(CLONE_NEWNET) in a child: {error}); "
                        "run as root or with CAP_SYS_ADMIN and CAP_NET_ADMIN").format(
                            error=probe.stdout.strip() or probe.stderr.strip().splitlines()[-1:])
    return True, ""


def _run(*cmd: str) -> None:
    """Run one iproute2 command; a failure raises :class:`ClusterUnavailable` with the command and
    its one-line error."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        error = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ClusterUnavailable(_("'{command}' failed: {error}").format(
            command=" ".join(cmd), error=error[0] if error else done.returncode))


def namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list``), ours and others'."""
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock_path(prefix: str) -> str:
    return os.path.join(LOCK_DIR, prefix + ".lock")


def _lock_held(prefix: str) -> bool:
    """Whether some process holds the lock of cluster ``prefix`` (a cluster in another PID namespace
    sharing these network namespaces holds it too)."""
    try:
        fd = os.open(_lock_path(prefix), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def sweep_leftovers() -> list[str]:
    """Remove the namespaces ``collnb-<pid>-<k>-*`` left by a process that died without cleaning up:
    those whose pid no longer runs and whose cluster lock nobody holds. Returns the names removed.
    A live process's namespaces (this one's included) are never touched."""
    removed = []
    for name in namespaces():
        m = _NAME.match(name)
        if not m:
            continue
        prefix = f"collnb-{m.group(1)}-{m.group(2)}"
        if _pid_runs(int(m.group(1))) or _lock_held(prefix):
            continue
        if subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30).returncode == 0:
            removed.append(name)
        try:
            os.unlink(_lock_path(prefix))
        except OSError:
            pass
    return removed


def _tbf(gbps: float) -> list[str]:
    """``tc`` arguments of a tbf qdisc at ``gbps`` Gbit/s (module doc: burst and queue)."""
    rate = int(round(gbps * 1e9))
    burst = max(256 * 1024, rate // 8 // 250)
    return ["tbf", "rate", f"{rate}bit", "burst", f"{burst}b", "latency", "50ms"]


class Network:
    """The namespaces, bridge and shaped veth pairs of one virtual cluster (module doc).

    Args:
        nodes: number of node namespaces, 1..254.
        inter_gbps: inter-node rate in Gbit/s (1e9 bits/s, frames included), or ``None`` for the
            veth's own unshaped speed.
        intra_gbps: the rate of each node's loopback (shared by the node's intra-node traffic), or
            ``None`` (default): unshaped.

    Attributes: ``prefix`` (``collnb-<pid>-<k>``), ``switch`` (its namespace), ``nodes`` (the node
    namespaces' names), ``addresses`` (node ``i``'s ``10.200.0.<i+1>``).
    """

    def __init__(self, nodes: int, inter_gbps: float | None, intra_gbps: float | None = None):
        global _counter
        with _counter_lock:
            _counter += 1
            k = _counter
        self.prefix = f"collnb-{os.getpid()}-{k}"
        self.switch = self.prefix + "-sw"
        self.nodes = [f"{self.prefix}-n{i}" for i in range(nodes)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(nodes)]
        self.inter_gbps = inter_gbps
        self.intra_gbps = intra_gbps
        self._lock_fd: int | None = None
        self._made: list[str] = []
        self._owner = os.getpid()  # a forked child never removes its parent's namespaces

    def create(self) -> None:
        """Make every namespace, link, address and qdisc; on any failure remove what was made and
        raise :class:`ClusterUnavailable` with one line saying why."""
        _live.add(self)
        try:
            os.makedirs(LOCK_DIR, exist_ok=True)
            _start_reaper()
            self._lock_fd = os.open(_lock_path(self.prefix), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            for ns in [self.switch, *self.nodes]:
                _run("ip", "netns", "add", ns)
                self._made.append(ns)
            sw = self.switch
            _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", sw, "link", "set", "br0", "up")
            for i, (ns, addr) in enumerate(zip(self.nodes, self.addresses)):
                _run("ip", "-n", sw, "link", "add", f"p{i}", "type", "veth", "peer", "name", INTERFACE, "netns", ns)
                _run("ip", "-n", sw, "link", "set", f"p{i}", "master", "br0", "up")
                _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", INTERFACE)
                _run("ip", "-n", ns, "link", "set", INTERFACE, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            self.shape(self.inter_gbps)
            self.shape_intra(self.intra_gbps)
        except BaseException:
            self.remove()
            raise

    def shape(self, gbps: float | None) -> None:
        """Set the inter-node rate to ``gbps`` Gbit/s on every node's link, both directions (``tc
        qdisc replace``: a tbf on the node's ``eth0`` and on its bridge port); ``None`` removes the
        shaping. Raises ValueError for a rate that is not > 0."""
        if gbps is not None and not gbps > 0:
            raise ValueError(_("inter_gbps must be > 0 Gbit/s (or None: unshaped); got {value}").format(value=gbps))
        for i, ns in enumerate(self.nodes):
            for where, dev in ((ns, INTERFACE), (self.switch, f"p{i}")):
                if gbps is None:
                    subprocess.run(["tc", "-n", where, "qdisc", "del", "dev", dev, "root"], capture_output=True,
                                   timeout=30)  # fails harmlessly where there is no qdisc yet
                else:
                    _run("tc", "-n", where, "qdisc", "replace", "dev", dev, "root", *_tbf(gbps))
        self.inter_gbps = gbps

    def shape_intra(self, gbps: float | None) -> None:
        """Set each node's loopback to ``gbps`` Gbit/s (a tbf on ``lo`` in every node namespace,
        shared by the node's intra-node traffic); ``None`` removes it. Raises ValueError for a rate
        that is not > 0."""
        if gbps is not None and not gbps > 0:
            raise ValueError(_("intra_gbps must be > 0 Gbit/s (or None: unshaped); got {value}").format(value=gbps))
        for ns in self.nodes:
            if gbps is None:
                subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", "lo", "root"], capture_output=True, timeout=30)
            else:
                _run("tc", "-n", ns, "qdisc", "replace", "dev", "lo", "root", *_tbf(gbps))
        self.intra_gbps = gbps

    def remove(self) -> None:
        """Delete this cluster's namespaces (their veths and bridge go with them) and its lock.
        Safe to call twice, and after a partial :meth:`create`."""
        if os.getpid() != self._owner:
            return
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._made.clear()
        if self._lock_fd is not None:
            try:
                os.unlink(_lock_path(self.prefix))
            except OSError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None
        _live.discard(self)


@atexit.register
def _remove_all() -> None:
    for network in list(_live):
        network.remove()
