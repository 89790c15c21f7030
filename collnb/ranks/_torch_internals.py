"""Every use collnb makes of torch's private internals, in one place.

Warm ranks serve many calls at many world sizes from one set of processes, which torch.distributed's
public API does not offer: it has no way to make an existing group the default one, to start group
names from a value every rank agrees on, or to give one call's groups a fresh rendezvous namespace.
Each function below says which public API is missing. Every private name they use is listed in
:data:`PRIVATE_NAMES` with the feature that needs it, the public API torch lacks, and the releases
where it was checked (all present in 2.13.0 and 2.15.0, the floor and the newest of
:data:`collnb.torch_versions.TESTED`). :func:`missing` resolves each on the installed torch; a
feature whose name is missing says so in one line (:func:`require`) and the rest of collnb works.
When torch changes one of them, this is the only module to change.

The other modules use torch's public API only, and name no private torch path even in prose (they cite
:data:`SHARD_DIM_ALLTOALL` and the like): ``tests/test_torch_internals.py`` checks both.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, cast

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as distributed_c10d
from torch._ops import OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from torch.utils._device import DeviceContext

__all__ = ["PRIVATE_NAMES", "PrivateName", "missing", "require", "OpOverload", "OpOverloadPacket", "TorchDispatchMode",
           "functional_op", "profiler_ops", "forget_logged_once", "forget_dtensor_caches", "flatten_mesh",
           "all_to_all_single_autograd", "debug_mode_class", "FUNCTIONAL_COLLECTIVES_MODULE", "SHARD_DIM_ALLTOALL",
           "ALL_TO_ALL_AUTOGRAD", "DEBUG_MODE", "flight_recorder_dump", "flight_recorder_json", "distributed_c10d",
           "set_default_group", "set_group_count", "group_count", "live_groups", "call_store", "destroy_all_groups",
           "sequence_number", "patch_default_timeout", "has_internal_overlap", "MKLDNN_LAYOUT", "unbox_group", "resolve_group",
           "unbox_work", "dispatch_mode_stack", "default_device_context", "set_default_device_context", "mode_stack_depths",
           "pop_modes", "print_options", "backend_flag_readers", "DefaultTimeout", "PrintOptions", "argument_names",
           "work_source_rank", "DistributedFiles", "distributed_files"]

class PrivateName(NamedTuple):
    """One private torch name collnb relies on.

    Attributes:
        name: its dotted path (``"torch.distributed.distributed_c10d._world.pg_map"``).
        feature: what of collnb needs it (English, for the one-line message of :func:`require`).
        missing_api: the public API torch does not have that would replace it.
        checked: the torch releases where it was seen present.
    """

    name: str
    feature: str
    missing_api: str
    checked: str


_BOTH = "2.13.0, 2.15.0"
_C10D = "torch.distributed.distributed_c10d"
#: Every private torch name collnb uses, each used in this module only.
PRIVATE_NAMES: tuple[PrivateName, ...] = (
    PrivateName(f"{_C10D}._world.pg_map", "warm ranks (reusing groups between calls)",
                "a list of the live process groups", _BOTH),
    PrivateName(f"{_C10D}._world.group_count", "warm ranks (group names every rank agrees on)",
                "setting the next group's number", _BOTH),
    PrivateName(f"{_C10D}._update_default_pg", "warm ranks at a smaller world size",
                "making an existing group the default one", _BOTH),
    PrivateName(f"{_C10D}._get_default_timeout", "the launch's collective timeout for groups made without timeout=",
                "a default timeout per process", _BOTH),
    PrivateName("torch.distributed.ProcessGroup._get_sequence_number_for_group", "recorded calls and hang reports",
                "a group's collective sequence number", _BOTH),
    PrivateName("torch.distributed.ProcessGroup.unbox", "recording calls (record_calls=True)",
                "the ProcessGroup behind a dispatched operator's ScriptObject", _BOTH),
    PrivateName("torch.distributed.Work.unbox", "recording calls (record_calls=True)",
                "the Work behind a dispatched operator's ScriptObject", _BOTH),
    PrivateName("torch._C._distributed_c10d._resolve_process_group", "recording functional collectives",
                "a group from its name", _BOTH),
    PrivateName("torch._ops.OpOverload", "recording calls (record_calls=True)",
                "a public type of dispatched operators", _BOTH),
    PrivateName("torch._ops.OpOverloadPacket", "the timeline (timeline=True)",
                "a public type of operator packets", _BOTH),
    PrivateName("torch.utils._python_dispatch.TorchDispatchMode", "recording calls (record_calls=True)",
                "a public dispatch-mode base class", _BOTH),
    PrivateName("torch.utils._python_dispatch._get_current_dispatch_mode_stack", "recording beside CommDebugMode",
                "the active dispatch modes", _BOTH),
    PrivateName("torch.utils._python_dispatch._pop_mode", "a rank's clean state between calls",
                "leaving a mode a call entered and never left", _BOTH),
    PrivateName("torch.ops._c10d_functional.wait_tensor", "recording functional collectives",
                "the functional collectives' wait operator", _BOTH),
    PrivateName("torch.ops.profiler._record_function_enter_new", "the timeline (timeline=True)",
                "torch.profiler.record_function's operators", _BOTH),
    PrivateName("torch.ops.profiler._record_function_exit", "the timeline (timeline=True)",
                "torch.profiler.record_function's operators", _BOTH),
    PrivateName("torch._debug_has_internal_overlap", "gloo's odd layouts fixed (check_layout)",
                "whether a tensor's elements share memory", _BOTH),
    PrivateName("torch._mkldnn", "returning an MKL-DNN tensor from a rank", "the MKL-DNN layout's name", _BOTH),
    PrivateName("torch._GLOBAL_DEVICE_CONTEXT", "a rank's clean state between calls",
                "reading and restoring torch.set_default_device", _BOTH),
    PrivateName("torch._C._len_torch_function_stack", "a rank's clean state between calls",
                "the depth of the torch-function mode stack", _BOTH),
    PrivateName("torch._C._len_torch_dispatch_stack", "a rank's clean state between calls",
                "the depth of the dispatch mode stack", _BOTH),
    PrivateName("torch._C._pop_torch_function_stack", "a rank's clean state between calls",
                "leaving a torch-function mode a call entered", _BOTH),
    PrivateName("torch._tensor_str.PRINT_OPTS", "a rank's clean state between calls", "torch.get_printoptions", _BOTH),
    PrivateName("torch._logging.warning_once", "torch's log lines shown for every redistribute",
                "forgetting a warning logged once", _BOTH),
    PrivateName("torch.distributed.tensor._redistribute", "torch's log lines shown for every redistribute",
                "forgetting DTensor's flattening warning", _BOTH),
    *(PrivateName(n, "a rank's clean state between calls", "forgetting DTensor's mesh-keyed caches", _BOTH) for n in (
        "torch._C._clear_DTensor_sharding_propagator_cache", "torch.distributed.tensor.DTensor._op_dispatcher",
        "torch.distributed.tensor._redistribute._gen_transform_infos")),
    PrivateName("torch.distributed.device_mesh.DeviceMesh._flatten", "notebook 20", "flattening mesh dimensions", _BOTH),
    PrivateName("torch.distributed._functional_collectives.all_to_all_single_autograd", "notebook 20", "an autograd all_to_all", _BOTH),
    PrivateName("torch.utils._debug_mode.DebugMode", "notebook 20: DTensor's trace", "DTensor's DebugMode", _BOTH),
    PrivateName("torch.distributed._functional_collectives", "a rank's clean state between calls (watched module)",
                "a public module of the functional collectives", _BOTH),
    PrivateName("torch._C.FunctionSchema", "recording calls (an operator's argument names, OpOverload._schema)",
                "the argument names of a dispatched operator", _BOTH),
    PrivateName("torch.distributed.Work._source_rank", "recording calls (the peer of a recv from any source)",
                "the rank a recv without src= received from", _BOTH),
    PrivateName("torch.distributed._functional_collectives_impl",
                "recording calls (a functional collective told by its file, _functional_collectives*.py)",
                "telling which API issued a dispatched collective", _BOTH),
    PrivateName("torch._C._distributed_c10d._dump_fr_trace", "the Flight Recorder dump of gloo ranks (notebook 18)",
                "dumping a gloo process's Flight Recorder", _BOTH + " (backend= from 2.15)"),
    PrivateName("torch._C._distributed_c10d._dump_fr_trace_json", "launch(flight_recorder=N)",
                "dumping a gloo process's Flight Recorder", _BOTH + " (backend= from 2.15)"),
)
_BY_NAME = {p.name: p for p in PRIVATE_NAMES}


def _resolve(name: str) -> bool:
    """Whether dotted ``name`` exists on the installed torch (modules imported as needed)."""
    import importlib  # noqa: PLC0415

    parts = name.split(".")
    obj: object = None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        rest = parts[i:]
        break
    else:
        return False
    for attr in rest:
        try:
            obj = getattr(obj, attr)
        except (AttributeError, RuntimeError):  # torch.ops raises RuntimeError for an unknown operator
            return False
    return True


def missing() -> list[PrivateName]:
    """The entries of :data:`PRIVATE_NAMES` the installed torch does not have (``[]`` on every tested release)."""
    return [p for p in PRIVATE_NAMES if not _resolve(p.name)]


def require(name: str) -> None:
    """Raise, in one line, when the installed torch lacks private ``name`` (an entry of :data:`PRIVATE_NAMES`).

    Raises:
        RuntimeError: "collnb's FEATURE needs torch's NAME, which torch VERSION does not have (it has no
            public API for MISSING); tested releases: ...".
        KeyError: ``name`` is not in :data:`PRIVATE_NAMES`.
    """
    p = _BY_NAME[name]
    if not _resolve(name):
        raise RuntimeError(f"collnb's {p.feature} needs torch's {name}, which torch {torch.__version__} does not "
                           f"have (torch has no public API for {p.missing_api}); checked on torch {p.checked}")


#: The functional collectives' module, a private one that a rank watches (a call must leave it as it found it).
FUNCTIONAL_COLLECTIVES_MODULE = "torch.distributed._functional_collectives"
#: Private places the lessons cite as the source of a fact (collnb's other modules name these constants).
SHARD_DIM_ALLTOALL = "torch.distributed.tensor._collective_utils.shard_dim_alltoall"
ALL_TO_ALL_AUTOGRAD, DEBUG_MODE = f"{FUNCTIONAL_COLLECTIVES_MODULE}.all_to_all_single_autograd", "torch.utils._debug_mode.DebugMode"


def functional_op(name: str) -> OpOverload:
    """``torch.ops._c10d_functional.<name>.default`` (``"wait_tensor"``): a functional collective's operator.
    Missing public API: the functional collectives' operators have no public namespace."""
    op: OpOverload = getattr(torch.ops._c10d_functional, name).default
    return op


