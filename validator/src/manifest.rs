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
    /// Manifest format version (1).
    pub format: u32,
    /// The kernel's name for the harness (`kda.prefill`).
    pub name: String,
    /// The contract it implements (`kda_prefill`).
    pub op: String,
    /// Its language.
    pub language: KernelLanguage,
    /// Its source file, relative to the manifest.
    pub source: String,
    /// The kernel function's name.
    pub entry: String,
    /// The public function (Triton) or `module:function` host launcher (CUDA).
    pub launcher: String,
    /// `module:function` of the float64 reference.
    pub reference: String,
    /// Chunk length (prefill).
    #[serde(default)]
    pub chunk: Option<i64>,
    /// Target architecture (CUDA).
    #[serde(default)]
    pub arch: Option<String>,
    /// Threads per block (CUDA).
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
        if m.format != 1 {
            return Err(bad(format!("unsupported format {}", m.format)));
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

/// Where a state-precision variant keeps its state (`[storage]`), read
/// tolerantly: the scale layout may be written `scale = "head_k"` or
/// `scales = "head_k"`, the scales' tensor `scales = "NAME"` or
/// `scale_tensor = "NAME"`, and a static scale `scale = 0.03125`; every key
/// is also kept as written (`raw`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Storage {
    /// The state tensor stored in reduced precision (`state`, `pool`).
    pub tensor: String,
    /// Its dtype: `bf16`, `fp8e4m3` or `int8` (kept as written; the harness decides).
    pub dtype: String,
    /// The scale layout: `none`, `tensor`, `head_k` or `tile`.
    pub scale: String,
    /// The tensor holding the scales, where there are any.
    pub scales: Option<String>,
    /// A static scale the kernel carries, where there is one.
    pub static_scale: Option<f64>,
    /// The table as the manifest writes it.
    pub raw: serde_json::Value,
}

/// The scale layouts a `[storage]` table names.
const LAYOUTS: &[&str] = &["none", "tensor", "head_k", "tile", "row", "head", "channel"];

impl Storage {
    fn parse(v: &toml::Value) -> std::result::Result<Storage, String> {
        let t = v.as_table().ok_or("must be a table")?;
        let text = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let dtype = text("dtype").ok_or("a `dtype` (bf16, fp8e4m3, int8) is required")?;
        let is_layout = |s: &String| LAYOUTS.contains(&s.as_str());
        let (scale_s, scales_s) = (text("scale"), text("scales"));
        let scale = scale_s
            .clone()
            .filter(is_layout)
            .or_else(|| scales_s.clone().filter(is_layout))
            .or_else(|| text("layout"))
            .unwrap_or_else(|| "none".into());
        let scales = text("scale_tensor")
            .or_else(|| scales_s.filter(|s| !is_layout(s)))
            .or_else(|| scale_s.filter(|s| !is_layout(s)));
        let static_scale = t.get("scale").and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)));
        Ok(Storage {
            tensor: text("tensor").unwrap_or_default(),
            dtype,
            scale,
            scales,
            static_scale,
            raw: serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
        })
    }
}

/// A state-precision variant of a kernel: a manifest with `variant_of` and
/// `[storage]` (kernels/README.md). It keeps the contract of the kernel it is
/// a variant of, except the state's storage, and is judged by the precision
/// gate (drift against a simulated reference and float64, within `[budget]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Variant {
    /// The variant's name for the harness (`kda.decode.state-bf16`).
    pub name: String,
    /// The kernel it is a variant of (`kda.decode`).
    pub variant_of: String,
    /// Its source file, relative to the manifest (the base kernel's when it names none).
    pub source: String,
    /// Where the state is kept.
    pub storage: Storage,
    /// The error budget, as the manifest writes it (the harness applies it).
    pub budget: serde_json::Value,
    /// The manifest file, relative to the root (`/`-separated).
    pub path: String,
}

