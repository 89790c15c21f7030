"""Mesh flattening, measured: why DTensor warns about "2 sequential all_gather operations" and
what ``DeviceMesh._flatten`` changes; and DTensor's ``DebugMode`` trace of a redistribute beside
``CommDebugMode``'s counts.

**The warning.** A DTensor sharded twice along one tensor dimension on a 2-D mesh, ``(Shard(0),
Shard(0))`` on ``("dp", "tp")``, becomes ``(Replicate(), Replicate())`` by one all_gather per mesh
dimension, one after the other; a ``(Partial(), Partial())`` tensor by one all_reduce per
dimension. torch (``_warn_flatten_optimization_not_possible`` in
``torch/distributed/tensor/_redistribute.py``, torch 2.13 and 2.15) logs once per mesh:
"While redistributing from ... 2 sequential all_gather operations will be performed. This is
suboptimal ... To optimize, flatten mesh dimensions ["dp", "tp"] so DTensor can use a single
operation instead." After ``mesh["dp", "tp"]._flatten("dp_tp")`` exists, DTensor's planner
(``_optimize_transform_infos``) merges consecutive same-kind collectives into one over the
flattened group. :func:`flatten_step` runs both ways on real ranks and returns the warning text.

**What flattening changes** (measured by :func:`flattening_rows` from the recorded calls): the
number of collectives (2 -> 1, each with its own launch and synchronisation); for the all_gather
not the bytes on the wire (``(n-1)/n`` of the whole tensor either way: ``1/2 · N/2 + 1/2 · N`` =
``3/4 · N`` at 2×2); for the all_reduce the bytes too: each sequential all_reduce moves the whole
tensor (``2 · 2(2-1)/2 · N = 2N``) where one over four ranks moves ``2(4-1)/4 · N = 1.5N``. And
the reduction order: torch's message warns that sequential reductions "may give inconsistent
results between ranks due to different reduction orders".

**DebugMode** (:data:`collnb.ranks._torch_internals.DEBUG_MODE`, a private module): a ``TorchDispatchMode`` that logs every
dispatched operation, DTensor's ``redistribute_input`` steps and the ``_c10d_functional``
collectives inside them, as an indented trace; it appeared in torch's source in September 2025
(pytorch/pytorch#162665) and PyTorch's DebugMode tutorial asks for "PyTorch 2.10 or later"; every
release collnb supports (2.13-2.15) has it and prints the same trace on 2.13 and 2.15.
``CommDebugMode`` (``torch.distributed.tensor.debug``; its tutorial asks for PyTorch 2.2 or later)
only counts the collectives per kind. :func:`debug_trace_step` runs both over one redistribute.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeAlias, TypedDict

import torch

from ...i18n import _
from ...ranks import active_recorder, debug_mode_class, flatten_mesh, forget_logged_once
from .accounting import Mark, Phases, Recorded, kind, split, wire_bytes

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Placement

__all__ = ["CASES", "flatten_step", "flattening_rows", "debug_trace_step", "has_debug_mode", "captured_dtensor_log",
           "LOGGER", "FlattenResult", "FlatteningRow", "DebugTrace"]


class FlattenResult(TypedDict):
    """:func:`flatten_step`'s answer on one rank."""

    warnings: dict[str, list[str]]  # "<case>/<way>" -> torch's "sequential" messages
    equal: bool  # every result equals the whole tensor
    seconds: dict[str, float]  # "<case>/<way>" -> median seconds per redistribute (with repeats)
    repeats: int
    marks: list[Mark] | None


class DebugTrace(TypedDict):
    """:func:`debug_trace_step`'s answer on one rank."""

    trace: str | None  # DebugMode.debug_string(); None without DebugMode
    counts: dict[str, int]  # collective name -> count (CommDebugMode)
    equal: bool
    log: list[str]


#: ``(case, way, collectives, group sizes, nbytes, wire bytes)`` (:func:`flattening_rows`).
FlatteningRow: TypeAlias = tuple[str, str, int, list[int], int, float]

#: The redistributions :func:`flatten_step` runs: name -> (source placements, kind of collective).
CASES = {"all_gather": ("S(0),S(0)", "all_gather"), "all_reduce": ("P,P", "all_reduce")}
#: DTensor's logger (its redistribute module logs under it; the parent's name is public).
LOGGER = "torch.distributed.tensor"


