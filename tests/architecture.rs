//! The order of docs/ARCHITECTURE.md, pinned: tool crates (syntax, exec,
//! rewriter) under the stage crates (miner, patterns, validator, the binary),
//! a stage depending only on tool crates and earlier stages, the validator
//! and the rewrite engine built without git2 and the archive crates; which modules
//! may not reach into which; and the invariants that are cheap to check from
//! the source (nothing compiled in across crates, libraries do not print,
//! the catalog runs no process and opens no repository, only `exec` starts
//! processes, the rewrite engine writes files only through `write.rs`,
//! candidate records are read by field outside their decoder). A change
//! that breaks one fails here with the file and line, and must change
//! ARCHITECTURE too.

use std::path::{Path, PathBuf};

use crate::project::repo;

/// Workspace crates each crate may depend on (normal dependencies).
const ALLOWED: &[(&str, &[&str])] = &[
    ("syntax", &[]),
    ("exec", &[]),
    ("rewriter", &["kidiom-syntax"]),
    ("miner", &["kidiom-syntax", "kidiom-exec", "kidiom-rewriter"]),
    ("patterns", &["kidiom-syntax", "kidiom-exec", "kidiom-rewriter", "kidiom-miner"]),
    ("validator", &["kidiom-syntax", "kidiom-exec", "kidiom-rewriter", "kidiom-patterns"]),
    (".", &["kidiom-syntax", "kidiom-exec", "kidiom-rewriter", "kidiom-miner", "kidiom-patterns", "kidiom-validator"]),
];

/// The names in the `[dependencies]` table of a Cargo.toml.
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).expect("Cargo.toml");
    let value: toml::Value = toml::from_str(&text).expect("toml");
    let mut deps: Vec<String> =
        value.get("dependencies").and_then(|d| d.as_table()).map(|t| t.keys().cloned().collect()).unwrap_or_default();
    deps.sort();
    deps
}

/// The `kidiom-*` names in the `[dependencies]` table of a Cargo.toml.
fn workspace_deps(manifest: &Path) -> Vec<String> {
    dependencies(manifest).into_iter().filter(|k| k.starts_with("kidiom")).collect()
}

#[test]
fn the_syntax_crate_parses_without_repositories_archives_or_syn() {
    // Every crate parses through kidiom-syntax; what it pulls in, every crate compiles.
    let heavy = ["git2", "tar", "zip", "flate2", "syn", "proc-macro2"];
    let found: Vec<String> =
        dependencies(&repo().join("syntax/Cargo.toml")).into_iter().filter(|d| heavy.contains(&d.as_str())).collect();
    assert!(found.is_empty(), "syntax/Cargo.toml depends on {found:?}; parsing one file needs none of them");
    let found = offending("syntax/src", &["git2::", "process::Command", "Command::new(", "syn::"], &[]);
    assert!(found.is_empty(), "syntax opens no repository, runs nothing and parses no Rust:\n{}", found.join("\n"));
}

#[test]
fn crates_depend_only_on_crates_upstream_in_the_data_flow() {
    for (dir, allowed) in ALLOWED {
        let deps = workspace_deps(&repo().join(dir).join("Cargo.toml"));
        for d in &deps {
            assert!(allowed.contains(&d.as_str()), "{dir}/Cargo.toml depends on {d}; the data flow allows {allowed:?}");
        }
    }
}

