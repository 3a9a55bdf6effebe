//! The Python harness (`python -m kernels.harness`) as a subprocess with a
//! time limit.
//!
//! Each call spawns the harness in its own process group, waits until it
//! exits or the deadline passes, and on timeout kills the whole group
//! (the interpreter and whatever it started: ptxas, cuobjdump). The exit
//! status, the one JSON object the harness prints on stdout (wire format v1,
//! kernels/README.md) and the tail of its stderr are kept.
//!
//! The pipes have the same deadline as the process: they are polled, never
//! read to end of file, since a process that left the group (`setsid` after
//! a double fork) can hold them open for ever. When the harness has ended
//! and its pipes are still open after [`PIPE_GRACE`], every process that
//! holds one of them is killed (found by the pipe's inode in `/proc/*/fd`):
//! it can only have inherited it from the harness.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::fleet::{Fleet, Placement};
use crate::error::{Error, Result};

/// How much of stderr is kept (the end of it).
pub const STDERR_TAIL: usize = 4000;

/// The outcome of one subprocess.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessOutcome {
    /// The exact command line (shell-quoted).
    pub command: String,
    /// The working directory.
    pub cwd: String,
    /// The exit code; `None` when killed (timeout) or ended by a signal.
    pub code: Option<i32>,
    /// Whether the deadline passed and the process group was killed.
    pub timed_out: bool,
    /// Whether it was killed because its result was no longer needed.
    #[serde(default)]
    pub cancelled: bool,
    /// Wall time.
    pub seconds: f64,
    /// Standard output.
    pub stdout: String,
    /// The last [`STDERR_TAIL`] bytes of standard error.
    pub stderr_tail: String,
    /// Processes outside the harness's group still holding its pipes after
    /// it ended, killed (pids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stragglers_killed: Vec<u32>,
}

/// How long the pipes may stay open after the harness process has ended.
pub const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Standard output is capped (the harness prints one JSON object).
const STDOUT_CAP: usize = 256 << 20;

pub(crate) fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The tail of `s`, at most `n` bytes, cut at a character boundary.
pub(crate) fn tail(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

fn kill_group(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) with a negative pid signals the process group that
    // `process_group(0)` made for the child; it touches no memory of ours.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// Runs `program args` in `cwd` with `env`, killing its process group after `limit`.
pub fn run_with_deadline(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limit: Duration,
) -> Result<ProcessOutcome> {
    run_cancellable(program, args, cwd, env, limit, &AtomicBool::new(false))
}

/// [`run_with_deadline`], also killing the group as soon as `cancel` is set
/// (the outcome then has `cancelled` set and no exit code).
pub fn run_cancellable(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limit: Duration,
    cancel: &AtomicBool,
) -> Result<ProcessOutcome> {
    use std::os::unix::process::CommandExt;
    let command = std::iter::once(program.to_string_lossy().to_string())
        .chain(args.iter().cloned())
        .map(|s| quote(&s))
        .collect::<Vec<_>>()
        .join(" ");
    let started = Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(cwd).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|cause| Error::Spawn { command: command.clone(), cause })?;
    let pid = child.id();
    let mut pipes = Pipes::new(child.stdout.take(), child.stderr.take());
    let deadline = started + limit;
    let mut timed_out = false;
    let mut cancelled = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(_) => break None,
        }
        if Instant::now() >= deadline {
            timed_out = true;
            kill_group(pid);
            break child.wait().ok();
        }
        if cancel.load(Ordering::Relaxed) {
            cancelled = true;
            kill_group(pid);
            break child.wait().ok();
        }
        pipes.poll(Duration::from_millis(20));
    };
    // The child is gone; kill any leftovers of its group so the pipes close.
    kill_group(pid);
    let grace = Instant::now() + PIPE_GRACE;
    while pipes.open() && Instant::now() < grace {
        pipes.poll(Duration::from_millis(20));
    }
    let mut stragglers_killed = Vec::new();
    if pipes.open() {
        // someone outside the group holds them: it came from the harness
        stragglers_killed = pipes.kill_holders();
        let drain = Instant::now() + Duration::from_millis(500);
        while pipes.open() && Instant::now() < drain {
            pipes.poll(Duration::from_millis(20));
        }
    }
    let (stdout, stderr) = pipes.finish();
    Ok(ProcessOutcome {
        command,
        cwd: cwd.to_string_lossy().into_owned(),
        code: if timed_out || cancelled { None } else { status.and_then(|s| s.code()) },
        timed_out,
        cancelled,
        seconds: started.elapsed().as_secs_f64(),
        stdout,
        stderr_tail: tail(&stderr, STDERR_TAIL),
        stragglers_killed,
    })
}

