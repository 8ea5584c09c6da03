"""Records are data, not paths to anywhere (issue 47.2): a file a profile record names is read only under a store's
folder and only when it is of its kind; anything else is left out with a warning the report shows."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import pytest

from bench.cli import main
from bench.execution.kernels import AttributedKernel, build_kernel_table
from bench.report.record_files import RecordFileRefused, read_text, record_file
from bench.results.records import parse
from tests.support.synthetic import write_store

SECRET = "SECRET-CONTENT-of-a-file-outside-every-store"


def profile(cell_id: str, tool: str, **files) -> object:
    """Return a Profile record naming files (kernel_table at the top of extra, the others in extra.profile)."""
    table = files.pop("kernel_table", None)
    return parse({"schema_version": 2, "kind": "profile", "status": "ok", "cell_id": cell_id, "trial": 0,
                  "metrics": None, "cell": {"backend": "hf", "precision": cell_id, "max_batch_size": 1, "options": {}},
                  "context": {"run_id": "r", "command": "profile", "started_at": 1.0},
                  "extra": {"tool": tool, "kernel_table": table, "profile": {"tool": tool, **files}}})


def kernel_table(path: Path) -> str:
    table = build_kernel_table([AttributedKernel("triton_red_fused_rmsnorm_0", 2.0, (("LlamaRMSNorm", 1),))],
                               {"LlamaRMSNorm": {1}}, source="torch.profiler", unit="gpu_kernel")
    return str(table.save(path))


@pytest.fixture
def hostile(tmp_path):
    """Return (store folder, report folder): a profile store whose records name files outside it, and one inside."""
    secret = tmp_path / "elsewhere" / "secret.md"
    secret.parent.mkdir()
    secret.write_text(f"# roofline\n\n{SECRET}\n")
    (tmp_path / "elsewhere" / "kernel_table.json").write_text(json.dumps({"version": 2, "secret": SECRET}))
    store = tmp_path / "store"
    good = store / "m" / "ok-ncu"
    good.mkdir(parents=True)
    (good / "roofline.md").write_text("# roofline\n\nthe step against its roofline: GOOD-ROOFLINE\n")
    (store / "m" / "link.md").symlink_to(secret)
    (store / "m" / "binary.md").write_bytes(b"\xff\xfe" + SECRET.encode())
    records = [
        profile("abs", "ncu", roofline_md=str(secret), kernel_table=str(tmp_path / "elsewhere" / "kernel_table.json")),
        profile("dots", "ncu", roofline_md="../elsewhere/secret.md", kernel_table="../../elsewhere/kernel_table.json"),
        profile("link", "ncu", roofline_md="m/link.md"),
        profile("kind", "ncu", roofline_md="m/ok-ncu/../../../elsewhere/secret.md"),
        profile("binary", "ncu", roofline_md="m/binary.md"),
        profile("ok", "ncu", roofline_md=str(good / "roofline.md"), kernel_table=kernel_table(good / "kernel_table.json")),
    ]
    if Path("/etc/hostname").is_file():
        records.append(profile("etc", "ncu", roofline_md="/etc/hostname", kernel_table="../../../etc/hostname"))
    write_store(store / "p.jsonl", records)
    return store, tmp_path / "out"


def test_a_report_never_embeds_a_file_outside_its_stores(hostile, capsys):
    store, out = hostile
    assert main(["report", str(store / "p.jsonl"), "--report-dir", str(out)]) == 0
    console = capsys.readouterr()
    report, page = (out / "report.md").read_text(), (out / "dashboard.html").read_text()
    for text in (report, page, console.out, console.err):
        assert SECRET not in text
    if Path("/etc/hostname").is_file() and Path("/etc/hostname").read_text().strip():
        hostname = Path("/etc/hostname").read_text().strip()
        assert f"roofline\n\n{hostname}" not in report and "'/etc/hostname' of profile record etc" in report
    assert "GOOD-ROOFLINE" in report and "GOOD-ROOFLINE" in page  # the store's own file is read
    section = report.split("## Files the records name, left out")[1]
    for needle in ("is an absolute path outside the stores' folders", "climbs out of its store's folder (..)",
                   "leads outside its store's folder", "is not UTF-8 text"):
        assert needle in section and html.escape(needle) in page, needle
    assert "'../../elsewhere/kernel_table.json' of profile record dots" in section


def test_record_file_reads_only_its_kind_under_a_store_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "s"
    (store / "m" / "c-ncu").mkdir(parents=True)
    (store / "m" / "c-ncu" / "roofline.md").write_text("fine\n")
    (store / "m" / "c-ncu" / "roofline.json").write_text("{}")
    (store / "m" / "c-ncu" / "report.sqlite").write_text("not a database")
    (store / "m" / "c-ncu" / "big.md").write_bytes(b"x" * ((1 << 20) + 1))
    (store / "m" / "c-ncu" / "folder.md").mkdir()
    (store / "m" / "c-ncu" / "nul.md").write_bytes(b"a\x00b")
    bases = [store]
    assert record_file("m/c-ncu/roofline.md", "roofline_md", bases) == store / "m" / "c-ncu" / "roofline.md"
    # A store copied from the machine that profiled it: the last three parts of the name, under the store's folder.
    copied = record_file("/data/profiles/m/c-ncu/roofline.md", "roofline_md", bases)
    assert copied == store / "m" / "c-ncu" / "roofline.md" and read_text(copied, "roofline_md") == "fine\n"
    assert record_file("profiles/m/c-ncu/roofline.md", "roofline_md", bases) == copied
    cases = {
        "m/c-ncu/roofline.json": "is not a ncu roofline (.md file)",
        "m/c-ncu/big.md": "over the 1048576 a ncu roofline may be",
        "m/c-ncu/folder.md": "is not a regular file",
        "m/c-ncu/nul.md": "holds a NUL byte",
        "m/c-ncu/gone.md": "is missing",
        "/etc/passwd": "is an absolute path outside",
        "../s/m/c-ncu/roofline.md": "climbs out",
        "m/c\x00.md": "holds a NUL byte",
    }
    for name, why in cases.items():
        with pytest.raises(RecordFileRefused, match=why.replace("(", r"\(").replace(")", r"\)")):
            record_file(name, "roofline_md", bases)
    with pytest.raises(RecordFileRefused, match="does not start as one"):
        record_file("m/c-ncu/report.sqlite", "sqlite", bases)
    with pytest.raises(RecordFileRefused, match="is not a profiler trace"):
        record_file("m/c-ncu/roofline.md", "trace", bases)
    with pytest.raises(RecordFileRefused, match="is not a file name"):
        record_file(None, "kernel_table", bases)
    assert os.getcwd() == str(tmp_path)
