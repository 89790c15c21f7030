"""What each rank does for :func:`collnb.redistribute`: build the device mesh and the source DTensor,
call ``redistribute`` once under ``CommDebugMode`` (the call whose collectives are recorded), then
time it, and hand back the local shards, torch's counts and what torch logged.

Runs inside a rank (``collnb.launch(..., record_calls=True)``), so torch is imported here only.

* The mesh: ``init_device_mesh("cpu", mesh)`` on gloo, ``("cuda", mesh)`` on NCCL, made once per
  mesh shape on warm ranks and kept (:func:`collnb.ranks.keep_groups`): its groups outlive the
  call, and the next call of the same shape on the same group reuses it (a 2x2 mesh costs ~50 ms
  to make, measured on 2 cores; an explorer move's target is 150 ms).
* The source DTensor: without a Partial, ``distribute_tensor(teaching tensor, mesh, src,
  src_data_rank=None)`` (each rank slices its shard: torch's slicing, no communication; the parent
  compares it with the hand-sliced reference); with a Partial, ``DTensor.from_local`` of the rank's
  contribution (:func:`collnb.placements.reference.contributions`), sliced by hand.
* Markers: a ``dist.barrier()`` before the recorded call, and (with ``repeats`` > 0) after it and
  before each timed call: the ranks start each timed call together, and the parent cuts the
  recorded call's collectives out of the rank's records (those after the first barrier, up to the
  next one; making the mesh and the source DTensor issue none, measured). With ``repeats == 0`` the
  recorded call itself is timed (the explorer: one barrier and one call per move).
* torch's log lines during the call (the CPU all_to_all fallback, the flattening advice) are
  caught, not printed: torch logs them once per process (the cache :func:`collnb.ranks.forget_logged_once` clears,
  ``_redistribute._warned_flatten_issues``), and warm ranks run many calls, so both are cleared
  first (:func:`collnb.ranks.forget_logged_once`, beside collnb's other private torch names).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

    from .parsing import Placement
    from .reference import Floats
    from .result import MeshRanks

__all__ = ["redistribute_on_rank", "import_dtensor", "LOGGER", "RankRequest", "RankAnswer"]

#: Meshes made by earlier calls on this rank: (device, mesh shape) -> (the call's default group,
#: the DeviceMesh). Every rank of a call of a given world size has run the same calls of that size
#: since its default group was made, so every rank finds the same entries.
_MESHES: dict[tuple[str, tuple[int, ...]], tuple[ProcessGroup | None, DeviceMesh]] = {}

#: torch's DTensor logger: ``_redistribute`` and ``_collective_utils`` log under it.
LOGGER = "torch.distributed.tensor"


class RankRequest(TypedDict):
    """What :func:`redistribute_on_rank` is asked (see its docstring)."""

    shape: tuple[int, ...]
    dtype: str
    mesh: tuple[int, ...]
    src: tuple[Placement, ...]
    dst: tuple[Placement, ...]
    before: list[Floats] | None
    values: Floats
    repeats: int
    device: Literal["cpu", "cuda"]


class RankAnswer(TypedDict):
    """What :func:`redistribute_on_rank` hands back (see its docstring)."""

    coord: tuple[int, ...]
    before: torch.Tensor
    after: torch.Tensor | None
    refused: str | None
    comm_counts: dict[str, int]
    times: list[float]
    log: list[str]
    mesh_ranks: MeshRanks


class _Lines(logging.Handler):
    """A handler that keeps each record's message (the log lines torch writes during the call)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a malformed record: keep its template
            self.lines.append(str(record.msg))


def import_dtensor(rank: int, world_size: int) -> bool:
    """Import what :func:`redistribute_on_rank` needs (no communication); whether it was imported already.

    A rank forked before anything imported DTensor spends seconds on it (3.5 s measured on a loaded
    2-core machine): inside a call, its peers would wait for it in their first collective longer
    than the collective timeout. :func:`collnb.redistribute` runs this first on ranks that may be
    such ranks."""
    import sys  # noqa: PLC0415
    had = "torch.distributed.tensor.debug" in sys.modules
    import torch.distributed.device_mesh  # noqa: F401, PLC0415
    import torch.distributed.tensor.debug  # noqa: F401, PLC0415
    return had


