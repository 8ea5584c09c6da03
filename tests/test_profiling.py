"""Ranges, attribution and KernelTable logic, on the CPU (operators stand in for kernels)."""

import dataclasses
import json
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bench.execution.kernels import (
    NO_RANGE,
    AttributedKernel,
    KernelTable,
    build_kernel_table,
    categorize,
)
from tests.support.cli import bench_in_process
from tests.support.matrices import tiny_hf_matrix


@pytest.mark.parametrize("name, category", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)>", "elementwise"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "norm"),
    ("triton_per_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_1", "norm"),
    ("triton_poi_fused__to_copy_add_2", "elementwise"),
    ("triton_tem_fused_mm_3", "gemm"),
    ("void tensorrt_llm::kernels::generalRmsNorm<__nv_bfloat16>", "norm"),
    ("aten::rms_norm", "norm"),
    ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
    ("void pytorch_flash::flash_fwd_splitkv_kernel<...>", "attention"),
    ("xqa_kernel_dt_bf16_d_128", "attention"),
    ("void softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 5, false, false>", "attention"),
    ("aten::scaled_dot_product_attention", "attention"),
    ("nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>", "gemm"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, __nv_bfloat16>", "gemm"),
    ("aten::linear", "gemm"),
    ("aten::mm", "gemm"),
    ("Memcpy HtoD (Pageable -> Device)", "copy/memset"),
    ("Memset (Device)", "copy/memset"),
    ("void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>", "copy/memset"),
    ("aten::copy_", "copy/memset"),
    ("aten::silu", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>", "reduction"),
    ("triton_red_fused_argmax_0", "reduction"),
    ("triton_per_fused_sum_1", "reduction"),
    ("void cub::DeviceReduceSingleTileKernel<cub::DeviceReducePolicy<float, int>::Policy600, float *>", "reduction"),
    ("aten::mean", "reduction"),
    ("aten::maximum", "elementwise"),
    ("aten::embedding", "other"),
    ("saxpy(double *, double *, double *, double, int)", "elementwise"),
])
def test_categorize(name, category):
    assert categorize(name) == category


def _k(name, us, *ranges):
    return AttributedKernel(name, us, tuple(ranges))


def test_kernel_table_inclusive_and_innermost_by_hand():
    layer = ("Layer:l0", 1)
    n1, n2 = ("Norm:l0.n1", 2), ("Norm:l0.n2", 3)
    kernels = [
        _k("pow", 2.0, layer, n1), _k("mean", 4.0, layer, n1), _k("pow", 3.0, layer, n2),
        _k("gemm_a", 10.0, layer), _k("memcpy", 1.0),
    ]
    # A third Norm instance that launched nothing still counts as an instance.
    instances = {"Layer:l0": {1}, "Norm:l0.n1": {2}, "Norm:l0.n2": {3}, "Norm:final": {9}}
    t = build_kernel_table(kernels, instances, source="test", unit="gpu_kernel")
    norm = t.range("Norm")
    assert norm.instances == 3
    assert norm.kernels_per_instance == pytest.approx(3 / 3)
    assert norm.kernels_per_instance_median == 1  # counts 2, 1, 0
    assert norm.gpu_us_per_instance_median == 3.0  # times 6, 3, 0
    assert norm.total_us == 9.0
    layer_sum = t.range("Layer")
    assert (layer_sum.instances, layer_sum.kernels_per_instance, layer_sum.total_us) == (1, 4, 19.0)
    assert t.range(NO_RANGE).kernels_per_instance == 1
    pow_row = next(r for r in t.rows if r.range == "Norm" and r.kernel == "pow")
    # pow ran in 2 of the 3 Norm instances (2 and 3 us): its median is over those two, not (0, 2, 3)
    assert (pow_row.kernels, pow_row.instances, pow_row.instances_ran) == (2, 3, 2)
    assert pow_row.gpu_us_per_instance_median == 2.5 and pow_row.kernels_per_instance == pytest.approx(2 / 3)
    mean_row = next(r for r in t.rows if r.range == "Norm" and r.kernel == "mean")
    assert (mean_row.instances_ran, mean_row.gpu_us_per_instance_median) == (1, 4.0)  # not the 0.00 of a median over 3
    assert "| `mean` | other | 0.33 | 1 of 3 | 4.00 | 4.0 |" in t.to_markdown()
    assert t.total_kernels == 5 and t.total_us == 20.0
    cats = {c.category: (c.kernels, c.total_us) for c in t.categories}
    assert cats == {"gemm": (1, 10.0), "copy/memset": (1, 1.0), "other": (3, 9.0)}
    inner = build_kernel_table(kernels, instances, source="test", unit="gpu_kernel", innermost_only=True)
    assert inner.range("Layer").kernels_per_instance == 1  # only gemm_a is innermost there
    assert inner.range("Norm").total_us == 9.0
    with pytest.raises(KeyError, match="Norm"):
        t.range("Attention")


