"""Open a dashboard in headless Chromium and read back the status the page writes about itself.

No browser-automation dependency: `chromium --headless --dump-dom` runs the page's scripts and
prints the DOM, where the dashboard's #bench-status element holds figures expected/drawn,
errors caught, network resources loaded and milliseconds to ready. `--screenshot` keeps a picture.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars"]


def chromium() -> str | None:
    """Return the path of a Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="bench-chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


def page_status(path: str | Path, fragment: str = "", timeout: float = 120, budget_ms: int = 0) -> dict:
    """Return the page's #bench-status attributes after loading it, plus wall_s and the DOM (key 'dom')."""
    if chromium() is None:
        raise RuntimeError("no chromium binary on PATH (Debian: apt-get install -y chromium)")
    url = Path(path).resolve().as_uri() + fragment
    t0 = time.perf_counter()
    # No virtual time by default: the page draws synchronously before load, and ready-ms stays real time.
    proc = _run(([f"--virtual-time-budget={budget_ms}"] if budget_ms else []) + ["--dump-dom", url], timeout)
    wall = time.perf_counter() - t0
    m = re.search(r"<div id=\"bench-status\"([^>]*)>", proc.stdout)
    if not m:
        raise RuntimeError(f"page wrote no status (chromium exit {proc.returncode}): {proc.stderr[-2000:]}")
    attrs = {k: html.unescape(v) for k, v in re.findall(r'data-([\w-]+)="([^"]*)"', m.group(1))}
    for k in ("errors", "resources"):
        if k in attrs:
            attrs[k] = json.loads(attrs[k])
    for k in ("expected", "drawn", "ready-ms"):
        if k in attrs:
            attrs[k] = int(attrs[k])
    attrs["wall_s"] = wall
    attrs["dom"] = proc.stdout
    return attrs


def screenshot(path: str | Path, png: str | Path, size: str = "1400,2600", timeout: float = 120) -> Path:
    """Return png after writing a screenshot of the page there."""
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    proc = _run([f"--window-size={size}", "--virtual-time-budget=5000", f"--screenshot={png}",
                 Path(path).resolve().as_uri()], timeout)
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return png
