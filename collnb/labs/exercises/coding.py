"""Checks of code a learner writes and runs on real ranks (notebooks 00-10 and the algorithms
notebook): counting the ranks, broadcast, gather, all_gather from broadcasts, object collectives,
the token ring and one ring step. Each passes only for the learner's own working answer."""

from __future__ import annotations

from typing import Callable

import torch

from .framework import (_check_only, _check_params, _fail, _launch_or_fail, _names, _no_calls, _passed, _rng, _short,
                        _summary, _table, _unfinished, _world_sizes)


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
