"""Standalone ``torchrun`` scripts: one primitive, or a function written in a notebook.

``write_script("all_reduce", "all_reduce.py")`` (the CLI: ``python -m collnb script all_reduce -o
all_reduce.py``) and :func:`to_script` write a script that needs only torch to run::

    torchrun --nproc-per-node 2 all_reduce.py
    # two machines (run on each, NODE = 0 on the first, 1 on the second):
    torchrun --nnodes 2 --node-rank NODE --nproc-per-node GPUS \\
             --rdzv-backend c10d --rdzv-endpoint HOST_OF_NODE_0:PORT all_reduce.py

The script does what torch.distributed's documentation asks of a torchrun script: it reads
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from the environment torchrun sets, initialises the
default process group with ``init_process_group`` (``init_method="env://"``, the default), with
NCCL selects ``cuda:LOCAL_RANK`` through ``torch.cuda.set_device`` and passes ``device_id=``,
runs the collective on collnb's teaching input (rank ``r``, chunk ``c`` holds ``10*r + c``),
prints every rank's buffer before and after, and ends with ``destroy_process_group``. The buffers
and the call are written from the primitive's row of the spec table
(:class:`collnb.collectives.Buffer`, :class:`collnb.collectives.TorchCall`).

Sources: torchrun's environment variables, https://pytorch.org/docs/stable/elastic/run.html;
``init_process_group(device_id=...)``, https://pytorch.org/docs/stable/distributed.html.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import os
import textwrap
import types

from ..collectives import PRIMITIVES, SPECS, Buffer, PrimitiveSpec, check_arguments
from ..i18n import _
from ..ranks import iter_functions
from ..vocabulary import check_backend, check_choice, check_int, op_name

__all__ = ["script_text", "write_script", "to_script", "literal_text", "SCRIPT_PRIMITIVES"]

_HEADER = '''\
#!/usr/bin/env python3
"""{title}

Written by collnb ({how}). Needs only torch. Run it with torchrun:

    torchrun --nproc-per-node 2 {name}

On two machines (NODE = 0 on the first, 1 on the second; PORT a free port on the first):

    torchrun --nnodes 2 --node-rank NODE --nproc-per-node {nproc} \\
             --rdzv-backend c10d --rdzv-endpoint HOST_OF_NODE_0:PORT {name}
{nccl_note}"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

BACKEND = {backend!r}
'''

_NCCL_NOTE = '''
NCCL: one GPU per rank, so --nproc-per-node is at most the GPUs of each machine; rank r of a
machine uses cuda:LOCAL_RANK.
'''

_INIT = '''

def init():
    """Join the default process group from the environment torchrun sets."""
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])  # this rank's index on its own machine
    timeout = datetime.timedelta(seconds=60)
    if BACKEND == "nccl":
        if torch.cuda.device_count() <= local_rank:
            raise SystemExit(f"rank {{rank}}: LOCAL_RANK {{local_rank}} needs GPU {{local_rank}} but this machine "
                             f"has {{torch.cuda.device_count()}}; NCCL needs one GPU per rank "
                             f"(lower --nproc-per-node)")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    return rank, world_size, device


def show(rank, what, value):
    if isinstance(value, torch.Tensor):
        value = value.cpu().tolist()
    # one write per line, so the lines of ranks sharing a terminal or pipe never interleave
    sys.stdout.write(f"rank {{rank}} {{what}}: {{value}}\\n")
    sys.stdout.flush()

'''

_MAIN = '''

if __name__ == "__main__":
    rank, world_size, device = init()
    try:
        main(rank, world_size, device)
    finally:
        dist.destroy_process_group()
