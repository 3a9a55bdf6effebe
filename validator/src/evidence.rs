//! Evidence: one record per gate that ran, and the whole validation of a
//! candidate. The types are the catalog's stored record
//! ([`kidiom_patterns::record`]); the validator produces them.

pub use kidiom_patterns::record::{EVIDENCE_FORMAT, Evidence, ExpectedError, GateRecord, GateStatus, Phase, Predicted};
