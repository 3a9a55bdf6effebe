//! Unified diffs: parsing (`diff --git` extended headers, `---` / `+++`,
//! `@@` hunks, `\ No newline at end of file`) and applying them to a text,
//! forwards or in reverse. Hunks must match exactly; a hunk may have moved
//! (the nearest exact match of its old lines is used), never fuzzed.
//!
//! A hunk is as long as its header says (`@@ -a,b +c,d @@`: `b` old lines,
//! `d` new lines), as `git apply` reads it: whatever follows a complete hunk
//! is the next hunk, the next file's headers (`diff --git`, `index`, mode,
//! similarity and rename lines, `---` / `+++`, `Binary files ... differ`) or
//! trailing text, never part of the hunk. A body line after a complete hunk
//! (the header undercounts) and a diff that ends inside a hunk are errors,
//! so a hunk is never applied in part.

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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FilePatch {
    /// The path the diff names (the `b/` side, else the `a/` side), without prefix.
    pub(crate) path: String,
    /// The `a/` side where it differs from `path` (a rename or copy source).
    pub(crate) old_path: Option<String>,
    pub(crate) hunks: Vec<Hunk>,
    /// `Binary files ... differ` or a `GIT binary patch`: no hunks can say what changed.
    pub(crate) binary: bool,
    /// A `rename` / `copy` header.
    pub(crate) renamed: bool,
    /// `new file mode` or `--- /dev/null`.
    pub(crate) new_file: bool,
    /// `deleted file mode` or `+++ /dev/null`.
    pub(crate) deleted: bool,
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

    /// Every path this patch names: the target and, for a rename or copy, its source.
    pub(crate) fn paths(&self) -> Vec<&str> {
        let mut out = vec![self.path.as_str()];
        if let Some(o) = self.old_path.as_deref().filter(|o| *o != self.path) {
            out.push(o);
        }
        out
    }

    /// Why this patch cannot be applied as text, if it cannot.
    pub(crate) fn unsupported(&self) -> Option<&'static str> {
        if self.binary {
            Some("a binary diff")
        } else if self.renamed {
            Some("a rename or copy")
        } else {
            None
        }
    }
}

