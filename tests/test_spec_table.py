"""The spec table (collnb.collectives.specs) is the one place a primitive is described: adding one
row makes it run on real ranks, gives it a torchrun script, a bandwidth-lab measurement and a place
in the explorer, with nothing else changed.

The proof: a copy of the package with one more row, ``all_reduce_coalesced`` (a real
torch.distributed call whose buffer is a list of one-chunk tensors reduced in place, a shape no
other row has), imported in a fresh process.
"""
import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import collnb
from collnb.collectives import SPECS, Buffer, TorchCall
from collnb.collectives.specs import call_line

from test_script import _printed, _torchrun_local

#: The row a contributor would add to specs.py (before the derived tuples).
TOY_ROW = '''
_spec(name="all_reduce_coalesced", summary="like all_reduce, on a list of one-chunk tensors at once",
      kind="tensor", reduces=True, root_name=None, busbw=_ring_bus,
      buffers=(Buffer("tensors", "inout", "world", "tensors"),), call=_call("all_reduce_coalesced", "tensors", op="op"),
      sources=_all_ranks_same_chunk)
'''

#: What the fresh process does with the new row: run it, write its script, bench it, explore it.
PROBE = r'''
import json, sys
import collnb
from collnb import bench
from collnb.collectives import BENCH_PRIMITIVES, PRIMITIVES, REDUCING_PRIMITIVES, SPECS
from collnb.labs.script import script_text
from collnb.views.controls import choices

toy = "all_reduce_coalesced"
out = {"file": collnb.__file__, "listed": [toy in PRIMITIVES, toy in REDUCING_PRIMITIVES, toy in BENCH_PRIMITIVES],
       "call": SPECS[toy].call, "script": script_text(toy, op="max")}
runs = []
for ws, op, dtype, cs in ((1, "sum", "float32", 1), (3, "max", "int32", 2), (5, "sum", "bfloat16", 1)):
    r = collnb.run(toy, ws, op=op, dtype=dtype, chunk_size=cs)
    runs.append({"ok": r.ok, "after": [t.float().tolist() for t in r.after], "ws": ws, "op": op, "cs": cs})
out["runs"] = runs
rows = bench.bench(toy, world_sizes=(2, 3), sizes="64:128", iters=2, warmup=1, references=False, progress=False,
                   as_frame=False)
out["bench"] = [{k: r[k] for k in ("primitive", "world_size", "nbytes", "ok", "algbw_GBps", "busbw_GBps")} for r in rows]
from collnb.cli import build_parser
commands = build_parser()._subparsers._group_actions[0].choices
out["cli"] = {name: toy in commands[name]._actions[1].choices for name in ("run", "script", "bench")}
ex = collnb.explore(toy, world_size=3, op="max")
out["explorer"] = {"ok": ex.last_result.ok, "primitive": list(ex.controls["primitive"].options),
                   "op": list(ex.controls["op"].options), "inputs": [k for _, k in choices(ex.state, ex.facts)["inputs"]]}
ex.close()
collnb.shutdown()
print("RESULT " + json.dumps(out))
'''


def _package_with_row(tmp_path: Path, row: str) -> Path:
    root = tmp_path / "pkg"
    shutil.copytree(Path(collnb.__file__).parent, root / "collnb", ignore=shutil.ignore_patterns("__pycache__"))
    specs = root / "collnb" / "collectives" / "specs.py"
    text = specs.read_text()
    marker = "#: Every primitive :func:`run` knows, in teaching order."
    assert text.count(marker) == 1
    specs.write_text(text.replace(marker, row.strip() + "\n\n" + marker))
    return root


