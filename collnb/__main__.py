"""``python -m collnb``: the command line (:mod:`collnb.cli`)."""

import sys

from .cli import EXIT_LAUNCH, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, build_parser, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
