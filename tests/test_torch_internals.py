"""torch's private names live in collnb/ranks/_torch_internals.py only: every one is listed in its
PRIVATE_NAMES (feature, missing public API, releases checked) and present on the installed torch; no
other module imports, reads or names a private torch module or attribute; a missing one is reported
in one line that names the feature and the torch release."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from collnb.ranks import _torch_internals as internals

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "collnb" / "ranks" / "_torch_internals.py"
_MODULE_PATH = re.compile(r"torch(\.\w+)+")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _torch_private_attributes() -> frozenset[str]:
    """The private attribute names of the torch objects collnb handles (classes and instances: a Tensor, a
    Work, a ProcessGroup, an operator and its packet, a DeviceMesh, a DTensor...)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor

    objects = (torch.Tensor, torch.zeros(1), dist.Work, dist.ProcessGroup, internals.OpOverload,
               internals.OpOverloadPacket, torch.ops.aten.add.Tensor, torch.ops.aten.add, DeviceMesh, DTensor,
               torch.Generator, torch.nn.Module, torch.dtype, torch.device)
    return frozenset(n for o in objects for n in dir(o) if _private(n))


def _torch_private_files() -> frozenset[str]:
    """The file names of torch's private modules (``_functional_collectives.py``...)."""
    return frozenset(p.name for p in Path(torch.__file__).parent.rglob("_*.py") if _private(p.stem))


def _own_names() -> frozenset[str]:
    """Every name collnb defines itself (functions, classes, attributes, variables, files): a private
    torch attribute of the same name read in collnb is collnb's own."""
    own = {p.name for p in (ROOT / "collnb").rglob("*.py")}
    for p in (ROOT / "collnb").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
    return frozenset(own)


