#!/usr/bin/env bash
# One device session's GPU checks, as a user runs them, within one call's budget (BUDGET_S, default 560 s):
#   1. the planted decode-path faults through the compiled harness loop: `bench accuracy --matrix
#      tests/data/gpu-faults.toml` (BENCH_ALLOW_CORRUPTION=1), its console and records (SKIP_FAULTS=1: not run);
#   2. optionally a study: `bench study --preset h200-study $STUDY_ARGS` (e.g. STUDY_ARGS="--steps
#      run,accuracy,report"; `bench study` takes no --only: a slice of the preset's cells is `bench accuracy
#      --preset h200-study --only ...`, or a matrix file of its own), its study.json, report and stores;
#   3. the GPU-marked tests (pytest -m gpu; TESTS_K narrows them with -k) in the time left.
# A side script: it installs the carried wheels (.whl/, see gpu_study_session.sh) and calls pytest and bench only;
# every figure is theirs. Usage (repo root, on the GPU machine): OUT=<folder> bash scripts/gpu_checks_session.sh
set -uo pipefail
LOG_NAME=checks.log
source "$(dirname "$0")/gpu_session_common.sh"
BUDGET_S=${BUDGET_S:-560}
left() { local l=$((BUDGET_S - ($(date +%s) - T0))); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
git log -1 --format='commit %H' 2>/dev/null; git status --short 2>/dev/null | head -5

if [ "${SKIP_FAULTS:-0}" != "1" ]; then  # SKIP_FAULTS=1: where an earlier session ran them on this code
  stamp "BENCH_ALLOW_CORRUPTION=1 bench accuracy --matrix tests/data/gpu-faults.toml"
  BENCH_ALLOW_CORRUPTION=1 timeout "$(left "${FAULTS_TIMEOUT:-200}")" $PY -m bench accuracy --matrix tests/data/gpu-faults.toml
  stamp "bench accuracy exited $?"
  gzip -c results/gpu-faults-accuracy.jsonl > "$OUT/gpu-faults-accuracy.jsonl.gz" 2>/dev/null
fi

if [ -n "${STUDY_ARGS:-}" ]; then
  stamp "bench study --preset h200-study $STUDY_ARGS --no-progress"
  S0=$(date +%s)
  timeout "$(left "${STUDY_TIMEOUT:-400}")" $PY -m bench study --preset h200-study $STUDY_ARGS --no-progress
  stamp "bench study exited $? after $(($(date +%s) - S0)) s"
  $PY -m bench study --preset h200-study $STUDY_ARGS --dry-run > "$OUT/dry-run-after.txt" 2>&1
  cp dashboards/h200-study/study.json dashboards/h200-study/report.md "$OUT/" 2>/dev/null
  tar czf "$OUT/study-data.tar.gz" results/h200-study*.jsonl profiles/h200-study.jsonl dashboards/h200-study/*.md \
    results/accuracy/h200-study/*/*/*.log results/accuracy/h200-study/*/*/reference.json results/logs 2>/dev/null
fi

T=$(left "${TESTS_TIMEOUT:-330}")
if [ "$T" -gt 30 ]; then
  stamp "GPU-marked tests (limit $T s) ${TESTS_K:+-k $TESTS_K}"
  timeout "$T" $PY -m pytest -m gpu tests/test_gpu.py tests/test_accuracy.py -v -rs -p no:cacheprovider \
    --durations=15 --junitxml="$OUT/gpu-tests.xml" -k "not test_gpu_faults_in_the_compiled_loop ${TESTS_K:+and ($TESTS_K)}"
  stamp "pytest exited $?"
fi
stamp "done"
