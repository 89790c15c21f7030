"""Every communication operation a rank issues, recorded where torch dispatches it.

Inside a rank, :class:`Recorder` is a ``TorchDispatchMode`` (the mechanism of torch's own
:class:`torch.distributed.tensor.debug.CommDebugMode`): every ``c10d``, ``_c10d_functional`` and
``_dtensor`` (``shard_dim_alltoall``, DTensor's all_to_all off the CPU) operator passes through it. Measured with torch 2.13 on gloo, it sees
``dist.all_reduce`` (``c10d.allreduce_``), ``ProcessGroup`` methods (``dist.group.WORLD.allgather``:
``c10d.allgather_``), functional collectives and DTensor (``_c10d_functional.all_gather_into_tensor``
and its ``wait_tensor``), ``send``/``recv`` (also from ``batch_isend_irecv``), both broadcasts of
``broadcast_object_list``, ``barrier`` and ``monitored_barrier``, and collectives torch's C++
issues through the dispatcher (DDP's reducer). ``launch(..., record_calls=True)`` and the
exercise checks use this one source.

**Why a dispatch mode and not the Flight Recorder.** The Flight Recorder (``TORCH_FR_BUFFER_SIZE``,
``_dump_fr_trace_json``) also sees every collective, but it must be enabled before the process
group is made (a warm rank's groups exist already), it is a ring buffer dumped as JSON, it names
operations by the backend's profiling name (``gloo:all_reduce``) with no Python stack, so it
cannot say whether the learner called ``dist.broadcast_object_list``, a ``ProcessGroup`` method, a
functional collective or DTensor, and it records nothing an observer can act on at issue time.
The dispatch mode runs in the rank's thread at the moment of issue, with the tensors, the group
and the Python stack at hand; the Flight Recorder stays what it is for (post-mortem of hangs,
``fr_trace``).

**A record** (:class:`.records.CallRecord`) is one operation handed to the backend: its name as the code
called it (``name``), the operation inside a composite call (``op``), root/peer, the group (size
and global ranks), shapes, dtypes, bytes, and where it was issued from (``source``). Records of one
call of the rank's code (the two broadcasts of a ``broadcast_object_list``) share ``call``.

**Completeness.** A dispatch mode is per thread, and code can switch modes off. So a recorder
also compares, for every process group, how many operations the backend counted
(``ProcessGroup._get_sequence_number_for_group``) with how many it recorded:
:attr:`CallRecords.unrecorded` > 0 means the code communicated where the recorder could not see
(another thread, modes disabled). The exercise checks refuse such answers.

**Extension point: observers.** ``Recorder.add_observer(obs)`` (or ``active().add_observer`` inside
a launch with ``record_calls=True``) calls ``obs.issued(issue)`` for each operation right after
the backend accepted it, with an :class:`Issue`: the record, the :class:`torch.distributed.Work`
(for ``c10d`` operators; ``work.get_future()`` completes when the operation does, so a timeline
can timestamp completion), the output tensors, and ``issued_ns``/``returned_ns``
(``time.perf_counter_ns``). For a functional collective, whose completion is its ``wait_tensor``,
``obs.waited(issue, ns)`` is called when the output is waited on (if the observer has that
method); :mod:`.tracks` (a rank's part of a timeline) is built on this.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import weakref
from dataclasses import dataclass
from types import FrameType
from typing import Any, Iterable, Protocol, Sequence, cast

import torch
import torch.distributed as dist

from .. import _torch_internals as internals
from .._torch_internals import OpOverload, OpOverloadPacket, TorchDispatchMode
from .records import CallRecord, CallRecords, Source

__all__ = ["Issue", "Recorder", "start", "stop", "active"]


@dataclass
class Issue:
    """What an observer receives for one operation (see the module docstring).

    Attributes:
        record: the :class:`CallRecord`.
        work: the :class:`torch.distributed.Work` the backend returned for a ``c10d`` operator
            (already completed for gloo's blocking calls), else ``None``.
        outputs: the tensors the operation writes (for a functional collective, the tensors it
            returned: complete once waited on).
        issued_ns: ``time.perf_counter_ns()`` just before the operation went to the backend.
        returned_ns: ``time.perf_counter_ns()`` when the backend returned (the operation may still
            run: ``async_op=True``, NCCL, functional collectives).
    """

    record: CallRecord
    work: dist.Work | None
    outputs: tuple[torch.Tensor, ...]
    issued_ns: int
    returned_ns: int


# ----------------------------------------------------------------------------------------------
# The operators: torch.distributed's name, the arguments it writes, the argument holding the root
# or peer (a group rank for c10d operators, a global rank for functional ones).

@dataclass(frozen=True)
class _Spec:
    name: str
    outputs: tuple[str, ...] = ()
    peer: str | None = None
    peer_is_global: bool = False
    functional: bool = False
    placeholder: bool = False   # its tensor is a placeholder (barrier): no shapes, no bytes
    p2p_barrier: bool = False   # built from send/recv by gloo: counted as those (see _backend_count)
    blocking: bool = False      # functional, but returns when done (no wait_tensor)


_C10D = {
    "allreduce_": _Spec("all_reduce"),
    "allreduce_coalesced_": _Spec("all_reduce_coalesced"),
    "allgather_": _Spec("all_gather", ("output_tensors",)),
    "_allgather_base_": _Spec("all_gather_into_tensor", ("output_tensor",)),
    "allgather_coalesced_": _Spec("all_gather_coalesced", ("output_lists",)),
    "allgather_into_tensor_coalesced_": _Spec("all_gather_into_tensor_coalesced", ("outputs",)),
    "reduce_scatter_": _Spec("reduce_scatter", ("output_tensors",)),
    "_reduce_scatter_base_": _Spec("reduce_scatter_tensor", ("output_tensor",)),
    "reduce_scatter_tensor_coalesced_": _Spec("reduce_scatter_tensor_coalesced", ("outputs",)),
    "alltoall_": _Spec("all_to_all", ("output_tensors",)), "alltoall_base_": _Spec("all_to_all_single", ("output",)),
    "broadcast_": _Spec("broadcast", peer="root_rank"), "reduce_": _Spec("reduce", peer="root_rank"),
    "gather_": _Spec("gather", ("output_tensors",), peer="root_rank"),
    "scatter_": _Spec("scatter", ("output_tensors",), peer="root_rank"),
    "send": _Spec("send", peer="dst"), "recv_": _Spec("recv", ("tensors",), peer="src"),
    "recv_any_source_": _Spec("recv", ("tensors",)),
    "barrier": _Spec("barrier", placeholder=True),
    "monitored_barrier_": _Spec("monitored_barrier", placeholder=True, p2p_barrier=True),
}
_FUNCTIONAL = {
    "all_gather_into_tensor": _Spec("all_gather_into_tensor", functional=True),
    "all_gather_into_tensor_out": _Spec("all_gather_into_tensor", ("out",), functional=True),
    "all_gather_into_tensor_coalesced": _Spec("all_gather_into_tensor_coalesced", functional=True),
    "all_reduce": _Spec("all_reduce", functional=True), "all_reduce_": _Spec("all_reduce", functional=True),
    "all_reduce_coalesced": _Spec("all_reduce_coalesced", functional=True),
    "all_reduce_coalesced_": _Spec("all_reduce_coalesced", functional=True),
    "all_to_all_single": _Spec("all_to_all_single", functional=True),
    "broadcast": _Spec("broadcast", peer="src", functional=True), "broadcast_": _Spec("broadcast", peer="src", functional=True),
    "reduce_scatter_tensor": _Spec("reduce_scatter_tensor", functional=True),
    "reduce_scatter_tensor_out": _Spec("reduce_scatter_tensor", ("out",), functional=True),
    "reduce_scatter_tensor_coalesced": _Spec("reduce_scatter_tensor_coalesced", functional=True),
    "isend": _Spec("send", peer="dst", peer_is_global=True, functional=True),
    "irecv": _Spec("recv", peer="src", peer_is_global=True, functional=True),
    "batch_p2p_ops": _Spec("batch_isend_irecv", functional=True),
}
#: DTensor's Shard(i) -> Shard(j) off the CPU: C++ on the backend's alltoall_base (runs on gloo too)
_DTENSOR = {"shard_dim_alltoall": _Spec("all_to_all_single", functional=True, blocking=True)}
_WAIT = "wait_tensor"

_OBJECT_CALLS = frozenset({"broadcast_object_list", "all_gather_object", "gather_object",  # several operations
                           "scatter_object_list", "send_object_list", "recv_object_list"})     # each: op says which


def _specs() -> dict[OpOverload, tuple[_Spec, tuple[str, ...]]]:
    """``{OpOverload: (_Spec, argument names)}`` for every communication operator torch has."""
    out: dict[OpOverload, tuple[_Spec, tuple[str, ...]]] = {}
    for namespace, table in (("c10d", _C10D), ("_c10d_functional", _FUNCTIONAL), ("_dtensor", _DTENSOR)):
        ops = getattr(torch.ops, namespace)
        for packet_name, spec in table.items():
            packet = getattr(ops, packet_name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                out[op] = (spec, internals.argument_names(op))
    return out


_SPEC_TABLE: dict[OpOverload, tuple[_Spec, tuple[str, ...]]] = {}
_WAIT_OP: OpOverload | None = None
_PROFILER_OPS: set[OpOverloadPacket] = set()  # torch.profiler.record_function's enter/exit (they pass dispatch modes)
_LETS_THROUGH: dict[type, bool] = {}  # tensor type -> whether it dispatches first (_dispatches)
_DTYPE_NAMES: dict[torch.dtype, str] = {}  # torch.float32 -> "float32" (_dtype)

# Where the Python stack says an operation came from.
_TD, _C10D_FILE, _FUNCOL_FILES, _DTENSOR_DIR, _DEBUG_DIR, _MESH_FILE = internals.distributed_files()
_PUBLIC = frozenset(getattr(internals.distributed_c10d, "__all__", ()))


# ----------------------------------------------------------------------------------------------
# The recorder

class _Observer(Protocol):  # what a Recorder calls: issued(issue), and waited(issue, ns) where it has one
    def issued(self, issue: Issue) -> None: ...


class _Track(Protocol):  # Recorder.track, a tracks.Track
    def profiler_op(self, func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object: ...


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's __init_subclass__ has no annotations
    """Records every communication operation issued in this thread while it is active.

    Use as a context manager inside a rank (``with Recorder() as rec: ...; rec.records()``), or
    through :func:`start` / :func:`stop` (what a rank does for ``launch(..., record_calls=True)``).
    Other dispatch modes may be entered inside it (a learner's ``CommDebugMode`` counts the same
    operations); DTensor is let through first so that the collectives it issues are recorded as
    its own.

    Args:
        observers: objects with ``issued(issue)`` (and optionally ``waited(issue, ns)``), called
            for each operation (see the module docstring). More with :meth:`add_observer`.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """``False``: do not wrap :meth:`__torch_dispatch__` in torch's disable-Dynamo wrapper, which imports
        TorchDynamo on the first operation (measured: 4.3 s on a loaded 2-core machine, in every
        fresh rank). The recorder's own frames hold no tensor code for dynamo to compile."""
        return False

    def __init__(self, observers: Iterable[_Observer] = ()) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode.__init__ has no annotations
        self.supports_higher_order_operators = True
        global _WAIT_OP
        if not _SPEC_TABLE:
            _SPEC_TABLE.update(_specs())
            _WAIT_OP = internals.functional_op(_WAIT)
        self._records: list[CallRecord] = []
        self._pending_peer: list[tuple[int, dist.Work, tuple[int, ...]]] = []  # (index, work, group_ranks): recv from any source
        self._observers = list(observers)
        self._waiting: dict[int, tuple[weakref.ref[torch.Tensor], Issue]] = {}  # id(output) -> (weakref, Issue), functional outputs
        self._groups: dict[dist.ProcessGroup, list[Any]] = {}  # ProcessGroup -> [group_size, group_ranks, recorded]
        self._start_seq: dict[dist.ProcessGroup, int] = {}  # ProcessGroup -> sequence number when recording began
        self._last_outer: FrameType | None = None  # the call (outermost torch frame) of the last record
        self._call = -1
        self.track: _Track | None = None  # a tracks.Track: also handed record_function's operators
        _PROFILER_OPS.update(internals.profiler_ops())

    # -- observers -------------------------------------------------------------------------------
    def add_observer(self, observer: _Observer) -> None:
        """Call ``observer.issued(issue)`` for every operation from now on (see :class:`Issue`)."""
        self._observers.append(observer)

    def remove_observer(self, observer: _Observer) -> None:
        """Stop calling ``observer``."""
        self._observers.remove(observer)

    # -- results ---------------------------------------------------------------------------------
    def records(self) -> CallRecords:
        """The records so far, in issue order, with :attr:`CallRecords.unrecorded`."""
        out = list(self._records)
        for index, work, ranks in self._pending_peer:
            try:
                if work.is_completed():
                    out[index] = dataclasses.replace(out[index], peer=ranks[internals.work_source_rank(work)])
            except Exception:  # noqa: BLE001 - not completed, or failed: the peer stays unknown
                pass
        return CallRecords(out, self.unrecorded())

    def unrecorded(self) -> int:
        """Operations the backend counted on this rank's groups since recording began that this
        recorder did not record (see :class:`CallRecords`). A group made during the recording
        counts from 0 (a new group's sequence number starts there, measured with gloo)."""
        missing = 0
        for pg in internals.live_groups():
            seq = internals.sequence_number(pg)
            if seq is None:
                continue
            seen = self._groups.get(pg)
            missing += max(0, seq - self._start_seq.get(pg, 0) - (seen[2] if seen else 0))
        return missing

    # -- the mode --------------------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        self._start_seq = {pg: s for pg in internals.live_groups() if (s := internals.sequence_number(pg)) is not None}
        return super().__enter__()  # type: ignore[no-any-return, no-untyped-call]  # torch's has no annotations; it returns self

    def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> object:
        kwargs = kwargs or {}
        if any(_dispatches(t) for t in types):
            return NotImplemented  # DTensor runs first; the collectives it issues come back here
        entry = _SPEC_TABLE.get(func)
        if entry is None:
            if func is _WAIT_OP and self._waiting:
                return self._wait(func, args, kwargs)
            if self.track is not None and func.overloadpacket in _PROFILER_OPS:
                return self.track.profiler_op(func, args, kwargs)
            return func(*args, **kwargs)
        spec, names = entry
        bound = dict(zip(names, args))
        bound.update(kwargs)
        pg = _group_of(bound)
        info = self._group_info(pg)
        issued = time.perf_counter_ns()
        out = func(*args, **kwargs)
        returned = time.perf_counter_ns()
        self._record(spec, bound, out, pg, info, issued, returned)
        return out

    def _group_info(self, pg: dist.ProcessGroup) -> list[Any]:
        info = self._groups.get(pg)
        if info is None:
            try:
                ranks = tuple(dist.get_process_group_ranks(pg))
            except Exception:  # noqa: BLE001 - a group torch.distributed does not list
                ranks = tuple(range(pg.size()))
            info = self._groups[pg] = [pg.size(), ranks, 0]
        return info

    def _record(self, spec: _Spec, bound: dict[str, Any], out: object, pg: dist.ProcessGroup, info: list[Any],
                issued: int, returned: int) -> None:
        name, op, source, outer = _caller(spec)
        if outer is None or outer is not self._last_outer:
            self._call += 1
        self._last_outer = outer
        size, ranks = info[0], info[1]
        info[2] += _backend_count(spec, pg, size)
        work, returned_tensors = _split_result(out, spec)
        if spec.name == "batch_isend_irecv":  # one functional operator, several operations
            entries: list[tuple[str | None, int | None, tuple[torch.Tensor, ...] | None]] = [
                (kind, peer, (t,)) for kind, peer, t in zip(bound["op_list"], bound["peer_list"], bound["tensors"])]
            info[2] += len(entries) - 1
        else:
            entries = [(op, None, None)]
        for kind, peer, tensors in entries:
            if tensors is None:
                every, reads, writes = _tensor_roles(spec, bound, returned_tensors)
                peer = _peer(spec, bound, ranks)
            else:
                every, reads, writes = tensors, *(((tensors, ()) if kind == "isend" else ((), tensors)))  # type: ignore[misc]  # a starred conditional mypy cannot unpack
            if spec.placeholder:
                every = []
            record = CallRecord(
                name=name if tensors is None else "batch_isend_irecv", peer=peer, group_size=size, op=kind,
                shapes=tuple(tuple(t.shape) for t in every), dtypes=tuple(_dtype(t) for t in every), call=self._call,
                group_ranks=ranks, source=source, nbytes=0 if spec.placeholder else max(_bytes(reads), _bytes(writes)))
            if spec.name == "recv" and spec.peer is None:  # a c10d operator: its result is a Work
                self._pending_peer.append((len(self._records), cast("dist.Work", _work(work)), ranks))
            self._records.append(record)
            if self._observers:
                issue = Issue(record, _work(work), tuple(writes) or tuple(returned_tensors), issued, returned)
                for t in returned_tensors if spec.functional and not spec.blocking else ():
                    self._waiting[id(t)] = (weakref.ref(t), issue)
                for observer in list(self._observers):
                    observer.issued(issue)
                    if spec.blocking and hasattr(observer, "waited"):
                        observer.waited(issue, returned)

    def _wait(self, func: OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        out = func(*args, **kwargs)
        t = args[0] if args else kwargs.get("tensor")
        ref, issue = self._waiting.pop(id(t), (None, None))
        if ref is not None and ref() is t:
            now = time.perf_counter_ns()
            for observer in list(self._observers):
                waited = getattr(observer, "waited", None)
                if waited is not None:
                    waited(issue, now)
        return out


# ----------------------------------------------------------------------------------------------
# One operation's fields

def _dispatches(cls: type) -> bool:
    """Whether to let tensors of ``cls`` dispatch first (return ``NotImplemented``): the tensor
    subclasses of torch.distributed, whose operations become collectives or waits the recorder must
    see: DTensor and its subclasses (``nn.Parameter`` of a DTensor, as FSDP2 makes; as
    :class:`~torch.distributed.tensor.debug.CommDebugMode` does), the functional collectives'
    ``AsyncCollectiveTensor`` (it waits, then unwraps). Any other subclass (FakeTensor in DTensor's
    sharding propagation, ``nn.Parameter``) runs as it would without the recorder."""
    through = _LETS_THROUGH.get(cls)
    if through is None:
        from torch.distributed.tensor import DTensor  # noqa: PLC0415 - heavy; the rank side only
        through = _LETS_THROUGH[cls] = isinstance(cls, type) and (
            issubclass(cls, DTensor) or cls.__module__.startswith("torch.distributed."))
    return through


def _backend_count(spec: _Spec, pg: dist.ProcessGroup, size: int) -> int:
    """How far one operation advances the backend's sequence number. gloo builds
    ``monitored_barrier`` from a send and a recv per peer: group rank 0 counts ``2(size - 1)``, every
    other rank 2 (measured with torch 2.13 at world sizes 2-5); every other operation counts 1."""
    if spec.p2p_barrier:
        return 2 * (size - 1) if pg.rank() == 0 else 2
    return 1


def _group_of(bound: dict[str, Any]) -> dist.ProcessGroup:
    if "process_group" in bound:
        return internals.unbox_group(bound["process_group"])
    return internals.resolve_group(bound["group_name"])


def _caller(spec: _Spec) -> tuple[str, str | None, Source, FrameType | None]:
    """``(name, op, source, outer frame)`` of the operation being dispatched, from the stack."""
    public, funcol, dtensor, mesh, outer = [], False, False, False, None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_TD) and not filename.startswith(_DEBUG_DIR):
            outer = frame
            if filename == _C10D_FILE:
                if frame.f_code.co_name in _PUBLIC:
                    public.append(frame.f_code.co_name)
            elif filename in _FUNCOL_FILES:
                funcol = True
            elif filename.startswith(_DTENSOR_DIR):
                dtensor = True
            elif filename == _MESH_FILE:
                mesh = True
        frame = frame.f_back
    name = public[-1] if public else spec.name
    op = None
    if name == "batch_isend_irecv" and public:
        op = public[0] if public[0] in ("isend", "irecv") else None
    elif name in _OBJECT_CALLS:
        op = spec.name
    if dtensor:
        source: Source = "DTensor"
    elif mesh:
        source = "DeviceMesh"
    elif funcol:
        source = "functional"
    elif public:
        source = "torch.distributed"
    else:
        source = "ProcessGroup"
    return name, op, source, outer


def _split_result(out: Any, spec: _Spec) -> tuple[dist.Work | torch.ScriptObject | None, tuple[torch.Tensor, ...]]:
    """``(work, returned tensors)`` of an operator's result."""
    if spec.functional:
        return None, tuple(_flat(out, []))
    if isinstance(out, tuple):  # (tensors, work)
        return out[-1], ()
    return out, ()


def _work(work: dist.Work | torch.ScriptObject | None) -> dist.Work | None:
    if work is None:
        return None
    try:
        return internals.unbox_work(work)
    except Exception:  # noqa: BLE001 - already a Work
        return cast("dist.Work", work)


def _flat(value: object, out: list[torch.Tensor]) -> list[torch.Tensor]:
    """Append every tensor of ``value`` (a tensor, or nested lists/tuples of them) to ``out``."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                out.append(v)
            elif isinstance(v, (list, tuple)):
                _flat(v, out)
    return out


def _tensor_roles(spec: _Spec, bound: dict[str, Any], returned: tuple[torch.Tensor, ...]) -> tuple[Sequence[torch.Tensor], ...]:
    """``(every, read, written)``: the operation's tensors on this rank in argument order (a
    functional collective's returned tensors last), those it reads and those it writes."""
    every: list[torch.Tensor] = []
    reads: list[torch.Tensor] = []
    writes: list[torch.Tensor] = []
    for arg, value in bound.items():
        n = len(every)
        _flat(value, every)
        (writes if arg in spec.outputs else reads).extend(every[n:])
    if spec.functional:
        new = [t for t in returned if not any(t is e for e in every)]
        every += new
        writes += new
    elif not spec.outputs:  # in place: what it reads it also writes
        writes = reads
    return every, reads, writes


def _peer(spec: _Spec, bound: dict[str, Any], ranks: tuple[int, ...]) -> int | None:
    if spec.peer is None or bound.get(spec.peer) is None:
        return None
    value = int(bound[spec.peer])
    if spec.peer_is_global:
        return value
    return ranks[value] if 0 <= value < len(ranks) else value


def _bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _dtype(t: torch.Tensor) -> str:
    name = _DTYPE_NAMES.get(t.dtype)
    if name is None:
        name = _DTYPE_NAMES[t.dtype] = str(t.dtype).removeprefix("torch.")
    return name


# ----------------------------------------------------------------------------------------------
# The recorder of one launch on this rank

_current: list[Recorder] = []


def start(observers: Iterable[_Observer] = ()) -> Recorder:
    """Begin recording this thread's operations (a rank, for ``launch(..., record_calls=True)``);
    returns the :class:`Recorder` (also :func:`active`)."""
    recorder = Recorder(observers)
    recorder.__enter__()
    _current.append(recorder)
    return recorder


def active() -> Recorder | None:
    """The recorder :func:`start` began and :func:`stop` has not ended, else ``None``."""
    return _current[-1] if _current else None


def stop() -> CallRecords:
    """End the recording :func:`start` began and return its records (empty when none was
    active). Dispatch modes the recorded code entered and did not leave are left first, so the
    rank's next call starts clean."""
    if not _current:
        return CallRecords()
    recorder = _current.pop()
    stack = internals.dispatch_mode_stack()
    if any(m is recorder for m in stack):
        for mode in reversed(stack[[i for i, m in enumerate(stack) if m is recorder][-1]:]):
            mode.__exit__(None, None, None)  # type: ignore[no-untyped-call]  # torch's __exit__ has no annotations
    records = recorder.records()
    recorder._last_outer = None
    return records
