//! Trust, round two (issue #22): candidates written by an attacker, through
//! `kidiom validate`, each rejected at the gate that should catch it with a
//! reason that names the class, and every escape it tries blocked: the file
//! not written, the connection not made, the process gone, the host unseen.
//!
//! | class | planted | expected |
//! |---|---|---|
//! | 1 code outside the sandbox | a decorator argument, a parameter default that run at import | static: host code, nothing written |
//! | 1 | a decorator idiom whose value is code | static: host code |
//! | 1 | a kernel body that runs a shell at compile time and at run time | static: host code in a kernel body; nothing written |
//! | 2 descendants | a detached (`setsid`) grandchild that keeps running | gone after `validate`, which ends in time |
//! | 3 confinement | a kernel body probing the host's `/dev/shm`, `/proc`, a Unix socket | static: host code in a kernel body |
//! | 3 | a host module's call: a file, TCP, a detached grandchild | correctness: the call names what it saw refused |
//! | 3 (#50 class 4) | the same in a static initializer | static: state or code outside the calls the checks see |
//! | 1 | a host module that `#include`s a file outside its directory | static: does not compile; the file's text nowhere |
//! | 4 GPU code | wrong only when `K == 128` (the GPU shapes' constexpr); wrong only under `__CUDA_ARCH__`; programs that race | correctness: the specialization, the device path, "depends on program order" |
//! | 5 drift | one ulp of growth per decode step | correctness: "drift:" |
//! | 6 sizes | the KV module skips work at the bench's page count, or copies half of a large `out` | correctness: "bench-size" |

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::project::*;

const DECODE: &str = "kernels/kda/decode.py";
const READOUT: &str = "    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)\n";
const DECAY: &str = "    b_s = b_s * tl.exp(b_g)[:, None]\n";

/// A Python expression, valid in a Triton kernel, that runs `cmd` in a shell
/// when it is compiled ahead of time and when the interpreter runs it (the
/// code generator calls what `getattr` hands it).
fn shell(cmd: &str) -> String {
    let lit = serde_json::to_string(cmd).expect("a string literal");
    format!("getattr(getattr(triton.runtime.build, \"os\"), \"system\")({lit})")
}

/// Every process whose command line contains `marker`.
fn census(marker: &str) -> Vec<(u32, String)> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(marker).then_some((pid, cmd))
        })
        .collect()
}

/// Stores a candidate of a decorator idiom whose template is `after`.
fn plant_idiom(env: &crate::util::Env, id: &str, after: &str, new: &str) {
    let provenance = serde_json::json!({"category": "specialization", "after": after});
    plant_as(env, id, "test-decorator-idiom", provenance, DECODE, new);
}

