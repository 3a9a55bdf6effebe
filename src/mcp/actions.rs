//! The tools that act: proposing, applying, validating and accepting rewrites.

use std::path::PathBuf;
use std::time::Duration;

use kidiom_patterns::{Category, Filter, Kind};
use kidiom_validator::Device;
use serde_json::{Value, json};

use super::{Access, Ctx, Tool, ToolError, ToolResult, confine, one_candidate, open, str_arg};
use crate::ops::{self, accept, apply, validate};

fn rewrite_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "pattern_ids": {"type": "array", "items": {"type": "string"}, "description": "patterns to apply (default: every pattern with a rewrite, after the filters)"},
            "targets": {"type": "array", "items": {"type": "string"}, "description": "files or directories, relative to the workspace root (default: kidiom.toml's [run] targets, else kernels)"},
            "category": {"type": "string", "enum": Category::ALL.iter().map(|c| c.name()).collect::<Vec<_>>()},
            "kind": {"type": "string", "enum": ["usage", "edit"]},
            "value": {"type": "string", "description": "the value to write into the pattern's hole (default: the dominant upstream value)"}
        },
        "additionalProperties": false
    })
}

/// The schema of a validating tool: its own properties (`required` among
/// them) and the device and time limit every validation takes.
fn validation_schema(own: Value, required: &str) -> Value {
    let mut props = own;
    props["device"] =
        json!({"type": "string", "enum": Device::ALL.iter().map(|d| d.name()).collect::<Vec<_>>(), "default": "auto"});
    props["timeout_seconds"] = json!({"type": "integer", "minimum": 1, "maximum": 3600, "default": 600});
    json!({"type": "object", "properties": props, "required": [required], "additionalProperties": false})
}

pub(crate) const TOOLS: &[Tool] = &[
    Tool {
        name: "propose_rewrite",
        title: "Propose rewrites (dry run)",
        description: "Applies catalog patterns to target files without writing them; returns each candidate's \
                      unified diff and stores the candidates in the catalog for validation (proposing the same \
                      rewrite again updates the same candidate).",
        access: Access::Catalog,
        destructive: false,
        idempotent: true,
        input: rewrite_schema,
    },
    Tool {
        name: "validate_candidate",
        title: "Validate a rewrite candidate",
        description: "Runs the syntax, static, correctness and (on a GPU) speed gates on candidates; returns the \
                      gate records and the verdict, and stores them as each candidate's evidence (replacing \
                      earlier evidence; fresh seeds each time). Reports progress notifications.",
        access: Access::Catalog,
        destructive: false,
        idempotent: false,
        input: || {
            validation_schema(
                json!({"ids": {"type": "array", "items": {"type": "string"}, "description": "candidate ids or unique prefixes"}}),
                "ids",
            )
        },
    },
    Tool {
        name: "validate_patch",
        title: "Validate an edit of your own",
        description: "Stores a unified diff against the workspace (an edit that did not come from the catalog) as \
                      a candidate of the pattern `manual` and runs the same gates on it as validate_candidate; \
                      returns and stores the evidence. Without a category, numeric flags may not change.",
        access: Access::Exec,
        destructive: false,
        idempotent: false,
        input: || {
            validation_schema(
                json!({
                    "patch": {"type": "string", "description": "a unified diff (git diff or diff -u) against files under the workspace root"},
                    "category": {"type": "string", "enum": Category::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(), "description": "the edit's category; numeric flags may change only under precision"}
                }),
                "patch",
            )
        },
    },
    Tool {
        name: "apply_rewrite",
        title: "Write rewrites into the tree",
        description: "Like propose_rewrite, but writes the rewritten files (atomically; refuses files with \
                      uncommitted changes).",
        access: Access::Workspace,
        destructive: true,
        idempotent: false,
        input: rewrite_schema,
    },
    Tool {
        name: "init_contract",
        title: "Write a kernel's manifest and contract skeleton",
        description: "`kidiom init`: reads a kernel file of the workspace (a Triton kernel and the function \
                      that launches it, or a CUDA extern \"C\" __global__ kernel) and writes a format-2 manifest \
                      and a contract skeleton beside it (docs/CONTRACTS.md); returns what it read (the arguments' \
                      roles, the shape variables) and what is left to write, marked TODO in the files (the float64 \
                      reference, sizes, the floor). Refuses to replace either file unless `force`.",
        access: Access::Workspace,
        destructive: true,
        idempotent: false,
        input: || {
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "the kernel file (.py or .cu), relative to the workspace root"},
                    "force": {"type": "boolean", "default": false, "description": "replace an existing manifest or contract module"},
                    "entry": {"type": "string", "description": "the kernel to write the contract of, where the file launches several (the result's `others` lists them)"}
                },
                "required": ["path"],
                "additionalProperties": false
            })
        },
    },
    Tool {
        name: "accept_candidate",
        title: "Accept a candidate",
        description: "Commits a candidate on the review branch (kidiom/review), with its pattern, provenance and \
                      evidence as trailers; the working tree and HEAD are left alone. Refused unless the \
                      candidate's verdict is `accepted` (needs-gpu, unverified, rejected, error and never validated are \
                      refused with the reason); `force: true` commits it anyway.",
        access: Access::Workspace,
        destructive: false,
        idempotent: false,
        input: || {
            json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "branch": {"type": "string", "default": crate::ops::branch::DEFAULT_BRANCH},
                    "force": {"type": "boolean", "default": false, "description": "commit even though the verdict is not accepted"}
                },
                "required": ["id"],
                "additionalProperties": false
            })
        },
    },
];

