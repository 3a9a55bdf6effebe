//! Kernel manifests: the frozen contract next to each kernel
//! (`kernels/*/*.toml`, format 1, documented in kernels/README.md).
//!
//! The validator reads them from the *baseline* tree only. A rewrite may
//! change a kernel's source file; every other file under `kernels/` (the
//! manifests, the float64 references, the host launchers, the harness, the
//! tests) is contract, and a rewrite touching one is rejected.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The language a kernel is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelLanguage {
    /// A `@triton.jit` function in a Python file.
    Triton,
    /// An `extern "C" __global__` function in a CUDA C++ file.
    Cuda,
    /// Host C++ (a pybind11 module, `entry` its name): runs and is timed on any CPU.
    Cpp,
}

/// One shape of the matrix: shape variables to sizes (`{B = 1, T = 45, ...}`).
pub type Shape = BTreeMap<String, i64>;

/// The tolerances a kernel's outputs must meet against float64.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// Relative L2 error of every whole output.
    pub rel_l2: f64,
    /// Relative L2 error of the worst slice (sequence x value head).
    pub slice_rel_l2: f64,
    /// Max absolute error over the max absolute reference value.
    pub max_abs_rel: f64,
}

/// The shape matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shapes {
    /// Shapes checked on a CPU (under the interpreter).
    pub cpu: Vec<Shape>,
    /// Shapes checked on a GPU.
    pub gpu: Vec<Shape>,
    /// The shape benchmarked (and compiled ahead of time).
    pub bench: Shape,
}

/// The error-versus-length curve of a prefill kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// Shape variables other than `T`.
    pub base: Shape,
    /// Lengths on a CPU.
    #[serde(rename = "cpu_T")]
    pub cpu_t: Vec<i64>,
    /// Lengths on a GPU.
    #[serde(rename = "gpu_T")]
    pub gpu_t: Vec<i64>,
}

/// The floor: bytes and FLOPs every correct implementation needs, as formulas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    /// Bytes moved per call.
    pub bytes: String,
    /// Useful floating-point operations per call.
    pub flops: String,
}

/// One kernel's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version (1, or 2: a `contract` module beside it, docs/CONTRACTS.md).
    pub format: u32,
    /// The kernel's name for the harness (`kda.prefill`).
    pub name: String,
    /// The contract it implements (`kda_prefill`; format 1, empty in format 2).
    #[serde(default)]
    pub op: String,
    /// Its language.
    pub language: KernelLanguage,
    /// Its source file, relative to the manifest.
    pub source: String,
    /// The kernel function's name.
    pub entry: String,
    /// The public function (Triton), the bound functions (cpp); format 1 CUDA: its host launcher.
    #[serde(default)]
    pub launcher: String,
    /// `module:function` of the float64 reference (format 1; format 2: the contract's `reference`).
    #[serde(default)]
    pub reference: String,
    /// The contract module, relative to the manifest (format 2).
    #[serde(default)]
    pub contract: Option<String>,
    /// Chunk length (prefill).
    #[serde(default)]
    pub chunk: Option<i64>,
    /// Target architecture (CUDA).
    #[serde(default)]
    pub arch: Option<String>,
    /// Threads per block (format 1 CUDA; format 2: the contract's `launch`).
    #[serde(default)]
    pub block_threads: Option<u32>,
    /// Tolerances.
    pub tolerance: Tolerance,
    /// Shape matrix.
    pub shapes: Shapes,
    /// Error-versus-length curve, where the kernel has one.
    #[serde(default)]
    pub curve: Option<Curve>,
    /// Floor formulas.
    pub floor: Floor,
    /// The manifest file, relative to the root (`/`-separated).
    #[serde(skip)]
    pub path: String,
}

impl Manifest {
    /// Parses a manifest; `path` (relative to the root) is recorded and used in errors.
    pub fn parse(text: &str, path: &str) -> Result<Manifest> {
        let bad = |message: String| Error::Manifest { path: PathBuf::from(path), message };
        let mut m: Manifest = toml::from_str(text).map_err(|e| bad(e.message().to_string()))?;
        if m.format != 1 && m.format != 2 {
            return Err(bad(format!("unsupported format {}", m.format)));
        }
        if m.format == 2 && m.language != KernelLanguage::Cpp && m.contract.is_none() {
            return Err(bad("format 2 needs `contract` (the contract module beside it)".to_string()));
        }
        if m.source.contains("..") || Path::new(&m.source).is_absolute() {
            return Err(bad(format!("source {:?} must lie next to the manifest", m.source)));
        }
        m.path = path.to_string();
        Ok(m)
    }

    /// The kernel's source file, relative to the root (`kernels/kda/prefill.py`).
    pub fn source_path(&self) -> String {
        match self.path.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{}", self.source),
            None => self.source.clone(),
        }
    }
}

/// The manifests of a kernels directory, and which files are contract.
#[derive(Debug, Clone)]
pub struct Kernels {
    /// The kernels directory relative to the root (`kernels`).
    pub dir: String,
    /// Every manifest, by name order.
    pub manifests: Vec<Manifest>,
}

