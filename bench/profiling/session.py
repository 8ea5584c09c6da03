"""The profiling worker: loads one hf cell and profiles a short fixed window of it (`bench profile`'s session).

Runs in its own process (`python -m bench.profiling.session JOB.json RESULT.json`), like the measurement worker, so the
`bench profile` parent never touches the GPU and nsys or ncu can wrap exactly this process. After the load, the window
is bench.execution.profile_window.profile_window: the same rule a timed worker follows for `bench run
--profile-window` (the window, its warm-up and shapes, the unprofiled step, the tools).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def run_session(job: dict) -> dict:
    """Return the session's result: the window's wall times, the KernelTable (torch tool), file paths, the environment."""
    from bench.backends.registry import backend_class
    from bench.execution.profile_window import profile_window
    from bench.machine.environment import fingerprint
    from bench.spec.cells import BuildKey, Cell

    key = BuildKey.from_dict(job["build_key"])
    cell = Cell.from_dict(job["cell"])
    backend = backend_class(key.backend)()
    loaded = backend.load(backend.build(key, Path(job["engines_dir"])))
    result = profile_window(loaded, cell, job, Path(job["out_dir"]))
    result["environment"] = fingerprint(key.device)
    loaded.close()
    return result


def main(argv: list[str]) -> int:
    from bench.execution.launcher import die_with_parent

    die_with_parent()  # started by bench.execution.launcher: no session outlives its parent
    job = json.loads(Path(argv[0]).read_text())
    result = run_session(job)
    Path(argv[1]).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
