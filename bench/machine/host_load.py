"""Is the machine busy? Host load, CPU steal and other processes on the GPU around one measured pass.

A pass measured while other jobs compete for the CPU (or share the GPU) gives a figure that does
not reproduce, and nothing in the figure says so. `LoadSampler` wraps a pass the way
`telemetry.Sampler` does and reads, before and after it (plus a light thread once a second
during it):

- the load average (os.getloadavg) and the cores this process may use (sched_getaffinity);
- CPU time from /proc/stat: the share the hypervisor stole (steal), and the cores' worth of CPU
  the *other* processes used (all busy time minus the measurement's own), so the worker's own
  threads (a CPU backend uses every core) never count as load. The measurement is this process
  and its descendants (a tokenizer's or a compiler's workers), plus, for a cell whose server
  listens on this machine (an `openai` cell's loopback `base_url`), the server's process and its
  descendants: the server under test is what is being measured, not load;
- on CUDA, NVML's compute processes on the GPU other than this process (optimum-benchmark's
  device-isolation check, here a record instead of a kill);
- the host's own speed in this process (`host_probe_ms`): a fixed pure-Python loop timed just
  before and just after the pass. The load figures can all be clean while one process's core
  runs slower than another's (a power state, a neighbour on the same physical core, another
  tenant below the VM): on an H100 on 2026-12-06 an idle host ran the eager 7B step at batch 1 in
  23.3 ms in one process and 42.0 ms in another. The probe is the Python dispatch a host-bound
  step is made of, so runs whose probes differ name the host as the cause of their spread
  (bench.machine.telemetry.spread_causes).

`busy_reasons` turns a summary into the warnings the console and the report print; its
thresholds are defined here and nowhere else. Nothing here fails a run: a figure that cannot
be read (no /proc, no NVML) is None.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

# A pass is measured on a busy machine when any of these hold (the one place they are defined):
# the load of other processes exceeds the cores this process may use,
MAX_LOAD_PER_CORE = 1.0
# other processes used more than this share of those cores while the pass ran,
MAX_OTHER_CPU_SHARE = 0.5
# or the hypervisor stole more than this share of the CPU time (a busy VM host);
MAX_STEAL = 0.05
# or the measurement and the others together asked for more than the cores, the others using at least this
# many cores' worth: a CPU backend uses every core, so less than half a core of others already takes from it
# (a 2-core laptop's trial spreads of 37-54 % came from less than the share rule's one core).
MIN_CONTENDING_CORES = 0.25
# The host probe: PROBE_REPEATS timings of PROBE_LOOPS iterations of integer arithmetic (about 1-2 ms each in
# CPython), their median, before and after a pass.
PROBE_LOOPS = 20_000
PROBE_REPEATS = 5


def host_probe_times(repeats: int = PROBE_REPEATS, loops: int = PROBE_LOOPS) -> list[float]:
    """Return the ms each of `repeats` runs of a fixed pure-Python loop took in this process (the host's speed)."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x = 0
        for i in range(loops):
            x = (x + i * 7) % 1_000_003
        out.append((time.perf_counter() - t0) * 1e3)
    return out

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_times(stat_text: str) -> dict | None:
    """Return {'busy', 'steal', 'total'} in clock ticks from the text of /proc/stat (None if unreadable).

    busy excludes idle, iowait and steal; guest time is already inside user/nice (Linux adds it there).
    """
    for line in stat_text.splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]] + [0] * 10
            user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
            busy = user + nice + system + irq + softirq
            return {"busy": busy, "steal": steal, "total": busy + idle + iowait + steal}
    return None


def own_cpu_ticks(self_stat_text: str, children: bool = False) -> int | None:
    """Return utime + stime (clock ticks) of a process from the text of its /proc/<pid>/stat; children: plus
    cutime + cstime (its children that ended and were waited for)."""
    try:
        fields = self_stat_text.rsplit(")", 1)[1].split()  # the command name may hold spaces
        # fields 14-17 of proc(5), counted from after the name: utime, stime, cutime, cstime
        return sum(int(f) for f in fields[11:15 if children else 13])
    except (IndexError, ValueError):
        return None


def _parents() -> dict[int, int]:
    """Return {pid: parent pid} of every process this one can see in /proc."""
    out = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            parent = _parent_pid(int(name))
            if parent is not None:
                out[int(name)] = parent
    return out


