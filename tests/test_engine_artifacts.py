"""Engines as artifacts, tuning spread, and comparisons that know the kernels (issue 31), on the fake backend.

The fake backend's `tuning_spread` simulates a tuned build: the first load of a cold engine folder
draws a speed factor and a tuned digest (seeded by the build key and the tuning build), keeps them
in the folder and carries them in its artifact, so every path below runs end to end in real
worker processes without a GPU.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from bench.backends import engine_artifact
from bench.cli import main
from bench.errors import BenchInputError
from bench.results import query
from tests.support.records import make_record

TORCH_BLOB = Path(__file__).parent / "data" / "torch" / "cache-artifacts-2.13-cpu.bin"

MATRIX = """
name = "lottery"
backends = ["fake"]
model = "qwen-tiny"
device = "cpu"
precisions = ["bf16"]
max_batch_sizes = [1]
workloads = ["syn"]
trials = 2
warmup = 1
timeout_s = 60
build_timeout_s = 60
baseline = {{ backend = "fake", precision = "bf16", max_batch_size = 1 }}

[options]
tuning_spread = {spread}

[workload.syn]
source = "synthetic"
num_requests = 4
input_len = 16
output_len = 8
"""


@pytest.fixture
def lottery(tmp_path, monkeypatch):
    """Return a function writing the lottery matrix (a given tuning spread) in a fresh working folder."""
    monkeypatch.chdir(tmp_path)  # bench run/build write engines/, results/, workloads/cache/ here

    def write(spread: float = 0.3) -> str:
        path = tmp_path / f"lottery-{spread}.toml"
        path.write_text(MATRIX.format(spread=spread))
        return str(path)

    return write


def _rewrite_manifest(path: Path, **environment) -> None:
    """Change the environment an artifact says it was made in (as a copy from another machine would say)."""
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for member, data in members:
            if member.name == engine_artifact.MANIFEST:
                manifest = json.loads(data)
                manifest["environment"].update(environment)
                data = json.dumps(manifest).encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    path.write_bytes(out.getvalue())


def test_an_artifact_holds_its_files_under_a_content_digest_and_refuses_a_damaged_copy(tmp_path):
    files = {"tuned.json": b'{"factor": 1.1}', "inductor/ab/k.best_config": b'{"XBLOCK": 64}'}
    key = {"backend": "fake", "options": {}}
    env = {"torch": "2.11.0+cu130", "triton": "3.5.0", "cuda": "13.0", "gpu_name": "NVIDIA H200",
           "compute_capability": "9.0", "driver": "580.159.04", "host": "m1", "gpu_uuid": "GPU-1"}
    path, manifest = engine_artifact.write(tmp_path, key, "ab" * 8, env, {"digest": "abcd"}, files)
    assert path.name == f"{'ab' * 8}-{manifest['digest'][:12]}.tar"
    again, read = engine_artifact.read_files(path)
    assert read == files and again["digest"] == manifest["digest"] == engine_artifact.digest_of(key, files)
    assert again["environment"]["gpu_uuid"] == "GPU-1" and again["tuned"] == {"digest": "abcd"}
    # The same files give the same digest wherever and whenever they were made; other files another.
    assert engine_artifact.digest_of(key, dict(reversed(files.items()))) == manifest["digest"]
    assert engine_artifact.digest_of(key, {**files, "tuned.json": b"{}"}) != manifest["digest"]
    assert engine_artifact.mismatches(env, {**env, "host": "m2", "gpu_uuid": "GPU-2"}) == []  # another board: fine
    assert engine_artifact.mismatches(env, {"torch": "2.13.0", "driver": "580.159.04"}) == [
        "torch: made with 2.11.0+cu130, here 2.13.0"]  # keys `here` lacks are not judged

    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    damaged = tmp_path / "damaged.tar"
    with tarfile.open(damaged, mode="w") as tar:
        for member, data in members:
            if member.name == "files/tuned.json":
                data = b'{"factor": 9.9}'
            tar.addfile(member, io.BytesIO(data))
    with pytest.raises(BenchInputError, match="does not match its SHA-256"):
        engine_artifact.read_files(damaged)
    (tmp_path / "not.tar").write_text("hello")
    with pytest.raises(BenchInputError, match="not an engine artifact"):
        engine_artifact.read_manifest(tmp_path / "not.tar")


def test_bench_build_then_run_engines_runs_the_artifacts_tuned_kernels_in_every_process(lottery, tmp_path):
    matrix = lottery()
    assert main(["build", "--matrix", matrix, "--artifacts", "art"]) == 0
    (artifact,) = (tmp_path / "art").glob("*.tar")
    manifest = engine_artifact.read_manifest(artifact)
    assert manifest["tuned"]["digest"] and [f["path"] for f in manifest["files"]] == ["tuned.json"]
    assert not (tmp_path / "results").exists()  # a build measures nothing

    assert main(["run", "--matrix", matrix, "--engines", "art", "--runs", "2", "--store", "s.jsonl",
                 "--no-progress"]) == 0
    records = query.load(["s.jsonl"])
    assert len(records) == 4 and all(r.ok for r in records)
    assert {r.kernels["source"] for r in records} == {"artifact"}
    assert {r.kernels["artifact"] for r in records} == {manifest["digest"]}
    assert {r.tuned_digest for r in records} == {manifest["tuned"]["digest"]}  # the build's tuning, not a new one
    # Both processes ran the build's kernels: one figure (the fake's clock has no noise here).
    assert len({round(r.metric("output_throughput"), 9) for r in records}) == 1

    # Without --engines the cell builds here (its own cold folder): the records say so.
    assert main(["run", "--matrix", matrix, "--store", "here.jsonl", "--no-progress"]) == 0
    assert {r.kernels["source"] for r in query.load(["here.jsonl"])} == {"built here"}
    # The same store with the artifact: other kernels, so a new run, not "already stored"; then resumed as done.
    for _ in range(2):
        assert main(["run", "--matrix", matrix, "--engines", "art", "--store", "here.jsonl", "--no-progress"]) == 0
    assert [r.kernels["source"] for r in query.load(["here.jsonl"])] == ["built here"] * 2 + ["artifact"] * 2


def test_an_artifact_made_elsewhere_is_refused_before_any_work_unless_asked_to_tune_here(lottery, tmp_path, capsys):
    matrix = lottery()
    assert main(["build", "--matrix", matrix, "--artifacts", "art"]) == 0
    (artifact,) = (tmp_path / "art").glob("*.tar")
    _rewrite_manifest(artifact, torch="2.11.0+cu130")
    capsys.readouterr()
    assert main(["run", "--matrix", matrix, "--engines", str(artifact), "--store", "s.jsonl", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "made in another environment: torch: made with 2.11.0+cu130, here " in err and "--retune-on-mismatch" in err
    assert not (tmp_path / "s.jsonl").exists()  # refused before any work

    with pytest.warns(UserWarning, match="building here"):
        assert main(["run", "--matrix", matrix, "--engines", str(artifact), "--retune-on-mismatch", "--store",
                     "s.jsonl", "--no-progress"]) == 0
    records = query.load(["s.jsonl"])
    assert records and all(r.ok for r in records)
    kernels = records[0].kernels
    assert kernels["source"] == "built here" and kernels["refused_artifact"] == engine_artifact.read_manifest(
        artifact)["digest"]
    assert kernels["refused_because"][0].startswith("torch: made with 2.11.0+cu130")


def test_a_difference_only_the_worker_can_see_is_refused_there_with_a_stored_reason(lottery, tmp_path):
    """The parent does not import torch, so the CUDA version is the worker's to check."""
    matrix = lottery()
    assert main(["build", "--matrix", matrix, "--artifacts", "art"]) == 0
    (artifact,) = (tmp_path / "art").glob("*.tar")
    _rewrite_manifest(artifact, cuda="13.0")
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import load_matrix
    from bench.spec.narrow import narrow

    # (run_matrix, not `bench run`: the report of a store holding only failed builds raises in
    # bench.report.tables.aggregate, a fault older than this issue.)
    summary = run_matrix(narrow(load_matrix(matrix), engines=["art"]), "s.jsonl", show_progress=False)
    assert summary.statuses == {"error": 2}
    (record, *_) = query.load(["s.jsonl"])
    assert record.status == "error" and "ArtifactMismatch" in record.error and "cuda: made with 13.0" in record.error


