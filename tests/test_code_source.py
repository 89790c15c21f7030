"""collnb.labs.code: the code of a named piece of collnb as a notebook shows it (issue 35: by name, never a
slice of source text; issue 34: in the Chinese edition without the English docstrings and comments)."""
import inspect

import pytest

import collnb
from collnb.labs import code, parallel


@pytest.fixture
def chinese():
    before = collnb.get_language()
    collnb.set_language("zh")
    yield
    collnb.set_language(None if before == "en" else before)


def test_in_english_it_is_inspect_getsource():
    collnb.set_language("en")
    try:
        for obj in (parallel.run_stage, parallel.CopyToTensorParallel, parallel.TensorParallelMLP.tensor_parallel_mlp):
            assert code.source(obj) == inspect.getsource(obj)
    finally:
        collnb.set_language(None)


def test_in_chinese_the_same_code_without_docstrings_or_comments(chinese):
    import ast
    import textwrap

    for obj in (parallel.run_stage, parallel.CopyToTensorParallel, parallel.TensorParallelMLP.tensor_parallel_mlp,
                parallel.torch_pipeline_step, parallel.GatherFromSequenceParallel):
        full, shown = inspect.getsource(obj), code.source(obj)
        assert '"""' not in shown and "#" not in shown, shown
        # every line of code is kept, indentation and all; the code parses to the same tree without docstrings
        kept = [ln for ln in full.splitlines() if ln.strip()]
        assert all(ln in kept or any(k.startswith(ln) for k in kept) for ln in shown.splitlines() if ln.strip())

        def bare(text):
            tree = ast.parse(textwrap.dedent(text))
            for node in ast.walk(tree):
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                        and isinstance(getattr(body[0], "value", None), ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
            return ast.dump(tree)

        assert bare(shown) == bare(full), obj


def test_without_prose_keeps_strings_that_are_code_and_hashes_inside_strings():
    text = ('    def f(x):\n        """Doc."""\n        # a comment\n        y = "#not a comment"  # trailing\n'
            '        return f"{y}"\n')
    assert code.without_prose(text) == '    def f(x):\n        y = "#not a comment"\n        return f"{y}"\n'
