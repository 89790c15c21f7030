"""NCCL's choice of algorithm and protocol, explained with NCCL's own tuning model.

NCCL picks, for every collective call, the algorithm (Ring, Tree, CollNetDirect, CollNetChain,
NVLS, NVLSTree, PAT) and the protocol (LL, LL128, Simple) its model says is fastest:
``time = latency + bytes / bandwidth`` with a latency and a bandwidth per (collective, algorithm,
protocol) computed once per communicator from the topology it found. This module re-implements that
model in Python so that a learner can ask it questions on a machine without GPUs, and reads the
tables NCCL prints (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``) on one with GPUs.

**Source** (cite this, and re-check it when NCCL changes): NVIDIA/nccl **v2.30.7-1**,
``src/graph/tuning.cc``: ``ncclTopoTuneModel`` (the latency and bandwidth tables: base and hardware
latencies per algorithm and protocol, the per-channel bandwidth caps per GPU generation, the
refinements of each algorithm, the bus-to-algorithm bandwidth ratio, which protocols and
algorithms are enabled and what ``NCCL_ALGO``/``NCCL_PROTO`` change, parsed by ``parseList``) and
``ncclTopoGetAlgoTime`` (the time of one call, with the tree correction factors and the ring's
plateau factor); ``src/enqueue.cc`` (``topoGetAlgoInfo``: the smallest time wins; the size priced
is ``count * element size``, times the number of ranks for all_gather and reduce_scatter:
``ncclFuncMaxSendRecvCount`` in ``src/include/enqueue.h``; ``updateCollCostTable``: which
algorithms are candidates at all). Constants are copied as numbers (:mod:`._nccl_tables`); the code is
collnb's own.

**What NCCL measures and collnb cannot.** The model's inputs per algorithm are the *graph* NCCL's
topology search (``src/graph/search.cc``) found: channels, bandwidth per channel inside a node
(``bwIntra``) and between nodes (``bwInter``), the link types. NCCL prints them
(``NCCL_DEBUG_SUBSYS=GRAPH``: ``Pattern 4, crossNic 0, nChannels 16, bw 24.000000/24.000000, type
NVL/PIX, sameChannels 1``): :func:`system_from_log` reads them from such a log. The
:data:`PRESETS` are illustrative graphs of common machines, labelled so, not measurements.

Units: latencies in µs, bandwidths in GB/s (1e9 bytes/s), sizes in bytes, as NCCL's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import SupportsInt, TypedDict, Unpack

from ...i18n import _
from ...units import format_bytes
from ...vocabulary import check_choice, check_int
from ._nccl_tables import (ALGORITHMS, FUNCTIONS, NCCL_VERSION, PATH_TYPES, PROTOCOLS, Switches, Table, _BASE_LAT,
                           _BCAST, _REDUCE, _AG, _RS, _AR, _COMPCAP, _GPUS, _HW_LAT, _HW_NVLINK, _HW_PCI, _HW_NET,
                           _LL, _LL128, _SIMPLE, _LL_MAX_BW, _NVLS_EFFICIENCY, _NVLS_TREE_BW, _RING_LL128_BW, _TREE,
                           _RING, _CND, _CNC, _NVLS, _NVLST, _PAT, _TREE_BW, _TREE_CORRECTION, _TREE_LL128_BW)

__all__ = ["NCCL_VERSION", "ALGORITHMS", "PROTOCOLS", "FUNCTIONS", "Graph", "System", "PRESETS", "preset",
           "tune", "Tuning", "algo_time", "choose", "Choice", "choices", "crossovers", "parse_list",
           "explain_busbw_over_nic", "parse_tuning_table", "parse_graph_lines", "system_from_log",
           "parse_chosen", "table_text"]


def _log2i(n: int) -> int:
    return int(n).bit_length() - 1 if n > 0 else -1


@dataclass(frozen=True)
class Graph:
    """What NCCL's topology search found for one algorithm (its GRAPH log line): ``n_channels``,
    ``bw_intra`` and ``bw_inter`` (GB/s per channel), ``type_intra``/``type_inter`` (path types of
    :data:`PATH_TYPES`: ``"NVL"`` NVLink, ``"PIX"`` one PCIe switch ...), ``pattern`` (4 ring, 1
    balanced tree, 3 tree ...), ``latency_inter`` (µs; 0 unless a network plugin reports one),
    ``same_channels``."""

    n_channels: int
    bw_intra: float
    bw_inter: float
    type_intra: str = "NVL"
    type_inter: str = "PIX"
    pattern: int = 4
    latency_inter: float = 0.0
    same_channels: bool = True


@dataclass(frozen=True)
class System:
    """The inputs of NCCL's tuning model: the shape, the GPU generation (``"volta"``, ``"ampere"``,
    ``"hopper"``, ``"blackwell"``), the CPU (``cpu_vendor`` ``"intel"``/``"amd"``, ``cpu_arch``
    ``"x86"``/``"arm"``/``"power"``), a :class:`Graph` per algorithm name (missing: the algorithm has
    no graph, NCCL leaves it out), whether CollNet (SHARP in-network reduction) is enabled and whether
    the GPUs share an NVSwitch (NVLS needs one, Hopper or later). ``nic_gbps``: one NIC's rate in
    Gbit/s and ``nics_per_node`` (for :func:`explain_busbw_over_nic`); ``description`` says where
    the graphs come from."""

    nodes: int
    ranks_per_node: int
    gpu: str = "hopper"
    cpu_vendor: str = "intel"
    cpu_arch: str = "x86"
    graphs: dict[str, Graph] = field(default_factory=dict)
    collnet: bool = False
    nvswitch: bool = True
    nic_gbps: float = 400.0
    nics_per_node: int = 8
    description: str = ""

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    def with_nodes(self, nodes: int) -> System:
        """The same machine with ``nodes`` nodes."""
        return replace(self, nodes=check_int("nodes", nodes, 1))


def _dgx_h100(nodes: int) -> System:
    g = Graph(16, 24.0, 24.0, "NVL", "PIX", 4)
    return System(nodes, 8, "hopper", "intel", "x86",
                  {"Ring": g, "Tree": replace(g, pattern=1), "NVLS": Graph(16, 40.0, 24.0, "NVL", "PIX", 5),
                   "NVLSTree": Graph(16, 40.0, 24.0, "NVL", "PIX", 5), "CollNetDirect": Graph(8, 24.0, 24.0, "NVL", "PIX", 6),
                   "CollNetChain": g},
                  collnet=False, nvswitch=True, nic_gbps=400.0, nics_per_node=8,
                  description=_("illustrative: 8 H100 on NVSwitch, 8 x 400 Gbit/s NICs; 16 channels of 24 GB/s "
                                "(the search's speed steps, src/graph/search.cc sm90SpeedArray)"))


def _pcie_a100(nodes: int) -> System:
    g = Graph(4, 12.0, 6.0, "PIX", "PXB", 4)
    return System(nodes, 8, "ampere", "amd", "x86", {"Ring": g, "Tree": replace(g, pattern=1)},
                  collnet=False, nvswitch=False, nic_gbps=100.0, nics_per_node=2,
                  description=_("illustrative: 8 A100 PCIe (no NVLink), 2 x 100 Gbit/s NICs; 4 channels of "
                                "12 GB/s inside, 6 GB/s across"))


def _one_gpu_per_node(nodes: int) -> System:
    g = Graph(2, 24.0, 24.0, "LOC", "PIX", 4)
    return System(nodes, 1, "hopper", "intel", "x86", {"Ring": g, "Tree": replace(g, pattern=1), "PAT": g},
                  collnet=False, nvswitch=False, nic_gbps=400.0, nics_per_node=1,
                  description=_("illustrative: one H100 per node, one 400 Gbit/s NIC; 2 channels of 24 GB/s"))


#: Named illustrative machines (module doc): name -> function of the node count.
PRESETS = {"dgx-h100": _dgx_h100, "pcie-a100": _pcie_a100, "one-gpu-per-node": _one_gpu_per_node}


def preset(name: str, nodes: int = 2) -> System:
    """:data:`PRESETS`' machine ``name`` with ``nodes`` nodes. Raises ValueError for an unknown name."""
    return PRESETS[check_choice("preset", name, tuple(PRESETS))](check_int("nodes", nodes, 1))


