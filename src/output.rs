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

/// The width the terminal tables fit unless `--wide`: most terminals are
/// at least this wide, and a wrapped row is unreadable.
pub(crate) const WIDTH: usize = 120;

/// Which end of a cut cell stays: a pattern id's start says what it is, a
/// path's end says which file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    Head,
    Tail,
}

/// `s` in at most `n` characters, the cut marked with `…`.
pub(crate) fn cut(s: &str, n: usize, keep: Keep) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_string();
    }
    let n = n.max(1) - 1;
    match keep {
        Keep::Head => format!("{}…", s.chars().take(n).collect::<String>()),
        Keep::Tail => format!("…{}", s.chars().skip(len - n).collect::<String>()),
    }
}

/// `rows` with the columns `shrink` names cut (the widest first, none
/// below `min` characters) until a [`table_lines`] line fits `width`; the
/// other columns keep their text.
pub(crate) fn fit(rows: &[Vec<String>], width: usize, shrink: &[(usize, Keep)], min: usize) -> Vec<Vec<String>> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
    while total(&widths) > width {
        let Some(&(col, _)) =
            shrink.iter().filter(|(c, _)| *c < cols && widths[*c] > min).max_by_key(|(c, _)| widths[*c])
        else {
            break;
        };
        let over = total(&widths) - width;
        let second = shrink.iter().filter(|(c, _)| *c != col && *c < cols).map(|(c, _)| widths[*c]).max();
        // down to the next widest shrinkable column, so that the cut is shared
        let floor = second.unwrap_or(min).max(min).min(widths[col] - 1);
        widths[col] = widths[col].saturating_sub(over).max(floor);
    }
    rows.iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, c)| match shrink.iter().find(|(s, _)| *s == i) {
                    Some(&(_, keep)) => cut(c, widths[i], keep),
                    None => c.clone(),
                })
                .collect()
        })
        .collect()
}

/// `head` then `items`, each but the last followed by `sep` (`,` or `;`),
/// wrapped at `width` with continuation lines indented under the first item.
pub(crate) fn wrap(head: &str, items: &[String], sep: &str, width: usize) -> Vec<String> {
    let indent = " ".repeat(head.chars().count().min(width / 2));
    let mut out = Vec::new();
    let mut line = head.to_string();
    let mut has_item = false;
    for (i, item) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() { format!("{item}{sep}") } else { item.clone() };
        if has_item && line.chars().count() + 1 + piece.chars().count() > width {
            out.push(std::mem::replace(&mut line, format!("{indent}{piece}")));
        } else {
            if has_item {
                line.push(' ');
            }
            line.push_str(&piece);
        }
        has_item = true;
    }
    out.push(line);
    out
}

/// `head` then `text`, wrapped between words at `width`, continuation lines
/// indented by four spaces more than `head`'s own indent. A word longer than
/// a line stands alone on its line.
pub(crate) fn wrap_words(head: &str, text: &str, width: usize) -> Vec<String> {
    let indent = " ".repeat(head.len() - head.trim_start().len() + 4);
    let mut out = Vec::new();
    let mut line = head.to_string();
    let mut fresh = true;
    for word in text.split_whitespace() {
        if !fresh && line.chars().count() + 1 + word.chars().count() > width {
            out.push(std::mem::replace(&mut line, format!("{indent}{word}")));
        } else {
            if !fresh {
                line.push(' ');
            }
            line.push_str(word);
        }
        fresh = false;
    }
    out.push(line);
    out
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
mod fit_tests {
    use super::{Keep, cut, fit, table_lines, wrap};

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn cuts_keep_the_end_that_says_most() {
        assert_eq!(cut("cu-reuse-across-loops-shared", 10, Keep::Head), "cu-reuse-…");
        assert_eq!(cut("kernels/kda_cuda/decode.cu", 12, Keep::Tail), "…a/decode.cu");
        assert_eq!(cut("short", 10, Keep::Head), "short");
    }

    #[test]
    fn a_wide_table_is_cut_to_the_width_in_the_shrinkable_columns_only() {
        let rows = vec![
            row(&["id", "pattern", "file", "verdict"]),
            row(&["4a8f17c6", &"p".repeat(60), &format!("kernels/{}/decode.cu", "d".repeat(50)), "needs-gpu"]),
        ];
        let fitted = fit(&rows, 80, &[(1, Keep::Head), (2, Keep::Tail)], 8);
        let lines = table_lines(&fitted);
        assert!(lines.iter().all(|l| l.chars().count() <= 80), "{lines:#?}");
        assert_eq!(fitted[1][0], "4a8f17c6");
        assert_eq!(fitted[1][3], "needs-gpu");
        assert!(fitted[1][2].ends_with("decode.cu") && fitted[1][2].starts_with('…'), "{fitted:?}");
        assert!(fitted[1][1].starts_with("ppp") && fitted[1][1].ends_with('…'), "{fitted:?}");
        // a table that fits is left alone
        assert_eq!(fit(&rows[..1], 80, &[(1, Keep::Head)], 8), rows[..1].to_vec());
    }

    #[test]
    fn wrapped_words_stay_within_the_width_and_keep_every_word() {
        let text = "compiled for sm_90a: before regs 32, spills 0/0 B, smem 0+? B, 544 instr (int 251, fp32 123)";
        let lines = super::wrap_words("  4a8f17c6: static: ", text, 40);
        assert!(lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= 40), "{lines:#?}");
        assert!(lines[1].starts_with("      ") && !lines[1].starts_with("       "), "{lines:#?}");
        let words: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words.join(" "), format!("4a8f17c6: static: {text}"));
    }

    #[test]
    fn wrapped_items_stay_within_the_width() {
        let items: Vec<String> = (0..12).map(|i| format!("{i:08x} (some-pattern-{i})")).collect();
        let lines = wrap("accepted: ", &items, ",", 60);
        assert!(lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= 60), "{lines:#?}");
        assert!(lines[1].starts_with("          0"), "{lines:#?}");
        assert_eq!(lines.join(" ").matches("some-pattern").count(), 12);
    }
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
