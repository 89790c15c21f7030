"""The teaching notebooks: stored clean, built the same way, and every one runs top to bottom.

The slow test executes every notebook in ``notebooks/`` headless in a real Jupyter kernel
("python3", i.e. this virtual environment's ipykernel) with nbclient, two notebooks at a time
(or takes the book's execution of it, when ``make docs`` ran it after the last code change),
and then checks what a learner would see: no error output, no exercise check cell printed ✓ for an
answer nobody wrote (each says "not answered yet"), every heatmap cell displayed a real PNG whose
result reported ✓, and a few values per notebook that follow from the semantics of the collective
it teaches. (Every exercise's solution passing, and wrong answers failing, is tests/test_exercises.py.)
"""

from __future__ import annotations

import asyncio
import base64
import io
import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

from collnb.torch_versions import applies

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import notebook_run  # noqa: E402

#: What the installed torch does where releases differ (collnb.torch_versions): the expected outputs below
#: are keyed by these, so the compatibility runs on the newest and oldest tested torch check their own truth.
SHARD_TO_PARTIAL = applies("dtensor_shard_to_partial")        # torch 2.14+
OBJECTS_SINGLE = applies("all_gather_object_single")          # torch 2.15+
PIPELINE_VOTE = applies("pipelining_inference_vote")          # torch 2.15+

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
#: Per-primitive notebooks: "01_broadcast" ... "10_send_recv" (not the launcher intro, not 11_training).
PRIMITIVE_NOTEBOOKS = [p for p in NOTEBOOKS if re.match(r"(0[1-9]|10)_", p.name)]
CELL_TIMEOUT_S = 120
PARALLEL = 2  # the CI machine has 2 cores

