"""Run one ``torch.distributed`` primitive on real ranks and check it against a reference.

``run("all_reduce", world_size=4)`` starts (or reuses) ``world_size`` warm ranks through
:func:`collnb.launcher.launch`, gives every rank a *teaching input* whose values tell where they
came from, calls the primitive once, and returns a :class:`RunResult` holding each rank's buffer
before and after, the reference result computed here in the caller without
``torch.distributed``, which ranks' outputs the primitive defines, and whether they agree.
Displayed in a notebook a :class:`RunResult` draws its rank x chunk heatmap
(:mod:`collnb.heatmap`).

Vocabulary used throughout (as in the ``torch.distributed`` docs):

* **chunk** -- a buffer is a row of chunks of ``chunk_size`` elements each. A buffer one rank
  sends in pieces (``scatter_list``, the inputs of ``all_to_all``/``reduce_scatter``) has one chunk
  per destination rank; what a rank contributes to a gather (``gather``, ``all_gather*``) is one
  chunk, and what it receives from a scatter (``scatter``, ``reduce_scatter*``) is one chunk; the
  buffers of ``broadcast``, ``reduce``, ``all_reduce`` and the ``send_recv`` ring have
  ``world_size`` chunks, so their heatmaps are square.
* **teaching input** -- rank ``r``, chunk ``c`` holds ``10*r + c`` (``100*r + c`` when
  ``world_size > 10``, so chunk indices up to 15 stay readable). Every element of a chunk holds
  the chunk's value (as the seeds' ``torch.full((chunk_size,), ...)``). Values are made as int64
  and cast to the run's dtype with ``Tensor.to``: integers wrap (``int8``: 150 -> -106), ``bool``
  becomes ``value != 0``, floats round. The dtype effects are part of the lesson. The object
  collectives send the Python strings ``"r{rank}c{chunk}"``; ``barrier`` measures time instead.

Which dtypes, ops and primitives a backend accepts is *detected* by :func:`backend_support` on
real ranks of the installed torch (one launch at world size 2 per process and backend), never
taken from a document. For example the seed page says Gloo lacks ``reduce_scatter`` and the list
form of ``all_to_all``; torch 2.13's Gloo has both, and the detection reports that.
"""

from __future__ import annotations

import numbers
import os
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from .. import ranks as _launcher  # was launcher

__all__ = [
    "PRIMITIVES",
    "REDUCING_PRIMITIVES",
    "ROOTED_PRIMITIVES",
    "OBJECT_PRIMITIVES",
    "REDUCE_OPS",
    "DTYPE_NAMES",
    "SPECS",
    "PrimitiveSpec",
    "RunResult",
    "BackendSupport",
    "run",
    "run_batch",
    "backend_support",
    "teaching_inputs",
    "teaching_value",
    "reference",
]

# ----------------------------------------------------------------------------------------------
# Names

#: Reduce ops, named like ``torch.distributed.ReduceOp`` members (lower case here).
REDUCE_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")

_DTYPE_CANDIDATES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
                     "int64", "bool", "complex64", "complex128", "uint16", "uint32", "uint64",
                     "float8_e4m3fn", "float8_e5m2")
#: Dtype names this torch defines and that :func:`backend_support` tries. Whether a backend
#: accepts each one is detected at run time, not assumed from this list.
DTYPE_NAMES = tuple(n for n in _DTYPE_CANDIDATES if isinstance(getattr(torch, n, None), torch.dtype))

_DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16",
                  "double": "float64", "fp64": "float64", "bf16": "bfloat16", "long": "int64",
                  "int": "int32", "short": "int16", "byte": "uint8", "char": "int8",
                  "cfloat": "complex64", "cdouble": "complex128"}


def dtype_name(dtype) -> str:
    """``torch.float32`` or ``"float32"`` or an alias (``"fp16"``) -> ``"float16"``-style name.

    Raises:
        ValueError: unknown dtype, with the valid names.
    """
    if isinstance(dtype, torch.dtype):
        name = str(dtype).replace("torch.", "")
    elif isinstance(dtype, str):
        name = dtype.strip().lower().replace("torch.", "")
        name = _DTYPE_ALIASES.get(name, name)
    else:
        raise TypeError(f"dtype must be a torch.dtype or its name; got {dtype!r}")
    if name not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_NAMES)}")
    return name


def op_name(op) -> str:
    """``"SUM"``, ``"sum"`` or ``dist.ReduceOp.SUM`` -> ``"sum"``.

    Raises:
        ValueError: unknown op, with the valid names.
    """
    if op is None:
        return "sum"
    if isinstance(op, str):
        name = op.strip().lower()
    elif isinstance(op, (int, float)):  # ReduceOp compares equal to ints: 3 == MIN would slip in
        raise TypeError(f"op must be a name or a torch.distributed.ReduceOp, not the number {op!r}; "
                        f"choose one of {', '.join(REDUCE_OPS)}")
    else:
        name = None
        for n in REDUCE_OPS:
            if op == getattr(dist.ReduceOp, n.upper()):
                name = n
        if name is None:
            raise ValueError(f"unsupported reduce op {op!r}; choose one of {', '.join(REDUCE_OPS)}")
    if name == "prod":
        name = "product"
    if name not in REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; choose one of {', '.join(REDUCE_OPS)}")
    return name


def _is_float(dt: torch.dtype) -> bool:
    return dt.is_floating_point


def _is_complex(dt: torch.dtype) -> bool:
    return dt.is_complex


# ----------------------------------------------------------------------------------------------
# Specs

