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

The explorer is a :class:`~collnb.views.binder.Binder`, the views' one explorer engine (its worker,
its status line and its static picture are the binder's). Its state is one
:class:`~collnb.views.controls.ExplorerParams` (primitive, world size, backend, dtype, op, src/dst,
elements per chunk, inputs preset); the values each control offers and what a change does are pure
functions of it (:func:`~collnb.views.controls.choices`, :func:`~collnb.views.controls.update`), and
the widgets only show it. A slider move checks the world size once (against
:func:`collnb.ranks.backend_info`, read when the explorer is made) and asks
:func:`collnb.collectives.backend_support` once (the run's own check: what the backend accepts does
not depend on the world size, so the explorer keeps its answer).

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

Runs happen on the binder's :class:`~collnb.views.worker.LatestWorker` (one background thread per
explorer): a control change returns at once, and while a run is in flight further changes only
overwrite a one-slot mailbox, so a fast slider drag runs at most one stale request and then the
latest values (no queue). A result that is already stale when its run finishes is not drawn.
Errors (an invalid combination, a failing rank) are shown in the panel; the explorer stays usable
(a pool the launcher closed after a failure is rebuilt by the next run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence, TypedDict, cast

import ipywidgets as widgets

from .. import collectives
from .. import ranks
from ..i18n import N_, _
from ..vocabulary import BACKENDS, MAX_WORLD_SIZE, check_backend, check_choice, check_world_size, dtype_name
from .binder import Binder, Picture
from .panel import Choices, Control, slider_layout
from .controls import ExplorerParams, Facts, RunValues, Updated, choices, normalised, update
from .controls import fix as fix_params
from .explorer_text import (DrawnValues, backend_note_html, drawn_values, dtype_effect_text, figure_alt, length_html,
                            reference_html, status_text)
from .heatmap import heatmap_grid, heatmap_image
from .presets import CHUNK_SIZES, INPUT_PRESETS, about_text, presets_for

if TYPE_CHECKING:
    from torch import dtype as TorchDtype
    from typing_extensions import Unpack
    from torch.distributed import ReduceOp

    from ..collectives import PrimitiveSpec, RunResult
    from ..ranks import BackendFacts, LaunchOptions
    from .raster import Pixels

__all__ = ["explore", "Explorer"]


class _Shown(TypedDict):
    """The explorer's :attr:`Picture.data <collnb.views.panel.Picture.data>`."""

    drawn: DrawnValues
    reference: str  # the float64 table (HTML), "" where the primitive does not reduce


def _shown(picture: Picture) -> _Shown:
    return cast(_Shown, picture.data)  # the explorer's own draw made it


class Explorer(Binder[ExplorerParams, "RunResult"]):
    """An interactive before | after heatmap of one primitive on warm ranks (a
    :class:`~collnb.views.binder.Binder`).

    Create it with :func:`explore`. Display it (it is the last expression of a cell, or
    ``display(ex)``) to get the panel; :attr:`widget` is the underlying :class:`ipywidgets.VBox`.

    The state is one :class:`~collnb.views.controls.ExplorerParams` (:attr:`state`); the values each
    control offers are :func:`~collnb.views.controls.choices` of it, and a change is
    :func:`~collnb.views.controls.update` of it (pure functions, tested without widgets or ranks).
    The widgets only show the state (every widget event during that is ignored) and report a
    learner's change back.

    State for programs and tests (read-only unless said otherwise), besides the binder's
    (``last_result``, ``last_png``, ``error``, ``message``, ``last_timing``, ``runs_started``...):

    Attributes:
        state: the current :class:`~collnb.views.controls.ExplorerParams`.
        controls: ``{"primitive", "world_size", "dtype", "op", "root", "backend", "chunk_size",
            "inputs"}`` -> the control widget (set ``.value`` to change it, as a learner would).
        figure: ``ipywidgets.Image`` (PNG, classes ``collnb-figure collnb-heatmap``) showing the heatmap.
        figure_text: ``ipywidgets.HTML``: the picture's description for screen readers (visually
            hidden, right after the picture); :attr:`alt` is its text.
        drawn: what the picture shows, as text (``{"before", "after", "exact", "after_text"}``: per
            rank the chunks' values; ``exact``: the float64 value where the dtype gave another,
            else ``""``; plus ``"cells"``, ``"layout"``, ``"min_font_px"`` of the painted picture).
        reference: ``ipywidgets.HTML`` with the float64 reference table (``class="collnb-reference"``).
        last_params: the :class:`~collnb.views.controls.ExplorerParams` of the latest run drawn or
            failed (``last_params["dtype"]`` reads as :meth:`params` does).
        first_before_probe: whether the first picture came before the backend's first probe (nothing
            was known about the backend yet: the probe ran right after it, see :meth:`wait`).
    """

    name = what = "explorer"
    labels = {"primitive": N_("primitive"), "world_size": N_("world size"), "dtype": N_("dtype"), "op": N_("op"),
              "root": "src", "chunk_size": N_("elements per chunk"), "inputs": N_("inputs")}
    keep_shown = ("primitive", "backend", "world_size")
    figure_classes = ("collnb-heatmap",)

    def __init__(self, primitive: str | Sequence[str] = "all_reduce", *, world_size: int = 4,
                 dtype: str | TorchDtype = "float32", op: str | ReduceOp | ReduceOp.RedOpType = "sum",
                 root: int = 0, backend: str = "gloo", chunk_size: int = 1, inputs: str = "teaching", dpi: float = 80,
                 wait: bool = True, **launch_kwargs: Unpack[LaunchOptions]) -> None:
        given: list[object] = list(primitive) if isinstance(primitive, (list, tuple)) else [primitive]
        if not given:
            raise ValueError(_("give a primitive; choose one of: {valid}").format(
                valid=", ".join(collectives.PRIMITIVES)))
        chosen = [check_choice("primitive", p, collectives.PRIMITIVES) for p in given]
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
        self.launch_kwargs: LaunchOptions = ranks.check_launch_options(launch_kwargs, "collnb.explore")
        self.first_before_probe = False
        self._chosen = chosen

        # which backends can run here (asked once), and what each accepted (asked once per backend)
        self.backend_infos: dict[str, BackendFacts] = {b: ranks.backend_info(b) for b in BACKENDS}
        self.facts = Facts(tuple(chosen), self.backend_infos,
                           lambda b: collectives.backend_support(b, **self.launch_kwargs))
        if not self.facts.usable:
            raise RuntimeError(_("no backend can run here: {reasons}").format(
                reasons="; ".join(f"{b}: {i['reason']}" for b, i in self.backend_infos.items())))
        self._given_notes: list[str] = []
        # a value that is no dtype or op: noted, and float32 or SUM shown
        dtype_ = str(normalised("dtype", dtype, self._given_notes) or "float32")
        op_ = str(normalised("op", op, self._given_notes) or "sum")
        start = ExplorerParams(chosen[0], world_size, dtype_, op_, root, backend, chunk_size, inputs)
        # the first picture before the backend's first probe (1-4 s after an install): when nothing is
        # known yet and the first view is float32 SUM (which every backend runs for every tensor
        # primitive), the controls offer just that until the probe, run right after the picture, answers
        first_backend = backend if backend in self.facts.usable else self.facts.usable[0]
        if (dtype_, op_) == ("float32", "sum") and collectives.known_support(first_backend) is None:
            self.facts.provisional = {"dtype": dtype_, "op": op_}
        super().__init__(start, wait=wait)

    # -- the model ---------------------------------------------------------------------------
    def choices(self, params: ExplorerParams) -> Choices:
        return choices(params, self.facts)

    def fix(self, params: ExplorerParams) -> Updated:
        """The first values made whole (:func:`~collnb.views.controls.fix`), with the notes about the
        values given to :func:`explore` that were no dtype or op, and the line saying the dtype and op
        lists fill in once the backend has been probed."""
        q, notes, info = fix_params(params, self.facts)
        if self.facts.provisional is not None:
            info = [*info, self._probing_line(q.backend)]
        return q, self._given_notes + notes, info

    def change(self, params: ExplorerParams, values: Mapping[str, object]) -> Updated:
        return update(params, values, self.facts)

    def normalise(self, name: str, value: object) -> object:
        norm = {"dtype": dtype_name, "op": collectives.op_name}.get(name)
        if norm is None:
            return value
        try:
            return norm(value)
        except (ValueError, TypeError):  # the check against what is offered names the valid values
            return value

    def run(self, params: ExplorerParams) -> RunResult:
        """One :func:`collnb.run` of ``params``, given only the arguments the primitive uses
        (:attr:`~collnb.collectives.PrimitiveSpec.arguments`; ``None`` is not given): the controls
        of the others keep their values for the next primitive, but the run is never given them."""
        p: RunValues = params.as_dict()
        uses = collectives.SPECS[p["primitive"]].arguments
        return collectives.run(p["primitive"], p["world_size"], dtype=p["dtype"], op=p["op"], root=p["root"],
                               backend=p["backend"], chunk_size=p["chunk_size"] if "chunk_size" in uses else None,
                               inputs=INPUT_PRESETS[p["inputs"]][1] if "inputs" in uses else None,
                               check_support=self.facts.provisional is None, **self.launch_kwargs)

    def draw(self, result: RunResult, params: ExplorerParams) -> Picture:
        """The heatmap of :meth:`RunResult.png <collnb.collectives.RunResult.png>` (the drawing path
        of a result's notebook display), its description, the values drawn and the float64 table."""
        grid = heatmap_grid(result)
        him = heatmap_image(result, dpi=self.dpi, grid=grid)
        return Picture(pixels=him.pixels, dpi=self.dpi, alt=figure_alt(grid), ok=result.ok,
                       effect=dtype_effect_text(result, grid),
                       attrs=dict(world_size=result.world_size, primitive=result.primitive,
                                  dtype=dtype_name(result.dtype) if result.dtype is not None else ""),
                       data=_Shown(drawn=drawn_values(result, grid, him),
                                   reference=reference_html(result, grid) if result.spec.reduces else ""))

    # -- the panel ---------------------------------------------------------------------------
    def control(self, name: str, label: str, offered: list[object], value: object) -> Control:
        style = {"description_width": "initial"}
        if name == "primitive":
            return widgets.Dropdown(options=self._chosen, value=value, description=label,
                                    disabled=len(self._chosen) == 1, style=style, layout=widgets.Layout(width="auto"))
        if name == "backend":
            usable = self.facts.usable
            return widgets.ToggleButtons(options=usable, value=value, tooltips=[
                _("run on {backend} ranks").format(backend=b) for b in usable], style={"button_width": "70px"})
        if name in ("world_size", "root"):
            assert isinstance(value, int)  # ExplorerParams' fields
            return widgets.IntSlider(value=value, min=0 if name == "root" else 1, max=MAX_WORLD_SIZE, step=1,
                                     description=label, continuous_update=True, style=style,
                                     layout=slider_layout(label))
        if name == "chunk_size":
            return widgets.SelectionSlider(options=list(CHUNK_SIZES), value=value, description=label,
                                           continuous_update=True, style=style, layout=slider_layout(label))
        if name == "inputs":
            return widgets.Dropdown(options=[("", value)], value=value, description=label, style=style,
                                    layout=widgets.Layout(width="520px"))
        return widgets.Dropdown(options=[value], value=value, description=label, style=style,
                                layout=widgets.Layout(width="auto"))

    def layout(self) -> list[widgets.Widget]:
        c = self.controls
        self.backend_note = widgets.HTML(value=backend_note_html(self.backend_infos),
                                         layout=widgets.Layout(margin="0 0 0 8px"))
        self.backend_note.add_class("collnb-backend-note")
        self.length_label = widgets.HTML()
        self.length_label.add_class("collnb-length")
        self.about = widgets.HTML()
        self.about.add_class("collnb-about")
        self.reference = widgets.HTML(layout=widgets.Layout(margin="0 0 0 12px"))
        self.reference.add_class("collnb-reference-box")
        wrap = widgets.Layout(flex_flow="row wrap", align_items="center")
        row1 = widgets.HBox([c["primitive"], widgets.Label(_("backend"), layout=widgets.Layout(margin="0 4px 0 12px")),
                             c["backend"], self.backend_note], layout=wrap)
        row2 = widgets.HBox([c["world_size"], c["dtype"], c["op"], c["root"]], layout=widgets.Layout(
            flex_flow="row wrap", align_items="center"))
        row3 = widgets.HBox([c["chunk_size"], self.length_label, c["inputs"]], layout=widgets.Layout(
            flex_flow="row wrap", align_items="center"))
        body = widgets.HBox([self.picture, self.reference],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start"))
        return [row1, row2, row3, self.about, self.status, self.note, body]

    def synced(self) -> None:
        spec, p = self.spec, self.state
        tensor = spec.kind == "tensor"
        self.length_label.layout.display = None if tensor else "none"
        if tensor:
            self.length_label.value = length_html(spec, p)
        self.controls["root"].description = spec.root_name or "root"
        self.about.value = (f"<div style='color:#333;line-height:1.4;max-width:900px'>"
                            f"{about_text(spec, p.op)}</div>")

    def shown(self, result: RunResult, picture: Picture) -> None:
        self.reference.value = _shown(picture)["reference"]
        if self.first_picture_s is None:
            self.first_before_probe = self.facts.provisional is not None

    def busy_text(self, params: ExplorerParams) -> str:
        return _("⏳ running {primitive} on {n} rank(s)…").format(primitive=params.primitive, n=params.world_size)

    def done_text(self, result: RunResult, picture: Picture, timing: Mapping[str, float]) -> str:
        return status_text(result, picture.effect, timing["run_s"], timing["draw_s"])

    @staticmethod
    def _probing_line(backend: str) -> str:
        return _("the dtype and op lists fill in once {backend} has been tried on real ranks (a few seconds, "
                 "once after an install)").format(backend=backend)

    def settle(self) -> None:
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
            probing = self._probing_line(self.state.backend)
            self.facts.known[self.state.backend] = sup
            self.facts.provisional = None
            before = self.state
            self.state, notes, info = fix_params(self.state, self.facts, explicit=("dtype", "op"))
            self.notes = self.notes + notes
            self.info = [i for i in self.info if i != probing] + info
            self._sync()
            if self.state != before:
                self._request()

    # -- what programs and tests read ----------------------------------------------------------
    @property
    def figure(self) -> widgets.Image:
        """The heatmap's ``ipywidgets.Image`` (the binder's :attr:`image`)."""
        return self.image

    @property
    def drawn(self) -> DrawnValues | dict[str, object]:
        """What the picture shows, as text (see the class docstring); ``{}`` before the first picture."""
        return _shown(self.last_picture)["drawn"] if self.last_picture is not None else {}

    @property
    def alt(self) -> str:
        """The picture's description as text."""
        return self.last_picture.alt if self.last_picture is not None else ""

    @property
    def last_pixels(self) -> Pixels | None:
        """The figure's pixels (uint8 H x W x 3): the static picture is painted from them."""
        return self.last_picture.pixels if self.last_picture is not None else None

    @property
    def spec(self) -> PrimitiveSpec:
        """The :class:`~collnb.collectives.PrimitiveSpec` of the primitive shown."""
        return collectives.SPECS[self.state.primitive]

    # a method (the explorer's values as a dict, since its first release), where the binder has a property
    def params(self) -> RunValues:  # type: ignore[override]
        """The current values: ``{"primitive", "world_size", "dtype", "op", "root", "backend",
        "chunk_size", "inputs"}`` (``dtype``/``op``/``root`` are ``None`` where the primitive takes
        none): :meth:`ExplorerParams.as_dict <collnb.views.controls.ExplorerParams.as_dict>` of
        :attr:`state`."""
        return self.state.as_dict()

    def __repr__(self) -> str:
        p = self.params()
        return (f"Explorer({p['primitive']}, world_size={p['world_size']}, dtype={p['dtype']}, "
                f"op={p['op']}, root={p['root']}, backend={p['backend']}, runs={self.runs_finished})")


def explore(primitive: str | Sequence[str] = "all_reduce", *, world_size: int = 4, dtype: str | TorchDtype = "float32",
            op: str | ReduceOp | ReduceOp.RedOpType = "sum", root: int = 0, backend: str = "gloo",
            chunk_size: int = 1, inputs: str = "teaching", dpi: float = 80, wait: bool = True,
            **launch_kwargs: Unpack[LaunchOptions]) -> Explorer:
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
    return Explorer(primitive, world_size=world_size, dtype=dtype, op=op, root=root, backend=backend,
                    chunk_size=chunk_size, inputs=inputs, dpi=dpi, wait=wait, **launch_kwargs)
