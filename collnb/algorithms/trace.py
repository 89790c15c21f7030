"""The trace of one collective algorithm run: every round's transfers and every rank's buffer.

A :class:`Trace` is plain data (numpy arrays, ints, strings, lists) so it can be saved on one
machine (a GPU box, a cluster) and replayed on another (:meth:`Trace.save`, :meth:`Trace.load`,
JSON or ``.npz``). It is made by :func:`collnb.run_algorithm` and drawn by
:func:`collnb.replay` (``collnb.replay(trace)``).

Layout. Every rank's buffer is a row of ``n_chunks`` chunks (``chunk_bounds`` gives their element
offsets). Round ``k`` (1-based) moves data; index 0 of the per-round arrays is the state before
the first round, index ``k`` the state after round ``k``:

* ``buffers[k, r, :]``: rank ``r``'s buffer after round ``k`` (``None`` when recorded with
  ``snapshots=False``; ``final`` is always kept);
* ``provenance[k, r, c]``: int bitmask, bit ``s`` set = chunk ``c`` of rank ``r`` holds rank
  ``s``'s contribution (``0`` = holds nothing yet). :meth:`provenance_sets` gives Python sets;
* ``rounds[k-1].transfers``: who sent which chunks to whom, and how many bytes (the schedule's
  own :class:`~collnb.algorithms.rounds.Transfer`, with ``nbytes`` filled in).

This module imports no torch: loading, checking and reading a trace need only numpy (only
:meth:`Trace.from_schedule`, which takes the ranks' tensors, looks torch up).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

import numpy as np
from numpy.typing import NDArray

from ..collectives import REDUCING_PRIMITIVES, ROOTED_PRIMITIVES
from ..i18n import _
from ..vocabulary import DTYPE_NAMES, REDUCE_OPS, check_choice, check_int, check_rank, check_world_size
from .reading import as_float, as_int, as_mapping
from .rounds import Transfer
from .schedules import ALGORITHMS, TIERED_ALGORITHMS
from .tiers import tier_of
from .trace_file import (ARRAYS as _ARRAYS, ITEMSIZE, TRACE_FORMAT_VERSION, Numbers, RoundDict, SavedTrace,
                         TraceMeta, array_from_json, array_to_json, check_version, checked_meta, numeric, read_json,
                         read_npz, shape_of_arrays)

if TYPE_CHECKING:
    import torch

    from .rounds import Schedule

__all__ = ["Trace", "RoundRecord", "TRACE_FORMAT_VERSION"]



@dataclass
class RoundRecord:
    """One round as it ran: its index (1-based), phase label, one-sentence detail, transfers
    (:class:`~collnb.algorithms.rounds.Transfer`, each with ``nbytes``), and the measured wall
    time (seconds, max over ranks; ``None`` if unknown)."""

    index: int
    label: str
    detail: str
    transfers: list[Transfer]
    seconds: float | None = None

    def to_dict(self) -> RoundDict:
        """The round as saved in a trace file (transfers as :meth:`Transfer.to_dict`)."""
        return RoundDict(index=self.index, label=self.label, detail=str(self.detail), seconds=self.seconds,
                         transfers=[t.to_dict() for t in self.transfers])

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> "RoundRecord":
        """Inverse of :meth:`to_dict` (a file's values are converted, ``detail`` and ``seconds`` may be
        missing); raises KeyError/TypeError/ValueError for a damaged round."""
        transfers, seconds = d["transfers"], d.get("seconds")
        if not isinstance(transfers, list):
            raise TypeError(f"a round's transfers must be a list; got {transfers!r}")
        return cls(as_int(d["index"]), str(d["label"]), str(d.get("detail", "")),
                   [Transfer.from_dict(as_mapping(t, "a transfer")) for t in transfers],
                   None if seconds is None else as_float(seconds))


def _np_dtype_for(torch_dtype_name: str) -> type[np.generic]:
    """numpy dtype that holds values of a torch dtype exactly (bfloat16 -> float32)."""
    table: dict[str, type[np.generic]] = {
        "float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.float32,
        "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
        "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
        "complex64": np.complex64, "complex128": np.complex128}
    return table.get(torch_dtype_name, np.float64)


@overload
def _to_numpy(t: None, dtype_name: str) -> None: ...
@overload
def _to_numpy(t: torch.Tensor | Numbers, dtype_name: str) -> Numbers: ...
def _to_numpy(t: torch.Tensor | Numbers | None, dtype_name: str) -> Numbers | None:
    """A rank's tensor as the numpy array a trace keeps (:func:`_np_dtype_for`; an array as it is)."""
    if t is None:
        return None
    if isinstance(t, np.ndarray):
        return t
    import torch  # noqa: PLC0415 - only when building from tensors
    if t.dtype == torch.bool:
        t = t.view(torch.uint8).ne(0)  # gloo's bool SUM can leave byte 2 in a bool tensor
    elif t.dtype == torch.bfloat16 or (t.dtype.is_floating_point and t.dtype.itemsize == 1):
        t = t.to(torch.float32)
    return t.detach().cpu().numpy().astype(_np_dtype_for(dtype_name), copy=False)




