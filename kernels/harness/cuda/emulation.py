"""Host side of any CUDA C++ kernel (an `extern "C" __global__` entry): compile and launch it.

A launch is data, from the kernel's contract (`launch(shape)`, docs/CONTRACTS.md): 1- to 3-D grid
and block, and the entry's parameters in order, each a tensor (`{"ptr": name}`), an int or a float.
The emulation's driver (`_driver`) is generated per parameter signature.

On a GPU (torch CUDA tensors): NVRTC -> PTX for compute_`ARCH`, loaded and launched through the
CUDA driver API (ctypes), on torch's current stream. On a CPU (kernels.harness.triton.arrays.NpTensor):
the same source is compiled by the host C++ compiler with a runtime of its own (`_RUNTIME`:
`__global__`, `threadIdx`, `__shared__`, `__syncthreads()`, warp shuffles, votes, atomics, ...)
and run block after block, the threads of a block as cooperating fibers in this one OS thread,
each on a stack of its own. A thread runs until it exits, reaches `__syncthreads()` (a real
barrier: it opens when every live thread of the block waits at it; a thread that exited counts as
arrived, as PTX's `exit` releases a barrier) or a warp collective (`__shfl_sync`, `_up`, `_down`,
`_xor`, `__syncwarp`, `__ballot_sync` / `__any_sync` / `__all_sync`, `__reduce_*_sync`: warps of
32 lanes, width and mask as PTX's shfl.sync honours them; complete once every lane of the mask
that has not exited has arrived, with the same operation and mask; a source lane outside it reads
NaN). `__shared__` variables are static storage of the library, set to NaN (all bits) before every
block, so a read before any write shows. A barrier that not every live thread reaches, lanes of a
mask at different collectives, and a wait no thread can end are reported as `EmulationError`
("barrier divergence", "warp divergence"), never a hang; a block that runs past `BLOCK_LIMIT_S` (an
endless loop, or a spin-wait on another thread, which cooperative threads never preempt) is
stopped ("runaway"). Atomics are plain read-modify-writes (one OS thread).

It is compiled for the device path, as NVRTC compiles it: `__CUDA_ARCH__` is `ARCH * 10`,
`__CUDACC__` and `__CUDACC_RTC__` are defined (after the system headers, which change with them),
so code under `#ifdef __CUDA_ARCH__` runs here as it would on the GPU; `emulation_info` says whether
the source reads differently on the host path. Blocks run in `ORDER` (natural, reversed, or a
seeded shuffle), and so do the threads of each block in every round between barriers and warp
collectives (a shuffle is drawn again each round): threads or blocks that communicate through
memory without synchronising give results that depend on it. Device-only code the host compiler
cannot build fails to build and is reported as needing a GPU (`NeedsGpu`), never run on its host
path instead.

Counting (`ORDER["order"] == "profile"`, for the harness's `profile`; `ORDER["seed"]` names the
report): the same source is built again with `-DKIDIOM_COUNT`, at -O0 with -g and the compiler's
ThreadSanitizer instrumentation, whose hooks this runtime defines itself (every load and store the
kernel makes, with address and size), the special functions wrapped, and `float` a counting type
(`-DKIDIOM_FLOPS`: add, sub, mul one flop, a division one special call; a source that does not
build with it is counted without flops). Each count is made against its call site (the return
address), mapped to the .cu's line by addr2line (`#line` keeps the source's numbers). Global
memory is the buffers of the kernel's pointer arguments; lanes of a warp that access the same
address in the same instruction (each lane's n-th execution of that load or store) count once, as
the GPU coalesces them; a load re-reads when its thread loaded every word of it before, with no
store to it since; special calls and flops are per thread. Redundant computation (issue #24):
each special call hands its operands' bits to the counting hook (`kidiom_count_special(kind, a,
b)`: a function's argument, a division's two operands, a `double` marked in the kind); a call is
a repeat (`repeat_calls`) when the same thread made the same (kind, operands) before in the block,
and uniform (`uniform_calls`) when another thread of the block made it first (per block: an
open-addressing table of the runtime's own, entries (key, thread) and key -> first thread, emptied
before every block, at most `MAX_EVAL_KEYS` entries). The counts go to `$TMPDIR/kidiom-profile-<seed>.json`
(workprofile.cuda_report, format 2), summed over the calls of that seed.

"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["launch_kernel", "prepare", "emulation_info", "NeedsGpu", "EmulationError",
           "LAUNCHES", "LAUNCHED", "ORDER", "ARCH", "BLOCK_LIMIT_S", "PROFILE_REPORT"]

ARCH = 90   # compute capability the GPU path compiles for (the manifests' sm_90); the emulation's __CUDA_ARCH__ / 10
BLOCK_LIMIT_S = 10.0     # a block of the emulation that runs longer is a runaway (a block takes milliseconds)
RUNAWAY_AGAIN_S = 2.0    # the limit of every later block of a library one of whose blocks ran away
PROFILE_REPORT = "kidiom-profile-{token}.json"   # in $TMPDIR, the counts of the calls of ORDER's seed


class NeedsGpu(RuntimeError):
    """The kernel cannot be run on this machine without a GPU."""


class EmulationError(RuntimeError):
    """The emulation ran the kernel and it failed as a launch fails or hangs on a GPU: barrier or
    warp divergence, a wait no thread can end, a runaway block, `__trap()`."""


# The runtime: fibers, barriers, warp collectives, shared memory, atomics, the counting hooks, and
# the CUDA built-ins the host compiler lacks; then (flop-counting builds) `float` is the counting
# float, and the vector types, shuffles and atomics are declared with it.
_RUNTIME = r"""
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csetjmp>
#include <csignal>
#include <ctime>
#include <type_traits>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#ifdef KIDIOM_COUNT
#include <unordered_map>
#include <dlfcn.h>
#endif
#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

// the emulation's own code: never instrumented (counting builds), never inlined into the kernel
#define KIDIOM_RT __attribute__((noinline, no_sanitize("thread")))
#define KIDIOM_API extern "C" __attribute__((visibility("default"), noinline, no_sanitize("thread")))
#define KIDIOM_INLINE __attribute__((always_inline)) inline

struct kidiom_dim3 { unsigned x, y, z; };
static kidiom_dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 32;

// ---- cooperative threads: one fiber (own stack) per thread of the running block -------------
namespace kidiom_rt {
enum { READY, AT_BARRIER, AT_WARP, EXITED };
enum { W_SYNC, W_IDX, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL, W_ADD, W_MIN, W_MAX, W_UMIN, W_UMAX,
       W_AND, W_OR, W_XORR, W_N };
static const char* const WNAME[W_N] = {
    "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
    "__any_sync", "__all_sync", "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
    "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync"};
struct Fiber {
    void* sp;
#if !defined(__x86_64__)
    ucontext_t uc;
#endif
    int state, line, op, arg, width, kind;
    unsigned mask;
    unsigned long long val, result;
};
static const size_t STACK_BYTES = 256 << 10;
static size_t guard_bytes;
static Fiber* fib;
static char** stacks;
static unsigned nstacks, nthreads, cur, block_no;
static void* sched_sp;
#if !defined(__x86_64__)
static ucontext_t sched_uc;
#endif
static void (*body)();
static int failed;
static char err[2048];
static sigjmp_buf escape;
static unsigned long long csr;   // mxcsr | x87 control word << 32, for fresh fibers

KIDIOM_RT void set_error(const char* fmt, ...) {
    if (failed) return;
    failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, sizeof err, fmt, ap);
    va_end(ap);
}
}  // namespace kidiom_rt

#if defined(__x86_64__)
// swap(save, to): callee-saved registers and the SSE / x87 control words on the stack, stack switched
extern "C" void kidiom_ctx_swap(void** save, void* to);
asm(R"ASM(
    .text
    .p2align 4
    .globl kidiom_ctx_swap
    .hidden kidiom_ctx_swap
    .type kidiom_ctx_swap, @function
kidiom_ctx_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kidiom_ctx_swap, .-kidiom_ctx_swap
)ASM");
#endif

extern "C" KIDIOM_RT __attribute__((noreturn, used)) void kidiom_fiber_start();

namespace kidiom_rt {
#ifdef KIDIOM_COUNT
static void count_block_reset();
#endif

KIDIOM_RT void to_sched() {
    Fiber& f = fib[cur];
#if defined(__x86_64__)
    kidiom_ctx_swap(&f.sp, sched_sp);
#else
    swapcontext(&f.uc, &sched_uc);
#endif
}

KIDIOM_RT void resume(unsigned t) {
    cur = t;
    unsigned bx = blockDim.x, by = blockDim.y;
    threadIdx = kidiom_dim3{t % bx, (t / bx) % by, t / (bx * by)};
#if defined(__x86_64__)
    kidiom_ctx_swap(&sched_sp, fib[t].sp);
#else
    swapcontext(&sched_uc, &fib[t].uc);
#endif
}

KIDIOM_RT void init_fiber(unsigned t) {
    Fiber& f = fib[t];
    f.state = READY;
    f.line = f.op = f.arg = f.width = f.kind = 0;
    f.mask = 0;
    f.val = f.result = 0;
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)stacks[t] + guard_bytes + STACK_BYTES) & ~(uintptr_t)15;
    unsigned long long* sp = (unsigned long long*)top;
    *--sp = 0;                                            // kidiom_fiber_start never returns
    *--sp = (unsigned long long)(uintptr_t)&kidiom_fiber_start;
    for (int i = 0; i < 6; i++) *--sp = 0;                // rbp rbx r12 r13 r14 r15
    *--sp = csr;
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stacks[t] + guard_bytes;
    f.uc.uc_stack.ss_size = STACK_BYTES;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, (void (*)())kidiom_fiber_start, 0);
#endif
}

