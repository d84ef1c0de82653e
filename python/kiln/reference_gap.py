"""The reference's own rounding error on float32 outputs (and 16-bit ones of chains), for the gate's tolerance.

A float32 reference is itself rounded: a sum of 2048 float32 values in PyTorch's order can sit further
from the exact sum than the gate's float32 tolerance (atol 1e-5 + rtol 1e-4 |ref|) allows near a
cancelling column, so a kernel that sums exactly, or in another order, fails where eager's order alone
passes (seen in CI and on the H200 for sum over axis 1 of [64, 8192, 2048]). So the reference helper
runs the reference once more with its float32 inputs in float64 and records, per output, points
(x, y) = (|ref|, 2 |ref - ref64|) summarised from above: a kernel as close to the exact answer as the
reference passes with any extra atol a and rtol r that put every point inside, y <= atol + a + (rtol + r) x
(|out - ref| <= |out - ref64| + |ref64 - ref|, and both are at most the reference's own gap); the gate
takes the pair with the least a + r RMS (refdata.c), and
likewise 2 ||ref - ref64|| / ||ref|| is added to the relative L2 bound. Rounding is small against the
output's typical magnitude (its RMS, recorded too); a gap that is not (a comparison or a floor that
lands the other way in float64: a jump, not rounding) would widen the tolerance of every element, so
the gate applies none beyond ten times rtol x RMS. The
points come from the reference alone, before any candidate runs, so no kernel can widen them; the C
gate (kiln_refworkload.gap, eval.c) owns the tolerance and applies the rule. Elements are binned by
|ref|'s float32 exponent and top four mantissa bits (sixteen bins an octave, integer work on the bits);
a bin keeps its smallest |ref| and largest gap, which bounds all of its elements from above (by at
most 6.25 % of rtol |ref|), and points that another point dominates (smaller |ref|, larger gap) are
dropped: a manifest holds a handful of pairs per output. Gaps within 2^-20 |ref| are left out (no
float32 tolerance has an rtol that tight), which leaves a tolerance without rtol short of what it
would need there: the safe side. On the CPU, a set whose float32 inputs exceed CPU_LIMIT_BYTES gets
no float64 run (it would take longer than the reference data itself; the GPU is where real sizes are
gated).

A reference of several ops (a captured chain or module) in 16-bit floats rounds every intermediate, where
a fused kernel keeps them in fp32: GELU-tanh(x·wgᵀ) · (x·wuᵀ) in bfloat16 rounds the gate's result before
GELU, whose relative error near g = -3 is about ten times its input's, so a kernel that rounds once sat
2.5 % from eager on 17 of 37.7 million elements of Gemma-4's gated MLP front (the H200, its bfloat16
tolerance rtol 2e-2). Their 16-bit outputs get the same treatment: the wider run has the 16-bit float
inputs in float32, and the gap is the 16-bit reference's from that run's float32 output (a gap of plain
output rounding is under any 16-bit tolerance's rtol and widens nothing). A cast to a 16-bit float inside
the chain (an eager attention block's softmax back to bfloat16 before its second matmul) stays float32 in the
wider run, and an op whose float operands then differ gets them in the widest (_WidenCasts).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MANTISSA_BITS_KEPT = 4  # a bin: one float32 exponent and the top 4 mantissa bits of |ref|
_SHIFT = 23 - MANTISSA_BITS_KEPT
_N_BINS = 1 << (31 - _SHIFT)  # every non-negative float32 bit pattern, infinities and NaN included
CHUNK_ELEMENTS = 1 << 24  # float64 temporaries of one step: 128 MiB each
CPU_LIMIT_BYTES = 256 << 20


class GapBins:
    """Per output, the running bins of one workload (several sets)."""

    def __init__(self) -> None:
        self.x_min: dict[str, torch.Tensor] = {}
        self.y_max: dict[str, torch.Tensor] = {}
        self.rel_l2: dict[str, float] = {}
        self.rms: dict[str, float] = {}

    def add(self, name: str, ref: torch.Tensor, ref64: torch.Tensor) -> None:
        """Adds one set's float32 output ref and its float64 counterpart. Elements where either is not
        finite are left to the gate's own rule for them (a kernel must match them exactly)."""
        a, b = ref.reshape(-1), ref64.reshape(-1)
        if name not in self.x_min:
            self.x_min[name] = torch.full((_N_BINS,), float("inf"), dtype=torch.float32)
            self.y_max[name] = torch.zeros(_N_BINS, dtype=torch.float64)
        x_min = self.x_min[name].to(a.device)
        y_max = self.y_max[name].to(a.device)
        sq_err = sq_ref = 0.0
        n_finite = 0
        for start in range(0, a.numel(), CHUNK_ELEMENTS):
            r = a[start:start + CHUNK_ELEMENTS]
            r64 = r.double()
            y = r64.sub(b[start:start + CHUNK_ELEMENTS]).abs_().mul_(2.0)
            fin = torch.isfinite(y)  # not finite where either side is not
            y.nan_to_num_(0.0, 0.0, 0.0)
            r64.masked_fill_(~fin, 0.0)  # not mul_(fin): NaN x 0 is NaN (a fully masked softmax row)
            sq_err += float(torch.dot(y, y)) / 4
            sq_ref += float(torch.dot(r64, r64))
            n_finite += int(fin.sum())
            # only gaps over 2^-20 |ref| (16 float32 ulps) can need an rtol of 1e-6 or more to widen:
            # the rest (plain rounding of one result, most elements) never reach the bins, which keeps
            # the bins' atomics on the GPU from queueing on the few bins an output's values fall in
            idx = torch.gt(y, r64.abs_().mul_(2.0 ** -20)).nonzero().squeeze(1)
            if idx.numel():
                x = r[idx].abs()
                key = x.view(torch.int32).bitwise_right_shift(_SHIFT).long()
                x_min.scatter_reduce_(0, key, x, "amin")
                y_max.scatter_reduce_(0, key, y[idx], "amax")
            del r64, y, fin, idx
        self.x_min[name] = x_min.cpu()
        self.y_max[name] = y_max.cpu()
        if sq_ref > 0:  # the same for the relative L2 test: twice the reference's own
            self.rel_l2[name] = max(self.rel_l2.get(name, 0.0), 2.0 * (sq_err / sq_ref) ** 0.5)
        if n_finite:  # the output's typical magnitude, the smallest of the sets'
            rms = (sq_ref / n_finite) ** 0.5
            self.rms[name] = min(self.rms.get(name, rms), rms)

    def manifest(self) -> dict[str, dict]:
        """Per output {"points": [[|ref|, gap], ...], "rel_l2": R, "rms": S} for the manifest."""
        points = self.points()
        out = {}
        for name in points:
            rel_l2, rms = self.rel_l2.get(name, 0.0), self.rms.get(name, 0.0)
            if math.isfinite(rel_l2) and math.isfinite(rms):  # JSON has no NaN: no gap rather than none
                out[name] = {"points": points[name], "rel_l2": rel_l2, "rms": rms}
        return out

    def points(self) -> dict[str, list[list[float]]]:
        """Per output, the (|ref|, gap) pairs that no other pair dominates, |ref| ascending."""
        out = {}
        for name, x_min in self.x_min.items():
            y_max = self.y_max[name]
            keep = (y_max > 0) & torch.isfinite(x_min)
            pairs = sorted(zip(x_min[keep].double().tolist(), y_max[keep].tolist()))
            frontier: list[list[float]] = []
            for x, y in pairs:  # ascending |ref|: a point counts only with a larger gap than all before
                if not frontier or y > frontier[-1][1]:
                    frontier.append([x, y])
            out[name] = frontier
        return out


