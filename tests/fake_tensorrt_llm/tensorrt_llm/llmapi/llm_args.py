"""Mirrors 1.2.1 tensorrt_llm/llmapi/llm_args.py: StrictBaseModel, KvCacheConfig, CalibConfig,
BaseLlmArgs, TrtLlmArgs (and TorchLlmArgs as far as BaseLlmArgs goes).

Fields and defaults are 1.2.1's; `extra="forbid"` makes an unknown keyword a
pydantic.ValidationError, as in 1.2.1. Validators reproduced: KvCacheConfig's field checks,
BaseLlmArgs.set_default_max_input_len / validate_and_init_tokenizer (skip_tokenizer_init) /
validate_runtime_args, TrtLlmArgs.init_build_config / validate_build_config_with_runtime_params /
validate_build_config_remaining (max_beam_width) and _load_config_from_engine. Not modelled:
the dtype / gpus_per_node validators (they ask torch.cuda), tokenizer loading, LoRA, speculative
decoding, parallel mappings (world size 1 only). Nested configs the stand-in never reads
(scheduler, peft, ...) are typed `Any`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from .._stand_in import warn
from ..builder import BuildConfig, EngineConfig
from ..models.modeling_utils import QuantConfig


class StrictBaseModel(BaseModel):
    """A base model that forbids arbitrary fields."""

    model_config = ConfigDict(extra="forbid")


class KvCacheConfig(StrictBaseModel):
    enable_block_reuse: bool = Field(default=True)
    max_tokens: int | None = Field(default=None)
    max_attention_window: list[int] | None = Field(default=None)
    sink_token_length: int | None = Field(default=None)
    free_gpu_memory_fraction: float | None = Field(default=0.9)
    host_cache_size: int | None = Field(default=None)
    onboard_blocks: bool = Field(default=True)
    cross_kv_cache_fraction: float | None = Field(default=None)
    secondary_offload_min_priority: int | None = Field(default=None)
    event_buffer_max_size: int = Field(default=0)
    attention_dp_events_gather_period_ms: int = Field(default=5)
    enable_partial_reuse: bool = Field(default=True)
    copy_on_partial_reuse: bool = Field(default=True)
    use_uvm: bool = Field(default=False)
    max_gpu_total_bytes: int = Field(default=0)
    dtype: str = Field(default="auto")  # PyTorch backend only
    mamba_ssm_cache_dtype: Literal["auto", "float16", "bfloat16", "float32"] = Field(default="auto")
    tokens_per_block: int = Field(default=32)

    @field_validator('free_gpu_memory_fraction')
    @classmethod
    def validate_free_gpu_memory_fraction(cls, v: float):
        if not 0 <= v <= 1:
            raise ValueError("kv_cache_config.free_gpu_memory_fraction must be a float between 0 and 1")
        return v

    @field_validator('max_gpu_total_bytes')
    @classmethod
    def validate_max_gpu_total_bytes(cls, v: int):
        if v < 0:
            raise ValueError("kv_cache_config.max_gpu_total_bytes must be non-negative")
        return v

    @field_validator('max_attention_window')
    @classmethod
    def validate_max_attention_window(cls, v):
        if v is None:
            return v
        if not isinstance(v, list) or len(v) == 0:
            raise ValueError("kv_cache_config.max_attention_window must be a non-empty list of positive integers")
        if any(i <= 0 for i in v):
            raise ValueError("kv_cache_config.max_attention_window values must be positive")
        return v


class CalibConfig(StrictBaseModel):
    device: Literal['cuda', 'cpu'] = Field(default='cuda')
    calib_dataset: str = Field(default='cnn_dailymail')
    calib_batches: int = Field(default=512)
    calib_batch_size: int = Field(default=1)
    calib_max_seq_length: int = Field(default=512)
    random_seed: int = Field(default=1234)
    tokenizer_max_seq_length: int = Field(default=2048)


class BaseLlmArgs(StrictBaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | Path = Field()
    tokenizer: Any = Field(default=None)
    tokenizer_mode: Literal['auto', 'slow'] = Field(default='auto')
    custom_tokenizer: str | None = Field(default=None)
    skip_tokenizer_init: bool = Field(default=False)
    trust_remote_code: bool = Field(default=False)
    tensor_parallel_size: int = Field(default=1)
    dtype: str = Field(default="auto")
    revision: str | None = Field(default=None)
    tokenizer_revision: str | None = Field(default=None)
    pipeline_parallel_size: int = Field(default=1)
    context_parallel_size: int = Field(default=1)
    gpus_per_node: int | None = Field(default=None)
    moe_cluster_parallel_size: int | None = Field(default=None)
    moe_tensor_parallel_size: int | None = Field(default=None)
    moe_expert_parallel_size: int | None = Field(default=None)
    enable_attention_dp: bool = Field(default=False)
    enable_lm_head_tp_in_adp: bool = Field(default=False)
    pp_partition: list[int] | None = Field(default=None)
    cp_config: dict | None = Field(default_factory=dict)
    load_format: Literal['auto', 'dummy'] = Field(default='auto')
    fail_fast_on_attention_window_too_large: bool = Field(default=False)
    enable_lora: bool = Field(default=False)
    lora_config: Any = Field(default=None)
    kv_cache_config: KvCacheConfig = Field(default_factory=KvCacheConfig)
    enable_chunked_prefill: bool = Field(default=False)
    guided_decoding_backend: Literal["xgrammar", "llguidance"] | None = Field(default=None)
    batched_logits_processor: object | None = Field(default=None)
    iter_stats_max_iterations: int | None = Field(default=None)
    request_stats_max_iterations: int | None = Field(default=None)
    peft_cache_config: Any = Field(default=None)
    scheduler_config: Any = Field(default=None)  # 1.2.1: default_factory=SchedulerConfig
    cache_transceiver_config: Any = Field(default=None)
    sparse_attention_config: Any = Field(default=None)
    speculative_config: Any = Field(default=None)
    max_batch_size: int | None = Field(default=None)
    max_input_len: int | None = Field(default=None)
    max_seq_len: int | None = Field(default=None)
    max_beam_width: int | None = Field(default=None)
    max_num_tokens: int | None = Field(default=8192)
    gather_generation_logits: bool = Field(default=False)
    num_postprocess_workers: int = Field(default=0)
    postprocess_tokenizer_dir: str | None = Field(default=None)
    reasoning_parser: str | None = Field(default=None)
    decoding_config: object | None = Field(default=None)
    mpi_session: object | None = Field(default=None)
    otlp_traces_endpoint: str | None = Field(default=None)
    backend: str | None = Field(default=None)
    return_perf_metrics: bool = Field(default=False)
    orchestrator_type: Literal["rpc", "ray"] | None = Field(default=None)
    env_overrides: dict[str, str] | None = Field(default=None)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> BaseLlmArgs:
        return cls(**kwargs)

    @field_validator("model")
    @classmethod
    def validate_model(cls, v, info):
        if not isinstance(v, (str, Path)):
            raise ValueError(f"Invalid model: {v}")
        return v

    @model_validator(mode="after")
    def set_default_max_input_len(self):
        if self.max_input_len is None:
            self.max_input_len = 1024
        return self

    @model_validator(mode="after")
    def validate_and_init_tokenizer(self):
        if self.skip_tokenizer_init:
            self.tokenizer = None
        return self  # INVENTED: no tokenizer is ever loaded by the stand-in

    @model_validator(mode="after")
    def validate_runtime_args(self):
        if self.max_batch_size is not None and self.max_num_tokens is not None:
            if self.max_batch_size > self.max_num_tokens:
                warn(f"max_batch_size [{self.max_batch_size}] should be less than or equal to max_num_tokens "
                     f"[{self.max_num_tokens}]")
        return self


class TrtLlmArgs(BaseLlmArgs):
    enable_tqdm: bool = Field(default=False)
    workspace: str | None = Field(default=None)
    enable_build_cache: object = Field(default=False)
    extended_runtime_perf_knob_config: Any = Field(default=None)
    calib_config: CalibConfig | None = Field(default=None, validate_default=True)
    quant_config: QuantConfig | None = Field(default=None, validate_default=True)
    embedding_parallel_mode: str = Field(default='SHARDING_ALONG_VOCAB')
    fast_build: bool = Field(default=False)
    build_config: BuildConfig | None = Field(default=None)
    enable_prompt_adapter: bool = Field(default=False)
    max_prompt_adapter_token: int = Field(default=0)
    batching_type: Any = Field(default=None)
    normalize_log_probs: bool = Field(default=False)

    _pretrained_config: dict | None = PrivateAttr(default=None)

    # The two defaults below: 1.2.1 declares both fields with validate_default=True and
    # validate_build_config_remaining reads self.quant_config.quant_algo, so a validator turns
    # None into a default config; its body is on a part of the page not read (INVENTED wording).
    @field_validator("calib_config", mode="before")
    @classmethod
    def _default_calib_config(cls, v):
        return CalibConfig() if v is None else v

    @field_validator("quant_config", mode="before")
    @classmethod
    def _default_quant_config(cls, v):
        return QuantConfig() if v is None else v

    @model_validator(mode="after")
    def init_build_config(self):
        if getattr(self, "build_config", None) is None:
            kwargs = {}
            if self.max_batch_size:
                kwargs["max_batch_size"] = self.max_batch_size
            if self.max_num_tokens:
                kwargs["max_num_tokens"] = self.max_num_tokens
            if self.max_seq_len:
                kwargs["max_seq_len"] = self.max_seq_len
            if self.max_beam_width:
                kwargs["max_beam_width"] = self.max_beam_width
            if self.max_input_len:
                kwargs["max_input_len"] = self.max_input_len
            self.build_config = BuildConfig(**kwargs)
        return self

    @model_validator(mode="after")
    def validate_build_config_with_runtime_params(self):
        # max_batch_size and max_num_tokens here are runtime values passed to the executor,
        # overwriting the built engine's; build-time values belong in build_config.
        assert isinstance(self.build_config, BuildConfig), f"build_config is not initialized: {self.build_config}"
        if self.max_batch_size is not None and self.max_batch_size > self.build_config.max_batch_size:
            self.max_batch_size = self.build_config.max_batch_size
            warn(f"max_batch_size [{self.max_batch_size}] is overridden by build_config.max_batch_size "
                 f"[{self.build_config.max_batch_size}] in build_config")
        if self.max_num_tokens is not None and self.max_num_tokens > self.build_config.max_num_tokens:
            self.max_num_tokens = self.build_config.max_num_tokens
            warn(f"max_num_tokens [{self.max_num_tokens}] is overridden by build_config.max_num_tokens "
                 f"[{self.build_config.max_num_tokens}] in build_config")
        if self.max_seq_len is not None and self.max_seq_len != self.build_config.max_seq_len:
            warn(f"max_seq_len [{self.max_seq_len}] is overridden by build_config.max_seq_len "
                 f"[{self.build_config.max_seq_len}] in build_config")
        if self.max_beam_width is not None and self.max_beam_width != self.build_config.max_beam_width:
            warn(f"max_beam_width [{self.max_beam_width}] is overridden by build_config.max_beam_width "
                 f"[{self.build_config.max_beam_width}] in build_config")
        if self.max_input_len is not None and self.max_input_len != self.build_config.max_input_len:
            warn(f"max_input_len [{self.max_input_len}] is overridden by build_config.max_input_len "
                 f"[{self.build_config.max_input_len}] in build_config")
        return self

    @model_validator(mode="after")
    def validate_build_config_remaining(self):
        if self.max_beam_width is None:
            self.max_beam_width = self.build_config.max_beam_width if self.build_config else 1
        return self

    def _load_config_from_engine(self, engine_dir: Path):
        engine_config = EngineConfig.from_json_file(engine_dir / "config.json")
        self._pretrained_config = engine_config.pretrained_config
        self.build_config = engine_config.build_config
        mapping = engine_config.pretrained_config.get("mapping", {})
        if self.tensor_parallel_size not in (1, mapping.get("tp_size", 1)):
            raise ValueError(f"tp_size {self.tensor_parallel_size} is not consistent with the engine's tp_size "
                             f"{mapping.get('tp_size', 1)}")


class TorchLlmArgs(BaseLlmArgs):
    """INVENTED subset: TorchLlmArgs' own fields (cuda graphs, attention backend, ...) were not read."""
