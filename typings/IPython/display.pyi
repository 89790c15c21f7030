# IPython 9's display and update_display (IPython/core/display_functions.py, re-exported by
# IPython.display), with the arguments collnb passes, and Image (IPython/core/display.py), which
# collnb.labs.cluster.as_image makes of a figure's PNG: see ../__init__.pyi.
from typing import Any, Sequence

class DisplayHandle: ...

# a display_id gives the DisplayHandle of that display; without one, None
def display(*objs: object, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None, metadata: dict[str, Any] | None = None,
            transient: dict[str, Any] | None = None, display_id: str | bool | None = None, raw: bool = False,
            clear: bool = False, **kwargs: Any) -> DisplayHandle | None: ...
def update_display(obj: object, *, display_id: str, raw: bool = False, **kwargs: Any) -> None: ...

class Image:
    def __init__(self, data: bytes | str | None = None, url: str | None = None, filename: str | None = None,
                 format: str | None = None) -> None: ...
