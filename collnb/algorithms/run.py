"""Running collective algorithms on real ranks from the caller: :func:`run_algorithm` and
:func:`run_algorithms` launch the ranks (:func:`collnb.launch`), run the schedule there
(:func:`collnb.algorithms.execution.execute`), run the built-in ``torch.distributed`` collective on
the same inputs in the same launch, and return a :class:`collnb.Trace` (every round's transfers and
every rank's buffer after it).

The inputs are the teaching values (:func:`teaching_buffers`) or the caller's; the dtype and op
are checked against what the backend accepts on real ranks
(:func:`collnb.backend_support`) before any rank starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Required, TypeAlias, TypedDict, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from numpy.typing import NDArray

from .. import ranks
from ..collectives import (REDUCING_PRIMITIVES, BackendSupport, backend_support, check_arguments, get_spec, make_tensor,
                           support_for, teaching_value)
from ..i18n import _
from ..vocabulary import check_backend, check_int, dtype_name, op_hint, op_name
from .execution import Recording, execute, snapshots
from .schedules import Schedule, chunk_bounds, default_algorithm, schedule
from .trace import Trace

__all__ = ["run_algorithm", "run_algorithms", "prepare_case", "teaching_buffers", "builtin_result", "start_buffer",
           "rank_run_cases", "make_trace", "Inputs", "RunOptions", "AlgorithmConfig", "Case", "RankCase", "RankResult"]

T = TypeVar("T")

#: A run's inputs (:func:`run_algorithm`): ``None`` (the teaching values), a ``(world_size, n_chunks *
#: chunk_size)`` tensor, array or nested list of numbers, or ``f(rank, chunk) -> number``.
Inputs: TypeAlias = "torch.Tensor | NDArray[np.generic] | Sequence[Sequence[complex]] | Callable[[int, int], complex] | None"


class RunOptions(TypedDict, total=False):
    """The keyword arguments of :func:`run_algorithm` that one case of :func:`run_algorithms` may give."""

    dtype: torch.dtype | str
    op: str | dist.ReduceOp | None
    root: int | None
    chunk_size: int
    segments: int | None
    inputs: Inputs
    snapshots: bool
    compare: bool
    ranks_per_node: int | None


class AlgorithmConfig(RunOptions, total=False):
    """One case of :func:`run_algorithms`: its primitive (required), its algorithm and :class:`RunOptions`."""

    primitive: Required[str]
    algorithm: str | None


class RankCase(TypedDict):
    """What a rank needs of one case (:func:`rank_run_cases`): the schedule, every rank's input
    (``(world_size, count)``), the chunk offsets, the op's name, whether to record every round and to
    run the built-in collective too."""

    schedule: Schedule
    inputs: torch.Tensor
    bounds: list[int]
    op: str
    record: bool
    compare: bool


class Case(RankCase):
    """One checked case (:func:`prepare_case`): a :class:`RankCase` with its ``dtype`` and ``chunk_size``
    (elements per chunk), which stay with the caller."""

    dtype: torch.dtype
    chunk_size: int


class RankResult(TypedDict):
    """One rank's answer for one case: its ``final`` buffer, per-round ``seconds``, the built-in
    collective's result (``None`` when not compared) and the :class:`Recording` (``None`` without one)."""

    final: torch.Tensor
    seconds: list[float]
    builtin: torch.Tensor | None
    recording: Recording | None


# ----------------------------------------------------------------------------------------------
# Rank side: the schedule and the built-in collective on the same input

