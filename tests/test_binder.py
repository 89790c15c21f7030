"""collnb.views.binder: widgets bound to a plain parameter model (a frozen dataclass, pure choices
and fix, run and draw on the latest-request-wins worker), and the redistribute explorer built on
it: its choices are pure functions of its parameters, a move redraws on real ranks."""
import dataclasses
import threading
import time

import numpy as np
import pytest

import collnb
from collnb.views import binder as B
from collnb.views.panel import READOUT_PX, SLIDER_TRACK_PX, slider_layout
from collnb.views import redistribute_explorer as E
from collnb.views.raster import Canvas


@dataclasses.dataclass(frozen=True)
class Toy:
    size: int = 2
    kind: str = "a"


def _choices(p):
    return {"size": [1, 2, 3, 4], "kind": ["a", "b"] if p.size < 3 else ["a"]}


def _fix(p):
    if p.kind not in _choices(p)["kind"]:
        return dataclasses.replace(p, kind="a"), [f"kind {p.kind} needs size < 3; showing a"]
    return p, []


class ToyModel:
    def __init__(self, delay=0.0, fail_on=None):
        self.runs, self.delay, self.fail_on = [], delay, fail_on
        self.gate = threading.Event()
        self.gate.set()

    def run(self, p):
        self.gate.wait(10)
        self.runs.append(p)
        time.sleep(self.delay)
        if p.size == self.fail_on:
            raise ValueError(f"size {p.size} fails")
        return p.size * 10

    def draw(self, result, p):
        cv = Canvas(20, 10)
        return cv.png(), f"<b>{result}</b>"


def values(w):
    """What a widget offers: its options' values (plain values, or the second of (label, value) pairs)."""
    return [o[1] if isinstance(o, tuple) else o for o in w.options]


def toy(model=None, **kw):
    model = model or ToyModel()
    return B.Binder(Toy(), _choices, _fix, model.run, model.draw, name="toy", **kw), model


def test_widgets_follow_the_model_and_a_sync_asks_for_no_run():
    b, m = toy()
    assert b.last_result == 20 and len(m.runs) == 1 and b.caption.value == "<b>20</b>"
    assert b.image.format == "png" and b.image.value[:4] == b"\x89PNG"
    assert values(b.controls["kind"]) == ["a", "b"]
    b.controls["kind"].value = "b"
    b.wait()
    assert b.params == Toy(2, "b") and len(m.runs) == 2
    b.controls["size"].value = 4           # kind "b" is not offered at size 4: fix replaces it, one run
    b.wait()
    assert b.params == Toy(4, "a") and len(m.runs) == 3 and m.runs[-1] == Toy(4, "a")
    assert values(b.controls["kind"]) == ["a"] and b.controls["kind"].value == "a"
    assert "kind b needs size &lt; 3" in b.note.value and b.notes == ["kind b needs size < 3; showing a"]
    assert set(b.last_timing) == {"run_s", "draw_s", "total_s"}
    b.close()


def test_set_changes_several_values_with_one_run_and_refuses_what_is_not_offered():
    b, m = toy()
    b.set(size=1, kind="b").wait()
    assert b.params == Toy(1, "b") and len(m.runs) == 2
    with pytest.raises(ValueError, match=r"kind='b' is not offered here; choose one of a"):
        b.set(size=3, kind="b")
    with pytest.raises(ValueError, match="unknown control"):
        b.set(colour=1)
    assert b.params == Toy(1, "b")
    b.close()


def test_the_latest_request_wins_and_an_error_keeps_the_explorer_usable():
    m = ToyModel(fail_on=3)
    b, _ = toy(m)
    m.gate.clear()                          # hold the next run so that several changes pile up
    b.set(size=1)
    time.sleep(0.2)
    for s in (2, 4, 1, 3):
        b.set(size=s)
    m.gate.set()
    b.wait()
    assert m.runs[-1] == Toy(3, "a") and len(m.runs) == 3  # the first, the one in flight, then the latest
    assert isinstance(b.error, ValueError) and "size 3 fails" in b.status.value
    b.set(size=2).wait()
    assert b.error is None and b.last_result == 20 and b.status.value == ""
    b.close()


def test_static_picture_for_saved_notebooks():
    b, _ = toy()
    bundle = b.static_bundle()
    assert "collnb-static" in bundle["text/html"] and bundle["image/png"]
    assert "Static picture of the explorer's last state" in bundle["text/plain"]
    assert "collnb-live" in b.widget._dom_classes
    # issue 34: the saved picture carries the caption of its own state, and follows each change
    # (a caption printed once above the explorer went stale at the first move)
    assert bundle["text/plain"].splitlines()[-1] == "20" and "collnb-static-caption'" in bundle["text/html"]
    b.set(size=3)
    b.wait()
    after = b.static_bundle()
    assert after["text/plain"].splitlines()[-1] == "30" and ">30</div>" in after["text/html"]
    b.close()


