"""Device strings: one parser of CUDA ordinals, and the CUDA -> NVML mapping through the GPU's UUID."""

import inspect
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.machine import environment
from bench.machine.devices import cuda_ordinal

# Two GPUs as NVML numbers them (PCI order); CUDA_VISIBLE_DEVICES below shows CUDA only the second.
UUIDS = {0: "GPU-aaaaaaaa-0000-0000-0000-000000000000", 1: "GPU-bbbbbbbb-1111-1111-1111-111111111111"}


def nvml_stub():
    by_uuid = {v.encode(): k for k, v in UUIDS.items()}
    return SimpleNamespace(
        NVML_ERROR_LIBRARY_NOT_FOUND=12, NVML_ERROR_DRIVER_NOT_LOADED=9,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: [0, 1][i], nvmlDeviceGetHandleByUUID=lambda u: by_uuid[u],
        nvmlDeviceGetIndex=lambda h: h, nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=150754820096),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0), nvmlDeviceGetUUID=lambda h: UUIDS[h].encode(),
    )


def test_cuda_ordinal_is_the_one_parser():
    assert cuda_ordinal("cpu") is None and cuda_ordinal("cuda") == 0 and cuda_ordinal("cuda:3") == 3
    # Every other module asks it (or environment.nvml_device): no second parser of "cuda:N" in the package.
    root = Path(__file__).resolve().parents[1] / "bench"
    own = inspect.getsource(cuda_ordinal)
    parsers = [f"{p.relative_to(root)}:{i + 1}" for p in root.rglob("*.py") for i, line in enumerate(p.read_text().splitlines())
               if re.search(r"""(device|dev)\S*\.(split|partition|rsplit)\(["']:["']""", line) and line not in own]
    assert parsers == [], f"device strings parsed outside bench.machine.devices.cuda_ordinal: {parsers}"


def test_rank_device_under_torchrun(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert environment.rank_device("cuda") == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert environment.rank_device("cuda") == "cuda:1" and environment.rank_device("cpu") == "cpu"


def test_the_record_names_the_gpu_cuda_ran_on_not_nvml_index_0(monkeypatch):
    """With CUDA_VISIBLE_DEVICES=1, CUDA's device 0 is NVML's GPU 1: the fingerprint says GPU 1, by UUID."""
    import torch

    monkeypatch.setitem(sys.modules, "pynvml", nvml_stub())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # torch prints the UUID without NVML's "GPU-" prefix
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(uuid=UUIDS[1].removeprefix("GPU-")) if i == 0 else 1 / 0)
    env = environment.fingerprint("cuda")
    assert env["gpu_uuid"] == UUIDS[1] and env["gpu_index"] == 1 and env["cuda_visible_devices"] == "1"
    assert environment.nvml_device("cuda:0") == UUIDS[1]


def test_without_torch_the_visible_list_maps_the_ordinal(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", nvml_stub())
    monkeypatch.setitem(sys.modules, "torch", None)  # not loaded (the parent): no CUDA query
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{UUIDS[1]},0")
    assert environment.nvml_device("cuda:0") == UUIDS[1] and environment.nvml_device("cuda:1") == 0
    assert environment.gpu_info(environment.nvml_device("cuda:0"))["gpu_index"] == 1
    assert environment.nvml_device("cuda:2") is None
    assert "not among CUDA_VISIBLE_DEVICES" in environment.gpu_info(None)["nvml_error"]


@pytest.mark.parametrize("device", ["cuda:1"])
def test_a_device_outside_the_visible_list_is_named_in_the_fingerprint(monkeypatch, device):
    monkeypatch.setitem(sys.modules, "pynvml", nvml_stub())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = environment.fingerprint(device)
    assert "cuda:1 is not among CUDA_VISIBLE_DEVICES='0'" in env["nvml_error"]


def test_a_tensor_parallel_cell_samples_every_gpu(monkeypatch):
    """Power, energy and memory of a tp=2 cell are both GPUs' sums, not rank 0's alone."""
    from bench.machine.telemetry import Sampler

    nv = nvml_stub()
    nv.nvmlDeviceGetPowerUsage = lambda h: [100_000, 150_000][h]  # mW
    nv.nvmlDeviceGetTotalEnergyConsumption = lambda h: 1_000_000 * (h + 1)  # mJ, constant: 0 J over the window
    nv.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(used=[2e9, 3e9][h], total=150e9)
    nv.nvmlDeviceGetClockInfo = lambda h, kind: [1500, 1700][h]
    nv.NVML_CLOCK_SM = 1
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with Sampler(["cuda:0", "cuda:1"], interval_s=0.01) as s:
        pass
    assert s.timeline["power_w"][0] == 250.0 and s.summary["peak_nvml_memory_gb"] == 5.0
    assert s.summary["sm_clock_mhz_median"] == 1600.0 and s.summary["energy_j"] == 0.0
    with Sampler(["cuda:0", "cuda:7"]) as s:  # a GPU NVML cannot find: no figures rather than a partial sum
        pass
    assert s.summary["energy_j"] is None
