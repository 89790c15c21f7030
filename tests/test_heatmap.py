"""collnb.heatmap: the drawn pixels and the data behind them (not just "a file exists")."""

import io
import subprocess
import sys
import threading

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from collnb import heatmap as H
from collnb import primitives as P


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
    grey = {_rgb8(H.UNDEFINED_COLOR), _rgb8(H._HATCH_COLOR)}
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
    red = _rgb8(H._hex_rgb(H.MISMATCH_COLOR))
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
    code = (
        "import sys, torch\n"
        "from collnb import primitives as P, heatmap as H\n"
        "case = dict(primitive='all_reduce', dtype='float32', op='sum', root=0, chunk_size=1,\n"
        "            inputs=P.teaching_inputs('all_reduce', 3))\n"
        "exp = P.reference('all_reduce', 3, case['inputs'])[0]\n"
        "before = [P._make_tensor(v, 1, torch.float32) for v in case['inputs']]\n"
        "res = P._finish(case, 3, 'gloo', before, exp, 0.0)\n"
        "fig = H.heatmap_figure(res); png = H.heatmap_png(res)\n"
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
