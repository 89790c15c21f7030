# Types for the parts of IPython 9 that collnb uses: IPython.display's display and update_display
# (collnb.views shows a live panel and keeps a saved notebook's static picture current) and the
# PrettyPrinter an object's _repr_pretty_ is handed (IPython.lib.pretty). IPython ships py.typed, but
# these are unannotated (IPython/core/display_functions.py, IPython/lib/pretty.py), which mypy
# --strict refuses to call; this package stands in for IPython when collnb is type-checked.