def _builtin(primitive: str, rank: int, ws: int, inp: torch.Tensor, op: str, root: int, C: int) -> torch.Tensor:
    """The built-in torch.distributed collective on ``inp`` (this rank's input in our layout),
    its result laid out like our working buffer (chunk j = slot j)."""
    rop = getattr(dist.ReduceOp, op.upper())
    if primitive == "all_reduce":
        t = inp.clone()
        dist.all_reduce(t, op=rop)
        return t
    if primitive == "reduce":
        t = inp.clone()
        dist.reduce(t, dst=root, op=rop)
        return t
    if primitive == "broadcast":
        t = inp.clone()
        dist.broadcast(t, src=root)
        return t
    blocks = list(inp.chunk(ws)) if ws > 1 else [inp]
    e = inp.numel() // ws
    if primitive == "all_gather":
        parts = [torch.zeros_like(blocks[0]) for _ in range(ws)]
        dist.all_gather(parts, blocks[rank].contiguous())
        return torch.cat(parts)
    if primitive == "reduce_scatter":
        mine = torch.zeros(e, dtype=inp.dtype, device=inp.device)
        dist.reduce_scatter(mine, [b.contiguous() for b in blocks], op=rop)
        res = torch.zeros_like(inp)
        res[rank * e:(rank + 1) * e] = mine
        return res
    if primitive == "scatter":
        mine = torch.zeros(e, dtype=inp.dtype, device=inp.device)
        dist.scatter(mine, [b.contiguous() for b in blocks] if rank == root else None, src=root)
        res = torch.zeros_like(inp)
        res[rank * e:(rank + 1) * e] = mine
        return res
    if primitive == "gather":
        gathered = [torch.zeros_like(blocks[0]) for _ in range(ws)] if rank == root else None
        dist.gather(blocks[rank].contiguous(), gathered, dst=root)
        return torch.cat(gathered) if gathered is not None else torch.zeros_like(inp)
    if primitive == "all_to_all":
        out = torch.zeros_like(inp)
        dist.all_to_all_single(out, inp)
        return out
    raise ValueError(primitive)


def _start_buffer(primitive: str, rank: int, ws: int, inp: torch.Tensor, C: int, bounds: Sequence[int],
                  start_chunks: Sequence[Collection[int]] | None = None) -> torch.Tensor:
    """The working buffer a rank starts a schedule with: a copy of its input, or for all_to_all
    zeros with its own slot (or the schedule's ``start_chunks[rank]``) copied in."""
    if primitive == "all_to_all":
        work = torch.zeros_like(inp)
        for c in (start_chunks[rank] if start_chunks is not None else (rank,)):
            a, b = bounds[c], bounds[c + 1]
            work[a:b] = inp[a:b]
        return work
    return inp.clone()


def start_buffer(sched: Schedule, rank: int, inp: torch.Tensor, bounds: Sequence[int]) -> torch.Tensor:
    """``start_buffer(schedule, rank, inp, bounds)``: the working buffer rank ``rank`` starts
    ``schedule`` with (its input's copy; all_to_all: the chunks it starts with, the rest zeros)."""
    return _start_buffer(sched.primitive, rank, sched.world_size, inp, sched.n_chunks, bounds, sched.start_chunks)


def _rank_run_cases(rank: int, world_size: int, cases: Sequence[RankCase]) -> list[RankResult]:
    """Rank side of :func:`run_algorithms`: run every case (schedule + input) and, if asked, the
    built-in collective on the same input. Returns one :class:`RankResult` per case."""
    out = []
    # NCCL: rank r works on its GPU (the launcher set it); results come back to the caller on CPU.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    for case in cases:
        sched = case["schedule"]
        inp = case["inputs"][rank].to(device=device, copy=True) if device is not None else case["inputs"][rank].clone()
        bounds = case["bounds"]
        work = start_buffer(sched, rank, inp, bounds)
        res = execute(sched, work, op=case["op"], record=case["record"], bounds=bounds,
                      send_from=inp if sched.primitive == "all_to_all" else None)
        item = RankResult(final=work, seconds=res["seconds"], builtin=None, recording=Recording(
            initial=res["initial"], changes=res["changes"], n_rounds=res["n_rounds"]) if case["record"] else None)
        if case["compare"]:
            item["builtin"] = _builtin(sched.primitive, rank, world_size, inp, case["op"], sched.root,
                                       sched.n_chunks)
        out.append(item)
    return out


