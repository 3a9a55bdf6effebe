# A stand-in for `python -m kernels.harness fleet` in tests (exec's and the
# validator's): it speaks the JSON-lines protocol; the first argument of a job
# says how the job ends.
import json, sys
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
