"""ncu collector: command lines and the CSV parser on a fixture hand-made from the documented format
(tests/data/ncu/README.md: not a capture), and the roofline arithmetic by hand."""

import stat
from pathlib import Path

import pytest

from bench.errors import BenchInputError
from bench.profiling.ncu_collector import (
    METRICS,
    NCU_ENV,
    export_command,
    find_ncu,
    kernel_table,
    nvtx_include,
    parse_csv,
    profile_command,
    roofline_table,
)

FIXTURE = Path(__file__).resolve().parent / "data" / "ncu" / "decode_step_raw.csv"
GEMM_BYTES = (100_663_296 + 12_288, 33_554_432 + 4096)  # the two nvjet rows: read + written


def test_command_lines_filter_one_nvtx_push_pop_range_and_leave_clocks_alone():
    assert nvtx_include("bench") == "bench@decode_step:1/" and nvtx_include(None) == "decode_step:1/"
    cmd = profile_command("ncu", "/o/report", ["python3", "-m", "x"], nvtx_include("bench"))
    assert cmd[:3] == ["ncu", "--nvtx", "--nvtx-include"] and cmd[3] == "bench@decode_step:1/"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(METRICS)
    assert cmd[-5:] == ["-o", "/o/report", "python3", "-m", "x"]
    assert export_command("ncu", "r.ncu-rep") == ["ncu", "--import", "r.ncu-rep", "--csv", "--page", "raw",
                                                  "--print-units", "base"]


def test_parse_the_raw_page_fixture():
    ks = parse_csv(FIXTURE.read_text())
    assert [k.name[:12] for k in ks] == ["triton_red_f", "nvjet_tst_64", "void pytorch", "triton_poi_f", "nvjet_tst_64"]
    gemm = ks[1]
    assert gemm.dram_read_bytes == 100_663_296  # "100,663,296": thousands separators read
    assert (gemm.duration_ns, gemm.dram_write_bytes, gemm.dram_pct_of_peak, gemm.sm_pct_of_peak) == (25000, 12288, 79.5, 11.4)
    assert ks[2].name.startswith("void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64")  # commas kept


def test_scaled_units_are_converted():
    text = FIXTURE.read_text().replace('"byte","byte","%","nsecond","%"', '"Kbyte","Mbyte","%","usecond","%"')
    k = parse_csv(text)[0]
    assert (k.dram_read_bytes, k.dram_write_bytes, k.duration_ns) == (16384e3, 8192e6, 4000e3)
    with pytest.raises(BenchInputError, match="unit 'furlong'"):
        parse_csv(FIXTURE.read_text().replace('"nsecond"', '"furlong"'))


def test_bad_csv_says_what_is_wrong():
    with pytest.raises(BenchInputError, match="no CSV rows"):
        parse_csv("==PROF== Disconnected from process 1\n")
    header, units = FIXTURE.read_text().splitlines()[2:4]
    with pytest.raises(BenchInputError, match="profiled no kernel.*nvtx"):
        parse_csv(header + "\n" + units + "\n")
    with pytest.raises(BenchInputError, match=r"lacks column\(s\) \['dram__bytes_read.sum'\]"):
        parse_csv(FIXTURE.read_text().replace("dram__bytes_read", "dram__bytes_copied"))
    with pytest.raises(BenchInputError, match="data row 1"):
        parse_csv(FIXTURE.read_text().replace('"4000"', '"n/a"'))


def test_roofline_against_the_measured_copy_bandwidth_by_hand():
    bw = 4.0e12  # bytes/s, a test input (not a measurement)
    t = roofline_table(parse_csv(FIXTURE.read_text()), bw)
    gemm_row = next(r for r in t.kernels if r.duration_us == 25.0)
    assert gemm_row.achieved_gb_s == pytest.approx(GEMM_BYTES[0] / 25e-6 / 1e9)
    assert gemm_row.pct_of_copy_bandwidth == pytest.approx(100 * GEMM_BYTES[0] / 25e-6 / bw)
    assert gemm_row.time_at_copy_bandwidth_us == pytest.approx(GEMM_BYTES[0] / bw * 1e6)
    cats = {c.category: c for c in t.categories}
    assert list(cats) == ["norm", "attention", "gemm", "elementwise"]  # CATEGORIES order
    g = cats["gemm"]
    assert (g.kernels, g.duration_us) == (2, 35.0)
    assert g.time_at_copy_bandwidth_us == pytest.approx(sum(GEMM_BYTES) / bw * 1e6)
    assert g.dram_pct_of_peak == pytest.approx((79.5 * 25 + 70.0 * 10) / 35)  # time-weighted
    all_bytes = 16384 + 8192 + sum(GEMM_BYTES) + 2_097_152 + 65_536 + 4096 + 4096
    assert t.total.duration_us == 47.0 and t.total.kernels == 5
    assert t.total.pct_of_copy_bandwidth == pytest.approx(100 * (all_bytes / bw) / 47e-6)
    md = t.to_markdown()
    assert "| **decode step** | all | 5 | 47.0 |" in md and "4000 GB/s" in md
    assert roofline_table(parse_csv(FIXTURE.read_text()), None).total.pct_of_copy_bandwidth is None


