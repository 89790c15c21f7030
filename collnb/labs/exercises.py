"""Exercise checks for the notebooks: they pass only for work the learner did, on real ranks.

Every notebook's ``check`` cell calls one function of this module with the learner's answer (a
function or a prediction) and the stored solution. A check

* runs the learner's function on real ranks (:func:`collnb.launch`) with **data only its source
  rank knows** (random per launch), at **varied world sizes** (random per launch, and where the
  exercise forbids ``world_size`` a decoy value), so an answer that computes the result locally
  cannot pass;
* verifies the ``torch.distributed`` calls each rank actually made (:class:`collnb.CallRecord`,
  recorded by ``collnb.launch(..., record_calls=True)``) and refuses forbidden ones where the
  exercise says "build it from X";
* prints ``✓`` only when the learner's own answer passed. While the answer cell is unfinished
  (the function still returns ``None`` and communicates nothing, or ``prediction`` is ``None``)
  the check says so and may **demonstrate** the stored solution, labelled as such, without ``✓``;
* on a wrong answer raises :class:`CheckFailed`: in Jupyter a formatted ``✗`` with a per-rank table
  and a hint about that mistake, no traceback (IPython renders the exception with
  ``_render_traceback_``); a test still sees an error.

Example (the check cell of ``01_broadcast``)::

    from collnb import exercises
    exercises.check_broadcast(my_broadcast, solution=solution_broadcast)
"""

from __future__ import annotations

import functools
import inspect
import random
import sys
from dataclasses import replace
from typing import Any, Callable, Sequence

import torch

from ..ranks import CallRecord, LaunchTimeout, RankError, launch

__all__ = [
    "CheckFailed", "CallRecord", "NOT_ANSWERED",
    "check_count_ranks", "check_broadcast", "check_scatter_prediction", "check_gather",
    "check_reduce_prediction", "check_all_gather", "check_reduce_scatter_prediction",
    "check_int8_prediction", "check_all_to_all_prediction", "check_census", "check_token_ring",
    "check_ring_prediction", "check_ring_step", "check_time_prediction", "check_average_gradients", "tiny_model", "train_steps",
    "launch_recorded",
]

#: Printed (never with ✓) when the answer cell is still unfinished.
NOT_ANSWERED = "not answered yet"


# ----------------------------------------------------------------------------------------------
# Feedback


class CheckFailed(AssertionError):
    """A wrong answer. ``str(err)`` starts with ``"✗ "`` and ends with a hint.

    In Jupyter (IPython) the exception is shown as its message only, without a traceback
    (``_render_traceback_``), so the learner sees a formatted ✗, the per-rank table and the hint.
    It is an ``AssertionError``, so tests and scripts detect the failure as usual.
    """

    def _render_traceback_(self):
        lines = str(self).splitlines() or ["✗"]
        # Red ✗ line, then the rest as plain text.
        return ["\x1b[1;31m" + lines[0] + "\x1b[0m", *lines[1:]]


def _fail(what: str, hint: str, table: str = "") -> CheckFailed:
    return CheckFailed("✗ " + what + ("\n" + table if table else "") + "\nHint: " + hint)


