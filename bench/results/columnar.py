"""The columnar companion of a JSON Lines store: its records' scalars in Parquet, kept in step with it.

The JSON Lines file stays the source of truth (append-only, one fsync'd line per record); the
companion is a cache beside it that a large report or comparison reads instead of parsing every
line. `<dir>/<store>.jsonl` has its companion in `<dir>/.bench-cache/<store>.jsonl.columns/`:

    manifest.json                    what the parts cover: bytes, lines, records, digests of those bytes and files
    <start>-<end>.records.parquet    one row per record: bench.results.rows.record_row, plus kind, byte
                                     range, position, run-context / cell / environment JSON
    <start>-<end>.samples.parquet    per-request samples of ok records (read only for the figures)
    <start>-<end>.telemetry.parquet  telemetry samples of ok records

Staleness: the manifest holds, per part, the byte range of the store it covers, a BLAKE2 digest of the store's
bytes in that range and a digest of each of its files; and a key of the code that made the rows (the source of
this module's row writers, jsonl.py, rows.py, records.py and duplicates.py). Every open checks every covered byte
(`_fresh_manifest`): a store that grew (the append-only case) has only its new complete lines parsed, into a new
part; a part whose store bytes changed (an edit in place, at any offset and the same size; a store replaced or
shrunk) is parsed again with every later part, the earlier ones kept; a part file missing or altered (garbage,
truncated) is rebuilt with a warning; a key that differs rebuilds all. Lines are read by
bench.results.jsonl.read_lines, the one reader of stored lines. Bytes after the last newline (a torn or in-flight
line) are never cached: they are parsed at each read. Parts are merged into one past `MAX_PARTS`. A folder that
cannot be written gets no cache (the rows are built in memory). Stores holding schema-1 lines have no companion
(their run contexts are reconstructed over the whole store), nor have compressed stores (.jsonl.gz):
bench.results.query reads them through typed records.
Each record row also holds its line, host and key (bench.results.duplicates.record_key): each record counts once.

Readers never call this module: bench.results.query.table is the one way in. The store's writer
(bench.results.store.ResultStore.writer, which sits above this module and imports it; this module
imports neither the store nor the query API) calls open_store when an invocation ends, so a store
the harness writes has its new lines in the companion before anyone reads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import operator
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from bench import SCHEMA_VERSION

VERSION = 2  # 2: per-part digests of every covered byte and of the part files; record key, line and host columns
CACHE_DIR = ".bench-cache"
CHECK_BYTES = 1 << 20
SEGMENT_BYTES = 256 << 20  # new lines are parsed and written this many bytes at a time (~45,000 records)
MAX_PARTS = 8  # past this many parts, adjacent small ones are merged (up to MERGED_RECORDS records a part)
MERGED_RECORDS = 50_000
KINDS = ("records", "samples", "telemetry")
# Columns the selection reads on every record (the rest are read only for the chosen records).
KEY_COLUMNS = ("pos", "kind", "cell_id", "gpu_memory_gb", "run_id", "env_digest", "described", "run_started_at", "commit",
               "status", "run", "planned_trials", "host", "record_key", "line")
# Columns of the companion's record rows that are not the report row's (bench.results.rows.record_row).
INTERNAL_COLUMNS = frozenset({"pos", "kind", "offset", "nbytes", "line", "host", "record_key", "context_json", "cell_json",
                              "environment_json", "described"})


def companion_dir(store: Path) -> Path:
    """Return the folder of a store's companion."""
    return store.parent / CACHE_DIR / (store.name + ".columns")