def test_kernel_table_round_trip(tmp_path):
    t = build_kernel_table([_k("a", 1.5, ("R:x", 1))], {"R:x": {1}}, source="s", unit="cpu_op", meta={"m": 1})
    loaded = KernelTable.load(t.save(tmp_path / "k.json"))
    assert loaded == t
    assert "| R | 1 | 1.00 | 1.5 | 1.5 |" in loaded.to_markdown()
    (tmp_path / "bad.json").write_text(json.dumps({"version": 99}))
    from bench.errors import BenchInputError

    with pytest.raises(BenchInputError, match="version"):
        KernelTable.load(tmp_path / "bad.json")


def _toy():
    import torch
    from torch import nn

    class ToyRMSNorm(nn.Module):
        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    class ToyBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2, self.proj = ToyRMSNorm(), ToyRMSNorm(), nn.Linear(8, 8)
            self.fail = False

        def forward(self, x):
            x = self.proj(self.norm1(x))
            if self.fail:
                raise ValueError("boom")
            return self.norm2(x)

    return ToyBlock().eval(), torch.randn(2, 8)


def test_torch_collector_attributes_ops_to_innermost_and_enclosing_ranges(tmp_path):
    from bench.execution.nvtx import ModuleRanges, RangeStack
    from bench.execution.torch_collector import profile_call

    model, x = _toy()
    stack = RangeStack()
    with ModuleRanges(model, ["*RMSNorm", "ToyBlock", "proj"], stack=stack, phases=False):
        table, trace = profile_call(lambda: model(x), cuda=False, labels=stack.labels, trace_path=tmp_path / "t.json")
    assert trace.is_file() and "ToyRMSNorm:norm1" in trace.read_text()
    norm = table.range("ToyRMSNorm")
    # pow, mean, add, rsqrt, mul: the ops the forward calls (views and helper copies not counted)
    assert (norm.instances, norm.kernels_per_instance) == (2, 5)
    assert {r.kernel for r in table.rows if r.range == "ToyRMSNorm"} == {
        "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"}
    assert table.range("proj").kernels_per_instance == 1
    assert table.range("ToyBlock").kernels_per_instance == 11  # inclusive: both norms + linear
    assert table.unit == "cpu_op" and table.total_kernels == 11


def test_ranges_stay_balanced_when_forward_raises():
    import torch

    from bench.execution.nvtx import ModuleRanges, RangeStack

    model, x = _toy()
    model.fail = True
    stack = RangeStack()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with ModuleRanges(model, ["*RMSNorm", "ToyBlock", "proj"], stack=stack) as ranges:
            for _ in range(2):
                with pytest.raises(ValueError, match="boom"):
                    with ranges.batch(0):
                        model(x)
                assert stack.depth == 0
    assert stack.pushed == 2 * 5  # batch, prefill, ToyBlock, norm1, proj per call
    assert not model._forward_hooks and not model._forward_pre_hooks  # hooks removed on exit


class _FakeNvtxDomain:
    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def get_event_attributes(self, message=None, color=None, category=None, payload=None):
        return {"message": message}

    def push_range(self, attributes=None):
        self.calls.append(("push", self.name, attributes["message"]))

    def pop_range(self):
        self.calls.append(("pop", self.name, None))


def test_nvtx_ranges_go_to_the_harness_domain_through_the_nvtx_package(monkeypatch):
    import types

    from bench.execution.nvtx import NVTX_DOMAIN, ModuleRanges, RangeStack

    calls = []
    fake = types.ModuleType("nvtx")
    fake.get_domain = lambda name=None: _FakeNvtxDomain(name, calls)
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    model, x = _toy()
    stack = RangeStack(record_function=False, nvtx=True)
    assert stack.nvtx_domain == NVTX_DOMAIN == "bench"
    with ModuleRanges(model, ["*RMSNorm"], stack=stack, phases=False):
        model(x)
    assert calls == [("push", "bench", "ToyRMSNorm:norm1"), ("pop", "bench", None),
                     ("push", "bench", "ToyRMSNorm:norm2"), ("pop", "bench", None)]


