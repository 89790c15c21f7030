"""The outcome of one :func:`collnb.redistribute`: every rank's local shard before and after, the
hand-sliced reference, the collectives each rank issued, torch's own counts and log lines, the
timing, and the verdict. It shows as a picture and prints as text through the functions
:mod:`collnb.views` registers (:func:`register_display`: drawing belongs to a layer above).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from os import PathLike
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from ..i18n import _
from .parsing import Placement, mesh_text, placements_text
from .reference import Floats

if TYPE_CHECKING:
    import torch
    from ..ranks import CallRecord

__all__ = ["LocalShard", "RedistributeResult", "register_display"]

#: ``png_fn(result, **kw) -> bytes`` (PNG) and ``text_fn(result) -> str``.
PngFn = Callable[..., bytes]
TextFn = Callable[["RedistributeResult"], str]
#: The mesh's global ranks as nested lists, one level per mesh dimension (1 to 3).
MeshRanks = list[int] | list[list[int]] | list[list[list[int]]]


class _Printer(Protocol):
    """The part of IPython's ``RepresentationPrinter`` that ``_repr_pretty_`` uses (its ``text`` has no annotations)."""

    def text(self, obj: str) -> None: ...


class _Display:
    """What :func:`register_display` registered (``None`` before)."""

    png: PngFn | None = None
    text: TextFn | None = None


_display = _Display()


