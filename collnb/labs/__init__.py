"""Layer 5, labs: what a notebook builds on the layers below. Exercise checks
(:mod:`collnb.exercises`), the bandwidth lab (:mod:`collnb.bench`), the original examples the project
reproduces (:mod:`collnb.examples`), standalone torchrun scripts (:mod:`collnb.labs.script`), the
parallelisms of notebooks 11 and 13-16 (:mod:`collnb.labs.parallel`), the DDP part of the overlap lab of
notebook 17 (:mod:`collnb.labs.overlap`: buckets, comm hooks, HTA's overlap two ways) and the hang lab of
notebook 18 (:mod:`collnb.labs.hangs`: faults, the Flight Recorder's dumps, fr_trace), and a virtual
cluster on one machine (:mod:`collnb.labs.cluster`: nodes as network namespaces, a shaped link,
hierarchical all_reduce), and the code of a named piece as a notebook shows it (:mod:`collnb.labs.code`).
"""

from . import bench, cluster, code, examples, exercises, hangs, overlap, parallel, script

__all__ = ["bench", "cluster", "code", "examples", "exercises", "hangs", "overlap", "parallel", "script"]