def _mesh(device: str, shape: tuple[int, ...]) -> DeviceMesh:
    """A ``DeviceMesh`` of ``shape`` over this call's ranks: the one an earlier call made on the
    same default group while its groups are still kept, else a new one, kept for later calls."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415
    from .. import ranks  # noqa: PLC0415

    world = dist.group.WORLD
    hit = _MESHES.get((device, shape))
    if hit is not None and hit[0] is world:
        kept = ranks.kept_groups()
        if all(hit[1].get_group(d) in kept for d in range(hit[1].ndim)):
            return hit[1]
    mesh = init_device_mesh(device, shape)
    if len(_MESHES) < 8:  # the explorer offers 5 shapes; past 8, a mesh ends with its call
        ranks.keep_groups(mesh.get_group(d) for d in range(mesh.ndim))
        _MESHES[(device, shape)] = (world, mesh)
    return mesh


def redistribute_on_rank(rank: int, world_size: int, request: RankRequest) -> RankAnswer:
    """Run one redistribute on this rank (see the module docstring).

    Args:
        request: ``{"shape", "dtype" (name), "mesh" (shape tuple), "src", "dst" (tuples of
            :class:`collnb.placements.Placement`), "before" (every rank's source local tensor as a
            float64 numpy array, rank order, when ``src`` has a Partial, else ``None``), "values" (the global
            teaching tensor, float64 numpy), "repeats" (timed calls after the recorded one, >= 0), "device" ("cpu" or "cuda")}``.

    Returns:
        ``{"coord", "before", "after" (CPU tensors; ``after`` None when refused), "refused" (torch's
        error text or None), "comm_counts" ({operator: count} of ``CommDebugMode``), "times"
        (seconds of each timed call), "log" (torch's log lines), "mesh_ranks" (nested lists)}``.
    """
    import torch  # noqa: PLC0415 - the rank side
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.tensor import DTensor, distribute_tensor  # noqa: PLC0415
    from torch.distributed.tensor.debug import CommDebugMode  # noqa: PLC0415

    dtype = getattr(torch, request["dtype"])
    device = request["device"]
    if device == "cuda":
        torch.cuda.set_device(rank)
    mesh = _mesh(device, tuple(request["mesh"]))
    src = [p.to_torch() for p in request["src"]]
    dst = [p.to_torch() for p in request["dst"]]
    if request["before"] is not None:
        local = torch.from_numpy(request["before"][rank]).to(dtype).to(device)
        d = DTensor.from_local(local, mesh, src, run_check=False, shape=torch.Size(request["shape"]),
                               stride=torch.empty(request["shape"]).stride())
    else:
        d = distribute_tensor(torch.from_numpy(request["values"]).to(dtype).to(device), mesh, src,
                              src_data_rank=None)
    before = d.to_local().detach().cpu().clone()

    caught = _Lines()
    log = logging.getLogger(LOGGER)
    propagate, handlers = log.propagate, list(log.handlers)
    log.handlers = [caught]   # torch's logging setup gives this logger a stderr handler of its own
    log.propagate = False
    from ..ranks import forget_logged_once  # noqa: PLC0415 - torch's private caches, kept in collnb.ranks
    forget_logged_once()
    refused, after, counts, times = None, None, {}, []
    try:
        dist.barrier()
        try:
            t0 = time.perf_counter()
            with CommDebugMode() as comm:  # type: ignore[no-untyped-call]  # torch's __init__ has no annotations
                out = d.redistribute(mesh, dst)
            if device == "cuda":
                torch.cuda.synchronize()
            first = time.perf_counter() - t0
            after = out.to_local().detach().cpu().clone()
            counts = {str(k): int(v) for k, v in comm.get_comm_counts().items()}
            if not request["repeats"]:
                times.append(first)
        except (RuntimeError, AssertionError, NotImplementedError, ValueError) as exc:
            refused = f"{type(exc).__name__}: {exc}"
        if request["repeats"]:
            dist.barrier()
        for _ in range(request["repeats"]):
            dist.barrier()
            if refused is not None:
                continue
            t0 = time.perf_counter()
            d.redistribute(mesh, dst)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    finally:
        log.handlers = handlers
        log.propagate = propagate
    coord = mesh.get_coordinate()
    assert coord is not None, "every rank is in the mesh of all the call's ranks"
    return {"coord": tuple(int(c) for c in coord), "before": before, "after": after,
            "refused": refused, "comm_counts": counts, "times": times, "log": list(dict.fromkeys(caught.lines)),
            "mesh_ranks": mesh.mesh.tolist()}
