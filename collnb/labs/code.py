"""The code of a named piece of collnb, as a notebook shows it: a function, method or class whole, by
name, never a slice of source text.

:func:`source` is :func:`inspect.getsource` for the language spoken now: in English the source as
it is, docstrings and comments included; in Chinese (``collnb.set_language("zh")``, the Chinese
notebooks) the same code without its docstrings and comments, which are English prose: the
notebook's Chinese text around it explains it. The code itself is never changed.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
from typing import Any

from ..i18n import get_language

__all__ = ["source", "without_prose"]


def source(obj: Any) -> str:
    """The source of ``obj`` (a function, method or class of collnb) as :func:`inspect.getsource` gives
    it, or ``obj`` itself when it is already Python source (a str: a script collnb wrote, e.g.
    :func:`collnb.labs.script.script_text`), for a notebook to print; in Chinese without docstrings and
    comments (:func:`without_prose`).

    Raises:
        TypeError, OSError: as :func:`inspect.getsource` (a built-in, an object without source).
        SyntaxError: a str that is not Python source.
    """
    text = obj if isinstance(obj, str) else inspect.getsource(obj)
    return without_prose(text) if get_language() != "en" else text


def without_prose(text: str) -> str:
    """``text`` (Python source, possibly indented as a method is) without its docstrings (the first
    string statement of a module, class or function body) and comments (whole-line and trailing),
    blank lines left by them squeezed; every line of code unchanged, its indentation included."""
    tree = ast.parse(textwrap.dedent(text))
    drop: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                drop.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = text.splitlines()
    comments: dict[int, int] = {}  # line -> column where its comment starts
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.start[1]
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        if number in drop:
            continue
        if number in comments:
            line = line[:comments[number]].rstrip()
            if not line.strip():
                continue
        if not line.strip() and (not out or not out[-1].strip() or out[-1].rstrip().endswith(":")):
            continue  # one blank line at most, none at the start nor right after a ``def``/``class`` line
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"
