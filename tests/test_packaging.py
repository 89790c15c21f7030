"""Set-up files agree with each other: environment.yml (conda/Binder) and pyproject.toml (pip)."""
import pathlib
import re
import tomllib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pin(reqs, name):
    return next(r for r in reqs if _name(r) == name)


def test_environment_yml_matches_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["lab"]

    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_names = {_name(d) for d in conda}
    pip_names = {_name(d) for d in pip if not d.startswith("-")}
    assert "python" in conda_names and any(d.startswith("python=3.11") for d in conda)

    missing = {_name(r) for r in wanted} - conda_names - pip_names
    assert not missing, f"environment.yml lacks {sorted(missing)} that pyproject.toml requires"
    # the same torch release for pip and conda users
    # the same torch release for pip (constraints.txt, what make and CI install) and conda users
    pinned = [ln.strip() for ln in (ROOT / "constraints.txt").read_text().splitlines() if ln.startswith("torch")]
    assert [_pin(pip, "torch").replace(" ", "")] == pinned
    assert any(p.replace(" ", "").startswith("-e.") for p in pip)  # collnb itself


def test_package_data_and_entry_points():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["collnb"] == "collnb.__main__:main"
    # a range for users (Colab keeps its torch); the tested pin is in constraints.txt (test_docs.py)
    assert any(d.replace(" ", "").startswith("torch>=") for d in project["project"]["dependencies"])


def test_original_examples_ship_with_the_package():
    import collnb
    from collnb import examples
    assert collnb.examples is examples and examples.__name__ == "collnb.labs.examples"
    assert examples.EXAMPLE_FILES == ("collectives_gloo_script.txt", "collectives_teaching_page.txt")
    first = examples.example_text(examples.EXAMPLE_FILES[0])
    second = examples.example_text(examples.EXAMPLE_FILES[1])
    assert "mp.spawn(method, (world_size,), nprocs=world_size, join=True)" in first
    assert "dist.all_to_all_single(output_tensor, input_tensor)" in second
    assert examples.EXAMPLE_FILES[0] in examples.example_text("README.md")
    with pytest.raises(FileNotFoundError, match="no original example '000_ae5c56c5c8b93d7c.txt'; choose one of: "
                                                "collectives_gloo_script.txt, collectives_teaching_page.txt"):
        examples.example_text("000_ae5c56c5c8b93d7c.txt")
