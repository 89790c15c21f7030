"""Standalone torchrun scripts (python -m collnb script, collnb.to_script), run for real under
``torchrun --nproc-per-node 2`` and as two "nodes" (two torchrun processes, c10d rendezvous on
127.0.0.1 and a free port), every rank's printed values checked against collnb's reference."""

import ast
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

import collnb
import collnb.collectives as P
from collnb.labs.script import SCRIPT_PRIMITIVES, script_text, to_script

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
_LINE = re.compile(r"^rank (\d+) (before|after|returned): (.*)$", re.M)


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH="")
    env.pop("TORCHELASTIC_RUN_ID", None)
    return env


def _printed(text):
    """{(rank, what): value} from the script's printout."""
    return {(int(r), what): ast.literal_eval(value) for r, what, value in _LINE.findall(text)}


def _expected(primitive, ws, root=0, op="sum"):
    inputs = P.teaching_inputs(primitive, ws, root)
    expected, _, defined, _ = P.reference(primitive, ws, inputs, dtype=torch.float32, op=op, root=root)
    out = []
    for r in range(ws):
        if not defined[r]:
            out.append([])
        elif isinstance(expected[r], torch.Tensor):
            out.append(expected[r].tolist())
        else:
            out.append(list(expected[r]))
    return out


def _check(printed, primitive, ws, root=0, op="sum"):
    assert {r for r, what in printed if what == "after"} == set(range(ws)), printed
    if primitive == "barrier":
        last_arrival = max(printed[(r, "before")][0] for r in range(ws))
        for r in range(ws):
            assert printed[(r, "after")][0] >= last_arrival, printed
        return
    for r, want in enumerate(_expected(primitive, ws, root, op)):
        assert printed[(r, "after")] == want, (primitive, r, printed[(r, "after")], want)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_local(path, tmp_path, nproc=2):
    proc = subprocess.run(TORCHRUN + ["--nproc-per-node", str(nproc), str(path)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _torchrun_two_nodes(path, tmp_path, nproc=1):
    port = _free_port()
    procs = []
    for node in range(2):
        cmd = TORCHRUN + ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", str(nproc),
                          "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                          "--rdzv-id", f"collnb-test-{port}", str(path)]
        procs.append(subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, out + err
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


# ----------------------------------------------------------------------------------------------
# The written text


def test_script_is_standalone_and_follows_torchruns_recipe():
    for primitive in SCRIPT_PRIMITIVES:
        text = script_text(primitive)
        compile(text, primitive, "exec")
        assert "collnb" not in text.split('"""', 2)[2]  # no collnb import (the docstring may name it)
        assert "dist.init_process_group(" in text and "dist.destroy_process_group()" in text
        assert 'os.environ["LOCAL_RANK"]' in text
    nccl = script_text("all_reduce", backend="nccl")
    assert "BACKEND = 'nccl'" in nccl and "torch.cuda.set_device(device)" in nccl
    assert 'dist.init_process_group("nccl", device_id=device' in nccl
    assert "dist.ReduceOp.MAX" in script_text("all_reduce", op="max")


def test_every_primitive_has_a_script():
    assert set(SCRIPT_PRIMITIVES) == set(collnb.PRIMITIVES)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(primitive="all_reduc"), ValueError, "unknown primitive 'all_reduc'; choose one of: broadcast, scatter, "),
    (dict(primitive=3), TypeError, "primitive must be a name (str), one of: broadcast, "),
    (dict(primitive="all_reduce", backend="mpi"), ValueError, "unknown backend 'mpi'; choose one of: gloo, nccl"),
    (dict(primitive="all_reduce", op="mean"), ValueError, "unknown reduce op 'mean'; choose one of: sum, product, "),
    (dict(primitive="broadcast", op="max"), ValueError,
     "script_text: broadcast does not use op (it does not combine values, so it takes no reduce op; ops apply to reduce, "
     "reduce_scatter, all_reduce, "),
    (dict(primitive="broadcast", root=-1), ValueError,
     "root must be an int >= 0 (a rank, below the world size torchrun starts); got -1"),
    (dict(primitive="broadcast", root="1"), TypeError,
     "root must be an int >= 0 (a rank, below the world size torchrun starts); got '1'"),
])
def test_bad_requests_are_refused(kwargs, error, text):
    with pytest.raises(error, match=re.escape(text)):
        script_text(**kwargs)


