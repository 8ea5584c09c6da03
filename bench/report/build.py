"""`bench report`: rebuild tables and the dashboard from stores, without running anything."""

from __future__ import annotations

from pathlib import Path

from bench.report.tables import aggregate, environment_note, speedup_table, to_csv, to_markdown
from bench.store import load_frame, load_records


def build_report(stores: list[str | Path], out_dir: str | Path, baseline: dict | None = None) -> dict[str, Path]:
    """Write speedup.md, speedup.csv and dashboard.html for the stores; return their paths."""
    from bench.report.dashboard import dashboard_html

    frame = load_frame(stores)
    tables = speedup_table(frame, baseline)
    envs = [r.get("environment") or {} for r in load_records(stores)]
    markdown = to_markdown(tables, environment_note(frame, envs))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "speedup.md", "csv": out / "speedup.csv", "dashboard": out / "dashboard.html"}
    _write(paths["markdown"], markdown)
    _write(paths["csv"], to_csv(tables))
    title = "bench: " + ", ".join(Path(s).stem for s in stores)
    _write(paths["dashboard"], dashboard_html(aggregate(frame), markdown, title))
    return paths


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
