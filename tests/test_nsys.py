"""nsys SQLite reader: real exports from two nsys versions, and databases built with the documented schema."""

import sqlite3
import stat
from pathlib import Path

import pytest

from bench.errors import BenchInputError
from bench.execution.kernels import NO_RANGE
from bench.profiling.nsys_collector import (
    NSYS_ENV,
    export_command,
    find_nsys,
    nsys_candidates,
    parse_nsys_version,
    profile_command,
    read_sqlite,
    report_file,
    table_from_sqlite,
    timeline_spans,
)

# Real exports from two nsys versions, vendored with their license and source (tests/data/nsys/README.md).
REAL = Path(__file__).resolve().parent / "data" / "nsys"


def test_real_export_nsys2022_nvtx_ranges_and_duplicate_runtime_rows():
    # nsys 2022.2, schema 2.9.1: NVTX text in `text` or via textId, two runtime rows per launch
    # (cudaLaunchKernel around cudaLaunchKernel_v7000) that must not double-count.
    t = table_from_sqlite(REAL / "saxpy-mpi-cuda_nsys2022.2.sqlite")
    assert t.meta["nsys_version"] == "2022.2.1.31" and t.meta["export_schema"] == "2.9.1"
    saxpy = t.range("saxpy")
    durations_ns = [942626994 - 924922186, 1213791658 - 1196058242, 1466878365 - 1449177557,
                    1713996442 - 1696275954, 1965496577 - 1947782617]  # from the kernel table, by hand
    assert (saxpy.instances, saxpy.kernels_per_instance) == (5, 1)
    assert saxpy.gpu_us_per_instance_median == pytest.approx(sorted(durations_ns)[2] / 1000)
    assert saxpy.total_us == pytest.approx(sum(durations_ns) / 1000)
    assert t.range("MPI_Send").instances == 10 and t.range("MPI_Send").kernels_per_instance == 0
    assert t.range("MPI_Recv").instances == 5 and t.range("MPI_Init").instances == 1
    assert t.total_kernels == 5
    (row,) = [r for r in t.rows if r.range == "saxpy"]
    assert row.kernel == "saxpy(double *, double *, double *, double, int)"
    assert row.category == "elementwise" and row.instances_ran == 5  # y = a*x + y: BLAS-1 axpy


def test_real_export_nsys2024_without_nvtx():
    path = REAL / "cloverleaf-cuda_nsys2024.5.sqlite"
    kernels, instances, info = read_sqlite(path)
    assert info["nsys_version"] == "2024.5.1.113" and info["export_schema"] == "3.13.2"
    assert instances == {} and any("NVTX_EVENTS" in n for n in info["notes"])
    con = sqlite3.connect(path)
    (n, total_ns), = con.execute("SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    by_short = dict(con.execute(
        "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName GROUP BY 1"))
    con.close()
    t = table_from_sqlite(path)
    assert (t.total_kernels, n) == (1312, 1312)
    assert t.total_us == pytest.approx(total_ns / 1000)
    assert t.range(NO_RANGE).kernels_per_instance == 1312
    assert by_short == {"par_ranged1d_kernel": 968, "par_ranged2d_kernel": 331, "par_reduce_kernel": 13}
    assert sum(1 for k in kernels if "par_ranged1d_kernel" in k.name) == 968
    # Categories of the real names: the 13 par_reduce_kernel launches are reductions (not
    # elementwise); par_ranged1d/2d_kernel are CloverLeaf's generic parallel-for over a lambda
    # (stencils, halo updates): nothing in the name says what they compute, so "other".
    reduce_ns = con_sum(path, "par_reduce_kernel")
    cats = {c.category: (c.kernels, c.total_us) for c in t.categories}
    assert set(cats) == {"reduction", "other"}
    assert cats["reduction"][0] == 13 and cats["reduction"][1] == pytest.approx(reduce_ns / 1000)
    assert cats["other"][0] == 968 + 331


def con_sum(path: Path, short_name: str) -> int:
    """Return the summed duration (ns) of the export's kernels of one short name, straight from SQL."""
    con = sqlite3.connect(path)
    (ns,), = con.execute("SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s"
                         " ON s.id = k.shortName WHERE s.value = ?", (short_name,))
    con.close()
    return ns


SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, greenContextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER, shortName INTEGER, mangledName INTEGER);
"""
PID = 4242 << 24
MAIN, OTHER = PID + 1, PID + 2


def _build(path: Path, with_nvtx: bool = True) -> Path:
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    strings = {1: "cudaLaunchKernel_v7000", 2: "generalRmsNorm", 3: "nvjet_tst_gemm", 4: "Qwen2RMSNorm:layers.0.norm",
               5: "Qwen2DecoderLayer:layers.0", 6: "flash_fwd_kernel", 7: "decode_step:1"}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    if with_nvtx:
        nvtx = [  # (start, end, eventType, text, globalTid, textId)
            (0, 1000, 59, None, MAIN, 7),          # decode_step:1 (text via StringIds)
            (100, 600, 59, None, MAIN, 5),         # the layer
            (110, 200, 59, None, MAIN, 4),         # norm instance 1
            (300, 390, 59, "Qwen2RMSNorm:layers.0.norm2", MAIN, None),  # norm instance 2 (inline text)
            (700, 800, 59, "Qwen2RMSNorm:final", MAIN, None),  # a norm that launches nothing
            (0, 1000, 59, "other_thread_range", OTHER, None),  # must not capture MAIN's kernels
            (50, None, 59, "unclosed", MAIN, None),  # no end: ignored
            (5, 5, 34, "a mark", MAIN, None),  # marks are not ranges
        ]
        con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?,?,?,?,?,?)", nvtx)
    runtime = [  # (start, end, globalTid, correlationId): launches; 10 duplicated as older exports do
        (120, 130, MAIN, 10), (121, 129, MAIN, 10), (310, 320, MAIN, 11), (400, 410, MAIN, 12),
        (900, 910, MAIN, 13), (1100, 1110, MAIN, 14), (150, 160, OTHER, 20),
    ]
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) VALUES (?,?,?,?,1)", runtime)
    kernels = [  # (start, end, correlationId, name id): durations 5, 7, 20, 30, 40, 3 us
        (5000, 10000, 10, 2), (11000, 18000, 11, 2), (20000, 40000, 12, 3), (50000, 80000, 13, 6),
        (90000, 130000, 14, 3), (200000, 203000, 20, 3),
    ]
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId, globalPid, demangledName, shortName)"
                    f" VALUES (?,?,?,{PID},?,?)", [(*k, k[3]) for k in kernels])
    con.commit()
    con.close()
    return path


def test_built_schema_nvtx_kern_sum_semantics(tmp_path):
    t = table_from_sqlite(_build(tmp_path / "r.sqlite"))
    norm = t.range("Qwen2RMSNorm")
    assert (norm.instances, norm.kernels_per_instance_median, norm.total_us) == (3, 1, 12.0)
    assert norm.gpu_us_per_instance_median == 5.0  # 5, 7 and 0 us
    layer = t.range("Qwen2DecoderLayer")
    assert (layer.instances, layer.kernels_per_instance, layer.total_us) == (1, 3, 32.0)
    step = t.range("decode_step")
    assert (step.kernels_per_instance, step.total_us) == (4, 62.0)
    assert t.range("other_thread_range").kernels_per_instance == 1  # only OTHER's kernel
    assert t.range(NO_RANGE).kernels_per_instance == 1  # corr 14 launched after every range
    names = {r.range for r in t.ranges}
    assert "unclosed" not in names and "a mark" not in names
    cats = {c.category: c.kernels for c in t.categories}
    assert cats == {"norm": 2, "gemm": 3, "attention": 1}
    # host time per module range inside the step, the main thread's ranges only (ns -> µs): the layer's own
    # 500 - 90 - 90 ns, the three norms 280 ns, outside any module 1000 - 500 - 100 ns
    host = t.meta["decode_steps"]["host_us"]
    assert host == pytest.approx({"": 0.4, "Qwen2DecoderLayer": 0.32, "Qwen2RMSNorm": 0.28})
    inner = table_from_sqlite(tmp_path / "r.sqlite", innermost_only=True)
    assert inner.range("Qwen2DecoderLayer").kernels_per_instance == 1  # the gemm at 400
    assert inner.range("decode_step").kernels_per_instance == 1  # flash at 900


def test_a_librarys_own_nvtx_domain_is_left_out_when_the_harness_domain_is_there(tmp_path):
    """nsys records every library's NVTX ranges; torch.profiler sees only record_function's. The H200's
    eager window (2026-12-02) had CUB's `cub::DeviceScan::InclusiveScan` in the CCCL domain around 2
    kernels, a range group torch's table could not have. With the harness's domain in the export,
    only its ranges are read and the rest are counted in the info; without it, the default domain's where it holds
    the harness's decode steps (a session without the `nvtx` package), else every domain's."""
    path = _build(tmp_path / "r.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET domainId = 2")  # the harness's ranges, in its domain
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?,?,?,?,?,?)",
                    [(0, 0, 75, "CCCL", MAIN, 1), (0, 0, 75, "bench", MAIN, 2),
                     (390, 420, 59, "cub::DeviceScan::InclusiveScan", MAIN, 1)])  # around the gemm's launch at 400
    con.commit()
    con.close()
    kernels, instances, info = read_sqlite(path)
    assert "cub::DeviceScan::InclusiveScan" not in instances and "decode_step:1" in instances
    assert info["nvtx_domain"] == "bench" and info["nvtx_ranges_left_out"] == {"CCCL": 1}
    t = table_from_sqlite(path)
    assert t.range("decode_step").kernels_per_instance == 4 and t.range("Qwen2DecoderLayer").kernels_per_instance == 3
    assert [s["label"] for s in timeline_spans(path, "decode_step")["ranges"]] == ["decode_step:1"]
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = 'someone-else' WHERE eventType = 75 AND domainId = 2")
    con.commit()
    con.close()
    _, instances, info = read_sqlite(path)  # an export made outside the harness: every domain's ranges
    assert "cub::DeviceScan::InclusiveScan" in instances and info["nvtx_domain"] is None
    # a session without the `nvtx` package: the harness's ranges in NVTX's default domain (torch.cuda.nvtx), CUB's in
    # its own (the H100's eager window, 2026-12-06): the default domain's only
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET domainId = 0 WHERE domainId = 2")
    con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 75 AND domainId = 0")
    con.commit()
    con.close()
    _, instances, info = read_sqlite(path)
    assert "cub::DeviceScan::InclusiveScan" not in instances and "decode_step:1" in instances
    assert info["nvtx_domain"] == "(default)" and info["nvtx_ranges_left_out"] == {"CCCL": 1}
    assert table_from_sqlite(path).range("decode_step").kernels_per_instance == 4


def test_built_schema_without_nvtx_table(tmp_path):
    kernels, instances, info = read_sqlite(_build(tmp_path / "r.sqlite", with_nvtx=False))
    assert len(kernels) == 6 and instances == {} and all(k.ranges == () for k in kernels)


def test_bad_sqlite_files(tmp_path):
    (tmp_path / "x.sqlite").write_text("not a database at all, just text" * 10)
    with pytest.raises(BenchInputError, match="not an SQLite database"):
        read_sqlite(tmp_path / "x.sqlite")
    con = sqlite3.connect(tmp_path / "empty.sqlite")
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.commit()
    con.close()
    with pytest.raises(BenchInputError, match="CUPTI_ACTIVITY_KIND_KERNEL.*nsys profile -t cuda,nvtx"):
        read_sqlite(tmp_path / "empty.sqlite")
    with pytest.raises(BenchInputError, match="does not exist"):
        read_sqlite(tmp_path / "missing.sqlite")
    # an edited export whose NVTX times are text: the decode step's host spans are refused, never a traceback
    edited = _build(tmp_path / "edited.sqlite")
    con = sqlite3.connect(edited)
    con.execute("UPDATE NVTX_EVENTS SET start = 'soon', end = 'later' WHERE globalTid = ?", (MAIN,))
    con.commit()
    con.close()
    with pytest.raises(BenchInputError, match="edited or damaged"):
        table_from_sqlite(edited)


def _fake_nsys(tmp_path: Path, version_line: str) -> str:
    exe = tmp_path / "nsys"
    exe.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_find_nsys_missing_too_old_and_ok(tmp_path):
    with pytest.raises(BenchInputError, match="--nsys names .*no-nsys.*not an executable file.*--tool torch"):
        find_nsys(str(tmp_path / "no-nsys"))
    with pytest.raises(BenchInputError, match="too old"):
        find_nsys(_fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2021.3.1.54-ee9c30a"))
    path, version = find_nsys(_fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2024.5.1.113-245134619542v0"))
    assert version == (2024, 5, 1) and path.endswith("nsys")
    with pytest.raises(BenchInputError, match="cannot read a version"):
        parse_nsys_version("garbage")


def test_nsys_command_lines():
    cmd = profile_command("nsys", "/o/report", ["python3", "-m", "x"])
    assert cmd[:4] == ["nsys", "profile", "-t", "cuda,nvtx"]
    assert "--capture-range=cudaProfilerApi" in cmd and cmd[-3:] == ["python3", "-m", "x"]
    assert export_command("nsys", "r.nsys-rep", "r.sqlite") == [
        "nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", "r.sqlite", "r.nsys-rep"]


def test_find_nsys_order_explicit_env_path_then_install_folders(tmp_path, monkeypatch):
    # NVIDIA's layouts, as globs under a fake root: two Nsight Compute bundles (newest wins) and a toolkit copy.
    root = tmp_path / "opt"
    for folder in ("nsight-compute/2024.1.0/host/target-linux-x64", "nsight-compute/2025.3.1/host/target-linux-x64",
                   "cuda-12.8/bin"):
        (root / folder).mkdir(parents=True)
        _fake_nsys(root / folder, f"NVIDIA Nsight Systems version {'2024.1.1' if '2024' in folder else '2025.3.1.90'}-x")
    globs = (str(root / "nsight-systems/*/bin/nsys"), str(root / "cuda*/bin/nsys"),
             str(root / "nsight-compute/*/host/target-linux-x64/nsys"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(NSYS_ENV, raising=False)
    order = [p for p, _ in nsys_candidates(globs=globs)]
    assert order == [str(root / "cuda-12.8/bin/nsys"), str(root / "nsight-compute/2025.3.1/host/target-linux-x64/nsys"),
                     str(root / "nsight-compute/2024.1.0/host/target-linux-x64/nsys")]
    path, version = find_nsys(globs=globs[2:])
    assert path.endswith("2025.3.1/host/target-linux-x64/nsys") and version == (2025, 3, 1)
    on_path = tmp_path / "bin"
    on_path.mkdir()
    _fake_nsys(on_path, "NVIDIA Nsight Systems version 2024.5.1.113-1")
    monkeypatch.setenv("PATH", str(on_path))
    assert find_nsys(globs=globs)[1] == (2024, 5, 1)  # PATH before the install folders
    monkeypatch.setenv(NSYS_ENV, str(root / "nsight-compute/2024.1.0/host/target-linux-x64/nsys"))
    assert find_nsys(globs=globs)[1] == (2024, 1, 1)  # $BENCH_NSYS before PATH
    assert find_nsys(str(root / "cuda-12.8/bin/nsys"), globs=globs)[1] == (2025, 3, 1)  # --nsys before everything
    monkeypatch.setenv(NSYS_ENV, str(tmp_path / "gone"))
    with pytest.raises(BenchInputError, match=r"\$BENCH_NSYS names .*gone"):
        find_nsys(globs=globs)  # a wrong explicit setting is an error, not a silent fallback
    monkeypatch.delenv(NSYS_ENV)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BenchInputError, match="not on PATH, \\$BENCH_NSYS unset.*nsys-on-device.sh env"):
        find_nsys(globs=(str(root / "nothing/*/nsys"),))


def test_only_a_qdstrm_names_the_libdw_fix(tmp_path):
    (tmp_path / "report.qdstrm").write_bytes(b"raw")
    log = "Generating '/tmp/nsys-report-1.qdstrm'\nQdstrmImporter: error while loading shared libraries: libdw.so.1\n"
    with pytest.raises(BenchInputError, match=r"only .*report.qdstrm.*libdw.so.1.*apt-get install libdw1.*nsys-on-device.sh"):
        report_file(tmp_path, log)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchInputError, match="no report"):
        report_file(tmp_path / "empty")
    (tmp_path / "report.nsys-rep").write_bytes(b"rep")
    assert report_file(tmp_path) == tmp_path / "report.nsys-rep"


def test_export_schema_of_both_real_versions():
    _, _, old = read_sqlite(REAL / "saxpy-mpi-cuda_nsys2022.2.sqlite")
    _, _, new = read_sqlite(REAL / "cloverleaf-cuda_nsys2024.5.sqlite")
    assert (old["metadata_table"], old["nsys_version"], old["export_schema"]) == ("EXPORT_META_DATA", "2022.2.1.31", "2.9.1")
    assert (new["metadata_table"], new["nsys_version"], new["export_schema"]) == ("META_DATA_EXPORT", "2024.5.1.113", "3.13.2")
    assert "NVTX_EVENTS" in old["tables_read"] and "CUDA_GRAPH_EVENTS" in old["tables_read"]
    assert "NVTX_EVENTS" not in new["tables_read"]
    assert old["graph_kernels"] == new["graph_kernels"] == 0  # graphNodeId is NULL in both: no graphs replayed


def _build_graph(path: Path) -> Path:
    """An export shaped like a compiled decode step under --cuda-graph-trace=node: two steps, one graph launch
    each; node kernels carry graphNodeId and the launch's correlationId, except one whose correlationId is lost."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA.replace("mangledName INTEGER)", "mangledName INTEGER, graphNodeId INTEGER)"))
    strings = {1: "cudaGraphLaunch_v10000", 2: "triton_red_fused_add_mean_mul_pow_rsqrt_0", 3: "nvjet_tst_gemv",
               4: "decode_step:1", 5: "decode_step:2", 6: "cudaLaunchKernel_v7000", 7: "void at::native::copy_kernel"}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId) VALUES (?,?,59,?,?)",
                    [(0, 1000, MAIN, 4), (2000, 3000, MAIN, 5)])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) VALUES (?,?,?,?,?)",
                    [(100, 150, MAIN, 50, 1), (2100, 2150, MAIN, 60, 1), (3500, 3510, MAIN, 70, 6)])
    kernels = [  # (start, end, correlationId, name, graphNodeId)
        (200, 210, 50, 2, 11), (210, 260, 50, 3, 12), (2200, 2210, 60, 2, 11), (2210, 2260, 0, 3, 12),
        (3600, 3605, 70, 7, None),  # an ordinary launch after both steps
    ]
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, correlationId, globalPid, demangledName,"
                    f" shortName, graphNodeId) VALUES (?,?,?,{PID},?,?,?)", [(a, b, c, n, n, g) for a, b, c, n, g in kernels])
    con.commit()
    con.close()
    return path


