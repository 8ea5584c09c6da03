from .mode import (
                   KV_CACHE_QUANT_ALGO_LIST,
                   MODELOPT_FLOW_QUANTIZATIONS,
                   QUANT_ALGO_LIST,
                   W8A8_SQ_PLUGIN_LIST,
                   QuantAlgo,
)

__all__ = ["QuantAlgo", "QUANT_ALGO_LIST", "KV_CACHE_QUANT_ALGO_LIST", "W8A8_SQ_PLUGIN_LIST", "MODELOPT_FLOW_QUANTIZATIONS"]
