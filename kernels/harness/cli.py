"""Command line of the harness: the one process boundary the validator calls.

    python -m kernels.harness compile|check|bench --kernel NAME [--source FILE] [--json]
    python -m kernels.harness spec --kernel NAME [--source FILE] --out DIR [--sets R] [--shapes L,..] [--seed S]
    python -m kernels.harness sweep --kernel NAME --variants FILE [--jobs N] [--seed S]
    python -m kernels.harness list [--json]
    python -m kernels.harness profile --kernel NAME [--source FILE] [--json] [--timeout S]   # work per line (profile.py)
    python -m kernels.harness fleet [--address ADDR]    # jobs on a Ray cluster (fleet.py, docs/RAY.md)
    python -m kernels.harness device                    # {"cuda": BOOL}: what --device auto picks here
    python -m kernels.harness precision --kernel VARIANT [--source FILE] [--seed S] [--steps N]   # precision.py

Prints one JSON object on stdout (wire format in docs/HARNESS.md, "Wire format, version 1";
`--json` is accepted for symmetry with the Rust CLI: output is always JSON). Exit codes:
0 ok, 1 the kernel failed the check, 2 harness error (bad arguments, crash, timeout),
3 skipped (the command needs a GPU and there is none).
"""
import argparse
import json
import os
import signal
import sys
import time
import traceback

from .wire import EXIT_ERROR, EXIT_FAILED, EXIT_OK, EXIT_SKIPPED, VERSION, WIRE, git_commit, versions


class Timeout(Exception):
    pass


