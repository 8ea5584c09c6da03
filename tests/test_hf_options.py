"""hf backend validation: every unsupported combination is rejected with its reason (CPU only)."""

import pytest

import bench.machine.environment
from bench.backends.hf import backend as hf
from bench.backends.hf import compile as hf_compile
from bench.backends.hf import config as hf_config
from bench.backends.hf import inductor_recheck
from bench.backends.hf import quantize as hf_quantize
from bench.errors import BenchInputError
from bench.spec.matrix import parse_matrix

H100 = {"gpu_name": "NVIDIA H100", "gpu_count": 1, "driver": "x", "compute_capability": "9.0"}
A100 = {**H100, "gpu_name": "NVIDIA A100", "compute_capability": "8.0"}
T4 = {**H100, "gpu_name": "Tesla T4", "compute_capability": "7.5"}
NONE = {"gpu_name": None, "gpu_count": 0, "driver": None}


def matrix(precision="bf16", device="cuda", model="qwen-tiny", **options):
    return parse_matrix({
        "backends": ["hf"], "model": model, "precisions": [precision], "max_batch_sizes": [1],
        "workloads": ["w"], "device": device, "options": options,
        "workload": {"w": {"source": "synthetic", "input_len": 8, "output_len": 4, "num_requests": 2}},
    })


@pytest.fixture
def gpu(monkeypatch):
    def set_gpu(info):
        monkeypatch.setattr(bench.machine.environment, "gpu_info", lambda index=0: dict(info))
    set_gpu(H100)
    return set_gpu


@pytest.fixture
def torchao_installed(monkeypatch):
    real = hf_config.util.find_spec
    monkeypatch.setattr(hf_config.util, "find_spec", lambda name, *a: object() if name == "torchao" else real(name, *a))


def test_options_are_matrix_axes(gpu, torchao_installed):
    m = matrix(cache="static", compile=["off", "reduce-overhead", "max-autotune"], attn_implementation=["eager", "sdpa"])
    assert len(m.cells) == 6
    keys = {c.build_key().key_hash for c in m.cells}
    assert len(keys) == 6  # compile and attention change the built artifact
    m = matrix(batching=["dataset", "sorted"])
    assert len({c.build_key().key_hash for c in m.cells}) == 1  # batching does not
    for p in ("int8wo", "int4wo", "fp8"):
        assert matrix(p, cache="static", compile="reduce-overhead").cells[0].precision == p


def test_compile_needs_static_cache_and_a_gpu(gpu):
    with pytest.raises(BenchInputError, match="needs cache='static'"):
        matrix(compile="reduce-overhead")
    with pytest.raises(BenchInputError, match="CUDA graphs"):
        matrix("fp32", device="cpu", cache="static", compile="max-autotune")
    with pytest.raises(BenchInputError, match="compile"):
        matrix(compile="fast")


def test_precisions_the_gpu_cannot_run(gpu, torchao_installed):
    gpu(A100)
    with pytest.raises(BenchInputError, match=r"fp8.*needs compute capability 8\.9\+.*A100.*8\.0"):
        matrix("fp8")
    assert matrix("int8wo").cells
    gpu(T4)
    with pytest.raises(BenchInputError, match=r"bf16.*8\.0\+.*Tesla T4.*7\.5.*fp16"):
        matrix("bf16")
    assert matrix("fp16").cells
    with pytest.raises(BenchInputError, match="this machine has 1 GPU"):
        matrix("fp16", device="cuda:3")


def test_gpu_precisions_on_cpu(gpu, torchao_installed):
    for p in ("int8wo", "int4wo", "fp8"):
        with pytest.raises(BenchInputError, match="GPUs only"):
            matrix(p, device="cpu")
    with pytest.raises(BenchInputError, match="fp16.*cpu"):
        matrix("fp16", device="cpu")


