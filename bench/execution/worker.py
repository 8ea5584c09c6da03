"""Worker process: builds (or loads) one build group once and measures its cells.

`measure_group(job, emit)` is a plain function of (build group, cells) -> events, so an executor
can place it anywhere (a local subprocess per GPU, or one on a Ray node: bench.execution.executors).
`python -m bench.execution.worker` reads the job as JSON on stdin and writes one JSON event per line on
its original stdout; everything libraries print goes to stderr instead.
`python -m bench.execution.worker --ranks N JOB_FILE` runs the same job as N processes under
torchrun (tensor parallelism, one process per GPU): every rank measures, rank 0 reports.
A worker dies with the process that started it (bench.execution.launcher.die_with_parent: Linux's
PR_SET_PDEATHSIG), so a parent killed with SIGKILL leaves no worker behind holding a GPU.

Events: {"event": "env"}, {"event": "built"}, {"event": "warmup", cell_id, trial} (a cell's warm-up begins; trial: its
first), {"event": "start", cell_id, trial},
{"event": "result", cell_id, trial, status, ...}, {"event": "skipped", cell_id, trials}
(trials not run after a failed one), {"event": "fatal", ...}; after the trials, where the job asks,
{"event": "accuracy_capture", cell_id, phase} and {"event": "profile_window", cell_id, phase}: a window's phases are
start, timed (its unprofiled stage, right after the cell's trials), then start and done (profiled, after the last
cell's trials), so a hang in either stage is that window's, not the next cell's.

Start-up breakdown (`startup`, in the built event, hence every record's `build`, and with the
cell's warm-up in each result's `extra`): `launch` ("fork": from the zygote; "exec", or "exec
(why not forked)"), `spawn_s` (the launcher's start to this process's main, less the imports the
zygote did for it), `imports_s` (the backend's runtime and the libraries its PRELOAD names: in a
fork, what the zygote imported for this request, 0 once it has them), `cuda_init_s` (a CUDA
context on the cell's device; None off CUDA), `build_s`, `load_s`, and per cell `warmup_s`.
The built event also carries `weights_digest` (bench.backends.hf.weights: equal in every process
that loaded the same weights).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.execution.compile_counts import compile_counters, describe_compile
from bench.execution.launcher import PARENT_PID_ENV, die_with_parent
from bench.machine.failures import classify_exception
from bench.machine.memory_cap import apply_cap, device_peak_bytes


def _host_peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _phase(text: str) -> None:
    """Write one timestamped line to this worker's log (its stderr): where a slow process spent its time.

    A worker killed by a time limit leaves no event behind; its log then says which phase it was in
    (load, artifact install, warm-up: compilation and tuning happen there, a trial)."""
    print(f"[bench worker {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


_entered_at: float | None = None  # time.time() when main() began; None: measure_group called in this process


def launch_info() -> dict:
    """Return how this worker process started: `launch`, `spawn_s` and the imports the zygote made for it (`imports_s`)."""
    from bench.execution.launcher import LAUNCH_ENV, LAUNCHED_AT_ENV
    from bench.execution.zygote import forked

    fork = forked()
    imports_s = fork["preload_s"] if fork else 0.0
    launched = os.environ.get(LAUNCHED_AT_ENV)
    spawn_s = None
    if launched and _entered_at is not None:
        spawn_s = max(0.0, _entered_at - float(launched) - imports_s)
    return {"launch": "fork" if fork else os.environ.get(LAUNCH_ENV, "exec"), "spawn_s": spawn_s, "imports_s": imports_s}


def import_runtime(backend_cls) -> float:
    """Import the libraries the backend's runtime module lists in PRELOAD (torch, transformers, ...); return the seconds."""
    import importlib

    t0 = time.perf_counter()
    for name in getattr(sys.modules[backend_cls.__module__], "PRELOAD", ()):
        importlib.import_module(name)
    return time.perf_counter() - t0


