"""The content-keyed caches (kernels/harness/cachedir.py) that the Rust test suite shares between
its tests: where each lives, and that the compile cache's key covers every input, so a shared
entry can never stand for a changed kernel, manifest, harness, target or Triton."""
import copy
import shutil
from pathlib import Path

from kernels.harness import cachedir
from kernels.harness.manifest import find_manifest, load_manifest
from kernels.harness.triton import aot

from .conftest import SUITE_CACHE


def test_the_content_cache_is_chosen_by_its_own_variable_then_kidiom_cache_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("KIDIOM_CONTENT_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KIDIOM_CACHE", raising=False)
    assert cachedir.content_cache("aot") == tmp_path / "home" / ".cache" / "kidiom" / "aot"
    monkeypatch.setenv("KIDIOM_CACHE", str(tmp_path / "user"))
    assert cachedir.content_cache("sweep") == tmp_path / "user" / "sweep"
    monkeypatch.setenv("KIDIOM_CONTENT_CACHE", str(tmp_path / "shared"))
    assert cachedir.content_cache("host-build") == tmp_path / "shared" / "host-build"
    # every cache of the harness goes there
    from kernels.harness.host import build
    from kernels.harness.triton import sweep
    assert {aot.cache_root(), sweep.cache_root(), build.cache_root()} == \
        {tmp_path / "shared" / k for k in ("aot", "sweep", "host-build")}


def test_a_changed_input_of_a_compile_is_a_new_key(monkeypatch, tmp_path):
    m = find_manifest("kda.decode")
    src = tmp_path / "decode.py"
    shutil.copy(m.source_path, src)
    base = aot._cache_key(m, src, 90)
    assert aot._cache_key(m, src, 90) == base, "the key is a function of its inputs"
    keys = {"base": base}
    # the kernel's bytes, one space more
    src.write_text(src.read_text() + " \n")
    keys["source"] = aot._cache_key(m, src, 90)
    shutil.copy(m.source_path, src)
    # the target
    keys["arch"] = aot._cache_key(m, src, 80)
    # the manifest's bytes (a comment: the compile reads the file, so the key does), in a copy of
    # the kernel's folder (its contract beside it)
    folder = tmp_path / "kda"
    shutil.copytree(m.path.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / m.path.name).write_text(m.path.read_text() + "\n# edited\n")
    keys["manifest"] = aot._cache_key(load_manifest(folder / m.path.name), src, 90)
    # the bench shape the launcher is called with
    shaped = copy.copy(m)
    shaped.shapes = {**m.shapes, "bench": {**m.shapes["bench"], "N": m.shapes["bench"]["N"] + 1}}
    keys["shape"] = aot._cache_key(shaped, src, 90)
    # a file of the harness that runs the compile
    runtime = dict(aot.RUNTIME)
    worker = tmp_path / "aotworker.py"
    worker.write_text(runtime["aotworker.py"].read_text() + "\n# edited\n")
    monkeypatch.setattr(aot, "RUNTIME", {**runtime, "aotworker.py": worker})
    keys["harness"] = aot._cache_key(m, src, 90)
    monkeypatch.setattr(aot, "RUNTIME", runtime)
    # Triton's version
    import triton
    monkeypatch.setattr(triton, "__version__", triton.__version__ + ".post9")
    keys["triton"] = aot._cache_key(m, src, 90)
    assert len(set(keys.values())) == len(keys), keys
    # a CUDA kernel's PTX is NVRTC's: its version is in the key
    from kernels.harness.triton import cudatools
    cuda = find_manifest("kda_cuda.decode")
    before = aot._cache_key(cuda, cuda.source_path, 90)
    monkeypatch.setattr(cudatools, "nvrtc_version", lambda: "99.9")
    assert aot._cache_key(cuda, cuda.source_path, 90) != before


def test_the_suite_keeps_its_caches_out_of_the_users_home():
    # conftest gives the tests the suite's own cache, under target/: none reads or fills ~/.cache/kidiom
    home = Path.home() / ".cache" / "kidiom"
    for kind in ("aot", "host-build", "sweep"):
        chosen = cachedir.content_cache(kind)
        assert home not in chosen.parents, chosen
        assert chosen == SUITE_CACHE / kind, chosen


def test_a_host_build_entry_without_its_module_is_built_again(monkeypatch, tmp_path):
    """An entry directory whose module is gone (a cleaner, a copy cut short) is a miss that the next
    build replaces, never an error that fails every later build of those bytes."""
    from kernels.harness.host import build as hostbuild
    monkeypatch.setenv("KIDIOM_CONTENT_CACHE", str(tmp_path))
    m = find_manifest("kv_transfer")
    so, info = hostbuild.build(m)
    assert so.is_file() and so.parent.parent.parent == tmp_path / "host-build"
    so.unlink()   # build.txt stays: the directory is there, its module is not
    again, info = hostbuild.build(m)
    assert again == so and so.is_file() and info["cached"] is False
    assert hostbuild.build(m)[1]["cached"] is True


