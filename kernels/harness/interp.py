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