# -- NCCL_ALGO / NCCL_PROTO ------------------------------------------------------------------------

def parse_list(text: str, elements: tuple[str, ...], default: int = 1) -> Switches:
    """What ``NCCL_ALGO`` or ``NCCL_PROTO`` set (``parseList`` in tuning.cc): ``{function:
    {element: 0 or 1}}`` for every function of :data:`FUNCTIONS`, starting from ``default``.
    ``"Tree,Ring"``: only these; ``"^LL128"``: all but these; ``"allreduce:tree;broadcast:ring"``:
    per function (only the first entry may lack a ``function:`` prefix); case is ignored.

    Raises:
        ValueError: an unknown element or function, or a later entry without a prefix (NCCL answers
            ``ncclInvalidUsage`` and the communicator is not made).
    """
    table = {f: {e: default for e in elements} for f in FUNCTIONS}
    lower = {e.lower(): e for e in elements}
    funcs = {f.lower(): f for f in FUNCTIONS}
    for i, entry in enumerate(t for t in text.split(";")):
        if not entry:
            continue
        prefix, sep, items = entry.partition(":")
        if not sep:
            if i:
                raise ValueError(_("all entries except the first must have a prefix: {text!r}").format(text=text))
            prefix, items = "", entry
        named = funcs.get(prefix.strip().lower()) if prefix else None
        targets = FUNCTIONS if not prefix else (named,) if named is not None else ()
        if not targets:
            raise ValueError(_("unknown function {name!r} in {text!r}; functions: {names}").format(
                name=prefix, text=text, names=", ".join(FUNCTIONS)))
        on = 1
        if items.startswith("^"):
            on, items = 0, items[1:]
        for f in targets:
            for e in elements:
                table[f][e] = 1 - on
            for name in items.split(","):
                key = name.strip().lower()
                if key not in lower:
                    raise ValueError(_("unknown element {name!r} in {text!r}; choose from: {names}").format(
                        name=name, text=text, names=", ".join(elements)))
                table[f][lower[key]] = on
    return table