@dataclass(frozen=True)
class PrimitiveSpec:
    """What one primitive does, as data.

    Attributes:
        name: the primitive's name in :data:`PRIMITIVES` (``torch.distributed`` function name;
            ``send_recv`` is the point-to-point ring shift, see :func:`run`).
        call: the ``torch.distributed`` call(s) a rank makes, as a learner would write them.
        summary: one sentence of semantics.
        kind: ``"tensor"``, ``"object"`` (pickled Python objects) or ``"time"`` (barrier).
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
    kind: str
    reduces: bool
    rooted: bool
    root_name: str | None
    n_in: Callable[[int, int, int], int]
    n_out: Callable[[int, int, int], int]
    sources: Callable[[int, int, int, int], tuple]
    defined: Callable[[int, int, int], bool] = lambda ws, r, root: True


def _ws(ws, r, root):
    return ws


def _one(ws, r, root):
    return 1


def _root_ws(ws, r, root):
    return ws if r == root else 0


def _at_root(ws, r, root):
    return r == root


def _all_ranks_same_chunk(ws, r, root, k):
    return tuple((s, k) for s in range(ws))


def _all_ranks_chunk_r(ws, r, root, k):
    return tuple((s, r) for s in range(ws))


SPECS: dict[str, PrimitiveSpec] = {}


def _spec(**kw):
    SPECS[kw["name"]] = PrimitiveSpec(**kw)


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

_BARRIER_STAGGER_S = 0.030  # well above scheduling jitter of 16 ranks on 2 cores


# ----------------------------------------------------------------------------------------------
# Teaching inputs

def teaching_value(rank: int, chunk: int, world_size: int) -> int:
    """The teaching value of ``rank``'s chunk ``chunk``: ``10*rank + chunk`` (``100*rank + chunk``
    when ``world_size > 10``), so the value tells its origin. Returns a Python int."""
    return (10 if world_size <= 10 else 100) * rank + chunk


def teaching_inputs(primitive: str, world_size: int, root: int = 0) -> list:
    """The per-rank teaching input of ``primitive``: a list (one entry per rank) of lists of chunk
    values (Python ints; strings ``"r{rank}c{chunk}"`` for object primitives). A rank without an
    input buffer (a non-src rank of ``scatter``) has an empty list. ``barrier`` has none: its
    before/after are measured times."""
    spec = _get_spec(primitive)
    out = []
    for r in range(world_size):
        n = spec.n_in(world_size, r, root)
        if spec.kind == "object":
            out.append([f"r{r}c{c}" for c in range(n)])
        elif spec.kind == "time":
            out.append([])
        else:
            out.append([teaching_value(r, c, world_size) for c in range(n)])
    return out


def _get_spec(primitive) -> PrimitiveSpec:
    if not isinstance(primitive, str):
        raise TypeError(f"primitive must be a name (str); got {primitive!r}; choose one of {', '.join(PRIMITIVES)}")
    if primitive not in SPECS:
        raise ValueError(f"unknown primitive {primitive!r}; choose one of {', '.join(PRIMITIVES)}")
    return SPECS[primitive]


def _make_tensor(values, chunk_size, dtype, device=None):
    """Chunk values -> flat tensor of ``len(values) * chunk_size`` elements of ``dtype``
    (made as int64/float64/bool and cast with ``Tensor.to``: integers wrap)."""
    if len(values) == 0:
        return torch.zeros(0, dtype=dtype, device=device)
    if any(isinstance(v, complex) for v in values):
        base = torch.tensor(values, dtype=torch.complex128)
    elif any(isinstance(v, float) for v in values):
        base = torch.tensor(values, dtype=torch.float64)
    else:  # ints (int64) or bools
        base = torch.tensor(values)
    return base.repeat_interleave(chunk_size).to(device=device, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# The rank side: one function per primitive. Each returns (before, after) snapshots.

def _zeros(n, case, device):
    return torch.zeros(n * case["chunk_size"], dtype=getattr(torch, case["dtype"]), device=device)


def _input(rank, case, device):
    return _make_tensor(case["inputs"][rank], case["chunk_size"], getattr(torch, case["dtype"]), device)


def _rop(case):
    return getattr(dist.ReduceOp, case["op"].upper())


# Every rank function takes (rank, world_size, case, device, group) and returns (before, after);
# group=None is the default process group.

def _r_broadcast(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    dist.broadcast(t, src=case["root"], group=g)
    return before, t


def _r_scatter(rank, ws, case, device, g):
    cs, root = case["chunk_size"], case["root"]
    out = _zeros(1, case, device)
    if rank == root:
        full = _input(rank, case, device)
        before = full.clone()
        dist.scatter(out, list(full.split(cs)), src=root, group=g)
    else:
        before = _zeros(0, case, device)
        dist.scatter(out, None, src=root, group=g)
    return before, out


def _r_gather(rank, ws, case, device, g):
    root = case["root"]
    t = _input(rank, case, device)
    before = t.clone()
    if rank == root:
        lst = [_zeros(1, case, device) for _ in range(ws)]
        dist.gather(t, lst, dst=root, group=g)
        return before, torch.cat(lst)
    dist.gather(t, None, dst=root, group=g)
    return before, _zeros(0, case, device)


def _r_reduce(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    dist.reduce(t, dst=case["root"], op=_rop(case), group=g)
    return before, t


def _r_all_gather(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    lst = [_zeros(1, case, device) for _ in range(ws)]
    dist.all_gather(lst, t, group=g)
    return before, torch.cat(lst)


def _r_reduce_scatter(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(1, case, device)
    dist.reduce_scatter(out, list(t.split(case["chunk_size"])), op=_rop(case), group=g)
    return before, out


def _r_all_reduce(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    dist.all_reduce(t, op=_rop(case), group=g)
    return before, t


def _r_all_to_all(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = [_zeros(1, case, device) for _ in range(ws)]
    dist.all_to_all(out, [x.clone() for x in t.split(case["chunk_size"])], group=g)
    return before, torch.cat(out)


def _r_all_to_all_single(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = torch.zeros_like(t)
    dist.all_to_all_single(out, t, group=g)
    return before, out


def _quiet(call, *args, **kwargs):
    # all_gather_into_tensor / reduce_scatter_tensor print a FutureWarning (deprecated in favour
    # of the *_single names) in every rank; the spec's summary says so once instead.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return call(*args, **kwargs)


def _r_all_gather_into_tensor(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(ws, case, device)
    _quiet(dist.all_gather_into_tensor, out, t, group=g)
    return before, out


def _r_all_gather_single(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(ws, case, device)
    dist.all_gather_single(out, t, group=g)
    return before, out


def _r_reduce_scatter_tensor(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(1, case, device)
    _quiet(dist.reduce_scatter_tensor, out, t, op=_rop(case), group=g)
    return before, out


def _r_reduce_scatter_single(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    out = _zeros(1, case, device)
    dist.reduce_scatter_single(out, t, op=_rop(case), group=g)
    return before, out


def _r_broadcast_object_list(rank, ws, case, device, g):
    objs = list(case["inputs"][rank])
    before = list(objs)
    dist.broadcast_object_list(objs, src=case["root"], group=g, device=device)
    return before, objs


def _r_scatter_object_list(rank, ws, case, device, g):
    root = case["root"]
    out = [None]
    before = list(case["inputs"][rank]) if rank == root else []
    dist.scatter_object_list(out, list(before) if rank == root else None, src=root, group=g)
    return before, out


def _r_gather_object(rank, ws, case, device, g):
    root = case["root"]
    obj = case["inputs"][rank][0]
    lst = [None] * ws if rank == root else None
    dist.gather_object(obj, lst, dst=root, group=g)
    return [obj], (lst if rank == root else [])


def _r_all_gather_object(rank, ws, case, device, g):
    obj = case["inputs"][rank][0]
    lst = [None] * ws
    dist.all_gather_object(lst, obj, group=g)
    return [obj], lst


def _r_send_recv(rank, ws, case, device, g):
    t = _input(rank, case, device)
    before = t.clone()
    if ws == 1:  # a ring of one: torch refuses to send to yourself, and nothing has to move
        return before, t.clone()
    out = torch.zeros_like(t)
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % ws, group=g),
           dist.P2POp(dist.irecv, out, (rank - 1) % ws, group=g)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return before, out


def _r_barrier(rank, ws, case, device, g):
    dist.barrier(group=g)  # line everyone up, then arrive staggered
    time.sleep(case.get("stagger_s", _BARRIER_STAGGER_S) * rank)
    arrive = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on this machine
    dist.barrier(group=g)
    leave = time.monotonic()
    return (torch.tensor([arrive], dtype=torch.float64), torch.tensor([leave], dtype=torch.float64))


_RANK_FNS = {name: globals()["_r_" + name] for name in SPECS}


def _device(rank, backend):
    # NCCL: the device the launcher made current (cuda:rank for local ranks, cuda:LOCAL_RANK on
    # ipyparallel engines, see collnb.remote)
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def _pack(x):
    """A tensor as raw bytes + dtype name: plain ``pickle`` cannot load uint16/uint32/uint64/float8
    tensors in torch 2.13 (``UntypedStorage has no attribute 'dtype'``), and the launcher pickles
    results."""
    if isinstance(x, torch.Tensor):
        t = x.detach().to("cpu").contiguous()
        return ("tensor", str(t.dtype).replace("torch.", ""), tuple(t.shape), t.reshape(-1).view(torch.uint8).clone())
    return x


def _unpack(x):
    if isinstance(x, tuple) and len(x) == 4 and x[0] == "tensor":
        _, dname, shape, raw = x
        return raw.view(getattr(torch, dname)).reshape(shape)
    return x


def _rank_cases(rank, world_size, cases, backend):
    """Rank entry of :func:`run_batch`: run every case in order, return [(before, after), ...]."""
    device = _device(rank, backend)
    out = []
    for c in cases:
        before, after = _RANK_FNS[c["primitive"]](rank, world_size, c, device, None)
        out.append((_pack(before), _pack(after)))
    return out


def _rank_probe(rank, world_size, cases, backend):
    """Rank entry of :func:`backend_support`: every case is a trial whose error is caught; returns
    ``None`` (it ran) or ``"ExcType: first line"`` per trial. Trials run on the default group, as
    :func:`run` does (a private ``new_group`` would be faster without the DETAIL checks, but
    creating groups on some ranks of a warm pool desynchronises its later group creation)."""
    device = _device(rank, backend)
    out = []
    for c in cases:
        try:
            _RANK_FNS[c["primitive"]](rank, world_size, c, device, None)
            out.append(None)
        except Exception as exc:  # noqa: BLE001 - any refusal is what we want to record
            first = (str(exc).strip().splitlines() or [""])[0]
            out.append(f"{type(exc).__name__}: {first[:300]}")
    return out


# ----------------------------------------------------------------------------------------------
# Run-time detection of what a backend supports

@dataclass
class BackendSupport:
    """What ``backend`` accepted when every primitive x dtype (x op) was tried on real ranks.

    Attributes:
        backend: ``"gloo"`` or ``"nccl"``.
        torch_version: ``torch.__version__`` of the ranks that were probed.
        world_size: world size of the probe (2, or 1 where only one GPU exists).
        results: ``{(primitive, dtype_name_or_None, op_name_or_None): None | "ExcType: msg"}`` --
            ``None`` where the call ran on every rank, else the error the backend raised.
        seconds: wall time of the probe launch (0 when loaded from disk).
        source: ``"probe"`` (run now) or ``"saved probe (PATH)"``.
    """

    backend: str
    torch_version: str
    world_size: int
    results: dict
    seconds: float = 0.0
    source: str = "probe"

    def primitives(self) -> tuple:
        """Primitives that ran for at least one dtype (and op)."""
        return tuple(p for p in PRIMITIVES if any(k[0] == p and v is None for k, v in self.results.items()))

    def dtypes(self, primitive: str) -> tuple:
        """Dtype names ``primitive`` accepts (with at least one op, if it reduces). Object
        primitives and ``barrier`` take no dtype: ``()``."""
        return tuple(d for d in DTYPE_NAMES
                     if any(k[0] == primitive and k[1] == d and v is None for k, v in self.results.items()))

    def ops(self, primitive: str, dtype) -> tuple:
        """Reduce op names ``primitive`` accepts for ``dtype`` (``()`` if it does not reduce)."""
        d = dtype_name(dtype)
        return tuple(o for o in REDUCE_OPS if self.results.get((primitive, d, o), "missing") is None)

    def supports(self, primitive: str, dtype=None, op=None) -> bool:
        """Whether ``primitive`` ran with that dtype (and op)."""
        spec = _get_spec(primitive)
        if spec.kind in ("object", "time"):
            return self.results.get((primitive, None, None), "missing") is None
        d = dtype_name(dtype)
        o = op_name(op) if spec.reduces else None
        return self.results.get((primitive, d, o), "missing") is None

    def error(self, primitive, dtype=None, op=None) -> str | None:
        """The backend's error for that combination (``None`` if it ran)."""
        spec = _get_spec(primitive)
        d = None if spec.kind in ("object", "time") else dtype_name(dtype)
        o = op_name(op) if spec.reduces else None
        return self.results.get((primitive, d, o))


