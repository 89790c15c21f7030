#!/usr/bin/env python3
"""Make the README's two pictures from real ranks (``make figures``; ``make docs`` checks them).

* ``docs/img/all_reduce.png``: ``collnb.run("all_reduce", world_size=4)``, the before | after
  heatmap of a real Gloo all_reduce on 4 ranks (rank r, chunk c holds 10·r + c);
* ``docs/img/ring_all_reduce.gif``: ``collnb.run_algorithm("all_reduce", "ring", world_size=4)``
  replayed round by round (send/recv on 4 real ranks), written by ``collnb.save_gif``.

Both are checked before they are written: the run must match its reference (``ok``), the trace
must agree with the built-in collective, and each file must stay small (under ``MAX_BYTES``) so
the repository does not grow with every rebuild.

Usage: ``python tools/readme_figures.py [OUT_DIR]`` (default ``docs/img``; ``make figures``). ``make docs``
writes them into ``docs/_build/img``: the replay shows measured round times, so a committed GIF
rewritten by every book build would leave every clone's tree changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
MAX_BYTES = 300_000  # a 7-frame replay GIF with the ≥ 10 px labels is ~230 KB
HEATMAP, REPLAY = "all_reduce.png", "ring_all_reduce.gif"


def make(out: Path = OUT) -> dict[str, int]:
    """Write both figures into ``out``; returns their sizes in bytes.

    Raises:
        RuntimeError: a run did not match its reference, or a file came out over ``MAX_BYTES``.
    """
    sys.path.insert(0, str(ROOT))
    import collnb

    out.mkdir(parents=True, exist_ok=True)
    try:
        result = collnb.run("all_reduce", world_size=4)
        if not result.ok:
            raise RuntimeError(f"all_reduce on 4 ranks did not match its reference:\n{result.summary()}")
        result.save(out / HEATMAP)
        trace = collnb.run_algorithm("all_reduce", "ring", world_size=4)
        if trace.matches_builtin is not True:
            raise RuntimeError(f"the ring all_reduce trace disagrees with dist.all_reduce:\n{trace.summary()}")
        collnb.save_gif(trace, out / REPLAY, fps=1.0, cell=36)
    finally:
        collnb.shutdown()
    sizes = {name: (out / name).stat().st_size for name in (HEATMAP, REPLAY)}
    big = {n: s for n, s in sizes.items() if s > MAX_BYTES}
    if big:
        raise RuntimeError(f"README figures over {MAX_BYTES} bytes: {big}")
    return sizes


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    for name, size in make(target).items():
        print(f"{target / name}: {size} bytes")
