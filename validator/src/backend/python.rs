//! The Python harness (`python -m kernels.harness`) as a subprocess with a
//! time limit ([`kidiom_exec::run_cancellable`]: its own process group,
//! killed at the deadline, its pipes read under the same deadline), or as a
//! task on a Ray cluster ([`super::fleet`]). The exit status, the one JSON
//! object the harness prints on stdout (wire format v1, docs/HARNESS.md)
//! and the tail of its stderr are kept.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use kidiom_exec::{Fleet, Placement, ProcessOutcome, run_cancellable, tail};
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// The harness's exit codes (docs/HARNESS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HarnessStatus {
    /// 0: ok, or the check passed.
    Ok,
    /// 1: the kernel failed (check failed, or bench's correctness gate).
    Failed,
    /// 2: harness error (bad arguments, crash, its own timeout).
    Error,
    /// 3: skipped, needs a GPU.
    Skipped,
    /// Killed by the validator's deadline.
    TimedOut,
    /// Any other ending (a signal, an unknown code, no JSON).
    Crashed,
}

/// One harness call: the process outcome and the JSON it printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessRun {
    /// How it ended.
    pub status: HarnessStatus,
    /// The process.
    pub process: ProcessOutcome,
    /// The harness's JSON object (`Null` when it printed none).
    pub json: serde_json::Value,
    /// Where it ran, when not on this machine (the Ray executor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

impl HarnessRun {
    /// The harness's one-line complaint about the contract itself (an
    /// unfinished or broken contract module, a manifest it cannot use): an
    /// error reply (`"error_kind": "contract"`, whatever its exit status but
    /// success or a timeout) whose `error` is that line. Never the
    /// candidate's fault: the verdict is `error` with this line.
    pub fn contract_error(&self) -> Option<&str> {
        let failed = !matches!(self.status, HarnessStatus::Ok | HarnessStatus::TimedOut);
        if !failed || self.json.get("error_kind").and_then(|k| k.as_str()) != Some("contract") {
            return None;
        }
        self.json.get("error").and_then(|e| e.as_str()).map(str::trim).filter(|e| !e.is_empty())
    }

    /// A one-paragraph log of a failed call: its error, traceback tail, stderr tail.
    pub fn log(&self) -> String {
        let mut parts = Vec::new();
        if self.process.timed_out {
            parts.push(format!("killed after {:.1} s (time limit)", self.process.seconds));
        } else if self.status == HarnessStatus::Crashed {
            parts.push(format!("exit {:?}", self.process.code));
        }
        if let Some(e) = self.json.get("error").and_then(|v| v.as_str()) {
            parts.push(e.to_string());
        }
        if let Some(t) = self.json.get("traceback").and_then(|v| v.as_str()) {
            parts.push(tail(t, 1500));
        }
        if !self.process.stderr_tail.trim().is_empty() {
            parts.push(format!("stderr: {}", tail(self.process.stderr_tail.trim(), 1500)));
        }
        parts.join("\n")
    }
}

/// Where and how to run the harness.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The Python interpreter.
    pub python: PathBuf,
    /// The directory holding the `kernels` package (the baseline tree).
    pub root: PathBuf,
    /// `None`: subprocesses here; `Some`: tasks on a Ray cluster through this driver.
    pub(crate) fleet: Option<Arc<Fleet>>,
}

/// `PYTHONPATH` for a harness run in `dir`: `dir` first, then the caller's.
pub(crate) fn python_path(dir: &std::path::Path) -> String {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old).filter(|p| !p.as_os_str().is_empty()));
    }
    std::env::join_paths(paths).map(|p| p.to_string_lossy().into_owned()).unwrap_or_else(|_| dir.display().to_string())
}

/// The last line of `stdout` that is a JSON object (`Null` when none is).
pub(crate) fn last_object(stdout: &str) -> serde_json::Value {
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok().filter(|v| v.is_object()))
        .unwrap_or(serde_json::Value::Null)
}

