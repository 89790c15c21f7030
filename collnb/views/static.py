"""Static stand-ins for live widgets: what a saved notebook, nbviewer, a code host or a MyST-NB
book shows where no kernel runs (a PNG of the widget's last state and one line, worded for where it
is shown: "run this cell" in a notebook, "open it on Binder or Colab" in the book), and CSS that
hides the picture while the live panel is on the page and shows one hint only when the live
panel has lost its kernel.
"""

from __future__ import annotations

import base64
import html
import io
import re
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence, TypeAlias

import numpy as np
from PIL import Image

from ..i18n import N_, _
from .raster import Canvas, Pixels, wrap_text

if TYPE_CHECKING:
    from ipywidgets import Widget

__all__ = ["update_static", "static_bundle", "captioned_png", "stack_pngs", "live_bundle", "RERUN_LINE", "BOOK_LINE",
           "SLIDES_LINE", "LIVE_HINT", "APP_HINT", "STATIC_CSS", "IMG_STYLE", "esc", "rerun_line", "WHAT_WORDS",
           "MimeBundle"]

#: What a display shows, by mime type: ``text/plain``, ``text/html``, ``image/png`` (base64 text),
#: ipywidgets' view (``application/vnd.jupyter.widget-view+json``: a JSON object).
MimeBundle: TypeAlias = dict[str, object]

#: The line above a saved explorer's or replay's static picture in a notebook (JupyterLab,
#: Notebook 7, nbviewer) reopened without its kernel.
#: The lines and hints below are English; what is shown is their translation (:func:`rerun_line`,
#: :func:`static_bundle`, ``_(LIVE_HINT)``).
RERUN_LINE = N_("Static picture of the {what}'s last state: run this cell to bring back its controls.")
#: The same line on a page of the book (MyST-NB), where there is no cell to run.
BOOK_LINE = N_("Static picture of the {what}'s last state. Its controls need a running kernel: open this "
               "notebook on Binder or Colab (the launch button at the top of the page) and run the cell.")
#: The same line on RISE slides (jupyterlab-rise 0.43 cannot load the ipywidgets 8 manager:
#: jupyterlab-contrib/rise#119), where running the cell on the slide redraws this picture.
SLIDES_LINE = N_("Static picture of the {what}: its live controls do not run on RISE slides; run the cell "
                 "here to redraw it, or use the controls in the notebook or in python -m collnb present.")
#: The widgets a static picture stands in for (``what``), named in the lines above.
WHAT_WORDS = {"explorer": N_("explorer"), "replay": N_("replay"), "comparison": N_("comparison"),
              # the labs' explorers (Binder's what=): each named here, so that its line is translated whole
              "ring explorer": N_("ring explorer"), "cluster explorer": N_("cluster explorer"),
              "bucket explorer": N_("bucket explorer"), "pipeline explorer": N_("pipeline explorer"),
              "composed-parallelism explorer": N_("composed-parallelism explorer")}


def _what(what: str) -> str:
    return _(WHAT_WORDS.get(what, what))


def rerun_line(what: str, line: str = RERUN_LINE) -> str:
    """The line over a static picture of ``what`` (``"explorer"``, ``"replay"``, ``"comparison"``,
    or another widget's name) in the language spoken now: ``line`` (:data:`RERUN_LINE`,
    :data:`BOOK_LINE` or :data:`SLIDES_LINE`) translated, with ``what`` translated in it.
    In English it is ``line.format(what=what)``."""
    return _(line).format(what=_what(what))

#: Inline style of every picture: scaled down to the output's width, never up.
IMG_STYLE = "max-width:100%;height:auto;display:block"


def esc(s: object) -> str:
    """``s`` as HTML text (quotes escaped too, for attributes)."""
    return html.escape(str(s), quote=True)


def update_static(display_ids: Sequence[str], bundle: Callable[[], MimeBundle]) -> None:
    """Replace the static picture shown under each of ``display_ids`` (IPython display ids) with
    ``bundle()`` (a MIME bundle, e.g. :func:`static_bundle`'s), made once and only when some display
    shows it. Does nothing outside IPython, and never raises (the kernel may be going away)."""
    if not display_ids:
        return
    try:
        from IPython.display import update_display  # noqa: PLC0415
        data = bundle()
        for did in list(display_ids):
            update_display(data, raw=True, display_id=did)
    except Exception:  # noqa: BLE001 - outside IPython, or the kernel is going away
        pass


