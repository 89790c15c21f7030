"""What a rank holds during a composed step, counted on the rank, beside the formulas.

**Counted** (:func:`.composed.train` returns them for the last step, in bytes):

* ``params``: the parameters' local storage at rest (a DTensor's ``to_local()``: FSDP's and TP's
  shards);
* ``grads``: the gradients' local storage after backward (sharded under FSDP: the reduce_scatter
  leaves each rank its shard);
* ``optimizer``: AdamW's ``exp_avg`` and ``exp_avg_sq`` (``step`` counters left out);
* ``activations``: the peak of the bytes autograd holds for backward (:class:`SavedTensorBytes`),
  each storage once, parameters left out.

**The formulas** (:func:`formula`), with ``Ψ`` the model's parameter bytes (float64 here, 8 bytes a
value; Adam keeps 2 values per parameter), the dense and expert parts ``Ψ_d`` and ``Ψ_e``:

* ZeRO-3 / FSDP over ``N_d`` ranks: parameters, gradients and optimizer state each ``Ψ / N_d``
  (Rajbhandari et al. 2020, *ZeRO*, SC20, §5 and Fig. 1: ``(2 + 2 + K) Ψ / N_d`` in mixed precision;
  here every term is float64);
* tensor parallelism over ``t`` ranks: the column/row-parallel weights ``/ t`` (Shoeybi et al.
  2019, *Megatron-LM*, §3); norms stay whole on every rank;
* pipeline parallelism over ``p`` stages: each stage its ``1 / p`` of the blocks (plus the head
  on the last stage);
* expert parallelism over ``e`` ranks: the experts ``/ e``, the dense part whole;
* DDP / HSDP's replicate dimension: no saving.

Activations have no single formula here: they scale with the tokens a rank holds (``1 / N_d``,
``1 / cp``); tensor parallelism without sequence parallelism keeps the norms' inputs whole
(Korthikanti et al. 2022, *Reducing Activation Recomputation*, arXiv:2205.05198, §4); a pipeline
stage holds its microbatches' activations until their backward. :func:`formula` gives them as
one process's activations divided by the data, context and pipeline ranks, the estimate the
measured numbers are compared with.
"""

from __future__ import annotations

import contextlib
import weakref

import torch

__all__ = ["local_bytes", "SavedTensorBytes", "parameter_bytes", "formula", "MEMORY_KINDS"]

#: The four things a rank holds, in the order tables show them.
MEMORY_KINDS = ("params", "grads", "optimizer", "activations")


def _local(t: torch.Tensor) -> torch.Tensor:
    if type(t).__name__ == "DTensor":
        with torch.no_grad():
            return t.to_local()
    return t


def local_bytes(t: torch.Tensor | None) -> int:
    """Bytes of ``t``'s values on this rank (a DTensor: its local shard); ``0`` for ``None``."""
    if t is None:
        return 0
    local = _local(t)
    return local.numel() * local.element_size()


class _Held:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensorBytes:
    """The bytes autograd holds for backward, live and at their peak.

    Inside :meth:`tracking`, every tensor saved for backward passes through
    ``torch.autograd.graph.saved_tensors_hooks``: its storage (a DTensor's local one) is counted
    once while any saved tensor refers to it, and released when autograd frees the last of them
    (after the backward that used it). Storages of ``model``'s parameters at the time of saving
    (also FSDP2's gathered, unsharded ones) are left out: they are not activations.

    Attributes:
        live: bytes held now. peak: the most held at once since :meth:`tracking` began (int).
    """

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.live = 0
        self.peak = 0
        self._count: dict = {}

    def _release(self, key: int, nbytes: int) -> None:
        self._count[key] -= 1
        if not self._count[key]:
            del self._count[key]
            self.live -= nbytes

    def _pack(self, t: torch.Tensor):
        local = _local(t)
        storage = local.untyped_storage()
        key = storage.data_ptr()
        params = {_local(p).untyped_storage().data_ptr() for p in self.model.parameters()}
        held = _Held(t)
        if key in params or storage.nbytes() == 0:
            return held
        if key not in self._count:
            self._count[key] = 0
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self._count[key] += 1
        weakref.finalize(held, self._release, key, storage.nbytes())
        return held

    @contextlib.contextmanager
    def tracking(self, on: bool = True):
        """Count inside this block (``on=False``: a no-op block). Resets :attr:`peak`."""
        if not on:
            yield self
            return
        self.peak = self.live
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda held: held.tensor):
            yield self


