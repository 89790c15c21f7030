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

:func:`round_costs` applies this to the rounds of a :class:`collnb.trace.Trace` (or a schedule);
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
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["CostModel", "Prediction", "DEFAULT_MODEL", "round_costs", "predict", "closed_form", "algbw",
           "busbw", "busbw_factor", "calibrate", "BUILTIN_FORM", "coefficients", "Fit", "fit", "fit_each", "crossovers"]


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
        raise ValueError("a schedule has no sizes: pass nbytes (bytes of one rank's buffer)")
    C = obj.n_chunks
    per = float(nbytes) / C
    return obj.world_size, [[(t.src, t.dst, per * len(t.chunks), t.reduce) for t in r.transfers] for r in obj.rounds]


def round_costs(trace_or_schedule, model: CostModel | None = None, nbytes: float | None = None) -> np.ndarray:
    """Predicted seconds of every round (float64 array, one entry per round).

    Args:
        trace_or_schedule: a :class:`collnb.trace.Trace` (its transfers carry bytes) or a
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
    raise ValueError(f"no cost formula for {primitive}/{algorithm}")


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
    from .schedules import schedule  # noqa: PLC0415 - torch import only when needed
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0; got {nbytes}")
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
    all_to_all, scatter, gather ``(n-1)/n``; broadcast, reduce ``1``.

    Source: NVIDIA nccl-tests, doc/PERFORMANCE.md ("Bus bandwidth", its summary lists all_reduce,
    reduce_scatter, all_gather, broadcast, reduce, all_to_all); scatter and gather from
    nccl-tests src/scatter.cu and src/gather.cu (``ScatterGetBw``/``GatherGetBw``: ``(n-1)/n``).

    Raises:
        ValueError: unknown primitive (valid ones listed).
    """
    n = world_size
    if n < 1:
        raise ValueError(f"world_size must be >= 1; got {n}")
    table = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
             "all_to_all": (n - 1) / n, "scatter": (n - 1) / n, "gather": (n - 1) / n,
             "broadcast": 1.0, "reduce": 1.0}
    if primitive not in table:
        raise ValueError(f"no bus-bandwidth factor for {primitive!r}; choose one of {', '.join(table)}")
    return table[primitive]


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes/s): ``nbytes / seconds``, ``nbytes`` the buffer size
    as nccl-tests counts it (module doc). Source: nccl-tests doc/PERFORMANCE.md.

    Raises:
        ValueError: ``seconds <= 0``.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0; got {seconds}")
    return nbytes / seconds / 1e9


