"""`bench ARGS` in the test process (bench.cli.main), answered as subprocess.run answers a `python -m bench ARGS`.

For tests of what a command does, not of the process it runs in: the test process has imported torch,
transformers and plotly already, and its workers fork from the zygote it keeps for the whole suite
(bench.execution.zygote.shared), where a fresh `python -m bench` pays both again (seconds each; tens of
seconds over the suite). Tests of the process itself (exit on a signal, faulthandler, a fresh process's
imports, SIGKILL of the parent) keep their subprocess: tests/test_cli.py, tests/test_executor_local.py.
Warnings are not on stderr here: pytest records them (a test of a warning's text asks pytest.warns).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from pathlib import Path


def bench_in_process(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Return the exit status, stdout and stderr of `bench ARGS` run by bench.cli.main in folder `cwd`."""
    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's refusal (status 2, its usage on stderr), as the process exits
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(before)
    return subprocess.CompletedProcess(["bench", *args], code, out.getvalue(), err.getvalue())
