"""GPU telemetry during a measured pass: an NVML sampler thread, and the rules that read a spread from it.

NVML is read from a background thread (20 Hz by default) so the measured loop adds no work:
power, memory, SM and memory clocks, temperature, utilisation (the share of the last sample
period in which a kernel ran: NVML's "GPU busy") and the clock throttle reasons
(nvmlDeviceGetCurrentClocksEventReasons, called ...ThrottleReasons before driver 535). Energy
is the difference of NVML's total-energy counter (mJ, Volta and later) over the window; where
the counter is not supported the sampled power is integrated (trapezoids), and `energy_valid`
is False when those samples leave a gap longer than `GAP_LIMIT_S` (InferenceX's rule: an
integral over missing samples is not a measurement). The sampled power is NVML's reading, a
1 s average on Ampere and later: it lags a short burst, the counter does not.

What reads the samples is a `reader` object (open / read / energy_mj / close): `NvmlReader`
by default, a fake one in tests. Without NVML (a CPU run, no driver, nvidia-ml-py not
installed) every figure is None: telemetry never fails a run.

`spread_causes` names what telemetry can say about runs that disagree (clocks, power cap,
thermal slowdown, a host-bound GPU, a host whose own speed differed between the runs' processes);
the tables' stability warning quotes it.
"""

from __future__ import annotations

import statistics
import threading
import time

from bench.checks import is_finite_number
from bench.machine.environment import nvml_device, nvml_index  # noqa: F401  (nvml_index: its old home)

# NVML's clock event (throttle) reason bits (nvml.h, nvmlClocksEventReason*); stable across drivers.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake", 0x100: "display_clocks",
}
POWER_BITS = 0x4 | 0x80
THERMAL_BITS = 0x20 | 0x40 | 0x8  # HW slowdown: the board's own thermal/power protection
# A cell whose GPU was busy less than this share of its samples (mean NVML utilisation) is called host-bound.
HOST_BOUND_BUSY_PCT = 70.0
# Runs whose median SM clocks differ by more than this share: "clocks differed".
CLOCK_DROP = 0.05
# Throttled by the power cap in at least this % of a run's samples: "power cap".
POWER_CAP_PCT = 10.0
# The runs' host probes (bench.machine.host_load.host_probe_times: the same Python loop in each run's process) differ by
# more than this share when the slowest is this much above the fastest: the host's speed moved between processes.
HOST_PROBE_SPREAD = 0.10
# Where the runs also carry the figure that spread, the probes explain it only when the slower loops went with the
# slower runs beyond chance: Spearman's rank correlation with a one-sided p-value at most this (bench.results.stats.
# rank_correlation; at least 3 runs, and with 3 no order is that unlikely). On an H100 host (2026-12-06) five eager runs
# of 21.7-28.4 ms had probes of 1.21-1.34 ms ranked 0.40 against them (p 0.26): something else moved them.
HOST_PROBE_P = 0.05
# Sampled-power energy is not valid when two samples (or a sample and the window's edge) are further apart.
GAP_LIMIT_S = 0.5

FIELDS = ("power_w", "memory_bytes", "sm_mhz", "mem_mhz", "temp_c", "util_pct", "throttle")
NULL_SUMMARY = {
    "energy_j": None,
    "energy_valid": None,
    "avg_power_w": None,
    "peak_nvml_memory_gb": None,
    "sm_clock_mhz_median": None,
    "sm_clock_mhz_min": None,
    "mem_clock_mhz_median": None,
    "temperature_c_max": None,
    "gpu_busy_pct": None,
    "throttle_power_pct": None,
    "throttle_thermal_pct": None,
    "telemetry_hz": None,
    "telemetry_max_gap_ms": None,
    "telemetry_samples": 0,
}


