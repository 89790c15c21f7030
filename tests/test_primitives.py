"""collnb.collectives: every primitive x world size x valid dtype/op on real Gloo ranks, against
the reference and against an independent plain-Python oracle; refusals; run-time detection."""

import math

import pytest
import torch

import collnb
from collnb.ranks.local.rankset import LocalRanks
import collnb.collectives as P
from collnb.collectives import display, rank_calls

WORLD_SIZES = (1, 2, 3, 4, 5, 8)


@pytest.fixture(scope="module")
def support():
    return P.backend_support("gloo")


def _all_configs(support, ws):
    """Every primitive x every dtype the probe accepted x every accepted op, roots spread out; each
    config gives only the arguments its primitive uses (collnb.run refuses the others)."""
    cfgs = []
    i = 0
    for name, spec in P.SPECS.items():
        if spec.kind != "tensor":
            cfgs.append(dict(primitive=name, **({"root": ws - 1} if spec.rooted else {})))
            continue
        for d in support.dtypes(name):
            ops = support.ops(name, d) if spec.reduces else (None,)
            for o in ops:
                cfg = dict(primitive=name, dtype=d)
                if spec.reduces:
                    cfg["op"] = o
                if spec.rooted:
                    cfg["root"] = (i * 7 + 3) % ws
                i += 1
                cfgs.append(cfg)
    return cfgs


def _wrap(v, dtype):
    """Plain-Python value of an integer ``v`` stored in ``dtype`` (two's complement wrap)."""
    if dtype == torch.bool:
        return v != 0
    if dtype.is_floating_point or dtype.is_complex:
        return None  # not used for floats
    bits = torch.iinfo(dtype).bits
    signed = torch.iinfo(dtype).min < 0
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _oracle(name, ws, root, op, dtype):
    """Independent expectation for int64/int32/int8/uint8/bool runs in plain Python ints: per rank
    a list of chunk values, or None where the output is undefined."""
    base = 10 if ws <= 10 else 100

    def x(r, c):
        return _wrap(base * r + c, dtype)

    def red(vals):
        if dtype == torch.bool:
            vals = [bool(v) for v in vals]
            f = {"sum": any, "max": any, "bor": any, "product": all, "min": all, "band": all,
                 "bxor": lambda vs: sum(vs) % 2 == 1}[op]
            return f(vals)
        acc = vals[0]
        for v in vals[1:]:
            acc = {"sum": acc + v, "product": acc * v, "min": min(acc, v), "max": max(acc, v),
                   "band": acc & v, "bor": acc | v, "bxor": acc ^ v}[op]
        return _wrap(acc, dtype)

    out = []
    for r in range(ws):
        if name == "broadcast":
            out.append([x(root, c) for c in range(ws)])
        elif name == "scatter":
            out.append([x(root, r)])
        elif name == "gather":
            out.append([x(k, 0) for k in range(ws)] if r == root else None)
        elif name == "reduce":
            out.append([red([x(s, c) for s in range(ws)]) for c in range(ws)] if r == root else None)
        elif name in ("all_gather", "all_gather_into_tensor", "all_gather_single"):
            out.append([x(k, 0) for k in range(ws)])
        elif name in ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"):
            out.append([red([x(s, r) for s in range(ws)])])
        elif name == "all_reduce":
            out.append([red([x(s, c) for s in range(ws)]) for c in range(ws)])
        elif name in ("all_to_all", "all_to_all_single"):
            out.append([x(k, r) for k in range(ws)])
        elif name == "send_recv":
            out.append([x((r - 1) % ws, c) for c in range(ws)])
        else:
            raise AssertionError(name)
    return out


