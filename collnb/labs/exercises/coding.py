"""Checks of code a learner writes and runs on real ranks (notebooks 00-10 and the algorithms
notebook): counting the ready ranks, broadcast, gather, all_gather from broadcasts, object
collectives, the token ring and one ring step. Each passes only for the learner's own working
answer: the data each answer needs is known to its source rank only (random per run), every
operation a rank issues is recorded whichever API issued it, and where an exercise is about
message sizes the sizes are checked."""

from __future__ import annotations

import random
from collections.abc import Iterator

import torch

from ...i18n import _
from .framework import Case, Trial, check, short, summary, world_sizes


# ----------------------------------------------------------------------------------------------
# 00 · count the ready ranks


def _ready_flags(rng: random.Random, ws: int) -> list[bool]:
    """Random flags with at least one rank ready and one not (so the count is neither 0 nor the
    world size)."""
    while True:
        flags = [rng.random() < 0.5 for _ in range(ws)]
        if 0 < sum(flags) < ws:
            return flags


def check_count_ready(count_ready: object) -> None:
    """Check ``count_ready(rank, world_size, ready)`` (notebook 00): every rank returns how many
    ranks are ready (a Python ``int``), found with one ``dist.all_reduce``.

    ``ready`` is a bool only its rank knows, drawn at random per run with at least one rank ready
    and one not, so the count is neither the world size nor anything one rank can know alone. Two
    random world sizes (3-6), each run twice with one rank's flag flipped: every other rank sees
    the same arguments in both runs but must return a different count, so an answer that does not
    communicate fails at least one run. Only ``dist.all_reduce`` is accepted (a ``ProcessGroup``
    method or a functional collective doing the work is refused).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Each rank knows only its own flag. Let every rank contribute a number (1 if ready, else 0) to one '
                   'collective that combines them on every rank: which reduce op turns them into a count?'))

    def cases(rng: random.Random) -> Iterator[Case[list[bool]]]:
        runs = []
        for ws in world_sizes(rng, 3, 6):
            flags = _ready_flags(rng, ws)
            flipped = list(flags)
            flipped[rng.randrange(ws)] ^= True
            runs += [flags, flipped]
        for flags in runs:
            yield Case(len(flags), [(f,) for f in flags], want=flags,
                       what=_('at world size {world_size}').format(world_size=len(flags)))

    def judge(t: Trial[list[bool]]) -> None:
        flags, ws, results = t.want, t.world_size, t.results
        want = sum(flags)
        t.show([(r, flags[r], results[r], want, t.summary(r)) for r in t.ranks],
               (_('rank'), _('ready'), _('returned'), _('expected'), _('calls')))
        t.only({"all_reduce"}, hint=_('count with one dist.all_reduce. ') + direction)
        if any(t.names(r).count("all_reduce") != 1 for r in t.ranks):
            raise t.fail(_('world size {world_size}: every rank must make exactly one dist.all_reduce.').format(world_size=ws))
        bad = [r for r in t.ranks if not isinstance(results[r], int) or isinstance(results[r], bool)
               or results[r] != want]
        if bad:
            if all(isinstance(results[r], int) and results[r] == ws for r in bad):
                raise t.fail((_('world size {world_size}: rank(s) {bad} returned the world size, but only {want} of the '
                                '{world_size} ranks was ready (random in every run).') if want == 1 else _('world size {world_size}: rank(s) {bad} returned the world size, but only {want} of the {world_size} ranks were ready (random in every run).')).format(world_size=ws, bad=bad, want=want))
            if any(isinstance(results[r], torch.Tensor) for r in bad):
                raise t.fail(_('world size {world_size}: rank(s) {bad} returned a tensor.').format(world_size=ws, bad=bad),
                             _('return a Python int: int(t.item()) of the tensor you reduced.'))
            raise t.fail(_('world size {world_size}: rank(s) {bad} did not return the number of ready ranks ({want} this '
                           'run).').format(world_size=ws, bad=bad, want=want))

    check(count_ready, "count_ready(rank, world_size, ready)", direction=direction, cases=cases, judge=judge,
          passed=_('every rank counted the ready ranks with one all_reduce ({n_runs} runs, world sizes {first_size} and '
                   '{second_size}, random flags)'))


# ----------------------------------------------------------------------------------------------
# 01 · broadcast


def _random_tensor(rng: random.Random, n: int) -> torch.Tensor:
    """``n`` random float32 values, multiples of 1/8 in -124.875..124.875 (exact)."""
    return torch.tensor([rng.randint(-999, 999) / 8 for _ in range(n)], dtype=torch.float32)


def check_broadcast(my_broadcast: object) -> None:
    """Check ``my_broadcast(rank, world_size, src, tensor)`` (notebook 01).

    On rank ``src``, ``tensor`` holds data only that rank knows (random float32 values, random
    length); on every other rank it is ``torch.zeros`` of the same shape. Every rank must return
    ``src``'s data, having made exactly one ``dist.broadcast`` with ``src=src``. Two launches with
    random world sizes (2-6) and random ``src``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('One collective, made by every rank with the same src: on src the tensor is what is sent, on every '
                   'other rank it is overwritten with it.'))

    def cases(rng: random.Random) -> Iterator[Case[tuple[int, torch.Tensor]]]:
        for ws in world_sizes(rng, 2, 6):
            src = rng.randrange(ws)
            data = _random_tensor(rng, rng.randint(3, 6))
            args = [((src, data.clone()) if r == src else (src, torch.zeros_like(data))) for r in range(ws)]
            yield Case(ws, args, want=(src, data), what=_('world size {world_size}, src={src}').format(world_size=ws, src=src))

    def judge(t: Trial[tuple[int, torch.Tensor]]) -> None:
        (src, data), ws, results = t.want, t.world_size, t.results
        t.show([(r, results[r], ", ".join(f"{c.name}(src={c.peer})" for c in t.calls[r]) or _("(none)"))
                for r in t.ranks], (_('rank'), _('returned'), _('calls')))
        t.only({"broadcast"}, hint=direction)
        bad_calls = [r for r in t.ranks if [(c.name, c.peer) for c in t.calls[r]] != [("broadcast", src)]]
        if bad_calls:
            raise t.fail(_('world size {world_size}, src={src}: rank(s) {bad_calls} did not make exactly one '
                           'dist.broadcast with src={src}.').format(world_size=ws, src=src, bad_calls=bad_calls))
        wrong = [r for r in t.ranks if not (isinstance(got := results[r], torch.Tensor)
                                            and got.shape == data.shape and torch.equal(got, data))]
        if wrong:
            raise t.fail(_("world size {world_size}, src={src}: rank(s) {wrong} did not return src's data {data} "
                           '(random, known only to src).').format(world_size=ws, src=src, wrong=wrong, data=short(data)),
                         _('return the tensor you broadcast into, on every rank.'))

    check(my_broadcast, "my_broadcast(rank, world_size, src, tensor)", direction=direction, cases=cases, judge=judge,
          passed=_("every rank received src's random data through one dist.broadcast, at world sizes {first_size} and "
                   '{second_size}'))