@dataclass
class StoreColumns:
    """A store's companion as read: Parquet parts plus the rows of its uncovered tail (in memory)."""

    path: Path
    parts: list[str]             # part stems, in store order
    folder: Path | None          # where the parts are (None: nothing cached)
    tail: dict                   # {"records": pa.Table | None, "samples": ..., "telemetry": ...}: uncovered lines
    in_memory: dict              # parts built without a writable folder: {stem: {kind: pa.Table}}
    records: int                 # complete records, the tail's included
    sizes: dict                  # records in each part ({} for a companion written before sizes were kept)

    @property
    def _tail_records(self) -> int:
        t = self.tail.get("records")
        return t.num_rows if t is not None else 0

    def _ranges(self) -> list[tuple[str, int, int | None]]:
        """Return (part, first record position, records) per part; records None where the manifest lacks them."""
        out, first = [], 0
        for stem in self.parts:
            n = self.sizes.get(stem)
            if n is None:
                return [(s, 0, None) for s in self.parts]
            out.append((stem, first, n))
            first += n
        return out

    def read(self, kind: str, columns=None, positions=None, exclude=()):
        """Return one kind of table over the whole store, or None when it has none.

        columns: only these (those a part lacks are left out); exclude: all but these; positions: only
        the rows of these record positions (`pos`). Text columns come back dictionary-encoded (a run's
        many equal strings are held once).
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        wanted = None if positions is None else np.asarray(positions, dtype=np.int64)
        out, as_json = [], set()
        for stem, first, count in [*self._ranges(), ("tail", self.records - self._tail_records, self._tail_records)]:
            chosen = None  # the positions to keep from this part (None: all of its rows)
            if wanted is not None:
                mine = wanted[(wanted >= first) & (wanted < first + count)] if count is not None else wanted
                if not mine.size:
                    continue  # a part none of the chosen records is in is not read at all
                if count is None or mine.size < count:
                    chosen = pa.array(mine, type=pa.int64())
            if stem == "tail":
                t = self.tail.get(kind)
            elif stem in self.in_memory:
                t = self.in_memory[stem].get(kind)
            else:
                f = self.folder / f"{stem}.{kind}.parquet"
                try:
                    schema = pq.read_schema(f)
                    cols = [c for c in (columns or schema.names) if c in schema.names and c not in exclude]
                    if chosen is not None and "pos" not in cols:
                        cols = ["pos", *cols]
                    text = [c for c in cols if pa.types.is_string(schema.field(c).type)]
                    t = pq.read_table(f, columns=cols, read_dictionary=text)
                except (pa.ArrowException, OSError) as exc:  # damaged after open_store checked it (another process)
                    from bench.errors import BenchInputError

                    raise BenchInputError(
                        f"{self.path}: part {f.name} of its columnar companion cannot be read ({exc}); the companion "
                        f"is a cache: delete {self.folder} (or run again: the next read checks and rebuilds it)") from exc
            if t is None or not t.num_rows:
                continue
            as_json.update(json_columns(t))
            if chosen is not None:
                t = t.filter(pc.is_in(t["pos"], value_set=chosen))
            if columns or exclude:
                t = t.select([c for c in (columns or t.column_names) if c in t.column_names and c not in exclude])
            out.append(_dictionary_text(t))
        if not out:
            return None
        merged = concat(out)
        as_json = sorted(set(as_json) | set(json_columns(merged)))
        return merged.replace_schema_metadata({JSON_COLUMNS: json.dumps(as_json).encode()} if as_json else None)


def _dictionary_text(t):
    """Return the table with its text columns dictionary-encoded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, f in enumerate(t.schema):
        if pa.types.is_string(f.type):
            t = t.set_column(i, f.name, pc.dictionary_encode(t.column(i)))
    return t


def concat(tables):
    """Return the tables concatenated, column types promoted (int -> float, null -> any); a column whose
    kinds disagree between tables (text in one, numbers in another) becomes JSON text in all."""
    import pyarrow as pa

    tables = [t for t in tables if t is not None]
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    names = {n for t in tables for n in t.column_names}
    fixed = []
    mixed = [n for n in names if len({_family(t.schema.field(n).type) for t in tables if n in t.column_names} - {"null"}) > 1]
    for t in tables:
        as_json = set(json_columns(t))
        for n in mixed:
            if n in t.column_names and n not in as_json:
                i = t.column_names.index(n)
                values = [None if v is None else json.dumps(v, sort_keys=True) for v in t.column(i).to_pylist()]
                t = t.set_column(i, n, pa.array(values, type=pa.string()))
        cols = sorted(set(json_columns(t)) | set(mixed))
        fixed.append(_dictionary_text(t).replace_schema_metadata({JSON_COLUMNS: json.dumps(cols).encode()}))
    return pa.concat_tables(fixed, promote_options="permissive")


