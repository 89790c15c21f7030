"""Checks of notebook 12 (DeviceMesh and DTensor): predicting the collective a placement change
issues, choosing the placements for a goal, and writing the redistribute that turns a Partial into
row shards. Each runs on real ranks and looks at the local shard every rank ends with and at every
operation it issued (recorded where torch dispatched it, as every check records)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import numpy.typing as npt
import torch

from ... import placements
from ...i18n import _
from .framework import Case, Trial, check, check_prediction, fail, not_answered, passed, summary, table, world_sizes

#: Names a learner may use for a collective -> the torch.distributed collective it is.
_COLLECTIVES = {"all_gather": "all_gather", "all_gather_into_tensor": "all_gather", "allgather": "all_gather",
                "all_reduce": "all_reduce", "allreduce": "all_reduce", "reduce_scatter": "reduce_scatter",
                "reduce_scatter_tensor": "reduce_scatter", "reducescatter": "reduce_scatter",
                "all_to_all": "all_to_all", "all_to_all_single": "all_to_all", "alltoall": "all_to_all",
                "broadcast": "broadcast", "none": "none", "nothing": "none"}


def _collective(name: object) -> str:
    """The torch.distributed collective a learner's ``name`` means (``"dist.allgather"`` -> ``"all_gather"``).

    Raises:
        KeyError: not a collective's name.
    """
    key = str(name).strip().lower().removeprefix("dist.").replace("-", "_").replace(" ", "_")
    return _COLLECTIVES[key]


# ----------------------------------------------------------------------------------------------
# Predict: which collective, over which mesh dimension


def check_collective_prediction(prediction: object, *, shape: object = (4, 6), mesh: object = (2, 2),
                                src: object = "S(0),R", dst: object = "R,R") -> None:
    """Check a prediction ``(collective, mesh dim)`` for ``src -> dst`` on ``mesh`` (by default
    ``(S(0), R) -> (R, R)`` on a 2x2 mesh, a change notebook 12 does not run before asking):
    ``collective`` is a name (``"all_gather"``, ``"all_reduce"``, ``"reduce_scatter"``,
    ``"all_to_all"``, or ``"none"``), ``mesh dim`` an int (``None`` with ``"none"``). The check runs
    :func:`collnb.redistribute` on real ranks and compares with the one step each rank issued.

    Raises:
        CheckFailed: a wrong or malformed prediction, with a hint (never the right answer).
    """
    mesh_shape = placements.parse_mesh(mesh)

    def normalise(p: object) -> tuple[str, int | None]:
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise ValueError
        given, dim = p
        name = _collective(given)
        if name != "none" and not (isinstance(dim, int) and 0 <= dim < len(mesh_shape)):
            raise ValueError
        return name, (None if name == "none" else dim)

    def real() -> tuple[str, int | None] | tuple[tuple[str, int | None], ...]:
        res = placements.redistribute(shape, mesh, src=src, dst=dst, repeats=0)
        steps = {(_collective(c.operation), _mesh_dim(c.group_ranks, res.mesh_ranks)) for recs in res.calls
                 for c in recs}
        if not steps:
            return ("none", None)
        return steps.pop() if len(steps) == 1 else tuple(sorted(steps, key=str))

    check_prediction("prediction", prediction, real, normalise=normalise,
                     direction=_('Which mesh dimension does the change touch (compare src and dst dim by dim)? What does '
                                 "that dimension's Shard become: what does every rank of that dimension need from the "
                                 'others?'),
                     hint=_('write a pair such as ("all_reduce", 1): the collective torch issues and the mesh dimension '
                            'whose ranks take part. Only the dimensions whose placement changes communicate; a Shard that '
                            "becomes Replicate needs every rank's piece."),
                     passed=_('right: the collective and the mesh dimension the ranks used'),
                     what=_(' (collective name, mesh dim)'))


def _mesh_dim(group_ranks: Sequence[int], mesh_ranks: npt.ArrayLike) -> int | None:
    """The mesh dimension whose ranks (through the rank of ``group_ranks[0]``) are ``group_ranks``,
    in a mesh whose global ranks are ``mesh_ranks`` (nested lists, one level per mesh dimension);
    ``None`` when no dimension's are."""
    import numpy as np  # noqa: PLC0415
    arr = np.asarray(mesh_ranks)
    where = np.argwhere(arr == group_ranks[0])[0]
    for d in range(arr.ndim):
        index = tuple(slice(None) if e == d else int(where[e]) for e in range(arr.ndim))
        if sorted(arr[index].ravel().tolist()) == sorted(group_ranks):
            return d
    return None


