"""The speedup baseline: the default one, matching it to cells, and the messages when it matches none or several."""

from __future__ import annotations

import json
import math

from bench.errors import BenchInputError
from bench.spec.cells import _MISSING, RULE_KEYS, Cell, cell_label

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
            cell_label(c.backend, c.precision, c.max_batch_size, c.workload.name) + (" [" + ", ".join(
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


def matches_baseline(fields: dict, options: dict, baseline: dict) -> bool:
    """Return whether a cell with these fields (backend, precision, max_batch_size, ...) and options is the one
    `baseline` names: THE rule, for matrix cells (here) and report rows (bench.report.tables) alike.

    Each key of the baseline names a field, else an option; values compare as text (a TOML 1 and a
    stored "1" are one value); a key the cell has neither as field nor option does not match.
    """
    for key, want in baseline.items():
        have = fields[key] if key in fields else options.get(key, _MISSING)
        if have is _MISSING or str(have) != str(want):
            return False
    return True


def _baseline_matches(cell: Cell, baseline: dict) -> bool:
    fields = {"backend": cell.backend, "model": cell.model, "precision": cell.precision,
              "max_batch_size": cell.max_batch_size, "workload": cell.workload.name, "device": cell.device}
    return matches_baseline(fields, cell.options_dict, baseline)


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
