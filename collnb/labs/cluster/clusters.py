"""``collnb.cluster(nodes, ranks_per_node, inter=..., intra=...)``: a cluster of nodes with two
link speeds, for real where this machine allows it, else its model.

:class:`Cluster` is one object for three ways of having nodes (:attr:`Cluster.mode`):

* ``"emulated"``: this process may make network namespaces (root, or CAP_SYS_ADMIN and
  CAP_NET_ADMIN: these machines, CI, a container started with those capabilities). Each node is a
  namespace of a :class:`~collnb.labs.cluster.VirtualCluster`; its ranks talk over the node's own
  loopback (the intra-node tier), nodes through veth pairs shaped with tbf to the inter-node rate.
  Every timing is measured.
* ``"modelled"``: it may not (Binder, Colab, a laptop without root). One line says why; values
  still come from real ranks (collnb's own, on loopback), and every timing shown is the two-tier
  model's, labelled *predicted*.
* ``"real"``: collnb's ranks run on ipyparallel engines (:func:`collnb.connect`) spread over
  machines: the node map comes from the engines' hosts, and every timing is measured on the real
  network.

Latency the kernel cannot add (netem is not in this machine's kernel) enters the model only and is
labelled so (:attr:`Cluster.latency`).

``collnb.cluster(..., activate=True)`` (or :meth:`Cluster.activate`) makes an emulated cluster's
ranks the ones :func:`collnb.launch` runs on (:mod:`.rankset`): then :func:`collnb.run`, the
explorers, the bandwidth lab and a function that builds a ``DeviceMesh`` run in the namespaces, until
the cluster is closed. A cluster is usable wherever a world size is: a :class:`Cluster` *is* an ``int``, its world size
(``collnb.run("all_reduce", world_size=c)``, ``range(c)``, ``c * 2``), with the cluster's attributes
besides; pickled (into a rank's arguments) it becomes the plain number.
"""

from __future__ import annotations

import atexit
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...algorithms import DEFAULT_MODEL
from ...i18n import _
from ...ranks import on_shutdown
from ...vocabulary import MAX_WORLD_SIZE, check_int
from .hierarchical import LinkMeasurement, TierModel, measure_link
from .network import ClusterUnavailable, available
from .virtual import VirtualCluster

__all__ = ["Link", "parse_link", "Cluster", "cluster", "close_all", "MODES", "DEFAULT_INTRA_GBPS"]

#: How a :class:`Cluster` has its nodes (module doc).
MODES = ("emulated", "modelled", "real")
#: The intra-node rate the model assumes where nothing measured it (a modelled cluster with an
#: unshaped intra tier): :data:`collnb.DEFAULT_MODEL`'s 4 GB/s (gloo over loopback, calibrated on a
#: 2-core machine), in Gbit/s.
DEFAULT_INTRA_GBPS = 8 / DEFAULT_MODEL.beta / 1e9

_RATE = re.compile(r"^\s*(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[kKmMgGtT]?)(?P<bits>bit/s|bit|bps|b/s|B/s|Bps)?\s*"
                   r"(?:[,@;]\s*(?P<lat>\d+(?:\.\d*)?|\.\d+)\s*(?P<lunit>ns|us|µs|ms|s))?\s*$")
_SCALE = {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}  # Gbit/s per bit/s, kbit/s, ...
_LAT_US = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}


@dataclass(frozen=True)
class Link:
    """One tier's link: ``gbps`` Gbit/s (1e9 bits per second; ``None``: unshaped, as fast as this
    machine moves it) and a one-way ``latency_us`` in µs (modelled only, :attr:`Cluster.latency`)."""

    gbps: float | None = None
    latency_us: float = 0.0

    def __str__(self) -> str:
        rate = _("unshaped") if self.gbps is None else (
            f"{self.gbps * 1000:g} Mbit/s" if self.gbps < 1 else f"{self.gbps:g} Gbit/s")
        return rate + (f", {self.latency_us:g} µs" if self.latency_us else "")


