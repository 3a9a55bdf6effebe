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

pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let r = ops::init::init(&a.path, a.force, a.entry.as_deref())?;
    if a.output.json {
        output::json(&r)?;
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
    out.push(format!("then: kidiom validate --patch YOUR.diff, or kidiom apply {}", parent_or_dot(&a.path)));
    for line in out {
        output::line(&line)?;
    }
    Ok(ExitCode::SUCCESS)
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
