"""The statistics and structure of a tensor too big to keep: `kiln capture` measures them where the tensor
lives (summarize), and `kiln.reference` draws a tensor like it from them alone (draw). The JSON form is
docs/formats.md, "Inputs drawn from statistics"; this module is its one reader and writer.

Why structure and not just moments: a random tensor with a real tensor's mean and spread is a fair input for
most ops, but not for a mask (an attention softmax over a causal mask drawn as noise has no fully masked
rows and the wrong sums), a one-hot tensor, position ids, a permutation or a sorted offset table (an index
that leaves its range makes the reference raise). So the shape of the data is detected and reproduced:
band masks (causal, sliding window: masked iff j - i leaves [lower, upper] over the last two dims), one-hot
rows, integer ranges, arange rows, permutations, distinct and sorted index sets.

Everything is computed in chunks of STATS_CHUNK_ELEMENTS on the tensor's own device, so summarising a
6 GiB activation on the GPU costs a few small temporaries and no host copy.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

MASK_THRESHOLD = -1e4  # float values at or below this are masks (e.g. finfo.min), not data
STATS_CHUNK_ELEMENTS = 1 << 24
INDEX_STRUCTURE_MAX_ELEMENTS = 1 << 24  # sorting to find distinct values costs this much at most
BAND_MAX_ELEMENTS = 1 << 26  # [Q, K] of one mask slice
JSON_INT_MAX = 1 << 53  # kiln's C reader refuses larger JSON integers: such values are written as text

DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int64": torch.int64,
    "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class StatsError(ValueError):
    """A summary that cannot be drawn from (a missing or malformed field); the message says which."""


def _json_int(v: int):
    return int(v) if abs(int(v)) <= JSON_INT_MAX else str(int(v))


def _read_int(v) -> int:
    return int(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else int(_bad("an integer", v))


def _bad(what: str, v):
    raise StatsError(f"expected {what}, got {v!r}")


def _flat_chunks(flat: torch.Tensor):
    for start in range(0, flat.numel(), STATS_CHUNK_ELEMENTS):
        yield flat[start:start + STATS_CHUNK_ELEMENTS]


# ---------------------------------------------------------------------------------------------------
# Measuring.


def summarize(t: torch.Tensor) -> dict:
    """{"stats": {...}, "structure": {...}} of t (dense, in the order it is stored), computed on t's
    device. "structure" is left out when none is found. Never changes t."""
    with torch.inference_mode(False), torch.no_grad():
        t = t.detach()
        if not t.is_contiguous():
            raise StatsError("summarize wants a dense tensor in memory order")
        flat = t.reshape(-1)
        if t.dtype == torch.bool:
            stats = _bool_stats(flat)
        elif t.dtype.is_floating_point:
            stats = _float_stats(flat)
        else:
            stats = _int_stats(flat)
        stats = dict({"dtype": DTYPE_NAMES[t.dtype], "numel": t.numel()}, **stats)
        out: dict = {"stats": stats}
        structure = _structure(t, stats)
        if structure is not None:
            out["structure"] = structure
        return out


def _bool_stats(flat: torch.Tensor) -> dict:
    n_true = sum(int(c.sum()) for c in _flat_chunks(flat))
    return {"true": n_true / max(flat.numel(), 1)}


def _moments(s: float, ss: float, n: int) -> tuple:
    if n == 0:
        return None, None
    mean = s / n
    return mean, math.sqrt(max(ss / n - mean * mean, 0.0))


def _float_stats(flat: torch.Tensor) -> dict:
    n = flat.numel()
    counts = {"nan": 0, "pos_inf": 0, "neg_inf": 0, "masked": 0, "zeros": 0}
    s = ss = 0.0
    n_reg = 0
    lo, hi, mask_value = math.inf, -math.inf, None
    for chunk in _flat_chunks(flat):
        x = chunk if chunk.dtype in (torch.float32, torch.float64) else chunk.float()
        reg = x
        c_lo, c_hi = torch.aminmax(x)
        if not (bool(torch.isfinite(c_lo)) and bool(torch.isfinite(c_hi)) and float(c_lo) > MASK_THRESHOLD):
            nan, pinf, ninf = torch.isnan(x), x == math.inf, x == -math.inf
            masked = torch.isfinite(x) & (x <= MASK_THRESHOLD)
            counts["nan"] += int(nan.sum())
            counts["pos_inf"] += int(pinf.sum())
            counts["neg_inf"] += int(ninf.sum())
            n_masked = int(masked.sum())
            if n_masked:
                counts["masked"] += n_masked
                m = float(x[masked].min())
                mask_value = m if mask_value is None else min(mask_value, m)
            reg = x[~(nan | pinf | ninf | masked)]
            if reg.numel():
                c_lo, c_hi = torch.aminmax(reg)
        if reg.numel():
            lo, hi = min(lo, float(c_lo)), max(hi, float(c_hi))
            s += float(reg.sum(dtype=torch.float64))
            ss += float(torch.linalg.vector_norm(reg, dtype=torch.float64)) ** 2
            n_reg += reg.numel()
            counts["zeros"] += int((reg == 0).sum())
    # zeros add nothing to the sums: the moments of the non-zero values come from the same sums
    n_nz = n_reg - counts["zeros"]
    mean, std = _moments(s, ss, n_reg)
    mean_nz, std_nz = _moments(s, ss, n_nz)
    out = {"min": lo if n_reg else None, "max": hi if n_reg else None, "mean": mean, "std": std,
           "mean_nonzero": mean_nz, "std_nonzero": std_nz}
    out.update({k: v / max(n, 1) for k, v in counts.items()})
    if mask_value is not None:
        out["mask_value"] = mask_value
    return out


def _int_stats(flat: torch.Tensor) -> dict:
    n = flat.numel()
    lo = hi = None
    s = ss = 0.0
    zeros = 0
    for chunk in _flat_chunks(flat):
        c_lo, c_hi = int(chunk.min()), int(chunk.max())
        lo = c_lo if lo is None else min(lo, c_lo)
        hi = c_hi if hi is None else max(hi, c_hi)
        x = chunk.double()
        s += float(x.sum())
        ss += float((x * x).sum())
        zeros += int((chunk == 0).sum())
    mean, std = _moments(s, ss, n)
    return {"min": _json_int(lo) if lo is not None else None, "max": _json_int(hi) if hi is not None else None,
            "mean": mean, "std": std, "zeros": zeros / max(n, 1)}


def _structure(t: torch.Tensor, stats: dict) -> Optional[dict]:
    if t.numel() == 0:
        return None
    if t.dtype == torch.bool or t.dtype.is_floating_point:
        band = _band(t, stats)
        if band is not None:
            return band
        return _one_hot(t, stats)
    one_hot = _one_hot(t, stats)
    return one_hot if one_hot is not None else _index_structure(t, stats)


def _masked_of(x: torch.Tensor) -> torch.Tensor:
    """Where a mask tensor masks: False of a bool mask, -inf or <= MASK_THRESHOLD of an additive one."""
    if x.dtype == torch.bool:
        return ~x
    x = x.float() if x.dtype != torch.float64 else x
    return (x <= MASK_THRESHOLD) | (x == -math.inf)


def band_mask(q: int, k: int, lower: Optional[int], upper: Optional[int], device) -> torch.Tensor:
    """[q, k] bool, True where j - i is outside [lower, upper] (None: no bound on that side)."""
    d = torch.arange(k, device=device)[None, :] - torch.arange(q, device=device)[:, None]
    out = torch.zeros(q, k, dtype=torch.bool, device=device)
    if lower is not None:
        out |= d < lower
    if upper is not None:
        out |= d > upper
    return out


def band_holds(t: torch.Tensor, lower: Optional[int], upper: Optional[int], inside_zero: bool = False) -> bool:
    """Whether a mask [..., q, k] masks every position whose j - i leaves [lower, upper] (None: no bound on
    that side) in every leading slice and keeps a key in every row: what a kernel that skips the key tiles
    outside that band needs of it to give eager's result (a narrower band, or any mask inside it, holds;
    a row masked whole is eager's uniform row or NaN, which skipped tiles cannot give). inside_zero: the
    mask must be exactly the band, 0 at every position inside it (what a kernel that generates the band
    and reads no mask needs: the structure's "inside": 0; for a boolean mask, True there)."""
    if t.dim() < 2 or t.shape[-1] < 1 or t.shape[-2] < 1:
        return False
    q, k = t.shape[-2], t.shape[-1]
    slices = t.reshape(-1, q, k)
    outside = _band_mask_cached(q, k, lower, upper, t.device)
    step = max(1, STATS_CHUNK_ELEMENTS // (q * k))
    for start in range(0, slices.shape[0], step):
        chunk = slices[start:start + step]
        masked = _masked_of(chunk)
        # one host sync a chunk (install checks a live mask before each kernel that assumes its band)
        bad = (~masked & outside).any() | masked.all(-1).any()
        if inside_zero:
            bad |= ((masked if chunk.dtype == torch.bool else chunk != 0) & ~outside).any()
        if bool(bad):
            return False
    return True


_BAND_MASKS: dict = {}  # (q, k, lower, upper, device) -> band_mask's tensor: install checks one mask shape often


def _band_mask_cached(q: int, k: int, lower: Optional[int], upper: Optional[int], device) -> torch.Tensor:
    key = (q, k, lower, upper, str(device))
    m = _BAND_MASKS.get(key)
    if m is None:
        if len(_BAND_MASKS) >= 8:
            _BAND_MASKS.clear()
        m = _BAND_MASKS[key] = band_mask(q, k, lower, upper, device)
    return m


def _band(t: torch.Tensor, stats: dict) -> Optional[dict]:
    """A band mask over the last two dims, the same for every leading index (causal, sliding window)."""
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] * t.shape[-1] > BAND_MAX_ELEMENTS:
        return None
    if t.dtype == torch.bool:
        if not 0 < stats["true"] < 1:
            return None
    elif stats["neg_inf"] + stats["masked"] == 0 or stats["nan"] + stats["pos_inf"] > 0:
        return None
    q, k = t.shape[-2], t.shape[-1]
    slices = t.reshape(-1, q, k)
    first = _masked_of(slices[0])
    keep = ~first
    count = keep.sum(1)
    cols = torch.arange(k, device=t.device)
    lo = torch.where(keep, cols, k).min(1).values
    hi = torch.where(keep, cols, -1).max(1).values
    rows = torch.arange(q, device=t.device)
    some = count > 0
    if not bool(some.any()) or not bool((count[some] == hi[some] - lo[some] + 1).all()):
        return None  # a row whose kept positions are not one run: not a band
    upper = lower = None
    ends = some & (hi < k - 1)
    if bool(ends.any()):
        d = (hi - rows)[ends]
        if not bool((d == d[0]).all()):
            return None
        upper = int(d[0])
    starts = some & (lo > 0)
    if bool(starts.any()):
        d = (lo - rows)[starts]
        if not bool((d == d[0]).all()):
            return None
        lower = int(d[0])
    if lower is None and upper is None:
        return None
    if not torch.equal(band_mask(q, k, lower, upper, t.device), first):
        return None
    step = max(1, STATS_CHUNK_ELEMENTS // (q * k))
    # every kept value 0 (a causal or window mask as models build it); a boolean band keeps with True, which
    # takes part as an additive 0 would: exactly the band, always
    zero = True
    for start in range(0, slices.shape[0], step):
        chunk = slices[start:start + step]
        if not bool((_masked_of(chunk) == first).all()):
            return None  # the pattern changes along a leading dim (padding): not one band
        zero = zero and (t.dtype == torch.bool or bool(((chunk == 0) | first).all()))
    name = "causal" if lower is None else ("sliding_window" if upper is not None else "band")
    out: dict = {"kind": "band", "name": name, "lower": lower, "upper": upper}
    if t.dtype != torch.bool:
        out["fill"] = "-inf" if stats["neg_inf"] >= stats["masked"] else "mask_value"
    if zero:
        out["inside"] = 0  # the mask is exactly the band (a boolean one: True inside, an additive 0)
    return out


def _one_hot(t: torch.Tensor, stats: dict) -> Optional[dict]:
    if t.dim() < 1 or t.shape[-1] < 2:
        return None
    if t.dtype == torch.bool:
        if not 0 < stats["true"] < 1:
            return None
    else:
        if t.dtype.is_floating_point and stats["nan"] + stats["pos_inf"] + stats["neg_inf"] + stats["masked"]:
            return None
        if stats["min"] != 0 or stats["max"] != 1:
            return None
    rows = t.reshape(-1, t.shape[-1])
    step = max(1, STATS_CHUNK_ELEMENTS // t.shape[-1])
    for start in range(0, rows.shape[0], step):
        r = rows[start:start + step]
        nonzero = r != 0
        if not bool((nonzero.sum(1) == 1).all()) or (t.dtype != torch.bool and not bool((r[nonzero] == 1).all())):
            return None
    return {"kind": "one_hot"}


def _index_structure(t: torch.Tensor, stats: dict) -> Optional[dict]:
    """Integer structure: arange rows (position ids), permutations, distinct or sorted index sets."""
    flat = t.reshape(-1)
    last = t.shape[-1] if t.dim() else 1
    if last > 1:
        rows = t.reshape(-1, last)
        start = rows[0, 0]
        want = start + torch.arange(last, device=t.device, dtype=t.dtype)
        step = max(1, STATS_CHUNK_ELEMENTS // last)
        if all(bool((rows[s:s + step] == want).all()) for s in range(0, rows.shape[0], step)):
            return {"kind": "arange", "start": _json_int(int(start))}
    if flat.numel() < 2 or flat.numel() > INDEX_STRUCTURE_MAX_ELEMENTS:
        return None
    is_sorted = t.dim() == 1 and bool((flat[1:] >= flat[:-1]).all())
    distinct = torch.unique(flat).numel() == flat.numel()
    lo, hi = _read_int(stats["min"]), _read_int(stats["max"])
    if distinct and hi - lo + 1 == flat.numel() and not is_sorted:
        return {"kind": "permutation"}
    if distinct:
        return {"kind": "distinct", "sorted": is_sorted}
    if is_sorted:
        return {"kind": "sorted"}
    return None


def leading_count(shape: tuple, itemsize: int, max_bytes: int) -> int:
    """How many leading elements (in memory order) a real slice of a tensor of shape keeps: at most
    max_bytes, whole rows of the last dim where a row fits, at least one element."""
    numel = 1
    for s in shape:
        numel *= int(s)
    n = max(1, min(numel, max_bytes // max(itemsize, 1)))
    row = int(shape[-1]) if len(shape) else 1
    if row > 0 and n >= row:
        n -= n % row
    return n


def leading_slice(t: torch.Tensor, max_bytes: int) -> torch.Tensor:
    """The leading_count first elements of t (dense, in memory order), as a host copy."""
    n = leading_count(tuple(t.shape), t.element_size(), max_bytes)
    return t.detach().reshape(-1)[:n].to("cpu", copy=True)


# ---------------------------------------------------------------------------------------------------
# Drawing.


def _number(stats: dict, key: str, default=None):
    v = stats.get(key, default)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        if default is not None or key not in stats:
            return default
        return None
    return float(v)


def draw(summary: dict, shape: tuple, dtype: torch.dtype, generator: torch.Generator,
         device: torch.device) -> torch.Tensor:
    """A tensor of shape and dtype with the statistics and structure of summary, drawn with generator
    (which lives on device) on device. Raises StatsError for a malformed summary."""
    if not isinstance(summary, dict) or not isinstance(summary.get("stats"), dict):
        raise StatsError("a drawn input needs a \"stats\" object")
    stats, structure = summary["stats"], summary.get("structure")
    if structure is not None and not isinstance(structure, dict):
        raise StatsError("\"structure\" must be an object")
    numel = 1
    for s in shape:
        numel *= int(s)
    if numel == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    kind = structure.get("kind") if structure else None
    if kind == "one_hot":
        return _draw_one_hot(shape, dtype, generator, device)
    if dtype == torch.bool:
        return _draw_bool(stats, structure, shape, generator, device)
    if dtype.is_floating_point:
        return _draw_float(stats, structure, shape, dtype, generator, device)
    return _draw_int(stats, structure, shape, dtype, generator, device)


def _uniform(shape, generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=device)


def _band_positions(structure: dict, shape: tuple, device) -> torch.Tensor:
    if len(shape) < 2:
        raise StatsError("a band structure needs at least two dims")
    lower, upper = structure.get("lower"), structure.get("upper")
    for v in (lower, upper):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise StatsError(f"band bounds must be integers or null, got {v!r}")
    return band_mask(shape[-2], shape[-1], lower, upper, device).expand(shape)


def _draw_one_hot(shape, dtype, generator, device) -> torch.Tensor:
    if len(shape) < 1:
        raise StatsError("a one_hot structure needs at least one dim")
    rows = 1
    for s in shape[:-1]:
        rows *= int(s)
    idx = torch.randint(0, shape[-1], (rows, 1), generator=generator, device=device)
    out = torch.zeros(rows, shape[-1], dtype=torch.float32, device=device).scatter_(1, idx, 1.0)
    return out.reshape(shape).to(dtype)


def _draw_bool(stats, structure, shape, generator, device) -> torch.Tensor:
    if structure and structure.get("kind") == "band":
        return ~_band_positions(structure, shape, device).contiguous()
    p = _number(stats, "true", 0.5)
    return _uniform(shape, generator, device) < p


def _draw_float(stats, structure, shape, dtype, generator, device) -> torch.Tensor:
    work = torch.float64 if dtype == torch.float64 else torch.float32
    lo, hi = _number(stats, "min"), _number(stats, "max")
    mean = _number(stats, "mean_nonzero", _number(stats, "mean", 0.0))
    std = _number(stats, "std_nonzero", _number(stats, "std", 1.0))
    x = torch.randn(shape, generator=generator, device=device, dtype=work)
    if lo is None or hi is None:  # no regular value at all: every position is special
        x.zero_()
    else:
        x.mul_(std if std is not None else 0.0).add_(mean if mean is not None else 0.0).clamp_(lo, hi)
    zeros = _number(stats, "zeros", 0.0)
    if zeros > 0:
        x.masked_fill_(_uniform(shape, generator, device) < zeros, 0.0)
    mask_value = _number(stats, "mask_value", torch.finfo(dtype).min if dtype.is_floating_point else MASK_THRESHOLD)
    if structure and structure.get("kind") == "band":
        fill = -math.inf if structure.get("fill", "-inf") == "-inf" else mask_value
        if structure.get("inside") == 0:
            x.zero_()
        x.masked_fill_(_band_positions(structure, shape, device), fill)
    else:
        shares = [(_number(stats, "nan", 0.0), math.nan), (_number(stats, "pos_inf", 0.0), math.inf),
                  (_number(stats, "neg_inf", 0.0), -math.inf), (_number(stats, "masked", 0.0), mask_value)]
        if any(p > 0 for p, _ in shares):
            u = _uniform(shape, generator, device)
            edge = 0.0
            for p, value in shares:
                if p > 0:
                    x.masked_fill_((u >= edge) & (u < edge + p), value)
                edge += p
    return x.to(dtype)


def _draw_int(stats, structure, shape, dtype, generator, device) -> torch.Tensor:
    if "min" not in stats or "max" not in stats:
        raise StatsError("an integer input needs \"min\" and \"max\"")
    lo, hi = _read_int(stats["min"]), _read_int(stats["max"])
    if hi < lo:
        raise StatsError(f"min {lo} > max {hi}")
    numel = 1
    for s in shape:
        numel *= int(s)
    kind = structure.get("kind") if structure else None
    if kind == "arange":
        start = _read_int(structure.get("start", lo))
        row = torch.arange(start, start + shape[-1], dtype=torch.int64, device=device)
        return row.expand(shape).to(dtype).contiguous()
    span = hi - lo + 1
    if kind == "permutation" and span == numel:
        return (torch.randperm(numel, generator=generator, device=device) + lo).reshape(shape).to(dtype)
    if kind == "distinct" and numel <= span <= INDEX_STRUCTURE_MAX_ELEMENTS * 4:
        flat = torch.randperm(span, generator=generator, device=device)[:numel] + lo
        if structure.get("sorted"):
            flat = torch.sort(flat).values
        return flat.reshape(shape).to(dtype)
    high = min(hi + 1, 2**63 - 1)
    if high <= lo:
        return torch.full(shape, lo, dtype=dtype, device=device)
    out = torch.randint(lo, high, shape, generator=generator, device=device, dtype=torch.int64)
    if kind == "sorted" or (kind == "distinct" and structure.get("sorted")):
        out = torch.sort(out.reshape(-1)).values.reshape(shape)
    return out.to(dtype)


def dtype_of(name: Any) -> torch.dtype:
    if name not in DTYPES:
        raise StatsError(f"unknown dtype {name!r}")
    return DTYPES[name]