#[test]
fn candidates_that_try_to_escape_are_rejected_and_blocked() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let outside = env.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let pwned = |what: &str| outside.join(format!("pwned-{what}"));
    let marker = format!("kidiomdetached{}", std::process::id());

    // class 1: code that runs at import, in the kernel's own definition
    let jit = "@triton.jit\ndef kda_decode_kernel(";
    let touch = |what: &str| format!("__import__(\"os\").system(\"touch {}\")", pwned(what).display());
    let decorator = format!("@triton.jit(do_not_specialize={} or [])\ndef kda_decode_kernel(", touch("decorator"));
    plant(&env, "decorator-runs-at-import", "specialization", DECODE, &edit(&env, DECODE, jit, &decorator));
    let default = format!("    BV: tl.constexpr = {},\n", touch("default"));
    plant(&env, "default-runs-at-import", "other", DECODE, &edit(&env, DECODE, "    BV: tl.constexpr,\n", &default));
    // the decorator idiom (`do_not_specialize=`) may change that decorator, with literals only
    let idiom = format!("@triton.jit(do_not_specialize=[{}])\ndef kda_decode_kernel(", touch("idiom"));
    plant_idiom(&env, "idiom-value-is-code", "@triton.jit(do_not_specialize=$A)", &edit(&env, DECODE, jit, &idiom));
    plant_idiom(
        &env,
        "idiom-with-literals",
        "@triton.jit(do_not_specialize=$A)",
        &edit(&env, DECODE, jit, "@triton.jit(do_not_specialize=[\"scale\"])\ndef kda_decode_kernel("),
    );

    // classes 1-3: a kernel body that runs a shell (at compile time and under the interpreter):
    // writes outside its scratch, connects to the test's TCP listener, leaves a detached process
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let acceptor = {
        let (accepted, stop) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            while stop.load(Ordering::Relaxed) == 0 {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                        let mut b = [0u8; 16];
                        let _ = s.read(&mut b);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        })
    };
    let escape = format!(
        "touch {file}; bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'; setsid bash -c 'exec -a {marker} sleep 600' &",
        file = pwned("body").display()
    );
    let body = format!("    {}\n{DECAY}", shell(&escape));
    let wrong = format!("    b_o = b_o * 2.0\n{READOUT}");
    let escapes = edit(&env, DECODE, DECAY, &body).replace(READOUT, &wrong);
    plant(&env, "kernel-body-escapes", "math", DECODE, &escapes);

    // class 3: a kernel that is right only where it cannot see the host
    let secret = format!("/dev/shm/kidiom-secret-{}", std::process::id());
    std::fs::write(&secret, "secret").expect("write /dev/shm");
    let socket_path = std::env::temp_dir().join(format!("kidiom-sock-{}", std::process::id()));
    let _ = std::fs::remove_file(&socket_path);
    let unix = std::os::unix::net::UnixListener::bind(&socket_path).expect("unix socket");
    let mut host_proc = std::process::Command::new("bash")
        .args(["-c", &format!("exec -a {marker}host sleep 600")])
        .spawn()
        .expect("a host process to look for");
    let probe = format!(
        "test -e {secret} && exit 0; grep -qs {m}hos[t] /proc/[0-9]*/cmdline && exit 0; \
         /usr/bin/python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' {sock} \
         2>/dev/null && exit 0; exit 1",
        m = marker,
        sock = socket_path.display()
    );
    // the probe works where nothing hides the host
    let here = std::process::Command::new("sh").args(["-c", &probe]).status().expect("sh");
    assert!(here.success(), "the probe must see the host outside the sandbox");
    let seeing = format!("    _seen = {} == 0\n    if _seen:\n        b_o = b_o * 2.0\n{READOUT}", shell(&probe));
    plant(&env, "sees-the-host", "math", DECODE, &edit(&env, DECODE, READOUT, &seeing));

    let started = Instant::now();
    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    let took = started.elapsed();
    stop.store(1, Ordering::Relaxed);
    let _ = acceptor.join();
    let _ = host_proc.kill();
    let _ = host_proc.wait();
    drop(unix);
    let _ = std::fs::remove_file(&socket_path);
    let _ = std::fs::remove_file(&secret);
    eprintln!("trust suite validated in {:.1}s", took.as_secs_f64());
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {report:#}");

    for (id, gate_name, words) in [
        ("decorator-runs-at-import", "static", "the decorators of `kda_decode_kernel` (they run on the host)"),
        ("default-runs-at-import", "static", "the signature of `kda_decode_kernel`"),
        ("idiom-value-is-code", "static", "the decorators of `kda_decode_kernel`"),
        // a kernel body is device code on every branch: its shell never runs (issue #45)
        ("kernel-body-escapes", "static", "`getattr` (a host builtin), line "),
        ("sees-the-host", "static", "host code in a kernel body"),
    ] {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), gate_name.to_string()), "{id}: {ev:#}");
        let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(words), "{id}: the reason must say {words:?}: {reason}");
    }
    // the idiom itself, with a literal, is the kernel's business
    let literal = by_id(&report, "idiom-with-literals");
    assert_eq!(gate(literal, "static")["status"], "passed", "{literal:#}");
    // nothing the candidates ran reached the host
    for what in ["decorator", "default", "idiom", "body"] {
        assert!(!pwned(what).exists(), "{what}: a candidate wrote outside its sandbox");
    }
    assert_eq!(accepted.load(Ordering::Relaxed), 0, "a candidate connected to the host's loopback");
    let left = census(&marker);
    assert!(left.iter().all(|(_, c)| c.contains(&format!("{marker}host"))), "processes survived: {left:?}");
    assert!(took < Duration::from_secs(600), "validate outlived its deadline: {took:?}");
    // (what a body's host code would see inside the sandbox, had it run, is probed without the
    // static gate in front: kernels/tests/test_sandbox.py runs such bodies through the harness)
}

