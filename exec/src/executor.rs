//! Where harness calls run: here, as subprocesses ([`Executor::Local`], the
//! default), or as tasks on a Ray cluster ([`Executor::Ray`], through one
//! `python -m kernels.harness fleet` driver per validation run; see
//! [`crate::fleet`] and docs/RAY.md). Either way a call returns
//! the harness's wire JSON unchanged and the gates judge it the same.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where the harness runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Executor {
    /// Subprocesses on this machine.
    #[default]
    Local,
    /// Tasks on a Ray cluster.
    Ray {
        /// The cluster: `ray://HOST:PORT` (Ray Client), `HOST:PORT` (a GCS
        /// address, from a node of the cluster), or `None` for Ray's own
        /// choice (`$RAY_ADDRESS`, a cluster started on this machine, else a
        /// new local one, stopped at the end of the run).
        address: Option<String>,
    },
}

/// A string that names no executor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad executor {given:?}: {why} (expected local, ray or ray://HOST:PORT)")]
pub struct ParseExecutorError {
    /// What was given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl FromStr for Executor {
    type Err = ParseExecutorError;

    /// `local`, `ray`, or `ray://HOST:PORT`.
    fn from_str(s: &str) -> Result<Executor, ParseExecutorError> {
        let bad = |why| ParseExecutorError { given: s.to_string(), why };
        match s {
            "local" => return Ok(Executor::Local),
            "ray" => return Ok(Executor::Ray { address: None }),
            _ => {}
        }
        let Some(hostport) = s.strip_prefix("ray://") else {
            return Err(bad("unknown executor"));
        };
        let Some((host, port)) = hostport.rsplit_once(':') else {
            return Err(bad("the address needs a port"));
        };
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        if host.is_empty() || host.contains(['/', ' ', '@', '?', '#']) {
            return Err(bad("the address needs a host name or IP"));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(Executor::Ray { address: Some(s.to_string()) }),
            _ => Err(bad("the port must be a number from 1 to 65535")),
        }
    }
}

impl fmt::Display for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Executor::Local => f.write_str("local"),
            Executor::Ray { address: None } => f.write_str("ray"),
            Executor::Ray { address: Some(a) } if a.starts_with("ray://") => f.write_str(a),
            Executor::Ray { address: Some(a) } => write!(f, "ray ({a})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_local_ray_and_ray_client_addresses() {
        assert_eq!("local".parse(), Ok(Executor::Local));
        assert_eq!(Executor::default(), Executor::Local);
        assert_eq!("ray".parse(), Ok(Executor::Ray { address: None }));
        let e: Executor = "ray://head.example:10001".parse().unwrap();
        assert_eq!(e, Executor::Ray { address: Some("ray://head.example:10001".into()) });
        assert_eq!(e.to_string(), "ray://head.example:10001");
        assert_eq!("ray://[::1]:10001".parse::<Executor>().map(|e| e.to_string()), Ok("ray://[::1]:10001".into()));
        for s in ["local".to_string(), "ray".into(), "ray://10.0.0.1:10001".into()] {
            assert_eq!(s.parse::<Executor>().unwrap().to_string(), s, "round trip");
        }
    }

    #[test]
    fn bad_executors_say_why() {
        let why = |s: &str| s.parse::<Executor>().unwrap_err().why;
        assert_eq!(why("slurm"), "unknown executor");
        assert_eq!(why(""), "unknown executor");
        assert_eq!(why("Ray"), "unknown executor");
        assert_eq!(why("ray://head"), "the address needs a port");
        assert_eq!(why("ray://:10001"), "the address needs a host name or IP");
        assert_eq!(why("ray://head:0"), "the port must be a number from 1 to 65535");
        assert_eq!(why("ray://head:99999"), "the port must be a number from 1 to 65535");
        assert_eq!(why("ray://head:port"), "the port must be a number from 1 to 65535");
        let e = "ray:/x".parse::<Executor>().unwrap_err();
        assert_eq!(e.to_string(), "bad executor \"ray:/x\": unknown executor (expected local, ray or ray://HOST:PORT)");
    }
}