/// A child's stdout and stderr, read without blocking as they fill.
struct Pipes {
    ends: Vec<PipeEnd>,
}

/// One pipe (closed: `None`), what it gave, and how much of it is kept.
type PipeEnd = (Option<Box<dyn ReadFd>>, Vec<u8>, usize);

trait ReadFd: Read + AsRawFd + Send {}
impl<T: Read + AsRawFd + Send> ReadFd for T {}

impl Pipes {
    fn new(out: Option<std::process::ChildStdout>, err: Option<std::process::ChildStderr>) -> Pipes {
        let end = |p: Option<Box<dyn ReadFd>>, cap: usize| {
            if let Some(p) = &p {
                // SAFETY: fcntl on a descriptor we own; it changes only its flags.
                unsafe {
                    let fd = p.as_raw_fd();
                    let flags = libc::fcntl(fd, libc::F_GETFL);
                    libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
                }
            }
            (p, Vec::new(), cap)
        };
        Pipes {
            ends: vec![
                end(out.map(|p| Box::new(p) as Box<dyn ReadFd>), STDOUT_CAP),
                // stderr: only its tail is kept, so keep a bounded window
                end(err.map(|p| Box::new(p) as Box<dyn ReadFd>), 4 * STDERR_TAIL),
            ],
        }
    }

    fn open(&self) -> bool {
        self.ends.iter().any(|(p, _, _)| p.is_some())
    }

    /// Waits up to `wait` for data and reads what there is.
    fn poll(&mut self, wait: Duration) {
        let mut fds: Vec<libc::pollfd> = self
            .ends
            .iter()
            .filter_map(|(p, _, _)| p.as_ref())
            .map(|p| libc::pollfd { fd: p.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        if fds.is_empty() {
            std::thread::sleep(wait);
            return;
        }
        let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
        }
        let mut chunk = [0u8; 65536];
        for (pipe, buf, cap) in &mut self.ends {
            let Some(p) = pipe else { continue };
            loop {
                match p.read(&mut chunk) {
                    Ok(0) => {
                        *pipe = None;
                        break;
                    }
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        if buf.len() > *cap {
                            // keep the end (stderr's tail; stdout past its cap is not a reply)
                            let cut = buf.len() - *cap;
                            buf.drain(..cut);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        *pipe = None;
                        break;
                    }
                }
            }
        }
    }

    /// SIGKILLs every other process that holds one of the still-open pipes;
    /// returns their pids.
    fn kill_holders(&self) -> Vec<u32> {
        let mut inodes = Vec::new();
        for (p, _, _) in &self.ends {
            let Some(p) = p else { continue };
            // SAFETY: fstat on a descriptor we own, into a zeroed stat buffer.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if unsafe { libc::fstat(p.as_raw_fd(), &mut st) } == 0 {
                inodes.push(format!("pipe:[{}]", st.st_ino));
            }
        }
        let me = std::process::id();
        let mut killed = Vec::new();
        let Ok(procs) = std::fs::read_dir("/proc") else { return killed };
        for entry in procs.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            if pid == me {
                continue;
            }
            let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
            let holds = fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
            });
            if holds && let Ok(p) = libc::pid_t::try_from(pid) {
                // SAFETY: kill(2) of a process that holds our pipe; no memory is touched.
                unsafe {
                    libc::kill(p, libc::SIGKILL);
                }
                killed.push(pid);
            }
        }
        killed
    }

    fn finish(self) -> (String, String) {
        let mut it = self.ends.into_iter().map(|(_, buf, _)| String::from_utf8_lossy(&buf).into_owned());
        (it.next().unwrap_or_default(), it.next().unwrap_or_default())
    }
}

