use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary workspace for one test: its own directory, cache and catalog.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env { dir: tempfile::tempdir().expect("tempdir") }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn db(&self) -> PathBuf {
        self.path().join("catalog.sqlite")
    }

    /// Writes a file (creating folders) and returns its path.
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write");
        p
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kidiom"));
        c.current_dir(self.path())
            .env("KIDIOM_CACHE", self.path().join("cache"))
            .env("KIDIOM_CONTENT_CACHE", content_cache());
        c
    }

    /// Runs kidiom with `args`, returning the output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("spawn kidiom")
    }

    /// Runs kidiom and parses its stdout as JSON; panics with stderr on failure.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kidiom {args:?} failed ({:?}):\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("kidiom {args:?}: not JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout)))
    }
}

/// The harness's content-keyed caches (compiles, host builds, measured
/// variants; kernels/harness/cachedir.py) shared by every test of the suite:
/// a kernel one test compiled is not compiled again by the next. Safe to
/// share because an entry's key is every byte it was computed from (the
/// harness's tests prove a changed input misses), and it lives under
/// `target/`, never in a user's cache. Each test keeps its own
/// `KIDIOM_CACHE` (corpora, fetched sdists) and catalog.
pub fn content_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kidiom-content-cache")
}

/// Creates a git repository at `dir` with one commit holding `files`.
pub fn git_repo(dir: &Path, files: &[(&str, &[u8])]) -> git2::Oid {
    let repo = git2::Repository::init(dir).expect("init");
    let mut index = repo.index().expect("index");
    for (rel, content) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write");
        index.add_path(Path::new(rel)).expect("add");
    }
    index.write().expect("write index");
    let tree_id = index.write_tree().expect("tree");
    let tree = repo.find_tree(tree_id).expect("find tree");
    let sig = git2::Signature::now("kidiom test", "test@kidiom.invalid").expect("sig");
    repo.commit(Some("HEAD"), &sig, &sig, "corpus", &tree, &[]).expect("commit")
}

/// Looks up a pattern by id in a `--json` list.
pub fn find<'a>(patterns: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    patterns.as_array()?.iter().find(|p| p["id"] == id)
}

/// Total occurrences of a pattern over its support rows.
pub fn occurrences(p: &serde_json::Value) -> u64 {
    p["support"].as_array().map(|s| s.iter().filter_map(|r| r["occurrences"].as_u64()).sum()).unwrap_or(0)
}

/// A tiny deterministic generator, so generated corpora are reproducible.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

/// The CPU as the whole suite shares it: this binary's test threads and, in a
/// run beside them, the kernel tests' pytest workers (kernels/tests/conftest.py
/// takes the same locks for each test's body; `scripts/test.sh` runs them after
/// this binary, as their module fixtures are not covered). A test that times something
/// on this CPU (the host speed gate) takes it alone; the CPU-heavy tests take a
/// share; on two cores a measurement shared with them measures them. Two lock
/// files: `gate`, held by whoever enters while it takes its lock on `cpu`, and
/// for its whole test by one that takes `cpu` alone, so that no new share
/// starts while it waits or runs (a timed test is never starved by a stream of
/// shares); `cpu`, shared or exclusive. Released when the guard drops.
pub struct CpuGuard {
    _gate: Option<std::fs::File>,
    _cpu: std::fs::File,
}

/// Where the suite's CPU locks live (under `target/`, as the content cache).
pub fn cpu_locks() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kidiom-cpu-locks")
}

fn cpu_lock(alone: bool) -> CpuGuard {
    use std::io::Write;
    let dir = cpu_locks();
    std::fs::create_dir_all(&dir).expect("the suite's lock directory");
    let open = |name: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
    };
    let (gate, cpu) = (open("gate"), open("cpu"));
    let asked = std::time::Instant::now();
    gate.lock().expect("lock the gate");
    let guard = if alone {
        cpu.lock().expect("the CPU alone");
        CpuGuard { _gate: Some(gate), _cpu: cpu }
    } else {
        cpu.lock_shared().expect("a share of the CPU");
        CpuGuard { _gate: None, _cpu: cpu }
    };
    // the wait, by test (libtest names each test's thread after it), so that the suite's time
    // table (bench/test_times.py) can tell a test's own time from its time in this queue
    let waited = asked.elapsed().as_secs_f64();
    if waited >= 0.1 {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!("rust\t{name}\t{waited:.3}\n");
        let _ = open("waits.tsv").write_all(line.as_bytes());
    }
    guard
}

/// A share of the CPU alongside other heavy tests.
pub fn cpu_heavy() -> CpuGuard {
    cpu_lock(false)
}

/// The CPU alone, for a timed test.
pub fn cpu_alone() -> CpuGuard {
    cpu_lock(true)
}
