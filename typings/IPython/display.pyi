# IPython 9's display and update_display (IPython/core/display_functions.py, re-exported by
# IPython.display), with the arguments collnb passes: see ../__init__.pyi.
from typing import Any, Sequence

class DisplayHandle: ...

# a display_id gives the DisplayHandle of that display; without one, None
def display(*objs: object, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None, metadata: dict[str, Any] | None = None,
            transient: dict[str, Any] | None = None, display_id: str | bool | None = None, raw: bool = False,
            clear: bool = False, **kwargs: Any) -> DisplayHandle | None: ...
def update_display(obj: object, *, display_id: str, raw: bool = False, **kwargs: Any) -> None: ...