# -- the model -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tuning:
    """NCCL's tables for one :class:`System`: ``latency[f][a][p]`` (µs) and ``bandwidth[f][a][p]``
    (GB/s of *algorithm* bandwidth; 0 = not available), indexed by function, algorithm and protocol
    names; ``system``; the ``algo_env``/``proto_env`` that shaped it; ``n_channels`` (the ring's)."""

    system: System
    latency: Table
    bandwidth: Table
    algo_env: str | None
    proto_env: str | None
    n_channels: int


def _pat_enabled(s: System) -> bool:
    return _COMPCAP[s.gpu] >= 60 and s.nodes == s.ranks  # one GPU per node (ncclPatEnable's default)


def _net_overhead(s: System) -> float:
    return 2.0 if (s.cpu_arch == "x86" and s.cpu_vendor == "amd") else 1.0


def tune(system: System, algo_env: str | None = None, proto_env: str | None = None) -> Tuning:
    """NCCL's latency and bandwidth tables for ``system`` (``ncclTopoTuneModel``, module doc), with
    ``NCCL_ALGO`` = ``algo_env`` and ``NCCL_PROTO`` = ``proto_env`` (``None``: unset).

    Raises:
        ValueError: an unknown GPU generation, or a bad ``NCCL_ALGO``/``NCCL_PROTO`` (:func:`parse_list`).
    """
    s = system
    check_choice("gpu", s.gpu, _GPUS)
    cc = _GPUS.index(s.gpu)
    n_nodes, n_ranks = s.nodes, s.ranks
    lat: Table = {f: {a: {p: 0.0 for p in PROTOCOLS} for a in ALGORITHMS} for f in FUNCTIONS}
    bw: Table = {f: {a: {p: 0.0 for p in PROTOCOLS} for a in ALGORITHMS} for f in FUNCTIONS}
    ring = s.graphs.get("Ring")
    if n_ranks <= 1:
        return Tuning(s, lat, bw, algo_env, proto_env, ring.n_channels if ring else 1)
    index2 = n_nodes - 1 if n_nodes <= 2 else 2
    index1 = cc if n_nodes == 1 else (1 if s.cpu_vendor == "amd" else 0)
    ll_max = _LL_MAX_BW[index1][index2]
    tree_max, ring_ll128_max = _TREE_BW[cc][index2], _RING_LL128_BW[cc][index2]
    tree_ll128_max, nvls_tree_max = _TREE_LL128_BW[cc][index2], _NVLS_TREE_BW[cc][index2]
    hw_lat = [[list(p) for p in a] for a in _HW_LAT]
    if s.cpu_arch == "power":  # "de-penalize Tree/Simple latency on Power systems"
        hw_lat[_HW_PCI][_TREE][_SIMPLE] = hw_lat[_HW_PCI][_RING][_SIMPLE]
    ppn = n_ranks / n_nodes
    local = n_ranks // n_nodes
    tree_pattern = s.graphs["Tree"].pattern if "Tree" in s.graphs else 1
    for fi, f in enumerate(FUNCTIONS):
        nsteps = 2 * (n_ranks - 1) if fi == _AR else (n_ranks - 1 if fi in (_RS, _AG) else n_ranks)
        for ai, a in enumerate(ALGORITHMS):
            g = s.graphs.get(a)
            if g is None:
                continue
            if fi in (_BCAST, _REDUCE) and ai != _RING:
                continue
            if fi in (_RS, _AG) and ai not in (_PAT, _RING, _NVLS, _CND):
                continue
            if fi == _AR and ai == _PAT:
                continue
            intra_hw = _HW_NVLINK if g.type_intra == "NVL" else _HW_PCI
            hw = intra_hw if n_nodes == 1 else _HW_NET
            for pi, p in enumerate(PROTOCOLS):
                if ai in (_NVLS, _NVLST) and pi != _SIMPLE:
                    continue
                if fi in (_RS, _AG) and ai == _PAT and (pi != _SIMPLE or not _pat_enabled(s)):
                    continue
                collnet = ai in (_CND, _CNC)
                b = g.bw_intra if (n_nodes <= 2 or collnet) else g.bw_inter
                if ai in (_NVLS, _NVLST):
                    if g.n_channels < 2:
                        continue
                    intra_bw = g.bw_intra * _NVLS_EFFICIENCY[cc] * (g.n_channels - 1) / g.n_channels
                    intra_bw *= 2.0 if fi == _AR else (ppn - 1) / ppn
                    inter_bw = g.bw_inter * (2 if (n_nodes <= 2 and ai == _NVLST) else 1)
                    b = min(intra_bw, inter_bw, nvls_tree_max if ai == _NVLST else math.inf)
                bus = g.n_channels * b
                if ai == _RING and pi == _LL:
                    bus = min(ll_max, bus * .5)
                if ai == _RING and pi == _LL128:
                    bus = min(bus * 0.92, g.n_channels * ring_ll128_max)
                if ai == _TREE and fi == _AR:
                    bus = min(bus * .92, g.n_channels * tree_max)
                if ai == _TREE and pi == _LL:
                    bus = min(bus / 3.8, ll_max)
                if ai == _TREE and pi == _LL128:
                    bus = min(bus * (7.0 / 9.0 if n_nodes == 1 else 120.0 / 128.0), g.n_channels * tree_ll128_max)
                if ai == _TREE and tree_pattern == 3:
                    bus *= .85
                if ai == _PAT:
                    bus *= .75
                if ai in (_CND, _CNC) and pi != _SIMPLE:
                    bus = 0.0
                if ai == _CND and pi == _SIMPLE:
                    if fi in (_AG, _RS):
                        bus = ppn * min(g.bw_intra, g.bw_inter * 0.9)
                    else:
                        factor = ppn / g.n_channels
                        factor -= (factor - 1) / 2
                        bus /= factor
                        if _COMPCAP[s.gpu] >= 90:
                            bus *= .85
                if ai in (_NVLS, _CND) and pi == _SIMPLE and fi in (_AG, _RS) and n_nodes > 1:
                    bus = 0.0  # needs a CollNet plugin with iallgather/ireducescatter (none modelled)
                if not (ai != _RING and fi in (_AG, _RS)):
                    bus *= (n_ranks / nsteps) if ai in (_RING, _NVLS, _NVLST) else .5
                bw[f][a][p] = bus
                latency = _BASE_LAT[ai][pi]
                intra_lat = hw_lat[intra_hw][ai][pi]
                inter_lat = hw_lat[_HW_NET][_TREE][pi] if ppn == 1 else hw_lat[_HW_NET][ai][pi]
                inter_lat += g.latency_inter
                if pi == _SIMPLE:
                    inter_lat += g.latency_inter
                if ai == _RING:
                    step = hw_lat[hw][ai][pi]
                    if fi in (_REDUCE, _BCAST):
                        if g.same_channels:
                            latency += step
                        else:
                            if pi == _SIMPLE:
                                step = hw_lat[hw][_TREE][pi]
                            latency += nsteps * step
                    else:
                        overhead = 0.0
                        if n_nodes > 1:
                            overhead = _net_overhead(s) * (3 if pi == _SIMPLE else 1)
                        intra_lat = max(intra_lat, overhead)
                        inter_steps = 0 if n_nodes == 1 else (2 * (n_nodes - 1) if fi == _AR else n_nodes - 1)
                        latency += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
                elif ai == _TREE:
                    if fi == _AR:
                        latency += 2 * ((local - 1) * intra_lat + _log2i(n_nodes) * inter_lat)
                elif ai == _CND:
                    latency += 2 * (min(1, local - 1) * intra_lat + (local - 1) * 0.4) + inter_lat
                elif ai == _CNC:
                    latency += 2 * (local - 1) * intra_lat + inter_lat
                elif ai == _NVLS:
                    latency = intra_lat + (inter_lat if n_nodes > 1 else 0.0)
                elif ai == _NVLST:
                    latency += intra_lat + 2 * _log2i(n_nodes) * inter_lat
                elif ai == _PAT and fi in (_AG, _RS):
                    latency += _log2i(n_nodes) * (inter_lat / 3.5) + n_ranks * 2.8
                lat[f][a][p] = latency
    proto_on = parse_list(proto_env, PROTOCOLS, 1) if proto_env else {f: {p: 1 for p in PROTOCOLS} for f in FUNCTIONS}
    if not proto_env:
        for f in FUNCTIONS:
            proto_on[f]["LL128"] = 2  # "enabled by default only in certain cases"
    algo_on = parse_list(algo_env, ALGORITHMS, 1) if algo_env else {f: {a: 1 for a in ALGORITHMS} for f in FUNCTIONS}
    for f in FUNCTIONS:
        for a in ALGORITHMS:
            if (n_nodes == 1 and a == "NVLSTree") or (not s.collnet and (a in ("CollNetDirect", "CollNetChain") or (
                    a == "NVLS" and n_nodes > 1))) or (not s.nvswitch and a == "CollNetDirect"):
                algo_on[f][a] = 0
            if a in ("NVLS", "NVLSTree") and not (s.nvswitch and cc >= 2):
                algo_on[f][a] = 0  # nvlsSupport: NVSwitch and Hopper or later
            g = s.graphs.get(a)
            for p in PROTOCOLS:
                on = proto_on[f][p]
                if on == 2 and p == "LL128" and g is not None:
                    on = 1
                    inter_ok = PATH_TYPES.index(g.type_inter) <= PATH_TYPES.index("PXN" if cc >= 2 else "PXB")
                    on &= int(inter_ok and PATH_TYPES.index(g.type_intra) <= PATH_TYPES.index("NVB"))
                    on &= int(_COMPCAP[s.gpu] >= 70)
                if not on or not algo_on[f][a]:
                    bw[f][a][p] = 0.0
    return Tuning(s, lat, bw, algo_env, proto_env, ring.n_channels if ring else 1)


