"""What the server did is said on the console and in the report (issue 34): a server that refused length
control (ignore_eos / min_tokens), and one that counts prompts differently from the workload (usage.prompt_tokens)."""

import io

import pytest
from rich.console import Console

pytest.importorskip("aiohttp")

from bench.report.build import build_report  # noqa: E402
from bench.results.store import ResultStore  # noqa: E402
from bench.runner.matrix import run_matrix  # noqa: E402
from bench.serving.paced_server import TestServer  # noqa: E402
from bench.spec.matrix import parse_matrix  # noqa: E402


def matrix(tiny_sharegpt, base_url):
    return parse_matrix({
        "backends": ["openai"], "model": "qwen-tiny", "precisions": ["server"], "max_batch_sizes": [2],
        "workloads": ["w"], "device": "cpu", "trials": 2, "warmup": 1, "timeout_s": 30, "build_timeout_s": 30,
        "workload": {"w": {"num_requests": 4, "path": str(tiny_sharegpt), "max_output_len": 8}},
        "options": {"base_url": base_url},
    })


def test_refused_length_control_and_prompt_counts_are_said(tiny_sharegpt, tmp_path):
    store = tmp_path / "s.jsonl"
    out = io.StringIO()
    # transformers serve's answers: HTTP 422 to ignore_eos/min_tokens, HTTP 400 to token-id prompts
    with TestServer(reject_fields=("ignore_eos", "min_tokens"), text_prompts_only=True) as srv:
        summary = run_matrix(matrix(tiny_sharegpt, srv.base_url), store, console=Console(file=out, width=300))
    assert summary.statuses == {"ok": 2}
    console = out.getvalue()
    refused = f"server {srv.base_url} refused length control (it rejected ignore_eos and min_tokens)"
    assert console.count(refused) == 1  # said once, not once per pass
    assert f"server {srv.base_url} counted the prompts as" in console and "input-token figures use the workload's" in console
    rec = next(iter(ResultStore(store).records()))
    assert rec["extra"]["input_tokens_source"] == "workload"
    # the paced server counts a text prompt's words: not the workload's token count
    assert rec["metrics"]["server_input_tokens"] != rec["metrics"]["total_input_tokens"]
    md = build_report([store], tmp_path / "d", {"backend": "openai"})["markdown"].read_text()
    assert md.count(f"Note: {refused}") == 1 and "Note: server" in md and "counted the prompts as" in md


def test_a_server_that_takes_token_ids_and_lengths_adds_no_note(tiny_sharegpt, tmp_path):
    store = tmp_path / "s.jsonl"
    with TestServer() as srv:
        run_matrix(matrix(tiny_sharegpt, srv.base_url), store, show_progress=False)
    rec = next(iter(ResultStore(store).records()))
    assert rec["extra"]["notes"] == []
    assert rec["metrics"]["server_input_tokens"] == rec["metrics"]["total_input_tokens"]
