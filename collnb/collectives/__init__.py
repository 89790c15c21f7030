"""Layer 2, collectives: one ``torch.distributed`` primitive run on real ranks (:func:`run`) and
checked against a reference computed without ``torch.distributed``.

Modules, each one job: :mod:`.specs` (the spec table), :mod:`.inputs` (teaching inputs, a run's
own inputs), :mod:`.rank_calls` (what each rank does), :mod:`.support` (what a backend accepts,
detected), :mod:`.expected` (the expected outputs and the comparison), :mod:`.result`
(:class:`RunResult`), :mod:`.display` (the renderer the views layer registers),
:mod:`.primitives` (:func:`run`, :func:`run_batch`).

The spec table's names (:data:`PRIMITIVES`, :data:`ROOTED_PRIMITIVES`, :data:`REDUCING_PRIMITIVES`,
:data:`SPECS`, :class:`Buffer`, :class:`TorchCall`, ...) import no torch: the pure schedules and :meth:`collnb.Trace.load` use them. Every
other name loads its module, and torch with it, the first time it is used (PEP 562 module
``__getattr__``).

Other layers import from this package only, never from its modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from ..vocabulary import DTYPE_NAMES, REDUCE_OPS, dtype_name, op_hint, op_name
from .display import register_renderer
from .specs import (BENCH_PRIMITIVES, CALL_ARGUMENTS, OBJECT_PRIMITIVES, PRIMITIVES, REDUCING_PRIMITIVES, ROOTED_PRIMITIVES,
                    SPECS, Buffer, PrimitiveSpec, TorchCall, check_arguments, get_spec)

if TYPE_CHECKING:  # what __getattr__ loads, for readers and type checkers
    from .inputs import make_tensor, teaching_inputs, teaching_value
    from .primitives import run, run_batch
    from .expected import reference
    from .result import RunResult
    from .support import BackendSupport, backend_support, known_support, saved_probe_state, support_for

#: Name -> the module (needing torch) it is loaded from on first use.
_LAZY = {**dict.fromkeys(("make_tensor", "teaching_inputs", "teaching_value"), ".inputs"),
         **dict.fromkeys(("run", "run_batch"), ".primitives"),
         "reference": ".expected", "RunResult": ".result",
         **dict.fromkeys(("BackendSupport", "backend_support", "known_support", "saved_probe_state", "support_for"),
                         ".support")}

__all__ = ["run", "run_batch", "RunResult", "PRIMITIVES", "ROOTED_PRIMITIVES", "REDUCING_PRIMITIVES",
           "OBJECT_PRIMITIVES", "BENCH_PRIMITIVES", "REDUCE_OPS", "DTYPE_NAMES", "SPECS", "PrimitiveSpec", "Buffer",
           "TorchCall", "get_spec", "CALL_ARGUMENTS", "check_arguments",
           "backend_support", "known_support", "saved_probe_state", "support_for", "BackendSupport", "dtype_name", "op_name", "op_hint",
           "teaching_value",
           "teaching_inputs", "make_tensor", "reference", "register_renderer"]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)  # a torch-side name loads on first use
