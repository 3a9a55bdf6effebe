//! The Ray executor's client: one `python -m kernels.harness fleet` driver
//! per run, started on the first job, speaking JSON lines (the format is
//! in docs/RAY.md and `kernels/harness/fleet.py`).
//!
//! The driver is the harness's own command, run in the directory that holds
//! the harness (the caller finds it: [`crate::find_harness`]); nothing of
//! it is compiled into kidiom.
//!
//! A job is a harness call ([`Fleet::run_task`], `kind: harness`: the
//! validator ships the tree the local executor would run in and says which
//! call needs a GPU) or any command ([`Fleet::command`], `kind: command`:
//! the mining run's shards, `kidiom shard` on the nodes). Files go as git
//! blob ids; a blob's content is sent once per driver. The answer carries
//! the child's stdout unchanged, its exit code, and where it ran. A task
//! whose worker died twice is a crash, one past its deadline a timeout.
//!
//! Several jobs may be in flight at once (the validator overlaps the
//! compiles and the checks; mining sends all its shards): each request has
//! an id, one thread reads the answers and hands each to its caller.

mod driver;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use self::driver::{Conn, lock};
pub use self::wire::Files;
use self::wire::{Exchange, Reply, blob_id};
use crate::error::{Error, Result};
use crate::process::{ProcessOutcome, STDERR_TAIL, tail};

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

/// The client of one `fleet` driver, shared by every job of a run.
pub struct Fleet {
    python: PathBuf,
    root: PathBuf,
    address: Option<String>,
    conn: Mutex<Option<Arc<Conn>>>,
    next: AtomicU64,
    /// Blob ids of local files shipped by path, hashed once.
    local_ids: Mutex<HashMap<PathBuf, LocalId>>,
}

/// A local file's blob id, with the size and mtime it was hashed at.
type LocalId = (u64, Option<std::time::SystemTime>, String);

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

/// One harness call as a task (`kind: harness`), as the validator ships it.
#[derive(Debug, Clone)]
pub struct HarnessTask {
    /// The command line the evidence shows (the one the local executor would run).
    pub command: String,
    /// The working directory the evidence shows.
    pub shown_cwd: PathBuf,
    /// The harness's argv, paths as `{base}/REL`.
    pub argv: Vec<String>,
    /// Its working directory, relative to `{base}`.
    pub cwd: String,
    /// The files it needs, relative to `{base}`.
    pub files: Files,
    /// Whether it holds a GPU.
    pub gpu: bool,
    /// The harness version (blob id of its file listing).
    pub harness_version: Option<String>,
    /// Added to the node's environment.
    pub env: BTreeMap<String, String>,
    /// How long it may run.
    pub deadline: Duration,
    /// When the call started (its wall time and the wait for an answer count from it).
    pub started: Instant,
}

/// How a [`HarnessTask`] ended: the process as the local executor reports
/// one, and where it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRun {
    /// The harness process (`stdout` unchanged; `code` `None` unless it ran to its end).
    pub process: ProcessOutcome,
    /// Where it ran, and why the fleet gave no result if it did not.
    pub placement: Placement,
    /// Whether the harness ran to its end on a node (`false`: the driver was
    /// lost, gave up, the caller cancelled, or the worker died twice).
    pub ran: bool,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet").field("root", &self.root).field("address", &self.address).finish_non_exhaustive()
    }
}

