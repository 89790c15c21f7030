"""Replay a :class:`collnb.Trace` round by round: the entry points.

:func:`replay` (a player: Play, round slider, step buttons, speed), :func:`compare` (two algorithms
side by side under one slider), :func:`save_gif` and :func:`save_filmstrip` (headless files); also
named here, from their own modules, :func:`explore_rounds` (run an algorithm on real ranks, then
replay it) and :func:`compare_figure` (the comparison chart). What a
frame shows: :mod:`collnb.views.frames`; the round's heatmap and arrows:
:mod:`collnb.views.round_heatmap`; the players: :mod:`collnb.views.players`; the rounds explorer
that runs algorithms on real ranks: :mod:`collnb.views.rounds_explorer`; the comparison chart:
:mod:`collnb.views.comparison`.
"""

from __future__ import annotations

import math
import os

from PIL import Image

from ..algorithms import ALGORITHMS, CostModel, Trace, run_algorithms
from ..i18n import _
from ..units import format_bytes
from ..vocabulary import check_choice, check_int, check_real, check_world_size
from .comparison import compare_figure
from .frames import FrameRenderer
from .palette import INK, MIN_LABEL_PX
from .players import SPEED_RANGE, CompareWidget, ReplayWidget
from .raster import Canvas
from .round_heatmap import paint_heatmap

__all__ = ["replay", "compare", "save_gif", "save_filmstrip", "compare_figure", "FPS_RANGE",
           "SPEED_RANGE"]


def __getattr__(name: str) -> object:
    """``explore_rounds`` is named here too, loaded on first use: the rounds explorer imports ipywidgets,
    which a replay's picture (and collnb.run's first picture, which imports this module) does not need."""
    if name == "explore_rounds":
        from .rounds_explorer import explore_rounds  # noqa: PLC0415 - ipywidgets on first use only

        return explore_rounds
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


FPS_RANGE = (0.01, 50.0)  # GIF frame delays are centiseconds in 16 bits; below 20 ms browsers slow them


def _check_file_args(trace: object, path: object, suffix: str, fn: str, cell: int | None = None,
                     columns: int | None = None) -> None:
    """Raise TypeError/ValueError, naming the argument, for what the writers below cannot use."""
    if not isinstance(trace, Trace):
        raise TypeError(f"{fn}() takes a collnb.Trace; got {type(trace).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{fn}() path must be a file name (str or os.PathLike); got {type(path).__name__}")
    if not os.fspath(path).lower().endswith(suffix):
        raise ValueError(f"{fn}() writes {suffix[1:].upper()}: end the file name with {suffix}; got {os.fspath(path)!r}")
    if cell is not None:
        check_int("cell", cell, 4, 200, what="pixels, or None")
    if columns is not None:
        check_int("columns", columns, 1, 64, what="panels per row, or None")



def save_gif(trace: Trace, path: str | os.PathLike[str], *, fps: float = 1.5, model: CostModel | None = None,
             cell: int | None = None, hold_last: float = 2.0) -> str:
    """Write the replay as an animated GIF: one frame for the start plus one per round.

    Frames are drawn headless by :class:`FrameRenderer` (matplotlib Agg) and written with
    Pillow's GIF writer (the writer behind matplotlib's ``PillowWriter``).

    Args:
        trace: a trace with snapshots (values are drawn from them).
        path: output file (``.gif``).
        fps: frames per second. hold_last: seconds the last frame stays.
        model, cell: as :class:`FrameRenderer`.

    Returns:
        ``path`` as str.

    Raises:
        TypeError: not a Trace, or a path that is not a file name.
        ValueError: the trace has no snapshots (``snapshots=False``); ``path`` does not end with
            ``.gif``; ``fps`` outside :data:`FPS_RANGE`; ``cell`` outside 4..200.
    """
    _check_file_args(trace, path, ".gif", "save_gif", cell=cell)
    check_real("fps", fps, *FPS_RANGE, what="frames per second")
    if not trace.has_snapshots:
        raise ValueError(_("this trace has no per-round snapshots (recorded with snapshots=False); "
                           "run it with snapshots=True to animate it"))
    out = os.fspath(path)
    ren = FrameRenderer(trace, model=model, cell=cell)
    frames = [Image.fromarray(ren.rgb(k)) for k in range(trace.n_rounds + 1)]  # Pillow's GIF writer
    pal = [f.quantize(colors=255, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE) for f in frames]
    dur = int(round(1000 / fps))
    durations = [dur] * len(pal)
    durations[-1] = int(max(dur, 1000 * hold_last))
    pal[0].save(out, format="GIF", save_all=True, append_images=pal[1:], duration=durations, loop=0,
                optimize=False, disposal=1)
    return out