def test_a_field_named_in_sliders_is_a_selection_slider_over_its_choices():
    import ipywidgets

    b, m = toy(sliders=("size",))
    slider = b.controls["size"]
    assert isinstance(slider, ipywidgets.SelectionSlider) and isinstance(b.controls["kind"], ipywidgets.Dropdown)
    assert values(slider) == [1, 2, 3, 4] and slider.value == 2
    slider.value = 3                      # a learner drags it: one run, and kind's choices follow
    b.wait()
    assert b.last_result == 30 and m.runs[-1] == Toy(3, "a") and values(b.controls["kind"]) == ["a"]
    b.close()


class Widths(B.Binder):
    """A new explorer as the binder's docstring writes one: a class with choices, run and draw (fix
    is the binder's default), drawing pixels (the binder writes the PNG)."""

    name, what = "widths", "widths explorer"
    labels = {"size": "size of it"}
    sliders = ("size",)

    def choices(self, p):
        return _choices(p)

    def run(self, p):
        return p.size * 2

    def draw(self, result, p):
        pixels = np.full((10, 20 * result, 3), (0, 100, 200), np.uint8)
        return B.Picture(pixels=pixels, caption=f"<b>{result}</b>", alt=f"{result} units wide", status=f"drew {result}",
                         attrs={"size": p.size})


def test_a_new_explorer_is_a_small_class_and_the_binder_does_the_rest():
    import io

    from PIL import Image
    ex = Widths(Toy(kind="b"))
    try:
        assert ex.last_result == 4 and ex.state == Toy(2, "b") and ex.notes == []
        img = Image.open(io.BytesIO(ex.image.value))
        assert img.size == (80, 10) and ex.image.width == "80" and img.getpixel((3, 3)) == (0, 100, 200)
        assert ex.message == "drew 4" and "drew 4" in ex.status.value and ex.caption.value == "<b>4</b>"
        assert "4 units wide" in ex.figure_text.value and "data-size='2'" in ex.figure_text.value
        assert ex.controls["size"].description == "size of it" and ex.controls["kind"].description == "kind"
        assert {"collnb-widths", "collnb-live"} <= set(ex.widget._dom_classes)
        ex.controls["size"].value = 4          # kind b is not offered at size 4: the default fix says so
        ex.wait()
        assert ex.state == Toy(4, "a") and ex.notes == ["kind b is not offered here; showing a"]
        assert "⚠ kind b is not offered here" in ex.note.value and ex.last_result == 8
        bundle = ex.static_bundle()
        assert 'data-size="4"' in bundle["text/html"] and "8 units wide" in bundle["text/html"]
        assert bundle["text/plain"].startswith("Static picture of the widths explorer's last state")
        saved = Image.open(io.BytesIO(ex.static_png))
        assert saved.size[0] == 160 and saved.size[1] > 10   # the picture with its line above
        with pytest.raises(ValueError, match=r"size=5 is not offered here; choose one of 1, 2, 3, 4"):
            ex.set(size=5)
        assert ex.state == Toy(4, "a")
    finally:
        ex.close()
    with pytest.raises(TypeError, match=r"Binder has no run\(\)"):
        B.Binder(Toy(), _choices, _fix)


def test_params_must_be_a_dataclass_instance():
    with pytest.raises(TypeError, match="dataclass instance"):
        B.Binder({"size": 2}, _choices, _fix, print, print)


def test_the_redistribute_explorers_choices_are_pure_functions_of_its_parameters():
    p = E.RedistributeParams()
    c = E.choices(p)
    assert c["src0"] == ["S(0)", "S(1)", "R", "P", "P(max)", "P(avg)"]
    assert c["dst0"] == ["S(0)", "S(1)", "R", ("P (torch refuses)", "P")]
    one_d = E.choices(E.RedistributeParams(mesh="4", shape="8"))
    assert one_d["src0"] == ["S(0)", "R", "P", "P(max)", "P(avg)"] and one_d["src1"] == []   # no S(1), no dim 1
    ints = E.choices(E.RedistributeParams(dtype="int32"))
    assert "P(avg)" not in ints["src0"]
    held = E.choices(E.RedistributeParams(src0="P(max)"))
    assert held["src1"] == ["S(0)", "S(1)", "R", "P(max)"]                      # one Partial op per tuple
    assert held["dst0"][-1] == "P(max)"                                         # kept: no refusal
    fixed, notes = E.fix(E.RedistributeParams(shape="8", src0="S(1)"))
    assert fixed.src0 == "R" and notes == ["src dim 0 S(1) is not offered here; showing R"]
    assert E.fix(fixed)[0] == fixed                                             # idempotent
    fixed, notes = E.fix(E.RedistributeParams(mesh="8", shape="8x8", dtype="bfloat16", src0="P(avg)", dst0="R"))
    assert fixed.dtype == "float32" and "cannot hold exactly" in notes[0]