'''

# What a script builds for a buffer of the spec table (collnb.collectives.Buffer), by form and
# chunks: the teaching input (rank r, chunk c holds 10*r + c; objects "r{rank}c{c}") for the buffer
# the call reads, zeros (or None placeholders) for the one it writes.
_READ = {("tensor", "world"): "torch.tensor([10.0 * rank + c for c in range(world_size)], device=device)",
         ("tensor", "one"): "torch.tensor([10.0 * rank], device=device)",
         ("tensors", "world"): "[torch.tensor([10.0 * rank + c], device=device) for c in range(world_size)]",
         ("tensors", "one"): "[torch.tensor([10.0 * rank], device=device)]",
         ("objects", "world"): '[f"r{rank}c{c}" for c in range(world_size)]',
         ("objects", "one"): '[f"r{rank}c0"]',
         ("object", "one"): 'f"r{rank}c0"'}
_WRITTEN = {("tensor", "world"): "torch.zeros(world_size, device=device)",
            ("tensor", "one"): "torch.zeros(1, device=device)",
            ("tensors", "world"): "[torch.zeros(1, device=device) for _ in range(world_size)]",
            ("tensors", "one"): "[torch.zeros(1, device=device)]",
            ("objects", "world"): "[None] * world_size",
            ("objects", "one"): "[None]"}

# The two rows of the spec table whose work is not one torch.distributed call: their main() body.
_WRITTEN_OUT = {
    "send_recv": """
    tensor = torch.tensor([10.0 * rank + c for c in range(world_size)], device=device)
    show(rank, "before", tensor)
    received = torch.zeros_like(tensor)
    if world_size > 1:  # a ring: send to rank+1, receive from rank-1
        ops = [dist.P2POp(dist.isend, tensor, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, received, (rank - 1) % world_size)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    else:
        received.copy_(tensor)
    show(rank, "after", received)
""",
    "barrier": """
    import time
    dist.barrier()
    time.sleep(0.030 * rank)  # rank r arrives 30*r ms late
    arrive = time.time()
    dist.barrier()
    leave = time.time()
    show(rank, "before", [arrive])  # when it arrived (seconds since the epoch)
    show(rank, "after", [leave])    # when it left: after the last rank arrived
""",
}


def _shown(b: Buffer) -> str:
    """How the script prints buffer ``b``: a list of tensors joined, one object as a list."""
    return {"tensors": f"torch.cat({b.name})", "object": f"[{b.name}]"}.get(b.form, b.name)


def _call_text(spec: PrimitiveSpec, op: str, absent: str = "") -> str:
    """The spec's call as the script writes it: the root as the variable ``src``/``dst``, the op as
    ``dist.ReduceOp.SUM``, the device as ``device``; ``absent`` (a buffer name) passed as ``None``."""
    call = spec.torch_call
    assert call is not None
    words = {"root": spec.root_name, "op": f"dist.ReduceOp.{op.upper()}", "device": "device"}
    args = ["None" if a == absent else a for a in call.args]
    args += [f"{key}={words[what]}" for key, what in call.keywords]
    return f"dist.{call.function}({', '.join(args)})"


def _body(spec: PrimitiveSpec, root: int, op: str) -> str:
    """The body of ``main(rank, world_size, device)`` for a spec with a call: the teaching input, the
    call as torch.distributed's docs write it, the printout of each rank's buffer before and after.
    A buffer only the root holds is made inside ``if rank == src:`` (a list of objects to receive
    into: in one line, ``... if rank == dst else None``)."""
    if spec.torch_call is None:
        return _WRITTEN_OUT[spec.name]
    read, written = spec.input_buffer(), spec.output_buffer()
    make_in = f"{read.name} = {_READ[read.form, read.chunks]}"
    same = written.form == "tensor" and read.form == "tensor" and written.chunks == read.chunks
    make_out = f"{written.name} = " + (f"torch.zeros_like({read.name})" if same else _WRITTEN[written.form, written.chunks])
    who = f"rank == {spec.root_name}"
    lines = [f"{spec.root_name} = {root}"] if spec.rooted else []
    if read.at == "root":  # scatter: only src has something to send
        lines += [make_out, f"if {who}:", f"    {make_in}", f'    show(rank, "before", {_shown(read)})',
                  f"    {_call_text(spec, op)}", "else:", '    show(rank, "before", [])',
                  f"    {_call_text(spec, op, absent=read.name)}", f'show(rank, "after", {_shown(written)})']
    elif written.at == "root" and written.form == "tensors":  # gather: only dst has somewhere to receive
        lines += [make_in, f'show(rank, "before", {_shown(read)})', f"if {who}:", f"    {make_out}",
                  f"    {_call_text(spec, op)}", f'    show(rank, "after", {_shown(written)})', "else:",
                  f"    {_call_text(spec, op, absent=written.name)}",
                  f'    show(rank, "after", [])  # only {spec.root_name} receives']
    else:
        lines += [make_in, f'show(rank, "before", {_shown(read)})']
        if written is not read:
            lines.append(make_out + (f" if {who} else None" if written.at == "root" else ""))
        lines.append(_call_text(spec, op))
        if written.at == "root":
            lines.append(f'show(rank, "after", {_shown(written)} if {who} else [])')
        elif not all(spec.defined(3, r, 0) for r in range(3)):  # reduce: only dst's buffer holds the result
            lines.append(f'show(rank, "after", {_shown(written)} if {who} else [])  '
                         f"# other ranks' buffers are undefined")
        else:
            lines.append(f'show(rank, "after", {_shown(written)})')
    return "\n" + "".join(f"    {line}\n" for line in lines)


#: Primitives :func:`write_script` can write (the same names as :data:`collnb.PRIMITIVES`).
SCRIPT_PRIMITIVES = PRIMITIVES


def script_text(primitive: str, backend: str = "gloo", op: str | None = None, root: int | None = None) -> str:
    """The text (str) of a standalone torchrun script that runs ``primitive`` once.

    Args:
        primitive: one of :data:`SCRIPT_PRIMITIVES`.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (``cuda:LOCAL_RANK``).
        op: reduce op of a reducing primitive (a name from :data:`collnb.REDUCE_OPS`, ``"sum"``,
            ``"max"``...; ``avg`` needs NCCL); default sum.
        root: the src/dst rank of a rooted primitive (an int >= 0, below the world size torchrun
            starts); default 0.

    As for :func:`collnb.run`, ``op`` and ``root`` are given only to a primitive that uses them
    (:func:`collnb.collectives.check_arguments`; ``None``: not given, the default is then used).

    Raises:
        TypeError: a primitive, backend or op that is not a name, a root that is not an int
            (the words of :mod:`collnb.vocabulary`).
        ValueError: unknown primitive, backend or op, an op given to a primitive that does not
            reduce or a root to one that has none, or a negative root.
    """
    spec = SPECS[check_choice("primitive", primitive, SCRIPT_PRIMITIVES)]
    check_backend(backend)
    check_arguments(spec, {"op": op, "root": root}, "script_text", takes=("op", "root"))
    op = op_name(op if op is not None else "sum")
    root = 0 if root is None else root
    check_int("root", root, 0, what="a rank, below the world size torchrun starts")
    body = _body(spec, root, op)
    head = _HEADER.format(title=f"{primitive} on every rank: each rank prints its buffer before and after.",
                          how=f"python -m collnb script {primitive} --backend {backend}",
                          name=f"{primitive}.py", nproc="GPUS" if backend == "nccl" else "2",
                          nccl_note=_NCCL_NOTE if backend == "nccl" else "", backend=backend)
    return head + _INIT.format() + "\ndef main(rank, world_size, device):" + body + _MAIN


def _write(text: str, to: str | os.PathLike[str]) -> str:
    """Write ``text`` to the file ``to`` (made executable); returns its path (str).

    Raises:
        ValueError: the folder does not exist, or ``to`` is a folder.
        OSError: the file cannot be written.
    """
    path = os.fspath(to)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(_("cannot write {path}: the folder {folder} does not exist; create it first").format(
            path=repr(path), folder=repr(parent)))
    if os.path.isdir(path):
        raise ValueError(_("{path} is a directory; give a file name such as {example}").format(
            path=repr(path), example=os.path.join(path, "script.py")))
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o755)
    return path


def write_script(primitive: str, path: str | os.PathLike[str], backend: str = "gloo", op: str | None = None,
                 root: int | None = None) -> str:
    """Write :func:`script_text` to ``path`` (made executable); returns the path (str).

    Raises:
        ValueError: as :func:`script_text`, or when ``path``'s folder does not exist.
        OSError: the file cannot be written.
    """
    return _write(script_text(primitive, backend=backend, op=op, root=root), path)


# ----------------------------------------------------------------------------------------------
# A function from a notebook


def _source(fn: types.FunctionType) -> str:
    """``fn``'s source, dedented (ValueError where it cannot be found)."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise ValueError(_("the source of {name} cannot be found ({error}); define it with def in a notebook cell "
                           "or a .py file").format(name=repr(getattr(fn, "__name__", fn)), error=exc)) from None


def _global_names(code: types.CodeType) -> set[str]:
    """The names ``code`` and the code objects nested in it read (globals, and attribute names)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


#: The types a constant written into a script may be built of (exactly these: a subclass could
#: carry its own ``__repr__``).
_LITERAL_TYPES = (bool, int, float, complex, str, bytes, type(None))
_MAX_LITERAL_CHARS = 100_000


def literal_text(value: object, _depth: int = 0) -> str | None:
    """``value`` as Python source (str) that :func:`ast.literal_eval` turns back into an equal value,
    or ``None`` when it cannot be written so.

    Only numbers, strings, bytes, bools, ``None`` and (nested, at most 20 deep) tuples, lists, sets
    and dicts of them, of exactly those types, are written; no object's own ``__repr__`` is ever
    run (a crafted one could do anything), and nothing is evaluated: the text is checked with
    ``ast.literal_eval``. NaN and infinities are refused (their ``repr`` is not a literal).
    """
    if _depth > 20:
        return None
    kind = type(value)
    if kind in _LITERAL_TYPES:
        if isinstance(value, float) and not math.isfinite(value):  # kind is float
            return None
        if isinstance(value, complex) and not (math.isfinite(value.real) and math.isfinite(value.imag)):
            return None
        try:
            text = repr(value)  # the built-in types' own repr (exact type checked above)
        except ValueError:  # an int beyond sys.get_int_max_str_digits()
            return None
    elif kind in (tuple, list, set) and isinstance(value, (tuple, list, set)):
        given = [literal_text(v, _depth + 1) for v in value]
        parts = [p for p in given if p is not None]
        if len(parts) != len(given):
            return None
        if kind is tuple:
            text = "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        elif kind is list:
            text = "[" + ", ".join(parts) + "]"
        else:
            text = "{" + ", ".join(sorted(parts)) + "}" if parts else "set()"
    elif kind is dict and isinstance(value, dict):
        pairs = [(literal_text(k, _depth + 1), literal_text(v, _depth + 1)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        text = "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    else:
        return None
    if _depth == 0:
        if len(text) > _MAX_LITERAL_CHARS:
            return None
        try:
            if text != "set()" and ast.literal_eval(text) != value:
                return None
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
    return text


def to_script(fn: object, path: str | os.PathLike[str], backend: str = "gloo") -> str:
    """Write a standalone torchrun script that runs ``fn(rank, world_size)`` on every rank.

    ``fn`` is a function written for :func:`collnb.launch` (``def f(rank, world_size): ...``;
    the default process group is initialised when it is called). The script holds its source
    (from the notebook cell, via :func:`inspect.getsource`), the source of functions it calls
    that were defined next to it, the modules it uses (``import numpy as np`` for a global
    ``np``), and simple constants it reads (numbers, strings, tuples/lists/sets/dicts of them, written
    by :func:`literal_text`, which never runs an object's own ``__repr__``); it prints
    ``rank R returned: VALUE`` for each rank (tensors as lists).

    Args:
        fn: the function; closures and lambdas are refused (their source is not a definition).
        path: the file to write (made executable).
        backend: ``"gloo"`` or ``"nccl"`` (``cuda:LOCAL_RANK`` is made the current device).

    Returns:
        the path (str).

    Raises:
        TypeError: ``fn`` is not a plain function.
        ValueError: its source cannot be found, it is a lambda or a closure, or it reads a global
            whose value cannot be written as Python source (the message names it).
    """
    if not isinstance(fn, types.FunctionType):
        raise TypeError(_("fn must be a function defined with def; got {type}").format(type=type(fn).__name__))
    check_backend(backend)
    if fn.__name__ == "<lambda>":
        raise ValueError(_("a lambda cannot be written as a script: define the function with def"))
    if fn.__closure__:
        raise ValueError(_("{name} is a closure (it reads variables of an enclosing function: {names}); define it "
                           "at the top level of a cell").format(name=fn.__name__,
                                                                 names=", ".join(fn.__code__.co_freevars)))
    funcs = [f for f in iter_functions(fn) if f.__closure__ is None]
    defined = {f.__name__ for f in funcs}
    imports: list[str] = []
    constants: list[str] = []
    problems: list[str] = []
    standard = {"torch", "dist", "os", "datetime"}
    for f in funcs:
        for name in sorted(_global_names(f.__code__)):
            if name in defined or name in standard or name in imports or hasattr(builtins, name):
                continue
            if name not in f.__globals__:
                continue  # an attribute name (t.sum): not a global
            value = f.__globals__[name]
            if isinstance(value, types.ModuleType):
                line = (f"import {value.__name__}" if value.__name__ == name
                        else f"import {value.__name__} as {name}")
                if line not in imports:
                    imports.append(line)
            elif isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", "") not in (
                    "__main__", f.__module__):
                line = f"from {value.__module__} import {value.__qualname__}" + (
                    f" as {name}" if value.__qualname__ != name else "")
                if line not in imports:
                    imports.append(line)
            else:
                text = literal_text(value)
                if text is not None:
                    constants.append(f"{name} = {text}")
                else:
                    problems.append(name)
    if problems:
        raise ValueError(_("{name} reads global(s) {names} whose value cannot be written into a script; pass them "
                           "as arguments or define them inside the function").format(
                               name=fn.__name__, names=", ".join(sorted(set(problems)))))
    sources = [_source(f) for f in reversed(funcs)]
    head = _HEADER.format(title=f"{fn.__name__}(rank, world_size) on every rank; each rank prints what it returns.",
                          how=f"collnb.to_script({fn.__name__}, ...)", name=os.path.basename(os.fspath(path)),
                          nproc="GPUS" if backend == "nccl" else "2",
                          nccl_note=_NCCL_NOTE if backend == "nccl" else "", backend=backend)
    extra = "".join(line + "\n" for line in imports)
    consts = "".join(line + "\n" for line in dict.fromkeys(constants))
    text = (head + extra + (("\n" + consts) if consts else "") + _INIT.format() + "\n"
            + "\n\n".join(s.rstrip() + "\n" for s in sources)
            + f"\n\ndef main(rank, world_size, device):\n    show(rank, \"returned\", {fn.__name__}(rank, world_size))\n"
            + _MAIN)
    compile(text, os.fspath(path), "exec")  # a script that cannot even be parsed is never written
    return _write(text, path)