@pytest.mark.slow
@pytest.mark.cluster  # torchrun
def test_a_new_row_runs_on_ranks_in_a_script_in_the_bench_and_the_explorer(tmp_path):
    root = _package_with_row(tmp_path, TOY_ROW)
    env = dict(os.environ, PYTHONPATH=str(root), XDG_CACHE_HOME=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["file"].startswith(str(root)), out["file"]  # the copy with the new row, not this checkout
    assert out["listed"] == [True, True, True]
    assert out["call"] == "dist.all_reduce_coalesced(tensors, op=OP)"
    assert out["cli"] == {"run": True, "script": True, "bench": True}  # python -m collnb run/script/bench TOY
    # real ranks: every rank ends with the op over every rank's chunk c (teaching values 10*r + c)
    for run in out["runs"]:
        ws, cs = run["ws"], run["cs"]
        fold = max if run["op"] == "max" else sum
        want = [float(fold(10 * r + c for r in range(ws))) for c in range(ws) for _ in range(cs)]
        assert run["ok"] and run["after"] == [want] * ws, run
    # the bench: checked on every iteration, nccl-tests' all_reduce factor from the row
    assert [(r["world_size"], r["nbytes"]) for r in out["bench"]] == [(2, 64), (2, 128), (3, 60), (3, 120)]
    for r in out["bench"]:
        n = r["world_size"]
        assert r["ok"] and r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (n - 1) / n, rel=1e-12), r
    # the explorer offers it, with the ops and the reducing primitives' inputs presets
    assert out["explorer"] == {"ok": True, "primitive": ["all_reduce_coalesced"],
                               "op": out["explorer"]["op"], "inputs": ["teaching", "int8_wrap", "fp16_inf",
                                                                       "bf16_round", "rank_ids"]}
    assert {"sum", "max", "min"} <= set(out["explorer"]["op"])
    # the script needs only torch: under torchrun every rank prints the MAX of every rank's chunk c
    path = tmp_path / "all_reduce_coalesced.py"
    path.write_text(out["script"])
    printed = _printed(_torchrun_local(path, tmp_path))
    assert printed[(0, "before")] == [0.0, 1.0] and printed[(1, "after")] == [10.0, 11.0], printed


def test_a_rows_line_is_written_from_its_call():
    """The line above a heatmap comes from the row's TorchCall: a buffer only the root holds reads
    ``x if rank == src else None``, the root ``root``, the op ``OP``; the device is left out."""
    assert SPECS["scatter"].call == "dist.scatter(output, scatter_list if rank == src else None, src=root)"
    assert SPECS["broadcast_object_list"].call == "dist.broadcast_object_list(object_list, src=root)"
    toy = TorchCall("reduce", ("tensor",), (("dst", "root"), ("op", "op"), ("device", "device")))
    assert call_line(toy, (Buffer("tensor", "inout", "world", "tensor"),), "dst") == "dist.reduce(tensor, dst=root, op=OP)"
    for spec in SPECS.values():
        if spec.torch_call is not None:
            assert spec.call == call_line(spec.torch_call, spec.buffers, spec.root_name)
            names = {b.name for b in spec.buffers}
            assert set(spec.torch_call.args) == names, spec.name  # every buffer is an argument, once


def test_every_row_reads_one_buffer_and_its_chunk_counts_follow_from_it():
    for spec in SPECS.values():
        if not spec.buffers:
            assert spec.kind == "time"
            continue
        for ws in (1, 3, 4):
            for root in range(ws):
                for r in range(ws):
                    assert spec.n_in(ws, r, root) == spec.input_buffer().count(ws, r, root)
                    assert spec.n_out(ws, r, root) == spec.output_buffer().count(ws, r, root)


def test_the_scripts_are_written_from_the_rows(tmp_path):
    """A script's call is the row's call with the root as the variable src/dst and the op as
    dist.ReduceOp.X; scatter's src alone builds a scatter_list, gather's dst alone a gather_list."""
    from collnb.labs.script import script_text
    body = script_text("scatter", root=1).split("def main(rank, world_size, device):")[1]
    assert "    src = 1\n    output = torch.zeros(1, device=device)\n    if rank == src:\n" in body
    assert "dist.scatter(output, scatter_list, src=src)" in body and "dist.scatter(output, None, src=src)" in body
    assert "dist.reduce_scatter_single(output, input, op=dist.ReduceOp.MAX)" in script_text(
        "reduce_scatter_single", op="max")
    assert "object_list = [None] * world_size if rank == dst else None" in script_text("gather_object")
    for name in SPECS:
        ast.parse(script_text(name))
