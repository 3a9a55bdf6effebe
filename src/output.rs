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
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    for r in rows {
        let mut s = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        writeln!(out, "{}", s.trim_end())?;
    }
    Ok(())
}

/// Text as is on stdout (diffs).
pub(crate) fn raw(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    Ok(())
}
