"""The process groups of a call on a rank: which it runs in, which end with it, which it keeps.

Every kind of rank (a local rank, an engine) keeps cached groups of ranks ``0..k-1`` between calls
and runs a call at world size ``k`` in one of them as its default group. Two kinds are cached: the
groups as ``launch(debug=...)`` makes them, and, for collnb's own code marked
:func:`same_on_every_rank`, the same ranks made without ``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s
``ProcessGroupWrapper`` ("unwrapped": :func:`unwrapped_group`, :func:`runs_unwrapped`). Groups the
call itself makes end with it, once every rank is done with them (:func:`end_together`), as a fresh
script's end with its process; collnb's own code may keep its groups for later calls
(:func:`keep_groups`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, Union, cast

import torch.distributed as dist

from .. import _torch_internals as internals
from ..fresh.rank_state import collnb_only

__all__ = ["Group", "keep_groups", "kept_groups", "forget_kept_groups", "same_on_every_rank", "runs_unwrapped",
           "unwrapped_group", "end_together", "end_call_groups", "intact", "kept_now"]

#: Process groups that calls of collnb's own code made and later calls reuse (:func:`keep_groups`).
_kept: set[dist.ProcessGroup] = set()

_Fn = TypeVar("_Fn", bound=Callable[..., Any])
#: A cached group as ``new_group`` gives it: a ``ProcessGroup``, or ``GroupMember.NON_GROUP_MEMBER``
#: (the int -100) on a rank of the pool outside it.
Group = Union[dist.ProcessGroup, int]


def keep_groups(groups: Iterable[dist.ProcessGroup]) -> None:
    """Keep the process groups ``groups`` (an iterable of ``ProcessGroup``) after this call ends.

    Process groups a call makes are destroyed after it, as a fresh script's end with it. A call
    of collnb's own code only (:func:`..fresh.rank_state.collnb_only`) may keep the groups
    it made for its later calls to reuse: :func:`collnb.redistribute` keeps its ``DeviceMesh``'s
    (making a 2x2 mesh costs ~50 ms of a ~150 ms explorer move). Every rank of the call must keep
    the same groups, so that every rank's next call finds the same ones. Asked by a learner's
    function, this is ignored: its groups end with its call. Kept groups end when the pool's
    default group is made again (a pool that grows or is restarted)."""
    _kept.update(groups)


def same_on_every_rank(fn: _Fn) -> _Fn:
    """Mark ``fn``, a rank function of collnb's own code, as issuing the same collectives, with the
    same shapes and dtypes, in the same order on every rank, by construction (the primitive runs of
    :func:`collnb.run` and the explorer, the backend probe). Returns ``fn``.

    ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (``launch(debug=True)``, the default) wraps every process
    group in torch's ``ProcessGroupWrapper``, which checks each collective's fingerprint against
    every peer's before it runs: it turns a learner's mismatched collectives into a clear error, and
    it costs a second round of communication per collective (a 16-float gloo all_reduce at world
    size 8 on 2 cores: ~24 ms without it, ~55 ms with it, measured with torch 2.13). A marked
    function has nothing for the check to find, so a warm rank runs it on a group of the same ranks
    made without the wrapper (the same backend, a group of its own). The mark is honoured only when
    the call is collnb's own code throughout (:func:`..fresh.rank_state.collnb_only`): a learner's function
    is always checked, whatever it carries (:func:`runs_unwrapped`)."""
    fn.collnb_same_on_every_rank = True  # type: ignore[attr-defined]  # a mark on the function object; Callable names no attributes
    return fn


def runs_unwrapped(fn: Callable[..., Any], args: Iterable[Any] = (), kwargs: dict[str, Any] | None = None) -> bool:
    """Whether a call of ``fn(rank, world_size, *args, **kwargs)`` may run without DETAIL's check:
    ``fn`` is marked :func:`same_on_every_rank` and the call is collnb's own code throughout
    (:func:`..fresh.rank_state.collnb_only`: no argument holds a learner's function or class)."""
    return getattr(fn, "collnb_same_on_every_rank", False) is True and collnb_only(fn, args, kwargs)


def unwrapped_group(world_size: int, timeout: datetime.timedelta) -> Group:
    """A new group of ranks ``0..world_size-1`` made without DETAIL's ``ProcessGroupWrapper``
    (torch decides when a group is made: ``get_debug_level() == DebugLevel.DETAIL``); every rank of
    the pool's default group must call it, as ``new_group`` needs. The debug level is the
    environment's again afterwards. Made on the first call that needs it (:class:`..protocol.NewGroup`
    ``unwrapped``), so a pool that runs only learners' functions makes none."""
    dist.set_debug_level(dist.DebugLevel.OFF)
    try:
        return cast("Group", dist.new_group(list(range(world_size)), timeout=timeout))  # torch leaves it untyped
    finally:
        dist.set_debug_level_from_env()


def kept_groups() -> frozenset[dist.ProcessGroup]:
    """The process groups kept for later calls (:func:`keep_groups`) that still exist (ipyparallel
    engines destroy every group a call made: there, a kept group is gone by the next call)."""
    _kept.intersection_update(internals.live_groups())
    return frozenset(_kept)


def end_together(store: dist.Store, group_count: int, world_size: int, rank: int, made: set[dist.ProcessGroup],
                 collective_timeout: float) -> None:
    """Destroy the process groups ``made`` that this call made, once every rank of the call is done
    with them. A call that made groups with ``new_group`` advanced torch's group counter on every
    rank of it, members of the groups or not (measured): each such rank says it is done in the
    pool's store (key ``ended<group_count>/<rank>``), and a rank with groups to destroy waits for
    every rank's key, for at most half the collective timeout. Destroyed at once, a rank whose
    function returned closed its side of a group that a slower peer was still connecting (gloo's
    ``connectFullMesh``: "Connection closed by peer", 6 launches in 300 of a function that only
    makes a 2x2 DeviceMesh, measured; 0 in 300 with the wait). A peer that never comes (it waits in
    a collective this rank skipped) stops waiting when the groups close, well before its collective
    timeout (issue 25's words name that). Groups made with ``use_local_synchronization=True`` (no
    counter advanced) are destroyed at once; calls that made no groups pay nothing."""
    together = internals.group_count() != group_count
    prefix = f"ended{group_count}/"
    if together:
        try:
            store.set(f"{prefix}{rank}", "1")
            if made:
                store.wait([f"{prefix}{r}" for r in range(world_size)],
                           datetime.timedelta(seconds=collective_timeout / 2))
        except Exception:  # noqa: BLE001 - a peer that never came (or a store that is gone): end them now
            pass
    for g in made:
        dist.destroy_process_group(g)
    if made:   # DTensor's caches may hold meshes of these groups (DeviceMesh equality ignores groups)
        internals.forget_dtensor_caches()


def forget_kept_groups() -> None:
    """Forget the kept groups (the rank's default group is made again: every group ends)."""
    _kept.clear()


def intact(cached: Iterable[Group | None]) -> bool:
    """Whether the rank's ``cached`` groups (and torch.distributed itself) survived the call: a
    function may destroy them (``dist.destroy_process_group()``)."""
    if not dist.is_initialized():
        return False
    live = internals.live_groups()
    return all(g in live for g in cached if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER)


def end_call_groups(store: dist.Store, group_count: int, world_size: int, rank: int, before: set[dist.ProcessGroup],
                    kept_before: set[dist.ProcessGroup], own: bool, collective_timeout: float) -> None:
    """After a call whose rank's groups are :func:`intact`: the groups it made (live now, not in
    ``before``) end together (:func:`end_together`), except those collnb's own code (``own``:
    :func:`..fresh.rank_state.collnb_only`) kept with :func:`keep_groups`; a learner's call keeps
    none (``kept_before``: the kept groups before the call)."""
    if not own:  # only collnb's own code keeps groups (keep_groups)
        _kept.intersection_update(kept_before)
    live = internals.live_groups()
    _kept.intersection_update(live)
    end_together(store, group_count, world_size, rank, live - before - _kept, collective_timeout)


def kept_now() -> set[dist.ProcessGroup]:
    """A copy of the kept groups (taken before a call: see :func:`end_call_groups`)."""
    return set(_kept)
