"""Mirrors tensorrt_llm/models/convert_utils.py load_calib_dataset (stored version; not among the 1.2.1 pages).

A local folder gets name=None, split=None, key=None: `load_dataset(dir)` returns a DatasetDict
and `dataset[None]` fails, so the older SmoothQuant flow cannot read a local calibration folder.
"""

DEFAULT_HF_DATASET_META = {
    'ccdv/cnn_dailymail': ('3.0.0', 'train', 'article'),
    'cnn_dailymail': ('3.0.0', 'train', 'article'),
    'lambada': (None, 'validation', 'text'),
}


def load_calib_dataset(dataset_name_or_dir: str, config_name=None, split=None, key=None, trust_remote_code=True,
                       **kwargs):
    if config_name is None:
        for name, meta in DEFAULT_HF_DATASET_META.items():
            if name in dataset_name_or_dir:
                config_name, split, key = meta[0], split or meta[1], key or meta[2]
                break
    if split is None:
        # INVENTED message; the real failure is a KeyError(None) indexing the DatasetDict.
        raise KeyError(f"load_calib_dataset({dataset_name_or_dir!r}): no split/column for a local folder (dataset[None])")
    raise ConnectionError(f"stand-in: calibration dataset {dataset_name_or_dir!r} would be downloaded from the Hub")
