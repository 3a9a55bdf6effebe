//! Every error variant of every library crate, as a user reads it: one
//! line, and no cause said twice (an error that prints its cause does not
//! also return it as `source()`). A variant added without a case here fails
//! the count check.

use std::path::PathBuf;

use crate::project::repo;

// The review branch's error is the binary's (src/ops/branch.rs), which a test cannot name as a crate.
#[allow(dead_code)]
#[path = "../src/ops/branch.rs"]
mod branch;

fn io() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)")
}

fn path() -> PathBuf {
    PathBuf::from("/data/k.py")
}

fn exec() -> Vec<kidiom_exec::Error> {
    use kidiom_exec::Error::*;
    let failed = kidiom_exec::CommandError {
        command: "git clone --bare https://example.invalid/r".into(),
        how: "exited with 128".into(),
        stderr_tail: "Cloning into bare repository...\nfatal: unable to access\n".into(),
    };
    vec![
        Spawn { command: "python3 -m kernels.harness fleet".into(), cause: io() },
        Command(failed),
        Io { path: path(), cause: io() },
        Fleet("what is wrong".into()),
    ]
}

fn syntax() -> Vec<kidiom_syntax::Error> {
    use kidiom_syntax::Error::*;
    vec![Io { path: path(), cause: io() }]
}

fn miner() -> Vec<kidiom_miner::Error> {
    use kidiom_miner::Error::*;
    let m = || "what is wrong".to_string();
    vec![
        Io { path: path(), cause: io() },
        Manifest { path: path(), message: m() },
        Git { repo: "/r".into(), message: m() },
        Glob { glob: "[".into(), message: m() },
        Pypi { spec: "sglang==1".into(), message: m() },
    ]
}

fn patterns() -> Vec<kidiom_patterns::Error> {
    use kidiom_patterns::Error::*;
    let m = || "what is wrong".to_string();
    vec![
        Sqlite { path: path(), cause: rusqlite::Error::InvalidQuery },
        Locked { path: path() },
        NotACatalog { path: path(), reason: m() },
        Exchange { source_name: "x.json".into(), message: m() },
        NewerSchema { path: path(), found: 9, supported: 6 },
        Corrupt { path: path(), row: "p1".into(), table: "patterns", message: m() },
        InvalidPattern { path: path(), id: "p1".into(), message: m() },
        Io { path: path(), cause: io() },
    ]
}

fn matcher() -> Vec<kidiom_rewriter::MatchError> {
    use kidiom_rewriter::MatchError::*;
    vec![
        Pattern { pattern: "f($A".into(), message: "unbalanced".into() },
        NoRewrite { id: "p1".into(), message: "no after".into() },
    ]
}

fn rewriter() -> Vec<kidiom_rewriter::Error> {
    use kidiom_rewriter::Error::*;
    let m = || "what is wrong".to_string();
    vec![
        Pattern(matcher().remove(0)),
        NewParseError { pattern: "p1".into(), path: "k.py".into() },
        NotIdempotent { pattern: "p1".into(), path: "k.py".into() },
        Unparsable { path: "k.py".into(), reason: m() },
        BadTarget { path: path(), reason: m() },
        Stale { path: path(), expected: "a".into(), found: "b".into() },
        Uncommitted { path: path(), status: "modified".into() },
        ReadOnly { path: path() },
        Io { path: path(), cause: io() },
    ]
}

fn review_branch() -> Vec<branch::BranchError> {
    use branch::BranchError::*;
    vec![
        Git { context: "opening /r".into(), cause: git2::Error::from_str("not a repository") },
        Branch { branch: "kidiom/review".into(), reason: "what is wrong".into() },
    ]
}

fn validator() -> Vec<kidiom_validator::Error> {
    use kidiom_validator::Error::*;
    let m = || "what is wrong".to_string();
    vec![
        Io { path: path(), cause: io() },
        Manifest { path: path(), message: m() },
        Diff(m()),
        Patch { path: "k.py".into(), message: m() },
        Spawn { command: "python3 -m kernels.harness".into(), cause: io() },
        Search(m()),
        UnknownKernel { name: "k".into(), known: "a, b".into() },
        Fleet(m()),
        Rewrite(rewriter().remove(8)),
        Syntax(syntax().remove(0)),
        Internal("the baseline thread panicked".into()),
    ]
}