def _libcuda():
    """Whether the CUDA driver library loads here."""
    import ctypes
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def _has_cuda():
    """torch and a CUDA device. The driver library is asked first: without it there is no GPU,
    and torch (2 s to import) is not loaded by every harness process of a CPU machine."""
    import importlib.util
    if importlib.util.find_spec("torch") is None or not _libcuda():
        return False
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _cuda_missing():
    """Why `--device cuda` cannot run on this machine (the CUDA driver library, torch, a device), or
    None. Asked before any candidate code runs: a check that cannot run here is never the
    candidate's failure."""
    import importlib.util
    missing = []
    if not _libcuda():
        missing.append("no CUDA driver library (libcuda.so) on this machine")
    if importlib.util.find_spec("torch") is None:
        missing.append("torch is not importable (the CUDA check and bench run through it)")
    elif not missing:
        try:
            import torch
            if not torch.cuda.is_available():
                missing.append("torch sees no CUDA device (torch.cuda.is_available() is false)")
        except Exception as e:  # a broken install is as missing as an absent one
            missing.append(f"torch does not import: {type(e).__name__}: {e}")
    return "; ".join(missing) or None


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m kernels.harness", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kernel", help="kernel name from its manifest under kernels/, e.g. kda.decode")
    common.add_argument("--manifest", help="a manifest anywhere on disk (absolute, or relative to the working "
                                           "directory) instead of --kernel")
    common.add_argument("--source", help="alternative source file (a rewritten variant, same entry points)")
    common.add_argument("--json", action="store_true", help="JSON output (always on)")
    common.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    common.add_argument("--timeout", type=float, default=1800, help="seconds before the harness gives up")
    sub.add_parser("list", help="list the kernels").add_argument("--json", action="store_true")
    c = sub.add_parser("check", parents=[common], help="correctness against the float64 reference")
    c.add_argument("--seeds", type=int, default=3, help="number of fresh seeds")
    c.add_argument("--seed", type=int, help="base seed (default: fresh from the OS)")
    c.add_argument("--no-tf32", action="store_true", help="interpreter: do not round tl.dot operands like TF32")
    c.add_argument("--no-curve", action="store_true")
    c.add_argument("--no-consistency", action="store_true")
    c.add_argument("--no-baseline", action="store_true",
                   help="do not judge the candidate against the baseline kernel's own error (never done without --source)")
    c.add_argument("--quick", action="store_true", help="one seed, no curve, no consistency")
    c.add_argument("--baseline-cache", help="directory keeping the baseline's errors per case for the other "
                                             "checks of a run with the same seed (triton/basecache.py)")
    c.add_argument("--no-tsan", action="store_true", help="host (cpp) kernels: skip the ThreadSanitizer run")
    c.add_argument("--odd-sizes", action="store_true",
                   help="the manifest's own kernel only: also at odd sizes derived from each CPU shape (a guess of "
                        "`kidiom init` that holds only at multiples of the block sizes fails there)")
    k = sub.add_parser("compile", parents=[common], help="ahead-of-time compile for sm_90; instruction mix")
    k.add_argument("--arch", type=int, default=90)
    k.add_argument("--keep", help="directory to keep the PTX/cubin/SASS in")
    k.add_argument("--shape", help="JSON object: a shape in place of the manifest's bench shape (its variables)")
    s = sub.add_parser("spec", parents=[common], help="launch specs for the Rust GPU gate, per gpu and bench shape "
                                                      "(triton/spec.py; no GPU needed)")
    s.add_argument("--out", required=True, help="directory to write one spec directory per shape in")
    s.add_argument("--sets", type=int, default=8, help="input sets (and expected outputs) per shape")
    s.add_argument("--shapes", help="comma-separated labels to emit (gpu0, gpu1, ..., bench; default all)")
    s.add_argument("--seed", type=int, help="seed of the input sets (default: fresh from the OS)")
    s.add_argument("--arch", type=int, default=90)
    w = sub.add_parser("sweep", parents=[common], help="error curve and static figures of many variants (search)")
    w.add_argument("--variants", required=True, help="JSON file: {variants: [{id, source}], compile, curve}")
    w.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="variants measured at a time")
    w.add_argument("--seed", type=int, default=0, help="seed of the curve's inputs (fixed: variants compare)")
    sub.add_parser("profile", parents=[common],
                   help="work per source line, counted on the CPU and scaled to the bench shape (profile.py)") \
        .add_argument("--shape", help="JSON object: a shape in place of the manifest's bench shape (its variables)")
    r = sub.add_parser("precision", parents=[common], help="a storage variant (bf16 / fp8 / int8 state) against "
                       "float64 and its simulated reference, with its drift and budget (triton/precision.py)")
    r.add_argument("--seed", type=int, default=0, help="seed of the inputs")
    r.add_argument("--steps", type=int, default=None, help="drift steps (default: the manifest's budget.steps)")
    b = sub.add_parser("bench", parents=[common], help="GPU only: interleaved A/B against the baseline")
    b.add_argument("--baseline", help="baseline source (default: the manifest's source)")
    b.add_argument("--iters", type=int, default=None, help="timed iterations (default 50); cpp: alias of --rounds")
    b.add_argument("--warmup", type=int, default=None, help="warm-up iterations (default 10); cpp: warm-up rounds")
    b.add_argument("--rounds", type=int, help="cpp: measured rounds (default: the manifest's [service])")
    b.add_argument("--window", type=float, help="cpp: seconds of each timed window (default: [service])")
    b.add_argument("--threads", type=int, help="cpp: transfer threads (default: [service])")
    b.add_argument("--history-dir", help="cpp: where the baseline's history is read and written (kidiom validate "
                   "passes its catalog's; default: $KIDIOM_HOST_HISTORY, else kidiom's cache)")
    b.add_argument("--rotate", type=int, default=4, help="input sets rotated between timed calls")
    b.add_argument("--peak-gbps", type=float, default=4300.0, help="measured copy bandwidth of the device")
    b.add_argument("--against", help="dotted path of a third-party function to time as well (module:function)")
    return p.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["fleet"]:
        # a long-lived driver speaking JSON lines, not one wire object: its own parser
        from .fleet import main as fleet_main
        return fleet_main(argv[1:])
    if argv[:1] == ["device"]:
        # kidiom's own `auto` asks this (kidiom_exec::gpu_present), so the two cannot disagree
        print(json.dumps({"wire": WIRE, "version": VERSION, "command": "device", "status": "ok",
                          "cuda": _has_cuda()}))
        return EXIT_OK
    t0 = time.time()
    # Triton 3.9 warns unless this is set; "1" is its (and the GPU's) current default.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    out = {"wire": WIRE, "version": VERSION}
    try:
        args = parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            return 0
        out.update(status="error", error=f"bad arguments: {' '.join(argv)}")
        print(json.dumps(out))
        return EXIT_ERROR
    out["command"] = args.command
    if args.command != "list":
        if bool(args.kernel) == bool(args.manifest):
            out.update(status="error", error="give exactly one of --kernel NAME and --manifest PATH")
            print(json.dumps(out))
            return EXIT_ERROR
        out["kernel"] = args.kernel
        out["source"] = args.source

    def on_alarm(signum, frame):
        raise Timeout(f"harness timed out after {args.timeout} s")

    # A candidate's process that detaches (double fork, setsid) where its worker has no PID
    # namespace is adopted by this process, not by init, and killed at the latest on exit below:
    # nothing it starts can hold the pipe our caller reads to its end.
    from . import sandbox
    sandbox.become_subreaper()

    code = EXIT_ERROR
    try:
        if getattr(args, "timeout", None):
            signal.signal(signal.SIGALRM, on_alarm)
            signal.alarm(max(1, int(args.timeout)))
        code = dispatch(args, out)
    except Timeout as e:
        out.update(status="error", error=str(e))
        code = EXIT_ERROR
    except Exception as e:  # every failure becomes JSON
        if type(e).__name__ == "ContractError":
            # the user's contract, not the kernel: one line naming the file and the function
            out.update(status="error", error=str(e), error_kind="contract")
            code = EXIT_ERROR
        elif type(e).__name__ == "NeedsGpu":
            out.update(status="skipped", reason=str(e))
            code = EXIT_SKIPPED
        else:
            out.update(status="error", error=f"{type(e).__name__}: {e}",
                       traceback=traceback.format_exc(limit=8)[-4000:])
            code = EXIT_ERROR
    except BaseException as e:  # KeyboardInterrupt and the like: still JSON
        out.update(status="error", error=f"{type(e).__name__}: {e}",
                   traceback=traceback.format_exc(limit=8)[-4000:])
        code = EXIT_ERROR
    finally:
        signal.alarm(0)
        sandbox.reap_orphans(everything=True)   # every descendant still here: the work is done
    out["seconds"] = round(time.time() - t0, 3)
    print(json.dumps(out, default=_default))
    sys.stdout.flush()
    return code


