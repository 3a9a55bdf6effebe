//! `kidiom mcp`: a Model Context Protocol server over stdio.
//!
//! An agent searches and reads the catalog, lists targets and candidates
//! (kidiom.toml's `[run] targets` by default, else kernels/), proposes
//! rewrites (dry runs that return diffs) and validates them, without
//! scraping terminal output. Write actions (accepting a candidate, writing a
//! rewrite or a contract skeleton into the tree) run only when the server was started with
//! `--allow-write`; validating an agent's own patch (`validate_patch`, which
//! executes that code) only with `--allow-exec`. Proposing and validating
//! catalog rewrites write candidates and evidence to the catalog, never the
//! workspace. Every path an agent names is confined to the workspace root. The server never exits on a bad request: protocol errors become
//! JSON-RPC errors, failing tools become results with `isError: true`.
//!
//! This module is the protocol and the registry of tools (`tools.rs`: the
//! tools that read; `actions.rs`: the tools that act); the work is
//! `crate::ops`'s, as for the terminal commands.

mod actions;
mod protocol;
mod tools;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use kidiom_patterns::Catalog;
use serde_json::{Value, json};

use crate::cmd::args::CatalogArgs;
use crate::config::Config;
use protocol::{Incoming, RpcError};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Allow tools that write: accepting candidates and writing rewrites into the tree.
    #[arg(long)]
    allow_write: bool,
    /// Allow validate_patch: validating an agent's own patch, which compiles and runs its code.
    #[arg(long)]
    allow_exec: bool,
    /// The workspace root that every path is confined to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    #[command(flatten)]
    catalog: CatalogArgs,
}

/// What every tool call can see.
pub(crate) struct Ctx {
    /// Canonical workspace root.
    pub(crate) root: PathBuf,
    pub(crate) db: PathBuf,
    pub(crate) allow_write: bool,
    pub(crate) allow_exec: bool,
    /// kidiom.toml's "predicted slower" limits for the static gate.
    pub(crate) static_limits: kidiom_validator::StaticLimits,
    /// The device the work profiles predict times for.
    pub(crate) device_model: Option<kidiom_validator::predict::DeviceModel>,
    /// `kidiom predict --check`'s held-out errors.
    pub(crate) expected_errors: Option<kidiom_validator::published::ExpectedErrors>,
    /// kidiom.toml's `[run] targets`: where the validator also looks for manifests.
    pub(crate) targets: Vec<PathBuf>,
}