impl Fleet {
    /// A client that will run the driver under `python` in `root` (the
    /// directory holding the harness, `kernels/harness`), connecting to `address`.
    pub fn new(python: impl Into<PathBuf>, root: impl Into<PathBuf>, address: Option<String>) -> Fleet {
        Fleet {
            python: python.into(),
            root: root.into(),
            address,
            conn: Mutex::new(None),
            next: AtomicU64::new(1),
            local_ids: Mutex::default(),
        }
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
        let conn = Arc::new(Conn::start(&self.python, &self.root, self.address.as_deref())?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Runs one harness call as a task, waiting at most about its deadline
    /// (and the driver's grace); cancelled when `cancel` is set. A driver
    /// that is lost or gives no answer is a [`TaskRun`] that did not run, so
    /// that the gates judge it as a crash or a timeout of the harness.
    pub fn run_task(&self, task: HarnessTask, cancel: &AtomicBool) -> Result<TaskRun> {
        let conn = self.connect()?;
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let mut job = json!({
            "id": id,
            "kind": "harness",
            "argv": task.argv,
            "cwd": task.cwd,
            "gpu": task.gpu,
            "deadline_s": task.deadline.as_secs_f64().max(1.0),
            "harness_version": task.harness_version,
            "env": task.env,
            "files": task.files.iter().map(|(rel, (blob, _))| (rel.clone(), Value::from(blob.clone()))).collect::<serde_json::Map<_, _>>(),
        });
        let give_up = task.deadline + GRACE + BACKSTOP;
        let ended = |why: &str, timed_out: bool, cancelled: bool, err: String| {
            let mut placement = placement(&task.command, None);
            placement.error = Some(why.to_string());
            let process = outcome(&task, None, timed_out, cancelled, String::new(), err);
            TaskRun { process, placement, ran: false }
        };
        let lost = |why: &str| ended(why, false, false, format!("fleet: {why}; driver stderr: {}", conn.stderr_tail()));
        let reply = match conn.exchange(id, &mut job, &task.files, &[], task.started, give_up, cancel) {
            Exchange::Answer(v) => v,
            Exchange::Lost(why) => return Ok(lost(&why)),
            Exchange::Late => {
                let why = "no answer from the driver: gave up";
                return Ok(ended(why, true, false, format!("fleet: {why}")));
            }
            Exchange::Cancelled => return Ok(ended("cancelled", false, true, "fleet: cancelled".into())),
        };
        let r: Reply = match serde_json::from_value(reply) {
            Ok(r) => r,
            Err(e) => return Ok(lost(&format!("an answer that does not parse: {e}"))),
        };
        let ran = r.status == "ok";
        let code = if r.timed_out || !ran { None } else { r.rc };
        let err = match &r.error {
            Some(e) => format!("fleet: {e}\n{}", r.stderr_tail),
            None => r.stderr_tail.clone(),
        };
        let process = outcome(&task, code, r.timed_out, r.status == "cancelled", r.stdout, err);
        let mut p = placement(&task.command, r.node);
        p.gpu = r.gpu;
        p.attempts = r.attempts;
        p.seconds = r.seconds;
        p.harness = r.harness_version;
        p.failures = r.failures;
        p.error = r.error;
        Ok(TaskRun { process, placement: p, ran })
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
        let files: Files = job.files.into_iter().map(|(rel, data)| (rel, (blob_id(&data), data))).collect();
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
        let id = blob_id(&data);
        ids.insert(path.to_path_buf(), (key.0, key.1, id.clone()));
        Ok(id)
    }
}

/// The process outcome of a harness task, as the local executor reports one.
fn outcome(
    task: &HarnessTask,
    code: Option<i32>,
    timed_out: bool,
    cancelled: bool,
    stdout: String,
    err: String,
) -> ProcessOutcome {
    ProcessOutcome {
        command: task.command.clone(),
        cwd: task.shown_cwd.to_string_lossy().into_owned(),
        code,
        timed_out,
        cancelled,
        seconds: task.started.elapsed().as_secs_f64(),
        stdout,
        stderr_tail: tail(&err, STDERR_TAIL),
        stragglers_killed: Vec::new(),
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

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(c) = lock(&self.conn).take() {
            c.close(Duration::from_secs(60));
        }
    }
}

/// Test support for crates that drive a fleet (exec's tests and the
/// validator's): a stand-in driver, so no test needs Ray.
#[doc(hidden)]
pub mod testing {
    /// A Python script speaking the driver's protocol; a job's first argument
    /// says how it ends (`ok`, `died`, `deadline`, `hang`, `exit`).
    pub const FAKE_DRIVER: &str = include_str!("fake_driver.py");
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// The last line of `stdout` that is a JSON object.
    fn last_object(stdout: &str) -> Value {
        stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok().filter(Value::is_object))
            .unwrap_or(Value::Null)
    }

    use super::testing::FAKE_DRIVER as FAKE;

    /// A directory holding a harness whose `python -m kernels.harness` is `main`.
    fn harness_dir(dir: &Path, main: &str) -> PathBuf {
        std::fs::create_dir_all(dir.join("kernels/harness")).unwrap();
        std::fs::write(dir.join("kernels/__init__.py"), "").unwrap();
        std::fs::write(dir.join("kernels/harness/__init__.py"), "").unwrap();
        std::fs::write(dir.join("kernels/harness/__main__.py"), main).unwrap();
        dir.to_path_buf()
    }

    fn fake_fleet() -> Option<(tempfile::TempDir, Arc<Fleet>)> {
        if Command::new("python3").arg("-c").arg("pass").output().map(|o| !o.status.success()).unwrap_or(true) {
            eprintln!("skipping: no python3");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let driver = harness_dir(&tmp.path().join("driver"), FAKE);
        Some((tmp, Arc::new(Fleet::new("python3", driver, None))))
    }

    #[test]
    fn a_driver_that_cannot_connect_is_an_error() {
        let Some((tmp, _)) = fake_fleet() else { return };
        let bad = harness_dir(
            &tmp.path().join("bad"),
            "import json; print(json.dumps({'fatal': 'cannot start Ray at x: ConnectionError: no'}))",
        );
        let e = Fleet::new("python3", &bad, Some("x".into())).hello().unwrap_err();
        assert!(matches!(&e, Error::Fleet(m) if m.starts_with("cannot start Ray at x")), "{e}");
        // the driver is the harness's `fleet` command, run where the harness is
        let echo = harness_dir(
            &tmp.path().join("echo"),
            "import json, os, sys; print(json.dumps({'fatal': ' '.join(sys.argv[1:]) + ' in ' + os.getcwd()}))",
        );
        let e = Fleet::new("python3", &echo, None).hello().unwrap_err();
        let want = format!("fleet --grace 30 in {}", echo.canonicalize().unwrap().display());
        assert!(matches!(&e, Error::Fleet(m) if m.starts_with(&want)), "{e}");
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
        let Some((tmp, fleet)) = fake_fleet() else { return };
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
        let Some((tmp, fleet)) = fake_fleet() else { return };
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
}
