"""Record types: the run context, one frozen type per kind of stored line, and the one constructor.

Every line a store holds is a `Measurement` (a measured pass of a cell), an `OomProbe` (one
probe of the OOM boundary search), a `Profile` (a kernel table of a short window), a
`CapacityProbe` (one measured pass of an SLO capacity search's probe) or an `Accuracy` (a cell's
parity against its baseline, `bench accuracy`). Each
carries the `RunContext` of the invocation that wrote it, so a reader can tell which records
belong together: a table row aggregates one context, never a mix it did not ask for.

Writers call `new_context` once per invocation and `new_record` for each outcome; readers get
typed records from `parse` (through bench.results.query.load). Schema version 1 lines (stored
before run contexts existed) are read into the same types; their context is reconstructed by
the loader (docs/guide/results.md says how). docs/guide/results.md's field tables are generated from the
field docs below (`schema_markdown`), and a test checks that they agree.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from bench import SCHEMA_VERSION
from bench.checks import is_finite_number
from bench.errors import BenchInputError
from bench.spec.cells import cell_label

KINDS = ("measurement", "oom-probe", "profile", "capacity-probe", "accuracy")
STATUSES = ("ok", "oom", "error", "timeout")
# A cell whose latest run ended in one of these is not run again unless asked (--redo).
FINAL_FAILURES = ("oom",)


def _doc(text: str, default: Any = MISSING) -> Any:
    if default is MISSING:
        return field(metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


def utc_minute(t: float) -> str:
    """Return a Unix time as "YYYY-MM-DD HH:MM" (UTC), or "undated" for a time no calendar date shows (a store is
    untrusted input: 6.78e16 s made time.gmtime raise OverflowError, or OSError EOVERFLOW)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))
    except (OverflowError, OSError, ValueError):
        return "undated"


@dataclass(frozen=True)
class RunContext:
    """Where a record comes from: the invocation, the code, the environment and the settings."""

    run_id: str = _doc("one id per invocation of `bench run`, `bench oom`, `bench profile` (or an asv measurement); "
                       "a table row aggregates the records of one run_id")
    command: str = _doc("what wrote it: run, oom, profile, asv, synthetic, legacy (read from a schema-1 store)")
    matrix: str = _doc("the matrix name", "")
    baseline: dict | None = _doc("the matrix's speedup baseline (a partial cell); `bench report` uses it", None)
    commit: str | None = _doc("the project's own git commit (None: unknown, e.g. a tree without its .git)", None)
    dirty: bool | None = _doc("whether the project's tree had uncommitted changes", None)
    env_digest: str | None = _doc("digest of the environment keys that decide comparability "
                                  "(bench.machine.environment.COMPARABILITY_KEYS); records of different digests are never pooled",
                                  None)
    gpu_memory_gb: float | None = _doc("the memory cap the cell ran under (None: the whole device)", None)
    workload_hash: str | None = _doc("content hash of the frozen workload the cell replayed", None)
    runs: int = _doc("worker processes per cell the invocation asked for (pyperf's runs)", 1)
    trials: int = _doc("measured passes per process", 1)
    warmup: int = _doc("unmeasured warm-up passes per process (the hf backend's pass on a GPU runs every batch the "
                       "measured pass runs: docs/guide/hf-backend.md)", 0)
    tuning_builds: int = _doc("cold builds per cell, each in its own engine folder (`--tuning-builds`): `runs` "
                              "processes each; the table's tuning spread is the spread between them", 1)
    invocation: str | None = _doc("digest of the invocation's identity: its matrix, cells and run settings "
                                  "(bench.runner.matrix.invocation_digest); `bench run` resumes an unfinished context "
                                  "only for the same invocation", None)
    started_at: float | None = _doc("Unix time the invocation started (orders runs: the latest is shown)", None)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RunContext:
        known = {f.name for f in fields(cls)}
        out = {k: v for k, v in data.items() if k in known}
        for k in ("run_id", "command"):  # a store is untrusted: the ids records are grouped and matched by are text
            if k in out and not isinstance(out[k], str):
                out[k] = str(out[k])
        return cls(**out)

    @property
    def label(self) -> str:
        """Return a short human label: date, commit (and dirty), e.g. '2026-12-01 14:02 ab12cd3+dirty'."""
        when = utc_minute(self.started_at) if self.started_at else "undated"
        commit = (self.commit or "commit?")[:7] + ("+dirty" if self.dirty else "")
        return f"{when} {commit}"


