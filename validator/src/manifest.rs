//! Kernel manifests: the frozen contract next to each kernel.
//!
//! Format 1 (`kernels/*/*.toml`, kernels/README.md) names a contract kidiom
//! ships (`op`) and its float64 reference; format 2 (docs/CONTRACTS.md)
//! names a contract module next to the manifest (`contract`), so that a
//! kernel anywhere on disk can be validated. [`Kernels::load`] reads the
//! harness tree's `kernels/`; [`Kernels::discover`] walks any directory a
//! user names for files that look like kernel manifests.
//!
//! The validator reads them from the *baseline* tree only. A rewrite may
//! change a kernel's source file; the contract files are frozen, and a
//! rewrite touching one is rejected: under the harness tree's `kernels/`,
//! every file but a kernel's source (the manifests, the float64 references,
//! the host launchers, the harness, the tests); elsewhere, a manifest, its
//! contract module and the modules its relations name.

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
    /// Size variables the kernel needs as given: the contract check's odd
    /// sizes keep them (a power-of-two head dimension, a fixed tile).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exact: Vec<String>,
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

/// A `[[relation]]` of a format-2 manifest: its kernel composes with another
/// (docs/CONTRACTS.md, "Relations between contracts").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relation {
    /// The other kernel's name.
    pub with: String,
    /// `module:function` next to the manifest.
    pub check: String,
    /// The shape checked on a CPU.
    #[serde(default)]
    pub cpu: Option<Shape>,
    /// The shape checked on a GPU.
    #[serde(default)]
    pub gpu: Option<Shape>,
}

/// One kernel's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version (1 or 2).
    pub format: u32,
    /// The kernel's name for the harness (`kda.prefill`).
    pub name: String,
    /// The contract kidiom ships that it implements (`kda_prefill`; format 1).
    #[serde(default)]
    pub op: Option<String>,
    /// Its language.
    pub language: KernelLanguage,
    /// Its source file, relative to the manifest.
    pub source: String,
    /// The kernel function's name.
    pub entry: String,
    /// The public function (Triton) or `module:function` host launcher (CUDA,
    /// format 1); format 2's CUDA kernels are launched by the contract's `launch`.
    #[serde(default)]
    pub launcher: Option<String>,
    /// `module:function` of the float64 reference (format 1).
    #[serde(default)]
    pub reference: Option<String>,
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
    /// Relations with other kernels (format 2).
    #[serde(default, rename = "relation")]
    pub relations: Vec<Relation>,
    /// The manifest file, relative to the root (`/`-separated).
    #[serde(skip)]
    pub path: String,
    /// Whether the harness finds this manifest by its name (`--kernel NAME`):
    /// it lies in the `kernels/` of the tree the harness runs from. Any other
    /// manifest is passed by its path (`--manifest PATH`).
    #[serde(skip)]
    pub named: bool,
}

/// The file a relation's `module` names: a dotted module beside the
/// manifest, or a relative path to a `.py` file (`../kda/decode_contract.py`).
fn relation_file(module: &str) -> String {
    if module.ends_with(".py") { module.to_string() } else { format!("{}.py", module.replace('.', "/")) }
}

/// A path relative to the manifest at `manifest` (relative to the root)
/// that stays under the root: a contract may live in a sibling directory
/// (our CUDA decode shares the Triton decode's), never outside the tree.
fn within_root(what: &str, file: &str, manifest: &str) -> std::result::Result<(), String> {
    let dir = manifest.rsplit_once('/').map_or("", |(d, _)| d);
    if file.is_empty() || Path::new(file).is_absolute() || file.contains('\\') || normalize(dir, file).is_none() {
        return Err(format!("{what} {file:?} must lie in the tree, relative to the manifest"));
    }
    Ok(())
}

/// `dir/file` with `.` and `..` resolved; `None` when it climbs above the root.
fn normalize(dir: &str, file: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for part in dir.split('/').chain(file.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            p => out.push(p),
        }
    }
    // a manifest outside the root (`kidiom run --targets /elsewhere`) keeps its absolute path
    let joined = out.join("/");
    Some(if dir.starts_with('/') { format!("/{joined}") } else { joined })
}

/// A file name next to a manifest: no directories, no escape.
fn plain_name(what: &str, name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.contains("..") || Path::new(name).is_absolute() || name.contains('\\') {
        return Err(format!("{what} {name:?} must lie next to the manifest"));
    }
    Ok(())
}

