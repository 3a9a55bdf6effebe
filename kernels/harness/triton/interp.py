"""Triton's interpreter, made to round `tl.dot` operands like the GPU does.

On an NVIDIA GPU (sm_80 and later), `tl.dot` on float32 operands runs on tensor cores in TF32
unless the kernel asks for `input_precision="ieee"` (or a split precision): the tensor core reads
each float32 operand as TF32, ignoring its 13 low mantissa bits (a truncation: Triton feeds the
fp32 bits as they are, which its `tl.dot` documentation warns "may bias the result"; rounding
takes an explicit `cvt.rna.tf32.f32`, as its tf32x3 lowering does for the big part), and the
products are accumulated in float32. Triton's interpreter multiplies in plain float32, so a
precision bug of that kind is invisible on a CPU. `tf32_dot()` patches the interpreter's dot
(`InterpreterBuilder.create_dot`) in this process so that it rounds exactly when the GPU would:
float32 operands and input precision TF32 (the default, `"tf32"` and `allow_tf32=True`).

The split precisions are emulated the way Triton lowers them, so that a search over them sees
their real error rather than plain float32's:
- `"tf32x3"` (Triton's F32DotTC pass): a = big + small with big = rna_tf32(a) (an explicit
  `cvt.rna`), small = a - big (read as TF32 by the tensor core, so truncated), and the product is
  small·B_big + A_big·b_small + A_big·B_big, three TF32 dots accumulated in that order (the
  small·small term is dropped).
- `"bf16x3"` / `"bf16x6"` (BF16DotTC): a = hi + mid + lo, each rounded to bfloat16 (nearest
  even); x3 keeps mid·hi + hi·mid + hi·hi, x6 adds mid·mid, lo·hi and hi·lo, smallest first.
`"ieee"` is plain float32, as the interpreter computes it.
"""
import contextlib
import inspect

import numpy as np

__all__ = ["round_to_tf32", "truncate_to_tf32", "round_to_bf16", "emulated_dot", "tf32_dot", "install_tf32_dot",
           "uninstall_tf32_dot", "tf32_dot_installed", "install_bounds_check", "install_comparisons", "MEMORY",
           "install_program_order", "PROGRAMS", "program_schedule"]

_ORIGINAL = None


def round_to_tf32(x):
    """Round float32 values to TF32 (10 explicit mantissa bits), nearest, ties away from zero.
    Inf and NaN pass unchanged; finite values that round past the largest float become inf."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32)


def truncate_to_tf32(x):
    """What a tensor core reads of float32 values as TF32: the 13 low mantissa bits dropped
    (toward zero). Inf and NaN pass unchanged."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    return np.where(special, bits, bits & np.uint32(0xFFFFE000)).view(np.float32)


