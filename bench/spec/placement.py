"""Where a matrix's cells run: executor settings checked against the cells (GPUs, tensor parallelism), before any run."""

from __future__ import annotations

from bench.errors import BenchInputError, choices
from bench.spec.cells import EXECUTORS, RunSettings, cell_label


def check_placement(settings: RunSettings, cells) -> None:
    """Raise BenchInputError if the executor settings do not fit each other or the cells (before any run)."""
    from bench.backends.declaration import tensor_parallel_size

    if settings.executor not in EXECUTORS:
        raise BenchInputError(f"unknown executor {settings.executor!r}: valid executors are {choices(EXECUTORS)}")
    if settings.ray_address is not None and (settings.executor != "ray" or not isinstance(settings.ray_address, str)):
        raise BenchInputError("ray_address is the Ray cluster of executor = 'ray' (a string such as 'auto' or "
                              "'ray://head:10001'): set executor = 'ray' (or --executor ray), or remove it")
    if settings.executor == "ray":
        if settings.devices:
            raise BenchInputError("executor 'ray' places each build group on GPUs of the cluster itself: remove "
                                  "devices (cells run on device = 'cuda') or use executor = 'local'")
        pinned = sorted({c.device for c in cells if c.device.startswith("cuda:")})
        if pinned:
            raise BenchInputError(f"executor 'ray' chooses each cell's GPU; device {pinned[0]!r} pins one: use "
                                  "device = 'cuda'")
    if settings.devices:
        other = sorted({c.device for c in cells} - {"cuda"})
        if other:
            raise BenchInputError(f"devices spreads GPU cells over GPUs, but some cells run on {other[0]!r}: remove "
                                  "devices, or drop those cells")
        if settings.devices != ("all",):
            for c in cells:
                if tensor_parallel_size(c.options_dict) > len(settings.devices):
                    raise BenchInputError(
                        f"{cell_label(c.backend, c.precision, c.max_batch_size)} asks for tensor_parallel_size={tensor_parallel_size(c.options_dict)} GPUs, but "
                        f"devices lists {len(settings.devices)}: list more devices or lower tensor_parallel_size")
    elif settings.executor == "local":
        for c in cells:
            tp = tensor_parallel_size(c.options_dict)
            if tp > 1 and c.device.startswith("cuda"):
                raise BenchInputError(
                    f"{cell_label(c.backend, c.precision, c.max_batch_size)} asks for tensor_parallel_size={tp} GPUs: list them, e.g. devices = "
                    f"{[f'cuda:{i}' for i in range(tp)]} (or devices = 'all'), or use executor = 'ray'")