def parse_link(value: object, name: str = "inter") -> Link:
    """A :class:`Link` from what a learner writes: ``None`` (unshaped), a number of Gbit/s
    (``0.4``), a string (``"400 Mbit/s"``, ``"10 Gbit/s"``, ``"25 GB/s"`` = 200 Gbit/s,
    ``"1 Gbit/s, 50 us"``), a ``(rate, latency)`` pair or a :class:`Link`.

    Raises:
        TypeError / ValueError: anything else, or a rate that is not > 0, naming ``name`` and the
            forms it takes.
    """
    forms = _("give Gbit/s as a number (0.4), a string such as '400 Mbit/s', '10 Gbit/s', '25 GB/s' or "
              "'1 Gbit/s, 50 us', or None (unshaped)")
    if value is None:
        return Link()
    if isinstance(value, Link):
        link = value
    elif isinstance(value, bool):
        raise TypeError(_("{name}={value!r} is not a link speed: {forms}").format(name=name, value=value, forms=forms))
    elif isinstance(value, (int, float)):
        link = Link(float(value))
    elif isinstance(value, tuple) and len(value) == 2:
        rate, latency = value
        if isinstance(latency, str):
            latency_us = parse_link(f"1 Gbit/s, {latency}", name).latency_us
        elif isinstance(latency, (int, float)) and not isinstance(latency, bool):
            latency_us = float(latency)
        else:
            raise TypeError(_("{name}={value!r} is not a link speed: {forms}").format(
                name=name, value=value, forms=forms))
        link = Link(parse_link(rate, name).gbps, latency_us)
    elif isinstance(value, str):
        m = _RATE.match(value)
        if not m:
            raise ValueError(_("{name}={value!r} is not a link speed: {forms}").format(
                name=name, value=value, forms=forms))
        if not m["unit"] and not m["bits"]:  # '400': Mbit/s or Gbit/s? (a number, 0.4, is Gbit/s)
            raise ValueError(_("{name}={value!r} has no unit: write '{num} Mbit/s' or '{num} Gbit/s' (a number, not a "
                               "string, is Gbit/s)").format(name=name, value=value, num=m["num"]))
        gbps = float(m["num"]) * _SCALE[m["unit"].lower()]
        if m["bits"] in ("B/s", "Bps"):
            gbps *= 8
        lat = float(m["lat"]) * _LAT_US[m["lunit"]] if m["lat"] else 0.0
        link = Link(gbps, lat)
    else:
        raise TypeError(_("{name}={value!r} is not a link speed: {forms}").format(name=name, value=value, forms=forms))
    if link.gbps is not None and not math.isfinite(link.gbps) or not math.isfinite(link.latency_us):
        raise ValueError(_("{name}={value!r} is not a finite link speed: {forms}").format(
            name=name, value=value, forms=forms))
    if link.gbps is not None and not link.gbps > 0:
        raise ValueError(_("{name} must be faster than 0 Gbit/s; got {value!r}").format(name=name, value=value))
    if not link.latency_us >= 0:
        raise ValueError(_("{name}'s latency must be >= 0 µs; got {value!r}").format(name=name, value=value))
    return link


#: Every cluster not closed yet, by id (a Cluster is an int: two of one world size are equal, so no
#: set; and an int subclass takes no weak reference): :func:`close_all` closes them.
_open: dict[int, Cluster] = {}