def test_missing_torchao_names_the_install(gpu, monkeypatch):
    real = hf_config.util.find_spec
    monkeypatch.setattr(hf_config.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    with pytest.raises(BenchInputError, match="pip install torchao"):
        matrix("int8wo")


def test_flash_attention_needs_its_package(gpu, monkeypatch):
    real = hf_config.util.find_spec
    monkeypatch.setattr(hf_config.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real(name, *a))
    with pytest.raises(BenchInputError, match="pip install flash-attn"):
        matrix(attn_implementation="flash_attention_2")
    monkeypatch.setattr(hf_config.util, "find_spec", lambda name, *a: object() if name == "flash_attn" else real(name, *a))
    with pytest.raises(BenchInputError, match="CUDA in fp16/bf16"):
        matrix("fp32", device="cpu", attn_implementation="flash_attention_2")
    assert matrix(attn_implementation="flash_attention_2").cells


def test_no_nvml_warns_instead_of_failing(gpu):
    gpu(NONE)
    with pytest.warns(UserWarning, match="NVML sees no NVIDIA GPU"):
        assert matrix("bf16").cells


def test_unknown_architecture(gpu, tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "no_such_arch_xyz", "architectures": ["NoSuchForCausalLM"]}')
    with pytest.raises(BenchInputError, match="does not know model_type 'no_such_arch_xyz'.*pip install -U transformers"):
        matrix("fp32", device="cpu", model=str(d))


def test_static_cache_len_is_fixed_per_workload():
    from bench.workloads.request import Request

    def req(i, n_in, n_out):
        return Request(str(i), tuple(range(n_in)), n_out)

    plan = [[req(0, 10, 100), req(1, 30, 5)], [req(2, 120, 8)]]
    assert hf.static_cache_len(plan) == 256  # max(30+100, 120+8) = 130 -> 256
    assert hf.static_cache_len([[req(0, 128, 256)]]) == 384


def test_stored_bytes_of_plain_tensors():
    import torch

    assert hf_quantize.stored_bytes(torch.zeros(4, 8, dtype=torch.bfloat16)) == 64
    assert hf_quantize.stored_bytes(torch.nn.Parameter(torch.zeros(10))) == 40


def test_configure_compile_sets_generation_config():
    from types import SimpleNamespace

    from transformers import GenerationConfig

    model = SimpleNamespace(generation_config=GenerationConfig())
    hf_compile.configure_compile(model, "off", "static")
    assert model.generation_config.disable_compile is True  # else transformers compiles static caches itself
    hf_compile.configure_compile(model, "reduce-overhead", "static")
    cc = model.generation_config.compile_config
    assert model.generation_config.disable_compile is False and cc.mode == "reduce-overhead" and cc.dynamic is False


@pytest.mark.slow
def test_static_cache_warmup_covers_every_batch_size(tmp_path):
    from bench.backends.hf.backend import HFBackend
    from bench.spec.cells import BuildKey
    from bench.workloads.request import Request

    key = BuildKey("hf", "qwen-tiny", "fp32", "cpu", (("attn_implementation", "sdpa"), ("cache", "static"), ("compile", "off")))
    backend = HFBackend()
    loaded = backend.load(backend.build(key, tmp_path))
    reqs = [Request(str(i), tuple(range(1, 6 + i)), 3 + i) for i in range(3)]
    info = loaded.warmup(reqs, 2, {"batching": "dataset"}, passes=1)
    assert info["batch_sizes_warmed"] == [1, 2] and len(info["warmup_pass_s"]) == 2
    assert info["static_cache_len"] == 128
    out = loaded.run(reqs, 2, {"batching": "dataset"})
    assert [t.output_len for t in out.timings] == [3, 4, 5]
    assert out.extra["static_cache_len"] == 128 and "sol_time_s" not in out.extra  # no bandwidth on CPU
    assert out.extra["weight_bytes"] == loaded.num_parameters * 4
    assert out.extra["streamed_weight_bytes"] == out.extra["weight_bytes"]  # qwen-tiny ties its embedding
    loaded.close()


def test_compile_tuning_needs_compile(gpu):
    with pytest.raises(BenchInputError, match="compile_tuning='coordinate-descent' changes what torch.compile"):
        matrix(cache="static", compile_tuning="coordinate-descent")
    with pytest.raises(BenchInputError, match="freeze_weights='on' changes what torch.compile generates.*freeze_weights = 'off'"):
        matrix(cache="static", freeze_weights="on")
    frozen, = matrix(cache="static", compile="reduce-overhead", freeze_weights="on").cells
    cell, = matrix(cache="static", compile="reduce-overhead", compile_tuning="coordinate-descent").cells
    plain, = matrix(cache="static", compile="reduce-overhead").cells
    assert len({cell.build_key().key_hash, plain.build_key().key_hash, frozen.build_key().key_hash}) == 3
    for late in ("compile_tuning", "freeze_weights"):  # late options at their default
        assert late not in plain.build_key().to_dict()["options"]


def test_configure_process_sets_inductor_once_per_build_key(monkeypatch):
    import torch._inductor.config as inductor

    monkeypatch.setattr(hf_compile, "_PROCESS", None)  # a fresh worker process
    # torch's config.patch restores the settings (a pytest monkeypatch would hide them: test_hf_loop).
    with inductor.patch(coordinate_descent_tuning=False, freezing=False):
        hf_compile.configure_process("key-a", "off", "default", False)
        assert hf_compile.inductor_settings()["coordinate_descent_tuning"] is False
        assert hf_compile.inductor_settings()["freezing"] is False
        hf_compile.configure_process("key-a", "reduce-overhead", "default", False)  # same settings: allowed
        with pytest.raises(AssertionError, match="one build key per process: .*key-a"):
            hf_compile.configure_process("key-b", "reduce-overhead", "coordinate-descent", True)
        monkeypatch.setattr(hf_compile, "_PROCESS", None)  # another fresh worker
        hf_compile.configure_process("key-b", "reduce-overhead", "coordinate-descent", True)
        assert hf_compile.inductor_settings()["coordinate_descent_tuning"] is True
        assert hf_compile.inductor_settings()["freezing"] is True
    assert inductor.freezing is False


# CachingAutotuner.recheck_autotune_cache's hit test, before and after pytorch/pytorch#173391.
RECHECK_2_11 = """
        # I.e. there was an autotune cache hit
        if len(cached_configs) == 1 and len(configs) > 1:
            best_config = cached_configs[0]
"""
RECHECK_FIXED = """
        # I.e. there was an autotune cache hit
        if len(cached_configs) == 1:
            best_config = cached_configs[0]
            found_by_coordesc = getattr(best_config, "found_by_coordesc", False)
"""


def test_recheck_bug_is_read_from_the_installed_source():
    assert inductor_recheck.recheck_skips_single_config_hits(RECHECK_2_11) is True
    assert inductor_recheck.recheck_skips_single_config_hits(RECHECK_FIXED) is False
    import torch

    installed = inductor_recheck.recheck_skips_single_config_hits()  # this machine's torch
    if torch.__version__.startswith("2.11."):
        assert installed is True
    elif tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13):
        assert installed is False