def profiler_ops() -> tuple[OpOverloadPacket, OpOverloadPacket]:
    """The operators ``torch.profiler.record_function`` dispatches on enter and exit (they pass dispatch modes).
    Missing public API: they are ``torch.ops.profiler``'s private operators."""
    return torch.ops.profiler._record_function_enter_new, torch.ops.profiler._record_function_exit


def forget_logged_once() -> None:
    """Forget the warnings torch logs once per process (``torch._logging.warning_once``'s cache and DTensor's
    "2 sequential all_gathers" set), so that each redistribute shows the lines torch logs for it.
    Missing public API: resetting torch's once-per-process warnings."""
    once: Any = getattr(getattr(torch, "_logging", None), "warning_once", None)
    if once is not None and hasattr(once, "cache_clear"):
        once.cache_clear()
    try:
        from torch.distributed.tensor import _redistribute  # noqa: PLC0415
        getattr(_redistribute, "_warned_flatten_issues", set()).clear()
    except ImportError:
        pass


def forget_dtensor_caches() -> None:
    """Forget DTensor's mesh-keyed caches (sharding propagation in C++ and Python, redistribute plans):
    ``DeviceMesh.__eq__`` ignores process groups, so after a call's groups are destroyed the next call's
    equal mesh got the old one back and failed ("Could not resolve the process group registered under
    the name ..."; every second 2x2 FSDP2 x TP launch on warm ranks). Missing public API: clearing them."""
    if "torch.distributed.tensor" not in sys.modules:
        return
    from torch.distributed.tensor import DTensor, _redistribute  # noqa: PLC0415

    getattr(torch._C, "_clear_DTensor_sharding_propagator_cache", lambda: None)()
    prop = getattr(getattr(DTensor, "_op_dispatcher", None), "sharding_propagator", None)
    for cached in (getattr(prop, "propagate_op_sharding", None), getattr(prop, "_propagate_tensor_meta_cached", None),
                   getattr(_redistribute, "_gen_transform_infos", None)):
        getattr(cached, "cache_clear", lambda: None)()


