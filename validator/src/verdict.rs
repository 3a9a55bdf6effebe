//! Verdicts: what the gates concluded about one candidate. The types are
//! the catalog's stored record ([`kidiom_catalog::record`]).

pub use kidiom_catalog::record::{Gate, Verdict, VerdictKind};