def test_graph_node_kernels_sit_in_the_range_of_their_graph_launch(tmp_path):
    kernels, _, info = read_sqlite(_build_graph(tmp_path / "g.sqlite"))
    assert (info["graph_kernels"], info["graph_kernels_by_time"]) == (4, 1)
    t = table_from_sqlite(tmp_path / "g.sqlite")
    step = t.range("decode_step")
    assert (step.instances, step.kernels_per_instance, step.kernels_per_instance_median) == (2, 2, 2)
    assert step.kernels_per_instance_by_category == {"gemm": 1.0, "norm": 1.0}
    assert t.range(NO_RANGE).kernels_per_instance == 1  # the ordinary copy after the steps


@pytest.mark.parametrize("name", ["saxpy-mpi-cuda_nsys2022.2.sqlite", "cloverleaf-cuda_nsys2024.5.sqlite"])
def test_bench_kernels_imports_a_real_export_into_the_profile_tables(tmp_path, capsys, name):
    from bench.cli import main
    from bench.execution.kernels import KernelTable

    assert main(["kernels", str(REAL / name), "--out", str(tmp_path / "k")]) == 0
    printed = capsys.readouterr().out
    direct = table_from_sqlite(REAL / name)
    saved = KernelTable.load(tmp_path / "k" / "kernel_table.json")
    assert saved.rows == direct.rows and saved.categories == direct.categories  # the same table a profile run makes
    assert saved.meta["imported_from"].endswith(name)
    assert (tmp_path / "k" / "kernel_table.md").read_text() == saved.to_markdown()
    csv_lines = (tmp_path / "k" / "categories.csv").read_text().splitlines()
    assert csv_lines[0] == "category,kernels,total_us,share" and len(csv_lines) == 1 + len(direct.categories)
    assert f"{direct.total_kernels} kernels" in printed