# ----------------------------------------------------------------------------------------------
# Inputs, validation and the caller side

def _dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    """The ``torch.dtype`` of ``dtype`` (a dtype or its name; ``None``: float32), as
    :func:`collnb.vocabulary.dtype_name` checks it."""
    dt = getattr(torch, dtype_name(dtype if dtype is not None else torch.float32))
    assert isinstance(dt, torch.dtype)  # dtype_name gives the name of a torch dtype
    return dt


#: The arguments of :func:`run_algorithm` that :func:`collnb.collectives.check_arguments` checks
#: against the primitive (``segments`` is checked by :func:`~.schedules.schedule`: broadcast only).
_CALL_ARGUMENTS = ("dtype", "op", "root", "chunk_size", "inputs")


def teaching_buffers(primitive: str, world_size: int, n_chunks: int, chunk_size: int = 1, root: int = 0,
                     dtype: torch.dtype | str = torch.float32) -> torch.Tensor:
    """The teaching inputs in this module's layout: a ``(world_size, n_chunks * chunk_size)`` tensor.

    Values are :func:`collnb.collectives.teaching_value` (``10*rank + chunk``; ``100*rank + chunk``
    above world size 10), made as int64 and cast to ``dtype`` (integers wrap, as in
    :func:`collnb.run`):

    * all_reduce, reduce, reduce_scatter, all_to_all, broadcast: rank ``r`` chunk ``c`` holds
      ``teaching_value(r, c)`` (broadcast's non-root ranks hold theirs until overwritten);
    * all_gather, gather: rank ``r`` holds ``teaching_value(r, 0)`` in its own slot ``r``, zeros
      elsewhere (the empty output slots);
    * scatter: the root holds ``teaching_value(root, c)`` in chunk ``c``; other ranks zeros.

    Raises:
        TypeError / ValueError: an unknown dtype (:func:`collnb.vocabulary.dtype_name`).
    """
    vals = torch.zeros(world_size, n_chunks, dtype=torch.int64)
    for r in range(world_size):
        for c in range(n_chunks):
            if primitive in ("all_gather", "gather"):
                v = teaching_value(r, 0, world_size) if c == r else 0
            elif primitive == "scatter":
                v = teaching_value(root, c, world_size) if r == root else 0
            else:
                v = teaching_value(r, c, world_size)
            vals[r, c] = v
    return vals.repeat_interleave(chunk_size, dim=1).to(_dtype(dtype))


_BUILTIN_NAME = {"all_to_all": "all_to_all_single"}


def _holds_input(primitive: str, rank: int, chunk: int, root: int) -> bool:
    """Whether chunk ``chunk`` of ``rank``'s starting buffer is an input (else an empty output slot)."""
    if primitive in ("all_gather", "gather"):
        return chunk == rank
    if primitive == "scatter":
        return rank == root
    return True


def _validate_backend(primitive: str, dt: torch.dtype, op: str, backend: str,
                      support: Callable[[], BackendSupport] | None = None) -> None:
    """Refuse (ValueError) a dtype or op that ``backend`` does not accept for ``primitive`` on real
    ranks (``support()``: what it accepts, for a launch planned already; default
    :func:`collnb.backend_support`)."""
    sup = support() if support is not None else backend_support(backend)
    name = _BUILTIN_NAME.get(primitive, primitive)
    dname = str(dt).replace("torch.", "")
    o = op if primitive in REDUCING_PRIMITIVES else None
    if sup.supports(name, dname, o):
        return
    valid_d = sup.dtypes(name)
    if dname not in valid_d:
        raise ValueError(_("{backend} cannot run {primitive} on {dtype} tensors (detected on real ranks); "
                           "dtypes it accepts: {valid}").format(backend=backend, primitive=name, dtype=dname,
                                                                valid=", ".join(valid_d)))
    valid_o = sup.ops(name, dname)
    why = op_hint(op, dname)
    raise ValueError(_("{backend} cannot reduce {dtype} with op {op} (detected on real ranks: "
                       "{error}).{hint} Valid ops for {dtype}: {valid}").format(
                           backend=backend, dtype=dname, op=op.upper(), error=sup.error(name, dname, o), hint=why,
                           valid=", ".join(x.upper() for x in valid_o)))


