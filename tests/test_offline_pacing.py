"""Offline backends refuse a workload's arrival pacing (which they would ignore); the openai backend takes it."""

import pytest

from bench.errors import BenchInputError
from bench.spec.matrix import parse_matrix

CELL = {"hf": ("fp32", "cpu"), "fake": ("bf16", "cpu"), "trtllm": ("fp16", "cuda"), "openai": ("server", "cpu")}


def matrix(backend, **workload):
    precision, device = CELL[backend]
    return parse_matrix({
        "backends": [backend], "model": "qwen-tiny", "precisions": [precision], "max_batch_sizes": [1],
        "workloads": ["w"], "device": device,
        "workload": {"w": {"source": "synthetic", "num_requests": 2, "input_len": 8, "output_len": 4, **workload}},
    })


@pytest.mark.parametrize("backend", ["hf", "fake", "trtllm"])
@pytest.mark.parametrize("setting", [{"request_rate": 4.0}, {"burstiness": 0.5}, {"max_concurrency": 2},
                                     {"request_rate": 4.0, "max_concurrency": 2}])
def test_offline_backends_refuse_pacing(backend, setting):
    with pytest.raises(BenchInputError, match=f"backend '{backend}' replays requests offline") as err:
        matrix(backend, **setting)
    for key in setting:
        assert f"{key} = " in str(err.value)
    assert "remove it from the workload" in str(err.value) and "'openai' serving backend" in str(err.value)


@pytest.mark.parametrize("backend", ["hf", "fake", "trtllm"])
def test_all_at_once_is_what_offline_backends_do(backend):
    for same in ({}, {"request_rate": "inf"}, {"burstiness": 1.0}):
        assert len(matrix(backend, **same).cells) == 1


def test_the_serving_backend_takes_pacing():
    cell, = matrix("openai", request_rate=4.0, burstiness=0.5, max_concurrency=2).cells
    assert cell.workload.request_rate == 4.0 and cell.workload.max_concurrency == 2
