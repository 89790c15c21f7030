"""The stubs in typings/ (what mypy reads for libraries that ship no types) name only what the installed
libraries have: every function, class, method and attribute a stub declares exists there, and every
keyword a stub's function or constructor takes is a parameter of the real one or, for a traitlets
class (ipywidgets, ipyparallel's Cluster), one of its traits. A stub that drifts from its library would
let `make lint` pass code that fails when it runs."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

TYPINGS = Path(__file__).resolve().parent.parent / "typings"
#: Attributes a stub declares that the real class serves from __getattr__ (not visible on the class):
#: ipyparallel's AsyncResult reads its metadata (stdout, stderr) there, and its Cluster makes each
#: *_sync method from the async one (ipyparallel's AsyncFirst).
INSTANCE_ONLY = {("ipyparallel", "AsyncResult"): {"stdout", "stderr"},
                 ("ipyparallel", "Cluster"): {"connect_client_sync", "start_and_connect_sync"}}


def _stub_files():
    return sorted(p for p in TYPINGS.rglob("*.pyi"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(TYPINGS).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _members(cls: ast.ClassDef) -> tuple[set[str], dict[str, ast.FunctionDef]]:
    """The attributes a stub class declares, and its methods by name."""
    attrs, methods = set(), {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            attrs.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            methods[node.name] = node
    return attrs, methods


def _keywords(fn: ast.FunctionDef) -> list[str]:
    args = fn.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if n not in ("self", "cls")]


def _accepts(real, names: list[str], traits: set[str]) -> list[str]:
    """The names among ``names`` that the real callable takes neither as a parameter nor as a trait."""
    try:
        params = inspect.signature(real).parameters
    except (TypeError, ValueError):  # a builtin without a signature: nothing to compare
        return []
    named = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return [n for n in names if n not in named and not (takes_any and (n in traits or not traits))]


@pytest.mark.parametrize("path", _stub_files(), ids=lambda p: str(p.relative_to(TYPINGS)))
def test_a_stub_names_only_what_its_library_has(path):
    name = _module_name(path)
    real = importlib.import_module(name)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    wrong = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            if not hasattr(real, node.name):
                wrong.append(f"{name}.{node.name} does not exist")
            else:
                wrong += [f"{name}.{node.name}() takes no {k}" for k in _accepts(getattr(real, node.name),
                                                                                  _keywords(node), set())]
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue  # a base ipywidgets does not export is checked through the classes built on it
        cls = getattr(real, node.name, None)
        if cls is None:
            wrong.append(f"{name}.{node.name} does not exist")
            continue
        traits = set(cls.class_trait_names()) if hasattr(cls, "class_trait_names") else set()
        todo, seen = [node], set()
        while todo:  # the class and the stub bases it is declared on
            stub = todo.pop()
            if stub.name in seen:
                continue
            seen.add(stub.name)
            todo += [classes[b.id] for b in stub.bases if isinstance(b, ast.Name) and b.id in classes]
            attrs, methods = _members(stub)
            for member in sorted(attrs | set(methods) - {"__init__"}):
                if not hasattr(cls, member) and member not in INSTANCE_ONLY.get((name, node.name), set()):
                    wrong.append(f"{name}.{node.name}.{member} (declared on {stub.name}) does not exist")
            if "__init__" in methods and stub is node:
                wrong += [f"{name}.{node.name}() takes no {k}" for k in _accepts(cls, _keywords(methods["__init__"]),
                                                                                  traits)]
    assert not wrong, "\n".join(wrong)
