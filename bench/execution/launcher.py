"""The one worker launcher: every process that runs a cell starts, is killed and is judged here.

Run's workers (bench.execution.supervisor, which keeps its event stream and progress timeouts),
the OOM and capacity probes and `bench build` (through the supervisor), and the session-style
children of `bench profile`, `bench accuracy` and `bench parity` (`run_session`, or `start_session` where the
caller runs several at once: bench.execution.session_pool) all start through
this module, which:

- builds the child's environment (`child_env`): PYTHONPATH led by this package's root (the child
  imports the same `bench`, installed or not), PYTHONUNBUFFERED (its log is current when it
  dies) and BENCH_PARENT_PID, so the child dies with this process (`die_with_parent`);
- starts it in a process group of its own (`start`): Ctrl-C reaches this process alone, which then
  kills the child;
- kills by one rule (`kill_group`): SIGKILL to the whole group, then a wait. A profiler wrapping
  the child (ncu, nsys) dies with the child it started: killing ncu alone left its session
  replaying kernels on the H200 (2026-12-01: its log went on from kernel 1,174 to 1,182 after
  the timeout), holding the GPU while the next cell ran;
- writes each child's log to a file created new (`new_log`, `replace_log`), never appended to
  by another process, so a death is judged from that process's own output;
- classifies a death (`death`): bench.machine.failures.classify_exit on the log's tail, with the
  kernel OOM killer's counter as the evidence a SIGKILL needs to count as an out-of-memory;
- forks a worker from this invocation's zygote where the caller asks (`start(..., preload=...)`:
  bench.execution.zygote, the modules a worker imports loaded once), with the same group, log,
  environment and exit status; else, or where the zygote cannot (BENCH_ZYGOTE=0, another
  Python, an environment that differs in what is read at import, a dead zygote), a fresh process.
  The child's environment says when it was started (BENCH_LAUNCHED_AT) and, if fresh, why
  (BENCH_LAUNCH), for the worker's start-up breakdown.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from bench.execution import zygote
from bench.execution.zygote import PARENT_PID_ENV, parent_death_signal
from bench.machine.failures import classify_exit, killed_by_sigkill

LAUNCHED_AT_ENV = "BENCH_LAUNCHED_AT"  # time.time() when the launcher started the child
LAUNCH_ENV = "BENCH_LAUNCH"  # a fresh child asked to fork: "exec (why not forked)"
# The folder holding the `bench` package this process runs: the child imports the same one.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def child_env(extra: dict | None = None, *, drop: tuple[str, ...] = (), watch_parent: bool = True) -> dict[str, str]:
    """Return a child's environment: this process's, PYTHONPATH led by this package's root, PYTHONUNBUFFERED, `extra`.

    watch_parent: the child is started directly (not through a profiler that starts it in turn), so it gets
    BENCH_PARENT_PID and dies with this process; a wrapped child's parent is the wrapper, and the process
    group's kill reaches it instead. `drop`: variables the child must not inherit (a memory cap).
    """
    pythonpath = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": pythonpath, **(extra or {})}
    for name in (*drop, PARENT_PID_ENV):
        env.pop(name, None)
    if watch_parent:
        env[PARENT_PID_ENV] = str(os.getpid())
    return env


def die_with_parent() -> None:
    """In a child: ask Linux to SIGKILL this process when its parent dies; exit now if the parent is already gone.

    The parent is the process named by BENCH_PARENT_PID (`child_env`; a zygote's child: the zygote);
    without it, nothing is asked.
    """
    parent_pid = os.environ.get(PARENT_PID_ENV)
    if parent_pid:
        parent_death_signal(int(parent_pid))


def new_log(log_dir: Path, prefix: str, first: int = 1) -> tuple[Path, BinaryIO]:
    """Return (path, open binary file) of `<log_dir>/<prefix>-<time>-<n>.log` (the first free n from `first`), created here exclusively."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in itertools.count(first):
        path = log_dir / f"{prefix}-{stamp}-{n}.log"
        try:
            return path, open(path, "xb")
        except FileExistsError:
            continue
    raise AssertionError("unreachable")  # pragma: no cover


def replace_log(path: Path) -> BinaryIO:
    """Return `path` opened as a new file, created here exclusively; an earlier file of that name is unlinked first.

    A process still holding the earlier file (an orphan of a killed session) writes on into that one,
    never into this.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        path.unlink(missing_ok=True)
        try:
            return open(path, "xb")
        except FileExistsError:  # created again in between: unlink it again
            continue
    raise FileExistsError(f"{path} is created again as soon as it is removed: is another bench writing there?")


def start(argv: list[str], log: BinaryIO, env: dict[str, str], *, events: bool = False,
          preload: tuple[str, ...] | None = None):
    """Start argv in a process group of its own, writing its output to `log`; return its Popen (or ForkedProcess).

    events: a worker's shape: stdin and stdout are pipes (its job in, its event stream out) and only
    stderr goes to the log; otherwise stdout and stderr both go to the log and stdin is empty.
    preload: fork it from this invocation's zygote after importing these modules there (a worker's
    backend runtime); None: a fresh process. A fork that cannot be made starts a fresh process and
    says why on the log's first line.
    """
    env = {**env, LAUNCHED_AT_ENV: repr(time.time())}
    if preload is not None:
        proc, reason = _fork(argv, log, env, events, preload)
        if proc is not None:
            return proc
        log.write(f"[bench launcher] a fresh process, not a fork of the zygote: {reason}\n".encode())
        log.flush()
        env[LAUNCH_ENV] = f"exec ({reason})"
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if events else subprocess.DEVNULL,
        stdout=subprocess.PIPE if events else log,
        stderr=log if events else subprocess.STDOUT,
        env=env,
        start_new_session=True,  # Ctrl-C reaches the parent only; the parent kills the group
    )


def _fork(argv: list[str], log: BinaryIO, env: dict[str, str], events: bool, preload: tuple[str, ...]):
    """Return (the worker forked from the zygote, None), or (None, why it was not)."""
    reason = zygote.not_forkable(argv)
    log_name = getattr(log, "name", None)
    if reason is None and not isinstance(log_name, str):
        reason = "its log is not a named file"
    # The zygote's environment is this process's (child_env), not this request's: a job's own variables that are read at
    # import or at the interpreter's start (PYTHONPATH, sitecustomize) make that job's workers fresh processes instead.
    base = child_env()
    if reason is None and (name := zygote.difference(env, base)) is not None:
        reason = f"its {name} differs from this process's and is read at import"
    if reason is not None:
        return None, reason
    server = zygote.shared(base, lambda: new_log(Path(log_name).parent, "zygote")[1], PACKAGE_ROOT)
    if events:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        child_ends, ours = (in_r, out_w), (in_w, out_r)
        fds = (in_r, out_w, log.fileno())
    else:
        null = os.open(os.devnull, os.O_RDONLY)
        child_ends, ours = (null,), ()
        fds = (null, log.fileno(), log.fileno())
    log.flush()
    try:
        proc = server.spawn(argv, fds, env, tuple(preload))
    except zygote.Unavailable as exc:
        for fd in ours:
            os.close(fd)
        return None, str(exc)
    finally:
        for fd in child_ends:  # the child holds its own copies now
            os.close(fd)
    if events:
        proc.stdin, proc.stdout = os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")
    return proc, None


def kill_group(proc) -> None:
    """Kill a process started by `start` and every process of its group (SIGKILL); wait for it (a fork: its
    exit status comes from the zygote, which reaps it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def wait_or_kill(proc, grace_s: float) -> None:
    """Wait up to grace_s for a process to exit, then kill its group."""
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)


