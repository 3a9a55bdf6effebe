//! The tools that act: proposing, validating and accepting rewrites.

use serde_json::Value;

use super::Ctx;
use super::tools::{Tool, ToolError, ToolResult};

pub(crate) const TOOLS: &[Tool] = &[];

pub(crate) fn call(name: &str, _args: &Value, _ctx: &Ctx, _progress: &mut dyn FnMut(u64, u64, &str)) -> ToolResult {
    Err(ToolError(format!("unknown tool {name:?}")))
}