def test_nvtx_ranges_fall_back_to_torch_markers_without_the_package(monkeypatch):
    import torch

    from bench.execution.nvtx import RangeStack

    monkeypatch.setitem(sys.modules, "nvtx", None)  # `import nvtx` raises ImportError
    calls = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda label: calls.append(("push", label)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(("pop",)))
    stack = RangeStack(record_function=False, nvtx=True)
    assert stack.nvtx_domain is None  # NVTX's default domain
    with stack.range("batch:0"):
        pass
    assert calls == [("push", "batch:0"), ("pop",)]


def test_the_real_nvtx_package_accepts_the_harness_domain_without_a_tool():
    nvtx = pytest.importorskip("nvtx")
    from bench.execution.nvtx import nvtx_markers

    push, pop, domain = nvtx_markers()
    assert domain == "bench"
    push("batch:0")  # no tool attached: the package's domain is a no-op, never an error
    pop()
    assert nvtx.get_domain(domain) is not None


def test_unmatched_pattern_warns_with_classes():
    from bench.execution.nvtx import match_modules

    model, _ = _toy()
    with pytest.warns(UserWarning, match=r"\['\*Attention'\].*ToyRMSNorm"):
        hits = match_modules(model, ["*RMSNorm", "*Attention"])
    assert [h[0] for h in hits] == ["norm1", "norm2"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [h[2] for h in match_modules(model, ["proj"])] == ["proj"]


@pytest.mark.slow
def test_hf_generate_ranges_prefill_decode_and_modules():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from bench.execution.nvtx import ModuleRanges, RangeStack
    from bench.execution.torch_collector import profile_call
    from bench.models import QWEN_TINY

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**QWEN_TINY), attn_implementation="sdpa").eval()
    ids = torch.randint(0, 1000, (1, 16))
    stack = RangeStack()
    with ModuleRanges(model, stack=stack) as ranges:
        def window():
            with torch.inference_mode(), ranges.batch(0):
                model.generate(input_ids=ids, max_new_tokens=3, min_new_tokens=3, do_sample=False)

        table, _ = profile_call(window, cuda=False, labels=stack.labels)
    got = {r.range: r.instances for r in table.ranges}
    # 3 forwards (prefill + 2 decode steps) x (2 layers x 2 norms + final norm)
    assert got["Qwen2RMSNorm"] == 15 and got["Qwen2Attention"] == 6 and got["Qwen2DecoderLayer"] == 6
    assert got["prefill"] == 1 and got["decode_step"] == 2 and got["batch"] == 1 and got["lm_head"] == 3
    assert table.range("Qwen2Attention").kernels_per_instance_by_category.get("attention") == 1  # sdpa op
    assert table.range("lm_head").kernels_per_instance == 1
    assert stack.depth == 0


def _matrix(tmp_path, backends='["hf"]'):
    return tiny_hf_matrix(tmp_path / "m.toml", "ptest", backends)


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_bench_profile_end_to_end(tiny_hf_profile):
    """`bench profile --only precision=fp32 --decode-steps 2 --warmup 0 --no-progress` of tiny_hf_matrix (the
    tiny_hf_profile fixture runs it, in this process; tests/test_report_kernels.py reports the same profile)."""
    from bench.results.store import ResultStore

    proc = tiny_hf_profile
    assert proc.code == 0, proc.stderr[-3000:]
    assert "Qwen2RMSNorm" in proc.stdout and "unprofiled" in proc.stdout
    assert "profiling 1/1" not in proc.stderr  # --no-progress: no per-cell line
    (rec,) = list(ResultStore(proc.store).records())
    assert rec["status"] == "ok" and rec["kind"] == "profile" and rec["cell"]["precision"] == "fp32"
    extra = rec["extra"]
    table = KernelTable.load(extra["kernel_table"])
    assert table.range("decode_step").instances == 2 and table.range("prefill").instances == 1
    assert table.range("Qwen2RMSNorm").instances == 3 * 5
    assert Path(extra["trace"]).is_file()
    assert extra["profile"]["profiled_window_s"] > 0 and extra["profile"]["unprofiled_window_s"] > 0
    assert (Path(extra["kernel_table"]).parent / "categories.csv").is_file()
    assert extra["profile"]["session_wall_s"] > extra["profile"]["profiled_window_s"]
    # a generate window's decode step, unprofiled: the window less its batches generating one token, per step;
    # the reference is the median of three unprofiled windows
    prof = extra["profile"]
    assert len(prof["unprofiled_windows_s"]) == 3 and prof["unprofiled_window_s"] in prof["unprofiled_windows_s"]
    assert 0 < prof["prefill_window_s"] < prof["unprofiled_window_s"]
    assert prof["step_ms"] == pytest.approx((prof["unprofiled_window_s"] - prof["prefill_window_s"]) / 2 * 1e3)
    assert prof["step_ms_from"].startswith("the generate window's")