def init_cuda(backend_cls, device: str) -> float | None:
    """Return the seconds a CUDA context on `device` took to create, for a backend that runs torch; None elsewhere.

    A failure is left to the backend, which raises it where it always did (the load)."""
    if not device.startswith("cuda") or "torch" not in getattr(sys.modules[backend_cls.__module__], "PRELOAD", ()):
        return None
    import torch

    t0 = time.perf_counter()
    try:
        torch.empty(1, device=device)
        torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - no CUDA here: the load says so
        return None
    return time.perf_counter() - t0


def measure_group(job: dict, emit: Callable[[dict], None]) -> None:
    """Build the job's artifact once, then warm up and measure each cell's trials, emitting events."""
    from bench.backends.registry import backend_class
    from bench.machine.cores import DEFAULT_POLICY, allowed_cores
    from bench.machine.cores import apply as apply_cores
    from bench.machine.cores import pin_process as release_cores
    from bench.machine.environment import fingerprint, nvml_device, rank_device
    from bench.machine.host_load import LoadSampler
    from bench.machine.telemetry import Sampler
    from bench.metrics import request_samples
    from bench.spec.cells import BuildKey, Cell
    from bench.workloads.workload import Workload

    startup = launch_info()
    cores = allowed_cores()  # each cell chooses its cores among these (`cores = "fastest"`)
    key = BuildKey.from_dict(job["build_key"])
    backend_cls = backend_class(key.backend)
    startup["imports_s"] += import_runtime(backend_cls)
    device = rank_device(key.device)  # under torchrun: this rank's GPU
    if device != key.device:
        import torch

        torch.cuda.set_device(device)  # so that a bare "cuda" in any library means this rank's GPU too
    environment = {**fingerprint(device), "pid": os.getpid()}  # pid: which process
    world = int(os.environ.get("WORLD_SIZE", "1"))
    # Tensor parallelism: rank 0 names and samples every rank's GPU (power and energy are their sums).
    sampled = [f"cuda:{r}" for r in range(world)] if world > 1 and device.startswith("cuda") else device
    if world > 1:
        environment["tensor_parallel_gpus"] = [str(nvml_device(d)) for d in sampled] if isinstance(sampled, list) \
            else [device] * world
    emit({"event": "env", "environment": environment})
    startup["cuda_init_s"] = init_cuda(backend_cls, device)
    backend = backend_cls()
    # Backends that calibrate while building (trtllm) read the group's requests from these files.
    backend.workload_files = sorted({item["workload_file"] for item in job["cells"]})
    # What this process does with its engine: load an artifact, build it as tuning build k, export it.
    engine = job.get("engine") or {}
    backend.tuning_build = engine.get("tuning_build")
    t0 = time.perf_counter()
    try:
        if backend.measures_copy_bandwidth and device.startswith("cuda"):
            from bench.backends.speed_of_light import (
                bandwidth_cache_dir,
                copy_bandwidth,
            )

            # The bandwidth probe allocates 4 GiB: taken uncapped (once per machine and GPU,
            # cached), so a tight gpu_memory_gb does not turn the group into an OOM.
            copy_bandwidth(device, bandwidth_cache_dir(job["engines_dir"]))
        # Emulating a smaller device (gpu_memory_gb) must precede the model's first allocation.
        memory_cap = apply_cap(device)
        _phase(f"build key {key.key_hash} ({key.backend}/{key.precision}): building")
        artifact = backend.build(key, Path(job["engines_dir"]))
        kernels = install_artifact(engine, backend, key, artifact, environment, job["engines_dir"])
        if kernels["source"] == "artifact":
            _phase(f"engine artifact {kernels['artifact'][:12]} installed")
        t1 = time.perf_counter()
        _phase(f"built in {t1 - t0:.1f} s; loading")
        loaded = backend.load(artifact)
    except Exception as exc:
        emit({"event": "fatal", "status": classify_exception(exc), "error": _describe(exc), "phase": "build"})
        return
    t2 = time.perf_counter()
    _phase(f"loaded in {t2 - t1:.1f} s")
    build_info = artifact.get("build_info", {}) if isinstance(artifact, dict) else {}
    startup.update(build_s=t1 - t0, load_s=t2 - t1)
    emit({"event": "built", "build_s": t1 - t0, "load_s": t2 - t1, **build_info, **memory_cap, "startup": startup,
          "weights_digest": loaded.weights_digest})

    workloads: dict[str, Workload] = {}
    settings = job["settings"]
    export_failed = False
    windows = []  # (cell, window job, its timed stage) of the cells profiled after this process's last timed pass

    def warm(item: dict) -> dict | None:
        """Warm the item's cell up; return its state for the trials, or None where the warm-up failed (said)."""
        nonlocal export_failed
        cell = Cell.from_dict(item["cell"])
        wl_file = item["workload_file"]
        if wl_file not in workloads:
            workloads[wl_file] = Workload.from_json(Path(wl_file).read_text())
        requests = workloads[wl_file].requests
        trials = list(item["trials"])
        if trials:  # which cell a hang from here on is (the supervisor's blame), before its first trial starts
            emit({"event": "warmup", "cell_id": cell.cell_id, "trial": trials[0]})
        try:
            # Warm-up (module load, allocator growth, kernel selection, compilation): the backend
            # decides which batches cover the shapes its measured passes will see.
            _phase(f"cell {cell.cell_id}: warm-up (compilation and tuning happen here)")
            t_warm = time.perf_counter()
            warmup = loaded.warmup(requests, cell.max_batch_size, cell.options_dict, settings["warmup"])
            cell_startup = {**startup, "warmup_s": time.perf_counter() - t_warm}
            _phase(f"cell {cell.cell_id}: warm-up done in {cell_startup['warmup_s']:.1f} s{describe_compile(compile_counters())}")
        except Exception as exc:
            if not trials:  # a build without measurement (bench build): no artifact of a failed warm-up
                emit({"event": "warmup_failed", "cell_id": cell.cell_id, "status": classify_exception(exc),
                      "error": "warm-up: " + _describe(exc)})
                export_failed = True
                loaded.recover()
                return None
            # One record for the failure, with the start-up it paid and how far the warm-up got (an OOM's peak);
            # the cell's other trials are not run.
            peak = device_peak_bytes()
            emit({"event": "result", "cell_id": cell.cell_id, "trial": trials[0], "status": classify_exception(exc),
                  "error": "warm-up: " + _describe(exc), "ended_at": time.time(),
                  "extra": {"startup": {**startup, "warmup_s": time.perf_counter() - t_warm},
                            **({} if peak is None else {"peak_memory_bytes_at_failure": peak})}})
            if trials[1:]:
                emit({"event": "skipped", "cell_id": cell.cell_id, "trials": trials[1:]})
            loaded.recover()
            return None
        return {"item": item, "cell": cell, "requests": requests, "trials": trials, "warmup": warmup,
                "startup": cell_startup, "failed": False}

    def measure(state: dict, trial: int, pinned, order: dict) -> bool:
        """Measure one trial of a warmed cell, emitting its events; return whether it was ok."""
        cell = state["cell"]
        emit({"event": "start", "cell_id": cell.cell_id, "trial": trial})
        _phase(f"cell {cell.cell_id}: trial {trial}")
        started_at = time.time()
        try:
            # How busy the machine was (load, steal, other GPU processes): recorded, warned about by the parent.
            # A server of this machine under test (an openai cell's base_url) is the measurement, not load.
            with LoadSampler(sampled, server=cell.options_dict.get("base_url")) as load, \
                    Sampler(sampled) as sampler:  # NVML sampled in a thread; None on CPU
                out = loaded.run(state["requests"], cell.max_batch_size, cell.options_dict)
            extra = {**out.extra, "warmup": state["warmup"], "telemetry": sampler.timeline, "kernels": kernels,
                     "host_load": load.summary, "startup": state["startup"], **({"cores": pinned} if pinned else {}),
                     **order}
            # The GPUs the pass ran on: this process's tensor-parallel ranks, or what the backend says (a server's)
            gpus = extra.pop("gpus", world)
            metrics = pass_result(out, extra.pop("metrics", {}), sampler.summary, gpus, extra).to_dict()
            status, error = "ok", None
            tolerated = backend.tolerate_request_errors and metrics["completed"] > 0
            pass_error = extra.pop("pass_error", None)
            if pass_error and tolerated:
                # The backend judged the pass (too many failed requests, wrong lengths): an error that keeps its figures.
                status, error = "error", pass_error
            elif (metrics["output_len_mismatches"] or metrics["failed"]) and not tolerated:
                # The harness checks the token count: a short or long output is not a result (a wrong count repeats,
                # as an error does).
                status, error = "error", _length_error(out.timings, metrics)
            emit({"event": "result", "cell_id": cell.cell_id, "trial": trial, "status": status,
                  "error": error, "metrics": metrics, "extra": extra,
                  "samples": request_samples(out.timings), "started_at": started_at, "ended_at": time.time()})
            return status == "ok"
        except Exception as exc:
            peak = device_peak_bytes()  # how far the failed pass got (an OOM's "peak memory seen")
            emit({"event": "result", "cell_id": cell.cell_id, "trial": trial, "status": classify_exception(exc),
                  "error": _describe(exc), "started_at": started_at, "ended_at": time.time(),
                  "extra": {"startup": state["startup"],
                            **({} if peak is None else {"peak_memory_bytes_at_failure": peak})}})
            loaded.recover()
            return False

    # The order of the trials (settings "order", bench.spec.cells.RunSettings.order): each cell warmed up and measured
    # in turn ("cells"), or every cell warmed up first and then their trials taken in turns, one trial of each cell
    # per round ("interleaved"), so a host whose speed changes within seconds weighs on every cell alike.
    interleaved = settings.get("order") == "interleaved" and len(job["cells"]) > 1
    blocks = [job["cells"]] if interleaved else [[item] for item in job["cells"]]
    order = {"order": {"interleaved": len(job["cells"])}} if interleaved else {}
    for block in blocks:
        states = [s for s in map(warm, block) if s is not None]
        # After the warm-up (a compile's worker pool sizes itself to the cores it may use), before the trials.
        pinned = apply_cores(settings.get("cores", DEFAULT_POLICY), cores) if any(s["trials"] for s in states) else None
        for i in range(max((len(s["trials"]) for s in states), default=0)):
            for s in states:
                if i < len(s["trials"]) and not s["failed"] and not measure(s, s["trials"][i], pinned, order):
                    s["failed"] = True  # an OOM or error repeats: the cell's remaining trials are not run
                    if s["trials"][i + 1:]:
                        emit({"event": "skipped", "cell_id": s["cell"].cell_id, "trials": s["trials"][i + 1:]})
        if pinned and cores:
            release_cores(cores)  # the next cell's warm-up on every core again; its trials choose anew
        for s in states:
            item, cell = s["item"], s["cell"]
            if item.get("profile_window") and not s["failed"]:  # timed now, as its trials saw the process; profiled last
                windows.append(time_timed_window(loaded, cell, {**item["profile_window"],
                                                                "workload_file": item["workload_file"]}, emit))
            if item.get("accuracy_capture") and not s["failed"]:
                capture_accuracy(loaded, cell, item["accuracy_capture"], emit)
    for cell, window, timed in windows:
        profile_timed_window(loaded, cell, window, timed, emit)
    if engine.get("export_dir") and not export_failed:
        _phase("exporting the engine artifact")
        try:
            emit(export_artifact(engine["export_dir"], loaded, key, environment, job["engines_dir"]))
        except Exception as exc:
            emit({"event": "fatal", "status": classify_exception(exc), "error": _describe(exc), "phase": "export"})
    loaded.close()


