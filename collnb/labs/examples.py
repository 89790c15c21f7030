"""The original examples: the scenarios of the two documents collnb reproduces, run on real ranks.

The documents ship with collnb (``collnb/data/examples/``, unchanged but for their names; read one
with :func:`example_text`): they are what learners arrive with.

``python -m collnb examples`` runs every scenario with the example's own world size, inputs, ops
and roots on real Gloo ranks (one :func:`collnb.launch` per world size), prints each rank's lines
the way the example's script prints them, and puts a check mark after every result line: ✓ when
it equals the reference computed here without ``torch.distributed``, ✗ otherwise.

The original examples (:data:`EXAMPLE_FILES`):

* ``collectives_gloo_script.txt`` ("PyTorch collective communication"), world size 2:
  ``cm_broadcast_object_demo``, ``cm_broadcast_demo``, ``cm_allreduce_demo``,
  ``cm_gather_demo``, ``cm_scatter_demo``.
* ``collectives_teaching_page.txt`` (the interactive teaching page's CPU examples), world size 4:
  broadcast, scatter, gather, reduce, all_gather, reduce_scatter, all_reduce, all_to_all.

The second document emulates ``reduce_scatter`` with ``world_size`` calls of ``reduce`` and
uses ``all_to_all_single`` because, it says, Gloo lacks ``dist.reduce_scatter`` and the list form
of ``dist.all_to_all``. Whether the installed torch's Gloo has them is detected at run time
(:func:`collnb.backend_support`); where it does, the native call runs too and its result is
checked against the same reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, TypedDict, cast

import torch
import torch.distributed as dist

from ..i18n import N_, _
from ..collectives import backend_support
from ..ranks import launch

__all__ = ["EXAMPLE_FILES", "EXAMPLE_TITLES", "SCENARIOS", "Scenario", "run_examples", "example_text"]

#: The two original examples, as shipped in ``collnb/data/examples/``: the Gloo tutorial script,
#: then the interactive teaching page.
EXAMPLE_FILES = ("collectives_gloo_script.txt", "collectives_teaching_page.txt")
#: A short title per original example, printed above its scenarios.
EXAMPLE_TITLES = {
    "collectives_gloo_script.txt": N_("original example 1: 'PyTorch collective communication' script"),
    "collectives_teaching_page.txt": N_("original example 2: interactive teaching page, CPU examples"),
}


class Native(TypedDict):
    """Which optional native calls the backend has (detected: :func:`collnb.backend_support`)."""

    reduce_scatter: bool
    all_to_all: bool


#: What a scenario's rank function returns: named values (tensors, lists, objects) its report prints.
Answer = dict[str, object]
#: One line a report prints and its mark: ``True`` (✓), ``False`` (✗) or ``None`` (no check).
Line = tuple[str, bool | None]


def example_text(name: str) -> str:
    """The text (str) of an original example shipped in ``collnb/data/examples/``.

    Args:
        name: a file name from :data:`EXAMPLE_FILES`, or ``"README.md"`` (what the two are).

    Raises:
        FileNotFoundError: another name (the message lists the valid ones).
    """
    if name not in EXAMPLE_FILES + ("README.md",):
        raise FileNotFoundError(_("no original example {name}; choose one of: {names}").format(
            name=repr(name), names=", ".join(EXAMPLE_FILES)))
    return files("collnb").joinpath("data", "examples", name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Scenario:
    """One scenario of an original example.

    Attributes:
        example: the original example's file name (from :data:`EXAMPLE_FILES`).
        name: the example's function/file name (``cm_allreduce_demo``, ``allreduce_cpu_demo.py``).
        world_size: the example's world size.
        rank_fn: ``fn(rank, world_size, native) -> dict`` run on every rank; ``native`` says
            which optional native calls the backend has (``{"reduce_scatter": bool,
            "all_to_all": bool}``).
        report: ``fn(per_rank_dicts, world_size, native) -> list of (line, mark)`` where mark is
            ``True`` (✓), ``False`` (✗) or ``None`` (no check: an input, a note, or an
            undefined output).
    """

    example: str
    name: str
    world_size: int
    rank_fn: Callable[[int, int, Native], Answer]
    report: Callable[[list[Answer], int, Native], list[Line]]


def _mark(ok: bool | None) -> str:
    """✓, ✗ or nothing for an unchecked line."""
    return {True: "✓", False: "✗", None: ""}[ok]


def _eq(a: object, b: object) -> bool:
    """Both are tensors of one dtype, shape and values."""
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype \
        and a.shape == b.shape and bool(torch.equal(a, b))


# ----------------------------------------------------------------------------------------------
# Original example 1: "PyTorch collective communication", world size 2

def _cm_broadcast_object(rank: int, ws: int, native: Native) -> Answer:
    objects = ["foo", 12, {"key": "value"}] if rank == 0 else [None, None, None]
    dist.broadcast_object_list(objects, src=0, device=torch.device("cpu"))
    return {"objects": objects}


def _rep_broadcast_object(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = ["foo", 12, {"key": "value"}]
    return [(f"[rank {r}] rank: {r}, objects: {d['objects']}", d["objects"] == want) for r, d in enumerate(res)]


def _cm_broadcast(rank: int, ws: int, native: Native) -> Answer:
    tensor = torch.arange(10) if rank == 0 else torch.zeros(10, dtype=torch.int64)
    dist.broadcast(tensor, src=0)
    return {"tensor": tensor}


def _rep_broadcast(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = torch.arange(10)
    return [(f"[rank {r}] {d['tensor']}", _eq(d["tensor"], want)) for r, d in enumerate(res)]


def _cm_allreduce(rank: int, ws: int, native: Native) -> Answer:
    tensor = torch.arange(2) + 2 * rank
    before = tensor.clone()
    dist.all_reduce(tensor=tensor, op=dist.ReduceOp.SUM)
    return {"before": before, "after": tensor}


def _rep_allreduce(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = sum(torch.arange(2) + 2 * r for r in range(ws))
    lines: list[Line] = [(f"[rank {r}] before allreduce, rank: {r}, tensor: {d['before']}", None)
                         for r, d in enumerate(res)]
    lines += [(f"[rank {r}] after allreduce, rank: {r}, tensor: {d['after']}", _eq(d["after"], want))
              for r, d in enumerate(res)]
    return lines


def _cm_gather(rank: int, ws: int, native: Native) -> Answer:
    tensor = torch.tensor([rank])
    output = [torch.zeros_like(tensor) for _ in range(ws)]
    dist.gather(tensor, output if rank == 0 else None, dst=0)
    return {"tensor": tensor, "output": output if rank == 0 else None}


def _rep_gather(res: list[Answer], ws: int, native: Native) -> list[Line]:
    lines: list[Line] = [(f"[rank {r}] before gather, rank: {r}, tensor: {d['tensor']}", None)
                         for r, d in enumerate(res)]
    out = cast("list[torch.Tensor]", res[0]["output"])  # dst's gather list (_cm_gather)
    want = [torch.tensor([r]) for r in range(ws)]
    ok = len(out) == ws and all(_eq(a, b) for a, b in zip(out, want))
    lines.append((f"[rank 0] after gather, rank: 0, output: {out}, concat output: {torch.concat(out)}", ok))
    return lines


def _cm_scatter(rank: int, ws: int, native: Native) -> Answer:
    scatter_list = [torch.ones(2), torch.ones(2) * 3]
    output_tensor = torch.zeros_like(scatter_list[0])
    dist.scatter(output_tensor, scatter_list if rank == 0 else None, src=0)
    return {"scatter_list": scatter_list, "output": output_tensor}


def _rep_scatter(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = [torch.ones(2), torch.ones(2) * 3]
    return [(f"[rank {r}] scatter_list: {d['scatter_list']}, rank: {r}, output: {d['output']}",
             _eq(d["output"], want[r])) for r, d in enumerate(res)]


# ----------------------------------------------------------------------------------------------
# Original example 2: the teaching page's CPU examples, world size 4

def _p_broadcast(rank: int, ws: int, native: Native) -> Answer:
    tensor = torch.tensor([1.0, 2.0, 3.0]) if rank == 0 else torch.zeros(3)
    before = tensor.tolist()
    dist.broadcast(tensor, src=0)
    return {"before": before, "after": tensor.tolist()}


def _rep_p_broadcast(res: list[Answer], ws: int, native: Native) -> list[Line]:
    lines: list[Line] = [(f"[rank {r}] before: {d['before']}", None) for r, d in enumerate(res)]
    lines += [(f"[rank {r}] after : {d['after']}", d["after"] == [1.0, 2.0, 3.0]) for r, d in enumerate(res)]
    return lines


def _p_scatter(rank: int, ws: int, native: Native) -> Answer:
    output_tensor = torch.zeros(2)
    full = None
    if rank == 0:
        full_data = torch.arange(2 * ws, dtype=torch.float32)
        scatter_list = list(full_data.chunk(ws))
        full = full_data.tolist()
    else:
        scatter_list = None
    dist.scatter(output_tensor, scatter_list=scatter_list, src=0)
    return {"full_data": full, "received": output_tensor.tolist()}


def _rep_p_scatter(res: list[Answer], ws: int, native: Native) -> list[Line]:
    lines: list[Line] = [(f"[rank 0] full_data = {res[0]['full_data']}", None)]
    lines += [(f"[rank {r}] received: {d['received']}", d["received"] == [2.0 * r, 2.0 * r + 1])
              for r, d in enumerate(res)]
    return lines


def _p_gather(rank: int, ws: int, native: Native) -> Answer:
    my_chunk = torch.full((2,), fill_value=float(rank))
    gather_list = [torch.zeros(2) for _ in range(ws)] if rank == 0 else None
    dist.gather(my_chunk, gather_list=gather_list, dst=0)
    return {"my_chunk": my_chunk.tolist(),
            "gathered": [t.tolist() for t in gather_list] if gather_list is not None else None}  # rank 0's


def _rep_p_gather(res: list[Answer], ws: int, native: Native) -> list[Line]:
    lines: list[Line] = [(f"[rank {r}] my_chunk = {d['my_chunk']}", None) for r, d in enumerate(res)]
    want = [[float(r)] * 2 for r in range(ws)]
    lines.append((f"[rank 0] gathered: {res[0]['gathered']}", res[0]["gathered"] == want))
    return lines


def _p_reduce(rank: int, ws: int, native: Native) -> Answer:
    tensor = torch.full((4,), fill_value=float(rank + 1))
    before = tensor.tolist()
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
    return {"before": before, "after": tensor.tolist()}


def _rep_p_reduce(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = [float(sum(r + 1 for r in range(ws)))] * 4
    lines: list[Line] = [(f"[rank {r}] before: {d['before']}", None) for r, d in enumerate(res)]
    for r, d in enumerate(res):
        if r == 0:
            lines.append((f"[rank {r}] after : {d['after']}", d["after"] == want))
        else:  # the teaching page: "non-dst tensors are undefined"
            lines.append((f"[rank {r}] after : {d['after']}  (undefined: only dst=0's result is defined)", None))
    return lines


def _p_all_gather(rank: int, ws: int, native: Native) -> Answer:
    my_chunk = torch.full((2,), fill_value=float(rank))
    gather_list = [torch.zeros(2) for _ in range(ws)]
    dist.all_gather(gather_list, my_chunk)
    return {"my_chunk": my_chunk.tolist(), "gathered": [t.tolist() for t in gather_list]}


def _rep_p_all_gather(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = [[float(r)] * 2 for r in range(ws)]
    lines: list[Line] = [(f"[rank {r}] my_chunk = {d['my_chunk']}", None) for r, d in enumerate(res)]
    lines += [(f"[rank {r}] gathered: {d['gathered']}", d["gathered"] == want) for r, d in enumerate(res)]
    return lines


def _p_reduce_scatter(rank: int, ws: int, native: Native) -> Answer:
    input_list = [torch.full((2,), fill_value=float(rank * 10 + j)) for j in range(ws)]
    output = torch.zeros(2)
    for j in range(ws):  # the teaching page's emulation: world_size reduce calls
        part = input_list[j].clone()
        dist.reduce(part, dst=j, op=dist.ReduceOp.SUM)
        if rank == j:
            output = part
    out: Answer = {"input_list": [t.tolist() for t in input_list], "emulated": output.tolist()}
    if native["reduce_scatter"]:
        o = torch.zeros(2)
        dist.reduce_scatter(o, [t.clone() for t in input_list], op=dist.ReduceOp.SUM)
        out["native"] = o.tolist()
    return out


def _rep_p_reduce_scatter(res: list[Answer], ws: int, native: Native) -> list[Line]:
    lines: list[Line] = [(f"[rank {r}] input_list = {d['input_list']}", None) for r, d in enumerate(res)]
    for r, d in enumerate(res):
        want = [float(sum(s * 10 + r for s in range(ws)))] * 2
        lines.append((f"[rank {r}] reduce_scatter result: {d['emulated']}", d["emulated"] == want))
    if native["reduce_scatter"]:
        lines.append((_("note: the teaching page emulates reduce_scatter with {n} reduce calls because Gloo lacked "
                        "dist.reduce_scatter; torch {version}'s Gloo has it (detected), so it ran "
                        "natively too:").format(n=ws, version=torch.__version__), None))
        for r, d in enumerate(res):
            want = [float(sum(s * 10 + r for s in range(ws)))] * 2
            lines.append((f"[rank {r}] dist.reduce_scatter result: {d['native']}", d["native"] == want))
    else:
        lines.append((_("note: torch {version}'s Gloo has no dist.reduce_scatter (detected); "
                        "the emulation is needed").format(version=torch.__version__), None))
    return lines


def _p_all_reduce(rank: int, ws: int, native: Native) -> Answer:
    tensor = torch.full((4,), fill_value=float(rank + 1))
    before = tensor.tolist()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return {"before": before, "after": tensor.tolist()}


def _rep_p_all_reduce(res: list[Answer], ws: int, native: Native) -> list[Line]:
    want = [float(sum(r + 1 for r in range(ws)))] * 4
    lines: list[Line] = [(f"[rank {r}] before: {d['before']}", None) for r, d in enumerate(res)]
    lines += [(f"[rank {r}] after : {d['after']}", d["after"] == want) for r, d in enumerate(res)]
    return lines


def _p_all_to_all(rank: int, ws: int, native: Native) -> Answer:
    chunk_size = 2
    input_tensor = torch.cat([torch.full((chunk_size,), fill_value=float(rank * 10 + j)) for j in range(ws)])
    output_tensor = torch.zeros_like(input_tensor)
    dist.all_to_all_single(output_tensor, input_tensor)
    out: Answer = {"input_tensor": input_tensor.tolist(),
           "received": [t.tolist() for t in output_tensor.chunk(ws)]}
    if native["all_to_all"]:
        outs = [torch.zeros(chunk_size) for _ in range(ws)]
        dist.all_to_all(outs, [t.clone() for t in input_tensor.chunk(ws)])
        out["native"] = [t.tolist() for t in outs]
    return out


def _rep_p_all_to_all(res: list[Answer], ws: int, native: Native) -> list[Line]:
    lines: list[Line] = [(f"[rank {r}] input_tensor = {d['input_tensor']}", None) for r, d in enumerate(res)]
    for r, d in enumerate(res):
        want = [[float(j * 10 + r)] * 2 for j in range(ws)]
        lines.append((f"[rank {r}] received: {d['received']}", d["received"] == want))
    if native["all_to_all"]:
        lines.append((_("note: the teaching page uses all_to_all_single because Gloo lacked the list form; torch "
                        "{version}'s Gloo has dist.all_to_all (detected), so it ran too:").format(
                            version=torch.__version__), None))
        for r, d in enumerate(res):
            want = [[float(j * 10 + r)] * 2 for j in range(ws)]
            lines.append((f"[rank {r}] dist.all_to_all received: {d['native']}", d["native"] == want))
    else:
        lines.append((_("note: torch {version}'s Gloo has no list-form dist.all_to_all (detected)").format(
            version=torch.__version__), None))
    return lines


_S0, _S3 = EXAMPLE_FILES
#: Every scenario of both original examples, in document order.
SCENARIOS = (
    Scenario(_S0, "cm_broadcast_object_demo", 2, _cm_broadcast_object, _rep_broadcast_object),
    Scenario(_S0, "cm_broadcast_demo", 2, _cm_broadcast, _rep_broadcast),
    Scenario(_S0, "cm_allreduce_demo", 2, _cm_allreduce, _rep_allreduce),
    Scenario(_S0, "cm_gather_demo", 2, _cm_gather, _rep_gather),
    Scenario(_S0, "cm_scatter_demo", 2, _cm_scatter, _rep_scatter),
    Scenario(_S3, "broadcast_cpu_demo.py", 4, _p_broadcast, _rep_p_broadcast),
    Scenario(_S3, "scatter_cpu_demo.py", 4, _p_scatter, _rep_p_scatter),
    Scenario(_S3, "gather_cpu_demo.py", 4, _p_gather, _rep_p_gather),
    Scenario(_S3, "reduce_cpu_demo.py", 4, _p_reduce, _rep_p_reduce),
    Scenario(_S3, "allgather_cpu_demo.py", 4, _p_all_gather, _rep_p_all_gather),
    Scenario(_S3, "reducescatter_cpu_demo.py", 4, _p_reduce_scatter, _rep_p_reduce_scatter),
    Scenario(_S3, "allreduce_cpu_demo.py", 4, _p_all_reduce, _rep_p_all_reduce),
    Scenario(_S3, "alltoall_cpu_demo.py", 4, _p_all_to_all, _rep_p_all_to_all),
)


def _example_rank(rank: int, world_size: int, indices: list[int], native: Native) -> list[Answer]:
    """Runs on a rank: the rank functions of the scenarios ``indices`` (of :data:`SCENARIOS`), in order."""
    return [SCENARIOS[i].rank_fn(rank, world_size, native) for i in indices]


def run_examples(backend: str = "gloo", print_fn: Callable[[str], object] = print, **launch_kwargs: Any) -> bool:
    """Run every scenario of the original examples on real ranks and print it with check marks.

    One launch per world size (2, then 4) runs that world size's scenarios one after another.

    Args:
        backend: the original examples use ``"gloo"``.
        print_fn: where lines go (default :func:`print`).
        launch_kwargs: passed to :func:`collnb.launch` (e.g. ``timeout``).

    Returns:
        True when every checked line got ✓.
    """
    sup = backend_support(backend, **launch_kwargs)
    native = Native(reduce_scatter=sup.supports("reduce_scatter", "float32", "sum"),
                    all_to_all=sup.supports("all_to_all", "float32"))
    all_ok = True
    n_checked = n_bad = 0
    for ws in sorted({s.world_size for s in SCENARIOS}):
        idx = [i for i, s in enumerate(SCENARIOS) if s.world_size == ws]
        per_rank = launch(_example_rank, ws, args=(idx, native), backend=backend, **launch_kwargs)
        for j, i in enumerate(idx):
            sc = SCENARIOS[i]
            print_fn(f"== {_(EXAMPLE_TITLES[sc.example])} · {sc.name} · "
                     + _("world size {n}").format(n=ws) + f" · {backend} ==")
            for line, ok in sc.report([per_rank[r][j] for r in range(ws)], ws, native):
                if ok is not None:
                    n_checked += 1
                    if not ok:
                        n_bad += 1
                        all_ok = False
                print_fn(f"{line}  {_mark(ok)}".rstrip())
            print_fn("")
    print_fn(f"{'✓' if all_ok else '✗'} " + _("{good}/{checked} results of the original examples match the "
                                              "reference ({scenarios} scenarios from {documents} documents)").format(
        good=n_checked - n_bad, checked=n_checked, scenarios=len(SCENARIOS), documents=len(EXAMPLE_FILES)))
    return all_ok

