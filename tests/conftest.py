import glob
import os
import tempfile

import psutil
import pytest


def live_children():
    """Child processes of this test process that are still running (zombies count: not reaped)."""
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


def pool_dirs():
    return glob.glob(os.path.join(tempfile.gettempdir(), f"collnb-{os.getpid()}-*"))


@pytest.fixture(scope="session", autouse=True)
def _no_leftovers_at_end():
    yield
    import collnb
    collnb.shutdown()
    left = live_children()
    assert not left, f"processes left behind: {[(p.pid, p.name(), p.status()) for p in left]}"
    assert not pool_dirs(), f"pool directories left behind: {pool_dirs()}"
    # the virtual clusters (collnb.labs.cluster): collnb.shutdown() removed every network namespace this
    # process made, whatever its tests did (a test that failed inside a `with cluster(...)` included)
    import shutil
    import subprocess
    if shutil.which("ip"):
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        ours = [line.split()[0] for line in listing.splitlines() if line.startswith(f"collnb-{os.getpid()}-")]
        assert not ours, f"network namespaces left behind: {ours}"