_support_cache: dict = {}
_support_lock = threading.Lock()


def _disk_key(backend) -> dict:
    """What a saved probe must match: torch's version and binary, this module's source, the backend."""
    import hashlib
    import glob
    tdir = os.path.dirname(torch.__file__)
    libs = sorted(glob.glob(os.path.join(tdir, "lib", "libtorch_cpu*")) + glob.glob(os.path.join(tdir, "_C*.so")))
    stamp = [(os.path.basename(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in libs]
    with open(__file__, "rb") as f:
        src = hashlib.sha256(f.read()).hexdigest()
    return {"torch": torch.__version__, "libs": stamp, "collnb_primitives": src, "backend": backend}


def _disk_path(backend) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "collnb", f"support-{backend}.json")


def _disk_enabled() -> bool:
    return os.environ.get("COLLNB_SUPPORT_CACHE", "1") not in ("0", "", "no", "false")


def _load_disk(backend):
    import json
    try:
        with open(_disk_path(backend)) as f:
            data = json.load(f)
        if data.get("key") != json.loads(json.dumps(_disk_key(backend))):
            return None
        results = {tuple(None if x == "" else x for x in k.split("|")): v for k, v in data["results"].items()}
        return BackendSupport(backend=backend, torch_version=data["key"]["torch"], world_size=data["world_size"],
                              results=results, seconds=0.0, source=f"saved probe ({_disk_path(backend)})")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_disk(sup: BackendSupport):
    import json
    path = _disk_path(sup.backend)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"key": _disk_key(sup.backend), "world_size": sup.world_size,
                       "results": {"|".join(x or "" for x in k): v for k, v in sup.results.items()}}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs a new probe next time


