"""Ranks on ipyparallel engines: :func:`collnb.connect`'s side in the kernel (:mod:`.connection`)
and the functions ipyparallel applies on each engine (:mod:`.engines`).
"""
