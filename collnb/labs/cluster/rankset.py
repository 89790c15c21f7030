"""A virtual cluster's ranks as collnb's active rank set: while a :func:`collnb.cluster` is active,
:func:`collnb.launch` and everything built on it (:func:`collnb.run`, the explorer, the bandwidth
lab, :func:`collnb.run_algorithm`, a function that makes a ``DeviceMesh``) run on the cluster's
ranks, in its network namespaces, as :func:`collnb.connect` makes them run on ipyparallel engines.

This is written against :class:`collnb.ranks.RankSet` (``where``, ``backend_info``, ``accept``,
``launch``), in the smallest way: the launch is
:meth:`collnb.labs.cluster.VirtualCluster.launch` (fresh processes inside the namespaces, kept warm
between calls), its errors become :class:`collnb.RankError` / :class:`collnb.LaunchTimeout`. What
the local pool adds inside its ranks and these ranks do not have yet is refused by name before
anything runs: ``record_calls``, ``timeline``, ``flight_recorder``, ``show_backend_log``,
``start_method`` (the instruments interface collnb's ranks are getting will let this rank set
implement them) and NCCL (no GPU in a namespace). A world size below the cluster's runs on its first
ranks (rank ``r`` on node ``r // ranks_per_node``): the warm ranks restart at that size.
``debug=True`` (``TORCH_DISTRIBUTED_DEBUG=DETAIL``) is not applied in these ranks.
"""

from __future__ import annotations

from typing import Any, Callable

from ...i18n import _
from ...ranks import LaunchTimeout, RankError, active_rank_set, use_rank_set
from .virtual import ClusterRankError, ClusterTimeout

__all__ = ["ClusterRanks", "activate", "deactivate"]


def _call(rank: int, world_size: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    return fn(rank, world_size, *args, **kwargs)


class ClusterRanks:
    """:class:`collnb.ranks.rankset.RankSet` of an emulated :class:`Cluster` (module doc)."""

    where = "here"

    def __init__(self, cluster: Any):
        self.cluster = cluster

    def backend_info(self, backend: str) -> dict[str, Any]:
        n = self.cluster.world_size
        if backend != "gloo":
            return dict(backend=backend, available=False, max_world_size=0, limit="",
                        reason=_("a virtual cluster's ranks run gloo only (a network namespace has no GPU); "
                                 "collnb.cluster(...).close() returns to this machine's ranks"))
        return dict(backend="gloo", available=True, max_world_size=n, reason="",
                    limit=_("the virtual cluster has {n} ranks").format(n=n))

    def accept(self, plan: Any) -> Any:
        i, setup = plan.instruments, plan.setup
        for name, on in (("record_calls", i.record_calls), ("timeline", i.timeline),
                         ("flight_recorder", setup.flight_recorder), ("show_backend_log", i.show_backend_log),
                         ("start_method", setup.start_method is not None)):
            if on:
                raise NotImplementedError(_("{option}= is not supported on a virtual cluster's ranks yet; "
                                            "collnb.cluster(...).close() returns to this machine's ranks").format(
                                                option=name))
        return plan

    def launch(self, request: Any) -> list[Any]:
        plan = request.plan
        vc = self.cluster._vc
        try:
            return vc.launch(_call, (request.fn, tuple(request.args), dict(request.kwargs or {})),
                             timeout=plan.timeout, world_size=int(plan.world_size))
        except ClusterRankError as exc:
            first = exc.traceback.strip().splitlines()[-1] if exc.traceback.strip() else _("failed")
            exc_type = first.split(":", 1)[0] if ":" in first else "Exited"
            err = RankError(f"rank {exc.rank}: {first}\n\n{exc}", exc.rank, exc_type, exc.traceback,
                            {exc.rank: first})
            raise err from None
        except ClusterTimeout as exc:
            raise LaunchTimeout(str(exc), [], {}) from None


def activate(cluster: Any) -> None:
    """Make ``cluster``'s ranks collnb's active rank set (an emulated cluster only)."""
    use_rank_set(ClusterRanks(cluster))


def deactivate(cluster: Any) -> None:
    """Return to this machine's ranks if ``cluster``'s are the active ones."""
    current = active_rank_set()
    if isinstance(current, ClusterRanks) and current.cluster is cluster:
        use_rank_set(None)