def _table(rows: Sequence[tuple[Any, ...]], header: Sequence[str]) -> str:
    cells = [[str(x) for x in header]] + [[_short(x) for x in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def _short(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list) and x and all(isinstance(v, float) for v in x):
        return "[" + ", ".join(f"{v:.4g}" for v in x) + "]"
    text = str(x)
    return text if len(text) <= 70 else text[:67] + "..."


def _unfinished(name: str, solution: Callable | None, show: Callable[[], None] | None) -> None:
    print(f"{name}: {NOT_ANSWERED}. Write your answer in the exercise cell above and run this cell again.")
    if solution is not None and show is not None:
        print("Demonstration with the stored SOLUTION (not your answer, so it earns no check mark):")
        show()


# ----------------------------------------------------------------------------------------------
# Running a learner's function on real ranks, with the calls each rank made


def _run_recorded(rank: int, world_size: int, fn: Callable, per_rank_args: Sequence[tuple],
                  fn_world_size: Sequence[int] | None):
    """Runs on a rank: ``fn(rank, world_size, *per_rank_args[rank])``.

    Only this rank's own arguments reach ``fn``. ``fn_world_size`` (per rank) replaces the
    ``world_size`` argument ``fn`` sees (a decoy, for exercises that must not use it). The
    collectives ``fn`` makes are recorded by ``collnb.launch(..., record_calls=True)``; this
    wrapper also counts ``fn``'s own ``dist.get_world_size()`` queries (not a collective, so not
    recorded there), which some exercises forbid. Returns ``(result, number of queries)``.
    """
    import torch.distributed as dist
    from ..ranks import distributed_c10d as c10d  # torch.distributed.distributed_c10d

    queries = [0]
    originals = [(m, m.get_world_size) for m in (dist, c10d)]
    query = c10d.get_world_size

    @functools.wraps(query)
    def counted(*args, **kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if not (caller == "torch" or caller.startswith(("torch.", "collnb."))):
            queries[0] += 1
        return query(*args, **kwargs)

    for module, _ in originals:
        module.get_world_size = counted
    try:
        shown = world_size if fn_world_size is None else fn_world_size[rank]
        out = fn(rank, shown, *per_rank_args[rank])
    finally:
        for module, original in originals:
            module.get_world_size = original
    return out, queries[0]


def launch_recorded(fn: Callable, world_size: int, per_rank_args: Sequence[tuple] | None = None,
                    fn_world_size: Sequence[int] | None = None, timeout: float = 60.0,
                    collective_timeout: float = 5.0):
    """Run ``fn(rank, world_size, *per_rank_args[rank])`` on real ranks; record each rank's calls.

    Args:
        fn: the learner's function.
        world_size: number of real ranks.
        per_rank_args: one tuple per rank; rank ``r``'s function sees only ``per_rank_args[r]``
            (how a check gives data to the source rank only). Default: no extra arguments.
        fn_world_size: per rank, the ``world_size`` value ``fn`` is given instead of the real one
            (a decoy); default the real world size.
        timeout, collective_timeout: as for :func:`collnb.launch` (seconds).

    Returns:
        ``(results, calls)``: ``results[r]`` is what rank ``r`` returned (tensors as CPU copies);
        ``calls[r]`` is the list of :class:`collnb.CallRecord` rank ``r`` made from its own code, in
        order (recorded by ``collnb.launch(..., record_calls=True)``: calls torch makes internally,
        e.g. the ``all_gather`` inside ``all_gather_object``, are not listed; an operation of a
        ``batch_isend_irecv`` list appears as ``"isend"``/``"irecv"``), followed by one
        ``"get_world_size"`` record per ``dist.get_world_size()`` query of ``fn``.

    Raises:
        collnb.RankError / collnb.LaunchTimeout: as :func:`collnb.launch`.
    """
    per_rank_args = [tuple(a) for a in (per_rank_args or [()] * world_size)]
    if len(per_rank_args) != world_size:
        raise ValueError(f"per_rank_args has {len(per_rank_args)} entries; need one per rank ({world_size})")
    out = launch(_run_recorded, world_size, args=(fn, per_rank_args, fn_world_size), timeout=timeout,
                 collective_timeout=collective_timeout, record_calls=True)
    calls = []
    for (_, queries), rank_calls in zip(out, out.calls):
        # An operation of a batch_isend_irecv list counts as the isend/irecv it is.
        mine = [replace(c, name=c.op) if c.name == "batch_isend_irecv" and c.op else c for c in rank_calls]
        mine += [CallRecord("get_world_size", None, world_size, (), ())] * queries
        calls.append(mine)
    return [p[0] for p in out], calls


def _launch_or_fail(fn, world_size, per_rank_args=None, fn_world_size=None, *, hint: str, what: str):
    try:
        return launch_recorded(fn, world_size, per_rank_args, fn_world_size, timeout=60.0)
    except RankError as err:
        head = str(err).split("Traceback")[0].strip()
        if err.exc_type in ("DidNotJoin",) or "timed out" in head.lower() or "Timeout" in err.exc_type:
            raise _fail(f"{what}: the ranks did not meet in the same calls.\n{head}",
                        "every rank must make the same collective calls in the same order "
                        "(a send needs a matching recv). " + hint) from None
        raise _fail(f"{what}: your function raised on a rank.\n{head}\n{err.rank_traceback.strip()}",
                    hint) from None
    except LaunchTimeout as err:
        raise _fail(f"{what}: your function did not finish.\n{err}", hint) from None


def _check_params(fn: Callable, call: str) -> None:
    """Refuse, before any rank starts, a function that cannot be called as ``call`` says
    (e.g. ``"my_broadcast(rank, world_size, src, tensor)"``)."""
    if not callable(fn):
        raise _fail(f"{call.split('(')[0]} is {fn!r}, not a function.", f"define it as: def {call}: ...")
    params = call.split("(", 1)[1].rstrip(")").split(", ")
    try:
        inspect.signature(fn).bind(*params)
    except TypeError:
        raise _fail(f"{call.split('(')[0]} takes {inspect.signature(fn)}, but the check calls it as {call}.",
                    f"define it as: def {call}: ...") from None
    except ValueError:  # no signature (a builtin): let the call itself fail
        pass


def _names(calls: list) -> list[str]:
    return [c.name for c in calls if c.name != "get_world_size"]


def _summary(calls: list) -> str:
    """``"all_reduce ×6, broadcast"``: a rank's calls in order, repeats counted."""
    names, out = _names(calls), []
    for name in names:
        if out and out[-1][0] == name:
            out[-1][1] += 1
        else:
            out.append([name, 1])
    return ", ".join(n if k == 1 else f"{n} ×{k}" for n, k in out) or "(none)"


def _no_calls(results, calls) -> bool:
    return all(r is None for r in results) and not any(calls_r for calls_r in calls)


def _check_only(calls, allowed: set, rank_label: str = "rank", hint: str = "") -> None:
    for r, rank_calls in enumerate(calls):
        extra = sorted({c.name for c in rank_calls} - allowed)
        if extra:
            raise _fail(f"{rank_label} {r} called {', '.join('dist.' + e for e in extra)}, which this "
                        f"exercise does not allow (only {', '.join('dist.' + a for a in sorted(allowed))}).",
                        hint or "build the result from the allowed calls only.")


def _passed(text: str, table: str = "") -> None:
    if table:
        print(table)
    print("✓ " + text)


def _rng() -> random.Random:
    return random.SystemRandom()


def _world_sizes(rng, low: int, high: int, k: int = 2) -> list[int]:
    return rng.sample(range(low, high + 1), k)


# ----------------------------------------------------------------------------------------------
# 00 · count the ranks


def check_count_ranks(count_ranks: Callable, solution: Callable | None = None) -> None:
    """Check ``count_ranks(rank, world_size)`` (notebook 00): every rank returns the number of ranks,
    found with one ``dist.all_reduce`` and without ``world_size`` or ``dist.get_world_size()``.

    Runs at two random world sizes (2-6) and gives the function a **decoy** ``world_size`` (a
    wrong number), so ``return world_size`` fails; ``dist.get_world_size()`` is refused.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(count_ranks, "count_ranks(rank, world_size)")
    rng = _rng()
    sizes = _world_sizes(rng, 2, 6)
    hint = "start every rank with torch.ones(1), all_reduce it with SUM and return int(t.item())."

    def run(fn, ws):
        decoys = [ws + rng.randint(3, 9)] * ws
        return _launch_or_fail(fn, ws, fn_world_size=decoys, hint=hint,
                               what=f"at world size {ws}"), decoys[0]

    (results, calls), decoy = run(count_ranks, sizes[0])
    if _no_calls(results, calls):
        def show():
            (res, _), _ = run(solution, sizes[0])
            print(f"  world size {sizes[0]}: the ranks returned {res}")
        return _unfinished("count_ranks", solution, show)
    for ws in sizes:
        if ws != sizes[0]:
            (results, calls), decoy = run(count_ranks, ws)
        rows = [(r, results[r], ws, _summary(calls[r])) for r in range(ws)]
        table = _table(rows, ("rank", "returned", "expected", "calls"))
        if any(c.name == "get_world_size" for rc in calls for c in rc):
            raise _fail(f"world size {ws}: your function called dist.get_world_size(), which this "
                        "exercise forbids.", hint, table)
        if decoy is not None and any(r == decoy for r in results):
            raise _fail(f"world size {ws}: the ranks returned the world_size argument ({decoy}), which the "
                        "check set to a wrong number on purpose.", hint, table)
        if any(_names(rc).count("all_reduce") != 1 for rc in calls):
            raise _fail(f"world size {ws}: every rank must make exactly one dist.all_reduce.", hint, table)
        if any(not isinstance(results[r], (int, float)) or isinstance(results[r], bool)
               or results[r] != ws for r in range(ws)):
            bad = [r for r in range(ws) if results[r] != ws]
            raise _fail(f"world size {ws}: rank(s) {bad} did not return {ws}.",
                        "return a Python int (int(t.item())). " + hint, table)
        if ws == sizes[-1]:
            _passed(f"every rank counted the ranks with one all_reduce at world sizes {sizes[0]} and {sizes[1]}",
                    table)


# ----------------------------------------------------------------------------------------------
# 01 · broadcast


def _random_tensor(rng, n: int) -> torch.Tensor:
    return torch.tensor([rng.randint(-999, 999) / 8 for _ in range(n)], dtype=torch.float32)


def check_broadcast(my_broadcast: Callable, solution: Callable | None = None) -> None:
    """Check ``my_broadcast(rank, world_size, src, tensor)`` (notebook 01).

    On rank ``src``, ``tensor`` holds data only that rank knows (random float32 values, random
    length); on every other rank it is ``torch.zeros`` of the same shape. Every rank must return
    ``src``'s data, having made exactly one ``dist.broadcast`` with ``src=src``. Two launches with
    random world sizes (2-6) and random ``src``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(my_broadcast, "my_broadcast(rank, world_size, src, tensor)")
    rng = _rng()
    hint = "call dist.broadcast(tensor, src=src) on every rank and return tensor."

    def case(fn, ws):
        src = rng.randrange(ws)
        data = _random_tensor(rng, rng.randint(3, 6))
        args = [((src, data.clone()) if r == src else (src, torch.zeros_like(data))) for r in range(ws)]
        return src, data, _launch_or_fail(fn, ws, args, hint=hint, what=f"world size {ws}, src={src}")

    sizes = _world_sizes(rng, 2, 6)
    first = case(my_broadcast, sizes[0])
    if _no_calls(*first[2]):
        def show():
            src, data, (res, _) = case(solution, sizes[0])
            print(f"  world size {sizes[0]}, src={src} held {_short(data)}; the ranks returned:")
            for r, t in enumerate(res):
                print(f"    rank {r}: {_short(t)}")
        return _unfinished("my_broadcast", solution, show)
    for i, ws in enumerate(sizes):
        src, data, (results, calls) = first if i == 0 else case(my_broadcast, ws)
        rows = [(r, results[r], ", ".join(f"{c.name}(src={c.peer})" for c in calls[r] if c.name != "get_world_size")
                 or "(none)") for r in range(ws)]
        table = _table(rows, ("rank", "returned", "calls"))
        _check_only(calls, {"broadcast", "get_world_size"}, hint=hint)
        bad_calls = [r for r in range(ws) if [(c.name, c.peer) for c in calls[r]
                                               if c.name != "get_world_size"] != [("broadcast", src)]]
        if bad_calls:
            raise _fail(f"world size {ws}, src={src}: rank(s) {bad_calls} did not make exactly one "
                        f"dist.broadcast with src={src}.", hint, table)
        wrong = [r for r in range(ws) if not (isinstance(results[r], torch.Tensor)
                                              and results[r].shape == data.shape and torch.equal(results[r], data))]
        if wrong:
            raise _fail(f"world size {ws}, src={src}: rank(s) {wrong} did not return src's data {_short(data)} "
                        "(random, known only to src).", "return the tensor you broadcast into, on every rank.",
                        table)
    _passed(f"every rank received src's random data through one dist.broadcast, at world sizes "
            f"{sizes[0]} and {sizes[1]}", table)


# ----------------------------------------------------------------------------------------------
# 03 · gather


def check_gather(my_gather: Callable, solution: Callable | None = None) -> None:
    """Check ``my_gather(rank, world_size, dst, mine)`` (notebook 03).

    Each rank's ``mine`` is a random 1-element int64 tensor only that rank knows. ``dst`` must
    return every rank's value in rank order as one tensor (``torch.cat`` of the gather list);
    every other rank returns ``None``. Each rank makes exactly one ``dist.gather`` with
    ``dst=dst``. Two launches, random world sizes (2-6) and ``dst``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(my_gather, "my_gather(rank, world_size, dst, mine)")
    rng = _rng()
    hint = ("on dst pass gather_list=[torch.zeros_like(mine) for _ in range(world_size)], elsewhere "
            "gather_list=None; call dist.gather(mine, gather_list, dst=dst) on every rank; on dst return "
            "torch.cat(gather_list), elsewhere None.")

    def case(fn, ws):
        dst = rng.randrange(ws)
        values = [rng.randint(-9999, 9999) for _ in range(ws)]
        args = [(dst, torch.tensor([values[r]])) for r in range(ws)]
        return dst, torch.tensor(values), _launch_or_fail(fn, ws, args, hint=hint,
                                                           what=f"world size {ws}, dst={dst}")

    sizes = _world_sizes(rng, 2, 6)
    first = case(my_gather, sizes[0])
    if _no_calls(*first[2]):
        def show():
            dst, want, (res, _) = case(solution, sizes[0])
            print(f"  world size {sizes[0]}, dst={dst}; the ranks held {want.tolist()} and returned:")
            for r, t in enumerate(res):
                print(f"    rank {r}: {_short(t)}")
        return _unfinished("my_gather", solution, show)
    for i, ws in enumerate(sizes):
        dst, want, (results, calls) = first if i == 0 else case(my_gather, ws)
        rows = [(r, "dst" if r == dst else "", results[r],
                 ", ".join(f"{c.name}(dst={c.peer})" for c in calls[r] if c.name != "get_world_size")
                 or "(none)") for r in range(ws)]
        table = _table(rows, ("rank", "", "returned", "calls"))
        _check_only(calls, {"gather", "get_world_size"}, hint=hint)
        bad = [r for r in range(ws) if [(c.name, c.peer) for c in calls[r] if c.name != "get_world_size"]
               != [("gather", dst)]]
        if bad:
            raise _fail(f"world size {ws}, dst={dst}: rank(s) {bad} did not make exactly one dist.gather "
                        f"with dst={dst}.", hint, table)
        got = results[dst]
        if isinstance(got, (list, tuple)) and got and all(isinstance(t, torch.Tensor) for t in got):
            raise _fail(f"world size {ws}, dst={dst}: dst returned the gather list itself ({len(got)} tensors).",
                        "return one tensor: torch.cat(gather_list).", table)
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got, want)):
            raise _fail(f"world size {ws}, dst={dst}: dst returned {_short(got)}; the ranks' values in rank "
                        f"order are {want.tolist()}.", hint, table)
        others = [r for r in range(ws) if r != dst and results[r] is not None]
        if others:
            raise _fail(f"world size {ws}, dst={dst}: rank(s) {others} returned something; after gather only "
                        "dst has a result.", "return None on every rank other than dst.", table)
    _passed(f"dst received every rank's own value in rank order (world sizes {sizes[0]} and {sizes[1]}, "
            "random dst)", table)


# ----------------------------------------------------------------------------------------------
# 05 · all_gather built from broadcasts


def check_all_gather(my_all_gather: Callable, solution: Callable | None = None) -> None:
    """Check ``my_all_gather(rank, world_size, mine)`` (notebook 05), built **from broadcasts only**.

    Each rank's ``mine`` is a random float32 tensor of 2 values only that rank knows. Every rank
    must return ``torch.cat`` of all ranks' ``mine`` in rank order; its calls must be
    ``world_size`` ``dist.broadcast`` calls, one per source rank (any order), and nothing else
    (``dist.all_gather`` and friends are refused). Two launches at random world sizes (2-6).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(my_all_gather, "my_all_gather(rank, world_size, mine)")
    rng = _rng()
    hint = ("for src in range(world_size): buf = mine.clone() if rank == src else torch.zeros(2); "
            "dist.broadcast(buf, src=src); keep buf. Then torch.cat the buffers.")

    def case(fn, ws):
        mine = [_random_tensor(rng, 2) for _ in range(ws)]
        return torch.cat(mine), _launch_or_fail(fn, ws, [(m,) for m in mine], hint=hint,
                                                what=f"world size {ws}")

    sizes = _world_sizes(rng, 2, 6)
    first = case(my_all_gather, sizes[0])
    if _no_calls(*first[1]):
        def show():
            want, (res, _) = case(solution, sizes[0])
            print(f"  world size {sizes[0]}; every rank returned {_short(res[0])} "
                  f"(equal on all ranks: {all(torch.equal(t, want) for t in res)})")
        return _unfinished("my_all_gather", solution, show)
    for i, ws in enumerate(sizes):
        want, (results, calls) = first if i == 0 else case(my_all_gather, ws)
        rows = [(r, results[r], ", ".join(f"{c.name}(src={c.peer})" for c in calls[r]
                                          if c.name != "get_world_size") or "(none)") for r in range(ws)]
        table = _table(rows, ("rank", "returned", "calls"))
        _check_only(calls, {"broadcast", "get_world_size"},
                    hint="this exercise builds all_gather from dist.broadcast only. " + hint)
        bad = [r for r in range(ws) if sorted(c.peer for c in calls[r] if c.name == "broadcast")
               != list(range(ws))]
        if bad:
            raise _fail(f"world size {ws}: rank(s) {bad} did not make one dist.broadcast per source rank "
                        f"0..{ws - 1}.", hint, table)
        wrong = [r for r in range(ws) if not (isinstance(results[r], torch.Tensor)
                                              and results[r].shape == want.shape and torch.equal(results[r], want))]
        if wrong:
            raise _fail(f"world size {ws}: rank(s) {wrong} did not return every rank's contribution in rank "
                        f"order, {_short(want)}.", hint, table)
    _passed(f"your broadcasts delivered every rank's random contribution to every rank, as all_gather "
            f"would (world sizes {sizes[0]} and {sizes[1]})", table)


# ----------------------------------------------------------------------------------------------
# 09 · object collectives


def check_census(my_census: Callable, solution: Callable | None = None) -> None:
    """Check ``my_census(rank, world_size, info)`` (notebook 09).

    Each rank's ``info`` is a dict only that rank knows (``{"rank": r, "token": <random str>,
    "load": <random float>}``). Every rank must return the list of every rank's dict, in rank
    order, with one ``dist.all_gather_object`` call. Two launches at random world sizes (2-6).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(my_census, "my_census(rank, world_size, info)")
    rng = _rng()
    hint = "everyone = [None] * world_size; dist.all_gather_object(everyone, info); return everyone."

    def case(fn, ws):
        infos = [{"rank": r, "token": "%06x" % rng.randrange(1 << 24), "load": round(rng.random(), 3)}
                 for r in range(ws)]
        return infos, _launch_or_fail(fn, ws, [(dict(i),) for i in infos], hint=hint, what=f"world size {ws}")

    sizes = _world_sizes(rng, 2, 6)
    first = case(my_census, sizes[0])
    if _no_calls(*first[1]):
        def show():
            infos, (res, _) = case(solution, sizes[0])
            print(f"  world size {sizes[0]}; rank 0 returned {res[0]} "
                  f"(equal on all ranks: {all(x == infos for x in res)})")
        return _unfinished("my_census", solution, show)
    for i, ws in enumerate(sizes):
        infos, (results, calls) = first if i == 0 else case(my_census, ws)
        rows = [(r, results[r], _summary(calls[r])) for r in range(ws)]
        table = _table(rows, ("rank", "returned", "calls"))
        bad = [r for r in range(ws) if _names(calls[r]) != ["all_gather_object"]]
        if bad:
            raise _fail(f"world size {ws}: rank(s) {bad} did not make exactly one dist.all_gather_object.",
                        hint, table)
        wrong = [r for r in range(ws) if results[r] != infos]
        if wrong:
            raise _fail(f"world size {ws}: rank(s) {wrong} did not return every rank's dict in rank order "
                        f"(rank 0's dict was {infos[0]}).", hint, table)
    _passed(f"every rank holds every rank's own dict, in rank order, from one all_gather_object "
            f"(world sizes {sizes[0]} and {sizes[1]})", table)


# ----------------------------------------------------------------------------------------------
# 10 · token ring


def check_token_ring(token_ring: Callable, solution: Callable | None = None) -> None:
    """Check ``token_ring(rank, world_size, value)`` (notebook 10).

    Each rank's ``value`` is a random int only that rank knows. Rank 0 sends
    ``torch.tensor([value])`` to rank 1; rank ``r`` receives from ``r - 1``, adds its ``value`` and
    sends to ``(r + 1) % world_size``; rank 0 finally receives from the last rank. Every rank returns
    the int it received. The calls must be rank 0: ``send(dst=1)``, ``recv(src=ws-1)``; others
    ``recv(src=r-1)``, ``send(dst=(r+1)%ws)``. Two launches at random world sizes (3-6).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(token_ring, "token_ring(rank, world_size, value)")
    rng = _rng()
    hint = ("rank 0: dist.send(torch.tensor([value]), dst=1) then dist.recv(token, src=world_size - 1); "
            "rank r: dist.recv(token, src=r - 1), remember int(token), dist.send(token + value, "
            "dst=(r + 1) % world_size).")

    def case(fn, ws):
        values = [rng.randint(1, 999) for _ in range(ws)]
        want = [sum(values)] + [sum(values[:r]) for r in range(1, ws)]
        return values, want, _launch_or_fail(fn, ws, [(v,) for v in values], hint=hint, what=f"world size {ws}")

    def expected_calls(r, ws):
        return ([("send", 1), ("recv", ws - 1)] if r == 0 else [("recv", r - 1), ("send", (r + 1) % ws)])

    sizes = _world_sizes(rng, 3, 6)
    first = case(token_ring, sizes[0])
    if _no_calls(*first[2]):
        def show():
            values, want, (res, _) = case(solution, sizes[0])
            print(f"  world size {sizes[0]}, values {values}: the ranks received {res}")
        return _unfinished("token_ring", solution, show)
    for i, ws in enumerate(sizes):
        values, want, (results, calls) = first if i == 0 else case(token_ring, ws)
        got_calls = [[(c.name, c.peer) for c in calls[r] if c.name != "get_world_size"] for r in range(ws)]
        rows = [(r, values[r], results[r], want[r], ", ".join(f"{n}({p})" for n, p in got_calls[r]) or "(none)")
                for r in range(ws)]
        table = _table(rows, ("rank", "value", "returned", "expected", "calls"))
        _check_only(calls, {"send", "recv", "isend", "irecv", "get_world_size"}, hint=hint)
        blocking = [[(n.lstrip("i"), p) for n, p in got_calls[r]] for r in range(ws)]
        bad = [r for r in range(ws) if blocking[r] != expected_calls(r, ws)]
        if bad:
            r = bad[0]
            raise _fail(f"world size {ws}: rank {r} made {blocking[r] or 'no calls'}; it should make "
                        f"{expected_calls(r, ws)} (names with their peer rank).", hint, table)
        if results != want:
            raise _fail(f"world size {ws}: the ranks returned {results}, expected {want}.",
                        "each rank returns the value it received (before adding its own).", table)
    _passed(f"the token went round the ring through real send/recv; rank 0 received the sum of every "
            f"rank's own value (world sizes {sizes[0]} and {sizes[1]})", table)


# ----------------------------------------------------------------------------------------------
# algorithms · one ring step


def check_ring_step(my_ring_step: Callable, solution: Callable | None = None) -> None:
    """Check ``my_ring_step(rank, world_size, buf, k)`` (algorithms notebook).

    ``buf`` is a float64 tensor of ``world_size`` random values (one 1-element chunk per rank),
    known only to its rank. In reduce-scatter step ``k`` rank ``r`` sends chunk ``(r - k) % ws`` to
    ``r + 1`` and receives chunk ``(r - k - 1) % ws`` from ``r - 1``, adding it into its own copy.
    The calls must be one ``isend`` to ``r + 1`` and one ``irecv`` from ``r - 1``. Two launches:
    world size 4 and a random one (3-6), random ``k``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(my_ring_step, "my_ring_step(rank, world_size, buf, k)")
    rng = _rng()
    hint = ("send_chunk = (rank - k) % world_size; recv_chunk = (rank - k - 1) % world_size; post "
            "dist.isend(buf[send_chunk:send_chunk + 1].clone(), (rank + 1) % world_size) and "
            "dist.irecv(incoming, (rank - 1) % world_size), wait() on both, then buf[recv_chunk] += incoming[0].")

    def case(fn, ws):
        k = rng.randint(1, ws - 1)
        start = [torch.tensor([float(rng.randint(0, 99)) for _ in range(ws)], dtype=torch.float64)
                 for _ in range(ws)]
        want = [t.clone() for t in start]
        for r in range(ws):
            c = (r - k - 1) % ws
            want[r][c] += start[(r - 1) % ws][c]
        return k, start, want, _launch_or_fail(fn, ws, [(start[r].clone(), k) for r in range(ws)], hint=hint,
                                               what=f"world size {ws}, step k={k}")

    sizes = [4, rng.choice([3, 5, 6])]
    first = case(my_ring_step, sizes[0])
    if _no_calls(*first[3]):
        def show():
            k, start, want, (res, _) = case(solution, sizes[0])
            print(f"  world size {sizes[0]}, step k={k}:")
            for r in range(sizes[0]):
                print(f"    rank {r}: before {start[r].tolist()}  after {_short(res[r])}")
        return _unfinished("my_ring_step", solution, show)
    for i, ws in enumerate(sizes):
        k, start, want, (results, calls) = first if i == 0 else case(my_ring_step, ws)
        marks = []
        for r in range(ws):
            ok = isinstance(results[r], torch.Tensor) and results[r].shape == want[r].shape \
                and torch.equal(results[r].double(), want[r])
            marks.append("✓" if ok else "✗")
        rows = [(r, start[r], results[r], want[r], marks[r]) for r in range(ws)]
        table = _table(rows, ("rank", "before", "yours", "expected", ""))
        _check_only(calls, {"isend", "irecv", "send", "recv", "get_world_size"}, hint=hint)
        for r in range(ws):
            made = sorted((c.name, c.peer) for c in calls[r] if c.name != "get_world_size")
            if made != [("irecv", (r - 1) % ws), ("isend", (r + 1) % ws)]:
                raise _fail(f"world size {ws}, step k={k}: rank {r} made {made or 'no calls'}; it should post "
                            f"one isend to rank {(r + 1) % ws} and one irecv from rank {(r - 1) % ws}.",
                            hint, table)
        if "✗" in marks:
            raise _fail(f"world size {ws}, step k={k}: rank(s) {[r for r in range(ws) if marks[r] == '✗']} "
                        "hold the wrong buffer.", "which chunk does rank r send in step k, and which does it "
                        "receive? " + hint, table)
    _passed(f"your step matched the ring on every rank (world sizes {sizes[0]} and {sizes[1]}, "
            "random buffers and steps)", table)


# ----------------------------------------------------------------------------------------------
# Predictions: the learner writes values; the check runs the primitive on real ranks


def _prediction(name: str, prediction, solution, real, *, normalise=lambda x: x, hint: str,
                passed: str, what: str = "") -> None:
    if prediction is None:
        print(f"{name}: {NOT_ANSWERED}. Set `prediction` in the exercise cell above and run this cell again.")
        print("The stored SOLUTION (not your answer, so it earns no check mark), next to what the real ranks did:")
        print(f"  solution : {solution}\n  real run : {real}")
        return
    try:
        answer = normalise(prediction)
    except Exception:  # noqa: BLE001 - any malformed prediction gets the same message
        raise _fail(f"your prediction {prediction!r} does not have the expected form{what}.", hint) from None
    if answer != real:
        raise _fail(f"not quite: you predicted {prediction!r}.", hint)
    _passed(passed)


def _rows(x, cast=float):
    return [None if row is None else [cast(v) for v in row] for row in x]


def check_scatter_prediction(prediction, solution=None) -> None:
    """Check the scatter prediction of notebook 02 (world size 4, ``src=1``, teaching inputs)
    against ``collnb.run("scatter", world_size=4, root=1)`` on real ranks.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    from ..collectives import run
    real = [[float(v) for v in t.tolist()] for t in run("scatter", world_size=4, root=1).after]
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="rank 1 is src; its scatter_list holds 10*1 + c in chunk c, and rank j receives chunk j.",
                passed="right: rank j received chunk j of rank 1's scatter_list")


def check_reduce_prediction(prediction, solution=None, *, world_size: int = 5, dst: int = 2) -> None:
    """Check the MAX-reduce prediction of notebook 04 (teaching inputs, ``world_size`` ranks, ``dst``;
    by default 5 and 2, a case the notebook does not draw before asking): ``None`` for every rank
    whose output is undefined, the values on ``dst``.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    from ..collectives import run
    result = run("reduce", world_size=world_size, op="max", root=dst)
    real = [[float(v) for v in t.tolist()] if d else None for t, d in zip(result.after, result.defined)]
    if prediction is not None and isinstance(prediction, list) and len(prediction) == world_size \
            and [p is None for p in prediction] != [r is None for r in real]:
        raise _fail(f"check which ranks are undefined: you predicted {prediction!r}.",
                    "after reduce only dst's tensor is defined; write None for every other rank.")
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="MAX over the ranks of 10*r + c is the largest rank's value in every chunk.",
                passed=f"right: dst={dst} holds the element-wise MAX (rank {world_size - 1}'s values); "
                       "every other rank is undefined")


def check_reduce_scatter_prediction(prediction, solution=None, *, world_size: int = 5) -> None:
    """Check the SUM reduce_scatter prediction of notebook 06 (teaching inputs, ``world_size``
    ranks; 5 by default, a size the notebook does not draw before asking).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    from ..collectives import run
    real = [[float(v) for v in t.tolist()] for t in run("reduce_scatter", world_size=world_size, op="sum").after]
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="rank j gets the sum over all ranks r of their chunk j (10*r + j): one column of the inputs.",
                passed="right: rank j holds the sum of everyone's chunk j")


def check_int8_prediction(prediction, solution=None, *, world_size: int = 6, value: int = 50) -> None:
    """Check the int8 SUM prediction of notebook 07: ``world_size`` ranks all_reduce int8 tensors
    holding ``value`` everywhere; the prediction is the single int every element ends with.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    from ..collectives import run
    result = run("all_reduce", world_size=world_size, dtype=torch.int8, inputs=lambda rank, chunk: value)
    values = sorted({int(v) for t in result.after for v in t.tolist()})
    real = values[0] if len(values) == 1 else values
    _prediction("prediction", prediction, solution, real, normalise=int,
                hint=f"{world_size} * {value} = {world_size * value} does not fit in int8 (-128..127); "
                     "subtract 256 until it does.",
                passed=f"right: every rank holds {real}, not {world_size * value}: int8 SUM wrapped around")


def check_all_to_all_prediction(prediction, solution=None, *, world_size: int = 3) -> None:
    """Check the all_to_all prediction of notebook 08 (teaching inputs, ``world_size`` ranks; 3 by
    default, a size the notebook does not draw before asking).

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    from ..collectives import run
    real = [[float(v) for v in t.tolist()] for t in run("all_to_all", world_size=world_size).after]
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="rank i's output chunk j is rank j's input chunk i (10*j + i).",
                passed="right: after all_to_all, rank i holds chunk i of every rank: the transpose")


