"""collnb.bench and costmodel.fit: busbw factors, the fit on synthetic timings, the row schema,
every primitive's measured result checked on real ranks, files, the CLI's bad input, NCCL.

Nothing here asserts how fast anything is (the machine is shared): speed targets live in
benchmarks/bench_overhead.py, which prints ratios measured in one run.
"""

import json
import math
import os
import re

import numpy as np
import pytest
import torch

from collnb import bench as B
from collnb import costmodel as cm
from collnb.cli import EXIT_OK, EXIT_USAGE, main
from collnb.labs.bench import rows as bench_rows
from collnb.labs.bench.choices import counts
from collnb.labs.bench.measuring import Case, values

EXAMPLE = B.EXAMPLE_FILE


# ------------------------------------------------------------------------------------------------
# busbw (nccl-tests doc/PERFORMANCE.md; scatter/gather: src/scatter.cu, src/gather.cu)

@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_busbw_factors_are_nccl_tests(n):
    want = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
            "all_to_all": (n - 1) / n, "scatter": (n - 1) / n, "gather": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}
    assert set(want) == set(B.PRIMITIVES)
    for p, f in want.items():
        assert cm.busbw_factor(p, n) == pytest.approx(f, abs=0, rel=1e-15), p


def test_algbw_and_busbw_values():
    # 1 GB in 1 s at 4 ranks: algbw 1 GB/s, all_reduce busbw 2*3/4 = 1.5, all_gather 0.75, broadcast 1
    assert cm.algbw(1e9, 1.0) == 1.0
    assert cm.busbw("all_reduce", 1e9, 1.0, 4) == 1.5
    assert cm.busbw("all_gather", 1e9, 1.0, 4) == 0.75
    assert cm.busbw("broadcast", 1e9, 2.0, 8) == 0.5
    with pytest.raises(ValueError, match="unknown primitive for busbw 'barrier'; choose one of: broadcast, scatter, "):
        cm.busbw_factor("barrier", 4)


# ------------------------------------------------------------------------------------------------
# The fit, on synthetic timings made from a known model

TRUE = cm.CostModel(alpha=35e-6, beta=1 / 2.5e9, gamma=1 / 12e9, source="test")


def _synthetic(algorithms, world_sizes, sizes, model=TRUE, noise=0.0, seed=0, primitive="all_reduce"):
    rng = np.random.default_rng(seed)
    rows = []
    for ws in world_sizes:
        for n in sizes:
            for a in algorithms:
                A, Bb, G = cm.coefficients(primitive, a, ws, n)
                t = (model.alpha * A + model.beta * Bb + model.gamma * G) * (1 + noise * rng.standard_normal())
                rows.append(dict(primitive=primitive, algorithm=a, backend="gloo", world_size=ws, dtype="float32",
                                 nbytes=n, time_s=t, time_min_s=t, time_max_s=t, algbw_GBps=n / t / 1e9,
                                 busbw_GBps=cm.busbw(primitive, n, t, ws), ok=True))
    return rows


