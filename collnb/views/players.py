"""The replay players: :class:`ReplayWidget` (Play, a round slider, step buttons and a speed slider
over the frames of one trace) and :class:`CompareWidget` (two traces under one round slider, the
comparison chart above them). Both show a static picture of the current frame in saved notebooks
(:mod:`collnb.views.static`). Moving through rounds only draws (no ranks run), so the players
update in the widget callback.
"""

from __future__ import annotations

import html
import io
from typing import TYPE_CHECKING, Callable, Mapping

from ..algorithms import CostModel, Trace
from ..i18n import _
from ..units import format_bytes
from .comparison import compare_figure
from .frames import FrameData, FrameRenderer
from .static import MimeBundle, captioned_png, live_bundle, rerun_line, stack_pngs, static_bundle, update_static

if TYPE_CHECKING:  # ipywidgets is imported where a player is made
    import ipywidgets

__all__ = ["ReplayWidget", "CompareWidget", "SPEED_RANGE"]

SPEED_RANGE = (0.25, 8.0)  #: the replay's rounds-per-second slider


def _transfers_html(data: FrameData, limit: int = 24) -> str:
    ts = data["transfers"]
    if not ts:
        return "<i>" + html.escape(_("no messages: this is the state before the first round")) + "</i>"
    lines = []
    for t in ts[:limit]:
        ch = ",".join(str(c) for c in t["chunks"])
        dch = ",".join(str(c) for c in t["dst_chunks"])
        where = _("chunk {chunk}").format(chunk=ch) if ch == dch else \
            _("chunk {chunk} → chunk {dst_chunk}").format(chunk=ch, dst_chunk=dch)
        said = (_("rank {src} → rank {dst}: {where} ({nbytes}; rank {dst} combines)") if t["reduce"] else
                _("rank {src} → rank {dst}: {where} ({nbytes}; rank {dst} overwrites)"))
        lines.append(said.format(src=t["src"], dst=t["dst"], where=where, nbytes=format_bytes(t["nbytes"])))
    more = "<br>" + html.escape(_("… and {n} more").format(n=len(ts) - limit)) if len(ts) > limit else ""
    return "<code style='font-size:12px'>" + "<br>".join(html.escape(x) for x in lines) + "</code>" + more


_Buttons = tuple["ipywidgets.Button", "ipywidgets.Button", "ipywidgets.Button", "ipywidgets.Button"]


def _step_buttons(slider: ipywidgets.IntSlider, first_tip: str, last_tip: str) -> _Buttons:
    """The ``|◀``, ``◀ step``, ``step ▶``, ``▶|`` buttons of a player: each moves ``slider``
    (0..``slider.max``) to round 0, one round back, one round on, or the last round. Each has a
    tooltip and the CSS classes ``collnb-step`` and ``collnb-step-NAME`` (first/back/forward/last).
    """
    import ipywidgets as w  # noqa: PLC0415 - see TYPE_CHECKING above

    bl, sl = w.Layout(width="44px"), w.Layout(width="68px")
    buttons = (w.Button(description="|◀", tooltip=first_tip, layout=bl),
               w.Button(description=_("◀ step"), tooltip=_("step back one round"), layout=sl),
               w.Button(description=_("step ▶"), tooltip=_("step forward one round"), layout=sl),
               w.Button(description="▶|", tooltip=last_tip, layout=bl))
    moves: tuple[Callable[[int], int], ...] = (lambda k: 0, lambda k: k - 1, lambda k: k + 1, lambda k: slider.max)
    for b, name, move in zip(buttons, ("first", "back", "forward", "last"), moves):
        b.add_class("collnb-step")
        b.add_class(f"collnb-step-{name}")
        b.on_click(_mover(slider, move))
    return buttons


def _mover(slider: ipywidgets.IntSlider, move: Callable[[int], int]) -> Callable[[ipywidgets.Button], None]:
    """A button's click: ``slider`` to ``move(its value)``, kept within 0..``slider.max``."""
    def click(_button: ipywidgets.Button) -> None:
        slider.value = min(max(move(slider.value), 0), slider.max)
    return click


def _enable_steps(buttons: _Buttons, k: int, last: int) -> None:
    """Disable the step buttons that cannot move from round ``k`` (of 0..``last``)."""
    first, back, forward, end = buttons
    first.disabled = back.disabled = k <= 0
    forward.disabled = end.disabled = k >= last