def flatten_mesh(mesh: Any, name: str) -> Any:
    """``mesh`` (several dimensions) flattened into one named ``name`` (``DeviceMesh._flatten``, as torchtitan)."""
    return mesh._flatten(name)


def all_to_all_single_autograd(x: torch.Tensor, group: Any) -> torch.Tensor:
    """A differentiable even-split ``all_to_all_single`` over ``group`` (an AsyncCollectiveTensor). Missing
    public API: ``torch.distributed.nn.functional.all_to_all_single`` is deprecated for this private one."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd as a2a  # noqa: PLC0415
    return a2a(x.contiguous(), None, None, group)


def debug_mode_class() -> Any:
    """DTensor's ``DebugMode`` or ``None``. Missing public API: DebugMode is a prototype in a private module."""
    import importlib.util  # noqa: PLC0415
    module = DEBUG_MODE.rpartition(".")[0]
    return importlib.import_module(module).DebugMode if importlib.util.find_spec(module) else None


# ``distributed_c10d`` itself: ``torch.distributed`` re-exports its public functions, but torch's own
# code calls them through this module, so code that replaces one (the exercises count the learner's
# ``get_world_size()`` queries; collnb._dist_hooks wraps the collectives) must replace both names.
# Missing public API: a supported way to intercept torch.distributed calls.

