"""Stores read as columns: the same records and selection rule as typed records, through the companions.

Each store's columnar companion (bench.results.columnar) holds its records' report rows; a `Table`
names a record by its index into the stores' key columns, and `select_table` makes the rows of
bench.results.selection's rule (`choose`, the partial-run rule) as record indices. The selection
reads a few key columns of every record; only the chosen records' rows (and, for figures, their
samples) are read in full. bench.results.rows.record_row makes the columns of both readers.
`bench.results.query.table` opens stores as a Table; callers import these names from bench.results.query.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.results.columnar import INTERNAL_COLUMNS
from bench.results.jsonl import read_lines
from bench.results.records import Record, RunContext, parse
from bench.results.selection import (
    CellRuns,
    _check_poolable,
    choose,
    left_out_runs,
    partial_runs_warning,
    selection_warnings,
)


@dataclass
class Table:
    """Stores read as columns: every record's key columns in store order; the rest read for chosen records.

    A record is named by its index into `keys` (the stores' records, one store after the other).
    """

    paths: list[Path]
    names: list[str]              # each store's stem (a record's `store`)
    columns: list                 # bench.results.columnar.StoreColumns per store
    keys: Any                     # pandas frame: store (index into paths), pos, kind, cell_id, gpu_memory_gb, run_id, ...

    def indices(self, kind: str = "measurement") -> list[int]:
        """Return the indices of the records of one kind, in store order."""
        return self.keys.index[self.keys.kind == kind].tolist()

    def _by_store(self, indices: Sequence[int]) -> dict[int, Any]:
        """Return {store index: record positions (numpy) of these records in that store}."""
        import numpy as np

        idx = np.asarray(indices, dtype=np.int64)
        stores, positions = self.keys.store.to_numpy()[idx], self.keys.pos.to_numpy()[idx]
        return {int(s): positions[stores == s] for s in np.unique(stores)}

    def _read(self, kind: str, indices: Sequence[int], columns=None, exclude=()):
        """Return {store index: pandas frame} of one kind's rows for these records (JSON-text columns decoded)."""
        from bench.results.columnar import json_columns

        out = {}
        for s, positions in self._by_store(indices).items():
            t = self.columns[s].read(kind, columns=columns, positions=positions, exclude=exclude)
            if t is None:
                continue
            frame = t.to_pandas()
            for c in frame.columns:
                if isinstance(frame[c].dtype, pd_categorical()):
                    frame[c] = frame[c].astype(object).where(frame[c].notna(), None)
            for c in json_columns(t):
                if c in frame:
                    frame[c] = [None if v is None else json.loads(v) for v in frame[c]]
            out[s] = frame
        return out

    def frame(self, indices: Sequence[int]):
        """Return the report frame (bench.results.rows.record_row columns) of these records, in this order."""
        import pandas as pd

        from bench.results.rows import ROW_FIELDS

        hidden = Table._INTERNAL
        parts = []
        for s, f in self._read("records", indices, exclude=hidden - {"pos"}).items():
            f.insert(0, "store", self.names[s])
            f.index = pd.MultiIndex.from_arrays([[s] * len(f), f.pos.to_numpy()])
            parts.append(f.drop(columns=[c for c in hidden if c in f]))
        if not parts:
            return pd.DataFrame(columns=list(ROW_FIELDS))
        frame = pd.concat(parts) if len(parts) > 1 else parts[0]
        k = self.keys
        order = pd.MultiIndex.from_arrays([k.store.to_numpy()[list(indices)], k.pos.to_numpy()[list(indices)]])
        frame = frame.reindex(order).reset_index(drop=True)
        # Stores whose parts held None where these rows hold none: the dtype the rows themselves make.
        for c in frame.columns:
            if frame[c].dtype == object and pd.api.types.infer_dtype(frame[c], skipna=False) == "boolean":
                frame[c] = frame[c].astype(bool)
        return frame

    def frame_columns(self, indices: Sequence[int], columns: Sequence[str]):
        """Return these columns of these records' rows (any order; columns no store has are left out)."""
        import pandas as pd

        parts = [f.drop(columns="pos") for f in self._read("records", indices, columns=["pos", *columns]).values()]
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0] if parts else pd.DataFrame()

    def per_request(self, kind: str, indices: Sequence[int]):
        """Return {store index: frame of `kind` ("samples" or "telemetry") rows of these records}, keyed by `pos`."""
        return self._read(kind, indices)

    def records(self, indices: Sequence[int], full: bool = False, metrics: Sequence[str] | None = None) -> list[Record]:
        """Return typed records of these records, in this order.

        full: parsed from their stored lines (samples and extra included; for the few probe and profile
        records). Otherwise summaries from the columns: cell, context, environment, status, run, trial,
        error, times and the numeric metrics (`metrics` only, when given), without samples or extra.
        """
        from bench.results.rows import ROW_FIELDS

        k = self.keys
        out: dict[tuple[int, int], Record] = {}
        if full:
            from bench.results.jsonl import LineCounts

            for s, positions in self._by_store(indices).items():
                t = self.columns[s].read("records", columns=["pos", "offset", "nbytes"], positions=positions)
                with open(self.paths[s], "rb") as fh:
                    for pos, offset, nbytes in zip(*(t.column(c).to_pylist() for c in ("pos", "offset", "nbytes")), strict=True):
                        (line,) = read_lines(self.paths[s], offset, offset + nbytes, fh=fh, counts=LineCounts())
                        out[(s, pos)] = parse(line.record, store=self.names[s])
        else:
            from bench.results.records import TYPES

            cache: dict[str, Any] = {}

            def cached(text, make):
                value = cache.get(text)
                if value is None:
                    value = cache[text] = make(json.loads(text))
                return value

            fields_ = ("pos", "kind", "cell_id", "cell_json", "context_json", "environment_json", "run", "trial",
                       "status", "error", "started_at", "schema_version")
            wanted = None if metrics is None else [*fields_, *metrics]
            for s, f in self._read("records", indices, columns=wanted).items():
                for c in fields_:
                    if c not in f:
                        f[c] = None
                metric_cols = [c for c in f.columns if c not in ROW_FIELDS and c not in Table._INTERNAL
                               and (metrics is None or c in metrics) and f[c].dtype.kind in "fiu"]
                values = f[metric_cols].to_numpy(dtype=float)
                for j, (pos, kind, cell_id, cell, ctx, env, run, trial, status, error, started, version) in enumerate(
                        zip(*(f[c].tolist() for c in fields_), strict=True)):
                    m = {c: v for c, v in zip(metric_cols, values[j].tolist(), strict=True) if v == v}
                    out[(s, pos)] = TYPES[kind](
                        cell_id=cell_id, cell=cached(cell, dict), context=cached(ctx, RunContext.from_json),
                        run=int(run), trial=int(trial), status=status, metrics=m or None, error=error,
                        environment=cached(env, dict), started_at=_float(started), schema_version=int(version),
                        store=self.names[s])
        return [out[(int(s), int(p))] for s, p in zip(k.store.to_numpy()[list(indices)], k.pos.to_numpy()[list(indices)], strict=True)]

    _INTERNAL = INTERNAL_COLUMNS

    def without_repeats(self) -> tuple[Table, list]:
        """Return the table less the records whose key an earlier record holds (bench.results.duplicates: stores
        in order, lines in file order), and those repeats (duplicates.Repeat), compared with the records kept."""
        import numpy as np

        from bench.results.duplicates import Repeat, differences

        k = self.keys
        if not len(k):
            return self, []
        again = k.record_key.duplicated(keep="first").to_numpy()
        if not again.any():
            return self, []
        repeated = np.flatnonzero(again).tolist()
        first_of = dict(zip(k.record_key.to_numpy()[~again].tolist(), np.flatnonzero(~again).tolist(), strict=True))
        firsts = [first_of[key] for key in k.record_key.to_numpy()[repeated].tolist()]
        wanted = sorted(set(repeated) | set(firsts))
        rows = dict(zip(wanted, self.frame(wanted).to_dict("records"), strict=True))
        stores, lines = k.store.to_numpy(), k.line.to_numpy()
        repeats = []
        for i, j in zip(repeated, firsts, strict=True):
            r = rows[i]
            repeats.append(Repeat(str(self.paths[stores[i]]), int(lines[i]), str(self.paths[stores[j]]), int(lines[j]),
                                  r["run_id"], r["cell_id"], int(r["run"]), int(r["trial"]), differences(r, rows[j])))
        kept = Table(self.paths, self.names, self.columns, k[~again].reset_index(drop=True))
        return kept, repeats

    def distinct(self, column: str, indices: Sequence[int], ordered: bool = True) -> list:
        """Return the distinct parsed values of a JSON column (environment_json, context_json) of these
        records, in the order the records first hold them (ordered) or in any order."""
        import numpy as np
        import pandas as pd

        if not ordered:
            seen: dict[str, None] = {}
            for s, positions in self._by_store(indices).items():
                t = self.columns[s].read("records", columns=[column], positions=positions)
                for v in (t.column(column).unique().to_pylist() if t is not None else ()):
                    seen.setdefault(v)
            return [json.loads(v) for v in seen if v is not None]

        frames = self._read("records", indices, columns=["pos", column])
        if not frames:
            return []
        parts = [pd.Series(f[column].to_numpy(), index=pd.MultiIndex.from_arrays([np.full(len(f), s), f.pos.to_numpy()]))
                 for s, f in frames.items()]
        values = pd.concat(parts) if len(parts) > 1 else parts[0]
        idx = np.asarray(indices, dtype=np.int64)
        order = pd.MultiIndex.from_arrays([self.keys.store.to_numpy()[idx], self.keys.pos.to_numpy()[idx]])
        return [json.loads(v) for v in pd.unique(values.reindex(order).to_numpy())]


