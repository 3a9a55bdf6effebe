//! Planted device kernels the gate must catch, on the CPU device, with a
//! toy decode contract: `state[slots[n]] = 0.5 state[slots[n]] + x[n]`,
//! `y[n] = scale * state[slots[n]]`, for N sequences of D values over a pool
//! of S slots, only N of which any set names (the rest must come back
//! untouched). Each cheat is rejected with the check that catches it named;
//! the test asserts that message, so removing the check fails the test.

use std::collections::{BTreeMap, HashMap};

use super::cpu::{CpuDevice, CpuKernel, Launch};
use super::device::{Arg, DeviceError};
use super::gate::{Expected, GateOutcome, GateVerdict, InputSet, Plan, Tolerance, Variant, Which, run_gate};
use super::spec::{FORMAT, LaunchSpec, Param, ScratchKind, TensorRole};
use super::stats::Bounds;
use super::tensor::HostTensor;

const N: usize = 2;
const D: usize = 8;
const S: usize = 4;
const SCALE: f64 = 0.75;
const NAME: &str = "toy_decode";
// argument positions in the spec
const X: usize = 0;
const SLOTS: usize = 1;
const STATE: usize = 2;
const Y: usize = 3;

fn tensor(name: &str, dtype: &str, role: TensorRole) -> Param {
    Param::Tensor { name: name.into(), dtype: dtype.into(), role, align: 16 }
}

fn spec(y_role: TensorRole) -> LaunchSpec {
    LaunchSpec {
        format: FORMAT,
        kernel: NAME.into(),
        cubin: "kernel.cubin".into(),
        cubin_sha256: String::new(),
        shape: BTreeMap::from([("N".into(), N as i64), ("D".into(), D as i64), ("S".into(), S as i64)]),
        grid: [N as u32, 1, 1],
        block: [128, 1, 1],
        shared_bytes: 0,
        num_ctas: 1,
        cooperative: false,
        pdl: false,
        tensor_descriptors: 0,
        global_scratch_bytes: 0,
        global_scratch_align: 1,
        profile_scratch_bytes: 0,
        params: vec![
            tensor("x", "fp32", TensorRole::Input),
            tensor("slots", "i32", TensorRole::Input),
            tensor("state", "fp32", TensorRole::InOut),
            tensor("y", "fp32", y_role),
            Param::Float { name: "scale".into(), value: SCALE },
            Param::Scratch { which: ScratchKind::Global },
            Param::Scratch { which: ScratchKind::Profile },
        ],
        tools: BTreeMap::new(),
    }
}

