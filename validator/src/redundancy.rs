//! The redundancy report (SPEC §8, "Work profile and prediction"): what a
//! kernel's work profile shows it does more than once, line by line, each
//! finding with the prediction of the kernel without it and the rewrite that
//! removes it, or the word that there is none yet.
//!
//! Three kinds, from the profile's per-line counts:
//! - **re-read**: global bytes the same program or thread loaded before with
//!   no store to them since (a cache or a register would have served them);
//! - **repeated call**: special-function evaluations the same program or
//!   thread already made on the same arguments;
//! - **uniform call**: evaluations another program of the launch or thread
//!   of the block made first on the same arguments (work computed
//!   identically by all of them, which one could do once).
//!
//! The gain of a finding is the roofline of the totals without its amount
//! (the re-read bytes not loaded, the evaluations not made) against the
//! kernel's own: a prediction like every other, labelled so. Which rewrite
//! removes it is found by running kidiom's own redundancy transforms
//! (`kidiom_patterns::builtin`) on the profiled source: one whose edits touch
//! the finding's line removes it. No template is consulted for the finding.

use std::collections::{BTreeMap, BTreeSet};

use kidiom_patterns::{Pattern, builtin};
use kidiom_rewriter::{Rewrite, RewriteSpec};
use kidiom_syntax::{Lang, parse_tree};
use serde::Serialize;

use crate::predict::{DeviceModel, WorkTotals, predict, speedup};
use crate::wire::Profile;
#[cfg(test)]
use crate::wire::ProfileLine;

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Global data loaded again by the same program or thread.
    Reread,
    /// A pure call evaluated again on the same arguments.
    RepeatedCall,
    /// A value every program or thread computes identically.
    UniformCall,
}

/// One finding of the redundancy report: one kind of redundant work on
/// the lines one rewrite (or none yet) removes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// What it is.
    pub kind: FindingKind,
    /// The lines doing it, in source order.
    pub lines: Vec<FindingLine>,
    /// How much is redundant at the bench shape, all lines together: bytes
    /// (re-read) or evaluations (calls).
    pub amount: u64,
    /// One sentence saying what is done again.
    pub what: String,
    /// Predicted speedup of the kernel without it (a prediction).
    pub predicted_speedup: f64,
    /// kidiom's rewrites whose edits touch these lines, best first.
    pub removed_by: Vec<String>,
    /// What to do: the command that applies the rewrite, or how to submit a
    /// fix by hand when there is no rewrite form yet.
    pub fix: String,
}

/// One line of a [`Finding`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingLine {
    /// The line of the kernel source (1-based).
    pub line: u32,
    /// Its text.
    pub text: String,
    /// Its redundant bytes or evaluations at the bench shape.
    pub amount: u64,
    /// Their share of the line's loads or special calls.
    pub share: f64,
}

/// The findings of `profile` (of `source`, a file of `lang` at `path`),
/// largest predicted gain first. Without a device model the gain is 1.
pub fn findings(profile: &Profile, device: Option<&DeviceModel>, lang: Lang, source: &str, path: &str) -> Vec<Finding> {
    let forms = rewrite_lines(lang, source);
    // (kind, the rewrites that remove it) -> its lines
    let mut groups: BTreeMap<(FindingKind, Vec<String>), Vec<FindingLine>> = BTreeMap::new();
    for l in &profile.lines {
        for (kind, amount, of) in [
            (FindingKind::Reread, l.reread_bytes, l.load_bytes),
            (FindingKind::RepeatedCall, l.repeat_calls, l.special_calls),
            (FindingKind::UniformCall, l.uniform_calls, l.special_calls),
        ] {
            if amount == 0 {
                continue;
            }
            let by = forms.iter().filter(|(_, lines, k)| lines.contains(&l.line) && k.contains(&kind));
            let mut by: Vec<(u8, String)> = by.map(|(id, _, _)| (rank(id, kind), id.clone())).collect();
            by.sort();
            let share = if of == 0 { 0.0 } else { amount as f64 / of as f64 };
            let line = FindingLine { line: l.line, text: l.text.trim().to_string(), amount, share };
            groups.entry((kind, by.into_iter().map(|(_, id)| id).collect())).or_default().push(line);
        }
    }
    let base = device.map(|d| predict(&profile.totals, profile.launches, d));
    let who =
        if lang == Lang::Python { ("program", "programs of the launch") } else { ("thread", "threads of its block") };
    let mut out: Vec<Finding> = groups
        .into_iter()
        .map(|((kind, removed_by), lines)| {
            let amount = lines.iter().map(|l| l.amount).sum();
            let gain = match (device, &base) {
                (Some(d), Some(b)) => speedup(b, &predict(&without(&profile.totals, kind, amount), profile.launches, d)),
                _ => 1.0,
            };
            let fix = match removed_by.first() {
                Some(id) => format!("kidiom apply {path} --category redundancy (pattern {id}), then kidiom validate"),
                None => format!(
                    "no rewrite form yet: write the fix by hand and run `kidiom validate --patch FILE --category redundancy` \
                     (a unified diff of {path})"
                ),
            };
            Finding { kind, what: describe(kind, amount, who), lines, amount, predicted_speedup: gain, removed_by, fix }
        })
        .collect();
    out.sort_by(|a, b| {
        b.predicted_speedup.total_cmp(&a.predicted_speedup).then(b.amount.cmp(&a.amount)).then(a.kind.cmp(&b.kind))
    });
    out
}

