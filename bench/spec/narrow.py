"""The command line's narrowing of a matrix: --only, --requests, --trials, --runs and the executor flags; value coercion;
key=value pairs (`parse_pairs`: --only, --baseline, --layers and the [study] tables' `only`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.errors import BenchInputError
from bench.machine.devices import device_pool
from bench.spec.cells import Cell, Matrix, check_num_requests
from bench.spec.matrix import _matches, check_engine_settings, check_settings
from bench.spec.placement import check_placement


def parse_pairs(text: str | None, flag: str = "--baseline") -> dict | None:
    """Return {key: value} from 'k=v,k2=v2'; BenchInputError naming the flag otherwise."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise BenchInputError(f"{flag} wants key=value pairs, e.g. backend=hf,precision=bf16,max_batch_size=1; got {part!r}")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def with_workload(cell: Cell, **changes: Any) -> Cell:
    """Return the cell with its workload spec changed (used by OOM probes and tests)."""
    return replace(cell, workload=replace(cell.workload, **changes))


def narrow(matrix: Matrix, only: dict | None = None, requests: int | None = None, trials: int | None = None,
           runs: int | None = None, executor: str | None = None, ray_address: str | None = None,
           devices: str | None = None, tuning_builds: int | None = None, engines: list[str] | None = None,
           retune_on_mismatch: bool = False, trust: list[str] | None = None,
           trust_files: list[str] | None = None, cores: str | None = None) -> Matrix:
    """Return the matrix restricted to cells matching `only`, with optional overrides (the command line's)."""
    cells = list(matrix.cells)
    if only:
        # "max_batch_size=1|8" selects either value
        # Each value matches as typed (1, 0.5, true, none) or as written ("none" is also a string
        # option value, e.g. fail = "none").
        rule = {k: [y for x in v.split("|") for y in (coerce_cli_value(x), x)] if isinstance(v, str) else v
                for k, v in only.items()}
        cells = [c for c in cells if _matches(c, rule)]
        if not cells:
            raise BenchInputError(f"--only {only} matches none of the matrix's {len(matrix.cells)} cells")
    if requests is not None:
        check_num_requests(requests, "--requests")
        cells = [with_workload(c, num_requests=requests) for c in cells]
    settings = matrix.settings
    if trials is not None:
        settings = replace(settings, trials=trials)
    if runs is not None:
        settings = replace(settings, runs=runs)
    if tuning_builds is not None:
        settings = replace(settings, tuning_builds=tuning_builds)
    if engines:
        settings = replace(settings, engines=tuple(engines))
    if retune_on_mismatch:
        settings = replace(settings, retune_on_mismatch=True)
    if (trust or trust_files) and not settings.engines:
        raise BenchInputError("--trust and --trust-file vouch for engine artifacts to load: give --engines too")
    if trust or trust_files:
        settings = replace(settings, trust=tuple(trust or ()), trust_files=tuple(trust_files or ()))
    if cores is not None:
        settings = replace(settings, cores=cores)
    check_settings(settings, cells)
    check_engine_settings(settings)
    if executor is not None:  # the other executor's settings of the matrix do not apply
        settings = replace(settings, executor=executor, devices=() if executor == "ray" else settings.devices,
                           ray_address=settings.ray_address if executor == "ray" else None)
    if ray_address is not None:
        settings = replace(settings, ray_address=ray_address)
    if devices is not None:
        settings = replace(settings, devices=device_pool(devices))
        cpu = sorted({c.device for c in cells if not c.device.startswith("cuda")})
        if cpu:
            raise BenchInputError(f"--devices spreads GPU cells over GPUs, but this matrix's cells run on {cpu[0]!r}")
        cells = [replace(c, device="cuda") for c in cells]  # the executor picks the GPU: 'cuda:N' cells become 'cuda'
    cells = list(dict.fromkeys(cells))
    check_placement(settings, cells)
    return replace(matrix, cells=tuple(cells), settings=settings)


def coerce_cli_value(text: Any) -> Any:
    """Return a command-line value as the type a field has (None, int, float, bool or str)."""
    if not isinstance(text, str):
        return text
    if text.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)
