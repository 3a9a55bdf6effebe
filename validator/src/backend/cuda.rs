//! The CUDA device backend (feature `cuda`): the CUDA C++ decode kernel
//! (`kernels/kda_cuda/decode.cu`) compiled with NVRTC, launched through the
//! driver API (cudarc, loaded at run time), checked against a float64
//! reference computed here in Rust, and timed with device events,
//! baseline and candidate interleaved in one process.
//!
//! Device detection never panics: [`probe`] looks for `libcuda.so` with a
//! plain `dlopen` before cudarc is touched, and every cudarc call runs
//! under `catch_unwind` (cudarc's loader panics when a library is missing).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg, sys};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use serde::{Deserialize, Serialize};

use crate::manifest::{Shape, Tolerance};

/// The GPU found by [`probe`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Its name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability.
    pub compute_capability: (i32, i32),
}

const LIBCUDA: &[&str] = &["libcuda.so.1", "libcuda.so"];

fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            Err(format!("{what}: {msg}"))
        }
    }
}

/// Whether the CUDA driver library can be loaded at all (no context is made).
pub fn driver_library() -> Result<String, String> {
    for name in LIBCUDA {
        // SAFETY: loading the CUDA driver runs its initialisers, which is
        // what any CUDA program does; nothing of it is called here.
        if unsafe { libloading::Library::new(*name) }.is_ok() {
            return Ok((*name).to_string());
        }
    }
    Err("no CUDA driver (libcuda.so) on this machine".into())
}

/// The first GPU, or why there is none. Never panics.
pub fn probe() -> Result<DeviceInfo, String> {
    driver_library()?;
    guarded("cuda", || {
        let n = CudaContext::device_count().map_err(|e| format!("cuInit/cuDeviceGetCount: {e:?}"))?;
        if n < 1 {
            return Err("the CUDA driver sees no device".into());
        }
        let ctx = CudaContext::new(0).map_err(|e| format!("creating a context: {e:?}"))?;
        Ok(DeviceInfo {
            name: ctx.name().map_err(|e| format!("{e:?}"))?,
            compute_capability: ctx.compute_capability().map_err(|e| format!("{e:?}"))?,
        })
    })
}

/// The inputs of one decode call (host side).
#[derive(Debug, Clone)]
pub struct DecodeInputs {
    /// Shape variables N, H, HV, K, V, S.
    pub dims: [usize; 6],
    /// `[N, H, K]`.
    pub q: Vec<f32>,
    /// `[N, H, K]`.
    pub k: Vec<f32>,
    /// `[N, HV, V]`.
    pub v: Vec<f32>,
    /// `[N, HV, K]`, log-space decay.
    pub g: Vec<f32>,
    /// `[N, HV]`.
    pub beta: Vec<f32>,
    /// `[S, HV, K, V]`.
    pub state: Vec<f32>,
    /// `[N]`, distinct slots.
    pub slots: Vec<i64>,
    /// `K^-1/2`.
    pub scale: f32,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64) / ((1u64 << 53) as f64)
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.next().max(1e-12), self.next());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

fn dim(shape: &Shape, k: &str) -> Result<usize, String> {
    shape.get(k).and_then(|v| usize::try_from(*v).ok()).ok_or_else(|| format!("shape lacks {k}"))
}

