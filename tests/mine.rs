use std::collections::BTreeMap;
use std::process::Command;

use crate::util::{Env, Lcg, find, git_repo, occurrences};

/// Hand-written Triton code with the cases that trip naive matchers.
const TRICKY_PY: &str = r#"
import triton
import triton.language as tl
from triton import language as T
import triton as tr


@triton.autotune(
    configs=[triton.Config({'BK': 32}, num_warps=4), triton.Config({'BK': 64}, num_stages=2, num_warps=8), triton.Config({'BK': 16})],
    key=['K'],
)
@triton.heuristics({'USE_G': lambda args: args['g'] is not None})
@triton.jit(do_not_specialize=['T'])
def fused_kernel(q, k, o, g, T, K: tl.constexpr, BK: tl.constexpr, USE_G: tl.constexpr):
    i_t = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1)
    # tl.dot(a, b, input_precision="tf32") in a comment is not a site
    s = "tl.dot(a, b, input_precision='ieee') in a string is not a site"
    b_q = tl.load(q + i_t, mask=i_h < T, other=0.0, eviction_policy="evict_last")
    b_k = tl.load(mask=i_h < T, pointer=k)
    b_o = tl.dot(b_q, b_k, input_precision="ieee", out_dtype=tl.float32)
    b_o = tl.dot(b_q, b_k)
    b_o = T.dot(input_precision="tf32", a=b_q, b=b_k)
    for i in tl.static_range(4):
        b_o += tl.exp2(b_q)
    for i in range(3):
        b_o += tl.exp(b_q)
    tl.store(o + i_t, b_o, boundary_check=(0, 1), cache_modifier=".cg")


@tr.jit
def plain_kernel(x, y, N: tl.constexpr, M):
    pid = tl.program_id(axis=0)
    x = tl.multiple_of(x, 16)
    v = tl.load(x + pid)
    tl.store(y + pid, tl.exp(v))


def host(x):
    # Host code: none of this counts.
    a = tl.dot(x, x, input_precision="ieee")
    plain_kernel[(1,)](x, x, N=4, M=3, num_warps=2)
    plain_kernel[(2,)](x, x, N=8, M=3)
    return a
"#;

const TRICKY_CU: &str = r#"
#include <cuda_runtime.h>
#define DG_DEVICE __device__ __forceinline__

// __global__ void __launch_bounds__(64) commented_out(float* __restrict__ x) {}
template <int N>
__global__ void __launch_bounds__(256, 1) scale(const float* __restrict__ x, float* __restrict__ y, float* z, int n) {
  #pragma unroll
  for (int i = 0; i < N; ++i) { y[i] = __expf(x[i]) + expf(x[i]); }
  #pragma unroll 4
  for (int i = 0; i < n; ++i) { z[i] = x[i]; }
  for (int i = 0; i < n; ++i) { z[i] += 1.0f; }
  float4 v = *reinterpret_cast<const float4*>(x);
  float s = __shfl_xor_sync(0xffffffff, v.x, 1);
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(s) : "l"(x));
  y[0] = s;
}

__global__ void plain(float* x, int n) {
  for (int i = 0; i < n; ++i) { x[i] = expf(x[i]); }
}

__device__ __forceinline__ float warp_sum(float v) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

__device__ float helper(float v) { return v * 2.0f; }
DG_DEVICE float via_macro(float v) { return __expf(v); }

void host_only(float* x) { float y = expf(x[0]); }
"#;

const BINDING_CPP: &str = r#"
#include <pybind11/pybind11.h>
namespace py = pybind11;

void transfer(long src, long dst, long n) {
  py::gil_scoped_release release;
  do_copy(src, dst, n);
}

void transfer_blocking(long src, long dst, long n) {
  do_copy(src, dst, n);
}

int query(int x) {
  py::gil_scoped_release nogil;
  int y = x + 1;
  return y;
}

PYBIND11_MODULE(kv, m) {
  m.def("transfer", &transfer);
  m.def("transfer_async", &transfer, py::call_guard<py::gil_scoped_release>());
  m.def("query", &query, py::call_guard<py::gil_scoped_release>());
  m.def("transfer_blocking", &transfer_blocking);
}
"#;