/// The names of the crates in `package`'s normal dependency tree, as
/// cargo resolves it for that package alone (its own features, not the
/// workspace's union): `cargo tree --prefix none`, offline and locked.
fn dependency_tree(package: &str) -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| option_env!("CARGO").unwrap_or("cargo").into());
    let args = ["tree", "-p", package, "-e", "normal", "--prefix", "none", "--offline", "--locked"];
    let out = std::process::Command::new(&cargo).args(args).current_dir(repo()).output().expect("run cargo tree");
    assert!(out.status.success(), "`cargo {}` failed:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_validator_and_the_rewrite_engine_build_without_repositories_or_archives() {
    // git2 and the sdist archives are the miner's `repositories` feature, which only the binary
    // turns on; the catalog takes the miner without it (see miner/Cargo.toml)
    let heavy = ["git2", "tar", "zip", "flate2"];
    for package in ["kidiom-validator", "kidiom-rewriter"] {
        let tree = dependency_tree(package);
        assert!(tree.iter().any(|d| d == package), "cargo tree -p {package} does not list {package}: {tree:?}");
        let found: Vec<&String> = tree.iter().filter(|d| heavy.contains(&d.as_str())).collect();
        assert!(
            found.is_empty(),
            "{package} builds with {found:?}; reading repositories and archives is the binary's (the miner's \
             `repositories` feature): depend on kidiom-miner with `default-features = false`. \
             `cargo tree -p {package} -e normal -i {}` shows what brings it in",
            found[0]
        );
    }
    // the check sees them where they belong: the binary mines repositories
    let cli = dependency_tree("kidiom");
    for d in heavy {
        assert!(cli.iter().any(|c| c == d), "cargo tree -p kidiom does not list {d}: the check above proves nothing");
    }
}

/// The Rust files under `dir`, and each one's text before its first
/// `#[cfg(test)]` (tests may do what the library may not).
fn library_sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for p in kidiom_syntax::tree_files(dir).expect("walk") {
        if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).expect("read");
            let lib = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            out.push((p, lib));
        }
    }
    out
}

/// `(file:line, line)` of each line of the library sources under `dir`
/// (comments skipped) that contains any of `needles`.
fn offending(dir: &str, needles: &[&str], except: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in library_sources(&repo().join(dir)) {
        let rel = path.strip_prefix(repo()).unwrap_or(&path).display().to_string();
        if except.iter().any(|e| rel.ends_with(e)) {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            // a test seam says so on its line (e.g. the stall a locking test waits for)
            if code.starts_with("//") || code.contains("// test seam") {
                continue;
            }
            if needles.iter().any(|n| code.contains(n)) {
                out.push(format!("{rel}:{}: {}", i + 1, code));
            }
        }
    }
    out
}

#[test]
fn libraries_return_data_and_never_print() {
    for dir in ["syntax/src", "exec/src", "rewriter/src", "miner/src", "patterns/src", "validator/src"] {
        let found = offending(dir, &["println!(", "eprintln!(", "print!(", "eprint!(", "dbg!("], &[]);
        assert!(found.is_empty(), "a library prints (return data; the CLI reports):\n{}", found.join("\n"));
    }
}

#[test]
fn the_catalog_crate_runs_nothing_and_opens_no_repository() {
    let found = offending("patterns/src", &["git2::", "process::Command", "Command::new("], &[]);
    assert!(found.is_empty(), "patterns never opens a git repository or runs code:\n{}", found.join("\n"));
}

/// Where a process may be started outside `exec`, and why.
const SPAWNS_OUTSIDE_EXEC: &[(&str, &str)] = &[(
    "src/html/mod.rs",
    "`--open` starts the user's browser, which must outlive kidiom: no deadline, no pipes, nothing to wait for",
)];

#[test]
fn only_the_exec_crate_starts_processes() {
    // git2 reads repositories in-process (no transports, so a clone goes through exec)
    let needles = ["Command::new(", "process::Command", ".spawn()"];
    let except: Vec<&str> = SPAWNS_OUTSIDE_EXEC.iter().map(|(f, _)| *f).collect();
    for dir in ["rewriter/src", "miner/src", "patterns/src", "validator/src", "src"] {
        let found = offending(dir, &needles, &except);
        assert!(
            found.is_empty(),
            "processes start in kidiom-exec (a deadline, the group kill, the stderr tail); add an exception \
             with its reason only where none of that applies:\n{}",
            found.join("\n")
        );
    }
    for (file, _) in SPAWNS_OUTSIDE_EXEC {
        let text = std::fs::read_to_string(repo().join(file)).expect("read");
        assert!(needles.iter().any(|n| text.contains(n)), "{file} starts no process: drop its exception");
    }
}

#[test]
fn the_rewrite_engine_writes_files_only_by_atomic_rename() {
    let found = offending("rewriter/src", &["fs::write(", "File::create(", "OpenOptions"], &["rewriter/src/write.rs"]);
    assert!(found.is_empty(), "files are written only through write.rs (atomic rename):\n{}", found.join("\n"));
}