KIDIOM_RT bool ensure_fibers(unsigned n) {
    if (!guard_bytes) guard_bytes = (size_t)sysconf(_SC_PAGESIZE);
    if (n <= nstacks) return true;
    Fiber* nf = (Fiber*)realloc(fib, sizeof(Fiber) * n);
    char** ns = (char**)realloc(stacks, sizeof(char*) * n);
    if (!nf || !ns) return false;
    fib = nf;
    stacks = ns;
    for (unsigned i = nstacks; i < n; i++) {
        void* p = mmap(nullptr, STACK_BYTES + guard_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return false;
        mprotect(p, guard_bytes, PROT_NONE);   // a stack overflow faults instead of corrupting
        stacks[i] = (char*)p;
        nstacks = i + 1;
    }
    return true;
}

// "0-63, 96-127 (96 threads)": the threads of the block for which sel[t]
KIDIOM_RT void thread_ranges(char* out, size_t cap, const unsigned char* sel, unsigned n) {
    size_t len = 0;
    unsigned count = 0, shown = 0;
    out[0] = 0;
    for (unsigned t = 0; t < n; t++) {
        if (!sel[t]) continue;
        unsigned e = t;
        while (e + 1 < n && sel[e + 1]) e++;
        count += e - t + 1;
        if (shown < 6 && len + 32 < cap) {
            len += snprintf(out + len, cap - len, "%s%u", shown ? ", " : "", t);
            if (e > t) len += snprintf(out + len, cap - len, "-%u", e);
        } else if (shown == 6 && len + 8 < cap) {
            len += snprintf(out + len, cap - len, ", ...");
        }
        shown++;
        t = e;
    }
    if (len + 24 < cap) snprintf(out + len, cap - len, " (%u thread%s)", count, count == 1 ? "" : "s");
}

KIDIOM_RT bool is_shuffle(int op) { return op == W_IDX || op == W_UP || op == W_DOWN || op == W_XOR; }

// The warp collective `me` waits at completes once every lane its mask names that has not exited
// (or does not exist: a partial warp) waits at it too, with the same operation and mask.
KIDIOM_RT bool try_complete(unsigned me) {
    Fiber& m = fib[me];
    unsigned w0 = me & ~31u, n = nthreads - w0 < 32 ? nthreads - w0 : 32;
    unsigned part = 0;
    for (unsigned l = 0; l < n; l++) {
        if (!((m.mask >> l) & 1)) continue;
        Fiber& o = fib[w0 + l];
        if (o.state == EXITED) continue;
        if (o.state != AT_WARP) return false;
        if (o.op != m.op || o.mask != m.mask || (is_shuffle(m.op) && o.width != m.width)) {
            set_error("warp divergence: block %u warp %u: lane %u waits at %s on line %d (mask 0x%08x) while lane "
                      "%u, named in its mask, waits at %s on line %d (mask 0x%08x); the lanes a *_sync mask names "
                      "must all reach the same operation with the same mask", block_no, me / 32, me - w0,
                      WNAME[m.op], m.line, m.mask, l, WNAME[o.op], o.line, o.mask);
            return false;
        }
        part |= 1u << l;
    }
    unsigned long long r = 0;
    unsigned ballot = 0;
    if (m.op >= W_BALLOT) {
        for (unsigned l = 0; l < n; l++) {
            if (!((part >> l) & 1)) continue;
            unsigned long long v = fib[w0 + l].val;
            unsigned u = (unsigned)v;
            int s = (int)u;
            bool first = !(part & ((1u << l) - 1));
            switch (m.op) {
            case W_BALLOT: case W_ANY: case W_ALL: if (v) ballot |= 1u << l; break;
            case W_ADD: r = (unsigned)(r + u); break;
            case W_MIN: r = first || s < (int)(unsigned)r ? (unsigned)s : r; break;
            case W_MAX: r = first || s > (int)(unsigned)r ? (unsigned)s : r; break;
            case W_UMIN: r = first || u < (unsigned)r ? u : r; break;
            case W_UMAX: r = first || u > (unsigned)r ? u : r; break;
            case W_AND: r = first ? u : ((unsigned)r & u); break;
            case W_OR: r = (unsigned)r | u; break;
            case W_XORR: r = (unsigned)r ^ u; break;
            }
        }
        if (m.op == W_BALLOT) r = ballot;
        if (m.op == W_ANY) r = ballot != 0;
        if (m.op == W_ALL) r = ballot == part;
    }
    // shuffles as PTX shfl.sync computes the source lane (c = ((32 - width) << 8) | (up ? 0 : 31))
    unsigned seg = (32u - (unsigned)m.width) & 31u, cval = m.op == W_UP ? 0u : 31u;
    for (unsigned l = 0; l < n; l++) {
        if (!((part >> l) & 1)) continue;
        Fiber& o = fib[w0 + l];
        if (is_shuffle(m.op)) {
            int b = (int)((unsigned)m.arg & 31u);
            int lane = (int)l, maxl = (int)((l & seg) | (cval & ~seg)), minl = (int)(l & seg), j = lane;
            bool ok = true;
            switch (m.op) {
            case W_IDX: j = minl | (b & ~(int)seg); ok = j <= maxl; break;
            case W_UP: j = lane - b; ok = j >= maxl; break;
            case W_DOWN: j = lane + b; ok = j <= maxl; break;
            case W_XOR: j = lane ^ b; ok = j <= maxl; break;
            }
            if (!ok) j = lane;
            // a source lane that takes no part (not in the mask, exited, absent): undefined, poisoned
            o.result = (j >= 0 && j < 32 && ((part >> j) & 1)) ? fib[w0 + j].val : ~0ULL;
        } else {
            o.result = r;
        }
        o.state = READY;
    }
    return true;
}

KIDIOM_RT void abandon() {   // a failure inside a fiber: back to the scheduler, never resumed
    for (;;) to_sched();
}

KIDIOM_RT unsigned long long warp(int op, int line, unsigned mask, unsigned long long val, int arg, int width) {
    unsigned me = cur;
    if (!((mask >> (me & 31)) & 1)) {
        set_error("warp divergence: block %u thread %u calls %s on line %d with mask 0x%08x, which does not name "
                  "its own lane %u", block_no, me, WNAME[op], line, mask, me & 31);
        abandon();
    }
    if (is_shuffle(op) && (width < 1 || width > 32 || (width & (width - 1)))) {
        set_error("%s on line %d: width %d is not a power of 2 from 1 to 32", WNAME[op], line, width);
        abandon();
    }
    Fiber& f = fib[me];
    f.state = AT_WARP;
    f.op = op;
    f.line = line;
    f.mask = mask;
    f.val = val;
    f.arg = arg;
    f.width = width;
    try_complete(me);
    if (failed) abandon();
    to_sched();
    return fib[me].result;
}

KIDIOM_RT int barrier(int line, int kind, int pred) {
    unsigned me = cur;
    Fiber& f = fib[me];
    f.state = AT_BARRIER;
    f.line = line;
    f.kind = kind;
    f.val = pred != 0;
    to_sched();
    return (int)fib[me].result;
}

KIDIOM_RT void exit_current() {
    unsigned me = cur, w0 = me & ~31u;
    fib[me].state = EXITED;
    // a warp collective that waited for this lane completes without it
    for (unsigned l = w0; l < nthreads && l < w0 + 32 && !failed; l++)
        if (fib[l].state == AT_WARP && ((fib[l].mask >> (me - w0)) & 1)) try_complete(l);
    abandon();
}

KIDIOM_RT unsigned long long xs_seed(unsigned long long seed) { return seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL; }

// order: 0 natural, 1 reversed, 2 shuffled (xorshift64 Fisher-Yates, the stream in *x)
KIDIOM_RT void order_ids(unsigned* ids, unsigned n, int order, unsigned long long* x) {
    for (unsigned i = 0; i < n; i++) ids[i] = i;
    if (order == 1) {
        for (unsigned i = 0, j = n; i + 1 < j; i++, j--) { unsigned t = ids[i]; ids[i] = ids[j - 1]; ids[j - 1] = t; }
    } else if (order == 2) {
        for (unsigned i = n; i > 1; i--) {
            *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
            unsigned j = (unsigned)(*x % i);
            unsigned t = ids[i - 1]; ids[i - 1] = ids[j]; ids[j] = t;
        }
    }
}

extern "C" char __start_kidiom_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_kidiom_shared[] __attribute__((weak, visibility("hidden")));

// One block: its threads as fibers, resumed in rounds (in `order`, a new shuffle every round)
// until each exits, waits at a barrier or at a warp collective; a barrier opens when every live
// thread waits at it (an exited thread counts as arrived, as PTX's exit does).
KIDIOM_RT int run_block(unsigned b, int order, unsigned long long seed, unsigned* perm, unsigned char* sel) {
    block_no = b;
    blockIdx = kidiom_dim3{b % gridDim.x, (b / gridDim.x) % gridDim.y, b / (gridDim.x * gridDim.y)};
    if (__start_kidiom_shared && __stop_kidiom_shared > __start_kidiom_shared)   // NaN before every block
        memset(__start_kidiom_shared, 0xff, (size_t)(__stop_kidiom_shared - __start_kidiom_shared));
    for (unsigned t = 0; t < nthreads; t++) init_fiber(t);
#ifdef KIDIOM_COUNT
    count_block_reset();
#endif
    unsigned long long x = xs_seed(seed + 1 + b);
    for (;;) {
        order_ids(perm, nthreads, order, &x);
        bool ran = false;
        for (unsigned k = 0; k < nthreads; k++) {
            unsigned t = perm[k];
            if (fib[t].state != READY) continue;
            resume(t);
            ran = true;
            if (failed) return 1;
        }
        if (ran) continue;
        unsigned live = 0, atb = 0;
        int line = -1;
        bool same = true;
        for (unsigned t = 0; t < nthreads; t++) {
            if (fib[t].state == EXITED) continue;
            live++;
            if (fib[t].state == AT_BARRIER) {
                atb++;
                if (line < 0) line = fib[t].line;
                else if (fib[t].line != line) same = false;
            }
        }
        if (!live) return 0;
        if (atb == live && same) {
            unsigned yes = 0;
            for (unsigned t = 0; t < nthreads; t++)
                if (fib[t].state == AT_BARRIER && fib[t].val) yes++;
            for (unsigned t = 0; t < nthreads; t++) {
                Fiber& f = fib[t];
                if (f.state != AT_BARRIER) continue;
                f.result = f.kind == 1 ? yes : f.kind == 2 ? (yes == live) : f.kind == 3 ? (yes > 0) : 0;
                f.state = READY;
            }
            continue;
        }
        // nothing can run: describe who waits where
        char msg[1536], part[512];
        size_t len = 0;
        int lines[4], nl = 0;
        for (unsigned t = 0; t < nthreads && nl < 4; t++) {
            if (fib[t].state != AT_BARRIER) continue;
            bool seen = false;
            for (int i = 0; i < nl; i++) seen |= lines[i] == fib[t].line;
            if (!seen) lines[nl++] = fib[t].line;
        }
        for (int i = 0; i < nl; i++) {
            for (unsigned t = 0; t < nthreads; t++) sel[t] = fib[t].state == AT_BARRIER && fib[t].line == lines[i];
            thread_ranges(part, sizeof part, sel, nthreads);
            len += snprintf(msg + len, sizeof msg - len, "%sthreads %s wait at __syncthreads() on line %d",
                            i ? ", " : "", part, lines[i]);
            if (len >= sizeof msg) len = sizeof msg - 1;
        }
        int ops[4][2], no = 0;
        for (unsigned t = 0; t < nthreads && no < 4; t++) {
            if (fib[t].state != AT_WARP) continue;
            bool seen = false;
            for (int i = 0; i < no; i++) seen |= ops[i][0] == fib[t].op && ops[i][1] == fib[t].line;
            if (!seen) { ops[no][0] = fib[t].op; ops[no][1] = fib[t].line; no++; }
        }
        for (int i = 0; i < no; i++) {
            for (unsigned t = 0; t < nthreads; t++)
                sel[t] = fib[t].state == AT_WARP && fib[t].op == ops[i][0] && fib[t].line == ops[i][1];
            thread_ranges(part, sizeof part, sel, nthreads);
            len += snprintf(msg + len, sizeof msg - len, "%sthreads %s wait at %s on line %d for lanes of their mask "
                            "that never arrive", len ? "; " : "", part, WNAME[ops[i][0]], ops[i][1]);
            if (len >= sizeof msg) len = sizeof msg - 1;
        }
        if (atb == live)
            set_error("barrier divergence: block %u: %s; a __syncthreads() that not every thread of the block reaches "
                      "is undefined behaviour on a GPU", b, msg);
        else
            set_error("barrier divergence (deadlock): block %u: %s; on a GPU this block would hang", b, msg);
        return 1;
    }
}

extern "C" KIDIOM_RT void kidiom_on_alarm(int) { siglongjmp(escape, 1); }

KIDIOM_RT int launch(const unsigned* g, const unsigned* bl, int order, unsigned long long seed, double limit_s,
                     void (*kernel_body)()) {
    failed = 0;
    err[0] = 0;
    body = kernel_body;
    unsigned long long nb = (unsigned long long)bl[0] * bl[1] * bl[2];
    unsigned long long ng = (unsigned long long)g[0] * g[1] * g[2];
    if (nb < 1 || nb > 1024 || bl[2] > 64) {
        set_error("a block of %u x %u x %u threads (CUDA allows 1 to 1024, z at most 64)", bl[0], bl[1], bl[2]);
        return 1;
    }
    if (ng < 1 || ng > 0xffffffffull) {
        set_error("a grid of %u x %u x %u blocks", g[0], g[1], g[2]);
        return 1;
    }
    unsigned grid = (unsigned)ng, block = (unsigned)nb;
    gridDim = kidiom_dim3{g[0], g[1], g[2]};
    blockDim = kidiom_dim3{bl[0], bl[1], bl[2]};
    nthreads = block;
    if (!ensure_fibers(block)) {
        set_error("the emulation could not allocate %u thread stacks", block);
        return 1;
    }
#if defined(__x86_64__)
    unsigned mx = 0;
    unsigned short cw = 0;
    asm volatile("stmxcsr %0" : "=m"(mx));
    asm volatile("fnstcw %0" : "=m"(cw));
    csr = mx | ((unsigned long long)cw << 32);
#endif
    unsigned* blocks = (unsigned*)malloc(sizeof(unsigned) * (grid ? grid : 1));
    unsigned* perm = (unsigned*)malloc(sizeof(unsigned) * block);
    unsigned char* sel = (unsigned char*)malloc(block);
    if (!blocks || !perm || !sel) {
        free(blocks); free(perm); free(sel);
        set_error("out of memory");
        return 1;
    }
    unsigned long long x = xs_seed(seed);
    order_ids(blocks, grid, order, &x);
    // a block that runs past limit_s (an endless loop, a spin-wait no other fiber can end) is stopped
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = kidiom_on_alarm;
    sigemptyset(&sa.sa_mask);
    sigset_t alarm_set, old_mask;
    sigemptyset(&alarm_set);
    sigaddset(&alarm_set, SIGALRM);
    timer_t timer;
    bool timed = false;
    if (limit_s > 0 && sigaction(SIGALRM, &sa, &old_sa) == 0) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = SIGALRM;
        sev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
        timed = timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0;
        if (!timed) sigaction(SIGALRM, &old_sa, nullptr);
    }
    sigprocmask(SIG_UNBLOCK, &alarm_set, &old_mask);
    volatile int rc = 0;
    if (sigsetjmp(escape, 1)) {
        set_error("runaway: block %u did not finish within %g s (thread %u was running: an endless loop, or a wait "
                  "for another thread, which the cooperative emulation never preempts)", block_no, limit_s, cur);
        rc = 1;
    } else {
        for (unsigned bi = 0; bi < grid; bi++) {
            if (timed) {
                struct itimerspec its;
                memset(&its, 0, sizeof its);
                its.it_value.tv_sec = (time_t)limit_s;
                its.it_value.tv_nsec = (long)((limit_s - (double)(time_t)limit_s) * 1e9);
                timer_settime(timer, 0, &its, nullptr);
            }
            if (run_block(blocks[bi], order, seed, perm, sel)) {
                rc = 1;
                break;
            }
        }
    }
    if (timed) {
        struct itimerspec off;
        memset(&off, 0, sizeof off);
        timer_settime(timer, 0, &off, nullptr);
        timer_delete(timer);
        sigaction(SIGALRM, &old_sa, nullptr);
    }
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    free(blocks);
    free(perm);
    free(sel);
    return rc;
}
}  // namespace kidiom_rt

