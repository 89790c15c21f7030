"""Layer 3, algorithms: collective algorithms (ring, tree, recursive doubling, pairwise, ...) as
round-by-round schedules (:mod:`.schedules`, :mod:`.builders`, :mod:`.rounds`), run on real ranks
with point-to-point sends (:mod:`.execution` inside a rank, :mod:`.run` from the caller), recorded
as a :class:`Trace` (:mod:`.trace`), and priced by the alpha-beta model (:mod:`.costmodel`).

The schedules, the trace and the cost model import no torch, so ``import collnb.algorithms``,
:meth:`Trace.load` and :func:`predict` need only numpy. The names that run on ranks
(:func:`run_algorithm`, :func:`execute`, :func:`all_reduce`, ...) are loaded, with torch, the first
time they are used (PEP 562 module ``__getattr__``).

Other layers import from this package only, never from its modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from . import costmodel
from .costmodel import (BUILTIN_FORM, DEFAULT_MODEL, CostModel, TierPrediction, TwoTier, algbw, busbw, busbw_factor,
                        closed_form, crossovers, fit_each, inter_node_bytes, predict, predict_tiers, round_costs,
                        tier_round_costs)
from .rounds import Round, Schedule, Transfer
from .schedules import (ALGORITHM_NAMES, ALGORITHMS, PRIMITIVES, TIERED_ALGORITHMS, algorithms_for, cached_schedule,
                        check_algorithm, chunk_bounds, default_algorithm, is_tiered, schedule)
from .tiers import tier_of
from .trace import TRACE_FORMAT_VERSION, RoundRecord, Trace

if TYPE_CHECKING:  # what __getattr__ loads, for readers and type checkers
    from .execution import all_reduce, execute, snapshots
    from .run import (AlgorithmConfig, RunOptions, builtin_result, make_trace, prepare_case, rank_run_cases,
                      run_algorithm, run_algorithms, start_buffer, teaching_buffers)

#: Names that need torch -> the module of this package that defines them (loaded on first use).
_LAZY = {**dict.fromkeys(("execute", "snapshots", "all_reduce"), ".execution"),
         **dict.fromkeys(("run_algorithm", "run_algorithms", "prepare_case", "teaching_buffers", "builtin_result",
                          "start_buffer", "rank_run_cases", "make_trace", "RunOptions", "AlgorithmConfig"), ".run")}

__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "PRIMITIVES", "Transfer", "Round", "Schedule", "schedule",
           "cached_schedule", "check_algorithm", "algorithms_for", "default_algorithm", "chunk_bounds",
           "run_algorithm", "run_algorithms", "prepare_case", "teaching_buffers", "builtin_result", "start_buffer",
           "rank_run_cases", "make_trace", "execute", "snapshots",
           "all_reduce", "Trace", "RoundRecord", "TRACE_FORMAT_VERSION", "CostModel", "DEFAULT_MODEL", "predict",
           "closed_form", "round_costs", "algbw", "busbw", "busbw_factor", "BUILTIN_FORM", "fit_each",
           "crossovers", "costmodel", "TIERED_ALGORITHMS", "is_tiered", "tier_of", "TwoTier", "TierPrediction",
           "predict_tiers", "tier_round_costs", "inter_node_bytes", "RunOptions", "AlgorithmConfig"]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)  # a name that runs on ranks loads on first use
