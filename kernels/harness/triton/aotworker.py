"""Worker of `compile` (aot.py starts it in the sandbox of ../sandbox/): the only process that
imports a candidate's source, calls its launcher and compiles its kernel ahead of time.

    python -I confine.py CONFIG   ->   kidiom_rt.aotworker JOB.json

It runs from a copy in its scratch directory, as the package `kidiom_rt` (aot.py, this file,
arrays.py, ../loader.py, cudatools.py); the source is a copy under `rt/src/`. Whatever the source
runs at import (decorator arguments, parameter defaults, module code) runs here, confined like
the check's workers. Triton: the launcher on shape-only tensors with the kernel swapped for a
recorder, then `triton.compile` for the target (Triton runs its ptxas here too); CUDA C++: NVRTC
to PTX. Everything goes back as files in `out/`: `result.json` ({"info": ...} or {"error",
"traceback"}), `kernel.ptx`, and for Triton `kernel.cubin`. The harness runs ptxas -v and
cuobjdump on those itself.

`spec` (job "mode": "spec", triton/spec.py) does the same per shape of the job's "shapes": Triton
writes `spec<i>.cubin` and the launch facts of shape i (result {"specs": [facts, ...]}); CUDA the
PTX once and the entry's parameter list (result {"info", "params"}), the cubin is ptxas's.
"""
import json
import os
import sys
import traceback
from types import SimpleNamespace


def _write(out_dir, name, data):
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(out_dir, name), mode) as f:
        f.write(data)


def _spec(aot, manifest, job, out_dir):
    if job["language"] == "triton":
        specs = []
        for i, shape in enumerate(job["shapes"]):
            cubin, facts = aot.launch_facts_triton(manifest, job["source"], job["arch"], shape)
            _write(out_dir, f"spec{i}.cubin", bytes(cubin))
            specs.append(facts)
        return {"specs": specs}
    ptx, info = aot.compile_cuda(manifest, job["source"], job["arch"])
    with open(job["source"]) as f:
        params = aot.cuda_params(f.read(), manifest.entry)
    _write(out_dir, "kernel.ptx", ptx)
    return {"info": info, "params": params}


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    out_dir = job["out_dir"]
    try:
        from . import aot
        manifest = SimpleNamespace(name=job["name"], op=job["op"], entry=job["entry"], launcher=job["launcher"],
                                   language=job["language"],
                                   shapes={"bench": job["shape"], "cpu": job.get("cpu_shapes") or [],
                                           "gpu": job.get("gpu_shapes") or []},
                                   calls=job.get("calls") or {}, case_calls=job.get("case_calls") or [],
                                   gpu_calls=job.get("gpu_calls") or [], python_package=job.get("package"))
        if job.get("mode") == "spec":
            result = _spec(aot, manifest, job, out_dir)
        elif job["language"] == "triton":
            ptx, cubin, info = aot.compile_triton(manifest, job["source"], job["arch"])
            _write(out_dir, "kernel.cubin", bytes(cubin))
        else:
            ptx, info = aot.compile_cuda(manifest, job["source"], job["arch"])
        if job.get("mode") != "spec":
            _write(out_dir, "kernel.ptx", ptx)
            result = {"info": info}
    except BaseException as e:  # noqa: BLE001 - the source's failure, reported to the harness
        result = {"error": f"{type(e).__name__}: {e}"[:3000], "traceback": traceback.format_exc()[-3000:]}
    _write(out_dir, "result.json", json.dumps(result, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)   # no atexit hook of the source's runs after the result is written


if __name__ == "__main__":
    main()
