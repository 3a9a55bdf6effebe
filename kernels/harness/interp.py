"""Triton's interpreter, made to round `tl.dot` operands like the GPU does.

On an NVIDIA GPU (sm_80 and later), `tl.dot` on float32 operands runs on tensor cores in TF32
unless the kernel asks for `input_precision="ieee"` (or the 3-pass "tf32x3"): each operand is
rounded to a 10-bit mantissa (`cvt.rna.tf32.f32`: round to nearest, ties away from zero) and the
products are accumulated in float32. Triton's interpreter multiplies in plain float32, so a
precision bug of that kind is invisible on a CPU. `tf32_dot()` patches the interpreter's dot
(`InterpreterBuilder.create_dot`) in this process so that it rounds exactly when the GPU would:
float32 operands and input precision TF32 (the default, `"tf32"` and `allow_tf32=True`).
"""
import contextlib

import numpy as np

__all__ = ["round_to_tf32", "tf32_dot", "install_tf32_dot", "uninstall_tf32_dot", "tf32_dot_installed"]

_ORIGINAL = None


def round_to_tf32(x):
    """Round float32 values to TF32 (10 explicit mantissa bits), nearest, ties away from zero.
    Inf and NaN pass unchanged; finite values that round past the largest float become inf."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32)


def _is_tf32(input_precision):
    name = getattr(input_precision, "name", str(input_precision))
    return name.upper().rsplit(".", 1)[-1] == "TF32"


def install_tf32_dot():
    """Patch the interpreter's dot in this process (idempotent)."""
    global _ORIGINAL
    from triton.runtime import interpreter as ti
    if _ORIGINAL is not None:
        return
    original = ti.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if _is_tf32(input_precision) and a.data.dtype == np.float32 and b.data.dtype == np.float32:
            a = ti.TensorHandle(round_to_tf32(a.data), a.dtype)
            b = ti.TensorHandle(round_to_tf32(b.data), b.dtype)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot.__wrapped__ = original
    ti.InterpreterBuilder.create_dot = create_dot
    _ORIGINAL = original


def uninstall_tf32_dot():
    global _ORIGINAL
    from triton.runtime import interpreter as ti
    if _ORIGINAL is not None:
        ti.InterpreterBuilder.create_dot = _ORIGINAL
        _ORIGINAL = None


def tf32_dot_installed():
    return _ORIGINAL is not None


@contextlib.contextmanager
def tf32_dot(enabled=True):
    """Context manager: TF32-faithful interpreter dots inside the block (when enabled)."""
    was = tf32_dot_installed()
    if enabled:
        install_tf32_dot()
    else:
        uninstall_tf32_dot()
    try:
        yield
    finally:
        if was:
            install_tf32_dot()
        else:
            uninstall_tf32_dot()


# Bounds checking ---------------------------------------------------------------------------------
# Under the interpreter every load and store goes through `create_masked_load/store` with the
# addresses of the active lanes. `MEMORY` records the extent of every tensor the harness
# allocated (without its sentinel padding); an active lane outside all of them is recorded as an
# out-of-bounds read or write: a CPU stand-in for compute-sanitizer's memcheck, which also sees
# reads that happen not to change the results.

class MemoryMap:
    def __init__(self):
        self.regions = []   # (start, end, name)
        self.violations = {}

    def clear(self):
        self.regions.clear()
        self.violations.clear()

    def register(self, name, start, nbytes):
        self.regions.append((int(start), int(start) + int(nbytes), name))

    def check(self, kind, addrs, itemsize):
        if not self.regions or addrs.size == 0:
            return
        regions = sorted(self.regions)
        starts = np.array([r[0] for r in regions], dtype=np.uint64)
        ends = np.array([r[1] for r in regions], dtype=np.uint64)
        idx = np.searchsorted(starts, addrs, side="right") - 1
        ok = idx >= 0
        ok[ok] &= addrs[ok] + np.uint64(itemsize) <= ends[idx[ok]]
        if ok.all():
            return
        bad = addrs[~ok]
        near = idx[~ok]
        name = regions[int(near[0])][2] if near[0] >= 0 else "below every tensor"
        key = (kind, name)
        v = self.violations.setdefault(key, {"kind": kind, "near": name, "count": 0})
        v["count"] += int(bad.size)

    def report(self):
        return list(self.violations.values())


MEMORY = MemoryMap()
_ORIGINAL_MEM = None


def install_bounds_check():
    """Patch the interpreter's masked load and store to check addresses against MEMORY."""
    global _ORIGINAL_MEM
    from triton.runtime import interpreter as ti
    if _ORIGINAL_MEM is not None:
        return
    load, store = ti.InterpreterBuilder.create_masked_load, ti.InterpreterBuilder.create_masked_store

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        itemsize = ti._get_np_dtype(ptrs.get_element_ty()).itemsize
        MEMORY.check("read", np.asarray(ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]).ravel(), itemsize)
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        itemsize = ti._get_np_dtype(ptrs.get_element_ty()).itemsize
        MEMORY.check("write", np.asarray(ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]).ravel(), itemsize)
        return store(self, ptrs, value, mask, cache_policy)

    ti.InterpreterBuilder.create_masked_load = create_masked_load
    ti.InterpreterBuilder.create_masked_store = create_masked_store
    _ORIGINAL_MEM = (load, store)