def captioned_png(png: bytes | Pixels | None, line: str) -> bytes | None:
    """The picture ``png`` with ``line`` painted above it (14 px bold text on light yellow, wrapped
    to the picture's width so that no word is cut off), as PNG bytes, for frontends that show only
    the ``image/png`` of a saved output; ``None`` stays ``None``.

    ``png``: PNG bytes, or the picture's pixels (a uint8 H x W x 3 array) when the caller still
    holds them: then nothing is decoded (the explorer passes its heatmap's pixels)."""
    if png is None:
        return None
    if isinstance(png, np.ndarray):
        img = Image.fromarray(np.ascontiguousarray(png[..., :3], dtype=np.uint8), "RGB")
    else:
        img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    probe = Canvas(1, 1)
    lines = wrap_text(line, w - 20, lambda t: probe.measure(t, 14, "bold")[0]) or [""]
    step, strip = 20, 30 + 20 * (len(lines) - 1)
    cv = Canvas(w, h + strip)
    cv.paste(img, 0, strip)
    cv.rect(0, 0, w, strip - 2, "#FFF4D6")
    for i, text in enumerate(lines):
        cv.text(text, 10, 14 + step * i, 14, "#5A3B00", "bold", ha="left")
    return cv.png()


def stack_pngs(pngs: Iterable[bytes], gap: int = 10) -> bytes:
    """PNG images one below the other, left-aligned on white, ``gap`` pixels apart (and below)."""
    imgs = [Image.open(io.BytesIO(p)).convert("RGB") for p in pngs]
    cv = Canvas(max(i.size[0] for i in imgs), sum(i.size[1] + gap for i in imgs))
    y = 0
    for im in imgs:
        cv.paste(im, 0, y)
        y += im.size[1] + gap
    return cv.png()


#: CSS carried by every static picture (``:has`` needs Chromium 105+, Firefox 121+, Safari 15.4+):
#:
#: * while a live collnb panel (class ``collnb-live``) is in the same output area (JupyterLab 4,
#:   Notebook 7, Voilà) the picture and its line are hidden;
#: * the one-line hint (:data:`LIVE_HINT`) shows only when that panel has lost its kernel:
#:   ipywidgets marks the views of a model whose comm is gone (kernel restarted or stopped) with
#:   ``jupyter-widgets-disconnected``; in a Voilà app, which has no cells, it says to reload
#:   (:data:`APP_HINT`);
#: * a MyST-NB book page (its outputs sit in ``.cell_output``) shows the book's wording
#:   (:data:`BOOK_LINE`) instead of the notebook's; RISE slides (``.reveal``) the slides' wording
#:   (:data:`SLIDES_LINE`), and the picture fits the slide's height.
STATIC_CSS = ("<style>.collnb-static .collnb-live-hint,.collnb-static .collnb-where-book,"
              ".collnb-static .collnb-where-slides,.collnb-static .collnb-hint-app{display:none}"
              ".cell_output .collnb-static .collnb-where-book{display:inline}"
              ".cell_output .collnb-static .collnb-where-notebook{display:none}"
              ".reveal .collnb-static .collnb-where-slides{display:inline}"
              ".reveal .collnb-static .collnb-where-notebook{display:none}"
              ".jp-OutputArea:has(.collnb-live) .collnb-static .collnb-static-body{display:none}"
              ".jp-OutputArea:has(.collnb-live.jupyter-widgets-disconnected) .collnb-static .collnb-live-hint"
              "{display:block}"
              "[data-voila] .collnb-static .collnb-hint-notebook{display:none}"
              "[data-voila] .collnb-static .collnb-hint-app{display:inline}"
              ".reveal .collnb-static-img{max-height:62vh;width:auto;max-width:100%}"
              "</style>")
#: The hint shown above a live panel that lost its kernel (it stays on the page, inert).
LIVE_HINT = N_("These controls lost their kernel (it was restarted or stopped): run this cell again to bring "
               "them back.")
