"""Layer 4, views: what a learner sees. Rank-by-chunk heatmaps (:mod:`collnb.views.heatmap`),
round-by-round replays of a :class:`collnb.Trace` (:mod:`collnb.views.replay`) and the widgets that
re-run a primitive or an algorithm as a control moves (:mod:`collnb.views.explorer`).

Other layers import from this package only, never from its modules.
"""

from .explorer import explore
from .heatmap import heatmap_figure, heatmap_image, heatmap_png
from .replay import (FPS_RANGE, _check_rate, compare, compare_figure, explore_rounds, replay, save_filmstrip,
                     save_gif)

__all__ = ["explore", "heatmap_figure", "heatmap_image", "heatmap_png", "replay", "explore_rounds",
           "compare", "compare_figure", "save_gif", "save_filmstrip"]