def test_engines_must_cover_every_build_key_and_exclude_tuning_builds(lottery, tmp_path, capsys):
    matrix = lottery()
    assert main(["build", "--matrix", matrix, "--artifacts", "art"]) == 0
    other = lottery(0.2)  # another tuning_spread: another build key
    capsys.readouterr()
    assert main(["run", "--matrix", other, "--engines", "art", "--store", "s.jsonl", "--no-progress"]) == 2
    assert "no engine artifact for 1 cell(s)" in capsys.readouterr().err
    assert main(["run", "--matrix", matrix, "--engines", "art", "--tuning-builds", "2", "--store", "s.jsonl"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main(["run", "--matrix", matrix, "--engines", "missing-folder", "--store", "s.jsonl"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_tuning_builds_measure_the_lottery_and_the_table_flags_it(lottery, tmp_path):
    from bench.report.build import build_report

    matrix = lottery()
    assert main(["run", "--matrix", matrix, "--tuning-builds", "3", "--store", "t.jsonl", "--no-progress"]) == 0
    records = query.load(["t.jsonl"])
    assert sorted({r.tuning_build for r in records}) == [0, 1, 2] and len(records) == 6
    assert len({r.tuned_digest for r in records}) == 3  # three cold builds, three tunings
    folders = sorted(p.parent.parent.name for p in (tmp_path / "engines" / "tuning").rglob("tuned.json"))
    assert folders == ["build-0", "build-1", "build-2"]  # each build its own engine folder
    means = [sum(r.metric("output_throughput") for r in records if r.tuning_build == b) / 2 for b in range(3)]
    mean = sum(means) / 3
    cv = (sum((m - mean) ** 2 for m in means) / 2) ** 0.5 / mean
    assert cv > 0.03  # the draws of this build key (tuning_spread 0.3) differ by more than the ⚠ limit
    text = build_report([tmp_path / "t.jsonl"], tmp_path / "rep", {"backend": "fake"})["markdown"].read_text()
    assert "tuning spread: builds (digests)" in text
    assert f"{100 * cv:.1f}% (3 builds, 3 digests) ⚠" in text
    assert "the tuning builds (cold builds, each its own tuned kernels) differ by" in text

    # Resume: the same invocation again measures nothing new.
    assert main(["run", "--matrix", matrix, "--tuning-builds", "3", "--store", "t.jsonl", "--no-progress"]) == 0
    assert len(query.load(["t.jsonl"])) == 6


def test_builds_without_a_tuning_show_no_tuning_warning(lottery, tmp_path):
    from bench.report.build import build_report

    matrix = lottery(0.0)
    assert main(["run", "--matrix", matrix, "--tuning-builds", "2", "--store", "t.jsonl", "--no-progress"]) == 0
    text = build_report([tmp_path / "t.jsonl"], tmp_path / "rep", {"backend": "fake"})["markdown"].read_text()
    # No tuning warning (a busy-machine note may still appear: this machine's load is not the test's subject).
    assert "0.0% (2 builds) |" in text and "tuning builds" not in text


def _tuned(digest: str) -> dict:
    return {"inductor": {"coordinate_descent_tuning": True, "tuned": {"kernels": 17, "digest": digest}}}


def test_pooling_refuses_runs_of_different_tuned_kernels():
    def runs(run_id, started, digest, value):
        return [make_record("i", run=r, trial=t, run_id=run_id, started_at=started, output_throughput=value,
                            extra=_tuned(digest)) for r in range(2) for t in range(2)]

    same = runs("a", 1.0, "c38cec28aa", 144.0) + runs("b", 2.0, "c38cec28aa", 145.0)
    (row,) = query.select(same, pool=True).rows
    assert row.pooled and row.tuned_digests == ("c38cec28aa",)
    with pytest.raises(BenchInputError, match=r"different tuned kernels \(tuned 0035a36c… in run b .*; c38cec28… in run a"):
        query.select(runs("a", 1.0, "c38cec28aa", 144.0) + runs("b", 2.0, "0035a36caa", 256.0), pool=True)


def test_compare_labels_a_change_between_different_tuned_kernels_instead_of_a_verdict(tmp_path):
    from bench.results.compare import KERNELS_DIFFER, compare_stores, to_markdown
    from tests.support.synthetic import write_store

    def store(name, digest, value):
        recs = [make_record("i", run=r, trial=t, run_id=name, output_throughput=value + r * 0.5,
                            request_throughput=1.0, extra=_tuned(digest)) for r in range(3) for t in range(2)]
        write_store(tmp_path / f"{name}.jsonl", recs)
        return tmp_path / f"{name}.jsonl"

    base = store("m5", "c38cec28aa", 144.0)  # machine 5 of issue 31: 0.78x
    lottery = compare_stores(base, store("m6", "8a5e1145bb", 256.0), metrics=["output_throughput"])
    (row,) = lottery.rows
    assert row.verdict == KERNELS_DIFFER and row.note.startswith("kernels differ: tuned c38cec28… vs 8a5e1145…")
    assert "(was: improved)" in row.note and lottery.exit_status == 4  # a withheld verdict does not pass
    assert "kernels differ" in to_markdown(lottery)
    # The same kernels on both sides: the change is the code's, and judged.
    judged = compare_stores(base, store("m5b", "c38cec28aa", 100.0), metrics=["output_throughput"])
    assert judged.rows[0].verdict == "regressed" and judged.exit_status == 1


def test_hf_carries_torchs_cache_artifacts_and_the_tuned_configs_and_installs_the_configs_last(tmp_path, monkeypatch):
    """The hf side without a GPU: what engine_files collects, and that install_engine hands torch its bytes first and
    then writes the `*.best_config` files, so the loaded folder's tuned digest is the artifact's."""
    import torch

    from bench.backends.hf import compile as hf_compile
    from bench.backends.hf.backend import HFBackend

    built = tmp_path / "built"
    cache = built / "inductor" / "ab"
    cache.mkdir(parents=True)
    (cache / "k1.best_config").write_text(json.dumps({"XBLOCK": 64, "found_by_coordesc": True, "time_taken_ms": 9}))
    (built / "inductor" / "fxgraph").mkdir()
    blob = TORCH_BLOB.read_bytes()  # real bytes of torch 2.13's save_cache_artifacts (tests/data/torch/README.md)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (blob, None))
    files = hf_compile.engine_files(built)
    assert files == {hf_compile.TORCH_CACHE_ARTIFACTS: blob,
                     "inductor/ab/k1.best_config": (cache / "k1.best_config").read_bytes()}

    loaded = tmp_path / "loaded"
    events = []

    def load_cache_artifacts(blob):
        events.append(("torch", blob, (loaded / "inductor" / "ab" / "k1.best_config").exists()))
        # torch's own autotune entry, recorded earlier in the build: the artifact's file must win
        (loaded / "inductor" / "ab").mkdir(parents=True, exist_ok=True)
        (loaded / "inductor" / "ab" / "k1.best_config").write_text(json.dumps({"XBLOCK": 8}))

    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", load_cache_artifacts)
    HFBackend().install_engine({"folder": str(loaded)}, files)
    assert events == [("torch", blob, False)]
    assert not (loaded / hf_compile.TORCH_CACHE_ARTIFACTS).exists()  # torch's bytes go to torch, not to a file
    assert hf_compile.tuned_kernel_configs(loaded / "inductor") == hf_compile.tuned_kernel_configs(built / "inductor")
    with pytest.raises(ValueError, match="outside the build folder"):
        HFBackend().install_engine({"folder": str(loaded)}, {"../escape.best_config": b"{}"})


def test_a_version_without_its_local_part_matches_the_full_one_and_other_versions_do_not():
    """The parent reads torch's version from package metadata ('2.11.0' on the H200), the worker from
    torch.__version__ ('2.11.0+cu130'): the same torch, which the first H200 run refused."""
    from bench.backends import engine_artifact

    made = {"torch": "2.11.0+cu130", "triton": "3.6.0", "gpu_name": "NVIDIA H200"}
    assert engine_artifact.mismatches(made, {"torch": "2.11.0", "triton": "3.6.0"}) == []
    assert engine_artifact.mismatches(made, {"torch": "2.11.0+cu128"}) == ["torch: made with 2.11.0+cu130, here 2.11.0+cu128"]
    assert engine_artifact.mismatches(made, {"torch": "2.12.0"}) == ["torch: made with 2.11.0+cu130, here 2.12.0"]
    assert engine_artifact.mismatches(made, {"gpu_name": "NVIDIA H100"}) == ["gpu_name: made with NVIDIA H200, here NVIDIA H100"]


def test_a_run_from_an_artifact_that_tuned_again_says_so_under_its_table(tmp_path):
    """Real records (tests/data/h200-artifact-runs.jsonl: an H200, 2026-12-01, `bench run --preset h200-best-bs1
    --engines ART --runs 2` on a machine other than the artifact's): bf16 ran the artifact's kernels and tuned nothing;
    the int8wo processes tuned 17 and 4 kernels again, so their figures are not the artifact's, and the report says so."""

    store = Path(__file__).parent / "data" / "h200-artifact-runs.jsonl"
    records = query.load([store])
    assert {r.kernels["source"] for r in records} == {"artifact"}
    retuned = {(r.cell["precision"], r.extra["inductor"]["tuned_in_process"]) for r in records}
    assert retuned == {("bf16", 0), ("int8wo", 17), ("int8wo", 4)}
    assert {r.notes for r in records if r.cell["precision"] == "bf16"} == {(
        "hf/bf16/bs1 ran the kernels of engine artifact 0968bcd64972, made on GPU-45b717dd-4e22-fb4e-91fe-c725cd861db7 "
        "(tuned digest f4e3eacdd2efa8c5, kept)",)}
    assert main(["report", str(store), "--report-dir", str(tmp_path)]) == 0
    text = (tmp_path / "report.md").read_text()
    notes = [line for line in text.splitlines() if "ran from engine artifact" in line]
    assert len(notes) == 2 and all(n.startswith("Note: hf/int8wo/bs1 ran from engine artifact 08ed8b52b8fd") for n in notes)
    assert any("tuned 17 kernel(s) again" in n for n in notes) and any("tuned 4 kernel(s) again" in n for n in notes)
    assert "Note: hf/bf16/bs1 ran the kernels of engine artifact 0968bcd64972, made on GPU-45b717dd" in text


def test_a_run_that_kept_stored_winners_says_how_many_under_its_table():
    """A process that ran stored winners Inductor was about to tune again (bench/backends/hf/kept_winners.py) kept the
    artifact's kernels, and its note says how many it had to keep."""
    import dataclasses

    store = Path(__file__).parent / "data" / "h200-artifact-runs.jsonl"
    bf16 = next(r for r in query.load([store]) if r.cell["precision"] == "bf16")
    kept = dataclasses.replace(bf16, extra={**bf16.extra, "inductor": {**bf16.extra["inductor"], "kept_in_process": 3}})
    (note,) = kept.notes
    assert note.startswith("hf/bf16/bs1 ran the kernels of engine artifact 0968bcd64972") and "(tuned digest f4e3eacdd2efa8c5, kept)" in note
    assert note.endswith("; 3 of them Inductor would have tuned again ran their stored winners (bench/backends/hf/kept_winners.py)")
    assert not bf16.notes[0].endswith("kept_winners.py)")


def test_an_artifact_loads_into_the_absolute_folder_it_was_built_in_or_says_why_not(lottery, tmp_path, monkeypatch):
    """Inductor's statically launched kernels carry their build's absolute paths (source file, autotune entry), so
    a run loads the artifact into the build's own engines folder; an older artifact, or a folder this machine cannot
    create, loads into one of its digest with a warning (then the records count the kernels tuned again)."""
    matrix = lottery()
    assert main(["build", "--matrix", matrix, "--artifacts", "art"]) == 0
    (artifact,) = (tmp_path / "art").glob("*.tar")
    manifest = engine_artifact.read_manifest(artifact)
    built_in = Path(manifest["engines_dir"])
    assert built_in.is_absolute() and built_in.parent == tmp_path / "engine-builds" / "builds"
    assert main(["run", "--matrix", matrix, "--engines", "art", "--store", "s.jsonl", "--no-progress"]) == 0
    (kernels,) = {json.dumps(r.kernels, sort_keys=True) for r in query.load(["s.jsonl"])}
    assert json.loads(kernels)["installed_in"] == json.loads(kernels)["built_in"] == str(built_in)

    fallback = tmp_path / "engines" / "artifacts" / manifest["digest"][:16]
    folder, why = engine_artifact.load_dir({}, fallback)
    assert folder == fallback and "does not name the folder it was built in" in why
    blocked = tmp_path / "engine-builds" / "file"
    blocked.write_text("not a folder")
    folder, why = engine_artifact.load_dir({"engines_dir": str(blocked / "sub")}, fallback)
    assert folder == fallback and "cannot create the folder it was built in" in why
    # A manifest decides where folders are made on the loading machine only under its build root.
    outside = tmp_path / "elsewhere" / "builds"
    for made_in in (str(outside), str(tmp_path / "engine-builds" / ".." / "elsewhere"), "relative/builds",
                    str(tmp_path / "engine-builds")):
        folder, why = engine_artifact.load_dir({"engines_dir": made_in}, fallback)
        assert folder == fallback and "is not under the build root" in why, made_in
    assert not outside.exists() and not (tmp_path / "elsewhere").exists()
    link = tmp_path / "engine-builds" / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    folder, why = engine_artifact.load_dir({"engines_dir": str(link / "builds")}, fallback)
    assert folder == fallback and "leads outside the build root" in why and not (tmp_path / "elsewhere").exists()