def register_display(png_fn: PngFn, text_fn: TextFn) -> None:
    """Make ``png_fn(result, **kw) -> bytes`` and ``text_fn(result) -> str`` draw and write a
    :class:`RedistributeResult` (:mod:`collnb.views.redistribute` registers its own when imported;
    ``import collnb`` does that).

    Raises:
        TypeError: either is not callable.
    """
    for name, fn in (("png_fn", png_fn), ("text_fn", text_fn)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function fn(result); got {fn!r}")
    _display.png, _display.text = png_fn, text_fn


@dataclass
class LocalShard:
    """One rank's local tensor before and after, and its reference.

    Attributes:
        rank: global rank. coord: its mesh coordinate (tuple of int).
        before, after: the local tensors torch held (CPU ``torch.Tensor`` of the run's dtype);
            ``after`` is ``None`` when torch refused the redistribute.
        expected_before, expected_after: the hand-sliced reference (float64 numpy arrays;
            ``expected_after`` ``None`` when the reference says torch refuses).
        bounds_before, bounds_after: the global index range ``((lo, hi), ...)`` per tensor dim the
            placement gives this rank (a Partial rank's range covers what it holds a contribution to).
        expected_sum, group_sum: where the reference cannot say which rank holds which part of a
            Partial made from a Shard (torch 2.14+'s ``Shard -> Partial("sum")`` after data moved on
            another mesh dimension, :func:`collnb.placements.reference.zero_fill_is_exact`): the sum of
            the locals over that Partial's mesh dimensions it must equal, and the sum torch's locals
            give (float64); both ``None`` otherwise, when ``expected_after`` is compared instead.
    """

    rank: int
    coord: tuple[int, ...]
    before: torch.Tensor
    after: torch.Tensor | None
    expected_before: Floats
    expected_after: Floats | None
    bounds_before: tuple[tuple[int, int], ...]
    bounds_after: tuple[tuple[int, int], ...]
    expected_sum: Floats | None = None
    group_sum: Floats | None = None

    @staticmethod
    def _same(t: torch.Tensor | Floats | None, ref: Floats | None) -> bool:
        if t is None or ref is None:
            return t is None and ref is None
        got = t.double().numpy() if hasattr(t, "double") else np.asarray(t, dtype=np.float64)
        return got.shape == ref.shape and bool(np.array_equal(got, ref))

    @property
    def before_ok(self) -> bool:
        """torch's source shard equals the hand-sliced one (values and shape)."""
        return self._same(self.before, self.expected_before)

    @property
    def after_ok(self) -> bool:
        """torch's local tensor after equals the reference (both ``None`` when refused); where only the
        sum over a Partial's ranks is known (:attr:`expected_sum`), the local's shape and that sum."""
        if self.expected_sum is not None:
            return (self.after is not None and tuple(self.after.shape) == self.expected_sum.shape
                    and self._same(self.group_sum, self.expected_sum))
        return self._same(self.after, self.expected_after)


@dataclass
class RedistributeResult:
    """One ``redistribute`` on real ranks (see :func:`collnb.redistribute`).

    Attributes:
        shape: the global shape. dtype: its name. mesh: the mesh shape. backend: ``"gloo"``/``"nccl"``.
        src, dst: the placements (tuples of :class:`collnb.placements.Placement`, one per mesh dim).
        shards: one :class:`LocalShard` per rank (rank order).
        calls: per rank, the :class:`collnb.CallRecord` list of the recorded ``redistribute`` call
            (recorded where torch dispatched each operation, as the exercise checks record).
        unrecorded: operations the backend counted during that call that the recorder did not see.
        comm_counts: per rank, ``CommDebugMode().get_comm_counts()`` of the same call
            (``{"c10d_functional.all_gather_into_tensor": 1}``), torch's own count.
        times: seconds of each timed call, the slowest rank's (``repeats`` of them; with ``repeats=0`` the
            recorded call's).
        log: the lines torch logged during the call (deduplicated over ranks).
        refused: the error torch raised (``"RuntimeError: ..."``; on every rank), or ``None``.
        expected_refusal: why the reference says torch refuses (see
            :func:`collnb.placements.reference.refusal`), or ``None``.
        summed_over: the mesh dimensions over which the locals' sums were checked instead of each
            local (see :attr:`LocalShard.expected_sum`); ``()`` when every local was compared.
        mesh_ranks: the mesh's global ranks as nested lists (``DeviceMesh.mesh.tolist()``).
        seconds: wall time of the launch (s).
    """

    shape: tuple[int, ...]
    dtype: str
    mesh: tuple[int, ...]
    backend: str
    src: tuple[Placement, ...]
    dst: tuple[Placement, ...]
    shards: list[LocalShard]
    calls: list[list[CallRecord]]
    unrecorded: int = 0
    comm_counts: list[dict[str, int]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    refused: str | None = None
    expected_refusal: str | None = None
    summed_over: tuple[int, ...] = ()
    mesh_ranks: MeshRanks = field(default_factory=list)
    seconds: float = 0.0

    @property
    def world_size(self) -> int:
        return math.prod(self.mesh)

    @property
    def ok(self) -> bool:
        """Every rank's source shard and local tensor after equal the hand-sliced reference, and
        torch refused exactly when the reference says it must."""
        if (self.refused is None) != (self.expected_refusal is None):
            return False
        return all(s.before_ok and s.after_ok for s in self.shards)

    @property
    def seconds_measured(self) -> float | None:
        """Median of :attr:`times` (s), ``None`` when nothing was timed (refused)."""
        return statistics.median(self.times) if self.times else None

    @property
    def verdict(self) -> str:
        """One line: ✓/✗ and what was compared."""
        if self.refused and self.ok:
            return _("✓ torch refused, as the reference says it must")
        if self.ok and self.summed_over:
            return _("✓ every local shard's sum over mesh dim {dims} equals the hand-sliced reference (which rank "
                     "holds which part depends on the steps torch plans)").format(
                         dims=", ".join(map(str, self.summed_over)))
        if self.ok:
            return _("✓ every local shard equals the hand-sliced reference")
        if self.refused or self.expected_refusal:
            return (_("✗ torch refused a change the reference allows") if self.refused else
                    _("✗ torch did not refuse a change the reference says it must refuse"))
        return _("✗ a local shard differs from the hand-sliced reference")

    @property
    def change(self) -> str:
        """The placement change as torch prints placements, in every language: ``"(S(0), S(0)) → (R, S(0))"``."""
        return f"{placements_text(self.src)} → {placements_text(self.dst)}"

    @property
    def title(self) -> str:
        return _("redistribute {shape} {dtype} on a {mesh} mesh: {src} → {dst}").format(
            shape=tuple(self.shape), dtype=self.dtype, mesh=mesh_text(self.mesh), src=placements_text(self.src),
            dst=placements_text(self.dst))

    def summary(self) -> str:
        """Each rank's local shapes before → after with ✓/✗ (without the drawing layer's steps)."""
        lines = [self.title]
        if self.refused:
            lines.append(_("torch refused: {message}").format(message=self.refused))
        for s in self.shards:
            after = _("refused") if s.after is None else str(tuple(s.after.shape))
            mark = "✓" if s.before_ok and s.after_ok else "✗"
            lines.append(f"  rank {s.rank} {s.coord}: {tuple(s.before.shape)} → {after} {mark}")
        lines.append(self.verdict)
        return "\n".join(lines)

    def text(self) -> str:
        """The full text (steps, prediction, torch's notes) by the registered display, else :meth:`summary`."""
        fn = _display.text
        return fn(self) if fn else self.summary()

    def png(self, **kwargs: Any) -> bytes:
        """The picture (PNG bytes) by the registered display.

        Raises:
            RuntimeError: nothing registered (``import collnb`` registers it).
        """
        fn = _display.png
        if fn is None:
            raise RuntimeError("no display is registered for a RedistributeResult: `import collnb` (or collnb.views) "
                               "registers it")
        return fn(self, **kwargs)

    def save(self, path: str | PathLike[str], **kwargs: Any) -> None:
        """Write :meth:`png` to ``path`` (``kwargs``: :meth:`png`'s)."""
        data = self.png(**kwargs)
        with open(path, "wb") as f:
            f.write(data)

    def to_dict(self) -> dict[str, object]:
        """The result as JSON-able data (shapes, placements, local tensors as nested lists, calls)."""
        def arr(t: torch.Tensor | Floats | None) -> object:
            return None if t is None else (t.double().tolist() if hasattr(t, "double") else np.asarray(t).tolist())
        return {
            "shape": list(self.shape), "dtype": self.dtype, "mesh": list(self.mesh), "backend": self.backend,
            "src": [p.short for p in self.src], "dst": [p.short for p in self.dst], "ok": self.ok,
            "refused": self.refused, "expected_refusal": self.expected_refusal, "log": self.log,
            "summed_over": list(self.summed_over),
            "times_s": self.times, "unrecorded": self.unrecorded, "comm_counts": self.comm_counts,
            "ranks": [{"rank": s.rank, "coord": list(s.coord), "before": arr(s.before), "after": arr(s.after),
                       "expected_after": arr(s.expected_after), "expected_sum": arr(s.expected_sum),
                       "ok": s.before_ok and s.after_ok}
                      for s in self.shards],
            "calls": [[{"name": c.operation, "group_ranks": list(c.group_ranks), "shapes": [list(x) for x in c.shapes],
                        "dtypes": list(c.dtypes), "nbytes": c.nbytes, "source": c.source} for c in recs]
                      for recs in self.calls],
        }

    def __repr__(self) -> str:
        return f"RedistributeResult({self.title}, ok={self.ok})"

    def __str__(self) -> str:
        return self.text()

    def _repr_png_(self) -> bytes | None:
        return self.png() if _display.png is not None else None

    def _repr_pretty_(self, p: _Printer, cycle: bool) -> None:
        p.text(self.text())
