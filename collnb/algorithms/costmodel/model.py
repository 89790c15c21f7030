"""The alpha-beta(-gamma) cost model of collective algorithms, and algbw/busbw.

The model (Hockney's; used for collectives by Thakur, Rabenseifner & Gropp 2005 and by Chan et
al. 2007): sending one message of ``b`` bytes between two ranks takes ``alpha + b * beta``
seconds, and combining ``b`` bytes with the reduce op takes ``b * gamma`` seconds.

* ``alpha`` -- latency per message (seconds);
* ``beta`` -- transfer time per byte (seconds/byte; ``1/beta`` is the link bandwidth);
* ``gamma`` -- reduction time per byte (seconds/byte).

A round costs what its busiest rank pays, under the usual assumptions of those papers: every
rank can send one message and receive one message at the same time (full duplex), messages
from or to the same rank in one round go one after the other, and rounds do not overlap::

    T(round) = alpha * max_r max(msgs_sent_r, msgs_recv_r)
             + beta  * max_r max(bytes_sent_r, bytes_recv_r)
             + gamma * max_r bytes_reduced_r

:func:`round_costs` applies this to the rounds of a :class:`collnb.Trace` (or a schedule);
:func:`predict` sums it for an algorithm at a world size and buffer size, and also gives the
closed form from the literature (``p`` ranks, ``m`` bytes, ``lg`` = log2,
``p' = 2^floor(lg p)``):

=================  ====================  ==========================================================
primitive          algorithm             T (closed form)
=================  ====================  ==========================================================
all_reduce         ring                  2(p-1) a + 2(p-1)/p m b + (p-1)/p m g
all_reduce         recursive_doubling    lg p (a + m b + m g); non-power of two (fold):
                                         (lg p' + 2)(a + m b) + (lg p' + 1) m g
all_reduce         rabenseifner          2 lg p a + 2(p-1)/p m b + (p-1)/p m g; non-power of two:
                                         that for p' plus fold (a + m b + m g) and unfold (a + m b)
all_reduce         binomial_tree         2 ceil(lg p)(a + m b) + ceil(lg p) m g  (reduce + broadcast)
all_gather         ring                  (p-1) a + (p-1)/p m b
all_gather         recursive_doubling    lg p a + (p-1)/p m b  (power of two)
all_gather         bruck                 ceil(lg p) a + (p-1)/p m b
reduce_scatter     ring                  (p-1) a + (p-1)/p m (b + g)
reduce_scatter     recursive_halving     lg p a + (p-1)/p m (b + g)  (power of two)
broadcast          binomial_tree         ceil(lg p)(a + m b)
broadcast          linear                (p-1)(a + m b)
broadcast          chain (S segments)    (p - 2 + S)(a + m/S b)
reduce             binomial_tree         ceil(lg p)(a + m b + m g)
scatter, gather    binomial_tree         ceil(lg p) a + (p-1)/p m b
scatter, gather    linear                (p-1) a + (p-1)/p m b
all_to_all         pairwise, linear      (p-1) a + (p-1)/p m b
=================  ====================  ==========================================================

``m`` is the size of one rank's buffer as nccl-tests counts it: the all_reduce/broadcast/reduce
buffer, the whole all_gather output, the whole reduce_scatter input, the root's whole
scatter/gather buffer, one rank's whole all_to_all input.

Sources:
    * R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication Operations
      in MPICH", IJHPCA 19(1):49-66, 2005 (sections 3-4: the model and the costs of ring,
      recursive doubling/halving, Rabenseifner, binomial trees, pairwise exchange, Bruck).
    * E. Chan, M. Heimlich, A. Purkayastha, R. van de Geijn, "Collective communication: theory,
      practice, and experience", Concurrency Computat.: Pract. Exper. 19:1749-1783, 2007 (the
      alpha-beta-gamma model, lower bounds, pipelined broadcast).
    * NVIDIA nccl-tests, doc/PERFORMANCE.md (algbw, busbw and the bus-bandwidth factors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...collectives import BENCH_PRIMITIVES, SPECS
from ...i18n import _
from ...vocabulary import check_choice, check_int
from ..schedules import check_algorithm, schedule

__all__ = ["CostModel", "Prediction", "DEFAULT_MODEL", "round_costs", "predict", "closed_form", "algbw",
           "busbw", "busbw_factor"]


@dataclass(frozen=True)
class CostModel:
    """Parameters of the alpha-beta-gamma model.

    Attributes:
        alpha: seconds per message (latency).
        beta: seconds per byte transferred (1/bandwidth).
        gamma: seconds per byte reduced.
        source: where the numbers come from (free text).
    """

    alpha: float = 50e-6
    beta: float = 1.0 / 4e9
    gamma: float = 1.0 / 10e9
    source: str = ("illustrative: 50 us per message, 4 GB/s transfers, 10 GB/s reduction -- the order "
                   "calibrate() measured for gloo over loopback on a 2-core CPU machine (63 us, 4.3 GB/s, "
                   "10.6 GB/s); measure yours with collnb.costmodel.calibrate()")

    def message(self, nbytes: float) -> float:
        """Seconds to send one message of ``nbytes`` bytes: ``alpha + nbytes * beta``."""
        return self.alpha + nbytes * self.beta


#: The model used when none is given.
DEFAULT_MODEL = CostModel()


@dataclass
class Prediction:
    """The model's prediction for one algorithm.

    Attributes:
        primitive, algorithm, world_size: what was predicted.
        nbytes: buffer size in bytes (see the module doc for what it counts).
        rounds: number of rounds.
        seconds: predicted time (sum of :func:`round_costs` over the algorithm's rounds).
        round_seconds: per-round predicted times (numpy float64 array).
        alpha_count: messages on the critical path (the ``a`` coefficient).
        beta_bytes: bytes on the critical path (the ``b`` coefficient).
        gamma_bytes: bytes reduced on the critical path (the ``g`` coefficient).
        closed_form_seconds: the literature's closed form (``None`` where there is none for this
            world size, e.g. recursive doubling all_gather at a non-power of two).
        formula: the closed form as text.
        model: the :class:`CostModel` used.
    """

    primitive: str
    algorithm: str
    world_size: int
    nbytes: int
    rounds: int
    seconds: float
    round_seconds: np.ndarray
    alpha_count: int
    beta_bytes: float
    gamma_bytes: float
    closed_form_seconds: float | None
    formula: str
    model: CostModel = field(default=DEFAULT_MODEL)


def _round_terms(transfers, world_size):
    """(max msgs, max bytes, max reduced bytes) of one round's transfers."""
    sent_n = np.zeros(world_size, dtype=np.int64)
    recv_n = np.zeros(world_size, dtype=np.int64)
    sent_b = np.zeros(world_size, dtype=np.float64)
    recv_b = np.zeros(world_size, dtype=np.float64)
    red_b = np.zeros(world_size, dtype=np.float64)
    for t in transfers:
        nb = float(t[2])
        sent_n[t[0]] += 1
        recv_n[t[1]] += 1
        sent_b[t[0]] += nb
        recv_b[t[1]] += nb
        if t[3]:
            red_b[t[1]] += nb
    if not len(transfers):
        return 0, 0.0, 0.0
    return (int(max(sent_n.max(), recv_n.max())), float(max(sent_b.max(), recv_b.max())), float(red_b.max()))


