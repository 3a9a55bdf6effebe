//! Trust, round two (issue #22): candidates written by an attacker, through
//! `kidiom validate`, each rejected at the gate that should catch it with a
//! reason that names the class, and every escape it tries blocked: the file
//! not written, the connection not made, the process gone, the host unseen.
//!
//! | class | planted | expected |
//! |---|---|---|
//! | 1 code outside the sandbox | a decorator argument, a parameter default that run at import | static: host code, nothing written |
//! | 1 | a decorator idiom whose value is code | static: host code |
//! | 1 | a kernel body that runs a shell at compile time and at run time | rejected on its outputs; nothing written |
//! | 2 descendants | a detached (`setsid`) grandchild that keeps running | gone after `validate`, which ends in time |
//! | 3 confinement | TCP to a listener of the test; the host's `/dev/shm`, `/proc`, a Unix socket | no connection; nothing seen |

use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kidiom_patterns::{Candidate, CandidateStatus, Catalog};

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

/// Stores a candidate like [`plant`], with `after` as its pattern's template.
fn plant_idiom(env: &crate::util::Env, id: &str, after: &str, new: &str) {
    let old = read(env, DECODE);
    let cat = Catalog::open(&env.db()).expect("catalog");
    cat.put_candidate(&Candidate {
        id: id.into(),
        pattern_id: "test-decorator-idiom".into(),
        path: DECODE.into(),
        base_blob: kidiom_miner::blob_id(old.as_bytes()),
        result_blob: kidiom_miner::blob_id(new.as_bytes()),
        value: None,
        sites: 1,
        diff: kidiom_rewriter::unified(DECODE, &old, new, 3),
        status: CandidateStatus::Proposed,
        provenance: serde_json::json!({"category": "specialization", "after": after}),
        evidence: serde_json::json!({}),
        commit_id: None,
        created_at: String::new(),
        updated_at: String::new(),
    })
    .expect("put");
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
        ("kernel-body-escapes", "correctness", "o:"),
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
    let seen = by_id(&report, "sees-the-host");
    assert_eq!(verdict(seen).0, "needs-gpu", "the sandbox let the candidate see the host: {seen:#}");
}
