"""Reading a saved :class:`collnb.Trace` file, checking it before anything in it is used.

A trace file may come from another machine or another program, or be edited by hand, so nothing in it
is trusted: every scalar of the metadata must have its type (an int is an int, not ``1e30`` or
``None``; a name a str) before the trace is built (:meth:`collnb.Trace.check` then checks the names,
dtype, itemsize, op, shapes, ranks and chunks); the arrays must hold numbers; an ``.npz`` member is
unpacked only when the size the zip file gives for it fits the shape the metadata describes (a small
file that would inflate to hundreds of MiB is refused unopened); JSON nested deeper than Python's
parser follows is a ValueError, not a RecursionError. Every problem is a ValueError saying what.
Imports no torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import NotRequired, TypeAlias, TypedDict, cast, overload

import numpy as np
from numpy.typing import NDArray

from ..vocabulary import check_int, check_world_size
from .rounds import TransferDict

__all__ = ["ITEMSIZE", "MAX_META_BYTES", "TRACE_FORMAT_VERSION", "ARRAYS", "array_to_json", "array_from_json", "check_version", "checked_meta",
           "shape_of_arrays", "npy_bytes", "numeric", "json_loads", "read_npz", "read_json", "Numbers", "ArrayJson",
           "TraceMeta", "ClusterInfo", "CheckedMeta", "Shapes", "RoundDict", "SavedTrace"]

#: An array of numbers of any numpy kind: bool, int, uint, float or complex (:func:`numeric` checks it).
Numbers: TypeAlias = NDArray[np.generic]
#: The shape of every array of a trace, by name (:func:`shape_of_arrays`).
Shapes: TypeAlias = dict[str, tuple[int, ...]]


class ArrayJson(TypedDict):
    """An array as a JSON trace saves it (:func:`array_to_json`): numpy's dtype string, the shape, whether
    the values are complex (then ``[real, imag]`` pairs), and the values as nested lists."""

    dtype: str
    shape: list[int]
    complex: NotRequired[bool]
    data: list[object]


class ClusterInfo(TypedDict, total=False):
    """What a trace run on a virtual cluster says of it (``meta["cluster"]``, :mod:`collnb.labs.cluster`):
    its ``nodes``, ``ranks_per_node``, ``mode`` (``"emulated"`` or ``"modelled"``) and the tiers' rates as text."""

    nodes: int
    ranks_per_node: int
    mode: str
    inter: str
    intra: str


class TraceMeta(TypedDict, total=False):
    """A trace's ``meta`` (:class:`collnb.Trace`): where and how it ran. A file's values are checked for
    these types when it is read (:func:`checked_meta`); other keys are kept as they are."""

    backend: str
    torch_version: str
    host: str
    cpu_count: int | None
    created: str  # ISO time, seconds
    wall_seconds: float | None
    fold: list[int]  # [p, q]: the power of two used and the ranks folded
    snapshots: bool
    ranks_per_node: int
    cluster: ClusterInfo


class RoundDict(TypedDict):
    """A round as a trace file holds it (:meth:`collnb.algorithms.RoundRecord.to_dict`)."""

    index: int
    label: str
    detail: str
    seconds: float | None
    transfers: list[TransferDict]


class SavedTrace(TypedDict):
    """A trace as a file holds it (:meth:`collnb.Trace.to_dict`; an ``.npz`` keeps the arrays as members)."""

    format_version: int
    primitive: str
    algorithm: str
    world_size: int
    root: int
    op: str | None
    dtype: str
    itemsize: int
    chunk_bounds: list[int]
    rounds: list[RoundDict]
    meta: TraceMeta
    arrays: NotRequired[dict[str, ArrayJson | None]]


class CheckedMeta(TypedDict):
    """The scalar fields of a saved trace, each of its type (:func:`checked_meta`)."""

    primitive: str
    algorithm: str
    dtype: str
    world_size: int
    root: int
    itemsize: int
    op: str | None
    chunk_bounds: list[int]
    rounds: list[object]  # not yet checked: RoundRecord.from_dict reads each
    meta: TraceMeta


#: Bytes per element of each dtype a trace may name (its ``itemsize`` must agree).
ITEMSIZE: dict[str, int] = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2,
            "int32": 4, "int64": 8, "bool": 1, "complex64": 8, "complex128": 16, "uint16": 2, "uint32": 4,
            "uint64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}