# ----------------------------------------------------------------------------------------------
# Choose the placements for a goal


def check_dp_tp_placements(dst: object) -> None:
    """Check ``dst`` (notebook 12): the placements, one per mesh dimension (``("dp", "tp")``), that
    turn a weight held as ``(Shard(0), Shard(1))`` into the layout every data-parallel replica needs
    for tensor parallelism: rank ``(i, j)`` holds **every row** and **its tensor-parallel slice of
    the columns** (column chunk ``j`` of ``mesh[1]``).

    Runs :func:`collnb.redistribute` with the learner's ``dst`` on real ranks on two meshes (2x2 and
    2x3, 4 and 6 ranks), compares every rank's local tensor with the column slice cut from the global
    tensor by hand, and checks the recorded collectives: the goal needs one all_gather per rank, over
    the data-parallel dimension (mesh dim 0).

    Raises:
        CheckFailed: a wrong answer, with a per-rank table and a hint.
    """
    direction = (_('Go dimension by dimension: along dp (mesh dim 0) every rank needs all the rows; along tp (mesh dim '
                   "1) each rank keeps its own columns. Which placement says 'every rank has it all', which 'split "
                   "along tensor dim 1'?"))
    if dst is None:
        return not_answered("dst", direction, what=_('Set `dst` in the exercise cell above'))
    try:
        placements.parse_placements(dst, 2, 2, name="dst")
    except (TypeError, ValueError) as exc:
        raise fail(_('dst {dst!r} is not two placements: {exc}').format(dst=dst, exc=exc), _('write two placements, e.g. ("S(0)", "R").')) \
            from None
    shown = ""
    for mesh, shape in (((2, 2), (4, 6)), ((2, 3), (4, 6))):
        try:
            res = placements.redistribute(shape, mesh, src=("S(0)", "S(1)"), dst=dst, repeats=0)
        except (TypeError, ValueError) as exc:
            raise fail(_('mesh {mesh}: {exc}').format(mesh=placements.mesh_text(mesh), exc=exc), direction) from None
        values = placements.teaching_values(shape)
        cols = shape[1] // mesh[1]
        rows, bad = [], []
        for s in res.shards:
            want = values[:, s.coord[1] * cols:(s.coord[1] + 1) * cols]
            got = None if s.after is None else s.after.double().numpy()
            ok = got is not None and got.shape == want.shape and (got == want).all()
            bad += [] if ok else [s.rank]
            rows.append((s.rank, s.coord, "refused" if got is None else tuple(got.shape), want.shape,
                         summary(res.calls[s.rank]) if res.calls[s.rank] else "(none)", "✓" if ok else "✗"))
        shown = table(rows, (_('rank'), _('mesh (dp, tp)'), _('holds'), _('needs'), _('collectives'), ""))
        if res.refused:
            raise fail(_('mesh {mesh}: torch refused: {res_refused}').format(mesh=placements.mesh_text(mesh), res_refused=res.refused), direction, shown)
        if bad:
            raise fail(_('mesh {mesh}: rank(s) {bad} do not hold every row of their column slice.').format(mesh=placements.mesh_text(mesh), bad=bad), direction, shown)
        for s in res.shards:
            steps = [(c.operation, _mesh_dim(c.group_ranks, res.mesh_ranks)) for c in res.calls[s.rank]]
            if steps != [("all_gather_into_tensor", 0)]:
                raise fail(_('mesh {mesh}: rank {s_rank} issued {steps}; the goal needs one all_gather over the '
                             'data-parallel dimension.').format(mesh=placements.mesh_text(mesh), s_rank=s.rank, steps=steps), direction, shown)
    passed(_('every rank holds all the rows of its tensor-parallel columns, after one all_gather over dp (meshes 2×2 '
             'and 2×3)'), shown)


# ----------------------------------------------------------------------------------------------
# Write the redistribute: a Partial becomes row shards


def _rank_contribution(rng: random.Random, rows: int, cols: int) -> torch.Tensor:
    """A ``(rows, cols)`` float32 tensor of random integers in -50..50."""
    return torch.tensor([[float(rng.randint(-50, 50)) for _ in range(cols)] for _ in range(rows)])