/// The harness's exit codes (kernels/README.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HarnessStatus {
    /// 0: ok, or the check passed.
    Ok,
    /// 1: the kernel failed (check failed, or bench's correctness gate).
    Failed,
    /// 2: harness error (bad arguments, crash, its own timeout).
    Error,
    /// 3: skipped, needs a GPU.
    Skipped,
    /// Killed by the validator's deadline.
    TimedOut,
    /// Any other ending (a signal, an unknown code, no JSON).
    Crashed,
}

/// One harness call: the process outcome and the JSON it printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessRun {
    /// How it ended.
    pub status: HarnessStatus,
    /// The process.
    pub process: ProcessOutcome,
    /// The harness's JSON object (`Null` when it printed none).
    pub json: serde_json::Value,
    /// Where it ran, when not on this machine (the Ray executor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

impl HarnessRun {
    /// A one-paragraph log of a failed call: its error, traceback tail, stderr tail.
    pub fn log(&self) -> String {
        let mut parts = Vec::new();
        if self.process.timed_out {
            parts.push(format!("killed after {:.1} s (time limit)", self.process.seconds));
        } else if self.status == HarnessStatus::Crashed {
            parts.push(format!("exit {:?}", self.process.code));
        }
        if let Some(e) = self.json.get("error").and_then(|v| v.as_str()) {
            parts.push(e.to_string());
        }
        if let Some(t) = self.json.get("traceback").and_then(|v| v.as_str()) {
            parts.push(tail(t, 1500));
        }
        if !self.process.stderr_tail.trim().is_empty() {
            parts.push(format!("stderr: {}", tail(self.process.stderr_tail.trim(), 1500)));
        }
        parts.join("\n")
    }
}

/// Where and how to run the harness.
#[derive(Debug, Clone)]
pub struct Harness {
    /// The Python interpreter.
    pub python: PathBuf,
    /// The directory holding the `kernels` package (the baseline tree).
    pub root: PathBuf,
    /// `None`: subprocesses here; `Some`: tasks on a Ray cluster through this driver.
    pub(crate) fleet: Option<Arc<Fleet>>,
}

/// The last line of `stdout` that is a JSON object (`Null` when none is).
pub(crate) fn last_object(stdout: &str) -> serde_json::Value {
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok().filter(|v| v.is_object()))
        .unwrap_or(serde_json::Value::Null)
}

/// How a harness that exited with `code` and printed `json` ended.
pub(crate) fn harness_status(code: Option<i32>, json: &serde_json::Value) -> HarnessStatus {
    if json.is_null() {
        return HarnessStatus::Crashed;
    }
    match code {
        Some(0) => HarnessStatus::Ok,
        Some(1) => HarnessStatus::Failed,
        Some(2) => HarnessStatus::Error,
        Some(3) => HarnessStatus::Skipped,
        _ => HarnessStatus::Crashed,
    }
}

impl Harness {
    /// The harness under `python` in the tree `root`, run here.
    pub fn new(python: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Harness {
        Harness { python: python.into(), root: root.into(), fleet: None }
    }

    /// Where calls run: `ray` when they go to a fleet, else `local`.
    pub fn executor_name(&self) -> &'static str {
        if self.fleet.is_some() { "ray" } else { "local" }
    }

    /// Runs `python -m kernels.harness <args> --json --timeout <limit>` with a deadline
    /// slightly after the harness's own, so that the harness normally reports its own
    /// timeout as JSON and the kill is the backstop.
    pub fn call(&self, args: &[String], limit: Duration) -> Result<HarnessRun> {
        self.call_cancellable(args, limit, &AtomicBool::new(false))
    }

    /// [`Harness::call`], killed early when `cancel` is set.
    pub fn call_cancellable(&self, args: &[String], limit: Duration, cancel: &AtomicBool) -> Result<HarnessRun> {
        let secs = limit.as_secs_f64().max(1.0);
        let inner = (secs - 3.0).max(1.0).floor();
        if let Some(fleet) = &self.fleet {
            return fleet.call(
                &self.python,
                &self.root,
                args,
                format!("{inner}"),
                Duration::from_secs_f64(secs),
                cancel,
            );
        }
        let mut full: Vec<String> = vec!["-m".into(), "kernels.harness".into()];
        full.extend(args.iter().cloned());
        full.extend(["--json".into(), "--timeout".into(), format!("{inner}")]);
        let env = vec![
            ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
            ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
            ("TRITON_DEFAULT_FP_FUSION".to_string(), "1".to_string()),
        ];
        let process = run_cancellable(&self.python, &full, &self.root, &env, Duration::from_secs_f64(secs), cancel)?;
        let json = last_object(&process.stdout);
        let status = if process.timed_out { HarnessStatus::TimedOut } else { harness_status(process.code, &json) };
        Ok(HarnessRun { status, process, json, placement: None })
    }
}

