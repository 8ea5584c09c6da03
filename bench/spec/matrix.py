"""Matrix TOML / preset -> a validated Matrix: the parser, its keys, include/exclude rules and run settings."""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.backends.registry import backend_config
from bench.checks import check_number
from bench.errors import BenchInputError, choices
from bench.files import user_path
from bench.machine.devices import DEVICE_RE, device_pool
from bench.spec.baseline import default_baseline
from bench.spec.cells import (
    _MISSING,
    ORDERS,
    PRESETS_DIR,
    RULE_KEYS,
    AccuracySpec,
    Cell,
    Matrix,
    RunSettings,
    WorkloadSpec,
)
from bench.spec.placement import check_placement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


AXES = ("backends", "models", "precisions", "max_batch_sizes", "workloads", "device")


TOP_KEYS = set(AXES) | {
    "name", "description", "model", "devices", "options", "include", "exclude", "workload",
    "trials", "warmup", "runs", "timeout_s", "build_timeout_s", "baseline", "gpu_memory_gb",
    "study",  # read by `bench study` (bench/study/plan.py): its OOM search, profile and accuracy settings
    "executor", "ray_address", "tuning_builds", "engines", "cores", "order",
    "accuracy",  # read by `bench accuracy` (bench/accuracy/driver.py): AccuracySpec
}


def requirements(cells) -> list:
    """Return the optional packages (bench.backends.declaration.Requirement) the cells need, one per package, in cell order."""

    out: dict = {}
    for cell in cells:
        for req in backend_config(cell.backend).requirements(cell):
            out.setdefault(req.package, req)
    return list(out.values())


def check_packages(cells) -> None:
    """Raise BenchInputError naming the fix for the first optional package the cells need that is not installed."""
    for req in requirements(cells):
        if not req.installed():
            raise BenchInputError(req.message)


