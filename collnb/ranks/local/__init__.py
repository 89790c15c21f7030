"""Local ranks: rank processes forked (or spawned) on this machine and kept warm between calls.

The launcher's side (the warm pool, its wait for answers, the ranks' output, process life) and the
rank process's own loop. Other parts of :mod:`collnb.ranks` import its modules by name; other
layers use :mod:`collnb.ranks`.
"""
