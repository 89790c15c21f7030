"""The torch settings a call may change and a warm rank puts back (:class:`.rank_state.RankState`):
each with how to read it and how to write back a value read (default dtype, grad mode, anomaly
detection, deterministic algorithms, the fp32 precisions, autocast, print options, thread count,
torch.distributed's debug level, ...).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

from .. import _torch_internals as internals

__all__ = ["Setting", "torch_settings", "read_setting", "UNREADABLE"]

#: A setting whose getter raised (torch refuses to read a mixed matmul precision).
UNREADABLE = object()


#: A torch setting put back after a call: (name, read it, write a value read back).
Setting = tuple[str, Callable[[], object], Callable[[Any], object]]


def torch_settings() -> list[Setting]:
    """``(name, read, write)`` of every torch setting put back after a call, in the order they are
    written back (the fp32 precisions before the legacy matmul precision derived from them)."""
    out: list[Setting] = []
    for name, read in internals.backend_flag_readers():  # the fp32 precisions first
        obj, _, attr = name.rpartition(".")
        out.append((name, read, lambda v, o=obj, a=attr: setattr(_resolve(o), a, v)))  # type: ignore[misc]  # mypy cannot type a lambda with defaults
    out += [
        ("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision,
         torch.set_float32_matmul_precision),
        ("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
        ("torch.is_grad_enabled()", torch.is_grad_enabled, torch.set_grad_enabled),
        ("torch.is_anomaly_enabled()", lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
         lambda v: torch.set_anomaly_enabled(*v)),
        ("torch.are_deterministic_algorithms_enabled()",
         lambda: (torch.are_deterministic_algorithms_enabled(),
                  torch.is_deterministic_algorithms_warn_only_enabled()),
         lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
        ("torch.is_warn_always_enabled()", torch.is_warn_always_enabled, torch.set_warn_always),
        ("torch.is_autocast_cache_enabled()", torch.is_autocast_cache_enabled, torch.set_autocast_cache_enabled),
        ("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
        ("torch's print options", internals.print_options,
         lambda v: torch.set_printoptions(**v)),  # type: ignore[no-untyped-call]  # torch's set_printoptions has no annotations
        ("torch.distributed's debug level", dist.get_debug_level, dist.set_debug_level),
    ]
    for device in ("cpu", "cuda"):
        out.append((f"autocast on {device}",
                    lambda d=device: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)),  # type: ignore[misc]  # a lambda with defaults
                    lambda v, d=device: (torch.set_autocast_enabled(d, v[0]), torch.set_autocast_dtype(d, v[1]))))  # type: ignore[misc, func-returns-value]  # defaults; called for effect
    try:
        import torch.utils.deterministic as deterministic  # noqa: PLC0415
        out.append(("torch.utils.deterministic.fill_uninitialized_memory",
                    lambda: deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]  # a property of its module's class
                    lambda v: setattr(deterministic, "fill_uninitialized_memory", v)))
    except ImportError:
        pass
    return out


def _resolve(dotted: str) -> object:
    """``"torch.backends.cudnn.conv"`` -> that object."""
    obj: object = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def read_setting(read: Callable[[], object]) -> object:
    """``read()``, or :data:`UNREADABLE` when it raises."""
    try:
        return read()
    except Exception:  # noqa: BLE001
        return UNREADABLE