class ReplayWidget:
    """The replay player for one trace (see :func:`replay`).

    Attributes:
        trace: the trace. renderer: its :class:`FrameRenderer`.
        play: ``ipywidgets.Play`` (``interval`` in ms per round).
        slider: ``ipywidgets.IntSlider`` (the round shown; jslink'd to ``play``; focused, the
            ← / → keys step it round by round, Home / End jump to the ends).
        first, back, forward, last: ``ipywidgets.Button`` ``"|◀"``, ``"◀ step"``, ``"step ▶"``, ``"▶|"`` (round 0, one round back,
            one round on, the last round), each with a tooltip; disabled where they cannot move.
        speed: ``ipywidgets.FloatSlider`` (rounds per second while playing; sets ``play.interval``);
            ``speed_unit`` its "rounds/s" label, ``speed_box`` the two together (they wrap as one).
        image: ``ipywidgets.Image`` (PNG of the current frame).
        info: ``ipywidgets.HTML`` (this round's caption and transfers).
        widget: the ``ipywidgets.VBox`` to display.
        current_round: the round shown now (int); ``current_data`` its :meth:`FrameRenderer.data`.
        display_ids: the IPython display ids whose static picture follows the round shown (its own
            displays; an explorer showing the player hands it its own list).

    Displayed in a notebook, it also shows a static picture of the current frame (kept current,
    hidden while the player is live) so that a saved notebook shows the replay without a kernel
    (see :func:`collnb.views.static.static_bundle`).
    """

    def __init__(self, trace: Trace, model: CostModel | None = None, cell: int | None = None,
                 speed: float = 1.5) -> None:
        import ipywidgets as w  # noqa: PLC0415 - see TYPE_CHECKING above

        from .panel import slider_layout  # noqa: PLC0415 - ipywidgets only where a widget is made
        if not trace.has_snapshots:
            raise ValueError(_("this trace has no per-round snapshots (recorded with snapshots=False); run it "
                               "with snapshots=True to replay it"))
        self.trace = trace
        self.renderer = FrameRenderer(trace, model=model, cell=cell)
        self.display_ids: list[str] = []
        R = trace.n_rounds
        self.play = w.Play(value=0, min=0, max=max(R, 0), step=1, interval=int(1000 / speed),
                           description=_("play"), show_repeat=True,
                           tooltip=_("play / pause the rounds at the speed set on the right"))
        self.slider = w.IntSlider(value=0, min=0, max=max(R, 0), step=1, description=_("round"),
                                  continuous_update=True, style={"description_width": "initial"},
                                  layout=slider_layout(_("round")),
                                  tooltip=_("drag, or click it and press ← / → to step round by round"))
        self.first, self.back, self.forward, self.last = _step_buttons(
            self.slider, _("first: round 0, before any message"), _("last: round {round}, the result").format(round=R))
        self.speed = w.FloatSlider(value=speed, min=SPEED_RANGE[0], max=SPEED_RANGE[1], step=0.25,
                                   description=_("speed"), readout_format=".2f",
                                   tooltip=_("rounds per second while playing"),
                                   style={"description_width": "initial"}, layout=slider_layout(_("speed")))
        self.speed_unit = w.Label(_("rounds/s"), layout=w.Layout(width="auto", margin="0 0 0 2px"))
        self.speed_unit.add_class("collnb-speed-unit")
        self.link = w.jslink((self.play, "value"), (self.slider, "value"))
        W, H = self.renderer.size
        # shown 1:1 (the browser would otherwise stretch it to the output's width, blurring it)
        self.image = w.Image(format="png", value=self.renderer.png(0),
                             layout=w.Layout(width=f"{W}px", max_width="100%", height="auto"))
        self.info = w.HTML()
        self.info.add_class("collnb-replay-info")
        self.current_round = 0
        self.current_data = self.renderer.data(0)
        self.slider.observe(self._on_round, names="value")
        self.play.observe(self._on_play, names="value")
        self.speed.observe(self._on_speed, names="value")
        self._show(0)
        # the speed and its unit move to the next line together, never apart (issue 19: "rounds/s"
        # wrapped onto a line of its own in a 1400 px window)
        self.speed_box = w.HBox([self.speed, self.speed_unit],
                                layout=w.Layout(flex_flow="row nowrap", align_items="center", width="auto"))
        self.speed_box.add_class("collnb-speed")
        controls = w.HBox([self.first, self.back, self.play, self.forward, self.last, self.slider, self.speed_box],
                          layout=w.Layout(flex_flow="row wrap", align_items="center"))
        controls.add_class("collnb-replay-controls")
        self.widget = w.VBox([controls, self.image, self.info])
        self.widget.add_class("collnb-replay")
        self.widget.add_class("collnb-live")  # hides the static picture while the player is live

    def _on_play(self, change: Mapping[str, int]) -> None:
        # jslink keeps them in step in the browser; without a front end (tests, voila export)
        # mirror it here so the Python side agrees.
        if self.slider.value != change["new"]:
            self.slider.value = change["new"]

    def _on_speed(self, change: Mapping[str, float]) -> None:
        self.play.interval = int(1000 / max(0.01, float(change["new"])))

    def _on_round(self, change: Mapping[str, int]) -> None:
        self._show(int(change["new"]))

    def _show(self, k: int) -> None:
        self.current_round = k
        self.current_data = self.renderer.data(k)
        self.image.value = self.renderer.png(k)
        d = self.current_data
        R = d["n_rounds"]
        if k == 0:
            head = _("<b>start</b> (round 0 of {n_rounds}): every rank's buffer before any message").format(n_rounds=R)
        else:
            head = (_("<b>round {round}/{n_rounds}: {label}</b>").format(round=k, n_rounds=R, label=d["label"])
                    + (f" — {d['detail']}" if d["detail"] else ""))
        self.info.value = f"<div style='line-height:1.45'>{head}<br>{_transfers_html(d)}</div>"
        if hasattr(self, "first"):
            _enable_steps((self.first, self.back, self.forward, self.last), k, R)
        self._update_static()

    def step(self, n: int = 1) -> int:
        """Move ``n`` rounds on (negative: back), staying within 0..n_rounds; returns the round."""
        self.show_round(min(max(self.current_round + int(n), 0), self.trace.n_rounds))
        return self.current_round

    def show_round(self, k: int) -> None:
        """Move the player to round ``k`` (as dragging the slider does)."""
        self.slider.value = int(k)

    # -- saved notebooks -----------------------------------------------------------------------
    def static_bundle(self) -> MimeBundle:
        """The current frame as a static display bundle (see :func:`collnb.views.static.static_bundle`)."""
        k = self.current_round
        png = self.renderer.png(k)
        t = self.trace
        return static_bundle(png, "replay", alt=_("{primitive} / {algorithm} at world size {world_size}, "
                                                  "round {round} of {n_rounds}").format(
                                 primitive=t.primitive, algorithm=t.algorithm, world_size=t.world_size, round=k,
                                 n_rounds=t.n_rounds),
                             png_with_line=captioned_png(png, rerun_line("replay")),
                             attrs=dict(round=k, n_rounds=t.n_rounds, world_size=t.world_size))

    def _update_static(self) -> None:
        update_static(self.display_ids, self.static_bundle)

    def _ipython_display_(self) -> None:
        from IPython.display import display  # noqa: PLC0415
        did = f"collnb-replay-{id(self):x}-{len(self.display_ids)}"
        self.display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        t = self.trace
        display(live_bundle(self.widget, _("replay of {primitive} / {algorithm} at world size {world_size}").format(
            primitive=t.primitive, algorithm=t.algorithm, world_size=t.world_size)), raw=True)