def algo_time(t: Tuning, function: str, algorithm: str, protocol: str, nbytes: int) -> float:
    """Microseconds NCCL's model gives one call (``ncclTopoGetAlgoTime``), or ``-1`` where the
    pair is not available (bandwidth 0). ``nbytes``: the size NCCL prices (module doc)."""
    b = t.bandwidth[function][algorithm][protocol]
    latency = t.latency[function][algorithm][protocol]
    if b == 0:
        return -1.0
    ai, pi = ALGORITHMS.index(algorithm), PROTOCOLS.index(protocol)
    log_size = _log2i(nbytes >> 6)
    s = t.system
    if ai == _TREE and function == "AllReduce" and 0 <= log_size < 23:
        b *= _TREE_CORRECTION[pi][log_size]
    if ai == _NVLST and function == "AllReduce" and 0 <= log_size < 24 and _COMPCAP[s.gpu] >= 100 and s.cpu_arch == "x86":
        b *= _TREE_CORRECTION[pi][log_size]
    if ai == _RING and pi == _SIMPLE and s.nodes > 1 and function == "AllReduce" and \
            nbytes / (t.n_channels * s.ranks) >= 64:
        latency *= 1.9 if _COMPCAP[s.gpu] < 80 else 1.4  # "plateau effect of ring"
    return latency + nbytes / (1000 * b)


