//! The Ray executor: one `python -m kernels.harness fleet` driver per
//! validation run, spawned on the first call, speaking JSON lines (the
//! format is in docs/RAY.md and `kernels/harness/fleet.py`).
//!
//! A call becomes one job: the harness argv, the files it needs (the
//! baseline tree the local executor would run in, and every file an
//! argument names, such as `--source`), the harness's version and a
//! deadline. Files go as git blob ids; a blob's content is sent once per
//! driver. The job's answer carries the harness's stdout unchanged, its
//! exit code, and where it ran; it becomes the same [`HarnessRun`] the local
//! executor makes, so the gates judge both alike. A task whose worker died
//! twice is a crash, one past its deadline a timeout.
//!
//! Several calls may be in flight at once (the validator overlaps the
//! compiles and the checks): each request has an id, one thread reads the
//! answers and hands each to its caller.
//!
//! [`Fleet::command`] runs any command the same way (`kind: command`): the
//! mining run sends its shards to `kidiom shard` on the nodes through it,
//! with the driver compiled into this crate ([`Fleet::standalone`]), since
//! mining needs no checkout of kidiom.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::python::{HarnessRun, HarnessStatus, ProcessOutcome, STDERR_TAIL, harness_status, last_object, quote, tail};
use crate::error::{Error, Result};

/// How long the driver may take to connect (starting a local Ray on a busy
/// two-core machine takes tens of seconds).
const HELLO_LIMIT: Duration = Duration::from_secs(240);
/// Seconds past a job's deadline before the driver cancels a task that has not answered.
const GRACE: Duration = Duration::from_secs(30);
/// Seconds past that before this side stops waiting for an answer at all.
const BACKSTOP: Duration = Duration::from_secs(60);

/// Where one harness call ran on the fleet (evidence: one per command of a gate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The command, as in the gate's `commands`.
    pub command: String,
    /// The executor (`ray`).
    pub executor: String,
    /// The node: host name and IP.
    pub node: Option<String>,
    /// The GPU ids Ray assigned (`None` for a CPU task).
    pub gpu: Option<String>,
    /// Tries: 2 when the first worker died.
    pub attempts: u32,
    /// Wall time of the task on its node.
    pub seconds: f64,
    /// The harness version the task ran (blob id of its file listing).
    pub harness: Option<String>,
    /// Why earlier attempts failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    /// Why the fleet gave no harness result (worker died twice, deadline), if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the driver says once connected.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Hello {
    /// The protocol version (1).
    #[serde(default)]
    pub protocol: u32,
    /// Ray's version.
    #[serde(default)]
    pub ray: String,
    /// The cluster's total `CPU` and `GPU`.
    #[serde(default)]
    pub resources: HashMap<String, f64>,
    /// Live nodes.
    #[serde(default)]
    pub nodes: usize,
}

/// One answer of the driver.
#[derive(Debug, Deserialize)]
struct Reply {
    status: String,
    #[serde(default)]
    rc: Option<i32>,
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr_tail: String,
    #[serde(default)]
    timed_out: bool,
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    gpu: Option<String>,
    #[serde(default)]
    seconds: f64,
    #[serde(default)]
    attempts: u32,
    #[serde(default)]
    failures: Vec<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    harness_version: Option<String>,
    #[serde(default)]
    wall: f64,
    #[serde(default)]
    queued: f64,
    #[serde(default)]
    dispatch: Option<f64>,
}

/// A running driver.
struct Conn {
    /// Held while a job line is built and written, so blobs are sent before their first use.
    stdin: Mutex<Option<ChildStdin>>,
    sent: Mutex<HashSet<String>>,
    child: Mutex<Child>,
    pending: Arc<Mutex<HashMap<u64, Sender<Value>>>>,
    alive: Arc<AtomicBool>,
    stderr: Arc<Mutex<String>>,
    hello: Hello,
}

/// The client of one `fleet` driver, shared by every harness call of a validation run.
pub struct Fleet {
    python: PathBuf,
    root: PathBuf,
    address: Option<String>,
    conn: Mutex<Option<Arc<Conn>>>,
    next: AtomicU64,
    /// Blob ids of local files shipped by path, hashed once.
    local_ids: Mutex<HashMap<PathBuf, LocalId>>,
    /// The directory holding the compiled-in driver ([`Fleet::standalone`]).
    _driver_dir: Option<tempfile::TempDir>,
}

/// A local file's blob id, with the size and mtime it was hashed at.
type LocalId = (u64, Option<std::time::SystemTime>, String);

/// The driver, compiled in for callers without a checkout (`python -m
/// kernels.harness fleet` from a temporary directory holding just it).
const DRIVER: &str = include_str!("../../../kernels/harness/fleet.py");
const DRIVER_MAIN: &str =
    "import sys\nfrom .fleet import main\nsys.exit(main(sys.argv[2:]) if sys.argv[1:2] == ['fleet'] else 2)\n";

