//! A candidate's unified diff as side-by-side rows: context on both sides,
//! each run of removed lines beside the run of added lines that follows it,
//! both sides highlighted as the fragments of code they are.

use super::highlight::{self, Code};
use super::markup::{Markup, escape};

/// Rows of the side-by-side view a page shows, over all its files: past
/// them the page says how many it left out (the unified view below, and
/// `kidiom review ID`, have every line). A browser renders this many
/// highlighted rows in a second or two.
pub(crate) const MAX_ROWS: usize = 5000;

/// Bytes of the unified diff a page holds.
pub(crate) const MAX_RAW_BYTES: usize = 2 << 20;

/// One file of a diff.
pub(crate) struct DiffFile {
    pub(crate) path: String,
    pub(crate) hunks: Vec<Hunk>,
    /// Why the file has no rows (`binary file`, a mode or name change), or
    /// that some were left out.
    pub(crate) note: String,
}

/// A diff as side-by-side files.
pub(crate) struct SideBySide {
    pub(crate) files: Vec<DiffFile>,
    /// Lines of hunks past [`MAX_ROWS`], not shown side by side.
    pub(crate) omitted: usize,
}

/// One hunk: its header (`@@ -6,7 +6,7 @@ def k`) and rows.
pub(crate) struct Hunk {
    pub(crate) header: String,
    pub(crate) rows: Vec<Row>,
}

/// One row of the side-by-side view.
pub(crate) struct Row {
    pub(crate) left: Side,
    pub(crate) right: Side,
}

/// One side of a row: a line number and its code, or nothing.
pub(crate) struct Side {
    /// `ctx`, `del`, `add` or `none`.
    pub(crate) class: &'static str,
    pub(crate) number: String,
    pub(crate) code: Markup,
}

impl Side {
    fn none() -> Side {
        Side { class: "none", number: String::new(), code: Markup::default() }
    }
}

/// A line of a hunk as written in the diff.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Context,
    Removed,
    Added,
}

struct RawFile {
    path: String,
    hunks: Vec<RawHunk>,
    binary: bool,
}

struct RawHunk {
    header: String,
    old_start: usize,
    new_start: usize,
    lines: Vec<(Op, String)>,
}

