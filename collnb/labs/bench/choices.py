"""What the bandwidth lab measures: the primitives with a bus bandwidth, the row schema, sizes
(``"1K:64M"``), algorithm names, dtypes and world sizes, all checked before any rank starts."""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from typing import TypedDict

import torch

from ...algorithms import ALGORITHMS, algorithms_for
from ...collectives import BENCH_PRIMITIVES, SPECS, PrimitiveSpec, backend_support, support_for
from ...i18n import N_, _
from ...ranks import LaunchPlan, plan_launch
from ...units import format_bytes
from ...vocabulary import check_backend, check_choice, dtype_name

#: Primitives with a bus-bandwidth definition (nccl-tests), in teaching order: the rows of the spec
#: table that have a factor (:attr:`collnb.collectives.PrimitiveSpec.busbw`).
PRIMITIVES = BENCH_PRIMITIVES


class Row(TypedDict):
    """One bench row, its columns in order (what each means: :mod:`collnb.bench`); a row read
    from a file or a DataFrame may hold more columns."""

    primitive: str
    algorithm: str
    backend: str
    world_size: int
    dtype: str
    nbytes: int
    time_s: float
    time_min_s: float
    time_max_s: float
    algbw_GBps: float
    busbw_GBps: float
    ok: bool


#: The row schema, in column order (:class:`Row`'s keys).
COLUMNS: tuple[str, ...] = tuple(Row.__annotations__)

#: Physical references measured beside the collectives (``primitive`` column of their rows).
REFERENCES = ("memcpy", "tcp_loopback", "local_reduce")
#: A small results file measured on CPU (gloo, a loaded 2-core machine), labelled as such in its note.
EXAMPLE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data",
                            "bench_example_cpu.json")
#: The largest size measured, in bytes per rank: more does not fit 16 ranks x 4 buffers in a laptop's memory.
MAX_BYTES = 1 << 30

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: object) -> int:
    """Bytes from ``"64M"``, ``"1K"``, ``"512"``, ``"4MiB"`` (K/M/G are powers of 1024), or an int.

    Raises:
        TypeError: neither an int nor a str (a bool is not a size).
        ValueError: not a size (says what a size looks like), or below 1 byte.
    """
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise TypeError(_("a size must be bytes as an int or a str such as '64M'; got {value}").format(
            value=repr(text)))
    if isinstance(text, int):
        n = text
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
        if not m or m.group(2).upper() not in _UNITS:
            raise ValueError(_("not a size: {value}; write bytes as a number with an optional K, M or G "
                               "(powers of 1024), e.g. 1K, 64M").format(value=repr(text)))
        n = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if n < 1:
        raise ValueError(_("sizes must be at least 1 byte; got {value}").format(value=repr(text)))
    return n


def parse_sizes(spec: object) -> list[int]:
    """Bytes per rank to measure: ``"MIN:MAX"`` gives every power of two from MIN to MAX
    (``"1K:64M"`` -> 1 KiB, 2 KiB, ..., 64 MiB); a single size, or a list of sizes, as given.

    Raises:
        ValueError: unparsable, MIN > MAX, MIN or MAX not a power of two, above 1 GiB.
    """
    if isinstance(spec, (list, tuple)):
        sizes = [parse_size(s) for s in spec]
        if not sizes:
            raise ValueError(_("no sizes given"))
    else:
        text = str(spec)
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 2:
                raise ValueError(_("--sizes {value}: write MIN:MAX, e.g. 1K:64M").format(value=repr(text)))
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            if lo > hi:
                raise ValueError(_("--sizes {value}: MIN ({lo} B) is larger than MAX ({hi} B); write the "
                                   "smaller size first, e.g. {example}").format(
                                       value=repr(text), lo=lo, hi=hi, example=f"{parts[1]}:{parts[0]}"))
            for name, v in (("MIN", lo), ("MAX", hi)):
                if v & (v - 1):
                    raise ValueError(_("--sizes {value}: {name} ({n} B) is not a power of two; the sweep "
                                       "doubles from MIN to MAX (e.g. 1K:64M)").format(value=repr(text), name=name, n=v))
            sizes = []
            n = lo
            while n <= hi:
                sizes.append(n)
                n *= 2
        else:
            sizes = [parse_size(text)]
    big = [s for s in sizes if s > MAX_BYTES]
    if big:
        raise ValueError(_("sizes above {most} per rank are not measured here; got {n} B").format(
            most=format_bytes(MAX_BYTES), n=big[0]))
    return sorted(set(sizes))


def check_algorithms(primitive: str, algorithms: str | Iterable[object]) -> tuple[str, ...]:
    """The algorithm names to bench for ``primitive``: ``"builtin"`` and/or names from
    :func:`collnb.algorithms.algorithms_for` (``"all"``: builtin plus every one).

    Returns:
        tuple of names, each once, in the order given.

    Raises:
        TypeError / ValueError: a primitive without a bus bandwidth (:data:`PRIMITIVES`), or an
            algorithm the primitive does not have, with the words of
            :func:`collnb.vocabulary.check_choice` (which list the valid names).
    """
    check_choice(N_("primitive with a bus bandwidth"), primitive, PRIMITIVES)
    if isinstance(algorithms, str):
        algorithms = (algorithms,)
    valid = ("builtin",) + (algorithms_for(primitive) if primitive in ALGORITHMS else ())
    out: list[str] = []
    for a in algorithms:
        out.extend(valid if a == "all" else (check_choice(_("algorithm for {primitive}").format(primitive=primitive), a, valid),))
    if not out:
        raise ValueError(_("no algorithm given; valid for {primitive}: {valid}").format(
            primitive=primitive, valid=", ".join(valid)))
    return tuple(dict.fromkeys(out))


