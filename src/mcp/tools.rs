//! The tools and resources the MCP server offers, with their JSON schemas.

use std::path::{Path, PathBuf};

use kidiom_patterns::{CandidateStatus, Catalog, Category, Filter, Kind, Lang, Pattern};
use serde_json::{Value, json};

use super::Ctx;
use super::protocol::RpcError;

/// A failing tool: reported to the agent as a result with `isError: true`.
pub(crate) struct ToolError(pub(crate) String);

impl<E: std::fmt::Display> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError(e.to_string())
    }
}

pub(crate) type ToolResult = Result<Value, ToolError>;

/// What a tool may touch, which decides its annotations and whether this server runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads the catalog or the workspace; changes nothing.
    Read,
    /// Adds or updates rows of the catalog (candidates, evidence); never the workspace files.
    Catalog,
    /// Writes the workspace (files, the review branch): needs `--allow-write`.
    Workspace,
    /// Runs code the agent supplies (and writes the catalog): needs `--allow-exec`.
    Exec,
}

pub(crate) struct Tool {
    pub(crate) name: &'static str,
    pub(crate) title: &'static str,
    pub(crate) description: &'static str,
    pub(crate) access: Access,
    /// Whether it may overwrite or remove what exists (files).
    pub(crate) destructive: bool,
    /// Whether calling it again with the same arguments has no further effect.
    pub(crate) idempotent: bool,
    pub(crate) input: fn() -> Value,
}

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

const TOOLS: &[Tool] = &[
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
        description: "Kernel source files under a directory of the workspace (default kernels/), with language and kernel count.",
        access: Access::Read,
        destructive: false,
        idempotent: true,
        input: || json!({"type": "object", "properties": {"path": {"type": "string", "description": "relative to the workspace root"}}, "additionalProperties": false}),
    },
    Tool {
        name: "list_candidates",
        title: "List rewrite candidates",
        description: "Stored rewrite candidates with their status; optionally only one status.",
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

/// The tool descriptions for `tools/list`.
pub(crate) fn list() -> Vec<Value> {
    TOOLS
        .iter()
        .chain(super::actions::TOOLS)
        .map(|t| {
            let note = match t.access {
                Access::Read => "",
                Access::Catalog => " Writes to the catalog (candidates, evidence), never to the workspace's files.",
                Access::Workspace => " Writes to the workspace: needs a server started with --allow-write.",
                Access::Exec => {
                    " Executes the submitted code (compile, correctness check, benchmark) and writes the catalog: \
                     needs a server started with --allow-exec."
                }
            };
            json!({
                "name": t.name,
                "title": t.title,
                "description": format!("{}{note}", t.description),
                "inputSchema": (t.input)(),
                "annotations": {
                    "title": t.title,
                    "readOnlyHint": t.access == Access::Read,
                    "destructiveHint": t.destructive,
                    "idempotentHint": t.idempotent,
                    "openWorldHint": false,
                },
            })
        })
        .collect()
}

/// Runs a tool. Unknown tools and arguments that do not fit the schema are
/// protocol errors; a tool that fails is a result with `isError: true`.
pub(crate) fn call(
    name: &str,
    args: &Value,
    ctx: &Ctx,
    progress: &mut dyn FnMut(u64, u64, &str),
) -> Result<Value, RpcError> {
    let tool = TOOLS
        .iter()
        .chain(super::actions::TOOLS)
        .find(|t| t.name == name)
        .ok_or_else(|| RpcError::params(format!("unknown tool {name:?}")))?;
    check_args(args, &(tool.input)())?;
    let refused = match tool.access {
        Access::Workspace if !ctx.allow_write => Some(format!(
            "{name} writes to the workspace, and this server is read-only: restart it with `kidiom mcp --allow-write`"
        )),
        Access::Exec if !ctx.allow_exec => Some(format!(
            "{name} executes the code of the patch it is given (compiles, correctness checks, benchmarks), and this \
             server was not started to allow that: restart it with `kidiom mcp --allow-exec` (--allow-write does not \
             enable it)"
        )),
        _ => None,
    };
    let out = if let Some(msg) = refused {
        Err(ToolError(msg))
    } else {
        match name {
            "search_patterns" => search_patterns(args, ctx),
            "get_pattern" => get_pattern(args, ctx),
            "list_targets" => list_targets(args, ctx),
            "list_candidates" => list_candidates(args, ctx),
            "get_evidence" => get_evidence(args, ctx),
            other => super::actions::call(other, args, ctx, progress),
        }
    };
    Ok(match out {
        Ok(v) => json!({
            "content": [{"type": "text", "text": serde_json::to_string_pretty(&v).unwrap_or_default()}],
            "structuredContent": v,
            "isError": false,
        }),
        Err(ToolError(msg)) => json!({"content": [{"type": "text", "text": msg}], "isError": true}),
    })
}

/// Checks the argument object against the small subset of JSON Schema we
/// use: known properties, required ones, and their types.
fn check_args(args: &Value, schema: &Value) -> Result<(), RpcError> {
    let empty = serde_json::Map::new();
    let props = schema["properties"].as_object().unwrap_or(&empty);
    let obj = args.as_object().unwrap_or(&empty);
    for key in obj.keys() {
        if !props.contains_key(key) {
            return Err(RpcError::params(format!("unknown argument {key:?}")));
        }
    }
    if let Some(req) = schema["required"].as_array() {
        for r in req.iter().filter_map(Value::as_str) {
            if !obj.contains_key(r) {
                return Err(RpcError::params(format!("missing argument {r:?}")));
            }
        }
    }
    for (key, v) in obj {
        let ty = props[key]["type"].as_str().unwrap_or("");
        let ok = match ty {
            "string" => v.is_string(),
            "integer" => v.is_u64() || v.is_i64(),
            "boolean" => v.is_boolean(),
            "array" => v.is_array(),
            _ => true,
        };
        if !ok {
            return Err(RpcError::params(format!("argument {key:?} must be a {ty}")));
        }
        if let (Some(choices), Some(s)) = (props[key]["enum"].as_array(), v.as_str())
            && !choices.iter().any(|c| c == s)
        {
            return Err(RpcError::params(format!(
                "argument {key:?}: {s:?} is not one of {}",
                Value::Array(choices.clone())
            )));
        }
    }
    Ok(())
}

pub(crate) fn open(ctx: &Ctx) -> Result<Catalog, String> {
    if !ctx.db.exists() {
        return Err(format!("no catalog at {} (run `kidiom mine` first)", ctx.db.display()));
    }
    Catalog::open(&ctx.db).map_err(|e| e.to_string())
}

pub(crate) fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

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
    match cat.get(id)? {
        Some(p) => Ok(serde_json::to_value(p)?),
        None => Err(ToolError(format!("no pattern with id {id:?}; search_patterns lists ids"))),
    }
}

