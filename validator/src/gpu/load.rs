//! Reading a spec directory (layout in [`super::spec`]): `launch.json` and
//! the cubin as a [`Variant`], the input sets and expected values as
//! [`InputSet`]s. The `.npy` files are read here (format 1.0 to 3.0, C
//! order, little-endian): a file that does not say exactly what the spec
//! expects (element type, size, order) is refused with its path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::gate::{Expected, InputSet, Variant};
use super::spec::{FORMAT, LaunchSpec, Param, TensorRole};
use super::tensor::{Dtype, HostTensor};

/// A spec directory could not be read as one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file could not be read.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (in the message, so not also a `source()`).
        cause: std::io::Error,
    },
    /// A file is not what the spec needs.
    #[error("{path}: {why}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

fn bad(path: &Path, why: impl Into<String>) -> LoadError {
    LoadError::Bad { path: path.to_path_buf(), why: why.into() }
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|cause| LoadError::Io { path: path.to_path_buf(), cause })
}

/// `launch.json` and its cubin.
pub fn variant(dir: &Path) -> Result<Variant, LoadError> {
    let path = dir.join("launch.json");
    let spec: LaunchSpec = serde_json::from_slice(&read(&path)?).map_err(|e| bad(&path, e.to_string()))?;
    if spec.format != FORMAT {
        return Err(bad(&path, format!("format {} (this kidiom reads {FORMAT})", spec.format)));
    }
    let name = Path::new(&spec.cubin);
    if name.components().count() != 1 || name.is_absolute() {
        return Err(bad(&path, format!("cubin `{}` is not a file name in the spec's directory", spec.cubin)));
    }
    let cubin = read(&dir.join(name))?;
    Ok(Variant { spec, cubin })
}

/// The input sets `inputs/set<j>/` (j = 0, 1, ... while present) with
/// their expected values from `expected/set<j>/`, for the tensors of `spec`.
pub fn sets(dir: &Path, spec: &LaunchSpec) -> Result<Vec<InputSet>, LoadError> {
    let mut out = Vec::new();
    for j in 0.. {
        let inputs = dir.join("inputs").join(format!("set{j}"));
        if !inputs.is_dir() {
            break;
        }
        let expected = dir.join("expected").join(format!("set{j}"));
        let mut set = InputSet { tensors: BTreeMap::new(), expected: BTreeMap::new() };
        for p in &spec.params {
            let Param::Tensor { name, dtype, role, .. } = p else { continue };
            let path = inputs.join(format!("{name}.npy"));
            let want =
                Dtype::parse(dtype).ok_or_else(|| bad(&path, format!("element type `{dtype}` is not supported")))?;
            let t = npy(&path, Some(want))?;
            if *role != TensorRole::Input {
                let path = expected.join(format!("{name}.npy"));
                let e = npy(&path, Some(Dtype::F64))?;
                if e.len() != t.len() {
                    return Err(bad(&path, format!("{} expected values for a tensor of {}", e.len(), t.len())));
                }
                let values =
                    e.bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
                let mask = expected.join(format!("{name}.written.npy"));
                let written = match (*role, mask.is_file()) {
                    (TensorRole::InOut, true) => {
                        let m = npy(&mask, Some(Dtype::U8))?;
                        if m.len() != t.len() {
                            return Err(bad(&mask, format!("a mask of {} for a tensor of {}", m.len(), t.len())));
                        }
                        Some(m.bytes)
                    }
                    _ => None,
                };
                set.expected.insert(name.clone(), Expected { values, written });
            }
            set.tensors.insert(name.clone(), t);
        }
        out.push(set);
    }
    if out.is_empty() {
        return Err(bad(&dir.join("inputs"), "no input sets (inputs/set0/ is missing)"));
    }
    Ok(out)
}

/// Reads a `.npy` file; with `want`, its element type must be that one
/// (bf16 is stored as 2-byte raw bits: `<u2`, `<i2` or `|V2`).
pub fn npy(path: &Path, want: Option<Dtype>) -> Result<HostTensor, LoadError> {
    let raw = read(path)?;
    let (descr, shape, data) = parse_npy(&raw).map_err(|why| bad(path, why))?;
    let dtype = match (descr.as_str(), want) {
        ("<u2" | "<i2" | "|V2", Some(Dtype::Bf16)) => Dtype::Bf16,
        ("<f4", _) => Dtype::F32,
        ("<f2", _) => Dtype::F16,
        ("<f8", _) => Dtype::F64,
        ("|i1", _) => Dtype::I8,
        ("|u1" | "|b1", _) => Dtype::U8,
        ("<i4", _) => Dtype::I32,
        ("<i8", _) => Dtype::I64,
        (d, _) => return Err(bad(path, format!("element type `{d}` is not supported"))),
    };
    if want.is_some_and(|w| w != dtype) {
        return Err(bad(path, format!("holds `{descr}`, the spec says {want:?}")));
    }
    let n: usize = shape.iter().product();
    if data.len() != n * dtype.size() {
        return Err(bad(path, format!("{} data bytes for shape {shape:?} of `{descr}`", data.len())));
    }
    Ok(HostTensor { dtype, shape, bytes: data.to_vec() })
}

