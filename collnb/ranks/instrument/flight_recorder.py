"""Reading torch's Flight Recorder entries: which rank's collectives diverged from the others'.

Every rank's Flight Recorder (``TORCH_FR_BUFFER_SIZE`` entries, on when a launch has
``flight_recorder=N``) lists the collectives the rank issued with their ``collective_seq_id``
(counted from 1 per process group, the same number on every rank for the same collective),
``profiling_name`` (``"gloo:all_reduce"``), ``input_sizes``, ``output_sizes`` and ``state``.
:func:`divergence` reads them the way torch's analyser ``fr_trace`` matches collectives
(``torch/distributed/flight_recorder/components/builder.py`` and ``utils.py``, torch 2.13.0): per group,
sequence number by sequence number, the first at which the ranks' operations differ, or (for the
same operation) their sizes, or, for ``all_to_all`` (whose per-rank sizes may differ), the total
elements sent and received, or at which a rank that recorded the group has no entry. Unlike
``fr_trace``, which takes the first rank it reads as the reference (and so may name the other ranks
as culprits), it blames the minority. Used by collnb's :class:`RankError` (:mod:`..explain.failures`) and by
the hang lab (:mod:`collnb.labs.hangs`): one reading of the same structured fields, never of a
message's text.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ...i18n import _

__all__ = ["Divergence", "divergence", "entries_from_json", "FIELDS"]

#: The fields of an entry collnb keeps (the rest of a dump is stacks and timings).
FIELDS = ("collective_seq_id", "profiling_name", "input_sizes", "output_sizes", "state", "process_group",
          "time_created_ns")


@dataclass(frozen=True)
class Divergence:
    """The first place where the ranks' Flight Recorder entries disagree.

    Attributes:
        ranks: the ranks blamed (tuple of int, ascending): those whose entry differs from the most
            common one at ``seq``, or that have no entry at ``seq``.
        seq: the ``collective_seq_id`` (int) of that collective in ``group``.
        group: the process group's ``(name, description)`` as the entries give it (``("0", "default_pg")``).
        kind: ``"operation"``, ``"sizes"``, ``"all_to_all totals"`` or ``"never issued"``.
        reason: in words, with what each side had.
        decided: ``True`` when the blamed ranks are fewer than the ranks that agree (a strict
            minority); with two ranks, or two equal sides, no rank can be told from the other.
    """

    ranks: tuple[int, ...]
    seq: int
    group: tuple[str, ...]
    kind: str
    reason: str
    decided: bool


#: One kept Flight Recorder entry: :data:`FIELDS` -> its value as the dump gives it.
Entry = dict[str, Any]


def entries_from_json(data: bytes | str | dict[str, Any]) -> list[Entry]:
    """The collective entries of a Flight Recorder JSON dump (``_dump_fr_trace_json``'s bytes or str,
    or the parsed dict), each reduced to :data:`FIELDS` (``process_group`` as a tuple); point-to-point
    entries (``is_p2p``) are left out: they have no ``collective_seq_id`` of their own."""
    if isinstance(data, (bytes, str)):
        data = json.loads(data)
    out: list[Entry] = []
    for e in data.get("entries", []) if isinstance(data, dict) else []:
        if e.get("is_p2p") or "collective_seq_id" not in e:
            continue
        kept = {k: e.get(k) for k in FIELDS}
        kept["process_group"] = tuple(e.get("process_group") or ("", ""))
        out.append(kept)
    return out


def _signature(entry: Entry) -> tuple[str, str, str]:
    return (str(entry["profiling_name"]), json.dumps(entry["input_sizes"]), json.dumps(entry["output_sizes"]))


def _numel(sizes: list[list[int]] | None) -> int:
    total = 0
    for shape in sizes or []:
        n = 1
        for d in shape:
            n *= int(d)
        total += n
    return total


def _op(entry: Entry) -> str:
    return str(entry["profiling_name"]).split(":")[-1]


def _group_divergence(group: tuple[str, ...], by_rank: dict[int, dict[int, Entry]]) -> Divergence | None:
    """The first divergence among ``by_rank`` (``{rank: {seq: entry}}``) in one group, or ``None``."""
    last = {r: max(es) for r, es in by_rank.items()}
    first = {r: min(es) for r, es in by_rank.items()}
    for seq in sorted({s for es in by_rank.values() for s in es}):
        here = {r: es[seq] for r, es in by_rank.items() if seq in es}
        # a rank whose buffer starts after seq lost it to the ring buffer: it says nothing about seq
        absent = sorted(r for r in by_rank if seq not in by_rank[r] and first[r] < seq)
        if absent and len(here) >= len(absent):
            never = [r for r in absent if last[r] < seq]
            return Divergence(tuple(absent), seq, group, "never issued",
                              _("rank(s) {absent} never issued collective {seq}, which rank(s) {issued} issued "
                                "({ops})").format(absent=absent, seq=seq, issued=sorted(here),
                                                  ops=", ".join(sorted({_op(e) for e in here.values()})))
                              + ("" if never == absent else _(" (their entries skip it)")),
                              len(absent) < len(here))
        sigs = {r: _signature(e) for r, e in here.items()}
        ops = Counter(s[0] for s in sigs.values())
        if len(ops) > 1:
            common, count = ops.most_common(1)[0]
            odd = tuple(sorted(r for r, s in sigs.items() if s[0] != common))
            theirs = ", ".join(sorted({_op(here[r]) for r in odd}))
            return Divergence(odd, seq, group, "operation",
                              _("collective {seq} is {theirs} on rank(s) {odd} but {common} on the other ranks").format(
                                  seq=seq, theirs=theirs, odd=list(odd), common=common.split(":")[-1]),
                              len(odd) < count)
        op = next(iter(ops))
        if op.endswith("all_to_all") or op.endswith("alltoall"):
            sent = sum(_numel(e["input_sizes"]) for e in here.values())
            got = sum(_numel(e["output_sizes"]) for e in here.values())
            if sent != got:
                usual, count = Counter(sigs.values()).most_common(1)[0]
                odd = tuple(sorted(r for r, s in sigs.items() if s != usual))
                return Divergence(odd, seq, group, "all_to_all totals",
                                  _("collective {seq} ({op}) sends {sent} elements in all but receives {got}: "
                                    "rank(s) {odd} have input sizes {sizes}, the others {usual}").format(
                                      seq=seq, op=_op(here[odd[0]]) if odd else op, sent=sent, got=got, odd=list(odd),
                                      sizes=here[odd[0]]["input_sizes"] if odd else "?", usual=usual[1]),
                                  0 < len(odd) < count)
            continue
        if len(set(sigs.values())) > 1:
            usual, count = Counter(sigs.values()).most_common(1)[0]
            odd = tuple(sorted(r for r, s in sigs.items() if s != usual))
            return Divergence(odd, seq, group, "sizes",
                              _("collective {seq} ({op}) has input sizes {sizes} on rank(s) {odd}, {usual} on the other "
                                "ranks").format(seq=seq, op=_op(here[odd[0]]), sizes=here[odd[0]]["input_sizes"],
                                                odd=list(odd), usual=usual[1]),
                              len(odd) < count)
    return None


def divergence(entries: dict[int, list[Entry]]) -> Divergence | None:
    """The first divergence among the ranks' Flight Recorder entries.

    Args:
        entries: ``{rank: [entry dict, ...]}`` (:func:`entries_from_json`'s dicts, or a dump's own),
            for the ranks whose entries are known; a rank left out is not blamed for missing entries.

    Returns:
        a :class:`Divergence`, or ``None`` when every group's entries agree. Each process group is
        read on its own (a rank that recorded no entry of a group is not one of its members here);
        of several groups' divergences, the one whose collective was issued first
        (``time_created_ns``, one clock for the processes of one machine) is returned.
    """
    groups: dict[tuple[str, ...], dict[int, dict[int, Entry]]] = {}
    for r, es in entries.items():
        for e in es:
            if e.get("collective_seq_id") is None:
                continue
            groups.setdefault(tuple(e.get("process_group") or ("", "")), {}).setdefault(r, {})[
                int(e["collective_seq_id"])] = e
    found = []
    for group, by_rank in groups.items():
        d = _group_divergence(group, by_rank)
        if d is not None:
            when = min((by_rank[r][d.seq].get("time_created_ns") or 0 for r in by_rank if d.seq in by_rank[r]),
                       default=0)
            found.append((when, d))
    return min(found, key=lambda x: x[0])[1] if found else None
