//! Exports of the catalog: ast-grep YAML rules and SARIF 2.1 findings.

mod astgrep;
mod sarif;

pub use astgrep::{AstGrepRule, astgrep_rules};
pub use sarif::{Finding, sarif_report};
