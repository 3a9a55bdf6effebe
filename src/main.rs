//! The `kidiom` command line: glue over the miner, patterns, rewriter and
//! validator crates. Each subcommand lives in `cmd/`.

mod apidocs;
mod cli;
mod cmd;
mod config;
mod driver;
mod history;
mod html;
mod mcp;
mod output;
mod sitesearch;
mod snapshot;

fn main() -> std::process::ExitCode {
    cli::run(std::env::args_os())
}
