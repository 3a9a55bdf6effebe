//! The GPU gate's orchestration, on any [`Device`]: baseline and candidate
//! each get their own buffers with guard bands; before every call, untimed,
//! the next input set of a rotation drawn by the gate's own RNG (seeded here,
//! after the specs are frozen) is uploaded, outputs are poisoned with NaN,
//! in/out tensors reset to the set's input, guards restored and L2 flushed;
//! then the launch alone is timed. Calls alternate ABBA. After every call,
//! warm-up calls included, every buffer comes back to the host and is
//! checked there against float64 expected values that never reach the
//! device: outputs and written in/out elements within the tolerances and
//! not materially worse than the baseline's own error on the same set,
//! unwritten in/out elements and read-only inputs bit-identical, guard bands
//! intact, no NaN left, and exactly the spec's kernel in the census.
//!
//! **Invariant:** there is no separate checking run. The calls that are
//! timed are the calls that are checked, prepared identically, so a kernel
//! cannot tell one from the other.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::device::{Arg, BufferId, Device, DeviceError, KernelId};
use super::spec::{LaunchSpec, Param, ScratchKind, TensorRole};
use super::stats::{self, Bounds, Timing};
use super::tensor::{Dtype, Errors, HostTensor, errors};

/// One input set: every tensor parameter's contents before the call, and
/// the float64 expected values of every written tensor (trusted side only).
#[derive(Debug, Clone, PartialEq)]
pub struct InputSet {
    /// By the contract's tensor name (outputs too: their shape and type).
    pub tensors: BTreeMap<String, HostTensor>,
    /// By tensor name, for every `output` and `in_out` tensor.
    pub expected: BTreeMap<String, Expected>,
}

/// Expected values of a written tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// One per element, float64.
    pub values: Vec<f64>,
    /// For an `in_out` tensor: 1 where the call writes; elsewhere the tensor
    /// must come back bit-identical to its input. `None`: every element.
    pub written: Option<Vec<u8>>,
}

/// One kernel to run: its spec and its device code.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// The launch spec.
    pub spec: LaunchSpec,
    /// The cubin's bytes.
    pub cubin: Vec<u8>,
}

/// The manifest's tolerances (the harness's names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative L2 error, every written tensor.
    pub rel_l2: f64,
    /// Max-abs error relative to the reference's largest magnitude.
    pub max_abs_rel: f64,
}

/// How the gate runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The input sets, rotated.
    pub sets: Vec<InputSet>,
    /// Absolute tolerances.
    pub tolerance: Tolerance,
    /// Warm-up rounds (checked, not timed); each round calls both variants.
    pub warmup: usize,
    /// Timed rounds.
    pub rounds: usize,
    /// Guard band before and after each tensor, bytes (a multiple of 256).
    pub guard_bytes: usize,
    /// A candidate's error may be at most `accuracy_factor` times the
    /// baseline's on the same set, plus `accuracy_slack` (the harness's
    /// `BASELINE_FACTOR` and `BASELINE_FLOOR`).
    pub accuracy_factor: f64,
    /// See `accuracy_factor`.
    pub accuracy_slack: f64,
    /// What the timing is judged against.
    pub bounds: Bounds,
    /// The RNG's seed; `None` draws one (the normal case: after the specs are frozen).
    pub seed: Option<u64>,
}

impl Plan {
    /// A plan with the harness's defaults: 2 warm-up rounds, 20 timed, 1 KiB
    /// guards, factor 2 and slack 1e-7, an H200's peak, 4x implausible.
    pub fn new(sets: Vec<InputSet>, tolerance: Tolerance) -> Plan {
        Plan {
            sets,
            tolerance,
            warmup: 2,
            rounds: 20,
            guard_bytes: 1024,
            accuracy_factor: 2.0,
            accuracy_slack: 1e-7,
            bounds: Bounds { floor_bytes: None, peak_gbps: 4800.0, implausible_speedup: 4.0 },
            seed: None,
        }
    }
}

/// Which variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    /// The kernel the candidate replaces.
    Baseline,
    /// The rewrite.
    Candidate,
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Which::Baseline => "baseline",
            Which::Candidate => "candidate",
        })
    }
}