def _probe_trials():
    trials = []
    for p, spec in SPECS.items():
        if spec.kind in ("object", "time"):
            trials.append((p, None, None))
        elif spec.reduces:
            trials += [(p, d, o) for d in DTYPE_NAMES for o in REDUCE_OPS]
        else:
            trials += [(p, d, None) for d in DTYPE_NAMES]
    return trials


def backend_support(backend: str = "gloo", *, refresh: bool = False, **launch_kwargs) -> BackendSupport:
    """Detect, on real ranks of the installed torch, which primitive x dtype x op combinations
    ``backend`` accepts.

    One :func:`collnb.launcher.launch` at world size 2 (1 if only one GPU is visible for NCCL)
    runs every combination once with the teaching inputs (barrier without its stagger), catching
    each trial's error inside the ranks (~840 trials, 1-2 s on 2 CPU cores with the launcher's
    DETAIL checks). The result is cached per process and backend (thread-safe) and saved to
    ``~/.cache/collnb/support-BACKEND.json``, reused only while torch's version and binary and
    this module's source are unchanged (set ``COLLNB_SUPPORT_CACHE=0`` to never use the file).
    ``refresh=True`` probes again.

    Args:
        backend: ``"gloo"`` or ``"nccl"``.
        launch_kwargs: passed to :func:`collnb.launcher.launch` (``timeout``,
            ``collective_timeout``, ``debug``, ``start_method``).

    Returns:
        :class:`BackendSupport`.

    Raises:
        ValueError: unknown backend.
        RuntimeError: the backend cannot run here (the launcher's reason, e.g. NCCL without CUDA).
        collnb.launcher.LaunchError: the probe itself failed.
    """
    info = _launcher.backend_info(backend)
    if not info["available"]:
        raise RuntimeError(f"backend {backend!r} cannot run here: {info['reason']}")
    with _support_lock:
        if not refresh and backend in _support_cache:
            return _support_cache[backend]
    if not refresh and _disk_enabled():
        sup = _load_disk(backend)
        if sup is not None:
            with _support_lock:
                _support_cache[backend] = sup
            return sup
    ws = min(2, info["max_world_size"])
    trials = _probe_trials()
    cases = []
    for p, d, o in trials:
        cases.append(dict(primitive=p, dtype=d or "float32", op=o or "sum", root=0, chunk_size=1,
                          inputs=teaching_inputs(p, ws, 0), stagger_s=0.0))
    t0 = time.perf_counter()
    outcomes = _launcher.launch(_rank_probe, ws, args=(cases, backend), backend=backend, **launch_kwargs)
    seconds = time.perf_counter() - t0
    results = {}
    for i, key in enumerate(trials):
        errs = [o[i] for o in outcomes if o[i] is not None]
        results[key] = errs[0] if errs else None
    sup = BackendSupport(backend=backend, torch_version=torch.__version__, world_size=ws,
                         results=results, seconds=seconds)
    with _support_lock:
        _support_cache[backend] = sup
    if _disk_enabled():
        _save_disk(sup)
    return sup


# ----------------------------------------------------------------------------------------------
# Reference (in the caller, without torch.distributed)

