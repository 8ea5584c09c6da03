"""How long a planned run will take, from stored records of earlier runs (`bench run --dry-run`).

Nothing is assumed: every figure comes from a stored record, and what no record covers is
listed as unknown. Per cell and worker process (one run), a cell costs its warm-up passes
and `trials` measured passes; per build group and run, a worker loads (build + load). Sources,
best first:

1. the same cell's own records (its latest context): its trials' wall time, its warm-up passes (the mean over
   that context's processes: the first one on a machine may compile what the next ones reuse);
   or, where its warm-up ended in a final failure (an OOM under a memory cap), one process up to
   that failure and no measured pass (a re-run would not measure it either);
2. a record of the same build key and max_batch_size (another workload, or options outside
   the build key): its output tok/s scaled to this cell's output tokens, its warm-up passes
   (which include compilation where the cell compiles, so they stand for the cold cost);
3. nothing: the cell is unknown and left out of the total.

A GPU hf record from before the warm-up ran every batch of the pass (2026-12-07) stands for its stored warm-up plus
one of its measured passes per warm-up pass, and its line says so.

Also not known from records: the worker process's start (interpreter and imports) before the
build, and whether a compile cache is warm (the figures are whatever the stored run saw; each
record's `build.compile_cache` says which).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.checks import is_seconds


@dataclass
class CellEstimate:
    label: str
    runs: int  # worker processes still to run for this cell
    trials: int  # measured passes per process
    warmup_s: float | None = None  # per process
    trial_s: float | None = None  # per measured pass
    source: str = "unknown"
    cache: str | None = None  # compile cache state the reference run saw (cold / warm)

    @property
    def total_s(self) -> float | None:
        if self.warmup_s is None or self.trial_s is None:
            return None
        return self.runs * (self.warmup_s + self.trials * self.trial_s)


@dataclass
class Estimate:
    cells: list[CellEstimate] = field(default_factory=list)
    loads_s: float = 0.0  # build + load of every (group, run) with a stored figure
    loads_unknown: int = 0  # (group, run) worker starts without one
    unknown: list[str] = field(default_factory=list)

    @property
    def known_s(self) -> float:
        return self.loads_s + sum(c.total_s or 0.0 for c in self.cells)

    def text(self) -> str:
        """Return the estimate in words: total, per cell, what is not known."""
        known = [c for c in self.cells if c.total_s is not None]
        if self.cells and not known:
            return (f"estimate: no stored figure for any of the {len(self.cells)} cell(s) still to run (nor for their build "
                    "keys and batch sizes), so no estimate; after a first run, --dry-run estimates from its records "
                    "(or pass --history STORE of an earlier run)")
        lines = [f"estimate from stored records: {self.known_s:.0f} s ({self.known_s / 60:.1f} min) for {len(known)} of "
                 f"{len(self.cells)} cell(s) still to run, worker loads included"]
        for c in self.cells:
            if c.total_s is None:
                continue
            cache = f", compile cache {c.cache}" if c.cache else ""
            lines.append(f"  {c.label}: {c.runs} run(s) x (warm-up {c.warmup_s:.1f} s + {c.trials} x {c.trial_s:.1f} s) "
                         f"= {c.total_s:.0f} s [{c.source}{cache}]")
        lines.append(f"  worker loads (build + load): {self.loads_s:.0f} s"
                     + (f"; {self.loads_unknown} worker start(s) with no stored load time, not counted" if self.loads_unknown else ""))
        not_known = [c.label for c in self.cells if c.total_s is None]
        if not_known:
            lines.append(f"not known ({len(not_known)} cell(s) with no stored figure of theirs or of their build key and "
                         "batch size; not counted): " + "; ".join(not_known))
        lines.append("not counted either: each worker process's start (interpreter, imports) before its build, and "
                     "the workload's tokenization on a first run")
        return "\n".join(lines)


def _trial_s(rec) -> float | None:
    """A record's trial seconds (its end less its start, else its duration_s), or None where neither is a number of
    seconds (a store is untrusted input)."""
    if rec.started_at is not None and rec.ended_at is not None and rec.ended_at > rec.started_at:
        seconds = rec.ended_at - rec.started_at
    else:
        seconds = rec.metric("duration_s")
    return float(seconds) if is_seconds(seconds) else None


def _warmup_s(rec) -> float | None:
    """A record's warm-up seconds (its passes' sum), or None where the record has no usable figure (a store is
    untrusted input: a pass that is no number of seconds, or a sum past any float, leaves the cell unknown)."""
    warmup = rec.extra.get("warmup")
    passes = warmup.get("warmup_pass_s") if isinstance(warmup, dict) else None
    if not isinstance(passes, list) or not all(is_seconds(v) for v in passes):
        return None
    total = sum(passes)
    return float(total) if is_seconds(total) else None


def _warmup_then(rec, trial_s: float | None, passes: int) -> tuple[float | None, str]:
    """Return (a record's warm-up seconds as this harness would run them, a note): a GPU record from before the hf
    warm-up ran every batch of the pass (no `batches_warmed`, before 2026-12-07) ran one batch per batch size, so
    each warm-up pass now costs about one measured pass more."""
    stored = _warmup_s(rec) if passes else 0.0
    warmup = rec.extra.get("warmup")
    if (stored is None or not passes or trial_s is None or not isinstance(warmup, dict) or "batches_warmed" in warmup
            or rec.cell.get("backend") != "hf" or not str(rec.cell.get("device", "")).startswith("cuda")):
        return stored, ""
    return stored + passes * trial_s, " (its warm-up from before the every-batch warm-up, plus a measured pass each)"


def _per_process(records) -> list:
    """Return one record per worker process (`run`) of one context's records of one cell, in run order."""
    per_run = {}
    for r in sorted(records, key=lambda r: (r.run, r.trial)):
        per_run.setdefault(r.run, r)
    return list(per_run.values())


def _caches(processes) -> str | None:
    """Return the compile cache states the processes (_per_process) saw, in run order ('cold, then warm'); None where
    none says."""
    states = list(dict.fromkeys(s for s in (r.build.get("compile_cache") for r in processes) if isinstance(s, str) and s))
    return ", then ".join(states) or None


def _processes_warmup(processes, trial_s: float | None, passes: int) -> tuple[float | None, str]:
    """Return (the warm-up of one process, a note) from one run context's processes of one cell (_per_process: each
    `run` once; its trials share one warm-up): their mean, since the first process on a machine pays what the next
    reuse (a compile's cold cache: 30.9 s, then 11.8 s, for the same compiled cell on an H100, 2026-12-07), and a
    later one alone would stand for neither. None where no process has a usable figure."""
    found = [_warmup_then(r, trial_s, passes) for r in processes]
    seconds = [w for w, _ in found if w is not None]
    return (sum(seconds) / len(seconds) if seconds else None), next((n for w, n in found if w is not None), "")


def _failed_warmup_s(rec) -> float | None:
    """The seconds a failed warm-up ran, or None where its record has no usable figure (a store is untrusted input)."""
    startup = rec.extra.get("startup")
    seconds = startup.get("warmup_s") if isinstance(startup, dict) else None
    return float(seconds) if is_seconds(seconds) else None


def _latest(records):
    return max(records, key=lambda r: (r.context.started_at or 0.0, r.ended_at or 0.0))


def estimate_run(matrix, planned, records, output_tokens) -> Estimate:
    """Return the estimate of running `planned` (bench.runner.matrix.plan) from stored records.

    output_tokens(workload spec) -> its output tokens, for the scaling of source 2 (called only
    for cells that need it: building a workload tokenizes its source).
    """
    from bench.results.records import FINAL_FAILURES, Measurement

    ok = [r for r in records if isinstance(r, Measurement) and r.ok]
    # A cell whose warm-up ended in a final failure (an OOM) costs one process up to that failure: its record keeps the
    # warm-up's seconds (extra.startup.warmup_s) since 2026-12-06; older failure records do not, and stay unknown.
    failed: dict[str, object] = {}
    for r in records:
        if (isinstance(r, Measurement) and r.status in FINAL_FAILURES and str(r.error or "").startswith("warm-up: ")
                and _failed_warmup_s(r) is not None):
            if r.cell_id not in failed or (r.ended_at or 0.0) > (failed[r.cell_id].ended_at or 0.0):
                failed[r.cell_id] = r
    by_cell: dict[str, list] = {}
    by_key_bs: dict[tuple, list] = {}
    loads: dict[str, list[float]] = {}
    for r in ok:
        by_cell.setdefault(r.cell_id, []).append(r)
        key = r.build.get("key_hash")
        by_key_bs.setdefault((key, r.cell.get("max_batch_size")), []).append(r)
        if key and r.build.get("load_s") is not None:
            loads.setdefault(key, []).append(float(r.build.get("build_s") or 0.0) + float(r.build["load_s"]))
    settings = matrix.settings
    est = Estimate()
    group_runs: dict[str, int] = {}
    for p in planned:
        key = p.cell.build_key().key_hash
        group_runs[key] = max(group_runs.get(key, 0), len(p.runs))
        ce = CellEstimate(p.cell.label, len(p.runs), settings.trials)
        own = by_cell.get(p.cell.cell_id)
        if own:
            ref = _latest(own)
            same = [r for r in own if r.context.run_id == ref.context.run_id]
            trials = [t for t in (_trial_s(r) for r in same) if t is not None]
            ce.trial_s = sum(trials) / len(trials) if trials else None
            processes = _per_process(same)
            ce.warmup_s, note = _processes_warmup(processes, ce.trial_s, settings.warmup)
            ce.source, ce.cache = "this cell's records" + note, _caches(processes)
        elif p.cell.cell_id in failed:  # before a sibling's figures: this cell's own run ended in its warm-up
            ref = failed[p.cell.cell_id]
            # the failure is final (bench.runner.matrix.plan): one process, its warm-up up to the failure, no trials
            ce.runs, ce.trials, ce.trial_s, ce.warmup_s = 1, 0, 0.0, _failed_warmup_s(ref)
            ce.source = f"this cell's warm-up, which ended in {ref.status}: one process"
            ce.cache = ref.build.get("compile_cache")
        else:
            similar = by_key_bs.get((key, p.cell.max_batch_size))
            tokens = output_tokens(p.cell.workload) if similar else None
            if similar and tokens:
                ref = _latest(similar)
                rate = ref.metric("output_throughput")
                ce.trial_s = tokens / rate if rate else None
                processes = _per_process([r for r in similar
                                          if r.cell_id == ref.cell_id and r.context.run_id == ref.context.run_id])
                ce.warmup_s, note = _processes_warmup(processes, ce.trial_s, settings.warmup)
                ce.source = f"build key and batch size of {ref.label}, scaled to {tokens} output tokens{note}"
                ce.cache = _caches(processes)
        est.cells.append(ce)
    for key, runs in group_runs.items():
        if key in loads:
            est.loads_s += runs * sum(loads[key]) / len(loads[key])
        else:
            est.loads_unknown += runs
    return est


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def estimate_probes(searches: list[tuple], max_probes: int, records) -> tuple[int, float | None, str]:
    """Return (most probes, stored seconds per probe or None, a line of text) for `bench oom` searches.

    searches: (cell, input, output) per search; max_probes: the most a search may take
    (bench.oom.search.probe_budget). A probe is one worker process: its stored time is its
    build + load + pass (the process's start is not recorded).
    """
    from bench.results.records import OomProbe

    keys = {c.build_key().key_hash for c, _, _ in searches}
    seconds = [float(r.build.get("build_s") or 0.0) + float(r.build.get("load_s") or 0.0)
               + (r.ended_at - r.started_at) for r in records
               if isinstance(r, OomProbe) and r.build.get("key_hash") in keys and r.build.get("load_s") is not None
               and r.started_at is not None and r.ended_at is not None]
    per = _mean(seconds)
    n = len(searches) * max_probes
    if per is None:
        return n, None, f"OOM search: at most {n} probes (fresh worker processes); no stored probe of these configurations: time not known"
    return n, per, (f"OOM search: at most {n} probes x {per:.1f} s (stored probes: build + load + pass; process start "
                    f"not counted) = at most {n * per:.0f} s")


def estimate_profiles(cells, records) -> tuple[float | None, str]:
    """Return (stored seconds for the sessions, or None, a line of text) for `bench profile` of these cells."""
    from bench.results.records import Profile

    ids = {c.cell_id for c in cells}
    by_cell: dict[str, list[float]] = {}
    for r in records:  # a timed process's window (`bench run --profile-window`) times the window alone, not a session
        if (isinstance(r, Profile) and r.cell_id in ids and r.started_at is not None and r.ended_at is not None
                and not r.from_timed_process):
            by_cell.setdefault(r.cell_id, []).append(r.ended_at - r.started_at)
    known = {cid: _mean(v) for cid, v in by_cell.items()}
    missing = [c.label for c in cells if c.cell_id not in known]
    total = sum(known.values())
    text = f"profile: {len(cells)} session(s); stored session times cover {len(known)}: {total:.0f} s"
    if missing:
        text += "; not known: " + "; ".join(missing)
    return (total if known else None), text


def _latest_accuracy(records) -> dict:
    """Return {cell_id: its latest ok Accuracy record with both times}."""
    from bench.results.records import Accuracy

    latest: dict[str, Accuracy] = {}
    for r in records:
        if (isinstance(r, Accuracy) and r.status == "ok" and r.started_at is not None and r.ended_at is not None
                and r.ended_at >= r.started_at):
            if r.cell_id not in latest or r.started_at > latest[r.cell_id].started_at:
                latest[r.cell_id] = r
    return latest


def _seconds(value) -> float:
    """Return value as seconds where a stored record's field is a finite, non-negative number (not a bool), else 0.0:
    a store is untrusted input, and a NaN would stop the schedule's virtual clock."""
    return float(value) if is_seconds(value) else 0.0


def _measure_s(record) -> float:
    return _seconds((record.accuracy or {}).get("measure_s"))


def _load_s(record) -> float:
    """Return the seconds an accuracy record's session spent loading models (its load_s values)."""
    loads = (record.accuracy or {}).get("load_s")
    return sum(_seconds(v) for v in loads.values()) if isinstance(loads, dict) else 0.0


def _made_early(record) -> bool:
    """Return whether an accuracy record was scored from an early session's capture (bench.accuracy.early)."""
    capture = (record.accuracy or {}).get("capture")
    return isinstance(capture, dict) and isinstance(capture.get("made_by"), str)


def estimate_accuracy(planned: list[tuple], records, captured=frozenset(), parallel: int = 1,
                      capacity: float | None = None, early=frozenset()) -> tuple[float | None, str]:
    """Return (stored seconds for the sessions, or None, a line of text) for `bench accuracy`'s sessions.

    planned: [(baseline cell, mode, cells)] as bench.accuracy.driver.sessions makes them. A session's time is its
    records' ended_at - started_at (every record of one session carries the session process's own times, its start
    and its model loads included), from the latest ok record of each of its cells; a session none of whose cells
    has one is not known. A failed session's time (it stopped early) is not an estimate of a whole one.

    captured: the cells the run step captures (bench.execution.accuracy_capture): scored from the capture, their
    measuring is done in the run (capture_seconds counts it there). Where their stored record was measured in the
    session, its measuring (and, for a session all of whose cells are captured, its model load) is taken off.

    parallel: sessions at once (`bench accuracy --parallel N`). Above 1 the total is the makespan of the schedule
    bench.execution.session_pool runs (each baseline's session before the others of its group, N at a time; a
    session not known counts 0 s), and the text gives it beside the one-at-a-time sum. capacity: the GPU's memory
    (bytes), where known: a session whose stored peak would not fit beside those running waits, as it will in the run
    (bench.execution.session_pool.session_size; a session with no stored peak is not held back).

    early: the cells an early session may capture beside their baseline's session (bench.accuracy.early.capturable, less
    those `captured`). Above 1 at a time, a cells session of a group whose baseline session runs, with such cells,
    is two in the schedule: its measuring, early (the stored session's time; where the stored records were scored from
    an early capture, its load and measuring), and its scoring after both (those records' own span, else 0 s).
    """
    from bench.execution.session_pool import makespan, session_size
    from bench.results.query import session_peaks

    latest = _latest_accuracy(records)
    peaks = session_peaks(records)  # the run's own rule for a session's size
    total, covered, missing, scored, beside, sized, early_n = 0.0, 0, [], 0, 0, 0, 0
    groups: dict[str, tuple] = {}  # per baseline: (its session, the others, the early ones), as session_pool's groups
    for base, mode, cells in planned:
        ids = ([base.cell_id] if mode == "baseline" else []) + [c.cell_id for c in cells]
        spans = [latest[i].ended_at - latest[i].started_at for i in ids if i in latest]
        seconds = 0.0
        if spans:
            moved = [latest[c.cell_id] for c in cells if c.cell_id in captured and c.cell_id in latest
                     and not latest[c.cell_id].accuracy.get("capture")]
            off = sum(_measure_s(r) for r in moved)
            if mode == "cells" and moved and all(c.cell_id in captured for c in cells):
                off += max((_load_s(r) for r in moved), default=0.0)  # nothing to load: every cell is scored from a file
            seconds = max(max(spans) - off, 0.0)
            total += seconds
            covered += 1
            beside += any(_concurrent(latest[i]) for i in ids if i in latest)
        else:
            missing.append(f"{'the baseline session of ' if mode == 'baseline' else 'the session of '}"
                           f"{(base if mode == 'baseline' else cells[0]).label}")
        scored += sum(c.cell_id in captured for c in cells)
        size = session_size([peaks.get(i) for i in ids])
        sized += size is not None
        gate, others, firsts = groups.get(base.cell_id, (None, [], []))
        item = (seconds, size)
        if mode == "baseline":
            groups[base.cell_id] = (item, others, firsts)
            continue
        got = [latest[c.cell_id] for c in cells if c.cell_id in latest]
        made_early = bool(got) and all(_made_early(r) for r in got)
        # stored: captured by an early session, then scored: its load and measuring are the early session's time
        early_s = max(_load_s(r) for r in got) + sum(_measure_s(r) for r in got) if made_early else 0.0
        total += early_s
        if gate is not None and parallel > 1 and any(c.cell_id in early for c in cells):
            if made_early:
                firsts.append(((early_s, size), len(others)))
            else:  # stored: measured in the session, now its early session's work; the scoring's time not known
                firsts.append(((seconds, size), len(others)))
                item = (0.0, size)
            early_n += 1
        else:
            item = (seconds + early_s, size)
        groups[base.cell_id] = (gate, others + [item], firsts)
    text = f"accuracy: {len(planned)} session(s); stored session times cover {covered}: "
    if parallel > 1 and covered:
        span = makespan([g if g[0] is not None else (None, g[1]) for g in groups.values()], parallel, capacity)
        text += f"{parallel} at a time: {span:.0f} s; one at a time: {total:.0f} s"
        if capacity is not None:
            text += (f" (the GPU's {capacity / 1e9:.0f} GB shared by the sessions' stored peaks: {sized} of "
                     f"{len(planned)} known)")
        total = span
    else:
        text += f"{total:.0f} s"
    if beside:
        text += f" ({beside} of them measured beside other sessions: not solo times)"
    if early_n and parallel > 1:
        text += f" ({early_n} session(s) measured early, beside their baselines' sessions, and scored after them)"
    if scored:
        text += f" ({scored} cell(s) scored from the run's captures, their measuring counted in the run step)"
    if missing:
        text += "; not known: " + "; ".join(missing)
    return (total if covered else None), text


def _concurrent(record) -> bool:
    """Whether an accuracy record's session ran beside others (`bench accuracy --parallel`): its time is not solo."""
    value = (record.accuracy or {}).get("concurrent_sessions")
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def capture_seconds(cells, records) -> tuple[float, str]:
    """Return (seconds, a line of text) of the run step's accuracy captures of `cells`: each cell's latest stored
    accuracy measuring (a capture's, or a session's, which feeds the same tokens), the cells with none named."""
    latest = _latest_accuracy(records)
    known = [c for c in cells if c.cell_id in latest]
    seconds = sum(_measure_s(latest[c.cell_id]) for c in known)
    text = f"accuracy captures after the trials: {len(cells)} cell(s); stored measuring covers {len(known)}: {seconds:.0f} s"
    unknown = [c.label for c in cells if c.cell_id not in latest]
    if unknown:
        text += "; not known: " + "; ".join(unknown)
    return seconds, text
