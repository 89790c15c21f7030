"""How functions, arguments and results travel between the launcher and its ranks.

:func:`dumps` / :func:`loads` are cloudpickle (a function defined in a notebook cell travels by
value, so a pool forked before the cell ran can run it) with tensors sent as raw bytes plus dtype
and shape (see :class:`_Pickler`). :func:`to_cpu` turns a rank's result into detached CPU copies
first. cloudpickle erases the file names of the code it ships; :func:`code_files` records them in
the parent and :func:`restore_files` puts them back in the rank, so a rank's traceback names the
learner's cell.
"""

from __future__ import annotations

import copy
import io
import pickle
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import cloudpickle
import torch

from ._torch_internals import MKLDNN_LAYOUT

if TYPE_CHECKING:
    from _pickle import _ReducedType  # typeshed's name for what a reducer returns (no runtime name)

__all__ = ["dumps", "loads", "to_cpu", "Unsendable", "code_files", "restore_files", "iter_functions"]


def to_cpu(obj: object) -> object:
    """Every tensor in a nested list/tuple/dict as a plain, detached CPU tensor; the containers
    keep their types (namedtuple, ``torch.Size``, ``OrderedDict``, ``defaultdict``...). The
    pickler then copies each tensor's bytes, so the launcher gets real snapshots."""
    if isinstance(obj, torch.Tensor):
        if (type(obj) is torch.Tensor and obj.device.type == "cpu" and not obj.requires_grad) \
                or obj.device.type == "meta":  # a meta tensor has no data to copy: it travels as it is
            return obj
        return obj.detach().to("cpu")
    if type(obj) is list:
        return [to_cpu(x) for x in obj]
    if type(obj) is tuple:
        return tuple(to_cpu(x) for x in obj)
    if type(obj) is dict:
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, dict)) and not isinstance(obj, torch.Size):
        try:  # a subclass: rebuild the same type
            if isinstance(obj, tuple):
                values = [to_cpu(x) for x in obj]
                make: Callable[[list[object]], object] | None = getattr(type(obj), "_make", None)  # a namedtuple
                return make(values) if make is not None else type(obj)(values)
            new = copy.copy(obj)
            if isinstance(obj, list):
                new[:] = [to_cpu(x) for x in obj]
            else:
                for k in list(new):
                    new[k] = to_cpu(new[k])
            return new
        except Exception:  # noqa: BLE001 - a container we cannot rebuild travels as it is
            return obj
    return obj


def _rebuild_tensor(data: bytes, dtype_name: str, shape: tuple[int, ...], requires_grad: bool = False,
                    parameter: bool = False) -> torch.Tensor:
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    t = flat.view(getattr(torch, dtype_name)).reshape(shape)
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_storage(data: bytes) -> torch.UntypedStorage:
    return torch.UntypedStorage.from_buffer(bytearray(data), dtype=torch.uint8) if data \
        else torch.UntypedStorage(0)  # type: ignore[no-untyped-call]  # torch's __init__ has no annotations


class Unsendable(TypeError):
    """A tensor flavour that cannot leave its process; the message says which and what instead."""


def _unsendable_tensor(obj: torch.Tensor) -> str:
    """Why ``obj`` (a tensor) cannot be serialised and what to send instead, or ``""``."""
    if obj.layout == MKLDNN_LAYOUT:
        return (f"an MKL-DNN tensor (layout {MKLDNN_LAYOUT}: opaque memory that neither pickle nor torch.save "
                "can copy); send t.to_dense() instead")
    if type(obj).__name__ == "DTensor":
        return ("a DTensor (a tensor sharded over a DeviceMesh, tied to this rank's process groups); "
                "send t.to_local() (this rank's shard) or t.full_tensor() (the whole tensor) instead")
    if type(obj).__name__ in ("FakeTensor", "FunctionalTensor"):
        return f"a {type(obj).__name__} (it has no data); send a real tensor instead"
    return ""


