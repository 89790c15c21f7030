"""What ``launch(..., record_calls=True)`` gives back: one :class:`CallRecord` per communication
operation a rank issued, in a :class:`CallRecords` list per rank (plain values, no torch objects:
they travel from the rank to the launcher). :mod:`.recording` makes them where torch dispatches
each operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

__all__ = ["CallRecord", "CallRecords", "SOURCES", "Source"]

#: Where an operation can be issued from (:attr:`CallRecord.source`).
SOURCES: tuple[Source, ...] = ("torch.distributed", "ProcessGroup", "functional", "DTensor", "DeviceMesh")
Source = Literal["torch.distributed", "ProcessGroup", "functional", "DTensor", "DeviceMesh"]  # one of SOURCES


@dataclass(frozen=True)
class CallRecord:
    """One communication operation a rank's code issued (recorded by :class:`.recording.Recorder`).

    Attributes:
        name: the call, in torch.distributed's vocabulary: the ``torch.distributed`` function the
            code called (``"all_reduce"``, ``"broadcast_object_list"``, ``"isend"``,
            ``"batch_isend_irecv"``; for a call torch.distributed makes from inside one of its
            own, the outer one); for an operation issued without one (a ``ProcessGroup`` method,
            a functional collective, DTensor) the operation's name (``"all_gather"`` for
            ``ProcessGroup.allgather``, ``"all_gather_into_tensor"``, ``"reduce_scatter_tensor"``,
            ``"all_to_all_single"``, ``"send"``, ``"recv"``).
        peer: global rank of the root (``src``/``dst``) of a rooted operation or of the other side
            of a send/recv (for a ``recv`` from any source, the rank it came from, once
            completed); ``None`` for the others.
        group_size: size of the process group used.
        shapes: the shape of each tensor the operation reads or writes on this rank, in the
            order of the operator's arguments (lists flattened; ``dist.all_gather_into_tensor``:
            output, then input); for a functional collective its input(s), then the tensor(s) it
            returns. ``barrier``'s placeholder tensor is left out. Tuple of tuples of int.
        dtypes: the dtype of each of those tensors, same order (tuple of str, e.g. ``"float32"``).
        op: the operation inside a composite call: for an entry of ``batch_isend_irecv`` its
            ``P2POp`` function (``"isend"``/``"irecv"``); for an object collective the operation
            torch issues (``"broadcast"``, ``"all_gather"``, ``"gather"``, ``"scatter"``,
            ``"send"``, ``"recv"``); ``None`` when the record is the call itself.
        group_ranks: global ranks of the group, in group-rank order (tuple of int): which
            dimension of a device mesh an operation ran over.
        nbytes: bytes of the operation on this rank as nccl-tests counts a buffer: the larger of
            the bytes it reads and the bytes it writes (an all_reduce's or broadcast's tensor, an
            all_gather's whole output, a reduce_scatter's whole input, an all_to_all's input, a
            send's or recv's tensor). int.
        source: where it was issued from, one of :data:`SOURCES`: ``"torch.distributed"`` (a
            function of ``torch.distributed``), ``"ProcessGroup"`` (a ``ProcessGroup`` method or a
            ``torch.ops.c10d`` operator, from Python or from torch's C++, e.g. DDP's reducer),
            ``"functional"`` (the functional collectives,
            :data:`.._torch_internals.FUNCTIONAL_COLLECTIVES_MODULE`), ``"DTensor"``
            (``torch.distributed.tensor``), ``"DeviceMesh"``.
        call: which call of this rank's code issued it, counted from 0 per launch: the records
            of one call (the two broadcasts of a ``broadcast_object_list``) share it.
    """

    name: str
    peer: int | None
    group_size: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    op: str | None = None
    group_ranks: tuple[int, ...] = ()
    nbytes: int = 0
    source: Source = "torch.distributed"
    call: int = 0

    @property
    def operation(self) -> str:
        """The operation itself: ``op`` for an operation of a composite call, else ``name``."""
        return self.op or self.name


class CallRecords(list[CallRecord]):
    """The :class:`CallRecord` list of one rank (call order), plus how complete it is.

    Attributes:
        unrecorded: operations the backend counted on this rank's process groups during the
            recording that the recorder did not see (issued from another thread, or with dispatch
            modes switched off); ``0`` when every operation was recorded. The count is the
            backend's sequence number (gloo counts every collective and point-to-point operation;
            NCCL counts collectives only), so it can miss, never invent, an operation.
    """

    def __init__(self, records: Iterable[CallRecord] = (), unrecorded: int = 0) -> None:
        super().__init__(records)
        self.unrecorded = unrecorded
