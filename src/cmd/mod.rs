//! One module per subcommand: each has an `Args` (or `Command`) type and a
//! `run` returning the exit code. A command parses its arguments, calls
//! the service layer (`crate::ops`) and prints what comes back; it holds
//! no logic the MCP server would need.

pub(crate) mod accept;
pub(crate) mod apply;
pub(crate) mod args;
pub(crate) mod catalog;
pub(crate) mod check;
pub(crate) mod debug;
pub(crate) mod export;
pub(crate) mod gpu_gate;
pub(crate) mod import;
pub(crate) mod init;
pub(crate) mod mine;
pub(crate) mod predict;
pub(crate) mod profile;
pub(crate) mod review;
pub(crate) mod run;
pub(crate) mod shard;
pub(crate) mod validate;

/// The value parser of an option that names an enum (`--category precision`,
/// `--device cpu`): the names are the enum's own, and a wrong one is told
/// what the right ones are.
pub(crate) fn named<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr + strum::VariantArray + Copy + Into<&'static str>,
{
    s.parse().map_err(|_| {
        let names: Vec<&'static str> = T::VARIANTS.iter().map(|v| (*v).into()).collect();
        format!("unknown value {s:?} (one of: {})", names.join(", "))
    })
}

/// The value parser of `--executor`: `local`, `ray` or `ray://HOST:PORT`.
pub(crate) fn executor(s: &str) -> Result<kidiom_validator::Executor, String> {
    s.parse().map_err(|e: kidiom_validator::ParseExecutorError| e.to_string())
}