#: What specific cells must print, by notebook stem and cell tag: the text must appear in the
#: outputs (streams, results, displays) of at least one cell with that tag. Values follow from
#: the collective's semantics on the inputs written in the notebook.
EXPECTED = {
    "00_launching_ranks": [
        *[("hello", f"[rank {r}] I am rank {r} of 4, backend gloo") for r in range(4)],
        ("hello", "[0, 100, 200, 300]"),
        ("failing-rank", "rank 2: ValueError: rank 2 cannot continue"),
        ("failing-rank", 'raise ValueError("rank 2 cannot continue")'),
        ("mismatch", "Detected mismatch between collectives"),
        ("did-not-join", "rank 1: DidNotJoin"),
        ("timeout", "pending ranks: [0, 1]"),
        ("nccl", "cannot run here"),
        *[("subgroup", f"[rank {r}] global rank {r} = group rank {r // 2}: [2.0, 2.0]") for r in (0, 2, 4)],
        ("subgroup", "tensor([3., 3.])"),
        ("record-calls", "rank 1: [CallRecord(name='all_reduce', peer=None, group_size=2, shapes=((2,),), dtypes=('int64',)"),
        # torch 2.13: a rank outside the group that calls its collective gets a warning and a no-op
        ("outside-group", "UserWarning: Running all_reduce on global rank 1 which does not belong to the given group"),
        ("outside-group", "rank 1: [1.0, 1.0]"),
        ("outside-group", "rank 2: [2.0, 2.0]"),
    ],
    "01_broadcast": [
        *[("raw", f"[rank {r}] after : [1.0, 2.0, 3.0]") for r in range(4)],
        ("mismatch", "Detected mismatch between collectives"),
    ],
    "02_scatter": [
        *[("raw", f"[rank {r}] received: [{2.0 * r}, {2.0 * r + 1}]") for r in range(4)],
        ("mismatch", "must NOT be specified on non-source ranks"),
    ],
    "03_gather": [
        ("raw", "[rank 0] gathered: [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]"),
    ],
    "04_reduce": [
        ("raw", "[rank 0] after : [10.0, 10.0, 10.0, 10.0]"),
        ("refused", "AVG"),
        ("ops-table", "avg         yes           no"),
        ("ops-table", "bxor        no            yes"),
        ("ops-table", "premul_sum  gloo: no (Cannot use ReduceOp.PREMUL_SUM with Gloo)"),
        ("refused", "result type Float can't be cast to the desired output type Long"),
        ("predict", "[[10.0, 10.0], "),
    ],
    "05_all_gather": [
        *[("raw", f"[rank {r}] gathered: [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]")
          for r in range(4)],
        ("in-place", "tensor([ 0.,  0., 10., 10., 20., 20.])"),
    ],
    "06_reduce_scatter": [
        ("example-claim", "native reduce_scatter ran on gloo and equals the emulation on every rank: True"),
        *[("example-claim", f"[rank {j}] emulated: [{60.0 + 4 * j}, {60.0 + 4 * j}]  native: "
                         f"[{60.0 + 4 * j}, {60.0 + 4 * j}]") for j in range(4)],
        ("support", "reduce_scatter on gloo, float32, SUM: True"),
    ],
    "07_all_reduce": [
        *[("raw", f"[rank {r}] after : [10.0, 10.0, 10.0, 10.0]") for r in range(4)],
        ("summation-order", "every rank, chunks 0..3: [260.0, 260.0, 256.0, 256.0]"),
        ("predict", "[inf, inf]"),
        # README's replay: the ring at world size 4, 2 (p - 1) = 6 rounds
        ("replay", "all_reduce / ring"),
    ],
    "08_all_to_all": [
        ("example-claim", "list-form all_to_all ran on gloo and equals all_to_all_single on every rank: True"),
        *[("example-claim", f"[rank {i}] received: {[float(10 * j + i) for j in range(4)]}") for i in range(4)],
    ],
    "09_object_collectives": [
        *[("raw", f"[rank {r}] objects: ['foo', 12, {{'key': 'value'}}]") for r in range(2)],
        # torch's own calls inside each object collective (read from distributed_c10d.py of 2.13 and 2.15); from
        # 2.15 all_gather_object gathers into one flat tensor (the output's shape, then the input's)
        ("inner-calls", "all_gather_object      all_gather_single[(3,), (1,)], all_gather_single[(135,), (45,)]"
         if OBJECTS_SINGLE else "all_gather_object      all_gather[(1,)], all_gather[(45,)]"),
        ("inner-calls", "gather_object          all_gather[(1,)], gather[(45,)]"),
        ("inner-calls", "broadcast_object_list  broadcast[(2,)], broadcast["),
        ("inner-calls", "scatter_object_list    broadcast[(1,)], scatter[(18,)], scatter[(1,)]"),
    ],
    "bandwidth": [
        ("factors", "all_reduce        1.000   1.500   1.750   1.875"),
        ("factors", "all_gather        0.500   0.750   0.875   0.938"),
        ("fit", "all_reduce/builtin at world size 2, 4: α ="),
        ("example-file", "EXAMPLE measured on CPU, not a GPU"),
        ("debug-cost", "TORCH_DISTRIBUTED_DEBUG=DETAIL"),
        ("timings", "collnb: median of the slowest rank"),
        ("timings", "nccl-tests: mean, back to back"),
        ("exercise-values", "fitted for the built-in: α = "),
    ],
    "10_send_recv": [
        ("raw", "[rank 1] holds [1.0, 2.0, 3.0]"),
        ("deadlock", "waiting in send"),
        ("async", "[10.0, 10.0, 10.0, 10.0]"),
        ("predict", "[5.0, 0.0, 5.0]"),
    ],
    "11_training": [
        ("predict", "summed gradient / single-process gradient: 2.0"),
        ("ddp", "DDP on 3 ranks equals the single-process model on the concatenated batch: True"),
        ("sharding", "sharded training on 3 ranks equals single-process momentum SGD: True"),
        ("sharding", "optimizer state per rank: 7 of 21 values"),
        *[("experts", f"rank {r}: sends ") for r in range(4)],
        ("pipeline", "pipeline gradients on 3 ranks equal the single-process gradients: True"),
        # capacity C = ceil(factor * 16 tokens / 4 experts); the capped layer equals one process
        ("capacity", "capacity factor 1.0: C = 4 tokens per expert and rank; equals one process: True"),
        ("capacity", "capacity factor 2.0: C = 8 tokens per expert and rank; equals one process: True"),
    ],
    "13_tensor_parallel": [
        # one all_reduce in forward (g), one in backward (f), on every rank
        *[("predict", f"rank {r}: ['all_reduce', 'all_reduce']") for r in range(4)],
        ("tp-by-hand", "tensor parallel by hand on 4 ranks equals one process: True"),
        ("tp-by-hand", "every rank made the same calls: True"),
        ("tp-dtensor", "parallelize_module on 4 ranks equals one process: True"),
        ("sp", "every layout equals one process: True"),
        ("sp", "forward bytes on the wire, tensor parallel = sequence parallel: True"),
        ("sp", "saved for backward with regather = one process's / t: True"),
        ("sp-dtensor", "sequence parallel with parallelize_module on 4 ranks equals one process: True"),
        ("sp-dtensor", "'norm.weight': 'P(sum)'"),
    ],
    "14_fsdp": [
        ("fsdp-order", "FSDP2 on 2 ranks, one SGD step, equals one process: True"),
        # 384 float64 parameters, each rank one half of every one
        ("fsdp-order", "each rank holds 1536 B of the model's 3072 B of parameters"),
        ("fsdp-bytes", "every trainer equals one process: True"),
        # 3(p-1)/p Psi against 2(p-1)/p Psi
        ("fsdp-bytes", "FSDP2 / DDP on the wire per step: 1.500 at 2 ranks, 1.500 at 4 ranks"),
        ("prefetch", "with forward prefetch, equals one process: True"),
    ],
    "15_context_parallel": [
        ("online", "block by block equals full attention: True"),
        ("ring", "ring attention on 4 ranks equals full attention: True"),
        ("ring-calls", "rank 0: isend to rank 1 (256 B), isend to rank 1 (256 B), irecv from rank 3 (256 B), "
                       "irecv from rank 3 (256 B)"),
        # causal, 8 tokens per rank: the own block's 36 pairs, then whole 64-pair blocks of earlier ranks
        ("predict", "rank 3: [36, 64, 64, 64] query-key pairs in rounds 0..3, 228 in all"),
        ("predict", "rank 0: [36, 0, 0, 0] query-key pairs in rounds 0..3, 36 in all"),
        ("zigzag", "zigzag: causal ring attention equals full attention: True"),
        ("zigzag", "work as counted from the layout: True"),
        # (36 + 3 x 64) / (36 + 3 x 32)
        ("balance", "plain / zig-zag, slowest-rank pair-times per forward pass: 1.73"),
    ],
    # GPipe holds every microbatch on every stage (m = 8); 1F1B holds p - s on stage s; the gradients of the
    # by-hand pipeline and of torch.distributed.pipelining equal one process's (float64, 1e-12; the same
    # accumulation order, so 0 in practice); each forward/backward sleeps 20/40 ms, so the idle fraction follows
    # (p-1)/(m+p-1) (GPipe §2.3): never below it by more than the sleeps' jitter, above it by gloo's latency on a
    # loaded 2-core machine (1.0-1.7x seen); m = 8 (formula 0.27) is well below m = 1 (0.75)
    "16_pipeline_parallel": [
        ("predict", "gpipe: activations held at most, per stage: [8, 8, 8, 8]"),
        ("predict", " 1f1b: activations held at most, per stage: [4, 3, 2, 1]"),
        ("orders", "  stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7   (holds at most 4)"),
        ("grads", "gpipe by hand on 4 ranks equals one process: True"),
        ("grads", "1f1b by hand on 4 ranks equals one process: True"),
        ("grads", "1f1b, rank 1: 32 messages, all of 512 B: True"),
        ("bubble", "measured bubble at least 0.8x (p-1)/(m+p-1) for every m and schedule (the formula is a floor): True"),
        ("bubble", "more microbatches, a smaller bubble (m = 8 against m = 1), for both schedules: True"),
        ("bubble", "1F1B holds at most p = 4 activations per stage, GPipe m: True"),
        ("explorer", "activations held at most, per stage: [4, 3, 2, 1]"),
        ("torch-pipelining", "ScheduleGPipe equals one process: True"),
        ("torch-pipelining", "Schedule1F1B equals one process: True"),
        ("torch-pipelining", "the same activation and gradient messages as by hand, in the same order, on every rank: True"),
        # the stages' vote: 2.15's all_reduce(MIN) and a 4-byte connection per neighbour pair, 2.13's send/recv
        ("torch-extra", "rank 0: all_reduce(4 B), isend(dst=1, 4 B), all_reduce(4 B)" if PIPELINE_VOTE
         else "rank 0: send(dst=1, 4 B), recv(src=1, 4 B), send_object_list(dst=1"),
        ("check", "not answered yet"),
    ],
    # serial: the all_reduce is issued after the compute region ended, so no compute beside it (exactly 0 %);
    # overlapped: issued before the compute region starts, still running when it starts (a 4 MiB gloo
    # all_reduce takes ms); exposed + overlapped = communication by definition (HTA's intervals)
    "17_overlap": [
        ("serial", "serial: overlap 0.0 %, 0.0 % on every rank"),
        ("overlapped", "overlapped: overlap > 0 % on at least one rank: True"),  # every rank: 0 % on one of 2 cores when its compute thread waited for a core (torch 2.15 compat run)
        ("overlapped", "exposed + overlapped = communication on every rank: True"),
        ("gpu", "skipped: this cell needs 2 CUDA devices"),
        # 8 Linear(512, 512) layers of 1.0 MiB (weight + bias) each: DDP closes a bucket once it reaches
        # bucket_cap_mb, so 2 MiB makes 4 buckets of 2 layers; 1, 2, 4, 8, 25 MiB make 8, 4, 2, 1, 1
        ("buckets", "bucket_cap_mb=2: 4 buckets, in firing order: #0 (4 parameters, 2.0 MiB)"),
        ("sweep", "buckets at 1, 2, 4, 8, 25 MiB: [8, 4, 2, 1, 1]"),
        ("pitfall", "backward() as compute: overlap >= the honest one on every rank and setting: True"),
    ],
    # rank 3 sleeps 0.3 s, the others 0.05 s: they wait ~0.25 s at the second all_reduce. The faults on rank 1
    # (collnb.labs.hangs): a skipped 2nd all_reduce puts its all_to_all at sequence number 3; 6 floats at number 2;
    # a split of 1 instead of 2 for rank 0 sends 31 of 32 elements (collnb raises from the entries) and leaves rank 0's 4th value at its -1 fill
    # (rank s sends rank 0 [100 s, 100 s + 1]; rank 1 only 101); the sleeper leaves no dump
    "18_hangs": [
        ("predict", "collnb raised: rank 1: CollectiveMismatch: its collective_seq_id 3 in the default group"),
        ("plain", "collnb's guess, from the messages alone"),
        ("timeline", "rank 3 arrived last at the second all_reduce"),
        ("timeline", "waiting about 0.25 s on ranks 0-2: True"),
        ("skipped-table", "   1    3  all_to_all   [[8]]"),
        ("skipped", "collnb's blame: rank(s) [1] at collective 3"),
        ("skipped-fr", "Collective sequence number: 3 has errors"),
        ("skipped-fr", "COLLECTIVE_TYPE_MISMATCH"),
        ("shape", "collnb's blame: rank(s) [1] at collective 2"),
        ("shape", "missing ranks: {1}"),
        ("splits", "collnb raised: rank 1: CollectiveMismatch: its collective_seq_id 4 in the default group"),
        ("splits", "rank 0 received [0.0, 1.0, 101.0, -1.0, 200.0, 201.0, 300.0, 301.0]"),
        ("splits", "total input numel: 31"),
        ("sleep", "DidNotJoin: rank 1 never reached"),
        ("sleep", "Missing dump files from ranks {1}"),
        ("cli", "SIZE_OR_SYNTAX_MISMATCH"),
        # DETAIL's check (collnb.launch's default): every rank raises at the 2nd all_reduce, before the timeout
        ("detail", "Detected mismatch between collectives"),
        ("detail", "TensorShape=[6]"),
        ("detail", "before the 2 s timeout: True"),
        # rank 0 of monitored_barrier names the rank that did not arrive; collnb names it from its stack
        ("monitored-barrier", "Ranks 2 failed to pass monitoredBarrier in 1000 ms"),
        ("stack", "time.sleep(sleep_s)"),
        ("mystery", "the run failed (every rank waited until the timeout): True"),
        # broken_step: every rank sends first, and gloo's send waits for the matching recv: the ranks time out in it
        # (a rank whose peer gave up first may report "Connection closed by peer" instead)
        ("broken-step", "RuntimeError: Timed out waiting 2000ms for send operation"),
        ("check", "not answered yet"),
    ],
    "19_virtual_cluster": [
        ("make-cluster", "world size: 4"),
        ("model", "predicted speed-up of hierarchical over the flat ring:"),
        ("compare", "exact"),
        ("replay", "values equal gloo's all_reduce: True"),
        ("hsdp", "rank 0's gradient shard starts [4.0, 4.0]"),
        # priced as gloo sends them (all_gather a ring, reduce_scatter an all_reduce): 3 m and m per node, m = 4 MiB
        ("hsdp", "by the recorded calls: [12.0, 12.0] MiB"),
        ("hsdp", "by the recorded calls: [4.0, 4.0] MiB"),
        ("moe", "hierarchical: 2 rounds, 4 messages cross nodes"),
        ("moe", "pairwise: 3 rounds, 8 messages cross nodes"),
        ("nccl", "1 node(s): Ring/LL from 8 B"),
        ("explain", "busbw = algbw x 1.875"),
        ("check", "not answered yet"),
        ("close", "namespaces left: []"),
    ],
    # one small transformer, two AdamW steps under every composition, float64: each equals one process within
    # 1e-12 (collnb.labs.parallel.composed.TOLERANCE); per dimension the collectives its parallelism issues (TP on a
    # 2x2 mesh: 4 all_reduces of a (2, 8, 16) float64 activation in forward, 8 in backward; FSDP2: the root and 2
    # blocks); the table's bytes are the recorded calls' sums; DCP moves values exactly
    "20_composed_parallelism": [
        ("predict", " dp_shard: all_gather, reduce_scatter"),
        ("predict", "       tp: all_reduce"),
        ("fsdp-tp", "equal within 1e-12: True"),
        ("fsdp-tp", "tp              forward    all_reduce           4       8 KiB         8 KiB"),
        ("fsdp-tp", "tp              backward   all_reduce           8      16 KiB        16 KiB"),
        ("bytes-equal", "the table's per-dimension bytes equal the recorded calls: True"),
        ("hsdp", "dp_replicate=2 × dp_shard=2 equals one process: True"),
        ("pp", "pp=2 × dp_shard=2 equals one process: True"),
        ("pp", "pp              forward    send                 2       2 KiB         2 KiB"),
        ("ep", "dp_replicate=2 × ep=2 equals one process: True"),
        ("ep", "ep              forward    all_to_all           4"),
        ("cp", "ring: equals one process: True"),
        ("cp", "ulysses: equals one process: True"),
        ("log", "sequential all_gather operations will be performed"),
        ("flatten", "all_reduce flattened             1  [4]             512          768"),
        ("flatten", "all_gather flattened             1  [4]             512          384"),
        ("flatten", "every result equals the whole tensor: True"),
        ("debug-mode", "CommDebugMode's counts, rank 0: {'all_gather_into_tensor': 2}"),
        ("dcp", "largest difference: 0.0"),
        ("dcp", "temporary folder removed: True"),
        ("placement", "tp across nodes   tp=2 × dp_shard=2    across nodes     12 MiB (tp)"),
        ("check", "not answered yet"),
    ],
    "algorithms": [
        ("predict", "binomial_tree all_reduce at world size 5: 6 rounds"),
    ],
    # a Partial becoming row shards is a reduce_scatter; S -> R an all_gather, P -> R an all_reduce, R -> S a
    # local chunk, R -> P refused (torch 2.13: "redistributing to Partial is for internal use only!"; 2.14+: "only
    # Shard to Partial(sum) ..."), S -> P refused before 2.14 and a zero-fill from 2.14; on CPU torch
    # issues S(0) -> S(1) as an all_gather (logged); bytes: a (2, 6) float32 gather output is 48 B, (4, 6) 96 B
    "12_device_mesh_dtensor": [
        ("predict", "each rank issued: ['reduce_scatter_tensor']"),
        ("redistribute", "✓ every local shard equals the hand-sliced reference"),
        ("mesh", "[rank 3] coordinate (1, 1): dp group [1, 3], tp group [2, 3]"),
        ("pairs", "S(0) → R     all_gather_into_tensor  ✓"),
        ("pairs", "   P → R     all_reduce  ✓"),
        ("pairs", "   P → S(0)  reduce_scatter_tensor  ✓"),
        ("pairs", "   R → S(0)  no communication  ✓"),
        ("pairs", "   R → P     refused  ✓"),
        ("pairs", "S(0) → P     no communication  ✓" if SHARD_TO_PARTIAL else "S(0) → P     refused  ✓"),
        ("shard-to-shard", "CPU process group does not support alltoall yet, falling back with allgather + chunk!"),
        ("refused", "only Shard to Partial(sum) redistribution is supported!" if SHARD_TO_PARTIAL
         else "redistributing to Partial is for internal use only!"),
        ("refused", "the reference expected the refusal: True"),
        ("refused", "S(0) → P: rank 1 holds [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [20.0,"
         if SHARD_TO_PARTIAL else "S(0) → P: RuntimeError: "),
        ("refused", "the reference agrees: True"),
        ("matmul", "[rank 0] Y.placements = (Partial(sum),); my partial sum, row 0: [3.0, 3.0]"),
        ("matmul", "[rank 1] Y.placements = (Partial(sum),); my partial sum, row 0: [12.0, 12.0]"),
        ("matmul", "full_tensor() == x @ w: True"),
        ("matmul", "step 1: all_reduce over mesh dim 0; groups [0, 1]"),
        ("two-steps", "2 sequential all_gather operations will be performed"),
        ("one-step", "(S(0), S(0)) → (R, S(0)): 2 collective(s), 144 B per rank"),
        ("one-step", "(S(0), S(0)) → (S(0), R): 1 collective(s), 48 B per rank"),
        ("cost-model", "(R, S(0)) costs more than (S(0), R): True"),
        ("uneven", "rows per rank: [2, 2, 1, 0]"),
        ("comm-debug", "CommDebugMode, rank 0: {'c10d_functional.all_gather_into_tensor': 2}"),
        ("comm-debug", "collnb, rank 0:        {'all_gather_into_tensor': 2}"),
        # the function's own redistribute: torch's flattening advice, on every rank, in this cell (not the first)
        *[("comm-debug", f"[rank {r}] [rank{r}]:W") for r in range(4)],
    ],
}


