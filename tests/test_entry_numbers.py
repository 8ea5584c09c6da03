"""Every number checked where it enters (issue 47.7), beyond the one-line catalogue of tests/test_hostile_inputs.py:
capacity searches capped at what the workload holds, kernel tables whose numbers are not numbers, the one helper's
messages."""

from __future__ import annotations

import json

import pytest

from bench.checks import check_number, range_text
from bench.cli import main
from bench.errors import BenchInputError
from bench.execution.kernels import AttributedKernel, KernelTable, build_kernel_table

MATRIX = """
name = "cap"
backends = ["fake"]
model = "qwen-tiny"
precisions = ["bf16"]
max_batch_sizes = [1]
workloads = ["w"]
device = "cpu"
trials = 1
baseline = { backend = "fake" }

[workload.w]
source = "synthetic"
input_len = 8
output_len = 4
num_requests = 4
"""


def test_a_count_axis_is_capped_at_the_requests_its_workload_holds(tmp_path, capsys):
    """max_batch_size 1e15 for a 4-request workload was a capacity answer: a batch above 4 runs 4 rows all the same."""
    (tmp_path / "m.toml").write_text(MATRIX)
    code = main(["capacity", "--matrix", "m.toml", "--axis", "max_batch_size", "--upper", "64", "--slo",
                 "ttft_p99_ms=100000", "--store", "c.jsonl", "--report-dir", "rep"])
    out = capsys.readouterr()
    assert code == 0
    assert "--upper 64 capped at 4: workload 'w' holds 4 requests" in out.err
    assert "**capacity: max_batch_size = 4 batch size**" in out.out
    probes = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert max(p["cell"]["max_batch_size"] for p in probes) == 4
    assert {p["extra"]["capacity"]["search"]["upper"] for p in probes} == {4}


@pytest.mark.parametrize("change, why", [
    (lambda d: d.update(total_us=float("nan")), "total_us is nan, not a finite number"),
    (lambda d: d.update(total_kernels="12"), "total_kernels is '12', not int"),
    (lambda d: d["rows"][0].update(kernels_per_instance=-1.0), "rows[0]: kernels_per_instance is -1.0"),
    (lambda d: d["ranges"][0].update(instances=True), "ranges[0]: instances is True"),
    (lambda d: d["categories"][0].pop("share"), "categories[0]: lacks 'share'"),
    (lambda d: d.update(rows={}), "rows is dict, not a list"),
    (lambda d: d["rows"].append(["a", "list"]), "rows[1]: list, not an object"),
    (lambda d: d.update(extra_field=1), "unknown field(s) ['extra_field']"),
])
def test_a_kernel_table_whose_numbers_are_not_numbers_is_refused_naming_the_file(tmp_path, change, why):
    table = build_kernel_table([AttributedKernel("triton_red_fused_rmsnorm_0", 2.0, (("LlamaRMSNorm", 1),))],
                               {"LlamaRMSNorm": {1}}, source="torch.profiler", unit="gpu_kernel")
    data = json.loads(json.dumps(table.to_dict()))
    change(data)
    path = tmp_path / "kernel_table.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BenchInputError) as info:
        KernelTable.load(path)
    assert str(info.value).startswith(f"cannot read kernel table '{path}': ") and why in str(info.value)


@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"[1, 2]", b'{"version": 2', b""])
def test_a_kernel_table_that_is_not_json_of_one_is_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "kernel_table.json"
    path.write_bytes(content)
    with pytest.raises(BenchInputError, match=f"cannot read kernel table '{path}'"):
        KernelTable.load(path)


def test_the_one_helper_writes_whole_bounds_in_full():
    assert range_text(1, 1_000_000, integer=True) == "a positive integer <= 1000000"
    assert range_text(0, 0.5) == "a number between 0 and 0.5"
    with pytest.raises(BenchInputError, match="--x must be a finite number, got nan: why"):
        check_number(float("nan"), "--x", above=0, hint="why")