/// A generated Triton file: keyword arguments in random positions and orders.
fn generated_py(rng: &mut Lcg, i: usize) -> String {
    let mut s = String::from("import triton\nimport triton.language as tl\n\n");
    for k in 0..1 + rng.below(3) {
        let decorated = rng.below(3) == 0;
        if decorated {
            s.push_str("@triton.heuristics({'EVEN': lambda a: a['n'] % 2 == 0})\n");
        }
        s.push_str(&format!("@triton.jit\ndef kernel_{i}_{k}(a, b, c, n, BT: tl.constexpr):\n"));
        s.push_str(if rng.below(2) == 0 {
            "    i_n = tl.program_id(0).to(tl.int64)\n"
        } else {
            "    i_n = tl.program_id(0)\n"
        });
        for _ in 0..1 + rng.below(6) {
            let mut kws = vec![];
            if rng.below(2) == 0 {
                kws.push(format!("input_precision={}", rng.pick(&["\"ieee\"", "\"tf32\"", "DOT_PRECISION"])));
            }
            if rng.below(3) == 0 {
                kws.push("out_dtype=tl.float32".to_string());
            }
            let mut args = vec!["x".to_string(), "y".to_string()];
            for kw in kws {
                let pos = rng.below(args.len() as u64 + 1) as usize;
                // Keywords after positionals is Python's rule; shuffle among the keywords only.
                let pos = pos.max(2);
                args.insert(pos.min(args.len()), kw);
            }
            s.push_str(&format!("    z = tl.dot({})\n", args.join(", ")));
            let mut lkw = vec!["mask=m".to_string()];
            if rng.below(2) == 0 {
                lkw.push("eviction_policy=\"evict_first\"".into());
            }
            if rng.below(2) == 0 {
                lkw.push("other=0.0".into());
            }
            if rng.below(2) == 0 {
                lkw.reverse();
            }
            s.push_str(&format!("    w = tl.load(a + i_n, {})\n", lkw.join(", ")));
            s.push_str(if rng.below(2) == 0 { "    e = tl.exp2(w)\n" } else { "    e = tl.exp(w)\n" });
        }
        s.push('\n');
    }
    s
}

fn generated_cu(rng: &mut Lcg, i: usize) -> String {
    let mut s = String::new();
    let lb = if rng.below(2) == 0 { "__launch_bounds__(128) " } else { "" };
    let r = if rng.below(2) == 0 { "__restrict__ " } else { "" };
    s.push_str(&format!("__global__ void {lb}k{i}(const float* {r}x, float* y, int n) {{\n"));
    for _ in 0..rng.below(4) {
        if rng.below(2) == 0 {
            s.push_str("  #pragma unroll\n");
        }
        s.push_str("  for (int j = 0; j < n; ++j) { y[j] = ");
        s.push_str(if rng.below(2) == 0 { "__expf(x[j]); }\n" } else { "expf(x[j]); }\n" });
    }
    s.push_str("}\n");
    s
}

fn independent_counts(dir: &std::path::Path) -> BTreeMap<String, u64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/independent_count.py");
    let out = Command::new("python3").arg(script).arg(dir).output().expect("python3 runs");
    assert!(out.status.success(), "independent count failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("counts JSON")
}

