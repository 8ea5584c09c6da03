"""Environment fingerprint stored with every result: what makes two results comparable."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from bench.machine.devices import cuda_ordinal

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Differences in these keys make results incomparable (compare/report warn about them).
COMPARABILITY_KEYS = ("gpu_name", "gpu_count", "driver", "cuda", "torch", "transformers", "tensorrt_llm", "cpu")


@lru_cache(maxsize=1)
def project_commit() -> dict:
    """Return {'commit': sha or None, 'dirty': bool or None} of the harness's own checkout.

    Where the tree was copied without .git (a remote GPU box), BENCH_COMMIT / BENCH_DIRTY
    given by whoever copied it are used instead.
    """
    if os.environ.get("BENCH_COMMIT"):
        return {"commit": os.environ["BENCH_COMMIT"], "dirty": os.environ.get("BENCH_DIRTY", "") == "1"}
    return git_commit(PROJECT_ROOT)


def git_commit(root: Path) -> dict:
    """Return {'commit', 'dirty'} of the git repository whose top level is `root`, or both None.

    A tree unpacked inside another checkout (or a package installed into a virtualenv that
    lives in one) is not that checkout: its HEAD would be recorded as ours, clean. So the
    repository's top level must be `root` itself.
    """
    unknown = {"commit": None, "dirty": None}

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(root).resolve():
            return unknown
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return unknown
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": sha.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}
    except (OSError, subprocess.SubprocessError):
        return unknown


def installed_version(*dists: str) -> str | None:
    """Return the installed version of the first of `dists` that is installed (package metadata, no import)."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


# Device files an NVIDIA driver makes (Linux; /dev/dxg: WSL's GPU paravirtualization).
NVIDIA_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/proc/driver/nvidia/version")


def cuda_missing() -> str | None:
    """Return why this machine cannot run a CUDA cell, or None when it may: a torch built for the CPU only,
    CUDA_VISIBLE_DEVICES hiding every GPU, or no NVIDIA GPU or driver (NVML sees none and no driver device file
    exists). Reads package metadata, the environment and NVML: never imports torch, never makes a CUDA context."""
    torch = installed_version("torch")
    if torch is None:
        return "torch is not installed"
    if "+cpu" in torch or sys.platform == "darwin":
        return f"this Python's torch {torch} is built without CUDA (a CPU-only build)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if any(os.path.exists(f) for f in NVIDIA_DEVICE_FILES):
        return None
    info = gpu_info(None)
    if info.get("gpu_count"):
        return None
    return "no NVIDIA GPU or driver is visible here (NVML sees none, no /dev/nvidia* device)"


def major_minor(version: str) -> tuple[int, int]:
    """Return (major, minor) of a version string such as '2.13.0+cpu', '1.2.0rc5' or '5'."""
    parts = version.split(".")
    minor = re.match(r"\d*", parts[1]).group() if len(parts) > 1 else ""
    return int(parts[0]), int(minor or 0)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# NVML's answers that mean "no NVIDIA driver here" (a CPU machine), not a failure.
NO_DRIVER_ERRORS = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")


