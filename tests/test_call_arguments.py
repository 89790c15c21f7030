"""An argument a primitive does not use is refused, by kind, from the spec table: the row says which
of ``dtype``, ``op``, ``root``, ``chunk_size``, ``inputs`` a primitive uses
(:attr:`PrimitiveSpec.arguments`), and ``collnb.run``, ``run_batch``, ``script_text`` and
``run_algorithm`` refuse every other one before a rank starts, its default value too. Every case
is made from :data:`SPECS`, so a new row is covered without a new test."""
import pytest

import collnb
from collnb import ranks
from collnb.collectives import CALL_ARGUMENTS, SPECS, run, run_batch
from collnb.labs.script import script_text

#: Per argument: its default given explicitly, and another value.
VALUES = {"dtype": ("float32", "int32"), "op": ("sum", "max"), "root": (0, 1), "chunk_size": (1, 3),
          "inputs": (None, lambda rank, chunk: 7)}

#: Every (primitive, argument it does not use) of the spec table.
UNUSED = [(name, arg) for name, spec in SPECS.items() for arg in CALL_ARGUMENTS if arg not in spec.arguments]
#: ... with each value of VALUES (``inputs``' default is ``None``, which is not giving it).
UNUSED_GIVEN = [(name, arg, value) for name, arg in UNUSED for value in VALUES[arg] if value is not None]


