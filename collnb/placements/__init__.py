"""Layer 2, placements: DTensor and DeviceMesh on real ranks: one placement change
(:func:`redistribute`) with every rank's local shard before and after, the collectives it
issued, and a reference computed by slicing the global tensor by hand (no DTensor).

Modules, each one job: :mod:`.parsing` (placements and meshes as learners write them; no torch),
:mod:`.reference` (teaching values, shards, Partial contributions, torch's refusal rule; numpy
only), :mod:`.rank_side` (what each rank runs), :mod:`.result` (:class:`RedistributeResult`, drawn
by what :mod:`collnb.views` registers), :mod:`.run` (:func:`redistribute`, :func:`check_request`).

The names of :mod:`.parsing` and :mod:`.reference` import no torch (the explorer's choices and the
command line use them), except that :func:`refusal` without a ``version`` reads the installed torch's; the others load their module, and torch with it, on first use.

Other layers import from this package only, never from its modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from .parsing import (DTYPES, MAX_NUMEL, PARTIAL_OPS, Placement, check_shape, largest_value, mesh_text, parse_mesh,
                      parse_placement, parse_placements, placements_text)
from .reference import (coordinates, contributions, expected_local, local_bounds, new_partial_dims,
                        owners, partial_dims, partial_sums, refusal, teaching_values, zero_fill_is_exact)

if TYPE_CHECKING:  # what __getattr__ loads, for readers and type checkers
    from .result import LocalShard, RedistributeResult, register_display
    from .run import Request, check_request, redistribute

_LAZY = {**dict.fromkeys(("LocalShard", "RedistributeResult", "register_display"), ".result"),
         **dict.fromkeys(("Request", "check_request", "redistribute"), ".run")}

__all__ = ["Placement", "PARTIAL_OPS", "DTYPES", "MAX_NUMEL", "parse_placement", "parse_placements", "parse_mesh",
           "check_shape", "placements_text", "mesh_text", "teaching_values", "largest_value", "coordinates",
           "local_bounds", "contributions", "expected_local", "refusal", "owners", "partial_dims", "new_partial_dims",
           "zero_fill_is_exact", "partial_sums",
           "LocalShard", "RedistributeResult", "register_display", "Request", "check_request", "redistribute"]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)  # a torch-side name loads on first use