extern "C" KIDIOM_RT __attribute__((noreturn, used)) void kidiom_fiber_start() {
    kidiom_rt::body();
    kidiom_rt::exit_current();
    __builtin_unreachable();
}

extern "C" KIDIOM_RT unsigned long long kidiom_rt_warp(int op, int line, unsigned mask, unsigned long long val,
                                                        int arg, int width) {
    return kidiom_rt::warp(op, line, mask, val, arg, width);
}
extern "C" KIDIOM_RT int kidiom_rt_barrier(int line, int kind, int pred) { return kidiom_rt::barrier(line, kind, pred); }
extern "C" KIDIOM_RT void kidiom_rt_trap(int line) {
    kidiom_rt::set_error("the kernel executed __trap() on line %d (block %u thread %u)", line, kidiom_rt::block_no,
                         kidiom_rt::cur);
    kidiom_rt::abandon();
}

#ifndef KIDIOM_COUNT
// -fsanitize=float-cast-overflow calls this at a float-to-integer conversion out of the target's
// range (GCC's layout of its data: source location, then the two types' descriptors; a float value
// of up to 64 bits comes in the handle's bits). The device saturates such a conversion and turns NaN
// into 0; the host's result is undefined, so the CPU cannot say what the GPU computes: the launch
// stops, naming the line.
namespace kidiom_rt {
struct UbLocation { const char* file; unsigned line, column; };
struct UbType { unsigned short kind, bits; char name[1]; };
struct UbFloatCast { UbLocation loc; const UbType* from; const UbType* to; };
}  // namespace kidiom_rt
extern "C" KIDIOM_RT void __ubsan_handle_float_cast_overflow(void* data, void* handle) {
    const kidiom_rt::UbFloatCast* d = (const kidiom_rt::UbFloatCast*)data;
    const unsigned long long raw = (unsigned long long)(size_t)handle;
    double v = 0;
    if (d->from->bits == 64) {
        memcpy(&v, &raw, 8);
    } else if (d->from->bits == 32) {
        const unsigned u = (unsigned)raw;
        float f;
        memcpy(&f, &u, 4);
        v = f;
    }
    kidiom_rt::set_error("device arithmetic the CPU cannot reproduce: line %u of %s converts %g (%s) to %s outside its "
                         "range; the GPU's conversion saturates (NaN to 0), the host's is undefined "
                         "(block %u thread %u)", d->loc.line, d->loc.file, v, d->from->name, d->to->name, kidiom_rt::block_no,
                         kidiom_rt::cur);
    kidiom_rt::abandon();
}
#endif

// ---- counting (profile builds: -DKIDIOM_COUNT, compiled with -fsanitize=thread for the hooks) -------
namespace kidiom_rt {
enum { C_LOAD, C_STORE, C_REREAD, C_FLOPS, C_REPEAT, C_UNIFORM, C_SPECIAL };
enum { S_EXP, S_EXP2, S_LOG, S_LOG2, S_SQRT, S_RSQRT, S_SIN, S_COS, S_ERF, S_DIV, S_N };
enum { NC = C_SPECIAL + S_N };
// a special call's key: its kind (low byte; bits 8 and 9: the first or second operand is a double)
// and its operands' bits (a float's zero-extended)
enum { S_WIDE_A = 1 << 8, S_WIDE_B = 1 << 9 };
static const size_t MAX_EVAL_KEYS = 1 << 19;   // special-call entries remembered per block (then none new)
}
#ifdef KIDIOM_COUNT
namespace kidiom_rt {
struct Site { long long c[NC]; };
struct Key {
    uintptr_t pc;
    unsigned long long n;
    uintptr_t addr;
    bool operator==(const Key& o) const { return pc == o.pc && n == o.n && addr == o.addr; }
};
struct KeyHash {
    size_t operator()(const Key& k) const {
        unsigned long long h = (unsigned long long)k.pc * 0x9E3779B97F4A7C15ULL;
        h ^= (k.n + 0x632BE59BD9B4E019ULL) * 0xC2B2AE3D27D4EB4FULL;
        h ^= (unsigned long long)k.addr * 0x165667B19E3779F9ULL;
        return (size_t)(h ^ (h >> 29));
    }
};
typedef std::unordered_map<uintptr_t, unsigned long long> WordMap;
struct Lane { WordMap n, loaded; };   // per thread: executions per site, words loaded (when)
// The block's special calls: an open-addressing table of entries (kind, thread, operand bits) ->
// value, in the runtime's own uninstrumented code (no STL: it would run at -O0 with the sanitizer's
// hooks). An entry of a thread says that thread made the call (repeat calls); the entry of thread
// NO_THREAD holds the first thread that made it (uniform calls). An entry is live when its `gen` is
// the block's: the table empties in O(1) before every block.
struct EvalSlot {
    unsigned long long a, b;
    unsigned kind, thread, value, gen;
};
static const unsigned NO_THREAD = 0xFFFFFFFFu;
static EvalSlot* etab;
static size_t ecap, esize;
static unsigned egen = 1;

KIDIOM_RT static size_t eval_hash(unsigned kind, unsigned thread, unsigned long long a, unsigned long long b) {
    unsigned long long h = ((unsigned long long)kind << 32 | thread) * 0x9E3779B97F4A7C15ULL;
    h ^= (a + 0x632BE59BD9B4E019ULL) * 0xC2B2AE3D27D4EB4FULL;
    h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ULL;
    h ^= (b + 0x165667B19E3779F9ULL) * 0x94D049BB133111EBULL;
    return (size_t)(h ^ (h >> 31));
}

// the entry of the key, inserted (value `value`) when absent and the table has room; `found` says
// whether it was there; null when absent and not inserted
KIDIOM_RT static EvalSlot* eval_entry(unsigned kind, unsigned thread, unsigned long long a, unsigned long long b,
                                      unsigned value, bool* found) {
    *found = false;
    if (2 * (esize + 1) > ecap) {   // grow (the load at most 1/2), the live entries moved over
        if (esize >= MAX_EVAL_KEYS) {
            for (size_t i = eval_hash(kind, thread, a, b) & (ecap - 1);; i = (i + 1) & (ecap - 1)) {
                EvalSlot& e = etab[i];
                if (e.gen != egen) return nullptr;
                if (e.kind == kind && e.thread == thread && e.a == a && e.b == b) { *found = true; return &e; }
            }
        }
        size_t ncap = ecap ? 2 * ecap : 4096;
        EvalSlot* nt = (EvalSlot*)calloc(ncap, sizeof(EvalSlot));
        if (!nt) return nullptr;
        for (size_t j = 0; j < ecap; j++) {
            EvalSlot& e = etab[j];
            if (e.gen != egen) continue;
            size_t i = eval_hash(e.kind, e.thread, e.a, e.b) & (ncap - 1);
            while (nt[i].gen == egen) i = (i + 1) & (ncap - 1);
            nt[i] = e;
        }
        free(etab);
        etab = nt;
        ecap = ncap;
    }
    for (size_t i = eval_hash(kind, thread, a, b) & (ecap - 1);; i = (i + 1) & (ecap - 1)) {
        EvalSlot& e = etab[i];
        if (e.gen != egen) {
            e = EvalSlot{a, b, kind, thread, value, egen};
            esize++;
            return &e;
        }
        if (e.kind == kind && e.thread == thread && e.a == a && e.b == b) { *found = true; return &e; }
    }
}
static int counting, in_hook;
static uintptr_t rlo[16], rhi[16];
static int nr;
static std::unordered_map<uintptr_t, Site>* sites;
static Lane* lanes;
static unsigned nlanes;
static std::unordered_map<Key, char, KeyHash>* warp_seen;   // per warp: (site, execution, address) -> re-read
static unsigned nwarps;
static WordMap* stored;   // word -> when it was last stored (by any thread)
static unsigned long long seq;
static long long lane_bytes;

KIDIOM_RT bool global(uintptr_t a, size_t n) {
    for (int i = 0; i < nr; i++)
        if (a < rhi[i] && a + n > rlo[i]) return true;
    return false;
}

static void count_block_reset() {
    if (!counting) return;
    in_hook = 1;
    if (nlanes < nthreads) {
        delete[] lanes;
        lanes = new Lane[nthreads];
        nlanes = nthreads;
    }
    for (unsigned t = 0; t < nthreads; t++) { lanes[t].n.clear(); lanes[t].loaded.clear(); }
    unsigned nw = (nthreads + 31) / 32;
    if (nwarps < nw) {
        delete[] warp_seen;
        warp_seen = new std::unordered_map<Key, char, KeyHash>[nw];
        nwarps = nw;
    }
    for (unsigned w = 0; w < nw; w++) warp_seen[w].clear();
    if (++egen == 0) {   // generations wrapped: empty the table for real
        if (etab) memset(etab, 0, ecap * sizeof(EvalSlot));
        egen = 1;
    }
    esize = 0;
    in_hook = 0;
}

// A global load or store by the running thread. Lanes of a warp that access the same address in
// the same instruction (the n-th execution of that site by each lane) count once, as the GPU
// coalesces them; a load re-reads when this thread loaded every word of it before, with no store
// to it since. `lane_bytes` counts every lane.
KIDIOM_RT void access(uintptr_t pc, uintptr_t a, size_t size, int store) {
    if (!counting || in_hook || !size || !global(a, size)) return;
    in_hook = 1;
    Lane& L = lanes[cur];
    unsigned long long n = L.n[pc]++;
    Site& s = (*sites)[pc];
    lane_bytes += (long long)size;
    uintptr_t w0 = a >> 2, w1 = (a + size - 1) >> 2;
    auto& seen = warp_seen[cur / 32];
    if (!store) {
        bool rr = true;
        for (uintptr_t w = w0; w <= w1 && rr; w++) {
            auto it = L.loaded.find(w);
            if (it == L.loaded.end()) { rr = false; break; }
            auto st = stored->find(w);
            if (st != stored->end() && st->second > it->second) rr = false;
        }
        ++seq;
        for (uintptr_t w = w0; w <= w1; w++) L.loaded[w] = seq;
        auto ins = seen.emplace(Key{pc, n, a}, (char)rr);
        if (ins.second) {
            s.c[C_LOAD] += (long long)size;
            if (rr) s.c[C_REREAD] += (long long)size;
        } else if (ins.first->second && !rr) {
            s.c[C_REREAD] -= (long long)size;   // another lane of this instruction loads it afresh
            ins.first->second = 0;
        }
    } else {
        ++seq;
        for (uintptr_t w = w0; w <= w1; w++) (*stored)[w] = seq;
        if (seen.emplace(Key{pc, n, a}, (char)0).second) s.c[C_STORE] += (long long)size;
    }
    in_hook = 0;
}

KIDIOM_RT void atomic_access(uintptr_t pc, uintptr_t a, size_t size) {   // every lane: a load and a store
    if (!counting || in_hook || !global(a, size)) return;
    in_hook = 1;
    Site& s = (*sites)[pc];
    s.c[C_LOAD] += (long long)size;
    s.c[C_STORE] += (long long)size;
    lane_bytes += 2 * (long long)size;
    ++seq;
    for (uintptr_t w = a >> 2; w <= (a + size - 1) >> 2; w++) (*stored)[w] = seq;
    in_hook = 0;
}

KIDIOM_RT void count(uintptr_t pc, int field, long long n) {
    if (!counting || in_hook) return;
    in_hook = 1;
    (*sites)[pc].c[field] += n;
    in_hook = 0;
}

// A special call by the running thread: one of its kind, a repeat when this thread evaluated the
// same key earlier in the block, uniform when another thread of the block evaluated it first.
KIDIOM_RT void special(uintptr_t pc, int kind, unsigned long long a, unsigned long long b) {
    if (!counting || in_hook || (kind & 0xff) >= S_N) return;
    in_hook = 1;
    Site& s = (*sites)[pc];
    s.c[C_SPECIAL + (kind & 0xff)] += 1;
    bool found;
    EvalSlot* f = eval_entry((unsigned)kind, NO_THREAD, a, b, cur, &found);
    if (found && f->value != cur) s.c[C_UNIFORM] += 1;
    eval_entry((unsigned)kind, cur, a, b, 0, &found);
    if (found) s.c[C_REPEAT] += 1;
    in_hook = 0;
}
}  // namespace kidiom_rt