impl Kernels {
    /// Reads every `<root>/<dir>/*/*.toml`.
    pub fn load(root: &Path, dir: &str) -> Result<Kernels> {
        let abs = root.join(dir);
        let mut manifests = Vec::new();
        let entries = std::fs::read_dir(&abs).map_err(|e| Error::io(&abs, e))?;
        let mut subdirs: Vec<PathBuf> =
            entries.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect();
        subdirs.sort();
        for sub in subdirs {
            let files = std::fs::read_dir(&sub).map_err(|e| Error::io(&sub, e))?;
            let mut tomls: Vec<PathBuf> = files
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            tomls.sort();
            for t in tomls {
                let text = std::fs::read_to_string(&t).map_err(|e| Error::io(&t, e))?;
                let rel = t.strip_prefix(root).unwrap_or(&t).to_string_lossy().replace('\\', "/");
                manifests.push(Manifest::parse(&text, &rel)?);
            }
        }
        manifests.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Kernels { dir: dir.trim_end_matches('/').to_string(), manifests })
    }

    /// The manifest whose source file is `rel` (relative to the root).
    pub fn for_source(&self, rel: &str) -> Option<&Manifest> {
        self.manifests.iter().find(|m| m.source_path() == rel)
    }

    /// Whether `rel` is part of a frozen contract: any file under the
    /// kernels directory that is not a kernel's source (manifests, references,
    /// host launchers, the harness, the tests).
    pub fn is_contract(&self, rel: &str) -> bool {
        let under = rel.starts_with(&format!("{}/", self.dir));
        under && self.for_source(rel).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFILL: &str = r#"
format = 1
name = "kda.prefill"
op = "kda_prefill"
language = "triton"
source = "prefill.py"
entry = "kda_prefill_kernel"
launcher = "kda_prefill"
reference = "kernels.kda.reference:naive_recurrent_kda"
chunk = 64
[tolerance]
rel_l2 = 5e-3
slice_rel_l2 = 1e-2
max_abs_rel = 2e-2
[shapes]
cpu = [{ B = 1, T = 1, H = 1, HV = 1, K = 16, V = 16 }]
gpu = []
bench = { B = 1, T = 8192, H = 16, HV = 32, K = 128, V = 128 }
[curve]
base = { B = 1, H = 1, HV = 1, K = 32, V = 32 }
cpu_T = [64, 128, 256]
gpu_T = [64, 1024]
[floor]
bytes = "4 * B"
flops = "B"
[consistency]
cpu = { B = 2, T = 70, M = 3, H = 1, HV = 2, K = 24, V = 20 }
"#;

    #[test]
    fn parses_a_manifest_and_names_its_source() {
        let m = Manifest::parse(PREFILL, "kernels/kda/prefill.toml").unwrap();
        assert_eq!(m.name, "kda.prefill");
        assert_eq!(m.language, KernelLanguage::Triton);
        assert_eq!(m.source_path(), "kernels/kda/prefill.py");
        assert_eq!(m.curve.as_ref().unwrap().cpu_t, vec![64, 128, 256]);
        assert_eq!(m.shapes.bench["T"], 8192);
        assert_eq!(m.tolerance.rel_l2, 5e-3);
    }

    #[test]
    fn rejects_bad_manifests() {
        let e = Manifest::parse("format = 2", "x.toml").unwrap_err();
        assert!(e.to_string().starts_with("manifest x.toml:"), "{e}");
        let three = PREFILL.replace("format = 1", "format = 3");
        assert!(Manifest::parse(&three, "x.toml").unwrap_err().to_string().contains("unsupported format 3"));
        let two = PREFILL.replace("format = 1", "format = 2");
        assert!(Manifest::parse(&two, "x.toml").unwrap_err().to_string().contains("needs `contract`"));
        let two = two.replace("op = \"kda_prefill\"", "contract = \"prefill_contract.py\"");
        assert_eq!(Manifest::parse(&two, "x.toml").unwrap().contract.as_deref(), Some("prefill_contract.py"));
        let escape = PREFILL.replace("\"prefill.py\"", "\"../prefill.py\"");
        assert!(Manifest::parse(&escape, "x.toml").is_err());
    }

    #[test]
    fn contract_is_everything_under_kernels_but_the_sources() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels/kda")).unwrap();
        std::fs::write(dir.path().join("kernels/kda/prefill.toml"), PREFILL).unwrap();
        let k = Kernels::load(dir.path(), "kernels").unwrap();
        assert_eq!(k.manifests.len(), 1);
        assert!(k.for_source("kernels/kda/prefill.py").is_some());
        assert!(!k.is_contract("kernels/kda/prefill.py"));
        for c in ["kernels/kda/prefill.toml", "kernels/kda/reference.py", "kernels/harness/check.py"] {
            assert!(k.is_contract(c), "{c}");
        }
        assert!(!k.is_contract("src/other.py"));
    }

    #[test]
    fn reads_the_real_manifests() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let k = Kernels::load(&root, "kernels").unwrap();
        let names: Vec<&str> = k.manifests.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["kda.decode", "kda.prefill", "kda_cuda.decode", "kv_transfer"]);
        let cu = k.for_source("kernels/kda_cuda/decode.cu").unwrap();
        assert_eq!(cu.language, KernelLanguage::Cuda);
        assert_eq!((cu.format, cu.contract.as_deref()), (2, Some("../kda/decode_contract.py")));
        let kv = k.for_source("kernels/kv_transfer/kv_transfer.cpp").unwrap();
        assert_eq!(kv.language, KernelLanguage::Cpp);
        assert_eq!((kv.tolerance.rel_l2, kv.tolerance.max_abs_rel), (0.0, 0.0), "exact bytes");
    }
}
