"""The spec table: what each ``torch.distributed`` primitive does, as data (:data:`SPECS`).

For every primitive collnb runs, a :class:`PrimitiveSpec` says which buffers a rank passes
(:class:`Buffer`: as the ``torch.distributed`` docs name them, how many chunks each holds, which
ranks hold it), the call a rank makes with them (:class:`TorchCall`), which input chunks each output
chunk is made from, whether the primitive has a root or combines values with a reduce op (and so
which of :func:`collnb.run`'s arguments it uses, :attr:`PrimitiveSpec.arguments`; the others are
refused, :func:`check_arguments`), and, for the collectives nccl-tests measures, its bus-bandwidth
factor. This table is the one place a
primitive is described: the rank functions (:mod:`.rank_calls`), the standalone torchrun scripts
(:mod:`collnb.labs.script`), the bandwidth lab (:mod:`collnb.labs.bench`), the reference
(:mod:`.expected`), the heatmaps, the explorer and the algorithm traces all read it.
:data:`PRIMITIVES`, :data:`ROOTED_PRIMITIVES`, :data:`REDUCING_PRIMITIVES`, :data:`OBJECT_PRIMITIVES`
and :data:`BENCH_PRIMITIVES` are derived from it.

Adding a primitive is adding one ``_spec(...)`` row below (and, where it needs them, a reduce
rule in :mod:`.expected` and an inputs preset in :mod:`collnb.views.presets`). ``send_recv`` and
``barrier`` are the two rows whose work is not one ``torch.distributed`` call (a ring of sends and
receives; a timing experiment): their rank code and script are written out in :mod:`.rank_calls`
and :mod:`collnb.labs.script`.

Vocabulary (as in the ``torch.distributed`` docs): a buffer is a row of **chunks** of
``chunk_size`` elements. A buffer one rank sends in pieces (``scatter_list``, the inputs of
``all_to_all``/``reduce_scatter``) has one chunk per destination rank; what a rank contributes to
a gather (``gather``, ``all_gather*``) is one chunk, and what it receives from a scatter
(``scatter``, ``reduce_scatter*``) is one chunk; the buffers of ``broadcast``, ``reduce``,
``all_reduce`` and the ``send_recv`` ring have ``world_size`` chunks, so their heatmaps are
square.

This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Literal

from ..i18n import N_, _
from ..vocabulary import check_choice

__all__ = ["PrimitiveSpec", "Buffer", "TorchCall", "SpecKind", "RootName", "ChunkCount", "Sources", "SPECS",
           "PRIMITIVES", "REDUCING_PRIMITIVES", "ROOTED_PRIMITIVES", "OBJECT_PRIMITIVES", "BENCH_PRIMITIVES",
           "CALL_ARGUMENTS", "CallArgument", "get_spec", "check_arguments"]


#: What a primitive moves: tensors, pickled Python objects, or nothing but time (barrier).
SpecKind = Literal["tensor", "object", "time"]
#: The keyword naming a rooted primitive's root rank.
RootName = Literal["src", "dst"]
#: ``(world_size, rank, root) -> chunks`` in that rank's buffer.
ChunkCount = Callable[[int, int, int], int]
#: ``(world_size, rank, root, out_chunk) -> ((src_rank, src_chunk), ...)``.
Sources = Callable[[int, int, int, int], tuple[tuple[int, int], ...]]
#: What a keyword argument of a :class:`TorchCall` is given: the root rank, the reduce op, or the
#: rank's device.
CallValue = Literal["root", "op", "device"]
#: An argument of :func:`collnb.run` (and of a :func:`collnb.run_batch` config) that describes the
#: call a rank makes; which of them a primitive uses is :attr:`PrimitiveSpec.arguments`.
CallArgument = Literal["dtype", "op", "root", "chunk_size", "inputs"]
#: Every :data:`CallArgument`, in :func:`collnb.run`'s order.
CALL_ARGUMENTS: tuple[CallArgument, ...] = ("dtype", "op", "root", "chunk_size", "inputs")


@dataclass(frozen=True)
class Buffer:
    """One buffer argument of a primitive's call, as the ``torch.distributed`` docs name it.

    Attributes:
        name: the argument's name in the docs (``"tensor"``, ``"output"``, ``"scatter_list"``,
            ``"object_list"``, ``"obj"``...); the scripts use it as the variable's name.
        role: ``"in"`` (read by the call), ``"out"`` (written by it) or ``"inout"`` (both: the
            call works in place, as ``all_reduce`` does).
        chunks: ``"world"`` (``world_size`` chunks) or ``"one"`` (one chunk) on a rank that holds it.
        form: ``"tensor"`` (one flat tensor), ``"tensors"`` (a list of one-chunk tensors, as
            ``scatter_list``), ``"objects"`` (a list of picklable objects, one per chunk) or
            ``"object"`` (one object).
        at: ``"every"`` rank holds it, or only the ``"root"`` (the others pass ``None``).
    """

    name: str
    role: Literal["in", "out", "inout"]
    chunks: Literal["world", "one"]
    form: Literal["tensor", "tensors", "objects", "object"]
    at: Literal["every", "root"] = "every"

    def __post_init__(self) -> None:
        if self.form == "object" and (self.chunks != "one" or self.role != "in"):
            raise ValueError(f"{self.name}: one object is one chunk, and a call can only read it")

    def count(self, world_size: int, rank: int, root: int) -> int:
        """Chunks this buffer holds on ``rank`` (0 where the rank passes ``None``)."""
        if self.at == "root" and rank != root:
            return 0
        return world_size if self.chunks == "world" else 1


@dataclass(frozen=True)
class TorchCall:
    """The one ``torch.distributed`` call a rank makes, as data: ``dist.<function>(*args, **keywords)``.

    Attributes:
        function: the ``torch.distributed`` function's name.
        args: the positional arguments, names of the spec's :class:`Buffer` rows (a buffer held
            only by the root is passed as ``None`` on the other ranks).
        keywords: ``(keyword, value)`` pairs, value one of :data:`CallValue`: ``"root"`` (the
            src/dst rank), ``"op"`` (the reduce op), ``"device"`` (the rank's device).
    """

    function: str
    args: tuple[str, ...] = ()
    keywords: tuple[tuple[str, CallValue], ...] = ()


def _call(function: str, *args: str, **keywords: CallValue) -> TorchCall:
    return TorchCall(function, args, tuple(keywords.items()))


def _everywhere(ws: int, r: int, root: int) -> bool:
    return True


@dataclass(frozen=True)
class PrimitiveSpec:
    """What one primitive does, as data.

    Attributes:
        name: the primitive's name in :data:`PRIMITIVES` (``torch.distributed`` function name;
            ``send_recv`` is the point-to-point ring shift, see :func:`run`).
        call: the ``torch.distributed`` call(s) a rank makes, as one line a learner would write
            (``root`` for the src/dst rank, ``OP`` for the reduce op), shown above its heatmap; for
            a row with a :attr:`torch_call`, written from it (:func:`call_line`).
        summary: one sentence of semantics.
        kind: ``"tensor"``, ``"object"`` (pickled Python objects) or ``"time"`` (barrier): :data:`SpecKind`.
        reduces: whether it combines values with a reduce op.
        rooted: whether it has a root rank; ``root_name`` is its keyword (``src``/``dst``).
        n_in, n_out: ``(world_size, rank, root) -> int`` chunks in that rank's input/output
            buffer (0 = the rank has no such buffer); from :attr:`buffers` where it has them.
        sources: ``(world_size, rank, root, out_chunk) -> tuple of (src_rank, src_chunk)``: the
            input chunks that output chunk is made from (several = combined with the op).
        defined: ``(world_size, rank, root) -> bool``: whether the primitive defines that
            rank's output (after ``reduce``/``gather``/``gather_object`` only the root's).
        buffers: the call's buffers (:class:`Buffer`): exactly one read (``"in"`` or
            ``"inout"``) and at most one written separately (``"out"``); empty for ``barrier``.
        torch_call: the call (:class:`TorchCall`), or ``None`` for ``send_recv`` and ``barrier``
            (their rank code is written out in :mod:`.rank_calls`).
        busbw: ``world_size -> float``: nccl-tests' bus-bandwidth factor (``busbw = algbw *
            factor``) for the collectives its doc/PERFORMANCE.md defines, under nccl-tests' name;
            ``None`` for the others (the bandwidth lab measures exactly the rows that have one).
        timed_as: the row whose call the bandwidth lab times under this name (nccl-tests' one flat
            buffer: ``all_gather`` is timed as ``all_gather_single``); ``None``: this row's own.
    """

    name: str
    call: str
    summary: str
    kind: SpecKind
    reduces: bool
    rooted: bool
    root_name: RootName | None
    n_in: ChunkCount
    n_out: ChunkCount
    sources: Sources
    defined: Callable[[int, int, int], bool] = _everywhere
    buffers: tuple[Buffer, ...] = ()
    torch_call: TorchCall | None = None
    busbw: Callable[[int], float] | None = None
    timed_as: str | None = None

    def input_buffer(self) -> Buffer:
        """The buffer the call reads (role ``"in"`` or ``"inout"``).

        Raises:
            LookupError: a row without buffers (``barrier``).
        """
        return next(b for b in self.buffers if b.role != "out")

    def output_buffer(self) -> Buffer:
        """The buffer the call writes: the separate ``"out"`` one, else the ``"inout"`` one.

        Raises:
            LookupError: a row without buffers (``barrier``).
        """
        return next((b for b in self.buffers if b.role == "out"), None) or self.input_buffer()

    @property
    def arguments(self) -> tuple[CallArgument, ...]:
        """The :data:`CALL_ARGUMENTS` this primitive uses, in that order, from the row: a tensor
        primitive its ``dtype``, ``chunk_size`` and ``inputs``, an object primitive its ``inputs``
        (one picklable object per chunk: no dtype, no chunk size), ``op`` where it :attr:`reduces`,
        ``root`` where it is :attr:`rooted`; ``barrier`` (kind ``"time"``) none. ``collnb.run``
        refuses every other one (:func:`check_arguments`)."""
        uses = {"dtype": self.kind == "tensor", "op": self.reduces, "root": self.rooted,
                "chunk_size": self.kind == "tensor", "inputs": self.kind != "time"}
        return tuple(a for a in CALL_ARGUMENTS if uses[a])


def call_line(call: TorchCall, buffers: tuple[Buffer, ...], root_name: RootName | None) -> str:
    """``call`` as the one line above a heatmap: ``dist.scatter(output, scatter_list if rank == src
    else None, src=root)``; the root is written ``root``, the reduce op ``OP``, and the rank's
    device is left out (it is where the rank's tensors live, not what the call does)."""
    at_root = {b.name for b in buffers if b.at == "root"}
    args = [f"{a} if rank == {root_name} else None" if a in at_root else a for a in call.args]
    for key, value in call.keywords:
        if value != "device":
            args.append(f"{key}={'root' if value == 'root' else 'OP'}")
    return f"dist.{call.function}({', '.join(args)})"


def _ws(ws: int, r: int, root: int) -> int:
    return ws


def _one(ws: int, r: int, root: int) -> int:
    return 1


def _at_root(ws: int, r: int, root: int) -> bool:
    return r == root


def _all_ranks_same_chunk(ws: int, r: int, root: int, k: int) -> tuple[tuple[int, int], ...]:
    return tuple((s, k) for s in range(ws))


def _all_ranks_chunk_r(ws: int, r: int, root: int, k: int) -> tuple[tuple[int, int], ...]:
    return tuple((s, r) for s in range(ws))


def _ring_bus(n: int) -> float:
    """all_reduce: ``2(n-1)/n`` (nccl-tests doc/PERFORMANCE.md, "Bus bandwidth")."""
    return 2 * (n - 1) / n


def _one_step_bus(n: int) -> float:
    """all_gather, reduce_scatter, all_to_all: ``(n-1)/n`` (nccl-tests doc/PERFORMANCE.md); scatter and
    gather likewise (nccl-tests src/scatter.cu, src/gather.cu: ``ScatterGetBw``/``GatherGetBw``)."""
    return (n - 1) / n


def _rooted_bus(n: int) -> float:
    """broadcast, reduce: ``1`` (nccl-tests doc/PERFORMANCE.md)."""
    return 1.0


SPECS: dict[str, PrimitiveSpec] = {}


def _spec(*, name: str, summary: str, kind: SpecKind, reduces: bool, root_name: RootName | None,
          sources: Sources, buffers: tuple[Buffer, ...] = (), call: TorchCall | str,
          defined: Callable[[int, int, int], bool] = _everywhere, busbw: Callable[[int], float] | None = None,
          timed_as: str | None = None, n_in: ChunkCount = _one, n_out: ChunkCount = _one) -> None:
    """Add a row to :data:`SPECS`. ``call``: a :class:`TorchCall` (its line is written from it), or the
    line itself for a row whose rank code is written out (``n_in``/``n_out`` then given too)."""
    if buffers:
        reads = [b for b in buffers if b.role != "out"]
        writes = [b for b in buffers if b.role == "out"]
        if len(reads) != 1 or len(writes) > 1:
            raise ValueError(f"{name}: a call reads one buffer and writes at most one more")
        n_in, n_out = reads[0].count, (writes or reads)[0].count
    torch_call = call if isinstance(call, TorchCall) else None
    line = call_line(call, buffers, root_name) if isinstance(call, TorchCall) else call
    SPECS[name] = PrimitiveSpec(name, line, summary, kind, reduces, root_name is not None, root_name, n_in, n_out,
                                sources, defined, buffers, torch_call, busbw, timed_as)


_spec(name="broadcast", summary="the src rank's buffer is copied into every rank's buffer",
      kind="tensor", reduces=False, root_name="src", busbw=_rooted_bus,
      buffers=(Buffer("tensor", "inout", "world", "tensor"),), call=_call("broadcast", "tensor", src="root"),
      sources=lambda ws, r, root, k: ((root, k),))
_spec(name="scatter", summary="chunk j of the src rank's scatter_list goes to rank j",
      kind="tensor", reduces=False, root_name="src", busbw=_one_step_bus,
      buffers=(Buffer("output", "out", "one", "tensor"), Buffer("scatter_list", "in", "world", "tensors", at="root")),
      call=_call("scatter", "output", "scatter_list", src="root"),
      sources=lambda ws, r, root, k: ((root, r),))
_spec(name="gather",
      summary="every rank's tensor lands in slot r of the dst rank's gather_list; other ranks get nothing",
      kind="tensor", reduces=False, root_name="dst", busbw=_one_step_bus,
      buffers=(Buffer("tensor", "in", "one", "tensor"), Buffer("gather_list", "out", "world", "tensors", at="root")),
      call=_call("gather", "tensor", "gather_list", dst="root"),
      sources=lambda ws, r, root, k: ((k, 0),), defined=_at_root)
_spec(name="reduce",
      summary="the dst rank's buffer becomes the op over every rank's buffer; other ranks' buffers are undefined",
      kind="tensor", reduces=True, root_name="dst", busbw=_rooted_bus,
      buffers=(Buffer("tensor", "inout", "world", "tensor"),), call=_call("reduce", "tensor", dst="root", op="op"),
      sources=_all_ranks_same_chunk, defined=_at_root)
_spec(name="all_gather", summary="every rank receives every rank's tensor, slot j from rank j",
      kind="tensor", reduces=False, root_name=None, busbw=_one_step_bus, timed_as="all_gather_single",
      buffers=(Buffer("tensor", "in", "one", "tensor"), Buffer("tensor_list", "out", "world", "tensors")),
      call=_call("all_gather", "tensor_list", "tensor"),
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="reduce_scatter", summary="rank j receives the op over every rank's input_list[j]",
      kind="tensor", reduces=True, root_name=None, busbw=_one_step_bus, timed_as="reduce_scatter_single",
      buffers=(Buffer("input_list", "in", "world", "tensors"), Buffer("output", "out", "one", "tensor")),
      call=_call("reduce_scatter", "output", "input_list", op="op"),
      sources=_all_ranks_chunk_r)
_spec(name="all_reduce", summary="every rank's buffer becomes the op over every rank's buffer",
      kind="tensor", reduces=True, root_name=None, busbw=_ring_bus,
      buffers=(Buffer("tensor", "inout", "world", "tensor"),), call=_call("all_reduce", "tensor", op="op"),
      sources=_all_ranks_same_chunk)
_spec(name="all_to_all", summary="input_list[j] of rank i lands in output_list[i] of rank j (a transpose)",
      kind="tensor", reduces=False, root_name=None, busbw=_one_step_bus, timed_as="all_to_all_single",
      buffers=(Buffer("input_list", "in", "world", "tensors"), Buffer("output_list", "out", "world", "tensors")),
      call=_call("all_to_all", "output_list", "input_list"),
      sources=lambda ws, r, root, k: ((k, r),))
_spec(name="all_to_all_single", summary="chunk j of rank i's input lands in chunk i of rank j's output (a transpose)",
      kind="tensor", reduces=False, root_name=None,
      buffers=(Buffer("input", "in", "world", "tensor"), Buffer("output", "out", "world", "tensor")),
      call=_call("all_to_all_single", "output", "input"),
      sources=lambda ws, r, root, k: ((k, r),))
_spec(name="all_gather_into_tensor",
      summary="like all_gather, into one flat output tensor: chunk j comes from rank j "
              "(deprecated in torch 2.13: use all_gather_single)",
      kind="tensor", reduces=False, root_name=None,
      buffers=(Buffer("input", "in", "one", "tensor"), Buffer("output", "out", "world", "tensor")),
      call=_call("all_gather_into_tensor", "output", "input"),
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="all_gather_single", summary="one flat output tensor on every rank: chunk j comes from rank j",
      kind="tensor", reduces=False, root_name=None,
      buffers=(Buffer("input", "in", "one", "tensor"), Buffer("output", "out", "world", "tensor")),
      call=_call("all_gather_single", "output", "input"),
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="reduce_scatter_tensor",
      summary="like reduce_scatter, from one flat input tensor: rank j gets the op over chunk j of "
              "every rank (deprecated in torch 2.13: use reduce_scatter_single)",
      kind="tensor", reduces=True, root_name=None,
      buffers=(Buffer("input", "in", "world", "tensor"), Buffer("output", "out", "one", "tensor")),
      call=_call("reduce_scatter_tensor", "output", "input", op="op"),
      sources=_all_ranks_chunk_r)
_spec(name="reduce_scatter_single", summary="from one flat input tensor: rank j gets the op over chunk j of every rank",
      kind="tensor", reduces=True, root_name=None,
      buffers=(Buffer("input", "in", "world", "tensor"), Buffer("output", "out", "one", "tensor")),
      call=_call("reduce_scatter_single", "output", "input", op="op"),
      sources=_all_ranks_chunk_r)
_spec(name="broadcast_object_list", summary="the src rank's list of picklable objects replaces every rank's list",
      kind="object", reduces=False, root_name="src",
      buffers=(Buffer("object_list", "inout", "world", "objects"),),
      call=_call("broadcast_object_list", "object_list", src="root", device="device"),
      sources=lambda ws, r, root, k: ((root, k),))
_spec(name="scatter_object_list", summary="object j of the src rank's list goes to rank j",
      kind="object", reduces=False, root_name="src",
      buffers=(Buffer("output_list", "out", "one", "objects"), Buffer("input_list", "in", "world", "objects", at="root")),
      call=_call("scatter_object_list", "output_list", "input_list", src="root"),
      sources=lambda ws, r, root, k: ((root, r),))
_spec(name="gather_object", summary="every rank's object lands in slot r of the dst rank's list; other ranks get nothing",
      kind="object", reduces=False, root_name="dst",
      buffers=(Buffer("obj", "in", "one", "object"), Buffer("object_list", "out", "world", "objects", at="root")),
      call=_call("gather_object", "obj", "object_list", dst="root"),
      sources=lambda ws, r, root, k: ((k, 0),), defined=_at_root)
_spec(name="all_gather_object", summary="every rank receives every rank's object, slot j from rank j",
      kind="object", reduces=False, root_name=None,
      buffers=(Buffer("obj", "in", "one", "object"), Buffer("object_list", "out", "world", "objects")),
      call=_call("all_gather_object", "object_list", "obj"),
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="send_recv",
      call="dist.batch_isend_irecv([P2POp(dist.isend, tensor, (rank+1) % ws), "
           "P2POp(dist.irecv, received, (rank-1) % ws)])",
      summary="ring shift: every rank sends its buffer to rank+1 and receives rank-1's (point-to-point)",
      kind="tensor", reduces=False, root_name=None,
      buffers=(Buffer("tensor", "in", "world", "tensor"), Buffer("received", "out", "world", "tensor")),
      sources=lambda ws, r, root, k: (((r - 1) % ws, k),))
_spec(name="barrier", call="dist.barrier()",
      summary="rank r arrives 30*r ms late; nobody leaves before the last rank has arrived",
      kind="time", reduces=False, root_name=None, n_in=_one, n_out=_one,
      sources=lambda ws, r, root, k: tuple((s, 0) for s in range(ws)))

#: Every primitive :func:`run` knows, in teaching order.
PRIMITIVES = tuple(SPECS)
#: Primitives that take a reduce op.
REDUCING_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.reduces)
#: Primitives with a root rank (``src`` or ``dst``).
ROOTED_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.rooted)
#: Primitives that move pickled Python objects.
OBJECT_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.kind == "object")
#: Primitives with a bus-bandwidth factor (nccl-tests' names): what the bandwidth lab measures.
BENCH_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.busbw is not None)