/// Resolves a path an agent gave, refusing anything outside the workspace
/// (absolute paths elsewhere, `..`, symlinks that lead out).
pub(crate) fn confine(ctx: &Ctx, rel: &str) -> Result<PathBuf, ToolError> {
    let p = Path::new(rel);
    let joined = if p.is_absolute() { p.to_path_buf() } else { ctx.root.join(p) };
    // Canonicalizing resolves `..` and symlinks, so the check below sees where the path really leads.
    let canon = joined.canonicalize().map_err(|e| ToolError(format!("{rel}: {e}")))?;
    if !canon.starts_with(&ctx.root) {
        return Err(ToolError(format!("{rel} is outside the workspace {}; refused", ctx.root.display())));
    }
    Ok(canon)
}

fn list_targets(args: &Value, ctx: &Ctx) -> ToolResult {
    let dir = confine(ctx, str_arg(args, "path").unwrap_or("kernels"))?;
    let mut files = Vec::new();
    let walk = walk(&dir)?;
    for path in walk {
        let Some(lang) = Lang::from_path(&path) else { continue };
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let kernels = kidiom_miner::decode(&bytes, &kidiom_miner::Limits::default())
            .ok()
            .and_then(|t| kidiom_miner::extract(lang, t, &Default::default()).ok())
            .map_or(0, |f| f.kernels);
        let rel = path.strip_prefix(&ctx.root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
        files.push(json!({"path": rel, "language": lang.name(), "kernels": kernels, "bytes": bytes.len()}));
    }
    Ok(json!({"targets": files}))
}

fn walk(dir: &Path) -> Result<Vec<PathBuf>, ToolError> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let name = e.file_name();
            if name.to_string_lossy().starts_with('.') || name == "__pycache__" {
                continue;
            }
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

fn list_candidates(args: &Value, ctx: &Ctx) -> ToolResult {
    let cat = open(ctx)?;
    let status = str_arg(args, "status").and_then(CandidateStatus::from_name);
    let cands = cat.candidates(status)?;
    let rows: Vec<Value> = cands
        .iter()
        .map(|c| {
            json!({"id": c.id, "pattern_id": c.pattern_id, "path": c.path, "status": c.status.name(),
                   "sites": c.sites, "verdict": c.evidence.get("verdict").cloned().unwrap_or(Value::Null)})
        })
        .collect();
    Ok(json!({"candidates": rows}))
}

pub(crate) fn one_candidate(cat: &Catalog, id: &str) -> Result<kidiom_patterns::Candidate, ToolError> {
    let mut found = cat.find_candidates(id)?;
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ToolError(format!("no candidate {id:?}; list_candidates lists ids"))),
        n => Err(ToolError(format!("{id:?} matches {n} candidates; give more of the id"))),
    }
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