def pd_categorical():
    import pandas as pd

    return pd.CategoricalDtype


def _float(v):
    return None if v is None or v != v else float(v)


@dataclass
class TableSelection:
    """`select`'s choice over a Table: record indices per row (and per earlier run context)."""

    table: Table
    # (cell_id, cap, chosen records, first record of each chosen run context, latest first)
    rows: list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]]
    history: list[tuple[str, Any, tuple[int, ...], tuple[int, ...]]]
    warnings: list[str] = field(default_factory=list)
    # {(cell_id, cap): ok records of the partial runs a row left out (left_out_runs)}, rows that left any out
    left_out: dict[tuple, tuple[int, ...]] = field(default_factory=dict)

    def left_out_runs(self) -> dict[tuple[str, float | None], int]:
        """Return Selection.left_out_runs: {(cell_id, gpu_memory_gb): partial runs left out of the row's figures}."""
        k = self.table.keys
        return {key: len(set(zip(k.run_id.to_numpy()[list(idx)], k.run.to_numpy()[list(idx)], strict=True)))
                for key, idx in self.left_out.items()}

    @property
    def indices(self) -> list[int]:
        """Return the chosen records of every row, rows in first-seen order, each in store order."""
        return [i for row in self.rows for i in row[2]]

    @property
    def history_indices(self) -> list[int]:
        return [i for row in self.history for i in row[2]]

    def cell_runs(self, metrics: Sequence[str] | None = None) -> list[CellRuns]:
        """Return the rows as CellRuns of summary records (bench.results.query.Table.records)."""
        records = self.table.records(self.indices, metrics=metrics)
        pooled = [i for row in self.rows if len(row[3]) > 1 for i in row[3]]
        firsts = dict(zip(pooled, self.table.records(pooled, metrics=()), strict=True)) if pooled else {}
        out, n = [], 0
        for cell_id, cap, chosen, ctx_records in self.rows:
            recs = tuple(records[n:n + len(chosen)])
            n += len(chosen)
            ctxs = tuple(firsts[i].context for i in ctx_records) if len(ctx_records) > 1 else (recs[0].context,)
            left = self.left_out.get((cell_id, cap), ())
            out.append(CellRuns(cell_id, cap, recs, ctxs, tuple(self.table.records(left, metrics=metrics)) if left else ()))
        return out

    def baselines(self) -> list[dict]:
        """Return the distinct baselines the rows' run contexts named (stored_baselines)."""
        contexts = self.table.distinct("context_json", [row[3][0] for row in self.rows])
        out: list[dict] = []
        for c in contexts:
            b = c.get("baseline")
            if b and b not in out:
                out.append(b)
        return out