#[test]
fn the_rewrite_engine_knows_no_repository_catalog_or_miner() {
    // the engine compiles a RewriteSpec; git (the review branch) is the binary's, patterns are the catalog's
    let heavy = ["git2", "rusqlite", "tar", "zip", "syn"];
    let found: Vec<String> =
        dependencies(&repo().join("rewriter/Cargo.toml")).into_iter().filter(|d| heavy.contains(&d.as_str())).collect();
    assert!(found.is_empty(), "rewriter/Cargo.toml depends on {found:?}");
    let found = offending("rewriter/src", &["git2::", "kidiom_patterns", "kidiom_miner"], &[]);
    assert!(found.is_empty(), "the engine takes a RewriteSpec, never a catalog pattern:\n{}", found.join("\n"));
}

#[test]
fn modules_do_not_reach_across_the_layers() {
    // (directory, what it may not use, what it may use all the same, why)
    let rules: &[(&str, &[&str], &[&str], &str)] = &[
        ("validator/src/backend", &["crate::gates"], &[], "backends run the harness; the gates judge what they return"),
        (
            "validator/src/sitesearch",
            &["crate::gates::correctness", "crate::gates::speed", "crate::validator"],
            &[],
            "the search measures; it judges nothing, and the validator drives it",
        ),
        (
            "validator/src/gates",
            &["crate::sitesearch"],
            &[],
            "the gates judge one candidate; the site search sits beside them, driven by the validator",
        ),
        ("patterns/src/store", &["kidiom_rewriter"], &[], "the catalog stores patterns; matching is the engine's"),
        ("miner/src/history", &["crate::python::"], &[], "history shares grammar helpers, not the usage extractors"),
        (
            "src/mcp",
            &["crate::cmd"],
            // the shared flag groups (`--db`) are front-end vocabulary, not a command
            &["crate::cmd::args::"],
            "the MCP server is a front end over the service layer, like the commands",
        ),
        (
            "src/ops",
            &[
                "crate::cmd",
                "crate::mcp",
                "crate::output",
                "crate::html",
                "println!(",
                "eprintln!(",
                "print!(",
                "eprint!(",
            ],
            &[],
            "the service layer returns data and reports progress through callbacks; front ends print and render",
        ),
    ];
    for (dir, banned, allowed, why) in rules {
        let found: Vec<String> =
            offending(dir, banned, &[]).into_iter().filter(|l| !allowed.iter().any(|a| l.contains(a))).collect();
        assert!(found.is_empty(), "{dir} uses {banned:?} ({why}):\n{}", found.join("\n"));
    }
}

#[test]
fn candidate_records_are_read_by_field_outside_their_decoder() {
    // the stored provenance and evidence are decoded once, in patterns/src/record/; everyone else reads
    // the typed fields (the verdict and the gate figures included), never the JSON by key
    let keys = [
        "provenance[",
        "evidence[",
        "provenance.get(",
        "evidence.get(",
        "[\"verdict\"]",
        ".get(\"verdict\")",
        "[\"search\"]",
        "[\"summary\"]",
        "\"memory-roles\"",
        // gate figures: written and read through the typed figures of patterns/src/record/figures.rs
        "metrics[",
        "metrics.get(",
        "metrics.as_object",
        "before.as_ref()",
        "after.as_ref()",
        "[\"worst\"]",
        "[\"curve\"]",
        "[\"by_class\"]",
        "[\"speedup\"]",
        "[\"noise_floor\"]",
        "[\"gap\"]",
    ];
    for dir in ["src", "patterns/src", "validator/src", "rewriter/src", "miner/src"] {
        let decoders =
            ["patterns/src/record/evidence.rs", "patterns/src/record/provenance.rs", "patterns/src/record/figures.rs"];
        let found = offending(dir, &keys, &decoders);
        assert!(found.is_empty(), "a candidate record read by key outside patterns/src/record/:\n{}", found.join("\n"));
    }
}

