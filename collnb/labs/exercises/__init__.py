"""Exercise checks for the notebooks: they pass only for work the learner did, on real ranks.

Every notebook's ``check`` cell calls one function of this module with the learner's answer (a
function or a prediction) and the stored solution. A check

* runs the learner's function on real ranks (:func:`collnb.launch`) with **data only its source
  rank knows** (random per launch), at **varied world sizes** (random per launch, and where the
  exercise forbids ``world_size`` a decoy value), so an answer that computes the result locally
  cannot pass;
* verifies the ``torch.distributed`` calls each rank actually made (:class:`collnb.CallRecord`,
  recorded by ``collnb.launch(..., record_calls=True)``) and refuses forbidden ones where the
  exercise says "build it from X";
* prints ``✓`` only when the learner's own answer passed. While the answer cell is unfinished
  (the function still returns ``None`` and communicates nothing, or ``prediction`` is ``None``)
  the check says so and may **demonstrate** the stored solution, labelled as such, without ``✓``;
* on a wrong answer raises :class:`CheckFailed`: in Jupyter a formatted ``✗`` with a per-rank table
  and a hint about that mistake, no traceback (IPython renders the exception with
  ``_render_traceback_``); a test still sees an error.

Example (the check cell of ``01_broadcast``)::

    from collnb import exercises
    exercises.check_broadcast(my_broadcast, solution=solution_broadcast)

Modules: :mod:`.framework` (running on ranks with the calls recorded; ✓, ✗ and "not answered
yet"), :mod:`.coding` (checks of code the learner writes), :mod:`.predictions` (checks of
predicted values) and :mod:`.training` (notebook 11).
"""

from ...ranks import CallRecord
from .coding import (check_all_gather, check_broadcast, check_census, check_count_ranks, check_gather,
                     check_ring_step, check_token_ring)
from .framework import NOT_ANSWERED, CheckFailed, launch_recorded
from .predictions import (check_all_to_all_prediction, check_int8_prediction, check_reduce_prediction,
                          check_reduce_scatter_prediction, check_ring_prediction, check_scatter_prediction,
                          check_time_prediction)
from .training import check_average_gradients, tiny_model, train_steps

__all__ = [
    "CheckFailed", "CallRecord", "NOT_ANSWERED",
    "check_count_ranks", "check_broadcast", "check_scatter_prediction", "check_gather",
    "check_reduce_prediction", "check_all_gather", "check_reduce_scatter_prediction",
    "check_int8_prediction", "check_all_to_all_prediction", "check_census", "check_token_ring",
    "check_ring_prediction", "check_ring_step", "check_time_prediction", "check_average_gradients", "tiny_model",
    "train_steps", "launch_recorded",
]