def log_tail(path: Path, n_bytes: int = 3000) -> str:
    """Return the last n_bytes of a log, decoded ('' if unreadable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n_bytes))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def oom_kill_counter() -> tuple[str, int] | None:
    """Return (file, count) of the kernel OOM killer's kills in this process's memory cgroup, or None if unreadable.

    Children inherit the parent's cgroup. The count is hierarchical: a kill of any process in
    the cgroup (or below) raises it. cgroup v2: memory.events; v1: memory.oom_control.
    """
    root = Path("/sys/fs/cgroup")
    v2, v1 = None, None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if controllers == "":
                v2 = rel.lstrip("/")
            elif "memory" in controllers.split(","):
                v1 = rel.lstrip("/")
    except (OSError, ValueError):
        pass
    candidates = [root / v2 / "memory.events"] if v2 else []
    candidates.append(root / "memory.events")  # a container's namespace root
    if v1:
        candidates.append(root / "memory" / v1 / "memory.oom_control")
    candidates.append(root / "memory" / "memory.oom_control")
    for path in candidates:
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return str(path), int(value)
        except (OSError, ValueError):
            continue
    return None


def oom_kill_evidence(before: tuple[str, int] | None, after: tuple[str, int] | None) -> str | None:
    """Return a sentence naming the evidence that the kernel's OOM killer acted between two counts, or None."""
    if before is None or after is None or before[0] != after[0] or after[1] <= before[1]:
        return None
    return f"the kernel's OOM killer: oom_kill in {after[0]} rose from {before[1]} to {after[1]} while it ran"


def _no_oom_evidence(before: tuple[str, int] | None) -> str:
    if before is None:
        return "no cgroup OOM-kill counter readable here, so not attributed to the kernel's OOM killer"
    return f"not the kernel's OOM killer: oom_kill in {before[0]} did not rise"


@dataclass(frozen=True)
class Death:
    """How a child ended without its result: its status (oom | error), in words, and its log's tail."""

    status: str
    text: str  # "exited with status 3", "killed by SIGKILL (the kernel's OOM killer: ...)"
    tail: str


def death(returncode: int | None, log_path: Path, kills_before: tuple[str, int] | None) -> Death:
    """Return how a child that ended without its result died, judged from its own log and exit status.

    kills_before: oom_kill_counter() when it started; a SIGKILL is an out-of-memory only if that count rose.
    """
    tail = log_tail(log_path)  # this process's own output, nobody else's
    evidence = None
    if killed_by_sigkill(returncode):
        evidence = oom_kill_evidence(kills_before, oom_kill_counter())
        text = "killed by SIGKILL (" + (evidence or _no_oom_evidence(kills_before)) + ")"
    else:
        text = f"exited with status {returncode}"
    return Death(classify_exit(returncode, tail, evidence), text, tail)


