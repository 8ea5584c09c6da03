"""The fork server (zygote): one process per invocation that has imported the workers' libraries, each worker a fork of it.

A worker's start used to be mostly imports (torch and transformers: 10.2 s of a 7B-shape
worker's 7.8-13.0 s before its first pass on the H200, 2026-12-02). The zygote pays them once:
started at the first worker of an invocation (`Zygote`, from bench.execution.launcher.start), it
imports what the request names (`preload`: a backend's runtime module and the modules its
`PRELOAD` lists) and forks; the child is the worker. The launcher's contract is unchanged:

- the child calls setsid, so the process group to kill is its own (launcher.kill_group);
- its stdin, stdout and stderr are the descriptors the launcher sent (dup2'd onto 0, 1, 2: the
  job pipe, the event pipe or the log, the log file);
- its environment is the one the launcher built (os.environ replaced before the worker's code
  runs), with BENCH_PARENT_PID naming the zygote, its parent;
- the zygote reaps it and sends its exit status over the socket (`ForkedProcess.wait`), as
  Popen's returncode (negative: killed by that signal).

What the zygote keeps true, or it is not used (the launcher then starts `python -m ...` as before):
it never runs a torch op and no CUDA context exists in it (checked after every import: torch's
lazy state, and the CUDA driver's own count, which fails until cuInit ran); it runs one Python
thread; torch's import-time availability check goes through NVML (PYTORCH_NVML_BASED_CUDA_CHECK),
which does not initialise CUDA, and so do the compute-capability questions torchao asks at import
(bench.execution.preload). A request whose environment differs from the zygote's in a
variable that is read at import (anything but `LATE_KEYS` and `BENCH_*`) is refused, as is a
Python other than this one or an argv that is not `python -m MODULE ...` / `python -c CODE ...`.

A fork is not a fresh process in what was fixed before it: the hash seed (PYTHONHASHSEED) and
the addresses of the imported libraries are the zygote's in every worker of an invocation;
everything after the fork (the CUDA context, the weights, allocations, compilation and tuning) is
the worker's own. BENCH_ZYGOTE=0 gives pyperf's fully fresh processes where that matters.

Lifetime: the zygote dies with the process that started it (PR_SET_PDEATHSIG from the thread that
reads its socket, which lives as long as the zygote; and the socket's end-of-file), killing the
process groups of its children; a child dies with the zygote (PR_SET_PDEATHSIG). A zygote that dies
is not restarted: the launcher falls back to fresh processes for the rest of the invocation.
Workers of CUDA cells fork as CPU cells' do: the GPU test (tests/test_zygote.py) passed on an H100,
2026-12-06, where every worker of the h200-study preset was a fork. `BENCH_ZYGOTE=0` turns it off. Only standard-library imports here: the launcher imports this module.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

from bench.execution.preload import cuda_state, preload

PARENT_PID_ENV = "BENCH_PARENT_PID"
SWITCH_ENV = "BENCH_ZYGOTE"  # "0": never fork workers from a zygote
# Variables a forked worker may have that differ from the zygote's: read after import, when they are used
# (CUDA at its first call; Inductor's and Triton's cache folders at each compile), bench's own (BENCH_*), and
# pytest's marker of the running test (read by nothing at import; it differs in every test).
LATE_KEYS = ("CUDA_VISIBLE_DEVICES", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "PYTEST_CURRENT_TEST")
LATE_PREFIX = "BENCH_"
# Set in the zygote only: torch.cuda.is_available() during an import then asks NVML, which does not initialise CUDA.
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
REPLY_TIMEOUT_S = 900.0  # the first request waits for the zygote's imports (10 s on the H200, minutes on a slow disk)
MAX_MESSAGE = 1 << 20


def late(name: str) -> bool:
    """Return whether environment variable `name` may differ between the zygote and a worker forked from it."""
    return name in LATE_KEYS or name.startswith(LATE_PREFIX)


class Unavailable(Exception):
    """This request cannot be forked from the zygote (the reason says why); the launcher starts a fresh process."""


def parent_death_signal(parent_pid: int | None) -> None:
    """Ask Linux to SIGKILL this process when its parent (thread) dies; exit now if the parent is not parent_pid."""
    if not sys.platform.startswith("linux") or not parent_pid:
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # it died before prctl: nobody would ever read our results
        os._exit(1)


# --- in a forked worker --------------------------------------------------------------------------

FORKED: dict | None = None  # in a forked worker: {"zygote_pid", "preload_s"}; None in any other process


def forked() -> dict | None:
    """Return what the zygote says of this process when it is a forked worker (its preload time), else None."""
    return FORKED


# --- the zygote process --------------------------------------------------------------------------

def _send(sock: socket.socket, message: dict) -> bool:
    try:
        sock.send(json.dumps(message).encode())
        return True
    except OSError:  # the parent is gone
        return False


def _reap(sock: socket.socket, children: set[int]) -> bool:
    """Reap every child that ended and report its exit status; return False if the parent is gone."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        children.discard(pid)
        if not _send(sock, {"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}):
            return False
    return True


def _serve(sock: socket.socket, parent_pid: int):
    """Serve fork requests until the parent goes; return None there, or (request, fds, preload seconds) in a child."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # a SIGCHLD wakes select: a child's exit is reported at once
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    while True:
        ready = select.select([sock, wake_r], [], [], 1.0)[0]
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        if not _reap(sock, children) or os.getppid() != parent_pid:
            break
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 8)
        except OSError:
            break
        if not data:  # the parent closed its end: the invocation is over
            break
        request = json.loads(data)
        try:
            preload_s = preload(request.get("preload") or [])
            unsafe = cuda_state()
        except ImportError as exc:
            _close(fds)
            if not _send(sock, {"id": request["id"], "refused": str(exc)}):
                break
            continue
        if unsafe:
            _close(fds)
            _send(sock, {"id": request["id"], "refused": f"the zygote cannot fork safely: {unsafe}", "fatal": True})
            break
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_r)
            os.close(wake_w)
            return request, fds, preload_s
        _close(fds)
        children.add(pid)
        if not _send(sock, {"id": request["id"], "pid": pid}):
            break
    for pid in children:  # the invocation is over: nothing it started outlives it
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    return None


def _close(fds) -> None:
    for fd in set(fds):
        try:
            os.close(fd)
        except OSError:
            pass


def _run_child(sock: socket.socket, request: dict, fds: list[int], preload_s: float) -> None:
    """In the forked child: become the worker the request describes (its group, descriptors, environment, argv); never
    returns."""
    global FORKED
    # What the zygote imported is the worker's for its whole life: frozen, no collection walks it again (the gc
    # documentation's advice for a fork without exec; it also leaves those pages shared with the zygote). A full
    # collection in a worker walked torch's and transformers' 200,000 objects: 0.1-0.2 s each, two per accuracy
    # session in its close, 1 s of a profiling window's 1,400 collections (measured on the 2-core CPU VM, 2026-12-07).
    gc.freeze()
    os.setsid()  # a process group of its own: the launcher's kill reaches it and whatever it starts
    zygote_pid = os.getppid()
    parent_death_signal(zygote_pid)
    sock.close()
    for target, index in enumerate(request["fds"]):
        os.dup2(fds[index], target)
    _close([fd for fd in fds if fd > 2])
    env = dict(request["env"])
    if PARENT_PID_ENV in env:
        env[PARENT_PID_ENV] = str(zygote_pid)  # its parent is the zygote, with which it dies (die_with_parent)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    FORKED = {"zygote_pid": zygote_pid, "preload_s": preload_s}
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # as a fresh process seeds it (Python's `random` reseeds itself after a fork)
        numpy.random.seed()
    flag, target, *args = request["argv"]
    try:
        if flag == "-c":
            sys.argv = ["-c", *args]
            sys.path[0] = ""
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            import runpy
            import warnings

            sys.argv = [target, *args]
            sys.path[0] = os.getcwd()  # as `python -m` sets it
            # The preload imported the module; running it as __main__ is what `python -m` does, a second copy.
            warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                                    category=RuntimeWarning)
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - as the interpreter ends on an uncaught exception: its traceback, status 1
        sys.excepthook(*sys.exc_info())
        code = 1
    _exit(code)


def _exit(code) -> None:
    """End a forked worker as a fresh process ends, less the teardown of every module the zygote imported (a second or
    more with torch loaded): its non-daemon threads joined, its atexit handlers run, its output flushed, then os._exit.
    multiprocessing's forked children end the same way."""
    import atexit

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


def main(argv: list[str]) -> int:
    """The zygote's entry: serve the socket inherited as argv[0]; in a forked child, run its worker."""
    sock = socket.socket(fileno=int(argv[0]))
    parent_pid = int(os.environ.get(PARENT_PID_ENV) or os.getppid())
    parent_death_signal(parent_pid)
    child = _serve(sock, parent_pid)
    if child is None:  # the invocation is over; the zygote holds nothing to save or flush but its output
        sys.stdout.flush()
        sys.stderr.flush()
        # not the interpreter's teardown of torch and transformers (0.6 s on the 2-core VM, up to 1.5 s in the test
        # suite), which every invocation's close() waits for
        os._exit(0)
    _run_child(sock, *child)
    return 1  # unreachable: the child ends in _exit


# --- the parent's side -----------------------------------------------------------------------------


class ForkedProcess:
    """A worker forked by the zygote, as the launcher uses a Popen: pid, stdin, stdout, poll, wait, returncode."""

    def __init__(self, args: list[str]):
        self.args = args
        self.pid: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self.returncode: int | None = None
        self.refused: str | None = None
        self._replied = threading.Event()
        self._exited = threading.Event()

    def _exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


class Zygote:
    """The parent's handle on its zygote: start it, ask for forks, hear of their exits."""

    def __init__(self, env: dict[str, str], log, cwd: str):
        """Start the zygote with environment `env` (less its late variables), writing to the open file `log`, in
        folder `cwd` (its sys.path[0]: the folder of the package the launcher names first on PYTHONPATH)."""
        self.env = {k: v for k, v in env.items() if not late(k)}
        self.log_path = getattr(log, "name", None)
        self.dead: str | None = None
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._waiting: dict[int, ForkedProcess] = {}
        self._running: dict[int, ForkedProcess] = {}
        self.sock, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc: subprocess.Popen | None = None
        started = threading.Event()

        def run():  # this thread starts the zygote and lives as long as it: the zygote's PR_SET_PDEATHSIG is bound to it
            try:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "bench.execution.zygote", str(child_end.fileno())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                    env={**self.env, PARENT_PID_ENV: str(os.getpid()), NVML_CHECK_ENV: "1"},
                    pass_fds=(child_end.fileno(),), start_new_session=True)
            except OSError as exc:
                self.dead = f"the zygote did not start: {exc}"
            finally:
                child_end.close()
                log.close()
                started.set()
            if self.proc is not None:
                self._read()

        threading.Thread(target=run, name="bench-zygote", daemon=True).start()
        started.wait()

    def _read(self) -> None:
        """Hand each message of the zygote to its process: a fork's pid or refusal, an exit status."""
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._lock:
                if "id" in message:
                    proc = self._waiting.pop(message["id"], None)
                    if proc is None:
                        continue
                    if "pid" in message:
                        proc.pid = message["pid"]
                        self._running[proc.pid] = proc
                    else:
                        proc.refused = message["refused"]
                        if message.get("fatal"):
                            self.dead = message["refused"]
                    proc._replied.set()
                else:
                    proc = self._running.pop(message["pid"], None)
                    if proc is not None:
                        proc._exit(message["returncode"])
        returncode = self.proc.wait()
        with self._lock:
            self.dead = self.dead or f"the zygote exited with status {returncode}; log {self.log_path}"
            for proc in self._waiting.values():
                proc.refused = self.dead
                proc._replied.set()
            for proc in self._running.values():  # they die with it (PR_SET_PDEATHSIG)
                proc._exit(-signal.SIGKILL)
            self._waiting.clear()
            self._running.clear()
            self.sock.close()  # no message can come any more; a spawn after this is refused (it sees `dead`)

    def difference(self, env: dict[str, str]) -> str | None:
        """Return the first variable that differs between `env` and the zygote's and is read at import, or None."""
        return difference(env, self.env)

    def spawn(self, argv: list[str], fds: tuple[int, int, int], env: dict[str, str], preload: tuple[str, ...]) -> ForkedProcess:
        """Return the worker forked for `argv` with stdin, stdout, stderr = fds; Unavailable if it cannot be."""
        name = self.difference(env)
        if name is not None:
            raise Unavailable(f"{name} differs from the zygote's environment and is read at import")
        proc = ForkedProcess(argv)
        with self._lock:
            if self.dead:
                raise Unavailable(self.dead)
            request_id = next(self._ids)
            self._waiting[request_id] = proc
        unique = list(dict.fromkeys(fds))
        request = {"id": request_id, "argv": argv[1:], "env": env, "cwd": os.getcwd(), "preload": list(preload),
                   "fds": [unique.index(fd) for fd in fds]}
        try:
            with self._send_lock:
                socket.send_fds(self.sock, [json.dumps(request).encode()], unique)
        except OSError as exc:
            with self._lock:
                self._waiting.pop(request_id, None)
            raise Unavailable(f"the request did not reach the zygote: {exc}") from exc
        if not proc._replied.wait(REPLY_TIMEOUT_S):
            self.dead = f"the zygote did not answer within {REPLY_TIMEOUT_S:g} s; log {self.log_path}"
            self.close()
            raise Unavailable(self.dead)
        if proc.refused:
            raise Unavailable(proc.refused)
        return proc

    def idle(self) -> bool:
        """Whether no worker of this zygote is asked for or running (closing it then ends nobody's work)."""
        with self._lock:
            return not self._waiting and not self._running

    def close(self) -> None:
        """End the zygote (its socket's end-of-file; SIGKILL if it lingers) and reap it."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


_shared: Zygote | None = None
_shared_lock = threading.Lock()


def not_forkable(argv: list[str]) -> str | None:
    """Return why `argv` cannot be forked from a zygote here (the switch, the platform, the argv's shape), or None."""
    if os.environ.get(SWITCH_ENV, "1") == "0":
        return f"{SWITCH_ENV}=0"
    if not sys.platform.startswith("linux") or not hasattr(socket, "send_fds"):
        return "no fork server on this platform"
    if len(argv) < 3 or argv[0] != sys.executable or argv[1] not in ("-m", "-c"):
        return "not `python -m MODULE` or `python -c CODE` of this Python"
    return None


def difference(env: dict[str, str], base: dict[str, str]) -> str | None:
    """Return the first variable, by name, that differs between two environments and is read at import, or None."""
    for name in sorted(set(env) | set(base)):
        if not late(name) and env.get(name) != base.get(name):
            return name
    return None


def shared(env: dict[str, str], open_log, cwd: str) -> Zygote:
    """Return this invocation's zygote, started now (with env, writing to open_log()) if it is the first request.

    A zygote started from an environment that has since changed in a variable read at import (this process set one:
    a test's PYTHONPATH, a library's PYTHONBREAKPOINT) would refuse every later worker, each then a fresh process
    paying the imports again: when it has no worker in flight it is replaced by one of the present environment
    (the imports once more, once); with workers in flight it stays, and the request starts fresh, as before."""
    global _shared
    with _shared_lock:
        if _shared is not None and not _shared.dead and _shared.difference(env) is not None and _shared.idle():
            _shared.close()
            _shared = None
        if _shared is None:
            import atexit

            _shared = Zygote(env, open_log(), cwd)
            atexit.register(_shared.close)
        return _shared


if __name__ == "__main__":
    # The state (FORKED) lives in the importable module, not in __main__.
    from bench.execution import zygote as _module

    raise SystemExit(_module.main(sys.argv[1:]))
