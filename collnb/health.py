"""``collnb doctor``: what this install is made of and what to do about each problem, as text a learner pastes into a bug report.

``python -m collnb doctor`` (or ``collnb doctor``) prints it; ``collnb.doctor()`` in a notebook shows
the same findings as a table, with the text to copy underneath. Each :class:`Finding` is one line:
Python; collnb; torch and where it stands in the tested range (:data:`collnb.torch_versions.TESTED`);
``torch.distributed``; Gloo and NCCL, and why one cannot run; torch's private names collnb relies on;
the version-dependent behaviours that apply to this torch (:data:`collnb.torch_versions.BEHAVIOURS`);
the saved backend probe; ``/dev/shm`` and the temporary folder; the packages collnb needs; the machine
(cores, start method); the language; and, unless ``launch=False``, one all_reduce on two real Gloo
ranks. A problem's line says what to do.

This module imports only the standard library until it looks at torch, so it reports a torch that
fails to import (instead of failing with it); the command line reaches it before the other
subcommands, which import torch (:mod:`collnb.__main__`).
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import importlib.metadata
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .i18n import ENV as LANG_ENV
from .i18n import _, get_language, set_language
from .torch_versions import BEHAVIOURS, TESTED, describe, release, standing

__all__ = ["Finding", "Report", "doctor", "main", "check_python", "check_torch", "check_backends",
           "check_private_names", "check_behaviours", "check_probe_cache", "check_shm", "check_temp",
           "check_packages", "check_machine", "check_language", "check_launch", "MIB", "SHM_LOW", "TEMP_LOW"]

MIB = 1 << 20
#: Below this much free space in ``/dev/shm`` the doctor warns: NCCL between the GPUs of one machine
#: and ``torch.multiprocessing`` (DataLoader workers, tensors through queues) keep data there; Docker
#: gives a container 64 MiB unless told otherwise (``--shm-size``).
SHM_LOW = 256 * MIB
#: Below this much free space in the temporary folder the doctor warns: every pool of ranks keeps its
#: FileStore and stack files there, the hang lab its Flight Recorder dumps, the virtual cluster its nodes.
TEMP_LOW = 100 * MIB
#: The packages ``pyproject.toml`` makes collnb depend on (besides torch), and what each is for.
PACKAGES = (("numpy", "numpy"), ("matplotlib", "matplotlib"), ("ipywidgets", "ipywidgets"),
            ("cloudpickle", "cloudpickle"), ("psutil", "psutil"), ("pillow", "PIL"), ("tqdm", "tqdm"))
#: How each status is marked in the text and the table.
MARKS = {"ok": "✓", "note": "·", "warn": "!", "fail": "✗"}
_COLOURS = {"ok": "#1a7f37", "note": "#57606a", "warn": "#9a6700", "fail": "#cf222e"}


@dataclass(frozen=True)
class Finding:
    """One thing the doctor looked at.

    Attributes:
        key: what was looked at, a stable name (``"torch"``, ``"shm"``, ``"behaviour:<key>"`` ...).
        status: ``"ok"``, ``"note"`` (worth knowing, nothing to do), ``"warn"`` (a part of collnb may
            fail) or ``"fail"`` (collnb cannot work until it is fixed).
        label: what was looked at, in the language spoken.
        value: what was found, one line.
        advice: what to do, one line (``""`` when nothing).
    """

    key: str
    status: str
    label: str
    value: str
    advice: str = ""


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal (a Chinese character takes two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


@dataclass
class Report:
    """Every :class:`Finding` of one :func:`doctor` run. ``str(report)`` is the text for a bug report;
    in a notebook it shows as a table (:meth:`_repr_html_`) with that text underneath.

    Attributes:
        findings: list of :class:`Finding`, in the order they were looked at.
        seconds: how long the doctor took (float, s).
    """

    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def problems(self) -> list[Finding]:
        """The findings with status ``"warn"`` or ``"fail"``."""
        return [f for f in self.findings if f.status in ("warn", "fail")]

    def by_key(self, key: str) -> Finding:
        """The finding named ``key``.

        Raises:
            KeyError: no finding has that key (the message lists those that do).
        """
        for f in self.findings:
            if f.key == key:
                return f
        raise KeyError(f"no finding {key!r}; found: {', '.join(f.key for f in self.findings)}")

    def summary(self) -> str:
        """One line: how many warnings and failures, or that nothing is wrong."""
        warn = sum(f.status == "warn" for f in self.findings)
        fail = sum(f.status == "fail" for f in self.findings)
        if not warn and not fail:
            return _("No problem found.")
        return _("{fail} problem(s) that stop collnb, {warn} that may stop a part of it: see the lines marked "
                 "{mark_fail} and {mark_warn}.").format(fail=fail, warn=warn, mark_fail=MARKS["fail"],
                                                        mark_warn=MARKS["warn"])

    def text(self) -> str:
        """The report as plain text (aligned columns; one line per finding, its advice under it)."""
        wide = max((_width(f.label) for f in self.findings), default=0)
        lines = [_("collnb doctor: paste everything from this line down into a bug report"), ""]
        for f in self.findings:
            lines.append(f"{MARKS[f.status]} {f.label}{' ' * (wide - _width(f.label))}  {f.value}")
            if f.advice:
                lines.append(f"  {' ' * wide}  → {f.advice}")
        lines += ["", self.summary()]
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = []
        for f in self.findings:
            advice = f"<br><b>→</b> {html.escape(f.advice)}" if f.advice else ""
            rows.append(
                f"<tr><td style='color:{_COLOURS[f.status]};font-weight:bold;text-align:center'>{MARKS[f.status]}</td>"
                f"<td style='text-align:left;white-space:nowrap'>{html.escape(f.label)}</td>"
                f"<td style='text-align:left'>{html.escape(f.value)}{advice}</td></tr>")
        return (f"<div><b>collnb doctor</b> ({html.escape(self.summary())})"
                "<table style='border-collapse:collapse'>" + "".join(rows) + "</table>"
                f"<details><summary>{html.escape(_('Text for a bug report (copy all of it)'))}</summary>"
                f"<pre style='white-space:pre-wrap'>{html.escape(self.text())}</pre></details></div>")


# ---------------------------------------------------------------------------------------------------
# The checks: each returns findings and takes what it looks at as arguments (the tests simulate a full
# /dev/shm or a torch outside the tested range by passing them).


def check_python(version: Sequence[int] | None = None, requires: str | None = None) -> list[Finding]:
    """The Python running collnb against ``requires-python`` (collnb's metadata, e.g. ``">=3.10"``)."""
    v = tuple(version or sys.version_info[:3])
    if requires is None:
        try:
            requires = importlib.metadata.metadata("collnb")["Requires-Python"] or ""
        except importlib.metadata.PackageNotFoundError:
            requires = ""
    floor = release(requires.split(">=", 1)[1].split(",")[0].strip()) if ">=" in requires else ()
    text = ".".join(map(str, v)) + f" ({platform.python_implementation()}, {sys.executable})"
    if floor and v[:len(floor)] < floor:
        return [Finding("python", "fail", _("Python"), text,
                        _("collnb needs Python {requires}: install a newer Python and collnb into it").format(
                            requires=requires))]
    return [Finding("python", "ok", _("Python"), text)]


def check_collnb() -> list[Finding]:
    """collnb's version and where it is imported from."""
    version = getattr(sys.modules.get(__package__ or "collnb"), "__version__", "?")
    return [Finding("collnb", "ok", "collnb", f"{version} ({os.path.dirname(os.path.abspath(__file__))})")]


def check_torch(version: str | None = None, cuda: str | None = None, error: str | None = None) -> list[Finding]:
    """torch: its version and build, and where it stands in :data:`collnb.torch_versions.TESTED`.

    Args:
        version: ``torch.__version__``; ``error``: why ``import torch`` failed (then nothing else is read).
        cuda: ``torch.version.cuda`` (``None`` for a CPU build).
    """
    install = _("pip install \"{requirement}\"").format(requirement=TESTED.requirement)
    if error is not None:
        return [Finding("torch", "fail", "torch", _("import torch failed: {error}").format(error=error),
                        _("install torch inside the tested range: {command}").format(command=install))]
    assert version is not None
    build = _("CUDA {cuda} build").format(cuda=cuda) if cuda else _("CPU build")
    kind, line = standing(version)
    status = {"pinned": "ok", "tested": "ok", "inside": "note", "below": "warn", "above": "warn"}[kind]
    advice = ""
    if kind == "below":
        advice = _("install a tested release: {command}").format(command=install)
    elif kind == "above":
        advice = _("if a lesson shows something its text does not say, report it with this text; "
                   "pip install \"torch=={newest}\" gives the newest tested release").format(newest=TESTED.newest)
    tested = _("tested: {floor} (oldest) to {newest} (newest), {pinned} pinned").format(
        floor=TESTED.floor, newest=TESTED.newest, pinned=TESTED.pinned)
    return [Finding("torch", status, "torch", _("{line} ({build}; {tested})").format(line=line, build=build,
                                                                                   tested=tested), advice)]


def check_backends(gloo: dict[str, object], nccl: dict[str, object], cuda: str | None,
                   gpus: int, distributed: bool = True) -> list[Finding]:
    """Gloo and NCCL as :func:`collnb.backend_info` sees them, with what to do about one that cannot run.

    Args:
        gloo, nccl: :func:`collnb.backend_info`'s dicts (``available``, ``max_world_size``, ``reason``).
        cuda: ``torch.version.cuda``; gpus: ``torch.cuda.device_count()``.
        distributed: ``torch.distributed.is_available()``.
    """
    if not distributed:
        return [Finding("distributed", "fail", "torch.distributed", _("this torch build has no torch.distributed"),
                        _("install torch from PyPI or pytorch.org (their Linux, macOS and Windows builds have it)"))]
    out = []
    if gloo["available"]:
        out.append(Finding("gloo", "ok", "Gloo", _("available, world sizes 1 to {n}").format(n=gloo["max_world_size"])))
    else:
        out.append(Finding("gloo", "fail", "Gloo", str(gloo["reason"]),
                           _("every lesson runs on Gloo: install a torch build with Gloo (PyPI's)")))
    if nccl["available"]:
        out.append(Finding("nccl", "ok", "NCCL", _("available, {n} GPU(s) visible").format(n=gpus)))
    else:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        if not cuda:
            advice = _("nothing to do for the course (it runs on Gloo); for NCCL install a CUDA build of torch on a "
                       "machine with an NVIDIA GPU")
        elif hidden is not None and gpus == 0:
            advice = _("CUDA_VISIBLE_DEVICES={value} hides the GPUs: unset it").format(value=repr(hidden))
        else:
            advice = _("nothing to do for the course (it runs on Gloo); for NCCL check that nvidia-smi sees a GPU")
        out.append(Finding("nccl", "note", "NCCL", str(nccl["reason"]), advice))
    return out


def check_private_names(missing: Sequence[object]) -> list[Finding]:
    """torch's private names collnb relies on (``collnb.ranks.missing_private_names()``: the entries
    of ``PRIVATE_NAMES`` this torch lacks, each with ``name`` and ``feature``)."""
    if not missing:
        return [Finding("private", "ok", _("torch internals"),
                        _("every private torch name collnb relies on is present"))]
    lines = "; ".join(f"{getattr(p, 'feature', p)} ({getattr(p, 'name', p)})" for p in missing)
    return [Finding("private", "warn", _("torch internals"),
                    _("this torch lacks what these parts of collnb use: {lines}").format(lines=lines),
                    _("the rest of collnb works; a tested torch release has them all"))]


def check_behaviours(version: str) -> list[Finding]:
    """For each of :data:`collnb.torch_versions.BEHAVIOURS`: what this torch does (notes)."""
    return [Finding(f"behaviour:{b.key}", "note", _("behaviour"), describe(b.key, version)) for b in BEHAVIOURS]


def check_probe_cache(state: dict[str, object]) -> list[Finding]:
    """The saved backend probe (:func:`collnb.collectives.saved_probe_state`'s dict for Gloo)."""
    label, path, s = _("backend probe"), str(state["path"]), state["state"]
    first = _("the first request that needs it probes Gloo on real ranks (2-4 s) and saves it")
    if s == "current":
        return [Finding("probe", "ok", label, _("saved and current: {trials} combinations tried, {refused} refused by "
                                                "Gloo ({path})").format(trials=state["trials"], refused=state["refused"],
                                                                        path=path))]
    if s == "absent":
        return [Finding("probe", "note", label, _("not saved yet ({path})").format(path=path), first)]
    if s == "disabled":
        return [Finding("probe", "note", label, _("not used: COLLNB_SUPPORT_CACHE=0"),
                        _("every new kernel probes Gloo again (2-4 s); unset COLLNB_SUPPORT_CACHE to save it"))]
    if s in ("stale-torch", "stale-collnb"):
        if s == "stale-collnb":
            why = _("saved by other probing code of collnb")
        elif state.get("torch") == state["saved_torch"]:
            why = _("saved for another installation of torch {torch}").format(torch=state["saved_torch"])
        else:
            why = _("saved for torch {torch}").format(torch=state["saved_torch"])
        return [Finding("probe", "note", label, _("out of date, {why} ({path})").format(why=why, path=path), first)]
    return [Finding("probe", "warn", label, _("cannot be read: {error} ({path})").format(error=state["error"], path=path),
                    _("delete {path}: the next request probes again").format(path=path))]


def _space(folder: str, usage: Callable[[str], object]) -> tuple[int, int] | None:
    try:
        u = usage(folder)
    except OSError:
        return None
    return int(u.total), int(u.free)  # type: ignore[attr-defined]  # shutil.disk_usage or a look-alike


def check_shm(folder: str = "/dev/shm", usage: Callable[[str], object] = shutil.disk_usage,
              system: str | None = None) -> list[Finding]:
    """``/dev/shm``: there, writable, and its free space against :data:`SHM_LOW`."""
    if (system or platform.system()) != "Linux":
        return [Finding("shm", "note", "/dev/shm", _("not a Linux machine: not looked at"))]
    space = _space(folder, usage)
    why = _("NCCL between the GPUs of one machine and torch.multiprocessing (DataLoader workers, tensors in queues) "
            "keep data there")
    if space is None or not os.access(folder, os.W_OK):
        return [Finding("shm", "warn", "/dev/shm", _("missing or not writable; {why}").format(why=why),
                        _("mount a tmpfs on /dev/shm (in Docker: --shm-size=1g or --ipc=host)"))]
    total, free = space
    text = _("{free} MiB free of {total} MiB").format(free=free // MIB, total=total // MIB)
    if free < SHM_LOW:
        return [Finding("shm", "warn", "/dev/shm", f"{text}; {why}",
                        _("give it at least {low} MiB: in Docker --shm-size=1g (or --ipc=host); the Gloo lessons do "
                          "not need it").format(low=SHM_LOW // MIB))]
    return [Finding("shm", "ok", "/dev/shm", text)]


def check_temp(folder: str | None = None, usage: Callable[[str], object] = shutil.disk_usage) -> list[Finding]:
    """The temporary folder (``tempfile.gettempdir()``): a file can be made there, and its free space
    against :data:`TEMP_LOW`."""
    folder = folder or tempfile.gettempdir()
    label = _("temporary folder")
    advice = _("set TMPDIR to a writable folder with space (ranks keep their rendezvous files there)")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix="collnb-doctor-"):
            pass
    except OSError as exc:
        return [Finding("temp", "fail", label, _("{folder}: cannot make a file: {error}").format(
            folder=folder, error=exc.strerror or exc), advice)]
    space = _space(folder, usage)
    if space is None:
        return [Finding("temp", "note", label, folder)]
    total, free = space
    text = _("{folder}: {free} MiB free of {total} MiB").format(folder=folder, free=free // MIB, total=total // MIB)
    if free < TEMP_LOW:
        return [Finding("temp", "warn", label, text, advice)]
    return [Finding("temp", "ok", label, text)]


def check_packages(version: Callable[[str], str] = importlib.metadata.version,
                   find: Callable[[str], object] | None = None) -> list[Finding]:
    """The packages collnb depends on (:data:`PACKAGES`): installed, with their versions."""
    find = find or importlib.util.find_spec
    found, missing = [], []
    for dist_name, module in PACKAGES:
        try:
            present = find(module) is not None
        except (ImportError, ValueError):
            present = False
        if not present:
            missing.append(dist_name)
            continue
        try:
            found.append(f"{dist_name} {version(dist_name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(dist_name)
    if missing:
        return [Finding("packages", "fail", _("packages"), _("missing: {names}").format(names=", ".join(missing)),
                        _("pip install {names} (or reinstall collnb: pip install -e . in its folder)").format(
                            names=" ".join(missing)))]
    return [Finding("packages", "ok", _("packages"), ", ".join(found))]


def check_machine(cores: int | None = None, methods: Sequence[str] | None = None) -> list[Finding]:
    """The cores this process may use and the start methods multiprocessing offers (collnb forks its ranks)."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    methods = list(methods if methods is not None else multiprocessing.get_all_start_methods())
    text = _("{cores} core(s), {system} {machine}; start methods: {methods}").format(
        cores=cores, system=platform.system(), machine=platform.machine(), methods=", ".join(methods))
    if "fork" not in methods:
        return [Finding("machine", "note", _("machine"), text,
                        _("without fork every rank starts a fresh interpreter (seconds per launch)"))]
    return [Finding("machine", "ok", _("machine"), text)]


def check_language() -> list[Finding]:
    """The language collnb speaks and where that came from."""
    chosen = os.environ.get(LANG_ENV)
    where = f"{LANG_ENV}={chosen}" if chosen else _("the locale")
    name = {"en": "English", "zh": "简体中文"}[get_language()]
    return [Finding("language", "ok", _("language"), f"{name} ({where})")]


def check_launch(run: Callable[[], object] | None = None) -> list[Finding]:
    """One all_reduce on two real Gloo ranks (``collnb.launch``): it works, or the error's first line."""
    label = _("Gloo ranks")
    t0 = time.perf_counter()
    out: object
    try:
        if run is None:
            from .ranks import launch  # noqa: PLC0415
            out = launch(_all_reduce_of_ranks, 2, timeout=60.0)
        else:
            out = run()
    except Exception as exc:  # noqa: BLE001 - the doctor reports every failure, whatever its type
        first = (str(exc).splitlines() or [""])[0]
        return [Finding("launch", "fail", label, f"{type(exc).__name__}: {first}",
                        _("paste this report into a bug report; GLOO_SOCKET_IFNAME=lo can help where the host name "
                          "does not resolve to this machine"))]
    seconds = time.perf_counter() - t0
    if out != [[1.0, 1.0], [1.0, 1.0]]:
        return [Finding("launch", "fail", label, _("all_reduce gave {out}, not [[1.0, 1.0], [1.0, 1.0]]").format(out=out),
                        _("paste this report into a bug report"))]
    return [Finding("launch", "ok", label, _("all_reduce on 2 ranks gave the right sum in {ms:.0f} ms").format(
        ms=seconds * 1000))]


def _all_reduce_of_ranks(rank: int, world_size: int) -> list[float]:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    t = torch.full((2,), float(rank))
    dist.all_reduce(t)
    return [float(x) for x in t.tolist()]


def doctor(launch: bool = True) -> Report:
    """Look at this install and say what to do about each problem (see the module docstring).

    Args:
        launch: also run one all_reduce on two real Gloo ranks (``False``: start no process).

    Returns:
        :class:`Report` (a table in a notebook; ``print(report)`` gives the text for a bug report).
    """
    t0 = time.perf_counter()
    findings = check_python() + check_collnb()
    try:
        import torch  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - any failure of import torch is the finding
        findings += check_torch(error=f"{type(exc).__name__}: {exc}")
        findings += check_shm() + check_temp() + check_packages() + check_machine() + check_language()
        return Report(findings, time.perf_counter() - t0)
    version = str(torch.__version__)
    cuda = torch.version.cuda
    findings += check_torch(version, cuda)
    import torch.distributed as dist  # noqa: PLC0415

    distributed = dist.is_available()
    if distributed:
        from .collectives import saved_probe_state  # noqa: PLC0415
        from .ranks import backend_info, missing_private_names  # noqa: PLC0415

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        findings += check_backends(backend_info("gloo"), backend_info("nccl"), cuda, gpus)
        findings += check_private_names(missing_private_names())
        findings += check_behaviours(version)
        findings += check_probe_cache(saved_probe_state("gloo"))
    else:
        findings += check_backends({}, {}, cuda, 0, distributed=False)
    findings += check_shm() + check_temp() + check_packages() + check_machine() + check_language()
    if launch and distributed and all(f.status != "fail" for f in findings if f.key in ("gloo", "temp")):
        findings += check_launch()
    return Report(findings, time.perf_counter() - t0)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m collnb doctor [--no-launch] [--lang en|zh]``: print the report; exit status 0, or 1
    when a finding is a failure (✗)."""
    parser = argparse.ArgumentParser(
        prog="python -m collnb doctor",
        description=_("Look at this install (Python, torch and the tested range, Gloo/NCCL, the saved backend "
                      "probe, /dev/shm, temporary space) and say what to do about each problem; paste the output "
                      "into a bug report."))
    add_arguments(parser)
    args = parser.parse_args(list(argv) if argv is not None else None)
    return run_cli(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The doctor's options (``--no-launch``, ``--lang``), for its own parser and the ``collnb`` one."""
    parser.add_argument("--no-launch", action="store_true", help=_("start no rank (skip the all_reduce on 2 Gloo ranks)"))
    parser.add_argument("--lang", choices=("en", "zh"), help=_("the language of the report (default: COLLNB_LANG, "
                                                                 "then the locale)"))


def run_cli(args: argparse.Namespace) -> int:
    """Run the doctor for parsed ``args`` and print the report; 1 when a finding is a failure, else 0."""
    if args.lang:
        set_language(args.lang)
    report = doctor(launch=not args.no_launch)
    print(report.text())
    if not args.no_launch:
        try:
            from .ranks import shutdown  # noqa: PLC0415
            shutdown()
        except Exception:  # noqa: BLE001 - torch itself may be what failed
            pass
    return 1 if any(f.status == "fail" for f in report.findings) else 0