@pytest.mark.parametrize("ws", [pytest.param(ws, marks=() if ws == 3 else pytest.mark.slow) for ws in WORLD_SIZES])
def test_every_primitive_dtype_op_matches_reference(ws, support):
    cfgs = _all_configs(support, ws)
    assert len(cfgs) > 300  # 19 primitives x ~11 dtypes x ops: the probe found the Gloo matrix
    results = P.run_batch(cfgs, ws)  # one launch for the whole world size
    failed = [(c, r.summary()) for c, r in zip(cfgs, results) if not r.ok]
    assert not failed, f"{len(failed)} cases differ; first: {failed[0]}"
    n_oracle = 0
    for cfg, res in zip(cfgs, results):
        spec = P.SPECS[cfg["primitive"]]
        assert res.world_size == ws and res.primitive == cfg["primitive"]
        assert res.defined == [(r == cfg.get("root", 0)) if cfg["primitive"] in ("reduce", "gather", "gather_object")
                               else True for r in range(ws)]
        if spec.kind == "tensor":
            dt = getattr(torch, cfg["dtype"])
            # before is the teaching input, cast to the dtype
            for r in range(ws):
                want = P.teaching_inputs(cfg["primitive"], ws, cfg.get("root", 0))[r]
                assert res.before[r].dtype == dt
                assert torch.equal(res.before[r], P.make_tensor(want, 1, dt)), (cfg, r)
            if cfg["dtype"] in ("int64", "int32", "int8", "uint8", "bool"):
                oracle = _oracle(cfg["primitive"], ws, cfg.get("root", 0), cfg.get("op", "sum"), dt)
                for r in range(ws):
                    if oracle[r] is None:
                        continue
                    got = res.after[r]
                    got = got.view(torch.uint8).ne(0).tolist() if got.dtype == torch.bool else got.tolist()
                    assert got == oracle[r], (cfg, r, got, oracle[r])
                    n_oracle += 1
        elif spec.kind == "object":
            for r in range(ws):
                if res.defined[r]:
                    assert all(isinstance(o, str) and o.startswith("r") for o in res.after[r])
    assert n_oracle > 100


def test_values_that_could_be_wrong():
    """Hand-computed results of a few runs (one launch)."""
    cfgs = [dict(primitive="all_reduce"),
            dict(primitive="reduce", root=2, dtype="int64", op="max"),
            dict(primitive="all_reduce", dtype="int8"),
            dict(primitive="all_reduce", dtype="int8", inputs=lambda r, c: 100),
            dict(primitive="all_reduce", dtype="float16", inputs=lambda r, c: 60000),
            dict(primitive="all_reduce", dtype="bfloat16", inputs=[[256, 256, 256, 256], [1, 1, 1, 1],
                                                                    [0, 0, 0, 0], [0, 0, 0, 0]]),
            dict(primitive="all_reduce", dtype="float32", op="avg"),
            dict(primitive="scatter", root=3, chunk_size=3),
            dict(primitive="send_recv", dtype="int16"),
            dict(primitive="barrier")]
    r = P.run_batch(cfgs, 4)
    assert [t.tolist() for t in r[0].after] == [[60.0, 64.0, 68.0, 72.0]] * 4
    assert r[1].after[2].tolist() == [30, 31, 32, 33] and r[1].defined == [False, False, True, False]
    assert r[2].after[0].tolist() == [60, 64, 68, 72]  # 10*(0+1+2+3)+4c fits in int8
    # dtype effects: the float64 reference shows what the dtype did
    assert r[3].after[0].tolist() == [-112] * 4 and r[3].ok  # 400 wraps to -112 in int8
    assert r[3].expected_f64[0].tolist() == [400.0] * 4
    assert r[4].after[0].tolist() == [math.inf] * 4 and r[4].ok
    assert r[4].expected_f64[0].tolist() == [240000.0] * 4
    assert r[5].after[1].tolist() == [256.0] * 4 and r[5].expected_f64[1].tolist() == [257.0] * 4
    assert r[6].after[3].tolist() == [15.0, 16.0, 17.0, 18.0]
    assert [t.tolist() for t in r[7].after] == [[30.0] * 3, [31.0] * 3, [32.0] * 3, [33.0] * 3]
    assert r[7].before[0].numel() == 0 and r[7].before[3].numel() == 12
    assert r[8].after[0].tolist() == [30, 31, 32, 33] and r[8].dtype == torch.int16
    arrive = [float(t[0]) for t in r[9].before]
    leave = [float(t[0]) for t in r[9].after]
    assert min(leave) >= max(arrive) and r[9].ok
    assert arrive[3] - arrive[0] > 10.0  # rank 3 slept 30 ms after the first barrier


def test_mismatch_is_detected_and_located():
    res = P.run("all_gather", 3)
    assert res.ok and res.n_mismatches() == 0
    res.after[1][2] = 99.0
    assert res.check() is False
    assert res.mismatch[1] == [False, False, True] and res.mismatch[0] == [False, False, False]
    assert "✗ expected [0.0, 10.0, 20.0]" in res.summary()


def test_float_reductions_accept_other_orders():
    # float16 PRODUCT of [0, 10, 20, 30, 40]: 0 in rank order, but nan when 10*20*30*40 overflows
    # to inf first (Gloo's ring does that); both are IEEE-correct for some order.
    res = P.run("all_reduce", 5, dtype="float16", op="product")
    assert res.ok, res.summary()
    assert res.expected[0][0].item() == 0.0
    assert all(math.isinf(v) for v in res.after[0][1:].tolist())
    res.after[0][1] = 5.0  # no order gives 5
    assert not res.check()


