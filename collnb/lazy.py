"""How every facade of collnb loads a name from its module the first time it is used (PEP 562).

So ``import collnb`` and the names of a layer that need no torch stay cheap: a saved
:class:`collnb.Trace` loads without torch."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, where: dict[str, str], before: Callable[[str], None] | None = None
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package named ``package`` (its ``__name__``).

    Args:
        package: the package's ``__name__``.
        where: ``{name: module}``, the module relative to the package (``".inputs"``); each name is
            imported from its module the first time it is asked for, then kept in the package's
            namespace (a plain attribute from then on).
        before: called with the module's name before a name is first imported from it (the root
            package loads :mod:`collnb.views` first for names that return drawable results).

    The returned ``__getattr__`` raises ``AttributeError`` for a name not in ``where``; ``__dir__``
    lists the package's names and every name of ``where``.
    """
    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before(module)
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
