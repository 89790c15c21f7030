"""Interactive explorer: move a slider, the primitive runs again on the warm ranks, the heatmap redraws.

``explore("all_reduce")`` shows a small panel of standard ipywidgets 8 controls (no custom
JavaScript, so it works the same in JupyterLab 4, Jupyter Notebook 7 and VS Code):

* **world size** slider (1..16; for NCCL at most the visible GPU count),
* **dtype** dropdown: every dtype the backend accepted for this primitive when
  :func:`collnb.primitives.backend_support` tried them on real ranks,
* **op** dropdown (reducing primitives only): the reduce ops valid for the chosen dtype,
* **src/dst** slider (rooted primitives only): the root rank,
* **backend** toggle: the backends that can run here; the reason is shown for the others
  (:func:`collnb.launcher.backend_info`),
* **elements per chunk** (tensor length = chunks x elements per chunk),
* **inputs**: the teaching values (``10*rank + chunk``) or a preset that shows a dtype effect
  (int8 SUM wraps 100+100 -> -56; float16 60000+60000 -> inf; bfloat16 256+1 -> 256).

Every change runs the primitive through :func:`collnb.primitives.run` (the warm pool of
:mod:`collnb.launcher`) and redraws the before | after heatmap with the same drawing path a
:class:`~collnb.primitives.RunResult` uses when a notebook displays it
(:meth:`RunResult.png <collnb.primitives.RunResult.png>`). Beside it a table shows the float64
result of the same inputs and highlights the chunks where the dtype changed the answer.

Runs happen on one background thread per explorer with a one-slot "latest request" mailbox:
while a run is in flight, further changes only overwrite the slot, so a fast slider drag runs at
most one stale request and then the latest values (no queue). A result that is already stale
when its run finishes is not drawn. Errors (an invalid combination, a failing rank) are shown in
the panel; the explorer stays usable (a pool the launcher closed after a failure is rebuilt by
the next run).
"""

from __future__ import annotations

import base64
import html
import threading
import time
import traceback
from typing import Any, Sequence

import ipywidgets as widgets

from . import launcher as _launcher
from . import primitives as _prim
from .heatmap import chunk_firsts, differs_exact

__all__ = ["explore", "Explorer", "INPUT_PRESETS", "CHUNK_SIZES"]

#: Input presets: key -> (label, inputs callable ``f(rank, chunk)`` or ``None`` for the teaching
#: values, ``(dtype, op, world_size)`` that shows the effect, or ``None``). Choosing a preset in
#: the panel also sets that dtype, op (reducing primitives) and world size; the learner can then
#: move the world size or dtype to see how the effect changes.
INPUT_PRESETS: dict[str, tuple] = {
    "teaching": ("10·rank + chunk (teaching values)", None, None),
    "int8_wrap": ("100 everywhere: int8 SUM wraps, 100+100 → -56", lambda r, c: 100, ("int8", "sum", 2)),
    "fp16_inf": ("60000 everywhere: float16 SUM overflows, 60000+60000 → inf", lambda r, c: 60000,
                 ("float16", "sum", 2)),
    "bf16_round": ("256 on rank 0, 1 elsewhere: bfloat16 rounds, 256+1 → 256",
                   lambda r, c: 256 if r == 0 else 1, ("bfloat16", "sum", 2)),
}

#: Choices of the "elements per chunk" slider (powers of two).
CHUNK_SIZES = tuple(2 ** i for i in range(0, 17))

_IMG_STYLE = "max-width:100%;height:auto;display:block"


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def _rows_attr(rows) -> str:
    """Per-rank lists of cell texts -> ``"a,b,c;d,e,f"`` (ranks separated by ``;``)."""
    return ";".join(",".join(str(x) for x in row) for row in rows)


