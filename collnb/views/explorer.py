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

import time
import traceback
from typing import Any, Sequence

import ipywidgets as widgets

from .. import collectives
from .. import ranks
from ..vocabulary import BACKENDS, MAX_WORLD_SIZE, check_backend, check_choice, check_world_size, dtype_name, \
    op_name
from .controls import ControlLogic
from .explorer_text import dtype_effect_text, figure_html, reference_html
from .heatmap import heatmap_grid, heatmap_image
from .presets import CHUNK_SIZES, INPUT_PRESETS, presets_for
from .raster import encode_png
from .static import RERUN_LINE, captioned_png, esc, live_bundle, static_bundle, update_static
from .worker import LatestWorker, WorkerState

__all__ = ["explore", "Explorer"]


class Explorer(ControlLogic, WorkerState):
    """An interactive before | after heatmap of one primitive on warm ranks.

    Create it with :func:`explore`. Display it (it is the last expression of a cell, or
    ``display(ex)``) to get the panel; :attr:`widget` is the underlying :class:`ipywidgets.VBox`.

    State for programs and tests (read-only unless said otherwise):

    Attributes:
        widget: the whole panel (``ipywidgets.VBox``).
        controls: ``{"primitive", "world_size", "dtype", "op", "root", "backend", "chunk_size",
            "inputs"}`` -> the control widget (set ``.value`` to change it, as a learner would).
        figure: ``ipywidgets.HTML`` holding the heatmap as ``<img class="collnb-heatmap">``
            whose ``alt`` text and ``data-*`` attributes describe what is drawn
            (``data-after``: each rank's output chunks as drawn, ranks separated by ``;``).
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
    """

    def __init__(self, primitive: str | Sequence[str] = "all_reduce", *, world_size: int = 4,
                 dtype="float32", op="sum", root: int = 0, backend: str = "gloo",
                 chunk_size: int = 1, inputs: str = "teaching", dpi: float = 80,
                 wait: bool = True, **launch_kwargs):
        choices = list(primitive) if isinstance(primitive, (list, tuple)) else [primitive]
        if not choices:
            raise ValueError(f"give a primitive; choose one of: {', '.join(collectives.PRIMITIVES)}")
        for p in choices:
            check_choice("primitive", p, collectives.PRIMITIVES)
        check_backend(backend)
        check_choice("inputs preset", inputs, tuple(INPUT_PRESETS))
        if inputs not in presets_for(choices[0]):
            raise ValueError(f"inputs preset {inputs!r} shows nothing for {choices[0]}; choose one of: "
                             f"{', '.join(presets_for(choices[0]))}")
        if chunk_size not in CHUNK_SIZES:
            raise ValueError(f"chunk_size must be one of {', '.join(map(str, CHUNK_SIZES))}; got {chunk_size!r}")
        check_world_size(world_size)
        self.dpi = dpi
        self.launch_kwargs = dict(launch_kwargs)

        self.last_result = None
        self.last_params: dict | None = None
        self.last_png: bytes | None = None
        self.last_pixels = None  # the figure's pixels (uint8 H x W x 3): the static picture is painted from them
        self.last_timing: dict = {}
        self.error: BaseException | None = None
        self.message = ""
        self.draws_skipped = 0
        self._worker = LatestWorker(self._execute, "collnb-explorer", on_error=self._show_error)
        self._syncing = 0
        self._notes: list = []
        self._info: list = []
        self._display_ids: list = []
        self.static_png: bytes | None = None

        # which backends can run here
        self.backend_infos = {b: ranks.backend_info(b) for b in BACKENDS}
        usable = [b for b, i in self.backend_infos.items() if i["available"]]
        if not usable:
            raise RuntimeError("no backend can run here: " +
                               "; ".join(f"{b}: {i['reason']}" for b, i in self.backend_infos.items()))
        if backend not in usable:
            self._notes.append(f"backend {backend!r} cannot run here ({self.backend_infos[backend]['reason']}); "
                               f"showing {usable[0]!r}")
            backend = usable[0]

        style = {"description_width": "initial"}
        lay = widgets.Layout(width="auto")
        c = self.controls = {}
        c["primitive"] = widgets.Dropdown(options=choices, value=choices[0], description="primitive",
                                          disabled=len(choices) == 1, style=style, layout=lay)
        c["backend"] = widgets.ToggleButtons(options=usable, value=backend, tooltips=[
            f"run on {b} ranks" for b in usable], style={"button_width": "70px"})
        c["world_size"] = widgets.IntSlider(value=1, min=1, max=MAX_WORLD_SIZE, step=1,
                                            description="world size", continuous_update=True,
                                            style=style, layout=widgets.Layout(width="330px"))
        c["dtype"] = widgets.Dropdown(options=["float32"], value="float32", description="dtype",
                                      style=style, layout=lay)
        c["op"] = widgets.Dropdown(options=["sum"], value="sum", description="op", style=style, layout=lay)
        c["root"] = widgets.IntSlider(value=0, min=0, max=max(world_size - 1, 0), step=1, description="src",
                                      continuous_update=True, style=style,
                                      layout=widgets.Layout(width="260px"))
        c["chunk_size"] = widgets.SelectionSlider(options=list(CHUNK_SIZES), value=chunk_size,
                                                  description="elements per chunk", continuous_update=True,
                                                  style=style, layout=widgets.Layout(width="330px"))
        c["inputs"] = widgets.Dropdown(options=[(self._preset_label(k, world_size), k)
                                                for k in presets_for(choices[0])],
                                       value=inputs, description="inputs", style=style,
                                       layout=widgets.Layout(width="520px"))
        for w in c.values():
            w.add_class("collnb-control")
        for name, w in c.items():
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
        self.figure = widgets.HTML(value="<i>no run yet</i>", layout=widgets.Layout(min_width="0"))
        self.figure.add_class("collnb-figure")
        self.reference = widgets.HTML(value="", layout=widgets.Layout(margin="0 0 0 12px"))
        self.reference.add_class("collnb-reference-box")

        row1 = widgets.HBox([c["primitive"], widgets.Label("backend", layout=widgets.Layout(margin="0 4px 0 12px")),
                             c["backend"], self.backend_note],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        row2 = widgets.HBox([c["world_size"], c["dtype"], c["op"], c["root"]],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        row3 = widgets.HBox([c["chunk_size"], self.length_label, c["inputs"]],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        body = widgets.HBox([self.figure, self.reference],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start"))
        self.widget = widgets.VBox([row1, row2, row3, self.about, self.status, self.note, body])
        self.widget.add_class("collnb-explorer")
        self.widget.add_class("collnb-live")  # hides the static picture while the panel is live

        # initial values, validated against what the backend supports (no run yet)
        self._syncing += 1
        try:
            c["world_size"].value = world_size
            self._sync_controls(want_dtype=dtype, want_op=op, want_root=root)
        finally:
            self._syncing -= 1
        self._update_backend_note()
        self._update_note()

        for name, w in c.items():
            w.observe(self._on_change(name), names="value")
        self._request()
        if wait:
            self.wait()

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
        ``image/png``, ``text/plain``): see :func:`static_bundle`."""
        res = self.last_result
        what = repr(self)
        if res is None:
            return static_bundle(None, "explorer", alt=what, caption=self.message or "no run yet")
        if self.static_png is None:
            self.static_png = captioned_png(self.last_pixels, RERUN_LINE.format(what="explorer"))
        return static_bundle(self.last_png, "explorer", alt=what, png_with_line=self.static_png,
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
        return collectives.SPECS[self.controls["primitive"].value]

    def params(self) -> dict:
        """The current control values: ``{"primitive", "world_size", "dtype", "op", "root",
        "backend", "chunk_size", "inputs"}`` (``dtype``/``op``/``root`` are ``None`` where the
        primitive takes none)."""
        c = self.controls
        spec = collectives.SPECS[c["primitive"].value]
        return dict(primitive=spec.name, world_size=int(c["world_size"].value),
                    dtype=c["dtype"].value if spec.kind == "tensor" else None,
                    op=c["op"].value if spec.reduces else None,
                    root=int(c["root"].value) if spec.rooted else None,
                    backend=c["backend"].value, chunk_size=int(c["chunk_size"].value),
                    inputs=c["inputs"].value if spec.kind == "tensor" else "teaching")

    def set(self, **values) -> "Explorer":
        """Set several controls at once (names as in :attr:`controls`), asking for ONE run.
        Values are applied in a sensible order (backend, primitive, inputs, world size, dtype, op,
        root...), so a value given here wins over the one an inputs preset would choose.
        ``dtype`` takes a ``torch.dtype`` or a name or alias (``"fp16"``); ``op`` a name in any
        case or a ``dist.ReduceOp``.

        Raises:
            ValueError: an unknown control name, or a value the control does not offer (the
                message lists the offered values).
        """
        order = ["backend", "primitive", "inputs", "world_size", "dtype", "op", "root", "chunk_size"]
        unknown = set(values) - set(order)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; choose from {', '.join(order)}")
        self._notes = []
        self._info = []
        self._syncing += 1
        try:
            for name in order:
                if name not in values:
                    continue
                w = self.controls[name]
                v = values[name]
                try:
                    if name == "dtype":
                        v = dtype_name(v)
                    elif name == "op":
                        v = op_name(v)
                except (ValueError, TypeError):
                    pass  # the check below names what is offered
                offered = self._offered(name)
                if offered is not None and v not in offered:
                    raise ValueError(f"{name}={v!r} is not offered here; choose one of "
                                     f"{', '.join(map(str, offered))}")
                w.value = v
                self._after_change(name)
        except BaseException:
            self._syncing -= 1
            self._update_note()
            self._request()  # the figure follows the values that were applied
            raise
        self._syncing -= 1
        self._update_note()
        self._request()
        return self

    def _offered(self, name):
        w = self.controls[name]
        if isinstance(w, widgets.IntSlider):
            return list(range(w.min, w.max + 1))
        if hasattr(w, "options"):
            opts = list(w.options)
            return [o[1] if isinstance(o, tuple) else o for o in opts]
        return None

    def refresh(self) -> "Explorer":
        """Run again with the current values."""
        self._request()
        return self

    def wait(self, timeout: float = 120.0):
        """Block until no run is in flight or waiting; returns :attr:`last_result`.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        try:
            self._worker.wait(timeout)
        except TimeoutError:
            raise TimeoutError(f"the explorer was still running after {timeout} s") from None
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

    def _on_change(self, name):
        def handler(change):
            if self._syncing:
                return
            self._notes = []
            self._info = []
            self._syncing += 1
            try:
                self._after_change(name)
            except Exception as exc:  # noqa: BLE001 - keep the explorer usable
                self._show_error(exc, self.params())
                return
            finally:
                self._syncing -= 1
            self._update_note()
            self._request()
        return handler

    # -- running ---------------------------------------------------------------------------------
    def _request(self):
        params = self.params()
        params["_t_request"] = time.perf_counter()
        if self._worker.closed:
            return
        # busy first: a run finishing right after the hand-over must not be overwritten by it
        self._set_status(f"⏳ running {params['primitive']} on {params['world_size']} rank(s)…", busy=True)
        self._worker.submit(params)

    def _stale(self) -> bool:
        return self._worker.stale()

    def _execute(self, params):
        p = params
        preset = INPUT_PRESETS[p["inputs"]]
        t0 = time.perf_counter()
        try:
            result = collectives.run(p["primitive"], p["world_size"],
                               dtype=p["dtype"] or "float32", op=p["op"] or "sum",
                               root=p["root"] if p["root"] is not None else 0,
                               backend=p["backend"], chunk_size=p["chunk_size"],
                               inputs=preset[1], **self.launch_kwargs)
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
        fig_html = figure_html(result, grid, png, him)
        ref_html = reference_html(result, grid) if result.spec.reduces else ""
        t2 = time.perf_counter()
        if self._stale():
            self.draws_skipped += 1
            return
        self.figure.value = fig_html
        self.reference.value = ref_html
        self.last_result = result
        self.last_png = png
        self.last_pixels = him.pixels  # the static picture is painted from these (no PNG decoded)
        self.static_png = None
        self.last_params = {k: v for k, v in p.items() if not k.startswith("_")}
        self.error = None
        t3 = time.perf_counter()
        self.last_timing = dict(run_s=t1 - t0, draw_s=t2 - t1, total_s=t3 - p["_t_request"])
        effect = dtype_effect_text(result, grid)
        dname = dtype_name(result.dtype) if result.dtype is not None else ""
        if not result.ok:
            verdict = f"✗ {result.n_mismatches()} chunk(s) differ from the reference"
        elif effect and result.spec.reduces:
            verdict = (f"✓ {result.backend} matches the reference: the same {dname} arithmetic done without "
                       f"torch.distributed (the dtype, not the communication, changed the value)")
        else:
            verdict = "✓ matches the reference (computed without torch.distributed)"
        text = (f"{verdict} · {result.title()} · ran in {1000 * (t1 - t0):.0f} ms, "
                f"drawn in {1000 * (t2 - t1):.0f} ms")
        self._set_status(text, busy=False, color="#2E7D32" if result.ok else "#C62828", effect=effect)
        if not self._stale():  # during a drag only the last state is worth saving (~10-30 ms a picture)
            self._update_static()

    def _show_error(self, exc, params):
        self.error = exc
        self.last_params = {k: v for k, v in params.items() if not k.startswith("_")}
        if isinstance(exc, (ValueError, TypeError)):
            head = "invalid combination"
        elif isinstance(exc, ranks.RankError):
            head = "a rank failed (the ranks were stopped; the next change starts fresh ones)"
        elif isinstance(exc, ranks.LaunchTimeout):
            head = "the run timed out (the ranks were stopped; the next change starts fresh ones)"
        else:
            head = f"the run failed with {type(exc).__name__} (the next change starts fresh ranks)"
        text = str(exc) or "".join(traceback.format_exception_only(type(exc), exc)).strip()
        lines = text.splitlines()
        if len(lines) > 40:
            lines = lines[:40] + ["…"]
        self._set_status(f"✗ {head}:\n" + "\n".join(lines), busy=False, color="#C62828", pre=True)

    def _set_status(self, text, busy, color="#444", pre=False, effect=""):
        self.message = text + (f"\n{effect}" if effect else "")
        body = esc(text)
        if pre:
            body = (f"<pre style='white-space:pre-wrap;margin:0;font-size:85%;color:{color}'>{body}</pre>")
        else:
            body = f"<span style='color:{color}'>{body.replace(chr(10), '<br>')}</span>"
        if effect:
            body += f"<br><span class='collnb-dtype-effect' style='color:#A65400;font-weight:bold'>{esc(effect)}</span>"
        self.status.value = (f"<div class='collnb-status-box' data-busy='{int(busy)}'>{body}</div>")



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
        TypeError: a primitive that is not a name, a world size that is not an int.
        ValueError: unknown primitive, backend, inputs preset, chunk_size or a world size outside
            1..16 (the words of :mod:`collnb.vocabulary`; the message lists the valid choices).
        RuntimeError: no backend can run here.
    """
    return Explorer(primitive, **kwargs)