/// A command for a node (`kind: command`): the mining run's shards.
#[derive(Debug, Clone, Default)]
pub struct CommandJob {
    /// The command; `{base}` stands for the task's scratch directory.
    pub argv: Vec<String>,
    /// Files written under `{base}`: relative path -> content.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Files of this machine shipped as `{base}/NAME` and made executable.
    /// The driver reads them (it runs here); one of a MiB or more is kept
    /// on each node by content, so it travels to a node once.
    pub executables: BTreeMap<String, PathBuf>,
    /// Added to the node's environment.
    pub env: BTreeMap<String, String>,
    /// CPUs the task holds (at least 1 is asked for when 0).
    pub cpus: f64,
    /// How long the command may run.
    pub deadline: Duration,
}

/// The answer to a [`CommandJob`].
#[derive(Debug, Clone, Default)]
pub struct CommandReply {
    /// The exit code; `None` when it was killed or never ran.
    pub rc: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// The end of its stderr.
    pub stderr_tail: String,
    /// Killed at its deadline.
    pub timed_out: bool,
    /// Cancelled by the caller.
    pub cancelled: bool,
    /// Where the last attempt ran: `host (IP)`.
    pub node: Option<String>,
    /// Tries: 2 when the first worker died.
    pub attempts: u32,
    /// Why earlier attempts failed.
    pub failures: Vec<String>,
    /// Why there is no result (worker died twice, deadline, a bad job), if there is none.
    pub error: Option<String>,
    /// Wall time of the task on its node.
    pub seconds: f64,
    /// The driver's time from admitting the job to its answer (all attempts).
    pub wall: f64,
    /// Time the job waited in the driver for a free slot.
    pub queued: f64,
    /// Time from submitting the task to its start on the node.
    pub dispatch: Option<f64>,
}

impl CommandReply {
    /// The command ran to the end and exited 0.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && !self.timed_out && !self.cancelled && self.rc == Some(0)
    }
}

/// How one job's exchange with the driver ended.
enum Exchange {
    /// The driver's answer.
    Answer(Value),
    /// The driver is gone, or would not take the job: why.
    Lost(String),
    /// No answer long past the deadline: cancelled on the driver.
    Late,
    /// The caller cancelled: cancelled on the driver.
    Cancelled,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("root", &self.root).field("address", &self.address).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Standard base64 (the content of a file that is not UTF-8).
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The files of a job: relative path -> (blob id, content).
type Files = BTreeMap<String, (String, Vec<u8>)>;

/// The version of the harness in `tree` (`<tree>/kernels/harness`), computed as
/// `kernels/harness/fleet.py` does: the blob id of its sorted `path blob-id` lines.
fn harness_version(files: &Files, cwd: &str) -> Option<String> {
    let prefix = if cwd.is_empty() { String::new() } else { format!("{cwd}/") };
    let mut listing = String::new();
    for (rel, (id, _)) in files {
        if let Some(inner) = rel.strip_prefix(&prefix)
            && inner.starts_with("kernels/harness/")
        {
            listing.push_str(&format!("{inner} {id}\n"));
        }
    }
    (!listing.is_empty()).then(|| kidiom_syntax::blob_id(listing.as_bytes()))
}

/// Whether a harness call needs a GPU: `--device cuda`, or `auto` (and a
/// bench without a device) when the cluster has GPUs.
fn wants_gpu(args: &[String], cluster_has_gpus: bool) -> bool {
    let device = args.iter().position(|a| a == "--device").and_then(|i| args.get(i + 1)).map(String::as_str);
    match device {
        Some("cuda") => true,
        Some("cpu") => false,
        _ => cluster_has_gpus && matches!(args.first().map(String::as_str), Some("bench" | "check")),
    }
}

impl Fleet {
    /// A client that will run the driver under `python` in `root` (the
    /// directory holding `kernels/`), connecting to `address`.
    pub fn new(python: impl Into<PathBuf>, root: impl Into<PathBuf>, address: Option<String>) -> Fleet {
        Fleet {
            python: python.into(),
            root: root.into(),
            address,
            conn: Mutex::new(None),
            next: AtomicU64::new(1),
            local_ids: Mutex::default(),
            _driver_dir: None,
        }
    }

    /// A client that runs the driver compiled into this binary (from a
    /// temporary directory it removes when dropped), for callers that have
    /// no checkout of kidiom, such as the mining run.
    pub fn standalone(python: impl Into<PathBuf>, address: Option<String>) -> Result<Fleet> {
        let dir = tempfile::Builder::new().prefix("kidiom-driver-").tempdir().map_err(|e| Error::io("/tmp", e))?;
        let pkg = dir.path().join("kernels/harness");
        std::fs::create_dir_all(&pkg).map_err(|e| Error::io(&pkg, e))?;
        for (rel, text) in [
            ("kernels/__init__.py", ""),
            ("kernels/harness/__init__.py", ""),
            ("kernels/harness/__main__.py", DRIVER_MAIN),
            ("kernels/harness/fleet.py", DRIVER),
        ] {
            let p = dir.path().join(rel);
            std::fs::write(&p, text).map_err(|e| Error::io(&p, e))?;
        }
        let mut fleet = Fleet::new(python, dir.path(), address);
        fleet._driver_dir = Some(dir);
        Ok(fleet)
    }

    /// The cluster's resources, connecting if need be.
    pub fn hello(&self) -> Result<Hello> {
        Ok(self.connect()?.hello.clone())
    }