impl Variant {
    /// Reads a variant manifest (a TOML table with `variant_of`); `path` is relative to the root.
    pub fn parse(table: toml::Table, path: &str) -> Result<Variant> {
        let bad = |message: String| Error::Manifest { path: PathBuf::from(path), message };
        let text = |key: &str| table.get(key).and_then(|v| v.as_str()).map(str::to_string);
        let name = text("name").ok_or_else(|| bad("a variant needs a `name`".into()))?;
        let variant_of = text("variant_of").ok_or_else(|| bad("`variant_of` must be a kernel's name".into()))?;
        let source = text("source").unwrap_or_default();
        if source.contains("..") || Path::new(&source).is_absolute() {
            return Err(bad(format!("source {source:?} must lie next to the manifest")));
        }
        let storage = table.get("storage").ok_or_else(|| bad("a variant needs a `[storage]` table".into()))?;
        let storage = Storage::parse(storage).map_err(|e| bad(format!("[storage]: {e}")))?;
        let budget = match table.get("budget") {
            Some(b) => serde_json::to_value(b).map_err(|e| bad(format!("[budget]: {e}")))?,
            None => serde_json::Value::Null,
        };
        Ok(Variant { name, variant_of, source, storage, budget, path: path.to_string() })
    }

    /// Its source file relative to the root, given the kernel it is a variant of.
    pub fn source_path(&self, base: &Manifest) -> String {
        if self.source.is_empty() {
            return base.source_path();
        }
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
    /// Every state-precision variant, by name order (each of a kernel in `manifests`).
    pub variants: Vec<Variant>,
}

impl Kernels {
    /// Reads every `<root>/<dir>/*/*.toml`.
    pub fn load(root: &Path, dir: &str) -> Result<Kernels> {
        let abs = root.join(dir);
        let mut manifests = Vec::new();
        let mut variants = Vec::new();
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
                match toml::from_str::<toml::Table>(&text) {
                    Ok(table) if table.contains_key("variant_of") => variants.push(Variant::parse(table, &rel)?),
                    _ => manifests.push(Manifest::parse(&text, &rel)?),
                }
            }
        }
        manifests.sort_by(|a, b| a.name.cmp(&b.name));
        variants.sort_by(|a, b| a.name.cmp(&b.name));
        for v in &variants {
            if !manifests.iter().any(|m| m.name == v.variant_of) {
                let message = format!("variant_of {:?} names no kernel", v.variant_of);
                return Err(Error::Manifest { path: PathBuf::from(&v.path), message });
            }
        }
        Ok(Kernels { dir: dir.trim_end_matches('/').to_string(), manifests, variants })
    }

    /// The kernel named `name`.
    pub fn manifest(&self, name: &str) -> Option<&Manifest> {
        self.manifests.iter().find(|m| m.name == name)
    }

    /// The variant named `name`, with the kernel it is a variant of.
    pub fn variant(&self, name: &str) -> Option<(&Variant, &Manifest)> {
        let v = self.variants.iter().find(|v| v.name == name)?;
        Some((v, self.manifest(&v.variant_of)?))
    }

    /// The variant whose own source file is `rel` (not one that shares its kernel's source).
    pub fn variant_for_source(&self, rel: &str) -> Option<(&Variant, &Manifest)> {
        self.variants.iter().find_map(|v| {
            let base = self.manifest(&v.variant_of)?;
            (v.source_path(base) == rel && base.source_path() != rel).then_some((v, base))
        })
    }

    /// The variants of the kernel `name`.
    pub fn variants_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Variant> + 'a {
        self.variants.iter().filter(move |v| v.variant_of == name)
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
        under && self.for_source(rel).is_none() && self.variant_for_source(rel).is_none()
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
        let two = PREFILL.replace("format = 1", "format = 2");
        assert!(Manifest::parse(&two, "x.toml").unwrap_err().to_string().contains("unsupported format 2"));
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
    fn a_variant_manifest_names_its_kernel_storage_and_budget_and_its_source_is_not_contract() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernels/kda")).unwrap();
        std::fs::write(dir.path().join("kernels/kda/prefill.toml"), PREFILL).unwrap();
        let variant = r#"