def _rounds_of(obj, nbytes=None):
    """Normalise a Trace or a Schedule (+ nbytes) into (world_size, [[(src, dst, bytes, reduce)]])."""
    if hasattr(obj, "chunk_bounds"):  # a Trace
        return obj.world_size, [[(t.src, t.dst, t.nbytes, t.reduce) for t in r.transfers] for r in obj.rounds]
    if nbytes is None:
        raise ValueError(_("a schedule has no sizes: pass nbytes (bytes of one rank's buffer)"))
    C = obj.n_chunks
    per = float(nbytes) / C
    return obj.world_size, [[(t.src, t.dst, per * len(t.chunks), t.reduce) for t in r.transfers] for r in obj.rounds]


def round_costs(trace_or_schedule, model: CostModel | None = None, nbytes: float | None = None) -> np.ndarray:
    """Predicted seconds of every round (float64 array, one entry per round).

    Args:
        trace_or_schedule: a :class:`collnb.Trace` (its transfers carry bytes) or a
            :class:`collnb.algorithms.Schedule` with ``nbytes`` (bytes of one rank's buffer, split
            evenly over its chunks).
        model: :class:`CostModel` (default :data:`DEFAULT_MODEL`).

    Each round costs ``alpha * max messages + beta * max bytes + gamma * max reduced bytes`` over
    the ranks (module doc; Thakur et al. 2005, section 3).
    """
    model = model or DEFAULT_MODEL
    ws, rounds = _rounds_of(trace_or_schedule, nbytes)
    out = []
    for ts in rounds:
        a, b, g = _round_terms(ts, ws)
        out.append(model.alpha * a + model.beta * b + model.gamma * g)
    return np.array(out, dtype=np.float64)


