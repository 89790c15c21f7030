"""One rank of an emulated cluster (:class:`.virtual.VirtualCluster`), started inside its node's network
namespace as ``ip netns exec NODE python rank_main.py DIR RANK WORLD_SIZE GROUP_TIMEOUT FLIGHT_RECORDER IFNAME
DEBUG``.

It runs a call with the steps every rank of collnb takes (:class:`collnb.ranks.Call`, the same as a
local rank's and an ipyparallel engine's), so what a call records works here as there
(:class:`collnb.ranks.Instruments` (its module's docstring says how a rank set gets every instrument)): calls, its track of the timeline, its Flight Recorder
entries; torch.distributed's wrappers are in place (layouts gloo misreads, the groups' timeouts,
which timeout ended a wait).

1. Before its default group is made: Gloo bound to ``IFNAME`` (the node's ``eth0``), ``TORCH_FR_BUFFER_SIZE`` set
   to ``FLIGHT_RECORDER`` when it is not 0, ``TORCH_DISTRIBUTED_DEBUG`` to ``DETAIL`` where ``DEBUG`` is
   ``1``, else ``OFF`` (:func:`collnb.ranks.restore_environment`; torch reads them when a group is
   made). Started and imported, it writes ``DIR/up-RANK``; the launcher sends the first call when
   every rank has, and the rank then makes ``init_process_group("gloo", FileStore(DIR/store))``, once
   (its ``GROUP_TIMEOUT`` covers joining peers that are already up, not a slow peer's
   ``import torch``): the rank stays warm for the next calls.
2. One call per line of stdin (the call's number ``N``): ``DIR/call-N.pkl`` holds the
   :class:`collnb.ranks.Run` (function, arguments, instruments, language) and the timeout of the
   groups the function makes; the rank runs it, ends the groups the call made together with its
   peers (a call of collnb's own code marked :func:`collnb.ranks.same_on_every_rank` runs, under
   DETAIL, on a group of the same ranks made without its wrapper, made once), puts itself back as a fresh script would be (:class:`collnb.ranks.RankState`), and writes
   its answer, ``(time.monotonic(), Result | Failed)``, to ``DIR/result-N-RANK.pkl`` (written
   whole, then renamed).
3. It stops serving after a failure (idle: peers blocked in a collective get no "Connection closed"
   piled on the root cause; the launcher stops every rank), after a call that changed it for good
   (``Result.retire``) or destroyed its default group, and when stdin closes.

SIGUSR1 writes its Python stack to ``DIR/stack-RANK.txt`` (:mod:`faulthandler`): where a rank still
running after a peer's failure or a timeout was. It exits within 0.2 s of its launcher's death,
removing ``DIR``.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from typing import NoReturn

__all__ = ["main"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def _watch_parent(parent: int, d: str) -> None:
    """Once the launcher is gone (killed), remove the ranks' folder ``d`` (nobody else uses it) and
    exit (status 70): leave no orphan rank and no file behind."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        shutil.rmtree(d, ignore_errors=True)
        os._exit(70)
    threading.Thread(target=watch, daemon=True, name="collnb-cluster-watch").start()


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _idle() -> NoReturn:
    while True:  # the launcher stops every rank (or the watch thread ends this one)
        time.sleep(3600)


def main(argv: list[str]) -> NoReturn:
    """Serve calls as rank ``argv[1]`` of ``argv[2]`` (module docstring); never returns."""
    d, rank, world_size = argv[0], int(argv[1]), int(argv[2])
    _watch_parent(os.getppid(), d)
    group_timeout, flight_recorder, ifname, debug = float(argv[3]), int(argv[4]), argv[5], argv[6] == "1"
    stack_file = open(os.path.join(d, f"stack-{rank}.txt"), "w")

    def arm_faulthandler() -> None:
        faulthandler.unregister(signal.SIGUSR1)
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)

    arm_faulthandler()
    import torch.distributed as dist

    from collnb.ranks import (Call, Failed, RankState, Result, failure, mark_up, resolve_rank_names,
                              restore_environment, unwrapped_group)
    restore_environment(ifname, debug, flight_recorder)
    store = dist.FileStore(os.path.join(d, "store"), world_size)
    # started and imported: the launcher sends the first call once every rank has said so, and the
    # default group is made then, so its timeout (seconds) never has to cover a slower peer's start
    mark_up(d, rank)
    joined: Failed | None = None
    state: RankState | None = None
    base: dist.ProcessGroup | None = None
    # the default group's ranks without DETAIL's wrapper, once made (as new_group gives it: collnb.ranks' Group)
    unwrapped: list[dist.ProcessGroup | int] = []
    for line in sys.stdin:
        seq = int(line)
        if state is None:  # the first call: make the default group (its failure is every call's answer)
            try:
                dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                        timeout=datetime.timedelta(seconds=group_timeout))
            except BaseException as exc:  # noqa: BLE001 - the first call's answer says it
                joined = failure(exc, rank)
            resolve_rank_names()
            state = RankState(own_process=True, rearm=arm_faulthandler)
            # the default group as made (a call runs as the default group the group it is given: the
            # unwrapped one is the default only during a call that runs in it)
            base = dist.group.WORLD if joined is None else None
        answer: Result | Failed
        if joined is not None:
            answer = joined
        else:
            try:
                with open(os.path.join(d, f"call-{seq}.pkl"), "rb") as f:
                    run, collective_timeout = pickle.load(f)
                if run.unwrapped and not unwrapped:  # every rank gets the same call: new_group together
                    unwrapped.append(unwrapped_group(world_size, datetime.timedelta(seconds=group_timeout)))
                call = Call(rank, run, unwrapped[0] if run.unwrapped else base, "gloo", collective_timeout)
            except BaseException as exc:  # noqa: BLE001 - a step before the function is the rank's answer too
                answer = failure(exc, rank)
            else:
                try:
                    result = call.run([base, *unwrapped], before=state.begin_call, after=state.restore)
                    if result.intact:  # the groups the function made end with the call, on every rank
                        call.end_groups(store, call.own())
                    answer = dataclasses.replace(result, retire=state.retire_reason())
                except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are rank failures too
                    answer = call.failed(exc)
        # written whole before anything else happens: a peer's "Connection closed by peer" must not
        # be on disk before the error that caused it
        _write(os.path.join(d, f"result-{seq}-{rank}.pkl"),
               pickle.dumps((time.monotonic(), answer), protocol=pickle.HIGHEST_PROTOCOL))
        sys.stdout.flush()
        sys.stderr.flush()
        if isinstance(answer, Failed):
            _idle()
        if answer.retire or not answer.intact:
            break
    if joined is None and dist.is_initialized():
        dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0] or ".") == _HERE:  # run as a file: not this folder's
        sys.path.pop(0)                                               # modules before the standard library
    main(sys.argv[1:])
