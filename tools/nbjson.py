"""How the tools read a cell's source and write a notebook: one way, shared by
``notebook_meta.py`` and ``twins.py`` (which imports nothing else of notebook_meta's, so the two
do not import each other)."""

from __future__ import annotations

import json


def source(cell) -> str:
    """A cell's source as one string (nbformat stores a string or a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def dumps(nb) -> str:
    """The notebook as it is committed: sorted keys, indent 1, non-ASCII kept, a final newline."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
