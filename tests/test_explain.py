"""Explain my busbw: nccl-tests output read (collnb.explain_nccl_tests and ``collnb explain FILE``),
its numbers explained by nccl-tests' formulas, the α-β fit, the flags, and bad input named by line.
The files in tests/data/nccl_tests/ follow nccl-tests' printed layouts (see their first lines)."""

from __future__ import annotations

import pathlib

import pytest

import collnb
from collnb.cli.main import main
from collnb.labs.cluster.explain import NcclTestsFormatError, busbw_factor, parse_nccl_tests

DATA = pathlib.Path(__file__).parent / "data" / "nccl_tests"
AR = (DATA / "all_reduce_2x8_h100.txt").read_text()
RS = (DATA / "reduce_scatter_2x4_wrong.txt").read_text()
AG = (DATA / "all_gather_v100_old.txt").read_text()
BC = (DATA / "broadcast_periter_nocheck.txt").read_text()


def test_every_layout_is_read_with_its_ranks_hosts_and_columns():
    ar = parse_nccl_tests(AR)
    assert (ar.collective, ar.ranks, ar.hosts, ar.version) == ("all_reduce", 16, ["node-a", "node-b"], "2.17.1")
    assert len(ar.rows) == 16 and ar.rows[0].size == 8 and ar.rows[-1].size == 8 << 30 and ar.avg_busbw == 118.031
    assert ar.rows[-1].in_place is not None and ar.rows[0].redop == "sum" and ar.rows[0].root == -1
    rs = parse_nccl_tests(RS)  # launcher prefixes "[1,0]<stdout>:", size-0 lines, 2 hosts
    assert (rs.collective, rs.ranks, len(rs.hosts)) == ("reduce_scatter", 8, 2) and rs.rows[0].size == 0
    ag = parse_nccl_tests(AG)  # the older layout: an error column, no root
    assert ag.old_format and ag.collective == "all_gather" and ag.ranks == 8 and ag.rows[3].out_of_place.wrong == 0
    bc = parse_nccl_tests(BC)  # -I 1 per-iteration columns, -c 0 (N/A)
    assert bc.collective == "broadcast" and bc.rows[0].out_of_place.wrong is None and bc.rows[0].in_place.busbw > 0


def test_the_numbers_are_explained_by_nccl_tests_formulas_and_the_fit():
    ex = collnb.explain_nccl_tests(AR)
    assert ex.factor == pytest.approx(busbw_factor("all_reduce", 16)) == pytest.approx(2 * 15 / 16)
    for r in ex.run.rows:
        if r.out_of_place.algbw >= 1:
            assert r.out_of_place.busbw == pytest.approx(r.out_of_place.algbw * ex.factor, rel=0.01)
            assert r.out_of_place.algbw == pytest.approx(r.size / r.out_of_place.time_us / 1e3, rel=0.01)
    assert ex.alpha_us == pytest.approx(32.0, rel=0.1) and ex.peak_algbw == pytest.approx(190.0, rel=0.05)
    assert ex.peak_busbw == pytest.approx(ex.peak_algbw * ex.factor)
    assert ex.half_size == pytest.approx(ex.alpha_us / ex.beta_us_per_byte)
    assert ex.flags == []
    text = str(ex)
    assert "2(n-1)/n" in text and "nothing is off" in text and "not a peak" in text and "latency-bound" in text
    assert "exceed one NIC" in text  # 16 ranks on 2 hosts


def test_what_is_off_is_flagged():
    rs = collnb.explain_nccl_tests(RS)
    line = next(i for i, t in enumerate(RS.splitlines(), 1) if "16777216" in t)
    assert any("WRONG RESULTS" in f and "16 MiB" in f and f"line {line}" in f for f in rs.flags)
    assert any("a dip at 1 MiB" in f for f in rs.flags)
    low = collnb.explain_nccl_tests(AR, expected_busbw=500.0)
    assert any("plateau below the link rate" in f and "500.00 GB/s" in f for f in low.flags)
    assert not collnb.explain_nccl_tests(AR, expected_busbw=380.0).flags
    bc = collnb.explain_nccl_tests(BC)
    assert any("high latency floor" in f for f in bc.flags)
    assert any("did not check its results" in n for n in bc.notes)
    assert collnb.explain_nccl_tests(AG).flags == []


