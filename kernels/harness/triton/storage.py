"""Storage formats of a state tensor held in fewer bytes (issue #27): what a precision variant's
manifest declares in `[storage]`, as numpy codecs the precision gate (precision.py) uses to make
the variant's inputs, to simulate it (the same math in float64 on the quantize -> dequantize
state) and to measure its kernel's error in units of the format's own rounding.

Formats (`dtype`) and the array that holds them (`bits`: what the kernel receives; the interpreter
and torch both handle these integer dtypes, the kernels bitcast them in-kernel):

    bf16      int16 bit patterns of bfloat16, round to nearest even, no scale
    fp8e4m3   uint8 bit patterns of float8 e4m3fn (bias 7, max 448, no inf), nearest even,
              values clamped to +-448 before rounding (the kernels do the same: no NaN code)
    int8      int8 codes q, value = q * scale, q = clamp(floor(x / scale + 0.5), -127, 127)
              (round half up: simple to state in every kernel language; ties have measure zero)

Scales of the 8-bit formats (`scales`): "tensor" a static scale, `scale` in the manifest (a
calibrated constant the kernel carries; nothing is stored); "head_k" one float32 scale per (slot,
head, k-channel) row of the state, `scale = amax(|row|) / qmax` recomputed at every store, kept
in the launcher's tensor `scale_tensor` ([S, HV, K], beside the pool); "tile" one per (slot, head,
k-tile, v-tile) of `tile = [BK, BV]` (simulated here; no kernel of ours uses it yet).
"""
import numpy as np

__all__ = ["Storage", "bf16_encode", "bf16_decode", "fp8_encode", "fp8_decode", "FP8_MAX"]

FP8_MAX = 448.0
INT8_MAX = 127.0


# bfloat16 ------------------------------------------------------------------------------------------

def bf16_encode(x):
    """float -> int16 bf16 bits, nearest even (via float32, as the kernels round their fp32 value)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return r.astype(np.uint16).view(np.int16)


def bf16_decode(bits):
    return (np.asarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# float8 e4m3fn ---------------------------------------------------------------------------------------

def _fp8_table():
    codes = np.arange(256, dtype=np.uint8)
    s, e, m = (codes >> 7) & 1, (codes >> 3) & 15, codes & 7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e.astype(np.int64) - 7))
    val = np.where(s == 1, -mag, mag)
    val[(e == 15) & (m == 7)] = np.nan   # 0x7f, 0xff: the only NaNs, no infinities
    return val


FP8_VALUES = _fp8_table()
_POS = FP8_VALUES[:127]                  # codes 0..126: 0, subnormals, normals up to 448, increasing


def fp8_decode(bits):
    return FP8_VALUES[np.asarray(bits).view(np.uint8)]


def fp8_encode(x):
    """float -> uint8 e4m3fn bits: clamp to +-448, nearest, ties to the even code."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), FP8_MAX)
    hi = np.clip(np.searchsorted(_POS, a), 0, 126)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - _POS[lo], _POS[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = code.astype(np.uint8)
    return np.where(np.signbit(x), code | 0x80, code).astype(np.uint8)   # -0 for tiny negatives, as the GPU


def _ulp_fp8(a):
    """Spacing of e4m3 at magnitude a (unscaled)."""
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -6)))
    return 2.0 ** (np.maximum(e, -6) - 3)


def _ulp_bf16(a):
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -126)))
    return 2.0 ** (e - 7)


# the storage of one tensor ---------------------------------------------------------------------------

