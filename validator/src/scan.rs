//! The static scan of a diff for numeric flags: settings that change what a
//! kernel computes rather than how fast. They may change only in a rewrite
//! whose pattern category is `precision`.
//!
//! A flag *mention* is a name and its value (`input_precision="ieee"`,
//! `dtype=tl.float16`, `__expf`). The removed and added lines of a diff are
//! scanned; the flags changed when the two multisets of mentions differ (a
//! line merely moved or re-indented changes nothing).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Keyword-style flags: `name=value` (Triton, Torch, compile options).
const KEYWORDS: &[&str] = &[
    "input_precision",
    "allow_tf32",
    "out_dtype",
    "acc_dtype",
    "dtype",
    "max_num_imprecise_acc",
    "enable_fp_fusion",
    "fast_math",
    "fastmath",
    "TRITON_F32_DEFAULT",
    "TRITON_DEFAULT_FP_FUSION",
];

/// Bare names: compiler flags and fast-math intrinsics (CUDA).
const BARE: &[&str] = &[
    "--use_fast_math",
    "-use_fast_math",
    "-ffast-math",
    "-fmad",
    "-ftz",
    "-prec-div",
    "-prec-sqrt",
    "__expf",
    "__exp10f",
    "__logf",
    "__log2f",
    "__log10f",
    "__powf",
    "__fdividef",
    "__sinf",
    "__cosf",
    "__tanf",
    "__saturatef",
    "FP_CONTRACT",
];

/// Low-precision casts: `.to(<type>)` whose type names one of these.
const LOW_PRECISION: &[&str] = &["float16", "bfloat16", "float8", "fp16", "bf16", "fp8", "half"];

/// One numeric-flag mention.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlagMention {
    /// The flag (`input_precision`, `__expf`, `cast`).
    pub flag: String,
    /// Its value as written (`"ieee"`), empty for bare names.
    pub value: String,
}

/// A change of numeric flags between the removed and the added lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlagChange {
    /// The mention.
    pub mention: FlagMention,
    /// Added minus removed occurrences (negative: removed).
    pub delta: i64,
}

impl FlagChange {
    /// `+input_precision="ieee" x5`.
    pub fn describe(&self) -> String {
        let sign = if self.delta > 0 { '+' } else { '-' };
        let m = &self.mention;
        let body = if m.value.is_empty() { m.flag.clone() } else { format!("{}={}", m.flag, m.value) };
        format!("{sign}{body} x{}", self.delta.abs())
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The value after `name` at byte `end`: `= value` up to a top-level `,` or `)`.
fn value_after(line: &str, end: usize) -> Option<String> {
    let rest = line[end..].trim_start();
    let rest = rest.strip_prefix('=')?;
    if rest.starts_with('=') {
        return None; // a comparison
    }
    let rest = rest.trim_start();
    let mut depth = 0i32;
    let mut out = String::new();
    for c in rest.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => break,
            ')' | ']' | '}' => depth -= 1,
            ',' | '#' if depth == 0 => break,
            _ => {}
        }
        out.push(c);
    }
    Some(out.trim().to_string())
}

fn find_words<'a>(line: &'a str, name: &'a str) -> impl Iterator<Item = (usize, usize)> + 'a {
    line.match_indices(name).filter_map(move |(i, _)| {
        let end = i + name.len();
        let before_ok = name.starts_with('-') || line[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after_ok = line[end..].chars().next().is_none_or(|c| !is_ident(c));
        (before_ok && after_ok).then_some((i, end))
    })
}

/// The numeric-flag mentions of one line (comments included: a flag in a
/// comment is rare, and counting it errs on the side of review).
pub fn mentions(line: &str) -> Vec<FlagMention> {
    let mut out = Vec::new();
    for name in KEYWORDS {
        for (_, end) in find_words(line, name) {
            if let Some(value) = value_after(line, end) {
                out.push(FlagMention { flag: (*name).to_string(), value });
            }
        }
    }
    for name in BARE {
        for _ in find_words(line, name) {
            out.push(FlagMention { flag: (*name).to_string(), value: String::new() });
        }
    }
    for (i, _) in line.match_indices(".to(") {
        let inner: String = line[i + 4..].chars().take_while(|c| *c != ')').collect();
        if LOW_PRECISION.iter().any(|t| inner.contains(t)) {
            out.push(FlagMention { flag: "cast".into(), value: inner.trim().to_string() });
        }
    }
    out
}

/// The numeric flags that differ between removed and added lines.
pub fn flag_changes(removed: &[&str], added: &[&str]) -> Vec<FlagChange> {
    let mut count: BTreeMap<FlagMention, i64> = BTreeMap::new();
    for l in removed {
        for m in mentions(l) {
            *count.entry(m).or_default() -= 1;
        }
    }
    for l in added {
        for m in mentions(l) {
            *count.entry(m).or_default() += 1;
        }
    }
    count.into_iter().filter(|(_, d)| *d != 0).map(|(mention, delta)| FlagChange { mention, delta }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(removed: &[&str], added: &[&str]) -> Vec<String> {
        flag_changes(removed, added).iter().map(FlagChange::describe).collect()
    }

    #[test]
    fn finds_keyword_flags_with_values() {
        let m = mentions("    b_L = tl.dot(b_kr, tl.trans(b_kj), input_precision=\"ieee\")  # [BT, BT]");
        assert_eq!(m, vec![FlagMention { flag: "input_precision".into(), value: "\"ieee\"".into() }]);
        let m = mentions("acc = tl.zeros([BM, BN], dtype=tl.float16)");
        assert_eq!(m[0].value, "tl.float16");
        assert_eq!(mentions("c = tl.dot(a, b, allow_tf32=False, out_dtype=tl.float32)").len(), 2);
        assert!(mentions("if input_precision == 1: pass").is_empty());
        assert!(mentions("my_dtype=3").is_empty());
    }

    #[test]
    fn finds_intrinsics_flags_and_low_precision_casts() {
        assert_eq!(mentions("p += __expf(g[i]) * s;")[0].flag, "__expf");
        assert!(mentions("p += expf(g[i]) * s;").is_empty());
        assert_eq!(mentions("opts = ['--use_fast_math']")[0].flag, "--use_fast_math");
        assert_eq!(mentions("x = y.to(tl.bfloat16)")[0].flag, "cast");
        assert!(mentions("x = y.to(tl.float32)").is_empty());
    }

    #[test]
    fn a_moved_line_changes_nothing_and_a_new_value_does() {
        let line = "    c = tl.dot(a, b, input_precision=\"ieee\")";
        assert!(changes(&[line], &[&format!("  {line}")]).is_empty());
        assert_eq!(changes(&["c = tl.dot(a, b)"], &[line]), vec!["+input_precision=\"ieee\" x1"]);
        assert_eq!(
            changes(&["c = tl.dot(a, b, input_precision=\"tf32\")"], &[line]),
            vec!["+input_precision=\"ieee\" x1", "-input_precision=\"tf32\" x1"]
        );
        assert!(changes(&["x = tl.exp(y)"], &["x = tl.exp2(y * LOG2E)"]).is_empty());
    }
}