def telemetry_rows(telemetry) -> list:
    """Return a pass's stored telemetry as one dict per sample, from either stored layout."""
    if isinstance(telemetry, dict):
        n = len(telemetry.get("t_s") or ())
        return [{k: (v[i] if isinstance(v, list) and i < len(v) else None) for k, v in telemetry.items()} for i in range(n)]
    return list(telemetry or ())


@dataclass(frozen=True)
class Record:
    """One stored line. Use the subclass of its kind; `new_record` and `parse` make them."""

    KIND: ClassVar[str] = ""

    cell_id: str = _doc("16 hex digits: SHA-256 of the cell's canonical JSON (identity; unchanged since schema 1)")
    cell: dict = _doc("backend, model, precision, max_batch_size, device, options (all, defaults filled), workload spec")
    context: RunContext = _doc("the run context (table below)")
    run: int = _doc("which worker process of the context measured it (0-based; pyperf's run)", 0)
    trial: int = _doc("which measured pass inside that process (0-based)", 0)
    status: str = _doc("ok, oom, error, timeout", "ok")
    metrics: dict | None = _doc("the pass's metrics (below); null for failures", None)
    extra: dict = _doc("backend figures: parameters, weight bytes, peak memory, telemetry, warm-up costs "
                       "(`warmup`; hf: `unwarmed_batches`, the pass's batches at a shape its warm-up did not run); "
                       "`kernels`: "
                       "where the pass's kernels came from (`source`: built here or artifact, `artifact`: its digest, "
                       "`artifact_tuned_digest`, `tuning_build`, `refused_because`); probes: `probe`; profiles: "
                       "`kernel_table`, `trace`, `profile`; capacity probes: `capacity`; accuracy: `accuracy` "
                       "(baseline, settings, parity, floor, generation, determinism, verdict)", None)
    samples: list | None = _doc("per request: id, input and output tokens, TTFT and E2E in ms, error", None)
    error: str | None = _doc("the failure's message and traceback tail", None)
    workload: dict = _doc("name, content_hash, num_requests, tokenizer, source and SHA-256, token totals", None)
    build: dict = _doc("build key hash, build and load seconds, compile cache state", None)
    environment: dict = _doc("the worker's environment: host, platform, python, cpu, torch, cuda, cudnn (the cuDNN torch "
                             "loads, where it has one), transformers, "
                             "tensorrt_llm, torchao, gemlite, GPU name/count/driver/memory/compute capability/UUID "
                             "(`gpu_uuid`: which board; `gpu_index`: NVML's index of it), `cuda_visible_devices`, "
                             "`tensor_parallel_gpus` (a tensor-parallel cell's GPUs), `nvml_error` (only when NVML "
                             "failed on a machine that has it), commit and dirty as the worker saw them, `pid` (which "
                             "worker process), `placement` (where the executor ran it: docs/guide/scale-out.md)", None)
    started_at: float | None = _doc("Unix time the measured pass started", None)
    ended_at: float | None = _doc("Unix time it ended", None)
    schema_version: int = _doc("layout version of the line (2; schema-1 lines are read too)", SCHEMA_VERSION)
    store: str | None = field(default=None, compare=False, metadata={"stored": False})

    def __post_init__(self):
        for name in ("extra", "workload", "build", "environment"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, {})

    @property
    def kind(self) -> str:
        return self.KIND

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def gpu_memory_gb(self) -> float | None:
        return self.context.gpu_memory_gb

    @property
    def process_key(self) -> tuple[str, int]:
        """Return (run_id, run): the worker process this record's trial ran in."""
        return self.context.run_id, self.run

    @property
    def label(self) -> str:
        c = self.cell
        return cell_label(c.get("backend"), c.get("precision"), c.get("max_batch_size"), (c.get("workload") or {}).get("name"))

    @property
    def busy_reasons(self) -> tuple[str, ...]:
        """Return why the pass's machine was busy (extra.host_load.busy, bench.machine.host_load); () when it was not."""
        return tuple((self.extra.get("host_load") or {}).get("busy") or ())

    @property
    def notes(self) -> tuple[str, ...]:
        """Return what the backend found out about the pass (extra.notes: a server that refused length control, ...),
        and, for a pass that ran from an engine artifact, which one and whether its process kept the artifact's tuned
        kernels (a figure next to a speedup says where its kernels came from)."""
        notes = tuple(self.extra.get("notes") or ())
        if self.kernels.get("source") != "artifact":
            return notes
        c = self.cell or {}
        label = cell_label(c.get("backend"), c.get("precision"), c.get("max_batch_size"))
        artifact, theirs = str(self.kernels.get("artifact"))[:12], self.kernels.get("artifact_tuned_digest")
        retuned = (self.extra.get("inductor") or {}).get("tuned_in_process") or 0
        if retuned or (theirs and self.tuned_digest and theirs != self.tuned_digest):
            again = f"tuned {retuned} kernel(s) again" if retuned else "ran other tuned kernels"
            return notes + (f"{label} ran from engine artifact {artifact}, but its process {again} (tuned digest "
                            f"{self.tuned_digest} vs the artifact's {theirs}): the figure is that process's tuning "
                            "draw, not the artifact's (docs/guide/hf-backend.md, \"Engines as artifacts\")",)
        made_on = self.kernels.get("made_on") or {}
        where = made_on.get("gpu_uuid") or made_on.get("host") or "another process"
        kept = (self.extra.get("inductor") or {}).get("kept_in_process") or 0
        return notes + (f"{label} ran the kernels of engine artifact {artifact}, made on {where}"
                        + (f" (tuned digest {theirs}, kept)" if theirs else "")
                        + (f"; {kept} of them Inductor would have tuned again ran their stored winners "
                           "(bench/backends/hf/kept_winners.py)" if kept else ""),)

    @property
    def telemetry(self) -> list[dict]:
        """Return the pass's telemetry, one dict per sample (extra.telemetry: the Sampler stores one list per
        field; older and synthetic records a list of samples)."""
        return telemetry_rows(self.extra.get("telemetry"))

    @property
    def tuned_digest(self) -> str | None:
        """Return the digest of the tuned kernel configs the pass ran (hf: Inductor's; fake: simulated), or None."""
        inductor = (self.extra.get("inductor") or {}).get("tuned") or {}
        return inductor.get("digest") or (self.extra.get("tuned") or {}).get("digest")

    @property
    def kernels(self) -> dict:
        """Return where the pass's kernels came from: {"source": "built here" | "artifact", "artifact": digest, ...}."""
        return self.extra.get("kernels") or {}

    @property
    def tuning_build(self) -> int | None:
        """Return which cold build (`--tuning-builds`) of its run context the record's process belongs to."""
        return self.kernels.get("tuning_build")

    def metric(self, name: str) -> float | None:
        """Return a numeric metric of the record (None when absent, not a number or not finite: the metrics are made
        finite when read, but `extra`'s figures and host probe are as stored, where an int of 400 digits made float()
        raise OverflowError)."""
        v = (self.metrics or {}).get(name)
        if v is None:
            v = self.extra.get(name) if name in EXTRA_METRICS else None
        if v is None and name == HOST_PROBE and isinstance(self.extra.get("host_load"), dict):
            v = self.extra["host_load"].get(HOST_PROBE)
        return float(v) if is_finite_number(v) else None

    def to_json(self) -> dict:
        """Return the stored line (without `store`, which says where it was read from)."""
        out = {"schema_version": SCHEMA_VERSION, "kind": self.KIND}
        for f in fields(self):
            if f.metadata.get("stored", True) and f.name != "schema_version":
                value = getattr(self, f.name)
                out[f.name] = value.to_json() if isinstance(value, RunContext) else value
        return out