#: The same hint in a Voilà app (no cells to run).
APP_HINT = N_("These controls lost their kernel: reload the page to start them again.")


def live_bundle(widget: Widget, text: str) -> MimeBundle:
    """The display bundle of a live panel: ipywidgets' view of ``widget``, ``text`` as its plain
    text, and an empty ``text/html``, so that a page that cannot run widgets (the book, nbviewer)
    shows only the static picture displayed above it, not a dead panel's repr."""
    data: MimeBundle = dict(widget._repr_mimebundle_() or {})
    data["text/plain"] = text
    data["text/html"] = "<span class='collnb-live-placeholder' style='display:none'></span>"
    return data


def static_bundle(png: bytes | None, what: str, *, alt: str = "", caption: str = "",
                  png_with_line: bytes | None = None, attrs: Mapping[str, object] | None = None,
                  below: str = "") -> MimeBundle:
    """A display bundle standing in for a live widget (an explorer or a replay) where no kernel
    runs: a saved notebook reopened, nbviewer, a code host, a MyST-NB book.

    * ``text/html``: one line (:data:`RERUN_LINE` in a notebook, :data:`BOOK_LINE` on a page of
      the book, :data:`SLIDES_LINE` on RISE slides) above ``<img class="collnb-static-img">`` of ``png``, in a
      ``<div class="collnb-static">`` whose CSS (:data:`STATIC_CSS`) hides it while a live panel
      (class ``collnb-live``) is in the same output area, and shows one hint there only when
      that panel lost its kernel (:data:`LIVE_HINT`; :data:`APP_HINT` in a Voilà app);
    * ``image/png``: ``png_with_line`` (the same picture with the line painted above it), for
      frontends that show only images;
    * ``text/plain``: the line.

    Args:
        png: PNG bytes of the current state, or None (no picture yet: the line and ``caption``).
        what: ``"explorer"`` or ``"replay"`` (goes into the line).
        alt: the image's alt text. caption: text shown when there is no picture.
        attrs: extra ``data-*`` attributes of the ``<img>`` (e.g. world_size).
        below: the live panel's caption of this state (HTML; its text goes under the picture and,
            on a line of its own, into ``text/plain``), so the saved caption is the picture's own.
    """
    line = rerun_line(what)
    below_text = html.unescape(re.sub(r"<[^>]+>", "", below)).strip()
    data: MimeBundle = {"text/plain": line + ("\n" + below_text if below_text else "")}
    hint = (f"<div class='collnb-live-hint' style='color:#8a5300;font-size:12px;line-height:1.4'>"
            f"<span class='collnb-hint-notebook'>{esc(_(LIVE_HINT))}</span>"
            f"<span class='collnb-hint-app'>{esc(_(APP_HINT))}</span></div>")
    worded = (f"<span class='collnb-where-notebook'>{esc(line)}</span>"
              f"<span class='collnb-where-book'>{esc(rerun_line(what, BOOK_LINE))}</span>"
              f"<span class='collnb-where-slides'>{esc(rerun_line(what, SLIDES_LINE))}</span>")
    if png is None:
        data["text/html"] = (f"{STATIC_CSS}<div class='collnb-static'><div class='collnb-static-body'>"
                             f"<i>{worded}</i> {esc(caption)}</div>{hint}</div>")
        return data
    b64 = base64.b64encode(png).decode("ascii")
    extra = " ".join(f'data-{k.replace("_", "-")}="{esc(v)}"' for k, v in (attrs or {}).items())
    data["text/html"] = (f"{STATIC_CSS}<div class='collnb-static'><div class='collnb-static-body'>"
                         f"<div class='collnb-static-line' style='color:#5A3B00;background:#FFF4D6;"
                         f"padding:3px 8px;display:inline-block;line-height:1.4;max-width:100%'>{worded}</div><br>"
                         f"<img class=\"collnb-static-img\" src=\"data:image/png;base64,{b64}\" alt=\"{esc(alt)}\" "
                         f"{extra} style=\"{IMG_STYLE}\">"
                         + (f"<div class='collnb-static-caption' style='line-height:1.4'>{esc(below_text)}</div>"
                            if below_text else "") + f"</div>{hint}</div>")
    data["image/png"] = base64.b64encode(png_with_line or png).decode("ascii")
    return data
