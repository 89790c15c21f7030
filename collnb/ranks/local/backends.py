"""Which process-group backends can run on this machine, and for how many ranks.

Answered from torch alone, without starting any rank: Gloo needs a torch build with Gloo; NCCL
needs CUDA GPUs, a torch build with NCCL, and one GPU per rank.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ...i18n import _
from ...vocabulary import MAX_WORLD_SIZE, Backend

__all__ = ["local_backend_info"]


def local_backend_info(backend: Backend) -> dict[str, Any]:
    """Whether ``backend`` (checked: :func:`collnb.vocabulary.check_backend`) can run on this machine
    (see :func:`collnb.ranks.backend_info`).

    Returns:
        ``{"backend": str, "available": bool, "max_world_size": int, "reason": str, "limit": str}``;
        ``limit`` says why ``max_world_size`` is below :data:`MAX_WORLD_SIZE` (NCCL: the visible GPUs),
        in the words world-size errors use; empty when it is not.
    """
    if backend == "gloo":
        if not dist.is_gloo_available():
            return dict(backend=backend, available=False, max_world_size=0,
                        reason=_("this torch build has no Gloo backend"))
        return dict(backend=backend, available=True, max_world_size=MAX_WORLD_SIZE, reason="",
                    limit="")  # the general limit: the same words as collnb.vocabulary.check_world_size
    if not torch.cuda.is_available():
        return dict(backend=backend, available=False, max_world_size=0,
                    reason=_("NCCL needs CUDA GPUs and this torch sees none (torch {version}, cuda={cuda}); "
                             "use backend='gloo'").format(version=torch.__version__, cuda=torch.version.cuda))
    if not dist.is_nccl_available():
        return dict(backend=backend, available=False, max_world_size=0,
                    reason=_("this torch build has no NCCL backend; use backend='gloo'"))
    n = torch.cuda.device_count()
    return dict(backend=backend, available=True, max_world_size=min(n, MAX_WORLD_SIZE), reason="",
                limit=_("NCCL puts one rank per GPU and {n} are visible; use backend='gloo' for more ranks").format(n=n))
