//! The `kidiom` command line: glue over the miner, patterns, rewriter and
//! validator crates. The service layer is `ops/`; its front ends are the
//! subcommands in `cmd/` (terminal) and the MCP server in `mcp/`; the
//! layouts the terminal and the HTML review share are `view.rs`.

mod apidocs;
mod cli;
mod cmd;
mod config;
mod html;
mod mcp;
mod ops;
mod output;
mod progress;
mod view;

fn main() -> std::process::ExitCode {
    // SAFETY: first thing in main, before any thread starts.
    unsafe { kidiom_exec::scratch::prefer_memory_for_scratch() };
    kidiom_exec::remember_start_dir();
    cli::run(std::env::args_os())
}
