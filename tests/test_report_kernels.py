"""Profile records -> the dashboard's kernel panel (bench.report.kernel_panel, bench report)."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from bench.execution.kernels import AttributedKernel, KernelTable, build_kernel_table
from bench.report.build import build_report
from bench.report.kernel_panel import kernel_frame
from bench.results.records import Profile, parse
from tests.support.dashboard import dashboard_figures
from tests.support.synthetic import synthetic_records, write_store

ROOT = Path(__file__).resolve().parent.parent
# Real kernel tables, torch.profiler on an H200 (docs/measurements/2026-11-30-h200-kernel-timelines.md; tests/data/README.md).
H200 = ROOT / "tests" / "data" / "h200-profile"


def _record(cell_id, table_path, precision="bf16", options=None, window=None):
    """Return a Profile record as a schema-1 store held it (read through the typed layer)."""
    return parse({"schema_version": 1, "cell_id": cell_id, "trial": 0, "kind": "profile", "status": "ok", "metrics": None,
                  "cell": {"backend": "hf", "precision": precision, "max_batch_size": 1, "options": options or {}},
                  "settings": {"matrix": "m", "tool": "torch"},
                  "extra": {"kernel_table": str(table_path), "profile": {"window": window} if window else {}}},
                 legacy_run=("legacy", 0.0))


def _rows(frame, cell_id):
    return frame[frame.cell_id == cell_id].set_index("range")


def test_h200_tables_eager_ranges_and_compiled_categories():
    eager = KernelTable.load(H200 / "forward16_sdpa.kernel_table.json")
    compiled = KernelTable.load(H200 / "decode_step_compiled.kernel_table.json")
    records = [
        # relative to the store's folder, as a store copied with its profiles/ would hold it
        _record("eager", "forward16_sdpa.kernel_table.json", options={"compile": "off"}),
        _record("compiled", H200 / "decode_step_compiled.kernel_table.json", options={"compile": "default"},
                window={"batches": 1, "decode_steps": 0}),
        parse({"schema_version": 2, "kind": "profile", "status": "error", "cell_id": "failed", "extra": {}}),
    ]
    kf = kernel_frame(records, base_dirs=[H200])
    assert kf.warnings == []
    e = _rows(kf.frame, "eager")
    norm, attn = eager.range("Qwen2RMSNorm"), eager.range("Qwen2Attention")
    assert e.loc["RMSNorm", "kernels_per_instance"] == norm.kernels_per_instance
    assert e.loc["RMSNorm", "time_per_instance_us"] == norm.gpu_us_per_instance_median
    assert e.loc["RMSNorm", "instances"] == norm.instances
    assert e.loc["attention", "kernels_per_instance"] == attn.kernels_per_instance
    assert e.loc["attention", "time_per_instance_us"] == attn.gpu_us_per_instance_median
    assert set(e.loc[["RMSNorm", "attention"], "per"]) == {"call"} and e.loc["RMSNorm", "unit"] == "gpu_kernel"
    # The range markers torch.profiler reports as device "kernels" (named like the range labels,
    # in (no range)) are not counted as kernels of their name's category.
    markers = [r for r in eager.rows if r.range == "(no range)" and r.kernel.startswith("Qwen2")]
    assert markers
    cats = {c.category: c for c in eager.categories}
    attn_markers = sum(r.kernels for r in markers if r.category == "attention")
    assert e.loc["attention kernels", "kernels_per_instance"] == cats["attention"].kernels - attn_markers
    assert "norm kernels" not in e.index  # eager RMSNorm is pow/mean/rsqrt/mul: elementwise kernels
    assert e.loc["attention kernels", "per"] == "window"  # no step ranges, no window in the record
    # Compiled: the module ranges vanished, the fused Triton norm kernels show per forward pass.
    c = _rows(kf.frame, "compiled")
    assert "RMSNorm" not in c.index and "attention" not in c.index
    ccats = {x.category: x for x in compiled.categories}
    assert c.loc["norm kernels", "kernels_per_instance"] == ccats["norm"].kernels
    assert c.loc["norm kernels", "time_per_instance_us"] == pytest.approx(ccats["norm"].total_us)
    assert c.loc["attention kernels", "per"] == "forward pass"
    assert set(kf.frame.backend) == {"hf compile=off", "hf compile=default"}
    assert not isinstance(synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1,), trials=1,
                                            requests=2)[0], Profile)


def _tiny_table(tmp_path) -> Path:
    kernels = [AttributedKernel(n, 2.0, (("Qwen2RMSNorm:n0", 0),)) for n in ("aten::pow", "aten::mean")]
    kernels += [AttributedKernel("aten::scaled_dot_product_attention", 5.0, (("Qwen2Attention:a", 1),))]
    instances = {"Qwen2RMSNorm:n0": {0}, "Qwen2Attention:a": {1}}
    return build_kernel_table(kernels, instances, source="t", unit="cpu_op").save(tmp_path / "kt" / "kernel_table.json")


def test_profile_records_make_the_panel_not_speedup_rows(tmp_path):
    runs = synthetic_records(backends=("hf",), precisions=("bf16",), batch_sizes=(1, 2), trials=1, requests=4,
                             telemetry=False)
    write_store(tmp_path / "plain.jsonl", runs)
    present = _record("p1", _tiny_table(tmp_path))
    gone = _record("p2", tmp_path / "gone" / "kernel_table.json", precision="fp16")
    write_store(tmp_path / "mixed.jsonl", runs + [present, gone])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = build_report([tmp_path / "plain.jsonl"], tmp_path / "plain")
        mixed = build_report([tmp_path / "mixed.jsonl"], tmp_path / "mixed")
    assert plain["csv"].read_text() == mixed["csv"].read_text()  # profile records are no speedup rows
    assert "kernels" not in plain and "no kernel profiles" in plain["dashboard"].read_text()
    (warn,) = [w for w in mixed["warnings"] if "kernel table" in w]
    assert "gone/kernel_table.json" in warn and "missing" in warn and "p2" in warn
    assert any("p2" in str(w.message) for w in caught)
    panel = pd.read_csv(mixed["kernels"]).set_index("range")
    assert set(panel.cell_id) == {"p1"}
    assert panel.loc["RMSNorm", "kernels_per_instance"] == 2 and panel.loc["attention", "time_per_instance_us"] == 5
    page = mixed["dashboard"].read_text()
    assert "no kernel profiles" not in page and "is missing" in page


@pytest.mark.parametrize("step_ms", ["fast", float("nan"), -3.0, 0, True])
def test_a_profile_records_step_time_that_is_no_time_leaves_it_out_with_a_warning(step_ms):
    """extra.profile.step_ms is untrusted: the kernel panel leaves its record out and says why, the step-bound lines
    skip it, the other records stay."""
    from bench.report.bounds import step_bound_markdown

    def rec(cell_id, ms):
        r = _record(cell_id, "forward16_sdpa.kernel_table.json")
        r.extra["profile"] = {"step_ms": ms, "step_bound": {"time_us": 100.0, "bytes": 1e8}}
        return r

    kf = kernel_frame([rec("bad", step_ms), rec("good", 0.5)], base_dirs=[H200])
    assert set(kf.frame.cell_id) == {"good"} and [s["step_ms"] for s in kf.summary] == [0.5]
    (warning,) = kf.warnings
    assert "profile record bad" in warning and f"step_ms {step_ms!r}" in warning and "re-run `bench profile`" in warning
    lines = step_bound_markdown([rec("bad", step_ms), rec("good", 0.5)])
    assert "500.0 (the unprofiled decode step)" in lines and lines.count("(the unprofiled decode step)") == 1


def test_missing_table_only_profiles_still_builds(tmp_path):
    write_store(tmp_path / "p.jsonl", [_record("p2", tmp_path / "nowhere.json")])
    proc = _bench("report", str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Said once on the console: in the printed report.md's section of the files records name, left out.
    assert "## Files the records name, left out\n\n- kernel table" in proc.stdout and "nowhere.json" in proc.stdout
    page = (tmp_path / "out" / "dashboard.html").read_text()
    assert "no kernel profiles in this store" in page and "nowhere.json" in page


def _bench(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd, env=env)


def _kernel_figure(page: str) -> dict:
    (fig,) = [f for f in dashboard_figures(page) if f["layout"]["title"]["text"].startswith("Kernels per instance")]
    return fig


@pytest.mark.slow
def test_bench_profile_then_report_draws_measured_numbers(tiny_hf_profile, tmp_path, capsys):
    """`bench report` of a real `bench profile` of tiny_hf_matrix's fp32 cell (2 decode steps): the profile is the
    tiny_hf_profile fixture's (tests/test_profiling.py checks its record), the report this test's own, in its folder."""
    from bench.cli import main

    assert tiny_hf_profile.code == 0, tiny_hf_profile.stderr[-3000:]
    (rec,) = [json.loads(line) for line in tiny_hf_profile.store.read_text().splitlines()]
    table = KernelTable.load(rec["extra"]["kernel_table"])
    code = main(["report", str(tiny_hf_profile.store), "--out", "dash"])  # in this process
    assert code == 0, capsys.readouterr().err[-3000:]
    fig = _kernel_figure((tmp_path / "dash" / "dashboard.html").read_text())
    counts, times = (next(t for t in fig["data"] if t["xaxis"] == ax) for ax in ("x", "x2"))
    assert counts["name"] == "hf attn_implementation=sdpa cache=dynamic compile=off fp32"
    for label, group in (("RMSNorm", "Qwen2RMSNorm"), ("attention", "Qwen2Attention")):
        i = counts["x"].index(label)
        assert counts["y"][i] == table.range(group).kernels_per_instance > 0
        assert times["y"][i] == pytest.approx(table.range(group).gpu_us_per_instance_median)
    # prefill + 2 decode steps: category rows are per decode step, from the kernels inside the decode-step ranges
    steps = table.range("decode_step").instances
    i = counts["x"].index("gemm kernels")
    gemm = sum(r.kernels for r in table.rows if r.range == "decode_step" and r.category == "gemm")
    assert steps == 2 and counts["y"][i] == pytest.approx(gemm / steps)
    assert "Kernels of one decode step" in (tmp_path / "dash" / "report.md").read_text()
