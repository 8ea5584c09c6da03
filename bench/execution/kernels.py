"""KernelTable: kernels per named-range instance and GPU time, plus categories by kernel name.

Both collectors (torch.profiler, nsys) reduce a profiled window to a list of
`AttributedKernel` (one launched kernel — or, on CPU, one leaf operator — with the range
instances that enclose its launch, outermost first) and the set of range instances seen.
`build_kernel_table` turns that into the one table layout every report reads.

Range labels are "group:detail" (e.g. "Qwen2RMSNorm:model.layers.0.input_layernorm",
"decode_step:3"); tables aggregate over instances of a group (the part before the first
colon), so "per RMSNorm call" means the median over every RMSNorm instance in the window.

Categories come from the kernel name alone, so they still work where ranges vanish: compiled
graphs and engines fuse across module boundaries (an Inductor Triton kernel that holds an
RMSNorm is named `triton_red_fused_..._mean_pow_rsqrt...`; TensorRT-LLM's is `generalRmsNorm`).

Every table also holds, in meta["decode_steps"], the kernels of its decode-step ranges by the
innermost module range that launched them (`decode_step_breakdown`): the exclusive view per step
that `bench compare`'s attribution reads (bench/results/attribution.py), which the inclusive rows,
summed over prefill and decode alike, cannot give.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.errors import BenchInputError

CATEGORIES = ("norm", "attention", "gemm", "reduction", "elementwise", "copy/memset", "other")
NO_RANGE = "(no range)"  # the group of kernels launched outside every named range
# 2: KernelRow.instances_ran, and its per-instance median taken over those instances (1: over every instance)
KERNEL_TABLE_VERSION = 2
READABLE_VERSIONS = (1, 2)

# Order matters: attention before gemm (fmha_cutlassF is attention), norm before reduction and
# elementwise (a fused Triton RMSNorm is also a reduction kernel), gemm before reduction
# (cuBLAS's splitKreduce finishes a gemm), reduction and copy before elementwise.
_CATEGORY_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (cat, re.compile(rx, re.IGNORECASE))
    for cat, rx in (
        # flash/fmha/xqa/mmha: FlashAttention, cutlass memory-efficient, TensorRT-LLM kernels;
        # softmax only appears in attention in a decoder; rope/KV-cache updates belong to it.
        ("attention", r"flash|fmha|attention|attn|sdpa|scaled_dot_product|\bmha|mmha|xqa|softmax"
                      r"|rotary|rope|kv_?cache|cutlassF|efficient_attention"),
        ("norm", r"rms_?norm|layer_?norm|group_?norm|batch_?norm|triton\w*rsqrt"),
        # cuBLAS(Lt) (gemv/gemm/nvjet on Hopper/xmma), cutlass, TensorRT-LLM weight-only
        # (fpA_intB), Inductor mm templates (triton_tem_fused_mm) and the aten ops on CPU.
        ("gemm", r"gemm|gemv|cutlass|cublas|nvjet|xmma|matmul|splitkreduce|fpa_intb|triton_tem"
                 r"|triton\w*_mm|aten::(?:mm|addmm|bmm|baddbmm|linear)$"),
        # A reduction reads many elements to write few: aten's reduce_kernel (sum, mean, max,
        # argmax), cub's DeviceReduce, generic ones (clover::par_reduce_kernel in the nsys 2024.5
        # export of tests/data/nsys), Inductor's triton_red_/triton_per_ (not norms: caught above).
        ("reduction", r"reduce_kernel|par_reduce|devicereduce|segmentedreduce|reduction|triton_red_|triton_per_"
                      r"|^aten::(?:mean|sum|amax|amin|max|min|argmax|argmin|cumsum|prod|norm|var|std|logsumexp)$"),
        # Memcpy/Memset activity records, aten copy kernels; Triton names with `_to_copy` are
        # fused pointwise kernels, not copies, so triton_ names are excluded here.
        ("copy/memset", r"^(?!triton_).*(?:memcpy|memset|copy|catarray|fill_kernel)"
                        r"|^aten::(?:copy_|fill_|zero_|zeros|ones|full|cat|clone|contiguous|to|_to_copy"
                        r"|index_copy_|slice_scatter|empty\w*|new_\w+)$"),
        # BLAS-1 axpy (saxpy in the nsys 2022.2 export of tests/data/nsys) is elementwise too.
        ("elementwise", r"elementwise|vectorized|pointwise|triton_|silu|gelu|act_and_mul|axpy"
                        r"|add_?bias|residual|^aten::(?:add|add_|mul|mul_|sub|div|pow|rsqrt|sqrt|silu|neg"
                        r"|exp|sigmoid|tanh|where|masked_fill\w*|cos|sin|float|type_as|relu"
                        r"|gelu|maximum|minimum|eq|ne|lt|gt|le|ge|bitwise_\w+|clamp\w*)$"),
    )
)


def categorize(kernel_name: str) -> str:
    """Return the category of a kernel (or CPU operator) name: one of CATEGORIES."""
    for cat, rx in _CATEGORY_PATTERNS:
        if rx.search(kernel_name):
            return cat
    return "other"


def range_group(label: str) -> str:
    """Return the group a range label aggregates under: the text before its first colon."""
    return label.split(":", 1)[0]


@dataclass(frozen=True)
class AttributedKernel:
    """One kernel launch (or CPU operator) and the range instances enclosing its launch.

    `ranges` holds (label, instance_key) pairs, outermost first; instance_key identifies one
    push of the range (profiler event id, NVTX row id).
    """

    name: str
    duration_us: float
    ranges: tuple[tuple[str, object], ...] = ()
    start_ns: int | None = field(default=None, compare=False)  # GPU start (nsys), for timelines


@dataclass(frozen=True)
class KernelRow:
    range: str
    kernel: str
    category: str
    instances: int  # instances of the range in the window (with or without this kernel)
    kernels: int  # launches of this kernel inside the range, all instances together
    kernels_per_instance: float  # kernels / instances: over every instance, those that did not launch it too
    # Median of this kernel's time in one instance, over the instances that launched it (a kernel
    # that runs in 1 of 8 decode steps gets its time there, not the 0 of the other 7); version-1
    # tables took it over every instance and hold instances_ran None.
    gpu_us_per_instance_median: float
    total_us: float
    instances_ran: int | None = None  # instances that launched this kernel at least once


@dataclass(frozen=True)
class RangeSummary:
    range: str
    instances: int
    kernels_per_instance: float  # mean (instances of a range usually launch the same set)
    kernels_per_instance_median: float
    gpu_us_per_instance_median: float
    total_us: float
    kernels_per_instance_by_category: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CategoryRow:
    category: str
    kernels: int
    total_us: float
    share: float  # of the window's total kernel time


@dataclass
class KernelTable:
    """Per-range and per-category kernel counts and times of one profiled window."""

    source: str  # "torch.profiler" or "nsys"
    unit: str  # "gpu_kernel" or "cpu_op" (CPU-only runs count leaf operators)
    scope: str  # "inclusive": a kernel counts in every enclosing range; "innermost"
    rows: list[KernelRow]
    ranges: list[RangeSummary]
    categories: list[CategoryRow]
    total_kernels: int
    total_us: float
    meta: dict = field(default_factory=dict)

    def range(self, group: str) -> RangeSummary:
        """Return the summary of one range group; KeyError naming the groups that exist."""
        for r in self.ranges:
            if r.range == group:
                return r
        raise KeyError(f"no range {group!r} in this table; ranges: {[r.range for r in self.ranges]}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["version"] = KERNEL_TABLE_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict) -> KernelTable:
        if d.get("version") not in READABLE_VERSIONS:
            raise BenchInputError(f"kernel table version {d.get('version')!r} is not one of {READABLE_VERSIONS}: "
                                  "re-run `bench profile` (or `bench kernels` on its nsys export)")
        for key in ("rows", "ranges", "categories"):
            if not isinstance(d.get(key), list):
                raise BenchInputError(f"kernel table: {key} is {type(d.get(key)).__name__}, not a list")
        return _typed(cls, {
            **d, "meta": d.get("meta", {}),
            "rows": [_typed(KernelRow, r, f"rows[{i}]") for i, r in enumerate(d["rows"])],
            "ranges": [_typed(RangeSummary, r, f"ranges[{i}]") for i, r in enumerate(d["ranges"])],
            "categories": [_typed(CategoryRow, r, f"categories[{i}]") for i, r in enumerate(d["categories"])],
        }, "", skip=("version",))

    def save(self, path: str | Path) -> Path:
        from bench.files import write_atomic

        return write_atomic(path, json.dumps(self.to_dict(), indent=1, sort_keys=True, allow_nan=False))

    @classmethod
    def load(cls, path: str | Path) -> KernelTable:
        """Return the table a kernel_table.json holds; BenchInputError naming the file and what is wrong with it."""
        try:
            data = json.loads(Path(path).read_bytes().decode("utf-8"))
            if not isinstance(data, dict):
                raise BenchInputError(f"it holds JSON {type(data).__name__}, not a kernel table's object")
            return cls.from_dict(data)
        except BenchInputError as exc:
            raise BenchInputError(f"cannot read kernel table {str(path)!r}: {exc}") from exc
        except (OSError, ValueError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError
            raise BenchInputError(f"cannot read kernel table {str(path)!r}: {exc}") from exc

    def to_markdown(self, top: int = 8) -> str:
        """Return Markdown: the range summaries, the category table, the top kernels of each range."""
        unit = "kernels" if self.unit == "gpu_kernel" else "CPU ops"
        time_col = "GPU us" if self.unit == "gpu_kernel" else "CPU us"
        out = [f"Source: {self.source}; counts {unit}, {self.scope} attribution; "
               f"{self.total_kernels} {unit}, {self.total_us:.1f} {time_col} in the window.", "",
               f"| range | instances | {unit} per instance | {time_col} per instance (median) | total {time_col} |",
               "|---|---|---|---|---|"]
        for r in self.ranges:
            out.append(f"| {r.range} | {r.instances} | {r.kernels_per_instance:.2f} | "
                       f"{r.gpu_us_per_instance_median:.1f} | {r.total_us:.1f} |")
        out += ["", f"| category | {unit} | total {time_col} | share |", "|---|---|---|---|"]
        for c in self.categories:
            out.append(f"| {c.category} | {c.kernels} | {c.total_us:.1f} | {100 * c.share:.1f}% |")
        by_range = defaultdict(list)
        for row in self.rows:
            by_range[row.range].append(row)
        for rng, rows in by_range.items():
            out += ["", f"Top {unit} in `{rng}` (per instance: launches over every instance of the range; "
                    f"the median {time_col} is over the instances that launched the kernel):", "",
                    f"| kernel | category | per instance | instances that ran it | {time_col} per instance that ran it "
                    f"(median) | total {time_col} |",
                    "|---|---|---|---|---|---|"]
            for row in sorted(rows, key=lambda r: -r.total_us)[:top]:
                name = row.kernel if len(row.kernel) <= 90 else row.kernel[:87] + "..."
                ran = "-" if row.instances_ran is None else f"{row.instances_ran} of {row.instances}"
                out.append(f"| `{name}` | {row.category} | {row.kernels_per_instance:.2f} | {ran} | "
                           f"{row.gpu_us_per_instance_median:.2f} | {row.total_us:.1f} |")
        return "\n".join(out) + "\n"


STEP_GROUP = "decode_step"
PHASE_GROUPS = ("decode_step", "prefill", "batch")  # ranges around whole forward passes, not modules
DECODE_STEPS_VERSION = 1


def write_side_tables(table_path: Path) -> None:
    """Write kernel_table.md and categories.csv next to a saved kernel table (the one place that writes them)."""
    import csv
    import io

    from bench.files import write_atomic

    table = KernelTable.load(table_path)
    write_atomic(table_path.with_suffix(".md"), table.to_markdown())
    text = io.StringIO(newline="")
    w = csv.writer(text)
    w.writerow(["category", "kernels", "total_us", "share"])
    for c in table.categories:
        w.writerow([c.category, c.kernels, f"{c.total_us:.3f}", f"{c.share:.6f}"])
    write_atomic(table_path.with_name("categories.csv"), text.getvalue())


@dataclass(frozen=True)
class RangeSpan:
    """One range instance on the host's timeline (one thread): the launches inside it were issued between start and
    end. Collectors that see the host (torch.profiler's record_function events, nsys's NVTX rows) give these."""

    label: str
    start_us: float
    end_us: float


def host_time_by_module(spans: list[RangeSpan]) -> dict[str, float] | None:
    """Return the host time inside the decode-step ranges by innermost module range group ("" outside every module
    range), summed over the steps; None when there is no step.

    Where the GPU waits for the host (launch gaps), kernel time cannot say which module's host code is slow: the host
    time each module range holds exclusively (its span less its module children's) can. Spans nest by time.
    """
    steps = [s for s in spans if range_group(s.label) == STEP_GROUP]
    if not steps:
        return None
    modules = sorted((s for s in spans if range_group(s.label) not in PHASE_GROUPS),
                     key=lambda s: (s.start_us, -s.end_us))
    out: dict[str, float] = defaultdict(float)
    for step in steps:
        inside = [m for m in modules if m.start_us >= step.start_us and m.end_us <= step.end_us]
        stack: list[RangeSpan] = []
        top_level = 0.0
        for m in inside:
            while stack and m.start_us >= stack[-1].end_us:
                stack.pop()
            length = max(0.0, m.end_us - m.start_us)
            if stack:  # the parent's exclusive time loses this child's
                out[range_group(stack[-1].label)] -= length
            else:
                top_level += length
            out[range_group(m.label)] += length
            stack.append(m)
        out[""] += max(0.0, (step.end_us - step.start_us) - top_level)
    return {k: max(0.0, v) for k, v in sorted(out.items())}


def decode_step_breakdown(kernels: list[AttributedKernel], instances: dict[str, set],
                          spans: list[RangeSpan] | None = None) -> dict | None:
    """Return the kernels inside decode-step ranges by innermost module range, or None when the window has no step.

    {"version", "steps": decode-step range instances, "module_ranges": whether any module range was pushed,
    "rows": [[module group ("" outside every module range), kernel name, category, launches, us], ...]}: all
    steps together, each kernel once, in the innermost module range enclosing its launch inside its step; with the
    ranges' host spans, also "host_us": {module group: host µs over all steps} (host_time_by_module).
    """
    steps = {(label, key) for label, keys in instances.items() if range_group(label) == STEP_GROUP for key in keys}
    if not steps:
        return None
    per: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0.0])
    for k in kernels:
        groups = [range_group(label) for label, _ in k.ranges]
        if STEP_GROUP not in groups:
            continue
        modules = [g for g in groups[groups.index(STEP_GROUP) + 1:] if g not in PHASE_GROUPS]
        slot = per[(modules[-1] if modules else "", k.name)]
        slot[0] += 1
        slot[1] += k.duration_us
    out = {"version": DECODE_STEPS_VERSION, "steps": len(steps),
           "module_ranges": any(range_group(label) not in PHASE_GROUPS for label in instances),
           "rows": [[module, name, categorize(name), n, us] for (module, name), (n, us) in sorted(per.items())]}
    host = host_time_by_module(spans) if spans else None
    if host is not None:
        out["host_us"] = host
    return out


def build_kernel_table(
    kernels: list[AttributedKernel],
    instances: dict[str, set],
    *,
    source: str,
    unit: str,
    innermost_only: bool = False,
    meta: dict | None = None,
    spans: list[RangeSpan] | None = None,
) -> KernelTable:
    """Return the KernelTable of a window from its attributed kernels and range instances.

    `instances` maps each range label to the instance keys seen (instances that launched no
    kernel count too: they make the per-instance figures honest). With innermost_only, a
    kernel counts only in its innermost range (exclusive view); otherwise in every enclosing
    range group once (the nvtx_kern_sum view). `spans`, the range instances' host spans where the collector saw them,
    add the host time per module range to meta["decode_steps"].
    """
    group_instances: dict[str, set] = defaultdict(set)
    for label, keys in instances.items():
        group_instances[range_group(label)].update((label, k) for k in keys)
    # per group -> per instance -> per kernel name -> [count, us]
    per: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: [0, 0.0])))
    cats: dict[str, list] = defaultdict(lambda: [0, 0.0])
    total_us = 0.0
    for k in kernels:
        total_us += k.duration_us
        cat = cats[categorize(k.name)]
        cat[0] += 1
        cat[1] += k.duration_us
        chosen: dict[str, tuple] = {}
        ranges = k.ranges[-1:] if innermost_only else k.ranges
        for label, key in ranges:  # outermost first: the innermost instance of a group wins
            chosen[range_group(label)] = (label, key)
        if not chosen:
            chosen[NO_RANGE] = (NO_RANGE, None)
            group_instances[NO_RANGE].add((NO_RANGE, None))
        for group, inst in chosen.items():
            group_instances[group].add(inst)
            slot = per[group][inst][k.name]
            slot[0] += 1
            slot[1] += k.duration_us

    rows: list[KernelRow] = []
    summaries: list[RangeSummary] = []
    for group in sorted(group_instances):
        insts = sorted(group_instances[group], key=repr)
        n = len(insts)
        names = sorted({name for inst in insts for name in per[group].get(inst, {})})
        for name in names:
            counts = [per[group].get(inst, {}).get(name, [0, 0.0]) for inst in insts]
            ran = [c for c in counts if c[0]]
            launches = sum(c[0] for c in counts)
            rows.append(KernelRow(
                range=group, kernel=name, category=categorize(name), instances=n, kernels=launches,
                kernels_per_instance=launches / n,
                gpu_us_per_instance_median=statistics.median(c[1] for c in ran),
                total_us=sum(c[1] for c in counts), instances_ran=len(ran),
            ))
        inst_counts = [sum(v[0] for v in per[group].get(inst, {}).values()) for inst in insts]
        inst_us = [sum(v[1] for v in per[group].get(inst, {}).values()) for inst in insts]
        by_cat: dict[str, int] = defaultdict(int)
        for inst in insts:
            for name, (count, _) in per[group].get(inst, {}).items():
                by_cat[categorize(name)] += count
        summaries.append(RangeSummary(
            range=group, instances=n, kernels_per_instance=sum(inst_counts) / n,
            kernels_per_instance_median=statistics.median(inst_counts),
            gpu_us_per_instance_median=statistics.median(inst_us), total_us=sum(inst_us),
            kernels_per_instance_by_category={c: v / n for c, v in sorted(by_cat.items())},
        ))
    categories = [
        CategoryRow(cat, cats[cat][0], cats[cat][1], cats[cat][1] / total_us if total_us else 0.0)
        for cat in CATEGORIES if cat in cats
    ]
    meta = dict(meta or {})
    steps = decode_step_breakdown(kernels, instances, spans)
    if steps is not None:
        meta["decode_steps"] = steps
    return KernelTable(
        source=source, unit=unit, scope="innermost" if innermost_only else "inclusive",
        rows=rows, ranges=summaries, categories=categories, total_kernels=len(kernels),
        total_us=total_us, meta=meta,
    )


# The JSON types a stored field may hold, by its annotation (the dataclasses above; `from __future__ import
# annotations` keeps them as text).
_FIELD_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "dict": (dict,), "int | None": (int, type(None)),
                "float | None": (int, float, type(None))}


def _typed(cls, d, where: str, skip: tuple[str, ...] = ()):
    """Return cls(**d) when d holds every field of cls with its JSON type and finite numbers; BenchInputError naming
    the first field that does not (a hand-edited or foreign file must not reach the report's arithmetic)."""
    import dataclasses
    import math

    at = f"{where}: " if where else ""
    if not isinstance(d, dict):
        raise BenchInputError(f"{at}{type(d).__name__}, not an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(d) - set(fields) - set(skip)
    if unknown:
        raise BenchInputError(f"{at}unknown field(s) {sorted(unknown)[:5]}")
    out = {}
    for name, f in fields.items():
        if name not in d:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BenchInputError(f"{at}lacks {name!r}")
            continue
        value, kinds = d[name], _FIELD_TYPES.get(str(f.type))
        if kinds is None:  # nested lists, converted by the caller
            out[name] = value
            continue
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise BenchInputError(f"{at}{name} is {value!r}, not {str(f.type)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise BenchInputError(f"{at}{name} is {value!r}, not a finite number")
        if isinstance(value, (int, float)) and value < 0:
            raise BenchInputError(f"{at}{name} is {value!r}: counts and times are never negative")
        out[name] = value
    return cls(**out)