#: The layout of MKL-DNN tensors. Missing public API: torch exposes it only as ``torch._mkldnn``.
MKLDNN_LAYOUT: torch.layout = torch._mkldnn  # type: ignore[attr-defined]  # set from torch._C at import; torch's stubs declare it only there


#: torch's ``_get_default_timeout(backend)``: the timeout of a group made without ``timeout=``.
DefaultTimeout = Callable[[dist.Backend], datetime.timedelta]


class PrintOptions(TypedDict):
    """The keyword arguments of ``torch.set_printoptions`` that :func:`print_options` reads (the
    attributes of ``torch._tensor_str.PRINT_OPTS``)."""

    precision: int
    threshold: float
    edgeitems: int
    linewidth: int
    sci_mode: bool | None


def set_default_group(pg: dist.ProcessGroup | int | None) -> None:
    """Make ``pg`` (a ``ProcessGroup``, ``None``, or the int ``GroupMember.NON_GROUP_MEMBER`` that
    ``new_group`` gives a rank outside the group) the default group: what ``dist.get_rank()``,
    ``dist.get_world_size()`` and collectives without ``group=`` use.

    Missing public API: a way to run with a subgroup as the default group (a warm pool of 16 ranks
    runs a call at world size 4 inside a cached ``new_group`` of ranks 0..3; re-initialising the
    default group instead costs 35-110 ms per change). Uses ``c10d._update_default_pg``."""
    distributed_c10d._update_default_pg(pg)  # type: ignore[arg-type]  # torch's annotation omits NON_GROUP_MEMBER; its body handles it


