"""collnb.heatmap: the drawn pixels and the data behind them (not just "a file exists")."""

import io
import subprocess
import sys
import threading

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from collnb.views import heatmap as H
import collnb.collectives as P
from collnb.collectives.primitives import _finish
from collnb.views import palette as C
from collnb.views.raster import Canvas


@pytest.fixture(scope="module")
def runs():
    """One launch at world size 4 and one at 8 for every figure below."""
    r4 = P.run_batch([dict(primitive="all_reduce"), dict(primitive="reduce", root=2),
                      dict(primitive="gather", root=1), dict(primitive="scatter")], 4)
    r8 = P.run_batch([dict(primitive="all_to_all"), dict(primitive="all_reduce", dtype="int8")], 8)
    return dict(all_reduce=r4[0], reduce=r4[1], gather=r4[2], scatter=r4[3], all_to_all=r8[0],
                int8=r8[1])


def _png_pixels(result, **kw):
    return np.asarray(Image.open(io.BytesIO(H.heatmap_png(result, **kw))).convert("RGB"))


def _rgb8(color):
    return tuple(int(v * 255 + 0.5) for v in color)


def _corner(img, him, panel, r, c):
    """Colour of a cell's fill near its bottom-left inner corner (no text there)."""
    x0, y0, x1, y1 = H.cell_box(him, panel, r, c)
    return tuple(img[int(y1) - 6, int(x0) + 5])


def _band_colours(img, him, panel, r, c):
    """Distinct colours along the top band of a combined cell."""
    x0, y0, x1, y1 = H.cell_box(him, panel, r, c)
    y = int(y0) + 5
    return {tuple(img[y, x]) for x in range(int(x0) + 3, int(x1) - 3)}


def test_all_reduce_heatmap_pixels_and_data(runs):
    res = runs["all_reduce"]
    him = H.heatmap_image(res)
    img = _png_pixels(res)
    assert np.array_equal(img, him.pixels)  # the PNG is exactly the painted image
    g = him.grid
    assert g.title == "all_reduce (SUM) · world size 4 · float32 · gloo"
    assert g.call == "dist.all_reduce(tensor, op=ReduceOp.SUM)"
    assert g.before.text[2] == ["20", "21", "22", "23"]
    assert g.after.text == [["60", "64", "68", "72"]] * 4
    assert g.verdicts == ["✓"] * 4 and g.ok
    for r in range(4):
        for c in range(4):
            # before: every cell in its own rank's colour
            assert _corner(img, him, "before", r, c) == _rgb8(H.rank_color(r))
            # after: combined cells -> white body, a band holding every rank's colour
            assert _corner(img, him, "after", r, c) == _rgb8(H.COMBINED_COLOR)
            band = _band_colours(img, him, "after", r, c)
            for s in range(4):
                assert _rgb8(H.rank_color(s)) in band
    assert him.outlines == []


def test_reduce_shows_undefined_ranks_grey(runs):
    res = runs["reduce"]
    him = H.heatmap_image(res)
    img = him.pixels
    g = him.grid
    assert g.verdicts == ["undefined", "undefined", "✓", "undefined"]
    assert g.after.state[2] == ["value"] * 4 and g.after.state[0] == ["undefined"] * 4
    assert g.after.text[2] == ["60", "64", "68", "72"]
    grey = {_rgb8(H.UNDEFINED_COLOR), _rgb8(C.HATCH_COLOR)}
    for r in (0, 1, 3):
        x0, y0, x1, y1 = H.cell_box(him, "after", r, 0)
        patch = {tuple(p) for p in img[int(y1) - 8:int(y1) - 3, int(x0) + 3:int(x0) + 12].reshape(-1, 3)}
        assert patch <= grey and len(patch) == 2  # grey fill with hatch lines, no rank colour
    assert "reduce (SUM) · dst=2" in g.title


def test_gather_and_scatter_rows_without_buffers(runs):
    g = H.heatmap_grid(runs["gather"])
    assert g.after.row_note == ["no output (not dst)", "", "no output (not dst)", "no output (not dst)"]
    assert g.after.text[1] == ["0", "10", "20", "30"]
    assert [g.after.ranks[1][c] for c in range(4)] == [(0,), (1,), (2,), (3,)]
    s = H.heatmap_grid(runs["scatter"])
    assert s.before.row_note == ["", "no input (not src)", "no input (not src)", "no input (not src)"]
    assert [s.after.text[r][0] for r in range(4)] == ["0", "1", "2", "3"]
    assert all(s.after.ranks[r][0] == (0,) for r in range(4))


