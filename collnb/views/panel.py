"""What every explorer's panel is made of (:mod:`collnb.views.binder` builds them): the
:class:`Picture` an explorer draws, a model's choices shown in its widgets (:func:`show_choices`),
the width of a slider with room for its track (:func:`slider_layout`), the status line, the notes
and the words for a failure as HTML (:func:`status_html`, :func:`notes_html`, :func:`error_head`),
and a panel closed with every widget model under it (:func:`close_widgets`).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Mapping, Protocol, Sequence, SupportsIndex, TypeAlias

import ipywidgets as widgets

from .. import ranks
from ..i18n import _
from .raster import Pixels, encode_png
from .static import MimeBundle, esc

__all__ = ["Picture", "as_picture", "show_choices", "slider_layout", "close_widgets", "status_html", "notes_html", "error_head", "options",
           "SLIDER_TRACK_PX", "READOUT_PX", "SR_ONLY", "OK", "BAD", "BUSY", "Control", "Player", "Choices", "Drawn"]

#: A field's widget: an ``IntSlider`` (its choices set ``min``/``max``) or a widget with options.
Control: TypeAlias = widgets.IntSlider | widgets.Dropdown | widgets.SelectionSlider | widgets.ToggleButtons
#: ``choices``' answer: ``{field: [value, ...] or [(label, value), ...]}``.
Choices: TypeAlias = Mapping[str, Sequence[object]]

#: The width of every explorer slider's track (px), whatever its label says: 12 values 16 px apart.
#: (A slider laid out with width "auto" in a wrapping row shrinks to its label and readout and its
#: track to 0 px: a mouse reached only its two ends, issue 34.)
SLIDER_TRACK_PX = 200
#: What a slider's readout and the margins beside it take (px): 84 measured in Chromium (ipywidgets 8.1,
#: JupyterLab 4; its readout is at least 50 px wide).
READOUT_PX = 84
#: Visually hidden, read by screen readers (the usual "sr-only" rule): a picture's description sits
#: right after the ``ipywidgets.Image`` (which has no alt attribute) in the page's order.
SR_ONLY = ("position:absolute;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;"
           "clip:rect(0,0,0,0);white-space:nowrap;border:0")
#: The status line's colours: a run drawn and right, a run wrong or failed, a run under way.
OK, BAD, BUSY = "#2E7D32", "#C62828", "#444"


def slider_layout(description: str, track_px: int = SLIDER_TRACK_PX) -> widgets.Layout:
    """The ``ipywidgets.Layout`` of a slider labelled ``description`` (shown at its own width,
    ``description_width="initial"``): a fixed width of the label (measured at 13 px, the widgets'
    font size) + ``track_px`` of track + the readout, at most the output's width.

    Raises:
        ValueError: ``track_px`` < 100.
    """
    if track_px < 100:
        raise ValueError(f"track_px must be >= 100 pixels; got {track_px}")
    from .raster import Canvas  # noqa: PLC0415 - the views' text measure (the same fonts as the pictures)

    label = Canvas(1, 1).measure(description, 13)[0] + 12 if description else 0
    return widgets.Layout(width=f"{int(label + track_px + READOUT_PX)}px", max_width="100%")


def options(values: Sequence[object]) -> list[tuple[str, object]]:
    """``[(label, value), ...]`` of a choices entry (plain values are their own labels; a tuple is a
    ``(label, value)`` pair)."""
    return [(str(v[0]), v[1]) if isinstance(v, tuple) else (str(v), v) for v in values]


def show_choices(controls: Mapping[str, Control], offered: Choices, values: Mapping[str, object],
                 keep_shown: Sequence[str] = ()) -> None:
    """Make each widget of ``controls`` (``{field: widget}``) offer ``offered[field]`` and show
    ``values[field]``: the one place where a model's choices reach its widgets (the caller ignores
    the widget events this sends). An ``IntSlider`` takes the choices' first and last value as its
    ``min``/``max``; a widget with ``options`` (``Dropdown``, ``SelectionSlider``, ``ToggleButtons``)
    takes them as its options (``(label, value)`` pairs or plain values, as given), set only when
    they changed; a field whose choices are empty is hidden (unless named in ``keep_shown``) and keeps
    its options; a field left out of ``offered`` keeps its options. A value not among the options is
    not set."""
    for name, w in controls.items():
        value = values.get(name)
        if name in offered:
            opts = options(offered[name])
            w.layout.display = None if opts or name in keep_shown else "none"
            if isinstance(w, widgets.IntSlider):
                if opts:
                    lo, hi = _int(opts[0][1], name), _int(opts[-1][1], name)
                    if lo > w.max:
                        w.max, w.min = hi, lo
                    elif (w.min, w.max) != (lo, hi):
                        w.min, w.max = lo, hi
                if isinstance(value, int) and w.min <= value <= w.max and w.value != value:
                    w.value = value
                continue
            if not opts:  # hidden: its options stay (a SelectionSlider cannot have none)
                continue
            plain = all(not isinstance(v, tuple) for v in offered[name])
            current = options(w.options)
            if current != opts:
                w.options = list(offered[name]) if plain else opts
        if isinstance(w, widgets.IntSlider):
            if isinstance(value, int) and w.min <= value <= w.max and w.value != value:
                w.value = value
        elif value in [v for _, v in options(w.options)] and w.value != value:
            w.value = value


def _int(value: object, name: str) -> int:
    """A choice of an ``IntSlider`` field as the int it is (a Python or numpy int)."""
    if isinstance(value, SupportsIndex):
        return operator.index(value)
    raise TypeError(f"the choices of {name} (an IntSlider) must be ints; got {value!r}")


def close_widgets(root: widgets.Widget) -> None:
    """Close ``root`` and every widget model under it (children, and the ``layout`` and ``style``
    models each widget has), so that nothing of a closed panel stays in the kernel."""
    todo: list[widgets.Widget] = [root]
    seen: list[widgets.Widget] = []
    while todo:
        w = todo.pop()
        if any(w is s for s in seen):
            continue
        seen.append(w)
        if isinstance(w, widgets.Box):
            todo.extend(w.children)
        for part in ("layout", "style"):
            sub = getattr(w, part, None)
            if isinstance(sub, widgets.Widget):
                todo.append(sub)
    for w in seen:
        w.close()


def status_html(text: str, busy: bool, color: str = BUSY, pre: bool = False, effect: str = "") -> str:
    """The status line as HTML: ``text`` in ``color`` (``pre``: kept as written, for an error's
    lines), ``effect`` below it in bold; ``data-busy`` says whether a run is under way."""
    body = esc(text)
    if pre:
        body = f"<pre style='white-space:pre-wrap;margin:0;font-size:85%;color:{color}'>{body}</pre>"
    else:
        body = f"<span style='color:{color}'>{body.replace(chr(10), '<br>')}</span>"
    if effect:
        body += f"<br><span class='collnb-dtype-effect' style='color:#A65400;font-weight:bold'>{esc(effect)}</span>"
    return f"<div class='collnb-status-box' data-busy='{int(busy)}'>{body}</div>"


def notes_html(info: Sequence[str], notes: Sequence[str]) -> str:
    """The panel's notes: information (ℹ, e.g. what a preset changed) and warnings (⚠, a value asked
    for that was replaced), one a line."""
    parts = []
    if info:
        parts.append("<div class='collnb-info' style='color:#1F4E79'>" + "<br>".join("ℹ " + esc(n) for n in info) +
                     "</div>")
    if notes:
        parts.append("<div style='color:#8a5300'>" + "<br>".join("⚠ " + esc(n) for n in notes) + "</div>")
    return "".join(parts)


def error_head(exc: BaseException) -> str:
    """What kind of failure ``exc`` is, in the status line's words: an invalid combination, a rank
    that failed or a run that timed out (:class:`collnb.ranks.RankError`,
    :class:`~collnb.ranks.LaunchTimeout`: the ranks were stopped, the next change starts fresh ones)."""
    if isinstance(exc, (ValueError, TypeError)):
        return _("invalid combination")
    if isinstance(exc, ranks.RankError):
        return _("a rank failed (the ranks were stopped; the next change starts fresh ones)")
    if isinstance(exc, ranks.LaunchTimeout):
        return _("the run timed out (the ranks were stopped; the next change starts fresh ones)")
    return _("the run failed with {error} (the next change starts fresh ranks)").format(error=type(exc).__name__)


class Player(Protocol):
    """A live view an explorer shows instead of its picture (a replay:
    :class:`~collnb.views.players.ReplayWidget`)."""

    @property
    def widget(self) -> widgets.Widget:
        """What is shown."""

    #: the IPython display ids whose saved picture follows the player (the binder hands it its own)
    display_ids: list[str]

    def static_bundle(self) -> MimeBundle:
        """The player's saved picture (:func:`collnb.views.static.static_bundle`)."""