def test_bench_profile_bad_input(tmp_path):
    proc = _bench("profile", "--matrix", str(_matrix(tmp_path, '["hf", "fake"]')))
    assert proc.returncode == 2 and "backend(s) ['fake']" in proc.stderr
    proc = _bench("profile", "--matrix", str(_matrix(tmp_path)), "--tool", "nsys", "--nsys", "no-such-nsys-here")
    assert proc.returncode == 2 and "nsys" in proc.stderr and "--tool torch" in proc.stderr
    proc = _bench("profile", "--matrix", str(_matrix(tmp_path)), "--only", "precision=fp16", "--no-progress")
    assert proc.returncode == 2 and "unrecognized arguments" not in proc.stderr  # --no-progress is accepted
    proc = _bench("profile", "--matrix", str(_matrix(tmp_path)), "--tool", "ncu", "--ncu", "no-such-ncu-here")
    assert proc.returncode == 2 and "ncu (Nsight Compute) not found" in proc.stderr and "--tool torch" in proc.stderr


def test_device_side_range_annotations_are_not_kernels():
    """A GPU profile repeats each record_function range as a device 'event' of the same name:
    it must not be counted as a kernel (the H200 tables of 2026-11-30 counted 161 of them)."""
    from types import SimpleNamespace

    from bench.execution.torch_collector import attribute_events

    cuda, cpu = SimpleNamespace(name="CUDA"), SimpleNamespace(name="CPU")
    label = "Qwen2RMSNorm:model.norm"
    span = SimpleNamespace(elapsed_us=lambda: 5.0)
    rng = SimpleNamespace(name=label, id=1, device_type=cpu, cpu_parent=None, kernels=[])
    kern = SimpleNamespace(name="void rms_kernel<bf16>", duration=3.0)
    op = SimpleNamespace(name="aten::mul", id=2, device_type=cpu, cpu_parent=rng, kernels=[kern])
    dev_kernel = SimpleNamespace(name="void rms_kernel<bf16>", device_type=cuda, time_range=span)
    dev_marker = SimpleNamespace(name=label, device_type=cuda, time_range=span)
    stray = SimpleNamespace(name="void unlinked_kernel", device_type=cuda, time_range=span)
    kernels, instances, unlinked = attribute_events([rng, op, dev_kernel, dev_marker, stray], {label}, "gpu_kernel")
    names = sorted(k.name for k in kernels)
    assert names == ["void rms_kernel<bf16>", "void unlinked_kernel"]
    assert unlinked == 1 and instances == {label: {1}}


def test_kernels_launched_directly_inside_a_range_belong_to_it():
    """A CUDA graph replay inside a decode-step range: its kernels link to the range event itself
    (no aten operator between), and count in that range, not in (no range)."""
    from types import SimpleNamespace

    from bench.execution.torch_collector import attribute_events

    cuda, cpu = SimpleNamespace(name="CUDA"), SimpleNamespace(name="CPU")
    label = "decode_step:1"
    span = SimpleNamespace(elapsed_us=lambda: 4.0)
    graph_kernels = [SimpleNamespace(name="triton_red_fused_mean_pow_rsqrt_0", duration=4.0),
                     SimpleNamespace(name="nvjet_tst_gemv", duration=9.0),
                     SimpleNamespace(name=label, duration=50.0)]  # the range's own device-side marker
    step = SimpleNamespace(name=label, id=7, device_type=cpu, cpu_parent=None, kernels=graph_kernels)
    devices = [SimpleNamespace(name=k.name, device_type=cuda, time_range=span) for k in graph_kernels]
    kernels, instances, unlinked = attribute_events([step, *devices], {label}, "gpu_kernel")
    assert sorted(k.name for k in kernels) == ["nvjet_tst_gemv", "triton_red_fused_mean_pow_rsqrt_0"]
    assert all(k.ranges == ((label, 7),) for k in kernels) and unlinked == 0
    table = build_kernel_table(kernels, instances, source="t", unit="gpu_kernel")
    assert table.range("decode_step").kernels_per_instance == 2


