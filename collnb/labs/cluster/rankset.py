"""A virtual cluster's ranks as collnb's active rank set: while a :func:`collnb.cluster` is active,
:func:`collnb.launch` and everything built on it (:func:`collnb.run`, the explorer, the bandwidth
lab, :func:`collnb.run_algorithm`, a function that makes a ``DeviceMesh``, the exercise checks) run on
the cluster's ranks, in its network namespaces, as :func:`collnb.connect` makes them run on
ipyparallel engines.

:class:`ClusterRanks` is a :class:`collnb.ranks.RankSet` (``where``, ``backend_info``, ``accept``,
``launch``). Its ranks run each call with the steps every collnb rank takes
(:class:`collnb.ranks.Call`, :mod:`.rank_main`), so every instrument works as on local ranks and
engines (:class:`collnb.ranks.Instruments`, whose module's docstring says how a rank set gets them): ``record_calls=True`` (each rank's
:class:`collnb.CallRecord` list), ``timeline=True`` (one clock: the ranks share this machine's
monotonic clock, no alignment needed), ``flight_recorder=N`` (warm ranks with another buffer restart
with ``TORCH_FR_BUFFER_SIZE=N``) and ``show_backend_log=True`` (the ranks' stderr is read here, so no
relay is needed); failures are blamed as on every rank set (:func:`collnb.ranks.conclude`), as a
:class:`collnb.RankError` whose first line names the node.

What differs: NCCL is refused (no GPU in a namespace), and so is ``start_method=`` (the ranks are
started by ``ip netns exec``). ``debug=True`` (``TORCH_DISTRIBUTED_DEBUG=DETAIL``, the default) is
applied as on local ranks, collnb's own same-on-every-rank functions running without its wrapper.
Warm ranks serve calls of one world size, one ``collective_timeout``, one ``debug`` and one
``flight_recorder`` size (a call that asks for another restarts them, as the local pool does); a world
size below the cluster's runs on its first ranks (rank ``r`` on node ``r // ranks_per_node``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ...i18n import N_, _
from ...ranks import BackendFacts, LaunchPlan, LaunchRequest, RankSet, active_rank_set, use_rank_set

if TYPE_CHECKING:
    from .virtual import VirtualCluster

__all__ = ["ClusterRanks", "activate", "deactivate", "active"]


class ClusterOfRanks(Protocol):
    """What this module needs of a cluster, a :class:`~.clusters.Cluster` or a :class:`~.virtual.VirtualCluster`
    (a protocol: :mod:`.clusters` imports this module, so this one does not import it)."""

    @property
    def world_size(self) -> int: ...
    @property
    def mode(self) -> str: ...


class ClusterRanks:
    """:class:`collnb.ranks.RankSet` of an emulated :class:`.clusters.Cluster` or
    :class:`.virtual.VirtualCluster` (module doc)."""

    where = N_("on the virtual cluster's ranks")

    def __init__(self, cluster: ClusterOfRanks):
        self.cluster = cluster

    def backend_info(self, backend: str) -> BackendFacts:
        """gloo on every rank of the cluster (at most its world size); NCCL unavailable (no GPU in a
        namespace)."""
        n = self.cluster.world_size
        if backend != "gloo":
            return dict(backend=backend, available=False, max_world_size=0, limit="",
                        reason=_("a virtual cluster's ranks run gloo only (a network namespace has no GPU); "
                                 "collnb.cluster(...).close() returns to this machine's ranks"))
        return dict(backend="gloo", available=True, max_world_size=n, reason="",
                    limit=_("the virtual cluster has {n} ranks").format(n=n))

    def accept(self, plan: LaunchPlan) -> LaunchPlan:
        """``plan`` as it is: the ranks' fds are files this process reads (no relay), and they share
        one host's monotonic clock (no alignment).

        Raises:
            NotImplementedError: ``start_method`` (``ip netns exec`` starts the ranks)."""
        if plan.setup.start_method is not None:
            raise NotImplementedError(_("start_method= is not supported on a virtual cluster's ranks (ip netns exec "
                                        "starts them); collnb.cluster(...).close() returns to this machine's "
                                        "ranks"))
        return plan

    def launch(self, request: LaunchRequest) -> list[Any]:
        """Run ``request`` on the cluster's ranks (:meth:`.virtual.VirtualCluster.run`)."""
        vc = _virtual(self.cluster)
        if vc is None:
            from .network import ClusterUnavailable
            raise ClusterUnavailable(_("this cluster was closed: make a new one with collnb.cluster(...)"))
        results: list[Any] = vc.run(request)
        return results


def activate(cluster: ClusterOfRanks) -> None:
    """Make ``cluster``'s ranks collnb's active rank set (an emulated cluster only)."""
    use_rank_set(ClusterRanks(cluster))


def deactivate(cluster: ClusterOfRanks) -> None:
    """Return to this machine's ranks if ``cluster``'s are the active ones."""
    current = active_rank_set()
    if isinstance(current, ClusterRanks) and current.cluster is cluster:
        use_rank_set(None)


def _virtual(cluster: ClusterOfRanks | None) -> VirtualCluster | None:
    """The :class:`.virtual.VirtualCluster` that runs ``cluster``'s ranks (a :class:`.clusters.Cluster`'s,
    or ``cluster`` itself), ``None`` when it has none (closed, modelled)."""
    from .virtual import VirtualCluster
    if isinstance(cluster, VirtualCluster):
        return cluster
    vc: VirtualCluster | None = getattr(cluster, "_vc", None)
    return vc


@contextlib.contextmanager
def active(cluster: ClusterOfRanks | None) -> Iterator[None]:
    """Within the block, :func:`collnb.launch` runs on the ranks of ``cluster`` (a
    :func:`collnb.cluster` or a :class:`.virtual.VirtualCluster`; ``None``: none) when it is emulated: a check's
    launch, a recorded run; the rank set active before is active again after it."""
    if cluster is None or cluster.mode != "emulated" or _virtual(cluster) is None:
        yield
        return
    before: RankSet = active_rank_set()
    use_rank_set(ClusterRanks(cluster))
    try:
        yield
    finally:
        use_rank_set(before)
