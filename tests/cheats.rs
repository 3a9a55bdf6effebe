//! Planted cheats, as an attacker would write them, each through
//! `kidiom validate` and rejected at the gate that should catch it, with the
//! reason. The harness's own suite (kernels/tests/test_cheats.py) plants more
//! at the level of one `check`; these are the verdicts a reviewer reads.
//!
//! | cheat | gate |
//! |---|---|
//! | the kernel writes into an input | correctness: "input v was modified" |
//! | the state rounded to bf16 with bit operations, no flag | correctness: "materially worse than the baseline" |
//! | the launcher computes with numpy / caches outputs / zeroes an input | static: host code is contract |
//! | the KV module skips its copies at the bench's batch size | correctness: its cases include the bench's sizes |

use std::time::Instant;

use crate::project::*;

const DECODE: &str = "kernels/kda/decode.py";
const KV: &str = "kernels/kv_transfer/kv_transfer.cpp";

#[test]
fn planted_cheats_are_rejected_at_the_gate_that_should_catch_them() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy(); // nothing timed: every cheat is rejected before the speed gate
    let env = project();
    let beta = "    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)";
    plant(
        &env,
        "kernel-writes-input",
        "memory",
        DECODE,
        &edit(&env, DECODE, beta, &format!("    tl.store(p_v, b_v * 0., mask=m_v)\n{beta}")),
    );
    let update = "    b_s = b_s + b_k[:, None] * b_d[None, :]\n";
    let bf16 = "    b_s = ((b_s.to(tl.uint32, bitcast=True) + 0x8000) & 0xFFFF0000).to(tl.float32, bitcast=True)\n";
    plant(&env, "bf16-state", "math", DECODE, &edit(&env, DECODE, update, &format!("{update}{bf16}")));
    let launch = "    kda_decode_kernel[grid](";
    let numpy = "    import numpy as _np\n    o.numpy()[...] = _np.zeros(o.shape, _np.float32)\n    return o\n";
    plant(&env, "launcher-numpy", "other", DECODE, &edit(&env, DECODE, launch, &format!("{numpy}{launch}")));
    let public = "\ndef kda_decode(q, k, v, g, beta, state, slots, o, scale=None):\n";
    let cache = format!(
        "\n_SEEN = {{}}\n{public}    if o.data_ptr() in _SEEN:\n        return o\n    _SEEN[o.data_ptr()] = True\n"
    );
    plant(&env, "launcher-cache", "other", DECODE, &edit(&env, DECODE, public, &cache));
    let gather = "    const size_t n = id_count(page_ids, \"gather\");\n";
    let skip = format!("{gather}    if (n == 256) return;  // the bench's batch: nothing is checked there\n");
    plant(&env, "bench-detect", "concurrency", KV, &edit(&env, KV, gather, &skip));

    let started = Instant::now();
    let (report, out) = validate(&env, &py, &["--pending", "--seeds", "1", "--no-consistency", "--timeout", "600"]);
    eprintln!("cheat suite validated in {:.1}s", started.elapsed().as_secs_f64());
    assert_eq!(out.status.code(), Some(1), "rejections exit 1: {report:#}");
    let expect = [
        ("kernel-writes-input", "correctness", "input v was modified"),
        ("bf16-state", "correctness", "materially worse than the baseline"),
        ("launcher-numpy", "static", "host code"),
        ("launcher-cache", "static", "host code"),
        ("bench-detect", "correctness", "bench-size"),
    ];
    for (id, gate_name, words) in expect {
        let ev = by_id(&report, id);
        assert_eq!(verdict(ev), ("rejected".to_string(), gate_name.to_string()), "{id}: {ev:#}");
        let reason = ev["verdict"]["reason"].as_str().unwrap_or("");
        assert!(reason.contains(words), "{id}: the reason must say {words:?}: {reason}");
        // a later gate never ran
        let ran: Vec<&str> = ev["gates"].as_array().into_iter().flatten().filter_map(|g| g["gate"].as_str()).collect();
        assert_eq!(ran.last(), Some(&gate_name), "{id}: {ran:?}");
    }
}