def select_table(tbl: Table, indices: Sequence[int] | None = None, pool: bool = False) -> TableSelection:
    """Return `select`'s choice over the table's measurements (or these records): the same rule, as indices."""
    k = tbl.keys
    idx = list(tbl.indices() if indices is None else indices)
    caps = k.gpu_memory_gb.to_numpy()[idx]
    keys = zip(k.cell_id.to_numpy()[idx], [None if c is None or c != c else float(c) for c in caps],
               k.run_id.to_numpy()[idx], k.env_digest.to_numpy()[idx], k.described.to_numpy()[idx],
               [_float(t) for t in k.run_started_at.to_numpy()[idx]], k.host.to_numpy()[idx],
               k.run.to_numpy()[idx].tolist(), strict=True)
    cells, split = choose(keys)
    sel = TableSelection(tbl, [], [])
    for (cell_id, cap), groups in cells:
        groups = [[idx[i] for i in g] for g in groups]
        if not pool:
            sel.rows.append((cell_id, cap, tuple(groups[0]), (groups[0][0],)))
            sel.history.extend((cell_id, cap, tuple(g), (g[0],)) for g in groups[1:])
            continue
        recs = tbl.records([i for g in groups for i in g])
        n, ranked = 0, []
        for g in groups:
            ranked.append((recs[n].context, recs[n:n + len(g)]))
            n += len(g)
        _check_poolable(ranked)
        sel.rows.append((cell_id, cap, tuple(sorted(i for g in groups for i in g)), tuple(g[0] for g in groups)))
    sel.warnings.extend(selection_warnings(split, [(h[0], h[1]) for h in sel.history], pool))
    _leave_out_partial_runs(sel)
    return sel