class Explorer:
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
        last_result: :class:`~collnb.primitives.RunResult` of the latest run drawn (``None`` before).
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
        choices = [primitive] if isinstance(primitive, str) else list(primitive)
        if not choices:
            raise ValueError(f"give a primitive; choose from {', '.join(_prim.PRIMITIVES)}")
        for p in choices:
            _prim._get_spec(p)  # ValueError naming the valid primitives
        if backend not in _launcher.BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(_launcher.BACKENDS)}")
        if inputs not in INPUT_PRESETS:
            raise ValueError(f"unknown inputs preset {inputs!r}; choose one of {', '.join(INPUT_PRESETS)}")
        if chunk_size not in CHUNK_SIZES:
            raise ValueError(f"chunk_size must be one of {', '.join(map(str, CHUNK_SIZES))}; got {chunk_size!r}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or \
                not 1 <= world_size <= _launcher.MAX_WORLD_SIZE:
            raise ValueError(f"world_size must be an int from 1 to {_launcher.MAX_WORLD_SIZE}; got {world_size!r}")
        self.dpi = dpi
        self.launch_kwargs = dict(launch_kwargs)

        self.last_result = None
        self.last_params: dict | None = None
        self.last_png: bytes | None = None
        self.last_timing: dict = {}
        self.error: BaseException | None = None
        self.message = ""
        self.runs_started = 0
        self.runs_finished = 0
        self.requests = 0
        self.draws_skipped = 0
        self._in_flight = 0
        self._pending: dict | None = None
        self._worker: threading.Thread | None = None
        self._cv = threading.Condition()
        self._closed = False
        self._syncing = 0
        self._notes: list = []

        # which backends can run here
        self.backend_infos = {b: _launcher.backend_info(b) for b in _launcher.BACKENDS}
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
        c["world_size"] = widgets.IntSlider(value=1, min=1, max=_launcher.MAX_WORLD_SIZE, step=1,
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
        c["inputs"] = widgets.Dropdown(options=[(lab, k) for k, (lab, _, _) in INPUT_PRESETS.items()],
                                       value=inputs, description="inputs", style=style,
                                       layout=widgets.Layout(width="440px"))
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
        self.widget = widgets.VBox([row1, row2, row3, self.status, self.note, body])
        self.widget.add_class("collnb-explorer")

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
        # the panel (ipywidgets' view mime type) with this explorer's repr as the plain-text fallback
        data = self.widget._repr_mimebundle_(**kwargs) or {}
        data["text/plain"] = repr(self)
        return data

    def __repr__(self):
        p = self.params()
        return (f"Explorer({p['primitive']}, world_size={p['world_size']}, dtype={p['dtype']}, "
                f"op={p['op']}, root={p['root']}, backend={p['backend']}, runs={self.runs_finished})")

    # -- state ---------------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Runs executing now: 0 or 1."""
        return self._in_flight

    @property
    def pending(self) -> bool:
        """Whether newer values wait for the run in flight to finish."""
        return self._pending is not None

    @property
    def busy(self) -> bool:
        """A run is in flight or waiting."""
        return self._in_flight > 0 or self._pending is not None

    @property
    def spec(self):
        return _prim.SPECS[self.controls["primitive"].value]

    def params(self) -> dict:
        """The current control values: ``{"primitive", "world_size", "dtype", "op", "root",
        "backend", "chunk_size", "inputs"}`` (``dtype``/``op``/``root`` are ``None`` where the
        primitive takes none)."""
        c = self.controls
        spec = _prim.SPECS[c["primitive"].value]
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
        self._syncing += 1
        try:
            for name in order:
                if name not in values:
                    continue
                w = self.controls[name]
                v = values[name]
                try:
                    if name == "dtype":
                        v = _prim.dtype_name(v)
                    elif name == "op":
                        v = _prim.op_name(v)
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
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._in_flight or self._pending is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the explorer was still running after {timeout} s")
                self._cv.wait(min(left, 0.5))
        return self.last_result

    def close(self, timeout: float = 30.0) -> None:
        """Stop the explorer: drop waiting values, wait for the run in flight, close the widgets.
        The warm ranks stay (they belong to :mod:`collnb.launcher`; see :func:`collnb.shutdown`)."""
        with self._cv:
            self._closed = True
            self._pending = None
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)
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

    # -- control logic ---------------------------------------------------------------------------
    def _support(self, backend):
        return _prim.backend_support(backend, **self.launch_kwargs)

    def _choose(self, wanted, normalise, valid, preferred):
        """``(value, refused)``: ``wanted`` normalised (a name for an alias, dtype or ReduceOp)
        when it is in ``valid``; otherwise ``preferred`` (or the first valid value) and the
        refused name. A value that does not normalise adds its error to the notes and is
        refused silently (``refused`` is None)."""
        try:
            name = normalise(wanted)
        except (ValueError, TypeError) as exc:
            self._notes.append(str(exc))
            name = None
        if name in valid:
            return name, None
        return (preferred if preferred in valid else valid[0]), name

    def _sync_controls(self, want_dtype=None, want_op=None, want_root=None):
        """Make every control offer only valid choices for the current primitive/backend/dtype,
        keeping the current values where they stay valid. Called with ``_syncing`` raised."""
        c = self.controls
        spec = _prim.SPECS[c["primitive"].value]
        backend = c["backend"].value
        info = self.backend_infos[backend]
        ws_max = info["max_world_size"]
        if c["world_size"].max != ws_max:
            if c["world_size"].value > ws_max:
                c["world_size"].value = ws_max
            c["world_size"].max = ws_max
        ws = c["world_size"].value

        tensor = spec.kind == "tensor"
        c["dtype"].layout.display = None if tensor else "none"
        c["inputs"].layout.display = None if tensor else "none"
        c["chunk_size"].layout.display = None if tensor else "none"
        self.length_label.layout.display = None if tensor else "none"
        c["op"].layout.display = None if spec.reduces else "none"
        c["root"].layout.display = None if spec.rooted else "none"
        c["root"].description = spec.root_name or "root"

        if tensor:
            sup = self._support(backend)
            dtypes = list(sup.dtypes(spec.name))
            if not dtypes:
                raise RuntimeError(f"{backend} ran {spec.name} with no dtype here (detected on real ranks)")
            cur, refused = self._choose(want_dtype if want_dtype is not None else c["dtype"].value,
                                        _prim.dtype_name, dtypes, "float32")
            if refused is not None and want_dtype is not None:
                self._notes.append(
                    f"{backend} cannot run {spec.name} on {refused} tensors (detected on real ranks of torch "
                    f"{sup.torch_version}); dtypes it accepts: {', '.join(dtypes)}. Showing {cur}.")
            if list(c["dtype"].options) != dtypes:
                c["dtype"].options = dtypes
            c["dtype"].value = cur
            if spec.reduces:
                ops = list(sup.ops(spec.name, cur))
                want, refused = self._choose(want_op if want_op is not None else c["op"].value,
                                             _prim.op_name, ops, "sum")
                if refused is not None:
                    self._notes.append(
                        f"op {refused.upper()} is not valid for {cur} with {backend} in {spec.name} (detected on "
                        f"real ranks; valid: {', '.join(o.upper() for o in ops)}).{_prim.op_hint(refused, cur)} "
                        f"Showing {want.upper()}.")
                if list(c["op"].options) != ops:
                    c["op"].options = ops
                c["op"].value = want
        if spec.rooted:
            r = want_root if want_root is not None else c["root"].value
            c["root"].max = max(ws - 1, 0)  # clamps the value when the world shrinks
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < ws:
                fixed = min(max(r, 0), ws - 1) if isinstance(r, int) and not isinstance(r, bool) else 0
                if want_root is not None:
                    self._notes.append(f"{spec.root_name}={r!r} is not a rank at world size {ws} "
                                       f"(choose 0..{ws - 1}); showing {spec.root_name}={fixed}")
                r = fixed
            c["root"].value = r
        self._update_length()

    def _update_length(self):
        c = self.controls
        spec = _prim.SPECS[c["primitive"].value]
        if spec.kind != "tensor":
            return
        import torch
        ws, cs = c["world_size"].value, c["chunk_size"].value
        n = max(spec.n_in(ws, r, c["root"].value if spec.rooted else 0) for r in range(ws))
        itemsize = getattr(torch, c["dtype"].value).itemsize
        self.length_label.value = (f"<span title='tensor length per rank'>{n} chunk(s) × {cs} = "
                                   f"<b>{n * cs}</b> elements ({_bytes(n * cs * itemsize)})</span>")

    def _update_backend_note(self):
        down = [f"<b>{b}</b> unavailable: {_esc(i['reason'])}" for b, i in self.backend_infos.items()
                if not i["available"]]
        self.backend_note.value = ("<span style='color:#666;font-size:90%'>" + "<br>".join(down) + "</span>"
                                   if down else "")

    def _update_note(self):
        if self._notes:
            self.note.value = ("<div style='color:#8a5300'>" +
                               "<br>".join("⚠ " + _esc(n) for n in self._notes) + "</div>")
        else:
            self.note.value = ""

    def _after_change(self, name):
        c = self.controls
        if name == "inputs":
            preset = INPUT_PRESETS[c["inputs"].value]
            effect = preset[2]
            spec = self.spec
            if effect and spec.kind == "tensor":
                dt, op, ws = effect
                sup = self._support(c["backend"].value)
                if ws <= c["world_size"].max:
                    c["world_size"].value = ws
                if dt in sup.dtypes(spec.name):
                    self._sync_controls(want_dtype=dt, want_op=op if spec.reduces and op in
                                        sup.ops(spec.name, dt) else None)
                    return
        self._sync_controls()

    def _on_change(self, name):
        def handler(change):
            if self._syncing:
                return
            self._notes = []
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
        if self._closed:
            return
        # busy first: a run finishing right after the hand-over must not be overwritten by it
        self._set_status(f"⏳ running {params['primitive']} on {params['world_size']} rank(s)…", busy=True)
        with self._cv:
            if self._closed:
                return
            self._pending = params
            self.requests += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="collnb-explorer", daemon=True)
                self._worker.start()
            self._cv.notify_all()

    def _work(self):
        while True:
            with self._cv:
                params = self._pending
                self._pending = None
                if params is None or self._closed:
                    self._worker = None
                    self._cv.notify_all()
                    return
                self._in_flight += 1
                self.runs_started += 1
            try:
                self._execute(params)
            except BaseException as exc:  # noqa: BLE001 - never let the worker die silently
                try:
                    self._show_error(exc, params)
                except Exception:
                    pass
            finally:
                with self._cv:
                    self._in_flight -= 1
                    self.runs_finished += 1
                    self._cv.notify_all()

    def _stale(self) -> bool:
        return self._pending is not None or self._closed

    def _execute(self, params):
        p = params
        preset = INPUT_PRESETS[p["inputs"]]
        t0 = time.perf_counter()
        try:
            result = _prim.run(p["primitive"], p["world_size"],
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
        from .heatmap import heatmap_grid
        grid = heatmap_grid(result)
        png = result.png(dpi=self.dpi, grid=grid)  # the drawing path of RunResult's notebook display
        fig_html = self._figure_html(result, grid, png)
        ref_html = self._reference_html(result, grid)
        t2 = time.perf_counter()
        if self._stale():
            self.draws_skipped += 1
            return
        self.figure.value = fig_html
        self.reference.value = ref_html
        self.last_result = result
        self.last_png = png
        self.last_params = {k: v for k, v in p.items() if not k.startswith("_")}
        self.error = None
        t3 = time.perf_counter()
        self.last_timing = dict(run_s=t1 - t0, draw_s=t2 - t1, total_s=t3 - p["_t_request"])
        verdict = ("✓ matches the reference" if result.ok else
                   f"✗ {result.n_mismatches()} chunk(s) differ from the reference")
        effect = _dtype_effect_text(result, grid)
        text = (f"{verdict} · {result.title()} · ran in {1000 * (t1 - t0):.0f} ms, "
                f"drawn in {1000 * (t2 - t1):.0f} ms")
        self._set_status(text, busy=False, color="#2E7D32" if result.ok else "#C62828", effect=effect)

    def _show_error(self, exc, params):
        self.error = exc
        self.last_params = {k: v for k, v in params.items() if not k.startswith("_")}
        if isinstance(exc, (ValueError, TypeError)):
            head = "invalid combination"
        elif isinstance(exc, _launcher.RankError):
            head = "a rank failed (the ranks were stopped; the next change starts fresh ones)"
        elif isinstance(exc, _launcher.LaunchTimeout):
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
        body = _esc(text)
        if pre:
            body = (f"<pre style='white-space:pre-wrap;margin:0;font-size:85%;color:{color}'>{body}</pre>")
        else:
            body = f"<span style='color:{color}'>{body.replace(chr(10), '<br>')}</span>"
        if effect:
            body += f"<br><span class='collnb-dtype-effect' style='color:#A65400;font-weight:bold'>{_esc(effect)}</span>"
        self.status.value = (f"<div class='collnb-status-box' data-busy='{int(busy)}'>{body}</div>")

    # -- HTML ------------------------------------------------------------------------------------
    @staticmethod
    def _figure_html(result, grid, png) -> str:
        b64 = base64.b64encode(png).decode("ascii")
        after = _values(result, "after")
        exact = _values(result, "expected_f64")
        marks = [[_num(x) if differs_exact(v, x) else "" for v, x in zip(a, e)] if e else ["" for _ in a]
                 for a, e in zip(after, exact)]
        alt_rows = "; ".join(f"rank {r}: [{', '.join(t for t in row if t)}]"
                             for r, row in enumerate(grid.after.text))
        alt = f"{grid.title}. After: {alt_rows}. {grid.status}"
        attrs = dict(primitive=result.primitive, world_size=result.world_size,
                     dtype=str(result.dtype).replace("torch.", "") if result.dtype is not None else "",
                     op=result.op or "", root="" if result.root is None else result.root,
                     backend=result.backend, chunk_size=result.chunk_size, ok=int(result.ok),
                     before=_rows_attr([[_num(v) for v in row] for row in _values(result, "before")]),
                     after=_rows_attr([[_num(v) for v in row] for row in after]),
                     exact=_rows_attr(marks), after_text=_rows_attr(grid.after.text))
        data = " ".join(f"data-{k.replace('_', '-')}=\"{_esc(v)}\"" for k, v in attrs.items())
        return (f"<img class=\"collnb-heatmap\" src=\"data:image/png;base64,{b64}\" alt=\"{_esc(alt)}\" "
                f"title=\"{_esc(grid.title)}\" {data} style=\"{_IMG_STYLE}\">")

    @staticmethod
    def _reference_html(result, grid) -> str:
        """Float64 result of the same inputs, per rank and chunk; cells where the run's dtype gave
        another value are highlighted and show what the dtype gave."""
        if result.spec.kind != "tensor":
            return ""
        from .heatmap import format_value
        dname = str(result.dtype).replace("torch.", "")
        after = _values(result, "after")
        exact = _values(result, "expected_f64")
        rows, exact_rows = [], []
        n_diff = 0
        for r in range(result.world_size):
            vals = exact[r]
            exact_rows.append([_num(x) for x in vals] if vals is not None else [])
            if vals is None:
                cells = ["<td class='undef'>undefined</td>"]
            else:
                cells = []
                for c, x in enumerate(vals):
                    txt = _esc(format_value(x))
                    got = after[r][c] if c < len(after[r]) else None
                    if differs_exact(got, x):
                        n_diff += 1
                        g = _esc(format_value(got))
                        cells.append(f"<td class='differs' title='{_esc(dname)} gives {g}'>{txt}"
                                     f"<span>{_esc(dname)}: {g}</span></td>")
                    else:
                        cells.append(f"<td>{txt}</td>")
            rows.append(f"<tr><th>rank {r}</th>{''.join(cells)}</tr>")
        style = ("<style>.collnb-reference{border-collapse:collapse;font-size:80%;text-align:center;line-height:1.3}"
                 ".collnb-reference th{text-align:right;padding:1px 4px 1px 0;font-weight:normal}"
                 ".collnb-reference td{padding:1px 4px;border:1px solid #ddd}"
                 ".collnb-reference td.differs{background:#FFD8A8;font-weight:bold;border:2px solid #A65400}"
                 ".collnb-reference td.differs span{display:block;font-weight:normal;font-size:80%;color:#A65400}"
                 ".collnb-reference td.undef{color:#888;font-style:italic}</style>")
        if n_diff:
            what = (f"<span style='background:#FFD8A8'>highlighted</span>: {n_diff} chunk(s) where "
                    f"{dname} gave another value")
        else:
            what = f"{dname} gave the exact result everywhere"
        # line-height: ipywidgets' HTML widget sets a 28 px line height meant for one-line labels
        head = (f"<div style='font-weight:bold;line-height:1.6'>float64 reference</div>"
                f"<div style='font-size:85%;color:#555;line-height:1.4;margin-bottom:4px'>the exact "
                f"result of the same inputs; {what}</div>")
        table = (f"<table class='collnb-reference' data-differs='{n_diff}' "
                 f"data-exact='{_esc(_rows_attr(exact_rows))}'>{''.join(rows)}</table>")
        return style + head + table



def _values(result, which):
    return [chunk_firsts(t, result.chunk_size) for t in getattr(result, which)]


def _num(v) -> str:
    """A value as exact text for ``data-*`` attributes: ``-56``, ``280`` (integral floats without
    ``.0``), ``0.1``, ``inf``, ``nan``, ``(1+2j)``, ``True``, or the object's ``str``."""
    import math
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if math.isfinite(v) and v.is_integer() and abs(v) < 2 ** 53:
            return str(int(v))
        return repr(v)
    return str(v)


def _dtype_effect_text(result, grid) -> str:
    """One line saying what the dtype did, e.g. "dtype effect: int8 gives -56 where float64 gives
    200 (...)", or ``""``."""
    if result.spec.kind != "tensor":
        return ""
    from .heatmap import format_value
    after = _values(result, "after")
    exact = _values(result, "expected_f64")
    diffs = [(r, c) for r in range(result.world_size) if exact[r] is not None
             for c, x in enumerate(exact[r]) if c < len(after[r]) and differs_exact(after[r][c], x)]
    if not diffs:
        return ""
    r, c = diffs[0]
    dname = str(result.dtype).replace("torch.", "")
    return (f"dtype effect: {dname} gives {format_value(after[r][c])} where float64 gives "
            f"{format_value(exact[r][c])} (rank {r}, chunk {c}; {len(diffs)} chunk(s) differ from the "
            f"float64 result, highlighted)")


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def explore(primitive: str | Sequence[str] = "all_reduce", **kwargs: Any) -> Explorer:
    """Open an interactive explorer of ``primitive`` on warm ranks.

    Args:
        primitive: one of :data:`collnb.primitives.PRIMITIVES`, or a list of them (adds a
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
        launch_kwargs: passed to :func:`collnb.launcher.launch` through :func:`collnb.primitives.run`.

    Returns:
        :class:`Explorer` (displays as its panel when it is the last expression of a cell).

    Raises:
        ValueError: unknown primitive, backend, inputs preset, chunk_size or a world size outside
            1..16 (the message lists the valid choices). RuntimeError: no backend can run here.
    """
    return Explorer(primitive, **kwargs)
