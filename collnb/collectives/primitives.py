"""Run primitives on real ranks: :func:`run` (one) and :func:`run_batch` (several in one launch).

``run("all_reduce", world_size=4)`` checks every argument before anything starts, starts (or
reuses) ``world_size`` warm ranks through :func:`collnb.ranks.launch`, gives every rank its
teaching input (:mod:`.inputs`), has it make the primitive's one call (:mod:`.rank_calls`) and
returns a :class:`~.result.RunResult`: each rank's buffer before and after, the reference
computed here without ``torch.distributed`` (:mod:`.expected`), which outputs the primitive
defines and whether they agree. Which dtypes and ops a backend accepts is detected on real ranks
(:mod:`.support`), never taken from a document.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

import torch

from .. import ranks
from ..i18n import N_, _
from ..vocabulary import check_int, check_rank, dtype_name, op_hint, op_name
from .inputs import check_input_values, check_inputs
from .rank_calls import Case, rank_cases
from .expected import reference_of, tolerance
from .result import RunResult
from .specs import CALL_ARGUMENTS, SPECS, check_arguments, get_spec
from .support import BackendSupport, known_for, support_for

if TYPE_CHECKING:
    import torch.distributed as dist
    from typing_extensions import Unpack

    from ..ranks import LaunchOptions

__all__ = ["run", "run_batch", "MAX_CHUNK_SIZE"]

#: The most elements one chunk may hold (4 Mi: 16 MiB of float32 per chunk and rank).
MAX_CHUNK_SIZE = 1 << 22

#: A run's ``inputs``: ``None`` (the teaching inputs), per rank a sequence of chunk values, or
#: ``f(rank, chunk) -> number`` (:func:`~.inputs.check_inputs`).
Inputs = Iterable[Iterable[object]] | Callable[[int, int], object] | None

#: One buffer of a rank as :func:`~.rank_calls.rank_cases` returns it (on the CPU once launched).
_Buffer = torch.Tensor | list[object]


def _prepare(primitive: object, world_size: int, given: Mapping[str, object], backend: str,
             support_getter: Callable[[], BackendSupport | None], where: str = "collnb.run") -> Case:
    """Validate one request before anything is launched (``world_size`` and ``backend`` are
    checked already; ``given`` holds the :data:`~.specs.CALL_ARGUMENTS` as a learner gave them,
    ``None`` or absent where not given, every check in :mod:`collnb.vocabulary` words); returns the
    case the ranks run (see :mod:`.rank_calls`). An argument the primitive does not use is refused
    (:func:`~.specs.check_arguments`); one it uses and was not given takes its default (float32,
    sum, root 0, one element per chunk, the teaching inputs)."""
    spec = get_spec(primitive)
    name = spec.name
    check_arguments(spec, given, where)

    def value(key: str, default: object) -> object:
        v = given.get(key)
        return default if v is None else v

    dtype, op, inputs = value("dtype", torch.float32), value("op", "sum"), given.get("inputs")
    root = check_rank(value("root", 0), world_size, "root")
    chunk_size = check_int("chunk_size", value("chunk_size", 1), 1, MAX_CHUNK_SIZE, what=N_("elements per chunk"))
    opn = op_name(op)
    dname = dtype_name(dtype)
    table = check_inputs(_checked_inputs_type(inputs), spec, world_size, root)
    sup = support_getter() if spec.kind in ("tensor", "object") else None  # None: not known, not checked
    if spec.kind == "tensor" and sup is not None:
        if not sup.supports(name, dname, opn if spec.reduces else None):
            valid_d = sup.dtypes(name)
            if dname not in valid_d:
                err = sup.error(name, dname, opn if spec.reduces else None)
                raise ValueError(
                    _("{backend} cannot run {primitive} on {dtype} tensors (detected on real ranks, torch "
                      "{version}: {error}); dtypes {primitive} accepts on {backend}: {valid}").format(
                          backend=backend, primitive=name, dtype=dname, version=sup.torch_version, error=err,
                          valid=", ".join(valid_d)))
            valid_o = sup.ops(name, dname)
            raise ValueError(
                _("{backend} cannot reduce {dtype} with op {op} in {primitive} (detected on real ranks, "
                  "torch {version}: {error}).{hint} Valid ops for {dtype}: {valid}").format(
                      backend=backend, dtype=dname, op=opn.upper(), primitive=name, version=sup.torch_version,
                      error=sup.error(name, dname, opn), hint=op_hint(opn, dname),
                      valid=", ".join(o.upper() for o in valid_o)))
    if spec.kind == "tensor":
        check_input_values(table, dname)
    elif spec.kind == "object" and sup is not None:
        if not sup.supports(name):
            raise ValueError(_("{backend} cannot run {primitive} here (detected: {error})").format(
                backend=backend, primitive=name, error=sup.error(name)))
    return Case(primitive=name, dtype=dname, op=opn, root=root, chunk_size=chunk_size, inputs=table)


def _checked_inputs_type(inputs: object) -> Inputs:
    """``inputs`` if it is ``None``, a callable ``f(rank, chunk)`` or an iterable (list, tuple,
    array) of per-rank iterables of chunk values; a str, bytes, dict or set is none of these
    (iterating it would give characters or keys).

    Raises:
        TypeError: any other type, or a row of those types, in the vocabulary's words.
    """
    if inputs is None or callable(inputs):
        return inputs
    if isinstance(inputs, (str, bytes, dict, set, frozenset)) or not isinstance(inputs, Iterable):
        raise TypeError(_("inputs must be a list of lists or a callable; got {type} {value} (one list of chunk "
                          "values per rank, or f(rank, chunk) -> number)").format(
                              type=type(inputs).__name__, value=repr(inputs)))
    for r, row in enumerate(inputs):
        if isinstance(row, (str, bytes, dict, set, frozenset)) or not isinstance(row, Iterable):
            raise TypeError(_("inputs must be a list of lists or a callable; got inputs[{r}] = {value}, a {type} "
                              "(one list of chunk values per rank, or f(rank, chunk) -> number)").format(
                                  r=r, value=repr(row), type=type(row).__name__))
    return inputs


def _finish(case: Case, world_size: int, backend: str, before: list[_Buffer], after: list[_Buffer],
            seconds: float) -> RunResult:
    """The :class:`~.result.RunResult` of one case from the ranks' ``before``/``after`` buffers:
    reference, tolerance and verdict (``barrier``: times made relative, in ms)."""
    spec = SPECS[case["primitive"]]
    cs, root, op = case["chunk_size"], case["root"], case["op"]
    dt: torch.dtype = getattr(torch, case["dtype"])
    expected: list[torch.Tensor | list[object] | None]
    exact: list[torch.Tensor | None]
    if spec.kind == "time":  # barrier: float64 tensors of seconds (rank_calls._r_barrier)
        arrive, leave = cast(list[torch.Tensor], before), cast(list[torch.Tensor], after)
        t0 = min(float(b[0]) for b in arrive)
        before = [(b - t0) * 1000.0 for b in arrive]
        after = [(a - t0) * 1000.0 for a in leave]
        last = (max(float(b[0]) for b in arrive) - t0) * 1000.0
        expected = [torch.tensor([last], dtype=torch.float64) for _ in range(world_size)]
        exact = [None] * world_size
        defined = [True] * world_size
        sources = [[spec.sources(world_size, r, root, 0)] for r in range(world_size)]
        rtol = 0.0
    else:
        expected, exact, defined, sources = reference_of(spec, world_size, case["inputs"],
                                                         dt if spec.kind == "tensor" else None,
                                                         op if spec.reduces else "", root, cs)
        rtol = tolerance(spec, dt if spec.kind == "tensor" else None, op if spec.reduces else None,
                          world_size)
    result = RunResult(
        primitive=case["primitive"], world_size=world_size,
        dtype=(dt if spec.kind == "tensor" else (torch.float64 if spec.kind == "time" else None)),
        op=op if spec.reduces else None, root=root if spec.rooted else None, backend=backend,
        chunk_size=cs, before=list(before), after=list(after), expected=expected, expected_f64=exact,
        defined=defined, sources=sources, mismatch=[], tolerance=rtol, ok=False, seconds=seconds,
        inputs=case["inputs"])
    result.check()
    return result


def run_batch(configs: Sequence[Mapping[str, object]], world_size: int = 4, backend: str = "gloo", *,
              check_support: bool = True, **launch_kwargs: Unpack[LaunchOptions]) -> list[RunResult]:
    """Run several primitives at one world size in ONE launch (they run one after another on the
    same ranks). Each config is a dict of :func:`run` keyword arguments (``primitive`` required;
    ``dtype``, ``op``, ``root``, ``chunk_size``, ``inputs`` optional, and only those the primitive
    uses, as for :func:`run`). Every config is validated before anything is launched.

    Each dtype/op is checked against what is known without probing (:func:`~.support.known_support`: the
    answer kept in this process or saved on disk). Where nothing is known yet (the first run after an
    install, every fresh Colab or Binder session) the batch runs without waiting for the backend probe
    (2-4 s on 2 cores), so the first picture comes at the cost of one launch. Only when a rank then
    fails does ``check_support=True`` (the default) probe the backend and, when the probe says it refuses
    a requested dtype/op, raise the same ValueError a known answer gives before the launch (chained
    from the rank's error); otherwise the rank's error is raised. ``check_support=False`` never probes:
    the backend's own error comes back as a :class:`collnb.ranks.RankError` (the explorer, which runs
    the probe itself right after its first picture).

    Returns:
        list of :class:`~.result.RunResult`, one per config, in order (``seconds`` is the shared launch time).

    Raises:
        as :func:`run`.
    """
    try:
        plan = ranks.plan_launch(world_size, backend, launch_kwargs, where="collnb.run_batch")
    except (TypeError, ValueError) as exc:
        raise _short(exc) from None
    return _run_planned(configs, plan, check_support, "collnb.run_batch")


def _cases_of(configs: object, world_size: int, backend: str, get_support: Callable[[], BackendSupport | None],
              where: str) -> tuple[list[Case], list[tuple[object, dict[str, object]]]]:
    """The checked cases of ``configs`` (and what each asked: to check again after a probe). Raises
    TypeError/ValueError as :func:`run` says."""
    cases: list[Case] = []
    asked: list[tuple[object, dict[str, object]]] = []  # (primitive, its other keys): to check again after a probe
    if not isinstance(configs, (list, tuple)):
        raise TypeError(_("configs must be a list of dicts such as [{example}] (for one primitive, collnb.run({value}) "
                          "if it is a name); got the {type} {value}").format(
                              example="{'primitive': 'all_reduce', 'dtype': 'int8'}", value=repr(configs),
                              type=type(configs).__name__))
    for cfg in configs:
        if not isinstance(cfg, dict):
            raise TypeError(_("run_batch takes a list of dicts such as {example}; got {value} in the list").format(
                example="{'primitive': 'all_reduce', 'dtype': 'int8'}", value=repr(cfg)))
        given = dict(cfg)
        try:
            primitive = given.pop("primitive")
        except KeyError:
            raise ValueError(_("each config needs a 'primitive' key; got {value}").format(value=repr(given))) from None
        unknown = set(given) - set(CALL_ARGUMENTS)
        if unknown:
            raise TypeError(_("unknown config keys {keys}; use {names}").format(
                keys=sorted(unknown), names=", ".join(CALL_ARGUMENTS)))
        asked.append((primitive, given))
        cases.append(_prepare(primitive, world_size, given, backend, get_support, where))
    return cases, asked


def _short(exc: BaseException) -> BaseException:
    """``exc``, a refusal of the learner's arguments, without collnb's frames: its message says what was wrong
    and what to pass, and a notebook showed it under two screens of checks inside collnb. Raise it ``from
    None``: the learner's cell and the entry point stay in the traceback."""
    return exc.with_traceback(None)


