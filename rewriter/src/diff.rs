//! Unified diffs (the format `git apply` reads), computed line by line
//! with Myers' algorithm.

/// A line-level edit script operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equal(usize, usize),
    Delete(usize),
    Insert(usize),
}

fn lines(s: &str) -> Vec<&str> {
    s.split_inclusive('\n').collect()
}

/// Myers' O((N+M)D) diff over lines, with the common prefix and suffix
/// trimmed first (rewrites touch few lines of long files).
fn script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..].iter().rev().zip(b[pre..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut ops: Vec<Op> = (0..pre).map(|i| Op::Equal(i, i)).collect();
    for op in myers(am, bm) {
        ops.push(match op {
            Op::Equal(i, j) => Op::Equal(i + pre, j + pre),
            Op::Delete(i) => Op::Delete(i + pre),
            Op::Insert(j) => Op::Insert(j + pre),
        });
    }
    ops.extend((0..suf).map(|k| Op::Equal(a.len() - suf + k, b.len() - suf + k)));
    ops
}

fn myers(a: &[&str], b: &[&str]) -> Vec<Op> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (n + m) as usize;
    let off = max as isize + 1;
    let at = |k: isize| (k + off) as usize;
    let mut v = vec![0isize; 2 * max + 3];
    // trace[d] is `v` as it was when step d began.
    let mut trace: Vec<Vec<isize>> = Vec::new();
    'outer: for d in 0..=max as isize {
        trace.push(v.clone());
        let mut k = -d;
        while k <= d {
            let mut x =
                if k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]) { v[at(k + 1)] } else { v[at(k - 1)] + 1 };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[at(k)] = x;
            if x >= n && y >= m {
                break 'outer;
            }
            k += 2;
        }
    }
    let mut ops = Vec::new();
    let (mut x, mut y) = (n, m);
    for (d, v) in trace.iter().enumerate().rev() {
        let d = d as isize;
        let k = x - y;
        let prev_k = if k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]) { k + 1 } else { k - 1 };
        let prev_x = v[at(prev_k)];
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y && x > 0 && y > 0 {
            ops.push(Op::Equal((x - 1) as usize, (y - 1) as usize));
            x -= 1;
            y -= 1;
        }
        if d > 0 {
            if x == prev_x {
                ops.push(Op::Insert((y - 1) as usize));
            } else {
                ops.push(Op::Delete((x - 1) as usize));
            }
            x = prev_x;
            y = prev_y;
        }
    }
    ops.reverse();
    ops
}

/// A unified diff of `old` to `new` for `path` (relative, `/`-separated),
/// with `context` lines around each change; empty when they are equal.
/// Lines without a final newline are marked as git marks them.
pub fn unified(path: &str, old: &str, new: &str, context: usize) -> String {
    if old == new {
        return String::new();
    }
    let (a, b) = (lines(old), lines(new));
    let ops = script(&a, &b);
    let mut out = format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n");
    // Indices of ops that change something.
    let changes: Vec<usize> =
        ops.iter().enumerate().filter(|(_, o)| !matches!(o, Op::Equal(..))).map(|(i, _)| i).collect();
    let mut i = 0;
    while i < changes.len() {
        let start = changes[i].saturating_sub(context);
        let mut end = changes[i];
        let mut j = i;
        while j + 1 < changes.len() && changes[j + 1] <= end + 2 * context + 1 {
            j += 1;
            end = changes[j];
        }
        let end = (end + context + 1).min(ops.len());
        let hunk = &ops[start..end];
        let (mut a0, mut b0) = (None, None);
        let (mut na, mut nb) = (0, 0);
        // Position for empty sides: lines before the hunk.
        let (mut a_before, mut b_before) = (0, 0);
        for op in &ops[..start] {
            match op {
                Op::Equal(..) => {
                    a_before += 1;
                    b_before += 1;
                }
                Op::Delete(_) => a_before += 1,
                Op::Insert(_) => b_before += 1,
            }
        }
        let mut body = String::new();
        let mut push = |prefix: char, line: &str| {
            body.push(prefix);
            body.push_str(line);
            if !line.ends_with('\n') {
                body.push_str("\n\\ No newline at end of file\n");
            }
        };
        for op in hunk {
            match *op {
                Op::Equal(x, y) => {
                    a0.get_or_insert(x);
                    b0.get_or_insert(y);
                    na += 1;
                    nb += 1;
                    push(' ', a[x]);
                }
                Op::Delete(x) => {
                    a0.get_or_insert(x);
                    na += 1;
                    push('-', a[x]);
                }
                Op::Insert(y) => {
                    b0.get_or_insert(y);
                    nb += 1;
                    push('+', b[y]);
                }
            }
        }
        let a_start = if na == 0 { a_before } else { a0.unwrap_or(0) + 1 };
        let b_start = if nb == 0 { b_before } else { b0.unwrap_or(0) + 1 };
        out.push_str(&format!("@@ -{} +{} @@\n", range(a_start, na), range(b_start, nb)));
        out.push_str(&body);
        i = j + 1;
    }
    out
}

