"""`check` against candidates written by an attacker: each cheat is a text substitution of the
baseline source (the way a rewrite arrives), and `check` must fail it with a failure that names
the reason. Before the check ran candidates in sandboxed workers, every one of these passed (or
crashed the harness).

What the design cannot catch is listed in docs/VALIDATION.md ("What check cannot catch").
"""
import os
import socket
import time
from pathlib import Path

import pytest

from .conftest import HAS_CUDA, ROOT, harness, variant

KDA = ROOT / "kernels" / "kda"
DECODE, PREFILL = KDA / "decode.py", KDA / "prefill.py"

# anchors in decode.py
LAUNCH_END = "        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,\n    )\n    return o\n"
PUBLIC = "\n\ndef kda_decode(q, k, v, g, beta, state, slots, o, scale=None):\n"
PUBLIC_CALL = "    return kda_decode_launch(q, k, v, g, beta, state, slots, o, scale)\n"
BETA_LOAD = "    b_beta = tl.load(beta + i_n * HV + i_hv).to(tl.float32)         # []\n"
STATE_UPDATE = "    b_s = b_s + b_k[:, None] * b_d[None, :]\n"
# the failures of a case's second call (its inputs over the contract's RANGES: check.py, _Case)
CALL_2 = "call 2 (same buffers, inputs over the contract's ranges, extremes included): "


def after_launch(code):
    """Host code right after the kernel's launch, in the launcher."""
    body = "".join(f"    {line}\n" for line in code.strip("\n").splitlines())
    return [(LAUNCH_END, LAUNCH_END.replace("    return o\n", body + "    return o\n"))]


# the float32 recurrence in numpy, writing the outputs in place (NpTensor.numpy() shares memory)
NUMPY_DECODE = '''
def _numpy_decode(q, k, v, g, beta, state, slots, o, scale):
    import numpy as np
    Q, Kk, Vv, G, Bt, S, sl, O = (t.numpy() for t in (q, k, v, g, beta, state, slots, o))
    N, H, K = Q.shape
    HV = Vv.shape[1]
    for n in range(N):
        for hv in range(HV):
            h = hv // (HV // H)
            s = S[sl[n], hv].astype(np.float64) * np.exp(G[n, hv].astype(np.float64))[:, None]
            d = Bt[n, hv] * (Vv[n, hv] - s.T @ Kk[n, h])
            s = s + np.outer(Kk[n, h], d)
            O[n, hv] = s.T @ (scale * Q[n, h].astype(np.float64))
            S[sl[n], hv] = s
    return o
'''


def check(src, kernel="kda.decode", *extra, timeout=None):
    args = ["check", "--kernel", kernel, "--source", str(src), "--quick", "--seed", "3", *extra]
    if timeout:
        args += ["--timeout", str(timeout)]
    return harness(*args)


def failed_with(rc, out, *needles):
    assert rc == 1 and out["status"] == "failed", (rc, out.get("status"), out.get("error"), out.get("traceback"))
    joined = "\n".join(out["failures"])
    for n in needles:
        assert n in joined, f"{n!r} not in:\n{joined[:3000]}"
    print(f"\n-> {next(f for f in out['failures'] if needles[0] in f)[:240]}")
    return joined


cpu_only = pytest.mark.skipif(HAS_CUDA, reason="the cheat writes host memory through NpTensor (CPU check)")


# 1. input mutation ---------------------------------------------------------------------------------

@cpu_only
def test_launcher_that_zeroes_an_input_is_caught(tmp_path):
    src = variant(tmp_path, DECODE, after_launch("v.numpy()[...] = 0"))
    rc, out = check(src)
    failed_with(rc, out, "input v was modified by the call")
    assert out["cases"][0]["inputs_unchanged"]["v"] is False


def test_kernel_that_writes_an_input_is_caught(tmp_path):
    src = variant(tmp_path, DECODE, [(BETA_LOAD, BETA_LOAD + "    tl.store(p_v, b_v * 0., mask=m_v)\n")])
    rc, out = check(src)
    failed_with(rc, out, "input v was modified by the call")


# 2. reference substitution -------------------------------------------------------------------------

@cpu_only
def test_launcher_that_computes_with_numpy_is_caught(tmp_path):
    """Correct outputs (float64 numpy), no kernel: the launch count and the provenance catch it."""
    src = variant(tmp_path, DECODE, [(PUBLIC, "\n\n" + NUMPY_DECODE + PUBLIC),
                                     (PUBLIC_CALL, "    return _numpy_decode(q, k, v, g, beta, state, slots, o, scale)\n")])
    rc, out = check(src)
    joined = failed_with(rc, out, "the kernel kda_decode_kernel never ran", "written by host code, outside any kernel")
    assert "rel_l2" not in joined   # the values themselves are right
    assert out["cases"][0]["launches"]["entry"] == [0, 0]


