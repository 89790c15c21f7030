"""Which primitive x dtype x op combinations a backend accepts, detected on real ranks of the
installed torch (:func:`backend_support`), with its cache in memory and on disk.

Never taken from a document: for example the original examples' page says Gloo lacks
``reduce_scatter`` and the list form of ``all_to_all``; torch 2.13's Gloo has both, and the
detection reports that.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .. import ranks
from ..vocabulary import DTYPE_NAMES, REDUCE_OPS, Backend, check_backend, dtype_name, op_name
from . import inputs, rank_calls, specs
from .inputs import teaching_inputs
from .rank_calls import Case, rank_probe
from .specs import PRIMITIVES, SPECS, get_spec

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..ranks import LaunchOptions

__all__ = ["BackendSupport", "backend_support", "known_support", "SupportKey", "saved_probe_state"]

#: One trial of a probe: ``(primitive, dtype name or None, op name or None)``.
SupportKey = tuple[str, str | None, str | None]


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
    results: dict[SupportKey, str | None]
    seconds: float = 0.0
    source: str = "probe"

    def primitives(self) -> tuple[str, ...]:
        """Primitives that ran for at least one dtype (and op)."""
        return tuple(p for p in PRIMITIVES if any(k[0] == p and v is None for k, v in self.results.items()))

    def dtypes(self, primitive: str) -> tuple[str, ...]:
        """Dtype names ``primitive`` accepts (with at least one op, if it reduces). Object
        primitives and ``barrier`` take no dtype: ``()``."""
        return tuple(d for d in DTYPE_NAMES
                     if any(k[0] == primitive and k[1] == d and v is None for k, v in self.results.items()))

    def ops(self, primitive: str, dtype: object) -> tuple[str, ...]:
        """Reduce op names ``primitive`` accepts for ``dtype`` (``()`` if it does not reduce)."""
        d = dtype_name(dtype)
        return tuple(o for o in REDUCE_OPS if self.results.get((primitive, d, o), "missing") is None)

    def supports(self, primitive: str, dtype: object = None, op: object = None) -> bool:
        """Whether ``primitive`` ran with that dtype (and op)."""
        spec = get_spec(primitive)
        if spec.kind in ("object", "time"):
            return self.results.get((primitive, None, None), "missing") is None
        d = dtype_name(dtype)
        o = op_name(op) if spec.reduces else None
        return self.results.get((primitive, d, o), "missing") is None

    def error(self, primitive: str, dtype: object = None, op: object = None) -> str | None:
        """The backend's error for that combination (``None`` if it ran)."""
        spec = get_spec(primitive)
        d = None if spec.kind in ("object", "time") else dtype_name(dtype)
        o = op_name(op) if spec.reduces else None
        return self.results.get((primitive, d, o))


_support_cache: dict[str, BackendSupport] = {}
_support_lock = threading.Lock()
#: One probe at a time per backend: a second caller waits for the probe under way and takes its answer.
_probe_locks = {b: threading.Lock() for b in ("gloo", "nccl")}


#: The modules whose source decides what a probe finds: the table, the inputs, the rank calls, this.
_PROBE_SOURCES = (specs.__file__, inputs.__file__, rank_calls.__file__, __file__)


