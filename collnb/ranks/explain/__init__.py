"""Explaining a failed call: the rank that caused it and what happened to every rank
(:mod:`.failures`), with the learner's frames only (:mod:`.tracebacks`).
"""