#define KIDIOM_PC ((uintptr_t)__builtin_return_address(0))
#define KIDIOM_HOOKS(N) \
    extern "C" KIDIOM_RT void __tsan_read##N(void* p) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, N, 0); } \
    extern "C" KIDIOM_RT void __tsan_write##N(void* p) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, N, 1); } \
    extern "C" KIDIOM_RT void __tsan_unaligned_read##N(void* p) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, N, 0); } \
    extern "C" KIDIOM_RT void __tsan_unaligned_write##N(void* p) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, N, 1); } \
    extern "C" KIDIOM_RT void __tsan_volatile_read##N(void* p) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, N, 0); } \
    extern "C" KIDIOM_RT void __tsan_volatile_write##N(void* p) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, N, 1); }
KIDIOM_HOOKS(1)
KIDIOM_HOOKS(2)
KIDIOM_HOOKS(4)
KIDIOM_HOOKS(8)
KIDIOM_HOOKS(16)
extern "C" KIDIOM_RT void __tsan_read_range(void* p, unsigned long n) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, n, 0); }
extern "C" KIDIOM_RT void __tsan_write_range(void* p, unsigned long n) { kidiom_rt::access(KIDIOM_PC, (uintptr_t)p, n, 1); }
extern "C" KIDIOM_RT void __tsan_init() {}
extern "C" KIDIOM_RT void __tsan_func_entry(void*) {}
extern "C" KIDIOM_RT void __tsan_func_exit() {}
extern "C" KIDIOM_RT void __tsan_vptr_update(void**, void*) {}
extern "C" KIDIOM_RT void __tsan_vptr_read(void**) {}
// the compiler's atomics (static-initialisation guards): one OS thread, plain accesses
#define KIDIOM_TSAN_ATOMIC(N, T) \
    extern "C" KIDIOM_RT T __tsan_atomic##N##_load(const volatile T* a, int) { return *a; } \
    extern "C" KIDIOM_RT void __tsan_atomic##N##_store(volatile T* a, T v, int) { *a = v; }
KIDIOM_TSAN_ATOMIC(8, unsigned char)
KIDIOM_TSAN_ATOMIC(16, unsigned short)
KIDIOM_TSAN_ATOMIC(32, unsigned int)
KIDIOM_TSAN_ATOMIC(64, unsigned long long)
extern "C" KIDIOM_RT void kidiom_count_flops(int n) { kidiom_rt::count(KIDIOM_PC, kidiom_rt::C_FLOPS, n); }
extern "C" KIDIOM_RT void kidiom_count_special(int kind, unsigned long long a, unsigned long long b) {
    kidiom_rt::special(KIDIOM_PC, kind, a, b);
}

KIDIOM_API int kidiom_profile_begin(const unsigned long long* ranges, int n) {
    using namespace kidiom_rt;
    in_hook = 1;
    nr = n < 16 ? n : 16;
    for (int i = 0; i < nr; i++) { rlo[i] = (uintptr_t)ranges[2 * i]; rhi[i] = (uintptr_t)ranges[2 * i + 1]; }
    delete sites;
    delete stored;
    sites = new std::unordered_map<uintptr_t, Site>();
    stored = new WordMap();
    seq = 0;
    lane_bytes = 0;
    counting = 1;
    in_hook = 0;
    return NC;
}
KIDIOM_API void kidiom_profile_end() { kidiom_rt::counting = 0; }
KIDIOM_API long long kidiom_profile_lane_bytes() { return kidiom_rt::lane_bytes; }
// the sites counted: pcs[i] the call instruction's offset in this library, counts[i * NC + field]
KIDIOM_API int kidiom_profile_sites(unsigned long long* pcs, long long* counts, int cap) {
    using namespace kidiom_rt;
    if (!sites) return 0;
    in_hook = 1;
    Dl_info info;
    uintptr_t base = dladdr((void*)&kidiom_profile_sites, &info) ? (uintptr_t)info.dli_fbase : 0;
    int i = 0;
    for (auto& kv : *sites) {
        if (i >= cap) break;
        pcs[i] = (unsigned long long)(kv.first - base - 1);
        memcpy(counts + (size_t)i * NC, kv.second.c, sizeof kv.second.c);
        i++;
    }
    int total = (int)sites->size();
    in_hook = 0;
    return total;
}
#define KIDIOM_COUNT_ATOMIC(p, n) kidiom_rt::atomic_access(KIDIOM_PC, (uintptr_t)(p), (n))
#else
#define KIDIOM_COUNT_ATOMIC(p, n) ((void)0)
#endif

// ---- atomics (one OS thread: a plain read-modify-write; counted per lane as a load and a store) ----
namespace kidiom_rt {
enum { A_ADD, A_SUB, A_EXCH, A_MIN, A_MAX, A_AND, A_OR, A_XOR, A_INC, A_DEC, A_CAS };
enum { T_F32, T_F64, T_I32, T_U32, T_I64, T_U64 };
template <class T> KIDIOM_RT void rmw_as(void* a, int op, const void* v, const void* c, void* old) {
    T x, y, cmp;
    memcpy(&x, a, sizeof(T));
    memcpy(&y, v, sizeof(T));
    memcpy(old, &x, sizeof(T));
    T r = x;
    switch (op) {
    case A_ADD: r = x + y; break;
    case A_SUB: r = x - y; break;
    case A_EXCH: r = y; break;
    case A_MIN: r = y < x ? y : x; break;
    case A_MAX: r = y > x ? y : x; break;
    case A_CAS: memcpy(&cmp, c, sizeof(T)); r = x == cmp ? y : x; break;
    default:
        if constexpr (std::is_integral<T>::value) {
            switch (op) {
            case A_AND: r = x & y; break;
            case A_OR: r = x | y; break;
            case A_XOR: r = x ^ y; break;
            case A_INC: r = x >= y ? 0 : x + 1; break;
            case A_DEC: r = (x == 0 || x > y) ? y : x - 1; break;
            }
        }
    }
    memcpy(a, &r, sizeof(T));
}
}  // namespace kidiom_rt
extern "C" KIDIOM_RT void kidiom_rmw(void* a, int op, int kind, const void* v, const void* c, void* old) {
    using namespace kidiom_rt;
    KIDIOM_COUNT_ATOMIC(a, (kind == T_F64 || kind == T_I64 || kind == T_U64) ? 8 : 4);
    switch (kind) {
    case T_F32: rmw_as<float>(a, op, v, c, old); break;
    case T_F64: rmw_as<double>(a, op, v, c, old); break;
    case T_I32: rmw_as<int>(a, op, v, c, old); break;
    case T_U32: rmw_as<unsigned>(a, op, v, c, old); break;
    case T_I64: rmw_as<long long>(a, op, v, c, old); break;
    default: rmw_as<unsigned long long>(a, op, v, c, old); break;
    }
}

// ---- CUDA built-ins the host has not ------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __ldg(p) (*(p))
#ifdef KIDIOM_COUNT
#define __expf expf
#define __logf logf
#define __sinf sinf
#define __cosf cosf
#define __log2f log2f
#else
// The fast intrinsics as the device computes them (PTX ISA ex2/lg2/sin/cos.approx.ftz.f32, CUDA C
// Programming Guide "Intrinsic Functions"), not as exact libm calls: the argument is scaled in
// float first (__expf(x) = ex2.approx(x * log2 e), whose error grows with |x|; __sinf(x) takes
// x / 2 pi rounded toward zero, so large arguments come out far from sin x), and subnormals flush
// to zero. A kernel that leans on an intrinsic's exactness is wrong on the GPU, and so here.
static inline float kidiom_ftz(float x) { return __builtin_fabsf(x) < 1.17549435e-38f ? __builtin_copysignf(0.0f, x) : x; }
static inline float kidiom_ex2_approx(float t) { return kidiom_ftz((float)__builtin_exp2((double)kidiom_ftz(t))); }
static inline float kidiom_lg2_approx(float x) { return (float)__builtin_log2((double)kidiom_ftz(x)); }
static inline float kidiom_turns_rz(float x) {   // FMUL.RZ x, 1 / (2 pi): what MUFU.SIN/COS read
    const double p = (double)kidiom_ftz(x) * (double)0.159154943091895336f;
    float r = (float)p;
    if (__builtin_fabs((double)r) > __builtin_fabs(p)) r = __builtin_nextafterf(r, 0.0f);
    return r;
}
static inline float kidiom_sin_approx(float x) { return kidiom_ftz((float)__builtin_sin(6.283185307179586 * (double)kidiom_turns_rz(x))); }
static inline float kidiom_cos_approx(float x) { return kidiom_ftz((float)__builtin_cos(6.283185307179586 * (double)kidiom_turns_rz(x))); }
#define __expf(x) kidiom_ex2_approx((float)(x) * 1.44269504088896341f)
#define __exp10f(x) kidiom_ex2_approx((float)(x) * 3.32192809488736235f)
#define __logf(x) (kidiom_lg2_approx((float)(x)) * 0.693147180559945309f)
#define __log2f(x) kidiom_lg2_approx((float)(x))
#define __log10f(x) (kidiom_lg2_approx((float)(x)) * 0.301029995663981195f)
#define __sinf(x) kidiom_sin_approx((float)(x))
#define __cosf(x) kidiom_cos_approx((float)(x))
#define __tanf(x) __fdividef(kidiom_sin_approx((float)(x)), kidiom_cos_approx((float)(x)))
#define __powf(x, y) kidiom_ex2_approx((float)(y) * kidiom_lg2_approx((float)(x)))
#endif
// Float-to-integer conversions as the device's cvt: saturating at the type's range, NaN to 0,
// rounded as the suffix says (rn nearest even, rz toward zero, ru up, rd down).
template <typename I, typename F> static inline I kidiom_cvt_sat(F x, int mode) {
    if (x != x) return (I)0;
    const long double v = (long double)x;
    const long double r = mode == 0 ? __builtin_nearbyintl(v) : mode == 1 ? __builtin_truncl(v)
                        : mode == 2 ? __builtin_ceill(v) : __builtin_floorl(v);
    const int bits = 8 * (int)sizeof(I);
    const bool sgn = (I)-1 < (I)0;
    const unsigned long long top = sgn ? (1ULL << (bits - 1)) - 1 : (bits == 64 ? ~0ULL : (1ULL << bits) - 1);
    const long double lo = sgn ? -__builtin_ldexpl(1.0L, bits - 1) : 0.0L;
    if (r <= lo) return sgn ? (I)(1ULL << (bits - 1)) : (I)0;
    if (r >= (long double)top) return (I)top;
    return (I)r;
}
#define KIDIOM_CVT(name, I, F) \
    static inline I name##_rn(F x) { return kidiom_cvt_sat<I, F>(x, 0); } \
    static inline I name##_rz(F x) { return kidiom_cvt_sat<I, F>(x, 1); } \
    static inline I name##_ru(F x) { return kidiom_cvt_sat<I, F>(x, 2); } \
    static inline I name##_rd(F x) { return kidiom_cvt_sat<I, F>(x, 3); }