pub(crate) fn run(args: Args) -> Result<ExitCode> {
    let root = match &args.root {
        Some(r) => r.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let root = root.canonicalize().with_context(|| format!("workspace root {}", root.display()))?;
    let cfg = Config::load_from(&root.join("kidiom.toml"))?;
    let db = match &args.catalog.db {
        Some(p) if p.is_absolute() => p.clone(),
        Some(p) => root.join(p),
        None => cfg.resolve(&cfg.catalog.path),
    };
    // Commands resolve paths against the current directory: make it the root.
    std::env::set_current_dir(&root).with_context(|| format!("entering {}", root.display()))?;
    let ctx = Ctx {
        root,
        db,
        allow_write: args.allow_write,
        allow_exec: args.allow_exec,
        static_limits: cfg.validate.static_limits,
        device_model: cfg.device_model()?,
        expected_errors: cfg.expected_errors(),
        targets: cfg.targets(),
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    serve(stdin.lock(), stdout.lock(), &ctx)?;
    Ok(ExitCode::SUCCESS)
}

/// Serves requests until the input ends.
pub(crate) fn serve(input: impl BufRead, mut out: impl Write, ctx: &Ctx) -> Result<()> {
    for line in input.lines() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match protocol::parse(&line) {
            Incoming::Request { id, method, params } => {
                let mut notify = |v: Value| send(&mut out, &v);
                Some(match handle(&method, params, ctx, &mut notify) {
                    Ok(result) => protocol::response(&id, result),
                    Err(e) => protocol::error(&id, &e),
                })
            }
            // Notifications (initialized, cancelled) need no answer; we have no requests in flight.
            Incoming::Notification | Incoming::Response => None,
            Incoming::Invalid { id, error } => Some(protocol::error(&id, &error)),
        };
        if let Some(r) = reply {
            send(&mut out, &r).context("writing stdout")?;
        }
    }
    Ok(())
}

fn send(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")?;
    out.flush()
}

fn handle(
    method: &str,
    params: Value,
    ctx: &Ctx,
    notify: &mut dyn FnMut(Value) -> std::io::Result<()>,
) -> Result<Value, RpcError> {
    match method {
        "initialize" => {
            let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("");
            let version =
                protocol::PROTOCOL_VERSIONS.iter().find(|v| **v == asked).unwrap_or(&protocol::PROTOCOL_VERSIONS[0]);
            Ok(json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}, "resources": {"listChanged": false, "subscribe": false}},
                "serverInfo": {"name": "kidiom", "version": env!("CARGO_PKG_VERSION")},
                "instructions": format!(
                    "kidiom: a catalog of GPU-kernel optimization idioms mined from SGLang, FLA and DeepGEMM, \
                     and rewrites of the kernels under {} that apply them. Search with search_patterns, read \
                     with get_pattern, propose_rewrite returns diffs (dry run), validate_candidate runs the \
                     gates, validate_patch validates an edit of your own, init_contract writes the contract \
                     skeleton of a kernel of your own. Write tools are {}; validate_patch is {}.",
                    ctx.root.display(),
                    if ctx.allow_write { "enabled" } else { "disabled (start with --allow-write)" },
                    if ctx.allow_exec { "enabled" } else { "disabled (start with --allow-exec)" }
                ),
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": list_tools()})),
        "tools/call" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::params("tools/call needs a \"name\""))?;
            let args = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
            if !args.is_object() {
                return Err(RpcError::params("\"arguments\" must be an object"));
            }
            let token = params.get("_meta").and_then(|m| m.get("progressToken")).cloned();
            let mut progress = |done: u64, total: u64, message: &str| {
                if let Some(t) = &token {
                    let n = protocol::notification(
                        "notifications/progress",
                        json!({"progressToken": t, "progress": done, "total": total, "message": message}),
                    );
                    let _ = notify(n);
                }
            };
            call_tool(name, &args, ctx, &mut progress)
        }
        "resources/list" => Ok(json!({"resources": tools::resources()})),
        "resources/read" => {
            let uri = params
                .get("uri")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::params("resources/read needs a \"uri\""))?;
            tools::read_resource(uri, ctx)
        }
        "resources/templates/list" => Ok(json!({"resourceTemplates": []})),
        "prompts/list" => Ok(json!({"prompts": []})),
        other => Err(RpcError::new(protocol::METHOD_NOT_FOUND, format!("unknown method {other:?}"))),
    }
}

// The registry of tools ------------------------------------------------------------------------

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

/// The tool descriptions for `tools/list`.
fn list_tools() -> Vec<Value> {
    tools::TOOLS
        .iter()
        .chain(actions::TOOLS)
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
fn call_tool(name: &str, args: &Value, ctx: &Ctx, progress: &mut dyn FnMut(u64, u64, &str)) -> Result<Value, RpcError> {
    let tool = tools::TOOLS
        .iter()
        .chain(actions::TOOLS)
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
        tools::call(name, args, ctx).unwrap_or_else(|| actions::call(name, args, ctx, progress))
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

/// The candidate `id` names (exactly or as a unique prefix).
pub(crate) fn one_candidate(cat: &Catalog, id: &str) -> Result<kidiom_patterns::Candidate, ToolError> {
    crate::ops::candidates::find_one(cat, id).map_err(|e| ToolError(format!("{e:#}")))
}
