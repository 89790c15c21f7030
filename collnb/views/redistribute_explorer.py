"""``collnb.explore_redistribute()``: dropdowns for the mesh, the tensor's shape and dtype, and each
mesh dimension's source and destination placement; every change redistributes on warm ranks and
redraws the picture of :mod:`collnb.views.redistribute`.

A :class:`collnb.views.binder.Binder` (the views' one explorer engine): :class:`RedistributeParams` is
the whole state, :func:`choices` and :func:`fix` are pure functions of it (which placements a mesh dimension may
take: ``S(1)`` only for a 2-D tensor, ``P(avg)`` only for a floating-point dtype, one Partial op
per placement tuple; a destination Partial is offered where the source has none so that torch's
refusal can be seen), :func:`run` calls :func:`collnb.redistribute` timing the recorded call (``repeats=0``), and
:func:`draw` paints. ``benchmarks/redistribute.py`` prints how long a move takes at mesh 2x2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Sequence

from .. import placements
from ..i18n import N_, _
from .binder import Binder, Picture
from .redistribute import redistribute_image
from .static import esc

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..placements import RedistributeResult
    from ..ranks import LaunchOptions

__all__ = ["explore_redistribute", "RedistributeParams", "RedistributeExplorer", "choices", "fix", "MESHES",
           "SHAPES", "EXPLORER_DTYPES"]

#: The meshes offered: 1-D of 2, 4, 8 ranks and 2-D 2x2, 2x4.
MESHES = ("2", "4", "8", "2x2", "2x4")
#: The shapes offered, as label and value pairs: even, uneven over 4 ranks, 1-D.
SHAPES = (("4×6", "4x6"), ("8×4", "8x4"), ("5×6 (uneven over 2 and 4 ranks)", "5x6"), ("8×8", "8x8"),
          ("8 (1-D)", "8"), ("6 (1-D, uneven over 4 ranks)", "6"))
#: Dtypes offered (every teaching value of every offered shape is exact in them).
EXPLORER_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
_FLOAT = ("float32", "float64", "float16", "bfloat16")


@dataclass(frozen=True)
class RedistributeParams:
    """The explorer's state: the mesh (``"2x2"``), the global shape (``"4x6"``), the dtype name, and
    the source and destination placement of mesh dimensions 0 and 1 (short forms; dimension 1 is
    unused on a 1-D mesh)."""

    mesh: str = "2x2"
    shape: str = "4x6"
    dtype: str = "float32"
    src0: str = "S(0)"
    src1: str = "S(0)"
    dst0: str = "R"
    dst1: str = "S(0)"

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The mesh's shape (``"2x2"`` -> ``(2, 2)``)."""
        shape: tuple[int, ...] = placements.parse_mesh(self.mesh)
        return shape

    def placements(self, which: str) -> list[str]:
        """The ``"src"`` or ``"dst"`` placements of the mesh's dimensions."""
        return [str(getattr(self, f"{which}{d}")) for d in range(len(self.mesh_shape))]


_LABELS = {"mesh": N_("mesh"), "shape": N_("shape"), "dtype": N_("dtype"), "src0": N_("src dim 0"),
           "src1": N_("src dim 1"), "dst0": N_("dst dim 0"), "dst1": N_("dst dim 1")}


def _partial_op(values: Iterable[str]) -> str | None:
    for v in values:
        p = placements.parse_placement(v)
        if p.kind == "partial":
            short: str = p.short
            return short
    return None


def choices(p: RedistributeParams) -> dict[str, list[object]]:
    """The values each control offers for ``p`` (pure; see the module docstring)."""
    ndim = len(placements.check_shape(p.shape)[0]) if p.shape in dict((v, v) for _, v in SHAPES) else 2
    mesh_ndim = len(p.mesh_shape)
    shards = ["S(0)", "S(1)"][:ndim]
    out: dict[str, list[object]] = {"mesh": list(MESHES), "shape": list(SHAPES), "dtype": list(EXPLORER_DTYPES)}
    for d in range(2):
        if d >= mesh_ndim:
            out[f"src{d}"] = out[f"dst{d}"] = []
            continue
        others = [getattr(p, f"src{e}") for e in range(mesh_ndim) if e != d]
        held = _partial_op(others)
        partials = [held] if held else ["P", "P(max)"] + (["P(avg)"] if p.dtype in _FLOAT else [])
        out[f"src{d}"] = [*shards, "R", *partials]
        own = _partial_op([getattr(p, f"src{d}")])
        mine = own or held or "P"
        out[f"dst{d}"] = [*shards, "R", *([mine] if own else [(f"{mine} (torch refuses)", mine)])]
    return out


