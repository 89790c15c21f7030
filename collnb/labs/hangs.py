"""The hang lab (notebook 18): faults injected into a small training-like step on real ranks, torch's
Flight Recorder dumped from every rank, the per-rank table of recent collectives, torch's own
analyser (``fr_trace``) and collnb's blame read from the same structured entries.

**The step** (:func:`faulty_step`, world size ``n``): three ``dist.all_reduce`` of 4 floats, then one
``dist.all_to_all_single`` of 2 floats per peer, on the default group; on rank ``culprit`` one
:data:`FAULTS` is injected. Measured with torch 2.13.0, gloo, 4 ranks, ``collective_timeout=2``:

* ``skipped_collective``: the culprit skips the 2nd all_reduce. Its 3rd all_reduce pairs with
  the others' 2nd (gloo matches by order), its all_to_all meets their 3rd all_reduce: every rank
  waits until the timeout. Flight Recorder: sequence number 3 is ``all_to_all`` on the culprit,
  ``all_reduce`` on the others; ``fr_trace``: "Collective sequence number: 3 has errors ...
  COLLECTIVE_TYPE_MISMATCH" (it takes the first rank it reads as the expected one, so it may list
  the other ranks as culprits).
* ``mismatched_shape``: the culprit's 2nd all_reduce has 6 floats: the ranks wait until the
  timeout. Flight Recorder: ``input_sizes`` ``[[6]]`` against ``[[4]]`` at sequence number 2;
  ``fr_trace``: "Collective sequence number: 2 has errors ... SIZE_OR_SYNTAX_MISMATCH", then "Not all
  ranks joining collective, sequence number: 3 ... missing ranks: {culprit}".
* ``wrong_splits``: the culprit sends 1 float instead of 2 to rank 0 (input 7 floats,
  ``input_split_sizes=[1, 2, 2, 2]``). Nothing hangs and torch raises nothing: rank 0 silently
  receives a short message (its last float is stale). Flight Recorder: ``input_sizes`` ``[[7]]``
  against ``[[8]]``; ``fr_trace``: "Input/output mismatch in the collective sequence number: 4 ...
  total input numel: 31, total output numel: 32". collnb, reading every rank's entries, raises a
  ``RankError`` naming the culprit after every rank returned (the results kept on it). (Sending *more* than the receiver expects aborts the
  receiver instead: gloo's ``Received data size doesn't match expected size``, SIGABRT.)
* ``sleeping_rank``: the culprit sleeps ``collective_timeout + 1.5`` s before its 2nd all_reduce;
  the others time out in it and collnb stops the sleeper before it dumps. Flight Recorder: no dump
  from the culprit; ``fr_trace``: "Missing dump files from ranks {culprit}"; collnb's
  :class:`collnb.RankError`: ``DidNotJoin`` naming the culprit and the line it was at.

**Dumps.** Torch reads ``TORCH_FR_BUFFER_SIZE`` once per process, when its first process group is
made (one recorder per process, ``FlightRecorder::get()``), so :func:`fault_run` launches with
``collnb.launch(..., flight_recorder=N)``, which starts fresh ranks with the variable set (warm ranks
made their groups already). Each rank dumps in a ``finally``
(:func:`collnb.ranks.flight_recorder_dump`) to ``rank<r>`` (the pickle ``fr_trace`` reads) and
``rank<r>.json``. On gloo, ``fr_trace`` fails with ``KeyError: ('0', 0)``: the dumps key the default
group's ``pg_config`` ``''`` while its entries say ``('0', 'default_pg')``; :func:`fr_trace_verdict`
re-keys it to ``'0'`` in a copy, then runs torch's analyser. With the recorder on, every rank also sends its
entries with its error or result, and collnb's :class:`collnb.RankError` names the culprit from them
(``CollectiveMismatch``, :func:`collnb.ranks.divergence`: the same reading as :meth:`FaultRun.blame`). Sources: torch's
``torch/distributed/flight_recorder/fr_trace.py`` and ``components/builder.py`` (read in torch
2.13.0), https://docs.pytorch.org/tutorials/unstable/flight_recorder_tutorial.html.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..i18n import _
from ..units import pad
from ..ranks import LaunchTimeout, RankError, divergence, flight_recorder_dump, launch, shutdown
from ..views import MatrixPanel, matrix_image

if TYPE_CHECKING:
    from ..views import MatrixPicture

__all__ = ["FAULTS", "DIVERGES_AT", "faulty_step", "fault_run", "FaultRun", "Blame", "fr_trace_verdict", "fr_trace_command",
           "fr_trace_main"]

#: The faults :func:`faulty_step` can inject (``"none"``: the step as it should be).
FAULTS = ("none", "skipped_collective", "mismatched_shape", "wrong_splits", "sleeping_rank")

#: For each fault, the sequence number (``collective_seq_id`` of the default group, from 1 in fresh
#: ranks) of the first collective at which the culprit's entry differs from the others' or is
#: missing, as follows from :func:`faulty_step`: the skipped 2nd all_reduce shifts the culprit's
#: calls by one, so its 3rd entry is the all_to_all (3); the 2nd all_reduce is the one with 6
#: floats (2), or the one the sleeper never reached (2); the all_to_all is the 4th (4).
DIVERGES_AT = {"skipped_collective": 3, "mismatched_shape": 2, "wrong_splits": 4, "sleeping_rank": 2}

#: One Flight Recorder entry as its JSON dump holds it (``collective_seq_id``, ``profiling_name``,
#: ``input_sizes``, ``output_sizes``, ``state``, ``process_group``...: values of several kinds, as
#: :mod:`collnb.ranks` reads them).
Entry = dict[str, Any]
#: One row of :meth:`FaultRun.rows`: ``(rank, seq, op, input_sizes, output_sizes, state)``.
EntryRow = tuple[int, int, str, list[list[int]], list[list[int]], str]


def faulty_step(rank: int, world_size: int, fault: str, culprit: int, dump_dir: str, sleep_s: float) -> list[float]:
    """Runs on every rank: three all_reduces of 4 float32 and one all_to_all_single of 2 float32
    per peer, with ``fault`` injected on rank ``culprit`` (see the module docstring); then, whatever
    happened, writes this rank's Flight Recorder dump to ``dump_dir``. Returns the all_to_all's
    output as a list of float (``2 * world_size`` values)."""
    try:
        for i in range(3):
            x = torch.full((4,), float(rank))
            if rank == culprit and i == 1:
                if fault == "skipped_collective":
                    continue
                if fault == "mismatched_shape":
                    x = torch.ones(6)
                if fault == "sleeping_rank":
                    time.sleep(sleep_s)
            dist.all_reduce(x)
        inp = torch.arange(2 * world_size, dtype=torch.float32) + 100 * rank
        in_splits = [2] * world_size
        if fault == "wrong_splits" and rank == culprit:
            in_splits = [1] + [2] * (world_size - 1)  # one float short for rank 0
            inp = inp[1:].contiguous()
        out = torch.full((2 * world_size,), -1.0)
        dist.all_to_all_single(out, inp, [2] * world_size, in_splits)
        return out.tolist()
    finally:
        pickled, as_json = flight_recorder_dump()
        with open(os.path.join(dump_dir, f"rank{rank}"), "wb") as f:
            f.write(pickled)
        with open(os.path.join(dump_dir, f"rank{rank}.json"), "wb") as f:
            f.write(as_json)


@dataclass(frozen=True)
class Blame:
    """collnb's verdict from the Flight Recorder entries (:meth:`FaultRun.blame`).

    Attributes:
        ranks: the ranks blamed (tuple of int): the minority at the first sequence number where the
            ranks' entries disagree, or the ranks that left no dump; ``()`` when nothing is wrong.
        seq: that sequence number (``collective_seq_id``, counted from 1 per group), or ``None``.
        reason: in words.
    """

    ranks: tuple[int, ...]
    seq: int | None
    reason: str


@dataclass
class FaultRun:
    """One run of :func:`faulty_step` and what every rank's Flight Recorder said.

    Attributes:
        fault, culprit, world_size: what was injected where.
        dump_dir: the folder of the dumps (``rank<r>`` pickles, ``rank<r>.json``).
        error: the :class:`collnb.RankError` (or :class:`collnb.LaunchTimeout`) collnb raised, else ``None``.
        results: the ranks' all_to_all outputs when every rank returned (also when collnb raised because
            their Flight Recorder entries disagree: wrong splits), else ``None``.
        entries: ``{rank: [entry dict, ...]}`` of the default group's entries, for the ranks that dumped.
    """

    fault: str
    culprit: int
    world_size: int
    dump_dir: str
    error: Exception | None = None
    results: list[list[float]] | None = None
    entries: dict[int, list[Entry]] = field(default_factory=dict)

    @property
    def missing(self) -> list[int]:
        """Ranks that left no dump (still running when collnb stopped them, or dead)."""
        return [r for r in range(self.world_size) if r not in self.entries]

    def rows(self) -> list[EntryRow]:
        """``(rank, seq, op, input_sizes, output_sizes, state)`` per entry, rank then sequence order."""
        return [(r, e["collective_seq_id"], e["profiling_name"].split(":")[-1], e["input_sizes"], e["output_sizes"],
                 e["state"]) for r in sorted(self.entries) for e in self.entries[r]]

    def table(self) -> str:
        """The per-rank table of recent collectives as text (sequence number, operation, sizes, state)."""
        lines = [pad(_("rank"), 4, ">") + " " + pad(_("seq"), 4, ">") + "  " + pad(_("operation"), 12) + " "
                 + pad(_("input sizes"), 12) + " " + pad(_("output sizes"), 12) + " " + _("state")]
        for r, seq, op, ins, outs, state in self.rows():
            lines.append(f"{r:>4} {seq:>4}  {op:<12} {str(ins):<12} {str(outs):<12} {state}")
        lines += [f"{r:>4}    -  " + _("(no dump)") for r in self.missing]
        return "\n".join(lines)

    def blame(self) -> Blame:
        """collnb's verdict, from the entries' structured fields (never from a message's text): the
        first sequence number at which the ranks' operations or sizes disagree (for all_to_all, whose
        sizes may differ per rank, where the total elements sent and received differ), the minority
        blamed; else the ranks without a dump; else nothing."""
        d = divergence(self.entries)
        if d is not None:
            return Blame(d.ranks, d.seq, d.reason)
        if self.missing:
            seqs = [e["collective_seq_id"] for es in self.entries.values() for e in es]
            last = max(seqs) if seqs else None
            return Blame(tuple(self.missing), last,
                         _("rank(s) {ranks} left no dump: still running outside a collective (or dead) "
                           "when the others failed").format(ranks=self.missing)
                         + (_(" in collective {seq}").format(seq=last) if last is not None else ""))
        return Blame((), None, _("every rank issued the same collectives"))

    def image(self, last: int = 6, show_blame: bool = True, title: str | None = None) -> MatrixPicture:
        """The table as a rank × sequence-number picture (:func:`collnb.views.matrix_image`): each
        cell the operation and its input sizes, the blamed cells framed red (``show_blame``), ranks
        without a dump marked. Shows the ``last`` sequence numbers; ``title`` defaults to the fault's name."""
        seqs = sorted({e["collective_seq_id"] for es in self.entries.values() for e in es})[-last:] or [1]
        blame = self.blame() if show_blame else Blame((), None, "")
        values: list[list[float]] = []
        texts: list[list[str]] = []
        framed: set[tuple[int, int]] = set()
        for r in range(self.world_size):
            row_v: list[float] = []
            row_t: list[str] = []
            got = {e["collective_seq_id"]: e for e in self.entries.get(r, [])}
            for c, seq in enumerate(seqs):
                e = got.get(seq)
                if e is None:
                    row_v.append(0.0)
                    row_t.append(_("no dump") if r in self.missing else "—")
                else:
                    row_v.append(0.35)
                    row_t.append(f"{e['profiling_name'].split(':')[-1]} {e['input_sizes'][0] if e['input_sizes'] else ''}")
                if r in blame.ranks and (blame.seq is None or seq == blame.seq):
                    framed.add((r, c))
            values.append(row_v)
            texts.append(row_t)
        note = ((_("blamed: rank {ranks}").format(ranks=", ".join(map(str, blame.ranks)))
                 + (_(", collective {seq}").format(seq=blame.seq) if blame.seq is not None else "")) if blame.ranks
                else _("nothing to blame")) if show_blame else _("compare each column's cells")
        return matrix_image([MatrixPanel(title or f"Flight Recorder: {self.fault}", values, texts, framed)],
                            row_label="rank", column_label="collective_seq_id",
                            column_names=[str(s) for s in seqs], vmax=1.0,
                            framed_note=_("collnb's blame, from these entries") if show_blame else "",
                            note=note)


