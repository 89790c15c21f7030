"""The one explorer engine of the views: a parameter model bound to ipywidgets, run on real ranks,
drawn, and kept as a static picture for saved notebooks.

Every explorer is a :class:`Binder`: the primitive explorer (:mod:`.explorer`), the rounds explorer
(:mod:`.rounds_explorer`), the redistribute explorer (:mod:`.redistribute_explorer`), the
pipeline-schedule and DDP-bucket explorers of :mod:`collnb.labs`. The worker (one
:class:`~collnb.views.worker.LatestWorker` thread per explorer), the status line, the notes and the
static picture exist here once (the widgets' pieces: :mod:`.panel`).

**The contract.** An explorer's state is one **frozen dataclass** instance holding every value a
learner can set, one field per control (the field's name is the control's name); the binder keeps
the current one in :attr:`Binder.state` and replaces it on each change. Four methods make an explorer:

* ``choices(params) -> {field: [value, ...] or [(label, value), ...]}``: **pure**: the values each
  field may take given the others (a field it leaves out keeps its widget as is; an empty list
  hides the widget).
* ``fix(params) -> (params, notes)`` or ``(params, notes, info)``: **pure**: the nearest valid
  parameters, and a note (str) for each value replaced, saying what changed and why (``info``: lines
  that inform rather than warn, shown with ℹ instead of ⚠). It must be idempotent
  (``fix(fix(p)[0])[0] == fix(p)[0]``). Default: each value its control does not offer replaced by
  the first one offered, with a note.
* ``run(params) -> result``: the work (real ranks), on the explorer's worker thread, at most one at
  a time and only for the latest parameters (a superseded request never runs; a result already
  stale when it finishes is not drawn). It may raise: the error is shown in the status line and
  the explorer stays usable.
* ``draw(result, params) -> Picture``: what the learner sees, on the worker thread too: the
  picture's pixels (the binder writes the PNG, and paints the saved picture from them: nothing is
  decoded), the caption under it, its description for screen readers, the status line
  (:class:`~collnb.views.panel.Picture`). ``(png, caption)`` or ``(png, caption, pixels)`` is read as a Picture.

A new explorer is a small class::

    @dataclasses.dataclass(frozen=True)
    class RingParams:
        world_size: int = 4

    class RingExplorer(Binder[RingParams, Trace]):  # the parameters' dataclass, what run returns
        name, what = "ring-explorer", "ring explorer"  # CSS class collnb-ring-explorer; the saved line's word
        labels = {"world_size": N_("world size")}
        sliders = ("world_size",)                      # a SelectionSlider over its choices, not a Dropdown

        def choices(self, p):
            return {"world_size": list(range(2, 9))}

        def run(self, p):
            return collnb.run_algorithm("all_reduce", "ring", p.world_size)

        def draw(self, trace, p):
            return Picture(pixels=paint_heatmap(trace, trace.n_rounds), caption=f"{trace.n_rounds} rounds")

    RingExplorer(RingParams())  # returns with the first picture; displayed, it is the panel

or, with no class of its own, ``Binder(RingParams(), choices, fix, run, draw, name=..., sliders=...)``.

**Hooks**, for explorers with more than dropdowns and one picture (their defaults suit the others):
``change(params, values)`` (a learner's change; default: ``fix`` of the values replaced),
``normalise(name, value)`` (what :meth:`Binder.set` compares, e.g. ``"fp16"`` -> ``"float16"``),
``control(name, label, offered, value)`` (a field's widget), ``layout()`` (the panel's rows),
``synced()`` (after the widgets show a new state), ``shown(result, picture)`` (after a picture is
shown), ``busy_text(params)``, ``done_text(result, picture, timing)`` and ``error_head(exc)`` (the
status line's words), ``settle()`` (on the worker thread after each run: facts the first picture went
without). Class attributes: ``name``, ``what``, ``labels``, ``sliders``, ``keep_shown`` (fields whose
widget stays shown with no choices), ``figure_classes`` (CSS classes of the picture).

**What the binder does.** It builds the widgets, keeps every widget's options and value equal to
``choices``/``fix`` of the state (while it syncs, widget events are ignored, so a sync never asks for
a run), submits each change to the worker, shows ⏳ / the status / the error in :attr:`status`,
measures :attr:`last_timing` (``run_s``, ``draw_s``, ``total_s`` from the change to the picture),
and, displayed in a notebook, shows the static picture of its last state above the live panel
(:func:`collnb.views.static.static_bundle`) and keeps it current, so a saved notebook shows the figure
where no kernel runs. :meth:`Binder.set` is the programmatic change (one run for several values;
``ValueError``, and nothing changed, for a value not offered).

One slider move walks: the widget's event -> ``change`` -> the widgets synced -> the request in the
worker's one-slot mailbox -> ``run`` -> ``draw`` (PNG written once) -> the picture, the status line
and the saved picture set.
"""