def _fold(op: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if op in ("sum", "avg"):
        return a + b if a.dtype != torch.bool else a | b
    if op == "product":
        return a * b if a.dtype != torch.bool else a & b
    if op == "min":
        return torch.minimum(a, b)
    if op == "max":
        return torch.maximum(a, b)
    if op == "band":
        return a & b
    if op == "bor":
        return a | b
    if op == "bxor":
        return a ^ b
    raise ValueError(op)


def _reduce_seq(op: str, vals: list, n: int) -> torch.Tensor:
    """Fold ``vals`` (same dtype) left to right in their own dtype, as one rank after another
    would; ``avg`` is the sum divided by ``n`` in the same dtype."""
    acc = vals[0].clone()
    for v in vals[1:]:
        acc = _fold(op, acc, v)
    if op == "avg":
        acc = (acc / n).to(acc.dtype)
    return acc


def _f64(t: torch.Tensor) -> torch.Tensor:
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype == torch.bool:
        return t.view(torch.uint8).ne(0).to(torch.float64)
    return t.to(torch.float64)


def _reduce_exact(op: str, vals: list, n: int) -> torch.Tensor:
    """The mathematically exact (float64) op over ``vals``: sums, products, averages in float64;
    bitwise ops in int64 (bool as 0/1), returned as float64."""
    if op in ("band", "bor", "bxor"):
        ints = [v.view(torch.uint8).ne(0).to(torch.int64) if v.dtype == torch.bool else v.to(torch.int64)
                for v in vals]
        return _reduce_seq(op, ints, n).to(torch.float64)
    f = [_f64(v) for v in vals]
    if op == "product" and vals[0].dtype == torch.bool:
        f = [x.ne(0).to(torch.float64) for x in f]
    return _reduce_seq(op, f, n)


def _input_tensors(inputs, dt, chunk_size):
    return [_make_tensor(v, chunk_size, dt).view(-1, chunk_size) if len(v) else None for v in inputs]


def _stack_sources(tensors, sources_r) -> torch.Tensor:
    """``(L, K, chunk_size)``: source ``l`` of output chunk ``k`` (every chunk has L sources)."""
    return torch.stack([torch.stack([tensors[s][j] for (s, j) in srcs]) for srcs in sources_r], dim=1)


def _order_candidates(V: torch.Tensor, op: str, n: int) -> list:
    """The op over the L sources of ``V`` (``(L, K, cs)``) in every order a backend plausibly
    uses: each rotation of the rank ring in both directions (ring algorithms start the
    accumulation at different ranks per chunk) and a pairwise tree (recursive halving). Returns
    flat tensors."""
    L = V.shape[0]
    seqs = [list(range(k, L)) + list(range(k)) for k in range(L)]
    seqs += [list(reversed(o)) for o in seqs]
    out = [_reduce_seq(op, [V[i] for i in o], n).reshape(-1) for o in seqs]
    vals = [V[i] for i in range(L)]
    while len(vals) > 1:
        vals = [_fold(op, vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i]
                for i in range(0, len(vals), 2)]
    tree = vals[0]
    if op == "avg":
        tree = (tree / n).to(tree.dtype)
    out.append(tree.reshape(-1))
    return out


def reference(primitive: str, world_size: int, inputs: list, dtype=torch.float32, op="sum", root=0,
              chunk_size: int = 1) -> tuple:
    """The expected output of every rank, computed here without ``torch.distributed``.

    Args:
        primitive, world_size, dtype, op, root, chunk_size: as for :func:`run`.
        inputs: per-rank lists of chunk values (see :func:`teaching_inputs`).

    Returns:
        ``(expected, expected_f64, defined, sources)``, each a list with one entry per rank:

        * ``expected[r]``: flat tensor of ``dtype`` (``n_out * chunk_size`` elements; a list of
          objects for object primitives), or ``None`` where the output is undefined. Reductions
          fold the ranks' values in rank order *in the run's dtype* with torch's arithmetic
          (int8 SUM wraps: 100+100 -> -56; float16 overflows to inf; bfloat16 rounds; ``avg`` is
          the sum divided by world size in the dtype; bool ``sum`` is logical or, ``product`` and
          ``min`` logical and). A backend may combine floats in another order, so :func:`run`
          also accepts the result of any ring rotation or pairwise tree order, within a relative
          tolerance (see :class:`RunResult`).
        * ``expected_f64[r]``: the mathematically exact result from the same inputs, as float64
          (complex128 for complex dtypes; ``None`` for objects or undefined outputs). Where it
          differs from ``expected`` the dtype changed the answer.
        * ``defined[r]``: bool.
        * ``sources[r]``: per output chunk, the tuple of ``(src_rank, src_chunk)`` it is made from.

    ``barrier`` has no data reference: :func:`run` fills it from measured times.
    """
    spec = _get_spec(primitive)
    op = op_name(op) if spec.reduces else None
    dt = getattr(torch, dtype_name(dtype)) if spec.kind == "tensor" else None
    expected, exact, defined, sources = [], [], [], []
    tensors = _input_tensors(inputs, dt, chunk_size) if spec.kind == "tensor" else None
    cache = {}
    for r in range(world_size):
        d = bool(spec.defined(world_size, r, root))
        defined.append(d)
        n = spec.n_out(world_size, r, root)
        src = [spec.sources(world_size, r, root, k) for k in range(n)]
        sources.append(src)
        if not d or spec.kind == "time":
            expected.append(None)
            exact.append(None)
            continue
        if spec.kind == "object":
            expected.append([inputs[s][j] for ((s, j),) in src])
            exact.append(None)
            continue
        if not src:
            expected.append(torch.zeros(0, dtype=dt))
            exact.append(torch.zeros(0, dtype=torch.float64))
            continue
        key = tuple(src)
        if key not in cache:
            V = _stack_sources(tensors, src)
            if spec.reduces:
                vals = list(V)
                cache[key] = (_reduce_seq(op, vals, world_size).reshape(-1),
                              _reduce_exact(op, vals, world_size).reshape(-1))
            else:
                cache[key] = (V[0].reshape(-1).clone(), _f64(V[0]).reshape(-1))
        e, x = cache[key]
        expected.append(e.clone())
        exact.append(x.clone())
    return expected, exact, defined, sources


def _canon(t: torch.Tensor) -> torch.Tensor:
    # Gloo's bool SUM leaves byte 2 in a bool tensor (True + True); compare truth values.
    return t.view(torch.uint8).ne(0) if t.dtype == torch.bool else t


def _tolerance(spec: PrimitiveSpec, dtype: torch.dtype | None, op: str | None, world_size: int) -> float:
    if spec.reduces and dtype is not None and (dtype.is_floating_point or dtype.is_complex) \
            and op in ("sum", "avg", "product"):
        real = torch.empty(0, dtype=dtype).real.dtype if dtype.is_complex else dtype
        return world_size * torch.finfo(real).eps
    return 0.0


def _chunk_mismatch(after, expected, chunk_size, rtol, kind, alternatives=None) -> list:
    """Per output chunk: True where ``after`` differs from ``expected`` (and, if given, from every
    tensor ``alternatives()`` returns: other accumulation orders of a floating reduction)."""
    if kind == "object":
        n = max(len(after), len(expected))
        return [k >= len(after) or k >= len(expected) or after[k] != expected[k] for k in range(n)]
    if after.numel() != expected.numel():
        n = max(after.numel(), expected.numel()) // chunk_size
        return [True] * n
    if kind == "time":
        bad = after < expected
    else:
        a, e = _canon(after), _canon(expected)
        if a.dtype.is_floating_point or a.dtype.is_complex:
            a64 = _f64(a)
            bad = ~torch.isclose(a64, _f64(e), rtol=rtol, atol=0.0, equal_nan=True)
            if alternatives is not None and bool(bad.any()):
                for alt in alternatives():
                    bad &= ~torch.isclose(a64, _f64(alt), rtol=rtol, atol=0.0, equal_nan=True)
        else:
            bad = a != e
    return bad.view(-1, chunk_size).any(dim=1).tolist()


def _alternatives_fn(spec, inputs, sources_r, dt, op, world_size, chunk_size):
    """For a floating reduction, a function returning the other-order candidates of one rank."""
    if not (spec.reduces and dt is not None and (dt.is_floating_point or dt.is_complex)
            and op in ("sum", "product", "avg") and sources_r):
        return None

    def alternatives():
        V = _stack_sources(_input_tensors(inputs, dt, chunk_size), sources_r)
        return _order_candidates(V, op, world_size)
    return alternatives


# ----------------------------------------------------------------------------------------------
# The result


@dataclass
class RunResult:
    """One primitive run on real ranks, its reference and its verdict.

    Per-rank lists have ``world_size`` entries, in rank order. Tensors are flat CPU tensors of
    ``n_chunks * chunk_size`` elements of the run's dtype (``n_chunks`` can differ per rank and
    between before/after, e.g. ``scatter``: the src rank's input has ``world_size`` chunks, the
    others' none; every output has one). :meth:`chunks` reshapes them to ``(n_chunks, chunk_size)``.
    Object primitives hold lists of Python objects. ``barrier`` holds float64 milliseconds.

    Attributes:
        primitive: name (see :data:`PRIMITIVES`).
        world_size, backend, chunk_size: as run.
        dtype: ``torch.dtype`` of the buffers (``None`` for object primitives; ``torch.float64``
            milliseconds for ``barrier``).
        op: reduce op name for reducing primitives, else ``None``.
        root: the src/dst rank for rooted primitives, else ``None``.
        before: each rank's input buffer, copied (``clone``) before the collective.
        after: each rank's output buffer after it (for in-place primitives the same buffer; for
            an undefined output what the buffer happens to hold; ``[]``/empty where a rank has
            no output buffer, e.g. a non-dst rank of ``gather``).
        expected: reference output per rank in the run's dtype (``None`` where undefined); see
            :func:`reference`. For ``barrier``: the last arrival time (nobody may leave earlier).
        expected_f64: exact float64 result per rank (``None`` for objects/undefined/barrier).
        defined: whether the primitive defines each rank's output.
        sources: per rank, per output chunk, the ``(src_rank, src_chunk)`` pairs it came from.
        mismatch: per rank, per output chunk, True where ``after`` differs from ``expected``
            (``None`` where undefined). Integers, bool (truth value), min/max and plain copies
            must match exactly; floating/complex sum, product and avg within a relative
            ``tolerance`` of ``world_size * finfo(dtype).eps`` (the rounding bound of adding
            ``world_size`` positive terms in any order); ``barrier``: departure >= last arrival.
        tolerance: that relative tolerance (0.0 = exact).
        ok: True when no defined chunk mismatches.
        seconds: wall time of the launch (s).
    """

    primitive: str
    world_size: int
    dtype: torch.dtype | None
    op: str | None
    root: int | None
    backend: str
    chunk_size: int
    before: list
    after: list
    expected: list
    expected_f64: list
    defined: list
    sources: list
    mismatch: list
    tolerance: float
    ok: bool
    seconds: float = 0.0
    inputs: list = field(default_factory=list, repr=False)

    @property
    def spec(self) -> PrimitiveSpec:
        return SPECS[self.primitive]

    def chunks(self, which: str = "after") -> list:
        """``which`` in ``"before"``, ``"after"``, ``"expected"``, ``"expected_f64"`` -> per rank
        a ``(n_chunks, chunk_size)`` tensor (or list of objects; ``None`` where undefined)."""
        data = getattr(self, which)
        out = []
        for t in data:
            if isinstance(t, torch.Tensor):
                out.append(t.view(-1, self.chunk_size))
            else:
                out.append(t)
        return out

    def title(self) -> str:
        """E.g. ``"all_reduce (SUM) · world size 4 · float32 · gloo"``."""
        parts = [self.primitive + (f" ({self.op.upper()})" if self.op else "")]
        if self.root is not None:
            parts.append(f"{self.spec.root_name}={self.root}")
        parts.append(f"world size {self.world_size}")
        if self.spec.kind == "tensor":
            parts.append(str(self.dtype).replace("torch.", ""))
        elif self.spec.kind == "object":
            parts.append("Python objects")
        parts.append(self.backend)
        return " · ".join(parts)

    def check(self) -> bool:
        """Recompare ``after`` with ``expected`` (e.g. after editing ``after`` to see what a wrong
        result looks like); updates ``mismatch`` and ``ok`` and returns ``ok``."""
        spec = self.spec
        self.mismatch = [
            None if not d else
            _chunk_mismatch(a, e, self.chunk_size, self.tolerance, spec.kind,
                            _alternatives_fn(spec, self.inputs, src, self.dtype if spec.kind == "tensor" else None,
                                             self.op, self.world_size, self.chunk_size))
            for a, e, d, src in zip(self.after, self.expected, self.defined, self.sources)]
        self.ok = all(not any(m) for m in self.mismatch if m is not None)
        return self.ok

    def n_mismatches(self) -> int:
        return sum(sum(bool(x) for x in m) for m, d in zip(self.mismatch, self.defined) if d and m)

    def summary(self) -> str:
        """Plain-text before/after per rank (the seeds' ``[rank r] before: [...]`` format)."""
        lines = [self.title()]
        for r in range(self.world_size):
            lines.append(f"[rank {r}] before: {_as_list(self.before[r], self)}")
        for r in range(self.world_size):
            lines.append(f"[rank {r}] after : {_as_list(self.after[r], self)}  {self._verdict(r)}")
        for r in range(self.world_size):
            x = self.expected_f64[r]
            a = self.after[r]
            if x is None or not self.defined[r] or not isinstance(a, torch.Tensor) or a.numel() != x.numel():
                continue
            a64 = _f64(_canon(a)) if a.dtype != torch.bool else _canon(a).to(torch.float64)
            if not bool(torch.isclose(a64, x.to(a64.dtype), rtol=0, atol=0, equal_nan=True).all()):
                lines.append(f"[rank {r}] exact : {x.tolist()}  (float64 result of the same inputs: "
                             f"{str(self.dtype).replace('torch.', '')} changed it)")
        lines.append(("✓ every defined output matches the reference" if self.ok else
                      f"✗ {self.n_mismatches()} chunk(s) differ from the reference"))
        return "\n".join(lines)

    def _verdict(self, r) -> str:
        if not self.defined[r]:
            who = f"{self.spec.root_name}={self.root}" if self.root is not None else "the root"
            return f"(undefined: only {who}'s output is defined)"
        if any(self.mismatch[r]):
            return f"✗ expected {_as_list(self.expected[r], self)}"
        return "✓"

    def __repr__(self):
        return (f"RunResult({self.title()}, ok={self.ok}, "
                f"{self.n_mismatches()} mismatching chunk(s), {self.seconds * 1000:.0f} ms)")

    # -- display ---------------------------------------------------------------------------------
    def figure(self, **kwargs):
        """The before | after heatmap as a :class:`matplotlib.figure.Figure`
        (:func:`collnb.heatmap.heatmap_figure`)."""
        from ..views import heatmap_figure
        return heatmap_figure(self, **kwargs)

    def png(self, **kwargs) -> bytes:
        """The heatmap as PNG bytes (:func:`collnb.heatmap.heatmap_png`)."""
        from ..views import heatmap_png
        return heatmap_png(self, **kwargs)

    def save(self, path, **kwargs) -> None:
        """Write the heatmap PNG to ``path``."""
        with open(path, "wb") as f:
            f.write(self.png(**kwargs))

    def _repr_png_(self):
        return self.png()

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"image/png": self.png(), "text/plain": self.summary()}


