//! Unified diffs: parsing (`diff --git` / `---` / `+++` / `@@` hunks, `\ No
//! newline at end of file`) and applying them to a text, forwards or in
//! reverse. Hunks must match exactly; a hunk may have moved (the nearest
//! exact match of its old lines is used), never fuzzed.

use crate::error::{Error, Result};

/// One line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// Unchanged (with its line end, if any).
    Context(String),
    /// Removed.
    Removed(String),
    /// Added.
    Added(String),
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hunk {
    pub(crate) old_start: usize,
    pub(crate) lines: Vec<Line>,
}

/// The changes to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilePatch {
    /// The path the diff names (the `b/` side, else the `a/` side), without prefix.
    pub(crate) path: String,
    pub(crate) hunks: Vec<Hunk>,
}

impl FilePatch {
    /// Lines removed and added (without their line ends), for the static scan.
    pub(crate) fn changed_lines(&self) -> (Vec<&str>, Vec<&str>) {
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        for h in &self.hunks {
            for l in &h.lines {
                match l {
                    Line::Removed(s) => removed.push(s.trim_end_matches('\n')),
                    Line::Added(s) => added.push(s.trim_end_matches('\n')),
                    Line::Context(_) => {}
                }
            }
        }
        (removed, added)
    }
}

fn strip_prefix(p: &str) -> Option<String> {
    let p = p.split('\t').next().unwrap_or(p).trim_end();
    if p == "/dev/null" {
        return None;
    }
    Some(p.strip_prefix("a/").or_else(|| p.strip_prefix("b/")).unwrap_or(p).to_string())
}

fn hunk_header(line: &str) -> Option<usize> {
    // @@ -12,7 +12,8 @@ optional section
    let rest = line.strip_prefix("@@ -")?;
    let old = rest.split_whitespace().next()?;
    let start = old.split(',').next()?;
    start.parse().ok()
}

/// Parses a unified diff (one or several files).
pub(crate) fn parse(diff: &str) -> Result<Vec<FilePatch>> {
    let mut files: Vec<FilePatch> = Vec::new();
    let mut old_path: Option<String> = None;
    for raw in diff.split_inclusive('\n') {
        let line = raw.trim_end_matches('\n');
        if line.starts_with("diff --git ") {
            old_path = None;
            continue;
        }
        if let Some(p) = line.strip_prefix("--- ") {
            old_path = strip_prefix(p);
            continue;
        }
        if let Some(p) = line.strip_prefix("+++ ") {
            let path = strip_prefix(p).or(old_path.take()).ok_or_else(|| Error::Diff("a file with no name".into()))?;
            files.push(FilePatch { path, hunks: Vec::new() });
            continue;
        }
        if line.starts_with("@@") {
            let start = hunk_header(line).ok_or_else(|| Error::Diff(format!("bad hunk header {line:?}")))?;
            let f = files.last_mut().ok_or_else(|| Error::Diff("a hunk before any file header".into()))?;
            f.hunks.push(Hunk { old_start: start, lines: Vec::new() });
            continue;
        }
        let Some(h) = files.last_mut().and_then(|f| f.hunks.last_mut()) else {
            continue; // preamble (index lines, mode lines)
        };
        if line.starts_with('\\') {
            // "\ No newline at end of file": the previous line has no line end
            match h.lines.last_mut() {
                Some(Line::Context(s) | Line::Removed(s) | Line::Added(s)) => {
                    if s.ends_with('\n') {
                        s.pop();
                    }
                }
                None => return Err(Error::Diff("a no-newline marker before any line".into())),
            }
            continue;
        }
        let (tag, body) = raw.split_at(raw.chars().next().map(char::len_utf8).unwrap_or(0));
        let body = body.to_string();
        match tag {
            " " => h.lines.push(Line::Context(body)),
            "-" => h.lines.push(Line::Removed(body)),
            "+" => h.lines.push(Line::Added(body)),
            "" => {}
            // an empty context line written without its leading space
            "\n" => h.lines.push(Line::Context("\n".into())),
            _ => return Err(Error::Diff(format!("unexpected line {line:?} in a hunk"))),
        }
    }
    if files.is_empty() && !diff.trim().is_empty() {
        return Err(Error::Diff("no file header (--- / +++)".into()));
    }
    Ok(files)
}