def _family(kind) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_null(kind):
        return "null"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return "number"
    return str(kind)


# ---- building -------------------------------------------------------------------------------------


def code_key() -> str:
    """Return a digest of the code that writes the companion's rows: a change to it rebuilds every companion
    (a change to how they are read does not)."""
    import inspect

    from bench.results import duplicates, jsonl, records, rows

    h = hashlib.blake2b(digest_size=8)
    h.update(f"{VERSION}:{SCHEMA_VERSION}".encode())
    for mod in (jsonl, records, rows, duplicates):  # jsonl: which lines are records; duplicates: the record key
        h.update(Path(mod.__file__).read_bytes())
    for writer in (_parse, _sample_values, _column_type, _columns_table, _table):
        h.update(inspect.getsource(writer).encode())
    return h.hexdigest()


CHUNK_BYTES = 4 << 20  # digests read this many bytes at a time


def _digest_range(path: Path, start: int, end: int) -> str:
    """Return the BLAKE2 digest of the file's bytes in [start, end) (read CHUNK_BYTES at a time)."""
    h = hashlib.blake2b(digest_size=16)
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = start
        while pos < end:
            chunk = os.pread(fd, min(CHUNK_BYTES, end - pos), pos)
            if not chunk:  # the file is shorter than the range: no match
                return ""
            h.update(chunk)
            pos += len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def _digest_file(path: Path) -> str | None:
    """Return the digest of a whole file, or None when it cannot be read."""
    try:
        return _digest_range(path, 0, os.stat(path).st_size)
    except OSError:
        return None