@dataclass
class Trace:
    """Everything one algorithm run did, round by round, as plain data.

    Attributes:
        primitive, algorithm: names (e.g. ``"all_reduce"``, ``"ring"``).
        world_size: number of ranks.
        root: src/dst rank of rooted primitives (0 otherwise).
        op: reduce op name (``"sum"`` ...), ``None`` for primitives that do not reduce.
        dtype: torch dtype name (``"float32"``); arrays hold it as the nearest exact numpy dtype
            (bfloat16 as float32).
        itemsize: bytes per element in the run's dtype.
        chunk_bounds: ``n_chunks + 1`` element offsets of the chunks in every buffer.
        rounds: list of :class:`RoundRecord`.
        inputs: ``(world_size, count)`` each rank's input (for all_to_all: its send buffer).
        buffers: ``(n_rounds + 1, world_size, count)`` buffers after each round, or ``None``.
        final: ``(world_size, count)`` the buffers after the last round.
        builtin: ``(world_size, count)`` the built-in ``torch.distributed`` collective's result on
            the same inputs, laid out the same way (``None`` if not compared).
        provenance: ``(n_rounds + 1, world_size, n_chunks)`` int64 bitmasks (see module doc).
        defined: ``(world_size, n_chunks)`` bool: chunks that hold the primitive's result.
        meta: dict: ``backend``, ``torch_version``, ``host``, ``cpu_count``, ``created`` (ISO time),
            ``wall_seconds``, ``fold`` ([p, q]: power of two used and ranks folded),
            ``snapshots`` (bool).
    """

    primitive: str
    algorithm: str
    world_size: int
    root: int
    op: str | None
    dtype: str
    itemsize: int
    chunk_bounds: list[int]
    rounds: list[RoundRecord]
    inputs: Numbers
    buffers: Numbers | None
    final: Numbers
    builtin: Numbers | None
    provenance: NDArray[np.int64]
    defined: NDArray[np.bool_]
    meta: TraceMeta = field(default_factory=lambda: TraceMeta())

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_schedule(cls, sched: Schedule, *, inputs: torch.Tensor | Numbers, bounds: Sequence[int], op: str | None,
                      dtype: torch.dtype, final: torch.Tensor | Numbers, buffers: torch.Tensor | Numbers | None = None,
                      builtin: torch.Tensor | Numbers | None = None, round_seconds: Sequence[float] | None = None,
                      backend: str = "gloo", wall_seconds: float | None = None) -> "Trace":
        """Build a trace from a :class:`collnb.algorithms.Schedule` and the ranks' tensors.

        Args:
            sched: the schedule that ran.
            inputs: ``(world_size, count)`` tensor. bounds: chunk offsets. op: op name.
            dtype: torch.dtype. buffers: ``(rounds+1, world_size, count)`` tensor or None.
            final, builtin: ``(world_size, count)`` tensors (builtin may be None).
            round_seconds: per-round measured seconds (max over ranks) or None.
        """
        import torch  # noqa: PLC0415
        dname = str(dtype).replace("torch.", "")
        itemsize = torch.empty(0, dtype=dtype).element_size()
        rounds = []
        for k, rnd in enumerate(sched.rounds, 1):
            ts = [dataclasses.replace(t, nbytes=int(sum(bounds[c + 1] - bounds[c] for c in t.chunks) * itemsize))
                  for t in rnd.transfers]
            rounds.append(RoundRecord(k, rnd.label, rnd.detail, ts,
                                      None if round_seconds is None else float(round_seconds[k - 1])))
        reducing = sched.primitive in REDUCING_PRIMITIVES
        meta = TraceMeta(backend=backend, torch_version=torch.__version__, host=platform.node(),
                         cpu_count=os.cpu_count(),
                         created=datetime.datetime.now().isoformat(timespec="seconds"), wall_seconds=wall_seconds,
                         fold=list(sched.fold), snapshots=buffers is not None)
        if sched.ranks_per_node is not None:
            meta["ranks_per_node"] = int(sched.ranks_per_node)
        return cls(primitive=sched.primitive, algorithm=sched.algorithm, world_size=sched.world_size,
                   root=sched.root, op=op if reducing else None, dtype=dname, itemsize=int(itemsize),
                   chunk_bounds=[int(b) for b in bounds], rounds=rounds,
                   inputs=_to_numpy(inputs, dname), buffers=_to_numpy(buffers, dname),
                   final=_to_numpy(final, dname), builtin=_to_numpy(builtin, dname),
                   provenance=np.array(sched.provenance, dtype=np.int64),
                   defined=np.array(sched.defined, dtype=bool), meta=meta)

    # ------------------------------------------------------------------ basic shape
    @property
    def n_rounds(self) -> int:
        """Number of communication rounds."""
        return len(self.rounds)

    @property
    def n_chunks(self) -> int:
        return len(self.chunk_bounds) - 1

    @property
    def count(self) -> int:
        """Elements per rank buffer."""
        return int(self.chunk_bounds[-1])

    @property
    def nbytes(self) -> int:
        """Bytes of one rank's buffer."""
        return self.count * self.itemsize

    @property
    def has_snapshots(self) -> bool:
        return self.buffers is not None

    @property
    def ranks_per_node(self) -> int | None:
        """The node map the run had (rank ``r`` on node ``r // ranks_per_node``), or ``None``."""
        v = self.meta.get("ranks_per_node")
        return None if v is None else int(v)

    def tier(self, transfer: Transfer) -> str:
        """``"intra"`` or ``"inter"``: the tier ``transfer`` crosses under this trace's node map
        (:func:`collnb.algorithms.tiers.tier_of`; ``"intra"`` for every transfer without one)."""
        return tier_of(transfer.src, transfer.dst, self.ranks_per_node)

    def check_round(self, k: int) -> int:
        """Check a round index (0 = the start, ``1..n_rounds`` after that round) and return it.

        Raises:
            TypeError: not an int (:func:`collnb.vocabulary.check_int`'s words).
            ValueError: outside ``0..n_rounds``, with the same words.
        """
        return check_int("round", k, 0, self.n_rounds, what="0 is the start")

    def transfers(self, k: int) -> list[Transfer]:
        """Transfers of round ``k`` (1..n_rounds); round 0 (the start) has none."""
        k = self.check_round(k)
        return [] if k == 0 else list(self.rounds[k - 1].transfers)

    def label(self, k: int) -> str:
        """Phase label of round ``k`` (``"start"`` for 0)."""
        k = self.check_round(k)
        return "start" if k == 0 else self.rounds[k - 1].label

    # ------------------------------------------------------------------ data per round
    def buffer(self, k: int) -> Numbers:
        """``(world_size, count)`` buffers after round ``k``.

        Raises:
            ValueError: the run was recorded without snapshots (only round 0 = ``inputs`` layout
                and the last round = ``final`` are available then).
        """
        k = self.check_round(k)
        if self.buffers is not None:
            after: Numbers = self.buffers[k]
            return after
        if k == self.n_rounds:
            return self.final
        raise ValueError(_("this trace was recorded with snapshots=False: only the final buffers were kept; "
                           "run it again with snapshots=True to step through the rounds"))

    def chunk_values(self, k: int) -> Numbers:
        """``(world_size, n_chunks)``: the first element of every chunk after round ``k``."""
        buf = self.buffer(k)
        return buf[:, np.asarray(self.chunk_bounds[:-1])]

    def provenance_sets(self, k: int) -> list[list[frozenset[int]]]:
        """``[rank][chunk]`` -> frozenset of the ranks whose contributions the chunk holds after
        round ``k`` (empty = nothing yet)."""
        k = self.check_round(k)
        return [[frozenset(b for b in range(self.world_size) if int(m) >> b & 1) for m in row]
                for row in self.provenance[k]]

    def contributors(self, k: int) -> NDArray[np.int64]:
        """``(world_size, n_chunks)`` int: how many ranks' contributions each chunk holds."""
        k = self.check_round(k)
        p = self.provenance[k]
        return np.array([[bin(int(m)).count("1") for m in row] for row in p], dtype=np.int64)

    # ------------------------------------------------------------------ bytes
    def bytes_sent(self, k: int) -> NDArray[np.int64]:
        """``(world_size,)`` int64: bytes each rank sent in round ``k`` (zeros for round 0)."""
        out = np.zeros(self.world_size, dtype=np.int64)
        for t in self.transfers(k):
            out[t.src] += t.nbytes
        return out

    def bytes_received(self, k: int) -> NDArray[np.int64]:
        """``(world_size,)`` int64: bytes each rank received in round ``k``."""
        out = np.zeros(self.world_size, dtype=np.int64)
        for t in self.transfers(k):
            out[t.dst] += t.nbytes
        return out

    def bytes_matrix(self) -> NDArray[np.int64]:
        """``(n_rounds, world_size)`` int64: bytes sent per round per rank."""
        return np.array([self.bytes_sent(k) for k in range(1, self.n_rounds + 1)],
                        dtype=np.int64).reshape(self.n_rounds, self.world_size)

    def total_bytes_sent(self) -> NDArray[np.int64]:
        """``(world_size,)`` int64: bytes each rank sent over the whole run."""
        return self.bytes_matrix().sum(axis=0) if self.n_rounds else np.zeros(self.world_size, dtype=np.int64)

    def round_seconds(self) -> NDArray[np.float64] | None:
        """Measured seconds per round (max over ranks), or None if not recorded."""
        if not self.rounds or any(r.seconds is None for r in self.rounds):
            return None if self.rounds else np.zeros(0)
        return np.array([r.seconds for r in self.rounds], dtype=np.float64)

    # ------------------------------------------------------------------ verdict
    def mismatches(self) -> list[tuple[int, int]]:
        """``(rank, chunk)`` pairs, among the defined outputs, where ``final`` differs from the
        built-in collective's result. Integers/bools compare exactly; floating sums, products and
        averages within ``world_size * eps`` relative (another order of additions rounds
        differently); everything else exactly. Empty if no built-in result was kept."""
        if self.builtin is None:
            return []
        a, b = self.final, self.builtin
        if np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating):
            if self.op in ("sum", "avg", "product"):
                real = np.finfo(np.dtype(self.dtype) if self.dtype in ("float16", "float32", "float64")
                                else (np.float32 if self.dtype in ("bfloat16", "complex64") else np.float64))
                eps = 2.0 ** -7 if self.dtype == "bfloat16" else real.eps
                rtol = self.world_size * eps
            else:
                rtol = 0.0
            with np.errstate(invalid="ignore", over="ignore"):
                bad = ~np.isclose(a.astype(np.complex128 if np.iscomplexobj(a) else np.float64),
                                  b.astype(np.complex128 if np.iscomplexobj(b) else np.float64),
                                  rtol=rtol, atol=0.0, equal_nan=True)
                if self.op in ("sum", "avg", "product") and bad.any():
                    bad &= ~self._order_dependent_overflow(a, b, rtol)
        else:
            bad = a != b
        out = []
        for r in range(self.world_size):
            for c in range(self.n_chunks):
                lo, hi = self.chunk_bounds[c], self.chunk_bounds[c + 1]
                if self.defined[r, c] and bool(bad[r, lo:hi].any()):
                    out.append((r, c))
        return out

    def _order_dependent_overflow(self, a: Numbers, b: Numbers, rtol: float) -> NDArray[np.bool_]:
        """``(world_size, count)`` bool: elements where the order of the op decides between a
        finite value, inf and NaN, so that ``a`` and ``b`` may both be right: some order of the op
        over the ranks' inputs overflows the dtype, one of the two is inf/NaN, and the other is
        inf/NaN too or the exact (float64) result. Example: float16 PRODUCT of 0, 10, 20, 30, 40 is
        0 in one order and NaN in another (10*20*30*40 = inf first, then inf*0). Every reducing
        primitive's output element j combines element j of every rank's input."""
        limits = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
                  "complex64": 3.4028234663852886e38}
        limit = limits.get(self.dtype, np.finfo(np.float64).max)
        x = self.inputs.astype(np.complex128 if np.iscomplexobj(self.inputs) else np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            # the largest magnitude any partial result can reach, and the exact result
            if self.op == "product":
                bound, exact = np.maximum(np.abs(x), 1.0).prod(axis=0), x.prod(axis=0)
            else:
                bound, exact = np.abs(x).sum(axis=0), x.sum(axis=0) / (self.world_size if self.op == "avg" else 1)
            a64, b64 = (v.astype(np.complex128 if np.iscomplexobj(v) else np.float64) for v in (a, b))
            fa, fb = np.isfinite(a64), np.isfinite(b64)
            exactly = (np.isclose(a64, exact[None, :], rtol=rtol, atol=0.0) |
                       np.isclose(b64, exact[None, :], rtol=rtol, atol=0.0))
        either: NDArray[np.bool_] = (bound > limit)[None, :] & ~(fa & fb) & ((~fa & ~fb) | exactly)
        return either

    @property
    def matches_builtin(self) -> bool | None:
        """True if every defined output equals the built-in collective's (None if not compared)."""
        return None if self.builtin is None else not self.mismatches()

    def summary(self) -> str:
        """A few lines: what ran, rounds, bytes, verdict."""
        sent = self.total_bytes_sent()
        op = _(", op={op}").format(op=self.op) if self.op else ""
        root = _(", root={root}").format(root=self.root) if self.primitive in ROOTED_PRIMITIVES else ""
        p, q = self.meta.get("fold", [0, 0])
        fold = _("; {q} rank(s) folded onto a power of two ({p})").format(q=q, p=p) if q else ""
        verdict = (_("not compared") if self.matches_builtin is None else
                   _("equals the built-in collective ✓") if self.matches_builtin else
                   _("DIFFERS from the built-in at {where} ✗").format(where=self.mismatches()))
        return (_("{primitive} / {algorithm}: world size {world_size}, {dtype}{op}{root}, "
                  "{n_chunks} chunks x {per_chunk} element(s)").format(
                      primitive=self.primitive, algorithm=self.algorithm, world_size=self.world_size, dtype=self.dtype,
                      op=op, root=root, n_chunks=self.n_chunks, per_chunk=self.count // max(1, self.n_chunks))
                + "\n  " + _("{n_rounds} rounds{fold}; bytes sent per rank: {sent}").format(
                    n_rounds=self.n_rounds, fold=fold, sent=sent.tolist())
                + "\n  " + _("result {verdict}").format(verdict=verdict))

    def __repr__(self) -> str:
        return (f"<Trace {self.primitive}/{self.algorithm} world_size={self.world_size} rounds={self.n_rounds} "
                f"dtype={self.dtype} snapshots={self.has_snapshots} matches_builtin={self.matches_builtin}>")

    # ------------------------------------------------------------------ (de)serialisation
    def _meta_dict(self) -> SavedTrace:
        return SavedTrace(format_version=TRACE_FORMAT_VERSION, primitive=self.primitive, algorithm=self.algorithm,
                    world_size=self.world_size, root=self.root, op=self.op, dtype=self.dtype,
                    itemsize=self.itemsize, chunk_bounds=list(self.chunk_bounds),
                    rounds=[r.to_dict() for r in self.rounds], meta=self.meta)

    def to_dict(self) -> SavedTrace:
        """JSON-compatible dict (arrays as ``{"dtype", "shape", "data"}``; NaN/inf as JSON's
        ``NaN``/``Infinity`` extensions that Python's :mod:`json` reads back)."""
        d = self._meta_dict()
        d["arrays"] = {name: array_to_json(getattr(self, name)) for name in _ARRAYS}
        return d

    @classmethod
    def from_dict(cls, d: object) -> "Trace":
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: not a trace, or a newer format version.
        """
        if not isinstance(d, dict) or "primitive" not in d or "rounds" not in d:
            raise ValueError(_("not a collnb trace (expected keys 'primitive', 'rounds', 'arrays')"))
        check_version(d)
        arrays = d.get("arrays")
        if not isinstance(arrays, dict):
            raise ValueError(_("not a collnb trace: 'arrays' is missing or not an object"))
        shapes = shape_of_arrays(checked_meta(d))
        try:
            kw = {name: array_from_json(arrays.get(name), shapes[name], name) for name in _ARRAYS}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(_("not a collnb trace: an array does not load ({error})").format(
                error=f"{type(exc).__name__}: {exc}")) from None
        return cls._from_parts(d, kw)

    @classmethod
    def _from_parts(cls, d: Mapping[str, object], arrays: Mapping[str, Numbers | None]) -> "Trace":
        """Build a trace from its saved metadata and arrays; any missing, mistyped or
        inconsistent part is a ValueError that says what (see :meth:`check`)."""
        meta = checked_meta(d)
        try:
            trace = cls(primitive=meta["primitive"], algorithm=meta["algorithm"],
                        world_size=meta["world_size"], root=meta["root"], op=meta["op"], dtype=meta["dtype"],
                        itemsize=meta["itemsize"], chunk_bounds=meta["chunk_bounds"],
                        rounds=[RoundRecord.from_dict(as_mapping(r, "a round")) for r in meta["rounds"]],
                        inputs=numeric(arrays["inputs"], "inputs"),
                        buffers=None if arrays.get("buffers") is None else numeric(arrays["buffers"], "buffers"),
                        final=numeric(arrays["final"], "final"),
                        builtin=None if arrays.get("builtin") is None else numeric(arrays["builtin"], "builtin"),
                        provenance=numeric(arrays["provenance"], "provenance", kinds="iu").astype(np.int64),
                        defined=numeric(arrays["defined"], "defined", kinds="b").astype(np.bool_, copy=False),
                        meta=meta["meta"])
        except KeyError as exc:
            raise ValueError(_("not a collnb trace: {key} is missing").format(key=repr(exc.args[0]))) from None
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise ValueError(_("not a collnb trace: {error}").format(error=f"{type(exc).__name__}: {exc}")) from None
        trace.check()
        return trace

    def check(self) -> None:
        """Check that the parts of this trace fit together: a known primitive, algorithm, dtype
        (with its ``itemsize``) and reduce op (``None`` for a primitive that does not reduce), a
        world size of 1..16, increasing chunk bounds, arrays of the shapes documented above,
        provenance bitmasks of existing ranks, rounds numbered 1..n with transfers between existing
        ranks and chunks whose ``nbytes`` is their chunks' size.

        Raises:
            ValueError: the first problem found, e.g. for a trace file edited by hand or written
                by another program.
        """
        try:
            check_choice("primitive", self.primitive, tuple(ALGORITHMS))
            check_choice(_("algorithm for {primitive}").format(primitive=self.primitive), self.algorithm,
                         ALGORITHMS[self.primitive] + TIERED_ALGORITHMS.get(self.primitive, ()))
            check_world_size(self.world_size)
            check_rank(self.root, self.world_size, "root")
            check_choice("dtype", self.dtype, DTYPE_NAMES)
            if self.primitive in REDUCING_PRIMITIVES:
                check_choice(f"reduce op of {self.primitive}", self.op, REDUCE_OPS)
            elif self.op is not None:
                raise ValueError(f"{self.primitive} does not reduce, so its op must be None; got {self.op!r}")
            check_int("itemsize", self.itemsize, ITEMSIZE[self.dtype], ITEMSIZE[self.dtype],
                      what=f"bytes per {self.dtype} element")
        except (TypeError, ValueError) as exc:
            raise ValueError(_("in the trace, {error}").format(error=exc)) from None
        ws, b = self.world_size, self.chunk_bounds
        rpn = self.meta.get("ranks_per_node")
        if rpn is not None and (not isinstance(rpn, int) or isinstance(rpn, bool) or rpn < 1 or ws % rpn):
            raise ValueError(f"trace meta ranks_per_node={rpn!r} must be a whole number >= 1 that divides the "
                             f"world size {ws}")
        if len(b) < 2 or b[0] != 0 or any(x >= y for x, y in zip(b, b[1:])):
            raise ValueError(f"trace chunk_bounds {b} must start at 0 and increase")
        count, nc, nr = b[-1], len(b) - 1, len(self.rounds)
        want = {"inputs": (ws, count), "final": (ws, count), "builtin": (ws, count),
                "buffers": (nr + 1, ws, count), "provenance": (nr + 1, ws, nc), "defined": (ws, nc)}
        for name, shape in want.items():
            a = getattr(self, name)
            if a is not None and tuple(a.shape) != shape:
                raise ValueError(f"trace array {name!r} has shape {tuple(a.shape)}; a trace of world size {ws} "
                                 f"with {nc} chunk(s) of {count} element(s) in all and {nr} round(s) needs {shape}")
        if self.provenance.size and (self.provenance.min() < 0 or self.provenance.max() >= 1 << ws):
            raise ValueError(f"trace provenance holds bitmasks outside 0..{(1 << ws) - 1} (ranks 0..{ws - 1})")
        for k, rnd in enumerate(self.rounds, 1):
            if rnd.index != k:
                raise ValueError(f"trace round {k} is numbered {rnd.index}")
            if rnd.seconds is not None and not (np.isfinite(rnd.seconds) and rnd.seconds >= 0):
                raise ValueError(f"trace round {k} took {rnd.seconds!r} seconds; a time is a finite number >= 0")
            for t in rnd.transfers:
                if not (0 <= t.src < ws and 0 <= t.dst < ws) or len(t.chunks) != len(t.dst_chunks) or \
                        not all(0 <= c < nc for c in t.chunks + t.dst_chunks):
                    raise ValueError(f"trace round {k} has a transfer {t.src}->{t.dst} of chunks "
                                     f"{list(t.chunks)} outside world size {ws} / {nc} chunk(s)")
                size = sum(b[c + 1] - b[c] for c in t.chunks) * self.itemsize
                if t.nbytes != size:
                    raise ValueError(f"trace round {k} has a transfer {t.src}->{t.dst} of {t.nbytes!r} bytes; its "
                                     f"chunks {list(t.chunks)} hold {size} bytes of {self.dtype}")

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the trace to ``path``: ``.json`` (text) or ``.npz`` (compressed numpy arrays plus
        the metadata as JSON). Returns the path as str.

        Raises:
            ValueError: another suffix (say which to use).
        """
        path = os.fspath(path)
        low = path.lower()
        if low.endswith(".json"):
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.to_dict(), f)
        elif low.endswith(".npz"):
            arrays = {name: getattr(self, name) for name in _ARRAYS if getattr(self, name) is not None}
            meta = np.frombuffer(json.dumps(self._meta_dict()).encode("utf-8"), dtype=np.uint8)
            with open(path, "wb") as f:
                np.savez_compressed(f, __meta__=meta, **arrays)
        else:
            raise ValueError(_("cannot tell the format of {path}: end the file name with .json or .npz").format(
                path=repr(path)))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Trace":
        """Read a trace written by :meth:`save` (``.json`` or ``.npz``; the content decides).

        Everything is checked before it is used (:meth:`check`: names, dtype, itemsize, op, shapes,
        ranks, chunks, sizes), and the size of every ``.npz`` member before it is inflated (no more
        than its metadata's shapes need), so a hostile file is refused without being unpacked.

        Raises:
            FileNotFoundError: no such file. ValueError: not a trace, a damaged or inconsistent one,
                or a newer format.
        """
        path = os.fspath(path)
        with open(path, "rb") as f:
            head = f.read(4)
        try:
            if head.startswith(b"PK"):
                d, arrays = read_npz(path)
                return cls._from_parts(d, arrays)
            return cls.from_dict(read_json(path))
        except (ValueError, KeyError, TypeError, zipfile.BadZipFile, EOFError, OverflowError) as exc:
            # json.JSONDecodeError and UnicodeDecodeError are ValueErrors too
            if isinstance(exc, UnicodeDecodeError):
                why = "neither an .npz file nor UTF-8 JSON text"
            elif isinstance(exc, json.JSONDecodeError):
                why = _("not JSON ({error})").format(error=exc)
            elif isinstance(exc, (zipfile.BadZipFile, EOFError)):
                why = _("a damaged .npz file ({error})").format(error=exc)
            else:
                why = str(exc).removeprefix("not a collnb trace: ")
            raise ValueError(_("cannot read {path} as a collnb trace: {why}. Traces are written by "
                               "Trace.save(...) or `python -m collnb replay ... --trace FILE`").format(
                                   path=path, why=why)) from None

    def equals(self, other: "Trace") -> bool:
        """Same metadata, rounds and arrays (NaN equal to NaN)."""
        if not isinstance(other, Trace):
            return False
        a, b = self._meta_dict(), other._meta_dict()
        if json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
            return False
        for name in _ARRAYS:
            x, y = getattr(self, name), getattr(other, name)
            if (x is None) != (y is None):
                return False
            if x is not None and (x.shape != y.shape or x.dtype != y.dtype
                                  or not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")):
                return False
        return True
