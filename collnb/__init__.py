"""collnb: teach PyTorch collective communication by running it on real ranks.

Start with :func:`launch` (run your own function on real ranks), :func:`run` (one primitive,
with before/after heatmaps) and :func:`explore` (sliders that re-run it on warm ranks).

The package is built in layers, each a folder that imports only from the ones before it:
:mod:`collnb.ranks` → :mod:`collnb.collectives` → :mod:`collnb.algorithms` → :mod:`collnb.views` →
:mod:`collnb.labs` → :mod:`collnb.cli`.
"""

from .ranks import (BACKENDS, MAX_WORLD_SIZE, CallRecord, LaunchError, LaunchResults, LaunchTimeout, RankError,
                    backend_info, connect, disconnect, launch, shutdown)
from .collectives import (DTYPE_NAMES, PRIMITIVES, REDUCE_OPS, BackendSupport, RunResult, backend_support, run,
                          run_batch)
from .algorithms import ALGORITHMS, CostModel, Trace, algbw, busbw, costmodel, predict, run_algorithm, \
    run_algorithms, schedule
from .views import (compare, compare_figure, explore, explore_rounds, heatmap_figure, heatmap_image, heatmap_png,
                    replay, save_filmstrip, save_gif)
from .labs import bench, examples, exercises  # collnb.bench.bench(...), collnb.exercises.check_...
from .labs import examples as seeds  # old name, until the examples rename lands
from .labs.script import to_script

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
    "connect", "disconnect", "to_script",
]