SIZES = [1 << k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB


def test_fit_recovers_alpha_beta_gamma_exactly_without_noise():
    rows = _synthetic(["ring", "recursive_doubling", "rabenseifner"], [2, 4, 8], SIZES)
    f = cm.fit(rows, gamma="fit")
    assert f.gamma_from == "fit"
    assert f.model.alpha == pytest.approx(TRUE.alpha, rel=1e-6)
    assert f.model.beta == pytest.approx(TRUE.beta, rel=1e-6)
    assert f.model.gamma == pytest.approx(TRUE.gamma, rel=1e-6)
    assert f.rel_rms < 1e-9
    # gamma=None separates it too: ring (2 bytes sent per byte reduced) vs recursive doubling (1:1)
    assert cm.fit(rows).model.gamma == pytest.approx(TRUE.gamma, rel=1e-6)


def test_fit_recovers_alpha_beta_under_noise_and_predicts_an_unmeasured_size():
    rows = _synthetic(["ring"], [2, 4], SIZES, noise=0.03, seed=1)
    f = cm.fit(rows, gamma=TRUE.gamma)  # gamma measured beside (given)
    assert f.gamma_from == "given"
    assert f.model.alpha == pytest.approx(TRUE.alpha, rel=0.1)
    assert f.model.beta == pytest.approx(TRUE.beta, rel=0.05)
    assert 0.01 < f.rel_rms < 0.06
    # 3 MiB at world size 4 was not measured: the fit predicts what the true model says
    A, Bb, G = cm.coefficients("all_reduce", "ring", 4, 3 << 20)
    true_t = TRUE.alpha * A + TRUE.beta * Bb + TRUE.gamma * G
    assert f.predict(3 << 20, world_size=4) == pytest.approx(true_t, rel=0.05)


def test_fit_takes_gamma_from_local_reduce_rows():
    rows = _synthetic(["ring"], [4], SIZES)
    for n in (1 << 20, 4 << 20, 16 << 20):  # one core adds n bytes in gamma * n seconds
        rows.append(dict(primitive="local_reduce", algorithm="reference", backend="cpu", world_size=1, dtype="float32",
                         nbytes=n, time_s=TRUE.gamma * n * 1.5, time_min_s=TRUE.gamma * n, time_max_s=TRUE.gamma * n * 3,
                         algbw_GBps=1.0, busbw_GBps=1.0, ok=True))
    f = cm.fit(rows)
    assert f.gamma_from == "local_reduce"
    assert f.model.gamma == pytest.approx(TRUE.gamma, rel=1e-9)  # from time_min_s: preemption only adds
    assert f.model.alpha == pytest.approx(TRUE.alpha, rel=1e-6)
    assert f.model.beta == pytest.approx(TRUE.beta, rel=1e-6)


def test_fit_does_not_invent_a_gamma_it_cannot_separate():
    """One ring: bytes sent are always twice the bytes reduced, so beta and gamma fold into one
    effective beta = beta + gamma/2 (and gamma is reported as not fitted)."""
    rows = _synthetic(["ring"], [2, 4, 8], SIZES)
    f = cm.fit(rows)
    assert f.gamma_from == "none" and f.model.gamma == 0
    assert f.model.beta == pytest.approx(TRUE.beta + TRUE.gamma / 2, rel=1e-6)
    assert f.model.alpha == pytest.approx(TRUE.alpha, rel=1e-6)


def test_fit_skips_wrong_results_and_refuses_empty_input():
    rows = _synthetic(["builtin"], [2], SIZES)
    rows[0] = dict(rows[0], time_s=1e3, ok=False)  # a wrong result is not data
    f = cm.fit(rows, gamma=TRUE.gamma)
    assert f.n == len(SIZES) - 1
    assert f.model.alpha == pytest.approx(TRUE.alpha, rel=1e-6)
    with pytest.raises(ValueError, match="no measured rows with ok=True"):
        cm.fit(rows, algorithm="ring")
    with pytest.raises(ValueError, match="gamma must be"):
        cm.fit(rows, gamma="guess")


def test_crossover_of_two_fitted_models():
    rows = _synthetic(["ring", "recursive_doubling"], [8], SIZES)
    fits = cm.fit_each(rows, gamma=TRUE.gamma)
    ring, rd = fits[("all_reduce", "ring")], fits[("all_reduce", "recursive_doubling")]
    (m,) = cm.crossovers(ring, rd, 8, 1, 1 << 30)
    # closed forms at p = 8: ring 14a + 14/8 m b + 7/8 m g; recursive doubling 3(a + m b + m g)
    a, b, g = TRUE.alpha, TRUE.beta, TRUE.gamma
    want = (14 - 3) * a / (3 * b + 3 * g - 14 / 8 * b - 7 / 8 * g)
    assert m == pytest.approx(want, rel=1e-6)
    assert ring.predict(m / 2, 8) > rd.predict(m / 2, 8) and ring.predict(2 * m, 8) < rd.predict(2 * m, 8)
    assert cm.crossovers(ring, rd, 8, 1, m / 2) == []


# ------------------------------------------------------------------------------------------------
# Input checks (no rank starts)

@pytest.mark.parametrize("spec, want", [
    ("1K:64M", [1 << k for k in range(10, 27)]),
    ("4:4", [4]),
    ("1k:4K", [1024, 2048, 4096]),
    ("64M", [64 << 20]),
    (["1K", 4096, "2K"], [1024, 2048, 4096]),
])
def test_parse_sizes(spec, want):
    assert B.parse_sizes(spec) == want


@pytest.mark.parametrize("spec, words", [
    ("64M:1K", ["larger than MAX", "1K:64M"]),
    ("3K:64K", ["not a power of two"]),
    ("1X:2K", ["not a size", "e.g. 1K, 64M"]),
    ("1K:2K:4K", ["MIN:MAX"]),
    ("0:1K", ["at least 1 byte"]),
    ("1K:4G", ["above 1 GiB"]),
])
def test_bad_sizes_are_refused(spec, words):
    with pytest.raises(ValueError) as info:
        B.parse_sizes(spec)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize("size", [True, None, 1.5])
def test_a_size_of_the_wrong_type_is_a_type_error(size):
    words = f"a size must be bytes as an int or a str such as '64M'; got {size!r}"
    with pytest.raises(TypeError, match=re.escape(words)):
        B.parse_size(size)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(iters=0), ValueError, "iters must be an int >= 1 (timed iterations per measurement); got 0"),
    (dict(iters=2.5), TypeError, "iters must be an int >= 1 (timed iterations per measurement); got 2.5"),
    (dict(warmup=-1), ValueError, "warmup must be an int >= 0 (untimed iterations before them); got -1"),
    (dict(algorithms=["bruck"]), ValueError,
     "unknown algorithm for all_reduce 'bruck'; choose one of: builtin, ring, recursive_doubling"),
    (dict(primitive="barrier"), ValueError,
     "unknown primitive with a bus bandwidth 'barrier'; choose one of: broadcast, scatter, gather, reduce, all_gather, "),
    (dict(world_sizes=40), ValueError,
     "world_size must be an int from 1 to 16; got 40"),
    (dict(world_sizes=[2, "4"]), TypeError,
     "world_size must be an int from 1 to 16; got '4'"),
    (dict(world_sizes=True), TypeError,  # not "'bool' object is not iterable"
     "world_size must be an int from 1 to 16; got True"),
    (dict(world_sizes=2.5), TypeError,
     "world_size must be an int from 1 to 16; got 2.5"),
    (dict(dtype="float128"), ValueError, "unknown dtype 'float128'; choose one of: float32, "),
    (dict(backend="mpi"), ValueError, "unknown backend 'mpi'; choose one of: gloo, nccl"),
    (dict(timing="nccl"), ValueError, "unknown timing method 'nccl'; choose one of: collnb, nccl-tests"),
])
def test_bad_python_arguments_raise_before_any_rank_starts(kwargs, error, words):
    """The words of collnb.vocabulary, as every entry point says them."""
    args = dict(primitive="all_reduce", world_sizes=2, sizes="1K:2K") | kwargs
    with pytest.raises(error) as info:
        B.bench(**args)
    assert words in str(info.value)


