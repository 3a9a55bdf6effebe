//! The README's examples, run, so they cannot go stale. Every `$ kidiom ...`
//! line of its `console` blocks runs in a small project of our own (a copy
//! of kernels/, a tiny corpus mined into the default catalog) and exits with
//! a documented code, or, where it needs the network or minutes, parses. The
//! table headers the README shows are those the commands print now. The
//! set-up commands are the ones CI runs, every relative link in README.md
//! and docs/ resolves, and the README stays a front door.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::project::{copy_dir, repo};
use crate::util::Env;

/// At most this many lines: the README is a front door; the rest is in docs/.
const MAX_README_LINES: usize = 160;

/// Commands the test only parses, and why they cannot run here.
const PARSE_ONLY: &[(&str, &str)] = &[
    ("mine", "the default corpora need the network"),
    ("validate", "a validation runs the kernel harness: up to a minute a candidate"),
    ("run", "the whole loop takes minutes"),
    ("init", "it needs the reader's kernel file (docs/OWN-KERNEL.md's test runs it)"),
    ("check", "it needs the reader's kernel and its finished contract (tests/contract_check.rs runs it)"),
];

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// One `$ kidiom ...` line of a `console` block and the output shown under it.
#[derive(Debug)]
struct Example {
    line: String,
    args: Vec<String>,
    output: Vec<String>,
}

/// The `$ kidiom` lines of `text`'s `console` blocks, in order.
fn examples(text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_console = false;
    let mut in_fence = false;
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if let Some(info) = line.strip_prefix("```") {
            if in_fence {
                (in_fence, in_console, current) = (false, false, None);
            } else {
                (in_fence, in_console) = (true, info.trim() == "console");
            }
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            current = None;
            let words = shell_words(cmd);
            if words.first().map(String::as_str) == Some("kidiom") {
                out.push(Example { line: cmd.trim().to_string(), args: words[1..].to_vec(), output: Vec::new() });
                current = Some(out.len() - 1);
            }
        } else if let Some(i) = current {
            out[i].output.push(line.to_string());
        }
    }
    out
}

/// A command line split as a POSIX shell splits it: quotes, backslashes,
/// and a `#` that starts a word starts a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '#' if word.is_none() => break,
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        _ => w.push(q),
                    }
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.by_ref().take_while(|&q| q != '\''));
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            _ => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Whether a line of output is a table's header: three or more column
/// names, each lower-case words (`no-kernels`, `gates (s)`, `kernels/`),
/// no numbers, ids or punctuation as a table's rows have.
fn is_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() >= 3
        && words.iter().all(|w| {
            w.chars().any(|c| c.is_ascii_lowercase()) && w.chars().all(|c| c.is_ascii_lowercase() || "-/()".contains(c))
        })
}

