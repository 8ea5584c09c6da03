"""One profile's decode step, read from its kernel table: kernels and µs per step by module row, by kernel category
and by kernel name, and the mean of several processes' windows of one cell.

bench.results.attribution joins two sides' decode steps into the ranked rows of `bench compare`; this module
only reads one side. A kernel table is untrusted input (a profile store's file): what it cannot read is a
BenchInputError naming the file and `bench profile` as the fix.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from bench.checks import is_finite_number
from bench.errors import BenchInputError
from bench.results.records import checked_step_ms

# Module range groups (class names, or module names for name-matched ranges) -> the row they make.
MODULE_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("RMSNorm", ("*RMSNorm", "*RmsNorm", "*LayerNorm")),
    ("attention", ("*Attention", "*Attention2", "*Attn")),
    ("MLP", ("*MLP", "*FeedForward")),
    ("decoder layer", ("*DecoderLayer", "*Block")),
    ("lm_head", ("lm_head",)),
)
OUTSIDE = "outside any range"
CATEGORY_ROWS = {"gemm": "gemm", "attention": "attention", "norm": "norm/reduction", "reduction": "norm/reduction",
                 "elementwise": "elementwise", "copy/memset": "copy", "other": "other"}
NO_RANGE = "(no range)"
WINDOW_GROUPS = ("batch", NO_RANGE)  # disjoint groups that hold every kernel of a window without step ranges


@dataclass(frozen=True)
class StepFigures:
    """One profile's decode step: kernels and µs per step by module row, by category and by kernel name."""

    tool: str
    unit: str  # "gpu_kernel" or "cpu_op"
    per: str  # "decode step", or "forward pass (prefill included)" for a window without step ranges
    steps: int
    modules: dict[str, tuple[float, float]] | None  # row -> (kernels, µs) per step; None: no module ranges
    categories: dict[str, tuple[float, float]]
    kernels: dict[str, tuple[float, float, str]]  # name -> (launches, µs, category) per step
    busy_us: float  # kernel time of a step
    wall_us: float | None  # the unprofiled step time, where the window measured one
    source: str  # the kernel table file, for the reader (the first window's, where several are averaged)
    host: dict[str, float] | None = None  # module row -> host µs per step inside it; None: the table has none
    # Where several processes' windows are averaged (mean_figures): each window's unprofiled step (µs; None where
    # it has none) and kernel table file; () for one window.
    window_walls: tuple[float | None, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def windows(self) -> int:
        return len(self.sources) or 1


def module_row(group: str) -> str:
    """Return the module row of a range group: RMSNorm, attention, MLP, decoder layer, lm_head, or the group itself."""
    if not group:
        return OUTSIDE
    return next((row for row, globs in MODULE_ROWS if any(fnmatch.fnmatchcase(group, g) for g in globs)), group)


def step_figures(table: dict, profile: dict, tool: str, source: str) -> StepFigures:
    """Return a kernel table's (a KernelTable's JSON) decode step; BenchInputError for a table it cannot read."""
    if table.get("version") not in (1, 2):
        raise BenchInputError(f"kernel table {source} has version {table.get('version')!r}: re-run `bench profile`")
    window = profile.get("window") or {}
    steps_meta = (table.get("meta") or {}).get("decode_steps")
    if steps_meta and steps_meta.get("steps"):
        n, per = int(steps_meta["steps"]), "decode step"
        rows = [(m, name, cat, float(k), float(us)) for m, name, cat, k, us in steps_meta["rows"]]
        with_modules = bool(steps_meta.get("module_ranges"))
    else:
        groups = {r["range"] for r in table["rows"]}
        if "decode_step" in groups:  # a table from before meta["decode_steps"]: the step's kernels, no modules
            chosen = {"decode_step"}
            n = next(r["instances"] for r in table["ranges"] if r["range"] == "decode_step")
            per = "decode step"
        else:  # no step ranges (a compiled generate cell): the whole window per forward pass
            chosen = set(WINDOW_GROUPS) & groups
            n = (int(window.get("decode_steps") or 0) if window.get("kind") == "decode"
                 else int(window.get("batches") or 1) * (int(window.get("decode_steps") or 0) + 1)) or 1
            per = "decode step" if window.get("kind") == "decode" else "forward pass (prefill included)"
        # torch.profiler on a GPU repeats each range as a device "kernel" named after it, in (no range): not a kernel
        rows = [("", r["kernel"], r["category"], float(r["kernels"]), float(r["total_us"]))
                for r in table["rows"] if r["range"] in chosen
                and not (r["range"] == NO_RANGE and r["kernel"].split(":", 1)[0] in groups | {"decode_step", "prefill"})]
        with_modules = False
    modules: dict[str, list[float]] = {}
    categories: dict[str, list[float]] = {}
    kernels: dict[str, list] = {}
    for module, name, cat, k, us in rows:
        for bucket, key in ((modules, module_row(module)), (categories, CATEGORY_ROWS.get(cat, cat))):
            slot = bucket.setdefault(key, [0.0, 0.0])
            slot[0] += k / n
            slot[1] += us / n
        slot = kernels.setdefault(name, [0.0, 0.0, cat])
        slot[0] += k / n
        slot[1] += us / n
    busy = sum(us for _, us in categories.values())
    step_ms = checked_step_ms(profile, f"profile record of {source}")
    wall = step_ms * 1e3 if step_ms and per == "decode step" else None
    host = None
    if with_modules and steps_meta.get("host_us") is not None:
        raw = steps_meta["host_us"]
        if not isinstance(raw, dict) or not all(
                isinstance(k, str) and is_finite_number(v)
                and v >= 0 for k, v in raw.items()):
            raise BenchInputError(f"kernel table {source}: meta.decode_steps.host_us must map range groups to finite "
                                  "µs of 0 or more: re-run `bench profile`")
        host = {}
        for group, us in raw.items():
            host[module_row(group)] = host.get(module_row(group), 0.0) + us / n
    return StepFigures(tool, table.get("unit", "?"), per, n, {k: tuple(v) for k, v in modules.items()} if with_modules
                       else None, {k: tuple(v) for k, v in categories.items()},
                       {k: tuple(v) for k, v in kernels.items()}, busy, wall, source, host)


def mean_figures(windows: list[StepFigures]) -> StepFigures:
    """Return the mean decode step of several processes' windows of one cell (one invocation's `bench profile
    --processes N`): per row, kernels and µs per step averaged over the windows (a row a window lacks counts 0 there);
    module rows and host times only where every window has them; the unprofiled step only where every window measured
    one. BenchInputError where the windows count different things (tool, unit, per)."""
    if len(windows) == 1:
        return windows[0]
    first = windows[0]
    if any((w.tool, w.unit, w.per) != (first.tool, first.unit, first.per) for w in windows):
        raise BenchInputError(f"the profile windows of one cell count different things ({first.source} and others): "
                              "re-run `bench profile`")
    n = len(windows)

    def mean(maps: list[dict | None]) -> dict | None:  # row -> (kernels, µs), averaged; None where a window has none
        if any(m is None for m in maps):
            return None
        out: dict[str, list[float]] = {}
        for m in maps:
            for k, (kernels, us) in m.items():
                slot = out.setdefault(k, [0.0, 0.0])
                slot[0] += kernels / n
                slot[1] += us / n
        return {k: (v[0], v[1]) for k, v in out.items()}

    kernels = mean([{k: v[:2] for k, v in w.kernels.items()} for w in windows])
    category = {k: v[2] for w in windows for k, v in w.kernels.items()}
    hosts = [w.host for w in windows]
    host = None if any(h is None for h in hosts) else {
        k: sum(h.get(k, 0.0) for h in hosts) / n for k in dict.fromkeys(k for h in hosts for k in h)}
    walls = tuple(w.wall_us for w in windows)
    return StepFigures(first.tool, first.unit, first.per, sum(w.steps for w in windows), mean([w.modules for w in windows]),
                       mean([w.categories for w in windows]),
                       {k: (*v, category[k]) for k, v in kernels.items()}, sum(w.busy_us for w in windows) / n,
                       None if any(x is None for x in walls) else sum(walls) / n, first.source, host, walls,
                       tuple(w.source for w in windows))