def fix(p: RedistributeParams) -> tuple[RedistributeParams, list[str]]:
    """``(params, notes)``: ``p`` with every value its control does not offer replaced (pure)."""
    notes: list[str] = []
    for name in ("mesh", "shape", "dtype", "src0", "src1", "dst0", "dst1"):
        offered = [str(v[1]) if isinstance(v, tuple) else str(v) for v in choices(p)[name]]  # names
        value = getattr(p, name)
        if offered and value not in offered:
            better = "R" if name.startswith(("src", "dst")) and "R" in offered else offered[0]
            notes.append(_("{control} {value} is not offered here; showing {shown}").format(
                control=_(_LABELS[name]), value=value, shown=better))
            p = replace(p, **{name: better})
    try:
        placements.check_request(p.shape, p.mesh, p.placements("src"), p.placements("dst"), p.dtype)
    except ValueError as exc:
        if p.dtype != "float32":
            notes.append(_("{error}; showing float32").format(error=exc))
            p = replace(p, dtype="float32")
        else:
            notes.append(str(exc))
    return p, notes


def run(p: RedistributeParams, **launch_kwargs: Unpack[LaunchOptions]) -> RedistributeResult:
    """:func:`collnb.redistribute` of ``p``, the recorded call timed (``repeats=0``: one call per move)."""
    result: RedistributeResult = placements.redistribute(p.shape, p.mesh, src=p.placements("src"),
                                                         dst=p.placements("dst"), dtype=p.dtype, repeats=0,
                                                         **launch_kwargs)
    return result


def draw(result: RedistributeResult, p: RedistributeParams) -> Picture:
    """The :class:`~collnb.views.binder.Picture` of a result: the picture of
    :func:`collnb.views.redistribute.redistribute_image` and a caption with the verdict and the
    collectives of the first rank."""
    verdict = result.verdict
    kinds = [rec.operation for rec in result.calls[0]] if result.calls else []
    steps = ", ".join(kinds) if kinds else (_("refused by torch") if result.refused else _("no communication"))
    return Picture(pixels=redistribute_image(result).pixels,
                   caption=(f"<span class='collnb-verdict'>{esc(verdict)}</span> · "
                            f"<span class='collnb-steps'>{esc(steps)}</span>"))


class RedistributeExplorer(Binder[RedistributeParams, "RedistributeResult"]):
    """The explorer :func:`explore_redistribute` returns: the module's :func:`choices`, :func:`fix`,
    :func:`run` and :func:`draw` on a :class:`~collnb.views.binder.Binder`."""

    name = "redistribute-explorer"
    labels = _LABELS

    def __init__(self, params: RedistributeParams, wait: bool = True, **launch_kwargs: Unpack[LaunchOptions]) -> None:
        self.launch_kwargs = launch_kwargs
        super().__init__(params, wait=wait)

    def choices(self, p: RedistributeParams) -> dict[str, list[object]]:
        return choices(p)

    def fix(self, p: RedistributeParams) -> tuple[RedistributeParams, list[str]]:
        return fix(p)

    def run(self, p: RedistributeParams) -> RedistributeResult:
        return run(p, **self.launch_kwargs)

    def draw(self, result: RedistributeResult, p: RedistributeParams) -> Picture:
        return draw(result, p)


def explore_redistribute(mesh: str = "2x2", shape: str = "4x6", dtype: str = "float32",
                         src: Sequence[object] = ("S(0)", "S(0)"), dst: Sequence[object] = ("R", "S(0)"), *,
                         wait: bool = True, **launch_kwargs: Unpack[LaunchOptions]) -> RedistributeExplorer:
    """An interactive redistribute: dropdowns for the mesh (1-D 2/4/8, 2-D 2x2, 2x4), the tensor's
    shape and dtype, and each mesh dimension's source and destination placement; every change runs
    :func:`collnb.redistribute` on warm ranks and redraws the global tensor coloured by owner, the
    local shards before and after, and the collectives between them.

    Args:
        mesh, shape, dtype: initial values (``"2x2"``, ``"4x6"``, ``"float32"``; see :data:`MESHES`,
            :data:`SHAPES`, :data:`EXPLORER_DTYPES`).
        src, dst: initial placements of mesh dimensions 0 and 1 (short forms, ``("S(0)", "R")``).
        wait: block until the first picture is drawn. launch_kwargs: to :func:`collnb.launch`.

    Returns:
        :class:`RedistributeExplorer`; ``.set(src0="P", dst0="S(0)")`` changes values in code.

    Raises:
        TypeError / ValueError: initial values of the wrong kind (unknown ones are replaced, with a note).
    """
    src_, dst_ = [*src, *["R"] * (2 - len(src))], [*dst, *["R"] * (2 - len(dst))]
    short: list[str] = [placements.parse_placement(v).short for v in src_ + dst_]
    params = RedistributeParams(str(mesh).replace("×", "x").replace(" ", ""), str(shape).replace("×", "x"),
                                str(dtype).replace("torch.", ""), *short)
    return RedistributeExplorer(params, wait=wait, **launch_kwargs)
