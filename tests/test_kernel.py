"""The launcher inside a real Jupyter kernel: cell-defined functions, output in the launching
cell, tracebacks that show the cell's code, Kernel -> Interrupt, restart and shutdown."""
import glob
import os
import tempfile
import textwrap
import time

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.slow


class Cell:
    def __init__(self, kc, code, timeout=60):
        self.streams, self.errors, self.results = [], [], []
        reply = kc.execute_interactive(textwrap.dedent(code), output_hook=self._hook, timeout=timeout)
        self.status = reply["content"]["status"]
        self.reply = reply["content"]

    def _hook(self, msg):
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            self.streams.append((content["name"], content["text"]))
        elif kind == "error":
            self.errors.append(content)
        elif kind == "execute_result":
            self.results.append(content["data"].get("text/plain", ""))

    def text(self, name="stdout"):
        return "".join(t for n, t in self.streams if n == name)


@pytest.fixture()
def kernel():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)


def _iopub(kc):
    msgs = []
    while True:
        try:
            m = kc.get_iopub_msg(timeout=0.5)
        except Exception:
            return msgs
        msgs.append((m["msg_type"], m["content"]))


def _wait_idle(kc, msg_id, timeout=30):
    """Read iopub until the kernel says it is idle after the request ``msg_id`` (as
    ``execute_interactive`` does before it returns); ``timeout`` (s) is an upper bound."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if (m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                and m["parent_header"].get("msg_id") == msg_id):
            return
    raise AssertionError(f"the kernel did not go idle after {msg_id} within {timeout} s")


def _ranks_of(pid):
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.is_running()]
    except psutil.NoSuchProcess:
        return []


def test_cell_defined_function_output_and_traceback(kernel):
    km, kc = kernel
    cell = Cell(kc, """
        import torch, torch.distributed as dist, collnb
        def shout(rank, world_size):
            t = torch.tensor([float(rank)])
            dist.all_reduce(t)
            print(f"hello from {rank}, sum {t.item():.0f}")
            return rank * 10
        collnb.launch(shout, 3)
    """)
    assert cell.status == "ok", cell.errors
    assert cell.results == ["[0, 10, 20]"]
    lines = cell.text().splitlines()
    assert sorted(lines) == [f"[rank {r}] hello from {r}, sum 3" for r in range(3)]

    # the next cell sees none of the ranks' output
    quiet = Cell(kc, "print('only me')")
    assert quiet.text() == "only me\n"

    failing = Cell(kc, """
        def broken(rank, world_size):
            if rank == 1:
                values = [1, 2]
                return values[5]
            dist.barrier()
        collnb.launch(broken, 2)
    """)
    assert failing.status == "error"
    err = failing.errors[0]
    assert err["ename"] == "RankError"
    tb = "\n".join(err["traceback"])
    assert tb.startswith("rank 1: IndexError: list index out of range")
    assert "return values[5]" in tb          # the cell's own source line
    assert "Cell In[" in tb                  # named the way IPython names cells
    assert "in broken" in tb
    assert "collnb/ranks/" not in tb         # not the launcher's frames (collnb/ranks/rank.py & co.)

    again = Cell(kc, "collnb.launch(shout, 2)")
    assert again.status == "ok" and again.results == ["[0, 10]"]

    # ranks hold none of the kernel's sockets (forked ranks would inherit them)
    ports = Cell(kc, """
        import os
        def listening_ports(rank, world_size):
            mine = set()
            for fd in os.listdir("/proc/self/fd"):
                try:
                    link = os.readlink(f"/proc/self/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    mine.add(link[8:-1])
            ports = []
            for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                for line in open(table).readlines()[1:]:
                    f = line.split()
                    if f[3] == "0A" and f[9] in mine:
                        ports.append(int(f[1].split(":")[1], 16))
            return sorted(ports)
        print(collnb.launch(listening_ports, 2))
    """)
    rank_ports = eval(ports.text().strip().splitlines()[-1])
    kernel_ports = {km.shell_port, km.iopub_port, km.stdin_port, km.control_port, km.hb_port}
    assert all(rank_ports), "each rank should listen for its gloo peers"
    assert not kernel_ports & {p for ps in rank_ports for p in ps}


def test_interrupt_then_restart_leave_nothing(kernel):
    km, kc = kernel
    kpid = km.provisioner.process.pid
    msg_id = kc.execute(textwrap.dedent("""
        import time, collnb
        def slow(rank, world_size):
            time.sleep(120)
        collnb.launch(slow, 4)
    """))
    deadline = time.monotonic() + 30
    while len(_ranks_of(kpid)) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    ranks = _ranks_of(kpid)
    assert len(ranks) == 4
    time.sleep(0.5)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:  # skip start-up kernel_info replies
        reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error", (reply, _iopub(kc))
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # ipykernel sends the error reply first and only then stops aborting what was queued behind the
    # cell ("stop aborting" reaches its shell queue after the reply): a cell sent the moment the reply
    # arrives can be answered "aborted" (seen once in CI). A frontend waits for the kernel's idle.
    _wait_idle(kc, msg_id)
    gone, alive = psutil.wait_procs(ranks, timeout=5)
    assert alive == [] and _ranks_of(kpid) == []
    assert glob.glob(os.path.join(tempfile.gettempdir(), f"collnb-{kpid}-*")) == []

    after = Cell(kc, "collnb.launch(lambda r, w: r, 4)", timeout=120)  # the timeout is a hang guard only
    assert after.status == "ok" and after.results == ["[0, 1, 2, 3]"]
    ranks = _ranks_of(kpid)
    assert len(ranks) == 4

    km.restart_kernel(now=False)
    gone, alive = psutil.wait_procs(ranks, timeout=10)
    assert alive == []
    assert glob.glob(os.path.join(tempfile.gettempdir(), f"collnb-{kpid}-*")) == []

    kc.wait_for_ready(timeout=60)
    kpid2 = km.provisioner.process.pid
    fresh = Cell(kc, "import collnb; collnb.launch(lambda r, w: r * r, 3)")
    assert fresh.status == "ok" and fresh.results == ["[0, 1, 4]"]
    ranks2 = _ranks_of(kpid2)
    km.shutdown_kernel(now=False)
    gone, alive = psutil.wait_procs(ranks2, timeout=10)
    assert alive == []
    assert glob.glob(os.path.join(tempfile.gettempdir(), f"collnb-{kpid2}-*")) == []
