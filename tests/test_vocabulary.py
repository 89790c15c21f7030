"""collnb.vocabulary and collnb.units: the one check and the one formatter for each word, with
their exact words (every entry point reuses them), and without torch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from collnb import units as U
from collnb import vocabulary as V

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("call, exc, words", [
    (lambda: V.check_world_size(0), ValueError, "world_size must be an int from 1 to 16; got 0"),
    (lambda: V.check_world_size(17), ValueError, "world_size must be an int from 1 to 16; got 17"),
    (lambda: V.check_world_size(2.0), TypeError, "world_size must be an int from 1 to 16; got 2.0"),
    (lambda: V.check_world_size(True), TypeError, "world_size must be an int from 1 to 16; got True"),
    (lambda: V.check_world_size(5, 4, why="4 engines"), ValueError, "world_size must be an int from 1 to 4 (4 engines); got 5"),
    (lambda: V.check_rank(4, 4), ValueError, "root must be a rank, an int from 0 to 3 (world size 4); got 4"),
    (lambda: V.check_rank(-1, 2, "src"), ValueError, "src must be a rank, an int from 0 to 1 (world size 2); got -1"),
    (lambda: V.check_rank("1", 4), TypeError, "root must be a rank, an int from 0 to 3 (world size 4); got '1'"),
    (lambda: V.check_backend("mpi"), ValueError, "unknown backend 'mpi'; choose one of: gloo, nccl"),
    (lambda: V.check_backend(None), TypeError, "backend must be a name (str), one of: gloo, nccl; got None"),
    (lambda: V.check_choice("algorithm", "x", ("ring",)), ValueError, "unknown algorithm 'x'; choose one of: ring"),
    (lambda: V.check_int("chunk_size", 0, 1, 64, what="elements per chunk"), ValueError,
     "chunk_size must be an int from 1 to 64 (elements per chunk); got 0"),
    (lambda: V.check_int("iters", "3", 1), TypeError, "iters must be an int >= 1; got '3'"),
    (lambda: V.check_real("fps", float("inf"), 0.01, 50.0), ValueError, "fps must be a number from 0.01 to 50.0; got inf"),
    (lambda: V.check_real("fps", "2", 0.01, 50.0), TypeError, "fps must be a number from 0.01 to 50.0; got '2'"),
    (lambda: V.dtype_name("float128"), ValueError, "unknown dtype 'float128'; choose one of: float32, float64"),
    (lambda: V.dtype_name(3), TypeError, "dtype must be a torch.dtype or its name (str)"),
    (lambda: V.op_name("mean"), ValueError, "unknown reduce op 'mean'; choose one of: sum, product, min, max, avg"),
    (lambda: V.op_name(3), TypeError, "op must be a name (str) or a torch.distributed.ReduceOp, not the number 3"),
])
def test_each_mistake_has_one_type_and_one_wording(call, exc, words):
    with pytest.raises(exc, match=re.escape(words)):
        call()


def test_names_are_normalised():
    import torch
    import torch.distributed as dist
    assert [V.dtype_name(x) for x in ("fp16", "torch.bfloat16", "  Double ", torch.int8)] == \
        ["float16", "bfloat16", "float64", "int8"]
    assert [V.op_name(x) for x in (None, "PROD", "Sum", dist.ReduceOp.BXOR)] == ["sum", "product", "sum", "bxor"]
    assert V.check_world_size(16) == 16 and V.check_rank(3, 4) == 3 and V.check_real("x", 2, 1, 3) == 2.0
    assert V.op_hint("avg", "int32") == " AVG divides by the world size, so it needs a floating-point dtype."
    assert V.op_hint("avg", "bfloat16") == "" and V.op_hint("band", "float32").startswith(" Bitwise ops")
    assert all(isinstance(getattr(torch, n), torch.dtype) for n in V.DTYPE_NAMES)  # every name exists in torch


@pytest.mark.parametrize("n, text, tick", [
    (0, "0 B", "0"), (12, "12 B", "12"), (1023, "1023 B", "1023"), (1024, "1 KiB", "1K"), (1536, "1.5 KiB", "1.5K"),
    (64 << 20, "64 MiB", "64M"), (3 * (1 << 20) + 12345, "3.01 MiB", "3.01M"), (1 << 30, "1 GiB", "1G"),
    (-2048, "-2 KiB", "-2K"),
])
def test_format_bytes(n, text, tick):
    assert U.format_bytes(n) == text and U.format_bytes(n, compact=True) == tick


def test_format_seconds_and_rate():
    assert [U.format_seconds(s) for s in (0, 2.5e-6, 0.0123, 1.5, 3e-10, 123.456)] == \
        ["0 s", "2.5 µs", "12.3 ms", "1.5 s", "0.3 ns", "123 s"]
    assert U.format_rate(1.5e9) == "1.5 GB/s" and U.format_rate(12345678.9) == "0.0123 GB/s"


def test_layer_zero_imports_no_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from collnb import units, vocabulary as V\n"
            "print(V.dtype_name('fp16'), V.op_name('max'), units.format_bytes(4096))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["float16", "max", "4", "KiB"]


@pytest.fixture
def chinese():
    """Speak Chinese for one test, then English again (``collnb.set_language``)."""
    from collnb import i18n
    i18n.set_language("zh")
    yield
    i18n.set_language("en")


def test_check_errors_are_chinese_when_chinese_is_spoken_with_the_names_kept(chinese):
    with pytest.raises(ValueError) as raised:
        V.check_world_size(0)
    assert str(raised.value) == "world_size 必须是 1 到 16 之间的整数；收到的是 0"
    with pytest.raises(ValueError) as raised:
        V.check_rank(5, 4, "dst")
    assert str(raised.value) == "dst 必须是一个 rank，即从 0 到 3 的整数（world size 为 4）；收到的是 5"
    with pytest.raises(ValueError) as raised:
        V.check_choice("primitive", "allreduce", ("broadcast", "all_reduce"))
    assert str(raised.value) == "通信原语 'allreduce' 不存在；请从以下选择：broadcast, all_reduce"
    with pytest.raises(ValueError) as raised:
        V.op_name("mean")
    assert str(raised.value).startswith("未知的规约运算 'mean'；请从以下选择：sum, product")
    with pytest.raises(TypeError) as raised:
        V.check_int("chunk_size", "x", 1, 64, what="elements per chunk")
    assert str(raised.value) == "chunk_size 必须是 1 到 64 之间的整数（每块元素数）；收到的是 'x'"
    assert V.op_hint("avg", "int32") == " AVG 要除以 world size，所以需要浮点 dtype。"


def test_check_errors_are_english_again_after_chinese(chinese):
    from collnb import i18n
    i18n.set_language("en")
    with pytest.raises(ValueError, match=r"^world_size must be an int from 1 to 16; got 0$"):
        V.check_world_size(0)
    with pytest.raises(ValueError, match=r"^unknown backend 'mpi'; choose one of: gloo, nccl$"):
        V.check_backend("mpi")


def test_pad_aligns_by_display_columns():
    assert U.display_width("rank") == 4 and U.display_width("通信原语") == 8 and U.display_width("✓ α") == 3
    assert U.pad("ws", 5, ">") == f"{'ws':>5}" and U.pad("ws", 5) == f"{'ws':<5}"
    assert U.pad("算法", 6, ">") == "  算法" and U.pad("算法", 6) == "算法  " and U.pad("太长的词", 3) == "太长的词"
    with pytest.raises(ValueError, match="align must be"):
        U.pad("x", 3, "^")