def _lg(p):
    return math.log2(p)


def closed_form(primitive: str, algorithm: str, world_size: int, nbytes: float, model: CostModel | None = None,
                segments: int | None = None) -> tuple:
    """The literature's closed-form time, ``(seconds or None, formula text)`` (see the module table).

    ``None`` where no closed form is given for this world size (recursive doubling all_gather and
    recursive halving reduce_scatter at a non-power of two: the folded ranks carry two blocks, so
    the cost depends on how the blocks group; :func:`predict` still sums the rounds).
    """
    check_algorithm(primitive, algorithm)
    M = model or DEFAULT_MODEL
    a, b, g = M.alpha, M.beta, M.gamma
    p, m = world_size, float(nbytes)
    if p == 1:
        return 0.0, "0 (one rank: nothing to send)"
    pof2 = p & (p - 1) == 0
    L = math.ceil(_lg(p))
    pp = 1 << (p.bit_length() - 1)
    lp = int(_lg(pp))
    frac = (p - 1) / p
    key = (primitive, algorithm)
    if key == ("all_reduce", "ring"):
        return 2 * (p - 1) * a + 2 * frac * m * b + frac * m * g, "2(p-1) a + 2(p-1)/p m b + (p-1)/p m g"
    if key == ("all_reduce", "recursive_doubling"):
        if pof2:
            return lp * (a + m * b + m * g), "lg p (a + m b + m g)"
        return ((lp + 2) * (a + m * b) + (lp + 1) * m * g,
                "(lg p' + 2)(a + m b) + (lg p' + 1) m g  (fold + lg p' exchanges + unfold)")
    if key == ("all_reduce", "rabenseifner"):
        f = (pp - 1) / pp
        core = 2 * lp * a + 2 * f * m * b + f * m * g
        if pof2:
            return core, "2 lg p a + 2(p-1)/p m b + (p-1)/p m g"
        return (core + (a + m * b + m * g) + (a + m * b),
                "2 lg p' a + 2(p'-1)/p' m b + (p'-1)/p' m g + fold (a + m b + m g) + unfold (a + m b)")
    if key == ("all_reduce", "binomial_tree"):
        return 2 * L * (a + m * b) + L * m * g, "2 ceil(lg p)(a + m b) + ceil(lg p) m g"
    if key == ("all_gather", "ring"):
        return (p - 1) * a + frac * m * b, "(p-1) a + (p-1)/p m b"
    if key == ("all_gather", "recursive_doubling"):
        if pof2:
            return lp * a + frac * m * b, "lg p a + (p-1)/p m b"
        return None, "lg p a + (p-1)/p m b holds for powers of two; with a fold, sum the rounds"
    if key == ("all_gather", "bruck"):
        return L * a + frac * m * b, "ceil(lg p) a + (p-1)/p m b"
    if key == ("reduce_scatter", "ring"):
        return (p - 1) * a + frac * m * (b + g), "(p-1) a + (p-1)/p m (b + g)"
    if key == ("reduce_scatter", "recursive_halving"):
        if pof2:
            return lp * a + frac * m * (b + g), "lg p a + (p-1)/p m (b + g)"
        return None, "lg p a + (p-1)/p m (b + g) holds for powers of two; with a fold, sum the rounds"
    if key == ("broadcast", "binomial_tree"):
        return L * (a + m * b), "ceil(lg p)(a + m b)"
    if key == ("broadcast", "linear"):
        return (p - 1) * (a + m * b), "(p-1)(a + m b)"
    if key == ("broadcast", "chain"):
        S = segments or p
        return (p - 2 + S) * (a + m / S * b), "(p - 2 + S)(a + m/S b)"
    if key == ("reduce", "binomial_tree"):
        return L * (a + m * b + m * g), "ceil(lg p)(a + m b + m g)"
    if primitive in ("scatter", "gather") and algorithm == "binomial_tree":
        return L * a + frac * m * b, "ceil(lg p) a + (p-1)/p m b"
    if primitive in ("scatter", "gather") and algorithm == "linear":
        return (p - 1) * a + frac * m * b, "(p-1) a + (p-1)/p m b"
    if primitive == "all_to_all":
        return (p - 1) * a + frac * m * b, "(p-1) a + (p-1)/p m b"
    raise AssertionError(f"no cost formula for {primitive}/{algorithm}")  # every algorithm has one


