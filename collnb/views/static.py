"""Static stand-ins for live widgets: what a saved notebook, nbviewer, a code host or a MyST-NB
book shows where no kernel runs (a PNG of the widget's last state, one line saying to run the cell,
and CSS that hides the picture while the live panel is on the page).
"""

from __future__ import annotations

import base64
import html
import io

from PIL import Image

from .raster import Canvas

__all__ = ["static_bundle", "captioned_png", "stack_pngs", "RERUN_LINE", "LIVE_HINT", "IMG_STYLE", "esc"]

#: One line under a saved explorer's or replay's static picture.
RERUN_LINE = "Static picture of the {what}'s last state: run this cell to bring back its controls."

#: Inline style of every picture: scaled down to the output's width, never up.
IMG_STYLE = "max-width:100%;height:auto;display:block"


def esc(s) -> str:
    """``s`` as HTML text (quotes escaped too, for attributes)."""
    return html.escape(str(s), quote=True)


def captioned_png(png: bytes | None, line: str) -> bytes | None:
    """``png`` with ``line`` painted in a 30 px strip above it (14 px bold text on light yellow),
    for frontends that show only the ``image/png`` of a saved output; ``None`` stays ``None``."""
    if png is None:
        return None
    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    strip = 30
    cv = Canvas(w, h + strip)
    cv.paste(img, 0, strip)
    cv.rect(0, 0, w, strip - 2, "#FFF4D6")
    cv.text(line, 10, strip / 2 - 1, 14, "#5A3B00", "bold", ha="left")
    return cv.png()


def stack_pngs(pngs, gap: int = 10) -> bytes:
    """PNG images one below the other, left-aligned on white, ``gap`` pixels apart (and below)."""
    imgs = [Image.open(io.BytesIO(p)).convert("RGB") for p in pngs]
    cv = Canvas(max(i.size[0] for i in imgs), sum(i.size[1] + gap for i in imgs))
    y = 0
    for im in imgs:
        cv.paste(im, 0, y)
        y += im.size[1] + gap
    return cv.png()


#: CSS carried by every static picture: while a live collnb panel is in the same output area
#: (JupyterLab 4 and Notebook 7 DOM; ``:has`` needs Chromium 105+, Firefox 121+, Safari 15.4+) the
#: picture and its line are hidden and only a one-line hint shows, for the case the page cannot
#: detect: a kernel restart leaves the old panel on the page, looking alive but answering nothing.
_STATIC_CSS = ("<style>.collnb-static .collnb-live-hint{display:none}"
               ".jp-OutputArea:has(.collnb-live) .collnb-static .collnb-static-body{display:none}"
               ".jp-OutputArea:has(.collnb-live) .collnb-static .collnb-live-hint{display:block}</style>")
#: The hint shown above a live panel.
LIVE_HINT = "Controls not responding (after a kernel restart)? Run this cell again."


def static_bundle(png: bytes | None, what: str, *, alt: str = "", caption: str = "",
                  png_with_line: bytes | None = None, attrs: dict | None = None) -> dict:
    """A display bundle standing in for a live widget (an explorer or a replay) where no kernel
    runs: a saved notebook reopened, nbviewer, a code host, a MyST-NB book.

    * ``text/html``: one line ("Static picture of the explorer's last state: run this cell to
      bring back its controls.") above ``<img class="collnb-static-img">`` of ``png``, in a
      ``<div class="collnb-static">`` whose CSS hides it while a live panel (class
      ``collnb-live``) is in the same output area, where only a one-line hint shows instead
      (:data:`LIVE_HINT`: after a kernel restart the old panel stays on the page, inert);
    * ``image/png``: ``png_with_line`` (the same picture with the line painted above it), for
      frontends that show only images;
    * ``text/plain``: the line.

    Args:
        png: PNG bytes of the current state, or None (no picture yet: the line and ``caption``).
        what: ``"explorer"`` or ``"replay"`` (goes into the line).
        alt: the image's alt text. caption: text shown when there is no picture.
        attrs: extra ``data-*`` attributes of the ``<img>`` (e.g. world_size).
    """
    line = RERUN_LINE.format(what=what)
    data = {"text/plain": line}
    hint = (f"<div class='collnb-live-hint' style='color:#555;font-size:12px;line-height:1.4'>"
            f"{esc(LIVE_HINT)}</div>")
    if png is None:
        data["text/html"] = (f"{_STATIC_CSS}<div class='collnb-static'><div class='collnb-static-body'>"
                             f"<i>{esc(line)}</i> {esc(caption)}</div>{hint}</div>")
        return data
    b64 = base64.b64encode(png).decode("ascii")
    extra = " ".join(f'data-{k.replace("_", "-")}="{esc(v)}"' for k, v in (attrs or {}).items())
    data["text/html"] = (f"{_STATIC_CSS}<div class='collnb-static'><div class='collnb-static-body'>"
                         f"<div class='collnb-static-line' style='color:#5A3B00;background:#FFF4D6;"
                         f"padding:3px 8px;display:inline-block'>{esc(line)}</div><br>"
                         f"<img class=\"collnb-static-img\" src=\"data:image/png;base64,{b64}\" alt=\"{esc(alt)}\" "
                         f"{extra} style=\"{IMG_STYLE}\"></div>{hint}</div>")
    data["image/png"] = base64.b64encode(png_with_line or png).decode("ascii")
    return data

