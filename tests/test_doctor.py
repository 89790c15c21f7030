"""collnb doctor (issue 33, item 4): each finding from simulated facts (a full /dev/shm, a torch outside
the tested range, a stale probe, a missing package...) with its status, its words and its advice; the
saved probe's state read from real files; the report as text, HTML and in Chinese; the command line,
also where ``import torch`` fails."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from collnb import health as H
from collnb.collectives import support as S
from collnb.i18n import set_language
from collnb.torch_versions import TESTED

ROOT = Path(__file__).resolve().parent.parent
Usage = namedtuple("Usage", "total used free")
MIB = 1 << 20


@pytest.fixture(autouse=True)
def english():
    set_language("en")
    yield
    set_language(None)


# --- torch and the tested range ---------------------------------------------------------------------

def test_the_pinned_torch_is_ok():
    (f,) = H.check_torch("2.13.0+cpu", None)
    assert (f.key, f.status, f.advice) == ("torch", "ok", "")
    assert f.value == ("torch 2.13.0+cpu is the release collnb pins and tests in full "
                       "(CPU build; tested: 2.13.0 (oldest) to 2.15.0 (newest), 2.13.0 pinned)")


def test_the_newest_tested_torch_is_ok_and_its_cuda_build_named():
    (f,) = H.check_torch("2.15.0+cu132", "13.2")
    assert f.status == "ok" and f.value.startswith("torch 2.15.0+cu132 is tested (the fast tests and every notebook) "
                                                   "(CUDA 13.2 build;")


def test_a_torch_inside_the_range_but_untested_is_a_note():
    (f,) = H.check_torch("2.14.1", None)
    assert f.status == "note" and "lies inside the tested range (2.13.0 to 2.15.0) but was not itself tested" in f.value


def test_a_torch_below_the_floor_is_a_warning_with_the_install_command():
    (f,) = H.check_torch("2.12.1", None)
    assert f.status == "warn" and "older than the oldest tested release (2.13.0)" in f.value
    assert f.advice == f'install a tested release: pip install "{TESTED.requirement}"'
    assert TESTED.requirement == "torch>=2.13,<2.16"


def test_a_torch_above_the_newest_is_a_warning_naming_the_newest():
    (f,) = H.check_torch("2.16.0", None)
    assert f.status == "warn" and "newer than the newest tested release (2.15.0)" in f.value
    assert 'pip install "torch==2.15.0"' in f.advice


def test_a_torch_that_fails_to_import_is_a_failure():
    (f,) = H.check_torch(error="OSError: libtorch_cpu.so: cannot open shared object file")
    assert f.status == "fail" and f.value == "import torch failed: OSError: libtorch_cpu.so: cannot open shared object file"
    assert f.advice == 'install torch inside the tested range: pip install "torch>=2.13,<2.16"'


def test_the_behaviours_that_apply_are_each_a_note_for_that_release():
    old = {f.key: f for f in H.check_behaviours("2.13.0")}
    new = {f.key: f for f in H.check_behaviours("2.15.0")}
    assert set(old) == {"behaviour:dtensor_shard_to_partial", "behaviour:all_gather_object_single",
                        "behaviour:pipelining_inference_vote"}
    assert old["behaviour:dtensor_shard_to_partial"].value.startswith("torch 2.13.0 (before 2.14): DTensor.redistribute refuses")
    assert new["behaviour:dtensor_shard_to_partial"].value.startswith("torch 2.15.0 (2.14 and later): DTensor.redistribute accepts")
    assert "all_reduce(MIN)" in new["behaviour:pipelining_inference_vote"].value
    assert "all_reduce(MIN)" not in old["behaviour:pipelining_inference_vote"].value
    assert all(f.status == "note" for f in [*old.values(), *new.values()])


# --- backends and torch's private names --------------------------------------------------------------

GLOO = {"available": True, "max_world_size": 16, "reason": ""}
NO_NCCL = {"available": False, "max_world_size": 0, "reason": "NCCL needs CUDA GPUs and this torch sees none"}


def test_gloo_and_a_cpu_build_without_nccl():
    gloo, nccl = H.check_backends(GLOO, NO_NCCL, None, 0)
    assert (gloo.status, gloo.value) == ("ok", "available, world sizes 1 to 16")
    assert nccl.status == "note" and nccl.value == NO_NCCL["reason"]
    assert "install a CUDA build of torch" in nccl.advice


def test_a_cuda_build_whose_gpus_are_hidden_says_to_unset_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    _, nccl = H.check_backends(GLOO, NO_NCCL, "13.2", 0)
    assert nccl.advice == "CUDA_VISIBLE_DEVICES='' hides the GPUs: unset it"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    _, nccl = H.check_backends(GLOO, NO_NCCL, "13.2", 0)
    assert "nvidia-smi" in nccl.advice


def test_nccl_with_gpus_and_gloo_missing():
    gloo, nccl = H.check_backends({"available": False, "max_world_size": 0, "reason": "this torch build has no Gloo backend"},
                                  {"available": True, "max_world_size": 2, "reason": ""}, "13.2", 2)
    assert (gloo.status, gloo.value) == ("fail", "this torch build has no Gloo backend")
    assert (nccl.status, nccl.value) == ("ok", "available, 2 GPU(s) visible")


def test_a_torch_without_torch_distributed_is_a_failure():
    (f,) = H.check_backends({}, {}, None, 0, distributed=False)
    assert (f.key, f.status, f.value) == ("distributed", "fail", "this torch build has no torch.distributed")


def test_missing_private_names_name_the_features_that_need_them():
    from collnb.ranks import missing_private_names
    from collnb.ranks._torch_internals import PRIVATE_NAMES

    assert H.check_private_names(missing_private_names())[0].status == "ok"  # the installed torch: all present
    fr = next(p for p in PRIVATE_NAMES if p.name.endswith("_dump_fr_trace_json"))
    (f,) = H.check_private_names([fr])
    assert f.status == "warn" and f.value == ("this torch lacks what these parts of collnb use: launch(flight_recorder=N) "
                                              "(torch._C._distributed_c10d._dump_fr_trace_json)")


# --- the saved probe -----------------------------------------------------------------------------------

@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("COLLNB_SUPPORT_CACHE", raising=False)
    return tmp_path / "collnb" / "support-gloo.json"


def _save(results):
    S._save_disk(S.BackendSupport("gloo", torch.__version__, 2, results))


def test_the_saved_probe_absent_current_stale_unreadable_and_disabled(cache, monkeypatch):
    state = S.saved_probe_state("gloo")
    assert (state["state"], state["path"]) == ("absent", str(cache))
    assert H.check_probe_cache(state)[0].status == "note"

    _save({("all_reduce", "float32", "sum"): None, ("all_reduce", "int32", "avg"): "RuntimeError: no"})
    state = S.saved_probe_state("gloo")
    assert (state["state"], state["trials"], state["refused"]) == ("current", 2, 1)
    (f,) = H.check_probe_cache(state)
    assert (f.status, f.value) == ("ok", f"saved and current: 2 combinations tried, 1 refused by Gloo ({cache})")

    data = json.loads(cache.read_text())
    data["key"]["collnb_collectives"] = "0" * 64
    cache.write_text(json.dumps(data))
    assert S.saved_probe_state("gloo")["state"] == "stale-collnb"
    assert "saved by other probing code of collnb" in H.check_probe_cache(S.saved_probe_state("gloo"))[0].value

    data["key"]["torch"] = "2.12.1"
    cache.write_text(json.dumps(data))
    (f,) = H.check_probe_cache(S.saved_probe_state("gloo"))
    assert f.status == "note" and f.value == f"out of date, saved for torch 2.12.1 ({cache})"

    data["key"]["torch"], data["key"]["libs"] = torch.__version__, [["libtorch_cpu.so", 1, 2]]
    cache.write_text(json.dumps(data))
    assert f"another installation of torch {torch.__version__}" in H.check_probe_cache(S.saved_probe_state("gloo"))[0].value

    cache.write_text("{not json")
    (f,) = H.check_probe_cache(S.saved_probe_state("gloo"))
    assert f.status == "warn" and f.value.startswith("cannot be read: JSONDecodeError") and f.advice.startswith(f"delete {cache}")

    monkeypatch.setenv("COLLNB_SUPPORT_CACHE", "0")
    (f,) = H.check_probe_cache(S.saved_probe_state("gloo"))
    assert (f.status, f.value) == ("note", "not used: COLLNB_SUPPORT_CACHE=0")


# --- /dev/shm, temporary space, packages, Python, the machine ------------------------------------------

def test_a_nearly_full_dev_shm_is_a_warning_with_its_numbers():
    (f,) = H.check_shm("/dev/shm", lambda _: Usage(64 * MIB, 60 * MIB, 4 * MIB), system="Linux")
    assert f.status == "warn" and f.value.startswith("4 MiB free of 64 MiB; NCCL between the GPUs of one machine")
    assert f.advice == ("give it at least 256 MiB: in Docker --shm-size=1g (or --ipc=host); the Gloo lessons do not "
                        "need it")


def test_a_roomy_dev_shm_is_ok_and_a_missing_one_a_warning(tmp_path):
    (f,) = H.check_shm(str(tmp_path), lambda _: Usage(8192 * MIB, 0, 8000 * MIB), system="Linux")
    assert (f.status, f.value) == ("ok", "8000 MiB free of 8192 MiB")

    def gone(_):
        raise FileNotFoundError(2, "No such file or directory")

    (f,) = H.check_shm(str(tmp_path / "none"), gone, system="Linux")
    assert f.status == "warn" and f.value.startswith("missing or not writable") and "--shm-size=1g" in f.advice
    assert H.check_shm(system="Darwin")[0].status == "note"


def test_the_temporary_folder_full_or_missing(tmp_path):
    (f,) = H.check_temp(str(tmp_path), lambda _: Usage(1000 * MIB, 990 * MIB, 10 * MIB))
    assert (f.status, f.value) == ("warn", f"{tmp_path}: 10 MiB free of 1000 MiB") and "TMPDIR" in f.advice
    (f,) = H.check_temp(str(tmp_path), lambda _: Usage(1000 * MIB, 0, 1000 * MIB))
    assert f.status == "ok"
    (f,) = H.check_temp(str(tmp_path / "missing"))
    assert f.status == "fail" and f.value == f"{tmp_path / 'missing'}: cannot make a file: No such file or directory"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("collnb-doctor-")]  # nothing left behind


def test_a_missing_package_is_a_failure_with_the_install_command():
    (f,) = H.check_packages(version=lambda name: "1.0", find=lambda module: None if module == "ipywidgets" else object())
    assert (f.status, f.value) == ("fail", "missing: ipywidgets")
    assert f.advice == "pip install ipywidgets (or reinstall collnb: pip install -e . in its folder)"
    (f,) = H.check_packages(version=lambda name: "1.0", find=lambda module: object())
    assert f.status == "ok" and f.value.startswith("numpy 1.0, matplotlib 1.0, ipywidgets 1.0")


def test_an_old_python_is_a_failure():
    (f,) = H.check_python((3, 9, 18), ">=3.10")
    assert f.status == "fail" and f.value.startswith("3.9.18 (") and "needs Python >=3.10" in f.advice
    assert H.check_python((3, 11, 7), ">=3.10")[0].status == "ok"


def test_the_machine_without_fork():
    (f,) = H.check_machine(2, ["spawn"])
    assert f.status == "note" and f.value.startswith("2 core(s), ") and f.value.endswith("start methods: spawn")


# --- the launch, the report -----------------------------------------------------------------------------

def test_the_launch_check_on_real_ranks_and_when_it_fails():
    (f,) = H.check_launch()
    assert f.status == "ok" and f.value.startswith("all_reduce on 2 ranks gave the right sum in ")

    def broken():
        raise RuntimeError("Gloo connectFullMesh failed\nmore lines")

    (f,) = H.check_launch(broken)
    assert (f.status, f.value) == ("fail", "RuntimeError: Gloo connectFullMesh failed")
    assert H.check_launch(lambda: [[1.0, 0.0], [1.0, 1.0]])[0].status == "fail"


def test_the_report_as_text_and_html():
    r = H.Report([H.Finding("a", "ok", "torch", "fine"), H.Finding("b", "warn", "/dev/shm", "<full>", "grow it")])
    text = r.text()
    assert text.splitlines()[2:4] == ["✓ torch     fine", "! /dev/shm  <full>"]
    assert "  → grow it" in text and text.endswith("0 problem(s) that stop collnb, 1 that may stop a part of it: "
                                                   "see the lines marked ✗ and !.")
    assert r.problems() == [r.findings[1]] and r.by_key("b").advice == "grow it" and str(r) == text
    page = r._repr_html_()
    assert "&lt;full&gt;" in page and "<full>" not in page and "<pre style=" in page
    with pytest.raises(KeyError, match="found: a, b"):
        r.by_key("c")


def test_doctor_in_a_notebook_and_in_chinese():
    import collnb.cli  # noqa: F401 - imports collnb.health: collnb.doctor stays the function
    assert collnb.doctor is H.doctor
    report = collnb.doctor(launch=False)
    keys = [f.key for f in report.findings]
    assert keys[:5] == ["python", "collnb", "torch", "gloo", "nccl"] and "launch" not in keys
    assert {"private", "probe", "shm", "temp", "packages", "machine", "language"} <= set(keys)
    assert report.by_key("torch").status == "ok" and report.by_key("gloo").status == "ok"
    set_language("zh")
    text = collnb.doctor(launch=False).text()
    assert text.splitlines()[0] == "collnb doctor：请把从这一行起的全部内容粘贴到错误报告里"
    for label in ("临时文件夹", "依赖包", "后端探测", "语言", "torch 内部接口"):
        assert label in text


# --- the command line --------------------------------------------------------------------------------------

def _cli(*args, env=None):
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "collnb", "doctor", *args], capture_output=True, text=True,
                          timeout=300, env=environ, cwd=ROOT)


def test_the_command_line_in_english_and_chinese():
    out = _cli("--no-launch", env={"COLLNB_LANG": "en"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "collnb doctor: paste everything from this line down into a bug report"
    assert f"torch {torch.__version__}" in out.stdout and "Gloo ranks" not in out.stdout
    zh = _cli("--no-launch", "--lang", "zh")
    assert zh.returncode == 0 and zh.stdout.splitlines()[0].startswith("collnb doctor：")


def test_the_command_line_reports_a_torch_that_fails_to_import(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object file')\n")
    out = _cli(env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "COLLNB_LANG": "en"})
    assert out.returncode == 1, out.stderr
    assert "✗ torch" in out.stdout
    assert "import torch failed: ImportError: libtorch_cpu.so: cannot open shared object file" in out.stdout
    assert 'install torch inside the tested range: pip install "torch>=2.13,<2.16"' in out.stdout
    assert "Traceback" not in out.stderr


def test_doctor_in_a_real_kernel_shows_a_table_with_the_text_under_it():
    """What a notebook shows for ``collnb.doctor()``: an HTML table (marks, labels, advice) and the plain text."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import collnb\ncollnb.set_language('en')\ncollnb.doctor(launch=False)")])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    (out,) = nb.cells[0].outputs
    assert out.output_type == "execute_result"
    page, text = out.data["text/html"], out.data["text/plain"]
    assert page.startswith("<div><b>collnb doctor</b>") and "<table" in page and "torch internals" in page
    assert text.startswith("collnb doctor: paste everything from this line down into a bug report")