/// The call a miss happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    /// The variant's call index, from 0 (warm-ups first).
    pub index: usize,
    /// A warm-up call.
    pub warmup: bool,
    /// The input set.
    pub set: usize,
}

/// A check that failed: what, where and in which call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// Whose call.
    pub variant: Which,
    /// The call; `None` for a refusal before any call.
    pub call: Option<Call>,
    /// The tensor, when one is at fault.
    pub tensor: Option<String>,
    /// What was wrong.
    pub what: String,
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.variant)?;
        if let Some(c) = self.call {
            write!(f, " call {} ({}set {})", c.index, if c.warmup { "warm-up, " } else { "" }, c.set)?;
        }
        f.write_str(": ")?;
        if let Some(t) = &self.tensor {
            write!(f, "{t}: ")?;
        }
        f.write_str(&self.what)
    }
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GateVerdict {
    /// Every call of both variants passed every check: the timing.
    Measured(Timing),
    /// The candidate failed a check (correctness): the call and the reason.
    Rejected(Miss),
    /// The gate could not judge (the baseline failed its own checks, a device error).
    Error {
        /// Why.
        reason: String,
    },
    /// No GPU to run on: nothing was judged.
    NeedsGpu {
        /// What is missing.
        reason: String,
    },
}

/// What the gate did and found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateOutcome {
    /// The answer.
    pub verdict: GateVerdict,
    /// The RNG seed of the set order and the guard pattern.
    pub seed: u64,
    /// The device, in words.
    pub device: String,
    /// Calls made, both variants.
    pub calls: usize,
    /// Per variant and written tensor, the worst errors over its calls.
    pub worst: BTreeMap<String, BTreeMap<String, Errors>>,
    /// What was not observed (a census without CUPTI), and the like.
    pub notes: Vec<String>,
    /// The sha256 of each variant's cubin (`baseline`, `candidate`), as
    /// checked against its spec; empty when none was read.
    #[serde(default)]
    pub cubins: BTreeMap<String, String>,
}

impl GateOutcome {
    /// No device: `needs-gpu` with the reason, nothing run.
    pub fn needs_gpu(reason: impl Into<String>) -> GateOutcome {
        GateOutcome {
            verdict: GateVerdict::NeedsGpu { reason: reason.into() },
            seed: 0,
            device: "none".into(),
            calls: 0,
            worst: BTreeMap::new(),
            notes: Vec::new(),
            cubins: BTreeMap::new(),
        }
    }
}

/// A tensor's place in a variant's buffers.
struct Slot {
    name: String,
    role: TensorRole,
    dtype: Dtype,
    buf: BufferId,
    len: usize,
}

/// One variant, loaded and laid out.
struct Loaded {
    which: Which,
    kernel: KernelId,
    name: String,
    slots: Vec<Slot>,
    args: Vec<Arg>,
    calls: usize,
    us: Vec<f64>,
    /// The timed calls by the census's clock (CUPTI), where it has one.
    census_us: Vec<f64>,
}

/// Runs the gate: see the module doc. Never panics on anything the device,
/// the specs or the kernels do.
pub fn run_gate<D: Device + ?Sized>(
    device: &mut D,
    baseline: &Variant,
    candidate: &Variant,
    plan: &Plan,
) -> GateOutcome {
    let seed = plan.seed.unwrap_or_else(fresh_seed);
    let mut out = GateOutcome {
        verdict: GateVerdict::Error { reason: String::new() },
        seed,
        device: device.describe(),
        calls: 0,
        worst: BTreeMap::new(),
        notes: Vec::new(),
        cubins: [(Which::Baseline, baseline), (Which::Candidate, candidate)]
            .into_iter()
            .map(|(w, v)| (w.to_string(), v.spec.cubin_sha256.clone()))
            .collect(),
    };
    out.verdict = match run(device, baseline, candidate, plan, seed, &mut out) {
        Ok(t) => GateVerdict::Measured(t),
        Err(Stop::Miss(m)) if m.variant == Which::Candidate => GateVerdict::Rejected(m),
        Err(Stop::Miss(m)) => GateVerdict::Error { reason: format!("the baseline fails its own check: {m}") },
        Err(Stop::Error(reason)) => GateVerdict::Error { reason },
    };
    out
}

enum Stop {
    Miss(Miss),
    Error(String),
}

