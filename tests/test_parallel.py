"""collnb.labs.parallel: every parallelism on real gloo ranks equals one process (float64, a largest
absolute difference <= 1e-12 unless stated), and the collectives each records are the expected
sequence (kind, count, bytes). Also the pure pieces: layouts, the online softmax, capacity slots,
the accounting of records, and the matrix picture."""

from __future__ import annotations

import io

import pytest
import torch

import collnb
from collnb.labs import parallel as P
from collnb.ranks import CallRecord

TOL = 1e-12


def _marked(fn):
    """A rank function that runs ``fn(rank, ws, *args, phases=..., **kw)`` and returns (result, marks)."""
    def run(rank, world_size, *args, **kwargs):
        phases = P.Phases()
        out = fn(rank, world_size, *args, phases=phases, **kwargs)
        return out, phases.close()
    return run


def _names(records):
    return [P.kind(r) for r in records]


@pytest.fixture(scope="module")
def block_data():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, 8, generator=gen, dtype=torch.float64)
    g = torch.randn(8, 8, generator=gen, dtype=torch.float64)
    return x, g, P.reference_step(x, g)


# ----------------------------------------------------------------------------------------------
# Tensor and sequence parallelism by hand


@pytest.mark.parametrize("ws", [2, 4])
@pytest.mark.parametrize("layout", ["tp", "sp", "sp-regather"])
def test_tensor_parallel_mlp_equals_one_process_and_issues_the_expected_calls(ws, layout, block_data):
    x, g, ref = block_data
    sp, regather = layout != "tp", layout == "sp-regather"
    out = collnb.launch(_marked(P.mlp_step), ws, args=(x, g), kwargs=dict(sequence_parallel=sp, regather=regather),
                        record_calls=True)
    for r in range(ws):
        assert P.deviation(out[r][0], ref, r, ws, sp) <= TOL
        phases = P.split(out.calls[r], out[r][1])
        act = 8 * 8 * 8  # the (s, h) float64 activations, bytes
        if layout == "tp":
            want = {"forward": ["all_reduce"], "backward": ["all_reduce"]}
        else:
            want = {"forward": ["all_gather", "reduce_scatter"],
                    "backward": ["all_gather", "all_gather", "reduce_scatter"] if regather
                    else ["all_gather", "reduce_scatter"],
                    "grads": ["all_reduce"]}   # the replicated parameters' partial gradients
        assert {k: _names(v) for k, v in phases.items()} == want
        assert all(c.nbytes == act for k in ("forward", "backward") for c in phases[k])
        # the same bytes on the wire in forward: an all_reduce = a reduce_scatter + an all_gather
        fwd_wire = sum(P.wire_bytes(c) for c in phases["forward"])
        assert fwd_wire == pytest.approx(2 * (ws - 1) / ws * act)