def _run_planned(configs: Sequence[Mapping[str, object]], plan: ranks.LaunchPlan, check_support: bool,
                 where: str = "collnb.run") -> list[RunResult]:
    """:func:`run_batch` of a launch planned (checked) where it entered (``where``, named in a
    refusal): the configs are checked
    against ``plan``'s world size and backend, then run in one launch of ``plan``."""
    world_size, backend = plan.world_size, plan.setup.backend
    support: BackendSupport | None = None

    def get_support() -> BackendSupport | None:
        nonlocal support
        if support is None:
            support = known_for(backend)  # never probes: see run_batch's docstring
        return support

    try:
        cases, asked = _cases_of(configs, world_size, backend, get_support, where)
    except (TypeError, ValueError) as exc:
        raise _short(exc) from None
    if not cases:
        return []
    t0 = time.perf_counter()
    try:
        per_rank = ranks.launch_planned(plan, rank_cases, (cases, backend))
    except ranks.RankError:
        if check_support and support is None:  # nothing was known: did the backend refuse what was asked?
            probed = support_for(plan)
            for primitive, given in asked:  # raises the ValueError a known answer gives before a launch
                try:
                    _prepare(primitive, world_size, given, backend, lambda: probed, where)
                except ValueError as refused:  # it says what the ranks hit ("detected on real ranks"):
                    raise _short(refused) from None  # the same words, as short, as a refusal known before
        raise
    seconds = time.perf_counter() - t0
    results: list[RunResult] = []
    for i, case in enumerate(cases):
        before = [per_rank[r][i][0] for r in range(world_size)]
        after = [per_rank[r][i][1] for r in range(world_size)]
        results.append(_finish(case, world_size, backend, before, after, seconds))
    return results


