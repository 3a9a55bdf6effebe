//! The host speed gate's baseline history (schema step 8): per bench key,
//! the baseline's requests/s in earlier runs. The key is the harness's
//! (`kernels/harness/host/commands.py`, `_history_file`): the baseline
//! module's build, the service's parameters, the bench shape and the
//! machine, so a figure is only ever compared with its own. A run whose
//! baseline is far below its history is flagged and never accepted
//! (docs/CONTRACTS.md, "The service bench"); keeping the history here
//! rather than in a cache lets a reviewer read it and outlives the cache.

use rusqlite::params;

use super::{At, Catalog};
use crate::error::Result;

/// The most figures kept per key (the newest).
pub const HOST_BASELINE_KEEP: usize = 20;

/// One key's history.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostBaseline {
    /// The harness's bench key (hex).
    pub key: String,
    /// The kernel's manifest name.
    pub kernel: String,
    /// The machine it was measured on, as the harness describes it (host
    /// name, CPU model, CPUs, Python).
    pub machine: serde_json::Value,
    /// The baseline's requests/s, oldest first.
    pub requests_per_s: Vec<f64>,
    /// When it was last written (RFC 3339, UTC; empty before it is stored).
    #[serde(default)]
    pub updated_at: String,
}

impl Catalog {
    /// Every key's history. A row that no longer decodes is left out (its
    /// next run starts it again), and counted in the second value.
    pub fn host_baselines(&self) -> Result<(Vec<HostBaseline>, usize)> {
        let mut st = self
            .conn
            .prepare("SELECT key, kernel, machine, requests_per_s, updated_at FROM host_baselines ORDER BY key")
            .at(&self.path)?;
        type Row = (String, String, String, String, String);
        let rows: Vec<Row> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .and_then(|r| r.collect())
            .at(&self.path)?;
        let mut out = Vec::with_capacity(rows.len());
        let mut bad = 0;
        for (key, kernel, machine, figures, updated_at) in rows {
            let machine = serde_json::from_str(&machine);
            let figures: std::result::Result<Vec<f64>, _> = serde_json::from_str(&figures);
            match (machine, figures) {
                (Ok(machine), Ok(requests_per_s)) if requests_per_s.iter().all(|x| x.is_finite()) => {
                    out.push(HostBaseline { key, kernel, machine, requests_per_s, updated_at })
                }
                _ => bad += 1,
            }
        }
        Ok((out, bad))
    }

    /// Writes one key's history (the newest [`HOST_BASELINE_KEEP`] finite
    /// figures), replacing what the key had.
    pub fn put_host_baseline(&self, b: &HostBaseline) -> Result<()> {
        let figures: Vec<f64> = b.requests_per_s.iter().copied().filter(|x| x.is_finite()).collect();
        let figures = &figures[figures.len().saturating_sub(HOST_BASELINE_KEEP)..];
        let figures = serde_json::Value::from(figures.to_vec()).to_string();
        self.conn
            .execute(
                "INSERT OR REPLACE INTO host_baselines (key, kernel, machine, requests_per_s, updated_at)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                params![b.key, b.kernel, b.machine.to_string(), figures],
            )
            .at(&self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline(key: &str, figures: Vec<f64>) -> HostBaseline {
        HostBaseline {
            key: key.into(),
            kernel: "kv_transfer".into(),
            machine: serde_json::json!({"host": "h", "cpus": 2}),
            requests_per_s: figures,
            updated_at: String::new(),
        }
    }

    #[test]
    fn a_history_is_kept_per_key_newest_last_and_bounded() {
        let cat = Catalog::open_in_memory().expect("catalog");
        assert_eq!(cat.host_baselines().expect("read"), (Vec::new(), 0));
        let many: Vec<f64> = (0..30).map(f64::from).collect();
        cat.put_host_baseline(&baseline("b", many)).expect("put");
        cat.put_host_baseline(&baseline("a", vec![455.0, f64::NAN, 460.0])).expect("put");
        let (rows, bad) = cat.host_baselines().expect("read");
        assert_eq!(bad, 0);
        assert_eq!(rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(rows[0].requests_per_s, vec![455.0, 460.0]);
        assert_eq!(rows[1].requests_per_s.len(), HOST_BASELINE_KEEP);
        assert_eq!(rows[1].requests_per_s.first().copied(), Some(10.0));
        assert_eq!(rows[0].machine["cpus"], 2);
        assert!(rows[0].updated_at.ends_with('Z'), "{}", rows[0].updated_at);
        // replaced, not appended to
        cat.put_host_baseline(&baseline("a", vec![470.0])).expect("put");
        assert_eq!(cat.host_baselines().expect("read").0[0].requests_per_s, vec![470.0]);
    }

    #[test]
    fn a_row_that_does_not_decode_is_left_out_and_counted() {
        let cat = Catalog::open_in_memory().expect("catalog");
        cat.put_host_baseline(&baseline("ok", vec![1.0])).expect("put");
        cat.conn
            .execute("INSERT INTO host_baselines VALUES ('bad', 'k', '{}', 'not json', '2026-12-06T00:00:00Z')", [])
            .expect("insert");
        let (rows, bad) = cat.host_baselines().expect("read");
        assert_eq!((rows.len(), bad), (1, 1));
    }
}
