"""A thin binder between a plain parameter model and ipywidgets: the generic machinery of an
explorer (first used by :func:`collnb.views.explore_redistribute`).

**The contract.** An explorer is four functions and one dataclass; the binder owns every widget
and thread, the model owns no widget:

* ``params``: one **frozen dataclass** instance holding every value a learner can set, one field
  per control (the field's name is the control's name). It is the whole state: the binder keeps
  the current one in :attr:`Binder.params` and replaces it (``dataclasses.replace``) on each change.
* ``choices(params) -> {field: [value, ...] or [(label, value), ...]}``: **pure**: the values each
  field may take given the others (a field it leaves out keeps its widget as is; an empty list
  hides the widget). Every field gets a ``Dropdown``, or a ``SelectionSlider`` when it is named in
  ``sliders`` (an ordered choice such as a count).
* ``fix(params) -> (params, notes)``: **pure**: the nearest valid parameters: each value that is
  not among its choices replaced (by the first choice, or a better one the model knows), and for
  each replacement a note (str) saying what changed and why. ``fix`` is called after every change,
  before anything runs; it must be idempotent (``fix(fix(p)[0])[0] == fix(p)[0]``).
* ``run(params) -> result``: runs the work (real ranks); called on the explorer's
  :class:`~collnb.views.worker.LatestWorker` thread, at most one at a time, only for the latest
  parameters (a superseded request never runs; a result that is stale when it finishes is not drawn).
  It may raise: the error is shown in the panel and the explorer stays usable.
* ``draw(result, params) -> (png bytes, caption html)`` or ``(png, caption, pixels)``: the picture
  (shown through an ``ipywidgets.Image``) and one line under it; also on the worker thread. Given
  its ``pixels`` (the ``uint8`` H x W x 3 array the PNG was encoded from), the saved notebook's
  picture is painted from them (:func:`collnb.views.static.captioned_png`) and no PNG is decoded.

What the binder does: builds the widgets (``labels`` names them), keeps every widget's options and
value equal to ``choices``/``fix`` of the current parameters (while it syncs, widget events are
ignored, so a sync never asks for a run), submits each change to the worker, shows ⏳/the caption/
the error in :attr:`status`, measures :attr:`last_timing` (``run_s``, ``draw_s``, ``total_s`` from
the change to the picture), and, displayed in a notebook, shows the static picture of its last
state above the live panel (:func:`collnb.views.static.static_bundle`) and keeps it current, so a
saved notebook shows the figure where no kernel runs. :meth:`Binder.set` is the programmatic
change (one run for several values; ``ValueError`` for a value not offered).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import ipywidgets as widgets

from ..i18n import _
from .static import captioned_png, esc, rerun_line, static_bundle, update_static
from .worker import LatestWorker, WorkerState

__all__ = ["Binder", "show_choices", "slider_layout", "SLIDER_TRACK_PX"]

#: The width of every explorer slider's track (px), whatever its label says: 12 values 16 px apart.
#: (A slider laid out with width "auto" in a wrapping row shrinks to its label and readout and its
#: track to 0 px: a mouse reached only its two ends, issue 34.)
SLIDER_TRACK_PX = 200
#: What a slider's readout and the margins beside it take (px): 84 measured in Chromium (ipywidgets 8.1,
#: JupyterLab 4; its readout is at least 50 px wide).
_READOUT_PX = 84


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
    return widgets.Layout(width=f"{int(label + track_px + _READOUT_PX)}px", max_width="100%")


def _options(values) -> list:
    """``[(label, value), ...]`` of a choices entry (plain values are their own labels)."""
    return [v if isinstance(v, tuple) else (str(v), v) for v in values]


def show_choices(controls: dict, offered: dict, values: dict, keep_shown=()) -> None:
    """Make each widget of ``controls`` (``{field: widget}``) offer ``offered[field]`` and show
    ``values[field]``: the one place where a model's choices reach its widgets (the caller ignores
    the widget events this sends). An ``IntSlider`` takes the choices' first and last value as its
    ``min``/``max``; a widget with ``options`` (``Dropdown``, ``SelectionSlider``, ``ToggleButtons``)
    takes them as its options (``(label, value)`` pairs or plain values), set only when they
    changed; a field whose choices are empty is hidden (unless named in ``keep_shown``) and keeps its options; a field left
    out of ``offered`` keeps its options. A value not among the options is not set."""
    for name, w in controls.items():
        value = values.get(name)
        if name in offered:
            opts = _options(offered[name])
            w.layout.display = None if opts or name in keep_shown else "none"
            if isinstance(w, widgets.IntSlider):
                if opts:
                    lo, hi = int(opts[0][1]), int(opts[-1][1])
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
            current = [o if isinstance(o, tuple) else (str(o), o) for o in w.options]
            if current != opts:
                w.options = list(offered[name]) if plain else opts
        if isinstance(w, widgets.IntSlider):
            if isinstance(value, int) and w.min <= value <= w.max and w.value != value:
                w.value = value
        elif value in [v for _, v in _options(w.options)] and w.value != value:
            w.value = value


class Binder(WorkerState):
    """Widgets bound to a parameter model (see the module docstring).

    Args:
        params: the initial parameters (a frozen dataclass instance); ``fix`` is applied first.
        choices, fix, run, draw: the model's functions (module docstring).
        labels: ``{field: description}`` of the widgets (default: the field name).
        name: the worker thread's name and the CSS class of the panel (``collnb-<name>``).
        what: the word in the saved picture's line ("Static picture of the <what>'s last state").
        wait: block until the first picture is drawn.
        sliders: the fields drawn as an ``ipywidgets.SelectionSlider`` over their choices (in order)
            instead of a ``Dropdown``.

    Attributes:
        params: the current parameters. controls: ``{field: Dropdown or SelectionSlider}``. image: the
            ``ipywidgets.Image``. caption, status, note: ``ipywidgets.HTML``. widget: the panel (VBox).
        last_result, last_png, last_params: of the latest run drawn. error: the latest run's
            exception or ``None``. notes: what ``fix`` changed at the latest change.
        last_timing: ``{"run_s", "draw_s", "total_s"}`` of the latest run drawn (seconds).
        draws_skipped: finished runs not drawn because newer parameters were waiting.
    """

    def __init__(self, params, choices: Callable, fix: Callable, run: Callable, draw: Callable, *,
                 labels: dict | None = None, name: str = "explorer", what: str = "explorer", wait: bool = True,
                 sliders: tuple = ()):
        if not dataclasses.is_dataclass(params) or isinstance(params, type):
            raise TypeError(f"params must be a dataclass instance; got {params!r}")
        self._choices, self._fix, self._run, self._draw = choices, fix, run, draw
        self.what = what
        self.last_result = self.last_png = self.last_params = self.error = None
        self._last_pixels = None
        self.last_timing: dict = {}
        self.draws_skipped = 0
        self.notes: list = []
        self._syncing = 0
        self._display_ids: list = []
        self._static_png = None
        self._worker = LatestWorker(self._execute, f"collnb-{name}", on_error=self._failed)
        self.params, self.notes = fix(params)
        labels = labels or {}
        style = {"description_width": "initial"}
        self.controls = {}
        offered = choices(self.params) if sliders else {}
        for f in dataclasses.fields(self.params):
            kind = widgets.SelectionSlider if f.name in sliders else widgets.Dropdown
            # a SelectionSlider needs its options (and a value among them) when it is made
            extra = dict(continuous_update=False, options=_options(offered.get(f.name, [])),
                         value=getattr(self.params, f.name)) if f.name in sliders else {}
            label = labels.get(f.name, f.name)
            w = kind(description=label, style=style,
                     layout=slider_layout(label) if f.name in sliders else widgets.Layout(width="auto"), **extra)
            w.add_class("collnb-control")
            w.add_class(f"collnb-{f.name.replace('_', '-')}")
            self.controls[f.name] = w
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.image.add_class("collnb-figure")
        self.caption, self.status, self.note = widgets.HTML(), widgets.HTML(), widgets.HTML()
        self.caption.add_class("collnb-caption")
        self.status.add_class("collnb-status")
        self.note.add_class("collnb-note")
        row = widgets.HBox(list(self.controls.values()),
                           layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        self.widget = widgets.VBox([row, self.note, self.status, self.image, self.caption])
        self.widget.add_class(f"collnb-{name}")
        self.widget.add_class("collnb-live")  # hides the static picture while the panel is live
        self._sync()
        for field_name, w in self.controls.items():
            w.observe(self._on_change(field_name), names="value")
        self._request()
        if wait:
            self.wait()

    # -- the model's values in the widgets ------------------------------------------------------
    def _sync(self):
        """Make every widget show ``choices``/the value of :attr:`params` (events ignored)."""
        self._syncing += 1
        try:
            offered = {k: _options(vs) for k, vs in self._choices(self.params).items()}
            show_choices(self.controls, offered, dataclasses.asdict(self.params))
            self.note.value = ("<div style='color:#8a5300'>" + "<br>".join("⚠ " + esc(n) for n in self.notes) +
                               "</div>") if self.notes else ""
        finally:
            self._syncing -= 1

    def _on_change(self, name):
        def handler(change):
            if self._syncing:
                return
            self._apply({name: change["new"]})
        return handler

    def _apply(self, values: dict):
        self.params, self.notes = self._fix(dataclasses.replace(self.params, **values))
        self._sync()
        self._request()

    def offered(self, name: str) -> list:
        """The values ``name`` offers now (``choices`` of the current parameters)."""
        return [v for _, v in _options(self._choices(self.params).get(name, []))]

    def set(self, **values) -> "Binder":
        """Change several parameters at once, asking for ONE run (as a learner would, but together).

        Raises:
            ValueError: an unknown name, or a value not offered now (the message lists the offered ones).
        """
        names = {f.name for f in dataclasses.fields(self.params)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; choose from {', '.join(sorted(names))}")
        trial, _ = self._fix(dataclasses.replace(self.params, **values))
        for name, v in values.items():
            offered = [o for _, o in _options(self._choices(trial).get(name, []))]
            if offered and v not in offered:
                raise ValueError(f"{name}={v!r} is not offered here; choose one of {', '.join(map(str, offered))}")
        self._apply(values)
        return self

    # -- running --------------------------------------------------------------------------------
    def _request(self):
        if self._worker.closed:
            return
        busy = _("⏳ running on real ranks…")
        self.status.value = f"<span style='color:#555'>{esc(busy)}</span>"
        self._worker.submit((self.params, time.perf_counter()))

    def _execute(self, request):
        params, t_request = request
        t0 = time.perf_counter()
        try:
            result = self._run(params)
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            if not self._worker.stale():
                self._failed(exc, request)
            return
        t1 = time.perf_counter()
        if self._worker.stale():
            self.draws_skipped += 1
            return
        drawn = self._draw(result, params)
        png, caption = drawn[0], drawn[1]
        pixels = drawn[2] if len(drawn) > 2 else None
        t2 = time.perf_counter()
        if self._worker.stale():
            self.draws_skipped += 1
            return
        if png[:8] == b"\x89PNG\r\n\x1a\n":  # shown at its own width (never scaled up), at most the output's
            self.image.width = str(int.from_bytes(png[16:20], "big"))
        self.image.value = png
        self.caption.value = caption
        self.last_result, self.last_png, self.last_params, self.error = result, png, params, None
        self._static_png, self._last_pixels = None, pixels
        self.last_timing = {"run_s": t1 - t0, "draw_s": t2 - t1, "total_s": time.perf_counter() - t_request}
        self.status.value = ""
        self._update_static()

    def _failed(self, exc, request):
        self.error = exc
        self.last_params = request[0] if isinstance(request, tuple) else request
        self.status.value = (f"<div style='color:#b00020;white-space:pre-wrap'>✗ {esc(type(exc).__name__)}: "
                             f"{esc(exc)}</div>")

    def wait(self, timeout: float = 120.0):
        """Block until no run is in flight or waiting; returns :attr:`last_result`.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        self._worker.wait(timeout)
        return self.last_result

    def close(self, timeout: float = 30.0) -> None:
        """Drop waiting parameters, wait for the run in flight, close the widgets."""
        self._worker.close(timeout)
        for w in [self.widget, *self.widget.children, *self.widget.children[0].children]:
            w.close()

    # -- display --------------------------------------------------------------------------------
    def static_bundle(self) -> dict:
        """The static picture of the current state (see :func:`collnb.views.static.static_bundle`)."""
        if self.last_png is None:
            return static_bundle(None, self.what, alt=repr(self), caption=_("no run yet"))
        if self._static_png is None:  # from the pixels when draw gave them: no PNG decoded
            picture = self._last_pixels if self._last_pixels is not None else self.last_png
            self._static_png = captioned_png(picture, rerun_line(self.what))
        return static_bundle(self.last_png, self.what, alt=repr(self), png_with_line=self._static_png,
                             below=self.caption.value)

    def _update_static(self):
        update_static(self._display_ids, self.static_bundle)

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        data = self.widget._repr_mimebundle_(**kwargs) or {}
        data["text/plain"] = repr(self) + "\n" + rerun_line(self.what)
        return data

    def _ipython_display_(self):
        from IPython.display import display  # noqa: PLC0415
        did = f"collnb-{self.what}-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        display(self._repr_mimebundle_(), raw=True)

    def __repr__(self):
        return f"{type(self).__name__}({self.params})"
