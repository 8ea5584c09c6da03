"""Stand-in for TensorRT-LLM 1.2 (tests only): the public names the bench backend uses."""
from tensorrt_llm._fake import SamplingParams
from tensorrt_llm._fake import TorchLLM as LLM

__version__ = "1.2.0"
__all__ = ["LLM", "SamplingParams"]
