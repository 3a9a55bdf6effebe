"""The sandbox every process that runs candidate code gets (host C++ workers, host/worker_client.py;
Triton and CUDA workers, triton/worker_client.py).

A worker is started as `[unshare ...] python -I -X faulthandler SCRATCH/confine.py CONFIG`:

- its own session and process group (the whole group is killed at the deadline), and where the
  machine allows (`unshare`), an empty network namespace, its own PID namespace (the trampoline
  is its init: when the worker ends, everything it started ends too) and its own mount namespace,
  in which the trampoline pivots into a new root: read-only binds of only what the policy allows,
  private /tmp, /dev/shm and /proc, a minimal /dev (confine.py `enter_root`). Without a PID
  namespace the trampoline and the harness are child subreapers that kill every orphaned
  descendant (`become_subreaper`, `reap_orphans`);
- a scrubbed environment (PATH, LANG, HOME = TMPDIR = scratch/work, one thread per math
  library, plus what the caller adds), cwd in a fresh scratch directory, `python -I` (no user
  site, no PYTHON* variables, neither the harness's nor the script's directory on sys.path);
- rlimits: CORE 0, CPU, FSIZE, AS (when given), NPROC (not for root, which it does not bind);
- inside the process, before any candidate code (confine.py): every capability dropped, and a
  Landlock file-system policy: read/execute only beneath the system directories and the Python
  installation (never the repository, /tmp or home directories), read-only in the scratch
  directory except its `out/` (results) and `work/` (cwd, HOME, TMPDIR) subdirectories; no TCP,
  no signals or ptrace outside the sandbox. Everything the harness itself writes (plans, inputs,
  logs, the trampoline) lies outside `out/` and `work/`, so a candidate cannot plant symbolic
  links that turn the harness's writes elsewhere.

`describe()` and the trampoline's report say what applied on this machine.
Set KIDIOM_SANDBOX_LANDLOCK=0 in the harness's environment to run without the Landlock policy
(for a machine where it breaks a legitimate toolchain; the report then says so), and
KIDIOM_SANDBOX_NAMESPACES to a subset of `net,mount,pid` (empty: none) to use fewer namespaces
(to see a fallback at work; the report says what is missing).

Every process that runs candidate code is started here (`spawn`, `run_job`): the check's workers,
the ahead-of-time compile (triton/aot.py), the host C++ build (host/build.py, with the narrower
`build_policy`), the host workers, the GPU bench's worker. Each has a hard deadline on the
process group and never a pipe the harness reads to its end: results come back through files
in `out/` or a report pipe read with a deadline (triton/worker_client.py).

The package: policy.py (what a worker may reach: namespaces, rlimits, environment, Landlock
policies, the new root, the command line), process.py (starting, waiting for and ending sandboxed
processes) and confine.py (the trampoline, copied into each scratch directory and run there; it
imports nothing of the harness). Callers use the names re-exported here: `from .. import sandbox`.
"""
from .policy import (CONFINE, FSIZE_LIMIT, build_policy, command, describe, fs_policy, gpu_devices, install_runtime,
                     install_trampoline, isolation, landlock_wanted, limits, namespaces, preexec, scrubbed_env,
                     writable_dirs)
from .process import (JobTimeout, become_subreaper, death_text, kill_group, load_result, read_file, reap_orphans,
                      run_job, signal_name, spawn)

__all__ = ["isolation", "namespaces", "limits", "preexec", "scrubbed_env", "writable_dirs", "fs_policy",
           "build_policy", "command", "spawn", "run_job", "kill_group", "become_subreaper", "reap_orphans",
           "install_trampoline", "install_runtime", "signal_name", "death_text", "describe", "read_file", "load_result",
           "gpu_devices", "landlock_wanted", "JobTimeout", "CONFINE", "FSIZE_LIMIT"]