KIDIOM_CVT(__float2int, int, float)
KIDIOM_CVT(__float2uint, unsigned, float)
KIDIOM_CVT(__float2ll, long long, float)
KIDIOM_CVT(__float2ull, unsigned long long, float)
KIDIOM_CVT(__double2int, int, double)
KIDIOM_CVT(__double2uint, unsigned, double)
KIDIOM_CVT(__double2ll, long long, double)
KIDIOM_CVT(__double2ull, unsigned long long, double)
#undef KIDIOM_CVT
#define __shared__ static __attribute__((section("kidiom_shared")))
#define __syncthreads() kidiom_rt_barrier(__LINE__, 0, 1)
#define __syncthreads_count(p) kidiom_rt_barrier(__LINE__, 1, (p))
#define __syncthreads_and(p) kidiom_rt_barrier(__LINE__, 2, (p))
#define __syncthreads_or(p) kidiom_rt_barrier(__LINE__, 3, (p))
#define __trap() kidiom_rt_trap(__LINE__)
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) {   // div.approx.ftz: a * rcp(b); 0 (NaN for inf a) past 2^126
    if (__builtin_fabsf(b) > 8.50705917e37f && __builtin_fabsf(b) < __builtin_inff())
        return __builtin_isinf(a) ? __builtin_nanf("") : __builtin_copysignf(0.0f, a) * __builtin_copysignf(1.0f, b);
    const float r = a * (1.0f / b);
    return __builtin_fabsf(r) < 1.17549435e-38f ? __builtin_copysignf(0.0f, r) : r;
}
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

// ---- counting float and special functions (profile builds) ------------------------------------
#ifdef KIDIOM_COUNT
extern "C" void kidiom_count_flops(int n);
// a special call of `kind` (kidiom_rt::S_*, with S_WIDE_A / S_WIDE_B) on operands of bits a, b
extern "C" void kidiom_count_special(int kind, unsigned long long a, unsigned long long b);
KIDIOM_INLINE unsigned long long kidiom_bits(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
KIDIOM_INLINE unsigned long long kidiom_bits(double x) { unsigned long long u; memcpy(&u, &x, 8); return u; }
// any other arithmetic operand of a float division converts to float, as C++ converts it
template <class T, typename std::enable_if<std::is_arithmetic<T>::value && !std::is_same<T, double>::value,
                                           int>::type = 0>
KIDIOM_INLINE unsigned long long kidiom_bits(T x) { return kidiom_bits((float)x); }
template <class T> KIDIOM_INLINE constexpr int kidiom_wide() { return std::is_same<T, double>::value; }
#ifdef KIDIOM_FLOPS
// `float` in the kernel source is this type: every add, sub, mul (1 flop) and division (a special
// call) counts at the line that makes it
#define KIDIOM_NUM(T) typename std::enable_if<std::is_arithmetic<T>::value, int>::type = 0
struct kidiom_f32 {
    float v;
    kidiom_f32() = default;
    template <class T, KIDIOM_NUM(T)> constexpr kidiom_f32(T x) : v((float)x) {}
    // explicit: in `c ? x : 0.0f` only float -> kidiom_f32 converts, as a float would
    explicit constexpr operator float() const { return v; }
    KIDIOM_INLINE kidiom_f32 operator-() const { return kidiom_f32(-v); }
    KIDIOM_INLINE kidiom_f32 operator+() const { return *this; }
    KIDIOM_INLINE kidiom_f32& operator+=(kidiom_f32 o) { kidiom_count_flops(1); v += o.v; return *this; }
    KIDIOM_INLINE kidiom_f32& operator-=(kidiom_f32 o) { kidiom_count_flops(1); v -= o.v; return *this; }
    KIDIOM_INLINE kidiom_f32& operator*=(kidiom_f32 o) { kidiom_count_flops(1); v *= o.v; return *this; }
    KIDIOM_INLINE kidiom_f32& operator/=(kidiom_f32 o) {
        kidiom_count_special(kidiom_rt::S_DIV, kidiom_bits(v), kidiom_bits(o.v)); v /= o.v; return *this; }
    KIDIOM_INLINE kidiom_f32& operator++() { kidiom_count_flops(1); v += 1.0f; return *this; }
    KIDIOM_INLINE kidiom_f32& operator--() { kidiom_count_flops(1); v -= 1.0f; return *this; }
    KIDIOM_INLINE kidiom_f32 operator++(int) { kidiom_f32 r = *this; kidiom_count_flops(1); v += 1.0f; return r; }
    KIDIOM_INLINE kidiom_f32 operator--(int) { kidiom_f32 r = *this; kidiom_count_flops(1); v -= 1.0f; return r; }
};
// an operand's value as the division computes with it (the counting float's float)
KIDIOM_INLINE float kidiom_plain(kidiom_f32 x) { return x.v; }
template <class T, KIDIOM_NUM(T)> KIDIOM_INLINE T kidiom_plain(T x) { return x; }
// float op double is a double, float op int a float, as in C++
template <class T> using kidiom_res =
    typename std::conditional<std::is_floating_point<T>::value && (sizeof(T) > 4), T, kidiom_f32>::type;
#define KIDIOM_BINARY(OP, COUNT) \
    KIDIOM_INLINE kidiom_f32 operator OP(kidiom_f32 a, kidiom_f32 b) { COUNT; return kidiom_f32(a.v OP b.v); } \
    template <class T, KIDIOM_NUM(T)> KIDIOM_INLINE kidiom_res<T> operator OP(kidiom_f32 a, T b) { COUNT; return kidiom_res<T>(a.v OP b); } \
    template <class T, KIDIOM_NUM(T)> KIDIOM_INLINE kidiom_res<T> operator OP(T a, kidiom_f32 b) { COUNT; return kidiom_res<T>(a OP b.v); } \
    template <class T, KIDIOM_NUM(T)> KIDIOM_INLINE T& operator OP##=(T& a, kidiom_f32 b) { COUNT; a OP##= b.v; return a; }
KIDIOM_BINARY(+, kidiom_count_flops(1))
KIDIOM_BINARY(-, kidiom_count_flops(1))
KIDIOM_BINARY(*, kidiom_count_flops(1))
// a division: keyed by both operands (`a`, `b` in each of KIDIOM_BINARY's bodies)
#define KIDIOM_DIV_KEY kidiom_count_special(kidiom_rt::S_DIV | kidiom_wide<decltype(kidiom_plain(a))>() << 8 | \
                                            kidiom_wide<decltype(kidiom_plain(b))>() << 9, \
                                            kidiom_bits(kidiom_plain(a)), kidiom_bits(kidiom_plain(b)))
KIDIOM_BINARY(/, KIDIOM_DIV_KEY)
#define KIDIOM_COMPARE(OP) \
    KIDIOM_INLINE bool operator OP(kidiom_f32 a, kidiom_f32 b) { return a.v OP b.v; } \
    template <class T, KIDIOM_NUM(T)> KIDIOM_INLINE bool operator OP(kidiom_f32 a, T b) { return a.v OP b; } \
    template <class T, KIDIOM_NUM(T)> KIDIOM_INLINE bool operator OP(T a, kidiom_f32 b) { return a OP b.v; }
KIDIOM_COMPARE(==)
KIDIOM_COMPARE(!=)
KIDIOM_COMPARE(<)
KIDIOM_COMPARE(>)
KIDIOM_COMPARE(<=)
KIDIOM_COMPARE(>=)
static inline kidiom_f32 min(kidiom_f32 a, kidiom_f32 b) { return kidiom_f32(fminf(a.v, b.v)); }
static inline kidiom_f32 max(kidiom_f32 a, kidiom_f32 b) { return kidiom_f32(fmaxf(a.v, b.v)); }
// functions of floats that count nothing, taking and returning the counting float
#define KIDIOM_PLAIN1(NAME) KIDIOM_INLINE kidiom_f32 kidiom_##NAME(kidiom_f32 x) { return kidiom_f32(::NAME(x.v)); }
#define KIDIOM_PLAIN2(NAME) KIDIOM_INLINE kidiom_f32 kidiom_##NAME(kidiom_f32 x, kidiom_f32 y) { return kidiom_f32(::NAME(x.v, y.v)); }
KIDIOM_PLAIN1(fabsf) KIDIOM_PLAIN1(floorf) KIDIOM_PLAIN1(ceilf) KIDIOM_PLAIN1(truncf) KIDIOM_PLAIN1(roundf)
KIDIOM_PLAIN1(rintf) KIDIOM_PLAIN1(tanhf) KIDIOM_PLAIN1(tanf) KIDIOM_PLAIN1(atanf) KIDIOM_PLAIN1(asinf)
KIDIOM_PLAIN1(acosf) KIDIOM_PLAIN1(sinhf) KIDIOM_PLAIN1(coshf) KIDIOM_PLAIN1(expm1f) KIDIOM_PLAIN1(log1pf)
KIDIOM_PLAIN1(log10f) KIDIOM_PLAIN1(cbrtf)
KIDIOM_PLAIN2(fmaxf) KIDIOM_PLAIN2(fminf) KIDIOM_PLAIN2(fmodf) KIDIOM_PLAIN2(powf) KIDIOM_PLAIN2(atan2f)
KIDIOM_PLAIN2(hypotf) KIDIOM_PLAIN2(copysignf) KIDIOM_PLAIN2(fdimf)
KIDIOM_INLINE kidiom_f32 kidiom_saturatef(kidiom_f32 x) { return kidiom_f32(__saturatef(x.v)); }
KIDIOM_INLINE int kidiom_float_as_int(kidiom_f32 x) { return __float_as_int(x.v); }
KIDIOM_INLINE unsigned kidiom_float_as_uint(kidiom_f32 x) { return __float_as_uint(x.v); }
KIDIOM_INLINE bool kidiom_isnan(kidiom_f32 x) { return std::isnan(x.v); }
KIDIOM_INLINE bool kidiom_isnan(double x) { return std::isnan(x); }
KIDIOM_INLINE bool kidiom_isinf(kidiom_f32 x) { return std::isinf(x.v); }
KIDIOM_INLINE bool kidiom_isinf(double x) { return std::isinf(x); }
KIDIOM_INLINE bool kidiom_isfinite(kidiom_f32 x) { return std::isfinite(x.v); }
KIDIOM_INLINE bool kidiom_isfinite(double x) { return std::isfinite(x); }
KIDIOM_INLINE kidiom_f32 kidiom_fabs(kidiom_f32 x) { return kidiom_f32(::fabsf(x.v)); }
KIDIOM_INLINE double kidiom_fabs(double x) { return ::fabs(x); }
KIDIOM_INLINE kidiom_f32 kidiom_fmax(kidiom_f32 x, kidiom_f32 y) { return kidiom_f32(::fmaxf(x.v, y.v)); }
KIDIOM_INLINE double kidiom_fmax(double x, double y) { return ::fmax(x, y); }
KIDIOM_INLINE kidiom_f32 kidiom_fmin(kidiom_f32 x, kidiom_f32 y) { return kidiom_f32(::fminf(x.v, y.v)); }
KIDIOM_INLINE double kidiom_fmin(double x, double y) { return ::fmin(x, y); }
typedef kidiom_f32 kidiom_real;
#else
typedef float kidiom_real;
#endif
// each keyed by its argument's bits (repeat and uniform calls); a reciprocal as the division 1 / x
#define KIDIOM_SPECIAL(NAME, KIND, CALL) \
    KIDIOM_INLINE kidiom_real kidiom_##NAME(kidiom_real x) { \
        kidiom_count_special(kidiom_rt::KIND, kidiom_bits((float)x), 0); return kidiom_real(CALL((float)x)); }
