"""What torch compiled in this process, and how long it took: read by the worker's log and the accuracy records.

torch keeps process-wide counters (`torch._dynamo.utils.counters`: FX graph and AOT cache hits and
misses) and phase timers (`compilation_time_metrics`). A snapshot before and after a
piece of work (a warm-up, an accuracy capture, an accuracy session's cell) says what that work compiled:
a miss there means compiling (and tuning) again.
"""

from __future__ import annotations

import sys

# The counters a snapshot holds, besides its phase seconds. Not Dynamo's `frames` counter: on torch 2.11 (H200,
# 2026-12-06) it read 0 in workers that compiled two graphs, so it would have said nothing compiled.
COUNTERS = ("fx_hit", "fx_miss", "aot_hit", "aot_miss", "aot_bypass")


def compile_counters() -> dict:
    """Return torch's compile-cache counts and compile-phase seconds so far in this process ({} before torch.compile ran):
    FX graph and AOT cache hits and misses, and torch's own phase timers (`dynamo_timed`'s
    compilation_time_metrics; phases nest, so a parent's time includes its children's). Two snapshots' difference
    (`counters_since`) says what one piece of work compiled: a miss there means compiling (and tuning) again."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {}
    fx, aot = utils.counters.get("inductor", {}), utils.counters.get("aot_autograd", {})
    out = {"fx_hit": fx.get("fxgraph_cache_hit", 0), "fx_miss": fx.get("fxgraph_cache_miss", 0),
           "aot_hit": aot.get("autograd_cache_hit", 0), "aot_miss": aot.get("autograd_cache_miss", 0),
           "aot_bypass": aot.get("autograd_cache_bypass", 0)}
    timed = getattr(utils, "compilation_time_metrics", None) or {}
    out["phases_s"] = {k: float(sum(v)) for k, v in timed.items() if v}
    return out if any(v for k, v in out.items() if k != "phases_s") or out["phases_s"] else {}


def counters_since(before: dict, after: dict | None = None) -> dict:
    """Return what was compiled between two compile_counters() snapshots (after: now), phases that took no time left out."""
    after = compile_counters() if after is None else after
    if not after:
        return {}
    out = {k: v - before.get(k, 0) for k, v in after.items() if k != "phases_s"}
    was = before.get("phases_s", {})
    out["phases_s"] = {k: v - was.get(k, 0.0) for k, v in after["phases_s"].items() if v - was.get(k, 0.0) > 0.0005}
    return out


def describe_compile(counts: dict, shown: int = 6) -> str:
    """Return counts (compile_counters or counters_since) as one line: '' where nothing was compiled or looked up."""
    if not counts:
        return ""
    totals = sorted(((t, k) for k, t in counts["phases_s"].items()), reverse=True)[:shown]
    phases = ("; longest compile phases: " + ", ".join(f"{k} {t:.1f} s" for t, k in totals)) if totals else ""
    return (f"; FX graph cache {counts['fx_hit']} hit / {counts['fx_miss']} miss, "
            f"AOT cache {counts['aot_hit']} hit / {counts['aot_miss']} miss / {counts['aot_bypass']} bypassed{phases}")
