//! `kidiom.toml`: the project defaults that `kidiom run` and option-less
//! commands use. Missing keys fall back to built-in defaults; a folder with
//! no kidiom.toml gets one written by `kidiom init` or its first `kidiom run`
//! ([`DEFAULT_TOML`]): kidiom's own corpora, named `kidiom:NAME`, which
//! resolve to the corpus manifests and snapshot kidiom ships (beside its
//! harness), so any folder is a project without copied files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Config {
    pub(crate) catalog: CatalogSection,
    pub(crate) mine: MineSection,
    pub(crate) validate: ValidateSection,
    pub(crate) search: SearchSection,
    pub(crate) predict: PredictSection,
    pub(crate) run: RunSection,
    /// Device models by name (`[devices.h200]`); the built-in H200 when none is given.
    pub(crate) devices: std::collections::BTreeMap<String, kidiom_validator::predict::DeviceModel>,
    /// Where the file was found (for resolving relative paths).
    #[serde(skip)]
    pub(crate) root: PathBuf,
    /// The file read, `None` when there was none (built-in defaults).
    #[serde(skip)]
    pub(crate) file: Option<PathBuf>,
}

/// The kidiom.toml that `kidiom init` and a first `kidiom run` write in a
/// folder that has none (`{targets}`: the `[run] targets` array).
pub(crate) const DEFAULT_TOML: &str = r#"# kidiom's settings for this folder (written by kidiom; docs: kidiom.toml in kidiom's repository).

[catalog]
# Relative to this file's directory.
path = ".kidiom/catalog.sqlite"

[mine]
# kidiom's own corpora: `kidiom:NAME` is the corpus manifest kidiom ships (FLA, DeepGEMM, SGLang
# and Mooncake at pinned revisions). A git corpus is read from the user cache
# (~/.cache/kidiom/git), cloned there once; where it cannot be reached, its idioms come from the
# snapshot below, and `kidiom run` says which. Add your own manifests, repositories or directories.
corpora = ["kidiom:fla", "kidiom:deepgemm", "kidiom:sglang", "kidiom:mooncake"]
history = true
snapshot = "kidiom:snapshot"

[run]
# The folders whose kernels `kidiom run` rewrites and validates, each kernel with the manifest
# `kidiom init KERNEL_FILE` writes beside it. Relative to this file's directory.
targets = {targets}
"#;

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CatalogSection {
    pub(crate) path: PathBuf,
}