def run(primitive: str, world_size: int = 4, dtype: torch.dtype | str | None = None,
        op: str | dist.ReduceOp | dist.ReduceOp.RedOpType | None = None, root: int | None = None,
        backend: str = "gloo", chunk_size: int | None = None, inputs: Inputs = None, *, check_support: bool = True,
        **launch_kwargs: Unpack[LaunchOptions]) -> RunResult:
    """Run one primitive on ``world_size`` real ranks and check it against the reference.

    Each rank builds its own teaching input (rank ``r``, chunk ``c`` holds ``10*r + c``; see
    :mod:`collnb.collectives.inputs`), copies it (``before``), makes the one ``torch.distributed`` call of
    :data:`~.specs.SPECS` ``[primitive].call`` and returns its buffers (``after``); everything happens in
    a single :func:`collnb.ranks.launch`.

    ``dtype``, ``op``, ``root``, ``chunk_size`` and ``inputs`` describe the call: give only those the
    primitive uses (:attr:`PrimitiveSpec.arguments <collnb.collectives.PrimitiveSpec.arguments>`: a
    reduce op only to a reducing primitive, a root only to a rooted one, neither a dtype nor a chunk
    size to the object primitives, nothing to ``barrier``). Any other is refused before a rank
    starts, its default value too (``root=0`` for ``all_reduce``, as ``dist.all_reduce(t, src=0)``
    would be): every argument a call shows changes what it does. ``None`` means not given.

    Args:
        primitive: one of :data:`~.specs.PRIMITIVES`. ``send_recv`` is a ring shift: every rank sends its
            buffer to ``(rank+1) % world_size`` and receives from ``(rank-1) % world_size`` with
            ``batch_isend_irecv`` (nothing moves at world size 1). ``barrier``: rank ``r``
            arrives ``30*r`` ms late; before/after are arrival/departure times in ms.
        world_size: 1..16 (for NCCL at most the visible GPU count).
        dtype: ``torch.dtype`` or its name (``"float16"``, aliases ``"fp16"``/``"half"``...); default
            float32. Tensor primitives only (the object primitives send strings).
        op: reduce op name (``"sum"``, ``"product"``, ``"min"``, ``"max"``, ``"avg"``, ``"band"``,
            ``"bor"``, ``"bxor"``) or a ``dist.ReduceOp``; default sum. Reducing primitives only.
        root: the ``src``/``dst`` rank (0..world_size-1); default 0. Rooted primitives only.
        backend: ``"gloo"`` or ``"nccl"``.
        chunk_size: elements per chunk (every element of a chunk holds the chunk's value); default 1.
            Tensor primitives only.
        inputs: optional own values instead of the teaching inputs: per rank a list of chunk
            values (as many as :func:`~.inputs.teaching_inputs` gives that rank), or a callable
            ``f(rank, chunk) -> number`` (e.g. ``lambda r, c: 100`` to see int8 SUM wrap).
            Every primitive but ``barrier``.
        check_support: ``False``: do not wait for a backend probe (see :func:`run_batch`).
        launch_kwargs: passed to :func:`collnb.ranks.launch` (``timeout`` s,
            ``collective_timeout`` s, ``debug``, ``start_method``).

    Returns:
        :class:`~.result.RunResult` (displays as its heatmap in a notebook).

    Raises:
        TypeError: before anything is launched, for an argument of the wrong type (a primitive,
            backend or dtype that is not a name, an op given as a number, a world size, root or
            chunk size that is not an int, ``inputs`` neither a list of lists nor a callable, a
            ``run_batch`` ``configs`` that is not a list of dicts, a launch option that is not one of
            :class:`collnb.ranks.LaunchOptions`: :func:`collnb.ranks.check_launch_options`); the
            words are :mod:`collnb.vocabulary`'s, as everywhere in collnb.
        ValueError: before anything is launched, for an unknown primitive/dtype/op/backend, a
            world size outside 1..16 (for NCCL: the visible GPUs), a root outside
            0..world_size-1, a chunk size outside 1..4194304, an argument the primitive does not
            use (:func:`~.specs.check_arguments`: the message names it, the primitive and the
            arguments it uses), or a dtype/op combination the backend refused when probed
            (e.g. Gloo: AVG on integer dtypes, BAND/BOR/BXOR on floats, float8 and int16
            dtypes) -- the message lists the valid choices. Before the first probe after an install,
            that last one comes after the launch whose rank failed (see :func:`run_batch`).
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA), with the reason.
        collnb.ranks.RankError / LaunchTimeout: a rank failed or the launch timed out.
    """
    try:
        plan = ranks.plan_launch(world_size, backend, launch_kwargs, where="collnb.run")
    except (TypeError, ValueError) as exc:
        raise _short(exc) from None
    cfg = dict(primitive=primitive, dtype=dtype, op=op, root=root, chunk_size=chunk_size, inputs=inputs)
    return _run_planned([cfg], plan, check_support, "collnb.run")[0]