/// The first usable Python: `$KIDIOM_PYTHON`, `<root>/.venv/bin/python`, `python3`.
pub fn find_python(root: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("KIDIOM_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let venv = root.join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, limit: f64) -> ProcessOutcome {
        run_with_deadline(
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            Path::new("/"),
            &[],
            Duration::from_secs_f64(limit),
        )
        .unwrap()
    }

    #[test]
    fn keeps_exit_status_stdout_and_stderr_tail() {
        let o = sh("echo out; echo err >&2; exit 3", 10.0);
        assert_eq!((o.code, o.timed_out), (Some(3), false));
        assert_eq!(o.stdout, "out\n");
        assert_eq!(o.stderr_tail, "err\n");
        assert!(o.command.starts_with("/bin/sh -c 'echo out;"), "{}", o.command);
        let long = sh("i=0; while [ $i -lt 3000 ]; do echo line$i >&2; i=$((i+1)); done", 20.0);
        assert!(long.stderr_tail.len() <= STDERR_TAIL + 3);
        assert!(long.stderr_tail.ends_with("line2999\n"));
    }

    #[test]
    fn kills_the_whole_group_on_timeout() {
        let started = Instant::now();
        // the grandchild holds the pipes open; it must die with the group
        let o = sh("sleep 30 & trap '' TERM; echo started; while true; do :; done", 1.0);
        assert!(o.timed_out);
        assert_eq!(o.code, None);
        assert_eq!(o.stdout, "started\n");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }

    /// Whether a process with this pid is alive (not a zombie).
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    }

    #[test]
    fn a_detached_grandchild_holding_the_pipes_neither_hangs_the_call_nor_survives_it() {
        let started = Instant::now();
        let marker = format!("kidiom-detached-{}", std::process::id());
        // a double fork into a new session: out of the process group, holding stdout and stderr
        let script =
            format!("setsid bash -c 'exec -a {marker} sleep 60' & echo $! > /dev/null; sleep 0.2; echo reply; exit 0");
        let o = sh(&script, 30.0);
        assert_eq!((o.code, o.timed_out), (Some(0), false), "{o:?}");
        assert_eq!(o.stdout, "reply\n");
        assert!(started.elapsed() < PIPE_GRACE + Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!(o.stragglers_killed.len(), 1, "{o:?}");
        std::thread::sleep(Duration::from_millis(200));
        assert!(o.stragglers_killed.iter().all(|p| !alive(*p)), "the straggler survived: {o:?}");
        // the census: nothing with the marker is left
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).into_owned())
            .filter(|c| c.contains(&marker))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // a grandchild that closes the pipes and detaches is not ours to find here (the
        // harness's sandbox ends those); one that keeps them and the deadline passes is killed too
        let o = sh(&format!("setsid bash -c 'exec -a {marker} sleep 60' & sleep 30"), 1.0);
        assert!(o.timed_out && o.stragglers_killed.len() == 1, "{o:?}");
    }

    #[test]
    fn cancelling_kills_the_group_early() {
        let cancel = AtomicBool::new(false);
        let started = Instant::now();
        let o = std::thread::scope(|s| {
            let h = s.spawn(|| {
                run_cancellable(
                    Path::new("/bin/sh"),
                    &["-c".into(), "sleep 30".into()],
                    Path::new("/"),
                    &[],
                    Duration::from_secs(60),
                    &cancel,
                )
            });
            std::thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Relaxed);
            h.join().unwrap().unwrap()
        });
        assert!(o.cancelled && !o.timed_out);
        assert_eq!(o.code, None);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let e = run_with_deadline(Path::new("/nonexistent/python"), &[], Path::new("/"), &[], Duration::from_secs(1));
        assert!(matches!(e, Err(Error::Spawn { .. })));
    }

    #[test]
    fn tails_cut_at_char_boundaries() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("ééé", 3), "...é");
    }
}
