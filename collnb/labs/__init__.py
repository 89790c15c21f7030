"""Layer 5, labs: what a notebook builds on the layers below. Exercise checks
(:mod:`collnb.exercises`), the bandwidth lab (:mod:`collnb.bench`), the original examples the project
reproduces (:mod:`collnb.examples`) and standalone torchrun scripts (:mod:`collnb.labs.script`).
"""

from . import bench, examples, exercises, script

__all__ = ["bench", "examples", "exercises", "script"]