@dataclasses.dataclass
class Picture:
    """What an explorer's ``draw`` returns: the picture and the words around it.

    Attributes:
        pixels: the picture, a ``uint8`` H x W x 3 array: the binder writes its PNG
            (:func:`~collnb.views.raster.encode_png`, at ``dpi``) and paints the saved notebook's
            picture from it (nothing decoded).
        png: PNG bytes, when ``draw`` has them already (then ``pixels`` may stay ``None``).
        dpi: the resolution written into the PNG made from ``pixels`` (``None``: none).
        caption: one line of HTML under the picture (and under the saved picture).
        alt: the picture's description as text: read by screen readers (a visually hidden line
            right after the picture) and the saved picture's alt text (default: the caption's text).
        attrs: ``data-*`` attributes of that line and of the saved picture (e.g. ``world_size``).
        status: the status line after this picture (plain text; ``""`` leaves it empty), green when
            ``ok``, else red; ``effect``: a second line, in bold.
        player: a live view shown instead of the picture (a replay:
            :class:`~collnb.views.players.ReplayWidget`): an object with ``widget`` (what is shown),
            ``static_bundle()`` and ``display_ids`` (the displays its saved picture follows); the
            binder closes it when a newer picture replaces it.
        data: what the picture shows, as data, for programs and tests (the primitive explorer's
            values as text).
    """

    pixels: Pixels | None = None
    png: bytes | None = None
    dpi: float | None = None
    caption: str = ""
    alt: str = ""
    attrs: dict[str, object] = dataclasses.field(default_factory=dict)
    status: str = ""
    ok: bool = True
    effect: str = ""
    player: Player | None = None
    data: object = None

    @property
    def width(self) -> int | None:
        """The picture's width in pixels (from its pixels or its PNG header), or ``None``."""
        if self.pixels is not None:
            return int(self.pixels.shape[1])
        if self.png is not None and self.png[:8] == b"\x89PNG\r\n\x1a\n":
            return int.from_bytes(self.png[16:20], "big")
        return None


#: ``draw``'s answer: a :class:`Picture`, or ``(png, caption)`` or ``(png, caption, pixels)``.
Drawn: TypeAlias = Picture | tuple[bytes, str] | tuple[bytes, str, Pixels]


def as_picture(drawn: Drawn) -> Picture:
    """``draw``'s answer as a :class:`Picture` (a Picture, or ``(png, caption[, pixels])``), its PNG written."""
    if isinstance(drawn, Picture):
        picture = drawn
    elif len(drawn) > 2:
        picture = Picture(png=drawn[0], caption=drawn[1], pixels=drawn[2])
    else:
        picture = Picture(png=drawn[0], caption=drawn[1])
    if picture.png is None and picture.pixels is not None:
        picture.png = encode_png(picture.pixels, picture.dpi)
    return picture