const KV: &str = "kernels/kv_transfer/kv_transfer.cpp";

/// A probe that tries to write outside, connect to the test's listener and
/// leave a detached grandchild, then says what it saw; run by a host module's
/// `gather` when called, or by its static initializer (`ESCAPE_AT_LOAD`).
const ESCAPE: &str = r#"
#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdexcept>
std::string escape_probe() {
    std::string seen;
    int fd = open("@FILE@", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    seen += std::string("open=") + (fd >= 0 ? "OPEN" : "refused");
    if (fd >= 0) close(fd);
    int t = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(@PORT@);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    seen += std::string(" tcp=") + (t >= 0 && connect(t, (sockaddr*)&a, sizeof a) == 0 ? "OPEN" : "refused");
    if (fork() == 0) {
        setsid();
        if (fork() == 0) {
            prctl(PR_SET_NAME, "@TOKEN@", 0, 0, 0);
            sleep(120);
        }
        _exit(0);
    }
    sleep(1);
    return seen;
}
"#;

/// The probe in a static initializer: it would run when the module loads.
const ESCAPE_AT_LOAD: &str = "namespace {\nstd::string probe_result;\nstruct Escape {\n    \
                              Escape() { probe_result = escape_probe(); }\n} escape_;\n}  // namespace\n";

/// Pids whose `comm` is `token`.
fn named(token: &str) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim() == token).then_some(pid)
        })
        .collect()
}

#[test]
fn host_module_escapes_are_rejected() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy(); // host C++ builds; nothing here is timed (all are rejected before speed)
    let env = project();
    let outside = env.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let written = outside.join("static-init");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let token = format!("kidiomsi{}", std::process::id() % 100_000);

    // class 3: what a module runs when called runs inside the sandbox
    let escape = ESCAPE
        .replace("@FILE@", &written.display().to_string())
        .replace("@PORT@", &port.to_string())
        .replace("@TOKEN@", &token);
    let with_probe = edit(&env, KV, "#include <vector>\n", &format!("#include <vector>\n{escape}"));
    let gather = "void gather(const BufferView& pool, const BufferView& page_ids, const BufferView& out) {\n";
    assert_eq!(with_probe.matches(gather).count(), 1);
    let probe =
        with_probe.replace(gather, &format!("{gather}    throw std::runtime_error(\"probe \" + escape_probe());\n"));
    plant(&env, "escapes-when-called", "concurrency", KV, &probe);
    // issue #50, class 4: what it would run when loaded is refused before it is built
    let at_load = with_probe.replace(gather, &format!("{ESCAPE_AT_LOAD}{gather}"));
    plant(&env, "static-initializer-escapes", "concurrency", KV, &at_load);
    // class 1: the build reads only the module's own directory, and its log echoes no file
    let secret = outside.join("secret.h");
    let secret_text = format!("kidiom_secret_{}", std::process::id());
    std::fs::write(&secret, format!("{secret_text} {secret_text}\n")).expect("secret");
    let include =
        edit(&env, KV, "#include <cstddef>\n", &format!("#include \"{}\"\n#include <cstddef>\n", secret.display()));
    plant(&env, "includes-a-secret", "concurrency", KV, &include);

    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    let mut connected = 0;
    while listener.accept().is_ok() {
        connected += 1;
    }
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {report:#}");
    let reason = |id: &str| by_id(&report, id)["verdict"]["reason"].as_str().unwrap_or("").to_string();
    for (id, gate_name) in [
        ("escapes-when-called", "correctness"),
        ("static-initializer-escapes", "static"),
        ("includes-a-secret", "static"),
    ] {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), gate_name.to_string()), "{id}: {ev:#}");
    }
    let probe = reason("escapes-when-called");
    assert!(probe.contains("open=refused") && probe.contains("tcp=refused"), "{probe}");
    assert!(!written.exists(), "the module wrote outside its sandbox");
    assert_eq!(connected, 0, "the module connected to the host's loopback");
    assert!(named(&token).is_empty(), "the module's grandchild survived");
    let at_load = reason("static-initializer-escapes");
    assert!(
        at_load.starts_with("state or code outside the calls the checks see: `std::string probe_result` (state kept")
            && at_load.contains("`struct Escape"),
        "{at_load}"
    );
    assert!(reason("includes-a-secret").contains("does not compile"), "{}", reason("includes-a-secret"));
    let all = report.to_string();
    assert!(!all.contains(&secret_text), "the build log echoed the secret: {all}");
}