class Cluster(int):
    """``nodes`` nodes of ``ranks_per_node`` ranks (module doc): made by :func:`cluster`.

    Attributes:
        nodes, ranks_per_node, world_size: the shape (rank ``r`` on node ``r // ranks_per_node``).
        inter, intra: the tiers' :class:`Link` objects, as asked.
        mode: ``"emulated"``, ``"modelled"`` or ``"real"`` (:data:`MODES`); ``why``: one line
            saying why it is modelled (``""`` otherwise).
        latency: ``"modelled"`` when a tier asks for latency (the kernel here cannot add it),
            else ``"none"``.
        measured: the last :meth:`measure`'s :class:`LinkMeasurement` (``None`` before).
    """

    def __new__(cls, nodes: int, ranks_per_node: int, *args: Any, **kwargs: Any) -> Cluster:
        return super().__new__(cls, nodes * ranks_per_node)

    def __init__(self, nodes: int, ranks_per_node: int, inter: Link, intra: Link, mode: str, why: str = "",
                 hosts: list[str] | None = None):
        self.nodes = nodes
        self.ranks_per_node = ranks_per_node
        self.world_size = nodes * ranks_per_node
        self.inter = inter
        self.intra = intra
        self.mode = mode
        self.why = why
        self.hosts = hosts
        self.latency = "modelled" if (inter.latency_us or intra.latency_us) else "none"
        self.measured: LinkMeasurement | None = None
        self._vc: VirtualCluster | None = None
        _open[id(self)] = self

    def __reduce__(self) -> tuple[Any, ...]:
        # into a rank's arguments (or any pickle) a cluster travels as its world size: its
        # namespaces, processes and files are this process's
        return (int, (self.world_size,))

    # -- what it is ---------------------------------------------------------------------------------
    @property
    def inter_latency_ms(self) -> float:
        return self.inter.latency_us / 1000

    @property
    def intra_gbps(self) -> float | None:
        return self.intra.gbps

    @property
    def inter_gbps(self) -> float | None:
        return self.inter.gbps

    def node_of(self, rank: int) -> int:
        """The node rank ``rank`` runs on: ``rank // ranks_per_node``."""
        return rank // self.ranks_per_node

    @property
    def timings(self) -> str:
        """``"measured"`` (emulated, real) or ``"predicted"`` (modelled): the word every timing of
        this cluster is labelled with."""
        return "predicted" if self.mode == "modelled" else "measured"

    def describe(self) -> str:
        """One paragraph: the shape, the tiers, the mode and, when modelled, why."""
        head = _("{nodes} nodes x {L} ranks (world size {ws}); inter-node {inter}, intra-node {intra}").format(
            nodes=self.nodes, L=self.ranks_per_node, ws=self.world_size, inter=self.inter,
            intra=self.intra if self.intra.gbps is not None or self.intra.latency_us else _("the node's loopback"))
        if self.mode == "emulated":
            how = _("emulated for real: one network namespace per node, the links shaped with tbf; timings "
                    "measured")
        elif self.mode == "real":
            how = _("real: ranks on ipyparallel engines, nodes = their hosts ({hosts}); timings measured").format(
                hosts=", ".join(dict.fromkeys(self.hosts or [])))
        else:
            how = _("modelled: {why}. Values come from real ranks on this machine's loopback; every timing is "
                    "the two-tier model's, predicted").format(why=self.why)
        text = _("{shape}. {how}.").format(shape=head, how=how)
        if self.latency == "modelled":
            text += " " + _("Latency is modelled only: this kernel cannot delay packets (no netem).")
        return text

    def __repr__(self) -> str:
        return (f"collnb.cluster(nodes={self.nodes}, ranks_per_node={self.ranks_per_node}, inter={str(self.inter)!r}, "
                f"intra={str(self.intra)!r}) [{self.mode}]")

    def _repr_png_(self) -> bytes:
        from .pictures import cluster_png
        return cluster_png(self)

    # -- running ------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        """Raise :class:`ClusterUnavailable` if :meth:`close` closed this cluster."""
        if self.mode == "closed":
            raise ClusterUnavailable(_("this cluster was closed: make a new one with collnb.cluster(...)"))

    def launch(self, fn: Callable[..., Any], args: Sequence[Any] = (), timeout: float = 120.0) -> list[Any]:
        """Run ``fn(rank, world_size, *args)`` on the cluster's ``world_size`` ranks; results in rank
        order. Emulated: the namespaces' ranks (:meth:`VirtualCluster.launch`); modelled: collnb's
        own ranks on loopback (:func:`collnb.launch`, ``debug=False``); real: the connected engines.

        Raises:
            ClusterUnavailable: the cluster was closed. As :meth:`VirtualCluster.launch` or
                :func:`collnb.launch` for a rank that fails or a timeout.
        """
        self._check_open()
        if self.mode == "emulated":
            assert self._vc is not None
            return self._vc.launch(fn, args, timeout=timeout)
        from ...ranks import launch
        return launch(fn, self.world_size, args=tuple(args), timeout=timeout, debug=False,
                      collective_timeout=max(5.0, timeout))

    def measure(self, nbytes: int = 16 << 20, repeats: int = 3, verbose: bool = True) -> LinkMeasurement:
        """Measure each tier with one stream of big messages (:func:`measure_link`): the inter-node
        link (rank 0 to rank ``ranks_per_node``) and the intra-node route (rank 0 to rank 1). In a
        modelled cluster only the intra-node route is real (this machine's loopback) and the
        inter-node rate is the one asked. Kept as :attr:`measured`; printed when ``verbose``."""
        link = measure_link(self, nbytes=nbytes, repeats=repeats, verbose=False)
        if self.mode == "modelled":  # only the loopback is real: the inter-node tier is the one asked
            link = LinkMeasurement(self.inter.gbps, self.inter.gbps, link.intra_gbps, link.nbytes, link.repeats,
                                   None, link.intra_alpha_s)
        self.measured = link
        if verbose:
            print(link if self.mode != "modelled" else
                  _("intra-node (this machine's loopback): {intra:.3f} Gbit/s measured; inter-node: {inter} as "
                    "asked (modelled)").format(intra=link.intra_gbps or 0.0, inter=self.inter))
        return link

    def model(self, alpha: float | None = None, gamma: float = DEFAULT_MODEL.gamma) -> TierModel:
        """The two-tier α-β-γ model of this cluster (:class:`TierModel`): each tier's β from its rate
        (shaped: the rate asked, payload ~95.6 % of a veth's frames; measured by :meth:`measure`
        where the tier is unshaped or the cluster is real), each tier's α the latency
        :meth:`measure` measured (half a round trip of one float; ``alpha`` seconds for both tiers
        when given, :data:`collnb.DEFAULT_MODEL`'s 50 µs where nothing measured it) plus the tier's
        modelled latency.

        An unshaped tier of an emulated or real cluster is measured first (:meth:`measure`, once).
        """
        if self.measured is None and self.mode in ("emulated", "real"):
            self.measure(verbose=False)
        m = self.measured
        inter = (m.inter_gbps if m is not None and m.inter_gbps else None) if self.mode == "real" else None
        if inter is None:
            inter = self.inter.gbps * _PAYLOAD if self.inter.gbps else (m.inter_gbps if m and m.inter_gbps else None)
        intra = self.intra.gbps if self.intra.gbps else (m.intra_gbps if m and m.intra_gbps else None)
        if self.mode == "modelled" and intra is None:
            intra = DEFAULT_INTRA_GBPS
        if inter is None or intra is None:  # a tier the measurement has no pair for (one node, one rank a node)
            inter = inter or intra or DEFAULT_INTRA_GBPS
            intra = intra or inter
        a_intra = alpha if alpha is not None else (m.intra_alpha_s if m is not None else None)
        a_inter = alpha if alpha is not None else (m.inter_alpha_s if m is not None else None)
        if self.mode == "modelled" and alpha is None:
            a_inter = None  # the loopback's latency is not the modelled link's
        return TierModel.from_rates(self.nodes, self.ranks_per_node, intra, inter, self.inter_latency_ms,
                                    alpha=DEFAULT_MODEL.alpha if alpha is None else alpha, gamma=gamma,
                                    intra_shared=self.intra.gbps is not None and self.mode == "emulated",
                                    intra_latency_ms=self.intra.latency_us / 1000, intra_alpha=a_intra,
                                    inter_alpha=a_inter)

    def set_inter(self, inter: object) -> None:
        """Change the inter-node link of a running cluster (emulated: re-shapes the veths at once;
        modelled: changes what the model assumes). Raises as :func:`parse_link`; for a real cluster
        ValueError (its network is what it is)."""
        self._check_open()
        link = parse_link(inter, "inter")
        if self.mode == "real":
            raise ValueError(_("a real cluster's network cannot be reshaped"))
        if self._vc is not None:
            self._vc.set_inter_gbps(link.gbps)
        self.inter = link
        self.latency = "modelled" if (self.inter.latency_us or self.intra.latency_us) else "none"
        self.measured = None

    def activate(self) -> Cluster:
        """Make this cluster's ranks the ones :func:`collnb.launch` (and :func:`collnb.run`, the
        explorers, the bandwidth lab, ...) runs on, until :meth:`close` or :meth:`deactivate`
        (emulated only: a modelled cluster's values come from this machine's ranks anyway, a real
        one's from the connected engines). Returns the cluster. Every instrument of
        :func:`collnb.launch` works there (``record_calls``, ``timeline``, ``flight_recorder``,
        ``show_backend_log``); :mod:`.rankset` says what differs from local ranks. Raises
        ClusterUnavailable for a closed cluster."""
        self._check_open()
        if self.mode == "emulated":
            from .rankset import activate
            activate(self)
        return self

    def deactivate(self) -> None:
        """Return :func:`collnb.launch` to this machine's ranks (if this cluster's were active)."""
        from .rankset import deactivate
        deactivate(self)

    def close(self) -> None:
        """Stop the ranks and remove the namespaces (emulated); safe to call twice. A closed emulated or
        modelled cluster refuses to launch, reshape or activate (a real one's engines are the learner's)."""
        self.deactivate()
        _open.pop(id(self), None)
        if self._vc is not None:
            self._vc.close()
            self._vc = None
        if self.mode != "real":
            self.mode = "closed"

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def namespaces(self) -> list[str]:
        """The node namespaces' names (emulated; ``[]`` otherwise)."""
        return self._vc.namespaces if self._vc is not None else []