def test_cli_writes_the_script_and_refuses_bad_paths(tmp_path):
    from collnb.__main__ import main
    out = tmp_path / "ar.py"
    assert main(["script", "all_reduce", "--backend", "nccl", "-o", str(out)]) == 0
    assert out.read_text() == script_text("all_reduce", backend="nccl")
    assert os.access(out, os.X_OK)
    assert main(["script", "all_reduce", "-o", str(tmp_path / "missing" / "x.py")]) == 2
    assert main(["script", "all_reduce", "-o", str(tmp_path / "x.txt")]) == 2
    assert main(["script", "broadcast", "--op", "max", "-o", str(tmp_path / "b.py")]) == 2


# ----------------------------------------------------------------------------------------------
# Run for real under torchrun

@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("primitive", SCRIPT_PRIMITIVES)
def test_every_primitive_script_under_torchrun_nproc_per_node_2(primitive, tmp_path):
    path = tmp_path / f"{primitive}.py"
    from collnb.__main__ import main
    assert main(["script", primitive, "-o", str(path)]) == 0
    out = _torchrun_local(path, tmp_path)
    _check(_printed(out), primitive, 2)


@pytest.mark.slow
@pytest.mark.cluster
def test_all_reduce_script_under_torchrun(tmp_path):
    path = tmp_path / "all_reduce.py"
    path.write_text(script_text("all_reduce", op="max"))
    printed = _printed(_torchrun_local(path, tmp_path))
    assert printed[(0, "before")] == [0.0, 1.0] and printed[(1, "before")] == [10.0, 11.0]
    _check(printed, "all_reduce", 2, op="max")


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("primitive, root", [("all_reduce", None), ("scatter", 1), ("all_to_all_single", None),
                                             ("gather_object", 1)])
def test_script_on_two_nodes(primitive, root, tmp_path):
    """Two torchrun agents (two "nodes", one rank each) meet through the c10d rendezvous. (root: None for a
    primitive without one, which script_text refuses to be given.)"""
    path = tmp_path / f"{primitive}.py"
    path.write_text(script_text(primitive, root=root))
    outs = _torchrun_two_nodes(path, tmp_path)
    node0, node1 = _printed(outs[0]), _printed(outs[1])
    assert {r for r, _ in node0} | {r for r, _ in node1} == {0, 1}
    assert {r for r, _ in node0}.isdisjoint({r for r, _ in node1})  # each node printed its own rank
    _check({**node0, **node1}, primitive, 2, root=root or 0)


# ----------------------------------------------------------------------------------------------
# A function written in a notebook

SCALE = 3
NAMES = ("a", "b")


def _helper(t):
    return t * SCALE


def my_collective(rank, world_size):
    t = _helper(torch.tensor([float(rank + 1)]))
    dist.all_reduce(t)
    return [np.float64(t.item()).item(), NAMES[rank % 2]]


import torch.distributed as dist  # noqa: E402 - as a notebook would, after the function


def test_to_script_brings_helpers_imports_and_constants(tmp_path):
    path = to_script(my_collective, tmp_path / "mine.py")
    text = open(path).read()
    assert "def _helper(t):" in text and "def my_collective(rank, world_size):" in text
    assert "import numpy as np" in text and "SCALE = 3" in text and "NAMES = ('a', 'b')" in text
    assert "import collnb" not in text


def test_to_script_refuses_what_cannot_be_written(tmp_path):
    lock = object()

    def closure(rank, world_size):
        return lock

    with pytest.raises(ValueError, match="closure"):
        to_script(closure, tmp_path / "c.py")
    with pytest.raises(ValueError, match="lambda"):
        to_script(lambda rank, world_size: 0, tmp_path / "l.py")
    with pytest.raises(TypeError):
        to_script(print, tmp_path / "p.py")
    scope = {}
    exec("def no_source(rank, world_size):\n    return rank\n", scope)
    with pytest.raises(ValueError, match="source of 'no_source' cannot be found"):  # exec'd: no file
        to_script(scope["no_source"], tmp_path / "o.py")