def test_bad_input_names_the_line_and_why():
    lines = AR.splitlines()
    k = next(i for i, t in enumerate(lines) if t.strip().startswith("32768"))
    cut = lines[:k] + [lines[k].replace("  -1  ", "  ")] + lines[k + 1:]
    with pytest.raises(NcclTestsFormatError, match=rf"line {k + 1} could not be read: 12 fields where the header"):
        parse_nccl_tests("\n".join(cut))
    bad = lines[:k] + [lines[k].replace("32.26", "3x.26", 1)] + lines[k + 1:]
    with pytest.raises(NcclTestsFormatError, match=rf"line {k + 1} could not be read: time '3x.26' is not a number"):
        parse_nccl_tests("\n".join(bad))
    with pytest.raises(NcclTestsFormatError, match="no nccl-tests result line found"):
        parse_nccl_tests("$ ls\nREADME.md\n")
    with pytest.raises(NcclTestsFormatError, match="line 1 holds numbers but no column header"):
        parse_nccl_tests("1048576 262144 float sum -1 28.1 37.3 65.3 0")
    headless = "\n".join(t for t in AR.splitlines() if "_perf" not in t)
    with pytest.raises(NcclTestsFormatError, match="pass collective="):
        collnb.explain_nccl_tests(headless)
    assert collnb.explain_nccl_tests(headless, "all_reduce_perf").collective == "all_reduce"
    with pytest.raises(NcclTestsFormatError, match="unknown collective 'allreduce'"):
        parse_nccl_tests(AR, "allreduce")
    with pytest.raises(TypeError, match="takes the output as text"):
        parse_nccl_tests(b"bytes")


def test_the_command_line_explains_plots_and_exits_with_the_right_status(tmp_path, capsys):
    png = tmp_path / "busbw.png"
    assert main(["explain", str(DATA / "all_reduce_2x8_h100.txt"), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "busbw = algbw x 1.875" in capsys.readouterr().out
    assert main(["explain", str(DATA / "reduce_scatter_2x4_wrong.txt")]) == 1  # wrong results
    assert main(["explain", str(tmp_path / "missing.txt")]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "junk.txt").write_text("# size count type\n12 x\n")
    assert main(["explain", str(tmp_path / "junk.txt")]) == 2
    assert "line 2 could not be read" in capsys.readouterr().err
    assert main(["explain", "--nccl", "dgx-h100", "--nodes", "2", "--algo", "Ring"]) == 0
    out = capsys.readouterr().out
    assert "AllReduce: from 8 B: Ring/LL" in out and "v2.30.7-1" not in out and "2.30.7-1" in out
    assert main(["explain", "--nccl", "dgx-h100", "--algo", "Rings"]) == 2


def test_the_explanation_speaks_chinese():
    try:
        collnb.set_language("zh")
        text = str(collnb.explain_nccl_tests(RS))
        assert "结果错误" in text and "延迟" in text
    finally:
        collnb.set_language(None)


def test_the_figure_draws_without_a_fit_when_time_does_not_grow_with_size():
    """A run whose times fall as the size grows has no α-β fit (β not positive: ``beta_us_per_byte`` is
    None); its figure raised "unsupported operand type(s) for *: 'NoneType'" where it drew the fit."""
    import dataclasses
    ex = dataclasses.replace(collnb.explain_nccl_tests(AR), beta_us_per_byte=None)
    assert ex.peak_algbw is None and ex.half_size is None
    fig = ex.figure()
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "busbw, out-of-place" in labels and "α-β fit (busbw)" not in labels


@pytest.mark.parametrize("flags, words", [
    (["--ranks", "-3"], "--ranks must be an int from 1"), (["--ranks", "0"], "--ranks must be an int from 1"),
    (["--expected-busbw", "-5"], "--expected-busbw must be a number from"),
    (["--expected-busbw", "nan"], "--expected-busbw must be a number from"),
])
def test_the_command_line_refuses_a_rank_count_or_busbw_that_cannot_be(flags, words, capsys):
    """--ranks -3 printed "n = -3 ranks" and a busbw from it; --ranks 0 fell back silently; a negative or
    nan --expected-busbw was taken. Each exits 2 with the option named."""
    assert main(["explain", str(DATA / "all_reduce_2x8_h100.txt"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err, err
    with pytest.raises(ValueError):
        collnb.explain_nccl_tests(AR, ranks=-3)
