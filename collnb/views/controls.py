"""The primitive explorer's control logic: every control offers only the choices that are valid
for the current primitive, backend and dtype (what the backend accepted on real ranks, the ranks
of this world size), an inputs preset sets the dtype/op/world size its lesson needs, and the
panel's notes say what was changed and why.
"""

from __future__ import annotations

from .. import collectives
from ..units import format_bytes
from ..vocabulary import check_rank, dtype_name, op_hint, op_name
from .presets import INPUT_PRESETS, about_text, preset_label, presets_for
from .static import esc

__all__ = ["ControlLogic"]


class ControlLogic:
    """The control logic of :class:`collnb.views.explorer.Explorer` (a base class: it reads and sets
    the explorer's ``controls``, ``backend_infos``, ``launch_kwargs``, ``_notes``, ``_info`` and its
    HTML labels)."""

    @staticmethod
    def _preset_label(key, world_size, dtype=None):
        return preset_label(key, world_size, dtype)

    def _support(self, backend):
        return collectives.backend_support(backend, **self.launch_kwargs)

    def _choose(self, wanted, normalise, valid, preferred):
        """``(value, refused)``: ``wanted`` normalised (a name for an alias, dtype or ReduceOp)
        when it is in ``valid``; otherwise ``preferred`` (or the first valid value) and the
        refused name. A value that does not normalise adds its error to the notes and is
        refused silently (``refused`` is None)."""
        try:
            name = normalise(wanted)
        except (ValueError, TypeError) as exc:
            self._notes.append(str(exc))
            name = None
        if name in valid:
            return name, None
        return (preferred if preferred in valid else valid[0]), name

    def _sync_controls(self, want_dtype=None, want_op=None, want_root=None):
        """Make every control offer only valid choices for the current primitive/backend/dtype,
        keeping the current values where they stay valid. Called with ``_syncing`` raised."""
        c = self.controls
        spec = collectives.SPECS[c["primitive"].value]
        backend = c["backend"].value
        info = self.backend_infos[backend]
        ws_max = info["max_world_size"]
        if c["world_size"].max != ws_max:
            if c["world_size"].value > ws_max:
                c["world_size"].value = ws_max
            c["world_size"].max = ws_max
        ws = c["world_size"].value

        tensor = spec.kind == "tensor"
        c["dtype"].layout.display = None if tensor else "none"
        c["inputs"].layout.display = None if tensor else "none"
        c["chunk_size"].layout.display = None if tensor else "none"
        self.length_label.layout.display = None if tensor else "none"
        c["op"].layout.display = None if spec.reduces else "none"
        c["root"].layout.display = None if spec.rooted else "none"
        c["root"].description = spec.root_name or "root"

        if tensor:
            sup = self._support(backend)
            dtypes = list(sup.dtypes(spec.name))
            if not dtypes:
                raise RuntimeError(f"{backend} ran {spec.name} with no dtype here (detected on real ranks)")
            cur, refused = self._choose(want_dtype if want_dtype is not None else c["dtype"].value,
                                        dtype_name, dtypes, "float32")
            if refused is not None and want_dtype is not None:
                self._notes.append(
                    f"{backend} cannot run {spec.name} on {refused} tensors (detected on real ranks of torch "
                    f"{sup.torch_version}); dtypes it accepts: {', '.join(dtypes)}. Showing {cur}.")
            if list(c["dtype"].options) != dtypes:
                c["dtype"].options = dtypes
            c["dtype"].value = cur
            if spec.reduces:
                ops = list(sup.ops(spec.name, cur))
                want, refused = self._choose(want_op if want_op is not None else c["op"].value,
                                             op_name, ops, "sum")
                if refused is not None:
                    self._notes.append(
                        f"op {refused.upper()} is not valid for {cur} with {backend} in {spec.name} (detected on "
                        f"real ranks; valid: {', '.join(o.upper() for o in ops)}).{op_hint(refused, cur)} "
                        f"Showing {want.upper()}.")
                if list(c["op"].options) != ops:
                    c["op"].options = ops
                c["op"].value = want
        if spec.rooted:
            r = want_root if want_root is not None else c["root"].value
            c["root"].max = max(ws - 1, 0)  # clamps the value when the world shrinks
            try:
                r = check_rank(r, ws, spec.root_name)
            except (TypeError, ValueError) as exc:
                fixed = min(max(r, 0), ws - 1) if isinstance(exc, ValueError) else 0
                if want_root is not None:
                    self._notes.append(f"{exc}; showing {spec.root_name}={fixed}")
                r = fixed
            c["root"].value = r
        if tensor:
            keys = presets_for(spec.name)
            cur = c["inputs"].value
            if cur not in keys:
                self._info.append(f"the inputs preset “{self._preset_label(cur, ws)}” shows nothing for {spec.name}; "
                                  f"showing the teaching values")
                cur = "teaching"
            opts = [(self._preset_label(k, ws, c["dtype"].value), k) for k in keys]
            if [tuple(o) for o in c["inputs"].options] != opts:
                c["inputs"].options = opts
            c["inputs"].value = cur
        self._update_length()
        self._update_about()

    def _update_length(self):
        c = self.controls
        spec = collectives.SPECS[c["primitive"].value]
        if spec.kind != "tensor":
            return
        import torch
        ws, cs = c["world_size"].value, c["chunk_size"].value
        n = max(spec.n_in(ws, r, c["root"].value if spec.rooted else 0) for r in range(ws))
        itemsize = getattr(torch, c["dtype"].value).itemsize
        self.length_label.value = (f"<span title='tensor length per rank'>{n} chunk(s) × {cs} = "
                                   f"<b>{n * cs}</b> elements ({format_bytes(n * cs * itemsize)})</span>")

    def _update_backend_note(self):
        down = [f"<b>{b}</b> unavailable: {esc(i['reason'])}" for b, i in self.backend_infos.items()
                if not i["available"]]
        self.backend_note.value = ("<span style='color:#666;font-size:90%'>" + "<br>".join(down) + "</span>"
                                   if down else "")

    def _update_note(self):
        parts = []
        if self._info:
            parts.append("<div class='collnb-info' style='color:#1F4E79'>" +
                         "<br>".join("ℹ " + esc(n) for n in self._info) + "</div>")
        if self._notes:
            parts.append("<div style='color:#8a5300'>" +
                         "<br>".join("⚠ " + esc(n) for n in self._notes) + "</div>")
        self.note.value = "".join(parts)

    def _update_about(self):
        text = about_text(self.spec, self.controls["op"].value)
        self.about.value = f"<div style='color:#333;line-height:1.4;max-width:900px'>{text}</div>"

    def _after_change(self, name):
        c = self.controls
        if name == "inputs":
            key = c["inputs"].value
            effect = INPUT_PRESETS[key][2]
            spec = self.spec
            if effect and spec.kind == "tensor":
                dt, op, min_ws = effect
                before = self.params()
                sup = self._support(c["backend"].value)
                ws = c["world_size"].value
                if ws < min_ws <= c["world_size"].max:
                    c["world_size"].value = min_ws
                if dt == "float":
                    import torch
                    dt = before["dtype"] if getattr(torch, before["dtype"]).is_floating_point else "float32"
                if dt in sup.dtypes(spec.name):
                    self._sync_controls(want_dtype=dt, want_op=op if spec.reduces and op and op in
                                        sup.ops(spec.name, dt) else None)
                else:
                    self._sync_controls()
                after = self.params()
                changed = [f"{k.replace('_', ' ')} {before[k]} → {after[k]}" for k in ("dtype", "op", "world_size")
                           if before[k] != after[k]]
                if before["world_size"] != after["world_size"]:
                    changed[-1] += f" (the effect needs at least {min_ws} ranks)"
                kept = [] if before["world_size"] != after["world_size"] else [f"world size {ws} kept"]
                if changed:
                    self._info.append(f"preset “{self._preset_label(key, after['world_size'])}” set " + ", ".join(changed) +
                                      ("; " + kept[0] if kept else ""))
                else:
                    self._info.append(f"preset “{self._preset_label(key, after['world_size'])}”: dtype {after['dtype']} as set; "
                                      + kept[0])
                return
        self._sync_controls()