# ----------------------------------------------------------------------------------------------
# 03 · gather


def check_gather(my_gather: object) -> None:
    """Check ``my_gather(rank, world_size, dst, mine)`` (notebook 03).

    Each rank's ``mine`` is a random 1-element int64 tensor only that rank knows. ``dst`` must
    return every rank's value in rank order as one tensor (``torch.cat`` of the gather list);
    every other rank returns ``None``. Each rank makes exactly one ``dist.gather`` with
    ``dst=dst``. Two launches, random world sizes (2-6) and ``dst``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Every rank makes one collective with the same dst. Only dst needs somewhere to receive: a list with '
                   'one tensor per rank (the other ranks pass None); dst then joins that list into one tensor.'))

    def cases(rng: random.Random) -> Iterator[Case[tuple[int, torch.Tensor]]]:
        for ws in world_sizes(rng, 2, 6):
            dst = rng.randrange(ws)
            values = [rng.randint(-9999, 9999) for _ in range(ws)]
            yield Case(ws, [(dst, torch.tensor([values[r]])) for r in range(ws)], want=(dst, torch.tensor(values)),
                       what=_('world size {world_size}, dst={dst}').format(world_size=ws, dst=dst))

    def judge(t: Trial[tuple[int, torch.Tensor]]) -> None:
        (dst, want), ws, results = t.want, t.world_size, t.results
        t.show([(r, "dst" if r == dst else "", results[r],
                 ", ".join(f"{c.name}(dst={c.peer})" for c in t.calls[r]) or _("(none)")) for r in t.ranks],
               (_('rank'), "", _('returned'), _('calls')))
        t.only({"gather"}, hint=direction)
        bad = [r for r in t.ranks if [(c.name, c.peer) for c in t.calls[r]] != [("gather", dst)]]
        if bad:
            raise t.fail(_('world size {world_size}, dst={dst}: rank(s) {bad} did not make exactly one dist.gather with '
                           'dst={dst}.').format(world_size=ws, dst=dst, bad=bad))
        got = results[dst]
        if isinstance(got, (list, tuple)) and got and all(isinstance(x, torch.Tensor) for x in got):
            raise t.fail(_('world size {world_size}, dst={dst}: dst returned the gather list itself ({n_got} tensors).').format(world_size=ws, dst=dst, n_got=len(got)),
                         _('return one tensor: torch.cat(gather_list).'))
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got, want)):
            raise t.fail(_("world size {world_size}, dst={dst}: dst returned {got}; the ranks' values in rank order are "
                           '{want_tolist}.').format(world_size=ws, dst=dst, got=short(got), want_tolist=want.tolist()))
        others = [r for r in t.ranks if r != dst and results[r] is not None]
        if others:
            raise t.fail(_('world size {world_size}, dst={dst}: rank(s) {others} returned something; after gather only '
                           'dst has a result.').format(world_size=ws, dst=dst, others=others), _('return None on every rank other than dst.'))

    check(my_gather, "my_gather(rank, world_size, dst, mine)", direction=direction, cases=cases, judge=judge,
          passed=_("dst received every rank's own value in rank order (world sizes {first_size} and {second_size}, random "
                   'dst)'))


# ----------------------------------------------------------------------------------------------
# 05 · all_gather built from broadcasts


def check_all_gather(my_all_gather: object) -> None:
    """Check ``my_all_gather(rank, world_size, mine)`` (notebook 05), built **from broadcasts only**.

    Each rank's ``mine`` is a random float32 tensor of 2 values only that rank knows. Every rank
    must return ``torch.cat`` of all ranks' ``mine`` in rank order; its calls must be
    ``world_size`` ``dist.broadcast`` calls, one per source rank (any order), each of one rank's
    contribution (2 float32 values), and nothing else: ``dist.all_gather``, a ``ProcessGroup``
    method, a functional collective or DTensor doing the work is refused. Two launches at random
    world sizes (2-6).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Every rank takes a turn as src: for each src, every rank makes one broadcast of a buffer holding '
                   "src's contribution (on src its own data, elsewhere a buffer to receive into), and keeps it; at the "
                   'end each rank joins the buffers in rank order.'))

    def cases(rng: random.Random) -> Iterator[Case[torch.Tensor]]:
        for ws in world_sizes(rng, 2, 6):
            mine = [_random_tensor(rng, 2) for _ in range(ws)]
            yield Case(ws, [(m,) for m in mine], want=torch.cat(mine), what=_('world size {world_size}').format(world_size=ws))

    def judge(t: Trial[torch.Tensor]) -> None:
        want, ws, results, calls = t.want, t.world_size, t.results, t.calls
        t.show([(r, results[r], ", ".join(f"{c.name}(src={c.peer})" if c.source == "torch.distributed"
                                          else summary([c]) for c in calls[r]) or _("(none)")) for r in t.ranks],
               (_('rank'), _('returned'), _('calls')))
        t.only({"broadcast"}, hint=_('this exercise builds all_gather from dist.broadcast only. ') + direction)
        bad = [r for r in t.ranks if sorted(-1 if c.peer is None else c.peer for c in calls[r]) != list(range(ws))]
        if bad:
            raise t.fail(_('world size {world_size}: rank(s) {bad} did not make one dist.broadcast per source rank '
                           '0..{ws_1}.').format(world_size=ws, bad=bad, ws_1=ws - 1))
        sizes_bad = [(r, c) for r in t.ranks for c in calls[r] if c.nbytes != 8]
        if sizes_bad:
            r, c = sizes_bad[0]
            raise t.fail(_("world size {world_size}: rank {r}'s broadcast from src={c_peer} moved {c_nbytes} bytes; one "
                           "rank's contribution is 2 float32 values (8 bytes).").format(world_size=ws, r=r, c_peer=c.peer, c_nbytes=c.nbytes),
                         _('broadcast a buffer shaped like mine (zeros_like(mine) to receive into).'))
        wrong = [r for r in t.ranks if not (isinstance(got := results[r], torch.Tensor)
                                            and got.shape == want.shape and torch.equal(got, want))]
        if wrong:
            raise t.fail(_("world size {world_size}: rank(s) {wrong} did not return every rank's contribution in rank "
                           'order, {want}.').format(world_size=ws, wrong=wrong, want=short(want)))

    check(my_all_gather, "my_all_gather(rank, world_size, mine)", direction=direction, cases=cases, judge=judge,
          passed=_("your broadcasts delivered every rank's random contribution to every rank, as all_gather would (world "
                   'sizes {first_size} and {second_size})'))