def predict(primitive: str, algorithm: str, world_size: int, nbytes: float, model: CostModel | None = None,
            segments: int | None = None, root: int = 0) -> Prediction:
    """Predict the time of ``algorithm`` for ``primitive`` at ``world_size`` on ``nbytes`` bytes.

    Sums :func:`round_costs` over the algorithm's schedule (its chunks split ``nbytes`` evenly)
    and reports the closed form too.

    Args:
        primitive, algorithm: see :data:`collnb.algorithms.ALGORITHMS`.
        world_size: 1..16. nbytes: bytes of one rank's buffer (module doc), >= 0.
        model: :class:`CostModel` (default :data:`DEFAULT_MODEL`).
        segments: broadcast only (chain's pipeline segments; default world_size).

    Returns:
        :class:`Prediction` (seconds, rounds, coefficients, closed form).

    Raises:
        ValueError: unknown primitive/algorithm (valid ones listed), bad sizes.
    """
    if nbytes < 0:
        raise ValueError(_("nbytes must be >= 0; got {value}").format(value=nbytes))
    model = model or DEFAULT_MODEL
    sched = schedule(primitive, algorithm, world_size, root, segments if primitive == "broadcast" else None)
    ws, rounds = _rounds_of(sched, nbytes)
    A = B = G = 0.0
    per = []
    for ts in rounds:
        a, b, g = _round_terms(ts, ws)
        A += a
        B += b
        G += g
        per.append(model.alpha * a + model.beta * b + model.gamma * g)
    cf, text = closed_form(primitive, algorithm, world_size, nbytes, model, sched.n_chunks if primitive == "broadcast"
                           else None)
    return Prediction(primitive, sched.algorithm, world_size, int(nbytes), sched.n_rounds, float(sum(per)),
                      np.array(per, dtype=np.float64), int(A), B, G, cf, text, model)


# ----------------------------------------------------------------------------------------------
# algbw / busbw (nccl-tests doc/PERFORMANCE.md)

def busbw_factor(primitive: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor: all_reduce ``2(n-1)/n``; all_gather, reduce_scatter,
    all_to_all, scatter, gather ``(n-1)/n``; broadcast, reduce ``1``: the spec table's
    :attr:`collnb.collectives.PrimitiveSpec.busbw` (which cites nccl-tests' doc/PERFORMANCE.md,
    src/scatter.cu and src/gather.cu).

    Raises:
        TypeError / ValueError: a primitive without a factor (``"unknown primitive for busbw
            'barrier'; choose one of: ..."``), a world size that is not an int >= 1.
    """
    n = check_int("world_size", world_size, 1)
    factor = SPECS[check_choice("primitive for busbw", primitive, BENCH_PRIMITIVES)].busbw
    assert factor is not None  # BENCH_PRIMITIVES: the rows with a factor
    return factor(n)


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): ``nbytes / seconds``, ``nbytes`` the buffer size
    as nccl-tests counts it (module doc). Source: nccl-tests doc/PERFORMANCE.md.

    Raises:
        ValueError: ``seconds <= 0``.
    """
    if seconds <= 0:
        raise ValueError(_("seconds must be > 0; got {value}").format(value=seconds))
    return nbytes / seconds / 1e9


def busbw(primitive: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in GB/s: ``algbw * busbw_factor(primitive, world_size)``, comparable across
    world sizes with the hardware's peak. Source: nccl-tests doc/PERFORMANCE.md."""
    return algbw(nbytes, seconds) * busbw_factor(primitive, world_size)