fn dev(what: &str) -> impl Fn(DeviceError) -> Stop + '_ {
    move |e| Stop::Error(format!("{what}: {e}"))
}

fn run<D: Device + ?Sized>(
    device: &mut D,
    baseline: &Variant,
    candidate: &Variant,
    plan: &Plan,
    seed: u64,
    out: &mut GateOutcome,
) -> Result<Timing, Stop> {
    let Some(first) = plan.sets.first() else { return Err(Stop::Error("the plan has no input sets".into())) };
    if !plan.guard_bytes.is_multiple_of(256) {
        return Err(Stop::Error(format!("guard band of {} bytes is not a multiple of 256", plan.guard_bytes)));
    }
    consistent_sets(&plan.sets)?;
    let roles = tensor_roles(&baseline.spec);
    let cand_roles = tensor_roles(&candidate.spec);
    if cand_roles != roles {
        return Err(Stop::Miss(Miss {
            variant: Which::Candidate,
            call: None,
            tensor: None,
            what: format!("its spec's tensors {cand_roles:?} are not the contract's {roles:?}"),
        }));
    }
    let mut rng = Rng(seed);
    let guard = (rng.next() as u32) | 1;
    let mut vars = [
        load(device, Which::Baseline, baseline, first, plan)?,
        load(device, Which::Candidate, candidate, first, plan)?,
    ];
    let order = rotation(&mut rng, plan.sets.len(), plan.warmup + plan.rounds);
    let mut census_noted = false;
    for (round, &set) in order.iter().enumerate() {
        let warmup = round < plan.warmup;
        let seq = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut errs: [BTreeMap<String, Errors>; 2] = [BTreeMap::new(), BTreeMap::new()];
        for i in seq {
            let v = &mut vars[i];
            let call = Call { index: v.calls, warmup, set };
            v.calls += 1;
            out.calls += 1;
            let miss = |tensor: Option<&str>, what: String| {
                Stop::Miss(Miss { variant: v.which, call: Some(call), tensor: tensor.map(String::from), what })
            };
            let inputs = &plan.sets[set];
            prepare(device, v, inputs, plan.guard_bytes, guard)?;
            device.flush_l2().map_err(dev("flushing L2"))?;
            device.census().map_err(dev("the census"))?;
            let ms = device.timed_launch(v.kernel, &v.args).map_err(|e| {
                let w = if warmup { "warm-up, " } else { "" };
                Stop::Error(format!("{} call {} ({w}set {set}): {e}", v.which, call.index))
            })?;
            match device.census().map_err(dev("the census"))? {
                Some(ran) if ran.len() != 1 || ran[0].name != v.name => {
                    let names: Vec<&str> = ran.iter().map(|r| r.name.as_str()).collect();
                    let what = format!(
                        "census: {} kernel(s) ran ({}), expected only `{}`",
                        ran.len(),
                        names.join(", "),
                        v.name
                    );
                    return Err(miss(None, what));
                }
                Some(ran) => {
                    if let (false, Some(ns)) = (warmup, ran[0].ns) {
                        v.census_us.push(ns as f64 / 1000.0);
                    }
                }
                None if !census_noted => {
                    census_noted = true;
                    out.notes.push("kernel census not observed on this device (CUPTI not available)".into());
                }
                None => {}
            }
            errs[i] = check(device, v, inputs, plan, guard).map_err(|e| match e {
                Fault::Device(e) => Stop::Error(format!("reading back {} call {}: {e}", v.which, call.index)),
                Fault::Miss(t, w) => miss(t.as_deref(), w),
            })?;
            let worst = out.worst.entry(v.which.to_string()).or_default();
            for (t, e) in &errs[i] {
                let w = worst.entry(t.clone()).or_insert(*e);
                *w = w.max(*e);
            }
            if !warmup {
                v.us.push(ms * 1000.0);
            }
        }
        // not materially less accurate than the baseline on the same set
        for (t, c) in &errs[1] {
            let Some(b) = errs[0].get(t) else { continue };
            for (label, c, b) in [("rel_l2", c.rel_l2, b.rel_l2), ("max_abs_rel", c.max_abs_rel, b.max_abs_rel)] {
                if b.is_finite() && c > plan.accuracy_factor * b + plan.accuracy_slack {
                    let call = Call { index: vars[1].calls - 1, warmup, set };
                    return Err(Stop::Miss(Miss {
                        variant: Which::Candidate,
                        call: Some(call),
                        tensor: Some(t.clone()),
                        what: format!(
                            "{label} {c:.3e} is materially worse than the baseline's {b:.3e} on the same set"
                        ),
                    }));
                }
            }
        }
    }
    let mut timing = stats::compare(&vars[0].us, &vars[1].us, &plan.bounds);
    let [b, c] = &vars;
    // the second clock only where it saw every timed call of both
    if b.census_us.len() == b.us.len() && c.census_us.len() == c.us.len() && !b.us.is_empty() {
        stats::second_clock(&mut timing, &b.census_us, &c.census_us);
    } else if !b.us.is_empty() {
        out.notes.push("no second clock: the census recorded no kernel durations".into());
    }
    Ok(timing)
}