def test_check_algorithms_expands_all():
    assert B.check_algorithms("broadcast", "all") == ("builtin", "binomial_tree", "linear", "chain")


@pytest.mark.parametrize("argv, words", [
    (["--sizes", "64M:1K"], ["error: --sizes '64M:1K'", "larger than MAX"]),
    (["--iters", "0"], ["error: iters must be an int >= 1 (timed iterations per measurement); got 0"]),
    (["--warmup", "-1"], ["error: warmup must be an int >= 0 (untimed iterations before them); got -1"]),
    (["-a", "bruck"], ["error: unknown algorithm for all_reduce 'bruck'; choose one of: builtin, ring, "
                       "recursive_doubling"]),
    (["-a", "ring", "-a", "nonsense"], ["unknown algorithm for all_reduce 'nonsense'"]),
    (["-n", "2,x"], ["world size 'x' is not a whole number"]),
    (["-n", "0"], ["error: world_size must be an int from 1 to 16; got 0"]),
    (["--json", "/nonexistent-dir/r.json"], ["does not exist"]),
    (["--csv", "/tmp/r.txt"], ["must end with .csv"]),
    (["--png", "/tmp"], ["is a directory"]),
    (["--timing", "median"], ["invalid choice: 'median'", "collnb", "nccl-tests"]),
])
def test_cli_bad_input_exits_2_with_a_clear_message(capsys, argv, words):
    try:
        status = main(["bench", "all_reduce", *argv])
    except SystemExit as exc:  # argparse's own refusals (type errors) exit 2 too
        status = exc.code
    assert status == EXIT_USAGE
    err = capsys.readouterr().err
    for w in words:
        assert w in err, (w, err)
    assert "Traceback" not in err


