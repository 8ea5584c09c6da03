"""Planted and real regressions of one cell, each explained by `bench compare --profile`: does the first row of the
attribution name what was changed?

Product commands only, each printed as it runs: `bench run --profile-window` of each baseline cell and each changed
cell (its own matrix file and store, `--runs` fresh processes, each of which profiles one decode-step window through
the model it timed, after its trials), then per change `bench compare BASE HEAD --ignore-option KEY --profile --json`
(which attributes the regressed cell from the windows of the very processes it compares; a side whose runs have none,
as a store measured before, is profiled in sessions as before), and last the summary table: per change, the first row of its attribution (module range, else kernel
category), whether it names the responsible module or category, and the share of the step-time change explained.
The figures are all `bench compare`'s (its --json); this script only compares the first row's name with the
expected ones, listed with each change below. On the GPU a change against a host-bound baseline (eager, generate)
is not run where that baseline's processes spread their TPOT by more than the product's 10 % on this machine start
(`host_unstable`): such a host hides the regression itself, and the summary says why instead.

Run from the repository root:

    python -m scripts.planted_regressions                       # the GPU set on qwen-7b-shape (prints its estimate)
    DEVICE=cpu CHANGES=mlp-twice,extra-rmsnorm python -m scripts.planted_regressions   # qwen-tiny on the CPU

Environment: DEVICE (cuda | cpu), CHANGES (comma-separated names; default: every change the device runs, see
`CHANGES=list`), PART (1-4: the ten changes in four parts of under 10 minutes each; on an H100 on 2026-12-06 they
took 248, 220, 173 and 67 s, docs/measurements/2026-12-06-h100-planted-regressions.md), WORK (stores, profiles, engines; default /tmp/planted-work: kept between calls, so a second call
resumes: `bench run` skips the stored cells and `bench compare` finds the stored profiles), OUT (summary.md and
each change's compare.md / compare.json; default WORK), RUNS (processes a side; default RUNS_OF
below on cuda, 2 on cpu), CONFIDENCE (0.99 on cuda, 0.95 on cpu: with 2 runs a side a shared CPU's spread between
processes hides even a 9x change at 99 %), TURNS (1: a host-bound baseline's changes are measured in turns with it,
one matrix and one `bench run` per option changed (round k: process k of every cell), and compared round by round,
`bench compare S S --base-only plant=none --head-only plant=...`, a paired test: `turn_groups`; a drift both sides
share cancels in each round's ratio, but processes that differ at random do not, so the host-stability guard below
applies to the baseline's rounds too, except for the plants: a plant is not built, so the baseline and its plants run
in one process a round, one after the other (`shares_process`), and share its host speed; neither the guard nor the
precheck holds them back; their trials are interleaved (the run setting order = "interleaved", INTERLEAVED_TRIALS
rounds of one trial of each cell a process), and `host_steadiness`, a fresh process probing the host for STEADY_S
seconds, says whether the host's speed moves by more than half inside a process; with ORDER=cells the cells are
measured one after the other as before 2026-12-07 and such a host holds the plants back), CORES (the matrices' run
setting `cores`, bench.machine.cores: "scheduled", the default; "fastest" on cuda pins each process's trials to the cores that probe fastest as they begin: the H100
machines' vCPUs ran at two speeds on 2026-12-07, but which were slow changed within seconds, and it did not steady
them), HOST_PRECHECK (with CORES=scheduled only; 0: skip `host_precheck`, which probes the host's speed in a few fresh
processes before any host-bound change and runs none where they differ by more than half).

On a machine without git (the GPU machine's copy of the tree) BENCH_COMMIT is set to "planted-tree" unless given:
`bench compare --profile` profiles a side only where its records name this checkout's commit.

Substitutions for the issue's list, each because the harness cannot express it as one option of one cell (cells
are matched by `--ignore-option`; a precision change makes another cell): CUDA graphs off (no compile mode
without CUDA graphs: `compile-off` covers the step without them), int8wo with another tuning digest
(`freeze-off`: another compiled graph of one cell, which `bench compare` marks "kernels differ" and still
explains), the LM head in fp32 (`linears-twice`: every matmul reads its weights twice), padding to a larger batch
(the harness cuts batches of the requests there are and pads none: `flex-attention`, another real configuration).
Three of the issue's are measured the other way round or not at all, as the H100 showed (2026-12-06): static ->
dynamic cache made transformers' eager `generate` 12.6 % faster, so the regression is `static-cache` (dynamic -> static); sdpa
-> eager attention moved the batch-1 eager step by under 5 % (no regression to explain at this shape), so its place
is taken by `activation-repeated` (the MLP's SiLU run 20 times: one small elementwise kernel a layer each); Inductor's
coordinate-descent tuning made the compiled step 7.4 % faster, so the regression is `coordinate-descent-off`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Baseline cells: bf16 (fp32 on the CPU), batch 1, static cache (generate-dynamic: transformers' own default).
BASELINES = {
    "eager": {"attn_implementation": "sdpa", "cache": "static", "compile": "off", "decode_loop": "harness"},
    "compiled": {"attn_implementation": "sdpa", "cache": "static", "compile": "reduce-overhead", "decode_loop": "harness"},
    "compiled-frozen": {"attn_implementation": "sdpa", "cache": "static", "compile": "reduce-overhead",
                        "decode_loop": "harness", "freeze_weights": "on"},
    "generate-dynamic": {"attn_implementation": "sdpa", "cache": "dynamic", "compile": "off", "decode_loop": "generate"},
    "compiled-tuned": {"attn_implementation": "sdpa", "cache": "static", "compile": "reduce-overhead",
                       "decode_loop": "harness", "compile_tuning": "coordinate-descent"},
}
# Options at their defaults name the same cell as no option at all (bench/backends/hf/config.py: keeps_ids_at_default):
# a changed cell equal to a baseline once these are dropped is that baseline's store, measured once.
DEFAULTS = {"freeze_weights": "off", "compile_tuning": "default"}
# name -> (baseline, changed options, rows that name it (module range or kernel category), devices,
#          estimated seconds on the GPU for the changed cell's runs and its profile)
CHANGES = {
    "mlp-twice": ("eager", {"plant": "Qwen2MLP:{n}"}, {"MLP"}, ("cuda", "cpu"), 67),
    "extra-rmsnorm": ("eager", {"plant": "Qwen2RMSNorm:{n}"}, {"RMSNorm"}, ("cuda", "cpu"), 67),
    "rotary-outside": ("eager", {"plant": "Qwen2RotaryEmbedding:{n}"}, {"outside any range"}, ("cuda", "cpu"), 67),
    "linears-twice": ("eager", {"plant": "Linear:{n}"}, {"gemm"}, ("cuda", "cpu"), 67),
    "activation-repeated": ("eager", {"plant": "SiLUActivation:{n}"}, {"MLP", "elementwise"}, ("cuda", "cpu"), 67),
    "flex-attention": ("eager", {"attn_implementation": "flex_attention"}, {"attention"}, ("cuda",), 72),
    "static-cache": ("generate-dynamic", {"cache": "static"}, {"attention", "copy"}, ("cuda", "cpu"), 67),
    "compile-off": ("compiled", {"compile": "off"}, {"launch gaps and idle"}, ("cuda",), 52),
    "freeze-off": ("compiled-frozen", {"freeze_weights": "off"}, {"gemm"}, ("cuda",), 55),
    "coordinate-descent-off": ("compiled-tuned", {"compile_tuning": "default"}, {"gemm", "norm/reduction"},
                               ("cuda",), 85),
}
# How many times a plant runs its module: twice on the GPU (an activation 20 times: one small kernel a layer); on the
# CPU qwen-tiny's MLPs, norms and rotary are about 1 % of a step each (its 151,936-row lm_head is most of it), so they
# run enough times to be most of the step.
PLANT_N = {"cuda": {"Linear": 2, "Qwen2RotaryEmbedding": 50, "SiLUActivation": 20},
           "cpu": {"Linear": 5, "Qwen2RotaryEmbedding": 1000, "SiLUActivation": 1000}}
PLANT_DEFAULT = {"cuda": 2, "cpu": 300}
# Estimated seconds on the GPU for a baseline's runs and its profile, from the H100 (2026-12-06, forked workers): an
# eager 7B-shape `bench run` of 5 processes about 50 s (12 s of the zygote's imports, then 5-8 s a process), its
# torch.profiler sessions 15 s for the first (the zygote's imports) and about 6 s for each of the other two
# (`bench compare --profile` profiles 3 processes a side); a compiled cell built cold about 100 s, its profile
# sessions 15-30 s each. The run prints its own times.
BASELINE_S = {"eager": 77, "compiled": 135, "compiled-frozen": 135, "generate-dynamic": 77, "compiled-tuned": 135}
# Processes a side (RUNS overrides): the eager 7B cells are host-bound on the GPU (the GPU busy about half the step),
# so their runs differ by 4-15 % between processes, and 2 a side at 99 % confidence missed a +19 % step (2026-12-06).
RUNS_OF = {"eager": 5, "generate-dynamic": 5, "compiled": 2, "compiled-frozen": 2, "compiled-tuned": 2}
# Baselines whose step is host-bound on the GPU: a change against one is run only where the baseline's processes agree
# (host_unstable), since a host whose speed moves between processes hides the regression itself.
HOST_BOUND = ("eager", "generate-dynamic")
# host_precheck: fresh processes probed before any host-bound change is run on the GPU, and the most the slowest
# probe may exceed the fastest by (x) for them to run
PRECHECK_PROCESSES = 8
PRECHECK_MAX = 1.5
# host_steadiness: how long one fresh process probes the host before changes measured in their baseline's own
# processes run (a round of the eager plants' six cells took about a minute on the H100)
STEADY_S = 20
# Trials of each cell a process where a baseline and its changes share that process (TURNS=1, a plant), taken in
# turns (the run setting order = "interleaved"): one trial of every cell a round, so that a host whose speed changes
# within seconds weighs on the baseline and its changes alike (on an H100 start of 2026-12-07 the probe loop moved
# 1.30-2.43 ms between the cells of one process, each measured in turn, and judged no plant)
INTERLEAVED_TRIALS = 4
# The ten changes in parts of under 10 minutes each (one device call each; WORK kept between them): PART=1..4.
PARTS = {
    "1": ["mlp-twice", "extra-rmsnorm", "rotary-outside", "linears-twice", "activation-repeated"],
    "2": ["flex-attention", "static-cache", "compile-off"],
    "3": ["freeze-off"],
    "4": ["coordinate-descent-off"],
}
SCALE = {  # the workload and model per device
    "cuda": {"model": "qwen-7b-shape", "precision": "bf16", "num_requests": 4, "input_len": 128, "output_len": 16},
    "cpu": {"model": "qwen-tiny", "precision": "fp32", "num_requests": 1, "input_len": 8, "output_len": 4},
}


def options_of(change: str, device: str) -> tuple[str, dict, dict]:
    """Return (baseline name, the baseline's options, the changed cell's options) of a change on a device."""
    base, changed, _, _, _ = CHANGES[change]
    opts = dict(changed)
    if "plant" in opts:
        cls = opts["plant"].split(":")[0]
        opts["plant"] = f"{cls}:{PLANT_N[device].get(cls, PLANT_DEFAULT[device])}"
    return base, dict(BASELINES[base]), {**BASELINES[base], **opts}


def matrix_text(name: str, options: dict, device: str, runs: int, baseline: dict | None = None,
                cores: str = "scheduled", trials: int = 1, order: str = "cells") -> str:
    """Return a one-cell (or, with list options, several-cell) matrix; `baseline` names the option values of the
    baseline cell where several cells share backend, precision and batch size (the turns matrices); `cores`, `trials`
    and `order` the run settings (bench.spec.cells.RunSettings)."""
    s = SCALE[device]
    opts = "".join(f'{k} = [{", ".join(chr(34) + x + chr(34) for x in (v if isinstance(v, list) else [v]))}]\n'
                   for k, v in options.items())
    base = "" if not baseline else ("baseline = { " + ", ".join(
        [f'backend = "hf", precision = "{s["precision"]}", max_batch_size = 1']
        + [f'{k} = "{v}"' for k, v in baseline.items()]) + " }\n")
    return (f'name = "{name}"\nbackends = ["hf"]\nmodel = "{s["model"]}"\ndevice = "{device}"\n'
            f'precisions = ["{s["precision"]}"]\nmax_batch_sizes = [1]\nworkloads = ["syn"]\ntrials = {trials}\nruns = {runs}\n'
            f'warmup = 1\ncores = "{cores}"\norder = "{order}"\n{base}[options]\n{opts}[workload.syn]\nsource = "synthetic"\nnum_requests = {s["num_requests"]}\n'
            f'input_len = {s["input_len"]}\noutput_len = {s["output_len"]}\n')


def bench(args: list[str], work: Path, log) -> int:
    """Run one product command in the work folder; return its exit status (its output goes to the log and here)."""
    line = "bench " + " ".join(args)
    print(f"$ {line}", flush=True)
    log.write(f"\n$ {line}\n")
    log.flush()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "bench", *args], cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    return done.returncode


def main() -> int:
    device = os.environ.get("DEVICE", "cuda")
    if device not in SCALE:
        print(f"DEVICE must be cuda or cpu, not {device!r}", file=sys.stderr)
        return 2
    runnable = [c for c, spec in CHANGES.items() if device in spec[3]]
    if os.environ.get("CHANGES") == "list":
        for c in runnable:
            base, base_opts, head_opts = options_of(c, device)
            print(f"{c}: baseline {base} {base_opts}, changed {({k: v for k, v in head_opts.items() if base_opts.get(k) != v})}; "
                  f"explained when the first row is one of {sorted(CHANGES[c][2])}")
        return 0
    part = os.environ.get("PART")
    if part is not None and part not in PARTS:
        print(f"PART must be one of {sorted(PARTS)}, not {part!r}", file=sys.stderr)
        return 2
    default = [c for c in PARTS[part] if c in runnable] if part else runnable
    chosen = [c.strip() for c in os.environ.get("CHANGES", ",".join(default)).split(",") if c.strip()]
    unknown = [c for c in chosen if c not in runnable]
    if unknown:
        print(f"unknown change(s) for {device}: {unknown}; choose from {runnable}", file=sys.stderr)
        return 2
    work = Path(os.environ.get("WORK", "/tmp/planted-work")).resolve()
    out = Path(os.environ.get("OUT", str(work))).resolve()
    runs = os.environ.get("RUNS")
    if runs is not None and not (runs.isdigit() and 2 <= int(runs) <= 100):
        print(f"RUNS must be a whole number of processes a side from 2 to 100 (a verdict needs 2), not {runs!r}",
              file=sys.stderr)
        return 2
    confidence = os.environ.get("CONFIDENCE", "0.99" if device == "cuda" else "0.95")
    from bench.machine.cores import POLICIES

    cores = os.environ.get("CORES", "scheduled")
    # before any work; `bench run` would refuse a CPU cell's "fastest" too (bench.spec.matrix.check_settings)
    if cores not in POLICIES or (cores == "fastest" and device != "cuda"):
        print(f"CORES must be 'scheduled' or, on cuda, 'fastest', not {cores!r}", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["BENCH_ALLOW_CORRUPTION"] = "1"  # option plant is for tests like this one only
    if "BENCH_COMMIT" not in os.environ and (shutil.which("git") is None or not (ROOT / ".git").exists()):
        os.environ["BENCH_COMMIT"] = "planted-tree"

    baselines = sorted({CHANGES[c][0] for c in chosen})
    estimate = sum(BASELINE_S[b] for b in baselines) + sum(CHANGES[c][4] for c in chosen)
    scale = "" if device == "cuda" else " (the GPU's figures; a CPU takes longer per cell, a loaded one several times)"
    print(f"{len(chosen)} change(s) on {device} over {len(baselines)} baseline cell(s): about {estimate // 60} min "
          f"{estimate % 60} s{scale}, less what {work} already holds", flush=True)
    if device == "cuda" and estimate > 540 and part is None and "CHANGES" not in os.environ:
        print("  more than one 10-minute device call: run it in parts, PART=1 to PART=4 "
              + "; ".join(f"PART={p}: {', '.join(cs)}" for p, cs in PARTS.items()), flush=True)
    log = open(out / "planted.log", "a")
    t0 = time.time()
    statuses = {}
    skipped: dict[str, str] = {}  # change -> why it was not run (its baseline's host could not judge it)
    turns = turn_groups(chosen, device) if os.environ.get("TURNS") == "1" else {}
    interleave = os.environ.get("ORDER", "interleaved") == "interleaved"
    # pinned processes (CORES=fastest) run on the cores the product probes for each: fresh unpinned ones say nothing;
    # changes measured in the baseline's own processes (shares_process) need no even host
    between = [CHANGES[c][0] for c in chosen if not any(c in cs and shares_process(k) for (_, k), cs in turns.items())]
    uneven = _precheck(device, between) if cores == "scheduled" else ""
    # changes that share their baseline's processes need a host that keeps its speed inside one process instead
    within = [b for (b, k) in turns if shares_process(k)]
    drifting = _steadycheck(device, within) if cores == "scheduled" else ""
    if drifting and interleave:  # said, not held: the turns within each process are what answers such a host
        print("  the changes sharing their baseline's processes run anyway: their trials are interleaved "
              f"({INTERLEAVED_TRIALS} rounds of one trial each a process)", flush=True)
        drifting = ""
    for (base_name, key), changes in turns.items():  # one matrix: the baseline and its changes, measured in turns
        _, base_opts, _ = options_of(changes[0], device)
        one_process = shares_process(key)
        if one_process:
            print(f"  {', '.join(changes)}: measured in the baseline's own processes (option {key} is not built: "
                  "each round's process runs the baseline, then each change)", flush=True)
        held = drifting if one_process else uneven
        if held:  # no device time on what this machine start cannot judge
            skipped.update({c: f"not run ({held})" for c in changes})
            print(f"  {', '.join(changes)}: not run: {held}", flush=True)
            continue
        name = f"planted-{base_name}-turns-{key}"
        values = [base_opts.get(key, "none")] + [options_of(c, device)[2][key] for c in changes]
        n_runs = int(runs) if runs else RUNS_OF[base_name] if device == "cuda" else 2
        turned = {"trials": INTERLEAVED_TRIALS, "order": "interleaved"} if one_process and interleave else {}
        (work / f"{name}.toml").write_text(matrix_text(name, {**base_opts, key: values}, device, n_runs,
                                                        baseline={key: values[0]}, cores=cores, **turned))
        if bench(["run", "--matrix", f"{name}.toml", "--no-progress", "--profile-window"], work, log) != 0:
            print(f"  bench run {name} failed: see {out / 'planted.log'}", flush=True)
        store = f"results/{name}.jsonl"
        # rounds whose processes spread the baseline beyond the product's limit hide the change in the pairs' spread
        # too (an H100 start of 2026-12-07: 26-42 ms; the paired test said 5 rounds detect only changes above 66 %)
        # (in one process a round the pairs share the host's speed: the paired test's own power note judges them)
        why = host_unstable(work / store, {key: values[0]}) if device == "cuda" and not one_process else ""
        for change, value in zip(changes, values[1:], strict=True):
            report, data = out / f"{change}.compare.md", out / f"{change}.compare.json"
            data.unlink(missing_ok=True)
            if why:  # measured and kept in the store; the row says why it is not judged
                skipped[change] = f"not judged ({why})"
                print(f"  {change}: not judged: {why}", flush=True)
                continue
            statuses[change] = bench(["compare", store, store, "--base-only", f"{key}={values[0]}", "--head-only",
                                      f"{key}={value}", "--profile", "--confidence", confidence, "--markdown",
                                      str(report), "--json", str(data)], work, log)
            print(f"  {change}: {row(change, statuses[change], data, CHANGES[change][2], name)[1:]} "
                  f"({time.time() - t0:.0f} s so far)", flush=True)
    for change in [c for c in chosen if not any(c in cs for cs in turns.values())]:
        base_name, base_opts, head_opts = options_of(change, device)
        head = head_name(change, device)
        files = {}
        for name, opts in ((f"planted-{base_name}", base_opts), (head, head_opts)):
            why = (uneven or host_unstable(work / f"results/planted-{base_name}.jsonl") if name == head else uneven) \
                if device == "cuda" and base_name in HOST_BOUND else ""
            if why:  # measured, but this machine start cannot judge a host-bound change: spend no device time on it
                skipped[change] = f"not run ({why})"
                print(f"  {change}: not run: {why}", flush=True)
                break
            # a side that is another baseline (compile-off's eager side) runs that baseline's processes
            n_runs = int(runs) if runs else RUNS_OF.get(name.removeprefix("planted-"), RUNS_OF[base_name]) \
                if device == "cuda" else 2
            (work / f"{name}.toml").write_text(matrix_text(name, opts, device, n_runs, cores=cores))
            files[name] = f"results/{name}.jsonl"
            if bench(["run", "--matrix", f"{name}.toml", "--no-progress", "--profile-window"], work, log) != 0:
                print(f"  bench run {name} failed: see {out / 'planted.log'}", flush=True)
        if change in skipped:
            continue
        keys = sorted(k for k in set(base_opts) | set(head_opts) if base_opts.get(k) != head_opts.get(k))
        report, data = out / f"{change}.compare.md", out / f"{change}.compare.json"
        data.unlink(missing_ok=True)  # an earlier call's answer must not stand for this one's
        status = bench(["compare", *files.values(), "--ignore-option", ",".join(keys), "--profile", "--confidence",
                        confidence, "--markdown", str(report), "--json", str(data)], work, log)
        statuses[change] = status
        print(f"  {change}: {row(change, status, data, CHANGES[change][2], head)[1:]} ({time.time() - t0:.0f} s so far)",
              flush=True)
    # every change compared into OUT so far, this call's and earlier parts'
    summary = [row(c, statuses.get(c), out / f"{c}.compare.json", CHANGES[c][2], head_name(c, device)) for c in CHANGES
               if c in statuses or (out / f"{c}.compare.json").is_file()]
    summary += [[c, "-", "-", "-", ", ".join(sorted(CHANGES[c][2])), why, "-", "-", "-"]
                for c, why in skipped.items() if c not in statuses]
    table = ["| change | compare exit | first row (module range, else category) | first category | expected | names it | "
             "share of the step-time change explained | unexplained µs | profiled by this comparison (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    table += ["| " + " | ".join(r) + " |" for r in summary]
    named = sum(r[5] == "yes" for r in summary)
    text = (f"# Planted regressions on {device} ({SCALE[device]['model']})\n\n{named} of {len(summary)} planted "
            f"regressions explained (the first row names the responsible module or category). Commands and their "
            f"output: planted.log; each comparison: <change>.compare.md / .json.\n\n" + "\n".join(table) + "\n")
    (out / "summary.md").write_text(text)
    print("\n" + text)
    return 0


def _precheck(device: str, baselines: list[str]) -> str:
    """Return host_precheck()'s answer where a chosen change's baseline is host-bound on the GPU (printed either way);
    '' elsewhere, or with HOST_PRECHECK=0."""
    if device != "cuda" or not set(baselines) & set(HOST_BOUND) or os.environ.get("HOST_PRECHECK") == "0":
        return ""
    why, probes = host_precheck()
    print(f"host precheck: the probe loop took {', '.join(f'{p:.2f}' for p in probes)} ms in {len(probes)} fresh "
          f"processes" + (f": {why}" if why else ": even enough to run the host-bound changes"), flush=True)
    return why


def _steadycheck(device: str, baselines: list[str]) -> str:
    """Return host_steadiness()'s answer where a change measured in its host-bound baseline's processes is chosen on
    the GPU (printed either way); '' elsewhere, or with HOST_PRECHECK=0."""
    if device != "cuda" or not set(baselines) & set(HOST_BOUND) or os.environ.get("HOST_PRECHECK") == "0":
        return ""
    why, probes = host_steadiness()
    shown = f"{min(probes):.2f}-{max(probes):.2f} ms over {len(probes)} probes" if probes else "no probe read"
    print(f"host steadiness: the probe loop took {shown} in one process for {STEADY_S} s"
          + (f": {why}" if why else ": steady enough to pair cells inside a process"), flush=True)
    return why


def host_steadiness(seconds: float = STEADY_S) -> tuple[str, list[float]]:
    """Return (why this machine start should measure no change in its baseline's own processes, or ''; the probes):
    the host's pure-Python speed probed again and again in one fresh process for `seconds`. Cells that share a process
    share its host speed only while it holds: on an H100 start of 2026-12-07 the loop ran 1.30-2.43 ms inside each
    process, each cell's TPOT went with it, and the five plants measured in 475 s were judged none. '' where the
    slower of the probes (the slowest tenth left out) is within PRECHECK_MAX of the faster (the fastest tenth left
    out), or the probes could not be read (nothing then is held back)."""
    code = ("import statistics, time; from bench.machine.host_load import host_probe_times\n"
            f"end = time.monotonic() + {float(seconds)!r}\n"
            "while time.monotonic() < end:\n"
            "    print(statistics.median(host_probe_times()), flush=True)\n"
            "    time.sleep(0.2)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=seconds + 60)
        probes = [float(x) for x in done.stdout.split()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return "", []
    if len(probes) < 5:
        return "", probes
    ranked = sorted(probes)
    cut = len(ranked) // 10
    low, high = ranked[cut], ranked[len(ranked) - 1 - cut]
    if low <= 0 or high <= PRECHECK_MAX * low:
        return "", probes
    return (f"the host's probe loop took {low:.2f}-{high:.2f} ms inside one process over {seconds:g} s, the fastest "
            f"and slowest tenth left out (+{high / low - 1:.0%}, over +{PRECHECK_MAX - 1:.0%}): cells sharing a process "
            "would not share its speed; run it on another machine start (HOST_PRECHECK=0 runs it anyway)"), probes


def host_precheck(processes: int = PRECHECK_PROCESSES) -> tuple[str, list[float]]:
    """Return (why this machine start should run no host-bound change, or ''; the probes): the host's pure-Python
    speed (bench.machine.host_load's probe, the dispatch a host-bound step is made of) in `processes` fresh
    processes, a few seconds in all. On an H100 start of 2026-12-07 the eager cells' processes ran that loop
    1.25-2.49 ms and their TPOT 26-42 ms; measuring them in turns took 379 s and judged nothing. '' where the
    slowest is within PRECHECK_MAX of the fastest (one of each left out), or a probe could not be read (nothing then
    is held back)."""
    code = "import statistics; from bench.machine.host_load import host_probe_times; print(statistics.median(host_probe_times()))"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    probes = []
    for _ in range(processes):
        try:
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
            probes.append(float(done.stdout.strip()))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return "", probes
    # one process at each end left out: a single slow start (this VM, idle: 1.76 ms beside seven of 1.17-1.33) is not
    # a host whose processes differ
    ranked = sorted(probes)[1:-1] if len(probes) >= 4 else sorted(probes)
    low, high = ranked[0], ranked[-1]
    if low <= 0 or high <= PRECHECK_MAX * low:
        return "", probes
    return (f"the host's probe loop took {low:.2f}-{high:.2f} ms across {len(probes)} fresh processes, the fastest and "
            f"slowest left out (+{high / low - 1:.0%}, over +{PRECHECK_MAX - 1:.0%}): a host-bound step's processes "
            "would spread as much; run it on another machine start (HOST_PRECHECK=0 runs it anyway)"), probes


def turn_groups(chosen: list[str], device: str) -> dict[tuple[str, str], list[str]]:
    """Return {(host-bound baseline, the option its changes set): those chosen changes} (TURNS=1): each group is one
    matrix, the baseline and its changes measured in turns by one `bench run` (round k: process k of every cell),
    compared round by round (`bench compare S S --base-only K=base --head-only K=change`, a paired test:
    bench.results.paired), so a host that drifts between processes moves both sides of each round alike. The five
    plants of the eager baseline are one matrix of six cells; flex-attention and static-cache one of two each."""
    out: dict[tuple[str, str], list[str]] = {}
    for c in chosen:
        base, changed = CHANGES[c][0], CHANGES[c][1]
        if base in HOST_BOUND and len(changed) == 1:
            out.setdefault((base, next(iter(changed))), []).append(c)
    return out


def shares_process(key: str) -> bool:
    """Return whether cells that differ only in hf option `key` share a build key, and so one worker process a round
    (`bench run` runs a build key's cells in one process, one after the other): option plant, set per pass
    (bench.backends.hf.corrupt.replant). Such a pair's rounds share the host's speed, which on the H100 hosts of
    2026-12-07 moved a host-bound eager step by 19-27 % between processes and left two plants unjudged."""
    from bench.backends.hf.config import HFConfig

    option = HFConfig.options.get(key)
    return option is not None and not option.in_build_key


def host_unstable(store: Path, options: dict | None = None) -> str:
    """Return why this machine start cannot judge a host-bound change against the baseline in `store`: its latest
    run's processes spread their TPOT by more than the product's own limit (bench.results.stats.MAX_CV), so a
    regression of its size cannot be told from the spread (on 2026-12-06 an idle H100 host's eager step took
    23.3-42.0 ms across five processes, and no change of 17-31 % was judged). The host probes of the runs are quoted
    (bench.machine.telemetry.spread_causes). '' when the runs are steady, or there are fewer than two. `options`: the
    baseline's option values in a store of several cells (a turns matrix); None: the store's only cell."""
    from bench.results import query, stats
    from bench.results.compare import host_causes

    if not store.is_file():
        return ""
    rows = query.select(query.measurements(query.load([store]))).rows  # each cell's latest run
    if options is not None:
        from bench.results.paired import cell_matches

        rows = [r for r in rows if cell_matches(r.cell, options)]
    spread = rows[0].spread("tpot_median_ms") if len(rows) == 1 else None
    if spread is None or spread.runs < 2 or spread.run_cv is None or spread.run_cv <= stats.MAX_CV:
        return ""
    causes = host_causes(rows[0], "tpot_median_ms")
    return (f"the baseline's {spread.runs} processes ran TPOT {min(spread.run_means):.2f}-{max(spread.run_means):.2f} "
            f"ms, a spread of {spread.run_cv:.0%} (over {stats.MAX_CV:.0%}) on this machine start"
            + (f"; {causes[0]}" if causes else "") + ": run it on another machine start")


def head_name(change: str, device: str) -> str:
    """Return the changed cell's matrix name: a baseline's where its options are that baseline's (measured once)."""
    _, _, head_opts = options_of(change, device)
    def bare(opts):
        return {k: v for k, v in opts.items() if DEFAULTS.get(k) != v}
    same = [b for b, opts in BASELINES.items() if bare(opts) == bare(head_opts)]
    return f"planted-{same[0]}" if same else f"planted-{change}"


def row(change: str, status: int | None, data: Path, expected: set[str], head: str) -> list[str]:
    """Return one summary row from `bench compare --json`: its first rows, whether one names the change, the share."""
    if not data.is_file():
        return [change, str(status), "-", "-", ", ".join(sorted(expected)), "no (compare failed)", "-", "-", "-"]
    got = json.loads(data.read_text())
    # what `bench compare --profile` spent profiling each side (a side profiled for an earlier change is reused; one
    # whose timed processes profiled their own windows costs no session)
    timed = [(s, w.get("window_cost_s")) for c in got["attribution"]["attributions"][:1]
             for s, w in c["windows"].items() if w.get("from") == "the timed processes"]
    cost = ", ".join([f"{'head' if p['matrix'] == head else 'base'} {p['seconds']:.0f}" for p in got.get("profiled", [])]
                     + [f"{s}: its timed processes' windows" + (f" ({c[0]:.1f}-{c[1]:.1f} s each)" if c else "")
                        for s, c in timed]) or "none (stored)"
    status = got["exit_status"] if status is None else status
    cells = got["attribution"]["attributions"]
    if not cells:
        # rows not significant whose runs could not have seen the change: not judged, not "no regression" (a planted
        # +12 % over 5 rounds that detect only changes above 37 %, an H100 of 2026-12-07)
        weak = [r["detects_only"] for r in got["rows"] if r["verdict"] == "not significant" and r.get("detects_only")]
        if got["regressions"]:
            why = "; ".join([m["reason"] for m in got["attribution"]["missing"]] + got["attribution"]["notes"])[:200]
            names = f"no (not attributed: {why})"
        elif weak:
            names = f"not judged (not significant: these runs detect only changes above {min(weak):.0%})"
        else:
            names = "no (no regression)"
        return [change, str(status), "-", "-", ", ".join(sorted(expected)), names, "-", "-", cost]
    cell = cells[0]
    first, category = (cell["first"] or {}).get("name", "-"), cell["first_category"] or "-"
    share = cell["explained_share"]
    unexplained = cell["unexplained_us"]
    names = "yes" if first in expected or category in expected else "no"
    return [change, str(status), first, category, ", ".join(sorted(expected)), names,
            "-" if share is None else f"{100 * share:.0f} %", "-" if unexplained is None else f"{unexplained:+.0f}", cost]


if __name__ == "__main__":
    raise SystemExit(main())