impl DecodeInputs {
    /// Random inputs for a decode shape (`N, H, HV, K, V, S`), as the harness makes them.
    pub fn random(shape: &Shape, seed: u64) -> Result<DecodeInputs, String> {
        let [n, h, hv, k, v, s] = ["N", "H", "HV", "K", "V", "S"].map(|x| dim(shape, x));
        let (n, h, hv, k, v, s) = (n?, h?, hv?, k?, v?, s?);
        if s < n || h == 0 || hv % h != 0 {
            return Err(format!("bad decode shape {shape:?}"));
        }
        let mut r = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
        let unit = |r: &mut Rng, len: usize, norm: usize| -> Vec<f32> {
            let mut x: Vec<f32> = (0..len).map(|_| r.normal()).collect();
            for row in x.chunks_mut(norm) {
                let l = row.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-6);
                row.iter_mut().for_each(|a| *a /= l);
            }
            x
        };
        let q = unit(&mut r, n * h * k, k);
        let kk = unit(&mut r, n * h * k, k);
        let vv = (0..n * hv * v).map(|_| r.normal()).collect();
        let g = (0..n * hv * k).map(|_| (-(0.001 + 0.1 * r.next())).ln_1p() as f32).collect();
        let beta = (0..n * hv).map(|_| (0.1 + 0.8 * r.next()) as f32).collect();
        let state = (0..s * hv * k * v).map(|_| 0.1 * r.normal()).collect();
        // distinct slots, shuffled
        let mut all: Vec<i64> = (0..s as i64).collect();
        for i in (1..all.len()).rev() {
            let j = (r.next() * (i + 1) as f64) as usize;
            all.swap(i, j.min(i));
        }
        all.truncate(n);
        Ok(DecodeInputs {
            dims: [n, h, hv, k, v, s],
            q,
            k: kk,
            v: vv,
            g,
            beta,
            state,
            slots: all,
            scale: (k as f32).powf(-0.5),
        })
    }

    /// The float64 reference: `(o [N, HV, V], state pool after the step)`.
    pub fn reference(&self) -> (Vec<f64>, Vec<f64>) {
        let [n_, h_, hv_, k_, v_, _] = self.dims;
        let mut pool: Vec<f64> = self.state.iter().map(|&x| x as f64).collect();
        let mut o = vec![0.0f64; n_ * hv_ * v_];
        for n in 0..n_ {
            let slot = self.slots[n] as usize;
            for hv in 0..hv_ {
                let h = hv / (hv_ / h_);
                let s = &mut pool[(slot * hv_ + hv) * k_ * v_..(slot * hv_ + hv + 1) * k_ * v_];
                let q = &self.q[(n * h_ + h) * k_..(n * h_ + h + 1) * k_];
                let k = &self.k[(n * h_ + h) * k_..(n * h_ + h + 1) * k_];
                let g = &self.g[(n * hv_ + hv) * k_..(n * hv_ + hv + 1) * k_];
                let v = &self.v[(n * hv_ + hv) * v_..(n * hv_ + hv + 1) * v_];
                let beta = self.beta[n * hv_ + hv] as f64;
                for i in 0..k_ {
                    let d = (g[i] as f64).exp();
                    s[i * v_..(i + 1) * v_].iter_mut().for_each(|x| *x *= d);
                }
                for j in 0..v_ {
                    let p: f64 = (0..k_).map(|i| s[i * v_ + j] * k[i] as f64).sum();
                    let d = beta * (v[j] as f64 - p);
                    let mut acc = 0.0;
                    for i in 0..k_ {
                        s[i * v_ + j] += k[i] as f64 * d;
                        acc += s[i * v_ + j] * q[i] as f64;
                    }
                    o[(n * hv_ + hv) * v_ + j] = self.scale as f64 * acc;
                }
            }
        }
        (o, pool)
    }
}

/// Relative L2 error and max abs error of `out` against `reference`; non-finite is infinite.
pub fn errors(out: &[f32], reference: &[f64]) -> (f64, f64) {
    let (mut num, mut den, mut max) = (0.0f64, 0.0f64, 0.0f64);
    for (&a, &b) in out.iter().zip(reference) {
        let d = a as f64 - b;
        if !d.is_finite() {
            return (f64::INFINITY, f64::INFINITY);
        }
        num += d * d;
        den += b * b;
        max = max.max(d.abs());
    }
    ((num / den.max(1e-300)).sqrt(), max)
}

/// A compiled decode kernel on the device.
pub struct DecodeKernel {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    block_threads: u32,
}

struct DeviceArgs {
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    g: CudaSlice<f32>,
    beta: CudaSlice<f32>,
    state: CudaSlice<f32>,
    slots: CudaSlice<i64>,
    o: CudaSlice<f32>,
}