def set_group_count(count: int) -> None:
    """Set torch's counter that names new groups (``new_group`` names a group by this count).

    Missing public API: every rank of a call must start at the same value, whatever groups earlier
    calls made on some ranks only, or their group names (and rendezvous keys) disagree. Uses
    ``c10d._world.group_count``."""
    distributed_c10d._world.group_count = count


def group_count() -> int:
    """Torch's counter that names new groups (see :func:`set_group_count`): ``new_group`` advances it
    on every rank that calls it, members or not (``use_local_synchronization=True`` does not).

    Missing public API: the same as :func:`set_group_count`'s."""
    return distributed_c10d._world.group_count


def live_groups() -> set[dist.ProcessGroup]:
    """The process groups torch currently knows on this rank (a set of ``ProcessGroup``).

    Missing public API: a list of existing groups (to destroy, after a call, the groups its
    function made). Uses ``c10d._world.pg_map``."""
    return set(distributed_c10d._world.pg_map)


@contextlib.contextmanager
def call_store(prefix: str) -> Iterator[None]:
    """Within the block, groups created on the default group rendezvous under keys prefixed
    ``prefix`` (a str such as ``"call3000/"``), so a call that makes the same groups as an earlier
    one (group names are hashed from ranks) starts from clean keys.

    Missing public API: a store argument to ``new_group``. Replaces the default group's store in
    ``c10d._world.pg_map`` by a :class:`torch.distributed.PrefixStore` and puts it back after."""
    pg_map = distributed_c10d._world.pg_map
    default = cast(dist.ProcessGroup, dist.group.WORLD)  # called with a default group; None would fail below as before
    entry = pg_map[default]
    pg_map[default] = (entry[0], dist.PrefixStore(prefix, entry[1]))
    try:
        yield
    finally:
        if default in distributed_c10d._world.pg_map:  # the function may have destroyed it
            distributed_c10d._world.pg_map[default] = entry


def destroy_all_groups(base: dist.ProcessGroup | None) -> None:
    """Destroy every process group of this rank: the pool's (``base``, made the default again so
    torch's bookkeeping agrees) and any the function made, even a default group of its own.

    Missing public API: ``dist.destroy_process_group()`` destroys only what the default group's
    records list, and fails when a call swapped the default group. Uses ``c10d._world.pg_map``
    and ``c10d._update_default_pg``."""
    if not dist.is_initialized():
        return
    if base is not None and base in distributed_c10d._world.pg_map:
        distributed_c10d._update_default_pg(base)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - torch's records disagree: destroy what is there, one by one
        for g in list(distributed_c10d._world.pg_map):
            try:
                dist.destroy_process_group(g)
            except Exception:  # noqa: BLE001
                pass
        distributed_c10d._update_default_pg(None)


def sequence_number(group: dist.ProcessGroup | None = None) -> int | None:
    """How many collectives and point-to-point operations this rank has issued on ``group``
    (default: its default group) (int), or ``None`` when there is none. Ranks that sent/received
    unevenly disagree, and with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` the next collective on that
    group would fail its fingerprint check.

    Missing public API: the count is private (``ProcessGroup._get_sequence_number_for_group``)."""
    try:
        count: int = (dist.group.WORLD if group is None else group)._get_sequence_number_for_group()  # type: ignore[union-attr]  # no default group raises, caught below
        return count
    except Exception:  # noqa: BLE001 - no default group (the function destroyed it)
        return None


def unbox_group(obj: dist.ProcessGroup | torch.ScriptObject) -> dist.ProcessGroup:
    """The :class:`torch.distributed.ProcessGroup` of a ``c10d`` operator's ``process_group``
    argument (a ``torch.ScriptObject``; a ``ProcessGroup`` is returned as it is).

    Missing public API: a dispatch mode sees the group boxed; torch unboxes it with the private
    ``ProcessGroup.unbox``."""
    return obj if isinstance(obj, dist.ProcessGroup) else dist.ProcessGroup.unbox(obj)


