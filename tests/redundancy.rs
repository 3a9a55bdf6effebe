//! Redundant work removed (issue #24): the built-in loop reuse on a CUDA
//! decode of our own, written here (two passes over the state column, the
//! second evaluating `expf` again and reading the state again, then reading
//! what it stored), through `kidiom apply` and the gates on this CPU; and a
//! planted wrong reuse (the state kept across the store that changes it)
//! rejected at correctness.

use crate::project::*;

/// Our own CUDA KDA decode step (the kda_cuda.decode contract): one block
/// per (sequence, value head), one thread per value column.
const DECODE: &str = r#"// a test's own KDA decode: predict, then update and read out
extern "C" __global__ void kda_decode_kernel(
    const float* q, const float* k, const float* v, const float* g, const float* beta,
    float* state, const long long* slots, float* o,
    int N, int H, int HV, int K, int V, float scale)
{
    int nh = blockIdx.x;
    if (nh >= N * HV) {
        return;
    }
    int n = nh / HV, hv = nh % HV, h = hv / (HV / H);
    const float* qn = q + (n * H + h) * K;
    const float* kn = k + (n * H + h) * K;
    const float* gn = g + (n * HV + hv) * K;
    float* s = state + (slots[n] * HV + hv) * K * V;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = 0.0f;
        for (int i = 0; i < K; ++i) {
            float decay = expf(gn[i]);
            p += decay * s[i * V + j] * kn[i];
        }
        float d = beta[n * HV + hv] * (v[(n * HV + hv) * V + j] - p);
        float acc = 0.0f;
        for (int i = 0; i < K; ++i) {
            s[i * V + j] = expf(gn[i]) * s[i * V + j] + kn[i] * d;
            acc += s[i * V + j] * qn[i];
        }
        o[(n * HV + hv) * V + j] = scale * acc;
    }
}
"#;

const CU: &str = "kernels/kda_cuda/decode.cu";

#[test]
fn the_loop_reuse_on_a_cuda_decode_of_our_own_passes_and_a_reuse_across_a_store_is_rejected() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    env.write(CU, DECODE);
    // any mined catalog carries the built-in patterns
    let up = env.write("upstream/empty.py", "x = 1\n");
    mine_upstream_dir(&env, up.parent().expect("dir"));
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let listed = env.json(&["catalog", "list", "--category", "redundancy", "--db", dbs, "--json"]);
    let ids: Vec<&str> = listed.as_array().expect("list").iter().filter_map(|p| p["id"].as_str()).collect();
    assert!(ids.contains(&"cu-reuse-across-loops") && ids.contains(&"cu-reuse-across-loops-shared"), "{ids:?}");

    let applied = env.json(&["apply", CU, "--category", "redundancy", "--db", dbs, "--json"]);
    let cands = applied["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 2, "{applied:#}");
    for c in cands {
        let diff = c["diff"].as_str().expect("diff");
        // the first loop's values kept; the read after the store is not the kept value
        assert!(diff.contains("kept_expf_gn_i") && diff.contains("kept_s_i_V_j"), "{diff}");
        assert!(!diff.contains("-            acc += s[i * V + j] * qn[i];"), "the read after the store stays: {diff}");
    }
    let shared = cands.iter().find(|c| c["pattern_id"] == "cu-reuse-across-loops-shared").expect("shared");
    assert!(shared["diff"].as_str().expect("diff").contains("__syncthreads();"));

    // the state column kept from the first loop, read back after the second loop overwrote it
    let wrong =
        edit(&env, CU, "p += decay * s[i * V + j] * kn[i];", "p += decay * (kept_s[i] = s[i * V + j]) * kn[i];");
    let wrong = wrong
        .replace("        float p = 0.0f;\n", "        float p = 0.0f;\n        float kept_s[128];\n")
        .replace("acc += s[i * V + j] * qn[i];", "acc += (K <= 128 ? kept_s[i] : s[i * V + j]) * qn[i];");
    plant(&env, "reuse-across-store", "redundancy", CU, &wrong);

    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "300"]);
    for c in cands {
        let ev = by_id(&report, c["id"].as_str().expect("id"));
        assert_eq!(verdict(ev), ("needs-gpu".to_string(), "-".to_string()), "{ev:#}");
        let correctness = gate(ev, "correctness");
        assert_eq!(correctness["status"], "passed", "{ev:#}");
        assert!(correctness["summary"].as_str().unwrap_or("").contains("(emulation)"), "{correctness:#}");
        // the second read of the state is gone from the counted work, and the prediction says so
        // (the read after the store stays: a later form, not this one)
        let p = &ev["prediction"];
        assert_eq!(p["reread_bytes"][1], 0, "{p:#}");
        assert!(p["traffic_ratio"][1].as_f64() < p["traffic_ratio"][0].as_f64(), "{p:#}");
        assert!(p["speedup"].as_f64().expect("speedup") > 1.2, "{p:#}");
    }
    let ev = by_id(&report, "reuse-across-store");
    assert_eq!(verdict(ev), ("rejected".to_string(), "correctness".to_string()), "{ev:#}");
}

