"""Interactive explorer: move a slider, the primitive runs again on the warm ranks, the heatmap redraws.

``explore("all_reduce")`` shows a small panel of standard ipywidgets 8 controls (no custom
JavaScript, so it works the same in JupyterLab 4, Jupyter Notebook 7 and VS Code):

* **world size** slider (the number of ranks, 1..16; for NCCL at most the visible GPU count),
* **dtype** dropdown: every dtype the backend accepted for this primitive when
  :func:`collnb.collectives.backend_support` tried them on real ranks,
* **op** dropdown (reducing primitives only): the reduce ops valid for the chosen dtype,
* **src/dst** slider (rooted primitives only): the root rank,
* **backend** toggle: the backends that can run here; the reason is shown for the others
  (:func:`collnb.ranks.backend_info`),
* **elements per chunk** (tensor length = chunks x elements per chunk),
* **inputs**: the teaching values (``10*rank + chunk``; ``100*rank + chunk`` above 10 ranks) or
  a preset that fits the primitive (:func:`collnb.views.presets.presets_for`): reducing primitives get the dtype
  lessons (int8 SUM wraps 100+100 -> -56; float16 60000+60000 -> inf; bfloat16 256+1 -> 256);
  primitives that only move data get values that name their source rank and special floats
  (nan, inf, 1/3) that arrive bit for bit. A preset keeps the learner's world size unless its
  effect needs more ranks, and then says so in the panel.

Saved notebooks: displaying an explorer also displays a static picture of its current state
(PNG, plus one line telling the learner to run the cell to bring the controls back), kept current
with ``update_display`` as the controls move. While the panel is live the picture is hidden (a
CSS rule in the picture's own HTML); one line above the panel says to run the cell again only once
ipywidgets marks the panel disconnected (a restarted or stopped kernel leaves it on the page,
inert); a saved notebook reopened without a kernel, nbviewer, a code host or a MyST-NB book shows
the picture, worded for where it is shown (see :func:`collnb.views.static.static_bundle`).

The explorer's state is one :class:`~collnb.views.controls.ExplorerParams` (primitive, world size,
backend, dtype, op, src/dst, elements per chunk, inputs preset); the values each control offers and
what a change does are pure functions of it (:func:`~collnb.views.controls.choices`,
:func:`~collnb.views.controls.update`), and the widgets only show it
(:func:`~collnb.views.binder.show_choices`, the same binder as :func:`collnb.explore_redistribute`).
A slider move checks the world size once (against :func:`collnb.ranks.backend_info`, read when the
explorer is made) and asks :func:`collnb.collectives.backend_support` once (the run's own check:
what the backend accepts does not depend on the world size, so the explorer keeps its answer).

The heatmap is an ``ipywidgets.Image`` (PNG bytes sent as a binary buffer, no base64 HTML). It has
no alt attribute: its description (title, every rank's output, the verdict) is an
``ipywidgets.HTML`` right after it, visually hidden by the usual "screen-reader only" CSS (clipped
to 1 px, not ``display: none``, which screen readers skip). No ``tooltip`` on it: ipywidgets 8's
view reads a ``description`` an Image lacks, and the picture fails to render.

Every change runs the primitive through :func:`collnb.collectives.run` (the warm pool of
:mod:`collnb.ranks`) and redraws the before | after heatmap with the same drawing path a
:class:`~collnb.collectives.RunResult` uses when a notebook displays it
(:meth:`RunResult.png <collnb.collectives.RunResult.png>`). For reducing primitives a table beside
the heatmap (below it when the notebook is too narrow for both) shows the float64 result of the
same inputs and highlights the chunks where the dtype changed the answer.

Runs happen on the views' shared :class:`~collnb.views.worker.LatestWorker` (one background
thread per explorer, as for the rounds explorer): a control change returns at once, and while a
run is in flight further changes only overwrite a one-slot mailbox, so a fast slider drag runs at
most one stale request and then the latest values (no queue). A result that is already stale
when its run finishes is not drawn. Errors (an invalid combination, a failing rank) are shown in
the panel; the explorer stays usable (a pool the launcher closed after a failure is rebuilt by
the next run).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from typing import Any, Sequence

import ipywidgets as widgets

from .. import collectives
from .. import ranks
from ..i18n import _
from ..vocabulary import BACKENDS, MAX_WORLD_SIZE, check_backend, check_choice, check_world_size, dtype_name
from .binder import show_choices, slider_layout
from .controls import ORDER, ExplorerParams, Facts, choices, fix, normalised, update
from .explorer_text import (backend_note_html, drawn_values, dtype_effect_text, error_head, figure_alt, length_html,
                            notes_html, reference_html, status_html, status_text)
from .heatmap import heatmap_grid, heatmap_image
from .presets import CHUNK_SIZES, INPUT_PRESETS, about_text, presets_for
from .raster import encode_png
from .static import captioned_png, esc, live_bundle, rerun_line, static_bundle, update_static
from .worker import LatestWorker, WorkerState

__all__ = ["explore", "Explorer"]

#: Visually hidden, read by screen readers (the usual "sr-only" rule): the picture's description
#: sits right after the ``ipywidgets.Image`` (which has no alt attribute) in the page's order.
_SR_ONLY = ("position:absolute;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;"
            "clip:rect(0,0,0,0);white-space:nowrap;border:0")


class Explorer(WorkerState):
    """An interactive before | after heatmap of one primitive on warm ranks.

    Create it with :func:`explore`. Display it (it is the last expression of a cell, or
    ``display(ex)``) to get the panel; :attr:`widget` is the underlying :class:`ipywidgets.VBox`.

    The state is one :class:`~collnb.views.controls.ExplorerParams` (:attr:`state`); the values each
    control offers are :func:`~collnb.views.controls.choices` of it, and a change is
    :func:`~collnb.views.controls.update` of it (pure functions, tested without widgets or ranks).
    The widgets only show the state (every widget event during that is ignored) and report a
    learner's change back.

    State for programs and tests (read-only unless said otherwise):

    Attributes:
        state: the current :class:`~collnb.views.controls.ExplorerParams`.
        widget: the whole panel (``ipywidgets.VBox``).
        controls: ``{"primitive", "world_size", "dtype", "op", "root", "backend", "chunk_size",
            "inputs"}`` -> the control widget (set ``.value`` to change it, as a learner would).
        figure: ``ipywidgets.Image`` (PNG, class ``collnb-heatmap``) showing the heatmap.
        figure_text: ``ipywidgets.HTML``: the picture's description for screen readers (visually
            hidden, right after the picture); :attr:`alt` is its text.
        drawn: what the picture shows, as text (``{"before", "after", "exact", "after_text"}``: per
            rank the chunks' values; ``exact``: the float64 value where the dtype gave another,
            else ``""``; plus ``"cells"``, ``"layout"``, ``"min_font_px"`` of the painted picture).
        reference: ``ipywidgets.HTML`` with the float64 reference table (``class="collnb-reference"``).
        status: ``ipywidgets.HTML``: busy indicator, last run's verdict and timings, or the error.
        last_result: :class:`~collnb.collectives.RunResult` of the latest run drawn (``None`` before).
        last_params: the control values (dict) of the latest run drawn or failed.
        last_png: PNG bytes of the figure shown.
        error: the exception of the latest finished run, or ``None``.
        message: the status text shown (plain text, no HTML).
        runs_started, runs_finished: how many runs began / ended (int).
        requests: how many changes asked for a run (int).
        draws_skipped: finished runs not drawn because newer values were already waiting.
        in_flight: runs executing now (0 or 1).
        last_timing: ``{"run_s", "draw_s", "total_s"}`` of the latest run drawn (seconds;
            total = from the change that asked for it to the figure being set).
        first_picture_s: seconds from the explorer being made to its first picture in the widget.
        first_before_probe: whether that picture came before the backend's first probe (nothing
            was known about the backend yet: the probe ran right after it, see :meth:`wait`).
    """

    def __init__(self, primitive: str | Sequence[str] = "all_reduce", *, world_size: int = 4,
                 dtype="float32", op="sum", root: int = 0, backend: str = "gloo",
                 chunk_size: int = 1, inputs: str = "teaching", dpi: float = 80,
                 wait: bool = True, **launch_kwargs):
        chosen = list(primitive) if isinstance(primitive, (list, tuple)) else [primitive]
        if not chosen:
            raise ValueError(_("give a primitive; choose one of: {valid}").format(
                valid=", ".join(collectives.PRIMITIVES)))
        for p in chosen:
            check_choice("primitive", p, collectives.PRIMITIVES)
        check_backend(backend)
        check_choice("inputs preset", inputs, tuple(INPUT_PRESETS))
        if inputs not in presets_for(chosen[0]):
            raise ValueError(_("inputs preset {preset!r} shows nothing for {primitive}; choose one of: "
                               "{valid}").format(preset=inputs, primitive=chosen[0],
                                                 valid=", ".join(presets_for(chosen[0]))))
        if chunk_size not in CHUNK_SIZES:
            raise ValueError(_("chunk_size must be one of {valid}; got {got!r}").format(
                valid=", ".join(map(str, CHUNK_SIZES)), got=chunk_size))
        check_world_size(world_size)
        self.dpi = dpi
        self.launch_kwargs = dict(ranks.check_launch_options(launch_kwargs, "collnb.explore"))

        self.last_result = None
        self.last_params: dict | None = None
        self.last_png: bytes | None = None
        self.last_pixels = None  # the figure's pixels (uint8 H x W x 3): the static picture is painted from them
        self.last_timing: dict = {}
        self.error: BaseException | None = None
        self.message = ""
        self.alt = ""
        self.drawn: dict = {}
        self._t_made = time.perf_counter()
        self.first_picture_s: float | None = None
        self.first_before_probe = False
        self.draws_skipped = 0
        self._worker = LatestWorker(self._execute, "collnb-explorer", on_error=self._show_error)
        self._lock = threading.RLock()  # the state and the widgets: a learner's change, the probe's answer
        self._first = threading.Event()  # the first request finished (drawn or failed)
        self._syncing = 0
        self._notes: list = []
        self._info: list = []
        self._display_ids: list = []
        self.static_png: bytes | None = None

        # which backends can run here (asked once), and what each accepted (asked once per backend)
        self.backend_infos = {b: ranks.backend_info(b) for b in BACKENDS}
        self.facts = Facts(tuple(chosen), self.backend_infos,
                           lambda b: collectives.backend_support(b, **self.launch_kwargs))
        if not self.facts.usable:
            raise RuntimeError(_("no backend can run here: {reasons}").format(
                reasons="; ".join(f"{b}: {i['reason']}" for b, i in self.backend_infos.items())))
        dtype = normalised("dtype", dtype, self._notes) or "float32"  # a value that is no dtype: noted
        op = normalised("op", op, self._notes) or "sum"
        start = ExplorerParams(chosen[0], world_size, dtype, op, root, backend, chunk_size, inputs)
        # the first picture before the backend's first probe (1-4 s after an install): when nothing is
        # known yet and the first view is float32 SUM (which every backend runs for every tensor
        # primitive), the controls offer just that until the probe, run right after the picture, answers
        first_backend = backend if backend in self.facts.usable else self.facts.usable[0]
        if (dtype, op) == ("float32", "sum") and collectives.known_support(first_backend) is None:
            self.facts.provisional = {"dtype": dtype, "op": op}
        self.state, notes, self._info = fix(start, self.facts)
        self._notes += notes
        if self.facts.provisional is not None:
            self._info.append(self._probing_line())

        style = {"description_width": "initial"}
        lay = widgets.Layout(width="auto")
        usable = self.facts.usable
        c = self.controls = {}
        c["primitive"] = widgets.Dropdown(options=chosen, value=chosen[0], description=_("primitive"),
                                          disabled=len(chosen) == 1, style=style, layout=lay)
        c["backend"] = widgets.ToggleButtons(options=usable, value=self.state.backend, tooltips=[
            _("run on {backend} ranks").format(backend=b) for b in usable], style={"button_width": "70px"})
        c["world_size"] = widgets.IntSlider(value=1, min=1, max=MAX_WORLD_SIZE, step=1,
                                            description=_("world size"), continuous_update=True,
                                            style=style, layout=slider_layout(_("world size")))
        c["dtype"] = widgets.Dropdown(options=["float32"], value="float32", description=_("dtype"),
                                      style=style, layout=lay)
        c["op"] = widgets.Dropdown(options=["sum"], value="sum", description=_("op"), style=style, layout=lay)
        c["root"] = widgets.IntSlider(value=0, min=0, max=max(world_size - 1, 0), step=1, description="src",
                                      continuous_update=True, style=style, layout=slider_layout("src"))
        c["chunk_size"] = widgets.SelectionSlider(options=list(CHUNK_SIZES), value=chunk_size,
                                                  description=_("elements per chunk"), continuous_update=True,
                                                  style=style, layout=slider_layout(_("elements per chunk")))
        c["inputs"] = widgets.Dropdown(options=[("", inputs)], value=inputs, description=_("inputs"), style=style,
                                       layout=widgets.Layout(width="520px"))
        for name, w in c.items():
            w.add_class("collnb-control")
            w.add_class(f"collnb-{name.replace('_', '-')}")
        self.backend_note = widgets.HTML(layout=widgets.Layout(margin="0 0 0 8px"))
        self.backend_note.add_class("collnb-backend-note")
        self.length_label = widgets.HTML()
        self.length_label.add_class("collnb-length")
        self.status = widgets.HTML(value="")
        self.status.add_class("collnb-status")
        self.note = widgets.HTML(value="")
        self.note.add_class("collnb-note")
        self.about = widgets.HTML(value="")
        self.about.add_class("collnb-about")
        self.figure = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto",
                                                                        min_width="0"))
        self.figure.add_class("collnb-figure")
        self.figure.add_class("collnb-heatmap")
        none_yet = _("no run yet")
        self.figure_text = widgets.HTML(value=f"<span style='{_SR_ONLY}'>{esc(none_yet)}</span>")
        self.figure_text.add_class("collnb-figure-text")
        self.reference = widgets.HTML(value="", layout=widgets.Layout(margin="0 0 0 12px"))
        self.reference.add_class("collnb-reference-box")

        row1 = widgets.HBox([c["primitive"], widgets.Label(_("backend"), layout=widgets.Layout(margin="0 4px 0 12px")),
                             c["backend"], self.backend_note],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        row2 = widgets.HBox([c["world_size"], c["dtype"], c["op"], c["root"]],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        row3 = widgets.HBox([c["chunk_size"], self.length_label, c["inputs"]],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        picture = widgets.VBox([self.figure, self.figure_text], layout=widgets.Layout(min_width="0"))
        picture.add_class("collnb-picture")  # the box the projector view widens to the page
        body = widgets.HBox([picture, self.reference],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start"))
        self.widget = widgets.VBox([row1, row2, row3, self.about, self.status, self.note, body])
        self.widget.add_class("collnb-explorer")
        self.widget.add_class("collnb-live")  # hides the static picture while the panel is live

        self._sync()
        self._update_backend_note()
        for name, w in c.items():
            w.observe(self._on_change(name), names="value")
        self._request()
        if wait:  # the first picture; the probe behind it (if any) goes on in the background
            if not self._first.wait(120.0):
                raise TimeoutError(_("the explorer was still running after {seconds} s").format(seconds=120.0))

    # -- display -----------------------------------------------------------------------------
    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        # the panel (ipywidgets' view mime type), this explorer's repr as the plain-text fallback and
        # an empty text/html where widgets cannot run (the static picture stands in there)
        return live_bundle(self.widget, repr(self))

    def _ipython_display_(self):
        """Display the static picture of the current state (kept current, see the module doc)
        and the live panel, as two outputs of the cell."""
        from IPython.display import display
        did = f"collnb-explorer-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        display(self._repr_mimebundle_(), raw=True)

    def static_bundle(self) -> dict:
        """The static picture of the explorer's current state as a mime bundle (``text/html``,
        ``image/png``, ``text/plain``): see :func:`static_bundle`. The picture with its line is
        painted from the heatmap's pixels (no PNG decoded), once per state."""
        res = self.last_result
        what = repr(self)
        if res is None:
            return static_bundle(None, "explorer", alt=what, caption=self.message or _("no run yet"))
        if self.static_png is None:
            self.static_png = captioned_png(self.last_pixels, rerun_line("explorer"))
        return static_bundle(self.last_png, "explorer", alt=self.alt or what, png_with_line=self.static_png,
                             attrs=dict(world_size=res.world_size, primitive=res.primitive,
                                        dtype=dtype_name(res.dtype) if res.dtype is not None else ""))

    def _update_static(self):
        update_static(self._display_ids, self.static_bundle)

    def __repr__(self):
        p = self.params()
        return (f"Explorer({p['primitive']}, world_size={p['world_size']}, dtype={p['dtype']}, "
                f"op={p['op']}, root={p['root']}, backend={p['backend']}, runs={self.runs_finished})")

    # -- state (in_flight, pending, busy, requests, runs_started/finished: WorkerState) ---------
    @property
    def spec(self):
        return collectives.SPECS[self.state.primitive]

    def params(self) -> dict:
        """The current values: ``{"primitive", "world_size", "dtype", "op", "root", "backend",
        "chunk_size", "inputs"}`` (``dtype``/``op``/``root`` are ``None`` where the primitive takes
        none): :meth:`ExplorerParams.as_dict <collnb.views.controls.ExplorerParams.as_dict>` of
        :attr:`state`."""
        return self.state.as_dict()

    def offered(self, name: str) -> list:
        """The values control ``name`` offers now (:func:`~collnb.views.controls.choices` of
        :attr:`state`; ``inputs`` as keys).

        Raises:
            KeyError: not a control name.
        """
        self._settle()
        return [v[1] if isinstance(v, tuple) else v for v in choices(self.state, self.facts)[name]]

    def set(self, **values) -> "Explorer":
        """Set several controls at once (names as in :attr:`controls`), asking for ONE run.
        Values are applied in a sensible order (backend, primitive, inputs, world size, dtype, op,
        root...), so a value given here wins over the one an inputs preset would choose.
        ``dtype`` takes a ``torch.dtype`` or a name or alias (``"fp16"``); ``op`` a name in any
        case or a ``dist.ReduceOp``.

        Raises:
            ValueError: an unknown control name, or a value the control does not offer (the
                message lists the offered values); the values before it are applied.
        """
        unknown = set(values) - set(ORDER)
        if unknown:
            raise ValueError(_("unknown control(s) {names}; choose from {valid}").format(
                names=sorted(unknown), valid=", ".join(ORDER)))
        self._settle()  # every choice known before a value is checked against them
        with self._lock:
            return self._set(values)

    def _set(self, values: dict) -> "Explorer":
        state, notes, info = self.state, [], []
        norm = {"dtype": dtype_name, "op": collectives.op_name}
        try:
            for name in ORDER:
                if name not in values:
                    continue
                v = _try(norm[name], values[name]) if name in norm else values[name]
                offered = [o[1] if isinstance(o, tuple) else o for o in choices(state, self.facts)[name]]
                if offered and v not in offered:
                    raise ValueError(_("{name}={value!r} is not offered here; choose one of {valid}").format(
                        name=name, value=v, valid=", ".join(map(str, offered))))
                state, n, i = update(state, {name: v}, self.facts)
                notes, info = notes + n, info + i
        finally:
            self.state, self._notes, self._info = state, notes, info
            self._sync()
            self._request()  # the figure follows the values that were applied
        return self

    def refresh(self) -> "Explorer":
        """Run again with the current values."""
        self._request()
        return self

    def wait(self, timeout: float = 120.0):
        """Block until no run is in flight or waiting (nor the backend probe a first picture went
        without: then every control offers all its choices); returns :attr:`last_result`.

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
        """Stop the explorer: drop waiting values, wait for the run in flight, close the widgets.
        The warm ranks stay (they belong to :mod:`collnb.ranks`; see :func:`collnb.shutdown`)."""
        self._worker.close(timeout)
        todo, seen = [self.widget], []
        while todo:  # every widget of the panel, containers included
            w = todo.pop()
            seen.append(w)
            todo.extend(getattr(w, "children", ()))
            for part in ("layout", "style"):  # their own widget models
                sub = getattr(w, part, None)
                if isinstance(sub, widgets.Widget) and sub not in seen:
                    seen.append(sub)
        for w in seen:
            w.close()

    # -- the state in the widgets ----------------------------------------------------------------
    def _sync(self):
        """Make every widget show :attr:`state` and offer its choices (widget events ignored)."""
        self._syncing += 1
        try:
            p, spec = self.state, self.spec
            offered = choices(p, self.facts)
            show_choices(self.controls, offered, dataclasses.asdict(p),
                         keep_shown=("primitive", "backend", "world_size"))
            tensor = spec.kind == "tensor"
            self.length_label.layout.display = None if tensor else "none"
            self.controls["root"].description = spec.root_name or "root"
            self._update_length()
            self.about.value = (f"<div style='color:#333;line-height:1.4;max-width:900px'>"
                                f"{about_text(spec, p.op)}</div>")
            self._update_note()
        finally:
            self._syncing -= 1

    def _update_length(self):
        if self.spec.kind == "tensor":
            self.length_label.value = length_html(self.spec, self.state)

    def _update_backend_note(self):
        self.backend_note.value = backend_note_html(self.backend_infos)

    def _update_note(self):
        self.note.value = notes_html(self._info, self._notes)

    def _on_change(self, name):
        def handler(change):
            with self._lock:
                if self._syncing:  # a value the explorer itself is showing (this thread or the probe's)
                    return
                try:
                    self.state, self._notes, self._info = update(self.state, {name: change["new"]}, self.facts)
                except Exception as exc:  # noqa: BLE001 - keep the explorer usable
                    self._sync()
                    self._show_error(exc, self.params())
                    return
                self._sync()
                self._request()
        return handler

    def _probing_line(self) -> str:
        return _("the dtype and op lists fill in once {backend} has been tried on real ranks (a few seconds, "
                 "once after an install)").format(backend=self.state.backend)

    def _settle(self) -> None:
        """Ask the backend probe the first picture went without (:attr:`Facts.provisional
        <collnb.views.controls.Facts>`), then offer every choice it found; the values shown stay
        unless the probe refuses them (then replaced, with a note, and drawn again). Runs on the worker
        thread right after the first picture, or in :meth:`set` and :meth:`offered` if they come first
        (the probe runs once: a second caller waits for it)."""
        if self.facts.provisional is None:
            return
        sup = collectives.backend_support(self.state.backend, **self.launch_kwargs)
        with self._lock:
            if self.facts.provisional is None:
                return
            self.facts.known[self.state.backend] = sup
            self.facts.provisional = None
            before = self.state
            self.state, notes, info = fix(self.state, self.facts, explicit=("dtype", "op"))
            self._notes = self._notes + notes
            self._info = [i for i in self._info if i != self._probing_line()] + info
            self._sync()
            if self.state != before:
                self._request()

    # -- running ---------------------------------------------------------------------------------
    def _request(self):
        params = self.params()
        params["_t_request"] = time.perf_counter()
        if self._worker.closed:
            return
        # busy first: a run finishing right after the hand-over must not be overwritten by it
        self._set_status(_("⏳ running {primitive} on {n} rank(s)…").format(
            primitive=params["primitive"], n=params["world_size"]), busy=True)
        self._worker.submit(params)

    def _stale(self) -> bool:
        return self._worker.stale()

    def _execute(self, params):
        try:
            self._run_and_draw(params)
        finally:
            self._first.set()
            if self.facts.provisional is not None and not self._worker.closed:
                try:
                    self._settle()
                except Exception as exc:  # noqa: BLE001 - shown in the panel; set() asks again
                    self._show_error(exc, params)

    def _run_and_draw(self, params):
        p = params
        preset = INPUT_PRESETS[p["inputs"]]
        t0 = time.perf_counter()
        try:
            result = collectives.run(p["primitive"], p["world_size"],
                                     dtype=p["dtype"] or "float32", op=p["op"] or "sum",
                                     root=p["root"] if p["root"] is not None else 0,
                                     backend=p["backend"], chunk_size=p["chunk_size"], inputs=preset[1],
                                     check_support=self.facts.provisional is None, **self.launch_kwargs)
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            if not self._stale():
                self._show_error(exc, p)
            return
        t1 = time.perf_counter()
        if self._stale():
            self.draws_skipped += 1
            return
        grid = heatmap_grid(result)
        # the drawing path of RunResult's notebook display (RunResult.png -> heatmap_png)
        him = heatmap_image(result, dpi=self.dpi, grid=grid)
        png = encode_png(him.pixels, self.dpi)
        alt = figure_alt(grid)
        drawn = drawn_values(result, grid, him)
        ref_html = reference_html(result, grid) if result.spec.reduces else ""
        t2 = time.perf_counter()
        if self._stale():
            self.draws_skipped += 1
            return
        self.figure.width = str(him.pixels.shape[1])  # its own width, never scaled up (at most the output's)
        self.figure.value = png
        # data-primitive: what the picture beside it shows (a browser test waits on it)
        self.figure_text.value = (f"<span style='{_SR_ONLY}' data-primitive='{esc(p['primitive'])}'>"
                                  f"{esc(alt)}</span>")
        self.reference.value = ref_html
        self.last_result = result
        self.last_png = png
        self.last_pixels = him.pixels  # the static picture is painted from these (no PNG decoded)
        self.static_png = None
        self.alt, self.drawn = alt, drawn
        self.last_params = {k: v for k, v in p.items() if not k.startswith("_")}
        self.error = None
        t3 = time.perf_counter()
        self.last_timing = dict(run_s=t1 - t0, draw_s=t2 - t1, total_s=t3 - p["_t_request"])
        if self.first_picture_s is None:
            self.first_picture_s = t3 - self._t_made
            self.first_before_probe = self.facts.provisional is not None
        effect = dtype_effect_text(result, grid)
        text = status_text(result, effect, t1 - t0, t2 - t1)
        self._set_status(text, busy=False, color="#2E7D32" if result.ok else "#C62828", effect=effect)
        if not self._stale():  # during a drag only the last state is worth saving (~10-30 ms a picture)
            self._update_static()

    def _show_error(self, exc, params):
        self.error = exc
        self.last_params = {k: v for k, v in params.items() if not k.startswith("_")}
        head = error_head(exc, ranks.RankError, ranks.LaunchTimeout)
        text = str(exc) or "".join(traceback.format_exception_only(type(exc), exc)).strip()
        lines = text.splitlines()
        if len(lines) > 40:
            lines = lines[:40] + ["…"]
        self._set_status(f"✗ {head}:\n" + "\n".join(lines), busy=False, color="#C62828", pre=True)

    def _set_status(self, text, busy, color="#444", pre=False, effect=""):
        self.message = text + (f"\n{effect}" if effect else "")
        self.status.value = status_html(text, busy, color, pre, effect)

def _try(fn, v):
    try:
        return fn(v)
    except (ValueError, TypeError):  # the check against what is offered names the valid values
        return v


def explore(primitive: str | Sequence[str] = "all_reduce", **kwargs: Any) -> Explorer:
    """Open an interactive explorer of ``primitive`` on warm ranks.

    Args:
        primitive: one of :data:`collnb.collectives.PRIMITIVES`, or a list of them (adds a
            primitive dropdown, e.g. the four object collectives).
        world_size: initial world size, 1..16 (default 4).
        dtype: initial dtype name or ``torch.dtype`` (default ``"float32"``); one the backend does
            not accept is replaced by float32 with a note in the panel listing the valid ones.
        op: initial reduce op name (reducing primitives; default ``"sum"``); an invalid one is
            replaced the same way.
        root: initial src/dst rank (rooted primitives; default 0).
        backend: ``"gloo"`` (default) or ``"nccl"`` (offered only where it can run).
        chunk_size: elements per chunk, one of :data:`CHUNK_SIZES` (default 1).
        inputs: a key of :data:`INPUT_PRESETS` (default ``"teaching"``).
        dpi: resolution of the heatmap PNG (default 80).
        wait: block until the first figure is drawn (default True).
        launch_kwargs: passed to :func:`collnb.ranks.launch` through :func:`collnb.collectives.run`.

    Returns:
        :class:`Explorer` (displays as its panel when it is the last expression of a cell).

    Raises:
        TypeError: a primitive not a name, a world size not an int, an unknown launch option.
        ValueError: unknown primitive, backend, inputs preset, chunk_size or a world size outside
            1..16 (the words of :mod:`collnb.vocabulary`; the message lists the valid choices).
        RuntimeError: no backend can run here.
    """
    return Explorer(primitive, **kwargs)