def _as_list(t, result):
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bool:
            return t.view(torch.uint8).ne(0).tolist()
        if result.spec.kind == "time":
            return [round(x, 1) for x in t.tolist()]
        try:
            return t.tolist()
        except (TypeError, RuntimeError):  # float8 and friends have no Python scalar type
            return t.to(torch.float32).tolist()
    return list(t)


# ----------------------------------------------------------------------------------------------
# run / run_batch


def _normalise_inputs(inputs, spec, world_size, root):
    if inputs is None:
        return teaching_inputs(spec.name, world_size, root)
    if spec.kind == "time":
        raise ValueError("barrier takes no inputs: it measures when each rank arrives and leaves")
    want = [spec.n_in(world_size, r, root) for r in range(world_size)]
    shape_msg = (f"{spec.name} at world size {world_size} needs one list per rank with "
                 f"{want} chunk values (rank r's list has want[r] values), or a callable f(rank, chunk)")
    if callable(inputs):
        table = [[inputs(r, c) for c in range(want[r])] for r in range(world_size)]
    else:
        try:
            table = [list(row) for row in inputs]
        except TypeError:
            raise TypeError(f"inputs must be a list of lists or a callable; got {type(inputs).__name__}. "
                            f"{shape_msg}") from None
    if len(table) != world_size:
        raise ValueError(f"inputs has {len(table)} rows; {shape_msg}")
    for r, row in enumerate(table):
        if want[r] == 0:
            table[r] = []
            continue
        if len(row) != want[r]:
            raise ValueError(f"inputs[{r}] has {len(row)} values; {shape_msg}")
        if spec.kind == "tensor":
            for c, v in enumerate(row):
                row[c] = v = _plain_number(v)
                if not isinstance(v, (bool, int, float, complex)):
                    raise ValueError(f"inputs[{r}] holds {v!r}; tensor primitives take numbers "
                                     f"(Python or numpy ints, floats, complex numbers, bools)")
            table[r] = row
    return table