/// Our own first-version CUDA decode (kernels/kda_cuda/decode.cu), as `kidiom run` meets it:
/// both reuse forms pass correctness under the emulation, move at most 1.05x the floor's bytes,
/// evaluate `expf` N*HV*K*V times (thread-local) or N*HV*K times (shared), and are predicted
/// at least 1.4x faster on the H200.
#[test]
fn our_cuda_decode_reads_its_state_once_and_evaluates_each_exp_once() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let up = env.write("upstream/empty.py", "x = 1\n");
    mine_upstream_dir(&env, up.parent().expect("dir"));
    let db = env.db();
    let applied = env.json(&["apply", CU, "--category", "redundancy", "--db", db.to_str().expect("utf8"), "--json"]);
    let cands = applied["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 2, "{applied:#}");
    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "300"]);
    // the manifest's bench shape: N = 64, HV = 32, K = V = 128
    let (n_hv_k, n_hv_k_v) = (64 * 32 * 128u64, 64 * 32 * 128 * 128u64);
    for c in cands {
        let ev = by_id(&report, c["id"].as_str().expect("id"));
        assert_eq!(verdict(ev).0, "needs-gpu", "{ev:#}");
        assert_eq!(gate(ev, "correctness")["status"], "passed", "{ev:#}");
        let p = &ev["prediction"];
        assert!(p["traffic_ratio"][1].as_f64().expect("ratio") <= 1.05, "{p:#}");
        assert!(p["speedup"].as_f64().expect("speedup") >= 1.4, "{p:#}");
        let totals = &gate(ev, "static")["metrics"]["prediction"]["profile"]["candidate"]["totals"];
        let special = totals["special_calls"].as_u64().expect("special calls");
        let most = if c["pattern_id"] == "cu-reuse-across-loops-shared" { n_hv_k } else { n_hv_k_v };
        assert!(special <= most, "{special} > {most}: {totals:#}");
    }
}