#[test]
fn host_modules_wrong_only_at_the_bench_sizes_or_breaking_the_worker_are_rejected() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy(); // host C++ builds; nothing here is timed (all are rejected before speed)
    let env = project();
    // class 6: work skipped at the bench's sizes is caught by correctness
    let check = "    check_page_ids(page_ids, n, p.num_pages, \"gather\");\n";
    plant(
        &env,
        "skips-at-bench-count",
        "concurrency",
        KV,
        &edit(&env, KV, check, &format!("{check}    if (n == 256) return;\n")),
    );
    let copy = "    for (size_t i = 0; i < n; ++i) {\n        const uint8_t* src";
    let half = "    const size_t todo = need > (size_t(1) << 20) ? n / 2 : n;\n    for (size_t i = 0; i < todo; ++i) {\n        const uint8_t* src";
    plant(&env, "half-out-when-large", "concurrency", KV, &edit(&env, KV, copy, half));
    // class 7: a module that breaks the worker's own machinery (the output it saves) shares its
    // process: the failure is the module's, never "the harness's worker failed"
    let first = "    const PoolShape p = pool_shape(pool, \"gather\");\n";
    let breaks = format!("    py::module_::import(\"numpy\").attr(\"save\") = py::none();\n{first}");
    plant(&env, "breaks-the-workers-io", "concurrency", KV, &edit(&env, KV, first, &breaks));

    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {report:#}");
    let reason = |id: &str| by_id(&report, id)["verdict"]["reason"].as_str().unwrap_or("").to_string();
    for id in ["skips-at-bench-count", "half-out-when-large", "breaks-the-workers-io"] {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), "correctness".to_string()), "{id}: {ev:#}");
    }
    let broke = reason("breaks-the-workers-io");
    assert!(broke.contains("broke the worker's own machinery after loading the module"), "{broke}");
    for id in ["skips-at-bench-count", "half-out-when-large"] {
        assert!(reason(id).contains("bench-size"), "{id}: the reason must name the bench's sizes: {}", reason(id));
    }
}

const CUDA: &str = "kernels/kda_cuda/decode.cu";

// The candidates that would win only on a CPU, in three tests (the Triton source's in two) so that
// none is over a minute on 2 cores: each plants and validates only its own candidates, and checks
// those of the verdicts below that are theirs.
#[test]
fn triton_candidates_wrong_where_only_the_gpu_computes_are_rejected_for_their_class() {
    candidates_that_would_win_only_on_a_cpu(DECODE, |id| !ON_A_SIDE_THE_GPU_TAKES.contains(&id));
}