# Figures some writers keep in `extra` rather than `metrics` (`unwarmed_batches`: the hf backend's batches of the pass
# at a shape its warm-up did not run, bench/backends/hf/backend.py; the report flags a GPU row where it is above 0).
EXTRA_METRICS = ("tokens_per_joule", "sol_pct", "unwarmed_batches")
# The host's speed in the pass's process (extra.host_load.host_probe_ms, bench.machine.host_load), read as a metric.
HOST_PROBE = "host_probe_ms"


@dataclass(frozen=True)
class Measurement(Record):
    """A measured pass of a cell over its whole workload."""

    KIND: ClassVar[str] = "measurement"


@dataclass(frozen=True)
class OomProbe(Record):
    """One probe of the OOM boundary search: one full batch of worst-case requests (docs/guide/oom.md)."""

    KIND: ClassVar[str] = "oom-probe"

    @property
    def target(self) -> dict:
        """Return the worst case the probe stands for: max_input_len, max_output_len, decode_steps, batch_size."""
        return self.extra.get("probe") or {}


def checked_step_ms(profile: dict, where: str) -> float | None:
    """Return a profile's unprofiled decode-step time in ms (extra.profile.step_ms; None where its window measured
    none); BenchInputError naming `where` and the fix for a value that is not a positive finite number."""
    step_ms = profile.get("step_ms")
    if step_ms is None:
        return None
    if not is_finite_number(step_ms) or step_ms <= 0:
        raise BenchInputError(f"{where}: step_ms {step_ms!r} is not a positive number of milliseconds: re-run "
                              "`bench profile`")
    return float(step_ms)