# ----------------------------------------------------------------------------------------------
# 09 · object collectives


def check_census(my_census: object) -> None:
    """Check ``my_census(rank, world_size, info)`` (notebook 09).

    Each rank's ``info`` is a dict only that rank knows (``{"rank": r, "token": <random str>,
    "load": <random float>}``). Every rank must return the list of every rank's dict, in rank
    order, with one ``dist.all_gather_object`` call (its two all_gathers inside are torch's).
    Two launches at random world sizes (2-6).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('One object collective gathers a picklable object from every rank onto every rank; it fills a list '
                   'you give it, with one slot per rank.'))

    def cases(rng: random.Random) -> Iterator[Case[list[dict[str, object]]]]:
        for ws in world_sizes(rng, 2, 6):
            infos: list[dict[str, object]] = [{"rank": r, "token": "%06x" % rng.randrange(1 << 24), "load": round(rng.random(), 3)}
                     for r in range(ws)]
            yield Case(ws, [(dict(i),) for i in infos], want=infos, what=_('world size {world_size}').format(world_size=ws))

    def judge(t: Trial[list[dict[str, object]]]) -> None:
        infos, ws = t.want, t.world_size
        t.show([(r, t.results[r], t.summary(r)) for r in t.ranks], (_('rank'), _('returned'), _('calls')))
        t.only({"all_gather_object"}, hint=direction)
        bad = [r for r in t.ranks if t.names(r) != ["all_gather_object"]]
        if bad:
            raise t.fail(_('world size {world_size}: rank(s) {bad} did not make exactly one dist.all_gather_object.').format(world_size=ws, bad=bad))
        wrong = [r for r in t.ranks if t.results[r] != infos]
        if wrong:
            raise t.fail(_("world size {world_size}: rank(s) {wrong} did not return every rank's dict in rank order "
                           "(rank 0's dict was {infos_0}).").format(world_size=ws, wrong=wrong, infos_0=infos[0]))

    check(my_census, "my_census(rank, world_size, info)", direction=direction, cases=cases, judge=judge,
          passed=_("every rank holds every rank's own dict, in rank order, from one all_gather_object (world sizes "
                   '{first_size} and {second_size})'))


# ----------------------------------------------------------------------------------------------
# 10 · token ring


def check_token_ring(token_ring: object) -> None:
    """Check ``token_ring(rank, world_size, value)`` (notebook 10).

    Each rank's ``value`` is a random int only that rank knows. Rank 0 sends
    ``torch.tensor([value])`` to rank 1; rank ``r`` receives from ``r - 1``, adds its ``value`` and
    sends to ``(r + 1) % world_size``; rank 0 finally receives from the last rank. Every rank returns
    the int it received. The calls must be rank 0: ``send(dst=1)``, ``recv(src=ws-1)``; others
    ``recv(src=r-1)``, ``send(dst=(r+1)%ws)`` (or their ``isend``/``irecv``). Two launches at random
    world sizes (3-6).

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('Rank 0 starts the token with its own value, sends it to rank 1 and finally receives it back from '
                   'the last rank; every other rank first receives from its left neighbour, remembers what arrived, '
                   "adds its own value and sends to its right neighbour (the last rank's right neighbour is rank 0)."))

    def cases(rng: random.Random) -> Iterator[Case[tuple[list[int], list[int]]]]:
        for ws in world_sizes(rng, 3, 6):
            values = [rng.randint(1, 999) for _ in range(ws)]
            want = [sum(values)] + [sum(values[:r]) for r in range(1, ws)]
            yield Case(ws, [(v,) for v in values], want=(values, want), what=_('world size {world_size}').format(world_size=ws))

    def expected_calls(r: int, ws: int) -> list[tuple[str, int]]:
        return ([("send", 1), ("recv", ws - 1)] if r == 0 else [("recv", r - 1), ("send", (r + 1) % ws)])

    def judge(t: Trial[tuple[list[int], list[int]]]) -> None:
        (values, want), ws, results = t.want, t.world_size, t.results
        got_calls = [[(c.name, c.peer) for c in t.calls[r]] for r in t.ranks]
        t.show([(r, values[r], results[r], want[r], ", ".join(f"{n}({p})" for n, p in got_calls[r]) or _("(none)"))
                for r in t.ranks], (_('rank'), _('value'), _('returned'), _('expected'), _('calls')))
        t.only({"send", "recv", "isend", "irecv"}, hint=direction)
        blocking = [[(n.lstrip("i"), p) for n, p in got_calls[r]] for r in t.ranks]
        bad = [r for r in t.ranks if blocking[r] != expected_calls(r, ws)]
        if bad:
            r = bad[0]
            raise t.fail(_('world size {world_size}: rank {r} made {made}; it should make {expected} (names with their '
                           'peer rank).').format(world_size=ws, r=r, made=blocking[r] or _('no calls'), expected=expected_calls(r, ws)))
        if results != want:
            raise t.fail(_('world size {world_size}: the ranks returned {results}, expected {want}.').format(world_size=ws, results=results, want=want),
                         _('each rank returns the value it received (before adding its own).'))

    check(token_ring, "token_ring(rank, world_size, value)", direction=direction, cases=cases, judge=judge,
          passed=_("the token went round the ring through real send/recv; rank 0 received the sum of every rank's own "
                   'value (world sizes {first_size} and {second_size})'))


