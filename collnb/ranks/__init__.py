"""Layer 1, ranks: start real ranks from a Python process or a Jupyter kernel and run a function
on them (:func:`launch`), on this machine or on ipyparallel engines (:mod:`collnb.ranks.remote`).

Other layers import from this package only, never from its modules.
"""

from .launcher import (BACKENDS, MAX_WORLD_SIZE, CallRecord, LaunchError, LaunchResults, LaunchTimeout,
                       RankError, RankPool, _check_request, _default_start_method, _iter_functions,
                       backend_info, launch, shutdown)
from .remote import connect, disconnect

__all__ = ["launch", "shutdown", "backend_info", "LaunchError", "RankError", "LaunchTimeout",
           "LaunchResults", "CallRecord", "MAX_WORLD_SIZE", "BACKENDS", "RankPool", "connect", "disconnect"]