LAUNCH = "    kda_decode_kernel[grid](\n"


@cpu_only
def test_launcher_that_overwrites_the_kernels_outputs_with_numpy_is_caught(tmp_path):
    """Launches the kernel (the launch count is satisfied), then puts the pool back as it was and
    replaces every output with numpy's (right) values: only the provenance sees it."""
    src = variant(tmp_path, DECODE, [(PUBLIC, "\n\n" + NUMPY_DECODE + PUBLIC),
                                     (LAUNCH, "    _pool = state.numpy().copy()\n" + LAUNCH)] + after_launch(
        "state.numpy()[...] = _pool\n_numpy_decode(q, k, v, g, beta, state, slots, o, scale)"))
    rc, out = check(src)
    joined = failed_with(rc, out, "o: ", "elements were written by host code, outside any kernel")
    assert "never ran" not in joined and "rel_l2" not in joined   # launched, and the values are right


def test_launcher_that_imports_the_reference_finds_nothing(tmp_path):
    cheat = ("    from kernels.kda.reference import naive_decode_kda  # the harness's float64 reference\n"
             "    raise SystemExit('unreachable: the reference was importable')\n")
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, cheat + PUBLIC_CALL)])
    rc, out = check(src)
    failed_with(rc, out, "raised ModuleNotFoundError: No module named 'kernels'",
                "the kernel kda_decode_kernel never ran")


# 3. precision lowered without a flag -----------------------------------------------------------------

def test_state_rounded_to_bf16_is_caught_against_the_baseline(tmp_path):
    """Round-to-nearest bf16 of the updated state: ~1e-3 relative error, inside the absolute
    tolerance (5e-3), 10^4 times the baseline's own error on the same inputs."""
    rnd = "    b_s = ((b_s.to(tl.uint32, bitcast=True) + 0x8000) & 0xFFFF0000).to(tl.float32, bitcast=True)\n"
    src = variant(tmp_path, DECODE, [(STATE_UPDATE, STATE_UPDATE + rnd)])
    rc, out = check(src)
    failed_with(rc, out, "o: rel_l2", "is materially worse than the baseline's", "on the same inputs")
    # the absolute tolerance alone would have passed it
    assert all("materially worse than the baseline" in f for f in out["failures"]), out["failures"]
    case = out["cases"][0]
    assert case["baseline"]["outputs"]["o"]["rel_l2"] < 1e-6 < case["outputs"]["o"]["rel_l2"] < 5e-3


# 4. output caching -----------------------------------------------------------------------------------

CACHE = '''
_CACHE = {}


def _save(t):
    return t.clone() if hasattr(t, "clone") else t.numpy().copy()


def _restore(t, saved):
    if hasattr(t, "copy_"):
        t.copy_(saved)
    else:
        t.numpy()[...] = saved
'''


@pytest.mark.parametrize("key", ["(o.data_ptr(), state.data_ptr())", "(tuple(o.shape), tuple(state.shape))"],
                         ids=["by-address", "by-shape"])
def test_launcher_that_caches_outputs_is_caught(key, tmp_path):
    cached = (f"    key = {key}\n"
              "    if key in _CACHE:\n"
              "        _restore(o, _CACHE[key][0])\n"
              "        _restore(state, _CACHE[key][1])\n"
              "        return o\n"
              "    kda_decode_launch(q, k, v, g, beta, state, slots, o, scale)\n"
              "    _CACHE[key] = (_save(o), _save(state))\n"
              "    return o\n")
    src = variant(tmp_path, DECODE, [(PUBLIC, "\n\n" + CACHE + PUBLIC), (PUBLIC_CALL, cached)])
    rc, out = check(src)
    failed_with(rc, out, CALL_2 + "the kernel kda_decode_kernel never ran", CALL_2 + "o: rel_l2")
    assert all(c["launches"]["entry"] == [1, 0] for c in out["cases"])


# 5. the sandbox ----------------------------------------------------------------------------------------