def round_to_bf16(x):
    """Round float32 values to bfloat16 (8 explicit mantissa bits), nearest even, kept as float32.
    Inf and NaN pass unchanged."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = (bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)
    return np.where(special, bits, rounded).view(np.float32)


def _precision_name(input_precision):
    name = getattr(input_precision, "name", str(input_precision))
    return name.upper().rsplit(".", 1)[-1]


def _is_tf32(input_precision):
    return _precision_name(input_precision) == "TF32"


def _split(a, rnd, parts):
    """a = parts[0] + parts[1] + ...: each the rounding of what the previous ones left (float32);
    for tf32x3 the last part is the plain remainder (the tensor core reads it), for bf16x3/x6 every
    part is rounded to bfloat16 (`truncf` to bf16 in Triton's lowering)."""
    out, rest = [], np.asarray(a, dtype=np.float32)
    for k in range(parts):
        p = rest if (rnd is round_to_tf32 and k == parts - 1) else rnd(rest)
        out.append(p)
        rest = (rest - p).astype(np.float32)
    return out


# The products each split precision keeps, smallest first (the order Triton accumulates them),
# as (index into a's parts, index into b's parts).
_SPLIT_DOTS = {
    "TF32X3": (round_to_tf32, 2, ((1, 0), (0, 1), (0, 0))),
    "BF16X3": (round_to_bf16, 2, ((1, 0), (0, 1), (0, 0))),
    "BF16X6": (round_to_bf16, 3, ((1, 1), (2, 0), (0, 2), (1, 0), (0, 1), (0, 0))),
}


def emulated_dot(a, b, acc, input_precision):
    """a @ b + acc (float32 numpy arrays) as the GPU computes it at `input_precision`, or None
    where the interpreter's plain float32 product is already faithful (ieee)."""
    name = _precision_name(input_precision)
    if name == "TF32":
        return np.matmul(truncate_to_tf32(a), truncate_to_tf32(b), dtype=np.float32) + acc
    split = _SPLIT_DOTS.get(name)
    if split is None:
        return None
    rnd, parts, dots = split
    pa, pb = _split(a, rnd, parts), _split(b, rnd, parts)
    # tf32x3's parts are fed to TF32 dots: the last (small) part is read truncated
    feed = truncate_to_tf32 if name == "TF32X3" else (lambda x: x)
    pa, pb = pa[:-1] + [feed(pa[-1])], pb[:-1] + [feed(pb[-1])]
    out = np.array(acc, dtype=np.float32)
    for i, j in dots:
        out = np.matmul(pa[i], pb[j], dtype=np.float32) + out
    return out


def install_tf32_dot():
    """Patch the interpreter's dot in this process (idempotent)."""
    global _ORIGINAL
    from triton.runtime import interpreter as ti
    if _ORIGINAL is not None:
        return
    original = ti.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.dtype == np.float32 and b.data.dtype == np.float32 and d.data.dtype == np.float32:
            out = emulated_dot(a.data, b.data, d.data, input_precision)
            if out is not None:
                return ti.TensorHandle(out, d.dtype.scalar)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot.__wrapped__ = original
    ti.InterpreterBuilder.create_dot = create_dot
    _ORIGINAL = original
    _allow_emulated_precisions(ti)


def _allow_emulated_precisions(ti):
    """The interpreter accepts only tf32, tf32x3 and ieee; a kernel asking for a split bfloat16
    precision that this Triton compiles for NVIDIA (3.6 and later) must run here too."""
    import dataclasses
    from triton._C.libtriton import ir
    known = {n.upper() for n in dir(ir.INPUT_PRECISION) if not n.startswith("_")}
    extra = tuple(n.lower() for n in _SPLIT_DOTS if n.startswith("BF16") and n in known)
    b = getattr(ti, "interpreter_builder", None)
    opts = getattr(b, "options", None)
    if opts is None or not extra:
        return
    allowed = tuple(opts.allowed_dot_input_precisions) + tuple(
        n for n in extra if n not in opts.allowed_dot_input_precisions)
    b.options = dataclasses.replace(opts, allowed_dot_input_precisions=allowed)


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


# Device-function calls ------------------------------------------------------------------------------
# Triton's interpreter patches the language (`_patch_lang`: every builtin of the modules tl or
# tl.core that the function's globals hold, of tl.math and tl.tensor, rewrapped, found by
# inspect.getmembers) when a launch starts, and again on every call of a @jit device function,
# `tl.sum` and `tl.cdiv` included: hundreds of times per launch, about half of a prefill call's
# time. Within a launch only the first such patch of a module does anything: the device call's
# patch is never undone, and what is patched no longer reads as a builtin, so the next finds
# nothing to patch (the rest of `_patch_lang` sets the same attributes to equivalent wrappers). So
# inside a launch a device function whose modules are patched already skips it; the first call
# on another module, and any call outside a launch, run the interpreter's own call.

_ORIGINAL_DEVICE_CALL = None
_LAUNCH_LANGS = []    # per launch in progress (innermost last): ids of the language modules patched
_LANGS_OF = {}        # id(function) -> (the function, those of its globals); held, so no id is reused


def _langs_of(fn, tl):
    entry = _LANGS_OF.get(id(fn))
    if entry is None or entry[0] is not fn:
        entry = (fn, frozenset(id(v) for v in getattr(fn, "__globals__", {}).values() if v is tl or v is tl.core))
        _LANGS_OF[id(fn)] = entry
    return entry[1]


def install_fast_device_calls():
    """Skip the redundant language patch of device-function calls inside a launch (idempotent;
    a Triton whose interpreter does not call as expected keeps its own call)."""
    global _ORIGINAL_DEVICE_CALL
    import inspect
    from triton.runtime import interpreter as ti
    if _ORIGINAL_DEVICE_CALL is not None:
        return
    IF, GE, tl = ti.InterpretedFunction, ti.GridExecutor, ti.tl
    call, grid_call = IF.__call__, GE.__call__
    try:
        src = inspect.getsource(call)
    except (OSError, TypeError):
        return
    if not ("_patch_lang(self.fn)" in src and "self.rewrite()" in src and "InterpreterError" in src
            and hasattr(IF, "rewrite") and hasattr(ti, "InterpreterError")):
        return

    def device_call(self, *args, **kwargs):
        langs = _langs_of(self.fn, tl)
        if _LAUNCH_LANGS and langs <= _LAUNCH_LANGS[-1]:
            fn = self.rewrite()
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - as the interpreter's own call reports it
                raise ti.InterpreterError(repr(e)) from e
        if _LAUNCH_LANGS:
            _LAUNCH_LANGS[-1].update(langs)   # patched by the call below, for the rest of the launch
        return call(self, *args, **kwargs)

    def launch(self, *args, **kwargs):
        _LAUNCH_LANGS.append(set(_langs_of(self.fn, tl)))
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            _LAUNCH_LANGS.pop()

    device_call.__wrapped__, launch.__wrapped__ = call, grid_call
    IF.__call__, GE.__call__ = device_call, launch
    _ORIGINAL_DEVICE_CALL = (call, grid_call)


# Bounds checking and store provenance ---------------------------------------------------------------
# Under the interpreter every load and store goes through `create_masked_load/store` (atomics
# through `create_atomic_rmw/cas`) with the addresses of the active lanes. `MEMORY` records the
# extent of every tensor the harness allocated (without its sentinel padding); an active lane
# outside all of them is recorded as an out-of-bounds read or write: a CPU stand-in for
# compute-sanitizer's memcheck, which also sees reads that happen not to change the results.
# For the tensors registered with `track` it also keeps a shadow copy of their bytes: taken at
# the start of a call (`reset`), updated right after every kernel store, and compared with the
# live bytes at every `checkpoint` (before and after each kernel launch, and at the end of the
# call): a difference there was written by host code, not by a kernel. `provenance(name)` says
# which elements host code never wrote (an output computed on the host and written around or
# before the launch, a kernel that only copies what the host put there, are visible), and
# `kernel_written(name)` which elements a kernel store did write (a call that ran only some of a
# grid's programs is judged on those). `atomics` counts the atomic operations of a call.

# A launcher that allocates (torch.empty_like, a scratch buffer, a returned output) passes memory the
# harness never registered: `adopt` registers the whole allocation (its storage) at the launch that
# first passes it, tracked like an output, and keeps the storage alive until the next set. Its
# bounds are the allocation's, as compute-sanitizer sees a cudaMalloc'd buffer.

class MemoryMap:
    def __init__(self):
        self.regions = []   # (start, end, name)
        self.violations = {}
        self.tracked = {}   # name -> {start, end, buf (live bytes), shadow, host, kernel}
        self.adopted = []   # names of the launcher's allocations (this set's)
        self.allocations = []   # (start, end): whole buffers, padding included
        self.atomics = 0

    def clear(self):
        self.regions.clear()
        self.violations.clear()
        self.tracked.clear()
        self.adopted.clear()
        self.allocations.clear()
        self.atomics = 0

    def reset(self):
        """Forget violations and host writes, and the launcher's allocations of the last set; the
        tracked tensors' bytes now are the harness's (a new call on the same tensors)."""
        self.violations.clear()
        self.atomics = 0
        if self.adopted:
            gone = set(self.adopted)
            spans = {(tr["start"], tr["end"]) for n, tr in self.tracked.items() if n in gone}
            self.regions = [r for r in self.regions if r[2] not in gone]
            self.allocations = [a for a in self.allocations if a not in spans]
            for name in gone:
                self.tracked.pop(name, None)
            self.adopted.clear()
        for tr in self.tracked.values():
            tr["shadow"][:] = tr["buf"]
            tr["host"][:] = False
            tr["kernel"][:] = False

    def register(self, name, start, nbytes, track=None):
        """A tensor's extent; `track`: its bytes as a live uint8 numpy array, to see host writes."""
        self.regions.append((int(start), int(start) + int(nbytes), name))
        if track is not None:
            self.tracked[name] = {"start": int(start), "end": int(start) + int(nbytes), "buf": track,
                                  "shadow": np.array(track), "host": np.zeros(int(nbytes), bool),
                                  "kernel": np.zeros(int(nbytes), bool)}

    def covers(self, addr):
        return any(a <= addr < b for a, b, _ in self.regions)

    def adopt(self, start, nbytes, keep, what):
        """An allocation of the launcher's (`keep`: its storage, held until the next set), seen at
        a launch: registered and tracked from now on (host writes after this show)."""
        import ctypes
        start, nbytes = int(start), int(nbytes)
        if nbytes <= 0 or self.covers(start):
            return
        name = f"{what} (allocated by the launcher)"
        if name in self.tracked:
            name = f"{what} #{len(self.adopted) + 1} (allocated by the launcher)"
        live = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(start))
        self.register(name, start, nbytes, track=live)
        self.allocate(start, nbytes)
        self.tracked[name]["keep"] = keep
        self.adopted.append(name)

    def element_writes(self, addrs, itemsize):
        """Per element at byte address `addrs` (uint64): (a kernel store wrote every byte of it,
        host code wrote a byte of it since it was tracked); (False, False) outside tracked memory."""
        kernel, host = np.zeros(addrs.size, dtype=bool), np.zeros(addrs.size, dtype=bool)
        for tr in self.tracked.values():
            sel = (addrs >= np.uint64(tr["start"])) & (addrs + np.uint64(itemsize) <= np.uint64(tr["end"]))
            if not sel.any():
                continue
            off = (addrs[sel] - np.uint64(tr["start"])).astype(np.int64)
            idx = off[:, None] + np.arange(itemsize, dtype=np.int64)
            kernel[sel] = tr["kernel"][idx].all(axis=1)
            host[sel] = tr["host"][idx].any(axis=1)
        return kernel, host

    def checkpoint(self):
        """Bytes of tracked tensors that changed since the shadow was last right were written by
        host code: remember them."""
        for tr in self.tracked.values():
            diff = tr["buf"] != tr["shadow"]
            if diff.any():
                tr["host"] |= diff
                tr["shadow"][diff] = tr["buf"][diff]

    def allocate(self, start, nbytes):
        """A whole allocation (a harness tensor's buffer with its padding, a launcher's storage):
        a lane outside every one is dropped (`within`), so an out-of-bounds access is reported,
        never carried out on memory no one owns (the heap's: the worker would crash or lie)."""
        self.allocations.append((int(start), int(start) + int(nbytes)))

    def within(self, addrs, itemsize):
        """Per address: inside one allocation."""
        if not self.allocations:
            return np.ones(addrs.shape, dtype=bool)
        al = sorted(self.allocations)
        starts = np.array([a for a, _ in al], dtype=np.uint64)
        ends = np.array([b for _, b in al], dtype=np.uint64)
        idx = np.searchsorted(starts, addrs, side="right") - 1
        ok = idx >= 0
        ok[ok] &= addrs[ok] + np.uint64(itemsize) <= ends[idx[ok]]
        return ok

    def check(self, kind, addrs, itemsize):
        """Records the accesses outside every tensor; False where there were some."""
        if not self.regions or addrs.size == 0:
            return True
        regions = sorted(self.regions)
        starts = np.array([r[0] for r in regions], dtype=np.uint64)
        ends = np.array([r[1] for r in regions], dtype=np.uint64)
        idx = np.searchsorted(starts, addrs, side="right") - 1
        ok = idx >= 0
        ok[ok] &= addrs[ok] + np.uint64(itemsize) <= ends[idx[ok]]
        if ok.all():
            return True
        bad = addrs[~ok]
        near = idx[~ok]
        name = regions[int(near[0])][2] if near[0] >= 0 else "below every tensor"
        key = (kind, name)
        v = self.violations.setdefault(key, {"kind": kind, "near": name, "count": 0})
        v["count"] += int(bad.size)
        return False

    def record_store(self, addrs, itemsize):
        """After a store to `addrs`: remember the bytes it left in tracked tensors."""
        if not self.tracked or addrs.size == 0:
            return
        addrs = addrs.astype(np.uint64, copy=False)
        for tr in self.tracked.values():
            sel = (addrs >= np.uint64(tr["start"])) & (addrs + np.uint64(itemsize) <= np.uint64(tr["end"]))
            if not sel.any():
                continue
            off = (addrs[sel] - np.uint64(tr["start"])).astype(np.int64)
            idx = (off[:, None] + np.arange(itemsize, dtype=np.int64)).ravel()
            tr["shadow"][idx] = tr["buf"][idx]
            tr["kernel"][idx] = True

    def provenance(self, name, itemsize):
        """Per element of a tracked tensor: no host code wrote it since `reset` (call
        `checkpoint` first)."""
        return ~self.tracked[name]["host"].reshape(-1, itemsize).any(axis=1)

    def kernel_written(self, name, itemsize):
        """Per element of a tracked tensor: a kernel store wrote it since `reset`."""
        return self.tracked[name]["kernel"].reshape(-1, itemsize).any(axis=1)

    def report(self):
        return list(self.violations.values())


