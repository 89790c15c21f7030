"""A virtual cluster on one machine: nodes as Linux network namespaces joined by a bridge, the
inter-node link shaped by ``tbf``, real gloo ranks on every node; hierarchical algorithms measured
against the flat ring and a two-tier α-β model; NCCL's own tuning model; nccl-tests output explained.

==================  =================================================================================
``cluster``         :func:`cluster` (``collnb.cluster``): a :class:`Cluster`, emulated, modelled or real
``network``         the namespaces, bridge, veth pairs and tbf shaping; :func:`available`, the sweep
``virtual``         :class:`VirtualCluster` (a context manager) and its :meth:`~VirtualCluster.launch`
``hierarchical``    :func:`measure_link`, :func:`hierarchical_all_reduce`, :class:`TierModel`,
                    :func:`compare_all_reduce`
==================  =================================================================================

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2 to emulate; elsewhere
:func:`cluster` is ``mode == "modelled"`` and says why in one line, and :class:`VirtualCluster`
raises :class:`ClusterUnavailable`. Latency is always modelled: the kernel's netem qdisc is not in
this machine's kernel.
"""

from .cluster import MODES as CLUSTER_MODES
from .cluster import Cluster, Link, close_all, cluster, parse_link
from .hierarchical import (Comparison, LinkMeasurement, TierModel, compare_all_reduce, format_comparison,
                           hierarchical_all_reduce, measure_link, node_groups)
from .network import ClusterUnavailable, available, sweep_leftovers
from .virtual import MODES, ClusterRankError, ClusterTimeout, VirtualCluster

__all__ = ["cluster", "Cluster", "Link", "parse_link", "close_all", "CLUSTER_MODES", "VirtualCluster", "MODES",
           "ClusterUnavailable", "ClusterRankError", "ClusterTimeout", "available", "sweep_leftovers", "measure_link",
           "LinkMeasurement", "hierarchical_all_reduce", "node_groups", "TierModel", "Comparison", "compare_all_reduce",
           "format_comparison"]
