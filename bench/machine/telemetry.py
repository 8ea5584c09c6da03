"""GPU telemetry during a measured pass: an NVML sampler thread (power, memory, SM clock, energy).

NVML is read from a background thread so the measured loop adds no work; energy is the
difference of NVML's total-energy counter (mJ, Volta and later) over the window, falling back
to integrating the sampled power where the counter is not supported. The sampled power is
NVML's reading, a 1 s average on Ampere and later: it lags a short burst, the counter does not.
Without NVML (a CPU run, no driver, nvidia-ml-py not installed) every figure is None: telemetry
never fails a run.
"""

from __future__ import annotations

import statistics
import threading
import time

from bench.machine.environment import nvml_device, nvml_index  # noqa: F401  (nvml_index: its old home)

NULL_SUMMARY = {
    "energy_j": None,
    "avg_power_w": None,
    "peak_nvml_memory_gb": None,
    "sm_clock_mhz_median": None,
    "telemetry_samples": 0,
}


def downsample(values: list, max_points: int) -> list:
    """Return at most max_points values, evenly picked, keeping the first and the last."""
    if len(values) <= max_points or max_points < 2:
        return list(values)
    step = (len(values) - 1) / (max_points - 1)
    return [values[round(i * step)] for i in range(max_points)]


def summarize_samples(samples: list[tuple[float, float | None, float | None, float | None]],
                      energy_mj: float | None, window_s: float) -> dict:
    """Return the telemetry figures of one window from (t_s, power_w, used_bytes, sm_mhz) samples.

    `energy_mj` is the NVML counter difference over the window (None: not supported, then the
    sampled power is integrated with the trapezoid rule, or None if fewer than two samples).
    """
    power = [(t, p) for t, p, _, _ in samples if p is not None]
    mem = [m for _, _, m, _ in samples if m is not None]
    clocks = [c for _, _, _, c in samples if c is not None]
    if energy_mj is not None:
        energy_j = energy_mj / 1000.0
    elif len(power) >= 2:
        energy_j = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False))
    else:
        energy_j = None
    if energy_j is not None and window_s > 0:
        avg_power = energy_j / window_s
    elif power:
        avg_power = statistics.fmean(p for _, p in power)
    else:
        avg_power = None
    return {
        "energy_j": energy_j,
        "avg_power_w": avg_power,
        "peak_nvml_memory_gb": max(mem) / 1e9 if mem else None,
        "sm_clock_mhz_median": float(statistics.median(clocks)) if clocks else None,
        "telemetry_samples": len(samples),
    }


class Sampler:
    """Context manager sampling one GPU (or a tensor-parallel cell's GPUs, summed) through NVML while its block runs.

    After the block: `summary` (figures; all None without NVML) and `timeline`
    ({'t_s', 'power_w', 'memory_gb', 'sm_mhz'}, at most `max_points` points each, or None).
    """

    def __init__(self, device: str | list[str], interval_s: float = 0.05, max_points: int = 200):
        # Several devices (a tensor-parallel cell's GPUs): power, energy and memory are their sums.
        self.devices = [device] if isinstance(device, str) else list(device)
        self.device = self.devices[0]
        self.interval_s = interval_s
        self.max_points = max_points
        self.summary: dict = dict(NULL_SUMMARY)
        self.timeline: dict | None = None
        self._nvml = None
        self._handles: list = []
        self._samples: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        indices = [nvml_device(d) for d in self.devices]
        if any(i is None for i in indices):
            return self
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByUUID(i.encode()) if isinstance(i, str)
                             else pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        except Exception:  # no library, no driver, no such device: figures stay None
            self._shutdown()
            return self
        self._energy0 = self._energy()
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self._handles:
            return
        self._stop.set()
        self._thread.join()
        self._sample()
        window = time.perf_counter() - self._t0
        energy1 = self._energy()
        energy_mj = energy1 - self._energy0 if energy1 is not None and self._energy0 is not None else None
        self.summary = summarize_samples(self._samples, energy_mj, window)
        self.timeline = {
            "t_s": downsample([round(s[0], 4) for s in self._samples], self.max_points),
            "power_w": downsample([s[1] for s in self._samples], self.max_points),
            "memory_gb": downsample([None if s[2] is None else round(s[2] / 1e9, 3) for s in self._samples], self.max_points),
            "sm_mhz": downsample([s[3] for s in self._samples], self.max_points),
        }
        self._shutdown()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _read(self, fn, *args) -> list:
        """Return fn's value for every sampled GPU (None for one that does not support it)."""
        out = []
        for handle in self._handles:
            try:
                out.append(fn(handle, *args))
            except Exception:  # a counter this GPU does not support
                out.append(None)
        return out

    def _energy(self) -> float | None:
        return _total(self._read(self._nvml.nvmlDeviceGetTotalEnergyConsumption))

    def _sample(self) -> None:
        nv = self._nvml
        power_mw = _total(self._read(nv.nvmlDeviceGetPowerUsage))
        mem = _total([None if m is None else m.used for m in self._read(nv.nvmlDeviceGetMemoryInfo)])
        clocks = [c for c in self._read(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM) if c is not None]
        self._samples.append((
            time.perf_counter() - self._t0,
            None if power_mw is None else power_mw / 1000.0,
            None if mem is None else int(mem),
            float(statistics.fmean(clocks)) if clocks else None,
        ))

    def _shutdown(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        self._nvml = None
        self._handles = []


def _total(values: list):
    """Return the sum over GPUs, or None if any GPU could not say (a partial sum would mislead)."""
    return None if not values or any(v is None for v in values) else sum(values)
