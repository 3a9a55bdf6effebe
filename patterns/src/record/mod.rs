//! The stored candidate record: where a candidate came from
//! ([`Provenance`]) and what the validator concluded ([`Evidence`]), typed
//! once here and read by field everywhere else. The catalog stores both as
//! JSON text (the schema is the API boundary); this module is their only
//! decoder, and reads every shape kidiom has written.
//!
//! ```
//! use kidiom_patterns::record::{Gate, Provenance, StoredEvidence, Verdict, candidate_id};
//!
//! let prov = Provenance::decode(&serde_json::json!({"kind": "manual", "category": null, "title": "manual edit", "rationale": "r"}));
//! assert_eq!((prov.kind(), prov.title()), ("manual", "manual edit"));
//! assert!(StoredEvidence::decode(serde_json::json!({})).is_empty());
//! assert_eq!(Verdict::rejected(Gate::Static, "x").describe(), "rejected at static: x");
//! assert_eq!(candidate_id("p", "k.py", "diff"), format!("p@k.py#{}", &kidiom_syntax::blob_id(b"diff")[..8]));
//! ```

mod evidence;
mod figures;
mod provenance;
mod verdict;

pub use evidence::{
    Bound, EVIDENCE_FORMAT, Evidence, ExpectedError, GateRecord, GateStatus, Phase, Placement, Predicted,
    StoredEvidence, speed_headline,
};
pub use figures::{
    BranchCoverage, BytesPerStep, CompileFigures, CorrectnessFigures, CurvePoint, DriftCurve, ErrorSide, FileSyntax,
    FlagMention, GpuSpeedFigures, HostSpeedFigures, Num, NumericFlag, OutputStateError, PrecisionFigures,
    PredictionFigures, SCHEDULER_THROUGHPUT, SERVICE_REQUESTS, SpeedFigures, SpeedSide, StaticFigures, SyntaxFigures,
    WorstError, WorstErrors,
};
pub use provenance::{
    AlsoProposed, ManualEdit, Origin, OtherOrigin, PatternSnapshot, Provenance, RoleSite, RolesOrigin, SearchOrigin,
    SiteFigures, SiteOrigin, SiteSummary, SummaryPoint, SummarySite,
};
pub use verdict::{Gate, Verdict, VerdictKind};

/// The `kind` of a manual patch's provenance (and its pattern id).
pub const MANUAL_KIND: &str = "manual";

/// A candidate's id: `<pattern-id>@<path>#<8 hex digits of the diff's blob id>`.
pub fn candidate_id(pattern_id: &str, path: &str, diff: &str) -> String {
    let hash = kidiom_syntax::blob_id(diff.as_bytes());
    format!("{pattern_id}@{path}#{}", &hash[..8.min(hash.len())])
}