def test_result_displays_as_png_and_text():
    import collnb.views  # noqa: F401 - registers the heatmap, as collnb.run does (this file calls collectives.run)
    res = P.run("broadcast", 2, root=1)
    bundle = res._repr_mimebundle_()
    assert bundle["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert res._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[rank 0] before: [0.0, 1.0]" in bundle["text/plain"]
    assert "[rank 0] after : [10.0, 11.0]  ✓" in bundle["text/plain"]
    assert res.title() == "broadcast · src=1 · world size 2 · float32 · gloo"


# ----------------------------------------------------------------------------------------------
# Refusals happen before any rank starts


@pytest.fixture
def no_launch(monkeypatch, support):
    def boom(*a, **k):
        raise AssertionError("launch must not be called for an invalid request")
    monkeypatch.setattr(LocalRanks, "launch", boom)  # where every launch ends, whichever way it came


PRIMITIVE_LIST = ", ".join(P.PRIMITIVES)
DTYPE_LIST = ", ".join(P.DTYPE_NAMES)


@pytest.mark.parametrize("kwargs, words", [
    (dict(primitive="all_reduce", dtype=torch.int64, op="avg"),
     ["AVG", "int64", "can't be cast", "Valid ops for int64: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR"]),
    (dict(primitive="all_reduce", dtype="float32", op="band"),
     ["BAND", "float32", "Valid ops for float32: SUM, PRODUCT, MIN, MAX, AVG"]),
    (dict(primitive="all_reduce", dtype="float8_e4m3fn"), ["float8_e4m3fn", "float32", "bfloat16"]),
    (dict(primitive="gather", dtype="complex64"), ["gather", "complex64"]),
    (dict(primitive="reduce", root=4), ["root must be a rank, an int from 0 to 3 (world size 4); got 4"]),
    (dict(primitive="reduce", root=-1), ["root must be a rank, an int from 0 to 3 (world size 4); got -1"]),
    (dict(primitive="all_reduc"), [f"unknown primitive 'all_reduc'; choose one of: {PRIMITIVE_LIST}"]),
    (dict(primitive="all_reduce", world_size=17), ["world_size must be an int from 1 to 16; got 17"]),
    (dict(primitive="all_reduce", world_size=0), ["world_size must be an int from 1 to 16; got 0"]),
    (dict(primitive="broadcast", op="max"), ["takes no reduce op", "all_reduce"]),
    (dict(primitive="all_reduce", op="mean"),
     ["unknown reduce op 'mean'; choose one of: sum, product, min, max, avg, band, bor, bxor"]),
    (dict(primitive="all_reduce", dtype="float128"), [f"unknown dtype 'float128'; choose one of: {DTYPE_LIST}"]),
    (dict(primitive="all_reduce", backend="mpi"), ["unknown backend 'mpi'; choose one of: gloo, nccl"]),
    (dict(primitive="all_gather", inputs=[[1], [2]]), ["inputs has 2 rows"]),
    (dict(primitive="all_gather", chunk_size=0),
     ["chunk_size must be an int from 1 to 4194304 (elements per chunk); got 0"]),
    (dict(primitive="all_gather", chunk_size=1 << 23),
     ["chunk_size must be an int from 1 to 4194304 (elements per chunk); got 8388608"]),
])
def test_invalid_requests_are_refused_before_launch(no_launch, kwargs, words):
    kwargs = dict(kwargs)
    primitive = kwargs.pop("primitive")
    with pytest.raises(ValueError) as info:
        P.run(primitive, **{"world_size": 4, **kwargs})
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_nccl_without_gpus_is_refused_with_reason(no_launch):
    with pytest.raises(RuntimeError, match="NCCL needs CUDA"):
        P.run("all_reduce", 2, backend="nccl")


# ----------------------------------------------------------------------------------------------
# Detection


def test_detection_runs_on_real_ranks_and_finds_the_truth(monkeypatch):
    monkeypatch.setenv("COLLNB_SUPPORT_CACHE", "0")  # really probe
    sup = P.backend_support("gloo", refresh=True)
    assert sup.source == "probe" and sup.world_size == 2 and sup.torch_version == torch.__version__
    # The seed page says Gloo lacks these; torch 2.13's Gloo has them.
    assert sup.supports("reduce_scatter", "float32", "sum")
    assert sup.supports("all_to_all", "float32")
    assert set(sup.ops("reduce_scatter", "int64")) == {"sum", "product", "min", "max", "band", "bor", "bxor"}
    # What Gloo refuses, with its own words.
    assert "can't be cast" in sup.error("all_reduce", "int32", "avg")
    assert "non-integral" in sup.error("all_reduce", "float32", "bxor")
    assert not sup.supports("broadcast", "float8_e5m2")
    # Support depends on the primitive: point-to-point moves bytes of any dtype, gather has no complex.
    assert sup.supports("send_recv", "int16") and not sup.supports("all_reduce", "int16", "sum")
    assert sup.supports("all_gather", "complex64") and not sup.supports("gather", "complex64")
    assert sup.supports("barrier") and sup.supports("all_gather_object")


@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(primitive=["all_reduce"]), TypeError,
     f"primitive must be a name (str), one of: {PRIMITIVE_LIST}; got ['all_reduce']"),
    (dict(primitive="all_reduce", op=3), TypeError,
     "op must be a name (str) or a torch.distributed.ReduceOp, not the number 3; "
     "choose one of: sum, product, min, max, avg, band, bor, bxor"),
    (dict(primitive="all_reduce", world_size=2.0), TypeError, "world_size must be an int from 1 to 16; got 2.0"),
    (dict(primitive="broadcast", root="0"), TypeError,
     "root must be a rank, an int from 0 to 3 (world size 4); got '0'"),
    (dict(primitive="all_reduce", chunk_size="2"), TypeError,
     "chunk_size must be an int from 1 to 4194304 (elements per chunk); got '2'"),
    (dict(primitive="all_reduce", dtype=3), TypeError,
     f"dtype must be a torch.dtype or its name (str), one of: {DTYPE_LIST}; got 3"),
    (dict(primitive="all_reduce", backend=None), TypeError,
     "backend must be a name (str), one of: gloo, nccl; got None"),
])
def test_run_refuses_lookalike_arguments(kwargs, exc, text):
    with pytest.raises(exc) as info:
        collnb.run(**kwargs)
    assert str(info.value) == text