def check_ring_prediction(prediction, solution, trace) -> None:
    """Check the round-2 prediction of the algorithms notebook against ``trace`` (a 3-rank ring
    all_reduce :class:`collnb.Trace`): the buffers after round 2, one row per rank.

    Raises:
        CheckFailed: a wrong prediction, with a hint.
    """
    real = [[float(v) for v in row] for row in trace.chunk_values(2).tolist()]
    if prediction is not None:
        try:
            answer = _rows(prediction)
        except Exception:  # noqa: BLE001
            answer = None
        if answer is not None and len(answer) == len(real):
            rows = [(r, answer[r], real[r], "✓" if answer[r] == real[r] else "✗") for r in range(len(real))]
            if answer != real:
                raise _fail("not quite.", "replay(ring3) and step to round 2: which chunk did each rank "
                            "receive, and from whom?", _table(rows, ("rank", "yours", "recorded", "")))
            print(_table(rows, ("rank", "yours", "recorded", "")))
    _prediction("prediction", prediction, solution, real, normalise=_rows,
                hint="give one list of three numbers per rank, e.g. [[a, b, c], [d, e, f], [g, h, i]].",
                passed="right: after round 2 rank r holds chunk r summed over all three ranks")


def check_time_prediction(prediction, solution, *, model_prediction: float, measure: Callable[[], float],
                          tolerance: float = 2.0, tries: int = 3) -> None:
    """Check the bandwidth notebook's exercise: a time, in seconds, predicted from the fitted α-β(-γ)
    model for a message size the sweep never measured.

    The prediction must equal the fitted model's own prediction within 1 % (so it came from the
    model, not from a stopwatch), and a fresh measurement on real ranks must lie within a factor of
    ``tolerance`` of it. A load spike can hit one measurement, so up to ``tries`` are taken before
    judging.

    Args:
        prediction: the learner's answer in seconds (``None`` while unanswered).
        solution: the stored solution in seconds (shown, labelled, while unanswered; never a ✓).
        model_prediction: seconds the fitted model predicts for that size (``FitResult.predict``).
        measure: a function that measures that size once on real ranks and returns seconds
            (median of its iterations); it is called only for an answer that matches the model.
        tolerance: the accepted factor between prediction and measurement (default 2).
        tries: measurements taken at most before a prediction is judged too far off.

    Raises:
        CheckFailed: a prediction that is not a positive number of seconds, that differs from the
            model, or that lies outside the tolerance of every measurement, with a hint.
    """
    if prediction is None:
        print(f"my_prediction: {NOT_ANSWERED}. Set it in the exercise cell above and run this cell again.")
        print(f"The stored SOLUTION (not your answer, so it earns no check mark): {solution * 1e3:.3f} ms; "
              f"the fitted model says {model_prediction * 1e3:.3f} ms.")
        return
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)) or not prediction > 0:
        raise _fail(f"your prediction {prediction!r} is not a positive number of seconds.",
                    "give the time in seconds as a float, e.g. 0.0012 for 1.2 ms.")
    if abs(prediction / model_prediction - 1) > 0.01:
        unit_hint = (" Your number looks like milliseconds: the answer is in seconds."
                     if abs(prediction / 1e3 / model_prediction - 1) < 0.01 else "")
        raise _fail(f"you predicted {prediction * 1e3:.4g} ms; the fitted model says "
                    f"{model_prediction * 1e3:.4g} ms.",
                    "all_reduce on p ranks as a ring: 2(p-1)·α + 2(p-1)/p·m·β + (p-1)/p·m·γ, with m in bytes "
                    "and α, β, γ from the fit." + unit_hint)
    rows = []
    for attempt in range(1, tries + 1):
        got = float(measure())
        ratio = got / prediction
        rows.append((attempt, f"{got * 1e3:.3f} ms", f"{prediction * 1e3:.3f} ms", f"{ratio:.2f}"))
        if 1 / tolerance <= ratio <= tolerance:
            _passed(f"the fitted model predicted a size it never saw, within a factor of {tolerance:g} "
                    "of the measurement", _table(rows, ("measurement", "measured", "predicted", "ratio")))
            return
    raise _fail(f"every measurement was more than a factor of {tolerance:g} away from the prediction.",
                "your formula matches the model, so the machine is probably busy: run this cell again.",
                _table(rows, ("measurement", "measured", "predicted", "ratio")))