#[test]
fn counts_match_an_independent_count() {
    let env = Env::new();
    env.write("corpus/tricky.py", TRICKY_PY);
    env.write("corpus/tricky.cu", TRICKY_CU);
    env.write("corpus/binding.cpp", BINDING_CPP);
    let mut rng = Lcg(7);
    for i in 0..40 {
        env.write(&format!("corpus/gen/k{i}.py"), generated_py(&mut rng, i));
    }
    for i in 0..20 {
        env.write(&format!("corpus/gen/k{i}.cu"), generated_cu(&mut rng, i));
    }
    let db = env.db();
    let db = db.to_str().expect("utf8 path");
    let flags = ["--db", db, "--min-occurrences", "1", "--min-files", "1", "--json", "--quiet"];
    let mut args = vec!["mine", "corpus"];
    args.extend(flags);
    env.json(&args);
    let patterns = env.json(&["catalog", "list", "--db", db, "--json"]);
    let expected = independent_counts(&env.path().join("corpus"));

    let required = [
        "py-keyword-tl-dot-input-precision",
        "py-keyword-tl-dot-out-dtype",
        "py-keyword-tl-load-eviction-policy",
        "py-keyword-tl-load-mask",
        "py-keyword-tl-load-other",
        "py-keyword-tl-store-boundary-check",
        "py-keyword-tl-store-cache-modifier",
        "py-keyword-triton-jit-do-not-specialize",
        "py-keyword-triton-config-num-warps",
        "py-decorator-triton-kernel-triton-heuristics",
        "py-annotation-triton-param-tl-constexpr",
        "py-method-wrap-tl-program-id-to",
        "py-variant-exp-exp2",
        "cu-qualifier-cuda-global-launch-bounds",
        "cu-qualifier-cuda-device-forceinline",
        "cu-pragma-loop-unroll",
        "cu-param-qualifier-pointer-param-restrict",
        "cu-variant-expf-expf",
        "cpp-guard-binding-fn-py-gil-scoped-release",
        "cpp-binding-arg-binding-def-py-call-guard",
    ];
    let mut mismatches = Vec::new();
    for id in required {
        let want = expected.get(id).copied().unwrap_or(0);
        let got = find(&patterns, id).map(occurrences);
        assert!(want > 0, "independent count has no {id}: the fixture must exercise it");
        if got != Some(want) {
            mismatches.push(format!("{id}: kidiom {got:?}, independent {want}"));
        }
    }
    // Every other family both sides report must agree too.
    for (id, want) in &expected {
        if let Some(p) = find(&patterns, id)
            && occurrences(p) != *want
            && !required.contains(&id.as_str())
        {
            mismatches.push(format!("{id}: kidiom {}, independent {want}", occurrences(p)));
        }
    }
    assert!(mismatches.is_empty(), "count mismatches:\n{}", mismatches.join("\n"));

    // Value variants are one pattern with a histogram.
    let dot = find(&patterns, "py-keyword-tl-dot-input-precision").expect("dot precision");
    let values: Vec<&str> =
        dot["values"].as_array().expect("values").iter().filter_map(|v| v["value"].as_str()).collect();
    for v in ["\"ieee\"", "\"tf32\"", "DOT_PRECISION"] {
        assert!(values.contains(&v), "{v} missing from {values:?}");
    }
    // Opportunities: tl.dot calls without the keyword.
    let opp: u64 = dot["support"][0]["opportunities"].as_u64().expect("opportunities");
    assert!(opp > 0);
    // Launch options are found at the launch, and host-side tl.dot is not a site.
    let launch = find(&patterns, "py-keyword-kernel-grid-num-warps").expect("launch num_warps");
    assert_eq!(occurrences(launch), 1);
    assert!(find(&patterns, "py-keyword-kernel-grid-n").is_none(), "a kernel argument is not a launch option");
}

#[test]
fn keyword_arguments_match_in_any_position() {
    let env = Env::new();
    env.write(
        "c/k.py",
        "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.load(x, mask=m, other=0)\n    tl.load(mask=m, pointer=x)\n    tl.load(x, other=0, mask=m)\n    tl.load(x, *rest, mask=m, **more)\n    tl.load(x)\n",
    );
    let db = env.db();
    let db = db.to_str().expect("utf8");
    env.json(&["mine", "c", "--db", db, "--min-occurrences", "1", "--min-files", "1", "--json"]);
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    let mask = find(&pats, "py-keyword-tl-load-mask").expect("mask pattern");
    assert_eq!(occurrences(mask), 4);
    assert_eq!(mask["support"][0]["opportunities"], 1);
}