/// Every set has the same tensors, types and sizes; every written tensor has expected values of its length.
fn consistent_sets(sets: &[InputSet]) -> Result<(), Stop> {
    let Some(first) = sets.first() else { return Ok(()) };
    for (j, s) in sets.iter().enumerate() {
        for (name, t) in &s.tensors {
            match first.tensors.get(name) {
                Some(f) if f.dtype == t.dtype && f.bytes.len() == t.bytes.len() => {}
                _ => return Err(Stop::Error(format!("input set {j}: tensor `{name}` differs from set 0's"))),
            }
            if let Some(e) = s.expected.get(name) {
                let masked = e.written.as_ref().is_some_and(|w| w.len() != t.len());
                if e.values.len() != t.len() || masked {
                    return Err(Stop::Error(format!(
                        "input set {j}: expected `{name}` does not have the tensor's {} elements",
                        t.len()
                    )));
                }
            }
        }
        if !s.expected.keys().eq(first.expected.keys()) {
            return Err(Stop::Error(format!("input set {j} has expected values for other tensors than set 0")));
        }
        if s.tensors.len() != first.tensors.len() {
            return Err(Stop::Error(format!("input set {j} has other tensors than set 0")));
        }
    }
    Ok(())
}

fn tensor_roles(spec: &LaunchSpec) -> BTreeMap<String, (TensorRole, String)> {
    spec.params
        .iter()
        .filter_map(|p| match p {
            Param::Tensor { name, dtype, role, .. } => Some((name.clone(), (*role, dtype.clone()))),
            _ => None,
        })
        .collect()
}