impl Manifest {
    /// Parses a manifest; `path` (relative to the root) is recorded and used in errors.
    pub fn parse(text: &str, path: &str) -> Result<Manifest> {
        let bad = |message: String| Error::Manifest { path: PathBuf::from(path), message };
        let mut m: Manifest = toml::from_str(text).map_err(|e| bad(e.message().trim().to_string()))?;
        let missing = |key: &str| bad(format!("format {} needs `{key}`", m.format));
        match m.format {
            1 => {
                if m.op.is_none() {
                    return Err(missing("op"));
                }
                if m.reference.is_none() {
                    return Err(missing("reference"));
                }
                if m.launcher.is_none() {
                    return Err(missing("launcher"));
                }
            }
            2 => {
                let Some(contract) = &m.contract else { return Err(missing("contract")) };
                within_root("contract", contract, path).map_err(bad)?;
                if m.language == KernelLanguage::Triton && m.launcher.is_none() {
                    return Err(bad("a Triton kernel needs `launcher` (the function that launches it)".into()));
                }
                for r in &m.relations {
                    let Some((module, function)) = r.check.rsplit_once(':') else {
                        return Err(bad(format!("relation check {:?} is not module:function", r.check)));
                    };
                    if module.is_empty() || function.is_empty() {
                        return Err(bad(format!("relation check {:?} is not module:function", r.check)));
                    }
                    within_root("relation check", &relation_file(module), path).map_err(bad)?;
                }
            }
            n => return Err(bad(format!("unsupported format {n} (kidiom reads formats 1 and 2)"))),
        }
        plain_name("source", &m.source).map_err(bad)?;
        m.path = path.to_string();
        Ok(m)
    }

    /// The manifest's directory, relative to the root (`""` at the root).
    pub fn dir(&self) -> &str {
        self.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
    }

    fn beside(&self, file: &str) -> String {
        normalize(self.dir(), file).unwrap_or_else(|| file.to_string())
    }

    /// The kernel's source file, relative to the root (`kernels/kda/prefill.py`).
    pub fn source_path(&self) -> String {
        self.beside(&self.source)
    }

    /// The contract module, relative to the root (format 2).
    pub fn contract_path(&self) -> Option<String> {
        self.contract.as_deref().map(|c| self.beside(c))
    }

    /// A digest of the contract as it is under `root`: every file of
    /// [`Self::contract_files`] and a format-1 reference module, by name
    /// and bytes (a missing file counts as missing). A verdict records it;
    /// a different digest later means the contract changed since.
    pub fn contract_digest(&self, root: &Path) -> String {
        let mut files = self.contract_files();
        if let Some((module, _)) = self.reference.as_deref().and_then(|r| r.split_once(':')) {
            files.push(format!("{}.py", module.replace('.', "/")));
        }
        let mut all = Vec::new();
        for f in &files {
            all.extend_from_slice(f.as_bytes());
            all.push(0);
            match std::fs::read(root.join(f)) {
                Ok(b) => all.extend_from_slice(&b),
                Err(_) => all.extend_from_slice(b"<missing>"),
            }
            all.push(0);
        }
        kidiom_syntax::blob_id(&all)
    }

    /// The files of this manifest's contract, relative to the root: the
    /// manifest, its contract module and the modules its relations name.
    pub fn contract_files(&self) -> Vec<String> {
        let mut files = vec![self.path.clone()];
        files.extend(self.contract_path());
        for r in &self.relations {
            if let Some((module, _)) = r.check.rsplit_once(':') {
                files.push(self.beside(&relation_file(module)));
            }
        }
        files.sort();
        files.dedup();
        files
    }

    /// How the harness is told which kernel: `--kernel NAME` for a manifest
    /// it finds by name, else `--manifest <tree>/<path>` (`tree`: the
    /// directory the harness runs in, holding a copy of this manifest).
    pub fn harness_arg(&self, tree: &Path) -> (&'static str, String) {
        if self.named {
            ("--kernel", self.name.clone())
        } else {
            ("--manifest", tree.join(&self.path).to_string_lossy().into_owned())
        }
    }
}