/// (descr, shape, data) of a `.npy` image.
fn parse_npy(raw: &[u8]) -> Result<(String, Vec<usize>, &[u8]), String> {
    if raw.len() < 10 || &raw[..6] != b"\x93NUMPY" {
        return Err("not a .npy file".into());
    }
    let (len, start) = match raw[6] {
        1 => (usize::from(u16::from_le_bytes([raw[8], raw[9]])), 10),
        2 | 3 if raw.len() >= 12 => (u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]) as usize, 12),
        v => return Err(format!(".npy format {v} is not supported")),
    };
    let header = raw.get(start..start + len).ok_or("the header runs past the file")?;
    let header = std::str::from_utf8(header).map_err(|_| "the header is not text")?;
    let field = |key: &str| -> Result<&str, String> {
        let at = header.find(&format!("'{key}':")).ok_or(format!("no `{key}` in the header"))?;
        Ok(header[at + key.len() + 3..].trim_start())
    };
    let descr = field("descr")?;
    let descr = descr.strip_prefix('\'').and_then(|d| d.split('\'').next()).ok_or("`descr` is not a string")?;
    if !field("fortran_order")?.starts_with("False") {
        return Err("Fortran order is not supported".into());
    }
    let shape = field("shape")?;
    let shape = shape.strip_prefix('(').and_then(|s| s.split(')').next()).ok_or("`shape` is not a tuple")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>().map_err(|_| format!("shape entry `{s}`")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((descr.to_string(), shape, &raw[start + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy_bytes(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((h.len() as u16).to_le_bytes());
        out.extend(h.as_bytes());
        out.extend(data);
        out
    }

    #[test]
    fn npy_files_read_as_what_they_say_and_anything_else_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.npy");
        let vals: Vec<u8> = [1.5f32, -2.0, 3.0, 0.25, 8.0, 9.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(&f, npy_bytes("<f4", "(2, 3)", &vals)).unwrap();
        let t = npy(&f, Some(Dtype::F32)).unwrap();
        assert_eq!((t.shape.clone(), t.len(), Dtype::F32.get(&t.bytes, 1)), (vec![2, 3], 6, -2.0));
        let e = npy(&f, Some(Dtype::F64)).unwrap_err().to_string();
        assert!(e.ends_with("holds `<f4`, the spec says Some(F64)"), "{e}");
        std::fs::write(&f, npy_bytes("<f4", "(2, 4)", &vals)).unwrap();
        assert!(npy(&f, None).unwrap_err().to_string().contains("24 data bytes for shape [2, 4]"));
        std::fs::write(&f, npy_bytes(">f4", "(6,)", &vals)).unwrap();
        assert!(npy(&f, None).unwrap_err().to_string().contains("`>f4` is not supported"));
        std::fs::write(&f, b"\x93NUMPY\x01\x00\xff\xff").unwrap();
        assert!(npy(&f, None).unwrap_err().to_string().contains("runs past the file"));
        std::fs::write(&f, npy_bytes("<u2", "()", &[0x80, 0x3F])).unwrap();
        let t = npy(&f, Some(Dtype::Bf16)).unwrap();
        assert_eq!((t.shape.len(), Dtype::Bf16.get(&t.bytes, 0)), (0, 1.0), "bf16 as raw bits");
    }

    #[test]
    fn a_spec_directory_reads_as_a_variant_and_its_sets() {
        use super::super::spec::ScratchKind;
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        let spec = serde_json::json!({
            "format": 1, "kernel": "k", "cubin": "kernel.cubin", "cubin_sha256": "",
            "shape": {"N": 2}, "grid": [1, 1, 1], "block": [128, 1, 1], "shared_bytes": 0, "num_ctas": 1,
            "params": [
                {"kind": "tensor", "name": "x", "dtype": "fp32", "role": "input", "align": 16},
                {"kind": "tensor", "name": "s", "dtype": "fp32", "role": "in_out", "align": 16},
                {"kind": "scratch", "which": "global"},
            ]
        });
        std::fs::write(p.join("launch.json"), spec.to_string()).unwrap();
        std::fs::write(p.join("kernel.cubin"), b"\x7fELF").unwrap();
        let v = variant(p).unwrap();
        assert_eq!((v.spec.kernel.as_str(), v.cubin.len()), ("k", 4));
        assert!(matches!(v.spec.params[2], Param::Scratch { which: ScratchKind::Global }));
        assert!(sets(p, &v.spec).unwrap_err().to_string().contains("no input sets"));
        let f4: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let f8: Vec<u8> = [1.0f64, 5.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        for j in 0..2 {
            let (i, e) = (p.join(format!("inputs/set{j}")), p.join(format!("expected/set{j}")));
            std::fs::create_dir_all(&i).unwrap();
            std::fs::create_dir_all(&e).unwrap();
            std::fs::write(i.join("x.npy"), npy_bytes("<f4", "(2,)", &f4)).unwrap();
            std::fs::write(i.join("s.npy"), npy_bytes("<f4", "(2,)", &f4)).unwrap();
            std::fs::write(e.join("s.npy"), npy_bytes("<f8", "(2,)", &f8)).unwrap();
            std::fs::write(e.join("s.written.npy"), npy_bytes("|u1", "(2,)", &[0, 1])).unwrap();
        }
        let s = sets(p, &v.spec).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[1].expected["s"], Expected { values: vec![1.0, 5.0], written: Some(vec![0, 1]) });
        assert!(!s[0].expected.contains_key("x"), "inputs have no expected values");
        // a cubin outside the directory is refused
        std::fs::write(p.join("launch.json"), spec.to_string().replace("kernel.cubin", "../x.cubin")).unwrap();
        assert!(variant(p).unwrap_err().to_string().contains("is not a file name in the spec's directory"));
    }
}