#[test]
fn bad_input_is_skipped_with_reasons() {
    let env = Env::new();
    let good = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.load(x, mask=m)\n    tl.load(x)\n    tl.load(x, mask=n)\n";
    env.write("c/good.py", good);
    env.write("c/good2.py", good);
    env.write("c/binary.py", b"import triton\0\x01\x02\xff");
    env.write("c/latin1.py", b"import triton\n# caf\xe9\n");
    let mut big = String::from("import triton\n");
    while big.len() < 50 << 20 {
        big.push_str("x = 1  # padding padding padding padding padding padding padding\n");
    }
    env.write("c/huge.py", &big);
    let deep = format!("import triton\nx = {}1{}\n", "(".repeat(10_000), ")".repeat(10_000));
    env.write("c/deep.py", &deep);
    env.write("c/deep.rs", format!("#[pyfunction] fn f() {{ {}1{} }}", "(".repeat(10_000), ")".repeat(10_000)));
    env.write("c/deep.cu", format!("__global__ void k() {{ int x = {}1{}; }}", "(".repeat(10_000), ")".repeat(10_000)));
    std::os::unix::fs::symlink(env.path().join("nowhere.py"), env.path().join("c/dangling.py")).expect("symlink");
    let locked = env.write("c/locked.py", good);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let root_can_read = std::fs::read(&locked).is_ok();

    let db = env.db();
    let db = db.to_str().expect("utf8");
    let report = env.json(&["mine", "c", "--db", db, "--min-occurrences", "1", "--min-files", "1", "--json"]);
    let c = &report["corpora"][0];
    let skipped = &c["skipped"];
    assert_eq!(skipped["binary"], 1, "{c}");
    assert_eq!(skipped["invalid-utf8"], 1, "{c}");
    assert_eq!(skipped["too-large"], 1, "{c}");
    assert_eq!(skipped["too-deep"], 3, "{c}");
    // A dangling symlink can't be read by anyone; a mode-000 file only by root.
    let unreadable = if root_can_read { 1 } else { 2 };
    assert_eq!(skipped["unreadable"], unreadable, "{c}");
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    let mask = find(&pats, "py-keyword-tl-load-mask").expect("good files still mined");
    assert_eq!(occurrences(mask), if root_can_read { 6 } else { 4 });
}