def capture_accuracy(loaded, cell, spec: dict, emit: Callable[[dict], None]) -> None:
    """Capture the cell's accuracy inputs after its timed trials (bench.execution.accuracy_capture), in this process.

    Its two events ("accuracy_capture", phase start / done) are progress: the supervisor's per-cell clock times the
    capture alone, and the next cell's warm-up from its end. A failure (an OOM under the run's memory cap, say)
    leaves no capture and changes no result: `bench accuracy` then measures the cell in a session of its own, as it
    would without a capture. The done event and the log line say why."""
    from bench.execution.accuracy_capture import capture

    emit({"event": "accuracy_capture", "cell_id": cell.cell_id, "phase": "start"})
    _phase(f"cell {cell.cell_id}: accuracy capture (teacher-forced answers and greedy tokens through the timed model)")
    try:
        meta = capture(loaded, cell, spec)
    except Exception as exc:  # noqa: BLE001 - the timed figures stand; the accuracy step measures this cell itself
        _phase(f"cell {cell.cell_id}: accuracy capture failed, none written: {_describe(exc)}")
        emit({"event": "accuracy_capture", "cell_id": cell.cell_id, "phase": "done", "status": classify_exception(exc),
              "error": _describe(exc)})
        loaded.recover()
        return
    _phase(f"cell {cell.cell_id}: accuracy captured in {meta['measure_s']:.1f} s ({sum(meta['fed'])} positions)"
           f"{describe_compile(meta['compile'])}")
    emit({"event": "accuracy_capture", "cell_id": cell.cell_id, "phase": "done", "status": "ok",
          "measure_s": meta["measure_s"]})