def _default(x):
    import numpy as np
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def _select_device(args):
    if args.device == "cpu":
        cuda = False
    elif args.device == "cuda":
        cuda = True
    else:
        cuda = _has_cuda()
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    return "cuda" if cuda else "cpu"


def dispatch(args, out):
    from .manifest import all_manifests, bench_shape_override, manifest_from_args
    if args.command == "list":
        out["status"] = "ok"
        out["kernels"] = [{"name": m.name, "op": m.op, "language": m.language, "format": m.format,
                           "contract": str(m.contract_path) if m.contract_path else None,
                           "manifest": str(m.path), "source": str(m.source_path)}
                          for m in all_manifests().values()]
        return EXIT_OK
    manifest = manifest_from_args(args)
    if getattr(args, "shape", None) is not None:
        # `kidiom predict --check`: a published measurement's shape (the caches key on the bench shape)
        manifest.shapes["bench"] = bench_shape_override(manifest, args.shape)
    out["kernel"] = manifest.name
    out["manifest"] = str(manifest.path)
    if manifest.raw.get("variant_of") and args.command not in ("precision", "compile", "profile"):
        # a storage variant is another contract: its own gate judges it (triton/precision.py); its
        # contract's stored tensors are not float32 (STORED, contract.py), which the generic checks need;
        # its work profile (its own bytes: the narrower state) and its compile are its own
        raise ValueError(f"{manifest.name} is a precision variant of {manifest.raw['variant_of']}: "
                         f"judge it with `precision --kernel {manifest.name}`")
    if not manifest.is_host:
        # a contract that cannot be used is an error before any worker starts
        from .contract import load_contract
        load_contract(manifest)
    if args.command == "profile":
        # always on the CPU (the interpreter), in the check's sandboxed worker
        from .triton.profile import run_profile
        args.deadline = time.monotonic() + args.timeout - min(3.0, 0.2 * args.timeout)
        return run_profile(args, out, manifest)
    if manifest.is_host:
        # host C++ (pybind11) kernels: built with the system compiler, run in sandboxed workers
        from .host.commands import run_host_command
        margin = min(3.0, 0.2 * args.timeout)
        return run_host_command(args, out, manifest, deadline=time.monotonic() + args.timeout - margin)
    if args.command == "bench":
        args.iters = 50 if args.iters is None else args.iters
        args.warmup = 10 if args.warmup is None else args.warmup
    if args.command == "compile":
        # ahead-of-time: real compilation even where the interpreter is the default
        os.environ.pop("TRITON_INTERPRET", None)
        from .triton import aot
        out["status"] = "ok"
        out["device"] = "none (ahead-of-time)"
        margin = min(3.0, 0.2 * args.timeout)
        # the source is imported and compiled in a sandboxed worker (triton/aot.py), never in this process
        out.update(aot.compile_kernel(manifest, args.source, arch=args.arch, keep=args.keep,
                                      deadline=time.monotonic() + args.timeout - margin))
        out["versions"] = versions()
        return EXIT_OK

    if args.command == "spec":
        os.environ.pop("TRITON_INTERPRET", None)
        from .triton.spec import emit_specs
        margin = min(3.0, 0.2 * args.timeout)
        select = [x.strip() for x in args.shapes.split(",") if x.strip()] if args.shapes else None
        # the source is imported and compiled in the sandboxed worker (triton/aot.py); the roles,
        # inputs and expected values are made here, by the op's own functions
        out.update(emit_specs(manifest, args.source, args.out, sets=args.sets, select=select, seed=args.seed,
                              arch=args.arch, deadline=time.monotonic() + args.timeout - margin))
        out.update(status="ok", device="none (ahead-of-time)", versions=versions(), commit=git_commit())
        return EXIT_OK

    if args.command == "sweep":
        from .triton.sweep import run_sweep
        try:
            with open(args.variants) as f:
                spec = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"--variants {args.variants}: {e}") from None
        os.environ["TRITON_INTERPRET"] = "1"   # the curves run in the interpreter; compiles are AOT
        margin = min(3.0, 0.2 * args.timeout)
        out.update(run_sweep(manifest, spec, args.jobs, time.monotonic() + args.timeout - margin, args.seed))
        out.update(status="ok", device="cpu (triton interpreter, TF32-faithful) and none (ahead-of-time)",
                   versions=versions())
        return EXIT_OK

    if args.device == "cuda":
        missing = _cuda_missing()
        if missing is not None:
            # before any worker or candidate code: what is missing here, never the candidate's failure
            out.update(status="skipped", reason=f"--device cuda on a machine without CUDA: {missing}",
                       device="none", mode="none", versions=versions())
            return EXIT_SKIPPED
    device = _select_device(args)
    margin = min(3.0, 0.2 * args.timeout)
    args.deadline = time.monotonic() + args.timeout - margin
    if args.command == "check":
        return _check(args, out, manifest, device)
    if args.command == "precision":
        from .triton.precision import run_precision
        out.update(run_precision(manifest, args.source, seed=args.seed, steps=args.steps, device=device,
                                 deadline=args.deadline))
        out.update(versions=versions(), commit=git_commit())
        return {"ok": EXIT_OK, "rejected": EXIT_FAILED, "skipped": EXIT_SKIPPED}.get(out["status"], EXIT_ERROR)
    if args.command == "bench" and device != "cuda":
        out.update(status="skipped", reason="bench needs a CUDA GPU with torch; none found", device="cpu")
        out["versions"] = versions()
        return EXIT_SKIPPED

    # bench (GPU): timing needs the kernels in this process; its correctness gate runs in workers
    from .triton.backend import TorchBackend
    backend = TorchBackend()
    out["device"] = backend.describe()
    out["mode"] = "native"
    out["versions"] = versions()
    out["commit"] = git_commit()
    from .triton.bench import run_bench
    res = run_bench(manifest, args, backend)
    out.update(res)
    return EXIT_OK if res.get("status") == "ok" else EXIT_FAILED


