"""Pictures of a cluster: its nodes, ranks and links (:func:`cluster_figure`), one round of an
algorithm on it with every transfer coloured by the tier it crosses (:func:`round_figure`), the
whole run round by round (:func:`tier_filmstrip`, :func:`replay_tiers`), and algorithms measured
beside the model (:func:`comparison_figure`).

Colours: a transfer inside a node is green, one between nodes vermilion (the Okabe-Ito colours of
:mod:`collnb.views.palette`, told apart by colour-blind readers too; the line style differs as
well: intra solid, inter dashed). An arrow's width grows with its bytes. matplotlib (Agg) draws;
in Chinese the texts fall back to the CJK font (:func:`collnb.views.matplotlib_fonts`).
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np

from ...i18n import _
from ...units import format_bytes

if TYPE_CHECKING:
    from IPython.display import Image
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter
    from PIL import Image as PILImage

    from ...algorithms import Trace
    from .hierarchical import TierModel

__all__ = ["as_image", "cluster_figure", "cluster_png", "round_figure", "tier_filmstrip", "replay_tiers", "TierReplay", "comparison_figure",
           "INTRA_COLOR", "INTER_COLOR"]

INTRA_COLOR = "#009E73"  # bluish green
INTER_COLOR = "#D55E00"  # vermilion
_NODE_FILL = "#F2F2F2"
_SWITCH_FILL = "#E8E8E8"


class ClusterShape(Protocol):
    """What a picture needs of a cluster: its shape (a :class:`~collnb.labs.cluster.Cluster`, a
    :class:`~collnb.labs.cluster.VirtualCluster`, or a trace's own node map); its ``inter``, ``intra`` and
    ``mode`` are read where it has them."""

    @property
    def nodes(self) -> int: ...
    @property
    def ranks_per_node(self) -> int: ...


#: One arrow of a round: ``(src, dst, bytes, reduce)``.
Arrow = tuple[int, int, float, bool]


class _Layout(TypedDict):
    """Where :func:`_positions` puts things, in data coordinates: each rank's centre, each node's box
    ``(x0, y0, width, height)``, the switch's centre, the drawing's width and height, a node's height."""

    ranks: dict[int, tuple[float, float]]
    boxes: list[tuple[float, float, float, float]]
    switch: tuple[float, float]
    width: float
    height: float
    node_h: float


def _fonts() -> AbstractContextManager[None]:
    from matplotlib import rc_context

    from ...views import matplotlib_fonts
    return rc_context({"font.family": matplotlib_fonts()})


#: The ranks' fills: Okabe-Ito's hues lightened for black labels (as collnb's heatmaps colour ranks).
_RANK_FILLS = ["#8FC1E3", "#F3CB7A", "#7FCCB3", "#EEA47F", "#B3DDF4", "#E3B5D0", "#F6EFA0", "#CCCC8A"]


def _rank_rgb(rank: int) -> str:
    return _RANK_FILLS[rank % len(_RANK_FILLS)]


def _shape(c: ClusterShape) -> tuple[int, int]:
    return int(c.nodes), int(c.ranks_per_node)


def _link_words(c: ClusterShape) -> tuple[str, str]:
    inter = str(getattr(c, "inter", "")) or _("inter-node link")
    intra = getattr(c, "intra", None)
    intra_s = str(intra) if intra is not None and getattr(intra, "gbps", None) else _("loopback")
    return inter, intra_s


def _positions(N: int, L: int) -> _Layout:
    """Rank centres, node boxes and the switch in data coordinates (one unit per rank slot)."""
    cols = min(L, 4)
    rows = math.ceil(L / cols)
    node_w, node_h = cols * 1.0 + 0.6, rows * 1.0 + 0.9
    gap = 0.8
    ranks: dict[int, tuple[float, float]] = {}
    boxes: list[tuple[float, float, float, float]] = []
    for n in range(N):
        x0 = n * (node_w + gap)
        boxes.append((x0, 0.0, node_w, node_h))
        for l in range(L):
            r, c = divmod(l, cols)
            ranks[n * L + l] = (x0 + 0.8 + c * 1.0, node_h - 1.0 - r * 1.0)
    width = N * node_w + (N - 1) * gap
    return _Layout(ranks=ranks, boxes=boxes, switch=(width / 2, node_h + 1.6), width=width,
                   height=node_h + 2.2, node_h=node_h)


def _draw_cluster(ax: Axes, c: ClusterShape, transfers: Sequence[Arrow] | None = None,
                  max_bytes: float | None = None) -> None:
    from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch
    N, L = _shape(c)
    pos = _positions(N, L)
    inter, intra = _link_words(c)
    sx, sy = pos["switch"]
    centres = [x0 + w / 2 for x0, _y, w, _h in pos["boxes"]]
    sw = max(2.4, centres[-1] - centres[0] + 1.2)
    ax.add_patch(FancyBboxPatch((sx - sw / 2, sy - 0.3), sw, 0.6, boxstyle="round,pad=0.05", fc=_SWITCH_FILL,
                                ec="#555555", lw=1.0))
    ax.text(sx, sy, _("switch"), ha="center", va="center", fontsize=9)
    for n, (x0, y0, w, h) in enumerate(pos["boxes"]):
        ax.add_patch(FancyBboxPatch((x0, y0), w, h, boxstyle="round,pad=0.05", fc=_NODE_FILL, ec="#444444", lw=1.2))
        ax.text(x0 + 0.12, y0 + 0.12, _("node {n}").format(n=n) + "  ·  " + intra, ha="left", va="bottom",
                fontsize=8, color="#333333")
        ax.plot([x0 + w / 2, x0 + w / 2], [y0 + h + 0.05, sy - 0.3], color=INTER_COLOR, lw=2.5, ls="--",
                solid_capstyle="butt", zorder=1)
        ax.text(x0 + w / 2 + 0.08, (y0 + h + sy - 0.3) / 2, inter, ha="left", va="center", fontsize=8,
                color=INTER_COLOR)
    for r, (x, y) in pos["ranks"].items():
        ax.add_patch(Circle((x, y), 0.32, fc=_rank_rgb(r), ec="#222222", lw=1.0, zorder=3))
        ax.text(x, y, str(r), ha="center", va="center", fontsize=11, zorder=4)
    if transfers:
        top = max_bytes or max((t[2] for t in transfers), default=1.0) or 1.0
        seen: dict[tuple[int, int], int] = {}
        for src, dst, nb, _reduce in transfers:
            (x0, y0), (x1, y1) = pos["ranks"][src], pos["ranks"][dst]
            inter_t = src // L != dst // L
            k = seen.get((min(src, dst), max(src, dst)), 0)
            seen[(min(src, dst), max(src, dst))] = k + 1
            # arcs bow upward (towards the switch for inter-node transfers); the two directions of
            # one pair bow by different amounts so that both arrows show
            bend = -((0.42 if src < dst else 0.28) if inter_t else (0.55 if src < dst else 0.35)) \
                * (1 if src < dst else -1) - 0.1 * k
            width = 1.0 + 4.0 * (nb / top)
            ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), connectionstyle=f"arc3,rad={bend}",
                                         arrowstyle="-|>,head_length=6,head_width=4", shrinkA=12, shrinkB=12,
                                         color=INTER_COLOR if inter_t else INTRA_COLOR, lw=width,
                                         ls="--" if inter_t else "-", zorder=2, alpha=0.9))
    ax.set_xlim(-0.4, pos["width"] + 0.4)
    ax.set_ylim(-0.5, pos["height"])
    ax.set_aspect("equal")
    ax.axis("off")


