"""A numpy-backed tensor that Triton's interpreter accepts in place of a torch tensor.

Triton's interpreter (TRITON_INTERPRET=1, triton 3.x runtime/interpreter.py) needs of each tensor
argument: `data_ptr()` (a real host address: loads and stores go straight to memory), `dtype`
(whose `str()` ends in a torch-style name such as `float32`, for the type signature),
`untyped_storage()` (an object with `data_ptr()`, `cpu()` and `copy_()`), `storage_offset()`,
`size()`, `stride()` and `new_empty(0, device=...)` returning a tensor with `set_(storage, offset,
size, stride)`. It makes a "host copy" through these before the launch and copies it back after.
Here the host copy is the array itself (`cpu()` returns the same storage, `copy_` of a storage
onto itself is a no-op), so the kernel writes straight into the numpy buffer.

`NpTensor` views one flat numpy buffer. `padded(...)` allocates a buffer larger than the view and
fills the tail with a sentinel: reads past the end of the view then see the sentinel (NaN), and
writes past it are detected by `tail_intact()`.
"""
import sys

import numpy as np

__all__ = ["NpTensor", "NpDtype", "ShapeOnly", "torch_of", "meta_tensor"]


class NpDtype:
    """A dtype object whose str() reads like torch's (`torch.float32`), wrapping a numpy dtype."""

    _NAMES = {"float32": "float32", "float64": "float64", "float16": "float16", "int32": "int32",
              "int64": "int64", "int8": "int8", "uint8": "uint8", "bool": "bool", "int16": "int16"}

    def __init__(self, np_dtype):
        self.np = np.dtype(np_dtype)
        self.name = self._NAMES[self.np.name]
        self.itemsize = self.np.itemsize

    def __str__(self):
        return f"torch.{self.name}"

    __repr__ = __str__

    def __eq__(self, other):
        return isinstance(other, NpDtype) and other.np == self.np

    def __hash__(self):
        return hash(self.np)


class _Storage:
    def __init__(self, buf):
        self.buf = buf  # flat 1-D numpy array

    def data_ptr(self):
        return self.buf.ctypes.data

    def nbytes(self):
        return int(self.buf.nbytes)

    def cpu(self):
        return self

    def copy_(self, other):
        if other is not self and other.buf is not self.buf:
            self.buf[...] = other.buf
        return self


class NpTensor:
    """A strided view on a flat numpy buffer; just enough of torch.Tensor for Triton's interpreter
    and for the kernels' host wrappers (shape, stride(), dtype, data_ptr(), numel(), is_contiguous())."""

    def __init__(self, storage, offset, shape, strides):
        self._storage = storage
        self._offset = int(offset)
        self.shape = tuple(int(s) for s in shape)
        self._strides = tuple(int(s) for s in strides)
        self.dtype = NpDtype(storage.buf.dtype)
        self.device = "cpu"

    # construction ---------------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, array, pad=0, sentinel=np.nan):
        """Copy `array` into a fresh contiguous buffer with `pad` sentinel elements after it."""
        array = np.asarray(array)
        buf = np.empty(array.size + pad, dtype=array.dtype)
        buf[: array.size] = array.reshape(-1)
        if pad:
            buf[array.size:] = sentinel
        return cls(_Storage(buf), 0, array.shape, _contiguous_strides(array.shape))

    @classmethod
    def full(cls, shape, value, dtype=np.float32, pad=0, sentinel=np.nan):
        return cls.from_numpy(np.full(shape, value, dtype=dtype), pad=pad, sentinel=sentinel)

    # the torch.Tensor surface ----------------------------------------------------------------
    def data_ptr(self):
        return self._storage.data_ptr() + self._offset * self.dtype.itemsize

    def untyped_storage(self):
        return self._storage

    def storage_offset(self):
        return self._offset

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def stride(self, dim=None):
        return self._strides if dim is None else self._strides[dim]

    def dim(self):
        return len(self.shape)

    ndim = property(dim)

    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def element_size(self):
        return self.dtype.itemsize

    def is_contiguous(self):
        return self._strides == _contiguous_strides(self.shape)

    def new_empty(self, *size, device=None):
        return NpTensor(_Storage(np.empty(0, dtype=self.dtype.np)), 0, (0,), (1,))

    def set_(self, storage, offset, size, stride):
        self._storage, self._offset = storage, int(offset)
        self.shape, self._strides = tuple(size), tuple(stride)
        self.dtype = NpDtype(storage.buf.dtype)
        return self

    # numpy access ---------------------------------------------------------------------------
    def numpy(self):
        """The view as a numpy array sharing memory with the buffer."""
        itemsize = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            self._storage.buf[self._offset:], shape=self.shape,
            strides=tuple(s * itemsize for s in self._strides))

    def tail(self):
        """The padding after the view (the sentinel region)."""
        return self._storage.buf[self._offset + self.numel():]

    def tail_intact(self, sentinel=np.nan):
        t = self.tail()
        if isinstance(sentinel, float) and np.isnan(sentinel):
            return bool(np.all(np.isnan(t)))
        return bool(np.all(t == sentinel))

    def __repr__(self):
        return f"NpTensor(shape={self.shape}, dtype={self.dtype})"


class ShapeOnly:
    """A tensor without memory: shape, dtype, strides and a 16-byte aligned address, enough for a
    launcher and for Triton's specialisation (`compile` records launches on these at the bench
    shape; the check's `record` at each GPU shape)."""

    def __init__(self, shape, dtype=np.float32, device="cpu"):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = NpDtype(dtype)
        self.device = device

    def data_ptr(self):
        return 1 << 20  # 16-byte aligned, like any CUDA allocation

    def stride(self, dim=None):
        s, acc = [], 1
        for n in reversed(self.shape):
            s.append(acc)
            acc *= n
        s = tuple(reversed(s))
        return s if dim is None else s[dim]

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.itemsize

    def is_contiguous(self):
        return True


def torch_of(module):
    """torch, where a kernel's module uses it (its launcher takes torch tensors: `import torch`,
    `import torch.nn as nn`, `from torch import empty_like`), else None."""
    torch = sys.modules.get("torch")

    def of_torch(v):
        name = getattr(v, "__name__", "") if isinstance(v, type(sys)) else getattr(v, "__module__", "")
        return isinstance(name, str) and (name == "torch" or name.startswith("torch."))
    return torch if torch is not None and any(of_torch(v) for v in vars(module).values()) else None


def meta_tensor(torch, shape, dtype):
    """A torch launcher's shape-only tensor: on torch's "meta" device (shapes, no memory)."""
    return torch.empty(tuple(int(s) for s in shape), dtype=getattr(torch, np.dtype(dtype).name), device="meta")


def _contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= int(s)
    return tuple(reversed(strides))


def launcher_of(mod, name):
    """The launcher `name` of a kernel's module, or None: a function (`l2norm_fwd`) or a dotted
    attribute path (`FusedChunkBasedFunction.apply`, an autograd Function's, as `kidiom init`
    writes it where the launch is in the Function's `forward`). The harness passes a contract's
    ARGS by place: those beyond a launcher's positional parameters go to its keyword-only ones,
    in order (FLA's `qk_rmsnorm_fwd(x, ..., *, store_rstd)`)."""
    obj = mod
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return _keyword_only_by_place(obj) if callable(obj) else None


def _keyword_only_by_place(fn):
    import functools
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):   # a builtin (`Function.apply`): called as it is
        return fn
    named = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
    if not named or any(p.kind == p.VAR_POSITIONAL for p in params):
        return fn
    places = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*args[:places], **dict(zip(named, args[places:])), **kwargs)
    return call
