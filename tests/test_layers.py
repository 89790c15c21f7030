"""The package's architecture, checked from its source: layers import only downward, another layer
only through its facade, no module over 600 lines, and README's Layout table names every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "collnb"
README = PACKAGE.parent / "README.md"
#: Layer of each top-level part of the package, bottom first (README.md, "Layout").
LAYERS = {"vocabulary": 0, "units": 0, "lazy": 0, "i18n": 0, "torch_versions": 0, "ranks": 1, "collectives": 2, "placements": 2, "algorithms": 3, "views": 4, "labs": 5, "health": 5,
          "cli": 6, "__init__": 7, "__main__": 7}
MAX_LINES = 600
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """Every module a file imports (function-local imports too), as absolute ``collnb.*`` names."""
    package = _name(path) if path.name == "__init__.py" else _name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None:  # from .. import ranks -> the package collnb.ranks
                for alias in node.names:
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def _layer(module: str) -> tuple[str, int] | None:
    parts = module.split(".")
    if parts[0] != "collnb":
        return None
    top = parts[1] if len(parts) > 1 else "__init__"
    return top, LAYERS[top]


def test_every_part_of_the_package_has_a_layer():
    assert {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_and_through_facades(path):
    me, my_layer = _layer(_name(path))
    wrong = []
    for line, target in _imports(path):
        layer = _layer(target)
        if layer is None or layer[0] == me:
            continue
        top, level = layer
        if level > my_layer:
            wrong.append(f"line {line}: {target} is in layer {level} ({top}), above layer {my_layer} ({me})")
        elif my_layer < 7 and level > 0 and target != f"collnb.{top}" and not (
                top == "labs" and target.count(".") == 2):  # labs' facade is its public modules
            wrong.append(f"line {line}: {target} reaches inside {top}; import from collnb.{top}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_are_at_most_600_lines_with_a_docstring(path):
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_LINES, f"{path.name}: {text.count(chr(10))} lines"
    assert ast.get_docstring(ast.parse(text)), f"{path.name}: no module docstring saying its job"


def test_readme_layout_names_every_module_by_its_path_in_its_docstrings_words():
    """README's module table is what tools/layout.py writes: every module by its full path, with its
    docstring's first sentence (a wrong description is fixed in the docstring); every path the
    Layout section names exists."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("layout", PACKAGE.parent / "tools" / "layout.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    text = README.read_text(encoding="utf-8")
    assert layout.render(text) == text, "README.md's module table is out of date: run `make meta`"
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([^`]+)`", section, flags=re.M))
    assert {p.relative_to(PACKAGE.parent).as_posix() for p in MODULES if "__pycache__" not in p.parts} <= named
    for path in re.findall(r"`((?:collnb|tests|tools|examples|benchmarks|notebooks)/[^`]*)`", section):
        assert (PACKAGE.parent / path).exists(), f"README Layout names {path}, which does not exist"
    assert "| `collnb/views/controls.py` | The primitive explorer's control logic" in text


def test_the_module_summary_is_the_docstrings_first_sentence(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("layout", PACKAGE.parent / "tools" / "layout.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    f = tmp_path / "m.py"
    f.write_text('"""Run :func:`collnb.run` on a | b ranks.\n\nMore. Not this."""\n')
    assert layout.summary(f) == "Run `collnb.run` on a \\| b ranks."
    f.write_text('"""The rank side: what each\nrank does (``x.y``). Then more."""\n')
    assert layout.summary(f) == "The rank side: what each rank does (`x.y`)."



LAZY_FACADES = {"collnb": "_WHERE", "collnb.collectives": "_LAZY", "collnb.placements": "_LAZY",
                "collnb.algorithms": "_LAZY"}


@pytest.mark.parametrize("package", sorted(LAZY_FACADES))
def test_lazy_names_are_listed_once_and_the_type_checking_imports_agree(package):
    """A facade's lazily loaded names live in one table (collnb.lazy); its TYPE_CHECKING imports,
    there for type checkers, name the same names from the same modules, and every one is public."""
    import importlib
    mod = importlib.import_module(package)
    table = getattr(mod, LAZY_FACADES[package])
    tree = ast.parse(Path(mod.__file__).read_text(encoding="utf-8"))
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    imported = {a.name: "." * n.level + (n.module or "") for n in block.body for a in n.names}
    assert imported == table  # the root's modules are layers' facades (labs: its public modules)
    assert set(table) <= set(mod.__all__)
    for name in table:
        assert name in dir(mod)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        mod.no_such_name  # noqa: B018 - the attribute access is the test
