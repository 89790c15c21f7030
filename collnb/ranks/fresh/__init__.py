"""A warm rank as clean as a fresh script for every call: what a call changed is put back and what
cannot be put back retires the rank (:mod:`.rank_state`), read cheaply (:mod:`.state_probes`).
"""
