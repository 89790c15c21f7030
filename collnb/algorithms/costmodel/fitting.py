"""Getting alpha, beta and gamma from measurements: :func:`calibrate` (a ping-pong between two
real ranks and a local reduction) and :func:`fit` (least squares to the times the bandwidth lab
measured, :func:`collnb.bench.bench`), with :func:`coefficients`, :func:`fit_each` and
:func:`crossovers` for reading the fits.

Imports no torch: :func:`calibrate` starts the ranks (and so torch) only when it is called.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...i18n import _
from ...vocabulary import check_choice
from .model import CostModel, predict

__all__ = ["calibrate", "BUILTIN_FORM", "coefficients", "Fit", "fit", "fit_each", "crossovers"]


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
        collnb.LaunchError: the ranks failed.
    """
    from ...ranks import launch  # noqa: PLC0415 - the launcher imports torch; the model loads without it
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

def coefficients(primitive: str, algorithm: str, world_size: int, nbytes: float) -> tuple:
    """``(A, B, G)`` with ``T = alpha*A + beta*B + gamma*G`` for this algorithm: messages, bytes and
    reduced bytes on the critical path, summed over its rounds (:func:`predict` with unit
    models). ``algorithm="builtin"`` uses :data:`BUILTIN_FORM`.

    Raises:
        TypeError / ValueError: unknown primitive/algorithm (:mod:`collnb.vocabulary`'s words).
    """
    if algorithm == "builtin":
        form = BUILTIN_FORM[check_choice("primitive", primitive, tuple(BUILTIN_FORM))]
    else:
        form = algorithm
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
            raise ValueError(_("this fit mixed several primitives/algorithms: name the one to predict"))
        if world_size is None:
            if len(self.world_sizes) != 1:
                raise ValueError(_("the fit covers world sizes {sizes}: pass world_size").format(
                    sizes=list(self.world_sizes)))
            world_size = self.world_sizes[0]
        A, B, G = coefficients(primitive, algorithm, world_size, nbytes)
        m = self.model
        return m.alpha * A + m.beta * B + m.gamma * G

    def summary(self) -> str:
        """One line, in the language spoken: what was fitted, at which world sizes, α, β (and 1/β), γ, and
        how well (points, relative RMS error)."""
        m = self.model
        what = f"{self.primitive or 'mixed'}/{self.algorithm or 'mixed'}"
        g = f", γ = {m.gamma * 1e9:.3f} ns/B ({self.gamma_from})" if m.gamma else ""
        bw = f"{1 / m.beta / 1e9:.2f} GB/s" if m.beta > 0 else "∞"
        return _("{what} at world size {sizes}: α = {alpha:.1f} µs, β = {beta:.3f} ns/B (1/β = {bw}){gamma}; "
                 "{n} points, relative RMS error {error:.0f}%").format(
            what=what, sizes=", ".join(map(str, self.world_sizes)), alpha=m.alpha * 1e6, beta=m.beta * 1e9, bw=bw,
            gamma=g, n=self.n, error=self.rel_rms * 100)

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
        raise ValueError(_("no measured rows with ok=True for primitive={primitive}, algorithm={algorithm}, "
                           "world_size={world_size}; primitives in the rows: {found}").format(
                               primitive=repr(primitive), algorithm=repr(algorithm), world_size=repr(world_size),
                               found=sorted({str(r["primitive"]) for r in allrows})))
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
                raise ValueError(_("gamma must be >= 0 s/byte; got {value}").format(value=gamma))
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
            raise ValueError(_("gamma must be None, 'fit' or seconds per byte; got {value}").format(value=repr(gamma)))
    cols = [0, 1, 2] if fit_gamma else [0, 1]
    if len(use) < len(cols):
        raise ValueError(_("{rows} row(s) cannot determine {n} parameters; measure more sizes").format(
            rows=len(use), n=len(cols)))
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
