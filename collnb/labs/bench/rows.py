"""The bandwidth lab's rows: one dict per measurement (:data:`COLUMNS`), built from the ranks' times,
shown as a pandas ``DataFrame`` when pandas is installed, and saved to / loaded from JSON and CSV."""

from __future__ import annotations

import csv
import json
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, SupportsFloat, SupportsIndex, SupportsInt, cast, overload

import torch

from ...algorithms import algbw, busbw_factor
from ...i18n import _
from .choices import COLUMNS, Row

if TYPE_CHECKING:
    import pandas as pd

    from .measuring import RankTimes

_INT_COLS = ("world_size", "nbytes")
_FLOAT_COLS = ("time_s", "time_min_s", "time_max_s", "algbw_GBps", "busbw_GBps")


def stats(times: Sequence[float]) -> tuple[float, float, float]:
    """``(median, min, max)`` of a list of seconds."""
    return statistics.median(times), min(times), max(times)


def reference_row(name: str, backend: str, nbytes: int, times: Sequence[float], ok: bool, dtype: str = "uint8",
                  world_size: int = 1) -> Row:
    """The row of a physical reference (``algorithm="reference"``, busbw = algbw) from its times (s)."""
    med, lo, hi = stats(times)
    bw = algbw(nbytes, med)
    return Row(primitive=name, algorithm="reference", backend=backend, world_size=world_size, dtype=dtype,
               nbytes=int(nbytes), time_s=med, time_min_s=lo, time_max_s=hi, algbw_GBps=bw, busbw_GBps=bw,
               ok=bool(ok))


def measured_row(primitive: str, alg: str, backend: str, ws: int, dname: str, nbytes: int, per_rank: Sequence[RankTimes],
                 iters: int, timing: str = "collnb") -> Row:
    """One row (dict, :data:`COLUMNS`) from every rank's ``{times, ok}`` (``nbytes``: bytes per rank,
    ``iters``: timed iterations).

    ``timing="collnb"``: ``times`` are seconds per timed iteration; per iteration the slowest
    rank's time counts, and the row has the median, min and max of those.
    ``timing="nccl-tests"``: ``times`` is one mean time per call of a back-to-back loop on each
    rank; the row has their mean over the ranks (what nccl-tests reports), and the fastest and
    slowest rank's as min and max."""
    if timing == "nccl-tests":
        each = [pr["times"][0] for pr in per_rank]
        med, lo, hi = sum(each) / len(each), min(each), max(each)
    else:
        slowest = [max(pr["times"][k] for pr in per_rank) for k in range(iters)]
        med, lo, hi = stats(slowest)
    ab = algbw(nbytes, med)
    return Row(primitive=primitive, algorithm=alg, backend=backend, world_size=ws, dtype=dname, nbytes=int(nbytes),
               time_s=med, time_min_s=lo, time_max_s=hi, algbw_GBps=ab, busbw_GBps=ab * busbw_factor(primitive, ws),
               ok=all(pr["ok"] for pr in per_rank))


def _have_pandas() -> bool:
    try:
        import pandas  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


@overload
def to_table(rows: Iterable[Row] | pd.DataFrame, as_frame: Literal[False]) -> list[Row]: ...
@overload
def to_table(rows: Iterable[Row] | pd.DataFrame, as_frame: bool | None = None) -> list[Row] | pd.DataFrame: ...


def to_table(rows: Iterable[Row] | pd.DataFrame, as_frame: bool | None = None) -> list[Row] | pd.DataFrame:
    """Rows as a pandas ``DataFrame`` (columns :data:`COLUMNS` first) when pandas is installed
    (``as_frame=None``) or asked for (``True``), else the list of dicts."""
    # a DataFrame's records are the rows it was made from
    listed = cast("list[Row]", rows.to_dict("records")) if hasattr(rows, "to_dict") else list(rows)
    if as_frame is None:
        as_frame = _have_pandas()
    if not as_frame:
        return listed
    import pandas as pd  # noqa: PLC0415
    cols = list(COLUMNS) + sorted({k for r in listed for k in r} - set(COLUMNS))
    return pd.DataFrame(listed, columns=cols)


def as_rows(table: object) -> list[Row]:
    """A DataFrame, a list of dicts, or a path (JSON/CSV) -> list of dicts (the bench rows), each
    value of its column's type.

    Raises:
        ValueError: a row without one of :data:`COLUMNS`, or with a value not of its column's kind
            (``None``, text where a number belongs), saying which row and column.
        TypeError: ``table`` is none of these.
    """
    if isinstance(table, (str, os.PathLike)):
        return load(table, as_frame=False)
    if hasattr(table, "to_dict"):
        table = cast("pd.DataFrame", table).to_dict("records")
    if isinstance(table, (dict, str, bytes)) or not isinstance(table, Iterable):
        raise TypeError(_("rows must be a DataFrame, a list of row dicts or a results file's path; got {type}").format(
            type=type(table).__name__))
    return _checked_rows(table)


def _checked_rows(rows: Iterable[object], where: str = "") -> list[Row]:
    """``rows`` (an iterable of dicts) as bench rows of their columns' types (see :func:`_typed`);
    ``where`` starts every message (a file's ``"path: "``).

    Raises:
        ValueError: a row that is not a dict, lacks one of :data:`COLUMNS`, or holds a value not of
            its column's kind, saying which row and column.
    """
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(_("{where}row {i} is not an object (a dict of columns); got {value}").format(
                where=where, i=i, value=repr(r)))
        missing = [c for c in COLUMNS if c not in r]
        if missing:
            raise ValueError(_("{where}row {i} has no {column} column; bench rows have the columns {columns}").format(
                where=where, i=i, column=repr(missing[0]), columns=", ".join(COLUMNS)))
        out.append(_typed(r, _("{where}row {i}").format(where=where, i=i)))
    return out