def _placements(text: str) -> list[Placement]:
    from torch.distributed.tensor import Partial, Shard

    return [Partial() if p == "P" else Shard(0) for p in text.split(",")]


def _source(case: str, mesh: DeviceMesh, rank: int, shape: tuple[int, ...]) -> DTensor:
    """The DTensor of ``case`` on ``mesh``: ``(Shard(0), Shard(0))`` of ``arange`` values, or
    ``(Partial, Partial)`` whose rank ``r`` contributes ``(r + 1) × arange``."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    whole = torch.arange(float(torch.Size(shape).numel()), dtype=torch.float64).reshape(shape)
    placements = _placements(CASES[case][0])
    if case == "all_reduce":
        return DTensor.from_local(whole * (rank + 1), mesh, placements, run_check=False)
    return distribute_tensor(whole, mesh, placements)


def _expected(case: str, world_size: int, shape: tuple[int, ...]) -> torch.Tensor:
    """The whole tensor ``case``'s redistribute must give (:func:`_source`'s values, summed for all_reduce)."""
    whole = torch.arange(float(torch.Size(shape).numel()), dtype=torch.float64).reshape(shape)
    return whole * sum(r + 1 for r in range(world_size)) if case == "all_reduce" else whole


class _Capture(logging.Handler):
    """A log handler that keeps each warning's message."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def captured_dtensor_log() -> Iterator[list[str]]:
    """Inside the block, DTensor's log lines (logger ``torch.distributed.tensor``) are collected
    instead of printed (torch's logging setup gives that logger a stderr handler of its own). Yields the
    list of messages."""
    capture = _Capture()
    log = logging.getLogger(LOGGER)
    handlers, propagate = list(log.handlers), log.propagate
    log.handlers, log.propagate = [capture], False
    try:
        yield capture.messages
    finally:
        log.handlers, log.propagate = handlers, propagate


def flatten_step(rank: int, world_size: int, mesh_shape: tuple[int, ...] = (2, 2),
                 names: tuple[str, ...] = ("dp", "tp"), shape: tuple[int, ...] = (8, 8),
                 repeats: int = 0) -> FlattenResult:
    """On a rank: each case of :data:`CASES` redistributed to ``(Replicate(), Replicate())`` on a
    2-D mesh, first as it is (sequential collectives, torch's warning captured), then after
    ``mesh[names]._flatten()`` (one collective).

    Args:
        mesh_shape, names: the mesh (its size must be the world size). shape: the tensor's shape
            (float64; dim 0 a multiple of the world size).
        repeats: also time each way this many times (seconds per redistribute, the median over
            repeats; 0: do not time).

    Phases (with ``record_calls=True``): ``"<case>/sequential"``, ``"flatten"`` (making the
    flattened group), ``"<case>/flattened"``.

    Returns:
        :class:`FlattenResult`: ``warnings`` ({case: [torch's messages]}: the sequential way's, none expected after
        flattening under ``"<case>/flattened"``), ``equal`` (bool: every result equals the whole
        tensor), ``seconds`` ({"<case>/<way>": median s} when ``repeats``), ``repeats``, ``marks``.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate

    phases = Phases() if active_recorder() is not None else None
    mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=tuple(names))
    out = FlattenResult(warnings={}, equal=True, seconds={}, repeats=repeats, marks=None)
    with captured_dtensor_log() as messages:
        for way in ("sequential", "flattened"):
            if way == "flattened":
                if phases is not None:
                    phases.begin("flatten")
                flatten_mesh(mesh[tuple(names)], "_".join(names))
            for case in CASES:
                forget_logged_once()      # torch warns once per mesh and process; these ranks stay warm
                messages.clear()
                source = _source(case, mesh, rank, shape)
                if phases is not None:
                    phases.begin(f"{case}/{way}")
                whole = source.redistribute(mesh, [Replicate(), Replicate()]).to_local()
                out["warnings"][f"{case}/{way}"] = [m for m in messages if "sequential" in m]
                out["equal"] &= bool(torch.equal(whole, _expected(case, world_size, shape)))
                if repeats:
                    times = []
                    for _i in range(repeats):
                        t0 = time.perf_counter()
                        source.redistribute(mesh, [Replicate(), Replicate()]).to_local()
                        times.append(time.perf_counter() - t0)
                    out["seconds"][f"{case}/{way}"] = sorted(times)[len(times) // 2]
    if phases is not None:
        phases.begin("done")
    out["marks"] = phases.close() if phases is not None else None
    return out


def flattening_rows(results: Recorded[FlattenResult], rank: int = 0) -> list[FlatteningRow]:
    """One row per case and way from a :func:`flatten_step` launch with ``record_calls=True``
    (the first redistribute of each; timed repeats left out): ``(case, way, collectives, group
    sizes, nbytes, wire bytes)``, the collectives' kinds and counts read from rank ``rank``'s
    recorded calls.

    Raises:
        ValueError: the launch was made without ``record_calls=True``.
    """
    calls = getattr(results, "calls", None)
    marks = results[rank]["marks"]
    if calls is None or marks is None:
        raise ValueError(_("flattening_rows needs the recorded calls: launch with record_calls=True"))
    phases = split(calls[rank], marks)
    rows = []
    for case, (_src, collective) in CASES.items():
        for way in ("sequential", "flattened"):
            records = [r for r in phases.get(f"{case}/{way}", []) if kind(r) == collective]
            first = records[:len(records) // (1 + results[rank]["repeats"])]
            rows.append((case, way, len(first), [r.group_size for r in first], sum(r.nbytes for r in first),
                         sum(wire_bytes(r) for r in first)))
    return rows


def has_debug_mode() -> bool:
    """Whether the installed torch has DTensor's ``DebugMode`` (:func:`collnb.ranks.debug_mode_class`)."""
    return debug_mode_class() is not None


