//! `kidiom mcp`: a Model Context Protocol server over stdio.
//!
//! An agent searches and reads the catalog, lists targets and candidates,
//! proposes rewrites (dry runs that return diffs) and validates them, without
//! scraping terminal output. Write actions (accepting a candidate, writing a
//! rewrite into the tree) run only when the server was started with
//! `--allow-write`; validating an agent's own patch (`validate_patch`, which
//! executes that code) only with `--allow-exec`. Proposing and validating
//! catalog rewrites write candidates and evidence to the catalog, never the
//! workspace. Every path an agent names is confined to the workspace root. The server never exits on a bad request: protocol errors become
//! JSON-RPC errors, failing tools become results with `isError: true`.

mod actions;
mod protocol;
mod tools;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::cmd::CatalogArgs;
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
                     gates, validate_patch validates an edit of your own. Write tools are {}; validate_patch is {}.",
                    ctx.root.display(),
                    if ctx.allow_write { "enabled" } else { "disabled (start with --allow-write)" },
                    if ctx.allow_exec { "enabled" } else { "disabled (start with --allow-exec)" }
                ),
            }))
        }
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools::list()})),
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
            tools::call(name, &args, ctx, &mut progress)
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