def test_explore_redistribute_redraws_on_real_ranks():
    ex = collnb.explore_redistribute(mesh="2x2", src=("S(0)", "S(0)"), dst=("R", "S(0)"))
    try:
        assert ex.last_result.ok and [c.operation for c in ex.last_result.calls[0]] == ["all_gather_into_tensor"] * 2
        assert "✓ every local shard" in ex.caption.value and ex.image.value[:4] == b"\x89PNG"
        ex.set(src0="P", src1="R", dst0="S(0)", dst1="R").wait()
        assert ex.last_result.ok and [(c.operation, c.group_ranks) for c in ex.last_result.calls[0]] == [
            ("reduce_scatter_tensor", (0, 2))]                                   # over mesh dim 0
        # (P, S(0)) -> (S(0), S(0)): mesh dim 1's rows must nest inside dim 0's after: torch gathers, then
        # reduce-scatters (measured)
        ex.set(src1="S(0)", dst1="S(0)").wait()
        assert [c.operation for c in ex.last_result.calls[0]] == ["all_gather_into_tensor", "reduce_scatter_tensor"]
        ex.controls["mesh"].value = "4"
        ex.wait()
        assert ex.last_result.mesh == (4,) and ex.controls["src1"].layout.display == "none"
        ex.set(src0="R", dst0="P").wait()
        assert ex.last_result.refused and ex.last_result.ok and "refused by torch" in ex.caption.value
        assert ex.last_timing["total_s"] > 0 and ex.runs_finished >= 4
    finally:
        ex.close()


def _sliders(widget):
    """Every slider in ``widget``'s tree (ipywidgets' Int/Float/Selection sliders)."""
    import ipywidgets

    kinds = (ipywidgets.IntSlider, ipywidgets.FloatSlider, ipywidgets.SelectionSlider)
    found = [widget] if isinstance(widget, kinds) else []
    for child in getattr(widget, "children", ()):
        found += _sliders(child)
    return found


def _track_room(slider) -> float:
    """The px a slider's layout leaves for its track: its fixed width less its label and readout."""
    width = slider.layout.width or ""
    assert width.endswith("px"), f"{slider.description!r}: width {width!r} (auto or unset collapses the track)"
    label = Canvas(1, 1).measure(slider.description, 13)[0] + 12 if slider.description else 0
    return float(width[:-2]) - label - READOUT_PX


def test_a_binder_slider_has_a_fixed_width_with_room_for_its_track():
    """Issue 34: a Binder slider laid out with width "auto" had a 0 px track in JupyterLab; now its
    width is its label's + SLIDER_TRACK_PX + the readout, however long the label."""
    for label in ("m", "a long label for the size slider"):
        b, _ = toy(sliders=("size",), labels={"size": label})
        (slider,) = _sliders(b.widget)
        assert _track_room(slider) >= SLIDER_TRACK_PX and slider.layout.max_width == "100%"
        b.close()
    with pytest.raises(ValueError, match="track_px"):
        slider_layout("m", 20)


def test_every_explorers_sliders_have_room_for_their_track():
    """Issue 34: every slider of every explorer and player (pipeline, DDP buckets, the primitive
    explorer, the round-by-round explorer, the replay, the comparison) has a fixed px width leaving
    SLIDER_TRACK_PX for its track (tests/test_browser.py measures the tracks in Chromium)."""
    from collnb.labs import overlap, parallel
    from collnb.views.replay import compare, explore_rounds

    tr = collnb.run_algorithm("all_reduce", "ring", 2)
    panels = {"pipeline": parallel.explore_schedules(2, m=2, schedule="gpipe", forward_ms=1, backward_ms=2),
              "buckets": overlap.explore_buckets(8.0),
              "explore": collnb.explore("broadcast", world_size=2),
              "rounds": explore_rounds("all_gather", "ring", world_size=2),
              "replay": collnb.replay(tr),
              "compare": compare(tr, collnb.run_algorithm("all_reduce", "recursive_doubling", 2))}
    try:
        for name, panel in panels.items():
            sliders = _sliders(panel.widget)
            if name == "rounds":
                sliders += _sliders(panel.player.widget)
            assert sliders, name
            for s in sliders:
                assert _track_room(s) >= SLIDER_TRACK_PX, (name, s.description, s.layout.width)
    finally:
        for panel in panels.values():
            close = getattr(panel, "close", None)
            if close:
                close()
