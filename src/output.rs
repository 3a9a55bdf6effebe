//! Printing: aligned tables and lines for people, JSON for machines. A
//! broken pipe surfaces as an error the CLI maps to success.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

/// Pretty JSON on stdout.
pub(crate) fn json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

pub(crate) fn line(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{s}")?;
    Ok(())
}

/// Left-aligned columns; the last column is not padded.
pub(crate) fn table(rows: &[Vec<String>]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for l in table_lines(rows) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// The lines of [`table`], for callers that print elsewhere (stderr).
pub(crate) fn table_lines(rows: &[Vec<String>]) -> Vec<String> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    rows.iter()
        .map(|r| {
            let mut s = String::new();
            for (i, c) in r.iter().enumerate() {
                if i + 1 == r.len() {
                    s.push_str(c);
                } else {
                    s.push_str(&format!("{c:<w$}  ", w = widths[i]));
                }
            }
            s.trim_end().to_string()
        })
        .collect()
}

/// Text as is on stdout (diffs).
pub(crate) fn raw(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    Ok(())
}

/// `2026-12-01 00:20 UTC` for seconds since the Unix epoch (proleptic
/// Gregorian; no time-zone database needed for UTC). A time past jiff's
/// range (year 9999) prints as the seconds.
pub(crate) fn utc(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| format!("{secs} s"), |t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
}

/// `corpus@revision` (the revision cut to 12 characters), or the corpus
/// alone when it has none (a directory).
pub(crate) fn at_revision(corpus: &str, revision: &str) -> String {
    let rev: String = revision.chars().take(12).collect();
    if rev.is_empty() { corpus.to_string() } else { format!("{corpus}@{rev}") }
}

#[cfg(test)]
mod utc_tests {
    #[test]
    fn formats_utc() {
        assert_eq!(super::utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(super::utc(1_796_084_530), "2026-12-01 00:22 UTC");
        assert_eq!(super::utc(951_782_400), "2000-02-29 00:00 UTC");
    }
}
