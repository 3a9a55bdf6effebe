"""Where tensors live: host memory for Triton's interpreter (numpy), or a CUDA device (torch).

Both backends allocate every tensor inside a larger flat buffer whose tail holds a sentinel,
so that out-of-bounds reads (an input's tail is NaN: it leaks into the results) and writes (an
output's tail holds `OUT_SENTINEL`: any store changes it) are visible after a run.

The check's workers (worker.py) use these from a copy of this file (package `kidiom_rt`):
keep it free of imports beyond numpy, `.arrays` and `.interp`.

What each backend can observe: `violations()` (out-of-bounds accesses of the active lanes) and
`provenance()` (which output elements host code wrote, outside any kernel) are recorded by the patched
interpreter on a CPU; on a GPU neither is observed and both return None ("not checked": run
compute-sanitizer for the first).
"""
import numpy as np

from .arrays import NpTensor

__all__ = ["NumpyBackend", "TorchBackend", "OUT_SENTINEL", "PAD", "tail_ok", "host_array"]

PAD = 64                                 # sentinel elements after each tensor
OUT_SENTINEL = np.float32(-2.718281e37)  # tail of written tensors; any store changes it


def _sentinel_for(dtype, sentinel):
    if np.dtype(dtype).kind in "iub" and isinstance(sentinel, (float, np.floating)):
        return 0
    return sentinel


class NumpyBackend:
    name = "cpu"
    observes = {"out_of_bounds": True, "provenance": True}

    def describe(self):
        return "cpu (triton interpreter)"

    def __init__(self):
        from .interp import MEMORY
        self.memory = MEMORY   # extents of the tensors, for the interpreter's bounds check

    def _register(self, t, name, track=False):
        nbytes = t.numel() * t.element_size()
        live = t._storage.buf[: t.numel()].view(np.uint8) if track else None
        self.memory.register(name, t.data_ptr(), nbytes, track=live)
        self.memory.allocate(t._storage.data_ptr(), t._storage.nbytes())
        return t

    def begin(self):
        """Forget the tensors and violations of the previous case."""
        self.memory.clear()

    def reset(self):
        """Forget violations and recorded stores (another call on the same tensors)."""
        self.memory.reset()

    def violations(self):
        return self.memory.report()

    def checkpoint(self):
        """Around every kernel launch and at the end of a call: see host writes."""
        self.memory.checkpoint()

    def provenance(self, t, name):
        return self.memory.provenance(name, t.element_size())

    def adopt(self, values):
        """At a launch: the tensors it passes that the harness did not allocate (the launcher's
        own: an output it returns, a scratch buffer) are registered for the bounds check and
        tracked for provenance, whole allocations at a time (interp.MemoryMap.adopt)."""
        for what, v in values:
            if not (hasattr(v, "data_ptr") and hasattr(v, "untyped_storage")):
                continue
            try:
                if self.memory.covers(int(v.data_ptr())):
                    continue
                st = v.untyped_storage()
                start, nbytes = int(st.data_ptr()), int(st.nbytes())
            except Exception:  # noqa: BLE001 - not host memory (a meta tensor): nothing to watch
                continue
            self.memory.adopt(start, nbytes, st, what)

    def returned_writes(self, t):
        """Per element of a tensor the launcher returned, in order: (a kernel wrote it, host code
        wrote it), as far as its allocation was watched (interp.MemoryMap.element_writes)."""
        itemsize = int(t.element_size())
        offsets = np.zeros((), dtype=np.int64)
        for n, st in zip(t.shape, t.stride()):
            offsets = offsets[..., None] + np.arange(int(n), dtype=np.int64) * int(st)
        addrs = (np.int64(t.data_ptr()) + offsets.reshape(-1) * itemsize).astype(np.uint64)
        return self.memory.element_writes(addrs, itemsize)

    def put(self, array, pad=PAD, sentinel=np.nan, name="input", track=False):
        array = np.ascontiguousarray(array)
        sentinel = _sentinel_for(array.dtype, sentinel)
        return self._register(NpTensor.from_numpy(array, pad=pad, sentinel=sentinel), name, track)

    def poisoned(self, shape, dtype=np.float32, pad=PAD, name="output", track=False):
        """An output: NaN inside (unwritten elements stay NaN), OUT_SENTINEL in the tail."""
        return self._register(NpTensor.full(shape, np.nan, dtype=dtype, pad=pad, sentinel=OUT_SENTINEL), name, track)

    def refill(self, t, array, sentinel):
        """New contents for a tensor (same buffer): `array` inside, `sentinel` in the tail."""
        buf = t._storage.buf
        n = t.numel()
        buf[:n] = np.ascontiguousarray(array, dtype=buf.dtype).reshape(-1)
        buf[n:] = _sentinel_for(buf.dtype, sentinel)

    def flat(self, t):
        """A copy of the whole buffer: the tensor's elements, then the sentinel tail."""
        return np.array(t._storage.buf)

    def get(self, t):
        return np.array(t.numpy())

    def tail(self, t):
        return np.array(t.tail())

    def sync(self):
        pass


class TorchBackend:
    name = "cuda"
    observes = {"out_of_bounds": False, "provenance": False}

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
        flat_host[array.size:] = _sentinel_for(array.dtype, sentinel)
        flat = torch.from_numpy(flat_host).to(self.device)
        t = flat[: array.size].view(array.shape)
        t._kidiom_flat = flat
        t._kidiom_n = array.size
        return t

    def begin(self):
        pass

    def reset(self):
        pass

    def violations(self):
        return None   # not observed on a GPU (compute-sanitizer would)

    def checkpoint(self):
        pass

    def provenance(self, t, name):
        return None   # not observed on a GPU

    def adopt(self, values):
        pass

    def put(self, array, pad=PAD, sentinel=np.nan, name="input", track=False):
        array = np.ascontiguousarray(array)
        return self._alloc(array, pad, sentinel)

    def poisoned(self, shape, dtype=np.float32, pad=PAD, name="output", track=False):
        return self._alloc(np.full(shape, np.nan, dtype=dtype), pad, OUT_SENTINEL)

    def refill(self, t, array, sentinel):
        flat_host = np.empty(t._kidiom_flat.numel(), dtype=np.asarray(array).dtype)
        n = t._kidiom_n
        flat_host[:n] = np.asarray(array).reshape(-1)
        flat_host[n:] = _sentinel_for(flat_host.dtype, sentinel)
        t._kidiom_flat.copy_(self.torch.from_numpy(flat_host).to(self.device))

    def flat(self, t):
        return t._kidiom_flat.detach().cpu().numpy().copy()

    def get(self, t):
        return t.detach().cpu().numpy().copy()

    def tail(self, t):
        return t._kidiom_flat[t._kidiom_n:].cpu().numpy()

    def sync(self):
        self.torch.cuda.synchronize()


def host_array(t):
    """A tensor a launcher returned, as a float32 numpy array on the host (an NpTensor, a torch
    tensor on any device; bf16 and fp16 widen exactly)."""
    if isinstance(t, NpTensor):
        return np.array(t.numpy(), dtype=np.float32)
    t = t.detach()
    if str(t.dtype) in ("torch.bfloat16", "torch.float16"):
        t = t.float()
    return np.array(t.cpu().numpy(), dtype=np.float32)


def tail_ok(backend, t, sentinel):
    tail = backend.tail(t)
    if isinstance(sentinel, float) and np.isnan(sentinel):
        return bool(np.all(np.isnan(tail)))
    return bool(np.all(tail == sentinel))