def fault_run(fault: str, world_size: int = 4, culprit: int = 1, *, collective_timeout: float = 2.0,
              buffer_size: int = 200, dump_dir: str | None = None) -> FaultRun:
    """Run :func:`faulty_step` with ``fault`` on rank ``culprit``, with the Flight Recorder on.

    Args:
        fault: one of :data:`FAULTS`.
        world_size: 4 or 8 ranks (int): collnb's fresh ranks form one default group of 4, 8 or 16, and a
            smaller call runs in a subgroup, whose entries fr_trace would read beside the default
            group's of ranks that did not take part.
        culprit: the rank the fault is injected on, 0..world_size-1.
        collective_timeout: seconds a rank waits in a collective for a missing peer (the hang ends).
        buffer_size: ``TORCH_FR_BUFFER_SIZE``, entries per rank.
        dump_dir: where the dumps go (default: a new temporary folder).

    Returns:
        :class:`FaultRun` (the error collnb raised is kept, not raised). The warm ranks are stopped
        first and the run starts fresh ones with ``TORCH_FR_BUFFER_SIZE`` set, so every run's
        sequence numbers start at 1; the next plain ``collnb.launch`` starts fresh ranks again.

    Raises:
        ValueError: an unknown fault, a world size other than 4 and 8, a culprit outside the ranks.
    """
    if fault not in FAULTS:
        raise ValueError(_("fault must be one of {faults}; got {value}").format(faults=FAULTS, value=repr(fault)))
    if world_size not in (4, 8) or isinstance(world_size, bool):
        raise ValueError(_("world_size must be 4 or 8 for the hang lab (fresh ranks of exactly that many: "
                           "the dumps then hold the default group, as a torchrun job's); got {value}").format(
                               value=repr(world_size)))
    if not isinstance(culprit, int) or not 0 <= culprit < world_size:
        raise ValueError(_("culprit must be a rank 0..{last}; got {value}").format(
            last=world_size - 1, value=repr(culprit)))
    dump_dir = dump_dir or tempfile.mkdtemp(prefix=f"collnb-fr-{fault}-")
    os.makedirs(dump_dir, exist_ok=True)
    for name in os.listdir(dump_dir):
        if name.startswith("rank"):
            os.remove(os.path.join(dump_dir, name))
    run = FaultRun(fault, culprit, world_size, dump_dir)
    shutdown()  # fresh ranks: each run's Flight Recorder starts empty, sequence numbers from 1
    try:
        run.results = launch(faulty_step, world_size, (fault, culprit, dump_dir, collective_timeout + 1.5),
                             collective_timeout=collective_timeout, debug=False, flight_recorder=buffer_size,
                             timeout=collective_timeout + 30)
    except (RankError, LaunchTimeout) as exc:
        run.error = exc
        run.results = getattr(exc, "results", None)  # every rank returned, their collectives disagreed
    for r in range(world_size):
        path = os.path.join(dump_dir, f"rank{r}.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            run.entries[r] = [e for e in data.get("entries", []) if tuple(e["process_group"])[1] == "default_pg"]
    return run


def fr_trace_command(dump_dir: str) -> list[str]:
    """The command line of torch's analyser on the re-keyed copy :func:`fr_trace_verdict` makes:
    ``python -m torch.distributed.flight_recorder.fr_trace DIR -p rank``."""
    return ["python", "-m", "torch.distributed.flight_recorder.fr_trace", _rekeyed(dump_dir), "-p", "rank"]


def _rekeyed(dump_dir: str) -> str:
    """A copy of the per-rank pickles with the default group's ``pg_config`` keyed ``'0'`` (gloo's
    dumps key it ``''`` while their entries say ``('0', 'default_pg')``: fr_trace's ``KeyError: ('0', 0)``)."""
    out = os.path.join(dump_dir, "rekeyed")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for name in sorted(os.listdir(dump_dir)):
        path = os.path.join(dump_dir, name)
        if not name.startswith("rank") or name.endswith(".json") or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            dump = pickle.load(f)
        config = dump.get("pg_config", {})
        if "" in config and "0" not in config:
            config["0"] = config.pop("")
        with open(os.path.join(out, name), "wb") as f:
            pickle.dump(dump, f)
    return out


def fr_trace_main() -> Callable[[Sequence[str] | None], None]:
    """torch's Flight Recorder analyser, ``torch.distributed.flight_recorder.fr_trace.main``, imported
    without the line its import logs to stderr when the optional ``tabulate`` package is missing
    ("tabulate is not installed. Proceeding without it.", ``components/builder.py``: the analyser
    runs without it). Its logger ("Flight Recorder", made here first, with torch's own stderr handler)
    keeps that handler for everything it logs later."""
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger  # noqa: PLC0415

    FlightRecorderLogger()  # makes the logger (with its own stderr handler) before we borrow it
    logger = logging.getLogger("Flight Recorder")
    saved = logger.handlers[:]
    logger.handlers = [logging.NullHandler()]
    try:
        from torch.distributed.flight_recorder.fr_trace import main  # noqa: PLC0415 - imported on use
    finally:
        logger.handlers = saved
    return main


def fr_trace_verdict(dump_dir: str) -> str:
    """Run torch's Flight Recorder analyser (``torch.distributed.flight_recorder.fr_trace.main``, its
    library entry point) on the dumps of ``dump_dir`` (re-keyed, see the module docstring) and
    return what it reported: its log lines, or the message of the AssertionError it raises (e.g.
    "Missing dump files from ranks {1}"). An empty analysis returns ``"(no errors reported)"``."""
    main = fr_trace_main()
    folder = _rekeyed(dump_dir)
    if not os.listdir(folder):
        return _("(no dump files)")
    logger = logging.getLogger("Flight Recorder")
    text = io.StringIO()
    capture = logging.StreamHandler(text)
    capture.setFormatter(logging.Formatter("%(message)s"))
    saved = logger.handlers[:]
    logger.handlers = [capture]
    try:
        with contextlib.redirect_stdout(text):
            main([folder, "-p", "rank"])
    except AssertionError as exc:
        text.write(f"{type(exc).__name__}: {exc}\n")
    finally:
        logger.handlers = saved
    out = "\n".join(line.rstrip() for line in text.getvalue().strip().splitlines() if line.strip())
    return out or _("(no errors reported)")
