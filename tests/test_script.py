"""Standalone torchrun scripts (python -m collnb script, collnb.to_script), run for real under
``torchrun --nproc-per-node 2`` and as two "nodes" (two torchrun processes, c10d rendezvous on
127.0.0.1 and a free port), every rank's printed values checked against collnb's reference.

One torchrun start (two for the two nodes) runs every script, each as written and as ``__main__``,
one after another in the same ranks (tests/torchrun_scripts.py): a start costs seconds, a script in
started ranks milliseconds. Each script's test reads that script's own output and exit status per
rank, so one that fails fails its own test with its own output. torchrun's temporary files go to the
tests' TMPDIR, never the machine's /tmp."""

import ast
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid

import numpy as np
import pytest
from ports import free_port
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



def _torchrun_env(tmpdir):
    """The environment of a torchrun start whose temporary files (the agent's log directory,
    torchelastic_*, which it never removes) go to ``tmpdir`` (TMPDIR: tempfile's), not the machine's /tmp."""
    os.makedirs(tmpdir, exist_ok=True)
    return dict(_env(), TMPDIR=str(tmpdir))


def assert_torchrun_kept_to(tmpdir, unique_run_ids=True):
    """torchrun's agent wrote its log directory (``torchelastic_*/RUN_ID_*``: tempfile.mkdtemp, torch's
    elastic/multiprocessing/api.py) under ``tmpdir``, the TMPDIR it was given, so none in the machine's
    temporary directory; where the run ids are unique (torchrun's own uuid, the tests' rdzv ids), none
    of those runs is there either. (By run id: other tests may write there meanwhile. A SLURM job's id,
    torchrun's run id in examples/slurm, repeats from one test cluster to the next.)"""
    runs = {os.path.basename(p).rsplit("_", 1)[0] for p in glob.glob(os.path.join(tmpdir, "torchelastic_*", "*"))}
    assert runs, f"torchrun wrote no torchelastic_* log directory under TMPDIR={tmpdir}: " + str(os.listdir(tmpdir))
    if unique_run_ids:
        left = [p for run in runs for p in glob.glob(os.path.join(tempfile.gettempdir(), "torchelastic_*", f"{run}_*"))]
        assert not left, left


