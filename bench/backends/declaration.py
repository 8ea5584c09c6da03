"""What a backend declares, apart from its runtime: options, precisions, flags and validation.

The spec stage reads these (through bench.backends.registry) to validate a matrix and to
compute cell ids and build keys, without importing any backend's runtime or heavy library,
as optimum-benchmark keeps a backend's config apart from its implementation. Each backend's
config lives in bench/backends/<name>/config.py; its runtime class derives from that config
and from bench.backends.base.Backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bench.checks import check_number
from bench.errors import BenchInputError, choices


@dataclass(frozen=True)
class Requirement:
    """A package a cell needs installed to run; listing and planning a matrix need none of them."""

    package: str  # the import name, e.g. "torchao" (looked up with find_spec: never imported here)
    why: str  # what in the cell needs it, e.g. "precision 'int4wo'"
    message: str  # the error when it is missing: what needs it and how to install it

    def installed(self) -> bool:
        from importlib import util

        return util.find_spec(self.package) is not None


@dataclass(frozen=True)
class Option:
    """One backend option: its default and the values allowed (None: any value of `kind`)."""

    default: Any
    allowed: tuple | None = None
    kind: type | tuple = object
    in_build_key: bool = True  # does it change the built artifact (engine, compiled graph)?
    help: str = ""
    # Added after results were stored: left out of cell ids and build keys while at its default,
    # so every earlier result keeps its id (bench compare, resume and asv history still match).
    keeps_ids_at_default: bool = False
    # Numbers: the range allowed (inclusive; None: unbounded). NaN is never allowed, infinity only where declared.
    minimum: float | None = None
    maximum: float | None = None
    infinite_ok: bool = False

    def check(self, name: str, value: Any, backend: str) -> None:
        """Raise BenchInputError naming the option, the value and what it must be, unless the value is valid."""
        if self.allowed is not None and value not in self.allowed:
            raise BenchInputError(
                f"option {name}={value!r} is not valid for backend {backend!r}: valid values are "
                f"{choices(self.allowed)}"
            )
        if self.allowed is not None:
            return
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        numeric = int in kinds or float in kinds
        if not isinstance(value, self.kind) or (numeric and isinstance(value, bool) and bool not in kinds):
            raise BenchInputError(f"option {name}={value!r} for backend {backend!r} must be {_kind_text(kinds)}")
        if numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            check_number(value, f"option {name} for backend {backend!r}", integer=float not in kinds, minimum=self.minimum,
                         maximum=self.maximum, infinite_ok=self.infinite_ok, hint=self.help)


def _kind_text(kinds: tuple) -> str:
    """Return what values of these types are called in a message: 'an integer', 'a number or a string'."""
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if int in kinds and float in kinds:
        kinds = tuple(k for k in kinds if k is not int)
    return " or ".join(names.get(k, getattr(k, "__name__", str(k))) for k in kinds)


# A backend that can split one model over several GPUs declares this option (hf, trtllm, fake).
# Added after results were stored: at its default (1) it is left out of cell ids and build keys.
TENSOR_PARALLEL = Option(
    1, kind=int, keeps_ids_at_default=True, minimum=1,
    help="GPUs one model is split over (tensor parallelism); the cell asks its executor for that many GPUs",
)


def tensor_parallel_size(options) -> int:
    """Return the tensor-parallel size of a cell's or build key's options (a dict or pairs; 1 when absent)."""
    return int(dict(options).get("tensor_parallel_size", 1))


def check_tensor_parallel(cell, kv_heads_too: bool) -> None:
    """Raise BenchInputError if the cell's tensor_parallel_size is not a positive integer or does not divide its heads.

    Each rank holds num_attention_heads / tp query heads; where the backend splits the KV heads
    too (transformers' tp_plan shards k_proj/v_proj), num_key_value_heads / tp as well.
    """
    tp = dict(cell.options).get("tensor_parallel_size", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise BenchInputError(f"option tensor_parallel_size must be a positive integer (GPUs per model), got {tp!r}")
    if tp == 1:
        return
    from bench.models import resolve_model

    config = resolve_model(cell.model).config
    heads = config.get("num_attention_heads")
    kv = config.get("num_key_value_heads") or heads
    for name, n in (("num_attention_heads", heads), *((("num_key_value_heads", kv),) if kv_heads_too else ())):
        if n and n % tp:
            fits = [d for d in range(1, n + 1) if n % d == 0 and (not kv_heads_too or not kv or kv % d == 0)]
            raise BenchInputError(
                f"tensor_parallel_size={tp} does not divide model {cell.model!r}'s {name}={n}: each GPU must hold "
                f"a whole number of heads; use one of {', '.join(map(str, fits))}"
            )


class BackendConfig:
    """What one backend runs and refuses: its name, precisions, options and flags, checked before any run."""

    name: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]]
    options: ClassVar[dict[str, Option]] = {}
    # False for backends that measure a model served elsewhere (openai): `model` is then only a
    # label, not a named config or local directory the harness must find.
    local_model: ClassVar[bool] = True
    # Engines that bake max_batch_size into the artifact (TensorRT-LLM) put it in the build key.
    batch_size_in_build_key: ClassVar[bool] = False
    # Serving backends count failed requests and length mismatches in the metrics and keep the
    # pass `ok` while at least one request completed (a server under load drops some requests).
    tolerate_request_errors: ClassVar[bool] = False
    # Reads the device's copy bandwidth (bench.backends.speed_of_light, speed-of-light): on CUDA devices the worker
    # measures it before applying the memory cap, since the probe allocates GiBs.
    measures_copy_bandwidth: ClassVar[bool] = False
    # Serving backends (openai) time requests by their arrivals and limit those in flight. Offline
    # backends hand the whole workload over at once, in batches: they refuse a workload that sets
    # arrival pacing, which they would ignore while it still changed the cell id.
    paces_requests: ClassVar[bool] = False
    # Tensor parallelism: True when a tp=N cell's worker runs as N processes under torchrun, one
    # per GPU (hf: transformers' tp_plan); False when the backend starts its ranks itself (trtllm).
    launches_ranks: ClassVar[bool] = False
    # The worker computes on the cell's device (hf, trtllm): a CUDA cell is refused before any work on a
    # machine without CUDA. False where the device is a label (fake: a simulation; openai: the server's).
    computes_on_device: ClassVar[bool] = True

    @classmethod
    def normalize_options(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Return the full option dict (defaults filled in); BenchInputError on unknown keys."""
        unknown = set(given) - set(cls.options)
        if unknown:
            name = sorted(unknown)[0]
            raise BenchInputError(
                f"unknown option {name!r} for backend {cls.name!r}: valid options are "
                f"{choices(cls.options) if cls.options else 'none'}"
            )
        full = {k: opt.default for k, opt in cls.options.items()}
        full.update(given)
        for k, v in full.items():
            cls.options[k].check(k, v, cls.name)
        return full

    @classmethod
    def validate(cls, cell) -> None:
        """Raise BenchInputError if this backend cannot run `cell` (checked before any run)."""
        if cell.precision not in cls.precisions:
            raise BenchInputError(
                f"precision {cell.precision!r} is not supported by backend {cls.name!r}: valid "
                f"precisions are {choices(cls.precisions)}"
            )
        if not cls.paces_requests:
            wl = cell.workload
            online = [f"{k} = {v!r}" for k, v, default in (("request_rate", wl.request_rate, None),
                                                          ("burstiness", wl.burstiness, 1.0),
                                                          ("max_concurrency", wl.max_concurrency, None)) if v != default]
            if online:
                raise BenchInputError(
                    f"workload {wl.name!r} sets {', '.join(online)}, but backend {cls.name!r} replays requests offline "
                    "(all due at once, in batches of max_batch_size) and would ignore it: remove it from the workload; "
                    "arrival rates and concurrency apply to the 'openai' serving backend"
                )

    @classmethod
    def requirements(cls, cell) -> list[Requirement]:
        """Return the optional packages `cell` needs installed to run (checked before a run, not by a dry run)."""
        return []