def test_cli_help_lists_every_option():
    parser_help = pytest.importorskip("collnb.__main__").build_parser()
    sub = parser_help._subparsers._group_actions[0].choices["bench"]
    text = sub.format_help()
    for opt in ("--world-size", "--sizes", "--dtype", "--iters", "--warmup", "--algorithm", "--backend", "--json",
                "--csv", "--png", "--quiet", "--timing"):
        assert opt in text


# ------------------------------------------------------------------------------------------------
# The reference check, in-process (no ranks): the expected output is what the primitive defines

@pytest.mark.parametrize("primitive", B.PRIMITIVES)
def test_case_check_accepts_the_reference_and_flags_one_wrong_element(primitive):
    ws, rank = 4, 1 if primitive not in ("reduce", "gather") else 0
    count, block = counts(primitive, 64, ws, 4)
    for alg in ("builtin",) + __import__("collnb.algorithms", fromlist=["x"]).algorithms_for(primitive):
        case = Case(primitive, alg, rank, ws, count, block, torch.float32, torch.device("cpu"))
        case.reset()
        target = case.out if case.defined is None else case.out[case.defined[0]:case.defined[1]]
        target.copy_(case.expected)
        assert case.check(), (primitive, alg)
        target[-1] += 1
        assert not case.check(), (primitive, alg)


def test_reduction_inputs_stay_exact_in_small_dtypes():
    # sums over 16 ranks of (rank % 3) + (i % 5) stay <= 96: exact in int8, bfloat16, float16
    total = sum(values(r, 10, True, torch.int64, "cpu") for r in range(16))
    assert int(total.max()) <= 96
    assert int(values(15, 10, False, torch.int64, "cpu").max()) <= 127


# ------------------------------------------------------------------------------------------------
# On real ranks

def test_every_primitive_and_algorithm_measures_a_correct_result():
    """World size 3 (not a power of two: folds, uneven trees): every primitive, the built-in and
    every collnb algorithm, checked against the reference on every rank in every iteration."""
    for primitive in B.PRIMITIVES:
        rows = B.bench(primitive, 3, "96", iters=2, warmup=1, algorithms="all", references=False, progress=False,
                       as_frame=False)
        assert [r["algorithm"] for r in rows] == list(B.check_algorithms(primitive, "all"))
        bad = [(r["primitive"], r["algorithm"]) for r in rows if not r["ok"]]
        assert not bad, bad


def test_the_columns_are_the_files_columns_in_order():
    """COLUMNS is read from the Row type: its order is the JSON and CSV files' column order."""
    assert B.COLUMNS == ("primitive", "algorithm", "backend", "world_size", "dtype", "nbytes", "time_s", "time_min_s",
                         "time_max_s", "algbw_GBps", "busbw_GBps", "ok")


def test_row_schema_values_and_files(tmp_path):
    rows = B.bench("all_gather", [2, 4], "1K:2K", iters=3, warmup=1, algorithms=["builtin", "ring"], progress=False,
                   as_frame=False)
    coll = [r for r in rows if r["primitive"] == "all_gather"]
    refs = [r for r in rows if r["primitive"] != "all_gather"]
    assert len(coll) == 2 * 2 * 2 and {r["primitive"] for r in refs} == set(B.REFERENCES)
    for r in rows:
        assert tuple(r) == B.COLUMNS
        assert isinstance(r["world_size"], int) and isinstance(r["nbytes"], int) and isinstance(r["ok"], bool)
        assert 0 < r["time_min_s"] <= r["time_s"] <= r["time_max_s"]
        assert r["algbw_GBps"] == pytest.approx(r["nbytes"] / r["time_s"] / 1e9)
        assert r["ok"] is True
    for r in coll:
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * (r["world_size"] - 1) / r["world_size"])
        assert (r["backend"], r["dtype"]) == ("gloo", "float32")
        assert r["nbytes"] in (1024, 2048)  # divisible by 4 bytes x world size: nothing rounded off
    # files round-trip, and a DataFrame when pandas is there
    for path in (tmp_path / "r.json", tmp_path / "r.csv"):
        (B.save_json if path.suffix == ".json" else B.save_csv)(rows, path)
        again = B.load(path, as_frame=False)
        assert [tuple(sorted(r.items())) for r in again] == [tuple(sorted(r.items())) for r in rows]
    assert json.loads((tmp_path / "r.json").read_text())["columns"] == list(B.COLUMNS)
    pd = pytest.importorskip("pandas")
    df = B.load(tmp_path / "r.json")
    assert isinstance(df, pd.DataFrame) and list(df.columns) == list(B.COLUMNS) and len(df) == len(rows)