def parameter_bytes(config, experts_only: bool = False) -> int:
    """``Ψ``: bytes of :class:`.transformer.TinyTransformer(config)`'s parameters (float64), or of
    its experts only."""
    from .transformer import TinyTransformer

    model = TinyTransformer(config)
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters()
               if not experts_only or ".feed_forward.w" in n and config.experts)


def _split(config) -> dict:
    """Bytes by how a plan cuts them: ``tp`` (the column/row-parallel weights), ``norm`` (whole under
    TP), ``experts``, ``router``, ``head`` (the final norm and output)."""
    from .transformer import TinyTransformer

    out = {"tp": 0, "norm": 0, "experts": 0, "router": 0, "head": 0}
    for name, p in TinyTransformer(config).named_parameters():
        nbytes = p.numel() * p.element_size()
        if not name.startswith("layers."):
            out["head"] += nbytes
        elif ".feed_forward.w" in name and config.experts:
            out["experts"] += nbytes
        elif ".router." in name:
            out["router"] += nbytes
        elif "_norm." in name:
            out["norm"] += nbytes
        else:
            out["tp"] += nbytes
    return out


def formula(plan, config, reference_activations: int | None = None) -> dict:
    """The textbook bytes per rank for ``plan`` (module doc), as ``{kind: bytes}`` for
    :data:`MEMORY_KINDS` (``activations`` only with ``reference_activations``, one process's peak:
    divided by the batch shards, ``cp`` and ``pp``; not by ``tp``).

    Parameters per rank: ``(Ψ_tp / t + Ψ_norm + Ψ_router + Ψ_e / e) / (N_shard) / p`` with the head on
    every stage's share (``/ p``; the head really sits on the last stage), ``N_shard`` the FSDP
    ranks (``dp_shard × cp``); gradients the same; AdamW's state twice that. Padding (FSDP2 pads
    dim 0 to a multiple of the shard count) is not in the formula.
    """
    parts = _split(config)
    t, e, p = plan.size("tp"), plan.size("ep"), plan.size("pp")
    n_shard = plan.size("dp_shard") * plan.size("cp")
    dense = parts["tp"] / t + parts["norm"] + parts["router"] + parts["head"]
    params = (dense + parts["experts"] / e) / n_shard / p
    out = {"params": params, "grads": params, "optimizer": 2 * params}
    if reference_activations is not None:
        out["activations"] = reference_activations / plan.batch_shards / plan.size("cp") / p
    return out


def reference_activations(config, x: torch.Tensor, y: torch.Tensor, groups: int = 1) -> int:
    """One process's peak of saved activations (:class:`SavedTensorBytes`) over one forward and
    backward of the whole batch (bytes, int)."""
    from .transformer import MoE, TinyTransformer, loss_fn

    model = TinyTransformer(config)
    for module in model.modules():
        if isinstance(module, MoE):
            module.groups = groups
    saved = SavedTensorBytes(model)
    with saved.tracking():
        loss_fn(model(x), y).backward()
    return saved.peak


def memory_rows(results, plan, config, reference: int | None = None) -> list:
    """One row per rank: ``(rank, coordinates, {kind: measured bytes}, {kind: formula bytes})`` for
    :data:`MEMORY_KINDS` (:func:`formula`; ``activations`` with ``reference``, one process's peak)."""
    want = formula(plan, config, reference)
    return [(r, ",".join(str(v) for v in res["coords"].values()), dict(res["memory"]), want)
            for r, res in enumerate(results)]


def memory_table(results, plan, config, reference: int | None = None) -> str:
    """:func:`memory_rows` as text: per rank the measured bytes of each kind, and the formula's
    line once (every rank's formula is the same; a pipeline's stages differ from it by their share
    of the blocks and the head)."""
    from ...i18n import _
    from ...units import format_bytes, pad

    rows = memory_rows(results, plan, config, reference)
    names = {"params": _("parameters"), "grads": _("gradients"), "optimizer": _("optimizer"),
             "activations": _("activations")}
    head = pad(_("rank"), 6) + pad(_("coords"), 10) + "".join(pad(names[k], 14, ">") for k in MEMORY_KINDS)
    lines = [head]
    for rank, coords, got, _want in rows:
        lines.append(pad(str(rank), 6) + pad(f"({coords})", 10)
                     + "".join(pad(format_bytes(got[k]), 14, ">") for k in MEMORY_KINDS))
    want = rows[0][3]
    lines.append(pad(_("formula"), 16) + "".join(pad(format_bytes(want[k]) if k in want else "-", 14, ">")
                                                 for k in MEMORY_KINDS))
    return "\n".join(lines)