/// Whether a TOML text looks like a kernel manifest: a top-level `format`
/// and an `entry` or `source` key (a `pyproject.toml` or `Cargo.toml` does not).
pub fn looks_like_manifest(text: &str) -> bool {
    let Ok(table) = text.parse::<toml::Table>() else { return false };
    table.contains_key("format") && (table.contains_key("entry") || table.contains_key("source"))
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
    /// Its contract module as the manifest names it (relative to the manifest), if any.
    pub contract: Option<String>,
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
        let contract = text("contract");
        Ok(Variant { name, variant_of, source, storage, budget, path: path.to_string(), contract })
    }

    /// Its contract module relative to the root (`None`: it names none, or one outside the root).
    pub fn contract_path(&self) -> Option<String> {
        let dir = self.path.rsplit_once('/').map_or("", |(d, _)| d);
        normalize(dir, self.contract.as_deref()?)
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

/// The manifests of a kernels directory and of the directories a user names,
/// and which files are contract.
#[derive(Debug, Clone)]
pub struct Kernels {
    /// The harness tree's kernels directory relative to the root (`kernels`).
    pub dir: String,
    /// Every manifest, by name order.
    pub manifests: Vec<Manifest>,
    /// Every state-precision variant, by name order (each of a kernel in `manifests`).
    pub variants: Vec<Variant>,
}

/// Manifests larger than this are no manifests (a data file named `.toml`).
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

fn rel_of(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).to_string_lossy().replace('\\', "/")
}