/// What this gate cannot launch as the spec asks (it launches with plain
/// `cuLaunchKernel`: no clusters, cooperative grids, PDL or TMA descriptors).
fn unsupported(spec: &LaunchSpec) -> Option<String> {
    if spec.num_ctas != 1 {
        return Some(format!("num_ctas {}", spec.num_ctas));
    }
    if spec.cooperative || spec.pdl {
        return Some(if spec.cooperative { "a cooperative launch" } else { "programmatic dependent launch" }.into());
    }
    if spec.tensor_descriptors > 0 {
        return Some(format!("{} host-side TMA descriptors", spec.tensor_descriptors));
    }
    if spec.profile_scratch_bytes > 0 {
        return Some(format!("{} bytes of profile scratch", spec.profile_scratch_bytes));
    }
    None
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Loads a variant's kernel and lays out its buffers: `guard | tensor (rounded to 256) | guard`.
fn load<D: Device + ?Sized>(
    device: &mut D,
    which: Which,
    v: &Variant,
    set: &InputSet,
    plan: &Plan,
) -> Result<Loaded, Stop> {
    let refuse = |what: String| match which {
        Which::Candidate => Stop::Miss(Miss { variant: which, call: None, tensor: None, what }),
        Which::Baseline => Stop::Error(format!("the baseline's spec: {what}")),
    };
    if let Some(what) = unsupported(&v.spec) {
        return Err(refuse(format!("unsupported by the device gate: {what}")));
    }
    let kernel =
        device.load(&v.spec, &v.cubin).map_err(|e| Stop::Error(format!("loading the {which}'s kernel: {e}")))?;
    let (mut slots, mut args) = (Vec::<Slot>::new(), Vec::new());
    for p in &v.spec.params {
        let arg = match p {
            Param::Tensor { name, dtype, role, .. } => {
                let Some(t) = set.tensors.get(name) else {
                    return Err(refuse(format!("tensor `{name}` is not in the input sets")));
                };
                if Dtype::parse(dtype) != Some(t.dtype) {
                    return Err(refuse(format!("tensor `{name}` is {dtype}; the input sets hold {:?}", t.dtype)));
                }
                if *role != TensorRole::Input && !set.expected.contains_key(name) {
                    return Err(Stop::Error(format!("no expected values for the written tensor `{name}`")));
                }
                let buf = match slots.iter().find(|s| s.name == *name) {
                    Some(s) => s.buf,
                    None => {
                        let bytes = plan.guard_bytes * 2 + round_up(t.bytes.len().max(1), 256);
                        let buf = device.alloc(bytes).map_err(dev("allocating"))?;
                        slots.push(Slot { name: name.clone(), role: *role, dtype: t.dtype, buf, len: t.bytes.len() });
                        buf
                    }
                };
                Arg::Ptr { buf, offset: plan.guard_bytes }
            }
            Param::Int { name, value, divisible_by_16: true, .. } if value % 16 != 0 => {
                return Err(refuse(format!("`{name}` = {value} breaks the cubin's divisible-by-16 assumption")));
            }
            Param::Int { name, value, bits, .. } => match bits {
                32 => Arg::I32(
                    i32::try_from(*value).map_err(|_| refuse(format!("`{name}` = {value} does not fit 32 bits")))?,
                ),
                64 => Arg::I64(*value),
                b => return Err(refuse(format!("`{name}` is a {b}-bit integer"))),
            },
            Param::Float { value, .. } => Arg::F32(*value as f32),
            Param::Scratch { which: ScratchKind::Global } if v.spec.global_scratch_bytes > 0 => {
                let programs: u64 =
                    v.spec.grid.iter().map(|&g| u64::from(g)).product::<u64>() * u64::from(v.spec.num_ctas.max(1));
                let bytes = usize::try_from(programs * v.spec.global_scratch_bytes)
                    .map_err(|_| refuse("global scratch does not fit this machine's address space".into()))?;
                Arg::Ptr { buf: device.alloc(bytes).map_err(dev("allocating scratch"))?, offset: 0 }
            }
            Param::Scratch { .. } => Arg::Null,
        };
        args.push(arg);
    }
    Ok(Loaded {
        which,
        kernel,
        name: v.spec.kernel.clone(),
        slots,
        args,
        calls: 0,
        us: Vec::new(),
        census_us: Vec::new(),
    })
}

/// Before a call: guards restored, inputs and in/out tensors uploaded from the set, outputs poisoned.
fn prepare<D: Device + ?Sized>(
    device: &mut D,
    v: &Loaded,
    set: &InputSet,
    guard: usize,
    word: u32,
) -> Result<(), Stop> {
    for s in &v.slots {
        let Some(t) = set.tensors.get(&s.name) else { continue };
        let body = round_up(s.len.max(1), 256);
        device.fill(s.buf, 0, guard / 4, word).map_err(dev("restoring a guard band"))?;
        device.fill(s.buf, guard + body, guard / 4, word).map_err(dev("restoring a guard band"))?;
        // the tensor, then guard bytes to the 256-byte boundary
        let mut image = match s.role {
            TensorRole::Input | TensorRole::InOut => t.bytes.clone(),
            TensorRole::Output => s.dtype.poison().repeat(t.len()),
        };
        image.extend(word.to_le_bytes().iter().cycle().skip(s.len % 4).take(body - s.len));
        device.upload(s.buf, guard, &image).map_err(dev("uploading an input set"))?;
    }
    Ok(())
}

enum Fault {
    Device(DeviceError),
    Miss(Option<String>, String),
}

/// After a call: every buffer back on the host and checked, the most
/// telling failure first (guards, read-only inputs, stray writes, NaN left,
/// then the tolerances). Returns the errors of every written tensor.
fn check<D: Device + ?Sized>(
    device: &mut D,
    v: &Loaded,
    set: &InputSet,
    plan: &Plan,
    word: u32,
) -> Result<BTreeMap<String, Errors>, Fault> {
    let g = plan.guard_bytes;
    let mut backs = Vec::with_capacity(v.slots.len());
    for s in &v.slots {
        let mut back = vec![0u8; 2 * g + round_up(s.len.max(1), 256)];
        device.download(s.buf, 0, &mut back).map_err(Fault::Device)?;
        backs.push(back);
    }
    let miss = |s: &Slot, what: String| Fault::Miss(Some(s.name.clone()), what);
    let pattern = |i: usize| word.to_le_bytes()[i % 4];
    for (s, back) in v.slots.iter().zip(&backs) {
        if let Some(i) = (0..g).find(|&i| back[i] != pattern(i)) {
            return Err(miss(s, format!("guard band before the tensor changed at byte {}", i as i64 - g as i64)));
        }
        if let Some(i) = (g + s.len..back.len()).find(|&i| back[i] != pattern(i - g)) {
            return Err(miss(s, format!("guard band after the tensor changed at byte +{}", i - g - s.len)));
        }
    }
    // (slot, bytes back, its input, its expected values)
    let mut checked = Vec::new();
    for (s, back) in v.slots.iter().zip(&backs) {
        let Some(t) = set.tensors.get(&s.name) else { continue };
        checked.push((s, &back[g..g + s.len], t, set.expected.get(&s.name)));
    }
    // an output is written everywhere (it was poisoned); an in/out tensor where its mask says
    let written = |s: &Slot, e: Option<&Expected>, i: usize| {
        e.is_some_and(|e| {
            s.role == TensorRole::Output || e.written.as_ref().is_none_or(|w| w.get(i).is_some_and(|&b| b != 0))
        })
    };
    for &(s, got, t, e) in &checked {
        let es = s.dtype.size();
        let changed: Vec<usize> = (0..t.len())
            .filter(|&i| !written(s, e, i) && got[i * es..(i + 1) * es] != t.bytes[i * es..(i + 1) * es])
            .collect();
        let Some(first) = changed.first() else { continue };
        let what = match s.role {
            TensorRole::Input => {
                format!("read-only input changed ({} of {} elements, first at {first})", changed.len(), t.len())
            }
            _ => format!("{} of the elements the call does not write changed (first at {first})", changed.len()),
        };
        return Err(miss(s, what));
    }
    for &(s, got, t, e) in &checked {
        let Some(e) = e else { continue };
        let idx: Vec<usize> = (0..t.len()).filter(|&i| written(s, Some(e), i)).collect();
        let nan: Vec<usize> =
            idx.iter().copied().filter(|&i| s.dtype.get(got, i).is_nan() && !e.values[i].is_nan()).collect();
        if let Some(first) = nan.first() {
            return Err(miss(
                s,
                format!("{} of {} written elements left NaN (first at {first})", nan.len(), idx.len()),
            ));
        }
    }
    let mut out = BTreeMap::new();
    for &(s, got, t, e) in &checked {
        let Some(e) = e else { continue };
        let err = errors((0..t.len()).filter(|&i| written(s, Some(e), i)).map(|i| (s.dtype.get(got, i), e.values[i])));
        let tol = plan.tolerance;
        if !within(err.rel_l2, tol.rel_l2) {
            return Err(miss(s, format!("rel_l2 {:.3e} > {:.1e}", err.rel_l2, tol.rel_l2)));
        }
        if !within(err.max_abs_rel, tol.max_abs_rel) {
            return Err(miss(s, format!("max_abs_rel {:.3e} > {:.1e}", err.max_abs_rel, tol.max_abs_rel)));
        }
        out.insert(s.name.clone(), err);
    }
    Ok(out)
}

/// `x` is at most `tol` (NaN is not).
fn within(x: f64, tol: f64) -> bool {
    x <= tol
}

/// The set of each round: shuffled passes over all sets, never the same set twice in a row when there are two or more.
fn rotation(rng: &mut Rng, sets: usize, rounds: usize) -> Vec<usize> {
    let mut order = Vec::with_capacity(rounds + sets);
    while order.len() < rounds {
        let mut pass: Vec<usize> = (0..sets).collect();
        for i in (1..sets).rev() {
            pass.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        if sets > 1 && order.last() == pass.first() {
            pass.swap(0, 1);
        }
        order.extend(pass);
    }
    order.truncate(rounds);
    order
}

/// splitmix64: the gate's own RNG, not a candidate's business.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A seed nobody chose: the OS's per-process hash keys and the clock.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    h.write_u128(nanos);
    h.finish()
}
