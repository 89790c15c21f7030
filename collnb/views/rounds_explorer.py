"""The rounds explorer: pick a primitive, an algorithm and the world size; the algorithm runs on real
ranks (:func:`collnb.algorithms.run_algorithm`) and its replay appears below.

Runs go through the views' shared :class:`~collnb.views.worker.LatestWorker`, as the primitive
explorer's do: a control change returns at once (the kernel stays responsive), a drag runs at most
one stale request and then the latest values, and a result that newer values already replace is
not shown.
"""

from __future__ import annotations

import html
import math
import numbers

from ..algorithms import ALGORITHMS, PRIMITIVES, prepare_case, run_algorithm
from ..i18n import _
from ..vocabulary import MAX_WORLD_SIZE, check_backend, check_choice, check_world_size
from .players import ReplayWidget
from .static import live_bundle, static_bundle
from .worker import LatestWorker, WorkerState

__all__ = ["RoundsExplorer", "explore_rounds", "rank_slider_label"]


def rank_slider_label(backend: str) -> str:
    """What the rank slider is called: on gloo a rank is a process, not a GPU, so it says
    ``"ranks (world size)"``; on NCCL, one rank per GPU, ``"GPUs (world size)"``."""
    return _("GPUs (world size)") if backend == "nccl" else _("ranks (world size)")


class RoundsExplorer(WorkerState):
    """The "choose a primitive and the world size, then play" page (see :func:`explore_rounds`).

    Attributes:
        primitive, algorithm: ``ipywidgets.Dropdown``; ``world_size``: ``ipywidgets.IntSlider``
        (:func:`rank_slider_label`; each one a real rank); ``status``: ``ipywidgets.HTML``;
        ``player``: the current :class:`~collnb.views.players.ReplayWidget` (None until a run
        succeeded); ``trace``: its trace; ``widget``: the VBox to display.
        runs_started, runs_finished: how many runs began / ended (int).
    """

    def __init__(self, primitive="all_reduce", algorithm=None, world_size=4, dtype="float32", backend="gloo",
                 timeout=60.0, wait: bool = True):
        import ipywidgets as w
        self._dtype, self._backend, self._timeout = dtype, backend, timeout
        self.primitive = w.Dropdown(options=list(PRIMITIVES), value=primitive, description=_("primitive"))
        algs = list(ALGORITHMS[primitive])
        self.algorithm = w.Dropdown(options=algs, value=algorithm or algs[0], description=_("algorithm"))
        from .binder import slider_layout  # noqa: PLC0415 - ipywidgets only where a widget is made
        self.world_size = w.IntSlider(value=world_size, min=1, max=MAX_WORLD_SIZE,
                                      description=rank_slider_label(backend),
                                      continuous_update=False, style={"description_width": "initial"},
                                      layout=slider_layout(rank_slider_label(backend)))
        self.status = w.HTML()
        self.area = w.VBox()
        self.player = None
        self.trace = None
        self._busy = False
        self._display_ids: list = []
        self._worker = LatestWorker(self._execute, "collnb-rounds", on_error=self._show_error)
        self.primitive.observe(self._on_primitive, names="value")
        self.algorithm.observe(self._rerun, names="value")
        self.world_size.observe(self._rerun, names="value")
        self.widget = w.VBox([w.HBox([self.primitive, self.algorithm, self.world_size],
                                     layout=w.Layout(flex_flow="row wrap", align_items="center")),
                              self.status, self.area])
        self.widget.add_class("collnb-rounds-explorer")
        self.widget.add_class("collnb-live")
        self.run()
        if wait:
            self.wait()

    def _on_primitive(self, change):
        algs = list(ALGORITHMS[change["new"]])
        self._busy = True
        try:
            self.algorithm.options = algs
            self.algorithm.value = algs[0]
        finally:
            self._busy = False
        self.run()

    def _rerun(self, change):
        if not self._busy:
            self.run()

    def run(self) -> None:
        """Ask for a run of the chosen algorithm on real ranks; returns at once. The replay appears
        when the run ends (errors go to ``status``); :meth:`wait` blocks until then."""
        p, a, n = self.primitive.value, self.algorithm.value, int(self.world_size.value)
        self.status.value = html.escape(_("running {primitive} / {algorithm} on {n} real rank(s)…").format(
            primitive=p, algorithm=a, n=n))
        self._worker.submit((p, a, n))

    def wait(self, timeout: float = 120.0) -> "RoundsExplorer":
        """Block until no run is in flight or waiting.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        self._worker.wait(timeout)
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Drop a waiting run and wait for the one in flight; the widgets stay on the page."""
        self._worker.close(timeout)

    def _show_error(self, exc, request):
        if self._worker.stale():
            return
        text = str(exc).splitlines()[0] if str(exc) else ""
        self.status.value = (f"<span style='color:#C0392B'><b>{type(exc).__name__}</b>: "
                             f"{html.escape(text)}</span>")

    def _execute(self, request):
        p, a, n = request
        tr = run_algorithm(p, a, n, dtype=self._dtype, backend=self._backend, timeout=self._timeout)
        if self._worker.stale():  # newer values wait: their run replaces this one
            return
        player = ReplayWidget(tr)
        self.trace = tr
        self.player = player
        player._display_ids = self._display_ids  # the static picture follows the current player
        player._update_static()
        self.area.children = (player.widget,)
        p_, q_ = tr.meta.get("fold", [0, 0])
        fold = _("; {folded} rank(s) fold onto {kept} (see the fold/unfold rounds)").format(folded=q_, kept=p_) \
            if q_ else ""
        said = (_("{primitive} / {algorithm} on {n} real rank(s): {n_rounds} rounds{fold}; the result equals "
                  "torch.distributed's built-in {primitive}") if tr.matches_builtin else
                _("{primitive} / {algorithm} on {n} real rank(s): {n_rounds} rounds{fold}; the result DIFFERS from "
                  "torch.distributed's built-in {primitive}"))
        self.status.value = said.format(primitive=p, algorithm=a, n=n, n_rounds=tr.n_rounds, fold=fold)

    def _ipython_display_(self):
        from IPython.display import display
        did = f"collnb-rounds-{id(self):x}-{len(self._display_ids)}"
        self._display_ids.append(did)
        bundle = self.player.static_bundle() if self.player is not None else \
            static_bundle(None, "replay", caption=self.status.value)
        display(bundle, raw=True, display_id=did)
        display(live_bundle(self.widget, _("rounds explorer: {primitive} / {algorithm} at world size {world_size}").format(
            primitive=self.primitive.value, algorithm=self.algorithm.value, world_size=self.world_size.value)), raw=True)


