//! Gate 1, syntax: every touched file still parses, with no new error nodes.

use std::path::Path;
use std::time::Instant;

use kidiom_patterns::record::{FileSyntax, SyntaxFigures};
use kidiom_syntax::Lang;

use super::{Touched, Validation};
use crate::evidence::{GateRecord, GateStatus};
use crate::verdict::{Gate, Verdict};

/// The syntax gate; `Some` verdict when it fails.
pub(super) fn gate(run: &mut Validation<'_>, touched: &[Touched]) -> Option<Verdict> {
    let t0 = Instant::now();
    let mut rec = GateRecord::new(Gate::Syntax, GateStatus::Passed, "");
    let mut counts = SyntaxFigures::new();
    let mut worse = Vec::new();
    for t in touched {
        let Some(lang) = Lang::from_path(Path::new(&t.path)) else {
            let unparsed = FileSyntax {
                parsed: Some(false),
                reason: Some("no parser for this file type".into()),
                ..Default::default()
            };
            counts.insert(t.path.clone(), unparsed);
            continue;
        };
        match (kidiom_rewriter::parse_errors(lang, &t.base), kidiom_rewriter::parse_errors(lang, &t.cand)) {
            (Ok(b), Ok(a)) => {
                let parsed = FileSyntax {
                    language: Some(format!("{lang:?}").to_lowercase()),
                    error_nodes_before: Some(b as u64),
                    error_nodes_after: Some(a as u64),
                    ..Default::default()
                };
                counts.insert(t.path.clone(), parsed);
                if a > b {
                    worse.push(format!("{}: {b} -> {a} error nodes", t.path));
                }
            }
            (_, Err(e)) | (Err(e), _) => worse.push(format!("{}: does not parse ({e})", t.path)),
        }
    }
    rec.set_metrics(&counts);
    rec.seconds = t0.elapsed().as_secs_f64();
    if !worse.is_empty() {
        let summary = worse.join("; ");
        let reason = format!("new parse errors: {summary}");
        return Some(run.stop(rec, GateStatus::Failed, summary, Verdict::rejected(Gate::Syntax, reason)));
    }
    rec.summary = "no new error nodes".into();
    run.records.push(rec);
    None
}
