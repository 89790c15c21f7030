"""collnb: teach PyTorch collective communication by running it on real ranks.

Start with :func:`launch` (run your own function on real ranks), :func:`run` (one primitive,
with before/after heatmaps) and :func:`explore` (sliders that re-run it on warm ranks).

The package is built in layers, each a folder that imports only from the ones before it:
:mod:`collnb.ranks` → :mod:`collnb.collectives`, :mod:`collnb.placements` → :mod:`collnb.algorithms` → :mod:`collnb.views` →
:mod:`collnb.labs` → :mod:`collnb.cli`.

``import collnb`` is cheap: every name below is loaded from its layer the first time it is used
(PEP 562 module ``__getattr__``), so a script that only loads a saved :class:`Trace` or asks the
cost model (:func:`predict`) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ loads, for readers and type checkers
    from .algorithms import (ALGORITHMS, CostModel, Trace, algbw, busbw, costmodel, predict, run_algorithm,
                             run_algorithms, schedule)
    from .collectives import (DTYPE_NAMES, PRIMITIVES, REDUCE_OPS, BackendSupport, RunResult, backend_support, run,
                              run_batch)
    from .labs import bench, examples, exercises
    from .labs.cluster import cluster, explain_nccl_tests
    from .placements import Placement, RedistributeResult, redistribute
    from .labs.script import to_script
    from .i18n import get_language, set_language
    from .health import doctor
    from .ranks import (BACKENDS, MAX_WORLD_SIZE, CallRecord, LaunchError, LaunchResults, LaunchTimeout, RankError,
                        Timeline, backend_info, connect, disconnect, launch, region, shutdown)
    # views.replay is a module and the function it exports under that name (mypy#5479 counts both)
    from .views import (compare, compare_figure, explore, explore_redistribute, explore_rounds, heatmap_figure, heatmap_image, heatmap_png,  # type: ignore[no-redef]
                        replay, save_filmstrip, save_gif, timeline_image, timeline_png)

__version__ = "0.1.0"

#: Public name -> the package (layer facade or module) it is taken from.
_WHERE = {
    **dict.fromkeys(("BACKENDS", "MAX_WORLD_SIZE", "CallRecord", "LaunchError", "LaunchResults", "LaunchTimeout",
                     "RankError", "backend_info", "connect", "disconnect", "launch", "shutdown", "region",
                     "Timeline"), ".ranks"),
    **dict.fromkeys(("DTYPE_NAMES", "PRIMITIVES", "REDUCE_OPS", "BackendSupport", "RunResult", "backend_support",
                     "run", "run_batch"), ".collectives"),
    **dict.fromkeys(("Placement", "RedistributeResult", "redistribute"), ".placements"),
    **dict.fromkeys(("ALGORITHMS", "CostModel", "Trace", "algbw", "busbw", "costmodel", "predict", "run_algorithm",
                     "run_algorithms", "schedule"), ".algorithms"),
    **dict.fromkeys(("explore_redistribute", "compare", "compare_figure", "explore", "explore_rounds", "heatmap_figure", "heatmap_image",
                     "heatmap_png", "replay", "save_filmstrip", "save_gif", "timeline_image", "timeline_png"), ".views"),
    **dict.fromkeys(("bench", "examples", "exercises"), ".labs"),  # collnb.bench.bench(...), collnb.exercises...
    **dict.fromkeys(("cluster", "explain_nccl_tests"), ".labs.cluster"),
    "to_script": ".labs.script",
    **dict.fromkeys(("get_language", "set_language"), ".i18n"),  # collnb.set_language("zh"): Chinese
    "doctor": ".health",  # collnb.doctor(): this install, for a bug report (also `python -m collnb doctor`)
}
#: Layers whose names return :class:`RunResult` objects: loading one also loads :mod:`collnb.views`, which
#: registers the heatmap a result draws itself with (collectives cannot import views: it is above them).
_DRAWS_RESULTS = (".collectives", ".placements", ".labs", ".labs.script")

#: Every public name, listed once (in _WHERE); the TYPE_CHECKING imports above repeat them for
#: type checkers, and tests/test_layers.py checks that the two agree.
__all__ = list(_WHERE)


def _load_views_first(module: str) -> None:
    if module in _DRAWS_RESULTS:
        importlib.import_module(".views", __name__)  # registers the heatmap that draws a RunResult


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, before=_load_views_first)

