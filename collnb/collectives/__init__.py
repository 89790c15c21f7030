"""Layer 2, collectives: one ``torch.distributed`` primitive run on real ranks (:func:`run`) and
checked against a reference computed without ``torch.distributed``.

:data:`ROOTED_PRIMITIVES` and :data:`REDUCING_PRIMITIVES` import no torch (the pure schedules and
:meth:`collnb.Trace.load` use them); every other name loads :mod:`.primitives`, and torch with it,
the first time it is used (PEP 562 module ``__getattr__``).

Other layers import from this package only, never from its modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Primitives with a root rank (``src``/``dst``) and primitives that combine values with a reduce
#: op: ``primitives.SPECS``' ``rooted`` and ``reduces`` columns, in its order, written out here so
#: that they load without torch (tests/test_algorithms.py checks that they agree with SPECS).
ROOTED_PRIMITIVES = ("broadcast", "scatter", "gather", "reduce", "broadcast_object_list", "scatter_object_list",
                     "gather_object")
REDUCING_PRIMITIVES = ("reduce", "reduce_scatter", "all_reduce", "reduce_scatter_tensor", "reduce_scatter_single")

if TYPE_CHECKING:
    from .primitives import (DTYPE_NAMES, PRIMITIVES, REDUCE_OPS, SPECS, BackendSupport, RunResult, _get_spec,
                             _make_tensor, backend_support, dtype_name, op_hint, op_name, run, run_batch,
                             teaching_value)

_LAZY = ("DTYPE_NAMES", "PRIMITIVES", "REDUCE_OPS", "SPECS", "BackendSupport", "RunResult", "_get_spec",
         "_make_tensor", "backend_support", "dtype_name", "op_hint", "op_name", "run", "run_batch", "teaching_value")

__all__ = ["run", "run_batch", "RunResult", "PRIMITIVES", "REDUCE_OPS", "DTYPE_NAMES", "SPECS",
           "ROOTED_PRIMITIVES", "REDUCING_PRIMITIVES", "backend_support", "BackendSupport", "dtype_name",
           "op_name", "op_hint", "teaching_value"]


def __getattr__(name: str):
    """Load :mod:`.primitives` (and torch) the first time one of its names is asked for."""
    if name in _LAZY:
        value = getattr(importlib.import_module(".primitives", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))
