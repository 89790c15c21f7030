"""What a call records on its ranks, behind one interface every rank set calls (:mod:`.interface`):
every communication operation (:mod:`.recording` makes :mod:`.records`), each rank's track of the
call's timeline (:mod:`.tracks`, put on one clock by :mod:`.timeline`), torch's Flight Recorder
entries (:mod:`.flight_recorder`), the backend's C++ log lines (:mod:`.backend_log`), and the
wrappers of torch.distributed's functions that measure waits and name timeouts (:mod:`._dist_hooks`,
:mod:`.timeouts`).
"""