@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(inputs=lambda r, c: 2 ** 70, dtype="int8"), ValueError, "outside int64"),
    (dict(inputs=lambda r, c: 1 + 2j, dtype="int32"), ValueError, "complex number (1+2j) but dtype int32"),
    (dict(inputs=lambda r, c: 1 + 2j, dtype="float32"), ValueError, "dtype float32 is not complex"),
    (dict(inputs=5), TypeError, "inputs must be a list of lists or a callable; got int"),
    (dict(inputs="garbage"), TypeError, "inputs must be a list of lists or a callable; got str 'garbage'"),
    (dict(inputs={0: [1]}), TypeError, "inputs must be a list of lists or a callable; got dict"),
    (dict(inputs=["abc", "def", "ghi"]), TypeError, "got inputs[0] = 'abc', a str"),
])
def test_inputs_the_ranks_could_not_build_are_refused_before_launch(kwargs, exc, text):
    pool = collnb.ranks.warm_pool()
    before = pool.pids() if pool else []
    with pytest.raises(exc) as info:
        collnb.run("all_reduce", world_size=3, **kwargs)
    assert text in str(info.value)
    after = collnb.ranks.warm_pool()
    assert (after.pids() if after else []) == before  # nothing launched, nothing replaced


def test_numpy_inputs_are_numbers():
    import numpy as np
    res = collnb.run("all_reduce", world_size=3, dtype="int32", inputs=np.arange(9).reshape(3, 3))
    assert res.ok and res.after[0].tolist() == [9, 12, 15]
    res = collnb.run("all_reduce", world_size=2, dtype="float32", inputs=lambda r, c: np.float32(1.5))
    assert res.ok and res.after[1].tolist() == [3.0, 3.0]


def test_run_batch_names_a_config_that_is_not_a_dict():
    with pytest.raises(TypeError, match="run_batch takes a list of dicts"):
        collnb.run_batch(["all_reduce"], world_size=2)


# ----------------------------------------------------------------------------------------------
# The layer's tables and registries


