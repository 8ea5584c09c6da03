"""Read the data a dashboard page embeds: the JSON block (`<script type='application/json' id='bench-data'>`)
from which its scripts draw every figure (bench.report.dashboard)."""

from __future__ import annotations

import json

MARK = "id='bench-data'>"


def dashboard_data(page: str) -> dict:
    """Return the page's embedded data: {"figures": [...], ...}."""
    data = page[page.index(MARK) + len(MARK):]
    return json.loads(data[: data.index("</script>")])


def dashboard_figures(page: str) -> list[dict]:
    """Return the page's figures (plotly specs: data and layout)."""
    return dashboard_data(page)["figures"]
