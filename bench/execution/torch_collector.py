"""Collector 1: torch.profiler (CUPTI on a GPU) -> KernelTable and a Chrome/Perfetto trace.

Attribution follows the launch: torch links every GPU kernel to the CPU operator whose
correlation id launched it (`FunctionEvent.kernels`); that operator's chain of CPU parents
holds the record_function ranges pushed by bench.execution.nvtx, so each kernel counts in its
innermost range and in every enclosing one. Kernels the profiler could not link to an
operator (possible for launches from outside any aten op) are kept, with no range, so the
per-category table still counts every kernel of the window.

On a CPU-only machine there are no kernels: the same path counts the aten operators a forward
calls directly (no aten op above them, view-only ops left out) and their CPU time, which is what makes the attribution testable here.
"""

from __future__ import annotations

import gzip
import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from bench.execution.kernels import (
    AttributedKernel,
    KernelTable,
    RangeSpan,
    build_kernel_table,
)

TRACE_LIMIT_BYTES = 16 * 1024 * 1024  # larger Chrome traces are gzipped (Perfetto opens .json.gz)


def profile_call(fn: Callable[[], object], *, cuda: bool, labels: set[str], trace_path: str | Path | None = None,
                 meta: dict | None = None) -> tuple[KernelTable, Path | None]:
    """Return (KernelTable, trace file) of one call of `fn` under torch.profiler.

    `labels` are the range labels pushed during the call (RangeStack.labels, read after the
    call: pass a set that the call fills). With cuda the unit is GPU kernels, else CPU ops.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    written = None
    if trace_path is not None:
        written = export_trace(prof, Path(trace_path))
    table = table_from_events(prof.events(), labels, unit="gpu_kernel" if cuda else "cpu_op", meta=meta)
    return table, written


def export_trace(prof, path: Path) -> Path:
    """Return the Chrome trace file written for `prof`: `path`, or `path`.gz when over the limit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    if path.stat().st_size > TRACE_LIMIT_BYTES:
        gz = path.with_name(path.name + ".gz")
        with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
        return gz
    return path


def _is_device(fe) -> bool:
    return getattr(fe.device_type, "name", str(fe.device_type)).upper() in ("CUDA", "PRIVATEUSE1", "XPU", "MTIA")


API_ACTIVITIES = frozenset({"cuda_runtime", "cuda_driver", "xpu_runtime", "mtia_runtime", "privateuse1_runtime",
                            "privateuse1_driver"})
_API_NAME = re.compile(r"^(cuda|cu|hip)[A-Z]")  # cudaDeviceSynchronize, cuLaunchKernel, hipMemcpy


def _is_api_call(fe) -> bool:
    """Return True for a host event that is a runtime or driver API call, not an operator or a range.

    torch.profiler gives a kernel to the host event whose id is the kernel's linked correlation
    id: an operator's id is its External id, but an API call's id is its own CUPTI correlation id,
    a separate counter. An API call made outside every operator (a cudaDeviceSynchronize from
    Python) whose correlation id equals a kernel-launching operator's External id gets that
    operator's kernels too (pytorch/pytorch#124388, still so in torch 2.11): the H200's eager
    decode window (2026-12-02) counted 2 kernels twice that way, nsys and torch's own trace had
    each once. An API call never launches a kernel through this link, so its kernels are left
    out. `activity_type` names the kind where torch gives it; else the API's name says it.
    """
    kind = getattr(fe, "activity_type", None)
    if isinstance(kind, str) and kind:
        return kind in API_ACTIVITIES
    return bool(_API_NAME.match(fe.name))


# Operators that only change a tensor's metadata (no kernel on a GPU) or allocate: on CPU they
# are not counted, so that a CPU "kernel" is an operator that computes or copies data.
METADATA_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::as_strided", "aten::reshape", "aten::_reshape_alias",
    "aten::expand", "aten::t", "aten::transpose", "aten::permute", "aten::unsqueeze", "aten::squeeze",
    "aten::slice", "aten::select", "aten::detach", "aten::alias", "aten::resolve_conj", "aten::resolve_neg",
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::lift_fresh", "aten::contiguous",
    "aten::narrow", "aten::split", "aten::chunk", "aten::unbind", "aten::flatten", "aten::view_as",
    "aten::expand_as", "aten::_reshape_copy", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense",
    "detach", "aten::numpy_T", "aten::matrix_H", "aten::unflatten",
    # no-ops when they reach the profiler without a computing child (same dtype, eval mode)
    "aten::to", "aten::result_type", "aten::detach_", "aten::dropout",
})