/// How a harness that exited with `code` and printed `json` ended.
pub(crate) fn harness_status(code: Option<i32>, json: &serde_json::Value) -> HarnessStatus {
    if json.is_null() {
        return HarnessStatus::Crashed;
    }
    match code {
        Some(0) => HarnessStatus::Ok,
        Some(1) => HarnessStatus::Failed,
        Some(2) => HarnessStatus::Error,
        Some(3) => HarnessStatus::Skipped,
        _ => HarnessStatus::Crashed,
    }
}

impl Harness {
    /// The harness under `python` in the tree `root`, run here.
    pub fn new(python: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Harness {
        Harness { python: python.into(), root: root.into(), fleet: None }
    }

    /// Where calls run: `ray` when they go to a fleet, else `local`.
    pub fn executor_name(&self) -> &'static str {
        if self.fleet.is_some() { "ray" } else { "local" }
    }

    /// Runs `python -m kernels.harness <args> --json --timeout <limit>` with a deadline
    /// slightly after the harness's own, so that the harness normally reports its own
    /// timeout as JSON and the kill is the backstop.
    pub fn call(&self, args: &[String], limit: Duration) -> Result<HarnessRun> {
        self.call_cancellable(args, limit, &AtomicBool::new(false))
    }

    /// [`Harness::call`], killed early when `cancel` is set.
    pub fn call_cancellable(&self, args: &[String], limit: Duration, cancel: &AtomicBool) -> Result<HarnessRun> {
        let secs = limit.as_secs_f64().max(1.0);
        let inner = (secs - 3.0).max(1.0).floor();
        if let Some(fleet) = &self.fleet {
            let limit = Duration::from_secs_f64(secs);
            return super::fleet::call(fleet, &self.python, &self.root, args, format!("{inner}"), limit, cancel);
        }
        let mut full: Vec<String> = vec!["-m".into(), "kernels.harness".into()];
        full.extend(args.iter().cloned());
        full.extend(["--json".into(), "--timeout".into(), format!("{inner}")]);
        // The call's own temporary directory, removed when it ends however it ends: a harness
        // killed at the deadline cannot clean up its workers' trees itself, and on a tmpfs what
        // it left would hold memory until the machine restarts.
        let scratch = tempfile::Builder::new()
            .prefix("kidiom-harness-")
            .tempdir()
            .map_err(|e| crate::error::Error::io(std::env::temp_dir(), e))?;
        let env = vec![
            // the harness's package (`kernels.harness`) from the tree it runs in, whatever else
            // the caller's PYTHONPATH holds
            ("PYTHONPATH".to_string(), python_path(&self.root)),
            ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
            ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
            ("TRITON_DEFAULT_FP_FUSION".to_string(), "1".to_string()),
            ("TMPDIR".to_string(), scratch.path().to_string_lossy().into_owned()),
        ];
        let process = run_cancellable(&self.python, &full, &self.root, &env, Duration::from_secs_f64(secs), cancel);
        drop(scratch);
        let process = process?;
        let json = last_object(&process.stdout);
        let status = if process.timed_out { HarnessStatus::TimedOut } else { harness_status(process.code, &json) };
        Ok(HarnessRun { status, process, json, placement: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A harness killed at the deadline (or cancelled) cannot remove what its workers wrote under
    /// its temporary directory; the call's own directory goes with it.
    #[test]
    fn a_harness_killed_at_its_deadline_leaves_no_temporary_files() {
        let d = tempfile::tempdir().unwrap();
        let said = d.path().join("tmpdir.txt");
        // stands in for python: a worker's tree under $TMPDIR, then no answer
        let fake = d.path().join("python");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nmkdir -p \"$TMPDIR/kidiom-check-x/candidate\" && echo \"$TMPDIR\" > '{}'\nexec sleep 30\n",
                said.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = Harness::new(&fake, d.path()).call(&["check".into()], Duration::from_secs(2)).unwrap();
        assert_eq!(run.status, HarnessStatus::TimedOut);
        let tmp = PathBuf::from(std::fs::read_to_string(&said).unwrap().trim());
        assert!(tmp.starts_with(std::env::temp_dir()) && tmp != std::env::temp_dir(), "{}", tmp.display());
        assert!(!tmp.exists(), "{} was left behind", tmp.display());
    }
}
