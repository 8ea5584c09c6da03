from ..builder import BuildConfig
from ..executor.result import CompletionOutput
from ..models.modeling_utils import QuantConfig
from ..quantization.mode import QuantAlgo
from ..sampling_params import SamplingParams
from .llm import LLM, RequestOutput
from .llm_args import CalibConfig, KvCacheConfig, TorchLlmArgs, TrtLlmArgs

__all__ = ["LLM", "BuildConfig", "CalibConfig", "CompletionOutput", "KvCacheConfig", "QuantAlgo", "QuantConfig",
           "RequestOutput", "SamplingParams", "TorchLlmArgs", "TrtLlmArgs"]
