"""Figures at 16 ranks (issue 19 item 9): every pair of rank colours far apart, a second cue where
colour is the only clue to a chunk's source, inputs the dtype cannot hold marked, preset labels
worded for the world size shown.

Colour distance: CIEDE2000, implemented here from Sharma, Wu & Dalal (2005) and checked against
their published test pairs, independently of collnb's own. Heatmaps are built offline (the reference
output as the result, no ranks).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import collnb.collectives as P
from collnb.collectives.primitives import _finish
from collnb.views import heatmap as H
from collnb.views import palette as C
from collnb.views.explorer_text import dtype_effect_text
from collnb.views.presets import INPUT_PRESETS, preset_label


def _lab(rgb):
    c = np.asarray(rgb, dtype=np.float64)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def _de2000(p, q):
    (L1, a1, b1), (L2, a2, b2) = p, q
    C1, C2 = math.hypot(a1, b1), math.hypot(a2, b2)
    G = 0.5 * (1 - math.sqrt(((C1 + C2) / 2) ** 7 / (((C1 + C2) / 2) ** 7 + 25 ** 7)))
    a1, a2 = a1 * (1 + G), a2 * (1 + G)
    C1, C2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1 = math.degrees(math.atan2(b1, a1)) % 360 if C1 else 0.0
    h2 = math.degrees(math.atan2(b2, a2)) % 360 if C2 else 0.0
    dL, dC = L2 - L1, C2 - C1
    if C1 * C2 == 0:
        dh = 0.0
    elif abs(h2 - h1) <= 180:
        dh = h2 - h1
    else:
        dh = h2 - h1 - 360 if h2 > h1 else h2 - h1 + 360
    dH = 2 * math.sqrt(C1 * C2) * math.sin(math.radians(dh / 2))
    Lm, Cm = (L1 + L2) / 2, (C1 + C2) / 2
    if C1 * C2 == 0:
        hm = h1 + h2
    elif abs(h1 - h2) <= 180:
        hm = (h1 + h2) / 2
    else:
        hm = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    T = (1 - 0.17 * math.cos(math.radians(hm - 30)) + 0.24 * math.cos(math.radians(2 * hm))
         + 0.32 * math.cos(math.radians(3 * hm + 6)) - 0.20 * math.cos(math.radians(4 * hm - 63)))
    SL = 1 + 0.015 * (Lm - 50) ** 2 / math.sqrt(20 + (Lm - 50) ** 2)
    SC, SH = 1 + 0.045 * Cm, 1 + 0.015 * Cm * T
    RT = -2 * math.sqrt(Cm ** 7 / (Cm ** 7 + 25 ** 7)) * math.sin(math.radians(60 * math.exp(-((hm - 275) / 25) ** 2)))
    return math.sqrt((dL / SL) ** 2 + (dC / SC) ** 2 + (dH / SH) ** 2 + RT * (dC / SC) * (dH / SH))


# Sharma, Wu & Dalal (2005), Table 1: pairs 1, 7, 13, 17, 19, 25, 34 (L, a, b; L, a, b; ΔE00)
_SHARMA = [((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425),
           ((50, 0, 0), (50, -1, 2), 2.3669),
           ((50, 2.4900, -0.0010), (50, -2.4900, 0.0011), 7.2195),
           ((50, 2.5, 0), (73, 25, -18), 27.1492),
           ((50, 2.5, 0), (50, 3.1736, 0.5854), 1.0000),
           ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
           ((2.0776, 0.0795, -1.1350), (0.9033, -0.0636, -0.5514), 0.9082)]


@pytest.mark.parametrize("pair", _SHARMA, ids=lambda p: f"{p[2]}")
def test_the_colour_distance_used_here_is_ciede2000(pair):
    a, b, want = pair
    assert _de2000(a, b) == pytest.approx(want, abs=1e-4)
    assert C.delta_e2000(a, b) == pytest.approx(want, abs=1e-4)


def test_every_pair_of_the_16_rank_colours_is_plainly_different():
    """At 16 ranks, ranks 4/8/12 (light blues) and the pale yellows looked alike (issue 19): now every
    pair is >= 10 ΔE00 apart (about 1 is a just-noticeable difference), and every pair involving the
    new ranks 8-15 >= 14; black values keep AAA contrast on every fill, rank labels AA on white."""
    labs = [_lab(C.rank_color(r)) for r in range(16)]
    d = {(i, j): _de2000(labs[i], labs[j]) for i in range(16) for j in range(i + 1, 16)}
    worst = min(d, key=d.get)
    print("closest pair", worst, round(d[worst], 1))
    assert d[worst] >= 10.0, (worst, d[worst])
    assert min(v for (i, j), v in d.items() if j >= 8) >= 14.0
    for pair in ((4, 8), (4, 12), (8, 12), (6, 14), (9, 14), (14, 15), (9, 15)):  # the look-alikes of before
        assert d[pair] >= 14.0, (pair, d[pair])
    ink = C.hex_rgb("#111111")
    for r in range(16):
        assert C.contrast_ratio(ink, C.rank_color(r)) >= 7.0, r
        assert C.contrast_ratio(C.rank_text_color(r)) >= 4.5, r
        # no fill is mistaken for white, an empty cell or the hatching of an undefined one
        for other in ((1, 1, 1), C.EMPTY_COLOR, C.UNDEFINED_COLOR, C.HATCH_COLOR):
            assert _de2000(labs[r], _lab(other)) >= 14.0, (r, other)
        # nor for the reds that mean something: a reduce arrow, a wrong value's outline (ranks 8-15)
        if r >= 8:
            for red in (np.array(C.REDUCE_COLOR) / 255, C.hex_rgb(C.MISMATCH_COLOR)):
                assert _de2000(labs[r], _lab(red)) >= 30.0, (r, red)


def _offline(primitive, ws, dtype="float32", inputs=None):
    spec = P.SPECS[primitive]
    dt = getattr(torch, dtype)
    table = P.teaching_inputs(primitive, ws, 0) if inputs is None else \
        [[inputs(r, c) for c in range(spec.n_in(ws, r, 0))] for r in range(ws)]
    case = dict(primitive=primitive, dtype=dtype, op="sum", root=0, chunk_size=1, inputs=table)
    exp = P.reference(primitive, ws, table, dtype=dt, op="sum", root=0)[0]
    before = [P.make_tensor(v, 1, dt) for v in table]
    after = [e if e is not None else torch.zeros(spec.n_out(ws, r, 0), dtype=dt) for r, e in enumerate(exp)]
    return _finish(case, ws, "gloo", before, after, 0.0)


def test_where_values_do_not_name_their_rank_the_cell_does():
    """all_to_all of nan, inf, -inf, 1/3 at 16 ranks: every received chunk is tagged with its source
    rank (rank r's chunk c came from rank c), painted in the cell at >= 10 px; the teaching values
    name their rank themselves, so no tag there."""
    res = _offline("all_to_all", 16, inputs=INPUT_PRESETS["special_floats"][1])
    g = H.heatmap_grid(res)
    assert g.after.tag == [[f"r{c}" for c in range(16)] for _ in range(16)]
    assert not any(t for row in g.before.tag for t in row)
    assert ("rN in a corner: the rank this chunk came from (its value does not say)", "tag") in g.legend
    him = H.heatmap_image(res, dpi=80, grid=g)
    tags = [(t, px, box) for t, px, box in him.labels if t.startswith("r") and t[1:].isdigit()]
    assert len(tags) == 16 * 16 + 1  # every after cell, and the legend's sample
    assert min(px for _, px, _ in tags) >= C.MIN_LABEL_PX
    # each tag sits inside an after cell (the legend's sample aside)
    cells = {}
    for r in range(16):
        for c in range(16):
            cells[(r, c)] = H.cell_box(him, "after", r, c)
    inside = sum(any(b[0] <= x0 and x1 <= b[2] and b[1] <= y0 and y1 <= b[3] for b in cells.values())
                 for _, _, (x0, y0, x1, y1) in tags)
    assert inside == 16 * 16
    plain = H.heatmap_grid(_offline("all_to_all", 16))
    assert not any(t for row in plain.after.tag for t in row)


def test_inputs_the_dtype_cannot_hold_are_marked_with_the_value_asked_for():
    """bfloat16 at 16 ranks holds 1296 for the teaching value 1300: the before panel shows 1296 with
    "asked 1300" (or just 1300) under it, the legend says why, the explorer's line names one; exact
    inputs (float32, or bfloat16 at 4 ranks) are not marked."""
    res = _offline("all_to_all", 16, dtype="bfloat16")
    g = H.heatmap_grid(res)
    assert g.before.text[13][0] == "1296" and g.before.asked[13][0] == "1300"
    assert g.before.asked[0][5] == "" and g.before.asked[2][1] == ""   # 5 and 201 are exact in bfloat16
    want = {(r, c) for r in range(16) for c in range(len(g.before.text[r]))
            if float(torch.tensor(float(P.teaching_value(r, c, 16))).to(torch.bfloat16)) != P.teaching_value(r, c, 16)}
    assert {(r, c) for r in range(16) for c, x in enumerate(g.before.asked[r]) if x} == want
    assert any(kind == "asked" for _, kind in g.legend)
    line = dtype_effect_text(res, g)
    r, c = min(want)
    held = int(torch.tensor(float(P.teaching_value(r, c, 16))).to(torch.bfloat16).item())
    assert line.startswith(f"bfloat16 cannot hold every input asked for: rank {r}, chunk {c} holds {held} for "
                           f"{P.teaching_value(r, c, 16)} ({len(want)} input chunk(s), marked in the before panel)"), line
    # the chunks a rounded input reaches are tagged with their source (their value no longer says)
    assert g.after.tag[0][13] == "r13"
    # float32 holds every teaching value: nothing marked; so does bfloat16 at 4 ranks
    for ws, dt in ((16, "float32"), (4, "bfloat16")):
        g2 = H.heatmap_grid(_offline("all_to_all", ws, dtype=dt))
        assert not any(x for row in g2.before.asked for x in row)
    # float32's 1/3 reads like the 1/3 asked for: not marked
    g3 = H.heatmap_grid(_offline("broadcast", 4, inputs=INPUT_PRESETS["special_floats"][1]))
    assert not any(x for row in g3.before.asked for x in row)


@pytest.mark.parametrize("ws, want", [(1, "2 ranks: 200 → -56"), (2, "2 ranks: 200 → -56"), (4, "4 ranks: 400 → -112"),
                                      (16, "16 ranks: 1600 → 64")])
def test_preset_labels_are_worded_for_the_world_size_shown(ws, want):
    label = preset_label("int8_wrap", ws)
    assert label.endswith(f"({want})"), label
    assert torch.tensor([100] * max(ws, 2), dtype=torch.int8).sum(dtype=torch.int8).item() == int(want.split("→ ")[1])
    assert preset_label("fp16_inf", ws).endswith(f"({max(ws, 2)} ranks: {60000 * max(ws, 2)} → inf)")
    assert "2 ranks" not in preset_label("bf16_round", ws)
    teaching = preset_label("teaching", ws, "bfloat16")
    assert ("bfloat16 rounds some of them: marked in the before panel" in teaching) == (ws > 10)
    assert preset_label("teaching", ws, "float32").endswith("(teaching values)")