impl Kernels {
    /// Reads every `<root>/<dir>/*/*.toml` (a missing directory has none);
    /// the harness finds them by name.
    pub fn load(root: &Path, dir: &str) -> Result<Kernels> {
        let abs = root.join(dir);
        let mut manifests = Vec::new();
        let mut variants = Vec::new();
        if abs.is_dir() {
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
                    let rel = rel_of(root, &t);
                    match toml::from_str::<toml::Table>(&text) {
                        Ok(table) if table.contains_key("variant_of") => variants.push(Variant::parse(table, &rel)?),
                        _ => {
                            let mut m = Manifest::parse(&text, &rel)?;
                            m.named = true;
                            manifests.push(m);
                        }
                    }
                }
            }
        }
        let mut k = Kernels { dir: dir.trim_end_matches('/').to_string(), manifests, variants };
        k.settle()?;
        Ok(k)
    }

    /// Adds the kernel manifests found under each of `dirs` (absolute, or
    /// relative to `root`; a file is read alone): every `*.toml` that
    /// [`looks_like_manifest`], whatever its depth; other TOML files are
    /// skipped. A manifest already known (by path) is not read twice; two
    /// manifests with one name are an error naming both.
    pub fn discover(&mut self, root: &Path, dirs: &[PathBuf]) -> Result<()> {
        for d in dirs {
            let d = if d.is_absolute() { d.clone() } else { root.join(d) };
            if !d.exists() {
                continue;
            }
            for t in kidiom_syntax::tree_files(&d)? {
                if t.extension().is_none_or(|x| x != "toml") {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&t).map_err(|e| Error::io(&t, e))?;
                if !meta.is_file() || meta.len() > MAX_MANIFEST_BYTES {
                    continue;
                }
                let rel = rel_of(root, &t);
                if self.manifests.iter().any(|m| m.path == rel) || self.variants.iter().any(|v| v.path == rel) {
                    continue;
                }
                // a TOML file that is not UTF-8 or not TOML is no manifest
                let Ok(text) = std::fs::read_to_string(&t) else { continue };
                if !looks_like_manifest(&text) {
                    continue;
                }
                self.manifests.push(Manifest::parse(&text, &rel)?);
            }
        }
        self.settle()
    }

    /// Sorts by name; one name, one manifest; every variant of a known kernel.
    fn settle(&mut self) -> Result<()> {
        self.manifests.sort_by(|a, b| a.name.cmp(&b.name).then(a.path.cmp(&b.path)));
        self.variants.sort_by(|a, b| a.name.cmp(&b.name));
        for w in self.manifests.windows(2) {
            if w[0].name == w[1].name {
                return Err(Error::Manifest {
                    path: PathBuf::from(&w[1].path),
                    message: format!("the kernel name {:?} is also {}'s; names must be unique", w[1].name, w[0].path),
                });
            }
        }
        for v in &self.variants {
            if !self.manifests.iter().any(|m| m.name == v.variant_of) {
                let message = format!("variant_of {:?} names no kernel", v.variant_of);
                return Err(Error::Manifest { path: PathBuf::from(&v.path), message });
            }
        }
        Ok(())
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

    /// The manifest named `name`.
    pub fn named(&self, name: &str) -> Option<&Manifest> {
        self.manifests.iter().find(|m| m.name == name)
    }

    /// The directories (relative to the root) of the manifests the harness
    /// does not find by name: copied into each validation's tree beside the
    /// harness tree's `kernels/`.
    pub fn outside_dirs(&self) -> Vec<String> {
        let mut dirs: Vec<String> = self.manifests.iter().filter(|m| !m.named).map(|m| m.dir().to_string()).collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Whether `rel` is part of a frozen contract: any file under the
    /// kernels directory that is not a kernel's source (manifests, references,
    /// host launchers, the harness, the tests), and the contract files of
    /// every other manifest ([`Manifest::contract_files`]).
    pub fn is_contract(&self, rel: &str) -> bool {
        if self.for_source(rel).is_some() {
            return false;
        }
        let under = rel.starts_with(&format!("{}/", self.dir));
        if self.variant_for_source(rel).is_some() {
            return false;
        }
        under || self.manifests.iter().filter(|m| !m.named).any(|m| m.contract_files().iter().any(|f| f == rel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_beside_a_manifest_outside_the_root_keep_its_absolute_path() {
        assert_eq!(normalize("/elsewhere/fla/ops", "fused.py").as_deref(), Some("/elsewhere/fla/ops/fused.py"));
        assert_eq!(normalize("/elsewhere/fla/ops", "../c.py").as_deref(), Some("/elsewhere/fla/c.py"));
        assert_eq!(normalize("kernels/kda", "decode.py").as_deref(), Some("kernels/kda/decode.py"));
        assert_eq!(normalize("kernels", "../../x.py"), None);
    }

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
        assert!(
            Manifest::parse(&two, "x.toml").unwrap_err().to_string().contains("format 2 needs `contract`"),
            "{two}"
        );
        let three = PREFILL.replace("format = 1", "format = 3");
        assert!(Manifest::parse(&three, "x.toml").unwrap_err().to_string().contains("unsupported format 3"));
        let no_op = PREFILL.replace("op = \"kda_prefill\"\n", "");
        assert!(Manifest::parse(&no_op, "x.toml").unwrap_err().to_string().contains("format 1 needs `op`"));
        // a contract beside another kernel's is in the tree; one above the root is not
        let shared = two.replace("op = \"kda_prefill\"", "contract = \"../kda/prefill_contract.py\"");
        let m = Manifest::parse(&shared, "kernels/kda_cuda/x.toml").unwrap();
        assert_eq!(m.contract_path().as_deref(), Some("kernels/kda/prefill_contract.py"));
        let above = two.replace("op = \"kda_prefill\"", "contract = \"../../c.py\"");
        assert!(Manifest::parse(&above, "kernels/x.toml").unwrap_err().to_string().contains("must lie in the tree"));
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

    const RMSNORM: &str = r#"
format = 2
name = "my.rmsnorm"
language = "triton"
source = "rmsnorm.py"
entry = "rmsnorm_kernel"
launcher = "rmsnorm"
contract = "rmsnorm_contract.py"
[tolerance]
rel_l2 = 1e-5
slice_rel_l2 = 1e-4
max_abs_rel = 1e-4
[shapes]
cpu = [{ M = 3, N = 64 }]
gpu = [{ M = 4096, N = 4096 }]
bench = { M = 4096, N = 4096 }
[floor]
bytes = "4 * (2 * M * N + N)"
flops = "4 * M * N"
[[relation]]
with = "my.other"
check = "relations:composes"
cpu = { M = 2, N = 8 }
"#;

    #[test]
    fn parses_format_two_and_names_its_contract_files() {
        let m = Manifest::parse(RMSNORM, "ops/norm/rmsnorm.toml").unwrap();
        assert_eq!((m.format, m.op.as_deref(), m.reference.as_deref()), (2, None, None));
        assert_eq!(m.source_path(), "ops/norm/rmsnorm.py");
        assert_eq!(m.contract_path().as_deref(), Some("ops/norm/rmsnorm_contract.py"));
        assert_eq!(m.relations.len(), 1);
        assert_eq!(m.relations[0].cpu.as_ref().unwrap()["M"], 2);
        assert_eq!(
            m.contract_files(),
            ["ops/norm/relations.py", "ops/norm/rmsnorm.toml", "ops/norm/rmsnorm_contract.py"]
        );
        let (flag, value) = m.harness_arg(Path::new("/t/tree"));
        assert_eq!((flag, value.as_str()), ("--manifest", "/t/tree/ops/norm/rmsnorm.toml"));
        let at_root = Manifest::parse(RMSNORM, "rmsnorm.toml").unwrap();
        assert_eq!(at_root.source_path(), "rmsnorm.py");
        for (from, to, why) in [
            ("contract = \"rmsnorm_contract.py\"\n", "", "format 2 needs `contract`"),
            ("\"rmsnorm_contract.py\"", "\"../c.py\"", "must lie in the tree"),
            ("launcher = \"rmsnorm\"\n", "", "needs `launcher`"),
            ("\"relations:composes\"", "\"relations\"", "is not module:function"),
            ("\"relations:composes\"", "\"../x:f\"", "must lie in the tree"),
        ] {
            let text = RMSNORM.replace(from, to);
            let e = Manifest::parse(&text, "x.toml").unwrap_err().to_string();
            assert!(e.contains(why), "{from} -> {to}: {e}");
        }
        // a CUDA kernel of format 2 is launched by its contract: no launcher needed
        let cuda = RMSNORM.replace("launcher = \"rmsnorm\"\n", "").replace("\"triton\"", "\"cuda\"");
        assert!(Manifest::parse(&cuda, "x.toml").is_ok());
    }

    #[test]
    fn discovery_finds_manifests_anywhere_and_skips_other_toml() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("proj/pyproject.toml", "[project]\nname = \"x\"\nversion = \"1\"\n");
        write("proj/Cargo.toml", "[package]\nname = \"x\"\n");
        write("proj/broken.toml", "this is not toml [");
        write("proj/data.toml", "format = 3\n");
        write("proj/ops/deep/rmsnorm.toml", RMSNORM);
        let mut k = Kernels::load(root, "kernels").unwrap();
        assert!(k.manifests.is_empty(), "no kernels/ here");
        k.discover(root, &[PathBuf::from("proj")]).unwrap();
        let names: Vec<&str> = k.manifests.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["my.rmsnorm"]);
        let m = &k.manifests[0];
        assert!(!m.named);
        assert_eq!(m.path, "proj/ops/deep/rmsnorm.toml");
        assert_eq!(k.outside_dirs(), ["proj/ops/deep"]);
        // the source may change; the manifest, the contract and the relation modules may not
        assert!(!k.is_contract("proj/ops/deep/rmsnorm.py"));
        assert!(k.is_contract("proj/ops/deep/rmsnorm.toml"));
        assert!(k.is_contract("proj/ops/deep/rmsnorm_contract.py"));
        assert!(k.is_contract("proj/ops/deep/relations.py"));
        assert!(!k.is_contract("proj/ops/deep/helper.py"));
        // found again through another directory: read once
        k.discover(root, &[root.join("proj/ops")]).unwrap();
        assert_eq!(k.manifests.len(), 1);
        // a broken file that looks like a manifest is an error naming it
        write("proj/bad/k.toml", "format = 2\nentry = \"k\"\n");
        let e = k.discover(root, &[PathBuf::from("proj/bad")]).unwrap_err().to_string();
        assert!(e.starts_with("manifest proj/bad/k.toml:"), "{e}");
        // two manifests with one name
        std::fs::remove_file(root.join("proj/bad/k.toml")).unwrap();
        write("proj/twin/rmsnorm.toml", RMSNORM);
        let e = k.discover(root, &[PathBuf::from("proj/twin")]).unwrap_err().to_string();
        assert!(e.contains("\"my.rmsnorm\" is also"), "{e}");
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
        assert_eq!((cu.format, cu.contract.as_deref()), (2, Some("../kda/decode_contract.py")));
        let kv = k.for_source("kernels/kv_transfer/kv_transfer.cpp").unwrap();
        assert_eq!(kv.language, KernelLanguage::Cpp);
        assert_eq!((kv.tolerance.rel_l2, kv.tolerance.max_abs_rel), (0.0, 0.0), "exact bytes");
        // the host contract beside the module is frozen like any contract module
        assert_eq!((kv.format, kv.contract.as_deref()), (2, Some("kv_transfer_contract.py")));
        assert!(k.is_contract("kernels/kv_transfer/kv_transfer_contract.py"));
        assert!(kv.contract_files().contains(&"kernels/kv_transfer/kv_transfer_contract.py".to_string()));
    }
}
