"""Stand-in for TensorRT-LLM 1.2.1 (tests only), rebuilt from 1.2.1's source: see _stand_in.py."""
from .builder import BuildConfig
from .llmapi import LLM, KvCacheConfig, SamplingParams

__version__ = "1.2.1"
__all__ = ["LLM", "SamplingParams", "BuildConfig", "KvCacheConfig"]
