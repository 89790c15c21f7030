"""The warm rank pool: rank processes kept between calls, and one call run on them.

A :class:`RankPool` forks its ranks (or spawns them) once, lets them rendezvous through a
:class:`torch.distributed.FileStore` in a private temporary directory (no port, no server thread
in the parent while it forks), and then runs call after call on them: a call at a world size the
pool has costs a pipe round trip plus the function. It collects each rank's answer, its output
lines, its death, and turns a failure into one :class:`.RankError` or :class:`.LaunchTimeout`
(:mod:`..explain.failures`) after stopping every rank.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from multiprocessing.context import ForkContext, SpawnContext
from typing import Any, Literal, cast, overload

import psutil
import torch.multiprocessing as tmp

from ...i18n import _, get_language, ngettext
from ...vocabulary import MAX_WORLD_SIZE
from ..call.groups import runs_unwrapped
from ..errors import LaunchError, LaunchTimeout, RankError
from ..explain.failures import Stacks, conclude, death_text
from ..explain.tracebacks import named_cells, parse_stack, wait_for_stacks
from ..fresh.rank_state import Watch
from ..instrument.backend_log import attach
from ..instrument.interface import launch_results
from ..protocol import InitGroup, Message, NewGroup, Run, Settled, encode, receive, send
from ..rankset import LaunchRequest, RankResult, RankSetup
from ..serialization import Unsendable, code_files, dumps
from .answers import RankProcess, gather
from .backends import local_backend_info
from .output import OutputRelay
from . import processes
from .processes import descendants, kill_all, make_pool_dir, remove_pool_dir, sigint_deferred, sweep_stale_dirs
from ..call.steps import resolve_rank_names
from .rank import RankConfig, rank_main

__all__ = ["RankPool"]


#: One rank process of the pool (kept under its old name for the pool's own code).
_Rank = RankProcess
#: Seconds a rank may take, after answering a call, to put itself back (:class:`.Settled`).
_SETTLE_S = 30.0


class RankPool:
    """A set of warm rank processes sharing one private FileStore.

    Args:
        setup: how the ranks' groups are made (:class:`..rankset.RankSetup`; ``None``: its defaults): the backend,
            ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` or not (``debug``: checks that every rank calls the
            same collective with the same shapes/dtypes; turn off for benchmarks), the groups'
            timeout (``collective_timeout``, s), the start method (``"fork"``, fast: ~0.1 s per rank,
            ~5 MB each; or ``"spawn"``, each rank imports torch: ~1.5 CPU-s and ~150 MB per rank;
            ``None``: fork) and ``TORCH_FR_BUFFER_SIZE`` (``flight_recorder`` entries; 0 leaves it unset).
        max_world_size: the most ranks the backend can run here (``None``: asked of
            :func:`.backends.local_backend_info`).

    The pool's ranks form one default process group of ``base_size`` ranks, grown in steps of
    4, 8, 16 to the largest world size asked of it (fork + rendezvous). A call at a smaller world
    size ``k`` runs on ranks ``0..k-1`` inside a cached ``new_group`` of those ranks, which they
    see as their default group: ``dist.get_world_size() == k``, and collectives without
    ``group=`` use it. Creating a cached group costs a few ms once; re-initialising the default
    group instead costs 35–110 ms per change at world size <= 8 (measured on 2 cores).
    """

    def __init__(self, setup: RankSetup | None = None, max_world_size: int | None = None) -> None:
        setup = setup or RankSetup()
        self.setup = setup if setup.start_method is not None else dataclasses.replace(setup, start_method="fork")
        self.backend = setup.backend
        self.start_method = self.setup.start_method or "fork"
        self.ranks: list[_Rank] = []
        self.base_size = 0   # size of the pool's default process group
        self.groups: set[int] = set()  # world sizes with a cached group of ranks 0..k-1
        self.unwrapped: set[int] = set()  # and with one for collnb's own primitive runs (call.groups.same_on_every_rank)
        self._group_count = 0
        if max_world_size is None:
            max_world_size = local_backend_info(setup.backend)["max_world_size"]
        self.max_size = max_world_size or MAX_WORLD_SIZE
        self.generation = 0
        self.broken = False
        self.retired = ""  # what the last call changed in the ranks that cannot be put back (see run)
        self.output = OutputRelay()  # the ranks' output lines, and the C++ log lines held back
        self.lock = threading.Lock()
        # typeshed types get_context of a str as BaseContext, which names no Process
        self._ctx = cast("ForkContext | SpawnContext", tmp.get_context(self.start_method))
        sweep_stale_dirs()
        self.dir = make_pool_dir()  # held (flock) by this process while the pool lives

    # -- life cycle --------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """PIDs (list of int) of the live rank processes, in rank order."""
        return [cast(int, r.proc.pid) for r in self.ranks if r.proc.is_alive()]  # a live process has one

    def dead_ranks(self) -> dict[int, str]:
        """``{rank: what happened}`` for rank processes that are no longer alive (e.g. killed by
        the OOM killer while the pool was idle); empty when every rank is alive."""
        return {r.rank: death_text(r.proc.exitcode) for r in self.ranks if not r.proc.is_alive()}

    def _grow(self, n: int) -> None:
        with sigint_deferred():
            try:
                self._fork_ranks(n)
            except OSError as exc:  # no process, memory or descriptor left for one more rank
                rank = len(self.ranks)
                raise RankError(f"rank {rank}: {type(exc).__name__}: the rank's process could not be started "
                                f"({exc})", rank, type(exc).__name__, "", {rank: f"could not be started: {exc}"}) from exc

    def _fork_ranks(self, n: int) -> None:
        resolve_rank_names()  # before Watch(): collnb.region resolved inside a call is no change of it
        cfg = RankConfig(dir=self.dir, setup=self.setup, ifname="lo", parent_pid=os.getpid(),
                   # what each rank watches between calls, made here: forked ranks take it over
                   # untouched (made in each rank, it would copy ~14 MiB of this process's pages)
                   watch=Watch() if self.start_method == "fork" else None)
        for rank in range(len(self.ranks), n):
            cmd_r, cmd_w = self._ctx.Pipe(duplex=False)
            res_r, res_w = self._ctx.Pipe(duplex=False)
            out_r, out_w = self._ctx.Pipe(duplex=False)
            err_r, err_w = self._ctx.Pipe(duplex=False)
            close_fds = [c.fileno() for r in self.ranks for c in (r.cmd_w, r.res_r, r.out_r, r.err_r)]
            close_fds += [cmd_w.fileno(), res_r.fileno(), out_r.fileno(), err_r.fileno()]
            if self.start_method != "fork":
                close_fds = []
            proc = self._ctx.Process(target=rank_main, name=f"collnb-rank{rank}",
                                     args=(rank, cfg, cmd_r, res_w, out_w, err_w, close_fds),
                                     # not daemonic, so a rank may start processes of its own
                                     # (DataLoader workers); shutdown() stops ranks at exit
                                     daemon=False)
            # Objects the rank inherits are never garbage-collected there: a cycle that was
            # garbage here (a socket, a pipe's Connection, a zmq context of the kernel) would
            # otherwise close its fd *number* at a random time in the rank, by then gloo's epoll
            # or socket fd (seen: gloo abort "loop.cc:212 nfds != -1"). gc.freeze() is O(1).
            thaw = gc.get_freeze_count() == 0  # leave objects the kernel's own code froze frozen
            gc.freeze()
            try:
                proc.start()
            finally:
                if thaw:
                    gc.unfreeze()
            for c in (cmd_r, res_w, out_w, err_w):
                c.close()
            for c in (out_r, err_r):
                os.set_blocking(c.fileno(), False)
            self.ranks.append(_Rank(rank, proc, cmd_w, res_r, out_r, err_r))

    def close(self) -> None:
        """Stop every rank and every process it started (SIGKILL), reap them, and remove the
        pool's files."""
        pids = [r.proc.pid for r in self.ranks if r.proc.pid is not None and r.proc.exitcode is None]
        strays = descendants(pids) if pids else []  # found before the ranks die and they re-parent
        for r in self.ranks:
            pid = r.proc.pid
            if pid is None:
                continue
            try:  # the rank's own process group: it and whatever it started
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass
        kill_all(strays)
        deadline = time.monotonic() + 5
        for r in self.ranks:
            # Reap through waitpid (exitcode), not join(): a process the rank forked may hold a
            # copy of the rank's sentinel pipe, and join() would wait for that process too.
            while r.proc.pid is not None and r.proc.exitcode is None and time.monotonic() < deadline:
                time.sleep(0.005)
            for c in (r.cmd_w, r.res_r, r.out_r, r.err_r):
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - closing a pipe of a rank that is gone: nothing to do
                    pass
        self.ranks = []
        self.base_size, self.groups, self.unwrapped = 0, set(), set()
        self.broken = True
        remove_pool_dir(self.dir)


    # -- running -----------------------------------------------------------------------------
    def run(self, request: LaunchRequest) -> list[Any]:
        """Run ``request`` (its function on ranks ``0..world_size-1``; its plan's setup is this pool's).

        Returns the per-rank results (list, rank order; a :class:`..instrument.interface.LaunchResults`
        with ``.calls`` and ``.timeline`` when the request's instruments recorded them). C++ log lines
        of the backend are printed as they come with ``show_backend_log``, else attached to the error
        (or printed at the end when there is none). Raises :class:`RankError`,
        :class:`LaunchTimeout` or re-raises ``KeyboardInterrupt`` after stopping every rank; in
        each case the pool is closed and must not be reused.

        After a call that changed its ranks in a way that cannot be put back (a replaced torch
        function; see :mod:`..fresh.rank_state`), :meth:`settle` (called first by the next call) sets
        :attr:`retired` to what and where (``"the last call replaced torch.distributed.all_reduce on
        rank 2"``), and the pool runs no more calls (:class:`LaunchError`): :func:`collnb.launch`
        starts fresh ranks.
        """
        if self.broken:
            raise LaunchError("this pool was closed after a failure; start a new one")
        self.settle()
        if self.retired:
            raise LaunchError(f"this pool's ranks were retired ({self.retired}); start a new one")
        plan, fn = request.plan, request.fn
        self.output.start_call(plan.instruments.show_backend_log)
        for r in self.ranks:
            r.last.clear()
            r.report.clear()
        deadline = time.monotonic() + plan.timeout
        try:
            task = dumps((fn, request.args, request.kwargs, code_files(fn)))
        except Unsendable as exc:
            raise TypeError(f"cannot send {exc.args[0].replace('; send', ' to the ranks; pass', 1)}") from None
        except Exception as exc:
            raise TypeError(f"cannot send {fn!r} and its arguments to the ranks: {exc}") from exc
        try:
            unwrapped = self.setup.debug and runs_unwrapped(fn, request.args, request.kwargs)
            deadline += self._prepare(plan.world_size, deadline, unwrapped)  # a rank's start is not the call's
            self.output.drain(self.ranks, final=False)
            message = encode(Run(plan.world_size, self._next_count(), task, plan.instruments, get_language(),
                                 unwrapped))  # once for all
            self._send_all(self.ranks[:plan.world_size], message)
            results = self._collect(self.ranks[:plan.world_size], deadline, phase="run")
            self.output.release()
            return results
        except (RankError, LaunchTimeout) as exc:
            self.close()
            attach(exc, self.output.backend_log.take(), self.backend)
            raise
        except BaseException:
            self.close()
            self.output.release()
            raise

    def settle(self) -> str:
        """Read each rank's :class:`.Settled` after its last :class:`.Result` (a rank puts itself back
        as it started after it answers, while the launcher shows the results). Returns
        :attr:`retired`: ``""``, or what the last call changed for good and on which ranks. A rank
        that died meanwhile is left to :meth:`dead_ranks`."""
        end = time.monotonic() + _SETTLE_S
        changed: dict[str, list[int]] = {}
        for r in self.ranks:
            if not r.unsettled:
                continue
            r.unsettled = False
            try:
                msg = receive(r.res_r) if r.res_r.poll(max(0.0, end - time.monotonic())) else None
            except (EOFError, OSError):
                continue  # it died: dead_ranks() says how
            if isinstance(msg, Settled):
                if msg.retire:
                    changed.setdefault(msg.retire, []).append(r.rank)
            elif msg is None:
                changed.setdefault(_("left it unable to put itself back within {seconds:g} s").format(seconds=_SETTLE_S),
                                   []).append(r.rank)
            else:
                changed.setdefault(_("left it answering out of turn ({what})").format(what=type(msg).__name__),
                                   []).append(r.rank)
        if changed and not self.retired:
            self.retired = _("the last call {changes}").format(changes="; ".join(
                _("{change} on {ranks}").format(change=why, ranks=_ranks_text(rs)) for why, rs in changed.items()))
        return self.retired

    def _retire_group(self, world_size: int) -> None:
        """Stop using the group of ranks 0..world_size-1: its ranks issued different numbers of
        operations (uneven send/recv), so its next collective would fail the DETAIL check.
        The next call at this world size makes a fresh group (or re-initialises the pool)."""
        self.groups.discard(world_size)
        self.unwrapped.discard(world_size)
        if world_size == self.base_size:
            self.base_size = 0

    def _next_count(self) -> int:
        """A fresh value for torch's group counter, the same on every rank of one call: group
        names stay unique and agree even after calls that created groups on some ranks only."""
        self._group_count += 1000
        return self._group_count

    def _prepare(self, world_size: int, deadline: float, unwrapped: bool = False) -> float:
        """Make ranks 0..world_size-1 a process group: reuse a cached one, create one with
        ``new_group`` over the pool (a few ms), or grow the pool and initialise a new default
        group (fork + rendezvous) when it has fewer ranks than asked for. Returns the seconds
        spent waiting for spawned ranks to start (0.0 when none were started or they were forked),
        which the caller adds to the call's deadline. Raises :class:`LaunchTimeout` when ranks
        just spawned were not up after :data:`.processes.START_TIMEOUT_S`."""
        waited = 0.0
        if world_size > self.base_size:
            # grow in steps (4, 8, 16) so that a slider sweep re-initialises rarely
            size = min(max(world_size, 4, 1 << (world_size - 1).bit_length(), len(self.ranks)), self.max_size)
            if size > len(self.ranks):
                first = len(self.ranks)
                self._grow(size)
                if self.start_method != "fork":  # forked ranks run at once: torch is imported already
                    t0 = time.monotonic()
                    self._wait_started(range(first, size))
                    waited = time.monotonic() - t0
            self.generation += 1
            self._send_all(self.ranks, InitGroup(self.generation, size))
            self._collect(self.ranks, deadline + waited, phase="init")
            self.base_size, self.groups, self.unwrapped = size, {size}, set()
        made = self.unwrapped if unwrapped else self.groups
        if world_size not in made:
            self._send_all(self.ranks[:self.base_size], NewGroup(world_size, self._next_count(), unwrapped))
            self._collect(self.ranks[:self.base_size], deadline + waited, phase="init")
            made.add(world_size)
        return waited

    def _wait_started(self, ranks: range) -> None:
        """Wait until every rank of ``ranks`` just spawned has imported torch and collnb and said so
        (:func:`.processes.mark_up`), or one of them has died (:meth:`_collect` then says how).
        Spawned ranks each import torch, 3-5 s on an idle machine and several times that on a loaded
        one; sent ``InitGroup`` at once, the first rank up would wait for the slowest one's import
        inside ``init_process_group``, under the group's ``collective_timeout``.

        Raises:
            LaunchTimeout: not every rank was up after :data:`.processes.START_TIMEOUT_S` seconds.
        """
        down = processes.wait_until_up(self.dir, ranks, lambda: any(not self.ranks[r].proc.is_alive() for r in ranks),
                                       processes.START_TIMEOUT_S)
        up = {r.rank: os.path.exists(os.path.join(self.dir, f"up-{r.rank}")) for r in self.ranks}
        outcomes = {r.rank: _("started") if up[r.rank] else _("not started") for r in self.ranks}
        if down:
            raise LaunchTimeout(
                ngettext("rank {ranks} had not started (imported torch) after {seconds:g} s; every rank was stopped. "
                         "Is the machine overloaded? Run the call again when it is quieter.",
                         "ranks {ranks} had not started (imported torch) after {seconds:g} s; every rank was stopped. "
                         "Is the machine overloaded? Run the call again when it is quieter.", len(down)).format(
                             ranks=", ".join(map(str, down)), seconds=processes.START_TIMEOUT_S),
                down, outcomes)
        dead = [r for r in ranks if not up[r] and not self.ranks[r].proc.is_alive()]
        if dead:
            code = self.ranks[dead[0]].proc.exitcode
            for r in dead:
                outcomes[r] = _("{how} while starting").format(how=death_text(self.ranks[r].proc.exitcode))
            raise RankError(
                _("rank {rank}: {how} while starting, before it had imported torch and collnb. With "
                  "start_method='spawn' every rank first imports the main module of the script that launched it: "
                  "code there that is not under if __name__ == '__main__': runs in every rank too. The rank's "
                  "traceback, if it printed one, went to the terminal that started Python (a Jupyter server's "
                  "log).").format(rank=dead[0], how=death_text(code)),
                dead[0], "Killed" if code is not None and code < 0 else "Exited", "", outcomes)

    @staticmethod
    def _send_all(ranks: Iterable[_Rank], message: Message | bytes) -> None:
        """Send one command to every rank of ``ranks``. A rank that cannot be reached (it died, e.g.
        at its start: a broken pipe) is left to :meth:`_collect`, which reports how it ended."""
        for r in ranks:
            try:
                send(r.cmd_w, message)
            except OSError:
                pass

    @overload
    def _collect(self, ranks: Sequence[_Rank], deadline: float, phase: Literal["init"]) -> None: ...
    @overload
    def _collect(self, ranks: Sequence[_Rank], deadline: float, phase: Literal["run"]) -> list[Any]: ...

    def _collect(self, ranks: Sequence[_Rank], deadline: float, phase: Literal["init", "run"]) -> list[Any] | None:
        """One command's end, in three steps: wait for every rank of ``ranks`` to answer, copying
        their output (:func:`.answers.gather`); read what the answers come to (:func:`..explain.failures.conclude`:
        the results, or the error it raises, with where unanswered ranks were and a dead rank's last
        words); keep the cached groups the answers allow. Returns the results (run: a list, or
        :class:`..instrument.interface.LaunchResults` with what was recorded) or ``None`` (init)."""
        got = gather(ranks, deadline, self.output)
        stacks = self._stacks([r for r in ranks if r.rank not in got.events])
        results = conclude([r.rank for r in ranks], got.events, self.setup.collective_timeout, phase, stacks,
                           {r.rank: r for r in self.ranks})
        if phase == "init":
            return None
        if got.verdict == "reinit":
            # the function destroyed process groups (dist.destroy_process_group()):
            # the next call re-initialises the pool's groups
            self.base_size, self.groups, self.unwrapped = 0, set(), set()
        elif got.verdict == "retire":
            self._retire_group(len(ranks))
        answers = cast(list[RankResult], [got.events[r.rank] for r in ranks])  # every rank answered ok
        return launch_results(results, [a.recorded for a in answers])

    def _stacks(self, ranks: Sequence[_Rank]) -> Stacks:
        """Ask still-running ranks where they are (:mod:`faulthandler` on SIGUSR1).

        Returns ``{rank: [(filename, lineno, name, None), ...]}``, outermost call first, without
        the launcher's own frames, a kernel cell's file named as the cell (:func:`..explain.tracebacks.named_cells`),
        and ``{("state", rank): words}`` for a rank whose process could not say.
        """
        stacks: Stacks = {}
        if not ranks:
            return stacks
        for r in ranks:
            try:
                os.truncate(os.path.join(self.dir, f"stack-{r.rank}.txt"), 0)
                os.kill(cast(int, r.proc.pid), signal.SIGUSR1)  # a started process has a pid
            except OSError:
                pass
        wait_for_stacks([os.path.join(self.dir, f"stack-{r.rank}.txt") for r in ranks])
        for r in ranks:
            status: str
            try:
                status = psutil.Process(r.proc.pid).status()
            except psutil.Error:
                status = ""
            if status == psutil.STATUS_STOPPED:
                stacks[("state", r.rank)] = "was stopped (SIGSTOP), so it could not say where it was"
            elif status:
                stacks[("state", r.rank)] = (f"did not say where it was (process state: {status}; "
                                             "stuck outside Python?)")
            try:
                with open(os.path.join(self.dir, f"stack-{r.rank}.txt")) as fh:
                    text = fh.read()
            except OSError:
                text = ""
            stacks[r.rank] = named_cells(parse_stack(text))
        return stacks


def _ranks_text(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return _("rank {rank}").format(rank=ranks[0])
    return _("ranks {ranks} and {last}").format(ranks=", ".join(map(str, ranks[:-1])), last=ranks[-1])