@dataclass(frozen=True)
class SessionOutcome:
    """How a session-style child ended.

    status: ok (it exited 0 and wrote its result file; the result says how its own work went),
    timeout (killed at its time limit), or oom / error (it died: `death`).
    """

    status: str
    result: dict | None  # the child's JSON result file, when status is ok
    log: Path
    returncode: int | None  # None: killed at its time limit
    wall_s: float  # the whole process, from start to exit
    error: str | None  # what went wrong, naming the log (None when ok)


class Session:
    """A session-style child started by `start_session`: `poll` it (the caller's own loop: bench.execution.session_pool
    runs several at once) or `wait` for it (`run_session`), `kill` it; its outcome is judged here either way."""

    def __init__(self, proc, result_file: Path, log_path: Path, timeout: float, what: str, kills, t0: float):
        self.proc, self.result_file, self.log_path = proc, Path(result_file), Path(log_path)
        self.timeout, self.what, self.kills, self.t0 = timeout, what, kills, t0
        self.started = time.perf_counter()  # the time limit counts from here: the child is running (a fork's request
        # waited for the zygote's imports first)

    def poll(self) -> SessionOutcome | None:
        """Return its outcome if it has ended (killed, with a timeout outcome, once past its time limit), else None."""
        returncode = self.proc.poll()
        if returncode is not None:
            return self._outcome(returncode)
        if time.perf_counter() - self.started > self.timeout:
            return self._timed_out()
        return None

    def wait(self) -> SessionOutcome:
        """Return its outcome once it has ended or been killed at its time limit. On Ctrl-C, or anything else, the
        child's whole process group is killed and the exception goes on."""
        try:
            returncode = self.proc.wait(timeout=max(self.timeout - (time.perf_counter() - self.started), 0.0))
        except subprocess.TimeoutExpired:
            return self._timed_out()
        except BaseException:  # Ctrl-C, or anything else: nothing of the child outlives this call
            self.kill()
            raise
        return self._outcome(returncode)

    def kill(self) -> None:
        """Kill the child's whole process group and wait for it."""
        kill_group(self.proc)

    def _timed_out(self) -> SessionOutcome:
        self.kill()
        return SessionOutcome("timeout", None, self.log_path, None, time.perf_counter() - self.t0,
                              f"{self.what} ran past {self.timeout:g} s; log {self.log_path}")

    def _outcome(self, returncode: int) -> SessionOutcome:
        wall_s, log_path, result_file = time.perf_counter() - self.t0, self.log_path, self.result_file
        if returncode == 0 and result_file.is_file():
            try:
                return SessionOutcome("ok", json.loads(result_file.read_text()), log_path, 0, wall_s, None)
            except ValueError as exc:
                return SessionOutcome("error", None, log_path, 0, wall_s,
                                      f"{self.what} wrote an unreadable result {result_file} ({exc}); log {log_path}")
        d = death(returncode, log_path, self.kills)
        return SessionOutcome(d.status, None, log_path, returncode, wall_s,
                              f"{self.what} {d.text}; log {log_path}:\n{d.tail}")


def start_session(argv: list[str], result_file: Path, log_path: Path, *, timeout: float, what: str = "session",
                  extra_env: dict | None = None, drop_env: tuple[str, ...] = (), watch_parent: bool = True,
                  preload: tuple[str, ...] | None = None) -> Session:
    """Start one session-style child (it writes one JSON result file) and return it without waiting (`Session`).

    The result file is removed first (an earlier run's must not pass for this one's) and the log is
    a new file at log_path. `what` names the child in the error text. preload: fork it from the
    zygote (`start`); None, the default: a fresh process. Its time limit counts from its start.
    """
    result_file = Path(result_file)
    result_file.unlink(missing_ok=True)
    env = child_env(extra_env, drop=drop_env, watch_parent=watch_parent)
    kills = oom_kill_counter()
    t0 = time.perf_counter()
    with replace_log(log_path) as log:  # the child writes to its own copy of the descriptor
        proc = start(argv, log, env, preload=preload)
    return Session(proc, result_file, Path(log_path), timeout, what, kills, t0)


def run_session(argv: list[str], result_file: Path, log_path: Path, *, timeout: float, what: str = "session",
                extra_env: dict | None = None, drop_env: tuple[str, ...] = (), watch_parent: bool = True,
                preload: tuple[str, ...] | None = None) -> SessionOutcome:
    """Run one session-style child (`start_session`) to its end or its timeout; return its outcome.

    On the timeout, or Ctrl-C (KeyboardInterrupt is raised again), the child's whole process group is
    killed.
    """
    return start_session(argv, result_file, log_path, timeout=timeout, what=what, extra_env=extra_env,
                         drop_env=drop_env, watch_parent=watch_parent, preload=preload).wait()
