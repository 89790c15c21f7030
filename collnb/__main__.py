"""``python -m collnb``: the command line (:mod:`collnb.cli`; ``doctor`` is reached before the other
subcommands import torch, so it reports a torch that fails to import)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv``: default ``sys.argv[1:]``) and return its exit status
    (:mod:`collnb.cli.main`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["doctor"]:
        from .health import main as doctor_main  # noqa: PLC0415 - before torch is imported

        return doctor_main(args[1:])
    from .cli import main as cli_main  # noqa: PLC0415

    return cli_main(args)


def __getattr__(name: str) -> object:
    """The command line's other names (``build_parser``, ``EXIT_OK``, ...), loaded from :mod:`collnb.cli`
    when first asked for (importing it imports torch)."""
    if name in ("EXIT_LAUNCH", "EXIT_MISMATCH", "EXIT_OK", "EXIT_USAGE", "build_parser"):
        from . import cli  # noqa: PLC0415

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