def prepare_case(primitive: str, algorithm: str | None, world_size: int, dtype: torch.dtype | str | None,
                 op: str | dist.ReduceOp | None, root: int | None, chunk_size: int, segments: int | None, inputs: Inputs,
                 snapshots: bool, compare: bool, backend: str, validate: bool = True,
                 ranks_per_node: int | None = None, *, support: Callable[[], BackendSupport] | None = None) -> Case:
    """Check one case of :func:`run_algorithms` and build what its ranks need, without starting
    any rank (the rounds explorer calls it to check its arguments before drawing a widget).

    Args: as :func:`run_algorithm` (``op``/``root`` ``None``: not given, as there;
    ``snapshots``, ``compare`` as bools; ``ranks_per_node`` the
    node map, needed by the tiered algorithms); ``validate``: ask
    :func:`collnb.backend_support` whether ``backend`` accepts the dtype and op (detected on real
    ranks once per process and backend, then cached; ``support``: that answer for a launch planned
    already, as :func:`run_algorithms` has it, so that the request is not checked again).

    Returns:
        :class:`Case`: ``schedule`` (:class:`Schedule`), ``inputs`` (``(world_size, count)`` tensor),
        ``bounds`` (chunk offsets), ``op`` (name), ``record``, ``compare`` (bools), ``dtype``
        (``torch.dtype``), ``chunk_size`` (int).

    Raises:
        TypeError / ValueError: as :func:`run_algorithm`, with :mod:`collnb.vocabulary`'s words.
    """
    check_backend(backend)
    check_arguments(get_spec(primitive), {"op": op, "root": root}, "collnb.run_algorithm", takes=_CALL_ARGUMENTS)
    algorithm = algorithm or default_algorithm(primitive)
    sched = schedule(primitive, algorithm, world_size, 0 if root is None else root, segments, ranks_per_node)
    dt = _dtype(dtype)
    opn = op_name("sum" if op is None else op)
    check_int("chunk_size", chunk_size, 1, 1 << 22, what="elements per chunk")
    if validate:
        _validate_backend(primitive, dt, opn, backend, support)
    C = sched.n_chunks
    count = C * chunk_size
    if inputs is None:
        inp = teaching_buffers(primitive, world_size, C, chunk_size, sched.root, dt)
    else:
        if callable(inputs):
            rows = [make_tensor([inputs(r, c) if _holds_input(primitive, r, c, sched.root) else 0
                                  for c in range(C)], chunk_size, dt) for r in range(world_size)]
            inp = torch.stack(rows)
        else:
            inp = torch.as_tensor(inputs)
            if inp.dtype != dt:
                inp = inp.to(dt)
        if tuple(inp.shape) != (world_size, count):
            raise ValueError(_("inputs must have shape (world_size, n_chunks * chunk_size) = ({world_size}, {count}) "
                               "for {primitive} at world size {world_size}; got {shape}. Or pass a "
                               "callable f(rank, chunk) -> value").format(
                                   world_size=world_size, count=count, primitive=primitive, shape=tuple(inp.shape)))
    return Case(schedule=sched, inputs=inp.contiguous(), bounds=chunk_bounds(count, C), op=opn,
                record=bool(snapshots), compare=bool(compare), dtype=dt, chunk_size=chunk_size)


