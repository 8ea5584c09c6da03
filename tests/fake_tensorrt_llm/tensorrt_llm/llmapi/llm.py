"""Mirrors 1.2.1 tensorrt_llm/llmapi/llm.py: BaseLLM, _TrtLLM (the engine path), _TorchLLM / LLM.

From 1.2.1, kept as written there:
- BaseLLM.__init__: a keyword that is not a field of the args class (TrtLlmArgs, or
  TorchLlmArgs for backend="pytorch") raises ValueError("<class> got invalid argument: <key>");
  the args are then built with `from_kwargs` (pydantic validation), then `_build_model()`.
- _TrtLLM._build_model: build (or load) the engine, set args.model to the engine dir, then
  start the executor with max_batch_size = args.max_batch_size or build_config.max_batch_size,
  max_num_tokens = args.max_num_tokens or build_config.max_num_tokens (args' default is 8192,
  so an engine loaded without max_num_tokens runs with 8192), max_seq_len likewise, and the
  args' KvCacheConfig: constructing the LLM both builds and starts an executor.
- generate_async: "LLM is shutting down" check, _prepare_sampling_params (end_id required
  without a tokenizer; return_perf_metrics OR-ed with the args'), _check_arguments (engine
  path: prompt + max_tokens against the engine's config.json max_seq_len; PyTorch path:
  prompt against max_num_tokens), then the executor's generate_async.
- save(engine_dir): copytree of the built engine; shutdown().
Modelled (INVENTED, llmapi/llm_utils.py is not among the 1.2.1 pages): the CachedModelLoader
step that turns a HF checkpoint into an engine (architecture lookup, calibration, build).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .._stand_in import config, log
from .._stand_in_numerics import HFNumerics
from ..builder import EngineConfig, build
from ..executor._stand_in_executor import InflightBatchingExecutor
from ..executor.result import GenerationResult
from ..executor.utils import RequestError
from ..models import get_trtllm_model_class
from ..models.modeling_utils import quantize
from ..quantization.mode import QuantAlgo
from ..sampling_params import SamplingParams
from .llm_args import TorchLlmArgs, TrtLlmArgs

RequestOutput = GenerationResult  # 1.2.1: RequestOutput wraps the GenerationResult it is built from

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def _kv_bytes_per_token(pretrained: dict) -> int:
    heads = pretrained["num_attention_heads"]
    kv_heads = pretrained.get("num_key_value_heads") or heads
    head_dim = pretrained.get("head_size") or pretrained["hidden_size"] // heads
    kv_algo = (pretrained.get("quantization") or {}).get("kv_cache_quant_algo")
    per_value = 1 if kv_algo in (QuantAlgo.FP8, QuantAlgo.INT8, "FP8", "INT8") else _DTYPE_BYTES.get(pretrained["dtype"], 2)
    return 2 * pretrained["num_hidden_layers"] * kv_heads * head_dim * per_value


class BaseLLM:
    def __init__(self, model, tokenizer=None, tokenizer_mode='auto', skip_tokenizer_init=False,
                 trust_remote_code=False, tensor_parallel_size=1, dtype="auto", revision=None,
                 tokenizer_revision=None, **kwargs: Any) -> None:
        backend = kwargs.get('backend', None)
        llm_args_cls = TorchLlmArgs if backend == "pytorch" else TrtLlmArgs
        valid_keys = set(list(llm_args_cls.model_fields.keys()) + ['_mpi_session', 'backend'])
        for key in kwargs:
            if key not in valid_keys:
                raise ValueError(f"{self.__class__.__name__} got invalid argument: {key}")
        self.args = llm_args_cls.from_kwargs(
            model=model, tokenizer=tokenizer, tokenizer_mode=tokenizer_mode, skip_tokenizer_init=skip_tokenizer_init,
            trust_remote_code=trust_remote_code, tensor_parallel_size=tensor_parallel_size, dtype=dtype,
            revision=revision, tokenizer_revision=tokenizer_revision, **kwargs)
        log("llm_init", cls=self.__class__.__name__, model=str(model), dtype=dtype,
            trust_remote_code=trust_remote_code, skip_tokenizer_init=skip_tokenizer_init, kwargs=kwargs)
        self._engine_dir: Path | None = None
        self._executor: InflightBatchingExecutor | None = None
        self._tokenizer = None  # INVENTED: the stand-in never loads a tokenizer
        self._workspace = tempfile.TemporaryDirectory(suffix="-llm-workspace", dir=self.args.workspace) if (
            self._on_trt_backend) else None
        self._build_model()

    @property
    def _on_trt_backend(self) -> bool:
        return isinstance(self.args, TrtLlmArgs)

    @property
    def tokenizer(self):
        return self._tokenizer

    def generate_async(self, inputs, sampling_params: SamplingParams | None = None, lora_request=None,
                       prompt_adapter_request=None, streaming: bool = False, kv_cache_retention_config=None,
                       disaggregated_params=None, trace_headers=None, _postproc_params=None,
                       scheduling_params=None, cache_salt=None) -> GenerationResult:
        if self._executor is None or self._executor.is_shutdown():
            raise RuntimeError("LLM is shutting down")
        sampling_params = self._prepare_sampling_params(sampling_params)
        if isinstance(inputs, list) and all(isinstance(t, int) for t in inputs):
            prompt_token_ids = inputs
        elif isinstance(inputs, str):
            raise TypeError("stand-in: text prompts need a tokenizer, which the stand-in does not load")  # INVENTED
        else:
            raise TypeError(f"The inputs must be type str or list of int, but got {type(inputs)}")
        self._check_arguments(len(prompt_token_ids), 0, sampling_params, is_gen_only=False)
        log("generate_async", input_len=len(prompt_token_ids), streaming=streaming, sampling=sampling_params)
        return self._executor.generate_async(prompt_token_ids, sampling_params, streaming)

    def _prepare_sampling_params(self, sampling_params: SamplingParams | None = None) -> SamplingParams:
        if sampling_params is None:
            sampling_params = SamplingParams()
        if not isinstance(sampling_params, SamplingParams):
            raise TypeError(f"The sampling_params must be type SamplingParams or None, but got {type(sampling_params)}")
        if sampling_params.end_id is None and self.tokenizer is None:
            raise ValueError("tokenizer is required to reset end_id if it is None, or you can explicitly specify "
                             "the end_id for sampling_params")
        sampling_params.return_perf_metrics = sampling_params.return_perf_metrics or self.args.return_perf_metrics
        return sampling_params

    def _check_arguments(self, prompt_len: int, query_len: int, sampling_params: SamplingParams,
                         is_gen_only: bool) -> None:
        if self.args.backend in ["pytorch", "_autodeploy"]:
            if self.args.backend == "pytorch" and not self.args.enable_chunked_prefill and not is_gen_only:
                max_num_tokens = self.args.max_num_tokens
                if max_num_tokens and prompt_len / self.args.context_parallel_size + query_len > max_num_tokens:
                    raise RequestError(
                        f"The sum of prompt length ({prompt_len / self.args.context_parallel_size}), query length "
                        f"({query_len}) should not exceed max_num_tokens ({max_num_tokens})")
            return
        build_config = self.args.build_config
        built = json.loads((Path(self.args.model) / 'config.json').read_text())
        max_seq_len = built['build_config']['max_seq_len'] if 'build_config' in built else build_config.max_seq_len
        if (not self.args.enable_chunked_prefill) and (
                prompt_len / self.args.context_parallel_size + query_len + (sampling_params.max_tokens or 0)
                > max_seq_len):
            raise ValueError(
                f"The sum of prompt length ({prompt_len / self.args.context_parallel_size}) and query length "
                f"({query_len}) max_tokens ({sampling_params.max_tokens}) should not exceed max_seq_len ({max_seq_len})")
        max_batch_size = self.args.max_batch_size or build_config.max_batch_size
        if not sampling_params.use_beam_search and sampling_params.best_of > max_batch_size:
            raise ValueError(f"sampling_params.n ({sampling_params.n}) cannot exceed max_batch_size "
                             f"({max_batch_size}) when use_beam_search is False")

    def shutdown(self) -> None:
        if getattr(self, "_executor", None) is not None:
            self._executor.shutdown()
            self._executor = None
            log("shutdown", model=str(self.args.model))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.shutdown()
        return False

    def __del__(self):
        self.shutdown()


def _hf_config(model_dir: Path) -> dict:
    return json.loads((model_dir / "config.json").read_text())


def _load_or_build(args: TrtLlmArgs, workspace: Path) -> tuple[Path, Path | None]:
    """Return (engine dir, HF dir): CachedModelLoader, modelled (INVENTED details, see module doc)."""
    model_dir = Path(args.model)
    cfg = _hf_config(model_dir)
    if "build_config" in cfg and "pretrained_config" in cfg:  # an engine directory
        if not (model_dir / "rank0.engine").is_file():
            raise RuntimeError(f"stand-in: engine file {model_dir / 'rank0.engine'} is missing")  # INVENTED message
        args._load_config_from_engine(model_dir)
        log("load_engine", engine_dir=str(model_dir), build_config=args.build_config)
        return model_dir, None
    model_class = get_trtllm_model_class(model_dir, args.trust_remote_code)
    quant = args.quant_config
    calibration = None
    if quant._requires_calibration:
        calibration = quantize(model_dir, quant, args.calib_config)
        log("calibrate", flow=calibration["flow"], dataset=args.calib_config.calib_dataset,
            samples=len(calibration["texts"]), texts=calibration["texts"], max_seq_length=args.calib_config.calib_max_seq_length)
    dtype = args.dtype if args.dtype != "auto" else cfg.get("torch_dtype", "float16")
    pretrained = {
        "architecture": cfg["architectures"][0], "model_class": model_class, "dtype": dtype,
        "num_hidden_layers": cfg["num_hidden_layers"], "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg.get("num_key_value_heads"), "hidden_size": cfg["hidden_size"],
        "head_size": cfg.get("head_dim"), "vocab_size": cfg.get("vocab_size"),
        "max_position_embeddings": cfg.get("max_position_embeddings"),
        "quantization": {"quant_algo": quant.quant_algo, "kv_cache_quant_algo": quant.kv_cache_quant_algo},
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1, "cp_size": 1},
    }
    if config()["numerics"] == "hf":  # INVENTED: a real engine holds the weights; the stand-in names their folder
        pretrained["stand_in_checkpoint"] = str(model_dir)
    engine_config, engine = build(pretrained, args.build_config)
    engine_dir = workspace / "tmp.engine"
    engine_dir.mkdir(parents=True, exist_ok=True)
    (engine_dir / "config.json").write_text(json.dumps(_plain_engine_config(engine_config)))
    (engine_dir / "rank0.engine").write_bytes(engine)
    args.build_config = engine_config.build_config
    log("build", model=str(model_dir), dtype=dtype, build_config=engine_config.build_config, quant_config=quant,
        calib_config=args.calib_config if calibration else None)
    return engine_dir, model_dir


def _plain_engine_config(engine_config: EngineConfig) -> dict:
    d = engine_config.to_dict()
    q = d["pretrained_config"]["quantization"]
    d["pretrained_config"]["quantization"] = {k: (v.value if isinstance(v, QuantAlgo) else v) for k, v in q.items()}
    return d


class _TrtLLM(BaseLLM):
    @property
    def workspace(self) -> Path:
        return Path(self._workspace.name)

    def save(self, engine_dir: str) -> None:
        if self._engine_dir is None:
            raise RuntimeError("The engine is not built yet.")
        if self._engine_dir.absolute() == Path(os.path.abspath(engine_dir)):
            return
        shutil.copytree(self._engine_dir, engine_dir, dirs_exist_ok=True)
        log("save", engine_dir=str(engine_dir))

    def _build_model(self):
        self._engine_dir, self._hf_model_dir = _load_or_build(self.args, self.workspace)
        self.args.model = self._engine_dir
        build_config = self.args.build_config
        max_batch_size = self.args.max_batch_size or build_config.max_batch_size
        max_num_tokens = self.args.max_num_tokens or build_config.max_num_tokens
        max_seq_len = self.args.max_seq_len or build_config.max_seq_len
        engine = EngineConfig.from_json_file(self._engine_dir / "config.json")
        cfg = config()
        checkpoint = engine.pretrained_config.get("stand_in_checkpoint")
        numerics = HFNumerics(checkpoint, engine.pretrained_config["dtype"]) if (
            cfg["numerics"] == "hf" and checkpoint) else None
        self._executor = InflightBatchingExecutor(
            max_batch_size=max_batch_size, max_num_tokens=max_num_tokens, max_seq_len=max_seq_len,
            max_input_len=engine.build_config.max_input_len, kv_cache_config=self.args.kv_cache_config,
            kv_bytes_per_token=_kv_bytes_per_token(engine.pretrained_config),
            weight_bytes=(self._engine_dir / "rank0.engine").stat().st_size,
            tokens_per_block=engine.build_config.plugin_config.tokens_per_block,
            enable_chunked_context=self.args.enable_chunked_prefill, cfg=cfg, numerics=numerics,
            gather_context_logits=engine.build_config.gather_context_logits)
        log("executor", max_batch_size=max_batch_size, max_num_tokens=max_num_tokens, max_seq_len=max_seq_len,
            kv_cache_config=self.args.kv_cache_config, kv_capacity_tokens=self._executor.capacity_tokens,
            engine_build_config=engine.build_config)


class _TorchLLM(BaseLLM):
    def __init__(self, model, tokenizer=None, tokenizer_mode='auto', skip_tokenizer_init=False,
                 trust_remote_code=False, tensor_parallel_size=1, dtype="auto", revision=None,
                 tokenizer_revision=None, **kwargs: Any) -> None:
        backend = kwargs.pop("backend", "pytorch")
        super().__init__(model, tokenizer, tokenizer_mode, skip_tokenizer_init, trust_remote_code,
                         tensor_parallel_size, dtype, revision, tokenizer_revision, backend=backend, **kwargs)

    def _build_model(self):
        model_dir = Path(self.args.model)
        cfg = _hf_config(model_dir)
        dtype = self.args.dtype if self.args.dtype != "auto" else cfg.get("torch_dtype", "bfloat16")
        pretrained = {"num_hidden_layers": cfg["num_hidden_layers"], "num_attention_heads": cfg["num_attention_heads"],
                      "num_key_value_heads": cfg.get("num_key_value_heads"), "hidden_size": cfg["hidden_size"],
                      "head_size": cfg.get("head_dim"), "dtype": dtype, "quantization": {}}
        # INVENTED: TorchLlmArgs' own defaults were not read; 2048 mirrors BuildConfig's.
        max_batch_size = self.args.max_batch_size or 2048
        max_seq_len = self.args.max_seq_len or cfg.get("max_position_embeddings") or 2048
        self._executor = InflightBatchingExecutor(
            max_batch_size=max_batch_size, max_num_tokens=self.args.max_num_tokens, max_seq_len=max_seq_len,
            max_input_len=max_seq_len, kv_cache_config=self.args.kv_cache_config,
            kv_bytes_per_token=_kv_bytes_per_token(pretrained), weight_bytes=0,
            tokens_per_block=self.args.kv_cache_config.tokens_per_block,
            enable_chunked_context=self.args.enable_chunked_prefill, cfg=config(),
            # the PyTorch runtime gathers context logits for the requests that ask (no build-time flag)
            numerics=HFNumerics(str(model_dir), dtype) if config()["numerics"] == "hf" else None)
        log("torch_llm", model=str(model_dir), dtype=dtype, max_batch_size=max_batch_size,
            max_num_tokens=self.args.max_num_tokens, max_seq_len=max_seq_len, kv_cache_config=self.args.kv_cache_config)


class LLM(_TorchLLM):
    """tensorrt_llm.LLM in 1.2.x: the PyTorch runtime."""
