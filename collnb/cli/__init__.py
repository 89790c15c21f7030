"""Layer 6, the command line: ``python -m collnb run | examples | script | replay | bench | redistribute | present | doctor``,
one module per subcommand (:mod:`collnb.cli.run`, ...), put together by :mod:`collnb.cli.main`."""

from .common import EXIT_LAUNCH, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE
from .main import SUBCOMMANDS, build_parser, main

__all__ = ["main", "build_parser", "SUBCOMMANDS", "EXIT_OK", "EXIT_MISMATCH", "EXIT_USAGE", "EXIT_LAUNCH"]
