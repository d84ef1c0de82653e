"""kiln.install_assumes: an entry's "assumes" checked on the live tensors before its kernel runs.

A gate admits tensors by dtype, shape and strides; some kernels also assume something of the contents. An
attention kernel built for a band mask (causal, sliding window) skips the key tiles outside the band, so it
is exact only where the mask masks everything there: Gemma-4's sliding and full layers pass masks of one
shape and dtype, and a sliding-window kernel would give a full-causal layer the wrong result. The library
entry says what its kernel assumes (src/gen/family.h, kiln_family.assumes: {input name: {"structure":
{"kind": "band", "lower", "upper"[, "inside": 0]}}}; "inside": 0 when the kernel generates the band and
reads no mask, so the mask must be exactly the band, 0 inside it); here the op's kernel checks it first and
runs the entry's eager calls where it does not hold (a miss).

The check reads the whole mask and ends in a host branch, so it is made once per mask and remembered: keyed
on the tensor object (a weak reference: a new object with a recycled id is not taken for the old one), its
version counter and data pointer, so a mask that every layer of a forward reads costs one check a forward.
Not where a compiled graph computes several masks (Policy): Inductor writes a later one into an earlier one's
buffer without bumping its version.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Callable

from kiln.install_gate import _Unsupported

if TYPE_CHECKING:
    from kiln.install import Installation
    from kiln.install_gate import _Gate
    from kiln.install_runtime import Entry

_CACHE_SIZE = 64  # masks remembered; a forward has a few, and dead ones are dropped first


def _band_bound(structure: dict, key: str):
    v = structure.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v)):
        raise _Unsupported(f"its band bound {key} {v!r} is not an integer")
    return None if v is None else int(v)


def checks_of(entry: "Entry") -> list:
    """[(gate input index, lower, upper, inside_zero)] of the entry's assumes; raises _Unsupported for one
    kiln cannot check (another kind of structure, another "inside" than 0, an input the gate does not
    have)."""
    names = [g["name"] for g in entry.inputs]
    checks = []
    for name, what in entry.assumes.items():
        structure = (what or {}).get("structure") if isinstance(what, dict) else None
        if not isinstance(structure, dict) or structure.get("kind") != "band":
            raise _Unsupported(f"its kernel assumes {what!r} of input {name!r}, which kiln cannot check")
        if name not in names:
            raise _Unsupported(f"its kernel assumes a structure of {name!r}, which is not a gate input")
        inside = structure.get("inside")
        if inside is not None and (isinstance(inside, bool) or inside != 0):
            raise _Unsupported(f"its kernel assumes {inside!r} inside the band of {name!r}, "
                               "which kiln cannot check")
        checks.append((names.index(name), _band_bound(structure, "lower"), _band_bound(structure, "upper"),
                       inside is not None))
    return checks


class StructureCache:
    """Whether a tensor's contents hold a band, remembered per tensor object, version and data pointer."""

    def __init__(self):
        # (id(t), lower, upper, inside_zero) -> (weakref(t), version, data_ptr, holds): an answer per band asked
        # of a tensor, so two entries that assume different bands of one mask do not read it again in turns
        self.entries: dict = {}
        self.checks = 0  # how many times a mask was read (the tests count them)

    def holds(self, t, lower, upper, cached: bool = True, inside_zero: bool = False) -> bool:
        """Whether t holds the band [lower, upper] (exactly, 0 inside, with inside_zero;
        capture_stats.band_holds); read again unless cached and the same object, version and data pointer
        were read for that band before."""
        from kiln.capture_stats import band_holds
        key = (id(t), lower, upper, inside_zero)
        seen = self.entries.get(key)
        # an inference tensor (torch.inference_mode) has no version counter: the object and its data pointer
        # alone, so an in-place write into an inference mask between two calls is not seen (docs/install.md)
        state = (None if t.is_inference() else t._version, t.data_ptr())
        if cached and seen is not None and seen[0]() is t and seen[1:3] == state:
            return seen[3]
        self.checks += 1
        result = band_holds(t, lower, upper, inside_zero)
        if len(self.entries) >= _CACHE_SIZE:
            for k in [k for k, v in self.entries.items() if v[0]() is None] or list(self.entries)[:1]:
                del self.entries[k]
        self.entries[key] = (weakref.ref(t), *state, result)
        return result


class Policy:
    """Whether an entry's checks may use the cache. Not where a compiled graph computes two masks that reach
    kiln's ops: Inductor may reuse the first one's buffer (the same tensor object, its version counter
    unchanged: generated kernels write through pointers) for the second after the first one's last use, and a
    cached answer would then be the first mask's (install_inductor's pass says so, `cached` False)."""

    def __init__(self):
        self.cached = True


def guarded_kernel(kernel: Callable, gate: "_Gate", checks: list, fallback: Callable, inst: "Installation",
                   target: str, cache: StructureCache, policy: Policy) -> Callable:
    """kernel, run only where every check holds; elsewhere fallback (the entry's eager calls), its outputs
    put into the gate's layout (the op's fake kernel promised it), counted as a miss of target."""
    import torch
    counts = inst._target_counts.setdefault(target, [0, 0, 0])
    outputs = gate.outputs
    single = len(outputs) == 1

    def laid_out(t, spec):
        shape, stride, dtype = spec
        if tuple(t.stride()) == stride and t.dtype is dtype:
            return t
        out = torch.empty_strided(shape, stride, dtype=dtype, device=t.device)
        out.copy_(t)
        return out

    def kiln_guarded_op(*ts):
        for i, lower, upper, inside_zero in checks:
            if not cache.holds(ts[i], lower, upper, policy.cached, inside_zero):
                counts[1] += 1
                with torch.no_grad():
                    outs = fallback(*ts)
                if single:
                    return laid_out(outs, outputs[0])
                return tuple(laid_out(o, spec) for o, spec in zip(outs, outputs))
        return kernel(*ts)
    return kiln_guarded_op
