"""The outcome of one primitive run: :class:`RunResult` holds each rank's buffer before and
after, the reference, which outputs the primitive defines, and the verdict; it prints as the
original examples' ``[rank r] before: [...]`` text and draws as its rank x chunk heatmap (drawn by
the renderer that :mod:`collnb.views` registers, see :mod:`.display`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..i18n import _, ngettext
from .display import render_figure, render_png
from .expected import ChunkSources, alternatives_fn, canon, chunk_mismatch, f64
from .inputs import InputTable
from .specs import SPECS, PrimitiveSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """One primitive run on real ranks, its reference and its verdict.

    Per-rank lists have ``world_size`` entries, in rank order. Tensors are flat CPU tensors of
    ``n_chunks * chunk_size`` elements of the run's dtype (``n_chunks`` can differ per rank and
    between before/after, e.g. ``scatter``: the src rank's input has ``world_size`` chunks, the
    others' none; every output has one). :meth:`chunks` reshapes them to ``(n_chunks, chunk_size)``.
    Object primitives hold lists of Python objects. ``barrier`` holds float64 milliseconds.

    Attributes:
        primitive: name (see :data:`~.specs.PRIMITIVES`).
        world_size, backend, chunk_size: as run.
        dtype: ``torch.dtype`` of the buffers (``None`` for object primitives; ``torch.float64``
            milliseconds for ``barrier``).
        op: reduce op name for reducing primitives, else ``None``.
        root: the src/dst rank for rooted primitives, else ``None``.
        before: each rank's input buffer, copied (``clone``) before the collective.
        after: each rank's output buffer after it (for in-place primitives the same buffer; for
            an undefined output what the buffer happens to hold; ``[]``/empty where a rank has
            no output buffer, e.g. a non-dst rank of ``gather``).
        expected: reference output per rank in the run's dtype (``None`` where undefined); see
            :func:`~.reference.reference`. For ``barrier``: the last arrival time (nobody may leave earlier).
        expected_f64: exact float64 result per rank (``None`` for objects/undefined/barrier).
        defined: whether the primitive defines each rank's output.
        sources: per rank, per output chunk, the ``(src_rank, src_chunk)`` pairs it came from.
        mismatch: per rank, per output chunk, True where ``after`` differs from ``expected``
            (``None`` where undefined). Integers, bool (truth value), min/max and plain copies
            must match exactly; floating/complex sum, product and avg within a relative
            ``tolerance`` of ``world_size * finfo(dtype).eps`` (the rounding bound of adding
            ``world_size`` positive terms in any order); ``barrier``: departure >= last arrival.
        tolerance: that relative tolerance (0.0 = exact).
        ok: True when no defined chunk mismatches.
        seconds: wall time of the launch (s).
    """

    primitive: str
    world_size: int
    dtype: torch.dtype | None
    op: str | None
    root: int | None
    backend: str
    chunk_size: int
    before: list[torch.Tensor | list[object]]
    after: list[torch.Tensor | list[object]]
    expected: list[torch.Tensor | list[object] | None]
    expected_f64: list[torch.Tensor | None]
    defined: list[bool]
    sources: list[ChunkSources]
    mismatch: list[list[bool] | None]
    tolerance: float
    ok: bool
    seconds: float = 0.0
    inputs: InputTable = field(default_factory=list, repr=False)

    @property
    def spec(self) -> PrimitiveSpec:
        """The :class:`~.specs.PrimitiveSpec` of :attr:`primitive`."""
        return SPECS[self.primitive]

    def chunks(self, which: str = "after") -> list[torch.Tensor | list[object] | None]:
        """``which`` in ``"before"``, ``"after"``, ``"expected"``, ``"expected_f64"`` -> per rank
        a ``(n_chunks, chunk_size)`` tensor (or list of objects; ``None`` where undefined)."""
        data: list[torch.Tensor | list[object] | None] = getattr(self, which)
        out: list[torch.Tensor | list[object] | None] = []
        for t in data:
            if isinstance(t, torch.Tensor):
                out.append(t.view(-1, self.chunk_size))
            else:
                out.append(t)
        return out

    def title(self) -> str:
        """E.g. ``"all_reduce (SUM) · world size 4 · float32 · gloo"``."""
        parts = [self.primitive + (f" ({self.op.upper()})" if self.op else "")]
        if self.root is not None:
            parts.append(f"{self.spec.root_name}={self.root}")
        parts.append(_("world size {n}").format(n=self.world_size))
        if self.spec.kind == "tensor":
            parts.append(str(self.dtype).replace("torch.", ""))
        elif self.spec.kind == "object":
            parts.append(_("Python objects"))
        parts.append(self.backend)
        return " · ".join(parts)

    def check(self) -> bool:
        """Recompare ``after`` with ``expected`` (e.g. after editing ``after`` to see what a wrong
        result looks like); updates ``mismatch`` and ``ok`` and returns ``ok``."""
        spec = self.spec
        self.mismatch = [
            None if not d or e is None else  # a defined output always has a reference (barrier's: measured)
            chunk_mismatch(a, e, self.chunk_size, self.tolerance, spec.kind,
                            alternatives_fn(spec, self.inputs, src, self.dtype if spec.kind == "tensor" else None,
                                             self.op, self.world_size, self.chunk_size))
            for a, e, d, src in zip(self.after, self.expected, self.defined, self.sources)]
        self.ok = all(not any(m) for m in self.mismatch if m is not None)
        return self.ok

    def n_mismatches(self) -> int:
        """How many defined output chunks differ from the reference, over all ranks."""
        return sum(sum(bool(x) for x in m) for m, d in zip(self.mismatch, self.defined) if d and m)

    def summary(self) -> str:
        """Plain-text before/after per rank (the original examples' ``[rank r] before: [...]`` format)."""
        lines = [self.title()]
        for r in range(self.world_size):
            lines.append(f"[rank {r}] before: {_as_list(self.before[r], self)}")
        for r in range(self.world_size):
            lines.append(f"[rank {r}] after : {_as_list(self.after[r], self)}  {self._verdict(r)}")
        for r in range(self.world_size):
            x = self.expected_f64[r]
            a = self.after[r]
            if x is None or not self.defined[r] or not isinstance(a, torch.Tensor) or a.numel() != x.numel():
                continue
            a64 = f64(canon(a)) if a.dtype != torch.bool else canon(a).to(torch.float64)
            if not bool(torch.isclose(a64, x.to(a64.dtype), rtol=0, atol=0, equal_nan=True).all()):
                lines.append(f"[rank {r}] exact : {x.tolist()}  "
                             + _("(float64 result of the same inputs: {dtype} changed it)").format(
                                 dtype=str(self.dtype).replace("torch.", "")))
        n = self.n_mismatches()
        lines.append(_("✓ every defined output matches the reference") if self.ok else
                     ngettext("✗ {n} chunk(s) differ from the reference",
                              "✗ {n} chunk(s) differ from the reference", n).format(n=n))
        return "\n".join(lines)

    def _verdict(self, r: int) -> str:
        if not self.defined[r]:
            who = f"{self.spec.root_name}={self.root}" if self.root is not None else _("the root")
            return _("(undefined: only {who}'s output is defined)").format(who=who)
        if any(self.mismatch[r] or ()):
            return _("✗ expected {values}").format(values=_as_list(self.expected[r], self))
        return "✓"

    def __repr__(self) -> str:
        return (f"RunResult({self.title()}, ok={self.ok}, "
                f"{self.n_mismatches()} mismatching chunk(s), {self.seconds * 1000:.0f} ms)")

    # -- display ---------------------------------------------------------------------------------
    def figure(self, **kwargs: Any) -> Figure:
        """The before | after heatmap as a :class:`matplotlib.figure.Figure`
        (:func:`collnb.views.heatmap_figure`, registered by :func:`~.display.register_renderer`).

        Raises:
            RuntimeError: no renderer is registered (``import collnb.views`` registers the heatmap).
        """
        return render_figure(self, **kwargs)

    def png(self, **kwargs: Any) -> bytes:
        """The heatmap as PNG bytes (:func:`collnb.views.heatmap_png`, registered by
        :func:`~.display.register_renderer`).

        Raises:
            RuntimeError: no renderer is registered (``import collnb.views`` registers the heatmap).
        """
        return render_png(self, **kwargs)

    def save(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        """Write the heatmap PNG to ``path`` (a str or path-like).

        Raises:
            RuntimeError: no renderer is registered; OSError: the file cannot be written.
        """
        with open(path, "wb") as f:
            f.write(self.png(**kwargs))

    def _repr_png_(self) -> bytes:
        return self.png()

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, bytes | str]:
        return {"image/png": self.png(), "text/plain": self.summary()}


def _as_list(t: torch.Tensor | list[object] | None, result: RunResult) -> list[Any] | None:
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bool:
            return t.view(torch.uint8).ne(0).tolist()
        if result.spec.kind == "time":
            return [round(x, 1) for x in t.tolist()]
        try:
            return t.tolist()
        except (TypeError, RuntimeError):  # float8 and friends have no Python scalar type
            return t.to(torch.float32).tolist()
    return list(t)
