//! ast-grep rules (`ast-grep scan --rule FILE`) for the catalog's
//! rewritable patterns, with the catalog's data under `metadata`.
//!
//! ast-grep's pattern syntax cannot say "this call lacks keyword `k`, in
//! any position" or "inside a Triton kernel"; the rules say it with the
//! `has`/`not`/`inside`/`follows` combinators, so that `ast-grep scan`
//! reports the same sites as `kidiom apply`.

use crate::model::{Lang, Pattern};
use kidiom_rewriter::{Rewrite, RewriteSpec};

/// One exported rule.
#[derive(Debug, Clone, PartialEq)]
pub struct AstGrepRule {
    /// The pattern id (also the rule id).
    pub id: String,
    /// The rule as one YAML document.
    pub yaml: String,
}

/// The metavariables of a pattern (`$A`, `$$$ARGS`), as written.
fn metavars(pattern: &str) -> std::collections::BTreeSet<String> {
    let b = pattern.as_bytes();
    let mut out = std::collections::BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let start = i;
            while i < b.len() && b[i] == b'$' {
                i += 1;
            }
            let name_start = i;
            while i < b.len() && (b[i].is_ascii_uppercase() || b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            if i > name_start {
                out.insert(pattern[start..i].to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Whether a metavariable touches an identifier on either side
/// (`$$$Autils`, `None$$$A`): ast-grep would read another name there.
fn glued(pattern: &str) -> bool {
    let b = pattern.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i] == b'$' {
            i += 1;
        }
        let name = i;
        while i < b.len() && (b[i].is_ascii_uppercase() || b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
        if i > name && ((start > 0 && ident(b[start - 1])) || (i < b.len() && ident(b[i]))) {
            return true;
        }
    }
    false
}

/// A YAML scalar as a JSON string (JSON strings are YAML).
fn q(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

const TRITON_KERNEL: &str = "  - inside:\n      kind: decorated_definition\n      stopBy: end\n      has:\n        kind: decorator\n        regex: '^@\\s*[A-Za-z_][\\w.]*\\.(jit|autotune|heuristics)\\s*(\\(|$)'\n";
const CUDA_KERNEL: &str = "  - inside:\n      kind: function_definition\n      stopBy: end\n      regex: '^[^{]*\\b(__global__|__device__)\\b'\n";

/// Rules for the patterns that have an automatic rewrite (others are
/// skipped: ast-grep would only report them).
pub fn astgrep_rules(patterns: &[Pattern]) -> Vec<AstGrepRule> {
    patterns.iter().filter_map(rule).collect()
}

fn rule(p: &Pattern) -> Option<AstGrepRule> {
    let rw = Rewrite::new(&RewriteSpec::from(p), None).ok()?;
    if rw.releases_gil() || p.kind == crate::Kind::Transform || rw.scope() == kidiom_rewriter::Scope::Launches {
        // Where a GIL release is safe is kidiom's binding analysis, a transform's sites
        // its loop analysis, and which subscript calls launch a kernel of the file
        // (`kernel_launches`): none is something a YAML rule can say.
        return None;
    }
    let value = rw.value().unwrap_or("").to_string();
    let (lang, ctx) = match p.language {
        Lang::Python => ("python", TRITON_KERNEL),
        Lang::Cuda | Lang::Cpp => ("cpp", CUDA_KERNEL),
        Lang::Rust => return None,
    };
    let (before, after) = (p.before.trim(), p.after.trim());
    let (conds, fix) = conditions(before, after, &value)?;
    let ctx = if matches!(p.language, Lang::Cuda | Lang::Cpp) && before.contains("$F($$$PARAMS)") { "" } else { ctx };
    Some(AstGrepRule { id: p.id.clone(), yaml: yaml(p, lang, &conds, ctx, fix.as_deref(), &value) })
}

/// The rule's conditions (YAML lines under `all:`) and its fix, from the
/// template pair: each template shape says how ast-grep finds a site that
/// lacks the idiom. `None`: a shape a YAML rule cannot express.
fn conditions(before: &str, after: &str, value: &str) -> Option<(String, Option<String>)> {
    // Holes only on the after side (an added `kw=$V`) take the rewrite's
    // value; ast-grep rejects a fix that names a metavariable the rule lacks.
    if glued(before) || glued(after) {
        return None; // `$$$Atorch`: ast-grep would read one metavariable name
    }
    let unbound: Vec<String> = metavars(after).into_iter().filter(|m| !metavars(before).contains(m)).collect();
    let fix = match unbound.as_slice() {
        [] => after.to_string(),
        [one] if !value.is_empty() => after.replace(one.as_str(), value),
        _ => return None,
    };
    if let Some(inner) = after
        .strip_prefix(before.trim_end_matches(')'))
        .and_then(|r| r.strip_suffix(")"))
        .filter(|r| r.trim_start().starts_with(','))
    {
        Some((lacks_keyword(before, inner)?, Some(fix)))
    } else if let Some(wrap) = after.strip_prefix(before).filter(|w| w.starts_with('.')) {
        Some((lacks_method(before, wrap)?, Some(fix)))
    } else if before == "for ($$$HEAD) $BODY" {
        Some((lacks_pragma(after)?, None))
    } else if let Some(qual) = before.strip_suffix(" $R $F($$$PARAMS) { $$$BODY }") {
        Some((lacks_qualifier(before, after, qual)?, None))
    } else {
        // A replacement (`tl.exp($X)` -> `tl.exp2($X * ...)`): every match is a site.
        Some((format!("  - pattern: {}\n", q(before)), Some(fix)))
    }
}

/// `f($$$ARGS)` -> `f($$$ARGS, kw=$V)`: the call lacks keyword `kw` (and
/// any keyword that conflicts with it) anywhere.
fn lacks_keyword(before: &str, inner: &str) -> Option<String> {
    let kw = inner.trim_start_matches(',').trim().split('=').next()?.trim().to_string();
    let mut conds = format!("  - pattern: {}\n", q(before));
    let mut kws = vec![kw.clone()];
    kws.extend(conflicting(&kw).map(str::to_string));
    for k in &kws {
        conds.push_str(&format!(
            "  - not:\n      has:\n        kind: argument_list\n        has:\n          kind: keyword_argument\n          has:\n            field: name\n            regex: {}\n",
            q(&format!("^{k}$"))
        ));
    }
    Some(conds)
}

/// `f($$$ARGS)` -> `f($$$ARGS).m($V)`: the call is not already the object of `.m`.
fn lacks_method(before: &str, wrap: &str) -> Option<String> {
    let method = wrap.trim_start_matches('.').split('(').next()?.to_string();
    Some(format!(
        "  - pattern: {}\n  - not:\n      inside:\n        kind: attribute\n        regex: {}\n",
        q(before),
        q(&format!("\\.{method}$"))
    ))
}

/// A loop pragma: a loop not already preceded by it (no fix: ast-grep
/// cannot insert a line before a node).
fn lacks_pragma(after: &str) -> Option<String> {
    let line = after.lines().next()?.trim().to_string();
    let words: Vec<&str> = line.split_whitespace().take(2).collect();
    Some(format!(
        "  - any:\n      - kind: for_statement\n      - kind: for_range_loop\n  - not:\n      follows:\n        kind: preproc_call\n        regex: {}\n",
        q(&format!("^{}\\s+{}", regex_escape(words.first()?), regex_escape(words.get(1)?)))
    ))
}

/// A function qualifier (`__forceinline__` on `__device__` functions): a
/// function with `qual` and without the token (no fix, as for pragmas).
fn lacks_qualifier(before: &str, after: &str, qual: &str) -> Option<String> {
    let token = after.strip_suffix(before)?.trim().to_string();
    Some(format!(
        "  - kind: function_definition\n  - regex: {}\n  - not:\n      regex: {}\n",
        q(&format!("^[^{{]*\\b{}\\b", regex_escape(qual))),
        q(&format!("^[^{{]*\\b{}\\b", regex_escape(&token)))
    ))
}

/// The rule file: id, message, conditions, kernel context, fix, and the
/// pattern's figures as metadata.
fn yaml(p: &Pattern, lang: &str, conds: &str, ctx: &str, fix: Option<&str>, value: &str) -> String {
    let mut y = String::new();
    y.push_str(&format!("id: {}\n", q(&p.id)));
    y.push_str(&format!("language: {lang}\n"));
    y.push_str("severity: hint\n");
    y.push_str(&format!(
        "message: {}\n",
        q(&format!("this site lacks idiom {}, seen {} times upstream", p.title, p.occurrences()))
    ));
    y.push_str(&format!("note: {}\n", q(&p.rationale)));
    y.push_str("rule:\n  all:\n");
    y.push_str(conds);
    y.push_str(ctx);
    if let Some(f) = fix {
        y.push_str(&format!("fix: {}\n", q(f)));
    }
    y.push_str("metadata:\n");
    for (k, v) in [
        ("kidiom_id", q(&p.id)),
        ("kind", q(p.kind.name())),
        ("category", q(p.category.name())),
        ("title", q(&p.title)),
        ("before", q(&p.before)),
        ("after", q(&p.after)),
        ("value", q(value)),
        ("occurrences", p.occurrences().to_string()),
        ("files", p.files().to_string()),
        ("opportunities", p.opportunities().to_string()),
        ("score", format!("{}", p.score)),
    ] {
        y.push_str(&format!("  {k}: {v}\n"));
    }
    y
}

fn conflicting(kw: &str) -> impl Iterator<Item = &'static str> + '_ {
    [("input_precision", "allow_tf32")].into_iter().filter(move |(a, _)| *a == kw).map(|(_, b)| b)
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glued_metavariables_are_found() {
        assert!(glued("[$$$Btorch.float16]"));
        assert!(glued("is not None$$$A"));
        assert!(glued("from fla.ops.$$$Autils import x"));
        assert!(!glued("f($$$ARGS, kw=$V)"));
        assert!(!glued("$A = tl.load($B)"));
    }
    use crate::model::{Category, Kind, ValueCount};

    fn p(id: &str, lang: Lang, before: &str, after: &str, value: &str) -> Pattern {
        Pattern {
            id: id.into(),
            kind: Kind::Usage,
            language: lang,
            category: Category::Precision,
            title: "t".into(),
            rationale: "r".into(),
            mechanism: String::new(),
            before: before.into(),
            after: after.into(),
            support: vec![],
            values: vec![ValueCount { value: value.into(), count: 2, resolved: None, literals: vec![] }],
            examples: vec![],
            commits: vec![],
            score: 1.0,
        }
    }

    #[test]
    fn keyword_rules_use_not_has() {
        let r =
            astgrep_rules(&[p("kw", Lang::Python, "tl.dot($$$ARGS)", "tl.dot($$$ARGS, input_precision=$V)", "'ieee'")]);
        assert_eq!(r.len(), 1);
        let y = &r[0].yaml;
        assert!(y.contains("regex: \"^input_precision$\""), "{y}");
        assert!(y.contains("regex: \"^allow_tf32$\""), "{y}");
        assert!(y.contains("fix: \"tl.dot($$$ARGS, input_precision='ieee')\""), "{y}");
        assert!(y.contains("kidiom_id: \"kw\""));
    }

    #[test]
    fn patterns_without_rewrite_are_skipped() {
        assert!(astgrep_rules(&[p("none", Lang::Python, "", "x", "")]).is_empty());
        let pr =
            astgrep_rules(&[p("pr", Lang::Cuda, "for ($$$HEAD) $BODY", "#pragma unroll\nfor ($$$HEAD) $BODY", "")]);
        assert!(pr[0].yaml.contains("follows"), "{}", pr[0].yaml);
        // which subscript calls are launches of the file's kernels is kidiom's to tell
        let launch = p("nw", Lang::Python, "$KERNEL[$GRID]($$$ARGS)", "$KERNEL[$GRID]($$$ARGS, num_warps=$V)", "8");
        assert!(astgrep_rules(&[launch]).is_empty());
    }
}
