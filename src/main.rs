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
    kidiom_exec::remember_start_dir();
    cli::run(std::env::args_os())
}