fn e<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("{what}: {err:?}")
}

impl DecodeKernel {
    /// NVRTC-compiles `source` for compute_90 and loads `entry`.
    pub fn compile(source: &str, entry: &str, block_threads: u32) -> Result<DecodeKernel, String> {
        probe()?;
        guarded("cuda", || {
            let ctx = CudaContext::new(0).map_err(e("context"))?;
            let opts = CompileOptions { arch: Some("compute_90"), ..Default::default() };
            let ptx = compile_ptx_with_opts(source, opts).map_err(e("nvrtc"))?;
            let module = ctx.load_module(ptx).map_err(e("loading the module"))?;
            let func = module.load_function(entry).map_err(e("finding the entry point"))?;
            Ok(DecodeKernel { stream: ctx.default_stream(), func, block_threads })
        })
    }

    fn upload(&self, x: &DecodeInputs) -> Result<DeviceArgs, String> {
        let s = &self.stream;
        let [n, _, hv, _, v, _] = x.dims;
        Ok(DeviceArgs {
            q: s.clone_htod(&x.q).map_err(e("upload"))?,
            k: s.clone_htod(&x.k).map_err(e("upload"))?,
            v: s.clone_htod(&x.v).map_err(e("upload"))?,
            g: s.clone_htod(&x.g).map_err(e("upload"))?,
            beta: s.clone_htod(&x.beta).map_err(e("upload"))?,
            state: s.clone_htod(&x.state).map_err(e("upload"))?,
            slots: s.clone_htod(&x.slots).map_err(e("upload"))?,
            o: s.clone_htod(&vec![f32::NAN; n * hv * v]).map_err(e("upload"))?,
        })
    }

    fn launch(&self, a: &mut DeviceArgs, x: &DecodeInputs) -> Result<(), String> {
        let [n, h, hv, k, v, _] = x.dims;
        let int = |u: usize| i32::try_from(u).map_err(|_| format!("{u} does not fit an int"));
        let (n_i, h_i, hv_i, k_i, v_i) = (int(n)?, int(h)?, int(hv)?, int(k)?, int(v)?);
        let blocks = u32::try_from(n * hv).map_err(|_| "grid too large".to_string())?;
        let threads = u32::try_from(v).unwrap_or(u32::MAX).min(self.block_threads).max(1);
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(&self.func);
        b.arg(&a.q).arg(&a.k).arg(&a.v).arg(&a.g).arg(&a.beta).arg(&mut a.state).arg(&a.slots).arg(&mut a.o);
        b.arg(&n_i).arg(&h_i).arg(&hv_i).arg(&k_i).arg(&v_i).arg(&x.scale);
        // SAFETY: the argument list matches kda_decode_kernel's signature
        // (kernels/kda_cuda/decode.cu, frozen by its manifest) and every
        // buffer has the extent the kernel indexes for these dims.
        unsafe { b.launch(cfg) }.map_err(e("launch"))?;
        Ok(())
    }

    /// Runs one call and compares `o` and the state pool with the float64 reference.
    pub fn check(&self, x: &DecodeInputs, tol: &Tolerance) -> Result<(bool, f64, f64), String> {
        guarded("cuda", || {
            let mut a = self.upload(x)?;
            self.launch(&mut a, x)?;
            let o = self.stream.clone_dtoh(&a.o).map_err(e("download"))?;
            let state = self.stream.clone_dtoh(&a.state).map_err(e("download"))?;
            let (ro, rs) = x.reference();
            let (eo, _) = errors(&o, &ro);
            let (es, _) = errors(&state, &rs);
            Ok((eo <= tol.rel_l2 && es <= tol.rel_l2, eo, es))
        })
    }
}

/// Timing of one variant, microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Median.
    pub median_us: f64,
    /// 10th percentile.
    pub p10_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// Samples.
    pub samples: usize,
}

fn timing(mut us: Vec<f64>) -> Timing {
    us.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| us.get(((us.len() - 1) as f64 * p).round() as usize).copied().unwrap_or(f64::NAN);
    Timing { median_us: at(0.5), p10_us: at(0.1), p90_us: at(0.9), samples: us.len() }
}

