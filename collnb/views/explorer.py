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
* **inputs**: the teaching values (``10*rank + chunk``; ``100*rank + chunk`` above 10 ranks) or
  a preset that fits the primitive (:func:`presets_for`): reducing primitives get the dtype
  lessons (int8 SUM wraps 100+100 -> -56; float16 60000+60000 -> inf; bfloat16 256+1 -> 256);
  primitives that only move data get values that name their source rank and special floats
  (nan, inf, 1/3) that arrive bit for bit. A preset keeps the learner's world size unless its
  effect needs more ranks, and then says so in the panel.

Saved notebooks: displaying an explorer also displays a static picture of its current state
(PNG, plus one line telling the learner to run the cell to bring the controls back), kept current
with ``update_display`` as the controls move. While the panel is live the picture is hidden (a
CSS rule in the picture's own HTML) and one grey line above the panel says to run the cell again
if the controls stop answering (a restarted kernel leaves the old panel on the page); a saved
notebook reopened without a kernel, nbviewer, a code host or a MyST-NB book shows the picture
(see :func:`static_bundle`).

Every change runs the primitive through :func:`collnb.primitives.run` (the warm pool of
:mod:`collnb.launcher`) and redraws the before | after heatmap with the same drawing path a
:class:`~collnb.primitives.RunResult` uses when a notebook displays it
(:meth:`RunResult.png <collnb.primitives.RunResult.png>`). For reducing primitives a table beside
the heatmap (below it when the notebook is too narrow for both) shows the float64 result of the
same inputs and highlights the chunks where the dtype changed the answer.

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

from .. import ranks as _launcher  # was launcher
from .. import collectives as _prim  # was primitives
from .heatmap import chunk_firsts, differs_exact

__all__ = ["explore", "Explorer", "INPUT_PRESETS", "CHUNK_SIZES", "presets_for", "static_bundle"]


def _special_float(r, c):
    return (float("nan"), float("inf"), float("-inf"), 1 / 3)[(r + c) % 4]


#: Input presets: key -> (label, inputs callable ``f(rank, chunk)`` or ``None`` for the teaching
#: values, ``(dtype, op, min_world_size)`` that the effect needs, or ``None``). ``dtype`` may be
#: ``"float"``: any floating dtype (float32 when the current one is not). Choosing a preset sets
#: that dtype and op (reducing primitives) and keeps the learner's world size unless it is below
#: ``min_world_size``; the panel says what it changed. Which presets a primitive offers:
#: :func:`presets_for`.
INPUT_PRESETS: dict[str, tuple] = {
    "teaching": ("10·rank + chunk (teaching values)", None, None),
    "int8_wrap": ("100 on every rank: int8 SUM wraps past 127 (2 ranks: 100+100 → -56)", lambda r, c: 100,
                  ("int8", "sum", 2)),
    "fp16_inf": ("60000 on every rank: float16 SUM overflows (2 ranks: 60000+60000 → inf)", lambda r, c: 60000,
                 ("float16", "sum", 2)),
    "bf16_round": ("256 on rank 0, 1 elsewhere: bfloat16 SUM rounds (2 ranks: 256+1 → 256)",
                   lambda r, c: 256 if r == 0 else 1, ("bfloat16", "sum", 2)),
    "rank_ids": ("every chunk holds its rank: the values say where the data came from", lambda r, c: r, None),
    "special_floats": ("nan, inf, -inf, 1/3: copied bit for bit (no arithmetic, nothing rounds)",
                       _special_float, ("float", None, 1)),
}

_REDUCING_PRESETS = ("teaching", "int8_wrap", "fp16_inf", "bf16_round", "rank_ids")
_MOVING_PRESETS = ("teaching", "rank_ids", "special_floats")


def presets_for(primitive: str) -> tuple:
    """The keys of :data:`INPUT_PRESETS` that show something real for ``primitive``: the dtype
    lessons (int8 wraps, float16 overflows, bfloat16 rounds) only where the primitive does
    arithmetic (reduces); values naming their source rank and special floats where it only moves
    data; just the teaching values for object collectives and barrier (no tensor inputs).

    Raises:
        ValueError: unknown primitive (the valid ones listed).
    """
    spec = _prim._get_spec(primitive)
    if spec.kind != "tensor":
        return ("teaching",)
    return _REDUCING_PRESETS if spec.reduces else _MOVING_PRESETS


def _teaching_label(world_size: int) -> str:
    return f"{10 if world_size <= 10 else 100}·rank + chunk (teaching values)"


_ABOUT_REDUCING = ("<b>{p}</b> combines the ranks' values ({op}), so the dtype can change the answer: "
                   "the inputs presets show int8 wrapping, float16 overflowing and bfloat16 rounding, "
                   "and the float64 reference table shows the exact result.")
_ABOUT_MOVING = ("<b>{p}</b> only moves data, it does no arithmetic: every output is some rank's input, "
                 "bit for bit, whatever the dtype. Presets: values that name their source rank; nan, inf "
                 "and 1/3 arriving unchanged.")
_ABOUT_OBJECT = ("<b>{p}</b> moves pickled Python objects (strings here), not tensors: no dtype, no arithmetic.")
_ABOUT_TIME = ("<b>{p}</b> moves no data: each rank leaves only after every rank has arrived (times in ms).")

#: One line under a saved explorer's or replay's static picture.
RERUN_LINE = "Static picture of the {what}'s last state: run this cell to bring back its controls."

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
        if inputs not in presets_for(choices[0]):
            raise ValueError(f"inputs preset {inputs!r} shows nothing for {choices[0]}; choose one of "
                             f"{', '.join(presets_for(choices[0]))}")
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
        self._info: list = []
        self._display_ids: list = []
        self.static_png: bytes | None = None

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
        # the panel (ipywidgets' view mime type) with this explorer's repr as the plain-text fallback
        data = self.widget._repr_mimebundle_(**kwargs) or {}
        data["text/plain"] = repr(self) + "\n" + RERUN_LINE.format(what="explorer")
        return data

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
            self.static_png = _captioned_png(self.last_png, RERUN_LINE.format(what="explorer"))
        return static_bundle(self.last_png, "explorer", alt=what, png_with_line=self.static_png,
                             attrs=dict(world_size=res.world_size, primitive=res.primitive,
                                        dtype=str(res.dtype).replace("torch.", "") if res.dtype is not None else ""))

    def _update_static(self):
        if not self._display_ids:
            return
        try:
            from IPython.display import update_display
            bundle = self.static_bundle()
            for did in self._display_ids:
                update_display(bundle, raw=True, display_id=did)
        except Exception:  # noqa: BLE001 - outside IPython, or the kernel is going away
            pass

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
    @staticmethod
    def _preset_label(key, world_size):
        return _teaching_label(world_size) if key == "teaching" else INPUT_PRESETS[key][0]

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
        if tensor:
            keys = presets_for(spec.name)
            cur = c["inputs"].value
            if cur not in keys:
                self._info.append(f"the inputs preset “{INPUT_PRESETS[cur][0]}” shows nothing for {spec.name}; "
                                  f"showing the teaching values")
                cur = "teaching"
            opts = [(self._preset_label(k, ws), k) for k in keys]
            if [tuple(o) for o in c["inputs"].options] != opts:
                c["inputs"].options = opts
            c["inputs"].value = cur
        self._update_length()
        self._update_about()

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
        parts = []
        if self._info:
            parts.append("<div class='collnb-info' style='color:#1F4E79'>" +
                         "<br>".join("ℹ " + _esc(n) for n in self._info) + "</div>")
        if self._notes:
            parts.append("<div style='color:#8a5300'>" +
                         "<br>".join("⚠ " + _esc(n) for n in self._notes) + "</div>")
        self.note.value = "".join(parts)

    def _update_about(self):
        spec = self.spec
        c = self.controls
        if spec.kind == "time":
            text = _ABOUT_TIME
        elif spec.kind == "object":
            text = _ABOUT_OBJECT
        elif spec.reduces:
            text = _ABOUT_REDUCING
        else:
            text = _ABOUT_MOVING
        text = text.format(p=_esc(spec.name), op=_esc(str(c["op"].value).upper()))
        self.about.value = f"<div style='color:#333;line-height:1.4;max-width:900px'>{text}</div>"

    def _after_change(self, name):
        c = self.controls
        if name == "inputs":
            key = c["inputs"].value
            effect = INPUT_PRESETS[key][2]
            spec = self.spec
            if effect and spec.kind == "tensor":
                dt, op, min_ws = effect
                before = self.params()
                sup = self._support(c["backend"].value)
                ws = c["world_size"].value
                if ws < min_ws <= c["world_size"].max:
                    c["world_size"].value = min_ws
                if dt == "float":
                    import torch
                    dt = before["dtype"] if getattr(torch, before["dtype"]).is_floating_point else "float32"
                if dt in sup.dtypes(spec.name):
                    self._sync_controls(want_dtype=dt, want_op=op if spec.reduces and op and op in
                                        sup.ops(spec.name, dt) else None)
                else:
                    self._sync_controls()
                after = self.params()
                changed = [f"{k.replace('_', ' ')} {before[k]} → {after[k]}" for k in ("dtype", "op", "world_size")
                           if before[k] != after[k]]
                if before["world_size"] != after["world_size"]:
                    changed[-1] += f" (the effect needs at least {min_ws} ranks)"
                kept = [] if before["world_size"] != after["world_size"] else [f"world size {ws} kept"]
                if changed:
                    self._info.append(f"preset “{INPUT_PRESETS[key][0]}” set " + ", ".join(changed) +
                                      ("; " + kept[0] if kept else ""))
                else:
                    self._info.append(f"preset “{INPUT_PRESETS[key][0]}”: dtype {after['dtype']} as set; "
                                      + kept[0])
                return
        self._sync_controls()

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
        from .heatmap import heatmap_grid, heatmap_image
        grid = heatmap_grid(result)
        # the drawing path of RunResult's notebook display (RunResult.png -> heatmap_png)
        him = heatmap_image(result, dpi=self.dpi, grid=grid)
        png = _encode_png(him.pixels, self.dpi)
        fig_html = self._figure_html(result, grid, png, him)
        ref_html = self._reference_html(result, grid) if result.spec.reduces else ""
        t2 = time.perf_counter()
        if self._stale():
            self.draws_skipped += 1
            return
        self.figure.value = fig_html
        self.reference.value = ref_html
        self.last_result = result
        self.last_png = png
        self.static_png = None
        self.last_params = {k: v for k, v in p.items() if not k.startswith("_")}
        self.error = None
        t3 = time.perf_counter()
        self.last_timing = dict(run_s=t1 - t0, draw_s=t2 - t1, total_s=t3 - p["_t_request"])
        effect = _dtype_effect_text(result, grid)
        dname = str(result.dtype).replace("torch.", "") if result.dtype is not None else ""
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
    def _figure_html(result, grid, png, him=None) -> str:
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
        if him is not None:  # where the cells are, for tests that measure the drawn labels
            attrs.update(cells=";".join(f"{k}:{x},{y},{c}" for k, (x, y, c) in him.geometry.items()),
                         layout=him.layout, min_font_px=f"{min(s_ for _, s_, _ in him.labels):.1f}")
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
        # sizes: >= 10 px at ipywidgets' 13 px base (90% = 11.7 px, the dtype's value 88% of that)
        style = ("<style>.collnb-reference{border-collapse:collapse;font-size:90%;text-align:center;line-height:1.3}"
                 ".collnb-reference th{text-align:right;padding:1px 4px 1px 0;font-weight:normal}"
                 ".collnb-reference td{padding:1px 4px;border:1px solid #ddd}"
                 ".collnb-reference td.differs{background:#FFD8A8;font-weight:bold;border:2px solid #A65400}"
                 ".collnb-reference td.differs span{display:block;font-weight:normal;font-size:88%;color:#7A3E00}"
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
    if not result.spec.reduces:
        return (f"{dname} cannot hold every input value: the inputs changed when the tensors were made "
                f"(rank {r}, chunk {c}: {format_value(after[r][c])} for {format_value(exact[r][c])}); "
                f"{result.primitive} itself copied them unchanged")
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


def _captioned_png(png: bytes | None, line: str) -> bytes | None:
    """``png`` with ``line`` painted in a strip above it (>= 13 px text), for frontends that show
    only the ``image/png`` of a saved output."""
    if png is None:
        return None
    import io

    import numpy as np
    from PIL import Image

    from .heatmap import _Canvas, _rgb
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    h, w = img.shape[:2]
    strip = 30
    cv = _Canvas(w, h + strip)
    cv.img[strip:] = img.astype(np.float32) / 255.0
    cv.rect(0, 0, w, strip - 2, _rgb("#FFF4D6"))
    cv.text(line, 10, strip / 2 - 1, 14, _rgb("#5A3B00"), "bold", ha="left")
    out = io.BytesIO()
    Image.fromarray((np.clip(cv.img, 0, 1) * 255 + 0.5).astype(np.uint8), "RGB").save(out, format="PNG", compress_level=1)
    return out.getvalue()


#: CSS carried by every static picture: while a live collnb panel is in the same output area
#: (JupyterLab 4 and Notebook 7 DOM; ``:has`` needs Chromium 105+, Firefox 121+, Safari 15.4+) the
#: picture and its line are hidden and only a one-line hint shows, for the case the page cannot
#: detect: a kernel restart leaves the old panel on the page, looking alive but answering nothing.
_STATIC_CSS = ("<style>.collnb-static .collnb-live-hint{display:none}"
               ".jp-OutputArea:has(.collnb-live) .collnb-static .collnb-static-body{display:none}"
               ".jp-OutputArea:has(.collnb-live) .collnb-static .collnb-live-hint{display:block}</style>")
#: The hint shown above a live panel.
LIVE_HINT = "Controls not responding (after a kernel restart)? Run this cell again."


def static_bundle(png: bytes | None, what: str, *, alt: str = "", caption: str = "",
                  png_with_line: bytes | None = None, attrs: dict | None = None) -> dict:
    """A display bundle standing in for a live widget (an explorer or a replay) where no kernel
    runs: a saved notebook reopened, nbviewer, a code host, a MyST-NB book.

    * ``text/html``: one line ("Static picture of the explorer's last state: run this cell to
      bring back its controls.") above ``<img class="collnb-static-img">`` of ``png``, in a
      ``<div class="collnb-static">`` whose CSS hides it while a live panel (class
      ``collnb-live``) is in the same output area, where only a one-line hint shows instead
      (:data:`LIVE_HINT`: after a kernel restart the old panel stays on the page, inert);
    * ``image/png``: ``png_with_line`` (the same picture with the line painted above it), for
      frontends that show only images;
    * ``text/plain``: the line.

    Args:
        png: PNG bytes of the current state, or None (no picture yet: the line and ``caption``).
        what: ``"explorer"`` or ``"replay"`` (goes into the line).
        alt: the image's alt text. caption: text shown when there is no picture.
        attrs: extra ``data-*`` attributes of the ``<img>`` (e.g. world_size).
    """
    line = RERUN_LINE.format(what=what)
    data = {"text/plain": line}
    hint = (f"<div class='collnb-live-hint' style='color:#555;font-size:12px;line-height:1.4'>"
            f"{_esc(LIVE_HINT)}</div>")
    if png is None:
        data["text/html"] = (f"{_STATIC_CSS}<div class='collnb-static'><div class='collnb-static-body'>"
                             f"<i>{_esc(line)}</i> {_esc(caption)}</div>{hint}</div>")
        return data
    b64 = base64.b64encode(png).decode("ascii")
    extra = " ".join(f'data-{k.replace("_", "-")}="{_esc(v)}"' for k, v in (attrs or {}).items())
    data["text/html"] = (f"{_STATIC_CSS}<div class='collnb-static'><div class='collnb-static-body'>"
                         f"<div class='collnb-static-line' style='color:#5A3B00;background:#FFF4D6;"
                         f"padding:3px 8px;display:inline-block'>{_esc(line)}</div><br>"
                         f"<img class=\"collnb-static-img\" src=\"data:image/png;base64,{b64}\" alt=\"{_esc(alt)}\" "
                         f"{extra} style=\"{_IMG_STYLE}\"></div>{hint}</div>")
    data["image/png"] = base64.b64encode(png_with_line or png).decode("ascii")
    return data


def _encode_png(pixels, dpi) -> bytes:
    """RGB pixels -> PNG bytes, as :func:`collnb.heatmap.heatmap_png` encodes them."""
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="PNG", compress_level=1, dpi=(dpi, dpi))
    return buf.getvalue()
