"""python -m collnb: run, examples, exit codes, and the subcommands the parser has.

Argument-only tests call :func:`collnb.cli.main` in this process (no interpreter start-up); one
test runs ``python -m collnb`` as a subprocess, the way a learner does."""

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from collnb.views import heatmap as H
from collnb.cli import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, build_parser, main


def _cli(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "collnb", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_run_prints_ranks_like_the_original_examples_and_writes_png(tmp_path):
    png = tmp_path / "ar.png"
    out = _cli("run", "all_reduce", "--world-size", "3", "--png", str(png))
    assert out.returncode == EXIT_OK, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "all_reduce (SUM) · world size 3 · float32 · gloo"
    assert "[rank 0] before: [0.0, 1.0, 2.0]" in lines
    assert "[rank 2] before: [20.0, 21.0, 22.0]" in lines
    for r in range(3):
        assert f"[rank {r}] after : [30.0, 33.0, 36.0]  ✓" in lines
    assert f"heatmap written to {png}" in lines
    img = np.asarray(Image.open(png).convert("RGB"))
    assert img.shape[0] > 300 and img.shape[1] > 600
    colours = {tuple(p) for p in img.reshape(-1, 3)[::7]}
    for r in range(3):  # every rank's colour is painted
        assert tuple(int(v * 255 + 0.5) for v in H.rank_color(r)) in colours


@pytest.mark.slow
def test_run_int8_shows_the_wrap_and_the_exact_result(capsys):
    assert main(["run", "all_reduce", "-n", "8", "--dtype", "int8"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "[rank 7] after : [24, 32, 40, 48, 56, 64, 72, 80]  ✓" in out
    assert "[rank 0] exact : [280.0, 288.0, 296.0, 304.0, 312.0, 320.0, 328.0, 336.0]" in out


def test_bad_choice_exits_2_with_the_choices(capsys):
    for argv, word in ((["run", "all_reduse"], "invalid choice: 'all_reduse'"),
                       (["run", "all_reduse"], "all_reduce"),
                       (["seeds"], "invalid choice: 'seeds'"),  # the old name of `examples` is gone
(["run", "all_reduce", "--dtype", "float128"], "bfloat16"),
                       (["run", "all_reduce", "--op", "mean"], "bxor"),
                       (["run", "all_reduce", "--backend", "mpi"], "nccl"),
                       (["run"], "PRIMITIVE")):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == EXIT_USAGE
        assert word in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["run", "all_reduce", "--dtype", "int8", "--op", "avg"], ["AVG", "Valid ops for int8"]),
    (["run", "reduce", "--root", "9"], ["root must be a rank, an int from 0 to 3 (world size 4); got 9"]),
    (["run", "broadcast", "--op", "max"], ["broadcast does not use op", "ops apply to reduce, "]),
    (["run", "all_reduce", "--backend", "nccl"], ["NCCL needs CUDA", "gloo"]),
    (["run", "all_reduce", "--world-size", "40"], ["world_size must be an int from 1 to 16; got 40"]),
    (["run", "broadcast", "--dtype", "float8_e4m3fn"], ["float8_e4m3fn", "bfloat16"]),
])
def test_invalid_runs_exit_2_with_a_clear_message(capsys, argv, words):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    for w in words:
        assert w in err, (w, err)