@dataclass(frozen=True)
class Choice:
    """What NCCL's model picks for one call: ``algorithm``, ``protocol``, ``time_us``, ``nbytes``,
    and every candidate's time (``candidates``: ``{(algorithm, protocol): µs}``)."""

    function: str
    nbytes: int
    algorithm: str
    protocol: str
    time_us: float
    candidates: dict[tuple[str, str], float]

    @property
    def algbw(self) -> float:
        """GB/s: ``nbytes / time``."""
        return self.nbytes / (self.time_us * 1e3)


def choose(t: Tuning, function: str, nbytes: int) -> Choice:
    """The (algorithm, protocol) with the smallest model time (``topoGetAlgoInfo``; ties: the first
    in NCCL's order). Raises ValueError when nothing is available (NCCL: "No algorithm/protocol
    available", e.g. ``NCCL_ALGO`` naming only algorithms this system lacks)."""
    check_choice("function", function, FUNCTIONS)
    cands: dict[tuple[str, str], float] = {}
    best: tuple[str, str, float] | None = None
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            tm = algo_time(t, function, a, p, nbytes)
            if tm >= 0:
                cands[(a, p)] = tm
                if best is None or tm < best[2]:
                    best = (a, p, tm)
    if best is None:
        raise ValueError(_("no algorithm/protocol available for {function} (NCCL_ALGO={algo}, NCCL_PROTO={proto})").format(
            function=function, algo=t.algo_env, proto=t.proto_env))
    return Choice(function, nbytes, best[0], best[1], best[2], cands)


