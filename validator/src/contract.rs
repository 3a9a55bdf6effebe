//! The contract check: the unmodified kernel against its own contract, on
//! every CPU shape and again at odd sizes derived from them, before any
//! candidate of it is judged (`kidiom check`, and [`crate::gates`] once per
//! kernel and baseline text). A baseline that fails its contract says the
//! contract (or the kernel) is wrong; no candidate is blamed for it.
//!
//! The harness does the work (`check` with `--odd-sizes` and no `--source`,
//! one fixed seed) and keeps its answer in its content cache, keyed by
//! every byte it depends on, so a contract is checked once per version.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::backend::python::{Harness, HarnessRun, HarnessStatus};
use crate::error::Result;
use crate::manifest::Manifest;
use crate::request::{Kernel, Request};

/// What the contract check found.
#[derive(Debug, Clone, Serialize)]
pub struct ContractReport {
    /// The kernel's name.
    pub kernel: String,
    /// Its source, relative to the root.
    pub source: String,
    /// How it ended.
    pub outcome: ContractOutcome,
    /// Cases judged at the manifest's own CPU shapes.
    pub cases: usize,
    /// The odd sizes checked (`[shapes] exact` variables kept).
    pub odd_shapes: Vec<serde_json::Value>,
    /// Cases judged at the odd sizes.
    pub odd_cases: usize,
    /// Why (some of) the odd sizes proved nothing: the contract cannot make
    /// them, or the kernel raised at them (sizes it does not take).
    pub odd_inconclusive: Option<String>,
    /// What `kidiom init` guessed (the contract's `GUESSES`): what -> the guess.
    pub guesses: BTreeMap<String, String>,
    /// Every failure, as the harness words it.
    pub failures: Vec<String>,
    /// Whether the answer came from the harness's cache.
    pub cached: bool,
    /// Seconds the check took.
    pub seconds: f64,
}

/// The end of a contract check.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum ContractOutcome {
    /// The unmodified kernel meets its contract at every size.
    Passed,
    /// It fails at the manifest's own sizes.
    Failed,
    /// The harness cannot use the contract (a reference left to write, a
    /// shape it contradicts): the harness's line names the contract itself.
    Unusable,
    /// It passes at the manifest's sizes and fails only at the odd ones.
    FailedAtOddSizes,
    /// The kernel cannot run here (a GPU-only kernel on a CPU): the reason.
    Skipped(String),
    /// The check itself did not finish (timeout, crash): its log.
    Error(String),
}

impl ContractReport {
    /// The verdict line when the contract or the kernel is wrong (`None`
    /// when it passed, or could not be run to an answer).
    pub fn problem(&self) -> Option<String> {
        let first = self.failures.first().map(String::as_str).unwrap_or("no case passed");
        let more = match self.failures.len() {
            0 | 1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        let guesses = if self.guesses.is_empty() {
            String::new()
        } else {
            let g: Vec<String> = self.guesses.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("; kidiom init guessed {} (GUESSES): check these in the contract", g.join(", "))
        };
        match self.outcome {
            ContractOutcome::Unusable => Some(first.to_string()),
            ContractOutcome::Failed => {
                Some(format!("the contract or the kernel is wrong: the unmodified kernel fails {first}{more}{guesses}"))
            }
            ContractOutcome::FailedAtOddSizes => Some(format!(
                "the contract or the kernel is wrong: the unmodified kernel passes at the manifest's sizes but \
                     fails at odd sizes {}: {first}{more}{guesses}; a size the kernel needs as given goes in \
                     [shapes] exact",
                shapes_text(&self.odd_shapes)
            )),
            _ => None,
        }
    }
}

fn shapes_text(shapes: &[serde_json::Value]) -> String {
    shapes.iter().map(|s| s.to_string().replace('"', "")).collect::<Vec<_>>().join(", ")
}

/// The harness call of the contract check of `manifest`, whose files lie in
/// `tree` (the baseline tree, or the root), by `harness`.
pub(crate) fn run(
    harness: &Harness,
    tree: &std::path::Path,
    manifest: &Manifest,
    limit: Duration,
) -> Result<HarnessRun> {
    let arg = manifest.harness_arg(tree);
    harness.call(&Request::Contract { kernel: Kernel::of(&arg) }.argv(), limit)
}

/// Reads the harness's answer `run` for `manifest`.
pub(crate) fn report(manifest: &Manifest, run: &HarnessRun) -> ContractReport {
    let j = &run.json;
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect()).unwrap_or_default()
    };
    let odd = &j["odd_sizes"];
    let mut failures = strings(&j["failures"]);
    let odd_failures = strings(&odd["failures"]);
    let outcome = match run.status {
        HarnessStatus::Ok => ContractOutcome::Passed,
        HarnessStatus::Failed if !failures.is_empty() && failures.len() == odd_failures.len() => {
            ContractOutcome::FailedAtOddSizes
        }
        HarnessStatus::Failed => ContractOutcome::Failed,
        HarnessStatus::Skipped => {
            ContractOutcome::Skipped(j["reason"].as_str().unwrap_or("no reason given").to_string())
        }
        // a contract the harness cannot use (a reference left to write, a shape it contradicts) is
        // the contract's failure, in the harness's own words
        _ => match run.contract_error() {
            Some(line) => {
                failures = vec![line.to_string()];
                ContractOutcome::Unusable
            }
            None => ContractOutcome::Error(run.log()),
        },
    };
    let guesses = odd["guesses"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default();
    ContractReport {
        kernel: manifest.name.clone(),
        source: manifest.source_path(),
        outcome,
        cases: j["cases"].as_array().map_or(0, Vec::len),
        odd_shapes: odd["shapes"].as_array().cloned().unwrap_or_default(),
        odd_cases: odd["cases"].as_array().map_or(0, Vec::len),
        odd_inconclusive: odd["inconclusive"].as_str().map(String::from),
        guesses,
        failures,
        cached: j["cached"].as_bool().unwrap_or(false),
        seconds: run.process.seconds,
    }
}
