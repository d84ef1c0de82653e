"""The reference's own rounding error on float32 outputs, for the gate's tolerance.

A float32 reference is itself rounded: a sum of 2048 float32 values in PyTorch's order can sit further
from the exact sum than the gate's float32 tolerance (atol 1e-5 + rtol 1e-4 |ref|) allows near a
cancelling column, so a kernel that sums exactly, or in another order, fails where eager's order alone
passes (seen in CI and on the H200 for sum over axis 1 of [64, 8192, 2048]). So the reference helper
runs the reference once more with its float32 inputs in float64 and records, per output, points
(x, y) = (|ref|, 2 |ref - ref64|) summarised from above: for any tolerance, the smallest extra atol with
which a kernel as close to the exact answer as the reference is still passes is

    max(0, max over points of (y - rtol x) - atol)

(|out - ref| <= |out - ref64| + |ref64 - ref|, and both are at most the reference's own gap), and
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
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch

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


def float32_outputs(problem) -> list[str]:
    return [n for n, spec in problem.outputs.items() if spec.dtype == "float32"]


def add_set(bins: GapBins, problem, inputs: dict[str, Any], outputs: dict[str, torch.Tensor],
            run: Callable[[list[Any]], Any], values: Callable[[Any], list[Any]],
            log: Optional[Callable[[str], None]] = None) -> bool:
    """Runs the reference (run(args)) on inputs with float32 tensors in float64 and adds the gaps of
    the float32 outputs to bins; values(result) gives the outputs in definition order. False (and
    a line to log) when the float64 run is not possible: the gate then applies the tolerance as it
    is."""
    names = float32_outputs(problem)
    f32 = [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.dtype == torch.float32]
    if not names or not f32:
        return False
    n_bytes = sum(v.numel() * 4 for v in f32)
    if f32[0].device.type == "cpu" and n_bytes > CPU_LIMIT_BYTES:
        if log:
            log(f"note: no float64 run of the reference on the cpu for {n_bytes / 2**20:.0f} MiB of "
                f"float32 inputs (over {CPU_LIMIT_BYTES >> 20} MiB); the gate's tolerance is applied "
                f"without the reference's own rounding")
        return False
    args = [v.double() if isinstance(v, torch.Tensor) and v.dtype == torch.float32 else
            (v.clone() if isinstance(v, torch.Tensor) else v) for v in inputs.values()]
    try:
        result = values(run(args))
    except Exception as e:  # an op without float64, a mixed-dtype refusal, out of memory
        if log:
            log(f"note: the float64 run of the reference failed ({' '.join(str(e).split())[:200]});"
                f" the gate's tolerance is applied without the reference's own rounding")
        return False
    finally:
        del args
    order = list(problem.outputs)
    for name in names:
        r64 = result[order.index(name)]
        ref = outputs[name]
        if (isinstance(r64, torch.Tensor) and r64.dtype == torch.float64 and
                tuple(r64.shape) == tuple(ref.shape)):
            bins.add(name, ref, r64.to(ref.device))
    return True
