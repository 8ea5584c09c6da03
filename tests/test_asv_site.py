"""asv's published site works offline: vendored copies of its CDN scripts, and a real page check in
headless Chromium on a site that asv itself publishes from a small suite run twice."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import asv_site
from tests.support import browser

asv = pytest.importorskip("asv")
ROOT = Path(__file__).resolve().parent.parent
ASV_INDEX = Path(asv.__file__).parent / "www" / "index.html"
needs_chromium = pytest.mark.skipif(browser.chromium() is None,
                                    reason="chromium not installed (nox -s tests installs it: apt-get install -y chromium)")

SUITE = '''
import os

def track_value():
    return float(os.environ["SITE_VALUE"])

track_value.unit = "ms"

class Params:
    params = [1, 2]
    param_names = ["n"]

    def track_scaled(self, n):
        return n * float(os.environ["SITE_VALUE"])

def time_sum():
    sum(range(1000))
'''


def test_every_cdn_address_of_the_installed_asv_has_a_vendored_copy():
    urls = re.findall(r'(?:src|href)="(https://[^"]+)"[^>]*integrity="([^"]+)"', ASV_INDEX.read_text())
    assert len(urls) == len(asv_site.VENDORED) == 10
    for url, integrity in urls:
        name, reason = asv_site.VENDORED[url]
        algorithm = integrity.split("-")[0]
        same = asv_site.sri(asv_site.ASSETS / name, algorithm) == integrity
        assert same or reason, f"{name} differs from {url} and VENDORED gives no reason"
    identical = [u for u, i in urls if asv_site.sri(asv_site.ASSETS / asv_site.VENDORED[u][0], i.split("-")[0]) == i]
    assert len(identical) == 5  # jQuery, bootstrap js+css, orderBars, md5: the CDN's very bytes


def test_localize_points_every_script_at_a_local_copy_once(tmp_path):
    shutil.copy(ASV_INDEX, tmp_path / "index.html")
    assert len(asv_site.localize(tmp_path)) == 10
    page = (tmp_path / "index.html").read_text()
    assert not re.search(r"<(script|link)\b[^>]*(src|href)=\"https?://", page)
    assert page.count('src="vendor/') == 9 and 'href="vendor/bootstrap.min.css"' in page
    assert "integrity=" not in page and sorted(p.name for p in (tmp_path / "vendor").iterdir()) == sorted(
        name for name, _ in asv_site.VENDORED.values())
    assert asv_site.localize(tmp_path) == []  # a second run finds nothing left to do
    assert (tmp_path / "index.html").read_text() == page


def test_unknown_cdn_address_is_refused(tmp_path):
    (tmp_path / "index.html").write_text('<html><head><script src="https://cdn.example.org/x.js"></script></head></html>')
    with pytest.raises(RuntimeError, match=r"https://cdn.example.org/x.js.*no copy"):
        asv_site.localize(tmp_path)


def test_a_copy_that_is_not_the_cdn_file_is_refused(tmp_path, monkeypatch):
    url = "https://code.jquery.com/jquery-3.3.1.min.js"
    fake = tmp_path / "assets"
    fake.mkdir()
    (fake / "jquery-3.3.1.min.js").write_text("/* not jQuery */")
    monkeypatch.setattr(asv_site, "ASSETS", fake)
    (tmp_path / "index.html").write_text(f'<script src="{url}" integrity="sha256-FgpCb/KJQlLNfOu91ta32o/NMZxltwRo8QtmkMRdAu8="></script>')
    with pytest.raises(RuntimeError, match="integrity differs"):
        asv_site.localize(tmp_path)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Return the html folder asv published from a three-benchmark suite run at two commits."""
    tmp = tmp_path_factory.mktemp("asvsite")
    commits = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--first-parent", "--max-count=2", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.split()
    if len(commits) < 2:
        pytest.skip("needs two commits in the checkout to label two asv result sets")
    (tmp / "suite").mkdir()
    (tmp / "suite" / "__init__.py").write_text("")
    (tmp / "suite" / "site_suite.py").write_text(SUITE)
    conf = {"version": 1, "project": "bench", "repo": str(ROOT), "branches": ["HEAD"], "dvcs": "git",
            "environment_type": "virtualenv", "benchmark_dir": str(tmp / "suite"), "env_dir": str(tmp / "env"), "results_dir": str(tmp / "results"),
            "html_dir": str(tmp / "html")}
    (tmp / "asv.conf.json").write_text(json.dumps(conf))
    env = {**os.environ, "HOME": str(tmp)}  # asv's machine file goes here, not in the user's home
    run = [sys.executable, "-m", "asv"]
    subprocess.run([*run, "machine", "--yes", "--config", str(tmp / "asv.conf.json")], env=env, check=True, capture_output=True)
    for commit, value in zip(reversed(commits), ("10", "12"), strict=True):
        out = subprocess.run([*run, "run", "--config", str(tmp / "asv.conf.json"), "-E", f"existing:{sys.executable}",
                              "--quick", "--set-commit-hash", commit], env={**env, "SITE_VALUE": value},
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
    subprocess.run([*run, "publish", "--config", str(tmp / "asv.conf.json")], env=env, check=True, capture_output=True)
    asv_site.localize(tmp / "html")
    return tmp / "html"


@needs_chromium
def test_published_site_draws_every_graph_without_errors(published):
    pages = {r["page"]: r for r in asv_site.check_site(published)}
    assert all(r["ok"] for r in pages.values()), pages
    assert set(pages) == {"grid", "list", "regressions", "site_suite.track_value", "site_suite.Params.track_scaled",
                          "site_suite.time_sum"}
    assert pages["grid"]["plots"] == 3  # one thumbnail per benchmark, each drawing its two commits
    # A graph page: the main plot and its overview, each with two commits (x2 parameters for Params).
    assert pages["site_suite.track_value"]["points"] == 4 and pages["site_suite.Params.track_scaled"]["points"] == 8


@needs_chromium
def test_check_reports_the_site_asv_publishes_unchanged(published, tmp_path):
    # Without localize() asv's pages fetch their libraries from CDNs: offline, asv sends the
    # browser to its error page, and the check must say so.
    raw = tmp_path / "raw"
    shutil.copytree(published, raw)
    (raw / "index.html").write_text(ASV_INDEX.read_text())
    (grid,) = asv_site.check_site(raw, graphs=0)[:1]
    assert not grid["ok"] and any("error page" in p for p in grid["problems"]), grid


@needs_chromium
def test_check_reports_script_errors_and_missing_files(published, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(published, broken)
    page = (broken / "index.html").read_text()
    page = page.replace("</head>", "<script>window.setTimeout(function () { undefinedFunction(); }, 10);</script>"
                                   '<script src="missing.js"></script></head>', 1)
    (broken / "index.html").write_text(page)
    (grid,) = asv_site.check_site(broken, graphs=0)[:1]
    text = " ".join(grid["problems"])
    assert "undefinedFunction" in text and "missing.js" in text and "HTTP 404" in text, grid