/// A line with its runs of blanks made one space (column widths follow the data).
fn collapsed(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A corpus of three Triton files with an explicit `tl.dot` precision and
/// plain dots: mined, it holds the precision idiom the README searches for.
const CORPUS: &str = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, BT: tl.constexpr):\n    \
                      a = tl.dot(x, x, input_precision=\"ieee\")\n    b = tl.dot(x, x)\n    tl.store(x, a, mask=m)\n";

/// A change to our CUDA decode that does not parse: the syntax gate rejects
/// it at once, and `validate` prints its table.
const BROKEN_PATCH: &str = "--- a/kernels/kda_cuda/decode.cu\n+++ b/kernels/kda_cuda/decode.cu\n@@ -44,3 +44,3 @@\n         \
                            // predict: p_j = sum_i exp(g_i) S_ij k_i\n-        float p = 0.0f;\n+        float p = 0.0f +;\n         \
                            for (int i = 0; i < K; i++) {\n";

/// A project as a reader has one after `kidiom mine` and a first `apply`:
/// a copy of kernels/, a tiny corpus mined into `.kidiom/catalog.sqlite`,
/// and a candidate on the Triton kernels.
fn project() -> Env {
    let env = Env::new();
    copy_dir(&repo().join("kernels"), &env.path().join("kernels"));
    for i in 0..3 {
        env.write(&format!("up/k{i}.py"), CORPUS);
    }
    env.write("broken.diff", BROKEN_PATCH);
    for args in [
        &["mine", "up", "--min-files", "1", "-q"][..],
        &["apply", "kernels/kda", "--pattern", "py-keyword-tl-dot-input-precision", "-q"],
    ] {
        let out = env.run(args);
        assert!(out.status.success(), "kidiom {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    env
}

/// What a parse-only command is replaced by to see its table here: the same
/// subcommand on the project's own inputs.
fn stand_in(subcommand: &str) -> Option<&'static [&'static str]> {
    match subcommand {
        "mine" => Some(&["mine", "up", "--min-files", "1"]),
        "validate" => Some(&["validate", "--patch", "broken.diff"]),
        _ => None,
    }
}

/// Runs `args` in the project: its exit code and its stdout.
fn run(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let out = env.run(args);
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_readme_examples_run_and_show_the_tables_kidiom_prints() {
    let examples = examples(&readme());
    assert!(examples.len() >= 5, "the README's tour shows kidiom at work: {examples:#?}");
    for sub in ["mine", "catalog", "apply", "validate", "review"] {
        assert!(
            examples.iter().any(|e| e.args.first().map(String::as_str) == Some(sub)),
            "the README's tour shows `kidiom {sub}`"
        );
    }
    // the parse-only check would catch a flag that does not exist
    let env = project();
    let (code, _) = run(&env, &["validate", "--no-such-flag", "--help"]);
    assert_eq!(code, Some(2), "clap rejects an unknown flag before --help");

    let mut headers_checked = 0;
    for e in &examples {
        let args: Vec<&str> = e.args.iter().map(String::as_str).collect();
        let sub = args.first().copied().unwrap_or("");
        let shown: Vec<String> = e.output.iter().filter(|l| is_header(l)).map(|l| collapsed(l)).collect();
        let printed = if PARSE_ONLY.iter().any(|(s, _)| *s == sub) {
            let mut help = args.clone();
            help.push("--help");
            let (code, _) = run(&env, &help);
            assert_eq!(code, Some(0), "`{}` does not parse: `kidiom {} --help` exits {code:?}", e.line, args.join(" "));
            if shown.is_empty() {
                continue;
            }
            let Some(alt) = stand_in(sub) else {
                panic!("`{}` shows a table, and the test has no stand-in that prints it here", e.line)
            };
            let (code, out) = run(&env, alt);
            assert!(matches!(code, Some(0 | 1)), "stand-in `kidiom {}` exits {code:?}:\n{out}", alt.join(" "));
            out
        } else {
            let (code, out) = run(&env, &args);
            assert!(matches!(code, Some(0 | 1)), "`{}` exits {code:?}, not a documented 0 or 1:\n{out}", e.line);
            out
        };
        let now: Vec<String> = printed.lines().map(collapsed).collect();
        for h in &shown {
            assert!(
                now.contains(h),
                "the README shows `{}` printing the header\n  {h}\nbut it prints now:\n{printed}",
                e.line
            );
            headers_checked += 1;
        }
    }
    assert!(headers_checked >= 4, "the tour's tables are checked ({headers_checked} headers)");
}

#[test]
fn the_setup_commands_are_the_ones_ci_runs() {
    let text = readme();
    let setup = &text[text.find("\n## Set-up: two commands\n").expect("the README has its set-up section")..];
    let block = setup.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a sh block of commands");
    let commands: Vec<String> =
        block.lines().filter_map(|l| shell_words(l).into_iter().next()).filter(|c| !c.is_empty()).collect();
    assert_eq!(commands, ["scripts/run.sh", "scripts/test.sh"], "the two set-up commands");
    for c in &commands {
        let path = repo().join(c);
        let mode = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{c}: {e}")).permissions();
        assert!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111 != 0, "{c} is not executable");
    }
    let ci = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    assert!(ci.lines().any(|l| l.trim() == "exec scripts/test.sh"), ".ci/run runs scripts/test.sh:\n{ci}");
    let run = std::fs::read_to_string(repo().join("scripts/run.sh")).expect("scripts/run.sh");
    assert!(run.lines().any(|l| !l.starts_with('#') && l.contains("kidiom run")), "scripts/run.sh runs `kidiom run`");
}

#[test]
fn the_readme_is_a_front_door() {
    let text = readme();
    let lines = text.lines().count();
    assert!(
        lines <= MAX_README_LINES,
        "README.md has {lines} lines; at most {MAX_README_LINES} (move the rest to docs/)"
    );
    // every page of docs/ is one link away
    for page in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let name = page.expect("entry").file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            assert!(text.contains(&format!("](docs/{name})")), "README.md does not link docs/{name}");
        }
    }
}