def time_timed_window(loaded, cell, window: dict, emit: Callable[[dict], None]) -> tuple:
    """Return (cell, window job, its timed stage or the exception it raised): the window's unprofiled stage
    (bench.execution.profile_window.time_window), run right after the cell's trials, before any profiler in this
    process, so that it sees the process as the trials did; profiled last (`profile_timed_window`). Its events
    (phase start, then timed) tell the supervisor that a hang here is this window's."""
    from bench.execution.profile_window import time_window

    emit({"event": "profile_window", "cell_id": cell.cell_id, "phase": "start"})
    _phase(f"cell {cell.cell_id}: profile window timed ({window['decode_steps']} decode steps, no profiler)")
    started = time.perf_counter()
    try:
        timed = time_window(loaded, cell, window)
        timed.result["timed_stage_s"] = time.perf_counter() - started  # the window's cost is both stages'
    except Exception as exc:  # noqa: BLE001 - said when the window's turn comes (profile_timed_window)
        loaded.recover()
        timed = exc
    emit({"event": "profile_window", "cell_id": cell.cell_id, "phase": "timed"})
    return cell, window, timed


def profile_timed_window(loaded, cell, window: dict, timed, emit: Callable[[dict], None]) -> None:
    """Profile one decode-step window of the cell through the timed model (bench.execution.profile_window), in this
    process, after its last timed pass (`bench run --profile-window`); `timed`: its unprofiled stage
    (`time_timed_window`), or the exception that stage raised.

    After the last pass of every cell of the process, not after each cell's own: a profiler that ran in a process
    slows what runs after it in that process (torch.profiler leaves CUPTI attached; pytorch/pytorch#144455), so no
    timed pass, and no window's unprofiled stage, may follow one. The window fixes its cell's shapes again (the static
    cache from its workload) and runs through the same loaded model and compiled step. Its two events
    ("profile_window", phase start / done) are progress: the supervisor's per-cell clock times the window alone. A
    failure (an out-of-memory, an error) leaves no window and changes no result; the done event and the log line say
    why."""
    from bench.execution.profile_window import profile_timed

    emit({"event": "profile_window", "cell_id": cell.cell_id, "phase": "start"})
    _phase(f"cell {cell.cell_id}: profile window ({window['decode_steps']} decode steps, torch.profiler, the timed model)")
    started_at = time.time()
    try:
        if isinstance(timed, BaseException):
            raise timed
        result = profile_timed(loaded, timed, Path(window["out_dir"]))
    except Exception as exc:  # noqa: BLE001 - the timed figures stand; the cell has no window of this process
        _phase(f"cell {cell.cell_id}: profile window failed, none stored: {_describe(exc)}")
        emit({"event": "profile_window", "cell_id": cell.cell_id, "phase": "done", "status": classify_exception(exc),
              "error": _describe(exc)})
        loaded.recover()
        return
    _phase(f"cell {cell.cell_id}: profile window done in {time.time() - started_at:.1f} s")
    emit({"event": "profile_window", "cell_id": cell.cell_id, "phase": "done", "status": "ok", "window": result,
          "started_at": started_at, "ended_at": time.time()})