def check_partial_to_row_shards(to_row_shards: object) -> None:
    """Check ``to_row_shards(rank, world_size, local)`` (notebook 12): on a 1-D mesh of every rank,
    ``local`` is this rank's contribution to a pending sum (what a row-parallel matmul leaves: a
    ``Partial()`` DTensor's local tensor), a random float32 ``(rows, 3)`` tensor only this rank knows.
    Every rank must return its rows of the **sum** (``Shard(0)``: ``torch.chunk`` of the rows over the
    ranks), computed with DTensor: one ``reduce_scatter`` issued by DTensor, nothing else (an
    ``all_reduce`` moves every row to every rank; a ``dist.*`` call is not DTensor).

    Two launches: random world sizes (2-4), random row counts: the first not divisible by the world size
    (uneven shards), the second divisible.

    Raises:
        CheckFailed: a wrong answer, with a per-rank table and a hint.
    """
    direction = (_('Wrap `local` as a DTensor with the placement it really has (DTensor.from_local on a 1-D '
                   "init_device_mesh), then ask for the placement you want; to_local() gives this rank's piece."))

    def cases(rng: random.Random) -> Iterator[Case[tuple[list[torch.Tensor], int]]]:
        for i, ws in enumerate(world_sizes(rng, 2, 4)):
            # the first launch uneven (a row count the world size does not divide), the second even
            rows = ws * rng.randint(1, 2) + rng.randint(1, ws - 1) if i == 0 else ws * rng.randint(1, 3)
            parts = [_rank_contribution(rng, rows, 3) for _ in range(ws)]
            total = torch.stack(parts).sum(0)
            want = list(torch.chunk(total, ws, dim=0)) + [total[:0]] * (ws - len(torch.chunk(total, ws, dim=0)))
            yield Case(ws, [(p,) for p in parts], want=(want, rows), what=_('world size {world_size}').format(world_size=ws))

    def judge(t: Trial[tuple[list[torch.Tensor], int]]) -> None:
        (want, rows), ws = t.want, t.world_size
        out = []
        for r in t.ranks:
            got = t.results[r]
            ok = isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want[r].shape) and \
                torch.equal(got.to(torch.float32), want[r])
            out.append((r, tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__,
                        tuple(want[r].shape), t.summary(r), "✓" if ok else "✗"))
        t.show(out, (_('rank'), _('returned'), _('rows of the sum'), _('calls'), ""))
        for r in t.ranks:
            names = [(c.name, c.source) for c in t.calls[r]]
            if any(src != "DTensor" for _, src in names):
                raise t.fail(_('world size {world_size}: rank {r} made {calls_r}; this exercise asks for DTensor to do '
                               'the communication.').format(world_size=ws, r=r, calls_r=t.summary(r)))
            if [n for n, _ in names] != ["reduce_scatter_tensor"]:
                raise t.fail(_('world size {world_size}: rank {r} issued {calls_r}: every rank needs only its own rows '
                               'of the sum.').format(world_size=ws, r=r, calls_r=t.summary(r)), _('a Partial can become a Shard in one step; going through Replicate sends every row to every rank. ') + direction)
        bad = [row[0] for row in out if row[-1] == "✗"]
        if bad:
            raise t.fail(_('world size {world_size}, {rows} rows: rank(s) {bad} did not return their rows of the sum '
                           '(torch.chunk of the rows over the ranks).').format(world_size=ws, rows=rows, bad=bad))

    check(to_row_shards, "to_row_shards(rank, world_size, local)", direction=direction, cases=cases, judge=judge,
          passed=_('every rank returned its rows of the sum through one DTensor reduce_scatter (world sizes {first_size} '
                   'and {second_size}, random contributions, uneven rows included)'))


# ----------------------------------------------------------------------------------------------
# Choose the placements of a matmul on a 2-D mesh: rows over dp, the inner dimension over tp

#: The ``(dp, tp)`` meshes the check draws from (4 and 6 ranks).
_DP_TP_MESHES = ((2, 2), (2, 3), (3, 2))


def _integers(rng: random.Random, rows: int, cols: int) -> torch.Tensor:
    """Small random integers as float64: sums of their products are exact whatever the order."""
    return torch.tensor([[float(rng.randint(-9, 9)) for _ in range(cols)] for _ in range(rows)], dtype=torch.float64)