_TORCH_ATTRS = _torch_private_attributes() - _own_names()
_TORCH_FILES = _torch_private_files() - _own_names()


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for each private torch name the code imports, reads, names as a module path, reads off
    a torch object (``work._source_rank()``, ``op._schema``) or names as a file (``"_functional_collectives.py"``)."""
    tree = ast.parse(source)
    roots: dict[str, str] = {}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    roots[a.asname or "torch"] = a.name if a.asname else "torch"
                    if any(map(_private, a.name.split("."))):
                        hits.append((node.lineno, f"import {a.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            for a in node.names:
                roots[a.asname or a.name] = f"{node.module}.{a.name}"
                if any(map(_private, f"{node.module}.{a.name}".split("."))):
                    hits.append((node.lineno, f"from {node.module} import {a.name}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in roots:
                hits.append((node.lineno, f"{roots[base.id]}...{node.attr}"))
        if isinstance(node, ast.Attribute) and node.attr in _TORCH_ATTRS and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            hits.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr} (a private attribute of a torch object)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_PATH.fullmatch(node.value):
            if any(map(_private, node.value.split("."))):
                hits.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _TORCH_FILES:
            hits.append((node.lineno, f"{node.value!r} (a private torch module's file)"))
    return hits


def test_the_guard_finds_each_kind_of_use():
    code = ("import torch\nimport torch.distributed as dist\nfrom torch._ops import OpOverload\n"
            "from torch.distributed import _functional_collectives\nx = dist._world\ny = torch.ops._c10d_functional\n"
            "z = 'torch.distributed._functional_collectives'\nok = torch.distributed.all_reduce\n"
            "prose = 'torch._mkldnn is opaque memory'\n")
    found = [what for _, what in private_uses(code)]
    assert len(found) == 5, found
    objects = ("def f(work, op, td):\n    a = work._source_rank()\n    b = op._schema.arguments\n"
               "    c = td + '_functional_collectives.py'\n    return self._source_rank\n")
    found = [what for _, what in private_uses(objects)]
    assert found == ["work._source_rank (a private attribute of a torch object)",
                     "op._schema (a private attribute of a torch object)",
                     "'_functional_collectives.py' (a private torch module's file)"], found
    assert not private_uses("import torch\nt = torch.zeros(2).__class__\nmsg = 'see torch._foo in a sentence'\n")


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "collnb").rglob("*.py") if p != HOME),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_other_module_uses_a_private_torch_name(path):
    hits = private_uses(path.read_text(encoding="utf-8"))
    assert not hits, (f"{path.relative_to(ROOT)} uses torch's private names {hits}: move each into "
                      "collnb/ranks/_torch_internals.py with a PRIVATE_NAMES entry (feature, missing public API, "
                      "releases checked)")


def test_every_private_name_is_listed_once_with_its_reasons():
    names = [p.name for p in internals.PRIVATE_NAMES]
    assert len(names) == len(set(names))
    for p in internals.PRIVATE_NAMES:
        # private by name (an underscore) or by torch's docs (``ProcessGroup.unbox``, undocumented)
        assert p.name.startswith("torch."), p
        assert p.feature and p.missing_api and "2.13.0" in p.checked and "2.15.0" in p.checked, p


def test_every_private_name_exists_on_the_installed_torch():
    assert internals.missing() == [], f"torch {torch.__version__} lacks {internals.missing()}"


def test_a_missing_name_says_which_feature_and_which_torch(monkeypatch):
    monkeypatch.setattr(internals, "_resolve", lambda name: False)
    with pytest.raises(RuntimeError) as err:
        internals.require("torch._C._distributed_c10d._dump_fr_trace_json")
    msg = str(err.value)
    assert msg.startswith("collnb's launch(flight_recorder=N) needs torch's torch._C._distributed_c10d._dump_fr_trace_json")
    assert f"which torch {torch.__version__} does not have" in msg and "\n" not in msg
    with pytest.raises(RuntimeError, match="Flight Recorder dump of gloo ranks"):
        internals.flight_recorder_dump("gloo")
    with pytest.raises(KeyError):
        internals.require("torch._not_listed")


def test_the_flight_recorder_dump_names_the_backend_where_torch_takes_it():
    """torch 2.15's dumps take backend= (one recorder per backend); 2.13's do not: both give bytes here."""
    pickled, as_json = internals.flight_recorder_dump("gloo")
    assert isinstance(pickled, bytes) and as_json.startswith(b"{")


def test_the_flight_recorder_dump_passes_the_backend_where_the_dump_takes_one(monkeypatch):
    """torch 2.15's dumps take ``backend=`` (one recorder per backend, gloo's by default), 2.13's take none: the
    dump names the backend asked for, else the default group's (``"cuda:nccl"`` -> ``"nccl"``), only where torch's
    signature has it."""
    from torch._C import _distributed_c10d as c10d_c

    calls = []

    def with_backend(*args, backend="gloo"):
        calls.append((args, backend))
        return b"{}"
    with_backend.__doc__ = ("_dump_fr_trace_json(includeCollectives: bool | None = None, onlyActive: bool | None = None, "
                            "backend: str = 'gloo') -> bytes")

    monkeypatch.setattr(c10d_c, "_dump_fr_trace_json", with_backend)
    assert internals.flight_recorder_json("nccl") == b"{}"
    monkeypatch.setattr(internals.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(internals.dist, "get_backend", lambda group=None: "cuda:nccl")
    internals.flight_recorder_json()
    monkeypatch.setattr(internals.dist, "is_initialized", lambda: False)
    internals.flight_recorder_json()
    assert calls == [((True, False), "nccl"), ((True, False), "nccl"), ((True, False), "gloo")]

    def without_backend(*args):
        calls.append((args, None))
        return b"{}"
    without_backend.__doc__ = "_dump_fr_trace_json(includeCollectives: bool | None = None, onlyActive: bool | None = None) -> bytes"
    monkeypatch.setattr(c10d_c, "_dump_fr_trace_json", without_backend)
    internals.flight_recorder_json("nccl")
    assert calls[-1] == ((True, False), None)


#: A dotted torch path with a private part, wherever it stands (code, string, docstring, comment).
_PRIVATE_PATH = re.compile(r"\btorch(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*")


@pytest.mark.parametrize("path", sorted(p for p in (ROOT / "collnb").rglob("*.py") if p != HOME),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_other_module_names_a_private_torch_path_even_in_prose(path):
    """Prose that names a private path goes stale the day torch moves it, as code would: the lessons and
    docstrings cite the constants of _torch_internals (SHARD_DIM_ALLTOALL, DEBUG_MODE...) or say it in words."""
    hits = [(n, m.group()) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for m in _PRIVATE_PATH.finditer(line)]
    assert not hits, f"{path.relative_to(ROOT)} names private torch paths {hits}: cite a _torch_internals constant"


def test_the_prose_guard_finds_a_private_path_and_passes_public_ones():
    assert [m.group() for m in _PRIVATE_PATH.finditer("see ``torch.utils._debug_mode.DebugMode`` and torch._dynamo")] \
        == ["torch.utils._debug_mode", "torch._dynamo"]
    assert not _PRIVATE_PATH.findall("torch.distributed.all_reduce, torch.__version__, torch.nn.Module")


def test_the_cited_private_paths_exist_on_the_installed_torch():
    import importlib
    for path in (internals.SHARD_DIM_ALLTOALL, internals.ALL_TO_ALL_AUTOGRAD, internals.DEBUG_MODE):
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path