KIDIOM_SPECIAL(expf, S_EXP, ::expf)
KIDIOM_SPECIAL(exp2f, S_EXP2, ::exp2f)
KIDIOM_SPECIAL(logf, S_LOG, ::logf)
KIDIOM_SPECIAL(log2f, S_LOG2, ::log2f)
KIDIOM_SPECIAL(sqrtf, S_SQRT, ::sqrtf)
KIDIOM_SPECIAL(rsqrtf, S_RSQRT, rsqrtf)
KIDIOM_SPECIAL(sinf, S_SIN, ::sinf)
KIDIOM_SPECIAL(cosf, S_COS, ::cosf)
KIDIOM_SPECIAL(erff, S_ERF, ::erff)
KIDIOM_SPECIAL(fsqrt_rn, S_SQRT, __fsqrt_rn)
KIDIOM_SPECIAL(frsqrt_rn, S_RSQRT, __frsqrt_rn)
KIDIOM_INLINE kidiom_real kidiom_frcp_rn(kidiom_real x) {
    kidiom_count_special(kidiom_rt::S_DIV, kidiom_bits(1.0f), kidiom_bits((float)x)); return kidiom_real(__frcp_rn((float)x)); }
#define KIDIOM_SPECIAL_D(NAME, KIND, CALLF, CALLD) \
    KIDIOM_INLINE kidiom_real kidiom_##NAME(kidiom_real x) { \
        kidiom_count_special(kidiom_rt::KIND, kidiom_bits((float)x), 0); return kidiom_real(CALLF((float)x)); } \
    KIDIOM_INLINE double kidiom_##NAME(double x) { \
        kidiom_count_special(kidiom_rt::KIND | kidiom_rt::S_WIDE_A, kidiom_bits(x), 0); return CALLD(x); }
KIDIOM_SPECIAL_D(exp, S_EXP, ::expf, ::exp)
KIDIOM_SPECIAL_D(exp2, S_EXP2, ::exp2f, ::exp2)
KIDIOM_SPECIAL_D(log, S_LOG, ::logf, ::log)
KIDIOM_SPECIAL_D(log2, S_LOG2, ::log2f, ::log2)
KIDIOM_SPECIAL_D(sqrt, S_SQRT, ::sqrtf, ::sqrt)
KIDIOM_SPECIAL_D(sin, S_SIN, ::sinf, ::sin)
KIDIOM_SPECIAL_D(cos, S_COS, ::cosf, ::cos)
KIDIOM_SPECIAL_D(erf, S_ERF, ::erff, ::erf)
KIDIOM_INLINE kidiom_real kidiom_fdividef(kidiom_real a, kidiom_real b) {
    kidiom_count_special(kidiom_rt::S_DIV, kidiom_bits((float)a), kidiom_bits((float)b));
    return kidiom_real(__fdividef((float)a, (float)b)); }
KIDIOM_INLINE kidiom_real kidiom_fdiv_rn(kidiom_real a, kidiom_real b) {
    kidiom_count_special(kidiom_rt::S_DIV, kidiom_bits((float)a), kidiom_bits((float)b));
    return kidiom_real(__fdiv_rn((float)a, (float)b)); }
KIDIOM_INLINE kidiom_real kidiom_fmaf(kidiom_real a, kidiom_real b, kidiom_real c) {
    kidiom_count_flops(2); return kidiom_real(::fmaf((float)a, (float)b, (float)c)); }
KIDIOM_INLINE kidiom_real kidiom_fadd_rn(kidiom_real a, kidiom_real b) { kidiom_count_flops(1); return kidiom_real((float)a + (float)b); }
KIDIOM_INLINE kidiom_real kidiom_fsub_rn(kidiom_real a, kidiom_real b) { kidiom_count_flops(1); return kidiom_real((float)a - (float)b); }
KIDIOM_INLINE kidiom_real kidiom_fmul_rn(kidiom_real a, kidiom_real b) { kidiom_count_flops(1); return kidiom_real((float)a * (float)b); }
namespace std {
using ::kidiom_expf; using ::kidiom_exp2f; using ::kidiom_logf; using ::kidiom_log2f; using ::kidiom_sqrtf;
using ::kidiom_sinf; using ::kidiom_cosf; using ::kidiom_erff; using ::kidiom_exp; using ::kidiom_exp2;
using ::kidiom_log; using ::kidiom_log2; using ::kidiom_sqrt; using ::kidiom_sin; using ::kidiom_cos;
using ::kidiom_erf; using ::kidiom_fmaf;
}
#define expf(...) kidiom_expf(__VA_ARGS__)
#define exp2f(...) kidiom_exp2f(__VA_ARGS__)
#define logf(...) kidiom_logf(__VA_ARGS__)
#define log2f(...) kidiom_log2f(__VA_ARGS__)
#define sqrtf(...) kidiom_sqrtf(__VA_ARGS__)
#define rsqrtf(...) kidiom_rsqrtf(__VA_ARGS__)
#define sinf(...) kidiom_sinf(__VA_ARGS__)
#define cosf(...) kidiom_cosf(__VA_ARGS__)
#define erff(...) kidiom_erff(__VA_ARGS__)
#define exp(...) kidiom_exp(__VA_ARGS__)
#define exp2(...) kidiom_exp2(__VA_ARGS__)
#define log(...) kidiom_log(__VA_ARGS__)
#define log2(...) kidiom_log2(__VA_ARGS__)
#define sqrt(...) kidiom_sqrt(__VA_ARGS__)
#define sin(...) kidiom_sin(__VA_ARGS__)
#define cos(...) kidiom_cos(__VA_ARGS__)
#define erf(...) kidiom_erf(__VA_ARGS__)
#define fmaf(...) kidiom_fmaf(__VA_ARGS__)
#define __fdividef(...) kidiom_fdividef(__VA_ARGS__)
#define __fdiv_rn(...) kidiom_fdiv_rn(__VA_ARGS__)
#define __frcp_rn(...) kidiom_frcp_rn(__VA_ARGS__)
#define __fsqrt_rn(...) kidiom_fsqrt_rn(__VA_ARGS__)
#define __frsqrt_rn(...) kidiom_frsqrt_rn(__VA_ARGS__)
#define __fmaf_rn(...) kidiom_fmaf(__VA_ARGS__)
#define __fadd_rn(...) kidiom_fadd_rn(__VA_ARGS__)
#define __fsub_rn(...) kidiom_fsub_rn(__VA_ARGS__)
#define __fmul_rn(...) kidiom_fmul_rn(__VA_ARGS__)
#ifdef KIDIOM_FLOPS
namespace std {
using ::kidiom_fabsf; using ::kidiom_floorf; using ::kidiom_ceilf; using ::kidiom_truncf; using ::kidiom_roundf;
using ::kidiom_fmaxf; using ::kidiom_fminf; using ::kidiom_powf; using ::kidiom_tanhf; using ::kidiom_isnan;
using ::kidiom_isinf; using ::kidiom_isfinite; using ::kidiom_fabs; using ::kidiom_fmax; using ::kidiom_fmin;
}
#define fabsf(...) kidiom_fabsf(__VA_ARGS__)
#define floorf(...) kidiom_floorf(__VA_ARGS__)
#define ceilf(...) kidiom_ceilf(__VA_ARGS__)
#define truncf(...) kidiom_truncf(__VA_ARGS__)
#define roundf(...) kidiom_roundf(__VA_ARGS__)
#define rintf(...) kidiom_rintf(__VA_ARGS__)
#define tanhf(...) kidiom_tanhf(__VA_ARGS__)
#define tanf(...) kidiom_tanf(__VA_ARGS__)
#define atanf(...) kidiom_atanf(__VA_ARGS__)
#define asinf(...) kidiom_asinf(__VA_ARGS__)
#define acosf(...) kidiom_acosf(__VA_ARGS__)
#define sinhf(...) kidiom_sinhf(__VA_ARGS__)
#define coshf(...) kidiom_coshf(__VA_ARGS__)
#define expm1f(...) kidiom_expm1f(__VA_ARGS__)
#define log1pf(...) kidiom_log1pf(__VA_ARGS__)
#define log10f(...) kidiom_log10f(__VA_ARGS__)
#define cbrtf(...) kidiom_cbrtf(__VA_ARGS__)
#define fmaxf(...) kidiom_fmaxf(__VA_ARGS__)
#define fminf(...) kidiom_fminf(__VA_ARGS__)
#define fmodf(...) kidiom_fmodf(__VA_ARGS__)
#define powf(...) kidiom_powf(__VA_ARGS__)
#define atan2f(...) kidiom_atan2f(__VA_ARGS__)
#define hypotf(...) kidiom_hypotf(__VA_ARGS__)
#define copysignf(...) kidiom_copysignf(__VA_ARGS__)
#define fdimf(...) kidiom_fdimf(__VA_ARGS__)
#define fabs(...) kidiom_fabs(__VA_ARGS__)
#define fmax(...) kidiom_fmax(__VA_ARGS__)
#define fmin(...) kidiom_fmin(__VA_ARGS__)
#define isnan(...) kidiom_isnan(__VA_ARGS__)
#define isinf(...) kidiom_isinf(__VA_ARGS__)
#define isfinite(...) kidiom_isfinite(__VA_ARGS__)
#define __saturatef(...) kidiom_saturatef(__VA_ARGS__)
#define __float_as_int(...) kidiom_float_as_int(__VA_ARGS__)
#define __float_as_uint(...) kidiom_float_as_uint(__VA_ARGS__)
#define float kidiom_f32
#endif
#endif
"""

_AFTER_FLOAT = r"""
// ---- after `float` (the counting float in flop-counting builds) -------------------------------
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct float3 { float x, y, z; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }

extern "C" unsigned long long kidiom_rt_warp(int op, int line, unsigned mask, unsigned long long val, int arg,
                                             int width);
extern "C" int kidiom_rt_barrier(int line, int kind, int pred);
extern "C" void kidiom_rt_trap(int line);
extern "C" void kidiom_rmw(void* a, int op, int kind, const void* v, const void* c, void* old);

// warp shuffles: every lane of the mask posts its value, the last to arrive completes the exchange
template <class T> KIDIOM_INLINE T kidiom_shfl(int op, int line, unsigned mask, T var, int arg, int width = 32) {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    unsigned long long bits = 0;
    memcpy(&bits, &var, sizeof(T));
    unsigned long long r = kidiom_rt_warp(op, line, mask, bits, arg, width);
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}
#define __shfl_sync(...) kidiom_shfl(kidiom_rt::W_IDX, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) kidiom_shfl(kidiom_rt::W_UP, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) kidiom_shfl(kidiom_rt::W_DOWN, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) kidiom_shfl(kidiom_rt::W_XOR, __LINE__, __VA_ARGS__)
KIDIOM_INLINE unsigned kidiom_vote(int op, int line, unsigned mask, bool pred) {
    return (unsigned)kidiom_rt_warp(op, line, mask, pred ? 1 : 0, 0, 32);
}
#define __ballot_sync(...) kidiom_vote(kidiom_rt::W_BALLOT, __LINE__, __VA_ARGS__)
#define __any_sync(...) ((int)kidiom_vote(kidiom_rt::W_ANY, __LINE__, __VA_ARGS__))
#define __all_sync(...) ((int)kidiom_vote(kidiom_rt::W_ALL, __LINE__, __VA_ARGS__))
struct kidiom_syncwarp {   // __syncwarp() and __syncwarp(mask): the line, then the optional mask
    int line;
    KIDIOM_INLINE void operator()(unsigned mask = 0xffffffffu) const { kidiom_rt_warp(kidiom_rt::W_SYNC, line, mask, 0, 0, 32); }
};
#define __syncwarp(...) kidiom_syncwarp{__LINE__}(__VA_ARGS__)
#define KIDIOM_REDUCE(NAME, SOP, UOP) \
    KIDIOM_INLINE int kidiom_reduce_##NAME(int line, unsigned mask, int v) { \
        return (int)(unsigned)kidiom_rt_warp(kidiom_rt::SOP, line, mask, (unsigned)v, 0, 32); } \
    KIDIOM_INLINE unsigned kidiom_reduce_##NAME(int line, unsigned mask, unsigned v) { \
        return (unsigned)kidiom_rt_warp(kidiom_rt::UOP, line, mask, v, 0, 32); }