def test_kernel_table_puts_every_kernel_in_the_one_step():
    kt = kernel_table(parse_csv(FIXTURE.read_text()))
    step = kt.range("decode_step")
    assert (step.instances, step.kernels_per_instance, step.total_us) == (1, 5, 47.0)
    assert step.kernels_per_instance_by_category == {"attention": 1, "elementwise": 1, "gemm": 2, "norm": 1}


def test_find_ncu(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\necho 'Copyright (c) 2018-2025 NVIDIA Corporation'\necho 'Version 2025.3.1.0 (build 36398880)'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    assert find_ncu(str(exe)) == (str(exe), "2025.3.1.0")
    monkeypatch.setenv(NCU_ENV, str(exe))
    assert find_ncu()[1] == "2025.3.1.0"
    monkeypatch.delenv(NCU_ENV)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(BenchInputError, match="not on PATH.*--tool torch"):
        find_ncu(globs=(str(tmp_path / "x/*/ncu"),))
    assert find_ncu(globs=(str(tmp_path / "ncu"),))[0] == str(exe)  # an install folder


def test_profile_reads_an_ncu_report_into_its_tables(tmp_path, monkeypatch):
    """bench profile's ncu step after the session: `ncu --import` (a stand-in printing the fixture) -> the raw
    CSV, roofline.json/.md and a kernel table, with the session's measured copy bandwidth as the roofline."""
    from types import SimpleNamespace

    from bench.execution.kernels import KernelTable
    from bench.profiling.readback import read_ncu

    fake = tmp_path / "ncu"
    # it prints only in the C locale (numbers as 1234.5): the export must not inherit a decimal-comma locale
    fake.write_text(f"#!/bin/sh\n[ \"$LC_ALL\" = C ] || exit 4\n"
                    f"[ \"$1\" = --import ] && [ -f \"$2\" ] && cat {FIXTURE} && exit 0\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "cell-ncu"
    out.mkdir()
    cell = SimpleNamespace(cell_id="c1", label="hf bf16 bs1")
    with pytest.raises(RuntimeError, match="ncu wrote no report"):
        read_ncu(str(fake), out, cell, {})
    (out / "report.ncu-rep").write_bytes(b"rep")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")  # a user's decimal-comma locale
    got = read_ncu(str(fake), out, cell, {"copy_bandwidth": {"bandwidth_bytes_s": 4.0e12}, "ncu_version": "2025.3.1.0"})
    assert got["roofline_total"]["kernels"] == 5 and got["roofline_total"]["duration_us"] == 47.0
    assert got["roofline_total"]["pct_of_copy_bandwidth"] is not None
    assert (out / "ncu_raw.csv").read_text() == FIXTURE.read_text()
    assert "of the copy bandwidth" in (out / "roofline.md").read_text()
    table = KernelTable.load(got["kernel_table"])
    assert table.source == "ncu" and table.range("decode_step").kernels_per_instance == 5
    assert table.meta["ncu_version"] == "2025.3.1.0"


def test_the_details_page_layout_reads_as_the_raw_page():
    """A plain `ncu --csv` (no `--page raw`) prints one row per metric and launch, units scaled per value: the same
    kernels come out (layout as ncu's documentation and public parsers of it show: launch columns, "Kernel Time",
    "Section Name", "Metric Name", "Metric Unit", "Metric Value", rule columns)."""
    import csv
    import io

    lines = [ln for ln in FIXTURE.read_text().splitlines() if not ln.startswith("==")]
    header, units, *body = list(csv.reader(io.StringIO("\n".join(lines))))
    scaled = {"byte": [("Kbyte", 1e3), ("Mbyte", 1e6)], "nsecond": [("usecond", 1e3)]}
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(header[:5] + ["Kernel Time", "Context", "Stream", "Section Name", "Metric Name", "Metric Unit",
                             "Metric Value", "Rule Name", "Rule Type", "Rule Description"])
    for i, row in enumerate(body):
        for metric in header[11:]:
            col = header.index(metric)
            value, unit = row[col], units[col]
            if unit in scaled:  # every other launch in a scaled unit, as ncu's automatic units print them
                name, factor = scaled[unit][i % len(scaled[unit])]
                value, unit = (f"{float(value.replace(',', '')) / factor:.9g}", name) if i % 2 else (value, unit)
            w.writerow(row[:5] + ["2026-Dec-01 20:00:00", row[5], row[6], "Raw", metric, unit, value, "", "", ""])
    assert [k.name for k in parse_csv(out.getvalue())] == [k.name for k in parse_csv(FIXTURE.read_text())]
    for long, raw in zip(parse_csv(out.getvalue()), parse_csv(FIXTURE.read_text()), strict=True):
        for field in ("duration_ns", "dram_read_bytes", "dram_write_bytes", "dram_pct_of_peak", "sm_pct_of_peak"):
            assert getattr(long, field) == pytest.approx(getattr(raw, field), rel=1e-9), (long.name, field)
    # a launch without a metric the others have is an error; without it in every launch, it was not collected
    first_sm = next(i for i, ln in enumerate(out.getvalue().splitlines()) if "sm__throughput" in ln)
    with pytest.raises(BenchInputError, match=r"lacks metric\(s\) \['sm__throughput"):
        parse_csv("\n".join(ln for i, ln in enumerate(out.getvalue().splitlines()) if i != first_sm))
    assert {k.sm_pct_of_peak for k in parse_csv("\n".join(ln for ln in out.getvalue().splitlines()
                                                          if "sm__throughput" not in ln))} == {None}
    with pytest.raises(BenchInputError, match="unit 'furlong'"):
        parse_csv(out.getvalue().replace('"nsecond"', '"furlong"'))


def test_the_traffic_set_reads_time_and_bytes_and_prints_no_ncu_percentages():
    """`--ncu-metrics traffic`: ncu collects time and DRAM bytes only (the five metrics took 9 replay passes a kernel
    on the H200; the two % of peak ones are breakdowns over many counters); the roofline columns come out the same,
    ncu's own print "-"."""
    import csv
    import io

    from bench.profiling.ncu_collector import METRIC_SETS, REQUIRED

    cmd = profile_command("ncu", "/o/report", ["python3"], nvtx_include("bench"), METRIC_SETS["traffic"])
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(REQUIRED) == list(METRICS[:3])
    lines = [ln for ln in FIXTURE.read_text().splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    keep = [i for i, name in enumerate(rows[0]) if name not in METRICS[3:]]
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL).writerows([[row[i] for i in keep] for row in rows])
    traffic, full = parse_csv(out.getvalue()), parse_csv(FIXTURE.read_text())
    assert [(k.duration_ns, k.dram_read_bytes, k.dram_write_bytes) for k in traffic] == \
        [(k.duration_ns, k.dram_read_bytes, k.dram_write_bytes) for k in full]
    assert {k.dram_pct_of_peak for k in traffic} == {k.sm_pct_of_peak for k in traffic} == {None}
    t, f = roofline_table(traffic, 4.0e12), roofline_table(full, 4.0e12)
    assert t.total.time_at_copy_bandwidth_us == f.total.time_at_copy_bandwidth_us
    assert t.total.sm_pct_of_peak is None and f.total.sm_pct_of_peak is not None
    last = t.to_markdown().splitlines()[-1]
    assert last.endswith("| - | - |") and not f.to_markdown().splitlines()[-1].endswith("| - | - |")


def test_ncu_profiles_the_root_process_only():
    """The decode step runs in the session process itself; under `--target-processes all` the compiled cell's
    session crashed (segmentation fault) right after ncu attached to a second process on the H200 (2026-12-01)."""
    cmd = profile_command("ncu", "/o/report", ["python3"], nvtx_include("bench"))
    assert cmd[cmd.index("--target-processes") + 1] == "application-only"


def test_the_step_table_says_why_an_ncu_row_has_no_per_call_figures():
    """ncu replays one decode-step range and pushes no module ranges, also for an eager step: its row
    says so, instead of the compiled step's "fused" (the H200's eager ncu row said "fused", 2026-12-02)."""
    from bench.report.kernel_panel import kernel_summary_markdown

    row = {"configuration": "hf compile=off", "precision": "bf16", "batch": 1, "per": "decode step", "steps": 1,
           "kernels": 1463, "kernel_us": 8424.0, "norm_kernels": 0.0, "norm_us": 0.0, "attention_kernels": 32.0,
           "attention_us": 273.7, "RMSNorm_per_call": None, "attention_per_call": None, "unit": "gpu_kernel"}
    text = kernel_summary_markdown([{**row, "tool": "ncu"}, {**row, "tool": "torch", "kernels": 657,
                                                             "configuration": "hf compile=reduce-overhead"},
                                    {**row, "tool": "torch", "RMSNorm_per_call": (8.0, 11.9)}])
    ncu_line, compiled_line, eager_line = text.splitlines()[2:]
    assert ncu_line.count("- (ncu: step range only)") == 2 and "fused" not in ncu_line
    assert compiled_line.count("- (fused: no module ranges)") == 2
    assert "8.0, 11.9" in eager_line


CAPTURE = FIXTURE.with_name("h200-compiled-bs1-decode-step_raw.csv.gz")  # a real H200 export (README.md)
ROOT = Path(__file__).resolve().parents[1]


def test_groups_say_where_the_time_above_the_roofline_goes_by_hand():
    """Kernels of one name reading the same bytes are one group; groups are ordered by the time they
    lose against the roofline (us less us at copy bandwidth), and their losses add up to the step's."""
    bw = 4.0e12  # bytes/s, a test input
    t = roofline_table(parse_csv(FIXTURE.read_text()), bw)
    assert len(t.groups) == 5  # the two nvjet rows read 100.7 MB and 33.6 MB: two groups, not one
    lost = [g.duration_us - g.time_at_copy_bandwidth_us for g in t.groups]
    assert lost == sorted(lost, reverse=True)
    assert sum(lost) == pytest.approx(t.total.duration_us - t.total.time_at_copy_bandwidth_us)
    big = next(g for g in t.groups if g.dram_read_mb > 100)
    assert big.duration_us - big.time_at_copy_bandwidth_us == pytest.approx(25.0 - GEMM_BYTES[0] / bw * 1e6)
    md = t.to_markdown()
    assert "Where the" in md and "us lost" in md
    assert roofline_table(parse_csv(FIXTURE.read_text()), None).groups == []  # no bandwidth, no losses


def test_the_h200_capture_reads_into_its_roofline():
    """The captured compiled step: 655 kernels, nine replay passes' worth of metrics each; the lm_head
    is one kernel reading the vocabulary's 151936 x 4096 bf16 weights, and the 32 layers' 96 MLP
    projections read 4096 x 11008 bf16 each. The totals are the ones the H200 profile printed."""
    import gzip

    with gzip.open(CAPTURE, "rt") as f:
        kernels = parse_csv(f.read())
    assert len(kernels) == 655 and all(k.sm_pct_of_peak is not None for k in kernels)
    t = roofline_table(kernels, 4_257_704_021_260.25)  # the profile's measured copy bandwidth (its session.json)
    assert round(t.total.duration_us, 1) == 5893.0 and round(t.total.dram_read_mb, 2) == 14623.98
    reads = sorted(round(g.dram_read_mb / g.kernels) for g in t.groups if g.category == "gemm")
    assert reads.count(90) == 2 and 1245 in reads  # MLP: two nvjet variants; the lm_head
    head = next(g for g in t.groups if round(g.dram_read_mb) == 1245)
    assert head.kernels == 1 and head.dram_read_mb == pytest.approx(151936 * 4096 * 2 / 1e6, rel=1e-3)
    mlp = [g for g in t.groups if round(g.dram_read_mb / g.kernels) == 90]
    assert sum(g.kernels for g in mlp) == 96
    assert all(g.dram_read_mb / g.kernels == pytest.approx(4096 * 11008 * 2 / 1e6, rel=1e-3) for g in mlp)


def test_bench_kernels_reads_an_ncu_csv_into_the_roofline_files(tmp_path):
    import json
    import os
    import subprocess
    import sys

    def bench(*args):
        return subprocess.run([sys.executable, "-m", "bench", "kernels", *args], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})

    out = tmp_path / "r"
    proc = bench(str(CAPTURE), "--copy-bandwidth", "4257.7", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Copy bandwidth: --copy-bandwidth." in proc.stdout and "Where the" in proc.stdout
    assert {p.name for p in out.iterdir()} >= {"roofline.json", "roofline.md", "kernel_table.json", "kernel_table.md",
                                               "categories.csv"}
    stored = json.loads((out / "roofline.json").read_text())
    assert stored["total"]["kernels"] == 655 and len(stored["groups"]) > 10
    # beside a profile's session.json, its measured copy bandwidth is the default; without --out the folder is
    # named after the profile's (every profile's CSV is ncu_raw.csv)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "ncu_raw.csv.gz").write_bytes(CAPTURE.read_bytes())
    (tmp_path / "p" / "session.json").write_text(json.dumps({"copy_bandwidth": {"bandwidth_bytes_s": 4.0e12}}))
    proc = bench(str(tmp_path / "p" / "ncu_raw.csv.gz"))
    assert proc.returncode == 0 and "measured by the profile" in proc.stdout and "4000 GB/s" in proc.stdout
    assert (tmp_path / "profiles" / "imported" / "p-ncu_raw" / "roofline.md").is_file()
    for bad, said in ((["--copy-bandwidth", "0"], "positive GB/s"), ([], "not an nsys report or an ncu CSV")):
        target = str(CAPTURE) if bad else str(FIXTURE.with_name("README.md"))
        proc = bench(target, *bad, "--out", str(tmp_path / "x"))
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists()  # refused before any file was written


def test_bench_report_shows_each_cells_ncu_roofline(tmp_path):
    """The H200's stored ncu profile (process 2 of the compiled cell, tests/data/README.md) in `bench report`: report.md and the
    dashboard carry the step against its roofline, per category; a missing roofline.md is a warning naming the fix."""
    import shutil
    import warnings

    from bench.report.build import build_report

    shutil.copytree(ROOT / "tests" / "data" / "h200-ncu-compiled", tmp_path / "profiles")
    store = tmp_path / "profiles" / "repeat-2.jsonl.gz"
    paths = build_report([store], tmp_path / "r")
    report = paths["report"].read_text()
    section = report.split("## One decode step against its roofline (bench profile --tool ncu)")[1]
    assert "compile=reduce-overhead" in section and "(--ncu-metrics traffic)" in section
    assert "One decode step under ncu (655 kernels" in section and "| **decode step** | all | 655 | 5958.9 |" in section
    assert "Longest" not in section  # the longest kernels stay in roofline.md
    dashboard = paths["dashboard"].read_text()
    assert "<h4>hf attn_implementation=sdpa cache=static compile=reduce-overhead" in dashboard
    assert "<td><b>decode step</b></td>" in dashboard and "**" not in dashboard.split("roofline (bench profile")[-1]
    next((tmp_path / "profiles").rglob("roofline.md")).unlink()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        paths = build_report([store], tmp_path / "r2")
    assert "One decode step against its roofline" not in paths["report"].read_text()
    assert any("ncu roofline" in w and "bench kernels" in w for w in paths["warnings"]), paths["warnings"]


def test_the_roofline_holds_the_step_against_the_bytes_it_must_read():
    """The same accounting as the % SOL column (speed_of_light.decode_step_bytes), as the session records it: the
    fixture's 5 kernels take 47 us; a step that must read 100 MB at 4 TB/s needs 25 us (53 % SOL); one that must
    read 400 MB needs 100 us: faster than its bound, flagged impossible."""
    from bench.profiling.ncu_collector import step_sol

    kernels = parse_csv(FIXTURE.read_text())
    bound = {"bytes": 100_000_000, "weight_bytes": 99_000_000, "embedding_row_bytes": 8192, "kv_bytes": 991_808}
    t = roofline_table(kernels, 4.0e12, {"step_bound": bound})
    md = t.to_markdown()
    assert "the 100 MB a step must read (99 MB of weights read whole" in md and "25 us at the copy bandwidth: 53% SOL." in md
    assert step_sol(bound, 47.0, 4.0e12) == {"bytes": 100_000_000, "time_us": 25.0, "sol_pct": pytest.approx(53.19, abs=0.01),
                                             "impossible": False}
    fast = roofline_table(kernels, 4.0e12, {"step_bound": {**bound, "bytes": 400_000_000}}).to_markdown()
    assert "213% SOL, **impossible**: faster than its own bound" in fast
    assert step_sol(None, 47.0, 4.0e12) is None and step_sol(bound, 47.0, None) is None
    assert "SOL" not in roofline_table(kernels, 4.0e12).to_markdown()  # no bound recorded: no SOL claimed


def test_profile_reads_the_session_step_bound_into_the_roofline(tmp_path):
    from types import SimpleNamespace

    from bench.profiling.readback import read_ncu

    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --import ] && cat {FIXTURE} && exit 0\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "cell-ncu"
    out.mkdir()
    (out / "report.ncu-rep").write_bytes(b"rep")
    got = read_ncu(str(fake), out, SimpleNamespace(cell_id="c1", label="x"),
                   {"copy_bandwidth": {"bandwidth_bytes_s": 4.0e12}, "step_bound": {"bytes": 400_000_000}})
    assert got["roofline_total"]["impossible"] and got["roofline_total"]["sol_pct"] == pytest.approx(212.77, abs=0.01)
    assert "**impossible**" in (out / "roofline.md").read_text()