_GOOD_ROW = dict(primitive="all_reduce", algorithm="ring", backend="gloo", world_size=2, dtype="float32", nbytes=1024,
                 time_s=1e-4, time_min_s=1e-4, time_max_s=2e-4, algbw_GBps=10.24, busbw_GBps=10.24, ok=True)


@pytest.mark.parametrize("column, value, text", [
    ("time_s", None, "row 0: column 'time_s' must be a number >= 0; got None"),
    ("world_size", None, "row 0: column 'world_size' must be an int >= 0; got None"),
    ("nbytes", "big", "row 0: column 'nbytes' must be an int >= 0; got 'big'"),
    ("nbytes", -4, "row 0: column 'nbytes' must be an int >= 0; got -4"),
    ("algbw_GBps", [1], "row 0: column 'algbw_GBps' must be a number >= 0; got [1]"),
    ("ok", None, "row 0: column 'ok' must be true or false; got None"),
    ("primitive", None, "row 0: column 'primitive' must be a name (str); got None"),
])
def test_rows_with_values_of_the_wrong_kind_are_a_value_error(tmp_path, column, value, text):
    bad = dict(_GOOD_ROW, **{column: value})
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rows": [bad]}))
    with pytest.raises(ValueError) as info:
        B.load(path, as_frame=False)
    assert str(info.value) == f"{path}: {text}"
    with pytest.raises(ValueError) as info:  # rows given directly: the same check (plot, save_json use it)
        B.as_rows([bad])
    assert str(info.value) == text
    with pytest.raises(ValueError):
        B.save_json([bad], tmp_path / "out.json")
    assert B.as_rows([_GOOD_ROW]) == [_GOOD_ROW]


def test_a_results_file_nested_too_deeply_is_a_value_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        B.load(path)


def test_list_of_dicts_without_pandas(monkeypatch):
    monkeypatch.setattr(bench_rows, "_have_pandas", lambda: False)
    rows = B.bench("broadcast", 2, "64", iters=1, warmup=0, references=False, progress=False)
    assert isinstance(rows, list) and rows[0]["primitive"] == "broadcast" and rows[0]["busbw_GBps"] == \
        pytest.approx(rows[0]["algbw_GBps"])


def test_cli_measures_prints_fits_and_writes_files(tmp_path, capsys):
    js, cs, png = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.png"
    status = main(["bench", "all_reduce", "-n", "2", "-n", "3", "--sizes", "4K:16K", "--iters", "2", "--warmup", "0",
                   "-a", "builtin", "-a", "ring", "--json", str(js), "--csv", str(cs), "--png", str(png)])
    out, err = capsys.readouterr()
    assert status == EXIT_OK, err
    assert "debug checks (TORCH_DISTRIBUTED_DEBUG) off while timing" in out
    assert "all_reduce/ring at world size 2, 3: α =" in out
    assert out.count("  ✓") == 2 * 3 * 2 + 3 * 3  # collectives + references, all checked
    assert "bench all_reduce" in err  # the progress bar (plain text in a terminal)
    rows = B.load(js, as_frame=False)
    assert {(r["world_size"], r["algorithm"]) for r in rows if r["primitive"] == "all_reduce"} == \
        {(2, "builtin"), (2, "ring"), (3, "builtin"), (3, "ring")}
    assert cs.read_text().splitlines()[0] == ",".join(B.COLUMNS)
    from PIL import Image
    img = Image.open(png)
    assert img.size[0] > 600 and img.size[1] > 600
    # --quiet: no progress bar
    assert main(["bench", "broadcast", "-n", "2", "--sizes", "64", "--iters", "1", "--warmup", "0", "--quiet",
                 "--no-references"]) == EXIT_OK
    assert "bench broadcast" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# Timing: collnb's (every iteration alone) and nccl-tests' (BenchTime: back to back, mean over ranks)


def _timed_calls(rank, world_size, timing):
    """Runs the rank side of one measurement; its operations are recorded by record_calls."""
    from collnb.labs.bench.measuring import rank_bench
    job = dict(primitive="all_reduce", algorithms=["builtin"], dtype="float32", count=64, block=32, iters=5,
               warmup=2, timing=timing)
    return rank_bench(rank, world_size, job)["builtin"]