def test_activation_memory_is_measured_and_sequence_parallel_divides_it(block_data):
    """Saved-for-backward bytes, as measured, equal the block's arithmetic: TP keeps the LayerNorm's
    input and statistics whole, SP with regather keeps 1/t of everything one process keeps."""
    x, g, ref = block_data
    s, h, f = 8, 8, 32
    assert ref["saved_bytes"] == 8 * (2 * s * h + 2 * s + 2 * s * f)
    for ws in (2, 4):
        saved = {}
        for name, kw in (("tp", {}), ("sp", {"sequence_parallel": True}),
                         ("sp-regather", {"sequence_parallel": True, "regather": True})):
            out = collnb.launch(P.mlp_step, ws, args=(x, g), kwargs=kw)
            saved[name] = {o["saved_bytes"] for o in out}
            assert len(saved[name]) == 1
        assert saved["tp"] == {8 * (2 * s * h + 2 * s + 2 * s * f // ws)}
        assert saved["sp-regather"] == {ref["saved_bytes"] // ws}
        assert min(saved["tp"]) > min(saved["sp"]) > min(saved["sp-regather"])


def test_saved_activation_bytes_counts_each_storage_once_and_leaves_out_parameters():
    w = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    out, nbytes = P.saved_activation_bytes(lambda: torch.tanh(x @ w), exclude=[w])
    # matmul saves x (and w, excluded); tanh saves its output
    assert nbytes == x.numel() * 8 + out.numel() * 8


def test_shards_refuse_uneven_splits():
    with pytest.raises(ValueError, match="does not split evenly"):
        P.shard_rows(torch.zeros(5, 2), 0, 2)
    with pytest.raises(ValueError, match="does not split evenly"):
        P.sequence_shard(torch.zeros(5, 2), 0, 2)


@pytest.mark.slow
@pytest.mark.parametrize("sp", [False, True])
def test_parallelize_module_equals_one_process_with_the_same_calls(sp, block_data):
    x, g, ref = block_data
    out = collnb.launch(_marked(P.dtensor_mlp_step), 4, args=(x, g), kwargs=dict(sequence_parallel=sp),
                        record_calls=True, collective_timeout=60)
    assert P.dtensor_deviation([o for o, _ in out], ref, sp) <= TOL
    phases = P.split(out.calls[0], out[0][1])
    assert _names(phases["setup"]) == ["scatter", "scatter", "scatter", "broadcast"]   # parallelize_module
    if sp:
        assert _names(phases["forward"]) == ["all_gather", "reduce_scatter"]
        assert _names(phases["backward"]) == ["all_gather", "reduce_scatter"]
        assert out[0][0]["placements"]["norm.weight"] == "P(sum)"
    else:
        assert _names(phases["forward"]) == ["all_reduce"] and _names(phases["backward"]) == ["all_reduce"]
        assert out[0][0]["placements"]["fc1.weight"] == "S(0)" and out[0][0]["placements"]["fc2.weight"] == "S(1)"
    assert all(c.source == "DTensor" for k in ("forward", "backward") for c in phases[k])


def test_assemble_follows_the_placement():
    a, b = torch.ones(2, 2), 2 * torch.ones(2, 2)
    assert P.assemble([a, b], "S(0)").shape == (4, 2)
    assert P.assemble([a, b], "Shard(dim=1)").shape == (2, 4)
    assert torch.equal(P.assemble([a, b], "P(sum)"), 3 * torch.ones(2, 2))
    assert torch.equal(P.assemble([a, a], "R"), a)
    with pytest.raises(ValueError, match="differs between ranks"):
        P.assemble([a, b], "R")
    with pytest.raises(ValueError, match="unknown placement"):
        P.assemble([a, b], "Q")


# ----------------------------------------------------------------------------------------------
# DDP, ZeRO-1/2, FSDP2

WIDTHS = (8, 12, 16, 4)


@pytest.fixture(scope="module")
def batch():
    gen = torch.Generator().manual_seed(3)
    return torch.randn(8, 8, generator=gen, dtype=torch.float64), torch.randn(8, 4, generator=gen, dtype=torch.float64)


def _params(out):
    return out["params"] if isinstance(out, dict) else out


@pytest.mark.slow
@pytest.mark.parametrize("ws", [2, 4])
def test_ddp_zero_fsdp_equal_one_process_and_fsdp_sends_one_and_a_half_times_ddp(ws, batch):
    x, y = batch
    ref = P.sgd_reference(x, y, steps=3, widths=WIDTHS)
    wire, kinds = {}, {}
    for name, trainer, kw, debug in (("ddp", P.ddp_train, {}, False), ("zero", P.zero_train, {}, True),
                                     ("fsdp", P.fsdp_train, {}, True),
                                     ("fsdp-keep", P.fsdp_train, {"reshard_after_forward": False}, True)):
        out = collnb.launch(_marked(trainer), ws, args=(x, y), kwargs=dict(steps=3, **kw), record_calls=True,
                            debug=debug, collective_timeout=60)
        for r in range(ws):
            assert P.max_difference(_params(out[r][0]), ref) <= TOL, name
        last = P.by_step(out.calls[0], out[0][1])[-1]
        wire[name] = sum(P.wire_bytes(c) for c in last)
        kinds[name] = sorted(_names(last))
    psi = sum(p.numel() for p in P.layered_model(WIDTHS).parameters()) * 8
    assert wire["ddp"] == pytest.approx(2 * (ws - 1) / ws * psi)
    assert wire["zero"] == pytest.approx(wire["ddp"])
    assert wire["fsdp"] / wire["ddp"] == pytest.approx(1.5)
    assert wire["fsdp-keep"] == pytest.approx(wire["ddp"])
    assert kinds["ddp"] == ["all_reduce"]
    assert kinds["fsdp"] == ["all_gather"] * 6 + ["reduce_scatter"] * 3
    assert kinds["fsdp-keep"] == ["all_gather"] * 3 + ["reduce_scatter"] * 3


def _prefetch_next(blocks):
    for a, b in zip(blocks, blocks[1:]):
        a.set_modules_to_forward_prefetch([b])


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [None, _prefetch_next])
def test_fsdp_order_of_calls_block_by_block(prefetch, batch):
    """The recorded order (FSDP2 in torch 2.13): default backward prefetch of one block; explicit
    forward prefetch issues each block's all_gather before the previous block's compute."""
    x, y = batch
    out = collnb.launch(_marked(P.fsdp_train), 2, args=(x, y), kwargs=dict(prefetch=prefetch), record_calls=True,
                        collective_timeout=60)
    order = [P.label(e, WIDTHS, 2) for e in P.interleave(out.calls[0], out[0][1])]
    order = order[:order.index("gather")]
    forward = (["step 1", "all_gather 0", "forward 0", "all_gather 1", "forward 1", "all_gather 2", "forward 2"]
               if prefetch is None else
               ["step 1", "all_gather 0", "all_gather 1", "forward 0", "all_gather 2", "forward 1", "forward 2"])
    backward = ["all_gather 2", "all_gather 1", "backward 2", "reduce_scatter 2", "all_gather 0", "backward 1",
                "reduce_scatter 1", "backward 0", "reduce_scatter 0", "optimizer"]
    assert order == forward + backward
    text = P.order_text(out.calls[0], out[0][1], WIDTHS, 2)
    assert text.splitlines()[1].split() == ["all_gather", "block", "0", "864", "B"]


def test_fsdp_block_bytes_pad_dim_zero_to_the_world_size():
    assert P.fsdp_block_bytes((8, 12, 16, 4), 2) == [(12 * 8 + 12) * 8, (16 * 12 + 16) * 8, (4 * 16 + 4) * 8]
    assert P.fsdp_block_bytes((2, 5), 4) == [(8 * 2 + 8) * 8]          # 5 rows padded to 8
    rec = CallRecord("all_gather_single", None, 2, ((108,), (54,)), ("float64",) * 2, nbytes=864)
    assert P.block_of(rec, (8, 12, 16, 4), 2) == 0 and P.label(rec, (8, 12, 16, 4), 2) == "all_gather 0"
    with pytest.raises(ValueError, match="at least two widths"):
        P.layered_model((4,))


# ----------------------------------------------------------------------------------------------
# Ring attention


def _ring(rank, world_size, q, k, v, causal, layout):
    where = P.LAYOUTS[layout](len(q), world_size)[rank]
    return P.ring_attention(rank, world_size, q[where], k[where], v[where], causal=causal, layout=layout)


@pytest.mark.parametrize("ws", [2, 3, 4])
@pytest.mark.parametrize("causal,layout", [(False, "plain"), (True, "plain"), (True, "zigzag")])
def test_ring_attention_equals_full_attention_and_passes_one_block_per_send(ws, causal, layout):
    gen = torch.Generator().manual_seed(ws)
    s, d = 4 * ws, 3
    q, k, v = (torch.randn(s, d, generator=gen, dtype=torch.float64) for _ in range(3))
    out = collnb.launch(_ring, ws, args=(q, k, v, causal, layout), record_calls=True)
    whole = P.gather_sequence([o for o, _ in out], layout)
    assert float((whole - P.attention(q, k, v, causal)).abs().max()) <= TOL
    assert [w for _, w in out] == P.work_matrix(s, ws, layout, causal)
    for r in range(ws):
        recs = out.calls[r]
        one_round = [("isend", (r + 1) % ws)] * 2 + [("irecv", (r - 1) % ws)] * 2     # K and V
        assert [(c.op, c.peer) for c in recs] == one_round * (ws - 1)
        assert all(c.nbytes == (s // ws) * d * 8 for c in recs)


def test_zigzag_balances_causal_work_and_plain_is_a_staircase():
    for ws in range(2, 9):
        s = 4 * ws
        plain, zigzag = P.work_matrix(s, ws, "plain"), P.work_matrix(s, ws, "zigzag")
        assert len({sum(row) for row in zigzag}) == 1                    # every rank the same
        assert all(len(set(col)) == 1 for col in zip(*zigzag))          # and in every round
        totals = [sum(row) for row in plain]
        assert totals == sorted(totals) and totals[0] < totals[-1]
        assert sum(map(sum, plain)) == sum(map(sum, zigzag)) == s * (s + 1) // 2
    assert [p.tolist() for p in P.zigzag_layout(8, 2)] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    with pytest.raises(ValueError, match="multiple of 2 x world size"):
        P.zigzag_layout(6, 2)
    with pytest.raises(ValueError, match="unknown layout"):
        P.work_matrix(8, 2, "spiral")


def test_online_softmax_block_by_block_equals_softmax_and_handles_masked_rows():
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(5, 12, generator=gen, dtype=torch.float64) * 4
    v = torch.randn(12, 3, generator=gen, dtype=torch.float64)
    scores[1, :6] = float("-inf")                       # a row with nothing in its first block
    o, m, l = torch.zeros(5, 3, dtype=torch.float64), torch.full((5,), float("-inf"), dtype=torch.float64), \
        torch.zeros(5, dtype=torch.float64)
    for cols in (slice(0, 6), slice(6, 12)):
        o, m, l = P.online_softmax_update(o, m, l, scores[:, cols], v[cols])
        assert not torch.isnan(o).any()
    assert float((o / l[:, None] - torch.softmax(scores, -1) @ v).abs().max()) <= TOL


# ----------------------------------------------------------------------------------------------
# Expert parallelism with a capacity


def _moe(rank, world_size, tokens, routes, capacity):
    return P.moe_capacity_layer(rank, world_size, tokens[rank], routes[rank], capacity)


@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0])
def test_capacity_layer_equals_one_process_with_two_even_all_to_alls(factor):
    ws, n, d = 4, 12, 3
    gen = torch.Generator().manual_seed(2)
    tokens = [torch.randn(n, d, generator=gen, dtype=torch.float64) for _ in range(ws)]
    routes = [P.skewed_routes(n, ws, 0.8, gen) for _ in range(ws)]
    cap = P.expert_capacity(n, ws, factor)
    out = collnb.launch(_moe, ws, args=(tokens, routes, cap), record_calls=True)
    want = P.moe_reference(tokens, routes, cap)
    for r in range(ws):
        assert float((out[r]["out"] - want[r]).abs().max()) == 0.0
        assert out[r]["kept"] == [min(c, cap) for c in out[r]["routed"]]
        dropped = (out[r]["out"] == 0).all(1).sum()
        assert dropped == sum(out[r]["routed"]) - sum(out[r]["kept"])
        assert [(c.name, c.nbytes) for c in out.calls[r]] == [("all_to_all_single", ws * cap * d * 8)] * 2


def test_capacity_and_slots():
    assert P.expert_capacity(16, 4, 1.0) == 4 and P.expert_capacity(16, 4, 1.25) == 5 and P.expert_capacity(10, 4, 1) == 3
    route = torch.tensor([0, 1, 0, 0, 2, 1])
    assert P.capacity_slots(route, 3, 2).tolist() == [0, 0, 1, -1, 0, 1]
    with pytest.raises(ValueError):
        P.expert_capacity(4, 0, 1.0)


# ----------------------------------------------------------------------------------------------
# Accounting and the matrix picture


def _rec(name, nbytes, size=4, op=None):
    return CallRecord(name, None, size, ((1,),), ("float32",), op=op, nbytes=nbytes)


def test_split_by_step_interleave_and_wire_bytes():
    recs = [_rec("broadcast", 8), _rec("all_reduce", 100), _rec("all_gather_single", 40),
            _rec("batch_isend_irecv", 16, op="isend"), _rec("batch_isend_irecv", 16, op="irecv")]
    marks = [("step 1", 1), ("forward", 1), ("backward", 2), ("step 2", 3), ("gather", 5)]
    assert {k: len(v) for k, v in P.split(recs, marks).items()} == {"setup": 1, "step 1": 0, "forward": 1,
                                                                     "backward": 1, "step 2": 2, "gather": 0}
    assert [[r.name for r in s] for s in P.by_step(recs, marks)] == [["all_reduce", "all_gather_single"],
                                                                     ["batch_isend_irecv"] * 2]
    assert [e if isinstance(e, str) else e.name for e in P.interleave(recs[:2], marks[:2])] == \
        ["broadcast", "step 1", "forward", "all_reduce"]
    assert [P.wire_bytes(r) for r in recs] == [8, 150, 30, 16, 0]
    rows = P.summarize(recs[1:3], steps=2)
    assert rows[0] == P.CallSummary("all_reduce", 0.5, 50, 75)
    assert "all_gather" in P.summary_table({"step": recs[1:3]})
    english = P.summary_table({"step": recs[1:3]}).splitlines()
    assert english[0] == f"{'phase':<12}{'kind':<16}{'count':>6}{'bytes':>12}{'on the wire':>14}"
    collnb.set_language("zh")
    try:  # the header's words in Chinese, padded by display columns so the rows still line up
        chinese = P.summary_table({"step": recs[1:3]}).splitlines()
    finally:
        collnb.set_language("en")
    assert chinese[0] == "阶段" + " " * 8 + "类型" + " " * 12 + "  次数" + " " * 8 + "字节" + " " * 6 + "线上字节"
    assert chinese[1:] == english[1:]
    assert P.phase_range([marks], "forward") == {"start": [1], "stop": [2]}
    with pytest.raises(KeyError):
        P.phase_range([marks], "optimizer")
    with pytest.raises(ValueError):
        P.summarize(recs, steps=0)


def test_phases_need_the_recorder():
    def no_recorder(rank, world_size):
        try:
            P.Phases()
        except RuntimeError as err:
            return str(err)

    assert "record_calls=True" in collnb.launch(no_recorder, 1)[0]


def test_matrix_image_is_readable():
    from PIL import Image

    from collnb.views import MatrixPanel, matrix_image

    work = P.work_matrix(16, 4, "plain")
    pic = matrix_image([MatrixPanel("plain", work, footer="a footer long enough to wrap over two lines at least"),
                        MatrixPanel("zigzag", P.work_matrix(16, 4, "zigzag"), framed={(0, 0)})],
                       column_label="round", title="t", framed_note="framed", note="n")
    img = Image.open(io.BytesIO(pic._repr_png_()))
    assert img.size[0] <= 1000 and img.size[1] > 200
    wide = matrix_image([MatrixPanel(str(i), [[1] * 8] * 8) for i in range(4)])
    assert wide.pixels.shape[1] <= 1000                      # panels go below each other
    with pytest.raises(ValueError, match="same non-empty 2-D shape"):
        matrix_image([MatrixPanel("a", [[1, 2]]), MatrixPanel("b", [[1], [2]])])


def test_phase_labels_are_shown_in_the_language_spoken_and_stay_names_in_the_marks():
    """Issue 34: the Chinese edition's tables and FSDP2 order read "forward", "setup", "▸ step 1"."""
    from collnb.labs.parallel.accounting import phase_label
    collnb.set_language("en")
    try:
        assert [phase_label(x) for x in ("setup", "forward 2", "step 1", "zig-zag")] == \
            ["setup", "forward 2", "step 1", "zig-zag"]
        collnb.set_language("zh")
        assert [phase_label(x) for x in ("setup", "forward 2", "step 1", "backward", "zig-zag", "forward x")] == \
            ["准备", "前向 2", "第 1 步", "反向", "zig-zag", "forward x"]
    finally:
        collnb.set_language(None)