def _make_trace(case: Case, results: Sequence[RankResult], backend: str, wall: float) -> Trace:
    """The :class:`Trace` of ``case`` from every rank's result (rank order), ``wall`` seconds in all."""
    sched = case["schedule"]
    n = sched.world_size
    snaps = None
    if case["record"]:
        snaps = torch.stack([snapshots(_given(results[r]["recording"])) for r in range(n)], dim=1)  # (R+1, ws, count)
    final = torch.stack([results[r]["final"] for r in range(n)])
    builtin = torch.stack([_given(results[r]["builtin"]) for r in range(n)]) if case["compare"] else None
    secs = [max(results[r]["seconds"][k] for r in range(n)) for k in range(sched.n_rounds)]
    return Trace.from_schedule(sched, inputs=case["inputs"], bounds=case["bounds"], op=case["op"],
                               dtype=case["dtype"], buffers=snaps, final=final, builtin=builtin,
                               round_seconds=secs, backend=backend, wall_seconds=wall)


def run_algorithm(primitive: str, algorithm: str | None = None, world_size: int = 4,
                  dtype: torch.dtype | str = torch.float32, op: str | dist.ReduceOp | None = None,
                  root: int | None = None, *,
                  chunk_size: int = 1, segments: int | None = None, inputs: Inputs = None, snapshots: bool = True,
                  compare: bool = True, backend: str = "gloo", timeout: float = 60.0, debug: bool = True,
                  ranks_per_node: int | None = None) -> Trace:
    """Run one collective algorithm on real ranks and return its :class:`collnb.Trace`.

    The ranks are launched with :func:`collnb.launch`; each runs the algorithm's
    schedule with ``isend``/``irecv`` on its own copy of the input and (``compare=True``) the
    built-in ``torch.distributed`` collective on the same input, in the same launch.

    Args:
        primitive: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ``"broadcast"``,
            ``"reduce"``, ``"scatter"``, ``"gather"`` or ``"all_to_all"``.
        algorithm: one of :func:`algorithms_for` ``(primitive)`` (default: the first).
        world_size: number of ranks, 1..16.
        dtype: ``torch.dtype`` or its name; must be one the backend accepts for the primitive
            (detected on real ranks by :func:`collnb.backend_support`).
        op: reduce op for all_reduce, reduce_scatter, reduce: sum (default), product, min, max, avg
            (floating dtypes), band/bor/bxor (integer and bool dtypes). Other primitives take no op:
            one given to them is refused, ``"sum"`` too (as :func:`collnb.run` refuses it).
        root: src/dst rank for broadcast, reduce, scatter, gather (default 0); refused, 0 too, for
            the others.
        chunk_size: elements per chunk (the buffer has ``n_chunks * chunk_size`` elements).
        segments: broadcast only: number of chunks (pipeline segments), default ``world_size``.
        inputs: ``None`` for the teaching inputs (:func:`teaching_buffers`), a
            ``(world_size, n_chunks * chunk_size)`` tensor/array, or a callable
            ``f(rank, chunk) -> number`` (every element of the chunk gets the value; it is called
            only for chunks that are inputs -- slot ``rank`` for all_gather/gather, the root's
            chunks for scatter -- and the other slots start at 0).
        snapshots: record every rank's buffer after every round (``Trace.buffers``); with
            ``False`` only the final buffers and the per-round times are kept.
        compare: also run the built-in collective and keep its result (``Trace.builtin``).
        backend, timeout, debug: passed to :func:`collnb.launch`.
        ranks_per_node: the node map (rank ``r`` on node ``r // ranks_per_node``): needed by the
            tiered algorithms (``"hierarchical"``, ``"ring_2d"``, ``"double_binary_tree"``,
            :mod:`collnb.algorithms.tiers`), kept in the trace by every algorithm (``Trace.meta``'s
            ``ranks_per_node``: the replay colours each transfer by the tier it crosses). Here the
            ranks all share this machine's loopback: the tiers are a map, not two speeds
            (:func:`collnb.cluster` gives them two).

    Returns:
        :class:`collnb.Trace`.

    Raises:
        ValueError / TypeError: unknown primitive, algorithm, dtype or op, a dtype/op the
            backend refuses, root or world size out of range, inputs of the wrong shape.
        collnb.RankError / LaunchTimeout: a rank failed or the launch timed out.
    """
    return run_algorithms([AlgorithmConfig(primitive=primitive, algorithm=algorithm, dtype=dtype, op=op, root=root,
                                           chunk_size=chunk_size, segments=segments, inputs=inputs,
                                           snapshots=snapshots, compare=compare, ranks_per_node=ranks_per_node)],
                          world_size, backend=backend, timeout=timeout, debug=debug)[0]


