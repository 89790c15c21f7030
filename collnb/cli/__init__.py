"""Layer 6, the command line: ``python -m collnb run | examples | script | replay | bench | present``."""

from .common import EXIT_LAUNCH, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, check_outputs, on_ranks, write_output
from .main import build_parser, main

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_MISMATCH", "EXIT_USAGE", "EXIT_LAUNCH"]
