"""What a call records on its ranks: every communication operation (:mod:`.recording`), the ranks'
timelines (:mod:`.timeline`), torch's Flight Recorder entries (:mod:`.flight_recorder`), and the
wrappers of torch.distributed's functions that measure waits and name timeouts (:mod:`._dist_hooks`,
:mod:`.timeouts`).
"""
