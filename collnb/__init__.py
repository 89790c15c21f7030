"""collnb: teach PyTorch collective communication by running it on real ranks.

Start with :func:`launch` (run your own function on real ranks) and :func:`run` (one
primitive, with before/after heatmaps).
"""

from .launcher import (BACKENDS, MAX_WORLD_SIZE, LaunchError, LaunchTimeout, RankError,
                       backend_info, launch, shutdown)

__version__ = "0.1.0"

__all__ = ["launch", "shutdown", "backend_info", "LaunchError", "RankError", "LaunchTimeout",
           "MAX_WORLD_SIZE", "BACKENDS"]
