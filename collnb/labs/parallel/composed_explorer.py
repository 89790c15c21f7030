"""The composed-parallelism explorer (notebook 20): choose a mesh (which parallelism on which
dimension, outermost first), the context-parallel attention and how many ranks share a node; each
choice trains the small transformer two steps on real ranks and draws the mesh with each
dimension's traffic (:func:`.mesh_picture.mesh_image`), the memory each rank holds and the largest
difference from one process."""

from __future__ import annotations

from dataclasses import dataclass

from ...i18n import _
from ...units import format_bytes
from .composed import Plan, global_losses, run_composition, deviation
from .memory import MEMORY_KINDS, formula
from .mesh_picture import mesh_image
from .mesh_traffic import inter_node_bytes, traffic
from .transformer import TransformerConfig

__all__ = ["LAYOUTS", "ComposedParams", "explore_composed", "config_for"]

#: The meshes the explorer offers (world size 4 and 8; outermost dimension first).
LAYOUTS = ("dp_shard=4", "dp_replicate=2 × dp_shard=2", "dp_shard=2 × tp=2", "tp=2 × dp_shard=2",
           "pp=2 × dp_shard=2", "pp=2 × tp=2", "dp_shard=2 × cp=2", "dp_replicate=2 × ep=2",
           "dp_shard=2 × tp=4", "tp=4 × dp_shard=2", "dp_replicate=2 × dp_shard=2 × tp=2",
           "pp=2 × dp_shard=2 × tp=2", "dp_shard=2 × cp=2 × tp=2")


def config_for(plan: Plan) -> TransformerConfig:
    """The model the explorer trains under ``plan``: 4 experts per MoE block with ``ep``, else dense."""
    return TransformerConfig(experts=4) if plan.has("ep") else TransformerConfig()


@dataclass(frozen=True)
class ComposedParams:
    """What :func:`explore_composed` lets a learner set."""

    mesh: str = "dp_shard=2 × tp=2"
    attention: str = "ring"
    ranks_per_node: int = 2


def explore_composed(mesh: str = "dp_shard=2 × tp=2", *, attention: str = "ring", ranks_per_node: int = 2,
                     wait: bool = True):
    """A widget: the mesh (:data:`LAYOUTS`), the context-parallel attention (``"ring"`` or
    ``"ulysses"``; used when the mesh has ``cp``) and the ranks per node (``1``: no nodes drawn).
    Each change runs :func:`.composed.run_composition` on real ranks and draws
    :func:`.mesh_picture.mesh_image`; the caption says how far the step is from one process, the
    bytes that cross nodes and what rank 0 holds beside the formulas (:mod:`.memory`).

    Returns:
        :class:`collnb.views.Binder` (display it; ``.set(mesh="pp=2 × dp_shard=2")`` changes it from
        code; ``.last_result`` is ``(results, reference, plan)``).

    Raises:
        ValueError: a mesh not in :data:`LAYOUTS`, an unknown attention, or ranks per node that do
            not divide 4.
    """
    from ...views import Binder, Picture

    if mesh not in LAYOUTS:
        raise ValueError(_("choose a mesh of {layouts}; got {value}").format(layouts=", ".join(LAYOUTS), value=repr(mesh)))
    if attention not in ("ring", "ulysses"):
        raise ValueError(_("attention must be 'ring' or 'ulysses'; got {value}").format(value=repr(attention)))
    if ranks_per_node not in (1, 2, 4):
        raise ValueError(_("ranks_per_node must be 1, 2 or 4; got {value}").format(value=ranks_per_node))

    def choices(_p):
        return {"mesh": list(LAYOUTS), "attention": ["ring", "ulysses"], "ranks_per_node": [1, 2, 4]}

    def fix(p):
        return p, []

    def run(p):
        plan = Plan.parse(p.mesh, attention=p.attention)
        return run_composition(plan, config_for(plan))

    def draw(out, p):
        results, reference, plan = out
        rows = traffic(results, plan)
        per_node = p.ranks_per_node if p.ranks_per_node > 1 else None
        dev = deviation(results, reference, plan)
        worst = max(dev["loss"], dev["grads"], dev["params"])
        note = _("equals one process: largest difference {worst:.1e} (loss, gradients, parameters)").format(worst=worst)
        pic = mesh_image(rows, plan, ranks_per_node=per_node, note=note)
        got, want = results[0]["memory"], formula(plan, config_for(plan))
        held = ", ".join(f"{k} {format_bytes(got[k])}" for k in MEMORY_KINDS)
        caption = _("rank 0 holds {held}; the formulas give parameters {params}, gradients {grads}, "
                    "optimizer {optimizer}.").format(held=held, params=format_bytes(want["params"]),
                                                     grads=format_bytes(want["grads"]),
                                                     optimizer=format_bytes(want["optimizer"]))
        if per_node:
            crossing = inter_node_bytes(rows, plan, per_node, step=2)
            caption += " " + _("Crossing nodes per step: {bytes} ({dims}).").format(
                bytes=format_bytes(sum(crossing.values())), dims=", ".join(sorted(crossing)) or "-")
        caption += " " + _("Loss per step: {losses}.").format(
            losses=", ".join(f"{v:.4f}" for v in global_losses(results, plan)))
        from html import escape

        alt = _("the mesh {plan}, each dimension's links and the bytes each rank sends per step over it").format(
            plan=plan.text())
        return Picture(pixels=pic.pixels, png=pic.png, caption=escape(caption), alt=alt + ". " + note + ". " + caption,
                       attrs={"mesh": plan.text()})

    return Binder(ComposedParams(mesh, attention, ranks_per_node), choices, fix, run, draw,
                  labels={"mesh": _("mesh (outermost first)"), "attention": _("cp attention"),
                          "ranks_per_node": _("ranks per node")},
                  name="composed", what="composed-parallelism explorer", wait=wait)
