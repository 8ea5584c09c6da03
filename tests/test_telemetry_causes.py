"""Telemetry that explains a spread: the sampler with an injected reader, energy validity, and the named causes."""

import time

import pytest

from bench.machine import telemetry
from bench.machine.telemetry import Sampler, spread_causes, summarize_samples


class FakeReader:
    """Reads a scripted GPU: power 300 W, clocks 1980/2619 MHz, 60 C, busy `util` %, power-capped when told."""

    def __init__(self, util=95.0, throttle=0, energy_mj_per_s=300_000.0, stall_s=0.0):
        self.util, self.throttle, self.rate, self.stall_s = util, throttle, energy_mj_per_s, stall_s
        self.opened = self.closed = False
        self.t0 = time.perf_counter()
        self.reads = 0

    def open(self, devices):
        self.opened = True
        return True

    def read(self):
        self.reads += 1
        if self.stall_s and self.reads == 3:
            time.sleep(self.stall_s)  # the sampler thread was starved: a gap in the samples
        return {"power_w": 300.0, "memory_bytes": 4e9, "sm_mhz": 1980.0, "mem_mhz": 2619.0, "temp_c": 60.0,
                "util_pct": self.util, "throttle": self.throttle}

    def energy_mj(self):
        return None if self.rate is None else (time.perf_counter() - self.t0) * self.rate

    def close(self):
        self.closed = True


def test_the_sampler_reads_every_field_at_10_hz_or_more():
    reader = FakeReader(util=40.0, throttle=0x4)
    with Sampler("cuda", interval_s=0.02, reader=reader) as s:
        time.sleep(0.5)
    m = s.summary
    assert reader.closed and m["telemetry_samples"] >= 10 and m["telemetry_hz"] >= 10
    assert m["sm_clock_mhz_median"] == 1980.0 and m["mem_clock_mhz_median"] == 2619.0 and m["temperature_c_max"] == 60.0
    assert m["gpu_busy_pct"] == 40.0 and m["throttle_power_pct"] == 100.0 and m["throttle_thermal_pct"] == 0.0
    assert m["energy_j"] == pytest.approx(150.0, rel=0.2) and m["energy_valid"] is True  # the counter: 300 W x 0.5 s
    tl = s.timeline
    assert set(tl) == {"t_s", "power_w", "memory_gb", "sm_mhz", "mem_mhz", "temp_c", "util_pct", "throttle"}
    assert len(tl["t_s"]) == len(tl["throttle"]) == m["telemetry_samples"] and tl["throttle"][0] == 4
    assert telemetry.throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]


def test_sampled_energy_is_invalid_across_a_gap():
    # No energy counter: the sampled power is integrated; a 0.7 s stall leaves a gap > GAP_LIMIT_S.
    with Sampler("cuda", interval_s=0.02, reader=FakeReader(energy_mj_per_s=None, stall_s=0.7)) as s:
        time.sleep(1.0)
    assert s.summary["energy_valid"] is False and s.summary["telemetry_max_gap_ms"] >= 600
    with Sampler("cuda", interval_s=0.02, reader=FakeReader(energy_mj_per_s=None)) as s:
        time.sleep(0.3)
    assert s.summary["energy_valid"] is True and s.summary["energy_j"] == pytest.approx(300.0 * 0.3, rel=0.25)


def test_summary_by_hand():
    # (t, power, memory, sm, mem clock, temp, util, throttle): one power-capped sample of four, one thermal
    samples = [(0.0, 100.0, 2e9, 1500.0, 2600.0, 50.0, 80.0, 0x4), (0.1, 300.0, 5e9, 1700.0, 2600.0, 70.0, 100.0, 0),
               (0.2, 300.0, 4e9, 1980.0, 2600.0, 65.0, 60.0, 0x40), (0.3, 300.0, 4e9, 1980.0, 2600.0, 65.0, 100.0, 0)]
    s = summarize_samples(samples, energy_mj=None, window_s=0.3)
    assert s["energy_j"] == pytest.approx(0.1 * 200 + 0.1 * 300 + 0.1 * 300) and s["energy_valid"] is True
    assert s["gpu_busy_pct"] == 85.0 and s["throttle_power_pct"] == 25.0 and s["throttle_thermal_pct"] == 25.0
    assert s["sm_clock_mhz_min"] == 1500.0 and s["temperature_c_max"] == 70.0 and s["telemetry_max_gap_ms"] == pytest.approx(100)