def busbw(primitive: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in GB/s: ``algbw * busbw_factor(primitive, world_size)``, comparable across
    world sizes with the hardware's peak. Source: nccl-tests doc/PERFORMANCE.md."""
    return algbw(nbytes, seconds) * busbw_factor(primitive, world_size)


# ----------------------------------------------------------------------------------------------
# Calibration on real ranks

def _rank_pingpong(rank, world_size, sizes, repeats):
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    out = {}
    # NCCL moves GPU tensors only: the launcher made this rank's GPU current. Its send/recv are
    # asynchronous on the GPU, so the clock stops after torch.cuda.synchronize().
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    for n in sizes:
        t = torch.zeros(max(1, n // 4), dtype=torch.float32, device=device)
        best = float("inf")
        for it in range(repeats + 1):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            elif rank == 1:
                dist.recv(t, 0)
                dist.send(t, 0)
            if cuda:
                torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / 2
            if it:
                best = min(best, dt)
        out[n] = best
    gamma = None
    if rank == 0:
        a = torch.ones(4 << 20)
        b = torch.ones(4 << 20)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            a.add_(b)
            best = min(best, time.perf_counter() - t0)
        gamma = best / a.nbytes
    return out, gamma


def calibrate(sizes=(8, 64 << 10, 1 << 20, 8 << 20), repeats: int = 5, backend: str = "gloo",
              timeout: float = 60.0) -> CostModel:
    """Measure ``alpha`` and ``beta`` with a ping-pong between two real ranks, and ``gamma`` with a
    float32 ``add_`` on one rank; returns a :class:`CostModel`.

    One-way time per size is half the best of ``repeats`` round trips; ``alpha`` and ``beta`` are
    the intercept and slope of a least-squares line through (bytes, seconds). Takes ~1 s.

    Raises:
        collnb.launcher.LaunchError: the ranks failed.
    """
    from ..ranks import launch  # noqa: PLC0415
    res = launch(_rank_pingpong, 2, args=(list(sizes), repeats), backend=backend, timeout=timeout, debug=False)
    times, gamma = res[0]
    x = np.array([max(4, n // 4 * 4) for n in sizes], dtype=np.float64)
    y = np.array([times[n] for n in sizes], dtype=np.float64)
    beta, alpha = np.polyfit(x, y, 1)
    alpha = max(float(alpha), float(y.min()) * 0.5, 1e-7)
    beta = max(float(beta), 1e-13)
    return CostModel(alpha=alpha, beta=beta, gamma=float(gamma),
                     source=f"measured by calibrate() on {backend}: ping-pong of {list(sizes)} bytes, "
                            f"float32 add_ of 16 MiB")


# ----------------------------------------------------------------------------------------------
# Fitting alpha, beta (and gamma) to measured times

#: The algorithm whose cost form :func:`fit` assumes for a backend's ``builtin`` collective.
#: gloo's all_reduce is a ring over segments (gloo ``gloo/allreduce.cc``), as is NCCL's for large
#: buffers; its all_gather and reduce_scatter are rings too. For the rest the form is an
#: assumption: the fitted alpha and beta are then *effective* values under that form.
BUILTIN_FORM = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "ring", "broadcast": "binomial_tree",
                "reduce": "binomial_tree", "scatter": "linear", "gather": "linear", "all_to_all": "pairwise"}

_UNIT_A, _UNIT_B, _UNIT_G = CostModel(1.0, 0.0, 0.0, "unit"), CostModel(0.0, 1.0, 0.0, "unit"), CostModel(0.0, 0.0, 1.0,
                                                                                                         "unit")


def coefficients(primitive: str, algorithm: str, world_size: int, nbytes: float) -> tuple:
    """``(A, B, G)`` with ``T = alpha*A + beta*B + gamma*G`` for this algorithm: messages, bytes and
    reduced bytes on the critical path, summed over its rounds (:func:`predict` with unit
    models). ``algorithm="builtin"`` uses :data:`BUILTIN_FORM`.

    Raises:
        ValueError: unknown primitive/algorithm.
    """
    form = BUILTIN_FORM.get(primitive) if algorithm == "builtin" else algorithm
    if form is None:
        raise ValueError(f"no cost form for {primitive!r}; choose one of {', '.join(BUILTIN_FORM)}")
    p = predict(primitive, form, world_size, nbytes)
    return float(p.alpha_count), float(p.beta_bytes), float(p.gamma_bytes)


def _nnls_small(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares ``min |X c - y|`` with ``c >= 0``, for a handful of columns: the best of the
    unconstrained solutions on every subset of columns whose solution is non-negative (exact)."""
    k = X.shape[1]
    best, best_err = np.zeros(k), float(np.sum(y ** 2))
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(X[:, cols], y, rcond=None)
        if np.any(sol < 0):
            continue
        c = np.zeros(k)
        c[cols] = sol
        err = float(np.sum((X @ c - y) ** 2))
        if err < best_err - 1e-15 * max(1.0, best_err):
            best, best_err = c, err
    return best


@dataclass
class Fit:
    """alpha, beta (and gamma) fitted to measured times; see :func:`fit`.

    Attributes:
        model: the fitted :class:`CostModel` (pass it to :func:`predict`, or to
            :func:`collnb.replay` / ``save_gif`` / ``compare`` as ``model=``).
        primitive, algorithm: what was fitted (``None`` when the rows mixed several).
        world_sizes: the world sizes of the rows used.
        n: rows used. gamma_from: ``"fit"``, ``"local_reduce"`` (measured beside), ``"given"`` or
            ``"none"`` (not a reduction, or not separable: 0).
        rel_rms: root-mean-square relative error of the fit over the rows used.
        rows: the rows used (list of dicts), predicted: the model's time for each (seconds).
    """

    model: CostModel
    primitive: str | None
    algorithm: str | None
    world_sizes: tuple
    n: int
    gamma_from: str
    rel_rms: float
    rows: list = field(repr=False, default_factory=list)
    predicted: np.ndarray = field(repr=False, default=None)

    def predict(self, nbytes: float, world_size: int | None = None, primitive: str | None = None,
                algorithm: str | None = None) -> float:
        """Predicted seconds for ``nbytes`` (bytes per rank, nccl-tests' size) at ``world_size``
        (default: the fit's only world size), for the fit's primitive and algorithm by default."""
        primitive = primitive or self.primitive
        algorithm = algorithm or self.algorithm
        if primitive is None or algorithm is None:
            raise ValueError("this fit mixed several primitives/algorithms: name the one to predict")
        if world_size is None:
            if len(self.world_sizes) != 1:
                raise ValueError(f"the fit covers world sizes {list(self.world_sizes)}: pass world_size")
            world_size = self.world_sizes[0]
        A, B, G = coefficients(primitive, algorithm, world_size, nbytes)
        m = self.model
        return m.alpha * A + m.beta * B + m.gamma * G

    def summary(self) -> str:
        m = self.model
        what = f"{self.primitive or 'mixed'}/{self.algorithm or 'mixed'}"
        g = f", γ = {m.gamma * 1e9:.3f} ns/B ({self.gamma_from})" if m.gamma else ""
        bw = f"{1 / m.beta / 1e9:.2f} GB/s" if m.beta > 0 else "∞"
        return (f"{what} at world size {', '.join(map(str, self.world_sizes))}: α = {m.alpha * 1e6:.1f} µs, "
                f"β = {m.beta * 1e9:.3f} ns/B (1/β = {bw}){g}; {self.n} points, relative RMS error "
                f"{self.rel_rms * 100:.0f}%")

    def __str__(self) -> str:
        return self.summary()


def _as_rows(rows) -> list:
    if hasattr(rows, "to_dict"):
        return list(rows.to_dict("records"))
    return [dict(r) for r in rows]


def fit(rows, *, primitive: str | None = None, algorithm: str | None = None, world_size=None,
        gamma: float | str | None = None, min_bytes: float = 0) -> Fit:
    """Fit ``alpha`` (s/message), ``beta`` (s/byte) and, for reductions, ``gamma`` (s/byte) to
    measured times: ``T = alpha*A + beta*B + gamma*G`` with the algorithm's coefficients
    (:func:`coefficients`; the built-in uses :data:`BUILTIN_FORM`).

    Least squares on the *relative* error (times span orders of magnitude, and a 1 KiB point
    should weigh as much as a 64 MiB one), with every parameter >= 0.

    Args:
        rows: rows of :func:`collnb.bench.bench` (a DataFrame or dicts with ``primitive``,
            ``algorithm``, ``world_size``, ``nbytes``, ``time_s``, ``ok``). Rows with ``ok``
            False are left out; so are reference rows (except ``local_reduce``, see ``gamma``).
        primitive, algorithm, world_size: keep only these rows (world_size: int or list).
        gamma: ``None``: for reductions, measured beside when the rows have ``local_reduce``
            reference rows (the lowest ``time_min_s / nbytes`` among them: preemption only adds), else fitted when the rows can separate it from beta
            (several algorithms whose bytes-moved to bytes-reduced ratios differ), else 0;
            ``"fit"``: always fitted; a number: used as given (s/byte).
        min_bytes: leave out rows below this size.

    Returns:
        :class:`Fit`.

    Raises:
        ValueError: no usable rows (says which were asked for), fewer rows than parameters.
    """
    allrows = _as_rows(rows)
    ws_keep = None if world_size is None else ({world_size} if isinstance(world_size, int) else set(world_size))
    use = [r for r in allrows if r["primitive"] in BUILTIN_FORM and bool(r["ok"])
           and (primitive is None or r["primitive"] == primitive) and (algorithm is None or r["algorithm"] == algorithm)
           and (ws_keep is None or int(r["world_size"]) in ws_keep) and float(r["nbytes"]) >= min_bytes
           and float(r["time_s"]) > 0]
    if not use:
        raise ValueError(f"no measured rows with ok=True for primitive={primitive!r}, algorithm={algorithm!r}, "
                         f"world_size={world_size!r}; primitives in the rows: "
                         f"{sorted({str(r['primitive']) for r in allrows})}")
    C = np.array([coefficients(r["primitive"], r["algorithm"], int(r["world_size"]), float(r["nbytes"]))
                  for r in use], dtype=np.float64)
    t = np.array([float(r["time_s"]) for r in use], dtype=np.float64)
    reduces = bool(np.any(C[:, 2] > 0))
    gamma_from = "none"
    g_value = 0.0
    fit_gamma = False
    if reduces:
        if gamma == "fit":
            fit_gamma = True
        elif isinstance(gamma, (int, float)) and not isinstance(gamma, bool):
            if gamma < 0:
                raise ValueError(f"gamma must be >= 0 s/byte; got {gamma}")
            g_value, gamma_from = float(gamma), "given"
        elif gamma is None:
            lr = [r for r in allrows if r["primitive"] == "local_reduce" and bool(r["ok"]) and float(r["time_s"]) > 0]
            if lr:
                # the best per-byte cost seen (preemption on a shared machine only adds time; small
                # sizes carry call overhead): the fastest iteration's time per byte, lowest over sizes
                g_value = min(float(r.get("time_min_s", r["time_s"])) / float(r["nbytes"]) for r in lr)
                gamma_from = "local_reduce"
            else:
                W = C / t[:, None]
                Wn = W / np.maximum(np.abs(W).max(axis=0), 1e-300)
                fit_gamma = np.linalg.matrix_rank(Wn, tol=1e-9) == 3
        else:
            raise ValueError(f"gamma must be None, 'fit' or seconds per byte; got {gamma!r}")
    cols = [0, 1, 2] if fit_gamma else [0, 1]
    if len(use) < len(cols):
        raise ValueError(f"{len(use)} row(s) cannot determine {len(cols)} parameters; measure more sizes")
    resid_t = t - g_value * C[:, 2]
    X = C[:, cols] / t[:, None]
    y = resid_t / t
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)  # conditioning: alpha ~1e-5, beta ~1e-10
    sol = _nnls_small(X / scale, y) / scale
    alpha, beta = float(sol[0]), float(sol[1])
    if fit_gamma:
        g_value, gamma_from = float(sol[2]), "fit"
    pred = C @ np.array([alpha, beta, g_value])
    rel = float(np.sqrt(np.mean(((pred - t) / t) ** 2)))
    prims = {r["primitive"] for r in use}
    algs = {r["algorithm"] for r in use}
    wss = tuple(sorted({int(r["world_size"]) for r in use}))
    what = f"{'/'.join(sorted(prims))} {'/'.join(sorted(algs))}"
    model = CostModel(alpha=alpha, beta=beta, gamma=g_value,
                      source=f"fitted by collnb.costmodel.fit to {len(use)} measured times ({what}, world size "
                             f"{', '.join(map(str, wss))}; gamma: {gamma_from})")
    return Fit(model, prims.pop() if len(prims) == 1 else None, algs.pop() if len(algs) == 1 else None, wss,
               len(use), gamma_from, rel, use, pred)


def fit_each(rows, **kwargs) -> dict:
    """:func:`fit` for every (primitive, algorithm) in the rows (all their world sizes together).

    Returns:
        dict ``{(primitive, algorithm): Fit}``; pairs that cannot be fitted (too few rows) are left out.
    """
    allrows = _as_rows(rows)
    out = {}
    for key in dict.fromkeys((r["primitive"], r["algorithm"]) for r in allrows if r["primitive"] in BUILTIN_FORM):
        try:
            out[key] = fit(allrows, primitive=key[0], algorithm=key[1], **kwargs)
        except ValueError:
            continue
    return out


def crossovers(a: Fit, b: Fit, world_size: int, lo: float = 1.0, hi: float = float(1 << 30)) -> list:
    """Buffer sizes in ``[lo, hi]`` bytes where the two fitted models predict the same time at
    ``world_size`` (sorted list of floats; empty if one is faster throughout). Both times are
    straight lines in ``nbytes`` (``T = c0 + c1*m``), so there is at most one."""
    def line(f):
        t0 = f.predict(0.0 if lo <= 0 else lo, world_size)
        t1 = f.predict(hi, world_size)
        slope = (t1 - t0) / (hi - lo)
        return t0 - slope * lo, slope
    (a0, a1), (b0, b1) = line(a), line(b)
    if a1 == b1:
        return []
    m = (b0 - a0) / (a1 - b1)
    return [float(m)] if lo <= m <= hi else []