@dataclass(frozen=True)
class Profile(Record):
    """A kernel table (and trace) of a short window of a cell (`bench profile`'s session, or a timed worker of `bench run
    --profile-window` after its trials)."""

    KIND: ClassVar[str] = "profile"

    @property
    def tool(self) -> str | None:
        return self.profile.get("tool") or self.extra.get("tool")

    @property
    def profile(self) -> dict:
        """Return extra.profile: the session's figures (window, steps, nsys export, sqlite path); {} where a store
        holds something else there."""
        value = self.extra.get("profile")
        return value if isinstance(value, dict) else {}

    @property
    def kernel_table(self) -> str | None:
        return self.extra.get("kernel_table")

    @property
    def step_ms(self) -> float | None:
        """Return the unprofiled decode-step time in ms (checked_step_ms)."""
        return checked_step_ms(self.profile, f"profile record {self.cell_id}")

    @property
    def from_timed_process(self) -> bool:
        """Return True for a window profiled by a timed worker after its trials (`bench run --profile-window`): its
        context and `run` are those of the measured process. False for a profiling session's (`bench profile`, and
        every record stored before the field existed)."""
        return self.profile.get("from") == TIMED_PROCESS

    @staticmethod
    def extra_of(window: dict, origin: str) -> dict:
        """Return a Profile record's `extra` from what a profile window returned (bench.execution.profile_window): the
        tool, the kernel table and trace named apart, the rest under `profile` (less the environment, the record's own),
        with where the window ran (`from`: PROFILING_SESSION or TIMED_PROCESS)."""
        rest = {k: v for k, v in window.items() if k not in ("kernel_table", "trace", "environment")}
        return {"tool": window["tool"], "kernel_table": window["kernel_table"], "trace": window.get("trace"),
                "profile": {**rest, "from": origin}}


# Where a profile window ran (Profile.extra["profile"]["from"]): a session process of its own, or the worker that timed
# the cell, after its trials (`bench run --profile-window`).
PROFILING_SESSION = "profiling session"
TIMED_PROCESS = "timed process"


@dataclass(frozen=True)
class CapacityProbe(Record):
    """One measured pass of a `bench capacity` probe: the cell at one load (rate, concurrency or batch size)."""

    KIND: ClassVar[str] = "capacity-probe"

    @property
    def target(self) -> dict:
        """Return what the probe stands for: axis, value, slo (metric -> bound in ms)."""
        return self.extra.get("capacity") or {}


class Accuracy(Record):
    """A cell's accuracy parity against its baseline cell on the same prompts (`bench accuracy`, docs/guide/accuracy.md)."""

    KIND: ClassVar[str] = "accuracy"

    @property
    def accuracy(self) -> dict:
        """Return extra.accuracy: baseline, settings, reference kind, parity, floor, generation, determinism, verdict;
        {} where a store holds something else there."""
        value = self.extra.get("accuracy")
        return value if isinstance(value, dict) else {}

    @property
    def verdict(self) -> str | None:
        return (self.accuracy.get("verdict") or {}).get("verdict")


TYPES = {t.KIND: t for t in (Measurement, OomProbe, Profile, CapacityProbe, Accuracy)}