/// The text `diff` (one file's unified diff, as [`unified`] writes it)
/// makes of `old`; `None` when it does not apply there (a context or
/// removed line that is not in `old`, a malformed hunk header).
pub fn patched(old: &str, diff: &str) -> Option<String> {
    let a = lines(old);
    let mut out = String::new();
    let mut next = 0; // the first line of `old` not yet copied
    let mut body = diff.split_inclusive('\n').skip_while(|l| !l.starts_with("@@")).peekable();
    while let Some(header) = body.next() {
        let start: usize = header.strip_prefix("@@ -")?.split([',', ' ']).next()?.parse().ok()?;
        // `-0,0` (an empty old side) sits before line 1; `-n,0` after line n
        let counts_zero = header.split(' ').nth(1).is_some_and(|r| r.ends_with(",0"));
        let first = if counts_zero { start } else { start.checked_sub(1)? };
        out.extend(a.get(next..first)?.iter().copied());
        next = first;
        while let Some(line) = body.next_if(|l| !l.starts_with("@@")) {
            let no_newline = body.next_if(|l| l.starts_with("\\ ")).is_some();
            let text = line.get(1..)?;
            let text = if no_newline { text.strip_suffix('\n')? } else { text };
            match line.as_bytes().first() {
                Some(b' ' | b'-') if a.get(next) != Some(&text) => return None,
                Some(b' ') => {
                    out.push_str(text);
                    next += 1;
                }
                Some(b'-') => next += 1,
                Some(b'+') => out.push_str(text),
                _ => return None,
            }
        }
    }
    out.extend(a.get(next..)?.iter().copied());
    Some(out)
}

fn range(start: usize, n: usize) -> String {
    if n == 1 { start.to_string() } else { format!("{start},{n}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies a script to check it rebuilds `b` from `a`.
    fn rebuild(a: &str, b: &str) -> String {
        let (la, lb) = (lines(a), lines(b));
        let mut out = String::new();
        let mut last_a = 0;
        for op in script(&la, &lb) {
            match op {
                Op::Equal(x, y) => {
                    assert_eq!(la[x], lb[y]);
                    assert!(x >= last_a);
                    last_a = x;
                    out.push_str(lb[y]);
                }
                Op::Delete(_) => {}
                Op::Insert(y) => out.push_str(lb[y]),
            }
        }
        out
    }

    #[test]
    fn scripts_rebuild_the_new_text() {
        let cases = [
            ("a\nb\nc\n", "a\nB\nc\n"),
            ("", "x\n"),
            ("x\n", ""),
            ("a\nb\nc\nd\ne\n", "b\nc\nX\ne\nf\n"),
            ("a\nb", "a\nb\n"),
            ("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2x\n3\n4\n5\n6\n7\n8x\n9\n"),
        ];
        for (a, b) in cases {
            assert_eq!(rebuild(a, b), b, "{a:?} -> {b:?}");
            for context in [0, 1, 3] {
                let d = unified("k.py", a, b, context);
                assert_eq!(patched(a, &d).as_deref(), Some(b), "{a:?} -> {b:?} with {context} lines of context");
            }
        }
        assert_eq!(patched("a\nb\n", "").as_deref(), Some("a\nb\n"), "an empty diff changes nothing");
        let d = unified("k.py", "a\nb\n", "a\nB\n", 3);
        assert_eq!(patched("x\nb\n", &d), None, "context that is not there");
    }

    #[test]
    fn unified_format() {
        let a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n";
        let b = "1\n2\n3\n4\n5\nsix\n7\n8\n9\n10\n11\n12\n";
        let d = unified("k.py", a, b, 3);
        assert_eq!(
            d,
            "diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -3,7 +3,7 @@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n"
        );
        assert_eq!(unified("k.py", a, a, 3), "");
        let d = unified("k.py", "x", "y", 3);
        assert!(d.contains("-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"), "{d}");
    }
}
