"""collnb: teach PyTorch collective communication by running it on real ranks.

Start with :func:`launch` (run your own function on real ranks), :func:`run` (one primitive,
with before/after heatmaps) and :func:`explore` (sliders that re-run it on warm ranks).
"""

from .launcher import (BACKENDS, MAX_WORLD_SIZE, CallRecord, LaunchError, LaunchResults, LaunchTimeout,
                       RankError, backend_info, launch, shutdown)
from .primitives import (DTYPE_NAMES, PRIMITIVES, REDUCE_OPS, BackendSupport, RunResult,
                         backend_support, run, run_batch)
from .heatmap import heatmap_figure, heatmap_image, heatmap_png
from .explorer import explore
from . import seeds
from .algorithms import ALGORITHMS, run_algorithm, run_algorithms, schedule
from .trace import Trace
from .costmodel import CostModel, algbw, busbw, predict
from .replay import compare, compare_figure, explore_rounds, replay, save_filmstrip, save_gif

__version__ = "0.1.0"

__all__ = [
    "launch", "shutdown", "backend_info", "LaunchError", "RankError", "LaunchTimeout",
    "LaunchResults", "CallRecord",
    "MAX_WORLD_SIZE", "BACKENDS",
    "run", "run_batch", "RunResult", "PRIMITIVES", "REDUCE_OPS", "DTYPE_NAMES", "backend_support",
    "BackendSupport", "heatmap_figure", "heatmap_png", "heatmap_image",
    "explore",
    "ALGORITHMS", "run_algorithm", "run_algorithms", "schedule", "Trace",
    "CostModel", "algbw", "busbw", "predict",
    "replay", "explore_rounds", "compare", "compare_figure", "save_gif", "save_filmstrip",
]