def test_a_cached_compile_reads_its_figures_without_the_tools_and_a_damaged_one_reads_them_again(
        monkeypatch, tmp_path):
    """The figures the harness reads from an entry's artifacts (SASS, resource usage, the spill
    log) are kept with it: a hit gives the same compile output without running cuobjdump or
    ptxas; figures that are damaged, or were read by other tools, are read from the artifacts."""
    from kernels.harness.triton import cudatools
    monkeypatch.setenv("KIDIOM_CONTENT_CACHE", str(tmp_path))
    m = find_manifest("kda_cuda.decode")
    cold = aot.compile_kernel(m)
    calls = []
    for name in ("cuobjdump_sass", "resource_usage", "ptxas"):
        real = getattr(cudatools, name)
        monkeypatch.setattr(cudatools, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    warm = aot.compile_kernel(m)
    assert calls == [], calls
    drop = ("sandbox",)
    assert {k: v for k, v in warm.items() if k not in drop} == {k: v for k, v in cold.items() if k not in drop}
    (entry,) = [d for d in (tmp_path / "aot").iterdir() if not d.name.startswith(".")]
    (entry / "figures.json").write_text("{not json")
    again = aot.compile_kernel(m)
    assert {"cuobjdump_sass", "resource_usage", "ptxas"} <= set(calls), calls
    assert again["instructions"] == cold["instructions"] and again["resources"] == cold["resources"]
    # other tools (TRITON_PTXAS_PATH moves ptxas): the kept figures are not theirs
    calls.clear()
    monkeypatch.setattr(aot, "_tools", lambda target: ["/elsewhere/ptxas", "/elsewhere/cuobjdump"])
    aot.compile_kernel(m)
    assert "cuobjdump_sass" in calls, calls


def test_a_changed_input_of_a_profile_is_a_new_key(monkeypatch, tmp_path):
    """The profile cache's key covers what the counts are made from: the kernel, its manifest and
    contract (and what the contract imports), the harness (its worker runs copies of its files),
    the shape, exactness, Triton's version and settings, and for CUDA the host compiler."""
    from kernels.harness.host import build
    from kernels.harness.triton import profile
    m = find_manifest("kda.decode")
    folder = tmp_path / "kda"
    shutil.copytree(m.path.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    copy_m = load_manifest(folder / m.path.name)
    src = folder / m.source_path.name
    base = profile._cache_key(copy_m, src)
    assert profile._cache_key(copy_m, src) == base, "the key is a function of its inputs"
    keys = {"base": base}
    src.write_text(src.read_text() + " \n")
    keys["source"] = profile._cache_key(copy_m, src)
    shutil.copy(m.source_path, src)
    (folder / m.path.name).write_text(m.path.read_text() + "\n# edited\n")
    keys["manifest"] = profile._cache_key(load_manifest(folder / m.path.name), src)
    shutil.copy(m.path, folder / m.path.name)
    contract = load_manifest(folder / m.path.name).contract_path
    contract.write_text(contract.read_text() + "\n# edited\n")
    keys["contract"] = profile._cache_key(load_manifest(folder / m.path.name), src)
    # a module the contract imports (loaded from outside the Python installation)
    helper = tmp_path / "helper_mod.py"
    helper.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("helper_mod")
    keys["imported"] = profile._cache_key(copy_m, src)
    helper.write_text("X = 2\n")
    keys["imported-edited"] = profile._cache_key(copy_m, src)
    # a file of the harness (the worker's runtime is copied from it)
    harness = tmp_path / "harness"
    shutil.copytree(profile.HARNESS, harness, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(profile, "HARNESS", harness)
    keys["harness-copy"] = profile._cache_key(copy_m, src)
    (harness / "triton" / "workprofile.py").write_text((harness / "triton" / "workprofile.py").read_text() + "#\n")
    keys["harness"] = profile._cache_key(copy_m, src)
    monkeypatch.setattr(profile, "HARNESS", profile.HARNESS)
    keys["shape"] = profile._cache_key(copy_m, src, bench={**m.shapes["bench"], "N": m.shapes["bench"]["N"] + 1})
    keys["exact"] = profile._cache_key(copy_m, src, exact=True)
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    keys["triton-setting"] = profile._cache_key(copy_m, src)
    import triton
    monkeypatch.setattr(triton, "__version__", triton.__version__ + ".post9")
    keys["triton"] = profile._cache_key(copy_m, src)
    assert len(set(keys.values())) == len(keys), keys
    cuda = find_manifest("kda_cuda.decode")
    before = profile._cache_key(cuda, None)
    monkeypatch.setattr(build, "compiler_version", lambda: "g++ (other) 99")
    assert profile._cache_key(cuda, None) != before


def test_a_cached_profile_is_the_profile_and_runs_nothing(monkeypatch, tmp_path):
    import argparse
    import time
    from kernels.harness.triton import profile
    monkeypatch.setenv("KIDIOM_CONTENT_CACHE", str(tmp_path))
    m = find_manifest("kda_cuda.decode")
    args = argparse.Namespace(source=None, deadline=time.monotonic() + 300)

    def run():
        out = {}
        return profile.run_profile(args, out, m), out
    rc, cold = run()
    assert rc == 0 and cold["status"] == "ok", cold
    (entry,) = (tmp_path / "profile").iterdir()
    # a hit starts no worker
    real = profile.Workers
    monkeypatch.setattr(profile, "Workers", None)
    rc, warm = run()
    assert rc == 0 and warm == cold, warm
    # a damaged entry is counted again, and replaced
    monkeypatch.setattr(profile, "Workers", real)
    entry.write_text('{"totals": 3')
    rc, again = run()
    assert rc == 0 and profile.json.loads(entry.read_text())["totals"] == cold["totals"]
    assert {k: v for k, v in again.items() if k != "sandbox"} == {k: v for k, v in cold.items() if k != "sandbox"}
