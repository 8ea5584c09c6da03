"""`python -m bench.serving.transformers_serve` takes its server down on SIGTERM as on Ctrl-C, started or starting.

A stand-in `transformers` package on PYTHONPATH plays the server (the real one takes ~50 s to start on a CPU):
`serve --help` lists the flags, `serve` writes its pid and answers /health once READY exists.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

STANDIN = textwrap.dedent('''
    import http.server, os, sys, time
    from pathlib import Path
    here = Path(os.environ["STANDIN_DIR"])
    if "--help" in sys.argv:
        print("--host --port --device --continuous-batching"); sys.exit(0)
    (here / "server.pid").write_text(str(os.getpid()))
    while not (here / "READY").exists():
        time.sleep(0.05)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    port = int(sys.argv[sys.argv.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
''')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _start_helper(tmp_path: Path, ready: bool) -> tuple[subprocess.Popen, int]:
    pkg = tmp_path / "standin" / "transformers" / "cli"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "transformers.py").write_text(STANDIN)
    if ready:
        (tmp_path / "READY").write_text("")
    from bench.serving.transformers_serve import free_port

    env = {**os.environ, "STANDIN_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "standin"), str(Path(__file__).parents[1])])}
    helper = subprocess.Popen([sys.executable, "-m", "bench.serving.transformers_serve", str(tmp_path),
                               "--port", str(free_port()), "--log", str(tmp_path / "logs" / "serve.log")],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "server.pid").exists():
        assert helper.poll() is None and time.monotonic() < deadline, helper.stdout.read() if helper.poll() else "slow"
        time.sleep(0.05)
    return helper, int((tmp_path / "server.pid").read_text())


def _terminate_and_check(helper: subprocess.Popen, server: int) -> None:
    helper.send_signal(signal.SIGTERM)
    helper.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(server)
    if alive:
        os.kill(server, signal.SIGKILL)
    assert not alive, "SIGTERM to the helper left its server running"
    assert helper.returncode == 0


def test_sigterm_to_a_serving_helper_takes_its_server_down(tmp_path):
    helper, server = _start_helper(tmp_path, ready=True)
    deadline = time.monotonic() + 30
    out = ""
    while "serving" not in out and time.monotonic() < deadline:
        out += helper.stdout.readline()
    assert "serving" in out and (tmp_path / "logs" / "serve.log").exists()
    _terminate_and_check(helper, server)


def test_sigterm_while_the_server_starts_takes_it_down(tmp_path):
    helper, server = _start_helper(tmp_path, ready=False)  # it never answers /health
    _terminate_and_check(helper, server)