# ----------------------------------------------------------------------------------------------
# algorithms · one ring step


def check_ring_step(my_ring_step: object) -> None:
    """Check ``my_ring_step(rank, world_size, buf, k)`` (algorithms notebook).

    ``buf`` is a float64 tensor of ``world_size`` random values (one 1-element chunk per rank),
    known only to its rank. In reduce-scatter step ``k`` rank ``r`` sends chunk ``(r - k) % ws`` to
    ``r + 1`` and receives chunk ``(r - k - 1) % ws`` from ``r - 1``, adding it into its own copy.
    The calls must be one ``isend`` to ``r + 1`` and one ``irecv`` from ``r - 1`` (or their
    blocking forms, or a ``batch_isend_irecv`` of the two), **each of one chunk** (8 bytes): a
    ring step moves one chunk, not the buffer. Two launches: world size 4 and a random one (3-6),
    random ``k``.

    Raises:
        CheckFailed: a wrong answer, with a hint.
    """
    direction = (_('In step k rank r sends the chunk it last completed, (r - k) % world_size, to its right neighbour '
                   'and receives chunk (r - k - 1) % world_size from its left neighbour; post both (isend/irecv) before '
                   'waiting on either, then add what arrived into that chunk of buf. One chunk is one element here.'))
    chunk_bytes = torch.empty(1, dtype=torch.float64).element_size()

    def cases(rng: random.Random) -> Iterator[Case[tuple[int, list[torch.Tensor], list[torch.Tensor]]]]:
        for ws in (4, rng.choice([3, 5, 6])):
            k = rng.randint(1, ws - 1)
            start = [torch.tensor([float(rng.randint(0, 99)) for _ in range(ws)], dtype=torch.float64)
                     for _ in range(ws)]
            want = [x.clone() for x in start]
            for r in range(ws):
                c = (r - k - 1) % ws
                want[r][c] += start[(r - 1) % ws][c]
            yield Case(ws, [(start[r].clone(), k) for r in range(ws)], want=(k, start, want),
                       what=_('world size {world_size}, step k={k}').format(world_size=ws, k=k))

    def judge(t: Trial[tuple[int, list[torch.Tensor], list[torch.Tensor]]]) -> None:
        (k, start, want), ws, results = t.want, t.world_size, t.results
        marks = []
        for r in t.ranks:
            got = results[r]
            ok = isinstance(got, torch.Tensor) and got.shape == want[r].shape and torch.equal(got.double(), want[r])
            marks.append("✓" if ok else "✗")
        t.show([(r, start[r], results[r], want[r], marks[r]) for r in t.ranks],
               (_('rank'), _('before'), _('yours'), _('expected'), ""))
        t.only({"isend", "irecv", "send", "recv"}, hint=direction)
        for r in t.ranks:
            made = sorted((c.name.lstrip("i"), c.peer) for c in t.calls[r])
            if made != [("recv", (r - 1) % ws), ("send", (r + 1) % ws)]:
                raise t.fail(_('world size {world_size}, step k={k}: rank {r} made {made}; it should post one isend to '
                               'rank {right} and one irecv from rank {left}.').format(world_size=ws, k=k, r=r, made=made or _('no calls'), right=(r + 1) % ws, left=(r - 1) % ws))
            for c in t.calls[r]:
                if c.nbytes != chunk_bytes:
                    moved = _('sent') if c.name.lstrip("i") == "send" else _('received')
                    raise t.fail(_('world size {world_size}, step k={k}: rank {r} {moved} {c_nbytes} bytes ({n_values} '
                                   'values) in one step; a ring step moves one chunk ({chunk_bytes} bytes: 1 float64 '
                                   'value).').format(world_size=ws, k=k, r=r, moved=moved, c_nbytes=c.nbytes, n_values=c.nbytes // chunk_bytes, chunk_bytes=chunk_bytes),
                                 _('send a one-chunk slice of buf (buf[i:i + 1], cloned), and receive into a one-chunk '
                                   "tensor: the ring's bandwidth comes from moving 1/world_size of the buffer per step."))
        if "✗" in marks:
            raise t.fail(_('world size {world_size}, step k={k}: rank(s) {wrong} hold the wrong buffer.').format(world_size=ws, k=k, wrong=[r for r in t.ranks if marks[r] == '✗']), _('which chunk does rank r send in step k, and which does it receive? ') + direction)

    check(my_ring_step, "my_ring_step(rank, world_size, buf, k)", direction=direction, cases=cases, judge=judge,
          passed=_('your step matched the ring on every rank, one chunk per message (world sizes {first_size} and '
                   '{second_size}, random buffers and steps)'))
