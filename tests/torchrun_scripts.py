"""Run several torchrun scripts in the ranks of one torchrun start, one after another, each as
``__main__`` exactly as written (its own ``init_process_group``, prints and ``destroy_process_group``).

    torchrun --nproc-per-node 2 tests/torchrun_scripts.py OUT_DIR a.py b.py ...

Starting torchrun (its agent, the rendezvous, python and ``import torch`` in every rank) costs seconds;
running one more script in ranks already started costs a few milliseconds. Each rank writes, for
each script ``NAME.py``, ``OUT_DIR/NAME/rank{RANK}.stdout``, ``.stderr`` (file descriptors 1 and 2
while the script ran: Python's prints and the C++ libraries' alike) and ``.json`` (its exit status as
``python NAME.py`` would have it; whether it left the default process group initialised).

What differs from one torchrun per script: every script's ``init_process_group`` meets the others
through a TCPStore of its own (``MASTER_PORT``), hosted by rank 0 of this driver as torchrun's agent
hosts its store (``TORCHELASTIC_USE_AGENT_STORE=True``): the agent's store keeps the keys of the
group before (``destroy_process_group`` numbers groups from 0 again), and a second group on it reads
the first one's addresses. A script that fails does not stop the others; the ranks meet on torchrun's
store between scripts, so one script starts on all ranks only once every rank ended the one before.
"""

import datetime
import json
import os
import runpy
import sys
import traceback

import torch.distributed as dist

WAIT = datetime.timedelta(seconds=300)


def _run(path, out_dir, rank):
    """Run ``path`` as ``__main__`` with fds 1 and 2 into files; its exit status as Python gives it."""
    name = os.path.splitext(os.path.basename(path))[0]
    base = os.path.join(out_dir, name, f"rank{rank}")
    os.makedirs(os.path.dirname(base), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    argv = sys.argv
    with open(base + ".stdout", "wb") as out, open(base + ".stderr", "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            sys.argv = [path]
            try:
                runpy.run_path(path, run_name="__main__")
                code = 0
            except SystemExit as exc:  # as the interpreter reports it: None 0, an int itself, text 1
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would, then the next script
                tb = exc.__traceback__  # from the script's own frames on, as `python NAME.py` prints it
                while tb is not None and tb.tb_frame.f_code.co_filename != path:
                    tb = tb.tb_next
                traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
                code = 1
            left = dist.is_initialized()
            if left:  # the next script's init_process_group would fail for this one's fault
                dist.destroy_process_group()
        finally:
            sys.argv = argv
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    with open(base + ".json", "w") as fh:
        json.dump({"exit": code, "left_process_group_initialised": left}, fh)


def main(out_dir, scripts):
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=False, timeout=WAIT)
    for i, path in enumerate(scripts):
        store = None
        if rank == 0:  # a store for this script alone; port 0: the kernel picks a free one
            store = dist.TCPStore(os.environ["MASTER_ADDR"], 0, world_size, is_master=True, timeout=WAIT, wait_for_workers=False)
            agent.set(f"collnb-scripts/{i}/port", str(store.port))
        os.environ["MASTER_PORT"] = agent.get(f"collnb-scripts/{i}/port").decode()
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        _run(path, out_dir, rank)
        agent.set(f"collnb-scripts/{i}/done/{rank}", "1")
        agent.wait([f"collnb-scripts/{i}/done/{r}" for r in range(world_size)], WAIT)
        del store


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