#[test]
fn commands_share_only_terminal_output_with_each_other() {
    // `cmd/run` prints what `mine`, `catalog` and `validate` print; `catalog` nests `export`
    // and `import`. Anything else one command would take from another belongs in `ops/`.
    let re_sibling = |line: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = line;
        while let Some(i) = rest.find("super::") {
            let tail = &rest[i + "super::".len()..];
            let module: String = tail.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let after = &tail[module.len()..];
            if let Some(item) = after.strip_prefix("::") {
                let item: String = item.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !module.is_empty() && !item.is_empty() {
                    out.push(item);
                }
            }
            rest = tail;
        }
        out
    };
    let mut found = Vec::new();
    for (path, text) in library_sources(&repo().join("src/cmd")) {
        for (i, line) in text.lines().enumerate() {
            for item in re_sibling(line) {
                if !(item.starts_with("print_") || item == "Args" || item == "run") {
                    found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "a command uses another command's logic (move it to src/ops):\n{}", found.join("\n"));
}

#[test]
fn mining_is_one_skeleton_and_patterns_are_made_in_one_place() {
    // callers import the syntax layer from kidiom-syntax, not through the miner
    let found = offending("miner/src", &["pub use kidiom_syntax"], &[]);
    assert!(found.is_empty(), "the miner re-exports kidiom-syntax:\n{}", found.join("\n"));
    // the two sources share the run's helpers instead of keeping copies
    let found =
        offending("src/ops/mine", &["fn bar(", "const MAX_LISTED_SKIPS", "fn open_with_fallback("], &["mod.rs"]);
    assert!(found.is_empty(), "a mining source keeps its own copy of the run's helpers:\n{}", found.join("\n"));
    // a mined record becomes a pattern in patterns/src/mined.rs alone; the model needs no glossary
    let model = std::fs::read_to_string(repo().join("patterns/src/model.rs")).expect("model.rs");
    let model = model.split("#[cfg(test)]").next().unwrap_or("");
    for needle in ["glossary::", "kidiom_miner::Idiom", "impl From<Idiom>", "impl From<&Rule>", "for Pattern {"] {
        assert!(
            !model.contains(needle),
            "patterns/src/model.rs has {needle:?}: mined records become patterns in mined.rs"
        );
    }
    let found = offending("src", &["fn to_pattern(", "Pattern {"], &[]);
    assert!(found.is_empty(), "the binary builds patterns itself:\n{}", found.join("\n"));
}

#[test]
fn nothing_is_compiled_in_across_crates() {
    // a crate may embed its own files (a stylesheet, a query, a test driver), never another's:
    // what another crate owns reaches it through that crate's API or a path it advertises
    let crates = ["syntax", "exec", "rewriter", "miner", "patterns", "validator", "."];
    for krate in crates {
        let root = repo().join(krate);
        let src = root.join("src");
        for p in kidiom_syntax::tree_files(&src).expect("walk") {
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).expect("read");
            for (i, line) in text.lines().enumerate() {
                for mac in ["include_str!(\"", "include_bytes!(\""] {
                    let Some(start) = line.find(mac) else { continue };
                    let rest = &line[start + mac.len()..];
                    let target = rest.split('"').next().unwrap_or("");
                    let resolved = p.parent().expect("dir").join(target);
                    let resolved = resolved.canonicalize().unwrap_or(resolved);
                    let inside = resolved.starts_with(root.canonicalize().expect("crate dir"))
                        && (krate != "."
                            || resolved.starts_with(repo().join("src"))
                            || resolved.starts_with(repo().join("templates")));
                    assert!(inside, "{}:{}: compiles in {target}, which is not this crate's", p.display(), i + 1);
                }
            }
        }
    }
}

/// The tracked files of the repository (as `git ls-files` lists them).
fn tracked_files() -> Vec<PathBuf> {
    let out = std::process::Command::new("git").arg("ls-files").current_dir(repo()).output().expect("git ls-files");
    String::from_utf8_lossy(&out.stdout).lines().map(|l| repo().join(l)).collect()
}

/// The prose of a tracked file where a crate folder could be named: a
/// Markdown page whole, the comments of a Rust, Python, shell or TOML file.
/// Recorded results (`bench/runs/`) keep the names of their day.
fn prose(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(repo()).ok()?.to_string_lossy().to_string();
    if rel.starts_with("bench/runs/") {
        return None;
    }
    let ext = path.extension()?.to_str()?;
    let text = std::fs::read_to_string(path).ok()?;
    let comment = match ext {
        "md" => return Some(text),
        "rs" => "//",
        "py" | "sh" | "toml" => "#",
        _ => return None,
    };
    Some(text.lines().filter_map(|l| l.find(comment).map(|i| &l[i..])).collect::<Vec<_>>().join("\n"))
}

#[test]
fn docs_and_comments_name_only_crate_folders_that_exist() {
    // A folder named as a crate's (`X/src`, `X/Cargo.toml`, a `kidiom-X`
    // or `kidiom_X::` crate name) must be one of the workspace's: a renamed
    // crate leaves no stale name behind. `rt/src/` is the sandboxed worker's
    // copy of a kernel source, not a crate.
    let members: Vec<String> = {
        let text = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
        let value: toml::Value = toml::from_str(&text).expect("toml");
        let list = value["workspace"]["members"].as_array().expect("members");
        list.iter().filter_map(|m| m.as_str().map(String::from)).collect()
    };
    for m in &members {
        assert!(repo().join(m).join("Cargo.toml").is_file(), "workspace member {m}/ has no Cargo.toml");
    }
    let crate_names: Vec<String> = members
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(repo().join(m).join("Cargo.toml")).expect("Cargo.toml");
            let value: toml::Value = toml::from_str(&text).expect("toml");
            value["package"]["name"].as_str().expect("name").to_string()
        })
        .chain(["kidiom".to_string()])
        .collect();
    let folder = regex::Regex::new(r"(?:^|[\s`(\[\x22'])([a-z][a-z0-9_]*)/(?:src\b|Cargo\.toml)").expect("re");
    // the CUDA emulation's C++ has a namespace of that form, not a crate: Rust and Markdown only
    let krate = regex::Regex::new(r"\b(kidiom_[a-z]+)::|`(kidiom-[a-z]+)`|crate (kidiom-[a-z]+)").expect("re");
    let top_folder = regex::Regex::new(r"`([a-z][a-z0-9_]*)/`").expect("re");
    let mut stale = Vec::new();
    for path in tracked_files() {
        let Some(text) = prose(&path) else { continue };
        let rel = path.strip_prefix(repo()).unwrap_or(&path).display().to_string();
        for (i, line) in text.lines().enumerate() {
            // a top-level folder in backticks (`patterns/`) names one of the repository's
            let top: Vec<String> = if rel.ends_with(".md") && !rel.contains('/') {
                top_folder.captures_iter(line).map(|c| c[1].to_string()).collect()
            } else {
                Vec::new()
            };
            for dir in top {
                if !repo().join(&dir).is_dir() {
                    stale.push(format!("{rel}: `{dir}/` in {:?}", line.trim()));
                }
            }
            for c in folder.captures_iter(line) {
                let dir = &c[1];
                if dir != "rt" && !members.iter().any(|m| m == dir) {
                    stale.push(format!("{rel}: {dir}/ in {:?}", line.trim()));
                }
            }
            let rust_or_md = path.extension().is_some_and(|x| x == "rs" || x == "md");
            for c in krate.captures_iter(line).filter(|_| rust_or_md) {
                let name = c.iter().skip(1).flatten().next().map(|m| m.as_str().replace('_', "-")).unwrap_or_default();
                if !crate_names.contains(&name) {
                    stale.push(format!("{rel}:{}: crate {name} in {:?}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(stale.is_empty(), "docs or comments name crate folders that do not exist:\n{}", stale.join("\n"));
}

#[test]
fn the_design_cards_top_level_folders_exist() {
    // SPEC §2: a reader with the card in hand finds each of these
    for dir in ["miner", "patterns", "rewriter", "validator", "kernels", "corpora", "tests"] {
        assert!(repo().join(dir).is_dir(), "the design card's {dir}/ is missing");
    }
    for gone in ["catalog", "rewrite"] {
        assert!(!repo().join(gone).exists(), "{gone}/ is not a folder of the card's layout");
    }
}