#: The cells (by tag) whose stderr is part of the lesson: torch's warning for a rank outside the group (00),
#: torch's flattening advice logged by the learner-style function's own redistribute (12).
STDERR_CELLS = {
    "00_launching_ranks": {"outside-group"},
    "12_device_mesh_dtensor": {"comm-debug"},
}


def _outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def _tagged(nb, tag):
    return [c for c in nb.cells if c.cell_type == "code" and tag in c.get("metadata", {}).get("tags", [])]


# ------------------------------------------------------------------------------------------------
# Fast checks of the stored files


def test_there_are_notebooks():
    names = {p.stem for p in NOTEBOOKS}
    assert "00_launching_ranks" in names
    assert set(EXPECTED) <= names, f"notebooks missing: {sorted(set(EXPECTED) - names)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: code cells {dirty} are stored with outputs or an execution count; "
                       f"clear them (Edit → Clear Outputs of All Cells) before saving")


@pytest.mark.parametrize("path", PRIMITIVE_NOTEBOOKS, ids=lambda p: p.stem)
def test_primitive_notebook_structure(path):
    """Each per-primitive notebook opens with a "predict, then run" question (before any code but
    the imports), shows its explorer only after the semantics it illustrates, has an exercise with
    a hidden solution and a check that uses collnb.exercises, shows a heatmap, and links to the
    round-by-round notebook."""
    nb = nbformat.read(path, as_version=4)
    # the Colab set-up cell (tools/notebook_meta.py) comes first and does nothing outside Colab
    code = [c for c in nb.cells if c.cell_type == "code" and "colab-setup" not in c.metadata.get("tags", [])]
    predict_md = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                      and "Predict, then run" in c.source)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                      and "colab-setup" not in c.metadata.get("tags", []))
    assert "import" in nb.cells[first_code].source and "def " not in nb.cells[first_code].source
    assert predict_md < next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and i > first_code), \
        f"{path.name}: the predict-then-run question does not come first"
    semantics = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and "## Semantics" in c.source)
    (explorer,) = [i for i, c in enumerate(nb.cells) if "explorer" in c.metadata.get("tags", [])]
    assert explorer > semantics, f"{path.name}: the explorer comes before the semantics it illustrates"
    for tag in ("exercise", "solution", "check", "heatmap", "predict"):
        assert _tagged(nb, tag), f"{path.name}: no cell tagged {tag!r}"
    for cell in _tagged(nb, "solution"):
        assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, \
            f"{path.name}: the solution cell should be stored collapsed"
    for cell in _tagged(nb, "check"):
        assert "exercises.check_" in cell.source, f"{path.name}: the check cell does not use collnb.exercises"
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "What you'll learn" in markdown and "Summary" in markdown
    assert "(algorithms.ipynb" in markdown, f"{path.name}: no link to algorithms.ipynb"
    assert "collnb.launch(" in "\n".join(c.source for c in code), f"{path.name}: never uses collnb.launch"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_learner_text_has_no_project_internal_words(path):
    """Issue 9 §5: text a learner reads says "the tutorial script" / "a teaching page", never the
    project's internal word "seed": the two documents are "the original examples" (collnb.examples)."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        text = cell.source if cell.cell_type == "markdown" else "\n".join(
            line.split("#", 1)[1] for line in cell.source.splitlines() if "#" in line)
        text = re.sub(r"manual_seed", "", text)
        assert not re.search(r"\bseeds?\b", text, re.I), f"{path.name} cell {i}: {text!r}"


@pytest.mark.parametrize("path", PRIMITIVE_NOTEBOOKS, ids=lambda p: p.stem)
def test_explorer_text_fits_the_primitive(path):
    """Issue 9 §2: notebooks whose primitive does no arithmetic do not talk about int8 wrapping."""
    nb = nbformat.read(path, as_version=4)
    (cell,) = _tagged(nb, "explorer")
    reducing = path.stem in ("04_reduce", "06_reduce_scatter", "07_all_reduce")
    assert ("wraps" in cell.source) == reducing, cell.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_links_between_notebooks_resolve(path):
    """Every markdown link to another notebook (``[text](name.ipynb)`` or ``name.ipynb#anchor``)
    names a notebook that exists in notebooks/ (algorithms.ipynb included: issue 3 §4)."""
    nb = nbformat.read(path, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    targets = set(re.findall(r"\]\(([^)#\s]+\.ipynb)(?:#[^)]*)?\)", markdown))
    assert targets, f"{path.name} links to no other notebook"
    missing = sorted(t for t in targets if not (NOTEBOOK_DIR / t).is_file())
    assert not missing, f"{path.name} links to notebooks that do not exist: {missing}"


def _getsource_misuse(source: str) -> list[str]:
    """The places where a cell cuts library source text instead of showing a named piece: the result
    of ``inspect.getsource`` (or a name bound to it) subscripted, or a method called on it
    (``src[:src.index(...)]``, ``src.split(...)``)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []

    def is_getsource(node) -> bool:  # inspect.getsource(f), or collnb.labs.code.source(f) (the same text)
        return isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "getsource"
                                               or getattr(node.func, "id", None) == "getsource"
                                               or getattr(node.func, "attr", None) == "source"
                                               and getattr(node.func.value, "id", None) == "code")

    bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and is_getsource(node.value)
             for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        value = node.value if isinstance(node, (ast.Subscript, ast.Attribute)) else None
        if value is not None and (is_getsource(value) or isinstance(value, ast.Name) and value.id in bound):
            found.append(ast.unparse(node))
    return found + [f"{name} = inspect.getsource(...)" for name in bound]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_library_code_is_shown_by_named_piece_never_by_cutting_source_text(path):
    """Issue 35: a lesson shows a function or class of collnb whole (``print(inspect.getsource(obj))`` of
    a named piece); where it shows part of one, that part is a named function in the library. Cutting
    the text (``src[src.index("    dist.barrier()"):]``) breaks silently when the library changes."""
    nb = nbformat.read(path, as_version=4)
    cut = [(c.get("id"), m) for c in nb.cells if c.cell_type == "code" for m in _getsource_misuse(c.source)]
    assert not cut, f"{path.name}: cells cut library source text: {cut}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_cell_that_shows_an_explorer_prints_nothing_that_goes_stale(path):
    """Issue 34: a line printed beside an explorer describes the state it was shown in and goes stale as
    soon as the learner moves a control (16's caption above the pipeline explorer; 17 printed the buckets of
    bucket_cap_mb=2 above the bucket explorer). The explorer says what it shows itself; a cell that makes
    one (``explore``, ``explore_*``) prints nothing."""
    nb = nbformat.read(path, as_version=4)
    both = [c.get("id") for c in nb.cells if c.cell_type == "code" and re.search(r"\bexplore\w*\(", c.source)
            and re.search(r"\bprint\(", c.source)]
    assert not both, f"{path.name}: cells {both} make an explorer and print beside it"