def test_nccl_tests_timing_issues_the_iterations_back_to_back_after_one_barrier():
    """nccl-tests' src/common.cu BenchTime: one barrier, then `iters` calls with nothing between them,
    one time per rank; collnb's timing: a barrier before every call. Seen in the operations the
    ranks issued (collnb.launch(record_calls=True))."""
    from collnb import launch
    out = launch(_timed_calls, 2, args=("nccl-tests",), record_calls=True, debug=False)
    for res, calls in zip(out, out.calls):
        names = [c.name for c in calls]
        # warm-up (2), barrier + the checked call, barrier + 5 timed calls back to back
        assert names == ["all_reduce"] * 2 + ["barrier", "all_reduce", "barrier"] + ["all_reduce"] * 5, names
        assert res["ok"] and len(res["times"]) == 1 and res["times"][0] > 0
    out = launch(_timed_calls, 2, args=("collnb",), record_calls=True, debug=False)
    for res, calls in zip(out, out.calls):
        assert [c.name for c in calls] == ["barrier", "all_reduce"] * 7
        assert res["ok"] and len(res["times"]) == 5


def test_nccl_tests_rows_are_the_mean_over_ranks():
    per_rank = [{"times": [1e-3], "ok": True}, {"times": [3e-3], "ok": True}]
    row = bench_rows.measured_row("all_reduce", "builtin", "gloo", 2, "float32", 4096, per_rank, 5,
                                  timing="nccl-tests")
    assert (row["time_s"], row["time_min_s"], row["time_max_s"]) == (2e-3, 1e-3, 3e-3)
    assert row["algbw_GBps"] == pytest.approx(4096 / 2e-3 / 1e9)
    # collnb's: per iteration the slowest rank, then the median
    per_rank = [{"times": [1e-3, 5e-3, 2e-3], "ok": True}, {"times": [4e-3, 1e-3, 2e-3], "ok": True}]
    row = bench_rows.measured_row("all_reduce", "builtin", "gloo", 2, "float32", 4096, per_rank, 3)
    assert (row["time_s"], row["time_min_s"], row["time_max_s"]) == (4e-3, 2e-3, 5e-3)


def test_both_timings_measure_correct_results_and_the_cli_says_which():
    rows = B.bench("all_reduce", 2, "4K:8K", iters=3, warmup=1, algorithms=["builtin", "ring"], references=False,
                   progress=False, as_frame=False, timing="nccl-tests")
    assert len(rows) == 4 and all(r["ok"] and r["time_min_s"] <= r["time_s"] <= r["time_max_s"] for r in rows)


def test_cli_timing_nccl_tests(tmp_path, capsys):
    js = tmp_path / "r.json"
    status = main(["bench", "all_gather", "-n", "2", "--sizes", "4K", "--iters", "3", "--warmup", "1", "--quiet",
                   "--no-references", "--timing", "nccl-tests", "--json", str(js)])
    out, err = capsys.readouterr()
    assert status == EXIT_OK, err
    assert "time = as nccl-tests: iterations back to back after one barrier" in out
    assert "--timing nccl-tests" in B.note(js)
    assert main(["bench", "all_gather", "-n", "2", "--sizes", "4K", "--iters", "1", "--warmup", "0", "--quiet",
                 "--no-references"]) == EXIT_OK
    assert "time = median over iterations of the slowest rank" in capsys.readouterr().out


def test_debug_cost_measures_both():
    cost = B.debug_cost("all_reduce", 2, 256, iters=3, warmup=1)
    assert cost["off"]["ok"] and cost["on"]["ok"]
    assert cost["off"]["debug"] is False and cost["on"]["debug"] is True
    assert cost["ratio"] == pytest.approx(cost["on"]["time_s"] / cost["off"]["time_s"])


def test_plot_marks_fits_crossovers_and_references():
    rows = _synthetic(["builtin", "ring", "recursive_doubling"], [2, 4], SIZES)
    fig = B.plot(rows)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("ring = recursive_doubling" in t for t in texts)
    labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    assert any(lab.startswith("ring fit: α=35 µs") for lab in labels)
    assert any(lab.startswith("naive model") for lab in labels)
    assert "oversubscribed" in " ".join(ax.get_title() for ax in fig.axes) or os.cpu_count() >= 4



