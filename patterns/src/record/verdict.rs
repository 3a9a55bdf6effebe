//! Verdicts: what the validator's gates concluded about one candidate.

use serde::{Deserialize, Serialize};

/// The gates, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Gate {
    /// The rewritten file parses with no new error nodes.
    Syntax,
    /// Contract, host-code and numeric-flag scans of the diff; ahead-of-time compile before/after.
    Static,
    /// Against the float64 reference over the shape matrix, several seeds.
    Correctness,
    /// A state-precision variant against its simulated reference and float64, over many decode steps.
    Precision,
    /// Interleaved A/B in one harness process (a GPU; the CPU for host C++).
    Speed,
}

kidiom_syntax::named_enum!(Gate);

/// The outcomes of a validation (SPEC section 8, and `unverified`, issue #48).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[derive(strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum VerdictKind {
    /// Every gate passed, speed included (a GPU ran).
    Accepted,
    /// A gate failed; the verdict names it and its numbers.
    Rejected,
    /// Every gate a CPU can run passed; speed is not measured yet.
    NeedsGpu,
    /// The checks passed without running the change: it lies in code no case reached (a branch of
    /// a mode flag the contract fixes, a launch it never makes). Nothing about it is known yet.
    Unverified,
    /// The validation could not finish: a timeout, a crash, a broken environment.
    Error,
}

kidiom_syntax::named_enum!(VerdictKind);

/// A verdict with its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The outcome.
    pub kind: VerdictKind,
    /// The gate that failed or errored (none for `accepted`, `needs-gpu`).
    pub gate: Option<Gate>,
    /// One line, with the numbers that decided it.
    pub reason: String,
    /// The log of an `error` (harness error, traceback tail, stderr tail).
    pub log: Option<String>,
    /// Results flagged for a human: an implausible speedup, a bandwidth
    /// beyond the peak, a gate a CPU could not run. A flagged result is never
    /// accepted.
    pub flags: Vec<String>,
}

impl Verdict {
    /// Every gate passed.
    pub fn accepted(reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::Accepted, gate: None, reason: reason.into(), log: None, flags: Vec::new() }
    }

    /// `gate` failed.
    pub fn rejected(gate: Gate, reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::Rejected, gate: Some(gate), reason: reason.into(), log: None, flags: Vec::new() }
    }

    /// `gate` passed without running the change.
    pub fn unverified(gate: Gate, reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::Unverified, gate: Some(gate), reason: reason.into(), log: None, flags: Vec::new() }
    }

    /// The CPU gates passed; speed needs a GPU.
    pub fn needs_gpu(reason: impl Into<String>) -> Verdict {
        Verdict { kind: VerdictKind::NeedsGpu, gate: None, reason: reason.into(), log: None, flags: Vec::new() }
    }

    /// The validation failed at `gate` (or before any gate).
    pub fn error(gate: Option<Gate>, reason: impl Into<String>, log: impl Into<String>) -> Verdict {
        let log = log.into();
        Verdict {
            kind: VerdictKind::Error,
            gate,
            reason: reason.into(),
            log: (!log.is_empty()).then_some(log),
            flags: Vec::new(),
        }
    }

    /// Whether every gate passed (never true for a flagged result).
    pub fn is_accepted(&self) -> bool {
        self.kind == VerdictKind::Accepted && self.flags.is_empty()
    }

    /// `rejected at correctness: o: rel_l2 1.2e-1 > 5.0e-3`.
    pub fn describe(&self) -> String {
        let at = self.gate.map(|g| format!(" at {g}")).unwrap_or_default();
        format!("{}{at}: {}", self.kind, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_serialize_with_kebab_names() {
        let v = Verdict::rejected(Gate::Correctness, "o: rel_l2 1.2e-01 > 5.0e-03");
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["kind"], "rejected");
        assert_eq!(j["gate"], "correctness");
        assert_eq!(v.describe(), "rejected at correctness: o: rel_l2 1.2e-01 > 5.0e-03");
        assert_eq!(serde_json::to_value(VerdictKind::NeedsGpu).unwrap(), "needs-gpu");
        let e = Verdict::error(Some(Gate::Correctness), "timed out", "");
        assert_eq!(e.log, None);
        let mut a = Verdict::accepted("1.30x");
        assert!(a.is_accepted());
        a.flags.push("speedup 9x is implausible".into());
        assert!(!a.is_accepted());
    }

    #[test]
    fn gates_have_names_in_order() {
        assert_eq!(
            Gate::ALL.iter().map(|g| g.name()).collect::<Vec<_>>(),
            ["syntax", "static", "correctness", "precision", "speed"]
        );
        assert!(Gate::Syntax < Gate::Speed);
    }
}