KIDIOM_REDUCE(add, W_ADD, W_ADD)
KIDIOM_REDUCE(min, W_MIN, W_UMIN)
KIDIOM_REDUCE(max, W_MAX, W_UMAX)
KIDIOM_INLINE unsigned kidiom_reduce_and(int line, unsigned mask, unsigned v) { return (unsigned)kidiom_rt_warp(kidiom_rt::W_AND, line, mask, v, 0, 32); }
KIDIOM_INLINE unsigned kidiom_reduce_or(int line, unsigned mask, unsigned v) { return (unsigned)kidiom_rt_warp(kidiom_rt::W_OR, line, mask, v, 0, 32); }
KIDIOM_INLINE unsigned kidiom_reduce_xor(int line, unsigned mask, unsigned v) { return (unsigned)kidiom_rt_warp(kidiom_rt::W_XORR, line, mask, v, 0, 32); }
#define __reduce_add_sync(...) kidiom_reduce_add(__LINE__, __VA_ARGS__)
#define __reduce_min_sync(...) kidiom_reduce_min(__LINE__, __VA_ARGS__)
#define __reduce_max_sync(...) kidiom_reduce_max(__LINE__, __VA_ARGS__)
#define __reduce_and_sync(...) kidiom_reduce_and(__LINE__, __VA_ARGS__)
#define __reduce_or_sync(...) kidiom_reduce_or(__LINE__, __VA_ARGS__)
#define __reduce_xor_sync(...) kidiom_reduce_xor(__LINE__, __VA_ARGS__)

// atomics on shared and global memory, of 4- and 8-byte ints and floats
template <class T> constexpr int kidiom_tkind() {
    return std::is_integral<T>::value
        ? (sizeof(T) == 4 ? (std::is_signed<T>::value ? kidiom_rt::T_I32 : kidiom_rt::T_U32)
                          : (std::is_signed<T>::value ? kidiom_rt::T_I64 : kidiom_rt::T_U64))
        : (sizeof(T) == 4 ? kidiom_rt::T_F32 : kidiom_rt::T_F64);
}
#define KIDIOM_ATOMIC(NAME, OP) \
    template <class T, class U> KIDIOM_INLINE T NAME(T* a, U v) { \
        static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics of 4 or 8 bytes"); \
        T x = (T)v, old; kidiom_rmw((void*)a, kidiom_rt::OP, kidiom_tkind<T>(), &x, nullptr, &old); return old; }
KIDIOM_ATOMIC(atomicAdd, A_ADD)
KIDIOM_ATOMIC(atomicSub, A_SUB)
KIDIOM_ATOMIC(atomicExch, A_EXCH)
KIDIOM_ATOMIC(atomicMin, A_MIN)
KIDIOM_ATOMIC(atomicMax, A_MAX)
KIDIOM_ATOMIC(atomicAnd, A_AND)
KIDIOM_ATOMIC(atomicOr, A_OR)
KIDIOM_ATOMIC(atomicXor, A_XOR)
KIDIOM_ATOMIC(atomicInc, A_INC)
KIDIOM_ATOMIC(atomicDec, A_DEC)
template <class T, class U, class W> KIDIOM_INLINE T atomicCAS(T* a, U compare, W v) {
    T c = (T)compare, x = (T)v, old;
    kidiom_rmw((void*)a, kidiom_rt::A_CAS, kidiom_tkind<T>(), &x, &c, &old);
    return old;
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicExch_block atomicExch
#define atomicMax_block atomicMax
#define atomicMin_block atomicMin
#define atomicCAS_block atomicCAS
"""

# What NVRTC defines when it compiles the source for the GPU (after the runtime's system headers).
_DEVICE_PATH = f"""
#define __CUDACC__ 1
#define __CUDACC_RTC__ 1
#define __CUDA_ARCH__ {ARCH * 10}
"""

_DRIVER_HEAD = r"""
#ifdef KIDIOM_FLOPS
#undef float
#endif
struct kidiom_any_ptr {   // converts to the kernel's own pointer parameter types
    void* p;
    template <class T> operator T*() const { return (T*)p; }
};
namespace kidiom_rt {
static void* args_p[KIDIOM_NP + 1];
static long long args_i[KIDIOM_NI + 1];
static double args_f[KIDIOM_NF + 1];
}
"""
_DRIVER_TAIL = r"""
// order: 0 natural, 1 reversed, 2 shuffled (blocks from `seed`; each block's threads from a seed of
// its own, reshuffled at every barrier and warp collective); limit_s: per block (0: none).
// Returns 0, or 1 with kidiom_error() saying why (barrier divergence, deadlock, runaway, ...).
KIDIOM_API int kidiom_launch(const unsigned* grid, const unsigned* block, int order, unsigned long long seed,
                             double limit_s, void* const* p, const long long* n, const double* f)
{
    for (int i = 0; i < KIDIOM_NP; i++) kidiom_rt::args_p[i] = p[i];
    for (int i = 0; i < KIDIOM_NI; i++) kidiom_rt::args_i[i] = n[i];
    for (int i = 0; i < KIDIOM_NF; i++) kidiom_rt::args_f[i] = f[i];
    return kidiom_rt::launch(grid, block, order, seed, limit_s, kidiom_body);
}
KIDIOM_API const char* kidiom_error() { return kidiom_rt::err; }
"""


def _signature(params):
    """The kinds of a launch's parameters, in order: "p" (pointer), "i" (int), "f" (float)."""
    return "".join("p" if "ptr" in p else ("i" if "int" in p else "f") for p in params)


def _driver(sig):
    """The emulation's entry for one parameter signature: the kernel called with its pointers,
    ints and floats from the argument arrays, in the signature's order."""
    counts = {k: 0 for k in "pif"}
    args = []
    for k in sig:
        i = counts[k]
        counts[k] += 1
        args.append({"p": f"kidiom_any_ptr{{args_p[{i}]}}", "i": f"args_i[{i}]", "f": f"(float)args_f[{i}]"}[k])
    head = _DRIVER_HEAD.replace("KIDIOM_NP", str(counts["p"])).replace("KIDIOM_NI", str(counts["i"])) \
        .replace("KIDIOM_NF", str(counts["f"]))
    body = ("KIDIOM_RT static void kidiom_body() {\n    using namespace kidiom_rt;\n    ENTRY(" +
            ", ".join(args) + ");\n}\n")
    tail = _DRIVER_TAIL.replace("KIDIOM_NP", str(counts["p"])).replace("KIDIOM_NI", str(counts["i"])) \
        .replace("KIDIOM_NF", str(counts["f"]))
    return head + body + tail


_ORDERS = {"natural": 0, "reversed": 1, "shuffle": 2}
SPECIAL_KINDS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "div")   # the runtime's S_*
# load, store, re-read, flops, repeat calls, uniform calls, then the special kinds (the runtime's NC)
_N_COUNTS = 6 + len(SPECIAL_KINDS)

_cpu_libs = {}
SIDES = {"tests": [], "fn": None, "libs": []}   # watch_sides: the comparisons whose sides are recorded
_gpu_modules = {}
_emulations = {}
_profile = {"token": None, "lines": {}, "special": {}, "programs": 0, "lane_bytes": 0, "flops": True}
LAUNCHES = {}   # entry -> launches made through launch_kernel (the check counts them per call)
LAUNCHED = []   # the emulation's launches since the caller last cleared it: {kernel, grid, block, order}
# the emulation's block and thread order (the check's worker sets it); "profile": natural, counted
ORDER = {"order": "natural", "seed": 0}


def _comparisons():
    try:
        from kernels.harness.cuda import comparisons
    except ImportError:   # in the check's sandboxed worker: kidiom_rt
        from kidiom_rt import comparisons
    return comparisons


def watch_sides(tests):
    """Record, in every later correctness build, the sides taken by the comparisons `tests`
    ([{line, test}], comparisons.added_comparisons) of the kernel source: `sides()` reads them.
    The recorder's name is drawn here, after the candidate is fixed."""
    import secrets
    SIDES.update(tests=[dict(t) for t in tests], fn="kidiom_side_" + secrets.token_hex(6), libs=[])


def sides():
    """{line: [true seen, false seen]} over every watched comparison on the line (a line is true-
    seen only if each of its comparisons was, and so for false), all watched builds' launches."""
    tests = SIDES.get("tests") or []
    seen = [0] * len(tests)
    for lib in SIDES.get("libs") or []:
        buf = (ctypes.c_ubyte * max(1, len(tests)))()
        lib.so.kidiom_sides(buf, len(tests))
        seen = [a | int(b) for a, b in zip(seen, buf)]
    out = {}
    for t, bits in zip(tests, seen):
        have = out.setdefault(int(t["line"]), [True, True])
        out[int(t["line"])] = [have[0] and bool(bits & 1), have[1] and bool(bits & 2)]
    return out


def _cudatools():
    try:
        from kernels.harness.triton import cudatools
    except ImportError:   # in the check's sandboxed worker the runtime is a copy: kidiom_rt
        from kidiom_rt import cudatools
    return cudatools


def _workprofile():
    try:
        from kernels.harness.triton import workprofile
    except ImportError:
        from kidiom_rt import workprofile
    return workprofile


def _cxx():
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise NeedsGpu("no host C++ compiler to emulate the CUDA kernel on the CPU")
    return cxx


def _emulation_source(source_text, entry, device_path=True, count=False, flops=False, sig=None, sides=None):
    defines = ("#define KIDIOM_COUNT 1\n" if count else "") + ("#define KIDIOM_FLOPS 1\n" if flops else "")
    driver = f"\n#line 1 \"kidiom-driver\"\n#define ENTRY {entry}\n" + _driver(sig) if sig is not None else ""
    watch = ""
    if sides is not None:   # the comparisons the check watches: wrapped, and the recorder they call
        source_text, _ = _comparisons().instrument(source_text, sides["tests"], sides["fn"])
        n = max(1, len(sides["tests"]))
        watch = (f"namespace kidiom_rt {{ static unsigned char {sides['fn']}_seen[{n}]; }}\n"
                 f"static inline bool {sides['fn']}(int k, bool v) {{ kidiom_rt::{sides['fn']}_seen[k] |= v ? 1 : 2; "
                 "return v; }\n"
                 f"KIDIOM_API int kidiom_sides(unsigned char* out, int cap) {{\n"
                 f"    for (int i = 0; i < cap && i < {n}; i++) out[i] = kidiom_rt::{sides['fn']}_seen[i];\n"
                 f"    return {n};\n}}\n")
    return (defines + _RUNTIME + _AFTER_FLOAT + watch + (_DEVICE_PATH if device_path else "") +
            "#line 1 \"kernel.cu\"\n" + source_text + driver)


def _tsan_flags(cxx):
    """Instrumentation without the per-function entry/exit hooks (the runtime defines them anyway)."""
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    if "clang" in version.lower():
        return ["-fsanitize=thread", "-mllvm", "-tsan-instrument-func-entry-exit=0"]
    return ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0"]


class _Library:
    """One build of the emulation (correctness: -O1; counting: -O0 -g, instrumented)."""

    def __init__(self, path, count=False, flops=False):
        self.path, self.count, self.flops, self.runaway = Path(path), count, flops, False
        self.so = ctypes.CDLL(str(path))
        fn = self.so.kidiom_launch
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_double,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._launch = fn
        self.so.kidiom_error.restype = ctypes.c_char_p
        self.so.kidiom_error.argtypes = []
        self.lines = {}   # counting: call-site offset -> .cu line (0: not in the kernel source)
        if count:
            so = self.so
            so.kidiom_profile_begin.restype = ctypes.c_int
            so.kidiom_profile_begin.argtypes = [ctypes.c_void_p, ctypes.c_int]
            so.kidiom_profile_end.restype = None
            so.kidiom_profile_end.argtypes = []
            so.kidiom_profile_lane_bytes.restype = ctypes.c_longlong
            so.kidiom_profile_lane_bytes.argtypes = []
            so.kidiom_profile_sites.restype = ctypes.c_int
            so.kidiom_profile_sites.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

    def run(self, grid, block, order, seed, ptrs, ints, floats):
        """One launch: grid and block (3 ints each), the pointer, int and float arguments in the
        order of the library's signature."""
        limit = RUNAWAY_AGAIN_S if self.runaway else BLOCK_LIMIT_S
        arr = lambda t, v: (t * max(1, len(v)))(*v)  # noqa: E731
        if self._launch(arr(ctypes.c_uint, grid), arr(ctypes.c_uint, block), order, seed & (2 ** 64 - 1), limit,
                        arr(ctypes.c_void_p, ptrs), arr(ctypes.c_longlong, ints), arr(ctypes.c_double, floats)):
            why = (self.so.kidiom_error() or b"the launch failed").decode(errors="replace")
            self.runaway = self.runaway or why.startswith("runaway")
            raise EmulationError(f"CUDA emulation: {why}")

    def counted(self, grid, block, ptrs, extents, ints, floats):
        """One launch in natural order, counted: ({offset: [counts]}, bytes per lane)."""
        flat = [x for lo, hi in extents for x in (lo, hi)]
        ranges = (ctypes.c_ulonglong * len(flat))(*flat)
        nc = self.so.kidiom_profile_begin(ranges, len(extents))
        if nc != _N_COUNTS:
            raise RuntimeError(f"the counting build reports {nc} counts per site, not {_N_COUNTS}")
        try:
            self.run(grid, block, 0, 0, ptrs, ints, floats)
        finally:
            self.so.kidiom_profile_end()
        n = self.so.kidiom_profile_sites(None, None, 0)
        pcs, counts = (ctypes.c_ulonglong * max(n, 1))(), (ctypes.c_longlong * max(n * nc, 1))()
        n = min(n, self.so.kidiom_profile_sites(pcs, counts, n))
        return {int(pcs[i]): [int(counts[i * nc + f]) for f in range(nc)] for i in range(n)}, \
            int(self.so.kidiom_profile_lane_bytes())

    def line_of(self, offsets):
        """The .cu line of each call site (addr2line on the -g build; the innermost inlined frame in
        the kernel source, whose `#line` numbers are the source's own; 0 when none is)."""
        todo = sorted({o for o in offsets if o not in self.lines})
        exe = shutil.which("addr2line") or "/usr/bin/addr2line"
        for i in range(0, len(todo), 400):
            chunk = todo[i:i + 400]
            r = subprocess.run([exe, "-e", str(self.path), "-a", "-i"] + [hex(o) for o in chunk],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"addr2line failed ({r.returncode}): {r.stderr.strip()[-300:]}")
            addr = None
            for row in r.stdout.splitlines():
                row = row.strip()
                if row.startswith("0x"):
                    addr = int(row, 16)
                    self.lines.setdefault(addr, 0)
                    continue
                where = row.split(" (discriminator")[0]
                file, _, num = where.rpartition(":")
                if addr is not None and self.lines.get(addr) == 0 and os.path.basename(file) == "kernel.cu" \
                        and num.isdigit():
                    self.lines[addr] = int(num)
            for o in chunk:
                self.lines.setdefault(o, 0)
        return [self.lines[o] for o in offsets]


def _build(text, key, count):
    """Compile one emulation source into a library (cached in $TMPDIR by the source's hash): its
    path, or None and the compiler's complaint."""
    cxx = _cxx()
    d = Path(tempfile.gettempdir()) / "kidiom-cuda-emu"
    d.mkdir(exist_ok=True)
    src, lib = d / f"{key}.cpp", d / f"{key}.so"
    if lib.exists():
        return lib, None
    src.write_text(text)
    tmp = str(lib) + ".tmp"
    common = [cxx, "-std=c++17", "-fPIC", "-fvisibility=hidden", "-Wno-unknown-pragmas", "-Wno-attributes",
              "-U_FORTIFY_SOURCE", "-I", _cudatools().runtime_header_dir(str(d))]
    if count:
        obj = str(d / f"{key}.o")
        cmds = [common + ["-O0", "-g"] + _tsan_flags(cxx) + ["-c", str(src), "-o", obj],
                [cxx, "-shared", obj, "-o", tmp, "-lrt", "-ldl"]]
    else:
        # an out-of-range float-to-integer conversion is the one arithmetic the CPU cannot give as the
        # device does (its cvt saturates; x86's returns the "integer indefinite"): instrumented, it
        # stops the launch naming the line (kidiom_rt's handler; no sanitizer runtime is linked)
        obj = str(d / f"{key}.o")
        cmds = [common + ["-O1", "-fsanitize=float-cast-overflow", "-c", str(src), "-o", obj],
                [cxx, "-shared", obj, "-o", tmp, "-lrt"]]
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            return None, r.stderr.strip()
    os.replace(tmp, lib)
    return lib, None


def _cpu_library(source_text, entry, sig, count=False):
    """The emulation library of `source_text` for the parameter signature `sig`: the correctness
    build, or (`count`) the counting build, with the counting float if the source builds with it."""
    variants = [(True, True), (True, False)] if count else [(False, False)]
    watch = SIDES if SIDES.get("tests") and not count else None
    first_error = None
    for cnt, flops in variants:
        text = _emulation_source(source_text, entry, count=cnt, flops=flops, sig=sig, sides=watch)
        key = hashlib.sha256(text.encode()).hexdigest()[:24]
        if key in _cpu_libs:
            return _cpu_libs[key]
        path, error = _build(text, key, cnt)
        if path is not None:
            _cpu_libs[key] = _Library(path, count=cnt, flops=flops)
            if watch is not None:
                _cpu_libs[key].so.kidiom_sides.restype = ctypes.c_int
                _cpu_libs[key].so.kidiom_sides.argtypes = [ctypes.c_void_p, ctypes.c_int]
                watch["libs"].append(_cpu_libs[key])
            return _cpu_libs[key]
        first_error = first_error or error
    if watch is not None:
        plain = _emulation_source(source_text, entry, sig=sig)
        key = hashlib.sha256(plain.encode()).hexdigest()[:24]
        if key in _cpu_libs or _build(plain, key, False)[0] is not None:
            # the source builds, its wrapped comparisons do not (a template's brackets read as
            # comparisons): what the candidate adds cannot be watched, and is not passed unwatched
            raise RuntimeError("the comparisons the candidate adds could not be watched (the emulation with each "
                               "one wrapped does not build): " + first_error[-1500:])
    if count:
        raise RuntimeError("the CUDA emulation's counting build (-fsanitize=thread instrumentation) failed: "
                           + first_error[-1500:])
    raise NeedsGpu(f"the CUDA kernel's device path (__CUDA_ARCH__ {ARCH * 10}) cannot be emulated on the CPU (it "
                   "uses CUDA-only code the host compiler cannot build): " + first_error[-1500:])


def emulation_info(source_path, entry):
    """How the CPU emulation compiles the source: the device path (`__CUDA_ARCH__`), and whether
    the host path would have read differently (the preprocessed texts differ)."""
    path = Path(source_path)
    text = path.read_text()
    key = hashlib.sha256((text + entry).encode()).hexdigest()
    if key not in _emulations:
        info = {"path": "device", "cuda_arch": ARCH * 10, "differs_from_host": None}
        try:
            outs = []
            for device in (True, False):
                headers = _cudatools().runtime_header_dir(str(Path(tempfile.gettempdir()) / "kidiom-cuda-emu"))
                r = subprocess.run([_cxx(), "-std=c++17", "-I", headers, "-E", "-P", "-x", "c++", "-"],
                                   input=_emulation_source(text, entry, device), capture_output=True, text=True,
                                   timeout=60)
                outs.append(r.stdout if r.returncode == 0 else None)
            # the device-path text carries its own three defines: compare without them
            if None not in outs:
                info["differs_from_host"] = outs[0] != outs[1]
        except (OSError, subprocess.SubprocessError, NeedsGpu) as e:
            info["error"] = f"{type(e).__name__}: {e}"[:300]
        _emulations[key] = info
    return dict(_emulations[key])


def _gpu_module(source_text, name):
    cudatools = _cudatools()
    key = hashlib.sha256(source_text.encode()).hexdigest()
    if key not in _gpu_modules:
        ptx, _ = cudatools.nvrtc_compile(source_text, name=name, arch=ARCH)
        _gpu_modules[key] = cudatools.CudaModule(ptx)
    return _gpu_modules[key]


def prepare(source_path, entry, sig, on_gpu=False, sides=None):
    """Build the kernel now (NVRTC on a GPU, the emulation library for the parameter signature
    `sig` on a CPU), so that a source that cannot run here is known before any call (raises
    NeedsGpu on a CPU). `sides`: on a CPU, the comparisons whose sides to record (watch_sides)."""
    path = Path(source_path)
    text = path.read_text()
    if on_gpu:
        _gpu_module(text, path.name)
    else:
        if sides:
            watch_sides(sides)
        _cpu_library(text, entry, sig)


def _count_launch(text, entry, sig, grid, block, tensors, ints, floats, token):
    """A counted launch (ORDER "profile"): its counts per .cu line added to those of the calls of
    `token`, the report rewritten ($TMPDIR/PROFILE_REPORT)."""
    lib = _cpu_library(text, entry, sig, count=True)
    ptrs = [t.data_ptr() for t in tensors]
    extents = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors]
    sites, lane_bytes = lib.counted(grid, block, ptrs, extents, ints, floats)
    if _profile["token"] != token:
        _profile.update(token=token, lines={}, special={}, programs=0, lane_bytes=0, flops=True)
    offsets = list(sites)
    for off, line in zip(offsets, lib.line_of(offsets)):
        c = sites[off]
        special = {k: n for k, n in zip(SPECIAL_KINDS, c[6:]) if n}
        row = _profile["lines"].setdefault(line, [0] * 8)
        # workprofile.FIELDS' order: load, store, re-read, special, flops, dot MACs, repeat, uniform
        for i, v in enumerate((c[0], c[1], c[2], sum(special.values()), c[3], 0, c[4], c[5])):
            row[i] += v
        kinds = _profile["special"].setdefault(line, {})
        for k, n in special.items():
            kinds[k] = kinds.get(k, 0) + n
    _profile["programs"] += grid[0] * grid[1] * grid[2]
    _profile["lane_bytes"] += lane_bytes
    _profile["flops"] = _profile["flops"] and lib.flops
    path = Path(tempfile.gettempdir()) / PROFILE_REPORT.format(token=int(token))
    _workprofile().cuda_report(path, _profile["lines"], _profile["special"], _profile["programs"],
                               _profile["flops"], _profile["lane_bytes"])


