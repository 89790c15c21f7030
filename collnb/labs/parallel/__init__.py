"""The parallelisms of notebooks 13-16 and the expert-parallel part of 11, on real ranks, each checked
against one process computing the same thing, and composed on one DeviceMesh (notebook 20).

* :mod:`.tensor`: tensor and sequence parallelism by hand (the Megatron MLP, ``f``/``g``,
  all_gather/reduce_scatter, Megatron's regather; activations saved for backward, measured);
* :mod:`.tensor_plans`: the same block with ``torch.distributed.tensor.parallel``;
* :mod:`.sharding`: DDP, flat ZeRO-1/2 and FSDP2 (``fully_shard``) on one small model, each block's
  compute marked among the recorded collectives;
* :mod:`.ring`: context parallelism, ring attention with an online softmax, plain and zig-zag order;
* :mod:`.pipeline`: pipeline parallelism, GPipe and 1F1B by hand with send/recv and with
  ``torch.distributed.pipelining``; the bubble and the activations each stage holds, measured;
* :mod:`.experts`: expert parallelism with a capacity limit (fixed buffers, dropped tokens);
* :mod:`.accounting`: what a step's recorded collectives add up to (phases, kinds, bytes on the wire).

Notebook 20 composes them on one DeviceMesh (imported as submodules, ``from collnb.labs.parallel import
composed``): :mod:`.transformer` (the small model and one process's training), :mod:`.composed` (a
:class:`~.composed.Plan` applied on real ranks: FSDP2 × TP, HSDP, PP × FSDP, EP beside DP, ring and
Ulysses CP), :mod:`.context` (the differentiable ring and Ulysses cores), :mod:`.mesh_traffic` and
:mod:`.mesh_picture` (every collective by mesh dimension and phase, and the picture), :mod:`.memory`
(what each rank holds, beside the formulas), :mod:`.flattening` (mesh flattening measured; DebugMode
beside CommDebugMode), :mod:`.resharding` (DCP from one layout to another), :mod:`.placement` (TP
inside a node vs across, on a virtual cluster) and :mod:`.composed_explorer`.

Rank functions here are meant for ``collnb.launch(..., record_calls=True)``; those that build DTensors,
FSDP2 or DDP import TorchDynamo (``torch.compile``'s tracer) on first use (seconds per fresh rank): give such launches a
``collective_timeout`` with margin, or import it in the kernel before the ranks are forked.
"""

from .accounting import CallSummary, Phases, by_step, interleave, phase_range, kind, split, summarize, summary_table, wire_bytes
from .tensor import (ColumnParallelLinearRegather, CopyToTensorParallel, GatherFromSequenceParallel, MLPBlock,
                     ReduceFromTensorParallel, ScatterToSequenceParallel, TensorParallelMLP, copy_to_tensor_parallel,
                     deviation, gather_from_sequence_parallel, mlp_step, reduce_from_tensor_parallel, reference_step,
                     saved_activation_bytes, scatter_to_sequence_parallel, sequence_shard, shard_columns, shard_rows)
from .experts import capacity_slots, expert, expert_capacity, moe_capacity_layer, moe_reference, skewed_routes
from .pipeline import (SCHEDULES, bubble_formula, bubble_measured, max_grad_difference, messages, microbatch_data,
                       peak_formula, pipeline_model, schedule_text, pipeline_step, reference_grads, run_stage,
                       schedule_order, stage_module, torch_pipeline_step, ScheduleParams, explore_schedules)
from .ring import (LAYOUTS, attention, gather_sequence, online_softmax_update, plain_layout, ring_attention, ring_step,
                   work_matrix, zigzag_layout)
from .sharding import (block_of, ddp_train, fsdp_block_bytes, fsdp_train, label, layered_model, max_difference,
                       order_text, sgd_reference, zero_train)
from .tensor_plans import assemble, dtensor_deviation, dtensor_mlp_step, tensor_parallel_plan

__all__ = [
    "Phases", "split", "by_step", "phase_range", "interleave", "kind", "wire_bytes", "CallSummary", "summarize", "summary_table",
    "MLPBlock", "TensorParallelMLP", "CopyToTensorParallel", "ReduceFromTensorParallel", "GatherFromSequenceParallel",
    "ScatterToSequenceParallel", "ColumnParallelLinearRegather", "copy_to_tensor_parallel",
    "reduce_from_tensor_parallel", "gather_from_sequence_parallel", "scatter_to_sequence_parallel",
    "saved_activation_bytes", "sequence_shard", "shard_rows", "shard_columns", "mlp_step", "reference_step",
    "deviation", "tensor_parallel_plan", "dtensor_mlp_step", "assemble", "dtensor_deviation",
    "layered_model", "sgd_reference", "ddp_train", "zero_train", "fsdp_train", "fsdp_block_bytes", "block_of", "label",
    "order_text", "max_difference",
    "attention", "plain_layout", "zigzag_layout", "LAYOUTS", "online_softmax_update", "ring_attention", "ring_step", "work_matrix",
    "gather_sequence",
    "SCHEDULES", "schedule_order", "bubble_formula", "peak_formula", "stage_module", "pipeline_model",
    "microbatch_data", "reference_grads", "pipeline_step", "run_stage", "torch_pipeline_step", "max_grad_difference",
    "bubble_measured", "schedule_text", "messages", "ScheduleParams", "explore_schedules",
    "expert_capacity", "skewed_routes", "expert", "capacity_slots", "moe_capacity_layer", "moe_reference",
]