impl Default for CatalogSection {
    fn default() -> Self {
        CatalogSection { path: PathBuf::from(".kidiom/catalog.sqlite") }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MineSection {
    pub(crate) corpora: Vec<PathBuf>,
    pub(crate) min_occurrences: u64,
    pub(crate) min_files: u64,
    pub(crate) min_corpora: u64,
    pub(crate) max_file_bytes: u64,
    pub(crate) max_nesting: usize,
    /// `kidiom run` also mines the history of git corpora (edit idioms).
    pub(crate) history: bool,
    /// The shipped catalog snapshot `kidiom run` imports for git corpora it cannot reach.
    pub(crate) snapshot: Option<PathBuf>,
}

impl Default for MineSection {
    fn default() -> Self {
        let m = kidiom_miner::MineConfig::default();
        let l = kidiom_syntax::Limits::default();
        MineSection {
            corpora: Vec::new(),
            min_occurrences: m.min_occurrences,
            min_files: m.min_files,
            min_corpora: m.min_corpora,
            max_file_bytes: l.max_bytes,
            max_nesting: l.max_depth,
            history: false,
            snapshot: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ValidateSection {
    /// When the static gate rejects a candidate as "predicted slower".
    pub(crate) static_limits: kidiom_validator::StaticLimits,
}

/// The roofline prediction from work profiles (`[predict]`).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PredictSection {
    /// Predict times for this device (a `[devices.NAME]` table, or `h200`, built in).
    pub(crate) device: String,
    /// Profile every candidate and predict its speedup.
    pub(crate) enabled: bool,
    /// The held-out errors of `kidiom predict --check` (relative to the
    /// project's root): every printed prediction names its expected error.
    pub(crate) expected_error: Option<PathBuf>,
}

impl Default for PredictSection {
    fn default() -> Self {
        PredictSection { device: "h200".into(), enabled: true, expected_error: None }
    }
}

/// `kidiom run`'s targets (`[run]`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RunSection {
    /// Directories (or files) whose kernels `kidiom run` rewrites and
    /// validates, each with its manifest beside it (default: `kernels/`);
    /// `kidiom validate` also finds their manifests. Relative to kidiom.toml.
    pub(crate) targets: Vec<PathBuf>,
    /// Judge every state-precision variant without a verdict for its sources
    /// on each run (as `--variants`); by default only those whose sources
    /// changed since their verdict (a Triton variant costs about a minute on a CPU).
    pub(crate) variants: bool,
}

/// The per-site search of precision patterns (`kidiom run`, `kidiom apply --search`).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SearchSection {
    /// `kidiom run` searches (`--no-search` turns it off once).
    pub(crate) enabled: bool,
    /// Variants measured at a time (0: one per CPU).
    pub(crate) jobs: usize,
    /// The choice: error within this many times the loosest all-sites fix.
    pub(crate) error_factor: f64,
    /// A value fixes when its all-sites error is this many times below the baseline's.
    pub(crate) min_gain: f64,
    /// Also compile the front's points that cannot be chosen.
    pub(crate) full_front: bool,
}

impl Default for SearchSection {
    fn default() -> Self {
        let r = kidiom_validator::sitesearch::Rule::default();
        SearchSection {
            enabled: true,
            jobs: 0,
            error_factor: r.error_factor,
            min_gain: r.min_gain,
            full_front: r.full_front,
        }
    }
}

impl SearchSection {
    pub(crate) fn rule(&self) -> kidiom_validator::sitesearch::Rule {
        kidiom_validator::sitesearch::Rule {
            error_factor: self.error_factor,
            min_gain: self.min_gain,
            full_front: self.full_front,
        }
    }

    pub(crate) fn jobs(&self) -> usize {
        if self.jobs > 0 { self.jobs } else { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) }
    }
}

impl Config {
    /// Reads `kidiom.toml` from the current directory, if present.
    pub(crate) fn load() -> Result<Config> {
        Self::load_from(Path::new("kidiom.toml"))
    }

    pub(crate) fn load_from(path: &Path) -> Result<Config> {
        let root = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let (mut cfg, file) = match std::fs::read_to_string(path) {
            Ok(text) => (
                toml::from_str::<Config>(&text)
                    .with_context(|| format!("reading {} (fix it, or delete it for kidiom's defaults)", shown(path)))?,
                Some(path.to_path_buf()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Config::default(), None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", shown(path))),
        };
        cfg.root = root;
        cfg.file = file;
        Ok(cfg)
    }

    /// Writes kidiom's default kidiom.toml at `path` with `targets` as its
    /// `[run] targets` (relative to its directory), never over an existing
    /// file. Returns whether it wrote one.
    pub(crate) fn write_default(path: &Path, targets: &[String]) -> Result<bool> {
        use std::io::Write;
        let list = toml::Value::Array(targets.iter().map(|t| toml::Value::String(t.clone())).collect());
        let text = DEFAULT_TOML.replace("{targets}", &list.to_string());
        let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e).with_context(|| format!("writing {}", shown(path))),
        };
        f.write_all(text.as_bytes()).with_context(|| format!("writing {}", shown(path)))?;
        Ok(true)
    }

    /// Where the settings came from, for a message: the file, or that there is none.
    pub(crate) fn origin(&self) -> String {
        match &self.file {
            Some(f) => shown(f),
            None => "no kidiom.toml here (kidiom's defaults)".into(),
        }
    }

    /// `[mine] corpora`, each resolved: `kidiom:NAME` to the corpus manifest
    /// kidiom ships, anything else against kidiom.toml's directory.
    pub(crate) fn corpora(&self) -> Result<Vec<PathBuf>> {
        self.mine.corpora.iter().map(|p| self.resolve_shipped(p, "toml")).collect()
    }