def _check(args, out, manifest, device):
    """check: the candidate runs only in sandboxed workers (triton/check.py, triton/worker_client.py)."""
    from .triton.check import run_check
    from .triton.worker_client import WorkerTimeout
    base = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    nseeds = 1 if args.quick else max(1, args.seeds)
    seeds = [base + i for i in range(nseeds)]
    out["seeds"] = seeds
    out["commit"] = git_commit()
    contract = args.odd_sizes and args.source is None and args.seed is not None
    if contract:
        # the contract check's answer depends only on bytes and settings: kept once per version of
        # them (the cache key: basecache's, which covers source, manifest, contract, harness, project
        # and versions, with this check's settings)
        from .cachedir import read_entry
        key = _contract_key(args, manifest, device, seeds)
        hit = read_entry("contract", key)
        if hit is not None and hit.get("status") in ("passed", "failed"):
            out.update(hit, cached=True, versions=versions())
            return EXIT_OK if hit["status"] == "passed" else EXIT_FAILED
    try:
        res = run_check(manifest, args.source, seeds, device, tf32=not args.no_tf32,
                        with_curve=not (args.no_curve or args.quick),
                        with_consistency=not (args.no_consistency or args.quick),
                        with_baseline=not args.no_baseline, deadline=args.deadline,
                        baseline_cache=args.baseline_cache)
    except WorkerTimeout as e:
        out.update(status="error", error=f"timed out: {e}", versions=versions())
        return EXIT_ERROR
    out["versions"] = versions()
    out["tolerance"] = manifest.tolerance
    if "skipped" in res:
        out.update(status="skipped", reason=res["skipped"], device=res["device"], mode=res["mode"],
                   sandbox=res.get("sandbox"))
        return EXIT_SKIPPED
    if args.odd_sizes and args.source is None and device == "cpu" and manifest.language in ("triton", "cuda"):
        from .triton.check import check_odd_sizes
        try:
            odd = check_odd_sizes(manifest, seeds[0], device, not args.no_tf32, args.deadline)
        except WorkerTimeout as e:
            out.update(status="error", error=f"timed out at the odd sizes: {e}", versions=versions())
            return EXIT_ERROR
        res["failures"] = res.get("failures", []) + odd["failures"]
        res["passed"] = res.get("passed", False) and odd["passed"]
        res["odd_sizes"] = odd
    out.update(res)
    out["status"] = "passed" if res["passed"] else "failed"
    if contract:
        from .cachedir import write_entry
        write_entry("contract", key, {k: v for k, v in out.items() if k not in ("versions", "commit", "sandbox")})
    return EXIT_OK if res["passed"] else EXIT_FAILED


def _contract_key(args, manifest, device, seeds):
    """The content key of a contract check (`check --odd-sizes`, the manifest's own kernel)."""
    import hashlib
    from .triton.basecache import BaselineCache
    h = hashlib.sha256(BaselineCache("", manifest, device, not args.no_tf32).base.encode())
    h.update(json.dumps({"v": 2, "seeds": seeds, "consistency": not (args.no_consistency or args.quick),
                          "curve": not (args.no_curve or args.quick)}, sort_keys=True).encode())
    return h.hexdigest()

