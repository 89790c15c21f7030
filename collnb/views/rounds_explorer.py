"""The rounds explorer: pick a primitive, an algorithm and the world size; the algorithm runs on real
ranks (:func:`collnb.algorithms.run_algorithm`) and its replay appears below.

A :class:`~collnb.views.binder.Binder` (the views' one explorer engine) whose picture is a player
(:class:`~collnb.views.players.ReplayWidget`): a control change returns at once (the kernel stays
responsive), a drag runs at most one stale request and then the latest values, and a result that
newer values already replace is not shown; the saved picture follows the player's round.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Mapping

import ipywidgets as widgets

from ..algorithms import ALGORITHMS, PRIMITIVES, Trace, prepare_case, run_algorithm
from ..i18n import N_, _
from ..vocabulary import MAX_WORLD_SIZE, check_backend, check_choice, check_world_size
from .binder import Binder, Fixed, Picture
from .panel import Control, slider_layout
from .players import ReplayWidget

__all__ = ["RoundsExplorer", "RoundsParams", "explore_rounds", "rank_slider_label"]


def rank_slider_label(backend: str) -> str:
    """What the rank slider is called: on gloo a rank is a process, not a GPU, so it says
    ``"ranks (world size)"``; on NCCL, one rank per GPU, ``"GPUs (world size)"``."""
    return _("GPUs (world size)") if backend == "nccl" else _("ranks (world size)")


@dataclass(frozen=True)
class RoundsParams:
    """The rounds explorer's state: the primitive, its algorithm (a key of
    :data:`collnb.algorithms.ALGORITHMS`) and the world size."""

    primitive: str = "all_reduce"
    algorithm: str = "ring"
    world_size: int = 4


class RoundsExplorer(Binder[RoundsParams, Trace]):
    """The "choose a primitive and the world size, then play" page (see :func:`explore_rounds`).

    Attributes:
        primitive, algorithm: ``ipywidgets.Dropdown``; ``world_size``: ``ipywidgets.IntSlider``
        (:func:`rank_slider_label`; each one a real rank): :attr:`controls` by name.
        player: the current :class:`~collnb.views.players.ReplayWidget` (None until a run
        succeeded); ``trace``: its trace; ``status``, ``widget``, ``runs_started``...: the binder's.
    """

    name = "rounds-explorer"
    what = "replay"
    labels = {"primitive": N_("primitive"), "algorithm": N_("algorithm")}

    def __init__(self, primitive: str = "all_reduce", algorithm: str | None = None, world_size: int = 4,
                 dtype: str = "float32", backend: str = "gloo", timeout: float = 60.0, wait: bool = True) -> None:
        self._dtype, self._backend, self._timeout = dtype, backend, timeout
        super().__init__(RoundsParams(primitive, algorithm or next(iter(ALGORITHMS[primitive])), world_size), wait=wait)

    # -- the model ---------------------------------------------------------------------------
    def choices(self, p: RoundsParams) -> Mapping[str, list[object]]:
        return {"primitive": list(PRIMITIVES), "algorithm": list(ALGORITHMS[p.primitive]),
                "world_size": list(range(1, MAX_WORLD_SIZE + 1))}

    def change(self, p: RoundsParams, values: Mapping[str, object]) -> Fixed[RoundsParams]:
        """A new primitive starts at its first algorithm (unless one is given with it)."""
        q = replace(p, **values)  # type: ignore[arg-type]  # a learner's values: fix below checks them
        if "primitive" in values and "algorithm" not in values:
            q = replace(q, algorithm=next(iter(ALGORITHMS[q.primitive])))
        return self.fix(q)

    def run(self, p: RoundsParams) -> Trace:
        trace: Trace = run_algorithm(p.primitive, p.algorithm, p.world_size, dtype=self._dtype, backend=self._backend,
                                     timeout=self._timeout)
        return trace

    def draw(self, tr: Trace, p: RoundsParams) -> Picture:
        """The replay of trace ``tr`` in a player, and the line saying whether it equals torch's own."""
        folded, kept = tr.meta.get("fold", [0, 0])[::-1]
        fold = _("; {folded} rank(s) fold onto {kept} (see the fold/unfold rounds)").format(
            folded=folded, kept=kept) if folded else ""
        said = (_("{primitive} / {algorithm} on {n} real rank(s): {n_rounds} rounds{fold}; the result equals "
                  "torch.distributed's built-in {primitive}") if tr.matches_builtin else
                _("{primitive} / {algorithm} on {n} real rank(s): {n_rounds} rounds{fold}; the result DIFFERS from "
                  "torch.distributed's built-in {primitive}"))
        return Picture(player=ReplayWidget(tr), ok=bool(tr.matches_builtin), status=said.format(
            primitive=p.primitive, algorithm=p.algorithm, n=p.world_size, n_rounds=tr.n_rounds, fold=fold))

    # -- the panel ---------------------------------------------------------------------------
    def control(self, name: str, label: str, offered: list[object], value: object) -> Control:
        if name == "world_size":
            assert isinstance(value, int)  # RoundsParams.world_size
            label = rank_slider_label(self._backend)
            return widgets.IntSlider(value=value, min=1, max=MAX_WORLD_SIZE, description=label,
                                     continuous_update=False, style={"description_width": "initial"},
                                     layout=slider_layout(label))
        return super().control(name, label, offered, value)

    def busy_text(self, p: RoundsParams) -> str:
        return _("running {primitive} / {algorithm} on {n} real rank(s)…").format(
            primitive=p.primitive, algorithm=p.algorithm, n=p.world_size)

    @property
    def primitive(self) -> Control:
        """The primitive's ``Dropdown``."""
        return self.controls["primitive"]

    @property
    def algorithm(self) -> Control:
        """The algorithm's ``Dropdown``."""
        return self.controls["algorithm"]

    @property
    def world_size(self) -> Control:
        """The world size's ``IntSlider``."""
        return self.controls["world_size"]

    @property
    def player(self) -> ReplayWidget | None:
        """The replay shown (``None`` until a run succeeded)."""
        player = self.last_picture.player if self.last_picture is not None else None
        return player if isinstance(player, ReplayWidget) else None

    @property
    def trace(self) -> Trace | None:
        """The trace of the replay shown."""
        return self.last_result

    def __repr__(self) -> str:
        p = self.state
        return _("rounds explorer: {primitive} / {algorithm} at world size {world_size}").format(
            primitive=p.primitive, algorithm=p.algorithm, world_size=p.world_size)


def explore_rounds(primitive: str = "all_reduce", algorithm: str | None = None, world_size: int = 4,
                   dtype: str = "float32", backend: str = "gloo", timeout: float = 60.0) -> RoundsExplorer:
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
    prepare_case(primitive, algorithm, world_size, dtype, None, None, 1, None, None, False, False, backend)
    return RoundsExplorer(primitive, algorithm, world_size, dtype, backend, timeout)
