"""The spec table: what each ``torch.distributed`` primitive does, as data (:data:`SPECS`).

For every primitive collnb runs, a :class:`PrimitiveSpec` says which call a rank makes, how many
chunks each rank's input and output buffers hold, which input chunks each output chunk is made
from, and whether the primitive has a root or combines values with a reduce op. The rank
functions (:mod:`.rank_calls`), the reference (:mod:`.expected`), the heatmaps and the
algorithm traces all read this one table. :data:`PRIMITIVES`, :data:`ROOTED_PRIMITIVES`,
:data:`REDUCING_PRIMITIVES` and :data:`OBJECT_PRIMITIVES` are derived from it.

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

from dataclasses import dataclass
from typing import Callable, Literal

from ..i18n import N_
from ..vocabulary import check_choice

__all__ = ["PrimitiveSpec", "SpecKind", "RootName", "ChunkCount", "Sources", "SPECS", "PRIMITIVES", "REDUCING_PRIMITIVES", "ROOTED_PRIMITIVES",
           "OBJECT_PRIMITIVES", "get_spec"]


#: What a primitive moves: tensors, pickled Python objects, or nothing but time (barrier).
SpecKind = Literal["tensor", "object", "time"]
#: The keyword naming a rooted primitive's root rank.
RootName = Literal["src", "dst"]
#: ``(world_size, rank, root) -> chunks`` in that rank's buffer.
ChunkCount = Callable[[int, int, int], int]
#: ``(world_size, rank, root, out_chunk) -> ((src_rank, src_chunk), ...)``.
Sources = Callable[[int, int, int, int], tuple[tuple[int, int], ...]]


def _everywhere(ws: int, r: int, root: int) -> bool:
    return True


@dataclass(frozen=True)
class PrimitiveSpec:
    """What one primitive does, as data.

    Attributes:
        name: the primitive's name in :data:`PRIMITIVES` (``torch.distributed`` function name;
            ``send_recv`` is the point-to-point ring shift, see :func:`run`).
        call: the ``torch.distributed`` call(s) a rank makes, as a learner would write them.
        summary: one sentence of semantics.
        kind: ``"tensor"``, ``"object"`` (pickled Python objects) or ``"time"`` (barrier): :data:`SpecKind`.
        reduces: whether it combines values with a reduce op.
        rooted: whether it has a root rank; ``root_name`` is its keyword (``src``/``dst``).
        n_in, n_out: ``(world_size, rank, root) -> int`` chunks in that rank's input/output
            buffer (0 = the rank has no such buffer).
        sources: ``(world_size, rank, root, out_chunk) -> tuple of (src_rank, src_chunk)``: the
            input chunks that output chunk is made from (several = combined with the op).
        defined: ``(world_size, rank, root) -> bool``: whether the primitive defines that
            rank's output (after ``reduce``/``gather``/``gather_object`` only the root's).
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


def _ws(ws: int, r: int, root: int) -> int:
    return ws


def _one(ws: int, r: int, root: int) -> int:
    return 1


def _root_ws(ws: int, r: int, root: int) -> int:
    return ws if r == root else 0


def _at_root(ws: int, r: int, root: int) -> bool:
    return r == root


def _all_ranks_same_chunk(ws: int, r: int, root: int, k: int) -> tuple[tuple[int, int], ...]:
    return tuple((s, k) for s in range(ws))


def _all_ranks_chunk_r(ws: int, r: int, root: int, k: int) -> tuple[tuple[int, int], ...]:
    return tuple((s, r) for s in range(ws))


SPECS: dict[str, PrimitiveSpec] = {}


def _spec(*, name: str, call: str, summary: str, kind: SpecKind, reduces: bool, rooted: bool,
          root_name: RootName | None, n_in: ChunkCount, n_out: ChunkCount, sources: Sources,
          defined: Callable[[int, int, int], bool] = _everywhere) -> None:
    SPECS[name] = PrimitiveSpec(name, call, summary, kind, reduces, rooted, root_name, n_in, n_out, sources,
                                defined)


_spec(name="broadcast", call="dist.broadcast(tensor, src=root)",
      summary="the src rank's buffer is copied into every rank's buffer",
      kind="tensor", reduces=False, rooted=True, root_name="src", n_in=_ws, n_out=_ws,
      sources=lambda ws, r, root, k: ((root, k),))
_spec(name="scatter", call="dist.scatter(output, scatter_list if rank == src else None, src=root)",
      summary="chunk j of the src rank's scatter_list goes to rank j",
      kind="tensor", reduces=False, rooted=True, root_name="src", n_in=_root_ws, n_out=_one,
      sources=lambda ws, r, root, k: ((root, r),))
_spec(name="gather", call="dist.gather(tensor, gather_list if rank == dst else None, dst=root)",
      summary="every rank's tensor lands in slot r of the dst rank's gather_list; other ranks get nothing",
      kind="tensor", reduces=False, rooted=True, root_name="dst", n_in=_one, n_out=_root_ws,
      sources=lambda ws, r, root, k: ((k, 0),), defined=_at_root)
_spec(name="reduce", call="dist.reduce(tensor, dst=root, op=OP)",
      summary="the dst rank's buffer becomes the op over every rank's buffer; other ranks' buffers are undefined",
      kind="tensor", reduces=True, rooted=True, root_name="dst", n_in=_ws, n_out=_ws,
      sources=_all_ranks_same_chunk, defined=_at_root)
_spec(name="all_gather", call="dist.all_gather(tensor_list, tensor)",
      summary="every rank receives every rank's tensor, slot j from rank j",
      kind="tensor", reduces=False, rooted=False, root_name=None, n_in=_one, n_out=_ws,
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="reduce_scatter", call="dist.reduce_scatter(output, input_list, op=OP)",
      summary="rank j receives the op over every rank's input_list[j]",
      kind="tensor", reduces=True, rooted=False, root_name=None, n_in=_ws, n_out=_one,
      sources=_all_ranks_chunk_r)