class Storage:
    """A `[storage]` table: how the state pool `[S, HV, K, V]` is held. `encode` gives the arrays
    the kernel receives (the pool's bits, and the scales when they are stored), `decode` the
    float64 values they hold, `unit` the format's rounding step at each element."""

    DTYPES = {"bf16": np.int16, "fp8e4m3": np.uint8, "int8": np.int8}
    BYTES = {"bf16": 2, "fp8e4m3": 1, "int8": 1}

    def __init__(self, table):
        self.table = dict(table)
        self.tensor = self.table.get("tensor", "state")
        self.dtype = self.table["dtype"]
        if self.dtype not in self.DTYPES:
            raise ValueError(f"storage.dtype must be one of {', '.join(self.DTYPES)}, not {self.dtype!r}")
        self.scales = self.table.get("scales", "none")
        if self.dtype == "bf16" and self.scales != "none":
            raise ValueError("storage: bf16 carries no scales")
        if self.dtype != "bf16" and self.scales not in ("tensor", "head_k", "tile"):
            raise ValueError("storage.scales of an 8-bit format must be tensor, head_k or tile")
        self.scale = float(self.table.get("scale", 1.0))          # static per-tensor scale
        self.scale_tensor = self.table.get("scale_tensor")        # where stored scales live
        if self.scales in ("head_k", "tile") and not self.scale_tensor:
            raise ValueError(f"storage: scales = {self.scales!r} needs scale_tensor (the launcher's argument)")
        self.tile = tuple(self.table.get("tile", (16, 16)))
        self.qmax = FP8_MAX if self.dtype == "fp8e4m3" else INT8_MAX
        self.bits = self.DTYPES[self.dtype]
        self.bytes = self.BYTES[self.dtype]

    def describe(self):
        d = {"tensor": self.tensor, "dtype": self.dtype, "bits": np.dtype(self.bits).name, "scales": self.scales,
             "bytes_per_element": self.bytes}
        if self.scales == "tensor":
            d["scale"] = self.scale
        if self.scale_tensor:
            d["scale_tensor"] = self.scale_tensor
        if self.scales == "tile":
            d["tile"] = list(self.tile)
        return d

    # scales of rows -----------------------------------------------------------------------------
    def _amax(self, x):
        """amax per scale group, broadcastable to x [..., K, V]."""
        a = np.abs(x)
        if self.scales == "head_k":
            return a.max(axis=-1)                                           # [..., K]
        BK, BV = self.tile
        K, V = x.shape[-2:]
        pk, pv = -K % BK, -V % BV
        a = np.pad(a, [(0, 0)] * (x.ndim - 2) + [(0, pk), (0, pv)])
        a = a.reshape(a.shape[:-2] + ((K + pk) // BK, BK, (V + pv) // BV, BV))
        return a.max(axis=(-3, -1))                                         # [..., K/BK, V/BV]

    def _expand(self, s, shape):
        if self.scales == "head_k":
            return s[..., None]
        BK, BV = self.tile
        K, V = shape[-2:]
        return np.repeat(np.repeat(s, BK, axis=-2)[..., :K, :], BV, axis=-1)[..., :V]

    def encode(self, x):
        """float values [..., K, V] -> (bits, stored scales or None). Stored scales are float32,
        computed from the float32 amax as the kernels compute them."""
        x = np.asarray(x, dtype=np.float64)
        if self.dtype == "bf16":
            return bf16_encode(x), None
        if self.scales == "tensor":
            step, stored = self.scale, None
        else:
            amax = self._amax(x.astype(np.float32)).astype(np.float32)
            stored = (amax / np.float32(self.qmax)).astype(np.float32)
            step = self._expand(stored.astype(np.float64), x.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(step > 0, x / step, 0.0)
        if self.dtype == "fp8e4m3":
            return fp8_encode(y), stored
        return np.clip(np.floor(y + 0.5), -INT8_MAX, INT8_MAX).astype(np.int8), stored

    def decode(self, bits, stored=None):
        if self.dtype == "bf16":
            return bf16_decode(bits)
        code = fp8_decode(bits) if self.dtype == "fp8e4m3" else np.asarray(bits, dtype=np.float64)
        if self.scales == "tensor":
            return code * self.scale
        return code * self._expand(np.asarray(stored, dtype=np.float64), code.shape)

    def roundtrip(self, x):
        return self.decode(*self.encode(x))

    def unit(self, bits, stored=None):
        """The format's rounding step at each element (the spacing of representable values there)."""
        v = np.abs(self.decode(bits, stored))
        if self.dtype == "bf16":
            return _ulp_bf16(v)
        if self.scales == "tensor":
            step = np.full(v.shape, self.scale)
        else:
            step = self._expand(np.asarray(stored, dtype=np.float64), v.shape)
        if self.dtype == "fp8e4m3":
            with np.errstate(divide="ignore", invalid="ignore"):
                return _ulp_fp8(np.where(step > 0, v / step, 0.0)) * step
        return step

    def scale_problems(self, bits, stored):
        """Stored codes and scales inconsistent with each other: a list of reasons (empty: fine)."""
        out = []
        if self.dtype == "bf16":
            if not np.all(np.isfinite(bf16_decode(bits))):
                out.append("bf16 state holds non-finite values")
            return out
        if self.dtype == "fp8e4m3":
            codes = np.asarray(bits).view(np.uint8)
            if np.any((codes & 0x7F) == 0x7F):
                out.append("fp8 state holds NaN codes (0x7f / 0xff)")
            mag = np.abs(fp8_decode(bits))
        else:
            codes = np.asarray(bits)
            if np.any(codes == -128):
                out.append("int8 state holds -128 (outside the symmetric range +-127)")
            mag = np.abs(codes.astype(np.float64))
        if stored is None:
            return out
        s = np.asarray(stored, dtype=np.float64)
        if not np.all(np.isfinite(s)) or np.any(s < 0):
            out.append("scales not finite and non-negative")
            return out
        # scale = amax / qmax: the group's largest code is qmax (within one code of rounding)
        gmax = self._amax(mag)
        top = self.qmax if self.dtype == "int8" else FP8_MAX
        slack = 1.0 if self.dtype == "int8" else 32.0          # one code (int8), one e4m3 step at 448
        bad = (s > 0) & (np.abs(gmax - top) > slack)
        if np.any(bad):
            out.append(f"{int(bad.sum())} scale groups whose largest code is not qmax ({top:g}): "
                       "the scale is not amax / qmax of its data")
        zero = (s == 0) & (gmax != 0)
        if np.any(zero):
            out.append(f"{int(zero.sum())} scale groups with scale 0 but non-zero codes")
        return out