MEMORY = MemoryMap()
_ORIGINAL_MEM = None
# Observers of the same lanes (workprofile.py counts bytes by source line): each is called as
# obs(kind, addrs, itemsize), kind "load", "store" or "atomic", with the active lanes' addresses.
ACCESS_OBSERVERS = []


def _active(ptrs, mask):
    if mask is None:
        return np.asarray(ptrs.data).ravel()
    return np.asarray(ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]).ravel()


def _confined(ti, ptrs, mask, itemsize):
    """The mask of an access that went out of bounds, less its lanes outside every allocation."""
    on = np.ones(ptrs.data.shape, dtype=bool) if mask is None else np.broadcast_to(mask.data, ptrs.data.shape)
    inside = MEMORY.within(np.asarray(ptrs.data).ravel().astype(np.uint64), itemsize).reshape(ptrs.data.shape)
    from triton import language as tl
    return ti.TensorHandle(on & inside, tl.int1 if mask is None else mask.dtype)


def install_bounds_check():
    """Patch the interpreter's masked load and store (and atomics) to check addresses against
    MEMORY and to record stores into tracked tensors."""
    global _ORIGINAL_MEM
    from triton.runtime import interpreter as ti
    if _ORIGINAL_MEM is not None:
        return
    B = ti.InterpreterBuilder
    load, store = B.create_masked_load, B.create_masked_store
    rmw, cas = B.create_atomic_rmw, B.create_atomic_cas

    def itemsize_of(ptrs):
        return ti._get_np_dtype(ptrs.get_element_ty()).itemsize

    # the cache arguments after `other` / `mask` differ between Triton versions (3.6: a modifier
    # and an eviction policy, 3.9: one policy): passed through as they come
    def create_masked_load(self, ptrs, mask, other, *cache, **kw):
        n, addrs = itemsize_of(ptrs), _active(ptrs, mask)
        if not MEMORY.check("read", addrs, n):
            mask = _confined(ti, ptrs, mask, n)
        for obs in ACCESS_OBSERVERS:
            obs("load", addrs, n)
        return load(self, ptrs, mask, other, *cache, **kw)

    def create_masked_store(self, ptrs, value, mask, *cache, **kw):
        n, addrs = itemsize_of(ptrs), _active(ptrs, mask)
        if not MEMORY.check("write", addrs, n):
            mask = _confined(ti, ptrs, mask, n)
        for obs in ACCESS_OBSERVERS:
            obs("store", addrs, n)
        r = store(self, ptrs, value, mask, *cache, **kw)
        MEMORY.record_store(addrs, n)
        return r

    def arg_of(fn, name):
        """Where `name` is among fn's arguments (after self): the interpreter's signatures of
        the atomics differ between Triton versions."""
        params = list(inspect.signature(fn).parameters)[1:]
        i = params.index(name) if name in params else None

        def get(args, kwargs):
            if name in kwargs:
                return kwargs[name]
            return args[i] if i is not None and i < len(args) else None
        return get

    rmw_ptr, rmw_mask, cas_ptr = arg_of(rmw, "ptr"), arg_of(rmw, "mask"), arg_of(cas, "ptr")

    def atomic(orig, ptr_of, mask_of):
        def wrapped(self, *args, **kwargs):
            ptr = ptr_of(args, kwargs)
            mask = mask_of(args, kwargs) if mask_of else None
            n, addrs = itemsize_of(ptr), _active(ptr, mask)
            MEMORY.atomics += 1
            MEMORY.check("read", addrs, n)
            MEMORY.check("write", addrs, n)
            for obs in ACCESS_OBSERVERS:
                obs("atomic", addrs, n)
            r = orig(self, *args, **kwargs)
            MEMORY.record_store(addrs, n)
            return r
        return wrapped

    create_atomic_rmw = atomic(rmw, rmw_ptr, rmw_mask)
    create_atomic_cas = atomic(cas, cas_ptr, None)

    B.create_masked_load = create_masked_load
    B.create_masked_store = create_masked_store
    B.create_atomic_rmw = create_atomic_rmw
    B.create_atomic_cas = create_atomic_cas
    _ORIGINAL_MEM = (load, store, rmw, cas)


