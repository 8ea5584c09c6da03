"""Mirrors 1.2.1 tensorrt_llm/models/modeling_utils.py: QuantConfig (a dataclass) and the quantize flow.

QuantConfig's fields, defaults and the `_requires_calibration` / `_requires_modelopt_quantization`
/ `_get_modelopt_qformat` rules are 1.2.1's. `PretrainedModel.quantize` (which sends modelopt
algorithms to quantize_and_export with calib_size=calib_batches) was read in a stored version
of the file (the 1.2.1 page holds the same QuantConfig).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..quantization.mode import (
    KV_CACHE_QUANT_ALGO_LIST,
    QUANT_ALGO_LIST,
    W8A8_SQ_PLUGIN_LIST,
    QuantAlgo,
)


@dataclass
class QuantConfig:
    quant_algo: QuantAlgo | None = None
    kv_cache_quant_algo: QuantAlgo | None = None
    group_size: int = 128
    smoothquant_val: float = 0.5
    clamp_val: list[float] | None = None
    use_meta_recipe: bool = False
    has_zero_point: bool = False
    pre_quant_scale: bool = False
    exclude_modules: list[str] | None = None
    mamba_ssm_cache_dtype: str | None = None

    @property
    def _use_plugin_sq(self):
        return self.quant_algo in W8A8_SQ_PLUGIN_LIST

    @property
    def _requires_calibration(self):
        return self.quant_algo in (set(QUANT_ALGO_LIST) - {
            QuantAlgo.W8A16, QuantAlgo.W4A16, QuantAlgo.FP8_PER_CHANNEL_PER_TOKEN
        }) or self.kv_cache_quant_algo in KV_CACHE_QUANT_ALGO_LIST

    @property
    def _requires_modelopt_quantization(self):
        if self.quant_algo in [QuantAlgo.NVFP4, QuantAlgo.FP8, QuantAlgo.W4A16_AWQ, QuantAlgo.W4A8_AWQ,
                               QuantAlgo.W8A8_SQ_PER_CHANNEL, QuantAlgo.MIXED_PRECISION]:
            return True
        return self.quant_algo is None and self.kv_cache_quant_algo == QuantAlgo.FP8

    def _get_modelopt_qformat(self):
        algo_to_modelopt_map = {
            QuantAlgo.W8A16: "int8_wo", QuantAlgo.W4A16: "int4_wo", QuantAlgo.NVFP4: "nvfp4", QuantAlgo.FP8: "fp8",
            QuantAlgo.W4A16_AWQ: "int4_awq", QuantAlgo.W4A8_AWQ: "w4a8_awq", QuantAlgo.W8A8_SQ_PER_CHANNEL: "int8_sq",
        }
        assert self.quant_algo != QuantAlgo.MIXED_PRECISION, "We don't support mixed precision in QuantConfig"
        if self.quant_algo is not None:
            assert self.quant_algo in algo_to_modelopt_map, (
                f"We don't use Modelopt for quantization algorithm {self.quant_algo}, you probably shall not call this")
            return algo_to_modelopt_map[self.quant_algo]
        return "full_prec"

    def _get_modelopt_kv_cache_dtype(self):
        algo_to_modelopt_map = {QuantAlgo.FP8: "fp8", QuantAlgo.INT8: "int8"}
        if self.kv_cache_quant_algo is not None:
            return algo_to_modelopt_map[self.kv_cache_quant_algo]
        return None


def quantize(hf_model_dir, quant_config: QuantConfig, calib_config) -> dict:
    """Return what calibration read: the modelopt flow or the older SmoothQuant flow of the model class.

    Modelopt algorithms: PretrainedModel.quantize -> quantize_and_export(calib_size=calib_batches,
    batch_size=calib_batch_size, calib_max_seq_length=...). Others that need calibration (the
    W8A8_SQ_*_PLUGIN algorithms) go through the model family's own convert.quantize, which reads
    the dataset with convert_utils.load_calib_dataset.
    """
    from ..quantization.quantize_by_modelopt import quantize_and_export

    if quant_config._requires_modelopt_quantization:
        texts = quantize_and_export(
            model_dir=str(hf_model_dir), calib_dataset=calib_config.calib_dataset,
            qformat=quant_config._get_modelopt_qformat(), kv_cache_dtype=quant_config._get_modelopt_kv_cache_dtype(),
            calib_size=calib_config.calib_batches, batch_size=calib_config.calib_batch_size,
            calib_max_seq_length=calib_config.calib_max_seq_length)
        return {"flow": "modelopt", "texts": texts}
    if quant_config._requires_calibration:
        from .convert_utils import load_calib_dataset

        # INVENTED detail: models/qwen/convert.py (not among the 1.2.1 pages) is modelled only by
        # its dataset loading, which is convert_utils.load_calib_dataset's.
        return {"flow": "smoothquant-plugin", "texts": list(load_calib_dataset(calib_config.calib_dataset))}
    return {"flow": "none", "texts": []}
