"""NCCL's names and the constants of its tuning model, copied as numbers from NVIDIA/nccl **v2.30.7-1**
(``src/graph/tuning.cc``, ``src/include/plugin/nccl_tuner.h``, ``src/include/nccl_common.h``,
``src/graph/paths.cc``): what :mod:`.nccl` computes with (its module doc says where each is used).
"""

from __future__ import annotations

NCCL_VERSION = "2.30.7-1"
#: NCCL's algorithms and protocols in its own order (``NCCL_ALGO_*``, ``NCCL_PROTO_*`` in
#: src/include/plugin/nccl_tuner.h) and its collectives (``ncclFunc_t``, src/include/nccl_common.h).
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
_TREE, _RING, _CND, _CNC, _NVLS, _NVLST, _PAT = range(7)
_LL, _LL128, _SIMPLE = range(3)
_BCAST, _REDUCE, _AG, _RS, _AR = range(5)
_GPUS = ("volta", "ampere", "hopper", "blackwell")
_COMPCAP = {"volta": 70, "ampere": 80, "hopper": 90, "blackwell": 100}
#: topoPathTypeStr (src/graph/paths.cc): path types in order, as a GRAPH log line spells them.
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")

# -- tuning.cc's constants (v2.30.7-1) ------------------------------------------------------------
_NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)  # per GPU generation
_BASE_LAT = ((6.8, 14.0, 8.4), (6.6, 14.0, 8.4), (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), (8.0, 8.0, 8.0))
_HW_NVLINK, _HW_PCI, _HW_NET = range(3)
_HW_LAT = (
    ((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 25), (0, 0, 25), (0, 0, 4.0)),   # NVLink
    ((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8), (0, 0, 0), (0, 0, 0), (0, 0, 4.0)),     # PCI
    ((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30), (0, 0, 18), (0, 0, 20.9), (0, 0, 14)),    # NET
)
_LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (2 * 141.0, 2 * 45.0, 2 * 35.0))
_RING_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
_TREE_LL128_BW = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
_NVLS_TREE_BW = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
#: "Trees are not perfectly sticking to the model for medium sizes": a factor per protocol and
#: power of two of size/64, 64 B to 256 MB (treeCorrectionFactor).
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)


#: ``table[function][algorithm][protocol]``: a :class:`Tuning`'s latencies (µs) or bandwidths (GB/s).
Table = dict[str, dict[str, dict[str, float]]]
#: ``switches[function][element]``: what ``NCCL_ALGO``/``NCCL_PROTO`` leave on (1), off (0), or to
#: NCCL's default (2: LL128, enabled by default only in certain cases), by :func:`parse_list`.
Switches = dict[str, dict[str, int]]