def test_every_spec_has_its_rank_call_and_the_derived_lists():
    assert list(rank_calls.RANK_CALLS) == list(P.SPECS) == list(P.PRIMITIVES)
    # made from each row's buffers and call; the two rows whose work is not one call are written out
    assert all(fn.__name__ == ("_r_" if P.SPECS[name].torch_call is None else "rank_") + name
               for name, fn in rank_calls.RANK_CALLS.items())
    assert [n for n, s in P.SPECS.items() if s.torch_call is None] == ["send_recv", "barrier"]
    assert P.BENCH_PRIMITIVES == ("broadcast", "scatter", "gather", "reduce", "all_gather", "reduce_scatter",
                                  "all_reduce", "all_to_all")
    assert P.ROOTED_PRIMITIVES == ("broadcast", "scatter", "gather", "reduce", "broadcast_object_list",
                                   "scatter_object_list", "gather_object")
    assert P.REDUCING_PRIMITIVES == ("reduce", "reduce_scatter", "all_reduce", "reduce_scatter_tensor",
                                     "reduce_scatter_single")
    assert P.OBJECT_PRIMITIVES == ("broadcast_object_list", "scatter_object_list", "gather_object",
                                   "all_gather_object")
    assert P.DTYPE_NAMES is collnb.vocabulary.DTYPE_NAMES and collnb.DTYPE_NAMES is P.DTYPE_NAMES
    assert P.REDUCE_OPS is collnb.vocabulary.REDUCE_OPS and P.op_hint is collnb.vocabulary.op_hint


def test_dtypes_plain_pickle_cannot_rebuild_come_back_from_the_ranks(support):
    """uint16/uint32/uint64 tensors travel through the launcher's raw-bytes pickler, no copy of it here."""
    names = [d for d in ("uint16", "uint32", "uint64") if support.supports("send_recv", d)]
    assert names, support.dtypes("send_recv")
    results = P.run_batch([dict(primitive="send_recv", dtype=d) for d in names], 3)
    for d, res in zip(names, results):
        assert res.ok and res.after[0].dtype == getattr(torch, d), res.summary()
        assert res.after[0].tolist() == [20, 21, 22] and res.before[2].tolist() == [20, 21, 22]


def test_result_without_a_registered_renderer_says_what_to_import(monkeypatch):
    res = P.run("broadcast", 2)
    monkeypatch.setattr(display, "_renderer", {})
    for draw in (res.png, res.figure, res._repr_png_):
        with pytest.raises(RuntimeError) as info:
            draw()
        assert str(info.value) == ("no renderer is registered to draw a RunResult: `import collnb.views` registers "
                                   "the heatmap (collnb.run and collnb.explore import it for you)")
    assert "[rank 1] after : [0.0, 1.0]  ✓" in res.summary()  # the text needs no renderer
    with pytest.raises(TypeError, match="png_fn must be a function fn"):
        P.register_renderer(lambda r: None, "png")


@pytest.mark.parametrize("configs, text", [
    ("all_reduce", "configs must be a list of dicts such as [{'primitive': 'all_reduce', 'dtype': 'int8'}] (for "
                   "one primitive, collnb.run('all_reduce') if it is a name); got the str 'all_reduce'"),
    ({"primitive": "all_reduce"}, "configs must be a list of dicts"),
    (None, "configs must be a list of dicts"),
])
def test_run_batch_refuses_configs_that_are_not_a_list(configs, text):
    with pytest.raises(TypeError) as info:
        collnb.run_batch(configs, world_size=2)
    assert text in str(info.value)


@pytest.mark.parametrize("where, call", [
    ("collnb.run", lambda **kw: collnb.run("all_reduce", 2, **kw)),
    ("collnb.run_batch", lambda **kw: collnb.run_batch([{"primitive": "all_reduce"}], 2, **kw)),
    ("collnb.backend_support", lambda **kw: collnb.backend_support("gloo", **kw)),  # cached: never launches
    ("collnb.explore", lambda **kw: collnb.explore("all_reduce", world_size=2, **kw)),
])
def test_an_unknown_launch_option_is_refused_by_name_before_anything_runs(where, call, support, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("launched although a launch option was unknown")
    monkeypatch.setattr(LocalRanks, "launch", no_launch)
    with pytest.raises(TypeError) as err:
        call(timeout=30, timout=30, bogus=1)
    assert str(err.value) == (f"{where}() got unknown launch options 'bogus', 'timout'; the options it passes on "
                              "to collnb.launch are timeout, collective_timeout, debug, start_method")


def test_known_launch_options_pass_the_check_unchanged():
    given = {"timeout": 30.0, "collective_timeout": 2.0, "debug": False, "start_method": None}
    assert collnb.ranks.check_launch_options(given, "collnb.run") == given
    assert collnb.ranks.check_launch_options({}, "collnb.run") == {}
    r = collnb.run("all_reduce", 2, timeout=30.0, debug=False)
    assert r.ok and [t.tolist() for t in r.after] == [[10.0, 12.0]] * 2