def process_tree(roots: set[int]) -> set[int]:
    """Return the roots and every live descendant of theirs (from /proc's parent ids)."""
    parents = _parents()
    tree, grew = set(roots), True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return tree


def tree_ticks(roots: set[int]) -> int | None:
    """Return the CPU clock ticks the processes of `roots` and their descendants used so far (those that ended
    included, once waited for), or None when the first root's cannot be read (no /proc)."""
    total = None
    for pid in sorted(process_tree(roots)):
        ticks = own_cpu_ticks(_read(f"/proc/{pid}/stat"), children=True)
        if ticks is not None:
            total = (total or 0) + ticks
    return total


def listening_pids(base_url: str | None) -> set[int]:
    """Return the processes listening on a loopback URL's port (a server on this machine; /proc/net/tcp{,6} and
    each process's open sockets), empty for a remote server, a URL without a port, or no /proc."""
    from urllib.parse import urlsplit

    if not base_url:
        return set()
    try:
        parts = urlsplit(base_url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return set()
    if port is None or host not in ("localhost", "127.0.0.1", "::1", "0.0.0.0"):
        return set()
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).splitlines()[1:]:
            f = line.split()
            # local address HEX_IP:HEX_PORT, state 0A = LISTEN, inode in field 10
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return set()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:  # another user's process, or it ended
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") in inodes:
                    found.add(int(name))
                    break
            except OSError:
                continue
    return found


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def available_cores() -> int:
    """Return the cores this process may run on (its affinity mask; os.cpu_count where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class _Snapshot:
    def __init__(self, measured: set[int]):
        self.t = time.monotonic()
        self.load_1m = _loadavg()
        self.cpu = cpu_times(_read("/proc/stat"))
        self.own = tree_ticks(measured)


def window_figures(before: _Snapshot, after: _Snapshot, cores: int) -> dict:
    """Return the pass's CPU figures between two snapshots: steal share, cores used by others and by us."""
    out = {"steal_share": None, "other_cpu_cores": None, "own_cpu_cores": None}
    wall = after.t - before.t
    if before.cpu and after.cpu:
        total = after.cpu["total"] - before.cpu["total"]
        if total > 0:
            out["steal_share"] = (after.cpu["steal"] - before.cpu["steal"]) / total
            if before.own is not None and after.own is not None and wall > 0:
                own = max(0, after.own - before.own)  # a measured process gone unreaped takes its ticks along
                busy = after.cpu["busy"] - before.cpu["busy"]
                # busy ticks over all cores -> cores' worth, on the same clock as the total
                per_core = total / max(cores_in_stat(), 1)
                out["own_cpu_cores"] = own / per_core if per_core else None
                out["other_cpu_cores"] = max(0.0, busy - own) / per_core if per_core else None
    return out


def cores_in_stat() -> int:
    """Return how many CPUs /proc/stat's total line sums over (every online CPU, not only ours)."""
    return sum(1 for line in _read("/proc/stat").splitlines() if line.startswith("cpu") and line[3:4].isdigit()) or 1


def gpu_other_processes(device, own_pids: set[int]) -> list[dict] | None:
    """Return [{'pid', 'used_memory_gb'}] of the compute processes on a GPU other than own_pids, or None without NVML.

    device: an NVML index or UUID (bench.machine.environment.nvml_device), or a list of them.
    """
    from bench.machine.environment import nvml_device

    devices = device if isinstance(device, list) else [device]
    indices = [nvml_device(d) for d in devices]
    if not indices or any(i is None for i in indices):
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        listed = []
        for i in indices:
            handle = (pynvml.nvmlDeviceGetHandleByUUID(i.encode()) if isinstance(i, str)
                      else pynvml.nvmlDeviceGetHandleByIndex(i))
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(p, "usedGpuMemory", None)
                listed.append({"pid": int(p.pid), "used_memory_gb": None if not isinstance(used, int) else used / 1e9})
        return others_on_gpu(listed, own_pids, lambda pid: os.path.exists(f"/proc/{pid}"))
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def others_on_gpu(listed: list[dict], own_pids: set[int], visible) -> list[dict]:
    """Return the GPU processes of `listed` that are not this one.

    In a container NVML reports the host's process ids, which are not ours: when none of the
    listed ids is ours and some are not visible here (another PID namespace), the largest of
    those invisible ones is taken to be this process (it holds the model), not another's.
    """
    if any(p["pid"] in own_pids for p in listed):
        return [p for p in listed if p["pid"] not in own_pids]
    hidden = [p for p in listed if not visible(p["pid"])]
    if not hidden:
        return list(listed)
    ours = max(hidden, key=lambda p: p["used_memory_gb"] or 0.0)
    return [p for p in listed if p is not ours]