#: The most bytes a trace file's metadata (JSON: the rounds, their transfers) may hold.
MAX_META_BYTES = 64 << 20
#: The names of a trace's arrays (:class:`collnb.Trace`'s attributes).
ARRAYS = ("inputs", "buffers", "final", "builtin", "provenance", "defined")
#: The most bytes a JSON trace may have (its metadata plus 16 Mi elements of arrays as text).
MAX_JSON_BYTES = MAX_META_BYTES + (1 << 30)
#: Bumped when the saved layout changes; :meth:`collnb.Trace.load` refuses newer versions.
TRACE_FORMAT_VERSION = 1


@overload
def array_to_json(a: None) -> None: ...
@overload
def array_to_json(a: Numbers) -> ArrayJson: ...
def array_to_json(a: Numbers | None) -> ArrayJson | None:
    """An array as a JSON trace saves it: ``{"dtype", "shape", "complex", "data"}`` (``None`` stays
    ``None``; complex values as ``[real, imag]`` pairs)."""
    if a is None:
        return None
    if np.iscomplexobj(a):
        data: list[object] = np.stack([a.real, a.imag], axis=-1).tolist()
    else:
        data = a.tolist()
    return ArrayJson(dtype=a.dtype.str, shape=list(a.shape), complex=bool(np.iscomplexobj(a)), data=data)


def array_from_json(d: ArrayJson | None, shape: Sequence[int] | None = None, name: str = "an array") -> Numbers | None:
    """Inverse of :func:`array_to_json`. ``shape`` (from the trace's metadata) is checked before the
    data is read, and only numeric dtypes are accepted.

    Raises:
        ValueError / KeyError / TypeError: a damaged array (another shape, a dtype that is not a number).
    """
    if d is None:
        return None
    if shape is not None and [int(n) for n in d["shape"]] != list(shape):
        raise ValueError(f"trace array {name!r} has shape {tuple(int(n) for n in d['shape'])}; the trace's "
                         f"metadata (world size, chunk bounds, rounds) needs {tuple(shape)}")
    dt = np.dtype(d["dtype"])
    if dt.kind not in "biufc":
        raise ValueError(f"an array of dtype {d['dtype']!r}; a trace holds numbers")
    if d.get("complex"):
        pairs = np.array(d["data"], dtype=np.float64)
        return (pairs[..., 0] + 1j * pairs[..., 1]).astype(dt).reshape(d["shape"])
    return np.array(d["data"], dtype=dt).reshape(d["shape"])


def check_version(d: Mapping[str, object]) -> None:
    """Refuse a trace of a newer format (ValueError)."""
    v = d.get("format_version", 1)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not a collnb trace: format_version must be an int; got {v!r}")
    if v > TRACE_FORMAT_VERSION:
        raise ValueError(f"trace format version {v} is newer than this collnb understands "
                         f"({TRACE_FORMAT_VERSION}); upgrade collnb")


def checked_meta(d: Mapping[str, object]) -> CheckedMeta:
    """The scalar fields of a saved trace, each of the type it must have (an int is an int, not a
    float or a bool; a name a str), and its ``meta``'s known keys of :class:`TraceMeta`'s types,
    before any of them is used. Raises ValueError saying which."""
    try:
        primitive, algorithm, dtype = (_name(d, key) for key in ("primitive", "algorithm", "dtype"))
        world_size, root, itemsize = (check_int(key, d[key], -(1 << 62)) for key in ("world_size", "root", "itemsize"))
        op = d.get("op")
        if op is not None and not isinstance(op, str):
            raise ValueError(f"op must be a reduce op's name (str) or None; got {op!r}")
        bounds = d["chunk_bounds"]
        if not isinstance(bounds, list) or len(bounds) > (1 << 16):
            raise ValueError(f"chunk_bounds must be a list of ints; got {type(bounds).__name__}")
        chunk_bounds = [check_int("a chunk bound", b, 0, 1 << 40) for b in bounds]
        rounds = d["rounds"]
        if not isinstance(rounds, list):
            raise ValueError("rounds must be a list")
        meta = d.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError(f"meta must be an object; got {meta!r}")
        fold = meta.get("fold", [0, 0])
        if not (isinstance(fold, list) and len(fold) == 2 and all(isinstance(x, int) for x in fold)):
            raise ValueError(f"meta.fold must be two ints [p, q]; got {fold!r}")
        for key, types in _META_TYPES.items():
            if key in meta and not isinstance(meta[key], types):
                raise ValueError(f"meta.{key} must be {' or '.join(_TYPE_WORDS.get(t, t.__name__) for t in types)}; "
                                 f"got {meta[key]!r}")
    except KeyError as exc:
        raise ValueError(f"not a collnb trace: {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"in the trace, {exc}") from None
    try:
        check_world_size(world_size)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"in the trace, {exc}") from None
    return CheckedMeta(primitive=primitive, algorithm=algorithm, dtype=dtype, world_size=world_size, root=root,
                       itemsize=itemsize, op=op, chunk_bounds=chunk_bounds, rounds=rounds,
                       meta=cast(TraceMeta, dict(meta)))  # its known keys' types checked above