#[test]
fn broken_repository_is_mined_around_a_missing_object() {
    let env = Env::new();
    let good = b"import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.load(x, mask=m)\n    tl.load(x)\n";
    let other = b"import triton\nimport triton.language as tl\n@triton.jit\ndef j(x):\n    tl.load(x, mask=q)\n";
    let gone = b"import triton\n# this blob will be deleted\n";
    git_repo(&env.path().join("repo"), &[("a.py", good), ("b.py", other), ("gone.py", gone)]);
    // Delete the loose object of gone.py.
    let oid = git2::Oid::hash_object(git2::ObjectType::Blob, gone).expect("hash").to_string();
    let obj = env.path().join("repo/.git/objects").join(&oid[..2]).join(&oid[2..]);
    std::fs::remove_file(&obj).expect("remove object");
    let db = env.db();
    let db = db.to_str().expect("utf8");
    let report = env.json(&["mine", "repo", "--db", db, "--min-occurrences", "1", "--min-files", "1", "--json"]);
    assert_eq!(report["corpora"][0]["skipped"]["missing-object"], 1, "{report}");
    assert_eq!(report["corpora"][0]["kind"], "git");
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    assert_eq!(occurrences(find(&pats, "py-keyword-tl-load-mask").expect("mask")), 2);
    // A revision that does not exist is a clear error, not a panic.
    let out = env.run(&["mine", "repo", "--rev", "no-such-branch", "--db", db]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-branch"), "{err}");
}

#[test]
fn rerun_reuses_unchanged_files() {
    let env = Env::new();
    let k =
        "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.load(x, mask=m)\n    tl.load(x)\n";
    for i in 0..5 {
        env.write(&format!("c/k{i}.py"), k);
    }
    env.write("c/host.py", "def f():\n    return 1\n");
    let db = env.db();
    let db = db.to_str().expect("utf8");
    let args = ["mine", "c", "--db", db, "--min-occurrences", "1", "--min-files", "1", "--json"];
    let first = env.json(&args);
    assert_eq!(first["corpora"][0]["parsed"], 5);
    assert_eq!(first["corpora"][0]["no_kernels"], 1);
    let second = env.json(&args);
    assert_eq!(second["corpora"][0]["parsed"], 0, "{second}");
    assert_eq!(second["corpora"][0]["cached"], 6);
    std::thread::sleep(std::time::Duration::from_millis(20));
    env.write("c/k0.py", format!("{k}    tl.load(x, mask=z)\n"));
    std::fs::remove_file(env.path().join("c/k4.py")).expect("rm");
    let third = env.json(&args);
    assert_eq!(third["corpora"][0]["parsed"], 1, "{third}");
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    // k0 has two masked loads now, k1..k3 one each; k4 is gone.
    assert_eq!(occurrences(find(&pats, "py-keyword-tl-load-mask").expect("mask")), 5);
}

fn small_corpus(env: &Env) {
    let k =
        "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.load(x, mask=m)\n    tl.load(x)\n";
    for i in 0..4 {
        env.write(&format!("c/k{i}.py"), k);
    }
    let other = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    tl.store(x, y, mask=m)\n    tl.store(x, y)\n";
    for i in 0..4 {
        env.write(&format!("d/s{i}.py"), other);
    }
}

#[test]
fn killed_run_leaves_the_catalog_as_it_was() {
    let env = Env::new();
    small_corpus(&env);
    let db = env.db();
    let db = db.to_str().expect("utf8");
    env.json(&["mine", "c", "--db", db, "--json"]);
    let before = env.json(&["catalog", "list", "--db", db, "--json"]);
    let mut child = env
        .cmd()
        .args(["mine", "d", "--db", db, "--quiet"])
        .env("KIDIOM_STALL_BEFORE_COMMIT_MS", "20000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until the run has done its work and holds the write transaction.
    wait_for_stall(&mut child);
    child.kill().expect("kill");
    child.wait().expect("wait");
    let after = env.json(&["catalog", "list", "--db", db, "--json"]);
    assert_eq!(before, after);
    // The catalog is usable afterwards: the interrupted corpus mines normally.
    env.json(&["mine", "d", "--db", db, "--json"]);
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    assert!(find(&pats, "py-keyword-tl-store-mask").is_some());
}

fn wait_for_stall(child: &mut std::process::Child) {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        if line.expect("line").contains("stalling before commit") {
            return;
        }
    }
    panic!("the run ended without reaching the commit");
}

#[test]
fn concurrent_runs_wait_or_fail_clearly() {
    let env = Env::new();
    small_corpus(&env);
    let db = env.db();
    let db = db.to_str().expect("utf8");
    let mut first = env
        .cmd()
        .args(["mine", "c", "--db", db, "--quiet"])
        .env("KIDIOM_STALL_BEFORE_COMMIT_MS", "1500")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_stall(&mut first);
    // A second run with a short lock timeout fails with a clear message.
    let out = env.cmd().args(["mine", "d", "--db", db]).env("KIDIOM_LOCK_TIMEOUT_MS", "100").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("locked by another kidiom process"), "{err}");
    // One with the default timeout waits for the first and then succeeds.
    let waited = env.json(&["mine", "d", "--db", db, "--json"]);
    assert_eq!(waited["corpora"][0]["parsed"], 4);
    assert!(first.wait().expect("wait").success());
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    assert!(find(&pats, "py-keyword-tl-load-mask").is_some());
    assert!(find(&pats, "py-keyword-tl-store-mask").is_some());
}