pub(crate) fn call(name: &str, args: &Value, ctx: &Ctx, progress: &mut dyn FnMut(u64, u64, &str)) -> ToolResult {
    match name {
        "propose_rewrite" => rewrite(args, ctx, false),
        "apply_rewrite" => rewrite(args, ctx, true),
        "validate_candidate" => validate_candidates(args, ctx, progress),
        "validate_patch" => validate_patch(args, ctx, progress),
        "accept_candidate" => accept_candidate(args, ctx),
        "init_contract" => init_contract(args, ctx),
        other => Err(ToolError(format!("unknown tool {other:?}"))),
    }
}

fn strings(args: &Value, key: &str) -> Vec<String> {
    args.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn rewrite(args: &Value, ctx: &Ctx, write: bool) -> ToolResult {
    let mut cat = open(ctx)?;
    let mut targets = Vec::new();
    for t in strings(args, "targets") {
        targets.push(confine(ctx, &t)?);
    }
    if targets.is_empty() {
        targets = default_targets(ctx)?;
    }
    let patterns = strings(args, "pattern_ids");
    let req = apply::Request {
        targets: &targets,
        patterns: &patterns,
        filter: Filter {
            category: str_arg(args, "category").and_then(Category::from_name),
            kind: str_arg(args, "kind").and_then(Kind::from_name),
            hide_refactor: true,
            ..Default::default()
        },
        value: str_arg(args, "value"),
        write,
        force: false,
        search: None,
    };
    let report = apply::apply(&mut cat, &ctx.root, &req).map_err(|e| ToolError(format!("{e:#}")))?;
    Ok(serde_json::to_value(report)?)
}

/// Where a tool looks when the agent names no target: kidiom.toml's
/// `[run] targets` (as `kidiom run` and `kidiom validate` do), else kernels/.
pub(crate) fn default_targets(ctx: &Ctx) -> Result<Vec<PathBuf>, ToolError> {
    if ctx.targets.is_empty() {
        return Ok(vec![confine(ctx, "kernels")?]);
    }
    ctx.targets.iter().map(|t| confine(ctx, &t.to_string_lossy())).collect()
}

fn options(args: &Value, ctx: &Ctx) -> Result<validate::Options, ToolError> {
    let name = str_arg(args, "device").unwrap_or("auto");
    let device =
        kidiom_validator::Device::from_name(name).ok_or_else(|| ToolError(format!("unknown device {name:?}")))?;
    let timeout = Duration::from_secs(args.get("timeout_seconds").and_then(Value::as_u64).unwrap_or(600).max(1));
    Ok(validate::Options {
        device,
        timeout,
        seeds: kidiom_validator::DEFAULT_SEEDS,
        seed: None,
        consistency: true,
        python: None,
        executor: kidiom_validator::Executor::Local,
        static_limits: Some(ctx.static_limits),
        device_model: ctx.device_model.clone(),
        expected_errors: ctx.expected_errors.clone(),
        untrusted_bench: false,
        targets: ctx.targets.clone(),
    })
}

fn validate_patch(args: &Value, ctx: &Ctx, progress: &mut dyn FnMut(u64, u64, &str)) -> ToolResult {
    let cat = open(ctx)?;
    let diff = str_arg(args, "patch").unwrap_or("");
    let category = match str_arg(args, "category") {
        Some(c) => Some(Category::from_name(c).ok_or_else(|| ToolError(format!("unknown category {c:?}")))?),
        None => None,
    };
    let opts = options(args, ctx)?;
    let c = ops::candidates::store_patch(&cat, &ctx.root, diff, category).map_err(|e| ToolError(format!("{e:#}")))?;
    let cands = [c];
    validate_reporting(&cat, &cands, &opts, progress)
}

fn validate_candidates(args: &Value, ctx: &Ctx, progress: &mut dyn FnMut(u64, u64, &str)) -> ToolResult {
    let cat = open(ctx)?;
    let mut cands = Vec::new();
    for id in strings(args, "ids") {
        cands.push(one_candidate(&cat, &id)?);
    }
    if cands.is_empty() {
        return Err(ToolError("no candidate ids given; list_candidates lists them".into()));
    }
    let opts = options(args, ctx)?;
    validate_reporting(&cat, &cands, &opts, progress)
}

/// Validates `cands`, with a progress notification as each starts and ends.
fn validate_reporting(
    cat: &kidiom_patterns::Catalog,
    cands: &[kidiom_patterns::Candidate],
    opts: &validate::Options,
    progress: &mut dyn FnMut(u64, u64, &str),
) -> ToolResult {
    let total = cands.len() as u64;
    // candidates run at once and end in any order: the progress is how many have ended
    let mut ended = 0;
    let report = validate::validate_all(cat, cands, opts, &mut |_, c, ev| match ev {
        None => progress(ended, total, &format!("validating {}", c.id)),
        Some(ev) => {
            ended += 1;
            progress(ended, total, &format!("{}: {}", c.id, ev.verdict.describe()))
        }
    })
    .map_err(|e| ToolError(format!("{e:#}")))?;
    Ok(json!({"candidates": report.candidates}))
}

fn init_contract(args: &Value, ctx: &Ctx) -> ToolResult {
    let path = confine(ctx, str_arg(args, "path").unwrap_or(""))?;
    let force = args.get("force").and_then(Value::as_bool).unwrap_or(false);
    let entry = str_arg(args, "entry");
    let mut report = ops::init::init(&path, force, entry).map_err(|e| ToolError(format!("{e:#}")))?;
    // paths as the agent names them: relative to the workspace root
    for p in [&mut report.manifest, &mut report.contract] {
        if let Ok(rel) = p.strip_prefix(&ctx.root) {
            *p = rel.to_path_buf();
        }
    }
    Ok(serde_json::to_value(report)?)
}

fn accept_candidate(args: &Value, ctx: &Ctx) -> ToolResult {
    let cat = open(ctx)?;
    let id = str_arg(args, "id").unwrap_or("");
    let branch = str_arg(args, "branch").unwrap_or(crate::ops::branch::DEFAULT_BRANCH);
    let force = args.get("force").and_then(Value::as_bool).unwrap_or(false);
    let (id, commit) = accept::accept(&cat, &ctx.root, id, branch, force).map_err(|e| ToolError(format!("{e:#}")))?;
    Ok(json!({"candidate": id, "branch": branch, "commit": commit}))
}