def test_spread_causes_name_what_they_see():
    steady = {"sm_clock_mhz_median": 1980.0, "gpu_busy_pct": 97.0, "throttle_power_pct": 0.0, "throttle_thermal_pct": 0.0}
    assert spread_causes([steady, steady]) == []
    causes = spread_causes([steady, {**steady, "sm_clock_mhz_median": 1500.0}])
    assert causes == ["clocks dropped: the runs' median SM clocks differ (1500 vs 1980 MHz)"]
    assert "power cap" in spread_causes([steady, {**steady, "throttle_power_pct": 40.0}])[0]
    assert "thermal slowdown" in spread_causes([{**steady, "throttle_thermal_pct": 5.0}])[0]
    host = spread_causes([{**steady, "gpu_busy_pct": 35.0}, {**steady, "gpu_busy_pct": 55.0}])
    assert host and host[0].startswith("host-bound: the GPU was busy only 35-55 %")
    assert spread_causes([{}, {"gpu_busy_pct": float("nan")}]) == []
    # the host's own speed: the same Python loop 1.00 ms in one run's process, 1.30 in another's (+30 %)
    slow = spread_causes([{**steady, "host_probe_ms": 1.0}, {**steady, "host_probe_ms": 1.3}])
    assert slow == ["host speed: the same Python loop took 1.00-1.30 ms in the runs' processes (+30 %): the host's "
                    "cores ran at different speeds, which can move a host-bound figure whatever the load figures say"]
    assert spread_causes([{"host_probe_ms": 1.0}, {"host_probe_ms": 1.09}]) == []  # within 10 %: the loop's own noise
    for hostile in (float("nan"), float("inf"), 0.0, -5.0):  # a store is untrusted: no cause from what is no time
        assert spread_causes([{"host_probe_ms": 1.0}, {"host_probe_ms": hostile}]) == [], hostile


def test_host_probes_explain_a_spread_only_in_the_runs_order():
    """With the figure that spread (larger slower), the probes are a cause only where they rank the runs as it does
    beyond chance: the H100's five eager runs (TPOT 23.60, 23.82, 26.01, 28.38, 21.73 ms; probes 1.208-1.342 ms) did
    not."""
    from bench.results.stats import rank_correlation as rank

    tpot, probe = [23.60, 23.82, 26.01, 28.38, 21.73], [1.208, 1.290, 1.299, 1.342, 1.337]
    (cause,) = spread_causes([{"host_probe_ms": p, "slowness": t} for p, t in zip(probe, tpot, strict=True)], rank)
    # ranks (1,2,3,5,4) and (2,3,4,5,1): rho = 1 - 6 * 12 / (5 * 24) = 0.4; 31 of the 120 orderings rank as high
    assert cause.startswith("host speed: the same Python loop took 1.21-1.34 ms in the runs' processes (+11 %), but "
                            "not in the runs' order beyond chance (rank correlation 0.40 over 5 runs, p 0.26)"), cause
    ordered = sorted(probe)
    (cause,) = spread_causes([{"host_probe_ms": p, "slowness": -t} for p, t in zip(ordered, [9.0, 8.0, 7.5, 7.0, 6.0],
                                                                                   strict=True)], rank)  # a throughput
    assert "and the slower loops went with the slower runs (rank correlation 1.00 over 5 runs, p 0.0083)" in cause
    # three runs in the probes' order: one ordering in 6 does that by chance, so it is not called a cause
    (cause,) = spread_causes([{"host_probe_ms": p, "slowness": t} for p, t in ((1.0, 2.0), (1.2, 3.0), (1.3, 4.0))],
                             rank)
    assert "not in the runs' order beyond chance (rank correlation 1.00 over 3 runs, p 0.17)" in cause
    assert "rank correlation" not in spread_causes([{"host_probe_ms": 1.0, "slowness": 2.0},
                                                    {"host_probe_ms": 1.3, "slowness": 3.0}], rank)[0]  # 2: too few


