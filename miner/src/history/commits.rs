//! The commits to mine: a git corpus's first-parent chain, with what each
//! commit's message says about intent.

use git2::{Oid, Sort};

use super::{CommitMeta, HistoryConfig};
use crate::corpus::Corpus;
use crate::error::{Error, Result};

/// Lists the commits to mine, newest first: the first-parent chain from the
/// corpus's revision, limited by `since` and `max_commits`.
pub fn commits(corpus: &Corpus, cfg: &HistoryConfig) -> Result<Vec<CommitMeta>> {
    let repo = corpus.repository().ok_or_else(|| Error::git(&corpus.manifest.source, "not a git corpus"))?;
    let git = |e: git2::Error| Error::git(repo.path().display(), e.message());
    let mut walk = repo.revwalk().map_err(git)?;
    walk.set_sorting(Sort::TOPOLOGICAL).map_err(git)?;
    walk.simplify_first_parent().map_err(git)?;
    walk.push(Oid::from_str(&corpus.revision).map_err(git)?).map_err(git)?;
    let mut out = Vec::new();
    for oid in walk {
        let oid = oid.map_err(git)?;
        let c = repo.find_commit(oid).map_err(git)?;
        let time = c.author().when().seconds();
        if cfg.since.is_some_and(|s| time < s) {
            continue;
        }
        let message = String::from_utf8_lossy(c.message_bytes()).into_owned();
        out.push(CommitMeta {
            id: oid.to_string(),
            summary: message.lines().next().unwrap_or("").trim().to_string(),
            date: rfc3339(time),
            time,
            tags: tags(&message),
        });
        if cfg.max_commits.is_some_and(|m| out.len() >= m) {
            break;
        }
    }
    Ok(out)
}

fn tags(message: &str) -> Vec<String> {
    let m = message.to_ascii_lowercase();
    let table: [(&str, &[&str]); 6] = [
        ("perf", &["[perf]", "perf:", "performance", "optimiz", "optimis"]),
        ("speed", &["speed", "faster", "accelerat", "latency"]),
        ("precision", &["precision", "tf32", "ieee", "accuracy", "numerical"]),
        ("overflow", &["overflow", "int64", "illegal memory", "out of bound"]),
        ("fuse", &["fuse", "fusion", "fusing"]),
        ("redundant", &["redundant", "unnecessary", "unneeded", "useless"]),
    ];
    table.iter().filter(|(_, ws)| ws.iter().any(|w| m.contains(w))).map(|(t, _)| t.to_string()).collect()
}

/// RFC 3339 in UTC for seconds since the epoch.
fn rfc3339(secs: i64) -> String {
    // git's times fit jiff's range (years -9999..=9999); one that does not has no date
    jiff::Timestamp::from_second(secs).map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_tags() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(tags("[Perf] fuse kernels; avoid overflow"), ["perf", "overflow", "fuse"]);
        assert!(tags("Update README").is_empty());
    }
}