def pass_result(out, backend_figures: dict, telemetry: dict, gpus: int, extra: dict):
    """Return the PassMetrics of one measured pass: the one place a pass's figures are put together.

    out: the backend's RunOutput; backend_figures: what the backend measured beyond the timings
    (the openai backend's schedule, goodput and lag); telemetry: the NVML sampler's summary;
    gpus: the devices the cell used (its tensor-parallel ranks, or a server's GPUs as its backend reports them in
    RunOutput.extra["gpus"]: the openai backend's `server_gpus`). A figure two parts both claim is a
    TypeError, not a silent overwrite.
    """
    from bench.metrics import (
        PassMetrics,
        efficiency_metrics,
        interactivity_metrics,
        pass_metrics,
    )

    timed = pass_metrics(out.timings, out.started, out.ended)
    memory = {"peak_memory_gb": extra["peak_memory_bytes"] / 1e9} if "peak_memory_bytes" in extra else {}
    return PassMetrics(
        **timed,
        **interactivity_metrics(out.timings, timed["output_throughput"], gpus),
        **efficiency_metrics(timed["total_output_tokens"], timed["duration_s"], telemetry["energy_j"],
                             extra.get("sol_time_s")),
        **telemetry, **backend_figures, **memory,
        peak_host_rss_gb=_host_peak_rss_bytes() / 1e9,
    )