/// Applies `patch` to `text` (in reverse: undoes it).
pub(crate) fn apply(text: &str, patch: &FilePatch, reverse: bool) -> Result<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 16);
    let mut pos = 0usize; // next unconsumed line of `lines`
    for (i, h) in patch.hunks.iter().enumerate() {
        let (old, new): (Vec<&str>, Vec<&str>) = {
            let mut old = Vec::new();
            let mut new = Vec::new();
            for l in &h.lines {
                match (l, reverse) {
                    (Line::Context(s), _) => {
                        old.push(s.as_str());
                        new.push(s.as_str());
                    }
                    (Line::Removed(s), false) | (Line::Added(s), true) => old.push(s.as_str()),
                    (Line::Added(s), false) | (Line::Removed(s), true) => new.push(s.as_str()),
                }
            }
            (old, new)
        };
        let expected = h.old_start.saturating_sub(1).max(pos);
        let matches_at = |at: usize| at + old.len() <= lines.len() && lines[at..at + old.len()] == old[..];
        // the exact position, else the nearest exact match after the previous hunk
        let found = if matches_at(expected) {
            Some(expected)
        } else {
            (pos..=lines.len().saturating_sub(old.len()))
                .filter(|&at| matches_at(at))
                .min_by_key(|&at| at.abs_diff(expected))
        };
        let Some(at) = found else {
            return Err(Error::Patch {
                path: patch.path.clone(),
                message: format!("hunk {} (line {}) does not match the file", i + 1, h.old_start),
            });
        };
        out.extend(lines[pos..at].iter().map(|s| s.to_string()));
        out.extend(new.iter().map(|s| s.to_string()));
        pos = at + old.len();
    }
    out.extend(lines[pos..].iter().map(|s| s.to_string()));
    Ok(out.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(path: &str, a: &str, b: &str) -> String {
        kidiom_rewriter::unified(path, a, b, 3)
    }

    #[test]
    fn round_trips_rewriter_diffs() {
        let cases = [
            ("a\nb\nc\n", "a\nB\nc\n"),
            ("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\n2\nx\n3\n4\n5\n6\n7\n8\n9\n10\n12\n"),
            ("x", "y"),
            ("x\n", "x\ny"),
            ("", "new\n"),
            ("keep\nlast", "keep\nlast\n"),
        ];
        for (a, b) in cases {
            let d = diff("k.py", a, b);
            let files = parse(&d).unwrap();
            assert_eq!(files.len(), 1, "{d}");
            assert_eq!(files[0].path, "k.py");
            assert_eq!(apply(a, &files[0], false).unwrap(), b, "{d}");
            assert_eq!(apply(b, &files[0], true).unwrap(), a, "{d}");
        }
    }

    #[test]
    fn moved_hunks_still_apply_and_mismatches_fail() {
        let a = "l1\nl2\nl3\nl4\nl5\n";
        let b = "l1\nl2\nL3\nl4\nl5\n";
        let files = parse(&diff("k.py", a, b)).unwrap();
        // two lines inserted above: the hunk moved
        assert_eq!(apply(&format!("x\ny\n{a}"), &files[0], false).unwrap(), format!("x\ny\n{b}"));
        let e = apply("l1\nl2\nother\nl4\nl5\n", &files[0], false).unwrap_err();
        assert!(e.to_string().contains("hunk 1"), "{e}");
    }

    #[test]
    fn multi_file_diffs_and_changed_lines() {
        let d = format!("{}{}", diff("a.py", "x = 1\n", "x = 2\n"), diff("k/m.toml", "t = 1\n", "t = 5\n"));
        let files = parse(&d).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.py", "k/m.toml"]);
        assert_eq!(files[1].changed_lines(), (vec!["t = 1"], vec!["t = 5"]));
    }

    #[test]
    fn bad_diffs_are_errors() {
        assert!(parse("@@ -1 +1 @@\n-a\n+b\n").is_err());
        assert!(parse("--- a/x\n+++ b/x\n@@ nonsense\n").is_err());
        assert!(parse("just text\n").is_err());
        assert!(parse("").unwrap().is_empty());
    }
}
