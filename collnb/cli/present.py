"""``python -m collnb present``: the explorer and the round-by-round replay as a projector view.

A Voilà app (``voila``, the ``present`` extra) on the notebook shipped as
``collnb/data/present.ipynb``: Voilà runs it in a kernel and shows only its outputs (no code
cells), in large type for a room: the primitive explorer (sliders re-run collectives on warm
ranks) and the ring all_reduce replay (play / step the rounds).

Exit status: 0 when Voilà ends normally; 2 when Voilà is not installed or the port is bad.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from ..vocabulary import check_int

#: The notebook Voilà serves.
NOTEBOOK = Path(__file__).resolve().parent.parent / "data" / "present.ipynb"

#: Type size for the projector (CSS pixels of body text; widget labels and tables follow).
FONT_PX = 24


def voila_command(port: int = 8866, open_browser: bool = True, ip: str = "127.0.0.1") -> list[str]:
    """The ``voila`` command line that serves :data:`NOTEBOOK` (sources stripped, light theme).

    Raises:
        TypeError: ``port`` is not an int; ValueError: outside 1..65535 (the words of
            :func:`collnb.vocabulary.check_int`).
    """
    check_int("port", port, 1, 65535, what="a TCP port")
    return [sys.executable, "-m", "voila", str(NOTEBOOK), f"--port={port}", f"--Voila.ip={ip}",
            "--strip_sources=True", "--theme=light", "--show_tracebacks=True",
            *([] if open_browser else ["--no-browser"])]


def _cmd_present(args) -> int:
    if importlib.util.find_spec("voila") is None:
        print("error: Voilà is not installed; install the present extra: "
              "pip install -e '.[present]' (make test installs it)", file=sys.stderr)
        return 2
    try:
        cmd = voila_command(args.port, open_browser=not args.no_browser, ip=args.ip)
    except (TypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"projector view: http://{args.ip}:{args.port}/  (Ctrl+C stops it)", flush=True)
    try:
        return subprocess.call(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except KeyboardInterrupt:
        return 0


def add_parser(subparsers) -> None:
    """Register ``present`` on the ``python -m collnb`` command line."""
    p = subparsers.add_parser(
        "present", help="projector view: explorer and replay as a Voilà app, no code, large type",
        description="Serve the explorer and the round-by-round replay with Voilà (no code, large type).")
    p.add_argument("--port", type=int, default=8866, help="port to serve on (default 8866)")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.set_defaults(func=_cmd_present)
