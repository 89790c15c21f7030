"""One call of the learner's function on a rank, the steps local ranks and engines share
(:mod:`.steps`), and the process groups it runs in, makes and keeps (:mod:`.groups`).
"""