# ----------------------------------------------------------------------------------------------
# 11 · data-parallel gradient averaging


def tiny_model(seed: int = 0) -> torch.nn.Module:
    """The small float64 model of notebook 11: ``Linear(3, 4) → Tanh → Linear(4, 1)``, initialised
    from ``torch.manual_seed(seed)`` so every rank and the kernel build the same weights."""
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    finally:
        torch.random.set_rng_state(gen_state)
    return model


def train_steps(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
                after_backward: Callable[[torch.nn.Module], Any] | None = None) -> list[torch.Tensor]:
    """Train ``model`` with plain SGD on the mean squared error for ``steps`` steps on (x, y).

    ``after_backward(model)``, if given, runs between ``loss.backward()`` and the update: a
    data-parallel rank averages its gradients there. Returns the final parameters (detached
    copies, in ``model.parameters()`` order).
    """
    for _ in range(steps):
        model.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if after_backward is not None:
            after_backward(model)
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return [p.detach().clone() for p in model.parameters()]


def _ddp_rank(rank: int, world_size: int, average_gradients: Callable, x, y, steps: int, lr: float):
    return train_steps(tiny_model(), x, y, steps, lr, after_backward=average_gradients)


def check_average_gradients(average_gradients: Callable, solution: Callable | None = None) -> None:
    """Check ``average_gradients(model)`` (notebook 11): after ``loss.backward()`` on each rank's own
    shard of the batch, replace every parameter's ``.grad`` by its mean over the ranks, with
    ``dist.all_reduce``.

    Trains :func:`tiny_model` for 3 SGD steps on real ranks (random world size 2-4; every rank
    gets its own random shard of 4 samples, known only to it) and compares each rank's final
    parameters with the same model trained in this kernel on the **concatenated** batch. Only
    ``dist.all_reduce`` calls are accepted.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    _check_params(average_gradients, "average_gradients(model)")
    rng = _rng()
    steps, lr = 3, 0.1
    hint = ("for p in model.parameters(): dist.all_reduce(p.grad, op=dist.ReduceOp.SUM); "
            "p.grad /= dist.get_world_size().")

    def case(fn, ws):
        gen = torch.Generator().manual_seed(rng.randrange(1 << 31))
        x = torch.randn(4 * ws, 3, generator=gen, dtype=torch.float64)
        y = torch.randn(4 * ws, 1, generator=gen, dtype=torch.float64)
        want = train_steps(tiny_model(), x, y, steps, lr)
        args = [(fn, x[4 * r: 4 * r + 4], y[4 * r: 4 * r + 4], steps, lr) for r in range(ws)]
        return want, _launch_or_fail(_ddp_rank, ws, args, hint=hint, what=f"world size {ws}")

    ws = rng.randint(2, 4)
    want, (results, calls) = case(average_gradients, ws)
    if not any(calls) and _is_stub(average_gradients):
        def show():
            w, (res, _) = case(solution, ws)
            dev = max(float((a - b).abs().max()) for a, b in zip(res[0], w))
            print(f"  world size {ws}: largest difference between rank 0's parameters and the "
                  f"single-process model: {dev:.2e}")
        return _unfinished("average_gradients", solution, show)
    rows = []
    for r in range(ws):
        dev = max(float((a - b).abs().max()) for a, b in zip(results[r], want))
        rows.append((r, f"{dev:.2e}", _summary(calls[r])))
    table = _table(rows, ("rank", "max |param - single-process|", "calls"))
    _check_only(calls, {"all_reduce", "get_world_size"}, hint=hint)
    if not any(_names(c) for c in calls):
        raise _fail(f"world size {ws}: no rank communicated, so each rank trained on its own shard only.",
                    hint, table)
    bad = [r for r in range(ws) if float(rows[r][1]) > 1e-9]
    if bad:
        raise _fail(f"world size {ws}: rank(s) {bad} ended with parameters that differ from the single-process "
                    "model trained on the concatenated batch.",
                    "the gradient of the mean loss over the whole batch is the MEAN of the ranks' gradients: "
                    "all_reduce with SUM, then divide by the world size. " + hint, table)
    _passed(f"at world size {ws}, every rank's model equals the single-process model trained on the "
            "concatenated batch", table)


def _is_stub(fn: Callable) -> bool:
    """True for a function whose body is only ``...``, ``pass`` or a docstring (an unfinished answer):
    its code refers to no name and holds no constant but ``None``, ``...`` and its docstring."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    return not code.co_names and all(c is None or c is Ellipsis or isinstance(c, str) for c in code.co_consts)