def install_artifact(engine: dict, backend, key, artifact, environment: dict, engines_dir: str) -> dict:
    """Install the engine artifact the job names (if any) before the load; return what records say of their kernels.

    `kernels.source`: "built here" (compiled and tuned in this process or its engine folder) or
    "artifact" (loaded from `kernels.artifact`, a digest). An artifact made in another environment
    raises ArtifactMismatch naming the differences, unless the job allows tuning here instead
    (`retune_on_mismatch`): then the refusal is recorded beside the kernels built here.
    """
    from bench.backends import engine_artifact

    kernels: dict = {"source": "built here", "artifact": None}
    if engine.get("tuning_build") is not None:
        kernels["tuning_build"] = engine["tuning_build"]
    path = engine.get("artifact")
    if not path:
        return kernels
    if not engine.get("digest"):  # the parent checks trust and passes the digest it trusted (bench.runner.engines)
        raise engine_artifact.ArtifactMismatch(f"engine artifact {Path(path).name}: the job names no trusted digest")
    manifest, files = engine_artifact.read_files(path, engine["digest"])  # every check again: the second line
    if manifest["key_hash"] != key.key_hash:
        raise engine_artifact.ArtifactMismatch(f"engine artifact {Path(path).name} is for build key {manifest['key_hash']}, "
                                               f"not this cell's {key.key_hash}")
    differences = engine_artifact.mismatches(manifest["environment"], environment)
    if differences:
        if not engine.get("retune_on_mismatch"):
            raise engine_artifact.ArtifactMismatch(engine_artifact.mismatch_message(path, manifest, differences))
        return {**kernels, "refused_artifact": manifest["digest"], "refused_because": differences}
    backend.install_engine(artifact, files)
    made = manifest["environment"]
    return {"source": "artifact", "artifact": manifest["digest"], "artifact_file": Path(path).name,
            "artifact_tuned_digest": (manifest.get("tuned") or {}).get("digest"),
            # The engines folder it was installed in: the build's own where the run could use it (engine_artifact.load_dir).
            "installed_in": os.path.abspath(engines_dir),
            "built_in": manifest.get("engines_dir"),
            "made_on": {"host": made.get("host"), "gpu_uuid": made.get("gpu_uuid")}}