def test_main_in_process_reports_undefined_ranks(capsys):
    assert main(["run", "reduce", "-n", "3", "--root", "1", "--op", "max"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "[rank 1] after : [20.0, 21.0, 22.0]  ✓" in out
    assert "[rank 0] after :" in out and "(undefined: only dst=1's output is defined)" in out


def test_mismatch_exit_code(monkeypatch, capsys):
    from collnb.collectives import primitives as P
    real = P._run_planned  # what collnb.run and run_batch run once their launch is planned

    def broken(*a, **k):
        res = real(*a, **k)
        res[0].after[0][0] = 42.0
        res[0].check()
        return res
    monkeypatch.setattr(P, "_run_planned", broken)
    assert main(["run", "all_gather", "-n", "2"]) == EXIT_MISMATCH
    assert "✗ expected [0.0, 10.0]" in capsys.readouterr().out


def test_examples_every_scenario_with_check_marks(capsys):
    assert main(["examples"]) == EXIT_OK
    text = capsys.readouterr().out
    # the Gloo tutorial script: world size 2, printed as its script prints
    assert "[rank 1] rank: 1, objects: ['foo', 12, {'key': 'value'}]  ✓" in text
    assert "[rank 1] tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])  ✓" in text
    assert "[rank 0] before allreduce, rank: 0, tensor: tensor([0, 1])" in text
    assert "[rank 1] after allreduce, rank: 1, tensor: tensor([2, 4])  ✓" in text
    assert ("[rank 0] after gather, rank: 0, output: [tensor([0]), tensor([1])], "
            "concat output: tensor([0, 1])  ✓") in text
    assert "[rank 1] scatter_list: [tensor([1., 1.]), tensor([3., 3.])], rank: 1, output: tensor([3., 3.])  ✓" in text
    # the teaching page: world size 4
    assert "[rank 3] after : [1.0, 2.0, 3.0]  ✓" in text
    assert "[rank 3] received: [6.0, 7.0]  ✓" in text
    assert "[rank 0] gathered: [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]  ✓" in text
    assert "[rank 0] after : [10.0, 10.0, 10.0, 10.0]  ✓" in text
    assert "(undefined: only dst=0's result is defined)" in text
    assert "[rank 2] gathered: [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]  ✓" in text
    assert "[rank 3] reduce_scatter result: [72.0, 72.0]  ✓" in text
    assert "[rank 3] dist.reduce_scatter result: [72.0, 72.0]  ✓" in text  # native: detected
    assert "[rank 1] received: [[1.0, 1.0], [11.0, 11.0], [21.0, 21.0], [31.0, 31.0]]  ✓" in text
    assert "[rank 1] dist.all_to_all received: [[1.0, 1.0], [11.0, 11.0], [21.0, 21.0], [31.0, 31.0]]  ✓" in text
    assert "[rank 2] after : [10.0, 10.0, 10.0, 10.0]  ✓" in text
    assert "✗" not in text
    assert text.rstrip().splitlines()[-1].startswith("✓ ")
    assert "13 scenarios from 2 documents" in text
    assert "== original example 1: 'PyTorch collective communication' script · cm_broadcast_demo" in text
    assert text.count("== ") == 13


def test_parser_has_every_subcommand_from_its_module():
    """cli.main imports each subcommand module directly; every one adds its subparser."""
    from collnb.cli import SUBCOMMANDS
    names = [m.__name__.rsplit(".", 1)[1] for m in SUBCOMMANDS]
    assert names == ["run", "examples", "script", "replay", "bench", "redistribute", "present", "doctor", "explain"]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == names
    for name in names:
        assert callable(build_parser().parse_args(
            [name] + {"run": ["all_reduce"], "script": ["all_reduce", "-o", "x.py"],
                      "bench": ["all_reduce"], "redistribute": ["--src", "S(0),R", "--dst", "R,R"]}.get(name, [])).func)


@pytest.mark.parametrize("argv, text", [
    (["run", "all_reduce", "--png", "/nonexistent-dir/x.png"], "does not exist; create it first"),
    (["run", "all_reduce", "--png", "/tmp"], "is a directory"),
    (["replay", "all_reduce", "--trace", "/tmp/x.txt"], "must end with .json or .npz"),
    (["replay", "all_reduce", "--gif", "/tmp/x.gif", "--fps", "0"], "--fps must be a number from 0.01 to 50.0 (frames per second); got 0.0"),
        (["replay", "all_reduce", "--gif", "/tmp/x.gif", "--fps", "0.001"], "--fps must be a number from 0.01 to 50.0 (frames per second); got 0.001"),
    # a folder that takes no new file (to root it even looks writable): found before the run, not after it
    (["run", "all_reduce", "--png", "/proc/x.png"], "--png '/proc/x.png'"),
    (["bench", "all_reduce", "--json", "/proc/x.json"], "--json '/proc/x.json'"),
    (["replay", "all_reduce", "--gif", "/sys/x.gif"], "--gif '/sys/x.gif'"),
])
def test_bad_output_arguments_are_refused_before_any_rank_runs(argv, text, capsys):
    assert main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert text in err and "Traceback" not in err
    assert "[rank" not in out  # nothing ran


def test_a_folder_that_refuses_files_is_named_with_the_reason():
    from collnb.cli.common import output_problem
    problem = output_problem("/proc/x.png", "--png", (".png",))
    assert problem is not None and problem.startswith("--png '/proc/x.png'")
    assert problem.endswith(("cannot be written: No such file or directory", "is not writable")), problem


def test_the_output_check_leaves_no_file_and_keeps_an_existing_one(tmp_path):
    from collnb.cli.common import output_problem
    new = tmp_path / "new.png"
    assert output_problem(str(new), "--png", (".png",)) is None and not new.exists()
    old = tmp_path / "old.png"
    old.write_bytes(b"keep me")
    assert output_problem(str(old), "--png", (".png",)) is None and old.read_bytes() == b"keep me"


@pytest.fixture
def chinese():
    """Speak Chinese for one test, then English again (``collnb.set_language``)."""
    from collnb import i18n
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def test_run_speaks_chinese_under_collnb_lang_zh_and_keeps_the_ranks_lines():
    import os
    env = dict(os.environ, COLLNB_LANG="zh")
    out = subprocess.run([sys.executable, "-m", "collnb", "run", "all_reduce", "--world-size", "2"],
                         capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == EXIT_OK, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "all_reduce (SUM) · world size 2 · float32 · gloo"  # API words stay English
    assert "[rank 1] after : [10.0, 12.0]  ✓" in lines  # the original examples' own format
    assert lines[-1] == "✓ 每个有定义的输出都与参考值一致"


def test_help_and_argument_errors_are_chinese_when_chinese_is_spoken(chinese, capsys):
    top = build_parser().format_help()
    assert "在真实的 rank 上运行 PyTorch 集合通信操作" in top
    assert "在真实 rank 上运行一个通信原语，并打印每个 rank 操作前后的数据" in top
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    run_help = capsys.readouterr().out
    assert "rank 的个数，1-16（默认 4）" in run_help and "进程组后端（默认 gloo）" in run_help
    assert "number of ranks" not in run_help
    assert main(["run", "all_reduce", "--world-size", "40"]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == "错误：world_size 必须是 1 到 16 之间的整数；收到的是 40"
    assert main(["run", "broadcast", "--op", "max"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("错误：collnb.run：broadcast 不使用 op（它不合并数值，所以不接受规约运算；规约运算只适用于 reduce, ")


def test_help_is_english_again_after_chinese(chinese, capsys):
    from collnb import i18n
    i18n.set_language("en")
    assert "number of ranks, 1-16 (default 4)" in build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    assert main(["run", "all_reduce", "--world-size", "40"]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == "error: world_size must be an int from 1 to 16; got 40"