/// Our own Triton KDA decode step (the kda.decode contract; the launcher and
/// public function stay the repository's): each pass over the state loads
/// it again and evaluates `exp(g)` again, loads `k` twice, then reads back
/// the state it stored for the output.
const TRITON_DECODE: &str = r#"@triton.jit
def kda_decode_kernel(
    q, k, v, g, beta, state, slots, o, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
):
    # a test's own decode: predict from the decayed state, then update it, then read it back
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_s = m_k[:, None] & m_v[None, :]
    i_slot = tl.load(slots + i_n)
    p_k = k + (i_n * H + i_h) * K + o_k
    p_s = state + ((i_slot * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
    b_g = tl.load(g + (i_n * HV + i_hv) * K + o_k, mask=m_k, other=0.).to(tl.float32)
    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)
    b_v = tl.load(v + (i_n * HV + i_hv) * V + o_v, mask=m_v, other=0.).to(tl.float32)
    b_p = tl.sum(tl.load(p_s, mask=m_s, other=0.) * tl.exp(b_g)[:, None] * tl.load(p_k, mask=m_k, other=0.)[:, None], axis=0)
    b_d = b_beta * (b_v - b_p)
    b_s = tl.load(p_s, mask=m_s, other=0.) * tl.exp(b_g)[:, None] + tl.load(p_k, mask=m_k, other=0.)[:, None] * b_d[None, :]
    tl.store(p_s, b_s, mask=m_s)
    b_q = tl.load(q + (i_n * H + i_h) * K + o_k, mask=m_k, other=0.).to(tl.float32) * scale
    b_o = tl.sum(tl.load(p_s, mask=m_s, other=0.) * b_q[:, None], axis=0)
    tl.store(o + (i_n * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


"#;

const PY: &str = "kernels/kda/decode.py";

/// The block reuse on a Triton decode of our own: the state, `k` and `exp(g)`
/// of the predict pass kept for the update (the state read back after its
/// store is not), correctness passed under the interpreter, fewer re-read
/// bytes and special calls in the counted work; and the state kept across
/// the store (a planted wrong reuse) rejected at correctness.
#[test]
fn the_block_reuse_on_a_triton_decode_of_our_own_passes_and_a_reuse_across_a_store_is_rejected() {
    let Some(py) = python() else { return };
    let _cpu = crate::util::cpu_heavy();
    let env = project();
    let ours = read(&env, PY);
    let (start, end) =
        (ours.find("@triton.jit").expect("kernel"), ours.find("def kda_decode_launch").expect("launcher"));
    env.write(PY, format!("{}{TRITON_DECODE}{}", &ours[..start], &ours[end..]));
    let up = env.write("upstream/empty.py", "x = 1\n");
    mine_upstream_dir(&env, up.parent().expect("dir"));
    let db = env.db();
    let dbs = db.to_str().expect("utf8");
    let found = env.json(&["catalog", "search", "evaluates exp twice", "--db", dbs, "--json"]);
    assert!(found.to_string().contains("py-reuse-in-block"), "{found:#}");

    let applied = env.json(&["apply", PY, "--category", "redundancy", "--db", dbs, "--json"]);
    let cands = applied["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "{applied:#}");
    let diff = cands[0]["diff"].as_str().expect("diff");
    for kept in [
        "+    kept_load_p_s = tl.load(p_s, mask=m_s, other=0.)",
        "+    kept_exp_b_g = tl.exp(b_g)",
        "+    kept_load_p_k = tl.load(p_k, mask=m_k, other=0.)",
    ] {
        assert!(diff.contains(kept), "{kept}: {diff}");
    }
    // the read after the store stays a read
    assert!(!diff.contains("-    b_o = "), "{diff}");

    let wrong = edit(
        &env,
        PY,
        "    b_o = tl.sum(tl.load(p_s, mask=m_s, other=0.) * b_q[:, None], axis=0)",
        "    b_o = tl.sum(b_s0 * b_q[:, None], axis=0)",
    )
    .replace(
        "    b_d = b_beta * (b_v - b_p)\n",
        "    b_d = b_beta * (b_v - b_p)\n    b_s0 = tl.load(p_s, mask=m_s, other=0.)\n",
    );
    plant(&env, "triton-reuse-across-store", "redundancy", PY, &wrong);

    let (report, _) = validate(&env, &py, &["--pending", "--seeds", "1", "--timeout", "300"]);
    let ev = by_id(&report, cands[0]["id"].as_str().expect("id"));
    assert_eq!(verdict(ev), ("needs-gpu".to_string(), "-".to_string()), "{ev:#}");
    let correctness = gate(ev, "correctness");
    assert_eq!(correctness["status"], "passed", "{ev:#}");
    let p = &ev["prediction"];
    let (base, cand) = (&p["reread_bytes"][0], &p["reread_bytes"][1]);
    assert!(cand.as_u64() < base.as_u64(), "re-read bytes {base} -> {cand}: {p:#}");
    let special = |side: &str| {
        gate(ev, "static")["metrics"]["prediction"]["profile"][side]["totals"]["special_calls"]
            .as_u64()
            .expect("special calls")
    };
    assert_eq!(special("candidate") * 2, special("baseline"), "exp once instead of twice");
    let ev = by_id(&report, "triton-reuse-across-store");
    assert_eq!(verdict(ev), ("rejected".to_string(), "correctness".to_string()), "{ev:#}");
}
