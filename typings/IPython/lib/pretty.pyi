# IPython 9's pretty printer (IPython/lib/pretty.py), as an object's _repr_pretty_(p, cycle) is handed
# it: the one method collnb calls. See ../../__init__.pyi.
class PrettyPrinter:
    def text(self, obj: str) -> None: ...