PROBE = '''
def _probe():
    import os, socket
    seen = []

    def attempt(name, fn):
        try:
            fn()
            seen.append(name + ":OPEN")
        except BaseException as e:  # noqa: BLE001
            seen.append(name + ":blocked")

    attempt("read-reference", lambda: open(REFERENCE).read(64))
    attempt("list-repository", lambda: os.listdir(REPOSITORY))
    attempt("write-outside", lambda: open(OUTSIDE, "w").write("escaped"))
    scratch = os.path.dirname(os.getcwd())     # cwd is scratch/work; the harness's files are above
    attempt("tamper-harness-files", lambda: open(os.path.join(scratch, "worker.json"), "a").write(" "))
    attempt("plant-symlink", lambda: os.symlink(OUTSIDE, os.path.join(scratch, "in", "999")))
    attempt("import-reference", lambda: __import__("kernels.kda.reference"))
    attempt("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))

    def abstract_socket():   # a listener outside, on an abstract address (no file to confine)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(ABSTRACT)

    attempt("abstract-socket", abstract_socket)
    harness_pids = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and b"kernels.harness" in open(f"/proc/{p}/cmdline", "rb").read():
                harness_pids.append(int(p))
        except OSError:
            pass

    def signal_harness():
        if not harness_pids:
            raise LookupError("no harness process visible")
        for pid in harness_pids:
            os.kill(pid, 0)

    def read_harness_memory():
        if not harness_pids:
            raise LookupError("no harness process visible")
        for pid in harness_pids:
            open(f"/proc/{pid}/environ", "rb").read(64)

    attempt("signal-harness", signal_harness)
    attempt("read-harness-memory", read_harness_memory)
    raise RuntimeError("probe " + " ".join(seen))
'''


@pytest.mark.skipif(HAS_CUDA, reason="CPU sandbox probe")
def test_the_candidate_cannot_read_write_connect_or_signal_outside_its_sandbox(tmp_path):
    outside = tmp_path / "escaped.txt"
    address = f"\0kidiom-probe-{os.getpid()}-{time.monotonic_ns()}"
    probe = (PROBE.replace("REFERENCE", repr(str(KDA / "reference.py"))).replace("REPOSITORY", repr(str(ROOT)))
             .replace("OUTSIDE", repr(str(outside))).replace("ABSTRACT", repr(address)))
    src = variant(tmp_path, DECODE, [(PUBLIC, "\n\n" + probe + PUBLIC), (PUBLIC_CALL, "    _probe()\n" + PUBLIC_CALL)])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(4)
    try:
        rc, out = check(src, "kda.decode", "--no-baseline")
    finally:
        listener.close()
    line = failed_with(rc, out, "raised RuntimeError: probe ")
    probe_line = next(f for f in out["failures"] if "probe " in f)
    sb = out["sandbox"]
    confined = not sb["filesystem"].startswith("not confined")
    print(f"\nsandbox: {sb['filesystem']}; network: {sb['network']}")
    assert "import-reference:blocked" in probe_line
    if confined:
        for what in ("read-reference", "list-repository", "write-outside", "tamper-harness-files", "plant-symlink",
                     "signal-harness", "read-harness-memory"):
            assert f"{what}:blocked" in probe_line, probe_line
        assert not outside.exists()
    if sb["network"].startswith("none"):
        # abstract Unix sockets belong to the network namespace: none of the host's is reachable
        assert "network:blocked" in probe_line and "abstract-socket:blocked" in probe_line, probe_line
    assert line


@cpu_only
def test_monkeypatching_numpy_in_the_worker_does_not_reach_the_judge(tmp_path):
    """The candidate patches numpy so that every comparison would pass, and computes nothing:
    the judging happens in another process."""
    cheat = ("    import builtins, numpy\n"
             "    numpy.linalg.norm = lambda *a, **k: 0.0\n"
             "    numpy.isfinite = lambda x, *a, **k: numpy.ones(numpy.shape(x), bool)\n"
             "    numpy.allclose = numpy.array_equal = lambda *a, **k: True\n"
             "    builtins.max = lambda *a, **k: 0.0\n"
             "    return o\n")
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, cheat)])
    rc, out = check(src)
    failed_with(rc, out, "non-finite elements", "the kernel kda_decode_kernel never ran")


# 6. the protocol, crashes and hangs --------------------------------------------------------------------

def test_printing_to_stdout_does_not_corrupt_the_protocol(tmp_path):
    noise = ('    print(\'{"done": 0, "sets": []}\')\n'
             '    import os, sys\n'
             '    os.write(1, b\'{"status": "passed"}\\n\')\n'
             '    sys.stderr.write("noise\\n")\n')
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, noise + PUBLIC_CALL)])
    rc, out = check(src)
    assert rc == 0 and out["status"] == "passed", out.get("failures") or out.get("error")


@cpu_only
def test_writing_into_the_workers_channel_is_a_failure_not_a_harness_error(tmp_path):
    junk = ("    import os\n"
            "    for fd in os.listdir('/proc/self/fd'):\n"
            "        if int(fd) > 2:\n"
            "            try:\n"
            "                os.write(int(fd), b'garbage\\n{\"done\": 12345, \"sets\": []}\\n')\n"
            "            except OSError:\n"
            "                pass\n")
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, junk + PUBLIC_CALL)])
    rc, out = check(src)
    failed_with(rc, out, "candidate process corrupted its channel to the harness")


