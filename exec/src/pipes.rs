//! A child's stdout and stderr, read without blocking as they fill, and
//! the processes outside its group that still hold them.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::process::{STDERR_TAIL, STDOUT_CAP};

/// A child's stdout and stderr, read without blocking as they fill.
pub(crate) struct Pipes {
    ends: Vec<PipeEnd>,
}

/// One pipe (closed: `None`), what it gave, and how much of it is kept.
type PipeEnd = (Option<Box<dyn ReadFd>>, Vec<u8>, usize);

trait ReadFd: Read + AsRawFd + Send {}
impl<T: Read + AsRawFd + Send> ReadFd for T {}

impl Pipes {
    pub(crate) fn new(out: Option<std::process::ChildStdout>, err: Option<std::process::ChildStderr>) -> Pipes {
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

    pub(crate) fn open(&self) -> bool {
        self.ends.iter().any(|(p, _, _)| p.is_some())
    }

    /// Waits up to `wait` for data and reads what there is.
    pub(crate) fn poll(&mut self, wait: Duration) {
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
    pub(crate) fn kill_holders(&self) -> Vec<u32> {
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

    pub(crate) fn finish(self) -> (String, String) {
        let mut it = self.ends.into_iter().map(|(_, buf, _)| String::from_utf8_lossy(&buf).into_owned());
        (it.next().unwrap_or_default(), it.next().unwrap_or_default())
    }
}