name = "kda.prefill.state-fp8"
variant_of = "kda.prefill"
source = "prefill_state_fp8.py"
[storage]
tensor = "h0"
dtype = "fp8e4m3"
scale = "head_k"
scales = "h0_scale"
[budget]
o = 2e-2
state = 5e-2
"#;
        std::fs::write(dir.path().join("kernels/kda/prefill_state_fp8.toml"), variant).unwrap();
        let k = Kernels::load(dir.path(), "kernels").unwrap();
        assert_eq!(k.manifests.len(), 1, "a variant is not a kernel of its own");
        let (v, base) = k.variant("kda.prefill.state-fp8").unwrap();
        assert_eq!((v.storage.dtype.as_str(), v.storage.scale.as_str()), ("fp8e4m3", "head_k"));
        assert_eq!(v.storage.scales.as_deref(), Some("h0_scale"));
        assert_eq!(v.budget["state"], serde_json::json!(5e-2));
        assert_eq!(v.source_path(base), "kernels/kda/prefill_state_fp8.py");
        assert!(k.variant_for_source("kernels/kda/prefill_state_fp8.py").is_some());
        assert!(!k.is_contract("kernels/kda/prefill_state_fp8.py"));
        assert!(k.is_contract("kernels/kda/prefill_state_fp8.toml"));
        assert_eq!(k.variants_of("kda.prefill").count(), 1);
        // the other spellings: the layout as `scales`, its tensor as `scale_tensor`, a static scale
        let other = variant
            .replace("scale = \"head_k\"\nscales = \"h0_scale\"", "scales = \"head_k\"\nscale_tensor = \"h0_scale\"");
        std::fs::write(dir.path().join("kernels/kda/prefill_state_fp8.toml"), &other).unwrap();
        let k = Kernels::load(dir.path(), "kernels").unwrap();
        let s = &k.variants[0].storage;
        assert_eq!((s.scale.as_str(), s.scales.as_deref()), ("head_k", Some("h0_scale")));
        let fixed =
            variant.replace("scale = \"head_k\"\nscales = \"h0_scale\"", "scales = \"tensor\"\nscale = 0.03125");
        std::fs::write(dir.path().join("kernels/kda/prefill_state_fp8.toml"), &fixed).unwrap();
        let k = Kernels::load(dir.path(), "kernels").unwrap();
        let s = &k.variants[0].storage;
        assert_eq!((s.scale.as_str(), s.scales.as_deref(), s.static_scale), ("tensor", None, Some(0.03125)));
        assert_eq!(s.raw["scale"], serde_json::json!(0.03125));
        // a variant of no kernel, or without storage, is a manifest error
        let orphan = variant.replace("variant_of = \"kda.prefill\"", "variant_of = \"kda.nothing\"");
        std::fs::write(dir.path().join("kernels/kda/prefill_state_fp8.toml"), orphan).unwrap();
        let e = Kernels::load(dir.path(), "kernels").unwrap_err().to_string();
        assert!(e.contains("names no kernel"), "{e}");
        let bare = "name = \"x\"\nvariant_of = \"kda.prefill\"\n";
        std::fs::write(dir.path().join("kernels/kda/prefill_state_fp8.toml"), bare).unwrap();
        let e = Kernels::load(dir.path(), "kernels").unwrap_err().to_string();
        assert!(e.contains("[storage]"), "{e}");
    }

    #[test]
    fn reads_the_real_manifests() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let k = Kernels::load(&root, "kernels").unwrap();
        let names: Vec<&str> = k.manifests.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["kda.decode", "kda.prefill", "kda_cuda.decode", "kv_transfer"]);
        let cu = k.for_source("kernels/kda_cuda/decode.cu").unwrap();
        assert_eq!(cu.language, KernelLanguage::Cuda);
        assert_eq!(cu.block_threads, Some(128));
        let kv = k.for_source("kernels/kv_transfer/kv_transfer.cpp").unwrap();
        assert_eq!(kv.language, KernelLanguage::Cpp);
        assert_eq!((kv.tolerance.rel_l2, kv.tolerance.max_abs_rel), (0.0, 0.0), "exact bytes");
    }
}
