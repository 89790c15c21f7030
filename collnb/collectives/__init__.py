"""Layer 2, collectives: one ``torch.distributed`` primitive run on real ranks (:func:`run`) and
checked against a reference computed without ``torch.distributed``.

Other layers import from this package only, never from its modules.
"""

from .primitives import (DTYPE_NAMES, PRIMITIVES, REDUCE_OPS, REDUCING_PRIMITIVES, ROOTED_PRIMITIVES, SPECS,
                         BackendSupport, RunResult, _get_spec, _make_tensor, backend_support, dtype_name, op_hint,
                         op_name, run, run_batch, teaching_value)

__all__ = ["run", "run_batch", "RunResult", "PRIMITIVES", "REDUCE_OPS", "REDUCING_PRIMITIVES", "ROOTED_PRIMITIVES",
           "DTYPE_NAMES", "SPECS", "backend_support", "BackendSupport", "dtype_name", "op_name", "op_hint", "teaching_value"]