    /// The driver, started on first use and again after it died.
    fn connect(&self) -> Result<Arc<Conn>> {
        let mut slot = lock(&self.conn);
        if let Some(c) = slot.as_ref()
            && c.alive.load(Ordering::SeqCst)
        {
            return Ok(c.clone());
        }
        if let Some(old) = slot.take() {
            old.close(Duration::from_secs(5));
        }
        let conn = Arc::new(self.spawn()?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn spawn(&self) -> Result<Conn> {
        let mut args: Vec<String> = vec!["-m".into(), "kernels.harness".into(), "fleet".into()];
        args.extend(["--grace".into(), GRACE.as_secs().to_string()]);
        if let Some(a) = &self.address {
            args.extend(["--address".into(), a.clone()]);
        }
        let command =
            std::iter::once(self.python.to_string_lossy().into_owned()).chain(args.iter().cloned()).map(|s| quote(&s));
        let command = command.collect::<Vec<_>>().join(" ");
        let mut child = Command::new(&self.python)
            .args(&args)
            .current_dir(&self.root)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|cause| Error::Spawn { command: command.clone(), cause })?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let keep = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut s = lock(&keep);
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 4 * STDERR_TAIL {
                        *s = tail(&s, STDERR_TAIL);
                    }
                }
            });
        }
        let pending: Arc<Mutex<HashMap<u64, Sender<Value>>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (hello_tx, hello_rx) = mpsc::channel::<Value>();
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err(Error::Fleet(format!("{command}: no stdout")));
        };
        {
            let (pending, alive) = (pending.clone(), alive.clone());
            std::thread::spawn(move || {
                let mut hello_tx = Some(hello_tx);
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
                    if v.get("hello").is_some() || v.get("fatal").is_some() {
                        if let Some(tx) = hello_tx.take() {
                            let _ = tx.send(v);
                        }
                    } else if let Some(id) = v.get("id").and_then(Value::as_u64)
                        && let Some(tx) = lock(&pending).remove(&id)
                    {
                        let _ = tx.send(v);
                    }
                }
                // the driver is gone: every caller still waiting hears it (its sender drops)
                alive.store(false, Ordering::SeqCst);
                lock(&pending).clear();
            });
        }
        let stdin = child.stdin.take();
        let conn = Conn {
            stdin: Mutex::new(stdin),
            sent: Mutex::default(),
            child: Mutex::new(child),
            pending,
            alive,
            stderr,
            hello: Hello::default(),
        };
        let failed = |conn: &Conn, why: String| {
            conn.close(Duration::from_secs(5));
            let err = tail(lock(&conn.stderr).trim(), 1500);
            Error::Fleet(if err.is_empty() { why } else { format!("{why}; stderr: {err}") })
        };
        match hello_rx.recv_timeout(HELLO_LIMIT) {
            Ok(v) if v.get("hello").is_some() => {
                let hello = serde_json::from_value(v["hello"].clone()).unwrap_or_default();
                Ok(Conn { hello, ..conn })
            }
            Ok(v) => {
                let why = v["fatal"].as_str().unwrap_or("the driver failed").to_string();
                Err(failed(&conn, why))
            }
            Err(RecvTimeoutError::Timeout) => {
                Err(failed(&conn, format!("{command}: no answer in {} s", HELLO_LIMIT.as_secs())))
            }
            Err(RecvTimeoutError::Disconnected) => Err(failed(&conn, format!("{command} exited before connecting"))),
        }
    }

    /// Runs one harness call (`args` as for [`super::python::Harness::call`],
    /// in the tree `root`) as a task, waiting at most about `limit` (and the
    /// driver's grace); cancelled when `cancel` is set.
    pub(crate) fn call(
        &self,
        python: &Path,
        root: &Path,
        args: &[String],
        inner_timeout: String,
        limit: Duration,
        cancel: &AtomicBool,
    ) -> Result<HarnessRun> {
        let started = Instant::now();
        let mut argv: Vec<String> = args.to_vec();
        argv.extend(["--json".into(), "--timeout".into(), inner_timeout]);
        let command = std::iter::once(python.to_string_lossy().into_owned())
            .chain(["-m".to_string(), "kernels.harness".to_string()])
            .chain(argv.iter().cloned())
            .map(|s| quote(&s))
            .collect::<Vec<_>>()
            .join(" ");
        let conn = self.connect()?;
        let (files, job_argv, cwd) = ship(root, &argv)?;
        let gpu = wants_gpu(args, conn.hello.resources.get("GPU").is_some_and(|g| *g > 0.0));
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let mut job = json!({
            "id": id,
            "kind": "harness",
            "argv": job_argv,
            "cwd": cwd,
            "gpu": gpu,
            "deadline_s": limit.as_secs_f64().max(1.0),
            "harness_version": harness_version(&files, &cwd),
            "env": {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "TRITON_DEFAULT_FP_FUSION": "1"},
            "files": files.iter().map(|(rel, (blob, _))| (rel.clone(), Value::from(blob.clone()))).collect::<serde_json::Map<_, _>>(),
        });
        let outcome =
            |code: Option<i32>, timed_out: bool, cancelled: bool, stdout: String, err: String| ProcessOutcome {
                command: command.clone(),
                cwd: root.to_string_lossy().into_owned(),
                code,
                timed_out,
                cancelled,
                seconds: started.elapsed().as_secs_f64(),
                stdout,
                stderr_tail: tail(&err, STDERR_TAIL),
                stragglers_killed: Vec::new(),
            };
        let lost = |conn: &Conn, why: &str| {
            let err = format!("fleet: {why}; driver stderr: {}", tail(lock(&conn.stderr).trim(), 1500));
            let mut p = placement(&command, None);
            p.error = Some(why.to_string());
            HarnessRun {
                status: HarnessStatus::Crashed,
                process: outcome(None, false, false, String::new(), err),
                json: Value::Null,
                placement: Some(p),
            }
        };
        let reply = match conn.exchange(id, &mut job, &files, &[], started, limit + GRACE + BACKSTOP, cancel) {
            Exchange::Answer(v) => v,
            Exchange::Lost(why) => return Ok(lost(&conn, &why)),
            end @ (Exchange::Late | Exchange::Cancelled) => {
                let late = matches!(end, Exchange::Late);
                let why = if late { "no answer from the driver: gave up" } else { "cancelled" };
                let mut p = placement(&command, None);
                p.error = Some(why.to_string());
                return Ok(HarnessRun {
                    status: if late { HarnessStatus::TimedOut } else { HarnessStatus::Crashed },
                    process: outcome(None, late, !late, String::new(), format!("fleet: {why}")),
                    json: Value::Null,
                    placement: Some(p),
                });
            }
        };
        let r: Reply = match serde_json::from_value(reply) {
            Ok(r) => r,
            Err(e) => return Ok(lost(&conn, &format!("an answer that does not parse: {e}"))),
        };
        let cancelled = r.status == "cancelled";
        let failed = r.status != "ok";
        let code = if r.timed_out || failed { None } else { r.rc };
        let json = last_object(&r.stdout);
        let status = if r.timed_out {
            HarnessStatus::TimedOut
        } else if failed {
            HarnessStatus::Crashed
        } else {
            harness_status(code, &json)
        };
        let err = match &r.error {
            Some(e) => format!("fleet: {e}\n{}", r.stderr_tail),
            None => r.stderr_tail.clone(),
        };
        let mut p = placement(&command, r.node);
        p.gpu = r.gpu;
        p.attempts = r.attempts;
        p.seconds = r.seconds;
        p.harness = r.harness_version;
        p.failures = r.failures;
        p.error = r.error;
        Ok(HarnessRun {
            status,
            process: outcome(code, r.timed_out, cancelled, r.stdout, err),
            json,
            placement: Some(p),
        })
    }

    /// Runs one command as a task (`kind: command`) and waits for its
    /// answer, at most about its deadline (and the driver's grace). Calls
    /// from several threads are in flight together. A driver that is gone
    /// or never answers is an error; a command that failed on its node is
    /// a reply that says so ([`CommandReply::succeeded`]).
    pub fn command(&self, job: CommandJob, cancel: &AtomicBool) -> Result<CommandReply> {
        let started = Instant::now();
        let mut local = Vec::with_capacity(job.executables.len());
        let mut names = serde_json::Map::new();
        for (rel, path) in &job.executables {
            let blob = self.local_blob(path)?;
            names.insert(rel.clone(), Value::from(blob.clone()));
            local.push((blob, path.clone()));
        }
        let conn = self.connect()?;
        let executable: Vec<&String> = job.executables.keys().collect();
        let files: Files =
            job.files.into_iter().map(|(rel, data)| (rel, (kidiom_syntax::blob_id(&data), data))).collect();
        names.extend(files.iter().map(|(rel, (blob, _))| (rel.clone(), Value::from(blob.clone()))));
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let mut wire = json!({
            "id": id,
            "kind": "command",
            "argv": job.argv,
            "files": names,
            "executable": executable,
            "env": job.env,
            "resources": {"num_cpus": if job.cpus > 0.0 { job.cpus } else { 1.0 }},
            "deadline_s": job.deadline.as_secs_f64().max(1.0),
        });
        let limit = job.deadline + GRACE + BACKSTOP;
        let lost = |why: &str| {
            let err = tail(lock(&conn.stderr).trim(), 1500);
            Error::Fleet(if err.is_empty() { why.to_string() } else { format!("{why}; driver stderr: {err}") })
        };
        let reply = match conn.exchange(id, &mut wire, &files, &local, started, limit, cancel) {
            Exchange::Answer(v) => v,
            Exchange::Lost(why) => return Err(lost(&why)),
            Exchange::Late => {
                return Err(lost(&format!("no answer from the driver in {} s: gave up", limit.as_secs())));
            }
            Exchange::Cancelled => {
                return Ok(CommandReply {
                    cancelled: true,
                    error: Some("cancelled".into()),
                    ..CommandReply::default()
                });
            }
        };
        let r: Reply =
            serde_json::from_value(reply).map_err(|e| lost(&format!("an answer that does not parse: {e}")))?;
        Ok(CommandReply {
            rc: if r.status == "ok" && !r.timed_out { r.rc } else { None },
            cancelled: r.status == "cancelled",
            stdout: r.stdout,
            stderr_tail: r.stderr_tail,
            timed_out: r.timed_out,
            node: r.node,
            attempts: r.attempts,
            failures: r.failures,
            error: r.error.or_else(|| (r.status != "ok").then(|| format!("status {}", r.status))),
            seconds: r.seconds,
            wall: r.wall,
            queued: r.queued,
            dispatch: r.dispatch,
        })
    }

    /// The git blob id of a local file, hashed once while it is unchanged
    /// (a kidiom binary is a hundred MB or more). The lock is held while
    /// hashing: the first calls of many threads wait for one read.
    fn local_blob(&self, path: &Path) -> Result<String> {
        let mut ids = lock(&self.local_ids);
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        let key = (meta.len(), meta.modified().ok());
        if let Some((len, mtime, id)) = ids.get(path)
            && (*len, *mtime) == key
        {
            return Ok(id.clone());
        }
        let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let id = kidiom_syntax::blob_id(&data);
        ids.insert(path.to_path_buf(), (key.0, key.1, id.clone()));
        Ok(id)
    }
}