    /// `[mine] snapshot`, resolved as [`Self::corpora`] (`kidiom:snapshot`).
    pub(crate) fn snapshot(&self) -> Result<Option<PathBuf>> {
        self.mine.snapshot.as_ref().map(|p| self.resolve_shipped(p, "json")).transpose()
    }

    fn resolve_shipped(&self, p: &Path, ext: &str) -> Result<PathBuf> {
        let Some(name) = p.to_str().and_then(|s| s.strip_prefix("kidiom:")) else { return Ok(self.resolve(p)) };
        let dir = shipped_corpora().with_context(|| format!("{}: resolving {}", self.origin(), p.display()))?;
        let file = dir.join(format!("{name}.{ext}"));
        if !file.is_file() {
            let known: Vec<String> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    e.file_name().to_str().and_then(|n| n.strip_suffix(".toml")).map(|n| format!("kidiom:{n}"))
                })
                .collect();
            anyhow::bail!(
                "{}: {} names no file kidiom ships ({} is missing; known: {})",
                self.origin(),
                p.display(),
                file.display(),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            );
        }
        Ok(file)
    }

    /// `[run] targets`, resolved against kidiom.toml's directory.
    pub(crate) fn targets(&self) -> Vec<PathBuf> {
        let abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
        self.run.targets.iter().map(|t| abs(self.resolve(t))).collect()
    }

    pub(crate) fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) }
    }

    pub(crate) fn mine_config(&self) -> kidiom_miner::MineConfig {
        kidiom_miner::MineConfig {
            min_occurrences: self.mine.min_occurrences,
            min_files: self.mine.min_files,
            min_corpora: self.mine.min_corpora,
            ..Default::default()
        }
    }

    /// The device model of `[predict] device` (`None` when predictions are off).
    pub(crate) fn device_model(&self) -> Result<Option<kidiom_validator::predict::DeviceModel>> {
        if !self.predict.enabled {
            return Ok(None);
        }
        let name = self.predict.device.as_str();
        let model = match self.devices.get(name) {
            Some(m) => m.clone(),
            None if name == "h200" => kidiom_validator::predict::DeviceModel::h200(),
            None => {
                let known: Vec<&str> = self.devices.keys().map(String::as_str).chain(["h200"]).collect();
                anyhow::bail!(
                    "kidiom.toml: [predict] device {name:?} has no [devices.{name}] table (known: {})",
                    known.join(", ")
                )
            }
        };
        model.check().map_err(|e| anyhow::anyhow!("kidiom.toml: {e}"))?;
        Ok(Some(model))
    }

    /// Every device model of kidiom.toml, the built-in h200 where it has none.
    pub(crate) fn device_models(
        &self,
    ) -> Result<std::collections::BTreeMap<String, kidiom_validator::predict::DeviceModel>> {
        let mut out = self.devices.clone();
        out.entry("h200".into()).or_insert_with(kidiom_validator::predict::DeviceModel::h200);
        for (name, m) in &out {
            m.check().map_err(|e| anyhow::anyhow!("kidiom.toml: [devices.{name}]: {e}"))?;
        }
        Ok(out)
    }

    /// The expected errors `[predict] expected_error` names (relative to
    /// kidiom.toml's folder): `None` when it names none or the file cannot be
    /// read (said on stderr; a prediction then says its error is unknown).
    pub(crate) fn expected_errors(&self) -> Option<kidiom_validator::published::ExpectedErrors> {
        let p = self.predict.expected_error.as_ref()?;
        match kidiom_validator::published::ExpectedErrors::read(&self.resolve(p)) {
            Ok(e) => Some(e),
            Err(e) => {
                // named, not fatal: every prediction then says its error is unknown
                eprintln!("kidiom: [predict] expected_error: {e}; predictions say their expected error is unknown");
                None
            }
        }
    }

    pub(crate) fn limits(&self) -> kidiom_syntax::Limits {
        kidiom_syntax::Limits { max_bytes: self.mine.max_file_bytes, max_depth: self.mine.max_nesting }
    }
}