/// Unquotes a git path (`"a/sp ace\t"`, C-style escapes and octal bytes).
fn unquote(p: &str) -> String {
    let Some(inner) = p.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else {
        return p.to_string();
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut it = inner.bytes().peekable();
    while let Some(b) = it.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match it.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(b'r') => bytes.push(b'\r'),
            Some(b'a') => bytes.push(7),
            Some(b'b') => bytes.push(8),
            Some(b'f') => bytes.push(12),
            Some(b'v') => bytes.push(11),
            Some(d @ b'0'..=b'7') => {
                let mut v = u32::from(d - b'0');
                for _ in 0..2 {
                    match it.peek() {
                        Some(&n @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(n - b'0');
                            it.next();
                        }
                        _ => break,
                    }
                }
                bytes.push((v & 0xff) as u8);
            }
            Some(other) => bytes.push(other),
            None => bytes.push(b'\\'),
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A `---` / `+++` path without its `a/` / `b/` prefix; `None` for `/dev/null`.
fn header_path(p: &str) -> Option<String> {
    let p = p.trim_end_matches('\r');
    let p = if p.starts_with('"') { p } else { p.split('\t').next().unwrap_or(p).trim_end() };
    let p = unquote(p);
    if p == "/dev/null" {
        return None;
    }
    Some(p.strip_prefix("a/").or_else(|| p.strip_prefix("b/")).unwrap_or(&p).to_string())
}

/// The two paths of `diff --git a/X b/Y` (the same when the line is ambiguous).
fn git_paths(rest: &str) -> Option<(String, String)> {
    let rest = rest.trim_end_matches('\r');
    if let Some(inner) = rest.strip_prefix('"') {
        // "a/x y" "b/x y" or "a/x y" b/x: the first unescaped quote closes the first path
        let mut escaped = false;
        let close = inner.char_indices().find_map(|(i, c)| match (c, escaped) {
            ('\\', false) => {
                escaped = true;
                None
            }
            ('"', false) => Some(i),
            _ => {
                escaped = false;
                None
            }
        })?;
        let (a, b) = rest.split_at(close + 2);
        return Some((header_path(a)?, header_path(b.trim_start())?));
    }
    // a/X b/X: the same path twice is the common case, and the only reliable split with spaces
    let n = rest.len();
    if n >= 5 && (n - 1).is_multiple_of(2) {
        let half = (n - 1) / 2;
        if rest.is_char_boundary(half) && rest.is_char_boundary(half + 1) {
            let (a, b) = (&rest[..half], &rest[half + 1..]);
            if let (Some(x), Some(y)) = (a.strip_prefix("a/"), b.strip_prefix("b/"))
                && x == y
            {
                return Some((x.to_string(), y.to_string()));
            }
        }
    }
    let i = rest.find(" b/")?;
    Some((header_path(&rest[..i])?, header_path(&rest[i + 1..])?))
}

/// `@@ -12,7 +12,8 @@ optional section`: (old start, old count, new count).
fn hunk_header(line: &str) -> Option<(usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let mut words = rest.split(' ');
    let old = words.next()?;
    let new = words.next()?.strip_prefix('+')?;
    if words.next() != Some("@@") && !rest.contains(" @@") {
        return None;
    }
    let range = |r: &str| -> Option<(usize, usize)> {
        match r.split_once(',') {
            Some((s, n)) => Some((s.parse().ok()?, n.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let ((start, old_n), (_, new_n)) = (range(old)?, range(new)?);
    Some((start, old_n, new_n))
}

/// Where the parser is.
enum State {
    /// Between files, or in a file's headers before its first hunk.
    Headers,
    /// Inside a hunk, with this many old and new lines still to come.
    Hunk { old: usize, new: usize },
    /// Right after a complete hunk.
    AfterHunk,
}

/// The file being read: its patch, and whether `---` / `+++` were seen.
#[derive(Default)]
struct Pending {
    patch: FilePatch,
    git: Option<(String, String)>,
    minus: Option<Option<String>>,
    plus: Option<Option<String>>,
    renamed_to: Option<String>,
}

impl Pending {
    fn finish(mut self, files: &mut Vec<FilePatch>) -> Result<()> {
        let (minus, plus) = (self.minus.clone().flatten(), self.plus.clone().flatten());
        if matches!(self.minus, Some(None)) {
            self.patch.new_file = true;
        }
        if matches!(self.plus, Some(None)) {
            self.patch.deleted = true;
        }
        let (git_a, git_b) = self.git.take().unzip();
        let path = self.renamed_to.take().or(plus).or(git_b).or(minus).or(git_a.clone());
        let Some(path) = path else {
            return Err(Error::Diff("a file with no name".into()));
        };
        // a git diff's a/ side where it names another file (a rename or copy source)
        if self.patch.old_path.is_none() {
            self.patch.old_path = git_a.filter(|a| *a != path);
        }
        self.patch.path = path;
        for p in self.patch.paths() {
            inside_the_tree(p)?;
        }
        files.push(self.patch);
        Ok(())
    }
}

/// A path a patch may name: relative, and never above the tree it applies to
/// (`../`, an absolute path, a drive or NUL would read or write elsewhere).
fn inside_the_tree(path: &str) -> Result<()> {
    let p = std::path::Path::new(path);
    let outside = path.is_empty()
        || path.contains('\0')
        || p.components().any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
    if outside {
        return Err(Error::Diff(format!("the patch names {path:?}, a path outside the tree it applies to")));
    }
    Ok(())
}

const EXTENDED: &[&str] = &[
    "index ",
    "old mode ",
    "new mode ",
    "new file mode ",
    "deleted file mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "Binary files ",
    "GIT binary patch",
];

/// Parses a unified diff (one or several files).
pub(crate) fn parse(diff: &str) -> Result<Vec<FilePatch>> {
    let mut files: Vec<FilePatch> = Vec::new();
    let mut cur: Option<Pending> = None;
    let mut state = State::Headers;
    let lines: Vec<&str> = diff.split_inclusive('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let raw = lines[i];
        i += 1;
        let line = raw.trim_end_matches('\n');
        if let State::Hunk { old, new } = state {
            let h = cur
                .as_mut()
                .and_then(|p| p.patch.hunks.last_mut())
                .ok_or_else(|| Error::Diff("a hunk line outside any hunk".into()))?;
            if line.starts_with('\\') {
                no_newline(h)?;
                continue;
            }
            let (tag, body) = raw.split_at(raw.chars().next().map(char::len_utf8).unwrap_or(0));
            let (line, old_used, new_used) = match tag {
                " " => (Line::Context(body.to_string()), 1, 1),
                "-" => (Line::Removed(body.to_string()), 1, 0),
                "+" => (Line::Added(body.to_string()), 0, 1),
                // an empty context line written without its leading space
                "\n" | "\r" => (Line::Context(raw.to_string()), 1, 1),
                _ => {
                    return Err(Error::Diff(format!(
                        "line {i}: {line:?} inside a hunk that still needs {old} old and {new} new lines"
                    )));
                }
            };
            if old < old_used || new < new_used {
                return Err(Error::Diff(format!("line {i}: a hunk has more lines than its header counts")));
            }
            h.lines.push(line);
            let (old, new) = (old - old_used, new - new_used);
            state = if old == 0 && new == 0 { State::AfterHunk } else { State::Hunk { old, new } };
            continue;
        }
        if line.starts_with('\\') {
            // "\ No newline at end of file" after the last line of a complete hunk
            if let State::AfterHunk = state
                && let Some(h) = cur.as_mut().and_then(|p| p.patch.hunks.last_mut())
            {
                no_newline(h)?;
                continue;
            }
            return Err(Error::Diff(format!("line {i}: a no-newline marker outside a hunk")));
        }
        if let Some(rest) = line.strip_prefix("diff --git ") {
            if let Some(p) = cur.take() {
                p.finish(&mut files)?;
            }
            cur = Some(Pending { git: git_paths(rest), ..Pending::default() });
            state = State::Headers;
            continue;
        }
        if let Some(rest) = line.strip_prefix("--- ")
            && lines.get(i).is_some_and(|n| n.starts_with("+++ "))
        {
            // a new file's ---/+++ pair, unless it continues a `diff --git` header
            let continues = cur.as_ref().is_some_and(|p| p.minus.is_none() && p.patch.hunks.is_empty());
            if !continues {
                if let Some(p) = cur.take() {
                    p.finish(&mut files)?;
                }
                cur = Some(Pending::default());
            }
            if let Some(p) = cur.as_mut() {
                p.minus = Some(header_path(rest));
                let plus = lines[i].trim_end_matches('\n');
                p.plus = Some(header_path(plus.strip_prefix("+++ ").unwrap_or("")));
            }
            i += 1;
            state = State::Headers;
            continue;
        }
        if line.starts_with("@@") {
            let (start, old, new) =
                hunk_header(line).ok_or_else(|| Error::Diff(format!("line {i}: bad hunk header {line:?}")))?;
            let p = cur.as_mut().ok_or_else(|| Error::Diff("a hunk before any file header".into()))?;
            if p.minus.is_none() && p.git.is_none() {
                return Err(Error::Diff("a hunk before any file header".into()));
            }
            p.patch.hunks.push(Hunk { old_start: start, lines: Vec::new() });
            state = if old == 0 && new == 0 { State::AfterHunk } else { State::Hunk { old, new } };
            continue;
        }
        if let Some(p) = cur.as_mut()
            && let Some(h) = EXTENDED.iter().find(|h| line.starts_with(**h))
        {
            match *h {
                "new file mode " => p.patch.new_file = true,
                "deleted file mode " => p.patch.deleted = true,
                "Binary files " | "GIT binary patch" => p.patch.binary = true,
                "rename from " | "copy from " => {
                    p.patch.renamed = true;
                    p.patch.old_path = Some(unquote(&line[h.len()..]));
                }
                "rename to " | "copy to " => {
                    p.patch.renamed = true;
                    p.renamed_to = Some(unquote(&line[h.len()..]));
                }
                _ => {}
            }
            state = State::Headers;
            continue;
        }
        if let State::AfterHunk = state
            && (line.starts_with('+') || line.starts_with(' ') || (line.starts_with('-') && line != "-- "))
        {
            return Err(Error::Diff(format!("line {i}: {line:?} after a complete hunk (its header undercounts)")));
        }
        // anything else: a preamble (commit message), a binary patch body, a trailer
    }
    if let State::Hunk { old, new } = state {
        return Err(Error::Diff(format!("the diff ends inside a hunk ({old} old and {new} new lines missing)")));
    }
    if let Some(p) = cur.take() {
        p.finish(&mut files)?;
    }
    if files.is_empty() && !diff.trim().is_empty() {
        return Err(Error::Diff("no file header (diff --git, or --- / +++)".into()));
    }
    Ok(files)
}

/// "\ No newline at end of file": the previous line has no line end.
fn no_newline(h: &mut Hunk) -> Result<()> {
    match h.lines.last_mut() {
        Some(Line::Context(s) | Line::Removed(s) | Line::Added(s)) => {
            if s.ends_with('\n') {
                s.pop();
            }
            Ok(())
        }
        None => Err(Error::Diff("a no-newline marker before any line".into())),
    }
}

/// Applies `patch` to `text` (in reverse: undoes it).
pub(crate) fn apply(text: &str, patch: &FilePatch, reverse: bool) -> Result<String> {
    if let Some(what) = patch.unsupported() {
        return Err(Error::Patch { path: patch.path.clone(), message: format!("{what} cannot be applied as text") });
    }
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

    #[test]
    fn a_patch_that_names_a_path_outside_the_tree_is_refused() {
        for path in ["../../etc/hostname", "/etc/hostname", "kernels/../../x.py", "kernels/./../../x"] {
            let diff = format!("--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-x\n+y\n");
            let e = parse(&diff).unwrap_err().to_string();
            assert!(e.contains("outside the tree"), "{path}: {e}");
        }
        let ok = parse("--- a/kernels/./k.py\n+++ b/kernels/./k.py\n@@ -1 +1 @@\n-x\n+y\n").unwrap();
        assert_eq!(ok.len(), 1);
        let renamed =
            "diff --git a/kernels/k.py b/../k.py\nsimilarity index 100%\nrename from kernels/k.py\nrename to ../k.py\n";
        assert!(parse(renamed).unwrap_err().to_string().contains("outside the tree"));
    }

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
            ("gone\n", ""),
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
        assert_eq!(apply("x = 1\n", &files[0], false).unwrap(), "x = 2\n");
    }

    /// A `git diff` of three files: a kernel edit, a manifest edit and a new
    /// file, with every extended header git writes between them.
    const GIT_DIFF: &str = "\
diff --git a/kernels/kda/decode.py b/kernels/kda/decode.py
index 3b18e51..a9c2d7e 100644
--- a/kernels/kda/decode.py
+++ b/kernels/kda/decode.py
@@ -1,3 +1,3 @@
 import triton
-x = 1
+x = 2
 y = 3
diff --git a/kernels/kda/decode.toml b/kernels/kda/decode.toml
index 1111111..2222222 100644
--- a/kernels/kda/decode.toml
+++ b/kernels/kda/decode.toml
@@ -2 +2 @@ name = \"kda.decode\"
-rel_l2 = 5e-3
+rel_l2 = 5e-1
diff --git a/kernels/kda/new.py b/kernels/kda/new.py
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/kernels/kda/new.py
@@ -0,0 +1 @@
+print(1)
\\ No newline at end of file
diff --git a/kernels/kda/old.py b/kernels/kda/old.py
deleted file mode 100644
index e69de29..0000000
--- a/kernels/kda/old.py
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/kernels/a.bin b/kernels/a.bin
index 1111111..2222222 100644
Binary files a/kernels/a.bin and b/kernels/a.bin differ
diff --git a/kernels/kda/ref.py b/kernels/kda/ref2.py
similarity index 90%
rename from kernels/kda/ref.py
rename to kernels/kda/ref2.py
diff --git a/kernels/run.sh b/kernels/run.sh
old mode 100644
new mode 100755
";

    #[test]
    fn git_diffs_end_each_hunk_at_the_next_file_header() {
        let files = parse(GIT_DIFF).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "kernels/kda/decode.py",
                "kernels/kda/decode.toml",
                "kernels/kda/new.py",
                "kernels/kda/old.py",
                "kernels/a.bin",
                "kernels/kda/ref2.py",
                "kernels/run.sh"
            ]
        );
        assert_eq!(files[0].hunks[0].lines.len(), 4, "the index line of the next file is not in the hunk");
        assert_eq!(apply("import triton\nx = 1\ny = 3\n", &files[0], false).unwrap(), "import triton\nx = 2\ny = 3\n");
        assert_eq!(files[1].changed_lines(), (vec!["rel_l2 = 5e-3"], vec!["rel_l2 = 5e-1"]));
        assert!(files[2].new_file);
        assert_eq!(apply("", &files[2], false).unwrap(), "print(1)");
        assert!(files[3].deleted);
        assert_eq!(apply("gone\n", &files[3], false).unwrap(), "");
        assert!(files[4].binary && files[4].hunks.is_empty());
        assert!(apply("", &files[4], false).is_err());
        assert!(files[5].renamed);
        assert_eq!(files[5].paths(), ["kernels/kda/ref2.py", "kernels/kda/ref.py"]);
        assert!(files[6].hunks.is_empty() && !files[6].renamed);
    }

    #[test]
    fn trailing_text_after_the_last_hunk_is_not_part_of_it() {
        let d = format!("From abc\nSubject: x\n---\n k.py | 2 +-\n\n{}-- \n2.43.0\n", diff("k.py", "a\n", "b\n"));
        let files = parse(&d).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(apply("a\n", &files[0], false).unwrap(), "b\n");
    }

    #[test]
    fn quoted_and_spaced_paths() {
        assert_eq!(git_paths("a/x y.py b/x y.py"), Some(("x y.py".into(), "x y.py".into())));
        assert_eq!(git_paths("\"a/t\\tab.py\" \"b/t\\tab.py\""), Some(("t\tab.py".into(), "t\tab.py".into())));
        assert_eq!(git_paths("a/x.py b/y.py"), Some(("x.py".into(), "y.py".into())));
        assert_eq!(git_paths("\"a/q\\\"x\" b/y"), Some(("q\"x".into(), "y".into())));
        assert_eq!(header_path("b/k.py\t2024-01-01 00:00"), Some("k.py".into()));
        assert_eq!(header_path("/dev/null"), None);
        assert_eq!(unquote("\"\\303\\251\""), "é");
    }

    #[test]
    fn miscounted_and_truncated_hunks_are_errors() {
        // the header counts one line, two follow
        let e = parse("--- a/k\n+++ b/k\n@@ -1 +1 @@\n-a\n+b\n+c\n").unwrap_err();
        assert!(e.to_string().contains("undercounts"), "{e}");
        let e = parse("--- a/k\n+++ b/k\n@@ -1,2 +1,2 @@\n-a\n+b\n").unwrap_err();
        assert!(e.to_string().contains("ends inside a hunk"), "{e}");
        let e = parse("--- a/k\n+++ b/k\n@@ -1,2 +1,2 @@\n-a\nindex 123\n").unwrap_err();
        assert!(e.to_string().contains("inside a hunk"), "{e}");
    }

    #[test]
    fn bad_diffs_are_errors() {
        assert!(parse("@@ -1 +1 @@\n-a\n+b\n").is_err());
        assert!(parse("--- a/x\n+++ b/x\n@@ nonsense\n").is_err());
        assert!(parse("just text\n").is_err());
        assert!(parse("\\ No newline\n").is_err());
        assert!(parse("").unwrap().is_empty());
    }
}

/// Property tests: random and mutated diffs never panic the parser or
/// `apply`; a diff made by `kidiom_rewriter::unified` round-trips.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    fn lines() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(
            prop::sample::select(vec!["a", "b", "c", "", "  x = 1", "@@", "--- a", "+b", "-", "\\"]),
            0..12,
        )
        .prop_map(|v| v.into_iter().map(str::to_string).collect())
    }

    fn text(lines: &[String], final_newline: bool) -> String {
        let mut s = lines.join("\n");
        if final_newline && !s.is_empty() {
            s.push('\n');
        }
        s
    }

    /// Edits applied to a diff: delete, duplicate or replace a line, or flip a byte.
    #[derive(Debug, Clone)]
    enum Mutation {
        Delete(usize),
        Duplicate(usize),
        Replace(usize, String),
        Byte(usize, u8),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let line = prop::sample::select(vec![
            "index 0000000..1111111 100644",
            "diff --git a/k.py b/k.py",
            "@@ -1 +1 @@",
            "@@ -0,0 +1,3 @@",
            "--- a/k.py",
            "+++ /dev/null",
            "\\ No newline at end of file",
            "Binary files a/x and b/x differ",
            "rename from \"q\\\"",
            " ",
            "",
            "+",
            "-",
        ]);
        prop_oneof![
            any::<usize>().prop_map(Mutation::Delete),
            any::<usize>().prop_map(Mutation::Duplicate),
            (any::<usize>(), line).prop_map(|(i, l)| Mutation::Replace(i, l.to_string())),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        ]
    }

    fn mutate(diff: &str, muts: &[Mutation]) -> String {
        let mut lines: Vec<String> = diff.split_inclusive('\n').map(str::to_string).collect();
        for m in muts {
            if lines.is_empty() {
                break;
            }
            let n = lines.len();
            match m {
                Mutation::Delete(i) => {
                    lines.remove(i % n);
                }
                Mutation::Duplicate(i) => {
                    let l = lines[i % n].clone();
                    lines.insert(i % n, l);
                }
                Mutation::Replace(i, l) => lines[i % n] = format!("{l}\n"),
                Mutation::Byte(i, b) => {
                    let mut bytes = lines[i % n].clone().into_bytes();
                    let k = i % bytes.len().max(1);
                    if k < bytes.len() {
                        bytes[k] = *b;
                    }
                    lines[i % n] = String::from_utf8_lossy(&bytes).into_owned();
                }
            }
        }
        lines.concat()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn unified_diffs_round_trip(a in lines(), b in lines(), na in any::<bool>(), nb in any::<bool>()) {
            let (a, b) = (text(&a, na), text(&b, nb));
            let d = kidiom_rewriter::unified("k.py", &a, &b, 3);
            let files = parse(&d).map_err(|e| TestCaseError::fail(format!("{e}\n{d}")))?;
            if a == b {
                prop_assert!(files.is_empty());
            } else {
                prop_assert_eq!(files.len(), 1);
                prop_assert_eq!(apply(&a, &files[0], false).map_err(|e| TestCaseError::fail(e.to_string()))?, b.clone());
                prop_assert_eq!(apply(&b, &files[0], true).map_err(|e| TestCaseError::fail(e.to_string()))?, a);
            }
        }

        #[test]
        fn two_files_in_one_git_diff_round_trip(a in lines(), b in lines(), c in lines(), d in lines()) {
            let (a, b, c, d) = (text(&a, true), text(&b, true), text(&c, true), text(&d, true));
            prop_assume!(a != b && c != d);
            let one = kidiom_rewriter::unified("k.py", &a, &b, 3);
            let two = kidiom_rewriter::unified("m.toml", &c, &d, 3);
            let (h, rest) = two.split_once('\n').unwrap_or(("", ""));
            let diff = format!("{one}{h}\nindex 1111111..2222222 100644\n{rest}");
            let files = parse(&diff).map_err(|e| TestCaseError::fail(format!("{e}\n{diff}")))?;
            prop_assert_eq!(files.len(), 2);
            prop_assert_eq!(apply(&a, &files[0], false).map_err(|e| TestCaseError::fail(e.to_string()))?, b);
            prop_assert_eq!(apply(&c, &files[1], false).map_err(|e| TestCaseError::fail(e.to_string()))?, d);
        }

        #[test]
        fn mutated_diffs_never_panic(a in lines(), b in lines(), muts in prop::collection::vec(mutation(), 1..6)) {
            let (a, b) = (text(&a, true), text(&b, false));
            let d = mutate(&kidiom_rewriter::unified("k.py", &a, &b, 3), &muts);
            if let Ok(files) = parse(&d) {
                for f in &files {
                    let _ = apply(&a, f, false);
                    let _ = apply(&b, f, true);
                    let _ = f.paths();
                }
            }
        }

        #[test]
        fn random_text_never_panics(s in "(?s).{0,300}") {
            if let Ok(files) = parse(&s) {
                for f in &files {
                    let _ = apply(&s, f, false);
                }
            }
        }
    }
}