def _computes(fe) -> bool:
    return not fe.name.startswith(("ProfilerStep", "[memory]")) and fe.name not in METADATA_OPS


def _is_cpu_unit(fe) -> bool:
    """Return True for a computing operator called directly from Python (no aten op above it).

    On a CPU the counted unit is what a module's forward calls (aten::linear, aten::mean, ...):
    the operators below them are implementation detail (an addmm's helper copy), unlike GPU
    kernels, which are what actually runs.
    """
    if not _computes(fe) or not fe.name.startswith("aten::"):
        return False
    parent = fe.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def attribute_events(events, labels: set[str], unit: str) -> tuple[list[AttributedKernel], dict[str, set], int]:
    """Return (attributed kernels, range instances, kernels not linked to any operator).

    `events` are torch.profiler FunctionEvents (prof.events()). A range instance is one
    FunctionEvent whose name is one of `labels`; its key is the event's id.
    """
    instances: dict[str, set] = defaultdict(set)
    kernels: list[AttributedKernel] = []
    device_kernels: Counter = Counter()
    linked: Counter = Counter()
    # On a GPU every record_function range is reported a second time as a device-side user
    # annotation with the same name; it is a marker, not a kernel. Kernel names never appear
    # as host-side event names, so a device event sharing a host event's name is such a marker.
    host_names = {fe.name for fe in events if not _is_device(fe)}
    for fe in events:
        if _is_device(fe):
            if fe.name not in host_names:
                device_kernels[fe.name] += 1
            continue
        is_range = fe.name in labels
        if is_range:
            instances[fe.name].add(fe.id)
        if unit == "gpu_kernel":
            # A launch with no operator between it and a range (a CUDA graph replay inside a
            # decode-step range) is linked to the range event itself: it belongs to that range.
            units = [] if _is_api_call(fe) else [(k.name, float(k.duration)) for k in fe.kernels
                                                 if k.name not in host_names]
        elif _is_cpu_unit(fe) and not is_range:  # CPU-only: operators stand in for kernels
            units = [(fe.name, float(fe.cpu_time_total))]
        else:
            units = []
        if not units:
            continue
        ranges = [(fe.name, fe.id)] if is_range else []
        parent = fe.cpu_parent
        while parent is not None:
            if parent.name in labels:
                ranges.append((parent.name, parent.id))
            parent = parent.cpu_parent
        ranges.reverse()  # outermost first
        for name, dur in units:
            linked[name] += 1
            kernels.append(AttributedKernel(name, dur, tuple(ranges)))
    unlinked = 0
    if unit == "gpu_kernel":
        # Device events with no launching operator: counted, outside every range. Their time is
        # taken from the device events of that name not already linked.
        durations: dict[str, list[float]] = defaultdict(list)
        for fe in events:
            if _is_device(fe) and fe.name not in host_names:
                durations[fe.name].append(float(fe.time_range.elapsed_us()))
        for name, n in device_kernels.items():
            extra = n - linked.get(name, 0)
            for dur in durations[name][-extra:] if extra > 0 else []:
                kernels.append(AttributedKernel(name, dur, ()))
                unlinked += 1
    return kernels, instances, unlinked


def range_spans(events, labels: set[str]) -> list[RangeSpan]:
    """Return the host spans of the range instances among a profiler's events (record_function events, µs)."""
    return [RangeSpan(fe.name, float(fe.time_range.start), float(fe.time_range.end)) for fe in events
            if fe.name in labels and not _is_device(fe)]


def table_from_events(events, labels: set[str], unit: str, meta: dict | None = None) -> KernelTable:
    """Return the KernelTable of a profiler's events (see attribute_events), with the ranges' host time per step."""
    kernels, instances, unlinked = attribute_events(events, labels, unit)
    return build_kernel_table(kernels, instances, source="torch.profiler", unit=unit,
                              meta={**(meta or {}), "unlinked_kernels": unlinked}, spans=range_spans(events, labels))
