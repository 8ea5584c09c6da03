"""asv.conf.json builds one wheel of the project and keeps the CPU torch (the rules behind `nox -s asv`)."""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def conf() -> dict:
    lines = (ROOT / "asv.conf.json").read_text().splitlines()
    return json.loads("\n".join(line for line in lines if not line.strip().startswith("//")))


def nox_constant(name: str) -> str:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py defines no {name}")


def test_build_makes_exactly_one_wheel_of_the_project():
    # asv's default `pip wheel` also writes every dependency's wheel into the build cache, and
    # asv then fails with "Found multiple wheels ... Cannot decide correct one".
    (build,) = conf()["build_command"]
    assert "pip wheel" in build and "--no-deps" in build and "{build_cache_dir}" in build


def test_install_never_reinstalls_dependencies():
    # `pip install WHEEL --force-reinstall` re-resolves torch from the index: the newest CUDA build.
    for cmd in conf()["install_command"]:
        assert "--force-reinstall" not in cmd or "--no-deps" in cmd, cmd


def test_env_torch_is_the_cpu_build_nox_installs():
    pinned = conf()["matrix"]["req"]["torch"]
    assert f"torch=={pinned}" == nox_constant("CPU_TORCH")


def test_gate_and_tracked_selections_cover_the_suite_once():
    gated, tracked = re.compile(nox_constant("ASV_GATED")), re.compile(nox_constant("ASV_TRACKED"))
    names = ["asv_cells.FakeCell.track_ms_per_output_token", "asv_cells.ModelCell.track_peak_memory_gb",
             "asv_harness.Store.time_compare", "asv_harness.Workload.time_build_workload"]
    assert [bool(gated.search(n)) + bool(tracked.search(n)) for n in names] == [1, 1, 1, 1]
    assert tracked.search("asv_cells.ModelCell.track_e2el_median_ms") and not gated.search("asv_cells.ModelCell.x")


def test_suite_labels_need_no_bench_import_and_match_the_parsed_matrices(monkeypatch):
    # asv discovers the suite against every commit's tree: labels come from the matrices as data,
    # and must be the cells measure() reports.
    import warnings

    from benchmarks import asv_cells

    for which in ("cpu", "gpu"):
        monkeypatch.setenv("BENCH_ASV_MATRIX", which)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 'cuda' without NVML: bench warns it cannot check the GPU
            cells = asv_cells._cpu_or_gpu_matrix().cells
        assert asv_cells._labels(asv_cells._cpu_or_gpu_data()) == [f"{c.precision}/bs{c.max_batch_size}" for c in cells]
    fake = asv_cells._fake_matrix().cells
    assert asv_cells.FakeCell.params == [f"{c.precision}/bs{c.max_batch_size}" for c in fake]