def check_dp_tp_matmul(dp_tp_matmul: object) -> None:
    """Check ``dp_tp_matmul(rank, world_size, dp, tp, x, w)`` (notebook 12): ``Y = X @ W`` on a
    ``(dp, tp)`` device mesh with DTensor, every rank returning **its data-parallel rows of ``Y``,
    every column** (``Y`` as ``(Shard(0), Replicate())``).

    Rank ``r`` sits at mesh coordinate ``(i, j) = divmod(r, tp)`` (``init_device_mesh``'s row-major
    order). ``x`` (float64, ``(n/dp, k/tp)``) is its block of ``X (n, k)``: row chunk ``i``, column
    chunk ``j``; ``w`` (float64, ``(k/tp, m)``) is row chunk ``j`` of ``W (k, m)``, the same on the
    ranks of one tp position. Both are random integers, each block known only to the ranks holding
    it, so no rank can compute its rows of ``Y`` alone. The inner dimension is split over tp, so the
    matmul leaves a partial sum over mesh dim 1; the answer must let DTensor issue the one collective
    that resolves it: every rank exactly one ``all_reduce`` issued by DTensor over its tp group (mesh
    dim 1), nothing else (``dist.*`` calls, gathering over dp, or a redistribution before the matmul
    are refused). Two launches on two of the meshes ``2×2``, ``2×3``, ``3×2`` drawn at random, with
    random ``n``, ``k``, ``m``.

    Raises:
        CheckFailed: a wrong answer, with a per-rank table and a hint.
    """
    direction = _('Wrap each local block with the placements it really has on a (dp, tp) mesh, one placement per '
                  'mesh dimension: along dp, x holds a chunk of the rows and w is the same on every rank; along tp, '
                  'x holds a chunk of the columns and w the matching rows. What does the matmul leave along tp, and '
                  'which placements of Y does every rank need?')

    def cases(rng: random.Random) -> Iterator[Case[tuple[tuple[int, int], tuple[torch.Tensor, ...]]]]:
        for dp, tp in rng.sample(_DP_TP_MESHES, 2):
            ws = dp * tp
            n, k, m = dp * rng.randint(1, 2), tp * rng.randint(1, 2), rng.randint(2, 4)
            x, w = _integers(rng, n, k), _integers(rng, k, m)
            args = [(dp, tp, x.chunk(dp, 0)[r // tp].chunk(tp, 1)[r % tp].clone(), w.chunk(tp, 0)[r % tp].clone())
                    for r in range(ws)]
            yield Case(ws, args, want=((dp, tp), (x @ w).chunk(dp, 0)),
                       what=_('mesh {mesh}').format(mesh=placements.mesh_text((dp, tp))))

    def judge(t: Trial[tuple[tuple[int, int], tuple[torch.Tensor, ...]]]) -> None:
        (dp, tp), want = t.want
        mesh = placements.mesh_text((dp, tp))
        rows = []
        for r in t.ranks:
            got = t.results[r]
            ok = isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want[r // tp].shape) and \
                torch.equal(got.to(torch.float64), want[r // tp])
            rows.append((r, divmod(r, tp), tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__,
                         tuple(want[r // tp].shape), t.summary(r), "✓" if ok else "✗"))
        t.show(rows, (_('rank'), _('mesh (dp, tp)'), _('returned'), _('rows of Y'), _('calls'), ""))
        mesh_ranks = [[a * tp + b for b in range(tp)] for a in range(dp)]
        for r in t.ranks:
            if any(c.source != "DTensor" for c in t.calls[r]):
                raise t.fail(_('mesh {mesh}: rank {r} made {calls_r}; this exercise asks for DTensor to do the '
                               'communication.').format(mesh=mesh, r=r, calls_r=t.summary(r)))
            steps = [(c.name, _mesh_dim(c.group_ranks, mesh_ranks)) for c in t.calls[r]]
            if steps != [("all_reduce", 1)]:
                raise t.fail(_('mesh {mesh}: rank {r} issued {calls_r}; the goal needs one collective, over mesh dim '
                               '1 (tp).').format(mesh=mesh, r=r, calls_r=t.summary(r)),
                             _('placements that match what each rank holds make the matmul itself local; only the partial '
                               'sum it leaves along tp needs communication, and every rank keeps its own dp rows. ')
                             + direction)
        bad = [row[0] for row in rows if row[-1] == "✗"]
        if bad:
            raise t.fail(_('mesh {mesh}: rank(s) {bad} did not return their dp rows of X @ W, every column.').format(
                mesh=mesh, bad=bad))

    # one record per operation (grouped, a full_tensor()'s all_reduce and all_gather would be one call)
    check(dp_tp_matmul, "dp_tp_matmul(rank, world_size, dp, tp, x, w)", direction=direction, cases=cases,
          judge=judge, grouped=False,
          passed=lambda trials: _('every rank returned its rows of X @ W after one DTensor all_reduce over tp (meshes '
                                  '{first} and {second}, random blocks known only to the ranks holding them)').format(
                                      first=placements.mesh_text(trials[0].want[0]),
                                      second=placements.mesh_text(trials[1].want[0])))
