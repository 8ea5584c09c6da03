"""`bench report`: rebuild tables and the dashboard from stores, without running anything."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BenchInputError
from bench.files import write_atomic as _write
from bench.report import figures as F
from bench.report.cells import aggregate, compared_cells, comparisons
from bench.report.data import report_data
from bench.report.failures import HEADING as FAILURES
from bench.report.failures import failures_markdown
from bench.report.kernel_figures import kernel_bars
from bench.report.ratio_figures import (
    accuracy_vs_speedup,
    comparison_heatmap,
    speedup_heatmap,
)
from bench.report.render import environment_note, to_csv, to_html, to_markdown
from bench.report.tables import (
    DEFAULT_BASELINE,
    SpeedupTable,
    history_table,
    speedup_table,
    table_key,
)
from bench.results import query

NO_KERNELS = ("no kernel profiles in this store: pass --kernels FILE.csv (columns backend, precision, "
              "range or category, kernels_per_instance, time_per_instance_us)")
NO_TELEMETRY = "no telemetry in these results (records' extra.telemetry: [{t_s, power_w, memory_gb}, ...])"


def load_kernels(paths: list[str | Path]) -> pd.DataFrame | None:
    """Return the kernel tables (CSV or JSON records) concatenated, or None when none are given."""
    frames = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise BenchInputError(f"kernel table {str(p)!r} does not exist")
        frames.append(pd.read_json(p) if p.suffix == ".json" else pd.read_csv(p))
    return pd.concat(frames, ignore_index=True) if frames else None


def build_report(stores: list[str | Path], out_dir: str | Path, baseline: dict | None = None,
                 kernels: pd.DataFrame | None = None, profiles: list[str | Path] = (), pool: bool = False,
                 columnar: bool | None = None) -> dict[str, Path]:
    """Write speedup.md, speedup.csv, speedup.html and dashboard.html for the stores; return their paths.

    Each row is one cell's latest run context (bench.results.query.select); its earlier runs are
    listed as history. pool: pool every compatible run of a cell instead (the row says so). The
    baseline is `baseline`, else the one the stored matrix named, else hf/bf16/bs1.

    Profile records (`bench profile`: "kind": "profile"), in the stores or in the `profiles`
    stores, make the kernel panel (with `kernels`, if given) and kernels.csv; a store holding
    only profile records gets a dashboard with the kernel panel alone.

    Warnings about the data (mixed schema versions or environments) are issued with
    warnings.warn and shown at the top of the dashboard; the paths dict has them under "warnings".

    stores: result stores, folders of them (their *.jsonl) or globs. columnar: read them through their
    columnar companions (bench.results.query.table; the same report); None: when they are large.
    """
    from bench.files import check_output_dir
    from bench.report.dashboard import require_plotly

    check_output_dir(out_dir, "--out")  # before reading the stores
    require_plotly()
    with _gc_paused():
        return _build_report(stores, out_dir, baseline, kernels, profiles, pool, columnar)


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector: a large store makes millions of acyclic objects (parsed
    records, sample tuples), and each automatic collection re-walks all of them (about half the build)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Aggregated(dict):
    """{group label: aggregated cells}: comparison groups already aggregated (cells.compared_cells)."""


@dataclass
class _Inputs:
    """What a report draws from, read either as typed records or as columns (large stores)."""

    labels: list[str]              # one per store
    probes: list                   # OomProbe records
    profiled: list                 # Profile records
    has_runs: bool
    select: Callable               # () -> (ReportData of the rows, stored baselines, history per run or None)
    comparison: Callable           # () -> {source label: record frame} for the comparison view
    accuracy: dict                 # {cell_id: latest Accuracy record} (`bench accuracy`): the accuracy section
    accuracy_by_cell: dict         # {cell_id: ok Accuracy records, latest first}: joined to the speed rows (tables)
    capacity: list = field(default_factory=list)  # CapacityProbe records (`bench capacity`): the capacity section
    accuracies: list = field(default_factory=list)  # every Accuracy record, failed ones included: the failures section


def _record_inputs(stores, profiles, pool) -> _Inputs:
    from bench.results.records import Accuracy

    loaded = query.load_stores(stores)  # each record once across the stores; a store named twice read once
    # Accuracy records (`bench accuracy`) go beside the speedups, never into the comparison of stores.
    latest_accuracy = query.latest_accuracy([r for recs in loaded for r in recs])
    per_store = [recs for recs in loaded if not all(isinstance(r, Accuracy) for r in recs)] or loaded
    records = [r for recs in per_store for r in recs if not isinstance(r, Accuracy)]
    labels = store_labels(per_store)
    runs = query.measurements(records)

    def select():
        from bench.results.outputs import run_outputs

        selection = query.select(runs, pool=pool)
        data = report_data(selection.records, selection.left_out_runs())
        data.warnings.extend(selection.warnings)
        data.outputs = run_outputs(selection.records)
        hist = None
        if selection.history:
            frame = report_data([r for row in selection.history for r in row.records]).frame
            hist = aggregate(frame, by_run=True, spreads=False)
        return data, query.stored_baselines(selection.rows), hist

    return _Inputs(labels, query.probes(records), query.profiles(records + query.load(profiles)), bool(runs), select,
                   lambda: _comparison_frames([query.measurements(recs) for recs in per_store], labels), latest_accuracy,
                   query.accuracy_by_cell([r for recs in loaded for r in recs]), query.capacity_probes(records),
                   query.accuracies([r for recs in loaded for r in recs]))


def _table_inputs(table, profiles, pool) -> _Inputs:
    from bench.report.data import table_report_data, table_source_label

    keys = table.keys
    per_store = [keys.index[keys.store == i].tolist() for i in range(len(table.paths))]
    labels = _numbered([table_source_label(table, idx) if idx else "empty store" for idx in per_store])
    others = table.records(keys.index[keys.kind != "measurement"].tolist(), full=True)
    runs = table.indices("measurement")

    def select():
        from bench.results.outputs import run_outputs

        selection = query.select_table(table, runs, pool=pool)
        data = table_report_data(table, selection.indices, left_out_runs=selection.left_out_runs())
        data.warnings.extend(selection.warnings)
        data.outputs = run_outputs(table.records(selection.indices, full=True))
        hist = _table_history(table, selection) if selection.history else None
        return data, selection.baselines(), hist

    def comparison():
        measured = set(runs)
        groups = [[i for i in idx if i in measured] for idx in per_store]
        if sum(1 for g in groups if g) > 1:
            named = {label: g for label, g in zip(labels, groups, strict=True) if g}
        else:
            by_commit: dict[str, list[int]] = {}
            commits = keys.commit.to_numpy()[runs].tolist()
            for i, commit in zip(runs, commits, strict=True):
                by_commit.setdefault(commit or "unknown", []).append(i)
            named = {table_source_label(table, g): g for g in by_commit.values()}
        if len(named) < 2:
            return {}
        # Aggregated group by group: a year of nightly runs never holds every night's records at once.
        return _Aggregated({g: aggregate(table_report_data(table, query.select_table(table, idx).indices,
                                                             per_request=False).frame, spreads=False)
                            for g, idx in named.items()})

    return _Inputs(labels, query.probes(others), query.profiles(others + query.load(profiles)), bool(runs), select,
                   comparison, query.latest_accuracy(others), query.accuracy_by_cell(others), query.capacity_probes(others),
                   query.accuracies(others))


# Earlier runs are aggregated this many records at a time (whole run contexts), so a year of nightly
# runs never makes one frame of every record.
HISTORY_CHUNK = 100_000


def _table_history(table, selection) -> pd.DataFrame:
    """Return aggregate(frame of the selection's history, by_run=True, spreads=False), made run contexts at a time."""
    from bench.report.data import differing_environment, table_report_data
    from bench.results.rows import ENV_FIELDS

    history = selection.history
    run_ids = table.keys.run_id.to_numpy()
    env = table.frame_columns(selection.history_indices, list(ENV_FIELDS))
    differing = differing_environment(env)
    by_run: dict[str, list] = {}
    for row in history:
        by_run.setdefault(run_ids[row[3][0]], []).append(row)
    chunks, current, size = [], [], 0
    for rows in by_run.values():
        n = sum(len(r[2]) for r in rows)
        if current and size + n > HISTORY_CHUNK:
            chunks.append(current)
            current, size = [], 0
        current.extend(rows)
        size += n
    chunks.append(current)
    if len(chunks) == 1:
        frame = table_report_data(table, selection.history_indices, per_request=False, differing=differing).frame
        return aggregate(frame, by_run=True, spreads=False)
    # Each chunk in history order, so that cells keep the order one aggregate of all would give.
    order = {}
    for row in history:
        order.setdefault((row[0], row[1], run_ids[row[3][0]]), len(order))
    parts = []
    for rows in chunks:
        rows = sorted(rows, key=lambda r: order[(r[0], r[1], run_ids[r[3][0]])])
        frame = table_report_data(table, [i for r in rows for i in r[2]], per_request=False, differing=differing).frame
        parts.append(aggregate(frame, by_run=True, spreads=False))
    cells = pd.concat(parts, ignore_index=True)
    caps = [None if c is None or c != c else float(c) for c in cells.gpu_memory_gb]
    rank = [order[(c, cap, r)] for c, cap, r in zip(cells.cell_id, caps, cells.run_id, strict=True)]
    return cells.iloc[sorted(range(len(rank)), key=rank.__getitem__)].reset_index(drop=True)


def _build_report(stores, out_dir, baseline, kernels, profiles, pool, columnar) -> dict[str, Path]:
    from bench.oom.search import frontier_markdown, frontier_rows
    from bench.report.bounds import step_bound_markdown
    from bench.report.kernel_panel import (
        kernel_frame,
        kernel_summary_markdown,
        latest_per_cell,
        roofline_markdown,
    )

    stores = query.expand_stores(stores)
    replaced = _replaced(Path(out_dir), stores)  # said before the folder's files are written over
    table = query.table(stores) if query.prefer_table(stores, columnar) else None
    inputs = _table_inputs(table, profiles, pool) if table is not None else _record_inputs(stores, profiles, pool)
    labels, probes, profiled = inputs.labels, inputs.probes, inputs.profiled
    # OOM-probe records answer "what fits", not "how fast": they make the frontier table, not speedups;
    # profile records hold kernel tables: they make the kernel panel.
    out = Path(out_dir)
    frontier, extra_paths, kernel_warnings = {}, {}, []
    sections: dict[str, str] = {}  # Markdown sections beside the speedup tables: OOM frontier, kernels per step
    timelines: list[tuple] = []
    if profiled:
        from bench.report.kernel_panel import kernel_timelines

        bases = sorted({Path(s).parent for s in [*stores, *profiles]})
        kf = kernel_frame(profiled, base_dirs=bases)
        timelines, timeline_warnings = kernel_timelines(profiled, bases)
        kernel_warnings = kf.warnings + timeline_warnings
        if len(kf.frame):
            kernels = kf.frame if kernels is None else pd.concat([kernels, kf.frame], ignore_index=True)
            out.mkdir(parents=True, exist_ok=True)
            extra_paths["kernels"] = out / "kernels.csv"
            _write(extra_paths["kernels"], kf.frame.to_csv(index=False))
            sections["Kernels of one decode step (bench profile)"] = (kernel_summary_markdown(kf.summary)
                                                                     + step_bound_markdown(latest_per_cell(profiled)))
        roofline, roofline_warnings = roofline_markdown(profiled, bases)
        kernel_warnings += roofline_warnings
        if roofline:
            sections["One decode step against its roofline (bench profile --tool ncu)"] = roofline
        if kernel_warnings:  # refused or missing files named by records: said in report.md too (record_files.py)
            sections[RECORD_FILES_HEADING] = "\n".join(f"- {w}" for w in kernel_warnings) + "\n"
    if probes:
        out.mkdir(parents=True, exist_ok=True)
        frontier = {"frontier": out / "oom-frontier.md"}
        sections["OOM frontier (bench oom)"] = frontier_markdown(frontier_rows(probes))
        _write(frontier["frontier"], sections["OOM frontier (bench oom)"])
    if inputs.capacity:  # `bench capacity`'s answers, rebuilt from its stored probes
        from bench.capacity.search import capacity_section

        sections["Capacity under an SLO (bench capacity)"] = capacity_section(inputs.capacity)
        out.mkdir(parents=True, exist_ok=True)
        extra_paths["capacity"] = out / "capacity.md"
        _write(extra_paths["capacity"], sections["Capacity under an SLO (bench capacity)"])
    if inputs.accuracy:
        from bench.report.accuracy import accuracy_markdown

        sections["Accuracy (bench accuracy)"] = accuracy_markdown(inputs.accuracy)
        out.mkdir(parents=True, exist_ok=True)
        extra_paths["accuracy"] = out / "accuracy.md"
        _write(extra_paths["accuracy"], sections["Accuracy (bench accuracy)"])
    failed = failures_markdown(inputs.accuracies + profiled + inputs.capacity)
    if failed:  # accuracy, profile and capacity records that failed: their own tables draw from ok records only
        sections[FAILURES] = failed
    title = _title(labels)
    if not inputs.has_runs and (probes or profiled or inputs.accuracy or inputs.capacity or failed):
        out.mkdir(parents=True, exist_ok=True)
        extra_paths["report"] = out / "report.md"
        _write(extra_paths["report"], report_markdown(title, "", sections))
        if profiled or probes or inputs.accuracy or inputs.capacity or failed:
            extra_paths["dashboard"] = out / "dashboard.html"
            _write(extra_paths["dashboard"], _kernel_page(kernels, title, kernel_warnings, sections, timelines))
        kernel_warnings = replaced + kernel_warnings
        for w in kernel_warnings:
            warnings.warn(w, stacklevel=3)
        extra_paths["sources"] = _write_sources(out, stores)
        return {**frontier, **extra_paths, "warnings": kernel_warnings}
    if not inputs.has_runs:
        raise BenchInputError("the result store is empty: run `bench run` first (or pass a store that has results)")
    data, named_baselines, hist_cells = inputs.select()
    data.warnings.extend(kernel_warnings)
    frame = data.frame
    cells = aggregate(frame)
    baseline = baseline or _stored_baseline(named_baselines)
    # raises on a missing baseline, before writing anything
    tables = speedup_table(frame, baseline, cells=cells, accuracy=inputs.accuracy_by_cell, outputs=data.outputs)
    history = {}
    if hist_cells is not None:
        history = history_table(hist_cells, tables)
    for t in tables.values():
        data.warnings.extend(t.warnings)
    env_note = environment_note(frame, data.environments)
    markdown = to_markdown(tables, env_note, history)
    comparison = inputs.comparison()
    page = _dashboard(data, cells, tables, kernels, title, env_note, comparison, history, sections, timelines)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "speedup.md", "csv": out / "speedup.csv", "html": out / "speedup.html",
             "dashboard": out / "dashboard.html", "report": out / "report.md"}
    _write(paths["markdown"], markdown)
    _write(paths["report"], report_markdown(title, to_markdown(tables, "", history), sections, env_note))
    _write(paths["csv"], to_csv(tables))
    _write(paths["html"], "<!DOCTYPE html><html><head><meta charset='utf-8'><title>speedup tables</title></head><body>"
           + to_html(tables, env_note, history) + "</body></html>\n")
    _write(paths["dashboard"], page)
    data.warnings[:0] = replaced
    for w in data.warnings:
        warnings.warn(w, stacklevel=3)  # the caller of build_report
    extra_paths["sources"] = _write_sources(out, stores)
    return {**paths, **frontier, **extra_paths, "warnings": list(data.warnings)}


