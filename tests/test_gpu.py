"""GPU tests: the harness's CUDA paths on a real device. Marked `gpu`: skipped without CUDA
(tests/conftest.py), run on the GPU machine by `nox -s gpu-tests` or
`python3 -m pytest -m gpu tests/test_gpu.py`. About two minutes on an H200.

- CUDA-event token times (the hf backend's clock) against torch.cuda._sleep, calibrated by the host;
- the compiled harness decode loop (CUDA graphs) against model.generate, 2-layer Qwen2, bf16;
- the memory cap: a real torch OOM just past the cap, not before it;
- NVML telemetry: power, memory, clock and energy present and sane under load;
- OOM and CUDA-error classification through real worker processes (bench run's path);
- the torch.profiler collector: RMSNorm and attention kernels per call on a 2-layer model, and a
  compiled decode step's kernels (bench profile's path);
- engines as artifacts: a tuned build written by `bench build`'s path and loaded by fresh workers.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """One engines folder for the module: compile caches and the copy-bandwidth figure are shared."""
    return tmp_path_factory.mktemp("engines")


def _tiny(engines, dtype="bf16", **options):
    """Return a loaded qwen-tiny (2 layers, Qwen's vocabulary) hf cell on cuda:0."""
    from bench.backends.hf.backend import HFBackend
    from bench.spec.cells import BuildKey

    opts = {"attn_implementation": "sdpa", "cache": "dynamic", "compile": "off", **options}
    key = BuildKey("hf", "qwen-tiny", dtype, "cuda", tuple(sorted(opts.items())))
    backend = HFBackend()
    return backend.load(backend.build(key, engines))


# --- timing -------------------------------------------------------------------------------


def _cycles_per_ms() -> float:
    """Return torch.cuda._sleep's GPU cycles per millisecond, measured by the host's clock around a long sleep."""
    import time

    import torch

    torch.cuda._sleep(1_000_000)  # warm the kernel
    torch.cuda.synchronize()
    cycles = 400_000_000
    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    return cycles / ((time.perf_counter() - t0) * 1e3)


def test_cuda_event_token_times_match_a_known_sleep():
    """The hf backend times tokens with CUDA events recorded between GPU work and read after the batch
    (bench.backends.hf.loop.record_mark): the gaps must be the sleeps' lengths, and recording must not
    wait for the GPU."""
    import time

    import torch

    from bench.backends.hf.loop import record_mark
    from bench.execution.profile_window import wall

    per_ms = _cycles_per_ms()
    sleeps_ms = [5.0, 20.0, 50.0]
    torch.cuda.synchronize()
    start_ev = torch.cuda.Event(enable_timing=True)
    start_ev.record()
    start = time.perf_counter()
    marks: list = []
    for ms in sleeps_ms:
        torch.cuda._sleep(int(ms * per_ms))
        record_mark(marks, cuda=True)
    enqueued_s = time.perf_counter() - start
    torch.cuda.synchronize()
    # as HFLoaded._run_batch converts them: seconds on the host's clock
    times = [start + start_ev.elapsed_time(ev) / 1000.0 for ev in marks]
    gaps_ms = [(b - a) * 1e3 for a, b in zip([start, *times], times, strict=False)]
    for got, want in zip(gaps_ms, sleeps_ms, strict=True):
        assert got == pytest.approx(want, rel=0.05, abs=0.3), (gaps_ms, sleeps_ms)
    assert enqueued_s * 1e3 < 0.5 * sum(sleeps_ms)  # no host synchronisation per mark
    # the profiler's synchronised wall timer agrees with the sleep too
    assert wall(lambda: torch.cuda._sleep(int(30 * per_ms)), cuda=True) * 1e3 == pytest.approx(30, rel=0.05, abs=0.5)


# --- the compiled decode loop -----------------------------------------------------------


def test_compiled_harness_loop_gives_generates_tokens_in_bf16(engines):
    """decode_loop=harness with compile=reduce-overhead (CUDA graphs) against model.generate (eager), bf16.

    bf16 logits of a random model have near-ties that compiled and eager kernels may break
    differently, and one different token changes everything after it. So each step is checked
    on generate's own history (teacher forcing): the compiled step, fed generate's previous
    token, must predict generate's next one, except at a near-tie of generate's logits (within
    2 % of the top logit); at least 85 % of the steps must agree exactly. A wrong position,
    mask or cache would miss at once and far from any tie. The free-running loop must write
    every position and time every token.
    """
    import torch

    from bench.backends.hf.backend import left_padded
    from bench.backends.hf.loop import UNWRITTEN
    from bench.workloads.request import Request

    loaded = _tiny(engines, cache="static", compile="reduce-overhead", decode_loop="harness")
    loop = loaded.loop
    assert loop is not None and loop.compiled
    g = torch.Generator().manual_seed(0)
    lens = (37, 12, 64, 5)  # left padding of 27, 52, 0 and 59
    reqs = [Request(str(i), tuple(torch.randint(1, 150000, (n,), generator=g).tolist()), 16) for i, n in enumerate(lens)]
    ids, mask = left_padded(reqs, loaded.pad_id, loaded.device)
    max_new, cache_len = 16, 128
    with torch.inference_mode():
        marks: list = []
        loop.generate(ids, mask, max_new, cache_len, [], cuda=True)  # compile and capture
        free = loop.generate(ids, mask, max_new, cache_len, marks, cuda=True)
        ref = loaded.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, min_new_tokens=max_new,
                                    do_sample=False, pad_token_id=loaded.pad_id, return_dict_in_generate=True,
                                    output_scores=True)
        want = ref.sequences[:, ids.shape[1]:]
        scores = torch.stack(ref.scores, dim=1).float()  # (batch, step, vocab): generate's logits
        state = loop.prefill(ids, mask, cache_len)
        predicted = [state["token"][:, 0].clone()]
        for k in range(1, max_new):
            state["token"] = want[:, k - 1 : k].clone()  # generate's token k-1 is the input of step k
            loop.decode(state, 1)
            predicted.append(state["token"][:, 0].clone())
    torch.cuda.synchronize()
    got = torch.stack(predicted, dim=1)
    assert not (free == UNWRITTEN).any() and len(marks) == max_new
    assert [a.elapsed_time(b) >= 0 for a, b in zip(marks, marks[1:], strict=False)] == [True] * (max_new - 1)
    top = scores.max(-1).values
    mine = scores.gather(-1, got.unsqueeze(-1)).squeeze(-1)
    near_tie = (top - mine) <= 0.02 * top.abs() + 1e-3
    same = got == want
    assert bool((same | near_tie).all()), f"steps off a near-tie: {(~(same | near_tie)).nonzero().tolist()}"
    assert same.float().mean() >= 0.85, f"only {int(same.sum())} of {same.numel()} steps agree exactly"
    loaded.close()