def test_all_to_all_colours_show_the_transpose(runs):
    res = runs["all_to_all"]
    him = H.heatmap_image(res)
    img = him.pixels
    for r in range(8):
        for c in range(8):
            assert _corner(img, him, "before", r, c) == _rgb8(H.rank_color(r))
            assert _corner(img, him, "after", r, c) == _rgb8(H.rank_color(c))  # chunk c came from rank c
            assert him.grid.after.text[r][c] == str(10 * c + r)


def test_int8_wrap_is_labelled_with_the_exact_result(runs):
    g = H.heatmap_grid(runs["int8"])
    assert g.after.text[0] == ["24", "32", "40", "48", "56", "64", "72", "80"]
    assert g.after.exact[5] == ["280", "288", "296", "304", "312", "320", "328", "336"]
    assert g.ok and any(kind == "exact" for _, kind in g.legend)


def test_wrong_cell_is_outlined_red(runs):
    res = P.RunResult(**{k: (list(v) if isinstance(v, list) else v)
                         for k, v in runs["all_reduce"].__dict__.items()})
    res.after = [t.clone() for t in res.after]
    res.after[1][2] = 99.0
    assert not res.check()
    fig = H.heatmap_figure(res)
    assert isinstance(fig, Figure)
    him = fig.collnb["image"]
    g = fig.collnb["grid"]
    assert g.after.mismatch[1] == [False, False, True, False]
    assert g.after.expected[1][2] == "68" and g.verdicts[1] == "✗" and not g.ok
    box = H.cell_box(fig, "after", 1, 2)
    assert him.outlines == [box]
    rects = [p for p in fig.collnb["ax"].patches if p.get_gid() == "mismatch"]
    assert len(rects) == 1
    rx, ry = rects[0].get_xy()
    assert box[0] <= rx <= box[0] + 4 and box[1] <= ry <= box[1] + 4
    red = _rgb8(C.hex_rgb(H.MISMATCH_COLOR))
    img = him.pixels
    x0, y0, x1, y1 = (int(v) for v in box)
    assert tuple(img[y0 + 1, (x0 + x1) // 2]) == red and tuple(img[(y0 + y1) // 2, x1 - 2]) == red
    # no other cell is outlined
    ox0, oy0, ox1, oy1 = (int(v) for v in H.cell_box(fig, "after", 0, 2))
    assert tuple(img[oy0 + 1, (ox0 + ox1) // 2]) != red
    # the Figure renders through Agg to the same picture
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    agg = np.asarray(Image.open(buf).convert("RGB"))
    assert agg.shape == img.shape
    assert np.mean(np.abs(agg.astype(int) - img.astype(int))) < 2.0


def test_drawing_is_thread_safe_and_deterministic(runs):
    res = runs["all_to_all"]
    want = H.heatmap_png(res)
    out = [None] * 6

    def work(i):
        out[i] = H.heatmap_png(res)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o == want for o in out)


def test_no_pyplot_state_and_headless():
    """The views import no matplotlib (0.65 s of a kernel's first picture); heatmap_figure imports
    it, never pyplot."""
    code = (
        "import sys, torch\n"
        "import collnb.collectives as P\nfrom collnb.collectives.primitives import _finish\nfrom collnb.views import heatmap as H\n"
        "import collnb.views\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported by importing the views'\n"
        "case = dict(primitive='all_reduce', dtype='float32', op='sum', root=0, chunk_size=1,\n"
        "            inputs=P.teaching_inputs('all_reduce', 3))\n"
        "exp = P.reference('all_reduce', 3, case['inputs'])[0]\n"
        "before = [P.make_tensor(v, 1, torch.float32) for v in case['inputs']]\n"
        "res = _finish(case, 3, 'gloo', before, exp, 0.0)\n"
        "png = H.heatmap_png(res)\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported to paint a heatmap'\n"
        "fig = H.heatmap_figure(res)\n"
        "assert res.ok and png[:4] == b'\\x89PNG'\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
        "import matplotlib; print(matplotlib.get_backend())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "agg"})
    assert out.returncode == 0, out.stderr


def test_format_value():
    assert H.format_value(-56) == "-56"
    assert H.format_value(60.0) == "60" and H.format_value(4.375) == "4.375"
    assert H.format_value(float("inf")) == "inf" and H.format_value(float("nan")) == "nan"
    assert H.format_value(12345678901) == "1.23e10"
    assert H.format_value(True) == "True" and H.format_value(2 + 0j) == "2+0j"
    assert H.format_value("r1c0") == "r1c0"
    # barrier's times are ms to 0.1; what is not a number is written as text (float() raised before)
    assert H.format_value(12.345, "time") == "12.3" and H.format_value(7, "time") == "7.0"
    assert H.format_value("late", "time") == "late"


def test_differs_exact_compares_numbers_only():
    from collnb.views.values import differs_exact
    assert differs_exact(-56, 200.0) and not differs_exact(True, 1.0) and differs_exact(False, 1.0)
    assert not differs_exact(float("nan"), float("nan")) and differs_exact(float("nan"), 1.0)
    assert differs_exact(1 + 2j, 1.0) and not differs_exact(2 + 0j, 2.0)
    assert not differs_exact(np.float32(0.5), 0.5) and differs_exact(np.int8(-56), 200.0)  # numpy scalars as numbers
    # what is not a number never differs, a str that reads as one included (float("2") made it differ)
    assert not differs_exact("2", 1.5) and not differs_exact("r1c0", "r1c1") and not differs_exact(None, 1.0)


# ----------------------------------------------------------------------------------------------
# Readability: label sizes, width, contrast, colour-blind safety (issue 10, items 1 and 7)

def _offline(primitive, ws, dtype="float32", root=0):
    """A RunResult built without ranks: the reference output as the result (fast, any world size)."""
    import torch
    spec = P.SPECS[primitive]
    inputs = P.teaching_inputs(primitive, ws, root)
    dt = getattr(torch, dtype)
    case = dict(primitive=primitive, dtype=dtype, op="sum", root=root, chunk_size=1, inputs=inputs)
    exp = P.reference(primitive, ws, inputs, dtype=dt, op="sum", root=root)[0]
    before = [P.make_tensor(v, 1, dt) for v in inputs]
    after = [e if e is not None else torch.zeros(spec.n_out(ws, r, root), dtype=dt) for r, e in enumerate(exp)]
    return _finish(case, ws, "gloo", before, after, 0.0)


def _ink_height(pixels, box, dark=80):
    """Height in pixels of the dark ink (every channel < ``dark``) inside ``box``: the painted
    height of a cell's value (fills, bands, orange and red notes are all lighter)."""
    x0, y0, x1, y1 = (int(v) for v in box)
    region = pixels[y0 + 3:y1 - 3, x0 + 3:x1 - 3]
    rows = np.flatnonzero((region.max(axis=2) < dark).any(axis=1))
    return 0 if rows.size == 0 else int(rows[-1] - rows[0] + 1)


def _reference_ink(text):
    """Ink height of ``text`` painted in bold at exactly MIN_LABEL_PX (the smallest allowed)."""
    cv = Canvas(200, 60)
    cv.text(text, 100, 30, H.MIN_LABEL_PX, C.INK, "bold")
    return _ink_height(cv.pixels(), (0, 0, 200, 60))


TENSOR_PRIMITIVES = [p for p in P.PRIMITIVES if P.SPECS[p].kind == "tensor"]


@pytest.mark.parametrize("ws", [1, 2, 3, 4, 5, 8] + [pytest.param(ws, marks=pytest.mark.slow) for ws in (11, 12, 16)])
def test_every_label_readable_and_within_the_notebook_width(ws):
    """At every world size the slider offers (samples 1..16), for every tensor primitive, int8
    (wrapping, "exact" notes) and float32, at the explorer's dpi (80) and RunResult's (100): no
    painted text below MIN_LABEL_PX, the image no wider than MAX_WIDTH_PX, and each value's ink,
    measured in the pixels, at least as tall as the same text painted at MIN_LABEL_PX."""
    assert H.MIN_LABEL_PX >= 10 and H.MAX_WIDTH_PX <= 1000
    for prim in TENSOR_PRIMITIVES:
        for dtype in ("float32", "int8"):
            res = _offline(prim, ws, dtype, root=ws - 1)
            for dpi in (80, 100):
                him = H.heatmap_image(res, dpi=dpi)
                small = [(t, s) for t, s, _ in him.labels if s < H.MIN_LABEL_PX]
                assert not small, (prim, ws, dtype, dpi, small[:3])
                assert him.pixels.shape[1] <= H.MAX_WIDTH_PX, (prim, ws, dtype, dpi, him.pixels.shape)
                if dpi != 80:
                    continue
                g = him.grid
                for panel in (g.before, g.after):
                    for r in range(ws):
                        for c in range(panel.n_cols):
                            t = panel.text[r][c]
                            if not t or panel.state[r][c] != "value" or panel.row_note[r]:
                                continue
                            got = _ink_height(him.pixels, H.cell_box(him, panel.name, r, c))
                            assert got >= _reference_ink(t) >= 7, (prim, ws, dtype, panel.name, r, c, t, got)


def test_world_size_16_stacks_and_counts_contributors():
    him = H.heatmap_image(_offline("all_reduce", 16), dpi=80)
    assert him.layout == "stacked"
    bx, by, cell = him.geometry["before"]
    ax_, ay, _ = him.geometry["after"]
    assert ax_ == bx and ay > by + 16 * cell  # after below before, same columns
    texts = [t for t, _, _ in him.labels]
    assert texts.count("all 16") == 16 * 16  # every combined cell says how many ranks, no 3 px stripes
    assert any("too many ranks for stripes" in label for label, _ in [(t, 0) for t in texts])
    # world size 8 still fits side by side, with one stripe (>= 5 px) per contributor
    him8 = H.heatmap_image(_offline("all_reduce", 8), dpi=80)
    assert him8.layout == "side by side" and "all 8" not in [t for t, _, _ in him8.labels]
    x0, y0, x1, y1 = H.cell_box(him8, "after", 0, 0)
    band = {tuple(him8.pixels[int(y0) + 4, x]) for x in range(int(x0) + 3, int(x1) - 3)}
    assert all(_rgb8(H.rank_color(s)) in band for s in range(8))


def _lab(rgb):
    c = np.asarray(rgb, dtype=np.float64)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


# Machado, Oliveira & Fernandes 2009, severity 1.0 (linear RGB)
_CVD = {"protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
        "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
        "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]}


def _simulate(rgb, kind):
    c = np.asarray(rgb, dtype=np.float64)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    out = np.clip(np.array(_CVD[kind]) @ lin, 0, 1)
    return np.where(out <= 0.0031308, 12.92 * out, 1.055 * out ** (1 / 2.4) - 0.055)


def test_contrast_ratio_matches_wcag_examples():
    assert H.contrast_ratio((0, 0, 0), (1, 1, 1)) == pytest.approx(21.0)
    assert H.contrast_ratio((1, 1, 1), (1, 1, 1)) == pytest.approx(1.0)
    # #767676 on white is the classic 4.54:1 AA boundary grey
    assert H.contrast_ratio(C.hex_rgb("#767676")) == pytest.approx(4.54, abs=0.01)


def test_rank_colours_pass_contrast_and_stay_distinct_with_colour_blindness():
    ink = C.hex_rgb("#111111")
    for r in range(16):
        assert H.contrast_ratio(H.rank_text_color(r)) >= 4.5, r        # rank label on white (AA)
        assert H.contrast_ratio(ink, H.rank_color(r)) >= 7.0, r        # black value on the rank's fill (AAA)
    # every other text colour on white (sub labels get a white backing on coloured fills)
    for name in ("INK", "EXACT_COLOR", "MISMATCH_COLOR", "OK_GREEN", "GREY_TEXT"):
        assert H.contrast_ratio(C.hex_rgb(getattr(C, name)) if isinstance(getattr(C, name), str)
                                else getattr(C, name)) >= 4.5, name
    # ranks 0-7 (Okabe-Ito hues): every pair stays apart under simulated protanopia,
    # deuteranopia and tritanopia (CIE76 distance; ~2.3 is a just-noticeable difference)
    for kind in _CVD:
        sims = [_lab(_simulate(H.rank_color(r), kind)) for r in range(8)]
        worst = min(np.linalg.norm(sims[i] - sims[j]) for i in range(8) for j in range(i + 1, 8))
        assert worst >= 8.0, (kind, worst)
    # all 16 fills are different colours for normal vision
    labs = [_lab(H.rank_color(r)) for r in range(16)]
    assert min(np.linalg.norm(labs[i] - labs[j]) for i in range(16) for j in range(i + 1, 16)) >= 6.0


def test_note_under_a_value_on_a_rank_fill_has_a_white_backing():
    """A wrong value in a copied (rank-coloured) cell: its red "expected" note sits on white."""
    res = _offline("broadcast", 4)
    res.after = [t.clone() for t in res.after]
    res.after[2][1] = 99.0
    assert not res.check()
    him = H.heatmap_image(res, dpi=80)
    x0, y0, x1, y1 = (int(v) for v in H.cell_box(him, "after", 2, 1))
    note = [b for t, _, b in him.labels if b[0] >= x0 and b[2] <= x1 and b[1] >= y0 + (y1 - y0) // 2 and b[3] <= y1]
    assert note, him.labels[-5:]
    nx0, ny0, nx1, ny1 = note[0]
    patch = him.pixels[ny0:ny1, nx0:nx1].reshape(-1, 3)
    fill = np.array(_rgb8(H.rank_color(0)))
    assert not (np.abs(patch.astype(int) - fill).max(axis=1) <= 2).any()  # no rank fill behind the text
    assert (patch == 255).all(axis=1).mean() > 0.4  # mostly white around the glyphs


@pytest.mark.parametrize("shape", [(654, 991, 3), (87, 1001, 3), (1, 9000, 3), (10, 10, 3)])
def test_a_png_is_the_picture_with_the_dpi_asked_for(shape):
    """encode_png (Pillow's PNG writer) gives back exactly the pixels painted, 8-bit RGB, with the dpi
    asked for in its pHYs chunk (none when none is asked for); a Pillow image of another mode is
    written as its RGB."""
    from collnb.views import raster
    rng = np.random.default_rng(sum(shape))
    pixels = (rng.integers(0, 3, shape) * 100).astype(np.uint8)
    pixels[: shape[0] // 2] = (250, 250, 250)  # a flat half and a noisy half, as a heatmap has
    im = Image.open(io.BytesIO(raster.encode_png(pixels, 100)))
    assert (im.format, im.mode, im.size) == ("PNG", "RGB", (shape[1], shape[0]))
    assert np.array_equal(np.asarray(im), pixels)
    assert tuple(round(d) for d in im.info["dpi"]) == (100, 100)
    assert "dpi" not in Image.open(io.BytesIO(raster.encode_png(pixels))).info
    rgba = Image.fromarray(pixels, "RGB").convert("RGBA")
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(raster.encode_png(rgba))).convert("RGB")), pixels)


def test_the_static_caption_is_painted_from_pixels_or_png_alike():
    """views.static.captioned_png takes the pixels the explorer still holds (nothing decoded) or PNG
    bytes; both give the same picture: the line above, the figure below, unchanged."""
    import io

    from PIL import Image

    from collnb.views.raster import encode_png
    from collnb.views.static import captioned_png
    pixels = np.zeros((40, 300, 3), np.uint8)
    pixels[:, :150] = (10, 200, 30)
    a, b = captioned_png(pixels, "Run this cell"), captioned_png(encode_png(pixels), "Run this cell")
    ia, ib = (np.asarray(Image.open(io.BytesIO(x)).convert("RGB")) for x in (a, b))
    assert np.array_equal(ia, ib) and ia.shape == (70, 300, 3)
    assert np.array_equal(ia[30:], pixels)                    # the figure, below a 30 px line
    assert (ia[5:20, 10:60] != 255).any()                     # the line's ink
    assert captioned_png(None, "x") is None


@pytest.fixture
def chinese():
    import collnb
    collnb.set_language("zh")
    yield
    collnb.set_language("en")


def test_heatmap_speaks_chinese_and_its_labels_do_not_overlap(runs, chinese):
    """The words of a heatmap in Chinese (glossary words: 之前/之后, 第 j 块, 未定义, rank kept),
    drawn with the CJK font and measured with it: the column headings stay apart."""
    him = H.heatmap_image(runs["reduce"])
    texts = [t for t, _, _ in him.labels]
    for want in ("之前", "之后", "每个 rank 的输入", "每个 rank 的输出", "第 0 块", "第 3 块", "未定义",
                 "rank 2（dst）", "rank 0", "斜线：未定义的输出"):
        assert want in texts, (want, texts)
    assert him.grid.status == "✓ 每个有定义的输出都与参考值一致（参考值不用 torch.distributed 计算）"
    assert him.grid.status in texts
    heads = sorted(box for t, _, box in him.labels if t.startswith("第 ") and t.endswith(" 块"))
    assert len(heads) == 8
    for left, right in zip(heads, heads[1:]):  # boxes (x0, y0, x1, y1), left to right on one row
        assert left[2] < right[0] or left[3] < right[1] or right[3] < left[1], heads
    # the heading is drawn in the CJK font: its ink is an ideograph's, not DejaVu's box
    from collnb.views import raster
    f = raster.cjk_font(17, "bold")
    assert f.getmask("之").getbbox() != raster.font(17, "bold").getmask("之").getbbox()


def test_heatmap_int8_legend_in_chinese_keeps_its_swatch_words(runs, chinese):
    him = H.heatmap_image(runs["int8"])
    texts = [t for t, _, _ in him.labels]
    assert any(t.startswith("精确 ") for t in texts), texts  # "exact 280" under a cell
    assert "✓ 与不用 torch.distributed 做的同样 int8 运算一致；橙色：float64 的结果，int8 改变了它" in texts
    assert "rank 7" in texts


def test_static_picture_caption_in_chinese(runs, chinese):
    from collnb.views.static import captioned_png, rerun_line, static_bundle
    png = H.heatmap_png(runs["all_reduce"])
    line = rerun_line("replay")
    assert line == "回放最后状态的静态图片：运行这个单元格即可恢复它的控件。"
    bundle = static_bundle(png, "replay", png_with_line=captioned_png(png, line))
    assert bundle["text/plain"] == line
    assert "请在 Binder 或 Colab 上打开这个笔记本" in bundle["text/html"]
    assert "这些控件失去了内核" in bundle["text/html"]
    # the line is painted: a strip above the picture, different from the English one
    import collnb
    zh = np.asarray(Image.open(io.BytesIO(captioned_png(png, line))).convert("RGB"))
    collnb.set_language("en")
    en_line = rerun_line("replay")
    assert en_line == "Static picture of the replay's last state: run this cell to bring back its controls."
    en = np.asarray(Image.open(io.BytesIO(captioned_png(png, en_line))).convert("RGB"))
    strip = zh.shape[0] - np.asarray(Image.open(io.BytesIO(png))).shape[0]
    assert strip >= 28 and not np.array_equal(zh[:strip], en[:strip])
    assert (zh[:strip].min(axis=2) < 128).sum() > 200  # dark ink of the Chinese words


def test_every_widgets_name_in_the_static_line_is_translated(chinese):
    """The composed-parallelism explorer's saved line read "composed-parallelism explorer最后状态的静态图片"
    in the Chinese edition: a widget's name (Binder's ``what``) missing from WHAT_WORDS stays English. Every
    "... explorer" name written in the package is one of WHAT_WORDS, and each is said in Chinese."""
    import re
    from pathlib import Path

    import collnb
    from collnb.views.static import WHAT_WORDS, rerun_line
    package = Path(collnb.__file__).parent
    names = {m for f in package.rglob("*.py") for m in re.findall(r'"([a-z][a-z -]* explorer)"', f.read_text())}
    assert {"cluster explorer", "composed-parallelism explorer", "pipeline explorer"} <= names
    assert names <= set(WHAT_WORDS), names - set(WHAT_WORDS)
    for what in WHAT_WORDS:
        line = rerun_line(what)
        assert not re.search(r"[a-z]{3,}", line.split("最后状态")[0]), line  # the name in Chinese, no English word