fn placement(command: &str, node: Option<String>) -> Placement {
    Placement {
        command: command.to_string(),
        executor: "ray".into(),
        node,
        gpu: None,
        attempts: 0,
        seconds: 0.0,
        harness: None,
        failures: Vec::new(),
        error: None,
    }
}

/// The files a call needs, its argv with their paths as `{base}/REL`, and
/// its working directory: the tree `root` (shipped whole, as `<name of
/// root>/...`, the same tree the local executor runs in) and every other
/// file an argument names, relative to the tree's parent (the validation's
/// temporary directory) or, outside it, as `inputs/N/NAME`. Paths are
/// relative to the task's scratch directory `{base}`.
fn ship(root: &Path, argv: &[String]) -> Result<(Files, Vec<String>, String)> {
    let base = root.parent().unwrap_or(root);
    let rel_of = |p: &Path| p.strip_prefix(base).ok().map(|r| r.to_string_lossy().replace('\\', "/"));
    let mut files = Files::new();
    let add = |files: &mut Files, path: &Path, rel: String| -> Result<()> {
        let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        files.insert(rel, (kidiom_syntax::blob_id(&data), data));
        Ok(())
    };
    for f in kidiom_syntax::tree_files(root)? {
        if !std::fs::symlink_metadata(&f).is_ok_and(|m| m.is_file()) {
            continue;
        }
        if let Some(rel) = rel_of(&f) {
            add(&mut files, &f, rel)?;
        }
    }
    let mut out = Vec::with_capacity(argv.len());
    for (i, a) in argv.iter().enumerate() {
        let p = Path::new(a);
        if !p.is_absolute() || !p.is_file() {
            out.push(a.clone());
            continue;
        }
        let rel = match rel_of(p) {
            Some(r) if !r.split('/').any(|c| c == "..") => r,
            _ => format!("inputs/{i}/{}", p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()),
        };
        if !files.contains_key(&rel) {
            add(&mut files, p, rel.clone())?;
        }
        out.push(format!("{{base}}/{rel}"));
    }
    let cwd = rel_of(root).unwrap_or_default();
    Ok((files, out, cwd))
}