def _clean(row: Mapping[str, object]) -> dict[str, object]:
    """The :data:`COLUMNS` of ``row``, numpy scalars as Python's (for JSON and CSV)."""
    out = {}
    for k in COLUMNS:
        if k not in row:
            raise ValueError(f"row has no {k!r} column: {row}")
        out[k] = _item(row[k])
    return out


def _item(value: object) -> object:
    """A numpy scalar as Python's (``.item()``); anything else as it is."""
    return value.item() if hasattr(value, "item") else value


def _typed(row: Mapping[str, object], where: str) -> Row:
    """A loaded row with its columns as their types: ints, finite-or-inf floats >= 0 (NaN too, which
    means "not measured"), a bool ``ok``, names as str.

    Raises:
        ValueError: a value that is not of its column's kind (``None``, text, a negative size), saying
            which row and column.
    """
    r = dict(row)
    for c in _INT_COLS:
        v = _item(r[c])
        try:
            if isinstance(v, bool) or isinstance(v, float) and not v.is_integer():
                raise ValueError
            if not isinstance(v, (str, SupportsInt, SupportsIndex)):  # what int() takes; else its TypeError
                raise TypeError
            r[c] = n = int(v)
            if n < 0:
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise ValueError(_("{where}: column {column} must be an int >= 0; got {value}").format(
                where=where, column=repr(c), value=repr(v))) from None
    for c in _FLOAT_COLS:
        v = _item(r[c])
        try:
            if isinstance(v, bool):
                raise ValueError
            if not isinstance(v, (str, SupportsFloat, SupportsIndex)):  # what float() takes; else its TypeError
                raise TypeError
            r[c] = x = float(v)
            if x < 0:
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(_("{where}: column {column} must be a number >= 0; got {value}").format(
                where=where, column=repr(c), value=repr(v))) from None
    for c in ("primitive", "algorithm", "backend", "dtype"):
        if not isinstance(r[c], str):
            raise ValueError(_("{where}: column {column} must be a name (str); got {value}").format(
                where=where, column=repr(c), value=repr(r[c])))
    ok = _item(r["ok"])  # numpy's bool_
    r["ok"] = ok
    if isinstance(ok, bool):
        pass
    elif isinstance(ok, str) and ok.strip().lower() in ("true", "1", "false", "0"):
        r["ok"] = ok.strip().lower() in ("true", "1")
    elif isinstance(ok, int) and ok in (0, 1):
        r["ok"] = bool(ok)
    else:
        raise ValueError(_("{where}: column 'ok' must be true or false; got {value}").format(where=where, value=repr(ok)))
    return cast(Row, r)  # every column of Row checked above


def save_json(rows: object, path: str | os.PathLike[str], *, note: str = "") -> str:
    """Write the rows to ``path`` as JSON: ``{"columns", "machine", "note", "rows"}`` (the machine:
    torch version, CPU count, CUDA devices). Returns the path."""
    cleaned = [_clean(r) for r in as_rows(rows)]
    machine = dict(torch=torch.__version__, cpu_count=os.cpu_count(),
                   cuda_devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                   if torch.cuda.is_available() else [])
    with open(path, "w") as f:
        json.dump(dict(columns=list(COLUMNS), machine=machine, note=note, rows=cleaned), f, indent=1)
        f.write("\n")
    return str(path)


def save_csv(rows: object, path: str | os.PathLike[str]) -> str:
    """Write the rows to ``path`` as CSV with the :data:`COLUMNS` header. Returns the path."""
    cleaned = [_clean(r) for r in as_rows(rows)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(cleaned)
    return str(path)


def note(path: str | os.PathLike[str]) -> str:
    """The ``note`` a JSON results file carries (where and how it was measured), in the language spoken
    when the file has one in it (``note_zh``), or ``""``."""
    from ...i18n import get_language  # noqa: PLC0415 - layer 0

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict):
        return ""
    return str(data.get(f"note_{get_language()}") or data.get("note", ""))


@overload
def load(path: str | os.PathLike[str], as_frame: Literal[False]) -> list[Row]: ...
@overload
def load(path: str | os.PathLike[str], as_frame: bool | None = None) -> list[Row] | pd.DataFrame: ...


def load(path: str | os.PathLike[str], as_frame: bool | None = None) -> list[Row] | pd.DataFrame:
    """Rows from a file :func:`save_json` / :func:`save_csv` wrote (also a bare JSON list of rows),
    e.g. one measured on a GPU machine. Returns what :func:`bench` returns.

    Raises:
        ValueError: the file is not a bench results file (says which column is missing), or a value
            is not of its column's kind (``None``, text where a number belongs, a negative size),
            saying which row and column.
        OSError: it cannot be read.
    """
    path = str(path)
    with open(path) as f:
        text = f.read()
    rows: object
    if path.lower().endswith(".csv"):
        rows = list(csv.DictReader(text.splitlines()))
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(_("{path} is not JSON: {error}").format(path=path, error=exc)) from None
        except RecursionError:
            raise ValueError(_("{path} is JSON nested too deeply to be bench results").format(path=path)) from None
        rows = data["rows"] if isinstance(data, dict) and "rows" in data else data
        if not isinstance(rows, list):
            raise ValueError(_("{path}: expected a list of rows or {example}").format(path=path, example="{'rows': [...]}"))
    out = _checked_rows(rows, f"{path}: ")
    return to_table(out, as_frame)
