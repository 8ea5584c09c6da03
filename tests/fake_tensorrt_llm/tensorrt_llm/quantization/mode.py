"""Mirrors 1.2.1 tensorrt_llm/quantization/mode.py: QuantAlgo and the algorithm lists.

QuantAlgo derives from the `strenum` package's StrEnum, whose auto() value is the member
name ("W8A16"); a str-valued Enum with the names as values behaves the same here.
"""

from enum import Enum, EnumMeta


class _BaseEnumMeta(EnumMeta):
    # tensorrt_llm._utils.BaseEnumMeta: `"FP8" in QuantAlgo` is a membership test by value.
    def __contains__(cls, item):
        try:
            cls(item)
        except ValueError:
            return False
        return True


class QuantAlgo(str, Enum, metaclass=_BaseEnumMeta):
    W8A16 = "W8A16"
    W4A16 = "W4A16"
    W4A16_AWQ = "W4A16_AWQ"
    W4A8_AWQ = "W4A8_AWQ"
    W8A16_GPTQ = "W8A16_GPTQ"
    W4A16_GPTQ = "W4A16_GPTQ"
    W8A8_SQ_PER_CHANNEL = "W8A8_SQ_PER_CHANNEL"
    W8A8_SQ_PER_TENSOR_PLUGIN = "W8A8_SQ_PER_TENSOR_PLUGIN"
    W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN = "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN"
    W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN = "W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN"
    W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN = "W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN"
    W4A8_QSERVE_PER_GROUP = "W4A8_QSERVE_PER_GROUP"
    W4A8_QSERVE_PER_CHANNEL = "W4A8_QSERVE_PER_CHANNEL"
    FP8 = "FP8"
    FP8_PER_CHANNEL_PER_TOKEN = "FP8_PER_CHANNEL_PER_TOKEN"
    FP8_BLOCK_SCALES = "FP8_BLOCK_SCALES"
    INT8 = "INT8"
    MIXED_PRECISION = "MIXED_PRECISION"
    NVFP4 = "NVFP4"
    W4A8_NVFP4_FP8 = "W4A8_NVFP4_FP8"
    W4A8_MXFP4_FP8 = "W4A8_MXFP4_FP8"
    W4A8_MXFP4_MXFP8 = "W4A8_MXFP4_MXFP8"
    W4A16_MXFP4 = "W4A16_MXFP4"
    NVFP4_AWQ = "NVFP4_AWQ"
    NO_QUANT = "NO_QUANT"

    def __str__(self) -> str:  # StrEnum: str() is the value
        return self.value


QUANT_ALGO_LIST = list(set(QuantAlgo) - {QuantAlgo.INT8})
KV_CACHE_QUANT_ALGO_LIST = [QuantAlgo.FP8, QuantAlgo.INT8, QuantAlgo.NVFP4]
W8A8_SQ_PLUGIN_LIST = [
    QuantAlgo.W8A8_SQ_PER_TENSOR_PLUGIN,
    QuantAlgo.W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN,
    QuantAlgo.W8A8_SQ_PER_CHANNEL_PER_TENSOR_PLUGIN,
    QuantAlgo.W8A8_SQ_PER_TENSOR_PER_TOKEN_PLUGIN,
]
MODELOPT_FLOW_QUANTIZATIONS = {
    QuantAlgo.W4A16_AWQ, QuantAlgo.FP8, QuantAlgo.W8A8_SQ_PER_CHANNEL, QuantAlgo.W4A8_AWQ,
}