def test_rank_correlation_by_hand():
    """Spearman's rho and its one-sided p: exact over every ordering up to 7 pairs, Student's t beyond."""
    from bench.results.stats import rank_correlation

    r = rank_correlation([1.208, 1.290, 1.299, 1.342, 1.337], [23.60, 23.82, 26.01, 28.38, 21.73])
    assert r.rho == pytest.approx(0.4) and r.p == pytest.approx(31 / 120) and r.n == 5
    r = rank_correlation([1, 2, 3, 4, 5], [1, 2, 3, 5, 4])  # sum d^2 = 2: rho 0.9; 5 of 120 orderings reach it
    assert r.rho == pytest.approx(0.9) and r.p == pytest.approx(5 / 120)
    assert rank_correlation([1.0, 1.3, 1.1], [2.0, 2.0, 2.0]) is None  # a constant figure ranks nothing
    assert rank_correlation([1.0, 2.0], [1.0, 2.0]) is None  # too few pairs
    r = rank_correlation([1.0, 1.0, 2.0], [1.0, 2.0, 3.0])  # a tie: mean ranks (1.5, 1.5, 3)
    assert r.rho == pytest.approx(0.866, abs=1e-3)
    r = rank_correlation(list(range(10)), [0, 2, 1, 3, 4, 6, 5, 7, 9, 8])  # 10 pairs, sum d^2 = 6: rho 0.9636
    assert r.rho == pytest.approx(1 - 6 * 6 / 990) and 0 < r.p < 1e-4  # t = 10.2 on 8 df


def test_the_stability_warning_quotes_the_cause(tmp_path):
    """Two runs of a cell that differ, one host-bound: the table's warning names it."""
    import pandas as pd

    from bench.report.tables import speedup_table

    rows = []
    for run, (tps, busy) in enumerate(((100.0, 95.0), (70.0, 40.0))):
        for trial in range(2):
            rows.append({"cell_id": "c1", "backend": "hf", "model": "m", "precision": "bf16", "max_batch_size": 1,
                         "device": "cuda", "workload": "w", "options": "{}", "status": "ok", "error": None, "trial": trial,
                         "run_id": "r", "run": run, "started_at": float(run * 10 + trial),
                         "request_throughput": tps / 100, "output_throughput": tps + trial * 0.1,
                         "gpu_busy_pct": busy, "sm_clock_mhz_median": 1980.0})
    (table,) = speedup_table(pd.DataFrame(rows), {"backend": "hf"}).values()
    assert any("telemetry: host-bound: the GPU was busy only 40-95 %" in w for w in table.warnings), \
        table.warnings
    assert any("host-bound: the GPU was busy 68 %" in w for w in table.warnings)  # the cell's mean, 67.5
    # runs whose host probes differ: the warning names the host's speed; rows from before the probe (None) say nothing
    for row in rows:
        row["host_probe_ms"] = 1.0 if row["run"] == 0 else 1.5
    (table,) = speedup_table(pd.DataFrame(rows), {"backend": "hf"}).values()
    assert any("host speed: the same Python loop took 1.00-1.50 ms in the runs' processes (+50 %)" in w
               for w in table.warnings), table.warnings
    for row in rows:
        row["host_probe_ms"] = None
    (table,) = speedup_table(pd.DataFrame(rows), {"backend": "hf"}).values()
    assert not any("host speed" in w for w in table.warnings)
