"""An NVML failure on a machine that has NVML is reported as such, never read as "no GPU"."""

import sys
from types import SimpleNamespace

import pytest

from bench.errors import BenchInputError
from bench.machine.environment import fingerprint, gpu_info
from bench.machine.memory_cap import check_cap
from bench.spec.matrix import parse_matrix


class NVMLError(Exception):
    """As pynvml's: an error code in `value`, its text in str()."""

    TEXT = {9: "Driver Not Loaded", 12: "NVML Shared Library Not Found", 2: "Invalid Argument",
            18: "RM has detected an NVML/RM version mismatch."}

    def __init__(self, value):
        self.value = value

    def __str__(self):
        return self.TEXT.get(self.value, f"Unknown Error {self.value}")


def stub(init_error=None, count=1, handle_error=None):
    def init():
        if init_error is not None:
            raise NVMLError(init_error)

    def handle(i):
        if handle_error is not None:
            raise NVMLError(handle_error)
        return i

    return SimpleNamespace(
        NVML_ERROR_LIBRARY_NOT_FOUND=12, NVML_ERROR_DRIVER_NOT_LOADED=9,
        nvmlInit=init, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=handle, nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=150754820096),
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0), nvmlDeviceGetUUID=lambda h: b"GPU-1",
    )


@pytest.fixture
def nvml(monkeypatch):
    return lambda module: monkeypatch.setitem(sys.modules, "pynvml", module)


def test_no_nvml_or_no_driver_is_a_cpu_machine(nvml):
    for module in (None, stub(init_error=12), stub(init_error=9)):  # None: import fails
        nvml(module)
        assert gpu_info(0) == {"gpu_name": None, "gpu_count": 0, "driver": None}


def test_the_real_nvml_on_this_machine():
    pytest.importorskip("pynvml")
    info = gpu_info(0)
    if info["gpu_count"] == 0:  # a CPU machine: no library or no driver, which is not an error
        assert "nvml_error" not in info


def test_an_nvml_failure_is_kept_in_the_fingerprint(nvml):
    nvml(stub(init_error=18))
    info = gpu_info(0)
    assert info["gpu_count"] == 0 and "version mismatch" in info["nvml_error"]
    nvml(stub(handle_error=999))
    info = gpu_info(0)
    assert info["gpu_count"] == 1 and info["driver"] == "580.159.04" and "Unknown Error 999" in info["nvml_error"]
    nvml(stub(count=1))
    info = gpu_info(3)
    assert info["gpu_count"] == 1 and info["nvml_error"] == "no GPU index 3: NVML sees 1 GPU(s)"
    nvml(stub(init_error=18))
    assert "version mismatch" in fingerprint("cuda")["nvml_error"]
    nvml(stub())
    assert "nvml_error" not in fingerprint("cuda") and gpu_info(0)["gpu_name"] == "NVIDIA H200"


def test_the_memory_cap_says_nvml_failed(nvml):
    nvml(stub(init_error=18))
    with pytest.raises(BenchInputError, match="NVML failed: NVMLError: RM has detected an NVML/RM version mismatch"):
        check_cap(24, ["cuda"])
    nvml(stub(init_error=12))
    with pytest.raises(BenchInputError, match="NVML sees no GPU"):
        check_cap(24, ["cuda"])


def hf_matrix(device="cuda", precision="bf16"):
    return parse_matrix({
        "backends": ["hf"], "model": "qwen-tiny", "precisions": [precision], "max_batch_sizes": [1],
        "workloads": ["w"], "device": device,
        "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}},
    })


def test_the_hf_gpu_check_says_nvml_failed(nvml):
    nvml(stub(init_error=18))
    with pytest.warns(UserWarning, match="NVML failed: .*version mismatch.*precision 'bf16'"):
        hf_matrix()
    nvml(stub(count=1))
    with pytest.raises(BenchInputError, match="'cuda:3': this machine has 1 GPU"):
        hf_matrix("cuda:3")


def test_the_cudnn_version_reads_as_cudnn_writes_it():
    """cuDNN 9 numbers its versions major*10000 + minor*100 + patch, cuDNN 8 major*1000 + minor*100 + patch: a record
    says which cuDNN ran (PyTorch's SDPA picks cuDNN attention on Hopper, whose per-length builds are its own)."""
    from bench.machine.environment import cudnn_label

    assert cudnn_label(91900) == "9.19.0" and cudnn_label(90100) == "9.1.0" and cudnn_label(8907) == "8.9.7"
    assert cudnn_label(None) is None and cudnn_label(0) is None


def test_a_cpu_process_states_no_cudnn():
    import torch

    env = fingerprint("cpu")
    assert "cudnn" in env and (env["cudnn"] is None) == (not torch.backends.cudnn.is_available())
