"""Where tensors live: host memory for Triton's interpreter (numpy), or a CUDA device (torch).

Both backends allocate every tensor inside a larger flat buffer whose tail holds a sentinel,
so that out-of-bounds reads (an input's tail is NaN: it leaks into the results) and writes (an
output's tail holds `OUT_SENTINEL`: any store changes it) are visible after a run.
"""
import numpy as np

from .arrays import NpTensor

__all__ = ["NumpyBackend", "TorchBackend", "OUT_SENTINEL", "PAD"]

PAD = 64                                 # sentinel elements after each tensor
OUT_SENTINEL = np.float32(-2.718281e37)  # tail of written tensors; any store changes it


class NumpyBackend:
    name = "cpu"

    def describe(self):
        return "cpu (triton interpreter)"

    def __init__(self):
        from .interp import MEMORY
        self.memory = MEMORY   # extents of the tensors, for the interpreter's bounds check

    def _register(self, t, name):
        self.memory.register(name, t.data_ptr(), t.numel() * t.element_size())
        return t

    def begin(self):
        """Forget the tensors and violations of the previous case."""
        self.memory.clear()

    def violations(self):
        return self.memory.report()

    def put(self, array, pad=PAD, sentinel=np.nan, name="input"):
        array = np.ascontiguousarray(array)
        if array.dtype.kind in "iu" and isinstance(sentinel, float):
            sentinel = 0
        return self._register(NpTensor.from_numpy(array, pad=pad, sentinel=sentinel), name)

    def poisoned(self, shape, dtype=np.float32, pad=PAD, name="output"):
        """An output: NaN inside (unwritten elements stay NaN), OUT_SENTINEL in the tail."""
        return self._register(NpTensor.full(shape, np.nan, dtype=dtype, pad=pad, sentinel=OUT_SENTINEL), name)

    def get(self, t):
        return np.array(t.numpy())

    def tail(self, t):
        return np.array(t.tail())

    def sync(self):
        pass


class TorchBackend:
    name = "cuda"

    def __init__(self):
        import torch
        self.torch = torch
        self.device = torch.device("cuda")

    def describe(self):
        return f"cuda ({self.torch.cuda.get_device_name()})"

    def _alloc(self, array, pad, sentinel):
        torch = self.torch
        flat_host = np.empty(array.size + pad, dtype=array.dtype)
        flat_host[: array.size] = array.reshape(-1)
        flat_host[array.size:] = sentinel
        flat = torch.from_numpy(flat_host).to(self.device)
        t = flat[: array.size].view(array.shape)
        t._kidiom_flat = flat
        t._kidiom_n = array.size
        return t

    def begin(self):
        pass

    def violations(self):
        return []   # on a GPU, run compute-sanitizer for this

    def put(self, array, pad=PAD, sentinel=np.nan, name="input"):
        array = np.ascontiguousarray(array)
        if array.dtype.kind in "iu" and isinstance(sentinel, float):
            sentinel = 0
        return self._alloc(array, pad, sentinel)

    def poisoned(self, shape, dtype=np.float32, pad=PAD, name="output"):
        return self._alloc(np.full(shape, np.nan, dtype=dtype), pad, OUT_SENTINEL)

    def get(self, t):
        return t.detach().cpu().numpy().copy()

    def tail(self, t):
        return t._kidiom_flat[t._kidiom_n:].cpu().numpy()

    def sync(self):
        self.torch.cuda.synchronize()


def tail_ok(backend, t, sentinel):
    tail = backend.tail(t)
    if isinstance(sentinel, float) and np.isnan(sentinel):
        return bool(np.all(np.isnan(tail)))
    return bool(np.all(tail == sentinel))
