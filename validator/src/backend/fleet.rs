//! Harness calls on the Ray executor: what a call ships to its task and
//! how the answer becomes the same [`HarnessRun`] the local executor makes,
//! so the gates judge both alike. The driver itself, its protocol and
//! command jobs are [`kidiom_exec::Fleet`]'s (docs/RAY.md).
//!
//! A call becomes one job: the harness argv, the files it needs (the
//! baseline tree the local executor would run in, and every file an
//! argument names, such as `--source`), the harness's version and a
//! deadline. A task whose worker died twice is a crash, one past its
//! deadline a timeout.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use kidiom_exec::{Files, Fleet, HarnessTask, command_line};

use super::python::{HarnessRun, HarnessStatus, harness_status, last_object};
use crate::error::{Error, Result};

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

/// Runs one harness call (`args` as for [`super::python::Harness::call`],
/// in the tree `root`) as a task on `fleet`, waiting at most about `limit`
/// (and the driver's grace); cancelled when `cancel` is set.
pub(crate) fn call(
    fleet: &Fleet,
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
    let shown: Vec<String> =
        ["-m".to_string(), "kernels.harness".to_string()].into_iter().chain(argv.iter().cloned()).collect();
    let hello = fleet.hello()?;
    let (files, job_argv, cwd) = ship(root, &argv)?;
    let env = [("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONUNBUFFERED", "1"), ("TRITON_DEFAULT_FP_FUSION", "1")];
    let task = HarnessTask {
        command: command_line(python, &shown),
        shown_cwd: root.to_path_buf(),
        argv: job_argv,
        gpu: wants_gpu(args, hello.resources.get("GPU").is_some_and(|g| *g > 0.0)),
        harness_version: harness_version(&files, &cwd),
        cwd,
        files,
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        deadline: limit,
        started,
    };
    let run = fleet.run_task(task, cancel)?;
    let json = last_object(&run.process.stdout);
    let status = if run.process.timed_out {
        HarnessStatus::TimedOut
    } else if !run.ran {
        HarnessStatus::Crashed
    } else {
        harness_status(run.process.code, &json)
    };
    Ok(HarnessRun { status, process: run.process, json, placement: Some(run.placement) })
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use serde_json::json;

    use super::*;
    use crate::backend::python::Harness;

    use kidiom_exec::fleet_testing::FAKE_DRIVER as FAKE;

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
    fn a_manifest_outside_the_harness_tree_ships_with_the_tree() {
        // a user's manifest is copied into the validation's tree beside kernels/ and passed by its
        // path there: the task finds it under {base}, as the local executor does under the tree
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        std::fs::create_dir_all(tree.join("kernels/harness")).unwrap();
        std::fs::write(tree.join("kernels/harness/cli.py"), "x\n").unwrap();
        std::fs::create_dir_all(tree.join("ops")).unwrap();
        std::fs::write(tree.join("ops/rmsnorm.toml"), "format = 2\n").unwrap();
        std::fs::write(tree.join("ops/rmsnorm_contract.py"), "ARGS = []\n").unwrap();
        let manifest = tree.join("ops/rmsnorm.toml").to_string_lossy().into_owned();
        let argv = vec!["check".to_string(), "--manifest".to_string(), manifest];
        let (files, out, cwd) = ship(&tree, &argv).unwrap();
        assert_eq!(out[2], "{base}/tree/ops/rmsnorm.toml");
        assert_eq!(cwd, "tree");
        assert!(files.contains_key("tree/ops/rmsnorm_contract.py"));
        assert!(files.contains_key("tree/kernels/harness/cli.py"));
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
