"""A warm rank as clean as a fresh script for every call: what a call changed is put back and what
cannot be put back retires the rank (:mod:`.rank_state`; the torch settings it puts back:
:mod:`.torch_settings`), read cheaply (:mod:`.state_probes`).
"""
