"""A profile window: a short fixed window of a loaded hf cell's decode steps, timed unprofiled, then profiled.

One rule for the two processes that profile a cell: `bench profile`'s session (bench.profiling.session, a fresh
process that loads the cell for it, under nsys or ncu where asked) and a timed worker of `bench run --profile-window`
(bench.execution.worker: the process that has just measured the cell, through its loaded model, static cache and
compiled step). Everything after the model is loaded is `profile_window(loaded, cell, job, out_dir)`. It lives in the
execution stage, with what it runs (the ranges, bench.execution.nvtx; the torch.profiler collector,
bench.execution.torch_collector; the kernel table, bench.execution.kernels), because the worker runs it and the
execution stage may not import the profiling stage, which comes after it; the session imports it from here.

Shapes are the measured pass's: the cell's shapes are fixed from its whole workload first, as the measurement
worker's warm-up does (a static cache gets the workload's length, not the short window's), then the warm-up windows run
the very window that is timed and profiled, so nothing compiles inside the profile.

Two windows:
- generate cells (decode_loop = "generate"): the first `batches` batches of the workload (max_batch_size requests
  each), each cut to `decode_steps` + 1 new tokens: one prefill and `decode_steps` decode steps through the backend's
  own pass, with ranges around modules, the prefill and each decode step (hooks on the model);
- harness-loop cells (decode_loop = "harness"): `decode_steps` steps of the cell's DecodeLoop on the first batch, after
  its prefill, which runs before the timer and the profiler start: the window is decode steps only, each inside a
  "decode_step:k" range opened from outside the step. Module hooks are put only on an uncompiled step: inside a
  compiled step they would be traced into another graph than the measured one (and a CUDA graph replays no host
  hooks); compiled generate cells get no module or phase hooks for the same reason.

Order: warm-up windows, UNPROFILED_REPEATS unprofiled windows (the median wall time is the reference, so one hiccup of
the host does not set it; a profile is still one process, and host-bound steps differ between processes:
docs/measurements/2026-12-06-h100-planted-regressions.md), then the profiled window: two stages, `time_window` and
`profile_timed`. A timed worker that measured several cells times each cell's window right after its trials and
profiles them all after its last cell (bench.execution.worker), since a profiler slows what runs after it in its
process: each window's timed stage then sees the process as its trials did. The unprofiled decode step
(`step_ms`, the reference of the attribution's launch-gaps row and of % SOL): a harness window's time between its
first and last steps' ends over the steps between, as TPOT is measured (`step_times`); a generate window's time less
that of the same batches generating one token (their prefill), over its decode steps, which also counts generate's own
host work between the steps;
- tool "torch": record_function ranges + torch.profiler -> KernelTable (with its side tables) + Chrome trace in out_dir;
- tool "nsys": NVTX ranges, cudaProfilerStart/Stop around the window; the parent reads the report nsys writes;
- tool "ncu": NVTX ranges of the decode steps only (no module or batch ranges: decode_step:1 is the outermost range,
  the one ncu's --nvtx-include replays); the parent reads ncu's report.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

PROFILABLE_BACKENDS = ("hf",)  # backends whose loaded object exposes a torch model (`.model`) to put ranges on
TOOLS = ("torch", "nsys", "ncu")
# The window `bench compare --profile` profiles (bench.profiling.driver.ProfileSettings' defaults) and the one each
# process of `bench run --profile-window` profiles after its trials: a side's windows are alike whichever made them.
DECODE_STEPS = 4
BATCHES = 1
WARMUP = 1
UNPROFILED_REPEATS = 3


def timed_window_job(out_dir: str | Path, meta: dict | None = None) -> dict:
    """Return the job of a timed process's window (`bench run --profile-window`): the torch tool, the default window
    and module patterns, its files in out_dir, `meta` (the run's id and index) said in its kernel table."""
    from bench.execution.nvtx import DEFAULT_PATTERNS

    return {"tool": "torch", "decode_steps": DECODE_STEPS, "batches": BATCHES, "warmup": WARMUP,
            "patterns": list(DEFAULT_PATTERNS), "out_dir": str(out_dir), "meta": dict(meta or {})}


def timed_window_dir(profiles_root: str | Path, matrix: str, cell_id: str, run_id: str, run: int) -> Path:
    """Return the folder of a timed process's window: <profiles_root>/<matrix>/<cell_id>-torch-<run_id>-r<run>/.

    The run id is in the name because a record is never rewritten: a later run of the cell must not replace the
    kernel table an earlier run's record names (`bench profile`'s folders, one per cell and tool, are replaced)."""
    return Path(profiles_root) / matrix / f"{cell_id}-torch-{run_id}-r{run}"


def window_requests(requests, max_batch_size: int, decode_steps: int, batches: int = 1) -> list:
    """Return the window's requests: the first batches*max_batch_size, each cut to decode_steps + 1 tokens."""
    if decode_steps < 1:
        raise ValueError("decode_steps must be >= 1")
    chosen = list(requests)[: max_batch_size * batches]
    return [dataclasses.replace(r, output_len=decode_steps + 1) for r in chosen]


def wall(fn, cuda: bool) -> float:
    """Return fn's wall time in seconds, the device synchronised before and after."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


class GenerateWindow:
    """The backend's own pass over the window's batches: prefill and decode steps, ranges from hooks."""

    kind = "generate"

    def __init__(self, loaded, cell, chunks, batch_ranges: bool = True):
        self.loaded, self.cell, self.chunks = loaded, cell, chunks
        # ncu filters on the decode step's range: no batch range around it, so it is the outermost one
        self.batch_ranges = batch_ranges

    def prepare(self) -> None:
        """Nothing to do before a window: each pass prefills its own batches."""

    def __call__(self, ranges=None) -> None:
        for i, chunk in enumerate(self.chunks):
            if ranges is None:
                self.loaded.run(chunk, self.cell.max_batch_size, self.cell.options_dict)
            else:
                with ranges.batch(i, push=self.batch_ranges):
                    self.loaded.run(chunk, self.cell.max_batch_size, self.cell.options_dict)


def prefill_only(window: GenerateWindow) -> GenerateWindow:
    """Return the same window generating one token per request: its prefill (and first token) alone."""
    chunks = [[dataclasses.replace(r, output_len=1) for r in c] for c in window.chunks]
    return GenerateWindow(window.loaded, window.cell, chunks, window.batch_ranges)


def median_wall(window, cuda: bool, repeats: int = UNPROFILED_REPEATS,
                marks: list | None = None) -> tuple[float, list[float]]:
    """Return (the median wall time of `repeats` unprofiled windows, each one's), prepared before each. With `marks` (a
    DecodeWindow's), each window's markers after its steps are appended to it as one list (`step_times` reads them)."""
    times = []
    for _ in range(repeats):
        window.prepare()
        if marks is None:
            times.append(wall(window, cuda))
        else:
            marks.append([])
            times.append(wall(lambda: window(marks=marks[-1]), cuda))
    return statistics.median(times), times


class DecodeWindow:
    """`steps` decode steps of the cell's DecodeLoop after a prefill done by `prepare` (outside the window)."""

    kind = "decode"

    def __init__(self, loaded, chunk, steps: int):
        from bench.backends.hf.backend import left_padded, static_cache_len

        self.loop, self.steps = loaded.loop, steps
        self.ids, self.mask = left_padded(chunk, loaded.pad_id, loaded.device)
        # The measured pass's cache length (fixed from the workload), or this batch's own.
        self.cache_len = getattr(loaded, "cache_len", None) or static_cache_len([chunk])
        if self.ids.shape[1] + steps + 1 > self.cache_len:
            raise RuntimeError(f"the window needs {self.ids.shape[1] + steps + 1} cache positions, but the cell's static "
                               f"cache holds {self.cache_len} (fixed from its workload): lower --decode-steps")
        self.state: dict | None = None

    def prepare(self) -> None:
        """Prefill the batch into the loop's (reset) cache: the window then starts at the first decode step."""
        import torch

        with torch.inference_mode():
            self.state = self.loop.prefill(self.ids, self.mask, self.cache_len)
        if self.ids.is_cuda:
            torch.cuda.synchronize()  # the prefill's kernels must not run into the timed or profiled window

    def __call__(self, ranges=None, marks: list | None = None) -> None:
        """Run the window's steps; with `marks`, append a time marker after each (bench.backends.hf.loop.record_mark)."""
        import torch

        from bench.backends.hf.loop import record_mark

        with torch.inference_mode():
            for k in range(1, self.steps + 1):
                if ranges is None:
                    self.loop.decode(self.state, 1)
                else:
                    with ranges.stack.range(f"decode_step:{k}"):
                        self.loop.decode(self.state, 1)
                if marks is not None:
                    record_mark(marks, self.ids.is_cuda)


def step_times(marks: list[list], steps: int) -> list[float]:
    """Return each harness window's decode step in seconds from its markers (`median_wall`'s, the device synchronised
    since), the way TPOT is measured: the time from the end of the window's first step to the end of its last, over
    the steps between (CUDA events on a GPU). A window starts after the prefill's synchronisation, so its first step
    waits for the host to launch it, where a run's step follows the previous one already queued: the window's wall
    time over its steps read 3-5 % above its runs' TPOT on the compiled 7B shape (4 steps; H100, 2026-12-06)."""
    from bench.backends.hf.loop import mark_seconds

    if steps < 2:
        raise ValueError("a step time between markers needs at least 2 decode steps")
    times = []
    for window_marks in marks:
        seconds = mark_seconds(window_marks)
        times.append((seconds[-1] - seconds[0]) / (steps - 1))
    return times


def profile_window(loaded, cell, job: dict, out_dir: str | Path) -> dict:
    """Return what one window of `loaded` (the cell's loaded model) measured: its wall times unprofiled and profiled,
    its unprofiled decode step, its shape, and with the torch tool the kernel table and trace it wrote to out_dir.

    job: tool (TOOLS), decode_steps, batches, warmup, patterns (module ranges), workload_file (the cell's frozen
    workload) and optionally meta (said in the kernel table). The caller closes `loaded`. The two stages one after
    the other: `time_window`, then `profile_timed`.
    """
    return profile_timed(loaded, time_window(loaded, cell, job), out_dir, again=False)


@dataclasses.dataclass
class TimedWindow:
    """A window timed unprofiled (`time_window`), to be profiled (`profile_timed`): what the profiled stage needs."""

    cell: object
    job: dict
    workload: object  # the cell's frozen Workload
    window: object  # DecodeWindow or GenerateWindow
    hooks: bool  # module ranges (an uncompiled step)
    cuda: bool
    result: dict  # the unprofiled figures so far


def time_window(loaded, cell, job: dict) -> TimedWindow:
    """The unprofiled stage: fix the cell's shapes (its plant too), run the warm-up windows, then time
    UNPROFILED_REPEATS windows and the decode step, with no profiler. A process that measured several cells times
    each cell's window right after its trials and profiles them all last (bench.execution.worker): a profiler that ran
    in a process slows what runs after it there (torch.profiler leaves CUPTI attached), and an H100 run of
    2026-12-07 whose six cells shared a process timed the five windows after the first profile 26-33 % slower than their
    own trials (rotary-outside: 34.8 ms against 26.7), the first window not (21.7 against 22.1)."""
    import torch

    from bench.workloads.workload import Workload, batches

    tool = job["tool"]
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}: one of {TOOLS}")
    if getattr(loaded, "model", None) is None:
        raise RuntimeError(f"backend {cell.backend!r} exposes no torch model to put ranges on")
    workload = Workload.from_json(Path(job["workload_file"]).read_text())
    options = cell.options_dict
    # The measured pass's shapes: the worker's warm-up fixes them from the whole workload (no pass runs here).
    loaded.warmup(workload.requests, cell.max_batch_size, options, 0)
    reqs = window_requests(workload.requests, cell.max_batch_size, job["decode_steps"], job.get("batches", 1))
    chunks = batches(reqs, cell.max_batch_size, options.get("batching", "dataset"))
    cuda = loaded.device.type == "cuda" if hasattr(loaded, "device") else torch.cuda.is_available()
    compiled = options.get("compile", "off") != "off"
    if getattr(loaded, "loop", None) is not None:
        window = DecodeWindow(loaded, chunks[0], job["decode_steps"])
        chunks = chunks[:1]
    else:
        window = GenerateWindow(loaded, cell, chunks, batch_ranges=tool != "ncu")
    hooks = not compiled  # hooks inside a compiled step would change the graph the profile shows
    if tool in ("nsys", "ncu") and not cuda:  # said before any window runs
        raise RuntimeError(f"the {tool} tool profiles CUDA kernels: this cell does not run on a GPU")
    if tool == "ncu" and window.kind == "generate" and not hooks:
        raise RuntimeError("ncu replays the kernels of the decode_step:1 range, which a compiled generate cell "
                           "does not have (no hooks on a compiled model): profile its eager configuration, or "
                           "the harness loop (decode_loop = \"harness\"), whose steps get ranges from outside")
    for _ in range(job.get("warmup", 1)):
        window.prepare()
        window()
    # a harness window of two steps or more also times its steps between markers, in the same windows (step_times)
    marks: list | None = [] if window.kind == "decode" and window.steps >= 2 else None
    unprofiled_s, repeats = median_wall(window, cuda, marks=marks)
    prefill_s = None
    if window.kind == "generate" and hooks:  # a decode step's time: the window less its prefill (one token)
        first = prefill_only(window)
        first()  # its own warm-up: generating one token may take another path
        prefill_s, _ = median_wall(first, cuda)
    result = {"tool": tool, "unprofiled_window_s": unprofiled_s, "unprofiled_windows_s": repeats, "cuda": cuda,
              "window": {"kind": window.kind, "requests": sum(len(c) for c in chunks), "batches": len(chunks),
                         "decode_steps": job["decode_steps"], "prompt_tokens": [r.input_len for c in chunks for r in c],
                         "static_cache_len": getattr(loaded, "cache_len", None), "module_ranges": hooks}}
    if marks is not None:
        steps = step_times(marks, window.steps)
        result["unprofiled_steps_s"] = steps
        result["step_ms"] = statistics.median(steps) * 1e3
        result["step_ms_from"] = ("the harness windows' median time between their first and last decode steps' ends, "
                                  "over the steps between (as TPOT is measured)")
    elif window.kind == "decode":
        result["step_ms"] = unprofiled_s / job["decode_steps"] * 1e3
        result["step_ms_from"] = "the harness window's median wall time over its decode step"
    elif prefill_s is not None and unprofiled_s > prefill_s:
        result["prefill_window_s"] = prefill_s
        result["step_ms"] = (unprofiled_s - prefill_s) / (job["decode_steps"] * len(chunks)) * 1e3
        result["step_ms_from"] = ("the generate window's median wall time less that of its batches generating one "
                                  "token, over its decode steps")
    elif prefill_s is not None:  # said, not silent: without a step time the attribution has no launch-gaps row
        result["prefill_window_s"] = prefill_s
        result["step_ms_from"] = (f"none: the generate window ({unprofiled_s:.4f} s) took no longer than its batches "
                                  f"generating one token ({prefill_s:.4f} s)")
    if getattr(loaded, "bandwidth", None):
        result["copy_bandwidth"] = loaded.bandwidth  # the roofline's bandwidth (speed_of_light.copy_bandwidth)
    if getattr(loaded, "weights", None) is not None:
        from bench.backends.speed_of_light import step_bound

        # Decode step 1 of the first batch (the step ncu replays): each row attends over its prompt and one new token.
        result["step_bound"] = step_bound(loaded.weights, loaded.kv_per_token, [r.input_len + 1 for r in chunks[0]],
                                          (loaded.bandwidth or {}).get("bandwidth_bytes_s"))
    return TimedWindow(cell, job, workload, window, hooks, cuda, result)


def profile_timed(loaded, timed: TimedWindow, out_dir: str | Path, again: bool = True) -> dict:
    """The profiled stage of a timed window; return the timed stage's result with the profile's figures and files.
    `again`: other work ran in the process since the window was timed (other cells' trials and windows), so the
    cell's shapes and plant are fixed again and one warm-up window runs first (nothing compiles inside the profile)."""
    import torch

    from bench.execution.nvtx import ModuleRanges, RangeStack

    cell, job, window, hooks, cuda = timed.cell, timed.job, timed.window, timed.hooks, timed.cuda
    tool, result = job["tool"], dict(timed.result)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if again:
        loaded.warmup(timed.workload.requests, cell.max_batch_size, cell.options_dict, 0)
        window.prepare()
        window()

    def timed_call(fn) -> float:
        return wall(fn, cuda)

    stack = RangeStack(record_function=tool == "torch", nvtx=tool in ("nsys", "ncu") and cuda)
    # ncu replays the kernels of one decode-step range: no module ranges inside it (the per-kernel table is by name)
    patterns = job["patterns"] if hooks and tool != "ncu" else []
    window.prepare()
    with ModuleRanges(loaded.model, patterns, stack=stack, phases=hooks and window.kind == "generate") as ranges:
        result["ranges_matched"] = len(ranges.targets)
        if tool == "torch":
            from bench.execution.kernels import write_side_tables
            from bench.execution.torch_collector import profile_call

            holder = {}

            def profiled():
                holder["s"] = timed_call(lambda: window(ranges))

            table, trace = profile_call(profiled, cuda=cuda, labels=stack.labels, trace_path=out_dir / "trace.json",
                                        meta={**job.get("meta", {}), "cell_id": cell.cell_id, "label": cell.label})
            result["profiled_window_s"] = holder["s"]
            write_side_tables(table.save(out_dir / "kernel_table.json"))
            result["kernel_table"] = str(out_dir / "kernel_table.json")
            result["trace"] = str(trace)
        elif tool == "nsys":
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
            try:
                result["profiled_window_s"] = timed_call(lambda: window(ranges))
            finally:
                torch.cuda.cudart().cudaProfilerStop()
        else:  # ncu (--nvtx-include) replays only decode_step:1's kernels; the window's wall time includes that replay
            result["profiled_window_s"] = timed_call(lambda: window(ranges))
    if stack.depth:
        raise RuntimeError(f"{stack.depth} range(s) left open after the window")
    return result