def choices(t: Tuning, function: str, sizes: Iterable[SupportsInt]) -> list[Choice]:
    """:func:`choose` at every size of ``sizes``."""
    return [choose(t, function, int(n)) for n in sizes]


def crossovers(t: Tuning, function: str, lo: int = 8, hi: int = 1 << 32) -> list[tuple[int, str, str]]:
    """Where the choice changes between ``lo`` and ``hi`` bytes: ``[(nbytes, algorithm, protocol),
    ...]``, the first entry the choice at ``lo``, then each size (to the byte, by bisection) from
    which another pair wins."""
    def pick(n: int) -> tuple[str, str]:
        c = choose(t, function, n)
        return c.algorithm, c.protocol
    out = [(lo, *pick(lo))]
    grid = sorted({int(lo * (hi / lo) ** (i / 256)) for i in range(257)} | {hi})
    prev_n, prev = grid[0], pick(grid[0])
    for n in grid[1:]:
        cur = pick(n)
        if cur != prev:
            a, b = prev_n, n
            while b - a > 1:
                mid = (a + b) // 2
                if pick(mid) == prev:
                    a = mid
                else:
                    b = mid
            out.append((b, *pick(b)))
        prev_n, prev = n, cur
    return out


class BusbwOverNic(TypedDict):
    """:func:`explain_busbw_over_nic`'s answer (GB/s where a rate)."""

    choice: Choice
    busbw: float
    nic_GBps: float
    node_nics_GBps: float
    ratio: float
    ring_share: float
    text: str