# Program order and partial grids ------------------------------------------------------------------
# The interpreter runs a grid's programs one after another in a fixed order (x outer, z inner).
# A kernel whose programs communicate (one reads what another writes, or accumulates into shared
# output without atomics) then looks deterministic and correct, while on a GPU programs run
# concurrently in any order. `PROGRAMS` (set by the worker per call) makes the interpreter run a
# launch's programs in another order ("reversed", or "shuffle" with `seed`), and with `sample` only
# that many of them (the first, the last and seeded others: a GPU shape's specialization where the
# whole grid is too slow to interpret). Each program still runs to completion: programs interleave
# by order, never mid-program. `STATS` counts programs run and in the grids of the call's launches.
#
# How: the interpreter's grid loop calls `set_grid_dim` once, then per program `set_grid_idx` and
# the kernel's function (`GridExecutor.fn`). While a launch runs, the executor's function is
# replaced by `_Schedule`, which sets the k-th scheduled program's index itself before running it
# (and runs nothing once the schedule is exhausted), so the loop's own order no longer matters.

PROGRAMS = {"order": "natural", "seed": 0, "sample": None}
STATS = {"ran": 0, "of": 0}
_ORIGINAL_GRID = None


def program_schedule(grid, order="natural", seed=0, sample=None):
    """The programs (x, y, z) of `grid` to run, in the order to run them."""
    nx, ny, nz = (tuple(int(g) for g in grid) + (1, 1, 1))[:3]
    total = nx * ny * nz
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, total])
    if sample is not None and 0 < int(sample) < total:
        k = int(sample)
        # the first and the last program, and seeded others
        picked = {0, total - 1} if k >= 2 else {0}
        if k > len(picked):
            rest = np.arange(1, total - 1)
            picked.update(int(i) for i in rng.choice(rest, size=min(k - len(picked), rest.size), replace=False))
        linear = np.array(sorted(picked), dtype=np.int64)
    else:
        linear = np.arange(total, dtype=np.int64)
    if order == "reversed":
        linear = linear[::-1]
    elif order == "shuffle":
        linear = rng.permutation(linear)
    elif order != "natural":
        raise ValueError(f"unknown program order {order!r}")
    z = linear % nz
    y = (linear // nz) % ny
    x = linear // (nz * ny)
    return list(zip(x.tolist(), y.tolist(), z.tolist())), total


class _Schedule:
    """Stands in for a GridExecutor's kernel function during one launch (see above)."""

    def __init__(self, fn, builder, set_idx, schedule):
        self.fn, self.builder, self.set_idx, self.schedule, self.k = fn, builder, set_idx, schedule, 0

    def __call__(self, *args, **kwargs):
        k = self.k
        self.k += 1
        if k >= len(self.schedule):
            return None
        self.set_idx(self.builder, *self.schedule[k])
        STATS["ran"] += 1
        return self.fn(*args, **kwargs)


def install_program_order():
    """Patch the interpreter's grid loop to follow `PROGRAMS` (idempotent). Natural order on
    the whole grid runs exactly as before."""
    global _ORIGINAL_GRID
    from triton.runtime import interpreter as ti
    if _ORIGINAL_GRID is not None:
        return
    GE, B = ti.GridExecutor, ti.InterpreterBuilder
    call, set_dim, set_idx = GE.__call__, B.set_grid_dim, B.set_grid_idx
    running = []   # the executors whose launch is in progress (innermost last)

    def grid_call(self, *args, **kwargs):
        running.append(self)
        fn = self.fn
        try:
            return call(self, *args, **kwargs)
        finally:
            self.fn = fn
            running.pop()

    def set_grid_dim(self, nx, ny, nz):
        set_dim(self, nx, ny, nz)
        total = int(nx) * int(ny) * int(nz)
        STATS["of"] += total
        if not running:
            STATS["ran"] += total
            return
        ex = running[-1]
        if PROGRAMS.get("order", "natural") == "natural" and not PROGRAMS.get("sample"):
            STATS["ran"] += total
            return
        schedule, _ = program_schedule((nx, ny, nz), PROGRAMS.get("order", "natural"), PROGRAMS.get("seed", 0),
                                       PROGRAMS.get("sample"))
        ex.fn = _Schedule(ex.fn, self, set_idx, schedule)

    GE.__call__ = grid_call
    B.set_grid_dim = set_grid_dim
    _ORIGINAL_GRID = (call, set_dim)


# narrowing float casts (issue #27) -----------------------------------------------------------------
# Triton 3.x's interpreter casts float32 -> bfloat16 by truncation (`cast_impl` passes no rounding
# mode to `_convert_float`), and float32 -> float8 by adding the cut-off bit to the mantissa and
# OR-ing it into the exponent field (a carry out of the mantissa is lost, ties do not go to even,
# no saturation). The GPU rounds both to nearest even (`cvt.rn.bf16.f32`; `cvt.rn.satfinite.e4m3x2`
# for float8e4nv). A state stored in bf16 or fp8 is rounded at every step, so these casts decide the
# drift; `install_faithful_casts` makes the interpreter round as the GPU does for float32 (and
# float16) sources into bfloat16 and float8e4nv, which is what the precision gate measures.

def _f32_to_bf16_bits(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (b & 0x7FFFFFFF) > 0x7F800000
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((b >> 16) | 0x40).astype(np.uint16), r)


_E4M3 = None


def _f32_to_e4m3_bits(x):
    """float -> e4m3fn bits, nearest even, saturating to +-448 (satfinite); NaN -> 0x7f."""
    global _E4M3
    if _E4M3 is None:
        c = np.arange(127)
        e, m = c >> 3, c & 7
        _E4M3 = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(_E4M3, a), 0, 126)
    lo = np.maximum(hi - 1, 0)
    dlo, dhi = a - _E4M3[lo], _E4M3[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi))).astype(np.uint8)
    code = np.where(np.signbit(x), code | 0x80, code)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


