//! Links to upstream code: a corpus whose source is a GitHub repository
//! links its examples to `blob/<revision>/<path>#L<line>`, its commits to
//! `commit/<id>` and its support row to `tree/<revision>`. Other sources
//! (PyPI packages, local folders) get no link.

/// Every link the site makes passes here: `https://` and nothing a URL or
/// an attribute could be broken out of with (quotes, angle brackets,
/// spaces, controls, backslashes). The builders below only ever make such
/// URLs; this is the rule written once, so that no `javascript:` or
/// `data:` link can reach a page whatever a corpus's source says.
fn checked(url: String) -> Option<String> {
    let ok = url.starts_with("https://") && url.bytes().all(|b| b.is_ascii_graphic() && !b"\"'<>\\`".contains(&b));
    ok.then_some(url)
}

/// `owner/repo` of a GitHub source (`https://github.com/o/r`, `.git`,
/// `git@github.com:o/r.git`); `None` for anything else.
pub(crate) fn github_repo(source: &str) -> Option<String> {
    let s = source.trim();
    let rest = s
        .strip_prefix("https://github.com/")
        .or_else(|| s.strip_prefix("http://github.com/"))
        .or_else(|| s.strip_prefix("git@github.com:"))
        .or_else(|| s.strip_prefix("ssh://git@github.com/"))?;
    let rest = rest.trim_end_matches('/');
    let rest = rest.strip_suffix(".git").unwrap_or(rest);
    let mut parts = rest.split('/');
    let (owner, repo) = (parts.next()?, parts.next()?);
    let ok = |x: &str| {
        !x.is_empty() && x != "." && x != ".." && x.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    (ok(owner) && ok(repo) && parts.next().is_none()).then(|| format!("{owner}/{repo}"))
}

/// A revision fit for a URL path segment (a commit id, a tag).
fn revision_ok(r: &str) -> bool {
    !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// `path` percent-encoded for a URL, slashes kept.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The line of a file at a revision.
pub(crate) fn blob(source: &str, revision: &str, path: &str, line: Option<u64>) -> Option<String> {
    let repo = github_repo(source)?;
    if !revision_ok(revision) || path.is_empty() || path.split('/').any(|s| s == "..") {
        return None;
    }
    let anchor = line.filter(|l| *l > 0).map(|l| format!("#L{l}")).unwrap_or_default();
    checked(format!("https://github.com/{repo}/blob/{revision}/{}{anchor}", encode_path(path.trim_start_matches('/'))))
}

/// A commit.
pub(crate) fn commit(source: &str, id: &str) -> Option<String> {
    let repo = github_repo(source)?;
    (id.len() >= 7 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("https://github.com/{repo}/commit/{id}"))
        .and_then(checked)
}

/// The tree at a revision.
pub(crate) fn tree(source: &str, revision: &str) -> Option<String> {
    let repo = github_repo(source)?;
    revision_ok(revision).then(|| format!("https://github.com/{repo}/tree/{revision}")).and_then(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_sources_link_and_others_do_not() {
        let src = "https://github.com/kvcache-ai/Mooncake";
        assert_eq!(
            blob(src, "3b5a594", "mooncake-integration/x y.cpp", Some(42)).as_deref(),
            Some("https://github.com/kvcache-ai/Mooncake/blob/3b5a594/mooncake-integration/x%20y.cpp#L42")
        );
        assert_eq!(
            commit("git@github.com:fla-org/flash-linear-attention.git", "bc3b101dcb71").as_deref(),
            Some("https://github.com/fla-org/flash-linear-attention/commit/bc3b101dcb71")
        );
        assert_eq!(tree(src, "v1.0").as_deref(), Some("https://github.com/kvcache-ai/Mooncake/tree/v1.0"));
        assert_eq!(blob("fla-core==0.6.0", "0.6.0", "fla/x.py", Some(1)), None, "a PyPI package has no URL");
        assert_eq!(blob("/home/me/corpus", "abc", "x.py", None), None);
        assert_eq!(commit(src, "\"><script>"), None);
        assert_eq!(blob(src, "a\"b", "x.py", None), None);
        assert_eq!(blob(src, "abc", "../../x", None), None);
        assert_eq!(github_repo("https://github.com/o/r/extra"), None);
        assert_eq!(github_repo("https://github.com/o/r.git/").as_deref(), Some("o/r"));
        // sources that are not a GitHub repository over https or ssh never link
        for src in [
            "javascript:alert(1)//https://github.com/o/r",
            "javascript://github.com/o/r",
            "data:text/html,<script>alert(1)</script>",
            " https://github.com/o/r\"onmouseover=\"x",
            "https://github.com/o/r\"><script>",
            "https://github.com.evil.example/o/r",
            "https://github.com@evil.example/o/r",
            "https://github.com/o/../r",
            "file:///etc/passwd",
        ] {
            assert_eq!(tree(src, "abc"), None, "{src}");
            assert_eq!(commit(src, "0123456789"), None, "{src}");
            assert_eq!(blob(src, "abc", "x.py", Some(1)), None, "{src}");
        }
        // a path or line from the catalog stays inside the URL
        let url = blob(src, "abc", "javascript:alert('x')/\"<b> c.py", Some(3)).expect("link");
        assert_eq!(
            url,
            "https://github.com/kvcache-ai/Mooncake/blob/abc/javascript%3Aalert%28%27x%27%29/%22%3Cb%3E%20c.py#L3"
        );
        assert_eq!(checked("javascript:alert(1)".into()), None);
        assert_eq!(checked("https://x/\"".into()), None);
    }
}