#[test]
fn a_corrupt_catalog_is_a_clear_error_and_is_left_alone() {
    let env = Env::new();
    small_corpus(&env);
    let db = env.write("bad.sqlite", b"this is not a database, it is a text file with enough bytes to look like one..");
    let before = std::fs::read(&db).expect("read");
    let out = env.run(&["mine", "c", "--db", db.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a kidiom catalog"), "{err}");
    assert_eq!(std::fs::read(&db).expect("read"), before);
}

#[test]
fn corpus_macros_declare_kernels_and_reruns_stay_cached() {
    let env = Env::new();
    // A header that only defines the macro (no functions), as DeepGEMM's compile.cuh does.
    env.write("c/compile.cuh", "#pragma once\n#ifdef __CUDACC_RTC__\n#define MY_DEV __device__\n#else\n#define MY_DEV __forceinline__ __device__\n#endif\n");
    for i in 0..3 {
        env.write(&format!("c/k{i}.cu"), "#include \"compile.cuh\"\nMY_DEV float f(float x) { return __expf(x); }\nMY_DEV float g(float x) { return expf(x); }\n");
    }
    let db = env.db();
    let db = db.to_str().expect("utf8");
    let args = ["mine", "c", "--db", db, "--min-occurrences", "1", "--min-files", "1", "--json"];
    env.write("c/plain.cu", "__device__ float h(float x) { return x; }\n");
    let first = env.json(&args);
    assert_eq!(first["corpora"][0]["kernels"], 7, "{first}");
    let pats = env.json(&["catalog", "list", "--db", db, "--json"]);
    assert_eq!(occurrences(find(&pats, "cu-qualifier-cuda-device-forceinline").expect("forceinline via macro")), 6);
    let second = env.json(&args);
    assert_eq!(second["corpora"][0]["parsed"], 0, "{second}");
}

#[test]
fn named_values_resolve_within_their_corpus_and_literals_merge() {
    let env = Env::new();
    let head = "import triton\nimport triton.language as tl\n";
    // A constants module without kernels, imported relatively and absolutely.
    env.write(
        "a/pkg/consts.py",
        format!("{head}from pkg.env import HAS_TF32\nif HAS_TF32:\n    PREC = tl.constexpr('tf32')\nelse:\n    PREC = tl.constexpr('ieee')\n"),
    );
    let kernel = |import: &str, value: &str| {
        format!(
            "{head}{import}\n@triton.jit\ndef k(a):\n    tl.dot(a, a, input_precision={value})\n    tl.dot(a, a, input_precision='ieee')\n    tl.dot(a, a)\n"
        )
    };
    env.write("a/pkg/k1.py", kernel("from .consts import PREC", "PREC"));
    env.write("a/pkg/k2.py", kernel("from pkg.consts import PREC", "PREC"));
    // Another corpus importing the same module path: not its own, so not resolved.
    env.write("b/pkg/k3.py", kernel("from pkg.consts import PREC as OTHER", "OTHER"));
    env.write("b/pkg/k4.py", kernel("", "\"ieee\""));
    let db = env.db();
    let db = db.to_str().expect("utf8");
    let mined = env.json(&["mine", "a", "b", "--db", db, "--min-occurrences", "1", "--min-files", "1", "--json"]);
    assert_eq!(mined["corpora"][0]["parsed"], 3, "the constants module keeps its facts: {mined}");

    let id = "py-keyword-tl-dot-input-precision";
    let p = env.json(&["catalog", "show", id, "--db", db, "--json"]);
    let values = p["values"].as_array().expect("values");
    let get = |v: &str| values.iter().find(|x| x["value"] == v).unwrap_or_else(|| panic!("{v} in {values:?}"));
    // 'ieee' and "ieee" are one value, counted over both corpora.
    assert_eq!(get("\"ieee\"")["count"], 5, "{values:?}");
    assert!(values.iter().all(|x| x["value"] != "'ieee'"), "{values:?}");
    assert!(get("\"ieee\"").get("resolved").is_none());
    let prec = get("PREC");
    assert_eq!(prec["count"], 2);
    assert_eq!(prec["resolved"], "\"tf32\" if HAS_TF32 else \"ieee\"");
    assert_eq!(prec["literals"], serde_json::json!(["\"tf32\"", "\"ieee\""]));
    let other = get("OTHER");
    assert!(other.get("resolved").is_none() && other.get("literals").is_none(), "{other}");

    let out = env.run(&["catalog", "show", id, "--db", db]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2  PREC = \"tf32\" if HAS_TF32 else \"ieee\""), "{text}");
    assert!(text.contains("1  OTHER\n"), "{text}");
}