#: What the labs take as a cluster: a :func:`cluster`'s :class:`Cluster`, or a :class:`VirtualCluster` entered.
AnyCluster = Cluster | VirtualCluster

#: tbf counts frame headers: a TCP stream's payload gets 1448/1514 of a veth's rate (:mod:`.network`).
_PAYLOAD = 1448 / 1514


def _engine_hosts() -> list[str] | None:
    """The host of every connected engine, in rank order, or ``None`` when not connected."""
    from ...ranks import connected_hosts
    return connected_hosts()


def cluster(nodes: int | None = 2, ranks_per_node: int | None = 2, inter: object = "1 Gbit/s",
            intra: object = None, *, mode: str | None = None, quiet: bool = False, activate: bool = False) -> Cluster:
    """A cluster of ``nodes`` nodes with ``ranks_per_node`` ranks each and two link speeds.

    Args:
        nodes, ranks_per_node: the shape; world size ``nodes * ranks_per_node``, at most
            :data:`collnb.vocabulary.MAX_WORLD_SIZE`. On engines (``mode="real"``) ``None`` takes
            them from the engines' hosts.
        inter: each node's link to the others (:func:`parse_link`: ``"1 Gbit/s"``, ``0.4``,
            ``"10 Gbit/s, 20 us"``, ``None`` unshaped).
        intra: the link inside a node: ``None`` (default) the node's own loopback, unshaped; a rate
            shapes each node's loopback, shared by its ranks (:mod:`.network`).
        mode: ``None`` (default): ``"real"`` while collnb is connected to engines, else
            ``"emulated"`` where namespaces can be made, else ``"modelled"``; or one of those to
            insist (``"emulated"`` then raises where it cannot be).
        quiet: do not print the one line a modelled cluster prints.
        activate: make the cluster's ranks the ones :func:`collnb.launch` runs on from now on
            (:meth:`Cluster.activate`): ``collnb.run("all_reduce", world_size=c)`` then runs in the
            namespaces.

    Returns:
        :class:`Cluster`. Close it with ``cluster.close()`` (or ``with collnb.cluster(...) as c:``);
        :func:`close_all` and interpreter exit close every one, and a killed kernel's namespaces
        are removed by its reaper (:mod:`.network`).

    Raises:
        TypeError / ValueError: bad shape or link; ``mode`` not one of :data:`MODES`; on engines a
            shape that does not match their hosts, or hosts whose engines are not consecutive.
        ClusterUnavailable: ``mode="emulated"`` where namespaces cannot be made (the one line why).
    """
    if mode is not None and mode not in MODES:
        raise ValueError(_("mode must be one of {modes} (or None: the best this machine allows); got {value!r}").format(
            modes=", ".join(MODES), value=mode))
    inter_link, intra_link = parse_link(inter, "inter"), parse_link(intra, "intra")
    hosts = _engine_hosts()
    if mode == "real" and hosts is None:
        raise ValueError(_("mode='real' runs on ipyparallel engines: collnb.connect(...) them first"))
    if hosts is not None and mode in (None, "real"):
        return _real_cluster(nodes, ranks_per_node, inter_link, intra_link, hosts)
    nodes = check_int("nodes", nodes, 1)
    ranks_per_node = check_int("ranks_per_node", ranks_per_node, 1)
    if nodes * ranks_per_node > MAX_WORLD_SIZE:
        raise ValueError(_("nodes * ranks_per_node = {n} ranks; at most {most} fit on this machine").format(
            n=nodes * ranks_per_node, most=MAX_WORLD_SIZE))
    why = ""
    if mode in (None, "emulated"):
        ok, why = available()
        if ok:
            c = Cluster(nodes, ranks_per_node, inter_link, intra_link, "emulated")
            vc = VirtualCluster(nodes, ranks_per_node, inter_link.gbps, c.inter_latency_ms, intra_gbps=intra_link.gbps)
            try:
                vc.__enter__()
            except ClusterUnavailable as exc:
                if mode == "emulated":
                    raise
                why = str(exc)
            else:
                c._vc = vc
                return c.activate() if activate else c
        elif mode == "emulated":
            raise ClusterUnavailable(why)
    if not why:
        why = _("asked for mode='modelled'")
    c = Cluster(nodes, ranks_per_node, inter_link, intra_link, "modelled", why)
    if not quiet:
        print(_("collnb.cluster: modelled, timings predicted ({why})").format(why=why), file=sys.stderr)
    return c


