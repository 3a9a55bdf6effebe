//! The state of one validation as the gates run, and how it ends as
//! [`Evidence`].

use std::time::{Duration, Instant};

use crate::backend::python::{HarnessRun, HarnessStatus};
use crate::evidence::{EVIDENCE_FORMAT, Evidence, GateRecord, GateStatus, Predicted};
use crate::input::CandidateInput;
use crate::manifest::Manifest;
use crate::validator::Validator;
use crate::verdict::{Gate, Verdict, VerdictKind};
use crate::wire::WireError;

/// The state of one validation as the gates run.
pub(crate) struct Validation<'a> {
    pub(crate) v: &'a Validator,
    pub(crate) c: &'a CandidateInput,
    pub(crate) started: Instant,
    pub(crate) records: Vec<GateRecord>,
    pub(crate) kernel: Option<Manifest>,
    pub(crate) seeds: Vec<u64>,
    pub(crate) flags: Vec<String>,
    /// Flags that mark how the evidence was made (`--untrusted-bench`), not
    /// results to refuse: added to the verdict's flags after the rule that a
    /// flagged result is never accepted.
    pub(crate) marks: Vec<String>,
    pub(crate) notes: Vec<String>,
    pub(crate) prediction: Option<Predicted>,
    /// The harness calls this validation paid for (`Evidence::phases`).
    pub(crate) phases: Vec<crate::evidence::Phase>,
}

impl<'a> Validation<'a> {
    /// A validation of `c` by `v` that starts now.
    pub(crate) fn new(v: &'a Validator, c: &'a CandidateInput) -> Validation<'a> {
        Validation {
            v,
            c,
            started: Instant::now(),
            records: Vec::new(),
            kernel: None,
            seeds: Vec::new(),
            flags: Vec::new(),
            marks: Vec::new(),
            notes: Vec::new(),
            prediction: None,
            phases: Vec::new(),
        }
    }
}

impl Validation<'_> {
    pub(crate) fn remaining(&self) -> Duration {
        self.v.opts.timeout.saturating_sub(self.started.elapsed())
    }

    /// Records the harness call `h` as the phase `name` (its wall time).
    pub(crate) fn phase(&mut self, name: &str, h: &HarnessRun) {
        self.phases.push(crate::evidence::Phase { name: name.to_string(), seconds: h.process.seconds });
    }

    /// Ends `rec` as `status` with `summary` and returns `verdict`.
    pub(crate) fn stop(
        &mut self,
        mut rec: GateRecord,
        status: GateStatus,
        summary: String,
        verdict: Verdict,
    ) -> Verdict {
        rec.status = status;
        rec.summary = summary;
        if rec.log.is_none() {
            rec.log = verdict.log.clone();
        }
        self.records.push(rec);
        verdict
    }

    /// `rec`'s gate could not finish: the harness run `h` timed out, crashed
    /// or errored. A timeout (the harness's own or the deadline's) says so.
    pub(crate) fn harness_error(&mut self, rec: GateRecord, h: &HarnessRun, what: &str) -> Verdict {
        let gate = rec.gate;
        let timed_out = h.status == HarnessStatus::TimedOut
            || h.json.get("error").and_then(|e| e.as_str()).is_some_and(|e| e.contains("timed out"));
        let fleet_error = h.placement.as_ref().and_then(|p| p.error.as_deref());
        let reason = if timed_out {
            format!("{what} timed out ({:.1} s)", h.process.seconds)
        } else if let Some(e) = fleet_error.filter(|_| h.status == HarnessStatus::Crashed) {
            format!("{what} crashed on the cluster ({:.1} s): {e}", h.process.seconds)
        } else if h.status == HarnessStatus::Crashed {
            format!("{what} crashed ({:.1} s)", h.process.seconds)
        } else {
            format!("{what} failed to run ({:.1} s)", h.process.seconds)
        };
        self.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(gate), reason, h.log()))
    }

    /// `rec`'s gate read harness output that does not fit the wire format.
    pub(crate) fn wire_error(&mut self, rec: GateRecord, h: &HarnessRun, e: &WireError) -> Verdict {
        let gate = rec.gate;
        let reason = e.to_string();
        let log = kidiom_exec::tail(&h.json.to_string(), 2000);
        self.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(gate), reason, log))
    }

    /// The time limit ran out before `rec`'s gate could start.
    pub(crate) fn out_of_time(&mut self, rec: GateRecord) -> Verdict {
        let gate = rec.gate;
        let reason =
            format!("timed out: the limit of {:.0} s was reached before this gate", self.v.opts.timeout.as_secs_f64());
        self.stop(rec, GateStatus::Error, reason.clone(), Verdict::error(Some(gate), reason, ""))
    }

    pub(crate) fn finish(self, verdict: Verdict) -> Evidence {
        let mut verdict = verdict;
        for f in self.flags {
            if !verdict.flags.contains(&f) {
                verdict.flags.push(f);
            }
        }
        if verdict.kind == VerdictKind::Accepted && !verdict.flags.is_empty() {
            // a flagged result is never accepted
            verdict = Verdict {
                kind: VerdictKind::Rejected,
                gate: Some(Gate::Speed),
                reason: format!("flagged for review: {}", verdict.flags.join("; ")),
                log: None,
                flags: verdict.flags,
            };
        }
        for m in self.marks {
            if !verdict.flags.contains(&m) {
                verdict.flags.push(m);
            }
        }
        if !self.notes.is_empty() {
            verdict.reason = format!("{} ({})", verdict.reason, self.notes.join("; "));
        }
        Evidence {
            format: EVIDENCE_FORMAT,
            candidate: self.c.id.clone(),
            pattern: self.c.pattern_id.clone(),
            category: self.c.category.map(|c| c.name().to_string()),
            target: self.c.path.clone(),
            contract: self.kernel.as_ref().map(|m| m.contract_digest(&self.v.opts.root)),
            kernel: self.kernel.map(|m| m.name),
            verdict,
            gates: self.records,
            device: self.v.opts.device.name().to_string(),
            commit: self.v.commit.clone(),
            seeds: self.seeds,
            started_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
                .saturating_sub(self.started.elapsed().as_secs()),
            seconds: self.started.elapsed().as_secs_f64(),
            validator: env!("CARGO_PKG_VERSION").to_string(),
            prediction: self.prediction,
            phases: self.phases,
        }
    }
}