def test_the_source_cutting_detector_finds_what_it_is_for():
    assert _getsource_misuse('src = inspect.getsource(f)\nprint(src[:src.index("x")])')
    assert _getsource_misuse('print(inspect.getsource(f).split("\\n")[3])')
    assert _getsource_misuse('print(inspect.getsource(f)[10:])')
    assert not _getsource_misuse("print(inspect.getsource(parallel.run_stage))")
    assert not _getsource_misuse("print(code.source(parallel.run_stage))")
    assert _getsource_misuse("print(code.source(parallel.run_stage)[:400])")
    assert not _getsource_misuse("import inspect\nprint(inspect.getsource(A.b))\nx = y[1:]")


def _course_order() -> list[str]:
    """README's order after 11 ("11 → 14 → 17 → ..."), as notebook numbers."""
    readme = (NOTEBOOK_DIR.parent / "README.md").read_text()
    start = readme.index("it is 11 →") + len("it is ")
    outside, depth = [], 0  # the text outside brackets (the reasons), up to the sentence's ";"
    for ch in readme[start:]:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch == ";":
            break
        if depth == 0 and ch != ")":
            outside.append(ch)
    return [n.strip() for n in "".join(outside).split("→")]


def _first_link_after(markdown: str, word: str) -> str | None:
    m = re.search(rf"{word}[:：]\**\s*\[[^\]]*\]\(([^)#\s]+\.ipynb)", markdown)
    return m.group(1) if m else None


