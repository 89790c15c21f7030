"""The tested torch range and the behaviours that differ between releases (collnb.torch_versions)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collnb import torch_versions as tv

ROOT = Path(__file__).resolve().parent.parent


def test_release_parses_every_form_torch_prints():
    assert tv.release("2.15.0+cu132") == (2, 15, 0)
    assert tv.release("2.13.0+cpu") == (2, 13, 0)
    assert tv.release("2.16.0a0+git1234") == (2, 16, 0)
    assert tv.release("2.14") == (2, 14)
    with pytest.raises(ValueError, match="not a torch version"):
        tv.release("nightly")


@pytest.mark.parametrize("version, expected", [("2.13.0", False), ("2.13.1", False), ("2.14.0", True),
                                               ("2.14.1", True), ("2.15.0+cu132", True)])
def test_shard_to_partial_applies_from_2_14(version, expected):
    assert tv.applies("dtensor_shard_to_partial", version) is expected


def test_describe_names_the_release_and_the_side():
    assert tv.describe("dtensor_shard_to_partial", "2.13.0").startswith("torch 2.13.0 (before 2.14): ")
    assert "internal use only" in tv.describe("dtensor_shard_to_partial", "2.13.0")
    line = tv.describe("dtensor_shard_to_partial", "2.15.0")
    assert line.startswith("torch 2.15.0 (2.14 and later): ") and "Shard to Partial(sum)" in line


def test_an_unknown_behaviour_names_the_known_ones():
    with pytest.raises(KeyError, match="dtensor_shard_to_partial"):
        tv.applies("no_such_thing")


@pytest.mark.parametrize("version, kind", [("2.13.0", "pinned"), ("2.15.0+cu132", "tested"), ("2.3.1", "below"),
                                           ("2.99.0", "above")])
def test_standing(version, kind):
    assert tv.standing(version)[0] == kind


def test_pyproject_states_the_tested_range():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"{tv.TESTED.requirement}"' in text, tv.TESTED.requirement


def test_constraints_pin_the_pinned_release():
    assert re.search(rf"^torch=={re.escape(tv.TESTED.pinned)}$", (ROOT / "constraints.txt").read_text(), re.M)
