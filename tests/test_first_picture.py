"""The first picture after an install does not wait for the backend probe (issue 33, item 5):
``collnb.run`` checks what is known without probing, runs, and probes only when a rank fails, to
give the same refusal a known answer gives before the launch. Speed itself is measured by
``benchmarks/first_picture.py`` (ratios printed), never asserted here."""
from __future__ import annotations

import traceback

import pytest
import torch

import collnb
import collnb.collectives as P
from collnb.collectives import support as S
from collnb.ranks import RankError


@pytest.fixture
def nothing_known(monkeypatch, tmp_path):
    """A fresh install: no answer in this process, an empty cache folder; counts the probes."""
    monkeypatch.setattr(S, "_support_cache", {})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    probes = []
    real = S._probe

    def counted(plan):
        probes.append(plan.setup.backend)
        return real(plan)

    monkeypatch.setattr(S, "_probe", counted)
    return probes


def test_the_first_run_after_an_install_runs_without_the_probe(nothing_known):
    r = collnb.run("all_reduce", world_size=4)
    assert r.ok and [t.tolist() for t in r.after] == [[60.0, 64.0, 68.0, 72.0]] * 4
    assert nothing_known == [] and not (S._support_cache or S.known_support("gloo"))


def test_a_refusal_after_an_install_probes_once_and_says_what_a_known_answer_says(nothing_known):
    with pytest.raises(ValueError) as err:
        collnb.run("all_reduce", world_size=2, dtype=torch.int64, op="avg")
    assert nothing_known == ["gloo"]
    msg = str(err.value)
    for words in ("AVG", "int64", "detected on real ranks", "Valid ops for int64: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR"):
        assert words in msg, (words, msg)
    # as short as a known refusal: no rank's traceback above it (a notebook showed three screens), and no
    # frame of collnb's checks (the learner's call is where the traceback ends)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert [f.name for f in traceback.extract_tb(err.value.__traceback__)][-2:] == ["run", "_run_planned"]
    # now known (in memory and on disk): the next refusal comes before any launch, with the same words
    with pytest.raises(ValueError) as again:
        collnb.run("all_reduce", world_size=2, dtype=torch.int64, op="avg")
    assert str(again.value) == msg and again.value.__cause__ is None and nothing_known == ["gloo"]
    assert S._load_disk("gloo") is not None


def test_a_rank_error_the_backend_does_not_explain_is_raised_as_it_is(nothing_known, monkeypatch):
    """A rank that fails for another reason: the probe finds the combination accepted, the rank's error stands."""
    def failing(*args, **kwargs):
        raise RankError("rank 1: RuntimeError: something else", 1, "RuntimeError", "", {0: "ok", 1: "raised"})

    monkeypatch.setattr(collnb.ranks, "launch_planned", failing)  # what collnb.run launches with
    fake = S.BackendSupport("gloo", torch.__version__, 2, {("all_reduce", "float32", "sum"): None})
    monkeypatch.setattr(S, "_probe", lambda plan: nothing_known.append(plan.setup.backend) or fake)
    with pytest.raises(RankError, match="something else"):
        P.run("all_reduce", world_size=2)
    assert nothing_known == ["gloo"]


def test_check_support_false_never_probes(nothing_known):
    with pytest.raises(RankError, match="can.t be cast"):
        collnb.run("all_reduce", world_size=2, dtype=torch.int64, op="avg", check_support=False)
    assert nothing_known == []


def test_the_first_picture_imports_no_widget_library(tmp_path):
    """collnb.run's picture needs the heatmap only: ipywidgets and the explorers load when first asked for."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, collnb\nr = collnb.run('all_reduce', world_size=2)\nassert r._repr_mimebundle_()['image/png']\n"
            "print(sorted(m for m in ('ipywidgets', 'collnb.views.explorer', 'collnb.views.binder', 'matplotlib') "
            "if m in sys.modules))\ncollnb.explore\nprint('ipywidgets' in sys.modules)\ncollnb.shutdown()\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=root,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"]
