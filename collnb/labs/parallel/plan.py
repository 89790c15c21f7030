"""Which parallelism runs on which mesh dimension: a :class:`Plan` (``Plan.parse("dp_shard=2, tp=2")``),
its mesh coordinates, data shards and process groups, and the checks that a model fits it
(notebook 20; :mod:`.composed` runs it).

Roles, with torchtitan's dimension names (``torchtitan/distributed/parallel_dims.py``), from its
outermost to its innermost: ``pp``, ``dp_replicate``, ``dp_shard``, ``cp``, ``tp``, and ``ep`` for
experts. A plan lists its dimensions outermost first; rank ``r``'s coordinates are ``r`` written in
the sizes, row-major, as ``init_device_mesh`` lays a mesh out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TypedDict, Unpack

from ...i18n import N_, _
from .transformer import TransformerConfig

__all__ = ["ROLES", "DATA_ROLES", "MAX_WORLD_SIZE", "Plan", "PlanOptions"]

#: Every role a mesh dimension may play (module doc), in torchtitan's outer-to-inner order.
ROLES = ("pp", "dp_replicate", "dp_shard", "cp", "ep", "tp")
#: The roles whose ranks hold different rows of the batch.
DATA_ROLES = ("dp_replicate", "dp_shard", "ep")
#: The most ranks a plan may use (collnb.launch's limit on this course's machines).
MAX_WORLD_SIZE = 8
_SCHEDULES = ("gpipe", "1f1b")


class PlanOptions(TypedDict, total=False):
    """A :class:`Plan`'s fields besides its dimensions (:meth:`Plan.parse`'s keywords)."""

    attention: str
    schedule: str
    microbatches: int


@dataclass(frozen=True)
class Plan:
    """Which parallelism runs on which mesh dimension.

    Attributes:
        dims: ``((role, size), ...)``, outermost first; roles from :data:`ROLES`, each at most once.
        attention: with ``cp``: ``"ring"`` or ``"ulysses"``.
        schedule: with ``pp``: ``"gpipe"`` or ``"1f1b"``.
        microbatches: with ``pp``: microbatches per step (the local batch must split evenly).

    Raises:
        ValueError: an unknown or repeated role, a size < 2, more than :data:`MAX_WORLD_SIZE` ranks,
            an unknown attention or schedule, or ``dp_replicate`` inside (after) ``dp_shard``/``cp``.
    """

    dims: tuple[tuple[str, int], ...]
    attention: str = "ring"
    schedule: str = "gpipe"
    microbatches: int = 2

    def __post_init__(self) -> None:
        dims = tuple((str(role), int(size)) for role, size in self.dims)
        object.__setattr__(self, "dims", dims)
        roles = [role for role, _size in dims]
        unknown = [role for role in roles if role not in ROLES]
        if not dims:
            raise ValueError(_("a plan needs at least one dimension, as role=size (e.g. 'dp_shard=2, tp=2'), roles "
                               "from {roles}").format(roles=", ".join(ROLES)))
        if unknown:
            raise ValueError(_("unknown role {role} in {dims}: the roles are {roles} (lower case)").format(
                role=repr(unknown[0]), dims=self.text(), roles=", ".join(ROLES)))
        if len(set(roles)) != len(roles):
            raise ValueError(_("a plan names each role at most once, from {roles}; got {dims}").format(
                roles=", ".join(ROLES), dims=self.text()))
        if any(size < 2 for _role, size in dims):
            raise ValueError(_("every mesh dimension needs at least 2 ranks (leave a role out instead); got {dims}").format(
                dims=self.text()))
        if self.world_size > MAX_WORLD_SIZE:
            raise ValueError(_("the plan {dims} needs {n} ranks; at most {most}").format(
                dims=self.text(), n=self.world_size, most=MAX_WORLD_SIZE))
        if self.attention not in ("ring", "ulysses"):
            raise ValueError(_("attention must be 'ring' or 'ulysses'; got {value}").format(value=repr(self.attention)))
        if self.schedule not in _SCHEDULES:
            raise ValueError(_("schedule must be 'gpipe' or '1f1b'; got {value}").format(value=repr(self.schedule)))
        if self.microbatches < 1:
            raise ValueError(_("microbatches must be >= 1; got {value}").format(value=self.microbatches))
        sharded = [i for i, role in enumerate(roles) if role in ("dp_shard", "cp")]
        if "dp_replicate" in roles and sharded and roles.index("dp_replicate") > sharded[0]:
            raise ValueError(_("HSDP's replicate dimension must lie outside (before) dp_shard and cp; got {dims}").format(
                dims=self.text()))

    @classmethod
    def parse(cls, text: str, **kwargs: Unpack[PlanOptions]) -> Plan:
        """``Plan.parse("dp_shard=2, tp=2")``: the dimensions as ``role=size``, outermost first, separated by
        ``,``, ``×`` or a lone ``x`` (``"dp_shard=2 x tp=2"``: ``×`` is hard to type)."""
        dims: list[tuple[str, int]] = []
        for part in re.sub(r"\s[xX]\s", ",", text.replace("×", ",")).split(","):
            if part.strip():
                role, _eq, size = part.partition("=")
                if size.strip().lstrip("-").isdigit() and int(size) < 2:  # 'tp=-2': its size, not its form
                    raise ValueError(_("every mesh dimension needs at least 2 ranks (leave a role out instead); got "
                                       "{dims}").format(dims=part.strip()))
                if not size.strip().isdigit():
                    raise ValueError(_("write each dimension as role=size (e.g. 'dp_shard=2, tp=2'); got {value}").format(
                        value=repr(part.strip())))
                dims.append((role.strip(), int(size)))
        return cls(tuple(dims), **kwargs)

    def text(self) -> str:
        """``"dp_shard=2 × tp=2"``."""
        return " × ".join(f"{role}={size}" for role, size in self.dims)

    @property
    def names(self) -> tuple[str, ...]:
        """The mesh dimension names (the roles), outermost first."""
        return tuple(role for role, _size in self.dims)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The mesh shape."""
        return tuple(size for _role, size in self.dims)

    @property
    def world_size(self) -> int:
        """Ranks the plan uses: the product of the sizes."""
        return math.prod(self.sizes)

    def size(self, role: str) -> int:
        """The size of ``role``'s dimension, ``1`` when the plan has none."""
        return dict(self.dims).get(role, 1)

    def has(self, role: str) -> bool:
        """Whether a dimension plays ``role``."""
        return role in self.names

    @property
    def batch_shards(self) -> int:
        """How many shards the batch is cut into (the data roles' sizes multiplied)."""
        return math.prod(self.size(role) for role in DATA_ROLES)

    def coordinates(self, rank: int) -> dict[str, int]:
        """``{role: index}`` of ``rank`` on the mesh (row-major, as ``init_device_mesh``)."""
        out: dict[str, int] = {}
        rest = rank
        for role, size in reversed(self.dims):
            out[role] = rest % size
            rest //= size
        return {role: out[role] for role in self.names}

    def batch_index(self, rank: int) -> int:
        """Which batch shard ``rank`` trains on: its data coordinates read as one number (mesh order)."""
        index = 0
        coords = self.coordinates(rank)
        for role in self.names:
            if role in DATA_ROLES:
                index = index * self.size(role) + coords[role]
        return index

    def groups(self, role: str) -> list[list[int]]:
        """Every process group of dimension ``role``: lists of global ranks (the ranks that differ
        only in that coordinate), each in that coordinate's order."""
        seen: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            coords = self.coordinates(rank)
            key = tuple(v for k, v in coords.items() if k != role)
            seen.setdefault(key, []).append(rank)
        return list(seen.values())

    def check(self, config: TransformerConfig, batch: int, seq_len: int) -> None:
        """Raise ``ValueError`` (saying what to change) when the model, batch or sequence do not
        fit the plan: sizes that do not split, or a pairing this module does not build."""
        def need(ok: bool, message: str, **kw: object) -> None:
            if not ok:
                raise ValueError(_(message).format(plan=self.text(), **kw))

        moe_only = N_("this module runs MoE blocks with ep or data parallelism, not with {role} ({plan})")
        need(batch % self.batch_shards == 0, N_("the batch ({batch}) must split into {n} equal shards for {plan}"),
             batch=batch, n=self.batch_shards)
        if self.has("tp"):
            t = self.size("tp")
            need(config.heads % t == 0 and config.ffn % t == 0,
                 N_("tensor parallelism over {t} ranks needs heads ({heads}) and ffn ({ffn}) to be multiples of {t}"),
                 t=t, heads=config.heads, ffn=config.ffn)
            need(not config.experts, moe_only, role="tp")
        if self.has("cp"):
            need(seq_len % self.size("cp") == 0, N_("the sequence ({s}) must split into {n} equal parts for {plan}"),
                 s=seq_len, n=self.size("cp"))
            need(not config.experts, moe_only, role="cp")
            if self.attention == "ulysses":
                heads = config.heads // self.size("tp")
                need(heads % self.size("cp") == 0, N_("Ulysses needs the heads per rank ({heads}) to be a multiple of "
                                                      "cp ({n}); use attention='ring'"), heads=heads, n=self.size("cp"))
        if self.has("pp"):
            need(config.blocks % self.size("pp") == 0, N_("{blocks} blocks do not cut into {n} equal pipeline stages"),
                 blocks=config.blocks, n=self.size("pp"))
            local = batch // self.batch_shards
            need(local % self.microbatches == 0, N_("the local batch ({local}) must split into {m} microbatches"),
                 local=local, m=self.microbatches)
            need(not config.experts, moe_only, role="pp")
        if self.has("ep"):
            need(config.experts > 0 and config.experts % self.size("ep") == 0,
                 N_("expert parallelism over {n} ranks needs a multiple of {n} experts (config.experts = {e})"),
                 n=self.size("ep"), e=config.experts)
            need(not (self.has("dp_shard") or self.has("cp")),
                 N_("this module runs ep beside dp_replicate (gradients all-reduced), not beside dp_shard or cp ({plan})"))


