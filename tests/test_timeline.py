"""The kernel timeline from an nsys SQLite export: spans from the real exports (tests/data/nsys), the plotly
figure, and the dashboard that draws it (headless Chromium where installed, as tests/test_dashboard.py)."""

import sqlite3
from pathlib import Path

import pytest

from bench.profiling.nsys_collector import table_from_sqlite, timeline_spans
from bench.report.build import build_report
from bench.report.kernel_figures import CATEGORY_COLORS, kernel_timeline
from bench.results.records import parse
from tests.support import browser
from tests.support.dashboard import dashboard_figures
from tests.support.synthetic import write_store

REAL = Path(__file__).resolve().parent / "data" / "nsys"
SAXPY = REAL / "saxpy-mpi-cuda_nsys2022.2.sqlite"


def _saxpy_by_sql(n: int) -> list[tuple[float, float]]:
    """(kernel start, kernel end) in us from the start of each of the first n `saxpy` ranges, straight from SQL."""
    con = sqlite3.connect(SAXPY)
    ranges = con.execute("SELECT start FROM NVTX_EVENTS WHERE COALESCE(text, (SELECT value FROM StringIds WHERE"
                         " id = textId)) = 'saxpy' ORDER BY start LIMIT ?", (n,)).fetchall()
    kernels = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT ?", (n,)).fetchall()
    con.close()
    return [((ks - rs) / 1000, (ke - rs) / 1000) for (rs,), (ks, ke) in zip(ranges, kernels, strict=True)]


def test_spans_of_the_real_nsys2022_export():
    spans = timeline_spans(SAXPY, None, limit=3)  # no decode steps there: the group of the first launching range
    assert spans["group"] == "saxpy" and len(spans["ranges"]) == 3
    assert [k["range"] for k in spans["kernels"]] == ["saxpy"] * 3 and {k["category"] for k in spans["kernels"]} == {
        "elementwise"}
    for k, (start, end) in zip(spans["kernels"], _saxpy_by_sql(3), strict=True):
        assert (k["start_us"], k["end_us"]) == (pytest.approx(start), pytest.approx(end))
    assert timeline_spans(SAXPY, "decode_step")["ranges"] == []
    assert timeline_spans(REAL / "cloverleaf-cuda_nsys2024.5.sqlite", None)["ranges"] == []  # no NVTX table


def test_figure_rows_and_colours():
    fig = kernel_timeline(timeline_spans(SAXPY, None, limit=2), "t <b>")
    ranges, saxpy = fig["data"]
    assert ranges["name"] == "NVTX range (CPU)" and ranges["y"] == ["saxpy · CPU range"] * 2
    assert saxpy["name"] == "elementwise" and saxpy["marker"]["color"] == CATEGORY_COLORS["elementwise"]
    assert all(x > 0 for x in saxpy["x"]) and saxpy["y"] == ["saxpy · GPU kernels"] * 2
    assert fig["layout"]["title"]["text"] == "t &lt;b&gt;"  # escaped, as every figure title


def _nsys_record(tmp_path: Path, sqlite: Path) -> Path:
    import shutil

    table = table_from_sqlite(sqlite).save(tmp_path / "m" / "c-nsys" / "kernel_table.json")
    # Beside the store, as `bench profile` writes it: a report opens only files under its stores' folders.
    sqlite = Path(shutil.copy(sqlite, tmp_path / "m" / "c-nsys" / "report.sqlite"))
    rec = parse({"schema_version": 2, "kind": "profile", "status": "ok", "cell_id": "c", "trial": 0, "metrics": None,
                 "cell": {"backend": "hf", "precision": "bf16", "max_batch_size": 1, "options": {}},
                 "context": {"run_id": "r", "command": "profile", "started_at": 1.0},
                 "extra": {"tool": "nsys", "kernel_table": str(table),
                           "profile": {"tool": "nsys", "sqlite": str(sqlite)}}})
    write_store(tmp_path / "p.jsonl", [rec])
    return tmp_path / "p.jsonl"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tl")
    return build_report([_nsys_record(tmp, SAXPY)], tmp / "out")["dashboard"]


def test_dashboard_carries_the_timeline(page):
    text = page.read_text()
    figs = dashboard_figures(text)
    (tl,) = [f for f in figs if f["layout"]["title"]["text"].startswith("Kernel timeline (nsys)")]
    assert len(tl["data"][1]["x"]) == 3  # the first three saxpy ranges' kernels
    report = (page.parent / "report.md").read_text()  # the per-step table names the tool of each row
    assert "| batch | tool | per |" in report and "| bf16 | 1 | nsys | window (x1) | 5 |" in report


@pytest.mark.skipif(browser.chromium() is None,
                    reason="chromium not installed (nox -s tests installs it: apt-get install -y chromium)")
def test_timeline_draws_in_chromium(page):
    status = browser.page_status(page, "#all")
    assert status["errors"] == [] and status["resources"] == []
    assert status["drawn"] == status["expected"] >= 2, status  # the kernel bars and the timeline