def resolve_group(name: str | dist.ProcessGroup | torch.ScriptObject) -> dist.ProcessGroup:
    """The :class:`torch.distributed.ProcessGroup` a functional collective names (its
    ``group_name`` argument: a group name, or a group).

    Missing public API: ``torch._C._distributed_c10d._resolve_process_group``, what the functional
    collectives use themselves."""
    if isinstance(name, str):
        return torch._C._distributed_c10d._resolve_process_group(cast("distributed_c10d.GroupName", name))  # torch's NewType of str
    return unbox_group(name)


def unbox_work(obj: dist.Work | torch.ScriptObject) -> dist.Work:
    """The :class:`torch.distributed.Work` of a ``c10d`` operator's result (a ``torch.ScriptObject``).

    Missing public API: the private ``Work.unbox``."""
    return obj if isinstance(obj, dist.Work) else dist.Work.unbox(obj)


def dispatch_mode_stack() -> list[TorchDispatchMode]:
    """The ``TorchDispatchMode`` objects active in this thread, innermost (first to run) last.

    Missing public API: ``torch.utils._python_dispatch._get_current_dispatch_mode_stack``."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return _get_current_dispatch_mode_stack()


def patch_default_timeout(
        timeout_for: Callable[[dist.Backend, DefaultTimeout], datetime.timedelta],
) -> tuple[ModuleType, str, DefaultTimeout]:
    """Make groups created without ``timeout=`` (also inside ``DeviceMesh``, ``new_subgroups``,
    ``split_group``) and ``monitored_barrier`` without one take their timeout from
    ``timeout_for(backend, previous)``, a function returning a ``datetime.timedelta``
    (``previous(backend)`` is torch's own default). Returns ``(module, name, previous)`` so the
    caller can put torch's function back with ``setattr``.

    Missing public API: a process-wide default timeout for new groups (torch's is 30 minutes;
    ``init_process_group(timeout=)`` does not reach groups made later). Replaces
    ``c10d._get_default_timeout``."""
    previous = distributed_c10d._get_default_timeout

    def _get_default_timeout(backend: dist.Backend) -> datetime.timedelta:
        return timeout_for(backend, previous)

    _get_default_timeout.__wrapped__ = previous  # type: ignore[attr-defined]  # functools.wraps' mark, set on a plain function
    distributed_c10d._get_default_timeout = _get_default_timeout
    return distributed_c10d, "_get_default_timeout", previous


def has_internal_overlap(t: torch.Tensor) -> bool:
    """Whether several elements of the strided tensor ``t`` share one memory location (an
    expanded view), so that it cannot receive a result.

    Missing public API: torch answers this only through ``torch._debug_has_internal_overlap``
    (``1`` means "yes, certainly")."""
    return torch._debug_has_internal_overlap(t) == 1


# ----------------------------------------------------------------------------------------------
# A rank's torch state between calls (collnb.ranks.RankState)


def default_device_context() -> DeviceContext | None:
    """The context ``torch.set_default_device`` entered (``None`` when none is set).

    Missing public API: ``torch.get_default_device()`` gives the device but not whether one was set,
    and ``set_default_device`` keeps its context in ``torch._GLOBAL_DEVICE_CONTEXT``."""
    context: DeviceContext | None = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return context


def set_default_device_context(context: DeviceContext | None) -> None:
    """Make ``context`` (from :func:`default_device_context`) ``torch.set_default_device``'s again,
    without entering or leaving any mode (the caller has put the mode stack back already).

    Missing public API: ``set_default_device`` leaves the previous context with ``__exit__``, which
    fails when other modes were entered on top of it."""
    torch._GLOBAL_DEVICE_CONTEXT.device_context = context


def mode_stack_depths() -> tuple[int, int]:
    """``(torch-function modes, dispatch modes)`` entered on this thread (ints).

    Missing public API: the depth of the mode stacks (a ``TorchDispatchMode`` entered with
    ``__enter__`` and never left stays on them). Uses ``torch._C._len_torch_function_stack`` and
    ``torch._C._len_torch_dispatch_stack``."""
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()


def pop_modes(function_depth: int, dispatch_depth: int) -> None:
    """Leave torch-function and dispatch modes until the stacks are ``function_depth`` and
    ``dispatch_depth`` deep (modes a call entered and never left; their ``__exit__`` is not run).

    Missing public API: leaving a mode that is not the current ``with`` block's. Uses
    ``torch._C._pop_torch_function_stack`` and ``torch.utils._python_dispatch._pop_mode``."""
    from torch.utils._python_dispatch import _pop_mode  # noqa: PLC0415

    while torch._C._len_torch_function_stack() > function_depth:
        torch._C._pop_torch_function_stack()
    while torch._C._len_torch_dispatch_stack() > dispatch_depth:
        _pop_mode()


def print_options() -> PrintOptions:
    """The keyword arguments of ``torch.set_printoptions`` now in force (``precision``, ``threshold``,
    ``edgeitems``, ``linewidth``, ``sci_mode``).

    Missing public API: a public ``torch.get_printoptions``. Reads ``torch._tensor_str.PRINT_OPTS``
    (``torch._tensor_str.get_printoptions()`` gives the same, at 20 times the cost)."""
    return cast(PrintOptions, dict(vars(torch._tensor_str.PRINT_OPTS)))  # vars() is untyped


#: ``torch.backends`` settings: (public name, ``torch._C`` getter name, its arguments).
_BACKEND_FLAGS: list[tuple[str, str, tuple[str, ...]]] = (
    [(f"torch.backends{'.' + name if name else ''}.fp32_precision", "_get_fp32_precision_getter", args)
     for name, args in (("", ("generic", "all")), ("cuda.matmul", ("cuda", "matmul")), ("cudnn", ("cuda", "all")),
                        ("cudnn.conv", ("cuda", "conv")), ("cudnn.rnn", ("cuda", "rnn")), ("mkldnn", ("mkldnn", "all")),
                        ("mkldnn.matmul", ("mkldnn", "matmul")), ("mkldnn.conv", ("mkldnn", "conv")),
                        ("mkldnn.rnn", ("mkldnn", "rnn")))]
    + [("torch.backends.cudnn.enabled", "_get_cudnn_enabled", ()),
       ("torch.backends.cudnn.benchmark", "_get_cudnn_benchmark", ()),
       ("torch.backends.cudnn.deterministic", "_get_cudnn_deterministic", ()),
       ("torch.backends.mkldnn.enabled", "_get_mkldnn_enabled", ())])


def backend_flag_readers() -> list[tuple[str, Callable[[], bool | str]]]:
    """``[(public name, zero-argument reader)]`` for the ``torch.backends`` settings a rank puts back
    after every call (``torch.backends.cudnn.enabled``, ``torch.backends.mkldnn.matmul.fp32_precision``,
    ...), each reading torch's C getter directly; settings this torch lacks are left out.

    Missing public API: a cheap read of these settings. The public attributes go through two Python
    calls each (``ContextProp``, ``_FP32Precision``), which after every call in a cold rank cost 5x
    what the C getter they wrap does."""
    out: list[tuple[str, Callable[[], bool | str]]] = []
    for name, getter, args in _BACKEND_FLAGS:
        fn = getattr(torch._C, getter, None)
        if fn is not None:
            out.append((name, functools.partial(fn, *args) if args else fn))
    return out


def argument_names(op: OpOverload) -> tuple[str, ...]:
    """The names of ``op``'s arguments, in its schema's order (``("self", "group_name", ...)``).

    Missing public API: an operator's schema is only ``OpOverload._schema`` (a ``torch._C.FunctionSchema``)."""
    return tuple(a.name for a in op._schema.arguments)


def work_source_rank(work: dist.Work) -> int:
    """The rank a completed ``dist.irecv`` without ``src=`` received from (in its group's numbering).

    Missing public API: ``Work._source_rank()``; ``dist.recv`` returns the source, ``irecv``'s Work does not."""
    source: int = work._source_rank()
    return source


class DistributedFiles(NamedTuple):
    """Where in torch's source tree an operation's Python frames come from (absolute paths; a folder ends
    with ``os.sep``), for telling which API issued a dispatched collective (:mod:`.recording`)."""

    distributed: str          # torch/distributed/
    c10d: str                 # torch/distributed/distributed_c10d.py: torch.distributed's functions
    functional: tuple[str, ...]  # the functional collectives' private modules
    dtensor: str              # torch/distributed/tensor/
    debug: str                # torch/distributed/tensor/debug/ (CommDebugMode: a mode, not an issuer)
    mesh: str                 # torch/distributed/device_mesh.py


def distributed_files() -> DistributedFiles:
    """torch.distributed's source files that tell who issued a collective (:class:`DistributedFiles`).

    Missing public API: which API a dispatched operator was called through; the recorder reads it from
    the frames' files, and two of them (``_functional_collectives.py``, ``_functional_collectives_impl.py``)
    are private modules: a release that moves them is changed here only."""
    import os  # noqa: PLC0415

    td = os.path.dirname(os.path.abspath(dist.__file__)) + os.sep
    dtensor = td + "tensor" + os.sep
    return DistributedFiles(td, td + "distributed_c10d.py",
                            (td + "_functional_collectives.py", td + "_functional_collectives_impl.py"),
                            dtensor, dtensor + "debug" + os.sep, td + "device_mesh.py")


def flight_recorder_dump(backend: str | None = None) -> tuple[bytes, bytes]:
    """This process's Flight Recorder buffer (``TORCH_FR_BUFFER_SIZE`` entries, set before its
    process groups were made; 2000 by default since pytorch#142260, Dec 2024): ``(pickle bytes, JSON bytes)``. The
    pickle is the per-rank file ``torch.distributed.flight_recorder.fr_trace`` reads (a dict:
    ``version``, ``pg_config``, ``pg_status``, ``entries``); the JSON holds the same entries
    (``collective_seq_id``, ``profiling_name`` such as ``"gloo:all_reduce"``, ``input_sizes``,
    ``state``, ...). Stack traces are left out (symbolising them imports ``torch._inductor``, seconds in
    a fresh rank) and every entry is kept, completed or not.

    ``backend``: whose recorder (``"gloo"``, ``"nccl"``; default: the default group's backend, else
    gloo). From torch 2.15 each backend keeps a recorder of its own and the dump takes ``backend=``;
    before, one recorder holds every backend's entries.

    Missing public API: torch has no public way to dump the Flight Recorder of a gloo process
    (NCCL's watchdog dumps it itself on a timeout, ``TORCH_NCCL_DUMP_ON_TIMEOUT``); the functions used,
    ``torch._C._distributed_c10d._dump_fr_trace(includeCollectives, includeStackTraces, onlyActive)``
    and ``_dump_fr_trace_json(includeCollectives, onlyActive)``, are the ones torch's own tests use.

    Raises:
        RuntimeError: the installed torch has no Flight Recorder dump (:func:`require`'s line).
    """
    return _dump("_dump_fr_trace", (True, False, False), backend), _dump("_dump_fr_trace_json", (True, False), backend)


def flight_recorder_json(backend: str | None = None) -> bytes:
    """Only the JSON half of :func:`flight_recorder_dump` (the entries, no pickle): what a rank sends
    the launcher with ``launch(..., flight_recorder=N)``. Same private API, same missing public one."""
    return _dump("_dump_fr_trace_json", (True, False), backend)


def _dump(name: str, args: tuple[bool, ...], backend: str | None) -> bytes:
    require(f"torch._C._distributed_c10d.{name}")
    from torch._C import _distributed_c10d as c10d_c  # noqa: PLC0415 - private, used here only

    fn = getattr(c10d_c, name)
    if backend is None:
        backend = str(dist.get_backend()) if dist.is_initialized() else "gloo"
    if "backend" in (fn.__doc__ or ""):  # torch 2.15+: one recorder per backend (pybind: no inspect.signature)
        out: bytes = fn(*args, backend=backend.split(":")[-1])
    else:
        out = fn(*args)
    return out