def downsample(values: list, max_points: int) -> list:
    """Return at most max_points values, evenly picked, keeping the first and the last."""
    if len(values) <= max_points or max_points < 2:
        return list(values)
    step = (len(values) - 1) / (max_points - 1)
    return [values[round(i * step)] for i in range(max_points)]


def _as_dict(sample) -> dict:
    """Return a sample as {'t_s', *FIELDS}; tuples are (t_s, power_w, memory_bytes, sm_mhz[, mem_mhz, temp_c, util_pct, throttle])."""
    if isinstance(sample, dict):
        return sample
    values = list(sample) + [None] * (1 + len(FIELDS) - len(sample))
    return dict(zip(("t_s",) + FIELDS, values, strict=True))


def max_gap_s(times: list[float], window_s: float) -> float | None:
    """Return the longest stretch of the window [0, window_s] without a sample (None without samples)."""
    if not times:
        return None
    edges = [0.0] + sorted(times) + [max(window_s, max(times))]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def summarize_samples(samples: list, energy_mj: float | None, window_s: float) -> dict:
    """Return the telemetry figures of one window from its samples (dicts, or tuples as `_as_dict` reads them).

    `energy_mj` is the NVML counter difference over the window (None: not supported, then the
    sampled power is integrated with the trapezoid rule, or None if fewer than two samples).
    """
    rows = [_as_dict(s) for s in samples]

    def col(name):
        return [r[name] for r in rows if r.get(name) is not None]

    power = [(r["t_s"], r["power_w"]) for r in rows if r.get("power_w") is not None]
    gap = max_gap_s([r["t_s"] for r in rows], window_s)
    if energy_mj is not None:
        energy_j, valid = energy_mj / 1000.0, True
    elif len(power) >= 2:
        energy_j = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False))
        valid = max_gap_s([t for t, _ in power], window_s) <= GAP_LIMIT_S
    else:
        energy_j, valid = None, None
    if energy_j is not None and window_s > 0:
        avg_power = energy_j / window_s
    elif power:
        avg_power = statistics.fmean(p for _, p in power)
    else:
        avg_power = None
    mem, sm, mem_mhz, temp, util = (col(n) for n in ("memory_bytes", "sm_mhz", "mem_mhz", "temp_c", "util_pct"))
    throttle = col("throttle")

    def share(bits):
        return 100.0 * sum(1 for t in throttle if int(t) & bits) / len(throttle) if throttle else None

    return {
        "energy_j": energy_j,
        "energy_valid": valid,
        "avg_power_w": avg_power,
        "peak_nvml_memory_gb": max(mem) / 1e9 if mem else None,
        "sm_clock_mhz_median": float(statistics.median(sm)) if sm else None,
        "sm_clock_mhz_min": float(min(sm)) if sm else None,
        "mem_clock_mhz_median": float(statistics.median(mem_mhz)) if mem_mhz else None,
        "temperature_c_max": float(max(temp)) if temp else None,
        "gpu_busy_pct": float(statistics.fmean(util)) if util else None,
        "throttle_power_pct": share(POWER_BITS),
        "throttle_thermal_pct": share(THERMAL_BITS),
        "telemetry_hz": len(rows) / window_s if rows and window_s > 0 else None,
        "telemetry_max_gap_ms": None if gap is None else gap * 1000.0,
        "telemetry_samples": len(rows),
    }


def throttle_names(bits: int) -> list[str]:
    """Return the names of the throttle reasons set in an NVML bitmask."""
    return [name for bit, name in THROTTLE_REASONS.items() if bits & bit]