def _leave_out_partial_runs(sel: TableSelection) -> None:
    """Apply the partial-run rule (left_out_runs) to every row and history row of a table selection, as
    select does through counted_records: their left-out ok records dropped, the rows' listed, and warned of."""
    import numpy as np
    import pandas as pd

    k = sel.table.keys
    groups = [row[2] for row in sel.rows] + [row[2] for row in sel.history]
    if not groups:
        return
    sizes = np.fromiter((len(g) for g in groups), dtype=np.int64, count=len(groups))
    idx = np.fromiter((i for g in groups for i in g), dtype=np.int64, count=int(sizes.sum()))
    ok = k.ok.to_numpy()[idx]
    counts = pd.DataFrame({"row": np.repeat(np.arange(len(groups)), sizes)[ok], "run_id": k.run_id.to_numpy()[idx][ok],
                           "run": k.run.to_numpy()[idx][ok], "trials": k.planned_trials.to_numpy()[idx][ok]})
    counts = counts.groupby(["row", "run_id", "run"], sort=False).trials.agg(["size", "first"])
    per_row: dict[int, tuple[dict, dict]] = {}
    for (row, run_id, run), n, trials in zip(counts.index, counts["size"].tolist(), counts["first"].tolist(), strict=True):
        ok_trials, asked = per_row.setdefault(row, ({}, {}))
        ok_trials[(run_id, int(run))] = n
        asked[run_id] = int(trials)
    left = {row: runs for row, (ok_trials, asked) in per_row.items() if (runs := left_out_runs(ok_trials, asked))}
    if not left:
        return
    ok_all, run_ids, run_nos = k.ok.to_numpy(), k.run_id.to_numpy(), k.run.to_numpy()
    for row, runs in left.items():
        rows, j = (sel.rows, row) if row < len(sel.rows) else (sel.history, row - len(sel.rows))
        cell_id, cap, chosen, firsts = rows[j]
        out = {i for i in chosen if ok_all[i] and (run_ids[i], int(run_nos[i])) in runs}
        rows[j] = (cell_id, cap, tuple(i for i in chosen if i not in out), firsts)
        if row < len(sel.rows):
            sel.left_out[(cell_id, cap)] = tuple(i for i in chosen if i in out)
    if sel.left_out:
        labels = sel.table.records([idx[0] for idx in sel.left_out.values()], metrics=())
        runs_left = sel.left_out_runs()
        sel.warnings.append(partial_runs_warning([(rec.label, runs_left[key], len(idx)) for rec, (key, idx) in zip(
            labels, sel.left_out.items(), strict=True)]))
