//! One running `python -m kernels.harness fleet` driver: starting it and
//! waiting for its hello, the thread that hands each answer to its caller,
//! and the exchange of one job.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::wire::{Exchange, Files, base64};
use super::{GRACE, Hello};
use crate::error::{Error, Result};
use crate::process::{STDERR_TAIL, command_line, tail};

/// How long the driver may take to connect (starting a local Ray on a busy
/// two-core machine takes tens of seconds).
const HELLO_LIMIT: Duration = Duration::from_secs(240);

/// The callers waiting for an answer, by job id.
type Pending = Arc<Mutex<HashMap<u64, Sender<Value>>>>;

/// A running driver.
pub(crate) struct Conn {
    /// Held while a job line is built and written, so blobs are sent before their first use.
    pub(crate) stdin: Mutex<Option<ChildStdin>>,
    pub(crate) sent: Mutex<HashSet<String>>,
    pub(crate) child: Mutex<Child>,
    pub(crate) pending: Pending,
    pub(crate) alive: Arc<AtomicBool>,
    pub(crate) stderr: Arc<Mutex<String>>,
    pub(crate) hello: Hello,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps the end of the driver's stderr (Ray logs there) as it comes.
fn keep_stderr(pipe: Option<ChildStderr>) -> Arc<Mutex<String>> {
    let stderr = Arc::new(Mutex::new(String::new()));
    if let Some(mut pipe) = pipe {
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
    stderr
}

/// Reads the driver's answers: the hello (or its fatal error) goes to
/// `hello_tx`, each answer to the caller waiting for its id.
fn read_answers(stdout: ChildStdout, pending: Pending, alive: Arc<AtomicBool>, hello_tx: Sender<Value>) {
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

impl Conn {
    /// Starts `python -m kernels.harness fleet` (the harness's own command
    /// for it) in `root`, the directory holding the harness, connecting to
    /// `address`, and waits for its hello.
    pub(crate) fn start(python: &Path, root: &Path, address: Option<&str>) -> Result<Conn> {
        let mut args: Vec<String> = vec!["-m".into(), "kernels.harness".into(), "fleet".into()];
        args.extend(["--grace".into(), GRACE.as_secs().to_string()]);
        if let Some(a) = address {
            args.extend(["--address".into(), a.to_string()]);
        }
        let command = command_line(python, &args);
        let mut child = Command::new(python)
            .args(&args)
            .current_dir(root)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|cause| Error::Spawn { command: command.clone(), cause })?;
        let stderr = keep_stderr(child.stderr.take());
        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (hello_tx, hello_rx) = mpsc::channel::<Value>();
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err(Error::Fleet(format!("{command}: no stdout")));
        };
        read_answers(stdout, pending.clone(), alive.clone(), hello_tx);
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

    /// The end of the driver's stderr, for a message.
    pub(crate) fn stderr_tail(&self) -> String {
        tail(lock(&self.stderr).trim(), 1500)
    }

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
    pub(crate) fn exchange(
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
    pub(crate) fn close(&self, wait: Duration) {
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