#: Why a primitive does not use an argument, by (argument, kind or "reduces"/"rooted"): the reason
#: :func:`check_arguments` gives.
_WHY_NOT: dict[tuple[str, str], str] = {
    ("dtype", "object"): N_("it sends pickled Python objects, not tensors"),
    ("chunk_size", "object"): N_("it sends pickled Python objects, one per chunk, not tensors"),
    ("dtype", "time"): N_("it moves no data: it measures when each rank arrives and leaves"),
    ("chunk_size", "time"): N_("it moves no data: it measures when each rank arrives and leaves"),
    ("inputs", "time"): N_("it moves no data: it measures when each rank arrives and leaves"),
    ("op", "reduces"): N_("it does not combine values, so it takes no reduce op; ops apply to {reducing}"),
    ("root", "rooted"): N_("it has no src/dst rank: every rank takes part alike"),
}


def check_arguments(spec: PrimitiveSpec, given: Mapping[str, object], where: str = "collnb.run",
                    takes: Sequence[str] = CALL_ARGUMENTS) -> None:
    """Refuse the arguments in ``given`` that ``spec``'s primitive does not use (not in
    :attr:`PrimitiveSpec.arguments`), before anything is launched.

    ``given`` maps the :data:`CALL_ARGUMENTS` a learner passed to their values; a value ``None`` is
    not given (the default). A value equal to the default counts as given: ``root=0`` for
    ``all_reduce`` is refused like ``root=1``, as ``dist.all_reduce(t, src=0)`` would be, so that
    every argument a call shows is one that changes what it does. ``where`` names the entry point,
    ``takes`` the arguments it has (the error lists those the primitive uses among them).

    Raises:
        ValueError: the first such argument (in :data:`CALL_ARGUMENTS` order), naming it, the
            primitive, why it does not use it, and the arguments it does use
            (``"collnb.run: barrier does not use chunk_size (it moves no data: ...); barrier takes
            no argument here but its world size and backend. Leave chunk_size out"``).
    """
    uses = [a for a in spec.arguments if a in takes]
    for name in CALL_ARGUMENTS:
        if name in spec.arguments or given.get(name) is None:
            continue
        why = _WHY_NOT.get((name, "reduces" if name == "op" else "rooted" if name == "root" else spec.kind),
                           N_("it does not use it"))
        if uses:
            accepts = _("the arguments {primitive} uses: {names}").format(primitive=spec.name, names=", ".join(uses))
        else:
            accepts = _("{primitive} takes no argument here but its world size and backend").format(
                primitive=spec.name)
        raise ValueError(_("{where}: {primitive} does not use {argument} ({why}); {accepts}. "
                           "Leave {argument} out").format(where=where, primitive=spec.name, argument=name,
                                                          why=_(why).format(reducing=", ".join(REDUCING_PRIMITIVES)),
                                                          accepts=accepts))


def get_spec(primitive: object) -> PrimitiveSpec:
    """The :class:`PrimitiveSpec` of ``primitive`` (a name from :data:`PRIMITIVES`).

    Raises:
        TypeError: not a str: ``"primitive must be a name (str), one of: broadcast, ...; got 3"``.
        ValueError: an unknown name: ``"unknown primitive 'allreduce'; choose one of: broadcast, ..."``
            (:func:`collnb.vocabulary.check_choice`).
    """
    return SPECS[check_choice(N_("primitive"), primitive, PRIMITIVES)]