def gpu_info(device: int | str | None = 0) -> dict:
    """Return GPU name, count, driver, memory and compute capability through NVML (no CUDA context).

    `device` is an NVML index or an NVML UUID ("GPU-..."; see nvml_device). Without NVML or a
    driver (a CPU machine), gpu_count is 0. When NVML fails on a machine that has it (a bad
    device index, a driver/library version mismatch), `nvml_error` holds its message, with
    whatever was read before (the GPU count, the driver).
    """
    none = {"gpu_name": None, "gpu_count": 0, "driver": None}
    try:
        import pynvml
    except ImportError:  # nvidia-ml-py not installed: nothing can be read, as on a CPU machine
        return none
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        no_driver = {getattr(pynvml, name, None) for name in NO_DRIVER_ERRORS} - {None}
        if getattr(exc, "value", None) in no_driver:
            return none
        return {**none, "nvml_error": _nvml_error(exc)}
    info = dict(none)
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        info["driver"] = driver.decode() if isinstance(driver, bytes) else driver
        info["gpu_count"] = count = pynvml.nvmlDeviceGetCount()
        if device is None:
            return {**info, "nvml_error": "no such GPU: the device is not among CUDA_VISIBLE_DEVICES"}
        if isinstance(device, str):
            h = pynvml.nvmlDeviceGetHandleByUUID(device.encode())
        elif device >= count:
            return {**info, "nvml_error": f"no GPU index {device}: NVML sees {count} GPU(s)"}
        else:
            h = pynvml.nvmlDeviceGetHandleByIndex(device)
        name = pynvml.nvmlDeviceGetName(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        return {
            **info,
            "gpu_name": name.decode() if isinstance(name, bytes) else name,
            "gpu_memory_bytes": int(mem),
            "compute_capability": f"{major}.{minor}",
            # Which physical GPU: two runs of one cell on "an H200" can differ by a few %
            # (docs/measurements/2026-12-01-h200-study.md), and only this tells whether they ran on the same board.
            "gpu_uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
            "gpu_index": _nvml_index_of(pynvml, h, device),
        }
    except Exception as exc:
        return {**info, "nvml_error": _nvml_error(exc)}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_index_of(pynvml, handle, device: int | str) -> int | None:
    """Return NVML's index of a GPU handle (what nvidia-smi calls it), or None if NVML cannot say."""
    if isinstance(device, int):
        return device
    try:
        return int(pynvml.nvmlDeviceGetIndex(handle))
    except Exception:
        return None


def nvml_index(device: str) -> int | str | None:
    """Return NVML's name for a torch device string from CUDA_VISIBLE_DEVICES alone (no torch): an index or a UUID.

    None for a CPU, or an ordinal past the visible list. An index in CUDA_VISIBLE_DEVICES is
    CUDA's enumeration, which equals NVML's (PCI order) on a node of one GPU model; a UUID is
    exact. Where torch runs, nvml_device asks CUDA for the UUID instead.
    """
    ordinal = cuda_ordinal(device)
    if ordinal is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return ordinal
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if ordinal >= len(entries):
        return None
    entry = entries[ordinal]
    return int(entry) if entry.isdigit() else entry  # "GPU-..." UUIDs are looked up by UUID


def cuda_uuid(device: str) -> str | None:
    """Return the NVML UUID of a torch device as CUDA itself numbers it, or None (no torch loaded, no GPU).

    NVML indices are not CUDA ordinals once CUDA_VISIBLE_DEVICES is set (or CUDA orders GPUs
    fastest first): the UUID is the one name both agree on. Never imports torch.
    """
    torch = sys.modules.get("torch")
    ordinal = cuda_ordinal(device)
    if torch is None or ordinal is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        uuid = str(torch.cuda.get_device_properties(ordinal).uuid)
    except Exception:  # an old torch without props.uuid, or a broken context: fall back to nvml_index
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def nvml_device(device: str) -> int | str | None:
    """Return the NVML index or UUID of a torch device string (None for a CPU): the one mapping CUDA -> NVML."""
    return cuda_uuid(device) or nvml_index(device)


def rank_device(device: str) -> str:
    """Return the device this process uses for a cell on `device`: under torchrun, a CUDA cell's rank uses cuda:LOCAL_RANK."""
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1 and cuda_ordinal(device) is not None:
        return f"cuda:{int(local_rank)}"
    return device


def cudnn_label(version: int | None) -> str | None:
    """Return cuDNN's version number as 'major.minor.patch' (91900 -> '9.19.0', 8907 -> '8.9.7'); None for none."""
    if not version:
        return None
    major, rest = divmod(version, 10000) if version >= 90000 else divmod(version, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _cudnn_version(torch) -> str | None:
    """Return the cuDNN this process's torch loads, or None (a CPU build): PyTorch's SDPA picks cuDNN attention on
    Hopper, whose speed and per-length graph builds are cuDNN's own (docs/guide/hf-backend.md, "Warm-up covers the
    shapes"), so a record says which one ran. Loads the library, makes no CUDA context."""
    try:
        return cudnn_label(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None
    except (RuntimeError, OSError):  # a library that does not load: no version to state
        return None


def _nvml_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def fingerprint(device: str = "cpu") -> dict:
    """Return the environment of this process (call it in the worker, where torch is loaded)."""
    env = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_name(),
        "bench": installed_version("bench"),
        "torch": None,
        "cuda": None,
        "cudnn": None,
        "transformers": installed_version("transformers"),
        "tensorrt_llm": installed_version("tensorrt_llm", "tensorrt-llm"),
        "torchao": installed_version("torchao"),
        "gemlite": installed_version("gemlite"),
        "triton": installed_version("triton"),  # Inductor's kernels are Triton's: an engine artifact names it
        **project_commit(),
    }
    if "torch" in sys.modules or device.startswith("cuda"):
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["cudnn"] = _cudnn_version(torch)
    else:
        env["torch"] = installed_version("torch")
    if device.startswith("cuda"):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        target = nvml_device(device)
        if target is None:
            env.update({"gpu_name": None, "gpu_count": None, "driver": None,
                        "nvml_error": f"{device} is not among CUDA_VISIBLE_DEVICES={visible!r}"})
        else:
            env.update(gpu_info(target))
        env["cuda_visible_devices"] = visible
    else:
        env.update({"gpu_name": None, "gpu_count": 0, "driver": None})
    return env