def _legend(fig: Figure) -> None:
    from matplotlib.lines import Line2D
    fig.legend(handles=[Line2D([], [], color=INTRA_COLOR, lw=2.5, label=_("inside a node (intra-node tier)")),
                        Line2D([], [], color=INTER_COLOR, lw=2.5, ls="--", label=_("between nodes (inter-node tier)"))],
               loc="upper center", fontsize=8, frameon=False, ncol=2, bbox_to_anchor=(0.5, 0.95))


def as_image(fig: Figure) -> Image:
    """A matplotlib figure as an :class:`IPython.display.Image` (PNG), to show in a notebook cell
    (a figure made without pyplot is not drawn by itself)."""
    from IPython.display import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return Image(data=buf.getvalue(), format="png")


def cluster_figure(c: ClusterShape, *, dpi: int = 90) -> Figure:
    """The cluster as a picture: a box per node with its ranks (in their rank colours), each
    node's link to the switch labelled with the inter-node rate, the intra-node tier named in the
    box. ``c``: a :class:`~collnb.labs.cluster.Cluster` (or anything with ``nodes``,
    ``ranks_per_node``, ``inter``, ``intra``, ``mode``). Returns a matplotlib Figure (Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    with _fonts():
        N, L = _shape(c)
        pos = _positions(N, L)
        fig = Figure(figsize=(max(5.0, 1.25 * pos["width"]), 1.1 * pos["height"] + 0.7), dpi=dpi)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0.02, 0.02, 0.96, 0.8))
        _draw_cluster(ax, c)
        mode = getattr(c, "mode", "emulated")
        words = {"emulated": _("emulated: one network namespace per node, links shaped with tbf"),
                 "modelled": _("modelled: timings are the two-tier model's (predicted)"),
                 "real": _("real: ipyparallel engines, one node per host")}.get(mode, mode)
        fig.suptitle(_("{N} nodes x {L} ranks · {words}").format(N=N, L=L, words=words), fontsize=10, y=0.97)
        return fig


def cluster_png(c: ClusterShape) -> bytes:
    """:func:`cluster_figure` as PNG bytes (what a :class:`Cluster` shows in a notebook)."""
    buf = io.BytesIO()
    cluster_figure(c).savefig(buf, format="png")
    return buf.getvalue()


def _round_transfers(trace: Trace, k: int) -> list[Arrow]:
    return [(t.src, t.dst, float(t.nbytes or 0), t.reduce) for t in trace.rounds[k - 1].transfers]


def _cluster_of(trace: Trace, cluster: ClusterShape | None = None) -> ClusterShape:
    if cluster is not None:
        if (cluster.nodes * cluster.ranks_per_node, cluster.ranks_per_node) != (trace.world_size, trace.ranks_per_node):
            raise ValueError(_("this trace ran on {ws} ranks, {L} per node; the cluster given has {nodes} nodes of "
                               "{cl_L}: pass the cluster it ran on, or none").format(
                ws=trace.world_size, L=trace.ranks_per_node, nodes=cluster.nodes, cl_L=cluster.ranks_per_node))
        return cluster
    info = trace.meta.get("cluster") or {}
    L = trace.ranks_per_node or trace.world_size

    class _Shape:
        nodes = trace.world_size // L
        ranks_per_node = L
        inter = info.get("inter", "")
        intra = None
        mode = info.get("mode", "emulated")
    return _Shape()


def _check_trace(trace: object) -> None:
    """TypeError unless ``trace`` is a :class:`collnb.Trace` (a RunResult or None raised AttributeError)."""
    from ...algorithms import Trace as TraceType  # noqa: PLC0415
    if not isinstance(trace, TraceType):
        raise TypeError(_("this takes a collnb.Trace, as collnb.labs.cluster.run_algorithm returns; got {type}").format(
            type=type(trace).__name__))


def round_figure(trace: Trace, k: int, *, model: TierModel | None = None, cluster: ClusterShape | None = None,
                 dpi: int = 90) -> Figure:
    """Round ``k`` (1-based) of ``trace`` on its cluster: every transfer an arrow from sender to
    receiver, green inside a node, vermilion (dashed) between nodes, as wide as its bytes; under
    it every round's time, measured (``trace``'s) beside the two-tier ``model``'s (a
    :class:`TierModel`), this round marked.

    Raises:
        ValueError: the trace has no node map (``trace.ranks_per_node`` is ``None``: run it with
            ``ranks_per_node=`` or on a cluster), or ``k`` outside 1..rounds.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    _check_trace(trace)
    if trace.ranks_per_node is None:
        raise ValueError(_("this trace has no node map: run it with ranks_per_node= (or on a cluster) to colour its "
                           "transfers by tier"))
    if not (isinstance(k, int) and 1 <= k <= trace.n_rounds):
        raise ValueError(_("round must be an int from 1 to {n}; got {value!r}").format(n=trace.n_rounds, value=k))
    c = _cluster_of(trace, cluster)
    N, L = _shape(c)
    top = max((float(t.nbytes or 0) for rnd in trace.rounds for t in rnd.transfers), default=1.0)
    with _fonts():
        pos = _positions(N, L)
        width = max(6.0, 1.25 * pos["width"])
        fig = Figure(figsize=(width, 1.1 * pos["height"] + 2.6), dpi=dpi)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0.02, 0.32, 0.96, 0.56))
        _draw_cluster(ax, c, _round_transfers(trace, k), top)
        _legend(fig)
        rnd = trace.rounds[k - 1]
        inter_b = sum(t.nbytes or 0 for t in rnd.transfers if t.src // L != t.dst // L)
        fig.suptitle(_("{primitive} · {algorithm} · round {k}/{n}: {label} — {inter} cross nodes").format(
            primitive=trace.primitive, algorithm=trace.algorithm, k=k, n=trace.n_rounds, label=rnd.label,
            inter=format_bytes(inter_b)), fontsize=10, y=0.985)
        _round_bars(fig.add_axes((0.09, 0.07, 0.88, 0.2)), trace, k, model)
        return fig


def _round_bars(ax: Axes, trace: Trace, k: int, model: TierModel | None) -> None:
    from ...algorithms import tier_round_costs
    n = trace.n_rounds
    xs = np.arange(1, n + 1)
    measured = [r.seconds for r in trace.rounds]
    has_measured = all(s is not None for s in measured) and trace.meta.get("cluster", {}).get("mode") != "modelled"
    pred = tier_round_costs(trace, model.two_tier) if model is not None else None
    w = 0.38
    if has_measured:
        ax.bar(xs - w / 2, [s * 1e3 for s in measured if s is not None], w, color="#555555", label=_("measured"))
    if pred is not None:
        ax.bar(xs + (w / 2 if has_measured else 0), pred * 1e3, w, color="#56B4E9", label=_("predicted (two-tier model)"))
    ax.axvspan(k - 0.5, k + 0.5, color="#F0E442", alpha=0.35, zorder=0)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(i) for i in xs], fontsize=8)
    ax.set_ylabel(_("ms per round"), fontsize=8)
    ax.tick_params(labelsize=8)
    if has_measured or pred is not None:  # neither (a modelled run, no model): no legend, no warning of matplotlib's
        ax.legend(fontsize=7, frameon=False, loc="upper right")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def tier_filmstrip(trace: Trace, path: str | os.PathLike[str], *, model: TierModel | None = None,
                   cluster: ClusterShape | None = None, columns: int = 2, dpi: int = 70) -> str:
    """Every round of ``trace`` as :func:`round_figure` panels in one PNG at ``path`` (``.png``),
    ``columns`` per row. Returns ``path``. Raises as :func:`round_figure`; ValueError for a path
    that does not end with ``.png``."""
    from PIL import Image
    if not str(path).lower().endswith(".png"):
        raise ValueError(_("tier_filmstrip writes PNG: end the file name with .png; got {path!r}").format(path=str(path)))
    panels: list[PILImage.Image] = []
    for k in range(1, trace.n_rounds + 1):
        buf = io.BytesIO()
        round_figure(trace, k, model=model, cluster=cluster, dpi=dpi).savefig(buf, format="png")
        buf.seek(0)
        panels.append(Image.open(buf).convert("RGB"))
    if not panels:
        raise ValueError(_("this trace has no rounds to draw"))
    w, h = panels[0].size
    cols = max(1, min(columns, len(panels)))
    rows = math.ceil(len(panels) / cols)
    sheet = Image.new("RGB", (cols * w, rows * h), "white")
    for i, p in enumerate(panels):
        sheet.paste(p, ((i % cols) * w, (i // cols) * h))
    sheet.save(str(path))
    return str(path)


class TierReplay:
    """The player :func:`replay_tiers` returns: Play and a round slider over :func:`round_figure`.

    Attributes:
        trace, model, cluster: as given to :func:`replay_tiers`.
        play: ``ipywidgets.Play`` (1200 ms per round), jslink'd to ``slider``.
        slider: ``ipywidgets.IntSlider``, the round shown (1..n_rounds).
        image: ``ipywidgets.Image``, the round's figure as PNG.
        widget: the ``ipywidgets.VBox`` of the three.
        current_round: the round shown now (int).

    Displayed in a notebook it shows, like :func:`collnb.replay`'s player, a static picture of the
    round shown above the live panel (kept current, hidden while the panel is live), so that the
    book and a saved notebook show the round, not the panel's repr
    (:func:`collnb.views.static.static_bundle`).
    """

    def __init__(self, trace: Trace, model: TierModel | None = None, cluster: ClusterShape | None = None) -> None:
        import ipywidgets as w  # noqa: PLC0415 - ipywidgets only where a player is made
        _check_trace(trace)
        if trace.ranks_per_node is None:
            raise ValueError(_("this trace has no node map: run it with ranks_per_node= (or on a cluster) to colour "
                               "its transfers by tier"))
        self.trace, self.model, self.cluster = trace, model, cluster
        self.display_ids: list[str] = []
        self._png: dict[int, bytes] = {}
        last = max(1, trace.n_rounds)
        self.image = w.Image(format="png")
        self.slider = w.IntSlider(value=1, min=1, max=last, description=_("round"))
        self.play = w.Play(value=1, min=1, max=last, interval=1200)
        self.link = w.jslink((self.play, "value"), (self.slider, "value"))
        self.play.observe(self._on_play, "value")
        self.slider.observe(lambda change: self.show_round(int(change["new"])), "value")
        self.widget = w.VBox([w.HBox([self.play, self.slider]), self.image])
        self.widget.add_class("collnb-live")  # hides the static picture while the panel is live
        self.current_round = 1
        self.show_round(1)

    def _on_play(self, change: Any) -> None:
        # jslink keeps them in step in a browser; without one (tests, an export) do it here
        if self.slider.value != change["new"]:
            self.slider.value = change["new"]

    def png(self, k: int) -> bytes:
        """Round ``k``'s figure (:func:`round_figure`) as PNG bytes, drawn once."""
        if k not in self._png:
            buf = io.BytesIO()
            round_figure(self.trace, k, model=self.model, cluster=self.cluster).savefig(buf, format="png")
            self._png[k] = buf.getvalue()
        return self._png[k]

    def show_round(self, k: int) -> None:
        """Show round ``k`` (1..n_rounds), as dragging the slider does."""
        self.current_round = int(k)
        if self.slider.value != self.current_round:
            self.slider.value = self.current_round  # its observer comes back here
            return
        self.image.value = self.png(self.current_round)
        from ...views import update_static  # noqa: PLC0415
        update_static(self.display_ids, self.static_bundle)

    def static_bundle(self) -> dict[str, Any]:
        """The round shown as a static display bundle (:func:`collnb.views.static.static_bundle`)."""
        from ...views import captioned_png, rerun_line, static_bundle  # noqa: PLC0415
        png, t, k = self.png(self.current_round), self.trace, self.current_round
        alt = _("{primitive} / {algorithm} at world size {world_size}, round {round} of {n_rounds}").format(
            primitive=t.primitive, algorithm=t.algorithm, world_size=t.world_size, round=k, n_rounds=t.n_rounds)
        return dict(static_bundle(png, "replay", alt=alt, png_with_line=captioned_png(png, rerun_line("replay")),
                                  attrs=dict(round=k, n_rounds=t.n_rounds, world_size=t.world_size)))

    def _ipython_display_(self) -> None:
        from IPython.display import display  # noqa: PLC0415

        from ...views import live_bundle  # noqa: PLC0415
        did = f"collnb-tier-replay-{id(self):x}-{len(self.display_ids)}"
        self.display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        t = self.trace
        display(live_bundle(self.widget, _("replay of {primitive} / {algorithm} at world size {world_size}").format(
            primitive=t.primitive, algorithm=t.algorithm, world_size=t.world_size)), raw=True)


def replay_tiers(trace: Trace, model: TierModel | None = None, cluster: ClusterShape | None = None) -> TierReplay:
    """A player for ``trace`` on its cluster: a round slider with Play, and :func:`round_figure`
    of the round shown (ipywidgets). Returns the :class:`TierReplay` (displays itself, with a static
    picture of the round shown for pages without a kernel). Raises ValueError for a trace without a
    node map, else as :func:`round_figure`."""
    return TierReplay(trace, model, cluster)


#: Okabe-Ito's colours (colour-blind safe), one per algorithm.
_LINE_COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]


class TimingLike(Protocol):
    """What :func:`comparison_figure` reads of a :class:`~.compare.AlgorithmTiming` (a protocol: :mod:`.compare`
    draws with this module, so this one does not import it)."""

    @property
    def algorithm(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def seconds(self) -> float | None: ...
    @property
    def predicted_s(self) -> float: ...


class ComparisonLike(Protocol):
    """What :func:`comparison_figure` reads of a :class:`~.compare.Comparison`."""

    @property
    def primitive(self) -> str: ...
    @property
    def rows(self) -> Sequence[TimingLike]: ...
    @property
    def model(self) -> TierModel: ...
    @property
    def timings(self) -> str: ...
    @property
    def cluster(self) -> str: ...
    @property
    def predicted_crossovers(self) -> Sequence[tuple[str, str, float]]: ...
    @property
    def algorithms(self) -> list[str]: ...
    @property
    def sizes(self) -> list[int]: ...


def comparison_figure(cmp: ComparisonLike, *, dpi: int = 90) -> Figure:
    """:class:`~collnb.labs.cluster.compare.Comparison` as a figure. Left: time per size (log-log)
    of every algorithm, measured (solid, points) and the two-tier model's (dashed, on a fine grid);
    right: each algorithm's speed-up over the flat ring (the ring's time over its own), measured
    (points) and predicted (dashed): where the model says a tier-aware algorithm wins, and by how
    much. On a modelled cluster only the predictions."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    with _fonts():
        fig = Figure(figsize=(11.0, 4.6), dpi=dpi)
        FigureCanvasAgg(fig)
        ax, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        sizes = cmp.sizes
        lo, hi = min(sizes), max(sizes)
        grid = np.geomspace(lo, hi, 48) if hi > lo else np.array([lo])
        measured = cmp.timings == "measured"
        ring = {r.nbytes: r for r in cmp.rows if r.algorithm == "ring"}
        ring_pred = [cmp.model.predict(cmp.primitive, "ring", m) for m in grid] if "ring" in cmp.algorithms else None
        for i, a in enumerate(cmp.algorithms):
            color = _LINE_COLORS[i % len(_LINE_COLORS)]
            rows = sorted((r for r in cmp.rows if r.algorithm == a), key=lambda r: r.nbytes)
            pred = [cmp.model.predict(cmp.primitive, a, m) for m in grid]
            if measured:
                ax.plot([r.nbytes for r in rows], [_measured_s(r) * 1e3 for r in rows], "o-", color=color, lw=1.8, label=a)
            ax.plot(grid, [p * 1e3 for p in pred], "--", color=color, lw=1.2, label=None if measured else a)
            if ring_pred is not None:
                ax2.plot(grid, [r / p for r, p in zip(ring_pred, pred)], "--", color=color, lw=1.2,
                         label=None if measured else a)
                if measured:
                    pts = [(r.nbytes, _measured_s(ring[r.nbytes]) / _measured_s(r)) for r in rows if r.nbytes in ring]
                    ax2.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, lw=1.0, label=a)
        for _a, _b, m in cmp.predicted_crossovers:
            ax.axvline(m, color="#999999", lw=0.8, ls=":")
        for axis in (ax, ax2):
            axis.set_xscale("log", base=2)
            axis.set_xlabel(_("bytes per rank"))
            axis.xaxis.set_major_formatter(_bytes_formatter())
            axis.grid(True, which="major", alpha=0.3)
            axis.legend(fontsize=7, frameon=False, ncol=2)
        ax.set_yscale("log")
        ax.set_ylabel(_("time (ms)"))
        ax2.axhline(1.0, color="#444444", lw=0.8)
        ax2.set_ylabel(_("speed-up over the flat ring"))
        ax.set_title(_("{primitive} on {cluster}").format(primitive=cmp.primitive, cluster=cmp.cluster), fontsize=9)
        ax2.set_title(_("solid: measured; dashed: the two-tier model") if measured else
                      _("the two-tier model's prediction (modelled cluster)"), fontsize=9)
        fig.tight_layout()
        return fig


def _measured_s(r: TimingLike) -> float:
    assert r.seconds is not None  # a measured comparison's rows all have their seconds
    return r.seconds


def _bytes_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _pos: format_bytes(v, compact=True) if v >= 1 else "")