def save_filmstrip(trace: Trace, path: str | os.PathLike[str], *, columns: int | None = None, cell: int | None = None,
                   dpi: int = 80) -> str:
    """Write a static PNG of every round's heatmap (start + one panel per round), row by row.

    Args:
        trace: a trace with snapshots (without them, panels show provenance colours only).
        path: output ``.png``.
        columns: panels per row (default up to 6).
        cell: heatmap cell size in pixels (default: small enough for the grid).

    Returns:
        ``path`` as str.

    Raises:
        TypeError: not a Trace, or a path that is not a file name.
        ValueError: ``path`` does not end with ``.png``; ``columns`` outside 1..64 or ``cell``
            outside 4..200.
    """
    _check_file_args(trace, path, ".png", "save_filmstrip", cell=cell, columns=columns)
    out = os.fspath(path)
    R = trace.n_rounds
    n = R + 1
    cols = int(columns or min(6, n))
    rows = math.ceil(n / cols)
    cell = int(cell or max(12, min(40, 260 // max(trace.world_size, trace.n_chunks))))
    panels = [paint_heatmap(trace, k, cell, values=cell >= 22 and trace.has_snapshots) for k in range(n)]
    ph, pw = panels[0].shape[:2]
    title_h, head = 34, 54
    W = max(cols * (pw + 10) + 10, 720)  # room for the heading
    H = head + rows * (ph + title_h + 10)
    px = dpi / 72.0  # the text sizes below are points
    cv = Canvas(W, H)
    op = f" ({trace.op})" if trace.op else ""
    sent = trace.total_bytes_sent()
    cv.text(_("{primitive}{op} · {algorithm} · world size {world_size}: {n_rounds} rounds, {nbytes} sent by the "
              "busiest rank").format(primitive=trace.primitive, op=op, algorithm=trace.algorithm,
                                     world_size=trace.world_size, n_rounds=R,
                                     nbytes=format_bytes(int(sent.max()) if len(sent) else 0)),
            10, 8, 13 * px, INK, "bold", ha="left", va="top")
    cv.text(_("colour = whose data (stripes: combined from several ranks); frame = received this round; "
              "red arrow = combine, blue = overwrite"), 10, 30, max(MIN_LABEL_PX + 1, 9.5 * px), (68, 68, 68),
            ha="left", va="top")
    for k, img in enumerate(panels):
        r, c = divmod(k, cols)
        x = 10 + c * (pw + 10)
        ytop = head + r * (ph + title_h + 10)
        cv.paste(img, x, ytop + title_h)
        label = _("start") if k == 0 else _("round {round}: {label}").format(round=k, label=trace.rounds[k - 1].label)
        cv.text(label, x + 4, ytop + 8, 10 * px, INK, "bold" if k else "regular", ha="left", va="top")
    with open(out, "wb") as f:
        f.write(cv.png(dpi))
    return out


def replay(trace: Trace, model: CostModel | None = None, cell: int | None = None, speed: float = 1.5) -> ReplayWidget:
    """An ipywidgets player for ``trace``: Play/pause, a round slider (jslink'd to Play), a speed
    slider (rounds per second) and the frame of the current round (see the module doc).

    Args:
        trace: :class:`collnb.Trace` recorded with snapshots.
        model: cost model for the running total (default :data:`collnb.algorithms.costmodel.DEFAULT_MODEL`;
            :func:`collnb.algorithms.costmodel.calibrate` measures one).
        cell: heatmap cell size in pixels. speed: initial rounds per second.

    Returns:
        :class:`ReplayWidget` (displays itself in a notebook; ``.widget`` is the VBox).

    Raises:
        TypeError: not a Trace. ValueError: the trace has no snapshots; ``speed`` outside
        :data:`SPEED_RANGE` rounds per second.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"replay() takes a collnb.Trace; got {type(trace).__name__}")
    check_real("speed", speed, *SPEED_RANGE, what="rounds per second")
    return ReplayWidget(trace, model=model, cell=cell, speed=speed)



def compare(a: Trace | str, b: Trace | str | None = None, world_size: int | None = None, *,
            primitive: str | None = None, model: CostModel | None = None, **run_kwargs: object) -> CompareWidget:
    """Compare two algorithms side by side.

    Either ``compare(trace_a, trace_b)``, or ``compare("ring", "recursive_doubling",
    world_size=8, primitive="all_reduce")``, which runs both on real ranks first (extra keyword
    arguments go to :func:`collnb.algorithms.run_algorithm`).

    Returns:
        :class:`~collnb.views.players.CompareWidget`.

    Raises:
        TypeError: neither two traces nor two algorithm names; a world size that is not an int.
        ValueError: running two algorithms without ``primitive=`` and ``world_size=``, an unknown
            primitive, a world size outside 1..16 (the words of :mod:`collnb.vocabulary`); traces of
            different primitives or world sizes; traces without snapshots.
    """
    if isinstance(a, Trace) and isinstance(b, Trace):
        return CompareWidget(a, b, model)
    if isinstance(a, str) and isinstance(b, str):
        if primitive is None or world_size is None:
            raise ValueError("to run two algorithms, give primitive= and world_size=")
        check_choice("primitive", primitive, tuple(ALGORITHMS))
        check_world_size(world_size)
        ta, tb = run_algorithms([dict(primitive=primitive, algorithm=a, **run_kwargs),
                                 dict(primitive=primitive, algorithm=b, **run_kwargs)], world_size)
        return CompareWidget(ta, tb, model)
    raise TypeError("compare(trace_a, trace_b) or compare('algo_a', 'algo_b', world_size=N, primitive='...')")
