"""Mirrors tensorrt_llm/models/__init__.py MODEL_MAP (HF architecture -> TRT-LLM model class) and
models/automodel.py AutoModelForCausalLM.get_trtllm_model_class.

Neither file is among the 1.2.1 documentation pages. The keys below are those of the stored
version of models/__init__.py (commit 02267d3d), which has Qwen3ForCausalLM and no
Qwen3MoeForCausalLM; another stored version lists Qwen3MoeForCausalLM, so that one is
release-dependent (the backend refuses it for 1.2.x, as the issue's reading of 1.2.1 says).
"""

from __future__ import annotations

import json
from pathlib import Path

MODEL_MAP = {name: cls for cls, names in {
    "GPTForCausalLM": ["GPT2LMHeadModel", "GPT2LMHeadCustomModel", "GPTBigCodeForCausalLM", "Starcoder2ForCausalLM",
                       "FuyuForCausalLM", "Kosmos2ForConditionalGeneration", "JAISLMHeadModel", "GPTForCausalLM",
                       "NemotronForCausalLM"],
    "OPTForCausalLM": ["OPTForCausalLM"], "BloomForCausalLM": ["BloomForCausalLM"],
    "FalconForCausalLM": ["RWForCausalLM", "FalconForCausalLM"], "PhiForCausalLM": ["PhiForCausalLM"],
    "Phi3ForCausalLM": ["Phi3ForCausalLM", "Phi3VForCausalLM", "Phi3SmallForCausalLM", "PhiMoEForCausalLM",
                        "Phi4MMForCausalLM"],
    "MambaForCausalLM": ["MambaForCausalLM"], "GPTNeoXForCausalLM": ["GPTNeoXForCausalLM"],
    "GPTJForCausalLM": ["GPTJForCausalLM"], "MPTForCausalLM": ["MptForCausalLM", "MPTForCausalLM"],
    "ChatGLMForCausalLM": ["GLMModel", "ChatGLMModel", "ChatGLMForCausalLM", "ChatGLMForConditionalGeneration"],
    "LLaMAForCausalLM": ["LlamaForCausalLM", "LlavaLlamaModel", "ExaoneForCausalLM", "MistralForCausalLM",
                         "MixtralForCausalLM", "ArcticForCausalLM", "InternLMForCausalLM", "InternLM2ForCausalLM",
                         "InternLMXComposer2ForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
                         "SkyworkForCausalLM"],
    "GrokForCausalLM": ["Grok1ModelForCausalLM"], "BaichuanForCausalLM": ["BaichuanForCausalLM", "BaiChuanForCausalLM"],
    "GemmaForCausalLM": ["GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM"],
    "QWenForCausalLM": ["QWenLMHeadModel", "QWenForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
                        "Qwen2ForSequenceClassification", "Qwen2VLForConditionalGeneration", "Qwen2VLModel",
                        "Qwen3ForCausalLM"],
    "DbrxForCausalLM": ["DbrxForCausalLM"], "RecurrentGemmaForCausalLM": ["RecurrentGemmaForCausalLM"],
    "CogVLMForCausalLM": ["CogVLMForCausalLM"], "DeepseekForCausalLM": ["DeepseekForCausalLM"],
    "DeciLMForCausalLM": ["DeciLMForCausalLM"], "DeepseekV2ForCausalLM": ["DeepseekV2ForCausalLM"],
    "CohereForCausalLM": ["CohereForCausalLM"],
}.items() for name in names}

# Model types transformers itself knows (no remote code needed); INVENTED short list.
_NATIVE_MODEL_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gpt2", "gptj",
                       "gpt_neox", "gemma", "gemma2", "phi", "phi3", "falcon", "bloom", "opt", "mpt"}


def get_trtllm_model_class(hf_model_dir, trust_remote_code: bool = False) -> str:
    """Return the TRT-LLM model class name for a HF checkpoint directory (AutoModelForCausalLM)."""
    config = json.loads((Path(hf_model_dir) / "config.json").read_text())
    if config.get("auto_map") and config.get("model_type") not in _NATIVE_MODEL_TYPES and not trust_remote_code:
        # transformers.AutoConfig.from_pretrained refuses custom code without trust_remote_code.
        raise ValueError(
            f"The repository {hf_model_dir} contains custom code which must be executed to correctly load the "
            "model. You can inspect the repository content at "
            f"{hf_model_dir} .\n Please pass the argument `trust_remote_code=True` to allow custom code to be run.")
    arch = (config.get("architectures") or [None])[0]
    if arch not in MODEL_MAP:
        # INVENTED message text (automodel.py is not among the 1.2.1 pages).
        raise NotImplementedError(f"The given huggingface model architecture {arch} is not supported in TRT-LLM yet")
    return MODEL_MAP[arch]
