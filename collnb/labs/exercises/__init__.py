"""Exercise checks for the notebooks: they pass only for work the learner did, on real ranks.

Every notebook's ``check`` cell calls one function of this module with the learner's answer (a
function or a prediction). A check

* runs the learner's function on real ranks (:func:`collnb.launch`) with **data only its source
  rank knows** (random per launch), at **varied world sizes**, so an answer that computes the
  result locally, or from a token collective beside it, cannot pass;
* sees **every operation** each rank issued, whichever API issued it (``torch.distributed``
  functions, ``ProcessGroup`` methods, functional collectives, DTensor: :class:`collnb.CallRecord`,
  recorded by ``collnb.launch(..., record_calls=True)``), refuses a rank that communicated where
  the recorder cannot see (another thread, dispatch modes switched off), refuses calls the
  exercise does not ask for ("build it from X"), and checks message sizes where the exercise is
  about them (a ring step moves one chunk);
* prints ``✓`` only when the learner's own answer passed. While the answer is unfinished (the
  function still returns ``None`` and communicates nothing, or ``prediction`` is ``None``) the
  check says "not answered yet" and gives a hint that points a direction: no solution value, no
  solution code. The solution is in the notebook's collapsed ``solution`` cell, as comments:
  opening it is the learner's own step, and running it defines nothing an answer could use;
* on a wrong answer raises :class:`CheckFailed`: in Jupyter a formatted ``✗`` with a per-rank table
  and a hint about that mistake, no traceback (IPython renders the exception with
  ``_render_traceback_``); a prediction's ✗ never states the right value; a test still sees an
  error.

Example (the check cell of ``01_broadcast``)::

    from collnb import exercises
    exercises.check_broadcast(my_broadcast)

Writing a new check: :func:`.framework.check` is the frame every check of the learner's code
shares (its signature checked, "not answered yet" for a stub, each :class:`.framework.Case`
launched with every call recorded, each :class:`.framework.Trial` handed to the check's judge, ✓ at
the end); the check itself is a generator of cases, a judge that raises
:meth:`.framework.Trial.fail` on the first thing wrong, and the texts.
:func:`.framework.check_prediction` is the frame of a predicted value. :mod:`.framework`'s docstring
lists its public API (``from .framework import check, Case, Trial``) with a complete example; every
module below uses only that API. The framework is for writing checks; a notebook calls the checks.

Modules: :mod:`.framework` (running on ranks with every operation recorded, grouped into the
learner's calls; ✓, ✗ and "not answered yet"; the public API above), :mod:`.coding` (checks of code the learner writes),
:mod:`.predictions` (checks of predicted values), :mod:`.training` (notebook 11), :mod:`.dtensor`
(notebook 12: placements and DTensor's redistribute), :mod:`.parallel` (notebooks 13-15), :mod:`.pipeline`
(notebook 16), :mod:`.overlap`
(notebook 17: an all_reduce overlapped with compute, measured on the timeline), :mod:`.hangs` (notebook 18: the
culprit of a hang, read from the Flight Recorder; a step whose ranks hang, fixed) and :mod:`.composed` (notebook 20: parallelisms composed on one
DeviceMesh).
"""

from ...ranks import CallRecord
from .coding import (check_all_gather, check_broadcast, check_census, check_count_ready, check_gather,
                     check_ring_step, check_token_ring)
from .composed import check_compose, check_tp_placement
from .dtensor import check_collective_prediction, check_dp_tp_matmul, check_dp_tp_placements, check_partial_to_row_shards
from .framework import NOT_ANSWERED, CheckFailed, launch_recorded, solution_code
from .hangs import Mystery, check_hang_culprit, check_hang_fix, hang_mystery
from .overlap import check_overlapped_all_reduce
from .parallel import (check_fsdp_prefetch, check_kv_ring_pass, check_online_softmax, check_tensor_parallel_backward,
                       check_tensor_parallel_mlp)
from .pipeline import check_pipeline_backward, check_pipeline_forward
from .predictions import (check_all_to_all_prediction, check_int8_prediction, check_reduce_prediction,
                          check_reduce_scatter_prediction, check_ring_prediction, check_scatter_prediction,
                          check_time_prediction)
from .training import check_average_gradients, tiny_model, train_steps

__all__ = [
    "CheckFailed", "CallRecord", "NOT_ANSWERED",
    "check_count_ready", "check_broadcast", "check_scatter_prediction", "check_gather",
    "check_reduce_prediction", "check_all_gather", "check_reduce_scatter_prediction",
    "check_int8_prediction", "check_all_to_all_prediction", "check_census", "check_token_ring",
    "check_ring_prediction", "check_ring_step", "check_time_prediction", "check_average_gradients", "tiny_model",
    "train_steps", "launch_recorded", "solution_code", "check_tensor_parallel_mlp", "check_fsdp_prefetch",
    "check_online_softmax", "check_kv_ring_pass", "check_pipeline_forward", "check_collective_prediction",
    "check_dp_tp_placements", "check_partial_to_row_shards", "check_dp_tp_matmul", "check_tensor_parallel_backward",
    "check_compose", "check_tp_placement", "check_pipeline_backward", "check_overlapped_all_reduce",
    "check_hang_culprit", "check_hang_fix", "hang_mystery", "Mystery",
]
