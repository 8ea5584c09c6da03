from tensorrt_llm._fake import (
    BuildConfig,
    CalibConfig,
    KvCacheConfig,
    QuantAlgo,
    QuantConfig,
    SamplingParams,
)

__all__ = ["BuildConfig", "CalibConfig", "KvCacheConfig", "QuantAlgo", "QuantConfig", "SamplingParams"]