def test_every_notebooks_previous_and_next_follow_the_readmes_order():
    """Issue 34: the course is taken 11 → 14 → 17 → 12 → 13 → 15 → 16 → 18 (README says why); each of these
    notebooks' "Next:" links the one after it and its "Previous:" the one before (they said 13 → 14 → 15)."""
    order = _course_order()
    assert order[0] == "11" and len(order) == 8, order
    wrong = []
    for folder, nxt, prev in ((NOTEBOOK_DIR, "Next", "Previous"), (NOTEBOOK_DIR / "zh-CN", "下一篇", "上一篇")):
        wrong += _order_problems(order, folder, nxt, prev)
    assert not wrong, "\n".join(wrong)


def _order_problems(order, folder, nxt, prev) -> list[str]:
    by_number = {p.name[:2]: p for p in sorted(folder.glob("*.ipynb")) if p.name[:2].isdigit()}
    wrong = []
    for before, after in zip(order, order[1:]):
        md_before = "\n".join(c.source for c in nbformat.read(by_number[before], as_version=4).cells
                               if c.cell_type == "markdown")
        md_after = "\n".join(c.source for c in nbformat.read(by_number[after], as_version=4).cells
                              if c.cell_type == "markdown")
        if _first_link_after(md_before, nxt) != by_number[after].name:
            wrong.append(f"{folder.name}/{before}'s {nxt}: {_first_link_after(md_before, nxt)}, want {by_number[after].name}")
        if _first_link_after(md_after, prev) != by_number[before].name:
            wrong.append(f"{folder.name}/{after}'s {prev}: {_first_link_after(md_after, prev)}, want {by_number[before].name}")
    return wrong