#[test]
fn triton_candidates_wrong_on_a_side_only_the_gpu_takes_are_rejected_for_their_class() {
    candidates_that_would_win_only_on_a_cpu(DECODE, |id| ON_A_SIDE_THE_GPU_TAKES.contains(&id));
}

#[test]
fn cuda_candidates_that_would_win_only_on_a_cpu_are_rejected_for_their_class() {
    candidates_that_would_win_only_on_a_cpu(CUDA, |_| true);
}

/// Class 5's Triton candidates (and their honest twins): a program, a size or a value range the
/// CPU's cases do not reach.
const ON_A_SIDE_THE_GPU_TAKES: &[&str] = &[
    "wrong-in-one-program",
    "compares-a-program-id",
    "clamps-the-decay",
    "past-every-cpu-grid",
    "triton-conversion-in-range",
];

/// Plants and validates the candidates below of `source` that `keep` takes.
fn candidates_that_would_win_only_on_a_cpu(source: &str, keep: fn(&str) -> bool) {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let mut planted: Vec<String> = Vec::new();
    let mut plant = |env: &crate::util::Env, id: &str, category: &str, rel: &str, new: &str| {
        if rel == source && keep(id) {
            plant(env, id, category, rel, new);
            planted.push(id.to_string());
        }
    };
    let delta = "    b_d = b_beta * (b_v - b_p)                                       # [BV]\n";
    let update = "    b_s = b_s + b_k[:, None] * b_d[None, :]\n";
    // class 4: wrong only at the GPU shapes' constexpr (K = 128)
    plant(
        &env,
        "wrong-at-gpu-constexpr",
        "math",
        DECODE,
        &edit(&env, DECODE, delta, &format!("{delta}    if K == 128:\n        b_d = b_d * 1.01\n")),
    );
    // class 4: programs that read what another program wrote
    let race =
        "    b_o0 = tl.load(o)\n    b_o = tl.where(((i_v == 0) & (i_nh == 0)) | (b_o0 == b_o0), b_o, b_o * 1.5)\n";
    plant(&env, "programs-race", "math", DECODE, &edit(&env, DECODE, READOUT, &format!("{race}{READOUT}")));
    // class 4: wrong only on the CUDA device path
    let d = "        float d = b * (v_n[j] - p);\n";
    plant(
        &env,
        "wrong-on-device-path",
        "math",
        CUDA,
        &edit(&env, CUDA, d, &format!("{d}#ifdef __CUDA_ARCH__\n        d *= 1.01f;\n#endif\n")),
    );
    // issue #45: wrong only where the host's compiler is not the one (the device), on a macro
    // NVRTC and the emulation's compiler define differently; refused before anything runs
    plant(
        &env,
        "wrong-off-the-host-compiler",
        "math",
        CUDA,
        &edit(&env, CUDA, d, &format!("{d}#ifndef __x86_64__\n        d *= 1.01f;\n#endif\n")),
    );
    // issue #50, class 4: a count kept from launch to launch, wrong only after more launches than
    // the checks make; refused before anything runs
    plant(
        &env,
        "keeps-a-count-across-launches",
        "math",
        CUDA,
        &edit(&env, CUDA, d, &format!("{d}        static int calls = 0;\n        if (++calls > 100000) d *= 1.01f;\n")),
    );
    // the same count in a device global, which lives from launch to launch on the GPU: code outside
    // the kernel, refused as such
    let global =
        format!("__device__ int launches = 0;\n{}", std::fs::read_to_string(env.path().join(CUDA)).expect("read"));
    let global = global.replacen(d, &format!("{d}        if (atomicAdd(&launches, 1) > 100000) d *= 1.01f;\n"), 1);
    plant(&env, "counts-in-a-device-global", "math", CUDA, &global);
    // class 5: one ulp of growth per step, inside every per-call margin
    let ulp = "    b_s = b_s * tl.where(o_k % 2 == 0, 1.0000001, 1.0)[:, None]\n"; // half the key channels
    plant(&env, "drifts", "math", DECODE, &edit(&env, DECODE, update, &format!("{update}{ulp}")));
    // issue #50, class 6: the device's arithmetic. `__sinf` reads x / 2 pi rounded toward zero in
    // float (far off at 2e6); a conversion past int's range saturates on the GPU (x86 gives
    // 0x80000000); Triton's `.to(tl.int32)` is the same cvt. Each was a no-op on the CPU.
    plant(
        &env,
        "fast-intrinsic-far-from-zero",
        "precision", // a fast intrinsic is a numeric change: only a precision pattern may make it
        CUDA,
        &edit(&env, CUDA, d, &format!("{d}        d *= 1.0f + (__sinf(2.0e6f) - sinf(2.0e6f));\n")),
    );
    let big = "        volatile float big = 1.0e30f * (1.0f + fabsf(b));\n";
    plant(
        &env,
        "conversion-out-of-range",
        "math",
        CUDA,
        &edit(&env, CUDA, d, &format!("{d}{big}        d *= ((int)big == 0x7fffffff) ? 0.5f : 1.0f;\n")),
    );
    let to_int = |value: &str, test: &str| {
        format!("{delta}    b_d = b_d * tl.where((b_d * 0 + {value}).to(tl.int32) {test}, 1.0, 0.5)\n")
    };
    plant(&env, "triton-conversion-out-of-range", "math", DECODE, &edit(&env, DECODE, delta, &to_int("1e30", "< 0")));
    // issue #50, class 5: wrong in one program of the GPU's grid that no CPU shape has, where a
    // sample of the specialisations' programs would miss it; its twin compares a program id honestly
    plant(
        &env,
        "wrong-in-one-program",
        "math",
        DECODE,
        &edit(&env, DECODE, delta, &format!("{delta}    if i_nh == 37:\n        b_d = b_d * 1.01\n")),
    );
    plant(
        &env,
        "compares-a-program-id",
        "math",
        DECODE,
        &edit(&env, DECODE, READOUT, &format!("    b_o = tl.where(i_nh >= 1, b_o, b_o * 1.0)\n{READOUT}")),
    );
    // class 5: right only over the decays the realistic inputs draw (> log 0.5): the contract's
    // production range goes down to -30, and call 2 of every case draws over it, ends included
    let load_g = "    b_g = tl.load(p_g, mask=m_k, other=0.).to(tl.float32)           # [BK]\n";
    plant(
        &env,
        "clamps-the-decay",
        "math",
        DECODE,
        &edit(&env, DECODE, load_g, &format!("{load_g}    b_g = tl.maximum(b_g, -0.7)\n")),
    );
    // class 5: a side only the GPU's sizes take, in CUDA (every CPU case has N <= 4; gpu[3] has 256)
    plant(
        &env,
        "past-every-cpu-size",
        "math",
        CUDA,
        &edit(&env, CUDA, d, &format!("{d}        if (N > 64) d *= 1.01f;\n")),
    );
    // class 5: a side only the GPU's grid takes (every CPU grid has fewer programs)
    plant(
        &env,
        "past-every-cpu-grid",
        "math",
        DECODE,
        &edit(&env, DECODE, delta, &format!("{delta}    if tl.num_programs(1) > 512:\n        b_d = b_d * 1.01\n")),
    );
    // their honest twins: `__expf` where exp's arguments are small, a conversion in range
    let fast_exp =
        std::fs::read_to_string(env.path().join(CUDA)).expect("read").replace("expf(g_n[i])", "__expf(g_n[i])");
    plant(&env, "fast-exp", "precision", CUDA, &fast_exp);
    // (its comparison takes both sides on the CPU, as every runtime comparison a candidate adds must)
    let in_range = format!("{delta}    b_d = b_d * tl.where((b_d * 1e3).to(tl.int32) >= 0, 1.0, 1.0)\n");
    plant(&env, "triton-conversion-in-range", "math", DECODE, &edit(&env, DECODE, delta, &in_range));

    let planted = planted;
    let ours = |id: &str| planted.iter().any(|p| p == id);
    assert!(planted.len() >= 4, "{planted:?}");
    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {report:#}");
    assert_eq!(report["candidates"].as_array().map(Vec::len), Some(planted.len()), "{report:#}");
    for (id, words) in [
        ("wrong-at-gpu-constexpr", "specialization of gpu"),
        ("programs-race", "depends on program order"),
        ("wrong-on-device-path", "__CUDA_ARCH__"),
        ("drifts", "drift:"),
        ("fast-intrinsic-far-from-zero", "rel_l2"),
        ("conversion-out-of-range", "device arithmetic the CPU cannot reproduce"),
        ("triton-conversion-out-of-range", "rel_l2"),
        ("wrong-in-one-program", "specialization of gpu"),
        ("past-every-cpu-grid", "was always false in every program of every case the CPU ran"),
        ("past-every-cpu-size", "and at the GPU's gpu[3] it takes the other side"),
        ("clamps-the-decay", "call 2 (same buffers, inputs over the contract's ranges, extremes included)"),
    ]
    .into_iter()
    .filter(|(id, _)| ours(id))
    {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), "correctness".to_string()), "{id}: {ev:#}");
        let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(words), "{id}: the reason must say {words:?}: {reason}");
    }
    if ours("counts-in-a-device-global") {
        let reason = static_refusal(&report, "counts-in-a-device-global");
        assert!(reason.contains("outside the kernel: module-level code `__device__ int launches = 0;`"), "{reason}");
    }
    if ours("keeps-a-count-across-launches") {
        let reason = static_refusal(&report, "keeps-a-count-across-launches");
        assert!(
            reason.starts_with(
                "state or code outside the launches the checks see: `static int calls` (state kept across"
            ),
            "{reason}"
        );
    }
    for id in ["fast-exp", "triton-conversion-in-range", "compares-a-program-id"].into_iter().filter(|id| ours(id)) {
        let ev = by_id(&report, id);
        assert_eq!(ev["verdict"]["kind"], "needs-gpu", "{id}: {ev:#}");
    }
    // its twin on the device path's own macro is the `wrong-on-device-path` above: past static
    if ours("wrong-off-the-host-compiler") {
        let reason = static_refusal(&report, "wrong-off-the-host-compiler");
        assert!(
            reason.starts_with(
                "not the device's code on the path the CPU runs: a preprocessor condition on `__x86_64__`"
            ) && reason.contains(CUDA),
            "{reason}"
        );
    }
}

