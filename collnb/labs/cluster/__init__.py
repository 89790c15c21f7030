"""A virtual cluster on one machine: nodes as Linux network namespaces joined by a bridge, the
inter-node link shaped by ``tbf``, real gloo ranks on every node, and hierarchical all_reduce
measured against the flat ring and a two-tier α-β model.

==================  =================================================================================
``network``         the namespaces, bridge, veth pairs and tbf shaping; :func:`available`, the sweep
``virtual``         :class:`VirtualCluster` (a context manager) and its :meth:`~VirtualCluster.launch`
``hierarchical``    :func:`measure_link`, :func:`hierarchical_all_reduce`, :class:`TierModel`,
                    :func:`compare_all_reduce`
==================  =================================================================================

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2; elsewhere :class:`VirtualCluster`
raises :class:`ClusterUnavailable` with one line saying why (or, with ``require=False``, is
``mode == "modelled"``: only :class:`TierModel` answers). Latency is always modelled: the kernel's
netem qdisc is not in this machine's kernel.
"""

from .hierarchical import (Comparison, LinkMeasurement, TierModel, compare_all_reduce, format_comparison,
                           hierarchical_all_reduce, measure_link, node_groups)
from .network import ClusterUnavailable, available, sweep_leftovers
from .virtual import MODES, ClusterRankError, ClusterTimeout, VirtualCluster

__all__ = ["VirtualCluster", "MODES", "ClusterUnavailable", "ClusterRankError", "ClusterTimeout", "available",
           "sweep_leftovers", "measure_link", "LinkMeasurement", "hierarchical_all_reduce", "node_groups",
           "TierModel", "Comparison", "compare_all_reduce", "format_comparison"]
