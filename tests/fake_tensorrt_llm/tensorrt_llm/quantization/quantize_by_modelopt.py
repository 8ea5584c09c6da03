"""Mirrors 1.2.1 tensorrt_llm/quantization/quantize_by_modelopt.py: get_calib_dataloader, quantize_and_export.

The branch order of get_calib_dataloader is 1.2.1's: "pileval", then any name containing
"scienceqa"/"science_qa", then any name containing "cnn_dailymail" (downloads), then a local
directory (`load_dataset(dir, split="train")["text"][:calib_size]`), else NotImplementedError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _load_local_train_text(directory: str) -> list[str]:
    # INVENTED (a subset of Hugging Face datasets): load_dataset(dir, split="train") on a folder
    # of JSON Lines files takes the files whose names start with "train" as the train split.
    files = sorted(p for p in Path(directory).iterdir() if p.name.startswith("train") and p.suffix in (".jsonl", ".json"))
    if not files:
        raise FileNotFoundError(f"Unable to find a train split in {directory} (stand-in reads train*.jsonl / train*.json)")
    rows = []
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    if any("text" not in r for r in rows):
        raise KeyError("text")  # dataset["text"]: the column must exist
    return [r["text"] for r in rows]


def get_calib_dataloader(dataset_name_or_dir="cnn_dailymail", tokenizer=None, batch_size=1, calib_size=512,
                         block_size=512, device=None, include_labels=False):
    """Return the calibration texts (1.2.1 returns a DataLoader of token ids; no torch here)."""
    if dataset_name_or_dir == "pileval" or "scienceqa" in dataset_name_or_dir.lower() or (
        "science_qa" in dataset_name_or_dir.lower()
    ) or "cnn_dailymail" in dataset_name_or_dir:
        # 1.2.1 calls load_dataset(<hub name>): a download.
        raise ConnectionError(f"stand-in: calibration dataset {dataset_name_or_dir!r} would be downloaded from the Hub")
    if os.path.isdir(dataset_name_or_dir):
        return _load_local_train_text(dataset_name_or_dir)[:calib_size]
    raise NotImplementedError(f"Unsupported dataset name or local repo directory: {dataset_name_or_dir}.")


def quantize_and_export(*, model_dir, calib_dataset, qformat, kv_cache_dtype, calib_size, batch_size,
                        calib_max_seq_length, **kwargs) -> list[str]:
    """Return the calibration texts used (1.2.1 quantizes with ModelOpt and exports a checkpoint)."""
    if qformat in ("full_prec", "int8_wo", "int4_wo") and kv_cache_dtype is None:
        return []  # "No quantization applied"
    if "awq" in qformat and calib_size > 32:
        calib_size = 32  # 1.2.1: AWQ calibration is capped at 32 samples
    return get_calib_dataloader(calib_dataset, None, batch_size, calib_size, calib_max_seq_length)