def _plain_number(v):
    """A numpy scalar as the Python number it holds (np.int64 -> int ...); anything else as is."""
    if isinstance(v, (bool, int, float, complex)):
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, numbers.Complex):
        return complex(v)
    return v


def op_hint(op: str, dtype: str) -> str:
    """Why a reduce op may not fit a dtype, as a sentence with a leading space ("" when there is
    no general reason): AVG needs a floating-point dtype, bitwise ops an integer or bool one."""
    dt = getattr(torch, dtype_name(dtype))
    if op == "avg" and not (dt.is_floating_point or dt.is_complex):
        return " AVG divides by the world size, so it needs a floating-point dtype."
    if op in ("band", "bor", "bxor"):
        return " Bitwise ops need an integer or bool dtype."
    return ""


def _check_input_values(table, dname):
    """Refuse, before launch, inputs the ranks could not build as documented in
    :func:`_make_tensor`: complex numbers for a real dtype (the imaginary part would be dropped),
    floats for an integer dtype, integers outside int64 (integer inputs are made as int64, then
    cast: they wrap into the dtype, as overflow while the ranks combine them does)."""
    dt = getattr(torch, dname)
    lo, hi = -(1 << 63), (1 << 63) - 1
    for r, row in enumerate(table):
        for v in row:
            if isinstance(v, complex) and not dt.is_complex:
                raise ValueError(f"inputs[{r}] holds the complex number {v!r} but dtype {dname} is not complex; "
                                 f"use complex64/complex128 or give real numbers")
            if isinstance(v, float) and not (dt.is_floating_point or dt.is_complex):
                raise ValueError(f"inputs hold floats but dtype {dname} is not floating point; give integers")
            if isinstance(v, int) and not isinstance(v, bool) and not lo <= v <= hi:
                raise ValueError(f"inputs[{r}] holds {v}, outside int64 ({lo}..{hi}): integer inputs are made "
                                 f"as int64 and then cast to {dname}; give a smaller integer"
                                 + (f", or a float such as {float(v):.3g}" if dt.is_floating_point else ""))