# The file in a report folder naming the stores its report was built from: a later report of other stores into the
# same folder says what it replaced, never silently.
SOURCES_FILE = "sources.json"


def _replaced(out: Path, stores: list[Path]) -> list[str]:
    """Return a warning when the folder holds the report of a store these stores leave out (it is replaced)."""
    import json

    try:
        old = json.loads((out / SOURCES_FILE).read_text())["stores"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    new = {str(Path(s).resolve()) for s in stores}
    lost = [s for s in old if isinstance(s, str) and s not in new] if isinstance(old, list) else []
    if not lost:
        return []
    return [f"{out} held the report of {', '.join(lost)}; it now holds the report of "
            f"{', '.join(str(s) for s in stores)}: give each its own folder (bench run --report-dir, bench report --out) "
            "to keep both"]


def _write_sources(out: Path, stores: list[Path]) -> Path:
    import json

    return _write(out / SOURCES_FILE, json.dumps({"stores": [str(Path(s).resolve()) for s in stores]}, indent=1) + "\n")


# report.md's section of the files profile records name that were left out (refused, missing, unreadable).
RECORD_FILES_HEADING = "Files the records name, left out"


def report_markdown(title: str, speedups: str, sections: dict[str, str], environment: str = "") -> str:
    """Return the one Markdown report: the speedup tables, then the OOM frontier and the kernel table, then the environment."""
    parts = [f"# {title}", ""]
    if speedups:
        parts += ["## Speedup tables", "", speedups]
    for heading, text in sections.items():
        parts += [f"## {heading}", "", text]
    if environment:
        parts += [environment, ""]
    return "\n".join(parts)


def _stored_baseline(named: list[dict]) -> dict:
    """Return the baseline the stored matrices named (one), or the default for stores that named none."""
    if len(named) > 1:
        text = "; ".join(", ".join(f"{k}={v}" for k, v in b.items()) for b in named)
        raise BenchInputError(f"these results come from matrices with different baselines ({text}): choose one with "
                              "--baseline, e.g. --baseline " + ",".join(f"{k}={v}" for k, v in named[0].items()))
    return named[0] if named else DEFAULT_BASELINE


def store_labels(per_store: list[list]) -> list[str]:
    """Return one label per store from its records' run contexts (machine, commit, date); repeats get '#n'."""
    from bench.report.data import source_label

    return _numbered([source_label(recs) if recs else "empty store" for recs in per_store])


def _numbered(labels: list[str]) -> list[str]:
    """Return the labels with '#n' added to those that repeat."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if labels.count(label) == 1 else f"{label} #{seen[label]}")
    return out


def _title(labels: list[str]) -> str:
    return "bench: " + "; ".join(dict.fromkeys(labels))


def _comparison_frames(runs_per_store: list[list], labels: list[str]) -> dict[str, pd.DataFrame]:
    """Return {source label: frame of its chosen records} for the comparison view (2+ stores, or 2+ commits in one).

    Stores are told apart by which file their records came from and named by their run
    contexts, so two stores of the same file name from different machines stay two sides.
    """
    groups: dict[str, list] = {}
    if sum(1 for runs in runs_per_store if runs) > 1:
        for label, runs in zip(labels, runs_per_store, strict=True):
            if runs:
                groups[label] = runs
    else:
        from bench.report.data import source_label

        runs = [r for rs in runs_per_store for r in rs]
        by_commit: dict[str, list] = {}
        for r in runs:
            by_commit.setdefault(r.context.commit or "unknown", []).append(r)
        groups = {source_label(recs): recs for recs in by_commit.values()}
    if len(groups) < 2:
        return {}
    return {g: report_data(query.select(recs).records).frame for g, recs in groups.items()}


def _dashboard(data, cells: pd.DataFrame, tables: dict[str, SpeedupTable], kernels: pd.DataFrame | None, title: str, env_note: str,
               comparison_frames: dict, history: dict, tables_md: dict[str, str], timelines: list = ()) -> str:
    from bench.report.dashboard import dashboard_html

    ambiguous = cells.groupby("workload").length.nunique()
    cells = cells.assign(_table=[table_key(w, n, ambiguous[w] > 1) for w, n in zip(cells.workload, cells.length, strict=True)])
    comps = compared_cells(comparison_frames) if isinstance(comparison_frames, _Aggregated) else \
        comparisons(comparison_frames)
    # The cap is None (object dtype) in uncapped stores and float in capped ones: one dtype to merge on.
    cells = cells.assign(gpu_memory_gb=pd.to_numeric(cells.gpu_memory_gb, errors="coerce").astype(float))
    samples = data.samples.assign(gpu_memory_gb=pd.to_numeric(data.samples.gpu_memory_gb, errors="coerce").astype(float))
    tele = data.telemetry.assign(gpu_memory_gb=pd.to_numeric(data.telemetry.gpu_memory_gb, errors="coerce").astype(float))
    samples = samples.merge(cells[["cell_id", "gpu_memory_gb", "_table"]], on=["cell_id", "gpu_memory_gb"])
    tele = tele.merge(cells[["cell_id", "gpu_memory_gb", "_table"]], on=["cell_id", "gpu_memory_gb"])
    sample_groups = dict(tuple(samples.groupby("_table", sort=False)))
    tele_groups = dict(tuple(tele.groupby("_table", sort=False)))
    sections = []
    for key, table in tables.items():
        c = cells[cells._table == key]
        s = sample_groups.get(key)
        t = tele_groups.get(key)
        latency_rate, requests_rate = F.latency_vs_rate(c, key), F.throughput_vs_rate(c, key)
        # A server's batch size and memory are the server's own: batch-size and OOM figures mean nothing there.
        server = bool((c.backend == "openai").all())
        figs = [("Throughput vs max_batch_size", F.throughput_vs_batch(c, key), "")] if not server else []
        figs.append(("Speedup heatmap", speedup_heatmap(table, key), ""))
        if not server and (c.status != "ok").any():  # nothing failed: a frontier would show nothing
            figs.append(("OOM frontier", F.oom_frontier(c, key), ""))
        if table.accuracy:
            figs.append(("Accuracy vs speedup", accuracy_vs_speedup(table, key), ""))
        if latency_rate is not None:  # a request-rate sweep (openai backend): the serving view
            figs.append(("Latency vs offered request rate", latency_rate, ""))
            figs.append(("Requests/s and goodput vs offered request rate", requests_rate, ""))
        pareto = F.pareto_figure(c, key)
        if pareto is not None:  # batch sweeps and serving sweeps alike: one point per configuration
            figs.append(("Interactivity vs throughput (Pareto front)", pareto,
                         "each point a configuration; the dotted line joins those no other beats on both axes"))
        if s is not None:
            figs.append(("Latency distributions (TTFT, TPOT)", F.latency_boxes(c, s, key), ""))
            figs.append(("Workload lengths", F.length_histograms(s, key), ""))
        else:
            figs.append(("Latency distributions and workload lengths", None, "no per-request samples in these results"))
        figs.append(("Telemetry", F.telemetry_lines(c, t, key), "") if t is not None else ("Telemetry", None, NO_TELEMETRY))
        clocks = F.telemetry_clocks(c, t, key) if t is not None else None
        if clocks is not None:
            figs.append(("Clocks and GPU busy", clocks, "a GPU busy well under 100 % is host-bound: the host, not the GPU, "
                         "sets the pace; clocks that sag mark power or thermal limits"))
        for a, b, ratios in comps:
            r = ratios[ratios.cell_id.isin(c.cell_id)]
            if len(r):
                figs.append((f"Comparison {a} → {b}", comparison_heatmap(r, key, a, b), ""))
        h = history.get(key)
        if h is not None and len(h):
            figs.append(("History: earlier runs of these cells", F.history_points(c, h, key), ""))
        sections.append({"key": key, "figures": figs, "table_html": to_html({key: table}, "", history)})
    env_html = to_html({}, env_note)
    precisions = sorted(str(p) for p in cells.precision.dropna().unique())
    # Each table's warnings are shown under it: the top of the page summarizes them and lists only the others.
    under_tables = [w for t in tables.values() for w in t.warnings]
    said = set(under_tables)
    return dashboard_html(sections, _global_sections(kernels, tables_md, timelines), title, precisions,
                          [w for w in dict.fromkeys(data.warnings) if w not in said], env_html, under_tables)


def _kernel_figures(kernels: pd.DataFrame | None) -> list[tuple]:
    if kernels is None or not len(kernels):
        return [("Kernel profiles", None, NO_KERNELS)]
    note = ""
    if "per" in kernels:
        note = ("RMSNorm and attention: per call of the module (range); '<category> kernels': per "
                + " / per ".join(sorted(set(kernels.per.dropna()) - {"call"}) or ["forward pass"])
                + ", from kernel names (these remain when compilation fuses the module ranges away)")
    if "unit" in kernels and (kernels.unit == "cpu_op").any():
        note += "; CPU runs count aten operators and CPU time, not GPU kernels"
    return [("RMSNorm, attention and other kernels", kernel_bars(kernels), note)]


def _global_sections(kernels: pd.DataFrame | None, tables_md: dict[str, str], timelines: list = ()) -> list[dict]:
    """Return the sections shown under every workload: the OOM frontier, capacity, accuracy and failures tables, then the
    kernels (table and panel), then ncu's rooflines."""
    from bench.report.dashboard import markdown_table_html

    out = []
    for heading, text in tables_md.items():
        if heading.startswith(("OOM frontier", "Capacity", "Accuracy", FAILURES)):
            out.append({"heading": heading, "figures": [], "html": markdown_table_html(text)})
    kernel_md = next((t for h, t in tables_md.items() if h.startswith("Kernels")), None)
    out.append({"heading": "Kernels", "figures": _kernel_figures(kernels) + list(timelines),
                "html": markdown_table_html(kernel_md) if kernel_md else ""})
    out += [{"heading": heading, "figures": [], "html": markdown_table_html(text)}  # ncu, after the kernel panel
            for heading, text in tables_md.items() if heading.startswith("One decode step against its roofline")]
    return out


def _kernel_page(kernels: pd.DataFrame | None, title: str, warns: list[str], tables_md: dict[str, str],
                 timelines: list = ()) -> str:
    """Return a dashboard with the kernel panel, OOM frontier, capacity and accuracy alone (stores holding no measurements)."""
    from bench.report.dashboard import dashboard_html

    precisions = sorted(str(p) for p in kernels.precision.dropna().unique()) if kernels is not None else []
    return dashboard_html([], _global_sections(kernels, tables_md, timelines), title, precisions, warns,
                          "<p class='note'>no workload results in these stores: kernel profiles, OOM probes, capacity "
                          "probes and accuracy records only</p>")

