# Types for the parts of ipywidgets 8.1 that collnb uses (ipywidgets ships none): the widgets of the
# explorers and replay players of collnb.views, with the traits collnb sets and reads, typed as
# ipywidgets/widgets/*.py declares them (Unicode -> str, CInt -> int, CFloat -> float, Bool -> bool,
# Bytes -> bytes, TypedTuple -> tuple; a selection's value and options are any objects: Any(...)
# traits). A widget's constructor takes its traits as keywords (traitlets' HasTraits.__init__): only
# the ones collnb passes are listed. The class tree is ipywidgets' (widget.py, domwidget.py,
# valuewidget.py, widget_description.py, widget_int.py, widget_float.py, widget_selection.py,
# widget_string.py, widget_media.py, widget_box.py, widget_button.py, widget_layout.py,
# widget_link.py); the bases it does not export at the top are named here with a leading underscore.
from typing import Any, Callable, Iterable, Sequence

from traitlets import HasTraits

class Widget(HasTraits):
    def close(self) -> None: ...
    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None: ...

class Layout(Widget):
    # CSS properties (Unicode(None, allow_none=True) or a CaselessStrEnum)
    display: str | None
    width: str | None
    def __init__(self, *, width: str | None = None, max_width: str | None = None, min_width: str | None = None,
                 height: str | None = None, margin: str | None = None, flex_flow: str | None = None,
                 align_items: str | None = None) -> None: ...

class Style(Widget): ...

class DOMWidget(Widget):
    layout: Layout
    def add_class(self, className: str) -> DOMWidget: ...

class CoreWidget(Widget): ...

class ValueWidget(Widget):
    value: Any

# ipywidgets.widgets.widget_description.DescriptionWidget
class _DescriptionWidget(DOMWidget, CoreWidget):
    description: str

# the style a described widget is given: a Style, or its traits as a dict (InstanceDict)
_StyleArg = Style | dict[str, str]

# ipywidgets.widgets.widget_int._Int, _BoundedInt
class _BoundedInt(_DescriptionWidget, ValueWidget, CoreWidget):
    value: int
    min: int
    max: int
    step: int
    disabled: bool

class IntSlider(_BoundedInt):
    def __init__(self, value: int = 0, min: int = 0, max: int = 100, step: int = 1, *, description: str = "",
                 continuous_update: bool = True, style: _StyleArg | None = None, layout: Layout | None = None,
                 tooltip: str | None = None) -> None: ...

class Play(_BoundedInt):
    interval: int  # ms between two steps
    def __init__(self, value: int = 0, min: int = 0, max: int = 100, step: int = 1, *, interval: int = 100,
                 description: str = "", show_repeat: bool = True, tooltip: str | None = None) -> None: ...

# ipywidgets.widgets.widget_float._Float, _BoundedFloat
class _BoundedFloat(_DescriptionWidget, ValueWidget, CoreWidget):
    value: float
    min: float
    max: float

class FloatSlider(_BoundedFloat):
    def __init__(self, value: float = 0.0, min: float = 0.0, max: float = 100.0, step: float = 0.1, *,
                 description: str = "", readout_format: str = ".2f", tooltip: str | None = None,
                 style: _StyleArg | None = None, layout: Layout | None = None) -> None: ...

# ipywidgets.widgets.widget_selection._Selection: options are any objects, or (label, value) pairs;
# read back, they are a tuple of what was given
class _Selection(_DescriptionWidget, ValueWidget, CoreWidget):
    value: Any
    disabled: bool
    @property
    def options(self) -> tuple[Any, ...]: ...
    @options.setter
    def options(self, options: Iterable[Any]) -> None: ...

class Dropdown(_Selection):
    def __init__(self, *, options: Iterable[Any] = (), value: Any = None, description: str = "",
                 disabled: bool = False, style: _StyleArg | None = None, layout: Layout | None = None) -> None: ...

class ToggleButtons(_Selection):
    def __init__(self, *, options: Iterable[Any] = (), value: Any = None, tooltips: Sequence[str] = (),
                 style: _StyleArg | None = None, layout: Layout | None = None) -> None: ...

class SelectionSlider(_Selection):
    def __init__(self, *, options: Iterable[Any], value: Any = None, description: str = "",
                 continuous_update: bool = True, style: _StyleArg | None = None,
                 layout: Layout | None = None) -> None: ...

# ipywidgets.widgets.widget_string._String
class _String(_DescriptionWidget, ValueWidget, CoreWidget):
    value: str
    def __init__(self, value: str | None = None, *, layout: Layout | None = None) -> None: ...

class HTML(_String): ...
class Label(_String): ...

class Image(DOMWidget, ValueWidget, CoreWidget):
    value: bytes
    format: str
    width: str  # a CUnicode: pixels as a number in a str, or a CSS length
    def __init__(self, *, value: bytes = b"", format: str = "png", layout: Layout | None = None) -> None: ...

class Box(DOMWidget, CoreWidget):
    @property
    def children(self) -> tuple[Widget, ...]: ...
    @children.setter
    def children(self, children: Sequence[Widget]) -> None: ...
    def __init__(self, children: Sequence[Widget] = (), *, layout: Layout | None = None) -> None: ...

class HBox(Box): ...
class VBox(Box): ...

class Button(DOMWidget, CoreWidget):
    description: str
    tooltip: str | None
    disabled: bool
    def __init__(self, *, description: str = "", tooltip: str | None = None, layout: Layout | None = None) -> None: ...
    # callback(button) on each click
    def on_click(self, callback: Callable[[Button], object], remove: bool = False) -> None: ...

# ipywidgets.widgets.widget_link.Link
class _Link(CoreWidget): ...

def jslink(attr1: tuple[Widget, str], attr2: tuple[Widget, str]) -> _Link: ...