def export_artifact(out_dir: str, loaded, key, environment: dict, engines_dir: str) -> dict:
    """Write the warmed-up engine of this process (built in engines_dir) as an artifact; return the `exported` event."""
    from bench.backends import engine_artifact

    files = loaded.engine_files()
    if not files:
        raise ValueError(f"backend {key.backend!r} has no engine files to carry for build key {key.key_hash} "
                         "(an hf cell carries something only when compiled: compile != off)")
    path, manifest = engine_artifact.write(out_dir, key.to_dict(), key.key_hash, environment, loaded.tuned_kernels(),
                                           files, engines_dir)
    return {"event": "exported", "path": str(path), "digest": manifest["digest"], "key_hash": key.key_hash,
            "bytes": path.stat().st_size, "files": len(files), "tuned": manifest["tuned"]}


def _length_error(timings, metrics: dict, shown: int = 10) -> str:
    """Return the error of a pass whose requests failed or came out short or long, naming the first ones."""
    wrong = [t for t in timings if t.error is None and t.output_len != t.expected_output_len]
    text = (f"{len(wrong)} request(s) produced a different number of tokens than asked "
            f"({metrics['total_output_tokens']} of {metrics['expected_output_tokens']} in all)")
    if wrong:
        more = f" and {len(wrong) - shown} more" if len(wrong) > shown else ""
        text += ": " + ", ".join(f"{t.request_id} gave {t.output_len} of {t.expected_output_len}"
                                 for t in wrong[:shown]) + more
    failed = [t for t in timings if t.error is not None]
    text += f"; {len(failed)} failed"
    if failed:
        text += f" (first: {failed[0].request_id}: {failed[0].error})"
    return text


def _describe(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return f"{type(exc).__name__}: {exc}\n" + "".join(tb[-6:])[-4000:]


def _launch_ranks(ranks: int, job_file: str) -> None:
    """Replace this process with torchrun running `ranks` workers on the job file (never returns)."""
    os.environ[PARENT_PID_ENV] = str(os.getpid())  # the ranks' parent: torchrun, which keeps this pid
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
            "-m", "bench.execution.worker", job_file]
    os.execv(sys.executable, args)


def main(argv: list[str] | None = None) -> int:
    global _entered_at
    _entered_at = time.time()
    argv = sys.argv[1:] if argv is None else argv
    ranks = 1
    if argv[:1] == ["--ranks"]:
        ranks, argv = int(argv[1]), argv[2:]
    die_with_parent()
    if ranks > 1:
        _launch_ranks(ranks, argv[0])
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # library prints go to stderr, never into the event stream
    sys.stdout = sys.stderr
    reports = int(os.environ.get("RANK", "0")) == 0  # under torchrun, rank 0 speaks for the group

    def emit(event: dict) -> None:
        if reports:
            proto.write(json.dumps(event, allow_nan=False, default=str) + "\n")
            proto.flush()

    job = json.loads(Path(argv[0]).read_text() if argv else sys.stdin.read())
    try:
        measure_group(job, emit)
    except Exception as exc:  # anything measure_group did not classify itself
        emit({"event": "fatal", "status": classify_exception(exc), "error": _describe(exc), "phase": "run"})
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