impl Conn {
    fn send_line(&self, line: &str) -> std::io::Result<()> {
        let mut stdin = lock(&self.stdin);
        let Some(w) = stdin.as_mut() else { return Err(std::io::Error::other("the driver's stdin is closed")) };
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        w.flush()
    }

    /// Adds the blobs the driver has not had yet to `job` and writes it, in
    /// one critical section. `local` blobs, `(id, path)`, go as their path:
    /// the driver runs on this machine and reads them itself.
    fn send_job(&self, job: &mut Value, files: &Files, local: &[(String, PathBuf)]) -> std::io::Result<()> {
        let mut stdin = lock(&self.stdin);
        let Some(w) = stdin.as_mut() else { return Err(std::io::Error::other("the driver's stdin is closed")) };
        let mut sent = lock(&self.sent);
        let mut blobs = serde_json::Map::new();
        for (blob, data) in files.values() {
            if sent.contains(blob) || blobs.contains_key(blob) {
                continue;
            }
            let body = match std::str::from_utf8(data) {
                Ok(s) => json!({ "text": s }),
                Err(_) => json!({ "base64": base64(data) }),
            };
            blobs.insert(blob.clone(), body);
        }
        for (blob, path) in local {
            if !sent.contains(blob) && !blobs.contains_key(blob) {
                blobs.insert(blob.clone(), json!({ "path": path.to_string_lossy() }));
            }
        }
        job["blobs"] = Value::Object(blobs);
        let line = job.to_string();
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        w.flush()?;
        if let Some(b) = job["blobs"].as_object() {
            sent.extend(b.keys().cloned());
        }
        Ok(())
    }