/// Why `e` does not read as one line with each cause once.
fn problems(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = Vec::new();
    let mut messages = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if text.trim().is_empty() {
            out.push(format!("{e:?}: an empty message in the chain"));
        }
        if text.contains('\n') {
            out.push(format!("{text:?}: more than one line"));
        }
        messages.push(text);
        cur = err.source();
    }
    // the line a CLI prints: every message of the chain; none may hold a later one
    for (i, outer) in messages.iter().enumerate() {
        for inner in &messages[i + 1..] {
            if !inner.is_empty() && outer.contains(inner.as_str()) {
                out.push(format!("{outer:?} says its cause {inner:?}, and returns it as source() too"));
            }
        }
    }
    out
}

/// The number of variants of the error enum in `file` (its `#[error` attributes).
fn gpu_device() -> Vec<kidiom_validator::gpu::device::DeviceError> {
    use kidiom_validator::gpu::device::DeviceError::*;
    let m = || "what is wrong".to_string();
    vec![
        NoDriver,
        NoDevice(m()),
        Driver { call: "cuMemAlloc".into(), error: m() },
        OutOfBounds(m()),
        NoKernel("k".into()),
        Launch { kernel: "k".into(), why: m() },
    ]
}

fn gpu_load() -> Vec<kidiom_validator::gpu::load::LoadError> {
    use kidiom_validator::gpu::load::LoadError::*;
    vec![Io { path: path(), cause: io() }, Bad { path: path(), why: "what is wrong".into() }]
}

fn variants(file: &str) -> usize {
    let text = std::fs::read_to_string(repo().join(file)).expect("read");
    let start = text.find("pub enum ").expect("an enum");
    let body = &text[start..text[start..].find("\n}\n").map(|i| start + i).expect("end of enum")];
    body.matches("#[error").count()
}

#[test]
fn every_error_variant_is_one_line_and_says_each_cause_once() {
    let mut all: Vec<Box<dyn std::error::Error + 'static>> = Vec::new();
    let counts = [
        ("exec/src/error.rs", exec().len()),
        ("syntax/src/error.rs", syntax().len()),
        ("miner/src/error.rs", miner().len()),
        ("patterns/src/error.rs", patterns().len()),
        ("rewriter/src/error.rs", rewriter().len()),
        ("src/ops/branch.rs", review_branch().len()),
        ("validator/src/error.rs", validator().len()),
        ("rewriter/src/matcher/mod.rs", matcher().len()),
        ("validator/src/gpu/device.rs", gpu_device().len()),
        ("validator/src/gpu/load.rs", gpu_load().len()),
    ];
    for (file, n) in counts {
        assert_eq!(variants(file), n, "{file}: a variant without a case in tests/errors.rs");
    }
    all.extend(exec().into_iter().map(|e| Box::new(e) as _));
    all.extend(syntax().into_iter().map(|e| Box::new(e) as _));
    all.extend(miner().into_iter().map(|e| Box::new(e) as _));
    all.extend(patterns().into_iter().map(|e| Box::new(e) as _));
    all.extend(matcher().into_iter().map(|e| Box::new(e) as _));
    all.extend(rewriter().into_iter().map(|e| Box::new(e) as _));
    all.extend(review_branch().into_iter().map(|e| Box::new(e) as _));
    all.extend(validator().into_iter().map(|e| Box::new(e) as _));
    all.extend(gpu_device().into_iter().map(|e| Box::new(e) as _));
    all.extend(gpu_load().into_iter().map(|e| Box::new(e) as _));
    let found: Vec<String> = all.iter().flat_map(|e| problems(e.as_ref())).collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
    // and through the CLI's context, the whole line says the cause once
    let e = anyhow::Error::from(miner().remove(0)).context("corpus /data");
    let line: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    assert_eq!(line.join(": ").matches("No such file").count(), 1, "{line:?}");
}

#[test]
fn the_check_catches_a_cause_said_twice() {
    #[derive(Debug)]
    struct Twice(std::io::Error);
    impl std::fmt::Display for Twice {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading k.py: {}", self.0)
        }
    }
    impl std::error::Error for Twice {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    assert_eq!(problems(&Twice(io())).len(), 1);
}