def _real_cluster(nodes: int | None, ranks_per_node: int | None, inter: Link, intra: Link,
                  hosts: list[str]) -> Cluster:
    order = list(dict.fromkeys(hosts))
    counts = [hosts.count(h) for h in order]
    runs = [h for i, h in enumerate(hosts) if i == 0 or hosts[i - 1] != h]
    if len(runs) != len(order) or len(set(counts)) != 1:
        raise ValueError(_("the engines' hosts ({hosts}) are not {n} equal runs of consecutive ranks: collnb's node "
                           "map puts rank r on node r // ranks_per_node. Start the same number of engines on every "
                           "host, one host after the other").format(hosts=", ".join(hosts), n=len(order)))
    N, L = len(order), counts[0]
    if (nodes is not None and nodes != N) or (ranks_per_node is not None and ranks_per_node != L):
        raise ValueError(_("the connected engines make {N} nodes x {L} ranks (hosts {hosts}); got nodes={nodes}, "
                           "ranks_per_node={rpn} (pass None to take the engines' shape)").format(
                               N=N, L=L, hosts=", ".join(order), nodes=nodes, rpn=ranks_per_node))
    return Cluster(N, L, inter, intra, "real", hosts=hosts)


def close_all() -> None:
    """Close every open cluster (:meth:`Cluster.close`): :func:`collnb.shutdown` and interpreter
    exit call it."""
    for c in list(_open.values()):
        c.close()


atexit.register(close_all)
on_shutdown(close_all)