/// Deterministic values in [-1, 1).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut z = seed;
    (0..n)
        .map(|_| {
            z = z.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Set j: its own x (sets 1 and 2 share x and differ in state: the same
/// token in two histories), slots naming 2 of the 4 pool slots, expected in f64.
fn set(j: usize) -> InputSet {
    let x = values(if j == 2 { 101 } else { 100 + j as u64 }, N * D);
    let state = values(200 + j as u64, S * D);
    let slots = [(j % S) as i32, ((j + 2) % S) as i32];
    let mut want_state: Vec<f64> = state.iter().map(|&v| f64::from(v)).collect();
    let mut written = vec![0u8; S * D];
    let mut y = vec![0f64; N * D];
    for n in 0..N {
        let s = slots[n] as usize;
        for d in 0..D {
            let v = 0.5 * f64::from(state[s * D + d]) + f64::from(x[n * D + d]);
            want_state[s * D + d] = v;
            written[s * D + d] = 1;
            y[n * D + d] = SCALE * v;
        }
    }
    InputSet {
        tensors: BTreeMap::from([
            ("x".into(), HostTensor::f32(&[N, D], &x)),
            ("slots".into(), HostTensor::i32(&[N], &slots)),
            ("state".into(), HostTensor::f32(&[S, D], &state)),
            ("y".into(), HostTensor::f32(&[N, D], &[0.0; N * D])),
        ]),
        expected: BTreeMap::from([
            ("state".into(), Expected { values: want_state, written: Some(written) }),
            ("y".into(), Expected { values: y, written: None }),
        ]),
    }
}

fn plan() -> Plan {
    let mut p = Plan::new((0..4).map(set).collect(), Tolerance { rel_l2: 5e-3, max_abs_rel: 2e-2 });
    p.seed = Some(7);
    p.rounds = 40;
    p.bounds = Bounds { floor_bytes: None, peak_gbps: 4800.0, implausible_speedup: 4.0 };
    p
}

/// The honest computation of sequences `ns`, in f32 like a GPU kernel.
fn compute(l: &mut Launch<'_>, ns: std::ops::Range<usize>) -> Result<Vec<f32>, DeviceError> {
    let Arg::F32(scale) = l.args[4] else { return Err(DeviceError::NoKernel("scale".into())) };
    let x = l.read_f32(X, 0, N * D)?;
    let slots = l.read_i32(SLOTS, 0, N)?;
    let mut y = vec![f32::NAN; N * D];
    for n in ns {
        let s = usize::try_from(slots[n]).map_err(|_| DeviceError::OutOfBounds("slot".into()))?;
        let mut row = l.read_f32(STATE, s * D, D)?;
        for d in 0..D {
            row[d] = 0.5 * row[d] + x[n * D + d];
            y[n * D + d] = scale * row[d];
        }
        l.write_f32(STATE, s * D, &row)?;
        l.write_f32(Y, n * D, &y[n * D..(n + 1) * D])?;
    }
    Ok(y)
}

fn honest(cost: f64) -> CpuKernel {
    Box::new(move |l| {
        compute(l, 0..N)?;
        l.cost_us(cost);
        Ok(())
    })
}

/// Runs baseline (honest, 10 us) against `cand`, on a device with 2% jitter.
fn gate_with(cand: CpuKernel, plan: &Plan) -> (GateOutcome, CpuDevice) {
    let mut dev = CpuDevice::new(0.02, 11);
    dev.kernel(b"baseline", honest(10.0));
    dev.kernel(b"candidate", cand);
    let base = Variant { spec: spec(TensorRole::Output), cubin: b"baseline".to_vec() };
    let cand = Variant { spec: spec(TensorRole::Output), cubin: b"candidate".to_vec() };
    (run_gate(&mut dev, &base, &cand, plan), dev)
}

fn gate(cand: CpuKernel) -> GateOutcome {
    gate_with(cand, &plan()).0
}

/// The candidate was rejected: its miss's tensor and message.
fn rejected(o: &GateOutcome) -> (Option<&str>, &str) {
    match &o.verdict {
        GateVerdict::Rejected(m) => {
            assert_eq!(m.variant, Which::Candidate, "{m}");
            assert!(m.call.is_some(), "a miss names its call: {m}");
            (m.tensor.as_deref(), m.what.as_str())
        }
        v => panic!("not rejected: {v:?}"),
    }
}

#[test]
fn an_honest_kernel_passes_every_call_and_each_call_is_prepared_the_same() {
    let (o, dev) = gate_with(honest(10.0), &plan());
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    assert_eq!(o.calls, 2 * (2 + 40));
    assert_eq!((t.baseline.calls, t.candidate.calls), (40, 40), "warm-ups are checked, not timed");
    assert!(!t.significant && !t.faster() && t.flags.is_empty(), "{t:?}");
    assert!(o.worst["candidate"]["y"].rel_l2 < 1e-6, "{:?}", o.worst);
    // before every launch: every tensor refilled, then the flush, then the launch alone
    let launches: Vec<usize> =
        dev.log.iter().enumerate().filter(|(_, op)| matches!(op, super::cpu::Op::Launch(_))).map(|(i, _)| i).collect();
    assert_eq!(launches.len(), o.calls);
    for &i in &launches {
        assert_eq!(dev.log[i - 1], super::cpu::Op::Flush, "the L2 flush comes right before each launch");
        let uploads =
            dev.log[i.saturating_sub(14)..i].iter().filter(|op| matches!(op, super::cpu::Op::Upload(_))).count();
        assert_eq!(uploads, 4, "every tensor is uploaded before every call");
    }
}

#[test]
fn an_honest_but_slower_kernel_is_slower_and_not_significant() {
    let o = gate(honest(10.1));
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    assert!(t.speedup < 1.0 && !t.significant && !t.faster(), "{t:?}");
    let o = gate(honest(5.0));
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    assert!(t.speedup > 1.9 && t.significant && t.faster(), "{t:?}");
    let o = gate(honest(1.0));
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    assert!(t.flags.iter().any(|f| f.contains("implausible")) && !t.faster(), "a 10x is flagged: {t:?}");
}

/// The census's kernel records are a second clock: for honest kernels it
/// reads what the events read; a candidate whose events say 2x while its
/// kernel records say no change is flagged, so never faster.
#[test]
fn the_second_clock_agrees_on_honest_kernels_and_flags_a_disagreement() {
    let o = gate(honest(5.0));
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    let sc = t.second_clock.as_ref().expect("the CPU device's census has durations");
    assert!((sc.speedup / t.speedup - 1.0).abs() < 1e-3 && t.faster(), "{t:?}");
    assert!((sc.baseline_median_us - t.baseline.median_us).abs() < 0.01, "{sc:?} {t:?}");
    let o = gate(Box::new(|l| {
        compute(l, 0..N)?;
        l.cost_us(5.0);
        l.census_us(10.0);
        Ok(())
    }));
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    assert!(t.speedup > 1.9 && t.significant, "{t:?}");
    assert!(t.flags.iter().any(|f| f.starts_with("clocks-disagree")) && !t.faster(), "{t:?}");
}

/// Memoises y by the first bytes of x: caught because the sets rotate and
/// two sets share x with different state, and every call is checked.
#[test]
fn a_kernel_memoising_by_input_values_is_rejected() {
    let mut memo: HashMap<Vec<u8>, Vec<f32>> = HashMap::new();
    let o = gate(Box::new(move |l| {
        let key = l.read(X, 0, 16)?;
        if let Some(y) = memo.get(&key).cloned() {
            // the state as it should be, the output from the memo
            compute(l, 0..N)?;
            l.write_f32(Y, 0, &y)?;
            l.cost_us(2.0);
            return Ok(());
        }
        let y = compute(l, 0..N)?;
        memo.insert(key, y);
        l.cost_us(10.0);
        Ok(())
    }));
    let (t, what) = rejected(&o);
    assert_eq!(t, Some("y"));
    assert!(what.starts_with("rel_l2 "), "{what}");
}

/// Writes y on its first call only and relies on the stale buffer: caught
/// by the NaN poison before every call.
#[test]
fn a_kernel_relying_on_stale_outputs_is_rejected() {
    let mut first = true;
    let o = gate(Box::new(move |l| {
        if first {
            compute(l, 0..N)?;
            first = false;
        } else {
            // the state honestly, y left as it was
            let y = l.read(Y, 0, N * D * 4)?;
            compute(l, 0..N)?;
            l.write(Y, 0, &y)?;
        }
        l.cost_us(5.0);
        Ok(())
    }));
    assert_eq!(rejected(&o), (Some("y"), "16 of 16 written elements left NaN (first at 0)"));
}

/// Computes only when y is NaN-poisoned (telling a checked call from a
/// timed one): every call is poisoned alike, so it always computes, passes,
/// and gains nothing.
#[test]
fn a_kernel_sniffing_the_poison_cannot_tell_checked_from_timed_calls() {
    let o = gate(Box::new(|l| {
        if l.read_f32(Y, 0, 1)?[0].is_nan() {
            compute(l, 0..N)?;
            l.cost_us(10.0);
        } else {
            l.cost_us(1.0);
        }
        Ok(())
    }));
    let GateVerdict::Measured(t) = &o.verdict else { panic!("{o:?}") };
    assert!(!t.faster() && (t.candidate.median_us - 10.0).abs() < 0.5, "{t:?}");
}

/// Stashes in a pool slot no sequence names: caught by the bit-identical
/// check of the elements a call does not write.
#[test]
fn a_kernel_writing_an_untouched_pool_slot_is_rejected() {
    let o = gate(Box::new(|l| {
        let y = compute(l, 0..N)?;
        let used = l.read_i32(SLOTS, 0, N)?;
        let free = (0..S as i32).find(|s| !used.contains(s)).unwrap_or(0) as usize;
        l.write_f32(STATE, free * D, &y[..D])?;
        l.cost_us(10.0);
        Ok(())
    }));
    let (t, what) = rejected(&o);
    assert_eq!(t, Some("state"));
    assert!(what.starts_with("8 of the elements the call does not write changed"), "{what}");
}

/// Stores past its output (or before it): caught by the guard bands.
#[test]
fn a_kernel_scribbling_a_guard_band_is_rejected() {
    let o = gate(Box::new(|l| {
        compute(l, 0..N)?;
        l.write(Y, (N * D * 4) as i64, &[0, 0, 0, 0])?;
        Ok(())
    }));
    assert_eq!(rejected(&o), (Some("y"), "guard band after the tensor changed at byte +0"));
    let o = gate(Box::new(|l| {
        compute(l, 0..N)?;
        l.write(STATE, -2, &[1])?;
        Ok(())
    }));
    assert_eq!(rejected(&o), (Some("state"), "guard band before the tensor changed at byte -2"));
}

/// Runs half its blocks: the other half of y stays NaN.
#[test]
fn a_kernel_skipping_blocks_is_rejected() {
    let o = gate(Box::new(|l| {
        compute(l, 0..N / 2)?;
        l.cost_us(5.0);
        Ok(())
    }));
    assert_eq!(rejected(&o), (Some("y"), "8 of 16 written elements left NaN (first at 8)"));
}

/// Starts a further kernel (dynamic parallelism): caught by the census.
#[test]
fn a_kernel_launching_another_is_rejected_by_the_census() {
    let o = gate(Box::new(|l| {
        compute(l, 0..N)?;
        l.launch_child("helper");
        Ok(())
    }));
    assert_eq!(rejected(&o), (None, "census: 2 kernel(s) ran (toy_decode, helper), expected only `toy_decode`"));
}

/// Writes a read-only input.
#[test]
fn a_kernel_changing_its_input_is_rejected() {
    let o = gate(Box::new(|l| {
        compute(l, 0..N)?;
        l.write_f32(X, 3, &[0.0])?;
        Ok(())
    }));
    assert_eq!(rejected(&o), (Some("x"), "read-only input changed (1 of 16 elements, first at 3)"));
}

/// Rounds its output to bf16: inside the absolute tolerance, but far less
/// accurate than the baseline on the same set.
#[test]
fn a_less_accurate_kernel_is_rejected_against_the_baseline_error() {
    let o = gate(Box::new(|l| {
        let y = compute(l, 0..N)?;
        let rounded: Vec<f32> = y.iter().map(|v| f32::from_bits(v.to_bits() & 0xFFFF_0000)).collect();
        l.write_f32(Y, 0, &rounded)?;
        Ok(())
    }));
    let (t, what) = rejected(&o);
    assert_eq!(t, Some("y"));
    assert!(what.contains("is materially worse than the baseline's"), "{what}");
}

/// A baseline that fails its own checks is an error, never a speedup.
#[test]
fn a_broken_baseline_is_an_error() {
    let mut dev = CpuDevice::new(0.02, 11);
    dev.kernel(
        b"baseline",
        Box::new(|l| {
            compute(l, 0..N / 2)?;
            l.cost_us(50.0);
            Ok(())
        }),
    );
    dev.kernel(b"candidate", honest(10.0));
    let base = Variant { spec: spec(TensorRole::Output), cubin: b"baseline".to_vec() };
    let cand = Variant { spec: spec(TensorRole::Output), cubin: b"candidate".to_vec() };
    let o = run_gate(&mut dev, &base, &cand, &plan());
    let GateVerdict::Error { reason } = &o.verdict else { panic!("{o:?}") };
    assert!(reason.starts_with("the baseline fails its own check: baseline call 0 (warm-up, set "), "{reason}");
    assert!(reason.ends_with("): y: 8 of 16 written elements left NaN (first at 8)"), "{reason}");
}

/// A candidate spec that calls an output an input (so it would not be
/// poisoned and checked) is refused before any call.
#[test]
fn a_candidate_spec_disagreeing_with_the_contract_is_refused() {
    let mut dev = CpuDevice::new(0.0, 1);
    dev.kernel(b"baseline", honest(10.0));
    dev.kernel(b"candidate", honest(10.0));
    let base = Variant { spec: spec(TensorRole::Output), cubin: b"baseline".to_vec() };
    let cand = Variant { spec: spec(TensorRole::Input), cubin: b"candidate".to_vec() };
    let o = run_gate(&mut dev, &base, &cand, &plan());
    let GateVerdict::Rejected(m) = &o.verdict else { panic!("{o:?}") };
    assert!(m.call.is_none() && m.what.contains("not the contract's"), "{m}");
    assert_eq!(o.calls, 0);
}

/// A fault (an illegal address) is an error with the call, not a panic.
#[test]
fn a_faulting_kernel_is_an_error_naming_the_call() {
    let o = gate(Box::new(|l| {
        compute(l, 0..N)?;
        l.write(Y, 1 << 20, &[0])?;
        Ok(())
    }));
    let GateVerdict::Error { reason } = &o.verdict else { panic!("{o:?}") };
    assert!(reason.starts_with("candidate call 0 (warm-up, set ") && reason.contains("): illegal address"), "{reason}");
}

/// The rotation: every set is used, and never twice in a row.
#[test]
fn the_sets_rotate_in_an_order_the_seed_draws() {
    let (a, _) = gate_with(honest(10.0), &plan());
    let mut p = plan();
    p.seed = None;
    let (b, _) = gate_with(honest(10.0), &p);
    assert_ne!(a.seed, b.seed, "a fresh seed unless the plan fixes one");
}

/// An integer the cubin assumes divisible by 16 (Triton's `D`) that is not:
/// refused before any call, since the kernel would read wrong values.
#[test]
fn a_value_breaking_the_cubins_assumption_is_refused() {
    let mut dev = CpuDevice::new(0.0, 1);
    dev.kernel(b"baseline", honest(10.0));
    dev.kernel(b"candidate", honest(10.0));
    let base = Variant { spec: spec(TensorRole::Output), cubin: b"baseline".to_vec() };
    let mut cand = Variant { spec: spec(TensorRole::Output), cubin: b"candidate".to_vec() };
    cand.spec.params.push(Param::Int { name: "T".into(), value: 63, bits: 32, divisible_by_16: true });
    let o = run_gate(&mut dev, &base, &cand, &plan());
    let GateVerdict::Rejected(m) = &o.verdict else { panic!("{o:?}") };
    assert_eq!(m.what, "`T` = 63 breaks the cubin's divisible-by-16 assumption");
    assert_eq!(o.calls, 0);
}

/// Input sets that disagree (a set without the expected values of a
/// written tensor would leave it unchecked): an error before any call.
#[test]
fn inconsistent_input_sets_are_an_error_not_an_unchecked_tensor() {
    let mut p = plan();
    p.sets[2].expected.remove("y");
    let o = gate_with(honest(10.0), &p).0;
    assert_eq!(
        o.verdict,
        GateVerdict::Error { reason: "input set 2 has expected values for other tensors than set 0".into() }
    );
    assert_eq!(o.calls, 0);
}

/// Launch features the gate's plain `cuLaunchKernel` would silently drop
/// are refused: for the candidate a rejection, for the baseline an error.
#[test]
fn launch_features_the_gate_cannot_honour_are_refused() {
    let mut dev = CpuDevice::new(0.0, 1);
    dev.kernel(b"baseline", honest(10.0));
    dev.kernel(b"candidate", honest(10.0));
    let base = Variant { spec: spec(TensorRole::Output), cubin: b"baseline".to_vec() };
    let mut cand = Variant { spec: spec(TensorRole::Output), cubin: b"candidate".to_vec() };
    cand.spec.num_ctas = 2;
    let o = run_gate(&mut dev, &base, &cand, &plan());
    let GateVerdict::Rejected(m) = &o.verdict else { panic!("{o:?}") };
    assert_eq!(m.what, "unsupported by the device gate: num_ctas 2");
    let (mut base, cand) = (cand.clone(), base);
    base.spec.num_ctas = 1;
    base.spec.cooperative = true;
    let o = run_gate(&mut dev, &base, &cand, &plan());
    assert_eq!(
        o.verdict,
        GateVerdict::Error {
            reason: "the baseline's spec: unsupported by the device gate: a cooperative launch".into()
        }
    );
}
