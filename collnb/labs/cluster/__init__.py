"""A virtual cluster on one machine: nodes as Linux network namespaces joined by a bridge, the
inter-node link shaped by ``tbf``, real gloo ranks on every node; hierarchical algorithms measured
against the flat ring and a two-tier α-β model; NCCL's own tuning model; nccl-tests output explained.

==================  =================================================================================
``cluster``         :func:`cluster` (``collnb.cluster``): a :class:`Cluster`, emulated, modelled or real
``network``         the namespaces, bridge, veth pairs and tbf shaping; :func:`available`, the sweep
``virtual``         :class:`VirtualCluster` (a context manager) and its :meth:`~VirtualCluster.launch`
``rank_main``       what each rank runs in its node's namespace: collnb's steps of a call, every instrument
``hierarchical``    :func:`measure_link`, :func:`hierarchical_all_reduce`, :class:`TierModel`,
                    :func:`compare_all_reduce`
``compare``         :func:`compare_algorithms` (measured beside predicted, crossovers), :func:`run_algorithm`
``pictures``        the cluster, each round with its transfers coloured by tier, the comparison
``nccl``            NCCL's own tuning model (v2.30.7-1): its choice of algorithm and protocol, explained
``explain``         :func:`explain_nccl_tests`: nccl-tests output read, explained and flagged
``traffic``         :func:`node_traffic`: the bytes that left each node (counted, or estimated)
``rankset``         an emulated cluster's ranks as collnb's active rank set (``collnb.launch`` runs there,
                    recording calls, timelines and Flight Recorder entries as on local ranks)
``explorer``        :func:`explore_cluster`: nodes, ranks, rate, algorithm, size -> the rounds by tier
``exercise``        notebook 19's check: an all_reduce that sends only shards across nodes
==================  =================================================================================

Needs root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2 to emulate; elsewhere
:func:`cluster` is ``mode == "modelled"`` and says why in one line, and :class:`VirtualCluster`
raises :class:`ClusterUnavailable`. Latency is always modelled: the kernel's netem qdisc is not in
this machine's kernel.
"""

from .clusters import MODES as CLUSTER_MODES
from .clusters import Cluster, Link, close_all, cluster, parse_link
from .hierarchical import (Comparison, LinkMeasurement, TierModel, compare_all_reduce, format_comparison,
                           hierarchical_all_reduce, measure_link, node_groups)
from . import nccl
from .compare import PRIMITIVES as TIERED_PRIMITIVES
from .compare import AlgorithmTiming, compare_algorithms, run_algorithm
from .exercise import check_tier_aware_all_reduce
from .explain import Explanation, NcclTestsFormatError, explain_nccl_tests, parse_nccl_tests
from .network import ClusterUnavailable, available, sweep_leftovers
from .explorer import explore_cluster
from .traffic import Traffic, node_traffic
from .pictures import TierReplay, as_image, cluster_figure, comparison_figure, replay_tiers, round_figure, tier_filmstrip
from .virtual import MODES, ClusterRankError, ClusterTimeout, VirtualCluster

__all__ = ["cluster", "Cluster", "Link", "parse_link", "close_all", "CLUSTER_MODES", "VirtualCluster", "MODES",
           "ClusterUnavailable", "ClusterRankError", "ClusterTimeout", "available", "sweep_leftovers", "measure_link",
           "LinkMeasurement", "hierarchical_all_reduce", "node_groups", "TierModel", "Comparison", "compare_all_reduce",
           "format_comparison", "compare_algorithms", "AlgorithmTiming", "run_algorithm", "explain_nccl_tests",
           "parse_nccl_tests", "Explanation", "NcclTestsFormatError", "cluster_figure", "round_figure", "tier_filmstrip",
           "replay_tiers", "TierReplay", "comparison_figure", "nccl", "TIERED_PRIMITIVES", "explore_cluster",
           "node_traffic", "Traffic", "check_tier_aware_all_reduce", "sample_nccl_tests", "as_image"]


def sample_nccl_tests() -> str:
    """A sample of nccl-tests output shipped with collnb (an all_reduce on 2 nodes x 8 GPUs, in the
    layout nccl-tests prints; its first lines say where the layout comes from)."""
    from importlib.resources import files
    return (files("collnb") / "data" / "nccl_tests_all_reduce.txt").read_text(encoding="utf-8")
