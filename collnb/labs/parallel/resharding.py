"""Distributed checkpoint resharding: save a model and its optimizer state with
``torch.distributed.checkpoint`` (DCP) from one mesh layout and load them into another.

A DCP checkpoint is a folder: every rank writes the shards it holds (``__<rank>_0.distcp``) and the
coordinator writes ``.metadata``, which records each tensor's whole shape and which piece of it
each file holds. Loading asks, for every tensor of the *new* layout, which stored pieces overlap
the local shard and reads just those (the planner's ``create_local_plan``/``create_global_plan``).
So a checkpoint saved under FSDP2 × TP on a 2×2 mesh loads into 4-way FSDP2, or any other layout of
the same model: the names (fully qualified parameter names, unchanged by ``fully_shard`` and
``parallelize_module``) and the whole shapes are what must match (torch docs,
*Distributed Checkpoint - torch.distributed.checkpoint*;
``torch.distributed.checkpoint.state_dict.get_model_state_dict`` / ``get_optimizer_state_dict``
give state dicts of DTensors; torchtitan's ``CheckpointManager`` saves the same way).

:func:`reshard_step` trains a step under one plan, saves, builds the model under another plan
with different initial weights, loads, and returns every whole tensor both ways, so the kernel
checks them equal (:func:`reshard`); the folder is a temporary one, removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import torch
import torch.distributed as dist

from ...i18n import _
from ...ranks import active_recorder
from .accounting import Phases

__all__ = ["reshard_step", "reshard"]


def _whole(state: dict) -> dict:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            for sub, v in _whole(value).items():
                out[f"{key}.{sub}"] = v
        elif isinstance(value, torch.Tensor):
            out[key] = (value.full_tensor() if type(value).__name__ == "DTensor" else value).detach().clone()
    return out


def reshard_step(rank: int, world_size: int, src, dst, config, x: torch.Tensor, y: torch.Tensor, directory: str,
                 lr: float = 1e-2) -> dict:
    """On a rank: :func:`_reshard_step` with DTensor's log lines kept out of the cell (returned as
    ``log``); see there."""
    from .flattening import captured_dtensor_log

    with captured_dtensor_log() as log:
        out = _reshard_step(rank, world_size, src, dst, config, x, y, directory, lr)
    out["log"] = list(dict.fromkeys(log))
    return out


def _reshard_step(rank: int, world_size: int, src, dst, config, x: torch.Tensor, y: torch.Tensor, directory: str,
                  lr: float = 1e-2) -> dict:
    """On a rank: under plan ``src`` train one AdamW step, save model and optimizer state with
    ``dcp.save`` into ``directory``; under plan ``dst`` build the model with other initial weights
    (``config.seed + 1``), ``dcp.load`` the checkpoint into its state dicts and set them.

    Args:
        src, dst: :class:`.composed.Plan` s on ``world_size`` ranks (no ``pp`` or ``ep``).
        config: :class:`.transformer.TransformerConfig`. x, y: the batch (:func:`.composed.train`'s).
        directory: a folder every rank can write (made by the kernel).

    Phases (with ``record_calls=True``): ``"train"``, ``"save"``, ``"load"``, ``"check"``.

    Returns:
        dict: ``saved`` and ``loaded`` ({key: whole tensor}: the model's parameters and the
        optimizer's state, ``state.<name>.exp_avg`` ...), ``local`` (bytes of the model's parameters
        this rank holds under ``src`` and under ``dst``), ``files`` (the folder's files after saving,
        rank 0), ``marks``.

    Raises:
        ValueError: a plan with ``pp`` or ``ep``, or plans of another world size.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)
    from torch.distributed.device_mesh import init_device_mesh

    from .composed import build
    from .memory import local_bytes
    from .transformer import loss_fn

    for plan in (src, dst):
        if plan.has("pp") or plan.has("ep") or plan.world_size != world_size:
            raise ValueError(_("resharding here takes plans without pp or ep on {ws} ranks; got {plan}").format(
                ws=world_size, plan=plan.text()))
    phases = Phases() if active_recorder() is not None else None
    mark = phases.begin if phases is not None else (lambda label: None)

    mark("train")
    mesh = init_device_mesh("cpu", src.sizes, mesh_dim_names=src.names)
    model, by_hand = build(src, config, mesh, rank)
    coords = src.coordinates(rank)
    xb, yb = x.chunk(src.batch_shards)[src.batch_index(rank)], y.chunk(src.batch_shards)[src.batch_index(rank)]
    if src.has("cp"):
        xb, yb = xb.chunk(src.size("cp"), 1)[coords["cp"]], yb.chunk(src.size("cp"), 1)[coords["cp"]]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    loss_fn(model(xb), yb).backward()
    if by_hand is not None:
        by_hand()
    opt.step()
    mark("save")
    state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    dcp.save(state, checkpoint_id=directory)
    dist.barrier()
    files = sorted(os.listdir(directory)) if rank == 0 else None
    src_bytes = sum(local_bytes(p) for p in model.parameters())

    mark("load")
    from dataclasses import replace
    mesh2 = init_device_mesh("cpu", dst.sizes, mesh_dim_names=dst.names)
    model2, _reduce = build(dst, replace(config, seed=config.seed + 1), mesh2, rank)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=lr, weight_decay=0.0)
    state2 = {"model": get_model_state_dict(model2), "optim": get_optimizer_state_dict(model2, opt2)}
    dcp.load(state2, checkpoint_id=directory)
    set_model_state_dict(model2, state2["model"])
    set_optimizer_state_dict(model2, opt2, state2["optim"])
    dst_bytes = sum(local_bytes(p) for p in model2.parameters())

    mark("check")
    saved = _whole({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)})
    loaded = _whole({"model": get_model_state_dict(model2), "optim": get_optimizer_state_dict(model2, opt2)})
    return {"saved": saved, "loaded": loaded, "local": {"src": src_bytes, "dst": dst_bytes}, "files": files,
            "marks": phases.close() if phases is not None else None}