def test_plot_in_chinese_falls_back_to_the_cjk_font():
    """The bench figure's texts carry the CJK font after DejaVu Sans in Chinese (so the words the
    labs area translates are drawn, not tofu); English keeps DejaVu Sans alone."""
    import collnb
    from collnb.views import raster
    rows = _synthetic(["builtin", "ring"], [2, 4], SIZES)
    assert B.plot(rows).axes[0].title.get_fontfamily() == ["DejaVu Sans"]
    collnb.set_language("zh")
    try:
        fig = B.plot(rows)
        family = fig.axes[0].title.get_fontfamily()
        assert family == ["DejaVu Sans", raster.cjk_font(12).getname()[0]], family
        fig.axes[0].set_title("全规约 带宽")  # a Chinese title draws without a missing-glyph warning
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fig.canvas.draw()
    finally:
        collnb.set_language("en")


# ------------------------------------------------------------------------------------------------
# The example results file and NCCL

def test_example_file_is_labelled_cpu_and_loads():
    raw = json.loads(open(EXAMPLE).read())
    assert "CPU" in raw["note"] and raw["machine"]["cuda_devices"] == []
    rows = B.load(EXAMPLE, as_frame=False)
    assert all(r["backend"] in ("gloo", "cpu", "tcp") for r in rows)
    assert all(r["ok"] for r in rows)
    fits = cm.fit_each(rows)
    assert ("all_reduce", "builtin") in fits and ("all_reduce", "ring") in fits
    assert all(math.isfinite(f.model.alpha) and f.model.beta >= 0 for f in fits.values())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal does not apply")
