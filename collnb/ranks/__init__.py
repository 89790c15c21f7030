"""Layer 1, ranks: start real ranks from a Python process or a Jupyter kernel and run a function
on them (:func:`launch`), on this machine or on ipyparallel engines (:mod:`collnb.ranks.remote`).

Other layers import from this package only, never from its modules. Inside it:

==========================  =====================================================================
``launcher``                :func:`launch`, :func:`shutdown`, :func:`backend_info`, request checks
``pool``                    :class:`RankPool`: the warm rank processes, one call run on them
``rank``                    the rank side: a rank process's main loop
``rank_state``              a warm rank as clean as a fresh script: state put back after each call
``state_probes``            reading that state cheaply (dict version tags, random generators' positions)
``protocol``                the messages between the launcher and its ranks
``serialization``           how functions, arguments and results travel (:func:`dumps`/:func:`loads`)
``output``                  the ranks' output lines in the cell, C++ log lines held back
``failures``                the root-cause rank and the :class:`RankError` a learner reads
``errors``                  :class:`LaunchError`, :class:`RankError`, :class:`LaunchTimeout`
``tracebacks``              a rank's traceback with the learner's frames only
``processes``               process life: watchdog, no orphans, stale directories
``recording``               every communication operation a rank issues (:class:`CallRecord`)
``timeline``                per-rank timelines on one clock (:class:`Timeline`, :func:`region`)
``flight_recorder``         reading torch's Flight Recorder entries: the rank whose collectives diverged
``_dist_hooks``             torch.distributed's functions wrapped inside a call: layouts, group timeouts
``_torch_internals``        every use of torch's private internals, each saying what public API is missing
``remote`` / ``engines``    ranks on ipyparallel engines: the kernel side / the engine side
==========================  =====================================================================
"""

from ..vocabulary import BACKENDS, MAX_WORLD_SIZE
from .instrument.recording import CallRecord, CallRecords
from .instrument.recording import active as active_recorder
from .instrument.timeline import Span, Timeline, region
from ._torch_internals import distributed_c10d, flight_recorder_dump, forget_logged_once
from .instrument.flight_recorder import Divergence, divergence, entries_from_json
from .errors import LaunchError, LaunchTimeout, RankError
from .launcher import LaunchOptions, backend_info, check_launch_options, check_ranks, launch, shutdown
from .rankset import BackendFacts
from .local.pool import LaunchResults, RankPool
from .local.rank import keep_groups, kept_groups, same_on_every_rank
from .remote.connection import connect, disconnect
from .serialization import dumps, loads
from .serialization import iter_functions

__all__ = ["launch", "shutdown", "backend_info", "LaunchError", "RankError", "LaunchTimeout",
           "LaunchResults", "CallRecord", "CallRecords", "MAX_WORLD_SIZE", "BACKENDS", "RankPool", "connect", "disconnect",
           "dumps", "loads", "distributed_c10d", "check_ranks", "iter_functions", "active_recorder",
           "Timeline", "Span", "region", "flight_recorder_dump", "forget_logged_once", "keep_groups", "kept_groups", "same_on_every_rank",
           "Divergence", "divergence", "entries_from_json", "LaunchOptions", "check_launch_options", "BackendFacts"]
