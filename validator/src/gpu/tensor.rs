//! Host-side tensors of the GPU gate: element types, the poison a written
//! tensor gets before every call, and the error metrics of the harness's
//! check (`kernels/harness/triton/check.py`: relative L2 and max-abs relative
//! to the reference's largest magnitude).

use serde::{Deserialize, Serialize};

/// An element type, as a launch spec names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// `fp32`.
    F32,
    /// `fp16`.
    F16,
    /// `bf16`.
    Bf16,
    /// `fp64`.
    F64,
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
}

impl Dtype {
    /// From a spec's dtype name (`fp32`, `f32`, `bf16`, `i32`, ...).
    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "fp32" | "f32" | "float32" => Dtype::F32,
            "fp16" | "f16" | "float16" => Dtype::F16,
            "bf16" | "bfloat16" => Dtype::Bf16,
            "fp64" | "f64" | "float64" => Dtype::F64,
            "i8" | "int8" => Dtype::I8,
            "u8" | "uint8" | "i1" | "bool" => Dtype::U8,
            "i32" | "int32" => Dtype::I32,
            "i64" | "int64" => Dtype::I64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F64 | Dtype::I64 => 8,
        }
    }

    /// A floating-point type (one that can be poisoned with NaN).
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::F64)
    }

    /// The bytes of one poisoned element: a quiet NaN for floats, `0xA5` bytes for integers.
    pub fn poison(self) -> Vec<u8> {
        match self {
            Dtype::F32 => 0x7FC0_0000u32.to_le_bytes().to_vec(),
            Dtype::F16 => 0x7E00u16.to_le_bytes().to_vec(),
            Dtype::Bf16 => 0x7FC0u16.to_le_bytes().to_vec(),
            Dtype::F64 => 0x7FF8_0000_0000_0000u64.to_le_bytes().to_vec(),
            _ => vec![0xA5; self.size()],
        }
    }

    /// Element `i` of `bytes` as f64.
    pub fn get(self, bytes: &[u8], i: usize) -> f64 {
        let s = self.size();
        let Some(b) = bytes.get(i * s..(i + 1) * s) else { return f64::NAN };
        let mut w = [0u8; 8];
        w[..s].copy_from_slice(b);
        match self {
            Dtype::F32 => f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]])),
            Dtype::F16 => f64::from(f16_to_f32(u16::from_le_bytes([w[0], w[1]]))),
            Dtype::Bf16 => f64::from(f32::from_bits(u32::from(u16::from_le_bytes([w[0], w[1]])) << 16)),
            Dtype::F64 => f64::from_le_bytes(w),
            Dtype::I8 => f64::from(w[0] as i8),
            Dtype::U8 => f64::from(w[0]),
            Dtype::I32 => f64::from(i32::from_le_bytes([w[0], w[1], w[2], w[3]])),
            Dtype::I64 => i64::from_le_bytes(w) as f64,
        }
    }
}

fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1F);
    let frac = f32::from(h & 0x3FF);
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 if frac == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

/// A tensor's bytes on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// The elements, little-endian, C order.
    pub bytes: Vec<u8>,
}

impl HostTensor {
    /// A tensor of f32 values.
    pub fn f32(shape: &[usize], vals: &[f32]) -> HostTensor {
        HostTensor {
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            bytes: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// A tensor of i32 values.
    pub fn i32(shape: &[usize], vals: &[i32]) -> HostTensor {
        HostTensor {
            dtype: Dtype::I32,
            shape: shape.to_vec(),
            bytes: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// Its number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Errors of a written tensor against its float64 expected values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Errors {
    /// `||out - ref|| / ||ref||` (infinite with any non-finite element).
    #[serde(deserialize_with = "super::stats::figure")]
    pub rel_l2: f64,
    /// `max |out - ref|`.
    #[serde(deserialize_with = "super::stats::figure")]
    pub max_abs: f64,
    /// `max |out - ref| / max |ref|`.
    #[serde(deserialize_with = "super::stats::figure")]
    pub max_abs_rel: f64,
}

impl Errors {
    /// The worse of two, metric by metric.
    pub fn max(self, o: Errors) -> Errors {
        Errors {
            rel_l2: self.rel_l2.max(o.rel_l2),
            max_abs: self.max_abs.max(o.max_abs),
            max_abs_rel: self.max_abs_rel.max(o.max_abs_rel),
        }
    }
}

/// The errors of `got` against `want` over the element pairs given.
pub fn errors(pairs: impl Iterator<Item = (f64, f64)>) -> Errors {
    let (mut d2, mut r2, mut dmax, mut rmax, mut finite) = (0.0f64, 0.0f64, 0.0f64, 0.0f64, true);
    for (got, want) in pairs {
        let d = got - want;
        if !d.is_finite() {
            finite = false;
        }
        d2 += d * d;
        r2 += want * want;
        dmax = dmax.max(d.abs());
        rmax = rmax.max(want.abs());
    }
    let d = if finite { d2.sqrt() } else { f64::INFINITY };
    let dmax = if finite { dmax } else { f64::INFINITY };
    Errors { rel_l2: d / r2.sqrt().max(1e-30), max_abs: dmax, max_abs_rel: dmax / rmax.max(1e-30) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_decode_from_every_type() {
        assert_eq!(Dtype::F16.get(&0x3C00u16.to_le_bytes(), 0), 1.0);
        assert_eq!(Dtype::F16.get(&0xC000u16.to_le_bytes(), 0), -2.0);
        assert_eq!(Dtype::Bf16.get(&0x3F80u16.to_le_bytes(), 0), 1.0);
        assert_eq!(Dtype::I32.get(&(-7i32).to_le_bytes(), 0), -7.0);
        for d in [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::F64] {
            assert!(d.get(&d.poison(), 0).is_nan(), "{d:?}");
        }
        assert!(Dtype::F32.get(&[0, 0], 0).is_nan(), "a short buffer reads as NaN, never a panic");
    }

    #[test]
    fn errors_are_the_harness_metrics_and_non_finite_is_infinite() {
        let e = errors([(1.0, 1.0), (2.5, 2.0)].into_iter());
        assert!((e.rel_l2 - 0.5 / 5f64.sqrt()).abs() < 1e-12);
        assert_eq!((e.max_abs, e.max_abs_rel), (0.5, 0.25));
        assert_eq!(errors([(f64::NAN, 1.0)].into_iter()).rel_l2, f64::INFINITY);
    }
}