def explain_busbw_over_nic(system: System, nbytes: int = 1 << 30) -> BusbwOverNic:
    """Why an all_reduce's busbw can exceed one NIC's rate, as numbers from NCCL's model.

    Returns a :class:`BusbwOverNic`: ``choice`` (:class:`Choice` at ``nbytes``), ``busbw`` (GB/s: algbw times
    ``2(n-1)/n``, nccl-tests' factor), ``nic_GBps`` (one NIC, GB/s), ``node_nics_GBps`` (all NICs of
    a node), ``ratio`` (busbw / one NIC), ``ring_share`` (the fraction of a flat ring's hops that
    cross nodes: ``nodes / ranks``: each channel's ring leaves a node once), and ``text``: the
    explanation in words.
    """
    t = tune(system)
    c = choose(t, "AllReduce", nbytes)
    n = system.ranks
    bus = c.algbw * 2 * (n - 1) / n
    nic = system.nic_gbps / 8
    text = _("On {desc} ({nodes} nodes x {L} GPUs), NCCL's model picks {algo}/{proto} for a {size} all_reduce: "
             "{bus:.0f} GB/s of busbw, {ratio:.1f} times one {nic:g} Gbit/s NIC ({nicB:.0f} GB/s). busbw counts "
             "the bytes each GPU moves on every link of the algorithm, and only {cross} of the ring's {n} hops per "
             "channel cross a node's boundary: the rest run on NVLink inside the node. The node's traffic leaves "
             "through all its {k} NICs at once (the channels are spread over them: {node:.0f} GB/s in all), so "
             "busbw is bounded by the node's NICs together, not by one.").format(
                 desc=system.description or _("this system"), nodes=system.nodes, L=system.ranks_per_node,
                 algo=c.algorithm, proto=c.protocol, size=format_bytes(nbytes), bus=bus, ratio=bus / nic,
                 nic=system.nic_gbps, nicB=nic, cross=system.nodes, n=n, k=system.nics_per_node,
                 node=nic * system.nics_per_node)
    if c.algorithm in ("NVLS", "NVLSTree"):
        text += " " + _("NVLS goes further: the NVSwitch itself reduces (multicast and in-switch sum), so each GPU "
                        "sends its data once and receives the sum once, and NCCL's model doubles its intra-node "
                        "bandwidth for all_reduce (tuning.cc: 'AllReduce pipelines two operations').")
    return {"choice": c, "busbw": bus, "nic_GBps": nic, "node_nics_GBps": nic * system.nics_per_node,
            "ratio": bus / nic, "ring_share": system.nodes / n, "text": text}


def table_text(t: Tuning, functions: Sequence[str] = FUNCTIONS) -> str:
    """The latency/bandwidth table as NCCL prints it with ``NCCL_DEBUG_SUBSYS=TUNING``: one line per
    function, ``latency/bandwidth`` per algorithm and protocol (µs / GB/s)."""
    lines = []
    for block in range(0, len(ALGORITHMS), 3):
        algs = ALGORITHMS[block:block + 3]
        lines.append("  Algorithm   |" + "".join(f" {'':>14}   {a:>14}   {'':>14} |" for a in algs))
        lines.append("  Protocol    |" + "".join(f" {p:>14} |" for _a in algs for p in PROTOCOLS))
        for f in functions:
            lines.append(f"{f:>13} |" + "".join(f"{t.latency[f][a][p]:8.1f}/{t.bandwidth[f][a][p]:6.1f} |"
                                                for a in algs for p in PROTOCOLS))
    return "\n".join(lines)


# -- reading NCCL's own lines ----------------------------------------------------------------------

_TABLE_ALGOS = re.compile(r"Algorithm\s*\|(.*)$")
_TABLE_ROW = re.compile(r"(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce)\s*\|(.*)$")
_CELL = re.compile(r"(-?\d+(?:\.\d+)?)\s*/\s*(-?\d+(?:\.\d+)?)")
_GRAPH = re.compile(r"Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([\d.]+)/([\d.]+), type (\w+)/(\w+), "
                    r"sameChannels (\d)")
_CHOSEN = re.compile(r"(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce): (\d+) Bytes -> Algo (\w+) proto (\w+)")