@pytest.mark.parametrize("activity_type", ["cuda_runtime", None])  # torch that names the kind, and torch that does not
def test_a_kernel_torch_also_hands_to_an_api_call_counts_once(activity_type):
    """torch.profiler links a kernel to every host event whose id equals the kernel's linked
    correlation id; a cudaDeviceSynchronize made outside every operator has its CUPTI correlation
    id as its id, and when that equals a kernel-launching operator's External id it gets the
    operator's kernel too (pytorch/pytorch#124388). The H200's eager window (2026-12-02): aten::bmm,
    External id 132, launched the rotary embedding's sgemm inside `prefill`; a cudaDeviceSynchronize
    with correlation 132, inside `batch` but before `prefill`, was handed the same kernel, so the
    table said 2 sgemms in `batch` where torch's own trace and nsys had 1."""
    from types import SimpleNamespace

    from bench.execution.torch_collector import attribute_events

    cuda, cpu = SimpleNamespace(name="CUDA"), SimpleNamespace(name="CPU")
    span = SimpleNamespace(elapsed_us=lambda: 2.8)
    batch = SimpleNamespace(name="batch", id=1, device_type=cpu, cpu_parent=None, kernels=[], activity_type=None)
    prefill = SimpleNamespace(name="prefill", id=2, device_type=cpu, cpu_parent=batch, kernels=[], activity_type=None)
    sgemm = SimpleNamespace(name="void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", duration=2.8)
    sync = SimpleNamespace(name="cudaDeviceSynchronize", id=132, device_type=cpu, cpu_parent=batch, kernels=[sgemm],
                           activity_type=activity_type)
    bmm = SimpleNamespace(name="aten::bmm", id=132, device_type=cpu, cpu_parent=prefill, kernels=[sgemm],
                          activity_type=None if activity_type is None else "cpu_op")
    device = SimpleNamespace(name=sgemm.name, device_type=cuda, time_range=span)
    kernels, instances, unlinked = attribute_events([batch, sync, prefill, bmm, device], {"batch", "prefill"},
                                                    "gpu_kernel")
    assert [(k.name, [r for r, _ in k.ranges]) for k in kernels] == [(sgemm.name, ["batch", "prefill"])]
    assert unlinked == 0
    table = build_kernel_table(kernels, instances, source="t", unit="gpu_kernel")
    assert table.range("batch").kernels_per_instance == 1 and table.total_kernels == 1


@pytest.mark.slow
def test_profile_warms_up_with_the_measured_shapes_and_times_decode_steps(tmp_path, capsys):
    """A harness-loop cell: the static cache has the workload's length (as a measured pass), not the
    short window's; the window is decode steps only, each in its own range."""
    from bench.backends.hf.backend import static_cache_len
    from bench.cli import main
    from bench.results.store import ResultStore
    from bench.workloads.workload import Workload, batches

    matrix = tmp_path / "h.toml"
    matrix.write_text("""
name = "htest"
backends = ["hf"]
model = "qwen-tiny"
device = "cpu"
precisions = ["fp32"]
max_batch_sizes = [2]
workloads = ["w"]
[options]
cache = "static"
decode_loop = "harness"
[workload.w]
source = "synthetic"
length_dist = "uniform"
num_requests = 6
input_min = 4
input_max = 300
output_min = 100
output_max = 200
max_input_len = 300
max_total_len = 520
""")
    code = main(["profile", "--matrix", str(matrix), "--decode-steps", "3", "--warmup", "1"])  # in this process
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert "3 decode steps after the prefill (harness loop)" in out
    (rec,) = list(ResultStore("profiles/htest.jsonl").records())
    window = rec["extra"]["profile"]["window"]
    (wl_file,) = Path("workloads/cache").glob("w-*.json")
    requests = Workload.from_json(wl_file.read_text()).requests
    short_window = [[dataclasses.replace(r, output_len=4) for r in requests[:2]]]
    assert window["static_cache_len"] == static_cache_len(batches(requests, 2)) > static_cache_len(short_window)
    assert window["kind"] == "decode" and window["module_ranges"] is True  # an uncompiled step keeps its module ranges
    table = KernelTable.load(rec["extra"]["kernel_table"])
    groups = {r.range for r in table.ranges}
    assert table.range("decode_step").instances == 3 and "prefill" not in groups
    assert table.range("Qwen2RMSNorm").instances == 3 * 5  # decode steps only: 3 forwards x 5 norms
    prof = rec["extra"]["profile"]
    assert len(prof["unprofiled_steps_s"]) == 3 and prof["step_ms"] == statistics.median(prof["unprofiled_steps_s"]) * 1e3
    assert prof["step_ms_from"].startswith("the harness windows' median time between their first and last")