/// `@@ -6,7 +6,7 @@ ...`: (old start, old count, new start, new count).
fn hunk_header(line: &str) -> Option<(usize, usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |r: &str| -> Option<(usize, usize)> {
        match r.split_once(',') {
            Some((s, n)) => Some((s.parse().ok()?, n.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let (os, oc) = range(old)?;
    let (ns, nc) = range(new)?;
    Some((os, oc, ns, nc))
}

/// The path a `+++ b/x` or `--- a/x` line names (`None` for /dev/null).
fn header_path(rest: &str) -> Option<String> {
    let p = rest.split('\t').next().unwrap_or(rest).trim_end();
    if p == "/dev/null" {
        return None;
    }
    Some(p.strip_prefix("a/").or_else(|| p.strip_prefix("b/")).unwrap_or(p).to_string())
}

/// Parses `diff` (one or several files) into side-by-side files, at most
/// `max_rows` hunk lines of them. Text the parser does not understand is
/// skipped: the raw diff is on the page too.
pub(crate) fn side_by_side(diff: &str, max_rows: usize) -> SideBySide {
    let mut files: Vec<RawFile> = Vec::new();
    let mut old_left = 0usize;
    let mut new_left = 0usize;
    for line in diff.lines() {
        if old_left > 0 || new_left > 0 {
            let text = line.get(1..).unwrap_or("");
            let op = match line.chars().next() {
                Some(' ') => Some(Op::Context),
                Some('-') => Some(Op::Removed),
                Some('+') => Some(Op::Added),
                // `\ No newline at end of file`
                Some('\\') => continue,
                // an empty context line whose space was stripped by an editor
                None => Some(Op::Context),
                // a hunk shorter than its header says: read the line as a header
                _ => None,
            };
            if let Some(op) = op {
                if op != Op::Added {
                    old_left = old_left.saturating_sub(1);
                }
                if op != Op::Removed {
                    new_left = new_left.saturating_sub(1);
                }
                if let Some(h) = files.last_mut().and_then(|f| f.hunks.last_mut()) {
                    h.lines.push((op, text.to_string()));
                }
                continue;
            }
            (old_left, new_left) = (0, 0);
        }
        let file = |path: String| RawFile { path, hunks: Vec::new(), binary: false };
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let path = rest.rsplit_once(" b/").map(|(_, p)| p.to_string()).unwrap_or_else(|| rest.to_string());
            files.push(file(path));
        } else if line == "GIT binary patch" || (line.starts_with("Binary files ") && line.ends_with(" differ")) {
            match files.last_mut() {
                Some(f) => f.binary = true,
                None => files.push(RawFile { binary: true, ..file(String::new()) }),
            }
        } else if let Some(rest) = line.strip_prefix("+++ ") {
            let path = header_path(rest);
            match (files.last_mut(), path) {
                (Some(f), Some(p)) if f.hunks.is_empty() && !f.binary => f.path = p,
                (None, Some(p)) => files.push(file(p)),
                _ => {}
            }
        } else if let Some(rest) = line.strip_prefix("--- ") {
            // a plain diff without `diff --git` lines: each `---` starts a file
            let starts_file = files.last().is_none_or(|f| !f.hunks.is_empty() || f.binary);
            if starts_file && let Some(p) = header_path(rest) {
                files.push(file(p));
            }
        } else if let Some((os, oc, ns, nc)) = hunk_header(line) {
            if files.is_empty() {
                files.push(file(String::new()));
            }
            if let Some(f) = files.last_mut() {
                f.hunks.push(RawHunk { header: line.to_string(), old_start: os, new_start: ns, lines: Vec::new() });
            }
            (old_left, new_left) = (oc, nc);
        }
    }
    let mut budget = max_rows;
    let mut omitted = 0;
    let several = files.len() > 1;
    let files = files
        .into_iter()
        .map(|f| {
            let code = Code::from_path(&f.path);
            let mut hunks = Vec::new();
            let mut left_out = 0;
            for mut h in f.hunks {
                if h.lines.len() > budget {
                    left_out += h.lines.len() - budget;
                    h.lines.truncate(budget);
                }
                budget -= h.lines.len();
                if !h.lines.is_empty() {
                    hunks.push(rows(code, h));
                }
            }
            omitted += left_out;
            let note = if left_out > 0 && several {
                format!("{left_out} more lines of this file's hunks not shown side by side")
            } else if f.binary {
                "binary file: no text to show".to_string()
            } else if hunks.is_empty() && left_out == 0 {
                "no change to its text (a new mode or name, or an empty file)".to_string()
            } else {
                String::new()
            };
            DiffFile { hunks, path: f.path, note }
        })
        .collect();
    SideBySide { files, omitted }
}

/// The rows of one hunk, each side highlighted as one fragment.
fn rows(code: Option<Code>, h: RawHunk) -> Hunk {
    let old_text: Vec<&str> = h.lines.iter().filter(|(op, _)| *op != Op::Added).map(|(_, t)| t.as_str()).collect();
    let new_text: Vec<&str> = h.lines.iter().filter(|(op, _)| *op != Op::Removed).map(|(_, t)| t.as_str()).collect();
    let mut old = highlight::fragment(code, &old_text.join("\n")).into_iter();
    let mut new = highlight::fragment(code, &new_text.join("\n")).into_iter();
    let (mut old_no, mut new_no) = (h.old_start, h.new_start);
    let mut out = Vec::new();
    let mut i = 0;
    while i < h.lines.len() {
        if h.lines[i].0 == Op::Context {
            let l = Side { class: "ctx", number: old_no.to_string(), code: old.next().unwrap_or_default() };
            let r = Side { class: "ctx", number: new_no.to_string(), code: new.next().unwrap_or_default() };
            out.push(Row { left: l, right: r });
            (old_no, new_no) = (old_no + 1, new_no + 1);
            i += 1;
            continue;
        }
        // a change: the removed run, then the added run, paired row by row
        let removed = h.lines[i..].iter().take_while(|(op, _)| *op == Op::Removed).count();
        let added = h.lines[i + removed..].iter().take_while(|(op, _)| *op == Op::Added).count();
        for k in 0..removed.max(added) {
            let left = if k < removed {
                old_no += 1;
                Side { class: "del", number: (old_no - 1).to_string(), code: old.next().unwrap_or_default() }
            } else {
                Side::none()
            };
            let right = if k < added {
                new_no += 1;
                Side { class: "add", number: (new_no - 1).to_string(), code: new.next().unwrap_or_default() }
            } else {
                Side::none()
            };
            out.push(Row { left, right });
        }
        i += removed + added;
    }
    Hunk { header: h.header, rows: out }
}

/// The raw diff, escaped, one line per entry with its class (`add`, `del`,
/// `meta` or `ctx`), for the page's plain view: the lines within the first
/// `max_bytes`, and how many lines were left out.
pub(crate) fn raw_lines(diff: &str, max_bytes: usize) -> (Vec<(&'static str, Markup)>, usize) {
    let mut bytes = 0;
    let kept: Vec<&str> = diff
        .lines()
        .take_while(|l| {
            bytes += l.len() + 1;
            bytes <= max_bytes
        })
        .collect();
    let omitted = diff.lines().count() - kept.len();
    let lines = kept
        .into_iter()
        .map(|l| {
            let class = if l.starts_with("+++") || l.starts_with("---") || l.starts_with("@@") || l.starts_with("diff ")
            {
                "meta"
            } else if l.starts_with('+') {
                "add"
            } else if l.starts_with('-') {
                "del"
            } else {
                "ctx"
            };
            (class, Markup::trusted(escape(l)))
        })
        .collect();
    (lines, omitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "diff --git a/kernels/k.py b/kernels/k.py\n--- a/kernels/k.py\n+++ b/kernels/k.py\n\
@@ -6,5 +6,6 @@ def k(x):\n     a = 1\n-    b = tl.dot(a, a)\n-    c = 2\n+    b = tl.dot(a, a, input_precision=\"ieee\")\n\
+    c = 3\n+    d = '<script>'\n     e = 5\n";

    #[test]
    fn changes_pair_up_and_numbers_follow_the_header() {
        let files = side_by_side(DIFF, MAX_ROWS).files;
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "kernels/k.py");
        let h = &files[0].hunks[0];
        let shape: Vec<(&str, &str, &str, &str)> = h
            .rows
            .iter()
            .map(|r| (r.left.class, r.left.number.as_str(), r.right.class, r.right.number.as_str()))
            .collect();
        assert_eq!(
            shape,
            vec![
                ("ctx", "6", "ctx", "6"),
                ("del", "7", "add", "7"),
                ("del", "8", "add", "8"),
                ("none", "", "add", "9"),
                ("ctx", "9", "ctx", "10"),
            ]
        );
        assert!(h.rows[1].right.code.as_str().contains("hl-string"), "{}", h.rows[1].right.code.as_str());
        assert!(h.rows[3].right.code.as_str().contains("&lt;script&gt;"), "{}", h.rows[3].right.code.as_str());
    }

    #[test]
    fn several_files_and_a_diff_without_git_headers() {
        let two = format!("{DIFF}{}", DIFF.replace("kernels/k.py", "kernels/d.cu"));
        let files = side_by_side(&two, MAX_ROWS).files;
        assert_eq!(files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["kernels/k.py", "kernels/d.cu"]);
        let plain = side_by_side("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", MAX_ROWS).files;
        assert_eq!(plain.len(), 1);
        assert_eq!(plain[0].hunks[0].rows.len(), 1);
        assert!(side_by_side("not a diff <b>", MAX_ROWS).files.is_empty());
        assert_eq!(raw_lines("+<b>", MAX_RAW_BYTES).0[0], ("add", Markup::trusted("+&lt;b&gt;".into())));
    }

    #[test]
    fn binary_files_and_files_without_hunks_say_so() {
        let d = "diff --git a/w.bin b/w.bin\nindex 1..2 100644\nGIT binary patch\nliteral 3\nKcmZ?d\n\n\
diff --git a/x.png b/x.png\nBinary files a/x.png and b/x.png differ\n--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-a\n+b\n\
diff --git a/m.py b/m.py\nold mode 100644\nnew mode 100755\n";
        let files = side_by_side(d, MAX_ROWS).files;
        let got: Vec<(&str, &str, usize)> =
            files.iter().map(|f| (f.path.as_str(), f.note.as_str(), f.hunks.len())).collect();
        assert_eq!(
            got,
            [
                ("w.bin", "binary file: no text to show", 0),
                ("x.png", "binary file: no text to show", 0),
                ("k.py", "", 1),
                ("m.py", "no change to its text (a new mode or name, or an empty file)", 0)
            ]
        );
    }

    #[test]
    fn a_long_diff_is_cut_at_its_budget() {
        let mut d = String::from("--- a/k.py\n+++ b/k.py\n@@ -1,300 +1,300 @@\n");
        for i in 0..300 {
            d.push_str(&format!("-x = {i}\n+x = {i} + 1\n"));
        }
        let s = side_by_side(&d, 100);
        assert_eq!(s.omitted, 500);
        assert_eq!(s.files[0].hunks[0].rows.len(), 50);
        assert!(s.files[0].note.is_empty(), "one file: the page says it: {}", s.files[0].note);
        let two = format!("{d}{}", d.replace("k.py", "j.py"));
        let s = side_by_side(&two, 100);
        assert_eq!(s.omitted, 1100);
        assert!(s.files[0].note.starts_with("500 more lines"), "{}", s.files[0].note);
        assert!(s.files[1].hunks.is_empty() && s.files[1].note.starts_with("600 more lines"), "{}", s.files[1].note);
        let (lines, omitted) = raw_lines(&d, 100);
        assert_eq!(omitted, d.lines().count() - lines.len());
        assert!(lines.len() < 10);
    }
}
