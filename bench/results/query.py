"""The one query API over stored results: load typed records, choose which records make a row.

Every reader (tables, dashboard, `bench compare`, the run driver's resume plan, the OOM frontier,
the asv suite, scripts) goes through this module. It owns reading stores: which paths are stores
(`check_store_path`, `expand_stores`: folders and globs), loading them as typed records (`load`,
`load_cells`; `.jsonl.gz` stores read as they are, through bench.results.jsonl.read_lines, the one
reader of stored lines), and when to read them as columns instead (`prefer_table`, `table`).

It also re-exports, as its public API, what its family modules define (each name lives there):

- bench.results.selection: the rule of which records make a row (docs/guide/results.md, "Which
  records make a row"): `select`, `Selection`, `CellRuns`, `choose`, `counted_records`,
  `left_out_runs`, `partial_runs_warning`, `selection_warnings`, `stored_baselines`;
- bench.results.table: the same rule over stores read as columns: `Table`, `TableSelection`,
  `select_table`.

The columnar companion (bench.results.columnar) is an implementation detail behind `table`.

Schema-1 stores carry no run ids: the loader starts a new reconstructed run context where the
commit, the matrix or the memory cap changes, or where a (cell, trial) repeats (a `--redo`).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from bench.errors import BenchInputError
from bench.results.jsonl import is_compressed, read_lines, refuse_compressed, store_name
from bench.results.records import (
    Accuracy,
    CapacityProbe,
    Measurement,
    OomProbe,
    Profile,
    Record,
    parse,
)
from bench.results.selection import (
    CellRuns,
    Selection,
    choose,
    counted_records,
    left_out_runs,
    partial_runs_warning,
    select,
    selection_warnings,
    stored_baselines,
)
from bench.results.table import Table, TableSelection, select_table

__all__ = [
    "TABLE_MIN_BYTES", "CellRuns", "Selection", "Table", "TableSelection", "accuracies", "capacity_probes",
    "check_store_path", "choose", "counted_records", "expand_stores", "latest_accuracy", "left_out_runs", "load",
    "load_cells", "load_stores", "measurements", "partial_runs_warning", "prefer_table", "probes", "profiles", "select",
    "select_table", "selection_warnings", "stored_baselines", "table", "with_commit",
]


def check_store_path(path: str | Path, *, must_exist: bool = True) -> Path:
    """Return the path of a result store; BenchInputError (exit 2) if it is a folder or unreadable."""
    from bench.files import check_name_length, check_output_file

    p = Path(path)
    check_name_length(p, "--store" if not must_exist else "result store")  # first: stat() of an over-long name fails
    if p.is_dir():
        stores = sorted(str(s) for s in p.glob("*.jsonl"))[:5]
        hint = f"; stores in it: {', '.join(stores)}" if stores else ""
        raise BenchInputError(f"result store {str(p)!r} is a folder, not a store: give a .jsonl file{hint}")
    if not must_exist:  # a store to write: its folder must take files, with space to spare
        refuse_compressed(p)
        check_output_file(p, "--store")
    if not p.exists():
        if must_exist:
            raise BenchInputError(f"result store {str(p)!r} does not exist: run `bench run --store {p}` first, or check the path")
        return p
    if not os.access(p, os.R_OK):
        raise BenchInputError(f"result store {str(p)!r} is not readable (permissions): fix them or copy the file")
    return p


def load(paths: Iterable[str | Path]) -> list[Record]:
    """Return the typed records of the given stores (.jsonl, or .jsonl.gz read as it is), in store order, each
    record once (load_stores); BenchInputError on a bad path."""
    return [r for recs in load_stores(paths) for r in recs]


def load_stores(paths: Iterable[str | Path]) -> list[list[Record]]:
    """Return the typed records of each store, in store order; BenchInputError on a bad path.

    One record, one count (bench.results.duplicates): a store named twice is read once, and a record whose key an
    earlier line holds (in this store or an earlier one) is left out, with one warning naming each such line (a
    conflicting duplicate, whose figures differ, says so; the first is kept)."""
    from bench.results.duplicates import distinct_stores, record_key, repeats_warning

    checked = distinct_stores([check_store_path(path) for path in paths])
    seen: dict[int, tuple[str, int, Record]] = {}
    repeats: list = []
    out: list[list[Record]] = []
    for p in checked:
        try:
            lines = list(read_lines(p))
        except OSError as exc:
            raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
        name = store_name(p)
        legacy = _legacy_runs([line.record for line in lines], p.name.removesuffix(".gz"))  # .gz: its plain twin's runs
        records = []
        for i, line in enumerate(lines):
            rec = _parse(p, line, name, legacy.get(i))
            key = record_key(rec)
            first = seen.get(key)
            if first is None:
                seen[key] = (str(p), line.number, rec)
                records.append(rec)
            else:
                repeats.append(_repeat(str(p), line.number, rec, first))
        odd = sum(1 for r in records if r.extra.get("non_finite_metrics"))
        if odd:
            warnings.warn(f"{p}: {odd} record(s) hold NaN or infinite metrics; those figures are treated as missing",
                          stacklevel=3)
        out.append(records)
    message = repeats_warning(repeats)
    if message:
        warnings.warn(message, stacklevel=3)
    return out


def _parse(path: Path, line, name: str, legacy_run=None) -> Record:
    """Return the typed record of a stored line; BenchInputError naming path:line when it is none this harness reads."""
    try:
        return parse(line.record, store=name, legacy_run=legacy_run)
    except BenchInputError as exc:  # a record kind this harness does not know
        raise BenchInputError(f"{path}:{line.number}: {exc}") from exc


def _repeat(store: str, line: int, rec: Record, first: tuple[str, int, Record]):
    """Return the duplicates.Repeat of a record whose key `first` (store, line, record) holds."""
    from bench.results.duplicates import Repeat, differences
    from bench.results.rows import record_row

    first_store, first_line, kept = first
    return Repeat(store, line, first_store, first_line, rec.context.run_id, rec.cell_id, rec.run, rec.trial,
                  differences(record_row(rec), record_row(kept)))


def load_cells(path: str | Path, cell_ids: set[str]) -> list[Record]:
    """Return the typed measurement-relevant records of the given cells in one store, without their per-request
    samples and telemetry: the run driver's resume plan, in memory proportional to the matrix's own records, not
    to the store (a year of nightly records in one store held 3.2 GB per 100,000 records as full typed records).

    Every line is still parsed once. A store holding schema-1 lines, whose runs are reconstructed across cells
    (_legacy_runs), is read whole and then filtered. A record whose key an earlier line holds counts once, as in
    load_stores."""
    from bench.results.duplicates import record_key, repeats_warning

    p = check_store_path(path)
    out: list[Record] = []
    seen: dict[int, tuple[str, int, Record]] = {}
    repeats: list = []
    try:
        for line in read_lines(p):
            raw = line.record
            if raw.get("schema_version") == 1:
                return [r for r in load([p]) if r.cell_id in cell_ids]
            if raw["cell_id"] not in cell_ids:
                continue
            raw["samples"] = []  # the plan reads status, run and context, never the per-request samples
            if isinstance(raw.get("extra"), dict):
                raw["extra"].pop("telemetry", None)
            rec = _parse(p, line, store_name(p))
            key = record_key(rec)
            if key in seen:
                repeats.append(_repeat(str(p), line.number, rec, seen[key]))
                continue
            seen[key] = (str(p), line.number, rec)
            out.append(rec)
    except OSError as exc:
        raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
    message = repeats_warning(repeats)
    if message:
        warnings.warn(message, stacklevel=2)
    return out


def _legacy_runs(raws: list[dict], store_name: str) -> dict[int, tuple[str, float | None]]:
    """Return {line index: (run id, start time)} reconstructed for the store's schema-1 lines.

    A new run starts where the commit, dirty flag, matrix, memory cap or record kind changes, or
    where a (cell, trial) repeats within the current run (a --redo appends the same trials again).
    """
    from bench.results.records import legacy_kind
    from bench.spec.cells import short_hash

    out: dict[int, tuple[str, float | None]] = {}
    segment: dict | None = None
    segments = []
    for i, raw in enumerate(raws):
        if raw.get("schema_version") != 1:
            continue
        settings, env = raw.get("settings") or {}, raw.get("environment") or {}
        who = (env.get("commit"), env.get("dirty"), settings.get("matrix"), settings.get("gpu_memory_gb"),
               legacy_kind(raw))
        seen = (raw["cell_id"], raw.get("trial", 0))
        if segment is None or segment["who"] != who or seen in segment["seen"]:
            first = raw.get("started_at") or raw.get("ended_at")
            segment = {"who": who, "seen": set(), "lines": [], "start": first,
                       "id": "v1-" + short_hash([*who, first, store_name])[:12]}
            segments.append(segment)
        segment["seen"].add(seen)
        segment["lines"].append(i)
        t = raw.get("started_at")
        if t is not None and (segment["start"] is None or t < segment["start"]):
            segment["start"] = t
    for seg in segments:
        for i in seg["lines"]:
            out[i] = (seg["id"], seg["start"])
    return out


def measurements(records: Iterable[Record]) -> list[Measurement]:
    return [r for r in records if isinstance(r, Measurement)]


def probes(records: Iterable[Record]) -> list[OomProbe]:
    return [r for r in records if isinstance(r, OomProbe)]


def capacity_probes(records: Iterable[Record]) -> list[CapacityProbe]:
    return [r for r in records if isinstance(r, CapacityProbe)]


def profiles(records: Iterable[Record]) -> list[Profile]:
    return [r for r in records if isinstance(r, Profile)]


def accuracies(records: Iterable[Record]) -> list[Accuracy]:
    return [r for r in records if isinstance(r, Accuracy)]


def accuracy_by_cell(records: Iterable[Record]) -> dict[str, list[Accuracy]]:
    """Return {cell_id: its ok Accuracy records, latest first} (what a speed row's accuracy is joined from)."""
    out: dict[str, list[Accuracy]] = {}
    for r in accuracies(records):
        if r.ok:
            out.setdefault(r.cell_id, []).append(r)
    for recs in out.values():
        recs.sort(key=lambda r: (r.context.started_at or 0, r.ended_at or 0), reverse=True)
    return out


def latest_accuracy(records: Iterable[Record]) -> dict[str, Accuracy]:
    """Return {cell_id: its latest ok Accuracy record} (the latest run context's, by start time)."""
    out: dict[str, Accuracy] = {}
    for r in accuracies(records):
        if r.ok and (r.cell_id not in out or (r.context.started_at or 0, r.ended_at or 0)
                     >= (out[r.cell_id].context.started_at or 0, out[r.cell_id].ended_at or 0)):
            out[r.cell_id] = r
    return out


def session_peaks(records: Iterable[Record]) -> dict[str, float]:
    """Return {cell_id: the GPU memory (bytes) its latest accuracy session that stored one held at its peak}
    (`session_peak_bytes`): what `bench accuracy --parallel` and the dry run's estimate expect a session measuring
    that cell again to hold (bench.execution.session_pool.session_size)."""
    import math

    out: dict[str, tuple] = {}
    for r in accuracies(records):
        peak = (r.accuracy or {}).get("session_peak_bytes")
        if not isinstance(peak, (int, float)) or isinstance(peak, bool):
            continue  # a store is untrusted: a string, a list or a flag is no size
        try:
            peak = float(peak)
        except OverflowError:  # an integer beyond any float
            continue
        if math.isfinite(peak) and peak > 0:
            when = (r.context.started_at or 0.0, r.ended_at or 0.0)
            if r.cell_id not in out or when > out[r.cell_id][0]:
                out[r.cell_id] = (when, peak)
    return {k: v for k, (_, v) in out.items()}


def with_commit(records: Iterable[Record], prefix: str) -> list[Record]:
    """Return the records whose context commit starts with prefix."""
    return [r for r in records if str(r.context.commit or "").startswith(prefix)]


# ---- stores as columns (large stores, many stores) ---------------------------------------------
#
# The same records, read through each store's columnar companion (bench.results.columnar) as a
# bench.results.table.Table instead of one typed record per line.

# A store at least this large is read as columns by `bench report` and `bench compare` (a smaller
# one parses faster than its companion is written).
TABLE_MIN_BYTES = 32 << 20


def expand_stores(paths: Iterable[str | Path], pattern: str = "*.jsonl") -> list[Path]:
    """Return the stores named by paths, where a folder stands for its `*.jsonl` stores and a glob for its
    matches (sorted: nightly stores named by date read oldest first); BenchInputError when one names none."""
    import glob

    out: list[Path] = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            found = sorted(p.glob(pattern))
            if not found:
                raise BenchInputError(f"folder {str(p)!r} holds no result stores ({pattern}): give stores or a folder of them")
        elif glob.has_magic(str(path)):
            found = sorted(Path(m) for m in glob.glob(str(path)) if not Path(m).is_dir())
            if not found:
                raise BenchInputError(f"no result store matches {str(path)!r}: check the pattern")
        else:
            found = [p]
        out.extend(found)
    return out


def prefer_table(paths: Sequence[str | Path], columnar: bool | None = None) -> bool:
    """Return whether to read these stores as columns: `columnar` if given, else when they add up to TABLE_MIN_BYTES
    and none is compressed (a .jsonl.gz store has no companion: `table` would read them all as typed records)."""
    if columnar is not None:
        return columnar
    if any(is_compressed(p) for p in paths):
        return False
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += Path(p).stat().st_size
    return total >= TABLE_MIN_BYTES


def table(paths: Sequence[str | Path]) -> Table | None:
    """Return the stores as columns (each companion extended or rebuilt first); None when a store holds
    schema-1 lines or is compressed (read those through `load`). BenchInputError on a bad path. A store named
    twice is read once, and each record counts once (bench.results.duplicates), as through `load`."""
    import pandas as pd

    from bench.results.columnar import KEY_COLUMNS, open_store
    from bench.results.duplicates import distinct_stores, repeats_warning

    checked = distinct_stores([check_store_path(p) for p in paths])
    columns, keys = [], []
    for i, p in enumerate(checked):
        try:
            sc = open_store(p)
        except OSError as exc:
            raise BenchInputError(f"result store {str(p)!r} cannot be read: {exc}") from exc
        if sc is None:
            return None
        columns.append(sc)
        t = sc.read("records", columns=list(KEY_COLUMNS))
        if t is not None:
            f = t.to_pandas()
            for c in ("gpu_memory_gb", "env_digest", "commit", "run_started_at", "described", "host"):
                if c not in f:
                    f[c] = None
            for c in ("kind", "cell_id", "run_id", "env_digest", "commit", "host"):
                f[c] = f[c].astype(object).where(f[c].notna(), None)
            f["ok"] = (f.pop("status") == "ok").to_numpy(dtype=bool)  # what the partial-run rule counts
            f.insert(0, "store", i)
            keys.append(f)
    frame = pd.concat(keys, ignore_index=True) if keys else pd.DataFrame(columns=["store", *KEY_COLUMNS])
    tbl, repeats = Table(checked, [store_name(p) for p in checked], columns, frame).without_repeats()
    message = repeats_warning(repeats)
    if message:
        warnings.warn(message, stacklevel=2)
    return tbl