@pytest.mark.parametrize("buggy, tuning, static, retunes", [
    (True, True, True, True),      # torch 2.11, coordinate descent: each process tunes its own kernels
    (True, False, True, False),    # nothing tuned at run time
    (True, True, False, False),    # without the static launcher the autotune cache is read
    (False, True, True, False),    # a fixed torch
])
def test_inductor_settings_say_whether_each_process_retunes(monkeypatch, buggy, tuning, static, retunes):
    import torch._inductor.config as inductor

    monkeypatch.setattr(inductor_recheck, "recheck_skips_single_config_hits", lambda source=None: buggy)
    with inductor.patch(coordinate_descent_tuning=tuning, use_static_cuda_launcher=static):
        settings = hf_compile.inductor_settings()
    assert settings["retunes_each_process"] is retunes and settings["static_cuda_launcher"] is static


@pytest.mark.parametrize("buggy", [True, False])
def test_keep_tuned_winners_backports_the_fix_only_where_torch_lacks_it(monkeypatch, buggy):
    import torch._inductor.config as inductor
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    installed = CachingAutotuner.recheck_autotune_cache
    monkeypatch.setattr(CachingAutotuner, "recheck_autotune_cache", installed)  # restored after the test
    monkeypatch.setattr(inductor_recheck, "_APPLIED", False)
    monkeypatch.setattr(inductor_recheck, "recheck_skips_single_config_hits", lambda source=None: buggy)
    assert inductor_recheck.apply() is buggy
    assert (CachingAutotuner.recheck_autotune_cache is inductor_recheck._recheck_autotune_cache) is buggy
    with inductor.patch(coordinate_descent_tuning=True, use_static_cuda_launcher=True):
        settings = hf_compile.inductor_settings()
    # Patched, the process keeps the cache's winners: the record must not say it re-tunes.
    assert settings["recheck_backported"] is buggy and settings["retunes_each_process"] is False


class _Config:  # the fields triton_config_to_hashable reads from a triton.Config
    def __init__(self, block, coordesc=False):
        self.kwargs, self.num_warps, self.num_stages = {"XBLOCK": block}, 4, 1
        if coordesc:
            self.found_by_coordesc = True


class _Autotuner:  # a statically launchable CachingAutotuner as the FX graph cache loads it
    def __init__(self, *blocks):
        self.compile_results = [type("CompileResult", (), {"config": _Config(b)})() for b in blocks]
        self.filename, self.inductor_meta, self.fn = "k.py", {"coordinate_descent_tuning": True}, type("F", (), {"fn": None})()
        self.compiled = []

    def is_statically_launchable(self):
        return True

    def _precompile_config(self, cfg):
        self.compiled.append(cfg)
        return type("CompileResult", (), {"config": cfg})()