def reshard(src, dst, config=None, *, batch: int = 4, seq_len: int = 8, record_calls: bool = True) -> dict:
    """Run :func:`reshard_step` on real gloo ranks with a temporary folder that is removed
    afterwards (also when a rank fails).

    Returns:
        dict: ``results`` (the launch's results: each rank's dict, ``.calls`` when recorded),
        ``largest_difference`` (float: the largest absolute difference between any saved and loaded
        tensor on any rank; 0.0 when the values arrived exactly), ``keys`` (how many tensors were
        compared), ``files`` (the checkpoint's file names), ``removed`` (the folder is gone).

    Raises:
        ValueError: as :func:`reshard_step`; a key saved but not loaded.
    """
    from ...ranks import launch
    from .transformer import TransformerConfig, make_batch

    config = config or TransformerConfig()
    src.check(config, batch, seq_len)
    dst.check(config, batch, seq_len)
    x, y = make_batch(config, batch, seq_len)
    directory = tempfile.mkdtemp(prefix="collnb-dcp-")
    try:
        results = launch(reshard_step, src.world_size, (src, dst, config, x, y, directory), record_calls=record_calls,
                         collective_timeout=60, debug=False)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    worst = 0.0
    for r in results:
        if set(r["saved"]) != set(r["loaded"]):
            raise ValueError(_("the loaded state differs in its keys: {keys}").format(
                keys=sorted(set(r["saved"]) ^ set(r["loaded"]))))
        for key, t in r["saved"].items():
            worst = max(worst, float((t - r["loaded"][key]).abs().max()) if t.numel() else 0.0)
    return {"results": results, "largest_difference": worst, "keys": len(results[0]["saved"]),
            "files": results[0]["files"], "removed": not os.path.exists(directory)}
