"""Layer 1, ranks: start real ranks from a Python process or a Jupyter kernel and run a function
on them (:func:`launch`), on this machine or on ipyparallel engines (:func:`connect`).

Other layers import from this package only, never from its modules. Inside it:

=============================  ==================================================================
``launcher``                   :func:`launch`, :func:`shutdown`, :func:`backend_info`, the active rank set
``request``                    a request checked once where it enters (:class:`LaunchOptions`)
``rankset``                    the interface of a set of ranks; the request and the per-rank events
``local/``                     ranks forked here: the warm pool, its wait, output, process life, the rank
``remote/``                    ranks on ipyparallel engines: the kernel side and the engine side
``call/``                      one call on a rank, the steps local ranks and engines share; its groups
``instrument/``                what a call records: one interface (``interface``) over recording,
                               timelines, the Flight Recorder, the backend's log, torch.distributed's
                               wrappers and timeouts
``fresh/``                     a warm rank as clean as a fresh script, every call
``explain/``                   the root-cause rank and the :class:`RankError` a learner reads
``protocol``                   the messages between the launcher and its ranks
``serialization``              how functions, arguments and results travel (:func:`dumps`/:func:`loads`)
``errors``                     :class:`LaunchError`, :class:`RankError`, :class:`LaunchTimeout`
``_torch_internals``           every use of torch's private internals, each saying what public API is missing
=============================  ==================================================================

A new kind of rank set (ranks started elsewhere: another machine, a network namespace) implements
:class:`RankSet` (``where``, ``backend_info``, ``accept``, ``launch``), is made active with
:func:`use_rank_set`, and gets every instrument by running its ranks' calls through the same steps
(:mod:`.instrument.interface` says how).
"""

from ..vocabulary import BACKENDS, MAX_WORLD_SIZE
from ._torch_internals import distributed_c10d, flight_recorder_dump, forget_logged_once
from ._torch_internals import missing as missing_private_names  # collnb doctor
# torch's private names that the composed-parallelism lab needs (notebook 20), kept beside the others
from ._torch_internals import (ALL_TO_ALL_AUTOGRAD, DEBUG_MODE, SHARD_DIM_ALLTOALL, all_to_all_single_autograd,
                                debug_mode_class, flatten_mesh)
from .call.groups import keep_groups, kept_groups, same_on_every_rank
from .errors import LaunchError, LaunchTimeout, RankError
from .explain.tracebacks import is_comm_error
from .instrument.flight_recorder import Divergence, divergence, entries_from_json
from .instrument.interface import Instruments, LaunchResults, Recorded, Taking, launch_results
from .instrument.records import CallRecord, CallRecords
from .instrument.recording import active as active_recorder
from .instrument.timeline import Span, Timeline
from .instrument.tracks import region
from .launcher import (active_rank_set, backend_info, check_ranks, launch, launch_planned, on_shutdown, plan_launch,
                       shutdown, use_rank_set)
from .local.pool import RankPool
from .local.rankset import warm_pool
from .rankset import BackendFacts, LaunchPlan, LaunchRequest, RankSet, RankSetup
from .remote.connection import connect, connected_hosts, disconnect
from .request import LaunchOptions, check_launch_options
from .serialization import code_files, dumps, iter_functions, loads
# What a rank set of another layer (collnb.labs.cluster's network namespaces) takes to give its ranks
# every instrument (.instrument.interface's docstring says how): a call's steps on a rank and what the
# rank answers; the launcher's reading of the answers, the ranks' stacks and the backend's log.
from .call.groups import runs_unwrapped, unwrapped_group
from .call.steps import Call, failure, resolve_rank_names, restore_environment
from .explain.failures import conclude
from .explain.tracebacks import named_cells, parse_stack, wait_for_stacks
from .fresh.rank_state import RankState
from .local.processes import mark_up, wait_until_up
from .instrument.backend_log import BackendLog
from .instrument.backend_log import attach as attach_backend_log
from .protocol import Failed, Result, Run
from .rankset import RankEvent, RankExit, RankFailure, RankResult

__all__ = ["launch", "shutdown", "backend_info", "LaunchError", "RankError", "LaunchTimeout",
           "LaunchResults", "CallRecord", "CallRecords", "MAX_WORLD_SIZE", "BACKENDS", "RankPool", "connect", "disconnect",
           "dumps", "loads", "distributed_c10d", "check_ranks", "iter_functions", "active_recorder",
           "Timeline", "Span", "region", "flight_recorder_dump", "forget_logged_once", "keep_groups", "kept_groups", "same_on_every_rank",
           "Divergence", "divergence", "entries_from_json", "LaunchOptions", "check_launch_options", "BackendFacts",
           "missing_private_names", "flatten_mesh", "all_to_all_single_autograd", "debug_mode_class",
           "SHARD_DIM_ALLTOALL", "ALL_TO_ALL_AUTOGRAD", "DEBUG_MODE",
           "plan_launch", "launch_planned", "LaunchPlan", "LaunchRequest", "RankSetup", "RankSet", "use_rank_set",
           "active_rank_set", "warm_pool", "Instruments", "Recorded", "Taking", "launch_results", "is_comm_error",
           "on_shutdown", "connected_hosts", "code_files", "Call", "failure", "resolve_rank_names",
           "restore_environment", "conclude", "named_cells", "parse_stack", "wait_for_stacks", "mark_up",
           "wait_until_up", "RankState", "BackendLog", "attach_backend_log", "Failed", "Result", "Run", "RankEvent", "RankExit", "RankFailure",
           "RankResult", "runs_unwrapped", "unwrapped_group"]