def explore_rounds(primitive: str = "all_reduce", algorithm: str | None = None, world_size: int = 4,
                   dtype="float32", backend: str = "gloo", timeout: float = 60.0) -> RoundsExplorer:
    """Pick a primitive, an algorithm and the world size (the number of ranks: processes on gloo,
    GPUs on NCCL); the algorithm runs on real ranks (:func:`collnb.algorithms.run_algorithm`) and
    its replay appears below. Returns once the first replay is shown; later control changes run in
    the background (latest values win).

    Returns:
        :class:`RoundsExplorer` (displays itself in a notebook).

    Raises:
        TypeError: a primitive or algorithm that is not a name, a world size that is not an int.
        ValueError: unknown primitive, algorithm, dtype or backend, a dtype the backend refuses
            for the primitive, a world size outside 1..16, a timeout that is not a positive
            number of seconds (the words of :mod:`collnb.vocabulary`; valid choices listed).
        RuntimeError: the backend cannot run here (e.g. NCCL without GPUs).
    """
    check_choice("primitive", primitive, tuple(ALGORITHMS))
    if algorithm is not None:
        check_choice(f"algorithm for {primitive}", algorithm, tuple(ALGORITHMS[primitive]))
    check_world_size(world_size)
    check_backend(backend)
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise ValueError(f"timeout must be a positive, finite number of seconds; got {timeout!r}")
    # dtype and backend as run_algorithm checks them (on real ranks, cached), before any widget
    prepare_case(primitive, algorithm, world_size, dtype, "sum", 0, 1, None, None, False, False, backend)
    return RoundsExplorer(primitive, algorithm, world_size, dtype, backend, timeout)