class NvmlReader:
    """Reads one GPU, or a tensor-parallel cell's GPUs (power, energy, memory summed; clocks and
    utilisation averaged; temperature the hottest; throttle reasons OR-ed), through pynvml."""

    def __init__(self):
        self._nvml = None
        self._handles: list = []

    def open(self, devices: list[str]) -> bool:
        indices = [nvml_device(d) for d in devices]
        if any(i is None for i in indices):
            return False
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByUUID(i.encode()) if isinstance(i, str)
                             else pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        except Exception:  # no library, no driver, no such device: figures stay None
            self.close()
            return False
        return True

    def _read(self, name: str, *args) -> list:
        """Return NVML function `name`'s value for every GPU (None where it is missing or unsupported)."""
        fn = getattr(self._nvml, name, None)
        out = []
        for handle in self._handles:
            try:
                out.append(fn(handle, *args) if fn is not None else None)
            except Exception:  # a counter this GPU does not support
                out.append(None)
        return out

    def energy_mj(self) -> float | None:
        return _total(self._read("nvmlDeviceGetTotalEnergyConsumption"))

    def read(self) -> dict:
        nv = self._nvml
        power_mw = _total(self._read("nvmlDeviceGetPowerUsage"))
        mem = _total([None if m is None else m.used for m in self._read("nvmlDeviceGetMemoryInfo")])
        util = [None if u is None else u.gpu for u in self._read("nvmlDeviceGetUtilizationRates")]
        reasons = self._read("nvmlDeviceGetCurrentClocksEventReasons")
        if all(r is None for r in reasons):
            reasons = self._read("nvmlDeviceGetCurrentClocksThrottleReasons")  # before driver 535
        temps = [t for t in self._read("nvmlDeviceGetTemperature", getattr(nv, "NVML_TEMPERATURE_GPU", 0)) if t is not None]
        known = [int(r) for r in reasons if r is not None]
        return {
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "memory_bytes": None if mem is None else int(mem),
            "sm_mhz": _mean(self._read("nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_SM", 1))),
            "mem_mhz": _mean(self._read("nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_MEM", 2))),
            "temp_c": float(max(temps)) if temps else None,
            "util_pct": _mean(util),
            "throttle": _or(known) if known else None,
        }

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        self._nvml = None
        self._handles = []


class Sampler:
    """Context manager sampling the device(s) while its block runs.

    After the block: `summary` (figures; all None without NVML) and `timeline` (one list per
    field: 't_s', 'power_w', 'memory_gb', 'sm_mhz', 'mem_mhz', 'temp_c', 'util_pct',
    'throttle' (NVML's bitmask), at most `max_points` points each, or None).
    `reader`: what reads the samples (default NvmlReader; tests pass a fake).
    """

    def __init__(self, device: str | list[str], interval_s: float = 0.05, max_points: int = 200, reader=None):
        # Several devices (a tensor-parallel cell's GPUs): power, energy and memory are their sums.
        self.devices = [device] if isinstance(device, str) else list(device)
        self.device = self.devices[0]
        self.interval_s = interval_s
        self.max_points = max_points
        self.reader = reader if reader is not None else NvmlReader()
        self.summary: dict = dict(NULL_SUMMARY)
        self.timeline: dict | None = None
        self._open = False
        self._samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        if not self.reader.open(self.devices):
            return self
        self._open = True
        self._energy0 = self.reader.energy_mj()
        self._t0 = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self._open:
            return
        self._stop.set()
        self._thread.join()
        self._sample()
        window = time.perf_counter() - self._t0
        energy1 = self.reader.energy_mj()
        energy_mj = energy1 - self._energy0 if energy1 is not None and self._energy0 is not None else None
        self.summary = summarize_samples(self._samples, energy_mj, window)
        s = self._samples
        self.timeline = {
            "t_s": [round(x["t_s"], 4) for x in s],
            "power_w": [x["power_w"] for x in s],
            "memory_gb": [None if x["memory_bytes"] is None else round(x["memory_bytes"] / 1e9, 3) for x in s],
            "sm_mhz": [x["sm_mhz"] for x in s],
            "mem_mhz": [x["mem_mhz"] for x in s],
            "temp_c": [x["temp_c"] for x in s],
            "util_pct": [x["util_pct"] for x in s],
            "throttle": [x["throttle"] for x in s],
        }
        self.timeline = {k: downsample(v, self.max_points) for k, v in self.timeline.items()}
        self.reader.close()
        self._open = False

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        values = self.reader.read()
        self._samples.append({"t_s": time.perf_counter() - self._t0, **{f: values.get(f) for f in FIELDS}})


