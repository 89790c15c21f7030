"""Layer 4, views: what a learner sees. Rank-by-chunk heatmaps of a run (:mod:`.heatmap`, content in
:mod:`.grid`), round-by-round replays of a :class:`collnb.Trace` (:mod:`.replay`, frames in
:mod:`.frames` and :mod:`.round_heatmap`, players in :mod:`.players`, the comparison chart in
:mod:`.comparison`) and the explorers that re-run a primitive, an algorithm or a redistribute on real ranks as a control
moves (:mod:`.explorer`, :mod:`.rounds_explorer`, :mod:`.redistribute_explorer`), every one a
:class:`Binder`, the one explorer engine (:mod:`.binder`: the contract a new explorer follows, its
latest-request-wins :mod:`.worker`, status line and static picture), and the
collectives a launch recorded, step by step (:mod:`.calls`), a launch's per-rank timeline as a
Gantt chart (:mod:`.timeline`). All
pictures are painted by one raster engine (:mod:`.raster`) in one palette (:mod:`.palette`), values
written by one formatter (:mod:`.values`; bytes and seconds by :mod:`collnb.units`).

Other layers import from this package only, never from its modules. Its names load from their modules on
first use (:mod:`collnb.lazy`), except the two that register how results draw themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

# Loaded now: the modules that register how a result draws itself (a RunResult's heatmap, a
# RedistributeResult's picture). Every other name loads from its module on first use (PEP 562), so the
# first picture of collnb.run does not wait for ipywidgets, the explorers or the replays.
from . import heatmap, redistribute  # noqa: F401  - registrations
# The function replay, bound now: a later `import collnb.views.replay` would otherwise leave the module
# of that name where the lazy function belongs (no ipywidgets: players import it only to make a widget).
from .replay import replay

if TYPE_CHECKING:  # what __getattr__ loads, for readers and type checkers
    from .binder import Binder, Picture
    from .calls import CallsView, call_counts, call_steps, calls_image, calls_png, calls_text
    from .explorer import explore
    from .heatmap import heatmap_figure, heatmap_image, heatmap_png
    from .matrix import MatrixPanel, MatrixPicture, matrix_image
    from .mesh import MeshLegendLine, mesh_traffic_image
    from .raster import CjkFontMissing, matplotlib_fonts
    from .redistribute import predict_steps, redistribute_image, redistribute_png, redistribute_text
    from .redistribute_explorer import explore_redistribute
    from .replay import FPS_RANGE, compare, compare_figure, replay, save_filmstrip, save_gif
    from .rounds_explorer import explore_rounds
    from .static import captioned_png, live_bundle, rerun_line, static_bundle, update_static
    from .timeline import timeline_image, timeline_png

#: Public name -> the module it is loaded from.
_WHERE = {
    **dict.fromkeys(("CallsView", "call_counts", "call_steps", "calls_image", "calls_png", "calls_text"), ".calls"),
    **dict.fromkeys(("Binder", "Picture"), ".binder"), "explore": ".explorer",
    **dict.fromkeys(("heatmap_figure", "heatmap_image", "heatmap_png"), ".heatmap"),
    **dict.fromkeys(("MatrixPanel", "MatrixPicture", "matrix_image"), ".matrix"),
    **dict.fromkeys(("MeshLegendLine", "mesh_traffic_image"), ".mesh"),
    **dict.fromkeys(("CjkFontMissing", "matplotlib_fonts"), ".raster"),
    **dict.fromkeys(("predict_steps", "redistribute_image", "redistribute_png", "redistribute_text"), ".redistribute"),
    "explore_redistribute": ".redistribute_explorer",
    **dict.fromkeys(("timeline_image", "timeline_png"), ".timeline"),
    "explore_rounds": ".rounds_explorer",
    # a widget of a lab that shows a static picture where no kernel runs (the book, a saved notebook)
    **dict.fromkeys(("captioned_png", "live_bundle", "rerun_line", "static_bundle", "update_static"), ".static"),
    **dict.fromkeys(("FPS_RANGE", "compare", "compare_figure", "replay", "save_filmstrip", "save_gif"),
                    ".replay"),
}

__all__ = ["CallsView", "call_steps", "call_counts", "calls_text", "calls_image", "calls_png", "explore", "heatmap_figure", "heatmap_image", "heatmap_png", "replay", "explore_rounds",
           "compare", "compare_figure", "save_gif", "save_filmstrip", "MatrixPanel", "MatrixPicture", "matrix_image",
           "redistribute_image", "redistribute_png", "redistribute_text", "predict_steps", "explore_redistribute",
           "timeline_image", "timeline_png", "FPS_RANGE", "Binder", "Picture", "matplotlib_fonts", "CjkFontMissing",
           "mesh_traffic_image", "MeshLegendLine", "captioned_png", "live_bundle", "rerun_line", "static_bundle",
           "update_static"]  # FPS_RANGE: for the command line (collnb.cli.replay)

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE)