def uses_an_object(rank, world_size):
    return _UNWRITABLE  # noqa: F821 - set by the test above


def test_to_script_names_a_global_it_cannot_write(tmp_path):
    globals()["_UNWRITABLE"] = object()
    with pytest.raises(ValueError, match="_UNWRITABLE"):
        to_script(uses_an_object, tmp_path / "u.py")


class _Crafted(int):
    """An int whose repr is code: to_script must never run it (it once evaluated eval(repr(value)))."""

    def __repr__(self):
        return f"__import__('pathlib').Path({_CRAFTED_MARK!r}).write_text('ran')"


def uses_a_crafted_value(rank, world_size):
    return _CRAFTED  # noqa: F821 - set by the test


@pytest.mark.parametrize("value", ["int subclass", "in a list", "dict key"])
def test_to_script_never_evaluates_a_repr(value, tmp_path):
    global _CRAFTED_MARK
    _CRAFTED_MARK = str(tmp_path / "ran")
    crafted = _Crafted(3)
    globals()["_CRAFTED"] = {"int subclass": crafted, "in a list": [1, crafted], "dict key": {crafted: 1}}[value]
    with pytest.raises(ValueError, match="_CRAFTED"):
        to_script(uses_a_crafted_value, tmp_path / "u.py")
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "u.py").exists()


@pytest.mark.parametrize("value", [3, -2.5, "text", b"\x00b", None, True, 1 + 2j, (1,), [1, (2, "x")], {"a": [1, 2]},
                                   {1, 2}, set(), frozenset()])
def test_literal_text_writes_plain_values_that_literal_eval_reads_back(value):
    import ast
    from collnb.labs.script import literal_text
    text = literal_text(value)
    if type(value) is frozenset:
        assert text is None  # not a literal: refused rather than run
        return
    assert text is not None and ast.literal_eval(text) == value and type(ast.literal_eval(text)) is type(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10 ** 5000, object(), [object()], {"k": print}],
                         ids=["nan", "inf", "huge int", "object", "list of object", "dict of function"])
def test_literal_text_refuses_what_is_not_a_plain_literal(value):
    from collnb.labs.script import literal_text
    assert literal_text(value) is None


@pytest.mark.slow
@pytest.mark.cluster
def test_to_script_runs_under_torchrun_and_on_two_nodes(tmp_path):
    path = to_script(my_collective, tmp_path / "mine.py")
    want = [[3.0 * (1 + 2), "a"], [3.0 * (1 + 2), "b"]]
    printed = _printed(_torchrun_local(path, tmp_path))
    assert [printed[(r, "returned")] for r in range(2)] == want
    outs = _torchrun_two_nodes(path, tmp_path)
    both = {**_printed(outs[0]), **_printed(outs[1])}
    assert [both[(r, "returned")] for r in range(2)] == want


# ----------------------------------------------------------------------------------------------
# "Run it on a cluster" at the end of every primitive notebook

NOTEBOOK_PRIMITIVE = {"01_broadcast": "broadcast", "02_scatter": "scatter", "03_gather": "gather",
                      "04_reduce": "reduce", "05_all_gather": "all_gather",
                      "06_reduce_scatter": "reduce_scatter", "07_all_reduce": "all_reduce",
                      "08_all_to_all": "all_to_all", "09_object_collectives": "broadcast_object_list",
                      "10_send_recv": "send_recv"}


@pytest.mark.parametrize("stem, primitive", sorted(NOTEBOOK_PRIMITIVE.items()))
def test_primitive_notebooks_end_with_run_it_on_a_cluster(stem, primitive, capsys):
    import nbformat
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    nb = nbformat.read(os.path.join(root, "notebooks", f"{stem}.ipynb"), as_version=4)
    md, code = nb.cells[-2:]
    assert "cluster" in md.metadata.get("tags", []) and "cluster" in code.metadata.get("tags", [])
    assert md.source.startswith("## Run it on a cluster")
    assert f"torchrun --nproc-per-node 2 {primitive}.py" in md.source
    assert f"python -m collnb script {primitive} -o {primitive}.py" in md.source
    exec(code.source, {})  # the cell prints the very script `python -m collnb script` writes
    assert capsys.readouterr().out == script_text(primitive) + "\n"
