"""The exercise-check framework: run a learner's function on real ranks with the calls each rank
made recorded (:func:`launch_recorded`), and report the result as a learner reads it (``✓``, or a
:class:`CheckFailed` with a per-rank table and a hint, or "not answered yet")."""

from __future__ import annotations

import functools
import inspect
import random
import sys
from dataclasses import replace
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from ...ranks import CallRecord, LaunchTimeout, RankError, launch
from ...ranks import distributed_c10d as c10d  # torch.distributed.distributed_c10d, through ranks._torch_internals

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


#: Seconds a check gives the learner's function before it says it did not finish.
CHECK_TIMEOUT_S = 60.0


def _launch_or_fail(fn, world_size, per_rank_args=None, fn_world_size=None, *, hint: str, what: str):
    try:
        return launch_recorded(fn, world_size, per_rank_args, fn_world_size, timeout=CHECK_TIMEOUT_S)
    except RankError as err:
        head = str(err).split("Traceback")[0].strip()
        if err.exc_type in ("DidNotJoin",) or "timed out" in head.lower() or "Timeout" in err.exc_type:
            raise _fail(f"{what}: the ranks did not meet in the same calls.\n{head}",
                        "every rank must make the same collective calls in the same order "
                        "(a send needs a matching recv). " + hint) from None
        raise _fail(f"{what}: your function raised on a rank.\n{head}\n{err.rank_traceback.strip()}",
                    hint) from None
    except LaunchTimeout as err:  # a check has no timeout to raise: say what to look for instead
        ranks = ", ".join(map(str, err.pending))
        where = "\n".join(f"  rank {r}: {v}" for r, v in sorted(err.outcomes.items()))
        raise _fail(f"{what}: your function did not finish within {CHECK_TIMEOUT_S:g} s (rank(s) {ranks} still "
                    f"running). A check gives it plenty of time, so waiting longer will not help: look for a rank "
                    f"waiting in a call "
                    f"its peers never make (a recv without its send, a collective inside an if on the rank), or a "
                    f"loop that never ends; fix the function, run its cell, then run this check again.\n{where}",
                    hint) from None


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


def _is_stub(fn: Callable) -> bool:
    """True for a function whose body is only ``...``, ``pass`` or a docstring (an unfinished answer):
    its code refers to no name and holds no constant but ``None``, ``...`` and its docstring."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    return not code.co_names and all(c is None or c is Ellipsis or isinstance(c, str) for c in code.co_consts)
