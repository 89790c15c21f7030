"""Layer 2, collectives: one ``torch.distributed`` primitive run on real ranks (:func:`run`) and
checked against a reference computed without ``torch.distributed``.

Modules, each one job: :mod:`.specs` (the spec table), :mod:`.inputs` (teaching inputs, a run's
own inputs), :mod:`.rank_calls` (what each rank does), :mod:`.support` (what a backend accepts,
detected), :mod:`.reference` (the expected outputs and the comparison), :mod:`.result`
(:class:`RunResult`), :mod:`.display` (the renderer the views layer registers),
:mod:`.primitives` (:func:`run`, :func:`run_batch`).

Other layers import from this package only, never from its modules.
"""

from ..vocabulary import DTYPE_NAMES, REDUCE_OPS, dtype_name, op_hint, op_name
from .display import register_renderer
from .inputs import make_tensor, teaching_inputs, teaching_value
from .primitives import run, run_batch
from .reference import reference
from .result import RunResult
from .specs import (OBJECT_PRIMITIVES, PRIMITIVES, REDUCING_PRIMITIVES, ROOTED_PRIMITIVES, SPECS, PrimitiveSpec,
                    get_spec)
from .support import BackendSupport, backend_support

# The old private names other layers import today (views.explorer: _get_spec; algorithms.schedules:
# _make_tensor); to be removed once they use get_spec / make_tensor.
_get_spec = get_spec
_make_tensor = make_tensor

__all__ = ["run", "run_batch", "RunResult", "PRIMITIVES", "ROOTED_PRIMITIVES", "REDUCING_PRIMITIVES",
           "OBJECT_PRIMITIVES", "REDUCE_OPS", "DTYPE_NAMES", "SPECS", "PrimitiveSpec", "get_spec",
           "backend_support", "BackendSupport", "dtype_name", "op_name", "op_hint", "teaching_value",
           "teaching_inputs", "make_tensor", "reference", "register_renderer"]