def test_a_harness_windows_step_is_the_time_between_its_steps_not_the_wait_for_the_first():
    """A window begins after the prefill's synchronisation, so its first step waits for its own launch; its step time
    is measured as TPOT is, from the first step's end to the last's (here 40 ms of wait, then 10 ms a step), in the
    same unprofiled windows whose wall time is taken."""
    from bench.execution.profile_window import median_wall, step_times

    class Window:
        steps = 4
        prepared = 0

        def prepare(self):
            self.prepared += 1

        def __call__(self, marks):
            marks.extend(100.0 * self.prepared + t for t in (0.050, 0.060, 0.070, 0.080))

    window, marks = Window(), []
    _, walls = median_wall(window, cuda=False, repeats=3, marks=marks)
    assert len(walls) == 3 and len(marks) == 3
    assert step_times(marks, window.steps) == pytest.approx([0.010] * 3) and window.prepared == 3
    with pytest.raises(ValueError, match="at least 2 decode steps"):
        step_times(marks, 1)


def test_ncu_metrics_flag_reaches_ncus_command_line(tmp_path):
    """`--ncu-metrics traffic` runs ncu with time and DRAM bytes only, in the root process only; an ncu that writes
    no report is a failed cell naming the log, not a crash (a stand-in ncu: records its arguments, exits 1)."""
    fake, args_file = tmp_path / "ncu", tmp_path / "ncu-args.txt"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Version 2025.3.1.0'; exit 0; fi\n"
                    f"printf '%s\\n' \"$@\" > {args_file}\nexit 1\n")
    fake.chmod(0o755)
    proc = bench_in_process("profile", "--matrix", str(_matrix(tmp_path)), "--only", "precision=fp32", "--tool", "ncu",
                            "--ncu", str(fake), "--ncu-metrics", "traffic", "--no-progress", "--out", str(tmp_path / "p"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    # the failed cell is one console line: its status and its error's first line (the record holds the log's tail)
    (said,) = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert "RuntimeError: profiling session exited with status 1" in said and said.endswith(".jsonl)")
    argv = args_file.read_text().splitlines()
    assert argv[argv.index("--metrics") + 1] == "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
    assert argv[argv.index("--target-processes") + 1] == "application-only"
    proc = bench_in_process("profile", "--matrix", str(_matrix(tmp_path)), "--tool", "ncu", "--ncu-metrics", "some")
    assert proc.returncode == 2 and "invalid choice: 'some'" in proc.stderr


def test_a_timed_out_profile_leaves_no_process_behind(tmp_path):
    """--timeout kills the profiler and the session it runs, not the profiler alone: on the H200 a timed-out ncu
    left its session replaying kernels (2026-12-01). A stand-in ncu starts a child and waits; after the timeout
    neither may be running."""
    import time

    fake, pid_file = tmp_path / "ncu", tmp_path / "child.pid"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Version 2025.3.1.0'; exit 0; fi\n"
                    f"sleep 300 & echo $! > {pid_file}\nwait\n")
    fake.chmod(0o755)
    t0 = time.monotonic()
    proc = bench_in_process("profile", "--matrix", str(_matrix(tmp_path)), "--only", "precision=fp32", "--tool", "ncu",
                            "--ncu", str(fake), "--timeout", "1", "--no-progress", "--out", str(tmp_path / "p"))
    assert proc.returncode == 1 and time.monotonic() - t0 < 120, proc.stderr[-2000:]
    child = int(pid_file.read_text())
    status = Path(f"/proc/{child}/status")
    state = status.read_text().split("State:")[1].split()[0] if status.exists() else "gone"
    assert state in ("gone", "Z", "X"), f"the profiler's child {child} is still running (state {state})"
