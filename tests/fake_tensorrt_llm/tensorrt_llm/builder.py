"""Mirrors 1.2.1 tensorrt_llm/builder.py: BuildConfig, EngineConfig, build(), Builder.build_engine.

BuildConfig is a plain pydantic BaseModel in 1.2.1 (no `extra="forbid"`), so an unknown keyword
is silently ignored there, and here. Fields and defaults are 1.2.1's; LoraConfig and
PluginConfig are reduced to the plugin fields build() reads (INVENTED subset, 1.2.1 defaults
as far as the stored plugin.py shows: remove_input_padding and context_fmha on).
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import BaseModel, Field

from ._common import check_max_num_tokens
from ._stand_in import config, warn


class PluginConfig(BaseModel):  # INVENTED subset of tensorrt_llm/plugin/plugin.py PluginConfig
    remove_input_padding: bool = True
    context_fmha: bool = True
    tokens_per_block: int = 32
    multiple_profiles: bool = False
    streamingllm: bool = False
    paged_kv_cache: bool | None = None
    paged_state: bool | None = None
    lora_plugin: str | None = None
    nccl_plugin: str | None = "auto"
    manage_weights: bool = False


class BuildConfig(BaseModel):
    max_input_len: int = Field(default=1024)
    max_seq_len: int | None = Field(default=None)
    opt_batch_size: int = Field(default=8)
    max_batch_size: int = Field(default=2048)
    max_beam_width: int = Field(default=1)
    max_num_tokens: int = Field(default=8192)
    opt_num_tokens: int | None = Field(default=None)
    max_prompt_embedding_table_size: int = Field(default=0)
    kv_cache_type: str | None = Field(default=None)
    gather_context_logits: bool = Field(default=False)
    gather_generation_logits: bool = Field(default=False)
    strongly_typed: bool = Field(default=True)
    force_num_profiles: int | None = Field(default=None)
    profiling_verbosity: str = Field(default='layer_names_only')
    enable_debug_output: bool = Field(default=False)
    max_draft_len: int = Field(default=0)
    speculative_decoding_mode: Any = Field(default="NONE")
    use_refit: bool = Field(default=False)
    input_timing_cache: str | None = Field(default=None)
    output_timing_cache: str = Field(default='model.cache')
    lora_config: dict = Field(default_factory=dict)
    weight_sparsity: bool = Field(default=False)
    weight_streaming: bool = Field(default=False)
    plugin_config: PluginConfig = Field(default_factory=PluginConfig)
    use_strip_plan: bool = Field(default=False)
    max_encoder_input_len: int = Field(default=1024)
    dry_run: bool = Field(default=False)
    visualize_network: str | None = Field(default=None)
    monitor_memory: bool = Field(default=False)
    use_mrope: bool = Field(default=False)

    @classmethod
    def from_json_file(cls, config_file):
        with open(config_file) as f:
            return BuildConfig(**json.load(f))


class EngineConfig:
    def __init__(self, pretrained_config: dict, build_config: BuildConfig, version: str):
        self.pretrained_config = pretrained_config
        self.build_config = build_config
        self.version = version

    @classmethod
    def from_json_file(cls, config_file):
        with open(config_file) as f:
            config = json.load(f)
        return cls(config['pretrained_config'], BuildConfig(**config['build_config']), config['version'])

    def to_dict(self):
        build_config = self.build_config.model_dump(mode="json")
        build_config.pop('dry_run', None)  # Not an Engine Characteristic
        build_config.pop('visualize_network', None)
        return {'version': self.version, 'pretrained_config': self.pretrained_config, 'build_config': build_config}


def build_engine() -> bytes:
    """Builder.build_engine: TensorRT's build_serialized_network, then the 1.2.1 assertion."""
    engine = None
    if config()["fail"] == "build_oom":
        # INVENTED trigger; the lines are TensorRT's as printed in public build logs (e.g.
        # NVIDIA/TensorRT-LLM#346, huggingface/optimum-nvidia#146): the OOM text goes to the log only.
        os.write(2, b"[TRT] [E] [virtualMemoryBuffer.cpp::resizePhysical::151] Error Code 2: OutOfMemory "
                    b"(Requested size was 16654532608 bytes.)\n"
                    b"[TRT] [E] [globWriter.cpp::makeResizableGpuMemory::435] Error Code 2: OutOfMemory "
                    b"(Requested size was 16654532608 bytes.)\n")
    else:
        engine = b"\0" * 4096  # INVENTED: a serialized engine's bytes
    assert engine is not None, 'Engine building failed, please check the error log.'
    return engine


def build(pretrained_config: dict, build_config: BuildConfig) -> tuple[EngineConfig, bytes]:
    """Return (engine config, engine bytes) after 1.2.1's build() checks on max_seq_len / max_num_tokens."""
    build_config = build_config.model_copy(deep=True)
    if build_config.max_seq_len is None:
        build_config.max_seq_len = int(pretrained_config.get("max_position_embeddings") or 2048)
    if build_config.max_input_len > build_config.max_seq_len:
        warn(f"max_input_len is {build_config.max_input_len} is larger than max_seq_len {build_config.max_seq_len}, "
             "clipping it to max_seq_len")
        build_config.max_input_len = build_config.max_seq_len
    pc = build_config.plugin_config
    build_config.max_num_tokens, build_config.opt_num_tokens = check_max_num_tokens(
        max_num_tokens=build_config.max_num_tokens, opt_num_tokens=build_config.opt_num_tokens,
        max_batch_size=build_config.max_batch_size, max_input_len=build_config.max_input_len,
        max_seq_len=build_config.max_seq_len, max_beam_width=build_config.max_beam_width,
        remove_input_padding=pc.remove_input_padding, enable_context_fmha=pc.context_fmha,
        tokens_per_block=pc.tokens_per_block, multiple_profiles=pc.multiple_profiles)
    engine = build_engine()
    return EngineConfig(pretrained_config, build_config, "1.2.1"), engine