def timed_spec(primitive: str) -> PrimitiveSpec:
    """The spec row whose call the bench times for ``primitive`` (a name of :data:`PRIMITIVES`):
    nccl-tests' one flat buffer (``all_gather`` is timed as ``all_gather_single``,
    :attr:`collnb.collectives.PrimitiveSpec.timed_as`)."""
    spec = SPECS[primitive]
    return SPECS[spec.timed_as or primitive]


def blocked(primitive: str) -> bool:
    """Whether ``primitive``'s buffer is cut into one block per rank: True unless every output chunk
    is made from the same chunk of the inputs, in one flat tensor (all_reduce, broadcast, reduce:
    where the buffer is cut changes nothing, so it is one block of any size)."""
    spec, timed = SPECS[primitive], timed_spec(primitive)
    if any(b.form == "tensors" for b in timed.buffers):
        return True
    ws, root = 4, 0
    return any(spec.n_in(ws, r, root) != spec.n_out(ws, r, root)
               or any(j != k for k in range(spec.n_out(ws, r, root)) for _, j in spec.sources(ws, r, root, k))
               for r in range(ws))


def counts(primitive: str, nbytes: int, world_size: int, esize: int) -> tuple[int, int]:
    """(elements of the nccl-tests 'size' buffer, elements per block). Blocked primitives
    (:func:`blocked`) round down to a multiple of the world size, as nccl-tests does. ``nbytes``:
    bytes per rank; ``esize``: bytes per element."""
    count = nbytes // esize
    cut = blocked(primitive)
    if cut:
        count = count // world_size * world_size
    return count, (count // world_size if cut else count)


def bench_dtype(dtype: object) -> torch.dtype:
    """``torch.dtype`` from a dtype or its name (``None``: float32), checked by
    :func:`collnb.vocabulary.dtype_name` (TypeError / ValueError with its words)."""
    dt: torch.dtype = getattr(torch, dtype_name(dtype if dtype is not None else torch.float32))
    return dt


def check_world_sizes(world_sizes: object, backend: str) -> tuple[int, ...]:
    """The world sizes to measure, as a tuple of ints: an int or a non-empty sequence of them, each
    ``1..MAX_WORLD_SIZE`` (NCCL: at most the visible GPUs), checked before any rank starts.

    Raises:
        TypeError / ValueError: as :func:`collnb.ranks.check_ranks` (the check every entry point that
            starts ranks makes); ValueError for an empty sequence.
        RuntimeError: the backend cannot run here (e.g. NCCL without CUDA), with the reason.
    """
    return plan_world_sizes(world_sizes, backend)[0]


def plan_world_sizes(world_sizes: object, backend: str, options: Mapping[str, object] | None = None, *,
                     where: str = "collnb.bench") -> tuple[tuple[int, ...], dict[int, LaunchPlan]]:
    """:func:`check_world_sizes`, and each world size's launch checked once, with the launch
    ``options`` (:class:`collnb.ranks.LaunchOptions`): ``(world sizes, {world size: plan})``, the
    plans as :func:`collnb.ranks.plan_launch` makes them, for :func:`collnb.ranks.launch_planned`
    (every launch at that world size) and :func:`check_dtype`.

    Raises:
        as :func:`check_world_sizes` and :func:`collnb.ranks.plan_launch` (``where`` is named).
    """
    check_backend(backend)
    # anything but a sequence is one world size, refused with check_ranks' words if it is not an int
    given = tuple(world_sizes) if isinstance(world_sizes, Iterable) and not isinstance(world_sizes, str) else (world_sizes,)
    if not given:
        raise ValueError(_("no world size given"))
    plans: dict[int, LaunchPlan] = {}
    for ws in given:
        plan = plan_launch(ws, backend, options, where=where)
        plans.setdefault(plan.world_size, plan)
    return tuple(int(ws) for ws in given), plans


def check_dtype(primitive: str, algorithms: Collection[str], dt: torch.dtype, backend: str,
                plan: LaunchPlan | None = None) -> None:
    """Refuse a dtype ``backend`` cannot run ``primitive`` on (detected on real ranks by
    :func:`collnb.backend_support`; for ``plan``'s backend and options where a launch was planned
    already): ValueError naming the dtypes it accepts."""
    sup = support_for(plan) if plan is not None else backend_support(backend)
    name = str(dt).replace("torch.", "")
    checks = []
    if "builtin" in algorithms:
        checks.append(timed_spec(primitive).name)
    if any(a != "builtin" for a in algorithms):
        checks.append("send_recv")
    for prim in checks:
        op = "sum" if SPECS[prim].reduces else None
        if not sup.supports(prim, name, op):
            raise ValueError(_("{backend} cannot run {primitive} on {dtype} tensors (detected on real ranks: "
                               "{error}); dtypes it accepts: {valid}").format(
                                   backend=backend, primitive=prim, dtype=name, error=sup.error(prim, name, op),
                                   valid=", ".join(sup.dtypes(prim))))
