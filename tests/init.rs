//! `kidiom init`: the manifest and contract skeleton it writes next to a
//! Triton or CUDA kernel, and its errors. The files are written under the
//! target directory (not /tmp), in a tree that is no kernels/.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

/// A directory of its own under the target directory.
pub fn workdir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir under target")
}

fn kidiom(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kidiom"))
        .current_dir(dir)
        .env("KIDIOM_CACHE", dir.join(".cache"))
        .env("KIDIOM_CONTENT_CACHE", crate::util::content_cache())
        .args(args)
        .output()
        .expect("spawn kidiom")
}

fn write(dir: &Path, rel: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(&p, text).expect("write");
    p
}

/// `kidiom init REL --json` in `dir`: its report, after checking both files
/// are there and the manifest is one kidiom reads.
fn init(dir: &Path, rel: &str) -> (Value, String, String) {
    let out = kidiom(dir, &["init", rel, "--json"]);
    assert!(out.status.success(), "kidiom init {rel}: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let manifest = std::fs::read_to_string(dir.join(report["manifest"].as_str().expect("manifest"))).expect("read");
    let contract = std::fs::read_to_string(dir.join(report["contract"].as_str().expect("contract"))).expect("read");
    let m = kidiom_validator::Manifest::parse(&manifest, "m.toml").unwrap_or_else(|e| panic!("{e}\n{manifest}"));
    assert_eq!(m.format, 2);
    assert!(manifest.contains("TODO"), "the sizes and floor are marked TODO:\n{manifest}");
    python_parses(&contract);
    (report, manifest, contract)
}

/// The contract module is Python (checked when a python3 is here).
fn python_parses(source: &str) {
    let Ok(out) =
        std::process::Command::new("python3").args(["-c", "import ast, sys; ast.parse(sys.argv[1])", source]).output()
    else {
        eprintln!("no python3: the contract's syntax is not checked");
        return;
    };
    assert!(out.status.success(), "not Python: {}\n{source}", String::from_utf8_lossy(&out.stderr));
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

pub const RMSNORM: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    ms = tl.sum(x * x, axis=0) / N
    y = x / tl.sqrt(ms + eps) * w
    tl.store(y_ptr + row * N + offs, y, mask=mask)


def rmsnorm(x, w, eps=1e-6):
    M, N = x.shape
    y = torch.empty_like(x)
    rmsnorm_kernel[(M,)](x, w, y, N, eps, BLOCK=triton.next_power_of_2(N))
    return y
"#;

#[test]
fn init_reads_a_row_wise_triton_kernel_with_a_scalar() {
    let d = workdir("kidiom-init-");
    write(d.path(), "ops/rmsnorm.py", RMSNORM);
    let (r, manifest, contract) = init(d.path(), "ops/rmsnorm.py");
    assert_eq!(r["entry"], "rmsnorm_kernel");
    assert_eq!(r["launcher"], "rmsnorm");
    assert_eq!(names(&r["args"]), ["x", "w", "eps"]);
    assert_eq!(names(&r["inputs"]), ["x", "w", "eps"]);
    assert!(names(&r["inouts"]).is_empty());
    assert_eq!(names(&r["outputs"]), ["y"], "allocated with empty_like and returned");
    assert_eq!(names(&r["shape_vars"]), ["M", "N"], "unpacked from x.shape");
    for line in [
        "name = \"rmsnorm\"",
        "language = \"triton\"",
        "source = \"rmsnorm.py\"",
        "entry = \"rmsnorm_kernel\"",
        "launcher = \"rmsnorm\"",
        "contract = \"rmsnorm_contract.py\"",
        "cpu = [{ M = 3, N = 64 }]",
    ] {
        assert!(manifest.contains(line), "{line}:\n{manifest}");
    }
    for line in [
        "ARGS = [\"x\", \"w\", \"eps\"]",
        "INPUTS = [\"x\", \"w\", \"eps\"]",
        "INOUTS = []",
        "OUTPUTS = [\"y\"]",
        "M, N = shape[\"M\"], shape[\"N\"]",
        "\"x\": ((M, N), \"float32\")",
        "\"y\": ((M, N), \"float32\")",
        "\"eps\": 1e-6,",
        "def make_inputs(shape, rng, variant=None):",
        "raise NotImplementedError(\"kidiom init: write the float64 reference of rmsnorm_kernel",
    ] {
        assert!(contract.contains(line), "{line}:\n{contract}");
    }
    // w's shape cannot be read: a guess, marked
    assert!(contract.contains("\"w\": ((N,), \"float32\"),  # TODO"), "{contract}");
    let todo = r["todo"].to_string();
    assert!(todo.contains("reference(x)") && todo.contains("[shapes]"), "{todo}");
    // y is allocated and returned by the launcher: taken from its return value, nothing left to do
    assert!(contract.contains("RETURNS = [\"y\"]  # allocated and returned by rmsnorm"), "{contract}");
    assert!(!todo.contains("rmsnorm.py: "), "{todo}");
    // the terminal report says what was filled and what is left
    std::fs::remove_file(d.path().join("ops/rmsnorm.toml")).expect("rm");
    std::fs::remove_file(d.path().join("ops/rmsnorm_contract.py")).expect("rm");
    let out = kidiom(d.path(), &["init", "ops/rmsnorm.py"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for s in ["wrote ops/rmsnorm.toml and ops/rmsnorm_contract.py", "read from the source:", "left for you"] {
        assert!(text.contains(s), "{s}:\n{text}");
    }
}

#[test]
fn init_reads_two_outputs_and_an_in_place_buffer() {
    let d = workdir("kidiom-init-");
    write(
        d.path(),
        "stats.py",
        r#"import torch
import triton
import triton.language as tl


@triton.jit
def _stats_kernel(X, Mean, Rstd, Acc, stride, N: tl.constexpr):
    row = tl.program_id(0)
    x_row = X + row * stride
    x = tl.load(x_row + tl.arange(0, N))
    m = tl.sum(x, axis=0) / N
    v = tl.sum((x - m) * (x - m), axis=0) / N
    tl.store(Mean + row, m)
    tl.store(Rstd + row, 1.0 / tl.sqrt(v + 1e-5))
    acc = tl.load(Acc + row)
    tl.store(Acc + row, acc + m)


def _helper(x):
    return x


def row_stats(x: torch.Tensor, acc: torch.Tensor, scale: float = 1.0):
    rows = x.shape[0]
    n = x.shape[1]
    mean = torch.empty((rows,), device=x.device, dtype=torch.float32)
    rstd = torch.empty((rows,), device=x.device, dtype=torch.float32)
    _stats_kernel[(rows,)](x, mean, rstd, acc, x.stride(0), N=n)
    return mean, rstd
"#,
    );
    let (r, _, contract) = init(d.path(), "stats.py");
    assert_eq!(r["entry"], "_stats_kernel");
    assert_eq!(r["launcher"], "row_stats");
    assert_eq!(names(&r["args"]), ["x", "acc", "scale"]);
    assert_eq!(names(&r["inputs"]), ["x", "scale"]);
    assert_eq!(names(&r["inouts"]), ["acc"], "loaded, then stored: updated in place");
    assert_eq!(names(&r["outputs"]), ["mean", "rstd"], "allocated and returned");
    assert_eq!(names(&r["shape_vars"]), ["rows", "n"]);
    for line in [
        "\"x\": ((rows, n), \"float32\")",
        "\"mean\": ((rows,), \"float32\")",
        "\"rstd\": ((rows,), \"float32\")",
        "\"scale\": 1.0,",
        "OUTPUTS = [\"mean\", \"rstd\"]  # written by the call",
        "RETURNS = [\"mean\", \"rstd\"]  # allocated and returned by row_stats, in the order it returns them",
    ] {
        assert!(contract.contains(line), "{line}:\n{contract}");
    }
}

#[test]
fn init_reads_a_cuda_kernel_into_a_launch_skeleton() {
    let d = workdir("kidiom-init-");
    write(
        d.path(),
        "k/scale.cu",
        r#"#include <cuda_runtime.h>

__device__ float twice(float v) { return 2.0f * v; }

extern "C" __global__ void scale_add(const float* __restrict__ x, float* y, float* acc, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = alpha * twice(x[i]);
        acc[i] += y[i];
    }
}
"#,
    );
    let (r, manifest, contract) = init(d.path(), "k/scale.cu");
    assert_eq!(r["language"], "cuda");
    assert_eq!(r["entry"], "scale_add");
    assert!(r["launcher"].is_null());
    assert!(!manifest.contains("launcher"), "a CUDA kernel is launched by its contract:\n{manifest}");
    assert_eq!(names(&r["args"]), ["x", "y", "acc", "alpha"]);
    assert_eq!(names(&r["inputs"]), ["x", "alpha"], "a const pointer and a float");
    assert_eq!(names(&r["inouts"]), ["acc"], "+= reads first");
    assert_eq!(names(&r["outputs"]), ["y"], "written before it is read");
    assert_eq!(names(&r["shape_vars"]), ["n"], "the int parameter");
    for line in [
        "def launch(shape):",
        "\"params\": [\"x\", \"y\", \"acc\", {\"int\": shape[\"n\"]}, \"alpha\"]",
        "\"block\": [256, 1, 1]",
        "\"alpha\": 1.0,  # TODO",
    ] {
        assert!(contract.contains(line), "{line}:\n{contract}");
    }
}

#[test]
fn init_refuses_what_it_cannot_read_and_files_it_would_overwrite() {
    let d = workdir("kidiom-init-");
    let err = |args: &[&str]| {
        let out = kidiom(d.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?} must fail");
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
        e
    };
    write(d.path(), "plain.py", "def f(x):\n    return x + 1\n");
    assert!(err(&["init", "plain.py"]).contains("no @triton.jit kernel"));
    write(d.path(), "binary.py", b"\x7fELF\x00\x00\x01\x02import triton\n");
    assert!(err(&["init", "binary.py"]).contains("binary.py"));
    write(
        d.path(),
        "nolaunch.py",
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, 1.0)\n",
    );
    assert!(err(&["init", "nolaunch.py"]).contains("has no launcher here"));
    write(d.path(), "mangled.cu", "__global__ void k(float* y) { y[0] = 1.0f; }\n");
    assert!(err(&["init", "mangled.cu"]).contains("is not extern \"C\""));
    write(d.path(), "host.cu", "int main() { return 0; }\n");
    assert!(err(&["init", "host.cu"]).contains("no extern \"C\" __global__ kernel"));
    write(d.path(), "notes.txt", "hello\n");
    assert!(err(&["init", "notes.txt"]).contains("reads a Triton kernel (.py) or a CUDA kernel (.cu)"));
    assert!(err(&["init", "missing.py"]).contains("missing.py"));
    // existing files are not overwritten, unless --force
    write(d.path(), "rmsnorm.py", RMSNORM);
    write(d.path(), "rmsnorm_contract.py", "# mine\n");
    let e = err(&["init", "rmsnorm.py"]);
    assert!(e.contains("rmsnorm_contract.py exists") && e.contains("--force"), "{e}");
    assert_eq!(std::fs::read_to_string(d.path().join("rmsnorm_contract.py")).expect("read"), "# mine\n");
    assert!(!d.path().join("rmsnorm.toml").exists(), "nothing written when one file exists");
    let out = kidiom(d.path(), &["init", "rmsnorm.py", "--force"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(d.path().join("rmsnorm_contract.py")).expect("read").contains("ARGS"));
}

/// A decode written the upstream way (FLA's launchers): the shape read by a splat and an index in
/// one assignment, a bool mode flag with its default.
const UPSTREAM_STYLE: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def decay_kernel(k, v, o, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, USE_GATE: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    b_k = tl.load(k + (i_t * H + i_h) * K + tl.arange(0, K))
    b_v = tl.load(v + (i_t * H + i_h) * V + tl.arange(0, V))
    b_o = b_v * tl.sum(b_k, axis=0)
    if USE_GATE:
        b_o = b_o * 0.5
    tl.store(o + (i_t * H + i_h) * V + tl.arange(0, V), b_o)


def decay(k, v, use_gate: bool = False):
    B, T, H, K, V = *k.shape, v.shape[-1]
    o = torch.empty_like(v)
    decay_kernel[(B * T, H)](k, v, o, T, H=H, K=K, V=V, USE_GATE=use_gate)
    return o
"#;

#[test]
fn init_reads_an_upstream_launchers_splat_unpacking_and_bool_flag() {
    let d = workdir("kidiom-init-");
    write(d.path(), "ops/decay.py", UPSTREAM_STYLE);
    let (r, _manifest, contract) = init(d.path(), "ops/decay.py");
    assert_eq!(names(&r["shape_vars"]), ["B", "T", "H", "K", "V"], "{r:#}");
    assert_eq!(names(&r["inputs"]), ["k", "v", "use_gate"], "{r:#}");
    assert_eq!(names(&r["outputs"]), ["o"], "{r:#}");
    assert!(contract.contains("\"k\": ((B, T, H, K), \"float32\")"), "the splat gave k's dims:\n{contract}");
    assert!(contract.contains("\"use_gate\": False"), "the flag's default:\n{contract}");
}

/// A file that launches several kernels (FLA's norms: a forward, a backward, a row variant):
/// init writes one contract, says which others are here, and `--entry` writes another's.
const TWO_KERNELS: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def scale_fwd_kernel(x, y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < N) * 2.0, mask=o < N)


@triton.jit
def scale_bwd_kernel(dy, dx, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dx + o, tl.load(dy + o, mask=o < N) * 2.0, mask=o < N)


def scale_fwd(x):
    y = torch.empty_like(x)
    N = x.numel()
    scale_fwd_kernel[(triton.cdiv(N, 128),)](x, y, N, BLOCK=128)
    return y.view(x.shape)


def scale_bwd(dy):
    dx = torch.empty_like(dy)
    N = dy.numel()
    scale_bwd_kernel[(triton.cdiv(N, 128),)](dy, dx, N, BLOCK=128)
    return dx
"#;

#[test]
fn init_names_a_files_other_kernels_and_writes_the_one_asked_for() {
    let d = workdir("kidiom-init-");
    write(d.path(), "scale.py", TWO_KERNELS);
    let (r, _, contract) = init(d.path(), "scale.py");
    assert_eq!(r["entry"], "scale_fwd_kernel");
    assert_eq!(names(&r["others"]), ["scale_bwd_kernel (launched by scale_bwd)"], "{r:#}");
    // the output seen through .view(...) is the allocation it views
    assert!(contract.contains("RETURNS = [\"y\"]"), "{contract}");
    let out = kidiom(d.path(), &["init", "scale.py", "--entry", "scale_bwd_kernel", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((r["entry"].as_str(), r["launcher"].as_str()), (Some("scale_bwd_kernel"), Some("scale_bwd")));
    assert_eq!(r["manifest"], "scale_scale_bwd_kernel.toml");
    let contract = std::fs::read_to_string(d.path().join("scale_scale_bwd_kernel_contract.py")).expect("contract");
    assert!(contract.contains("RETURNS = [\"dx\"]") && contract.contains("ARGS = [\"dy\"]"), "{contract}");
    assert!(d.path().join("scale.toml").is_file(), "the first contract is left as it was");
    let out = kidiom(d.path(), &["init", "scale.py", "--entry", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no kernel nope with a launcher here (launched: scale_fwd_kernel (launched by scale_fwd)"),
        "{err}"
    );
}

/// FLA's decode allocates its final state with a size it computes (`N = B if cu_seqlens is None
/// else len(cu_seqlens) - 1`): a shape variable of the skeleton's, so its formulas name nothing
/// undefined and the contract loads.
const COMPUTED_SIZE: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def last_kernel(x, ht, T, K: tl.constexpr):
    i_n = tl.program_id(0)
    tl.store(ht + i_n * K + tl.arange(0, K), tl.load(x + (i_n * T + T - 1) * K + tl.arange(0, K)))


def last(x, cu_seqlens=None):
    B, T, K = x.shape
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    ht = x.new_empty(N, K)
    last_kernel[(N,)](x, ht, T, K=K)
    return ht
"#;

#[test]
fn init_makes_a_size_the_launcher_computes_a_shape_variable() {
    let d = workdir("kidiom-init-");
    write(d.path(), "last.py", COMPUTED_SIZE);
    let (r, manifest, contract) = init(d.path(), "last.py");
    assert_eq!(names(&r["shape_vars"]), ["B", "T", "K", "N"], "{r:#}");
    assert!(contract.contains("\"ht\": ((N, K), \"float32\")"), "{contract}");
    assert!(contract.contains("N = shape[\"B\"], shape[\"T\"], shape[\"K\"], shape[\"N\"]"), "{contract}");
    assert!(manifest.contains("N = "), "the sizes name N:\n{manifest}");
}

/// FLA's recurrent decode, as it writes its launcher: the state is updated in place unless a
/// flag says to allocate a new one (`if inplace_final_state: final_state = initial_state`),
/// varlen offsets and state slots the kernel reads only to address other tensors, `v`'s rank
/// known only from `v.shape[2]` and `v.shape[-1]`, and `q` addressed as `k` is.
const IN_PLACE_STATE: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def step_kernel(q, k, v, o, h0, ht, offsets, slots, T, H: tl.constexpr, HV: tl.constexpr,
                K: tl.constexpr, V: tl.constexpr, IS_VARLEN: tl.constexpr, HAS_SLOTS: tl.constexpr,
                IN_PLACE: tl.constexpr):
    i_n, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        bos, eos = tl.load(offsets + i_n).to(tl.int64), tl.load(offsets + i_n + 1).to(tl.int64)
        T = eos - bos
    else:
        bos, eos = i_n * T, i_n * T + T
    o_k, o_v = tl.arange(0, K), tl.arange(0, V)
    p_q = q + (bos * H + i_h) * K + o_k
    p_k = k + (bos * H + i_h) * K + o_k
    p_v = v + (bos * HV + i_hv) * V + o_v
    p_o = o + (bos * HV + i_hv) * V + o_v
    if HAS_SLOTS:
        p_h = h0 + tl.load(slots + i_n).to(tl.int64) * HV * K * V
    else:
        p_h = h0 + i_n * HV * K * V
    p_h = p_h + i_hv * K * V + o_k[:, None] * V + o_v[None, :]
    b_h = tl.load(p_h)
    for _ in range(0, T):
        b_k = tl.load(p_k)
        b_h += b_k[:, None] * tl.load(p_v)[None, :]
        tl.store(p_o, tl.sum(b_h * tl.load(p_q)[:, None], 0))
        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_o += HV * V
    p_t = ht + (i_n * HV + i_hv) * K * V + o_k[:, None] * V + o_v[None, :]
    tl.store(p_t, b_h)


def step(q, k, v, initial_state, offsets: torch.LongTensor | None = None, slots: torch.Tensor | None = None,
         inplace_final_state: bool = True, use_l2norm: bool = False):
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[-1]
    N = B if offsets is None else len(offsets) - 1
    o = torch.empty_like(v)
    if inplace_final_state:
        final_state = initial_state
    else:
        final_state = q.new_empty(N, HV, K, V, dtype=torch.float32)
    if use_l2norm:
        q = q / q.norm(dim=-1, keepdim=True)
    step_kernel[(N, HV)](q, k, v, o, initial_state, final_state, offsets, slots, T, H=H, HV=HV, K=K, V=V,
                         IS_VARLEN=offsets is not None, HAS_SLOTS=slots is not None,
                         IN_PLACE=inplace_final_state)
    return o, final_state
"#;

#[test]
fn init_reads_the_default_path_of_an_upstream_launcher() {
    let d = workdir("kidiom-init-");
    write(d.path(), "step.py", IN_PLACE_STATE);
    let (r, _manifest, contract) = init(d.path(), "step.py");
    // with the flag at its default the state is written in place and returned, not allocated
    assert_eq!(names(&r["inouts"]), ["initial_state"], "{r:#}");
    assert_eq!(names(&r["outputs"]), ["o"], "{r:#}");
    assert!(contract.contains("RETURNS = [\"o\"]"), "the returned state is the in/out one:\n{contract}");
    assert!(contract.contains("\"initial_state\": ((N, HV, K, V), \"float32\")"), "{contract}");
    // the flag that decides it is held at its default; the one that only changes the math is not
    assert!(contract.contains("FIXED = [\"inplace_final_state\"]"), "{contract}");
    // offsets and slots only address other tensors: integers, and the optional ones left out
    assert!(contract.contains("\"offsets\": None,  # TODO: an index tensor"), "{contract}");
    assert!(contract.contains("\"slots\": None,  # TODO: an index tensor"), "{contract}");
    assert!(!contract.lines().any(|l| l.starts_with("OPTIONAL")), "no random offsets:\n{contract}");
    // v's rank from its indexed sizes, its leading sizes from k; q addressed as k is
    assert!(contract.contains("\"v\": ((B, T, HV, V), \"float32\")"), "{contract}");
    assert!(contract.contains("\"o\": ((B, T, HV, V), \"float32\")"), "{contract}");
    assert!(contract.contains("\"q\": ((B, T, H, K), \"float32\")"), "{contract}");
    python_parses(&contract);
}

/// FLA's gated recurrence, as its launcher leaves it: `q`, `k` and `v` unpacked, the gate, the
/// beta, the bias and the decay rate only passed on (their shapes are in a docstring). The
/// kernel's address arithmetic says them: `g + (bos * HV + i_hv) * K + o_k` is (.., HV, K), `bos`
/// ranging over (B, T) as it does in `v`'s address. `w` is addressed through a stride argument:
/// nothing to read there. `u` the launcher hands to torch, not to the kernel.
const STRIDED_GATES: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def gated_kernel(q, k, v, g, beta, dt_bias, A, w, o, T, stride_w, H: tl.constexpr, HV: tl.constexpr,
                 K: tl.constexpr, V: tl.constexpr):
    i_n, i_hv = tl.program_id(0), tl.program_id(1)
    i_h = i_hv // (HV // H)
    bos = i_n * T
    o_k, o_v = tl.arange(0, K), tl.arange(0, V)
    p_q = q + (bos * H + i_h) * K + o_k
    p_k = k + (bos * H + i_h) * K + o_k
    p_v = v + (bos * HV + i_hv) * V + o_v
    p_g = g + (bos * HV + i_hv) * K + o_k
    p_beta = beta + bos * HV + i_hv
    p_o = o + (bos * HV + i_hv) * V + o_v
    b_a = tl.load(A + i_hv)
    b_bias = tl.load(dt_bias + i_hv * K + o_k)
    b_w = tl.load(w + i_n * stride_w + o_k)
    b_h = tl.zeros([K, V], dtype=tl.float32)
    for _ in range(0, T):
        b_g = -tl.exp(b_a) * (tl.load(p_g) + b_bias) * b_w
        b_h = b_h * tl.exp(b_g)[:, None] + tl.load(p_k)[:, None] * (tl.load(p_v) * tl.load(p_beta))[None, :]
        tl.store(p_o, tl.sum(b_h * tl.load(p_q)[:, None], 0))
        p_q += H * K
        p_k += H * K
        p_v += HV * V
        p_g += HV * K
        p_beta += HV
        p_o += HV * V


def gated(q, k, v, g, beta, dt_bias, A, w, u: torch.Tensor):
    B, T, H, K, V = *k.shape, v.shape[-1]
    HV = v.shape[2]
    o = torch.empty_like(v)
    gated_kernel[(B, HV)](q, k, v, g, beta, dt_bias, A, w, o, T, w.stride(0), H=H, HV=HV, K=K, V=V)
    return o, torch.cumsum(u, dim=1)
"#;

#[test]
fn init_reads_a_tensors_dims_from_the_strides_of_its_address() {
    let d = workdir("kidiom-init-");
    write(d.path(), "gated.py", STRIDED_GATES);
    let (_r, _manifest, contract) = init(d.path(), "gated.py");
    assert!(
        contract
            .contains("\"g\": ((B, T, HV, K), \"float32\"),  # TODO: g's shape read from the strides of its address"),
        "{contract}"
    );
    assert!(contract.contains("\"beta\": ((B, T, HV), \"float32\")"), "{contract}");
    assert!(contract.contains("\"dt_bias\": ((HV, K), \"float32\")"), "{contract}");
    assert!(contract.contains("\"A\": ((HV,), \"float32\")"), "{contract}");
    // still guesses: the user checks them
    assert!(contract.contains("\"shape of g\": \"(B, T, HV, K)\""), "{contract}");
    // an input the kernel never receives is guessed shaped like the widest the launcher unpacks
    assert!(contract.contains("\"u\": ((B, T, H, K), \"float32\"),  # TODO"), "{contract}");
    // a stride the launcher passes says nothing kidiom can read: w keeps the one-size guess
    assert!(contract.contains("\"w\": ((HV,), \"float32\"),  # TODO: w's shape is not readable"), "{contract}");
    python_parses(&contract);
}

/// SGLang's copy of FLA's chunk kernels: block pointers over pointers moved first
/// (`q += (bos * H + i_h) * K`, then `tl.make_block_ptr(q, (T, K), (H * K, 1), ...)`), one of
/// them transposed (`k` read as (K, T) with strides (1, H * K)). Each is a tensor; the output's
/// shape comes from its strides, the launcher saying only q's.
const BLOCK_POINTERS: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def bp_kernel(q, k, g, o, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    bos = i_b * T
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += bos * H + i_h
    o += (bos * H + i_h) * K
    p_q = tl.make_block_ptr(q, (T, K), (H * K, 1), (i_t * BT, 0), (BT, BK), (1, 0))
    p_k = tl.make_block_ptr(k, (K, T), (1, H * K), (0, i_t * BT), (BK, BT), (0, 1))
    p_g = tl.make_block_ptr(g, (T,), (H,), (i_t * BT,), (BT,), (0,))
    p_o = tl.make_block_ptr(base=o, shape=(T, K), strides=(H * K, 1), offsets=(i_t * BT, 0), block_shape=(BT, BK),
                            order=(1, 0))
    b_q = tl.load(p_q, boundary_check=(0, 1))
    b_k = tl.load(p_k, boundary_check=(0, 1))
    b_g = tl.load(p_g, boundary_check=(0,))
    tl.store(p_o, (b_q + tl.trans(b_k)) * b_g[:, None], boundary_check=(0, 1))


def bp(q, k, g):
    B, T, H, K = q.shape
    o = k.new_empty(B, T, H, K)
    bp_kernel[(triton.cdiv(T, 64), B * H)](q, k, g, o, T, H=H, K=K, BT=64, BK=triton.next_power_of_2(K))
    return o
"#;

#[test]
fn init_reads_block_pointers_as_tensors_and_their_strides_as_shapes() {
    let d = workdir("kidiom-init-");
    write(d.path(), "bp.py", BLOCK_POINTERS);
    let (r, _manifest, contract) = init(d.path(), "bp.py");
    assert_eq!(names(&r["inputs"]), ["q", "k", "g"], "{r:#}");
    assert_eq!(names(&r["outputs"]), ["o"], "{r:#}");
    assert!(contract.contains("\"k\": ((B, T, H, K), \"float32\")"), "{contract}");
    assert!(contract.contains("\"g\": ((B, T, H), \"float32\")"), "{contract}");
    python_parses(&contract);
}

/// FLA's `qk_rmsnorm_fwd(x, weight, eps, *, store_rstd)`: a keyword-only parameter without a
/// default is passed (the harness binds ARGS beyond the positional parameters to the keyword-only
/// ones, in order), and so is each keyword-only one before it.
const KEYWORD_ONLY: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def norm_kernel(x, y, r, N, STORE: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    b = tl.load(x + tl.program_id(0) * N + o, mask=o < N, other=0.0)
    s = 1.0 / tl.sqrt(tl.sum(b * b, axis=0) / N + 1e-6)
    tl.store(y + tl.program_id(0) * N + o, b * s, mask=o < N)
    if STORE:
        tl.store(r + tl.program_id(0), s)


def norm(x, *, eps: float = 1e-6, store_rstd: bool):
    M, N = x.shape
    y = torch.empty_like(x)
    r = x.new_empty(M)
    norm_kernel[(M,)](x, y, r, N, STORE=store_rstd, BLOCK=triton.next_power_of_2(N))
    return y, r
"#;

#[test]
fn init_passes_keyword_only_parameters_where_one_has_no_default() {
    let d = workdir("kidiom-init-");
    write(d.path(), "norm.py", KEYWORD_ONLY);
    let (r, _, contract) = init(d.path(), "norm.py");
    assert_eq!(names(&r["args"]), ["x", "eps", "store_rstd"], "{r:#}");
    let filled = names(&r["filled"]);
    assert!(filled.iter().any(|l| l.starts_with("store_rstd: keyword-only, passed by name")), "{filled:?}");
    assert!(contract.contains("\"store_rstd\": False,"), "{contract}");
    python_parses(&contract);
}

/// FLA's gate launchers: `H, K = g.shape[-2:]` names the last two sizes, and the kernel keeps its
/// offset in a local (`p = (i_t * H + i_h) * K + o_k`, then `tl.load(g + p)`), which kidiom reads
/// through: `A + i_h` is (H,), i_h ranging over H in p.
const SLICED_GATE: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def gate_kernel(g, A, y, H: tl.constexpr, K: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    o_k = tl.arange(0, K)
    p = (i_t * H + i_h) * K + o_k
    tl.store(y + p, tl.load(g + p) * tl.exp(tl.load(A + i_h)))


def gate(g, A):
    H, K = g.shape[-2:]
    y = torch.empty_like(g)
    gate_kernel[(g.numel() // (H * K), H)](g, A, y, H=H, K=K)
    return y
"#;

#[test]
fn init_reads_a_slice_of_a_shape_and_an_offset_kept_in_a_local() {
    let d = workdir("kidiom-init-");
    write(d.path(), "gate.py", SLICED_GATE);
    let (r, _, contract) = init(d.path(), "gate.py");
    assert_eq!(names(&r["shape_vars"]), ["H", "K"], "{r:#}");
    assert!(contract.contains("\"g\": ((H, K), \"float32\")"), "{contract}");
    assert!(contract.contains("\"A\": ((H,), \"float32\"),  # TODO: A's shape read from the strides"), "{contract}");
    assert!(contract.contains("\"y\": ((H, K), \"float32\")"), "{contract}");
    python_parses(&contract);
}

/// A default that is no value kidiom can pass (`torch.float32`): the launcher keeps its own at the
/// end of its parameters; before another, None is passed and marked TODO. A keyword-only
/// parameter (FLA's `attn_decoding_one_step(..., *, window_size=None)`) keeps its default. The
/// contract loads.
const DTYPE_DEFAULTS: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def cast_kernel(x, y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < N), mask=o < N)


def cast(x, group: object | None, acc_dtype: torch.dtype = torch.float32, scale: float = 1.0, output_dtype: torch.dtype = torch.float32,
         *, window: int | None = None):
    N = x.shape[0]
    y = torch.empty(N, dtype=output_dtype, device=x.device)
    cast_kernel[(triton.cdiv(N, 128),)](x, y, N, BLOCK=128)
    return y
"#;

#[test]
fn init_passes_no_default_it_cannot_write_as_a_value() {
    let d = workdir("kidiom-init-");
    write(d.path(), "cast.py", DTYPE_DEFAULTS);
    let (r, _, contract) = init(d.path(), "cast.py");
    assert_eq!(names(&r["args"]), ["x", "group", "acc_dtype", "scale"], "{r:#}");
    // an optional object without a default (FLA's `process_group: ProcessGroup | None`): None
    assert!(contract.contains("\"group\": None,\n"), "{contract}");
    assert!(contract.contains("\"acc_dtype\": None,  # TODO"), "{contract}");
    assert!(!contract.contains("torch."), "no name the contract does not import:\n{contract}");
    let filled = names(&r["filled"]);
    assert!(filled.iter().any(|l| l.starts_with("output_dtype: left to cast's own default")), "{filled:?}");
    // a keyword-only parameter is never passed by place
    assert!(filled.iter().any(|l| l.starts_with("window: keyword-only, left to its default")), "{filled:?}");
    python_parses(&contract);
}

/// A kernel inside its own package that imports it (`fla/ops/kda/x.py` importing `fla.ops.utils`):
/// the manifest's `[python] path` names the folder holding the package, so the sandboxed worker
/// gets it, as does a file that imports within it relatively; a file outside any package it
/// imports gets none.
#[test]
fn init_points_a_kernel_in_its_own_package_at_that_package() {
    let d = workdir("kidiom-init-");
    write(d.path(), "proj/pkg/__init__.py", "");
    write(d.path(), "proj/pkg/utils.py", "def helper():\n    return 1\n");
    write(d.path(), "proj/pkg/ops/__init__.py", "");
    // `ops` too: the name of the folder it lies in, imported as another project (FLA's causal_conv1d)
    let inside = TWO_KERNELS.replace(
        "import torch\n",
        "import torch\nfrom pkg.utils import helper\ntry:\n    from ops import fast\nexcept ImportError:\n    fast = None\n",
    );
    write(d.path(), "proj/pkg/ops/scale.py", &inside);
    let (r, manifest, _) = init(d.path(), "proj/pkg/ops/scale.py");
    assert!(manifest.contains("[python]\npath = [\"../..\"]"), "{manifest}");
    let filled = names(&r["filled"]);
    assert!(filled.iter().any(|l| l.contains("the folder holding `pkg`")), "{filled:?}");
    // a file that imports only relatively (FLA's `from . import invcum`) needs its package too
    let relative = TWO_KERNELS.replace("import torch\n", "import torch\nfrom ..utils import helper\n");
    write(d.path(), "proj/pkg/ops/rel.py", &relative);
    let (_, manifest, _) = init(d.path(), "proj/pkg/ops/rel.py");
    assert!(manifest.contains("[python]\npath = [\"../..\"]"), "{manifest}");
    // a namespace package (SGLang's sglang/srt/layers/... has no `__init__.py` below `sglang`):
    // the outermost folder the file lies in that it imports by name
    write(d.path(), "ns/top/__init__.py", "");
    let namespaced = TWO_KERNELS.replace("import torch\n", "import torch\nfrom top.srt.ops.utils import helper\n");
    write(d.path(), "ns/top/srt/ops/scale.py", &namespaced);
    let (_, manifest, _) = init(d.path(), "ns/top/srt/ops/scale.py");
    assert!(manifest.contains("[python]\npath = [\"../../..\"]"), "{manifest}");
    write(d.path(), "alone/scale.py", TWO_KERNELS);
    let (_, manifest, _) = init(d.path(), "alone/scale.py");
    assert!(!manifest.contains("[python]"), "{manifest}");
}

/// What a launcher returns, place by place (FLA's ATK forward): an allocation seen through a
/// dtype conversion is that output; a slice of one is not; the same output again is not twice.
const RETURNED_PLACES: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(x, y, s, D: tl.constexpr):
    i = tl.program_id(0)
    b_x = tl.load(x + i * D + tl.arange(0, D))
    tl.store(y + i * D + tl.arange(0, D), b_x * 2.0)
    tl.store(s + i, tl.sum(b_x, axis=0))


def rows(x):
    N, D = x.shape
    y = torch.empty_like(x, dtype=torch.float32)
    s = x.new_empty(N)
    rows_kernel[(N,)](x, y, s, D=D)
    last = y[-1].contiguous()
    return y.to(x.dtype), s, last, s
"#;

#[test]
fn init_places_each_returned_value_once() {
    let d = workdir("kidiom-init-");
    write(d.path(), "rows.py", RETURNED_PLACES);
    let (r, _, contract) = init(d.path(), "rows.py");
    assert!(contract.contains("RETURNS = [\"y\", \"s\"]"), "{contract}");
    assert_eq!(names(&r["outputs"]), ["y", "s"], "{r:#}");
}

/// An autograd Function whose `forward` launches the kernel (FLA's fused chunk kernels): the
/// launcher is the Function's `apply`, its arguments forward's after `ctx`; a shape kept on `ctx`
/// and unpacked from there (FLA's GRPO loss) is read.
const FUNCTION_LAUNCH: &str = r#"import torch
import triton
import triton.language as tl


@triton.jit
def twice_kernel(x, y, N, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < N) * 2.0, mask=o < N)


class TwiceFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, scale=1):
        ctx.input_shape = x.shape
        N, = ctx.input_shape
        y = torch.empty_like(x)
        twice_kernel[(triton.cdiv(N, 128),)](x, y, N, BLOCK=128)
        return y

    @staticmethod
    def backward(ctx, dy):
        return dy * 2.0, None
"#;

#[test]
fn init_launches_through_an_autograd_functions_apply() {
    let d = workdir("kidiom-init-");
    write(d.path(), "twice.py", FUNCTION_LAUNCH);
    let (r, manifest, contract) = init(d.path(), "twice.py");
    assert_eq!(r["launcher"], "TwiceFunction.apply", "{r:#}");
    assert!(manifest.contains("launcher = \"TwiceFunction.apply\""), "{manifest}");
    assert!(contract.contains("ARGS = [\"x\", \"scale\"]"), "ctx is not an argument:\n{contract}");
    assert!(contract.contains("RETURNS = [\"y\"]"), "{contract}");
    // the shape kept on ctx, then unpacked
    assert!(contract.contains("\"x\": ((N,), \"float32\"),  # float32 assumed"), "{contract}");
}

/// `scale: float | None = None` passed to the kernel's arithmetic (FLA's inner `fused_recurrent_fwd`,
/// whose public wrapper fills it in): None would reach the kernel, so a number is guessed; where the
/// launcher or the kernel's heuristics test it for None (`lower_bound`), None stays.
const NONE_SCALE: &str = r#"import torch
import triton
import triton.language as tl


@triton.heuristics({"USE_BOUND": lambda args: args["bound"] is not None})
@triton.jit
def scaled_kernel(x, y, scale, bound, N, USE_BOUND: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = tl.load(x + o, mask=o < N) * scale
    if USE_BOUND:
        b = tl.minimum(b, bound)
    tl.store(y + o, b, mask=o < N)


def scaled(x, scale: float | None = None, bound: float | None = None):
    N = x.shape[0]
    y = torch.empty_like(x)
    scaled_kernel[(triton.cdiv(N, 128),)](x, y, scale, bound, N, BLOCK=128)
    return y
"#;

#[test]
fn init_guesses_a_number_where_none_would_reach_the_kernels_arithmetic() {
    let d = workdir("kidiom-init-");
    write(d.path(), "scaled.py", NONE_SCALE);
    let (_, _, contract) = init(d.path(), "scaled.py");
    assert!(contract.contains("\"scale\": 1.0,  # TODO"), "{contract}");
    assert!(contract.contains("\"bound\": None,\n"), "{contract}");
    let tested =
        NONE_SCALE.replace("    N = x.shape[0]\n", "    N = x.shape[0]\n    scale = 1.0 if scale is None else scale\n");
    write(d.path(), "tested/scaled.py", tested);
    let (_, _, contract) = init(d.path(), "tested/scaled.py");
    assert!(contract.contains("\"scale\": None,\n"), "{contract}");
}

/// A generated launcher whose condition is as long as the file (`f and f and ...`, 100,000
/// deep), an address summed as long, an attribute chain and a returned value converted as often:
/// init reads what it can and never overflows its stack.
#[test]
fn init_reads_a_launcher_with_a_condition_and_an_address_as_long_as_the_file() {
    let d = workdir("kidiom-init-");
    let chain = vec!["f"; 100_000].join(" and ");
    let sum = " + 0".repeat(50_000);
    let attrs = ".a".repeat(50_000);
    let converted = ".float()".repeat(10_000);
    let source = format!(
        "import torch\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n\
         def k_kernel(x, y, N, BLOCK: tl.constexpr):\n    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    \
         z = x{attrs}\n    \
         tl.store(y + o{sum}, tl.load(x + o, mask=o < N), mask=o < N)\n\n\n\
         def k(x, f: bool = False):\n    N = x.shape[0]\n    y = torch.empty_like(x)\n    if {chain}:\n        \
         y = x\n    k_kernel[(triton.cdiv(N, 128),)](x, y, N, BLOCK=128)\n    return y{converted}\n"
    );
    write(d.path(), "k.py", &source);
    let (r, _, contract) = init(d.path(), "k.py");
    assert_eq!(names(&r["inputs"]), ["x", "f"], "{r:#}");
    assert!(contract.contains("\"x\": ((N,), \"float32\")"), "{contract}");
    // a value converted past 64 times is not followed back to the allocation it returns
    assert_eq!(names(&r["outputs"]), Vec::<&str>::new(), "{r:#}");
}
