//! The tools that read (the catalog, targets, candidates and evidence),
//! with their JSON schemas, and the catalog's resources.

use kidiom_patterns::{CandidateStatus, Category, Filter, Kind, Lang, Pattern};
use serde_json::{Value, json};

use super::protocol::RpcError;
use super::{Access, Ctx, Tool, ToolError, ToolResult, confine, one_candidate, open, str_arg};

fn filter_props() -> Value {
    json!({
        "language": {"type": "string", "enum": ["python", "cuda", "cpp", "rust"]},
        "category": {"type": "string", "enum": Category::ALL.iter().map(|c| c.name()).collect::<Vec<_>>()},
        "kind": {"type": "string", "enum": ["usage", "edit"]},
        "min_support": {"type": "integer", "minimum": 0, "description": "at least this many occurrences over all corpora"},
        "corpus": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 20},
        "all": {"type": "boolean", "default": false, "description": "also return refactor patterns (renames, imports, API migrations), hidden otherwise unless category is refactor"}
    })
}

pub(crate) const TOOLS: &[Tool] = &[
    Tool {
        name: "search_patterns",
        title: "Search the idiom catalog",
        description: "Ranked search of the idiom catalog in plain words or names (\"faster exponential\", \
                      \"release the GIL during a copy\", \"tl.dot tf32\"): what each idiom does, titles, identifiers, \
                      values, commit messages and examples; any word may match, names match exactly, words are \
                      stemmed and synonyms added. Each result says which terms matched in which fields. Empty \
                      query: the strongest patterns. With filters.",
        access: Access::Read,
        destructive: false,
        idempotent: true,
        input: || {
            let mut p = filter_props();
            p["query"] = json!({"type": "string", "description": "what to find, e.g. \"keep a tensor in L2\" or \"tl.dot precision\""});
            json!({"type": "object", "properties": p, "additionalProperties": false})
        },
    },
    Tool {
        name: "get_pattern",
        title: "Read one pattern",
        description: "A pattern with its support per corpus, value histogram, examples, commits and rewrite templates.",
        access: Access::Read,
        destructive: false,
        idempotent: true,
        input: || json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}),
    },
    Tool {
        name: "list_targets",
        title: "List rewrite targets",
        description: "Kernel source files under a directory of the workspace (default: kidiom.toml's [run] targets, else kernels/), with language and kernel count.",
        access: Access::Read,
        destructive: false,
        idempotent: true,
        input: || json!({"type": "object", "properties": {"path": {"type": "string", "description": "relative to the workspace root"}}, "additionalProperties": false}),
    },
    Tool {
        name: "list_candidates",
        title: "List rewrite candidates",
        description: "Stored rewrite candidates with their status, verdict and predicted speedup (a roofline prediction from work profiles counted on the CPU, not a measurement), strongest prediction first; optionally only one status.",
        access: Access::Read,
        destructive: false,
        idempotent: true,
        input: || json!({"type": "object", "properties": {"status": {"type": "string", "enum": CandidateStatus::ALL.iter().map(|s| s.name()).collect::<Vec<_>>()}}, "additionalProperties": false}),
    },
    Tool {
        name: "get_evidence",
        title: "Read a candidate and its evidence",
        description: "One candidate: its diff, the pattern's provenance, and the validation evidence (gate records, verdict).",
        access: Access::Read,
        destructive: false,
        idempotent: true,
        input: || json!({"type": "object", "properties": {"id": {"type": "string", "description": "candidate id or unique prefix"}}, "required": ["id"], "additionalProperties": false}),
    },
];

fn filter(args: &Value) -> Filter {
    Filter {
        language: str_arg(args, "language").and_then(Lang::from_name),
        category: str_arg(args, "category").and_then(Category::from_name),
        kind: str_arg(args, "kind").and_then(Kind::from_name),
        min_support: args.get("min_support").and_then(Value::as_u64),
        corpus: str_arg(args, "corpus").map(str::to_string),
        limit: Some(args.get("limit").and_then(Value::as_u64).unwrap_or(20) as usize),
        hide_refactor: !args.get("all").and_then(Value::as_bool).unwrap_or(false),
    }
}

/// The fields an agent needs to choose; `get_pattern` gives the rest.
fn summary(p: &Pattern) -> Value {
    json!({
        "id": p.id, "kind": p.kind.name(), "language": p.language.name(), "category": p.category.name(),
        "title": p.title, "mechanism": p.mechanism, "occurrences": p.occurrences(), "files": p.files(),
        "opportunities": p.opportunities(), "score": p.score, "before": p.before, "after": p.after,
    })
}

/// The same engine as `kidiom catalog search` (`Catalog::search_hits`);
/// each result carries its `match` (relevance, matched terms and fields).
fn search_patterns(args: &Value, ctx: &Ctx) -> ToolResult {
    let cat = open(ctx)?;
    let f = filter(args);
    let pats: Vec<Value> = match str_arg(args, "query").map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => cat
            .search_hits(q, &f)?
            .iter()
            .map(|h| {
                let mut v = summary(&h.pattern);
                v["match"] = serde_json::to_value(&h.why).unwrap_or(Value::Null);
                v
            })
            .collect(),
        None => cat.list(&f)?.iter().map(summary).collect(),
    };
    Ok(json!({"patterns": pats}))
}

