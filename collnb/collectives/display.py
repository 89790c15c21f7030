"""How a :class:`~.result.RunResult` is drawn: a registry the views layer fills in.

The collectives layer computes results; drawing them (matplotlib, a raster engine) belongs to
:mod:`collnb.views`, a layer above. So that :meth:`RunResult.png <.result.RunResult.png>` can
still draw without an import running back up, the views layer registers its two drawing
functions here when it is imported (``import collnb`` does that), and the result calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["register_renderer", "render_figure", "render_png"]

#: ``"figure"`` and ``"png"``: the registered ``fn(result, **kwargs)`` (see :func:`register_renderer`).
_renderer: dict[str, Callable[..., Any]] = {}


def register_renderer(figure_fn: Callable[..., Figure], png_fn: Callable[..., bytes]) -> None:
    """Make ``figure_fn(result, **kwargs) -> matplotlib.figure.Figure`` and ``png_fn(result,
    **kwargs) -> bytes`` (PNG) the functions that draw a :class:`~.result.RunResult`; a later call
    replaces them. :mod:`collnb.views.heatmap` registers its heatmap when imported.

    Raises:
        TypeError: either argument is not callable.
    """
    for name, fn in (("figure_fn", figure_fn), ("png_fn", png_fn)):
        if not callable(fn):
            raise TypeError(f"{name} must be a function fn(result, **kwargs); got {fn!r}")
    _renderer["figure"], _renderer["png"] = figure_fn, png_fn


def _registered(kind: str) -> Callable[..., Any]:
    try:
        return _renderer[kind]
    except KeyError:
        raise RuntimeError("no renderer is registered to draw a RunResult: `import collnb.views` registers "
                           "the heatmap (collnb.run and collnb.explore import it for you)") from None


def render_figure(result: object, **kwargs: Any) -> Figure:
    """``result``'s picture (a :class:`~.result.RunResult`, handed on as it is) as a
    :class:`matplotlib.figure.Figure`, by the registered renderer.

    Raises:
        RuntimeError: no renderer is registered (``import collnb.views`` registers the heatmap).
    """
    figure: Figure = _registered("figure")(result, **kwargs)
    return figure


def render_png(result: object, **kwargs: Any) -> bytes:
    """``result``'s picture (a :class:`~.result.RunResult`, handed on as it is) as PNG bytes, by the
    registered renderer.

    Raises:
        RuntimeError: no renderer is registered (``import collnb.views`` registers the heatmap).
    """
    png: bytes = _registered("png")(result, **kwargs)
    return png