def _digests(jobs: list):
    """Return [fn(*args) for fn, *args in jobs], run on a few threads (hashlib releases the GIL on large updates)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda job: job[0](*job[1:]), jobs))


def _empty_manifest(key: str) -> dict:  # lines, records, bad: totals of the parts; checks: per part (open_store)
    return {"version": VERSION, "key": key, "covered": 0, "lines": 0, "records": 0, "bad": 0, "legacy": False,
            "parts": [], "sizes": {}, "checks": {}}


def _cleared(folder: Path, key: str) -> dict:
    """Remove the part files of a companion whose manifest cannot be used, and return an empty manifest."""
    for f in folder.glob("*.parquet"):
        with contextlib.suppress(OSError):
            f.unlink()
    return _empty_manifest(key)


def _fresh_manifest(path: Path, folder: Path, key: str, size: int) -> dict:
    """Return the companion's manifest less its stale parts: those past the first part whose store bytes changed
    (a store edited, replaced or shrunk) or whose files are missing or altered (warned: the cache is damaged). A
    manifest of another code key, or none, gives an empty one (everything parsed again)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except FileNotFoundError:
        return _empty_manifest(key)
    except (OSError, ValueError):
        warnings.warn(f"{path}: the manifest of its columnar companion ({folder}) is unreadable: rebuilt from the "
                      "JSON lines", stacklevel=4)
        return _cleared(folder, key)
    if not isinstance(manifest, dict) or manifest.get("key") != key:
        return _cleared(folder, key)  # another harness's companion: built again
    if manifest.get("legacy") is True:
        return manifest
    try:
        stems = [str(s) for s in manifest["parts"]]
        checks = [manifest["checks"][s] for s in stems]
        ranges = [(int(c["start"]), int(c["end"])) for c in checks]
        files = [{kind: str(c["files"][kind]) for kind in KINDS} for c in checks]
        for stem, c in zip(stems, checks, strict=True):
            int(c["lines"]), int(c["bad"]), int(manifest["sizes"][stem]), str(c["digest"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        warnings.warn(f"{path}: the manifest of its columnar companion ({folder}) is damaged: rebuilt from the JSON "
                      "lines", stacklevel=4)
        return _cleared(folder, key)
    jobs = [(_digest_range, path, a, b) if b <= size else (lambda: "",) for a, b in ranges]
    jobs += [(_digest_file, folder / f"{stem}.{kind}.parquet") for stem in stems for kind in KINDS]
    found = _digests(jobs)
    stored, parts = found[:len(stems)], found[len(stems):]
    kept, covered = _empty_manifest(key), 0
    for i, (stem, check, (start, end)) in enumerate(zip(stems, checks, ranges, strict=True)):
        if start != covered or stored[i] != check["digest"]:
            break  # the store's bytes changed under this part: it and every later part are parsed again
        damaged = [kind for j, kind in enumerate(KINDS) if parts[i * len(KINDS) + j] != files[i][kind]]
        if damaged:
            warnings.warn(f"{path}: part {stem} of its columnar companion ({folder}) is missing, unreadable or altered "
                          f"({', '.join(damaged)}): rebuilt from the JSON lines", stacklevel=4)
            break
        kept["parts"].append(stem)
        kept["checks"][stem] = check
        kept["sizes"][stem] = int(manifest["sizes"][stem])
        kept.update(covered=end, lines=kept["lines"] + int(check["lines"]), records=kept["records"] + kept["sizes"][stem],
                    bad=kept["bad"] + int(check["bad"]))
        covered = end
    for stem in stems[len(kept["parts"]):]:  # files of the parts dropped
        for kind in KINDS:
            with contextlib.suppress(OSError):
                (folder / f"{stem}.{kind}.parquet").unlink(missing_ok=True)
    return kept


def open_store(path: Path) -> StoreColumns | None:
    """Return the store's companion brought up to date (extended with new lines, stale parts parsed again); None
    for a store holding schema-1 lines, or a compressed one (read as typed records). Warns once about torn or
    invalid lines, as bench.results.jsonl.read_lines does, and about a damaged companion (rebuilt)."""
    from bench.results.jsonl import LineCounts, is_compressed, judge

    if is_compressed(path):
        return None
    folder = companion_dir(path)
    key = code_key()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        manifest = _fresh_manifest(path, folder, key, size)
        if manifest["legacy"]:
            return None
        end = _last_newline(fh, manifest["covered"], size)
        in_memory: dict = {}
        writable = True
        while end > manifest["covered"]:  # one part per SEGMENT_BYTES of new lines: memory stays bounded
            start = manifest["covered"]
            stop = end if end - start <= SEGMENT_BYTES else _last_newline(fh, start, start + SEGMENT_BYTES)
            if stop == start:  # one line longer than a segment
                stop = end
            built = _parse(fh, path, start, stop, manifest["lines"], manifest["records"])
            if built is None:
                manifest = {**_empty_manifest(key), "legacy": True}
                _write_manifest(folder, manifest)
                return None
            tables, lines, records, bad = built
            stem = f"{start:012d}-{stop:012d}"
            files = _write_parts(folder, stem, tables) if writable else None
            writable = files is not None
            if not writable:
                in_memory[stem] = tables
            manifest.update(covered=stop, lines=manifest["lines"] + lines, records=manifest["records"] + records,
                            bad=manifest["bad"] + bad, parts=[*manifest["parts"], stem],
                            sizes={**manifest["sizes"], stem: records})
            manifest["checks"][stem] = {"start": start, "end": stop, "lines": lines, "bad": bad,
                                        "digest": _digest_range(path, start, stop), "files": files}
            if writable:
                _compact(path, folder, manifest)
                _write_manifest(folder, manifest)
        tail = {}
        tail_bad = 0
        if size > end:  # a torn or in-flight last line: parsed at each read, never cached
            built = _parse(fh, path, end, size, manifest["lines"], manifest["records"])
            if built is None:
                return None
            tail, _, tail_records, tail_bad = built
        else:
            tail_records = 0
    judge(path, LineCounts(records=manifest["records"] + tail_records, bad=manifest["bad"] + tail_bad), stacklevel=3)
    return StoreColumns(path, manifest["parts"], folder, tail, in_memory,
                        manifest["records"] + tail_records, manifest["sizes"])


def _last_newline(fh, start: int, size: int) -> int:
    """Return the offset just past the last newline in [start, size), or start when there is none."""
    pos = size
    block = 1 << 16
    while pos > start:
        lo = max(start, pos - block)
        fh.seek(lo)
        chunk = fh.read(pos - lo)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return lo + i + 1
        pos = lo
    return start


def _parse(fh, path: Path, start: int, end: int, line0: int, pos0: int):
    """Return ({kind: pa.Table}, lines, records, bad lines) of the lines in [start, end), or None at a schema-1 line."""
    from bench.errors import BenchInputError
    from bench.machine.environment import COMPARABILITY_KEYS
    from bench.results.duplicates import record_key
    from bench.results.jsonl import LineCounts, read_lines
    from bench.results.records import parse
    from bench.results.rows import TELEMETRY_COLUMNS, number, record_host, record_row

    rows, samples, telemetry = [], {"pos": [], "in": [], "out": [], "ttft_ms": [], "e2el_ms": []}, \
        {"pos": [], "t_s": [], **{k: [] for k in TELEMETRY_COLUMNS}}
    cells: dict[str, str] = {}
    contexts: dict[tuple, str] = {}
    counts = LineCounts()
    pos = pos0
    for line_offset, nbytes, number_, raw in read_lines(path, start, end, fh=fh, first_line=line0 + 1, counts=counts):
        if raw["schema_version"] == 1:
            return None
        try:
            rec = parse(raw)
        except BenchInputError as exc:  # a record kind this harness does not know
            raise BenchInputError(f"{path}:{number_}: {exc}") from exc
        row = record_row(rec)
        del row["store"]  # a reader's label (the file's stem), set when read
        cell_json = cells.get(rec.cell_id)
        if cell_json is None:
            cell_json = cells[rec.cell_id] = json.dumps(rec.cell, sort_keys=True)
        env = rec.environment
        ctx_key = (json.dumps(raw.get("context"), sort_keys=True), rec.context.env_digest)
        context_json = contexts.get(ctx_key)
        if context_json is None:
            context_json = contexts[ctx_key] = json.dumps(rec.context.to_json(), sort_keys=True)
        row.update(
            pos=pos, kind=rec.kind, offset=line_offset, nbytes=nbytes, line=number_,
            host=record_host(rec), record_key=record_key(rec),
            context_json=context_json, cell_json=cell_json,
            environment_json=json.dumps(env, sort_keys=True),
            described=rec.context.env_digest is not None and any(env.get(k) is not None for k in COMPARABILITY_KEYS),
        )
        rows.append(row)
        if rec.status == "ok":
            kept = _sample_values(rec.samples or ())
            if kept:
                samples["pos"].extend([pos] * len(kept))
                for k, column in zip(("in", "out", "ttft_ms", "e2el_ms"), zip(*kept, strict=True), strict=True):
                    samples[k].extend(column)
            for t in rec.telemetry:
                if isinstance(t, dict) and number(t.get("t_s")) is not None:
                    telemetry["pos"].append(pos)
                    telemetry["t_s"].append(t["t_s"])
                    for k in TELEMETRY_COLUMNS:
                        telemetry[k].append(number(t.get(k)))
        pos += 1
    tables = {"records": _table(rows), "samples": _columns_table(samples), "telemetry": _columns_table(telemetry)}
    return tables, counts.lines, pos - pos0, counts.bad


_SAMPLE_FIELDS = ("error", "in", "out", "ttft_ms", "e2el_ms")
_get_sample = operator.itemgetter(*_SAMPLE_FIELDS)


def _sample_values(samples) -> list[tuple]:
    """Return (in, out, ttft_ms, e2el_ms) of each sample without an error (as bench.report.data reads them)."""
    try:
        values = list(map(_get_sample, samples))
    except (KeyError, TypeError):  # a sample without some field: read the slow way
        values = [tuple(s.get(k) for k in _SAMPLE_FIELDS) for s in samples]
    return [v[1:] for v in values if v[0] is None]


def _column_type(values: list):
    """Return the Arrow type of a column of JSON scalars, or None when it mixes kinds (stored as JSON text)."""
    import pyarrow as pa

    kinds = set(map(type, values)) - {type(None)}
    if not kinds:
        return pa.null()
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        present = [v for v in values if v is not None]
        return pa.int64() if -(2 ** 63) <= min(present) and max(present) < 2 ** 63 else None
    if kinds <= {int, float}:
        return pa.float64()
    if kinds == {str}:
        return pa.string()
    return None


JSON_COLUMNS = b"bench.json_columns"


def _columns_table(columns: dict[str, list]):
    import pyarrow as pa

    arrays, names, as_json = [], [], []
    for name, values in columns.items():
        kind = _column_type(values)
        if kind is None:
            values = [None if v is None else json.dumps(v, sort_keys=True) for v in values]
            kind = pa.string()
            as_json.append(name)
        arrays.append(pa.array(values, type=kind))
        names.append(name)
    meta = {JSON_COLUMNS: json.dumps(as_json).encode()} if as_json else None
    return pa.Table.from_arrays(arrays, names=names, metadata=meta)


def _table(rows: list[dict]):
    """Return the Arrow table of row dicts (columns in first-seen order; a row without a key holds null)."""
    names: dict[str, None] = {}
    shapes: dict[tuple, None] = {}
    for r in rows:
        shape = tuple(r)
        if shape not in shapes:
            shapes[shape] = None
            for k in shape:
                names.setdefault(k)
    if len(shapes) == 1:  # every row has the same keys in the same order: read them by position
        return _columns_table(dict(zip(names, (list(c) for c in zip(*(r.values() for r in rows), strict=True)), strict=True)))
    return _columns_table({n: [r.get(n) for r in rows] for n in names})


def json_columns(table) -> list[str]:
    """Return the names of a table's columns stored as JSON text (they mixed kinds of values)."""
    meta = table.schema.metadata or {}
    return json.loads(meta.get(JSON_COLUMNS, b"[]"))


def _write_parts(folder: Path, stem: str, tables: dict) -> dict | None:
    """Write one part's tables (temp file, then rename); return {kind: digest of its file}, or None when the folder
    cannot be written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    digests = {}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for kind, t in tables.items():
            final = folder / f"{stem}.{kind}.parquet"
            tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
            sink = pa.BufferOutputStream()
            pq.write_table(t, sink, compression="zstd")
            data = memoryview(sink.getvalue())
            digests[kind] = hashlib.blake2b(data, digest_size=16).hexdigest()
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, final)
        return digests
    except OSError:
        return None


def _write_manifest(folder: Path, manifest: dict) -> None:
    from bench.files import write_atomic

    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only folder: the companion is rebuilt in memory at each read


def _compact(path: Path, folder: Path, manifest: dict) -> None:
    """Merge adjacent small parts (appends of a few records) into parts of up to MERGED_RECORDS records once
    there are more than MAX_PARTS, and drop the files the manifest no longer names."""
    import pyarrow.parquet as pq

    stems, sizes, checks = manifest["parts"], manifest["sizes"], manifest["checks"]
    if len(stems) <= MAX_PARTS:
        return
    groups: list[list[str]] = []
    for stem in stems:
        n = sizes.get(stem, MERGED_RECORDS)
        if groups and sum(sizes.get(s, MERGED_RECORDS) for s in groups[-1]) + n <= MERGED_RECORDS:
            groups[-1].append(stem)
        else:
            groups.append([stem])
    merged = []
    for group in groups:
        if len(group) == 1:
            merged.append(group[0])
            continue
        stem = group[0].split("-")[0] + "-" + group[-1].split("-")[1]
        tables = {}
        for kind in KINDS:
            parts = [pq.read_table(folder / f"{s}.{kind}.parquet") for s in group]
            table = concat(parts)
            cols = sorted({c for t in [*parts, table] for c in json_columns(t)})
            tables[kind] = table.replace_schema_metadata({JSON_COLUMNS: json.dumps(cols).encode()} if cols else None)
        files = _write_parts(folder, stem, tables)
        if files is None:
            return
        merged.append(stem)
        sizes[stem] = sum(sizes.get(s, 0) for s in group)
        first, last = checks[group[0]], checks[group[-1]]
        checks[stem] = {"start": first["start"], "end": last["end"], "lines": sum(checks[s]["lines"] for s in group),
                        "bad": sum(checks[s]["bad"] for s in group),
                        "digest": _digest_range(path, first["start"], last["end"]), "files": files}
    manifest["parts"] = merged
    manifest["sizes"] = {s: sizes[s] for s in merged if s in sizes}
    manifest["checks"] = {s: checks[s] for s in merged}
    keep = {f"{s}.{kind}.parquet" for s in merged for kind in KINDS}
    for f in folder.glob("*.parquet"):
        if f.name not in keep:
            f.unlink(missing_ok=True)
