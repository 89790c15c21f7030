"""The data a collective algorithm is made of: :class:`Transfer` (one message), :class:`Round`
(messages that run at the same time) and :class:`Schedule` (the rounds of one algorithm at one
world size, with the provenance they produce).

Plain frozen/ordinary dataclasses of ints, tuples and lists: no torch, no numpy. A
:class:`collnb.Trace` holds the same :class:`Transfer` objects, with ``nbytes`` filled in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from .reading import as_int, as_ints

__all__ = ["Transfer", "Round", "Schedule", "TransferDict"]


class TransferDict(TypedDict):
    """A transfer as a saved trace holds it (:meth:`Transfer.to_dict`)."""

    src: int
    dst: int
    chunks: list[int]
    dst_chunks: list[int]
    reduce: bool
    nbytes: NotRequired[int | None]  # missing: unknown, as None (a file may leave it out)


@dataclass(frozen=True)
class Transfer:
    """One message of one round.

    Attributes:
        src, dst: sending and receiving rank (int).
        chunks: chunk indices read at ``src`` (tuple of int, increasing). For all_to_all these
            index the sender's *input* buffer; otherwise its working buffer.
        dst_chunks: chunk indices written at ``dst`` (same length and order as ``chunks``;
            equal to ``chunks`` except for all_to_all).
        reduce: True if ``dst`` combines the data with the reduce op, False if it overwrites.
        nbytes: bytes in the message (int) once a run gave the chunks a size and a dtype (every
            transfer of a :class:`collnb.Trace`); ``None`` in a :class:`Schedule`, which has neither.
    """

    src: int
    dst: int
    chunks: tuple[int, ...]
    dst_chunks: tuple[int, ...]
    reduce: bool = False
    nbytes: int | None = None

    @property
    def size(self) -> int:
        """``nbytes`` of a transfer of a :class:`collnb.Trace` (every one has it).

        Raises:
            ValueError: a schedule's transfer, which has no size.
        """
        if self.nbytes is None:
            raise ValueError("a schedule's transfer has no size; a trace's transfers have one (nbytes)")
        return self.nbytes

    def to_dict(self) -> TransferDict:
        """``{"src", "dst", "chunks", "dst_chunks", "reduce", "nbytes"}`` with lists for tuples
        (the layout of a transfer in a saved trace)."""
        return TransferDict(src=self.src, dst=self.dst, chunks=list(self.chunks), dst_chunks=list(self.dst_chunks),
                            reduce=self.reduce, nbytes=self.nbytes)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "Transfer":
        """Inverse of :meth:`to_dict` (a saved trace's transfer; a file's values are converted, ``nbytes``
        may be missing).

        Raises:
            KeyError: a key other than ``nbytes`` is missing. TypeError/ValueError: a value is not
                a number (or list of numbers).
        """
        nbytes = d.get("nbytes")
        return cls(as_int(d["src"]), as_int(d["dst"]), as_ints(d["chunks"]), as_ints(d["dst_chunks"]),
                   bool(d["reduce"]), None if nbytes is None else as_int(nbytes))


@dataclass
class Round:
    """One round: transfers that run concurrently (every rank posts its sends and receives, then
    waits for all of them).

    Attributes:
        label: the phase, e.g. ``"reduce-scatter"``, ``"all-gather"``, ``"fold"``, ``"unfold"``,
            ``"exchange"``, ``"reduce"``, ``"broadcast"``, ``"scatter"``, ``"gather"``,
            ``"pipeline"``, ``"send"``, ``"all-to-all"``.
        detail: one sentence saying what happens in this round.
        transfers: list of :class:`Transfer`.
        finalize: ``(rank, chunk)`` pairs whose reduction completes in this round (AVG divides
            them by the world size here).
        from_work: all_to_all only: the senders read from their working buffer (blocks they
            received earlier and forward), not from their input (the hierarchical all_to_all's
            second stage). Every other primitive always sends from the working buffer.
    """

    label: str
    detail: str
    transfers: list[Transfer]
    finalize: list[tuple[int, int]] = field(default_factory=list)
    from_work: bool = False


@dataclass
class Schedule:
    """The rounds of one algorithm at one world size, plus the provenance they produce.

    Attributes:
        primitive, algorithm: names (see :data:`collnb.algorithms.ALGORITHMS`).
        world_size: number of ranks (1..16).
        root: the src/dst rank of rooted primitives (broadcast/reduce/scatter/gather), else 0.
        n_chunks: chunks per buffer.
        rounds: list of :class:`Round`.
        provenance: ``(len(rounds) + 1)`` x ``world_size`` x ``n_chunks`` nested lists of int
            bitmasks: bit ``s`` set = the chunk holds rank ``s``'s contribution; 0 = the chunk
            holds nothing yet. Index 0 is the start, index ``k`` after round ``k``.
        defined: ``world_size`` x ``n_chunks`` bools: the chunks that hold the primitive's result
            at the end (e.g. only the root's for reduce and gather, chunk ``r`` of rank ``r`` for
            reduce_scatter and scatter).
        fold: ``(p, q)``: the power of two the algorithm ran on and the number of folded ranks
            (``q = 0`` when no fold was needed or the algorithm does not fold).
        ranks_per_node: the node map the schedule was built for (rank ``r`` on node
            ``r // ranks_per_node``), or ``None``: no node map (one machine).
        start_chunks: all_to_all only: per rank, the chunks it copies from its input into its working
            buffer before the first round (``None``: its own slot ``r``, as every flat all_to_all).
    """

    primitive: str
    algorithm: str
    world_size: int
    root: int
    n_chunks: int
    rounds: list[Round]
    provenance: list[list[list[int]]]
    defined: list[list[bool]]
    fold: tuple[int, int] = (0, 0)
    ranks_per_node: int | None = None
    start_chunks: list[tuple[int, ...]] | None = None

    @property
    def n_rounds(self) -> int:
        """Number of rounds (int)."""
        return len(self.rounds)

    def transfers_of(self, rank: int, round_index: int) -> tuple[list[Transfer], list[Transfer]]:
        """``(sends, receives)`` of ``rank`` in round ``round_index`` (1-based), lists of Transfer."""
        rnd = self.rounds[round_index - 1]
        return ([t for t in rnd.transfers if t.src == rank], [t for t in rnd.transfers if t.dst == rank])