def parse_tuning_table(text: str) -> dict[tuple[str, str, str], tuple[float, float]]:
    """NCCL's printed TUNING table (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``, rank 0's lines,
    each after its ``NCCL INFO`` prefix) as ``{(function, algorithm, protocol): (latency_us,
    bandwidth_GBps)}``. Lines that are not part of the table are skipped."""
    out: dict[tuple[str, str, str], tuple[float, float]] = {}
    algs: list[str] = []
    for line in text.splitlines():
        m = _TABLE_ALGOS.search(line)
        if m:
            algs = [a.strip() for a in m.group(1).split("|") if a.strip()]
            continue
        m = _TABLE_ROW.search(line)
        if m and algs:
            cells = _CELL.findall(m.group(2))
            for i, (lat, b) in enumerate(cells):
                a, p = algs[i // 3] if i // 3 < len(algs) else None, PROTOCOLS[i % 3]
                if a is not None:
                    out[(m.group(1), a, p)] = (float(lat), float(b))
    return out


class GraphLine(TypedDict):
    """One GRAPH line of an NCCL log, as :func:`parse_graph_lines` reads it (bandwidths GB/s per channel)."""

    pattern: int
    cross_nic: int
    n_channels: int
    bw_intra: float
    bw_inter: float
    type_intra: str
    type_inter: str
    same_channels: bool


class SystemOptions(TypedDict, total=False):
    """The fields of :class:`System` that :func:`system_from_log` passes on as given."""

    cpu_vendor: str
    cpu_arch: str
    collnet: bool
    nvswitch: bool
    nic_gbps: float
    nics_per_node: int


def parse_graph_lines(text: str) -> list[GraphLine]:
    """NCCL's ``Pattern ..., nChannels ..., bw intra/inter, type intra/inter, sameChannels ...``
    GRAPH lines, in order (ring, tree, collnet, nvls... as the communicator searched them), as
    dicts: ``pattern``, ``cross_nic``, ``n_channels``, ``bw_intra``, ``bw_inter``, ``type_intra``,
    ``type_inter``, ``same_channels``."""
    out: list[GraphLine] = []
    for m in _GRAPH.finditer(text):
        out.append(GraphLine(pattern=int(m[1]), cross_nic=int(m[2]), n_channels=int(m[3]), bw_intra=float(m[4]),
                        bw_inter=float(m[5]), type_intra=m[6], type_inter=m[7], same_channels=bool(int(m[8]))))
    return out


def parse_chosen(text: str) -> list[tuple[str, int, str, str]]:
    """NCCL's per-call TUNING lines (``AllReduce: 1048576 Bytes -> Algo RING proto SIMPLE ...``) as
    ``(function, nbytes, algorithm, protocol)`` with the names as :data:`ALGORITHMS` and
    :data:`PROTOCOLS` spell them."""
    algs = {a.upper(): a for a in ALGORITHMS}
    algs.update({"COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain", "NVLS_TREE": "NVLSTree"})
    protos = {p.upper(): p for p in PROTOCOLS}
    return [(m[1], int(m[2]), algs.get(m[3].upper(), m[3]), protos.get(m[4].upper(), m[4])) for m in _CHOSEN.finditer(text)]


def system_from_log(text: str, nodes: int, ranks_per_node: int, gpu: str, **kwargs: Unpack[SystemOptions]) -> System:
    """A :class:`System` whose Ring and Tree graphs are the first two GRAPH lines of an NCCL log
    (:func:`parse_graph_lines`; NCCL searches the ring graph first, then the tree). Other keyword
    arguments go to :class:`System`.

    Raises:
        ValueError: the log has fewer than two GRAPH lines (run with ``NCCL_DEBUG_SUBSYS=GRAPH``).
    """
    graphs = parse_graph_lines(text)
    if len(graphs) < 2:
        raise ValueError(_("the log has {n} 'Pattern ..., nChannels ..., bw ...' line(s); NCCL prints them with "
                           "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH").format(n=len(graphs)))
    made: dict[str, Graph] = {}
    for name, g in zip(("Ring", "Tree"), graphs):
        made[name] = Graph(g["n_channels"], g["bw_intra"], g["bw_inter"], g["type_intra"], g["type_inter"],
                           g["pattern"], 0.0, g["same_channels"])
    return System(nodes, ranks_per_node, gpu, graphs=made, description=_("graphs read from an NCCL log"), **kwargs)