/// Baseline and candidate, interleaved (ABAB, the order alternating), device events around each call.
pub fn bench_interleaved(
    base: &DecodeKernel,
    cand: &DecodeKernel,
    x: &DecodeInputs,
    warmup: usize,
    iters: usize,
) -> Result<(Timing, Timing), String> {
    guarded("cuda", || {
        let mut ab = base.upload(x)?;
        let mut ac = cand.upload(x)?;
        for _ in 0..warmup {
            base.launch(&mut ab, x)?;
            cand.launch(&mut ac, x)?;
        }
        let ctx = base.stream.context().clone();
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let (mut tb, mut tc) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
        for it in 0..iters {
            let order: [bool; 2] = if it % 2 == 0 { [true, false] } else { [false, true] };
            for is_base in order {
                let (k, a) = if is_base { (base, &mut ab) } else { (cand, &mut ac) };
                let start = ctx.new_event(flags).map_err(e("event"))?;
                let end = ctx.new_event(flags).map_err(e("event"))?;
                start.record(&k.stream).map_err(e("event"))?;
                k.launch(a, x)?;
                end.record(&k.stream).map_err(e("event"))?;
                let ms = start.elapsed_ms(&end).map_err(e("event"))?;
                if is_base { tb.push(ms as f64 * 1e3) } else { tc.push(ms as f64 * 1e3) }
            }
        }
        Ok((timing(tb), timing(tc)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(n: i64, h: i64, hv: i64, k: i64, v: i64, s: i64) -> Shape {
        [("N", n), ("H", h), ("HV", hv), ("K", k), ("V", v), ("S", s)]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b))
            .collect()
    }

    #[test]
    fn the_reference_is_the_recurrence() {
        // one sequence, one head, K = V = 1: every step by hand
        let x = DecodeInputs {
            dims: [1, 1, 1, 1, 1, 1],
            q: vec![1.0],
            k: vec![0.5],
            v: vec![2.0],
            g: vec![(0.5f32).ln()],
            beta: vec![0.25],
            state: vec![4.0],
            slots: vec![0],
            scale: 1.0,
        };
        let (o, s) = x.reference();
        // decay 4 -> 2; p = 1; d = 0.25 * (2 - 1) = 0.25; S = 2 + 0.125; o = S
        assert!((s[0] - 2.125).abs() < 1e-6, "{s:?}");
        assert!((o[0] - 2.125).abs() < 1e-6, "{o:?}");
        let r = DecodeInputs::random(&shape(3, 2, 4, 24, 20, 7), 1).unwrap();
        let mut slots = r.slots.clone();
        slots.sort();
        slots.dedup();
        assert_eq!(slots.len(), 3);
        assert!(DecodeInputs::random(&shape(3, 2, 3, 8, 8, 7), 1).is_err());
        assert_eq!(errors(&[1.0, f32::NAN], &[1.0, 1.0]).0, f64::INFINITY);
    }

    #[test]
    fn probe_never_panics_and_gpu_checks_skip_without_one() {
        let info = match probe() {
            Ok(i) => i,
            Err(reason) => {
                eprintln!("skipping the CUDA device test: {reason}");
                return;
            }
        };
        eprintln!("device: {info:?}");
        let src =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../kernels/kda_cuda/decode.cu")).unwrap();
        let kern = DecodeKernel::compile(&src, "kda_decode_kernel", 128).unwrap();
        let tol = Tolerance { rel_l2: 5e-3, slice_rel_l2: 1e-2, max_abs_rel: 2e-2 };
        let x = DecodeInputs::random(&shape(4, 2, 4, 128, 128, 6), 7).unwrap();
        let (ok, eo, es) = kern.check(&x, &tol).unwrap();
        assert!(ok, "o {eo:e}, state {es:e}");
        let (b, c) = bench_interleaved(&kern, &kern, &x, 3, 10).unwrap();
        assert_eq!((b.samples, c.samples), (10, 10));
    }
}
