"""The exercise of notebook 19 (a virtual cluster): an all_reduce that sends as little as possible
across the node boundary, checked by the bytes that really left each node.

The learner writes ``tier_aware_all_reduce(rank, world_size, x, ranks_per_node)``: return the sum of
every rank's ``x`` (float32, :data:`NUMEL` random integers known only to that rank). The check is
written with the exercises framework's public API (:func:`collnb.labs.exercises.framework.check`: a
:class:`~collnb.labs.exercises.framework.Case`, a judge): it runs the answer on the cluster's own
ranks (an emulated cluster is made collnb's active rank set for the check) with every call each rank
made recorded, and passes when

* every rank returned the exact sum, and
* the bytes that left each node are at most :data:`SLACK` times what the hierarchical schedule sends
  (``2(N-1)/N`` of the buffer, the least an all_reduce of whole buffers can move across N nodes):
  **measured** on an emulated cluster, from each node's ``eth0`` counter
  (``/sys/class/net/eth0/statistics/tx_bytes`` in its namespace: every frame that left the node,
  headers included, so the bound allows tbf's 1514/1448); **estimated** on a modelled or real
  cluster from the recorded calls, each priced as gloo runs it (:func:`.traffic.estimate_crossing`).

Its table shows, in every mode, each rank's calls and the bytes they sent across nodes as the
estimate prices them, and each node's bytes (on an emulated cluster, counted beside the calls' share):
the learner sees which of their calls crossed the node boundary.

A flat ring (``dist.all_reduce`` on all ranks) sends ``2(p-1)/p`` of the buffer per node, 1.5 times as
much at 2 x 2: it fails. Sending everything to one rank and back fails too. Gathering everything
everywhere fails. What passes is an all_reduce whose inter-node part moves only shards: reduce inside
the node first, cross with a part of the buffer, then spread inside the node again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, cast

from ...i18n import N_, _
from ...units import format_bytes
from ..exercises.framework import Case, Trial, check, summary
from .rankset import active
from .traffic import Counted, counted, estimate_crossing_per_rank, fn_calls

if TYPE_CHECKING:
    from ...ranks import CallRecord
    from .clusters import AnyCluster

#: What a trial of the check holds for its judge: each rank's seed.
_Trial = Trial[list[int]]

__all__ = ["check_tier_aware_all_reduce", "NUMEL", "SLACK"]

#: Values of each rank's buffer (float32: 4 MiB).
NUMEL = 1 << 20
#: How far above the hierarchical schedule's inter-node bytes an answer may go.
SLACK = 1.2
#: Frame bytes per byte of TCP payload on a veth with a 1500-byte MTU (1514 / 1448).
FRAMES = 1514 / 1448
_DIRECTION = N_("Make a group of the ranks of your node and a group of the ranks with your local rank (one per node) "
                "with dist.new_group (every rank makes every group, in the same order); reduce-scatter inside the node, "
                "all_reduce your shard across nodes, all-gather inside the node.")
_SIGNATURE = "tier_aware_all_reduce(rank, world_size, x, ranks_per_node)"


def check_tier_aware_all_reduce(tier_aware_all_reduce: Callable[..., object], cluster: AnyCluster) -> None:
    """Check ``tier_aware_all_reduce(rank, world_size, x, ranks_per_node)`` on ``cluster`` (a
    :func:`collnb.cluster` of at least 2 nodes and 2 ranks per node; module doc).

    Prints the per-rank table (calls, bytes they sent across nodes) and each node's bytes, then ``✓``;
    or "not answered yet" while the function returns ``None`` and makes no call. Raises
    :class:`collnb.exercises.CheckFailed` (a ✗ with the table and a hint) for a function that cannot
    be called so, a failure of the learner's code on a rank, a wrong sum or too many bytes across
    nodes, and ValueError for a cluster of one node or one rank per node.
    """
    N, L, p = cluster.nodes, cluster.ranks_per_node, cluster.world_size
    if N < 2 or L < 2:
        raise ValueError(_("the check needs at least 2 nodes of 2 ranks; got {N} x {L}").format(N=N, L=L))
    emulated = getattr(cluster, "mode", "emulated") == "emulated"
    m = NUMEL * 4
    ideal = 2 * (N - 1) / N * m
    flat = 2 * (p - 1) / p * m
    bound = SLACK * ideal * (FRAMES if emulated else 1.0) + (256 << 10)
    how = (_("measured: frames that left each node's eth0") if emulated else
           _("estimated from the collectives each rank issued (a modelled cluster has no real links)"))

    def cases(rng: random.Random) -> Iterator[Case[list[int]]]:
        seeds = [rng.randrange(1 << 31) for _r in range(p)]
        yield Case(p, [(_learner_rank, emulated, tier_aware_all_reduce, s, L) for s in seeds], want=seeds,
                   what=_("{N} nodes x {L} ranks").format(N=N, L=L), fn=counted)

    def answers(trial: _Trial) -> list[Counted]:
        return cast(list[Counted], trial.results)  # what counted returns on every rank

    def learners(trial: _Trial, rank: int) -> list[CallRecord]:
        """The learner's own calls (on an emulated cluster, without the count's barriers)."""
        return fn_calls(trial.calls[rank], emulated)

    def unanswered(trial: _Trial) -> bool:
        return all(out is None for out, _sent in answers(trial)) and not any(learners(trial, r) for r in trial.ranks)

    def judge(trial: _Trial) -> None:
        import torch
        calls = [learners(trial, r) for r in trial.ranks]
        per_rank = estimate_crossing_per_rank(calls, L, p)
        from_calls = [sum(per_rank[n * L:(n + 1) * L]) for n in range(N)]
        sent = [cast(int, answers(trial)[n * L][1]) for n in range(N)] if emulated else from_calls  # counted: an int
        trial.show([(r, r // L, summary(calls[r]), format_bytes(per_rank[r])) for r in trial.ranks],
                   (_("rank"), _("node"), _("calls"), _("sent across nodes by its calls")))
        if emulated:
            rows = [_("node {n}: {sent} left the node, {calls} by its ranks' calls as gloo runs them (the hierarchical "
                      "schedule: {ideal}, the flat ring: {flat})").format(
                          n=n, sent=format_bytes(s), calls=format_bytes(c), ideal=format_bytes(ideal),
                          flat=format_bytes(flat)) for n, (s, c) in enumerate(zip(sent, from_calls))]
        else:
            rows = [_("node {n}: {sent} left the node (the hierarchical schedule: {ideal}, the flat ring: {flat})").format(
                n=n, sent=format_bytes(s), ideal=format_bytes(ideal), flat=format_bytes(flat)) for n, s in enumerate(sent)]
        trial.table += "\n" + "\n".join("  " + row for row in rows)
        want = cast(torch.Tensor, sum(  # a tensor: every check has p >= 4 seeds
            torch.randint(-20, 21, (NUMEL,), generator=torch.Generator().manual_seed(s)).to(torch.float32)
            for s in trial.want))
        bad = [r for r, (got, _sent) in enumerate(answers(trial))
               if not (isinstance(got, torch.Tensor) and got.shape == want.shape
                       and torch.equal(got.to(torch.float32), want))]
        if bad:
            raise trial.fail(_("ranks {ranks} did not return the sum of every rank's x.").format(
                ranks=", ".join(map(str, bad))))
        if max(sent) > bound:
            raise trial.fail(_("the sum is right, but too many bytes crossed the node boundary ({how}):").format(how=how))
        most.append(max(sent))

    def passed(trials: list[_Trial]) -> str:
        return _("the exact sum on every rank, with {sent} at most leaving a node: the inter-node link carried "
                 "only shards ({how})").format(sent=format_bytes(most[-1]), how=how)

    most: list[float] = []  # the most bytes that left a node, per judged trial

    with active(cluster):  # an emulated cluster's own ranks run the check, its calls recorded there
        check(tier_aware_all_reduce, _SIGNATURE, direction=_(_DIRECTION), cases=cases, judge=judge, passed=passed,
              unanswered=unanswered, grouped=False)


def _learner_rank(rank: int, world_size: int, learner: Callable[..., object], seed: int, ranks_per_node: int) -> object:
    import torch
    x = torch.randint(-20, 21, (NUMEL,), generator=torch.Generator().manual_seed(seed)).to(torch.float32)
    return learner(rank, world_size, x, ranks_per_node)
