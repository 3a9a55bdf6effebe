//! SARIF 2.1.0 findings: sites that lack an idiom the corpora use.

use serde_json::{Value, json};

use crate::model::Pattern;

/// One site lacking a pattern's idiom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The pattern id.
    pub pattern_id: String,
    /// The file, relative and `/`-separated.
    pub path: String,
    /// 1-based start line and column (columns count characters).
    pub start: (usize, usize),
    /// 1-based end line and column (exclusive).
    pub end: (usize, usize),
    /// The site's first line.
    pub snippet: String,
}

/// A SARIF 2.1.0 log with one rule per pattern in `patterns` and one
/// result per finding.
pub fn sarif_report(patterns: &[Pattern], findings: &[Finding]) -> Value {
    let rules: Vec<Value> = patterns
        .iter()
        .map(|p| {
            json!({
                "id": p.id,
                "name": p.id,
                "shortDescription": {"text": p.title},
                "fullDescription": {"text": p.rationale},
                "defaultConfiguration": {"level": "note"},
                "properties": {
                    "category": p.category.name(),
                    "kind": p.kind.name(),
                    "before": p.before,
                    "after": p.after,
                    "occurrences": p.occurrences(),
                    "files": p.files(),
                    "opportunities": p.opportunities(),
                    "score": p.score,
                    "support": p.support,
                    "examples": p.examples,
                },
            })
        })
        .collect();
    let results: Vec<Value> = findings
        .iter()
        .filter_map(|f| {
            let idx = patterns.iter().position(|p| p.id == f.pattern_id)?;
            let p = &patterns[idx];
            Some(json!({
                "ruleId": p.id,
                "ruleIndex": idx,
                "level": "note",
                "message": {"text": format!(
                    "this site lacks idiom {}, seen {} times upstream in {} files",
                    p.title, p.occurrences(), p.files()
                )},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path},
                        "region": {
                            "startLine": f.start.0,
                            "startColumn": f.start.1,
                            "endLine": f.end.0,
                            "endColumn": f.end.1,
                            "snippet": {"text": f.snippet},
                        },
                    },
                }],
            }))
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "kidiom",
                "informationUri": "https://example.invalid/kidiom",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Category, Kind, Lang};

    #[test]
    fn report_shape() {
        let p = Pattern {
            id: "p".into(),
            kind: Kind::Usage,
            language: Lang::Python,
            category: Category::Math,
            title: "t".into(),
            rationale: "r".into(),
            mechanism: String::new(),
            before: "b".into(),
            after: "a".into(),
            support: vec![],
            values: vec![],
            examples: vec![],
            commits: vec![],
            score: 1.0,
        };
        let f =
            Finding { pattern_id: "p".into(), path: "k.py".into(), start: (3, 5), end: (3, 9), snippet: "x".into() };
        let ghost = Finding { pattern_id: "q".into(), ..f.clone() };
        let v = sarif_report(&[p], &[f, ghost]);
        assert_eq!(v["version"], "2.1.0");
        let results = v["runs"][0]["results"].as_array().unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 3);
        assert_eq!(v["runs"][0]["tool"]["driver"]["rules"][0]["id"], "p");
    }
}