def _dims(v, what):
    v = [v] if isinstance(v, int) else list(v or [])
    if not (1 <= len(v) <= 3 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in v)):
        raise ValueError(f"launch: {what} must be 1 to 3 positive integers, not {v!r}")
    return v + [1] * (3 - len(v))


def launch_kernel(launch, tensors, source_path, entry):
    """One launch of the `extern "C" __global__` entry of the CUDA source at `source_path`, as
    `launch` says (the contract's `launch(shape)`, computed by the harness): {grid, block, params},
    params in the entry's order, each {"ptr": name} (the tensor `tensors[name]`, torch CUDA or
    NpTensor), {"int": v} or {"float": v}. On a GPU through NVRTC and the driver API, on a CPU
    through the emulation (counted in ORDER "profile")."""
    if not isinstance(launch, dict):
        raise ValueError("a CUDA kernel's call needs its launch (the contract's launch(shape))")
    grid, block = _dims(launch.get("grid"), "grid"), _dims(launch.get("block"), "block")
    params = list(launch.get("params") or [])
    sig = _signature(params)
    ptr_tensors = []
    for p in params:
        if "ptr" in p:
            t = tensors.get(p["ptr"])
            if t is None:
                raise ValueError(f"launch: no tensor {p['ptr']!r} in this call")
            ptr_tensors.append(t)
    ints = [int(p["int"]) for p in params if "int" in p]
    floats = [float(p["float"]) for p in params if "float" in p]
    path = Path(source_path)
    text = path.read_text()
    if ptr_tensors and getattr(ptr_tensors[0], "is_cuda", False):
        import torch
        mod = _gpu_module(text, path.name)
        args = []
        for p in params:
            if "ptr" in p:
                args.append(ctypes.c_void_p(tensors[p["ptr"]].data_ptr()))
            elif "int" in p:
                args.append(ctypes.c_int(int(p["int"])))
            else:
                args.append(ctypes.c_float(float(p["float"])))
        LAUNCHES[entry] = LAUNCHES.get(entry, 0) + 1
        mod.launch(entry, tuple(grid), tuple(block), args, stream=torch.cuda.current_stream().cuda_stream)
        return
    order = ORDER.get("order", "natural")
    lib = _cpu_library(text, entry, sig) if order != "profile" else None
    LAUNCHES[entry] = LAUNCHES.get(entry, 0) + 1
    if len(LAUNCHED) < 64:
        LAUNCHED.append({"kernel": entry, "grid": grid, "block": block, "order": order})
    if lib is None:
        _count_launch(text, entry, sig, grid, block, ptr_tensors, ints, floats, int(ORDER.get("seed", 0)))
    else:
        lib.run(grid, block, _ORDERS[order], int(ORDER.get("seed", 0)), [t.data_ptr() for t in ptr_tensors],
                ints, floats)