# ------------------------------------------------------------------------------------------------
# Executing every notebook


#: Output a cell shows while another cell runs: ``[index of the cell running, message type, content]`` per
#: notebook stem, recorded by tools/notebook_run.py's client, here (:func:`_execute_all`) or by the book
#: (docs/conf.py executes with the same client and keeps the record in the cached notebook's metadata).
STRAY: dict = {}


async def _execute_all(paths):
    sem = asyncio.Semaphore(PARALLEL)

    async def one(path):
        async with sem:
            t0 = time.perf_counter()
            for attempt in (1, 2):
                nb = nbformat.read(path, as_version=4)
                client = notebook_run.RecordingClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                                      allow_errors=True,
                                                      resources={"metadata": {"path": str(path.parent)}})
                client.stray = STRAY[path.stem] = []
                try:
                    await client.async_execute()
                except Exception as exc:  # noqa: BLE001 - a kernel death or cell timeout is reported per notebook
                    # A kernel that never ran a cell failed to start: jupyter_client chooses its five TCP
                    # ports before the kernel binds them, and on a busy machine another process can take
                    # one in between. That is the machine, not the notebook: start it once more (as
                    # make docs retries its build once).
                    if attempt == 1 and not any(c.get("execution_count") for c in nb.cells if c.cell_type == "code"):
                        continue
                    return path.stem, nb, time.perf_counter() - t0, exc
                return path.stem, nb, time.perf_counter() - t0, None
        raise AssertionError("unreachable")

    return await asyncio.gather(*(one(p) for p in paths))


#: The book's execution cache (``make docs``, MyST-NB's ``nb_execution_mode = "cache"``).
BOOK_CACHE = NOTEBOOK_DIR.parent / "docs" / "_build" / ".jupyter_cache"
#: What a notebook's outputs depend on besides its own cells: a cached execution older than any of
#: these is not used.
CODE_PATHS = ("collnb", "tools", "pyproject.toml", "constraints.txt")


def _newest_code_mtime() -> float:
    root = NOTEBOOK_DIR.parent
    newest = 0.0
    for name in CODE_PATHS:
        p = root / name
        files = [p] if p.is_file() else p.rglob("*.py") if p.is_dir() else []
        newest = max([newest] + [f.stat().st_mtime for f in files])
    return newest