_spec(name="all_reduce", call="dist.all_reduce(tensor, op=OP)",
      summary="every rank's buffer becomes the op over every rank's buffer",
      kind="tensor", reduces=True, rooted=False, root_name=None, n_in=_ws, n_out=_ws,
      sources=_all_ranks_same_chunk)
_spec(name="all_to_all", call="dist.all_to_all(output_list, input_list)",
      summary="input_list[j] of rank i lands in output_list[i] of rank j (a transpose)",
      kind="tensor", reduces=False, rooted=False, root_name=None, n_in=_ws, n_out=_ws,
      sources=lambda ws, r, root, k: ((k, r),))
_spec(name="all_to_all_single", call="dist.all_to_all_single(output, input)",
      summary="chunk j of rank i's input lands in chunk i of rank j's output (a transpose)",
      kind="tensor", reduces=False, rooted=False, root_name=None, n_in=_ws, n_out=_ws,
      sources=lambda ws, r, root, k: ((k, r),))
_spec(name="all_gather_into_tensor", call="dist.all_gather_into_tensor(output, input)",
      summary="like all_gather, into one flat output tensor: chunk j comes from rank j "
              "(deprecated in torch 2.13: use all_gather_single)",
      kind="tensor", reduces=False, rooted=False, root_name=None, n_in=_one, n_out=_ws,
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="all_gather_single", call="dist.all_gather_single(output, input)",
      summary="one flat output tensor on every rank: chunk j comes from rank j",
      kind="tensor", reduces=False, rooted=False, root_name=None, n_in=_one, n_out=_ws,
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="reduce_scatter_tensor", call="dist.reduce_scatter_tensor(output, input, op=OP)",
      summary="like reduce_scatter, from one flat input tensor: rank j gets the op over chunk j of "
              "every rank (deprecated in torch 2.13: use reduce_scatter_single)",
      kind="tensor", reduces=True, rooted=False, root_name=None, n_in=_ws, n_out=_one,
      sources=_all_ranks_chunk_r)
_spec(name="reduce_scatter_single", call="dist.reduce_scatter_single(output, input, op=OP)",
      summary="from one flat input tensor: rank j gets the op over chunk j of every rank",
      kind="tensor", reduces=True, rooted=False, root_name=None, n_in=_ws, n_out=_one,
      sources=_all_ranks_chunk_r)
_spec(name="broadcast_object_list", call="dist.broadcast_object_list(object_list, src=root)",
      summary="the src rank's list of picklable objects replaces every rank's list",
      kind="object", reduces=False, rooted=True, root_name="src", n_in=_ws, n_out=_ws,
      sources=lambda ws, r, root, k: ((root, k),))
_spec(name="scatter_object_list",
      call="dist.scatter_object_list(output_list, input_list if rank == src else None, src=root)",
      summary="object j of the src rank's list goes to rank j",
      kind="object", reduces=False, rooted=True, root_name="src", n_in=_root_ws, n_out=_one,
      sources=lambda ws, r, root, k: ((root, r),))
_spec(name="gather_object", call="dist.gather_object(obj, object_list if rank == dst else None, dst=root)",
      summary="every rank's object lands in slot r of the dst rank's list; other ranks get nothing",
      kind="object", reduces=False, rooted=True, root_name="dst", n_in=_one, n_out=_root_ws,
      sources=lambda ws, r, root, k: ((k, 0),), defined=_at_root)
_spec(name="all_gather_object", call="dist.all_gather_object(object_list, obj)",
      summary="every rank receives every rank's object, slot j from rank j",
      kind="object", reduces=False, rooted=False, root_name=None, n_in=_one, n_out=_ws,
      sources=lambda ws, r, root, k: ((k, 0),))
_spec(name="send_recv",
      call="dist.batch_isend_irecv([P2POp(dist.isend, tensor, (rank+1) % ws), "
           "P2POp(dist.irecv, received, (rank-1) % ws)])",
      summary="ring shift: every rank sends its buffer to rank+1 and receives rank-1's (point-to-point)",
      kind="tensor", reduces=False, rooted=False, root_name=None, n_in=_ws, n_out=_ws,
      sources=lambda ws, r, root, k: (((r - 1) % ws, k),))
_spec(name="barrier", call="dist.barrier()",
      summary="rank r arrives 30*r ms late; nobody leaves before the last rank has arrived",
      kind="time", reduces=False, rooted=False, root_name=None, n_in=_one, n_out=_one,
      sources=lambda ws, r, root, k: tuple((s, 0) for s in range(ws)))

#: Every primitive :func:`run` knows, in teaching order.
PRIMITIVES = tuple(SPECS)
#: Primitives that take a reduce op.
REDUCING_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.reduces)
#: Primitives with a root rank (``src`` or ``dst``).
ROOTED_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.rooted)
#: Primitives that move pickled Python objects.
OBJECT_PRIMITIVES = tuple(n for n, s in SPECS.items() if s.kind == "object")


def get_spec(primitive: object) -> PrimitiveSpec:
    """The :class:`PrimitiveSpec` of ``primitive`` (a name from :data:`PRIMITIVES`).

    Raises:
        TypeError: not a str: ``"primitive must be a name (str), one of: broadcast, ...; got 3"``.
        ValueError: an unknown name: ``"unknown primitive 'allreduce'; choose one of: broadcast, ..."``
            (:func:`collnb.vocabulary.check_choice`).
    """
    return SPECS[check_choice(N_("primitive"), primitive, PRIMITIVES)]