/// The Markdown pages whose links are checked: the README, docs/, kernels/README.md.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md"), repo().join("kernels/README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    pages.sort();
    pages
}

/// The text of `page` outside fenced blocks, one entry per line.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fence = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fence = !fence;
                return false;
            }
            !fence
        })
        .collect()
}

/// GitHub's anchors for the headings of a Markdown page.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let Some(title) = line.strip_prefix('#').map(|t| t.trim_start_matches('#')) else { continue };
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.push(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a line, code spans left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let no_code: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    let mut rest = no_code.as_str();
    while let Some(i) = rest.find("](") {
        let tail = &rest[i + 2..];
        let Some(end) = tail.find(')') else { break };
        out.push(tail[..end].trim().to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read");
        let rel = page.strip_prefix(repo()).unwrap_or(&page).display().to_string();
        for (i, line) in prose_lines(&text).into_iter().enumerate() {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let file = if path.is_empty() { page.clone() } else { page.parent().expect("dir").join(path) };
                if !file.exists() {
                    broken.push(format!("{rel} (prose line {}): {target}: no such file", i + 1));
                    continue;
                }
                if !anchor.is_empty() && file.extension().is_some_and(|x| x == "md") {
                    let linked = std::fs::read_to_string(&file).expect("read");
                    if !anchors(&linked).iter().any(|a| a == anchor) {
                        broken.push(format!("{rel} (prose line {}): {target}: no heading #{anchor}", i + 1));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_helpers_read_markdown_and_commands_as_a_reader_would() {
    assert_eq!(
        shell_words(r#"kidiom catalog search "keep a tensor in L2" --limit 3   # a comment"#),
        ["kidiom", "catalog", "search", "keep a tensor in L2", "--limit", "3"]
    );
    assert_eq!(shell_words("kidiom validate 'a@b.py#1234' x#y"), ["kidiom", "validate", "a@b.py#1234", "x#y"]);
    assert!(is_header("corpus  kind  revision  files  no-kernels  time"));
    assert!(is_header("candidate  verdict  gate  seconds  gates (s)  speed"));
    assert!(!is_header("fla     pypi  0.6.0         400    0"));
    assert!(!is_header("diff --git a/kernels/kda_cuda/decode.cu b/kernels/kda_cuda/decode.cu"));
    assert_eq!(
        anchors("# A\n## Host C++ kernels (`language = \"cpp\"`)\n```\n# not a heading\n```\n## A\n"),
        ["a", "host-c-kernels-language--cpp", "a-1"]
    );
    assert_eq!(link_targets("see [x](a.md#b) and `[y](not.md)` and [z](../c.md)"), ["a.md#b", "../c.md"]);
    let ex = examples("```console\n$ kidiom review\nid  a  b\n$ $EDITOR x\nnot output\n```\n$ kidiom outside\n");
    assert_eq!(ex.len(), 1);
    assert_eq!((ex[0].args.clone(), ex[0].output.clone()), (vec!["review".to_string()], vec!["id  a  b".to_string()]));
}
