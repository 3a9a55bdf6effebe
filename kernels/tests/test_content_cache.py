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