def test_the_rows_say_which_arguments_each_primitive_uses():
    assert SPECS["barrier"].arguments == ()
    assert SPECS["all_gather_object"].arguments == ("inputs",)
    assert SPECS["broadcast_object_list"].arguments == ("root", "inputs")
    assert SPECS["all_reduce"].arguments == ("dtype", "op", "chunk_size", "inputs")
    assert SPECS["broadcast"].arguments == ("dtype", "root", "chunk_size", "inputs")
    assert SPECS["reduce"].arguments == CALL_ARGUMENTS
    assert SPECS["send_recv"].arguments == ("dtype", "chunk_size", "inputs")
    for spec in SPECS.values():
        assert ("op" in spec.arguments) == spec.reduces, spec.name
        assert ("root" in spec.arguments) == spec.rooted, spec.name
        assert ("dtype" in spec.arguments) == ("chunk_size" in spec.arguments) == (spec.kind == "tensor"), spec.name
    # every kind leaves some argument unused, so the refusal below is tried for each kind
    assert {SPECS[name].kind for name, _ in UNUSED} == {"tensor", "object", "time"}


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if a refused request reached the ranks."""
    def launched(*args, **kwargs):
        raise AssertionError("a refused request was launched")
    monkeypatch.setattr(ranks, "launch_planned", launched)


@pytest.mark.parametrize(("primitive", "argument", "value"), UNUSED_GIVEN,
                         ids=[f"{p}-{a}={v!r}" if not callable(v) else f"{p}-{a}=f" for p, a, v in UNUSED_GIVEN])
def test_run_refuses_an_argument_the_primitive_does_not_use(no_launch, primitive, argument, value):
    uses = SPECS[primitive].arguments
    with pytest.raises(ValueError) as err:
        run(primitive, world_size=2, **{argument: value})
    msg = str(err.value)
    assert msg.startswith(f"collnb.run: {primitive} does not use {argument} ("), msg
    assert msg.endswith(f"Leave {argument} out"), msg
    if uses:
        assert f"the arguments {primitive} uses: {', '.join(uses)}." in msg
    else:
        assert f"{primitive} takes no argument here but its world size and backend." in msg
    with pytest.raises(ValueError, match=f"^collnb.run_batch: {primitive} does not use {argument} "):
        run_batch([{"primitive": "all_reduce"}, {"primitive": primitive, argument: value}], world_size=2)


def test_the_refusal_says_why_in_the_learners_words(no_launch):
    with pytest.raises(ValueError, match=r"barrier does not use chunk_size \(it moves no data: it measures when"):
        run("barrier", world_size=2, chunk_size=3)
    with pytest.raises(ValueError, match=r"all_gather_object does not use dtype \(it sends pickled Python objects"):
        run("all_gather_object", world_size=2, dtype="float32")
    with pytest.raises(ValueError, match=r"all_reduce does not use root \(it has no src/dst rank"):
        run("all_reduce", world_size=2, root=0)
    with pytest.raises(ValueError, match=r"broadcast does not use op \(it does not combine values"):
        run("broadcast", world_size=2, op="sum")


def test_the_refusal_is_translated(no_launch):
    try:
        collnb.set_language("zh_CN")
        with pytest.raises(ValueError) as err:
            run("barrier", world_size=2, chunk_size=3)
    finally:
        collnb.set_language("en")
    msg = str(err.value)
    assert "barrier" in msg and "chunk_size" in msg and "does not use" not in msg, msg


def test_not_given_is_none(no_launch):
    """``None`` is not giving an argument: a caller can pass every field and leave the unused ones None."""
    with pytest.raises(AssertionError, match="launched"):  # checked, then (here) refused by the fixture
        run("barrier", world_size=2, dtype=None, op=None, root=None, chunk_size=None, inputs=None)


@pytest.mark.parametrize("primitive", [name for name, spec in SPECS.items() if not (spec.reduces and spec.rooted)])
def test_script_text_refuses_op_and_root_where_unused(primitive):
    spec = SPECS[primitive]
    if not spec.reduces:
        with pytest.raises(ValueError, match=f"^script_text: {primitive} does not use op "):
            script_text(primitive, op="sum")
    if not spec.rooted:
        with pytest.raises(ValueError, match=f"^script_text: {primitive} does not use root "):
            script_text(primitive, root=0)
    script_text(primitive)  # nothing given: the defaults


def test_run_algorithm_refuses_op_and_root_where_unused(no_launch):
    with pytest.raises(ValueError, match=r"^collnb.run_algorithm: all_reduce does not use root .*"
                                         r"the arguments all_reduce uses: dtype, op, chunk_size, inputs\."):
        collnb.run_algorithm("all_reduce", "ring", 4, root=0)
    with pytest.raises(ValueError, match="^collnb.run_algorithm: all_gather does not use op "):
        collnb.run_algorithm("all_gather", "ring", 4, op="sum")


def test_the_cli_refuses_an_option_the_primitive_does_not_use(capsys):
    from collnb.cli import main
    from collnb.cli.common import EXIT_USAGE
    assert main(["run", "barrier", "-n", "2", "--chunk-size", "3"]) == EXIT_USAGE
    assert "barrier does not use chunk_size" in capsys.readouterr().err
    assert main(["script", "all_reduce", "--root", "1", "-o", "unused.py"]) == EXIT_USAGE
    assert "all_reduce does not use root" in capsys.readouterr().err


def test_every_used_argument_still_runs():
    """Every primitive with every argument it uses given (none at its default), in one launch: each
    result is right and shows the values given."""
    ws = 3
    given = {"dtype": "float64", "op": "max", "root": 2, "chunk_size": 2, "inputs": lambda rank, chunk: 5 * rank - chunk}
    configs = [{"primitive": name, **{a: given[a] for a in spec.arguments}} for name, spec in SPECS.items()]
    results = run_batch(configs, world_size=ws)
    for cfg, res in zip(configs, results):
        spec = SPECS[cfg["primitive"]]
        assert res.ok, res.summary()
        assert res.root == (2 if spec.rooted else None)
        assert res.op == ("max" if spec.reduces else None)
        if spec.kind == "tensor":
            assert res.chunk_size == 2 and str(res.dtype) == "torch.float64"
            r = 1  # rank 1's input chunks hold 5 - c, chunk_size times each
            held = [5 - c for c in range(spec.n_in(ws, r, 2)) for _ in range(2)]
            assert res.before[r].tolist() == held, (spec.name, res.before[r])


def test_the_explorer_gives_a_run_only_what_its_primitive_uses():
    """The explorer's controls keep every value (root 1, op max, chunk size 2, int32) while the
    primitive changes; each run is given only what that primitive uses, so each picture comes."""
    ex = collnb.explore(["reduce", "barrier", "all_gather_object", "all_reduce", "broadcast_object_list"],
                        world_size=2, dtype="int32", op="max", root=1, chunk_size=2)
    try:
        seen = {}
        for name in ("reduce", "barrier", "all_gather_object", "all_reduce", "broadcast_object_list"):
            ex.set(primitive=name)
            ex.wait()
            res = ex.last_result
            assert res is not None and res.primitive == name and res.ok, (name, ex.error if hasattr(ex, "error") else "")
            seen[name] = (res.root, res.op, res.chunk_size)
        assert seen == {"reduce": (1, "max", 2), "barrier": (None, None, 1), "all_gather_object": (None, None, 1),
                        "all_reduce": (None, "max", 2), "broadcast_object_list": (1, None, 1)}
    finally:
        ex.close()


@pytest.mark.parametrize("kwargs, words", [
    (dict(world_size=0), "world_size must be an int from 1 to 16; got 0"),
    (dict(world_size=17), "world_size must be an int from 1 to 16; got 17"),
    (dict(primitive="allreduce"), "unknown primitive 'allreduce'"),
    (dict(primitive="broadcast", root=5), "root"),
    (dict(primitive="barrier", chunk_size=3), "barrier does not use chunk_size"),
])
def test_a_refused_argument_is_shown_without_collnbs_frames(kwargs, words):
    """A new learner's ``collnb.run('all_reduce', world_size=0)`` showed its clear last line under two
    screens of checks inside collnb (request.py, vocabulary.py, with their source). The refusal's
    traceback now ends at the entry point: the learner's call, run, and where run raised it."""
    import traceback

    import collnb
    call = {"primitive": "all_reduce", "world_size": 4, **kwargs}
    with pytest.raises((ValueError, TypeError)) as err:
        collnb.run(call.pop("primitive"), **call)
    assert words in str(err.value)
    frames = [f.name for f in traceback.extract_tb(err.value.__traceback__)]
    assert frames[0] == "test_a_refused_argument_is_shown_without_collnbs_frames" and len(frames) <= 3, frames
    assert err.value.__suppress_context__ and err.value.__cause__ is None  # no "During handling of ..." above it