def _from_book_cache(paths, book_cache: Path = BOOK_CACHE) -> tuple[dict, dict]:
    """The book's executions of ``paths`` that stand for running them here, and why each other one does
    not. An execution stands when the book's cache (``make docs``) holds one of the notebook's code cells as
    they are now (jupyter-cache's hash; an execution that raised is not cached), made after the last change
    to collnb's code (:data:`CODE_PATHS`) and to the notebook, by the client the tests use (its record of
    stray output, tools/notebook_run.py). CI builds the book just before ``make test`` in the same clone,
    so each notebook runs once per CI run, not twice. ``COLLNB_TEST_EXECUTE=1`` executes every notebook
    here regardless. Returns ``({stem: (executed nb, stray output)}, {stem: why it is executed here})``."""
    import datetime
    import os

    if os.environ.get("COLLNB_TEST_EXECUTE") == "1":
        return {}, {p.stem: "COLLNB_TEST_EXECUTE=1" for p in paths}
    if not (book_cache / "global.db").is_file():
        return {}, {p.stem: "no book built (make docs builds it and its execution cache)" for p in paths}
    try:
        from jupyter_cache import get_cache
    except ImportError:
        return {}, {p.stem: "jupyter-cache is not installed (the docs extra)" for p in paths}
    cache = get_cache(str(book_cache))
    code = _newest_code_mtime()
    out, why = {}, {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        try:
            record = cache.match_cache_notebook(nb)
        except KeyError:
            why[path.stem] = "the book holds no execution of its current code (not built since, or it raised)"
            continue
        created = record.created.replace(tzinfo=datetime.timezone.utc).timestamp()  # jupyter-cache stores UTC
        if created <= max(code, path.stat().st_mtime):
            why[path.stem] = "the book executed it before the last change to collnb's code or to the notebook"
            continue
        _, merged = cache.merge_match_into_notebook(nb, nb_meta=("kernelspec", "language_info", "widgets",
                                                                 notebook_run.STRAY_KEY))
        stray = merged.metadata.get(notebook_run.STRAY_KEY)
        if stray is None:
            why[path.stem] = "the book's execution kept no record of stray output (built before tools/notebook_run.py)"
            continue
        out[path.stem] = (merged, stray)
    return out, why


@pytest.mark.slow
def test_the_books_execution_keeps_stray_output_and_the_tests_take_it(tmp_path, monkeypatch):
    """The book executes with tools/notebook_run.py's client (docs/conf.py): output sent for an earlier cell
    while a later one runs is kept in the cached notebook, and :func:`_from_book_cache` hands it to
    test_notebook_runs_top_to_bottom's stray check with the cell's own output; an execution cached without
    that record is not taken, and says why."""
    import jupyter_cache.executors.utils as utils
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    monkeypatch.setattr(utils, "executenb", utils.executenb)  # put back after the test
    notebook_run.record_in_the_book()
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": kernelspec})
    nb.cells = [nbformat.v4.new_code_cell("k = get_ipython().kernel\nfirst = k.get_parent()"),
                nbformat.v4.new_code_cell("k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'late'}, "
                                          "parent=first)\nimport time\ntime.sleep(0.5)\nprint('own')")]
    path = tmp_path / "stray.ipynb"
    nbformat.write(nb, path)
    run = nbformat.read(path, as_version=4)
    result = utils.single_nb_execution(run, cwd=str(tmp_path), timeout=120, allow_errors=False)
    assert result.err is None, result.exc_string
    cache = get_cache(str(tmp_path / "cache"))
    cache.cache_notebook_bundle(CacheBundleIn(run, str(path)), check_validity=False)

    # the same notebook's code, but another cell: executed by a book that kept no record
    plain = tmp_path / "plain.ipynb"
    nb.cells[1].source += "\nprint('more')"
    nbformat.write(nb, plain)
    unrecorded = nbformat.read(plain, as_version=4)
    unrecorded.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="own\nmore\n")]
    cache.cache_notebook_bundle(CacheBundleIn(unrecorded, str(plain)), check_validity=False)

    got, why = _from_book_cache([path, plain], tmp_path / "cache")
    merged, stray = got["stray"]
    assert stray == [[1, "stream", {"name": "stdout", "text": "late"}]]
    assert [o.get("text") for o in merged.cells[1].outputs] == ["own\n"]
    assert "plain" not in got and "no record of stray output" in why["plain"]


def _selected_notebooks(session) -> list:
    """The notebooks whose tests this session runs (``-k 16_pipeline`` executes one notebook, not
    every one); every notebook when a selected test names none (a test of its own, e.g.
    ``test_broadcast_dtype_mismatch_without_debug_gives_garbage``, says which it reads)."""
    stems = set()
    for item in session.items:
        if "executed" not in getattr(item, "fixturenames", ()):
            continue
        callspec = getattr(item, "callspec", None)
        path = callspec.params.get("path") if callspec is not None else None
        if path is None:
            return NOTEBOOKS
        stems.add(path.stem)
    return [p for p in NOTEBOOKS if p.stem in stems]


@pytest.fixture(scope="module")
def executed(request, run_summary, book):
    """{stem: (executed notebook, exception or None)} of the selected notebooks: the book's execution where
    it stands for one here (:func:`_from_book_cache`), else executed here, two at a time. Where each came
    from is printed at the end of the run, also under ``-q``. (``book``: where this run builds the book, its
    executions are waited for, on whichever worker builds it.)"""
    t0 = time.perf_counter()
    selected = _selected_notebooks(request.session)
    cached, why = _from_book_cache(selected)
    for stem, (_, stray) in cached.items():
        STRAY[stem] = stray
    runs = asyncio.run(_execute_all([p for p in selected if p.stem not in cached]))
    total = time.perf_counter() - t0
    if cached:
        run_summary.append(f"tests/test_notebooks.py: {len(cached)} notebook(s) taken from the book's execution "
                           f"cache (make docs): {', '.join(sorted(cached))}")
    if runs:
        run_summary.append(f"tests/test_notebooks.py: {len(runs)} notebook(s) executed here in {total:.0f} s, "
                           "as the book's execution of them could not stand:")
        run_summary += [f"  {stem} ({seconds:.0f} s): {why[stem]}" for stem, _, seconds, _ in runs]
    return {**{stem: (nb, None) for stem, (nb, _) in cached.items()}, **{stem: (nb, exc) for stem, nb, _, exc in runs}}