#[test]
fn host_code_on_a_branch_only_the_cpu_takes_is_refused_at_static() {
    // Issue #45: the GPU's shapes have K = 128, the CPU's smaller ones; a branch on `K < 128` is
    // pruned from every GPU compile and run as Python by the interpreter. Host code there is
    // refused before anything runs, whatever it does; the same branch with device code is the
    // kernel's business (the honest twin passes every CPU gate).
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let outside = env.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let flag = outside.join("cpu-branch-ran");
    let branch = |body: &str| format!("    if K < 128:\n{body}{READOUT}");
    let planted = [
        (
            "cpu-branch-writes-a-file",
            format!("        open({:?}, \"w\").write(\"ran\")\n", flag.display()),
            "`open` (a host builtin)",
        ),
        (
            "cpu-branch-reads-the-environment",
            "        b_o = b_o * (1.0 + len(__import__(\"os\").environ.get(\"TRITON_INTERPRET\", \"\")))\n".to_string(),
            "`__import__` (a host builtin)",
        ),
        (
            "cpu-branch-asks-triton-where-it-runs",
            "        b_o = b_o * triton.runtime.driver.active.get_current_target().arch\n".to_string(),
            "(not triton.language)",
        ),
    ];
    for (id, body, _) in &planted {
        plant(&env, id, "math", DECODE, &edit(&env, DECODE, READOUT, &branch(body)));
    }
    // what the rules above let through but Triton's frontend does not (a list comprehension):
    // the compile of the CPU cases' own specializations refuses it
    plant(
        &env,
        "cpu-branch-python-only-the-interpreter-runs",
        "math",
        DECODE,
        &edit(&env, DECODE, READOUT, &branch("        b_o = b_o * [1.0 for _ in range(1)][0]\n")),
    );
    // device code on an arm no GPU shape reaches (theirs have K >= 96): what the CPU checks
    // there, no GPU runs
    plant(
        &env,
        "cpu-only-branch-device-code",
        "math",
        DECODE,
        &edit(&env, DECODE, READOUT, &format!("    if K < 64:\n        b_o = b_o * 1.0\n{READOUT}")),
    );
    plant(
        &env,
        "cpu-branch-device-code",
        "math",
        DECODE,
        &edit(&env, DECODE, READOUT, &branch("        b_o = b_o * 1.0\n")),
    );
    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {report:#}");
    for (id, _, construct) in &planted {
        let ev = by_id(&report, id);
        let reason = static_refusal(&report, id);
        assert!(reason.contains("host code in a kernel body: ") && reason.contains(construct), "{id}: {reason}");
        assert!(reason.contains(", line ") && reason.contains(DECODE), "{id}: names the line and file: {reason}");
        // refused before any harness ran: no correctness record
        assert!(ev["gates"].as_array().is_some_and(|g| g.iter().all(|g| g["gate"] != "correctness")), "{ev:#}");
    }
    assert!(!flag.exists(), "the CPU-only branch ran");
    let python = by_id(&report, "cpu-branch-python-only-the-interpreter-runs");
    assert_eq!(verdict(python), ("rejected".to_string(), "static".to_string()), "{python:#}");
    let reason = python["verdict"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("not Triton on the path the CPU runs: ") && reason.contains("comprehension"),
        "{reason}"
    );
    // the branch's body is the line after the `if`, which took the readout's line
    let text = std::fs::read_to_string(env.path().join(DECODE)).expect("read the decode");
    let line = text[..text.find(READOUT).expect("the readout")].lines().count() + 2;
    assert!(reason.contains(&format!(", line {line} (CPU case ")), "names the file's line {line}: {reason}");
    let only = by_id(&report, "cpu-only-branch-device-code");
    assert_eq!(verdict(only), ("rejected".to_string(), "static".to_string()), "{only:#}");
    let reason = only["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.starts_with("a branch only the CPU's shapes take: `if K < 64` (then), line "), "{reason}");
    let twin = by_id(&report, "cpu-branch-device-code");
    assert_eq!(verdict(twin).0, "needs-gpu", "device code on the same branch passes: {twin:#}");
    // its arm is in the evidence with who reaches it: every CPU case, and the GPU's K = 96 shape
    let arms = twin["gates"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["gate"] == "static"))
        .map(|g| g["metrics"]["branches"].clone())
        .unwrap_or_default();
    assert_eq!(arms[0]["test"], "K < 128", "{arms:#}");
    assert_eq!(arms[0]["cpu_cases"], serde_json::json!([0, 1, 2, 3]), "{arms:#}");
    assert_eq!(arms[0]["gpu_shapes"], serde_json::json!([2]), "{arms:#}");
    // and the reviewer reads it in the verdict's reason
    let reason = twin["verdict"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("branch `if K < 128` (then), line ") && reason.contains("GPU shapes [2]"), "{reason}");
}

/// The reason of candidate `id`'s verdict, which must be a rejection at the static gate.
fn static_refusal(report: &serde_json::Value, id: &str) -> String {
    let ev = by_id(report, id);
    assert_eq!(verdict(ev), ("rejected".to_string(), "static".to_string()), "{id}: {ev:#}");
    ev["verdict"]["reason"].as_str().unwrap_or("").to_string()
}