class CompareWidget:
    """Two replays under one round slider (see :func:`compare`), stacked: each as large and
    readable as a single :func:`replay`, the summary figure above them.

    Attributes:
        left, right: :class:`FrameRenderer` of the two traces (``left`` drawn first, on top).
        slider: ``ipywidgets.IntSlider`` (0..max rounds; a trace with fewer rounds stays on its
            last).
        play: ``ipywidgets.Play``.
        first, back, forward, last: step buttons as in :class:`ReplayWidget`.
        images: the two ``ipywidgets.Image``.
        summary: ``ipywidgets.Image`` of :func:`compare_figure`.
        widget: the VBox.
    """

    def __init__(self, a: Trace, b: Trace, model: CostModel | None = None) -> None:
        import ipywidgets as w  # noqa: PLC0415 - see TYPE_CHECKING above

        from .panel import slider_layout  # noqa: PLC0415 - ipywidgets only where a widget is made
        for t in (a, b):
            if not t.has_snapshots:
                raise ValueError(_("both traces need snapshots (run with snapshots=True)"))
        buf = io.BytesIO()
        compare_figure(a, b, model).savefig(buf, format="png")
        self.left = FrameRenderer(a, model)
        self.right = FrameRenderer(b, model)
        R = max(a.n_rounds, b.n_rounds)
        self.display_ids: list[str] = []
        self.play = w.Play(value=0, min=0, max=R, interval=700, description=_("play"),
                           tooltip=_("play / pause both replays"))
        self.slider = w.IntSlider(value=0, min=0, max=R, description=_("round"), layout=slider_layout(_("round")),
                                  style={"description_width": "initial"},
                                  tooltip=_("drag, or click it and press ← / → to step round by round"))
        self.first, self.back, self.forward, self.last = _step_buttons(
            self.slider, _("first: round 0"), _("last: round {round}").format(round=R))
        self.link = w.jslink((self.play, "value"), (self.slider, "value"))
        self.images = (self._frame_image(self.left), self._frame_image(self.right))
        self.captions = (w.HTML(), w.HTML())
        self.summary = w.Image(format="png", value=buf.getvalue())
        self.slider.observe(self._on_round, names="value")
        self.play.observe(self._on_play, names="value")
        self._caption(0)
        controls = w.HBox([self.first, self.back, self.play, self.forward, self.last, self.slider],
                          layout=w.Layout(flex_flow="row wrap", align_items="center"))
        self.widget = w.VBox([self.summary, controls, self.captions[0], self.images[0],
                              self.captions[1], self.images[1]])
        self.widget.add_class("collnb-compare")
        self.widget.add_class("collnb-live")

    @staticmethod
    def _frame_image(ren: FrameRenderer) -> ipywidgets.Image:
        """The Image of one side's frames, shown 1:1 (at most the output's width), round 0 first."""
        import ipywidgets as w  # noqa: PLC0415

        return w.Image(format="png", value=ren.png(0),
                       layout=w.Layout(width=f"{ren.size[0]}px", max_width="100%", height="auto"))

    def _on_play(self, change: Mapping[str, int]) -> None:
        self.slider.value = change["new"]

    def rounds_shown(self, k: int) -> tuple[int, int]:
        """The round each side shows when the slider is at ``k``."""
        return min(k, self.left.trace.n_rounds), min(k, self.right.trace.n_rounds)

    def _caption(self, k: int) -> None:
        for cap, ren, kk in zip(self.captions, (self.left, self.right), self.rounds_shown(k)):
            t = ren.trace
            stay = _(" (finished: stays on its last round)") if k > t.n_rounds else ""
            cap.value = (f"<b style='font-size:115%'>{t.algorithm}</b>: "
                         + _("round {round} of {n_rounds}").format(round=kk, n_rounds=t.n_rounds) + stay)

    def _on_round(self, change: Mapping[str, int]) -> None:
        k = int(change["new"])
        ka, kb = self.rounds_shown(k)
        self.images[0].value = self.left.png(ka)
        self.images[1].value = self.right.png(kb)
        self._caption(k)
        _enable_steps((self.first, self.back, self.forward, self.last), k, self.slider.max)
        update_static(self.display_ids, self.static_bundle)

    def static_bundle(self) -> MimeBundle:
        """The summary and both current frames as one static picture (see
        :func:`collnb.views.static.static_bundle`)."""
        png = stack_pngs([self.summary.value, self.images[0].value, self.images[1].value])
        return static_bundle(png, "comparison", alt=_("{left} vs {right}").format(
                                 left=self.left.trace.algorithm, right=self.right.trace.algorithm),
                             png_with_line=captioned_png(png, rerun_line("comparison")),
                             attrs=dict(round=self.slider.value))

    def _ipython_display_(self) -> None:
        from IPython.display import display  # noqa: PLC0415
        did = f"collnb-compare-{id(self):x}-{len(self.display_ids)}"
        self.display_ids.append(did)
        display(self.static_bundle(), raw=True, display_id=did)
        display(live_bundle(self.widget, _("comparison of {left} and {right}").format(
            left=self.left.trace.algorithm, right=self.right.trace.algorithm)), raw=True)

