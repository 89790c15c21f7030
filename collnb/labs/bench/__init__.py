"""Bandwidth lab: time collectives on real ranks (collnb's way, or nccl-tests'), next to the machine's limits.

Modules: :mod:`.inputs` (what is measured, checked before any rank starts), :mod:`.measuring`
(the rank side), :mod:`.references` (memcpy, TCP, local reduction), :mod:`.rows` (rows and files),
:mod:`.sweep` (:func:`bench`, :func:`debug_cost`), :mod:`.figure` (text table and plot).

``bench("all_reduce", world_sizes=(2, 4), sizes="1K:64M")`` launches the ranks
(:func:`collnb.launch`, ``debug=False``), and for every world size, size and algorithm
runs the collective ``warmup`` times, then ``iters`` timed times, and returns one row per
measurement (a pandas ``DataFrame`` when pandas is installed, else a list of dicts):

==============  ==========================================================================
column          meaning
==============  ==========================================================================
primitive       ``all_reduce``, ``all_gather``, ... (or a physical reference, see below)
algorithm       ``builtin`` (the backend's own collective) or a :mod:`collnb.algorithms` name
backend         ``gloo`` / ``nccl`` (``cpu`` / ``tcp`` for the references)
world_size      number of ranks
dtype           element type, e.g. ``float32``
nbytes          bytes per rank as nccl-tests' "size" counts them: the all_reduce / broadcast /
                reduce buffer; the whole all_gather output; the whole reduce_scatter input; the
                root's whole scatter / gather buffer; one rank's whole all_to_all input
time_s          ``timing="collnb"``: median over the timed iterations of the slowest rank's time;
                ``timing="nccl-tests"``: mean over the ranks of each rank's time per call of a
                back-to-back loop (seconds)
time_min_s      fastest iteration (its slowest rank); nccl-tests timing: the fastest rank
time_max_s      slowest iteration; nccl-tests timing: the slowest rank
algbw_GBps      ``nbytes / time_s / 1e9``
busbw_GBps      ``algbw_GBps * busbw_factor(primitive, world_size)``
ok              every checked result equalled the reference on every rank
==============  ==========================================================================

**Timing** (``timing=``, :data:`TIMINGS`). Both warm up first (``warmup`` untimed calls).

* ``"collnb"`` (the default): before every iteration each rank resets its buffers (outside the
  timed region) and waits in ``dist.barrier()``; each rank times that one call with
  ``time.perf_counter`` (gloo) or a pair of CUDA events on its stream (NCCL); per iteration the
  slowest rank's time counts (a collective is finished when its last rank is); the row reports
  the median over iterations and their min and max, and every iteration's result is checked.
  Why: on a loaded, shared machine a preempted rank or iteration shows as spread instead of
  moving the result, and a wrong answer in any iteration is caught. The algorithms of one (world
  size, size) take turns within every iteration, so that load hits them alike.
* ``"nccl-tests"``: what NVIDIA nccl-tests' ``BenchTime`` does (``src/common.cu``): one barrier,
  then ``iters`` calls back to back (no barrier, no reset, no check between them), one
  synchronisation at the end (``torch.cuda.synchronize()`` on NCCL; the host clock, as
  nccl-tests' ``timer``), each rank's elapsed time divided by ``iters``, the **mean over the
  ranks** (nccl-tests' default ``-a 1``); the result is checked in one separate untimed call.
  Consecutive calls may overlap (a fast rank starts the next one while a slow one finishes), so
  this measures a stream of collectives, and one slow iteration moves the mean. Use it to
  compare with nccl-tests' tables.

**Correctness**: the inputs are small integers (exact in every dtype up to 16 ranks), so the
reference is exact; each rank compares the part of its output the primitive defines with the
reference (``torch.equal``, outside the timed region): after every timed iteration (collnb
timing) or after one separate call (nccl-tests timing). ``ok`` is False if any checked result on
any rank differed: a fast wrong answer is not a result.

**Debug checks**: the ranks run with ``TORCH_DISTRIBUTED_DEBUG`` off (``launch(debug=False)``);
the DETAIL checks collnb turns on elsewhere add a consistency check per collective.
:func:`debug_cost` measures what they cost.

**Physical references** (``references=True``), measured in the same run for every size, between
the collective's launches (a few repetitions right after each launch at that size), their
``time_s`` the median of the fastest half of all their repetitions (:mod:`.references`: a busy
machine only slows a copy down):
``memcpy`` (``dst.copy_(src)`` of ``nbytes`` on one core: bytes copied per second),
``tcp_loopback`` (one TCP stream over 127.0.0.1: ``nbytes`` sent by one thread, received by
another, whole payload checked) and ``local_reduce`` (``y.add_(x)`` of ``nbytes`` of the bench
dtype on one core: the per-byte reduction cost, γ of :mod:`collnb.costmodel`). Their
``busbw_GBps`` equals ``algbw_GBps``.

Sources:
    * NVIDIA nccl-tests, ``doc/PERFORMANCE.md`` (algbw, busbw and the factors: all_reduce
      ``2(n-1)/n``; reduce_scatter, all_gather, all_to_all ``(n-1)/n``; broadcast, reduce ``1``)
      and ``src/scatter.cu``, ``src/gather.cu`` (scatter, gather ``(n-1)/n``; "size" counts the
      root's whole buffer); ``src/common.cu``, ``BenchTime`` (the timed loop: ``Barrier``, ``iters``
      ``startColl`` calls, ``completeColl``, ``deltaSec / iters``, ``Allreduce(..., average)`` with
      ``average = 1`` by default: the mean over ranks).
    * gloo ``gloo/allreduce.cc``: gloo's all_reduce is a ring over segments, overlapping the
      reduction of one segment with the transfer of the next (why the built-in is the ring's
      form in :data:`collnb.costmodel.BUILTIN_FORM`).
"""

from .figure import format_table, measurement_flags, plot
from .references import reference_rows
from .rows import as_rows, load, note, save_csv, save_json, to_table
from .choices import (COLUMNS, EXAMPLE_FILE, MAX_BYTES, PRIMITIVES, REFERENCES, Row, check_algorithms,
                      check_world_sizes, parse_size, parse_sizes)
from .sweep import TIMINGS, bench, debug_cost

__all__ = ["PRIMITIVES", "COLUMNS", "Row", "REFERENCES", "EXAMPLE_FILE", "MAX_BYTES", "TIMINGS", "bench", "parse_size",
           "parse_sizes",
           "check_algorithms", "check_world_sizes", "reference_rows", "debug_cost", "to_table", "as_rows",
           "save_json", "save_csv", "load", "note", "plot", "format_table", "measurement_flags"]
