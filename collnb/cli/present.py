"""``python -m collnb present``: the explorer and the round-by-round replay as a projector view.

A Voilà app (``voila``, the ``present`` extra) on the notebook shipped as
``collnb/data/present.ipynb``: Voilà runs it in a kernel and shows only its outputs (no code
cells), laid out for a room: the primitive explorer with every primitive in its dropdown (sliders
re-run collectives on warm ranks) and the rounds explorer (primitive, algorithm, world size; play /
step the rounds).

Layout (:func:`projector_css`): the page is laid out at :data:`LAYOUT_WIDTH_PX` CSS pixels and
scaled with CSS ``zoom`` to the screen (x1.5 on a 1920 px projector, x1 at 1280 px), so every
control keeps the geometry ipywidgets gave it (nothing overlaps, no slider collapses) and text
grows with it; the heatmap and the replay frame fill the width (drawn at :data:`FIGURE_DPI`).

The page is served on the port asked for or not at all: Voilà's own ``port_retries`` (50 by
default, which would serve on another port than the URL printed) is set to 0, and a port already
in use is said before Voilà starts.

Exit status: 0 when Voilà ends normally; 2 when Voilà is not installed, the port is bad or in use,
or the address cannot be listened on.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

from ..i18n import N_, _
from ..vocabulary import check_int
from .common import Subparsers

#: The notebook Voilà serves.
NOTEBOOK = Path(__file__).resolve().parent.parent / "data" / "present.ipynb"

#: The width the page is laid out at (CSS pixels); wider screens zoom it (:data:`ZOOM_STEPS`).
LAYOUT_WIDTH_PX = 1280
#: ``(minimum screen width in CSS px, zoom)``, widest first: 1920 x 1080 -> x1.5, 1600 -> x1.25.
ZOOM_STEPS = ((1900, 1.5), (1580, 1.25))
#: Resolution of the explorer's heatmap in the projector view (its natural width ~1000-1200 px).
FIGURE_DPI = 120
#: The smallest body text on a 1920 px screen (CSS px): ipywidgets' 13 px x 1.5.
FONT_PX = 13 * ZOOM_STEPS[0][1]


def projector_css() -> str:
    """The ``<style>`` of the projector view (see the module doc): zoom steps, figures that fill
    the width, no static stand-ins (the app always has its kernel)."""
    zoom = "".join(f"@media (min-width: {w}px) {{ html {{ zoom: {z}; }} }}" for w, z in reversed(ZOOM_STEPS))
    return ("<style>"
            f"{zoom}"
            "body { margin: 0; }"
            ".jp-Cell, .jp-OutputArea-output, #rendered_cells { max-width: none !important; }"
            # the figures fill the width of the page (scaled from their drawn size)
            ".collnb-explorer .collnb-picture { flex: 1 1 100%; width: 100%; }"
            ".collnb-explorer img.collnb-heatmap { width: 100% !important; max-width: 100% !important;"
            " height: auto !important; }"
            ".collnb-explorer .collnb-reference-box { margin-left: 0 !important; }"
            ".collnb-replay .widget-image, .collnb-replay img { width: 100% !important; max-width: 100% !important;"
            " height: auto !important; }"
            # the app has its kernel for as long as the page is open: no static stand-ins
            ".collnb-static .collnb-static-body { display: none !important; }"
            "</style>")


def voila_command(port: int = 8866, open_browser: bool = True, ip: str = "127.0.0.1") -> list[str]:
    """The ``voila`` command line that serves :data:`NOTEBOOK` (sources stripped, light theme).

    Raises:
        TypeError: ``port`` is not an int; ValueError: outside 1..65535 (the words of
            :func:`collnb.vocabulary.check_int`).
    """
    check_int("port", port, 1, 65535, what=N_("a TCP port"))
    return [sys.executable, "-m", "voila", str(NOTEBOOK), f"--port={port}", "--Voila.port_retries=0",
            f"--Voila.ip={ip}",
            "--strip_sources=True", "--theme=light", "--show_tracebacks=True",
            *([] if open_browser else ["--no-browser"])]


def _bind_error(ip: str, port: int) -> OSError | None:
    """Bind ``ip``:``port`` exactly as Voilà's tornado server will (``tornado.netutil.bind_sockets``:
    every address the name resolves to, ``SO_REUSEADDR``, IPv6 sockets ``IPV6_V6ONLY``; ``""`` is
    every interface), close the sockets, and return the error, or None when it could."""
    from tornado.netutil import bind_sockets  # noqa: PLC0415 - Voilà's own dependency; present checks Voilà first

    try:
        for sock in bind_sockets(port, ip):
            sock.close()
    except OSError as exc:
        return exc
    return None


def listen_problem(ip: str, port: int) -> str | None:
    """Why Voilà could not listen on ``ip``:``port`` now (a translated sentence naming a free port
    to use instead when this one is taken), or None if it can.

    The answer can be out of date a moment later; Voilà, started with ``port_retries=0``, then
    fails rather than serve elsewhere.
    """
    exc = _bind_error(ip, port)
    if exc is None:
        return None
    if isinstance(exc, socket.gaierror):
        return _("cannot listen on {ip}: {reason}; give an address of this machine with --ip "
                 "(default 127.0.0.1)").format(ip=ip, reason=exc.strerror)
    if exc.errno == errno.EADDRINUSE:
        others = [q for q in range(port + 1, min(port + 50, 65535) + 1) if _bind_error(ip, q) is None][:1]
        where = "" if ip == "127.0.0.1" else f" --ip {ip or repr(ip)}"
        if not others:
            return _("port {port} on {ip} is in use (another projector view or server?); stop it, or choose "
                     "another port with --port").format(port=port, ip=ip or "*")
        return _("port {port} on {ip} is in use (another projector view or server?); stop it, or choose "
                 "another port: python -m collnb present --port {other}").format(
                     port=port, ip=ip or "*", other=f"{others[0]}{where}")
    return _("cannot listen on {ip}:{port}: {reason}; give an address of this machine with --ip "
             "(default 127.0.0.1)").format(ip=ip, port=port, reason=exc.strerror)


def page_url(ip: str, port: int) -> str:
    """The URL a browser on this machine opens: ``ip`` in brackets when it is IPv6, ``localhost``
    for every interface (``""``, ``0.0.0.0``, ``::``)."""
    host = "localhost" if ip in ("", "0.0.0.0", "::") else f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}/"


def _cmd_present(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("voila") is None:
        print(_("error: Voilà is not installed; install the present extra: "
                "pip install -e '.[present]' (make test installs it)"), file=sys.stderr)
        return 2
    try:
        cmd = voila_command(args.port, open_browser=not args.no_browser, ip=args.ip)
    except (TypeError, ValueError) as exc:
        print(_("error: {message}").format(message=exc), file=sys.stderr)
        return 2
    problem = listen_problem(args.ip, args.port)
    if problem is not None:
        print(_("error: {message}").format(message=problem), file=sys.stderr)
        return 2
    print(_("projector view: {url}  (Ctrl+C stops it)").format(url=page_url(args.ip, args.port)), flush=True)
    try:
        return subprocess.call(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except KeyboardInterrupt:
        return 0


def add_parser(subparsers: Subparsers[argparse.ArgumentParser]) -> None:
    """Register ``present`` on the ``python -m collnb`` command line."""
    p = subparsers.add_parser(
        "present", help=_("projector view: explorer and replay as a Voilà app, no code, laid out for a room"),
        description=_("Serve the explorer and the round-by-round replay with Voilà (no code, laid out for a "
                      "1280 or 1920 px projector)."))
    p.add_argument("--port", type=int, default=8866, help=_("port to serve on (default 8866)"))
    p.add_argument("--ip", default="127.0.0.1", help=_("address to listen on (default 127.0.0.1)"))
    p.add_argument("--no-browser", action="store_true", help=_("do not open a browser"))
    p.set_defaults(func=_cmd_present)