    /// Sends job `id` and waits for its answer until `give_up` after
    /// `started`, or until `cancel` is set (then the driver cancels it).
    #[allow(clippy::too_many_arguments)] // one job's parts, each used once
    fn exchange(
        &self,
        id: u64,
        job: &mut Value,
        files: &Files,
        local: &[(String, PathBuf)],
        started: Instant,
        give_up: Duration,
        cancel: &AtomicBool,
    ) -> Exchange {
        let (tx, rx) = mpsc::channel();
        lock(&self.pending).insert(id, tx);
        if let Err(e) = self.send_job(job, files, local) {
            lock(&self.pending).remove(&id);
            self.alive.store(false, Ordering::SeqCst);
            return Exchange::Lost(format!("cannot send the job to the driver: {e}"));
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(v) => return Exchange::Answer(v),
                Err(RecvTimeoutError::Disconnected) => return Exchange::Lost("the driver exited".into()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let late = started.elapsed() > give_up;
            if cancel.load(Ordering::Relaxed) || late {
                lock(&self.pending).remove(&id);
                self.send_line(&json!({ "cancel": id }).to_string()).ok();
                return if late { Exchange::Late } else { Exchange::Cancelled };
            }
        }
    }

    /// Closes the driver's input (it finishes what it has, stops what it
    /// started, disconnects) and waits up to `wait` before killing it.
    fn close(&self, wait: Duration) {
        lock(&self.stdin).take();
        let mut child = lock(&self.child);
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(c) = lock(&self.conn).take() {
            c.close(Duration::from_secs(60));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::python::Harness;

    /// A stand-in driver speaking the protocol: the first argument says how the job ends.
    const FAKE: &str = r#"import json, sys
print("Ray says hello on stdout too")
print(json.dumps({"hello": {"protocol": 1, "ray": "fake", "resources": {"CPU": 4.0, "GPU": 2.0}, "nodes": 3}}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    if "cancel" in job:
        continue
    how = job["argv"][0]
    r = {"id": job["id"], "status": "ok", "rc": 0, "node": "n7 (10.0.0.7)", "gpu": "1" if job.get("gpu") else None,
         "seconds": 0.25, "attempts": 1, "failures": [], "error": None, "harness_version": job.get("harness_version"),
         "stderr_tail": "", "timed_out": False, "wall": 0.5, "queued": 0.125, "dispatch": 0.0625}
    echo = {"wire": "kidiom-harness", "version": 1, "command": "check", "status": "passed", "argv": job["argv"],
            "files": sorted(job["files"]), "blobs": len(job["blobs"]), "deadline_s": job["deadline_s"],
            "kind": job.get("kind"), "bodies": sorted(next(iter(b)) for b in job["blobs"].values()),
            "executable": job.get("executable"), "env": job.get("env"), "resources": job.get("resources")}
    if how == "ok":
        r["stdout"] = "noise\n" + json.dumps(echo) + "\n"
    elif how == "died":
        r.update(status="error", rc=None, attempts=2, failures=["attempt 1: WorkerCrashedError: gone"],
                 error="worker died twice: attempt 1: WorkerCrashedError: gone; attempt 2: WorkerCrashedError: gone")
    elif how == "deadline":
        r.update(status="error", rc=None, timed_out=True, error="deadline: killed after 9 s", stdout="started\n")
    elif how == "hang":
        continue
    elif how == "exit":
        sys.exit(1)
    print(json.dumps(r), flush=True)
"#;

    fn fake_fleet() -> Option<(tempfile::TempDir, Harness)> {
        let python = PathBuf::from("python3");
        if Command::new(&python).arg("-c").arg("pass").output().map(|o| !o.status.success()).unwrap_or(true) {
            eprintln!("skipping: no python3");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let driver = tmp.path().join("driver");
        std::fs::create_dir_all(driver.join("kernels/harness")).unwrap();
        std::fs::write(driver.join("kernels/__init__.py"), "").unwrap();
        std::fs::write(driver.join("kernels/harness/__init__.py"), "").unwrap();
        std::fs::write(driver.join("kernels/harness/__main__.py"), FAKE).unwrap();
        let tree = tmp.path().join("tree");
        std::fs::create_dir_all(tree.join("kernels/harness")).unwrap();
        std::fs::write(tree.join("kernels/harness/cli.py"), "print(1)\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("candidate")).unwrap();
        std::fs::write(tmp.path().join("candidate/k.py"), "cand\n").unwrap();
        let fleet = Arc::new(Fleet::new(&python, &driver, None));
        let harness = Harness { python, root: tree, fleet: Some(fleet) };
        Some((tmp, harness))
    }

    fn args(how: &str, tmp: &Path) -> Vec<String> {
        let cand = tmp.join("candidate/k.py").to_string_lossy().into_owned();
        vec![how.into(), "--kernel".into(), "k".into(), "--source".into(), cand, "--device".into(), "cuda".into()]
    }

    #[test]
    fn answers_become_the_harness_runs_the_local_executor_makes() {
        let Some((tmp, h)) = fake_fleet() else { return };
        let run = h.call(&args("ok", tmp.path()), Duration::from_secs(20)).unwrap();
        assert_eq!(run.status, HarnessStatus::Ok, "{run:?}");
        assert_eq!(run.process.code, Some(0));
        assert!(run.process.command.contains("-m kernels.harness ok --kernel k --source"), "{}", run.process.command);
        assert!(run.process.command.ends_with("--json --timeout 17"), "{}", run.process.command);
        let j = &run.json;
        assert_eq!(j["files"], json!(["candidate/k.py", "tree/kernels/harness/cli.py"]));
        assert_eq!(j["argv"][4], "{base}/candidate/k.py");
        assert_eq!(j["blobs"], 2);
        assert_eq!(j["deadline_s"], 20.0);
        let p = run.placement.clone().unwrap();
        assert_eq!((p.node.as_deref(), p.gpu.as_deref(), p.attempts), (Some("n7 (10.0.0.7)"), Some("1"), 1));
        assert_eq!(p.harness, harness_version(&ship(&h.root, &[]).unwrap().0, "tree"));
        // the blobs went once: the second job names them only
        let again = h.call(&args("ok", tmp.path()), Duration::from_secs(20)).unwrap();
        assert_eq!(again.json["blobs"], 0);
        assert_eq!(h.fleet.as_ref().unwrap().hello().unwrap().nodes, 3);
    }

    #[test]
    fn a_worker_that_died_twice_is_a_crash_and_a_deadline_a_timeout() {
        let Some((tmp, h)) = fake_fleet() else { return };
        let died = h.call(&args("died", tmp.path()), Duration::from_secs(20)).unwrap();
        assert_eq!((died.status, died.process.code), (HarnessStatus::Crashed, None));
        let p = died.placement.clone().unwrap();
        assert_eq!(p.attempts, 2);
        assert!(p.error.as_deref().is_some_and(|e| e.starts_with("worker died twice")), "{p:?}");
        assert!(died.log().contains("fleet: worker died twice"), "{}", died.log());
        let late = h.call(&args("deadline", tmp.path()), Duration::from_secs(20)).unwrap();
        assert_eq!(late.status, HarnessStatus::TimedOut);
        assert!(late.process.timed_out && late.process.stdout == "started\n", "{late:?}");
        assert!(late.log().contains("killed after"), "{}", late.log());
    }

    #[test]
    fn cancelling_and_a_dead_driver_end_calls_and_the_next_call_restarts_it() {
        let Some((tmp, h)) = fake_fleet() else { return };
        let cancel = AtomicBool::new(false);
        let started = Instant::now();
        let run = std::thread::scope(|s| {
            let c = s.spawn(|| h.call_cancellable(&args("hang", tmp.path()), Duration::from_secs(60), &cancel));
            std::thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Relaxed);
            c.join().unwrap().unwrap()
        });
        assert!(run.process.cancelled && started.elapsed() < Duration::from_secs(10), "{run:?}");
        let gone = h.call(&args("exit", tmp.path()), Duration::from_secs(20)).unwrap();
        assert_eq!(gone.status, HarnessStatus::Crashed);
        assert!(gone.log().contains("the driver exited"), "{}", gone.log());
        let back = h.call(&args("ok", tmp.path()), Duration::from_secs(20)).unwrap();
        assert_eq!(back.status, HarnessStatus::Ok);
        assert_eq!(back.json["blobs"], 2, "a new driver gets the blobs again");
    }

    #[test]
    fn a_driver_that_cannot_connect_is_an_error() {
        let Some((tmp, _)) = fake_fleet() else { return };
        let bad = tmp.path().join("bad");
        std::fs::create_dir_all(bad.join("kernels/harness")).unwrap();
        std::fs::write(bad.join("kernels/__init__.py"), "").unwrap();
        std::fs::write(bad.join("kernels/harness/__init__.py"), "").unwrap();
        std::fs::write(
            bad.join("kernels/harness/__main__.py"),
            "import json; print(json.dumps({'fatal': 'cannot start Ray at x: ConnectionError: no'}))",
        )
        .unwrap();
        let e = Fleet::new("python3", &bad, Some("x".into())).hello().unwrap_err();
        assert!(matches!(&e, Error::Fleet(m) if m.starts_with("cannot start Ray at x")), "{e}");
    }

    fn command(how: &str, tool: &Path) -> CommandJob {
        CommandJob {
            argv: vec![how.into(), "shard".into(), "{base}/job.json".into()],
            files: BTreeMap::from([("job.json".to_string(), b"{}".to_vec())]),
            executables: BTreeMap::from([("kidiom".to_string(), tool.to_path_buf())]),
            env: BTreeMap::from([("RAYON_NUM_THREADS".to_string(), "1".to_string())]),
            cpus: 0.0,
            deadline: Duration::from_secs(20),
        }
    }

    #[test]
    fn commands_ship_their_files_and_a_local_executable_by_path_once() {
        let Some((tmp, h)) = fake_fleet() else { return };
        let fleet = h.fleet.clone().unwrap();
        let tool = tmp.path().join("tool");
        std::fs::write(&tool, [0x7fu8, b'E', b'L', b'F', 0, 0xff]).unwrap();
        let no = AtomicBool::new(false);
        let r = fleet.command(command("ok", &tool), &no).unwrap();
        assert!(r.succeeded(), "{r:?}");
        assert_eq!(
            (r.node.as_deref(), r.attempts, r.seconds, r.wall, r.queued),
            (Some("n7 (10.0.0.7)"), 1, 0.25, 0.5, 0.125)
        );
        let echo = last_object(&r.stdout);
        assert_eq!(echo["kind"], "command");
        assert_eq!(echo["files"], json!(["job.json", "kidiom"]));
        // the executable goes as its path (the driver runs here and reads it), the job file as text
        assert_eq!(echo["bodies"], json!(["path", "text"]));
        assert_eq!(echo["executable"], json!(["kidiom"]));
        assert_eq!(echo["env"]["RAYON_NUM_THREADS"], "1");
        assert_eq!(echo["resources"]["num_cpus"], 1.0);
        assert_eq!(echo["deadline_s"], 20.0);
        // several in flight from several threads; the blobs went once
        let replies: Vec<CommandReply> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..4).map(|_| s.spawn(|| fleet.command(command("ok", &tool), &no).unwrap())).collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        for r in &replies {
            assert!(r.succeeded(), "{r:?}");
            assert_eq!(last_object(&r.stdout)["blobs"], 0);
        }
    }

    #[test]
    fn a_command_that_failed_says_why_and_a_lost_driver_is_an_error() {
        let Some((tmp, h)) = fake_fleet() else { return };
        let fleet = h.fleet.clone().unwrap();
        let tool = tmp.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let no = AtomicBool::new(false);
        let died = fleet.command(command("died", &tool), &no).unwrap();
        assert!(!died.succeeded() && died.rc.is_none() && died.attempts == 2, "{died:?}");
        assert!(died.error.as_deref().is_some_and(|e| e.starts_with("worker died twice")), "{died:?}");
        let late = fleet.command(command("deadline", &tool), &no).unwrap();
        assert!(!late.succeeded() && late.timed_out, "{late:?}");
        let cancel = AtomicBool::new(false);
        let hung = std::thread::scope(|s| {
            let c = s.spawn(|| fleet.command(command("hang", &tool), &cancel));
            std::thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Relaxed);
            c.join().unwrap().unwrap()
        });
        assert!(hung.cancelled && !hung.succeeded(), "{hung:?}");
        let e = fleet.command(command("exit", &tool), &no).unwrap_err();
        assert!(matches!(&e, Error::Fleet(m) if m.starts_with("the driver exited")), "{e}");
        let missing = fleet.command(command("ok", &tmp.path().join("nothing")), &no).unwrap_err();
        assert!(missing.to_string().contains("nothing"), "{missing}");
    }

    #[test]
    fn the_standalone_driver_is_the_compiled_in_one() {
        let fleet = Fleet::standalone("python3", None).unwrap();
        let dir = fleet._driver_dir.as_ref().unwrap().path().to_path_buf();
        assert_eq!(std::fs::read_to_string(dir.join("kernels/harness/fleet.py")).unwrap(), DRIVER);
        assert!(DRIVER.contains("def serve(args)"));
        drop(fleet);
        assert!(!dir.exists(), "removed with the client");
    }

    #[test]
    fn base64_is_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn gpu_tasks_are_benches_and_cuda_checks() {
        let a = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert!(!wants_gpu(&a("compile --kernel k"), true));
        assert!(!wants_gpu(&a("check --kernel k --device cpu"), true));
        assert!(wants_gpu(&a("check --kernel k --device cuda"), false));
        assert!(wants_gpu(&a("bench --kernel k --device cuda --iters 50"), false));
        assert!(!wants_gpu(&a("bench --kernel kv_transfer --device cpu"), true), "the host bench times a CPU");
        assert!(wants_gpu(&a("check --kernel k --device auto"), true));
        assert!(!wants_gpu(&a("check --kernel k --device auto"), false));
        assert!(!wants_gpu(&a("sweep --kernel k"), true));
    }

    #[test]
    fn a_job_ships_the_tree_and_the_files_its_arguments_name() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        std::fs::create_dir_all(tree.join("kernels/harness/__pycache__")).unwrap();
        std::fs::create_dir_all(tree.join("kernels/kda")).unwrap();
        std::fs::write(tree.join("kernels/harness/cli.py"), "print(1)\n").unwrap();
        std::fs::write(tree.join("kernels/harness/__pycache__/cli.pyc"), [0u8, 1]).unwrap();
        std::fs::write(tree.join("kernels/kda/decode.py"), "base\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("candidate/kernels/kda")).unwrap();
        let cand = tmp.path().join("candidate/kernels/kda/decode.py");
        std::fs::write(&cand, "cand\n").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let other = elsewhere.path().join("base.py");
        std::fs::write(&other, [0xffu8, 0x00]).unwrap();
        let argv: Vec<String> = ["bench", "--source", cand.to_str().unwrap(), "--baseline", other.to_str().unwrap()]
            .into_iter()
            .map(String::from)
            .collect();
        let (files, out, cwd) = ship(&tree, &argv).unwrap();
        assert_eq!(cwd, "tree");
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "candidate/kernels/kda/decode.py",
                "inputs/4/base.py",
                "tree/kernels/harness/cli.py",
                "tree/kernels/kda/decode.py"
            ]
        );
        assert_eq!(
            out,
            ["bench", "--source", "{base}/candidate/kernels/kda/decode.py", "--baseline", "{base}/inputs/4/base.py"]
        );
        assert_eq!(files["tree/kernels/kda/decode.py"].0, kidiom_syntax::blob_id(b"base\n"));
        // the harness version is over the harness's files only, relative to the tree
        let v = harness_version(&files, &cwd).unwrap();
        let listing = format!("kernels/harness/cli.py {}\n", kidiom_syntax::blob_id(b"print(1)\n"));
        assert_eq!(v, kidiom_syntax::blob_id(listing.as_bytes()));
    }
}