/// The totals with a finding's amount of work not done.
fn without(t: &WorkTotals, kind: FindingKind, amount: u64) -> WorkTotals {
    let mut w = *t;
    match kind {
        FindingKind::Reread => {
            w.load_bytes = w.load_bytes.saturating_sub(amount);
            w.reread_bytes = w.reread_bytes.saturating_sub(amount);
        }
        FindingKind::RepeatedCall => {
            w.special_calls = w.special_calls.saturating_sub(amount);
            w.repeat_calls = w.repeat_calls.saturating_sub(amount);
        }
        FindingKind::UniformCall => {
            w.special_calls = w.special_calls.saturating_sub(amount);
            w.uniform_calls = w.uniform_calls.saturating_sub(amount);
        }
    }
    w
}

/// `n` in the largest of k, M, G it reaches, one decimal.
fn human(n: u64, unit: &str) -> String {
    let x = n as f64;
    match [("G", 1e9), ("M", 1e6), ("k", 1e3)].iter().find(|(_, f)| x >= *f) {
        Some((p, f)) => format!("{:.1} {p}{unit}", x / f),
        None => format!("{n} {unit}").trim_end().to_string(),
    }
}

fn describe(kind: FindingKind, amount: u64, (one, all): (&str, &str)) -> String {
    match kind {
        FindingKind::Reread => {
            format!("re-reads {} that the same {one} loaded before, with no store between", human(amount, "B"))
        }
        FindingKind::RepeatedCall => {
            format!("evaluates {} special functions on arguments the same {one} already evaluated", human(amount, ""))
        }
        FindingKind::UniformCall => {
            format!("evaluates {} special functions that other {all} computed identically", human(amount, ""))
        }
    }
}

/// Best first: for a uniform value the form that computes it once per
/// block, for the rest the one that keeps it per thread.
fn rank(id: &str, kind: FindingKind) -> u8 {
    u8::from(id.ends_with("-shared") != (kind == FindingKind::UniformCall))
}

/// kidiom's redundancy transforms for `lang` with the source lines their
/// edits touch in `source`, and the kinds of finding each removes.
fn rewrite_lines(lang: Lang, source: &str) -> Vec<(String, BTreeSet<u32>, Vec<FindingKind>)> {
    let Ok(Some(tree)) = parse_tree(lang, source) else { return Vec::new() };
    let mut out = Vec::new();
    for p in builtin::patterns().into_iter().filter(|p| p.language == lang) {
        let Ok(rw) = Rewrite::new(&RewriteSpec::from(&p), None) else { continue };
        let mut lines = BTreeSet::new();
        for site in rw.site_edits(source, &tree) {
            for e in site.edits.iter().filter(|e| !e.range.is_empty()) {
                let first = line_of(source, e.range.start);
                let last = line_of(source, e.range.end.saturating_sub(1).max(e.range.start));
                lines.extend(first..=last);
            }
        }
        if !lines.is_empty() {
            out.push((p.id.clone(), lines, removes(&p)));
        }
    }
    out
}

/// The kinds of finding a built-in transform removes.
fn removes(p: &Pattern) -> Vec<FindingKind> {
    let mut k = vec![FindingKind::Reread, FindingKind::RepeatedCall];
    if p.after == builtin::REUSE_SHARED {
        k.push(FindingKind::UniformCall);
    }
    k
}

