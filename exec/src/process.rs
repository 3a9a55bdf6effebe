//! A child process with a deadline.
//!
//! Each run spawns the program in its own process group, waits until it
//! exits or the deadline passes, and on timeout kills the whole group (the
//! program and whatever it started: ptxas, cuobjdump). The exit status, its
//! stdout and the tail of its stderr are kept.
//!
//! The pipes have the same deadline as the process: they are polled, never
//! read to end of file, since a process that left the group (`setsid` after
//! a double fork) can hold them open for ever. When the child has ended and
//! its pipes are still open after [`PIPE_GRACE`], every process that holds
//! one of them is killed (found by the pipe's inode in `/proc/*/fd`, see
//! [`crate::pipes`]): it can only have inherited it from the child.
//!
//! Why by hand: `wait-timeout` and `process-wrap` (`command-group`) cover
//! waiting with a timeout and killing a group, but not reading the pipes
//! under the same deadline nor the straggler outside the group, which are
//! the part that keeps a hanging candidate from hanging kidiom; waiting is
//! `try_wait` in the same poll loop, so they would add a dependency and
//! save a few lines.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{CommandError, Error, Result};
use crate::pipes::Pipes;

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
pub(crate) const STDOUT_CAP: usize = 256 << 20;

/// A word of a command line, quoted for a POSIX shell when it needs to be.
pub fn quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `program args`, each word [`quote`]d: the command line a log shows.
pub fn command_line(program: &Path, args: &[String]) -> String {
    std::iter::once(program.to_string_lossy().into_owned())
        .chain(args.iter().cloned())
        .map(|s| quote(&s))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The tail of `s`, at most `n` bytes, cut at a character boundary.
pub fn tail(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

/// SIGKILLs the process group `pid` leads.
fn kill_group(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) with a negative pid signals the process group that
    // `process_group(0)` made for the child; it touches no memory of ours.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// Runs `program args` in `cwd` with `env` added to the environment,
/// killing its process group after `limit`. That it ran is `Ok`, however
/// it ended (see [`ProcessOutcome::code`] and [`ProcessOutcome::timed_out`],
/// or [`run`] for an error when it did not succeed).
pub fn run_with_deadline(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limit: Duration,
) -> Result<ProcessOutcome> {
    run_cancellable(program, args, cwd, env, limit, &AtomicBool::new(false))
}

/// [`run_with_deadline`], where only an exit 0 is a success: any other end
/// is a [`CommandError`] that holds the tail of the child's stderr.
pub fn run(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limit: Duration,
) -> Result<ProcessOutcome> {
    let outcome = run_with_deadline(program, args, cwd, env, limit)?;
    match CommandError::of(&outcome) {
        Some(e) => Err(Error::Command(e)),
        None => Ok(outcome),
    }
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
    let command = command_line(program, args);
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
