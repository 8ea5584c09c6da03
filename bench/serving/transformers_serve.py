"""Start and stop transformers' own OpenAI-compatible server (`transformers serve`) on a local port.

The serving tests, the peer comparison (benchmarks/) and the GPU sweep all run it the same way:
a subprocess of `python -m transformers.cli.transformers serve MODEL_DIR` (the `transformers`
console script, found through the running interpreter) on 127.0.0.1, offline (HF_HUB_OFFLINE),
its output in a log file, ready once GET /health answers (transformers 5.17's /v1/models fails
with HTTP 500 on a machine without a Hugging Face cache: send `model_name` = the model directory). Continuous batching (paged
attention) is on by default; flags this transformers version does not have are left out, with
what was left out in `ServeProcess.dropped_flags`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.interrupts import sigterm_as_ctrl_c


def free_port() -> int:
    """Return a loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_help(python: str = sys.executable) -> str:
    """Return `transformers serve --help` of this interpreter's transformers (which flags it has)."""
    out = subprocess.run([python, "-m", "transformers.cli.transformers", "serve", "--help"], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    return out.stdout + out.stderr


@dataclass
class ServeProcess:
    proc: subprocess.Popen
    base_url: str
    log_path: Path
    command: list[str]
    dropped_flags: list[str] = field(default_factory=list)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace_s: float = 3.0) -> None:
        """Stop the server (SIGINT; SIGKILL after grace_s: its generation thread may not stop) and wait for it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start(model_dir: str | Path, log_path: str | Path, *, port: int | None = None, device: str = "cpu",
          continuous_batching: bool = True, flags: dict[str, str] | None = None, check_flags: bool = True,
          ready_timeout_s: float = 600.0, python: str = sys.executable) -> ServeProcess:
    """Return a running `transformers serve` of model_dir, ready to answer; RuntimeError with its log if it is not.

    flags: further `--name value` flags (e.g. {"--cb-num-blocks": "64"}); with check_flags, any this version's
    `serve --help` lacks is dropped (reading the help costs one more start of transformers' CLI).
    """
    port = port or free_port()
    wanted = {"--continuous-batching": ""} if continuous_batching else {}
    wanted.update(flags or {})
    help_text = serve_help(python) if check_flags and wanted else None
    dropped = [f for f in wanted if help_text is not None and f not in help_text]
    cmd = [python, "-m", "transformers.cli.transformers", "serve", str(model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--device", device]
    for flag, value in wanted.items():
        if flag not in dropped:
            cmd += [flag] + ([value] if value != "" else [])
    log_path = Path(log_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # its own process group: stop() ends its threads too
    server = ServeProcess(proc, f"http://127.0.0.1:{port}", log_path, cmd, dropped)
    try:
        return _wait_ready(server, ready_timeout_s)
    except BaseException:  # Ctrl-C or SIGTERM while it starts: take it down with us
        server.stop()
        raise


def _wait_ready(server: ServeProcess, ready_timeout_s: float) -> ServeProcess:
    proc, cmd, log_path = server.proc, server.command, server.log_path
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"`transformers serve` exited with status {proc.returncode} before it answered; "
                               f"command {' '.join(cmd)}; log {log_path}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(server.base_url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"`transformers serve` did not answer within {ready_timeout_s:g} s; log {log_path}:\n"
                       f"{server.log_tail()}")


def main(argv: list[str] | None = None) -> int:
    """Serve MODEL_DIR with `transformers serve` on 127.0.0.1 until Ctrl-C (the recipe the docs give)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.serving.transformers_serve",
                                description="Start transformers' OpenAI-compatible server (`transformers serve`) of a "
                                            "model directory on 127.0.0.1, offline, and keep it running until Ctrl-C "
                                            "(write a random-weight one with `python -m bench.serving.model_dir`).")
    p.add_argument("model_dir")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--no-continuous-batching", action="store_true")
    p.add_argument("--log", default="results/transformers-serve.log",
                   help="the server's output (default results/transformers-serve.log: under the git-ignored results/)")
    args = p.parse_args(argv)
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    # SIGTERM (kill, a CI job's end, systemd) runs the same cleanup as Ctrl-C: the server has its own process
    # group, so without this it would outlive us, holding its port.
    try:
        with sigterm_as_ctrl_c():
            return _serve(args)
    except KeyboardInterrupt:
        return 0


def _serve(args) -> int:
    """Start the server and wait for it; Ctrl-C (or SIGTERM, through bench.interrupts) stops it."""
    server = start(args.model_dir, args.log, port=args.port, device=args.device,
                   continuous_batching=not args.no_continuous_batching)  # stops its server if interrupted
    print(f"serving {args.model_dir} at {server.base_url} (log {args.log}); in the matrix: base_url = "
          f"\"{server.base_url}\", model_name = \"{args.model_dir}\"; Ctrl-C stops it", flush=True)
    try:
        while server.proc.poll() is None:
            time.sleep(1.0)
        print(f"the server exited with status {server.proc.returncode}; log {args.log}:\n{server.log_tail()}")
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