#: The types :func:`checked_meta` requires of a trace meta's keys (``fold``: two ints, checked apart;
#: ``ranks_per_node``: :meth:`collnb.Trace.check` says what it must be).
_META_TYPES: dict[str, tuple[type, ...]] = {
    "backend": (str,), "torch_version": (str,), "host": (str,), "cpu_count": (int, type(None)), "created": (str,),
    "wall_seconds": (int, float, type(None)), "snapshots": (bool,), "cluster": (dict,)}
_TYPE_WORDS = {str: "a str", int: "an int", float: "a float", bool: "a bool", dict: "an object", type(None): "None"}


def _name(d: Mapping[str, object], key: str) -> str:
    """``d[key]`` if it is a str (KeyError when missing; ValueError saying so when not a name)."""
    value = d[key]
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a name (str); got {value!r}")
    return value


def shape_of_arrays(meta: CheckedMeta) -> Shapes:
    """The shape of every array a trace with this metadata holds (see :class:`Trace`)."""
    ws, b = meta["world_size"], meta["chunk_bounds"]
    if len(b) < 2:
        raise ValueError(f"trace chunk_bounds {b} must start at 0 and increase")
    count, nc, nr = b[-1], len(b) - 1, len(meta["rounds"])
    return {"inputs": (ws, count), "final": (ws, count), "builtin": (ws, count),
            "buffers": (nr + 1, ws, count), "provenance": (nr + 1, ws, nc), "defined": (ws, nc)}


def npy_bytes(shape: Sequence[int]) -> int:
    """The most bytes an ``.npy`` member of this shape needs: 16 per element (complex128), plus its
    header."""
    return 16 * int(np.prod(shape, dtype=object)) + 4096


def numeric(a: object, name: str, kinds: str = "biufc") -> Numbers:
    """``a`` as an array of numbers (``kinds``: numpy dtype kinds allowed). ValueError when it is missing
    or holds anything else (objects, strings)."""
    if a is None:
        raise ValueError(f"the array {name!r} is missing")
    a = np.asarray(a)
    if a.dtype.kind not in kinds:
        raise ValueError(f"array {name!r} has dtype {a.dtype}; it must hold "
                         f"{'bools' if kinds == 'b' else 'integers' if kinds == 'iu' else 'numbers'}")
    return a


def json_loads(text: str) -> object:
    """JSON text -> object; nesting deeper than Python's parser can follow is a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("its JSON is nested too deeply to be a trace") from None


def read_npz(path: str) -> tuple[dict[str, object], dict[str, Numbers | None]]:
    """``(metadata dict, {array name: array or None})`` of an ``.npz`` trace, every member's size
    checked against the metadata before it is unpacked.

    Raises:
        ValueError: not a collnb trace, a newer format, metadata of the wrong types, or a member
            larger than the metadata allows. zipfile.BadZipFile / EOFError: a damaged file.
    """
    with np.load(path, allow_pickle=False) as z:
        if "__meta__" not in z.files:
            raise ValueError("an npz file but not a collnb trace (no __meta__)")
        members = {i.filename.removesuffix(".npy"): i.file_size for i in z.zip.infolist()}
        if members.get("__meta__", 0) > MAX_META_BYTES:
            raise ValueError(f"its metadata would unpack to {members['__meta__']} bytes (at most {MAX_META_BYTES})")
        d = json_loads(bytes(z["__meta__"]).decode("utf-8"))
        if not isinstance(d, dict):
            raise ValueError("not a collnb trace: its __meta__ is not a JSON object")
        check_version(d)
        shapes = shape_of_arrays(checked_meta(d))
        for name in ARRAYS:
            if name in members and members[name] > npy_bytes(shapes[name]):
                raise ValueError(f"its array {name!r} would unpack to {members[name]} bytes, more than the "
                                 f"{shapes[name]} elements its metadata describes can need")
        return d, {name: (z[name] if name in z.files else None) for name in ARRAYS}


def read_json(path: str) -> object:
    """The object a JSON trace file holds (ValueError for a file too large or nested too deeply to be
    a trace, or not JSON)."""
    size = os.path.getsize(path)
    if size > MAX_JSON_BYTES:
        raise ValueError(f"it is {size} bytes, more than a JSON trace may be ({MAX_JSON_BYTES})")
    with open(path, encoding="utf-8") as f:
        return json_loads(f.read())