def _torchrun_local(path, tmp_path, nproc=2):
    tmpdir = os.path.join(tmp_path, "torchrun-tmp")
    proc = subprocess.run(TORCHRUN + ["--nproc-per-node", str(nproc), str(path)], cwd=tmp_path,
                          env=_torchrun_env(tmpdir), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_torchrun_kept_to(tmpdir)
    return proc.stdout


class ScriptRuns:
    """Several scripts run by one torchrun start (tests/torchrun_scripts.py: each as ``__main__``, as
    written, one after another in the same ranks); ``stdout(name)`` is what torchrun would have printed
    for that script alone, once every rank of it exited 0, else the test fails with that script's output."""

    def __init__(self, root, written, nodes):
        self.root, self.written, self.nodes = root, written, nodes
        self.procs = []

    def start(self, scripts, options):
        """One torchrun per node (``options(node)``: its command-line options), all at once; wait for them."""
        self.tmpdir = os.path.join(self.root, "tmp")
        env = _torchrun_env(self.tmpdir)
        for node in range(self.nodes):
            out = os.path.join(self.root, "out", f"node{node}")
            cmd = TORCHRUN + options(node) + [DRIVER, out] + scripts
            self.procs.append(subprocess.Popen(cmd, cwd=self.root, env=env, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True))
        self.ended = []
        try:
            for p in self.procs:
                try:
                    out, err = p.communicate(timeout=480)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, err = p.communicate()
                    err += "\n(stopped by the test after 480 s)"
                self.ended.append((p.returncode, out, err))
        finally:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def torchrun_said(self):
        return "\n".join(f"torchrun of node {n} exited {rc}:\n{out}\n{err}" for n, (rc, out, err) in enumerate(self.ended))

    def stdout(self, name):
        """Per node, every rank's stdout of script ``name`` (rank order, as torchrun's would hold it)."""
        assert self.written.get(name, 0) == 0, f"writing {name}.py failed: {self.written[name]}"
        per_node = []
        for node in range(self.nodes):
            files = sorted(glob.glob(os.path.join(self.root, "out", f"node{node}", name, "rank*.json")))
            assert files, f"{name}.py did not run on node {node}; " + self.torchrun_said()
            outs = []
            for f in files:
                base = f[:-len(".json")]
                status = json.loads(open(f).read())
                text = open(base + ".stdout").read()
                said = f"{name}.py, {os.path.basename(base)}: {status}\n{text}{open(base + '.stderr').read()}"
                assert status == {"exit": 0, "left_process_group_initialised": False}, said
                outs.append(text)
            per_node.append("".join(outs))
        return per_node


DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_scripts.py")
TWO_NODE_CASES = [("all_reduce", None), ("scatter", 1), ("all_to_all_single", None), ("gather_object", 1)]


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    """Every primitive's script as ``python -m collnb script`` writes it, all_reduce with op max and
    ``to_script(my_collective)``, under one ``torchrun --nproc-per-node 2``."""
    from collnb.__main__ import main
    root = str(tmp_path_factory.mktemp("torchrun_local"))
    written, scripts = {}, []
    for primitive in SCRIPT_PRIMITIVES:
        path = os.path.join(root, f"{primitive}.py")
        try:  # a failure here fails that primitive's test alone
            written[primitive] = main(["script", primitive, "-o", path])
        except Exception as exc:  # noqa: BLE001
            written[primitive] = repr(exc)
        if written[primitive] == 0:
            scripts.append(path)
    with open(os.path.join(root, "all_reduce_max.py"), "w") as fh:
        fh.write(script_text("all_reduce", op="max"))
    scripts += [os.path.join(root, "all_reduce_max.py"), to_script(my_collective, os.path.join(root, "mine.py"))]
    runs = ScriptRuns(root, written, nodes=1)
    runs.start(scripts, options=lambda node: ["--nproc-per-node", "2"])
    return runs


@pytest.fixture(scope="module")
def two_node_runs(tmp_path_factory):
    """TWO_NODE_CASES' scripts and ``to_script(my_collective)`` under two torchrun agents (two "nodes",
    one rank each) that meet through the c10d rendezvous."""
    root = str(tmp_path_factory.mktemp("torchrun_two_nodes"))
    scripts = []
    for primitive, root_rank in TWO_NODE_CASES:
        path = os.path.join(root, f"{primitive}.py")
        with open(path, "w") as fh:
            fh.write(script_text(primitive, root=root_rank))
        scripts.append(path)
    scripts.append(to_script(my_collective, os.path.join(root, "mine.py")))
    port, run_id = free_port(), f"collnb-test-{uuid.uuid4().hex[:12]}"
    runs = ScriptRuns(root, {}, nodes=2)
    runs.start(scripts, options=lambda node: [
        "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id])
    return runs


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
@pytest.mark.timeout(600)
@pytest.mark.parametrize("primitive", SCRIPT_PRIMITIVES)
def test_every_primitive_script_under_torchrun_nproc_per_node_2(primitive, local_runs):
    (out,) = local_runs.stdout(primitive)
    _check(_printed(out), primitive, 2)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_all_reduce_script_under_torchrun(local_runs):
    (out,) = local_runs.stdout("all_reduce_max")
    printed = _printed(out)
    assert printed[(0, "before")] == [0.0, 1.0] and printed[(1, "before")] == [10.0, 11.0]
    _check(printed, "all_reduce", 2, op="max")


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
@pytest.mark.parametrize("primitive, root", TWO_NODE_CASES)
def test_script_on_two_nodes(primitive, root, two_node_runs):
    """Two torchrun agents (two "nodes", one rank each) meet through the c10d rendezvous. (root: None for a
    primitive without one, which script_text refuses to be given.)"""
    outs = two_node_runs.stdout(primitive)
    node0, node1 = _printed(outs[0]), _printed(outs[1])
    assert {r for r, _ in node0} | {r for r, _ in node1} == {0, 1}
    assert {r for r, _ in node0}.isdisjoint({r for r, _ in node1})  # each node printed its own rank
    _check({**node0, **node1}, primitive, 2, root=root or 0)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(600)
@pytest.mark.parametrize("runs", ["local_runs", "two_node_runs"])
def test_one_torchrun_ran_every_script_and_left_nothing_in_tmp(runs, request):
    """The torchrun starts that ran the scripts above exited 0 (every script ran to its end on every
    rank), and their agents' log directories went to the test's TMPDIR, none to the machine's /tmp."""
    runs = request.getfixturevalue(runs)
    assert [rc for rc, _, _ in runs.ended] == [0] * runs.nodes, runs.torchrun_said()
    assert_torchrun_kept_to(runs.tmpdir)


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
@pytest.mark.timeout(600)
def test_to_script_runs_under_torchrun_and_on_two_nodes(local_runs, two_node_runs):
    want = [[3.0 * (1 + 2), "a"], [3.0 * (1 + 2), "b"]]
    (out,) = local_runs.stdout("mine")
    printed = _printed(out)
    assert [printed[(r, "returned")] for r in range(2)] == want
    outs = two_node_runs.stdout("mine")
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