fn get_pattern(args: &Value, ctx: &Ctx) -> ToolResult {
    let cat = open(ctx)?;
    let id = str_arg(args, "id").unwrap_or("");
    let kept = cat.merged_into(id)?;
    match cat.get(id)?.or(kept.as_deref().map(|k| cat.get(k)).transpose()?.flatten()) {
        Some(p) => Ok(serde_json::to_value(p)?),
        None => Err(ToolError(format!("no pattern with id {id:?}; search_patterns lists ids"))),
    }
}

/// Runs one of these tools; `None` for a tool that is not one of them.
pub(crate) fn call(name: &str, args: &Value, ctx: &Ctx) -> Option<ToolResult> {
    Some(match name {
        "search_patterns" => search_patterns(args, ctx),
        "get_pattern" => get_pattern(args, ctx),
        "list_targets" => list_targets(args, ctx),
        "list_candidates" => list_candidates(args, ctx),
        "get_evidence" => get_evidence(args, ctx),
        _ => return None,
    })
}

fn list_targets(args: &Value, ctx: &Ctx) -> ToolResult {
    let dirs = match str_arg(args, "path") {
        Some(p) => vec![confine(ctx, p)?],
        None => super::actions::default_targets(ctx)?,
    };
    let mut files = Vec::new();
    for path in dirs.iter().map(|d| kidiom_syntax::tree_files(d)).collect::<Result<Vec<_>, _>>()?.concat() {
        let Some(lang) = Lang::from_path(&path) else { continue };
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let kernels = kidiom_syntax::decode(&bytes, &kidiom_syntax::Limits::default())
            .ok()
            .and_then(|t| kidiom_miner::extract(lang, t, &Default::default()).ok())
            .map_or(0, |f| f.kernels);
        let rel = path.strip_prefix(&ctx.root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
        files.push(json!({"path": rel, "language": lang.name(), "kernels": kernels, "bytes": bytes.len()}));
    }
    Ok(json!({"targets": files}))
}

fn list_candidates(args: &Value, ctx: &Ctx) -> ToolResult {
    let cat = open(ctx)?;
    let status = str_arg(args, "status").and_then(CandidateStatus::from_name);
    let cands = cat.candidates(status)?;
    let mut rows: Vec<(Value, Option<(f64, f64)>)> = cands
        .iter()
        .map(|c| {
            let prediction = c.evidence.evidence().and_then(|e| e.prediction.as_ref());
            let row = json!({"id": c.id, "pattern_id": c.pattern_id, "patterns": c.provenance.patterns(), "path": c.path, "status": c.status.name(),
                   "sites": c.sites, "verdict": c.evidence.verdict(), "prediction": prediction});
            (row, prediction.filter(|p| p.speedup.is_finite()).map(|p| (p.discounted(), p.speedup)))
        })
        .collect();
    // the predicted speedup one can count on first (discounted by its expected error on published
    // measurements, then the speedup); the rest keep their order
    rows.sort_by(|(_, a), (_, b)| match (a, b) {
        (Some(x), Some(y)) => y.0.total_cmp(&x.0).then(y.1.total_cmp(&x.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    let rows: Vec<Value> = rows.into_iter().map(|(row, _)| row).collect();
    Ok(json!({"candidates": rows}))
}

fn get_evidence(args: &Value, ctx: &Ctx) -> ToolResult {
    let cat = open(ctx)?;
    let c = one_candidate(&cat, str_arg(args, "id").unwrap_or(""))?;
    Ok(serde_json::to_value(c)?)
}

/// Catalog statistics and corpora, as resources.
pub(crate) fn resources() -> Vec<Value> {
    vec![
        json!({"uri": "kidiom://catalog/stats", "name": "catalog-stats", "title": "Catalog statistics",
               "description": "Patterns by kind, language and category; files and skips", "mimeType": "application/json"}),
        json!({"uri": "kidiom://catalog/corpora", "name": "catalog-corpora", "title": "Mined corpora",
               "description": "Each corpus with its source, revision and when it was mined", "mimeType": "application/json"}),
    ]
}

pub(crate) fn read_resource(uri: &str, ctx: &Ctx) -> Result<Value, RpcError> {
    let cat = open(ctx).map_err(|e| RpcError::new(super::protocol::INTERNAL_ERROR, e))?;
    let internal = |e: kidiom_patterns::Error| RpcError::new(super::protocol::INTERNAL_ERROR, e.to_string());
    let value = match uri {
        "kidiom://catalog/stats" => serde_json::to_value(cat.stats().map_err(internal)?),
        "kidiom://catalog/corpora" => serde_json::to_value(cat.corpora().map_err(internal)?),
        _ => return Err(RpcError::params(format!("unknown resource {uri:?}"))),
    }
    .map_err(|e| RpcError::new(super::protocol::INTERNAL_ERROR, e.to_string()))?;
    Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": value.to_string()}]}))
}
