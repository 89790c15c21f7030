"""The torch releases collnb is tested on, and what torch does differently from one release to the next.

collnb accepts the range in ``pyproject.toml`` (:data:`TESTED`: the oldest release the whole course was
run on, the pinned one, the newest), so a Colab or Binder kernel keeps the torch it has. Where torch's
behaviour differs between releases in a way a learner sees (a placement change torch now accepts, the
collectives a function issues inside, a message's words), the difference is one :class:`Behaviour` of
:data:`BEHAVIOURS`: what releases before it do, what it and later ones do, the first release that does
it, and where in torch's source that is. Lessons and tests ask :func:`applies` and say which release
does what (:func:`describe`), instead of stating one release's behaviour as timeless.

Whether a behaviour applies is decided by the installed torch's version (``torch.__version__``, a
``torch.torch_version.TorchVersion`` that compares with strings): each ``since`` was read in torch's
own source of every release from 2.6.0 to 2.15.0 and seen on real ranks on the tested ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from .i18n import N_, _

__all__ = ["TESTED", "TestedRange", "Behaviour", "BEHAVIOURS", "applies", "describe", "behaviour",
           "installed", "standing", "release"]


@dataclass(frozen=True)
class TestedRange:
    """The torch releases collnb's test suite and notebooks run on (``.ci/run``).

    Attributes:
        floor: the oldest release on which the whole course runs (the fast tests and every notebook).
        pinned: the release ``constraints.txt`` pins: the whole suite runs on it.
        newest: the newest release tried (the fast tests and every notebook).
        tried_below: releases below the floor that were tried, each with what breaks there.
    """

    floor: str
    pinned: str
    newest: str
    tried_below: tuple[tuple[str, str], ...]

    @property
    def requirement(self) -> str:
        """The requirement ``pyproject.toml`` states: ``torch>=FLOOR,<=NEWEST``'s form with the next
        minor release excluded (``torch>=2.13,<2.16``)."""
        major, minor = (int(x) for x in self.newest.split(".")[:2])
        return f"torch>={_minor(self.floor)},<{major}.{minor + 1}"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


#: The tested range. Kept equal to pyproject.toml's torch requirement and README's "Torch versions"
#: (tests/test_torch_versions.py checks both).
TESTED = TestedRange(
    floor="2.13.0", pinned="2.13.0", newest="2.15.0",
    tried_below=(
        ("2.12.1", "the fast tests pass but 2; notebooks 05, 06 and 11 fail: they teach torch.distributed's "
                   "all_gather_single and reduce_scatter_single, which arrive in 2.13"),
        ("2.6.0", "79 of 1479 fast tests fail, 73 from torch (gloo without list all_to_all or reduce_scatter, "
                  "AVG or coalesced ops; no Flight Recorder for gloo; distribute_tensor without src_data_rank=; "
                  "FSDP2 fails on CPU); notebooks 07, 12 and 18 raise in 1, 10 and 7 cells"),
    ),
)


@dataclass(frozen=True)
class Behaviour:
    """One thing torch does differently from release ``since`` on.

    Attributes:
        key: a short name (``"dtensor_shard_to_partial"``).
        since: the first release that does ``after`` (``"2.14"``).
        before: what earlier releases do (English, marked with :func:`N_`; :func:`describe` translates).
        after: what ``since`` and later releases do.
        source: where in torch's source (file and function, or pull request) the difference is.
    """

    key: str
    since: str
    before: str
    after: str
    source: str


#: Every version difference collnb's lessons, checks and tests depend on.
BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour(
        key="dtensor_shard_to_partial",
        since="2.14",
        before=N_("DTensor.redistribute refuses every change into a Partial placement "
                  "(\"redistributing to Partial is for internal use only!\")"),
        after=N_("DTensor.redistribute accepts Shard(d) -> Partial(sum): each rank zero-fills the rest of the "
                 "tensor around its shard, with no communication; every other change into a Partial is refused "
                 "(\"only Shard to Partial(sum) redistribution is supported!\")"),
        source="DTensor.redistribute in torch/distributed/tensor/_api.py",
    ),
    Behaviour(
        key="all_gather_object_single",
        since="2.15",
        before=N_("all_gather_object gathers the sizes and the pickled bytes with two list all_gathers"),
        after=N_("all_gather_object gathers the sizes and the pickled bytes with two all_gather_single calls "
                 "(one flat output tensor each)"),
        source="all_gather_object in torch/distributed/distributed_c10d.py",
    ),
    Behaviour(
        key="pipelining_inference_vote",
        since="2.15",
        before=N_("a pipeline schedule's first step lets the stages vote on static shapes with one 4-byte send/recv "
                  "passed from the first stage to the last and back, then sends each stage's output metadata on "
                  "with send_object_list/recv_object_list"),
        after=N_("a pipeline schedule's first step lets the stages vote on static shapes with one all_reduce(MIN) "
                 "over every stage's rank, connects each pair of neighbouring stages with one 4-byte isend/irecv "
                 "(an all_reduce after each round of pairs), then sends each stage's output metadata on with "
                 "send_object_list/recv_object_list"),
        source="_warmup_forward_vote in torch/distributed/pipelining/stage.py (2.13); "
               "_initialize_pipeline_distributed_state in schedules.py and _preconnect_shared_p2p_edges in "
               "_p2p.py (2.15)",
    ),
)

_BY_KEY = {b.key: b for b in BEHAVIOURS}


def installed() -> str:
    """The installed torch's release without a local build tag (``"2.15.0"`` for ``2.15.0+cu132``).
    (torch is imported here, not with this module: ``.ci/run`` and ``collnb doctor`` read :data:`TESTED`
    without it.)"""
    import torch  # noqa: PLC0415

    return str(torch.__version__).split("+", 1)[0]


def release(version: str) -> tuple[int, ...]:
    """``"2.15.0"`` (or ``"2.15.0+cpu"``, ``"2.16.0a0+git..."``) as ``(2, 15, 0)``: the numeric release
    part, for comparisons.

    Raises:
        ValueError: ``version`` does not start with a number.
    """
    parts = []
    for piece in version.split("+", 1)[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    if not parts:
        raise ValueError(f"not a torch version: {version!r}")
    return tuple(parts)


def behaviour(key: str) -> Behaviour:
    """The :class:`Behaviour` named ``key``.

    Raises:
        KeyError: no such behaviour, naming the known keys.
    """
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no torch behaviour named {key!r}; known: {', '.join(_BY_KEY)}") from None


def applies(key: str, version: str | None = None) -> bool:
    """Whether the installed torch (or release ``version``) does what :attr:`Behaviour.after` says.

    Raises:
        KeyError: no behaviour named ``key``.
    """
    b = behaviour(key)
    return release(version or installed()) >= release(b.since)


def describe(key: str, version: str | None = None) -> str:
    """One line for a lesson: what the installed torch (or ``version``) does, and since which release
    (``"torch 2.15.0 (2.14 and later): ..."`` or ``"torch 2.13.0 (before 2.14): ..."``), translated.

    Raises:
        KeyError: no behaviour named ``key``.
    """
    b = behaviour(key)
    v = version or installed()
    if applies(key, v):
        return _("torch {version} ({since} and later): {what}").format(version=v, since=b.since, what=_(b.after))
    return _("torch {version} (before {since}): {what}").format(version=v, since=b.since, what=_(b.before))


def standing(version: str | None = None) -> tuple[str, str]:
    """Where the installed torch (or ``version``) stands in :data:`TESTED`: ``(kind, line)`` with
    ``kind`` one of ``"pinned"``, ``"tested"`` (the floor or the newest), ``"inside"`` (between them,
    not itself tested), ``"below"``, ``"above"``, and a translated line that says so and what to do."""
    v = version or installed()
    r = release(v)
    lo, hi = release(TESTED.floor), release(TESTED.newest)
    if r[:3] == release(TESTED.pinned)[:3]:
        return "pinned", _("torch {version} is the release collnb pins and tests in full").format(version=v)
    if r[:3] in (lo[:3], hi[:3]):
        return "tested", _("torch {version} is tested (the fast tests and every notebook)").format(version=v)
    if r < lo:
        return "below", _("torch {version} is older than the oldest tested release ({floor}): some lessons will "
                          "fail; install torch>={floor}").format(version=v, floor=TESTED.floor)
    if r[:2] > hi[:2]:
        return "above", _("torch {version} is newer than the newest tested release ({newest}): lessons may show "
                          "what older releases did; please report what differs").format(version=v, newest=TESTED.newest)
    return "inside", _("torch {version} lies inside the tested range ({floor} to {newest}) but was not itself "
                       "tested").format(version=v, floor=TESTED.floor, newest=TESTED.newest)