def check_cuda(cells) -> None:
    """Raise BenchInputError, naming the reason and the fix, when cells that compute on a CUDA device would run on
    a machine without CUDA (bench.machine.environment.cuda_missing): refused before any worker starts."""
    from bench.machine.environment import cuda_missing

    gpu = [c for c in cells if str(c.device).startswith("cuda") and backend_config(c.backend).computes_on_device]
    if not gpu:
        return
    why = cuda_missing()
    if why is None:
        return
    backends = ", ".join(sorted({c.backend for c in gpu}))
    raise BenchInputError(
        f"{len(gpu)} cell(s) ({backends}) run on device {gpu[0].device!r}, but this machine cannot run CUDA: {why}; "
        "run them on a machine with an NVIDIA GPU and a CUDA build of torch, or run CPU cells here (device = \"cpu\" in "
        "the matrix, --only device=cpu, or --preset default; `bench presets` says what each preset needs)")


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def load_matrix(source: str | Path, *, preset: bool = False, check_installed: bool = True) -> Matrix:
    """Return the validated Matrix from a preset name or a TOML file; BenchInputError if bad.

    check_installed=False: for listing and planning (dry runs), a missing optional package
    (torchao, gemlite, flash-attn: `requirements`) is not an error.
    """
    if preset:
        path = PRESETS_DIR / f"{source}.toml"
        if not path.is_file():
            raise BenchInputError(f"unknown preset {source!r}: valid presets are {choices(list_presets())}")
    else:
        path = user_path(source, "matrix file")
        if not path.is_file():
            raise BenchInputError(f"matrix file {str(source)!r} does not exist; or use --preset with one of {choices(list_presets())}")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchInputError(f"cannot read matrix file {str(path)!r}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise BenchInputError(f"matrix file {str(path)!r} is not valid TOML: {exc}") from exc
    return parse_matrix(data, default_name=path.stem, check_installed=check_installed)


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _axis(data: dict, plural: str, singular: str | None = None, kind: type = str) -> list:
    if plural in data and singular and singular in data:
        raise BenchInputError(f"give either {plural!r} or {singular!r}, not both")
    if plural in data:
        values = _as_list(data[plural])
    elif singular and singular in data:
        values = _as_list(data[singular])
    else:
        raise BenchInputError(f"matrix is missing {plural!r}")
    if not values:
        raise BenchInputError(f"matrix key {plural!r} is empty")
    for v in values:
        if not isinstance(v, kind) or isinstance(v, bool):
            what = "names (strings)" if kind is str else "positive integers"
            raise BenchInputError(f"matrix key {plural!r} takes {what}, e.g. {plural} = "
                                  f"{EXAMPLES.get(plural, '[...]')}; got {v!r}")
    return values


def check_vocabularies(cells) -> None:
    """Raise BenchInputError where a cell's workload tokenizer makes ids its model cannot embed (checked before any run).

    A frozen workload file (`source = "file"`) carries ids of the tokenizer that built it, not the spec's: not checked.
    """
    from bench.models import check_tokenizer_fits

    pairs = {(c.model, c.workload): None for c in cells
             if backend_config(c.backend).local_model and c.workload.source != "file"}
    for model, workload in pairs:
        check_tokenizer_fits(model, workload.tokenizer, f"workload {workload.name!r} with model {model!r}")


EXAMPLES = {"backends": '["hf", "fake"]', "models": '["qwen-tiny"]', "precisions": '["fp32", "bf16"]',
            "max_batch_sizes": "[1, 2, 4]", "workloads": '["sharegpt"]', "device": '"cpu"'}


@dataclass(frozen=True)
class _Axes:
    """A matrix's axes, checked: every value a cell can take."""

    backends: list
    models: list
    precisions: list
    batch_sizes: list
    workload_names: list
    devices: list
    pool: tuple  # the local executor's GPUs (`devices`), () without


def parse_matrix(data: dict, default_name: str = "matrix", *, check_installed: bool = True) -> Matrix:
    """Return the validated Matrix for an already-parsed TOML document (check_installed: as load_matrix's)."""
    workload_defs = _check_document(data)
    workloads = {name: WorkloadSpec.from_dict(name, dict(d)) for name, d in workload_defs.items()}
    axes = _axes_of(data, workloads)
    raw_options = data.get("options", {})
    cells = _expand(axes, workloads, raw_options)
    excludes = _rules(data.get("exclude", []), "exclude")
    cells = [c for c in cells if not any(_matches(c, rule) for rule in excludes)]
    cells += _included(data, axes, workload_defs, raw_options, check_installed)
    unique = list(dict.fromkeys(cells))  # keep order, drop duplicates from include rules
    if not unique:
        raise BenchInputError("the matrix expands to zero cells: check the exclude rules")
    for cell in unique:
        backend_config(cell.backend).validate(cell)
    check_vocabularies(unique)
    if check_installed:
        check_packages(unique)
    settings = _settings_of(data, axes.pool, unique)
    baseline = data["baseline"] if "baseline" in data else default_baseline(unique)
    if not isinstance(baseline, dict) or not baseline:
        raise BenchInputError("baseline must be a table of cell keys, e.g. baseline = { backend = \"hf\", precision = "
                              "\"bf16\", max_batch_size = 1 }")
    return Matrix(
        name=data.get("name", default_name),
        cells=tuple(unique),
        settings=settings,
        description=data.get("description", ""),
        baseline=baseline,
        accuracy=AccuracySpec.from_dict(data.get("accuracy", {})),
    )


def _check_document(data: dict) -> dict:
    """Return the [workload] tables after checking the document's top-level keys and their types."""
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise BenchInputError(f"unknown matrix key {sorted(unknown)[0]!r}; valid keys are {choices(TOP_KEYS)}")
    for key in ("name", "description", "executor"):
        if key in data and not isinstance(data[key], str):
            raise BenchInputError(f"matrix key {key!r} must be a string, got {data[key]!r}")
    workload_defs = data.get("workload", {})
    if not isinstance(workload_defs, dict) or not all(isinstance(d, dict) for d in workload_defs.values()):
        raise BenchInputError("[workload] must be a table of named workloads: [workload.NAME]")
    if not isinstance(data.get("options", {}), dict):
        raise BenchInputError("options must be a table: [options] with key = value lines ([options.BACKEND] for one "
                              "backend)")
    return workload_defs


def _axes_of(data: dict, workloads: dict) -> _Axes:
    """Return the matrix's axes, each value checked (names, batch sizes, devices, backends, models)."""
    from bench.models import resolve_model

    backends = _axis(data, "backends")
    models = _axis(data, "models", "model")
    precisions = _axis(data, "precisions")
    batch_sizes = _axis(data, "max_batch_sizes", kind=int)
    workload_names = _axis(data, "workloads")
    pool = device_pool(data["devices"]) if "devices" in data else ()
    if pool and "device" in data:
        raise BenchInputError(
            "give either `device` (where each cell runs; a list is an axis) or `devices` (the GPUs a matrix is "
            "spread over, one worker per GPU; its cells run on device 'cuda'), not both"
        )
    devices = ["cuda"] if pool else _axis(data, "device")
    for bs in batch_sizes:
        if not isinstance(bs, int) or isinstance(bs, bool) or bs <= 0:
            raise BenchInputError(f"max_batch_sizes must be positive integers, got {bs!r}")
    for name in workload_names:
        if name not in workloads:
            raise BenchInputError(
                f"workload {name!r} is not defined: add a [workload.{name}] table; defined workloads are "
                f"{choices(workloads) if workloads else 'none'}"
            )
    for dev in devices:
        if not isinstance(dev, str) or not DEVICE_RE.match(dev):
            raise BenchInputError(f"unknown device {dev!r}: use 'cpu', 'cuda' or 'cuda:N'")
    for name in backends:
        backend_config(name)  # raises for unknown backends
    if any(backend_config(b).local_model for b in backends):
        for model in models:
            resolve_model(model)  # raises for unknown models / directories without config.json
    return _Axes(backends, models, precisions, batch_sizes, workload_names, devices, pool)


def _expand(axes: _Axes, workloads: dict, raw_options: dict) -> list[Cell]:
    """Return every cell of the axes times the option combinations.

    [options]: key = value or list (a list is an axis); [options.BACKEND] for one backend only.
    """
    common = {k: v for k, v in raw_options.items() if not isinstance(v, dict)}
    per_backend = {k: v for k, v in raw_options.items() if isinstance(v, dict)}
    for b in per_backend:
        if b not in axes.backends:
            raise BenchInputError(f"[options.{b}] names a backend not in this matrix; backends are {choices(axes.backends)}")

    def option_combos(backend: str) -> list[dict]:
        given = {**common, **per_backend.get(backend, {})}
        keys = sorted(given)
        return [backend_config(backend).normalize_options(dict(zip(keys, values, strict=True)))
                for values in itertools.product(*(_as_list(given[k]) for k in keys))]

    cells: list[Cell] = []
    for backend, model, precision, bs, wname, dev in itertools.product(
        axes.backends, axes.models, axes.precisions, axes.batch_sizes, axes.workload_names, axes.devices
    ):
        for opts in option_combos(backend):
            cells.append(Cell(backend, model, precision, bs, workloads[wname], dev, tuple(sorted(opts.items()))))
    return cells


def _included(data: dict, axes: _Axes, workload_defs: dict, raw_options: dict, check_installed: bool) -> list[Cell]:
    """Return the cells the [[include]] rules add, each rule a sub-matrix of the axes it leaves unnamed."""
    cells: list[Cell] = []
    for i, rule in enumerate(_rules(data.get("include", []), "include")):
        # [options.<backend>] tables of backends the rule leaves out do not apply to its cells, and
        # the rule's own option values win over those tables' (as over the common ones).
        rule_backends = _as_list(rule.get("backend", axes.backends))
        rule_options = {k: v for k, v in rule.items() if k not in RULE_KEYS}
        options = {k: {kk: vv for kk, vv in v.items() if kk not in rule_options} if isinstance(v, dict) else v
                   for k, v in raw_options.items() if not isinstance(v, dict) or k in rule_backends}
        sub = {
            "backends": rule.get("backend", axes.backends),
            "models": rule.get("model", axes.models),
            "precisions": rule.get("precision", axes.precisions),
            "max_batch_sizes": rule.get("max_batch_size", axes.batch_sizes),
            "workloads": rule.get("workload", axes.workload_names),
            "device": rule.get("device", axes.devices),
            "workload": workload_defs,
            "options": {**options, **rule_options},
        }
        try:
            cells.extend(parse_matrix(sub, check_installed=check_installed).cells)
        except BenchInputError as exc:
            raise BenchInputError(f"include rule #{i + 1}: {exc}") from None
    return cells


def _settings_of(data: dict, pool: tuple, cells: list[Cell]) -> RunSettings:
    """Return the matrix's run settings, checked against each other and the cells."""
    settings = RunSettings(
        trials=data.get("trials", RunSettings.trials),
        warmup=data.get("warmup", RunSettings.warmup),
        runs=data.get("runs", RunSettings.runs),
        timeout_s=data.get("timeout_s", RunSettings.timeout_s),
        build_timeout_s=data.get("build_timeout_s", RunSettings.build_timeout_s),
        gpu_memory_gb=data.get("gpu_memory_gb"),
        executor=data.get("executor", RunSettings.executor),
        ray_address=data.get("ray_address"),
        devices=pool,
        tuning_builds=data.get("tuning_builds", RunSettings.tuning_builds),
        engines=_engine_paths(data.get("engines", ())),
        cores=data.get("cores", RunSettings.cores),
        order=data.get("order", RunSettings.order),
    )
    check_placement(settings, cells)
    check_settings(settings)
    check_engine_settings(settings)
    return settings


def check_settings(settings: RunSettings, cells=()) -> None:
    """Raise BenchInputError naming the first run setting (a matrix key or its command-line override) that is out of
    range, or that the cells to run (bench.spec.narrow: those --only keeps) cannot take."""
    from bench.machine.cores import DEFAULT_POLICY, POLICIES

    if settings.order not in ORDERS:
        raise BenchInputError(f"order must be one of {', '.join(map(repr, ORDERS))}, got {settings.order!r}: 'cells' "
                              "measures each cell's trials in turn, 'interleaved' one trial of each cell of a process "
                              "a round")
    if settings.cores not in POLICIES:
        raise BenchInputError(f"cores (--cores) must be one of {', '.join(map(repr, POLICIES))}, got {settings.cores!r}")
    on_cpu = sorted({c.label for c in cells if c.device == "cpu"})
    if settings.cores != DEFAULT_POLICY and on_cpu:
        raise BenchInputError(f"cores = {settings.cores!r} pins a GPU worker's trials to the host's fastest cores, but "
                              f"{', '.join(on_cpu[:3])}{' ...' if len(on_cpu) > 3 else ''} compute on the CPU, where "
                              "fewer cores would be a different machine: leave `cores` (--cores) at 'scheduled' for them, or run them in "
                              "a matrix of their own")
    if settings.gpu_memory_gb is not None:
        check_number(settings.gpu_memory_gb, "gpu_memory_gb (--gpu-memory-gb)", above=0,
                     hint="the memory cap in GB (1 GB = 1e9 bytes)")
    check_number(settings.trials, "trials (--trials)", integer=True, minimum=1, maximum=10_000,
                 hint="measured passes per worker process")
    check_number(settings.runs, "runs (--runs)", integer=True, minimum=1, maximum=1_000,
                 hint="fresh worker processes per cell")
    check_number(settings.warmup, "warmup", integer=True, minimum=0, maximum=10_000, hint="unmeasured passes per process")
    for key in ("timeout_s", "build_timeout_s"):
        check_number(getattr(settings, key), key, above=0, hint="a positive number of seconds")


def _engine_paths(value) -> tuple[str, ...]:
    """Return the matrix's `engines` (a path or a list of paths) as a tuple of strings."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise BenchInputError(f"engines must be a path (an artifact .tar or a folder of them) or a list of paths, got {value!r}")


def check_engine_settings(settings: RunSettings) -> None:
    """Refuse tuning builds that are not a positive integer, and tuning builds combined with artifacts to load."""
    k = settings.tuning_builds
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise BenchInputError(f"tuning_builds must be a positive integer (cold builds per cell), got {k!r}")
    if k > 1 and settings.engines:
        raise BenchInputError("tuning_builds > 1 builds each cell cold, engines loads a built artifact: give one of "
                              "them (--tuning-builds or --engines)")


def _rules(rules: Any, what: str) -> list[dict]:
    if isinstance(rules, dict):
        rules = [rules]
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise BenchInputError(f"{what} must be a list of tables ([[{what}]])")
    return rules


def _matches(cell: Cell, rule: dict) -> bool:
    values = {
        "backend": cell.backend, "model": cell.model, "precision": cell.precision,
        "max_batch_size": cell.max_batch_size, "workload": cell.workload.name, "device": cell.device,
    }
    opts = cell.options_dict
    for key, want in rule.items():
        have = values[key] if key in values else opts.get(key, _MISSING)
        if have is _MISSING:
            raise BenchInputError(
                f"exclude rule key {key!r} is neither an axis ({choices(RULE_KEYS)}) nor an option of backend {cell.backend!r}"
            )
        if have not in _as_list(want):
            return False
    return True
