//! `kidiom init PATH`: a format-2 manifest and a contract skeleton next to a
//! kernel file (`ops::init`), and what is left for the user to write.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::cmd::args::OutputArgs;
use crate::{ops, output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The kernel file: Python with a @triton.jit kernel and the function that launches it, or a .cu
    /// file with an extern "C" __global__ kernel.
    #[arg(value_name = "PATH")]
    path: PathBuf,
    /// Replace an existing manifest or contract module.
    #[arg(long)]
    force: bool,
    /// The kernel to write the contract of, where the file launches several (its files are then
    /// named `<stem>_<KERNEL>`); without it, the first one a public function launches.
    #[arg(long, value_name = "KERNEL")]
    entry: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
}

/// What `--json` prints: the skeleton's report and the project file.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    report: &'a ops::init::Report,
    /// The kidiom.toml this call wrote (the folder had none), or `None`.
    wrote_config: Option<String>,
    /// Why `kidiom run` here would not validate this kernel (kidiom.toml's
    /// `[run] targets` leave its folder out), or `None`.
    not_a_target: Option<String>,
}

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let r = ops::init::init(&a.path, a.force, a.entry.as_deref())?;
    // any folder is a project: kidiom's defaults written down, the kernel's folder its target
    let dir = parent_or_dot(&a.path);
    let config = std::path::Path::new("kidiom.toml");
    let wrote_config = crate::config::Config::write_default(config, std::slice::from_ref(&dir))?
        .then(|| format!("kidiom.toml (kidiom's own corpora, [run] targets = [{dir:?}])"));
    let not_a_target = if wrote_config.is_none() { not_a_target(&a.path)? } else { None };
    if a.output.json {
        output::json(&Shown { report: &r, wrote_config, not_a_target })?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = vec![
        format!("kidiom: wrote {} and {}", r.manifest.display(), r.contract.display()),
        format!(
            "  {} kernel {}{}",
            r.language,
            r.entry,
            r.launcher.as_deref().map(|l| format!(", launched by {l}")).unwrap_or_default()
        ),
        format!("  ARGS {}", r.args.join(", ")),
        format!("  INPUTS {}; INOUTS {}; OUTPUTS {}", list(&r.inputs), list(&r.inouts), list(&r.outputs)),
        format!("  shape variables {}", r.shape_vars.join(", ")),
        "read from the source:".to_string(),
    ];
    out.extend(r.filled.iter().map(|f| format!("  {f}")));
    out.push("left for you (marked TODO; `kidiom validate` says what is missing until it is written):".into());
    out.extend(r.todo.iter().map(|t| format!("  {t}")));
    if !r.others.is_empty() {
        out.push(format!(
            "also here: {} (kidiom init {} --entry KERNEL writes the contract of one of them)",
            r.others.join(", "),
            a.path.display()
        ));
    }
    if let Some(w) = &wrote_config {
        out.push(format!("also wrote {w}: `kidiom run` here mines, applies and validates"));
    }
    if let Some(why) = &not_a_target {
        out.push(format!("note: {why}"));
    }
    out.push(format!(
        "then: write what is marked TODO, `kidiom check {}` (the unmodified kernel against its contract), \
         and `kidiom run` (or kidiom validate --patch YOUR.diff)",
        r.manifest.display()
    ));
    for line in out {
        output::line(&line)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Why the existing kidiom.toml's `[run] targets` would leave `kernel` out
/// of `kidiom run`, or `None` when one of them holds it (or none are set,
/// and `kidiom run` looks in kernels/, which holds it).
fn not_a_target(kernel: &std::path::Path) -> Result<Option<String>> {
    let cfg = crate::config::Config::load()?;
    let abs = std::path::absolute(kernel).unwrap_or_else(|_| kernel.to_path_buf());
    let targets = cfg.targets();
    let under = |dirs: &[PathBuf]| dirs.iter().any(|t| abs.starts_with(t));
    if under(&targets) || (targets.is_empty() && under(&[std::path::absolute("kernels").unwrap_or_default()])) {
        return Ok(None);
    }
    let dir = parent_or_dot(kernel);
    Ok(Some(format!(
        "{}'s [run] targets ({}) leave {} out: add {dir:?} there, or run `kidiom run --targets {dir}`",
        cfg.origin(),
        if targets.is_empty() {
            "none: kernels/".to_string()
        } else {
            cfg.run.targets.iter().map(|t| t.display().to_string()).collect::<Vec<_>>().join(", ")
        },
        kernel.display()
    )))
}

fn list(names: &[String]) -> String {
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

fn parent_or_dot(p: &std::path::Path) -> String {
    match p.parent().map(|d| d.display().to_string()) {
        Some(d) if !d.is_empty() => d,
        _ => ".".into(),
    }
}