def install_comparisons():
    """Comparisons as the GPU makes them (idempotent). Triton's interpreter computes `<`, `==`, ...
    through its arithmetic path, which labels the result with the left operand's type: `pid < M`
    holds booleans typed int32, and once splat to a block (`cols_mask & (pid < M)`, the usual mask of
    a row-and-column kernel) they become int32 data that `tl.load` refuses ("mask has unsupported
    dtype"), or that arithmetic treats as 32-bit. Here every comparison gives int1 booleans; float
    comparisons follow LLVM's fcmp predicates on NaN (ordered: false, `ONE` too; unordered: true),
    and bfloat16 operands (kept as their uint16 bits) compare as the numbers they are."""
    import triton.language as tl
    from triton.runtime import interpreter as ti
    B = ti.InterpreterBuilder
    if getattr(B, "_kidiom_comparisons", False):
        return

    def values(h):
        if h.dtype.scalar == tl.bfloat16 and h.data.dtype == np.uint16:
            return (h.data.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return h.data

    def compare(op, unordered=False, ordered_ne=False):
        def create(self, lhs, rhs):
            a, b = values(lhs), values(rhs)
            out = np.asarray(op(a, b), dtype=np.bool_)
            if ordered_ne or unordered:
                nan = np.isnan(a) | np.isnan(b)
                out = (out | nan) if unordered else (out & ~nan)
            return ti.TensorHandle(out, tl.int1)
        return create

    ops = {"LT": np.less, "GT": np.greater, "LE": np.less_equal, "GE": np.greater_equal, "EQ": np.equal,
           "NE": np.not_equal}
    for name, op in ops.items():
        if name in ("EQ", "NE"):
            setattr(B, f"create_icmp{name}", compare(op))
        else:
            setattr(B, f"create_icmpS{name}", compare(op))
            setattr(B, f"create_icmpU{name}", compare(op))
        setattr(B, f"create_fcmpO{name}", compare(op, ordered_ne=name == "NE"))
        setattr(B, f"create_fcmpU{name}", compare(op, unordered=name != "NE"))   # UNE: != is true on NaN
    B._kidiom_comparisons = True


def install_faithful_casts():
    """Round float32 / float16 -> bfloat16 and -> float8e4nv to nearest even in the interpreter,
    and convert floats to integers saturating (NaN to 0), as the GPU does (idempotent)."""
    import triton.language as tl
    from triton.runtime import interpreter as ti
    B = ti.InterpreterBuilder
    if getattr(B, "_kidiom_faithful_casts", False):
        return
    cast_orig, fp_orig = B.cast_impl, B.create_fp_to_fp
    wide = (tl.float32, tl.float16)

    def narrow(src, dst):
        s, d = src.dtype.scalar, dst.scalar
        if s in wide and d == tl.bfloat16:
            return ti.TensorHandle(_f32_to_bf16_bits(src.data).view(np.uint16), d)
        if s in wide and d == tl.float8e4nv:
            return ti.TensorHandle(_f32_to_e4m3_bits(src.data), d)
        return None

    def to_int(src, dst):
        """Float to integer as the GPU's cvt.rzi: toward zero, saturated at the integer type's
        range, NaN to 0 (numpy's astype, like x86, returns the 'integer indefinite' instead)."""
        s, d = src.dtype.scalar, dst.scalar
        if not (s.is_floating() and d.is_int()) or d.is_bool() or d.primitive_bitwidth > 64:
            return None
        x = src.data
        if s == tl.bfloat16 and x.dtype == np.uint16:
            x = (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
        x = np.asarray(x, dtype=np.float64)
        out_t = np.dtype(ti._get_np_dtype(d))
        info = np.iinfo(out_t)
        y = np.trunc(np.nan_to_num(x, nan=0.0, posinf=np.inf, neginf=-np.inf))
        lo, hi = float(info.min), float(info.max)
        res = np.where(y <= lo, info.min, np.where(y >= hi, info.max, 0)).astype(out_t)
        inside = (y > lo) & (y < hi)
        res[inside] = y[inside].astype(out_t)
        return ti.TensorHandle(res, d)

    def cast_impl(self, src, dst_type):
        h = narrow(src, dst_type)
        if h is None:
            h = to_int(src, dst_type)
        return h if h is not None else cast_orig(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        h = narrow(src, dst_type) if rounding_mode in (None, ti._ir.ROUNDING_MODE.RTNE) else None
        return h if h is not None else fp_orig(self, src, dst_type, rounding_mode)

    B.cast_impl, B.create_fp_to_fp = cast_impl, create_fp_to_fp
    B._kidiom_faithful_casts = True


# exp as the GPU computes it (issue #50, class 6) --------------------------------------------------
# Triton lowers a float32 `tl.exp(x)` to `ex2.approx.f32` of x * log2(e) rounded to float32 (PTX:
# `mul.f32 %r, %x, 0f3FB8AA3B; ex2.approx.f32`), and `tl.exp2(y)` to `ex2.approx.ftz.f32`. numpy's
# exp is exact to half an ulp; the product's rounding is not: at x = -30 it moves the result by up
# to 2e-6 relative. On numpy's exp the baseline is more accurate than on the device, and a rewrite
# to `tl.exp2(x * 1.4426950408889634)`, the device's own program, reads as materially worse.
# 2**y rounded to nearest stands for ex2.approx (within 2 ulp of it, PTX ISA); .ftz flushes a
# subnormal result to 0.
_LOG2E = np.float32(1.4426950408889634)
_TINY = np.finfo(np.float32).tiny


def device_exp2(y, ftz):
    """float32 2**y as `ex2.approx[.ftz].f32`, y a float32 array."""
    with np.errstate(over="ignore", under="ignore"):
        r = np.asarray(np.exp2(np.asarray(y, dtype=np.float64)), dtype=np.float32)
    return np.where(np.abs(r) < _TINY, np.float32(0), r) if ftz else r


def device_exp(x):
    """float32 exp(x) as Triton's lowering: 2**(x * log2e), the product rounded to float32."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        y = np.asarray(x, dtype=np.float32) * _LOG2E
    return device_exp2(y, ftz=False)


def install_device_exp():
    """float32 `tl.exp` and `tl.exp2` in the interpreter as the GPU computes them (idempotent);
    other dtypes as before. Installed before work counting wraps the builder (workprofile.py)."""
    from triton.runtime import interpreter as ti
    B = ti.InterpreterBuilder
    if getattr(B, "_kidiom_device_exp", False):
        return
    exp_orig, exp2_orig = B.create_exp, B.create_exp2

    def create_exp(self, arg):
        if np.asarray(arg.data).dtype != np.float32:
            return exp_orig(self, arg)
        return ti.TensorHandle(device_exp(arg.data), arg.dtype.scalar)

    def create_exp2(self, arg):
        if np.asarray(arg.data).dtype != np.float32:
            return exp2_orig(self, arg)
        return ti.TensorHandle(device_exp2(arg.data, ftz=True), arg.dtype.scalar)

    B.create_exp, B.create_exp2 = create_exp, create_exp2
    B._kidiom_device_exp = True


# Both sides of a runtime comparison (issue #50, class 5) --------------------------------------------
# A comparison a candidate adds on a program id or a runtime value (runtime_tests.py) is a branch
# whose side is chosen by sizes and program ids: one side may be taken only at the GPU's. The
# interpreter rewrites each such comparison in the candidate's file to pass its value through a
# recorder (under a name drawn at run time), and the check requires every side to have been taken
# by some program of some case. SIDES: {line: [some element true, some element false]}.
SIDES = {}


def _truth(value):
    data = getattr(getattr(value, "handle", None), "data", value)
    try:
        return np.asarray(data).astype(bool)
    except (TypeError, ValueError):
        return None


def install_side_watch(path, sites):
    """Record the sides taken by the comparisons `sites` ([{line, test}]: the line in `path` and
    the comparison's `ast.unparse` text) of `path`'s @triton.jit functions, into SIDES. Call
    before the functions first run (the interpreter rewrites a function on its first call)."""
    import ast
    import secrets

    from .runtime_tests import is_pick
    want = {}
    for s in sites:
        want.setdefault(int(s["line"]), set()).add(str(s["test"]))
    name = "_kidiom_side_" + secrets.token_hex(8)

    def record(line, value):
        t = _truth(value)
        seen = SIDES.setdefault(line, [False, False])
        if t is None:   # not a truth value the interpreter knows: neither side is claimed taken
            return value
        seen[0] = seen[0] or bool(t.any())
        seen[1] = seen[1] or not bool(t.all())
        return value

    def record_pick(line, fn, a, b):
        """A minimum or maximum: its sides are the first operand below the second, and above."""
        out = fn(a, b)
        seen = SIDES.setdefault(line, [False, False])
        try:
            da, db = (np.asarray(getattr(getattr(x, "handle", None), "data", getattr(x, "value", x))) for x in (a, b))
            seen[0] = seen[0] or bool(np.any(da < db))
            seen[1] = seen[1] or bool(np.any(da > db))
        except (TypeError, ValueError):
            pass
        return out

    class Wrap(ast.NodeTransformer):
        def __init__(self, offset):
            self.offset = offset

        def visit_Compare(self, node):
            text, line = ast.unparse(node), node.lineno + self.offset
            self.generic_visit(node)
            if text not in want.get(line, ()):
                return node
            return ast.copy_location(ast.Call(func=ast.Name(id=name, ctx=ast.Load()),
                                              args=[ast.Constant(line), node], keywords=[]), node)

        def visit_Call(self, node):
            text, line = ast.unparse(node), node.lineno + self.offset
            self.generic_visit(node)
            if text not in want.get(line, ()) or not is_pick(node):
                return node
            return ast.copy_location(ast.Call(func=ast.Name(id=name + "_pick", ctx=ast.Load()),
                                              args=[ast.Constant(line), node.func, *node.args], keywords=[]), node)

    def wrap(tree, offset, fn_globals):
        fn_globals[name], fn_globals[name + "_pick"] = record, record_pick
        return Wrap(offset).visit(tree)

    _add_pass(path, wrap)


# Passes over the AST of a file's @triton.jit functions, before Triton's own rewrite (the side
# watch above, the line watch below): the interpreter rewrites a function on its first call from
# its source (`FunctionRewriter._transform_ast`, alike in Triton 3.6 and 3.9); every pass of the
# function's file runs first, in the order installed.
_PASSES = {}   # realpath -> [pass(tree, offset, fn_globals) -> tree]


def _add_pass(path, fn):
    import ast
    import os
    from triton.runtime import interpreter as ti
    if not _PASSES:
        orig = ti.FunctionRewriter._transform_ast

        def transform(self, src):
            passes = _PASSES.get(os.path.realpath(self.filename or ""))
            if not passes:
                return orig(self, src)
            offset = self.def_file_lineno - 1
            tree = ast.parse(src)
            for p in passes:
                tree = p(tree, offset, self.fn.__globals__)
            tree = self.ast_transformer.visit(tree)
            ast.fix_missing_locations(tree)
            ast.increment_lineno(tree, offset)
            return tree

        ti.FunctionRewriter._transform_ast = transform
    _PASSES.setdefault(os.path.realpath(path), []).append(fn)


def install_line_watch(path, lines):
    """Record into coverage.RAN which of `lines` (of `path`) the @triton.jit functions ran: a
    marker before every statement holding one (coverage.Marker). Call before the functions first
    run."""
    import secrets

    from . import coverage
    name = "_kidiom_line_" + secrets.token_hex(8)

    def mark(tree, offset, fn_globals):
        fn_globals[name] = coverage.record
        return coverage.Marker(lines, name, offset).visit(tree)

    _add_pass(path, mark)