/// The 1-based line of byte `at`.
fn line_of(src: &str, at: usize) -> u32 {
    let at = at.min(src.len());
    (src.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CUDA kernel of our own: two loops over one row, the second loading
    /// the row and evaluating `expf` again.
    const KERNEL: &str = "extern \"C\" __global__ void k(const float* x, const float* g, float* o, int n) {\n\
        \x20   float a = 0.0f;\n\
        \x20   for (int i = 0; i < n; ++i) {\n\
        \x20       a += expf(g[i]) * x[i];\n\
        \x20   }\n\
        \x20   float b = 0.0f;\n\
        \x20   for (int i = 0; i < n; ++i) {\n\
        \x20       b += expf(g[i]) * x[i];\n\
        \x20   }\n\
        \x20   o[threadIdx.x] = a * b;\n\
        }\n";

    fn line(n: u32, load: u64, reread: u64, special: u64, repeat: u64, uniform: u64) -> ProfileLine {
        ProfileLine {
            line: n,
            text: KERNEL.lines().nth(n as usize - 1).unwrap_or("").into(),
            load_bytes: load,
            store_bytes: 0,
            reread_bytes: reread,
            special_calls: special,
            flops: 0,
            dot_macs: 0,
            repeat_calls: repeat,
            uniform_calls: uniform,
        }
    }

    fn profile(lines: Vec<ProfileLine>) -> Profile {
        let mut totals = WorkTotals::default();
        for l in &lines {
            totals.load_bytes += l.load_bytes;
            totals.reread_bytes += l.reread_bytes;
            totals.special_calls += l.special_calls;
        }
        serde_json::from_value(serde_json::json!({
            "shape": {}, "counted": {"shape": {}, "programs": 1, "programs_total": 1, "scale": 1.0, "exact": true},
            "totals": totals, "floor": {"bytes": 1e9, "flops": 0.0}, "traffic_ratio": 2.0, "launches": 1,
            "lines": lines,
        }))
        .expect("a profile")
    }

    #[test]
    fn each_count_is_a_finding_with_its_gain_and_the_rewrite_that_touches_its_line() {
        let gb = 1_000_000_000;
        let p = profile(vec![line(4, gb, 0, 1 << 20, 0, 1 << 19), line(8, gb, gb, 1 << 20, 1 << 20, 1 << 19)]);
        let d = DeviceModel::h200();
        let f = findings(&p, Some(&d), Lang::Cuda, KERNEL, "k.cu");
        let lines = |f: &Finding| f.lines.iter().map(|l| l.line).collect::<Vec<_>>();
        // the re-read halves a memory-bound kernel's bytes: by far the largest gain, first
        assert_eq!((f[0].kind, lines(&f[0])), (FindingKind::Reread, vec![8]), "{f:#?}");
        assert!((1.9..2.01).contains(&f[0].predicted_speedup), "{f:#?}");
        assert_eq!(f[0].lines[0].share, 1.0);
        assert!(f[0].what.starts_with("re-reads 1.0 GB"), "{}", f[0].what);
        // one finding per kind and rewrite: the repeated call, the uniform calls of both loops
        assert_eq!(f.len(), 3, "{f:#?}");
        // a memory-bound kernel gains nothing from fewer special functions
        assert!(f[1..].iter().all(|f| (f.predicted_speedup - 1.0).abs() < 1e-9), "{f:#?}");
        // the loop reuse touches line 8 (and the first loop's line 4, where it keeps the values)
        assert_eq!(f[0].removed_by, ["cu-reuse-across-loops", "cu-reuse-across-loops-shared"]);
        let uniform = f.iter().find(|f| f.kind == FindingKind::UniformCall).expect("uniform");
        assert_eq!((lines(uniform), uniform.amount), (vec![4, 8], 1 << 20), "{uniform:#?}");
        assert_eq!(uniform.removed_by, ["cu-reuse-across-loops-shared"], "{uniform:#?}");
        assert!(uniform.fix.starts_with("kidiom apply k.cu --category redundancy"), "{}", uniform.fix);
        // without a device model: findings, no gain
        assert!(findings(&p, None, Lang::Cuda, KERNEL, "k.cu").iter().all(|f| f.predicted_speedup == 1.0));
    }

    #[test]
    fn a_finding_no_rewrite_removes_says_so_and_how_to_submit_a_fix() {
        // Triton: every program evaluates the same exp; no transform of a block removes it
        let src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(g, o):\n    b = tl.exp(tl.load(g))\n    tl.store(o, b)\n";
        let mut l = line(6, 0, 0, 4096, 0, 3072);
        l.text = "    b = tl.exp(tl.load(g))".into();
        let f = findings(&profile(vec![l]), Some(&DeviceModel::h200()), Lang::Python, src, "k.py");
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].kind, FindingKind::UniformCall);
        assert!(f[0].what.contains("other programs of the launch"), "{}", f[0].what);
        assert!(f[0].removed_by.is_empty());
        assert!(
            f[0].fix.starts_with("no rewrite form yet") && f[0].fix.contains("kidiom validate --patch"),
            "{}",
            f[0].fix
        );
        // the same exp evaluated twice in the block is the Triton transform's
        let twice = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(g, o):\n    b = tl.load(g)\n    tl.store(o, tl.exp(b) * tl.exp(b))\n";
        let mut l = line(7, 0, 0, 8, 4, 0);
        l.text = "    tl.store(o, tl.exp(b) * tl.exp(b))".into();
        let f = findings(&profile(vec![l]), None, Lang::Python, twice, "k.py");
        assert_eq!(f[0].removed_by, ["py-reuse-in-block"], "{f:#?}");
    }
}