@pytest.mark.parametrize("blocks, cached, kept_block, compiled", [
    ((128,), 128, 128, False),       # torch 2.11's bug: one config, its cached winner skipped -> tuned again
    ((64, 128), 128, 128, False),    # several configs: the cached one is chosen
    ((128,), 512, 512, True),        # coordinate descent found a config the bundle never compiled
    ((128,), None, 128, False),      # no cache hit: left to run's tuning
])
def test_backported_recheck_runs_the_cached_winner(monkeypatch, blocks, cached, kept_block, compiled):
    from torch._inductor.runtime import triton_heuristics as th

    hits = [] if cached is None else [_Config(cached, coordesc=True)]
    monkeypatch.setattr(th, "check_autotune_cache", lambda configs, filename, meta: (hits, None, {"hit": bool(hits)}))
    tuner = _Autotuner(*blocks)
    reloaded = type("Reloaded", (), {"fn": "kernel"})()
    inductor_recheck._recheck_autotune_cache(tuner, lambda: reloaded)
    assert [r.config.kwargs["XBLOCK"] for r in tuner.compile_results] == ([kept_block] if cached else list(blocks))
    assert bool(tuner.compiled) is compiled and tuner.autotune_cache_info == {"hit": bool(hits)}
    if cached:  # marked: CachingAutotuner.run does not tune a found_by_coordesc config again
        assert tuner.compile_results[0].config.found_by_coordesc is True
        assert tuner.fn == ("kernel" if compiled else tuner.fn)


def test_tuned_kernel_configs_digest_the_winners_not_their_timing(tmp_path):
    import json

    assert hf_compile.tuned_kernel_configs(tmp_path / "none") == {"kernels": 0, "coordinate_descent": 0, "digest": None}
    cache = tmp_path / "inductor" / "ab"
    cache.mkdir(parents=True)
    cfg = {"XBLOCK": 1, "R0_BLOCK": 2048, "num_warps": 8, "num_stages": 1, "found_by_coordesc": True}
    (cache / "k1.best_config").write_text(json.dumps({**cfg, "time_taken_ms": 1913}))
    (cache / "k2.best_config").write_text(json.dumps({**cfg, "found_by_coordesc": False, "time_taken_ms": 26}))
    first = hf_compile.tuned_kernel_configs(tmp_path / "inductor")
    assert first["kernels"] == 2 and first["coordinate_descent"] == 1 and len(first["digest"]) == 16
    (cache / "k1.best_config").write_text(json.dumps({**cfg, "time_taken_ms": 2500}))  # re-tuned, same winner
    assert hf_compile.tuned_kernel_configs(tmp_path / "inductor") == first
    (cache / "k1.best_config").write_text(json.dumps({**cfg, "R0_BLOCK": 4096, "time_taken_ms": 2500}))
    assert hf_compile.tuned_kernel_configs(tmp_path / "inductor")["digest"] != first["digest"]


def test_each_coordinate_descent_tuning_in_a_process_is_counted_with_why_the_cache_was_not_used(monkeypatch, tmp_path):
    """A process that loaded an engine artifact should tune nothing; when it does, its records say which kernels and
    what the kernel's cache held (a stored winner for other candidate configs is a miss, not a hit)."""
    import json

    from torch._inductor.runtime import triton_heuristics as th

    calls = []
    monkeypatch.setattr(th.CachingAutotuner, "coordinate_descent_tuning",
                        lambda self, launcher, *a, **k: calls.append(launcher) or "tuned-launcher")
    monkeypatch.setattr(hf_compile, "_TUNED_HERE", [])
    hf_compile._count_tunings()
    hf_compile._count_tunings()  # a second configure_process does not wrap twice
    (tmp_path / "k.best_config").write_text(json.dumps({"configs_hash": "stored-for-other-configs", "XBLOCK": 8}))

    class Kernel:
        inductor_meta = {"kernel_name": "triton_red_fused_mm_0"}
        autotune_cache_info = {"autotune_cache_state": "miss"}
        filename = str(tmp_path / "k.py")
        configs = []
        _should_coordesc_tune = True

    assert th.CachingAutotuner.coordinate_descent_tuning(Kernel(), "launcher") == "tuned-launcher"
    assert calls == ["launcher"]
    (entry,) = hf_compile._TUNED_HERE
    assert entry == {"kernel": "triton_red_fused_mm_0", "cache": "miss", "best_configs_beside": 1,
                     "configs_hash_stored": False}
    settings = hf_compile.inductor_settings()
    assert settings["tuned_in_process"] == 1 and settings["tuned_in_process_kernels"] == [entry]
    Kernel.configs = None  # a kernel loaded for the static launcher keeps no candidate configs: no error entry
    th.CachingAutotuner.coordinate_descent_tuning(Kernel(), "launcher")
    assert "error" not in hf_compile._TUNED_HERE[-1] and "configs_hash_stored" not in hf_compile._TUNED_HERE[-1]
    del hf_compile._TUNED_HERE[-1]
    Kernel._should_coordesc_tune = False  # torch decides not to tune this one: nothing counted
    th.CachingAutotuner.coordinate_descent_tuning(Kernel(), "launcher")
    assert len(hf_compile._TUNED_HERE) == 1
