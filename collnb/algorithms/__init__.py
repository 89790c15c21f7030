"""Layer 3, algorithms: collective algorithms (ring, tree, recursive doubling, pairwise, ...) as
round-by-round schedules, run on real ranks with point-to-point sends, recorded as a :class:`Trace`,
and priced by the alpha-beta model (:mod:`collnb.algorithms.costmodel`).

Other layers import from this package only, never from its modules.
"""

from . import costmodel
from .costmodel import (BUILTIN_FORM, DEFAULT_MODEL, CostModel, algbw, busbw, busbw_factor, crossovers,
                        fit_each, predict, round_costs)
from .schedules import (ALGORITHM_NAMES, ALGORITHMS, PRIMITIVES, Round, Schedule, Transfer,
                        _cached_schedule, _prepare_case, algorithms_for, all_reduce, chunk_bounds,
                        default_algorithm, execute, run_algorithm, run_algorithms, schedule, snapshots)
from .trace import Trace

__all__ = ["ALGORITHMS", "ALGORITHM_NAMES", "PRIMITIVES", "Transfer", "Round", "Schedule", "schedule",
           "algorithms_for", "default_algorithm", "run_algorithm", "run_algorithms", "execute", "snapshots",
           "all_reduce", "chunk_bounds", "Trace", "CostModel", "DEFAULT_MODEL", "predict", "algbw", "busbw",
           "costmodel"]