def test_nccl_without_a_gpu_is_refused_not_replaced(capsys):
    with pytest.raises(RuntimeError, match="NCCL needs CUDA"):
        B.bench("all_reduce", 2, "1K", backend="nccl", progress=False)
    assert main(["bench", "all_reduce", "--backend", "nccl", "-n", "2", "--sizes", "1K", "--quiet"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "NCCL needs CUDA" in err and "gloo" in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU for NCCL; this machine has none")
def test_nccl_bench_times_with_cuda_events():
    ws = min(2, torch.cuda.device_count())  # NCCL puts one rank per GPU
    rows = B.bench("all_reduce", ws, "1K:1M", iters=5, warmup=2, algorithms=["builtin", "ring"], backend="nccl",
                   references=False, progress=False, as_frame=False)
    assert len(rows) == 2 * 11
    assert all(r["ok"] and r["backend"] == "nccl" and r["world_size"] == ws for r in rows)
    assert all(0 < r["time_min_s"] <= r["time_s"] <= r["time_max_s"] for r in rows)


# ------------------------------------------------------------------------------------------------
# Segmented execution (collnb.algorithms.execution.SEGMENT_BYTES): large messages travel in segments and
# reductions start on the first segment; the results must not change

def _segmented_vs_builtin(rank, world_size, seg_bytes, nelem):
    import torch.distributed as dist

    from collnb.algorithms import execution as E
    from collnb.algorithms import run as R
    from collnb.algorithms import schedules as A
    old = E.SEGMENT_BYTES
    E.SEGMENT_BYTES = seg_bytes
    try:
        out = {}
        for primitive in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"):
            for alg in A.algorithms_for(primitive):
                sched = A.schedule(primitive, alg, world_size)
                count = nelem // world_size * world_size
                bounds = A.chunk_bounds(count, sched.n_chunks)
                inp = (torch.arange(count, dtype=torch.float32) % 13) + 17 * rank
                work = R._start_buffer(primitive, rank, world_size, inp, sched.n_chunks, bounds)
                E.execute(sched, work, bounds=bounds, send_from=inp if primitive == "all_to_all" else None)
                ref = R._builtin(primitive, rank, world_size, inp, "sum", 0, sched.n_chunks)
                defined = sched.defined[rank]
                same = all(torch.equal(work[bounds[c]:bounds[c + 1]], ref[bounds[c]:bounds[c + 1]])
                           for c in range(sched.n_chunks) if defined[c])
                out[(primitive, alg)] = same
        dist.barrier()
        return out
    finally:
        E.SEGMENT_BYTES = old


@pytest.mark.parametrize("ws", [3, 4])
def test_segmented_messages_give_the_builtin_result(ws):
    import collnb
    from collnb.algorithms import execution as A
    assert A._segments(10, 4) == [(0, 10)]
    A_old = A.SEGMENT_BYTES
    try:
        A.SEGMENT_BYTES = 64
        segs = A._segments(100, 4)  # 400 bytes in 16-element (64-byte) segments
        assert segs[0] == (0, 16) and segs[-1] == (96, 100) and len(segs) == 7
    finally:
        A.SEGMENT_BYTES = A_old
    res = collnb.launch(_segmented_vs_builtin, ws, args=(256, 12 * 1024 + 7), debug=False, timeout=300)
    for r in range(ws):
        bad = [k for k, ok in res[r].items() if not ok]
        assert not bad, (r, bad)


@pytest.fixture
def chinese():
    """Speak Chinese for one test, then English again (``collnb.set_language``)."""
    from collnb import i18n
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def test_the_bandwidth_figure_and_table_speak_chinese_with_nccl_tests_names_kept(chinese):
    rows = _synthetic(["builtin", "ring"], [2], SIZES)
    fig = B.plot(rows)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("all_reduce，world size 2：时间（2 个 rank 跑在 ")
    assert titles[1] == "all_reduce，world size 2：总线带宽 busbw（nccl-tests）"
    assert [ax.get_xlabel() for ax in fig.axes[:2]] == ["每个 rank 的字节数"] * 2
    labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    assert any(lab.startswith("ring 拟合：α=35 µs，1/β=") for lab in labels)
    assert any(lab.startswith("朴素模型（") for lab in labels)
    notes = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "虚线：对这些点拟合的 α-β-γ 模型" in notes
    import warnings
    with warnings.catch_warnings():  # every translated text has its glyphs in the figure's fonts (no tofu)
        warnings.simplefilter("error")
        fig.canvas.draw()
    header, first = B.format_table(rows).splitlines()[:2]
    # the words translated, right-aligned by display columns; nccl-tests' column names as nccl-tests prints them
    assert header.startswith(" " * 6 + "通信原语" + " " * 15 + "算法  ws    dtype       size")
    assert header.endswith("algbw GB/s busbw GB/s  ok")
    # the columns end where the rows' do, counted in display columns (a CJK character takes two)
    assert U_width(header[:header.index("ws") + 2]) == U_width(first[:first.index(" 2 ") + 2])
    assert U_width(header[:header.index("算法") + 2]) == U_width(first[:first.index("builtin") + 7])


def test_a_chinese_note_wraps_by_display_columns(chinese):
    from collnb.labs.bench import figure
    text = "总线带宽" * 30 + " all_reduce busbw " + "时间" * 20
    lines = figure._wrap(text, 40, subsequent_indent="   ")
    assert "".join(line.strip() for line in lines).replace(" ", "") == text.replace(" ", "")
    assert all(U_width(line) <= 40 for line in lines) and len(lines) >= 5
    assert [line[0] for line in figure._wrap("一二三四五六七八九，十一二三四五", 18)] == ["一", "十"]
    assert figure._wrap("plain English words " * 20, 40) == __import__("textwrap").wrap("plain English words " * 20, 40)


def U_width(text):
    from collnb.units import display_width
    return display_width(text)


def test_bench_argument_errors_are_chinese_when_chinese_is_spoken(chinese, capsys):
    assert main(["bench", "all_reduce", "--sizes", "64M:1K"]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == ("错误：--sizes '64M:1K'：MIN（67108864 B）大于 MAX（1024 B）；"
                                               "请把较小的大小写在前面，例如 1K:64M")
    assert main(["bench", "all_reduce", "-a", "tree"]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith("错误：all_reduce 的算法 'tree' 不存在；请从以下选择：builtin, ring")


def test_the_example_files_note_and_a_fits_line_are_in_the_language_spoken():
    """Issue 34: the Chinese bandwidth notebook printed the example file's note and every fit in English."""
    import collnb
    from collnb import bench as B
    from collnb import costmodel as cm

    fits = cm.fit_each(B.load(B.EXAMPLE_FILE))
    try:
        collnb.set_language("en")
        assert B.note(B.EXAMPLE_FILE).startswith("EXAMPLE measured on CPU, not a GPU")
        assert "relative RMS error" in str(next(iter(fits.values())))
        collnb.set_language("zh")
        assert B.note(B.EXAMPLE_FILE).startswith("示例：在 CPU 上测得")
        assert "相对均方根误差" in str(next(iter(fits.values())))
    finally:
        collnb.set_language(None)