class _Pickler(cloudpickle.Pickler):
    """cloudpickle (functions and classes defined in a cell travel by value) that sends dense
    tensors as raw bytes plus dtype and shape: a real copy, fast, and for every dtype (plain
    pickle cannot rebuild uint16/32/64 or float8 tensors in torch 2.13). Conjugate and negative
    views are resolved first (their bytes are not their values); ``nn.Parameter`` and a leaf's
    ``requires_grad`` are kept, as pickle keeps them (a non-leaf that requires grad, which pickle
    refuses, arrives detached: no autograd graph crosses processes). Other flavours (sparse,
    quantized, nested, meta, tensor subclasses) travel the way pickle sends them; untyped
    storages as their bytes. MKL-DNN tensors and DTensors raise :class:`Unsendable` saying what
    to send instead."""

    def reducer_override(self, obj: object) -> _ReducedType:
        if isinstance(obj, torch.Tensor):
            kind = type(obj)
            if (kind is torch.Tensor or kind is torch.nn.Parameter) and obj.layout == torch.strided \
                    and not obj.is_quantized and not obj.is_nested and obj.device.type != "meta":
                t = obj.detach().to("cpu").resolve_conj().resolve_neg()
                flat = t.reshape(-1)
                if flat.numel() and flat.stride(0) != 1:  # e.g. one element at stride 2 (z.imag)
                    flat = flat.clone(memory_format=torch.contiguous_format)
                data = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
                return _rebuild_tensor, (data, str(t.dtype).removeprefix("torch."), tuple(t.shape),
                                         bool(obj.requires_grad and obj.is_leaf), kind is torch.nn.Parameter)
            why = _unsendable_tensor(obj)
            if why:
                raise Unsendable(why)
        elif type(obj) is torch.UntypedStorage and obj.device.type == "cpu":
            # plain pickle fails on an untyped storage in torch 2.13 (AttributeError: ... 'dtype')
            return _rebuild_storage, (bytes(obj),)
        return super().reducer_override(obj)


def dumps(obj: object) -> bytes:
    """``obj`` as bytes that :func:`loads` (here or in another process with collnb) turns back into
    an equal object: cloudpickle, with dense tensors as their raw bytes plus dtype and shape (every
    dtype, ``nn.Parameter`` and a leaf's ``requires_grad`` kept; see :class:`_Pickler`).

    Raises:
        Unsendable: (a ``TypeError``) ``obj`` holds an MKL-DNN tensor, a DTensor or a fake tensor;
            the message says what to send instead.
        Exception: whatever cloudpickle raises for an object it cannot serialise.
    """
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def loads(data: bytes) -> Any:  # whatever was sent: pickle.loads is typed Any too
    """The object :func:`dumps` serialised (tensors come back as CPU tensors of their own memory).

    Raises:
        Exception: whatever unpickling raises (e.g. a class whose ``__setstate__`` fails here).
    """
    return pickle.loads(data)


def iter_functions(fn: object, limit: int = 200) -> list[types.FunctionType]:
    """``fn`` plus the functions it can reach through its globals and closure that cloudpickle
    ships by value (those defined in the same module as ``fn``, e.g. a notebook's ``__main__``)."""
    seen: set[int] = set()
    todo: list[object] = [fn]
    out: list[types.FunctionType] = []
    while todo and len(out) < limit:
        f = todo.pop()
        f = getattr(f, "__func__", f)
        if not isinstance(f, types.FunctionType) or id(f) in seen:
            continue
        seen.add(id(f))
        out.append(f)
        mod = f.__module__
        names = set(f.__code__.co_names)
        for name in names:
            g = f.__globals__.get(name)
            if isinstance(g, types.FunctionType) and g.__module__ == mod:
                todo.append(g)
        for cell in f.__closure__ or ():
            try:
                if isinstance(cell.cell_contents, types.FunctionType):
                    todo.append(cell.cell_contents)
            except ValueError:
                pass
    return out


def _iter_codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _iter_codes(const)


def code_files(fn: object) -> dict[tuple[str, int], str]:
    """``{(co_name, co_firstlineno): co_filename}`` for code cloudpickle will ship (it erases
    filenames to ``<dynamic-code>``; we put them back so tracebacks show the learner's cell)."""
    return {(c.co_name, c.co_firstlineno): c.co_filename
            for f in iter_functions(fn) for c in _iter_codes(f.__code__)}


def _with_files(code: types.CodeType, files: dict[tuple[str, int], str]) -> types.CodeType:
    consts = tuple(_with_files(c, files) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    name = files.get((code.co_name, code.co_firstlineno), code.co_filename)
    return code.replace(co_filename=name, co_consts=consts)


def restore_files(fn: object, files: dict[tuple[str, int], str]) -> None:
    """Put the filenames of :func:`code_files` back into the code of ``fn`` and the functions it
    reaches (:func:`iter_functions`); code that refuses the change keeps its own."""
    for f in iter_functions(fn):
        try:
            f.__code__ = _with_files(f.__code__, files)
        except (ValueError, TypeError):
            pass
