"""GPU tests: the harness's CUDA paths on a real device. Marked `gpu`: skipped without CUDA
(tests/conftest.py), run on the GPU machine by `nox -s gpu-tests` or
`python3 -m pytest -m gpu tests/test_gpu.py`. About two minutes on an H200.

- CUDA-event token times (the hf backend's clock) against torch.cuda._sleep, calibrated by the host;
- the compiled harness decode loop (CUDA graphs) against model.generate, 2-layer Qwen2, bf16;
- the memory cap: a real torch OOM just past the cap, not before it;
- NVML telemetry: power, memory, clock and energy present and sane under load;
- OOM and CUDA-error classification through real worker processes (bench run's path);
- the torch.profiler collector: RMSNorm and attention kernels per call on a 2-layer model, and a
  compiled decode step's kernels (bench profile's path).
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
    from bench.backends.hf import HFBackend
    from bench.spec import BuildKey

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
    (bench.backends.hf_loop.record_mark): the gaps must be the sleeps' lengths, and recording must not
    wait for the GPU."""
    import time

    import torch

    from bench.backends.hf_loop import record_mark
    from bench.profiling.session import wall

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

    from bench.backends.hf import left_padded
    from bench.backends.hf_loop import UNWRITTEN
    from bench.workloads.workload import Request

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
    """gpu_memory_gb = 2 (bench.execution.memory_cap): 1.8 GB fit, 2.5 GB raise torch's OOM, classified 'oom'.

    In a subprocess: the cap (set_per_process_memory_fraction) is process-wide.
    """
    code = """
import json, torch
from bench.execution.failures import classify_exception
from bench.execution.memory_cap import apply_cap
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
    """hf.keep_tuned_winners on the installed torch: three processes share one Inductor cache (a build key's folder).

    The first tunes its kernel by coordinate descent; a warm one with the backport must tune
    nothing and compute the right values from the cached winner. This kernel does not show
    pytorch/pytorch#172819 itself (H200, torch 2.11, 2026-12-01: tunings 1 / 0 / 0 with the
    warm process unpatched in between); the int8wo cell does (docs/hf-backend.md).
    """
    code = """
import json, sys, torch
import torch._inductor.config as inductor
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from bench.backends import hf
inductor.coordinate_descent_tuning = True
if sys.argv[1] == "1":
    hf.keep_tuned_winners()
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
print(json.dumps({"tuned": len(tuned), "rechecks": len(rechecks), "buggy": hf.recheck_skips_single_config_hits(),
                  "static": bool(getattr(inductor, "use_static_cuda_launcher", False)), "settings": hf.inductor_settings()}))
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
    if cold["buggy"]:
        assert warm["settings"]["recheck_backported"] is True and warm["settings"]["retunes_each_process"] is False
    assert warm["tuned"] == 0, warm


# --- telemetry --------------------------------------------------------------------------


def test_nvml_readings_are_present_and_sane():
    import torch

    from bench.execution.environment import fingerprint, gpu_info
    from bench.execution.telemetry import Sampler

    info = gpu_info(0)
    assert "nvml_error" not in info, info
    assert info["gpu_count"] >= 1 and info["gpu_name"] and info["driver"]
    total = info["gpu_memory_bytes"]
    assert total == pytest.approx(torch.cuda.get_device_properties(0).total_memory, rel=0.05)
    env = fingerprint("cuda")
    assert env["gpu_name"] == info["gpu_name"] and env.get("gpu_uuid", "").startswith("GPU-")

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
    del held


# --- classification through worker processes ----------------------------------------------


def test_oom_and_cuda_errors_are_classified_through_worker_processes(tmp_path, engines):
    """bench run's path (supervisor -> worker subprocess) on the GPU, under a 0.3 GB cap:
    - a batch too big for the cap: a real CUDA OOM, stored as 'oom'; the same worker then runs the
      group's next cell fine (the OOM is a result, not a crash);
    - a prompt with a token id past the vocabulary: a CUDA device-side assert, stored as 'error', not 'oom'.
    """
    from bench.execution.matrix import run_matrix
    from bench.results import query
    from bench.spec import parse_matrix
    from bench.workloads.workload import Request, Workload

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
    from bench.profiling.kernels import KernelTable
    from bench.profiling.nvtx import DEFAULT_PATTERNS
    from bench.profiling.session import run_session
    from bench.spec import parse_matrix
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
    (docs/gpu-results.md): the same module code at 2 layers launches the same kernels per call.
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


# --- a busy GPU -------------------------------------------------------------------------------


def test_another_process_on_the_gpu_is_seen_and_warned_about():
    """bench.execution.host_load: NVML's compute processes other than ours (optimum-benchmark's isolation check)."""
    import torch

    from bench.execution.host_load import LoadSampler

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