# --- memory cap -------------------------------------------------------------------------


def test_the_memory_cap_raises_a_real_oom_just_past_the_cap(tmp_path):
    """gpu_memory_gb = 2 (bench.machine.memory_cap): 1.8 GB fit, 2.5 GB raise torch's OOM, classified 'oom'.

    In a subprocess: the cap (set_per_process_memory_fraction) is process-wide.
    """
    code = """
import json, torch
from bench.machine.failures import classify_exception
from bench.machine.memory_cap import apply_cap
applied = apply_cap("cuda")
held = [torch.empty(int(1.0e9), dtype=torch.uint8, device="cuda")]
held.append(torch.empty(int(0.8e9), dtype=torch.uint8, device="cuda"))  # 1.8 GB: under the cap
out = {"applied": applied, "fit_gb": torch.cuda.memory_allocated() / 1e9}
try:
    held.append(torch.empty(int(0.7e9), dtype=torch.uint8, device="cuda"))  # 2.5 GB: past it
    out["past_cap"] = "ok"
except Exception as exc:
    out["past_cap"] = classify_exception(exc)
    out["error"] = type(exc).__name__ + ": " + str(exc)[:300]
del held
big = torch.empty(int(1.9e9), dtype=torch.uint8, device="cuda")  # the memory came back: 1.9 GB fit again
out["after"] = torch.cuda.memory_allocated() / 1e9
print(json.dumps(out))
"""
    env = {**os.environ, "BENCH_GPU_MEMORY_GB": "2", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["applied"]["gpu_memory_gb"] == pytest.approx(2.0)
    assert out["applied"]["memory_fraction"] * out["applied"]["device_total_bytes"] == pytest.approx(2e9, rel=1e-6)
    assert out["fit_gb"] == pytest.approx(1.8, abs=0.01)
    assert out["past_cap"] == "oom" and "OutOfMemoryError" in out["error"], out
    assert out["after"] == pytest.approx(1.9, abs=0.01)


# --- tuned kernels across processes ------------------------------------------------------


def test_a_warm_process_runs_the_cached_tuned_kernels_instead_of_tuning_again(tmp_path):
    """torch_workarounds' recheck backport on the installed torch: three processes share one Inductor cache (a build
    key's folder).

    The first tunes its kernel by coordinate descent; a warm one with the backport must tune
    nothing and compute the right values from the cached winner. This kernel does not show
    pytorch/pytorch#172819 itself (H200, torch 2.11, 2026-12-01: tunings 1 / 0 / 0 with the
    warm process unpatched in between); the int8wo cell does (docs/guide/hf-backend.md).
    """
    code = """
import json, sys, torch
import torch._inductor.config as inductor
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from bench.backends.hf import compile as hf_compile, torch_workarounds as tw
inductor.coordinate_descent_tuning = True
workarounds = tw.Workarounds(patches=(tw.RECHECK_BACKPORT,) if sys.argv[1] == "1" else ()).install()
tuned, rechecks = [], []
recheck = CachingAutotuner.recheck_autotune_cache
def counting_recheck(self, *args, **kwargs):
    rechecks.append(1)
    return recheck(self, *args, **kwargs)
CachingAutotuner.recheck_autotune_cache = counting_recheck
original = CachingAutotuner.coordinate_descent_tuning
def counting(self, launcher, *args, **kwargs):
    tuned.append(1)
    return original(self, launcher, *args, **kwargs)
CachingAutotuner.coordinate_descent_tuning = counting
def f(x):
    return torch.sin(x) * 2 + torch.cos(x)
x = torch.randn(1 << 22, device="cuda")
torch.testing.assert_close(torch.compile(f)(x), f(x))
print(json.dumps({"tuned": len(tuned), "rechecks": len(rechecks), "buggy": tw.recheck_skips_single_config_hits(),
                  "static": bool(getattr(inductor, "use_static_cuda_launcher", False)),
                  "settings": hf_compile.inductor_settings(workarounds)}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def process(backport: bool) -> dict:
        proc = subprocess.run([sys.executable, "-c", code, "1" if backport else "0"], capture_output=True, text=True,
                              timeout=300, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    cold, warm_unpatched, warm = process(True), process(False), process(True)
    print("coordinate-descent tunings (rechecks) per process, cold / warm without / warm with the backport:",
          *(f"{p['tuned']} ({p['rechecks']})" for p in (cold, warm_unpatched, warm)), "| torch re-tunes:", cold["buggy"])
    assert cold["tuned"] > 0
    # Unpatched, the warm process says it runs without the backport and went through the cache recheck that
    # the backport replaces (H200, torch 2.11: 1 recheck, 0 tunings; this kernel does not show the bug).
    assert warm_unpatched["settings"]["recheck_backported"] is False and warm_unpatched["rechecks"] > 0
    if cold["buggy"]:
        assert warm["settings"]["recheck_backported"] is True and warm["settings"]["retunes_each_process"] is False
    assert warm["tuned"] == 0, warm


def test_a_warm_process_compiling_from_source_runs_the_stored_winners(tmp_path):
    """torch_workarounds' kept-winner rule on the installed torch and Triton: a warm process without the FX graph
    cache compiles the kernel from its source again (Inductor's compile workers where the pool is up) and hits the
    stored winner. Without the rule such a process may tune again (the mark lost in a pickle, or a reduction re-benchmarked); with it, it must
    tune nothing, and where the unpatched process tuned, the patched one says it kept the winner instead."""
    code = """
import json, os, sys, torch
import torch._inductor.config as inductor
from bench.backends.hf import compile as hf_compile, torch_workarounds as tw
inductor.coordinate_descent_tuning = True
rule = (tw.KEPT_WINNERS,) if sys.argv[1] == "1" else ()
workarounds = tw.Workarounds(patches=(tw.TUNING_COUNT, *rule)).install()  # the folder's winners are read here
def f(x, w):
    return (torch.nn.functional.silu(x @ w) * 2).sum(-1)  # a reduction and a pointwise kernel
x, w = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.testing.assert_close(torch.compile(f)(x, w), f(x, w), rtol=2e-2, atol=2e-1)
print(json.dumps(hf_compile.inductor_settings(workarounds)))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}

    def process(kept: bool, fx_cache: bool) -> dict:
        proc = subprocess.run([sys.executable, "-c", code, "1" if kept else "0"], capture_output=True, text=True,
                              timeout=300, env={**env, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1" if fx_cache else "0"}, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    cold = process(kept=False, fx_cache=True)
    unpatched, kept = process(kept=False, fx_cache=False), process(kept=True, fx_cache=False)
    print("tunings cold / warm from source without / with the rule:", cold["tuned_in_process"],
          unpatched["tuned_in_process"], kept["tuned_in_process"], "| kept:", kept["kept_in_process_kernels"])
    assert cold["tuned_in_process"] > 0
    assert kept["tuned_in_process"] == 0, kept
    if unpatched["tuned_in_process"]:
        assert kept["kept_in_process"] > 0, kept


# --- telemetry --------------------------------------------------------------------------


def test_nvml_readings_are_present_and_sane():
    import torch

    from bench.machine.environment import cudnn_label, fingerprint, gpu_info
    from bench.machine.telemetry import Sampler

    info = gpu_info(0)
    assert "nvml_error" not in info, info
    assert info["gpu_count"] >= 1 and info["gpu_name"] and info["driver"]
    total = info["gpu_memory_bytes"]
    assert total == pytest.approx(torch.cuda.get_device_properties(0).total_memory, rel=0.05)
    env = fingerprint("cuda")
    assert env["gpu_name"] == info["gpu_name"] and env.get("gpu_uuid", "").startswith("GPU-")
    # the cuDNN this torch loads, as cuDNN numbers it (the SDPA check's table prints the same number raw)
    assert env["cudnn"] == cudnn_label(torch.backends.cudnn.version()) and env["cudnn"].count(".") == 2

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    held = torch.empty(int(4e9), dtype=torch.uint8, device="cuda")  # 4 GB the sampler must see
    torch.cuda.synchronize()
    with Sampler("cuda", interval_s=0.05) as s:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 4.0:  # ~4 s of steady matmuls
            for _ in range(50):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
    m = s.summary
    assert m["telemetry_samples"] >= 10
    assert 30 <= m["avg_power_w"] <= 1500, m
    # The energy counter and the sampled power tell the same story once the load is steady:
    # NVML's power reading is a 1 s average on Ampere and later (on the H200 a 1 s burst read
    # 285 J of sampled power against 520 J on the counter), so compare the counter's average
    # with the readings of the last half of the window only.
    late = [p for t, p in zip(s.timeline["t_s"], s.timeline["power_w"], strict=True)
            if p is not None and t >= s.timeline["t_s"][-1] / 2]
    assert len(late) >= 5 and m["energy_j"] > 0
    assert m["avg_power_w"] == pytest.approx(statistics.median(late), rel=0.3), (m, late)
    assert 4.0 <= m["peak_nvml_memory_gb"] <= total / 1e9, m
    assert 200 <= m["sm_clock_mhz_median"] <= 4000, m
    assert len(s.timeline["power_w"]) == len(s.timeline["t_s"]) >= 10
    # issue 35: clocks, temperature, utilisation and throttle reasons at >= 10 Hz, energy valid
    assert m["telemetry_hz"] >= 10 and m["telemetry_max_gap_ms"] < 500, m
    assert 500 <= m["mem_clock_mhz_median"] <= 10000 and 15 <= m["temperature_c_max"] <= 110, m
    assert m["gpu_busy_pct"] >= 80, m  # back-to-back matmuls: the GPU is busy
    assert m["energy_valid"] is True and m["throttle_power_pct"] is not None, m
    assert all(isinstance(t, int) for t in s.timeline["throttle"] if t is not None)
    del held


# --- classification through worker processes ----------------------------------------------


def test_oom_and_cuda_errors_are_classified_through_worker_processes(tmp_path, engines):
    """bench run's path (supervisor -> worker subprocess) on the GPU, under a 0.3 GB cap:
    - a batch too big for the cap: a real CUDA OOM, stored as 'oom'; the same worker then runs the
      group's next cell fine (the OOM is a result, not a crash);
    - a prompt with a token id past the vocabulary: a CUDA device-side assert, stored as 'error', not 'oom'.
    """
    from bench.results import query
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix
    from bench.workloads.request import Request
    from bench.workloads.workload import Workload

    bad = tmp_path / "bad.json"
    bad.write_text(Workload("bad", [Request("r0", (1, 2, 10_000_000, 3), 4)], {}, "test").to_json())
    matrix = parse_matrix({
        "name": "gpu-classify", "backends": ["hf"], "model": "qwen-tiny", "device": "cuda", "precisions": ["bf16"],
        "max_batch_sizes": [64], "workloads": ["huge"], "trials": 1, "warmup": 0, "timeout_s": 300,
        "gpu_memory_gb": 0.3, "options": {"attn_implementation": "sdpa"},
        "workload": {
            "huge": {"source": "synthetic", "input_len": 2000, "output_len": 4, "num_requests": 64,
                     "max_input_len": 2000, "max_total_len": 2004},
            "small": {"source": "synthetic", "input_len": 16, "output_len": 4, "num_requests": 2},
            "bad": {"source": "file", "path": str(bad), "num_requests": 1},
        },
        # after the OOM, a small cell in the same worker; the bad prompt in a worker of its own
        "include": [{"workload": "small", "max_batch_size": 2},
                    {"workload": "bad", "max_batch_size": 1, "attn_implementation": "eager"}],
    })
    store = tmp_path / "s.jsonl"
    summary = run_matrix(matrix, store, engines_dir=engines, workload_cache=tmp_path / "wl", show_progress=False)
    by = {r.cell["workload"]["name"]: r for r in query.load([store])}
    assert by["huge"].status == "oom", by["huge"].error
    assert "OutOfMemoryError" in by["huge"].error or "out of memory" in by["huge"].error
    assert by["huge"].extra.get("peak_memory_bytes_at_failure", 0) > 0
    assert by["small"].status == "ok" and by["small"].environment["pid"] == by["huge"].environment["pid"]
    assert by["bad"].status == "error" and "out of memory" not in by["bad"].error.lower(), by["bad"].error
    assert summary.statuses == {"oom": 1, "ok": 1, "error": 1}


# --- profiler collector -----------------------------------------------------------------


def _profile(tmp_path, engines, name, decode_steps=3, **options):
    """Return (session result, KernelTable) of bench profile's session on a qwen-tiny bf16 cuda cell."""
    from bench.execution.kernels import KernelTable
    from bench.execution.nvtx import DEFAULT_PATTERNS
    from bench.profiling.session import run_session
    from bench.spec.matrix import parse_matrix
    from bench.workloads.workload import cached_workload

    opts = {"attn_implementation": "sdpa", **options}
    (cell,) = parse_matrix({
        "backends": ["hf"], "model": "qwen-tiny", "device": "cuda", "precisions": ["bf16"], "max_batch_sizes": [1],
        "workloads": ["w"], "options": opts,
        "workload": {"w": {"source": "synthetic", "input_len": 32, "output_len": 8, "num_requests": 1}},
    }).cells
    _, wl_file = cached_workload(cell.workload, tmp_path / "wl")
    out = tmp_path / name
    out.mkdir()
    job = {"build_key": cell.build_key().to_dict(), "cell": cell.to_dict(), "workload_file": str(wl_file),
           "engines_dir": str(engines), "tool": "torch", "decode_steps": decode_steps, "batches": 1, "warmup": 1,
           "patterns": list(DEFAULT_PATTERNS), "out_dir": str(out)}
    result = run_session(job)
    return result, KernelTable.load(result["kernel_table"])


def test_profiler_counts_rmsnorm_and_attention_kernels_on_a_2_layer_model(tmp_path, engines):
    """Eager generate window (prefill + 3 decode steps): 5 RMSNorm and 2 attention calls per forward.

    On an H200 the 32-layer model's bf16 RMSNorm took 8 kernels a call and sdpa attention 21-28
    (docs/measurements/2026-11-30-h200-kernel-timelines.md): the same module code at 2 layers
    launches the same kernels per call.
    """
    from bench.report.kernel_panel import summary_row

    result, table = _profile(tmp_path, engines, "eager", cache="dynamic")
    assert result["cuda"] and table.unit == "gpu_kernel"
    norm, attn = table.range("Qwen2RMSNorm"), table.range("Qwen2Attention")
    assert norm.instances == 4 * 5 and attn.instances == 4 * 2  # prefill + 3 decode steps
    assert 4 <= norm.kernels_per_instance <= 12 and norm.gpu_us_per_instance_median > 0
    assert 8 <= attn.kernels_per_instance <= 40 and attn.gpu_us_per_instance_median > 0
    assert attn.kernels_per_instance_by_category.get("attention", 0) >= 1  # the sdpa kernel itself
    assert table.range("decode_step").instances == 3 and table.range("prefill").instances == 1
    row = summary_row(table, result["window"], result)
    assert row["per"] == "decode step" and row["kernels"] >= 5 * norm.kernels_per_instance
    assert row["attention_kernels"] >= 2  # at least one attention kernel per layer per step
    # no range markers counted as kernels: every (no range) kernel name is a real kernel's
    assert not [r for r in table.rows if r.range == "(no range)" and r.kernel.startswith("Qwen2")]


def test_profile_of_a_compiled_decode_step_counts_fused_norm_and_attention_kernels(tmp_path, engines):
    """Harness loop, compile reduce-overhead (CUDA graphs): decode steps only, no module hooks; the fused
    Triton RMSNorm kernels ('norm') and the attention kernels are counted per step."""
    from bench.report.kernel_panel import summary_row

    result, table = _profile(tmp_path, engines, "compiled", cache="static", compile="reduce-overhead",
                             decode_loop="harness")
    window = result["window"]
    assert window["kind"] == "decode" and window["module_ranges"] is False and window["static_cache_len"] == 128
    assert result["step_ms"] > 0
    row = summary_row(table, window, result)
    assert row["per"] == "decode step" and row["steps"] == 3
    assert 1 <= row["norm_kernels"] <= 10, row  # 5 RMSNorms fused into Triton kernels with rsqrt
    assert row["attention_kernels"] >= 2, row
    assert row["RMSNorm_per_call"] is None  # no module ranges inside a compiled step


def test_graph_replay_kernels_land_in_their_decode_step_range(tmp_path, engines):
    """The collector attributes a CUDA graph replay's kernels to the decode-step range around it.

    (If this fails while the test above passes, the per-step figures come from the window's
    totals, which are right for a decode-only window, but the per-range view is not.)
    """
    _, table = _profile(tmp_path, engines, "replay", cache="static", compile="reduce-overhead", decode_loop="harness")
    step = table.range("decode_step")
    assert step.instances == 3 and step.kernels_per_instance >= 0.9 * table.total_kernels / 3, (
        step, table.total_kernels, [(r.range, r.kernels) for r in table.ranges])


# ---- torch.profiler and nsys on the same cell (issue 32) ----

COPY_ACTIVITY = ("Memcpy", "Memset")  # device activities torch.profiler lists among kernels; nsys keeps them apart


def _profile_tool(tool: str, options: dict, **settings):
    """Return (record, KernelTable) of `bench profile`'s library path for qwen-tiny on cuda, one cell, under `tool`."""
    from bench.execution.kernels import KernelTable
    from bench.profiling.driver import ProfileSettings, profile_matrix
    from bench.spec.matrix import parse_matrix

    matrix = parse_matrix({
        "name": f"both-{tool}", "backends": ["hf"], "model": "qwen-tiny", "device": "cuda", "precisions": ["bf16"],
        "max_batch_sizes": [1], "workloads": ["w"], "options": {"attn_implementation": "sdpa", **options},
        "workload": {"w": {"source": "synthetic", "input_len": 32, "output_len": 8, "num_requests": 1}},
    })
    records, failed = profile_matrix(matrix, ProfileSettings(tool=tool, decode_steps=3, **settings), Path("profiles"),
                                     Path(f"profiles/both-{tool}.jsonl"), printer=lambda text: None)
    assert failed == 0, records[0].error
    return records[0], KernelTable.load(records[0].kernel_table)


def _without_copies(table, group: str) -> float:
    """Kernels per instance of a range group in a torch table, less the Memcpy/Memset activities it lists."""
    r = table.range(group)
    copies = sum(row.kernels for row in table.rows if row.range == group and row.kernel.startswith(COPY_ACTIVITY))
    return r.kernels_per_instance - copies / r.instances


@pytest.mark.parametrize("options", [
    {"cache": "dynamic"},  # eager generate: module, prefill and decode-step ranges
    {"cache": "static", "compile": "reduce-overhead", "decode_loop": "harness"},  # CUDA-graph replays per step
], ids=["eager", "compiled-graphs"])
def test_torch_profiler_and_nsys_agree_range_by_range(options):
    """Both collectors on the same cell and window: every range group has the same instances, and the same
    kernels per instance once the known differences are taken out:

    1. torch.profiler lists Memcpy/Memset device activities (a host-to-device copy of the input
       ids, a cache update's memset) among its "kernels"; nsys keeps them in other tables
       (CUPTI_ACTIVITY_KIND_MEMCPY/MEMSET) and counts kernels only. Measured on the H200
       (2026-12-02, qwen-7b-shape, batch 1): the eager step's 1465 (torch) vs 1463 (nsys) kernels
       are a Memcpy DtoH and a Memset, the compiled step's 657 vs 655 a Memcpy DtoD and a Memset,
       and the attention call's 20.4 vs 20.2 are 32 Memsets over its 160 calls (0.2 a call); ncu,
       which replays kernels only, counts 1463 and 655 too.
    2. torch.profiler places a kernel through the CPU operator that launched it; a kernel it
       cannot link to an operator is counted outside every range (meta.unlinked_kernels), while
       nsys places every kernel by its launch's correlationId. So nsys may hold more per range
       than torch, by at most the kernels torch left unlinked (none on the H200, 2026-12-02).
    3. A CUDA graph replay is one cudaGraphLaunch: torch links its kernels to the enclosing
       range event, nsys (--cuda-graph-trace=node) joins each node's kernel to the launch's
       correlationId; both put them in the decode step.

    Two differences were the collectors' own and are mended there, each with a CPU test: torch
    hands a kernel also to a cudaDeviceSynchronize whose correlation id equals the launching
    operator's External id (the eager `batch` range's 499 vs 498 here until 2026-12-02, one
    rotary-embedding sgemm counted twice; bench.execution.torch_collector._is_api_call), and
    nsys records CUB's own NVTX range (CCCL domain), which the nsys reader now leaves out when
    the harness's domain is there (bench.profiling.nsys_collector.nvtx_ranges). With both mended,
    both cases passed on the H200 (2026-12-02, docs/measurements/2026-12-02-h200-agree-test-and-ncu-full-set.md).
    Without the `nvtx` package the harness's ranges are in NVTX's default domain, and CUB's range came back as a
    `cub` group on an H100 (2026-12-06): the reader now reads the default domain alone where it holds the harness's
    decode steps; both cases then passed there (docs/measurements/2026-12-06-h100-planted-regressions-rerun.md).
    """
    from bench.errors import BenchInputError
    from bench.profiling.nsys_collector import find_nsys

    try:
        nsys, version = find_nsys()
    except BenchInputError as exc:
        pytest.skip(f"no usable nsys: {exc}")
    torch_rec, t = _profile_tool("torch", options)
    nsys_rec, n = _profile_tool("nsys", options, nsys=nsys, tool_version=".".join(map(str, version)))
    info = nsys_rec.extra["profile"]["nsys_export"]
    assert info["nsys_version"] and info["export_schema"] and "NVTX_EVENTS" in info["tables_read"], info
    unlinked = t.meta.get("unlinked_kernels", 0)
    groups = {r.range for r in t.ranges} | {r.range for r in n.ranges}
    seen = {g: (t.range(g).instances if any(r.range == g for r in t.ranges) else None,
                n.range(g).instances if any(r.range == g for r in n.ranges) else None) for g in sorted(groups)}
    for g in sorted(groups - {"(no range)"}):
        tr, nr = t.range(g), n.range(g)  # a KeyError names the group one collector lacks
        assert tr.instances == nr.instances, (g, seen)
        torch_k = _without_copies(t, g)
        # difference 2 only ever adds to nsys's side, and by no more than torch left unlinked
        assert torch_k <= nr.kernels_per_instance + 1e-9, (
            f"{g}: torch {torch_k} vs nsys {nr.kernels_per_instance} kernels per instance\n{_count_diff(t, n, g)}")
        assert (nr.kernels_per_instance - torch_k) * nr.instances <= unlinked + 1e-9, (
            g, torch_k, nr.kernels_per_instance, unlinked)
    window_copies = _window_copies(t)
    assert n.total_kernels == t.total_kernels - window_copies, (n.total_kernels, t.total_kernels, window_copies)
    if options.get("compile") == "reduce-overhead":
        assert info["graph_kernels"] > 0 and n.range("decode_step").kernels_per_instance > 0, info


def _count_diff(torch_table, nsys_table, group: str, shown: int = 40) -> str:
    """Return what a failed range comparison prints, so the H200 log says where the two collectors part.

    The eager batch range on 2026-12-01 held 499 kernels in torch.profiler and 498 in nsys; the
    names alone could not say which, as the two tools demangle differently, so kernels are keyed by
    their qualified function name (tests/support/kernel_names.py): per key and per category the
    counts that differ, and the "(no range)" group and the totals (a kernel one tool placed in
    another range shows there, one it did not see at all shows in the totals). A text, one line per entry:
    pytest shortens a dict in an assertion message to a line ("..."), which hid the kernel on 2026-12-01.
    """
    from tests.support.kernel_names import base_name

    def counts(table, rng):
        out: dict[str, int] = {}
        for row in table.rows:
            if row.range == rng and not row.kernel.startswith(COPY_ACTIVITY):
                key = base_name(row.kernel)
                out[key] = out.get(key, 0) + row.kernels
        return out

    def differ(a: dict, b: dict) -> dict:
        d = {k: (a.get(k, 0), b.get(k, 0)) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)}
        return dict(sorted(d.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:shown])

    def categories(table):
        cats = dict(table.range(group).kernels_per_instance_by_category)
        cats.pop("copy/memset", None)  # torch lists Memcpy/Memset activities there, nsys keeps them apart
        return cats

    from bench.execution.kernels import NO_RANGE

    no_range = tuple(sum(counts(t, NO_RANGE).values()) for t in (torch_table, nsys_table))
    lines = [f"range {group!r}: kernels that differ, torch.profiler vs nsys"]
    for title, diff in (("by function", differ(counts(torch_table, group), counts(nsys_table, group))),
                        ("by category, per instance", differ(categories(torch_table), categories(nsys_table)))):
        lines += [f"  {title}:"] + [f"    {key}: {a} vs {b}" for key, (a, b) in diff.items()]
    lines.append(f"  (no range): {no_range[0]} vs {no_range[1]}")
    lines.append(f"  totals less copies: {torch_table.total_kernels - _window_copies(torch_table)} vs "
                 f"{nsys_table.total_kernels}")
    return "\n".join(lines)


def _window_copies(table) -> int:
    """Memcpy/Memset activities in a torch window, each counted once.

    Rows are per range group and inclusive, so a launch appears in every group around it. In
    these windows one group encloses every in-range launch (batch for generate, decode_step for
    the harness loop), so a name's launches are its (no range) row plus its largest row.
    """
    outside: dict[str, int] = {}
    inside: dict[str, int] = {}
    for row in table.rows:
        if row.kernel.startswith(COPY_ACTIVITY):
            target = outside if row.range == "(no range)" else inside
            target[row.kernel] = max(target.get(row.kernel, 0), row.kernels)
    return sum(outside.values()) + sum(inside.values())


# --- engines as artifacts ---------------------------------------------------------------


def test_an_engine_artifact_carries_the_tuned_kernels_to_a_fresh_folder(tmp_path):
    """bench build then bench run --engines (issue 31): a compiled, coordinate-descent-tuned qwen-tiny cell built cold
    in one worker, written as an artifact, and loaded by two fresh workers in folders of their own: they run the
    build's tuned configs (the tuned digest after their passes is the artifact's), and the records say so."""
    from bench.backends import engine_artifact
    from bench.results import query
    from bench.runner.build import build_artifacts
    from bench.runner.matrix import run_matrix
    from bench.spec.matrix import parse_matrix
    from bench.spec.narrow import narrow

    matrix = parse_matrix({
        "name": "gpu-artifact", "backends": ["hf"], "model": "qwen-tiny", "device": "cuda", "precisions": ["bf16"],
        "max_batch_sizes": [1], "workloads": ["w"], "trials": 2, "warmup": 1, "timeout_s": 600,
        "options": {"attn_implementation": "sdpa", "cache": "static", "compile": "reduce-overhead",
                    "decode_loop": "harness", "compile_tuning": "coordinate-descent"},
        "workload": {"w": {"source": "synthetic", "input_len": 16, "output_len": 16, "num_requests": 2}},
    })
    (built,) = build_artifacts(matrix, tmp_path / "art", engines_dir=tmp_path / "engines", workload_cache=tmp_path / "wl")
    assert built.artifact, built.error
    manifest, files = engine_artifact.read_files(built.artifact)
    print("artifact", built.bytes, "bytes,", len(files), "files; tuned", manifest["tuned"], "; build", built.seconds, "s")
    assert manifest["tuned"]["kernels"] > 0 and any(p.endswith(".best_config") for p in files)
    assert manifest["environment"]["gpu_name"] and manifest["environment"]["triton"]
    store = tmp_path / "s.jsonl"
    summary = run_matrix(narrow(matrix, engines=[str(tmp_path / "art")], runs=2), store,
                         engines_dir=tmp_path / "engines", workload_cache=tmp_path / "wl", show_progress=False)
    assert summary.statuses == {"ok": 4}
    records = query.load([store])
    assert {r.kernels["source"] for r in records} == {"artifact"}
    assert {r.kernels["artifact"] for r in records} == {manifest["digest"]}
    assert {r.tuned_digest for r in records} == {manifest["tuned"]["digest"]}
    assert len({r.environment["pid"] for r in records}) == 2
    # Each compiling worker installed the patches its torch needs (bench/backends/hf/torch_workarounds.py).
    installed = {tuple(r.extra["inductor"]["torch_workarounds"]) for r in records}
    assert len(installed) == 1 and "kept_winners" in next(iter(installed))
    if records[0].environment["torch"].startswith("2.11."):
        assert installed == {("recheck_backport", "tuning_count", "kept_winners")}


# --- a busy GPU -------------------------------------------------------------------------------


def test_another_process_on_the_gpu_is_seen_and_warned_about():
    """bench.machine.host_load: NVML's compute processes other than ours (optimum-benchmark's isolation check)."""
    import torch

    from bench.machine.host_load import LoadSampler

    torch.ones(1 << 20, device="cuda:0")  # this process holds a context too: it must not count as another
    with LoadSampler("cuda:0") as alone:
        time.sleep(0.2)
    assert alone.summary["gpu_other_processes"] == [], alone.summary
    holder = subprocess.Popen([sys.executable, "-c", "import torch, sys, time; x = torch.ones(1 << 28, device='cuda:0'); "
                               "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with LoadSampler("cuda:0") as shared:
            time.sleep(0.2)
    finally:
        holder.kill()
    others = shared.summary["gpu_other_processes"]
    assert len(others) == 1 and others[0]["used_memory_gb"] > 0.9, shared.summary  # the holder's 1 GiB (and context)
    assert any("other process(es) on the GPU" in r for r in shared.summary["busy"])