HALF = ("float16", "bfloat16")
_WIDER = {torch.float32: torch.float64, torch.float16: torch.float32, torch.bfloat16: torch.float32}
_SIXTEEN = tuple(getattr(torch, name) for name in HALF)


def several_ops(problem) -> bool:
    """Whether the reference is a chain of captured ops or a module's (kiln.kind "chain" / "module"): its
    16-bit intermediates are rounded where a fused kernel keeps fp32."""
    return isinstance(problem.kiln, dict) and problem.kiln.get("kind") in ("chain", "module")


def gap_outputs(problem) -> list[str]:
    """The outputs whose reference rounding is recorded: float32 ones, and 16-bit float ones where the
    reference has several ops."""
    return [n for n, spec in problem.outputs.items()
            if spec.dtype == "float32" or (spec.dtype in HALF and several_ops(problem))]


class _WidenCasts(TorchDispatchMode):
    """The wider run's casts: a chain that casts to a 16-bit float (softmax's result back to bfloat16 before
    the second matmul of an attention block) casts to float32 instead, and an op whose float tensors
    then differ in dtype (that float32 result against a value input widened to float32 is fine; a 16-bit
    constant made inside the chain is not) gets them all in the widest. Without it the wider run of
    every eager attention block failed on its second matmul, and those blocks were gated without the
    reference's own rounding."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = {k: _widen_dtype(v) for k, v in (kwargs or {}).items()}
        args = tuple(_widen_dtype(a) for a in args)
        floats = [t.dtype for t in _tensors(args) if t.is_floating_point()]
        # not an op that writes into an argument (copy_, add_): a cast copy would take the write
        if len(set(floats)) > 1 and not func._schema.is_mutable:
            widest = max(floats, key=lambda d: torch.finfo(d).bits)
            args = tuple(_cast_float(a, widest) for a in args)
        return func(*args, **kwargs)


def _widen_dtype(v):
    return torch.float32 if isinstance(v, torch.dtype) and v in _SIXTEEN else v


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _cast_float(a, dtype):
    if isinstance(a, torch.Tensor):
        return a.to(dtype) if a.is_floating_point() and a.dtype != dtype else a
    if isinstance(a, (list, tuple)):
        return type(a)(_cast_float(t, dtype) for t in a)
    return a


def add_set(bins: GapBins, problem, inputs: dict[str, Any], outputs: dict[str, torch.Tensor],
            run: Callable[[list[Any]], Any], values: Callable[[Any], list[Any]],
            log: Optional[Callable[[str], None]] = None) -> bool:
    """Runs the reference (run(args)) once more on inputs widened (float32 tensors in float64, 16-bit
    float ones in float32: the wider run) and adds the gaps of the outputs gap_outputs names to bins,
    each against the wider run's output of the next wider dtype; values(result) gives the outputs in
    definition order. False (and a line to log) when the wider run is not possible: the gate then
    applies the tolerance as it is."""
    names = gap_outputs(problem)
    wide = [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.dtype in _WIDER]
    if not names or not wide:
        return False
    n_bytes = sum(v.numel() * _WIDER[v.dtype].itemsize for v in wide)
    if wide[0].device.type == "cpu" and n_bytes > CPU_LIMIT_BYTES:
        if log:
            log(f"note: no wider run of the reference on the cpu for {n_bytes / 2**20:.0f} MiB of "
                f"widened inputs (over {CPU_LIMIT_BYTES >> 20} MiB); the gate's tolerance is applied "
                f"without the reference's own rounding")
        return False
    args = [v.to(_WIDER[v.dtype]) if isinstance(v, torch.Tensor) and v.dtype in _WIDER else
            (v.clone() if isinstance(v, torch.Tensor) else v) for v in inputs.values()]
    try:
        with _WidenCasts():
            result = values(run(args))
    except Exception as e:  # an op without float64, a mixed-dtype refusal, out of memory
        if log:
            log(f"note: the wider run of the reference failed ({' '.join(str(e).split())[:200]});"
                f" the gate's tolerance is applied without the reference's own rounding")
        return False
    finally:
        del args
    order = list(problem.outputs)
    for name in names:
        exact = result[order.index(name)]
        ref = outputs[name]
        if (isinstance(exact, torch.Tensor) and exact.dtype == _WIDER.get(ref.dtype) and
                tuple(exact.shape) == tuple(ref.shape)):
            bins.add(name, ref.float(), exact.to(ref.device))
    return True
