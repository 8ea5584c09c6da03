"""hf backend validation: every unsupported combination is rejected with its reason (CPU only)."""

import pytest

import bench.machine.environment
from bench.backends.hf import backend as hf
from bench.backends.hf import compile as hf_compile
from bench.backends.hf import config as hf_config
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
    assert info["batch_sizes_warmed"] == [1, 2] and info["batches_warmed"] == 2 and len(info["warmup_pass_s"]) == 1
    assert 0 < info["cold_batches_s"] <= info["first_pass_s"] == info["warmup_pass_s"][0]
    assert info["static_cache_len"] == 128
    out = loaded.run(reqs, 2, {"batching": "dataset"})
    assert [t.output_len for t in out.timings] == [3, 4, 5]
    assert out.extra["static_cache_len"] == 128 and "sol_time_s" not in out.extra  # no bandwidth on CPU
    assert out.extra["unwarmed_batches"] == 0  # both batches (sizes 2 and 1) are the worst of their size: warmed
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


def test_the_warm_up_runs_every_batch_of_the_measured_pass_the_worst_of_each_size_first(monkeypatch):
    """Kernels are built per shape the first time a process runs it on a GPU: a warm-up of one batch per size left the
    Qwen-7B shape's first cell of each worker at 41-61 ms a token where the same prompts then ran at 21-28 ms. On a GPU
    each pass now runs every batch the measured pass runs, once; the worst-shaped batch of each size first (a compiled
    step compiles there, at the fixed cache length). On a CPU the worst of each size only."""
    from types import SimpleNamespace

    from bench.backends.hf.backend import HFLoaded
    from bench.workloads.request import Request

    loaded = object.__new__(HFLoaded)
    loaded.cache, loaded.cache_len, loaded.workarounds = "static", None, None
    loaded.model, loaded.planted = None, "none"  # no plant: no model touched
    loaded.device = SimpleNamespace(type="cuda")
    ran = []
    monkeypatch.setattr(loaded, "run", lambda batch, size, options: ran.append(tuple(r.id for r in batch)), raising=False)
    reqs = [Request(str(i), tuple(range(1, n + 1)), 4) for i, n in enumerate((10, 50, 20, 30, 40))]
    info = loaded.warmup(reqs, 2, {"batching": "dataset"}, passes=2)
    plan = [("0", "1"), ("2", "3"), ("4",)]  # the measured pass's batches, in dataset order
    assert ran[:3] == [("0", "1"), ("4",), ("2", "3")]  # worst of size 2 (50 + 4), the only size 1, then the rest
    assert sorted(ran[:3]) == sorted(plan) and ran[3:] == ran[:3]  # every batch once a pass
    assert info["batches_warmed"] == 3 and info["batch_sizes_warmed"] == [1, 2] and len(info["warmup_pass_s"]) == 2
    assert info["static_cache_len"] == 128 and info["cold_batches_s"] <= info["first_pass_s"]
    # what a timed pass then counts as `unwarmed_batches`: the shapes (rows, padded prompt, output) the warm-up ran
    assert loaded.warmed_shapes == {(2, 50, 4), (2, 30, 4), (1, 40, 4)}
    ran.clear()
    assert loaded.warmup(reqs, 2, {"batching": "dataset"}, passes=0)["batches_warmed"] == 0 and ran == []
    assert loaded.warmed_shapes == set()  # warmup = 0: every batch of the pass is a first time
    loaded.device = SimpleNamespace(type="cpu")  # no shape cost seen on a CPU: the worst of each size only
    assert loaded.warmup(reqs, 2, {"batching": "dataset"}, passes=1)["batches_warmed"] == 2
    assert ran == [("0", "1"), ("4",)] and (2, 30, 4) not in loaded.warmed_shapes