def spread_causes(runs: list[dict], rank=None) -> list[str]:
    """Return what the runs' telemetry says about why they differ (each run: the means of its passes' figures).

    Keys read: sm_clock_mhz_median, gpu_busy_pct, throttle_power_pct, throttle_thermal_pct
    (bench's metric names), host_probe_ms (the host's speed in the run's process) and `slowness` (the figure that
    spread, oriented so that larger is slower: TPOT as it is, a throughput negated); a run without them contributes
    nothing, nor does a probe that is not a finite positive time. Empty: nothing seen. With the figure, the host
    probes are said to explain the spread only where they rank the runs as the figure does beyond chance
    (HOST_PROBE_P): `rank(x, y)` returns the rank correlation with its p-value (bench.results.stats.rank_correlation,
    given by the caller: statistics are a later stage than telemetry).
    """
    def values(key):
        return [r[key] for r in runs if r.get(key) is not None and r[key] == r[key]]  # r[key] == r[key]: not NaN

    causes = []
    clocks = values("sm_clock_mhz_median")
    if len(clocks) >= 2 and min(clocks) < (1 - CLOCK_DROP) * max(clocks):
        causes.append(f"clocks dropped: the runs' median SM clocks differ ({min(clocks):.0f} vs {max(clocks):.0f} MHz)")
    power = values("throttle_power_pct")
    if power and max(power) >= POWER_CAP_PCT:
        causes.append(f"power cap: clocks held by the power limit in up to {max(power):.0f} % of a run's samples")
    thermal = values("throttle_thermal_pct")
    if thermal and max(thermal) > 0:
        causes.append(f"thermal slowdown in up to {max(thermal):.0f} % of a run's samples")
    busy = values("gpu_busy_pct")
    if busy and min(busy) < HOST_BOUND_BUSY_PCT:
        causes.append(f"host-bound: the GPU was busy only {min(busy):.0f}-{max(busy):.0f} % of the time "
                      "(the host's launches, not the GPU, set the pace, so the host's load moves the result)")
    probed = [r for r in runs if is_finite_number(r.get("host_probe_ms")) and r["host_probe_ms"] > 0]
    probes = [r["host_probe_ms"] for r in probed]
    if len(probes) >= 2 and max(probes) > (1 + HOST_PROBE_SPREAD) * min(probes):
        seen = (f"host speed: the same Python loop took {min(probes):.2f}-{max(probes):.2f} ms in the runs' processes "
                f"(+{100 * (max(probes) / min(probes) - 1):.0f} %)")
        pairs = [(r["host_probe_ms"], r["slowness"]) for r in probed if is_finite_number(r.get("slowness"))]
        order = rank([x for x, _ in pairs], [y for _, y in pairs]) if pairs and rank is not None else None
        if order is None:
            causes.append(seen + ": the host's cores ran at different speeds, which can move a host-bound figure "
                                 "whatever the load figures say")
        else:
            how = f"rank correlation {order.rho:.2f} over {order.n} runs, p {order.p:.2g}"
            causes.append(seen + (f", and the slower loops went with the slower runs ({how}): the host's cores ran at "
                                  "different speeds" if order.p <= HOST_PROBE_P else
                                  f", but not in the runs' order beyond chance ({how}): the loop's speed does not "
                                  "explain this spread"))
    return causes


def _mean(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.fmean(known)) if known else None


def _or(values: list[int]) -> int:
    out = 0
    for v in values:
        out |= v
    return out


def _total(values: list):
    """Return the sum over GPUs, or None if any GPU could not say (a partial sum would mislead)."""
    return None if not values or any(v is None for v in values) else sum(values)