def _png_size(b64: str):
    from PIL import Image

    img = Image.open(io.BytesIO(base64.b64decode(b64)))
    img.load()
    colours = img.convert("RGB").getcolors(maxcolors=1 << 16)
    return img.size, (len(colours) if colours is not None else 1 << 16)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, executed):
    nb, exc = executed[path.stem]
    assert exc is None, f"{path.name} did not finish: {type(exc).__name__}: {exc}"
    errors = [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, "\n\n".join(f"{path.name} cell {i}: {o.ename}: {o.evalue}\n" + "\n".join(o.traceback)
                                   for i, o in errors)
    unrun = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()
             and c.get("execution_count") is None]
    assert not unrun, f"{path.name}: cells {unrun} were not executed"

    # Output shows in the cell that caused it (issue 34): none arrives for another cell, and stderr only in the
    # cells that show a warning or a log on purpose.
    stray = STRAY.get(path.stem, [])
    assert not stray, f"{path.name}: output for another cell arrived while cell {stray[0][0]} ran: {stray[:3]}"
    for i, cell in enumerate(nb.cells):
        tags = set(cell.get("metadata", {}).get("tags", [])) if cell.cell_type == "code" else set()
        err = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stderr")
        assert not err or tags & STDERR_CELLS.get(path.stem, set()), \
            f"{path.name} cell {i} {sorted(tags)} wrote to stderr:\n{err[:800]}"

    # Exercise checks on a fresh notebook: nobody answered, so no ✓ (issue 9 §1); the check says so,
    # points a direction and says where the solution is, without showing it (issue 18).
    for cell in _tagged(nb, "check"):
        text = _outputs_text(cell)
        assert "✓" not in text and "✗" not in text, f"{path.name}: a check marked an unwritten answer:\n{text}"
        assert "not answered yet" in text and "Hint: " in text and "collapsed cell" in text, \
            f"{path.name}: check said:\n{text}"
    _assert_no_solution_shown(path, nb)

    # Heatmaps: a real picture, of a run whose defined outputs matched the reference.
    for cell in _tagged(nb, "heatmap"):
        shown = [o for o in cell.get("outputs", []) if o.output_type in ("execute_result", "display_data")]
        pngs = [o["data"]["image/png"] for o in shown if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, f"{path.name}: heatmap cell {cell.source!r} displayed {len(pngs)} PNGs"
        (w, h), n_colours = _png_size(pngs[0])
        assert w >= 300 and h >= 150 and n_colours >= 8, \
            f"{path.name}: heatmap of {cell.source!r} looks empty ({w}x{h} px, {n_colours} colours)"
        text = _outputs_text(cell)
        assert "✓" in text and "✗" not in text, f"{path.name}: {cell.source!r} did not report ✓:\n{text}"

    # Notebook-specific values.
    for tag, want in EXPECTED.get(path.stem, []):
        cells = _tagged(nb, tag)
        assert cells, f"{path.name}: no cell tagged {tag!r}"
        texts = [_outputs_text(c) for c in cells]
        assert any(want in t for t in texts), \
            f"{path.name}: no {tag!r} cell printed {want!r}; they printed:\n" + "\n---\n".join(texts)


def _solution_values(path) -> list:
    """The values the stored solutions give the learner's answer variables (predictions), where the
    solution can be run on its own."""
    from collnb.labs.exercises import solution_code

    out = []
    for cell in _tagged(nbformat.read(path, as_version=4), "solution"):
        ns = {}
        try:
            exec(compile(solution_code(cell.source), path.name, "exec"), ns)  # noqa: S102
        except NameError:  # needs the notebook's variables (bandwidth: the fit)
            continue
        out += [v for k, v in ns.items() if k == "prediction"]
    return out


def _assert_no_solution_shown(path, nb) -> None:
    """Issue 18: Run All on an untouched notebook shows no solution: the collapsed cell prints
    nothing, the check's hint holds no line of the solution's code, and no output anywhere holds a
    prediction's solution value (a list), nor the check's (a number)."""
    from collnb.labs.exercises import solution_code

    shown = "\n".join(_outputs_text(c) for c in nb.cells if c.cell_type == "code")
    checks = "\n".join(_outputs_text(c) for c in _tagged(nb, "check"))
    for cell in _tagged(nb, "solution"):
        assert not cell.get("outputs"), f"{path.name}: the solution cell printed {_outputs_text(cell)!r}"
        for line in solution_code(cell.source).splitlines():  # (the lesson may show such a line itself)
            code = line.split("#", 1)[0].strip()
            if len(code) > 12:
                assert code not in checks, f"{path.name}: the check shows solution code: {code!r}"
    for value in _solution_values(path):
        spellings = [repr(value)]
        if isinstance(value, list):
            spellings.append(repr([None if row is None else [float(v) for v in row] for row in value]))
            for spelled in spellings:
                assert spelled not in shown, f"{path.name}: the solution {spelled} is shown by Run All"
        else:
            assert not re.search(rf"(?<![\d.]){value}(?![\d.])", checks), \
                f"{path.name}: the check shows the solution {value}:\n{checks}"
    if path.stem == "bandwidth":  # no time in the unanswered check: neither the terms nor their sum
        assert not re.search(r"\d\s*(ms|µs|s\b)", checks), checks


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broadcast_dtype_mismatch_without_debug_gives_garbage(executed):
    """01_broadcast claims that a float32 broadcast into int64 silently gives garbage when the
    DETAIL check is off: rank 1 must not hold 1, 2, 3."""
    nb, _ = executed["01_broadcast"]
    (cell,) = _tagged(nb, "garbage")
    text = _outputs_text(cell)
    tensors = re.findall(r"tensor\(\[([^\]]*)\]", text)
    assert len(tensors) == 2, text
    sent = [float(x) for x in tensors[0].split(",")]
    received = [int(x) for x in tensors[1].split(",")]
    assert sent == [1.0, 2.0, 3.0], text
    assert len(received) == 3 and received != [1, 2, 3], text