def debug_trace_step(rank: int, world_size: int, src: str = "S(0),S(0)", dst: str = "R,R",
                     mesh_shape: tuple[int, ...] = (2, 2), names: tuple[str, ...] = ("dp", "tp"),
                     shape: tuple[int, ...] = (8, 8)) -> DebugTrace:
    """On a rank: one redistribute under ``DebugMode`` and ``CommDebugMode`` at once.

    Args:
        src, dst: placements per mesh dimension, comma-separated: ``S(d)``, ``R``, ``P``.

    Returns:
        :class:`DebugTrace`: ``trace`` (``DebugMode.debug_string()``, or ``None`` when this torch has no DebugMode),
        ``counts`` ({collective name: count} from ``CommDebugMode.get_comm_counts()``), ``equal``
        (the result equals the whole tensor laid out as ``dst``), ``log`` (DTensor's log lines, not
        printed).
    """
    import re

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    def parse(text: str) -> list[Placement]:
        out: list[Placement] = []
        for part in text.split(","):
            p = part.strip()
            m = re.fullmatch(r"S\((\d+)\)", p)
            one = Shard(int(m.group(1))) if m else Replicate() if p == "R" else Partial() if p == "P" else None
            if one is None:
                raise ValueError(_("unknown placement {value}; write S(d), R or P").format(value=repr(p)))
            out.append(one)
        return out

    mesh = init_device_mesh("cpu", tuple(mesh_shape), mesh_dim_names=tuple(names))
    whole = torch.arange(float(torch.Size(shape).numel()), dtype=torch.float64).reshape(shape)
    source_placements = parse(src)
    if any(isinstance(p, Partial) for p in source_placements):
        t = DTensor.from_local(whole / world_size, mesh, source_placements, run_check=False) \
            if all(isinstance(p, Partial) for p in source_placements) else None
        if t is None:
            raise ValueError(_("this demo makes Partial sources only with every dimension P"))
    else:
        t = distribute_tensor(whole, mesh, source_placements)
    comm = CommDebugMode()  # type: ignore[no-untyped-call]  # torch's CommDebugMode.__init__ has no annotations
    trace: str | None = None
    DebugMode = debug_mode_class()
    with captured_dtensor_log() as log:      # torch's "sequential" warning: returned, not printed
        if DebugMode is not None:
            debug = DebugMode()
            with comm, debug:
                out = t.redistribute(mesh, parse(dst))
            trace = debug.debug_string()
        else:
            with comm:
                out = t.redistribute(mesh, parse(dst))
        equal = bool(torch.allclose(out.full_tensor(), whole))
    counts = {str(getattr(k, "__name__", k)): v for k, v in comm.get_comm_counts().items()}
    return DebugTrace(trace=trace, counts=counts, equal=equal, log=list(dict.fromkeys(log)))