def new_context(command: str, *, matrix: str = "", baseline: dict | None = None, gpu_memory_gb: float | None = None,
                runs: int = 1, trials: int = 1, warmup: int = 0, run_id: str | None = None,
                tuning_builds: int = 1) -> RunContext:
    """Return the context of a new invocation: a fresh run id, the project's commit, the settings."""
    from bench.machine.environment import project_commit

    now = time.time()
    code = project_commit()
    return RunContext(
        run_id=run_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + "-" + secrets.token_hex(3),
        command=command, matrix=matrix, baseline=dict(baseline) if baseline else None,
        commit=code.get("commit"), dirty=code.get("dirty"), gpu_memory_gb=gpu_memory_gb,
        runs=runs, trials=trials, warmup=warmup, started_at=now, tuning_builds=tuning_builds,
    )


def environment_digest(environment: dict) -> str | None:
    """Return the digest of the comparability keys of an environment (None for an empty one)."""
    from bench.machine.environment import COMPARABILITY_KEYS
    from bench.spec.cells import short_hash

    if not environment:
        return None
    return short_hash({k: environment.get(k) for k in COMPARABILITY_KEYS})


def finite_metrics(metrics: dict | None) -> tuple[dict | None, list[str]]:
    """Return (metrics with NaN, ±inf and ints too large for a float replaced by None, the names replaced).

    The store holds JSON, which has no NaN or infinity (a zero-length pass divides by zero): a
    writer stores such a figure as missing and says which, and a reader of an older store sees
    them as missing rather than failing on them (an int no float holds stopped the report's frame).
    """
    if not metrics:
        return metrics, []
    bad = sorted(k for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and not is_finite_number(v))
    if not bad:
        return metrics, []
    return {k: (None if k in bad else v) for k, v in metrics.items()}, bad


def new_record(kind: str, cell, outcome: dict, *, context: RunContext, run: int = 0, workload: dict | None = None,
               build: dict | None = None, environment: dict | None = None) -> Record:
    """Return the typed record of one outcome. The one constructor every writer uses.

    cell: a bench.spec.cells.Cell (or its dict); outcome: the worker's result event (trial, status,
    metrics, extra, samples, error, started_at, ended_at); workload: the workload's summary.
    The context gets the per-record fields: the environment's digest and the workload's hash.
    """
    if kind not in TYPES:
        raise ValueError(f"record kind must be one of {KINDS}, got {kind!r}")
    status = outcome.get("status")
    if status not in STATUSES:
        raise ValueError(f"record status must be one of {STATUSES}, got {status!r}")
    cell_dict = cell if isinstance(cell, dict) else cell.to_dict()
    cell_id = outcome.get("cell_id") if isinstance(cell, dict) else cell.cell_id
    environment = dict(environment or {})
    workload = dict(workload or {})
    ctx = replace(context, env_digest=environment_digest(environment),
                  workload_hash=workload.get("content_hash", context.workload_hash))
    metrics, non_finite = finite_metrics(outcome.get("metrics"))
    extra = dict(outcome.get("extra") or {})
    if non_finite:
        extra["non_finite_metrics"] = non_finite
    return TYPES[kind](
        cell_id=cell_id, cell=cell_dict, context=ctx, run=run, trial=outcome.get("trial", 0), status=status,
        metrics=metrics, extra=extra, samples=outcome.get("samples"),
        error=outcome.get("error"), workload=workload, build=dict(build or {}), environment=environment,
        started_at=outcome.get("started_at"), ended_at=outcome.get("ended_at", time.time()),
    )


