"""The primitive explorer's parameter model without widgets or ranks: ``choices`` and ``update`` of
``collnb.views.controls`` on a made-up backend support table (what a backend accepted is given
here, so the expected choices follow from the table, not from a probe)."""
import pytest

from collnb.collectives import BackendSupport
from collnb.views.controls import ExplorerParams, Facts, choices, fix, update

INFOS = {"gloo": dict(backend="gloo", available=True, max_world_size=16, reason=""),
         "nccl": dict(backend="nccl", available=False, max_world_size=0, reason="NCCL needs CUDA GPUs")}

# all_reduce: float32 takes sum/avg/max, int8 sum/max (no avg), float16 sum; broadcast: float32, int8
_TABLE = {("all_reduce", "float32", "sum"): None, ("all_reduce", "float32", "avg"): None,
          ("all_reduce", "float32", "max"): None, ("all_reduce", "int8", "sum"): None,
          ("all_reduce", "int8", "max"): None, ("all_reduce", "int8", "avg"): "RuntimeError: no avg",
          ("all_reduce", "float16", "sum"): None, ("all_reduce", "bfloat16", "sum"): None,
          ("all_reduce", "int16", "sum"): "RuntimeError: no int16",
          ("broadcast", "float32", None): None, ("broadcast", "int8", None): None,
          ("reduce", "float32", "sum"): None, ("gather_object", None, None): None}


def facts(primitives=("all_reduce", "broadcast", "reduce", "gather_object"), infos=INFOS):
    asked = []

    def support(backend):
        asked.append(backend)
        return BackendSupport(backend, "test", 2, dict(_TABLE))
    f = Facts(tuple(primitives), infos, support)
    f.asked = asked
    return f


def test_choices_follow_the_support_table_and_the_primitive():
    f = facts()
    c = choices(ExplorerParams("all_reduce", 4), f)
    assert c["primitive"] == ["all_reduce", "broadcast", "reduce", "gather_object"]
    assert c["backend"] == ["gloo"]  # nccl cannot run here
    assert c["world_size"] == list(range(1, 17))
    assert c["dtype"] == ["float32", "float16", "bfloat16", "int8"]  # DTYPE_NAMES order, int16 refused
    assert c["op"] == ["sum", "max", "avg"]  # REDUCE_OPS order
    assert set(choices(ExplorerParams("all_reduce", 4, "int8"), f)["op"]) == {"sum", "max"}
    assert c["root"] == []  # all_reduce has no src/dst: hidden
    assert [k for _, k in c["inputs"]] == ["teaching", "int8_wrap", "fp16_inf", "bf16_round", "rank_ids"]
    assert c["inputs"][1][0] == "100 on every rank: int8 SUM wraps past 127 (4 ranks: 400 → -112)"
    b = choices(ExplorerParams("broadcast", 3, root=2), f)
    assert b["op"] == [] and b["root"] == [0, 1, 2] and b["dtype"] == ["float32", "int8"]
    o = choices(ExplorerParams("gather_object", 3), f)
    assert o["dtype"] == o["op"] == o["inputs"] == o["chunk_size"] == [] and o["root"] == [0, 1, 2]
    assert f.asked == ["gloo"]  # support asked once for the explorer's life, not per look-up


def test_a_world_size_move_clamps_the_root_and_keeps_the_rest():
    f = facts()
    p = ExplorerParams("reduce", 3, root=2)
    q, notes, info = update(p, {"world_size": 2}, f)
    assert q == ExplorerParams("reduce", 2, root=1) and notes == [] and info == []
    q, notes, _ = update(q, {"root": 5}, f)  # asked for: said so, in the vocabulary's words
    assert q.root == 1 and notes == ["dst must be a rank, an int from 0 to 1 (world size 2); got 5; showing dst=1"]
    # the backend's limit clamps the world size
    small = dict(INFOS, gloo=dict(INFOS["gloo"], max_world_size=4))
    q, _, _ = update(ExplorerParams("all_reduce", 4), {"world_size": 8}, facts(infos=small))
    assert q.world_size == 4


def test_a_dtype_change_drops_an_op_it_cannot_take_and_says_why():
    f = facts()
    q, notes, _ = update(ExplorerParams("all_reduce", 2, "float32", "avg"), {"dtype": "int8"}, f)
    assert (q.dtype, q.op) == ("int8", "sum")
    assert len(notes) == 1 and notes[0].startswith("op AVG is not valid for int8 with gloo in all_reduce")
    assert "Showing SUM." in notes[0]
    q, notes, _ = update(q, {"dtype": "int16"}, f)  # refused by the table: float32 shown, the valid listed
    assert q.dtype == "float32" and "cannot run all_reduce on int16" in notes[0]
    assert "float32, float16, bfloat16, int8" in notes[0]
    q, notes, _ = update(q, {"dtype": "fp16", "op": "MAX"}, f)  # aliases and any case
    assert (q.dtype, q.op) == ("float16", "sum") and "op MAX is not valid for float16" in notes[0]


def test_a_preset_sets_what_its_lesson_needs_and_a_value_given_with_it_wins():
    f = facts()
    q, notes, info = update(ExplorerParams("all_reduce", 1), {"inputs": "int8_wrap"}, f)
    assert (q.world_size, q.dtype, q.op, q.inputs) == (2, "int8", "sum", "int8_wrap") and notes == []
    assert info == ["preset “100 on every rank: int8 SUM wraps past 127 (2 ranks: 200 → -56)” set dtype "
                    "float32 → int8, world size 1 → 2 (the effect needs at least 2 ranks)"]
    q, _, info = update(ExplorerParams("all_reduce", 8), {"inputs": "fp16_inf", "dtype": "bfloat16"}, f)
    assert (q.world_size, q.dtype) == (8, "bfloat16") and info[0].endswith("world size 8 kept")
    q, _, info = update(ExplorerParams("broadcast", 4, "int8"), {"inputs": "special_floats"}, f)
    assert q.dtype == "float32" and "dtype int8 → float32" in info[0] and "world size 4 kept" in info[0]
    # a primitive the preset shows nothing for: back to the teaching values, said so
    q, _, info = update(ExplorerParams("all_reduce", 4, inputs="fp16_inf"), {"primitive": "broadcast"}, f)
    assert q.inputs == "teaching" and "shows nothing for broadcast" in info[0]


def test_fix_replaces_what_is_not_offered_and_is_idempotent():
    f = facts()
    start = ExplorerParams("all_reduce", 4, "int16", "avg", backend="nccl")
    p, notes, _ = fix(start, f)
    assert p == ExplorerParams("all_reduce", 4, "float32", "avg", backend="gloo")
    assert notes[0] == "backend 'nccl' cannot run here (NCCL needs CUDA GPUs); showing 'gloo'"
    assert "cannot run all_reduce on int16" in notes[1]
    assert fix(p, f) == (p, [], [])
    with pytest.raises(ValueError, match="unknown control"):
        update(p, {"colour": "red"}, f)


def test_an_unknown_dtype_is_noted_and_ignored():
    q, notes, _ = update(ExplorerParams("all_reduce", 2), {"dtype": "float13"}, facts())
    assert q.dtype == "float32" and notes and "float13" in notes[0]
