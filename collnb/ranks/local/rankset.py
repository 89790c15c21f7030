"""The local rank set: rank processes forked (or spawned) here, kept warm in one :class:`.pool.RankPool`
between calls (:func:`warm_pool`), made again when a call asks for ranks made another way (another
:class:`..rankset.RankSetup`), when the last call retired them, or when one died while idle.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from typing import Any

import torch

from ...i18n import N_, _
from ...vocabulary import Backend
from ..rankset import BackendFacts, LaunchPlan, LaunchRequest, RankSetup, StartMethod, Where
from .backends import local_backend_info
from .pool import RankPool

__all__ = ["LocalRanks", "LOCAL", "warm_pool", "shutdown_pool", "default_start_method"]

_pool: RankPool | None = None
_pool_guard = threading.Lock()


def _forget_pool() -> None:
    """In a forked child (a rank, or a process the kernel's code forks): the parent's warm pool
    is not the child's to use or to shut down."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def default_start_method() -> StartMethod:
    """``"fork"`` on Linux (fast, and a cell's function needs no import), else ``"spawn"``."""
    return "fork" if sys.platform.startswith("linux") else "spawn"


class LocalRanks:
    """The local rank set: :func:`collnb.launch` on rank processes forked (or spawned) here, kept warm
    in one module-level :class:`.pool.RankPool` between calls (:func:`warm_pool`); a call made while
    another thread uses the warm pool runs on a private pool of its own."""

    where: Where = N_("here")

    def backend_info(self, backend: Backend) -> BackendFacts:
        """:func:`.backends.local_backend_info`: this machine's answer."""
        return local_backend_info(backend)

    def accept(self, plan: LaunchPlan) -> LaunchPlan:
        """``plan`` with the start method filled in (:func:`default_start_method` when it has none).

        Raises:
            RuntimeError: forked NCCL ranks asked for after CUDA was initialised in this process."""
        setup = plan.setup
        if setup.start_method is None:
            setup = dataclasses.replace(setup, start_method=default_start_method())
        if setup.start_method == "fork" and setup.backend == "nccl" \
                and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch's is_initialized has no annotations
            raise RuntimeError(_("CUDA is already initialised in this process, and forked ranks cannot use it. "
                                 "Restart the kernel and launch before touching CUDA, or pass start_method='spawn'"))
        return dataclasses.replace(plan, setup=setup)

    def launch(self, request: LaunchRequest) -> list[Any]:
        """Run ``request`` on the warm pool (see :func:`collnb.launch`)."""
        setup = request.plan.setup
        pool, private = _warm_pool_for(setup, request.plan.facts)
        try:
            results: list[Any] = pool.run(request)
            return results
        finally:
            if private:
                pool.close()
            else:
                pool.lock.release()


def _warm_pool_for(setup: RankSetup, facts: BackendFacts) -> tuple[RankPool, bool]:
    """The pool a call of ``setup`` runs on, its lock held, and whether it is a private one (another
    thread uses the warm pool: the caller closes a private pool after its call)."""
    global _pool
    with _pool_guard:
        pool = _pool
        if pool is not None and not pool.broken and pool.lock.acquire(blocking=False):
            try:
                retired = pool.settle()  # each rank's word on the last call: back as it started?
                dead = pool.dead_ranks()
            finally:
                pool.lock.release()
            if retired:
                # The last call changed these ranks for good (a replaced torch function): never reuse them.
                sys.stderr.write("[collnb] " + _("{why}; starting fresh ranks").format(why=retired) + "\n")
                pool.close()
            elif dead and pool.setup == setup:
                # A warm rank that died while the pool was idle (OOM killer, a stray kill) is replaced:
                # the pool starts over instead of failing the next call with a BrokenPipeError.
                sys.stderr.write("[collnb] " + _("warm rank(s) had died while idle ({ranks}); starting fresh "
                                                 "ranks").format(ranks="; ".join(
                                                     f"rank {k}: {why}" for k, why in sorted(dead.items())))
                                 + "\n")
                pool.close()
        if pool is None or pool.broken or pool.setup != setup:
            if pool is not None and not pool.broken:
                if not pool.lock.acquire(blocking=False):
                    # Another thread's call runs on the warm pool, made for another setup: that call keeps
                    # its ranks (closing the pool killed them mid-call), and this one runs on a private pool.
                    return RankPool(setup, facts.get("max_world_size")), True
                try:
                    pool.close()
                finally:
                    pool.lock.release()
            elif pool is not None:
                pool.close()
            pool = _pool = RankPool(setup, facts.get("max_world_size"))
        if pool.lock.acquire(blocking=False):
            return pool, False
    # Another thread is using the warm pool: run on a private pool of our own.
    return RankPool(setup, facts.get("max_world_size")), True


#: The local rank set (one per process).
LOCAL = LocalRanks()


def shutdown_pool() -> None:
    """Stop the warm ranks and remove their files (:func:`collnb.shutdown`)."""
    global _pool
    with _pool_guard:
        if _pool is not None:
            _pool.close()
            _pool = None


def warm_pool() -> RankPool | None:
    """The current warm :class:`.pool.RankPool`, or ``None`` (for inspection and tests)."""
    return _pool
