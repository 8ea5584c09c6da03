"""Make asv's published site work offline, and check it in headless Chromium.

    python -m scripts.asv_site [HTML_DIR] [--graphs N] [--screenshot PNG]

asv 0.6's pages load jQuery, flot, bootstrap and three small plugins from CDNs, so on a machine
without internet (this project's CPU machines, the GPU machine) the site shows only its error
page. `localize` points those tags at copies kept in vendor/asv-site/ (npm packages of the
versions asv names; LICENSES.txt there) and refuses a CDN address it has no copy for, so a newer
asv cannot silently produce a broken page.

`check_site` serves HTML_DIR on 127.0.0.1 (asv's pages read their JSON with XHR, which a
file:// page may not), opens the graph grid, the benchmark list, the regressions page and each
benchmark's graph, and reads back what a script injected into the served copy saw: errors
(exceptions, console.error, failed resource and XHR loads) and, for every flot plot on the page,
the number of points it draws. A page passes with no errors, no failed request, asv's network
error dialog empty, and every plot on it drawing at least one point.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "vendor" / "asv-site"

# CDN address in asv's index.html -> (copy in vendor/asv-site, why it may differ from the CDN's file).
# A copy without a reason must be byte-identical: its digest is checked against the page's
# integrity attribute. The two others are not published on npm in the form the CDN serves.
VENDORED = {
    "https://code.jquery.com/jquery-3.3.1.min.js": ("jquery-3.3.1.min.js", None),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js":
        ("jquery.flot.js", "flot 0.8.3 as npm ships it (not minified)"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js":
        ("jquery.flot.time.js", "flot 0.8.3 as npm ships it (not minified)"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js":
        ("jquery.flot.selection.js", "flot 0.8.3 as npm ships it (not minified)"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js":
        ("jquery.flot.categories.js", "flot 0.8.3 as npm ships it (not minified)"),
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": ("jquery.flot.orderBars.js", None),
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js":
        ("stupidtable.min.js", "stupid-table-plugin 1.1.3, the only release on npm; same $.fn.stupidtable API"),
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": ("md5.min.js", None),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": ("bootstrap.min.js", None),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": ("bootstrap.min.css", None),
}

_TAG = re.compile(r"<(script|link)\b[^>]*?\b(src|href)=\"(https?://[^\"]+)\"[^>]*>", re.S)

# Injected at the top of <head> of the served copy only. It records errors as they happen and,
# every 100 ms, writes them and the points of every flot plot into #bench-asv-status.
_HOOK = """<script>(function () {
  var errors = [];
  function rec(m) { errors.push(String(m).slice(0, 300)); }
  window.addEventListener('error', function (e) {
    var t = e.target;
    if (t && t !== window && (t.src || t.href)) { rec('failed to load ' + (t.src || t.href)); }
    else { rec((e.message || 'error') + ' at ' + (e.filename || '?') + ':' + (e.lineno || '?')); }
  }, true);
  window.addEventListener('unhandledrejection', function (e) { rec('unhandled rejection: ' + e.reason); });
  var consoleError = console.error;
  console.error = function () { rec(Array.prototype.join.call(arguments, ' ')); return consoleError.apply(console, arguments); };
  document.addEventListener('DOMContentLoaded', function () {
    if (window.jQuery) {
      jQuery(document).ajaxError(function (e, xhr, settings) { rec('XHR failed: ' + settings.url + ' (' + xhr.status + ')'); });
    }
    var status = document.createElement('div');
    status.id = 'bench-asv-status';
    status.hidden = true;
    document.body.appendChild(status);
    setInterval(function () {
      var points = [];
      document.querySelectorAll('canvas.flot-base').forEach(function (c) {
        var plot = window.jQuery && jQuery(c.parentNode).data('plot');
        var n = 0;
        if (plot) { plot.getData().forEach(function (s) { n += (s.data || []).filter(function (p) { return p && p[1] !== null; }).length; }); }
        points.push(n);
      });
      status.setAttribute('data-errors', JSON.stringify(errors));
      status.setAttribute('data-points', JSON.stringify(points));
      var boxes = Array.prototype.filter.call(document.querySelectorAll('.benchmark-plot, #main-graph'),
                                              function (d) { return d.offsetParent !== null; });
      status.setAttribute('data-boxes', String(boxes.length));
      status.setAttribute('data-path', location.pathname);
      status.setAttribute('data-error-message', (document.getElementById('error-message') || {}).textContent || '');
    }, 100);
  });
})();</script>"""


def sri(path: Path, algorithm: str) -> str:
    """Return the subresource-integrity value (e.g. 'sha256-...') of a file."""
    digest = hashlib.new(algorithm, path.read_bytes()).digest()
    return f"{algorithm}-{base64.b64encode(digest).decode()}"


def localize(html_dir: str | Path) -> list[str]:
    """Return the CDN addresses replaced after pointing html_dir's pages at the vendored copies.

    Copies go to html_dir/vendor/. Running it again on a localized site changes nothing."""
    html_dir = Path(html_dir)
    pages = sorted(html_dir.glob("*.html"))
    if not pages:
        raise FileNotFoundError(f"no HTML page in {html_dir}: run `asv publish` first")
    replaced: list[str] = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        new = _TAG.sub(lambda m, page=page: _local_tag(m.group(0), m.group(3), page.name, html_dir, replaced), text)
        if new != text:
            page.write_text(new, encoding="utf-8")
    return replaced


def _local_tag(tag: str, url: str, page: str, html_dir: Path, replaced: list[str]) -> str:
    """Return tag pointing at the vendored copy of url, after copying it to html_dir/vendor/."""
    if url not in VENDORED:
        raise RuntimeError(f"{page} loads {url}, which has no copy in {ASSETS}: add the file "
                           "and a line to VENDORED in scripts/asv_site.py (an asv upgrade?)")
    name, reason = VENDORED[url]
    src = ASSETS / name
    integrity = re.search(r'integrity="((sha\d+)-[^"]+)"', tag)
    if reason is None and (integrity is None or sri(src, integrity.group(2)) != integrity.group(1)):
        raise RuntimeError(f"{src} is not the file {url} serves (integrity differs)")
    (html_dir / "vendor").mkdir(exist_ok=True)
    shutil.copyfile(src, html_dir / "vendor" / name)
    replaced.append(url)
    # Same-origin copies need neither CORS nor SRI (both fail on file:// pages).
    tag = re.sub(r'\s(integrity|crossorigin|referrerpolicy)="[^"]*"', "", tag)
    return tag.replace(url, f"vendor/{name}")


@contextmanager
def serve(html_dir: Path):
    """Yield (base URL, list of (path, status) requested) while html_dir is served on 127.0.0.1."""
    requests: list[tuple[str, int]] = []
    root = Path(html_dir).resolve()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0]
            page = (root / (path.lstrip("/") or "index.html")).resolve()
            if page.suffix == ".html" and page.is_file() and page.is_relative_to(root):
                body = page.read_text(encoding="utf-8").replace("<head>", "<head>" + _HOOK, 1).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_request(self, code="-", size="-"):
            requests.append((self.path.split("?")[0], int(code)))

        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser hung up early: not news
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def open_page(url: str, timeout: float = 120, screenshot: Path | None = None) -> dict:
    """Return {errors, points, boxes, path, error_message, console} read from the page at url after it settles.

    points: per flot plot, the points it draws; boxes: the visible boxes asv made for plots."""
    from tests.support import browser

    if browser.chromium() is None:
        raise RuntimeError("no chromium binary on PATH (Debian: apt-get install -y chromium)")
    # A tall window: asv's grid draws a plot only once it is scrolled into view.
    size = "1400,1000" if screenshot else "1400,8000"
    args = [f"--window-size={size}", "--virtual-time-budget=8000", "--enable-logging=stderr", "--v=0"]
    args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    with tempfile.TemporaryDirectory(prefix="bench-chromium-") as profile:
        proc = subprocess.run([browser.chromium(), *browser.FLAGS, f"--user-data-dir={profile}", *args, url],
                              capture_output=True, text=True, timeout=timeout)
    console = re.findall(r':CONSOLE[^\]]*\] "(.*)", source:', proc.stderr)
    if screenshot:
        return {"console": console}
    m = re.search(r'<div id="bench-asv-status"([^>]*)>', proc.stdout)
    if not m:
        raise RuntimeError(f"{url}: the page wrote no status (chromium exit {proc.returncode}); "
                           f"stderr: {proc.stderr[-1500:]}")
    attrs = {k: html.unescape(v) for k, v in re.findall(r'data-([\w-]+)="([^"]*)"', m.group(1))}
    return {"errors": json.loads(attrs.get("errors", "[]")), "points": json.loads(attrs.get("points", "[]")),
            "boxes": int(attrs.get("boxes", "0")), "path": attrs.get("path", ""), "error_message": attrs.get("error-message", ""), "console": console}


def check_site(html_dir: str | Path, graphs: int | None = None) -> list[dict]:
    """Return one result per page checked: {page, ok, problems, plots, points}.

    Pages: the graph grid, the benchmark list, the regressions page and the graph of each
    benchmark in index.json (the first `graphs` of them, if given)."""
    html_dir = Path(html_dir)
    index = json.loads((html_dir / "index.json").read_text())
    names = sorted(index["benchmarks"])[:graphs] if graphs is not None else sorted(index["benchmarks"])
    pages = [("grid", ""), ("list", "#summarylist"), ("regressions", "#regressions")]
    pages += [(name, "#" + name) for name in names]
    out = []
    with serve(html_dir) as (base, requests):
        for label, fragment in pages:
            before = len(requests)
            seen = open_page(f"{base}/index.html{fragment}")
            problems = list(seen["errors"])
            problems += [f"console: {line}" for line in seen["console"] if "Uncaught" in line or "rror" in line]
            problems += [f"HTTP {code} for {path}" for path, code in requests[before:] if code >= 400]
            if seen["path"] != "/index.html":  # asv's own reaction to a script that failed to load
                problems.append(f"the browser ended on {seen['path']}, asv's error page: a library failed to load")
            if seen["error_message"].strip():
                problems.append(f"asv's error dialog: {seen['error_message'].strip()}")
            plots = len(seen["points"])
            # The list and regressions pages draw no plot; on the grid and graph pages every box
            # asv made for a plot must hold one that draws at least one point.
            if label not in ("list", "regressions") and (plots == 0 or plots < seen["boxes"] or min(seen["points"]) == 0):
                problems.append(f"{plots} plots in {seen['boxes']} boxes, points per plot {seen['points']}")
            out.append({"page": label, "ok": not problems, "problems": problems, "plots": plots,
                        "points": sum(seen["points"])})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html_dir", nargs="?", default="dashboards/asv")
    ap.add_argument("--graphs", type=int, help="check only the first N benchmarks' graph pages")
    ap.add_argument("--screenshot", type=Path, help="also save a PNG of the graph grid here")
    args = ap.parse_args(argv)
    replaced = localize(args.html_dir)
    print(f"asv site {args.html_dir}: {len(replaced)} CDN references now point at vendor/ copies")
    from tests.support import browser

    if browser.chromium() is None:
        print("not opened: no chromium on PATH (Debian: apt-get install -y chromium)")
        return 0
    results = check_site(args.html_dir, args.graphs)
    for r in results:
        verdict = "ok" if r["ok"] else "FAILED: " + "; ".join(r["problems"])
        print(f"  {r['page']}: {r['plots']} plots, {r['points']} points drawn, {verdict}")
    if args.screenshot:
        with serve(Path(args.html_dir)) as (base, _):
            open_page(f"{base}/index.html", screenshot=args.screenshot.resolve())
        print(f"  screenshot: {args.screenshot}")
    bad = [r for r in results if not r["ok"]]
    print(f"{len(results) - len(bad)}/{len(results)} pages ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