from __future__ import annotations

import dataclasses
import html
import re
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Sequence, TypeAlias

import ipywidgets as widgets
from typing_extensions import TypeVar  # default= (PEP 696): a Binder left unparameterised is Binder[Any, Any]

from ..i18n import _
from .panel import (BAD, BUSY, OK, SR_ONLY, Choices, Control, Drawn, Picture, as_picture, close_widgets, error_head,
                    notes_html, options, show_choices, slider_layout, status_html)
from .static import MimeBundle, captioned_png, esc, live_bundle, rerun_line, static_bundle, update_static
from .worker import LatestWorker, WorkerState

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Binder", "Picture", "Fixed"]

#: An explorer's parameters: a (frozen) dataclass instance.
P = TypeVar("P", bound="DataclassInstance", default=Any)
#: What its ``run`` returns and its ``draw`` reads.
R = TypeVar("R", default=Any)
#: ``fix``'s and ``change``'s answer: ``(params, notes)`` or ``(params, notes, info)``.
Fixed: TypeAlias = tuple[P, Sequence[str]] | tuple[P, Sequence[str], Sequence[str]]


class Binder(WorkerState[tuple[P, float]], Generic[P, R]):
    """An explorer: widgets bound to a parameter model (see the module docstring). ``Binder[P, R]``:
    ``P`` its parameters' dataclass, ``R`` what its ``run`` returns (left out: ``Any``).

    Args:
        params: the initial parameters (a frozen dataclass instance); ``fix`` is applied first.
        choices, fix, run, draw: the model's functions, for an explorer with no class of its own (a
            subclass defines them as methods instead).
        labels: ``{field: description}`` of the widgets (default: the class's, else the field name;
            each goes through ``_()``).
        name: the worker thread's name (``collnb-<name>``) and the CSS class of the panel.
        what: the word in the saved picture's line ("Static picture of the <what>'s last state").
        wait: block until the first picture is drawn (or the first run failed).
        sliders: the fields drawn as an ``ipywidgets.SelectionSlider`` over their choices (in order)
            instead of a ``Dropdown``.

    Attributes:
        state: the current parameters. controls: ``{field: widget}`` (set ``.value`` as a learner
            would). image: the ``ipywidgets.Image`` (class ``collnb-figure``); figure_text: the
            picture's description for screen readers (visually hidden, right after it); caption,
            status, note: ``ipywidgets.HTML``; picture: the box of the picture (or of a player);
            widget: the panel (VBox, classes ``collnb-<name>`` and ``collnb-live``).
        last_result, last_picture, last_png, last_params: of the latest run drawn (``last_params``:
            of the latest run drawn or failed). error: the latest finished run's exception or ``None``.
        notes, info: what ``fix``/``change`` said at the latest change. message: the status line as text.
        last_timing: ``{"run_s", "draw_s", "total_s"}`` of the latest run drawn (seconds; total = from
            the change that asked for it to the picture in the widget).
        first_picture_s: seconds from the explorer being made to its first picture.
        draws_skipped: finished runs not drawn because newer parameters were waiting.
        static_png: the saved picture with its line (PNG), made when first asked for after each picture.
        in_flight, pending, busy, requests, runs_started, runs_finished: see
            :class:`~collnb.views.worker.WorkerState`.

    Raises:
        TypeError: ``params`` is not a dataclass instance, or no ``choices``, ``run`` or ``draw`` was
            given or defined.
        TimeoutError: ``wait`` and no first picture after 120 s.
    """

    name: str = "explorer"
    what: str = "explorer"
    labels: Mapping[str, str] = {}
    sliders: tuple[str, ...] = ()
    keep_shown: tuple[str, ...] = ()
    figure_classes: tuple[str, ...] = ()

    def __init__(self, params: P, choices: Callable[[P], Choices] | None = None,
                 fix: Callable[[P], Fixed[P]] | None = None, run: Callable[[P], R] | None = None,
                 draw: Callable[[R, P], Drawn] | None = None, *, labels: Mapping[str, str] | None = None,
                 name: str | None = None, what: str | None = None, wait: bool = True,
                 sliders: Sequence[str] | None = None) -> None:
        if not dataclasses.is_dataclass(params) or isinstance(params, type):
            raise TypeError(f"params must be a dataclass instance; got {params!r}")
        self._choices, self._fix, self._run, self._draw = choices, fix, run, draw
        for which, given in (("choices", choices), ("run", run), ("draw", draw)):
            if given is None and getattr(type(self), which) is getattr(Binder, which):
                raise TypeError(f"{type(self).__name__} has no {which}(): give it to Binder(...) or define the "
                                f"method (see collnb.views.binder)")
        if labels is not None:
            self.labels = dict(labels)
        if name is not None:
            self.name = name
        if what is not None:
            self.what = what
        if sliders is not None:
            self.sliders = tuple(sliders)
        self.last_result: R | None = None
        self.last_picture: Picture | None = None
        self.last_png: bytes | None = None
        self.last_params: P | None = None
        self.error: BaseException | None = None
        self.last_timing: dict[str, float] = {}
        self.first_picture_s: float | None = None
        self.draws_skipped = 0
        self.message = ""
        self.static_png: bytes | None = None
        self._t_made = time.perf_counter()
        self._syncing = 0
        self._display_ids: list[str] = []
        self._lock = threading.RLock()  # the state and the widgets: a learner's change, the worker's settle()
        self._first = threading.Event()  # the first request finished (drawn or failed)
        self._worker = LatestWorker(self._execute, f"collnb-{self.name}", on_error=self._worker_error)
        self.state, self.notes, self.info = self._said(self.fix(params))
        self._build()
        self._sync()
        for field_name, w in self.controls.items():
            w.observe(self._on_change(field_name), names="value")
        self._request()
        if wait and not self._first.wait(120.0):
            raise TimeoutError(_("the explorer was still running after {seconds} s").format(seconds=120.0))

    # -- the model (the contract; the functions given, or a subclass's methods) ------------------
    def choices(self, params: P) -> Choices:
        """The values each field may take given ``params`` (pure)."""
        assert self._choices is not None  # given, or this method overridden: checked when made
        return self._choices(params)

    def fix(self, params: P) -> Fixed[P]:
        """``(params, notes)`` or ``(params, notes, info)``: the nearest valid parameters (pure,
        idempotent). Default: each value not offered replaced by the first one offered, with a note."""
        if self._fix is not None:
            return self._fix(params)
        offered = self.choices(params)
        notes: list[str] = []
        for f in dataclasses.fields(params):
            allowed = [v for _, v in options(offered.get(f.name, []))]
            value = getattr(params, f.name)
            if allowed and value not in allowed:
                notes.append(_("{control} {value} is not offered here; showing {shown}").format(
                    control=_(self.labels.get(f.name, f.name)), value=value, shown=allowed[0]))
                params = dataclasses.replace(params, **{f.name: allowed[0]})
                offered = self.choices(params)
        return params, notes

    def run(self, params: P) -> R:
        """The work for ``params`` (on the worker thread); may raise."""
        assert self._run is not None  # see choices
        return self._run(params)

    def draw(self, result: R, params: P) -> Drawn:
        """The :class:`~collnb.views.panel.Picture` of ``result`` (on the worker thread)."""
        assert self._draw is not None  # see choices
        return self._draw(result, params)

    # -- hooks (defaults) -------------------------------------------------------------------------
    def change(self, params: P, values: Mapping[str, object]) -> Fixed[P]:
        """A learner's change of ``values`` (``{field: value}``) to ``params``: ``fix`` of them replaced."""
        return self.fix(dataclasses.replace(params, **values))

    def normalise(self, name: str, value: object) -> object:
        """``value`` of field ``name`` as its control offers it (for :meth:`set`'s check)."""
        return value

    def control(self, name: str, label: str, offered: list[object], value: object) -> Control:
        """The widget of field ``name``: a ``SelectionSlider`` over ``offered`` for the fields named in
        :attr:`sliders`, else a ``Dropdown`` (filled by the first sync)."""
        style = {"description_width": "initial"}
        if name in self.sliders:  # a SelectionSlider needs its options (and a value among them) when made
            return widgets.SelectionSlider(options=offered, value=value, description=label, continuous_update=False,
                                           style=style, layout=slider_layout(label))
        return widgets.Dropdown(description=label, style=style, layout=widgets.Layout(width="auto"))

    def layout(self) -> Sequence[widgets.Widget]:
        """The panel's rows: the controls (wrapping), the notes, the status line, the picture, its caption."""
        row = widgets.HBox(list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap",
                                                                               align_items="center"))
        return [row, self.note, self.status, self.picture, self.caption]

    def synced(self) -> None:
        """Called after the widgets show a new state (the explorer's own widgets follow it here)."""

    def shown(self, result: R, picture: Picture) -> None:
        """Called on the worker thread after ``picture`` of ``result`` is shown."""

    def busy_text(self, params: P) -> str:
        """The status line while ``params`` run."""
        return _("⏳ running on real ranks…")

    def done_text(self, result: R, picture: Picture, timing: Mapping[str, float]) -> str:
        """The status line after ``picture`` is shown (``timing``: :attr:`last_timing`)."""
        return picture.status

    def error_head(self, exc: BaseException) -> str:
        """What kind of failure ``exc`` is (the status line says ``✗ <head>:`` and the message)."""
        return error_head(exc)

    def settle(self) -> None:
        """Called on the worker thread after each run (and by :meth:`set`/:meth:`offered` first): the
        place for slow facts the first picture went without."""

    # -- widgets ----------------------------------------------------------------------------------
    def _build(self) -> None:
        offered = self.choices(self.state)
        self.controls: dict[str, Control] = {}
        for f in dataclasses.fields(self.state):
            label = _(self.labels.get(f.name, f.name))
            w = self.control(f.name, label, list(offered.get(f.name, [])), getattr(self.state, f.name))
            w.add_class("collnb-control")
            w.add_class(f"collnb-{f.name.replace('_', '-')}")
            self.controls[f.name] = w
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto", min_width="0"))
        self.image.add_class("collnb-figure")
        for cls in self.figure_classes:
            self.image.add_class(cls)
        self.figure_text = widgets.HTML(value=f"<span style='{SR_ONLY}'>{esc(_('no run yet'))}</span>")
        self.figure_text.add_class("collnb-figure-text")
        self.picture = widgets.VBox([self.image, self.figure_text], layout=widgets.Layout(min_width="0"))
        self.picture.add_class("collnb-picture")
        self.caption, self.status, self.note = widgets.HTML(), widgets.HTML(), widgets.HTML()
        self.caption.add_class("collnb-caption")
        self.status.add_class("collnb-status")
        self.note.add_class("collnb-note")
        self.widget = widgets.VBox(self.layout())
        self.widget.add_class(f"collnb-{self.name}")
        self.widget.add_class("collnb-live")  # hides the static picture while the panel is live

    @staticmethod
    def _said(out: Fixed[P]) -> tuple[P, list[str], list[str]]:
        """``(params, notes, info)`` of a ``fix``/``change`` answer (``info`` may be left out)."""
        params, notes = out[0], list(out[1])
        return params, notes, list(out[2]) if len(out) > 2 else []

    def _sync(self) -> None:
        """Make every widget show :attr:`state` and offer its choices (widget events ignored)."""
        with self._lock:
            self._syncing += 1
            try:
                show_choices(self.controls, self.choices(self.state), dataclasses.asdict(self.state),
                             keep_shown=self.keep_shown)
                self.note.value = notes_html(self.info, self.notes)
                self.synced()
            finally:
                self._syncing -= 1

    def _on_change(self, name: str) -> Callable[[Mapping[str, object]], None]:
        def handler(change: Mapping[str, object]) -> None:  # traitlets' change: {"name", "old", "new", ...}
            with self._lock:
                if self._syncing:  # a value the explorer itself is showing (this thread or the worker's)
                    return
                try:
                    self.state, self.notes, self.info = self._said(self.change(self.state, {name: change["new"]}))
                except Exception as exc:  # noqa: BLE001 - shown in the panel; the explorer stays usable
                    self._sync()
                    self._failed(exc, self.state)
                    return
                self._sync()
                self._request()
        return handler

    def _field_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.state)]

    def offered(self, name: str) -> list[object]:
        """The values control ``name`` offers now (``choices`` of :attr:`state`).

        Raises:
            KeyError: not a control name.
        """
        if name not in self._field_names():
            raise KeyError(name)
        self.settle()
        return [v for _, v in options(self.choices(self.state).get(name, []))]

    def set(self, **values: object) -> Binder[P, R]:
        """Change several controls at once, asking for ONE run (as a learner would, but together);
        each value is read as :meth:`normalise` reads it and checked against what the controls offer
        with all of them applied.

        Raises:
            ValueError: an unknown name, or a value not offered (the message lists the offered ones);
                nothing is changed then.
        """
        names = self._field_names()
        unknown = set(values) - set(names)
        if unknown:
            raise ValueError(_("unknown control(s) {names}; choose from {valid}").format(
                names=sorted(unknown), valid=", ".join(names)))
        self.settle()  # every choice known before a value is checked against them
        with self._lock:
            values = {k: self.normalise(k, v) for k, v in values.items()}
            trial = self._said(self.change(self.state, values))
            offered = self.choices(trial[0])
            for name, v in values.items():
                allowed = [o for _, o in options(offered.get(name, []))]
                if allowed and v not in allowed:
                    raise ValueError(_("{name}={value!r} is not offered here; choose one of {valid}").format(
                        name=name, value=v, valid=", ".join(map(str, allowed))))
            self.state, self.notes, self.info = trial
            self._sync()
            self._request()
        return self

    def refresh(self) -> Binder[P, R]:
        """Run again with the current values."""
        self._request()
        return self

    # -- running ----------------------------------------------------------------------------------
    def _request(self) -> None:
        if self._worker.closed:
            return
        # busy first: a run finishing right after the hand-over must not be overwritten by it
        self._set_status(self.busy_text(self.state), busy=True)
        self._worker.submit((self.state, time.perf_counter()))

    def _execute(self, request: tuple[P, float]) -> None:
        try:
            self._run_and_show(*request)
        finally:
            self._first.set()
            if not self._worker.closed:
                try:
                    self.settle()
                except Exception as exc:  # noqa: BLE001 - shown in the panel; set() asks again
                    self._failed(exc, request[0])

    def _run_and_show(self, params: P, t_request: float) -> None:
        t0 = time.perf_counter()
        try:
            result = self.run(params)
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            if not self._worker.stale():
                self._failed(exc, params)
            return
        t1 = time.perf_counter()
        if self._worker.stale():
            self.draws_skipped += 1
            return
        picture = as_picture(self.draw(result, params))
        t2 = time.perf_counter()
        if self._worker.stale():
            self.draws_skipped += 1
            return
        self._show(picture)
        self.last_result, self.last_picture, self.last_png = result, picture, picture.png
        self.last_params, self.error, self.static_png = params, None, None
        self.shown(result, picture)
        t3 = time.perf_counter()
        self.last_timing = {"run_s": t1 - t0, "draw_s": t2 - t1, "total_s": t3 - t_request}
        if self.first_picture_s is None:
            self.first_picture_s = t3 - self._t_made
        text = self.done_text(result, picture, self.last_timing)
        self._set_status(text, busy=False, color=OK if picture.ok else BAD, effect=picture.effect)
        if not self._worker.stale():  # during a drag only the last state is worth saving
            self._update_static()

    def _show(self, picture: Picture) -> None:
        """Put ``picture`` (or its player) in the panel, its description after it, its caption under it."""
        old = self.last_picture.player if self.last_picture is not None else None
        if picture.player is not None:
            self.picture.children = (picture.player.widget,)
            picture.player.display_ids = self._display_ids  # the saved picture follows the player's round
        else:
            if self.picture.children[:1] != (self.image,):
                self.picture.children = (self.image, self.figure_text)
            width = picture.width
            if width:  # shown at its own width (never scaled up), at most the output's
                self.image.width = str(width)
            self.image.value = picture.png or b""
            text = picture.alt or _plain(picture.caption)
            data = " ".join(f"data-{k.replace('_', '-')}='{esc(v)}'" for k, v in picture.attrs.items())
            self.figure_text.value = f"<span style='{SR_ONLY}' {data}>{esc(text)}</span>"
        self.caption.value = picture.caption
        if old is not None and old is not picture.player:
            close_widgets(old.widget)

    def _worker_error(self, exc: BaseException, request: tuple[P, float]) -> None:
        self._failed(exc, request[0])

    def _failed(self, exc: BaseException, params: P) -> None:
        """Show ``exc`` in the status line: ``✗ <error_head>:`` and its message (at most 40 lines)."""
        self.error = exc
        self.last_params = params
        text = str(exc) or "".join(traceback.format_exception_only(type(exc), exc)).strip()
        lines = text.splitlines()
        if len(lines) > 40:
            lines = lines[:40] + ["…"]
        self._set_status(f"✗ {self.error_head(exc)}:\n" + "\n".join(lines), busy=False, color=BAD, pre=True)

    def _set_status(self, text: str, busy: bool, color: str = BUSY, pre: bool = False, effect: str = "") -> None:
        self.message = text + (f"\n{effect}" if effect else "")
        self.status.value = status_html(text, busy, color, pre, effect) if text or effect else ""

    def wait(self, timeout: float = 120.0) -> R | None:
        """Block until no run is in flight or waiting (nor the ``settle`` after it); returns
        :attr:`last_result`.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        try:
            self._worker.wait(timeout)
        except TimeoutError:
            raise TimeoutError(_("the explorer was still running after {seconds} s").format(seconds=timeout)) \
                from None
        return self.last_result

    def close(self, timeout: float = 30.0) -> None:
        """Stop the explorer: drop waiting values, wait for the run in flight, close every widget of
        the panel. Warm ranks stay (they belong to :mod:`collnb.ranks`; see :func:`collnb.shutdown`)."""
        self._worker.close(timeout)
        # the panel, and the binder's widgets a layout() left out of it
        for w in (self.widget, self.picture, self.image, self.figure_text, self.caption, self.status, self.note,
                  *self.controls.values()):
            close_widgets(w)

    # -- display ----------------------------------------------------------------------------------
    def static_bundle(self) -> MimeBundle:
        """The static picture of the current state as a mime bundle (``text/html``, ``image/png``,
        ``text/plain``; see :func:`collnb.views.static.static_bundle`): the last picture with the
        line above it, painted from its pixels (no PNG decoded), once per picture; a player's own."""
        pic = self.last_picture
        if pic is None:
            return static_bundle(None, self.what, alt=repr(self), caption=self.message or _("no run yet"))
        if pic.player is not None:
            return dict(pic.player.static_bundle())
        if self.static_png is None:
            self.static_png = captioned_png(pic.pixels if pic.pixels is not None else pic.png, rerun_line(self.what))
        return static_bundle(pic.png, self.what, alt=pic.alt or repr(self), png_with_line=self.static_png,
                             attrs=pic.attrs, below=pic.caption)

    def _update_static(self) -> None:
        update_static(self._display_ids, self.static_bundle)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None, **kwargs: object) -> MimeBundle:
        # the panel (ipywidgets' view mime type), the explorer's repr as the plain-text fallback and an
        # empty text/html where widgets cannot run (the static picture stands in there)
        return live_bundle(self.widget, repr(self))

    def _ipython_display_(self) -> None:
        """Display the static picture of the current state (kept current) and the live panel, as two
        outputs of the cell."""
        from IPython.display import display  # noqa: PLC0415
        did = f"collnb-{self.name}-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        display(self._repr_mimebundle_(), raw=True)

    @property
    def params(self) -> P:
        """The current parameters (:attr:`state`)."""
        return self.state

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.state})"


def _plain(html_text: str) -> str:
    """The text of a line of HTML (tags dropped, entities read)."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_text)).strip()