def test_bench_kernels_bad_input(tmp_path, capsys):
    from bench.cli import main

    assert main(["kernels", str(tmp_path / "none.sqlite")]) == 2
    (tmp_path / "x.txt").write_text("x")
    assert main(["kernels", str(tmp_path / "x.txt")]) == 2
    assert "is not an nsys report" in capsys.readouterr().err
    assert main(["kernels", str(REAL / "saxpy-mpi-cuda_nsys2022.2.sqlite"), str(REAL / "saxpy-mpi-cuda_nsys2022.2.sqlite"),
                 "--out", str(tmp_path)]) == 2


# The two spellings of the same kernels that the H200's eager comparison printed (2026-12-01): torch.profiler's
# first, nsys's second. The GPU test diffs the two collectors' tables by this key.
SAME_KERNELS = [
    ("void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::native::"
     "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>>"
     "(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)",
     "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
     "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::"
     "TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::"
     "binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::"
     "native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<"
     "float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
     "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})",
     "at::native::elementwise_kernel"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::"
     "[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) "
     "(instance 1)], std::array<char *, (unsigned long)2>, (int)4, TrivialOffsetCalculator<(int)1, unsigned int>, "
     "TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, at::native::memory::"
     "StoreWithCast<(int)1>>(int, T1, T2, T4, T5, T6, T7)",
     "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, "
     "4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::"
     "LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::"
     "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
     "std::array<char*, 2ul>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
     "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)",
     "at::native::unrolled_elementwise_kernel"),
    # an anonymous namespace: CUPTI's spelling (as the H200's diff implies: torch's key was cut to `at::native::`)
    # and nsys's (seen in the same diff as `at::native::<unnamed>::CatArrayBatchedCopy`)
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<"
     "(unsigned int)2>, unsigned int, (int)3, (int)128, (int)1>(T1 *, at::native::(anonymous namespace)::"
     "CatArrInputTensorMetadata<T1, T2, T4, T5>, at::native::(anonymous namespace)::TensorSizeStride<T2, "
     "(unsigned int)4>, int, T2)",
     "void at::native::<unnamed>::CatArrayBatchedCopy<at::native::<unnamed>::OpaqueType<2u>, unsigned int, 3, 128, 1>"
     "(at::native::<unnamed>::OpaqueType<2u>*, at::native::<unnamed>::CatArrInputTensorMetadata<at::native::"
     "<unnamed>::OpaqueType<2u>, unsigned int, 128, 1>, at::native::<unnamed>::TensorSizeStride<unsigned int, 4u>, "
     "int, unsigned int)",
     "at::native::{anonymous}::CatArrayBatchedCopy"),
]


@pytest.mark.parametrize("torch_name,nsys_name,key", SAME_KERNELS, ids=["elementwise", "unrolled-copy", "anonymous-namespace"])
def test_one_key_for_a_kernel_as_both_collectors_spell_it(torch_name, nsys_name, key):
    from tests.support.kernel_names import base_name

    assert base_name(torch_name) == base_name(nsys_name) == key
    assert base_name("triton_red_fused_mean_pow_13") == "triton_red_fused_mean_pow_13"  # plain names stay
    assert base_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, "
                     "float, false, true>(internal::GemvParams<int, int>)") == "internal::gemvx::kernel"
    assert base_name("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64> >(Flash_fwd_params)") \
        == "flash::flash_fwd_kernel"