def parse(raw: dict, store: str | None = None, legacy_run: tuple[str, float | None] | None = None) -> Record:
    """Return the typed record of a stored line (schema 1 or 2); BenchInputError if it is not one.

    legacy_run: (run id, start time) the loader reconstructed for a schema-1 line (query.load).
    """
    if not isinstance(raw, dict) or "cell_id" not in raw:
        raise BenchInputError("not a result record (no cell_id)")
    version = raw.get("schema_version")
    if version == 1:
        kind, context = _legacy(raw, *(legacy_run or (None, None)))
    else:
        kind = raw.get("kind", "measurement")
        ctx = raw.get("context")
        context = RunContext.from_json(ctx if isinstance(ctx, dict) and "run_id" in ctx and "command" in ctx
                                       else {"run_id": "unknown", "command": "unknown"})
    cls = TYPES.get(kind)
    if cls is None:
        raise BenchInputError(f"unknown record kind {kind!r}; this harness reads {KINDS}")
    env = raw.get("environment") if isinstance(raw.get("environment"), dict) else {}
    if context.env_digest is None and env:
        context = replace(context, env_digest=environment_digest(env))
    trial = raw.get("trial", 0)
    metrics, non_finite = finite_metrics(raw.get("metrics") if isinstance(raw.get("metrics"), dict) else None)
    extra = raw.get("extra") if isinstance(raw.get("extra"), dict) else {}
    if non_finite:
        extra = {**extra, "non_finite_metrics": non_finite}
    return cls(
        cell_id=str(raw["cell_id"]), cell=raw.get("cell") if isinstance(raw.get("cell"), dict) else {}, context=context,
        run=raw.get("run") if isinstance(raw.get("run"), int) else 0,
        trial=trial if isinstance(trial, int) else 0, status=raw.get("status", "error"), metrics=metrics,
        extra=extra, samples=raw.get("samples"), error=raw.get("error"),
        workload=raw.get("workload") if isinstance(raw.get("workload"), dict) else {},
        build=raw.get("build") if isinstance(raw.get("build"), dict) else {}, environment=env,
        started_at=raw.get("started_at"), ended_at=raw.get("ended_at"), schema_version=version, store=store,
    )


def legacy_kind(raw: dict) -> str:
    """Return the kind of a schema-1 line: profiles said "kind", probes said settings.kind."""
    if raw.get("kind") == "profile":
        return "profile"
    return "oom-probe" if (raw.get("settings") or {}).get("kind") == "oom-probe" else "measurement"


def _legacy(raw: dict, run_id: str | None, started_at: float | None) -> tuple[str, RunContext]:
    settings = raw.get("settings") or {}
    env = raw.get("environment") or {}
    kind = legacy_kind(raw)
    if kind == "profile" and "tool" in settings:
        raw["extra"] = {**(raw.get("extra") or {}), "tool": settings["tool"]}
    context = RunContext(
        run_id=run_id or "legacy", command="legacy", matrix=settings.get("matrix", ""), baseline=None,
        commit=env.get("commit"), dirty=env.get("dirty"), gpu_memory_gb=settings.get("gpu_memory_gb"),
        workload_hash=(raw.get("workload") or {}).get("content_hash"), runs=1,
        trials=settings.get("trials", 1) or 1, warmup=settings.get("warmup", 0) or 0,
        started_at=started_at if started_at is not None else raw.get("started_at") or raw.get("ended_at"),
    )
    return kind, context


# ---- the schema, as documentation --------------------------------------------------------------


def schema_markdown() -> str:
    """Return the Markdown field tables of Record and RunContext (docs/guide/results.md holds this text)."""
    def table(cls) -> list[str]:
        rows = ["| key | meaning |", "|---|---|"]
        for f in fields(cls):
            if f.metadata.get("stored", True):
                rows.append(f"| `{f.name}` | {f.metadata['doc']} |")
        return rows

    lines = ["Every line: `schema_version`, `kind` (" + ", ".join(f"`{k}`" for k in KINDS) + ") and", ""]
    lines += table(Record) + ["", "`context` (the run context):", ""] + table(RunContext)
    return "\n".join(lines) + "\n"


def varying_keys(options: list[dict]) -> list[str]:
    """Return the option keys whose value differs between these option dicts, sorted. A key only some
    of them have (another backend's option) varies only if those that have it disagree."""
    keys = sorted(set().union(*options)) if options else []
    return [k for k in keys if len({json.dumps(o[k], sort_keys=True) for o in options if k in o}) > 1]


def distinct_labels(cells: dict) -> dict:
    """Return {key: label} for {key: Measurement}: the short label, plus the options that tell apart
    cells whose short labels are equal (two bs1 rows that differ in cache or compile)."""
    groups: dict[str, list] = {}
    for key, rec in cells.items():
        groups.setdefault(rec.label, []).append(key)
    out = {}
    for label, keys in groups.items():
        opts = {k: cells[k].cell.get("options") or {} for k in keys}
        differ = varying_keys(list(opts.values()))
        for k in keys:
            extra = ",".join(f"{n}={opts[k][n]}" for n in differ if n in opts[k])
            out[k] = f"{label} [{extra}]" if extra else label
    return out