def _parent_pid(pid: int) -> int | None:
    try:
        return int(_read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


class LoadSampler:
    """Context manager: how busy the machine was around its block (`summary`, a dict for the record's extra)."""

    def __init__(self, device: str | list[str] | None = None, interval_s: float = 1.0, server: str | None = None):
        """server: the cell's server address (an openai cell's base_url): a server listening on this machine is part
        of the measurement, its CPU not counted as load."""
        self.device = device
        self.interval_s = interval_s
        self.server = server
        self.summary: dict = {}
        self._loads: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _gpu_others(self):
        if self.device is None or not any(str(d).startswith("cuda") for d in
                                          (self.device if isinstance(self.device, list) else [self.device])):
            return None
        found = gpu_other_processes(self.device, {os.getpid()})
        if found and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # Tensor parallelism: the other ranks (children of the same torchrun) are this cell, not others.
            found = [p for p in found if _parent_pid(p["pid"]) != os.getppid()]
        return found

    def __enter__(self) -> LoadSampler:
        self._probe = host_probe_times()
        self._cores = available_cores()
        self._gpu_before = self._gpu_others()
        self._servers = listening_pids(self.server) - {os.getpid()}
        self._measured = {os.getpid()} | self._servers
        self._before = _Snapshot(self._measured)
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            load = _loadavg()
            if load is not None:
                self._loads.append(load)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        after = _Snapshot(self._measured)
        probe = statistics.median(self._probe + host_probe_times())  # before and after the pass
        gpu_after = self._gpu_others()
        figures = window_figures(self._before, after, self._cores)
        loads = [x for x in (self._before.load_1m, *self._loads, after.load_1m) if x is not None]
        others = None
        if self._gpu_before is not None or gpu_after is not None:
            seen = {p["pid"]: p for p in (self._gpu_before or []) + (gpu_after or [])}
            others = sorted(seen.values(), key=lambda p: p["pid"])
        self.summary = {
            "cores": self._cores,
            "load_1m_before": self._before.load_1m,
            "load_1m_max": max(loads) if loads else None,
            **figures,
            "gpu_other_processes": others,
            "server_pids": sorted(self._servers) or None,  # counted as the measurement's own, not as load
            "host_probe_ms": probe,
        }
        self.summary["busy"] = busy_reasons(self.summary)


def busy_reasons(s: dict) -> list[str]:
    """Return why a pass was measured on a busy machine, from a LoadSampler summary (empty: it was not)."""
    out = []
    cores = s.get("cores") or 1
    own = s.get("own_cpu_cores") or 0.0
    peak = s.get("load_1m_max")
    # The load average counts this worker's own running threads too (in the minute before the
    # pass as well: passes run back to back), so what this process used is taken off.
    others_load = None if peak is None else max(0.0, peak - own)
    if others_load is not None and others_load > MAX_LOAD_PER_CORE * cores:
        out.append(f"load average {others_load:.1f} on {cores} core(s)")
    other_cpu = s.get("other_cpu_cores")
    if other_cpu is not None and other_cpu > MAX_OTHER_CPU_SHARE * cores:
        out.append(f"other processes used {other_cpu:.1f} of {cores} core(s)")
    elif other_cpu is not None and other_cpu >= MIN_CONTENDING_CORES and own + other_cpu > cores:
        out.append(f"other processes used {other_cpu:.1f} core(s) while the measurement used {own:.1f} of {cores}: "
                   "they competed for the cores")
    steal = s.get("steal_share")
    if steal is not None and steal > MAX_STEAL:
        out.append(f"the hypervisor stole {steal:.0%} of the CPU time")
    gpu = s.get("gpu_other_processes")
    if gpu:
        pids = ", ".join(str(p["pid"]) for p in gpu[:5]) + (f" and {len(gpu) - 5} more" if len(gpu) > 5 else "")
        out.append(f"{len(gpu)} other process(es) on the GPU (pid {pids})")
    return out
