"""Reading a rank's state cheaply, for :mod:`.rank_state`: which namespaces a call changed, where
the random generators stand.

After every call a rank must tell whether the call replaced a function of ``torch`` and some
forty other namespaces, and whether it drew from or seeded Python's and numpy's generators. Done
plainly (comparing every value, calling ``getstate()``), that costs a cold rank about a millisecond a
call. Here:

* a namespace (:class:`Namespace`) is first asked whether its dict changed at all, by CPython's dict
  version tag (``ma_version_tag``, PEP 509), read through ctypes where a self-test at import shows
  it moves with every change (CPython 3.11, 3.12; else the values are compared); only a dict that
  moved is looked at closely, and changed data (torch's group counter) does not count;
* a Mersenne Twister's position and two state words are read in place (:func:`rng_mark`), also
  checked at import against the generator's own ``getstate()``.

The CPython layouts read here are checked, not assumed: where a check fails, the plain (slower) way
is used.
"""

from __future__ import annotations

import ctypes
import gc
import operator
import os
import random
import sys
import types
from collections.abc import Callable, Mapping

import torch

from ...i18n import _

__all__ = ["Namespace", "file_id", "rng_mark", "numpy_state", "VERSION_VIEW", "MISSING"]

_COLLNB_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_OWN_DIRS = (_COLLNB_DIR, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
#: A key a namespace does not hold.
MISSING = object()


def _own_code(value: object) -> bool:
    """Whether ``value``'s code is torch's or collnb's (``functools.wraps`` copies ``__module__``, so
    the code's file decides)."""
    code: types.CodeType | None = getattr(getattr(value, "__func__", value), "__code__", None)
    return code is not None and code.co_filename.startswith(_OWN_DIRS)


def _own_definition(value: object) -> bool:
    """Whether ``value`` is a function or class that torch or collnb defines: its code's file (a
    function) or its module's file (a class) is theirs. A name such a value fills in is a lazy name
    being loaded (collnb's facades and torch's packages import a name the first time it is asked for,
    PEP 562 ``__getattr__``) or a submodule's name, not a learner's change."""
    if isinstance(value, type):
        module = sys.modules.get(getattr(value, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        return isinstance(file, str) and os.path.abspath(file).startswith(_OWN_DIRS)
    return _own_code(value)


def _own_wrapper(new: object, old: object) -> bool:
    """Whether ``new`` is torch's or collnb's own wrapper of ``old``: their code, wrapping it
    (``functools.wraps``'s ``__wrapped__``, or ``old`` among its closure's cells). torch patches
    itself as it imports parts of itself (TorchDynamo, ``torch.compile``'s tracer, wraps ``torch.manual_seed`` and
    ``torch.nn.Module.__init__``); collnb wraps torch.distributed's functions (:mod:`..instrument._dist_hooks`)."""
    if not _own_code(new):
        return False
    if getattr(new, "__wrapped__", None) is old:
        return True
    for cell in getattr(getattr(new, "__func__", new), "__closure__", None) or ():
        try:
            if cell.cell_contents is old:
                return True
        except ValueError:  # an empty cell
            pass
    return False


def _watched_kind(value: object) -> bool:
    """A function, class or module (looked up on the type: a value's own ``__getattribute__``, such as
    torch's deprecated ``dist.reduce_op``, is never run)."""
    return callable(value) or issubclass(type(value), types.ModuleType)


def version_view() -> Callable[[object], ctypes.c_uint64] | None:
    """``d -> a ctypes view of d's version tag`` where this Python has one that every change of a dict
    moves (CPython's ``ma_version_tag``, PEP 509: 3.11 and 3.12), checked here on a dict of our own;
    else ``None``. Reading it costs 0.1 us and touches one object, where comparing a namespace's
    values touches every value (a cold rank after a call: ~1 ms for the namespaces below)."""
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None

    def view(d: object) -> ctypes.c_uint64:
        return ctypes.c_uint64.from_address(id(d) + 24)  # PyObject_HEAD (16 bytes), ma_used (8), the tag

    try:
        probe: dict[str, object] = {"a": 1}
        if ctypes.c_ssize_t.from_address(id(probe) + 16).value != 1:  # ma_used: the layout is as above
            return None
        tag = view(probe)
        seen: list[int] = []
        changes: tuple[Callable[[], object], ...] = (
            lambda: probe.__setitem__("b", 2), lambda: probe.__setitem__("a", object()),
            lambda: probe.__delitem__("b"), lambda: probe.update(c=3), lambda: probe.pop("c"),
            lambda: probe.setdefault("d", 4))
        for change in changes:
            seen.append(tag.value)
            change()
        seen.append(tag.value)
        return view if len(set(seen)) == len(seen) else None
    except Exception:  # noqa: BLE001 - any surprise: compare the values instead
        return None


VERSION_VIEW = version_view()


class Namespace:
    """One watched namespace (a module's or a class's ``__dict__``) as the rank started with it."""

    __slots__ = ("name", "mapping", "items", "bases", "tag", "version", "size", "get_watched", "watched")
    name: str
    mapping: Mapping[str, object]
    items: dict[str, object]
    bases: tuple[type, ...]
    tag: ctypes.c_uint64 | None
    version: int | None
    size: int
    get_watched: Callable[[Mapping[str, object]], object]
    watched: object

    def __init__(self, name: str, mapping: Mapping[str, object], cls: type | None = None) -> None:
        self.name, self.mapping = name, mapping
        self.bases = cls.__mro__[1:] if cls is not None else ()  # a class's: a name they define is replaced
        real = mapping if type(mapping) is dict else next(
            (d for d in gc.get_referents(mapping) if type(d) is dict), None)  # a class's mappingproxy
        self.tag = VERSION_VIEW(real) if VERSION_VIEW is not None and real is not None else None
        self.rebase()

    def rebase(self) -> None:
        """Take the namespace as it is now as the state to compare with."""
        self.version = self.tag.value if self.tag is not None else None
        self.items = dict(self.mapping)
        self.size = len(self.items)
        keys = [k for k, v in self.items.items() if _watched_kind(v)]
        if len(keys) > 1:
            self.get_watched = operator.itemgetter(*keys)  # the functions, classes, modules: one C call
        else:
            def get_watched(m: Mapping[str, object], keys: tuple[str, ...] = tuple(keys)) -> tuple[object, ...]:
                return tuple(m[k] for k in keys)
            self.get_watched = get_watched
        self.watched = self.get_watched(self.items)

    def changes(self) -> list[str]:
        """``["replaced torch.distributed.all_reduce", ...]``: functions, classes and modules a call
        replaced, deleted or added (empty when none; changed data values do not count)."""
        if self.tag is not None and self.tag.value == self.version:  # the fast path: nothing changed at all
            return []
        if len(self.mapping) == self.size:  # only data changed (torch's group counter, a cache)?
            try:
                if self.get_watched(self.mapping) == self.watched:  # by identity, element by element
                    self.version = self.tag.value if self.tag is not None else None
                    return []
            except Exception:  # noqa: BLE001 - a key deleted, or a value whose == raised: look closer
                pass
        now = dict(self.mapping)
        out: list[str] = []
        for key, old in self.items.items():
            new = now.get(key, MISSING)
            if new is old or not _watched_kind(old):
                continue
            if new is MISSING:
                out.append(_("deleted {name}").format(name=f"{self.name}.{key}"))
            elif not _own_wrapper(new, old):
                out.append(_("replaced {name}").format(name=f"{self.name}.{key}"))
        for key in now.keys() - self.items.keys():
            new = now[key]
            if _watched_kind(new) and not issubclass(type(new), types.ModuleType) and not _own_definition(new):
                shadows = any(key in vars(base) for base in self.bases)
                out.append((_("replaced {name}") if shadows else _("added {name}")).format(name=f"{self.name}.{key}"))
        if not out:
            self.rebase()  # only data, submodules imported, or torch's and collnb's own wrappers changed
        return out


def file_id(fd: int) -> tuple[int, int]:
    """What an fd is open on: ``(st_dev, st_ino)`` (OSError when it is closed)."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _mt_reader(index_offset: int, state_offset: int) -> Callable[[object], tuple[int, int, int]]:
    """A function ``obj -> (position, state words 1 and 2)`` of a Mersenne Twister in memory at
    ``id(obj)`` (or at an int address), read through ctypes. (Word 0 is 0x80000000 after every seed
    from an array: it tells no seed from another.)"""
    def mark(obj: object) -> tuple[int, int, int]:
        base = obj if isinstance(obj, int) else id(obj)
        return (ctypes.c_int.from_address(base + index_offset).value,
                ctypes.c_uint32.from_address(base + state_offset + 4).value,
                ctypes.c_uint32.from_address(base + state_offset + 8).value)
    return mark


def _python_rng_reader() -> Callable[[object], tuple[int, int, int]] | None:
    """:func:`_mt_reader` for Python's ``random.Random`` (CPython: ``{PyObject_HEAD; int index; uint32_t
    state[624]}``), checked against its own ``getstate()`` here; ``None`` where the layout differs
    (then ``random`` is seeded again after every call)."""
    try:
        if sys.implementation.name != "cpython":
            return None
        reader, r = _mt_reader(16, 20), random.Random(12345)
        for _ in range(2):
            st = r.getstate()[1]
            if reader(r) != (st[624], st[1], st[2]):
                return None
            r.random()
        return reader
    except Exception:  # noqa: BLE001
        return None


_PY_MARK = _python_rng_reader()


def numpy_state(np: types.ModuleType) -> int | None:
    """The address of numpy's global MT19937 state, checked once against ``get_state()``; ``None``
    when it cannot be read so. (Call it only once ``numpy.random`` is imported: importing it costs a
    rank 7 MiB.)"""
    global _NUMPY_CHECKED, _NUMPY_ADDRESS
    try:
        rs = np.random.mtrand._rand
        if _NUMPY_ADDRESS[0] is rs:  # the same generator object (seed() and set_state() keep it)
            return _NUMPY_ADDRESS[1]
        address = rs._bit_generator.ctypes.state_address
        if _NUMPY_CHECKED is None:
            reader, probe = _mt_reader(624 * 4, 0), np.random.RandomState(12345)
            paddr = probe._bit_generator.ctypes.state_address
            ok = True
            for _ in range(2):
                st = probe.get_state()
                ok = ok and reader(paddr) == (int(st[2]), int(st[1][1]), int(st[1][2]))
                probe.random_sample()
            _NUMPY_CHECKED = ok
        _NUMPY_ADDRESS = (rs, address if _NUMPY_CHECKED else None)
        return _NUMPY_ADDRESS[1]
    except Exception:  # noqa: BLE001
        return None


_NUMPY_CHECKED: bool | None = None
_NUMPY_ADDRESS: tuple[object, int | None] = (None, None)  # numpy's global RandomState and the address of its state


def rng_mark(obj: object) -> tuple[int, int, int] | None:
    """``(position, state words 1 and 2)`` of Python's ``random._inst`` or numpy's state address, or
    ``None`` when it cannot be read (then the generator is seeded again)."""
    if obj is None:
        return None
    if isinstance(obj, int):
        return _mt_reader(624 * 4, 0)(obj)
    return _PY_MARK(obj) if _PY_MARK is not None else None