/// Where `kidiom:NAME` corpora lie: `$KIDIOM_CORPORA` when set (a folder of
/// corpus manifests and `snapshot.json`), else `corpora/` of the kidiom
/// checkout that runs the harness.
fn shipped_corpora() -> Result<PathBuf> {
    match std::env::var_os("KIDIOM_CORPORA").filter(|v| !v.is_empty()) {
        Some(d) => Ok(PathBuf::from(d)),
        None => Ok(crate::ops::kidiom_home()?.join("corpora")),
    }
}

/// A path as a message shows it: absolute where it can be.
fn shown(p: &Path) -> String {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_s_device_is_the_built_in_h200_with_its_sources() {
        let cfg = Config::load_from(&Path::new(env!("CARGO_MANIFEST_DIR")).join("kidiom.toml")).unwrap();
        let model = cfg.device_model().unwrap().expect("predictions on");
        let built_in = kidiom_validator::predict::DeviceModel::h200();
        assert_eq!(
            (model.copy_gbps, model.sm_count, model.name.as_str()),
            (built_in.copy_gbps, 132.0, "NVIDIA H200 SXM")
        );
        for k in ["hbm_gbps", "copy_gbps", "fp32_tflops", "tensor_tflops", "sfu_per_sm_clock", "sm_count", "clock_ghz"]
        {
            assert!(model.sources.get(k).is_some_and(|s| !s.is_empty()), "{k} has no source");
        }
        let unknown: Config = toml::from_str("[predict]\ndevice = \"b200\"").unwrap();
        let e = unknown.device_model().unwrap_err().to_string();
        assert!(e.contains("no [devices.b200] table"), "{e}");
        let broken: Config = toml::from_str(
            "[predict]\ndevice = \"x\"\n[devices.x]\nname = \"x\"\nhbm_gbps = 1.0\ncopy_gbps = -1.0\nfp32_tflops = 1.0\n\
             tensor_tflops = 1.0\nsfu_per_sm_clock = 1.0\nsm_count = 1.0\nclock_ghz = 1.0\nlaunch_us = 0.0\n",
        )
        .unwrap();
        assert!(broken.device_model().unwrap_err().to_string().contains("copy_gbps"));
        let targets: Config = toml::from_str("[run]\ntargets = [\"ops\", \"/abs/k\"]").unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(targets.targets(), [cwd.join("ops"), PathBuf::from("/abs/k")]);
        let off: Config = toml::from_str("[predict]\nenabled = false").unwrap();
        assert!(off.device_model().unwrap().is_none());
    }

    #[test]
    fn the_default_file_names_kidiom_s_shipped_corpora_which_resolve_beside_the_harness() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kidiom.toml");
        assert!(Config::write_default(&path, &["ops".into()]).unwrap());
        assert!(!Config::write_default(&path, &["other".into()]).unwrap(), "never over a file");
        let cfg = Config::load_from(&path).unwrap();
        assert_eq!(cfg.file.as_deref(), Some(path.as_path()));
        assert_eq!(cfg.run.targets, [PathBuf::from("ops")]);
        // kidiom's checkout (the one this test is built from) ships each of them
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpora");
        let corpora = cfg.corpora().unwrap();
        let names: Vec<&str> = corpora.iter().filter_map(|p| p.file_name()?.to_str()).collect();
        assert_eq!(names, ["fla.toml", "deepgemm.toml", "sglang.toml", "mooncake.toml"]);
        assert!(corpora.iter().all(|p| p.starts_with(&shipped) && p.is_file()), "{corpora:?}");
        assert_eq!(cfg.snapshot().unwrap(), Some(shipped.join("snapshot.json")));
        // a name kidiom does not ship: the file read, the missing one and the known ones
        let bad: Config = toml::from_str("[mine]\ncorpora = [\"kidiom:nope\"]").unwrap();
        let e = bad.corpora().unwrap_err().to_string();
        assert!(
            e.contains("no kidiom.toml here") && e.contains("nope.toml is missing") && e.contains("kidiom:fla"),
            "{e}"
        );
        // an unreadable file says which, and the way out
        std::fs::write(&path, "[mine\n").unwrap();
        let e = format!("{:#}", Config::load_from(&path).unwrap_err());
        assert!(e.contains(&path.display().to_string()) && e.contains("delete it for kidiom's defaults"), "{e}");
    }
}