@pytest.mark.parametrize("code,expect", [
    ("import ctypes; ctypes.string_at(0)", "candidate process died with SIGSEGV"),
    ("import os; os._exit(3)", "candidate process exited with code 3"),
    ("import os; os.abort()", "candidate process died with SIGABRT"),
    ("raise SystemExit(0)", "raised SystemExit: 0"),
], ids=["segfault", "os-exit", "abort", "system-exit"])
def test_a_crashing_candidate_fails_its_case(code, expect, tmp_path):
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, f"    {code}\n" + PUBLIC_CALL)])
    rc, out = check(src, "kda.decode", "--no-baseline")
    failed_with(rc, out, expect)
    first = out["cases"][0]["id"]
    assert out["failures"][0].startswith(f"{first} seed 3: "), out["failures"][0]


def test_a_hanging_candidate_is_killed_at_the_deadline(tmp_path):
    src = variant(tmp_path, DECODE, [(PUBLIC_CALL, "    while True:\n        pass\n")])
    t0 = time.monotonic()
    rc, out = check(src, timeout=6)
    assert rc == 2 and out["status"] == "error" and "timed out" in out["error"], out
    assert time.monotonic() - t0 < 12
    print(f"\n-> {out['error']}")


def test_prefill_final_state_rounded_to_bf16_is_caught_against_the_baseline(tmp_path):
    """The precision cheat on prefill: the final state stored at bf16 precision (inside the
    absolute tolerance, 20x the baseline's TF32 error)."""
    store = "        tl.store(ht + p_state, b_s.to(ht.dtype.element_ty), mask=m_s)\n"
    rnd = "        b_s = ((b_s.to(tl.uint32, bitcast=True) + 0x8000) & 0xFFFF0000).to(tl.float32, bitcast=True)\n"
    src = variant(tmp_path, PREFILL, [(store, rnd + store)])
    rc, out = check(src, "kda.prefill")
    failed_with(rc, out, "final_state: ", "is materially worse than the baseline's")


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's environment is the CPU's")
@pytest.mark.parametrize("where", ["kernel", "launcher"])
def test_a_candidate_that_asks_whether_the_interpreter_runs_it_sees_a_gpus_environment(tmp_path, where):
    # wrong on a GPU only: the worker hides TRITON_INTERPRET once the kernels are loaded, so the
    # CPU's checks see what a GPU would run (through `kidiom validate` the static gate refuses
    # such reads first; this is the check's own defence)
    readout = "    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)\n"
    if where == "kernel":
        edits = [(readout, '    if not __import__("os").environ.get("TRITON_INTERPRET"):\n'
                           "        b_o = b_o * 2.0\n" + readout)]
    else:
        edits = after_launch('if not __import__("os").environ.get("TRITON_INTERPRET"):\n    o.numpy()[...] = 0')
    src = variant(tmp_path, DECODE, edits)
    code, out = harness("check", "--kernel", "kda.decode", "--source", str(src), "--quick", "--device", "cpu")
    assert code == 1 and out["status"] == "failed", out
    assert all(not c["passed"] for c in out["cases"]), [c["id"] for c in out["cases"] if c["passed"]]


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's output buffers")
def test_a_kernel_that_writes_only_where_the_harness_poisoned_the_buffer_is_caught(tmp_path):
    # round four, class 5: correct only while the output holds the harness's NaN; a GPU's reused
    # buffer holds the last call's results or anything else, and so do the check's later calls
    readout = "    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v)\n"
    cheat = ("    b_prev = tl.load(p_o, mask=m_v, other=0.)\n"
             "    tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=m_v & (b_prev != b_prev))\n")
    src = variant(tmp_path, DECODE, [(readout, cheat)])
    failures = []
    for _ in range(3):   # each later call's fill is drawn afresh; every fill but NaN exposes it
        code, out = harness("check", "--kernel", "kda.decode", "--source", str(src), "--quick", "--device", "cpu")
        assert out["status"] in ("failed", "passed"), out
        failures.append(out["status"] == "failed")
        if failures[-1]:   # caught on a later call of a case, or of a GPU specialization's case: each
            # draws its own fill, and when every case of the shape matrix drew NaN a specialization's did not
            assert any(CALL_2 + "o:" in f for f in out["failures"]), out["failures"]
    assert any(failures), "three checks in a row drew NaN for every later call of every case"