def _disk_key(backend: str) -> dict[str, object]:
    """What a saved probe must match: torch's version and binary, the probing modules' source, the backend."""
    tdir = os.path.dirname(torch.__file__)
    libs = sorted(glob.glob(os.path.join(tdir, "lib", "libtorch_cpu*")) + glob.glob(os.path.join(tdir, "_C*.so")))
    stamp = [(os.path.basename(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in libs]
    digest = hashlib.sha256()
    for path in _PROBE_SOURCES:
        with open(path, "rb") as f:
            digest.update(f.read())
    return {"torch": torch.__version__, "libs": stamp, "collnb_collectives": digest.hexdigest(), "backend": backend}


def _disk_path(backend: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "collnb", f"support-{backend}.json")


def _disk_enabled() -> bool:
    return os.environ.get("COLLNB_SUPPORT_CACHE", "1") not in ("0", "", "no", "false")


def _key_of(text: str) -> SupportKey:
    """A saved trial's key ``"primitive|dtype|op"`` (``""`` for None) as a :data:`SupportKey`
    (ValueError when it has not three parts)."""
    p, d, o = text.split("|")
    return (p, d or None, o or None)


def _load_disk(backend: str) -> BackendSupport | None:
    try:
        with open(_disk_path(backend)) as f:
            data = json.load(f)
        if data.get("key") != json.loads(json.dumps(_disk_key(backend))):
            return None
        results = {_key_of(k): v for k, v in data["results"].items()}
        return BackendSupport(backend=backend, torch_version=data["key"]["torch"], world_size=data["world_size"],
                              results=results, seconds=0.0, source=f"saved probe ({_disk_path(backend)})")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_disk(sup: BackendSupport) -> None:
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


def _probe_trials() -> list[SupportKey]:
    trials: list[SupportKey] = []
    for p, spec in SPECS.items():
        if spec.kind in ("object", "time"):
            trials.append((p, None, None))
        elif spec.reduces:
            trials += [(p, d, o) for d in DTYPE_NAMES for o in REDUCE_OPS]
        else:
            trials += [(p, d, None) for d in DTYPE_NAMES]
    return trials


def backend_support(backend: str = "gloo", *, refresh: bool = False,
                    **launch_kwargs: Unpack[LaunchOptions]) -> BackendSupport:
    """Detect, on real ranks of the installed torch, which primitive x dtype x op combinations
    ``backend`` accepts.

    One :func:`collnb.ranks.launch` at world size 2 (1 if only one GPU is visible for NCCL)
    runs every combination once with the teaching inputs (barrier without its stagger), catching
    each trial's error inside the ranks (~840 trials, on groups without DETAIL's per-collective
    check, as :func:`~.primitives.run`'s: :func:`collnb.ranks.same_on_every_rank`). The result is cached per process and backend (thread-safe) and saved to
    ``~/.cache/collnb/support-BACKEND.json``, reused only while torch's version and binary and
    collnb's probing code are unchanged (set ``COLLNB_SUPPORT_CACHE=0`` to never use the file).
    ``refresh=True`` probes again.

    Args:
        backend: ``"gloo"`` or ``"nccl"``.
        launch_kwargs: passed to :func:`collnb.ranks.launch` (``timeout``,
            ``collective_timeout``, ``debug``, ``start_method``).

    Returns:
        :class:`BackendSupport`.

    Raises:
        TypeError, ValueError: not a backend name (:func:`collnb.vocabulary.check_backend`).
        TypeError: a launch option that is not one of :class:`collnb.ranks.LaunchOptions`
            (:func:`collnb.ranks.check_launch_options`), even when the answer is cached.
        RuntimeError: the backend cannot run here (the launcher's reason, e.g. NCCL without CUDA).
        collnb.ranks.LaunchError: the probe itself failed.
    """
    plan = ranks.plan_launch(1, backend, launch_kwargs, where="collnb.backend_support")
    return support_for(plan, refresh=refresh)


def support_for(plan: ranks.LaunchPlan, refresh: bool = False) -> BackendSupport:
    """:func:`backend_support` for the backend of ``plan``, a launch checked where it entered
    (:func:`collnb.ranks.plan_launch`): a probe runs with its options at world size 2 (or 1)."""
    backend = plan.setup.backend
    if not refresh:
        sup = known_for(backend)
        if sup is not None:
            return sup
    with _probe_locks[backend]:
        if not refresh:  # a probe that ran while this call waited for the lock answers it
            with _support_lock:
                if backend in _support_cache:
                    return _support_cache[backend]
        return _probe(plan)


def known_support(backend: str = "gloo") -> BackendSupport | None:
    """What :func:`backend_support` answers without probing: the answer kept in this process, else the
    saved probe while it is current (torch and collnb's probing code unchanged); ``None`` when only a
    probe on real ranks can tell (the first use after an install or upgrade). Never starts a rank.

    Raises:
        TypeError, ValueError: not a backend name (:func:`collnb.vocabulary.check_backend`).
        TypeError: a launch option that is not one of :class:`collnb.ranks.LaunchOptions`
            (:func:`collnb.ranks.check_launch_options`), even when the answer is cached.
    """
    return known_for(check_backend(backend))


def known_for(backend: Backend) -> BackendSupport | None:
    """:func:`known_support` of a checked ``backend``."""
    with _support_lock:
        if backend in _support_cache:
            return _support_cache[backend]
    if _disk_enabled():
        sup = _load_disk(backend)
        if sup is not None:
            with _support_lock:
                _support_cache[backend] = sup
            return sup
    return None


def saved_probe_state(backend: str = "gloo") -> dict[str, object]:
    """What the saved probe of ``backend`` is worth now, read without starting a rank (``collnb doctor``).

    Returns:
        ``{"path": str, "state": str, "trials": int, "refused": int, "saved_torch": str | None, "torch": str,
        "mtime": float | None, "error": str}`` (``torch``: the installed one) where ``state`` is ``"current"``
        (used as it is),
        ``"absent"`` (nothing saved: the first request that needs the answer probes, 2-4 s on 2
        cores), ``"stale-torch"`` (saved for another torch version or binary), ``"stale-collnb"``
        (saved by other probing code of collnb), ``"unreadable"`` (``error`` says why) or
        ``"disabled"`` (``COLLNB_SUPPORT_CACHE=0``); ``trials`` and ``refused`` count the saved
        answers (0 unless current or stale) and ``mtime`` is the file's modification time (s since the epoch).

    Raises:
        TypeError, ValueError: not a backend name (:func:`collnb.vocabulary.check_backend`).
    """
    check_backend(backend)
    path = _disk_path(backend)
    out: dict[str, object] = {"path": path, "state": "absent", "trials": 0, "refused": 0, "saved_torch": None,
                              "torch": torch.__version__, "mtime": None, "error": ""}
    if not _disk_enabled():
        out["state"] = "disabled"
        return out
    try:
        out["mtime"] = os.stat(path).st_mtime
        with open(path) as f:
            data = json.load(f)
        key, results = data["key"], data["results"]
        out.update(saved_torch=key["torch"], trials=len(results),
                   refused=sum(v is not None for v in results.values()))
    except FileNotFoundError:
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out.update(state="unreadable", error=f"{type(exc).__name__}: {exc}")
        return out
    now = json.loads(json.dumps(_disk_key(backend)))
    if (key.get("torch"), key.get("libs")) != (now["torch"], now["libs"]):
        out["state"] = "stale-torch"
    elif key != now:
        out["state"] = "stale-collnb"
    else:
        out["state"] = "current"
    return out


def _probe(plan: ranks.LaunchPlan) -> BackendSupport:
    """Every trial of :func:`_probe_trials` on real ranks of ``plan``'s backend, with its options
    (kept in memory and on disk)."""
    backend = plan.setup.backend
    ws = min(2, plan.facts["max_world_size"])
    trials = _probe_trials()
    cases = [Case(primitive=p, dtype=d or "float32", op=o or "sum", root=0, chunk_size=1,
                  inputs=teaching_inputs(p, ws, 0), stagger_s=0.0) for p, d, o in trials]
    t0 = time.perf_counter()
    outcomes = ranks.launch_planned(dataclasses.replace(plan, world_size=ws), rank_probe, (cases, backend))
    seconds = time.perf_counter() - t0
    results: dict[SupportKey, str | None] = {}
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
