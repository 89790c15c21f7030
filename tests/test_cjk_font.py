"""Chinese text in collnb's pictures: drawn with a real CJK font (no tofu boxes), measured with the
same font, English pictures untouched, and a clear error naming what to install when no CJK font
exists (collnb.views.raster)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from collnb.views import raster
from collnb.views.raster import Canvas

TITLE = "全规约 第 2 轮"
INSTALL = "apt-get install fonts-noto-cjk"


@pytest.fixture(autouse=True)
def _fresh_font_lookup():
    raster.cjk_font_file.cache_clear()
    raster.cjk_font.cache_clear()
    raster._masks.clear()
    yield
    raster.cjk_font_file.cache_clear()
    raster.cjk_font.cache_clear()
    raster._masks.clear()


def _cjk_font_or_fail(style="regular"):
    """The CJK font, or a failure (not a skip) saying what to install."""
    try:
        return raster.cjk_font(40, style)
    except raster.CjkFontMissing as e:
        pytest.fail(f"no CJK font on this machine ({INSTALL}; .ci/run installs it): {e}")


def _ink(text, size=40, style="regular"):
    cv = Canvas(400, 80)
    cv.text(text, 200, 40, size, (0, 0, 0), style)
    a = np.asarray(cv.image.convert("L"))
    ys, xs = np.nonzero(a < 128)
    return a[ys.min():ys.max() + 1, xs.min():xs.max() + 1] if len(xs) else a[:0, :0]


@pytest.mark.parametrize("style", ["regular", "bold", "mono", "italic"])
def test_the_cjk_font_has_the_glyphs_of_a_chinese_title(style):
    f = _cjk_font_or_fail(style)
    for ch in "全规约第轮：，":
        x0, y0, x1, y1 = f.getmask(ch).getbbox() or (0, 0, 0, 0)
        assert x1 - x0 > 5 and y1 - y0 > 5, f"{ch!r} has no ink in {f.getname()}"
    # the face is the Simplified Chinese one: 规 and 约 are simplified forms (its TC face draws them
    # too, so the family name is the check)
    assert "SC" in " ".join(f.getname()) or "sc" in raster.cjk_font_file(style)[0].lower(), f.getname()


def test_a_chinese_title_is_not_tofu():
    _cjk_font_or_fail()
    # tofu boxes are all the same picture; real glyphs of different characters differ
    inks = {ch: _ink(ch) for ch in "全规约轮"}
    for a in inks:
        for b in inks:
            if a < b:
                same_shape = inks[a].shape == inks[b].shape and np.array_equal(inks[a], inks[b])
                assert not same_shape, f"{a!r} and {b!r} render identically (tofu?)"
    # DejaVu has no glyph for them: what it would draw is the same box for both (so the check above
    # can fail), and it is not what the canvas drew
    dv = raster.font(40)
    box_a, box_b = np.asarray(dv.getmask("全")), np.asarray(dv.getmask("规"))
    assert np.array_equal(box_a, box_b)
    whole = _ink(TITLE)
    assert whole.shape[1] > 150  # six wide glyphs, two spaces and a digit at 40 px


def test_chinese_text_is_measured_with_the_font_it_is_drawn_with():
    f = _cjk_font_or_fail()
    cv = Canvas(10, 10)
    w, h = cv.measure(TITLE, 40)
    x0, y0, x1, y1 = f.getbbox(TITLE, anchor="ls")
    assert (w, h) == (x1 - x0, y1 - y0)
    # an ideograph is about one em wide: far wider than DejaVu's box
    assert cv.measure("全", 40)[0] > 30
    # text painted at the left of a label and measured: the ink ends where measure says
    painted = cv.text(TITLE, 0, 5, 40, ha="left")
    assert painted == w


def test_english_text_keeps_dejavu():
    cv = Canvas(10, 10)
    x0, y0, x1, y1 = raster.font(20).getbbox("rank 2 before", anchor="ls")
    assert cv.measure("rank 2 before", 20) == (x1 - x0, y1 - y0)
    assert not raster.has_cjk("rank 2 before ✓ ✗ … α-β ≥")
    assert raster.has_cjk("第 2 轮") and raster.has_cjk("结果：")


def test_no_cjk_font_is_a_clear_error_naming_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(raster, "_NOTO_CJK", {"regular": str(tmp_path / "none.ttc"),
                                              "bold": str(tmp_path / "none-bold.ttc")})
    monkeypatch.setattr(raster, "_fc_match", lambda style: None)
    monkeypatch.setattr(raster.importlib.util, "find_spec", lambda name: None)
    monkeypatch.delenv(raster.CJK_FONT_ENV, raising=False)
    with pytest.raises(raster.CjkFontMissing, match=r"apt-get install fonts-noto-cjk.*apt\.txt.*pip install mplfonts"):
        Canvas(100, 40).text("全规约", 50, 20, 20)
    # English pictures need no CJK font
    assert Canvas(100, 40).text("all_reduce", 50, 20, 20) > 0


def test_the_environment_variable_chooses_the_font(monkeypatch, tmp_path):
    path, _index = raster.cjk_font_file()
    monkeypatch.setenv(raster.CJK_FONT_ENV, path)
    raster.cjk_font_file.cache_clear()
    assert raster.cjk_font_file()[0] == path
    monkeypatch.setenv(raster.CJK_FONT_ENV, str(tmp_path / "missing.otf"))
    raster.cjk_font_file.cache_clear()
    with pytest.raises(raster.CjkFontMissing, match="COLLNB_CJK_FONT=.*missing.otf.*not a font file"):
        raster.cjk_font_file()


def test_chinese_lines_wrap_between_ideographs_and_english_at_spaces():
    cv = Canvas(10, 10)

    def measure(t):
        return cv.measure(t, 20)[0]

    text = "每个 rank 的输出：全规约之后，所有 rank 都拿到相同的求和结果"
    lines = raster.wrap_text(text, 120, measure)
    assert len(lines) > 2 and all(measure(line) <= 120 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert not any(line.startswith(("，", "：")) for line in lines)
    bracketed = raster.wrap_text("求和结果（computed without torch.distributed）", 110, measure)
    assert not any(line.endswith("（") for line in bracketed) and bracketed[-1].endswith("）"), bracketed
    english = "red outline: differs from reference (red number: the expected value)"
    got = raster.wrap_text(english, 150, measure)
    assert " ".join(got) == english and all(measure(line) <= 150 or " " not in line for line in got)


def test_matplotlib_gets_the_cjk_font_as_fallback_in_chinese():
    import collnb
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    import matplotlib

    _cjk_font_or_fail()
    assert raster.matplotlib_fonts() == ["DejaVu Sans"]
    collnb.set_language("zh")
    try:
        families = raster.matplotlib_fonts()
    finally:
        collnb.set_language("en")
    assert families[0] == "DejaVu Sans" and len(families) == 2

    def drawn(ch):
        with matplotlib.rc_context({"font.family": families}):
            fig = Figure(figsize=(1, 1), dpi=100)
            fig.text(0.5, 0.5, ch, fontsize=40, ha="center", va="center")
        FigureCanvasAgg(fig).draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., 0]

    a, b = drawn("全"), drawn("规")
    assert (a < 128).sum() > 100 and not np.array_equal(a, b)
    Image.fromarray(a)  # a real picture, not an error


def test_a_bold_chinese_title_in_a_matplotlib_figure_logs_nothing(caplog):
    """Issue 34: a replay frame's bold title in Chinese made matplotlib log "findfont: Failed to find font
    weight bold for Noto Sans CJK SC" on stderr (it knew only the regular file); the bold file is registered too."""
    import logging

    import collnb
    from collnb.algorithms import run_algorithm
    from collnb.views.frames import FrameRenderer

    collnb.set_language("zh")
    try:
        trace = run_algorithm("all_reduce", "ring", world_size=3)
        with caplog.at_level(logging.WARNING, logger="matplotlib"):
            FrameRenderer(trace).png(1)
    finally:
        collnb.set_language(None)
    assert not [r for r in caplog.records if "findfont" in r.getMessage()], [r.getMessage() for r in caplog.records]
