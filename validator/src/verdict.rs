//! Verdicts: what the gates concluded about one candidate. The types are
//! the catalog's stored record ([`kidiom_patterns::record`]).

pub use kidiom_patterns::record::{Gate, Verdict, VerdictKind};
