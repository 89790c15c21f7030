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

import numpy as np

from ..vocabulary import check_int, check_world_size

__all__ = ["ITEMSIZE", "MAX_META_BYTES", "TRACE_FORMAT_VERSION", "ARRAYS", "array_to_json", "array_from_json", "check_version", "checked_meta",
           "shape_of_arrays", "npy_bytes", "numeric", "json_loads", "read_npz", "read_json"]

#: Bytes per element of each dtype a trace may name (its ``itemsize`` must agree).
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2,
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


def array_to_json(a):
    """An array as a JSON trace saves it: ``{"dtype", "shape", "complex", "data"}`` (``None`` stays
    ``None``; complex values as ``[real, imag]`` pairs)."""
    if a is None:
        return None
    if np.iscomplexobj(a):
        data = np.stack([a.real, a.imag], axis=-1).tolist()
    else:
        data = a.tolist()
    return dict(dtype=a.dtype.str, shape=list(a.shape), complex=bool(np.iscomplexobj(a)), data=data)


def array_from_json(d, shape=None, name="an array"):
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


def check_version(d):
    """Refuse a trace of a newer format (ValueError)."""
    v = d.get("format_version", 1)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not a collnb trace: format_version must be an int; got {v!r}")
    if v > TRACE_FORMAT_VERSION:
        raise ValueError(f"trace format version {v} is newer than this collnb understands "
                         f"({TRACE_FORMAT_VERSION}); upgrade collnb")


def checked_meta(d) -> dict:
    """The scalar fields of a saved trace, each of the type it must have (an int is an int, not a
    float or a bool; a name a str), before any of them is used. Raises ValueError saying which."""
    out = {}
    try:
        for key in ("primitive", "algorithm", "dtype"):
            if not isinstance(d[key], str):
                raise ValueError(f"{key} must be a name (str); got {d[key]!r}")
            out[key] = d[key]
        for key in ("world_size", "root", "itemsize"):
            out[key] = check_int(key, d[key], -(1 << 62))
        op = d.get("op")
        if op is not None and not isinstance(op, str):
            raise ValueError(f"op must be a reduce op's name (str) or None; got {op!r}")
        out["op"] = op
        bounds = d["chunk_bounds"]
        if not isinstance(bounds, list) or len(bounds) > (1 << 16):
            raise ValueError(f"chunk_bounds must be a list of ints; got {type(bounds).__name__}")
        out["chunk_bounds"] = [check_int("a chunk bound", b, 0, 1 << 40) for b in bounds]
        if not isinstance(d["rounds"], list):
            raise ValueError("rounds must be a list")
        meta = d.get("meta") or {}
        if not isinstance(meta, dict):
            raise ValueError(f"meta must be an object; got {meta!r}")
        fold = meta.get("fold", [0, 0])
        if not (isinstance(fold, list) and len(fold) == 2 and all(isinstance(x, int) for x in fold)):
            raise ValueError(f"meta.fold must be two ints [p, q]; got {fold!r}")
        out["meta"] = dict(meta)
    except KeyError as exc:
        raise ValueError(f"not a collnb trace: {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"in the trace, {exc}") from None
    try:
        check_world_size(out["world_size"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"in the trace, {exc}") from None
    return out


def shape_of_arrays(meta, d) -> dict:
    """The shape of every array a trace with this metadata holds (see :class:`Trace`)."""
    ws, b = meta["world_size"], meta["chunk_bounds"]
    if len(b) < 2:
        raise ValueError(f"trace chunk_bounds {b} must start at 0 and increase")
    count, nc, nr = b[-1], len(b) - 1, len(d["rounds"])
    return {"inputs": (ws, count), "final": (ws, count), "builtin": (ws, count),
            "buffers": (nr + 1, ws, count), "provenance": (nr + 1, ws, nc), "defined": (ws, nc)}


def npy_bytes(shape) -> int:
    """The most bytes an ``.npy`` member of this shape needs: 16 per element (complex128), plus its
    header."""
    return 16 * int(np.prod(shape, dtype=object)) + 4096


def numeric(a, name, kinds="biufc"):
    """``a`` as an array of numbers (``kinds``: numpy dtype kinds allowed). ValueError when it is missing
    or holds anything else (objects, strings)."""
    if a is None:
        raise ValueError(f"the array {name!r} is missing")
    a = np.asarray(a)
    if a.dtype.kind not in kinds:
        raise ValueError(f"array {name!r} has dtype {a.dtype}; it must hold "
                         f"{'bools' if kinds == 'b' else 'integers' if kinds == 'iu' else 'numbers'}")
    return a


def json_loads(text):
    """JSON text -> object; nesting deeper than Python's parser can follow is a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("its JSON is nested too deeply to be a trace") from None


def read_npz(path) -> tuple:
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
        shapes = shape_of_arrays(checked_meta(d), d)
        for name in ARRAYS:
            if name in members and members[name] > npy_bytes(shapes[name]):
                raise ValueError(f"its array {name!r} would unpack to {members[name]} bytes, more than the "
                                 f"{shapes[name]} elements its metadata describes can need")
        return d, {name: (z[name] if name in z.files else None) for name in ARRAYS}


def read_json(path):
    """The object a JSON trace file holds (ValueError for a file too large or nested too deeply to be
    a trace, or not JSON)."""
    size = os.path.getsize(path)
    if size > MAX_JSON_BYTES:
        raise ValueError(f"it is {size} bytes, more than a JSON trace may be ({MAX_JSON_BYTES})")
    with open(path, encoding="utf-8") as f:
        return json_loads(f.read())