def run_algorithms(configs: Sequence[AlgorithmConfig], world_size: int, *, backend: str = "gloo",
                   timeout: float = 120.0, debug: bool = True, validate: bool = True) -> list[Trace]:
    """Run many algorithm cases at one world size in a single launch (what the tests use).

    Args:
        configs: dicts (:class:`AlgorithmConfig`) with the keyword arguments of :func:`run_algorithm` (``primitive`` required;
            ``algorithm``, ``dtype``, ``op``, ``root``, ``chunk_size``, ``segments``, ``inputs``,
            ``snapshots``, ``compare``, ``ranks_per_node`` optional).
        world_size, backend, timeout, debug: as for :func:`run_algorithm`.
        validate: check each dtype/op against what the backend accepts before launching.

    Returns:
        list of :class:`collnb.Trace`, one per config, in order.
    """
    allowed = {"primitive", "algorithm", "dtype", "op", "root", "chunk_size", "segments", "inputs", "snapshots",
               "compare", "ranks_per_node"}
    # the launch is checked once, here (world size, backend, seconds): the backend's answer about
    # dtypes and ops is read for it and it is run as planned, not checked again per case
    plan = ranks.plan_launch(world_size, backend, {"timeout": timeout, "debug": debug}, where="collnb.run_algorithms")
    answer: list[BackendSupport] = []

    def support() -> BackendSupport:
        if not answer:
            answer.append(support_for(plan))
        return answer[0]

    cases = []
    for cfg in configs:
        extra = set(cfg) - allowed
        if extra:
            raise TypeError(f"unknown keys {sorted(extra)} in config; allowed: {sorted(allowed)}")
        if "primitive" not in cfg:
            raise TypeError("each config needs a 'primitive'")
        cases.append(prepare_case(cfg["primitive"], cfg.get("algorithm"), world_size, cfg.get("dtype", torch.float32),
                                  cfg.get("op"), cfg.get("root"), cfg.get("chunk_size", 1),
                                  cfg.get("segments"), cfg.get("inputs"), cfg.get("snapshots", True),
                                  cfg.get("compare", True), backend, validate, cfg.get("ranks_per_node"),
                                  support=support))
    ship = [RankCase(schedule=c["schedule"], inputs=c["inputs"], bounds=c["bounds"], op=c["op"], record=c["record"],
                     compare=c["compare"]) for c in cases]
    t0 = time.perf_counter()
    results = ranks.launch_planned(plan, _rank_run_cases, (ship,))
    wall = time.perf_counter() - t0
    return [_make_trace(c, [results[r][i] for r in range(world_size)], backend, wall / len(cases))
            for i, c in enumerate(cases)]



def _given(value: T | None) -> T:
    """``value``, which a rank gave because the case asked for it (a recording, the built-in's result)."""
    assert value is not None
    return value


# Public names of the pieces other layers run on ranks they start themselves (a virtual cluster's
# ranks, collnb.labs.cluster): the same functions as run_algorithms' own.
#: ``builtin_result(primitive, rank, world_size, inp, op, root, n_chunks)``: the built-in
#: torch.distributed collective on this rank's input, laid out like the working buffer.
builtin_result = _builtin
#: ``rank_run_cases(rank, world_size, cases)``: the rank side of :func:`run_algorithms`.
rank_run_cases = _rank_run_cases
#: ``make_trace(case, results, backend, wall)``: a :class:`collnb.Trace` from the ranks' results.
make_trace = _make_trace