def _prepare(primitive, world_size, dtype, op, root, backend, chunk_size, inputs, support_getter):
    """Validate one request before anything is launched; returns the case dict."""
    spec = _get_spec(primitive)
    if backend not in _launcher.BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(_launcher.BACKENDS)}")
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int from 1 to {_launcher.MAX_WORLD_SIZE}; got {world_size!r}")
    if not 1 <= world_size <= _launcher.MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be between 1 and {_launcher.MAX_WORLD_SIZE}; got {world_size}")
    if isinstance(root, bool) or not isinstance(root, int):
        raise TypeError(f"root must be an int rank from 0 to world_size-1; got {root!r}")
    if not 0 <= root < world_size:
        raise ValueError(f"root {root} is not a rank at world size {world_size}; choose a root "
                         f"from 0 to {world_size - 1}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not 1 <= chunk_size <= 1 << 22:
        raise ValueError(f"chunk_size must be an int from 1 to {1 << 22} (elements per chunk); got {chunk_size!r}")
    opn = op_name(op)
    if not spec.reduces and opn != "sum":
        raise ValueError(f"{primitive} does not combine values, so it takes no reduce op (got op={op!r}); "
                         f"ops apply to {', '.join(REDUCING_PRIMITIVES)}")
    dname = dtype_name(dtype if dtype is not None else torch.float32)
    info = _launcher.backend_info(backend)
    if not info["available"]:
        raise RuntimeError(f"backend {backend!r} cannot run here: {info['reason']}")
    if world_size > info["max_world_size"]:
        raise ValueError(f"world_size {world_size} is more than backend {backend!r} can run here "
                         f"({info['max_world_size']}); use a smaller world size or backend='gloo'")
    table = _normalise_inputs(inputs, spec, world_size, root)
    if spec.kind == "tensor":
        sup = support_getter()
        if not sup.supports(primitive, dname, opn if spec.reduces else None):
            valid_d = sup.dtypes(primitive)
            if dname not in valid_d:
                err = sup.error(primitive, dname, opn if spec.reduces else None)
                raise ValueError(
                    f"{backend} cannot run {primitive} on {dname} tensors (detected on real ranks, torch "
                    f"{sup.torch_version}: {err}); dtypes {primitive} accepts on {backend}: {', '.join(valid_d)}")
            valid_o = sup.ops(primitive, dname)
            raise ValueError(
                f"{backend} cannot reduce {dname} with op {opn.upper()} in {primitive} (detected on real ranks, "
                f"torch {sup.torch_version}: {sup.error(primitive, dname, opn)}).{op_hint(opn, dname)} "
                f"Valid ops for {dname}: {', '.join(o.upper() for o in valid_o)}")
        _check_input_values(table, dname)
    elif spec.kind == "object":
        sup = support_getter()
        if not sup.supports(primitive):
            raise ValueError(f"{backend} cannot run {primitive} here (detected: {sup.error(primitive)})")
    return dict(primitive=primitive, dtype=dname, op=opn, root=root, chunk_size=chunk_size,
                inputs=table)


def _finish(case, world_size, backend, before, after, seconds) -> RunResult:
    spec = SPECS[case["primitive"]]
    cs, root, op = case["chunk_size"], case["root"], case["op"]
    dt = getattr(torch, case["dtype"])
    if spec.kind == "time":
        t0 = min(float(b[0]) for b in before)
        before = [(b - t0) * 1000.0 for b in before]
        after = [(a - t0) * 1000.0 for a in after]
        last = max(float(b[0]) for b in before)
        expected = [torch.tensor([last], dtype=torch.float64) for _ in range(world_size)]
        exact = [None] * world_size
        defined = [True] * world_size
        sources = [[spec.sources(world_size, r, root, 0)] for r in range(world_size)]
        rtol = 0.0
    else:
        expected, exact, defined, sources = reference(case["primitive"], world_size, case["inputs"], dt,
                                                      op, root, cs)
        rtol = _tolerance(spec, dt if spec.kind == "tensor" else None, op if spec.reduces else None,
                          world_size)
    result = RunResult(
        primitive=case["primitive"], world_size=world_size,
        dtype=(dt if spec.kind == "tensor" else (torch.float64 if spec.kind == "time" else None)),
        op=op if spec.reduces else None, root=root if spec.rooted else None, backend=backend,
        chunk_size=cs, before=list(before), after=list(after), expected=expected, expected_f64=exact,
        defined=defined, sources=sources, mismatch=[], tolerance=rtol, ok=False, seconds=seconds,
        inputs=case["inputs"])
    result.check()
    return result


def run_batch(configs: Sequence[dict], world_size: int = 4, backend: str = "gloo",
              **launch_kwargs) -> list:
    """Run several primitives at one world size in ONE launch (they run one after another on the
    same ranks). Each config is a dict of :func:`run` keyword arguments (``primitive`` required;
    ``dtype``, ``op``, ``root``, ``chunk_size``, ``inputs`` optional). Every config is validated
    before anything is launched.

    Returns:
        list of :class:`RunResult`, one per config, in order (``seconds`` is the shared launch time).

    Raises:
        as :func:`run`.
    """
    support = None

    def get_support():
        nonlocal support
        if support is None:
            support = backend_support(backend, **launch_kwargs)
        return support

    cases = []
    for cfg in configs:
        if not isinstance(cfg, dict):
            raise TypeError(f"run_batch takes a list of dicts such as {{'primitive': 'all_reduce', 'dtype': 'int8'}}; "
                            f"got {cfg!r} in the list")
        cfg = dict(cfg)
        try:
            primitive = cfg.pop("primitive")
        except KeyError:
            raise ValueError(f"each config needs a 'primitive' key; got {cfg!r}") from None
        unknown = set(cfg) - {"dtype", "op", "root", "chunk_size", "inputs"}
        if unknown:
            raise TypeError(f"unknown config keys {sorted(unknown)}; use dtype, op, root, chunk_size, inputs")
        cases.append(_prepare(primitive, world_size, cfg.get("dtype", torch.float32), cfg.get("op", "sum"),
                              cfg.get("root", 0), backend, cfg.get("chunk_size", 1), cfg.get("inputs"),
                              get_support))
    if not cases:
        return []
    t0 = time.perf_counter()
    per_rank = _launcher.launch(_rank_cases, world_size, args=(cases, backend), backend=backend,
                                **launch_kwargs)
    seconds = time.perf_counter() - t0
    results = []
    for i, case in enumerate(cases):
        before = [_unpack(per_rank[r][i][0]) for r in range(world_size)]
        after = [_unpack(per_rank[r][i][1]) for r in range(world_size)]
        results.append(_finish(case, world_size, backend, before, after, seconds))
    return results


def run(primitive: str, world_size: int = 4, dtype=torch.float32, op="sum", root: int = 0,
        backend: str = "gloo", chunk_size: int = 1, inputs=None, **launch_kwargs) -> RunResult:
    """Run one primitive on ``world_size`` real ranks and check it against the reference.

    Each rank builds its own teaching input (rank ``r``, chunk ``c`` holds ``10*r + c``; see the
    module docstring), copies it (``before``), makes the one ``torch.distributed`` call of
    :data:`SPECS` ``[primitive].call`` and returns its buffers (``after``); everything happens in
    a single :func:`collnb.launcher.launch`.

    Args:
        primitive: one of :data:`PRIMITIVES`. ``send_recv`` is a ring shift: every rank sends its
            buffer to ``(rank+1) % world_size`` and receives from ``(rank-1) % world_size`` with
            ``batch_isend_irecv`` (nothing moves at world size 1). ``barrier``: rank ``r``
            arrives ``30*r`` ms late; before/after are arrival/departure times in ms.
        world_size: 1..16 (for NCCL at most the visible GPU count).
        dtype: ``torch.dtype`` or its name (``"float16"``, aliases ``"fp16"``/``"half"``...).
            Ignored by the object primitives (they send strings) and ``barrier``.
        op: reduce op name (``"sum"``, ``"product"``, ``"min"``, ``"max"``, ``"avg"``, ``"band"``,
            ``"bor"``, ``"bxor"``) or a ``dist.ReduceOp``; only the reducing primitives take one.
        root: the ``src``/``dst`` rank of rooted primitives (0..world_size-1; checked for every
            primitive, used only by rooted ones).
        backend: ``"gloo"`` or ``"nccl"``.
        chunk_size: elements per chunk (every element of a chunk holds the chunk's value).
        inputs: optional own values instead of the teaching inputs: per rank a list of chunk
            values (as many as :func:`teaching_inputs` gives that rank), or a callable
            ``f(rank, chunk) -> number`` (e.g. ``lambda r, c: 100`` to see int8 SUM wrap).
        launch_kwargs: passed to :func:`collnb.launcher.launch` (``timeout`` s,
            ``collective_timeout`` s, ``debug``, ``start_method``).

    Returns:
        :class:`RunResult` (displays as its heatmap in a notebook).

    Raises:
        ValueError: before anything is launched, for an unknown primitive/dtype/op/backend, a
            world size outside 1..16, a root outside 0..world_size-1, an op given to a primitive
            that does not reduce, or a dtype/op combination the backend refused when probed
            (e.g. Gloo: AVG on integer dtypes, BAND/BOR/BXOR on floats, float8 and int16
            dtypes) -- the message lists the valid choices.
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA), with the reason.
        collnb.launcher.RankError / LaunchTimeout: a rank failed or the launch timed out.
    """
    cfg = dict(primitive=primitive, dtype=dtype, op=op, root=root, chunk_size=chunk_size, inputs=inputs)
    return run_batch([cfg], world_size, backend, **launch_kwargs)[0]
