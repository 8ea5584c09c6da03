"""`bench profile`: kernel tables and a timeline for a short fixed window of selected cells.

Parses the flags and calls bench.profiling.driver.profile_matrix: one session process per
cell (optionally under nsys or ncu), one profile record per cell in <out>/<matrix>.jsonl, each
cell's kernel table printed (docs/guide/profiling.md).
"""

from __future__ import annotations

from pathlib import Path

from bench.cli import add_matrix_arguments, load_selected_matrix


def register(sub) -> None:
    p = sub.add_parser("profile", help="kernel counts per RMSNorm/attention call and a trace, for a few decode steps",
                       description="Profile a few decode steps of each selected hf cell in a fresh worker: kernels per "
                                   "RMSNorm and attention call (NVTX ranges per module), their GPU time, and a trace "
                                   "(torch.profiler, or nsys with --tool nsys); one profile record per cell in "
                                   "profiles/<matrix>.jsonl, which `bench report` turns into the kernel panel "
                                   "(docs/guide/profiling.md).")
    add_matrix_arguments(p, "profile only matching cells, e.g. precision=bf16,max_batch_size=1")
    p.add_argument("--tool", choices=("torch", "nsys", "ncu"), default="torch",
                   help="collector: torch.profiler (default), nsys (Nsight Systems), ncu (Nsight Compute: one decode step "
                        "against the roofline)")
    p.add_argument("--decode-steps", type=int, default=4,
                   help="decode steps in the window (after one prefill; harness-loop cells: the steps alone)")
    p.add_argument("--batches", type=int, default=1,
                   help="batches of max_batch_size requests in the window (generate cells; harness-loop cells "
                        "profile the first batch's decode steps)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured windows before timing")
    p.add_argument("--processes", type=int, default=1,
                   help="session processes per cell, one window each (default 1). A host-bound step (eager, on a GPU) "
                        "moves from process to process; `bench compare` attributes from the mean of one invocation's "
                        "windows, so 3 keep one unusual process from standing for the runs")
    p.add_argument("--patterns", default=None,
                   help="comma-separated module class/name patterns for ranges (default *RMSNorm,*Attention,*MLP,*DecoderLayer,lm_head)")
    p.add_argument("--out", default="profiles", help="output folder (default profiles/)")
    p.add_argument("--store", help="profile record store (default <out>/<matrix>.jsonl)")
    p.add_argument("--nsys", default=None,
                   help="nsys executable (default: $BENCH_NSYS, else nsys on PATH, else NVIDIA's install folders)")
    p.add_argument("--ncu", default=None,
                   help="ncu executable (default: $BENCH_NCU, else ncu on PATH, else NVIDIA's install folders)")
    p.add_argument("--ncu-metrics", choices=("full", "traffic"), default="full",
                   help="ncu's metrics per kernel: full (time, DRAM bytes, ncu's DRAM and SM %% of peak; 9 replay passes "
                        "a kernel on an H200) or traffic (time and DRAM bytes, the roofline columns alone; 1 pass: the "
                        "eager qwen-7b-shape step in about a minute)")
    p.add_argument("--no-progress", action="store_true", help="no per-cell progress lines on stderr")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per cell before the session is killed")
    p.set_defaults(func=cmd_profile, requests=None, trials=None)


def cmd_profile(args) -> int:
    from bench.profiling.driver import ProfileSettings, parse_patterns, profile_matrix

    settings = ProfileSettings(tool=args.tool, decode_steps=args.decode_steps, batches=args.batches, warmup=args.warmup,
                               timeout=args.timeout, patterns=parse_patterns(args.patterns), nsys=args.nsys,
                               ncu=args.ncu, ncu_metrics=args.ncu_metrics, progress=not args.no_progress,
                               processes=args.processes)
    settings.check()  # before the matrix loads
    matrix = load_selected_matrix(args)
    store_path = Path(args.store) if args.store else Path(args.out) / f"{matrix.name}.jsonl"
    _, failed = profile_matrix(matrix, settings, Path(args.out), store_path)
    return 1 if failed else 0
