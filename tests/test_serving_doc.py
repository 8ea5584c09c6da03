"""docs/guide/serving.md's example runs as written: its TOML parses, names a workload it defines,
gets a serving baseline (the lowest rate, not hf/bf16/bs1), runs against the test server and builds a report."""

import re
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from bench.errors import BenchInputError  # noqa: E402
from bench.report.build import build_report  # noqa: E402
from bench.runner.matrix import run_matrix  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402
from bench.spec.baseline import default_baseline  # noqa: E402  (tomllib, or tomli before 3.11)
from bench.spec.matrix import parse_matrix, tomllib  # noqa: E402  (tomllib, or tomli before 3.11)
from bench.spec.narrow import narrow  # noqa: E402  (tomllib, or tomli before 3.11)

DOC = Path(__file__).parents[1] / "docs" / "guide" / "serving.md"


def doc_matrix() -> dict:
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/guide/serving.md has no ```toml block"
    return tomllib.loads(blocks[0])


def test_the_docs_example_parses_and_gets_a_serving_baseline():
    data = doc_matrix()
    assert set(data["workloads"]) <= set(data.get("workload", {})), "the example names a workload it does not define"
    m = parse_matrix(data)
    assert len(m.cells) == 5
    assert m.baseline == {"backend": "openai", "precision": "bf16", "max_batch_size": 64, "request_rate": 2}


def test_default_baseline_keeps_hf_and_picks_the_lightest_cell_otherwise():
    hf = parse_matrix({"backends": ["hf"], "model": "qwen-tiny", "precisions": ["fp32", "bf16"],
                       "max_batch_sizes": [4, 1], "workloads": ["w"], "device": "cpu",
                       "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}})
    assert hf.baseline == {"backend": "hf", "precision": "bf16", "max_batch_size": 1}
    fp32 = parse_matrix({"backends": ["hf"], "model": "qwen-tiny", "precisions": ["fp32"],
                         "max_batch_sizes": [4, 2], "workloads": ["w"], "device": "cpu",
                         "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}}})
    assert fp32.baseline == {"backend": "hf", "precision": "fp32", "max_batch_size": 2}
    cells = parse_matrix({**doc_matrix(), "options": {"openai": {**doc_matrix()["options"]["openai"],
                                                                   "max_concurrency": [8, 2], "request_rate": [4, "inf"]}}}).cells
    assert default_baseline(cells) == {"backend": "openai", "precision": "bf16", "max_batch_size": 64,
                                       "request_rate": 4, "max_concurrency": 2}


def test_the_docs_example_runs_and_reports(tiny_sharegpt, tmp_path):
    data = doc_matrix()
    data["workload"]["sharegpt"] = {**data["workload"]["sharegpt"], "path": str(tiny_sharegpt)}
    data.update(trials=1, timeout_s=60, build_timeout_s=60)
    with TestServer(ttft_s=0.002, itl_s=0.001) as srv:
        data["options"]["openai"] = {**data["options"]["openai"], "base_url": srv.base_url, "request_rate": ["inf", 50, 100]}
        m = narrow(parse_matrix(data), requests=4)
        store = tmp_path / "serving.jsonl"
        summary = run_matrix(m, store, show_progress=False, workload_cache=tmp_path / "cache")
    assert summary.statuses == {"ok": 3}
    paths = build_report([store], tmp_path / "dash", None)  # the stored matrix's baseline: the lowest rate
    md = paths["markdown"].read_text()
    assert "baseline: openai/bf16/bs64" in md and "1.00x" in md
    # a baseline that names no cell lists each existing cell once, as a --baseline
    with pytest.raises(BenchInputError) as err:
        build_report([store], tmp_path / "dash2", {"backend": "hf"})
    listed = [line.strip() for line in str(err.value).splitlines() if line.strip().startswith("--baseline")]
    assert len(listed) == 3 and len(set(listed)) == 3
    assert "--baseline backend=openai,precision=bf16,max_batch_size=64,request_rate=50  (ok)" in listed
